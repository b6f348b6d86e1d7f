/*
 * rc_tm's entry points in the form the UCX it is built against calls them:
 * the md ops, the component, and the internal ops of the interface.  Each
 * adapter hands over to the transport's one implementation; what an op does
 * is decided there, not here.  Ops rc_tm has no use for answer
 * UCS_ERR_UNSUPPORTED, as UCX's own transports answer them, so that no op
 * UCX calls is ever NULL.
 */
#include "rc_tm_compat.h"
#include "rc_tm_ep.h"
#include "rc_tm_iface.h"

#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>
#include <ucs/time/time.h>


/* ----- registration cache and memory pools ----- */

/* UCX's estimate of a cache lookup when the configuration says 'auto' */
#define UCT_RC_TM_RCACHE_OVERHEAD_AUTO  180e-9

void uct_rc_tm_rcache_params(ucs_rcache_params_t *params,
                             const uct_rc_tm_rcache_config_t *config)
{
#if UCT_RC_TM_UCX_UCS_RCACHE_CONFIG
    ucs_rcache_set_params(params, config);
#else
    uct_md_set_rcache_params(params, config);
#endif
#if !UCT_RC_TM_UCX_RCACHE_GET_ALIGN
    params->max_alignment = ucs_get_page_size();
#endif
#if UCT_RC_TM_UCX_RCACHE_LRU_LOCK
    params->flags        |= UCS_RCACHE_FLAG_NEED_LRU_LOCK;
#endif
}

double uct_rc_tm_rcache_overhead(const uct_rc_tm_rcache_config_t *config)
{
    return (config->overhead == UCS_TIME_AUTO) ?
           UCT_RC_TM_RCACHE_OVERHEAD_AUTO : ucs_time_to_sec(config->overhead);
}

#if UCT_RC_TM_UCX_RCACHE_MERGE
void uct_rc_tm_rcache_merge(void *context, ucs_rcache_t *rcache, void *arg,
                            ucs_rcache_region_t *region)
{
}
#endif

ucs_status_t uct_rc_tm_mpool_init(ucs_mpool_t *mp, size_t elem_size,
                                  size_t alignment, unsigned elems_per_chunk,
                                  ucs_mpool_ops_t *ops, const char *name)
{
#if UCT_RC_TM_UCX_MD_V2
    ucs_mpool_params_t params;

    ucs_mpool_params_reset(&params);
    params.elem_size       = elem_size;
    params.alignment       = alignment;
    params.elems_per_chunk = elems_per_chunk;
    params.max_elems       = UINT_MAX;
    params.ops             = ops;
    params.name            = name;
    return ucs_mpool_init(&params, mp);
#else
    return ucs_mpool_init(mp, 0, elem_size, 0, alignment, elems_per_chunk,
                          UINT_MAX, ops, name);
#endif
}


/* ----- memory domain ----- */

#if UCT_RC_TM_UCX_MD_V2
static ucs_status_t uct_rc_tm_md_query(uct_md_h tl_md, uct_md_attr_v2_t *attr)
{
    uct_rc_tm_md_attr_t tm_attr;

    uct_rc_tm_md_attr(tl_md, &tm_attr);
#if UCT_RC_TM_UCX_AT_LEAST(17)
    uct_md_base_md_query(attr);
#elif UCT_RC_TM_UCX_AT_LEAST(16)
    attr->reg_alignment    = 1;     /* the rest UCX zeroed */
#endif
    attr->flags            = tm_attr.flags;
    attr->max_alloc        = 0;
    attr->max_reg          = tm_attr.max_reg;
    attr->reg_mem_types    = tm_attr.reg_mem_types;
    attr->cache_mem_types  = tm_attr.cache_mem_types;
    attr->alloc_mem_types  = 0;
    attr->access_mem_types = tm_attr.access_mem_types;
    attr->detect_mem_types = 0;
    attr->dmabuf_mem_types = 0;
    attr->reg_cost         = tm_attr.reg_cost;
    attr->rkey_packed_size = tm_attr.rkey_packed_size;
    memset(&attr->local_cpus, 0xff, sizeof(attr->local_cpus));
    return UCS_OK;
}

static ucs_status_t
uct_rc_tm_md_mem_reg(uct_md_h tl_md, void *address, size_t length,
                     const uct_md_mem_reg_params_t *params, uct_mem_h *memh_p)
{
    return uct_rc_tm_mem_reg(tl_md, address, length,
                             UCT_MD_MEM_REG_FIELD_VALUE(params, flags,
                                                        FIELD_FLAGS, 0),
                             memh_p);
}

/* rc_tm exports no memory handles (no UCT_MD_FLAG_EXPORTED_MKEY) */
static ucs_status_t
uct_rc_tm_md_mem_attach(uct_md_h tl_md, const void *mkey_buffer,
                        uct_md_mem_attach_params_t *params, uct_mem_h *memh_p)
{
    return UCS_ERR_UNSUPPORTED;
}
#else
static ucs_status_t uct_rc_tm_md_query(uct_md_h tl_md, uct_md_attr_t *attr)
{
    uct_rc_tm_md_attr_t tm_attr;

    uct_rc_tm_md_attr(tl_md, &tm_attr);
    attr->cap.flags            = tm_attr.flags;
    attr->cap.max_alloc        = 0;
    attr->cap.max_reg          = tm_attr.max_reg;
    attr->cap.reg_mem_types    = tm_attr.reg_mem_types;
    attr->cap.alloc_mem_types  = 0;
    attr->cap.access_mem_types = tm_attr.access_mem_types;
    attr->cap.detect_mem_types = 0;
    attr->rkey_packed_size     = tm_attr.rkey_packed_size;
    attr->reg_cost             = tm_attr.reg_cost;
    ucs_strncpy_zero(attr->component_name, uct_rc_tm_component.name,
                     sizeof(attr->component_name));
    memset(&attr->local_cpus, 0xff, sizeof(attr->local_cpus));
    return UCS_OK;
}

#define uct_rc_tm_md_mem_reg  uct_rc_tm_mem_reg

/* rc_tm connects no sockaddr */
static int
uct_rc_tm_md_is_sockaddr_accessible(uct_md_h tl_md,
                                    const ucs_sock_addr_t *sockaddr,
                                    uct_sockaddr_accessibility_t mode)
{
    return 0;
}
#endif

static ucs_status_t
uct_rc_tm_md_mkey_pack(uct_md_h tl_md, uct_mem_h memh,
#if UCT_RC_TM_UCX_MKEY_PACK_ADDR
                       void *address, size_t length,
#endif
                       const uct_md_mkey_pack_params_t *params,
                       void *rkey_buffer)
{
    uct_rc_tm_mkey_pack(memh, rkey_buffer);
    return UCS_OK;
}

/* rc_tm allocates no memory: it registers the user's */
static ucs_status_t
uct_rc_tm_md_mem_alloc(uct_md_h tl_md, size_t *length_p, void **address_p,
                       ucs_memory_type_t mem_type,
#if UCT_RC_TM_UCX_ALLOC_SYS_DEV
                       ucs_sys_device_t sys_dev,
#endif
                       unsigned flags, const char *alloc_name,
                       uct_mem_h *memh_p)
{
    return UCS_ERR_UNSUPPORTED;
}

static ucs_status_t uct_rc_tm_md_mem_free(uct_md_h tl_md, uct_mem_h memh)
{
    return UCS_ERR_UNSUPPORTED;
}

static ucs_status_t uct_rc_tm_md_mem_advise(uct_md_h tl_md, uct_mem_h memh,
                                            void *addr, size_t length,
                                            unsigned advice)
{
    return UCS_ERR_UNSUPPORTED;
}

/* Host memory only: nothing to tell about it (no detect_mem_types) */
static ucs_status_t
uct_rc_tm_md_mem_query(uct_md_h tl_md, const void *address, size_t length,
#if UCT_RC_TM_UCX_MEM_QUERY_V2
                       uct_md_mem_attr_v2_t *mem_attr
#else
                       uct_md_mem_attr_t *mem_attr
#endif
                       )
{
    return UCS_ERR_UNSUPPORTED;
}

static ucs_status_t
uct_rc_tm_md_detect_memory_type(uct_md_h tl_md, const void *address,
                                size_t length, ucs_memory_type_t *mem_type_p)
{
    return UCS_ERR_UNSUPPORTED;
}

#if UCT_RC_TM_UCX_MD_MEM_ELEM
/* Device (GPU-initiated) memory elements: rc_tm has no device API */
static ucs_status_t
uct_rc_tm_md_mem_elem_pack(uct_md_h tl_md, uct_mem_h memh, uct_rkey_t rkey,
#if UCT_RC_TM_UCX_AT_LEAST(22)
                           uct_device_mem_elem_t *mem_elem_p
#else
                           uct_device_mem_element_t *mem_elem_p
#endif
                           )
{
    return UCS_ERR_UNSUPPORTED;
}
#endif

uct_md_ops_t uct_rc_tm_md_ops = {
    .close                  = uct_rc_tm_md_close,
    .query                  = uct_rc_tm_md_query,
    .mem_alloc              = uct_rc_tm_md_mem_alloc,
    .mem_free               = uct_rc_tm_md_mem_free,
    .mem_advise             = uct_rc_tm_md_mem_advise,
    .mem_reg                = uct_rc_tm_md_mem_reg,
    .mem_dereg              = uct_rc_tm_mem_dereg,
    .mem_query              = uct_rc_tm_md_mem_query,
    .mkey_pack              = uct_rc_tm_md_mkey_pack,
#if UCT_RC_TM_UCX_MD_V2
    .mem_attach             = uct_rc_tm_md_mem_attach,
#else
    .is_sockaddr_accessible = uct_rc_tm_md_is_sockaddr_accessible,
#endif
    .detect_memory_type     = uct_rc_tm_md_detect_memory_type,
#if UCT_RC_TM_UCX_MD_MEM_ELEM
    .mem_elem_pack          = uct_rc_tm_md_mem_elem_pack,
#endif
};


/* ----- component ----- */

static ucs_status_t
uct_rc_tm_component_rkey_unpack(uct_component_t *component,
                                const void *rkey_buffer,
#if UCT_RC_TM_UCX_RKEY_UNPACK_V2
                                const uct_rkey_unpack_params_t *params,
#endif
                                uct_rkey_t *rkey_p, void **handle_p)
{
    *handle_p = NULL;
    return uct_rc_tm_rkey_unpack(rkey_buffer, rkey_p);
}

static ucs_status_t uct_rc_tm_component_rkey_release(uct_component_t *component,
                                                     uct_rkey_t rkey,
                                                     void *handle)
{
    return UCS_OK;
}

/* Our rkeys point at nothing this process can map */
static ucs_status_t uct_rc_tm_component_rkey_ptr(uct_component_t *component,
                                                 uct_rkey_t rkey, void *handle,
                                                 uint64_t raddr, void **laddr_p)
{
    return UCS_ERR_UNSUPPORTED;
}

/* rc_tm connects endpoint to endpoint (or to an SRQ), never through a CM */
static ucs_status_t uct_rc_tm_component_cm_open(uct_component_t *component,
                                                uct_worker_h worker,
                                                const uct_cm_config_t *config,
                                                uct_cm_h *cm_p)
{
    return UCS_ERR_UNSUPPORTED;
}

#if UCT_RC_TM_UCX_RKEY_COMPARE
static ucs_status_t
uct_rc_tm_component_rkey_compare(uct_component_t *component, uct_rkey_t rkey1,
                                 uct_rkey_t rkey2,
                                 const uct_rkey_compare_params_t *params,
                                 int *result)
{
    if ((params->field_mask != 0) || (result == NULL)) {
        return UCS_ERR_INVALID_PARAM;
    }

    *result = uct_rc_tm_rkey_compare(rkey1, rkey2);
    return UCS_OK;
}
#endif

uct_component_t uct_rc_tm_component = {
    .query_md_resources = uct_rc_tm_query_md_resources,
    .md_open            = uct_rc_tm_md_open,
    .cm_open            = uct_rc_tm_component_cm_open,
    .rkey_unpack        = uct_rc_tm_component_rkey_unpack,
    .rkey_ptr           = uct_rc_tm_component_rkey_ptr,
    .rkey_release       = uct_rc_tm_component_rkey_release,
#if UCT_RC_TM_UCX_RKEY_COMPARE
    .rkey_compare       = uct_rc_tm_component_rkey_compare,
#endif
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


/* ----- interface internal ops ----- */

/* The counters and the offload report (rc_tm_report.c); every UCX since
 * 1.13 asks this of a transport */
static void uct_rc_tm_iface_vfs_refresh(uct_iface_h tl_iface)
{
    uct_rc_tm_iface_vfs_populate(ucs_derived_of(tl_iface, uct_rc_tm_iface_t));
}

/* Socket addresses: rc_tm has none */
static ucs_status_t uct_rc_tm_ep_query(uct_ep_h tl_ep, uct_ep_attr_t *ep_attr)
{
    return UCS_ERR_UNSUPPORTED;
}

/* Invalidating an endpoint's remote keys (UCX's ud): not for rc_tm */
static ucs_status_t
uct_rc_tm_ep_invalidate(uct_ep_h tl_ep,
#if UCT_RC_TM_UCX_EP_INVALIDATE_V2
                        const uct_ep_invalidate_params_t *params
#else
                        unsigned flags
#endif
                        )
{
    return UCS_ERR_UNSUPPORTED;
}

#if UCT_RC_TM_UCX_MD_V2
static ucs_status_t
uct_rc_tm_ep_connect_to_ep_v2(uct_ep_h tl_ep, const uct_device_addr_t *dev_addr,
                              const uct_ep_addr_t *ep_addr,
                              const uct_ep_connect_to_ep_params_t *params)
{
    return uct_rc_tm_ep_connect_to_ep(tl_ep, dev_addr, ep_addr);
}
#endif

#if UCT_RC_TM_UCX_REACHABLE_V2
static int
uct_rc_tm_iface_is_reachable_v2(const uct_iface_h tl_iface,
                                const uct_iface_is_reachable_params_t *params)
{
    uct_iface_reachability_scope_t scope;
    const uct_device_addr_t *dev_addr;
    int reachable;

    dev_addr = UCS_PARAM_VALUE(UCT_IFACE_IS_REACHABLE_FIELD, params,
                               device_addr, DEVICE_ADDR, NULL);
    scope    = UCS_PARAM_VALUE(UCT_IFACE_IS_REACHABLE_FIELD, params, scope,
                               SCOPE, UCT_IFACE_REACHABILITY_SCOPE_NETWORK);

    reachable = uct_rc_tm_iface_reaches(
            tl_iface, dev_addr, scope == UCT_IFACE_REACHABILITY_SCOPE_DEVICE);
#if UCT_RC_TM_UCX_AT_LEAST(18)
    if (!reachable) {
        uct_iface_fill_info_str_buf(params, "%s on rc_tm device %s",
                                    (dev_addr == NULL) ?
                                    "no device address" :
                                    (scope == UCT_IFACE_REACHABILITY_SCOPE_DEVICE) ?
                                    "another device" : "not reachable",
                                    uct_rc_tm_iface_dev_name(tl_iface));
    }
#endif
    return reachable;
}
#endif

#if UCT_RC_TM_UCX_EP_IS_CONNECTED
static int uct_rc_tm_ep_is_connected(const uct_ep_h tl_ep,
                                     const uct_ep_is_connected_params_t *params)
{
    /* as UCX's rc: an error without a device address (in any build) */
    UCT_EP_IS_CONNECTED_CHECK_DEV_ADDR(params);
    return uct_rc_tm_ep_is_connected_to(
            tl_ep,
            UCS_PARAM_VALUE(UCT_EP_IS_CONNECTED_FIELD, params, device_addr,
                            DEVICE_ADDR, NULL),
            UCS_PARAM_VALUE(UCT_EP_IS_CONNECTED_FIELD, params, iface_addr,
                            IFACE_ADDR, NULL),
            UCS_PARAM_VALUE(UCT_EP_IS_CONNECTED_FIELD, params, ep_addr,
                            EP_ADDR, NULL));
}
#endif

#if UCT_RC_TM_UCX_IFACE_MEM_ELEMENT
static ucs_status_t
uct_rc_tm_iface_mem_element_pack(const uct_iface_h tl_iface, uct_mem_h memh,
                                 uct_rkey_t rkey,
                                 uct_device_mem_element_t *mem_element)
{
    return UCS_ERR_UNSUPPORTED;
}
#endif

#if UCT_RC_TM_UCX_DEVICE_EP
/* GPU-initiated operations: rc_tm has no device endpoint */
static ucs_status_t uct_rc_tm_ep_get_device_ep(uct_ep_h tl_ep,
                                               uct_device_ep_h *device_ep_p)
{
    return UCS_ERR_UNSUPPORTED;
}
#endif

#if UCT_RC_TM_UCX_PUT_SGL
/* Not offered (max_put_sgl_zcopy_count is 0) */
static ucs_status_t
uct_rc_tm_ep_put_sgl_zcopy(uct_ep_h tl_ep, void * const *buffers,
                           const size_t *lengths, uct_mem_h const *memhs,
                           const uint64_t *remote_addrs,
                           uct_rkey_t const *rkeys, const size_t *counts,
                           const size_t *strides, size_t count,
                           uct_completion_t *comp)
{
    return UCS_ERR_UNSUPPORTED;
}
#endif

uct_iface_internal_ops_t uct_rc_tm_iface_internal_ops = {
#if UCT_RC_TM_UCX_IFACE_QUERY_V2
    .iface_query_v2         = uct_iface_base_query_v2,
#endif
    .iface_estimate_perf    = uct_rc_tm_iface_estimate_perf,
    .iface_vfs_refresh      = uct_rc_tm_iface_vfs_refresh,
#if UCT_RC_TM_UCX_IFACE_MEM_ELEMENT
    .iface_mem_element_pack = uct_rc_tm_iface_mem_element_pack,
#endif
    .ep_query               = uct_rc_tm_ep_query,
    .ep_invalidate          = uct_rc_tm_ep_invalidate,
#if UCT_RC_TM_UCX_MD_V2
    .ep_connect_to_ep_v2    = uct_rc_tm_ep_connect_to_ep_v2,
#endif
#if UCT_RC_TM_UCX_REACHABLE_V2
    .iface_is_reachable_v2  = uct_rc_tm_iface_is_reachable_v2,
#endif
#if UCT_RC_TM_UCX_EP_IS_CONNECTED
    .ep_is_connected        = uct_rc_tm_ep_is_connected,
#endif
#if UCT_RC_TM_UCX_DEVICE_EP
    .ep_get_device_ep       = uct_rc_tm_ep_get_device_ep,
#endif
#if UCT_RC_TM_UCX_PUT_SGL
    .ep_put_sgl_zcopy       = uct_rc_tm_ep_put_sgl_zcopy,
#endif
};
