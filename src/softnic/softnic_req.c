/*
 * Software NIC: the requester.  A QP's send work requests wait in its send
 * queue and go on the wire in posting order: a SEND into the peer's
 * inbound ring (while it has room), an RDMA READ or WRITE as one copy
 * between the processes once every earlier request of the QP is on the
 * wire.  FINs the NIC sends for rendezvous it read go before them.  What
 * waits for room is offered to the peer's device (softnic_pull.c).  The
 * completer (softnic_comp.c) completes them in order.
 */
#include "softnic_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- ring: producer side ---- */

/* Type 0 where the next record will start: see sn_ring_ctl_t */
static inline void sn_ring_terminate(sn_qp_t *qp, uint64_t pos)
{
    __atomic_store_n(&sn_ring_rec(qp->out, qp->out_mask, pos)->type, 0,
                     __ATOMIC_RELAXED);
}

/* Room for a record of len bytes (plus padding to the end of the buffer, plus
 * the line of the next record's terminator)?  The consumer's position is read
 * only when the cached one says the ring is full. */
static inline sn_rec_t *sn_ring_reserve(sn_qp_t *qp, uint32_t len)
{
    uint32_t size  = sn_rec_size(len);
    uint32_t ring  = qp->out_mask + 1;
    uint32_t pos   = qp->out_tail & qp->out_mask;
    uint32_t to_end = ring - pos;
    uint64_t need  = ((size > to_end) ? (uint64_t)to_end + size : size) +
                     SN_CACHE_LINE;
    sn_rec_t *pad;

    if (sn_unlikely(qp->out_tail + need - qp->out_head_cache > ring)) {
        qp->out_head_cache = atomic_load_explicit(&qp->out->head,
                                                  memory_order_acquire);
        if (qp->out_tail + need - qp->out_head_cache > ring) {
            return NULL;
        }
    }
    if (sn_unlikely(size > to_end)) {
        pad      = sn_ring_rec(qp->out, qp->out_mask, qp->out_tail);
        pad->len = to_end - sizeof(sn_rec_t);
        qp->out_tail += to_end;
        /* the consumer goes on at offset 0 once it sees the PAD */
        sn_ring_terminate(qp, qp->out_tail);
        __atomic_store_n(&pad->type, SN_REC_PAD, __ATOMIC_RELEASE);
    }
    return sn_ring_rec(qp->out, qp->out_mask, qp->out_tail);
}

static inline void sn_ring_publish(sn_qp_t *qp, sn_rec_t *rec, uint32_t len,
                                   uint16_t flags, uint32_t imm_data)
{
    rec->len      = len;
    rec->flags    = flags;
    rec->imm_data = imm_data;
    qp->out_tail += sn_rec_size(len);
    sn_ring_terminate(qp, qp->out_tail);
    /* the flag last: the consumer sees the contents and the terminator */
    __atomic_store_n(&rec->type, SN_REC_MSG, __ATOMIC_RELEASE);
    /* own the line of the next record's terminator before we need it (the
     * consumer is about to poll the one right after this record) */
    __builtin_prefetch(sn_ring_rec(qp->out, qp->out_mask,
                                   qp->out_tail + SN_CACHE_LINE), 1);
}


/* ---- pushing requests onto the wire ---- */

static void sn_wqe_gather(const sn_qp_t *qp, const sn_wqe_t *wqe,
                          uint8_t *dst)
{
    uint32_t i;

    if (wqe->inline_len || (wqe->num_sge == 0)) {
        memcpy(dst, sn_wqe_inline(qp, wqe), wqe->inline_len);
        return;
    }
    for (i = 0; i < wqe->num_sge; ++i) {
        memcpy(dst, (void *)(uintptr_t)wqe->sge[i].addr, wqe->sge[i].length);
        dst += wqe->sge[i].length;
    }
}

static bool sn_sges_lkeys_ok(sn_context_t *ctx, const struct ibv_sge *sge,
                             uint32_t num_sge)
{
    uint32_t i;

    for (i = 0; i < num_sge; ++i) {
        if (!sn_key_check(ctx->seg, sge[i].lkey, sge[i].addr, sge[i].length,
                          0)) {
            return false;
        }
    }
    return true;
}

static bool sn_wqe_lkeys_ok(sn_context_t *ctx, const sn_wqe_t *wqe)
{
    return sn_sges_lkeys_ok(ctx, wqe->sge, wqe->num_sge);
}

/* RDMA READ/WRITE: checks both keys, then one copy per local entry */
static enum ibv_wc_status sn_wqe_rdma(sn_qp_t *qp, sn_wqe_t *wqe)
{
    sn_context_t *ctx = sn_qp_ctx(qp);
    bool write      = (wqe->opcode != IBV_WR_RDMA_READ);
    uint32_t access = write ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ;
    uint64_t remote = wqe->remote_addr;
    uint32_t i;
    int ret;

    if (wqe->byte_len == 0) {
        /* no key to check (UCX flushes and checks endpoints with one), but
         * the responder must answer: a dead peer sends no ACK (the liveness
         * check, cheaper than the QP's retries, in this rare case) */
        return sn_qp_peer_alive(qp) ? IBV_WC_SUCCESS : IBV_WC_RETRY_EXC_ERR;
    }
    if (!sn_key_check(qp->peer->seg, wqe->rkey, remote, wqe->byte_len,
                      access)) {
        return IBV_WC_REM_ACCESS_ERR;
    }
    if (wqe->inline_len) {
        ret = sn_rdma_copy((pid_t)qp->peer_proc.pid, true,
                           sn_wqe_inline(qp, wqe), remote, wqe->inline_len);
        goto out;
    }
    if (!sn_wqe_lkeys_ok(ctx, wqe)) {
        return IBV_WC_LOC_PROT_ERR;
    }
    for (i = 0, ret = 0; (i < wqe->num_sge) && (ret == 0); ++i) {
        ret = write ? sn_rdma_copy((pid_t)qp->peer_proc.pid, true,
                                   (void *)(uintptr_t)wqe->sge[i].addr,
                                   remote, wqe->sge[i].length) :
                      sn_rdma_read(ctx, qp->peer->seg, &qp->peer_proc,
                                   (void *)(uintptr_t)wqe->sge[i].addr,
                                   remote, wqe->rkey, wqe->sge[i].length);
        remote += wqe->sge[i].length;
    }
out:
    if (ret == ESRCH) {
        return IBV_WC_RETRY_EXC_ERR;
    }
    return (ret == 0) ? IBV_WC_SUCCESS : IBV_WC_REM_ACCESS_ERR;
}

/* A FIN onto the ring, if it has room */
static bool sn_qp_put_fin(sn_qp_t *qp, const sn_fin_t *fin)
{
    sn_rec_t *rec = sn_ring_reserve(qp, sizeof(fin->data));

    if (rec == NULL) {
        return false;
    }
    memcpy(rec + 1, fin->data, sizeof(fin->data));
    sn_ring_publish(qp, rec, sizeof(fin->data), 0, 0);
    return true;
}

/* FINs that waited go out, each followed by its entry's completion */
static void sn_qp_push_fins(sn_qp_t *qp)
{
    uint32_t i;

    for (i = 0; (i < qp->fin_count) && sn_qp_put_fin(qp, &qp->fins[i]); ++i) {
        sn_srq_push_final(qp, &qp->fins[i]);
    }
    memmove(qp->fins, qp->fins + i, (qp->fin_count - i) * sizeof(*qp->fins));
    qp->fin_count -= i;
}

/* The QP fails: the FINs that waited will not go, and the entries they
 * answer were read, so they complete */
void sn_qp_fins_complete(sn_qp_t *qp)
{
    uint32_t i;

    for (i = 0; i < qp->fin_count; ++i) {
        sn_srq_push_final(qp, &qp->fins[i]);
    }
    qp->fin_count = 0;
}

/* An RDMA WRITE with immediate: the data, then a record with the
 * immediate data that consumes a receive (room for it first, so that the
 * write is done once); completes as a SEND, once the peer took the record.
 * False when it must wait or failed */
static bool sn_qp_push_write_imm(sn_qp_t *qp, sn_wqe_t *wqe)
{
    enum ibv_wc_status status;
    sn_rec_t *rec;

    rec = sn_ring_reserve(qp, 0);
    if (rec == NULL) {
        return false;
    }
    status = sn_wqe_rdma(qp, wqe);
    if (status != IBV_WC_SUCCESS) {
        sn_qp_set_error(qp);
        sn_qp_fail_from(qp, qp->sq_sent, status);
        return false;
    }
    rec->write_len = wqe->byte_len;
    sn_ring_publish(qp, rec, 0, SN_REC_F_IMM | SN_REC_F_WRITE |
                    wqe->solicited, wqe->imm_data);
    wqe->ring_end = qp->out_tail;
    wqe->state    = SN_WQE_SENT;
    return true;
}

/* The NIC's FINs first, then send requests in order, while the ring has
 * room */
static void sn_qp_push_wire(sn_qp_t *qp)
{
    sn_context_t *ctx = sn_qp_ctx(qp);
    enum ibv_wc_status status;
    sn_wqe_t *wqe;
    sn_rec_t *rec;

    if (sn_unlikely(qp->fin_count != 0)) {
        sn_qp_push_fins(qp);
    }

    while (qp->sq_sent != qp->sq_tail) {
        wqe = sn_sq_wqe(qp, qp->sq_sent);
        if (sn_likely((wqe->opcode == IBV_WR_SEND) ||
                        (wqe->opcode == IBV_WR_SEND_WITH_IMM))) {
            if (sn_unlikely(!wqe->inline_len && !sn_wqe_lkeys_ok(ctx, wqe))) {
                sn_qp_set_error(qp);
                sn_qp_fail_from(qp, qp->sq_sent, IBV_WC_LOC_PROT_ERR);
                return;
            }
            rec = sn_ring_reserve(qp, wqe->byte_len);
            if (rec == NULL) {
                return;             /* ring full: the peer is behind */
            }
            sn_wqe_gather(qp, wqe, (uint8_t *)(rec + 1));
            sn_ring_publish(qp, rec, wqe->byte_len,
                            ((wqe->opcode == IBV_WR_SEND_WITH_IMM) ?
                             SN_REC_F_IMM : 0) | wqe->solicited,
                            wqe->imm_data);
            wqe->ring_end = qp->out_tail;
            wqe->state    = SN_WQE_SENT;
        } else if (sn_unlikely(wqe->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)) {
            if (!sn_qp_push_write_imm(qp, wqe)) {
                return;             /* ring full, or the QP failed */
            }
        } else {
            status = sn_wqe_rdma(qp, wqe);
            if (status != IBV_WC_SUCCESS) {
                sn_qp_set_error(qp);
                sn_qp_fail_from(qp, qp->sq_sent, status);
                return;
            }
            sn_wqe_done(wqe, IBV_WC_SUCCESS);
        }
        ++qp->sq_sent;
    }
}

/* What can go on the wire goes; what must wait for room is offered to the
 * peer's device, which takes it if we stop polling (softnic_pull.c) */
void sn_qp_push(sn_qp_t *qp)
{
    if (sn_unlikely(qp->pkey_drop)) {
        sn_qp_pkey_dropped(qp);
        return;
    }
    if (sn_unlikely(qp->offered)) {
        if (sn_qp_backlog_begin(qp)) {
            sn_qp_push_wire(qp);
            sn_qp_backlog_end(qp);
        }
        return;
    }
    sn_qp_push_wire(qp);
    if (sn_unlikely(qp->sq_sent != qp->sq_tail)) {
        sn_qp_backlog_offer(qp);
    }
}


/* A FIN from the NIC (not a work request: no send completion).  0 when it
 * is on the wire; EINPROGRESS when it waits for room, and then the entry's
 * final completion comes after it (sn_qp_push_fins) */
int sn_qp_send_fin(sn_qp_t *qp, const sn_fin_t *fin)
{
    sn_fin_t *fins;
    uint32_t cap;

    if (!sn_qp_connected(qp)) {
        return ENOTCONN;
    }
    if ((qp->fin_count == 0) && !qp->offered && sn_qp_put_fin(qp, fin)) {
        sn_qp_ring_peer(qp);
        return 0;
    }
    /* ring full: keep it until the peer catches up (slow path) */
    if (qp->fin_count == qp->fin_cap) {
        cap  = qp->fin_cap ? 2 * qp->fin_cap : 16;
        fins = realloc(qp->fins, cap * sizeof(*fins));
        if (fins == NULL) {
            return ENOMEM;
        }
        qp->fins    = fins;
        qp->fin_cap = cap;
    }
    qp->fins[qp->fin_count++] = *fin;
    sn_qp_mark_busy(qp);
    return EINPROGRESS;
}

/* Checks one work request and fills a send queue entry from it */
static int sn_wqe_fill(sn_qp_t *qp, const struct ibv_send_wr *wr,
                       sn_wqe_t *wqe)
{
    uint64_t len = 0;
    uint8_t *dst;
    int i;

    if (wr->num_sge < 0) {
        return EINVAL;
    }
    if ((uint32_t)wr->num_sge > qp->attr.cap.max_send_sge) {
        return ENOMEM;          /* mlx5's post_send: past the gather list */
    }
    for (i = 0; i < wr->num_sge; ++i) {
        len += wr->sg_list[i].length;
    }
    switch (wr->opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
        if ((len > qp->max_send_size) ||
            (sn_rec_size((uint32_t)len) * 2 > qp->out_mask + 1)) {
            return EINVAL;
        }
        break;
    case IBV_WR_RDMA_READ:
        if (wr->send_flags & IBV_SEND_INLINE) {
            return EINVAL;
        }
        /* fall through */
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        if (len > SN_MAX_MSG_SIZE) {
            return EINVAL;
        }
        wqe->remote_addr = wr->wr.rdma.remote_addr;
        wqe->rkey        = wr->wr.rdma.rkey;
        break;
    default:
        return EINVAL;
    }

    wqe->wr_id      = wr->wr_id;
    wqe->opcode     = (uint8_t)wr->opcode;
    wqe->signaled   = sn_wr_signaled(qp, wr);
    wqe->solicited  = (wr->send_flags & IBV_SEND_SOLICITED) ?
                      SN_REC_F_SOLICITED : 0;
    wqe->state      = SN_WQE_QUEUED;
    wqe->status     = IBV_WC_SUCCESS;
    wqe->byte_len   = (uint32_t)len;
    wqe->imm_data   = wr->imm_data;
    wqe->inline_len = 0;
    wqe->num_sge    = 0;
    if (wr->send_flags & IBV_SEND_INLINE) {
        if (len > qp->attr.cap.max_inline_data) {  /* what it granted */
            return EINVAL;
        }
        for (i = 0, dst = sn_wqe_inline(qp, wqe); i < wr->num_sge; ++i) {
            memcpy(dst, (void *)(uintptr_t)wr->sg_list[i].addr,
                   wr->sg_list[i].length);
            dst += wr->sg_list[i].length;
        }
        wqe->inline_len = (uint32_t)len;
    } else {
        for (i = 0; i < wr->num_sge; ++i) {
            wqe->sge[i] = wr->sg_list[i];
        }
        wqe->num_sge = (uint32_t)wr->num_sge;
    }
    return 0;
}

/*
 * Fast path of a SEND: when nothing waits ahead of it and the ring has
 * room, the data goes from the gather list straight into the ring (one
 * copy, inline or not) and the send queue entry keeps only what its
 * completion needs.  Same result as filling the entry and pushing it: the
 * keys are checked as the push checks them, and a request the push would
 * fail, or one it must hold, takes that path.
 */
static inline bool sn_post_send_direct(sn_qp_t *qp,
                                       const struct ibv_send_wr *wr,
                                       sn_wqe_t *wqe)
{
    bool inl     = wr->send_flags & IBV_SEND_INLINE;
    uint64_t len = 0;
    sn_rec_t *rec;
    uint8_t *dst;
    int i;

    if (((wr->opcode != IBV_WR_SEND) && (wr->opcode != IBV_WR_SEND_WITH_IMM)) ||
        (qp->ibv.state != IBV_QPS_RTS) || qp->pkey_drop ||
        (qp->sq_sent != qp->sq_tail) || (qp->fin_count != 0) ||
        (wr->num_sge < 0) ||
        ((uint32_t)wr->num_sge > qp->attr.cap.max_send_sge)) {
        return false;
    }
    for (i = 0; i < wr->num_sge; ++i) {
        len += wr->sg_list[i].length;
    }
    if (inl ? (len > qp->attr.cap.max_inline_data) :
              !sn_sges_lkeys_ok(sn_qp_ctx(qp), wr->sg_list, wr->num_sge)) {
        return false;       /* sn_wqe_fill() reports it, or the push fails it */
    }
    if (len > qp->max_send_size) {
        return false;
    }
    rec = sn_ring_reserve(qp, (uint32_t)len);
    if (rec == NULL) {
        return false;
    }
    for (i = 0, dst = (uint8_t *)(rec + 1); i < wr->num_sge; ++i) {
        memcpy(dst, (void *)(uintptr_t)wr->sg_list[i].addr,
               wr->sg_list[i].length);
        dst += wr->sg_list[i].length;
    }
    sn_ring_publish(qp, rec, (uint32_t)len,
                    ((wr->opcode == IBV_WR_SEND_WITH_IMM) ? SN_REC_F_IMM : 0) |
                    ((wr->send_flags & IBV_SEND_SOLICITED) ?
                     SN_REC_F_SOLICITED : 0), wr->imm_data);
    wqe->wr_id      = wr->wr_id;
    wqe->opcode     = (uint8_t)wr->opcode;
    wqe->signaled   = sn_wr_signaled(qp, wr);
    wqe->state      = SN_WQE_SENT;
    wqe->status     = IBV_WC_SUCCESS;
    wqe->byte_len   = (uint32_t)len;
    wqe->ring_end   = qp->out_tail;
    return true;
}

/* Posts a chain under the context's lock; the caller kicks the engine */
static int sn_post_send_locked(sn_qp_t *qp, struct ibv_send_wr *wr,
                               struct ibv_send_wr **bad_wr)
{
    sn_wqe_t *wqe;
    int ret = 0;

    for (; wr != NULL; wr = wr->next) {
        if (sn_unlikely((qp->ibv.state != IBV_QPS_RTS) &&
                        (qp->ibv.state != IBV_QPS_ERR))) {
            ret = EINVAL;           /* not ready to send */
            break;
        }
        if (sn_unlikely(qp->sq_tail - qp->sq_head >= qp->sq_size)) {
            ret = ENOMEM;
            break;
        }
        wqe = sn_sq_wqe(qp, qp->sq_tail);
        if (sn_post_send_direct(qp, wr, wqe)) {
            qp->sig_pending += wqe->signaled;
            ++qp->sq_tail;
            ++qp->sq_sent;
            continue;
        }
        ret = sn_wqe_fill(qp, wr, wqe);
        if (sn_unlikely(ret != 0)) {
            break;
        }
        qp->sig_pending += wqe->signaled;
        ++qp->sq_tail;
        if (sn_unlikely(qp->ibv.state == IBV_QPS_ERR)) {
            sn_qp_fail_from(qp, qp->sq_tail - 1, IBV_WC_WR_FLUSH_ERR);
        }
    }
    if (ret != 0) {
        *bad_wr = wr;
    }
    if (qp->ibv.state == IBV_QPS_RTS) {
        sn_qp_push(qp);
        sn_qp_ring_peer(qp);    /* its device takes what we sent */
    }
    if (sn_qp_waits_on_peer(qp)) {
        sn_qp_mark_busy(qp);
    }
    return ret;
}

/*
 * The common post, inline: one SEND, nothing waiting ahead of it, room
 * in the ring.  What sn_post_send_locked does for it, without the
 * look at what waits to be pushed (nothing does): the record, the entry
 * its completion needs, the peer's doorbell, the busy list.
 */
static inline bool sn_post_send_fast(sn_qp_t *qp, struct ibv_send_wr *wr)
{
    sn_wqe_t *wqe;

    if ((wr->next != NULL) || qp->offered || (qp->ud != NULL) ||
        (qp->sq_tail - qp->sq_head >= qp->sq_size)) {
        return false;
    }
    wqe = sn_sq_wqe(qp, qp->sq_tail);
    if (!sn_post_send_direct(qp, wr, wqe)) {
        return false;
    }
    qp->sig_pending += wqe->signaled;
    ++qp->sq_tail;
    ++qp->sq_sent;
    sn_qp_ring_peer(qp);        /* its device takes what we sent */
    sn_qp_mark_busy(qp);        /* the send waits for its peer */
    return true;
}

int sn_post_send(struct ibv_qp *ibv_qp, struct ibv_send_wr *wr,
                 struct ibv_send_wr **bad_wr)
{
    sn_qp_t *qp       = sn_qp(ibv_qp);
    sn_context_t *ctx = sn_qp_ctx(qp);
    int ret;

    if (!ctx->threaded && sn_post_send_fast(qp, wr)) {
        return 0;
    }

    sn_ctx_lock(ctx);
    ret = sn_likely(qp->ud == NULL) ? sn_post_send_locked(qp, wr, bad_wr) :
                                      sn_ud_post_send(qp, wr, bad_wr);
    sn_ctx_unlock(ctx);
    /* our engine, asleep without its timer, completes the sends and
     * watches the peer from now on */
    sn_ctx_kick(ctx, true);
    return ret;
}

/* ibv_wr_complete (softnic_qp_ex.c): mlx5 posts a batch whole or rolls it
 * back, and a batch that overflows the send queue fails with ENOMEM */
int sn_post_send_batch(sn_qp_t *qp, struct ibv_send_wr *wr, uint32_t count)
{
    sn_context_t *ctx = sn_qp_ctx(qp);
    struct ibv_send_wr *bad_wr;
    int ret;

    sn_ctx_lock(ctx);
    if (sn_unlikely(qp->sq_size - (qp->sq_tail - qp->sq_head) < count)) {
        sn_ctx_unlock(ctx);
        return ENOMEM;
    }
    ret = sn_post_send_locked(qp, wr, &bad_wr);
    sn_ctx_unlock(ctx);
    sn_ctx_kick(ctx, true);
    return ret;
}
