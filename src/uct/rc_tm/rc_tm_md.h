/*
 * rc_tm memory domain: one per tag-matching device.  Registration goes to the
 * device, so its keys are what the device checks on RDMA read/write.
 */
#ifndef UCT_RC_TM_MD_H_
#define UCT_RC_TM_MD_H_

#include "rc_tm_compat.h"

#include <dev/tm_dev.h>
#include <uct/base/uct_md.h>
#include <ucs/datastruct/list.h>
#include <ucs/datastruct/mpool.h>
#include <ucs/memory/rcache.h>
#include <ucs/type/spinlock.h>

#define UCT_RC_TM_NAME           "rc_tm"
#define UCT_RC_TM_CONFIG_PREFIX  "RC_TM_"
/* Marks our packed rkeys, so a foreign rkey buffer is refused at unpack */
#define UCT_RC_TM_RKEY_MAGIC     0x4d54u  /* "TM" */
/* As UCX's ib md: cached regions are aligned to 16 bytes, not to the cache
 * line, so a key reaches as little beyond its buffer as the cache allows */
#define UCT_RC_TM_RCACHE_ALIGN   16

extern uct_component_t uct_rc_tm_component;

typedef struct uct_rc_tm_md_config {
    uct_md_config_t          super;
    unsigned                 list_size;        /* device tag list entries */
    size_t                   max_list_ops;     /* outstanding list operations,
                                                  or UCS_ULUNITS_AUTO */
    unsigned long            srq_depth;        /* untagged receive buffers, or
                                                  UCS_ULUNITS_AUTO */
    size_t                   tx_min_inline;    /* inline bytes asked of each
                                                  send QP, or
                                                  UCS_MEMUNITS_AUTO */
    size_t                   pkey;             /* UCX_RC_TM_PKEY, or
                                                  UCS_HEXUNITS_AUTO (UCX's
                                                  parser writes a size_t) */
    unsigned long            sl;               /* UCX_RC_TM_SL, or
                                                  UCS_ULUNITS_AUTO */
    double                   timeout;          /* UCX_RC_TM_TIMEOUT, seconds */
    unsigned                 retry_count;      /* UCX_RC_TM_RETRY_COUNT */
    ucs_ternary_auto_value_t soft;             /* UCX_RC_TM_SOFT: list the
                                                  software NIC */
    ucs_ternary_auto_value_t fork_init;        /* UCX_RC_TM_FORK_INIT */
    size_t                   soft_packet_size; /* soft device: eager packet size */
    int                      soft_progress;    /* soft device: inline or
                                                  its engine thread
                                                  (TM_DEV_SOFT_PROGRESS_*) */
    int                      soft_engine_aside; /* soft device, thread
                                                 progress: stands aside
                                                 without a CPU of its own */
    unsigned                 soft_tm_max_sge;  /* soft device: scatter
                                                  entries of a list entry */
    int                      soft_connect_to_srq; /* soft device: offer
                                                  connections to a remote
                                                  SRQ (CONNECT_TO_IFACE) */
    int                      soft_hold_match;  /* soft device: a racing DEL
                                                  completes before the match */
    int                      soft_rndv_final;  /* soft device: final CQE of a
                                                  two-CQE software rendezvous
                                                  (TM_DEV_SOFT_RNDV_FINAL_*) */
    double                   soft_latency;     /* soft device: its figures */
    double                   soft_bandwidth;
    ucs_ternary_auto_value_t rcache_enable;    /* UCX_RC_TM_RCACHE */
    uct_rc_tm_rcache_config_t rcache;          /* UCX_RC_TM_RCACHE_* */
} uct_rc_tm_md_config_t;

/* Counters of a memory domain.  Interfaces report them as their own
 * UCT_RC_TM_STAT_RCACHE_HIT / _MISS (rc_tm_iface.h), in this order. */
typedef enum {
    UCT_RC_TM_MD_STAT_RCACHE_HIT,     /* registration found in the cache */
    UCT_RC_TM_MD_STAT_RCACHE_MISS,    /* ... that went to the device */
    UCT_RC_TM_MD_STAT_LAST
} uct_rc_tm_md_stat_t;

/*
 * A memory handle: the device's keys.  Keys name virtual addresses, so a
 * handle found in the registration cache, whose region may start before the
 * buffer and end after it (aligned, or merged with neighbours), reaches the
 * buffer at any offset with the same keys; nothing else of the region is
 * ever sent (rkeys carry the key alone, RDMA carries the buffer's address).
 */
typedef struct uct_rc_tm_mem {
    uint32_t                 lkey;
    uint32_t                 rkey;
    tm_dev_mr_t              *mr;
    unsigned                 flags;            /* UCT_RC_TM_MEM_FLAG_* */
} uct_rc_tm_mem_t;

enum {
    /* Part of a registration cache region, given back with
     * ucs_rcache_region_put(); otherwise from the md's memh pool */
    UCT_RC_TM_MEM_FLAG_CACHED = UCS_BIT(0)
};

typedef struct uct_rc_tm_md {
    uct_md_t                 super;
    tm_dev_t                 *dev;
    tm_dev_caps_t            caps;
    unsigned                 list_size_asked;  /* UCX_RC_TM_LIST_SIZE; the
                                                  device may hold fewer
                                                  (caps.tm.max_num_tags) */
    ucs_rcache_t             *rcache;          /* NULL: every registration
                                                  goes to the device */
    uint64_t                 rcache_held;      /* cached handles given out
                                                  and not yet deregistered */
    ucs_linear_func_t        reg_cost;
    ucs_mpool_t              memh_mp;          /* handles of direct
                                                  registrations */
    ucs_spinlock_t           memh_lock;        /* UCT allows mem_reg from
                                                  any thread */
    ucs_list_link_t          list;             /* all mds, for the totals */
    uint64_t                 stats[UCT_RC_TM_MD_STAT_LAST];
} uct_rc_tm_md_t;

/* What our rkey buffer holds */
typedef struct uct_rc_tm_packed_rkey {
    uint32_t            magic;
    uint32_t            rkey;
} UCS_S_PACKED uct_rc_tm_packed_rkey_t;

/* What an md reports, whatever form UCX asks it in (rc_tm_compat.c) */
typedef struct uct_rc_tm_md_attr {
    uint64_t                 flags;            /* UCT_MD_FLAG_* */
    size_t                   max_reg;
    uint64_t                 reg_mem_types;
    uint64_t                 cache_mem_types;  /* UCP may cache our
                                                  registrations */
    uint64_t                 access_mem_types;
    ucs_linear_func_t        reg_cost;
    size_t                   rkey_packed_size;
} uct_rc_tm_md_attr_t;

extern ucs_config_field_t uct_rc_tm_md_config_table[];
/* The md's ops, in the running UCX's form (rc_tm_compat.c) */
extern uct_md_ops_t uct_rc_tm_md_ops;

ucs_status_t uct_rc_tm_status_from_errno(int err);

/* The memory domain (rc_tm_md.c) */
ucs_status_t uct_rc_tm_query_md_resources(uct_component_t *component,
                                          uct_md_resource_desc_t **resources_p,
                                          unsigned *num_resources_p);
ucs_status_t uct_rc_tm_md_open(uct_component_t *component,
                               const char *md_name,
                               const uct_md_config_t *uct_md_config,
                               uct_md_h *md_p);
void uct_rc_tm_md_close(uct_md_h tl_md);
void uct_rc_tm_md_attr(uct_md_h tl_md, uct_rc_tm_md_attr_t *attr);
void uct_rc_tm_md_vfs_init(uct_md_h tl_md);

/* UCX_RC_TM_FORK_INIT: ibv_fork_init() as UCX's ib md calls it */
ucs_status_t uct_rc_tm_fork_init(ucs_ternary_auto_value_t mode);
/* Keeps the devices rc_tm lists, in order: the software NIC as
 * UCX_RC_TM_SOFT says (auto: only where no NIC is).  Returns their number. */
unsigned uct_rc_tm_select_devices(tm_dev_info_t *devices, unsigned count,
                                  ucs_ternary_auto_value_t soft);
/* A device's network device name as UCX's ib transports name a port,
 * "<device>:<port>" ("mlx5_0:1"): what UCX_NET_DEVICES selects */
#define UCT_RC_TM_NET_NAME_MAX   (TM_DEV_NAME_MAX + 4)
void uct_rc_tm_dev_net_name(const char *name, unsigned port_num, char *buf,
                            size_t max);
/* UCS_OK when dev_name is that of the md's device and port */
ucs_status_t uct_rc_tm_md_check_dev_name(uct_rc_tm_md_t *md,
                                         const char *dev_name);

/* Registration and keys (rc_tm_mem.c) */
ucs_status_t uct_rc_tm_md_memh_init(uct_rc_tm_md_t *md);
ucs_status_t uct_rc_tm_md_rcache_init(uct_rc_tm_md_t *md,
                                      const uct_rc_tm_md_config_t *config);
int uct_rc_tm_md_rcache_cleanup(uct_rc_tm_md_t *md);
ucs_status_t uct_rc_tm_mem_reg(uct_md_h tl_md, void *address, size_t length,
                               unsigned flags, uct_mem_h *memh_p);
ucs_status_t uct_rc_tm_mem_dereg(uct_md_h tl_md,
                                 const uct_md_mem_dereg_params_t *params);
void uct_rc_tm_mkey_pack(uct_mem_h memh, void *rkey_buffer);
ucs_status_t uct_rc_tm_rkey_unpack(const void *rkey_buffer, uct_rkey_t *rkey_p);
int uct_rc_tm_rkey_compare(uct_rkey_t rkey1, uct_rkey_t rkey2);

/* Keys of a handle; UCP passes no handle for an empty buffer (1.18 and
 * later send empty messages as zero-copy), whose key the device never uses */
static UCS_F_ALWAYS_INLINE uint32_t uct_rc_tm_memh_lkey(uct_mem_h memh)
{
    return (memh == UCT_MEM_HANDLE_NULL) ? 0 :
           ((const uct_rc_tm_mem_t*)memh)->lkey;
}

static UCS_F_ALWAYS_INLINE uint32_t uct_rc_tm_memh_rkey(uct_mem_h memh)
{
    return (memh == UCT_MEM_HANDLE_NULL) ? 0 :
           ((const uct_rc_tm_mem_t*)memh)->rkey;
}

/* The data of a zero-copy operation: rc_tm takes one iov, and "if iovcnt is
 * zero, the data is considered empty" (uct.h), so then an empty one */
static UCS_F_ALWAYS_INLINE const uct_iov_t *
uct_rc_tm_iov_data(const uct_iov_t *iov, size_t iovcnt)
{
    static const uct_iov_t empty = { .buffer = NULL, .length = 0,
                                     .memh = UCT_MEM_HANDLE_NULL,
                                     .stride = 0, .count = 1 };

    return ucs_likely(iovcnt != 0) ? iov : &empty;
}

/* Counters (rc_tm_counters.c): an md's start at 0 and count in the
 * process-wide totals until it closes */
void uct_rc_tm_md_stats_open(uct_rc_tm_md_t *md);
void uct_rc_tm_md_stats_close(uct_rc_tm_md_t *md);

#endif
