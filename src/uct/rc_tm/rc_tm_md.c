/*
 * rc_tm memory domain: device discovery, opening a device, what the md
 * reports.  Registration and keys are in rc_tm_mem.c.
 */
#include "rc_tm_md.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/stats/stats.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>
#include <ucs/vfs/base/vfs_obj.h>
#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>

#define UCT_RC_TM_MAX_DEVICES      16
#define UCT_RC_TM_SOFT_TX_INLINE   828  /* all a mlx5 WQE of 1 KiB holds */
#define UCT_RC_TM_SRQ_DEPTH        1024 /* a quarter of UCX's RC RX_QUEUE_LEN */
#define UCT_RC_TM_SOFT_SRQ_DEPTH   64   /* UCX's UCX_MM_FIFO_SIZE */


/* UCX_RC_TM_SOFT_PROGRESS, in the order of TM_DEV_SOFT_PROGRESS_* */
static const char *uct_rc_tm_soft_progress_names[] = {
    [TM_DEV_SOFT_PROGRESS_INLINE] = "inline",
    [TM_DEV_SOFT_PROGRESS_THREAD] = "thread",
    NULL
};

/* UCX_RC_TM_SOFT_RNDV_FINAL, in the order of TM_DEV_SOFT_RNDV_FINAL_* */
static const char *uct_rc_tm_soft_rndv_final_names[] = {
    [TM_DEV_SOFT_RNDV_FINAL_CANCELED] = "canceled",
    [TM_DEV_SOFT_RNDV_FINAL_EXPECTED] = "expected",
    NULL
};

ucs_config_field_t uct_rc_tm_md_config_table[] = {
    {"", "", NULL,
     ucs_offsetof(uct_rc_tm_md_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},

    {"LIST_SIZE", "1024",
     "Number of receive entries the device's tag-matching list holds.",
     ucs_offsetof(uct_rc_tm_md_config_t, list_size), UCS_CONFIG_TYPE_UINT},

    {"LIST_MAX_OPS", "auto",
     "Number of tag-matching list operations that may be outstanding; 'auto'\n"
     "means an ADD and a DEL for every list entry, and two more (as UCX's\n"
     "rc_mlx5 sizes its command QP), so a full list's receives go to the\n"
     "device at once.",
     ucs_offsetof(uct_rc_tm_md_config_t, max_list_ops),
     UCS_CONFIG_TYPE_ULUNITS},

    {"SRQ_DEPTH", "auto",
     "Number of untagged receive buffers in the tag-matching SRQ; at least 33,\n"
     "which a mlx5 tag-matching SRQ needs. Each buffer is UCX_RC_TM_SEG_SIZE\n"
     "bytes, all posted at once. 'auto' posts 1024 on a NIC (8 MiB; UCX's RC\n"
     "receive queue, UCX_RC_RX_QUEUE_LEN=4095, pins 33 MiB), where a message\n"
     "that finds none is retried after a receiver-not-ready delay; and 64 on\n"
     "the software NIC, as UCX's shared memory FIFO (UCX_MM_FIFO_SIZE): its\n"
     "CPU writes each message into the next buffer, which fewer buffers keep\n"
     "in the cache, and a message that finds none waits in the sender's ring\n"
     "until software posts more, without a delay.",
     ucs_offsetof(uct_rc_tm_md_config_t, srq_depth), UCS_CONFIG_TYPE_ULUNITS},

    {"TX_MIN_INLINE", "auto",
     "Bytes of inline data to ask of each send QP (as UCX_RC_TX_MIN_INLINE);\n"
     "messages that fit, with their 16-byte header, are copied into the work\n"
     "request. The provider may grant more (mlx5 fills its WQE: 124 for 64).\n"
     "'auto' asks 64 of a NIC, as UCX, where each byte more grows every WQE\n"
     "of every connection's send queue; and 828 of the software NIC, all a\n"
     "1 KiB WQE holds: there an inline send is one copy, into the peer's\n"
     "ring, and its send queue keeps the bytes only while that ring is full.",
     ucs_offsetof(uct_rc_tm_md_config_t, tx_min_inline),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"PKEY", "auto",
     "InfiniBand partition the connections use, 0..0x7fff (as UCX_IB_PKEY).\n"
     "\"auto\" takes the port's first P_Key with full membership, else its\n"
     "first limited one. Two limited members of a partition cannot talk.",
     ucs_offsetof(uct_rc_tm_md_config_t, pkey), UCS_CONFIG_TYPE_HEX},

    {"SL", "auto",
     "InfiniBand service level of the connections, 0..15 (RoCE: Ethernet\n"
     "priority), as UCX_IB_SL. \"auto\" is 0: UCX's choice where the device\n"
     "reports no adaptive-routing SLs through verbs.",
     ucs_offsetof(uct_rc_tm_md_config_t, sl), UCS_CONFIG_TYPE_ULUNITS},

    {"TIMEOUT", "1.0s",
     "Time a connection waits for the peer to acknowledge a request before it\n"
     "sends it again (the QPs' local ACK timeout, as UCX_RC_TIMEOUT), rounded\n"
     "up to 4.096 us times a power of two, 8.192 us to 2.4 h.",
     ucs_offsetof(uct_rc_tm_md_config_t, timeout), UCS_CONFIG_TYPE_TIME},

    {"RETRY_COUNT", "7",
     "Times a request is sent again before the connection fails, 0..7 (as\n"
     "UCX_RC_RETRY_COUNT): a peer that is gone is found out after\n"
     "(RETRY_COUNT + 1) * TIMEOUT.",
     ucs_offsetof(uct_rc_tm_md_config_t, retry_count), UCS_CONFIG_TYPE_UINT},

    {"SOFT", "auto",
     "List the software NIC (device \"soft\") as a device of rc_tm.\n"
     " auto - only where no tag-matching NIC is listed: next to a NIC, UCP\n"
     "        would open both, and two tag-offload interfaces in a worker\n"
     "        turn off its wildcard offload\n"
     " yes  - always, after the NICs\n"
     " no   - never (rc_tm then has no device where there is no NIC)",
     ucs_offsetof(uct_rc_tm_md_config_t, soft), UCS_CONFIG_TYPE_TERNARY_AUTO},

    {"FORK_INIT", "try",
     "Initialize a fork-safe IB library with ibv_fork_init(), as UCX's\n"
     "UCX_IB_FORK_INIT does: before any device is probed or opened, since\n"
     "the call fails once memory is registered or a queue created.\n"
     " try - call it; on failure continue, warning at fork that\n"
     "       registered memory may be corrupted\n"
     " yes - fail to list or open a device when it fails\n"
     " no  - do not call it (and warn at fork)\n"
     "The software NIC records the call, refusing it as rdma-core does once\n"
     "a device was brought up in the process.",
     ucs_offsetof(uct_rc_tm_md_config_t, fork_init), UCS_CONFIG_TYPE_TERNARY},

    {"SOFT_PACKET_SIZE", "4k",
     "Software NIC only: matched eager messages longer than this complete in\n"
     "two steps (match, then data valid), as a NIC does past one packet (its\n"
     "MTU).",
     ucs_offsetof(uct_rc_tm_md_config_t, soft_packet_size),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"SOFT_PROGRESS", "inline",
     "Software NIC only: where the device does its work (tag matching,\n"
     "placement, rendezvous reads, send completions).\n"
     " inline - in the polls of its completion queues, on the thread that\n"
     "          progresses the interface\n"
     " thread - on the device's own engine thread, as a NIC does, while\n"
     "          software computes; a poll that finds nothing runs the work\n"
     "          itself and the engine stands aside. Idle, the engine spins\n"
     "          briefly, then sleeps until a peer or the local software\n"
     "          rings its doorbell. Pays off where the engine has a core of\n"
     "          its own, and where it has none it stands aside\n"
     "          (SOFT_ENGINE_ASIDE).",
     ucs_offsetof(uct_rc_tm_md_config_t, soft_progress),
     UCS_CONFIG_TYPE_ENUM(uct_rc_tm_soft_progress_names)},

    {"SOFT_ENGINE_ASIDE", "y",
     "Software NIC only, with SOFT_PROGRESS=thread: the engine looks every\n"
     "10 ms at the CPUs the process may run on and at the threads that want\n"
     "them, and where it has no CPU of its own (busy ranks take them all) it\n"
     "stands aside: the device works in the polls, as with inline progress,\n"
     "until a CPU is free again. A NIC never takes the application's cores.\n"
     "With \"n\" the engine always works.",
     ucs_offsetof(uct_rc_tm_md_config_t, soft_engine_aside),
     UCS_CONFIG_TYPE_BOOL},

    {"SOFT_TM_MAX_SGE", "2",
     "Software NIC only: scatter entries a tag-matching list entry takes\n"
     "(tm_caps.max_sge), 1 or 2. With 2, a receive shorter than the largest\n"
     "eager message is listed as its own buffer followed by a spill segment\n"
     "that takes what does not fit, so that its data is placed where it\n"
     "belongs. With 1, as on mlx5, it is listed with a bounce segment, and\n"
     "its data copied to the receive at completion.",
     ucs_offsetof(uct_rc_tm_md_config_t, soft_tm_max_sge),
     UCS_CONFIG_TYPE_UINT},

    {"SOFT_CONNECT_TO_SRQ", "y",
     "Software NIC only: connect an endpoint to a peer's interface (its\n"
     "tag-matching SRQ) without the peer's part, an extension of the\n"
     "software NIC, so that UCP wires rc_tm up by itself. With \"n\" rc_tm\n"
     "connects endpoint to endpoint only, as on a NIC (mlx5), and UCP needs\n"
     "an auxiliary transport to exchange the addresses: UCX_TLS=\n"
     "rc_tm,ud_verbs:aux (UCX's ud_verbs on the software NIC needs the test\n"
     "interposer), or from UCX 1.16 rc_tm,tcp:aux or rc_tm,posix:aux.",
     ucs_offsetof(uct_rc_tm_md_config_t, soft_connect_to_srq),
     UCS_CONFIG_TYPE_BOOL},

    {"SOFT_HOLD_MATCH", "n",
     "Software NIC only: reproduce the race of a DEL (a cancelled receive)\n"
     "with the message that consumed its list entry in the other order. A\n"
     "NIC does not order the DEL's failure completion against the match's;\n"
     "the software NIC gives the match first, and with \"y\" it holds the\n"
     "completion of a single-packet match back, so that such a DEL\n"
     "processed meanwhile completes first. The held completion comes before\n"
     "any later one of its queue, or when a poll would otherwise find the\n"
     "queue empty, so the race shows mostly with SOFT_PROGRESS=thread, where\n"
     "the engine matches messages between the polls and a DEL posted before\n"
     "the next poll completes first.",
     ucs_offsetof(uct_rc_tm_md_config_t, soft_hold_match),
     UCS_CONFIG_TYPE_BOOL},

    {"SOFT_RNDV_FINAL", "canceled",
     "Software NIC only: the second completion of a software rendezvous (a\n"
     "rendezvous larger than its receive) that completes in two, in one of\n"
     "the forms mlx5 gives it.\n"
     " canceled - MSG_COMPLETION_CANCELED: status rendezvous incomplete,\n"
     "            match and data valid again, opcode 0 (send), QP number 0\n"
     "            and length 0, as rdma-core's mlx5 provider reads it\n"
     " expected - EXPECTED: status success, data valid only",
     ucs_offsetof(uct_rc_tm_md_config_t, soft_rndv_final),
     UCS_CONFIG_TYPE_ENUM(uct_rc_tm_soft_rndv_final_names)},

    {"SOFT_LATENCY", "430ns",
     "Software NIC only: the one-way latency it reports to UCX, which picks\n"
     "protocols and lanes by it. The default is measured: an 8-byte active\n"
     "message's one-way time (ucx_perftest -t am_lat), less the software's\n"
     "cost of posting and of completing it (docs/performance.md).",
     ucs_offsetof(uct_rc_tm_md_config_t, soft_latency), UCS_CONFIG_TYPE_TIME},

    {"SOFT_BW", "10000MBs",
     "Software NIC only: the bandwidth it reports to UCX, which picks\n"
     "protocols and lanes by it: one CPU's copies (an eager message), twice\n"
     "that for an RDMA read or write, whose copy both sides share. The\n"
     "default is measured (docs/performance.md); set what ucx_perftest\n"
     "measures on your machine.",
     ucs_offsetof(uct_rc_tm_md_config_t, soft_bandwidth), UCS_CONFIG_TYPE_BW},

    {"RCACHE", "try",
     "Keep registrations in UCX's registration cache, so that a buffer\n"
     "registered again (UCP registers every receive it offloads and every\n"
     "rendezvous send) costs a lookup instead of a device registration. A\n"
     "cached region stays registered after deregistration, until its memory\n"
     "is unmapped or the cache evicts it (UCX_RC_TM_RCACHE_MAX_REGIONS,\n"
     "UCX_RC_TM_RCACHE_MAX_SIZE).\n"
     " try - use the cache when it can be created, else register directly\n"
     " yes - fail to open the memory domain without the cache\n"
     " no  - register every buffer with the device, every time",
     ucs_offsetof(uct_rc_tm_md_config_t, rcache_enable),
     UCS_CONFIG_TYPE_TERNARY},

    {"", UCT_RC_TM_RCACHE_CONFIG_DEFAULTS(UCT_RC_TM_RCACHE_ALIGN), NULL,
     ucs_offsetof(uct_rc_tm_md_config_t, rcache),
     UCS_CONFIG_TYPE_TABLE(UCT_RC_TM_RCACHE_CONFIG_TABLE)},

    {NULL}
};

ucs_status_t uct_rc_tm_status_from_errno(int err)
{
    switch (err) {
    case 0:
        return UCS_OK;
    case ENOMEM:
        return UCS_ERR_NO_MEMORY;
    case ENODEV:
    case ENXIO:
        return UCS_ERR_NO_DEVICE;
    case EINVAL:
        return UCS_ERR_INVALID_PARAM;
    case EAGAIN:
    case ENOBUFS:
        return UCS_ERR_NO_RESOURCE;
    case ENOENT:
        return UCS_ERR_NO_ELEM;     /* as UCX: no P_Key to use */
    case ENOSYS:
    case EOPNOTSUPP:
        return UCS_ERR_UNSUPPORTED;
    case ECONNRESET:
    case EPIPE:
        return UCS_ERR_CONNECTION_RESET;
    default:
        return UCS_ERR_IO_ERROR;
    }
}

/* ucs_warn() at fork: registered memory may now be corrupted (UCX's ib md
 * warns the same way when fork init is off or failed) */
static void uct_rc_tm_fork_warn(void)
{
    ucs_warn("rc_tm: ibv_fork_init() was disabled or failed, yet a fork() "
             "has been issued: data corruption might occur when using "
             "registered memory");
}

static void uct_rc_tm_fork_warn_enable(void)
{
    static int enabled;
    int ret;

    if (__atomic_exchange_n(&enabled, 1, __ATOMIC_ACQ_REL)) {
        return;
    }
    ret = pthread_atfork(uct_rc_tm_fork_warn, NULL, NULL);
    if (ret != 0) {
        ucs_warn("rc_tm: registering the fork() warning failed: %s",
                 strerror(ret));
    }
}

ucs_status_t uct_rc_tm_fork_init(ucs_ternary_auto_value_t mode)
{
    int ret;

    if (mode == UCS_NO) {
        uct_rc_tm_fork_warn_enable();
        return UCS_OK;
    }

    ret = tm_dev_fork_init();
    if (ret == 0) {
        return UCS_OK;
    }
    if (mode == UCS_YES) {
        ucs_error("rc_tm: ibv_fork_init() failed: %s (UCX_RC_TM_FORK_INIT=y)",
                  strerror(ret));
        return UCS_ERR_IO_ERROR;
    }
    ucs_debug("rc_tm: ibv_fork_init() failed: %s, continuing, but fork may "
              "be unsafe", strerror(ret));
    uct_rc_tm_fork_warn_enable();
    return UCS_OK;
}

unsigned uct_rc_tm_select_devices(tm_dev_info_t *devices, unsigned count,
                                  ucs_ternary_auto_value_t soft)
{
    unsigned i, nics = 0, kept = 0;

    for (i = 0; i < count; ++i) {
        nics += !devices[i].soft;
    }
    for (i = 0; i < count; ++i) {
        if (devices[i].soft && ((soft == UCS_NO) ||
                                ((soft != UCS_YES) && (nics > 0)))) {
            ucs_debug("rc_tm: software NIC %s not listed (UCX_RC_TM_SOFT=%s,"
                      " %u tag-matching NIC(s))", devices[i].name,
                      (soft == UCS_NO) ? "n" : "auto", nics);
            continue;
        }
        devices[kept++] = devices[i];
    }
    return kept;
}

void uct_rc_tm_dev_net_name(const char *name, unsigned port_num, char *buf,
                            size_t max)
{
    ucs_snprintf_zero(buf, max, "%s:%u", name, port_num);
}

ucs_status_t uct_rc_tm_md_check_dev_name(uct_rc_tm_md_t *md,
                                         const char *dev_name)
{
    char name[UCT_RC_TM_NET_NAME_MAX];

    uct_rc_tm_dev_net_name(md->dev->name, md->dev->port_num, name,
                           sizeof(name));
    if ((dev_name == NULL) || strcmp(dev_name, name)) {
        /* As UCX's ib iface, which opens the port the name gives */
        ucs_error("rc_tm: md %s has device %s, not '%s'", md->dev->name,
                  name, (dev_name == NULL) ? "(null)" : dev_name);
        return UCS_ERR_NO_DEVICE;
    }
    return UCS_OK;
}

/* The devices rc_tm lists, as UCX_RC_TM_SOFT and UCX_RC_TM_FORK_INIT
 * (read from the environment: listing is given no configuration) say */
static ucs_status_t
uct_rc_tm_list_devices(uct_component_t *component, tm_dev_info_t *devices,
                       unsigned *count_p)
{
    uct_rc_tm_md_config_t *config;
    uct_md_config_t *md_config;
    ucs_status_t status;

    status = uct_md_config_read(component, NULL, NULL, &md_config);
    if (status != UCS_OK) {
        return status;
    }

    config = ucs_derived_of(md_config, uct_rc_tm_md_config_t);
    /* Before the probe, which may create a TM-SRQ */
    status = uct_rc_tm_fork_init(config->fork_init);
    if (status == UCS_OK) {
        *count_p = uct_rc_tm_select_devices(devices,
                                            tm_dev_list(devices,
                                                        UCT_RC_TM_MAX_DEVICES),
                                            config->soft);
    }
    uct_config_release(md_config);
    return status;
}

ucs_status_t
uct_rc_tm_query_md_resources(uct_component_t *component,
                             uct_md_resource_desc_t **resources_p,
                             unsigned *num_resources_p)
{
    tm_dev_info_t devices[UCT_RC_TM_MAX_DEVICES];
    uct_md_resource_desc_t *resources;
    unsigned i, count;
    ucs_status_t status;

    status = uct_rc_tm_list_devices(component, devices, &count);
    if ((status != UCS_OK) || (count == 0)) {
        return uct_md_query_empty_md_resource(resources_p, num_resources_p);
    }

    resources = ucs_calloc(count, sizeof(*resources), "rc_tm md resources");
    if (resources == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    for (i = 0; i < count; ++i) {
        ucs_strncpy_zero(resources[i].md_name, devices[i].name,
                         sizeof(resources[i].md_name));
    }

    *resources_p     = resources;
    *num_resources_p = count;
    return UCS_OK;
}

void uct_rc_tm_md_close(uct_md_h tl_md)
{
    uct_rc_tm_md_t *md = ucs_derived_of(tl_md, uct_rc_tm_md_t);
    int keep;

    uct_rc_tm_md_stats_close(md);
    /* Deregisters every cached region: before the device goes */
    keep = uct_rc_tm_md_rcache_cleanup(md);
    ucs_mpool_cleanup(&md->memh_mp, 1);
    ucs_spinlock_destroy(&md->memh_lock);
    tm_dev_close(md->dev);
    md->dev = NULL;
    if (!keep) {
        ucs_free(md);
    }
}

void uct_rc_tm_md_attr(uct_md_h tl_md, uct_rc_tm_md_attr_t *attr)
{
    uct_rc_tm_md_t *md = ucs_derived_of(tl_md, uct_rc_tm_md_t);

    attr->flags            = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_MEMH |
                             UCT_MD_FLAG_NEED_RKEY;
    attr->max_reg          = md->caps.max_rdma_size;
    attr->reg_mem_types    = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    /* Keys name virtual addresses, valid until the memory is unmapped: a
     * registration may be cached (UCP 1.16 and later register through
     * their own cache what an md allows) */
    attr->cache_mem_types  = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->reg_cost         = md->reg_cost;
    attr->rkey_packed_size = sizeof(uct_rc_tm_packed_rkey_t);
}

/* Inline data to ask of the send QPs: UCX's 64 of a NIC, where it sizes
 * every WQE; of the software NIC all it grants, where inline saves a copy */
static uint32_t uct_rc_tm_md_tx_inline(const uct_rc_tm_md_config_t *config,
                                       const tm_dev_info_t *info)
{
    if (config->tx_min_inline != UCS_MEMUNITS_AUTO) {
        return ucs_min(config->tx_min_inline, UINT32_MAX);
    }
    return info->soft ? UCT_RC_TM_SOFT_TX_INLINE : 0;
}

/* Untagged buffers to post: 'auto' as the device wants them */
static unsigned long uct_rc_tm_md_srq_depth(const uct_rc_tm_md_config_t *config,
                                            const tm_dev_info_t *info)
{
    if (config->srq_depth != UCS_ULUNITS_AUTO) {
        return config->srq_depth;
    }
    return info->soft ? UCT_RC_TM_SOFT_SRQ_DEPTH : UCT_RC_TM_SRQ_DEPTH;
}

/* The QPs' local ACK timeout exponent for a time: the least that waits as
 * long (4.096 us * 2^exp), at least 1; 0 past the largest */
static uint8_t uct_rc_tm_md_timeout_exp(double timeout)
{
    uint8_t exp;

    for (exp = 1; exp <= 31; ++exp) {
        if (4.096e-6 * (double)(1ul << exp) >= timeout) {
            return exp;
        }
    }
    return 0;
}

ucs_status_t uct_rc_tm_md_open(uct_component_t *component,
                                      const char *md_name,
                                      const uct_md_config_t *uct_md_config,
                                      uct_md_h *md_p)
{
    const uct_rc_tm_md_config_t *config = ucs_derived_of(uct_md_config,
                                                         uct_rc_tm_md_config_t);
    tm_dev_attr_t attr                  = {0};
    tm_dev_info_t info;
    uct_rc_tm_md_t *md;
    ucs_status_t status;
    uint8_t timeout_exp;
    size_t max_ops;
    int ret;

    timeout_exp = uct_rc_tm_md_timeout_exp(config->timeout);
    max_ops = (config->max_list_ops == UCS_ULUNITS_AUTO) ?
              (2 * (size_t)config->list_size) + 2 : config->max_list_ops;
    if ((config->list_size == 0) || (max_ops == 0) || (max_ops > UINT_MAX)) {
        ucs_error("rc_tm: UCX_RC_TM_LIST_SIZE (%u) and "
                  "UCX_RC_TM_LIST_MAX_OPS (%zu) must be positive and finite",
                  config->list_size, max_ops);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((config->soft_tm_max_sge < 1) || (config->soft_tm_max_sge > 2)) {
        ucs_error("rc_tm: UCX_RC_TM_SOFT_TM_MAX_SGE (%u) must be 1 (as mlx5) "
                  "or 2", config->soft_tm_max_sge);
        return UCS_ERR_INVALID_PARAM;
    }
    if (!(config->soft_bandwidth > 0) || !(config->soft_latency >= 0)) {
        ucs_error("rc_tm: UCX_RC_TM_SOFT_BW and UCX_RC_TM_SOFT_LATENCY must "
                  "be a bandwidth and a time (not auto)");
        return UCS_ERR_INVALID_PARAM;
    }
    if ((config->pkey != UCS_HEXUNITS_AUTO) && (config->pkey > 0x7fff)) {
        ucs_error("rc_tm: UCX_RC_TM_PKEY (0x%zx) must be within 0..0x7fff",
                  config->pkey);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((config->sl != UCS_ULUNITS_AUTO) && (config->sl > 15)) {
        ucs_error("rc_tm: UCX_RC_TM_SL (%lu) must be within 0..15",
                  config->sl);
        return UCS_ERR_INVALID_PARAM;
    }
    if (!(config->timeout > 0) || (timeout_exp == 0) ||
        (config->retry_count > 7)) {
        ucs_error("rc_tm: UCX_RC_TM_TIMEOUT (%g s) must be within 0..8796 s "
                  "and UCX_RC_TM_RETRY_COUNT (%u) within 0..7",
                  config->timeout, config->retry_count);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((config->srq_depth != UCS_ULUNITS_AUTO) &&
        ((config->srq_depth < TM_DEV_MIN_SRQ_DEPTH) ||
         (config->srq_depth > UINT32_MAX))) {
        ucs_error("rc_tm: UCX_RC_TM_SRQ_DEPTH must be 'auto' or within %u "
                  "(the untagged buffers a mlx5 tag-matching SRQ needs) and "
                  "%u", TM_DEV_MIN_SRQ_DEPTH, UINT32_MAX);
        return UCS_ERR_INVALID_PARAM;
    }

    ret = tm_dev_find(md_name, &info);
    if ((ret == 0) && info.soft && (config->soft == UCS_NO)) {
        ucs_error("rc_tm: device '%s' is the software NIC, which "
                  "UCX_RC_TM_SOFT=n turns off", md_name);
        return UCS_ERR_NO_DEVICE;
    }
    if (ret != 0) {
        ucs_error("rc_tm: no tag-matching device named '%s'", md_name);
        return UCS_ERR_NO_DEVICE;
    }

    /* As UCX's ib md, before the device is opened */
    status = uct_rc_tm_fork_init(config->fork_init);
    if (status != UCS_OK) {
        return status;
    }

    md = ucs_calloc(1, sizeof(*md), "rc_tm md");
    if (md == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    attr.max_num_tags      = config->list_size;
    attr.max_ops           = max_ops;
    attr.srq_depth         = uct_rc_tm_md_srq_depth(config, &info);
    attr.max_inline        = uct_rc_tm_md_tx_inline(config, &info);
    attr.eager_packet_size = ucs_min(config->soft_packet_size, UINT32_MAX);
    attr.soft_progress     = config->soft_progress;
    attr.soft_engine_aside = config->soft_engine_aside;
    attr.soft_tm_max_sge   = config->soft_tm_max_sge;
    attr.soft_no_connect_to_srq = !config->soft_connect_to_srq;
    attr.soft_hold_match        = config->soft_hold_match;
    attr.soft_rndv_final        = config->soft_rndv_final;
    attr.soft_latency           = config->soft_latency;
    attr.soft_bandwidth         = config->soft_bandwidth;
    attr.pkey              = (config->pkey == UCS_HEXUNITS_AUTO) ? 0 :
                             TM_DEV_ATTR_SET | (uint32_t)config->pkey;
    attr.sl                = (config->sl == UCS_ULUNITS_AUTO) ? 0 :
                             TM_DEV_ATTR_SET | (uint32_t)config->sl;
    attr.timeout           = TM_DEV_ATTR_SET | timeout_exp;
    attr.retry_cnt         = TM_DEV_ATTR_SET | config->retry_count;

    ret = tm_dev_open(&info, &attr, &md->dev);
    if (ret != 0) {
        ucs_error("rc_tm: failed to open device %s%s: %s", md_name,
                  (config->tx_min_inline == UCS_MEMUNITS_AUTO) ? "" :
                  " with UCX_RC_TM_TX_MIN_INLINE", strerror(ret));
        ucs_free(md);
        return uct_rc_tm_status_from_errno(ret);
    }

    tm_dev_query(md->dev, &md->caps);
    md->list_size_asked = config->list_size;
    md->super.ops       = &uct_rc_tm_md_ops;
    md->super.component = &uct_rc_tm_component;

    status = uct_rc_tm_md_memh_init(md);
    if (status != UCS_OK) {
        goto err_close_dev;
    }

    status = uct_rc_tm_md_rcache_init(md, config);
    if (status != UCS_OK) {
        goto err_memh_cleanup;
    }

    uct_rc_tm_md_stats_open(md);
    *md_p = &md->super;
    return UCS_OK;

err_memh_cleanup:
    ucs_mpool_cleanup(&md->memh_mp, 1);
    ucs_spinlock_destroy(&md->memh_lock);
err_close_dev:
    tm_dev_close(md->dev);
    ucs_free(md);
    return status;
}

void uct_rc_tm_md_vfs_init(uct_md_h tl_md)
{
    uct_rc_tm_md_t *md = ucs_derived_of(tl_md, uct_rc_tm_md_t);

    if (md->rcache != NULL) {
        ucs_vfs_obj_add_sym_link(tl_md, md->rcache, "rcache");
    }
}
