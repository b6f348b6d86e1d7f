/*
 * rc_tm interface progress: the receive CQ (untagged messages, active
 * message delivery, tag offload completions, failed completions by QP) and
 * the send CQ, then the control messages and pending requests that waited
 * for send credits.
 */
#include "rc_tm_iface.h"
#include "rc_tm_ep.h"

#include <ucs/debug/log.h>

#include <errno.h>

/* A NO_TAG message that is no active message: the transport's own (a FIN
 * from the peer's software), or malformed */
static UCS_F_NOINLINE void
uct_rc_tm_iface_handle_ctl(uct_rc_tm_iface_t *iface, const tm_dev_wc_t *wc,
                           const struct ibv_tmh *tmh)
{
    const uct_rc_tm_fin_msg_t *fin = (const uct_rc_tm_fin_msg_t*)tmh;
    uint32_t id                    = be32toh(tmh->app_ctx);

    UCS_STATIC_ASSERT(UCT_RC_TM_CTL_FIN >= UCT_AM_ID_MAX);
    if ((id == UCT_RC_TM_CTL_FIN) && (wc->byte_len >= UCT_RC_TM_FIN_MSG_LEN)) {
        uct_rc_tm_tag_handle_fin(iface, wc->qp_num, be32toh(fin->op_id));
        return;
    }

    ucs_error("rc_tm: dropped malformed active message (id %u length %u)",
              id, wc->byte_len);
}

static ucs_status_t uct_rc_tm_iface_invoke_am(uct_rc_tm_iface_t *iface,
                                              const tm_dev_wc_t *wc,
                                              struct ibv_tmh *tmh)
{
    uint32_t am_id  = be32toh(tmh->app_ctx);
    uint32_t length = wc->byte_len;
    void *data      = tmh + 1;

    /* One branch for AM ids and the transport's control ids past them */
    if (ucs_unlikely(am_id >= UCT_AM_ID_MAX)) {
        uct_rc_tm_iface_handle_ctl(iface, wc, tmh);
        return UCS_OK;
    }

    uct_rc_tm_iface_set_release_desc(iface, data);
    return uct_iface_invoke_am(&iface->super, am_id, data,
                               length - UCT_RC_TM_TMH_LEN,
                               UCT_CB_PARAM_FLAG_DESC);
}

static void uct_rc_tm_iface_handle_rx(uct_rc_tm_iface_t *iface,
                                      const tm_dev_wc_t *wc)
{
    void *elem = (void*)(uintptr_t)wc->wr_id;
    struct ibv_tmh *tmh = UCS_PTR_BYTE_OFFSET(elem, iface->rx.msg_offset);
    ucs_status_t status;

    --iface->rx.posted;

    if (ucs_unlikely(wc->byte_len < UCT_RC_TM_TMH_LEN)) {
        ucs_error("rc_tm: dropped %u-byte message, shorter than its header",
                  wc->byte_len);
        status = UCS_OK;
    } else if (tmh->opcode == IBV_TMH_NO_TAG) {
        /* By the header, not the opcode: a NIC may report FIN as NO_TAG */
        status = uct_rc_tm_iface_invoke_am(iface, wc, tmh);
    } else {
        status = uct_rc_tm_tag_handle_unexp(iface, wc, tmh);
    }

    if (status != UCS_INPROGRESS) {
        ucs_mpool_put_inline(elem);
    }
}


/* ----- progress ----- */

/* The endpoint of a connection, or the passive one standing for a peer's
 * connection to our SRQ (created on first use) */
uct_rc_tm_ep_t *uct_rc_tm_iface_lookup_ep(uct_rc_tm_iface_t *iface,
                                          uint32_t qp_num)
{
    khiter_t it = kh_get(uct_rc_tm_qpn, &iface->eps, qp_num);

    if (it != kh_end(&iface->eps)) {
        return kh_value(&iface->eps, it);
    }
    return uct_rc_tm_iface_passive_ep(iface, qp_num);
}

static void uct_rc_tm_iface_handle_send_wc(uct_rc_tm_iface_t *iface,
                                           const tm_dev_wc_t *wc)
{
    khiter_t it = kh_get(uct_rc_tm_qpn, &iface->eps, wc->qp_num);

    if (ucs_unlikely(it == kh_end(&iface->eps))) {
        /* The endpoint was destroyed with this send in flight; it returned
         * the send's credit then */
        return;
    }

    uct_rc_tm_ep_handle_send_wc(kh_value(&iface->eps, it), wc);
}

/*
 * A responder error on a QP of the SRQ: mlx5 gives the wr_id of the SRQ
 * WQE its CQE names and frees that WQE, whatever the syndrome
 * (providers/mlx5/cq.c mlx5_parse_cqe, MLX5_CQE_RESP_ERR: srq->wrid[],
 * mlx5_free_srq_wqe): the buffer is no longer posted, and is ours again.
 */
static void uct_rc_tm_iface_rx_error_release(uct_rc_tm_iface_t *iface,
                                             const tm_dev_wc_t *wc)
{
    void *elem = (void*)(uintptr_t)wc->wr_id;

    --iface->rx.posted;
    ucs_mpool_put_inline(elem);
}

/*
 * A failed completion on the receive CQ that is not the device's tag
 * matching (those carry a TM opcode or flags): mlx5 reports every error
 * with opcode 0, so the wr_id tells what failed.  A send of ours (a passive
 * connection's: they complete here) carries UCT_RC_TM_WR_ID_SEND.  Any
 * other is the receive side of a QP on the SRQ: a responder error names
 * the SRQ buffer it took (for a tagged message that buffer means nothing
 * else), and the NIC's own rendezvous reads on the receive-only QP name
 * none (0).  The QP is in error: the connection fails.
 */
static UCS_F_NOINLINE void
uct_rc_tm_iface_handle_failed_wc(uct_rc_tm_iface_t *iface,
                                 const tm_dev_wc_t *wc)
{
    khiter_t it = kh_get(uct_rc_tm_qpn, &iface->eps, wc->qp_num);
    uct_rc_tm_ep_t *ep;

    ep = (it == kh_end(&iface->eps)) ? NULL : kh_value(&iface->eps, it);
    if (wc->wr_id & UCT_RC_TM_WR_ID_SEND) {
        if (ep != NULL) {
            uct_rc_tm_ep_handle_send_wc(ep, wc);
        }
        return;
    }

    /* A QP of ours (an endpoint's, or one a peer connected to the SRQ) */
    ucs_log((wc->status == IBV_WC_WR_FLUSH_ERR) ? UCS_LOG_LEVEL_DEBUG :
            UCS_LOG_LEVEL_ERROR, "rc_tm: receive side of qp 0x%x failed: %s",
            wc->qp_num, ibv_wc_status_str(wc->status));
    if (wc->wr_id != 0) {
        uct_rc_tm_iface_rx_error_release(iface, wc);
    }
    uct_rc_tm_tag_fail_matched(iface, wc->qp_num, wc->status);
    if (wc->status == IBV_WC_LOC_LEN_ERR) {
        /* The message may have been too long for a receive the device had
         * matched, and mlx5 names none: find it */
        ++iface->tm.len_errs;
        uct_rc_tm_tag_find_lost(iface);
        uct_rc_tm_tag_resolve_del_failed(iface);
    }
    if (ep != NULL) {
        uct_rc_tm_ep_set_failed(ep, wc->status);
    }
}

/*
 * The device's rendezvous reads and FINs are the receive-only QP's sends,
 * and mlx5's poll cannot parse their requester CQEs (no send queue): they
 * go to a CQ never polled (tm_dev_conn_rx_failed).  A receive the device
 * matched waits for its final completion; if the QP that took it is in
 * error, that never comes: the receives matched there fail, with those of
 * unknown QP (uct_rc_tm_tag_fail_matched), and so does the connection.
 * Why the QP failed is not known (a NAKed read, a peer or link gone):
 * UCS_ERR_IO_ERROR.
 */
static void uct_rc_tm_iface_rx_qp_failed(uct_rc_tm_iface_t *iface,
                                         uct_rc_tm_ep_t *ep, uint32_t qp_num)
{
    ucs_error("rc_tm: receive-only qp 0x%x is in error: the device's "
              "rendezvous reads there failed", qp_num);
    uct_rc_tm_tag_fail_matched(iface, qp_num, IBV_WC_GENERAL_ERR);
    uct_rc_tm_ep_set_failed(ep, IBV_WC_GENERAL_ERR);
}

/* Whether a receive of unknown QP (its MATCH came without a packet) has
 * waited since the last check: only then is every QP asked, not for each
 * rendezvous still under way.  Marks the others. */
static int uct_rc_tm_iface_unknown_qp_waited(uct_rc_tm_iface_t *iface)
{
    int waited = 0;
    uct_rc_tm_recv_t *recv;

    ucs_list_for_each(recv, &iface->tm.matched, sw_list) {
        if (recv->rx_qp_num == 0) {
            waited       |= !!(recv->flags & UCT_RC_TM_RECV_QP_WAITED);
            recv->flags  |= UCT_RC_TM_RECV_QP_WAITED;
        }
    }
    return waited;
}

/* A receive of unknown QP may be any connection's: each endpoint's
 * receive-only QP is asked (a query each), until one in error fails them */
static void uct_rc_tm_iface_check_all_rx_qps(uct_rc_tm_iface_t *iface)
{
    uct_rc_tm_ep_t *ep;
    uint32_t qp_num;

    kh_foreach(&iface->eps, qp_num, ep, {
        /* every endpoint is there under both its QP numbers */
        if ((qp_num == ep->rx_qp_num) && (ep->conn != NULL) &&
            tm_dev_conn_rx_failed(ep->conn)) {
            uct_rc_tm_iface_rx_qp_failed(iface, ep, qp_num);
            return;
        }
    });
}

static UCS_F_NOINLINE void
uct_rc_tm_iface_check_rx_qps(uct_rc_tm_iface_t *iface)
{
    uint32_t checked = UINT32_MAX;
    uct_rc_tm_recv_t *recv;
    uct_rc_tm_ep_t *ep;
    khiter_t it;

again:
    ucs_list_for_each(recv, &iface->tm.matched, sw_list) {
        if ((recv->rx_qp_num == checked) || (recv->rx_qp_num == 0)) {
            continue;
        }
        checked = recv->rx_qp_num;
        it      = kh_get(uct_rc_tm_qpn, &iface->eps, checked);
        if (it == kh_end(&iface->eps)) {
            continue;           /* an accepted QP: its failure is polled */
        }
        ep = kh_value(&iface->eps, it);
        if ((ep->conn != NULL) && tm_dev_conn_rx_failed(ep->conn)) {
            uct_rc_tm_iface_rx_qp_failed(iface, ep, checked);
            goto again;
        }
    }

    if (uct_rc_tm_iface_unknown_qp_waited(iface)) {
        uct_rc_tm_iface_check_all_rx_qps(iface);
    }
}

/* Every connection of the interface fails: what was lost (a completion,
 * or every later one of a CQ in error) concerned some of them, and no one
 * can tell which.  Said once; endpoints created since fail as well. */
static UCS_F_NOINLINE void
uct_rc_tm_iface_fail_all(uct_rc_tm_iface_t *iface, ucs_status_t status,
                         const char *why)
{
    uct_rc_tm_ep_t *ep;

    if (!iface->cq_failed) {
        iface->cq_failed = 1;
        ucs_error("rc_tm: %s: %s; every connection of the interface fails "
                  "(%s)", iface->dev->name, why, ucs_status_string(status));
    }
    kh_foreach_value(&iface->eps, ep, {
        uct_rc_tm_ep_fail(ep, status);
    });
}

/* A poll failed.  A completion the provider could not parse (EBADMSG) is
 * lost, and with it what it said of some connection (a message, a list
 * operation, a send): every connection fails, each time; later
 * completions still count.  No other error is known of mlx5's poll (an
 * overrun CQ does not fail it: uct_rc_tm_iface_check_events). */
static UCS_F_NOINLINE void
uct_rc_tm_iface_poll_failed(uct_rc_tm_iface_t *iface, const char *which,
                            int err)
{
    uct_rc_tm_ep_t *ep;

    if (err != EBADMSG) {
        ucs_error("rc_tm: %s completion queue of %s: poll failed: %s",
                  which, iface->dev->name, strerror(err));
        uct_rc_tm_iface_fail_all(iface, UCS_ERR_IO_ERROR,
                                 "a completion queue failed");
        return;
    }
    ucs_error("rc_tm: %s completion queue of %s: the provider lost a "
              "completion it could not parse; every connection of the "
              "interface fails", which, iface->dev->name);
    kh_foreach_value(&iface->eps, ep, {
        uct_rc_tm_ep_set_failed(ep, IBV_WC_GENERAL_ERR);
    });
}

/*
 * Now and then, the device's asynchronous events: a CQ in error (on mlx5
 * an overrun one delivers nothing more, and its polls do not say so: the
 * kernel's IBV_EVENT_CQ_ERR is the only sign), a device that failed
 * (DEVICE_FATAL), a port set anew, the last WQE of closing connections.
 * Lost completions would leave every request waiting forever: the
 * interface's connections fail instead, as UCX's ib device does on
 * DEVICE_FATAL (uct_ib_device_async_event_dispatch_fatal, UCX 1.18).
 * UCX only logs a CQ's error and PORT_ERR: a port's connections fail by
 * their own completions.
 */
static UCS_F_NOINLINE void
uct_rc_tm_iface_check_events(uct_rc_tm_iface_t *iface)
{
    iface->events_countdown = UCT_RC_TM_EVENTS_INTERVAL;
    tm_dev_progress_events(iface->dev);
    if (ucs_unlikely(!ucs_list_is_empty(&iface->tm.matched))) {
        uct_rc_tm_iface_check_rx_qps(iface);
    }
    if (ucs_unlikely(tm_dev_failed(iface->dev))) {
        uct_rc_tm_iface_fail_all(iface, UCS_ERR_IO_ERROR,
                                 "the device failed (IBV_EVENT_DEVICE_FATAL)");
    } else if (ucs_unlikely(tm_dev_cq_failed(iface->recv_cq))) {
        uct_rc_tm_iface_fail_all(iface, UCS_ERR_IO_ERROR,
                                 "the receive completion queue is in error "
                                 "(IBV_EVENT_CQ_ERR: it overran?) and "
                                 "delivers nothing more");
    } else if (ucs_unlikely(tm_dev_cq_failed(iface->send_cq))) {
        uct_rc_tm_iface_fail_all(iface, UCS_ERR_IO_ERROR,
                                 "the send completion queue is in error "
                                 "(IBV_EVENT_CQ_ERR: it overran?) and "
                                 "delivers nothing more");
    }
}

/* What a receive CQ completion is, by its TM opcode and flags (mlx5 reports
 * a canceled software rendezvous as IBV_WC_RECV with MATCH | DATA_VALID,
 * and an unexpected message as IBV_WC_TM_RECV with neither) */
static UCS_F_ALWAYS_INLINE void
uct_rc_tm_iface_dispatch_recv_wc(uct_rc_tm_iface_t *iface,
                                 const tm_dev_wc_t *wc)
{
    if (ucs_unlikely(wc->wc_flags & (IBV_WC_TM_MATCH |
                                     IBV_WC_TM_DATA_VALID))) {
        uct_rc_tm_tag_handle_wc(iface, wc);
    } else if (ucs_likely((wc->opcode == IBV_WC_RECV) ||
                          (wc->opcode == IBV_WC_TM_NO_TAG) ||
                          (wc->opcode == IBV_WC_TM_RECV)) &&
               ucs_likely(wc->status == IBV_WC_SUCCESS)) {
        uct_rc_tm_iface_handle_rx(iface, wc);
    } else if ((wc->opcode == IBV_WC_TM_ADD) || (wc->opcode == IBV_WC_TM_DEL) ||
               (wc->opcode == IBV_WC_TM_SYNC)) {
        uct_rc_tm_tag_handle_wc(iface, wc);
    } else if (wc->status == IBV_WC_SUCCESS) {
        /* Sends of passive connections complete here */
        uct_rc_tm_iface_handle_send_wc(iface, wc);
    } else {
        uct_rc_tm_iface_handle_failed_wc(iface, wc);
    }
}

unsigned uct_rc_tm_iface_progress(uct_iface_h tl_iface)
{
    uct_rc_tm_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_tm_iface_t);
    tm_dev_wc_t wc[UCT_RC_TM_POLL_BATCH];
    unsigned count = 0;
    int cqs_empty, i, n;

    if (ucs_unlikely(--iface->events_countdown == 0)) {
        uct_rc_tm_iface_check_events(iface);
    }

    n = tm_dev_poll_cq(iface->recv_cq, UCT_RC_TM_POLL_BATCH, wc);
    cqs_empty = (n == 0);
    if (n > 0) {
        uct_rc_tm_tag_batch_start(iface);
        for (i = 0; i < n; ++i) {
            uct_rc_tm_iface_dispatch_recv_wc(iface, &wc[i]);
        }
        uct_rc_tm_tag_batch_end(iface);
        count += n;
        if (iface->rx.depth - iface->rx.posted >= iface->rx.refill) {
            uct_rc_tm_iface_post_rx(iface);
        }
    } else if (ucs_unlikely(n < 0)) {
        uct_rc_tm_iface_poll_failed(iface, "receive", -n);
    } else if (ucs_unlikely(iface->rx.posted == 0)) {
        /* The user held every buffer (UCX_RC_TM_RX_MAX_BUFS): no message
         * can arrive to trigger the refill, so take back what was returned */
        uct_rc_tm_iface_post_rx(iface);
    }

    if (ucs_unlikely(!ucs_queue_is_empty(&iface->tm.cancel_queue))) {
        count += uct_rc_tm_tag_progress(iface);
    }

    /* Send completions only when nothing was received, or sends wait for
     * them, as UCX's rc transports do: a progress call that delivered
     * messages has done its share (and the software NIC's send side runs
     * in this poll).  None while no send is outstanding: each holds a
     * send CQ entry until a completion covers it, and a closing
     * connection its entries until it is reaped. */
    if (((count > 0) && ucs_arbiter_is_empty(&iface->arbiter) &&
         ucs_list_is_empty(&iface->tx.ctl_eps)) ||
        ((iface->tx.available == iface->tx.depth) &&
         ucs_list_is_empty(&iface->closing))) {
        goto out;
    }

    n = tm_dev_poll_cq(iface->send_cq, UCT_RC_TM_POLL_BATCH, wc);
    for (i = 0; i < n; ++i) {
        uct_rc_tm_iface_handle_send_wc(iface, &wc[i]);
    }
    if (ucs_unlikely(n < 0)) {
        uct_rc_tm_iface_poll_failed(iface, "send", -n);
    } else if (n > 0) {
        count += n;
    } else if (ucs_unlikely(cqs_empty && !ucs_list_is_empty(&iface->closing))) {
        uct_rc_tm_iface_reap_closing(iface);
    }

out:
    if (count > 0) {
        /* Credits came back: control messages waiting for them go first,
         * then pending requests */
        if (ucs_unlikely(!ucs_list_is_empty(&iface->tx.ctl_eps))) {
            uct_rc_tm_tag_ctl_progress(iface);
        }
        ucs_arbiter_dispatch(&iface->arbiter, 1, uct_rc_tm_ep_process_pending,
                             NULL);
    }
    return count;
}
