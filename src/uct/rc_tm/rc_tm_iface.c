/*
 * rc_tm interface: configuration, queues and untagged receive buffers,
 * addresses, query, flush.  Progress is in rc_tm_progress.c.
 */
#include "rc_tm_iface.h"
#include "rc_tm_ep.h"

#include <ucs/arch/cpu.h>
#include <ucs/debug/log.h>
#include <ucs/sys/string.h>

static ucs_config_field_t uct_rc_tm_iface_config_table[] = {
    {"", "", NULL,
     ucs_offsetof(uct_rc_tm_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},

    {"SEG_SIZE", "8256",
     "Largest active message or tagged eager message sent by copy; also the\n"
     "size of each untagged receive buffer. The default holds an 8 KiB\n"
     "message with its headers, as UCX's shared memory segments do (UCP\n"
     "sends larger tagged messages by rendezvous).",
     ucs_offsetof(uct_rc_tm_iface_config_t, seg_size), UCS_CONFIG_TYPE_MEMUNITS},

    {"TX_QUEUE_LEN", "4096",
     "Number of sends the interface keeps in flight: the entries of its send\n"
     "completion queue, which a failed connection may fill with one error\n"
     "completion per send. Several times a connection's send queue, so that\n"
     "sends need not all ask for a completion (as UCX's TX_CQ_LEN).",
     ucs_offsetof(uct_rc_tm_iface_config_t, tx_queue_len), UCS_CONFIG_TYPE_UINT},

    {"TX_CQ_MODERATION", "64",
     "A send asks for a completion at least once in this many sends of a\n"
     "connection (and always when it has a callback); the completion stands\n"
     "for those before it. At most a quarter of the send queue.",
     ucs_offsetof(uct_rc_tm_iface_config_t, tx_moderation),
     UCS_CONFIG_TYPE_UINT},

    {"RNDV_QUEUE_LEN", "1024",
     "Number of rendezvous sends that may wait for the receiver at once.",
     ucs_offsetof(uct_rc_tm_iface_config_t, rndv_queue_len),
     UCS_CONFIG_TYPE_UINT},

    {"TM_EAGER_MAX", "auto",
     "Largest tagged message sent eagerly; larger ones use rendezvous.\n"
     "At most SEG_SIZE less the tag-matching header, which 'auto' means.",
     ucs_offsetof(uct_rc_tm_iface_config_t, eager_max),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"TM_RNDV_MAX", "1g",
     "Largest tagged message sent with rendezvous.",
     ucs_offsetof(uct_rc_tm_iface_config_t, rndv_max),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"TM_SYNC_ALWAYS", "y",
     "Every tag list operation carries software's unexpected count, so the\n"
     "device resynchronizes at once. With 'n' only SYNC_REQ answers and\n"
     "periodic syncs do.",
     ucs_offsetof(uct_rc_tm_iface_config_t, sync_always), UCS_CONFIG_TYPE_BOOL},

    {"TM_SW_LIST_SIZE", "65536",
     "Receives kept in software beyond the device's tag list. Together they\n"
     "are the limit of posted receives (cap.tag.recv.max_outstanding); past\n"
     "it posting fails with UCS_ERR_EXCEEDS_LIMIT. 0 disables the software list.",
     ucs_offsetof(uct_rc_tm_iface_config_t, sw_list_size), UCS_CONFIG_TYPE_UINT},

    {"TM_PROMOTE_THRESH", "0",
     "Free device list entries that start moving software receives back to\n"
     "the device (then it fills up): keeps a list hovering at its limit from\n"
     "thrashing. 0 means an eighth of the list.",
     ucs_offsetof(uct_rc_tm_iface_config_t, promote_thresh),
     UCS_CONFIG_TYPE_UINT},

    {"REPORT", "n",
     "Print a summary of tag-matching offload when the interface closes, to\n"
     "UCX's log stream whatever UCX_LOG_LEVEL (as UCX_PROTO_INFO prints):\n"
     "receives given to the device and kept in software, messages the device\n"
     "matched and those left to UCP, rendezvous, cancels, and advice where\n"
     "offload did not pay. UCX's VFS shows the same for a running process.",
     ucs_offsetof(uct_rc_tm_iface_config_t, report), UCS_CONFIG_TYPE_BOOL},

    UCT_RC_TM_IFACE_MPOOL_CONFIG_FIELDS("RX_", -1, 128, "receive",
                                        ucs_offsetof(uct_rc_tm_iface_config_t,
                                                     rx_mpool)),

    UCT_RC_TM_IFACE_MPOOL_CONFIG_FIELDS("TX_", -1, 128, "send",
                                        ucs_offsetof(uct_rc_tm_iface_config_t,
                                                     tx_mpool)),

    {NULL}
};


/* ----- receive buffers ----- */


static void uct_rc_tm_rx_elem_init(uct_iface_h tl_iface, void *obj,
                                   uct_mem_h memh)
{
    ((uct_rc_tm_rx_elem_t*)obj)->lkey = uct_rc_tm_memh_lkey(memh);
}

static void uct_rc_tm_tx_elem_init(uct_iface_h tl_iface, void *obj,
                                   uct_mem_h memh)
{
    /* The lkey sits right before the op record */
    *(uint32_t*)obj = uct_rc_tm_memh_lkey(memh);
}

/* The SRQ took the buffers before bad_wr only (full: a failed receive
 * counted as having taken a buffer did not): the rest go back.  Returns
 * how many it took. */
static UCS_F_NOINLINE unsigned
uct_rc_tm_iface_post_rx_failed(uct_rc_tm_iface_t *iface,
                               struct ibv_recv_wr *wr,
                               struct ibv_recv_wr *bad_wr, unsigned count,
                               int ret)
{
    unsigned posted = bad_wr - wr;
    unsigned i;

    ucs_debug("rc_tm: SRQ took %u of %u receive buffers: %s", posted, count,
              strerror(ret));
    for (i = posted; i < count; ++i) {
        ucs_mpool_put_inline((void*)(uintptr_t)wr[i].wr_id);
    }
    if (ret == ENOMEM) {
        /* The SRQ is full: count it full until a buffer is used */
        iface->rx.posted = iface->rx.depth - posted;
    }
    return posted;
}

/* Posts up to a batch of buffers; returns how many the SRQ took */
static unsigned uct_rc_tm_iface_post_rx_batch(uct_rc_tm_iface_t *iface)
{
    struct ibv_recv_wr wr[UCT_RC_TM_POLL_BATCH], *bad_wr;
    struct ibv_sge sge[UCT_RC_TM_POLL_BATCH];
    uct_rc_tm_rx_elem_t *elem;
    unsigned count = 0;
    int ret;

    while ((iface->rx.posted + count < iface->rx.depth) &&
           (count < UCT_RC_TM_POLL_BATCH)) {
        elem = ucs_mpool_get_inline(&iface->rx.mp);
        if (elem == NULL) {
            break;
        }

        sge[count].addr   = (uintptr_t)elem + iface->rx.msg_offset;
        sge[count].length = iface->config.seg_size;
        sge[count].lkey   = elem->lkey;
        wr[count].wr_id   = (uintptr_t)elem;
        wr[count].sg_list = &sge[count];
        wr[count].num_sge = 1;
        wr[count].next    = &wr[count + 1];
        ++count;
    }

    if (count == 0) {
        return 0;
    }

    wr[count - 1].next = NULL;
    ret = tm_dev_post_srq_recv(iface->srq, wr, &bad_wr);
    if (ucs_unlikely(ret != 0)) {
        count = uct_rc_tm_iface_post_rx_failed(iface, wr, bad_wr, count, ret);
    }
    iface->rx.posted += count;
    return count;
}

/* Fills the SRQ: a NIC's tag matching wants every untagged buffer posted
 * (mlx5's at least 33), and a polled batch used at most one batch.  Polls
 * call it once rx.refill buffers are missing, as rc_mlx5 posts once
 * UCX_IB_RX_MAX_BATCH are: a post per message costs the software NIC a
 * verbs call per message. */
void uct_rc_tm_iface_post_rx(uct_rc_tm_iface_t *iface)
{
    while (uct_rc_tm_iface_post_rx_batch(iface) == UCT_RC_TM_POLL_BATCH) {
    }
}

void uct_rc_tm_iface_release_rx(uct_rc_tm_iface_t *iface, void *elem)
{
    ucs_mpool_put_inline(elem);
}

/* UCP returns a descriptor it kept (UCS_INPROGRESS from a callback) */
static void uct_rc_tm_release_desc(uct_recv_desc_t *self, void *desc)
{
    ucs_mpool_put_inline(UCS_PTR_BYTE_OFFSET(desc,
                                             -(ptrdiff_t)(sizeof(uct_rc_tm_rx_elem_t) +
                                                          UCT_RC_TM_TMH_LEN)));
}

/* ----- interface operations ----- */

/* The capabilities, once at open: iface_query reports them, and the sends
 * check their parameters against them (uct_rc_tm_iface_t::cap) */
static void uct_rc_tm_iface_cap_init(uct_rc_tm_iface_t *iface)
{
    uct_rc_tm_iface_cap_t *cap = &iface->cap;
    const tm_dev_caps_t *caps  = &iface->md->caps;
    size_t am_max              = iface->config.seg_size - UCT_RC_TM_TMH_LEN;
    /* what goes inline after the TMH, into a receive buffer of the peer */
    size_t inline_max          = ucs_min(iface->config.max_inline,
                                         iface->config.seg_size) -
                                 UCT_RC_TM_TMH_LEN;

    memset(cap, 0, sizeof(*cap));
    cap->flags = UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_AM_BCOPY |
                 UCT_IFACE_FLAG_AM_ZCOPY | UCT_IFACE_FLAG_PUT_SHORT |
                 UCT_IFACE_FLAG_PUT_BCOPY | UCT_IFACE_FLAG_PUT_ZCOPY |
                 UCT_IFACE_FLAG_GET_BCOPY | UCT_IFACE_FLAG_GET_ZCOPY |
                 UCT_IFACE_FLAG_PENDING | UCT_IFACE_FLAG_CONNECT_TO_EP |
                 UCT_IFACE_FLAG_EP_CHECK |
                 UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE |
                 UCT_IFACE_FLAG_CB_SYNC;
    if (caps->flags & TM_DEV_CAP_CONNECT_TO_SRQ) {
        /* Wireup needs no auxiliary transport: UCP connects to the iface */
        cap->flags |= UCT_IFACE_FLAG_CONNECT_TO_IFACE;
    }

    /* am_short's 64-bit header counts in max_short, as uct.h has it */
    cap->am.max_short       = inline_max;
    cap->am.max_bcopy       = am_max;
    cap->am.min_zcopy       = 0;
    cap->am.max_zcopy       = am_max;
    cap->am.max_hdr         = inline_max;
    cap->am.max_iov         = 1;
    cap->am.opt_zcopy_align = 1;
    cap->am.align_mtu       = 1;

    cap->put.max_short       = iface->config.max_inline;
    cap->put.max_bcopy       = iface->config.seg_size;
    cap->put.min_zcopy       = 0;
    cap->put.max_zcopy       = caps->max_rdma_size;
    cap->put.max_iov         = 1;
    cap->put.opt_zcopy_align = 1;
    cap->put.align_mtu       = 1;

    cap->get.max_bcopy       = iface->config.seg_size;
    cap->get.min_zcopy       = 0;
    cap->get.max_zcopy       = caps->max_rdma_size;
    cap->get.max_iov         = 1;
    cap->get.opt_zcopy_align = 1;
    cap->get.align_mtu       = 1;

    iface->rndv_request_max_hdr = ucs_min(inline_max,
                                          UCT_RC_TM_RNDV_REQUEST_MAX_HDR);
    uct_rc_tm_tag_cap_init(iface);
}

static ucs_status_t uct_rc_tm_iface_query(uct_iface_h tl_iface,
                                          uct_iface_attr_t *attr)
{
    uct_rc_tm_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_tm_iface_t);
    const tm_dev_caps_t *caps = &iface->md->caps;
    tm_dev_perf_t perf;

    uct_base_iface_query(&iface->super, attr);
    attr->cap = iface->cap;

    attr->device_addr_len = caps->dev_addr_len;
    attr->iface_addr_len  = (caps->flags & TM_DEV_CAP_CONNECT_TO_SRQ) ?
                            caps->srq_addr_len : 0;
    attr->ep_addr_len     = caps->conn_addr_len;
    attr->max_conn_priv   = 0;

    tm_dev_perf(iface->dev, &perf);
    attr->latency             = ucs_linear_func_make(perf.latency, 0);
    /* A NIC's port is shared by the host's processes; the software NIC
     * copies on each process's own CPU, as UCX's shared-memory transports */
    attr->bandwidth.dedicated = perf.per_process ? perf.bandwidth : 0;
    attr->bandwidth.shared    = perf.per_process ? 0 : perf.bandwidth;
    attr->overhead            = perf.post;
    attr->priority            = 0;
    return UCS_OK;
}

static ucs_status_t uct_rc_tm_iface_get_device_address(uct_iface_h tl_iface,
                                                       uct_device_addr_t *addr)
{
    uct_rc_tm_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_tm_iface_t);

    tm_dev_addr(iface->dev, addr);
    return UCS_OK;
}

static ucs_status_t uct_rc_tm_iface_get_address(uct_iface_h tl_iface,
                                                uct_iface_addr_t *addr)
{
    uct_rc_tm_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_tm_iface_t);

    if (iface->md->caps.flags & TM_DEV_CAP_CONNECT_TO_SRQ) {
        tm_dev_srq_addr(iface->srq, addr);
    }
    return UCS_OK;
}

int uct_rc_tm_iface_reaches(uct_iface_h tl_iface,
                            const uct_device_addr_t *dev_addr, int same_device)
{
    uct_rc_tm_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_tm_iface_t);

    if (dev_addr == NULL) {
        return 0;
    }
    return same_device ? tm_dev_addr_is_local(iface->dev, dev_addr) :
                         tm_dev_is_reachable(iface->dev, dev_addr);
}

const char *uct_rc_tm_iface_dev_name(uct_iface_h tl_iface)
{
    return ucs_derived_of(tl_iface, uct_rc_tm_iface_t)->dev->name;
}

static int uct_rc_tm_iface_is_reachable(const uct_iface_h tl_iface,
                                        const uct_device_addr_t *dev_addr,
                                        const uct_iface_addr_t *iface_addr)
{
    return uct_rc_tm_iface_reaches(tl_iface, dev_addr, 0);
}

/* Operations whose data the device reads from memory it was not handed in
 * the work request itself: a NIC fetches their descriptor over PCI */
static int uct_rc_tm_op_fetches_wqe(uct_ep_operation_t op)
{
    switch (op) {
    case UCT_EP_OP_AM_BCOPY:
    case UCT_EP_OP_AM_ZCOPY:
    case UCT_EP_OP_PUT_BCOPY:
    case UCT_EP_OP_PUT_ZCOPY:
    case UCT_EP_OP_GET_BCOPY:
    case UCT_EP_OP_GET_ZCOPY:
    case UCT_EP_OP_EAGER_BCOPY:
    case UCT_EP_OP_EAGER_ZCOPY:
    case UCT_EP_OP_RNDV_ZCOPY:
        return 1;
    default:
        return 0;
    }
}

/* Operations the initiator's device carries out as an RDMA read or write
 * (a rendezvous is read by the receiver's device) */
static int uct_rc_tm_op_is_rdma(uct_ep_operation_t op)
{
    switch (op) {
    case UCT_EP_OP_PUT_SHORT:
    case UCT_EP_OP_PUT_BCOPY:
    case UCT_EP_OP_PUT_ZCOPY:
    case UCT_EP_OP_GET_BCOPY:
    case UCT_EP_OP_GET_ZCOPY:
        return 1;
    default:
        return 0;
    }
}

/* The device's figures by operation, as UCX's ib transports give theirs;
 * the base fills what has no figure of its own here (and what newer UCX
 * versions ask) */
ucs_status_t uct_rc_tm_iface_estimate_perf(uct_iface_h tl_iface,
                                           uct_perf_attr_t *perf_attr)
{
    uct_rc_tm_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_tm_iface_t);
    uint64_t mask            = perf_attr->field_mask;
    uct_ep_operation_t op    = (mask & UCT_PERF_ATTR_FIELD_OPERATION) ?
                               perf_attr->operation : UCT_EP_OP_LAST;
    tm_dev_perf_t perf;
    ucs_status_t status;

    status = uct_base_iface_estimate_perf(tl_iface, perf_attr);
    if (status != UCS_OK) {
        return status;
    }

    tm_dev_perf(iface->dev, &perf);
    if (mask & UCT_PERF_ATTR_FIELD_SEND_PRE_OVERHEAD) {
        perf_attr->send_pre_overhead = perf.post +
                (uct_rc_tm_op_is_rdma(op) ? perf.rdma_copy : 0);
    }
    if (mask & UCT_PERF_ATTR_FIELD_SEND_POST_OVERHEAD) {
        perf_attr->send_post_overhead = perf.doorbell;
    }
    if (mask & UCT_PERF_ATTR_FIELD_RECV_OVERHEAD) {
        perf_attr->recv_overhead = perf.post +
                ((op == UCT_EP_OP_RNDV_ZCOPY) ? perf.rdma_copy : 0);
    }
    if ((mask & UCT_PERF_ATTR_FIELD_BANDWIDTH) &&
        (uct_rc_tm_op_is_rdma(op) || (op == UCT_EP_OP_RNDV_ZCOPY))) {
        if (perf.per_process) {
            perf_attr->bandwidth.dedicated = perf.rdma_bandwidth;
        } else {
            perf_attr->bandwidth.shared    = perf.rdma_bandwidth;
        }
    }
    if (mask & UCT_PERF_ATTR_FIELD_LATENCY) {
        perf_attr->latency = ucs_linear_func_make(
                perf.latency +
                (uct_rc_tm_op_fetches_wqe(op) ? perf.wqe_fetch : 0), 0);
    }
    return UCS_OK;
}

static ucs_status_t uct_rc_tm_iface_flush(uct_iface_h tl_iface, unsigned flags,
                                          uct_completion_t *comp)
{
    uct_rc_tm_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_tm_iface_t);
    ucs_status_t status = UCS_OK;
    ucs_status_t ep_status;
    uct_rc_tm_ep_t *ep;

    if (comp != NULL) {
        return UCS_ERR_UNSUPPORTED;
    }

    /* A failed endpoint has nothing left to wait for: its error is the
     * answer, as UCX's rc transports give it */
    kh_foreach_value(&iface->eps, ep, {
        ep_status = uct_rc_tm_ep_flush(&ep->super.super, 0, NULL);
        if ((ep_status == UCS_INPROGRESS) ||
            (ep_status == UCS_ERR_NO_RESOURCE)) {
            status = UCS_INPROGRESS;
        } else if (ep_status != UCS_OK) {
            return ep_status;
        }
    });

    if (iface->tm.rndv_in_flight > 0) {
        status = UCS_INPROGRESS;
    }
    return status;
}

static void uct_rc_tm_iface_progress_enable(uct_iface_h tl_iface,
                                            unsigned flags)
{
    uct_rc_tm_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_tm_iface_t);

    uct_base_iface_progress_enable_cb(&iface->super,
                                      (ucs_callback_t)uct_rc_tm_iface_progress,
                                      flags);
}

/* For tests that steer the device (the software device's test API) */
void uct_rc_tm_iface_device(uct_iface_h tl_iface, tm_dev_t **dev_p,
                            tm_dev_srq_t **srq_p)
{
    uct_rc_tm_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_tm_iface_t);

    *dev_p = iface->dev;
    *srq_p = iface->srq;
}

static UCS_CLASS_DECLARE_DELETE_FUNC(uct_rc_tm_iface_t, uct_iface_t);

static uct_iface_ops_t uct_rc_tm_iface_ops = {
    .ep_am_short              = uct_rc_tm_ep_am_short,
    .ep_am_short_iov          = uct_rc_tm_ep_am_short_iov,
    .ep_am_bcopy              = uct_rc_tm_ep_am_bcopy,
    .ep_am_zcopy              = uct_rc_tm_ep_am_zcopy,
    .ep_put_short             = uct_rc_tm_ep_put_short,
    .ep_put_bcopy             = uct_rc_tm_ep_put_bcopy,
    .ep_put_zcopy             = uct_rc_tm_ep_put_zcopy,
    .ep_get_bcopy             = uct_rc_tm_ep_get_bcopy,
    .ep_get_zcopy             = uct_rc_tm_ep_get_zcopy,
    .ep_tag_eager_short       = uct_rc_tm_ep_tag_eager_short,
    .ep_tag_eager_bcopy       = uct_rc_tm_ep_tag_eager_bcopy,
    .ep_tag_eager_zcopy       = uct_rc_tm_ep_tag_eager_zcopy,
    .ep_tag_rndv_zcopy        = uct_rc_tm_ep_tag_rndv_zcopy,
    .ep_tag_rndv_cancel       = uct_rc_tm_ep_tag_rndv_cancel,
    .ep_tag_rndv_request      = uct_rc_tm_ep_tag_rndv_request,
    .iface_tag_recv_zcopy     = uct_rc_tm_iface_tag_recv_zcopy,
    .iface_tag_recv_cancel    = uct_rc_tm_iface_tag_recv_cancel,
    .ep_pending_add           = uct_rc_tm_ep_pending_add,
    .ep_pending_purge         = uct_rc_tm_ep_pending_purge,
    .ep_flush                 = uct_rc_tm_ep_flush,
    .ep_fence                 = uct_rc_tm_ep_fence,
    .ep_check                 = uct_rc_tm_ep_check,
    .ep_create                = UCS_CLASS_NEW_FUNC_NAME(uct_rc_tm_ep_t),
    .ep_destroy               = UCS_CLASS_DELETE_FUNC_NAME(uct_rc_tm_ep_t),
    .ep_get_address           = uct_rc_tm_ep_get_address,
    .ep_connect_to_ep         = uct_rc_tm_ep_connect_to_ep,
    .iface_flush              = uct_rc_tm_iface_flush,
    .iface_fence              = uct_base_iface_fence,
    .iface_progress_enable    = uct_rc_tm_iface_progress_enable,
    .iface_progress_disable   = uct_base_iface_progress_disable,
    .iface_progress           = uct_rc_tm_iface_progress,
    .iface_close              = UCS_CLASS_DELETE_FUNC_NAME(uct_rc_tm_iface_t),
    .iface_query              = uct_rc_tm_iface_query,
    .iface_get_device_address = uct_rc_tm_iface_get_device_address,
    .iface_get_address        = uct_rc_tm_iface_get_address,
    .iface_is_reachable       = uct_rc_tm_iface_is_reachable
};

static ucs_status_t
uct_rc_tm_iface_check_config(const uct_rc_tm_iface_config_t *config,
                             const tm_dev_caps_t *caps)
{
    if ((config->seg_size <= UCT_RC_TM_RNDV_HDR_LEN) ||
        (config->seg_size > caps->max_msg_size)) {
        ucs_error("rc_tm: UCX_RC_TM_SEG_SIZE=%zu must be above %zu and at "
                  "most the device's message size %u", config->seg_size,
                  UCT_RC_TM_RNDV_HDR_LEN, caps->max_msg_size);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->tx_queue_len == 0) || (config->rndv_queue_len == 0) ||
        (config->rndv_queue_len > UINT16_MAX)) {
        ucs_error("rc_tm: UCX_RC_TM_TX_QUEUE_LEN (%u) must be positive and "
                  "UCX_RC_TM_RNDV_QUEUE_LEN (%u) within 1..%u",
                  config->tx_queue_len, config->rndv_queue_len, UINT16_MAX);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->eager_max != UCS_MEMUNITS_AUTO) &&
        ((config->eager_max == 0) ||
         (config->eager_max > config->seg_size - UCT_RC_TM_TMH_LEN))) {
        ucs_error("rc_tm: UCX_RC_TM_TM_EAGER_MAX=%zu must be within 1..%zu "
                  "(UCX_RC_TM_SEG_SIZE less the tag header)",
                  config->eager_max, config->seg_size - UCT_RC_TM_TMH_LEN);
        return UCS_ERR_INVALID_PARAM;
    }

    return UCS_OK;
}

/* A NIC's CQ that overflows is dead, so the receive CQ holds the most it
 * can ever be owed (as UCX's rc_mlx5 sizes it): one completion per
 * untagged buffer; two per device list slot (the MATCH and the final one,
 * the slot is taken until both are polled); one per list operation in
 * flight (ADD, DEL, SYNC); and, when peers may connect to the SRQ, the
 * sends of those connections, which complete here and take the
 * interface's send credits. */
static unsigned uct_rc_tm_iface_recv_cq_len(const uct_rc_tm_iface_t *self,
                                            unsigned tx_queue_len)
{
    const tm_dev_caps_t *caps = &self->md->caps;

    return self->rx.depth + (2 * caps->tm.max_num_tags) + caps->tm.max_ops +
           ((caps->flags & TM_DEV_CAP_CONNECT_TO_SRQ) ? tx_queue_len : 0);
}

/* One segment that the list entries of short receives end in, on a device
 * whose entries take two scatter entries (rc_tm_tag.h); it outlives the
 * SRQ, which may write it until it is destroyed */
static ucs_status_t uct_rc_tm_iface_spill_alloc(uct_rc_tm_iface_t *self)
{
    self->rx.spill.address = NULL;
    if (self->md->caps.tm.max_sge < 2) {
        return UCS_OK;
    }
    return uct_iface_mem_alloc(&self->super.super, self->config.seg_size,
                               UCT_MD_MEM_ACCESS_ALL, "rc_tm spill",
                               &self->rx.spill);
}

static void uct_rc_tm_iface_spill_free(uct_rc_tm_iface_t *self)
{
    if (self->rx.spill.address != NULL) {
        uct_iface_mem_free(&self->rx.spill);
    }
}

static ucs_status_t uct_rc_tm_iface_create_queues(uct_rc_tm_iface_t *self,
                                                  unsigned tx_queue_len)
{
    int ret;

    ret = tm_dev_create_cq(self->dev, tx_queue_len, &self->send_cq);
    if (ret != 0) {
        goto err;
    }

    ret = tm_dev_create_cq(self->dev,
                           uct_rc_tm_iface_recv_cq_len(self, tx_queue_len),
                           &self->recv_cq);
    if (ret != 0) {
        goto err_destroy_send_cq;
    }

    ret = tm_dev_create_srq(self->dev, self->recv_cq, &self->srq);
    if (ret != 0) {
        goto err_destroy_recv_cq;
    }

    return UCS_OK;

err_destroy_recv_cq:
    tm_dev_destroy_cq(self->recv_cq);
err_destroy_send_cq:
    tm_dev_destroy_cq(self->send_cq);
err:
    ucs_error("rc_tm: failed to create queues on %s: %s", self->dev->name,
              strerror(ret));
    return uct_rc_tm_status_from_errno(ret);
}

static void uct_rc_tm_iface_destroy_queues(uct_rc_tm_iface_t *self)
{
    tm_dev_destroy_srq(self->srq);
    tm_dev_destroy_cq(self->recv_cq);
    tm_dev_destroy_cq(self->send_cq);
}

static UCS_CLASS_INIT_FUNC(uct_rc_tm_iface_t, uct_md_h tl_md,
                           uct_worker_h worker,
                           const uct_iface_params_t *params,
                           const uct_iface_config_t *tl_config)
{
    uct_rc_tm_md_t *md = ucs_derived_of(tl_md, uct_rc_tm_md_t);
    const uct_rc_tm_iface_config_t *config =
            ucs_derived_of(tl_config, uct_rc_tm_iface_config_t);
    ucs_status_t status;

    UCT_CHECK_PARAM(params->field_mask & UCT_IFACE_PARAM_FIELD_OPEN_MODE,
                    "UCT_IFACE_PARAM_FIELD_OPEN_MODE is not defined");
    if (!(params->open_mode & UCT_IFACE_OPEN_MODE_DEVICE)) {
        ucs_error("rc_tm: only UCT_IFACE_OPEN_MODE_DEVICE is supported");
        return UCS_ERR_UNSUPPORTED;
    }
    status = uct_rc_tm_md_check_dev_name(md, params->mode.device.dev_name);
    if (status != UCS_OK) {
        return status;
    }

    UCS_CLASS_CALL_SUPER_INIT(uct_base_iface_t, &uct_rc_tm_iface_ops,
                              &uct_rc_tm_iface_internal_ops, tl_md, worker,
                              params, tl_config
                              UCS_STATS_ARG(params->stats_root)
                              UCS_STATS_ARG(UCT_RC_TM_NAME));

    status = uct_rc_tm_iface_check_config(config, &md->caps);
    if (status != UCS_OK) {
        return status;
    }

    self->md                    = md;
    self->dev                   = md->dev;
    self->config.seg_size       = config->seg_size;
    self->config.max_inline     = ucs_min(md->caps.max_inline,
                                          UCT_RC_TM_SHORT_MAX);
    self->config.eager_max      = (config->eager_max == UCS_MEMUNITS_AUTO) ?
                                  config->seg_size - UCT_RC_TM_TMH_LEN :
                                  config->eager_max;
    self->config.rndv_max       = ucs_min(config->rndv_max,
                                          md->caps.max_rdma_size);
    self->config.rndv_queue_len = config->rndv_queue_len;
    self->config.tx_moderation  = ucs_max(1, ucs_min(config->tx_moderation,
                                                     md->caps.max_send_wr / 4));
    self->config.sync_always    = config->sync_always;
    self->config.report         = config->report;
    self->config.sw_list_size   = config->sw_list_size;
    self->config.promote_thresh = config->promote_thresh ?
                                  ucs_min(config->promote_thresh,
                                          md->caps.tm.max_num_tags) :
                                  ucs_max(1, md->caps.tm.max_num_tags / 8);
    self->rx.depth              = md->caps.max_srq_wr;
    self->rx.posted             = 0;
    self->rx.refill             = ucs_min(UCT_RC_TM_POLL_BATCH,
                                          self->rx.depth / 4);
    self->rx.headroom           = (params->field_mask &
                                   UCT_IFACE_PARAM_FIELD_RX_HEADROOM) ?
                                  params->rx_headroom : 0;
    self->rx.msg_offset         = sizeof(uct_rc_tm_rx_elem_t) +
                                  self->rx.headroom;
    self->rx.release_desc.cb    = uct_rc_tm_release_desc;
    self->tx.available          = config->tx_queue_len;
    self->tx.depth              = config->tx_queue_len;
    ucs_list_head_init(&self->tx.ctl_eps);
    kh_init_inplace(uct_rc_tm_qpn, &self->eps);
    self->cq_failed             = 0;
    self->events_countdown      = UCT_RC_TM_EVENTS_INTERVAL;
    ucs_list_head_init(&self->closing);
    ucs_arbiter_init(&self->arbiter);

    status = uct_iface_mpool_init(&self->super, &self->rx.mp,
                                  self->rx.msg_offset + self->config.seg_size,
                                  self->rx.msg_offset, UCS_SYS_CACHE_LINE_SIZE,
                                  &config->rx_mpool, 256,
                                  uct_rc_tm_rx_elem_init, "rc_tm_rx");
    if (status != UCS_OK) {
        goto err;
    }

    status = uct_iface_mpool_init(&self->super, &self->tx.mp,
                                  sizeof(uint64_t) + sizeof(uct_rc_tm_tx_op_t) +
                                  self->config.seg_size,
                                  sizeof(uint64_t) + sizeof(uct_rc_tm_tx_op_t),
                                  UCS_SYS_CACHE_LINE_SIZE, &config->tx_mpool,
                                  256, uct_rc_tm_tx_elem_init, "rc_tm_tx");
    if (status != UCS_OK) {
        goto err_rx_mp;
    }

    status = uct_rc_tm_iface_spill_alloc(self);
    if (status != UCS_OK) {
        goto err_tx_mp;
    }

    status = uct_rc_tm_iface_create_queues(self, config->tx_queue_len);
    if (status != UCS_OK) {
        goto err_spill;
    }

    status = uct_rc_tm_tag_init(self, params, config);
    if (status != UCS_OK) {
        goto err_queues;
    }
    uct_rc_tm_iface_cap_init(self);

    uct_rc_tm_iface_post_rx(self);
    if (self->rx.posted == 0) {
        ucs_error("rc_tm: could not post any receive buffer");
        status = UCS_ERR_NO_MEMORY;
        goto err_tag;
    }

    uct_rc_tm_iface_stats_open(self);
    ucs_debug("rc_tm: iface %p on %s through verbs (%s)", self, md->dev->name,
              tm_dev_driver(md->dev));
    return UCS_OK;

err_tag:
    uct_rc_tm_tag_cleanup(self);
err_queues:
    uct_rc_tm_iface_destroy_queues(self);
err_spill:
    uct_rc_tm_iface_spill_free(self);
err_tx_mp:
    ucs_mpool_cleanup(&self->tx.mp, 1);
err_rx_mp:
    ucs_mpool_cleanup(&self->rx.mp, 1);
err:
    kh_destroy_inplace(uct_rc_tm_qpn, &self->eps);
    return status;
}

static UCS_CLASS_CLEANUP_FUNC(uct_rc_tm_iface_t)
{
    unsigned user_eps = 0;
    uct_rc_tm_ep_t *ep;

    uct_base_iface_progress_disable(&self->super.super,
                                    UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);

    kh_foreach_value(&self->eps, ep, {
        if (ep->passive) {
            uct_rc_tm_iface_destroy_passive_ep(ep);
        } else {
            ++user_eps;
        }
    });
    if (user_eps != 0) {
        ucs_warn("rc_tm: iface %p closed with %u endpoints still open", self,
                 user_eps);
    }
    uct_rc_tm_iface_destroy_closing(self);

    if (self->config.report) {
        uct_rc_tm_report_print(self);
    }
    uct_rc_tm_iface_stats_close(self);
    uct_rc_tm_tag_cleanup(self);
    /* Destroying the SRQ flushes its buffers; they go back with the pool */
    uct_rc_tm_iface_destroy_queues(self);
    uct_rc_tm_iface_spill_free(self);
    ucs_mpool_cleanup(&self->tx.mp, 0);
    ucs_mpool_cleanup(&self->rx.mp, 0);
    kh_destroy_inplace(uct_rc_tm_qpn, &self->eps);
}

UCS_CLASS_DEFINE(uct_rc_tm_iface_t, uct_base_iface_t);
static UCS_CLASS_DEFINE_NEW_FUNC(uct_rc_tm_iface_t, uct_iface_t, uct_md_h,
                                 uct_worker_h, const uct_iface_params_t*,
                                 const uct_iface_config_t*);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_rc_tm_iface_t, uct_iface_t);

static ucs_status_t
uct_rc_tm_query_tl_devices(uct_md_h tl_md,
                           uct_tl_device_resource_t **tl_devices_p,
                           unsigned *num_tl_devices_p)
{
    uct_rc_tm_md_t *md = ucs_derived_of(tl_md, uct_rc_tm_md_t);
    char name[UCT_RC_TM_NET_NAME_MAX];

    uct_rc_tm_dev_net_name(md->dev->name, md->dev->port_num, name,
                           sizeof(name));
    return uct_single_device_resource(tl_md, name, UCT_DEVICE_TYPE_NET,
                                      UCS_SYS_DEVICE_ID_UNKNOWN, tl_devices_p,
                                      num_tl_devices_p);
}

UCT_TL_DEFINE_ENTRY(&uct_rc_tm_component, rc_tm, uct_rc_tm_query_tl_devices,
                    uct_rc_tm_iface_t, UCT_RC_TM_CONFIG_PREFIX,
                    uct_rc_tm_iface_config_table, uct_rc_tm_iface_config_t);
