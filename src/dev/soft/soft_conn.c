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

/* ---- ring: producer side ---- */

/* Type 0 where the next record will start: see soft_ring_ctl_t */
static inline void soft_ring_terminate(soft_conn_t *conn, uint64_t pos)
{
    __atomic_store_n(&soft_ring_rec(conn->out, conn->out_mask, pos)->type, 0,
                     __ATOMIC_RELAXED);
}

/* Room for a record of len bytes (plus padding to the end of the buffer, plus
 * the line of the next record's terminator)?  The consumer's position is read
 * only when the cached one says the ring is full. */
static soft_rec_t *soft_ring_reserve(soft_conn_t *conn, uint32_t len)
{
    uint32_t size  = soft_rec_size(len);
    uint32_t ring  = conn->out_mask + 1;
    uint32_t pos   = conn->out_tail & conn->out_mask;
    uint32_t to_end = ring - pos;
    uint64_t need  = ((size > to_end) ? (uint64_t)to_end + size : size) +
                     SOFT_CACHE_LINE;
    soft_rec_t *pad;

    if (soft_unlikely(conn->out_tail + need - conn->out_head_cache > ring)) {
        conn->out_head_cache = atomic_load_explicit(&conn->out->head,
                                                    memory_order_acquire);
        if (conn->out_tail + need - conn->out_head_cache > ring) {
            return NULL;
        }
    }
    if (soft_unlikely(size > to_end)) {
        pad      = soft_ring_rec(conn->out, conn->out_mask, conn->out_tail);
        pad->len = to_end - sizeof(soft_rec_t);
        conn->out_tail += to_end;
        /* the consumer goes on at offset 0 once it sees the PAD */
        soft_ring_terminate(conn, conn->out_tail);
        __atomic_store_n(&pad->type, SOFT_REC_PAD, __ATOMIC_RELEASE);
    }
    return soft_ring_rec(conn->out, conn->out_mask, conn->out_tail);
}

static void soft_ring_publish(soft_conn_t *conn, soft_rec_t *rec, uint32_t len,
                              uint16_t flags, uint32_t imm_data)
{
    rec->len      = len;
    rec->flags    = flags;
    rec->imm_data = imm_data;
    conn->out_tail += soft_rec_size(len);
    soft_ring_terminate(conn, conn->out_tail);
    /* the flag last: the consumer sees the contents and the terminator */
    __atomic_store_n(&rec->type, SOFT_REC_MSG, __ATOMIC_RELEASE);
    /* own the line of the next record's terminator before we need it (the
     * consumer is about to poll the one right after this record) */
    __builtin_prefetch(soft_ring_rec(conn->out, conn->out_mask,
                                     conn->out_tail + SOFT_CACHE_LINE), 1);
}


/* ---- ring: consumer side (used by the TM-SRQ) ---- */

/* soft_ring_peek() found something else than a message at its position:
 * skips padding, then looks again (slow path, once per lap) */
bool soft_ring_skip_pad(soft_conn_t *conn, soft_rec_t **rec_p)
{
    soft_rec_t *rec = soft_ring_head_rec(conn);
    uint16_t type;

    for (;;) {
        type = soft_rec_type(rec);
        if (type == SOFT_REC_MSG) {
            *rec_p = rec;
            return true;
        }
        if (type == 0) {
            return false;
        }
        soft_ring_advance(conn, rec->len);
        rec = soft_ring_head_rec(conn);
    }
}


/* ---- creation and connection ---- */

/* A connection object without rings yet */
static soft_conn_t *soft_conn_alloc(soft_dev_t *dev, soft_srq_t *srq,
                                    soft_cq_t *cq)
{
    soft_conn_t *conn;

    conn = calloc(1, sizeof(*conn));
    if (conn == NULL) {
        return NULL;
    }
    conn->sq_size = dev->caps.max_send_wr;
    conn->sq_mask = soft_roundup_pow2(conn->sq_size) - 1;
    conn->sq      = calloc(conn->sq_mask + 1, sizeof(*conn->sq));
    if (conn->sq == NULL) {
        free(conn);
        return NULL;
    }
    conn->super.dev = &dev->super;
    conn->srq       = srq;
    conn->send_cq   = cq;
    conn->qp_num    = atomic_fetch_add(&soft_next_qp_num, 1) & 0xffffff;
    conn->state     = SOFT_CONN_INIT;
    return conn;
}

static void soft_conn_link(soft_dev_t *dev, soft_conn_t *conn)
{
    soft_list_add_tail(&dev->conns, &conn->dev_link);
    soft_list_add_tail(&conn->srq->conns, &conn->srq_link);
    soft_list_add_tail(&conn->send_cq->send_conns, &conn->cq_link);
}

static void soft_conn_free(soft_conn_t *conn)
{
    free(conn->fins);
    free(conn->sq);
    free(conn);
}

/* Creates a ring segment of ours (c<seq>) */
static int soft_ring_create(soft_dev_t *dev, uint32_t seq, soft_shm_t *shm)
{
    soft_ring_ctl_t *ring;
    char name[96];
    int ret;

    soft_seg_name(name, sizeof(name), &dev->addr.proc, dev->addr.dev_seq, 'c',
                  seq);
    ret = soft_shm_create(shm, name, soft_ring_seg_size(dev->ring_size));
    if (ret != 0) {
        return ret;
    }
    ring       = shm->base;
    ring->size = dev->ring_size;
    soft_seg_hdr_init(&ring->hdr, &dev->addr.proc, SOFT_SEG_CONN);
    return 0;
}

/* Maps a peer's ring segment (c<seq>) and checks it */
static int soft_ring_attach(const soft_dev_addr_t *da, uint32_t seq,
                            soft_shm_t *shm)
{
    soft_ring_ctl_t *ring;
    char name[96];
    int ret;

    soft_seg_name(name, sizeof(name), &da->proc, da->dev_seq, 'c', seq);
    ret = soft_shm_attach(shm, name);
    if (ret != 0) {
        tm_dev_error("soft: cannot attach ring %s: %s", name, strerror(ret));
        return (ret == ENOENT) ? ECONNREFUSED : ret;
    }
    ring = shm->base;
    if ((shm->size < sizeof(*ring)) || (ring->hdr.magic != SOFT_MAGIC) ||
        (ring->hdr.kind != SOFT_SEG_CONN) || (ring->size == 0) ||
        (ring->size & (ring->size - 1)) ||
        (shm->size < soft_ring_seg_size(ring->size))) {
        soft_shm_detach(shm);
        return EINVAL;
    }
    return 0;
}

static void soft_conn_set_in(soft_conn_t *conn)
{
    conn->in      = conn->in_shm.base;
    conn->in_mask = conn->in->size - 1;
    conn->in_head = atomic_load(&conn->in->head);
}

/* Becomes the producer of an attached or created outbound ring */
static int soft_conn_set_out(soft_dev_t *dev, soft_conn_t *conn,
                             const soft_dev_addr_t *da)
{
    soft_ring_ctl_t *out = conn->out_shm.base;
    uint32_t expected    = 0;
    int ret;

    if (!atomic_compare_exchange_strong(&out->producer_attached, &expected, 1)) {
        tm_dev_error("soft: ring of peer %u is already connected", da->proc.pid);
        return EISCONN;
    }
    out->producer = dev->addr.proc;
    ret = soft_peer_get(dev, da, &conn->peer);
    if (ret != 0) {
        atomic_store(&out->producer_attached, 0);
        return (ret == ENOENT) ? ECONNREFUSED : ret;
    }
    conn->out            = out;
    conn->out_mask       = out->size - 1;
    conn->out_tail       = atomic_load(&out->tail);
    conn->out_head_cache = atomic_load(&out->head);
    conn->peer_proc      = da->proc;
    conn->state          = SOFT_CONN_CONNECTED;
    return 0;
}

int soft_create_conn(tm_dev_t *tdev, tm_dev_srq_t *tsrq, tm_dev_cq_t *tcq,
                     tm_dev_conn_t **conn_p)
{
    soft_dev_t *dev = soft_dev(tdev);
    soft_conn_t *conn;
    int ret;

    conn = soft_conn_alloc(dev, soft_container_of(tsrq, soft_srq_t, super),
                           soft_container_of(tcq, soft_cq_t, super));
    if (conn == NULL) {
        return ENOMEM;
    }
    conn->seq = dev->next_conn_seq++;
    ret = soft_ring_create(dev, conn->seq, &conn->in_shm);
    if (ret != 0) {
        soft_conn_free(conn);
        return ret;
    }
    soft_conn_set_in(conn);
    soft_conn_link(dev, conn);
    *conn_p = &conn->super;
    return 0;
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
    if ((conn->in != NULL) && soft_dev_is_ours(soft_dev(tconn->dev))) {
        atomic_store(&conn->in->hdr.closed, 1);
    }
    soft_shm_destroy(&conn->in_shm);      /* unlinks it if ours */
    soft_shm_destroy(&conn->out_shm);
    if (conn->peer != NULL) {
        soft_peer_put(soft_dev(tconn->dev), conn->peer);
    }
    soft_conn_free(conn);
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
    int ret;

    if ((conn->state != SOFT_CONN_INIT) || conn->passive) {
        return EINVAL;
    }
    memcpy(&ca, conn_addr, sizeof(ca));
    if (!soft_dev_addr_unpack(dev_addr, &da) ||
        !soft_is_reachable_addr(dev, &da)) {
        return EINVAL;
    }
    ret = soft_ring_attach(&da, ca.conn_seq, &conn->out_shm);
    if (ret != 0) {
        return ret;
    }
    ret = soft_conn_set_out(dev, conn, &da);
    if (ret != 0) {
        soft_shm_detach(&conn->out_shm);
    }
    return ret;
}


/* ---- connections to a remote SRQ (connect_to_srq) ---- */

void soft_srq_addr(tm_dev_srq_t *tsrq, void *addr)
{
    uint32_t seq = soft_container_of(tsrq, soft_srq_t, super)->seq;

    memcpy(addr, &seq, sizeof(seq));
}

/* Posts a request in the remote SRQ's accept queue */
static int soft_srq_request(const soft_dev_addr_t *da, uint32_t srq_seq,
                            const soft_accept_slot_t *req)
{
    soft_srq_seg_t *seg;
    soft_shm_t shm;
    uint32_t i, expected;
    char name[96];
    int ret;

    soft_seg_name(name, sizeof(name), &da->proc, da->dev_seq, 's', srq_seq);
    ret = soft_shm_attach(&shm, name);
    if (ret != 0) {
        tm_dev_error("soft: cannot reach SRQ %s: %s", name, strerror(ret));
        return (ret == ENOENT) ? ECONNREFUSED : ret;
    }
    seg = shm.base;
    if ((shm.size < sizeof(*seg)) || (seg->hdr.magic != SOFT_MAGIC) ||
        (seg->hdr.kind != SOFT_SEG_SRQ) || atomic_load(&seg->hdr.closed)) {
        soft_shm_detach(&shm);
        return ECONNREFUSED;
    }
    ret = EBUSY;            /* every slot taken: the SRQ is not polling */
    for (i = 0; i < SOFT_ACCEPT_SLOTS; ++i) {
        expected = SOFT_SLOT_FREE;
        if (!atomic_compare_exchange_strong(&seg->slot[i].state, &expected,
                                            SOFT_SLOT_CLAIMED)) {
            continue;
        }
        seg->slot[i].in_seq  = req->in_seq;
        seg->slot[i].out_seq = req->out_seq;
        seg->slot[i].qp_num  = req->qp_num;
        seg->slot[i].proc    = req->proc;
        seg->slot[i].host_id = req->host_id;
        seg->slot[i].dev_seq = req->dev_seq;
        atomic_store_explicit(&seg->slot[i].state, SOFT_SLOT_READY,
                              memory_order_release);
        atomic_fetch_add_explicit(&seg->requests, 1, memory_order_release);
        ret = 0;
        break;
    }
    soft_shm_detach(&shm);
    return ret;
}

/*
 * Active side: we create the ring we produce into (the passive half's
 * inbound) besides our own inbound ring, and ask the remote SRQ to accept.
 * We may send at once: the messages wait in the ring until it does.
 */
int soft_connect_to_srq(tm_dev_conn_t *tconn, const void *dev_addr,
                        const void *srq_addr)
{
    soft_conn_t *conn = soft_container_of(tconn, soft_conn_t, super);
    soft_dev_t *dev   = soft_dev(tconn->dev);
    soft_accept_slot_t req;
    soft_dev_addr_t da;
    uint32_t srq_seq;
    int ret;

    if ((conn->state != SOFT_CONN_INIT) || conn->passive) {
        return EINVAL;
    }
    memcpy(&srq_seq, srq_addr, sizeof(srq_seq));
    if (!soft_dev_addr_unpack(dev_addr, &da) ||
        !soft_is_reachable_addr(dev, &da)) {
        return EINVAL;
    }

    memset(&req, 0, sizeof(req));
    req.in_seq  = dev->next_conn_seq++;
    req.out_seq = conn->seq;
    req.qp_num  = conn->qp_num;
    req.proc    = dev->addr.proc;
    req.host_id = dev->addr.host_id;
    req.dev_seq = dev->addr.dev_seq;
    ret = soft_ring_create(dev, req.in_seq, &conn->out_shm);
    if (ret != 0) {
        return ret;
    }
    ret = soft_conn_set_out(dev, conn, &da);
    if (ret != 0) {
        goto err_destroy;
    }
    ret = soft_srq_request(&da, srq_seq, &req);
    if (ret != 0) {
        conn->state = SOFT_CONN_INIT;
        conn->out   = NULL;
        soft_peer_put(dev, conn->peer);
        conn->peer  = NULL;
        goto err_destroy;
    }
    return 0;

err_destroy:
    soft_shm_destroy(&conn->out_shm);
    return ret;
}

/* Passive side: a connection for a request in our SRQ's accept queue */
int soft_conn_accept(soft_srq_t *srq, const soft_accept_slot_t *req)
{
    soft_dev_t *dev = soft_dev(srq->super.dev);
    soft_dev_addr_t da;
    soft_conn_t *conn;
    int ret;

    da.host_id = req->host_id;
    da.proc    = req->proc;
    da.dev_seq = req->dev_seq;
    if (!soft_is_reachable_addr(dev, &da)) {
        return EINVAL;
    }
    /* its send completions go to the SRQ's CQ: nobody else polls for it */
    conn = soft_conn_alloc(dev, srq, srq->cq);
    if (conn == NULL) {
        return ENOMEM;
    }
    conn->passive = true;
    conn->seq     = UINT32_MAX;
    ret = soft_ring_attach(&da, req->in_seq, &conn->in_shm);
    if (ret != 0) {
        goto err_free;
    }
    soft_conn_set_in(conn);
    ret = soft_ring_attach(&da, req->out_seq, &conn->out_shm);
    if (ret != 0) {
        goto err_detach_in;
    }
    ret = soft_conn_set_out(dev, conn, &da);
    if (ret != 0) {
        goto err_detach_out;
    }
    soft_conn_link(dev, conn);
    tm_dev_debug("soft: SRQ %u accepted qp 0x%x of process %u as qp 0x%x",
                 srq->seq, req->qp_num, req->proc.pid, conn->qp_num);
    return 0;

err_detach_out:
    soft_shm_detach(&conn->out_shm);
err_detach_in:
    soft_shm_detach(&conn->in_shm);
err_free:
    soft_conn_free(conn);
    return ret;
}

tm_dev_conn_t *soft_srq_conn(tm_dev_srq_t *tsrq, uint32_t qp_num)
{
    soft_srq_t *srq = soft_container_of(tsrq, soft_srq_t, super);
    soft_list_t *it;
    soft_conn_t *conn;

    for (it = srq->conns.next; it != &srq->conns; it = it->next) {
        conn = soft_container_of(it, soft_conn_t, srq_link);
        if (conn->qp_num == qp_num) {
            return &conn->super;
        }
    }
    return NULL;
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
            soft_ring_publish(conn, rec, sizeof(conn->fins[i].data), 0, 0);
        }
        memmove(conn->fins, conn->fins + i,
                (conn->fin_count - i) * sizeof(*conn->fins));
        conn->fin_count -= i;
    }

    while (conn->sq_sent != conn->sq_tail) {
        wqe = soft_sq_wqe(conn, conn->sq_sent);
        if (soft_likely((wqe->opcode == IBV_WR_SEND) ||
                        (wqe->opcode == IBV_WR_SEND_WITH_IMM))) {
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
            soft_ring_publish(conn, rec, wqe->byte_len,
                              (wqe->opcode == IBV_WR_SEND_WITH_IMM) ?
                              SOFT_REC_F_IMM : 0, wqe->imm_data);
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
    bool head_read = false;

    while (conn->sq_head != conn->sq_tail) {
        wqe = soft_sq_wqe(conn, conn->sq_head);
        if (wqe->state == SOFT_WQE_SENT) {
            if ((int64_t)(conn->out_head_cache - wqe->ring_end) < 0) {
                if (head_read || ((++conn->head_polls & 15) != 0)) {
                    break;
                }
                conn->out_head_cache = atomic_load_explicit(&conn->out->head,
                                                            memory_order_acquire);
                head_read = true;
                if ((int64_t)(conn->out_head_cache - wqe->ring_end) < 0) {
                    break;          /* not yet consumed by the peer */
                }
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
        /* still waiting: is the peer still there?  (rate-limited: the clock
         * is read every 64 polls, /proc every SOFT_LIVENESS_PERIOD_NS) */
        if ((++conn->liveness_polls & 63) != 1) {
            return;
        }
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
            soft_ring_publish(conn, rec, (uint32_t)len, 0, 0);
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
    case IBV_WR_SEND_WITH_IMM:
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
    wqe->imm_data   = wr->imm_data;
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

/*
 * Fast path of an inline SEND: when nothing waits ahead of it and the ring
 * has room, the data goes from the gather list straight into the ring (one
 * copy, as for a non-inline SEND) and the send queue entry keeps only what
 * its completion needs.  Same result as filling the entry and pushing it.
 */
static bool soft_post_inline_direct(soft_conn_t *conn,
                                    const struct ibv_send_wr *wr,
                                    soft_wqe_t *wqe)
{
    uint64_t len = 0;
    soft_rec_t *rec;
    uint8_t *dst;
    int i;

    if (((wr->opcode != IBV_WR_SEND) && (wr->opcode != IBV_WR_SEND_WITH_IMM)) ||
        !(wr->send_flags & IBV_SEND_INLINE) ||
        (conn->state != SOFT_CONN_CONNECTED) ||
        (conn->sq_sent != conn->sq_tail) || (conn->fin_count != 0) ||
        (wr->num_sge < 0) || (wr->num_sge > SOFT_MAX_SGE)) {
        return false;
    }
    for (i = 0; i < wr->num_sge; ++i) {
        len += wr->sg_list[i].length;
    }
    if ((len > SOFT_MAX_INLINE) ||
        (len > soft_dev(conn->super.dev)->caps.max_msg_size)) {
        return false;                   /* soft_wqe_fill() reports it */
    }
    rec = soft_ring_reserve(conn, (uint32_t)len);
    if (rec == NULL) {
        return false;
    }
    for (i = 0, dst = (uint8_t *)(rec + 1); i < wr->num_sge; ++i) {
        memcpy(dst, (void *)(uintptr_t)wr->sg_list[i].addr,
               wr->sg_list[i].length);
        dst += wr->sg_list[i].length;
    }
    soft_ring_publish(conn, rec, (uint32_t)len,
                      (wr->opcode == IBV_WR_SEND_WITH_IMM) ? SOFT_REC_F_IMM : 0,
                      wr->imm_data);
    wqe->wr_id      = wr->wr_id;
    wqe->opcode     = (uint8_t)wr->opcode;
    wqe->signaled   = !!(wr->send_flags & IBV_SEND_SIGNALED);
    wqe->state      = SOFT_WQE_SENT;
    wqe->status     = IBV_WC_SUCCESS;
    wqe->byte_len   = (uint32_t)len;
    wqe->ring_end   = conn->out_tail;
    return true;
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
        if (soft_post_inline_direct(conn, wr, wqe)) {
            ++conn->sq_tail;
            ++conn->sq_sent;
            continue;
        }
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
