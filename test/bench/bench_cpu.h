/*
 * What the two-CPU microbenchmarks (line_pingpong, ring_lines) share:
 * binding the calling thread to one CPU, and a monotonic clock in ns.
 */
#ifndef RC_TM_BENCH_CPU_H_
#define RC_TM_BENCH_CPU_H_

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <time.h>

static inline int bench_bind_to(int cpu)
{
    cpu_set_t set;

    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof(set), &set);
}

static inline double bench_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

#endif
