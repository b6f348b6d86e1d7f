/*
 * Software NIC: test steering (softnic_test.h).
 */
#include "softnic_int.h"

#include <errno.h>
#include <stdio.h>

void softnic_test_set_mode(struct ibv_context *context, softnic_mode_t mode)
{
    if (sn_is_softnic(context)) {
        sn_ctx(context)->mode = mode;
    }
}

void softnic_test_set_order(struct ibv_context *context, softnic_order_t order,
                            uint64_t seed)
{
    if (sn_is_softnic(context)) {
        sn_ctx(context)->order = order;
        sn_ctx(context)->rng   = seed ? seed : 1;
    }
}

void softnic_test_hold_ops(struct ibv_srq *srq, int hold)
{
    if (sn_is_softnic(srq->context)) {
        sn_srq(srq)->hold_ops = !!hold;
    }
}

/* The possible events, in a fixed order: OP, ARRIVAL per QP, DATA */
static unsigned sn_srq_events(sn_srq_t *srq, softnic_event_t *ev,
                              unsigned max)
{
    sn_list_t *it;
    unsigned n = 0;

    if (sn_srq_op_ready(srq)) {
        if (n < max) {
            ev[n].kind = SOFTNIC_EV_OP;
            ev[n].qp   = NULL;
        }
        ++n;
    }
    for (it = srq->qps.next; it != &srq->qps; it = it->next) {
        sn_qp_t *qp = sn_container_of(it, sn_qp_t, srq_link);

        if (sn_srq_arrival_ready(srq, qp)) {
            if (n < max) {
                ev[n].kind = SOFTNIC_EV_ARRIVAL;
                ev[n].qp   = &qp->ibv;
            }
            ++n;
        }
    }
    if (sn_srq_data_ready(srq)) {
        if (n < max) {
            ev[n].kind = SOFTNIC_EV_DATA;
            ev[n].qp   = NULL;
        }
        ++n;
    }
    return n;
}

unsigned softnic_test_events(struct ibv_srq *srq, softnic_event_t *ev,
                             unsigned max)
{
    unsigned n;

    sn_srq_accept(sn_srq(srq));
    n = sn_srq_events(sn_srq(srq), ev, max);

    return (n < max) ? n : max;
}

int softnic_test_step(struct ibv_srq *ibv_srq, const softnic_event_t *ev)
{
    sn_srq_t *srq = sn_srq(ibv_srq);

    switch (ev->kind) {
    case SOFTNIC_EV_OP:
        return sn_srq_step_op(srq);
    case SOFTNIC_EV_ARRIVAL:
        if ((ev->qp == NULL) || (sn_qp(ev->qp)->srq != srq)) {
            return EINVAL;
        }
        return sn_srq_step_arrival(srq, sn_qp(ev->qp));
    case SOFTNIC_EV_DATA:
        return sn_srq_step_data(srq);
    }
    return EINVAL;
}

int softnic_test_step_op(struct ibv_srq *srq)
{
    return sn_srq_step_op(sn_srq(srq));
}

int softnic_test_step_arrival(struct ibv_qp *qp)
{
    return sn_srq_step_arrival(sn_qp(qp)->srq, sn_qp(qp));
}

int softnic_test_step_data(struct ibv_srq *srq)
{
    return sn_srq_step_data(sn_srq(srq));
}

static uint64_t sn_xorshift(uint64_t *state)
{
    uint64_t x = *state ? *state : 1;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 2685821657736338717ull;
}

int sn_srq_step_random(sn_srq_t *srq, uint64_t *seed)
{
    softnic_event_t ev[64];
    unsigned n, k;

    n = sn_srq_events(srq, ev, SN_ARRAY_SIZE(ev));
    if (n == 0) {
        return EAGAIN;
    }
    k = (unsigned)(sn_xorshift(seed) % n);
    if (k >= SN_ARRAY_SIZE(ev)) {
        k = SN_ARRAY_SIZE(ev) - 1;    /* many QPs: still deterministic */
    }
    return softnic_test_step(&srq->ibv, &ev[k]);
}

int softnic_test_step_random(struct ibv_srq *srq, uint64_t *seed)
{
    return sn_srq_step_random(sn_srq(srq), seed);
}

unsigned softnic_test_pending_ops(struct ibv_srq *srq)
{
    return sn_srq(srq)->op_tail - sn_srq(srq)->op_head;
}

unsigned softnic_test_pending_arrivals(struct ibv_qp *ibv_qp)
{
    sn_qp_t *qp  = sn_qp(ibv_qp);
    uint64_t pos = qp->in_head;
    const sn_rec_t *rec;
    unsigned n = 0;
    uint16_t type;

    /* published records up to the terminator (see softnic_wire.h) */
    for (;;) {
        rec  = sn_ring_rec(qp->in, qp->in_mask, pos);
        type = sn_rec_type(rec);
        if (type == 0) {
            return n;
        }
        n   += (type == SN_REC_MSG);
        pos += sn_rec_size(rec->len);
    }
}

unsigned softnic_test_pending_data(struct ibv_srq *srq)
{
    return sn_srq(srq)->xfer_tail - sn_srq(srq)->xfer_head;
}

unsigned softnic_test_free_rbufs(struct ibv_srq *srq)
{
    return sn_srq(srq)->rbuf_tail - sn_srq(srq)->rbuf_head;
}

unsigned softnic_test_listed_tags(struct ibv_srq *ibv_srq)
{
    return tm_matcher_count(&sn_srq(ibv_srq)->listed);
}

uint32_t softnic_test_hw_unexp(struct ibv_srq *srq)
{
    return sn_srq(srq)->hw_unexp;
}

int softnic_test_in_phase(struct ibv_srq *srq)
{
    return sn_srq(srq)->in_phase;
}

void softnic_test_shm_prefix(char *buf, size_t len)
{
    sn_proc_id_t self;

    sn_proc_self(&self);
    snprintf(buf, len, SN_SHM_PREFIX "%u.%llu.", self.pid,
             (unsigned long long)self.start_time);
}
