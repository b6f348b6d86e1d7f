/*
 * Connections of the software device: the sending half.
 *
 * A connection owns its inbound ring (a shared-memory segment its peer
 * writes into, its own TM-SRQ reads from) and writes into the peer's inbound
 * ring.  Send work requests stay in a local send queue until they complete,
 * in posting order:
 *   SEND        when the peer's device has consumed the message (like an RC
 *               ack: the message was placed, after any RNR wait);
 *   RDMA READ / when the copy is done; the copy runs when the request reaches
 *   RDMA WRITE  the wire, after every earlier request of the connection.
 * A peer that dies or closes fails the outstanding requests
 * (IBV_WC_RETRY_EXC_ERR, then IBV_WC_WR_FLUSH_ERR) once a rate-limited
 * liveness check sees it gone.
 */
#include "soft_dev.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static _Atomic uint32_t soft_next_qp_num = 0x100;

static inline uint32_t soft_rec_size(uint32_t len)
{
    return (sizeof(soft_rec_t) + len + SOFT_CACHE_LINE - 1) &
           ~(uint32_t)(SOFT_CACHE_LINE - 1);
}

static inline soft_rec_t *soft_ring_rec(soft_ring_ctl_t *ring, uint32_t mask,
                                        uint64_t pos)
{
    return (soft_rec_t *)(ring->data + (pos & mask));
}


/* ---- ring: producer side ---- */

/* Room for a record of len bytes (plus padding to the end of the buffer)? */
static soft_rec_t *soft_ring_reserve(soft_conn_t *conn, uint32_t len)
{
    uint32_t size  = soft_rec_size(len);
    uint32_t ring  = conn->out_mask + 1;
    uint32_t pos   = conn->out_tail & conn->out_mask;
    uint32_t to_end = ring - pos;
    uint64_t need  = (size > to_end) ? (uint64_t)to_end + size : size;
    soft_rec_t *pad;

    if (conn->out_tail + need - conn->out_head_cache > ring) {
        conn->out_head_cache = atomic_load_explicit(&conn->out->head,
                                                    memory_order_acquire);
        if (conn->out_tail + need - conn->out_head_cache > ring) {
            return NULL;
        }
    }
    if (size > to_end) {
        pad       = soft_ring_rec(conn->out, conn->out_mask, conn->out_tail);
        pad->len  = to_end - sizeof(soft_rec_t);
        pad->type = SOFT_REC_PAD;
        conn->out_tail += to_end;
    }
    return soft_ring_rec(conn->out, conn->out_mask, conn->out_tail);
}

static void soft_ring_publish(soft_conn_t *conn, soft_rec_t *rec, uint32_t len)
{
    rec->len  = len;
    rec->type = SOFT_REC_MSG;
    conn->out_tail += soft_rec_size(len);
    atomic_store_explicit(&conn->out->tail, conn->out_tail,
                          memory_order_release);
}


/* ---- ring: consumer side (used by the TM-SRQ) ---- */

/* The oldest message waiting on conn's inbound ring, skipping padding */
bool soft_ring_peek(soft_conn_t *conn, soft_rec_t **rec_p)
{
    soft_ring_ctl_t *in = conn->in;
    soft_rec_t *rec;
    uint64_t tail;

    for (;;) {
        tail = atomic_load_explicit(&in->tail, memory_order_acquire);
        if (tail == conn->in_head) {
            return false;
        }
        rec = soft_ring_rec(in, conn->in_mask, conn->in_head);
        if (soft_likely(rec->type == SOFT_REC_MSG)) {
            *rec_p = rec;
            return true;
        }
        conn->in_head += soft_rec_size(rec->len);
        atomic_store_explicit(&in->head, conn->in_head, memory_order_release);
    }
}

void soft_ring_release(soft_conn_t *conn, soft_rec_t *rec)
{
    conn->in_head += soft_rec_size(rec->len);
    atomic_store_explicit(&conn->in->head, conn->in_head, memory_order_release);
}


/* ---- creation and connection ---- */

int soft_create_conn(tm_dev_t *tdev, tm_dev_srq_t *tsrq, tm_dev_cq_t *tcq,
                     tm_dev_conn_t **conn_p)
{
    soft_dev_t *dev = soft_dev(tdev);
    soft_srq_t *srq = soft_container_of(tsrq, soft_srq_t, super);
    soft_cq_t *cq   = soft_container_of(tcq, soft_cq_t, super);
    soft_conn_t *conn;
    char name[96];
    int ret;

    conn = calloc(1, sizeof(*conn));
    if (conn == NULL) {
        return ENOMEM;
    }
    conn->sq_size = dev->caps.max_send_wr;
    conn->sq_mask = soft_roundup_pow2(conn->sq_size) - 1;
    conn->sq      = calloc(conn->sq_mask + 1, sizeof(*conn->sq));
    if (conn->sq == NULL) {
        ret = ENOMEM;
        goto err_free;
    }

    conn->seq = dev->next_conn_seq++;
    soft_seg_name(name, sizeof(name), &dev->addr.proc, dev->addr.dev_seq,
                  (int)conn->seq);
    ret = soft_shm_create(&conn->in_shm, name,
                          soft_ring_seg_size(dev->ring_size));
    if (ret != 0) {
        goto err_free_sq;
    }
    conn->in       = conn->in_shm.base;
    conn->in->size = dev->ring_size;
    conn->in_mask  = dev->ring_size - 1;
    soft_seg_hdr_init(&conn->in->hdr, &dev->addr.proc, SOFT_SEG_CONN);

    conn->super.dev = tdev;
    conn->srq       = srq;
    conn->send_cq   = cq;
    conn->qp_num    = atomic_fetch_add(&soft_next_qp_num, 1) & 0xffffff;
    conn->state     = SOFT_CONN_INIT;
    soft_list_add_tail(&dev->conns, &conn->dev_link);
    soft_list_add_tail(&srq->conns, &conn->srq_link);
    soft_list_add_tail(&cq->send_conns, &conn->cq_link);
    *conn_p = &conn->super;
    return 0;

err_free_sq:
    free(conn->sq);
err_free:
    free(conn);
    return ret;
}

void soft_destroy_conn(tm_dev_conn_t *tconn)
{
    soft_conn_t *conn = soft_container_of(tconn, soft_conn_t, super);

    soft_srq_forget_conn(conn->srq, conn);
    if (conn->srq->rr_next == &conn->srq_link) {
        conn->srq->rr_next = conn->srq_link.next;
    }
    soft_list_del(&conn->srq_link);
    soft_list_del(&conn->cq_link);
    soft_list_del(&conn->dev_link);

    /* the peer's outstanding sends to us now fail */
    atomic_store(&conn->in->hdr.closed, 1);
    soft_shm_destroy(&conn->in_shm);
    if (conn->out != NULL) {
        soft_shm_detach(&conn->out_shm);
    }
    if (conn->peer != NULL) {
        soft_peer_put(soft_dev(tconn->dev), conn->peer);
    }
    free(conn->fins);
    free(conn->sq);
    free(conn);
}

void soft_conn_addr(tm_dev_conn_t *tconn, void *addr)
{
    soft_conn_t *conn = soft_container_of(tconn, soft_conn_t, super);
    soft_conn_addr_t ca = { .conn_seq = conn->seq, .qp_num = conn->qp_num };

    memcpy(addr, &ca, sizeof(ca));
}

uint32_t soft_conn_qp_num(tm_dev_conn_t *tconn)
{
    return soft_container_of(tconn, soft_conn_t, super)->qp_num;
}

int soft_connect(tm_dev_conn_t *tconn, const void *dev_addr,
                 const void *conn_addr)
{
    soft_conn_t *conn = soft_container_of(tconn, soft_conn_t, super);
    soft_dev_t *dev   = soft_dev(tconn->dev);
    soft_dev_addr_t da;
    soft_conn_addr_t ca;
    soft_ring_ctl_t *out;
    uint32_t expected = 0;
    char name[96];
    int ret;

    if (conn->state != SOFT_CONN_INIT) {
        return EINVAL;
    }
    memcpy(&ca, conn_addr, sizeof(ca));
    if (!soft_dev_addr_unpack(dev_addr, &da) ||
        !soft_is_reachable_addr(dev, &da)) {
        return EINVAL;
    }

    soft_seg_name(name, sizeof(name), &da.proc, da.dev_seq, (int)ca.conn_seq);
    ret = soft_shm_attach(&conn->out_shm, name);
    if (ret != 0) {
        tm_dev_error("soft: cannot connect to %s: %s", name, strerror(ret));
        return (ret == ENOENT) ? ECONNREFUSED : ret;
    }
    out = conn->out_shm.base;
    if ((conn->out_shm.size < sizeof(*out)) || (out->hdr.magic != SOFT_MAGIC) ||
        (out->hdr.kind != SOFT_SEG_CONN) ||
        (out->size & (out->size - 1)) ||
        (conn->out_shm.size < soft_ring_seg_size(out->size))) {
        ret = EINVAL;
        goto err_detach;
    }
    if (!atomic_compare_exchange_strong(&out->producer_attached, &expected, 1)) {
        tm_dev_error("soft: %s is already connected", name);
        ret = EISCONN;
        goto err_detach;
    }
    out->producer = dev->addr.proc;

    ret = soft_peer_get(dev, &da, &conn->peer);
    if (ret != 0) {
        goto err_detach;
    }
    conn->out            = out;
    conn->out_mask       = out->size - 1;
    conn->out_tail       = atomic_load(&out->tail);
    conn->out_head_cache = atomic_load(&out->head);
    conn->peer_proc      = da.proc;
    conn->state          = SOFT_CONN_CONNECTED;
    return 0;

err_detach:
    soft_shm_detach(&conn->out_shm);
    return ret;
}


/* ---- send queue ---- */

static inline soft_wqe_t *soft_sq_wqe(soft_conn_t *conn, uint32_t index)
{
    return &conn->sq[index & conn->sq_mask];
}

static void soft_wqe_done(soft_wqe_t *wqe, enum ibv_wc_status status)
{
    wqe->state  = SOFT_WQE_DONE;
    wqe->status = (uint8_t)status;
}

/* Fails everything not yet completed: the first with status, then flush */
static void soft_conn_fail_from(soft_conn_t *conn, uint32_t index,
                                enum ibv_wc_status status)
{
    soft_wqe_t *wqe;

    for (; index != conn->sq_tail; ++index) {
        wqe = soft_sq_wqe(conn, index);
        if (wqe->state == SOFT_WQE_DONE) {
            continue;
        }
        soft_wqe_done(wqe, status);
        status = IBV_WC_WR_FLUSH_ERR;
    }
    conn->sq_sent = conn->sq_tail;
}

void soft_conn_set_error(soft_conn_t *conn)
{
    if (conn->state == SOFT_CONN_ERROR) {
        return;
    }
    tm_dev_debug("soft: connection %u enters error state", conn->qp_num);
    conn->state = SOFT_CONN_ERROR;
    conn->fin_count = 0;
    /* our peer will see us gone, as it would see an RC QP stop answering */
    atomic_store(&conn->in->hdr.closed, 1);
}

/* The peer is gone: outstanding requests fail as if retries ran out */
static void soft_conn_peer_gone(soft_conn_t *conn)
{
    tm_dev_debug("soft: peer of connection %u is gone", conn->qp_num);
    soft_conn_set_error(conn);
    soft_conn_fail_from(conn, conn->sq_head, IBV_WC_RETRY_EXC_ERR);
}

bool soft_conn_peer_alive(soft_conn_t *conn)
{
    if (atomic_load_explicit(&conn->out->hdr.closed, memory_order_relaxed)) {
        return false;
    }
    return soft_proc_alive(&conn->peer_proc);
}

/* Gathers a SEND's data into the ring record */
static void soft_wqe_gather(const soft_wqe_t *wqe, uint8_t *dst)
{
    uint32_t i;

    if (wqe->inline_len || (wqe->num_sge == 0)) {
        memcpy(dst, wqe->inline_data, wqe->inline_len);
        return;
    }
    for (i = 0; i < wqe->num_sge; ++i) {
        memcpy(dst, (void *)(uintptr_t)wqe->sge[i].addr, wqe->sge[i].length);
        dst += wqe->sge[i].length;
    }
}

static bool soft_wqe_lkeys_ok(soft_dev_t *dev, const soft_wqe_t *wqe)
{
    uint32_t i;

    for (i = 0; i < wqe->num_sge; ++i) {
        if (!soft_key_check(dev->seg, wqe->sge[i].lkey, wqe->sge[i].addr,
                            wqe->sge[i].length, 0)) {
            return false;
        }
    }
    return true;
}

/* RDMA READ/WRITE: checks both keys, then one copy per local entry */
static enum ibv_wc_status soft_wqe_rdma(soft_conn_t *conn, soft_wqe_t *wqe)
{
    soft_dev_t *dev = soft_dev(conn->super.dev);
    bool write      = (wqe->opcode == IBV_WR_RDMA_WRITE);
    uint32_t access = write ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ;
    uint64_t remote = wqe->remote_addr;
    uint32_t i;
    int ret;

    if (!soft_key_check(conn->peer->seg, wqe->rkey, remote, wqe->byte_len,
                        access)) {
        return IBV_WC_REM_ACCESS_ERR;
    }
    if (wqe->inline_len) {
        ret = soft_rdma_copy((pid_t)conn->peer_proc.pid, true,
                             wqe->inline_data, remote, wqe->inline_len);
        goto out;
    }
    if (!soft_wqe_lkeys_ok(dev, wqe)) {
        return IBV_WC_LOC_PROT_ERR;
    }
    for (i = 0, ret = 0; (i < wqe->num_sge) && (ret == 0); ++i) {
        ret = soft_rdma_copy((pid_t)conn->peer_proc.pid, write,
                             (void *)(uintptr_t)wqe->sge[i].addr, remote,
                             wqe->sge[i].length);
        remote += wqe->sge[i].length;
    }
out:
    if (ret == ESRCH) {
        return IBV_WC_RETRY_EXC_ERR;
    }
    return (ret == 0) ? IBV_WC_SUCCESS : IBV_WC_REM_ACCESS_ERR;
}

/* Device FINs first, then send requests in order, while the ring has room */
static void soft_conn_push(soft_conn_t *conn)
{
    soft_dev_t *dev = soft_dev(conn->super.dev);
    enum ibv_wc_status status;
    soft_wqe_t *wqe;
    soft_rec_t *rec;
    uint32_t i;

    if (soft_unlikely(conn->fin_count != 0)) {
        for (i = 0; i < conn->fin_count; ++i) {
            rec = soft_ring_reserve(conn, sizeof(conn->fins[i].data));
            if (rec == NULL) {
                break;
            }
            memcpy(rec + 1, conn->fins[i].data, sizeof(conn->fins[i].data));
            soft_ring_publish(conn, rec, sizeof(conn->fins[i].data));
        }
        memmove(conn->fins, conn->fins + i,
                (conn->fin_count - i) * sizeof(*conn->fins));
        conn->fin_count -= i;
    }

    while (conn->sq_sent != conn->sq_tail) {
        wqe = soft_sq_wqe(conn, conn->sq_sent);
        if (soft_likely(wqe->opcode == IBV_WR_SEND)) {
            if (soft_unlikely(!wqe->inline_len && !soft_wqe_lkeys_ok(dev, wqe))) {
                soft_conn_set_error(conn);
                soft_conn_fail_from(conn, conn->sq_sent, IBV_WC_LOC_PROT_ERR);
                return;
            }
            rec = soft_ring_reserve(conn, wqe->byte_len);
            if (rec == NULL) {
                return;             /* ring full: the peer is behind */
            }
            soft_wqe_gather(wqe, (uint8_t *)(rec + 1));
            soft_ring_publish(conn, rec, wqe->byte_len);
            wqe->ring_end = conn->out_tail;
            wqe->state    = SOFT_WQE_SENT;
        } else {
            status = soft_wqe_rdma(conn, wqe);
            if (status != IBV_WC_SUCCESS) {
                soft_conn_set_error(conn);
                soft_conn_fail_from(conn, conn->sq_sent, status);
                return;
            }
            soft_wqe_done(wqe, IBV_WC_SUCCESS);
        }
        ++conn->sq_sent;
    }
}

static enum ibv_wc_opcode soft_wc_opcode(uint8_t wr_opcode)
{
    switch (wr_opcode) {
    case IBV_WR_RDMA_READ:
        return IBV_WC_RDMA_READ;
    case IBV_WR_RDMA_WRITE:
        return IBV_WC_RDMA_WRITE;
    default:
        return IBV_WC_SEND;
    }
}

/* Completes send requests in order, as far as the CQ has room */
unsigned soft_conn_reap(soft_conn_t *conn, soft_cq_t *cq)
{
    unsigned count = 0;
    soft_wqe_t *wqe;
    tm_dev_wc_t *wc;
    uint64_t head = 0;
    bool head_read = false;

    while (conn->sq_head != conn->sq_tail) {
        wqe = soft_sq_wqe(conn, conn->sq_head);
        if (wqe->state == SOFT_WQE_SENT) {
            if (!head_read) {
                head = atomic_load_explicit(&conn->out->head,
                                            memory_order_acquire);
                head_read = true;
            }
            if ((int64_t)(head - wqe->ring_end) < 0) {
                break;              /* not yet consumed by the peer */
            }
            soft_wqe_done(wqe, IBV_WC_SUCCESS);
        } else if (wqe->state != SOFT_WQE_DONE) {
            break;
        }
        if (wqe->signaled || (wqe->status != IBV_WC_SUCCESS)) {
            if (!soft_cq_has_room(cq, 1)) {
                break;
            }
            wc           = soft_cq_push(cq);
            wc->wr_id    = wqe->wr_id;
            wc->status   = (enum ibv_wc_status)wqe->status;
            wc->opcode   = soft_wc_opcode(wqe->opcode);
            wc->byte_len = (wqe->opcode == IBV_WR_RDMA_READ) ? wqe->byte_len : 0;
            wc->qp_num   = conn->qp_num;
            ++count;
        }
        ++conn->sq_head;
    }
    return count;
}

/* Is the connection waiting for its peer (so that its death matters)? */
static bool soft_conn_waits_on_peer(const soft_conn_t *conn)
{
    return (conn->sq_head != conn->sq_tail) || (conn->fin_count != 0);
}

/* Send-side work, from poll_cq of the connection's send CQ */
void soft_conn_progress_send(soft_conn_t *conn)
{
    uint64_t now;

    if (!soft_conn_waits_on_peer(conn)) {
        return;
    }
    if (conn->state == SOFT_CONN_CONNECTED) {
        soft_conn_push(conn);
        soft_conn_reap(conn, conn->send_cq);
        if (!soft_conn_waits_on_peer(conn)) {
            return;
        }
        /* still waiting: is the peer still there? (rate-limited) */
        now = soft_now_ns();
        if (now >= conn->next_liveness_ns) {
            conn->next_liveness_ns = now + SOFT_LIVENESS_PERIOD_NS;
            if (!soft_conn_peer_alive(conn)) {
                soft_conn_peer_gone(conn);
            }
        }
    } else if (conn->state == SOFT_CONN_ERROR) {
        /* sent requests that the peer had not consumed will never be */
        if (conn->sq_head != conn->sq_tail) {
            soft_conn_fail_from(conn, conn->sq_head, IBV_WC_RETRY_EXC_ERR);
        }
    }
    soft_conn_reap(conn, conn->send_cq);
}

/* A FIN from the device (not a work request: no send completion) */
int soft_conn_send_fin(soft_conn_t *conn, const void *fin, size_t len)
{
    soft_fin_t *fins;
    soft_rec_t *rec;
    uint32_t cap;

    if (conn->state != SOFT_CONN_CONNECTED) {
        return ENOTCONN;
    }
    if (conn->fin_count == 0) {
        rec = soft_ring_reserve(conn, (uint32_t)len);
        if (rec != NULL) {
            memcpy(rec + 1, fin, len);
            soft_ring_publish(conn, rec, (uint32_t)len);
            return 0;
        }
    }
    /* ring full: keep it until the peer catches up (slow path) */
    if (conn->fin_count == conn->fin_cap) {
        cap  = conn->fin_cap ? 2 * conn->fin_cap : 16;
        fins = realloc(conn->fins, cap * sizeof(*fins));
        if (fins == NULL) {
            return ENOMEM;
        }
        conn->fins    = fins;
        conn->fin_cap = cap;
    }
    memcpy(conn->fins[conn->fin_count++].data, fin, len);
    return 0;
}

/* Checks one work request and fills a send queue entry from it */
static int soft_wqe_fill(soft_conn_t *conn, const struct ibv_send_wr *wr,
                         soft_wqe_t *wqe)
{
    soft_dev_t *dev = soft_dev(conn->super.dev);
    uint64_t len = 0;
    uint8_t *dst;
    int i;

    if ((wr->num_sge < 0) || (wr->num_sge > SOFT_MAX_SGE)) {
        return EINVAL;
    }
    for (i = 0; i < wr->num_sge; ++i) {
        len += wr->sg_list[i].length;
    }
    switch (wr->opcode) {
    case IBV_WR_SEND:
        if ((len > dev->caps.max_msg_size) ||
            (soft_rec_size((uint32_t)len) * 2 > conn->out_mask + 1)) {
            return EINVAL;
        }
        break;
    case IBV_WR_RDMA_READ:
        if (wr->send_flags & IBV_SEND_INLINE) {
            return EINVAL;
        }
        /* fall through */
    case IBV_WR_RDMA_WRITE:
        if (len > dev->caps.max_rdma_size) {
            return EINVAL;
        }
        wqe->remote_addr = wr->wr.rdma.remote_addr;
        wqe->rkey        = wr->wr.rdma.rkey;
        break;
    default:
        return EINVAL;
    }

    wqe->wr_id      = wr->wr_id;
    wqe->opcode     = (uint8_t)wr->opcode;
    wqe->signaled   = !!(wr->send_flags & IBV_SEND_SIGNALED);
    wqe->state      = SOFT_WQE_QUEUED;
    wqe->status     = IBV_WC_SUCCESS;
    wqe->byte_len   = (uint32_t)len;
    wqe->inline_len = 0;
    wqe->num_sge    = 0;
    if (wr->send_flags & IBV_SEND_INLINE) {
        if (len > SOFT_MAX_INLINE) {
            return EINVAL;
        }
        for (i = 0, dst = wqe->inline_data; i < wr->num_sge; ++i) {
            memcpy(dst, (void *)(uintptr_t)wr->sg_list[i].addr,
                   wr->sg_list[i].length);
            dst += wr->sg_list[i].length;
        }
        wqe->inline_len = (uint32_t)len;
    } else {
        for (i = 0; i < wr->num_sge; ++i) {
            wqe->sge[i] = wr->sg_list[i];
        }
        wqe->num_sge = (uint32_t)wr->num_sge;
    }
    return 0;
}

int soft_post_send(tm_dev_conn_t *tconn, struct ibv_send_wr *wr,
                   struct ibv_send_wr **bad_wr)
{
    soft_conn_t *conn = soft_container_of(tconn, soft_conn_t, super);
    soft_wqe_t *wqe;
    int ret = 0;

    for (; wr != NULL; wr = wr->next) {
        if (soft_unlikely(conn->state == SOFT_CONN_INIT)) {
            ret = EINVAL;
            break;
        }
        if (soft_unlikely(conn->sq_tail - conn->sq_head >= conn->sq_size)) {
            ret = ENOMEM;
            break;
        }
        wqe = soft_sq_wqe(conn, conn->sq_tail);
        ret = soft_wqe_fill(conn, wr, wqe);
        if (soft_unlikely(ret != 0)) {
            break;
        }
        ++conn->sq_tail;
        if (soft_unlikely(conn->state == SOFT_CONN_ERROR)) {
            soft_conn_fail_from(conn, conn->sq_tail - 1, IBV_WC_WR_FLUSH_ERR);
        }
    }
    if (ret != 0) {
        *bad_wr = wr;
    }
    if (conn->state == SOFT_CONN_CONNECTED) {
        soft_conn_push(conn);
    }
    return ret;
}
