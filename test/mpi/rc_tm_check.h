/*
 * rc_tm MPI tests: shared helpers.
 *
 * Every program checks its own data and, before MPI_Finalize, that the rc_tm
 * module is loaded into the process and that its counters moved the way the
 * program's traffic should move them.  The counters are read through the
 * module's public symbol uct_rc_tm_counters_total(), looked up with dlsym()
 * so that the programs link only against MPI.
 */
#ifndef RC_TM_MPI_CHECK_H
#define RC_TM_MPI_CHECK_H

#include <mpi.h>
#include <stdint.h>
#include <stddef.h>

/* Order of uct_rc_tm_stat_t in src/uct/rc_tm/rc_tm_iface.h (the first 13;
 * the module may export more after them). */
enum {
    RT_RX_EXP,            /* eager matched in the device */
    RT_RX_EAGER_UNEXP,    /* eager unexpected (to software) */
    RT_RX_RNDV_EXP,       /* rendezvous matched in the device */
    RT_RX_RNDV_UNEXP,     /* rendezvous unexpected */
    RT_RX_RNDV_INCOMPLETE,
    RT_RX_RNDV_REQ_EXP,   /* software rndv request, matched */
    RT_RX_RNDV_REQ_UNEXP, /* software rndv request, unexpected */
    RT_LIST_ADD,
    RT_LIST_DEL,
    RT_LIST_SYNC,
    RT_LIST_DEL_RACE,
    RT_LIST_FULL,
    RT_TX_RNDV,
    RT_NUM_COUNTERS
};

typedef struct {
    uint64_t c[RT_NUM_COUNTERS];
} rt_counters_t;

extern int rt_rank, rt_size;
extern const char *rt_prog;

/* MPI_Init, rank/size, MPI_ERRORS_RETURN on COMM_WORLD, and the module
 * check: exits (through MPI_Abort) if rc_tm is not loaded. */
void rt_init(int *argc, char ***argv, const char *prog, int min_ranks);

/* Report a failure (rank, program, message) and abort the whole job. */
void rt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2),
                                                   noreturn));
#define RT_CHECK(_cond, ...) \
    do { if (!(_cond)) rt_fail(__VA_ARGS__); } while (0)
/* An MPI call that must succeed */
#define RT_MPI(_call) \
    do { int _rc = (_call); \
         if (_rc != MPI_SUCCESS) rt_mpi_fail(#_call, __FILE__, __LINE__, _rc); \
    } while (0)
void rt_mpi_fail(const char *call, const char *file, int line, int rc)
    __attribute__((noreturn));

/* This process's rc_tm counters (all interfaces, open and closed) */
void rt_counters(rt_counters_t *out);
/* Sum over all ranks of COMM_WORLD (collective) */
void rt_counters_allsum(const rt_counters_t *local, rt_counters_t *sum);
/* One line "name=value ..." of the counters, on stdout, from rank 0 */
void rt_counters_print(const char *what, const rt_counters_t *c);
/* Counter name */
const char *rt_counter_name(int idx);

/* A rendezvous through rc_tm is the device's own (TX_RNDV, RX_RNDV_*) or
 * UCP's software one, whose request the device matches or finds unexpected
 * (RX_RNDV_REQ_*) and whose data UCP reads over rc_tm: UCP's protocol v2
 * (UCX 1.16 and later) sends plain and synchronous sends above its eager
 * range that way, by its cost model.  Both take sums over all ranks. */

/* Rendezvous messages the device matched to a posted receive.  The module
 * counts them in RX_RNDV_EXP and RX_RNDV_REQ_EXP if it does; if those stay
 * 0 (the module counts a device-matched rendezvous as RX_EXP), inferred
 * from the sender side: rendezvous sent less those that arrived
 * unexpected. */
uint64_t rt_rndv_matched_in_device(const rt_counters_t *sum);
/* Rendezvous messages that arrived before their receive */
uint64_t rt_rndv_unexpected(const rt_counters_t *sum);
/* Rendezvous messages sent through rc_tm, of either kind */
uint64_t rt_rndv_sent(const rt_counters_t *sum);

/* After rt_end(): a counter of the module beyond the 13 above, by name,
 * summed over the ranks.  Returns 0 if the module has no such counter. */
int rt_named_total(const char *name, uint64_t *value);

/* Fill / check a buffer with a pattern derived from (seed, index) */
void rt_fill(void *buf, size_t len, uint64_t seed);
/* Returns the first wrong byte offset, or -1 if the buffer is right */
long rt_verify(const void *buf, size_t len, uint64_t seed);
#define RT_VERIFY(_buf, _len, _seed, _fmt, ...) \
    do { long _off = rt_verify(_buf, _len, _seed); \
         if (_off >= 0) rt_fail("wrong data at byte %ld of %zu: " _fmt, \
                                _off, (size_t)(_len), ##__VA_ARGS__); \
    } while (0)

/* Collective: makes sure every rank has received one unexpected tagged
 * message through rc_tm, so that UCP starts posting receives (>= UCX_TM_THRESH)
 * to the device from now on.  Uses a private duplicate of comm. */
void rt_prime_offload(MPI_Comm comm);

/* Collective end of a program: gathers counters, rank 0 prints them, then
 * every rank returns the sums to the caller's checks.  Call rt_finish()
 * after the checks. */
void rt_end(rt_counters_t *sum);
/* Collective: MPI_Finalize and a final "OK" line from rank 0 */
int rt_finish(void);

#endif
