/*
 * Connecting the software NIC's RC QPs with the verbs alone, as the verbs
 * tools and rdma-core's tests do (RESET -> INIT -> RTR -> RTS with
 * ibv_modify_qp), for the tests that bypass the device layer.  Each step
 * returns modify_qp's errno, so that a test may expect a refusal.
 */
#ifndef RC_TM_TEST_VERBS_CONNECT_H_
#define RC_TM_TEST_VERBS_CONNECT_H_

#include "softnic/softnic.h"

#include <errno.h>
#include <string.h>
#include <time.h>

namespace verbs_connect {

inline double now_sec()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The software NIC's device dev opened, its work where progress says
 * (enum softnic_progress); nullptr on failure */
inline struct ibv_context *open_device(struct ibv_device *dev,
                                       uint32_t progress)
{
    struct ibv_context *ctx = softnic_open_device(dev);
    struct softnic_dv_attr dv;

    if (ctx == nullptr) {
        return nullptr;
    }
    memset(&dv, 0, sizeof(dv));
    dv.progress = progress;
    if (softnic_dv_set_attr(ctx, &dv) != 0) {
        softnic_close_device(ctx);
        return nullptr;
    }
    return ctx;
}

/* The address of a device by its GID (a GRH), or by its LID */
inline struct ibv_ah_attr grh_to(const union ibv_gid &dgid)
{
    struct ibv_ah_attr ah;
    memset(&ah, 0, sizeof(ah));
    ah.is_global     = 1;
    ah.port_num      = 1;
    ah.grh.dgid      = dgid;
    ah.grh.hop_limit = 64;
    return ah;
}

inline struct ibv_ah_attr lid_to(uint16_t dlid)
{
    struct ibv_ah_attr ah;
    memset(&ah, 0, sizeof(ah));
    ah.port_num = 1;
    ah.dlid     = dlid;
    return ah;
}

/* RESET -> INIT on port 1, P_Key index 0 */
inline int to_init(struct ibv_qp *qp,
                   unsigned access = IBV_ACCESS_REMOTE_WRITE)
{
    struct ibv_qp_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state        = IBV_QPS_INIT;
    attr.port_num        = 1;
    attr.qp_access_flags = access;
    return softnic_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PORT |
                             IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS);
}

/* INIT -> RTR to the QP dest of the device at ah; min_rnr_timer is the
 * RNR NAK's timer this QP gives its requester (IBTA code: 1 is 0.01 ms) */
inline int to_rtr(struct ibv_qp *qp, const struct ibv_ah_attr &ah,
                  uint32_t dest, uint8_t min_rnr_timer = 1,
                  enum ibv_mtu mtu = IBV_MTU_4096)
{
    struct ibv_qp_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state           = IBV_QPS_RTR;
    attr.path_mtu           = mtu;
    attr.dest_qp_num        = dest;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer      = min_rnr_timer;
    attr.ah_attr            = ah;
    return softnic_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV |
                             IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                             IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                             IBV_QP_MIN_RNR_TIMER);
}

/* RTR -> RTS; rnr_retry 7 retries for ever */
inline int to_rts(struct ibv_qp *qp, uint8_t rnr_retry = 7,
                  uint8_t timeout = 14)
{
    struct ibv_qp_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state      = IBV_QPS_RTS;
    attr.timeout       = timeout;
    attr.retry_cnt     = 7;
    attr.rnr_retry     = rnr_retry;
    attr.max_rd_atomic = 1;
    return softnic_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN |
                             IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                             IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* qp (RESET) to RTS, talking to the QP peer_qpn of peer_ctx's device,
 * addressed by the GID peer_ctx reads */
inline int connect_qp(struct ibv_qp *qp, struct ibv_context *peer_ctx,
                      uint32_t peer_qpn, uint8_t min_rnr_timer = 1,
                      uint8_t rnr_retry = 7)
{
    union ibv_gid gid;
    int ret;

    if (softnic_query_gid(peer_ctx, 1, 0, &gid) != 0) {
        return errno;
    }
    ret = to_init(qp);
    if (ret == 0) {
        ret = to_rtr(qp, grh_to(gid), peer_qpn, min_rnr_timer);
    }
    if (ret == 0) {
        ret = to_rts(qp, rnr_retry);
    }
    return ret;
}

} // namespace verbs_connect

#endif
