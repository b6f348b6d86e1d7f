/*
 * rc_tm tag offload: the protocol between software and the device's
 * tag-matching list.
 *
 * - Every receive posted with iface_tag_recv_zcopy goes to the device list
 *   (IBV_WR_TAG_ADD) and into the shadow list (posting order), which serves
 *   cancel, duplicate detection and the device/software race.
 * - Messages the device judged unexpected arrive in untagged SRQ buffers;
 *   software counts them, and every list operation carries that count, so
 *   the device matches new entries only once software has seen every
 *   unexpected message (the phase rule).  IBV_WC_TM_SYNC_REQ is answered
 *   with a SYNC carrying the count.
 * - A receive entry lives while the device may still name it: until its
 *   data completion or a successful DEL, and until every list operation
 *   naming it has completed (refs).
 */
#include "rc_tm_ep.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>

#define UCT_RC_TM_RNDV_OP_NONE  UINT16_MAX

static ucs_mpool_ops_t uct_rc_tm_recv_mpool_ops = {
    .chunk_alloc   = ucs_mpool_chunk_malloc,
    .chunk_release = ucs_mpool_chunk_free,
    .obj_init      = NULL,
    .obj_cleanup   = NULL
};

typedef struct uct_rc_tm_ctx_priv {
    uct_rc_tm_recv_t *recv;
} uct_rc_tm_ctx_priv_t;

_Static_assert(sizeof(uct_rc_tm_ctx_priv_t) <= UCT_TAG_PRIV_LEN,
               "receive state fits in uct_tag_context_t::priv");

static UCS_F_ALWAYS_INLINE uct_rc_tm_ctx_priv_t *
uct_rc_tm_ctx_priv(uct_tag_context_t *ctx)
{
    return (uct_rc_tm_ctx_priv_t*)ctx->priv;
}


/* ----- receive entries ----- */

static void uct_rc_tm_recv_put(uct_rc_tm_iface_t *iface, uct_rc_tm_recv_t *recv)
{
    ucs_assert(recv->refs > 0);
    if (--recv->refs == 0) {
        ucs_mpool_put_inline(recv);
    }
}

/* The receive is no longer posted from the user's point of view */
static void uct_rc_tm_recv_unlink(uct_rc_tm_iface_t *iface,
                                  uct_rc_tm_recv_t *recv)
{
    khiter_t it;

    if (recv->flags & UCT_RC_TM_RECV_LINKED) {
        ucs_list_del(&recv->list);
        it = kh_get(uct_rc_tm_bufs, &iface->tm.bufs, (uintptr_t)recv->buffer);
        if (it != kh_end(&iface->tm.bufs)) {
            kh_del(uct_rc_tm_bufs, &iface->tm.bufs, it);
        }
        recv->flags &= ~UCT_RC_TM_RECV_LINKED;
    }
}


/* ----- list operations ----- */

static int uct_rc_tm_tag_post_op(uct_rc_tm_iface_t *iface,
                                 enum ibv_ops_wr_opcode opcode,
                                 uct_rc_tm_recv_t *recv, struct ibv_sge *sge)
{
    struct ibv_ops_wr wr = {}, *bad_wr;
    int ret;

    wr.wr_id             = (uintptr_t)recv;
    wr.opcode            = opcode;
    wr.flags             = IBV_OPS_SIGNALED;
    wr.tm.unexpected_cnt = iface->tm.unexpected_cnt;
    if (iface->config.sync_always || (opcode == IBV_WR_TAG_SYNC)) {
        wr.flags |= IBV_OPS_TM_SYNC;
    }

    if (opcode == IBV_WR_TAG_ADD) {
        wr.tm.add.recv_wr_id = (uintptr_t)recv;
        wr.tm.add.sg_list    = sge;
        wr.tm.add.num_sge    = 1;
        wr.tm.add.tag        = recv->tag;
        wr.tm.add.mask       = recv->tag_mask;
    } else if (opcode == IBV_WR_TAG_DEL) {
        wr.tm.handle         = recv->handle;
    }

    ret = tm_dev_post_srq_ops(iface->srq, &wr, &bad_wr);
    if (ret != 0) {
        return ret;
    }

    ++iface->tm.ops_in_flight;
    if (recv != NULL) {
        ++recv->refs;
        if (opcode == IBV_WR_TAG_ADD) {
            recv->handle = wr.tm.handle;
        }
    }
    return 0;
}

static void uct_rc_tm_tag_post_sync(uct_rc_tm_iface_t *iface)
{
    if (iface->tm.ops_in_flight >= iface->md->caps.tm.max_ops) {
        iface->tm.sync_pending = 1;
        return;
    }

    if (uct_rc_tm_tag_post_op(iface, IBV_WR_TAG_SYNC, NULL, NULL) != 0) {
        iface->tm.sync_pending = 1;
        return;
    }

    iface->tm.sync_pending = 0;
    uct_rc_tm_stat(iface, UCT_RC_TM_STAT_LIST_SYNC);
}

static void uct_rc_tm_tag_post_del(uct_rc_tm_iface_t *iface,
                                   uct_rc_tm_recv_t *recv)
{
    int ret;

    if (iface->tm.ops_in_flight < iface->md->caps.tm.max_ops) {
        ret = uct_rc_tm_tag_post_op(iface, IBV_WR_TAG_DEL, recv, NULL);
        if (ret == 0) {
            uct_rc_tm_stat(iface, UCT_RC_TM_STAT_LIST_DEL);
            return;
        }
        if (ret != ENOMEM) {
            ucs_error("rc_tm: failed to post TAG_DEL: %s", strerror(ret));
        }
    }

    /* Retried when a list operation completes */
    ucs_queue_push(&iface->tm.del_queue, &recv->del_queue);
}

static void uct_rc_tm_tag_ops_progress(uct_rc_tm_iface_t *iface)
{
    uct_rc_tm_recv_t *recv;

    while (!ucs_queue_is_empty(&iface->tm.del_queue) &&
           (iface->tm.ops_in_flight < iface->md->caps.tm.max_ops)) {
        recv = ucs_queue_pull_elem_non_empty(&iface->tm.del_queue,
                                             uct_rc_tm_recv_t, del_queue);
        uct_rc_tm_tag_post_del(iface, recv);
    }

    if (iface->tm.sync_pending) {
        uct_rc_tm_tag_post_sync(iface);
    }
}

ucs_status_t uct_rc_tm_iface_tag_recv_zcopy(uct_iface_h tl_iface,
                                            uct_tag_t tag, uct_tag_t tag_mask,
                                            const uct_iov_t *iov,
                                            size_t iovcnt,
                                            uct_tag_context_t *ctx)
{
    uct_rc_tm_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_tm_iface_t);
    uct_rc_tm_recv_t *recv;
    struct ibv_sge sge;
    khiter_t it;
    int ret;

    UCT_CHECK_IOV_SIZE(iovcnt, 1, "tag_recv_zcopy");

    if (ucs_unlikely(iface->tm.num_tags >= iface->md->caps.tm.max_num_tags)) {
        uct_rc_tm_stat(iface, UCT_RC_TM_STAT_LIST_FULL);
        return UCS_ERR_EXCEEDS_LIMIT;
    }

    if (ucs_unlikely(iface->tm.ops_in_flight >= iface->md->caps.tm.max_ops)) {
        return UCS_ERR_NO_RESOURCE;
    }

    it = kh_put(uct_rc_tm_bufs, &iface->tm.bufs, (uintptr_t)iov->buffer, &ret);
    if (ucs_unlikely(ret == 0)) {
        return UCS_ERR_ALREADY_EXISTS;
    } else if (ucs_unlikely(ret < 0)) {
        return UCS_ERR_NO_MEMORY;
    }

    recv = ucs_mpool_get_inline(&iface->tm.recv_mp);
    if (ucs_unlikely(recv == NULL)) {
        kh_del(uct_rc_tm_bufs, &iface->tm.bufs, it);
        return UCS_ERR_NO_MEMORY;
    }

    recv->ctx      = ctx;
    recv->buffer   = iov->buffer;
    recv->length   = uct_iov_get_length(iov);
    recv->lkey     = ((tm_dev_mr_t*)iov->memh)->lkey;
    recv->tag      = tag & tag_mask;
    recv->tag_mask = tag_mask;
    recv->flags    = UCT_RC_TM_RECV_LINKED | UCT_RC_TM_RECV_IN_DEVICE;
    recv->refs     = 1; /* the device entry */

    sge.addr   = (uintptr_t)recv->buffer;
    sge.length = recv->length;
    sge.lkey   = recv->lkey;
    ret = uct_rc_tm_tag_post_op(iface, IBV_WR_TAG_ADD, recv, &sge);
    if (ucs_unlikely(ret != 0)) {
        kh_del(uct_rc_tm_bufs, &iface->tm.bufs, it);
        ucs_mpool_put_inline(recv);
        if (ret == ENOMEM) {
            uct_rc_tm_stat(iface, UCT_RC_TM_STAT_LIST_FULL);
            return UCS_ERR_EXCEEDS_LIMIT;
        }
        ucs_error("rc_tm: failed to post TAG_ADD: %s", strerror(ret));
        return UCS_ERR_NO_RESOURCE;
    }

    ++iface->tm.num_tags;
    ucs_list_add_tail(&iface->tm.recvs, &recv->list);
    uct_rc_tm_ctx_priv(ctx)->recv = recv;
    uct_rc_tm_stat(iface, UCT_RC_TM_STAT_LIST_ADD);
    return UCS_OK;
}

ucs_status_t uct_rc_tm_iface_tag_recv_cancel(uct_iface_h tl_iface,
                                             uct_tag_context_t *ctx,
                                             int force)
{
    uct_rc_tm_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_tm_iface_t);
    uct_rc_tm_recv_t *recv   = uct_rc_tm_ctx_priv(ctx)->recv;

    if (force) {
        /* The user matched this receive itself: never call back for it */
        recv->flags |= UCT_RC_TM_RECV_FORGOTTEN;
        uct_rc_tm_recv_unlink(iface, recv);
    } else if (recv->flags & UCT_RC_TM_RECV_CANCELING) {
        return UCS_OK;
    } else {
        recv->flags |= UCT_RC_TM_RECV_CANCELING;
    }

    /* A consumed entry has left the device: its data completion follows,
     * and reports the receive as done (non-force) or is dropped (force) */
    if (recv->flags & UCT_RC_TM_RECV_IN_DEVICE) {
        uct_rc_tm_tag_post_del(iface, recv);
    }
    return UCS_OK;
}


/* ----- completions of list operations and matched messages ----- */

static void uct_rc_tm_tag_handle_op_wc(uct_rc_tm_iface_t *iface,
                                       const tm_dev_wc_t *wc)
{
    uct_rc_tm_recv_t *recv = (uct_rc_tm_recv_t*)(uintptr_t)wc->wr_id;
    uct_tag_context_t *ctx;

    --iface->tm.ops_in_flight;

    switch (wc->opcode) {
    case IBV_WC_TM_ADD:
        if (ucs_unlikely(wc->status != IBV_WC_SUCCESS)) {
            ucs_error("rc_tm: TAG_ADD failed: %s",
                      ibv_wc_status_str(wc->status));
            recv->flags &= ~UCT_RC_TM_RECV_IN_DEVICE;
            --iface->tm.num_tags;
            uct_rc_tm_recv_unlink(iface, recv);
            if (!(recv->flags & UCT_RC_TM_RECV_FORGOTTEN)) {
                recv->ctx->completed_cb(recv->ctx, 0, 0, 0, NULL,
                                        UCS_ERR_IO_ERROR);
            }
            uct_rc_tm_recv_put(iface, recv); /* the device entry */
        }
        uct_rc_tm_recv_put(iface, recv);
        break;
    case IBV_WC_TM_DEL:
        if (wc->status == IBV_WC_SUCCESS) {
            recv->flags &= ~UCT_RC_TM_RECV_IN_DEVICE;
            --iface->tm.num_tags;
            if (!(recv->flags & UCT_RC_TM_RECV_FORGOTTEN)) {
                ctx = recv->ctx;
                uct_rc_tm_recv_unlink(iface, recv);
                ctx->completed_cb(ctx, recv->tag, 0, recv->length, NULL,
                                  UCS_ERR_CANCELED);
            }
            uct_rc_tm_recv_put(iface, recv); /* the device entry */
        } else {
            /* A message consumed the entry first: its completion decides */
            uct_rc_tm_stat(iface, UCT_RC_TM_STAT_LIST_DEL_RACE);
        }
        uct_rc_tm_recv_put(iface, recv);
        break;
    case IBV_WC_TM_SYNC:
        break;
    default:
        ucs_error("rc_tm: unexpected completion opcode %d", wc->opcode);
        break;
    }

    uct_rc_tm_tag_ops_progress(iface);
}

static void uct_rc_tm_tag_send_fin(uct_rc_tm_ep_t *ep, uint32_t app_ctx,
                                   uint64_t tag)
{
    struct ibv_tmh fin;
    ucs_status_t status;

    uct_rc_tm_fill_tmh(&fin, IBV_TMH_FIN, app_ctx, tag);
    status = uct_rc_tm_ep_send_inline(ep, &fin, sizeof(fin), 0, 0);
    if (status != UCS_OK) {
        /* The sender cannot be told; its rendezvous send stays pending
         * until its endpoint is flushed or fails */
        ucs_error("rc_tm: failed to send rendezvous FIN on qp 0x%x: %s",
                  ep->qp_num, ucs_status_string(status));
    }
}

static void uct_rc_tm_tag_complete_recv(uct_rc_tm_iface_t *iface,
                                        uct_rc_tm_recv_t *recv, uint64_t tag,
                                        uint64_t imm, size_t length,
                                        ucs_status_t status)
{
    uct_tag_context_t *ctx = recv->ctx;

    if (!(recv->flags & UCT_RC_TM_RECV_FORGOTTEN)) {
        uct_rc_tm_recv_unlink(iface, recv);
        ctx->completed_cb(ctx, tag, imm, length, NULL, status);
    }
    uct_rc_tm_recv_put(iface, recv); /* the device entry */
}

/* The software half of a rendezvous the device matched but left to us */
static void uct_rc_tm_tag_rndv_read_done(uct_rc_tm_tx_op_t *op,
                                         ucs_status_t status)
{
    uct_rc_tm_recv_t *recv   = op->recv;
    uct_rc_tm_ep_t *ep       = op->ep;
    uct_rc_tm_iface_t *iface = ucs_derived_of(ep->super.super.iface,
                                              uct_rc_tm_iface_t);

    if (status == UCS_OK) {
        uct_rc_tm_tag_send_fin(ep, op->app_ctx, op->tag);
        if (op->length > recv->length) {
            status = UCS_ERR_MESSAGE_TRUNCATED;
        }
    }

    uct_rc_tm_tag_complete_recv(iface, recv, op->tag, 0,
                                ucs_min(op->length, recv->length), status);
    uct_rc_tm_tx_op_release(op);
}

static void uct_rc_tm_tag_rndv_incomplete(uct_rc_tm_iface_t *iface,
                                          uct_rc_tm_recv_t *recv,
                                          const tm_dev_wc_t *wc)
{
    const struct ibv_tmh *tmh = recv->buffer;
    const struct ibv_rvh *rvh = (const struct ibv_rvh*)(tmh + 1);
    uct_rc_tm_ep_t *ep        = uct_rc_tm_iface_lookup_ep(iface, wc->qp_num);
    uct_rc_tm_tx_op_t *op;
    ucs_status_t status;
    size_t length;

    uct_rc_tm_stat(iface, UCT_RC_TM_STAT_RX_RNDV_INCOMPLETE);

    if ((recv->length < UCT_RC_TM_RNDV_HDR_LEN) ||
        (tmh->opcode != IBV_TMH_RNDV) || (ep == NULL)) {
        ucs_error("rc_tm: cannot finish rendezvous from qp 0x%x in software",
                  wc->qp_num);
        status = UCS_ERR_IO_ERROR;
        goto err;
    }

    op = uct_rc_tm_iface_get_tx_op(iface);
    if (op == NULL) {
        status = UCS_ERR_NO_MEMORY;
        goto err;
    }

    length      = be32toh(rvh->len);
    op->handler = uct_rc_tm_tag_rndv_read_done;
    op->comp    = NULL;
    op->recv    = recv;
    op->ep      = ep;
    op->app_ctx = be32toh(tmh->app_ctx);
    op->tag     = be64toh(tmh->tag);
    op->length  = length;
    status = uct_rc_tm_ep_rdma_read(ep, recv->buffer,
                                    ucs_min(length, recv->length), recv->lkey,
                                    be64toh(rvh->va), be32toh(rvh->rkey), op);
    if (status != UCS_OK) {
        uct_rc_tm_tx_op_release(op);
        goto err;
    }
    return;

err:
    uct_rc_tm_tag_complete_recv(iface, recv, wc->tm_info.tag, 0, 0, status);
}

static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_tm_tag_wc_status(const tm_dev_wc_t *wc)
{
    switch (wc->status) {
    case IBV_WC_SUCCESS:
        return UCS_OK;
    case IBV_WC_LOC_LEN_ERR:
        return UCS_ERR_MESSAGE_TRUNCATED;
    case IBV_WC_REM_ACCESS_ERR:
        return UCS_ERR_INVALID_ADDR;
    default:
        return UCS_ERR_IO_ERROR;
    }
}

static void uct_rc_tm_tag_handle_recv_wc(uct_rc_tm_iface_t *iface,
                                         const tm_dev_wc_t *wc)
{
    uct_rc_tm_recv_t *recv = (uct_rc_tm_recv_t*)(uintptr_t)wc->wr_id;
    int with_imm;
    uint64_t imm;

    if (wc->wc_flags & IBV_WC_TM_MATCH) {
        recv->flags = (recv->flags & ~UCT_RC_TM_RECV_IN_DEVICE) |
                      UCT_RC_TM_RECV_CONSUMED;
        --iface->tm.num_tags;
        if (!(recv->flags & UCT_RC_TM_RECV_FORGOTTEN)) {
            recv->ctx->tag_consumed_cb(recv->ctx);
        }
    }

    if (wc->status == IBV_WC_TM_RNDV_INCOMPLETE) {
        uct_rc_tm_tag_rndv_incomplete(iface, recv, wc);
        return;
    }

    if (!(wc->wc_flags & IBV_WC_TM_DATA_VALID) &&
        (wc->status == IBV_WC_SUCCESS)) {
        return; /* MATCH only: the data completion follows */
    }

    with_imm = wc->wc_flags & IBV_WC_WITH_IMM;
    imm      = with_imm ? (((uint64_t)wc->tm_info.priv << 32) |
                           be32toh(wc->imm_data)) : 0;

    if (ucs_unlikely(with_imm && (imm == 0))) {
        /* A software rendezvous request: the payload is the request */
        uct_rc_tm_stat(iface, UCT_RC_TM_STAT_RX_RNDV_REQ_EXP);
        if (!(recv->flags & UCT_RC_TM_RECV_FORGOTTEN)) {
            uct_rc_tm_recv_unlink(iface, recv);
            recv->ctx->rndv_cb(recv->ctx, wc->tm_info.tag, recv->buffer,
                               wc->byte_len, uct_rc_tm_tag_wc_status(wc), 0);
        }
        uct_rc_tm_recv_put(iface, recv);
        return;
    }

    uct_rc_tm_stat(iface, UCT_RC_TM_STAT_RX_EXP);
    uct_rc_tm_tag_complete_recv(iface, recv, wc->tm_info.tag, imm,
                                wc->byte_len, uct_rc_tm_tag_wc_status(wc));
}

void uct_rc_tm_tag_handle_wc(uct_rc_tm_iface_t *iface, const tm_dev_wc_t *wc)
{
    if (wc->opcode == IBV_WC_TM_RECV) {
        uct_rc_tm_tag_handle_recv_wc(iface, wc);
    } else {
        uct_rc_tm_tag_handle_op_wc(iface, wc);
    }

    if (ucs_unlikely(wc->wc_flags & IBV_WC_TM_SYNC_REQ)) {
        uct_rc_tm_tag_post_sync(iface);
    }
}


/* ----- messages the device did not match ----- */

void uct_rc_tm_tag_rndv_op_release(uct_rc_tm_iface_t *iface,
                                   uct_rc_tm_rndv_op_t *op)
{
    op->comp      = NULL;
    op->gen      += 1;
    op->next_free = iface->tm.rndv_free;
    iface->tm.rndv_free = op - iface->tm.rndv_ops;
    --iface->tm.rndv_in_flight;
}

static void uct_rc_tm_tag_handle_fin(uct_rc_tm_iface_t *iface,
                                     const struct ibv_tmh *tmh)
{
    uint32_t app_ctx = be32toh(tmh->app_ctx);
    unsigned index   = app_ctx & UINT16_MAX;
    uct_rc_tm_rndv_op_t *op;
    uct_completion_t *comp;

    if ((index >= iface->config.rndv_queue_len) ||
        (iface->tm.rndv_ops[index].gen != (app_ctx >> 16)) ||
        (iface->tm.rndv_ops[index].comp == NULL)) {
        ucs_debug("rc_tm: FIN for unknown or canceled rendezvous 0x%x",
                  app_ctx);
        return;
    }

    op   = &iface->tm.rndv_ops[index];
    comp = op->comp;
    uct_rc_tm_tag_rndv_op_release(iface, op);
    uct_invoke_completion(comp, UCS_OK);
}

static ucs_status_t uct_rc_tm_tag_unexp_rndv(uct_rc_tm_iface_t *iface,
                                             const tm_dev_wc_t *wc,
                                             struct ibv_tmh *tmh)
{
    const struct ibv_rvh *rvh = (const struct ibv_rvh*)(tmh + 1);
    uct_rc_tm_packed_rkey_t rkey_buf;

    if (ucs_unlikely(wc->byte_len < UCT_RC_TM_RNDV_HDR_LEN)) {
        ucs_error("rc_tm: dropped malformed rendezvous request (%u bytes)",
                  wc->byte_len);
        return UCS_OK;
    }

    rkey_buf.magic = UCT_RC_TM_RKEY_MAGIC;
    rkey_buf.rkey  = be32toh(rvh->rkey);
    uct_rc_tm_stat(iface, UCT_RC_TM_STAT_RX_RNDV_UNEXP);
    iface->tm.rndv_cb(iface->tm.rndv_arg, 0, be64toh(tmh->tag), rvh + 1,
                      wc->byte_len - UCT_RC_TM_RNDV_HDR_LEN,
                      be64toh(rvh->va), be32toh(rvh->len), &rkey_buf);
    return UCS_OK;
}

static ucs_status_t uct_rc_tm_tag_unexp_eager(uct_rc_tm_iface_t *iface,
                                              const tm_dev_wc_t *wc,
                                              struct ibv_tmh *tmh)
{
    int with_imm   = wc->wc_flags & IBV_WC_WITH_IMM;
    uint64_t imm   = with_imm ? (((uint64_t)be32toh(tmh->app_ctx) << 32) |
                                 be32toh(wc->imm_data)) : 0;
    size_t length  = wc->byte_len - UCT_RC_TM_TMH_LEN;
    void *context;

    if (ucs_unlikely(with_imm && (imm == 0))) {
        uct_rc_tm_stat(iface, UCT_RC_TM_STAT_RX_RNDV_REQ_UNEXP);
        iface->tm.rndv_cb(iface->tm.rndv_arg, 0, be64toh(tmh->tag), tmh + 1,
                          length, 0, 0, NULL);
        return UCS_OK;
    }

    uct_rc_tm_stat(iface, UCT_RC_TM_STAT_RX_EAGER_UNEXP);
    uct_rc_tm_iface_set_release_desc(iface, tmh + 1);
    return iface->tm.eager_cb(iface->tm.eager_arg, tmh + 1, length,
                              UCT_CB_PARAM_FLAG_FIRST | UCT_CB_PARAM_FLAG_DESC,
                              be64toh(tmh->tag), imm, &context);
}

ucs_status_t uct_rc_tm_tag_handle_unexp(uct_rc_tm_iface_t *iface,
                                        const tm_dev_wc_t *wc,
                                        struct ibv_tmh *tmh)
{
    if (tmh->opcode == IBV_TMH_FIN) {
        uct_rc_tm_tag_handle_fin(iface, tmh);
        return UCS_OK;
    }

    if (ucs_unlikely(!iface->tm.enabled ||
                     ((tmh->opcode != IBV_TMH_EAGER) &&
                      (tmh->opcode != IBV_TMH_RNDV)))) {
        ucs_error("rc_tm: dropped tagged message (opcode %u) on qp 0x%x: %s",
                  tmh->opcode, wc->qp_num, iface->tm.enabled ?
                  "unknown opcode" : "tag offload is not enabled");
        return UCS_OK;
    }

    /* Counted before the callback: the user may post receives from it, and
     * those must carry a count that includes this message */
    ++iface->tm.unexpected_cnt;

    if (tmh->opcode == IBV_TMH_EAGER) {
        return uct_rc_tm_tag_unexp_eager(iface, wc, tmh);
    }
    return uct_rc_tm_tag_unexp_rndv(iface, wc, tmh);
}


/* ----- setup ----- */

void uct_rc_tm_tag_query(uct_rc_tm_iface_t *iface, uct_iface_attr_t *attr)
{
    const tm_dev_caps_t *caps = &iface->md->caps;

    if (!iface->tm.enabled) {
        return;
    }

    attr->cap.flags |= UCT_IFACE_FLAG_TAG_EAGER_SHORT |
                       UCT_IFACE_FLAG_TAG_EAGER_BCOPY |
                       UCT_IFACE_FLAG_TAG_EAGER_ZCOPY |
                       UCT_IFACE_FLAG_TAG_RNDV_ZCOPY;

    attr->cap.tag.eager.max_short  = ucs_min(iface->config.max_inline,
                                             iface->config.eager_max +
                                             UCT_RC_TM_TMH_LEN) -
                                     UCT_RC_TM_TMH_LEN;
    attr->cap.tag.eager.max_bcopy  = iface->config.eager_max;
    attr->cap.tag.eager.max_zcopy  = iface->config.eager_max;
    attr->cap.tag.eager.max_iov    = 1;

    attr->cap.tag.rndv.max_zcopy   = iface->config.rndv_max;
    attr->cap.tag.rndv.max_hdr     = caps->tm.max_rndv_hdr_size -
                                     UCT_RC_TM_RNDV_HDR_LEN;
    attr->cap.tag.rndv.max_iov     = 1;

    attr->cap.tag.recv.min_recv        = 0;
    attr->cap.tag.recv.max_zcopy       = iface->config.rndv_max;
    attr->cap.tag.recv.max_iov         = 1;
    attr->cap.tag.recv.max_outstanding = caps->tm.max_num_tags;
}

ucs_status_t uct_rc_tm_tag_init(uct_rc_tm_iface_t *iface,
                                const uct_iface_params_t *params,
                                const uct_rc_tm_iface_config_t *config)
{
    uint64_t features = (params->field_mask & UCT_IFACE_PARAM_FIELD_FEATURES) ?
                        params->features : UINT64_MAX;
    uint64_t cb_fields = UCT_IFACE_PARAM_FIELD_HW_TM_EAGER_CB |
                         UCT_IFACE_PARAM_FIELD_HW_TM_RNDV_CB;
    ucs_status_t status;
    unsigned i;

    iface->tm.enabled        = (features & UCT_IFACE_FEATURE_TAG) &&
                               ((params->field_mask & cb_fields) == cb_fields);
    iface->tm.eager_cb       = params->eager_cb;
    iface->tm.eager_arg      = (params->field_mask &
                                UCT_IFACE_PARAM_FIELD_HW_TM_EAGER_ARG) ?
                               params->eager_arg : NULL;
    iface->tm.rndv_cb        = params->rndv_cb;
    iface->tm.rndv_arg       = (params->field_mask &
                                UCT_IFACE_PARAM_FIELD_HW_TM_RNDV_ARG) ?
                               params->rndv_arg : NULL;
    iface->tm.unexpected_cnt = 0;
    iface->tm.num_tags       = 0;
    iface->tm.ops_in_flight  = 0;
    iface->tm.sync_pending   = 0;
    iface->tm.rndv_in_flight = 0;
    ucs_list_head_init(&iface->tm.recvs);
    ucs_queue_head_init(&iface->tm.del_queue);
    kh_init_inplace(uct_rc_tm_bufs, &iface->tm.bufs);

    status = ucs_mpool_init(&iface->tm.recv_mp, 0, sizeof(uct_rc_tm_recv_t),
                            0, UCS_SYS_CACHE_LINE_SIZE, 256, UINT_MAX,
                            &uct_rc_tm_recv_mpool_ops, "rc_tm_recv");
    if (status != UCS_OK) {
        goto err;
    }

    iface->tm.rndv_ops = ucs_calloc(iface->config.rndv_queue_len,
                                    sizeof(*iface->tm.rndv_ops),
                                    "rc_tm rndv ops");
    if (iface->tm.rndv_ops == NULL) {
        status = UCS_ERR_NO_MEMORY;
        goto err_mp;
    }

    for (i = 0; i < iface->config.rndv_queue_len; ++i) {
        iface->tm.rndv_ops[i].next_free = (i + 1 < iface->config.rndv_queue_len) ?
                                          i + 1 : UCT_RC_TM_RNDV_OP_NONE;
    }
    iface->tm.rndv_free = 0;
    return UCS_OK;

err_mp:
    ucs_mpool_cleanup(&iface->tm.recv_mp, 0);
err:
    kh_destroy_inplace(uct_rc_tm_bufs, &iface->tm.bufs);
    return status;
}

void uct_rc_tm_tag_cleanup(uct_rc_tm_iface_t *iface)
{
    ucs_free(iface->tm.rndv_ops);
    /* Entries the device still held go with the SRQ */
    ucs_mpool_cleanup(&iface->tm.recv_mp, 0);
    kh_destroy_inplace(uct_rc_tm_bufs, &iface->tm.bufs);
}
