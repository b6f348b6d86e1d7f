/*
 * Interposer: the objects the software NIC has (PD, MR, completion
 * channel, CQ, SRQ, QP, and a QP's ibv_qp_ex from ibv_qp_to_qp_ex, set
 * when ibv_create_qp_ex was given send ops; address handles).  Each verb goes to softnic_<verb> when its object
 * belongs to a software NIC's context, else to the real libibverbs.
 */
#include "interpose.h"

/* ---- protection domains and memory regions ---- */

IVP_EXPORT struct ibv_pd *(ibv_alloc_pd)(struct ibv_context *context)
{
    if (ivp_soft(context)) {
        return softnic_alloc_pd(context);
    }
    return IVP_REAL(ibv_alloc_pd, IVP_V1_1)(context);
}

IVP_EXPORT int (ibv_dealloc_pd)(struct ibv_pd *pd)
{
    if (ivp_soft(pd->context)) {
        return softnic_dealloc_pd(pd);
    }
    return IVP_REAL(ibv_dealloc_pd, IVP_V1_1)(pd);
}

/* The software NIC's keys name the process's own addresses: a region whose
 * I/O virtual address is not its address is not supported */
static struct ibv_mr *ivp_soft_reg_mr(struct ibv_pd *pd, void *addr,
                                      size_t length, uint64_t iova,
                                      unsigned int access)
{
    if (iova != (uintptr_t)addr) {
        return ivp_null_eopnotsupp();
    }
    return softnic_reg_mr(pd, addr, length, (int)access);
}

IVP_EXPORT struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr,
                                       size_t length, int access)
{
    if (ivp_soft(pd->context)) {
        return ivp_soft_reg_mr(pd, addr, length, (uintptr_t)addr,
                               (unsigned int)access);
    }
    return IVP_REAL(ibv_reg_mr, IVP_V1_1)(pd, addr, length, access);
}

IVP_EXPORT struct ibv_mr *(ibv_reg_mr_iova)(struct ibv_pd *pd, void *addr,
                                            size_t length, uint64_t iova,
                                            int access)
{
    if (ivp_soft(pd->context)) {
        return ivp_soft_reg_mr(pd, addr, length, iova, (unsigned int)access);
    }
    return IVP_REAL(ibv_reg_mr_iova, "IBVERBS_1.7")(pd, addr, length, iova,
                                                    access);
}

IVP_EXPORT struct ibv_mr *(ibv_reg_mr_iova2)(struct ibv_pd *pd, void *addr,
                                             size_t length, uint64_t iova,
                                             unsigned int access)
{
    if (ivp_soft(pd->context)) {
        return ivp_soft_reg_mr(pd, addr, length, iova, access);
    }
    return IVP_REAL(ibv_reg_mr_iova2, "IBVERBS_1.8")(pd, addr, length, iova,
                                                     access);
}

IVP_EXPORT int (ibv_dereg_mr)(struct ibv_mr *mr)
{
    if (ivp_soft(mr->context)) {
        return softnic_dereg_mr(mr);
    }
    return IVP_REAL(ibv_dereg_mr, IVP_V1_1)(mr);
}


/* ---- completion channels and CQs ---- */

IVP_EXPORT struct ibv_comp_channel *
(ibv_create_comp_channel)(struct ibv_context *context)
{
    if (ivp_soft(context)) {
        return softnic_create_comp_channel(context);
    }
    return IVP_REAL(ibv_create_comp_channel, IVP_V1_0)(context);
}

IVP_EXPORT int (ibv_destroy_comp_channel)(struct ibv_comp_channel *channel)
{
    if (ivp_soft(channel->context)) {
        return softnic_destroy_comp_channel(channel);
    }
    return IVP_REAL(ibv_destroy_comp_channel, IVP_V1_0)(channel);
}

IVP_EXPORT struct ibv_cq *(ibv_create_cq)(struct ibv_context *context,
                                          int cqe, void *cq_context,
                                          struct ibv_comp_channel *channel,
                                          int comp_vector)
{
    if (ivp_soft(context)) {
        return softnic_create_cq(context, cqe, cq_context, channel,
                                 comp_vector);
    }
    return IVP_REAL(ibv_create_cq, IVP_V1_1)(context, cqe, cq_context,
                                             channel, comp_vector);
}

IVP_EXPORT int (ibv_resize_cq)(struct ibv_cq *cq, int cqe)
{
    if (ivp_soft(cq->context)) {
        return softnic_resize_cq(cq, cqe);
    }
    return IVP_REAL(ibv_resize_cq, IVP_V1_1)(cq, cqe);
}

IVP_EXPORT int (ibv_destroy_cq)(struct ibv_cq *cq)
{
    if (ivp_soft(cq->context)) {
        return softnic_destroy_cq(cq);
    }
    return IVP_REAL(ibv_destroy_cq, IVP_V1_1)(cq);
}

IVP_EXPORT int (ibv_get_cq_event)(struct ibv_comp_channel *channel,
                                  struct ibv_cq **cq, void **cq_context)
{
    if (ivp_soft(channel->context)) {
        return softnic_get_cq_event(channel, cq, cq_context);
    }
    return IVP_REAL(ibv_get_cq_event, IVP_V1_1)(channel, cq, cq_context);
}

IVP_EXPORT void (ibv_ack_cq_events)(struct ibv_cq *cq, unsigned int nevents)
{
    if (ivp_soft(cq->context)) {
        softnic_ack_cq_events(cq, nevents);
        return;
    }
    IVP_REAL(ibv_ack_cq_events, IVP_V1_1)(cq, nevents);
}


/* ---- shared receive queues ---- */

IVP_EXPORT struct ibv_srq *(ibv_create_srq)(struct ibv_pd *pd,
                                            struct ibv_srq_init_attr *attr)
{
    if (ivp_soft(pd->context)) {
        return softnic_create_srq(pd, attr);
    }
    return IVP_REAL(ibv_create_srq, IVP_V1_1)(pd, attr);
}

IVP_EXPORT int (ibv_modify_srq)(struct ibv_srq *srq,
                                struct ibv_srq_attr *attr, int attr_mask)
{
    if (ivp_soft(srq->context)) {
        return softnic_modify_srq(srq, attr, attr_mask);
    }
    return IVP_REAL(ibv_modify_srq, IVP_V1_1)(srq, attr, attr_mask);
}

IVP_EXPORT int (ibv_query_srq)(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
    if (ivp_soft(srq->context)) {
        return softnic_query_srq(srq, attr);
    }
    return IVP_REAL(ibv_query_srq, IVP_V1_1)(srq, attr);
}

IVP_EXPORT int (ibv_destroy_srq)(struct ibv_srq *srq)
{
    if (ivp_soft(srq->context)) {
        return softnic_destroy_srq(srq);
    }
    return IVP_REAL(ibv_destroy_srq, IVP_V1_1)(srq);
}


/* ---- queue pairs ---- */

IVP_EXPORT struct ibv_qp *(ibv_create_qp)(struct ibv_pd *pd,
                                          struct ibv_qp_init_attr *attr)
{
    if (ivp_soft(pd->context)) {
        return softnic_create_qp(pd, attr);
    }
    return IVP_REAL(ibv_create_qp, IVP_V1_1)(pd, attr);
}

IVP_EXPORT int (ibv_modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr,
                               int attr_mask)
{
    if (ivp_soft(qp->context)) {
        return softnic_modify_qp(qp, attr, attr_mask);
    }
    return IVP_REAL(ibv_modify_qp, IVP_V1_1)(qp, attr, attr_mask);
}

IVP_EXPORT int (ibv_query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr,
                              int attr_mask,
                              struct ibv_qp_init_attr *init_attr)
{
    if (ivp_soft(qp->context)) {
        return softnic_query_qp(qp, attr, attr_mask, init_attr);
    }
    return IVP_REAL(ibv_query_qp, IVP_V1_1)(qp, attr, attr_mask, init_attr);
}

IVP_EXPORT int (ibv_destroy_qp)(struct ibv_qp *qp)
{
    if (ivp_soft(qp->context)) {
        return softnic_destroy_qp(qp);
    }
    return IVP_REAL(ibv_destroy_qp, IVP_V1_1)(qp);
}

/* A soft QP is not a struct verbs_qp: libibverbs' own would read past it */
IVP_EXPORT struct ibv_qp_ex *(ibv_qp_to_qp_ex)(struct ibv_qp *qp)
{
    if (ivp_soft(qp->context)) {
        return softnic_qp_to_qp_ex(qp);
    }
    return IVP_REAL(ibv_qp_to_qp_ex, "IBVERBS_1.6")(qp);
}


/* ---- address handles ---- */

IVP_EXPORT struct ibv_ah *(ibv_create_ah)(struct ibv_pd *pd,
                                          struct ibv_ah_attr *attr)
{
    if (ivp_soft(pd->context)) {
        return softnic_create_ah(pd, attr);
    }
    return IVP_REAL(ibv_create_ah, IVP_V1_1)(pd, attr);
}

IVP_EXPORT int (ibv_destroy_ah)(struct ibv_ah *ah)
{
    if (ivp_soft(ah->context)) {
        return softnic_destroy_ah(ah);
    }
    return IVP_REAL(ibv_destroy_ah, IVP_V1_1)(ah);
}

/* libibverbs' own would query the port and GID table through libibverbs'
 * internal calls, which never reach the interposer */
IVP_EXPORT int (ibv_init_ah_from_wc)(struct ibv_context *context,
                                     uint8_t port_num, struct ibv_wc *wc,
                                     struct ibv_grh *grh,
                                     struct ibv_ah_attr *ah_attr)
{
    if (ivp_soft(context)) {
        return softnic_init_ah_from_wc(context, port_num, wc, grh, ah_attr);
    }
    return IVP_REAL(ibv_init_ah_from_wc, IVP_V1_1)(context, port_num, wc,
                                                   grh, ah_attr);
}

IVP_EXPORT struct ibv_ah *(ibv_create_ah_from_wc)(struct ibv_pd *pd,
                                                  struct ibv_wc *wc,
                                                  struct ibv_grh *grh,
                                                  uint8_t port_num)
{
    if (ivp_soft(pd->context)) {
        return softnic_create_ah_from_wc(pd, wc, grh, port_num);
    }
    return IVP_REAL(ibv_create_ah_from_wc, IVP_V1_1)(pd, wc, grh, port_num);
}
