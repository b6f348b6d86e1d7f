/*
 * TM-SRQ of the software device: the matching list, phase synchronisation
 * and receive completions (docs/soft-device.md; the rules are those of
 * shared/notes/tm-device-semantics.md).
 *
 * Three kinds of device events, each run by soft_srq_step_*():
 *   OP       the oldest posted list operation takes effect;
 *   ARRIVAL  the oldest message of one connection is judged and placed;
 *   DATA     the second half of a two-step match: DATA_VALID (eager longer
 *            than eager_packet_size; rendezvous after the device's RDMA read,
 *            followed by the FIN).
 * In AUTO mode poll_cq runs them; tests may run them one by one.
 *
 * Phase: hw_unexp counts tagged messages judged unexpected.  Judging one
 * puts the device out of phase; entries added from then on (seq >=
 * match_barrier) are not matchable until an operation carrying
 * unexpected_cnt == hw_unexp brings the device back in phase.
 */
#include "soft_dev.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SOFT_TMH_LEN   sizeof(struct ibv_tmh)
#define SOFT_RVH_LEN   sizeof(struct ibv_rvh)

/* How an arriving message is handled */
typedef enum {
    SOFT_ARR_UNEXP,        /* tagged, no matchable entry: untagged buffer */
    SOFT_ARR_NO_TAG,       /* IBV_TMH_NO_TAG: untagged buffer */
    SOFT_ARR_OTHER,        /* FIN, or not a TM message: untagged buffer */
    SOFT_ARR_EAGER,        /* matched eager */
    SOFT_ARR_RNDV          /* matched rendezvous */
} soft_arrival_kind_t;


/* ---- the matching list ---- */

static inline uint32_t soft_tag_handle(const soft_tag_t *tag, uint32_t index)
{
    return (tag->gen << SOFT_TAG_INDEX_BITS) | index;
}

static inline uint32_t soft_tag_index(const soft_srq_t *srq, const soft_tag_t *tag)
{
    return (uint32_t)(tag - srq->tags);
}

/* A consumed or deleted entry is reusable once no pending op names it */
static void soft_tag_try_free(soft_srq_t *srq, soft_tag_t *tag)
{
    if ((tag->state != SOFT_TAG_DEAD) ||
        (srq->tag_refs[soft_tag_index(srq, tag)] != 0)) {
        return;
    }
    tag->state = SOFT_TAG_FREE;
    tag->gen   = (tag->gen + 1) & ((1u << (32 - SOFT_TAG_INDEX_BITS)) - 1);
    if (tag->gen == 0) {
        tag->gen = 1;
    }
    soft_list_add_tail(&srq->tag_free, &tag->link);
}

/* Takes an entry out of the list (consumed by a message or deleted) */
static void soft_tag_retire(soft_srq_t *srq, soft_tag_t *tag)
{
    tm_matcher_remove(&srq->listed, &tag->entry);
    tag->state = SOFT_TAG_DEAD;
    --srq->tags_used;
    soft_tag_try_free(srq, tag);
}

/* The first-added matchable entry for tag, or NULL.  The first-added of all
 * matching entries decides: if it was added out of phase, so were all later
 * ones. */
static soft_tag_t *soft_tag_match(soft_srq_t *srq, uint64_t msg_tag)
{
    tm_matcher_entry_t *e = tm_matcher_peek(&srq->listed, msg_tag);

    if ((e == NULL) || (e->seq >= srq->match_barrier)) {
        return NULL;
    }
    return e->arg;
}

static inline unsigned soft_srq_sync_flag(const soft_srq_t *srq)
{
    return srq->in_phase ? 0 : IBV_WC_TM_SYNC_REQ;
}

static void soft_srq_go_out_of_phase(soft_srq_t *srq)
{
    ++srq->hw_unexp;
    if (srq->in_phase) {
        srq->in_phase      = false;
        srq->match_barrier = srq->next_add_seq;
    }
}

static void soft_srq_sync(soft_srq_t *srq, uint32_t unexpected_cnt)
{
    if (unexpected_cnt == srq->hw_unexp) {
        srq->in_phase      = true;
        srq->match_barrier = UINT64_MAX;
    }
}


/* ---- creation ---- */

static int soft_srq_seg_create(soft_dev_t *dev, soft_srq_t *srq)
{
    char name[96];
    int ret;

    srq->seq = dev->next_srq_seq++;
    soft_seg_name(name, sizeof(name), &dev->addr.proc, dev->addr.dev_seq, 's',
                  srq->seq);
    ret = soft_shm_create(&srq->shm, name, sizeof(soft_srq_seg_t));
    if (ret != 0) {
        return ret;
    }
    srq->seg = srq->shm.base;
    soft_seg_hdr_init(&srq->seg->hdr, &dev->addr.proc, SOFT_SEG_SRQ);
    return 0;
}

/* Accepts the connections peers asked for since the last poll */
void soft_srq_accept(soft_srq_t *srq)
{
    soft_accept_slot_t *slot;
    uint32_t i;
    int ret;

    if (soft_likely(atomic_load_explicit(&srq->seg->requests,
                                         memory_order_acquire) == srq->accepted)) {
        return;
    }
    for (i = 0; i < SOFT_ACCEPT_SLOTS; ++i) {
        slot = &srq->seg->slot[i];
        if (atomic_load_explicit(&slot->state, memory_order_acquire) !=
            SOFT_SLOT_READY) {
            continue;
        }
        ret = soft_conn_accept(srq, slot);
        if (ret != 0) {
            tm_dev_warn("soft: SRQ %u refused a connection of process %u: %s",
                        srq->seq, slot->proc.pid, strerror(ret));
        }
        ++srq->accepted;
        atomic_store_explicit(&slot->state, SOFT_SLOT_FREE,
                              memory_order_release);
    }
}

int soft_create_srq(tm_dev_t *tdev, tm_dev_cq_t *tcq, tm_dev_srq_t **srq_p)
{
    soft_dev_t *dev = soft_dev(tdev);
    soft_cq_t *cq   = soft_container_of(tcq, soft_cq_t, super);
    soft_srq_t *srq;
    uint32_t i;

    srq = calloc(1, sizeof(*srq));
    if (srq == NULL) {
        return ENOMEM;
    }
    srq->max_tags  = dev->caps.tm.max_num_tags;
    srq->max_ops   = dev->caps.tm.max_ops;
    srq->rbuf_mask = soft_roundup_pow2(dev->srq_depth) - 1;
    srq->xfer_mask = soft_roundup_pow2(srq->max_tags) - 1;
    srq->rbufs     = calloc(srq->rbuf_mask + 1, sizeof(*srq->rbufs));
    srq->tags      = calloc(srq->max_tags, sizeof(*srq->tags));
    srq->tag_refs  = calloc(srq->max_tags, sizeof(*srq->tag_refs));
    srq->ops       = calloc(srq->max_ops, sizeof(*srq->ops));
    srq->xfers     = calloc(srq->xfer_mask + 1, sizeof(*srq->xfers));
    if (!srq->rbufs || !srq->tags || !srq->tag_refs || !srq->ops ||
        !srq->xfers) {
        soft_destroy_srq(&srq->super);
        return ENOMEM;
    }

    if (tm_matcher_init(&srq->listed, &srq->next_add_seq) != 0) {
        soft_destroy_srq(&srq->super);
        return ENOMEM;
    }
    soft_list_init(&srq->tag_free);
    for (i = 0; i < srq->max_tags; ++i) {
        srq->tags[i].gen = 1;
        soft_list_add_tail(&srq->tag_free, &srq->tags[i].link);
    }
    soft_list_init(&srq->conns);
    srq->rr_next       = &srq->conns;
    if (soft_srq_seg_create(dev, srq) != 0) {
        soft_destroy_srq(&srq->super);
        return ENOMEM;
    }
    srq->in_phase      = true;
    srq->match_barrier = UINT64_MAX;
    srq->super.dev     = tdev;
    srq->cq            = cq;
    soft_list_add_tail(&cq->srqs, &srq->link);
    *srq_p = &srq->super;
    return 0;
}

void soft_destroy_srq(tm_dev_srq_t *tsrq)
{
    soft_srq_t *srq = soft_container_of(tsrq, soft_srq_t, super);
    soft_list_t *it, *next;
    soft_conn_t *conn;

    if ((srq->seg != NULL) && soft_shm_is_ours(&srq->shm)) {
        atomic_store(&srq->seg->hdr.closed, 1);
    }
    soft_shm_destroy(&srq->shm);
    if (srq->conns.next != NULL) {
        /* the passive halves of connections to us are ours */
        for (it = srq->conns.next; it != &srq->conns; it = next) {
            next = it->next;
            conn = soft_container_of(it, soft_conn_t, srq_link);
            if (conn->passive) {
                soft_destroy_conn(&conn->super);
            }
        }
        if (!soft_list_empty(&srq->conns)) {
            tm_dev_warn("soft: SRQ destroyed while connections use it");
        }
    }
    if (srq->cq != NULL) {
        soft_list_del(&srq->link);
    }
    tm_matcher_cleanup(&srq->listed);
    free(srq->rbufs);
    free(srq->tags);
    free(srq->tag_refs);
    free(srq->ops);
    free(srq->xfers);
    free(srq);
}

void soft_srq_forget_conn(soft_srq_t *srq, soft_conn_t *conn)
{
    uint32_t i;

    for (i = srq->xfer_head; i != srq->xfer_tail; ++i) {
        if (srq->xfers[i & srq->xfer_mask].conn == conn) {
            srq->xfers[i & srq->xfer_mask].conn = NULL;
        }
    }
}


/* ---- posting ---- */

int soft_post_srq_recv(tm_dev_srq_t *tsrq, struct ibv_recv_wr *wr,
                       struct ibv_recv_wr **bad_wr)
{
    soft_srq_t *srq = soft_container_of(tsrq, soft_srq_t, super);
    soft_dev_t *dev = soft_dev(tsrq->dev);
    soft_rbuf_t *rbuf;
    int ret = 0;

    for (; wr != NULL; wr = wr->next) {
        if ((wr->num_sge < 0) || (wr->num_sge > 1)) {
            ret = EINVAL;
            break;
        }
        if (srq->rbuf_tail - srq->rbuf_head >= dev->srq_depth) {
            ret = ENOMEM;
            break;
        }
        rbuf         = &srq->rbufs[srq->rbuf_tail & srq->rbuf_mask];
        rbuf->wr_id  = wr->wr_id;
        rbuf->addr   = wr->num_sge ? wr->sg_list[0].addr : 0;
        rbuf->length = wr->num_sge ? wr->sg_list[0].length : 0;
        rbuf->lkey   = wr->num_sge ? wr->sg_list[0].lkey : 0;
        ++srq->rbuf_tail;
    }
    if (ret != 0) {
        *bad_wr = wr;
    }
    return ret;
}

/* Checks and queues one list operation; nothing changes if it fails */
static int soft_post_one_op(soft_srq_t *srq, struct ibv_ops_wr *wr)
{
    soft_op_t *op;
    soft_tag_t *tag;
    uint32_t index;

    if (srq->op_tail - srq->op_head >= srq->max_ops) {
        return ENOMEM;
    }
    op = &srq->ops[srq->op_tail % srq->max_ops];

    switch (wr->opcode) {
    case IBV_WR_TAG_ADD:
        if ((wr->tm.add.num_sge < 0) || (wr->tm.add.num_sge > 1)) {
            return EINVAL;
        }
        if ((srq->tags_used >= srq->max_tags) || soft_list_empty(&srq->tag_free) ||
            (tm_matcher_reserve(&srq->listed, wr->tm.add.mask,
                                srq->max_tags) != 0)) {
            return ENOMEM;
        }
        tag = soft_container_of(srq->tag_free.next, soft_tag_t, link);
        soft_list_del(&tag->link);
        index           = soft_tag_index(srq, tag);
        tag->state      = SOFT_TAG_POSTED;
        tag->tag        = wr->tm.add.tag;
        tag->mask       = wr->tm.add.mask;
        tag->recv_wr_id = wr->tm.add.recv_wr_id;
        tag->addr       = wr->tm.add.num_sge ? wr->tm.add.sg_list[0].addr : 0;
        tag->length     = wr->tm.add.num_sge ? wr->tm.add.sg_list[0].length : 0;
        tag->lkey       = wr->tm.add.num_sge ? wr->tm.add.sg_list[0].lkey : 0;
        ++srq->tags_used;
        ++srq->tag_refs[index];
        wr->tm.handle = soft_tag_handle(tag, index);
        op->index     = index;
        op->gen       = tag->gen;
        break;
    case IBV_WR_TAG_DEL:
        index = wr->tm.handle & SOFT_MAX_NUM_TAGS_LIMIT;
        if (index >= srq->max_tags) {
            return EINVAL;
        }
        op->index = index;
        op->gen   = wr->tm.handle >> SOFT_TAG_INDEX_BITS;
        /* a stale handle (entry long gone) fails at processing: TM_ERR */
        if ((srq->tags[index].gen == op->gen) &&
            (srq->tags[index].state != SOFT_TAG_FREE)) {
            ++srq->tag_refs[index];
        }
        break;
    case IBV_WR_TAG_SYNC:
        op->index = 0;
        op->gen   = 0;
        break;
    default:
        return EINVAL;
    }

    op->wr_id          = wr->wr_id;
    op->opcode         = (uint8_t)wr->opcode;
    op->flags          = (uint8_t)wr->flags;
    op->unexpected_cnt = wr->tm.unexpected_cnt;
    ++srq->op_tail;
    return 0;
}

int soft_post_srq_ops(tm_dev_srq_t *tsrq, struct ibv_ops_wr *wr,
                      struct ibv_ops_wr **bad_wr)
{
    soft_srq_t *srq = soft_container_of(tsrq, soft_srq_t, super);
    int ret;

    for (; wr != NULL; wr = wr->next) {
        ret = soft_post_one_op(srq, wr);
        if (ret != 0) {
            *bad_wr = wr;
            return ret;
        }
    }
    return 0;
}


/* ---- OP event ---- */

bool soft_srq_op_ready(const soft_srq_t *srq)
{
    return (srq->op_head != srq->op_tail) && soft_cq_has_room(srq->cq, 1);
}

int soft_srq_step_op(soft_srq_t *srq)
{
    enum ibv_wc_status status = IBV_WC_SUCCESS;
    enum ibv_wc_opcode opcode;
    soft_tag_t *tag = NULL;
    tm_dev_wc_t *wc;
    soft_op_t *op;

    if (!soft_srq_op_ready(srq)) {
        return EAGAIN;
    }
    op = &srq->ops[srq->op_head % srq->max_ops];
    ++srq->op_head;

    /* the count first: an ADD carrying the right count is matchable at once */
    if (op->flags & IBV_OPS_TM_SYNC) {
        soft_srq_sync(srq, op->unexpected_cnt);
    }

    switch (op->opcode) {
    case IBV_WR_TAG_ADD:
        opcode       = IBV_WC_TM_ADD;
        tag          = &srq->tags[op->index];
        --srq->tag_refs[op->index];
        /* room was reserved when the ADD was posted */
        if (tm_matcher_post(&srq->listed, &tag->entry, tag->tag, tag->mask,
                            tag) != 0) {
            status = IBV_WC_GENERAL_ERR;
            tag->state = SOFT_TAG_DEAD;
            --srq->tags_used;
            soft_tag_try_free(srq, tag);
            break;
        }
        tag->state = SOFT_TAG_LISTED;
        break;
    case IBV_WR_TAG_DEL:
        opcode = IBV_WC_TM_DEL;
        tag    = &srq->tags[op->index];
        if ((tag->gen != op->gen) || (tag->state == SOFT_TAG_FREE)) {
            status = IBV_WC_TM_ERR;     /* consumed and reused long ago */
            break;
        }
        --srq->tag_refs[op->index];
        if (tag->state == SOFT_TAG_LISTED) {
            soft_tag_retire(srq, tag);
        } else {
            status = IBV_WC_TM_ERR;     /* a message consumed it first */
            soft_tag_try_free(srq, tag);
        }
        break;
    default:
        opcode = IBV_WC_TM_SYNC;
        break;
    }

    if (op->flags & IBV_OPS_SIGNALED) {
        wc           = soft_cq_push(srq->cq);
        wc->wr_id    = op->wr_id;
        wc->status   = status;
        wc->opcode   = opcode;
        wc->qp_num   = 0;
        wc->wc_flags = soft_srq_sync_flag(srq);
    }
    return 0;
}


/* ---- ARRIVAL event ---- */

/* Judges a message against the list as it stands (changes nothing) */
static soft_arrival_kind_t soft_srq_judge(soft_srq_t *srq, const soft_rec_t *rec,
                                          soft_tag_t **tag_p)
{
    const struct ibv_tmh *tmh = (const struct ibv_tmh *)(rec + 1);

    *tag_p = NULL;
    if (rec->len < SOFT_TMH_LEN) {
        return SOFT_ARR_OTHER;
    }
    switch (tmh->opcode) {
    case IBV_TMH_NO_TAG:
        return SOFT_ARR_NO_TAG;
    case IBV_TMH_EAGER:
        break;
    case IBV_TMH_RNDV:
        if (rec->len < SOFT_TMH_LEN + SOFT_RVH_LEN) {
            return SOFT_ARR_OTHER;  /* malformed: software sees it whole */
        }
        break;
    default:
        return SOFT_ARR_OTHER;      /* FIN and unknown opcodes */
    }
    *tag_p = soft_tag_match(srq, be64toh(tmh->tag));
    if (*tag_p == NULL) {
        return SOFT_ARR_UNEXP;
    }
    return (tmh->opcode == IBV_TMH_EAGER) ? SOFT_ARR_EAGER : SOFT_ARR_RNDV;
}

static inline bool soft_srq_xfer_full(const soft_srq_t *srq)
{
    return srq->xfer_tail - srq->xfer_head > srq->xfer_mask;
}

/* Can the oldest message of conn be delivered now?  (RNR if not) */
static bool soft_srq_arrival_peek(soft_srq_t *srq, soft_conn_t *conn,
                                  soft_rec_t **rec_p, soft_tag_t **tag_p,
                                  soft_arrival_kind_t *kind_p)
{
    if ((conn->state != SOFT_CONN_CONNECTED) || !soft_cq_has_room(srq->cq, 1) ||
        !soft_ring_peek(conn, rec_p)) {
        return false;
    }
    *kind_p = soft_srq_judge(srq, *rec_p, tag_p);
    if ((*kind_p == SOFT_ARR_EAGER) || (*kind_p == SOFT_ARR_RNDV)) {
        /* the second half may need a transfer slot */
        return !soft_srq_xfer_full(srq);
    }
    return srq->rbuf_head != srq->rbuf_tail;
}

bool soft_srq_arrival_ready(soft_srq_t *srq, soft_conn_t *conn)
{
    soft_arrival_kind_t kind;
    soft_rec_t *rec;
    soft_tag_t *tag;

    return soft_srq_arrival_peek(srq, conn, &rec, &tag, &kind);
}

static inline void soft_wc_imm_fill(tm_dev_wc_t *wc, const soft_rec_t *rec)
{
    if (rec->flags & SOFT_REC_F_IMM) {
        wc->wc_flags |= IBV_WC_WITH_IMM;
        wc->imm_data  = rec->imm_data;
    }
}

static void soft_wc_tm_fill(tm_dev_wc_t *wc, const struct ibv_tmh *tmh)
{
    wc->tm_info.tag  = be64toh(tmh->tag);
    wc->tm_info.priv = be32toh(tmh->app_ctx);
}

/* Whole message into the next untagged buffer */
static void soft_srq_deliver_untagged(soft_srq_t *srq, soft_conn_t *conn,
                                      const soft_rec_t *rec,
                                      soft_arrival_kind_t kind)
{
    soft_dev_t *dev   = soft_dev(srq->super.dev);
    soft_rbuf_t *rbuf = &srq->rbufs[srq->rbuf_head++ & srq->rbuf_mask];
    tm_dev_wc_t *wc;

    if (kind == SOFT_ARR_UNEXP) {
        soft_srq_go_out_of_phase(srq);
    }

    wc           = soft_cq_push(srq->cq);
    wc->wr_id    = rbuf->wr_id;
    wc->opcode   = (kind == SOFT_ARR_NO_TAG) ? IBV_WC_TM_NO_TAG : IBV_WC_RECV;
    wc->qp_num   = conn->qp_num;
    wc->byte_len = rec->len;
    wc->wc_flags = soft_srq_sync_flag(srq);
    soft_wc_imm_fill(wc, rec);
    if (soft_unlikely(rec->len > rbuf->length)) {
        wc->status = IBV_WC_LOC_LEN_ERR;
    } else if (soft_unlikely(!soft_key_check(dev->seg, rbuf->lkey, rbuf->addr,
                                             rec->len, 0) && rec->len)) {
        wc->status = IBV_WC_LOC_PROT_ERR;
    } else {
        memcpy((void *)(uintptr_t)rbuf->addr, rec + 1, rec->len);
        wc->status = IBV_WC_SUCCESS;
    }
}

static tm_dev_wc_t *soft_srq_push_tm_recv(soft_srq_t *srq, soft_conn_t *conn,
                                          const soft_tag_t *tag,
                                          const struct ibv_tmh *tmh)
{
    tm_dev_wc_t *wc = soft_cq_push(srq->cq);

    wc->wr_id    = tag->recv_wr_id;
    wc->opcode   = IBV_WC_TM_RECV;
    wc->status   = IBV_WC_SUCCESS;
    wc->qp_num   = conn->qp_num;
    soft_wc_tm_fill(wc, tmh);
    return wc;
}

static soft_xfer_t *soft_srq_xfer_push(soft_srq_t *srq, soft_conn_t *conn,
                                       const soft_tag_t *tag,
                                       const struct ibv_tmh *tmh)
{
    soft_xfer_t *xfer = &srq->xfers[srq->xfer_tail++ & srq->xfer_mask];

    xfer->conn       = conn;
    xfer->recv_wr_id = tag->recv_wr_id;
    xfer->tag        = be64toh(tmh->tag);
    xfer->app_ctx    = be32toh(tmh->app_ctx);
    xfer->local_addr = tag->addr;
    return xfer;
}

/* Matched eager: payload (without TMH) into the tagged buffer */
static void soft_srq_deliver_eager(soft_srq_t *srq, soft_conn_t *conn,
                                   const soft_rec_t *rec, soft_tag_t *tag)
{
    soft_dev_t *dev = soft_dev(srq->super.dev);
    const struct ibv_tmh *tmh = (const struct ibv_tmh *)(rec + 1);
    uint32_t len = rec->len - SOFT_TMH_LEN;
    soft_xfer_t *xfer;
    tm_dev_wc_t *wc;

    wc           = soft_srq_push_tm_recv(srq, conn, tag, tmh);
    wc->byte_len = len;
    wc->wc_flags = IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID |
                   soft_srq_sync_flag(srq);
    soft_wc_imm_fill(wc, rec);
    if (soft_unlikely(len > tag->length)) {
        wc->status = IBV_WC_LOC_LEN_ERR;    /* entry consumed, nothing written */
    } else if (soft_unlikely(len && !soft_key_check(dev->seg, tag->lkey,
                                                    tag->addr, len, 0))) {
        wc->status = IBV_WC_LOC_PROT_ERR;
    } else {
        memcpy((void *)(uintptr_t)tag->addr, tmh + 1, len);
        if (len > dev->caps.eager_packet_size) {
            /* two steps: MATCH now, DATA_VALID as a later event */
            wc->wc_flags &= ~IBV_WC_TM_DATA_VALID;
            xfer           = soft_srq_xfer_push(srq, conn, tag, tmh);
            xfer->rndv     = false;
            xfer->byte_len = len;
            xfer->imm_flag = wc->wc_flags & IBV_WC_WITH_IMM;
            xfer->imm_data = wc->imm_data;
        }
    }
    soft_tag_retire(srq, tag);
}

/* Matched rendezvous: MATCH now; the read, DATA_VALID and FIN later */
static void soft_srq_deliver_rndv(soft_srq_t *srq, soft_conn_t *conn,
                                  const soft_rec_t *rec, soft_tag_t *tag)
{
    const struct ibv_tmh *tmh = (const struct ibv_tmh *)(rec + 1);
    const struct ibv_rvh *rvh = (const struct ibv_rvh *)(tmh + 1);
    soft_dev_t *dev = soft_dev(srq->super.dev);
    uint32_t rndv_len = be32toh(rvh->len);
    uint32_t hdr_len;
    soft_xfer_t *xfer;
    tm_dev_wc_t *wc;

    wc           = soft_srq_push_tm_recv(srq, conn, tag, tmh);
    wc->wc_flags = IBV_WC_TM_MATCH | soft_srq_sync_flag(srq);
    soft_wc_imm_fill(wc, rec);

    if (rndv_len > tag->length) {
        /* software finishes it: the headers go into the tagged buffer */
        hdr_len = (rec->len < tag->length) ? rec->len : tag->length;
        if (hdr_len && !soft_key_check(dev->seg, tag->lkey, tag->addr,
                                       hdr_len, 0)) {
            wc->status = IBV_WC_LOC_PROT_ERR;
        } else {
            memcpy((void *)(uintptr_t)tag->addr, tmh, hdr_len);
            wc->status = IBV_WC_TM_RNDV_INCOMPLETE;
        }
        wc->byte_len = hdr_len;
    } else {
        wc->byte_len    = rndv_len;
        xfer            = soft_srq_xfer_push(srq, conn, tag, tmh);
        xfer->rndv      = true;
        xfer->byte_len  = rndv_len;
        xfer->remote_va = be64toh(rvh->va);
        xfer->rkey      = be32toh(rvh->rkey);
        xfer->rndv_len  = rndv_len;
        xfer->lkey      = tag->lkey;
        xfer->imm_flag  = wc->wc_flags & IBV_WC_WITH_IMM;
        xfer->imm_data  = wc->imm_data;
        memcpy(xfer->fin, tmh, SOFT_TMH_LEN + SOFT_RVH_LEN);
        ((struct ibv_tmh *)xfer->fin)->opcode = IBV_TMH_FIN;
    }
    soft_tag_retire(srq, tag);
}

int soft_srq_step_arrival(soft_srq_t *srq, soft_conn_t *conn)
{
    soft_arrival_kind_t kind;
    soft_rec_t *rec;
    soft_tag_t *tag;

    if (!soft_srq_arrival_peek(srq, conn, &rec, &tag, &kind)) {
        return EAGAIN;
    }
    switch (kind) {
    case SOFT_ARR_EAGER:
        soft_srq_deliver_eager(srq, conn, rec, tag);
        break;
    case SOFT_ARR_RNDV:
        soft_srq_deliver_rndv(srq, conn, rec, tag);
        break;
    default:
        soft_srq_deliver_untagged(srq, conn, rec, kind);
        break;
    }
    soft_ring_release(conn, rec);
    return 0;
}


/* ---- DATA event ---- */

/* The device's RDMA read of a matched rendezvous; a wc status */
static enum ibv_wc_status soft_xfer_read(soft_srq_t *srq, soft_xfer_t *xfer)
{
    soft_dev_t *dev   = soft_dev(srq->super.dev);
    soft_conn_t *conn = xfer->conn;
    int ret;

    if ((conn == NULL) || (conn->state != SOFT_CONN_CONNECTED)) {
        return IBV_WC_WR_FLUSH_ERR;
    }
    if (xfer->rndv_len == 0) {
        return IBV_WC_SUCCESS;
    }
    if (!soft_key_check(dev->seg, xfer->lkey, xfer->local_addr,
                        xfer->rndv_len, 0)) {
        return IBV_WC_LOC_PROT_ERR;
    }
    if (!soft_key_check(conn->peer->seg, xfer->rkey, xfer->remote_va,
                        xfer->rndv_len, IBV_ACCESS_REMOTE_READ)) {
        return IBV_WC_REM_ACCESS_ERR;
    }
    ret = soft_rdma_copy((pid_t)conn->peer_proc.pid, false,
                         (void *)(uintptr_t)xfer->local_addr, xfer->remote_va,
                         xfer->rndv_len);
    if (ret == 0) {
        return IBV_WC_SUCCESS;
    }
    return (ret == ESRCH) ? IBV_WC_RETRY_EXC_ERR : IBV_WC_REM_ACCESS_ERR;
}

bool soft_srq_data_ready(const soft_srq_t *srq)
{
    return (srq->xfer_head != srq->xfer_tail) && soft_cq_has_room(srq->cq, 1);
}

int soft_srq_step_data(soft_srq_t *srq)
{
    soft_xfer_t *xfer;
    tm_dev_wc_t *wc;
    enum ibv_wc_status status = IBV_WC_SUCCESS;

    if (!soft_srq_data_ready(srq)) {
        return EAGAIN;
    }
    xfer = &srq->xfers[srq->xfer_head++ & srq->xfer_mask];
    if (xfer->rndv) {
        status = soft_xfer_read(srq, xfer);
        if ((status != IBV_WC_SUCCESS) && (xfer->conn != NULL)) {
            /* as a NIC's QP would: a failed read breaks the connection */
            soft_conn_set_error(xfer->conn);
        }
    }

    wc              = soft_cq_push(srq->cq);
    wc->wr_id       = xfer->recv_wr_id;
    wc->status      = status;
    wc->opcode      = IBV_WC_TM_RECV;
    wc->qp_num      = (xfer->conn != NULL) ? xfer->conn->qp_num : 0;
    wc->byte_len    = (status == IBV_WC_SUCCESS) ? xfer->byte_len : 0;
    wc->wc_flags    = IBV_WC_TM_DATA_VALID | soft_srq_sync_flag(srq) |
                      xfer->imm_flag;
    wc->imm_data    = xfer->imm_data;
    wc->tm_info.tag  = xfer->tag;
    wc->tm_info.priv = xfer->app_ctx;

    if (xfer->rndv && (status == IBV_WC_SUCCESS)) {
        soft_conn_send_fin(xfer->conn, xfer->fin, sizeof(xfer->fin));
    }
    return 0;
}


/* ---- AUTO mode: everything that can be done now ---- */

static unsigned soft_srq_run_ops(soft_srq_t *srq)
{
    unsigned n = 0;

    while (!srq->hold_ops && (soft_srq_step_op(srq) == 0)) {
        ++n;
    }
    return n;
}

/* Arrivals, round-robin over connections, one message each per round */
static unsigned soft_srq_run_arrivals(soft_srq_t *srq)
{
    soft_list_t *start, *it;
    unsigned n = 0, round;

    if (soft_list_empty(&srq->conns)) {
        return 0;
    }
    do {
        round = 0;
        start = srq->rr_next;
        it    = start;
        do {
            if (it != &srq->conns) {
                if (soft_srq_step_arrival(srq, soft_container_of(it, soft_conn_t,
                                                                 srq_link)) == 0) {
                    ++round;
                }
            }
            it = it->next;
        } while (it != start);
        srq->rr_next = start->next;
        n += round;
    } while (round != 0);
    return n;
}

static unsigned soft_srq_run_data(soft_srq_t *srq)
{
    unsigned n = 0;

    while (soft_srq_step_data(srq) == 0) {
        ++n;
    }
    return n;
}

void soft_srq_progress(soft_srq_t *srq)
{
    soft_dev_t *dev = soft_dev(srq->super.dev);
    unsigned n;

    switch (dev->order) {
    case TM_SOFT_ORDER_OPS_FIRST:
        soft_srq_run_ops(srq);
        soft_srq_run_arrivals(srq);
        soft_srq_run_data(srq);
        break;
    case TM_SOFT_ORDER_ARRIVALS_FIRST:
        soft_srq_run_arrivals(srq);
        soft_srq_run_data(srq);
        soft_srq_run_ops(srq);
        break;
    case TM_SOFT_ORDER_RANDOM:
        for (n = 0; n < 4096; ++n) {
            if (soft_srq_step_random(srq, &dev->rng) != 0) {
                break;
            }
        }
        break;
    }
}
