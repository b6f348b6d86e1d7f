/*
 * What one cache line costs between two CPUs of this host: two threads,
 * bound to two CPUs, hand a counter back and forth in one line; the round
 * trip is two transfers of the line.  A message between two processes
 * costs at least one such transfer (the line the sender wrote, read by the
 * receiver), and how much the CPU charges for it (one L3 domain or two)
 * decides how much of rc_tm's and sm's latency is the line and how much
 * their instructions (docs/one-host.md).
 *
 *   line_pingpong [-a cpu] [-b cpu] [-n round trips]
 *
 * Prints "line_pingpong: cpus A,B round trip X ns" (the best batch of 1000
 * round trips: batches that lost their CPU to another process are slower).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench_cpu.h"

#define BATCH 1000

static _Atomic uint64_t line __attribute__((aligned(64)));
static uint64_t round_trips = 2000000;
static int cpu_a = 0, cpu_b = 1;

/* The other side: answers each odd value with the next even one */
static void *answer(void *arg)
{
    uint64_t i;

    (void)arg;
    if (bench_bind_to(cpu_b) != 0) {
        perror("line_pingpong: sched_setaffinity");
        exit(1);
    }
    for (i = 1; i <= round_trips; ++i) {
        while (atomic_load_explicit(&line, memory_order_acquire) !=
               2 * i - 1) {
        }
        atomic_store_explicit(&line, 2 * i, memory_order_release);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    double best = 1e18, t0, t;
    pthread_t thread;
    uint64_t i = 1, end;
    int c;

    while ((c = getopt(argc, argv, "a:b:n:")) != -1) {
        switch (c) {
        case 'a': cpu_a = atoi(optarg); break;
        case 'b': cpu_b = atoi(optarg); break;
        case 'n': round_trips = strtoull(optarg, NULL, 0); break;
        default:
            fprintf(stderr, "usage: line_pingpong [-a cpu] [-b cpu] "
                    "[-n round trips]\n");
            return 2;
        }
    }
    round_trips = (round_trips < BATCH) ? BATCH :
                  round_trips - round_trips % BATCH;
    if (bench_bind_to(cpu_a) != 0) {
        perror("line_pingpong: sched_setaffinity");
        return 1;
    }
    if (pthread_create(&thread, NULL, answer, NULL) != 0) {
        perror("line_pingpong: pthread_create");
        return 1;
    }
    while (i <= round_trips) {
        t0  = bench_now_ns();
        end = i + BATCH;
        for (; i < end; ++i) {
            atomic_store_explicit(&line, 2 * i - 1, memory_order_release);
            while (atomic_load_explicit(&line, memory_order_acquire) !=
                   2 * i) {
            }
        }
        t = (bench_now_ns() - t0) / BATCH;
        best = (t < best) ? t : best;
    }
    pthread_join(thread, NULL);
    printf("line_pingpong: cpus %d,%d round trip %.1f ns\n", cpu_a, cpu_b,
           best);
    return 0;
}
