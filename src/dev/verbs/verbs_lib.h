/*
 * The verbs that libibverbs exports as functions, for one kind of device.
 *
 * The verbs backend calls rdma-core's API only.  The calls that
 * <infiniband/verbs.h> implements as static inlines (ibv_post_send,
 * ibv_post_srq_recv, ibv_post_srq_ops, ibv_create_cq_ex,
 * ibv_create_srq_ex, ibv_query_device_ex, ibv_query_port, ibv_get_srq_num,
 * ibv_start_poll and the CQ's readers) reach whichever device through its
 * own objects.  The ones libibverbs exports as functions go through this
 * table, chosen per device when it is listed: libibverbs' own functions
 * for a NIC, the software NIC's (softnic.h) for it.  A slow-path
 * indirection only; nothing is interposed process-wide.
 */
#ifndef RC_TM_DEV_VERBS_VERBS_LIB_H_
#define RC_TM_DEV_VERBS_VERBS_LIB_H_

#include <infiniband/verbs.h>

struct tm_verbs_lib {
    const char *name;             /* "libibverbs", "software NIC" */
    int        probe;             /* devices must prove tag matching, an
                                     active port and, on Ethernet, a TM-SRQ
                                     before they are listed */
    struct ibv_device **(*get_device_list)(int *num_devices);
    void        (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *device);
    struct ibv_context *(*open_device)(struct ibv_device *device);
    int         (*close_device)(struct ibv_context *context);
    int         (*query_gid)(struct ibv_context *context, uint8_t port_num,
                             int index, union ibv_gid *gid);
    int         (*query_gid_ex)(struct ibv_context *context, uint32_t port_num,
                                uint32_t gid_index, struct ibv_gid_entry *entry,
                                uint32_t flags, size_t entry_size);
    int         (*query_pkey)(struct ibv_context *context, uint8_t port_num,
                              int index, __be16 *pkey);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
    int         (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length,
                             int access);
    int         (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd,
                                struct ibv_qp_init_attr *attr);
    int         (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr,
                             int attr_mask);
    int         (*query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr,
                            int attr_mask, struct ibv_qp_init_attr *init_attr);
    int         (*destroy_qp)(struct ibv_qp *qp);
    int         (*destroy_cq)(struct ibv_cq *cq);
    int         (*destroy_srq)(struct ibv_srq *srq);
    struct ibv_srq *(*create_srq)(struct ibv_pd *pd,
                                  struct ibv_srq_init_attr *attr);
    int         (*modify_srq)(struct ibv_srq *srq, struct ibv_srq_attr *attr,
                              int attr_mask);
    int         (*query_srq)(struct ibv_srq *srq, struct ibv_srq_attr *attr);
    int         (*get_async_event)(struct ibv_context *context,
                                   struct ibv_async_event *event);
    void        (*ack_async_event)(struct ibv_async_event *event);
};

/* In listing order: TM-capable NICs first, the software NIC last */
extern const tm_verbs_lib_t tm_verbs_libibverbs;
extern const tm_verbs_lib_t tm_verbs_softnic;

#endif
