/*
 * Latency between two ranks while the other ranks of the job, connected to
 * both, stay idle: what a poll costs with many peers.  An MPI rank talks to
 * every rank of its node, and a transport whose poll looks at each peer
 * pays for all of them on every message.
 *
 *   mpirun -np N mpi_many_peers [-s size] [-r reps] [-n iterations] [-R]
 *
 * Every pair of ranks first exchanges a message both ways (each rank has
 * sent to and received from every other one), then ranks 0 and 1 ping-pong
 * size bytes (default 8) for reps repetitions (default 7) of iterations
 * round trips (default 20000), while ranks 2.. wait for them without any
 * MPI call (a file's removal, looked at every millisecond: they take no
 * CPU time from the two).  Then every pair exchanges a message both ways
 * again: a transport that stopped looking at idle peers must hear them.
 * Rank 0 prints the median over the repetitions
 * of the half round trip, in microseconds: "peers N: X us (size B)"; with
 * -R one line per repetition instead, "N,repetition,us", after a line
 * "# N,repetition,us" and before "# mpi_many_peers: OK" (perftest_compare.py
 * reads them).  The payload of every message is checked.
 *
 * Only MPI: it runs over any transport Open MPI's pml ucx is given.
 */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TAG_CONNECT   21
#define TAG_PING      22
#define MAX_REPS      64
#define MAX_SIZE      (1 << 20)

/* The file the idle ranks wait on (rank 0 made it when it is not empty) */
static char idle_path[256];
static int  made_idle_path;

static void fail(const char *what)
{
    fprintf(stderr, "mpi_many_peers: %s\n", what);
    if (made_idle_path) {
        unlink(idle_path);
    }
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Each rank sends to and receives from every other one */
static void connect_all(int rank, int nranks)
{
    int shift, to, from, in, out = rank;

    for (shift = 1; shift < nranks; ++shift) {
        to   = (rank + shift) % nranks;
        from = (rank - shift + nranks) % nranks;
        MPI_Sendrecv(&out, 1, MPI_INT, to, TAG_CONNECT, &in, 1, MPI_INT,
                     from, TAG_CONNECT, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (in != from) {
            fail("a connecting message carried the wrong rank");
        }
    }
}

/* Ranks 0 and 1: one repetition, the half round trip in microseconds */
static double ping_pong(int rank, char *buf, int size, int iters, int rep)
{
    int peer = 1 - rank, i;
    char fill;
    double t0;

    t0 = MPI_Wtime();
    for (i = 0; i < iters; ++i) {
        fill = (char)('a' + ((rep + i) % 26));
        if (rank == 0) {
            memset(buf, fill, size);
            MPI_Send(buf, size, MPI_CHAR, peer, TAG_PING, MPI_COMM_WORLD);
            MPI_Recv(buf, size, MPI_CHAR, peer, TAG_PING, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, size, MPI_CHAR, peer, TAG_PING, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            MPI_Send(buf, size, MPI_CHAR, peer, TAG_PING, MPI_COMM_WORLD);
        }
        if ((size > 0) && ((buf[0] != fill) || (buf[size - 1] != fill))) {
            fail("a message carried the wrong payload");
        }
    }
    return (MPI_Wtime() - t0) / iters / 2 * 1e6;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* Ranks 2..: until rank 0 removes the file, without MPI calls */
static void wait_idle(const char *path)
{
    const struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000};

    while (access(path, F_OK) == 0) {
        nanosleep(&ms, NULL);
    }
}

int main(int argc, char **argv)
{
    int size = 8, reps = 7, iters = 20000, raw = 0;
    int rank, nranks, opt, r, fd;
    double us[MAX_REPS];
    char *buf;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    while ((opt = getopt(argc, argv, "s:r:n:R")) != -1) {
        switch (opt) {
        case 's': size  = atoi(optarg); break;
        case 'r': reps  = atoi(optarg); break;
        case 'n': iters = atoi(optarg); break;
        case 'R': raw   = 1; break;
        default:  fail("usage: mpi_many_peers [-s size] [-r reps] "
                       "[-n iterations] [-R]");
        }
    }
    if ((nranks < 2) || (size < 0) || (size > MAX_SIZE) || (reps < 1) ||
        (reps > MAX_REPS) || (iters < 1)) {
        fail("needs 2 ranks or more, 0 <= size <= 1 MiB, 1 to 64 "
             "repetitions and 1 iteration or more");
    }
    buf = calloc(1, size + 1);
    if (buf == NULL) {
        fail("out of memory");
    }

    /* the file the idle ranks wait on */
    if (rank == 0) {
        snprintf(idle_path, sizeof(idle_path), "%s/mpi_many_peers.XXXXXX",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        fd = mkstemp(idle_path);
        if (fd < 0) {
            fail("cannot create the file the idle ranks wait on");
        }
        close(fd);
        made_idle_path = 1;
    }
    MPI_Bcast(idle_path, sizeof(idle_path), MPI_CHAR, 0, MPI_COMM_WORLD);
    connect_all(rank, nranks);
    MPI_Barrier(MPI_COMM_WORLD);

    if (rank >= 2) {
        wait_idle(idle_path);
    } else {
        ping_pong(rank, buf, size, iters / 10 + 1, 0);      /* warm-up */
        for (r = 0; r < reps; ++r) {
            us[r] = ping_pong(rank, buf, size, iters, r + 1);
        }
        if (rank == 0) {
            unlink(idle_path);
            made_idle_path = 0;
            if (raw) {
                printf("# N,repetition,us\n");
                for (r = 0; r < reps; ++r) {
                    printf("%d,%d,%.4f\n", nranks, r + 1, us[r]);
                }
                printf("# mpi_many_peers: OK\n");
            } else {
                qsort(us, reps, sizeof(us[0]), compare_double);
                printf("peers %d: %.3f us (%d B)\n", nranks, us[reps / 2],
                       size);
            }
            fflush(stdout);
        }
    }
    connect_all(rank, nranks);      /* the idle ranks speak again */
    MPI_Barrier(MPI_COMM_WORLD);
    free(buf);
    MPI_Finalize();
    return 0;
}
