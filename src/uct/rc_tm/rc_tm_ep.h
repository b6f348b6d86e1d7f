/*
 * rc_tm endpoint: one reliable connection of the device.
 */
#ifndef UCT_RC_TM_EP_H_
#define UCT_RC_TM_EP_H_

#include "rc_tm_iface.h"

struct uct_rc_tm_ep {
    uct_base_ep_t             super;
    tm_dev_conn_t             *conn;
    uint32_t                  qp_num;      /* the QP it sends on */
    uint32_t                  rx_qp_num;   /* the QP the peer sends to */
    int                       connected;
    int                       passive;     /* stands for a peer's connection
                                              to our SRQ: no UCT endpoint */
    int                       fence;       /* next send waits for earlier ones */
    int                       in_pending;  /* one of its pending requests is
                                              being dispatched */
    unsigned                  available;   /* sends the connection can take */
    unsigned                  unsignaled;  /* sends since the last one that
                                              asked for a completion */
    uint64_t                  posted_sn;   /* sends posted */
    uint64_t                  acked_sn;    /* sends completed (in order) */
    ucs_queue_head_t          tx_ops;      /* uct_rc_tm_tx_op_t, by sn */
    ucs_queue_head_t          ctl_queue;   /* FINs and rendezvous reads that
                                              found no send credit: they go
                                              first when credits return */
    ucs_list_link_t           ctl_link;    /* in tx.ctl_eps while queued */
    ucs_status_t              status;      /* UCS_OK, or why the ep failed */
    ucs_arbiter_group_t       arb_group;   /* pending requests */
};

static UCS_F_ALWAYS_INLINE uct_rc_tm_iface_t *
uct_rc_tm_ep_iface(uct_rc_tm_ep_t *ep)
{
    return ucs_derived_of(ep->super.super.iface, uct_rc_tm_iface_t);
}

/* Can the connection take a send now?  For the transport's own control
 * messages, which keep no order with the user's */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_tm_ep_check_credits(uct_rc_tm_ep_t *ep)
{
    if (ucs_unlikely(ep->status != UCS_OK)) {
        return ep->status;
    }
    if (ucs_unlikely((ep->available == 0) || !ep->connected ||
                     (uct_rc_tm_ep_iface(ep)->tx.available <= 0))) {
        return UCS_ERR_NO_RESOURCE;
    }
    return UCS_OK;
}

/* Whatever waits on the endpoint goes before a new send from the user:
 * queued control messages, and pending requests (except while one of them
 * is being dispatched: it is the one sending) */
static UCS_F_ALWAYS_INLINE int uct_rc_tm_ep_has_queued(uct_rc_tm_ep_t *ep)
{
    return (!ucs_arbiter_group_is_empty(&ep->arb_group) && !ep->in_pending) ||
           !ucs_queue_is_empty(&ep->ctl_queue);
}

/* Can the user send now? */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_tm_ep_check_resources(uct_rc_tm_ep_t *ep)
{
    ucs_status_t status = uct_rc_tm_ep_check_credits(ep);

    if (ucs_unlikely((status == UCS_OK) && uct_rc_tm_ep_has_queued(ep))) {
        return UCS_ERR_NO_RESOURCE;
    }
    return status;
}

static UCS_F_ALWAYS_INLINE uint32_t uct_rc_tm_tx_op_lkey(uct_rc_tm_tx_op_t *op)
{
    return *(uint32_t*)UCS_PTR_BYTE_OFFSET(op, -(ptrdiff_t)sizeof(uint64_t));
}

UCS_CLASS_DECLARE_NEW_FUNC(uct_rc_tm_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DECLARE_DELETE_FUNC(uct_rc_tm_ep_t, uct_ep_t);

ucs_status_t uct_rc_tm_ep_get_address(uct_ep_h tl_ep, uct_ep_addr_t *addr);
ucs_status_t uct_rc_tm_ep_connect_to_ep(uct_ep_h tl_ep,
                                        const uct_device_addr_t *dev_addr,
                                        const uct_ep_addr_t *ep_addr);
/* Connected to the peer at dev_addr: to its endpoint at ep_addr, or (no
 * ep_addr) to its interface at iface_addr, or to anything of its */
int uct_rc_tm_ep_is_connected_to(uct_ep_h tl_ep,
                                 const uct_device_addr_t *dev_addr,
                                 const uct_iface_addr_t *iface_addr,
                                 const uct_ep_addr_t *ep_addr);

ucs_status_t uct_rc_tm_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                                   const void *payload, unsigned length);
ucs_status_t uct_rc_tm_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id,
                                       const uct_iov_t *iov, size_t iovcnt);
ssize_t uct_rc_tm_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                              uct_pack_callback_t pack_cb, void *arg,
                              unsigned flags);
ucs_status_t uct_rc_tm_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id,
                                   const void *header, unsigned header_length,
                                   const uct_iov_t *iov, size_t iovcnt,
                                   unsigned flags, uct_completion_t *comp);

ucs_status_t uct_rc_tm_ep_put_short(uct_ep_h tl_ep, const void *buffer,
                                    unsigned length, uint64_t remote_addr,
                                    uct_rkey_t rkey);
ssize_t uct_rc_tm_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb,
                               void *arg, uint64_t remote_addr,
                               uct_rkey_t rkey);
ucs_status_t uct_rc_tm_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                    size_t iovcnt, uint64_t remote_addr,
                                    uct_rkey_t rkey, uct_completion_t *comp);
ucs_status_t uct_rc_tm_ep_get_bcopy(uct_ep_h tl_ep,
                                    uct_unpack_callback_t unpack_cb, void *arg,
                                    size_t length, uint64_t remote_addr,
                                    uct_rkey_t rkey, uct_completion_t *comp);
ucs_status_t uct_rc_tm_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                    size_t iovcnt, uint64_t remote_addr,
                                    uct_rkey_t rkey, uct_completion_t *comp);

ucs_status_t uct_rc_tm_ep_tag_eager_short(uct_ep_h tl_ep, uct_tag_t tag,
                                          const void *data, size_t length);
ssize_t uct_rc_tm_ep_tag_eager_bcopy(uct_ep_h tl_ep, uct_tag_t tag,
                                     uint64_t imm, uct_pack_callback_t pack_cb,
                                     void *arg, unsigned flags);
ucs_status_t uct_rc_tm_ep_tag_eager_zcopy(uct_ep_h tl_ep, uct_tag_t tag,
                                          uint64_t imm, const uct_iov_t *iov,
                                          size_t iovcnt, unsigned flags,
                                          uct_completion_t *comp);
ucs_status_ptr_t uct_rc_tm_ep_tag_rndv_zcopy(uct_ep_h tl_ep, uct_tag_t tag,
                                             const void *header,
                                             unsigned header_length,
                                             const uct_iov_t *iov,
                                             size_t iovcnt, unsigned flags,
                                             uct_completion_t *comp);
ucs_status_t uct_rc_tm_ep_tag_rndv_cancel(uct_ep_h tl_ep, void *op);
ucs_status_t uct_rc_tm_ep_tag_rndv_request(uct_ep_h tl_ep, uct_tag_t tag,
                                           const void *header,
                                           unsigned header_length,
                                           unsigned flags);

ucs_status_t uct_rc_tm_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req,
                                      unsigned flags);
void uct_rc_tm_ep_pending_purge(uct_ep_h tl_ep, uct_pending_purge_callback_t cb,
                                void *arg);
ucs_arbiter_cb_result_t uct_rc_tm_ep_process_pending(ucs_arbiter_t *arbiter,
                                                     ucs_arbiter_group_t *group,
                                                     ucs_arbiter_elem_t *elem,
                                                     void *arg);
ucs_status_t uct_rc_tm_ep_flush(uct_ep_h tl_ep, unsigned flags,
                                uct_completion_t *comp);
ucs_status_t uct_rc_tm_ep_fence(uct_ep_h tl_ep, unsigned flags);
ucs_status_t uct_rc_tm_ep_check(uct_ep_h tl_ep, unsigned flags,
                                uct_completion_t *comp);

/* A send's wr_id: its sequence number with bit 63 set.  On the receive CQ,
 * where a passive connection's sends complete, mlx5 gives a failed send and
 * a failed receive alike opcode 0; a receive's wr_id is its SRQ buffer, a
 * user-space address, which never has bit 63 set. */
#define UCT_RC_TM_WR_ID_SEND  UCS_BIT(63)

void uct_rc_tm_ep_handle_send_wc(uct_rc_tm_ep_t *ep, const tm_dev_wc_t *wc);
/* The connection failed (either of its QPs): everything outstanding on it
 * completes with the error, and the user hears of it */
void uct_rc_tm_ep_set_failed(uct_rc_tm_ep_t *ep, enum ibv_wc_status wc_status);
void uct_rc_tm_ep_fail(uct_rc_tm_ep_t *ep, ucs_status_t status);

uct_rc_tm_ep_t *uct_rc_tm_iface_passive_ep(uct_rc_tm_iface_t *iface,
                                           uint32_t qp_num);
void uct_rc_tm_iface_destroy_passive_ep(uct_rc_tm_ep_t *ep);
/* The connections of destroyed endpoints (iface->closing): reaped from
 * progress when both CQs were found empty (those whose QPs reached their
 * last WQE before), all destroyed at interface close */
void uct_rc_tm_iface_reap_closing(uct_rc_tm_iface_t *iface);
void uct_rc_tm_iface_destroy_closing(uct_rc_tm_iface_t *iface);

/* An inline send of a header whose first bytes are a TMH, then a payload
 * of the caller's: for the user (checks resources), and for control
 * messages (checks only credits) */
ucs_status_t uct_rc_tm_ep_send_inline(uct_rc_tm_ep_t *ep, const void *hdr,
                                      size_t hdr_length, const void *payload,
                                      size_t length, uint32_t imm_be,
                                      int with_imm);
ucs_status_t uct_rc_tm_ep_send_ctl(uct_rc_tm_ep_t *ep, const void *msg,
                                   size_t length);
/* Makes sure a completion will come for the sends posted so far */
ucs_status_t uct_rc_tm_ep_ask_completion(uct_rc_tm_ep_t *ep);
ucs_status_t uct_rc_tm_ep_post_check(uct_rc_tm_ep_t *ep);
/* An RDMA read after resources were checked (checks only credits) */
ucs_status_t uct_rc_tm_ep_rdma_read(uct_rc_tm_ep_t *ep, void *buffer,
                                    size_t length, uint32_t lkey,
                                    uint64_t remote_addr, uint32_t rkey,
                                    uct_rc_tm_tx_op_t *op);
uct_rc_tm_tx_op_t *uct_rc_tm_iface_get_tx_op(uct_rc_tm_iface_t *iface);
void uct_rc_tm_tx_op_release(uct_rc_tm_tx_op_t *op);
/* Calls the op's completion, if any, and releases it */
void uct_rc_tm_tx_op_done(uct_rc_tm_tx_op_t *op, ucs_status_t status);

#endif
