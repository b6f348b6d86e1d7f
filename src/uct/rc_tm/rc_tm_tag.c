/*
 * rc_tm tag offload: the protocol between software and the device's
 * tag-matching list.
 *
 * - Every posted receive enters the matcher (src/matcher), which is the
 *   shadow list: posting order, masks, cancel, race detection.  The device
 *   holds a prefix of the posted receives (IBV_WR_TAG_ADD); once one had to
 *   stay in software (list full), every later one stays in software too,
 *   until promotion moves them to the device in posting order.
 * - Messages the device judged unexpected arrive in untagged SRQ buffers.
 *   Software counts them, and matches each against the posted receives in
 *   posting order: a software receive is completed here; a device receive
 *   (added while the device was out of phase) is won by software and
 *   removed from the device; with no match the message goes to the user's
 *   unexpected callbacks.
 * - Every list operation carries that count, so the device matches new
 *   entries only once software has seen every unexpected message (the
 *   phase rule); IBV_WC_TM_SYNC_REQ is answered with a SYNC.  A DEL for a
 *   receive software won is posted before any later operation, so the
 *   device never matches it once it is back in phase.
 * - A receive entry lives while anyone may still name it: a reference for
 *   its owner (the device entry, the software list, a software rendezvous
 *   read), one per list operation in flight, and one for its device list
 *   slot.  The slot is taken until every completion rdma-core expects for
 *   it was polled (its ADD's, the consumption's final one, a DEL's), not
 *   just until the MATCH: the provider reuses a free index at once.
 */
#include "rc_tm_tag.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>

/* An empty set of posted buffers larger than this shrinks */
#define UCT_RC_TM_BUFS_SHRINK_BUCKETS  4096

static ucs_mpool_ops_t uct_rc_tm_recv_mpool_ops = {
    .chunk_alloc   = ucs_mpool_chunk_malloc,
    .chunk_release = ucs_mpool_chunk_free,
    .obj_init      = NULL,
    .obj_cleanup   = NULL
};


/* ----- receive entries ----- */

void uct_rc_tm_recv_put(uct_rc_tm_iface_t *iface, uct_rc_tm_recv_t *recv)
{
    ucs_assert(recv->refs > 0);
    if (--recv->refs > 0) {
        return;
    }
    if (recv->bounce != NULL) {
        ucs_mpool_put_inline(recv->bounce);
    }
    ucs_mpool_put_inline(recv);
}

/* The receive can match no more messages: out of the matcher and the set
 * of posted buffers (the user may post the buffer again) */
void uct_rc_tm_recv_unpost(uct_rc_tm_iface_t *iface, uct_rc_tm_recv_t *recv)
{
    khiter_t it;

    if (!(recv->flags & UCT_RC_TM_RECV_POSTED)) {
        return;
    }

    tm_matcher_remove(&iface->tm.matcher, &recv->match);
    it = kh_get(uct_rc_tm_bufs, &iface->tm.bufs, (uintptr_t)recv->buffer);
    if (it != kh_end(&iface->tm.bufs)) {
        kh_del(uct_rc_tm_bufs, &iface->tm.bufs, it);
        if (ucs_unlikely((kh_size(&iface->tm.bufs) == 0) &&
                         (kh_n_buckets(&iface->tm.bufs) >
                          UCT_RC_TM_BUFS_SHRINK_BUCKETS))) {
            /* A deep queue drained: its buckets (and tombstones) would
             * make a shallow queue's lookups cache misses (kept if the
             * allocation fails) */
            kh_resize(uct_rc_tm_bufs, &iface->tm.bufs, 0);
        }
    }
    recv->flags &= ~UCT_RC_TM_RECV_POSTED;
}

void uct_rc_tm_recv_leave_sw(uct_rc_tm_iface_t *iface, uct_rc_tm_recv_t *recv)
{
    ucs_list_del(&recv->sw_list);
    recv->flags &= ~UCT_RC_TM_RECV_IN_SW;
    --iface->tm.num_sw;
}

/* ----- the table of contexts owed a completion ----- */

/* Doubles the table; its new slots go on the free stack */
static UCS_F_NOINLINE ucs_status_t uct_rc_tm_ctxs_grow(uct_rc_tm_iface_t *iface)
{
    unsigned size = ucs_max(iface->tm.ctxs.size * 2, 256);
    uct_rc_tm_recv_t **recv;
    unsigned *free_idx, i;

    recv = ucs_realloc(iface->tm.ctxs.recv, size * sizeof(*recv),
                       "rc_tm ctxs");
    if (recv == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    iface->tm.ctxs.recv = recv;
    free_idx = ucs_realloc(iface->tm.ctxs.free, size * sizeof(*free_idx),
                           "rc_tm free ctxs");
    if (free_idx == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    iface->tm.ctxs.free = free_idx;
    for (i = size; i > iface->tm.ctxs.size; --i) {
        recv[i - 1]                         = NULL;
        free_idx[iface->tm.ctxs.num_free++] = i - 1;
    }
    iface->tm.ctxs.size = size;
    return UCS_OK;
}

static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_tm_ctxs_insert(uct_rc_tm_iface_t *iface, uct_rc_tm_recv_t *recv)
{
    ucs_status_t status;

    if (ucs_unlikely(iface->tm.ctxs.num_free == 0)) {
        status = uct_rc_tm_ctxs_grow(iface);
        if (status != UCS_OK) {
            return status;
        }
    }
    recv->ctx_index = iface->tm.ctxs.free[--iface->tm.ctxs.num_free];
    iface->tm.ctxs.recv[recv->ctx_index] = recv;
    return UCS_OK;
}

int uct_rc_tm_recv_release_ctx(uct_rc_tm_iface_t *iface,
                               uct_rc_tm_recv_t *recv)
{
    if (recv->flags & UCT_RC_TM_RECV_RELEASED) {
        return 0;
    }
    recv->flags |= UCT_RC_TM_RECV_RELEASED;
    iface->tm.ctxs.recv[recv->ctx_index]           = NULL;
    iface->tm.ctxs.free[iface->tm.ctxs.num_free++] = recv->ctx_index;
    return 1;
}

/* The device's list no longer holds the entry (consumed or deleted); its
 * slot may still be owed completions */
void uct_rc_tm_recv_leave_device(uct_rc_tm_iface_t *iface,
                                 uct_rc_tm_recv_t *recv)
{
    recv->flags &= ~UCT_RC_TM_RECV_IN_DEVICE;
}

/* A completion the slot was owed was polled: the slot is free again once it
 * is owed none, as rdma-core frees it (mlx5_tm_release_tag) */
void uct_rc_tm_recv_slot_put(uct_rc_tm_iface_t *iface, uct_rc_tm_recv_t *recv,
                             unsigned cqes)
{
    ucs_assert(recv->slot_cqes >= cqes);
    recv->slot_cqes -= cqes;
    if (recv->slot_cqes > 0) {
        return;
    }
    recv->flags &= ~UCT_RC_TM_RECV_SLOT;
    --iface->tm.num_tags;
    uct_rc_tm_recv_put(iface, recv);
    uct_rc_tm_tag_promote(iface);
}


/* ----- posting and canceling receives ----- */

/* Is ctx posted and not yet completed?  Its priv may hold anything (a
 * context never posted here): the table checks the index, and the receive
 * found there must name this very context. */
static UCS_F_ALWAYS_INLINE int
uct_rc_tm_tag_ctx_is_posted(uct_rc_tm_iface_t *iface, uct_tag_context_t *ctx)
{
    unsigned index = uct_rc_tm_ctx_priv(ctx)->index;

    return (index < iface->tm.ctxs.size) &&
           (iface->tm.ctxs.recv[index] != NULL) &&
           (iface->tm.ctxs.recv[index]->ctx == ctx);
}

ucs_status_t uct_rc_tm_iface_tag_recv_zcopy(uct_iface_h tl_iface,
                                            uct_tag_t tag, uct_tag_t tag_mask,
                                            const uct_iov_t *iov,
                                            size_t iovcnt,
                                            uct_tag_context_t *ctx)
{
    uct_rc_tm_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_tm_iface_t);
    const uct_iov_t *data    = uct_rc_tm_iov_data(iov, iovcnt);
    uct_rc_tm_recv_t *recv;
    khiter_t it;
    int ret;

    /* As rc_mlx5's; and the length, which it does not check, against
     * what is reported too (a device's scatter entry takes 32 bits) */
    UCT_CHECK_IOV_SIZE(iovcnt, iface->cap.tag.recv.max_iov, "tag_recv_zcopy");
    UCT_CHECK_LENGTH(uct_iov_total_length(iov, iovcnt),
                     iface->cap.tag.recv.min_recv,
                     iface->cap.tag.recv.max_zcopy, "tag_recv_zcopy");

    /* One limit for both lists (cap.tag.recv.max_outstanding): a slot freed
     * in either is room for the next receive */
    if (ucs_unlikely(iface->tm.num_tags + iface->tm.num_sw >=
                     iface->md->caps.tm.max_num_tags +
                     iface->config.sw_list_size)) {
        uct_rc_tm_stat(iface, (iface->config.sw_list_size == 0) ?
                              UCT_RC_TM_STAT_LIST_FULL :
                              UCT_RC_TM_STAT_SW_FULL);
        return UCS_ERR_EXCEEDS_LIMIT;
    }

    if (ucs_unlikely(uct_rc_tm_tag_ctx_is_posted(iface, ctx))) {
        return UCS_ERR_ALREADY_EXISTS;
    }

    /* A buffer posted twice is refused, as rc_mlx5 refuses it; receives
     * with no data have no buffer to share */
    it = kh_end(&iface->tm.bufs);
    if (data->buffer != NULL) {
        it = kh_put(uct_rc_tm_bufs, &iface->tm.bufs, (uintptr_t)data->buffer,
                    &ret);
        if (ucs_unlikely(ret == 0)) {
            return UCS_ERR_ALREADY_EXISTS;
        } else if (ucs_unlikely(ret < 0)) {
            return UCS_ERR_NO_MEMORY;
        }
    }

    recv = ucs_mpool_get_inline(&iface->tm.recv_mp);
    if (ucs_unlikely(recv == NULL)) {
        goto err_no_memory;
    }

    if (ucs_unlikely(tm_matcher_post(&iface->tm.matcher, &recv->match, tag,
                                     tag_mask, recv) != 0)) {
        ucs_mpool_put_inline(recv);
        goto err_no_memory;
    }

    recv->ctx       = ctx;
    recv->buffer    = data->buffer;
    recv->length    = uct_iov_get_length(data);
    recv->lkey      = uct_rc_tm_memh_lkey(data->memh);
    recv->bounce    = NULL;
    recv->flags     = UCT_RC_TM_RECV_POSTED;
    recv->refs      = 1; /* the device entry or the software list */
    if (ucs_unlikely(uct_rc_tm_ctxs_insert(iface, recv) != UCS_OK)) {
        uct_rc_tm_recv_unpost(iface, recv);
        ucs_mpool_put_inline(recv);
        return UCS_ERR_NO_MEMORY;
    }
    uct_rc_tm_ctx_priv(ctx)->recv  = recv;
    uct_rc_tm_ctx_priv(ctx)->index = recv->ctx_index;

    /* The device holds a prefix of the posted receives: straight there only
     * while nothing waits in software */
    if (ucs_likely((iface->tm.num_sw + iface->tm.evicting) == 0) &&
        uct_rc_tm_tag_add_to_device(iface, recv)) {
        uct_rc_tm_stat(iface, UCT_RC_TM_STAT_POST_DEVICE);
        return UCS_OK;
    }

    if (iface->config.sw_list_size == 0) {
        /* No software list, and the device, which has room, took nothing:
         * its list operations are all in flight */
        uct_rc_tm_recv_unpost(iface, recv);
        uct_rc_tm_recv_release_ctx(iface, recv);
        uct_rc_tm_recv_put(iface, recv);
        return UCS_ERR_NO_RESOURCE;
    }

    if (iface->tm.num_sw == 0) {
        uct_rc_tm_stat(iface, UCT_RC_TM_STAT_LIST_FULL);
    }
    recv->flags |= UCT_RC_TM_RECV_IN_SW;
    ucs_list_add_tail(&iface->tm.sw_list, &recv->sw_list);
    uct_rc_tm_sw_list_grew(iface);
    uct_rc_tm_stat(iface, UCT_RC_TM_STAT_POST_SW);
    return UCS_OK;

err_no_memory:
    if (it != kh_end(&iface->tm.bufs)) {
        kh_del(uct_rc_tm_bufs, &iface->tm.bufs, it);
    }
    return UCS_ERR_NO_MEMORY;
}

ucs_status_t uct_rc_tm_iface_tag_recv_cancel(uct_iface_h tl_iface,
                                             uct_tag_context_t *ctx,
                                             int force)
{
    uct_rc_tm_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_tm_iface_t);
    uct_rc_tm_recv_t *recv   = uct_rc_tm_ctx_priv(ctx)->recv;

    if (recv->flags & (UCT_RC_TM_RECV_CANCELING | UCT_RC_TM_RECV_RELEASED)) {
        return UCS_OK;
    }

    uct_rc_tm_stat(iface, UCT_RC_TM_STAT_CANCEL);

    if (force) {
        /* The user matched this receive itself: never call back for it, and
         * the context may be posted again at once */
        uct_rc_tm_recv_release_ctx(iface, recv);
    } else {
        recv->flags |= UCT_RC_TM_RECV_CANCELING;
    }

    if (!(recv->flags & UCT_RC_TM_RECV_POSTED)) {
        /* Already matched: its completion follows (none when forced) */
        return UCS_OK;
    }

    uct_rc_tm_recv_unpost(iface, recv);
    if (recv->flags & UCT_RC_TM_RECV_IN_SW) {
        uct_rc_tm_recv_leave_sw(iface, recv);
        if (force) {
            uct_rc_tm_recv_put(iface, recv);
        } else {
            /* Reported from progress, not from inside the user's call */
            ucs_queue_push(&iface->tm.cancel_queue, &recv->queue);
        }
    } else if ((recv->flags & (UCT_RC_TM_RECV_IN_DEVICE |
                               UCT_RC_TM_RECV_EVICTING)) ==
               UCT_RC_TM_RECV_IN_DEVICE) {
        /* DEL completion reports it, or a message's completion if the
         * device consumed it first (an evicting receive has its DEL) */
        uct_rc_tm_tag_post_del(iface, recv);
    }
    return UCS_OK;
}

unsigned uct_rc_tm_tag_progress(uct_rc_tm_iface_t *iface)
{
    uct_rc_tm_recv_t *recv;
    unsigned count = 0;

    while (!ucs_queue_is_empty(&iface->tm.cancel_queue)) {
        recv = ucs_queue_pull_elem_non_empty(&iface->tm.cancel_queue,
                                             uct_rc_tm_recv_t, queue);
        uct_rc_tm_tag_complete_recv(iface, recv, recv->match.tag, 0,
                                    recv->length, UCS_ERR_CANCELED);
        ++count;
    }
    return count;
}


/* ----- setup ----- */

/* The tag capabilities (uct_rc_tm_iface_cap_init): a rendezvous request
 * goes inline, so its header fits max_inline as well as the device's */
void uct_rc_tm_tag_cap_init(uct_rc_tm_iface_t *iface)
{
    uct_rc_tm_iface_cap_t *cap = &iface->cap;
    const tm_dev_caps_t *caps  = &iface->md->caps;

    if (!iface->tm.enabled) {
        return;
    }

    cap->flags |= UCT_IFACE_FLAG_TAG_EAGER_SHORT |
                  UCT_IFACE_FLAG_TAG_EAGER_BCOPY |
                  UCT_IFACE_FLAG_TAG_EAGER_ZCOPY |
                  UCT_IFACE_FLAG_TAG_RNDV_ZCOPY;

    cap->tag.eager.max_short  = ucs_min(iface->config.max_inline,
                                        iface->config.eager_max +
                                        UCT_RC_TM_TMH_LEN) -
                                UCT_RC_TM_TMH_LEN;
    cap->tag.eager.max_bcopy  = iface->config.eager_max;
    cap->tag.eager.max_zcopy  = iface->config.eager_max;
    cap->tag.eager.max_iov    = 1;

    cap->tag.rndv.max_zcopy   = iface->config.rndv_max;
    cap->tag.rndv.max_hdr     = ucs_min(caps->tm.max_rndv_hdr_size,
                                        iface->config.max_inline) -
                                UCT_RC_TM_RNDV_HDR_LEN;
    cap->tag.rndv.max_iov     = 1;

    cap->tag.recv.min_recv        = 0;
    cap->tag.recv.max_zcopy       = iface->config.rndv_max;
    cap->tag.recv.max_iov         = 1;
    cap->tag.recv.max_outstanding = caps->tm.max_num_tags +
                                    iface->config.sw_list_size;
}

ucs_status_t uct_rc_tm_tag_init(uct_rc_tm_iface_t *iface,
                                const uct_iface_params_t *params,
                                const uct_rc_tm_iface_config_t *config)
{
    uint64_t features = (params->field_mask & UCT_IFACE_PARAM_FIELD_FEATURES) ?
                        params->features : UINT64_MAX;
    uint64_t cb_fields = UCT_IFACE_PARAM_FIELD_HW_TM_EAGER_CB |
                         UCT_IFACE_PARAM_FIELD_HW_TM_RNDV_CB;
    ucs_status_t status;
    unsigned i;

    iface->tm.enabled        = (features & UCT_IFACE_FEATURE_TAG) &&
                               ((params->field_mask & cb_fields) == cb_fields);
    iface->tm.eager_cb       = params->eager_cb;
    iface->tm.eager_arg      = (params->field_mask &
                                UCT_IFACE_PARAM_FIELD_HW_TM_EAGER_ARG) ?
                               params->eager_arg : NULL;
    iface->tm.rndv_cb        = params->rndv_cb;
    iface->tm.rndv_arg       = (params->field_mask &
                                UCT_IFACE_PARAM_FIELD_HW_TM_RNDV_ARG) ?
                               params->rndv_arg : NULL;
    iface->tm.unexpected_cnt = 0;
    iface->tm.num_tags       = 0;
    iface->tm.num_sw         = 0;
    iface->tm.sw_peak        = 0;
    iface->tm.ops_in_flight  = 0;
    iface->tm.evicting       = 0;
    iface->tm.dels_pending   = 0;
    iface->tm.num_del_failed = 0;
    iface->tm.len_errs       = 0;
    iface->tm.sync_pending   = 0;
    iface->tm.in_batch       = 0;
    iface->tm.ops_posted     = 0;
    iface->tm.count_op_sn    = 0;
    iface->tm.count_op_cnt   = 0;
    iface->tm.rndv_in_flight = 0;
    iface->tm.seq            = 0;
    ucs_list_head_init(&iface->tm.sw_list);
    ucs_list_head_init(&iface->tm.matched);
    ucs_list_head_init(&iface->tm.del_failed);
    ucs_queue_head_init(&iface->tm.del_queue);
    ucs_queue_head_init(&iface->tm.cancel_queue);
    kh_init_inplace(uct_rc_tm_bufs, &iface->tm.bufs);
    iface->tm.ctxs.recv      = NULL;
    iface->tm.ctxs.free      = NULL;
    iface->tm.ctxs.size      = 0;
    iface->tm.ctxs.num_free  = 0;

    if (tm_matcher_init(&iface->tm.matcher, &iface->tm.seq) != 0) {
        status = UCS_ERR_NO_MEMORY;
        goto err;
    }

    status = uct_rc_tm_mpool_init(&iface->tm.recv_mp, sizeof(uct_rc_tm_recv_t),
                                  UCS_SYS_CACHE_LINE_SIZE, 256,
                                  &uct_rc_tm_recv_mpool_ops, "rc_tm_recv");
    if (status != UCS_OK) {
        goto err_matcher;
    }

    iface->tm.rndv_ops = ucs_calloc(iface->config.rndv_queue_len,
                                    sizeof(*iface->tm.rndv_ops),
                                    "rc_tm rndv ops");
    if (iface->tm.rndv_ops == NULL) {
        status = UCS_ERR_NO_MEMORY;
        goto err_mp;
    }

    for (i = 0; i < iface->config.rndv_queue_len; ++i) {
        iface->tm.rndv_ops[i].gen       = 1; /* op ids are never 0 */
        iface->tm.rndv_ops[i].next_free = (i + 1 < iface->config.rndv_queue_len) ?
                                          i + 1 : UCT_RC_TM_RNDV_OP_NONE;
    }
    iface->tm.rndv_free = 0;
    return UCS_OK;

err_mp:
    ucs_mpool_cleanup(&iface->tm.recv_mp, 0);
err_matcher:
    tm_matcher_cleanup(&iface->tm.matcher);
err:
    kh_destroy_inplace(uct_rc_tm_bufs, &iface->tm.bufs);
    return status;
}

void uct_rc_tm_tag_cleanup(uct_rc_tm_iface_t *iface)
{
    ucs_free(iface->tm.rndv_ops);
    /* Entries the device still held go with the SRQ */
    ucs_mpool_cleanup(&iface->tm.recv_mp, 0);
    tm_matcher_cleanup(&iface->tm.matcher);
    /* Contexts still posted are the user's again: the interface is gone */
    ucs_free(iface->tm.ctxs.recv);
    ucs_free(iface->tm.ctxs.free);
    kh_destroy_inplace(uct_rc_tm_bufs, &iface->tm.bufs);
}
