/*
 * Test steering for the software TM-SRQ device (test-only API).
 *
 * The device does its receive-side work (list operations, arrivals, data
 * transfers) inside tm_dev_poll_cq() of the TM-SRQ's CQ.  Tests and the
 * explorer can take that work over:
 *
 *  - TM_SOFT_MODE_AUTO (default): each poll of a CQ runs every TM-SRQ
 *    attached to it until nothing more can be done, in the order chosen by
 *    tm_soft_set_order().  tm_soft_hold_ops() keeps list operations back.
 *  - TM_SOFT_MODE_MANUAL: polls only return completions already generated
 *    (and do the send side: pushing queued sends, send completions, peer
 *    liveness).  The receive side moves only through tm_soft_step(), one
 *    event at a time, so a test decides the exact interleaving of list
 *    operations and arrivals.
 *
 * An event is one of:
 *   OP       process the oldest posted list operation (ADD/DEL/SYNC);
 *   ARRIVAL  judge and deliver the oldest message waiting on one connection
 *            (matched, unexpected, NO_TAG, FIN ...);
 *   DATA     finish the oldest matched transfer whose data was announced
 *            with MATCH only: DATA_VALID (and for a rendezvous the RDMA read
 *            and the FIN).
 * tm_soft_events() lists the events possible right now in a fixed order
 * (OP, then ARRIVAL per connection in creation order, then DATA), so that an
 * explorer can enumerate interleavings deterministically.  An ARRIVAL is
 * possible when a message is waiting, the connection is connected, the CQ
 * has room, and the message can be placed (it matches, or an untagged buffer
 * is free: otherwise the connection is in RNR and its event is absent).
 *
 * All of it is deterministic: the same calls give the same completions.
 */
#ifndef RC_TM_SOFT_DEV_TEST_H_
#define RC_TM_SOFT_DEV_TEST_H_

#include "dev/tm_dev.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TM_SOFT_MODE_AUTO,
    TM_SOFT_MODE_MANUAL
} tm_soft_mode_t;

/* In AUTO mode, what a poll does first */
typedef enum {
    TM_SOFT_ORDER_OPS_FIRST,      /* all pending list ops, then arrivals (default) */
    TM_SOFT_ORDER_ARRIVALS_FIRST, /* all arrivals, then list ops */
    TM_SOFT_ORDER_RANDOM          /* one enabled event at a time, from the seed */
} tm_soft_order_t;

typedef enum {
    TM_SOFT_EV_OP,
    TM_SOFT_EV_ARRIVAL,
    TM_SOFT_EV_DATA
} tm_soft_ev_kind_t;

typedef struct tm_soft_event {
    tm_soft_ev_kind_t kind;
    tm_dev_conn_t     *conn;      /* ARRIVAL only */
} tm_soft_event_t;

/* 1 if dev is a soft device (steering calls on other devices do nothing) */
int  tm_soft_is_soft(tm_dev_t *dev);

void tm_soft_set_mode(tm_dev_t *dev, tm_soft_mode_t mode);
/* seed is used by TM_SOFT_ORDER_RANDOM (xorshift64*, 0 taken as 1) */
void tm_soft_set_order(tm_dev_t *dev, tm_soft_order_t order, uint64_t seed);
/* AUTO mode: while held, posted list operations stay pending */
void tm_soft_hold_ops(tm_dev_srq_t *srq, int hold);

/* Events possible now on srq; returns how many (writes at most max) */
unsigned tm_soft_events(tm_dev_srq_t *srq, tm_soft_event_t *ev, unsigned max);
/* Performs one event: 0, or EAGAIN if it is not possible now */
int  tm_soft_step(tm_dev_srq_t *srq, const tm_soft_event_t *ev);
int  tm_soft_step_op(tm_dev_srq_t *srq);
int  tm_soft_step_arrival(tm_dev_conn_t *conn);
int  tm_soft_step_data(tm_dev_srq_t *srq);
/* Performs one event chosen from tm_soft_events() by *seed (advanced);
 * EAGAIN when none is possible */
int  tm_soft_step_random(tm_dev_srq_t *srq, uint64_t *seed);

/* Observation */
unsigned tm_soft_pending_ops(tm_dev_srq_t *srq);
unsigned tm_soft_pending_arrivals(tm_dev_conn_t *conn); /* messages waiting */
unsigned tm_soft_pending_data(tm_dev_srq_t *srq);
unsigned tm_soft_free_rbufs(tm_dev_srq_t *srq);          /* untagged buffers */
unsigned tm_soft_listed_tags(tm_dev_srq_t *srq);         /* in the matching list */
uint32_t tm_soft_hw_unexp(tm_dev_srq_t *srq);
int      tm_soft_in_phase(tm_dev_srq_t *srq);

/* Shared-memory object name prefix of this process ("/dev/shm/<prefix>*") */
void tm_soft_shm_prefix(char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
