/*
 * Software NIC: queue pairs.
 *
 * An RC QP receives through a TM-SRQ, a basic SRQ, or (created without an
 * SRQ) a receive queue of its own (softnic_rq.c), and owns its inbound
 * ring, a shared-memory segment named by its QP number that the peer
 * writes into.  It is set up as on a NIC:
 *   RESET -> INIT   port, access flags, P_Key index (below the port's
 *                   table: softnic_port.h);
 *   INIT  -> RTR    the peer's address and QP number: the GID of the GRH
 *                   names the device (host and user), or, without a GRH,
 *                   the port's own LID names ours; the QP number, unique
 *                   on the device, names the QP, whose owner the device's
 *                   registry gives (softnic_wire.h).  The QP maps the
 *                   peer's inbound ring and becomes its producer; messages
 *                   that arrive are taken from now on;
 *   RTR   -> RTS    sends may be posted;
 *   any   -> ERR    outstanding requests complete with IBV_WC_WR_FLUSH_ERR
 *                   and the peer sees the QP gone; once its last work is
 *                   done, IBV_EVENT_QP_LAST_WQE_REACHED (softnic_async.c).
 * The attributes each transition requires are those the kernel requires
 * (ib_modify_qp_is_ok): a missing one fails with EINVAL.  Unlike a NIC,
 * which would accept RTR and fail the first send after its retries, RTR to
 * a peer QP that does not exist fails at once (ECONNREFUSED).
 *
 * A QP created without a send queue is receive-only: only on such a QP
 * does the NIC perform a matched rendezvous itself (its read and FIN go out
 * on it), as the kernel enables rendezvous offload only on a QP attached to
 * a TM-SRQ with no send queue.
 *
 * Destroying a QP removes its completions that software has not polled
 * from its CQs, as rdma-core's mlx5 provider does (sn_cq_purge_qp,
 * softnic_cq.c).
 *
 * Connections to a remote SRQ (the extension), which create QPs without
 * modify_qp: softnic_accept.c.
 */
#include "softnic_int.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- rings ---- */

/* Creates a ring segment of ours (kind 'q': a QP's, 'r': softnic_accept.c) */
int sn_ring_create(sn_context_t *ctx, char kind, uint32_t num, uint32_t size,
                   uint32_t qp_type, sn_shm_t *shm)
{
    sn_ring_ctl_t *ring;
    char name[96];
    int ret;

    if (size == 0) {
        size = ctx->ring_size;
    }
    sn_seg_name(name, sizeof(name), &ctx->proc, ctx->dev_seq, kind, num);
    ret = sn_shm_create(shm, name, sn_ring_seg_size(size));
    if (ret != 0) {
        return ret;
    }
    ring          = shm->base;
    ring->size    = size;
    ring->qp_type = qp_type;
    sn_seg_hdr_init(&ring->hdr, &ctx->proc, SN_SEG_RING);
    return 0;
}

/* Maps a ring segment of the context dev_seq of process owner and checks
 * it: a ring of a QP of another type is none (an RC QP does not connect
 * to a UD QP, a datagram to an RC QP is dropped) */
int sn_ring_attach(const sn_proc_id_t *owner, uint32_t dev_seq, char kind,
                   uint32_t num, uint32_t qp_type, sn_shm_t *shm)
{
    sn_ring_ctl_t *ring;
    char name[96];
    int ret;

    sn_seg_name(name, sizeof(name), owner, dev_seq, kind, num);
    ret = sn_shm_attach(shm, name);
    if (ret != 0) {
        sn_debug("no ring %c0x%x of device %u of process %u: %s", kind, num,
                 dev_seq, owner->pid, strerror(ret));
        return ECONNREFUSED;
    }
    ring = shm->base;
    if ((shm->size < sizeof(*ring)) || (ring->hdr.magic != SN_MAGIC) ||
        (ring->hdr.version != SN_VERSION) ||
        (ring->hdr.kind != SN_SEG_RING) || (ring->size == 0) ||
        (ring->size & (ring->size - 1)) ||
        (shm->size < sn_ring_seg_size(ring->size)) ||
        (ring->qp_type != qp_type) || atomic_load(&ring->hdr.closed)) {
        sn_shm_detach(shm);
        return ECONNREFUSED;
    }
    return 0;
}

void sn_qp_set_in(sn_qp_t *qp)
{
    qp->in      = qp->in_shm.base;
    qp->in_mask = qp->in->size - 1;
    qp->in_head = atomic_load(&qp->in->head);
    qp->in_rec  = sn_ring_rec(qp->in, qp->in_mask, qp->in_head);
}

/* Becomes the producer of an attached or created outbound ring */
int sn_qp_set_out(sn_context_t *ctx, sn_qp_t *qp,
                  const sn_proc_id_t *peer_proc, uint16_t peer_dev_seq)
{
    sn_ring_ctl_t *out = qp->out_shm.base;
    uint32_t expected  = 0;
    int ret;

    if (!atomic_compare_exchange_strong(&out->producer_attached, &expected,
                                        1)) {
        sn_error("a ring of process %u is already connected", peer_proc->pid);
        return EISCONN;
    }
    out->producer = ctx->proc;
    ret = sn_peer_get(ctx, peer_proc, peer_dev_seq, &qp->peer);
    if (ret != 0) {
        atomic_store(&out->producer_attached, 0);
        return ECONNREFUSED;
    }
    qp->out            = out;
    qp->out_mask       = out->size - 1;
    qp->out_tail       = atomic_load(&out->head);
    qp->out_head_cache = qp->out_tail;
    qp->peer_proc      = *peer_proc;
    /* retried for ever until RTS says (a QP accepted by an SRQ never
     * goes through RTS): the responder's RNR waits read it */
    out->rnr_retry     = 7;
    /* the device's, until RTS says */
    qp->attr.timeout   = (uint8_t)ctx->attr.timeout;
    qp->attr.retry_cnt = (uint8_t)ctx->attr.retry_cnt;
    qp->gone_deadline_ns = 0;
    sn_qp_backlog_init(qp);
    return 0;
}


/* ---- creation and destruction ---- */

/* A QP without rings yet, its send queue room for max_inline bytes of
 * inline data in each entry */
sn_qp_t *sn_qp_alloc(sn_context_t *ctx, sn_srq_t *srq, sn_cq_t *cq,
                     uint32_t max_send_wr, uint32_t max_inline)
{
    sn_qp_t *qp;

    qp = calloc(1, sizeof(*qp));
    if (qp == NULL) {
        return NULL;
    }
    qp->sq_size        = max_send_wr;
    qp->rx_only        = (max_send_wr == 0);
    qp->sq_mask        = sn_roundup_pow2(qp->sq_size) - 1;
    qp->sq             = calloc(qp->sq_mask + 1, sizeof(*qp->sq));
    qp->sq_inline_size = (max_inline + 15) & ~15u;
    /* a byte more: never a zero-size allocation, which may be NULL */
    qp->sq_inline      = calloc(1, (size_t)(qp->sq_mask + 1) *
                                   qp->sq_inline_size + 1);
    /* its number, the device's: taken in the registry, as a NIC's
     * firmware gives it (a slow path, as creation is on a NIC) */
    if ((qp->sq == NULL) || (qp->sq_inline == NULL) ||
        (sn_num_alloc(&ctx->proc, ctx->dev_seq, 'q', &qp->ibv.qp_num,
                      &qp->num_entry) != 0)) {
        free(qp->sq_inline);
        free(qp->sq);
        free(qp);
        return NULL;
    }
    sn_list_init(&qp->ctx_link);
    sn_list_init(&qp->srq_link);
    sn_list_init(&qp->cq_link);
    sn_list_init(&qp->active_link);
    sn_list_init(&qp->busy_link);
    sn_list_init(&qp->event_link);
    qp->srq             = srq;
    qp->send_cq         = cq;
    qp->max_send_size   = ctx->attr.max_send_size;
    qp->ibv.context     = &ctx->vctx.context;
    qp->ibv.pd          = srq->ibv.pd;
    qp->ibv.send_cq     = (struct ibv_cq*)&cq->ex;
    qp->ibv.recv_cq     = (struct ibv_cq*)&srq->cq->ex;
    qp->ibv.srq         = &srq->ibv;
    qp->ibv.handle      = qp->ibv.qp_num;
    qp->ibv.state       = IBV_QPS_RESET;
    qp->ibv.qp_type     = IBV_QPT_RC;
    /* what creation grants, whatever was asked (see softnic_create_qp) */
    qp->attr.cap.max_send_wr     = max_send_wr;
    qp->attr.cap.max_send_sge    = SN_MAX_SGE;
    qp->attr.cap.max_inline_data = max_inline;
    pthread_mutex_init(&qp->ibv.mutex, NULL);
    pthread_cond_init(&qp->ibv.cond, NULL);
    return qp;
}

void sn_qp_link(sn_context_t *ctx, sn_qp_t *qp)
{
    sn_list_add_tail(&ctx->qps, &qp->ctx_link);
    sn_list_add_tail(&qp->srq->qps, &qp->srq_link);
    sn_list_add_tail(&qp->srq->active, &qp->active_link);
    ++qp->srq->nactive;
    qp->busy_run = qp->srq->runs;
    sn_list_add_tail(&qp->send_cq->send_qps, &qp->cq_link);
    if (qp->ud == NULL) {
        sn_wake_slot_get(ctx, qp);  /* a UD ring, of many producers, is
                                       never parked */
    }
}

void sn_qp_free(sn_qp_t *qp)
{
    sn_ud_qp_cleanup(qp);
    sn_num_free(&qp->num_entry);    /* after its ring: nobody finds it */
    pthread_mutex_destroy(&qp->ibv.mutex);
    pthread_cond_destroy(&qp->ibv.cond);
    sn_wr_batch_free(qp->wr_batch);
    free(qp->fins);
    free(qp->sq_inline);
    free(qp->sq);
    free(qp);
}

static int sn_qp_init_attr_check(struct ibv_qp_init_attr *attr)
{
    if (((attr->qp_type != IBV_QPT_RC) && (attr->qp_type != IBV_QPT_UD)) ||
        (attr->send_cq == NULL) || (attr->recv_cq == NULL)) {
        return EOPNOTSUPP;      /* RC and UD QPs */
    }
    if ((attr->srq == NULL) && (sn_rq_qp_attr_check(attr) != 0)) {
        return EINVAL;          /* its own receive queue (softnic_rq.c) */
    }
    if (((attr->srq != NULL) && !sn_is_softnic(attr->srq->context)) ||
        !sn_is_softnic(attr->send_cq->context) ||
        (attr->cap.max_send_wr > SN_MAX_QP_WR) ||
        (attr->cap.max_send_sge > SN_MAX_SGE) ||
        (attr->cap.max_inline_data > SN_MAX_INLINE)) {
        return EINVAL;
    }
    if ((attr->qp_type == IBV_QPT_UD) && (attr->srq != NULL) &&
        (sn_srq(attr->srq)->rq == NULL)) {
        return EINVAL;          /* tag matching is RC's */
    }
    return 0;
}

/*
 * The inline size rdma-core's mlx5 grants (mlx5_calc_sq_size): an RC WQE
 * is 192 bytes of segments (control, UMR control, mkey context, KLMs: the
 * largest operation it may carry) plus the larger of the gather list and
 * the inline segment (4 bytes, then the data in 16-byte units), rounded up
 * to 64-byte blocks; the data may then fill the WQE.  So 64 asked gives
 * 124.  A QP without a send queue keeps what was asked.
 */
static uint32_t sn_qp_inline_grant(const struct ibv_qp_cap *cap)
{
    uint32_t gather = 192 + (cap->max_send_sge * 16);
    uint32_t inl    = cap->max_inline_data ?
                      192 + ((4 + cap->max_inline_data + 15) & ~15u) : 0;
    uint32_t wqe    = ((gather > inl ? gather : inl) + 63) & ~63u;

    if (cap->max_send_wr == 0) {
        return cap->max_inline_data;
    }
    return (wqe - 192 - 4 < SN_MAX_INLINE) ? wqe - 192 - 4 : SN_MAX_INLINE;
}

/* Where the QP receives: the SRQ given, which a QP may join, or a
 * receive queue of its own (softnic_rq.c) */
static sn_srq_t *sn_qp_create_rq(sn_context_t *ctx, struct ibv_pd *pd,
                                 struct ibv_qp_init_attr *attr)
{
    sn_srq_t *srq;
    int ret;

    if (attr->srq == NULL) {
        return sn_rq_own_create(ctx, pd, attr->recv_cq, &attr->cap);
    }
    srq = sn_srq(attr->srq);
    if (srq->rq != NULL) {
        sn_ctx_lock(ctx);
        ret = sn_rq_srq_attach(srq, attr->recv_cq);
        sn_ctx_unlock(ctx);
        if (ret != 0) {
            errno = ret;
            return NULL;
        }
    }
    return srq;
}

static void sn_qp_destroy_rq(sn_srq_t *srq, const struct ibv_qp_init_attr *attr)
{
    if (attr->srq == NULL) {
        sn_rq_own_destroy(srq);
    }
}

struct ibv_qp *softnic_create_qp(struct ibv_pd *pd,
                                 struct ibv_qp_init_attr *attr)
{
    sn_context_t *ctx = sn_ctx(pd->context);
    sn_srq_t *srq;
    sn_qp_t *qp;
    int ret;

    ret = sn_qp_init_attr_check(attr);
    if (ret != 0) {
        errno = ret;
        return NULL;
    }
    srq = sn_qp_create_rq(ctx, pd, attr);
    if (srq == NULL) {
        return NULL;
    }
    qp = sn_qp_alloc(ctx, srq, sn_cq((struct ibv_cq_ex*)attr->send_cq),
                     attr->cap.max_send_wr,
                     (attr->qp_type == IBV_QPT_UD) ?
                     sn_ud_inline_grant(&attr->cap) :
                     sn_qp_inline_grant(&attr->cap));
    if (qp == NULL) {
        sn_qp_destroy_rq(srq, attr);
        errno = ENOMEM;
        return NULL;
    }
    if (attr->srq == NULL) {
        srq->rq->owner            = qp;
        qp->ibv.srq               = NULL;
        qp->attr.cap.max_recv_wr  = attr->cap.max_recv_wr;
        qp->attr.cap.max_recv_sge = attr->cap.max_recv_sge;
    }
    ret = (attr->qp_type == IBV_QPT_UD) ? sn_ud_qp_init(qp) : 0;
    /* the gather list asked for, as mlx5 grants it (its sq.max_gs) */
    qp->attr.cap.max_send_sge    = attr->cap.max_send_sge;
    qp->ibv.pd         = pd;
    qp->ibv.recv_cq    = attr->recv_cq;
    qp->ibv.qp_context = attr->qp_context;
    qp->sq_sig_all     = attr->sq_sig_all;
    if (ret == 0) {
        ret = sn_ring_create(ctx, 'q', qp->ibv.qp_num,
                             (qp->ud != NULL) ? SN_UD_RING_SIZE : 0,
                             qp->ibv.qp_type, &qp->in_shm);
    }
    if (ret != 0) {
        sn_qp_free(qp);
        sn_qp_destroy_rq(srq, attr);
        errno = ret;
        return NULL;
    }
    sn_qp_set_in(qp);
    sn_qp_pkey_publish(qp);     /* index 0 until INIT says */
    sn_ctx_lock(ctx);
    sn_qp_link(ctx, qp);
    sn_ctx_unlock(ctx);
    attr->cap.max_send_sge    = qp->attr.cap.max_send_sge;
    attr->cap.max_inline_data = qp->attr.cap.max_inline_data;
    return &qp->ibv;
}

void sn_qp_destroy(sn_qp_t *qp)
{
    sn_context_t *ctx = sn_qp_ctx(qp);

    /* receives complete on the SRQ's CQ, sends on the send CQ */
    sn_cq_purge_qp(qp->srq->cq, qp->ibv.qp_num);
    if (qp->send_cq != qp->srq->cq) {
        sn_cq_purge_qp(qp->send_cq, qp->ibv.qp_num);
    }
    sn_srq_forget_qp(qp->srq, qp);
    sn_qp_events_drop(qp);
    if (qp->parked) {
        --qp->srq->nparked;
    } else if (!sn_list_empty(&qp->active_link)) {     /* linked */
        if (qp->srq->rr_next == &qp->active_link) {
            qp->srq->rr_next = qp->active_link.next;
        }
        sn_list_del(&qp->active_link);
        --qp->srq->nactive;
    }
    sn_wake_slot_put(ctx, qp);
    sn_list_del(&qp->srq_link);
    sn_list_del(&qp->cq_link);
    sn_list_del(&qp->busy_link);
    sn_list_del(&qp->ctx_link);

    sn_qp_backlog_withdraw(qp);  /* before its send queue goes */
    /* the peer's outstanding sends to us now fail */
    if ((qp->in != NULL) && sn_ctx_is_ours(ctx)) {
        atomic_store(&qp->in->hdr.closed, 1);
    }
    sn_shm_destroy(&qp->in_shm);      /* unlinks it if ours */
    sn_shm_destroy(&qp->out_shm);
    if (qp->peer != NULL) {
        sn_peer_put(ctx, qp->peer);
    }
    sn_qp_free(qp);
}

int softnic_destroy_qp(struct ibv_qp *ibv_qp)
{
    sn_qp_t *qp       = sn_qp(ibv_qp);
    sn_context_t *ctx = sn_qp_ctx(qp);
    sn_srq_t *own_rq  = ((qp->srq->rq != NULL) &&
                         (qp->srq->rq->owner == qp)) ? qp->srq : NULL;

    if (qp->passive) {
        return EBUSY;           /* its SRQ's: destroyed with the SRQ */
    }
    sn_qp_events_check_acked(qp);
    sn_ctx_lock(ctx);           /* the engine is between rounds */
    sn_qp_destroy(qp);
    sn_ctx_unlock(ctx);
    if (own_rq != NULL) {
        sn_rq_own_destroy(own_rq);
    }
    return 0;
}


/* ---- states ---- */

/* The attributes of an RC QP that modify_qp sets, by mask bit */
#define SN_QP_ATTR(_mask, _field) \
    { _mask, offsetof(struct ibv_qp_attr, _field), \
      sizeof(((struct ibv_qp_attr*)NULL)->_field) }

static const struct {
    int    mask;
    size_t offset, size;
} sn_qp_attr_fields[] = {
    SN_QP_ATTR(IBV_QP_ACCESS_FLAGS,       qp_access_flags),
    SN_QP_ATTR(IBV_QP_PKEY_INDEX,         pkey_index),
    SN_QP_ATTR(IBV_QP_PORT,               port_num),
    SN_QP_ATTR(IBV_QP_AV,                 ah_attr),
    SN_QP_ATTR(IBV_QP_PATH_MTU,           path_mtu),
    SN_QP_ATTR(IBV_QP_TIMEOUT,            timeout),
    SN_QP_ATTR(IBV_QP_RETRY_CNT,          retry_cnt),
    SN_QP_ATTR(IBV_QP_RNR_RETRY,          rnr_retry),
    SN_QP_ATTR(IBV_QP_RQ_PSN,             rq_psn),
    SN_QP_ATTR(IBV_QP_MAX_QP_RD_ATOMIC,   max_rd_atomic),
    SN_QP_ATTR(IBV_QP_MIN_RNR_TIMER,      min_rnr_timer),
    SN_QP_ATTR(IBV_QP_SQ_PSN,             sq_psn),
    SN_QP_ATTR(IBV_QP_MAX_DEST_RD_ATOMIC, max_dest_rd_atomic),
    SN_QP_ATTR(IBV_QP_DEST_QPN,           dest_qp_num),
    SN_QP_ATTR(IBV_QP_QKEY,               qkey)
};

/* Keeps what a successful modify_qp set, for softnic_query_qp */
static void sn_qp_attr_save(sn_qp_t *qp, const struct ibv_qp_attr *attr,
                            int attr_mask)
{
    size_t i;

    for (i = 0; i < SN_ARRAY_SIZE(sn_qp_attr_fields); ++i) {
        if (attr_mask & sn_qp_attr_fields[i].mask) {
            memcpy((char*)&qp->attr + sn_qp_attr_fields[i].offset,
                   (const char*)attr + sn_qp_attr_fields[i].offset,
                   sn_qp_attr_fields[i].size);
        }
    }
}

void sn_qp_set_error(sn_qp_t *qp)
{
    if (qp->ibv.state == IBV_QPS_ERR) {
        return;
    }
    sn_debug("QP 0x%x enters the error state", qp->ibv.qp_num);
    qp->ibv.state    = IBV_QPS_ERR;
    qp->last_wqe_due = true;    /* raised by the device's progress */
    sn_qp_mark_busy(qp);
    /* our peer will see us gone, as it would see an RC QP stop answering
     * (before the withdrawal: a peer that waits for our ring's backlog
     * lock, failing too, gives up) */
    if (sn_ctx_is_ours(sn_qp_ctx(qp))) {
        atomic_store(&qp->in->hdr.closed, 1);
    }
    sn_qp_backlog_withdraw(qp);  /* the peer's device takes no more */
    sn_qp_fins_complete(qp);
    sn_rq_qp_error(qp);          /* its own receives are flushed */
}

/*
 * Whose device the address names: the GID's user, or, without a GRH, ours
 * when dlid is the port's LID (as on an InfiniBand port, where the LID
 * routes within the subnet; a RoCE address needs a GRH, as the kernel
 * says: EINVAL).  A GID of another host or user is unreachable.
 */
int sn_av_uid(sn_context_t *ctx, const struct ibv_ah_attr *ah, uint32_t *uid)
{
    sn_dev_addr_t peer;

    if (ah->port_num != 1) {
        return EINVAL;
    }
    if (!ah->is_global) {
        if ((ctx->link_layer != IBV_LINK_LAYER_INFINIBAND) ||
            (ctx->port.lid == 0) || (ah->dlid != ctx->port.lid)) {
            return EINVAL;
        }
        *uid = ctx->proc.uid;
        return 0;
    }
    if (!sn_gid_unpack(&ah->grh.dgid, &peer)) {
        return EINVAL;
    }
    if (!sn_reachable(ctx, &peer)) {
        return EHOSTUNREACH;
    }
    *uid = peer.uid;
    return 0;
}

/* INIT -> RTR: the peer is the QP dest_qp_num of the device the address
 * names; the registry says which process and context own it */
static int sn_qp_to_rtr(sn_qp_t *qp, const struct ibv_qp_attr *attr)
{
    sn_context_t *ctx = sn_qp_ctx(qp);
    sn_proc_id_t owner;
    uint32_t uid, dev_seq;
    int ret;

    ret = sn_av_uid(ctx, &attr->ah_attr, &uid);
    if (ret != 0) {
        sn_debug("QP 0x%x: RTR needs a GRH naming a software NIC, or the "
                 "port's LID", qp->ibv.qp_num);
        return ret;
    }
    ret = sn_num_owner(uid, 'q', attr->dest_qp_num, &owner, &dev_seq);
    if (ret != 0) {
        sn_debug("QP 0x%x: no QP 0x%x on the device: %s", qp->ibv.qp_num,
                 attr->dest_qp_num, strerror(ret));
        return ECONNREFUSED;
    }
    ret = sn_ring_attach(&owner, dev_seq, 'q', attr->dest_qp_num, IBV_QPT_RC,
                         &qp->out_shm);
    if (ret != 0) {
        return ret;
    }
    ret = sn_qp_set_out(ctx, qp, &owner, (uint16_t)dev_seq);
    if (ret != 0) {
        sn_shm_detach(&qp->out_shm);
    }
    return ret;
}

/* The attributes a transition must carry (as the kernel checks them) */
static int sn_qp_required_mask(enum ibv_qp_state from, enum ibv_qp_state to)
{
    if ((from == IBV_QPS_RESET) && (to == IBV_QPS_INIT)) {
        return IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
               IBV_QP_ACCESS_FLAGS;
    } else if ((from == IBV_QPS_INIT) && (to == IBV_QPS_INIT)) {
        return IBV_QP_STATE;
    } else if ((from == IBV_QPS_INIT) && (to == IBV_QPS_RTR)) {
        return IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
               IBV_QP_MIN_RNR_TIMER;
    } else if ((from == IBV_QPS_RTR) && (to == IBV_QPS_RTS)) {
        return IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
               IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    } else if (((from == IBV_QPS_RTS) && (to == IBV_QPS_RTS)) ||
               (to == IBV_QPS_ERR)) {
        return IBV_QP_STATE;
    }
    return -1;                  /* not a transition a QP makes */
}

static int sn_qp_modify(sn_qp_t *qp, struct ibv_qp_attr *attr,
                        int attr_mask)
{
    enum ibv_qp_state from = qp->ibv.state;
    enum ibv_qp_state to   = (attr_mask & IBV_QP_STATE) ? attr->qp_state :
                                                          from;
    int required           = sn_qp_required_mask(from, to);
    bool bad_mask          = (qp->ud != NULL) ?
                             (sn_ud_modify_check(qp, from, to,
                                                 attr_mask) != 0) :
                             ((required < 0) ||
                              ((attr_mask & required) != required));
    int ret;

    if (qp->passive || bad_mask ||
        ((attr_mask & IBV_QP_PORT) && (attr->port_num != 1)) ||
        ((attr_mask & IBV_QP_PKEY_INDEX) &&
         (attr->pkey_index >= sn_qp_ctx(qp)->port.npkeys)) ||
        ((attr_mask & IBV_QP_CUR_STATE) && (attr->cur_qp_state != from)) ||
        ((attr_mask & IBV_QP_RETRY_CNT) && (attr->retry_cnt > 7))) {
        return EINVAL;          /* retry_cnt: mlx5 writes it past its 3 bits */
    }

    if ((from == IBV_QPS_INIT) && (to == IBV_QPS_RTR) && (qp->ud == NULL)) {
        ret = sn_qp_to_rtr(qp, attr);
        if (ret != 0) {
            return ret;
        }
        sn_qp_pkey_judge(qp, (attr_mask & IBV_QP_PKEY_INDEX) ?
                             attr->pkey_index : qp->attr.pkey_index);
    } else if ((to == IBV_QPS_ERR) && (from != IBV_QPS_ERR)) {
        sn_qp_set_error(qp);
        sn_qp_fail_from(qp, qp->sq_head, IBV_WC_WR_FLUSH_ERR);
    }
    sn_qp_attr_save(qp, attr, attr_mask);
    qp->attr.timeout &= 31;     /* mlx5 keeps 5 bits (timeout << 3 in a u8) */
    if (attr_mask & IBV_QP_PKEY_INDEX) {
        sn_qp_pkey_publish(qp);
    }
    qp->ibv.state = to;
    if ((to == IBV_QPS_RTS) && (qp->out != NULL)) {
        /* the responder's RNR waits count our retries (softnic_rq.c) */
        qp->out->rnr_retry = qp->attr.rnr_retry;
    }
    if (to == IBV_QPS_RTR) {
        /* parked before it took anything: what waits for RTR is taken */
        sn_qp_unpark(qp);
    }
    if (qp->ud != NULL) {
        sn_ud_modified(qp, attr, attr_mask);
    }
    return 0;
}

int softnic_modify_qp(struct ibv_qp *ibv_qp, struct ibv_qp_attr *attr,
                      int attr_mask)
{
    sn_qp_t *qp       = sn_qp(ibv_qp);
    sn_context_t *ctx = sn_qp_ctx(qp);
    int ret;

    sn_ctx_lock(ctx);
    ret = sn_qp_modify(qp, attr, attr_mask);
    sn_ctx_unlock(ctx);
    /* messages waiting for RTR are taken, flushed sends complete */
    sn_ctx_kick(ctx, false);
    return ret;
}

/* As the kernel's query: every attribute, whatever attr_mask asks */
int softnic_query_qp(struct ibv_qp *ibv_qp, struct ibv_qp_attr *attr,
                     int attr_mask, struct ibv_qp_init_attr *init_attr)
{
    sn_qp_t *qp       = sn_qp(ibv_qp);
    sn_context_t *ctx = sn_qp_ctx(qp);

    sn_ctx_lock(ctx);           /* the engine may fail the QP */
    *attr              = qp->attr;
    attr->qp_state     = qp->ibv.state;
    attr->cur_qp_state = qp->ibv.state;
    sn_ctx_unlock(ctx);

    memset(init_attr, 0, sizeof(*init_attr));
    init_attr->qp_context = qp->ibv.qp_context;
    init_attr->send_cq    = qp->ibv.send_cq;
    init_attr->recv_cq    = qp->ibv.recv_cq;
    init_attr->srq        = qp->ibv.srq;
    init_attr->cap        = qp->attr.cap;
    init_attr->qp_type    = qp->ibv.qp_type;
    init_attr->sq_sig_all = qp->sq_sig_all;
    return 0;
}
