/*
 * Software NIC: the TM-SRQ.  Untagged buffers, list operations (posted,
 * then processed in order by the OP stage), the matching list and phase
 * synchronisation (docs/soft-device-datapath.md; the rules are those of
 * shared/notes/tm-device-semantics.md), and the engine that runs the
 * stages in SOFTNIC_MODE_AUTO.
 *
 * Three kinds of NIC events, each run by sn_srq_step_*():
 *   OP       the oldest posted list operation takes effect (here);
 *   ARRIVAL  the oldest message of one QP is judged and placed
 *            (softnic_resp.c);
 *   DATA     the second half of a two-step match: DATA_VALID (eager longer
 *            than the packet size; rendezvous after the NIC's RDMA read,
 *            followed by the FIN) (softnic_resp.c).
 *
 * Phase: hw_unexp counts tagged messages judged unexpected, in 16 bits as
 * mlx5's counter.  Judging one puts the NIC out of phase; entries added
 * from then on (seq >= match_barrier) are not matchable until an operation
 * carrying unexpected_cnt == hw_unexp (16 bits) brings it back in phase.
 * SYNC_REQ follows rdma-core's rules (sn_srq_cqe_poll), not the phase.
 */
#include "softnic_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- the matching list ---- */

/* The provider gives a handle back once nothing more names it */
static void sn_tag_release(sn_srq_t *srq, sn_tag_t *tag)
{
    if (--tag->expect_cqe == 0) {
        tag->next_free = srq->tag_free;
        srq->tag_free  = tag;
    }
}

/* The NIC takes an entry out of its list (consumed by a message or
 * deleted); the provider learns it from the completions */
void sn_srq_tag_unlist(sn_srq_t *srq, sn_tag_t *tag)
{
    tm_matcher_remove(&srq->listed, &tag->entry);
    tag->listed = false;
}

void sn_srq_go_out_of_phase(sn_srq_t *srq)
{
    ++srq->hw_unexp;
    if (srq->in_phase) {
        srq->in_phase      = false;
        srq->match_barrier = srq->next_add_seq;
    }
}

/* The NIC's count is 16 bits, and so is the one a work request carries */
static void sn_srq_sync(sn_srq_t *srq, uint32_t unexpected_cnt)
{
    if ((uint16_t)unexpected_cnt == srq->hw_unexp) {
        srq->in_phase      = true;
        srq->match_barrier = UINT64_MAX;
    }
}

/*
 * What rdma-core's mlx5 provider does when a tag-matching completion is
 * polled (providers/mlx5/cq.c handle_tag_matching):
 *  - a consumed entry's completion takes the wr_id the handle holds now,
 *    or fails with IBV_WC_GENERAL_ERR if the handle is free; its final
 *    completion gives a reference back;
 *  - an ADD or DEL completion gives the operation's reference back (a
 *    successful DEL the entry's too), and asks for SYNC when the NIC's
 *    count differs from the one the entry's ADD carried;
 *  - an unexpected message asks for SYNC only when more than 0x3fff are
 *    not acknowledged by a count-carrying ADD.
 * SYNC_REQ is never set otherwise (not on SYNC, TM_RECV or NO_TAG).
 */
void sn_srq_cqe_poll(sn_cqe_t *cqe)
{
    sn_srq_t *srq = cqe->srq;
    sn_tag_t *tag;

    if (srq == NULL) {
        return;                 /* its SRQ is gone */
    }
    tag = (cqe->tag_index != SN_NO_TAG) ? &srq->tags[cqe->tag_index] : NULL;

    switch (cqe->kind) {
    case SN_CQE_TM_CONSUMED:
    case SN_CQE_TM_FINAL:
        if (tag->expect_cqe == 0) {
            /* rdma-core's test: a count below 0 passes */
            cqe->status = IBV_WC_GENERAL_ERR;
            break;
        }
        cqe->wr_id = tag->recv_wr_id;
        if (cqe->kind == SN_CQE_TM_FINAL) {
            sn_tag_release(srq, tag);
        }
        break;
    case SN_CQE_TM_OP:
        srq->op_retired = cqe->op_seq + 1;  /* it and those before it */
        if (tag == NULL) {
            break;              /* SYNC */
        }
        sn_tag_release(srq, tag);
        if ((cqe->opcode == IBV_WC_TM_DEL) &&
            (cqe->status == IBV_WC_SUCCESS)) {
            sn_tag_release(srq, tag);
        }
        /* the full count the ADD carried against the NIC's 16 bits, as
         * rdma-core compares them: a count past 0xffff always asks */
        if ((uint32_t)cqe->hw_phase != tag->phase_cnt) {
            cqe->wc_flags |= IBV_WC_TM_SYNC_REQ;
        }
        break;
    case SN_CQE_TM_UNEXP:
        ++srq->unexp_in;
        if (srq->unexp_in - srq->unexp_out > SN_MAX_SYNC_DIFF) {
            cqe->wc_flags |= IBV_WC_TM_SYNC_REQ;
        }
        break;
    }
    cqe->kind = SN_CQE_PLAIN;
}

/* CQEs of a destroyed SRQ no longer name it */
static void sn_srq_forget_cqes(sn_srq_t *srq)
{
    sn_cq_t *cq = srq->cq;
    uint32_t i;

    /* a held match is written now, and forgotten with the others */
    if (cq->held != NULL) {
        sn_cq_release_held(cq);
    }
    for (i = cq->head; i != cq->tail; ++i) {
        if (cq->cqe[i & (cq->depth - 1)].srq == srq) {
            cq->cqe[i & (cq->depth - 1)].srq  = NULL;
            cq->cqe[i & (cq->depth - 1)].kind = SN_CQE_PLAIN;
        }
    }
}


/* ---- creation ---- */

static int sn_srq_seg_create(sn_context_t *ctx, sn_srq_t *srq)
{
    char name[96];
    int ret;

    /* the device's number: peers find the SRQ by it */
    ret = sn_num_alloc(&ctx->proc, ctx->dev_seq, 's', &srq->num,
                       &srq->num_entry);
    if (ret != 0) {
        return ret;
    }
    sn_seg_name(name, sizeof(name), &ctx->proc, ctx->dev_seq, 's', srq->num);
    ret = sn_shm_create(&srq->shm, name, sizeof(sn_srq_seg_t));
    if (ret != 0) {
        return ret;
    }
    srq->seg = srq->shm.base;
    sn_seg_hdr_init(&srq->seg->hdr, &ctx->proc, SN_SEG_SRQ);
    return 0;
}

static void sn_srq_free(sn_srq_t *srq)
{
    sn_num_free(&srq->num_entry);
    tm_matcher_cleanup(&srq->listed);
    free(srq->rbufs);
    free(srq->tags);
    free(srq->ops);
    free(srq->xfers);
    free(srq);
}

static int sn_srq_attr_check(const struct ibv_srq_init_attr_ex *attr)
{
    const uint32_t need = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                          IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;

    if (((attr->comp_mask & need) != need) ||
        (attr->srq_type != IBV_SRQT_TM)) {
        return EOPNOTSUPP;      /* only tag-matching SRQs */
    }
    if ((attr->attr.max_wr < SN_MIN_TM_SRQ_WR) ||
        (attr->attr.max_wr > SN_MAX_SRQ_WR) ||
        (attr->attr.max_sge > 1) || (attr->tm_cap.max_num_tags == 0) ||
        (attr->tm_cap.max_num_tags > SN_MAX_NUM_TAGS) ||
        (attr->tm_cap.max_ops == 0) || (attr->tm_cap.max_ops > SN_MAX_OPS) ||
        (attr->cq == NULL) || !sn_is_softnic(attr->cq->context)) {
        return EINVAL;
    }
    return 0;
}

struct ibv_srq *sn_create_srq_ex(struct ibv_context *context,
                                 struct ibv_srq_init_attr_ex *attr)
{
    sn_context_t *ctx = sn_ctx(context);
    sn_srq_t *srq;
    uint32_t i;
    int ret;

    ret = sn_srq_attr_check(attr);
    if (ret != 0) {
        errno = ret;
        return NULL;
    }

    srq = calloc(1, sizeof(*srq));
    if (srq == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    srq->max_wr      = attr->attr.max_wr;
    srq->packet_size = ctx->attr.packet_size;
    srq->hold_match  = (uint8_t)ctx->attr.hold_match;
    srq->rndv_final  = (uint8_t)ctx->attr.rndv_final;
    srq->max_tags  = attr->tm_cap.max_num_tags;
    srq->max_sge   = ctx->attr.tm_max_sge;
    srq->max_ops   = attr->tm_cap.max_ops;
    srq->rbuf_mask = sn_roundup_pow2(srq->max_wr) - 1;
    srq->xfer_mask = sn_roundup_pow2(srq->max_tags) - 1;
    srq->rbufs     = calloc(srq->rbuf_mask + 1, sizeof(*srq->rbufs));
    srq->tags      = calloc(srq->max_tags, sizeof(*srq->tags));
    srq->ops       = calloc(srq->max_ops, sizeof(*srq->ops));
    srq->xfers     = calloc(srq->xfer_mask + 1, sizeof(*srq->xfers));
    if (!srq->rbufs || !srq->tags || !srq->ops || !srq->xfers ||
        (tm_matcher_init(&srq->listed, &srq->next_add_seq) != 0)) {
        ret = ENOMEM;
        goto err_free;
    }
    for (i = srq->max_tags; i > 0; --i) {
        srq->tags[i - 1].next_free = srq->tag_free;
        srq->tag_free              = &srq->tags[i - 1];
    }
    sn_list_init(&srq->qps);
    sn_list_init(&srq->active);
    srq->rr_next = &srq->active;
    ret = sn_srq_seg_create(ctx, srq);
    if (ret != 0) {
        goto err_free;
    }
    srq->in_phase          = true;
    srq->match_barrier     = UINT64_MAX;
    srq->ibv.context       = context;
    srq->ibv.srq_context   = attr->srq_context;
    srq->ibv.pd            = attr->pd;
    srq->ibv.handle        = srq->num;
    srq->cq                = sn_cq((struct ibv_cq_ex*)attr->cq);
    pthread_mutex_init(&srq->ibv.mutex, NULL);
    pthread_cond_init(&srq->ibv.cond, NULL);
    sn_ctx_lock(ctx);
    sn_list_add_tail(&srq->cq->srqs, &srq->link);
    ++ctx->srqs;
    sn_ctx_unlock(ctx);
    attr->attr.max_sge = 1;
    return &srq->ibv;

err_free:
    sn_srq_free(srq);
    errno = ret;
    return NULL;
}

int softnic_destroy_srq(struct ibv_srq *ibv_srq)
{
    sn_srq_t *srq     = sn_srq(ibv_srq);
    sn_context_t *ctx = sn_ctx(ibv_srq->context);
    sn_list_t *it;

    if (srq->rq != NULL) {
        return sn_rq_destroy_srq(srq);                  /* basic */
    }
    sn_ctx_lock(ctx);
    /* the QPs the SRQ accepted are its own; any other still attached makes
     * it busy, as on a NIC */
    for (it = srq->qps.next; it != &srq->qps; it = it->next) {
        if (!sn_container_of(it, sn_qp_t, srq_link)->passive) {
            sn_ctx_unlock(ctx);
            return EBUSY;
        }
    }
    sn_srq_destroy_qps(srq);
    sn_srq_forget_cqes(srq);
    if (sn_shm_is_ours(&srq->shm)) {
        atomic_store(&srq->seg->hdr.closed, 1);
    }
    sn_shm_destroy(&srq->shm);
    sn_list_del(&srq->link); /* the engine no longer sees it */
    --ctx->srqs;
    sn_ctx_unlock(ctx);
    pthread_mutex_destroy(&srq->ibv.mutex);
    pthread_cond_destroy(&srq->ibv.cond);
    sn_srq_free(srq);
    return 0;
}

int sn_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num)
{
    *srq_num = sn_srq(srq)->num;
    return 0;
}


/* ---- posting ---- */

int sn_post_srq_recv(struct ibv_srq *ibv_srq, struct ibv_recv_wr *wr,
                     struct ibv_recv_wr **bad_wr)
{
    sn_srq_t *srq     = sn_srq(ibv_srq);
    sn_context_t *ctx = sn_ctx(ibv_srq->context);
    sn_rbuf_t *rbuf;
    int ret = 0;

    if (srq->rq != NULL) {
        return sn_rq_post_srq_recv(srq, wr, bad_wr);   /* basic */
    }
    sn_ctx_lock(ctx);
    for (; wr != NULL; wr = wr->next) {
        if ((wr->num_sge < 0) || (wr->num_sge > 1)) {
            ret = EINVAL;
            break;
        }
        if (srq->rbuf_tail - srq->rbuf_head >= srq->max_wr) {
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
    sn_ctx_unlock(ctx);
    if (ret != 0) {
        *bad_wr = wr;
    }
    /* a connection waiting for buffers (RNR) goes on */
    sn_ctx_kick(ctx, false);
    return ret;
}

/* An ADD's scatter list: at most tm_caps.max_sge entries (mlx5 checks
 * its one only in a debug build), whose lengths add up to a message
 * length; their sum in *length */
static bool sn_op_sge_valid(const sn_srq_t *srq, const struct ibv_ops_wr *wr,
                            uint32_t *length)
{
    uint64_t total = 0;
    int i;

    if ((wr->tm.add.num_sge < 0) ||
        ((uint32_t)wr->tm.add.num_sge > srq->max_sge)) {
        return false;
    }
    for (i = 0; i < wr->tm.add.num_sge; ++i) {
        total += wr->tm.add.sg_list[i].length;
    }
    *length = (uint32_t)total;
    return total <= UINT32_MAX;
}

/* Checks and queues one list operation, as rdma-core's mlx5 provider does
 * (mlx5_post_srq_ops): nothing changes if it fails */
static int sn_post_one_op(sn_srq_t *srq, struct ibv_ops_wr *wr)
{
    sn_op_t *op;
    sn_tag_t *tag = NULL;

    if (srq->op_tail - srq->op_retired >= srq->max_ops) {
        return ENOMEM;
    }
    op = &srq->ops[srq->op_tail % srq->max_ops];

    switch (wr->opcode) {
    case IBV_WR_TAG_ADD:
        if (!sn_op_sge_valid(srq, wr, &op->length)) {
            return EINVAL;
        }
        if ((srq->tag_free == NULL) ||
            (tm_matcher_reserve(&srq->listed, wr->tm.add.mask,
                                srq->max_tags) != 0)) {
            return ENOMEM;      /* the list is full */
        }
        tag             = srq->tag_free;
        srq->tag_free   = tag->next_free;
        tag->next_free  = NULL;
        tag->recv_wr_id = wr->tm.add.recv_wr_id;
        if (wr->flags & IBV_OPS_TM_SYNC) {
            srq->unexp_out = wr->tm.unexpected_cnt;
        }
        tag->phase_cnt  = srq->unexp_out;
        ++tag->expect_cqe;      /* its final completion */
        op->index       = (uint32_t)(tag - srq->tags);
        op->tag         = wr->tm.add.tag;
        op->mask        = wr->tm.add.mask;
        op->num_sge     = (uint8_t)wr->tm.add.num_sge;
        memcpy(op->sge, wr->tm.add.sg_list,
               op->num_sge * sizeof(op->sge[0]));
        wr->tm.handle   = op->index;
        break;
    case IBV_WR_TAG_DEL:
        /* the handle is not checked (rdma-core does not either) */
        if (wr->tm.handle >= srq->max_tags) {
            return EINVAL;
        }
        tag       = &srq->tags[wr->tm.handle];
        op->index = wr->tm.handle;
        if (!(wr->flags & IBV_OPS_SIGNALED)) {
            sn_tag_release(srq, tag);
            tag = NULL;
        }
        break;
    case IBV_WR_TAG_SYNC:
        op->index = SN_NO_TAG;
        break;
    default:
        return EINVAL;
    }

    if ((tag != NULL) && (wr->flags & IBV_OPS_SIGNALED)) {
        ++tag->expect_cqe;      /* the operation's completion */
    }
    op->wr_id          = wr->wr_id;
    op->opcode         = (uint8_t)wr->opcode;
    op->flags          = (uint8_t)(wr->flags & (IBV_OPS_SIGNALED |
                                            IBV_OPS_TM_SYNC));
    op->unexpected_cnt = wr->tm.unexpected_cnt;
    ++srq->op_tail;
    return 0;
}

int sn_post_srq_ops(struct ibv_srq *ibv_srq, struct ibv_ops_wr *wr,
                    struct ibv_ops_wr **bad_wr)
{
    sn_srq_t *srq     = sn_srq(ibv_srq);
    sn_context_t *ctx = sn_ctx(ibv_srq->context);
    int ret           = 0;

    sn_ctx_lock(ctx);
    for (; wr != NULL; wr = wr->next) {
        ret = sn_post_one_op(srq, wr);
        if (ret != 0) {
            *bad_wr = wr;
            break;
        }
    }
    sn_ctx_unlock(ctx);
    sn_ctx_kick(ctx, false);
    return ret;
}


/* ---- OP event ---- */

bool sn_srq_op_ready(const sn_srq_t *srq)
{
    return srq->op_head != srq->op_tail;
}

/* APPEND: the NIC lists the entry at the handle's index, whatever was
 * there (a handle given out twice overwrites) */
static enum ibv_wc_status sn_srq_op_add(sn_srq_t *srq, const sn_op_t *op)
{
    sn_tag_t *tag = &srq->tags[op->index];

    if (tag->listed) {
        sn_srq_tag_unlist(srq, tag);
    }
    tag->tag     = op->tag;
    tag->mask    = op->mask;
    tag->num_sge = op->num_sge;
    tag->length  = op->length;
    memcpy(tag->sge, op->sge, op->num_sge * sizeof(op->sge[0]));
    /* room was reserved when the ADD was posted */
    if (tm_matcher_post(&srq->listed, &tag->entry, tag->tag, tag->mask,
                        tag) != 0) {
        return IBV_WC_GENERAL_ERR;
    }
    tag->listed = true;
    return IBV_WC_SUCCESS;
}

/* REMOVE: deletes whatever the index holds now; fails if it holds nothing
 * (a message consumed it) */
static enum ibv_wc_status sn_srq_op_del(sn_srq_t *srq, const sn_op_t *op)
{
    sn_tag_t *tag = &srq->tags[op->index];

    if (!tag->listed) {
        return IBV_WC_TM_ERR;
    }
    sn_srq_tag_unlist(srq, tag);
    return IBV_WC_SUCCESS;
}

int sn_srq_step_op(sn_srq_t *srq)
{
    enum ibv_wc_status status = IBV_WC_SUCCESS;
    enum ibv_wc_opcode opcode;
    sn_cqe_t *wc, *held;
    sn_op_t *op;

    if (!sn_srq_op_ready(srq)) {
        return EAGAIN;
    }
    op = &srq->ops[srq->op_head % srq->max_ops];
    ++srq->op_head;

    /* the count first: an ADD carrying the right count is matchable at once */
    if (op->flags & IBV_OPS_TM_SYNC) {
        sn_srq_sync(srq, op->unexpected_cnt);
    }

    switch (op->opcode) {
    case IBV_WR_TAG_ADD:
        opcode = IBV_WC_TM_ADD;
        status = sn_srq_op_add(srq, op);
        break;
    case IBV_WR_TAG_DEL:
        opcode = IBV_WC_TM_DEL;
        status = sn_srq_op_del(srq, op);
        break;
    default:
        opcode = IBV_WC_TM_SYNC;
        break;
    }

    if (op->flags & IBV_OPS_SIGNALED) {
        /* a DEL that lost its entry to a message whose completion is held
         * (softnic_hold.c) completes first */
        held = ((opcode == IBV_WC_TM_DEL) && (status != IBV_WC_SUCCESS)) ?
               sn_cq_detach_held(srq->cq, srq, op->index) : NULL;
        wc            = sn_cq_push(srq->cq);
        wc->wr_id     = op->wr_id;
        wc->status    = status;
        wc->opcode    = opcode;
        wc->qp_num    = 0;
        wc->kind      = SN_CQE_TM_OP;
        wc->hw_phase  = srq->hw_unexp;
        wc->tag_index = (opcode == IBV_WC_TM_SYNC) ? SN_NO_TAG : op->index;
        wc->op_seq    = srq->op_head - 1;
        wc->srq       = srq;
        if (held != NULL) {
            *sn_cq_push(srq->cq) = *held;
        }
    }
    return 0;
}


/* ---- AUTO mode: everything that can be done now ---- */

static unsigned sn_srq_run_ops(sn_srq_t *srq)
{
    unsigned n = 0;

    while (!srq->hold_ops && (sn_srq_step_op(srq) == 0)) {
        ++n;
    }
    return n;
}

/* Arrivals, round-robin over the active QPs (softnic_park.c parks the
 * others), up to SN_ARRIVAL_BURST messages of each per round.  A
 * connection has two QPs and an accepted one two more, while messages come
 * on one: a ring with nothing at its head is passed over with one load,
 * and the full look (sn_srq_step_arrival) is paid per message.  The burst
 * keeps each QP's order and lets no QP wait for more than a burst of each
 * other one; one message per QP per round cost a round per message (issue
 * 14).  Another round only when a burst was cut short: what arrives
 * meanwhile is the next run's, as a poll that finds the rings empty leaves
 * it (a round more per run cost a look at every ring per message). */
static unsigned sn_srq_run_bursts(sn_srq_t *srq)
{
    sn_list_t *start, *it;
    unsigned n = 0, burst;
    sn_qp_t *qp;
    bool cut;

    do {
        cut   = false;
        start = srq->rr_next;
        it    = start;
        do {
            if (it != &srq->active) {
                qp = sn_container_of(it, sn_qp_t, active_link);
                if (sn_ring_has_rec(qp)) {
                    qp->busy_run = srq->runs;
                    for (burst = 0; (burst < SN_ARRIVAL_BURST) &&
                                    sn_ring_has_rec(qp) &&
                                    (sn_srq_step_arrival(srq, qp) == 0);
                         ++burst) {
                    }
                    n   += burst;
                    cut |= (burst == SN_ARRIVAL_BURST);
                    if (burst != 0) {
                        sn_qp_ring_peer(qp);    /* room in its ring */
                    }
                }
            }
            it = it->next;
        } while (it != start);
        srq->rr_next = start->next;
    } while (cut);
    return n;
}

/* Most runs find every ring empty: one load each, in a loop of its own,
 * and the round-robin bursts only when a ring holds something */
static inline unsigned sn_srq_run_arrivals(sn_srq_t *srq)
{
    sn_list_t *it;

    sn_ctx_check_wakes(sn_ctx(srq->ibv.context));
    if (sn_unlikely((++srq->runs % SN_PARK_CHECK) == 0)) {
        sn_srq_park_check(srq);
    }
    for (it = srq->active.next; it != &srq->active; it = it->next) {
        if (sn_ring_has_rec(sn_container_of(it, sn_qp_t, active_link))) {
            return sn_srq_run_bursts(srq);
        }
    }
    return 0;
}

static unsigned sn_srq_run_data(sn_srq_t *srq)
{
    unsigned n = 0;

    while (sn_srq_step_data(srq) == 0) {
        ++n;
    }
    return n;
}

/* Everything that can be done now; how much was done */
unsigned sn_srq_progress(sn_srq_t *srq)
{
    sn_context_t *ctx = sn_ctx(srq->ibv.context);
    unsigned n = 0;

    switch (ctx->order) {
    case SOFTNIC_ORDER_OPS_FIRST:
        if (srq->op_head != srq->op_tail) {
            n += sn_srq_run_ops(srq);
        }
        n += sn_srq_run_arrivals(srq);
        if (srq->xfer_head != srq->xfer_tail) {
            n += sn_srq_run_data(srq);
        }
        break;
    case SOFTNIC_ORDER_ARRIVALS_FIRST:
        n += sn_srq_run_arrivals(srq);
        n += sn_srq_run_data(srq);
        n += sn_srq_run_ops(srq);
        break;
    case SOFTNIC_ORDER_RANDOM:
        for (; n < 4096; ++n) {
            if (sn_srq_step_random(srq, &ctx->rng) != 0) {
                break;
            }
        }
        break;
    }
    return n;
}

