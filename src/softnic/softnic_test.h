/*
 * Test steering of the software NIC (test-only API).
 *
 * The NIC does its receive-side work (list operations, arrivals, data
 * transfers) inside the poll of the TM-SRQ's CQ (ibv_start_poll), or on its
 * engine thread (SOFTNIC_PROGRESS_THREAD; the steering below then takes the
 * device's lock, and MANUAL mode keeps the engine off the receive side).
 * Tests and the explorer can take that work over:
 *
 *  - SOFTNIC_MODE_AUTO (default): each poll of a CQ runs every TM-SRQ
 *    attached to it until nothing more can be done, in the order chosen by
 *    softnic_test_set_order().  softnic_test_hold_ops() keeps list
 *    operations back.
 *  - SOFTNIC_MODE_MANUAL: polls only return completions already generated
 *    (and do the send side: pushing queued sends, send completions, peer
 *    liveness).  The receive side moves only through softnic_test_step(),
 *    one event at a time, so a test decides the exact interleaving of list
 *    operations and arrivals.
 *
 * An event is one of:
 *   OP       process the oldest posted list operation (ADD/DEL/SYNC);
 *   ARRIVAL  judge and deliver the oldest message waiting on one QP
 *            (matched, unexpected, NO_TAG, FIN ...);
 *   DATA     finish the oldest matched transfer whose data was announced
 *            with MATCH only: DATA_VALID (and for a rendezvous the RDMA read
 *            and the FIN).
 * softnic_test_events() lists the events possible right now in a fixed
 * order (OP, then ARRIVAL per QP in creation order, then DATA), so that an
 * explorer can enumerate interleavings deterministically.  An ARRIVAL is
 * possible when a message is waiting, the QP can receive (RTR or RTS),
 * and the message can be placed (it matches, or an untagged buffer is
 * free: otherwise the QP is in RNR and its event is absent).  Room in the
 * CQ is not asked for: as on a NIC, a full CQ overruns.
 *
 * All of it is deterministic: the same calls give the same completions.
 * Called on a context, SRQ or QP of another NIC, these do nothing.
 */
#ifndef SOFTNIC_TEST_H_
#define SOFTNIC_TEST_H_

#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SOFTNIC_MODE_AUTO,
    SOFTNIC_MODE_MANUAL
} softnic_mode_t;

/* In AUTO mode, what a poll does first */
typedef enum {
    SOFTNIC_ORDER_OPS_FIRST,      /* all pending list ops, then arrivals (default) */
    SOFTNIC_ORDER_ARRIVALS_FIRST, /* all arrivals, then list ops */
    SOFTNIC_ORDER_RANDOM          /* one enabled event at a time, from the seed */
} softnic_order_t;

typedef enum {
    SOFTNIC_EV_OP,
    SOFTNIC_EV_ARRIVAL,
    SOFTNIC_EV_DATA
} softnic_ev_kind_t;

typedef struct softnic_event {
    softnic_ev_kind_t kind;
    struct ibv_qp     *qp;        /* ARRIVAL only */
} softnic_event_t;

void softnic_test_set_mode(struct ibv_context *context, softnic_mode_t mode);
/* seed is used by SOFTNIC_ORDER_RANDOM (xorshift64*, 0 taken as 1) */
void softnic_test_set_order(struct ibv_context *context, softnic_order_t order,
                            uint64_t seed);
/* AUTO mode: while held, posted list operations stay pending */
void softnic_test_hold_ops(struct ibv_srq *srq, int hold);

/* Events possible now on srq; returns how many (writes at most max) */
unsigned softnic_test_events(struct ibv_srq *srq, softnic_event_t *ev,
                             unsigned max);
/* Performs one event: 0, or EAGAIN if it is not possible now */
int  softnic_test_step(struct ibv_srq *srq, const softnic_event_t *ev);
int  softnic_test_step_op(struct ibv_srq *srq);
int  softnic_test_step_arrival(struct ibv_qp *qp);
int  softnic_test_step_data(struct ibv_srq *srq);
/* Performs one event chosen from softnic_test_events() by *seed (advanced);
 * EAGAIN when none is possible */
int  softnic_test_step_random(struct ibv_srq *srq, uint64_t *seed);

/* Observation */
unsigned softnic_test_pending_ops(struct ibv_srq *srq);
unsigned softnic_test_pending_arrivals(struct ibv_qp *qp); /* messages waiting */
unsigned softnic_test_pending_data(struct ibv_srq *srq);
unsigned softnic_test_free_rbufs(struct ibv_srq *srq);     /* untagged buffers */
unsigned softnic_test_listed_tags(struct ibv_srq *srq);    /* in the matching list */
uint32_t softnic_test_hw_unexp(struct ibv_srq *srq);
int      softnic_test_in_phase(struct ibv_srq *srq);

/* The device's engine (SOFTNIC_PROGRESS_THREAD), observed: whether it
 * runs, whether it sleeps now (1: with its liveness timer, 2: until rung),
 * and how often it went to sleep and was woken by its doorbell */
typedef struct softnic_engine_stats {
    int      running;
    int      sleeping;
    uint64_t sleeps;
    uint64_t doorbell_wakes;   /* woken by a ring (not its timer) */
    uint64_t timer_wakes;
    uint64_t passes;           /* rounds over the device's work */
    uint64_t assists;          /* rounds run by an empty poll */
    uint64_t parks;            /* engine stood aside for a polling thread */
    int      aside;            /* it stands aside now: no CPU of its own
                                  (SOFTNIC_ENGINE_ASIDE_AUTO), the polls
                                  work as inline */
    uint64_t asides;           /* times it stood aside */
} softnic_engine_stats_t;

/* 0, or EINVAL on another NIC's context */
int  softnic_test_engine_stats(struct ibv_context *context,
                               softnic_engine_stats_t *stats);

/* What the engine sees of the CPUs at one look (SOFTNIC_ENGINE_ASIDE_AUTO):
 * the CPUs the process may run on, the threads that want one besides the
 * engine, and how long the engine ran and waited for a CPU since its last
 * look */
typedef struct softnic_cpu_look {
    uint32_t allowed;
    uint32_t others;
    uint64_t run_ns;
    uint64_t wait_ns;
} softnic_cpu_look_t;

/* The engine's rule, as it applies it: *history carries what the last
 * looks found; returns whether it stands aside after this one (aside:
 * whether it did before) */
int  softnic_test_engine_aside_rule(uint32_t *history,
                                    const softnic_cpu_look_t *look,
                                    int aside);
/* The engine's looks give look (run and wait included) instead of what the
 * machine has, from now on; NULL: what the machine has.  Wakes the engine
 * (asleep, it looks at nothing: it competes with nobody).  0, or EINVAL on
 * another NIC's context */
int  softnic_test_engine_cpus(struct ibv_context *context,
                              const softnic_cpu_look_t *look);
/* Reads shared with their responder (softnic_rdma.c), observed: reads of
 * this device's offered to their responder, chunks this device copied for
 * peers' reads, and slots of its segment taken now (being filled or
 * holding a read) */
typedef struct softnic_share_stats {
    uint64_t offered;
    uint64_t served;
    uint32_t taken;
} softnic_share_stats_t;

/* 0, or EINVAL on another NIC's context */
int  softnic_test_share_stats(struct ibv_context *context,
                              softnic_share_stats_t *stats);
/* Stops every shared read of this process (any device) at three points:
 * while the reader fills the responder's slot (claimed, not yet open),
 * just after the reader offered it, before it takes a chunk, and once no
 * chunk is taken any more, before it waits for the responder's and frees
 * the slot.  The hook runs on the reader's thread; NULL removes it. */
typedef enum {
    SOFTNIC_SHARE_FILLING,
    SOFTNIC_SHARE_OFFERED,
    SOFTNIC_SHARE_CLOSED
} softnic_share_point_t;

typedef void (*softnic_share_hook_t)(softnic_share_point_t point, void *arg);

void softnic_test_set_share_hook(softnic_share_hook_t hook, void *arg);
/* What an SRQ's polls look at (softnic_park.c): its QPs whose rings it
 * looks at and those it parked, and how often a parked ring was taken back
 * by its producer's wake bit or by a sweep */
typedef struct softnic_park_stats {
    uint32_t active;
    uint32_t parked;
    uint64_t woken;
    uint64_t swept;
} softnic_park_stats_t;

/* 0, or EINVAL on another NIC's SRQ */
int  softnic_test_park_stats(struct ibv_srq *srq, softnic_park_stats_t *stats);
/* 1 if qp's inbound ring is parked, else 0 */
int  softnic_test_qp_parked(struct ibv_qp *qp);
/* Producers on this device do not wake the rings they publish into, as a
 * producer that lost the race with a park does not (drop: 1; 0 restores) */
void softnic_test_drop_wakes(struct ibv_context *context, int drop);
/* Completions written to a CQ and not yet polled; runs nothing */
unsigned softnic_test_cq_pending(struct ibv_cq_ex *cq);
/* QPs of the device not yet destroyed (the SRQs' accepted ones included) */
unsigned softnic_test_qp_count(struct ibv_context *context);
/* Writes onto the CQ of srq's completions a CQE the provider cannot parse,
 * as a NIC may (mlx5_parse_cqe fails: an unknown QP or SRQ, a NO_PACKET CQE
 * that is not tag matching ...): the poll call that reaches it fails with
 * -2 and consumes it, as mlx5's CQ_POLL_ERR (softnic_cq.c) */
void softnic_test_push_unparseable_cqe(struct ibv_srq *srq);
/* The CQ of srq's completions overruns, as one sized short of the worst
 * case does when the NIC writes a completion past its depth: that one and
 * every later one are lost, and IBV_EVENT_CQ_ERR is raised (softnic_cq.c) */
void softnic_test_overrun_cq(struct ibv_srq *srq);

/* What a subnet manager sets on port 1: its LID, active MTU and (npkeys
 * non-zero) P_Key table, host order */
typedef struct softnic_test_port {
    uint16_t     lid;
    enum ibv_mtu mtu;
    uint16_t     pkeys[16];
    unsigned     npkeys;
} softnic_test_port_t;

/* Sets port 1 so and raises event (IBV_EVENT_LID_CHANGE, PORT_ACTIVE,
 * PKEY_CHANGE ...) for ibv_get_async_event; connected QPs keep their
 * P_Key index.  0, ENOSPC (8 events unread) or EINVAL. */
int  softnic_test_port_event(struct ibv_context *context,
                             const softnic_test_port_t *attr,
                             enum ibv_event_type event);

/* In a forked child: takes the producer lock of UD QP qp's inbound ring
 * (the parent's QP, whose ring the child maps too) and publishes
 * `published` empty datagrams from qp without moving the ring's tail, as a
 * producer that dies between its record and its tail does; the child then
 * exits holding the lock.  0, or EINVAL (not a UD QP of a software NIC) */
int  softnic_test_ud_die_holding(struct ibv_qp *qp, unsigned published);

/* Shared-memory object name prefix of this process ("/dev/shm/<prefix>*") */
void softnic_test_shm_prefix(char *buf, size_t len);
/* Who the device's registry says owns QP number qp_num ('q') or TM-SRQ
 * number ('s') of this user: 0 and its pid, ENOENT (no entry) or ESRCH
 * (an entry left by a process that died) */
int  softnic_test_num_owner(char kind, uint32_t num, uint32_t *pid);

#ifdef __cplusplus
}
#endif

#endif
