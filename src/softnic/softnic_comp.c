/*
 * Software NIC: the completer.  Send work requests complete in posting
 * order, on the QP's send CQ:
 *   SEND        when the peer's responder has taken the message off its
 *               ring (like an RC ack: the message was placed, after any RNR
 *               wait), at the latest before any message the peer sent
 *               after that on the QP is judged (sn_qp_complete_acked);
 *   RDMA READ / when the copy is done.
 *   RDMA WRITE
 * A peer that dies or closes fails the outstanding requests
 * (IBV_WC_RETRY_EXC_ERR, then IBV_WC_WR_FLUSH_ERR) when a NIC's retries
 * would have run out, counted from the rate-limited liveness check that
 * first sees it gone (an engine asleep wakes for it every
 * SN_LIVENESS_PERIOD_NS while a QP waits on its peer: liveness_now); a QP
 * in the error state flushes everything.
 */
#include "softnic_int.h"

#include <errno.h>

/* Fails everything not yet completed: the first with status, then flush */
void sn_qp_fail_from(sn_qp_t *qp, uint32_t index, enum ibv_wc_status status)
{
    sn_wqe_t *wqe;

    for (; index != qp->sq_tail; ++index) {
        wqe = sn_sq_wqe(qp, index);
        if (wqe->state == SN_WQE_DONE) {
            continue;
        }
        sn_wqe_done(wqe, status);
        status = IBV_WC_WR_FLUSH_ERR;
    }
    qp->sq_sent = qp->sq_tail;
}

/* When a NIC gives up a request nobody acknowledges, sent now: after the
 * first time and retry_cnt retries, each waiting the local ACK timeout of
 * 4.096 us * 2^timeout (0: never) */
static uint64_t sn_qp_retries_end(const sn_qp_t *qp, uint64_t now)
{
    if (qp->attr.timeout == 0) {
        return UINT64_MAX;
    }
    return now + (4096ull << qp->attr.timeout) * (qp->attr.retry_cnt + 1u);
}

/* The peer is gone: what it consumed before it went completes, as the ack
 * a NIC sends on arrival, whatever its software does next (a pingpong's
 * last reply, consumed by a peer that then exits); if nothing else is
 * outstanding the QP stays as it is, else the rest fails once retries have
 * run out, counted from now (the first check that saw it gone) */
static void sn_qp_peer_gone(sn_qp_t *qp, uint64_t now)
{
    if (sn_qp_nak_check(qp, 0)) {
        return;                 /* it said why (softnic_rq.c) */
    }
    atomic_thread_fence(memory_order_acquire);  /* after seeing it gone */
    qp->out_head_cache = atomic_load_explicit(&qp->out->head,
                                              memory_order_acquire);
    sn_qp_reap(qp, qp->send_cq);
    if (!sn_qp_waits_on_peer(qp)) {
        return;
    }
    if (qp->gone_deadline_ns == 0) {
        sn_debug("peer of QP 0x%x is gone", qp->ibv.qp_num);
        qp->gone_deadline_ns = sn_qp_retries_end(qp, now);
    }
    if (now < qp->gone_deadline_ns) {
        return;
    }
    sn_qp_set_error(qp);
    sn_qp_fail_from(qp, qp->sq_head, IBV_WC_RETRY_EXC_ERR);
}

bool sn_qp_peer_alive(sn_qp_t *qp)
{
    if (atomic_load_explicit(&qp->out->hdr.closed, memory_order_relaxed)) {
        return false;
    }
    return sn_proc_alive(&qp->peer_proc);
}

static enum ibv_wc_opcode sn_wc_opcode(uint8_t wr_opcode)
{
    switch (wr_opcode) {
    case IBV_WR_RDMA_READ:
        return IBV_WC_RDMA_READ;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        return IBV_WC_RDMA_WRITE;
    default:
        return IBV_WC_SEND;
    }
}

/* Completes send requests in order (a failed one completes whether it
 * asked or not) */
unsigned sn_qp_reap(sn_qp_t *qp, sn_cq_t *cq)
{
    unsigned count = 0;
    sn_wqe_t *wqe;
    sn_cqe_t *wc;
    bool head_read = false;

    while (qp->sq_head != qp->sq_tail) {
        wqe = sn_sq_wqe(qp, qp->sq_head);
        if (wqe->state == SN_WQE_SENT) {
            if ((int64_t)(qp->out_head_cache - wqe->ring_end) < 0) {
                /* The consumer's position is a line of the peer's: read
                 * at every look while a signaled send waits for it (it
                 * moves only when the peer took something), every 16th
                 * while only unsignaled ones do (nobody waits for them) */
                if (head_read || ((qp->sig_pending == 0) &&
                                  ((++qp->head_polls & 15) != 0))) {
                    break;
                }
                qp->out_head_cache = atomic_load_explicit(&qp->out->head,
                                                          memory_order_acquire);
                head_read = true;
                if ((int64_t)(qp->out_head_cache - wqe->ring_end) < 0) {
                    break;          /* not yet consumed by the peer */
                }
            }
            sn_wqe_done(wqe, IBV_WC_SUCCESS);
        } else if (wqe->state != SN_WQE_DONE) {
            break;
        }
        if (wqe->signaled || (wqe->status != IBV_WC_SUCCESS)) {
            wc           = sn_cq_push(cq);
            wc->wr_id    = wqe->wr_id;
            wc->status   = (enum ibv_wc_status)wqe->status;
            /* mlx5 reads opcode 0 from every error CQE */
            wc->opcode   = (wqe->status == IBV_WC_SUCCESS) ?
                           sn_wc_opcode(wqe->opcode) : IBV_WC_SEND;
            wc->byte_len = (wqe->opcode == IBV_WR_RDMA_READ) ?
                           wqe->byte_len : 0;
            wc->qp_num   = qp->ibv.qp_num;
            ++count;
        }
        qp->sig_pending -= wqe->signaled;
        ++qp->sq_head;
    }
    return count;
}

/*
 * A message arrived on qp (the caller saw its record, acquire): the sends
 * the peer consumed before it sent that message complete first, as on an
 * RC connection the ack of a SEND precedes whatever the responder sends
 * after it (a FIN, a reply).  The peer released our records before it
 * published its own, so the fresh consumer position covers them.  With an
 * engine, the send CQ is published now (whatever it holds unpublished):
 * it may be published before the CQ of the arrival in this round, and
 * software must not see the reaction first.  What the peer's device pulled
 * from our backlog is taken back by a push (softnic_pull.c).
 */
void sn_qp_complete_acked(sn_qp_t *qp)
{
    if (sn_unlikely(qp->offered)) {
        sn_qp_push(qp);
    }
    qp->out_head_cache = atomic_load_explicit(&qp->out->head,
                                              memory_order_acquire);
    sn_qp_reap(qp, qp->send_cq);
    if (sn_qp_ctx(qp)->threaded &&
        (__atomic_load_n(&qp->send_cq->ready, __ATOMIC_RELAXED) !=
         qp->send_cq->tail)) {
        sn_cq_publish(qp->send_cq);
    }
}

/* Pushes queued sends, completes them, watches the peer */
static void sn_qp_progress_sq(sn_qp_t *qp)
{
    uint64_t now;

    if (sn_qp_connected(qp)) {
        sn_qp_push(qp);
        sn_qp_ring_peer(qp);
        sn_qp_reap(qp, qp->send_cq);
        if (!sn_qp_waits_on_peer(qp)) {
            return;
        }
        /* still waiting: is the peer still there?  (rate-limited: the clock
         * is read every 64 polls, /proc every SN_LIVENESS_PERIOD_NS) */
        if (((++qp->liveness_polls & 63) != 1) &&
            !sn_qp_ctx(qp)->liveness_now) {
            return;
        }
        now = sn_now_ns();
        if (sn_unlikely(sn_qp_nak_check(qp, now))) {
            sn_qp_reap(qp, qp->send_cq);
            return;
        }
        if ((now >= qp->next_liveness_ns) || sn_qp_ctx(qp)->liveness_now) {
            qp->next_liveness_ns = now + SN_LIVENESS_PERIOD_NS;
            if (!sn_qp_peer_alive(qp)) {
                sn_qp_peer_gone(qp, now);
            }
        }
    } else if (qp->ibv.state == IBV_QPS_ERR) {
        /* sent requests that the peer had not consumed will never be */
        qp->out_head_cache = atomic_load_explicit(&qp->out->head,
                                                  memory_order_acquire);
        sn_qp_reap(qp, qp->send_cq);
        if (qp->sq_head != qp->sq_tail) {
            sn_qp_fail_from(qp, qp->sq_head, IBV_WC_RETRY_EXC_ERR);
        }
    }
    sn_qp_reap(qp, qp->send_cq);
}

/* Only unsignaled sends on the wire, nothing queued: nobody waits for a
 * completion, so the full look (the peer's position, its liveness) is
 * taken at every 16th poll only, and counted as 16 for the liveness
 * check's pace */
static inline bool sn_qp_sq_quiet(sn_qp_t *qp)
{
    if ((qp->sig_pending != 0) || (qp->sq_sent != qp->sq_tail) ||
        (qp->fin_count != 0) || qp->offered || sn_qp_ctx(qp)->liveness_now ||
        !sn_qp_connected(qp)) {
        return false;
    }
    if ((++qp->head_polls & 15) != 0) {
        return true;
    }
    --qp->head_polls;           /* so that the reap reads the position */
    qp->liveness_polls += 15;
    return false;
}

/* Send-side work, from the poll of the QP's send CQ (a UD QP's sends are
 * done when posted: they only complete) */
void sn_qp_progress_send(sn_qp_t *qp)
{
    if (sn_qp_waits_on_peer(qp)) {
        if (sn_likely(qp->ud == NULL)) {
            if (!sn_qp_sq_quiet(qp)) {
                sn_qp_progress_sq(qp);
            }
        } else {
            sn_qp_reap(qp, qp->send_cq);
        }
    }
    if (sn_unlikely(qp->last_wqe_due)) {
        sn_qp_last_wqe_check(qp);
    }
}
