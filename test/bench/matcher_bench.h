/*
 * matcher_bench: what its implementations provide (matcher_bench.c drives
 * them; matcher_bench_ucp.c is the model of UCP's expected queue).
 */
#ifndef MATCHER_BENCH_H_
#define MATCHER_BENCH_H_

#include <stddef.h>
#include <stdint.h>

#define NO_ID            UINT32_MAX      /* nothing matched */
#define MASK_FULL        UINT64_MAX      /* a receive of one tag */

/*
 * The implementations: create with room for ids [0, nids), post id, match a
 * batch of tags returning the matched ids (NO_ID: nothing matched).
 */
typedef struct impl {
    const char *name;
    void       *(*create)(uint32_t nids);
    void       (*destroy)(void *ctx);
    void       (*post)(void *ctx, uint32_t id, uint64_t tag, uint64_t mask);
    void       (*match_batch)(void *ctx, const uint64_t *tags, size_t n,
                              uint32_t *ids);
} impl_t;

/* The model of UCP's expected queue (matcher_bench_ucp.c) */
void *ucpm_create(uint32_t nids);
void  ucpm_destroy(void *ctx);
void  ucpm_post(void *ctx, uint32_t id, uint64_t tag, uint64_t mask);
void  ucpm_match_batch(void *ctx, const uint64_t *tags, size_t n,
                       uint32_t *ids);

#define UCP_MODEL_IMPL \
    {"ucp 1021", ucpm_create, ucpm_destroy, ucpm_post, ucpm_match_batch}

#endif
