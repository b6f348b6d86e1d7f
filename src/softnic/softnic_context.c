/*
 * Software NIC: the device, its context and port, GIDs, protection
 * domains, and the settings of the extensions (softnic_dv_query/set_attr).
 * The port's link layer is read from SOFTNIC_LINK_LAYER at open (softnic.h);
 * its other attributes are softnic_port.c's.
 *
 * One device, "soft".  An opened device creates its segment in shared
 * memory (the registration table peers check keys against, its doorbell)
 * with its first PD, so that listing, which opens and queries it, costs
 * little; its engine thread, when asked for, starts then.  The
 * context is a struct verbs_context: the inline verbs of
 * <infiniband/verbs.h> find the NIC's functions in it.
 */
#include "softnic_int.h"
#include "softnic_channel.h"

#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static _Atomic uint32_t sn_next_dev_seq;

/* Context numbers tried when another copy of the NIC took one */
#define SN_DEV_SEQ_TRIES   64

/* What ibv_query_device reports the device to be: a TM-capable ConnectX,
 * the ConnectX-5 (Mellanox's vendor id, PCI device 0x1017 = 4119, whose
 * kernel driver reports hw_ver 0) */
#define SN_VENDOR_ID       0x02c9
#define SN_VENDOR_PART_ID  4119
#define SN_NODE_GUID_TAG   0x0001   /* the low bits of the GUID */

/*
 * The device, shaped as libibverbs' struct verbs_device (rdma-core
 * libibverbs/driver.h: the struct ibv_device first, then the provider's
 * ops), which a provider's own checks read around any device they are
 * handed: mlx5dv_is_supported() is is_mlx5_dev(), which compares
 * verbs_get_device(device)->ops with mlx5's (providers/mlx5/mlx5.c).  The
 * software NIC has no libibverbs provider: its ops are NULL, and such a
 * check answers no without reading past the allocation.
 */
typedef struct sn_verbs_device {
    struct ibv_device  device;
    const void         *ops;
    int                refcount;
    void               *entry[2];
    void               *sysfs;
    uint64_t           core_support;
} sn_verbs_device_t;

static sn_verbs_device_t sn_vdevice = {
    .device = {
        .node_type      = IBV_NODE_CA,
        .transport_type = IBV_TRANSPORT_IB,
        .name           = SOFTNIC_DEVICE_NAME,
        .dev_name       = SOFTNIC_DEVICE_DEV_NAME,
    },
};

#define sn_device (sn_vdevice.device)

static struct ibv_device *sn_device_list[] = { &sn_device, NULL };


/* ---- device list ---- */

struct ibv_device **softnic_get_device_list(int *num_devices)
{
    if (num_devices != NULL) {
        *num_devices = 1;
    }
    return sn_device_list;
}

void softnic_free_device_list(struct ibv_device **list)
{
}

const char *softnic_get_device_name(struct ibv_device *device)
{
    return device->name;
}

bool sn_is_softnic(struct ibv_context *context)
{
    return (context != NULL) && (context->device == &sn_device);
}

int softnic_dv_is_softnic(struct ibv_context *context)
{
    return sn_is_softnic(context);
}


/* ---- GID: the device's address ----
 *
 * One GID for the device, as a NIC's port has (its GID table is the
 * port's, not an open context's): every context of the host's user reads
 * the same one, and a QP or SRQ number, unique on the device, finds its
 * owner through the registry (softnic_wire.h).  The GID says only whose
 * device it is: host and user.
 */

static uint16_t sn_uid_hash(uint32_t uid)
{
    return (uint16_t)(uid ^ (uid >> 16));
}

static void sn_put_be(uint8_t *p, uint64_t v, int bytes)
{
    while (bytes-- > 0) {
        p[bytes] = (uint8_t)v;
        v      >>= 8;
    }
}

static uint64_t sn_get_be(const uint8_t *p, int bytes)
{
    uint64_t v = 0;

    while (bytes-- > 0) {
        v = (v << 8) | *p++;
    }
    return v;
}

void sn_gid_pack(union ibv_gid *gid, const sn_dev_addr_t *addr)
{
    uint8_t *raw = gid->raw;

    raw[0] = 0xfd;                       /* a unique local address */
    raw[1] = SN_GID_MARK;
    sn_put_be(raw + 2, addr->host_id, 4);
    sn_put_be(raw + 6, addr->uid_hash, 2);
    sn_put_be(raw + 8, addr->uid, 4);
    sn_put_be(raw + 12, 0, 2);           /* the device: there is one */
    raw[14] = SN_GID_MARK;
    raw[15] = (uint8_t)SN_VERSION;
}

bool sn_gid_unpack(const union ibv_gid *gid, sn_dev_addr_t *addr)
{
    const uint8_t *raw = gid->raw;

    if ((raw[0] != 0xfd) || (raw[1] != SN_GID_MARK) ||
        (raw[14] != SN_GID_MARK) || (raw[15] != (uint8_t)SN_VERSION)) {
        return false;
    }
    addr->host_id  = (uint32_t)sn_get_be(raw + 2, 4);
    addr->uid_hash = (uint16_t)sn_get_be(raw + 6, 2);
    addr->uid      = (uint32_t)sn_get_be(raw + 8, 4);
    return true;
}

/* Same host (boot id) and same user (process_vm_* needs it) */
bool sn_reachable(const sn_context_t *ctx, const sn_dev_addr_t *peer)
{
    return (peer->host_id == ctx->host_id) &&
           (peer->uid_hash == sn_uid_hash(ctx->proc.uid)) &&
           (peer->uid == ctx->proc.uid);
}

int softnic_query_gid(struct ibv_context *context, uint8_t port_num,
                      int index, union ibv_gid *gid)
{
    if ((port_num != 1) || (index != 0)) {
        errno = EINVAL;
        return -1;
    }
    *gid = sn_ctx(context)->gid;
    return 0;
}

int softnic_query_gid_ex(struct ibv_context *context, uint32_t port_num,
                         uint32_t gid_index, struct ibv_gid_entry *entry,
                         uint32_t flags, size_t entry_size)
{
    if ((port_num != 1) || (entry_size < sizeof(*entry)) || (flags != 0)) {
        return EINVAL;
    }
    if (gid_index != 0) {
        return ENODATA;
    }
    memset(entry, 0, sizeof(*entry));
    entry->gid       = sn_ctx(context)->gid;
    entry->gid_index = gid_index;
    entry->port_num  = port_num;
    entry->gid_type  = (sn_ctx(context)->link_layer ==
                        IBV_LINK_LAYER_ETHERNET) ? IBV_GID_TYPE_ROCE_V2 :
                                                   IBV_GID_TYPE_IB;
    return 0;
}


/* ---- queries ---- */

/* The device's GUID (node and system image): the same for every context of
 * the device on this host and user, as a NIC's is for its processes */
static __be64 sn_ctx_node_guid(const sn_context_t *ctx)
{
    return htobe64((uint64_t)ctx->host_id << 32 |
                   (uint64_t)sn_uid_hash(ctx->proc.uid) << 16 |
                   SN_NODE_GUID_TAG);
}

static int sn_query_device_ex(struct ibv_context *context,
                              const struct ibv_query_device_ex_input *input,
                              struct ibv_device_attr_ex *attr,
                              size_t attr_size)
{
    sn_context_t *ctx = sn_ctx(context);
    struct ibv_device_attr_ex a;

    /* as libibverbs' ibv_cmd_query_device_any, which mlx5's uses */
    if (((input != NULL) && (input->comp_mask != 0)) ||
        (attr_size < sizeof(attr->orig_attr))) {
        return EINVAL;
    }
    memset(&a, 0, sizeof(a));
    snprintf(a.orig_attr.fw_ver, sizeof(a.orig_attr.fw_ver), "softnic %u",
             SN_VERSION);
    a.orig_attr.node_guid           = sn_ctx_node_guid(ctx);
    a.orig_attr.sys_image_guid      = a.orig_attr.node_guid;
    a.orig_attr.vendor_id           = SN_VENDOR_ID;
    a.orig_attr.vendor_part_id      = SN_VENDOR_PART_ID;
    a.orig_attr.hw_ver              = 0;    /* a ConnectX-5's */
    a.orig_attr.max_mr_size         = SN_MAX_MSG_SIZE;
    a.orig_attr.page_size_cap       = (uint64_t)sysconf(_SC_PAGESIZE);
    a.orig_attr.max_qp              = 1 << 24;
    a.orig_attr.max_qp_wr           = SN_MAX_QP_WR;
    a.orig_attr.max_sge             = SN_MAX_SGE;
    a.orig_attr.max_sge_rd          = SN_MAX_SGE;
    a.orig_attr.max_cq              = 1 << 24;
    a.orig_attr.max_cqe             = SN_MAX_CQE;
    a.orig_attr.max_mr              = SN_MR_SLOTS - 1;
    a.orig_attr.max_pd              = 1 << 24;
    a.orig_attr.max_qp_rd_atom      = SN_MAX_RD_ATOM;
    a.orig_attr.max_qp_init_rd_atom = SN_MAX_RD_ATOM;
    a.orig_attr.max_srq             = 1 << 24;
    a.orig_attr.max_srq_wr          = SN_MAX_SRQ_WR;
    a.orig_attr.max_srq_sge         = SN_MAX_SRQ_SGE; /* a basic SRQ's; a
                                                         TM-SRQ takes 1 */
    a.orig_attr.max_pkeys           = ctx->port.npkeys;
    a.orig_attr.phys_port_cnt       = 1;
    a.phys_port_cnt_ex              = 1;
    a.tm_caps.max_rndv_hdr_size     = ctx->attr.max_rndv_hdr_size;
    a.tm_caps.max_num_tags          = SN_MAX_NUM_TAGS;
    a.tm_caps.flags                 = IBV_TM_CAP_RC;
    a.tm_caps.max_ops               = SN_MAX_OPS;
    a.tm_caps.max_sge               = ctx->attr.tm_max_sge;
    memset(attr, 0, attr_size);     /* the caller's whole struct */
    memcpy(attr, &a, (attr_size < sizeof(a)) ? attr_size : sizeof(a));
    return 0;
}

/* libibverbs' exported ibv_query_device: the provider's query_device_ex
 * with the legacy struct's size */
int softnic_query_device(struct ibv_context *context,
                         struct ibv_device_attr *device_attr)
{
    return sn_query_device_ex(context, NULL,
                              (struct ibv_device_attr_ex*)device_attr,
                              sizeof(*device_attr));
}

/* ---- the link layer (SOFTNIC_LINK_LAYER) ---- */

/* Port 1's link layer: InfiniBand unless the environment asks for
 * Ethernet.  A value not understood is reported and ignored, so that a typo
 * does not silently change what the port is. */
static uint8_t sn_env_link_layer(void)
{
    const char *value = getenv("SOFTNIC_LINK_LAYER");

    if ((value == NULL) || (*value == '\0') || !strcasecmp(value, "ib") ||
        !strcasecmp(value, "infiniband")) {
        return IBV_LINK_LAYER_INFINIBAND;
    }
    if (!strcasecmp(value, "eth") || !strcasecmp(value, "ethernet") ||
        !strcasecmp(value, "roce")) {
        return IBV_LINK_LAYER_ETHERNET;
    }
    sn_warn("SOFTNIC_LINK_LAYER=%s not understood (ib or eth): InfiniBand",
            value);
    return IBV_LINK_LAYER_INFINIBAND;
}

/*
 * mlx5 (rdma-core providers/mlx5/verbs.c, create_cmd_qp) gives a TM-SRQ an
 * internal RC QP for list operations and connects it to itself with an
 * address vector that has no GRH; on an Ethernet port the kernel refuses
 * that (rdma_check_ah_attr: a RoCE address needs a GRH) with EINVAL, and
 * ibv_create_srq_ex fails with it.  Other SRQs are the NIC's own business.
 */
static struct ibv_srq *sn_ctx_create_srq_ex(struct ibv_context *context,
                                            struct ibv_srq_init_attr_ex *attr)
{
    if ((sn_ctx(context)->link_layer == IBV_LINK_LAYER_ETHERNET) &&
        (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) &&
        (attr->srq_type == IBV_SRQT_TM)) {
        sn_debug("no TM-SRQ on an Ethernet port: its command QP would have "
                 "no GRH");
        errno = EINVAL;
        return NULL;
    }
    if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) &&
        (attr->srq_type == IBV_SRQT_BASIC)) {
        return sn_rq_create_srq_ex(context, attr);  /* softnic_rq.c */
    }
    return sn_create_srq_ex(context, attr);
}


/* ---- settings (extension) ---- */

/* Where the device's work runs: an engine starts once the device segment
 * (its doorbell) exists, at the first PD; the choice is made before any
 * CQ, so that no object ever sees it change */
static int sn_ctx_set_progress(sn_context_t *ctx, uint32_t progress)
{
    if (!sn_list_empty(&ctx->cqs)) {
        return EBUSY;
    }
    if (ctx->seg == NULL) {
        return 0;
    }
    if (progress == SOFTNIC_PROGRESS_THREAD) {
        return sn_engine_start(ctx);
    }
    sn_engine_stop(ctx);
    return 0;
}

static int sn_attr_check(const struct softnic_dv_attr *attr)
{
    const uint32_t min_hdr = sizeof(struct ibv_tmh) + sizeof(struct ibv_rvh);

    if ((attr->packet_size == 0) || (attr->max_rndv_hdr_size < min_hdr) ||
        (attr->max_send_size < attr->max_rndv_hdr_size) ||
        (attr->max_send_size > (1u << 30)) ||
        (attr->tm_max_sge > SN_TM_MAX_SGE) ||
        (attr->hold_match > SOFTNIC_HOLD_MATCH_ON) ||
        (attr->rndv_final > SOFTNIC_RNDV_FINAL_CANCELED) ||
        (attr->timeout > (SOFTNIC_DV_SET | 31)) ||
        (attr->retry_cnt > (SOFTNIC_DV_SET | 7)) ||
        (attr->engine_aside > SOFTNIC_ENGINE_ASIDE_AUTO) ||
        ((attr->progress != SOFTNIC_PROGRESS_INLINE) &&
         (attr->progress != SOFTNIC_PROGRESS_THREAD))) {
        return EINVAL;
    }
    return 0;
}

/* A ring holds a few of the largest SENDs */
static uint32_t sn_ring_size(uint32_t max_send_size)
{
    uint32_t ring = sn_roundup_pow2(2 * (max_send_size + sizeof(sn_rec_t) +
                                         SN_CACHE_LINE));

    return (ring < (128u << 10)) ? (128u << 10) : ring;
}

int softnic_dv_query(struct ibv_context *context, struct softnic_dv_attr *attr)
{
    if (!sn_is_softnic(context)) {
        return EOPNOTSUPP;
    }
    *attr = sn_ctx(context)->attr;
    return 0;
}

int softnic_dv_set_attr(struct ibv_context *context,
                        const struct softnic_dv_attr *attr)
{
    sn_context_t *ctx = sn_ctx(context);
    struct softnic_dv_attr next;
    int ret;

    if (!sn_is_softnic(context)) {
        return EOPNOTSUPP;
    }
    next = ctx->attr;
    if (attr->packet_size != 0) {
        next.packet_size = attr->packet_size;
    }
    if (attr->max_send_size != 0) {
        next.max_send_size = attr->max_send_size;
    }
    if (attr->max_rndv_hdr_size != 0) {
        next.max_rndv_hdr_size = attr->max_rndv_hdr_size;
    }
    if (attr->progress != SOFTNIC_PROGRESS_KEEP) {
        next.progress = attr->progress;
    }
    if (attr->tm_max_sge != 0) {
        next.tm_max_sge = attr->tm_max_sge;
    }
    if (attr->hold_match != SOFTNIC_HOLD_MATCH_KEEP) {
        next.hold_match = attr->hold_match;
    }
    if (attr->rndv_final != SOFTNIC_RNDV_FINAL_KEEP) {
        next.rndv_final = attr->rndv_final;
    }
    if (attr->timeout != 0) {
        next.timeout = attr->timeout;
    }
    if (attr->retry_cnt != 0) {
        next.retry_cnt = attr->retry_cnt;
    }
    if (attr->engine_aside != SOFTNIC_ENGINE_ASIDE_KEEP) {
        next.engine_aside = attr->engine_aside;
    }
    ret = sn_attr_check(&next);
    if (ret != 0) {
        return ret;
    }
    if (next.progress != ctx->attr.progress) {
        ret = sn_ctx_set_progress(ctx, next.progress);
        if (ret != 0) {
            return ret;
        }
    }
    ctx->attr      = next;
    ctx->ring_size = sn_ring_size(next.max_send_size);
    atomic_store_explicit(&ctx->aside_auto,
                          next.engine_aside == SOFTNIC_ENGINE_ASIDE_AUTO,
                          memory_order_relaxed);
    return 0;
}


/* ---- protection domains ---- */

/* What sn_ctx_bring_up allocated besides the segment */
static void sn_ctx_tables_cleanup(sn_context_t *ctx)
{
    sn_mr_table_cleanup(ctx);
    free(ctx->wake_qps);
    ctx->wake_qps = NULL;
    free(ctx->pull_buf);
    ctx->pull_buf  = NULL;
    ctx->pull_size = 0;
}

/*
 * The device's shared state: its segment (the registration table peers
 * check keys against) and the local side of that table, made when the
 * first PD is, since everything that needs them (MRs, QPs, SRQs) needs a
 * PD.  Until then an open device is only queried (listing probes it so),
 * which then costs no shared memory and no sweep of leftovers.
 */
static int sn_ctx_bring_up(sn_context_t *ctx)
{
    unsigned tries = 0;
    char name[96];
    int ret;

    if (ctx->seg != NULL) {
        return 0;
    }
    sn_reclaim_leftovers();
    ret = sn_mr_table_init(ctx);
    if (ret != 0) {
        return ret;
    }
    ctx->wake_qps = calloc(SN_WAKE_SLOTS, sizeof(*ctx->wake_qps));
    if (ctx->wake_qps == NULL) {
        sn_ctx_tables_cleanup(ctx);
        return ENOMEM;
    }
    /* Another copy of the NIC in this process (the transport's and a
     * preloaded interposer's) numbers its contexts too: a number whose
     * segment exists is taken, and the next is tried.  Nothing has used
     * the number yet (QPs and SRQs come after a PD) */
    for (;;) {
        sn_seg_name(name, sizeof(name), &ctx->proc, ctx->dev_seq, 0, 0);
        ret = sn_shm_create(&ctx->shm, name, sizeof(sn_dev_seg_t));
        if ((ret != EEXIST) || (++tries > SN_DEV_SEQ_TRIES)) {
            break;
        }
        ctx->dev_seq = (uint16_t)atomic_fetch_add(&sn_next_dev_seq, 1);
    }
    if (ret != 0) {
        sn_ctx_tables_cleanup(ctx);
        return ret;
    }
    ctx->seg = ctx->shm.base;
    sn_seg_hdr_init(&ctx->seg->hdr, &ctx->proc, SN_SEG_DEV);
    if (ctx->attr.progress == SOFTNIC_PROGRESS_THREAD) {
        ret = sn_engine_start(ctx);
        if (ret != 0) {
            sn_shm_destroy(&ctx->shm);
            ctx->seg = NULL;
            sn_ctx_tables_cleanup(ctx);
            return ret;
        }
    }
    return 0;
}

/*
 * Fork safety, as libibverbs' ibv_fork_init() / ibv_is_fork_initialized().
 * The NIC reaches registered memory through its owner's pid, so a fork
 * never misdirects its copies, and enabling changes nothing it does; but it
 * is refused (EINVAL) once the process has brought a device up, as
 * rdma-core refuses it once a provider has allocated a queue or
 * registered memory, so that whoever calls it too late learns so here too.
 */
static _Atomic int sn_fork_state = IBV_FORK_DISABLED;
static _Atomic int sn_fork_too_late;

int softnic_fork_init(void)
{
    if (sn_fork_state == IBV_FORK_ENABLED) {
        return 0;
    }
    if (sn_fork_too_late) {
        return EINVAL;
    }
    sn_fork_state = IBV_FORK_ENABLED;
    return 0;
}

enum ibv_fork_status softnic_is_fork_initialized(void)
{
    return (enum ibv_fork_status)sn_fork_state;
}

struct ibv_pd *softnic_alloc_pd(struct ibv_context *context)
{
    struct ibv_pd *pd;
    int ret;

    ret = sn_ctx_bring_up(sn_ctx(context));
    if (ret != 0) {
        errno = ret;
        return NULL;
    }
    /* The device's segment and rings now exist, and every MR and queue
     * comes after a PD: the point rdma-core's provider would have passed */
    sn_fork_too_late = 1;
    pd = calloc(1, sizeof(*pd));
    if (pd == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    pd->context = context;
    return pd;
}

int softnic_dealloc_pd(struct ibv_pd *pd)
{
    free(pd);
    return 0;
}


/* ---- open / close ---- */

static int sn_num_comp_vectors(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_CONF);

    return (cpus < 1) ? 1 : (cpus > 1024) ? 1024 : (int)cpus;
}

static void sn_context_init_ops(sn_context_t *ctx)
{
    struct verbs_context *vctx = &ctx->vctx;

    vctx->context.ops.post_send     = sn_post_send;
    vctx->context.ops.post_recv     = sn_rq_post_recv;
    vctx->context.ops.post_srq_recv = sn_post_srq_recv;
    vctx->context.ops.poll_cq       = sn_poll_cq;
    vctx->context.ops.req_notify_cq = sn_cq_req_notify; /* channel.c */
    vctx->query_port                = sn_port_query;
    vctx->query_device_ex           = sn_query_device_ex;
    vctx->create_cq_ex              = sn_create_cq_ex;
    vctx->create_srq_ex             = sn_ctx_create_srq_ex;
    vctx->create_qp_ex              = sn_create_qp_ex;    /* qp_ex.c */
    vctx->get_srq_num               = sn_get_srq_num;
    vctx->post_srq_ops              = sn_post_srq_ops;
    vctx->sz                        = sizeof(*vctx);
    vctx->context.abi_compat        = __VERBS_ABI_IS_EXTENDED;
}

struct ibv_context *softnic_open_device(struct ibv_device *device)
{
    sn_dev_addr_t addr;
    sn_context_t *ctx;
    int ret;

    if (device != &sn_device) {
        errno = ENODEV;
        return NULL;
    }
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    ret = sn_proc_self(&ctx->proc);
    if (ret != 0) {
        sn_error("cannot read own process identity: %s", strerror(ret));
        goto err_free;
    }

    ret = sn_async_fd_open(ctx);    /* the context's async_fd */
    if (ret != 0) {
        sn_error("cannot make the event file descriptor: %s", strerror(ret));
        goto err_free;
    }
    ctx->vctx.context.device           = device;
    ctx->vctx.context.cmd_fd           = -1;
    /* a completion vector per CPU, as mlx5 has an EQ per CPU: UCX asks
     * the one of the CPU it runs on (uct_ib_iface_create_cq) */
    ctx->vctx.context.num_comp_vectors = sn_num_comp_vectors();
    pthread_mutex_init(&ctx->vctx.context.mutex, NULL);
    sn_context_init_ops(ctx);

    ctx->host_id                = sn_host_id();
    ctx->dev_seq                = (uint16_t)atomic_fetch_add(&sn_next_dev_seq,
                                                             1);
    ctx->attr.packet_size       = SN_DEF_PACKET_SIZE;
    ctx->attr.max_send_size     = SN_DEF_MAX_SEND;
    ctx->attr.max_rndv_hdr_size = SN_DEF_RNDV_HDR_SIZE;
    ctx->attr.progress          = SOFTNIC_PROGRESS_INLINE;
    ctx->attr.tm_max_sge        = 1;
    ctx->attr.hold_match        = SOFTNIC_HOLD_MATCH_OFF;
    ctx->attr.rndv_final        = SOFTNIC_RNDV_FINAL_CANCELED;
    ctx->attr.timeout           = SOFTNIC_DV_SET | 18;
    ctx->attr.retry_cnt         = SOFTNIC_DV_SET | 7;
    ctx->attr.engine_aside      = SOFTNIC_ENGINE_ASIDE_NEVER;
    ctx->ring_size              = sn_ring_size(ctx->attr.max_send_size);
    ctx->mode                   = SOFTNIC_MODE_AUTO;
    ctx->order                  = SOFTNIC_ORDER_OPS_FIRST;
    ctx->rng                    = 1;
    ctx->next_srq_num           = 1;
    ctx->link_layer             = sn_env_link_layer();
    sn_port_init(&ctx->port);
    sn_list_init(&ctx->peers);
    sn_list_init(&ctx->cqs);
    sn_list_init(&ctx->qps);
    sn_list_init(&ctx->events);

    addr.host_id  = ctx->host_id;
    addr.uid_hash = sn_uid_hash(ctx->proc.uid);
    addr.uid      = ctx->proc.uid;
    sn_gid_pack(&ctx->gid, &addr);

    sn_debug("opened device %u of process %u", ctx->dev_seq, ctx->proc.pid);
    return &ctx->vctx.context;

err_free:
    free(ctx);
    errno = ret;
    return NULL;
}

int softnic_close_device(struct ibv_context *context)
{
    sn_context_t *ctx = sn_ctx(context);

    if (!sn_list_empty(&ctx->qps) || !sn_list_empty(&ctx->cqs) ||
        (ctx->srqs != 0)) {
        sn_warn("device closed with objects still open");
    }
    if (ctx->seg != NULL) {     /* brought up by a PD */
        sn_engine_stop(ctx);    /* joined: nothing of it runs on */
        if (sn_ctx_is_ours(ctx)) {
            atomic_store(&ctx->seg->hdr.closed, 1);
        }
        sn_shm_destroy(&ctx->shm);
        sn_ctx_tables_cleanup(ctx);
    }
    sn_async_fd_close(ctx);
    pthread_mutex_destroy(&context->mutex);
    free(ctx);
    return 0;
}
