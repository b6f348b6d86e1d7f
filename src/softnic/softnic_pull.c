/*
 * Software NIC: a send backlog that the peer's device takes.
 *
 * A NIC carries out what was posted to it while the host computes or
 * blocks: a send that the transport reported complete (UCT's bcopy and
 * short sends complete when posted) reaches the peer without another call
 * of the sender's.  Inline, this device works only inside its own polls,
 * and a SEND that finds the peer's ring full waits in the send queue
 * (softnic_req.c): a sender that stops polling would keep it for good.
 *
 * So the requester offers what waits to the ring's consumer, whose device
 * runs in the receiver's polls: it marks where its next record would go
 * (SN_REC_BACKLOG, in the line the ring keeps free for the terminator) and
 * publishes its send queue's address and the range that waits in the
 * ring's backlog line.  A consumer that drained the ring up to the mark,
 * and sees the requester push nothing for SN_PULL_IDLE_NS (a count in that
 * line), takes the oldest waiting request itself, out of its memory
 * (process_vm_readv, keys checked as the requester's device would): a
 * SEND is read and judged as if it came off the ring, an RDMA WRITE is
 * copied in.  Either side moves the backlog only under its lock, one
 * request per hold on the consumer's side, so each request goes exactly
 * once and in order: ring records first, then the backlog from its start.
 * The requester learns what was taken from backlog_sent, and completes it
 * as consumed.
 *
 * The requester waits for the lock rather than try it: what it posted
 * since its last offer must be offered before it may stop polling.
 *
 * An RDMA READ, a bad key or a requester gone stops the consumer: the
 * requester waits for a READ's completion (it polls), and fails the
 * others itself.  The requester's fast path is unchanged: it looks at
 * nothing shared unless a backlog is offered.
 */
#include "softnic_int.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

static inline bool sn_backlog_trylock(sn_ring_ctl_t *ring)
{
    uint32_t free_ = 0;

    return atomic_compare_exchange_strong_explicit(&ring->backlog_lock,
                                                   &free_, 1,
                                                   memory_order_acquire,
                                                   memory_order_relaxed);
}

static inline void sn_backlog_unlock(sn_ring_ctl_t *ring)
{
    atomic_store_explicit(&ring->backlog_lock, 0, memory_order_release);
}

/* The line where the producer's next record goes */
static inline void sn_backlog_mark(sn_qp_t *qp, uint16_t type)
{
    __atomic_store_n(&sn_ring_rec(qp->out, qp->out_mask, qp->out_tail)->type,
                     type, __ATOMIC_RELEASE);
}


/* ---- the requester ---- */

/* Where the peer's device finds our send queue (at RTR) */
void sn_qp_backlog_init(sn_qp_t *qp)
{
    qp->out->sq_addr        = (uintptr_t)qp->sq;
    qp->out->sq_mask        = qp->sq_mask;
    qp->out->wqe_size       = sizeof(sn_wqe_t);
    qp->out->sq_inline_addr = (uintptr_t)qp->sq_inline;
    qp->out->sq_inline_size = qp->sq_inline_size;
    atomic_store_explicit(&qp->out->backlog_sent, 0, memory_order_relaxed);
    atomic_store_explicit(&qp->out->backlog_tail, 0, memory_order_relaxed);
    atomic_store_explicit(&qp->out->backlog_lock, 0, memory_order_relaxed);
    atomic_store_explicit(&qp->out->backlog_pushes, 0, memory_order_relaxed);
    qp->offered        = false;
    qp->backlog_pushes = 0;
}

/* Waits for the lock, which the consumer holds for one request; false if
 * the peer died holding it */
static bool sn_backlog_lock(sn_qp_t *qp)
{
    unsigned spins;

    for (spins = 1; !sn_backlog_trylock(qp->out); ++spins) {
        if ((spins % 1024) == 0) {
            if (!sn_qp_peer_alive(qp)) {
                return false;
            }
            sched_yield();
        }
    }
    return true;
}

/* Under the lock: what the peer's device took is done (consumed) */
static void sn_backlog_take_back(sn_qp_t *qp)
{
    uint32_t sent = atomic_load_explicit(&qp->out->backlog_sent,
                                         memory_order_acquire);

    for (; qp->sq_sent != sent; ++qp->sq_sent) {
        sn_wqe_done(sn_sq_wqe(qp, qp->sq_sent), IBV_WC_SUCCESS);
    }
}

/* We still push: the consumer leaves our backlog to us */
static inline void sn_backlog_pushed(sn_qp_t *qp)
{
    atomic_store_explicit(&qp->out->backlog_pushes, ++qp->backlog_pushes,
                          memory_order_relaxed);
}

/* Under the lock: offers what still waits (or nothing), and unlocks */
static void sn_backlog_update(sn_qp_t *qp, bool offer)
{
    atomic_store_explicit(&qp->out->backlog_sent, qp->sq_sent,
                          memory_order_relaxed);
    atomic_store_explicit(&qp->out->backlog_tail,
                          offer ? qp->sq_tail : qp->sq_sent,
                          memory_order_relaxed);
    sn_backlog_mark(qp, offer ? SN_REC_BACKLOG : 0);
    qp->offered = offer;
    sn_backlog_unlock(qp->out);
    if (offer) {
        sn_qp_check_peer_parked(qp);    /* a parked ring sees the mark */
    }
}

/* Requests wait after a push (the ring is full): offer them */
void sn_qp_backlog_offer(sn_qp_t *qp)
{
    sn_backlog_pushed(qp);
    if (sn_backlog_lock(qp)) {
        sn_backlog_update(qp, true);
    }
}

/* A push with a backlog offered: the lock is ours until
 * sn_qp_backlog_end(), or false when the peer died holding it.  It waits
 * for the lock (the consumer holds it for one request): requests posted
 * since the last offer must join it before we may stop polling */
bool sn_qp_backlog_begin(sn_qp_t *qp)
{
    sn_backlog_pushed(qp);
    if (!sn_backlog_lock(qp)) {
        return false;
    }
    sn_backlog_take_back(qp);
    qp->offered = false;    /* a failure meanwhile has nothing to withdraw:
                               sn_qp_backlog_end() offers what is left */
    return true;
}

void sn_qp_backlog_end(sn_qp_t *qp)
{
    sn_backlog_update(qp, (qp->sq_sent != qp->sq_tail) &&
                          (qp->ibv.state == IBV_QPS_RTS));
}

/* The QP fails or goes: nothing more is taken from its send queue */
void sn_qp_backlog_withdraw(sn_qp_t *qp)
{
    /* (a forked child's copy of the QP offered nothing) */
    if (!qp->offered || !sn_ctx_is_ours(sn_qp_ctx(qp))) {
        qp->offered = false;
        return;
    }
    if (sn_backlog_lock(qp)) {
        sn_backlog_take_back(qp);
        sn_backlog_update(qp, false);
    }
    qp->offered = false;
}


/* ---- the consumer ---- */

/* The scratch record a pulled SEND is read into: half a ring at most, as
 * a record on the ring (sn_wqe_fill) */
static sn_rec_t *sn_pull_buf(sn_context_t *ctx, uint32_t len)
{
    size_t size = sizeof(sn_rec_t) + len;
    void *buf;

    if (size > ctx->pull_size) {
        buf = realloc(ctx->pull_buf, size);
        if (buf == NULL) {
            return NULL;
        }
        ctx->pull_buf  = buf;
        ctx->pull_size = size;
    }
    return ctx->pull_buf;
}

/* The requester's entry as read out of its memory: the WQE, and its slot
 * of inline data (read with it, whether or not the WQE has any) */
typedef struct {
    sn_wqe_t wqe;
    uint8_t  inline_data[(SN_MAX_INLINE + 15) & ~15u];
} sn_pull_entry_t;

/* The requester's inline data, or its gather list checked against its own
 * registrations */
static int sn_pull_gather(sn_qp_t *qp, const sn_pull_entry_t *entry,
                          void *dst)
{
    const sn_wqe_t *wqe = &entry->wqe;
    struct iovec local, remote[SN_MAX_SGE];
    uint32_t i;
    ssize_t n;

    if (wqe->inline_len != 0) {
        memcpy(dst, entry->inline_data, wqe->inline_len);
        return 0;
    }
    for (i = 0; i < wqe->num_sge; ++i) {
        if (!sn_key_check(qp->peer->seg, wqe->sge[i].lkey, wqe->sge[i].addr,
                          wqe->sge[i].length, 0)) {
            return EPERM;           /* the requester fails it */
        }
        remote[i].iov_base = (void *)(uintptr_t)wqe->sge[i].addr;
        remote[i].iov_len  = wqe->sge[i].length;
    }
    local.iov_base = dst;
    local.iov_len  = wqe->byte_len;
    if (wqe->byte_len == 0) {
        return 0;
    }
    n = process_vm_readv((pid_t)qp->peer_proc.pid, &local, 1, remote,
                         wqe->num_sge, 0);
    if (n < 0) {
        return errno;
    }
    return ((uint32_t)n == wqe->byte_len) ? 0 : EFAULT;
}

/* A SEND, judged and placed as if it came off the ring; EAGAIN for RNR */
static int sn_pull_send(sn_srq_t *srq, sn_qp_t *qp,
                        const sn_pull_entry_t *entry)
{
    const sn_wqe_t *wqe = &entry->wqe;
    sn_rec_t *rec = sn_pull_buf(sn_qp_ctx(qp), wqe->byte_len);
    int ret;

    if (rec == NULL) {
        return ENOMEM;
    }
    ret = sn_pull_gather(qp, entry, rec + 1);
    if (ret != 0) {
        return ret;
    }
    rec->len      = wqe->byte_len;
    rec->type     = SN_REC_MSG;
    rec->flags    = (wqe->opcode == IBV_WR_SEND_WITH_IMM) ? SN_REC_F_IMM : 0;
    rec->imm_data = wqe->imm_data;
    return sn_srq_arrive(srq, qp, rec);
}

/* An RDMA WRITE into our memory, with our key checked */
static int sn_pull_write(sn_qp_t *qp, const sn_pull_entry_t *entry)
{
    const sn_wqe_t *wqe = &entry->wqe;

    if (wqe->byte_len == 0) {
        return 0;
    }
    if (!sn_key_check(sn_qp_ctx(qp)->seg, wqe->rkey, wqe->remote_addr,
                      wqe->byte_len, IBV_ACCESS_REMOTE_WRITE)) {
        return EPERM;
    }
    return sn_pull_gather(qp, entry, (void *)(uintptr_t)wqe->remote_addr);
}

/* The requester's WQE index, read out of its memory; 0 or an errno */
static int sn_pull_one(sn_srq_t *srq, sn_qp_t *qp, uint32_t index)
{
    const sn_ring_ctl_t *ring = qp->in;
    uint32_t slot             = index & ring->sq_mask;
    struct iovec local[2], remote[2];
    sn_pull_entry_t entry;
    uint32_t inline_size;
    uint64_t now;
    ssize_t n;

    /* read once: the requester's memory */
    inline_size = __atomic_load_n(&ring->sq_inline_size, __ATOMIC_RELAXED);
    if ((ring->wqe_size != sizeof(entry.wqe)) ||
        (inline_size > sizeof(entry.inline_data))) {
        return EPROTO;
    }
    /* a pid reused after the requester died would be read otherwise */
    now = sn_now_ns();
    if (now >= qp->pull_alive_ns) {
        if (!sn_proc_alive(&qp->peer_proc)) {
            return ESRCH;
        }
        qp->pull_alive_ns = now + SN_LIVENESS_PERIOD_NS;
    }
    local[0].iov_base  = &entry.wqe;
    local[0].iov_len   = sizeof(entry.wqe);
    local[1].iov_base  = entry.inline_data;
    local[1].iov_len   = inline_size;
    remote[0].iov_base = (void *)(uintptr_t)(ring->sq_addr +
                                             (uint64_t)slot *
                                             sizeof(entry.wqe));
    remote[0].iov_len  = sizeof(entry.wqe);
    remote[1].iov_base = (void *)(uintptr_t)(ring->sq_inline_addr +
                                             (uint64_t)slot * inline_size);
    remote[1].iov_len  = inline_size;
    n = process_vm_readv((pid_t)qp->peer_proc.pid, local, 2, remote, 2, 0);
    if (n != (ssize_t)(sizeof(entry.wqe) + inline_size)) {
        return (n < 0) ? errno : EFAULT;
    }
    /* what the requester's post_send checked, checked again: its memory is
     * not ours to trust (a SEND takes half a ring at most) */
    if ((entry.wqe.num_sge > SN_MAX_SGE) ||
        (entry.wqe.inline_len > inline_size) ||
        ((entry.wqe.inline_len != 0) &&
         (entry.wqe.inline_len != entry.wqe.byte_len)) ||
        (((entry.wqe.opcode == IBV_WR_SEND) ||
          (entry.wqe.opcode == IBV_WR_SEND_WITH_IMM)) &&
         (sn_rec_size(entry.wqe.byte_len) * 2 > ring->size))) {
        return EPROTO;
    }
    switch (entry.wqe.opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
        return sn_pull_send(srq, qp, &entry);
    case IBV_WR_RDMA_WRITE:
        return sn_pull_write(qp, &entry);
    default:
        return EXDEV;               /* a READ: the requester waits for it */
    }
}

/* Does the requester still push?  Then its backlog is its own: it goes
 * faster off the ring than one request per hold out of its memory (tag_bw
 * at 512 B lost a quarter when the receiver took it as soon as it caught
 * up).  Each offer and each push counts. */
static bool sn_pull_requester_pushes(sn_qp_t *qp)
{
    uint32_t pushes = atomic_load_explicit(&qp->in->backlog_pushes,
                                           memory_order_relaxed);
    uint64_t now    = sn_now_ns();

    if (pushes != qp->pull_seen_pushes) {
        qp->pull_seen_pushes = pushes;
        qp->pull_seen_ns     = now;
        return true;
    }
    return now - qp->pull_seen_ns < SN_PULL_IDLE_NS;
}

/* The head of qp's ring holds the requester's mark: takes its oldest
 * waiting request once the requester stopped pushing.  0 when taken,
 * EAGAIN when nothing was */
int sn_srq_pull_arrival(sn_srq_t *srq, sn_qp_t *qp)
{
    sn_ring_ctl_t *ring = qp->in;
    uint32_t sent, tail;
    int ret = EAGAIN;

    if (sn_pull_requester_pushes(qp) || !sn_backlog_trylock(ring)) {
        return EAGAIN;              /* the requester pushes it meanwhile */
    }
    if (sn_rec_type(sn_ring_head_rec(qp)) != SN_REC_BACKLOG) {
        goto out;                   /* pushed onto the ring meanwhile */
    }
    sent = atomic_load_explicit(&ring->backlog_sent, memory_order_relaxed);
    tail = atomic_load_explicit(&ring->backlog_tail, memory_order_relaxed);
    if ((sent == tail) || (qp->pull_stuck == 1 + (uint64_t)sent)) {
        goto out;
    }
    ret = sn_pull_one(srq, qp, sent);
    if (ret == 0) {
        atomic_store_explicit(&ring->backlog_sent, sent + 1,
                              memory_order_release);
        if (sent + 1 == tail) {
            __atomic_store_n(&sn_ring_head_rec(qp)->type, 0,
                             __ATOMIC_RELEASE);
        }
        sn_db_ring(qp->peer->seg);  /* its engine completes the send */
    } else if (ret != EAGAIN) {
        sn_debug("QP 0x%x: request %u of the peer's backlog left to it: %s",
                 qp->ibv.qp_num, sent, strerror(ret));
        qp->pull_stuck = 1 + (uint64_t)sent;
        ret            = EAGAIN;
    }
out:
    sn_backlog_unlock(ring);
    return ret;
}
