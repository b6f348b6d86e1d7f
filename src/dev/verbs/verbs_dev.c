/*
 * rdma-core verbs backend: device discovery, open/close, capabilities,
 * addresses and memory registration.
 *
 * A device is listed when it reports RC tag matching (IBV_TM_CAP_RC, a
 * non-empty matching list) and has an active port.  Where rdma-core finds
 * no device at all, or the kernel has no RDMA support, nothing is listed
 * and the reason goes to the debug log: the software device then remains.
 */
#include "verbs_dev.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(tm_verbs_dev_addr_t) <= TM_DEV_ADDR_MAX,
               "verbs device address too large");
_Static_assert(sizeof(tm_verbs_conn_addr_t) <= TM_DEV_ADDR_MAX,
               "verbs connection address too large");

/* A NIC's RC connections are set up by both sides (with an auxiliary
 * transport for the address exchange): no connection to a bare SRQ */
static void tm_verbs_srq_addr(tm_dev_srq_t *srq, void *addr)
{
}

static int tm_verbs_connect_to_srq(tm_dev_conn_t *conn, const void *dev_addr,
                                   const void *srq_addr)
{
    return EOPNOTSUPP;
}

static tm_dev_conn_t *tm_verbs_srq_conn(tm_dev_srq_t *srq, uint32_t qp_num)
{
    return NULL;
}

const tm_dev_ops_t tm_dev_verbs_ops = {
    .name          = "verbs",
    .list          = tm_verbs_list,
    .open          = tm_verbs_open,
    .close         = tm_verbs_close,
    .query         = tm_verbs_query,
    .dev_addr      = tm_verbs_dev_addr,
    .is_reachable  = tm_verbs_is_reachable,
    .reg_mr        = tm_verbs_reg_mr,
    .dereg_mr      = tm_verbs_dereg_mr,
    .create_cq     = tm_verbs_create_cq,
    .destroy_cq    = tm_verbs_destroy_cq,
    .poll_cq       = tm_verbs_poll_cq,
    .create_srq    = tm_verbs_create_srq,
    .destroy_srq   = tm_verbs_destroy_srq,
    .post_srq_ops  = tm_verbs_post_srq_ops,
    .post_srq_recv = tm_verbs_post_srq_recv,
    .create_conn   = tm_verbs_create_conn,
    .destroy_conn  = tm_verbs_destroy_conn,
    .conn_addr     = tm_verbs_conn_addr,
    .connect       = tm_verbs_connect,
    .conn_qp_num   = tm_verbs_conn_qp_num,
    .srq_addr      = tm_verbs_srq_addr,
    .connect_to_srq = tm_verbs_connect_to_srq,
    .srq_conn      = tm_verbs_srq_conn,
    .post_send     = tm_verbs_post_send,
};


/* errno of a failed verbs call that returns NULL, never 0 */
static int tm_verbs_errno(int fallback)
{
    return (errno != 0) ? errno : fallback;
}

/* Names that do not fit are refused when listing, so this never truncates */
static void tm_verbs_name_copy(char *dst, const char *src)
{
    snprintf(dst, TM_DEV_NAME_MAX, "%s", src);
}

const char *tm_verbs_tm_unusable(const struct ibv_device_attr_ex *attr)
{
    if (!(attr->tm_caps.flags & IBV_TM_CAP_RC)) {
        return "no tag matching on RC (tm_caps.flags lacks IBV_TM_CAP_RC)";
    }
    if (attr->tm_caps.max_num_tags == 0) {
        return "empty tag matching list (tm_caps.max_num_tags is 0)";
    }
    if (attr->tm_caps.max_ops == 0) {
        return "no tag list operations (tm_caps.max_ops is 0)";
    }
    return NULL;
}

uint32_t tm_verbs_mtu_bytes(enum ibv_mtu mtu)
{
    switch (mtu) {
    case IBV_MTU_256:  return 256;
    case IBV_MTU_512:  return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
    default:           return 0;
    }
}

static uint32_t tm_verbs_clamp(uint32_t req, uint32_t def, uint32_t max)
{
    uint32_t value = (req != 0) ? req : def;

    return (value < max) ? value : max;
}

void tm_verbs_limits_init(tm_verbs_limits_t *lim,
                          const struct ibv_device_attr_ex *dev_attr,
                          const struct ibv_port_attr *port_attr,
                          const tm_dev_attr_t *req)
{
    const struct ibv_device_attr *orig = &dev_attr->orig_attr;
    const struct ibv_tm_caps *tm       = &dev_attr->tm_caps;
    /* Some drivers leave max_msg_sz 0; RC allows 2^31 */
    uint32_t port_msg = (port_attr->max_msg_sz != 0) ?
                        port_attr->max_msg_sz : (1u << 31);
    int sge           = (orig->max_sge > 0) ? orig->max_sge : 1;

    memset(lim, 0, sizeof(*lim));
    lim->max_num_tags      = tm_verbs_clamp(req->max_num_tags,
                                            TM_VERBS_DEF_NUM_TAGS,
                                            tm->max_num_tags);
    lim->max_ops           = tm_verbs_clamp(req->max_ops, TM_VERBS_DEF_MAX_OPS,
                                            tm->max_ops);
    lim->max_rndv_hdr_size = tm_verbs_clamp(req->max_rndv_hdr_size,
                                            tm->max_rndv_hdr_size,
                                            tm->max_rndv_hdr_size);
    lim->srq_depth         = tm_verbs_clamp(req->srq_depth,
                                            TM_VERBS_DEF_SRQ_DEPTH,
                                            (uint32_t)orig->max_srq_wr);
    lim->max_send_wr       = tm_verbs_clamp(req->max_send_wr,
                                            TM_VERBS_DEF_SEND_WR,
                                            (uint32_t)orig->max_qp_wr);
    lim->max_send_sge      = tm_verbs_clamp(0, TM_VERBS_MAX_SEND_SGE,
                                            (uint32_t)sge);
    lim->max_msg_size      = tm_verbs_clamp(req->max_msg_size, port_msg,
                                            port_msg);
    lim->max_rdma_size     = port_msg;
    /* The NIC's packet is the path MTU: a longer matched eager message
     * completes as MATCH, then DATA_VALID.  The request does not apply. */
    lim->eager_packet_size = tm_verbs_mtu_bytes(port_attr->active_mtu);
    lim->max_rd_atomic     = tm_verbs_clamp(0, TM_VERBS_MAX_RD_ATOMIC,
                                            (uint32_t)orig->max_qp_init_rd_atom);
    lim->max_dest_rd_atomic = tm_verbs_clamp(0, TM_VERBS_MAX_RD_ATOMIC,
                                             (uint32_t)orig->max_qp_rd_atom);
}

void tm_verbs_caps_fill(tm_dev_caps_t *caps,
                        const struct ibv_device_attr_ex *dev_attr,
                        const tm_verbs_limits_t *lim)
{
    memset(caps, 0, sizeof(*caps));
    /* What was asked of the SRQ, not the NIC's maximum: callers size their
     * queues from these */
    caps->tm                   = dev_attr->tm_caps;
    caps->tm.max_num_tags      = lim->max_num_tags;
    caps->tm.max_ops           = lim->max_ops;
    caps->tm.max_rndv_hdr_size = lim->max_rndv_hdr_size;
    caps->max_srq_wr           = lim->srq_depth;
    caps->max_send_wr          = lim->max_send_wr;
    caps->max_inline           = TM_VERBS_MAX_INLINE;
    caps->max_msg_size         = lim->max_msg_size;
    caps->max_rdma_size        = lim->max_rdma_size;
    caps->eager_packet_size    = lim->eager_packet_size;
    caps->max_send_sge         = lim->max_send_sge;
    caps->dev_addr_len         = sizeof(tm_verbs_dev_addr_t);
    caps->conn_addr_len        = sizeof(tm_verbs_conn_addr_t);
}



/*
 * Addresses.  Multi-byte fields are stored big endian byte by byte, so the
 * packed form is the same on every host and needs no alignment.
 */
static void tm_verbs_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void tm_verbs_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint16_t tm_verbs_get16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t tm_verbs_get32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
           ((uint32_t)p[2] << 8) | p[3];
}

void tm_verbs_dev_addr_pack(void *addr, uint8_t link_layer, uint16_t lid,
                            const union ibv_gid *gid)
{
    tm_verbs_dev_addr_t packed;

    packed.magic      = TM_VERBS_DEV_ADDR_MAGIC;
    packed.link_layer = link_layer;
    tm_verbs_put16(packed.lid, lid);
    memcpy(packed.gid, gid->raw, sizeof(packed.gid));
    memcpy(addr, &packed, sizeof(packed));
}

int tm_verbs_dev_addr_unpack(const void *addr, tm_verbs_peer_t *peer)
{
    tm_verbs_dev_addr_t packed;

    memcpy(&packed, addr, sizeof(packed));
    if (packed.magic != TM_VERBS_DEV_ADDR_MAGIC) {
        return EINVAL;
    }

    memset(peer, 0, sizeof(*peer));
    peer->link_layer = packed.link_layer;
    peer->lid        = tm_verbs_get16(packed.lid);
    memcpy(peer->gid.raw, packed.gid, sizeof(packed.gid));
    return 0;
}

void tm_verbs_conn_addr_pack(void *addr, enum ibv_mtu mtu, uint16_t lid,
                             uint32_t qpn, uint32_t psn,
                             const union ibv_gid *gid)
{
    tm_verbs_conn_addr_t packed;

    packed.magic = TM_VERBS_CONN_ADDR_MAGIC;
    packed.mtu   = (uint8_t)mtu;
    tm_verbs_put16(packed.lid, lid);
    tm_verbs_put32(packed.qpn, qpn & 0xffffff);
    tm_verbs_put32(packed.psn, psn & 0xffffff);
    memcpy(packed.gid, gid->raw, sizeof(packed.gid));
    memcpy(addr, &packed, sizeof(packed));
}

int tm_verbs_conn_addr_unpack(const void *addr, tm_verbs_peer_t *peer)
{
    tm_verbs_conn_addr_t packed;

    memcpy(&packed, addr, sizeof(packed));
    if ((packed.magic != TM_VERBS_CONN_ADDR_MAGIC) ||
        (tm_verbs_mtu_bytes((enum ibv_mtu)packed.mtu) == 0)) {
        return EINVAL;
    }

    memset(peer, 0, sizeof(*peer));
    peer->mtu = (enum ibv_mtu)packed.mtu;
    peer->lid = tm_verbs_get16(packed.lid);
    peer->qpn = tm_verbs_get32(packed.qpn);
    peer->psn = tm_verbs_get32(packed.psn);
    memcpy(peer->gid.raw, packed.gid, sizeof(packed.gid));
    return 0;
}

static int tm_verbs_is_eth(uint8_t link_layer)
{
    return link_layer == IBV_LINK_LAYER_ETHERNET;
}

/* ::ffff:a.b.c.d, the form RoCE v2 gives an IPv4 address */
static int tm_verbs_gid_is_ipv4(const union ibv_gid *gid)
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                       0xff, 0xff};

    return !memcmp(gid->raw, prefix, sizeof(prefix));
}

int tm_verbs_peer_reachable(uint8_t link_layer, const union ibv_gid *gid,
                            const tm_verbs_peer_t *peer)
{
    if (tm_verbs_is_eth(link_layer) != tm_verbs_is_eth(peer->link_layer)) {
        return 0;
    }

    if (tm_verbs_is_eth(link_layer)) {
        /* RoCE is routed by IP: the address families must agree */
        return tm_verbs_gid_is_ipv4(gid) == tm_verbs_gid_is_ipv4(&peer->gid);
    }

    /* InfiniBand: the same subnet, so that the LID alone routes */
    return gid->global.subnet_prefix == peer->gid.global.subnet_prefix;
}


/*
 * Device discovery
 */
static int tm_verbs_port_active(struct ibv_context *ctx, uint8_t nports,
                                uint8_t *port_num, struct ibv_port_attr *attr)
{
    uint8_t port;

    for (port = 1; port <= nports; ++port) {
        if ((ibv_query_port(ctx, port, attr) == 0) &&
            (attr->state == IBV_PORT_ACTIVE)) {
            *port_num = port;
            return 0;
        }
    }
    return ENETDOWN;
}

/* 0 when the device can serve as a TM device, else why not (debug log) */
static int tm_verbs_probe(struct ibv_device *device)
{
    const char *name = ibv_get_device_name(device);
    struct ibv_device_attr_ex attr;
    struct ibv_port_attr port_attr;
    struct ibv_context *ctx;
    const char *why;
    uint8_t port;
    int ret;

    if (strlen(name) >= TM_DEV_NAME_MAX) {
        tm_dev_debug("verbs: %s: name longer than %d characters, skipped",
                     name, TM_DEV_NAME_MAX - 1);
        return ENAMETOOLONG;
    }

    errno = 0;
    ctx   = ibv_open_device(device);
    if (ctx == NULL) {
        ret = tm_verbs_errno(ENODEV);
        tm_dev_debug("verbs: %s: ibv_open_device() failed: %s", name,
                     strerror(ret));
        return ret;
    }

    memset(&attr, 0, sizeof(attr));
    ret = ibv_query_device_ex(ctx, NULL, &attr);
    if (ret != 0) {
        tm_dev_debug("verbs: %s: ibv_query_device_ex() failed: %s", name,
                     strerror(ret));
        goto out;
    }

    why = tm_verbs_tm_unusable(&attr);
    if (why != NULL) {
        tm_dev_debug("verbs: %s: not a tag-matching device: %s", name, why);
        ret = EOPNOTSUPP;
        goto out;
    }

    ret = tm_verbs_port_active(ctx, attr.orig_attr.phys_port_cnt, &port,
                               &port_attr);
    if (ret != 0) {
        tm_dev_debug("verbs: %s: tag matching capable, but none of its %u "
                     "ports is active", name, attr.orig_attr.phys_port_cnt);
        goto out;
    }

    tm_dev_debug("verbs: %s: tag matching on RC, %u tags, %u list ops, "
                 "rendezvous header %u bytes, port %u active", name,
                 attr.tm_caps.max_num_tags, attr.tm_caps.max_ops,
                 attr.tm_caps.max_rndv_hdr_size, port);
out:
    ibv_close_device(ctx);
    return ret;
}

void tm_verbs_list(tm_dev_info_t *info, unsigned max, unsigned *count)
{
    struct ibv_device **list;
    int num = 0;
    int err;
    int i;

    errno = 0;
    list  = ibv_get_device_list(&num);
    if (list == NULL) {
        err = tm_verbs_errno(ENODEV);
        tm_dev_debug("verbs: no devices: ibv_get_device_list() failed: %s "
                     "(errno %d)", strerror(err), err);
        return;
    }

    if (num == 0) {
        tm_dev_debug("verbs: no devices: rdma-core found no RDMA device");
    }

    for (i = 0; i < num; ++i) {
        if (*count >= max) {
            tm_dev_debug("verbs: device table full (%u entries): %s and "
                         "later devices not listed", max,
                         ibv_get_device_name(list[i]));
            break;
        }

        if (tm_verbs_probe(list[i]) != 0) {
            continue;
        }

        memset(&info[*count], 0, sizeof(info[*count]));
        tm_verbs_name_copy(info[*count].name, ibv_get_device_name(list[i]));
        info[*count].ops = &tm_dev_verbs_ops;
        ++(*count);
    }

    ibv_free_device_list(list);
}


/*
 * Open / close
 */
static int tm_verbs_open_context(const char *name, struct ibv_context **ctx_p)
{
    struct ibv_device **list;
    struct ibv_context *ctx = NULL;
    int ret                 = ENODEV;
    int num                 = 0;
    int i;

    errno = 0;
    list  = ibv_get_device_list(&num);
    if (list == NULL) {
        ret = tm_verbs_errno(ENODEV);
        tm_dev_debug("verbs: cannot open %s: ibv_get_device_list() failed: "
                     "%s", name, strerror(ret));
        return ret;
    }

    for (i = 0; i < num; ++i) {
        if (strcmp(ibv_get_device_name(list[i]), name) != 0) {
            continue;
        }

        errno = 0;
        ctx   = ibv_open_device(list[i]);
        ret   = (ctx != NULL) ? 0 : tm_verbs_errno(ENODEV);
        break;
    }

    /* An opened context keeps its device; the list may go */
    ibv_free_device_list(list);
    if (ret != 0) {
        tm_dev_debug("verbs: cannot open %s: %s", name, strerror(ret));
        return ret;
    }

    *ctx_p = ctx;
    return 0;
}

/*
 * The GID the connection's address carries.  InfiniBand: index 0 (the port
 * GID).  RoCE: prefer RoCE v2 with an IPv4 address, then any RoCE v2, then
 * any valid entry, as UCX does by default.
 */
static int tm_verbs_gid_select(tm_verbs_dev_t *dev)
{
    struct ibv_gid_entry entry;
    int best_rank = -1;
    int rank;
    int i;

    if (!tm_verbs_is_eth(dev->port_attr.link_layer)) {
        dev->gid_index = 0;
        errno          = 0;
        return ibv_query_gid(dev->ctx, dev->port_num, 0, &dev->gid) ?
               tm_verbs_errno(EADDRNOTAVAIL) : 0;
    }

    for (i = 0; (i < dev->port_attr.gid_tbl_len) && (i <= UINT8_MAX); ++i) {
        if (ibv_query_gid_ex(dev->ctx, dev->port_num, i, &entry, 0) != 0) {
            continue;   /* empty entry (ENODATA) */
        }

        rank = (entry.gid_type == IBV_GID_TYPE_ROCE_V2) ?
               (tm_verbs_gid_is_ipv4(&entry.gid) ? 2 : 1) : 0;
        if (rank > best_rank) {
            best_rank      = rank;
            dev->gid_index = (uint8_t)i;
            dev->gid       = entry.gid;
        }
    }

    if (best_rank < 0) {
        tm_dev_debug("verbs: %s port %u: no usable GID", dev->super.name,
                     dev->port_num);
        return EADDRNOTAVAIL;
    }
    return 0;
}

static int tm_verbs_port_init(tm_verbs_dev_t *dev)
{
    int ret;

    ret = tm_verbs_port_active(dev->ctx, dev->dev_attr.orig_attr.phys_port_cnt,
                               &dev->port_num, &dev->port_attr);
    if (ret != 0) {
        tm_dev_debug("verbs: %s: no active port", dev->super.name);
        return ret;
    }

    return tm_verbs_gid_select(dev);
}

int tm_verbs_open(const tm_dev_info_t *info, const tm_dev_attr_t *attr,
                  tm_dev_t **dev_p)
{
    static const tm_dev_attr_t defaults;
    tm_verbs_dev_t *dev;
    const char *why;
    int ret;

    if (attr == NULL) {
        attr = &defaults;
    }

    dev = calloc(1, sizeof(*dev));
    if (dev == NULL) {
        return ENOMEM;
    }

    dev->super.ops = &tm_dev_verbs_ops;
    tm_verbs_name_copy(dev->super.name, info->name);

    ret = tm_verbs_open_context(info->name, &dev->ctx);
    if (ret != 0) {
        goto err_free;
    }

    ret = ibv_query_device_ex(dev->ctx, NULL, &dev->dev_attr);
    if (ret != 0) {
        tm_dev_debug("verbs: %s: ibv_query_device_ex() failed: %s",
                     info->name, strerror(ret));
        goto err_close;
    }

    why = tm_verbs_tm_unusable(&dev->dev_attr);
    if (why != NULL) {
        tm_dev_debug("verbs: %s: %s", info->name, why);
        ret = EOPNOTSUPP;
        goto err_close;
    }

    ret = tm_verbs_port_init(dev);
    if (ret != 0) {
        goto err_close;
    }

    errno   = 0;
    dev->pd = ibv_alloc_pd(dev->ctx);
    if (dev->pd == NULL) {
        ret = tm_verbs_errno(ENOMEM);
        tm_dev_debug("verbs: %s: ibv_alloc_pd() failed: %s", info->name,
                     strerror(ret));
        goto err_close;
    }

    tm_verbs_limits_init(&dev->lim, &dev->dev_attr, &dev->port_attr, attr);
    tm_dev_debug("verbs: opened %s port %u (%s, gid index %u): %u tags, "
                 "%u list ops, SRQ depth %u, MTU %u", info->name,
                 dev->port_num,
                 tm_verbs_is_eth(dev->port_attr.link_layer) ? "RoCE" : "IB",
                 dev->gid_index, dev->lim.max_num_tags, dev->lim.max_ops,
                 dev->lim.srq_depth, dev->lim.eager_packet_size);
    *dev_p = &dev->super;
    return 0;

err_close:
    ibv_close_device(dev->ctx);
err_free:
    free(dev);
    return ret;
}

void tm_verbs_close(tm_dev_t *tdev)
{
    tm_verbs_dev_t *dev = tm_verbs_dev(tdev);
    int ret;

    ret = ibv_dealloc_pd(dev->pd);
    if (ret != 0) {
        /* Objects still hold the PD: a caller bug, keep going */
        tm_dev_warn("verbs: %s: ibv_dealloc_pd() failed: %s", tdev->name,
                    strerror(ret));
    }

    ret = ibv_close_device(dev->ctx);
    if (ret != 0) {
        tm_dev_warn("verbs: %s: ibv_close_device() failed: %s", tdev->name,
                    strerror(errno));
    }
    free(dev);
}

void tm_verbs_query(tm_dev_t *tdev, tm_dev_caps_t *caps)
{
    tm_verbs_dev_t *dev = tm_verbs_dev(tdev);

    tm_verbs_caps_fill(caps, &dev->dev_attr, &dev->lim);
}

void tm_verbs_dev_addr(tm_dev_t *tdev, void *addr)
{
    tm_verbs_dev_t *dev = tm_verbs_dev(tdev);

    tm_verbs_dev_addr_pack(addr, dev->port_attr.link_layer,
                           dev->port_attr.lid, &dev->gid);
}

int tm_verbs_is_reachable(tm_dev_t *tdev, const void *dev_addr)
{
    tm_verbs_dev_t *dev = tm_verbs_dev(tdev);
    tm_verbs_peer_t peer;

    if (tm_verbs_dev_addr_unpack(dev_addr, &peer) != 0) {
        return 0;
    }
    return tm_verbs_peer_reachable(dev->port_attr.link_layer, &dev->gid,
                                   &peer);
}


/*
 * Memory registration
 */
int tm_verbs_reg_mr(tm_dev_t *tdev, void *addr, size_t length, int access,
                    tm_dev_mr_t **mr_p)
{
    tm_verbs_dev_t *dev = tm_verbs_dev(tdev);
    tm_verbs_mr_t *mr;
    int ret;

    if (access == 0) {
        /* The NIC reads rendezvous sources and writes tagged buffers */
        access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                 IBV_ACCESS_REMOTE_WRITE;
    } else if (access & IBV_ACCESS_REMOTE_WRITE) {
        /* Verbs refuses remote write without local write */
        access |= IBV_ACCESS_LOCAL_WRITE;
    }

    mr = calloc(1, sizeof(*mr));
    if (mr == NULL) {
        return ENOMEM;
    }

    errno  = 0;
    mr->mr = ibv_reg_mr(dev->pd, addr, length, access);
    if (mr->mr == NULL) {
        ret = tm_verbs_errno(ENOMEM);
        tm_dev_debug("verbs: %s: ibv_reg_mr(%p, %zu) failed: %s", tdev->name,
                     addr, length, strerror(ret));
        free(mr);
        return ret;
    }

    mr->super.dev    = tdev;
    mr->super.addr   = addr;
    mr->super.length = length;
    mr->super.lkey   = mr->mr->lkey;
    mr->super.rkey   = mr->mr->rkey;
    *mr_p            = &mr->super;
    return 0;
}

int tm_verbs_dereg_mr(tm_dev_mr_t *tmr)
{
    tm_verbs_mr_t *mr = (tm_verbs_mr_t*)tmr;
    int ret;

    ret = ibv_dereg_mr(mr->mr);
    if (ret != 0) {
        /* Still registered: the caller keeps ownership and may retry */
        return ret;
    }

    free(mr);
    return 0;
}
