/*
 * Software NIC: address handles (softnic_ud.h), for UD sends.
 *
 * As rdma-core's mlx5 (providers/mlx5/verbs.c mlx5_create_ah): the port
 * must be the device's, and an address without a GRH is refused (EINVAL)
 * on a port that requires one (IBV_QPF_GRH_REQUIRED, which the software
 * NIC's port has) or is Ethernet.  mlx5 checks nothing else at creation:
 * an address that reaches no QP makes sends that are dropped.  The
 * software NIC also refuses a GID index other than its one GID's (0),
 * where mlx5 would let the NIC fail the send: earlier, and harsher.
 *
 * softnic_init_ah_from_wc and softnic_create_ah_from_wc answer a datagram
 * as libibverbs' ibv_init_ah_from_wc does (libibverbs/verbs.c): the
 * sender's LID, SL and path bits from the completion, and from its GRH the
 * sender's GID, flow label, traffic class and hop limit, with our GID
 * that the datagram was sent to as the source.
 */
#include "softnic_int.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The GRH's next header: IBA transport, or UDP (RoCE v2) */
#define SN_GRH_NEXT_HDR_IB     0x1b
#define SN_GRH_NEXT_HDR_UDP    17

struct ibv_ah *softnic_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
    sn_context_t *ctx = sn_ctx(pd->context);
    sn_ah_t *ah;
    uint32_t uid;

    /* every address our port takes carries a GRH (mlx5: EINVAL without
     * one where the port requires it); GID index 0 is our only GID */
    if ((attr->port_num != 1) || !attr->is_global ||
        (attr->grh.sgid_index != 0)) {
        errno = EINVAL;
        return NULL;
    }
    ah = calloc(1, sizeof(*ah));
    if (ah == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    ah->ibv.context = pd->context;
    ah->ibv.pd      = pd;
    ah->attr        = *attr;
    ah->reachable   = (sn_av_uid(ctx, attr, &uid) == 0);
    ah->uid         = uid;
    if (!ah->reachable) {
        sn_debug("address handle %p names no software NIC of this host and "
                 "user: its datagrams will be dropped", (void*)ah);
    }
    return &ah->ibv;
}

int softnic_destroy_ah(struct ibv_ah *ah)
{
    free(sn_ah(ah));
    return 0;
}

int softnic_init_ah_from_wc(struct ibv_context *context, uint8_t port_num,
                            struct ibv_wc *wc, struct ibv_grh *grh,
                            struct ibv_ah_attr *ah_attr)
{
    sn_context_t *ctx = sn_ctx(context);
    uint8_t next_hdr  = (ctx->link_layer == IBV_LINK_LAYER_ETHERNET) ?
                        SN_GRH_NEXT_HDR_UDP : SN_GRH_NEXT_HDR_IB;
    uint32_t flow_class;

    memset(ah_attr, 0, sizeof(*ah_attr));
    ah_attr->dlid          = wc->slid;
    ah_attr->sl            = wc->sl;
    ah_attr->src_path_bits = wc->dlid_path_bits;
    ah_attr->port_num      = port_num;
    if (!(wc->wc_flags & IBV_WC_GRH)) {
        return 0;
    }
    flow_class = be32toh(grh->version_tclass_flow);
    if ((flow_class >> 28) != 6) {
        errno = EPROTONOSUPPORT;    /* our GRHs are all of version 6 */
        return -1;
    }
    if ((grh->dgid.raw[0] == 0xff) || (grh->next_hdr != next_hdr)) {
        errno = (grh->dgid.raw[0] == 0xff) ? EINVAL : EPROTONOSUPPORT;
        return -1;
    }
    if ((port_num != 1) ||
        memcmp(&grh->dgid, &ctx->gid, sizeof(grh->dgid))) {
        errno = ENOENT;             /* not a GID of our port's table */
        return -1;
    }
    ah_attr->is_global         = 1;
    ah_attr->grh.dgid          = grh->sgid;
    ah_attr->grh.flow_label    = flow_class & 0xfffff;
    ah_attr->grh.traffic_class = (uint8_t)(flow_class >> 20);
    ah_attr->grh.hop_limit     = grh->hop_limit;
    ah_attr->grh.sgid_index    = 0;
    return 0;
}

struct ibv_ah *softnic_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
                                         struct ibv_grh *grh, uint8_t port_num)
{
    struct ibv_ah_attr attr;

    if (softnic_init_ah_from_wc(pd->context, port_num, wc, grh, &attr) != 0) {
        return NULL;
    }
    return softnic_create_ah(pd, &attr);
}
