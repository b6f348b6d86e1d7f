/*
 * Software NIC: unreliable datagram QPs (softnic_ud.h).
 *
 * A UD QP has a send queue and a receive queue of its own (or a basic
 * SRQ), no peer: each send names its destination (an address handle, a QP
 * number and a Q_Key).  The states are the kernel's for UD
 * (ib_modify_qp_is_ok): RESET -> INIT with the P_Key index, port and
 * Q_Key, INIT -> RTR (nothing required), RTR -> RTS with the send PSN; a
 * send that fails locally moves the QP to SQE, where later sends are
 * flushed and receives go on (IBTA 10.3.1; SQE -> RTS recovers).
 *
 * A send is complete when its datagram is on the destination's ring, or
 * dropped: on a fabric nothing answers a datagram, so the completion is
 * local, and a datagram nobody takes is lost without a word.  Its errors
 * are local ones: a bad lkey (IBV_WC_LOC_PROT_ERR), a message longer than
 * the path MTU (IBV_WC_LOC_LEN_ERR).
 *
 * A receive gets the 40 bytes of the GRH first (written when the sender's
 * address was global, as it always is on this port: IBV_WC_GRH), then the
 * payload; byte_len counts both, with src_qp, slid, sl and dlid_path_bits
 * of the sender (rdma-core providers/mlx5/cq.c handle_responder; the
 * kernel's rxe writes the 40 bytes likewise, rxe_resp.c execute).  No
 * receive posted: the datagram is dropped.  Longer than the receive: the
 * receive completes with IBV_WC_LOC_LEN_ERR and the QP enters the error
 * state (no source says what mlx5 does; rxe drops the datagram: the
 * harsher reading).
 */
#include "softnic_int.h"

#include <endian.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* The GRH's next header: IBA transport, or UDP (RoCE v2) */
#define SN_UD_NEXT_HDR_IB      0x1b
#define SN_UD_NEXT_HDR_UDP     17
/* What the GRH's payload length counts besides the data: BTH (12), DETH
 * (8), ICRC (4); and, on RoCE v2, the UDP header (8) */
#define SN_UD_TRANSPORT_LEN    (12 + 8 + 4)
#define SN_UD_UDP_LEN          8
/* mlx5's CQE sl on RoCE is the packet's type (as UCX's ud_iface.h reads
 * the PRM): bit 3 UDP, bits 2:0 the L3 header, 1 for IPv6 */
#define SN_UD_ROCE_V2_IPV6     0x9


/* ---- the QP ---- */

int sn_ud_qp_init(sn_qp_t *qp)
{
    qp->ud = calloc(1, sizeof(*qp->ud));
    if (qp->ud == NULL) {
        return ENOMEM;
    }
    qp->ibv.qp_type = IBV_QPT_UD;
    return 0;
}

void sn_ud_qp_cleanup(sn_qp_t *qp)
{
    sn_context_t *ctx = sn_qp_ctx(qp);
    sn_ud_dest_t *dest;
    uint32_t i;

    if (qp->ud == NULL) {
        return;
    }
    for (i = 0; (qp->ud->dests != NULL) && (i <= qp->ud->dest_mask); ++i) {
        dest = qp->ud->dests[i];
        if (dest == NULL) {
            continue;
        }
        if (dest->ring != NULL) {
            sn_shm_detach(&dest->shm);
            sn_peer_put(ctx, dest->peer);
        }
        free(dest);
    }
    free(qp->ud->dests);
    free(qp->ud);
    qp->ud = NULL;
}

/*
 * The attributes a UD transition requires and those it may carry, as the
 * kernel's qp_state_table has them for IB_QPT_UD; anything else is
 * EINVAL.  Transitions to RESET and the SQD states are not supported.
 */
int sn_ud_modify_check(const sn_qp_t *qp, enum ibv_qp_state from,
                       enum ibv_qp_state to, int attr_mask)
{
    int req = IBV_QP_STATE, opt = 0;

    if (to == IBV_QPS_ERR) {
        req = IBV_QP_STATE;
    } else if ((from == IBV_QPS_RESET) && (to == IBV_QPS_INIT)) {
        req |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
    } else if ((from == IBV_QPS_INIT) && (to == IBV_QPS_INIT)) {
        opt  = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
    } else if ((from == IBV_QPS_INIT) && (to == IBV_QPS_RTR)) {
        opt  = IBV_QP_PKEY_INDEX | IBV_QP_QKEY;
    } else if ((from == IBV_QPS_RTR) && (to == IBV_QPS_RTS)) {
        req |= IBV_QP_SQ_PSN;
        opt  = IBV_QP_CUR_STATE | IBV_QP_QKEY;
    } else if (((from == IBV_QPS_RTS) || (from == IBV_QPS_SQE)) &&
               (to == IBV_QPS_RTS)) {
        opt  = IBV_QP_CUR_STATE | IBV_QP_QKEY;
    } else {
        return EINVAL;
    }
    if (((attr_mask & req) != req) || (attr_mask & ~(req | opt))) {
        return EINVAL;
    }
    return 0;
}

/* After a transition: what senders read of us in our ring */
void sn_ud_modified(sn_qp_t *qp, const struct ibv_qp_attr *attr,
                    int attr_mask)
{
    if (attr_mask & IBV_QP_QKEY) {
        qp->ud->qkey = attr->qkey;
        atomic_store(&qp->in->qkey, attr->qkey);
    }
    atomic_store(&qp->in->rx_on, sn_qp_connected(qp));
}

/* The inline size mlx5 grants a UD QP (mlx5_calc_sq_size): its WQE holds
 * the control and datagram segments, then the larger of the gather list
 * and the inline segment (4 bytes and the data, in 16-byte units), in
 * 64-byte blocks; the data may fill it */
uint32_t sn_ud_inline_grant(const struct ibv_qp_cap *cap)
{
    uint32_t gather = SN_UD_WQE_OVERHEAD + (cap->max_send_sge * 16);
    uint32_t inl    = cap->max_inline_data ?
                      SN_UD_WQE_OVERHEAD +
                      ((4 + cap->max_inline_data + 15) & ~15u) : 0;
    uint32_t wqe    = ((gather > inl ? gather : inl) + 63) & ~63u;
    uint32_t grant  = wqe - SN_UD_WQE_OVERHEAD - 4;

    return (grant < SN_MAX_INLINE) ? grant : SN_MAX_INLINE;
}


/* ---- destinations ---- */

static uint32_t sn_ud_dest_hash(uint32_t uid, uint32_t qpn)
{
    return (qpn * 0x9e3779b1u) ^ (uid * 0x85ebca6bu);
}

/* The slot of (uid, qpn) in the table: its entry, or the empty slot
 * where it goes */
static sn_ud_dest_t **sn_ud_dest_slot(sn_ud_t *ud, uint32_t uid, uint32_t qpn)
{
    uint32_t i = sn_ud_dest_hash(uid, qpn) & ud->dest_mask;
    sn_ud_dest_t *d;

    while ((d = ud->dests[i]) != NULL) {
        if ((d->qpn == qpn) && (d->uid == uid)) {
            break;
        }
        i = (i + 1) & ud->dest_mask;
    }
    return &ud->dests[i];
}

/* Room for one more entry: the table stays at most half full */
static int sn_ud_dest_grow(sn_ud_t *ud)
{
    uint32_t size = (ud->dests == NULL) ? 16 : 2 * (ud->dest_mask + 1);
    sn_ud_dest_t **old = ud->dests;
    uint32_t old_size  = (old == NULL) ? 0 : ud->dest_mask + 1;
    uint32_t i;

    if ((ud->dests != NULL) && (2 * (ud->ndests + 1) <= old_size)) {
        return 0;
    }
    ud->dests = calloc(size, sizeof(*ud->dests));
    if (ud->dests == NULL) {
        ud->dests = old;
        return ENOMEM;
    }
    ud->dest_mask = size - 1;
    for (i = 0; i < old_size; ++i) {
        if (old[i] != NULL) {
            *sn_ud_dest_slot(ud, old[i]->uid, old[i]->qpn) = old[i];
        }
    }
    free(old);
    return 0;
}

/* Maps the ring of QP qpn of the device uid names, if it is a UD QP's */
static int sn_ud_dest_attach(sn_context_t *ctx, sn_ud_dest_t *dest)
{
    sn_proc_id_t owner;
    uint32_t dev_seq;
    int ret;

    ret = sn_num_owner(dest->uid, 'q', dest->qpn, &owner, &dev_seq);
    if (ret == 0) {
        ret = sn_ring_attach(&owner, dev_seq, 'q', dest->qpn, IBV_QPT_UD,
                             &dest->shm);
    }
    if (ret != 0) {
        return ret;
    }
    ret = sn_peer_get(ctx, &owner, (uint16_t)dev_seq, &dest->peer);
    if (ret != 0) {
        sn_shm_detach(&dest->shm);
        return ret;
    }
    dest->ring = dest->shm.base;
    dest->mask = dest->ring->size - 1;
    return 0;
}

static void sn_ud_dest_detach(sn_context_t *ctx, sn_ud_dest_t *dest)
{
    sn_shm_detach(&dest->shm);
    sn_peer_put(ctx, dest->peer);
    dest->ring = NULL;
    dest->peer = NULL;
}

/*
 * The ring a datagram to (ah, qpn) goes into, or NULL (it is dropped).  A
 * ring closed by its owner (its QP destroyed, or in the error state) is
 * let go; a number not found is looked up again only after
 * SN_UD_RETRY_NS, so that sends to a QP that is gone cost no look at the
 * registry each.
 */
static sn_ud_dest_t *sn_ud_dest(sn_qp_t *qp, const sn_ah_t *ah, uint32_t qpn)
{
    sn_context_t *ctx = sn_qp_ctx(qp);
    sn_ud_dest_t **slot, *dest;
    uint64_t now;

    if (!ah->reachable) {
        return NULL;
    }
    if ((qp->ud->dests == NULL) || (2 * (qp->ud->ndests + 1) >
                                    qp->ud->dest_mask + 1)) {
        if (sn_ud_dest_grow(qp->ud) != 0) {
            return NULL;
        }
    }
    slot = sn_ud_dest_slot(qp->ud, ah->uid, qpn);
    dest = *slot;
    if (sn_likely((dest != NULL) && (dest->ring != NULL) &&
                  !atomic_load_explicit(&dest->ring->hdr.closed,
                                        memory_order_relaxed))) {
        return dest;
    }
    if (dest == NULL) {
        dest = calloc(1, sizeof(*dest));
        if (dest == NULL) {
            return NULL;
        }
        dest->uid = ah->uid;
        dest->qpn = qpn;
        *slot     = dest;
        ++qp->ud->ndests;
    } else if (dest->ring != NULL) {
        sn_ud_dest_detach(ctx, dest);   /* closed: its number may be a
                                           new QP's by now */
    }
    now = sn_now_ns();
    if (now < dest->retry_ns) {
        return NULL;
    }
    if (sn_ud_dest_attach(ctx, dest) != 0) {
        sn_debug("QP 0x%x: no UD QP 0x%x to send to: datagrams dropped",
                 qp->ibv.qp_num, qpn);
        dest->retry_ns = now + SN_UD_RETRY_NS;
        return NULL;
    }
    return dest;
}


/* ---- the ring, as one of many producers ---- */

/* A producer that died holding the lock left prod_tail before what it
 * published: the end is past the last record whose type is set (each
 * publication wrote type 0 where the next record starts), at or past the
 * consumer's position (which stops at type 0), which may already be past
 * prod_tail */
static void sn_ud_ring_recover(sn_ring_ctl_t *ring, uint32_t mask)
{
    uint64_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
    uint64_t pos  = ((int64_t)(head - ring->prod_tail) > 0) ? head :
                                                             ring->prod_tail;
    sn_rec_t *rec;

    while (pos - head < mask + 1) {
        rec = sn_ring_rec(ring, mask, pos);
        if (sn_rec_type(rec) == 0) {
            break;
        }
        pos += sn_rec_size(rec->len);
    }
    ring->prod_tail = pos;
}

static void sn_ud_ring_lock(sn_context_t *ctx, sn_ring_ctl_t *ring,
                            uint32_t mask)
{
    uint64_t me = sn_proc_word(&ctx->proc);
    uint64_t held;
    unsigned spins;

    for (spins = 1;; ++spins) {
        held = 0;
        if (atomic_compare_exchange_weak_explicit(&ring->prod_lock, &held,
                                                  me, memory_order_acquire,
                                                  memory_order_relaxed)) {
            return;
        }
        if ((spins % 1024) != 0) {
            continue;
        }
        if ((held != 0) && !sn_proc_word_alive(held) &&
            atomic_compare_exchange_strong_explicit(&ring->prod_lock, &held,
                                                    me,
                                                    memory_order_acquire,
                                                    memory_order_relaxed)) {
            sn_debug("a producer of a UD ring died holding it: taken over");
            sn_ud_ring_recover(ring, mask);
            return;
        }
        sched_yield();
    }
}

static void sn_ud_ring_unlock(sn_ring_ctl_t *ring)
{
    atomic_store_explicit(&ring->prod_lock, 0, memory_order_release);
}

/* Type 0 where the next record starts (see sn_ring_ctl_t) */
static void sn_ud_ring_terminate(sn_ring_ctl_t *ring, uint32_t mask,
                                 uint64_t pos)
{
    __atomic_store_n(&sn_ring_rec(ring, mask, pos)->type, 0,
                     __ATOMIC_RELAXED);
}

/* Room for a record of len bytes at prod_tail (the lock held), padding to
 * the end of the buffer first if it does not fit there; NULL when full */
static sn_rec_t *sn_ud_ring_reserve(sn_ring_ctl_t *ring, uint32_t mask,
                                    uint32_t len)
{
    uint32_t size   = sn_rec_size(len);
    uint32_t pos    = (uint32_t)(ring->prod_tail & mask);
    uint32_t to_end = mask + 1 - pos;
    uint64_t need   = ((size > to_end) ? (uint64_t)to_end + size : size) +
                      SN_CACHE_LINE;
    uint64_t head   = atomic_load_explicit(&ring->head, memory_order_acquire);
    sn_rec_t *pad;

    if (ring->prod_tail + need - head > (uint64_t)mask + 1) {
        return NULL;
    }
    if (size > to_end) {
        pad      = sn_ring_rec(ring, mask, ring->prod_tail);
        pad->len = to_end - sizeof(sn_rec_t);
        sn_ud_ring_terminate(ring, mask, ring->prod_tail + to_end);
        __atomic_store_n(&pad->type, SN_REC_PAD, __ATOMIC_RELEASE);
        ring->prod_tail += to_end;
    }
    return sn_ring_rec(ring, mask, ring->prod_tail);
}

static void sn_ud_ring_publish(sn_ring_ctl_t *ring, uint32_t mask,
                               sn_rec_t *rec, uint32_t len, uint16_t flags,
                               uint32_t imm_data)
{
    rec->len        = len;
    rec->flags      = flags;
    rec->imm_data   = imm_data;
    rec->write_len  = 0;
    sn_ud_ring_terminate(ring, mask, ring->prod_tail + sn_rec_size(len));
    __atomic_store_n(&rec->type, SN_REC_MSG, __ATOMIC_RELEASE);
    ring->prod_tail += sn_rec_size(len);
}


/* ---- sending ---- */

static void sn_ud_hdr_fill(sn_qp_t *qp, const sn_ah_t *ah, sn_ud_hdr_t *hdr)
{
    sn_context_t *ctx = sn_qp_ctx(qp);

    hdr->src_qp         = qp->ibv.qp_num;
    hdr->slid           = (uint16_t)(ctx->port.lid |
                                     (ah->attr.src_path_bits & 0x7f));
    hdr->sl             = ah->attr.sl & 0xf;
    hdr->grh            = ah->attr.is_global;
    hdr->dlid_path_bits = 0;    /* our port's LMC is 0 */
    hdr->hop_limit      = ah->attr.grh.hop_limit;
    hdr->traffic_class  = ah->attr.grh.traffic_class;
    hdr->reserved       = 0;
    hdr->flow_label     = ah->attr.grh.flow_label & 0xfffff;
    hdr->sgid           = ctx->gid;
    hdr->dgid           = ah->attr.grh.dgid;
}

static void sn_ud_gather(const struct ibv_send_wr *wr, uint8_t *dst)
{
    int i;

    for (i = 0; i < wr->num_sge; ++i) {
        memcpy(dst, (void *)(uintptr_t)wr->sg_list[i].addr,
               wr->sg_list[i].length);
        dst += wr->sg_list[i].length;
    }
}

/* Does the receiving QP take this datagram?  (A fabric drops it quietly
 * where the answer is no: Q_Key and P_Key violations are counted, never
 * answered) */
static bool sn_ud_dest_takes(sn_qp_t *qp, const sn_ring_ctl_t *ring,
                             uint32_t qkey)
{
    uint16_t pkey = sn_port_pkey(sn_qp_ctx(qp), qp->attr.pkey_index);

    return atomic_load_explicit(&ring->rx_on, memory_order_acquire) &&
           (atomic_load_explicit(&ring->qkey, memory_order_relaxed) ==
            qkey) &&
           sn_pkey_match(pkey, (uint16_t)atomic_load_explicit(
                                   &ring->pkey, memory_order_relaxed));
}

/* One datagram onto the wire: its local status (a datagram dropped is a
 * success) */
static enum ibv_wc_status sn_ud_send(sn_qp_t *qp, const struct ibv_send_wr *wr,
                                     uint32_t len)
{
    sn_context_t *ctx = sn_qp_ctx(qp);
    const sn_ah_t *ah = sn_ah(wr->wr.ud.ah);
    uint32_t qkey     = wr->wr.ud.remote_qkey;
    sn_ud_dest_t *dest;
    sn_ring_ctl_t *ring;
    sn_rec_t *rec;
    int i;

    if (!(wr->send_flags & IBV_SEND_INLINE)) {
        for (i = 0; i < wr->num_sge; ++i) {
            if (!sn_key_check(ctx->seg, wr->sg_list[i].lkey,
                              wr->sg_list[i].addr, wr->sg_list[i].length,
                              0)) {
                return IBV_WC_LOC_PROT_ERR;
            }
        }
    }
    if (len > (128u << ctx->port.mtu)) {    /* a datagram is one packet */
        return IBV_WC_LOC_LEN_ERR;
    }
    if (qkey & SN_UD_QKEY_OWN) {
        qkey = qp->ud->qkey;
    }
    dest = sn_ud_dest(qp, ah, wr->wr.ud.remote_qpn);
    if ((dest == NULL) || !sn_ud_dest_takes(qp, dest->ring, qkey)) {
        return IBV_WC_SUCCESS;
    }
    ring = dest->ring;
    sn_ud_ring_lock(ctx, ring, dest->mask);
    rec = sn_ud_ring_reserve(ring, dest->mask, sizeof(sn_ud_hdr_t) + len);
    if (rec != NULL) {
        sn_ud_hdr_fill(qp, ah, (sn_ud_hdr_t *)(rec + 1));
        sn_ud_gather(wr, (uint8_t *)(rec + 1) + sizeof(sn_ud_hdr_t));
        sn_ud_ring_publish(ring, dest->mask, rec, sizeof(sn_ud_hdr_t) + len,
                           ((wr->opcode == IBV_WR_SEND_WITH_IMM) ?
                            SN_REC_F_IMM : 0) |
                           ((wr->send_flags & IBV_SEND_SOLICITED) ?
                            SN_REC_F_SOLICITED : 0), wr->imm_data);
    }
    sn_ud_ring_unlock(ring);
    if (rec != NULL) {
        sn_db_ring(dest->peer->seg);
    }
    return IBV_WC_SUCCESS;
}

/* A work request's checks at post (mlx5's _mlx5_post_send: ENOMEM past
 * the gather entries or inline size granted; an opcode UD has not, or no
 * address handle, EINVAL) */
static int sn_ud_wr_check(const sn_qp_t *qp, const struct ibv_send_wr *wr,
                          uint32_t *len_p)
{
    uint64_t len = 0;
    int i;

    if (((wr->opcode != IBV_WR_SEND) &&
         (wr->opcode != IBV_WR_SEND_WITH_IMM)) || (wr->wr.ud.ah == NULL) ||
        (wr->wr.ud.ah->context != qp->ibv.context) || (wr->num_sge < 0)) {
        return EINVAL;
    }
    if ((uint32_t)wr->num_sge > qp->attr.cap.max_send_sge) {
        return ENOMEM;
    }
    for (i = 0; i < wr->num_sge; ++i) {
        len += wr->sg_list[i].length;
    }
    if ((wr->send_flags & IBV_SEND_INLINE) &&
        (len > qp->attr.cap.max_inline_data)) {
        return ENOMEM;
    }
    *len_p = (len > UINT32_MAX) ? UINT32_MAX : (uint32_t)len;
    return 0;
}

/* ibv_post_send on a UD QP (the device lock held): each datagram goes now,
 * and its completion waits in the send queue for the next poll */
int sn_ud_post_send(sn_qp_t *qp, struct ibv_send_wr *wr,
                    struct ibv_send_wr **bad_wr)
{
    enum ibv_wc_status status;
    sn_wqe_t *wqe;
    uint32_t len;
    int ret = 0;

    for (; wr != NULL; wr = wr->next) {
        if ((qp->ibv.state != IBV_QPS_RTS) &&
            (qp->ibv.state != IBV_QPS_SQE) &&
            (qp->ibv.state != IBV_QPS_ERR)) {
            ret = EINVAL;       /* not ready to send */
            break;
        }
        if (qp->sq_tail - qp->sq_head >= qp->sq_size) {
            ret = ENOMEM;
            break;
        }
        ret = sn_ud_wr_check(qp, wr, &len);
        if (ret != 0) {
            break;
        }
        wqe           = sn_sq_wqe(qp, qp->sq_tail++);
        wqe->wr_id    = wr->wr_id;
        wqe->opcode   = (uint8_t)wr->opcode;
        wqe->signaled = sn_wr_signaled(qp, wr);
        wqe->byte_len = len;
        qp->sig_pending += wqe->signaled;
        status        = (qp->ibv.state == IBV_QPS_RTS) ?
                        sn_ud_send(qp, wr, len) : IBV_WC_WR_FLUSH_ERR;
        sn_wqe_done(wqe, status);
        if ((status != IBV_WC_SUCCESS) && (qp->ibv.state == IBV_QPS_RTS)) {
            sn_debug("QP 0x%x: send failed (%s): send queue error state",
                     qp->ibv.qp_num, ibv_wc_status_str(status));
            qp->ibv.state = IBV_QPS_SQE;
        }
    }
    qp->sq_sent = qp->sq_tail;
    if (ret != 0) {
        *bad_wr = wr;
    }
    if (qp->sq_head != qp->sq_tail) {
        sn_qp_mark_busy(qp);    /* its completions, at the next poll */
    }
    return ret;
}


/* ---- receiving ---- */

/* The GRH a datagram had (or, on RoCE v2, its IPv6 header) */
static void sn_ud_grh_build(sn_context_t *ctx, const sn_ud_hdr_t *hdr,
                            uint32_t len, uint16_t flags, struct ibv_grh *grh)
{
    bool roce        = (ctx->link_layer == IBV_LINK_LAYER_ETHERNET);
    uint32_t paylen  = len + SN_UD_TRANSPORT_LEN + ((-len) & 3) +
                       ((flags & SN_REC_F_IMM) ? 4 : 0) +
                       (roce ? SN_UD_UDP_LEN : 0);

    grh->version_tclass_flow = htobe32((6u << 28) |
                                       ((uint32_t)hdr->traffic_class << 20) |
                                       hdr->flow_label);
    grh->paylen    = htobe16((uint16_t)paylen);
    grh->next_hdr  = roce ? SN_UD_NEXT_HDR_UDP : SN_UD_NEXT_HDR_IB;
    grh->hop_limit = hdr->hop_limit;
    grh->sgid      = hdr->sgid;
    grh->dgid      = hdr->dgid;
}

/* May the device write len bytes of the receive? */
static bool sn_ud_rwqe_keys_ok(sn_context_t *ctx, const sn_rwqe_t *wqe,
                               uint32_t len)
{
    uint32_t piece, i;

    for (i = 0; (i < wqe->num_sge) && (len != 0); ++i) {
        piece = (len < wqe->sge[i].length) ? len : wqe->sge[i].length;
        if (!sn_key_check(ctx->seg, wqe->sge[i].lkey, wqe->sge[i].addr,
                          piece, 0)) {
            return false;
        }
        len -= piece;
    }
    return true;
}

/* len bytes of src at offset off of the receive's scatter list; src NULL
 * skips them (a GRH that was not there) */
static void sn_ud_scatter(const sn_rwqe_t *wqe, uint32_t off, const void *src,
                          uint32_t len)
{
    const uint8_t *from = src;
    uint32_t i, piece, skip;

    for (i = 0; (i < wqe->num_sge) && (len != 0); ++i) {
        if (off >= wqe->sge[i].length) {
            off -= wqe->sge[i].length;
            continue;
        }
        skip  = off;
        off   = 0;
        piece = wqe->sge[i].length - skip;
        piece = (len < piece) ? len : piece;
        if (from != NULL) {
            memcpy((uint8_t *)(uintptr_t)wqe->sge[i].addr + skip, from,
                   piece);
            from += piece;
        }
        len -= piece;
    }
}

/* The receive fails: its completion, then the QP's error state */
static void sn_ud_rx_fail(sn_srq_t *srq, sn_qp_t *qp, const sn_rwqe_t *wqe,
                          enum ibv_wc_status status)
{
    sn_cqe_t *wc = sn_cq_push(srq->cq);

    wc->wr_id      = wqe->wr_id;
    wc->status     = status;
    wc->opcode     = IBV_WC_SEND;   /* as every error CQE on mlx5 */
    wc->qp_num     = qp->ibv.qp_num;
    wc->vendor_err = 0x10 + status;
    sn_rq_taken(srq);
    sn_debug("QP 0x%x: UD receive failed: %s", qp->ibv.qp_num,
             ibv_wc_status_str(status));
    sn_qp_set_error(qp);
}

/* A datagram into the oldest receive */
static void sn_ud_deliver(sn_srq_t *srq, sn_qp_t *qp, const sn_rec_t *rec)
{
    sn_context_t *ctx        = sn_ctx(srq->ibv.context);
    const sn_ud_hdr_t *hdr   = (const sn_ud_hdr_t *)(rec + 1);
    uint32_t len             = rec->len - (uint32_t)sizeof(*hdr);
    sn_rq_t *rq              = srq->rq;
    const sn_rwqe_t *wqe     = &rq->wqes[rq->head & rq->mask];
    bool roce                = (ctx->link_layer == IBV_LINK_LAYER_ETHERNET);
    struct ibv_grh grh;
    sn_cqe_t *wc;

    if (SN_UD_GRH_LEN + len > wqe->length) {
        sn_ud_rx_fail(srq, qp, wqe, IBV_WC_LOC_LEN_ERR);
        return;
    }
    if (!sn_ud_rwqe_keys_ok(ctx, wqe, SN_UD_GRH_LEN + len)) {
        sn_ud_rx_fail(srq, qp, wqe, IBV_WC_LOC_PROT_ERR);
        return;
    }
    if (hdr->grh) {
        sn_ud_grh_build(ctx, hdr, len, rec->flags, &grh);
    }
    sn_ud_scatter(wqe, 0, hdr->grh ? &grh : NULL, SN_UD_GRH_LEN);
    sn_ud_scatter(wqe, SN_UD_GRH_LEN, hdr + 1, len);

    wc                 = sn_cq_push(srq->cq);
    wc->wr_id          = wqe->wr_id;
    wc->status         = IBV_WC_SUCCESS;
    wc->opcode         = IBV_WC_RECV;
    wc->byte_len       = SN_UD_GRH_LEN + len;
    wc->qp_num         = qp->ibv.qp_num;
    wc->src_qp         = hdr->src_qp;
    wc->wc_flags       = hdr->grh ? IBV_WC_GRH : 0;
    wc->slid           = roce ? 0 : hdr->slid;
    wc->sl             = roce ? SN_UD_ROCE_V2_IPV6 : hdr->sl;
    wc->dlid_path_bits = hdr->dlid_path_bits;
    wc->solicited      = !!(rec->flags & SN_REC_F_SOLICITED);
    if (rec->flags & SN_REC_F_IMM) {
        wc->wc_flags |= IBV_WC_WITH_IMM;
        wc->imm_data  = rec->imm_data;
    }
    sn_rq_taken(srq);
}

/* The oldest datagram on the QP's ring: delivered, or dropped when no
 * receive is posted.  0 when one was taken, EAGAIN when none waits */
int sn_ud_step_arrival(sn_srq_t *srq, sn_qp_t *qp)
{
    sn_rec_t *rec;

    if (!sn_qp_connected(qp) || !sn_ring_peek(qp, &rec)) {
        return EAGAIN;
    }
    if (sn_unlikely(rec->len < sizeof(sn_ud_hdr_t))) {
        sn_debug("QP 0x%x: malformed datagram dropped", qp->ibv.qp_num);
    } else if (srq->rq->head != srq->rq->tail) {
        sn_ud_deliver(srq, qp, rec);
    }
    sn_ring_release(qp, rec);
    return 0;
}


/* ---- steering (softnic_test.h) ---- */

int softnic_test_ud_die_holding(struct ibv_qp *ibv_qp, unsigned published)
{
    sn_ring_ctl_t *ring;
    sn_proc_id_t self;
    sn_ud_hdr_t *hdr;
    uint64_t tail;
    sn_rec_t *rec;
    uint32_t mask;

    if (!sn_is_softnic(ibv_qp->context) || (sn_qp(ibv_qp)->ud == NULL) ||
        (sn_proc_self(&self) != 0)) {
        return EINVAL;
    }
    ring = sn_qp(ibv_qp)->in;
    mask = ring->size - 1;
    atomic_store(&ring->prod_lock, sn_proc_word(&self));
    tail = ring->prod_tail;
    for (; published > 0; --published) {
        rec = sn_ud_ring_reserve(ring, mask, sizeof(*hdr));
        if (rec == NULL) {
            break;
        }
        hdr = (sn_ud_hdr_t *)(rec + 1);
        memset(hdr, 0, sizeof(*hdr));
        hdr->src_qp = ibv_qp->qp_num;
        sn_ud_ring_publish(ring, mask, rec, sizeof(*hdr), 0, 0);
    }
    ring->prod_tail = tail;     /* as if it died before moving it */
    return 0;
}
