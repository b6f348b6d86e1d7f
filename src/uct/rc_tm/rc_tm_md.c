/*
 * rc_tm memory domain: device discovery, memory registration (through UCX's
 * registration cache when it is on), rkeys.
 */
#include "rc_tm_md.h"

#include <ucm/api/ucm.h>
#include <ucs/arch/atomic.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/stats/stats.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>
#include <ucs/vfs/base/vfs_obj.h>
#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <sys/mman.h>

#define UCT_RC_TM_MAX_DEVICES      16
/* As UCX's ib md: cached regions are aligned to 16 bytes, not to the cache
 * line, so a key reaches as little beyond its buffer as the cache allows */
#define UCT_RC_TM_RCACHE_ALIGN     16
/* Handles of direct registrations per pool chunk */
#define UCT_RC_TM_MEMH_PER_CHUNK   128

/* A registration cache region: the device's keys for all of it */
typedef struct uct_rc_tm_rcache_region {
    ucs_rcache_region_t super;
    uct_rc_tm_mem_t     memh;
} uct_rc_tm_rcache_region_t;

/* What one lookup passes to the cache's registration callback: the user's
 * flags, and back whether the lookup had to register (a miss) */
typedef struct uct_rc_tm_rcache_arg {
    unsigned            flags;
    int                 registered;
} uct_rc_tm_rcache_arg_t;

/* UCX_RC_TM_SOFT_PROGRESS, in the order of TM_DEV_SOFT_PROGRESS_* */
static const char *uct_rc_tm_soft_progress_names[] = {
    [TM_DEV_SOFT_PROGRESS_INLINE] = "inline",
    [TM_DEV_SOFT_PROGRESS_THREAD] = "thread",
    NULL
};

static ucs_config_field_t uct_rc_tm_md_config_table[] = {
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

    {"SRQ_DEPTH", "1024",
     "Number of untagged receive buffers in the tag-matching SRQ; at least 33,\n"
     "which a mlx5 tag-matching SRQ needs.",
     ucs_offsetof(uct_rc_tm_md_config_t, srq_depth), UCS_CONFIG_TYPE_UINT},

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
     "          its own.",
     ucs_offsetof(uct_rc_tm_md_config_t, soft_progress),
     UCS_CONFIG_TYPE_ENUM(uct_rc_tm_soft_progress_names)},

    {"SOFT_TM_MAX_SGE", "2",
     "Software NIC only: scatter entries a tag-matching list entry takes\n"
     "(tm_caps.max_sge), 1 or 2. With 2, a receive shorter than the largest\n"
     "eager message is listed as its own buffer followed by a spill segment\n"
     "that takes what does not fit, so that its data is placed where it\n"
     "belongs. With 1, as on mlx5, it is listed with a bounce segment, and\n"
     "its data copied to the receive at completion.",
     ucs_offsetof(uct_rc_tm_md_config_t, soft_tm_max_sge),
     UCS_CONFIG_TYPE_UINT},

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

    {"", "RCACHE_ADDR_ALIGN=" UCS_PP_MAKE_STRING(UCT_RC_TM_RCACHE_ALIGN), NULL,
     ucs_offsetof(uct_rc_tm_md_config_t, rcache),
     UCS_CONFIG_TYPE_TABLE(uct_md_config_rcache_table)},

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

static ucs_status_t
uct_rc_tm_query_md_resources(uct_component_t *component,
                             uct_md_resource_desc_t **resources_p,
                             unsigned *num_resources_p)
{
    tm_dev_info_t devices[UCT_RC_TM_MAX_DEVICES];
    uct_md_resource_desc_t *resources;
    unsigned i, count;

    count = tm_dev_list(devices, UCT_RC_TM_MAX_DEVICES);
    if (count == 0) {
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

/*
 * Returns 0 when the cache is gone, 1 when it had to stay: UCP's cleanup
 * closes the md even when the user never destroyed its workers, whose
 * buffers still hold cached regions, and destroying a cache with regions in
 * use fails UCX's assertion.  Such a cache stays with its md (small, never
 * freed); the device goes, and the regions' later unmap events deregister
 * nothing.
 */
static int uct_rc_tm_md_rcache_cleanup(uct_rc_tm_md_t *md)
{
    uint64_t held = *(volatile uint64_t*)&md->rcache_held;

    if (md->rcache == NULL) {
        return 0;
    }
    if (held == 0) {
        ucs_rcache_destroy(md->rcache);
        return 0;
    }

    ucs_debug("rc_tm: %s: closed with %" PRIu64 " cached registrations "
              "still in use: registration cache left in place",
              md->dev->name, held);
    return 1;
}

static void uct_rc_tm_md_close(uct_md_h tl_md)
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

static ucs_status_t uct_rc_tm_md_query(uct_md_h tl_md, uct_md_attr_t *attr)
{
    uct_rc_tm_md_t *md = ucs_derived_of(tl_md, uct_rc_tm_md_t);

    attr->cap.flags            = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_MEMH |
                                 UCT_MD_FLAG_NEED_RKEY;
    attr->cap.max_alloc        = 0;
    attr->cap.max_reg          = md->caps.max_rdma_size;
    attr->cap.reg_mem_types    = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->cap.alloc_mem_types  = 0;
    attr->cap.access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->cap.detect_mem_types = 0;
    attr->rkey_packed_size     = sizeof(uct_rc_tm_packed_rkey_t);
    attr->reg_cost             = md->reg_cost;
    ucs_strncpy_zero(attr->component_name, uct_rc_tm_component.name,
                     sizeof(attr->component_name));
    memset(&attr->local_cpus, 0xff, sizeof(attr->local_cpus));
    return UCS_OK;
}

static UCS_F_ALWAYS_INLINE void
uct_rc_tm_md_stat(uct_rc_tm_md_t *md, uct_rc_tm_md_stat_t stat)
{
    /* Registration may come from any thread */
    ucs_atomic_add64(&md->stats[stat], 1);
}

/* Registers [address, address + length) with the device into memh's keys */
static ucs_status_t uct_rc_tm_md_reg_keys(uct_rc_tm_md_t *md, void *address,
                                          size_t length, unsigned flags,
                                          uct_rc_tm_mem_t *memh)
{
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                 IBV_ACCESS_REMOTE_WRITE;
    tm_dev_mr_t *mr;
    int ret;

    ret = tm_dev_reg_mr(md->dev, address, length, access, &mr);
    if (ret != 0) {
        uct_md_log_mem_reg_error(flags,
                                 "rc_tm: failed to register %p length %zu on "
                                 "%s: %s", address, length, md->dev->name,
                                 strerror(ret));
        return uct_rc_tm_status_from_errno(ret);
    }

    memh->lkey = mr->lkey;
    memh->rkey = mr->rkey;
    memh->mr   = mr;
    return UCS_OK;
}

static ucs_status_t uct_rc_tm_md_dereg_keys(uct_rc_tm_md_t *md,
                                            uct_rc_tm_mem_t *memh)
{
    int ret;

    ret = tm_dev_dereg_mr(md->dev, memh->mr);
    if (ret != 0) {
        ucs_error("rc_tm: failed to deregister %p on %s: %s", memh->mr->addr,
                  md->dev->name, strerror(ret));
        return uct_rc_tm_status_from_errno(ret);
    }
    return UCS_OK;
}

/* Called by the cache on a miss, with its page table locked: registers the
 * whole region, which is aligned and may span merged neighbours */
static ucs_status_t
uct_rc_tm_rcache_mem_reg_cb(void *context, ucs_rcache_t *rcache, void *arg,
                            ucs_rcache_region_t *rregion, uint16_t rcache_flags)
{
    uct_rc_tm_md_t *md                = context;
    uct_rc_tm_rcache_arg_t *reg       = arg;
    uct_rc_tm_rcache_region_t *region = ucs_derived_of(rregion,
                                                       uct_rc_tm_rcache_region_t);
    unsigned flags                    = reg->flags;

    reg->registered = 1;
    /* A merged region that fails is retried unmerged: no error for it */
    if (rcache_flags & UCS_RCACHE_MEM_REG_HIDE_ERRORS) {
        flags |= UCT_MD_MEM_FLAG_HIDE_ERRORS;
    }

    region->memh.flags = UCT_RC_TM_MEM_FLAG_CACHED;
    return uct_rc_tm_md_reg_keys(md, (void*)rregion->super.start,
                                 rregion->super.end - rregion->super.start,
                                 flags, &region->memh);
}

/* Called by the cache when a region is gone: unmapped, evicted, merged into
 * a larger one, or the cache destroyed, and nobody holds it any more */
static void uct_rc_tm_rcache_mem_dereg_cb(void *context, ucs_rcache_t *rcache,
                                          ucs_rcache_region_t *rregion)
{
    uct_rc_tm_md_t *md                = context;
    uct_rc_tm_rcache_region_t *region = ucs_derived_of(rregion,
                                                       uct_rc_tm_rcache_region_t);

    /* A cache left behind by its closed md: the device is gone */
    if (md->dev != NULL) {
        (void)uct_rc_tm_md_dereg_keys(md, &region->memh);
    }
}

static void uct_rc_tm_rcache_dump_region_cb(void *context, ucs_rcache_t *rcache,
                                            ucs_rcache_region_t *rregion,
                                            char *buf, size_t max)
{
    uct_rc_tm_rcache_region_t *region = ucs_derived_of(rregion,
                                                       uct_rc_tm_rcache_region_t);

    snprintf(buf, max, "lkey 0x%x rkey 0x%x", region->memh.lkey,
             region->memh.rkey);
}

static ucs_rcache_ops_t uct_rc_tm_rcache_ops = {
    .mem_reg     = uct_rc_tm_rcache_mem_reg_cb,
    .mem_dereg   = uct_rc_tm_rcache_mem_dereg_cb,
    .dump_region = uct_rc_tm_rcache_dump_region_cb
};

static ucs_status_t uct_rc_tm_mem_rcache_reg(uct_rc_tm_md_t *md,
                                             void *address, size_t length,
                                             unsigned flags, uct_mem_h *memh_p)
{
    uct_rc_tm_rcache_arg_t arg = {.flags = flags, .registered = 0};
    ucs_rcache_region_t *rregion;
    ucs_status_t status;

    status = ucs_rcache_get(md->rcache, address, length,
                            PROT_READ | PROT_WRITE, &arg, &rregion);
    if (arg.registered) {
        uct_rc_tm_md_stat(md, UCT_RC_TM_MD_STAT_RCACHE_MISS);
    } else if (status == UCS_OK) {
        uct_rc_tm_md_stat(md, UCT_RC_TM_MD_STAT_RCACHE_HIT);
    }
    if (status != UCS_OK) {
        return status;
    }

    ucs_atomic_add64(&md->rcache_held, 1);
    *memh_p = &ucs_derived_of(rregion, uct_rc_tm_rcache_region_t)->memh;
    return UCS_OK;
}

static ucs_status_t uct_rc_tm_mem_direct_reg(uct_rc_tm_md_t *md,
                                             void *address, size_t length,
                                             unsigned flags, uct_mem_h *memh_p)
{
    uct_rc_tm_mem_t *memh;
    ucs_status_t status;

    /* A pool, not malloc: with the cache off this is every offloaded
     * receive's path */
    ucs_spin_lock(&md->memh_lock);
    memh = ucs_mpool_get(&md->memh_mp);
    ucs_spin_unlock(&md->memh_lock);
    if (memh == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    status = uct_rc_tm_md_reg_keys(md, address, length, flags, memh);
    if (status != UCS_OK) {
        ucs_spin_lock(&md->memh_lock);
        ucs_mpool_put(memh);
        ucs_spin_unlock(&md->memh_lock);
        return status;
    }

    memh->flags = 0;
    *memh_p     = memh;
    return UCS_OK;
}

static ucs_status_t uct_rc_tm_mem_reg(uct_md_h tl_md, void *address,
                                      size_t length, unsigned flags,
                                      uct_mem_h *memh_p)
{
    uct_rc_tm_md_t *md = ucs_derived_of(tl_md, uct_rc_tm_md_t);

    /* An empty range has no region to cache (the page table refuses one) */
    if (ucs_likely((md->rcache != NULL) && (length > 0))) {
        return uct_rc_tm_mem_rcache_reg(md, address, length, flags, memh_p);
    }
    return uct_rc_tm_mem_direct_reg(md, address, length, flags, memh_p);
}

static ucs_status_t
uct_rc_tm_mem_dereg(uct_md_h tl_md, const uct_md_mem_dereg_params_t *params)
{
    uct_rc_tm_md_t *md = ucs_derived_of(tl_md, uct_rc_tm_md_t);
    uct_rc_tm_rcache_region_t *region;
    uct_rc_tm_mem_t *memh;
    ucs_status_t status;

    UCT_MD_MEM_DEREG_CHECK_PARAMS(params, 0);

    memh = params->memh;
    if (memh->flags & UCT_RC_TM_MEM_FLAG_CACHED) {
        /* Stays registered in the cache while its memory is mapped */
        region = ucs_container_of(memh, uct_rc_tm_rcache_region_t, memh);
        ucs_rcache_region_put(md->rcache, &region->super);
        ucs_atomic_sub64(&md->rcache_held, 1);
        return UCS_OK;
    }

    /* Still registered when it fails: the caller keeps the handle */
    status = uct_rc_tm_md_dereg_keys(md, memh);
    if (status != UCS_OK) {
        return status;
    }

    ucs_spin_lock(&md->memh_lock);
    ucs_mpool_put(memh);
    ucs_spin_unlock(&md->memh_lock);
    return UCS_OK;
}

static ucs_status_t
uct_rc_tm_mkey_pack(uct_md_h tl_md, uct_mem_h memh,
                    const uct_md_mkey_pack_params_t *params, void *rkey_buffer)
{
    uct_rc_tm_packed_rkey_t *prkey = rkey_buffer;

    prkey->magic = UCT_RC_TM_RKEY_MAGIC;
    prkey->rkey  = uct_rc_tm_memh_rkey(memh);
    return UCS_OK;
}

static ucs_status_t
uct_rc_tm_rkey_unpack(uct_component_t *component, const void *rkey_buffer,
                      uct_rkey_t *rkey_p, void **handle_p)
{
    const uct_rc_tm_packed_rkey_t *prkey = rkey_buffer;

    if (prkey->magic != UCT_RC_TM_RKEY_MAGIC) {
        ucs_error("rc_tm: rkey buffer %p is not an rc_tm rkey (magic 0x%x)",
                  rkey_buffer, prkey->magic);
        return UCS_ERR_INVALID_PARAM;
    }

    /* The device key is all we need: no allocation, nothing to release */
    *rkey_p   = prkey->rkey;
    *handle_p = NULL;
    return UCS_OK;
}

static ucs_status_t uct_rc_tm_rkey_release(uct_component_t *component,
                                           uct_rkey_t rkey, void *handle)
{
    return UCS_OK;
}

static ucs_mpool_ops_t uct_rc_tm_memh_mpool_ops = {
    .chunk_alloc   = ucs_mpool_chunk_malloc,
    .chunk_release = ucs_mpool_chunk_free,
    .obj_init      = NULL,
    .obj_cleanup   = NULL,
    .obj_str       = NULL
};

static ucs_status_t uct_rc_tm_md_memh_init(uct_rc_tm_md_t *md)
{
    ucs_status_t status;

    status = ucs_spinlock_init(&md->memh_lock, 0);
    if (status != UCS_OK) {
        return status;
    }

    status = ucs_mpool_init(&md->memh_mp, 0, sizeof(uct_rc_tm_mem_t), 0,
                            sizeof(void*), UCT_RC_TM_MEMH_PER_CHUNK,
                            UINT_MAX, &uct_rc_tm_memh_mpool_ops,
                            "rc_tm_memh");
    if (status != UCS_OK) {
        ucs_spinlock_destroy(&md->memh_lock);
    }
    return status;
}

/*
 * The registration cache, as UCX's ib md has it: UCX_RC_TM_RCACHE=try (the
 * default) falls back to direct registration when the cache cannot be made
 * (UCM's memory hooks unavailable, a bad UCX_RC_TM_RCACHE_* value), yes
 * refuses to open without it.  Cached regions are invalidated by UCM's
 * unmap events, so memory given back to the system and mapped again at the
 * same address is registered anew, never found with the old keys.
 */
static ucs_status_t
uct_rc_tm_md_rcache_init(uct_rc_tm_md_t *md,
                         const uct_rc_tm_md_config_t *config)
{
    ucs_rcache_params_t params;
    ucs_status_t status;
    char name[64];

    md->rcache = NULL;
    /* Direct: a table insert on the software NIC */
    md->reg_cost = ucs_linear_func_make(50e-9, 0);
    if (config->rcache_enable == UCS_NO) {
        ucs_debug("rc_tm: %s: registration cache disabled", md->dev->name);
        return UCS_OK;
    }

    uct_md_set_rcache_params(&params, &config->rcache);
    params.region_struct_size = sizeof(uct_rc_tm_rcache_region_t);
    params.max_alignment      = ucs_get_page_size();
    params.ucm_events         = UCM_EVENT_VM_UNMAPPED;
    params.context            = md;
    params.ops                = &uct_rc_tm_rcache_ops;
    ucs_snprintf_zero(name, sizeof(name), "rc_tm_%s", md->dev->name);

    status = ucs_rcache_create(&params, name, ucs_stats_get_root(),
                               &md->rcache);
    if (status != UCS_OK) {
        md->rcache = NULL;
        if (config->rcache_enable == UCS_YES) {
            ucs_error("rc_tm: %s: UCX_RC_TM_RCACHE=yes but the registration "
                      "cache could not be created: %s", md->dev->name,
                      ucs_status_string(status));
            return status;
        }
        ucs_debug("rc_tm: %s: no registration cache (%s), registering "
                  "directly", md->dev->name, ucs_status_string(status));
        return UCS_OK;
    }

    /* A registration is a cache lookup now, as UCX's mds report it */
    md->reg_cost = ucs_linear_func_make(
            uct_md_rcache_overhead(&config->rcache), 0);
    ucs_debug("rc_tm: %s: using registration cache %s", md->dev->name, name);
    return UCS_OK;
}

static ucs_status_t uct_rc_tm_md_open(uct_component_t *component,
                                      const char *md_name,
                                      const uct_md_config_t *uct_md_config,
                                      uct_md_h *md_p)
{
    static uct_md_ops_t md_ops = {
        .close                  = uct_rc_tm_md_close,
        .query                  = uct_rc_tm_md_query,
        .mem_alloc              = (uct_md_mem_alloc_func_t)
                                          ucs_empty_function_return_unsupported,
        .mem_free               = (uct_md_mem_free_func_t)
                                          ucs_empty_function_return_unsupported,
        .mem_advise             = (uct_md_mem_advise_func_t)
                                          ucs_empty_function_return_unsupported,
        .mem_reg                = uct_rc_tm_mem_reg,
        .mem_dereg              = uct_rc_tm_mem_dereg,
        .mem_query              = (uct_md_mem_query_func_t)
                                          ucs_empty_function_return_unsupported,
        .mkey_pack              = uct_rc_tm_mkey_pack,
        .is_sockaddr_accessible = (uct_md_is_sockaddr_accessible_func_t)
                                          ucs_empty_function_return_zero_int,
        .detect_memory_type     = (uct_md_detect_memory_type_func_t)
                                          ucs_empty_function_return_unsupported
    };
    const uct_rc_tm_md_config_t *config = ucs_derived_of(uct_md_config,
                                                         uct_rc_tm_md_config_t);
    tm_dev_attr_t attr                  = {0};
    tm_dev_info_t info;
    uct_rc_tm_md_t *md;
    ucs_status_t status;
    size_t max_ops;
    int ret;

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
    if (config->srq_depth < TM_DEV_MIN_SRQ_DEPTH) {
        ucs_error("rc_tm: UCX_RC_TM_SRQ_DEPTH (%u) must be at least %u, the "
                  "untagged buffers a mlx5 tag-matching SRQ needs",
                  config->srq_depth, TM_DEV_MIN_SRQ_DEPTH);
        return UCS_ERR_INVALID_PARAM;
    }

    ret = tm_dev_find(md_name, &info);
    if (ret != 0) {
        ucs_error("rc_tm: no tag-matching device named '%s'", md_name);
        return UCS_ERR_NO_DEVICE;
    }

    md = ucs_calloc(1, sizeof(*md), "rc_tm md");
    if (md == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    attr.max_num_tags      = config->list_size;
    attr.max_ops           = max_ops;
    attr.srq_depth         = config->srq_depth;
    attr.eager_packet_size = ucs_min(config->soft_packet_size, UINT32_MAX);
    attr.soft_progress     = config->soft_progress;
    attr.soft_tm_max_sge   = config->soft_tm_max_sge;

    ret = tm_dev_open(&info, &attr, &md->dev);
    if (ret != 0) {
        ucs_error("rc_tm: failed to open device %s: %s", md_name,
                  strerror(ret));
        ucs_free(md);
        return uct_rc_tm_status_from_errno(ret);
    }

    tm_dev_query(md->dev, &md->caps);
    md->super.ops       = &md_ops;
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

static void uct_rc_tm_md_vfs_init(uct_md_h tl_md)
{
    uct_rc_tm_md_t *md = ucs_derived_of(tl_md, uct_rc_tm_md_t);

    if (md->rcache != NULL) {
        ucs_vfs_obj_add_sym_link(tl_md, md->rcache, "rcache");
    }
}

uct_component_t uct_rc_tm_component = {
    .query_md_resources = uct_rc_tm_query_md_resources,
    .md_open            = uct_rc_tm_md_open,
    .cm_open            = (uct_component_cm_open_func_t)
                                  ucs_empty_function_return_unsupported,
    .rkey_unpack        = uct_rc_tm_rkey_unpack,
    .rkey_ptr           = (uct_component_rkey_ptr_func_t)
                                  ucs_empty_function_return_unsupported,
    .rkey_release       = uct_rc_tm_rkey_release,
    .name               = UCT_RC_TM_NAME,
    .md_config          = {
        .name           = "rc_tm memory domain",
        .prefix         = UCT_RC_TM_CONFIG_PREFIX,
        .table          = uct_rc_tm_md_config_table,
        .size           = sizeof(uct_rc_tm_md_config_t),
    },
    .cm_config          = UCS_CONFIG_EMPTY_GLOBAL_LIST_ENTRY,
    .tl_list            = UCT_COMPONENT_TL_LIST_INITIALIZER(
                                  &uct_rc_tm_component),
    .flags              = 0,
    .md_vfs_init        = uct_rc_tm_md_vfs_init
};
