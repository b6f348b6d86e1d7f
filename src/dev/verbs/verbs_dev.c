/*
 * Verbs backend: device discovery, open/close, capabilities, addresses and
 * memory registration (the port: verbs_port.c).
 *
 * A device is listed when it reports RC tag matching (IBV_TM_CAP_RC, a
 * non-empty matching list) and has an active port, on which, if it is
 * Ethernet, a TM-SRQ can really be created.  The software NIC is probed in
 * the same way (its port may be Ethernet).  Where rdma-core finds no device
 * at all, or the kernel has no RDMA support, nothing is listed and the
 * reason goes to the debug log: the software NIC then remains.
 */
#include "verbs_dev.h"

#include <softnic/softnic.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Names that do not fit are refused when listing, so this never truncates */
static void tm_verbs_name_copy(char *dst, const char *src)
{
    snprintf(dst, TM_DEV_NAME_MAX, "%s", src);
}

/*
 * Device discovery
 */

/*
 * An Ethernet (RoCE) port: mlx5 cannot create a TM-SRQ there (its internal
 * command QP is connected without a GRH, which the kernel refuses on
 * Ethernet with EINVAL), though the device reports tag matching.  Only
 * trying tells, and a device that cannot would be preferred to the
 * software NIC and then fail to open.
 */
static int tm_verbs_probe_eth(const tm_verbs_lib_t *lib,
                              struct ibv_context *ctx, const char *name,
                              uint8_t port)
{
    int ret = tm_verbs_probe_tm_srq(lib, ctx, name);

    if (ret != 0) {
        tm_dev_debug("verbs: %s: port %u is Ethernet (RoCE) and no TM-SRQ "
                     "can be created on it: %s (errno %d), skipped", name,
                     port, strerror(ret), ret);
    }
    return ret;
}

/* 0 when a NIC can serve as a TM device, else why not (debug log) */
static int tm_verbs_probe(const tm_verbs_lib_t *lib, struct ibv_device *device)
{
    const char *name = lib->get_device_name(device);
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
    if (!lib->probe) {
        return 0;
    }

    errno = 0;
    ctx   = lib->open_device(device);
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

    if (tm_verbs_is_eth(port_attr.link_layer)) {
        ret = tm_verbs_probe_eth(lib, ctx, name, port);
        if (ret != 0) {
            goto out;
        }
    }

    tm_dev_debug("verbs: %s: tag matching on RC, %u tags, %u list ops, "
                 "rendezvous header %u bytes, port %u active (%s)", name,
                 attr.tm_caps.max_num_tags, attr.tm_caps.max_ops,
                 attr.tm_caps.max_rndv_hdr_size, port,
                 tm_verbs_is_eth(port_attr.link_layer) ? "RoCE" : "IB");
out:
    lib->close_device(ctx);
    return ret;
}

/* The software NIC's device, where libibverbs lists it: the test-only
 * interposer (test/interpose) adds it to libibverbs' list, backed by its
 * own copy of the NIC.  Listed there, it would be taken for a NIC (no
 * extension, another copy of the device) and hide the software NIC's own
 * entry; its names are the software NIC's, which no NIC has (a NIC's
 * dev_name is uverbsN) */
static int tm_verbs_is_soft_alias(const struct ibv_device *device)
{
    return !strcmp(device->name, SOFTNIC_DEVICE_NAME) &&
           !strcmp(device->dev_name, SOFTNIC_DEVICE_DEV_NAME);
}

static void tm_verbs_list_lib(const tm_verbs_lib_t *lib, tm_dev_info_t *info,
                              unsigned max, unsigned *count)
{
    struct ibv_device **list;
    int num = 0;
    int err;
    int i;

    errno = 0;
    list  = lib->get_device_list(&num);
    if (list == NULL) {
        err = tm_verbs_errno(ENODEV);
        tm_dev_debug("verbs: %s lists no devices: %s (errno %d)", lib->name,
                     strerror(err), err);
        return;
    }

    if (num == 0) {
        tm_dev_debug("verbs: %s found no device", lib->name);
    }

    for (i = 0; i < num; ++i) {
        if (*count >= max) {
            tm_dev_debug("verbs: device table full (%u entries): %s and "
                         "later devices not listed", max,
                         lib->get_device_name(list[i]));
            break;
        }

        if ((lib != &tm_verbs_softnic) && tm_verbs_is_soft_alias(list[i])) {
            tm_dev_debug("verbs: %s: the software NIC, as a libibverbs "
                         "interposer lists it: listed once, as itself",
                         lib->get_device_name(list[i]));
            continue;
        }
        if (tm_verbs_probe(lib, list[i]) != 0) {
            continue;
        }

        memset(&info[*count], 0, sizeof(info[*count]));
        tm_verbs_name_copy(info[*count].name, lib->get_device_name(list[i]));
        info[*count].lib  = lib;
        info[*count].soft = (lib == &tm_verbs_softnic);
        ++(*count);
    }

    lib->free_device_list(list);
}

unsigned tm_dev_list(tm_dev_info_t *info, unsigned max)
{
    unsigned count = 0;

    tm_verbs_list_lib(&tm_verbs_libibverbs, info, max, &count);
    tm_verbs_list_lib(&tm_verbs_softnic, info, max, &count);
    return count;
}

int tm_dev_fork_init(void)
{
    int ret = 0;

    /* As UCX 1.22's ib md: a kernel that copies pinned pages on fork needs
     * nothing (and rdma-core then does nothing) */
    if (ibv_is_fork_initialized() != IBV_FORK_UNNEEDED) {
        ret = ibv_fork_init();
    }
    if (ret != 0) {
        tm_dev_debug("verbs: ibv_fork_init() failed: %s", strerror(ret));
        return ret;
    }

    ret = softnic_fork_init();
    if (ret != 0) {
        tm_dev_debug("verbs: the software NIC refused fork init: %s "
                     "(a device was brought up before)", strerror(ret));
    }
    return ret;
}

int tm_dev_find(const char *name, tm_dev_info_t *info)
{
    tm_dev_info_t list[16];
    unsigned count, i;

    count = tm_dev_list(list, sizeof(list) / sizeof(list[0]));
    for (i = 0; i < count; ++i) {
        if (!strcmp(list[i].name, name)) {
            *info = list[i];
            return 0;
        }
    }
    return ENODEV;
}


/*
 * Open / close
 */
static int tm_verbs_open_context(const tm_verbs_lib_t *lib, const char *name,
                                 struct ibv_context **ctx_p)
{
    struct ibv_device **list;
    struct ibv_context *ctx = NULL;
    int ret                 = ENODEV;
    int num                 = 0;
    int i;

    errno = 0;
    list  = lib->get_device_list(&num);
    if (list == NULL) {
        ret = tm_verbs_errno(ENODEV);
        tm_dev_debug("verbs: cannot open %s: ibv_get_device_list() failed: "
                     "%s", name, strerror(ret));
        return ret;
    }

    for (i = 0; i < num; ++i) {
        if (strcmp(lib->get_device_name(list[i]), name) != 0) {
            continue;
        }

        errno = 0;
        ctx   = lib->open_device(list[i]);
        ret   = (ctx != NULL) ? 0 : tm_verbs_errno(ENODEV);
        break;
    }

    /* An opened context keeps its device; the list may go */
    lib->free_device_list(list);
    if (ret != 0) {
        tm_dev_debug("verbs: cannot open %s: %s", name, strerror(ret));
        return ret;
    }

    /* Its asynchronous events are read without waiting (a NIC's come
     * through the fd; the software NIC has none) */
    if ((ctx->async_fd >= 0) &&
        (fcntl(ctx->async_fd, F_SETFL,
               fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK) != 0)) {
        ret = errno;
        tm_dev_debug("verbs: %s: cannot make its event fd non-blocking: %s",
                     name, strerror(ret));
        lib->close_device(ctx);
        return ret;
    }

    *ctx_p = ctx;
    return 0;
}

/*
 * The software NIC's settings (its extension): what a NIC fixes (packet
 * size, largest SEND, rendezvous header, an engine of its own) is asked of
 * it, then read back into the limits.  It also offers connections to a
 * remote SRQ, unless they are withheld (soft_no_connect_to_srq): then it
 * connects QP to QP only, as a NIC.
 */
static int tm_verbs_softnic_setup(tm_verbs_dev_t *dev,
                                  const tm_dev_attr_t *attr)
{
    struct softnic_dv_attr dv = {
        .packet_size       = attr->eager_packet_size,
        .max_send_size     = attr->max_msg_size,
        .max_rndv_hdr_size = attr->max_rndv_hdr_size,
        .progress          = (attr->soft_progress ==
                              TM_DEV_SOFT_PROGRESS_THREAD) ?
                             SOFTNIC_PROGRESS_THREAD : SOFTNIC_PROGRESS_INLINE,
        .tm_max_sge        = attr->soft_tm_max_sge,
        .hold_match        = attr->soft_hold_match ?
                             SOFTNIC_HOLD_MATCH_ON : SOFTNIC_HOLD_MATCH_OFF,
        .rndv_final        = (attr->soft_rndv_final ==
                              TM_DEV_SOFT_RNDV_FINAL_EXPECTED) ?
                             SOFTNIC_RNDV_FINAL_EXPECTED :
                             SOFTNIC_RNDV_FINAL_CANCELED,
        /* for the connections to a remote SRQ, which skip RTS */
        .timeout           = SOFTNIC_DV_SET | dev->timeout,
        .retry_cnt         = SOFTNIC_DV_SET | dev->retry_cnt,
        .engine_aside      = attr->soft_engine_aside ?
                             SOFTNIC_ENGINE_ASIDE_AUTO :
                             SOFTNIC_ENGINE_ASIDE_NEVER
    };
    int ret;

    ret = softnic_dv_set_attr(dev->ctx, &dv);
    if (ret != 0) {
        tm_dev_debug("verbs: %s: settings refused: %s", dev->super.name,
                     strerror(ret));
        return ret;
    }
    ret = softnic_dv_query(dev->ctx, &dv);
    if (ret != 0) {
        return ret;
    }
    if (!attr->soft_no_connect_to_srq) {
        dev->flags |= TM_DEV_CAP_CONNECT_TO_SRQ;
    }
    /* No PCI between the software and its engine: no doorbell write, no
     * descriptor fetch; a work request costs what posting it to the ring
     * and completing it take, an RDMA transfer a copy by the CPU (measured,
     * docs/performance.md) */
    dev->soft_perf.latency     = attr->soft_latency;
    dev->soft_perf.bandwidth   = attr->soft_bandwidth;
    dev->soft_perf.rdma_bandwidth = 2 * attr->soft_bandwidth;
    dev->soft_perf.post        = TM_VERBS_SOFT_POST_TIME;
    dev->soft_perf.rdma_copy   = TM_VERBS_SOFT_RDMA_TIME;
    dev->soft_perf.per_process = 1;
    snprintf(dev->driver, sizeof(dev->driver), "software NIC");
    return 0;
}

static void tm_verbs_softnic_limits(tm_verbs_dev_t *dev)
{
    struct softnic_dv_attr dv;

    if (softnic_dv_query(dev->ctx, &dv) == 0) {
        dev->lim.eager_packet_size = dv.packet_size;
        dev->lim.max_msg_size      = dv.max_send_size;
    }
}

/* The kernel driver of a NIC ("mlx5_core" -> "mlx5"), for the log */
static void tm_verbs_driver_name(tm_verbs_dev_t *dev)
{
    char path[512], link[256];
    const char *base;
    ssize_t n;
    size_t len;

    snprintf(path, sizeof(path), "%s/device/driver",
             dev->ctx->device->ibdev_path);
    n = readlink(path, link, sizeof(link) - 1);
    if (n <= 0) {
        snprintf(dev->driver, sizeof(dev->driver), "%s", dev->lib->name);
        return;
    }
    link[n] = '\0';
    base    = strrchr(link, '/');
    base    = (base != NULL) ? base + 1 : link;
    len     = strlen(base);
    if ((len > 5) && !strcmp(base + len - 5, "_core")) {
        len -= 5;
    }
    snprintf(dev->driver, sizeof(dev->driver), "%.*s", (int)len, base);
}

/* What the queues pin on a mlx5, by rdma-core's sizing (docs/design.md,
 * "Memory"): each connection's send queue, and the TM-SRQ's command QP */
static void tm_verbs_log_memory(const tm_verbs_dev_t *dev)
{
    tm_verbs_mlx5_sq_t conn, cmd;

    if ((tm_verbs_mlx5_sq_size(dev->lim.max_send_wr, dev->lim.max_send_sge,
                               TM_VERBS_MIN_INLINE, UINT32_MAX, &conn) != 0) ||
        (tm_verbs_mlx5_sq_size(dev->lim.max_ops, 1, 0, UINT32_MAX,
                               &cmd) != 0)) {
        return;
    }
    tm_dev_debug("verbs: %s: a mlx5 pins %" PRIu64 " bytes of send queue per "
                 "connection (%u WRs of %u bytes), %" PRIu64 " for the "
                 "command QP (%u list ops)", dev->super.name, conn.bytes,
                 dev->lim.max_send_wr, conn.wqe_size, cmd.bytes,
                 dev->lim.max_ops);
}

int tm_dev_open(const tm_dev_info_t *info, const tm_dev_attr_t *attr,
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

    dev->lib       = info->lib;
    dev->pkey_want = attr->pkey;
    dev->sl        = (attr->sl & TM_DEV_ATTR_SET) ? (uint8_t)attr->sl : 0;
    dev->timeout   = (attr->timeout & TM_DEV_ATTR_SET) ?
                     (uint8_t)attr->timeout : TM_VERBS_TIMEOUT;
    dev->retry_cnt = (attr->retry_cnt & TM_DEV_ATTR_SET) ?
                     (uint8_t)attr->retry_cnt : TM_VERBS_RETRY_CNT;
    tm_verbs_name_copy(dev->super.name, info->name);
    /* InfiniBand has 16 service levels; the QP's timeout and retry count
     * are 5 and 3 bits */
    if ((dev->sl > 15) || (dev->timeout > 31) || (dev->retry_cnt > 7)) {
        free(dev);
        return EINVAL;
    }

    ret = tm_verbs_open_context(dev->lib, info->name, &dev->ctx);
    if (ret != 0) {
        goto err_free;
    }

    if (softnic_dv_is_softnic(dev->ctx)) {
        ret = tm_verbs_softnic_setup(dev, attr);
    } else {
        tm_verbs_driver_name(dev);
    }
    if (ret != 0) {
        goto err_close;
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
    dev->pd = dev->lib->alloc_pd(dev->ctx);
    if (dev->pd == NULL) {
        ret = tm_verbs_errno(ENOMEM);
        tm_dev_debug("verbs: %s: ibv_alloc_pd() failed: %s", info->name,
                     strerror(ret));
        goto err_close;
    }

    dev->super.port_num = dev->port_num;
    tm_verbs_limits_init(&dev->lim, &dev->dev_attr, &dev->port_attr, attr);
    if (softnic_dv_is_softnic(dev->ctx)) {
        tm_verbs_softnic_limits(dev);
    }
    if (dev->lim.srq_depth < TM_DEV_MIN_SRQ_DEPTH) {
        ret = EINVAL;
        tm_dev_debug("verbs: %s: SRQ depth %u is below tag matching's %u",
                     info->name, dev->lim.srq_depth, TM_DEV_MIN_SRQ_DEPTH);
        goto err_dealloc_pd;
    }
    ret = tm_verbs_probe_queues(dev);
    if (ret != 0) {
        goto err_dealloc_pd;
    }
    tm_dev_debug("verbs: opened %s (%s) port %u (%s, gid index %u): %u tags, "
                 "%u list ops, SRQ depth %u, packet %u, inline %u", info->name,
                 dev->driver, dev->port_num,
                 tm_verbs_is_eth(dev->port_attr.link_layer) ? "RoCE" : "IB",
                 dev->gid_index, dev->lim.max_num_tags, dev->lim.max_ops,
                 dev->lim.srq_depth, dev->lim.eager_packet_size,
                 dev->lim.max_inline);
    tm_verbs_log_memory(dev);
    *dev_p = &dev->super;
    return 0;

err_dealloc_pd:
    dev->lib->dealloc_pd(dev->pd);
err_close:
    dev->lib->close_device(dev->ctx);
err_free:
    free(dev);
    return ret;
}

void tm_dev_close(tm_dev_t *tdev)
{
    tm_verbs_dev_t *dev = tm_verbs_dev(tdev);
    int ret;

    ret = dev->lib->dealloc_pd(dev->pd);
    if (ret != 0) {
        /* Objects still hold the PD: a caller bug, keep going */
        tm_dev_warn("verbs: %s: ibv_dealloc_pd() failed: %s", tdev->name,
                    strerror(ret));
    }

    ret = dev->lib->close_device(dev->ctx);
    if (ret != 0) {
        tm_dev_warn("verbs: %s: ibv_close_device() failed: %s", tdev->name,
                    strerror(errno));
    }
    free(dev);
}

void tm_dev_query(tm_dev_t *tdev, tm_dev_caps_t *caps)
{
    tm_verbs_dev_t *dev = tm_verbs_dev(tdev);

    tm_verbs_caps_fill(caps, &dev->dev_attr, &dev->lim);
    caps->flags = dev->flags;
    if (dev->flags & TM_DEV_CAP_CONNECT_TO_SRQ) {
        caps->srq_addr_len = sizeof(uint32_t);
    }
}

void tm_dev_perf(tm_dev_t *tdev, tm_dev_perf_t *perf)
{
    tm_verbs_dev_t *dev = tm_verbs_dev(tdev);

    if (softnic_dv_is_softnic(dev->ctx)) {
        *perf = dev->soft_perf;
    } else {
        tm_verbs_port_perf(&dev->port_attr, perf);
    }
}

const char *tm_dev_driver(tm_dev_t *dev)
{
    return tm_verbs_dev(dev)->driver;
}

struct ibv_context *tm_dev_ibv_context(tm_dev_t *dev)
{
    return tm_verbs_dev(dev)->ctx;
}

void tm_dev_addr(tm_dev_t *tdev, void *addr)
{
    tm_verbs_dev_t *dev = tm_verbs_dev(tdev);

    tm_verbs_dev_addr_pack(addr, dev->port_attr.link_layer,
                           dev->port_attr.lid, &dev->gid, dev->pkey);
}

int tm_dev_is_reachable(tm_dev_t *tdev, const void *dev_addr)
{
    tm_verbs_dev_t *dev = tm_verbs_dev(tdev);
    tm_verbs_peer_t peer;

    if (tm_verbs_dev_addr_unpack(dev_addr, &peer) != 0) {
        return 0;
    }
    return tm_verbs_pkey_reachable(dev->pkey, peer.pkey) &&
           tm_verbs_peer_reachable(dev->port_attr.link_layer, &dev->gid,
                                   &peer);
}


int tm_dev_addr_is_local(tm_dev_t *tdev, const void *dev_addr)
{
    tm_verbs_dev_t *dev    = tm_verbs_dev(tdev);
    tm_verbs_peer_t local = {
        .link_layer = dev->port_attr.link_layer,
        .lid        = dev->port_attr.lid,
        .gid        = dev->gid
    };
    tm_verbs_peer_t peer;

    return (tm_verbs_dev_addr_unpack(dev_addr, &peer) == 0) &&
           tm_verbs_peer_same_port(&local, &peer);
}

/*
 * Memory registration
 */
static TM_NOINLINE int tm_verbs_reg_mr_failed(tm_dev_t *tdev, void *addr,
                                              size_t length)
{
    int ret = tm_verbs_errno(ENOMEM);

    tm_dev_debug("verbs: %s: ibv_reg_mr(%p, %zu) failed: %s", tdev->name,
                 addr, length, strerror(ret));
    return ret;
}

/* On every offloaded receive (UCP registers its buffer): short */
int tm_dev_reg_mr(tm_dev_t *tdev, void *addr, size_t length, int access,
                  tm_dev_mr_t **mr_p)
{
    tm_verbs_dev_t *dev = tm_verbs_dev(tdev);
    struct ibv_mr *mr;

    if (access == 0) {
        /* The NIC reads rendezvous sources and writes tagged buffers */
        access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                 IBV_ACCESS_REMOTE_WRITE;
    } else if (access & IBV_ACCESS_REMOTE_WRITE) {
        /* Verbs refuses remote write without local write */
        access |= IBV_ACCESS_LOCAL_WRITE;
    }

    mr = dev->lib->reg_mr(dev->pd, addr, length, access);
    if (tm_unlikely(mr == NULL)) {
        return tm_verbs_reg_mr_failed(tdev, addr, length);
    }

    *mr_p = mr;
    return 0;
}

/* Still registered when it fails: the caller keeps ownership and may retry */
int tm_dev_dereg_mr(tm_dev_t *dev, tm_dev_mr_t *mr)
{
    return tm_verbs_dev(dev)->lib->dereg_mr(mr);
}
