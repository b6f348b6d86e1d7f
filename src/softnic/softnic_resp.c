/*
 * Software NIC: the responder.  Messages arriving on a QP's inbound ring
 * are judged against the TM-SRQ's matching list and placed (ARRIVAL): a
 * matched eager message into the tagged buffer, a matched rendezvous
 * announced (MATCH) and read later by the NIC, anything else whole into
 * the next untagged buffer.  The second half of a match (DATA) completes
 * with DATA_VALID; for a rendezvous it is the NIC's RDMA read, then the
 * FIN to the sender.  A QP whose message needs an untagged buffer when
 * none is posted waits: RNR, nothing lost.  The NIC never waits for room
 * in the CQ (softnic_cq.c).
 */
#include "softnic_int.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

#define SN_TMH_LEN   sizeof(struct ibv_tmh)
#define SN_RVH_LEN   sizeof(struct ibv_rvh)

/* Messages copied out of the ring from their end (sn_ring_copy_out) */
#define SN_RING_COPY_BACK_MIN  257
#define SN_RING_COPY_BACK_MAX  2048

/* How an arriving message is handled */
typedef enum {
    SN_ARR_UNEXP,        /* tagged, no matchable entry: untagged buffer */
    SN_ARR_NO_TAG,       /* IBV_TMH_NO_TAG or FIN: untagged buffer */
    SN_ARR_FIN_RX_ONLY,  /* FIN on a receive-only QP: as NO_TAG, and counted
                            as unexpected (choice 18) */
    SN_ARR_OTHER,        /* not a TM message: untagged buffer */
    SN_ARR_EAGER,        /* matched eager */
    SN_ARR_RNDV,         /* matched rendezvous */
    SN_ARR_BAD_RNDV      /* rendezvous on a QP with a send queue */
} sn_arrival_kind_t;


/* ---- the inbound ring ---- */

/* sn_ring_peek() found something else than a message at its position:
 * skips padding, then looks again (slow path, once per lap) */
bool sn_ring_skip_pad(sn_qp_t *qp, sn_rec_t **rec_p)
{
    sn_rec_t *rec = sn_ring_head_rec(qp);
    uint16_t type;

    for (;;) {
        type = sn_rec_type(rec);
        if (type == SN_REC_MSG) {
            *rec_p = rec;
            return true;
        }
        if ((type == 0) || (type == SN_REC_BACKLOG)) {
            return false;
        }
        sn_ring_advance(qp, rec->len);
        rec = sn_ring_head_rec(qp);
    }
}

/*
 * A message out of the ring, into a receive buffer.  A responder that keeps
 * pace with its producer copies a record right after it was published,
 * while the producer writes the next one just behind it: copied forward,
 * the hardware prefetcher runs on into those lines, and each goes back to
 * the producer, whose stores then wait (tag_bw at 1 KiB halved once the
 * receiver kept pace, issue 14).  Copied from its end, the prefetcher runs
 * back into records already taken.  Measured: up to 256 bytes and above
 * 2 KiB a forward copy is faster (by 10-15% at 64-200 bytes, 10% at
 * 4 KiB), and the stall was seen at 256 bytes and 1 KiB.
 */
static void sn_ring_copy_out(void *dst, const void *src, uint32_t len)
{
    uint32_t off = len;

    if ((len < SN_RING_COPY_BACK_MIN) || (len > SN_RING_COPY_BACK_MAX)) {
        memcpy(dst, src, len);
        return;
    }
    while (off >= SN_CACHE_LINE) {
        off -= SN_CACHE_LINE;
        memcpy((uint8_t *)dst + off, (const uint8_t *)src + off,
               SN_CACHE_LINE);
    }
    memcpy(dst, src, off);
}


/* ---- a list entry's buffer: its scatter entries, in order ---- */

/* May the device write the first len bytes of the buffer?  (len is at
 * most the entry's length) */
static bool sn_sge_keys_ok(sn_context_t *ctx, const struct ibv_sge *sge,
                           uint8_t num_sge, uint32_t len)
{
    uint32_t piece;
    uint8_t i;

    for (i = 0; (i < num_sge) && (len != 0); ++i) {
        piece = (len < sge[i].length) ? len : sge[i].length;
        if ((piece != 0) &&
            !sn_key_check(ctx->seg, sge[i].lkey, sge[i].addr, piece, 0)) {
            return false;
        }
        len -= piece;
    }
    return true;
}

/* The first len bytes of src into the buffer (sn_ring_copy_out: the
 * headers copied from elsewhere are shorter than its backward copy) */
static void sn_sge_scatter(const struct ibv_sge *sge, uint8_t num_sge,
                           const void *src, uint32_t len)
{
    const uint8_t *from = src;
    uint32_t piece;
    uint8_t i;

    for (i = 0; (i < num_sge) && (len != 0); ++i) {
        piece = (len < sge[i].length) ? len : sge[i].length;
        sn_ring_copy_out((void *)(uintptr_t)sge[i].addr, from, piece);
        from += piece;
        len  -= piece;
    }
}

/* A QP goes: its transfers still queued read nothing from it */
void sn_srq_forget_qp(sn_srq_t *srq, sn_qp_t *qp)
{
    uint32_t i;

    for (i = srq->xfer_head; i != srq->xfer_tail; ++i) {
        if (srq->xfers[i & srq->xfer_mask].qp == qp) {
            srq->xfers[i & srq->xfer_mask].qp = NULL;
        }
    }
}


/* ---- ARRIVAL ---- */


/* Judges a message against the list as it stands (changes nothing) */
static sn_arrival_kind_t sn_srq_judge(sn_srq_t *srq, const sn_qp_t *qp,
                                      const sn_rec_t *rec, sn_tag_t **tag_p)
{
    const struct ibv_tmh *tmh = (const struct ibv_tmh *)(rec + 1);

    *tag_p = NULL;
    if (rec->len < SN_TMH_LEN) {
        return SN_ARR_OTHER;
    }
    switch (tmh->opcode) {
    case IBV_TMH_FIN:
        /* The NIC's own FIN comes back on the QP that sent the request,
         * which has a send queue.  A FIN on a receive-only QP, where the
         * NIC does rendezvous itself, is one no NIC sent: how firmware
         * counts it nobody says, and the harsher reading counts it as
         * unexpected, while reporting it as any FIN (choice 18) */
        return qp->rx_only ? SN_ARR_FIN_RX_ONLY : SN_ARR_NO_TAG;
    case IBV_TMH_NO_TAG:
        /* mlx5 reports a FIN as TM_NO_TAG (UCX's rc_mlx5 reads it so) */
        return SN_ARR_NO_TAG;
    case IBV_TMH_EAGER:
        break;
    case IBV_TMH_RNDV:
        if (rec->len < SN_TMH_LEN + SN_RVH_LEN) {
            return SN_ARR_OTHER;  /* malformed: software sees it whole */
        }
        if (!qp->rx_only) {
            /* rendezvous offload exists only on a QP without a send queue
             * (the kernel's rule); the harsher reading of what a NIC does
             * with one elsewhere: a request it cannot serve */
            return SN_ARR_BAD_RNDV;
        }
        break;
    default:
        return SN_ARR_OTHER;      /* unknown opcodes */
    }
    *tag_p = sn_srq_tag_match(srq, be64toh(tmh->tag));
    if (*tag_p == NULL) {
        return SN_ARR_UNEXP;
    }
    return (tmh->opcode == IBV_TMH_EAGER) ? SN_ARR_EAGER : SN_ARR_RNDV;
}

static inline bool sn_srq_xfer_full(const sn_srq_t *srq)
{
    return srq->xfer_tail - srq->xfer_head > srq->xfer_mask;
}

/* Can this message be delivered now?  (RNR if not) */
static bool sn_srq_arrival_can(sn_srq_t *srq, const sn_qp_t *qp,
                               const sn_rec_t *rec, sn_tag_t **tag_p,
                               sn_arrival_kind_t *kind_p)
{
    *kind_p = sn_srq_judge(srq, qp, rec, tag_p);
    if ((*kind_p == SN_ARR_EAGER) || (*kind_p == SN_ARR_RNDV)) {
        /* the second half may need a transfer slot */
        return !sn_srq_xfer_full(srq);
    } else if (*kind_p == SN_ARR_BAD_RNDV) {
        return true;
    }
    return srq->rbuf_head != srq->rbuf_tail;
}

/* Can the oldest message on qp's ring be delivered now? */
bool sn_srq_arrival_ready(sn_srq_t *srq, sn_qp_t *qp)
{
    sn_arrival_kind_t kind;
    sn_rec_t *rec;
    sn_tag_t *tag;

    if (sn_unlikely(srq->rq != NULL)) {     /* not tag matching */
        return sn_qp_connected(qp) && sn_ring_peek(qp, &rec) &&
               ((qp->ud != NULL) || sn_rq_arrival_can(srq, qp));
    }
    return sn_qp_connected(qp) && sn_ring_peek(qp, &rec) &&
           sn_srq_arrival_can(srq, qp, rec, &tag, &kind);
}

/*
 * A receive that failed: the QP enters the error state (the sender's
 * requests fail, as on RC), and the SRQ's CQ gets an error completion as
 * mlx5 gives it: opcode 0 (IBV_WC_SEND), and the wr_id of the untagged
 * buffer at the head of the SRQ, which it consumes, whatever the error was
 * about (mlx5 frees the SRQ entry its CQE names): software must not read
 * anything into the wr_id, and must count one untagged buffer gone.
 */
void sn_srq_rx_error(sn_srq_t *srq, sn_qp_t *qp, enum ibv_wc_status status)
{
    sn_cqe_t *wc = sn_cq_push(srq->cq);

    wc->wr_id      = 0;
    if (srq->rbuf_head != srq->rbuf_tail) {
        wc->wr_id = srq->rbufs[srq->rbuf_head++ & srq->rbuf_mask].wr_id;
    }
    wc->status     = status;
    wc->opcode     = IBV_WC_SEND;
    wc->qp_num     = qp->ibv.qp_num;
    wc->vendor_err = 0x10 + status;
    sn_debug("QP 0x%x: receive failed: %s", qp->ibv.qp_num,
             ibv_wc_status_str(status));
    sn_qp_set_error(qp);
}

static inline void sn_wc_imm_fill(sn_cqe_t *wc, const sn_rec_t *rec)
{
    wc->solicited = !!(rec->flags & SN_REC_F_SOLICITED);
    if (rec->flags & SN_REC_F_IMM) {
        wc->wc_flags |= IBV_WC_WITH_IMM;
        wc->imm_data  = rec->imm_data;
    }
}


/* Whole message into the next untagged buffer.  A message that does not
 * fit, or a buffer whose key is wrong, fails the QP instead (a message
 * that does not land is not counted as unexpected) */
static void sn_srq_deliver_untagged(sn_srq_t *srq, sn_qp_t *qp,
                                    const sn_rec_t *rec,
                                    sn_arrival_kind_t kind)
{
    sn_context_t *ctx = sn_ctx(srq->ibv.context);
    sn_rbuf_t *rbuf   = &srq->rbufs[srq->rbuf_head & srq->rbuf_mask];
    sn_cqe_t *wc;

    if (sn_unlikely(rec->len > rbuf->length)) {
        sn_srq_rx_error(srq, qp, IBV_WC_LOC_LEN_ERR);
        return;
    } else if (sn_unlikely(rec->len && !sn_key_check(ctx->seg, rbuf->lkey,
                                                     rbuf->addr, rec->len,
                                                     0))) {
        sn_srq_rx_error(srq, qp, IBV_WC_LOC_PROT_ERR);
        return;
    }

    ++srq->rbuf_head;
    sn_ring_copy_out((void *)(uintptr_t)rbuf->addr, rec + 1, rec->len);
    wc           = sn_cq_push(srq->cq);
    wc->wr_id    = rbuf->wr_id;
    wc->status   = IBV_WC_SUCCESS;
    /* as mlx5_cq_read_wc_opcode: the TM CQE's application opcode names an
     * unexpected tagged message TM_RECV and a NO_TAG (or FIN) one TM_NO_TAG */
    wc->opcode   = ((kind == SN_ARR_NO_TAG) || (kind == SN_ARR_FIN_RX_ONLY)) ?
                   IBV_WC_TM_NO_TAG :
                   (kind == SN_ARR_UNEXP) ? IBV_WC_TM_RECV : IBV_WC_RECV;
    wc->qp_num   = qp->ibv.qp_num;
    wc->byte_len = rec->len;
    sn_wc_imm_fill(wc, rec);
    if (kind == SN_ARR_UNEXP) {
        sn_srq_go_out_of_phase(srq);
        wc->kind = SN_CQE_TM_UNEXP;
        wc->srq  = srq;
    } else if (sn_unlikely(kind == SN_ARR_FIN_RX_ONLY)) {
        /* counted by the NIC, but its completion is a FIN's (NO_TAG): the
         * provider, and so software, cannot tell */
        sn_srq_go_out_of_phase(srq);
    }
}

/*
 * A completion of a consumed entry.  The provider fills its wr_id at poll
 * from the handle.  Only the MATCH completion carries the tag and app
 * context (mlx5 scatters the TMH into that CQE); only the final one the
 * immediate data and the length (the MATCH-only CQE has neither).
 */
static sn_cqe_t *sn_srq_fill_consumed(sn_cqe_t *wc, sn_srq_t *srq,
                                      sn_qp_t *qp, uint32_t tag_index,
                                      unsigned flags,
                                      const struct ibv_tmh *tmh)
{
    wc->wr_id     = 0;
    wc->opcode    = IBV_WC_TM_RECV;
    wc->status    = IBV_WC_SUCCESS;
    wc->qp_num    = qp->ibv.qp_num;
    wc->wc_flags  = flags;
    wc->kind      = (flags & IBV_WC_TM_DATA_VALID) ? SN_CQE_TM_FINAL :
                                                     SN_CQE_TM_CONSUMED;
    wc->tag_index = tag_index;
    wc->srq       = srq;
    if (flags & IBV_WC_TM_MATCH) {
        wc->tm_info.tag  = be64toh(tmh->tag);
        wc->tm_info.priv = be32toh(tmh->app_ctx);
    }
    return wc;
}

static sn_cqe_t *sn_srq_push_consumed(sn_srq_t *srq, sn_qp_t *qp,
                                      uint32_t tag_index, unsigned flags,
                                      const struct ibv_tmh *tmh)
{
    return sn_srq_fill_consumed(sn_cq_push(srq->cq), srq, qp, tag_index,
                                flags, tmh);
}

static sn_xfer_t *sn_srq_xfer_push(sn_srq_t *srq, sn_qp_t *qp,
                                   const sn_tag_t *tag, const sn_rec_t *rec)
{
    sn_xfer_t *xfer = &srq->xfers[srq->xfer_tail++ & srq->xfer_mask];

    ++qp->xfers_queued;
    xfer->qp         = qp;
    xfer->tag_index  = (uint32_t)(tag - srq->tags);
    xfer->num_sge    = tag->num_sge;
    memcpy(xfer->sge, tag->sge, tag->num_sge * sizeof(tag->sge[0]));
    xfer->rndv       = false;
    xfer->sw_rndv    = false;
    xfer->imm_flag   = (rec->flags & SN_REC_F_IMM) ? IBV_WC_WITH_IMM : 0;
    xfer->imm_data   = rec->imm_data;
    return xfer;
}

/* A matched message that cannot be placed (too long for the buffer, or a
 * wrong key): on mlx5 the NIC consumed the entry, but no completion names
 * it, so the provider never frees its handle; the QP fails.  Messages that
 * mlx5 scatters into the completion itself fail on the entry instead. */
static void sn_srq_consumed_failed(sn_srq_t *srq, sn_qp_t *qp, sn_tag_t *tag,
                                   const sn_rec_t *rec, uint32_t len,
                                   enum ibv_wc_status status)
{
    const struct ibv_tmh *tmh = (const struct ibv_tmh *)(rec + 1);
    sn_cqe_t *wc;

    sn_srq_tag_unlist(srq, tag);
    if (len <= SN_INLINE_SCATTER) {
        wc = sn_srq_push_consumed(srq, qp, (uint32_t)(tag - srq->tags),
                                  IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID,
                                  tmh);
        wc->status   = status;
        wc->byte_len = len;
        sn_wc_imm_fill(wc, rec);
        return;
    }
    sn_srq_rx_error(srq, qp, status);
}

/* Matched eager: payload (without TMH) into the tagged buffer; longer than
 * a packet, in two completions (MATCH, then DATA_VALID as a later event) */
static void sn_srq_deliver_eager(sn_srq_t *srq, sn_qp_t *qp,
                                 const sn_rec_t *rec, sn_tag_t *tag)
{
    sn_context_t *ctx = sn_ctx(srq->ibv.context);
    const struct ibv_tmh *tmh = (const struct ibv_tmh *)(rec + 1);
    uint32_t len   = rec->len - SN_TMH_LEN;
    uint32_t index = (uint32_t)(tag - srq->tags);
    sn_xfer_t *xfer;
    sn_cqe_t *wc;

    if (sn_unlikely(len > tag->length)) {
        sn_srq_consumed_failed(srq, qp, tag, rec, len, IBV_WC_LOC_LEN_ERR);
        return;
    } else if (sn_unlikely(!sn_sge_keys_ok(ctx, tag->sge, tag->num_sge,
                                           len))) {
        sn_srq_consumed_failed(srq, qp, tag, rec, len, IBV_WC_LOC_PROT_ERR);
        return;
    }

    sn_sge_scatter(tag->sge, tag->num_sge, tmh + 1, len);
    sn_srq_tag_unlist(srq, tag);
    if (len > srq->packet_size) {
        sn_srq_push_consumed(srq, qp, index, IBV_WC_TM_MATCH, tmh);
        xfer           = sn_srq_xfer_push(srq, qp, tag, rec);
        xfer->byte_len = len;
        return;
    }
    /* the one completion of a single-packet match, which a DEL racing it
     * may precede when the device holds it (softnic_hold.c) */
    wc           = (srq->hold_match == SOFTNIC_HOLD_MATCH_ON) ?
                   sn_cq_push_held(srq->cq) : sn_cq_push(srq->cq);
    wc           = sn_srq_fill_consumed(wc, srq, qp, index,
                                        IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID,
                                        tmh);
    wc->byte_len = len;
    sn_wc_imm_fill(wc, rec);
}

/*
 * A matched rendezvous the tagged buffer cannot hold: software reads it
 * (IBV_WC_TM_RNDV_INCOMPLETE), from the headers the NIC places in the
 * buffer.  A request that fits a packet completes in one completion
 * (mlx5's CONSUMED_MSG_SW_RNDV: MATCH | DATA_VALID, the headers there);
 * a longer one in two, as mlx5 may give them (CONSUMED_SW_RNDV with MATCH
 * only, then a final completion in the form softnic_dv_attr::rndv_final
 * chooses: EXPECTED, or MSG_COMPLETION_CANCELED, sn_srq_push_rndv_canceled):
 * the headers are placed only before the second.
 */
static void sn_srq_deliver_sw_rndv(sn_srq_t *srq, sn_qp_t *qp,
                                   const sn_rec_t *rec, sn_tag_t *tag)
{
    sn_context_t *ctx = sn_ctx(srq->ibv.context);
    const struct ibv_tmh *tmh = (const struct ibv_tmh *)(rec + 1);
    uint32_t hdr_len = (rec->len < tag->length) ? rec->len : tag->length;
    uint32_t index   = (uint32_t)(tag - srq->tags);
    sn_xfer_t *xfer;
    sn_cqe_t *wc;

    if (sn_unlikely(!sn_sge_keys_ok(ctx, tag->sge, tag->num_sge,
                                    hdr_len))) {
        sn_srq_consumed_failed(srq, qp, tag, rec, hdr_len,
                               IBV_WC_LOC_PROT_ERR);
        return;
    }

    sn_srq_tag_unlist(srq, tag);
    if ((rec->len > srq->packet_size) &&
        (hdr_len <= sizeof(((sn_xfer_t *)NULL)->hdr))) {
        wc          = sn_srq_push_consumed(srq, qp, index, IBV_WC_TM_MATCH,
                                           tmh);
        wc->status  = IBV_WC_TM_RNDV_INCOMPLETE;
        xfer          = sn_srq_xfer_push(srq, qp, tag, rec);
        xfer->sw_rndv = true;
        xfer->hdr_len = hdr_len;
        memcpy(xfer->hdr, tmh, hdr_len);
        return;
    }
    sn_sge_scatter(tag->sge, tag->num_sge, tmh, hdr_len);
    wc           = sn_srq_push_consumed(srq, qp, index,
                                        IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID,
                                        tmh);
    wc->status   = IBV_WC_TM_RNDV_INCOMPLETE;
    wc->byte_len = hdr_len;
    sn_wc_imm_fill(wc, rec);
}

/* Matched rendezvous: MATCH now; the NIC's read, DATA_VALID and FIN later */
static void sn_srq_deliver_rndv(sn_srq_t *srq, sn_qp_t *qp,
                                const sn_rec_t *rec, sn_tag_t *tag)
{
    const struct ibv_tmh *tmh = (const struct ibv_tmh *)(rec + 1);
    const struct ibv_rvh *rvh = (const struct ibv_rvh *)(tmh + 1);
    uint32_t rndv_len = be32toh(rvh->len);
    sn_xfer_t *xfer;

    if (rndv_len > tag->length) {
        sn_srq_deliver_sw_rndv(srq, qp, rec, tag);
        return;
    }

    sn_srq_push_consumed(srq, qp, (uint32_t)(tag - srq->tags),
                         IBV_WC_TM_MATCH, tmh);
    xfer            = sn_srq_xfer_push(srq, qp, tag, rec);
    xfer->rndv      = true;
    xfer->byte_len  = rndv_len;
    xfer->remote_va = be64toh(rvh->va);
    xfer->rkey      = be32toh(rvh->rkey);
    xfer->rndv_len  = rndv_len;
    memcpy(xfer->fin, tmh, SN_TMH_LEN + SN_RVH_LEN);
    ((struct ibv_tmh *)xfer->fin)->opcode = IBV_TMH_FIN;
    sn_srq_tag_unlist(srq, tag);
}

/* Judges a message and places it: 0 when it was taken, EAGAIN when it
 * waits (RNR), EPROTO when it stays and the QP failed */
int sn_srq_arrive(sn_srq_t *srq, sn_qp_t *qp, const sn_rec_t *rec)
{
    sn_arrival_kind_t kind;
    sn_tag_t *tag;

    if (sn_unlikely(srq->rq != NULL)) {     /* not tag matching */
        return sn_rq_arrive(srq, qp, rec);
    }
    if (!sn_srq_arrival_can(srq, qp, rec, &tag, &kind)) {
        return EAGAIN;
    }
    switch (kind) {
    case SN_ARR_BAD_RNDV:
        sn_srq_rx_error(srq, qp, IBV_WC_REM_INV_REQ_ERR);
        return EPROTO;
    case SN_ARR_EAGER:
        sn_srq_deliver_eager(srq, qp, rec, tag);
        break;
    case SN_ARR_RNDV:
        sn_srq_deliver_rndv(srq, qp, rec, tag);
        break;
    default:
        sn_srq_deliver_untagged(srq, qp, rec, kind);
        break;
    }
    return 0;
}

/* Before a message of qp is judged: its sends the peer consumed complete
 * (issue 37); one compare when none is outstanding */
static inline void sn_arrival_acks(sn_qp_t *qp)
{
    if (qp->sq_head != qp->sq_tail) {
        sn_qp_complete_acked(qp);
    }
}

/* The oldest message of qp: off its ring, or, once the ring is drained up
 * to the requester's mark, out of its backlog (softnic_pull.c) */
int sn_srq_step_arrival(sn_srq_t *srq, sn_qp_t *qp)
{
    sn_rec_t *rec;
    int ret;

    if (sn_unlikely(qp->ud != NULL)) {
        return sn_ud_step_arrival(srq, qp);     /* a datagram */
    }
    if (!sn_qp_connected(qp)) {
        return EAGAIN;
    }
    if (!sn_ring_peek(qp, &rec)) {
        if (sn_rec_type(sn_ring_head_rec(qp)) != SN_REC_BACKLOG) {
            return EAGAIN;
        }
        sn_arrival_acks(qp);
        return sn_srq_pull_arrival(srq, qp);
    }
    sn_arrival_acks(qp);
    ret = sn_srq_arrive(srq, qp, rec);
    if (ret == 0) {
        sn_ring_release(qp, rec);
    }
    /* a failed QP's message stays */
    return (ret == EAGAIN) ? EAGAIN : 0;
}


/* ---- DATA ---- */

/* The NIC's RDMA read of a matched rendezvous; a wc status */
static enum ibv_wc_status sn_xfer_read(sn_srq_t *srq, sn_xfer_t *xfer)
{
    sn_context_t *ctx = sn_ctx(srq->ibv.context);
    sn_qp_t *qp = xfer->qp;
    uint32_t done = 0, piece;
    uint8_t i;
    int ret;

    if (!sn_qp_connected(qp)) {
        return IBV_WC_WR_FLUSH_ERR;
    }
    if (xfer->rndv_len == 0) {
        return IBV_WC_SUCCESS;
    }
    if (!sn_sge_keys_ok(ctx, xfer->sge, xfer->num_sge, xfer->rndv_len)) {
        return IBV_WC_LOC_PROT_ERR;
    }
    if (!sn_key_check(qp->peer->seg, xfer->rkey, xfer->remote_va,
                      xfer->rndv_len, IBV_ACCESS_REMOTE_READ)) {
        return IBV_WC_REM_ACCESS_ERR;
    }
    /* one read per scatter entry */
    for (i = 0; (i < xfer->num_sge) && (done < xfer->rndv_len); ++i) {
        piece = xfer->rndv_len - done;
        piece = (piece < xfer->sge[i].length) ? piece : xfer->sge[i].length;
        ret   = sn_rdma_read(ctx, qp->peer->seg, &qp->peer_proc,
                             (void *)(uintptr_t)xfer->sge[i].addr,
                             xfer->remote_va + done, xfer->rkey, piece);
        if (ret != 0) {
            return (ret == ESRCH) ? IBV_WC_RETRY_EXC_ERR :
                                    IBV_WC_REM_ACCESS_ERR;
        }
        done += piece;
    }
    return IBV_WC_SUCCESS;
}

bool sn_srq_data_ready(const sn_srq_t *srq)
{
    return srq->xfer_head != srq->xfer_tail;
}

/* The NIC's read failed: the receive-only QP fails, and the failure is
 * reported on its send CQ with nothing to name the entry (its final
 * completion never comes: the provider never frees its handle).  That CQE
 * is a requester CQE of a QP without a send queue: polling it aborts, as
 * mlx5's provider would crash on it; software learns the failure from the
 * QP's state (ibv_query_qp) */
static void sn_xfer_read_failed(sn_xfer_t *xfer, enum ibv_wc_status status)
{
    sn_qp_t *qp = xfer->qp;
    sn_cqe_t *wc;

    sn_debug("QP 0x%x: the NIC's rendezvous read failed: %s",
             qp->ibv.qp_num, ibv_wc_status_str(status));
    wc             = sn_cq_push(qp->send_cq);
    wc->wr_id      = 0;
    wc->status     = status;
    wc->opcode     = IBV_WC_SEND;
    wc->qp_num     = qp->ibv.qp_num;
    wc->vendor_err = 0x20 + status;
    wc->kind       = (qp->rx_only && !qp->passive) ? SN_CQE_REQ_NO_SQ :
                                                     SN_CQE_PLAIN;
    sn_qp_set_error(qp);
}

/*
 * The second completion of a software rendezvous in mlx5's other form,
 * MSG_COMPLETION_CANCELED (app_op 0xC), a CQE without a packet: rdma-core
 * (providers/mlx5/cq.c) gives it the entry's wr_id and frees the entry
 * (handle_tag_matching, mlx5_cqe_app_op_tm_is_complete), the status
 * IBV_WC_TM_RNDV_INCOMPLETE, MATCH | DATA_VALID again
 * (mlx5_cq_read_wc_flags), and opcode 0, IBV_WC_SEND
 * (mlx5_cq_read_wc_opcode has no case for it without a packet).  Its QP
 * number, length and tag are read from fields such a CQE may not fill:
 * the harsher reading, 0.
 */
static void sn_srq_push_rndv_canceled(sn_srq_t *srq, uint32_t tag_index)
{
    sn_cqe_t *wc  = sn_cq_push(srq->cq);

    wc->wr_id     = 0;
    wc->status    = IBV_WC_TM_RNDV_INCOMPLETE;
    wc->opcode    = IBV_WC_SEND;
    wc->qp_num    = 0;
    wc->wc_flags  = IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID;
    wc->kind      = SN_CQE_TM_FINAL;
    wc->tag_index = tag_index;
    wc->srq       = srq;
}

int sn_srq_step_data(sn_srq_t *srq)
{
    enum ibv_wc_status status = IBV_WC_SUCCESS;
    sn_context_t *ctx = sn_ctx(srq->ibv.context);
    sn_xfer_t *xfer;
    sn_fin_t fin;

    if (!sn_srq_data_ready(srq)) {
        return EAGAIN;
    }
    xfer = &srq->xfers[srq->xfer_head++ & srq->xfer_mask];
    if (xfer->qp == NULL) {
        return 0;               /* its QP was destroyed: nothing completes */
    }
    --xfer->qp->xfers_queued;
    if (xfer->rndv) {
        status = sn_xfer_read(srq, xfer);
        if (status != IBV_WC_SUCCESS) {
            sn_xfer_read_failed(xfer, status);
            return 0;
        }
    } else if (xfer->sw_rndv) {
        if (!sn_sge_keys_ok(ctx, xfer->sge, xfer->num_sge, xfer->hdr_len)) {
            sn_srq_rx_error(srq, xfer->qp, IBV_WC_LOC_PROT_ERR);
            return 0;
        }
        sn_sge_scatter(xfer->sge, xfer->num_sge, xfer->hdr, xfer->hdr_len);
        xfer->byte_len = xfer->hdr_len;
        if (srq->rndv_final == SOFTNIC_RNDV_FINAL_CANCELED) {
            sn_srq_push_rndv_canceled(srq, xfer->tag_index);
            return 0;
        }
    }

    fin.tag_index = xfer->tag_index;
    fin.byte_len  = xfer->byte_len;
    fin.imm_flag  = xfer->imm_flag;
    fin.imm_data  = xfer->imm_data;
    if (xfer->rndv) {
        memcpy(fin.data, xfer->fin, sizeof(fin.data));
        if (sn_qp_send_fin(xfer->qp, &fin) == EINPROGRESS) {
            return 0;           /* completes once its FIN goes */
        }
    }
    sn_srq_push_final(xfer->qp, &fin);
    return 0;
}

/* The final completion of a matched message (for a rendezvous the device
 * read, once its FIN is on the wire) */
void sn_srq_push_final(sn_qp_t *qp, const sn_fin_t *fin)
{
    sn_srq_t *srq = qp->srq;
    sn_cqe_t *wc  = sn_cq_push(srq->cq);

    wc->wr_id     = 0;
    wc->status    = IBV_WC_SUCCESS;
    wc->opcode    = IBV_WC_TM_RECV;
    wc->qp_num    = qp->ibv.qp_num;
    wc->byte_len  = fin->byte_len;
    wc->wc_flags  = IBV_WC_TM_DATA_VALID | fin->imm_flag;
    wc->imm_data  = fin->imm_data;
    wc->kind      = SN_CQE_TM_FINAL;
    wc->tag_index = fin->tag_index;
    wc->srq       = srq;
}
