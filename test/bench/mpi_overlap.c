/*
 * Communication/computation overlap of one MPI message, receiver side.
 *
 * Two ranks: rank 0 receives, rank 1 sends.  Every measured iteration is a
 * triple, so that the three figures share the machine's noise:
 *
 *   transfer  rank 0 posts MPI_Irecv, tells rank 1 to go (a 4-byte
 *             MPI_Send), and waits (MPI_Wait); rank 1, told to go, posts
 *             MPI_Isend and waits for it.  Time on rank 0 from before the
 *             MPI_Irecv to the end of MPI_Wait.
 *   compute   rank 0 runs the busy loop alone, no message outstanding.
 *   overlap   as transfer, but between the go message and MPI_Wait rank 0
 *             runs the busy loop, without any MPI call.
 *
 * The go message makes sure the receive is posted before the send, so a
 * transport that matches in the device (rc_tm) finds it there.  Its round
 * trip is part of the transfer in both figures.
 *
 *   overlap = (transfer + compute - total) / transfer
 *
 * 1 when the whole transfer happened while rank 0 computed, 0 when none of
 * it did (the transfer starts only in MPI_Wait); the raw value may leave
 * [0, 1] by noise or when waiting costs more (or less) after computing.
 *
 * The busy loop is calibrated once (ns per step, the fastest of a few
 * runs); per size it runs for max(1.25 x transfer, floor), the transfer
 * time measured in the warm-up: a quarter more, so that it outlasts the
 * measured transfers when they are slower than the warm-up's, or the loop
 * faster than its calibration (both were seen, by up to 15 %).  Each
 * repetition is a batch of triples; a batch's figures are its medians, and
 * the table gives the median over the repetitions of each column, and the
 * overlap computed from them.
 *
 *   mpirun -np 2 mpi_overlap [-s 8,64k,1m,4m] [-r reps] [-n triples]
 *                            [-b seconds] [-w warm-up] [-f floor_us] [-R]
 *
 * -n: triples per batch (default: as many as -b seconds allow, 5 to
 * 2000); -R prints every repetition instead of the table, one line each:
 * "size,repetition,transfer_us,compute_us,total_us" after a line
 * "# size,repetition,transfer_us,compute_us,total_us"; other lines start
 * with '#' (perftest_compare.py reads them).  Progress goes to stderr, a
 * line per repetition.  The received data is checked after the warm-up
 * and after the last repetition of every size.
 *
 * Only MPI: it runs over any transport Open MPI's pml ucx is given.
 */
#include <mpi.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TAG_GO        11
#define TAG_DATA      12
#define TAG_PRIME     13
#define MAX_SIZES     32
#define MIN_TRIPLES   5
#define MAX_TRIPLES   2000

enum { GO_SEND = 1, GO_END = 0 };

typedef struct {
    size_t sizes[MAX_SIZES];
    int    nsizes;
    int    reps;
    int    triples;      /* 0: from the budget */
    double budget;       /* seconds per batch */
    int    warmup;       /* 0: from the budget */
    double floor_us;
    int    raw;
} options_t;

static int rank;

static void fail(const char *fmt, const char *arg)
{
    fprintf(stderr, "mpi_overlap (rank %d): ", rank);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

#define CHECK_MPI(_call) \
    do { if ((_call) != MPI_SUCCESS) fail("%s failed", #_call); } while (0)

static double now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

/*
 * The busy loop: a chain of dependent multiply-xorshift steps.  Each step
 * needs the previous result, the empty asm hides the value from the
 * optimiser (no closed form, no vectorising), and the result goes to a
 * volatile: the compiler can neither remove nor shorten it.  No memory
 * traffic, no system or MPI call.
 */
static volatile uint64_t compute_sink;

static __attribute__((noinline)) void compute(uint64_t steps)
{
    uint64_t x = compute_sink | 1;
    uint64_t i;

    for (i = 0; i < steps; ++i) {
        x = x * 0x9e3779b97f4a7c15ull + i;
        x ^= x >> 29;
        __asm__ volatile("" : "+r"(x));
    }
    compute_sink = x;
}

/* ns per step: the fastest of five runs of at least 20 ms each */
static double calibrate(void)
{
    uint64_t steps = 1000;
    double best = 0, t0, t;
    int i;

    for (;;) {
        t0 = now_us();
        compute(steps);
        t = now_us() - t0;
        if (t >= 20000) {
            break;
        }
        steps *= (t < 2000) ? 10 : 2;
    }
    best = t * 1e3 / steps;
    for (i = 0; i < 4; ++i) {
        t0 = now_us();
        compute(steps);
        t = (now_us() - t0) * 1e3 / steps;
        if (t < best) {
            best = t;
        }
    }
    return best;
}

static double median(double *v, int n);

/*
 * Steps of the busy loop that take target_us now: the calibration from the
 * start of the run, checked against the median of five runs of the loop
 * and corrected (twice at most).  A calibration alone was off by a factor
 * of two on a shared machine, where the start-up of the other rank and of
 * mpirun took CPU time from it.
 */
static uint64_t steps_for(double target_us, double *ns_step)
{
    uint64_t steps = (uint64_t)(target_us * 1e3 / *ns_step) + 1;
    double t[5], t0, took;
    int round, i;

    for (round = 0; round < 2; ++round) {
        for (i = 0; i < 5; ++i) {
            t0 = now_us();
            compute(steps);
            t[i] = now_us() - t0;
        }
        took = median(t, 5);
        if (took > 0.95 * target_us && took < 1.05 * target_us) {
            break;
        }
        *ns_step = took * 1e3 / steps;
        steps    = (uint64_t)(target_us * 1e3 / *ns_step) + 1;
    }
    return steps;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* sorts v */
static double median(double *v, int n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return (n % 2) ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static size_t parse_size(const char *text)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(text, &end);
    if (errno || end == text || v < 0) {
        return (size_t)-1;
    }
    switch (*end) {
    case 'k': case 'K': v *= 1 << 10; ++end; break;
    case 'm': case 'M': v *= 1 << 20; ++end; break;
    }
    if (*end == 'b' || *end == 'B') {
        ++end;
    }
    return (*end == '\0' && v <= (1u << 30)) ? (size_t)v : (size_t)-1;
}

static const char *size_name(size_t size, char *buf, size_t len)
{
    if (size >= (1u << 20) && size % (1u << 20) == 0) {
        snprintf(buf, len, "%zu MiB", size >> 20);
    } else if (size >= 1024 && size % 1024 == 0) {
        snprintf(buf, len, "%zu KiB", size >> 10);
    } else {
        snprintf(buf, len, "%zu B", size);
    }
    return buf;
}

static void usage(void)
{
    if (rank == 0) {
        fprintf(stderr, "usage: mpirun -np 2 mpi_overlap [-s sizes] "
                "[-r reps] [-n triples] [-b seconds] [-w warm-up] "
                "[-f floor_us] [-R]\n");
    }
    MPI_Finalize();
    exit(2);
}

static void parse_options(int argc, char **argv, options_t *o)
{
    char list[256], *tok, *save;
    int c;

    snprintf(list, sizeof(list), "8,64k,1m,4m");
    o->reps     = 5;
    o->triples  = 0;
    o->budget   = 0.05;
    o->warmup   = 0;
    o->floor_us = 10;
    o->raw      = 0;
    while ((c = getopt(argc, argv, "s:r:n:b:w:f:R")) != -1) {
        switch (c) {
        case 's': snprintf(list, sizeof(list), "%s", optarg); break;
        case 'r': o->reps     = atoi(optarg); break;
        case 'n': o->triples  = atoi(optarg); break;
        case 'b': o->budget   = atof(optarg); break;
        case 'w': o->warmup   = atoi(optarg); break;
        case 'f': o->floor_us = atof(optarg); break;
        case 'R': o->raw      = 1; break;
        default:  usage();
        }
    }
    if (optind != argc || o->reps < 1 || o->triples < 0 || o->warmup < 0 ||
        o->budget <= 0 || o->floor_us < 0) {
        usage();
    }
    o->nsizes = 0;
    for (tok = strtok_r(list, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        if (o->nsizes == MAX_SIZES || parse_size(tok) == (size_t)-1) {
            usage();
        }
        o->sizes[o->nsizes++] = parse_size(tok);
    }
    if (o->nsizes == 0) {
        usage();
    }
}

static unsigned char pattern(size_t size, size_t i)
{
    return (unsigned char)((i * 131) ^ (i >> 8) ^ (size * 7));
}

static void check_data(const unsigned char *buf, size_t size)
{
    char what[64];
    size_t i;

    for (i = 0; i < size; ++i) {
        if (buf[i] != pattern(size, i)) {
            snprintf(what, sizeof(what), "byte %zu of %zu", i, size);
            fail("wrong data received at %s", what);
        }
    }
}

/* Rank 0: one transfer, with `steps` of the busy loop between the go
 * message and MPI_Wait; returns the time it took (us) */
static double receive_one(void *buf, size_t size, uint64_t steps)
{
    int go = GO_SEND;
    MPI_Request req;
    double t0;

    t0 = now_us();
    CHECK_MPI(MPI_Irecv(buf, (int)size, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD,
                        &req));
    CHECK_MPI(MPI_Send(&go, 1, MPI_INT, 1, TAG_GO, MPI_COMM_WORLD));
    if (steps) {
        compute(steps);
    }
    CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
    return now_us() - t0;
}

/* Rank 0, untimed: one transfer into a cleared buffer, checked */
static void receive_checked(unsigned char *buf, size_t size)
{
    memset(buf, 0, size);
    receive_one(buf, size, 0);
    check_data(buf, size);
}

/* Rank 1: sends the message each time it is told to, until GO_END */
static void sender(const options_t *o, unsigned char *buf)
{
    MPI_Request req;
    size_t i;
    int s, go;

    for (s = 0; s < o->nsizes; ++s) {
        for (i = 0; i < o->sizes[s]; ++i) {
            buf[i] = pattern(o->sizes[s], i);
        }
        for (;;) {
            CHECK_MPI(MPI_Recv(&go, 1, MPI_INT, 0, TAG_GO, MPI_COMM_WORLD,
                               MPI_STATUS_IGNORE));
            if (go == GO_END) {
                break;
            }
            CHECK_MPI(MPI_Isend(buf, (int)o->sizes[s], MPI_BYTE, 0, TAG_DATA,
                                MPI_COMM_WORLD, &req));
            CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
        }
    }
}

/*
 * Transports that match in the device (rc_tm through UCP) offload a
 * receive only once an unexpected tagged message arrived on the interface:
 * one message each way that is surely unexpected (probed before it is
 * received), so the measured receives are offloaded from the start.
 */
static void prime(void)
{
    int peer = 1 - rank, out = rank, in = -1, flag = 0;
    MPI_Request req;

    CHECK_MPI(MPI_Isend(&out, 1, MPI_INT, peer, TAG_PRIME, MPI_COMM_WORLD,
                        &req));
    while (!flag) {
        CHECK_MPI(MPI_Iprobe(peer, TAG_PRIME, MPI_COMM_WORLD, &flag,
                             MPI_STATUS_IGNORE));
    }
    CHECK_MPI(MPI_Recv(&in, 1, MPI_INT, peer, TAG_PRIME, MPI_COMM_WORLD,
                       MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
    if (in != peer) {
        fail("priming message: wrong content%s", "");
    }
}

typedef struct {
    double transfer, compute, total;   /* us */
} figures_t;

/* Rank 0: every size, warm-up and repetitions */
static void receiver(const options_t *o, unsigned char *buf, double ns_step)
{
    double *tr, *co, *to, *warm;
    figures_t *reps;
    size_t size;
    uint64_t steps;
    double t0, target_us, triple_us;
    int s, r, i, n, w, go_end = GO_END;
    char name[32];

    tr   = malloc(MAX_TRIPLES * sizeof(*tr));
    co   = malloc(MAX_TRIPLES * sizeof(*co));
    to   = malloc(MAX_TRIPLES * sizeof(*to));
    warm = malloc(MAX_TRIPLES * sizeof(*warm));
    reps = malloc(o->reps * sizeof(*reps));
    if (!tr || !co || !to || !warm || !reps) {
        fail("out of memory%s", "");
    }

    if (o->raw) {
        printf("# mpi_overlap: 2 ranks, receiver rank 0; busy loop %.3f ns "
               "per step; compute = max(1.25 x transfer, %g us)\n",
               ns_step, o->floor_us);
        printf("# size,repetition,transfer_us,compute_us,total_us\n");
    } else {
        printf("overlap of one message with computation on the receiver: "
               "MPI_Irecv, MPI_Isend,\nbusy loop of max(1.25 x transfer, "
               "%g us) without MPI calls, MPI_Wait; median of %d "
               "repetitions\n"
               "overlap = (transfer + compute - total) / transfer\n",
               o->floor_us, o->reps);
        printf("%-9s %13s %13s %13s %9s %9s %8s\n", "size", "transfer(us)",
               "compute(us)", "total(us)", "overlap", "raw", "triples");
    }
    fflush(stdout);

    for (s = 0; s < o->nsizes; ++s) {
        size = o->sizes[s];
        size_name(size, name, sizeof(name));

        /* warm-up: checked once, then transfers alone until they take
         * their time (and at least a fifth of a batch's budget) */
        receive_checked(buf, size);
        w  = 0;
        t0 = now_us();
        do {
            warm[w++] = receive_one(buf, size, 0);
        } while (w < MAX_TRIPLES &&
                 (o->warmup ? w < o->warmup :
                  (w < 10 || now_us() - t0 < o->budget * 2e5)));
        /* the transfer's own latency: the median of the later half */
        target_us = 1.25 * median(warm + w / 2, w - w / 2);
        if (target_us < o->floor_us) {
            target_us = o->floor_us;
        }
        steps     = steps_for(target_us, &ns_step);
        triple_us = 2 * median(warm + w / 2, w - w / 2) + 2 * target_us;
        n = o->triples ? o->triples :
            (int)(o->budget * 1e6 / triple_us);
        n = n < MIN_TRIPLES ? MIN_TRIPLES : n > MAX_TRIPLES ? MAX_TRIPLES : n;
        if (o->raw) {
            printf("# size %zu: transfer in the warm-up %.3f us (%d), "
                   "compute %.3f us (%llu steps), %d triples per batch\n",
                   size, median(warm + w / 2, w - w / 2), w, target_us,
                   (unsigned long long)steps, n);
        }
        /* and one untimed overlapped transfer */
        receive_one(buf, size, steps);

        for (r = 0; r < o->reps; ++r) {
            for (i = 0; i < n; ++i) {
                tr[i] = receive_one(buf, size, 0);
                t0    = now_us();
                compute(steps);
                co[i] = now_us() - t0;
                to[i] = receive_one(buf, size, steps);
            }
            reps[r].transfer = median(tr, n);
            reps[r].compute  = median(co, n);
            reps[r].total    = median(to, n);
            if (o->raw) {
                printf("%zu,%d,%.3f,%.3f,%.3f\n", size, r + 1,
                       reps[r].transfer, reps[r].compute, reps[r].total);
                fflush(stdout);
            }
            fprintf(stderr, "rep %d/%d  %s  n=%d\n", r + 1, o->reps, name, n);
            fflush(stderr);
        }
        receive_checked(buf, size);
        CHECK_MPI(MPI_Send(&go_end, 1, MPI_INT, 1, TAG_GO, MPI_COMM_WORLD));

        if (!o->raw) {
            double t, c, x, ov;

            for (r = 0; r < o->reps; ++r) {
                tr[r] = reps[r].transfer;
                co[r] = reps[r].compute;
                to[r] = reps[r].total;
            }
            t  = median(tr, o->reps);
            c  = median(co, o->reps);
            x  = median(to, o->reps);
            ov = (t + c - x) / t;
            printf("%-9s %13.3f %13.3f %13.3f %8.1f%% %9.3f %8d\n", name,
                   t, c, x, 100 * (ov < 0 ? 0 : ov > 1 ? 1 : ov), ov, n);
            fflush(stdout);
        }
    }
    free(tr);
    free(co);
    free(to);
    free(warm);
    free(reps);
}

int main(int argc, char **argv)
{
    unsigned char *buf;
    options_t o;
    size_t max = 1;
    double ns_step = 0;
    int size, s;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    parse_options(argc, argv, &o);
    if (size != 2) {
        fail("needs exactly 2 ranks%s", "");
    }
    for (s = 0; s < o.nsizes; ++s) {
        max = o.sizes[s] > max ? o.sizes[s] : max;
    }
    buf = malloc(max);
    if (buf == NULL) {
        fail("out of memory%s", "");
    }
    memset(buf, 0, max);   /* touched once: no page faults measured */

    if (rank == 0) {
        ns_step = calibrate();
    }
    prime();
    if (rank == 0) {
        receiver(&o, buf, ns_step);
    } else {
        sender(&o, buf);
    }
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    free(buf);
    MPI_Finalize();
    if (rank == 0) {
        printf("%smpi_overlap: OK\n", o.raw ? "# " : "");
    }
    return 0;
}
