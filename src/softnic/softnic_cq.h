/*
 * Software NIC: the producer's side of a CQ (the NIC writing entries and
 * publishing them, softnic_cq.c), and a match completion the NIC holds
 * back (softnic_dv_attr::hold_match, softnic_hold.c).  Included by
 * softnic_int.h.
 */
#ifndef SOFTNIC_CQ_H_
#define SOFTNIC_CQ_H_

#pragma GCC visibility push(hidden)

static inline bool sn_cq_has_room(const sn_cq_t *cq, unsigned n)
{
    return cq->depth - (cq->tail - __atomic_load_n(&cq->head,
                                                   __ATOMIC_ACQUIRE)) >= n;
}

/* An armed CQ published entries: raises its event if one qualifies
 * (softnic_channel.c) */
void sn_cq_arm_judge(sn_cq_t *cq);

/* The completions written so far become visible to software */
static inline void sn_cq_publish(sn_cq_t *cq)
{
    __atomic_store_n(&cq->ready, cq->tail, __ATOMIC_RELEASE);
    if (sn_unlikely(cq->armed)) {
        sn_cq_arm_judge(cq);
    }
}

static inline bool sn_cq_is_overrun(const sn_cq_t *cq)
{
    return __atomic_load_n(&cq->overrun, __ATOMIC_RELAXED) != 0;
}

/* Writes the held completion to the CQ (sn_cq_push calls it first) */
void sn_cq_release_held(sn_cq_t *cq);
/* The entry to fill for a completion to hold, after releasing any held
 * one; it stays out of the CQ until released */
sn_cqe_t *sn_cq_push_held(sn_cq_t *cq);
/* A DEL of entry index of srq failed: the held completion of that entry,
 * taken off hold (valid until the next hold: the caller pushes it after
 * the DEL's), or NULL */
sn_cqe_t *sn_cq_detach_held(sn_cq_t *cq, const sn_srq_t *srq,
                            uint32_t index);
/* A poll found the CQ empty: releases a held completion (with an engine,
 * under the device lock, after the work a round would do) */
void sn_cq_release_held_on_empty(sn_cq_t *cq);
/* The QP qp_num is destroyed: its held completion goes with it */
void sn_cq_purge_held(sn_cq_t *cq, uint32_t qp_num);

/* The next entry to write, after any held match (softnic_hold.c).  A full
 * CQ overruns, as on a NIC (this entry and every later one go nowhere) */
static inline sn_cqe_t *sn_cq_push(sn_cq_t *cq)
{
    sn_cqe_t *cqe;

    if (sn_unlikely(cq->held != NULL)) {
        sn_cq_release_held(cq);
    }
    if (sn_unlikely(!sn_cq_has_room(cq, 1) || sn_cq_is_overrun(cq))) {
        sn_cq_overrun(cq);
        cqe = &cq->lost;
    } else {
        cqe = &cq->cqe[cq->tail++ & (cq->depth - 1)];
    }
    cqe->wc_flags     = 0;
    cqe->imm_data     = 0;
    cqe->vendor_err   = 0;
    cqe->src_qp       = 0;
    cqe->slid         = 0;
    cqe->sl           = 0;
    cqe->dlid_path_bits = 0;
    cqe->byte_len     = 0;
    cqe->tm_info.tag  = 0;
    cqe->tm_info.priv = 0;
    cqe->kind         = SN_CQE_PLAIN;
    cqe->solicited    = 0;
    cqe->tag_index    = SN_NO_TAG;
    cqe->srq          = NULL;
    return cqe;
}

#pragma GCC visibility pop

#endif
