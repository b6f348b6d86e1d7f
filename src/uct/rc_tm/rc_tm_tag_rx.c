/*
 * rc_tm tag offload, the message side: completions of receives the device
 * matched, rendezvous finished in software (read, then FIN), messages the
 * device judged unexpected (matched in software against the shadow list,
 * or given to the user's unexpected callbacks), and the FINs that complete
 * our rendezvous sends.  The list side is rc_tm_tag.c.
 */
#include "rc_tm_tag.h"

#include <ucs/debug/log.h>

/* ----- completing receives ----- */

/* Reports a receive done and drops the owner's reference */
void uct_rc_tm_tag_complete_recv(uct_rc_tm_iface_t *iface,
                                 uct_rc_tm_recv_t *recv, uint64_t tag,
                                 uint64_t imm, size_t length,
                                 ucs_status_t status)
{
    uct_tag_context_t *ctx = recv->ctx;

    uct_rc_tm_recv_unpost(iface, recv);
    /* Released first: the callback may post the context again */
    if (uct_rc_tm_recv_release_ctx(iface, recv)) {
        ctx->completed_cb(ctx, tag, imm, length, NULL, status);
    }
    uct_rc_tm_recv_put(iface, recv);
}

/* ----- control messages: rendezvous reads and FINs ----- */

/* A control message that found no send credit waits in an op record on its
 * endpoint's ctl_queue, before any later user send.  The receive a
 * rendezvous read fills completes only once its FIN is posted: completed
 * before, it let its user stop progressing with the FIN still queued here,
 * and the sender waited for it forever (thread mode, deep queues) */
static void uct_rc_tm_tag_ctl_queue(uct_rc_tm_ep_t *ep, uct_rc_tm_tx_op_t *op)
{
    uct_rc_tm_iface_t *iface = uct_rc_tm_ep_iface(ep);

    if (ucs_queue_is_empty(&ep->ctl_queue)) {
        ucs_list_add_tail(&iface->tx.ctl_eps, &ep->ctl_link);
    }
    ucs_queue_push(&ep->ctl_queue, &op->queue);
}

/* The FIN is out (or never will be): its receive completes */
static void uct_rc_tm_tag_fin_done(uct_rc_tm_ep_t *ep, uct_rc_tm_tx_op_t *op)
{
    uct_rc_tm_tag_complete_recv(uct_rc_tm_ep_iface(ep), op->recv, op->tag, 0,
                                op->length, op->recv_status);
    uct_rc_tm_tx_op_release(op);
}

static ucs_status_t uct_rc_tm_tag_ctl_post(uct_rc_tm_ep_t *ep,
                                           uct_rc_tm_tx_op_t *op)
{
    uct_rc_tm_fin_msg_t fin;
    ucs_status_t status;

    if (!op->fin) {
        /* the read's op record goes to the endpoint's sends */
        return uct_rc_tm_ep_rdma_read(ep, op->recv->buffer,
                                      ucs_min(op->length, op->recv->length),
                                      op->recv->lkey, op->remote_addr,
                                      op->rkey, op);
    }

    /* NO_TAG, not a TMH FIN: it lands on the peer's receive-only QP, where
     * its NIC does rendezvous, and might count a FIN as unexpected (then
     * out of phase for good); NO_TAG never counts (rc_tm_iface.h) */
    uct_rc_tm_fill_tmh(&fin.tmh, IBV_TMH_NO_TAG, UCT_RC_TM_CTL_FIN, 0);
    fin.op_id = htobe32(op->app_ctx);
    status    = uct_rc_tm_ep_send_ctl(ep, &fin, UCT_RC_TM_FIN_MSG_LEN);
    if (status == UCS_OK) {
        uct_rc_tm_tag_fin_done(ep, op);
    }
    return status;
}

/* A control message that will never go: a read's receive fails with
 * status; a FIN's has its data */
static void uct_rc_tm_tag_ctl_fail(uct_rc_tm_ep_t *ep, uct_rc_tm_tx_op_t *op,
                                   ucs_status_t status)
{
    if (!op->fin) {
        uct_rc_tm_tag_complete_recv(uct_rc_tm_ep_iface(ep), op->recv, op->tag,
                                    0, 0, status);
        uct_rc_tm_tx_op_release(op);
        return;
    }

    if (status != UCS_ERR_CANCELED) {
        /* The sender cannot be told; its rendezvous send waits until its
         * endpoint fails or is canceled */
        ucs_error("rc_tm: failed to send rendezvous FIN on qp 0x%x: %s",
                  ep->qp_num, ucs_status_string(status));
    }
    uct_rc_tm_tag_fin_done(ep, op);
}

/* Posts a control message now, or after those already waiting */
static void uct_rc_tm_tag_ctl_start(uct_rc_tm_ep_t *ep, uct_rc_tm_tx_op_t *op)
{
    ucs_status_t status = UCS_ERR_NO_RESOURCE;

    if (ucs_queue_is_empty(&ep->ctl_queue)) {
        status = uct_rc_tm_tag_ctl_post(ep, op);
    }
    if (status == UCS_ERR_NO_RESOURCE) {
        uct_rc_tm_tag_ctl_queue(ep, op);
    } else if (status != UCS_OK) {
        uct_rc_tm_tag_ctl_fail(ep, op, status);
    }
}

static void uct_rc_tm_tag_ctl_progress_ep(uct_rc_tm_ep_t *ep)
{
    uct_rc_tm_tx_op_t *op;
    ucs_status_t status;

    while (!ucs_queue_is_empty(&ep->ctl_queue)) {
        op     = ucs_queue_pull_elem_non_empty(&ep->ctl_queue,
                                               uct_rc_tm_tx_op_t, queue);
        status = uct_rc_tm_tag_ctl_post(ep, op);
        if (status == UCS_ERR_NO_RESOURCE) {
            ucs_queue_push_head(&ep->ctl_queue, &op->queue);
            return;
        } else if (status != UCS_OK) {
            uct_rc_tm_tag_ctl_fail(ep, op, status);
        }
    }
    ucs_list_del(&ep->ctl_link);
    /* user sends waited behind them */
    ucs_arbiter_group_schedule(&uct_rc_tm_ep_iface(ep)->arbiter,
                               &ep->arb_group);
}

void uct_rc_tm_tag_ctl_progress(uct_rc_tm_iface_t *iface)
{
    uct_rc_tm_ep_t *ep, *tmp;

    ucs_list_for_each_safe(ep, tmp, &iface->tx.ctl_eps, ctl_link) {
        uct_rc_tm_tag_ctl_progress_ep(ep);
    }
}

void uct_rc_tm_tag_ctl_purge(uct_rc_tm_ep_t *ep, ucs_status_t status)
{
    uct_rc_tm_tx_op_t *op;

    if (ucs_queue_is_empty(&ep->ctl_queue)) {
        return;
    }
    ucs_list_del(&ep->ctl_link);
    while (!ucs_queue_is_empty(&ep->ctl_queue)) {
        op = ucs_queue_pull_elem_non_empty(&ep->ctl_queue, uct_rc_tm_tx_op_t,
                                           queue);
        uct_rc_tm_tag_ctl_fail(ep, op, status);
    }
}

/* The read is done: the FIN tells the sender, then the receive completes */
static void uct_rc_tm_tag_rndv_read_done(uct_rc_tm_tx_op_t *op,
                                         ucs_status_t status)
{
    uct_rc_tm_recv_t *recv = op->recv;

    if (status != UCS_OK) {
        uct_rc_tm_tag_complete_recv(uct_rc_tm_ep_iface(op->ep), recv, op->tag,
                                    0, ucs_min(op->length, recv->length),
                                    status);
        uct_rc_tm_tx_op_release(op);
        return;
    }

    op->fin         = 1;
    op->recv_status = (op->length > recv->length) ?
                      UCS_ERR_MESSAGE_TRUNCATED : UCS_OK;
    op->length      = ucs_min(op->length, recv->length);
    uct_rc_tm_tag_ctl_start(op->ep, op);
}

/* The receive of a rendezvous software finishes: read the data from the
 * sender over the connection the request came on, then FIN.  The owner's
 * reference moves to the read. */
static void uct_rc_tm_tag_rndv_read(uct_rc_tm_iface_t *iface,
                                    uct_rc_tm_recv_t *recv, uint32_t qp_num,
                                    const struct ibv_tmh *tmh,
                                    const struct ibv_rvh *rvh)
{
    uct_rc_tm_ep_t *ep = uct_rc_tm_iface_lookup_ep(iface, qp_num);
    uint64_t tag       = be64toh(tmh->tag);
    uct_rc_tm_tx_op_t *op;
    ucs_status_t status;

    if (ep == NULL) {
        ucs_error("rc_tm: no connection for qp 0x%x to read a rendezvous",
                  qp_num);
        status = UCS_ERR_IO_ERROR;
        goto err;
    }

    op = uct_rc_tm_iface_get_tx_op(iface);
    if (op == NULL) {
        status = UCS_ERR_NO_MEMORY;
        goto err;
    }

    op->handler     = uct_rc_tm_tag_rndv_read_done;
    op->comp        = NULL;
    op->fin         = 0;
    op->recv        = recv;
    op->ep          = ep;
    op->app_ctx     = be32toh(tmh->app_ctx);
    op->tag         = tag;
    op->length      = be32toh(rvh->len);
    op->remote_addr = be64toh(rvh->va);
    op->rkey        = be32toh(rvh->rkey);
    uct_rc_tm_tag_ctl_start(ep, op);
    return;

err:
    uct_rc_tm_tag_complete_recv(iface, recv, tag, 0, 0, status);
}

/* The final completion of a rendezvous the device left to software: the
 * buffer holds its headers now (mlx5 may give a first completion at the
 * match, before it wrote them) */
static void uct_rc_tm_tag_rndv_incomplete(uct_rc_tm_iface_t *iface,
                                          uct_rc_tm_recv_t *recv)
{
    const struct ibv_tmh *tmh = uct_rc_tm_recv_dev_buffer(iface, recv);

    uct_rc_tm_stat(iface, UCT_RC_TM_STAT_RX_RNDV_INCOMPLETE);
    if ((uct_rc_tm_recv_dev_length(iface, recv) < UCT_RC_TM_RNDV_HDR_LEN) ||
        (tmh->opcode != IBV_TMH_RNDV)) {
        ucs_error("rc_tm: cannot finish rendezvous from qp 0x%x in software",
                  recv->rx_qp_num);
        uct_rc_tm_tag_complete_recv(iface, recv, recv->stag, 0, 0,
                                    UCS_ERR_IO_ERROR);
        return;
    }

    /* The headers are read before the data overwrites them */
    uct_rc_tm_tag_rndv_read(iface, recv, recv->rx_qp_num, tmh,
                            (const struct ibv_rvh*)(tmh + 1));
}

/* The MATCH completion: the only one with the message's tag and app
 * context (mlx5 scatters the TMH into that CQE alone).  Its QP number is 0
 * when it came without a packet (TM_CONSUMED: a rendezvous the device
 * reads, an eager message over a packet): the receive's QP is not known.
 * A software rendezvous's MATCH has a packet, and its QP is the one read
 * from. */
static void uct_rc_tm_tag_matched(uct_rc_tm_iface_t *iface,
                                  uct_rc_tm_recv_t *recv,
                                  const tm_dev_wc_t *wc)
{
    recv->flags     |= UCT_RC_TM_RECV_CONSUMED;
    recv->stag       = wc->tm_info.tag;
    recv->app_ctx    = wc->tm_info.priv;
    recv->rx_qp_num  = wc->qp_num;
    if (wc->status == IBV_WC_TM_RNDV_INCOMPLETE) {
        recv->flags |= UCT_RC_TM_RECV_SW_RNDV;
    }
    if (!(wc->wc_flags & IBV_WC_TM_DATA_VALID)) {
        /* the final completion follows: until then, a failure of the
         * connection's receive side must finish it */
        recv->flags |= UCT_RC_TM_RECV_AWAIT_FINAL;
        ucs_list_add_tail(&iface->tm.matched, &recv->sw_list);
    }
    uct_rc_tm_recv_unpost(iface, recv);
    uct_rc_tm_recv_leave_device(iface, recv);
    if (!(recv->flags & UCT_RC_TM_RECV_RELEASED)) {
        recv->ctx->tag_consumed_cb(recv->ctx);
    }
}

/* The data of a matched message is in the receive, or in its bounce
 * segment: what did not fit (in the bounce or the spill segment) is
 * reported as truncated */
static void uct_rc_tm_tag_data_done(uct_rc_tm_iface_t *iface,
                                    uct_rc_tm_recv_t *recv, uint64_t imm,
                                    const tm_dev_wc_t *wc)
{
    size_t length       = ucs_min(wc->byte_len, recv->length);
    ucs_status_t status = uct_rc_tm_wc_recv_status(wc->status);

    if (ucs_likely(status == UCS_OK)) {
        if (recv->bounce != NULL) {
            uct_rc_tm_copy(recv->buffer,
                           uct_rc_tm_recv_dev_buffer(iface, recv), length);
        }
        if (ucs_unlikely(wc->byte_len > recv->length)) {
            uct_rc_tm_stat(iface, UCT_RC_TM_STAT_RX_TRUNCATED);
            status = UCS_ERR_MESSAGE_TRUNCATED;
        }
    }
    uct_rc_tm_tag_complete_recv(iface, recv, recv->stag, imm, length, status);
}

/* A software rendezvous request matched: the payload is the request.  A
 * peer whose requests are longer than ours (a build with another
 * UCT_RC_TM_RNDV_REQUEST_MAX_HDR) may have left part of one in the spill
 * segment: the receive fails.  Placed in a
 * bounce segment, the request is given as inline data: without that flag
 * UCT promises the header is in the receive's own buffer. */
static void uct_rc_tm_tag_rndv_request_done(uct_rc_tm_iface_t *iface,
                                            uct_rc_tm_recv_t *recv,
                                            const tm_dev_wc_t *wc)
{
    ucs_status_t status = uct_rc_tm_wc_recv_status(wc->status);
    size_t length       = wc->byte_len;

    uct_rc_tm_stat(iface, UCT_RC_TM_STAT_RX_RNDV_REQ_EXP);
    if (ucs_unlikely(length > uct_rc_tm_recv_dev_length(iface, recv))) {
        uct_rc_tm_stat(iface, UCT_RC_TM_STAT_RX_TRUNCATED);
        length = uct_rc_tm_recv_dev_length(iface, recv);
        status = UCS_ERR_MESSAGE_TRUNCATED;
    }
    if (uct_rc_tm_recv_release_ctx(iface, recv)) {
        recv->ctx->rndv_cb(recv->ctx, recv->stag,
                           uct_rc_tm_recv_dev_buffer(iface, recv), length,
                           status, (recv->bounce != NULL) ?
                                   UCT_TAG_RECV_CB_INLINE_DATA : 0);
    }
    uct_rc_tm_recv_put(iface, recv);
}

/* The final completion of a matched receive */
static void uct_rc_tm_tag_recv_done(uct_rc_tm_iface_t *iface,
                                    uct_rc_tm_recv_t *recv,
                                    const tm_dev_wc_t *wc)
{
    int with_imm = wc->wc_flags & IBV_WC_WITH_IMM;
    uint64_t imm = with_imm ? (((uint64_t)recv->app_ctx << 32) |
                               be32toh(wc->imm_data)) : 0;

    if (ucs_unlikely(recv->flags & UCT_RC_TM_RECV_SW_RNDV)) {
        if ((wc->status == IBV_WC_SUCCESS) ||
            (wc->status == IBV_WC_TM_RNDV_INCOMPLETE)) {
            uct_rc_tm_tag_rndv_incomplete(iface, recv);
        } else {
            uct_rc_tm_tag_complete_recv(iface, recv, recv->stag, 0, 0,
                                        uct_rc_tm_wc_recv_status(wc->status));
        }
        return;
    }

    if (ucs_unlikely(with_imm && (imm == 0))) {
        uct_rc_tm_tag_rndv_request_done(iface, recv, wc);
        return;
    }

    /* Our rendezvous requests carry a nonzero op id and no immediate data;
     * eager messages without immediate data carry app_ctx 0 */
    uct_rc_tm_stat(iface, (!with_imm && (recv->app_ctx != 0)) ?
                          UCT_RC_TM_STAT_RX_RNDV_EXP : UCT_RC_TM_STAT_RX_EXP);
    uct_rc_tm_tag_data_done(iface, recv, imm, wc);
}

/* The device matched a receive whose fate software had taken for another:
 * a DEL that failed only because this consumption came first (its
 * completion decides); one software gave a message, or reported lost
 * (dropped: its slot is freed at the final completion) */
static UCS_F_NOINLINE void uct_rc_tm_tag_late_match(uct_rc_tm_iface_t *iface,
                                                    uct_rc_tm_recv_t *recv,
                                                    const tm_dev_wc_t *wc)
{
    if (recv->flags & UCT_RC_TM_RECV_DEL_FAILED) {
        uct_rc_tm_tag_del_failed_consumed(iface, recv);
        uct_rc_tm_tag_matched(iface, recv, wc);
        uct_rc_tm_tag_resolve_del_failed(iface);
        return;
    }

    /* Cannot happen while every list operation carries the count (the DEL
     * reaches the device before it is back in phase), nor while every loss
     * comes with its QP's LOC_LEN_ERR */
    ucs_error("rc_tm: device matched tag 0x%" PRIx64 " to a receive "
              "software had %s; dropped", wc->tm_info.tag,
              (recv->flags & UCT_RC_TM_RECV_SW_WON) ?
              "given another message" : "reported lost");
    recv->flags |= UCT_RC_TM_RECV_CONSUMED;
}

void uct_rc_tm_tag_handle_recv_wc(uct_rc_tm_iface_t *iface,
                                  const tm_dev_wc_t *wc)
{
    uct_rc_tm_recv_t *recv = (uct_rc_tm_recv_t*)(uintptr_t)wc->wr_id;

    if (ucs_unlikely(wc->status == IBV_WC_GENERAL_ERR)) {
        /* rdma-core found no entry at the CQE's index: wr_id is stale */
        ucs_error("rc_tm: device completed a list entry it did not hold");
        return;
    }

    /* The first completion of a receive is its match, whatever its flags:
     * mlx5's final completion of a software rendezvous may say MATCH again
     * (MSG_COMPLETION_CANCELED) */
    if (!(recv->flags & UCT_RC_TM_RECV_CONSUMED)) {
        if (ucs_unlikely(recv->flags & (UCT_RC_TM_RECV_SW_WON |
                                        UCT_RC_TM_RECV_DEL_FAILED |
                                        UCT_RC_TM_RECV_FAILED))) {
            uct_rc_tm_tag_late_match(iface, recv, wc);
        } else {
            uct_rc_tm_tag_matched(iface, recv, wc);
        }
    }

    if (!(wc->wc_flags & IBV_WC_TM_DATA_VALID)) {
        return; /* MATCH only: the final completion follows */
    }

    if (recv->flags & UCT_RC_TM_RECV_AWAIT_FINAL) {
        recv->flags &= ~UCT_RC_TM_RECV_AWAIT_FINAL;
        ucs_list_del(&recv->sw_list);
    }
    if (ucs_likely(!(recv->flags & (UCT_RC_TM_RECV_SW_WON |
                                    UCT_RC_TM_RECV_FAILED)))) {
        uct_rc_tm_tag_recv_done(iface, recv, wc);
    }
    uct_rc_tm_recv_slot_put(iface, recv, 1);
}

/* Whether recv, matched by the device, may have been matched on QP qp_num:
 * it was, or its QP is not known (0) */
static int uct_rc_tm_tag_matched_on(const uct_rc_tm_recv_t *recv,
                                    uint32_t qp_num)
{
    return (recv->rx_qp_num == qp_num) || (recv->rx_qp_num == 0);
}

/* The receive side of the connection whose receive-only QP is qp_num
 * failed: the receives the device matched there and had not finished (its
 * rendezvous reads) never will.  Those whose QP is not known fail with them
 * (collateral): any may be that QP's, and would wait forever.  One another
 * connection still finishes has its final completion dropped (FAILED), its
 * buffer written after it failed.  Their list slots stay taken, as in
 * rdma-core, which expects a final completion for them. */
void uct_rc_tm_tag_fail_matched(uct_rc_tm_iface_t *iface, uint32_t qp_num,
                                enum ibv_wc_status wc_status)
{
    uct_rc_tm_recv_t *recv, *tmp;

    ucs_list_for_each_safe(recv, tmp, &iface->tm.matched, sw_list) {
        if (!uct_rc_tm_tag_matched_on(recv, qp_num)) {
            continue;
        }
        recv->flags &= ~UCT_RC_TM_RECV_AWAIT_FINAL;
        recv->flags |= UCT_RC_TM_RECV_FAILED;
        ucs_list_del(&recv->sw_list);
        uct_rc_tm_tag_complete_recv(iface, recv, recv->stag, 0, 0,
                                    uct_rc_tm_wc_recv_status(wc_status));
    }
}

int uct_rc_tm_tag_awaits_final(uct_rc_tm_iface_t *iface, uint32_t qp_num)
{
    uct_rc_tm_recv_t *recv;

    ucs_list_for_each(recv, &iface->tm.matched, sw_list) {
        if (uct_rc_tm_tag_matched_on(recv, qp_num)) {
            return 1;
        }
    }
    return 0;
}

/* ----- messages the device did not match ----- */

void uct_rc_tm_tag_rndv_op_release(uct_rc_tm_iface_t *iface,
                                   uct_rc_tm_rndv_op_t *op)
{
    op->comp      = NULL;
    /* a late FIN names the old generation; 0 is skipped so that an op id
     * is never 0 (which tells a rendezvous from an eager message) */
    op->gen       = (op->gen == UINT16_MAX) ? 1 : op->gen + 1;
    op->next_free = iface->tm.rndv_free;
    iface->tm.rndv_free = op - iface->tm.rndv_ops;
    --iface->tm.rndv_in_flight;
}

/* Rendezvous sends whose FIN would come from ep's peer: none will once the
 * connection failed (they complete with its error) or the endpoint is
 * destroyed (UCS_ERR_CANCELED); with UCS_OK, at interface close, they go
 * without a callback */
void uct_rc_tm_tag_rndv_ops_purge(uct_rc_tm_iface_t *iface,
                                  uct_rc_tm_ep_t *ep, ucs_status_t status)
{
    uct_rc_tm_rndv_op_t *op;
    uct_completion_t *comp;
    unsigned i;

    for (i = 0; (i < iface->config.rndv_queue_len) &&
                (iface->tm.rndv_in_flight > 0); ++i) {
        op = &iface->tm.rndv_ops[i];
        if ((op->comp == NULL) || (op->ep != ep)) {
            continue;
        }
        comp = op->comp;
        uct_rc_tm_tag_rndv_op_release(iface, op);
        if (status != UCS_OK) {
            uct_invoke_completion(comp, status);
        }
    }
}

/* A rendezvous send is done: the FIN came, from the receiver's NIC (a TMH
 * FIN on our sending QP) or its software (a control message on our
 * receive-only QP) */
void uct_rc_tm_tag_handle_fin(uct_rc_tm_iface_t *iface, uint32_t qp_num,
                              uint32_t app_ctx)
{
    unsigned index = app_ctx & UINT16_MAX;
    uct_rc_tm_rndv_op_t *op;
    uct_completion_t *comp;

    op = (index < iface->config.rndv_queue_len) ?
         &iface->tm.rndv_ops[index] : NULL;
    if ((op == NULL) || (op->gen != (app_ctx >> 16)) || (op->comp == NULL)) {
        ucs_debug("rc_tm: FIN for unknown or canceled rendezvous 0x%x",
                  app_ctx);
        return;
    }

    /* only the peer the request went to may finish it */
    if (op->ep != uct_rc_tm_iface_lookup_ep(iface, qp_num)) {
        ucs_error("rc_tm: dropped FIN for rendezvous 0x%x from qp 0x%x, "
                  "which it was not sent to", app_ctx, qp_num);
        return;
    }

    comp = op->comp;
    uct_rc_tm_tag_rndv_op_release(iface, op);
    uct_invoke_completion(comp, UCS_OK);
}

/* A message the device judged unexpected, given to the first-posted
 * receive that matches it: a software one, or a device one the device could
 * not match yet (added while it was out of phase) */
static UCS_F_NOINLINE void
uct_rc_tm_tag_sw_match(uct_rc_tm_iface_t *iface, uct_rc_tm_recv_t *recv,
                       const tm_dev_wc_t *wc, struct ibv_tmh *tmh,
                       uint64_t imm, int with_imm)
{
    size_t length = wc->byte_len - UCT_RC_TM_TMH_LEN;
    uint64_t tag  = be64toh(tmh->tag);

    uct_rc_tm_stat(iface, UCT_RC_TM_STAT_RX_SW_MATCH);
    uct_rc_tm_recv_unpost(iface, recv);
    if (recv->flags & UCT_RC_TM_RECV_IN_SW) {
        uct_rc_tm_recv_leave_sw(iface, recv);
    } else {
        /* Removed before any operation brings the device back in phase;
         * the DEL completion drops the device entry */
        uct_rc_tm_stat(iface, UCT_RC_TM_STAT_SW_WON);
        recv->flags |= UCT_RC_TM_RECV_SW_WON;
        ++recv->refs; /* completion here drops one; the DEL the other */
        if (!(recv->flags & UCT_RC_TM_RECV_EVICTING)) {
            uct_rc_tm_tag_post_del(iface, recv);
        }
    }

    recv->ctx->tag_consumed_cb(recv->ctx);

    if (tmh->opcode == IBV_TMH_RNDV) {
        uct_rc_tm_stat(iface, UCT_RC_TM_STAT_RX_SW_MATCH_RNDV);
        uct_rc_tm_tag_rndv_read(iface, recv, wc->qp_num, tmh,
                                (const struct ibv_rvh*)(tmh + 1));
    } else if (with_imm && (imm == 0)) {
        uct_rc_tm_stat(iface, UCT_RC_TM_STAT_RX_RNDV_REQ_EXP);
        uct_rc_tm_stat(iface, UCT_RC_TM_STAT_RX_SW_MATCH_RNDV_REQ);
        uct_rc_tm_recv_release_ctx(iface, recv);
        /* the request is in the SRQ's buffer, not the receive's */
        recv->ctx->rndv_cb(recv->ctx, tag, tmh + 1, length, UCS_OK,
                           UCT_TAG_RECV_CB_INLINE_DATA);
        uct_rc_tm_recv_put(iface, recv);
    } else {
        uct_rc_tm_copy(recv->buffer, tmh + 1, ucs_min(length, recv->length));
        uct_rc_tm_tag_complete_recv(iface, recv, tag, imm,
                                    ucs_min(length, recv->length),
                                    (length > recv->length) ?
                                    UCS_ERR_MESSAGE_TRUNCATED : UCS_OK);
    }
}

static ucs_status_t uct_rc_tm_tag_unexp_rndv(uct_rc_tm_iface_t *iface,
                                             const tm_dev_wc_t *wc,
                                             struct ibv_tmh *tmh)
{
    const struct ibv_rvh *rvh = (const struct ibv_rvh*)(tmh + 1);
    uct_rc_tm_packed_rkey_t rkey_buf;

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
                                              struct ibv_tmh *tmh,
                                              uint64_t imm, int with_imm)
{
    size_t length = wc->byte_len - UCT_RC_TM_TMH_LEN;
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
    int with_imm = wc->wc_flags & IBV_WC_WITH_IMM;
    tm_matcher_entry_t *entry;
    ucs_status_t status;
    uint64_t imm;

    if (tmh->opcode == IBV_TMH_FIN) {
        /* the receiver's NIC finished our rendezvous: mlx5 does not count
         * its FIN as unexpected (IBV_WC_TM_NO_TAG) */
        uct_rc_tm_tag_handle_fin(iface, wc->qp_num, be32toh(tmh->app_ctx));
        return UCS_OK;
    }

    if (ucs_unlikely(!iface->tm.enabled ||
                     ((tmh->opcode != IBV_TMH_EAGER) &&
                      (tmh->opcode != IBV_TMH_RNDV)) ||
                     ((tmh->opcode == IBV_TMH_RNDV) &&
                      (wc->byte_len < UCT_RC_TM_RNDV_HDR_LEN)))) {
        ucs_error("rc_tm: dropped tagged message (opcode %u, %u bytes) on "
                  "qp 0x%x: %s", tmh->opcode, wc->byte_len, wc->qp_num,
                  iface->tm.enabled ? "malformed" :
                  "tag offload is not enabled");
        return UCS_OK;
    }

    /* Counted before anything else: whatever is posted from here on must
     * carry a count that includes this message */
    ++iface->tm.unexpected_cnt;
    imm = with_imm ? (((uint64_t)be32toh(tmh->app_ctx) << 32) |
                      be32toh(wc->imm_data)) : 0;

    /* A receive software holds, or one whose ADD the device had not taken
     * when the message came, takes it; with none posted, none can */
    entry = (tm_matcher_count(&iface->tm.matcher) == 0) ? NULL :
            tm_matcher_peek(&iface->tm.matcher, be64toh(tmh->tag));
    if (ucs_unlikely(entry != NULL)) {
        uct_rc_tm_tag_sw_match(iface, entry->arg, wc, tmh, imm, with_imm);
        status = UCS_OK;
    } else if (tmh->opcode == IBV_TMH_EAGER) {
        status = uct_rc_tm_tag_unexp_eager(iface, wc, tmh, imm, with_imm);
    } else {
        status = uct_rc_tm_tag_unexp_rndv(iface, wc, tmh);
    }

    /* The device asks for the count: rdma-core's mlx5 once more than 0x3fff
     * unexpected messages were not acknowledged by an ADD that carried it.
     * A SYNC does not acknowledge them there (mlx5_post_srq_ops sets
     * unexp_out on TAG_ADD only), so while no receive is listed every
     * later message asks again: answering each one that brought a new
     * count cost a SYNC per few small messages (issue 14).  Answered once
     * per UCT_RC_TM_UNEXP_SYNC_PERIOD messages, as UCX's rc_mlx5 sends its
     * count; posted after the DEL of a receive won above, as every
     * operation is. */
    if (ucs_unlikely(wc->wc_flags & IBV_WC_TM_SYNC_REQ) &&
        (iface->tm.unexpected_cnt - iface->tm.count_op_cnt >=
         UCT_RC_TM_UNEXP_SYNC_PERIOD)) {
        uct_rc_tm_tag_post_sync(iface);
    }
    return status;
}


