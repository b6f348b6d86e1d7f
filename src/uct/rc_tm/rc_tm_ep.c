/*
 * rc_tm endpoint: completion bookkeeping, failure, pending queue, flush,
 * connection setup and teardown.  The sends are in rc_tm_ep_send.c.
 */
#include "rc_tm_ep.h"

#include <ucs/debug/log.h>
#include <ucs/sys/string.h>


/* ----- send resources and completion bookkeeping ----- */

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

void uct_rc_tm_tx_op_done(uct_rc_tm_tx_op_t *op, ucs_status_t status)
{
    if (op->comp != NULL) {
        uct_invoke_completion(op->comp, status);
    }
    uct_rc_tm_tx_op_release(op);
}

static void uct_rc_tm_ep_complete_ops(uct_rc_tm_ep_t *ep, uint64_t upto_sn,
                                      ucs_status_t status)
{
    uct_rc_tm_tx_op_t *op;

    ucs_queue_for_each_extract(op, &ep->tx_ops, queue, op->sn <= upto_sn) {
        op->handler(op, status);
    }
}

UCS_F_NOINLINE void uct_rc_tm_ep_set_failed(uct_rc_tm_ep_t *ep,
                                            enum ibv_wc_status wc_status)
{
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
    uct_rc_tm_ep_fail(ep, status);
}

/* The connection fails with status (the caller said why) */
UCS_F_NOINLINE void uct_rc_tm_ep_fail(uct_rc_tm_ep_t *ep, ucs_status_t status)
{
    uct_rc_tm_iface_t *iface = uct_rc_tm_ep_iface(ep);

    if (ep->status != UCS_OK) {
        return;
    }
    ep->status = status;
    /* Everything still queued completes with the error, and so do the
     * rendezvous sends waiting for this peer's FIN */
    uct_rc_tm_ep_complete_ops(ep, UINT64_MAX, status);
    uct_rc_tm_tag_ctl_purge(ep, status);
    uct_rc_tm_tag_rndv_ops_purge(iface, ep, status);
    uct_iface_handle_ep_err(&iface->super.super, &ep->super.super, status);
}

void uct_rc_tm_ep_handle_send_wc(uct_rc_tm_ep_t *ep, const tm_dev_wc_t *wc)
{
    /* wr_id is the send's sequence number: it and every send before it
     * are done (after an error, each send completes on its own) */
    uint64_t sn = wc->wr_id & ~UCT_RC_TM_WR_ID_SEND;

    if (sn > ep->acked_sn) {
        ep->available                          += sn - ep->acked_sn;
        uct_rc_tm_ep_iface(ep)->tx.available += sn - ep->acked_sn;
        ep->acked_sn                            = sn;
    }
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



/* ----- pending, flush, fence ----- */

ucs_status_t uct_rc_tm_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req,
                                      unsigned flags)
{
    uct_rc_tm_ep_t *ep       = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    uct_rc_tm_iface_t *iface = uct_rc_tm_ep_iface(ep);

    /* A rendezvous refused for want of an op finds the connection's
     * credits free: refusing it here would make UCP retry it at once,
     * forever, without progress */
    if ((uct_rc_tm_ep_check_resources(ep) == UCS_OK) &&
        !uct_rc_tm_iface_rndv_ops_exhausted(iface)) {
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

    /* The request at the head of the queue is the one to send now */
    ep->in_pending = 1;
    status         = uct_rc_tm_ep_check_resources(ep);
    if (status == UCS_OK) {
        status = req->func(req);
    } else if (status == UCS_ERR_NO_RESOURCE) {
        ep->in_pending = 0;
        return (uct_rc_tm_ep_iface(ep)->tx.available <= 0) ?
               UCS_ARBITER_CB_RESULT_STOP : UCS_ARBITER_CB_RESULT_DESCHED_GROUP;
    } else {
        status = req->func(req); /* failed endpoint: the request learns it */
    }
    ep->in_pending = 0;

    if (status == UCS_OK) {
        return UCS_ARBITER_CB_RESULT_REMOVE_ELEM;
    } else if (status == UCS_INPROGRESS) {
        return UCS_ARBITER_CB_RESULT_NEXT_GROUP;
    } else if ((status == UCS_ERR_NO_RESOURCE) &&
               uct_rc_tm_iface_rndv_ops_exhausted(uct_rc_tm_ep_iface(ep))) {
        /* Waits for a FIN, which no send completion of this endpoint
         * announces: stays scheduled, and the next progress that finds
         * anything (the FIN) dispatches it again */
        return UCS_ARBITER_CB_RESULT_STOP;
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
    ucs_status_t status;

    UCT_RC_TM_EP_FLUSH_CHECK_FLAGS(flags);

    if (ep->status != UCS_OK) {
        return ep->status;
    }

    /* Queued requests first: a flush retried from a pending callback
     * (in_pending) waits only for the sends already posted */
    if (!(flags & UCT_FLUSH_FLAG_CANCEL) &&
        !ucs_arbiter_group_is_empty(&ep->arb_group) && !ep->in_pending) {
        return UCS_ERR_NO_RESOURCE;
    }

    if (ep->acked_sn == ep->posted_sn) {
        return UCS_OK;
    }

    status = uct_rc_tm_ep_ask_completion(ep);
    if (status != UCS_OK) {
        return status;
    }

    if (comp != NULL) {
        op = uct_rc_tm_iface_get_tx_op(uct_rc_tm_ep_iface(ep));
        if (op == NULL) {
            return UCS_ERR_NO_RESOURCE;
        }
        op->handler = uct_rc_tm_tx_op_done;   /* a flush record: no buffer */
        op->comp    = comp;
        op->sn      = ep->posted_sn;
        ucs_queue_push(&ep->tx_ops, &op->queue);
    }
    return UCS_INPROGRESS;
}

/* Is the peer still there?  A send makes the device watch it: a zero-length
 * RDMA WRITE, as UCX's rc_mlx5 checks (uct_rc_mlx5_base_ep_post_check),
 * which reaches no buffer of the peer's (no key is checked) and none of its
 * SRQ: a message would land on its receive-only QP, where a FIN might be
 * counted as unexpected (rc_tm_iface.h).  A dead peer fails the connection
 * (and so its operations, rendezvous sends waiting for FIN included) and
 * reaches the error handler; nothing is reported for a live one. */
ucs_status_t uct_rc_tm_ep_check(uct_ep_h tl_ep, unsigned flags,
                                uct_completion_t *comp)
{
    uct_rc_tm_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);
    ucs_status_t status;

    UCT_RC_TM_EP_CHECK_PARAMS(flags, comp);

    if (ep->status != UCS_OK) {
        return UCS_OK;      /* failed already */
    }

    /* A probe even with sends in flight, as UCX's rc posts one: the device
     * may have completed them (the peer took them) before the peer died.
     * Without credits the send queue is full, and its completions tell the
     * peer's state (rc: UCT_RC_CHECK_TXQP_RET) */
    status = uct_rc_tm_ep_post_check(ep);
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

int uct_rc_tm_ep_is_connected_to(uct_ep_h tl_ep,
                                 const uct_device_addr_t *dev_addr,
                                 const uct_iface_addr_t *iface_addr,
                                 const uct_ep_addr_t *ep_addr)
{
    uct_rc_tm_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_tm_ep_t);

    return ep->connected && (dev_addr != NULL) &&
           tm_dev_conn_is_connected(ep->conn, dev_addr, ep_addr,
                                    (ep_addr == NULL) ? iface_addr : NULL);
}

/* Both QPs of the connection lead to the endpoint: the peer's messages
 * come on the receive-only one, FINs of the peer's NIC on the other */
static ucs_status_t uct_rc_tm_ep_add_qp(uct_rc_tm_ep_t *ep, uint32_t qp_num)
{
    uct_rc_tm_iface_t *iface = uct_rc_tm_ep_iface(ep);
    khiter_t it;
    int ret;

    it = kh_put(uct_rc_tm_qpn, &iface->eps, qp_num, &ret);
    if (ret <= 0) {
        ucs_error("rc_tm: qp number 0x%x is already in use", qp_num);
        return UCS_ERR_ALREADY_EXISTS;
    }
    kh_value(&iface->eps, it) = ep;
    return UCS_OK;
}

static void uct_rc_tm_ep_del_qp(uct_rc_tm_iface_t *iface, uct_rc_tm_ep_t *ep,
                                uint32_t qp_num)
{
    khiter_t it = kh_get(uct_rc_tm_qpn, &iface->eps, qp_num);

    if ((it != kh_end(&iface->eps)) && (kh_value(&iface->eps, it) == ep)) {
        kh_del(uct_rc_tm_qpn, &iface->eps, it);
    }
}

static ucs_status_t uct_rc_tm_ep_setup(uct_rc_tm_ep_t *ep,
                                       uct_rc_tm_iface_t *iface,
                                       tm_dev_conn_t *conn)
{
    ucs_status_t status;

    ep->conn      = conn;
    ep->qp_num    = tm_dev_conn_qp_num(conn);
    ep->rx_qp_num = tm_dev_conn_rx_qp_num(conn);
    ep->connected  = 0;
    ep->passive    = 0;
    ep->fence      = 0;
    ep->in_pending = 0;
    ep->available  = iface->md->caps.max_send_wr;
    ep->unsignaled = 0;
    ep->posted_sn  = 0;
    ep->acked_sn   = 0;
    ep->status     = UCS_OK;
    ucs_queue_head_init(&ep->tx_ops);
    ucs_queue_head_init(&ep->ctl_queue);
    ucs_arbiter_group_init(&ep->arb_group);

    status = uct_rc_tm_ep_add_qp(ep, ep->qp_num);
    if (status != UCS_OK) {
        return status;
    }
    status = uct_rc_tm_ep_add_qp(ep, ep->rx_qp_num);
    if (status != UCS_OK) {
        uct_rc_tm_ep_del_qp(iface, ep, ep->qp_num);
    }
    return status;
}

/*
 * The endpoint leaves the interface.  Its connection is stopped first (or
 * destroyed), so that the device touches none of its buffers any more; then
 * every operation still outstanding completes with UCS_ERR_CANCELED: sends,
 * reads, flushes, rendezvous sends waiting for a FIN, and reads of
 * rendezvous receives (whose receives complete with it), so that nothing
 * completes later and nothing is left owed.  At interface close (notify
 * 0) nothing is called back: the user has closed everything it owns.
 * Returns the send CQ entries its sends still hold: their completions,
 * flushed, find no endpoint.
 */
static unsigned uct_rc_tm_ep_teardown(uct_rc_tm_ep_t *ep,
                                      uct_rc_tm_iface_t *iface, int notify)
{
    unsigned cq_entries = ep->posted_sn - ep->acked_sn;
    uct_rc_tm_tx_op_t *op;

    uct_rc_tm_ep_del_qp(iface, ep, ep->qp_num);
    uct_rc_tm_ep_del_qp(iface, ep, ep->rx_qp_num);

    uct_rc_tm_ep_pending_purge(&ep->super.super, NULL, NULL);
    ucs_arbiter_group_cleanup(&ep->arb_group);

    ep->acked_sn = ep->posted_sn;
    if (notify) {
        uct_rc_tm_ep_complete_ops(ep, UINT64_MAX, UCS_ERR_CANCELED);
        uct_rc_tm_tag_ctl_purge(ep, UCS_ERR_CANCELED);
        uct_rc_tm_tag_rndv_ops_purge(iface, ep, UCS_ERR_CANCELED);
        return cq_entries;
    }

    ucs_queue_for_each_extract(op, &ep->tx_ops, queue, 1) {
        uct_rc_tm_tx_op_release(op);
    }
    if (!ucs_queue_is_empty(&ep->ctl_queue)) {
        ucs_list_del(&ep->ctl_link);
        ucs_queue_for_each_extract(op, &ep->ctl_queue, queue, 1) {
            uct_rc_tm_tx_op_release(op);
        }
    }
    uct_rc_tm_tag_rndv_ops_purge(iface, ep, UCS_OK);
    return cq_entries;
}

/*
 * A connection whose endpoint is gone, in the error state, until every
 * completion it left on the CQs was polled: destroying a QP drops its
 * unpolled completions (rdma-core's mlx5, __mlx5_cq_clean), which would
 * lose the messages the NIC took for it (and their buffers, and the list
 * slots of the receives they matched).  A NIC may still write some after
 * the state change.  The sending QP says when it wrote its last with
 * IBV_EVENT_QP_LAST_WQE_REACHED, which UCX's rc_mlx5 waits for.  The
 * receive-only QP may never say so (no source says that firmware raises it
 * for a QP without a send queue; UCX destroys its TM QP without waiting):
 * what the transport knows the NIC may still owe it, the final completions
 * of the messages it matched there or on a QP not known (a MATCH without
 * a packet names none), is waited for instead.  So a connection
 * goes once its sending QP reported its last WQE, no matched receive
 * awaits a final completion from it, and both CQs were then found empty.
 * The send CQ entries of its flushed sends are given out again only then,
 * as UCX's rc_mlx5 keeps its CQ credits until its QP cleanup.
 */
typedef struct uct_rc_tm_closing_conn {
    ucs_list_link_t           list;     /* in iface->closing */
    tm_dev_conn_t             *conn;
    unsigned                  cq_entries;
    int                       drained;  /* drained before the CQ polls that
                                           led here */
} uct_rc_tm_closing_conn_t;

/* A receive matched on the closing connection's receive-only QP awaits its
 * final completion, unless that QP failed (a read NAKed, the peer gone):
 * then none comes, and the receives matched there fail.  So does one whose
 * QP is not known (a MATCH without a packet): it may be this QP's */
static int uct_rc_tm_closing_rx_awaits(uct_rc_tm_iface_t *iface,
                                       tm_dev_conn_t *conn)
{
    uint32_t rx_qp_num = tm_dev_conn_rx_qp_num(conn);

    if (!uct_rc_tm_tag_awaits_final(iface, rx_qp_num)) {
        return 0;
    }
    if (!tm_dev_conn_rx_failed(conn)) {
        return 1;
    }
    ucs_error("rc_tm: receive-only qp 0x%x of a closing connection is in "
              "error: the device's rendezvous reads there failed",
              rx_qp_num);
    uct_rc_tm_tag_fail_matched(iface, rx_qp_num, IBV_WC_GENERAL_ERR);
    return 0;
}

static int uct_rc_tm_closing_drained(uct_rc_tm_iface_t *iface,
                                     tm_dev_conn_t *conn)
{
    /* the receive-only QP first: its check fails what its error strands,
     * the receives of unknown QP included, which would else hold this */
    return tm_dev_conn_send_drained(conn) &&
           !uct_rc_tm_closing_rx_awaits(iface, conn) &&
           !uct_rc_tm_tag_awaits_final(iface, tm_dev_conn_qp_num(conn));
}

static void uct_rc_tm_closing_destroy(uct_rc_tm_iface_t *iface,
                                      uct_rc_tm_closing_conn_t *closing)
{
    ucs_list_del(&closing->list);
    tm_dev_destroy_conn(closing->conn);
    iface->tx.available += closing->cq_entries;
    ucs_free(closing);
}

/* Both CQs were just found empty: the connections drained before those
 * polls have nothing left on them, unless a MATCH those polls found makes
 * one wait again */
void uct_rc_tm_iface_reap_closing(uct_rc_tm_iface_t *iface)
{
    uct_rc_tm_closing_conn_t *closing, *tmp;
    int destroyed = 0;

    ucs_list_for_each_safe(closing, tmp, &iface->closing, list) {
        if (closing->drained &&
            uct_rc_tm_closing_drained(iface, closing->conn)) {
            uct_rc_tm_closing_destroy(iface, closing);
            destroyed = 1;
        }
    }

    tm_dev_progress_events(iface->dev);
    ucs_list_for_each(closing, &iface->closing, list) {
        closing->drained = uct_rc_tm_closing_drained(iface, closing->conn);
    }

    if (destroyed) {
        ucs_arbiter_dispatch(&iface->arbiter, 1,
                             uct_rc_tm_ep_process_pending, NULL);
    }
}

/* The interface closes: what the connections still had coming goes with
 * its queues */
void uct_rc_tm_iface_destroy_closing(uct_rc_tm_iface_t *iface)
{
    uct_rc_tm_closing_conn_t *closing, *tmp;

    ucs_list_for_each_safe(closing, tmp, &iface->closing, list) {
        if (!tm_dev_conn_send_drained(closing->conn)) {
            ucs_debug("rc_tm: qp 0x%x destroyed before its last WQE",
                      tm_dev_conn_qp_num(closing->conn));
        }
        uct_rc_tm_closing_destroy(iface, closing);
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
    uct_rc_tm_iface_t *iface = uct_rc_tm_ep_iface(ep);

    iface->tx.available += uct_rc_tm_ep_teardown(ep, iface, 0);
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
    (void)uct_rc_tm_ep_teardown(self, iface, 0); /* nothing was sent */
err_destroy_conn:
    tm_dev_destroy_conn(self->conn);
    return status;
}

static UCS_CLASS_CLEANUP_FUNC(uct_rc_tm_ep_t)
{
    uct_rc_tm_iface_t *iface = uct_rc_tm_ep_iface(self);
    uct_rc_tm_closing_conn_t *closing;
    unsigned cq_entries;
    int ret;

    if (!self->connected) {
        /* Never out of INIT (or its connect failed): nothing was posted or
         * taken for it, and no event would say so (none is documented for
         * a QP that never left INIT) */
        tm_dev_destroy_conn(self->conn);
        iface->tx.available += uct_rc_tm_ep_teardown(self, iface, 1);
        return;
    }

    /* Stopped before its sends complete as canceled: the device reads none
     * of their buffers any more */
    ret     = tm_dev_conn_set_error(self->conn);
    closing = (ret == 0) ? ucs_malloc(sizeof(*closing), "rc_tm closing conn") :
                           NULL;
    if (closing == NULL) {
        ucs_error("rc_tm: qp 0x%x destroyed at once (%s): its completions "
                  "not yet polled are dropped", self->qp_num,
                  (ret != 0) ? strerror(ret) : "no memory");
        tm_dev_destroy_conn(self->conn);
    }

    cq_entries = uct_rc_tm_ep_teardown(self, iface, 1);
    if (closing == NULL) {
        iface->tx.available += cq_entries;
        return;
    }
    closing->conn       = self->conn;
    closing->cq_entries = cq_entries;
    closing->drained    = 0;
    ucs_list_add_tail(&iface->closing, &closing->list);
}

UCS_CLASS_DEFINE(uct_rc_tm_ep_t, uct_base_ep_t);
UCS_CLASS_DEFINE_NEW_FUNC(uct_rc_tm_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DEFINE_DELETE_FUNC(uct_rc_tm_ep_t, uct_ep_t);
