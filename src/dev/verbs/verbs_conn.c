/*
 * Verbs backend: RC connections attached to the tag-matching SRQ.
 *
 * A connection is two RC QPs whose receives go to the TM-SRQ (and so
 * complete on the SRQ's CQ), as UCX's rc_mlx5 makes them: one sends (its
 * sends complete on the caller's send CQ); the other has no send queue, and
 * the peer's sending QP connects to it, because the kernel enables the
 * NIC's rendezvous (the NIC's read and FIN go out on that QP) only on a QP
 * attached to a TM-SRQ without a send queue.  The QPs are taken to INIT
 * when created, so that their address can be handed out; connect() takes
 * them to RTR and RTS from the peer's address.
 *
 * The NIC reads rendezvous data on the receiver's QP, so both directions of
 * RDMA read are enabled: max_rd_atomic (as initiator) and
 * max_dest_rd_atomic (as responder).
 */
#include "verbs_dev.h"

#include <softnic/softnic.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static tm_verbs_dev_t *tm_verbs_conn_dev(tm_verbs_conn_t *conn)
{
    return tm_verbs_dev(conn->super.dev);
}

/* Any starting PSN works; derive one from the QP number so that it differs
 * between QPs without global random state */
static uint32_t tm_verbs_psn(uint32_t qp_num)
{
    return (qp_num * 2654435761u) & 0xffffff;
}

static int tm_verbs_qp_init(tm_verbs_dev_t *dev, struct ibv_qp *qp)
{
    struct ibv_qp_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state        = IBV_QPS_INIT;
    attr.pkey_index      = dev->pkey_index;   /* tm_verbs_pkey_init */
    attr.port_num        = dev->port_num;
    attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_WRITE;

    return dev->lib->modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                          IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

/* One RC QP of a connection, in INIT.  max_send_wr 0 makes the receive-only
 * QP, whose sends are the NIC's own (rendezvous reads, FINs): they complete
 * nowhere, but a failure or flush of one does, on its send CQ, which is the
 * SRQ's rx_send_cq, never polled (mlx5's poll crashes on a requester CQE of
 * a QP without a send queue); its failure is read from its state
 * (tm_dev_conn_rx_failed) */
static int tm_verbs_conn_qp_create(tm_verbs_dev_t *dev, tm_verbs_srq_t *srq,
                                   tm_dev_cq_t *send_cq, uint32_t max_send_wr,
                                   tm_verbs_conn_t *conn, struct ibv_qp **qp_p)
{
    struct ibv_qp_init_attr attr;
    struct ibv_qp *qp;
    int ret;

    memset(&attr, 0, sizeof(attr));
    attr.send_cq             = ibv_cq_ex_to_cq(send_cq->cq);
    attr.recv_cq             = ibv_cq_ex_to_cq(srq->cq->cq);
    attr.srq                 = srq->super.srq;
    attr.cap.max_send_wr     = max_send_wr;
    attr.cap.max_send_sge    = max_send_wr ? dev->lim.max_send_sge : 0;
    attr.cap.max_inline_data = max_send_wr ? dev->lim.max_inline : 0;
    attr.qp_type             = IBV_QPT_RC;
    attr.sq_sig_all          = 0;   /* callers ask with IBV_SEND_SIGNALED */
    attr.qp_context          = conn;  /* for its asynchronous events */

    errno = 0;
    qp    = dev->lib->create_qp(dev->pd, &attr);
    if (qp == NULL) {
        ret = (errno != 0) ? errno : ENOMEM;
        tm_dev_debug("verbs: %s: ibv_create_qp(RC, %u send WRs, inline %u) "
                     "failed: %s", dev->super.name, max_send_wr,
                     attr.cap.max_inline_data, strerror(ret));
        return ret;
    }

    ret = tm_verbs_qp_init(dev, qp);
    if (ret != 0) {
        tm_dev_debug("verbs: %s: QP 0x%x to INIT failed: %s", dev->super.name,
                     qp->qp_num, strerror(ret));
        dev->lib->destroy_qp(qp);
        return ret;
    }

    *qp_p = qp;
    return 0;
}

int tm_dev_create_conn(tm_dev_t *tdev, tm_dev_srq_t *tsrq,
                       tm_dev_cq_t *send_cq, tm_dev_conn_t **conn_p)
{
    tm_verbs_dev_t *dev = tm_verbs_dev(tdev);
    tm_verbs_srq_t *srq = (tm_verbs_srq_t*)tsrq;
    tm_verbs_conn_t *conn;
    int ret;

    conn = calloc(1, sizeof(*conn));
    if (conn == NULL) {
        return ENOMEM;
    }

    ret = tm_verbs_conn_qp_create(dev, srq, send_cq, dev->lim.max_send_wr,
                                  conn, &conn->super.qp);
    if (ret != 0) {
        goto err_free;
    }
    ret = tm_verbs_conn_qp_create(dev, srq, srq->rx_send_cq, 0, conn,
                                  &conn->super.rx_qp);
    if (ret != 0) {
        goto err_destroy_qp;
    }

    conn->super.dev = tdev;
    *conn_p         = &conn->super;
    return 0;

err_destroy_qp:
    dev->lib->destroy_qp(conn->super.qp);
err_free:
    free(conn);
    return ret;
}

/* An RC QP on srq for the probe, asking max_inline bytes of inline data;
 * the provider writes what it granted back into attr */
static struct ibv_qp *tm_verbs_probe_qp(tm_verbs_dev_t *dev,
                                        struct ibv_cq_ex *cq,
                                        struct ibv_srq *srq,
                                        uint32_t max_inline,
                                        struct ibv_qp_init_attr *attr)
{
    memset(attr, 0, sizeof(*attr));
    attr->send_cq             = ibv_cq_ex_to_cq(cq);
    attr->recv_cq             = ibv_cq_ex_to_cq(cq);
    attr->srq                 = srq;
    attr->cap.max_send_wr     = 1;
    attr->cap.max_send_sge    = dev->lim.max_send_sge;
    attr->cap.max_inline_data = max_inline;
    attr->qp_type             = IBV_QPT_RC;
    errno                     = 0;
    return dev->lib->create_qp(dev->pd, attr);
}

int tm_verbs_probe_queues(tm_verbs_dev_t *dev)
{
    struct ibv_qp_init_attr init;
    struct ibv_srq *srq;
    struct ibv_cq_ex *cq;
    struct ibv_qp *qp;
    int ret;

    ret = tm_verbs_probe_srq_create(dev->lib, dev->ctx, dev->pd,
                                    dev->super.name, &cq, &srq);
    if (ret != 0) {
        return ret;
    }

    qp = tm_verbs_probe_qp(dev, cq, srq, dev->lim.max_inline, &init);
    if (qp == NULL) {
        ret = (errno != 0) ? errno : ENOMEM;
        tm_dev_debug("verbs: %s: cannot create an RC QP on a TM-SRQ with "
                     "%u bytes inline: %s", dev->super.name,
                     dev->lim.max_inline, strerror(ret));
    } else {
        dev->lim.max_inline = init.cap.max_inline_data;
        dev->lib->destroy_qp(qp);
    }
    tm_verbs_probe_srq_destroy(dev->lib, cq, srq);
    return ret;
}

void tm_dev_destroy_conn(tm_dev_conn_t *tconn)
{
    tm_verbs_conn_t *conn = (tm_verbs_conn_t*)tconn;
    const tm_verbs_lib_t *lib;
    struct ibv_qp **qp;
    int ret;

    if (conn->borrowed) {
        return;                 /* its SRQ's: goes with the SRQ */
    }
    lib = tm_verbs_conn_dev(conn)->lib;
    for (qp = &tconn->qp; qp <= &tconn->rx_qp; ++qp) {
        if (*qp == NULL) {
            continue;
        }
        ret = lib->destroy_qp(*qp);
        if (ret != 0) {
            tm_dev_warn("verbs: %s: ibv_destroy_qp(0x%x) failed: %s",
                        tconn->dev->name, (*qp)->qp_num, strerror(ret));
            return;
        }
        *qp = NULL;
    }
    free(conn);
}

int tm_dev_conn_set_error(tm_dev_conn_t *tconn)
{
    tm_verbs_conn_t *conn = (tm_verbs_conn_t*)tconn;
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};
    int ret;

    if (conn->borrowed || (tconn->qp == NULL)) {
        return 0;               /* its SRQ's, or nothing to send */
    }
    ret = tm_verbs_conn_dev(conn)->lib->modify_qp(tconn->qp, &attr,
                                                  IBV_QP_STATE);
    if (ret != 0) {
        tm_dev_debug("verbs: %s: QP 0x%x to error failed: %s",
                     tconn->dev->name, tconn->qp->qp_num, strerror(ret));
    }
    return ret;
}

int tm_dev_conn_rx_failed(tm_dev_conn_t *tconn)
{
    tm_verbs_conn_t *conn = (tm_verbs_conn_t*)tconn;
    struct ibv_qp_init_attr init;
    struct ibv_qp_attr attr;
    int ret;

    if (tconn->rx_qp == NULL) {
        return 0;
    }
    ret = tm_verbs_conn_dev(conn)->lib->query_qp(tconn->rx_qp, &attr,
                                                 IBV_QP_STATE, &init);
    if (ret != 0) {
        tm_dev_debug("verbs: %s: ibv_query_qp(0x%x) failed: %s",
                     tconn->dev->name, tconn->rx_qp->qp_num, strerror(ret));
        return 0;
    }
    return attr.qp_state == IBV_QPS_ERR;
}

static void tm_verbs_async_event(tm_verbs_dev_t *dev,
                                 const struct ibv_async_event *event)
{
    struct ibv_qp *qp = event->element.qp;
    tm_dev_conn_t *conn;

    switch (event->event_type) {
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        conn = qp->qp_context;  /* NULL: a QP the SRQ accepted */
        tm_dev_debug("verbs: %s: QP 0x%x reached its last WQE",
                     dev->super.name, qp->qp_num);
        if (conn != NULL) {
            __atomic_or_fetch(&conn->last_wqe, (qp == conn->qp) ?
                              TM_DEV_CONN_LAST_WQE_TX :
                              TM_DEV_CONN_LAST_WQE_RX, __ATOMIC_RELEASE);
        }
        break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
        /* its failure also comes as a completion */
        tm_dev_debug("verbs: %s: QP 0x%x: %s", dev->super.name, qp->qp_num,
                     ibv_event_type_str(event->event_type));
        break;
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
        /* the subnet manager set the port anew */
        tm_dev_debug("verbs: %s: %s", dev->super.name,
                     ibv_event_type_str(event->event_type));
        tm_verbs_port_refresh(dev);
        break;
    case IBV_EVENT_CQ_ERR:
        /* the CQ delivers nothing more (an overrun, on mlx5): its owner
         * learns it from the mark */
        tm_dev_error("verbs: %s: CQ %p: %s", dev->super.name,
                     event->element.cq->cq_context,
                     ibv_event_type_str(event->event_type));
        if (event->element.cq->cq_context != NULL) {
            __atomic_store_n(&((tm_dev_cq_t*)event->element.cq->cq_context)
                             ->failed, 1, __ATOMIC_RELEASE);
        }
        break;
    case IBV_EVENT_DEVICE_FATAL:
        tm_dev_error("verbs: %s: %s", dev->super.name,
                     ibv_event_type_str(event->event_type));
        __atomic_store_n(&dev->super.fatal, 1, __ATOMIC_RELEASE);
        break;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_PORT_ERR:
        /* UCX only logs these: a port's connections fail by their own
         * completions (retries exceeded) */
        tm_dev_warn("verbs: %s: %s", dev->super.name,
                    ibv_event_type_str(event->event_type));
        break;
    default:
        tm_dev_debug("verbs: %s: %s", dev->super.name,
                     ibv_event_type_str(event->event_type));
        break;
    }
}

/* The connection is marked before the event is acknowledged: its owner may
 * destroy it as soon as it is marked, and the destroy waits for the
 * acknowledgement */
unsigned tm_dev_progress_events(tm_dev_t *tdev)
{
    tm_verbs_dev_t *dev = tm_verbs_dev(tdev);
    struct ibv_async_event event;
    unsigned count = 0;

    while (dev->lib->get_async_event(dev->ctx, &event) == 0) {
        tm_verbs_async_event(dev, &event);
        dev->lib->ack_async_event(&event);
        ++count;
    }
    return count;
}

static void tm_verbs_qp_addr(struct ibv_qp *qp, tm_verbs_qp_addr_t *addr)
{
    addr->qpn = qp->qp_num;
    addr->psn = tm_verbs_psn(qp->qp_num);
}

void tm_dev_conn_addr(tm_dev_conn_t *tconn, void *addr)
{
    tm_verbs_conn_t *conn = (tm_verbs_conn_t*)tconn;
    tm_verbs_dev_t *dev   = tm_verbs_conn_dev(conn);
    tm_verbs_qp_addr_t tx, rx;

    tm_verbs_qp_addr(tconn->qp, &tx);
    tm_verbs_qp_addr(tconn->rx_qp, &rx);
    tm_verbs_conn_addr_pack(addr, dev->port_attr.active_mtu,
                            dev->port_attr.lid, &tx, &rx, &dev->gid);
}

/* Route to the peer from our port (tm_verbs_ah_attr_fill) */
static void tm_verbs_ah_attr(const tm_verbs_dev_t *dev,
                             const tm_verbs_peer_t *peer,
                             struct ibv_ah_attr *ah)
{
    tm_verbs_local_t local;

    local.link_layer = dev->port_attr.link_layer;
    local.port_num   = dev->port_num;
    local.gid_index  = dev->gid_index;
    local.port_flags = dev->port_attr.flags;
    local.sl         = dev->sl;
    local.gid        = dev->gid;
    tm_verbs_ah_attr_fill(&local, peer, ah);
}

/* INIT -> RTR: remote is the peer QP it talks to */
static int tm_verbs_qp_rtr(tm_verbs_dev_t *dev, struct ibv_qp *qp,
                           const tm_verbs_peer_t *peer,
                           const tm_verbs_qp_addr_t *remote)
{
    struct ibv_qp_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state           = IBV_QPS_RTR;
    /* Both ports must carry the path MTU */
    attr.path_mtu           = (peer->mtu < dev->port_attr.active_mtu) ?
                              peer->mtu : dev->port_attr.active_mtu;
    attr.dest_qp_num        = remote->qpn;
    attr.rq_psn             = remote->psn;
    attr.max_dest_rd_atomic = dev->lim.max_dest_rd_atomic;
    attr.min_rnr_timer      = TM_VERBS_MIN_RNR_TIMER;
    tm_verbs_ah_attr(dev, peer, &attr.ah_attr);

    return dev->lib->modify_qp(qp, &attr,
                               IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                               IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                               IBV_QP_MAX_DEST_RD_ATOMIC |
                               IBV_QP_MIN_RNR_TIMER);
}

/* RTR -> RTS.  The receive-only QP goes too: the NIC sends on it */
static int tm_verbs_qp_rts(tm_verbs_dev_t *dev, struct ibv_qp *qp)
{
    struct ibv_qp_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state      = IBV_QPS_RTS;
    attr.sq_psn        = tm_verbs_psn(qp->qp_num);
    attr.timeout       = dev->timeout;
    attr.retry_cnt     = dev->retry_cnt;
    /* A full SRQ makes the sender wait (RNR) rather than fail */
    attr.rnr_retry     = TM_VERBS_RNR_RETRY;
    attr.max_rd_atomic = dev->lim.max_rd_atomic;

    return dev->lib->modify_qp(qp, &attr,
                               IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                               IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                               IBV_QP_MAX_QP_RD_ATOMIC);
}

static int tm_verbs_qp_connect(tm_verbs_dev_t *dev, struct ibv_qp *qp,
                               const tm_verbs_peer_t *peer,
                               const tm_verbs_qp_addr_t *remote)
{
    int ret;

    ret = tm_verbs_qp_rtr(dev, qp, peer, remote);
    if (ret != 0) {
        tm_dev_debug("verbs: %s: QP 0x%x to RTR (peer QP 0x%x, LID %u) "
                     "failed: %s", dev->super.name, qp->qp_num, remote->qpn,
                     peer->lid, strerror(ret));
        return ret;
    }

    ret = tm_verbs_qp_rts(dev, qp);
    if (ret != 0) {
        tm_dev_debug("verbs: %s: QP 0x%x to RTS failed: %s", dev->super.name,
                     qp->qp_num, strerror(ret));
    }
    return ret;
}

/* Our receive-only QP takes what the peer's sending QP sends, and the other
 * way round */
int tm_dev_connect(tm_dev_conn_t *tconn, const void *dev_addr,
                   const void *conn_addr)
{
    tm_verbs_conn_t *conn = (tm_verbs_conn_t*)tconn;
    tm_verbs_dev_t *dev   = tm_verbs_conn_dev(conn);
    tm_verbs_peer_t peer_dev;
    tm_verbs_peer_t peer;
    int ret;

    conn->peer_known = 0;

    if ((tm_verbs_dev_addr_unpack(dev_addr, &peer_dev) != 0) ||
        (tm_verbs_conn_addr_unpack(conn_addr, &peer) != 0)) {
        tm_dev_debug("verbs: %s: connect to an address that is not a verbs "
                     "address", tconn->dev->name);
        return EINVAL;
    }

    if (!tm_verbs_peer_reachable(dev->port_attr.link_layer, &dev->gid,
                                 &peer_dev)) {
        return EHOSTUNREACH;
    }

    peer.link_layer = peer_dev.link_layer;
    ret = tm_verbs_qp_connect(dev, tconn->rx_qp, &peer, &peer.tx);
    if (ret == 0) {
        ret = tm_verbs_qp_connect(dev, tconn->qp, &peer, &peer.rx);
    }
    if (ret != 0) {
        return ret;
    }

    conn->peer         = peer;
    conn->peer_srq_num = TM_VERBS_NO_SRQ;
    conn->peer_known   = 1;
    tm_dev_debug("verbs: %s: QPs 0x%x/0x%x connected to QPs 0x%x/0x%x",
                 tconn->dev->name, tconn->qp->qp_num, tconn->rx_qp->qp_num,
                 peer.tx.qpn, peer.rx.qpn);
    return 0;
}


/*
 * Connections to a remote SRQ: the software NIC's extension
 */
void tm_dev_srq_addr(tm_dev_srq_t *srq, void *addr)
{
    uint32_t num = 0;
    uint8_t *p   = addr;

    if (tm_verbs_dev(srq->dev)->flags & TM_DEV_CAP_CONNECT_TO_SRQ) {
        ibv_get_srq_num(srq->srq, &num);
    }
    p[0] = (uint8_t)(num >> 24);
    p[1] = (uint8_t)(num >> 16);
    p[2] = (uint8_t)(num >> 8);
    p[3] = (uint8_t)num;
}

static uint32_t tm_verbs_srq_addr_num(const void *srq_addr)
{
    const uint8_t *p = srq_addr;

    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
           ((uint32_t)p[2] << 8) | p[3];
}

int tm_dev_connect_to_srq(tm_dev_conn_t *tconn, const void *dev_addr,
                          const void *srq_addr)
{
    tm_verbs_conn_t *conn = (tm_verbs_conn_t*)tconn;
    tm_verbs_dev_t *dev   = tm_verbs_dev(tconn->dev);
    tm_verbs_peer_t peer;
    uint32_t num;
    int ret;

    if (!(dev->flags & TM_DEV_CAP_CONNECT_TO_SRQ)) {
        return EOPNOTSUPP;
    }
    if (tm_verbs_dev_addr_unpack(dev_addr, &peer) != 0) {
        return EINVAL;
    }
    if (!tm_verbs_peer_reachable(dev->port_attr.link_layer, &dev->gid,
                                 &peer)) {
        return EHOSTUNREACH;
    }
    num = tm_verbs_srq_addr_num(srq_addr);
    ret = softnic_dv_connect_qp_to_srq(tconn->qp, tconn->rx_qp, &peer.gid,
                                       num);
    if (ret != 0) {
        tm_dev_debug("verbs: %s: QP 0x%x to SRQ %u failed: %s",
                     tconn->dev->name, tconn->qp->qp_num, num, strerror(ret));
        return ret;
    }

    conn->peer         = peer;
    conn->peer_srq_num = num;
    conn->peer_known   = 1;
    return 0;
}

/* What our QPs were connected to (a NIC's QP holds the same: its path and
 * the remote QP number, as ibv_query_qp gives them to UCX's rc transports) */
int tm_dev_conn_is_connected(tm_dev_conn_t *tconn, const void *dev_addr,
                             const void *conn_addr, const void *srq_addr)
{
    tm_verbs_conn_t *conn = (tm_verbs_conn_t*)tconn;
    tm_verbs_peer_t peer_dev, peer;

    if (!conn->peer_known ||
        (tm_verbs_dev_addr_unpack(dev_addr, &peer_dev) != 0) ||
        !tm_verbs_peer_same_port(&conn->peer, &peer_dev)) {
        return 0;
    }
    if (conn_addr != NULL) {
        return (conn->peer_srq_num == TM_VERBS_NO_SRQ) &&
               (tm_verbs_conn_addr_unpack(conn_addr, &peer) == 0) &&
               (peer.tx.qpn == conn->peer.tx.qpn) &&
               (peer.rx.qpn == conn->peer.rx.qpn);
    }
    if (srq_addr != NULL) {
        return conn->peer_srq_num == tm_verbs_srq_addr_num(srq_addr);
    }
    return 1;
}

/* The connection an SRQ accepted (either of its QPs), wrapped once and kept
 * with the SRQ */
tm_dev_conn_t *tm_dev_srq_conn(tm_dev_srq_t *tsrq, uint32_t qp_num)
{
    tm_verbs_srq_t *srq = (tm_verbs_srq_t*)tsrq;
    struct ibv_qp *qp, *rx_qp;
    tm_verbs_conn_t *conn;

    if (!(tm_verbs_dev(tsrq->dev)->flags & TM_DEV_CAP_CONNECT_TO_SRQ)) {
        return NULL;
    }
    for (conn = srq->borrowed; conn != NULL; conn = conn->next) {
        if ((conn->super.qp->qp_num == qp_num) ||
            (conn->super.rx_qp->qp_num == qp_num)) {
            return &conn->super;
        }
    }
    if (softnic_dv_srq_conn(tsrq->srq, qp_num, &qp, &rx_qp) != 0) {
        return NULL;
    }
    conn = calloc(1, sizeof(*conn));
    if (conn == NULL) {
        return NULL;
    }
    conn->super.dev   = tsrq->dev;
    conn->super.qp    = qp;
    conn->super.rx_qp = rx_qp;
    conn->borrowed    = 1;
    conn->next        = srq->borrowed;
    srq->borrowed     = conn;
    return &conn->super;
}
