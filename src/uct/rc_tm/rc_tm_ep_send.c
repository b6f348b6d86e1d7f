/*
 * rc_tm endpoint sends: active messages, RMA and tagged sends.  Each posts
 * one work request; those that need something done at completion carry an
 * op record (uct_rc_tm_tx_op_t) queued on the endpoint by sequence number.
 *
 * Each checks its parameters as UCX's rc transports check theirs, with
 * UCX's macros (uct_iface.h): the AM id, iov counts, and lengths against
 * what the interface reports (uct_rc_tm_iface_t::cap).  As UCX's, the checks
 * are there only when UCX was built to check parameters (ENABLE_PARAMS_CHECK
 * in its build definitions, ucx_build_config.h); otherwise the caller
 * promises what uct.h asks.
 */
#include "rc_tm_ep.h"

#include <ucs/debug/log.h>


/* ----- posting ----- */

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

static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_tm_ep_post(uct_rc_tm_ep_t *ep, struct ibv_send_wr *wr,
                  uct_rc_tm_tx_op_t *op)
{
    uct_rc_tm_iface_t *iface = uct_rc_tm_ep_iface(ep);
    struct ibv_send_wr *bad_wr;
    int signaled, ret;

    /* A completion only every tx_moderation sends, and for every send
     * that has someone to tell when it completes (sends of a connection
     * complete in order: one completion vouches for those before it, and
     * a send buffer waits for it).  Every send holds an entry of the send
     * CQ until a completion covers it (a failed send completes each one),
     * so when entries run short each send asks, or none might come back. */
    signaled        = ((op != NULL) &&
                       ((op->comp != NULL) ||
                        (op->handler != uct_rc_tm_tx_op_done))) ||
                      (wr->send_flags & IBV_SEND_SIGNALED) ||
                      (ep->unsignaled + 1 >= iface->config.tx_moderation) ||
                      (iface->tx.available <= (int)iface->config.tx_moderation);
    wr->wr_id       = (ep->posted_sn + 1) | UCT_RC_TM_WR_ID_SEND;
    wr->next        = NULL;
    wr->send_flags |= signaled ? IBV_SEND_SIGNALED : 0;
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
    ep->unsignaled = signaled ? 0 : ep->unsignaled + 1;
    if (op != NULL) {
        op->sn = ep->posted_sn;
        ucs_queue_push(&ep->tx_ops, &op->queue);
    }
    return UCS_OK;
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

/* Two gather entries, each copied into the WQE (on the software NIC into
 * the peer's ring): the payload is copied once, from where the caller has
 * it, as rc_mlx5 copies it into its WQE */
ucs_status_t uct_rc_tm_ep_send_inline(uct_rc_tm_ep_t *ep, const void *hdr,
                                      size_t hdr_length, const void *payload,
                                      size_t length, uint32_t imm_be,
                                      int with_imm)
{
    ucs_status_t status = uct_rc_tm_ep_check_resources(ep);
    struct ibv_sge sge[2];
    struct ibv_send_wr wr;

    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    sge[0].addr     = (uintptr_t)hdr;
    sge[0].length   = hdr_length;
    sge[0].lkey     = 0;
    sge[1].addr     = (uintptr_t)payload;
    sge[1].length   = length;
    sge[1].lkey     = 0;
    wr.sg_list      = sge;
    wr.num_sge      = (length != 0) ? 2 : 1;
    wr.opcode       = with_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
    wr.send_flags   = IBV_SEND_INLINE;
    wr.imm_data     = imm_be;
    return uct_rc_tm_ep_post(ep, &wr, NULL);
}

/* Sends that asked for no completion get one: a zero-length RDMA WRITE
 * after them that asks (RC completes in order, and a zero-length RDMA
 * operation checks no key) */
ucs_status_t uct_rc_tm_ep_ask_completion(uct_rc_tm_ep_t *ep)
{
    ucs_status_t status;
    struct ibv_send_wr wr;

    if (ep->unsignaled == 0) {
        return UCS_OK;      /* the last send asked already */
    }

    status = uct_rc_tm_ep_check_credits(ep);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    memset(&wr, 0, sizeof(wr));
    wr.opcode     = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    return uct_rc_tm_ep_post(ep, &wr, NULL);
}

/* An endpoint check (uct_rc_tm_ep_check): a zero-length RDMA WRITE, which
 * the peer's device acknowledges without touching memory or its SRQ */
ucs_status_t uct_rc_tm_ep_post_check(uct_rc_tm_ep_t *ep)
{
    ucs_status_t status = uct_rc_tm_ep_check_credits(ep);
    struct ibv_send_wr wr;

    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    memset(&wr, 0, sizeof(wr));
    wr.opcode = IBV_WR_RDMA_WRITE;
    return uct_rc_tm_ep_post(ep, &wr, NULL);
}

ucs_status_t uct_rc_tm_ep_send_ctl(uct_rc_tm_ep_t *ep, const void *msg,
                                   size_t length)
{
    ucs_status_t status = uct_rc_tm_ep_check_credits(ep);

    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    return uct_rc_tm_ep_send_sge(ep, IBV_WR_SEND, (void*)msg, length, 0,
                                 IBV_SEND_INLINE, 0, 0, 0, NULL);
}

/* A message built in a send buffer: TMH | pack_cb's payload.  One that
 * fits the QP's inline data goes inline: the buffer is free again at post,
 * with no completion to wait for, and the device reads no key */
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
    int inline_send;

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

    inline_send = (UCT_RC_TM_TMH_LEN + length) <=
                  uct_rc_tm_ep_iface(ep)->config.max_inline;
    status = uct_rc_tm_ep_send_sge(ep, with_imm ? IBV_WR_SEND_WITH_IMM :
                                                  IBV_WR_SEND,
                                   tmh, UCT_RC_TM_TMH_LEN + length,
                                   uct_rc_tm_tx_op_lkey(op),
                                   inline_send ? IBV_SEND_INLINE : 0,
                                   htobe32((uint32_t)imm), 0, 0,
                                   inline_send ? NULL : op);
    if (ucs_unlikely(status != UCS_OK) || inline_send) {
        uct_rc_tm_tx_op_release(op);
    }
    return ucs_likely(status == UCS_OK) ? (ssize_t)length : status;
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
    sge[1].lkey   = uct_rc_tm_memh_lkey(iov->memh);
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
    struct {
        struct ibv_tmh tmh;
        uint64_t       header;
    } msg;

    UCS_STATIC_ASSERT(sizeof(msg) == UCT_RC_TM_TMH_LEN + sizeof(header));
    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(sizeof(header) + length, 0,
                     uct_rc_tm_ep_iface(ep)->cap.am.max_short, "am_short");
    UCT_RC_TM_CHECK_MSG_FITS(sizeof(msg) + length, "am_short",
                             UCS_ERR_INVALID_PARAM);

    uct_rc_tm_fill_tmh(&msg.tmh, IBV_TMH_NO_TAG, id, 0);
    msg.header = header;
    return uct_rc_tm_ep_send_inline(ep, &msg, sizeof(msg), payload, length,
                                    0, 0);
}

ucs_status_t uct_rc_tm_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id,
                                       const uct_iov_t *iov, size_t iovcnt)
{
    uct_rc_tm_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    char msg[UCT_RC_TM_SHORT_MAX];
    size_t length = UCT_RC_TM_TMH_LEN;
    size_t i, iov_length;

    /* Any number of iovs (UCP sends up to three): they are copied, as
     * rc_mlx5 copies them inline */
    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(uct_iov_total_length(iov, iovcnt), 0,
                     uct_rc_tm_ep_iface(ep)->cap.am.max_short, "am_short_iov");
    UCT_RC_TM_CHECK_MSG_FITS(UCT_RC_TM_TMH_LEN +
                             uct_iov_total_length(iov, iovcnt),
                             "am_short_iov", UCS_ERR_INVALID_PARAM);

    uct_rc_tm_fill_tmh((struct ibv_tmh*)msg, IBV_TMH_NO_TAG, id, 0);
    for (i = 0; i < iovcnt; ++i) {
        iov_length = uct_iov_get_length(&iov[i]);
        uct_rc_tm_copy(msg + length, iov[i].buffer, iov_length);
        length += iov_length;
    }

    return uct_rc_tm_ep_send_inline(ep, msg, length, NULL, 0, 0, 0);
}

ssize_t uct_rc_tm_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                              uct_pack_callback_t pack_cb, void *arg,
                              unsigned flags)
{
    uct_rc_tm_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);

    UCT_CHECK_AM_ID(id);
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

    UCT_CHECK_IOV_SIZE(iovcnt, iface->cap.am.max_iov, "am_zcopy");
    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(header_length + uct_iov_total_length(iov, iovcnt), 0,
                     iface->cap.am.max_zcopy, "am_zcopy");
    UCT_CHECK_LENGTH(header_length, 0, iface->cap.am.max_hdr,
                     "am_zcopy header");

    return uct_rc_tm_ep_send_zcopy(ep, IBV_TMH_NO_TAG, id, 0, 0, 0, header,
                                   header_length,
                                   uct_rc_tm_iov_data(iov, iovcnt), comp);
}


/* ----- RMA ----- */

ucs_status_t uct_rc_tm_ep_put_short(uct_ep_h tl_ep, const void *buffer,
                                    unsigned length, uint64_t remote_addr,
                                    uct_rkey_t rkey)
{
    uct_rc_tm_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    ucs_status_t status;

    UCT_CHECK_LENGTH(length, 0, uct_rc_tm_ep_iface(ep)->cap.put.max_short,
                     "put_short");
    status = uct_rc_tm_ep_check_resources(ep);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

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
                                   uct_rc_tm_memh_lkey(iov->memh), 0, 0,
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
    uct_rc_tm_ep_t *ep       = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    uct_rc_tm_iface_t *iface = uct_rc_tm_ep_iface(ep);

    UCT_CHECK_IOV_SIZE(iovcnt, iface->cap.put.max_iov, "put_zcopy");
    UCT_CHECK_LENGTH(uct_iov_total_length(iov, iovcnt), 0,
                     iface->cap.put.max_zcopy, "put_zcopy");
    return uct_rc_tm_ep_rma_zcopy(ep, IBV_WR_RDMA_WRITE,
                                  uct_rc_tm_iov_data(iov, iovcnt),
                                  remote_addr, rkey, comp);
}

ucs_status_t uct_rc_tm_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                    size_t iovcnt, uint64_t remote_addr,
                                    uct_rkey_t rkey, uct_completion_t *comp)
{
    uct_rc_tm_ep_t *ep       = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    uct_rc_tm_iface_t *iface = uct_rc_tm_ep_iface(ep);

    UCT_CHECK_IOV_SIZE(iovcnt, iface->cap.get.max_iov, "get_zcopy");
    UCT_CHECK_LENGTH(uct_iov_total_length(iov, iovcnt),
                     iface->cap.get.min_zcopy, iface->cap.get.max_zcopy,
                     "get_zcopy");
    return uct_rc_tm_ep_rma_zcopy(ep, IBV_WR_RDMA_READ,
                                  uct_rc_tm_iov_data(iov, iovcnt),
                                  remote_addr, rkey, comp);
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

    UCT_CHECK_LENGTH(length, 0, iface->cap.get.max_bcopy, "get_bcopy");
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
    ucs_status_t status = uct_rc_tm_ep_check_credits(ep);

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
    struct ibv_tmh tmh;

    UCT_CHECK_LENGTH(length, 0,
                     uct_rc_tm_ep_iface(ep)->cap.tag.eager.max_short,
                     "tag_eager_short");
    UCT_RC_TM_CHECK_MSG_FITS(UCT_RC_TM_TMH_LEN + length, "tag_eager_short",
                             UCS_ERR_INVALID_PARAM);

    uct_rc_tm_fill_tmh(&tmh, IBV_TMH_EAGER, 0, tag);
    return uct_rc_tm_ep_send_inline(ep, &tmh, sizeof(tmh), data, length, 0, 0);
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
    uct_rc_tm_ep_t *ep       = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    uct_rc_tm_iface_t *iface = uct_rc_tm_ep_iface(ep);

    UCT_CHECK_IOV_SIZE(iovcnt, iface->cap.tag.eager.max_iov,
                       "tag_eager_zcopy");
    UCT_CHECK_LENGTH(uct_iov_total_length(iov, iovcnt), 0,
                     iface->cap.tag.eager.max_zcopy, "tag_eager_zcopy");

    return uct_rc_tm_ep_send_zcopy(ep, IBV_TMH_EAGER, imm >> 32, tag, imm,
                                   imm != 0, NULL, 0,
                                   uct_rc_tm_iov_data(iov, iovcnt), comp);
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

    UCT_RC_TM_CHECK_IOV_SIZE_PTR(iovcnt, iface->cap.tag.rndv.max_iov,
                                 "tag_rndv_zcopy");
    UCT_RC_TM_CHECK_LENGTH_PTR(length, iface->cap.tag.rndv.max_zcopy,
                               "tag_rndv_zcopy");
    UCT_RC_TM_CHECK_LENGTH_PTR(header_length, iface->cap.tag.rndv.max_hdr,
                               "tag_rndv_zcopy header");
    UCT_RC_TM_CHECK_MSG_FITS(UCT_RC_TM_RNDV_HDR_LEN + header_length,
                             "tag_rndv_zcopy header",
                             UCS_STATUS_PTR(UCS_ERR_INVALID_PARAM));

    status = uct_rc_tm_ep_check_resources(ep);
    if (ucs_unlikely(status != UCS_OK)) {
        return UCS_STATUS_PTR(status);
    }

    if (ucs_unlikely(uct_rc_tm_iface_rndv_ops_exhausted(iface))) {
        return UCS_STATUS_PTR(UCS_ERR_NO_RESOURCE);
    }

    index = iface->tm.rndv_free;
    op    = &iface->tm.rndv_ops[index];

    uct_rc_tm_fill_tmh(tmh, IBV_TMH_RNDV, ((uint32_t)op->gen << 16) | index,
                       tag);
    iov       = uct_rc_tm_iov_data(iov, iovcnt);
    rvh->va   = htobe64((uintptr_t)iov->buffer);
    rvh->rkey = htobe32(uct_rc_tm_memh_rkey(iov->memh));
    rvh->len  = htobe32(length);
    uct_rc_tm_copy(rvh + 1, header, header_length);

    status = uct_rc_tm_ep_send_inline(ep, msg, UCT_RC_TM_RNDV_HDR_LEN +
                                               header_length, NULL, 0, 0, 0);
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
    struct ibv_tmh tmh;

    /* Not cap.tag.rndv.max_hdr, though uct.h names it: UCP's requests carry
     * RTS headers past it, and rc_mlx5 takes whatever fits inline */
    UCT_CHECK_LENGTH(header_length, 0,
                     uct_rc_tm_ep_iface(ep)->rndv_request_max_hdr,
                     "tag_rndv_request header");
    UCT_RC_TM_CHECK_MSG_FITS(UCT_RC_TM_TMH_LEN + header_length,
                             "tag_rndv_request header", UCS_ERR_INVALID_PARAM);

    /* Immediate data 0 with IBV_WR_SEND_WITH_IMM marks a software
     * rendezvous request: eager sends carry immediate data only when it is
     * nonzero */
    uct_rc_tm_fill_tmh(&tmh, IBV_TMH_EAGER, 0, tag);
    return uct_rc_tm_ep_send_inline(ep, &tmh, sizeof(tmh), header,
                                    header_length, 0, 1);
}

