/*
 * rc_tm memory domain: device discovery, memory registration, rkeys.
 */
#include "rc_tm_md.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <errno.h>

#define UCT_RC_TM_MAX_DEVICES 16

static ucs_config_field_t uct_rc_tm_md_config_table[] = {
    {"", "", NULL,
     ucs_offsetof(uct_rc_tm_md_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},

    {"LIST_SIZE", "1024",
     "Number of receive entries the device's tag-matching list holds.",
     ucs_offsetof(uct_rc_tm_md_config_t, list_size), UCS_CONFIG_TYPE_UINT},

    {"LIST_MAX_OPS", "256",
     "Number of tag-matching list operations that may be outstanding.",
     ucs_offsetof(uct_rc_tm_md_config_t, max_list_ops), UCS_CONFIG_TYPE_UINT},

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

static void uct_rc_tm_md_close(uct_md_h tl_md)
{
    uct_rc_tm_md_t *md = ucs_derived_of(tl_md, uct_rc_tm_md_t);

    tm_dev_close(md->dev);
    ucs_free(md);
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
    /* Registration is a table insert on the software device */
    attr->reg_cost             = ucs_linear_func_make(50e-9, 0);
    ucs_strncpy_zero(attr->component_name, uct_rc_tm_component.name,
                     sizeof(attr->component_name));
    memset(&attr->local_cpus, 0xff, sizeof(attr->local_cpus));
    return UCS_OK;
}

static ucs_status_t uct_rc_tm_mem_reg(uct_md_h tl_md, void *address,
                                      size_t length, unsigned flags,
                                      uct_mem_h *memh_p)
{
    uct_rc_tm_md_t *md = ucs_derived_of(tl_md, uct_rc_tm_md_t);
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

    *memh_p = mr;
    return UCS_OK;
}

static ucs_status_t
uct_rc_tm_mem_dereg(uct_md_h tl_md, const uct_md_mem_dereg_params_t *params)
{
    uct_rc_tm_md_t *md = ucs_derived_of(tl_md, uct_rc_tm_md_t);
    tm_dev_mr_t *mr;
    int ret;

    UCT_MD_MEM_DEREG_CHECK_PARAMS(params, 0);

    mr  = params->memh;
    ret = tm_dev_dereg_mr(md->dev, mr);
    if (ret != 0) {
        ucs_error("rc_tm: failed to deregister %p: %s", mr->addr,
                  strerror(ret));
        return uct_rc_tm_status_from_errno(ret);
    }
    return UCS_OK;
}

static ucs_status_t
uct_rc_tm_mkey_pack(uct_md_h tl_md, uct_mem_h memh,
                    const uct_md_mkey_pack_params_t *params, void *rkey_buffer)
{
    const tm_dev_mr_t *mr          = memh;
    uct_rc_tm_packed_rkey_t *prkey = rkey_buffer;

    prkey->magic = UCT_RC_TM_RKEY_MAGIC;
    prkey->rkey  = mr->rkey;
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
    int ret;

    if ((config->list_size == 0) || (config->max_list_ops == 0)) {
        ucs_error("rc_tm: UCX_RC_TM_LIST_SIZE (%u) and "
                  "UCX_RC_TM_LIST_MAX_OPS (%u) must be positive",
                  config->list_size, config->max_list_ops);
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
    attr.max_ops           = config->max_list_ops;
    attr.srq_depth         = config->srq_depth;
    attr.eager_packet_size = ucs_min(config->soft_packet_size, UINT32_MAX);

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
    *md_p               = &md->super;
    return UCS_OK;
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
    .md_vfs_init        = (uct_component_md_vfs_init_func_t)
                                  ucs_empty_function
};
