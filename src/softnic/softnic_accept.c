/*
 * Software NIC: connections to a remote TM-SRQ (the extension, for UCP's
 * wireup where no auxiliary transport exists).
 *
 * softnic_dv_connect_qp_to_srq() connects a pair of QPs in INIT (a sending
 * and a receive-only one) to a remote TM-SRQ instead of a remote QP: it
 * creates the rings and leaves a request in the SRQ's accept queue (a
 * shared-memory segment named by the SRQ number, whose owner the device's
 * registry gives: softnic_wire.h); the remote NIC accepts it
 * with a pair of its own (passive, owned by the SRQ) when it next runs
 * (sn_srq_accept), and destroys them with the SRQ.  softnic_dv_srq_conn()
 * finds an accepted pair from a completion's QP number.
 */
#include "softnic_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Send queue of the QPs an SRQ accepts (they send FINs and the remote
 * software's rendezvous reads) */
#define SN_PASSIVE_SEND_WR  256

/* Numbers of the rings of ours that the accepted QPs take in from ('r'
 * segments): the process's own, since the segment's name carries the
 * process */
static _Atomic uint32_t sn_next_ring_num = 1;

/* Posts a request in the accept queue of the SRQ srq_num, of the context
 * dev_seq of process owner */
static int sn_srq_request(const sn_proc_id_t *owner, uint32_t dev_seq,
                          uint32_t srq_num, const sn_accept_slot_t *req)
{
    sn_srq_seg_t *seg;
    sn_shm_t shm;
    uint32_t i, expected;
    char name[96];
    int ret;

    sn_seg_name(name, sizeof(name), owner, dev_seq, 's', srq_num);
    ret = sn_shm_attach(&shm, name);
    if (ret != 0) {
        sn_error("cannot reach SRQ %u of device %u of process %u: %s",
                 srq_num, dev_seq, owner->pid, strerror(ret));
        return ECONNREFUSED;
    }
    seg = shm.base;
    if ((shm.size < sizeof(*seg)) || (seg->hdr.magic != SN_MAGIC) ||
        (seg->hdr.version != SN_VERSION) ||
        (seg->hdr.kind != SN_SEG_SRQ) || atomic_load(&seg->hdr.closed)) {
        sn_shm_detach(&shm);
        return ECONNREFUSED;
    }
    ret = EBUSY;            /* every slot taken: the SRQ is not polling */
    for (i = 0; i < SN_ACCEPT_SLOTS; ++i) {
        expected = SN_SLOT_FREE;
        if (!atomic_compare_exchange_strong(&seg->slot[i].state, &expected,
                                            SN_SLOT_CLAIMED)) {
            continue;
        }
        seg->slot[i].in_qpn     = req->in_qpn;
        seg->slot[i].out_qpn    = req->out_qpn;
        seg->slot[i].rx_in_qpn  = req->rx_in_qpn;
        seg->slot[i].rx_out_qpn = req->rx_out_qpn;
        seg->slot[i].proc       = req->proc;
        seg->slot[i].host_id    = req->host_id;
        seg->slot[i].dev_seq    = req->dev_seq;
        atomic_store_explicit(&seg->slot[i].state, SN_SLOT_READY,
                              memory_order_release);
        atomic_fetch_add_explicit(&seg->requests, 1, memory_order_release);
        ret = 0;
        break;
    }
    sn_shm_detach(&shm);
    return ret;
}

/* Active side, one QP: it produces into a ring of ours ('r', not a QP's:
 * the accepted QP's inbound ring) */
static int sn_qp_out_to_new_ring(sn_context_t *ctx, sn_qp_t *qp,
                                 const sn_proc_id_t *proc, uint16_t dev_seq,
                                 uint32_t *ring_qpn)
{
    int ret;

    *ring_qpn = atomic_fetch_add(&sn_next_ring_num, 1);
    ret       = sn_ring_create(ctx, 'r', *ring_qpn, 0, IBV_QPT_RC,
                               &qp->out_shm);
    if (ret != 0) {
        return ret;
    }
    ret = sn_qp_set_out(ctx, qp, proc, dev_seq);
    if (ret != 0) {
        sn_shm_destroy(&qp->out_shm);
    }
    return ret;
}

static void sn_qp_out_undo(sn_context_t *ctx, sn_qp_t *qp)
{
    qp->out = NULL;
    sn_peer_put(ctx, qp->peer);
    qp->peer = NULL;
    sn_shm_destroy(&qp->out_shm);
}

/*
 * Active side: we create the rings our QPs produce into (the accepted QPs'
 * inbound rings) besides their own inbound rings, and ask the remote SRQ
 * to accept.  We may send at once: the messages wait in the ring until it
 * does.
 */
int softnic_dv_connect_qp_to_srq(struct ibv_qp *ibv_qp, struct ibv_qp *ibv_rx_qp,
                                 const union ibv_gid *gid, uint32_t srq_num)
{
    sn_qp_t *qp, *rx_qp;
    sn_context_t *ctx;
    sn_accept_slot_t req;
    sn_dev_addr_t peer;
    sn_proc_id_t proc;
    uint32_t dev_seq;
    int ret;

    if (!sn_is_softnic(ibv_qp->context) || (ibv_rx_qp == NULL) ||
        !sn_is_softnic(ibv_rx_qp->context)) {
        return EOPNOTSUPP;
    }
    qp    = sn_qp(ibv_qp);
    rx_qp = sn_qp(ibv_rx_qp);
    ctx   = sn_qp_ctx(qp);
    if ((qp->ibv.state != IBV_QPS_INIT) || qp->passive || qp->rx_only ||
        (rx_qp->ibv.state != IBV_QPS_INIT) || rx_qp->passive ||
        !rx_qp->rx_only || !sn_gid_unpack(gid, &peer)) {
        return EINVAL;
    }
    if (!sn_reachable(ctx, &peer)) {
        return EHOSTUNREACH;
    }
    if (sn_num_owner(peer.uid, 's', srq_num, &proc, &dev_seq) != 0) {
        sn_error("no SRQ %u on the device", srq_num);
        return ECONNREFUSED;
    }

    memset(&req, 0, sizeof(req));
    req.out_qpn    = qp->ibv.qp_num;
    req.rx_out_qpn = rx_qp->ibv.qp_num;
    req.proc       = ctx->proc;
    req.host_id    = ctx->host_id;
    req.dev_seq    = ctx->dev_seq;
    sn_ctx_lock(ctx);
    ret = sn_qp_out_to_new_ring(ctx, qp, &proc, (uint16_t)dev_seq,
                                &req.in_qpn);
    if (ret != 0) {
        sn_ctx_unlock(ctx);
        return ret;
    }
    ret = sn_qp_out_to_new_ring(ctx, rx_qp, &proc, (uint16_t)dev_seq,
                                &req.rx_in_qpn);
    if (ret != 0) {
        goto err_undo_qp;
    }
    ret = sn_srq_request(&proc, dev_seq, srq_num, &req);
    if (ret != 0) {
        goto err_undo_rx_qp;
    }
    qp->ibv.state    = IBV_QPS_RTS;
    rx_qp->ibv.state = IBV_QPS_RTS;
    sn_ctx_unlock(ctx);
    sn_db_ring(qp->peer->seg);  /* the remote engine accepts it */
    return 0;

err_undo_rx_qp:
    sn_qp_out_undo(ctx, rx_qp);
err_undo_qp:
    sn_qp_out_undo(ctx, qp);
    sn_ctx_unlock(ctx);
    return ret;
}

/* Passive side: one QP of an accepted pair, taking in from the ring in_qpn
 * ('r') and producing into the ring of the requester's QP out_qpn */
static int sn_qp_accept_one(sn_srq_t *srq, const sn_accept_slot_t *req,
                            uint32_t max_send_wr, uint32_t in_qpn,
                            uint32_t out_qpn, sn_qp_t **qp_p)
{
    sn_context_t *ctx = sn_ctx(srq->ibv.context);
    sn_qp_t *qp;
    int ret;

    /* its send completions go to the SRQ's CQ: nobody else polls for it */
    qp = sn_qp_alloc(ctx, srq, srq->cq, max_send_wr, SN_MAX_INLINE);
    if (qp == NULL) {
        return ENOMEM;
    }
    qp->passive = true;
    ret = sn_ring_attach(&req->proc, req->dev_seq, 'r', in_qpn, IBV_QPT_RC,
                         &qp->in_shm);
    if (ret != 0) {
        goto err_free;
    }
    sn_qp_set_in(qp);
    ret = sn_ring_attach(&req->proc, req->dev_seq, 'q', out_qpn, IBV_QPT_RC,
                         &qp->out_shm);
    if (ret != 0) {
        goto err_detach_in;
    }
    ret = sn_qp_set_out(ctx, qp, &req->proc, (uint16_t)req->dev_seq);
    if (ret != 0) {
        goto err_detach_out;
    }
    qp->ibv.state = IBV_QPS_RTS;
    *qp_p         = qp;
    return 0;

err_detach_out:
    sn_shm_detach(&qp->out_shm);
err_detach_in:
    sn_shm_detach(&qp->in_shm);
err_free:
    sn_qp_free(qp);
    return ret;
}

/* Passive side: the pair of QPs for a request in our SRQ's accept queue */
static int sn_qp_accept(sn_srq_t *srq, const sn_accept_slot_t *req)
{
    sn_context_t *ctx = sn_ctx(srq->ibv.context);
    sn_qp_t *qp, *rx_qp;
    int ret;

    if ((req->host_id != ctx->host_id) || (req->proc.uid != ctx->proc.uid)) {
        return EHOSTUNREACH;
    }
    ret = sn_qp_accept_one(srq, req, 0, req->in_qpn, req->out_qpn, &rx_qp);
    if (ret != 0) {
        return ret;
    }
    ret = sn_qp_accept_one(srq, req, SN_PASSIVE_SEND_WR, req->rx_in_qpn,
                           req->rx_out_qpn, &qp);
    if (ret != 0) {
        sn_qp_destroy(rx_qp);
        return ret;
    }
    qp->partner    = rx_qp;
    rx_qp->partner = qp;
    sn_qp_link(ctx, rx_qp);
    sn_qp_link(ctx, qp);
    sn_debug("SRQ %u accepted QPs 0x%x/0x%x of process %u as QPs 0x%x/0x%x",
             srq->num, req->out_qpn, req->rx_out_qpn, req->proc.pid,
             rx_qp->ibv.qp_num, qp->ibv.qp_num);
    return 0;
}

/* Accepts the connections peers asked for since the last poll */
void sn_srq_accept(sn_srq_t *srq)
{
    sn_accept_slot_t *slot;
    uint32_t i;
    int ret;

    if (sn_likely(atomic_load_explicit(&srq->seg->requests,
                                       memory_order_acquire) ==
                  srq->accepted)) {
        return;
    }
    for (i = 0; i < SN_ACCEPT_SLOTS; ++i) {
        slot = &srq->seg->slot[i];
        if (atomic_load_explicit(&slot->state, memory_order_acquire) !=
            SN_SLOT_READY) {
            continue;
        }
        ret = sn_qp_accept(srq, slot);
        if (ret != 0) {
            sn_warn("SRQ %u refused a connection of process %u: %s",
                    srq->num, slot->proc.pid, strerror(ret));
        }
        ++srq->accepted;
        atomic_store_explicit(&slot->state, SN_SLOT_FREE,
                              memory_order_release);
    }
}

int softnic_dv_srq_conn(struct ibv_srq *ibv_srq, uint32_t qp_num,
                        struct ibv_qp **qp_p, struct ibv_qp **rx_qp_p)
{
    sn_srq_t *srq;
    sn_list_t *it;
    sn_qp_t *qp;

    if (!sn_is_softnic(ibv_srq->context)) {
        return EOPNOTSUPP;
    }
    srq = sn_srq(ibv_srq);
    sn_ctx_lock(sn_ctx(ibv_srq->context));  /* the engine accepts */
    for (it = srq->qps.next; it != &srq->qps; it = it->next) {
        qp = sn_container_of(it, sn_qp_t, srq_link);
        if ((qp->ibv.qp_num != qp_num) || (qp->partner == NULL)) {
            continue;
        }
        *qp_p    = qp->rx_only ? &qp->partner->ibv : &qp->ibv;
        *rx_qp_p = qp->rx_only ? &qp->ibv : &qp->partner->ibv;
        sn_ctx_unlock(sn_ctx(ibv_srq->context));
        return 0;
    }
    sn_ctx_unlock(sn_ctx(ibv_srq->context));
    return ENOENT;
}

/* The QPs the SRQ accepted go with it */
void sn_srq_destroy_qps(sn_srq_t *srq)
{
    sn_list_t *it, *next;
    sn_qp_t *qp;

    for (it = srq->qps.next; it != &srq->qps; it = next) {
        next = it->next;
        qp   = sn_container_of(it, sn_qp_t, srq_link);
        if (qp->passive) {
            sn_qp_destroy(qp);
        }
    }
}
