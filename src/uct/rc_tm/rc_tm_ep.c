/*
 * rc_tm endpoint: connection setup, active messages, RMA, tagged sends,
 * pending queue and flush.
 */
#include "rc_tm_ep.h"

#include <ucs/debug/log.h>
#include <ucs/sys/string.h>

#define UCT_RC_TM_SHORT_MAX 1024 /* stack bound for inline sends */


/* ----- send resources and completion bookkeeping ----- */

static UCS_F_ALWAYS_INLINE uct_rc_tm_iface_t *
uct_rc_tm_ep_iface(uct_rc_tm_ep_t *ep)
{
    return ucs_derived_of(ep->super.super.iface, uct_rc_tm_iface_t);
}

static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_tm_ep_check_resources(uct_rc_tm_ep_t *ep)
{
    if (ucs_unlikely(ep->status != UCS_OK)) {
        return ep->status;
    }
    if (ucs_unlikely((ep->available == 0) || !ep->connected ||
                     (uct_rc_tm_ep_iface(ep)->tx.available <= 0))) {
        return UCS_ERR_NO_RESOURCE;
    }
    return UCS_OK;
}

uct_rc_tm_tx_op_t *uct_rc_tm_iface_get_tx_op(uct_rc_tm_iface_t *iface)
{
    void *elem = ucs_mpool_get_inline(&iface->tx.mp);

    if (ucs_unlikely(elem == NULL)) {
        return NULL;
    }

    return UCS_PTR_BYTE_OFFSET(elem, sizeof(uint64_t));
}

void uct_rc_tm_tx_op_release(uct_rc_tm_tx_op_t *op)
{
    ucs_mpool_put_inline(UCS_PTR_BYTE_OFFSET(op, -(ptrdiff_t)sizeof(uint64_t)));
}

static UCS_F_ALWAYS_INLINE uint32_t uct_rc_tm_tx_op_lkey(uct_rc_tm_tx_op_t *op)
{
    return *(uint32_t*)UCS_PTR_BYTE_OFFSET(op, -(ptrdiff_t)sizeof(uint64_t));
}

static void uct_rc_tm_tx_op_done(uct_rc_tm_tx_op_t *op, ucs_status_t status)
{
    if (op->comp != NULL) {
        uct_invoke_completion(op->comp, status);
    }
    uct_rc_tm_tx_op_release(op);
}

/* Send resources and an op record (with its registered buffer) for one
 * send that completes through handler */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_tm_ep_get_op(uct_rc_tm_ep_t *ep, uct_rc_tm_tx_op_cb_t handler,
                    uct_completion_t *comp, uct_rc_tm_tx_op_t **op_p)
{
    ucs_status_t status = uct_rc_tm_ep_check_resources(ep);
    uct_rc_tm_tx_op_t *op;

    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    op = uct_rc_tm_iface_get_tx_op(uct_rc_tm_ep_iface(ep));
    if (ucs_unlikely(op == NULL)) {
        return UCS_ERR_NO_RESOURCE;
    }

    op->handler = handler;
    op->comp    = comp;
    *op_p       = op;
    return UCS_OK;
}

static void uct_rc_tm_tx_op_get_bcopy_done(uct_rc_tm_tx_op_t *op,
                                           ucs_status_t status)
{
    if (status == UCS_OK) {
        op->unpack_cb(op->unpack_arg, op + 1, op->length);
    }
    uct_rc_tm_tx_op_done(op, status);
}

/* A flush record: no buffer of its own */
static void uct_rc_tm_tx_op_flush_done(uct_rc_tm_tx_op_t *op,
                                       ucs_status_t status)
{
    uct_rc_tm_tx_op_done(op, status);
}

static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_tm_ep_post(uct_rc_tm_ep_t *ep, struct ibv_send_wr *wr,
                  uct_rc_tm_tx_op_t *op)
{
    uct_rc_tm_iface_t *iface = uct_rc_tm_ep_iface(ep);
    struct ibv_send_wr *bad_wr;
    int ret;

    wr->wr_id       = 0;
    wr->next        = NULL;
    wr->send_flags |= IBV_SEND_SIGNALED;
    if (ucs_unlikely(ep->fence)) {
        wr->send_flags |= IBV_SEND_FENCE;
        ep->fence       = 0;
    }

    ret = tm_dev_post_send(ep->conn, wr, &bad_wr);
    if (ucs_unlikely(ret != 0)) {
        if ((ret == ENOMEM) || (ret == EAGAIN)) {
            return UCS_ERR_NO_RESOURCE;
        }
        ucs_error("rc_tm: post send on qp 0x%x failed: %s", ep->qp_num,
                  strerror(ret));
        return uct_rc_tm_status_from_errno(ret);
    }

    --ep->available;
    --iface->tx.available;
    ++ep->posted_sn;
    if (op != NULL) {
        op->sn = ep->posted_sn;
        ucs_queue_push(&ep->tx_ops, &op->queue);
    }
    return UCS_OK;
}

static void uct_rc_tm_ep_complete_ops(uct_rc_tm_ep_t *ep, uint64_t upto_sn,
                                      ucs_status_t status)
{
    uct_rc_tm_tx_op_t *op;

    ucs_queue_for_each_extract(op, &ep->tx_ops, queue, op->sn <= upto_sn) {
        op->handler(op, status);
    }
}

static UCS_F_NOINLINE void uct_rc_tm_ep_set_failed(uct_rc_tm_ep_t *ep,
                                                   enum ibv_wc_status wc_status)
{
    uct_rc_tm_iface_t *iface = uct_rc_tm_ep_iface(ep);
    ucs_status_t status;

    if (ep->status != UCS_OK) {
        return;
    }

    status = (wc_status == IBV_WC_RETRY_EXC_ERR) ? UCS_ERR_ENDPOINT_TIMEOUT :
             (wc_status == IBV_WC_REM_ACCESS_ERR) ? UCS_ERR_INVALID_ADDR :
             UCS_ERR_CONNECTION_RESET;
    ucs_log((wc_status == IBV_WC_WR_FLUSH_ERR) ? UCS_LOG_LEVEL_DEBUG :
            UCS_LOG_LEVEL_ERROR, "rc_tm: ep %p qp 0x%x failed: %s", ep,
            ep->qp_num, ibv_wc_status_str(wc_status));
    ep->status = status;
    /* Everything still queued completes with the error, and so do the
     * rendezvous sends waiting for this peer's FIN */
    uct_rc_tm_ep_complete_ops(ep, UINT64_MAX, status);
    uct_rc_tm_tag_rndv_ops_purge(iface, ep, status);
    uct_iface_handle_ep_err(&iface->super.super, &ep->super.super, status);
}

void uct_rc_tm_ep_handle_send_wc(uct_rc_tm_ep_t *ep, const tm_dev_wc_t *wc)
{
    ++ep->available;
    ++ep->acked_sn;
    /* Its pending requests may go now (dispatched after the batch) */
    ucs_arbiter_group_schedule(&uct_rc_tm_ep_iface(ep)->arbiter,
                               &ep->arb_group);

    if (ucs_unlikely(wc->status != IBV_WC_SUCCESS)) {
        /* As on any RC connection, an error (a dead peer, a bad rkey) moves
         * the connection to the error state */
        uct_rc_tm_ep_set_failed(ep, wc->status);
        return;
    }

    uct_rc_tm_ep_complete_ops(ep, ep->acked_sn, UCS_OK);
}


/* ----- sends ----- */

static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_tm_ep_send_sge(uct_rc_tm_ep_t *ep, enum ibv_wr_opcode opcode,
                      void *addr, size_t length, uint32_t lkey,
                      unsigned send_flags, uint32_t imm_be,
                      uint64_t remote_addr, uint32_t rkey,
                      uct_rc_tm_tx_op_t *op)
{
    struct ibv_sge sge;
    struct ibv_send_wr wr;

    sge.addr                = (uintptr_t)addr;
    sge.length              = length;
    sge.lkey                = lkey;
    wr.sg_list              = &sge;
    wr.num_sge              = 1;
    wr.opcode               = opcode;
    wr.send_flags           = send_flags;
    wr.imm_data             = imm_be;
    wr.wr.rdma.remote_addr  = remote_addr;
    wr.wr.rdma.rkey         = rkey;
    return uct_rc_tm_ep_post(ep, &wr, op);
}

ucs_status_t uct_rc_tm_ep_send_inline(uct_rc_tm_ep_t *ep, const void *msg,
                                      size_t length, uint32_t imm_be,
                                      int with_imm)
{
    ucs_status_t status = uct_rc_tm_ep_check_resources(ep);

    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    return uct_rc_tm_ep_send_sge(ep, with_imm ? IBV_WR_SEND_WITH_IMM :
                                                IBV_WR_SEND,
                                 (void*)msg, length, 0, IBV_SEND_INLINE,
                                 imm_be, 0, 0, NULL);
}

/* A message built in a send buffer: TMH | pack_cb's payload */
static ssize_t uct_rc_tm_ep_send_bcopy(uct_rc_tm_ep_t *ep, uint8_t tmh_op,
                                       uint32_t app_ctx, uint64_t tag,
                                       uint64_t imm, int with_imm,
                                       uct_pack_callback_t pack_cb, void *arg,
                                       size_t max_length)
{
    uct_rc_tm_tx_op_t *op;
    struct ibv_tmh *tmh;
    ucs_status_t status;
    size_t length;

    status = uct_rc_tm_ep_get_op(ep, uct_rc_tm_tx_op_done, NULL, &op);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    tmh    = (struct ibv_tmh*)(op + 1);
    uct_rc_tm_fill_tmh(tmh, tmh_op, app_ctx, tag);
    length = pack_cb(tmh + 1, arg);
    if (ucs_unlikely(length > max_length)) {
        ucs_error("rc_tm: packed %zu bytes, more than the %zu allowed", length,
                  max_length);
        uct_rc_tm_tx_op_release(op);
        return UCS_ERR_EXCEEDS_LIMIT;
    }

    status = uct_rc_tm_ep_send_sge(ep, with_imm ? IBV_WR_SEND_WITH_IMM :
                                                  IBV_WR_SEND,
                                   tmh, UCT_RC_TM_TMH_LEN + length,
                                   uct_rc_tm_tx_op_lkey(op), 0,
                                   htobe32((uint32_t)imm), 0, 0, op);
    if (ucs_unlikely(status != UCS_OK)) {
        uct_rc_tm_tx_op_release(op);
        return status;
    }
    return length;
}

/* TMH (and header) from a send buffer, then the user's iov: two SGEs */
static ucs_status_t
uct_rc_tm_ep_send_zcopy(uct_rc_tm_ep_t *ep, uint8_t tmh_op, uint32_t app_ctx,
                        uint64_t tag, uint64_t imm, int with_imm,
                        const void *header, unsigned header_length,
                        const uct_iov_t *iov, uct_completion_t *comp)
{
    struct ibv_sge sge[2];
    struct ibv_send_wr wr;
    uct_rc_tm_tx_op_t *op;
    struct ibv_tmh *tmh;
    ucs_status_t status;

    status = uct_rc_tm_ep_get_op(ep, uct_rc_tm_tx_op_done, comp, &op);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    tmh = (struct ibv_tmh*)(op + 1);
    uct_rc_tm_fill_tmh(tmh, tmh_op, app_ctx, tag);
    uct_rc_tm_copy(tmh + 1, header, header_length);

    sge[0].addr   = (uintptr_t)tmh;
    sge[0].length = UCT_RC_TM_TMH_LEN + header_length;
    sge[0].lkey   = uct_rc_tm_tx_op_lkey(op);
    sge[1].addr   = (uintptr_t)iov->buffer;
    sge[1].length = uct_iov_get_length(iov);
    sge[1].lkey   = ((tm_dev_mr_t*)iov->memh)->lkey;
    wr.sg_list    = sge;
    wr.num_sge    = (sge[1].length > 0) ? 2 : 1;
    wr.opcode     = with_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
    wr.send_flags = 0;
    wr.imm_data   = htobe32((uint32_t)imm);

    status        = uct_rc_tm_ep_post(ep, &wr, op);
    if (ucs_unlikely(status != UCS_OK)) {
        uct_rc_tm_tx_op_release(op);
        return status;
    }
    return UCS_INPROGRESS;
}


/* ----- active messages ----- */

ucs_status_t uct_rc_tm_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                                   const void *payload, unsigned length)
{
    uct_rc_tm_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    char msg[UCT_RC_TM_SHORT_MAX];
    struct ibv_tmh *tmh = (struct ibv_tmh*)msg;

    UCT_CHECK_LENGTH(UCT_RC_TM_TMH_LEN + sizeof(header) + length, 0,
                     ucs_min(uct_rc_tm_ep_iface(ep)->config.max_inline,
                             sizeof(msg)), "am_short");

    uct_rc_tm_fill_tmh(tmh, IBV_TMH_NO_TAG, id, 0);
    memcpy(tmh + 1, &header, sizeof(header));
    uct_rc_tm_copy(UCS_PTR_BYTE_OFFSET(tmh + 1, sizeof(header)), payload,
                   length);
    return uct_rc_tm_ep_send_inline(ep, msg, UCT_RC_TM_TMH_LEN +
                                             sizeof(header) + length, 0, 0);
}

ucs_status_t uct_rc_tm_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id,
                                       const uct_iov_t *iov, size_t iovcnt)
{
    uct_rc_tm_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    size_t max = ucs_min(uct_rc_tm_ep_iface(ep)->config.max_inline,
                         UCT_RC_TM_SHORT_MAX);
    char msg[UCT_RC_TM_SHORT_MAX];
    size_t length = UCT_RC_TM_TMH_LEN;
    size_t i, iov_length;

    uct_rc_tm_fill_tmh((struct ibv_tmh*)msg, IBV_TMH_NO_TAG, id, 0);
    for (i = 0; i < iovcnt; ++i) {
        iov_length = uct_iov_get_length(&iov[i]);
        if (ucs_unlikely(length + iov_length > max)) {
            ucs_error("rc_tm: am_short_iov of more than %zu bytes", max);
            return UCS_ERR_INVALID_PARAM;
        }
        uct_rc_tm_copy(msg + length, iov[i].buffer, iov_length);
        length += iov_length;
    }

    return uct_rc_tm_ep_send_inline(ep, msg, length, 0, 0);
}

ssize_t uct_rc_tm_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                              uct_pack_callback_t pack_cb, void *arg,
                              unsigned flags)
{
    uct_rc_tm_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);

    return uct_rc_tm_ep_send_bcopy(ep, IBV_TMH_NO_TAG, id, 0, 0, 0, pack_cb,
                                   arg, uct_rc_tm_ep_iface(ep)->config.seg_size -
                                        UCT_RC_TM_TMH_LEN);
}

ucs_status_t uct_rc_tm_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id,
                                   const void *header, unsigned header_length,
                                   const uct_iov_t *iov, size_t iovcnt,
                                   unsigned flags, uct_completion_t *comp)
{
    uct_rc_tm_ep_t *ep       = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    uct_rc_tm_iface_t *iface = uct_rc_tm_ep_iface(ep);

    UCT_CHECK_IOV_SIZE(iovcnt, 1, "am_zcopy");
    UCT_CHECK_LENGTH(UCT_RC_TM_TMH_LEN + header_length +
                     uct_iov_total_length(iov, iovcnt), 0,
                     iface->config.seg_size, "am_zcopy");

    return uct_rc_tm_ep_send_zcopy(ep, IBV_TMH_NO_TAG, id, 0, 0, 0, header,
                                   header_length, iov, comp);
}


/* ----- RMA ----- */

ucs_status_t uct_rc_tm_ep_put_short(uct_ep_h tl_ep, const void *buffer,
                                    unsigned length, uint64_t remote_addr,
                                    uct_rkey_t rkey)
{
    uct_rc_tm_ep_t *ep  = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    ucs_status_t status = uct_rc_tm_ep_check_resources(ep);

    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    UCT_CHECK_LENGTH(length, 0, uct_rc_tm_ep_iface(ep)->config.max_inline,
                     "put_short");
    return uct_rc_tm_ep_send_sge(ep, IBV_WR_RDMA_WRITE, (void*)buffer, length,
                                 0, IBV_SEND_INLINE, 0, remote_addr, rkey,
                                 NULL);
}

ssize_t uct_rc_tm_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb,
                               void *arg, uint64_t remote_addr,
                               uct_rkey_t rkey)
{
    uct_rc_tm_ep_t *ep       = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    uct_rc_tm_tx_op_t *op;
    ucs_status_t status;
    size_t length;

    status = uct_rc_tm_ep_get_op(ep, uct_rc_tm_tx_op_done, NULL, &op);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    length      = pack_cb(op + 1, arg);
    status      = uct_rc_tm_ep_send_sge(ep, IBV_WR_RDMA_WRITE, op + 1, length,
                                        uct_rc_tm_tx_op_lkey(op), 0, 0,
                                        remote_addr, rkey, op);
    if (ucs_unlikely(status != UCS_OK)) {
        uct_rc_tm_tx_op_release(op);
        return status;
    }
    return length;
}

static ucs_status_t uct_rc_tm_ep_rma_zcopy(uct_rc_tm_ep_t *ep,
                                           enum ibv_wr_opcode opcode,
                                           const uct_iov_t *iov,
                                           uint64_t remote_addr,
                                           uct_rkey_t rkey,
                                           uct_completion_t *comp)
{
    uct_rc_tm_iface_t *iface = uct_rc_tm_ep_iface(ep);
    uct_rc_tm_tx_op_t *op    = NULL;
    ucs_status_t status;

    status = uct_rc_tm_ep_check_resources(ep);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    if (comp != NULL) {
        op = uct_rc_tm_iface_get_tx_op(iface);
        if (ucs_unlikely(op == NULL)) {
            return UCS_ERR_NO_RESOURCE;
        }
        op->handler = uct_rc_tm_tx_op_done;
        op->comp    = comp;
    }

    status = uct_rc_tm_ep_send_sge(ep, opcode, iov->buffer,
                                   uct_iov_get_length(iov),
                                   (iov->memh == UCT_MEM_HANDLE_NULL) ? 0 :
                                   ((tm_dev_mr_t*)iov->memh)->lkey, 0, 0,
                                   remote_addr, rkey, op);
    if (ucs_unlikely(status != UCS_OK)) {
        if (op != NULL) {
            uct_rc_tm_tx_op_release(op);
        }
        return status;
    }
    return UCS_INPROGRESS;
}

ucs_status_t uct_rc_tm_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                    size_t iovcnt, uint64_t remote_addr,
                                    uct_rkey_t rkey, uct_completion_t *comp)
{
    UCT_CHECK_IOV_SIZE(iovcnt, 1, "put_zcopy");
    return uct_rc_tm_ep_rma_zcopy(ucs_derived_of(tl_ep, uct_rc_tm_ep_t),
                                  IBV_WR_RDMA_WRITE, iov, remote_addr, rkey,
                                  comp);
}

ucs_status_t uct_rc_tm_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                    size_t iovcnt, uint64_t remote_addr,
                                    uct_rkey_t rkey, uct_completion_t *comp)
{
    UCT_CHECK_IOV_SIZE(iovcnt, 1, "get_zcopy");
    return uct_rc_tm_ep_rma_zcopy(ucs_derived_of(tl_ep, uct_rc_tm_ep_t),
                                  IBV_WR_RDMA_READ, iov, remote_addr, rkey,
                                  comp);
}

ucs_status_t uct_rc_tm_ep_get_bcopy(uct_ep_h tl_ep,
                                    uct_unpack_callback_t unpack_cb, void *arg,
                                    size_t length, uint64_t remote_addr,
                                    uct_rkey_t rkey, uct_completion_t *comp)
{
    uct_rc_tm_ep_t *ep       = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    uct_rc_tm_iface_t *iface = uct_rc_tm_ep_iface(ep);
    uct_rc_tm_tx_op_t *op;
    ucs_status_t status;

    UCT_CHECK_LENGTH(length, 0, iface->config.seg_size, "get_bcopy");
    status = uct_rc_tm_ep_get_op(ep, uct_rc_tm_tx_op_get_bcopy_done, comp,
                                 &op);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    op->unpack_cb  = unpack_cb;
    op->unpack_arg = arg;
    op->length     = length;
    status = uct_rc_tm_ep_rdma_read(ep, op + 1, length,
                                    uct_rc_tm_tx_op_lkey(op), remote_addr,
                                    rkey, op);
    if (ucs_unlikely(status != UCS_OK)) {
        uct_rc_tm_tx_op_release(op);
        return status;
    }
    return UCS_INPROGRESS;
}

ucs_status_t uct_rc_tm_ep_rdma_read(uct_rc_tm_ep_t *ep, void *buffer,
                                    size_t length, uint32_t lkey,
                                    uint64_t remote_addr, uint32_t rkey,
                                    uct_rc_tm_tx_op_t *op)
{
    ucs_status_t status = uct_rc_tm_ep_check_resources(ep);

    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    return uct_rc_tm_ep_send_sge(ep, IBV_WR_RDMA_READ, buffer, length, lkey,
                                 0, 0, remote_addr, rkey, op);
}


/* ----- tagged sends ----- */

ucs_status_t uct_rc_tm_ep_tag_eager_short(uct_ep_h tl_ep, uct_tag_t tag,
                                          const void *data, size_t length)
{
    uct_rc_tm_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    char msg[UCT_RC_TM_SHORT_MAX];

    UCT_CHECK_LENGTH(UCT_RC_TM_TMH_LEN + length, 0,
                     ucs_min(uct_rc_tm_ep_iface(ep)->config.max_inline,
                             sizeof(msg)), "tag_eager_short");

    uct_rc_tm_fill_tmh((struct ibv_tmh*)msg, IBV_TMH_EAGER, 0, tag);
    uct_rc_tm_copy(msg + UCT_RC_TM_TMH_LEN, data, length);
    return uct_rc_tm_ep_send_inline(ep, msg, UCT_RC_TM_TMH_LEN + length, 0, 0);
}

ssize_t uct_rc_tm_ep_tag_eager_bcopy(uct_ep_h tl_ep, uct_tag_t tag,
                                     uint64_t imm, uct_pack_callback_t pack_cb,
                                     void *arg, unsigned flags)
{
    uct_rc_tm_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);

    return uct_rc_tm_ep_send_bcopy(ep, IBV_TMH_EAGER, imm >> 32, tag, imm,
                                   imm != 0, pack_cb, arg,
                                   uct_rc_tm_ep_iface(ep)->config.eager_max);
}

ucs_status_t uct_rc_tm_ep_tag_eager_zcopy(uct_ep_h tl_ep, uct_tag_t tag,
                                          uint64_t imm, const uct_iov_t *iov,
                                          size_t iovcnt, unsigned flags,
                                          uct_completion_t *comp)
{
    uct_rc_tm_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);

    UCT_CHECK_IOV_SIZE(iovcnt, 1, "tag_eager_zcopy");
    UCT_CHECK_LENGTH(uct_iov_total_length(iov, iovcnt), 0,
                     uct_rc_tm_ep_iface(ep)->config.eager_max,
                     "tag_eager_zcopy");

    return uct_rc_tm_ep_send_zcopy(ep, IBV_TMH_EAGER, imm >> 32, tag, imm,
                                   imm != 0, NULL, 0, iov, comp);
}

ucs_status_ptr_t uct_rc_tm_ep_tag_rndv_zcopy(uct_ep_h tl_ep, uct_tag_t tag,
                                             const void *header,
                                             unsigned header_length,
                                             const uct_iov_t *iov,
                                             size_t iovcnt, unsigned flags,
                                             uct_completion_t *comp)
{
    uct_rc_tm_ep_t *ep       = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    uct_rc_tm_iface_t *iface = uct_rc_tm_ep_iface(ep);
    char msg[UCT_RC_TM_SHORT_MAX];
    struct ibv_tmh *tmh = (struct ibv_tmh*)msg;
    struct ibv_rvh *rvh = (struct ibv_rvh*)(tmh + 1);
    size_t length       = uct_iov_total_length(iov, iovcnt);
    uct_rc_tm_rndv_op_t *op;
    ucs_status_t status;
    unsigned index;

    if (ucs_unlikely((iovcnt != 1) ||
                     (UCT_RC_TM_RNDV_HDR_LEN + header_length >
                      iface->md->caps.tm.max_rndv_hdr_size) ||
                     (length > iface->config.rndv_max))) {
        ucs_error("rc_tm: rendezvous of %zu bytes with %u iovs and a %u-byte "
                  "header exceeds the limits", length, (unsigned)iovcnt,
                  header_length);
        return UCS_STATUS_PTR(UCS_ERR_INVALID_PARAM);
    }

    status = uct_rc_tm_ep_check_resources(ep);
    if (ucs_unlikely(status != UCS_OK)) {
        return UCS_STATUS_PTR(status);
    }

    if (ucs_unlikely(iface->tm.rndv_free == UINT16_MAX)) {
        return UCS_STATUS_PTR(UCS_ERR_NO_RESOURCE);
    }

    index = iface->tm.rndv_free;
    op    = &iface->tm.rndv_ops[index];

    uct_rc_tm_fill_tmh(tmh, IBV_TMH_RNDV, ((uint32_t)op->gen << 16) | index,
                       tag);
    rvh->va   = htobe64((uintptr_t)iov->buffer);
    rvh->rkey = htobe32(((tm_dev_mr_t*)iov->memh)->rkey);
    rvh->len  = htobe32(length);
    uct_rc_tm_copy(rvh + 1, header, header_length);

    status = uct_rc_tm_ep_send_inline(ep, msg, UCT_RC_TM_RNDV_HDR_LEN +
                                               header_length, 0, 0);
    if (ucs_unlikely(status != UCS_OK)) {
        return UCS_STATUS_PTR(status);
    }

    iface->tm.rndv_free = op->next_free;
    op->comp            = comp;
    op->ep              = ep;
    ++iface->tm.rndv_in_flight;
    uct_rc_tm_stat(iface, UCT_RC_TM_STAT_TX_RNDV);
    return op;
}

ucs_status_t uct_rc_tm_ep_tag_rndv_cancel(uct_ep_h tl_ep, void *op)
{
    uct_rc_tm_ep_t *ep       = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    uct_rc_tm_iface_t *iface = uct_rc_tm_ep_iface(ep);
    uct_rc_tm_rndv_op_t *rndv_op = op;

    /* A FIN that still arrives carries the old generation and is ignored */
    uct_rc_tm_tag_rndv_op_release(iface, rndv_op);
    return UCS_OK;
}

ucs_status_t uct_rc_tm_ep_tag_rndv_request(uct_ep_h tl_ep, uct_tag_t tag,
                                           const void *header,
                                           unsigned header_length,
                                           unsigned flags)
{
    uct_rc_tm_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    char msg[UCT_RC_TM_SHORT_MAX];

    UCT_CHECK_LENGTH(UCT_RC_TM_TMH_LEN + header_length, 0,
                     ucs_min(uct_rc_tm_ep_iface(ep)->config.max_inline,
                             sizeof(msg)), "tag_rndv_request");

    /* Immediate data 0 with IBV_WR_SEND_WITH_IMM marks a software
     * rendezvous request: eager sends carry immediate data only when it is
     * nonzero */
    uct_rc_tm_fill_tmh((struct ibv_tmh*)msg, IBV_TMH_EAGER, 0, tag);
    uct_rc_tm_copy(msg + UCT_RC_TM_TMH_LEN, header, header_length);
    return uct_rc_tm_ep_send_inline(ep, msg, UCT_RC_TM_TMH_LEN + header_length,
                                    0, 1);
}


/* ----- pending, flush, fence ----- */

ucs_status_t uct_rc_tm_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req,
                                      unsigned flags)
{
    uct_rc_tm_ep_t *ep       = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    uct_rc_tm_iface_t *iface = uct_rc_tm_ep_iface(ep);

    if (uct_rc_tm_ep_check_resources(ep) == UCS_OK) {
        return UCS_ERR_BUSY;
    }

    uct_pending_req_arb_group_push(&ep->arb_group, req);
    ucs_arbiter_group_schedule(&iface->arbiter, &ep->arb_group);
    return UCS_OK;
}

ucs_arbiter_cb_result_t uct_rc_tm_ep_process_pending(ucs_arbiter_t *arbiter,
                                                     ucs_arbiter_group_t *group,
                                                     ucs_arbiter_elem_t *elem,
                                                     void *arg)
{
    uct_pending_req_t *req = ucs_container_of(elem, uct_pending_req_t, priv);
    uct_rc_tm_ep_t *ep     = ucs_container_of(group, uct_rc_tm_ep_t,
                                              arb_group);
    ucs_status_t status;

    if (uct_rc_tm_ep_check_resources(ep) != UCS_OK) {
        return (uct_rc_tm_ep_iface(ep)->tx.available <= 0) ?
               UCS_ARBITER_CB_RESULT_STOP : UCS_ARBITER_CB_RESULT_DESCHED_GROUP;
    }

    status = req->func(req);
    if (status == UCS_OK) {
        return UCS_ARBITER_CB_RESULT_REMOVE_ELEM;
    } else if (status == UCS_INPROGRESS) {
        return UCS_ARBITER_CB_RESULT_NEXT_GROUP;
    }
    return UCS_ARBITER_CB_RESULT_DESCHED_GROUP;
}

typedef struct {
    uct_pending_purge_callback_t cb;
    void                         *arg;
} uct_rc_tm_purge_arg_t;

static ucs_arbiter_cb_result_t uct_rc_tm_ep_purge_cb(ucs_arbiter_t *arbiter,
                                                     ucs_arbiter_group_t *group,
                                                     ucs_arbiter_elem_t *elem,
                                                     void *arg)
{
    uct_pending_req_t *req         = ucs_container_of(elem, uct_pending_req_t,
                                                      priv);
    uct_rc_tm_purge_arg_t *purge   = arg;

    if (purge->cb != NULL) {
        purge->cb(req, purge->arg);
    }
    return UCS_ARBITER_CB_RESULT_REMOVE_ELEM;
}

void uct_rc_tm_ep_pending_purge(uct_ep_h tl_ep, uct_pending_purge_callback_t cb,
                                void *arg)
{
    uct_rc_tm_ep_t *ep          = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    uct_rc_tm_purge_arg_t purge = {cb, arg};

    ucs_arbiter_group_purge(&uct_rc_tm_ep_iface(ep)->arbiter, &ep->arb_group,
                            uct_rc_tm_ep_purge_cb, &purge);
}

ucs_status_t uct_rc_tm_ep_flush(uct_ep_h tl_ep, unsigned flags,
                                uct_completion_t *comp)
{
    uct_rc_tm_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    uct_rc_tm_tx_op_t *op;

    if (ep->status != UCS_OK) {
        return ep->status;
    }

    if (!(flags & UCT_FLUSH_FLAG_CANCEL) &&
        !ucs_arbiter_group_is_empty(&ep->arb_group)) {
        return UCS_ERR_NO_RESOURCE;
    }

    if (ep->acked_sn == ep->posted_sn) {
        return UCS_OK;
    }

    if (comp != NULL) {
        op = uct_rc_tm_iface_get_tx_op(uct_rc_tm_ep_iface(ep));
        if (op == NULL) {
            return UCS_ERR_NO_RESOURCE;
        }
        op->handler = uct_rc_tm_tx_op_flush_done;
        op->comp    = comp;
        op->sn      = ep->posted_sn;
        ucs_queue_push(&ep->tx_ops, &op->queue);
    }
    return UCS_INPROGRESS;
}

/* Is the peer still there?  A send makes the device watch it: a FIN naming
 * no rendezvous, which the peer ignores.  A dead peer fails the connection
 * (and so its operations, rendezvous sends waiting for FIN included) and
 * reaches the error handler; nothing is reported for a live one. */
ucs_status_t uct_rc_tm_ep_check(uct_ep_h tl_ep, unsigned flags,
                                uct_completion_t *comp)
{
    uct_rc_tm_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    struct ibv_tmh keepalive;
    ucs_status_t status;

    UCT_EP_KEEPALIVE_CHECK_PARAM(flags, comp);

    if ((ep->status != UCS_OK) || (ep->posted_sn != ep->acked_sn)) {
        /* Failed already, or the device watches the peer for the sends in
         * flight */
        return UCS_OK;
    }

    uct_rc_tm_fill_tmh(&keepalive, IBV_TMH_FIN, UCT_RC_TM_KEEPALIVE_OP, 0);
    status = uct_rc_tm_ep_send_inline(ep, &keepalive, sizeof(keepalive), 0, 0);
    return (status == UCS_ERR_NO_RESOURCE) ? UCS_OK : status;
}

ucs_status_t uct_rc_tm_ep_fence(uct_ep_h tl_ep, unsigned flags)
{
    uct_rc_tm_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);

    ep->fence = 1;
    return UCS_OK;
}


/* ----- connection ----- */

ucs_status_t uct_rc_tm_ep_get_address(uct_ep_h tl_ep, uct_ep_addr_t *addr)
{
    uct_rc_tm_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);

    tm_dev_conn_addr(ep->conn, addr);
    return UCS_OK;
}

ucs_status_t uct_rc_tm_ep_connect_to_ep(uct_ep_h tl_ep,
                                        const uct_device_addr_t *dev_addr,
                                        const uct_ep_addr_t *ep_addr)
{
    uct_rc_tm_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    int ret;

    ret = tm_dev_connect(ep->conn, dev_addr, ep_addr);
    if (ret != 0) {
        ucs_error("rc_tm: failed to connect qp 0x%x: %s", ep->qp_num,
                  strerror(ret));
        return uct_rc_tm_status_from_errno(ret);
    }

    ep->connected = 1;
    return UCS_OK;
}

static ucs_status_t uct_rc_tm_ep_setup(uct_rc_tm_ep_t *ep,
                                       uct_rc_tm_iface_t *iface,
                                       tm_dev_conn_t *conn)
{
    khiter_t it;
    int ret;

    ep->conn      = conn;
    ep->qp_num    = tm_dev_conn_qp_num(conn);
    ep->connected = 0;
    ep->passive   = 0;
    ep->fence     = 0;
    ep->available = iface->md->caps.max_send_wr;
    ep->posted_sn = 0;
    ep->acked_sn  = 0;
    ep->status    = UCS_OK;
    ucs_queue_head_init(&ep->tx_ops);
    ucs_arbiter_group_init(&ep->arb_group);

    it = kh_put(uct_rc_tm_qpn, &iface->eps, ep->qp_num, &ret);
    if (ret <= 0) {
        ucs_error("rc_tm: qp number 0x%x is already in use", ep->qp_num);
        return UCS_ERR_ALREADY_EXISTS;
    }
    kh_value(&iface->eps, it) = ep;
    return UCS_OK;
}

static void uct_rc_tm_ep_teardown(uct_rc_tm_ep_t *ep, uct_rc_tm_iface_t *iface)
{
    uct_rc_tm_tx_op_t *op;
    khiter_t it;

    uct_rc_tm_ep_pending_purge(&ep->super.super, NULL, NULL);
    ucs_arbiter_group_cleanup(&ep->arb_group);

    /* Sends in flight are dropped without callbacks, as UCT allows; their
     * completions, if the device still reports them, find no endpoint */
    ucs_queue_for_each_extract(op, &ep->tx_ops, queue, 1) {
        uct_rc_tm_tx_op_release(op);
    }
    iface->tx.available += ep->posted_sn - ep->acked_sn;
    uct_rc_tm_tag_rndv_ops_purge(iface, ep, UCS_OK);

    it = kh_get(uct_rc_tm_qpn, &iface->eps, ep->qp_num);
    if (it != kh_end(&iface->eps)) {
        kh_del(uct_rc_tm_qpn, &iface->eps, it);
    }
}

/* The passive half of a connection a peer made to our SRQ: no UCT endpoint
 * stands for it, but a rendezvous software finishes goes out through it */
uct_rc_tm_ep_t *uct_rc_tm_iface_passive_ep(uct_rc_tm_iface_t *iface,
                                           uint32_t qp_num)
{
    tm_dev_conn_t *conn;
    uct_rc_tm_ep_t *ep;

    if (!(iface->md->caps.flags & TM_DEV_CAP_CONNECT_TO_SRQ)) {
        return NULL;
    }

    conn = tm_dev_srq_conn(iface->srq, qp_num);
    if (conn == NULL) {
        return NULL;
    }

    ep = ucs_calloc(1, sizeof(*ep), "rc_tm passive ep");
    if (ep == NULL) {
        return NULL;
    }

    ep->super.super.iface = &iface->super.super;
    if (uct_rc_tm_ep_setup(ep, iface, conn) != UCS_OK) {
        ucs_free(ep);
        return NULL;
    }
    ep->passive   = 1;
    ep->connected = 1;
    return ep;
}

void uct_rc_tm_iface_destroy_passive_ep(uct_rc_tm_ep_t *ep)
{
    /* The connection belongs to the SRQ */
    uct_rc_tm_ep_teardown(ep, uct_rc_tm_ep_iface(ep));
    ucs_free(ep);
}

static UCS_CLASS_INIT_FUNC(uct_rc_tm_ep_t, const uct_ep_params_t *params)
{
    uct_rc_tm_iface_t *iface = ucs_derived_of(params->iface,
                                              uct_rc_tm_iface_t);
    uint64_t to_iface = UCT_EP_PARAM_FIELD_DEV_ADDR |
                        UCT_EP_PARAM_FIELD_IFACE_ADDR;
    ucs_status_t status;
    int ret;

    UCS_CLASS_CALL_SUPER_INIT(uct_base_ep_t, &iface->super);

    ret = tm_dev_create_conn(iface->dev, iface->srq, iface->send_cq,
                             &self->conn);
    if (ret != 0) {
        ucs_error("rc_tm: failed to create a connection on %s: %s",
                  iface->dev->name, strerror(ret));
        return uct_rc_tm_status_from_errno(ret);
    }

    status = uct_rc_tm_ep_setup(self, iface, self->conn);
    if (status != UCS_OK) {
        goto err_destroy_conn;
    }

    if ((params->field_mask & to_iface) == to_iface) {
        ret = tm_dev_connect_to_srq(self->conn, params->dev_addr,
                                    params->iface_addr);
        if (ret != 0) {
            ucs_error("rc_tm: failed to connect qp 0x%x to a remote "
                      "interface: %s", self->qp_num, strerror(ret));
            status = uct_rc_tm_status_from_errno(ret);
            goto err_teardown;
        }
        self->connected = 1;
    }
    return UCS_OK;

err_teardown:
    uct_rc_tm_ep_teardown(self, iface);
err_destroy_conn:
    tm_dev_destroy_conn(self->conn);
    return status;
}

static UCS_CLASS_CLEANUP_FUNC(uct_rc_tm_ep_t)
{
    uct_rc_tm_ep_teardown(self, uct_rc_tm_ep_iface(self));
    tm_dev_destroy_conn(self->conn);
}

UCS_CLASS_DEFINE(uct_rc_tm_ep_t, uct_base_ep_t);
UCS_CLASS_DEFINE_NEW_FUNC(uct_rc_tm_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DEFINE_DELETE_FUNC(uct_rc_tm_ep_t, uct_ep_t);
