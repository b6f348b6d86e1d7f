/*
 * rc_tm tag offload, the list side: operations on the device's tag list
 * (ADD, DEL, SYNC) and their completions, the phase count they carry,
 * promotion of software receives to the device, and the search for a
 * receive a failed message took.  The protocol is described in rc_tm_tag.c.
 */
#include "rc_tm_tag.h"

#include <ucs/debug/log.h>

/* ----- list operations ----- */

static UCS_F_ALWAYS_INLINE int uct_rc_tm_tag_ops_full(uct_rc_tm_iface_t *iface)
{
    return iface->tm.ops_in_flight >= iface->md->caps.tm.max_ops;
}

/* with_count: the operation may bring the device back in phase */
static int uct_rc_tm_tag_post_op(uct_rc_tm_iface_t *iface,
                                 enum ibv_ops_wr_opcode opcode,
                                 uct_rc_tm_recv_t *recv, int with_count)
{
    struct ibv_ops_wr wr = {}, *bad_wr;
    struct ibv_sge sge[2];
    int ret;

    wr.wr_id             = (uintptr_t)recv;
    wr.opcode            = opcode;
    wr.flags             = IBV_OPS_SIGNALED;
    /* The device's count has 16 bits, and rdma-core compares it with the
     * whole of ours for SYNC_REQ: only the low 16 bits go */
    wr.tm.unexpected_cnt = (uint16_t)iface->tm.unexpected_cnt;
    if (with_count &&
        (iface->config.sync_always || (opcode == IBV_WR_TAG_SYNC))) {
        wr.flags |= IBV_OPS_TM_SYNC;
    }

    if (opcode == IBV_WR_TAG_ADD) {
        sge[0].addr          = (uintptr_t)uct_rc_tm_recv_dev_buffer(iface,
                                                                    recv);
        sge[0].length        = uct_rc_tm_recv_dev_length(iface, recv);
        sge[0].lkey          = (recv->bounce == NULL) ? recv->lkey :
                               recv->bounce->lkey;
        wr.tm.add.recv_wr_id = (uintptr_t)recv;
        wr.tm.add.sg_list    = sge;
        wr.tm.add.num_sge    = 1;
        if (recv->flags & UCT_RC_TM_RECV_SPILL) {
            sge[1].addr       = (uintptr_t)iface->rx.spill.address;
            sge[1].length     = iface->config.seg_size - recv->length;
            sge[1].lkey       = uct_rc_tm_memh_lkey(iface->rx.spill.memh);
            wr.tm.add.num_sge = 2;
        }
        wr.tm.add.tag        = recv->match.tag;
        wr.tm.add.mask       = recv->match.mask;
    } else if (opcode == IBV_WR_TAG_DEL) {
        wr.tm.handle         = recv->handle;
    }

    ret = tm_dev_post_srq_ops(iface->srq, &wr, &bad_wr);
    if (ret != 0) {
        return ret;
    }

    ++iface->tm.ops_in_flight;
    ++iface->tm.ops_posted;
    if (wr.flags & IBV_OPS_TM_SYNC) {
        iface->tm.count_op_sn  = iface->tm.ops_posted;
        iface->tm.count_op_cnt = iface->tm.unexpected_cnt;
    }
    if (recv != NULL) {
        ++recv->refs;
        if (opcode == IBV_WR_TAG_ADD) {
            /* the slot owes the ADD's completion and the final one */
            recv->handle    = wr.tm.handle;
            recv->slot_cqes = 2;
            recv->flags    |= UCT_RC_TM_RECV_SLOT;
            ++recv->refs;
        } else {
            ++recv->slot_cqes;  /* and now the DEL's */
        }
    }
    return 0;
}

/* DELs go first: one for a receive software won must reach the device
 * before any operation that brings it back in phase.  That includes the
 * DELs queued ahead of it, so only the last queued DEL carries the count:
 * the device does both operations of a DEL at once (count, then delete), but
 * not two DELs. */
static int uct_rc_tm_tag_post_queued_dels(uct_rc_tm_iface_t *iface)
{
    uct_rc_tm_recv_t *recv;
    int ret;

    if (ucs_unlikely(iface->tm.in_batch) &&
        !ucs_queue_is_empty(&iface->tm.del_queue)) {
        return EAGAIN;
    }

    while (!ucs_queue_is_empty(&iface->tm.del_queue)) {
        if (uct_rc_tm_tag_ops_full(iface)) {
            return ENOMEM;
        }

        recv = ucs_queue_head_elem_non_empty(&iface->tm.del_queue,
                                             uct_rc_tm_recv_t, queue);
        if (recv->flags & UCT_RC_TM_RECV_CONSUMED) {
            /* A message consumed the entry meanwhile: its index may already
             * name another receive, and rdma-core does not check handles */
            ucs_queue_pull_non_empty(&iface->tm.del_queue);
            --iface->tm.dels_pending;
            uct_rc_tm_recv_put(iface, recv);
            continue;
        }
        ret  = uct_rc_tm_tag_post_op(iface, IBV_WR_TAG_DEL, recv,
                                     ucs_queue_is_tail(&iface->tm.del_queue,
                                                       &recv->queue));
        if (ret != 0) {
            return ret;
        }
        ucs_queue_pull_non_empty(&iface->tm.del_queue);
        uct_rc_tm_stat(iface, UCT_RC_TM_STAT_LIST_DEL);
        uct_rc_tm_recv_put(iface, recv); /* the queue's reference */
    }
    return 0;
}

static int uct_rc_tm_tag_post_ordered(uct_rc_tm_iface_t *iface,
                                      enum ibv_ops_wr_opcode opcode,
                                      uct_rc_tm_recv_t *recv)
{
    int ret = uct_rc_tm_tag_post_queued_dels(iface);

    if (ret != 0) {
        return ret;
    }
    if (uct_rc_tm_tag_ops_full(iface)) {
        return ENOMEM;
    }
    return uct_rc_tm_tag_post_op(iface, opcode, recv, 1);
}

void uct_rc_tm_tag_post_del(uct_rc_tm_iface_t *iface,
                            uct_rc_tm_recv_t *recv)
{
    ++recv->refs; /* the queue's, until the DEL is posted */
    ++iface->tm.dels_pending;
    ucs_queue_push(&iface->tm.del_queue, &recv->queue);
    uct_rc_tm_tag_post_queued_dels(iface);
}

/* Has the count changed since the newest operation that carried it?  If
 * not, that operation gave the device all software knows, and a SYNC would
 * only repeat it */
static int uct_rc_tm_tag_count_sent(const uct_rc_tm_iface_t *iface)
{
    return iface->tm.count_op_cnt == iface->tm.unexpected_cnt;
}

/* Answers the device's SYNC_REQ.  It is a hint only (mlx5 gives it on list
 * operation completions out of phase, and on unexpected messages only past
 * 0x3fff of them): every list operation carries the count anyway, and a
 * device out of phase only sends messages to software, which matches them */
void uct_rc_tm_tag_post_sync(uct_rc_tm_iface_t *iface)
{
    if (uct_rc_tm_tag_count_sent(iface)) {
        iface->tm.sync_pending = 0;
        return;
    }

    if (uct_rc_tm_tag_post_ordered(iface, IBV_WR_TAG_SYNC, NULL) != 0) {
        iface->tm.sync_pending = 1; /* retried when an operation completes */
        return;
    }

    iface->tm.sync_pending = 0;
    uct_rc_tm_stat(iface, UCT_RC_TM_STAT_LIST_SYNC);
}

int uct_rc_tm_tag_add_to_device(uct_rc_tm_iface_t *iface,
                                       uct_rc_tm_recv_t *recv)
{
    if (iface->tm.num_tags >= iface->md->caps.tm.max_num_tags) {
        return 0;
    }

    if (uct_rc_tm_recv_is_short(iface, recv->length) &&
        (recv->bounce == NULL) && !(recv->flags & UCT_RC_TM_RECV_SPILL)) {
        if (uct_rc_tm_recv_fits_spill(iface, recv->length)) {
            recv->flags |= UCT_RC_TM_RECV_SPILL;
            uct_rc_tm_stat(iface, UCT_RC_TM_STAT_LIST_SPILL);
        } else {
            /* kept until the entry is freed: the device may write it until
             * its final completion */
            recv->bounce = ucs_mpool_get_inline(&iface->rx.mp);
            if (recv->bounce == NULL) {
                return 0;
            }
            uct_rc_tm_stat(iface, UCT_RC_TM_STAT_LIST_BOUNCE);
        }
    }

    if (uct_rc_tm_tag_post_ordered(iface, IBV_WR_TAG_ADD, recv) != 0) {
        return 0;
    }

    recv->flags |= UCT_RC_TM_RECV_IN_DEVICE;
    ++iface->tm.num_tags;
    uct_rc_tm_stat(iface, UCT_RC_TM_STAT_LIST_ADD);
    return 1;
}

/* Software receives go to the device oldest first, once enough entries are
 * free, and then until it is full */
void uct_rc_tm_tag_promote(uct_rc_tm_iface_t *iface)
{
    unsigned max_num_tags = iface->md->caps.tm.max_num_tags;
    uct_rc_tm_recv_t *recv;

    if (ucs_likely(iface->tm.num_sw == 0) || (iface->tm.evicting > 0) ||
        ((max_num_tags - iface->tm.num_tags < iface->config.promote_thresh) &&
         (iface->tm.num_tags > 0))) {
        return;
    }

    while (iface->tm.num_sw > 0) {
        recv = ucs_list_head(&iface->tm.sw_list, uct_rc_tm_recv_t, sw_list);
        if (!uct_rc_tm_tag_add_to_device(iface, recv)) {
            break;
        }
        uct_rc_tm_recv_leave_sw(iface, recv);
        uct_rc_tm_stat(iface, UCT_RC_TM_STAT_PROMOTE);
    }
}

static void uct_rc_tm_tag_ops_progress(uct_rc_tm_iface_t *iface)
{
    if (uct_rc_tm_tag_post_queued_dels(iface) != 0) {
        return;
    }

    if (iface->tm.sync_pending) {
        uct_rc_tm_tag_post_sync(iface);
    }
    uct_rc_tm_tag_promote(iface);
}


/*
 * rdma-core frees a list handle when it polls the entry's final completion,
 * and a poll reads a whole batch before the transport dispatches any of it.
 * A DEL posted while a batch is dispatched could name an entry whose final
 * completion is further on in the batch: its handle is free already, and
 * the DEL would free it a second time.  DELs (and the operations that must
 * follow them) wait until every completion of the batch was seen.
 */
void uct_rc_tm_tag_batch_start(uct_rc_tm_iface_t *iface)
{
    iface->tm.in_batch = 1;
}

void uct_rc_tm_tag_batch_end(uct_rc_tm_iface_t *iface)
{
    iface->tm.in_batch = 0;
    if (ucs_unlikely(!ucs_queue_is_empty(&iface->tm.del_queue))) {
        uct_rc_tm_tag_ops_progress(iface);
    }
}

static void uct_rc_tm_tag_handle_add_wc(uct_rc_tm_iface_t *iface,
                                        uct_rc_tm_recv_t *recv,
                                        const tm_dev_wc_t *wc)
{
    if (ucs_unlikely(wc->status != IBV_WC_SUCCESS)) {
        /* Never listed: no final completion will free the slot (nor does
         * rdma-core's), so the device has one entry fewer from now on */
        ucs_error("rc_tm: TAG_ADD failed: %s", ibv_wc_status_str(wc->status));
        if (!(recv->flags & UCT_RC_TM_RECV_SW_WON)) {
            uct_rc_tm_recv_leave_device(iface, recv);
            uct_rc_tm_tag_complete_recv(iface, recv, 0, 0, 0,
                                        UCS_ERR_IO_ERROR);
        }
    }
    uct_rc_tm_recv_slot_put(iface, recv, 1);
}

/* A receive deleted to find a lost one, still posted: back to the software
 * list, at its place in posting order (before every receive posted after
 * it), whence promotion returns it to the device */
static void uct_rc_tm_tag_demote(uct_rc_tm_iface_t *iface,
                                 uct_rc_tm_recv_t *recv)
{
    ucs_list_link_t *pos = &iface->tm.sw_list;
    uct_rc_tm_recv_t *later;

    ucs_list_for_each(later, &iface->tm.sw_list, sw_list) {
        if (later->match.seq > recv->match.seq) {
            pos = &later->sw_list;
            break;
        }
    }
    ucs_list_insert_before(pos, &recv->sw_list);
    recv->flags |= UCT_RC_TM_RECV_IN_SW;
    uct_rc_tm_sw_list_grew(iface);
}

/*
 * mlx5 reports a message too long for the receive it matched as an error of
 * the QP (IBV_WC_LOC_LEN_ERR, opcode 0), naming no receive, and the entry is
 * gone from the device's list all the same: nothing would ever complete it.
 * Every receive the device holds and has not reported consumed is deleted:
 * the DEL that fails names the lost receive (reported truncated); the others
 * go back to the software list in posting order, and to the device again
 * once every DEL is done.
 */
void uct_rc_tm_tag_find_lost(uct_rc_tm_iface_t *iface)
{
    unsigned skip = UCT_RC_TM_RECV_CONSUMED | UCT_RC_TM_RECV_SW_WON |
                    UCT_RC_TM_RECV_CANCELING | UCT_RC_TM_RECV_EVICTING;
    uct_rc_tm_recv_t *recv;
    unsigned i;

    for (i = 0; i < iface->tm.ctxs.size; ++i) {
        recv = iface->tm.ctxs.recv[i];
        if ((recv == NULL) || !(recv->flags & UCT_RC_TM_RECV_IN_DEVICE) ||
            (recv->flags & skip)) {
            continue;
        }
        recv->flags |= UCT_RC_TM_RECV_EVICTING;
        ++iface->tm.evicting;
        uct_rc_tm_tag_post_del(iface, recv);
    }
    ucs_debug("rc_tm: deleting %u device receives to find one a failed "
              "message took", iface->tm.evicting);
}

/*
 * A DEL that fails for a receive no completion reported consumed means one
 * of two things, and no source orders the completions that tell them apart:
 *  - a message consumed the entry, and its completion is still to come (a
 *    single-packet match's may follow the DEL's);
 *  - a message too long for it took it and failed its QP (mlx5: LOC_LEN_ERR,
 *    naming no receive): nothing will ever complete it.
 * Each loss comes with a LOC_LEN_ERR (len_errs; an untagged message too long
 * counts too, though it took no entry), so while more receives wait here
 * than there were such failures, consumptions are still to come.  Once every
 * DEL is done and no more wait than failures were seen, the ones left are
 * lost: reported truncated, their slots kept, as in rdma-core, which still
 * expects a final completion.
 */
void uct_rc_tm_tag_resolve_del_failed(uct_rc_tm_iface_t *iface)
{
    uct_rc_tm_recv_t *recv;

    if ((iface->tm.dels_pending > 0) ||
        (iface->tm.num_del_failed > iface->tm.len_errs)) {
        return;
    }

    iface->tm.len_errs = 0; /* the others were untagged messages */
    while (!ucs_list_is_empty(&iface->tm.del_failed)) {
        recv = ucs_list_extract_head(&iface->tm.del_failed, uct_rc_tm_recv_t,
                                     sw_list);
        recv->flags &= ~UCT_RC_TM_RECV_DEL_FAILED;
        recv->flags |= UCT_RC_TM_RECV_FAILED; /* a late completion drops */
        --iface->tm.num_del_failed;
        ucs_error("rc_tm: a message too long for the receive of tag 0x%"
                  PRIx64 " (%zu bytes) took it", recv->match.tag,
                  recv->length);
        uct_rc_tm_recv_leave_device(iface, recv);
        uct_rc_tm_tag_complete_recv(iface, recv, recv->match.tag, 0,
                                    recv->length, UCS_ERR_MESSAGE_TRUNCATED);
    }
}

/* The consumption of a receive whose DEL failed came after all */
void uct_rc_tm_tag_del_failed_consumed(uct_rc_tm_iface_t *iface,
                                       uct_rc_tm_recv_t *recv)
{
    ucs_list_del(&recv->sw_list);
    recv->flags &= ~UCT_RC_TM_RECV_DEL_FAILED;
    --iface->tm.num_del_failed;
    uct_rc_tm_stat(iface, UCT_RC_TM_STAT_LIST_DEL_RACE);
}

/* A DEL failed: the entry was no longer in the device's list */
static void uct_rc_tm_tag_del_failed(uct_rc_tm_iface_t *iface,
                                     uct_rc_tm_recv_t *recv,
                                     const tm_dev_wc_t *wc)
{
    if (recv->flags & UCT_RC_TM_RECV_SW_WON) {
        ucs_error("rc_tm: TAG_DEL of a receive software matched failed: %s",
                  ibv_wc_status_str(wc->status));
    } else if (recv->flags & UCT_RC_TM_RECV_CONSUMED) {
        /* A message consumed the entry first: its completion decides */
        uct_rc_tm_stat(iface, UCT_RC_TM_STAT_LIST_DEL_RACE);
    } else {
        /* Consumed or lost: it takes no other message */
        uct_rc_tm_recv_unpost(iface, recv);
        recv->flags |= UCT_RC_TM_RECV_DEL_FAILED;
        ucs_list_add_tail(&iface->tm.del_failed, &recv->sw_list);
        ++iface->tm.num_del_failed;
    }
}

static void uct_rc_tm_tag_handle_del_wc(uct_rc_tm_iface_t *iface,
                                        uct_rc_tm_recv_t *recv,
                                        const tm_dev_wc_t *wc)
{
    --iface->tm.dels_pending;
    if (recv->flags & UCT_RC_TM_RECV_EVICTING) {
        recv->flags &= ~UCT_RC_TM_RECV_EVICTING;
        --iface->tm.evicting;
    }

    if (wc->status == IBV_WC_SUCCESS) {
        uct_rc_tm_recv_leave_device(iface, recv);
        if (recv->flags & UCT_RC_TM_RECV_POSTED) {
            /* Deleted only to find a lost one: keeps its owner reference */
            uct_rc_tm_tag_demote(iface, recv);
        } else if (recv->flags & (UCT_RC_TM_RECV_SW_WON |
                                  UCT_RC_TM_RECV_RELEASED)) {
            /* Already reported, or never to be */
            uct_rc_tm_recv_put(iface, recv);
        } else {
            uct_rc_tm_tag_complete_recv(iface, recv, recv->match.tag, 0,
                                        recv->length, UCS_ERR_CANCELED);
        }
        /* the DEL's completion, and the consumption that will never be */
        uct_rc_tm_recv_slot_put(iface, recv, 2);
    } else {
        uct_rc_tm_tag_del_failed(iface, recv, wc);
        uct_rc_tm_recv_slot_put(iface, recv, 1);
    }
    uct_rc_tm_tag_resolve_del_failed(iface);
}

static void uct_rc_tm_tag_handle_op_wc(uct_rc_tm_iface_t *iface,
                                       const tm_dev_wc_t *wc)
{
    uct_rc_tm_recv_t *recv = (uct_rc_tm_recv_t*)(uintptr_t)wc->wr_id;

    --iface->tm.ops_in_flight;

    switch (wc->opcode) {
    case IBV_WC_TM_ADD:
        uct_rc_tm_tag_handle_add_wc(iface, recv, wc);
        uct_rc_tm_recv_put(iface, recv);
        break;
    case IBV_WC_TM_DEL:
        uct_rc_tm_tag_handle_del_wc(iface, recv, wc);
        uct_rc_tm_recv_put(iface, recv);
        break;
    case IBV_WC_TM_SYNC:
        break;
    default:
        ucs_error("rc_tm: unexpected completion opcode %d", wc->opcode);
        break;
    }

    uct_rc_tm_tag_ops_progress(iface);
}

void uct_rc_tm_tag_handle_wc(uct_rc_tm_iface_t *iface, const tm_dev_wc_t *wc)
{
    if (wc->wc_flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID)) {
        uct_rc_tm_tag_handle_recv_wc(iface, wc);
    } else {
        uct_rc_tm_tag_handle_op_wc(iface, wc);
    }

    if (ucs_unlikely(wc->wc_flags & IBV_WC_TM_SYNC_REQ)) {
        uct_rc_tm_tag_post_sync(iface);
    }
}
