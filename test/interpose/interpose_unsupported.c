/*
 * Interposer: verbs of objects and features the software NIC does not have
 * (multicast, ECE, re-registration, dma-buf regions, imported objects,
 * Ethernet L2 resolution).  On a software NIC's object each fails as libibverbs does
 * over a provider without the operation (EOPNOTSUPP, in the form the
 * function documents); other objects go to the real libibverbs.
 */
#include "interpose.h"

/* Ethernet: a negative errno, as libibverbs' own failures */
IVP_EXPORT int (ibv_resolve_eth_l2_from_gid)(struct ibv_context *context,
                                             struct ibv_ah_attr *attr,
                                             uint8_t eth_mac[6],
                                             uint16_t *vid)
{
    if (ivp_soft(context)) {
        errno = EOPNOTSUPP;
        return -EOPNOTSUPP;
    }
    return IVP_REAL(ibv_resolve_eth_l2_from_gid, IVP_V1_1)(context, attr,
                                                           eth_mac, vid);
}


/* ---- multicast, ECE, extended QPs ---- */

IVP_EXPORT int (ibv_attach_mcast)(struct ibv_qp *qp, const union ibv_gid *gid,
                                  uint16_t lid)
{
    if (ivp_soft(qp->context)) {
        return EOPNOTSUPP;
    }
    return IVP_REAL(ibv_attach_mcast, IVP_V1_1)(qp, gid, lid);
}

IVP_EXPORT int (ibv_detach_mcast)(struct ibv_qp *qp, const union ibv_gid *gid,
                                  uint16_t lid)
{
    if (ivp_soft(qp->context)) {
        return EOPNOTSUPP;
    }
    return IVP_REAL(ibv_detach_mcast, IVP_V1_1)(qp, gid, lid);
}

IVP_EXPORT int (ibv_set_ece)(struct ibv_qp *qp, struct ibv_ece *ece)
{
    if (ivp_soft(qp->context)) {
        errno = EOPNOTSUPP;
        return EOPNOTSUPP;
    }
    return IVP_REAL(ibv_set_ece, "IBVERBS_1.10")(qp, ece);
}

IVP_EXPORT int (ibv_query_ece)(struct ibv_qp *qp, struct ibv_ece *ece)
{
    if (ivp_soft(qp->context)) {
        return EOPNOTSUPP;
    }
    return IVP_REAL(ibv_query_ece, "IBVERBS_1.10")(qp, ece);
}

/* 0: no promise of data order, libibverbs' answer for a provider that
 * makes none */
IVP_EXPORT int (ibv_query_qp_data_in_order)(struct ibv_qp *qp,
                                            enum ibv_wr_opcode op,
                                            uint32_t flags)
{
    if (ivp_soft(qp->context)) {
        return 0;
    }
    return IVP_REAL(ibv_query_qp_data_in_order, "IBVERBS_1.14")(qp, op,
                                                                flags);
}


/* ---- memory: re-registration, dma-buf ---- */

IVP_EXPORT int (ibv_rereg_mr)(struct ibv_mr *mr, int flags, struct ibv_pd *pd,
                              void *addr, size_t length, int access)
{
    if (ivp_soft(mr->context)) {
        errno = EOPNOTSUPP;
        return IBV_REREG_MR_ERR_INPUT;  /* the old MR stays valid */
    }
    return IVP_REAL(ibv_rereg_mr, IVP_V1_1)(mr, flags, pd, addr, length,
                                            access);
}

IVP_EXPORT struct ibv_mr *(ibv_reg_dmabuf_mr)(struct ibv_pd *pd,
                                              uint64_t offset, size_t length,
                                              uint64_t iova, int fd,
                                              int access)
{
    if (ivp_soft(pd->context)) {
        return ivp_null_eopnotsupp();
    }
    return IVP_REAL(ibv_reg_dmabuf_mr, "IBVERBS_1.12")(pd, offset, length,
                                                       iova, fd, access);
}


/* ---- imported objects: a software NIC's objects are not shared through
 * a command file descriptor ---- */

IVP_EXPORT struct ibv_pd *(ibv_import_pd)(struct ibv_context *context,
                                          uint32_t pd_handle)
{
    if (ivp_soft(context)) {
        return ivp_null_eopnotsupp();
    }
    return IVP_REAL(ibv_import_pd, "IBVERBS_1.10")(context, pd_handle);
}

/* Nothing of the software NIC was imported: nothing to undo */
IVP_EXPORT void (ibv_unimport_pd)(struct ibv_pd *pd)
{
    if (!ivp_soft(pd->context)) {
        IVP_REAL(ibv_unimport_pd, "IBVERBS_1.10")(pd);
    }
}

IVP_EXPORT struct ibv_mr *(ibv_import_mr)(struct ibv_pd *pd,
                                          uint32_t mr_handle)
{
    if (ivp_soft(pd->context)) {
        return ivp_null_eopnotsupp();
    }
    return IVP_REAL(ibv_import_mr, "IBVERBS_1.10")(pd, mr_handle);
}

IVP_EXPORT void (ibv_unimport_mr)(struct ibv_mr *mr)
{
    if (!ivp_soft(mr->context)) {
        IVP_REAL(ibv_unimport_mr, "IBVERBS_1.10")(mr);
    }
}

IVP_EXPORT struct ibv_dm *(ibv_import_dm)(struct ibv_context *context,
                                          uint32_t dm_handle)
{
    if (ivp_soft(context)) {
        return ivp_null_eopnotsupp();
    }
    return IVP_REAL(ibv_import_dm, "IBVERBS_1.13")(context, dm_handle);
}

IVP_EXPORT void (ibv_unimport_dm)(struct ibv_dm *dm)
{
    if (!ivp_soft(dm->context)) {
        IVP_REAL(ibv_unimport_dm, "IBVERBS_1.13")(dm);
    }
}
