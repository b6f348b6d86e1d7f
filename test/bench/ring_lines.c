/*
 * What the state of a ring's lines costs the producer: two threads, bound to
 * two CPUs, pass records through a ring laid out as the software NIC's
 * (cache-line records, a flag in each record's first line, the consumer's
 * position in a line of its own).  The consumer copies each record out, as
 * the device does into a receive buffer, then releases it either as read
 * or "handed back": one store into each of its lines first, as
 * sn_ring_hand_back() does (src/softnic/softnic_ring.h).  The producer's
 * next store into a line the consumer only read must take the consumer's
 * copy away; into a line the consumer wrote, it fetches the line.  How much
 * the two differ is the CPU's (docs/one-host.md).
 *
 *   ring_lines [-a cpu] [-b cpu] [-n records]
 *
 * Prints, for each record size, ns per record with both releases (the
 * median of 5 runs, interleaved), and their ratio.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_cpu.h"

#define LINE      64
#define RING      (128u << 10)   /* the software NIC's smallest ring */
#define RUNS      5

typedef struct {
    uint8_t           *ring;
    _Atomic uint64_t  *head;     /* records the consumer took */
    size_t             len;      /* payload bytes of a record */
    size_t             stride;   /* bytes a record takes: whole lines */
    uint64_t           records;
    int                hand_back;
} ring_run_t;

static int cpu_a = 0, cpu_b = 1;

static _Atomic uint64_t *rec_flag(const ring_run_t *run, uint64_t i)
{
    return (_Atomic uint64_t *)(run->ring +
                                (i % (RING / run->stride)) * run->stride);
}

static void *consume(void *arg)
{
    const ring_run_t *run = arg;
    uint8_t *dst          = malloc(run->len);
    uint8_t *rec, *line;
    uint64_t i;

    if ((dst == NULL) || (bench_bind_to(cpu_b) != 0)) {
        perror("ring_lines: consumer");
        exit(1);
    }
    for (i = 0; i < run->records; ++i) {
        rec = (uint8_t *)rec_flag(run, i);
        while (atomic_load_explicit(rec_flag(run, i), memory_order_acquire) !=
               i + 1) {
        }
        memcpy(dst, rec + 16, run->len);
        for (line = rec; run->hand_back && (line < rec + run->stride);
             line += LINE) {
            __atomic_store_n(line + LINE - 1, 0, __ATOMIC_RELAXED);
        }
        atomic_store_explicit(run->head, i + 1, memory_order_release);
    }
    free(dst);
    return NULL;
}

/* ns per record, the producer's view */
static double ring_run(ring_run_t *run, const uint8_t *src)
{
    uint64_t room = RING / run->stride, head = 0, i;
    pthread_t thread;
    double t0;

    memset(run->ring, 0, RING);
    atomic_store(run->head, 0);
    if (pthread_create(&thread, NULL, consume, run) != 0) {
        perror("ring_lines: pthread_create");
        exit(1);
    }
    t0 = bench_now_ns();
    for (i = 0; i < run->records; ++i) {
        while (i - head >= room) {
            head = atomic_load_explicit(run->head, memory_order_acquire);
        }
        memcpy((uint8_t *)rec_flag(run, i) + 16, src, run->len);
        atomic_store_explicit(rec_flag(run, i), i + 1, memory_order_release);
    }
    pthread_join(thread, NULL);
    return (bench_now_ns() - t0) / run->records;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {64, 512, 1024, 2048, 4096, 8192};
    uint64_t records = 500000;
    double t[2][RUNS];
    ring_run_t run;
    uint8_t *src;
    size_t s;
    int c, r, m;

    while ((c = getopt(argc, argv, "a:b:n:")) != -1) {
        switch (c) {
        case 'a': cpu_a = atoi(optarg); break;
        case 'b': cpu_b = atoi(optarg); break;
        case 'n': records = strtoull(optarg, NULL, 0); break;
        default:
            fprintf(stderr, "usage: ring_lines [-a cpu] [-b cpu] "
                    "[-n records]\n");
            return 2;
        }
    }
    run.ring = aligned_alloc(4096, RING);
    run.head = aligned_alloc(LINE, LINE);
    src      = aligned_alloc(4096, 8192);
    if ((run.ring == NULL) || (run.head == NULL) || (src == NULL) ||
        (bench_bind_to(cpu_a) != 0)) {
        perror("ring_lines");
        return 1;
    }
    memset(src, 0x5a, 8192);
    run.records = records;
    printf("ring_lines: cpus %d,%d, %u KiB ring, ns per record "
           "(median of %d)\n", cpu_a, cpu_b, RING >> 10, RUNS);
    for (s = 0; s < sizeof(sizes) / sizeof(sizes[0]); ++s) {
        run.len    = sizes[s];
        run.stride = (16 + run.len + LINE - 1) & ~(size_t)(LINE - 1);
        for (r = 0; r < RUNS; ++r) {
            for (m = 0; m < 2; ++m) {
                run.hand_back = m;
                t[m][r]       = ring_run(&run, src);
            }
        }
        qsort(t[0], RUNS, sizeof(double), cmp_double);
        qsort(t[1], RUNS, sizeof(double), cmp_double);
        printf("%5zu B: read %7.1f  handed back %7.1f  ratio %.2fx\n",
               run.len, t[0][RUNS / 2], t[1][RUNS / 2],
               t[0][RUNS / 2] / t[1][RUNS / 2]);
    }
    free(src);
    free(run.head);
    free(run.ring);
    return 0;
}
