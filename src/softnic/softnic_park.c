/*
 * Software NIC: what a poll looks at.  A NIC hears of new work from
 * doorbells and reports it through one CQ, so a poll costs the same with
 * one peer or a hundred.  The software NIC finds arrivals by looking at
 * rings, one per inbound QP, and its send completions by looking at send
 * queues, while an MPI rank talks to every other rank of its node: a look
 * at every ring and every send queue on every poll cost 1.97 us a message
 * between two ranks of 34 (sm: 0.21; docs/performance-analysis.md).  So:
 *
 *  - Rings.  An SRQ's run looks only at its active QPs.  One whose ring
 *    stayed empty for SN_PARK_RUNS runs, of an SRQ with more than
 *    SN_PARK_MIN_QPS QPs, is parked (checked every SN_PARK_CHECK runs, so
 *    that a run costs a ring no more than its look): the ring's parked word takes
 *    its wake slot, and the run passes it by.  Its producer, after
 *    publishing, sees the word (sn_qp_check_peer_parked, a load of a line
 *    the consumer seldom writes), takes the park and sets the slot's wake
 *    bit in the consumer's device segment; the consumer's next poll sees
 *    the bit and makes the QP active again.
 *
 *    The producer does not fence its record before it looks at the word
 *    (a fence per message would cost the sender more than the walk), so a
 *    park that races a publication can miss it: the consumer parks after
 *    its own look found the ring empty, the producer looked before the
 *    park was visible.  Every SN_PARK_CHECK runs an SRQ with parked rings
 *    looks at them all, which bounds how late such a message is, and an
 *    engine looks at them all before it sleeps.  A QP parked before it
 *    was connected is made active at RTR.
 *
 *  - Send queues.  A CQ's poll looks only at its QPs with send-side work
 *    (the busy list): a QP joins it when work is posted, a FIN of its NIC
 *    waits for room, or its last WQE event becomes due, and leaves when a
 *    poll finds none of these.
 */
#include "softnic_int.h"

#include <errno.h>


/* ---- wake slots ---- */

/* A slot for qp, if one is free (none: its ring is never parked) */
void sn_wake_slot_get(sn_context_t *ctx, sn_qp_t *qp)
{
    uint32_t i, slot;

    for (i = 0; i < SN_WAKE_SLOTS; ++i) {
        slot = (ctx->wake_next + i) % SN_WAKE_SLOTS;
        if (ctx->wake_qps[slot] == NULL) {
            ctx->wake_qps[slot] = qp;
            ctx->wake_next      = (slot + 1) % SN_WAKE_SLOTS;
            qp->wake_slot       = slot + 1;
            return;
        }
    }
}

void sn_wake_slot_put(sn_context_t *ctx, sn_qp_t *qp)
{
    if (qp->wake_slot != 0) {
        ctx->wake_qps[qp->wake_slot - 1] = NULL;
        qp->wake_slot                    = 0;
    }
}


/* ---- rings: the consumer ---- */

static void sn_srq_park(sn_srq_t *srq, sn_qp_t *qp)
{
    /* seq_cst: the park is visible before the look that follows */
    atomic_store_explicit(&qp->in->parked, qp->wake_slot,
                          memory_order_seq_cst);
    if (sn_ring_has_rec(qp)) {
        /* published meanwhile: the producer may not have seen the park */
        atomic_store_explicit(&qp->in->parked, 0, memory_order_relaxed);
        qp->busy_run = srq->runs;
        return;
    }
    if (srq->rr_next == &qp->active_link) {
        srq->rr_next = qp->active_link.next;
    }
    sn_list_del(&qp->active_link);
    qp->parked = true;
    --srq->nactive;
    ++srq->nparked;
}

/* qp's ring is looked at again (a no-op for an active one) */
static bool sn_srq_unpark(sn_srq_t *srq, sn_qp_t *qp)
{
    if (!qp->parked) {
        return false;
    }
    atomic_store_explicit(&qp->in->parked, 0, memory_order_relaxed);
    sn_list_add_tail(&srq->active, &qp->active_link);
    qp->parked   = false;
    qp->busy_run = srq->runs;
    ++srq->nactive;
    --srq->nparked;
    return true;
}

/* A QP becomes RTR.  Parked while it could take nothing, its ring may
 * hold a message published before: its producer's wake came and went
 * while the QP was not connected, so it is taken at the next run */
void sn_qp_unpark(sn_qp_t *qp)
{
    sn_srq_unpark(qp->srq, qp);
}

/* The parked rings that hold something become active */
static void sn_srq_sweep_parked(sn_srq_t *srq)
{
    sn_list_t *it;
    sn_qp_t *qp;

    for (it = srq->qps.next; (it != &srq->qps) && (srq->nparked != 0);
         it = it->next) {
        qp = sn_container_of(it, sn_qp_t, srq_link);
        if (qp->parked && sn_ring_has_rec(qp)) {
            srq->swept += sn_srq_unpark(srq, qp);
        }
    }
}

/* Every SN_PARK_CHECK runs: the parked rings that hold something become
 * active, and, of an SRQ with many QPs, those idle for SN_PARK_RUNS runs
 * are parked (a QP without a wake slot never is) */
void sn_srq_park_check(sn_srq_t *srq)
{
    sn_list_t *it, *next;
    sn_qp_t *qp;

    sn_srq_sweep_parked(srq);
    if (srq->nactive + srq->nparked <= SN_PARK_MIN_QPS) {
        return;
    }
    for (it = srq->active.next; it != &srq->active; it = next) {
        next = it->next;
        qp   = sn_container_of(it, sn_qp_t, active_link);
        if ((srq->runs - qp->busy_run >= SN_PARK_RUNS) &&
            (qp->wake_slot != 0)) {
            sn_srq_park(srq, qp);
        }
    }
}

/* Every SRQ of the device (an engine's look before it sleeps) */
void sn_ctx_sweep_parked(sn_context_t *ctx)
{
    sn_list_t *cq_it, *it;
    sn_cq_t *cq;

    for (cq_it = ctx->cqs.next; cq_it != &ctx->cqs; cq_it = cq_it->next) {
        cq = sn_container_of(cq_it, sn_cq_t, link);
        for (it = cq->srqs.next; it != &cq->srqs; it = it->next) {
            sn_srq_sweep_parked(sn_container_of(it, sn_srq_t, link));
        }
    }
}

/* The rings whose wake bits producers set become active.  A producer sets
 * the word's bit before the summary's, and this takes the summary before
 * the words: a bit set meanwhile leaves its summary bit for the next poll.
 * A bit of a free or reused slot wakes nothing or an active QP: no-ops. */
void sn_ctx_take_wakes(sn_context_t *ctx)
{
    sn_wake_t *wake = &ctx->seg->wake;
    uint64_t sum, bits;
    unsigned w, b;
    sn_qp_t *qp;

    sum = atomic_exchange_explicit(&wake->sum, 0, memory_order_acquire);
    while (sum != 0) {
        w    = (unsigned)__builtin_ctzll(sum);
        sum &= sum - 1;
        bits = atomic_exchange_explicit(&wake->word[w], 0,
                                        memory_order_acquire);
        while (bits != 0) {
            b     = (unsigned)__builtin_ctzll(bits);
            bits &= bits - 1;
            qp    = ctx->wake_qps[(w * 64) + b];
            if (qp != NULL) {
                qp->srq->woken += sn_srq_unpark(qp->srq, qp);
            }
        }
    }
}


/* ---- rings: the producer ---- */

/* We published into a ring its consumer parked: wake it */
void sn_qp_wake_peer_ring(sn_qp_t *qp)
{
    sn_wake_t *wake = &qp->peer->seg->wake;
    uint32_t slot;

    if (sn_unlikely(atomic_load_explicit(&sn_qp_ctx(qp)->drop_wakes,
                                         memory_order_relaxed))) {
        return;
    }
    slot = atomic_exchange_explicit(&qp->out->parked, 0,
                                    memory_order_acq_rel);
    if ((slot == 0) || (slot > SN_WAKE_SLOTS)) {
        return;             /* taken back already, or not a slot */
    }
    --slot;
    atomic_fetch_or_explicit(&wake->word[slot / 64], 1ull << (slot % 64),
                             memory_order_release);
    atomic_fetch_or_explicit(&wake->sum, 1ull << (slot / 64),
                             memory_order_release);
}


/* ---- steering ---- */

int softnic_test_park_stats(struct ibv_srq *ibv_srq,
                            softnic_park_stats_t *stats)
{
    sn_context_t *ctx;
    sn_srq_t *srq;

    if (!sn_is_softnic(ibv_srq->context)) {
        return EINVAL;
    }
    ctx = sn_ctx(ibv_srq->context);
    srq = sn_srq(ibv_srq);
    sn_ctx_lock(ctx);
    stats->active = srq->nactive;
    stats->parked = srq->nparked;
    stats->woken  = srq->woken;
    stats->swept  = srq->swept;
    sn_ctx_unlock(ctx);
    return 0;
}

int softnic_test_qp_parked(struct ibv_qp *ibv_qp)
{
    sn_context_t *ctx = sn_ctx(ibv_qp->context);
    int parked;

    sn_ctx_lock(ctx);
    parked = sn_qp(ibv_qp)->parked;
    sn_ctx_unlock(ctx);
    return parked;
}

void softnic_test_drop_wakes(struct ibv_context *context, int drop)
{
    if (sn_is_softnic(context)) {
        atomic_store_explicit(&sn_ctx(context)->drop_wakes, !!drop,
                              memory_order_relaxed);
    }
}
