/*
 * Interposer: the IBVERBS_1.0 versions.  Programs built against
 * libibverbs 1.0 (before 2007) bind these; they pass 1.0 objects
 * (struct ibv_context_1_0, ...) that only the real libibverbs' 1.0
 * functions know, and 1.0's device list has no software NIC.  Each goes to
 * the real function of the same version, its arguments unchanged.
 */
#include "interpose.h"

/* A 1.0 function returning a value, forwarded */
#define IVP_COMPAT(_ret, _name, _params, _args) \
    __asm__(".symver ivp_" #_name "_1_0, " #_name "@" IVP_V1_0); \
    IVP_EXPORT _ret ivp_##_name##_1_0 _params \
    { \
        return IVP_REAL(_name, IVP_V1_0) _args; \
    }

/* A 1.0 function returning nothing, forwarded */
#define IVP_COMPAT_VOID(_name, _params, _args) \
    __asm__(".symver ivp_" #_name "_1_0, " #_name "@" IVP_V1_0); \
    IVP_EXPORT void ivp_##_name##_1_0 _params \
    { \
        IVP_REAL(_name, IVP_V1_0) _args; \
    }

#define C struct ibv_context
IVP_COMPAT(struct ibv_device **, ibv_get_device_list, (int *n), (n))
IVP_COMPAT_VOID(ibv_free_device_list, (struct ibv_device **l), (l))
IVP_COMPAT(const char *, ibv_get_device_name, (struct ibv_device *d), (d))
IVP_COMPAT(__be64, ibv_get_device_guid, (struct ibv_device *d), (d))
IVP_COMPAT(C *, ibv_open_device, (struct ibv_device *d), (d))
IVP_COMPAT(int, ibv_close_device, (C *c), (c))
IVP_COMPAT(int, ibv_get_async_event, (C *c, struct ibv_async_event *e),
           (c, e))
IVP_COMPAT_VOID(ibv_ack_async_event, (struct ibv_async_event *e), (e))
IVP_COMPAT(int, ibv_query_device, (C *c, struct ibv_device_attr *a), (c, a))
IVP_COMPAT(int, ibv_query_port,
           (C *c, uint8_t p, struct _compat_ibv_port_attr *a), (c, p, a))
IVP_COMPAT(int, ibv_query_gid, (C *c, uint8_t p, int i, union ibv_gid *g),
           (c, p, i, g))
IVP_COMPAT(int, ibv_query_pkey, (C *c, uint8_t p, int i, __be16 *k),
           (c, p, i, k))
IVP_COMPAT(struct ibv_pd *, ibv_alloc_pd, (C *c), (c))
IVP_COMPAT(int, ibv_dealloc_pd, (struct ibv_pd *pd), (pd))
IVP_COMPAT(struct ibv_mr *, ibv_reg_mr,
           (struct ibv_pd *pd, void *a, size_t l, int f), (pd, a, l, f))
IVP_COMPAT(int, ibv_dereg_mr, (struct ibv_mr *mr), (mr))
IVP_COMPAT(struct ibv_cq *, ibv_create_cq,
           (C *c, int n, void *x, struct ibv_comp_channel *ch, int v),
           (c, n, x, ch, v))
IVP_COMPAT(int, ibv_resize_cq, (struct ibv_cq *cq, int n), (cq, n))
IVP_COMPAT(int, ibv_destroy_cq, (struct ibv_cq *cq), (cq))
IVP_COMPAT(int, ibv_get_cq_event,
           (struct ibv_comp_channel *ch, struct ibv_cq **cq, void **x),
           (ch, cq, x))
IVP_COMPAT_VOID(ibv_ack_cq_events, (struct ibv_cq *cq, unsigned int n),
                (cq, n))
IVP_COMPAT(struct ibv_srq *, ibv_create_srq,
           (struct ibv_pd *pd, struct ibv_srq_init_attr *a), (pd, a))
IVP_COMPAT(int, ibv_modify_srq,
           (struct ibv_srq *s, struct ibv_srq_attr *a, int m), (s, a, m))
IVP_COMPAT(int, ibv_query_srq, (struct ibv_srq *s, struct ibv_srq_attr *a),
           (s, a))
IVP_COMPAT(int, ibv_destroy_srq, (struct ibv_srq *s), (s))
IVP_COMPAT(struct ibv_qp *, ibv_create_qp,
           (struct ibv_pd *pd, struct ibv_qp_init_attr *a), (pd, a))
IVP_COMPAT(int, ibv_query_qp,
           (struct ibv_qp *qp, struct ibv_qp_attr *a, int m,
            struct ibv_qp_init_attr *i), (qp, a, m, i))
IVP_COMPAT(int, ibv_modify_qp, (struct ibv_qp *qp, struct ibv_qp_attr *a,
                                int m), (qp, a, m))
IVP_COMPAT(int, ibv_destroy_qp, (struct ibv_qp *qp), (qp))
IVP_COMPAT(struct ibv_ah *, ibv_create_ah,
           (struct ibv_pd *pd, struct ibv_ah_attr *a), (pd, a))
IVP_COMPAT(int, ibv_destroy_ah, (struct ibv_ah *ah), (ah))
IVP_COMPAT(int, ibv_attach_mcast,
           (struct ibv_qp *qp, const union ibv_gid *g, uint16_t l),
           (qp, g, l))
IVP_COMPAT(int, ibv_detach_mcast,
           (struct ibv_qp *qp, const union ibv_gid *g, uint16_t l),
           (qp, g, l))
#undef C
