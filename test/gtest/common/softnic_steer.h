/*
 * The software NIC's test steering (softnic_test.h), called with the device
 * layer's handles: tests hold a tm_dev_t / tm_dev_srq_t / tm_dev_conn_t and
 * steer the rdma-core objects underneath (tm_dev_ibv_*).
 */
#ifndef RC_TM_TEST_SOFTNIC_STEER_H_
#define RC_TM_TEST_SOFTNIC_STEER_H_

#include <dev/tm_dev.h>
#include <errno.h>
#include <softnic/softnic.h>
#include <softnic/softnic_test.h>

/* 1 when dev is the software NIC */
static inline int softnic_is_soft(tm_dev_t *dev)
{
    return softnic_dv_is_softnic(tm_dev_ibv_context(dev));
}

#ifdef __cplusplus

inline unsigned softnic_test_qp_count(tm_dev_t *dev)
{
    return softnic_test_qp_count(tm_dev_ibv_context(dev));
}

inline void softnic_test_set_mode(tm_dev_t *dev, softnic_mode_t mode)
{
    softnic_test_set_mode(tm_dev_ibv_context(dev), mode);
}

inline void softnic_test_set_order(tm_dev_t *dev, softnic_order_t order,
                                   uint64_t seed)
{
    softnic_test_set_order(tm_dev_ibv_context(dev), order, seed);
}

inline void softnic_test_hold_ops(tm_dev_srq_t *srq, int hold)
{
    softnic_test_hold_ops(tm_dev_ibv_srq(srq), hold);
}

inline unsigned softnic_test_events(tm_dev_srq_t *srq, softnic_event_t *ev,
                                    unsigned max)
{
    return softnic_test_events(tm_dev_ibv_srq(srq), ev, max);
}

inline int softnic_test_step(tm_dev_srq_t *srq, const softnic_event_t *ev)
{
    return softnic_test_step(tm_dev_ibv_srq(srq), ev);
}

inline int softnic_test_step_op(tm_dev_srq_t *srq)
{
    return softnic_test_step_op(tm_dev_ibv_srq(srq));
}

/* MANUAL mode: the oldest arrival of any connection of srq, EAGAIN if
 * none waits */
inline int softnic_test_step_any_arrival(tm_dev_srq_t *srq)
{
    softnic_event_t ev[16];
    unsigned n = softnic_test_events(srq, ev, 16);

    for (unsigned i = 0; i < n; ++i) {
        if (ev[i].kind == SOFTNIC_EV_ARRIVAL) {
            return softnic_test_step(srq, &ev[i]);
        }
    }
    return EAGAIN;
}

/* A connection's messages arrive on its receive-only QP, FINs of the
 * peer's NIC on the QP it sends on: the oldest of either */
inline int softnic_test_step_arrival(tm_dev_conn_t *conn)
{
    int ret = softnic_test_step_arrival(tm_dev_ibv_rx_qp(conn));

    return (ret == 0) ? 0 : softnic_test_step_arrival(tm_dev_ibv_qp(conn));
}

inline int softnic_test_step_data(tm_dev_srq_t *srq)
{
    return softnic_test_step_data(tm_dev_ibv_srq(srq));
}

inline int softnic_test_step_random(tm_dev_srq_t *srq, uint64_t *seed)
{
    return softnic_test_step_random(tm_dev_ibv_srq(srq), seed);
}

inline unsigned softnic_test_pending_ops(tm_dev_srq_t *srq)
{
    return softnic_test_pending_ops(tm_dev_ibv_srq(srq));
}

inline unsigned softnic_test_pending_arrivals(tm_dev_conn_t *conn)
{
    return softnic_test_pending_arrivals(tm_dev_ibv_rx_qp(conn)) +
           softnic_test_pending_arrivals(tm_dev_ibv_qp(conn));
}

inline unsigned softnic_test_pending_data(tm_dev_srq_t *srq)
{
    return softnic_test_pending_data(tm_dev_ibv_srq(srq));
}

inline unsigned softnic_test_free_rbufs(tm_dev_srq_t *srq)
{
    return softnic_test_free_rbufs(tm_dev_ibv_srq(srq));
}

inline unsigned softnic_test_listed_tags(tm_dev_srq_t *srq)
{
    return softnic_test_listed_tags(tm_dev_ibv_srq(srq));
}

inline softnic_park_stats_t softnic_test_park_stats(tm_dev_srq_t *srq)
{
    softnic_park_stats_t st;

    memset(&st, 0, sizeof(st));
    (void)softnic_test_park_stats(tm_dev_ibv_srq(srq), &st);
    return st;
}

/* Both QPs of a connection parked (each receives: messages, FINs) */
inline bool softnic_test_conn_parked(tm_dev_conn_t *conn)
{
    return softnic_test_qp_parked(tm_dev_ibv_rx_qp(conn)) &&
           softnic_test_qp_parked(tm_dev_ibv_qp(conn));
}

inline void softnic_test_drop_wakes(tm_dev_t *dev, int drop)
{
    softnic_test_drop_wakes(tm_dev_ibv_context(dev), drop);
}

inline uint32_t softnic_test_hw_unexp(tm_dev_srq_t *srq)
{
    return softnic_test_hw_unexp(tm_dev_ibv_srq(srq));
}

inline int softnic_test_in_phase(tm_dev_srq_t *srq)
{
    return softnic_test_in_phase(tm_dev_ibv_srq(srq));
}

/* Is ev an arrival on conn? */
inline bool softnic_event_on(const softnic_event_t &ev, tm_dev_conn_t *conn)
{
    return (ev.kind == SOFTNIC_EV_ARRIVAL) && (ev.qp == tm_dev_ibv_qp(conn));
}

#endif /* __cplusplus */

#endif
