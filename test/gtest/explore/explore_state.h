/*
 * A canonical description of the receive side of an rc_tm interface over
 * the software device: everything that decides what it does next, with
 * handles, pointers and ever-growing counters replaced by what they stand
 * for.  Two states with equal descriptions behave alike for every future
 * schedule, so the explorer visits the subtree of a state once.
 *
 * White-box (it reads rc_tm's and the device's internal structures), so it
 * is C compiled with the module's internal flags; the explorer adds its
 * own (harness) state.
 */
#ifndef RC_TM_TEST_EXPLORE_STATE_H_
#define RC_TM_TEST_EXPLORE_STATE_H_

#include <uct/api/uct.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rc_tm_explore_state_args {
    uct_iface_h                 iface;        /* the receiving interface */
    uct_tag_context_t * const   *recv_ctx;    /* the harness's receives, by id */
    unsigned                    num_recvs;
    const uct_ep_h              *eps;         /* its endpoints, by connection */
    unsigned                    num_eps;
    uint32_t                    base_unexp;   /* both unexpected counts when
                                                 the schedule started */
} rc_tm_explore_state_args_t;

/* Appends the description as words; returns how many, or 0 when more than
 * max would be needed or something unknown was found (then do not cache) */
size_t rc_tm_explore_state(const rc_tm_explore_state_args_t *args,
                           uint64_t *words, size_t max);

/* Operations of these endpoints waiting for a send completion (software
 * rendezvous reads, gets) */
unsigned rc_tm_explore_tx_outstanding(const uct_ep_h *eps, unsigned num_eps);

/* The unexpected count rc_tm's software has handled */
uint32_t rc_tm_explore_sw_unexpected(uct_iface_h iface);

#ifdef __cplusplus
}
#endif

#endif
