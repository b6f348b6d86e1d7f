/*
 * Software NIC: test steering (softnic_test.h).
 */
#include "softnic_int.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

/* With an engine, steering takes the device lock (the engine's work
 * waits) and publishes what a step completed */
static sn_context_t *sn_steer_begin(struct ibv_context *context)
{
    sn_context_t *ctx = sn_ctx(context);

    sn_ctx_lock(ctx);
    return ctx;
}

static void sn_steer_end(sn_context_t *ctx)
{
    if (ctx->threaded) {
        sn_ctx_publish(ctx);
    }
    sn_ctx_unlock(ctx);
    sn_ctx_kick(ctx, false);
}

void softnic_test_set_mode(struct ibv_context *context, softnic_mode_t mode)
{
    sn_context_t *ctx;

    if (sn_is_softnic(context)) {
        ctx       = sn_steer_begin(context);
        ctx->mode = mode;
        sn_steer_end(ctx);
    }
}

void softnic_test_set_order(struct ibv_context *context, softnic_order_t order,
                            uint64_t seed)
{
    sn_context_t *ctx;

    if (sn_is_softnic(context)) {
        ctx        = sn_steer_begin(context);
        ctx->order = order;
        ctx->rng   = seed ? seed : 1;
        sn_steer_end(ctx);
    }
}

void softnic_test_hold_ops(struct ibv_srq *srq, int hold)
{
    sn_context_t *ctx;

    if (sn_is_softnic(srq->context)) {
        ctx                 = sn_steer_begin(srq->context);
        sn_srq(srq)->hold_ops = !!hold;
        sn_steer_end(ctx);
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
    sn_context_t *ctx = sn_steer_begin(srq->context);
    unsigned n;

    sn_srq_accept(sn_srq(srq));
    n = sn_srq_events(sn_srq(srq), ev, max);
    sn_steer_end(ctx);
    return (n < max) ? n : max;
}

static int sn_srq_step(sn_srq_t *srq, const softnic_event_t *ev)
{
    int ret;

    switch (ev->kind) {
    case SOFTNIC_EV_OP:
        return sn_srq_step_op(srq);
    case SOFTNIC_EV_ARRIVAL:
        if ((ev->qp == NULL) || (sn_qp(ev->qp)->srq != srq)) {
            return EINVAL;
        }
        ret = sn_srq_step_arrival(srq, sn_qp(ev->qp));
        sn_qp_ring_peer(sn_qp(ev->qp));     /* room in its ring */
        return ret;
    case SOFTNIC_EV_DATA:
        return sn_srq_step_data(srq);
    }
    return EINVAL;
}

int softnic_test_step(struct ibv_srq *srq, const softnic_event_t *ev)
{
    sn_context_t *ctx = sn_steer_begin(srq->context);
    int ret;

    ret = sn_srq_step(sn_srq(srq), ev);
    sn_steer_end(ctx);
    return ret;
}

int softnic_test_step_op(struct ibv_srq *srq)
{
    const softnic_event_t ev = { SOFTNIC_EV_OP, NULL };

    return softnic_test_step(srq, &ev);
}

int softnic_test_step_arrival(struct ibv_qp *qp)
{
    const softnic_event_t ev = { SOFTNIC_EV_ARRIVAL, qp };

    return softnic_test_step(&sn_qp(qp)->srq->ibv, &ev);
}

int softnic_test_step_data(struct ibv_srq *srq)
{
    const softnic_event_t ev = { SOFTNIC_EV_DATA, NULL };

    return softnic_test_step(srq, &ev);
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
    return sn_srq_step(srq, &ev[k]);
}

int softnic_test_step_random(struct ibv_srq *srq, uint64_t *seed)
{
    sn_context_t *ctx = sn_steer_begin(srq->context);
    int ret;

    ret = sn_srq_step_random(sn_srq(srq), seed);
    sn_steer_end(ctx);
    return ret;
}

/* Observation: what the engine changes is read under the device lock */
#define SN_OBSERVE(_context, _expr) \
    ({ \
        sn_context_t *_ctx = sn_ctx(_context); \
        __typeof__(_expr) _v; \
        sn_ctx_lock(_ctx); \
        _v = (_expr); \
        sn_ctx_unlock(_ctx); \
        _v; \
    })

unsigned softnic_test_pending_ops(struct ibv_srq *srq)
{
    return SN_OBSERVE(srq->context,
                      sn_srq(srq)->op_tail - sn_srq(srq)->op_head);
}

static unsigned sn_qp_pending_arrivals(struct ibv_qp *ibv_qp)
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

unsigned softnic_test_pending_arrivals(struct ibv_qp *qp)
{
    return SN_OBSERVE(qp->context, sn_qp_pending_arrivals(qp));
}

unsigned softnic_test_pending_data(struct ibv_srq *srq)
{
    return SN_OBSERVE(srq->context,
                      sn_srq(srq)->xfer_tail - sn_srq(srq)->xfer_head);
}

unsigned softnic_test_free_rbufs(struct ibv_srq *srq)
{
    return SN_OBSERVE(srq->context,
                      sn_srq(srq)->rbuf_tail - sn_srq(srq)->rbuf_head);
}

unsigned softnic_test_listed_tags(struct ibv_srq *srq)
{
    return SN_OBSERVE(srq->context,
                      (unsigned)tm_matcher_count(&sn_srq(srq)->listed));
}

uint32_t softnic_test_hw_unexp(struct ibv_srq *srq)
{
    return SN_OBSERVE(srq->context, (uint32_t)sn_srq(srq)->hw_unexp);
}

int softnic_test_in_phase(struct ibv_srq *srq)
{
    return SN_OBSERVE(srq->context, (int)sn_srq(srq)->in_phase);
}

unsigned softnic_test_cq_pending(struct ibv_cq_ex *ex)
{
    sn_cq_t *cq = sn_cq(ex);

    if (!sn_is_softnic(ex->context)) {
        return 0;
    }
    if (!sn_ctx(ex->context)->threaded) {
        return cq->tail - cq->head;
    }
    return __atomic_load_n(&cq->ready, __ATOMIC_ACQUIRE) -
           __atomic_load_n(&cq->head, __ATOMIC_RELAXED);
}

unsigned softnic_test_qp_count(struct ibv_context *context)
{
    sn_context_t *ctx;
    unsigned count = 0;
    sn_list_t *it;

    if (!sn_is_softnic(context)) {
        return 0;
    }
    ctx = sn_ctx(context);
    sn_ctx_lock(ctx);
    for (it = ctx->qps.next; it != &ctx->qps; it = it->next) {
        ++count;
    }
    sn_ctx_unlock(ctx);
    return count;
}

void softnic_test_shm_prefix(char *buf, size_t len)
{
    sn_proc_id_t self;

    sn_proc_self(&self);
    snprintf(buf, len, SN_SHM_PREFIX "%u.%llu.", self.pid,
             (unsigned long long)self.start_time);
}

int softnic_test_num_owner(char kind, uint32_t num, uint32_t *pid)
{
    sn_proc_id_t owner = { 0 };
    uint32_t dev_seq;
    int ret;

    ret  = sn_num_owner((uint32_t)getuid(), kind, num, &owner, &dev_seq);
    *pid = owner.pid;
    return ret;
}
