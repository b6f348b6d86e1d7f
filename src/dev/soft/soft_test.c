/*
 * Test steering of the software device (soft_dev_test.h).
 */
#include "soft_dev.h"

#include <errno.h>
#include <stdio.h>

static inline soft_srq_t *soft_srq(tm_dev_srq_t *srq)
{
    return soft_container_of(srq, soft_srq_t, super);
}

static inline soft_conn_t *soft_conn(tm_dev_conn_t *conn)
{
    return soft_container_of(conn, soft_conn_t, super);
}

int tm_soft_is_soft(tm_dev_t *dev)
{
    return dev->ops == &tm_dev_soft_ops;
}

void tm_soft_set_mode(tm_dev_t *dev, tm_soft_mode_t mode)
{
    if (tm_soft_is_soft(dev)) {
        soft_dev(dev)->mode = mode;
    }
}

void tm_soft_set_order(tm_dev_t *dev, tm_soft_order_t order, uint64_t seed)
{
    if (tm_soft_is_soft(dev)) {
        soft_dev(dev)->order = order;
        soft_dev(dev)->rng   = seed ? seed : 1;
    }
}

void tm_soft_hold_ops(tm_dev_srq_t *srq, int hold)
{
    if (tm_soft_is_soft(srq->dev)) {
        soft_srq(srq)->hold_ops = !!hold;
    }
}

/* The k-th possible event (fixed order: OP, ARRIVAL per conn, DATA) */
static unsigned soft_srq_events(soft_srq_t *srq, tm_soft_event_t *ev,
                                unsigned max)
{
    soft_list_t *it;
    unsigned n = 0;

    if (soft_srq_op_ready(srq)) {
        if (n < max) {
            ev[n].kind = TM_SOFT_EV_OP;
            ev[n].conn = NULL;
        }
        ++n;
    }
    for (it = srq->conns.next; it != &srq->conns; it = it->next) {
        soft_conn_t *conn = soft_container_of(it, soft_conn_t, srq_link);

        if (soft_srq_arrival_ready(srq, conn)) {
            if (n < max) {
                ev[n].kind = TM_SOFT_EV_ARRIVAL;
                ev[n].conn = &conn->super;
            }
            ++n;
        }
    }
    if (soft_srq_data_ready(srq)) {
        if (n < max) {
            ev[n].kind = TM_SOFT_EV_DATA;
            ev[n].conn = NULL;
        }
        ++n;
    }
    return n;
}

unsigned tm_soft_events(tm_dev_srq_t *srq, tm_soft_event_t *ev, unsigned max)
{
    unsigned n;

    soft_srq_accept(soft_srq(srq));
    n = soft_srq_events(soft_srq(srq), ev, max);

    return (n < max) ? n : max;
}

int tm_soft_step(tm_dev_srq_t *tsrq, const tm_soft_event_t *ev)
{
    soft_srq_t *srq = soft_srq(tsrq);

    switch (ev->kind) {
    case TM_SOFT_EV_OP:
        return soft_srq_step_op(srq);
    case TM_SOFT_EV_ARRIVAL:
        if ((ev->conn == NULL) || (soft_conn(ev->conn)->srq != srq)) {
            return EINVAL;
        }
        return soft_srq_step_arrival(srq, soft_conn(ev->conn));
    case TM_SOFT_EV_DATA:
        return soft_srq_step_data(srq);
    }
    return EINVAL;
}

int tm_soft_step_op(tm_dev_srq_t *srq)
{
    return soft_srq_step_op(soft_srq(srq));
}

int tm_soft_step_arrival(tm_dev_conn_t *conn)
{
    return soft_srq_step_arrival(soft_conn(conn)->srq, soft_conn(conn));
}

int tm_soft_step_data(tm_dev_srq_t *srq)
{
    return soft_srq_step_data(soft_srq(srq));
}

static uint64_t soft_xorshift(uint64_t *state)
{
    uint64_t x = *state ? *state : 1;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 2685821657736338717ull;
}

int soft_srq_step_random(soft_srq_t *srq, uint64_t *seed)
{
    tm_soft_event_t ev[64];
    unsigned n, k;

    n = soft_srq_events(srq, ev, SOFT_ARRAY_SIZE(ev));
    if (n == 0) {
        return EAGAIN;
    }
    k = (unsigned)(soft_xorshift(seed) % n);
    if (k >= SOFT_ARRAY_SIZE(ev)) {
        k = SOFT_ARRAY_SIZE(ev) - 1;    /* many conns: still deterministic */
    }
    return tm_soft_step(&srq->super, &ev[k]);
}

int tm_soft_step_random(tm_dev_srq_t *srq, uint64_t *seed)
{
    return soft_srq_step_random(soft_srq(srq), seed);
}

unsigned tm_soft_pending_ops(tm_dev_srq_t *srq)
{
    return soft_srq(srq)->op_tail - soft_srq(srq)->op_head;
}

unsigned tm_soft_pending_arrivals(tm_dev_conn_t *tconn)
{
    soft_conn_t *conn = soft_conn(tconn);
    uint64_t pos = conn->in_head;
    const soft_rec_t *rec;
    unsigned n = 0;
    uint16_t type;

    /* published records up to the terminator (see soft_ring_ctl_t) */
    for (;;) {
        rec  = soft_ring_rec(conn->in, conn->in_mask, pos);
        type = soft_rec_type(rec);
        if (type == 0) {
            return n;
        }
        n   += (type == SOFT_REC_MSG);
        pos += soft_rec_size(rec->len);
    }
}

unsigned tm_soft_pending_data(tm_dev_srq_t *srq)
{
    return soft_srq(srq)->xfer_tail - soft_srq(srq)->xfer_head;
}

unsigned tm_soft_free_rbufs(tm_dev_srq_t *srq)
{
    return soft_srq(srq)->rbuf_tail - soft_srq(srq)->rbuf_head;
}

unsigned tm_soft_listed_tags(tm_dev_srq_t *tsrq)
{
    return tm_matcher_count(&soft_srq(tsrq)->listed);
}

uint32_t tm_soft_hw_unexp(tm_dev_srq_t *srq)
{
    return soft_srq(srq)->hw_unexp;
}

int tm_soft_in_phase(tm_dev_srq_t *srq)
{
    return soft_srq(srq)->in_phase;
}

void tm_soft_shm_prefix(char *buf, size_t len)
{
    soft_proc_id_t self;

    soft_proc_self(&self);
    snprintf(buf, len, SOFT_SHM_PREFIX "%u.%llu.", self.pid,
             (unsigned long long)self.start_time);
}
