/*
 * The exported verbs of libibverbs, and of the software NIC (verbs_lib.h).
 */
#include "dev/tm_dev.h"
#include "verbs_lib.h"

#include <softnic/softnic.h>

/* ibv_reg_mr is also a macro in <infiniband/verbs.h>: the parentheses name
 * the exported function */
const tm_verbs_lib_t tm_verbs_libibverbs = {
    .name             = "libibverbs",
    .probe            = 1,
    .get_device_list  = ibv_get_device_list,
    .free_device_list = ibv_free_device_list,
    .get_device_name  = ibv_get_device_name,
    .open_device      = ibv_open_device,
    .close_device     = ibv_close_device,
    .query_gid        = ibv_query_gid,
    .query_gid_ex     = _ibv_query_gid_ex,
    .query_pkey       = ibv_query_pkey,
    .alloc_pd         = ibv_alloc_pd,
    .dealloc_pd       = ibv_dealloc_pd,
    .reg_mr           = (ibv_reg_mr),
    .dereg_mr         = ibv_dereg_mr,
    .create_qp        = ibv_create_qp,
    .modify_qp        = ibv_modify_qp,
    .query_qp         = ibv_query_qp,
    .destroy_qp       = ibv_destroy_qp,
    .destroy_cq       = ibv_destroy_cq,
    .destroy_srq      = ibv_destroy_srq,
    .create_srq       = ibv_create_srq,
    .modify_srq       = ibv_modify_srq,
    .query_srq        = ibv_query_srq,
    .get_async_event  = ibv_get_async_event,
    .ack_async_event  = ibv_ack_async_event,
};

const tm_verbs_lib_t tm_verbs_softnic = {
    .name             = "software NIC",
    /* probed as a NIC is: its port may be Ethernet (SOFTNIC_LINK_LAYER) */
    .probe            = 1,
    .get_device_list  = softnic_get_device_list,
    .free_device_list = softnic_free_device_list,
    .get_device_name  = softnic_get_device_name,
    .open_device      = softnic_open_device,
    .close_device     = softnic_close_device,
    .query_gid        = softnic_query_gid,
    .query_gid_ex     = softnic_query_gid_ex,
    .query_pkey       = softnic_query_pkey,
    .alloc_pd         = softnic_alloc_pd,
    .dealloc_pd       = softnic_dealloc_pd,
    .reg_mr           = softnic_reg_mr,
    .dereg_mr         = softnic_dereg_mr,
    .create_qp        = softnic_create_qp,
    .modify_qp        = softnic_modify_qp,
    .query_qp         = softnic_query_qp,
    .destroy_qp       = softnic_destroy_qp,
    .destroy_cq       = softnic_destroy_cq,
    .destroy_srq      = softnic_destroy_srq,
    .create_srq       = softnic_create_srq,
    .modify_srq       = softnic_modify_srq,
    .query_srq        = softnic_query_srq,
    .get_async_event  = softnic_get_async_event,
    .ack_async_event  = softnic_ack_async_event,
};
