/*
 * rc_tm memory registration: through UCX's registration cache when it is on,
 * else directly with the device; the device's keys are what it checks on
 * RDMA read and write, and what rkeys carry.
 */
#include "rc_tm_md.h"
#include "rc_tm_compat.h"

#include <ucm/api/ucm.h>
#include <ucs/arch/atomic.h>
#include <ucs/debug/log.h>
#include <ucs/stats/stats.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>
#include <limits.h>
#include <inttypes.h>
#include <sys/mman.h>

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


/*
 * Returns 0 when the cache is gone, 1 when it had to stay: UCP's cleanup
 * closes the md even when the user never destroyed its workers, whose
 * buffers still hold cached regions, and destroying a cache with regions in
 * use fails UCX's assertion.  Such a cache stays with its md (small, never
 * freed); the device goes, and the regions' later unmap events deregister
 * nothing.
 */
int uct_rc_tm_md_rcache_cleanup(uct_rc_tm_md_t *md)
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
    .dump_region = uct_rc_tm_rcache_dump_region_cb,
    UCT_RC_TM_RCACHE_OPS_MERGE
};

static ucs_status_t uct_rc_tm_mem_rcache_reg(uct_rc_tm_md_t *md,
                                             void *address, size_t length,
                                             unsigned flags, uct_mem_h *memh_p)
{
    uct_rc_tm_rcache_arg_t arg = {.flags = flags, .registered = 0};
    ucs_rcache_region_t *rregion;
    ucs_status_t status;

    status = uct_rc_tm_rcache_get(md->rcache, address, length,
                                  UCT_RC_TM_RCACHE_ALIGN,
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

ucs_status_t uct_rc_tm_mem_reg(uct_md_h tl_md, void *address,
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

ucs_status_t
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

void uct_rc_tm_mkey_pack(uct_mem_h memh, void *rkey_buffer)
{
    uct_rc_tm_packed_rkey_t *prkey = rkey_buffer;

    prkey->magic = UCT_RC_TM_RKEY_MAGIC;
    prkey->rkey  = uct_rc_tm_memh_rkey(memh);
}

ucs_status_t uct_rc_tm_rkey_unpack(const void *rkey_buffer, uct_rkey_t *rkey_p)
{
    const uct_rc_tm_packed_rkey_t *prkey = rkey_buffer;

    if (prkey->magic != UCT_RC_TM_RKEY_MAGIC) {
        ucs_error("rc_tm: rkey buffer %p is not an rc_tm rkey (magic 0x%x)",
                  rkey_buffer, prkey->magic);
        return UCS_ERR_INVALID_PARAM;
    }

    /* The device key is all we need: no allocation, nothing to release */
    *rkey_p = prkey->rkey;
    return UCS_OK;
}

/* An rkey is the device's key: equal keys reach the same memory */
int uct_rc_tm_rkey_compare(uct_rkey_t rkey1, uct_rkey_t rkey2)
{
    return (rkey1 > rkey2) - (rkey1 < rkey2);
}

static ucs_mpool_ops_t uct_rc_tm_memh_mpool_ops = {
    .chunk_alloc   = ucs_mpool_chunk_malloc,
    .chunk_release = ucs_mpool_chunk_free,
    .obj_init      = NULL,
    .obj_cleanup   = NULL,
    .obj_str       = NULL
};

ucs_status_t uct_rc_tm_md_memh_init(uct_rc_tm_md_t *md)
{
    ucs_status_t status;

    status = ucs_spinlock_init(&md->memh_lock, 0);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_rc_tm_mpool_init(&md->memh_mp, sizeof(uct_rc_tm_mem_t),
                                  sizeof(void*), UCT_RC_TM_MEMH_PER_CHUNK,
                                  &uct_rc_tm_memh_mpool_ops, "rc_tm_memh");
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
ucs_status_t
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

    uct_rc_tm_rcache_params(&params, &config->rcache);
    params.region_struct_size = sizeof(uct_rc_tm_rcache_region_t);
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
            uct_rc_tm_rcache_overhead(&config->rcache), 0);
    ucs_debug("rc_tm: %s: using registration cache %s", md->dev->name, name);
    return UCS_OK;
}

