/*
 * A halo exchange: the time step of a stencil code, between a few ranks.
 *
 * The ranks form a periodic ring (2 to 4 of them on one host; any number
 * works).  Each step, every rank
 *
 *   posts MPI_Irecv for the halos of its left and right neighbours,
 *   MPI_Isend its own two halos of `size` bytes to them,
 *   updates the interior of its slab (a 3-point stencil over -c cells:
 *   "a little computation", which needs no halo),
 *   MPI_Waitall, then folds the two halos it received into its borders.
 *
 * With 2 ranks both neighbours are the other rank: two messages each way,
 * told apart by their tags.  A step's time is the slowest rank's (each
 * rank clocks its own steps; after a repetition the times are reduced
 * with MPI_MAX, step by step, outside the timed part), and a repetition's
 * figure is the median of its steps.
 *
 *   mpirun -np N mpi_halo [-s 1k,4k,16k,64k,256k] [-r reps] [-n steps]
 *                         [-b seconds] [-w warm-up] [-c cells] [-C] [-R]
 *
 * -n: steps per repetition (default: as many as -b seconds allow, 20 to
 * 2000, from the warm-up); -c: interior cells (doubles) each rank updates
 * per step; -C checks every halo received (default: the first and last
 * step of each repetition, and the warm-up's); -R prints every repetition
 * instead of the table, one line each, "size,repetition,step_us", after a
 * line "# size,repetition,step_us"; other lines start with '#'
 * (perftest_compare.py reads them).  Progress goes to stderr, a line per
 * repetition.  The last line says "mpi_halo: OK" once every check passed.
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

#define TAG_TO_RIGHT  21
#define TAG_TO_LEFT   22
#define MAX_SIZES     32
#define MIN_STEPS     20
#define MAX_STEPS     2000

typedef struct {
    size_t sizes[MAX_SIZES];
    int    nsizes;
    int    reps;
    int    steps;        /* 0: from the budget */
    double budget;       /* seconds per repetition */
    int    warmup;
    size_t cells;
    int    check_all;
    int    raw;
} options_t;

static int rank, nranks, left, right;

static void fail(const char *fmt, const char *arg)
{
    fprintf(stderr, "mpi_halo (rank %d): ", rank);
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
    return (*end == '\0' && v >= 1 && v <= (1u << 30)) ? (size_t)v :
                                                         (size_t)-1;
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
        fprintf(stderr, "usage: mpirun -np N mpi_halo [-s sizes] [-r reps] "
                "[-n steps] [-b seconds] [-w warm-up] [-c cells] [-C] "
                "[-R]\n");
    }
    MPI_Finalize();
    exit(2);
}

static void parse_options(int argc, char **argv, options_t *o)
{
    char list[256], *tok, *save;
    long cells;
    int c;

    snprintf(list, sizeof(list), "1k,4k,16k,64k,256k");
    o->reps      = 5;
    o->steps     = 0;
    o->budget    = 0.05;
    o->warmup    = 20;
    o->cells     = 4096;
    o->check_all = 0;
    o->raw       = 0;
    while ((c = getopt(argc, argv, "s:r:n:b:w:c:CR")) != -1) {
        switch (c) {
        case 's': snprintf(list, sizeof(list), "%s", optarg); break;
        case 'r': o->reps   = atoi(optarg); break;
        case 'n': o->steps  = atoi(optarg); break;
        case 'b': o->budget = atof(optarg); break;
        case 'w': o->warmup = atoi(optarg); break;
        case 'c':
            cells    = atol(optarg);
            o->cells = (cells >= 3) ? (size_t)cells : 0;
            break;
        case 'C': o->check_all = 1; break;
        case 'R': o->raw       = 1; break;
        default:  usage();
        }
    }
    if ((optind != argc) || (o->reps < 1) || (o->steps < 0) ||
        (o->warmup < 1) || (o->budget <= 0) || (o->cells == 0)) {
        usage();
    }
    o->nsizes = 0;
    for (tok = strtok_r(list, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        if ((o->nsizes == MAX_SIZES) || (parse_size(tok) == (size_t)-1)) {
            usage();
        }
        o->sizes[o->nsizes++] = parse_size(tok);
    }
    if (o->nsizes == 0) {
        usage();
    }
}

/* What the halo `from` sends towards `tag` at step holds: a pattern of
 * the sender, the direction and the step, so that a halo of another step
 * or neighbour is caught */
static unsigned char pattern(int from, int tag, unsigned step, size_t i)
{
    return (unsigned char)((i * 131) ^ (i >> 8) ^ ((unsigned)from * 29) ^
                           ((unsigned)tag * 7) ^ (step * 53));
}

static void fill(unsigned char *buf, size_t size, int tag, unsigned step)
{
    size_t i;

    for (i = 0; i < size; ++i) {
        buf[i] = pattern(rank, tag, step, i);
    }
}

static void check(const unsigned char *buf, size_t size, int from, int tag,
                  unsigned step)
{
    char what[96];
    size_t i;

    for (i = 0; i < size; ++i) {
        if (buf[i] != pattern(from, tag, step, i)) {
            snprintf(what, sizeof(what), "byte %zu of %zu from rank %d at "
                     "step %u", i, size, from, step);
            fail("wrong halo received: %s", what);
        }
    }
}

/* The slab: interior cells and their stencil */
static double *cells_a, *cells_b;

static void update_interior(size_t n)
{
    double *in = cells_a, *out = cells_b;
    size_t i;

    for (i = 1; i + 1 < n; ++i) {
        out[i] = 0.25 * in[i - 1] + 0.5 * in[i] + 0.25 * in[i + 1];
    }
    cells_a = out;
    cells_b = in;
}

/* The received halos' first bytes into the borders: the halo is used */
static void fold(const unsigned char *from_left,
                 const unsigned char *from_right, size_t n)
{
    cells_a[0]     = 0.5 * cells_a[0] + from_left[0] * (1.0 / 256);
    cells_a[n - 1] = 0.5 * cells_a[n - 1] + from_right[0] * (1.0 / 256);
}

typedef struct {
    unsigned char *send_left, *send_right, *recv_left, *recv_right;
} halos_t;

/* One step; its time on this rank (us) */
static double step(const options_t *o, const halos_t *h, size_t size,
                   unsigned index, int checked)
{
    MPI_Request req[4];
    double t0;

    if (checked) {
        fill(h->send_left, size, TAG_TO_LEFT, index);
        fill(h->send_right, size, TAG_TO_RIGHT, index);
    }
    t0 = now_us();
    CHECK_MPI(MPI_Irecv(h->recv_left, (int)size, MPI_BYTE, left,
                        TAG_TO_RIGHT, MPI_COMM_WORLD, &req[0]));
    CHECK_MPI(MPI_Irecv(h->recv_right, (int)size, MPI_BYTE, right,
                        TAG_TO_LEFT, MPI_COMM_WORLD, &req[1]));
    CHECK_MPI(MPI_Isend(h->send_left, (int)size, MPI_BYTE, left, TAG_TO_LEFT,
                        MPI_COMM_WORLD, &req[2]));
    CHECK_MPI(MPI_Isend(h->send_right, (int)size, MPI_BYTE, right,
                        TAG_TO_RIGHT, MPI_COMM_WORLD, &req[3]));
    update_interior(o->cells);
    CHECK_MPI(MPI_Waitall(4, req, MPI_STATUSES_IGNORE));
    fold(h->recv_left, h->recv_right, o->cells);
    t0 = now_us() - t0;
    if (checked) {
        check(h->recv_left, size, left, TAG_TO_RIGHT, index);
        check(h->recv_right, size, right, TAG_TO_LEFT, index);
        memset(h->recv_left, 0, size);
        memset(h->recv_right, 0, size);
    }
    return t0;
}

static void run_size(const options_t *o, const halos_t *h, size_t size,
                     unsigned *index)
{
    double *mine = NULL, *slowest = NULL, *reps = NULL, *warm;
    char name[32];
    int n, r, i;

    size_name(size, name, sizeof(name));
    warm = malloc(o->warmup * sizeof(*warm));
    if (warm == NULL) {
        fail("out of memory%s", "");
    }
    for (i = 0; i < o->warmup; ++i) {
        warm[i] = step(o, h, size, (*index)++, 1);
    }
    /* steps per repetition: rank 0's warm-up decides, for every rank (its
     * median: the first steps of a size may wire up or register) */
    n = o->steps;
    if (n == 0) {
        n = (int)(o->budget * 1e6 / (median(warm, o->warmup) + 0.001));
        n = (n < MIN_STEPS) ? MIN_STEPS : (n > MAX_STEPS) ? MAX_STEPS : n;
    }
    free(warm);
    CHECK_MPI(MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD));

    mine    = malloc(n * sizeof(*mine));
    slowest = malloc(n * sizeof(*slowest));
    reps    = malloc(o->reps * sizeof(*reps));
    if ((mine == NULL) || (slowest == NULL) || (reps == NULL)) {
        fail("out of memory%s", "");
    }
    for (r = 0; r < o->reps; ++r) {
        for (i = 0; i < n; ++i) {
            mine[i] = step(o, h, size, (*index)++,
                           o->check_all || (i == 0) || (i == n - 1));
        }
        CHECK_MPI(MPI_Reduce(mine, slowest, n, MPI_DOUBLE, MPI_MAX, 0,
                             MPI_COMM_WORLD));
        if (rank == 0) {
            reps[r] = median(slowest, n);
            if (o->raw) {
                printf("%zu,%d,%.3f\n", size, r + 1, reps[r]);
                fflush(stdout);
            }
            fprintf(stderr, "rep %d/%d  %s  n=%d\n", r + 1, o->reps, name,
                    n);
            fflush(stderr);
        }
    }
    if ((rank == 0) && !o->raw) {
        printf("%-9s %12.3f %8d\n", name, median(reps, o->reps), n);
        fflush(stdout);
    }
    free(mine);
    free(slowest);
    free(reps);
}

int main(int argc, char **argv)
{
    unsigned index = 0;
    size_t max = 1;
    options_t o;
    halos_t h;
    int s;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    parse_options(argc, argv, &o);
    if (nranks < 2) {
        fail("needs at least 2 ranks%s", "");
    }
    left  = (rank + nranks - 1) % nranks;
    right = (rank + 1) % nranks;
    for (s = 0; s < o.nsizes; ++s) {
        max = (o.sizes[s] > max) ? o.sizes[s] : max;
    }
    h.send_left  = malloc(max);
    h.send_right = malloc(max);
    h.recv_left  = malloc(max);
    h.recv_right = malloc(max);
    cells_a      = calloc(o.cells, sizeof(double));
    cells_b      = calloc(o.cells, sizeof(double));
    if (!h.send_left || !h.send_right || !h.recv_left || !h.recv_right ||
        !cells_a || !cells_b) {
        fail("out of memory%s", "");
    }
    /* touched once: no page faults measured */
    memset(h.send_left, 0, max);
    memset(h.send_right, 0, max);
    memset(h.recv_left, 0, max);
    memset(h.recv_right, 0, max);

    if (rank == 0) {
        if (o.raw) {
            printf("# %d ranks, %zu interior cells a step\n"
                   "# size,repetition,step_us\n", nranks, o.cells);
        } else {
            printf("halo exchange, %d ranks, %zu interior cells a step: "
                   "median step (us, the slowest rank's)\n%-9s %12s %8s\n",
                   nranks, o.cells, "size", "step_us", "steps");
        }
        fflush(stdout);
    }
    for (s = 0; s < o.nsizes; ++s) {
        run_size(&o, &h, o.sizes[s], &index);
    }
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    free(h.send_left);
    free(h.send_right);
    free(h.recv_left);
    free(h.recv_right);
    free(cells_a);
    free(cells_b);
    MPI_Finalize();
    if (rank == 0) {
        printf("%smpi_halo: OK\n", o.raw ? "# " : "");
    }
    return 0;
}
