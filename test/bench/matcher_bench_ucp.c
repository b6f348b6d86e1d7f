/*
 * matcher_bench's model of UCP's expected queue (src/ucp/tag/tag_match.*,
 * UCX 1.13): 1021 buckets of singly linked queues for full-mask receives,
 * one queue for all wildcard receives, and when that queue is not empty a
 * merge of the bucket and the wildcard queue in sequence order.
 */
#include "matcher_bench.h"

#include <stdlib.h>

/* UCP hashes into 1021 values but XORs two of them, so it allocates 1024 */
#define UCPM_HASH_SIZE  1021
#define UCPM_HASH_ALLOC 1024

typedef struct ucpm_req {
    struct ucpm_req *next;  /* queue link, as ucs_queue_elem_t */
    uint64_t        tag;
    uint64_t        mask;
    uint64_t        sn;
} ucpm_req_t;

/*
 * As ucp_request_queue_t: a ucs_queue_head_t (whose last element's next is
 * not kept NULL) and the count of requests matched in software.
 */
typedef struct {
    ucpm_req_t      *head;
    ucpm_req_t      **ptail;
    unsigned        sw_count;
    unsigned        block_count;
} ucpm_queue_t;

typedef struct {
    ucpm_queue_t    *hash;
    ucpm_queue_t    wildcard;
    uint64_t        sn;
    unsigned        sw_all_count;
    ucpm_req_t      *reqs;
} ucpm_ctx_t;

static void ucpm_queue_init(ucpm_queue_t *q)
{
    q->ptail = &q->head;
}

static inline int ucpm_queue_is_empty(const ucpm_queue_t *q)
{
    return q->ptail == &q->head;
}

static inline void ucpm_queue_push(ucpm_ctx_t *ctx, ucpm_queue_t *q,
                                   ucpm_req_t *req)
{
    *q->ptail = req;
    q->ptail  = &req->next;
    ++q->sw_count;
    ++ctx->sw_all_count;
}

/* ucp_tag_exp_delete() of a request not offloaded */
static inline void ucpm_queue_del_iter(ucpm_ctx_t *ctx, ucpm_queue_t *q,
                                       ucpm_req_t **iter)
{
    --ctx->sw_all_count;
    --q->sw_count;
    if (q->ptail == &(*iter)->next) {
        q->ptail = iter;
    }
    *iter = (*iter)->next;
}

static inline size_t ucpm_hash(uint64_t tag)
{
    return ((uint32_t)tag % UCPM_HASH_SIZE) ^
           ((uint32_t)(tag >> 32) % UCPM_HASH_SIZE);
}

static inline int ucpm_is_match(uint64_t tag, const ucpm_req_t *req)
{
    return ((tag ^ req->tag) & req->mask) == 0;
}

void *ucpm_create(uint32_t nids)
{
    ucpm_ctx_t *ctx = calloc(1, sizeof(*ctx));
    size_t i;

    ctx->hash = calloc(UCPM_HASH_ALLOC, sizeof(*ctx->hash));
    ctx->reqs = calloc(nids, sizeof(*ctx->reqs));
    for (i = 0; i < UCPM_HASH_ALLOC; ++i) {
        ucpm_queue_init(&ctx->hash[i]);
    }
    ucpm_queue_init(&ctx->wildcard);
    return ctx;
}

void ucpm_destroy(void *arg)
{
    ucpm_ctx_t *ctx = arg;

    free(ctx->hash);
    free(ctx->reqs);
    free(ctx);
}

void ucpm_post(void *arg, uint32_t id, uint64_t tag, uint64_t mask)
{
    ucpm_ctx_t *ctx = arg;
    ucpm_req_t *req = &ctx->reqs[id];

    req->tag  = tag;
    req->mask = mask;
    req->sn   = ctx->sn++;
    ucpm_queue_push(ctx, (mask == MASK_FULL) ? &ctx->hash[ucpm_hash(tag)] :
                    &ctx->wildcard, req);
}

static inline uint64_t ucpm_iter_sn(ucpm_req_t **iter)
{
    return (*iter == NULL) ? UINT64_MAX : (*iter)->sn;
}

/* ucp_tag_exp_search_all(): merge the bucket and the wildcard queue */
static ucpm_req_t *ucpm_search_all(ucpm_ctx_t *ctx, ucpm_queue_t *hash_q,
                                   uint64_t tag)
{
    ucpm_req_t **hash_iter, **wild_iter, ***iter, *req;
    uint64_t hash_sn, wild_sn, *sn_p;
    ucpm_queue_t *q;

    *hash_q->ptail        = NULL;
    *ctx->wildcard.ptail  = NULL;
    hash_iter             = &hash_q->head;
    wild_iter             = &ctx->wildcard.head;
    hash_sn               = ucpm_iter_sn(hash_iter);
    wild_sn               = ucpm_iter_sn(wild_iter);

    while (hash_sn != wild_sn) {
        if (hash_sn < wild_sn) {
            iter = &hash_iter;
            sn_p = &hash_sn;
            q    = hash_q;
        } else {
            iter = &wild_iter;
            sn_p = &wild_sn;
            q    = &ctx->wildcard;
        }

        req = **iter;
        if (ucpm_is_match(tag, req)) {
            ucpm_queue_del_iter(ctx, q, *iter);
            return req;
        }
        *iter = &req->next;
        *sn_p = ucpm_iter_sn(*iter);
    }
    return NULL;
}

/* ucp_tag_exp_search() */
static inline ucpm_req_t *ucpm_search(ucpm_ctx_t *ctx, uint64_t tag)
{
    ucpm_queue_t *q = &ctx->hash[ucpm_hash(tag)];
    ucpm_req_t **iter;

    if (!ucpm_queue_is_empty(&ctx->wildcard)) {
        return ucpm_search_all(ctx, q, tag);
    }

    for (iter = &q->head; iter != q->ptail; iter = &(*iter)->next) {
        if (ucpm_is_match(tag, *iter)) {
            ucpm_req_t *req = *iter;
            ucpm_queue_del_iter(ctx, q, iter);
            return req;
        }
    }
    return NULL;
}

void ucpm_match_batch(void *arg, const uint64_t *tags, size_t n,
                             uint32_t *ids)
{
    ucpm_ctx_t *ctx = arg;
    ucpm_req_t *req;
    size_t i;

    for (i = 0; i < n; ++i) {
        req    = ucpm_search(ctx, tags[i]);
        ids[i] = (req == NULL) ? NO_ID : (uint32_t)(req - ctx->reqs);
    }
}
