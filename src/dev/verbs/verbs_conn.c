/*
 * rdma-core verbs backend: RC connections attached to the tag-matching SRQ.
 *
 * A connection is an RC QP whose receives go to the TM-SRQ (and so complete
 * on the SRQ's CQ) and whose sends complete on the caller's send CQ.  The
 * QP is taken to INIT when created, so that its address can be handed out;
 * connect() takes it to RTR and RTS from the peer's address.
 *
 * The NIC reads rendezvous data on the receiver's QP, so both directions of
 * RDMA read are enabled: max_rd_atomic (as initiator) and
 * max_dest_rd_atomic (as responder).
 */
#include "verbs_dev.h"

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
    attr.pkey_index      = 0;
    attr.port_num        = dev->port_num;
    attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_WRITE;

    return ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                    IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int tm_verbs_create_conn(tm_dev_t *tdev, tm_dev_srq_t *tsrq,
                         tm_dev_cq_t *send_cq, tm_dev_conn_t **conn_p)
{
    tm_verbs_dev_t *dev = tm_verbs_dev(tdev);
    tm_verbs_srq_t *srq = (tm_verbs_srq_t*)tsrq;
    struct ibv_qp_init_attr attr;
    tm_verbs_conn_t *conn;
    int ret;

    memset(&attr, 0, sizeof(attr));
    attr.send_cq             = ibv_cq_ex_to_cq(((tm_verbs_cq_t*)send_cq)->cq);
    attr.recv_cq             = ibv_cq_ex_to_cq(srq->cq->cq);
    attr.srq                 = srq->srq;
    attr.cap.max_send_wr     = dev->lim.max_send_wr;
    attr.cap.max_send_sge    = dev->lim.max_send_sge;
    attr.cap.max_inline_data = TM_VERBS_MAX_INLINE;
    attr.qp_type             = IBV_QPT_RC;
    attr.sq_sig_all          = 0;   /* callers ask with IBV_SEND_SIGNALED */

    conn = calloc(1, sizeof(*conn));
    if (conn == NULL) {
        return ENOMEM;
    }

    errno    = 0;
    conn->qp = ibv_create_qp(dev->pd, &attr);
    if (conn->qp == NULL) {
        ret = (errno != 0) ? errno : ENOMEM;
        tm_dev_debug("verbs: %s: ibv_create_qp(RC, %u send WRs, inline %u) "
                     "failed: %s", tdev->name, dev->lim.max_send_wr,
                     TM_VERBS_MAX_INLINE, strerror(ret));
        goto err_free;
    }

    ret = tm_verbs_qp_init(dev, conn->qp);
    if (ret != 0) {
        tm_dev_debug("verbs: %s: QP 0x%x to INIT failed: %s", tdev->name,
                     conn->qp->qp_num, strerror(ret));
        goto err_destroy;
    }

    conn->super.dev = tdev;
    conn->psn       = tm_verbs_psn(conn->qp->qp_num);
    *conn_p         = &conn->super;
    return 0;

err_destroy:
    ibv_destroy_qp(conn->qp);
err_free:
    free(conn);
    return ret;
}

void tm_verbs_destroy_conn(tm_dev_conn_t *tconn)
{
    tm_verbs_conn_t *conn = (tm_verbs_conn_t*)tconn;
    int ret;

    ret = ibv_destroy_qp(conn->qp);
    if (ret != 0) {
        tm_dev_warn("verbs: %s: ibv_destroy_qp(0x%x) failed: %s",
                    tconn->dev->name, conn->qp->qp_num, strerror(ret));
        return;
    }
    free(conn);
}

void tm_verbs_conn_addr(tm_dev_conn_t *tconn, void *addr)
{
    tm_verbs_conn_t *conn = (tm_verbs_conn_t*)tconn;
    tm_verbs_dev_t *dev   = tm_verbs_conn_dev(conn);

    tm_verbs_conn_addr_pack(addr, dev->port_attr.active_mtu,
                            dev->port_attr.lid, conn->qp->qp_num, conn->psn,
                            &dev->gid);
}

uint32_t tm_verbs_conn_qp_num(tm_dev_conn_t *tconn)
{
    return ((tm_verbs_conn_t*)tconn)->qp->qp_num;
}

/* Route to the peer: the LID within an InfiniBand subnet, the GID (GRH)
 * across subnets and always on RoCE */
static void tm_verbs_ah_attr(const tm_verbs_dev_t *dev,
                             const tm_verbs_peer_t *peer,
                             struct ibv_ah_attr *ah)
{
    int global = (dev->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET) ||
                 (dev->gid.global.subnet_prefix !=
                  peer->gid.global.subnet_prefix);

    memset(ah, 0, sizeof(*ah));
    ah->port_num = dev->port_num;
    ah->dlid     = peer->lid;
    if (global) {
        ah->is_global      = 1;
        ah->grh.dgid       = peer->gid;
        ah->grh.sgid_index = dev->gid_index;
        ah->grh.hop_limit  = TM_VERBS_HOP_LIMIT;
    }
}

static int tm_verbs_qp_rtr(tm_verbs_conn_t *conn, const tm_verbs_peer_t *peer)
{
    tm_verbs_dev_t *dev = tm_verbs_conn_dev(conn);
    struct ibv_qp_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state           = IBV_QPS_RTR;
    /* Both ports must carry the path MTU */
    attr.path_mtu           = (peer->mtu < dev->port_attr.active_mtu) ?
                              peer->mtu : dev->port_attr.active_mtu;
    attr.dest_qp_num        = peer->qpn;
    attr.rq_psn             = peer->psn;
    attr.max_dest_rd_atomic = dev->lim.max_dest_rd_atomic;
    attr.min_rnr_timer      = TM_VERBS_MIN_RNR_TIMER;
    tm_verbs_ah_attr(dev, peer, &attr.ah_attr);

    return ibv_modify_qp(conn->qp, &attr,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                         IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int tm_verbs_qp_rts(tm_verbs_conn_t *conn)
{
    tm_verbs_dev_t *dev = tm_verbs_conn_dev(conn);
    struct ibv_qp_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state      = IBV_QPS_RTS;
    attr.sq_psn        = conn->psn;
    attr.timeout       = TM_VERBS_TIMEOUT;
    attr.retry_cnt     = TM_VERBS_RETRY_CNT;
    /* A full SRQ makes the sender wait (RNR) rather than fail */
    attr.rnr_retry     = TM_VERBS_RNR_RETRY;
    attr.max_rd_atomic = dev->lim.max_rd_atomic;

    return ibv_modify_qp(conn->qp, &attr,
                         IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                         IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                         IBV_QP_MAX_QP_RD_ATOMIC);
}

int tm_verbs_connect(tm_dev_conn_t *tconn, const void *dev_addr,
                     const void *conn_addr)
{
    tm_verbs_conn_t *conn = (tm_verbs_conn_t*)tconn;
    tm_verbs_dev_t *dev   = tm_verbs_conn_dev(conn);
    tm_verbs_peer_t peer_dev;
    tm_verbs_peer_t peer;
    int ret;

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

    ret = tm_verbs_qp_rtr(conn, &peer);
    if (ret != 0) {
        tm_dev_debug("verbs: %s: QP 0x%x to RTR (peer QP 0x%x, LID %u) "
                     "failed: %s", tconn->dev->name, conn->qp->qp_num,
                     peer.qpn, peer.lid, strerror(ret));
        return ret;
    }

    ret = tm_verbs_qp_rts(conn);
    if (ret != 0) {
        tm_dev_debug("verbs: %s: QP 0x%x to RTS failed: %s", tconn->dev->name,
                     conn->qp->qp_num, strerror(ret));
        return ret;
    }

    tm_dev_debug("verbs: %s: QP 0x%x connected to QP 0x%x", tconn->dev->name,
                 conn->qp->qp_num, peer.qpn);
    return 0;
}

int tm_verbs_post_send(tm_dev_conn_t *tconn, struct ibv_send_wr *wr,
                       struct ibv_send_wr **bad_wr)
{
    return ibv_post_send(((tm_verbs_conn_t*)tconn)->qp, wr, bad_wr);
}
