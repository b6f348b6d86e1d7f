/*
 * rc_tm tag offload: what its three parts share.  rc_tm_tag.c keeps the
 * posted receives (posting, cancel, their contexts); rc_tm_tag_list.c the
 * device's list (list operations and their completions, phase,
 * promotion); rc_tm_tag_rx.c handles the messages (device-matched
 * completions, software matching of unexpected messages, rendezvous
 * finished in software, FINs).
 */
#ifndef UCT_RC_TM_TAG_H_
#define UCT_RC_TM_TAG_H_

#include "rc_tm_ep.h"

/* Unexpected messages between two counts sent on the device's request
 * (UCX's rc_mlx5 sends one every IBV_DEVICE_MAX_UNEXP_COUNT, 2^14): far
 * below the 16-bit wrap of the device's count */
#define UCT_RC_TM_UNEXP_SYNC_PERIOD  UCS_BIT(14)

/* What a posted context holds: the receive, and its index in the table of
 * contexts still owed a completion (which tells a context posted twice) */
typedef struct uct_rc_tm_ctx_priv {
    uct_rc_tm_recv_t *recv;
    unsigned         index;
} uct_rc_tm_ctx_priv_t;

_Static_assert(sizeof(uct_rc_tm_ctx_priv_t) <= UCT_TAG_PRIV_LEN,
               "receive state fits in uct_tag_context_t::priv");

static UCS_F_ALWAYS_INLINE uct_rc_tm_ctx_priv_t *
uct_rc_tm_ctx_priv(uct_tag_context_t *ctx)
{
    return (uct_rc_tm_ctx_priv_t*)ctx->priv;
}

/*
 * A receive shorter than the largest eager message the SRQ takes is not
 * listed as it is: a NIC that matches a message longer than the entry's
 * buffer fails the connection (mlx5: LOC_LEN_ERR naming no entry; UCX skips
 * expected truncation with offload), but MPI needs a truncated receive to
 * report MPI_ERR_TRUNCATE and the connection to live.  Its entry is as long
 * as an eager message may be:
 *  - on a device whose entries take two scatter entries (the software
 *    NIC), its own buffer followed by rx.spill, one segment that every
 *    such entry shares and nothing reads: the data lands in place;
 *  - otherwise (mlx5) a bounce segment of its own, copied to the user's
 *    buffer at completion.
 * Either way software reports what did not fit.  Only a receive that holds
 * whatever software reads back from the device's buffer (a rendezvous
 * request: rndv_request_max_hdr) takes the spill segment.
 */
static UCS_F_ALWAYS_INLINE int
uct_rc_tm_recv_is_short(const uct_rc_tm_iface_t *iface, size_t length)
{
    return length < (iface->config.seg_size - UCT_RC_TM_TMH_LEN);
}

static UCS_F_ALWAYS_INLINE int
uct_rc_tm_recv_fits_spill(const uct_rc_tm_iface_t *iface, size_t length)
{
    return (iface->rx.spill.address != NULL) &&
           (length >= iface->rndv_request_max_hdr);
}

/* Where the device places the receive's data */
static UCS_F_ALWAYS_INLINE void *
uct_rc_tm_recv_dev_buffer(const uct_rc_tm_iface_t *iface,
                          const uct_rc_tm_recv_t *recv)
{
    return (recv->bounce == NULL) ? recv->buffer :
           UCS_PTR_BYTE_OFFSET(recv->bounce, iface->rx.msg_offset);
}

static UCS_F_ALWAYS_INLINE size_t
uct_rc_tm_recv_dev_length(const uct_rc_tm_iface_t *iface,
                          const uct_rc_tm_recv_t *recv)
{
    return (recv->bounce == NULL) ? recv->length : iface->config.seg_size;
}

/* Receive entries (rc_tm_tag.c) */
void uct_rc_tm_recv_put(uct_rc_tm_iface_t *iface, uct_rc_tm_recv_t *recv);
void uct_rc_tm_recv_unpost(uct_rc_tm_iface_t *iface, uct_rc_tm_recv_t *recv);
void uct_rc_tm_recv_leave_sw(uct_rc_tm_iface_t *iface, uct_rc_tm_recv_t *recv);
void uct_rc_tm_recv_leave_device(uct_rc_tm_iface_t *iface,
                                 uct_rc_tm_recv_t *recv);
void uct_rc_tm_recv_slot_put(uct_rc_tm_iface_t *iface, uct_rc_tm_recv_t *recv,
                             unsigned cqes);
/* The context is owed nothing more and may be posted again; returns 0 when
 * it had been released already (force-canceled: no callbacks) */
int uct_rc_tm_recv_release_ctx(uct_rc_tm_iface_t *iface,
                               uct_rc_tm_recv_t *recv);

/* List operations (rc_tm_tag_list.c) */
/* Lists the receive in the device; 0 when the list or its operations are
 * full */
int uct_rc_tm_tag_add_to_device(uct_rc_tm_iface_t *iface,
                                uct_rc_tm_recv_t *recv);
void uct_rc_tm_tag_post_del(uct_rc_tm_iface_t *iface, uct_rc_tm_recv_t *recv);
void uct_rc_tm_tag_post_sync(uct_rc_tm_iface_t *iface);
void uct_rc_tm_tag_promote(uct_rc_tm_iface_t *iface);
void uct_rc_tm_tag_del_failed_consumed(uct_rc_tm_iface_t *iface,
                                       uct_rc_tm_recv_t *recv);

/* Messages (rc_tm_tag_rx.c) */
void uct_rc_tm_tag_complete_recv(uct_rc_tm_iface_t *iface,
                                 uct_rc_tm_recv_t *recv, uint64_t tag,
                                 uint64_t imm, size_t length,
                                 ucs_status_t status);
void uct_rc_tm_tag_handle_recv_wc(uct_rc_tm_iface_t *iface,
                                  const tm_dev_wc_t *wc);

#endif
