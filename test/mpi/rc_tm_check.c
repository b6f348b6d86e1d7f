/*
 * rc_tm MPI tests: shared helpers (see rc_tm_check.h).
 */
#include "rc_tm_check.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RT_SYMBOL "uct_rc_tm_counters_total"
/* The module may export more counters than the 13 we read: give it room */
#define RT_MAX_COUNTERS 256

int rt_rank = -1, rt_size = 0;
const char *rt_prog = "?";

/* The module's totals: "void f(uint64_t *counters)" (13 counters) in the
 * first version, "unsigned f(uint64_t *counters, unsigned max)" (returns how
 * many it filled) now.  Called as the second with a buffer large enough for
 * either; the first ignores max, and then its return value is not used. */
#define RT_NAME_SYMBOL "uct_rc_tm_counter_name"
typedef unsigned (*rt_counters_fn_t)(uint64_t *counters, unsigned max);
typedef const char *(*rt_name_fn_t)(unsigned index);
static rt_counters_fn_t rt_counters_fn;
/* Where each of our counters is in the module's array (by name if the
 * module exports counter names, else the fixed order) */
static int rt_index[RT_NUM_COUNTERS];
static rt_name_fn_t rt_name_fn;
/* All the module's counters summed over the ranks, at rt_end() */
static uint64_t rt_all_sum[RT_MAX_COUNTERS];

static const char *rt_names[RT_NUM_COUNTERS] = {
    "RX_EXP", "RX_EAGER_UNEXP", "RX_RNDV_EXP", "RX_RNDV_UNEXP",
    "RX_RNDV_INCOMPLETE", "RX_RNDV_REQ_EXP", "RX_RNDV_REQ_UNEXP",
    "LIST_ADD", "LIST_DEL", "LIST_SYNC", "LIST_DEL_RACE", "LIST_FULL",
    "TX_RNDV"
};

const char *rt_counter_name(int idx)
{
    return (idx >= 0 && idx < RT_NUM_COUNTERS) ? rt_names[idx] : "?";
}

void rt_fail(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "FAIL %s rank %d/%d: %s\n", rt_prog, rt_rank, rt_size, msg);
    fflush(stderr);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1); /* MPI_Abort does not return, but never go on */
}

void rt_mpi_fail(const char *call, const char *file, int line, int rc)
{
    char err[MPI_MAX_ERROR_STRING];
    int len = 0;

    if (MPI_Error_string(rc, err, &len) != MPI_SUCCESS) {
        snprintf(err, sizeof(err), "error %d", rc);
    }
    rt_fail("%s:%d: %s returned %d (%s)", file, line, call, rc, err);
}

static void rt_map_counters(void)
{
    rt_name_fn_t name_fn = (rt_name_fn_t)dlsym(RTLD_DEFAULT, RT_NAME_SYMBOL);

    rt_name_fn = name_fn;
    const char *name;
    unsigned j;
    int i;

    for (i = 0; i < RT_NUM_COUNTERS; ++i) {
        rt_index[i] = i;
        if (name_fn == NULL) {
            continue;
        }
        rt_index[i] = -1;
        for (j = 0; j < RT_MAX_COUNTERS; ++j) {
            name = name_fn(j);
            if (name == NULL) {
                break;
            }
            if (!strcmp(name, rt_names[i])) {
                rt_index[i] = (int)j;
                break;
            }
        }
        if (rt_index[i] < 0) {
            rt_fail("the rc_tm module has no counter named %s", rt_names[i]);
        }
    }
}

void rt_init(int *argc, char ***argv, const char *prog, int min_ranks)
{
    const char *p = strrchr(prog, '/');

    rt_prog = p ? p + 1 : prog;
    if (MPI_Init(argc, argv) != MPI_SUCCESS) {
        fprintf(stderr, "FAIL %s: MPI_Init failed\n", rt_prog);
        exit(1);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &rt_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    /* Unbuffered output: lines from ranks that abort are not lost */
    setvbuf(stdout, NULL, _IOLBF, 0);

    rt_counters_fn = (rt_counters_fn_t)dlsym(RTLD_DEFAULT, RT_SYMBOL);
    if (rt_counters_fn == NULL) {
        rt_fail("rc_tm module is not loaded: symbol %s not found (%s); "
                "run with LD_PRELOAD=<builddir>/src/uct/rc_tm/.libs/"
                "libuct_rc_tm.so", RT_SYMBOL, dlerror());
    }
    rt_map_counters();
    if (rt_size < min_ranks) {
        rt_fail("needs at least %d ranks, got %d", min_ranks, rt_size);
    }
}

void rt_counters(rt_counters_t *out)
{
    uint64_t all[RT_MAX_COUNTERS];
    int i;

    memset(all, 0, sizeof(all));
    rt_counters_fn(all, RT_MAX_COUNTERS);
    for (i = 0; i < RT_NUM_COUNTERS; ++i) {
        out->c[i] = all[rt_index[i]];
    }
}

void rt_counters_allsum(const rt_counters_t *local, rt_counters_t *sum)
{
    RT_MPI(MPI_Allreduce((void*)local->c, sum->c, RT_NUM_COUNTERS,
                         MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD));
}

void rt_counters_print(const char *what, const rt_counters_t *c)
{
    char line[1024];
    int i, n = 0;

    if (rt_rank != 0) {
        return;
    }
    for (i = 0; i < RT_NUM_COUNTERS; ++i) {
        n += snprintf(line + n, sizeof(line) - n, " %s=%" PRIu64,
                      rt_names[i], c->c[i]);
    }
    printf("%s: rc_tm counters (%s):%s\n", rt_prog, what, line);
}

int rt_named_total(const char *name, uint64_t *value)
{
    const char *n;
    int i;

    if (rt_name_fn == NULL) {
        return 0;
    }
    for (i = 0; (i < RT_MAX_COUNTERS) && ((n = rt_name_fn(i)) != NULL); ++i) {
        if (!strcmp(n, name)) {
            *value = rt_all_sum[i];
            return 1;
        }
    }
    return 0;
}

uint64_t rt_rndv_matched_in_device(const rt_counters_t *sum)
{
    uint64_t matched = sum->c[RT_RX_RNDV_EXP] + sum->c[RT_RX_RNDV_REQ_EXP];

    if (matched > 0) {
        return matched;
    }
    if (sum->c[RT_TX_RNDV] > sum->c[RT_RX_RNDV_UNEXP]) {
        return sum->c[RT_TX_RNDV] - sum->c[RT_RX_RNDV_UNEXP];
    }
    return 0;
}

uint64_t rt_rndv_unexpected(const rt_counters_t *sum)
{
    return sum->c[RT_RX_RNDV_UNEXP] + sum->c[RT_RX_RNDV_REQ_UNEXP];
}

uint64_t rt_rndv_sent(const rt_counters_t *sum)
{
    return sum->c[RT_TX_RNDV] + sum->c[RT_RX_RNDV_REQ_EXP] +
           sum->c[RT_RX_RNDV_REQ_UNEXP];
}

/* xorshift-style pattern: depends on the seed and the byte offset, so that
 * a message delivered to the wrong receive (other seed) or shifted data
 * (other offset) is detected. */
static inline uint8_t rt_pattern(uint64_t seed, size_t i)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + (i >> 3) + 1;

    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return (uint8_t)(x >> (8 * (i & 7)));
}

void rt_fill(void *buf, size_t len, uint64_t seed)
{
    uint8_t *p = buf;
    size_t i;

    for (i = 0; i < len; ++i) {
        p[i] = rt_pattern(seed, i);
    }
}

long rt_verify(const void *buf, size_t len, uint64_t seed)
{
    const uint8_t *p = buf;
    size_t i;

    for (i = 0; i < len; ++i) {
        if (p[i] != rt_pattern(seed, i)) {
            return (long)i;
        }
    }
    return -1;
}

/* The module's counters that the checks do not use (only if it names
 * them), for the log */
static void rt_counters_print_extra(void)
{
    uint64_t all[RT_MAX_COUNTERS], tot[RT_MAX_COUNTERS];
    char line[2048];
    const char *name;
    int i, j, n = 0, used;

    if (rt_name_fn == NULL) {
        return;
    }
    memset(all, 0, sizeof(all));
    rt_counters_fn(all, RT_MAX_COUNTERS);
    RT_MPI(MPI_Allreduce(all, tot, RT_MAX_COUNTERS, MPI_UINT64_T, MPI_SUM,
                         MPI_COMM_WORLD));
    memcpy(rt_all_sum, tot, sizeof(rt_all_sum));
    if (rt_rank != 0) {
        return;
    }
    line[0] = '\0';
    for (i = 0; (i < RT_MAX_COUNTERS) && ((name = rt_name_fn(i)) != NULL);
         ++i) {
        for (used = 0, j = 0; j < RT_NUM_COUNTERS; ++j) {
            used |= (rt_index[j] == i);
        }
        if (!used && (n < (int)sizeof(line) - 64)) {
            n += snprintf(line + n, sizeof(line) - n, " %s=%" PRIu64, name,
                          tot[i]);
        }
    }
    if (n > 0) {
        printf("%s: other rc_tm counters:%s\n", rt_prog, line);
    }
}

void rt_end(rt_counters_t *sum)
{
    rt_counters_t local;

    /* Every rank has finished its traffic before counters are read */
    RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
    rt_counters(&local);
    rt_counters_allsum(&local, sum);
    rt_counters_print("sum over ranks", sum);
    rt_counters_print_extra();
}

int rt_finish(void)
{
    RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
    MPI_Finalize();
    if (rt_rank == 0) {
        printf("%s: OK (%d ranks)\n", rt_prog, rt_size);
    }
    return 0;
}

void rt_prime_offload(MPI_Comm comm)
{
    int rank, size, right, left;
    uint64_t out, in = 0;
    MPI_Request req;
    MPI_Comm dup;

    RT_MPI(MPI_Comm_dup(comm, &dup));
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    MPI_Comm_rank(dup, &rank);
    MPI_Comm_size(dup, &size);
    right = (rank + 1) % size;
    left  = (rank + size - 1) % size;
    out   = 0x5052494d45ull + rank; /* "PRIME" */
    /* Sent before the matching receive is posted (after the barrier):
     * it arrives unexpected at every rank */
    RT_MPI(MPI_Isend(&out, 1, MPI_UINT64_T, right, 7, dup, &req));
    RT_MPI(MPI_Barrier(dup));
    RT_MPI(MPI_Recv(&in, 1, MPI_UINT64_T, left, 7, dup, MPI_STATUS_IGNORE));
    RT_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
    RT_CHECK(in == 0x5052494d45ull + left, "prime message from %d: got %#"
             PRIx64, left, in);
    RT_MPI(MPI_Barrier(dup));
    RT_MPI(MPI_Comm_free(&dup));
}
