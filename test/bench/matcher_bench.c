/*
 * Microbenchmark of the software tag matcher against two baselines:
 *
 *   list   one list in posting order, scanned from the oldest entry;
 *   ucp    a model of UCP's expected queue (src/ucp/tag/tag_match.*, UCX
 *          1.13): 1021 buckets of singly linked queues for full-mask
 *          receives, one queue for all wildcard receives, and when that
 *          queue is not empty a merge of the bucket and the wildcard queue
 *          in sequence order.
 *
 * Each run keeps N receives posted: a timed batch of matches (arrivals in
 * random order, each for a posted receive) is followed by an untimed
 * bookkeeping step and a timed batch of posts that tops the matcher up to N
 * again.  Batches grow up to N/16 matches (at most 4096) while they take
 * less than 5 ms, so N stays within 6% of its value; small N uses several
 * independent matchers so that a timed batch holds at least MIN_BATCH_OPS
 * matches.  Every implementation replays the same random sequence; the
 * first batch of results is compared with the tag matcher's.
 *
 * Tags are laid out as Open MPI's pml ucx does (24-bit tag, 20-bit source,
 * 20-bit communicator).  Wildcard receives use communicators of their own,
 * so that the share of wildcards among the posted receives stays as chosen
 * and an arrival meant for an exact receive is not taken by a wildcard.
 */

#include "matcher_bench.h"

#include <matcher/tag_matcher.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


/* Open MPI's pml ucx tag layout: user tag | source rank | communicator */
#define TAG_SHIFT        40
#define SRC_SHIFT        20
#define FIELD_MASK       0xfffffull
#define MASK_ANY_TAG     ((1ull << TAG_SHIFT) - 1)
#define MASK_ANY_SOURCE  (~(FIELD_MASK << SRC_SHIFT))

#define MIN_BATCH_OPS    64     /* matches per timed batch, at least */
#define FIRST_BATCH      16     /* per matcher; doubles while batches are fast */
#define FAST_BATCH_NS    5000000.0


static uint64_t make_tag(uint64_t tag, uint64_t src, uint64_t ctx)
{
    return (tag << TAG_SHIFT) | (src << SRC_SHIFT) | ctx;
}

static inline uint64_t rng_next(uint64_t *state)
{
    /* xorshift64* */
    uint64_t x = *state;

    x     ^= x >> 12;
    x     ^= x << 25;
    x     ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dull;
}

static double now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}


/* --- the tag matcher ---------------------------------------------------- */

typedef struct {
    tm_matcher_t       m;
    tm_matcher_entry_t *entries;
} tmb_ctx_t;

static void *tmb_create(uint32_t nids)
{
    tmb_ctx_t *ctx = calloc(1, sizeof(*ctx));

    ctx->entries = calloc(nids, sizeof(*ctx->entries));
    if ((ctx->entries == NULL) || (tm_matcher_init(&ctx->m, NULL) != 0)) {
        abort();
    }
    return ctx;
}

static void tmb_destroy(void *arg)
{
    tmb_ctx_t *ctx = arg;

    tm_matcher_cleanup(&ctx->m);
    free(ctx->entries);
    free(ctx);
}

static void tmb_post(void *arg, uint32_t id, uint64_t tag, uint64_t mask)
{
    tmb_ctx_t *ctx = arg;

    if (tm_matcher_post(&ctx->m, &ctx->entries[id], tag, mask, NULL) != 0) {
        abort();
    }
}

static void tmb_match_batch(void *arg, const uint64_t *tags, size_t n,
                            uint32_t *ids)
{
    tmb_ctx_t *ctx = arg;
    tm_matcher_entry_t *e;
    size_t i;

    for (i = 0; i < n; ++i) {
        e      = tm_matcher_match(&ctx->m, tags[i]);
        ids[i] = (e == NULL) ? NO_ID : (uint32_t)(e - ctx->entries);
    }
}


/* --- list: posting order, scanned --------------------------------------- */

typedef struct list_req {
    struct list_req *next;
    struct list_req *prev;
    uint64_t        tag;
    uint64_t        mask;
} list_req_t;

typedef struct {
    list_req_t head;      /* sentinel */
    list_req_t *reqs;
} list_ctx_t;

static void *list_create(uint32_t nids)
{
    list_ctx_t *ctx = calloc(1, sizeof(*ctx));

    ctx->reqs      = calloc(nids, sizeof(*ctx->reqs));
    ctx->head.next = ctx->head.prev = &ctx->head;
    return ctx;
}

static void list_destroy(void *arg)
{
    list_ctx_t *ctx = arg;

    free(ctx->reqs);
    free(ctx);
}

static void list_post(void *arg, uint32_t id, uint64_t tag, uint64_t mask)
{
    list_ctx_t *ctx = arg;
    list_req_t *req = &ctx->reqs[id];

    req->tag             = tag & mask;
    req->mask            = mask;
    req->prev            = ctx->head.prev;
    req->next            = &ctx->head;
    ctx->head.prev->next = req;
    ctx->head.prev       = req;
}

static void list_match_batch(void *arg, const uint64_t *tags, size_t n,
                             uint32_t *ids)
{
    list_ctx_t *ctx = arg;
    list_req_t *req;
    size_t i;

    for (i = 0; i < n; ++i) {
        ids[i] = NO_ID;
        for (req = ctx->head.next; req != &ctx->head; req = req->next) {
            if ((tags[i] & req->mask) == req->tag) {
                req->prev->next = req->next;
                req->next->prev = req->prev;
                ids[i]          = (uint32_t)(req - ctx->reqs);
                break;
            }
        }
    }
}


static const impl_t impls[] = {
    {"tm_matcher", tmb_create, tmb_destroy, tmb_post, tmb_match_batch},
    UCP_MODEL_IMPL,
    {"list",       list_create, list_destroy, list_post, list_match_batch},
};
#define NUM_IMPLS (sizeof(impls) / sizeof(impls[0]))


/* --- workloads ------------------------------------------------------------ */

typedef struct {
    const char *name;
    unsigned   permille_any_tag;     /* ANY_TAG receives, communicator 1 */
    unsigned   permille_any_source;  /* ANY_SOURCE receives, communicator 2 */
} workload_t;

static const workload_t workloads[] = {
    {"exact",             0,   0},
    {"10% ANY_TAG",       100, 0},
    {"5%+5% ANY_TAG/SRC", 50,  50},
};
#define NUM_WORKLOADS (sizeof(workloads) / sizeof(workloads[0]))

/*
 * A receive to post.  Exact receives use communicator 0 and wildcards their
 * own communicator, so that an arrival meant for an exact receive is not
 * taken by a wildcard and the share of wildcards stays what was asked.
 */
static void workload_recv(const workload_t *w, uint64_t *rng, uint64_t *tag,
                          uint64_t *mask)
{
    unsigned r         = rng_next(rng) % 1000;
    uint64_t user_tag  = rng_next(rng) & 0xffffff;

    if (r < w->permille_any_tag) {
        *tag  = make_tag(0, rng_next(rng) % 64, 1);
        *mask = MASK_ANY_TAG;
    } else if (r < w->permille_any_tag + w->permille_any_source) {
        *tag  = make_tag(user_tag, 0, 2);
        *mask = MASK_ANY_SOURCE;
    } else {
        *tag  = make_tag(user_tag, rng_next(rng) % 1024, 0);
        *mask = MASK_FULL;
    }
}


/* --- the driver ----------------------------------------------------------- */

/* One matcher and what the driver knows of it */
typedef struct {
    void     *ctx;
    uint32_t *posted;   /* ids of the posted receives */
    uint32_t *pos;      /* index of an id in posted, NO_ID if not posted */
    uint32_t nposted;
    uint32_t *free_ids;
    uint32_t nfree;
    uint64_t *tag;      /* per id */
    uint64_t *mask;
    uint64_t *arrivals; /* tags of the next batch */
    uint32_t *matched;  /* ids it matched, then ids to post */
    uint32_t ntopost;
} inst_t;

typedef struct {
    double   match_ns;  /* per match */
    double   post_ns;   /* per post */
    uint64_t matches;
    uint32_t first_n;   /* matches in the first batch of matcher 0 */
    int      capped;    /* stopped by the time budget */
} result_t;

typedef struct {
    unsigned reps;
    double   budget_ns;  /* per repetition and implementation */
} options_t;

static void inst_post_one(const impl_t *impl, const workload_t *w,
                          inst_t *in, uint64_t *rng)
{
    uint32_t id = in->free_ids[--in->nfree];

    workload_recv(w, rng, &in->tag[id], &in->mask[id]);
    impl->post(in->ctx, id, in->tag[id], in->mask[id]);
    in->pos[id]               = in->nposted;
    in->posted[in->nposted++] = id;
}

/*
 * Choose receives to bring the matcher back to nposted (their ids go to
 * in->matched); the driver counts them posted from now on.  Returns how many.
 */
static uint32_t inst_prepare_posts(const workload_t *w, inst_t *in,
                                   uint32_t nposted, uint64_t *rng)
{
    uint32_t n = 0, id;

    while (in->nposted < nposted) {
        id = in->free_ids[--in->nfree];
        workload_recv(w, rng, &in->tag[id], &in->mask[id]);
        in->pos[id]               = in->nposted;
        in->posted[in->nposted++] = id;
        in->matched[n++]          = id;
    }
    return n;
}

static void inst_forget(inst_t *in, uint32_t id)
{
    uint32_t i    = in->pos[id];
    uint32_t last = in->posted[--in->nposted];

    in->posted[i]             = last;
    in->pos[last]             = i;
    in->pos[id]               = NO_ID;
    in->free_ids[in->nfree++] = id;
}

static void inst_init(inst_t *in, const impl_t *impl, const workload_t *w,
                      uint32_t nposted, uint32_t nids, uint64_t *rng)
{
    uint32_t i, j, tmp;

    in->ctx      = impl->create(nids);
    in->posted   = malloc(nids * sizeof(uint32_t));
    in->pos      = malloc(nids * sizeof(uint32_t));
    in->free_ids = malloc(nids * sizeof(uint32_t));
    in->tag      = malloc(nids * sizeof(uint64_t));
    in->mask     = malloc(nids * sizeof(uint64_t));
    in->arrivals = malloc(nids * sizeof(uint64_t));
    in->matched  = malloc(nids * sizeof(uint32_t));
    in->nposted  = 0;
    in->nfree    = nids;

    /* Ids in random order, as after a long run of reuse */
    for (i = 0; i < nids; ++i) {
        in->free_ids[i] = i;
        in->pos[i]      = NO_ID;
    }
    for (i = nids - 1; i > 0; --i) {
        j               = rng_next(rng) % (i + 1);
        tmp             = in->free_ids[i];
        in->free_ids[i] = in->free_ids[j];
        in->free_ids[j] = tmp;
    }

    while (in->nposted < nposted) {
        inst_post_one(impl, w, in, rng);
    }
}

static void inst_cleanup(inst_t *in, const impl_t *impl)
{
    impl->destroy(in->ctx);
    free(in->posted);
    free(in->pos);
    free(in->free_ids);
    free(in->tag);
    free(in->mask);
    free(in->arrivals);
    free(in->matched);
}

/* Tags of n messages, each for a distinct posted receive, in random order */
static void inst_arrivals(inst_t *in, uint32_t n, uint64_t *rng)
{
    uint32_t j, k, id;

    for (j = 0; j < n; ++j) {
        k                      = j + rng_next(rng) % (in->nposted - j);
        id                     = in->posted[k];
        in->posted[k]          = in->posted[j];
        in->posted[j]          = id;
        in->pos[in->posted[k]] = k;
        in->pos[id]            = j;
        /* Bits outside the mask are anything the sender chose */
        in->arrivals[j] = in->tag[id] | (rng_next(rng) & ~in->mask[id]);
    }
}

/*
 * One repetition: ninst matchers with nposted receives each; match batches
 * until max_matches or the time budget is reached.
 */
static result_t run_rep(const impl_t *impl, const workload_t *w,
                        uint32_t nposted, uint32_t batch, uint32_t ninst,
                        uint64_t max_matches, const options_t *opt,
                        uint64_t seed, uint32_t *first_ids)
{
    result_t res        = {0, 0, 0, 0, 0};
    double match_ns     = 0, post_ns = 0, start, t0, batch_ns;
    uint64_t posts      = 0;
    uint32_t b          = (batch < FIRST_BATCH) ? batch : FIRST_BATCH;
    uint64_t rng        = seed;
    inst_t *inst        = calloc(ninst, sizeof(*inst));
    uint32_t i, j, id;

    for (i = 0; i < ninst; ++i) {
        inst_init(&inst[i], impl, w, nposted, nposted + batch, &rng);
    }

    start = now_ns();
    while (res.matches < max_matches) {
        if (now_ns() - start > opt->budget_ns) {
            res.capped = 1;
            break;
        }

        for (i = 0; i < ninst; ++i) {
            inst_arrivals(&inst[i], b, &rng);
        }

        t0 = now_ns();
        for (i = 0; i < ninst; ++i) {
            impl->match_batch(inst[i].ctx, inst[i].arrivals, b,
                              inst[i].matched);
        }
        batch_ns  = now_ns() - t0;
        match_ns += batch_ns;

        if (res.matches == 0) {
            res.first_n = b;
            if (first_ids != NULL) {
                memcpy(first_ids, inst[0].matched, b * sizeof(uint32_t));
            }
        }

        /* Top up to nposted: new receives chosen, then posted timed */
        for (i = 0; i < ninst; ++i) {
            for (j = 0; j < b; ++j) {
                id = inst[i].matched[j];
                if (id != NO_ID) {
                    inst_forget(&inst[i], id);
                }
            }
            inst[i].ntopost = inst_prepare_posts(w, &inst[i], nposted, &rng);
            posts          += inst[i].ntopost;
        }

        t0 = now_ns();
        for (i = 0; i < ninst; ++i) {
            for (j = 0; j < inst[i].ntopost; ++j) {
                id = inst[i].matched[j];
                impl->post(inst[i].ctx, id, inst[i].tag[id], inst[i].mask[id]);
            }
        }
        post_ns += now_ns() - t0;

        res.matches += (uint64_t)b * ninst;
        if ((batch_ns < FAST_BATCH_NS) && (b * 2 <= batch)) {
            b *= 2;
        }
    }

    for (i = 0; i < ninst; ++i) {
        inst_cleanup(&inst[i], impl);
    }
    free(inst);

    res.match_ns = match_ns / res.matches;
    res.post_ns  = (posts != 0) ? post_ns / posts : 0;
    return res;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;

    return (x > y) - (x < y);
}

static double median(double *v, unsigned n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return (n % 2) ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double clock_overhead_ns(void)
{
    const int n = 100000;
    double t0 = now_ns();
    int i;

    for (i = 0; i < n; ++i) {
        now_ns();
    }
    return (now_ns() - t0) / n;
}

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [-r reps] [-t budget_ms] [-n posted[,posted...]]\n"
            "  -r  repetitions; the median is reported (default 5)\n"
            "  -t  time budget per repetition and implementation, after which\n"
            "      matching stops early (default 150 ms)\n"
            "  -n  numbers of posted receives (default 1,1024,16384,65536)\n"
            "  -i  implementations to run besides tm_matcher, a bit mask:\n"
            "      2 ucp, 4 list (default all)\n"
            "  -w  workloads, a bit mask: 1 exact, 2 ANY_TAG, 4 mixed\n"
            "      (default all)\n",
            prog);
}

int main(int argc, char **argv)
{
    options_t opt         = {5, 150e6};
    uint32_t sizes[16]    = {1, 1024, 16384, 65536};
    unsigned nsizes       = 4;
    unsigned impl_set     = ~0u, workload_set = ~0u;
    uint32_t first_ids[2][FIRST_BATCH], first_n[2] = {0, 0};
    unsigned wi, si, ii, r;
    double match[16], post[16], ours = 0;
    uint64_t matches;
    int c, capped, mismatch;
    char *s;

    while ((c = getopt(argc, argv, "r:t:n:i:w:h")) != -1) {
        switch (c) {
        case 'r':
            opt.reps = strtoul(optarg, NULL, 0);
            if ((opt.reps == 0) || (opt.reps > 16)) {
                opt.reps = 5;
            }
            break;
        case 't':
            opt.budget_ns = strtod(optarg, NULL) * 1e6;
            break;
        case 'i':
            impl_set = strtoul(optarg, NULL, 0);
            break;
        case 'w':
            workload_set = strtoul(optarg, NULL, 0);
            break;
        case 'n':
            for (nsizes = 0, s = strtok(optarg, ","); (s != NULL) && (nsizes < 16);
                 s = strtok(NULL, ",")) {
                sizes[nsizes++] = strtoul(s, NULL, 0);
            }
            break;
        default:
            usage(argv[0]);
            return 1;
        }
    }

    printf("# ns per match (median and minimum of %u repetitions), N receives\n"
           "# kept posted, arrivals in random order; post = ns per post (median)\n"
           "# when topping up; x ours = median match time / tm_matcher's.\n"
           "# Batches of at least %u matches timed with CLOCK_MONOTONIC "
           "(%.1f ns per reading).\n"
           "# '*': stopped by the %.0f ms budget per repetition (the list at\n"
           "# large N is quadratic): fewer matches, same per-match figure.\n\n",
           opt.reps, MIN_BATCH_OPS, clock_overhead_ns(), opt.budget_ns / 1e6);
    printf("%-18s %7s  %-10s %10s %9s %9s %9s %8s\n", "workload", "posted",
           "impl", "matches", "match ns", "(min)", "post ns", "x ours");

    for (wi = 0; wi < NUM_WORKLOADS; ++wi) {
        if (!(workload_set & (1u << wi))) {
            continue;
        }
        for (si = 0; si < nsizes; ++si) {
            uint32_t n     = sizes[si] ? sizes[si] : 1;
            uint32_t batch = (n >= 16) ? n / 16 : 1;
            uint32_t ninst = 1;
            uint64_t max_matches;

            if (batch > 4096) {
                batch = 4096;
            }
            if (batch < MIN_BATCH_OPS) {
                ninst = (MIN_BATCH_OPS + batch - 1) / batch;
            }
            max_matches = 1ull << 18;

            for (ii = 0; ii < NUM_IMPLS; ++ii) {
                if ((ii != 0) && !(impl_set & (1u << ii))) {
                    continue;
                }
                matches  = 0;
                capped   = 0;
                mismatch = 0;
                for (r = 0; r < opt.reps; ++r) {
                    uint32_t *ids = (r == 0) ? first_ids[(ii == 0) ? 0 : 1] :
                                    NULL;
                    result_t res  = run_rep(&impls[ii], &workloads[wi], n,
                                            batch, ninst, max_matches, &opt,
                                            0x9e3779b97f4a7c15ull * (r + 1) +
                                            wi * 1000 + n, ids);
                    match[r]  = res.match_ns;
                    post[r]   = res.post_ns;
                    matches  += res.matches;
                    capped   |= res.capped;
                    if (r == 0) {
                        first_n[ii != 0] = res.first_n;
                        if (ii != 0) {
                            mismatch = (first_n[0] != first_n[1]) ||
                                       memcmp(first_ids[0], first_ids[1],
                                              first_n[0] *
                                              sizeof(uint32_t)) != 0;
                        }
                    }
                }

                double m = median(match, opt.reps); /* sorts match[] */
                if (ii == 0) {
                    ours = m;
                }
                printf("%-18s %7u  %-10s %9" PRIu64 "%s %9.1f %9.1f %9.1f %8.1f%s\n",
                       workloads[wi].name, n, impls[ii].name,
                       matches / opt.reps, capped ? "*" : " ", m, match[0],
                       median(post, opt.reps), m / ours,
                       mismatch ? "  MISMATCH with tm_matcher" : "");
                fflush(stdout);
            }
        }
        printf("\n");
    }
    return 0;
}
