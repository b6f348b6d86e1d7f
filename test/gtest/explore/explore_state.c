/*
 * Canonical receive-side state of rc_tm over the software NIC
 * (explore_state.h).  Receives are named by the harness's number, messages
 * in untagged buffers by the number in their payload, device entries by the
 * receive they hold; counts are relative to the schedule's start.
 */
#include "explore_state.h"

#include <uct/rc_tm/rc_tm_iface.h>
#include <uct/rc_tm/rc_tm_ep.h>
#include <softnic/softnic_int.h>

#include <string.h>

#define STATE_UNKNOWN  0xffffu
#define STATE_MAX_MSGS 16u     /* more messages than any scenario sends */

typedef struct {
    const rc_tm_explore_state_args_t *args;
    uct_rc_tm_iface_t                *iface;
    sn_srq_t                       *srq;
    uint64_t                         *words;
    size_t                           max, count;
    int                              failed;
} state_t;

static void put(state_t *s, uint64_t word)
{
    if (s->count < s->max) {
        s->words[s->count] = word;
    } else {
        s->failed = 1;
    }
    ++s->count;
}

/* Section marker: keeps variable-length parts from running together */
static void mark(state_t *s, char what)
{
    put(s, 0xfeed000000000000ull | (uint8_t)what);
}

/* The harness's number of a live receive */
static unsigned recv_id(state_t *s, const uct_rc_tm_recv_t *recv)
{
    unsigned i;

    if (recv == NULL) {
        return STATE_UNKNOWN - 1;
    }
    for (i = 0; i < s->args->num_recvs; ++i) {
        if (recv->ctx == s->args->recv_ctx[i]) {
            return i;
        }
    }
    s->failed = 1;
    return STATE_UNKNOWN;
}

static unsigned recv_id_of(state_t *s, uint64_t wr_id)
{
    return recv_id(s, (const uct_rc_tm_recv_t*)(uintptr_t)wr_id);
}

/* What a device handle names now (handles are bare indices, reused at
 * once): whether the entry is listed, and the completions it still owes */
static unsigned handle_state(state_t *s, uint32_t index)
{
    const sn_tag_t *tag;

    if (index >= s->srq->max_tags) {
        return 0xff;
    }
    tag = &s->srq->tags[index];
    return (tag->listed << 7) | (uint8_t)tag->expect_cqe;
}

static unsigned conn_index(state_t *s, const sn_qp_t *qp)
{
    unsigned i;

    for (i = 0; i < s->args->num_eps; ++i) {
        const uct_rc_tm_ep_t *ep = ucs_derived_of(s->args->eps[i],
                                                  uct_rc_tm_ep_t);
        if ((ep->conn->qp == &qp->ibv) || (ep->conn->rx_qp == &qp->ibv)) {
            return i;
        }
    }
    return STATE_UNKNOWN;
}

/* The message in an untagged buffer: TMH opcode and the number its payload
 * (or rendezvous user header) starts with */
static uint64_t rx_message(state_t *s, uint64_t wr_id)
{
    const struct ibv_tmh *tmh = UCS_PTR_BYTE_OFFSET((uintptr_t)wr_id,
                                                    s->iface->rx.msg_offset);
    size_t offset = (tmh->opcode == IBV_TMH_RNDV) ?
                    sizeof(struct ibv_tmh) + sizeof(struct ibv_rvh) :
                    sizeof(struct ibv_tmh);
    uint32_t hdr[2];

    memcpy(hdr, UCS_PTR_BYTE_OFFSET(tmh, offset), sizeof(hdr));
    return ((uint64_t)tmh->opcode << 32) | hdr[1];
}

static void put_device(state_t *s)
{
    sn_srq_t *srq = s->srq;
    sn_cq_t *cq   = srq->cq;
    uint32_t base   = s->args->base_unexp;
    unsigned i, free_count = 0, unlisted = 0;
    tm_matcher_entry_t *e, *next;

    mark(s, 'D');
    put(s, srq->in_phase);
    put(s, (uint16_t)(srq->hw_unexp - base));
    /* untagged buffers: refilled up to the SRQ depth a batch at a time, so
     * the count drifts; only whether an arrival can find one matters, and
     * no scenario sends more than STATE_MAX_MSGS messages */
    put(s, ucs_min(srq->rbuf_tail - srq->rbuf_head, STATE_MAX_MSGS));

    /* the matching list, in add order */
    mark(s, 'L');
    tm_matcher_for_each(&srq->listed, e, next) {
        sn_tag_t *tag = e->arg;
        put(s, ((uint64_t)recv_id_of(s, tag->recv_wr_id) << 32) |
               ((e->seq < srq->match_barrier) << 16) |
               (uint16_t)tag->expect_cqe);
    }
    /* entries free, and taken but out of the list (owing completions) */
    for (i = 0; i < srq->max_tags; ++i) {
        free_count += (srq->tags[i].expect_cqe == 0);
        unlisted   += (srq->tags[i].expect_cqe != 0) && !srq->tags[i].listed;
    }
    put(s, free_count);
    put(s, unlisted);

    /* pending list operations, oldest first */
    mark(s, 'O');
    for (i = srq->op_head; i != srq->op_tail; ++i) {
        const sn_op_t *op = &srq->ops[i % srq->max_ops];
        put(s, ((uint64_t)op->opcode << 48) | ((uint64_t)op->flags << 40) |
               ((uint64_t)(uint16_t)(op->unexpected_cnt - base) << 8) |
               ((op->opcode == IBV_WR_TAG_DEL) ?
                handle_state(s, op->index) : 0));
        put(s, (op->opcode == IBV_WR_TAG_SYNC) ? 0 :
               recv_id_of(s, op->wr_id));
    }

    /* second halves of matches */
    mark(s, 'X');
    for (i = srq->xfer_head; i != srq->xfer_tail; ++i) {
        const sn_xfer_t *x = &srq->xfers[i & srq->xfer_mask];
        put(s, ((uint64_t)recv_id_of(s, srq->tags[x->tag_index].recv_wr_id)
                << 32) |
               ((uint64_t)x->rndv << 31) | x->byte_len);
        put(s, (x->qp != NULL) ? conn_index(s, x->qp) : STATE_UNKNOWN);
    }

    /* completions software has not read */
    mark(s, 'C');
    for (i = cq->head; i != cq->tail; ++i) {
        const sn_cqe_t *wc = &cq->cqe[i & (cq->depth - 1)];
        put(s, ((uint64_t)wc->opcode << 48) | ((uint64_t)wc->status << 40) |
               ((uint64_t)wc->wc_flags << 8));
        /* priv is a rendezvous' sender operation (its generation grows
         * from schedule to schedule) unless it carries immediate data */
        put(s, ((uint64_t)wc->byte_len << 32) |
               ((wc->wc_flags & IBV_WC_WITH_IMM) ? wc->tm_info.priv : 0));
        put(s, wc->tm_info.tag);
        switch (wc->opcode) {
        case IBV_WC_RECV:
        case IBV_WC_TM_NO_TAG:
            put(s, (wc->status == IBV_WC_SUCCESS) ?
                   rx_message(s, wc->wr_id) : STATE_UNKNOWN);
            break;
        case IBV_WC_TM_SYNC:
            put(s, 0);
            break;
        case IBV_WC_TM_ADD:
        case IBV_WC_TM_DEL:
        case IBV_WC_TM_RECV:
            put(s, recv_id_of(s, wc->wr_id));
            break;
        default:
            s->failed = 1;     /* sends do not complete on this CQ here */
            break;
        }
    }

    /* messages still waiting on each connection */
    mark(s, 'R');
    for (i = 0; i < s->args->num_eps; ++i) {
        const uct_rc_tm_ep_t *ep = ucs_derived_of(s->args->eps[i],
                                                  uct_rc_tm_ep_t);
        put(s, ((uint64_t)ep->conn->rx_qp->state << 32) |
               softnic_test_pending_arrivals(ep->conn->rx_qp));
    }
}

/* rdma-core's side of the count (sn_srq_cqe_poll): an unexpected message
 * asks for SYNC once more than SN_MAX_SYNC_DIFF went unacknowledged by a
 * count-carrying ADD, and rc_tm carries 16 bits of its count, so past 0xffff
 * every ADD leaves the provider's 32-bit count 0x10000 ahead.  The counts
 * matter only where the messages still to come can take them over those
 * limits (the explorer starts every schedule far from both) */
static void put_provider(state_t *s)
{
    sn_srq_t *srq   = s->srq;
    sn_cq_t *cq     = srq->cq;
    uint32_t sw     = s->iface->tm.unexpected_cnt;
    uint32_t lag    = srq->unexp_in - srq->unexp_out;
    uint32_t coming = 0;
    unsigned i;

    for (i = 0; i < s->args->num_eps; ++i) {
        coming += softnic_test_pending_arrivals(
                ucs_derived_of(s->args->eps[i], uct_rc_tm_ep_t)->conn->rx_qp);
    }
    for (i = cq->head; i != cq->tail; ++i) {
        coming += (cq->cqe[i & (cq->depth - 1)].kind == SN_CQE_TM_UNEXP);
    }

    mark(s, 'V');
    put(s, srq->unexp_in - sw);     /* both count the same polls */
    put(s, (lag + coming > SN_MAX_SYNC_DIFF) ?
           ucs_min(lag, SN_MAX_SYNC_DIFF + 1) : 0);
    put(s, (sw > UINT16_MAX) ? 1 :
           (UINT16_MAX - sw < coming) ? UINT16_MAX - sw + 2 : 0);
}

/* UCT_RC_TM_RECV_QP_WAITED is left out: the periodic checks of the
 * receive-only QPs set it, on a countdown of progress calls that runs
 * across schedules, and it changes nothing unless a QP failed */
static void put_recv(state_t *s, const uct_rc_tm_recv_t *recv)
{
    uint64_t flags = recv->flags & ~UCT_RC_TM_RECV_QP_WAITED;

    put(s, ((uint64_t)recv_id(s, recv) << 48) | (flags << 16) | recv->refs);
    put(s, (recv->flags & UCT_RC_TM_RECV_IN_DEVICE) ?
           handle_state(s, recv->handle) : 0xfe);
}

/* The receives of a queue, in order (ucs_queue_for_each_* would form a
 * pointer from NULL on an empty queue) */
static void put_queued_recvs(state_t *s, ucs_queue_head_t *queue)
{
    ucs_queue_elem_t **pelem;

    for (pelem = &queue->head; pelem != queue->ptail;
         pelem = &(*pelem)->next) {
        put_recv(s, ucs_container_of(*pelem, uct_rc_tm_recv_t, queue));
    }
}

static void put_transport(state_t *s)
{
    uct_rc_tm_iface_t *iface = s->iface;
    tm_matcher_link_t *link;
    uct_rc_tm_recv_t *recv;
    unsigned i;

    mark(s, 'T');
    put(s, iface->tm.num_tags);
    put(s, iface->tm.num_sw);
    put(s, iface->tm.ops_in_flight);
    /* the device counts in 16 bits, and the base is its count */
    put(s, (uint16_t)(iface->tm.unexpected_cnt - s->args->base_unexp));
    put(s, iface->tm.sync_pending);
    /* whether a SYNC would tell the device anything new */
    put(s, iface->tm.count_op_cnt == iface->tm.unexpected_cnt);
    /* the newest op in flight that carries a count: its place among the
     * ops in flight and its count (not the raw counters: they only grow) */
    if (iface->tm.count_op_sn > iface->tm.ops_posted - iface->tm.ops_in_flight) {
        put(s, iface->tm.ops_posted - iface->tm.count_op_sn + 1);
        put(s, (uint16_t)(iface->tm.count_op_cnt - s->args->base_unexp));
    } else {
        put(s, 0);
        put(s, 0);
    }
    put(s, ucs_min(iface->rx.posted, STATE_MAX_MSGS));

    /* every posted receive, in posting order, with its state */
    mark(s, 'M');
    for (link = iface->tm.matcher.order.next;
         link != &iface->tm.matcher.order; link = link->next) {
        tm_matcher_entry_t *e = ucs_container_of(link, tm_matcher_entry_t,
                                                 order);
        put_recv(s, (const uct_rc_tm_recv_t*)e->arg);
    }
    mark(s, 'S');
    ucs_list_for_each(recv, &iface->tm.sw_list, sw_list) {
        put(s, recv_id(s, recv));
    }
    /* receives no longer posted but still alive are named by the queues,
     * the device entries and operations (refs) above and below */
    mark(s, 'Q');
    put_queued_recvs(s, &iface->tm.del_queue);
    mark(s, 'K');
    put_queued_recvs(s, &iface->tm.cancel_queue);

    /* operations of the receive side waiting for a send completion: software
     * rendezvous reads (their receive) and gets */
    mark(s, 'E');
    for (i = 0; i < s->args->num_eps; ++i) {
        uct_rc_tm_ep_t *ep = ucs_derived_of(s->args->eps[i], uct_rc_tm_ep_t);
        ucs_queue_elem_t **pelem;
        uct_rc_tm_tx_op_t *op;

        put(s, ep->status);
        for (pelem = &ep->tx_ops.head; pelem != ep->tx_ops.ptail;
             pelem = &(*pelem)->next) {
            op = ucs_container_of(*pelem, uct_rc_tm_tx_op_t, queue);
            put(s, (op->comp != NULL) ? STATE_UNKNOWN - 2 :
                   (uint64_t)recv_id(s, op->recv));
        }
    }
}

/* Live receives that only the device or an operation still names: their
 * flags and references */
static void put_device_recvs(state_t *s)
{
    sn_srq_t *srq = s->srq;
    tm_matcher_entry_t *e, *next;
    unsigned i;

    mark(s, 'd');
    tm_matcher_for_each(&srq->listed, e, next) {
        sn_tag_t *tag = e->arg;
        put_recv(s, (const uct_rc_tm_recv_t*)(uintptr_t)tag->recv_wr_id);
    }
    for (i = srq->op_head; i != srq->op_tail; ++i) {
        const sn_op_t *op = &srq->ops[i % srq->max_ops];
        if (op->opcode != IBV_WR_TAG_SYNC) {
            put_recv(s, (const uct_rc_tm_recv_t*)(uintptr_t)op->wr_id);
        }
    }
    for (i = srq->xfer_head; i != srq->xfer_tail; ++i) {
        put_recv(s, (const uct_rc_tm_recv_t*)(uintptr_t)
                    srq->tags[srq->xfers[i & srq->xfer_mask].tag_index]
                        .recv_wr_id);
    }
}

size_t rc_tm_explore_state(const rc_tm_explore_state_args_t *args,
                           uint64_t *words, size_t max)
{
    state_t s;

    s.args   = args;
    s.iface  = ucs_derived_of(args->iface, uct_rc_tm_iface_t);
    s.srq    = sn_srq(s.iface->srq->srq);
    s.words  = words;
    s.max    = max;
    s.count  = 0;
    s.failed = !softnic_dv_is_softnic(s.iface->srq->srq->context);
    if (s.failed) {
        return 0;
    }

    put_device(&s);
    put_provider(&s);
    put_transport(&s);
    put_device_recvs(&s);
    return s.failed ? 0 : s.count;
}

unsigned rc_tm_explore_tx_outstanding(const uct_ep_h *eps, unsigned num_eps)
{
    unsigned i, count = 0;

    for (i = 0; i < num_eps; ++i) {
        count += ucs_queue_length(&ucs_derived_of(eps[i],
                                                  uct_rc_tm_ep_t)->tx_ops);
    }
    return count;
}

uint32_t rc_tm_explore_sw_unexpected(uct_iface_h iface)
{
    return ucs_derived_of(iface, uct_rc_tm_iface_t)->tm.unexpected_cnt;
}
