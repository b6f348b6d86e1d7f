/*
 * Software NIC: the inbound ring, consumer side (the responder's look at
 * it), and which QPs a poll looks at: the rings of an SRQ's active QPs and
 * the send queues of a CQ's busy ones (softnic_park.c;
 * docs/soft-device-datapath.md, "What a poll looks at").  Included by
 * softnic_int.h.
 */
#ifndef SOFTNIC_RING_H_
#define SOFTNIC_RING_H_

#pragma GCC visibility push(hidden)

/* ---- The ring, consumer side (the responder) ---- */

/* The record at the consumer's position, if published: the one cache line
 * the consumer needs to see a small message (no producer counter to read) */
static inline sn_rec_t *sn_ring_head_rec(sn_qp_t *qp)
{
    return qp->in_rec;
}

static inline void sn_ring_advance(sn_qp_t *qp, uint32_t len)
{
    qp->in_head += sn_rec_size(len);
    qp->in_rec   = sn_ring_rec(qp->in, qp->in_mask, qp->in_head);
    /* release: our reads of the record come before the producer reuses it */
    atomic_store_explicit(&qp->in->head, qp->in_head, memory_order_release);
}

/* The oldest message waiting on qp's inbound ring, if any */
static inline bool sn_ring_peek(sn_qp_t *qp, sn_rec_t **rec_p)
{
    sn_rec_t *rec = sn_ring_head_rec(qp);
    uint16_t type = sn_rec_type(rec);

    if (sn_likely(type == SN_REC_MSG)) {
        *rec_p = rec;
        return true;
    }
    return (type != 0) && sn_ring_skip_pad(qp, rec_p);
}

/*
 * A message taken: its lines go back to the producer written, not just read.
 * A line the producer wrote and the consumer then read is shared by both
 * caches, and the producer's next store into it must first take the
 * consumer's copy away; on an AMD EPYC that costs far more than fetching a
 * line the consumer holds written.  One store per line, before the release
 * of head, makes the producer's next lap fetch them that way: a 4 KiB record
 * cost the producer 490 ns against 122 (test/bench/ring_lines).
 * The bytes are the consumer's until head moves, and nothing reads them
 * again; the record never wraps, and the next record's terminator is past
 * its end.  The store goes to the last byte of each line, never the
 * record's header: a UD producer that takes the ring over from a dead one
 * walks the headers from head while we release (sn_ud_ring_recover).
 */
static inline void sn_ring_hand_back(sn_rec_t *rec, uint32_t len)
{
    uint8_t *line = (uint8_t *)rec + SN_CACHE_LINE - 1;
    uint8_t *end  = (uint8_t *)rec + sn_rec_size(len);

    for (; line < end; line += SN_CACHE_LINE) {
        __atomic_store_n(line, 0, __ATOMIC_RELAXED);
    }
}

static inline void sn_ring_release(sn_qp_t *qp, sn_rec_t *rec)
{
    uint32_t len = rec->len;

    sn_ring_hand_back(rec, len);
    sn_ring_advance(qp, len);
}

/* A QP connected to its peer: RTR or RTS (or, UD, SQE: its receives go
 * on).  Its messages are taken off its ring, and the NIC may send FINs on
 * it.  In ERR it does neither.  (The range holds SQD too, a state no QP
 * enters here.) */
static inline bool sn_qp_connected(const sn_qp_t *qp)
{
    return (qp->ibv.state >= IBV_QPS_RTR) && (qp->ibv.state <= IBV_QPS_SQE);
}

/* Anything (a message or padding) at the head of qp's inbound ring?  The
 * cheap look before sn_srq_step_arrival, which looks again; a QP not
 * connected takes nothing (as sn_srq_arrival_peek) */
static inline bool sn_ring_has_rec(sn_qp_t *qp)
{
    /* the ring first: most looks find it empty */
    return (__atomic_load_n(&sn_ring_head_rec(qp)->type,
                            __ATOMIC_RELAXED) != 0) && sn_qp_connected(qp);
}


/* ---- What a poll looks at (softnic_park.c) ---- */

/* Runs of the arrival stage that find a ring empty before it is parked,
 * and the QPs an SRQ may have and park none: the walk of a few costs less
 * than their wakes */
#define SN_PARK_RUNS           1024
#define SN_PARK_MIN_QPS        8
/* Every this many runs an SRQ parks its idle rings and looks at its parked
 * ones: a wake can be lost to a race (softnic_park.c), and is then late by
 * this many runs at most */
#define SN_PARK_CHECK          256

void sn_wake_slot_get(sn_context_t *ctx, sn_qp_t *qp);
void sn_wake_slot_put(sn_context_t *ctx, sn_qp_t *qp);
void sn_srq_park_check(sn_srq_t *srq);
void sn_qp_unpark(sn_qp_t *qp);
void sn_ctx_sweep_parked(sn_context_t *ctx);
void sn_ctx_take_wakes(sn_context_t *ctx);
void sn_qp_wake_peer_ring(sn_qp_t *qp);

/* Before an arrival run: takes back the rings that producers woke */
static inline void sn_ctx_check_wakes(sn_context_t *ctx)
{
    if (sn_unlikely(atomic_load_explicit(&ctx->seg->wake.sum,
                                         memory_order_relaxed) != 0)) {
        sn_ctx_take_wakes(ctx);
    }
}

/* After publishing into qp's outbound ring: a parked ring wakes */
static inline void sn_qp_check_peer_parked(sn_qp_t *qp)
{
    if (sn_unlikely(atomic_load_explicit(&qp->out->parked,
                                         memory_order_relaxed) != 0)) {
        sn_qp_wake_peer_ring(qp);
    }
}

/* The QP has send-side work (sn_qp_waits_on_peer, or its last WQE event
 * due): polls of its send CQ look at it until it has none.  A receive-only
 * QP's sends are the NIC's own (FINs): its SRQ's CQ drives them, since its
 * send CQ may be one software never polls (mlx5's provider cannot parse a
 * requester CQE of a QP without a send queue) */
static inline void sn_qp_mark_busy(sn_qp_t *qp)
{
    sn_cq_t *cq = qp->rx_only ? qp->srq->cq : qp->send_cq;

    if (sn_list_empty(&qp->busy_link)) {
        sn_list_add_tail(&cq->send_busy, &qp->busy_link);
    }
}

#pragma GCC visibility pop

#endif
