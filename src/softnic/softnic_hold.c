/*
 * Software NIC: a match completion held back (softnic_dv_attr::hold_match).
 *
 * When software DELs an entry a message has just consumed, the DEL fails
 * (IBV_WC_TM_DEL, IBV_WC_TM_ERR), and nothing on a NIC orders that
 * completion against the consumption's.  The device gives the consumption
 * first; with hold_match on it gives either order, so that software is
 * tested against both.  The single completion of a matched eager message
 * (MATCH | DATA_VALID) is then kept in a slot past the CQ's ring (cq->held,
 * at most one per CQ):
 *  - a failed DEL of that entry completes first, then the match;
 *  - any other completion of the CQ is written after it (sn_cq_push
 *    releases it first): matches stay ordered with each other and with
 *    unexpected messages, as the matching rules ask;
 *  - a poll that would find the CQ empty releases it: nothing starves.
 * The slot is written by whoever does the device's work (the engine, under
 * the device lock, or the polls inline); a poll reads cq->held without the
 * lock only to know whether it must take it.
 */
#include "softnic_int.h"

#include <string.h>

static inline sn_cqe_t *sn_cq_hold_slot(sn_cq_t *cq)
{
    return &cq->cqe[cq->depth];     /* allocated past the ring */
}

static inline void sn_cq_set_held(sn_cq_t *cq, sn_cqe_t *cqe)
{
    __atomic_store_n(&cq->held, cqe, __ATOMIC_RELAXED);
}

void sn_cq_release_held(sn_cq_t *cq)
{
    sn_cqe_t *held = cq->held;

    sn_cq_set_held(cq, NULL);       /* before the push: it would release */
    *sn_cq_push(cq) = *held;
}

sn_cqe_t *sn_cq_push_held(sn_cq_t *cq)
{
    sn_cqe_t *cqe = sn_cq_hold_slot(cq);

    if (cq->held != NULL) {
        sn_cq_release_held(cq);
    }
    /* as sn_cq_push leaves an entry */
    memset(cqe, 0, sizeof(*cqe));
    cqe->kind      = SN_CQE_PLAIN;
    cqe->tag_index = SN_NO_TAG;
    sn_cq_set_held(cq, cqe);
    return cqe;
}

sn_cqe_t *sn_cq_detach_held(sn_cq_t *cq, const sn_srq_t *srq, uint32_t index)
{
    sn_cqe_t *held = cq->held;

    if ((held == NULL) || (held->srq != srq) || (held->tag_index != index)) {
        return NULL;
    }
    sn_cq_set_held(cq, NULL);
    return held;
}

void sn_cq_release_held_on_empty(sn_cq_t *cq)
{
    sn_context_t *ctx = sn_ctx(cq->ex.context);

    if (!ctx->threaded) {
        if (cq->held != NULL) {
            sn_cq_release_held(cq);
        }
        return;
    }
    if (__atomic_load_n(&cq->held, __ATOMIC_RELAXED) == NULL) {
        return;
    }
    /* the work first: a DEL posted before this poll, that the engine has
     * not reached yet, still completes before the match it lost to */
    pthread_mutex_lock(&ctx->lock);
    sn_cq_work(cq);
    if (cq->held != NULL) {
        sn_cq_release_held(cq);
    }
    sn_ctx_publish(ctx);
    pthread_mutex_unlock(&ctx->lock);
}

void sn_cq_purge_held(sn_cq_t *cq, uint32_t qp_num)
{
    if ((cq->held != NULL) && (cq->held->qp_num == qp_num)) {
        sn_cq_set_held(cq, NULL);
    }
}
