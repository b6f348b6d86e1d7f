/*
 * Software NIC: receive queues that are not tag matching (softnic_rq.h).
 *
 * A QP created without an SRQ receives into its own receive queue; a
 * basic SRQ (IBV_SRQT_BASIC) is shared by the QPs attached to it.  Either
 * is an sn_srq_t with rq set, whose arrival stage runs as a TM-SRQ's does
 * (softnic_srq.c), and whose arrivals sn_srq_arrive hands here: every
 * message (SEND, SEND_WITH_IMM) takes the oldest posted receive, whole,
 * scattered over its entries, and completes as IBV_WC_RECV; an RDMA WRITE
 * with immediate, its data already written, takes one too and completes
 * as IBV_WC_RECV_RDMA_WITH_IMM with the length written.
 *
 * As on an RC responder:
 *  - no receive posted: RNR.  The message stays; the responder NAKs it
 *    (SN_NAK_RNR in the ring's NAK line, with its min_rnr_timer), and once
 *    the requester's rnr_retry retries are spent (7: never), either side
 *    ends the wait: the requester's request fails with
 *    IBV_WC_RNR_RETRY_EXC_ERR, its QP enters the error state, and nothing
 *    more of that ring is taken;
 *  - a message longer than the receive (IBV_WC_LOC_LEN_ERR), or a receive
 *    whose key is wrong (IBV_WC_LOC_PROT_ERR): the receive completes with
 *    that status, the QP enters the error state, and the requester's
 *    request fails with IBV_WC_REM_INV_REQ_ERR (a length error is an
 *    invalid request, IBTA 9.7.5.2.4) or IBV_WC_REM_OP_ERR;
 *  - a QP in the error state flushes its own receive queue, in posting
 *    order (IBV_WC_WR_FLUSH_ERR), and flushes at once what is posted later;
 *    a basic SRQ's receives stay for its other QPs.
 * Error completions read opcode 0 (IBV_WC_SEND), as mlx5's do.
 * A basic SRQ armed with a limit (ibv_modify_srq, IBV_SRQ_LIMIT) raises
 * IBV_EVENT_SRQ_LIMIT_REACHED once, when taking a receive leaves fewer
 * than the limit, and is disarmed.
 */
#include "softnic_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Our SRQs take no connections (softnic_dv_connect_qp_to_srq): the CQ's
 * work reads their accept queue's request count, which stays 0 here */
static sn_srq_seg_t sn_rq_no_accept;

/* The RNR timer's encoding (IBTA table 45), in units of 10 us */
static const uint32_t sn_rnr_timer_10us[32] = {
    65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256,
    384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384,
    24576, 32768, 49152
};

#define SN_RNR_RETRY_FOREVER   7


/* ---- creation ---- */

/*
 * A QP's own receive queue, as rdma-core's mlx5 sizes it
 * (providers/mlx5/verbs.c mlx5_calc_rcv_wqe, mlx5_calc_rq_size): a WQE of
 * 16 bytes per scatter entry rounded up to a power of two, as many WQEs as
 * max_recv_wr rounded up to a power of two and filling 64 bytes at least;
 * the QP gets them all, and as many scatter entries as its WQE holds.
 */
static void sn_rq_own_grant(struct ibv_qp_cap *cap)
{
    uint32_t sge, wqe, bytes;

    if (cap->max_recv_wr == 0) {
        cap->max_recv_sge = 0;
        return;
    }
    sge   = (cap->max_recv_sge > 1) ? cap->max_recv_sge : 1;
    wqe   = sn_roundup_pow2(16 * sge);
    bytes = sn_roundup_pow2(cap->max_recv_wr) * wqe;
    cap->max_recv_wr  = ((bytes > 64) ? bytes : 64) / wqe;
    cap->max_recv_sge = wqe / 16;
}

/*
 * A basic SRQ, as mlx5 sizes it (providers/mlx5/srq.c mlx5_alloc_srq_buf):
 * a WQE of a 16-byte next segment and 16 bytes per scatter entry, 32 at
 * least, rounded up to a power of two, and max_wr + 1 WQEs rounded up to a
 * power of two, one of which the free list keeps (mlx5_create_srq reports
 * the rest).
 */
static void sn_rq_srq_grant(struct ibv_srq_attr *attr)
{
    uint32_t wqe = 16 + 16 * attr->max_sge;

    wqe           = sn_roundup_pow2((wqe > 32) ? wqe : 32);
    attr->max_sge = (wqe - 16) / 16;
    attr->max_wr  = sn_roundup_pow2(attr->max_wr + 1) - 1;
}

static sn_rq_t *sn_rq_alloc(uint32_t max_wr, uint32_t max_sge)
{
    sn_rq_t *rq = calloc(1, sizeof(*rq));

    if (rq == NULL) {
        return NULL;
    }
    rq->max_wr  = max_wr;
    rq->max_sge = max_sge;
    rq->mask    = sn_roundup_pow2(max_wr ? max_wr : 1) - 1;
    rq->wqes    = calloc(rq->mask + 1, sizeof(*rq->wqes));
    if (rq->wqes == NULL) {
        free(rq);
        return NULL;
    }
    return rq;
}

static void sn_rq_free(sn_rq_t *rq)
{
    free(rq->wqes);
    free(rq);
}

/* An SRQ around rq (a QP's own queue, or a basic SRQ's), not yet run by
 * any CQ's work */
static sn_srq_t *sn_rq_srq_alloc(sn_context_t *ctx, struct ibv_pd *pd,
                                 sn_rq_t *rq)
{
    sn_srq_t *srq = calloc(1, sizeof(*srq));

    if (srq == NULL) {
        return NULL;
    }
    srq->rq            = rq;
    srq->seg           = &sn_rq_no_accept;
    srq->packet_size   = ctx->attr.packet_size;
    srq->in_phase      = true;
    srq->match_barrier = UINT64_MAX;
    sn_list_init(&srq->qps);
    sn_list_init(&srq->active);
    sn_list_init(&srq->link);
    srq->rr_next       = &srq->active;
    srq->ibv.context   = &ctx->vctx.context;
    srq->ibv.pd        = pd;
    pthread_mutex_init(&srq->ibv.mutex, NULL);
    pthread_cond_init(&srq->ibv.cond, NULL);
    return srq;
}

/* An SRQ around rq, whose arrivals the CQ's work runs */
static sn_srq_t *sn_rq_srq_new(sn_context_t *ctx, struct ibv_pd *pd,
                               struct ibv_cq *cq, sn_rq_t *rq)
{
    sn_srq_t *srq = sn_rq_srq_alloc(ctx, pd, rq);

    if (srq == NULL) {
        return NULL;
    }
    srq->cq = sn_cq((struct ibv_cq_ex*)cq);
    sn_ctx_lock(ctx);
    sn_list_add_tail(&srq->cq->srqs, &srq->link);
    sn_ctx_unlock(ctx);
    return srq;
}

/* The engine no longer sees it (the lock held) */
static void sn_rq_srq_free(sn_srq_t *srq)
{
    sn_list_del(&srq->link);
    pthread_mutex_destroy(&srq->ibv.mutex);
    pthread_cond_destroy(&srq->ibv.cond);
    sn_rq_free(srq->rq);
    free(srq);
}

/* A QP without an SRQ: its receive queue's capabilities (mlx5: EINVAL past
 * the device's limits, mlx5_get_max_recv_wr, mlx5_calc_rcv_wqe) */
int sn_rq_qp_attr_check(const struct ibv_qp_init_attr *attr)
{
    if ((attr->cap.max_recv_wr > SN_MAX_QP_WR) ||
        (attr->cap.max_recv_sge > SN_MAX_SGE) ||
        !sn_is_softnic(attr->recv_cq->context)) {
        return EINVAL;
    }
    return 0;
}

/* The receive queue of a QP being created; cap gets what it grants */
sn_srq_t *sn_rq_own_create(sn_context_t *ctx, struct ibv_pd *pd,
                           struct ibv_cq *recv_cq, struct ibv_qp_cap *cap)
{
    sn_srq_t *srq;
    sn_rq_t *rq;

    sn_rq_own_grant(cap);
    rq = sn_rq_alloc(cap->max_recv_wr, cap->max_recv_sge);
    if (rq == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    srq = sn_rq_srq_new(ctx, pd, recv_cq, rq);
    if (srq == NULL) {
        sn_rq_free(rq);
        errno = ENOMEM;
    }
    return srq;
}

/* After its QP went */
void sn_rq_own_destroy(sn_srq_t *srq)
{
    sn_context_t *ctx = sn_ctx(srq->ibv.context);

    sn_ctx_lock(ctx);
    sn_rq_srq_free(srq);
    sn_ctx_unlock(ctx);
}

/* ibv_create_srq_ex of type IBV_SRQT_BASIC (ibv_create_srq too) */
struct ibv_srq *sn_rq_create_srq_ex(struct ibv_context *context,
                                    struct ibv_srq_init_attr_ex *attr)
{
    const uint32_t known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                           IBV_SRQ_INIT_ATTR_CQ;
    sn_context_t *ctx    = sn_ctx(context);
    struct ibv_srq_attr grant;
    sn_srq_t *srq;
    sn_rq_t *rq;

    /* mlx5_create_srq: EINVAL past the device's limits; a basic SRQ's
     * completions go to its QPs' receive CQs */
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || (attr->pd == NULL) ||
        (attr->comp_mask & ~known)) {
        errno = (attr->comp_mask & ~known) ? EOPNOTSUPP : EINVAL;
        return NULL;
    }
    if ((attr->attr.max_wr == 0) || (attr->attr.max_wr > SN_MAX_SRQ_WR) ||
        (attr->attr.max_sge > SN_MAX_SRQ_SGE)) {
        errno = EINVAL;
        return NULL;
    }
    grant = attr->attr;
    sn_rq_srq_grant(&grant);
    rq = sn_rq_alloc(grant.max_wr, grant.max_sge);
    if (rq == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    /* linked to a CQ when a QP attaches (sn_rq_srq_attach) */
    srq = sn_rq_srq_alloc(ctx, attr->pd, rq);
    if (srq == NULL) {
        sn_rq_free(rq);
        errno = ENOMEM;
        return NULL;
    }
    srq->ibv.srq_context = attr->srq_context;
    sn_ctx_lock(ctx);
    srq->num        = ctx->next_srq_num++;
    srq->ibv.handle = srq->num;
    ++ctx->srqs;
    sn_ctx_unlock(ctx);
    attr->attr.max_wr  = grant.max_wr;
    attr->attr.max_sge = grant.max_sge;
    return &srq->ibv;
}

/*
 * A QP attaches to a basic SRQ: the SRQ's arrivals run in the work of the
 * first attached QP's receive CQ, where its completions go.  QPs of one
 * basic SRQ with different receive CQs, which a NIC allows, are refused
 * (EOPNOTSUPP): the software NIC runs an SRQ's arrivals for one CQ.
 */
int sn_rq_srq_attach(sn_srq_t *srq, struct ibv_cq *recv_cq)
{
    sn_cq_t *cq = sn_cq((struct ibv_cq_ex*)recv_cq);

    if (srq->cq == NULL) {
        srq->cq = cq;
        sn_list_add_tail(&cq->srqs, &srq->link);
        return 0;
    }
    return (srq->cq == cq) ? 0 : EOPNOTSUPP;
}

int sn_rq_destroy_srq(sn_srq_t *srq)
{
    sn_context_t *ctx = sn_ctx(srq->ibv.context);

    sn_ctx_lock(ctx);
    if (!sn_list_empty(&srq->qps)) {
        sn_ctx_unlock(ctx);
        return EBUSY;           /* a QP still receives through it */
    }
    sn_list_del(&srq->link);   /* the engine no longer sees it */
    --ctx->srqs;
    pthread_mutex_destroy(&srq->ibv.mutex);
    pthread_cond_destroy(&srq->ibv.cond);
    sn_rq_free(srq->rq);
    free(srq);
    sn_ctx_unlock(ctx);
    return 0;
}


/* ---- posting ---- */

/* A receive's scatter list: zero-length entries are skipped, as mlx5's
 * post_recv writes none for them */
static int sn_rq_fill(sn_rq_t *rq, const struct ibv_recv_wr *wr)
{
    sn_rwqe_t *wqe;
    uint64_t length = 0;
    int i;

    if ((wr->num_sge < 0) || ((uint32_t)wr->num_sge > rq->max_sge)) {
        return EINVAL;
    }
    if (rq->tail - rq->head >= rq->max_wr) {
        return ENOMEM;
    }
    wqe          = &rq->wqes[rq->tail & rq->mask];
    wqe->wr_id   = wr->wr_id;
    wqe->num_sge = 0;
    for (i = 0; i < wr->num_sge; ++i) {
        if (wr->sg_list[i].length != 0) {
            wqe->sge[wqe->num_sge++] = wr->sg_list[i];
            length                  += wr->sg_list[i].length;
        }
    }
    wqe->length = (length > UINT32_MAX) ? UINT32_MAX : (uint32_t)length;
    ++rq->tail;
    return 0;
}

static void sn_rq_push_flush(sn_cq_t *cq, sn_qp_t *qp, uint64_t wr_id)
{
    sn_cqe_t *wc = sn_cq_push(cq);

    wc->wr_id  = wr_id;
    wc->status = IBV_WC_WR_FLUSH_ERR;
    wc->opcode = IBV_WC_SEND;   /* mlx5 reads 0 from every error CQE */
    wc->qp_num = qp->ibv.qp_num;
}

/* A QP in the error state flushes its receive queue, in posting order */
static void sn_rq_flush(sn_srq_t *srq, sn_qp_t *qp)
{
    sn_rq_t *rq = srq->rq;

    for (; rq->head != rq->tail; ++rq->head) {
        sn_rq_push_flush(srq->cq, qp, rq->wqes[rq->head & rq->mask].wr_id);
    }
}

/* ibv_post_recv (the context's post_recv) */
int sn_rq_post_recv(struct ibv_qp *ibv_qp, struct ibv_recv_wr *wr,
                    struct ibv_recv_wr **bad_wr)
{
    sn_qp_t *qp       = sn_qp(ibv_qp);
    sn_context_t *ctx = sn_qp_ctx(qp);
    sn_srq_t *srq     = qp->srq;
    int ret           = 0;

    if ((srq->rq == NULL) || (srq->rq->owner != qp)) {
        *bad_wr = wr;
        return EINVAL;          /* it receives through an SRQ */
    }
    sn_ctx_lock(ctx);
    for (; wr != NULL; wr = wr->next) {
        ret = sn_rq_fill(srq->rq, wr);
        if (ret != 0) {
            *bad_wr = wr;
            break;
        }
    }
    if (qp->ibv.state == IBV_QPS_ERR) {
        sn_rq_flush(srq, qp);   /* as the NIC flushes what comes in error */
    }
    sn_ctx_unlock(ctx);
    /* a message waiting for a receive (RNR) goes on */
    sn_ctx_kick(ctx, false);
    return ret;
}

/* ibv_post_srq_recv on a basic SRQ */
int sn_rq_post_srq_recv(sn_srq_t *srq, struct ibv_recv_wr *wr,
                        struct ibv_recv_wr **bad_wr)
{
    sn_context_t *ctx = sn_ctx(srq->ibv.context);
    int ret           = 0;

    sn_ctx_lock(ctx);
    for (; wr != NULL; wr = wr->next) {
        ret = sn_rq_fill(srq->rq, wr);
        if (ret != 0) {
            *bad_wr = wr;
            break;
        }
    }
    sn_ctx_unlock(ctx);
    sn_ctx_kick(ctx, false);
    return ret;
}


/* ---- arrivals ---- */

bool sn_rq_arrival_can(sn_srq_t *srq, sn_qp_t *qp)
{
    return (srq->rq->head != srq->rq->tail) &&
           (atomic_load_explicit(&qp->in->nak, memory_order_relaxed) !=
            SN_NAK_FAILED);
}

/* The requester's RNR retries are spent at now? */
static bool sn_rnr_expired(const sn_ring_ctl_t *ring, uint32_t rnr_retry,
                           uint64_t now)
{
    return (rnr_retry != SN_RNR_RETRY_FOREVER) &&
           (now - ring->rnr_t0_ns >= rnr_retry * ring->rnr_timer_ns);
}

/* The head message finds no receive: the first RNR NAK of its wait */
static void sn_rq_rnr_nak(sn_qp_t *qp)
{
    sn_ring_ctl_t *ring = qp->in;

    ring->nak_pos      = qp->in_head;
    ring->rnr_t0_ns    = sn_now_ns();
    ring->rnr_timer_ns = sn_rnr_timer_10us[qp->attr.min_rnr_timer & 31] *
                         10000ull;
    atomic_store_explicit(&ring->nak, SN_NAK_RNR, memory_order_release);
    sn_debug("QP 0x%x: RNR (no receive posted)", qp->ibv.qp_num);
}

/* A receive for the head message in an RNR wait: the wait ends here
 * unless the requester ended it (false) or its retries are spent */
static bool sn_rq_rnr_end(sn_qp_t *qp)
{
    sn_ring_ctl_t *ring = qp->in;
    uint32_t rnr        = SN_NAK_RNR;

    if (sn_rnr_expired(ring, ring->rnr_retry, sn_now_ns())) {
        ring->nak_status = IBV_WC_RNR_RETRY_EXC_ERR;
        atomic_compare_exchange_strong(&ring->nak, &rnr, SN_NAK_FAILED);
        sn_db_ring(qp->peer->seg);
        return false;
    }
    return atomic_compare_exchange_strong(&ring->nak, &rnr, SN_NAK_NONE);
}

/* One receive taken from a basic SRQ: its limit event when armed */
void sn_rq_taken(sn_srq_t *srq)
{
    sn_rq_t *rq = srq->rq;

    ++rq->head;
    if ((rq->limit != 0) && (rq->tail - rq->head < rq->limit)) {
        rq->limit     = 0;
        rq->limit_due = true;
        sn_async_raise(sn_ctx(srq->ibv.context));
    }
}

/* The receive failed: it completes with status, the requester's request
 * with nak_status, and the QP enters the error state */
static void sn_rq_fail(sn_srq_t *srq, sn_qp_t *qp, enum ibv_wc_status status,
                       enum ibv_wc_status nak_status)
{
    sn_rq_t *rq  = srq->rq;
    sn_cqe_t *wc = sn_cq_push(srq->cq);

    wc->wr_id      = rq->wqes[rq->head & rq->mask].wr_id;
    wc->status     = status;
    wc->opcode     = IBV_WC_SEND;   /* as every error CQE on mlx5 */
    wc->qp_num     = qp->ibv.qp_num;
    wc->src_qp     = qp->attr.dest_qp_num;
    wc->vendor_err = 0x10 + status;
    sn_rq_taken(srq);
    sn_debug("QP 0x%x: receive failed: %s", qp->ibv.qp_num,
             ibv_wc_status_str(status));
    qp->in->nak_status = nak_status;
    qp->in->nak_pos    = qp->in_head;
    atomic_store_explicit(&qp->in->nak, SN_NAK_FAILED, memory_order_release);
    sn_qp_set_error(qp);
    sn_db_ring(qp->peer->seg);
}

/* Does the receive take len bytes, and may the device write them? */
static enum ibv_wc_status sn_rq_check(sn_context_t *ctx,
                                      const sn_rwqe_t *wqe, uint32_t len)
{
    uint32_t piece, i;

    if (len > wqe->length) {
        return IBV_WC_LOC_LEN_ERR;
    }
    for (i = 0; (i < wqe->num_sge) && (len != 0); ++i) {
        piece = (len < wqe->sge[i].length) ? len : wqe->sge[i].length;
        if (!sn_key_check(ctx->seg, wqe->sge[i].lkey, wqe->sge[i].addr,
                          piece, 0)) {
            return IBV_WC_LOC_PROT_ERR;
        }
        len -= piece;
    }
    return IBV_WC_SUCCESS;
}

static void sn_rq_scatter(const sn_rwqe_t *wqe, const void *src, uint32_t len)
{
    const uint8_t *from = src;
    uint32_t piece, i;

    for (i = 0; (i < wqe->num_sge) && (len != 0); ++i) {
        piece = (len < wqe->sge[i].length) ? len : wqe->sge[i].length;
        memcpy((void *)(uintptr_t)wqe->sge[i].addr, from, piece);
        from += piece;
        len  -= piece;
    }
}

/* A message took the oldest receive: its completion.  An RDMA WRITE with
 * immediate (IBV_WC_RECV_RDMA_WITH_IMM) wrote its data in place, not into
 * the receive's buffers */
static void sn_rq_complete(sn_srq_t *srq, sn_qp_t *qp, const sn_rec_t *rec,
                           const sn_rwqe_t *wqe, enum ibv_wc_opcode opcode,
                           uint32_t byte_len)
{
    sn_cqe_t *wc = sn_cq_push(srq->cq);

    wc->wr_id    = wqe->wr_id;
    wc->status   = IBV_WC_SUCCESS;
    wc->opcode   = opcode;
    wc->qp_num   = qp->ibv.qp_num;
    wc->src_qp   = qp->attr.dest_qp_num;
    wc->byte_len = byte_len;
    wc->solicited = !!(rec->flags & SN_REC_F_SOLICITED);
    if (rec->flags & SN_REC_F_IMM) {
        wc->wc_flags = IBV_WC_WITH_IMM;
        wc->imm_data = rec->imm_data;
    }
    sn_rq_taken(srq);
}

/*
 * A message of qp (off its ring, or out of the requester's backlog:
 * softnic_pull.c) into the oldest receive: 0 when taken, EAGAIN when it
 * waits (RNR), EPROTO when it stays and the QP failed.  A message out of
 * the backlog takes part in no RNR wait and fails nothing: it waits, or
 * is left to the requester (EPROTO), which puts it on the ring.
 */
int sn_rq_arrive(sn_srq_t *srq, sn_qp_t *qp, const sn_rec_t *rec)
{
    sn_context_t *ctx = sn_ctx(srq->ibv.context);
    bool pulled       = (rec != sn_ring_head_rec(qp));
    sn_rq_t *rq       = srq->rq;
    enum ibv_wc_status status;
    const sn_rwqe_t *wqe;
    uint32_t nak      = SN_NAK_NONE;

    if (!pulled) {
        nak = atomic_load_explicit(&qp->in->nak, memory_order_acquire);
        if (nak == SN_NAK_FAILED) {
            return EAGAIN;      /* the requester gave up: nothing more */
        }
    }
    if (rq->head == rq->tail) {
        if (!pulled && (nak == SN_NAK_NONE)) {
            sn_rq_rnr_nak(qp);
        }
        return EAGAIN;
    }
    if ((nak == SN_NAK_RNR) && !sn_rq_rnr_end(qp)) {
        return EAGAIN;
    }

    wqe    = &rq->wqes[rq->head & rq->mask];
    if (sn_unlikely(rec->flags & SN_REC_F_WRITE)) {
        sn_rq_complete(srq, qp, rec, wqe, IBV_WC_RECV_RDMA_WITH_IMM,
                       rec->write_len);
        return 0;
    }
    status = sn_rq_check(ctx, wqe, rec->len);
    if (sn_unlikely(status != IBV_WC_SUCCESS)) {
        if (pulled) {
            return EPROTO;
        }
        sn_rq_fail(srq, qp, status, (status == IBV_WC_LOC_LEN_ERR) ?
                                    IBV_WC_REM_INV_REQ_ERR :
                                    IBV_WC_REM_OP_ERR);
        return EPROTO;
    }
    sn_rq_scatter(wqe, rec + 1, rec->len);
    sn_rq_complete(srq, qp, rec, wqe, IBV_WC_RECV, rec->len);
    return 0;
}

/* The QP enters the error state: its own receive queue is flushed */
void sn_rq_qp_error(sn_qp_t *qp)
{
    if ((qp->srq->rq != NULL) && (qp->srq->rq->owner == qp)) {
        sn_rq_flush(qp->srq, qp);
    }
}


/* ---- the requester's side of a NAK ---- */

/* Completes what the responder consumed before nak_pos, fails the request
 * there with status, and flushes the rest */
static void sn_qp_fail_at(sn_qp_t *qp, uint64_t pos, enum ibv_wc_status status)
{
    uint32_t index;
    sn_wqe_t *wqe;

    for (index = qp->sq_head; index != qp->sq_tail; ++index) {
        wqe = sn_sq_wqe(qp, index);
        if (wqe->state == SN_WQE_DONE) {
            continue;
        }
        if ((wqe->state != SN_WQE_SENT) ||
            ((int64_t)(wqe->ring_end - pos) > 0)) {
            break;
        }
        sn_wqe_done(wqe, IBV_WC_SUCCESS);
    }
    sn_qp_fail_from(qp, index, status);
}

/*
 * The requester looks at its peer's NAK line (while it waits on the peer,
 * and when it finds the peer gone): a NAK fails its request, and an RNR
 * wait whose retries are spent at now ends here.  True when the QP failed.
 */
bool sn_qp_nak_check(sn_qp_t *qp, uint64_t now)
{
    sn_ring_ctl_t *ring = qp->out;
    uint32_t nak        = atomic_load_explicit(&ring->nak,
                                               memory_order_acquire);
    enum ibv_wc_status status;

    if (sn_likely(nak == SN_NAK_NONE)) {
        return false;
    }
    if (nak == SN_NAK_RNR) {
        if ((now == 0) || !sn_rnr_expired(ring, qp->attr.rnr_retry, now) ||
            !atomic_compare_exchange_strong(&ring->nak, &nak,
                                            SN_NAK_FAILED)) {
            return false;
        }
        status = IBV_WC_RNR_RETRY_EXC_ERR;
    } else {
        status = (enum ibv_wc_status)ring->nak_status;
    }
    sn_debug("QP 0x%x: the peer answered: %s", qp->ibv.qp_num,
             ibv_wc_status_str(status));
    sn_qp_set_error(qp);
    sn_qp_fail_at(qp, ring->nak_pos, status);
    return true;
}


/* ---- SRQ attributes and events ---- */

int softnic_modify_srq(struct ibv_srq *ibv_srq, struct ibv_srq_attr *attr,
                       int attr_mask)
{
    sn_srq_t *srq     = sn_srq(ibv_srq);
    sn_context_t *ctx = sn_ctx(ibv_srq->context);

    /* mlx5 resizes no SRQ (the kernel's mlx5_ib_modify_srq: EINVAL for
     * IB_SRQ_MAX_WR), and a limit must be below the SRQ's size */
    if ((srq->rq == NULL) || (attr_mask & ~IBV_SRQ_LIMIT)) {
        return (srq->rq == NULL) ? EOPNOTSUPP : EINVAL;
    }
    if (!(attr_mask & IBV_SRQ_LIMIT)) {
        return 0;
    }
    if (attr->srq_limit > srq->rq->max_wr) {
        return EINVAL;
    }
    sn_ctx_lock(ctx);
    srq->rq->limit = attr->srq_limit;
    sn_ctx_unlock(ctx);
    return 0;
}

int softnic_query_srq(struct ibv_srq *ibv_srq, struct ibv_srq_attr *attr)
{
    sn_srq_t *srq     = sn_srq(ibv_srq);
    sn_context_t *ctx = sn_ctx(ibv_srq->context);

    if (srq->rq == NULL) {
        attr->max_wr    = srq->max_wr;
        attr->max_sge   = 1;
        attr->srq_limit = 0;
        return 0;
    }
    sn_ctx_lock(ctx);
    attr->max_wr    = srq->rq->max_wr;
    attr->max_sge   = srq->rq->max_sge;
    attr->srq_limit = srq->rq->limit;
    sn_ctx_unlock(ctx);
    return 0;
}

struct ibv_srq *softnic_create_srq(struct ibv_pd *pd,
                                   struct ibv_srq_init_attr *attr)
{
    struct ibv_srq_init_attr_ex ex;
    struct ibv_srq *srq;

    memset(&ex, 0, sizeof(ex));
    ex.srq_context = attr->srq_context;
    ex.attr        = attr->attr;
    ex.comp_mask   = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
    ex.srq_type    = IBV_SRQT_BASIC;
    ex.pd          = pd;
    srq = sn_rq_create_srq_ex(pd->context, &ex);
    if (srq != NULL) {
        attr->attr.max_wr  = ex.attr.max_wr;
        attr->attr.max_sge = ex.attr.max_sge;
    }
    return srq;
}

/* A basic SRQ's limit event not read yet (the lock held): SRQs that took
 * a receive are linked to a CQ */
bool sn_rq_event_get(sn_context_t *ctx, struct ibv_async_event *event)
{
    sn_list_t *it, *sit;
    sn_srq_t *srq;
    sn_cq_t *cq;

    for (it = ctx->cqs.next; it != &ctx->cqs; it = it->next) {
        cq = sn_container_of(it, sn_cq_t, link);
        for (sit = cq->srqs.next; sit != &cq->srqs; sit = sit->next) {
            srq = sn_container_of(sit, sn_srq_t, link);
            if ((srq->rq == NULL) || !srq->rq->limit_due) {
                continue;
            }
            srq->rq->limit_due = false;
            memset(event, 0, sizeof(*event));
            event->event_type  = IBV_EVENT_SRQ_LIMIT_REACHED;
            event->element.srq = &srq->ibv;
            return true;
        }
    }
    return false;
}
