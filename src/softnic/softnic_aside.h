/*
 * Software NIC: what the engine looks at to decide whether it stands
 * aside (softnic_aside.c, SOFTNIC_ENGINE_ASIDE_AUTO).  Included by
 * softnic_int.h.
 */
#ifndef SOFTNIC_ASIDE_H_
#define SOFTNIC_ASIDE_H_

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct sn_aside_look {
    uint32_t           allowed_cpus; /* the process's, at the start */
    uint32_t           history;      /* the last looks, a bit each */
    uint64_t           run_ns, wait_ns; /* the engine's own, at the last */
    int                loadavg_fd, schedstat_fd;
    /* steering (softnic_test_engine_cpus): looks give these */
    _Atomic bool       fixed;
    _Atomic uint32_t   fixed_allowed, fixed_others;
    _Atomic uint64_t   fixed_run_ns, fixed_wait_ns;
} sn_aside_look_t;

#endif
