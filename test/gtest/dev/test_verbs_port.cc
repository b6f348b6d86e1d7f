/*
 * Tests of the verbs backend's routes and of the first listed device: the
 * address vector to a peer (LID or, across InfiniBand subnets, FLID; when a
 * GRH goes with it) and reachability across subnets, all pure; then, on the
 * first device listed (a TM NIC where there is one, else the software NIC),
 * open, registration, a tagged message over a loopback connection and the
 * RC parameters of connected QPs.  The rest of the backend: test_verbs.cc,
 * test_verbs_poll.cc.
 */
#include <gtest/gtest.h>

#include "dev/tm_dev.h"
#include "dev/verbs/verbs_dev.h"
#include "dev/verbs/verbs_lib.h"

#include <infiniband/tm_types.h>
#include <arpa/inet.h>
#include <endian.h>
#include <string.h>

#include <iostream>
#include <vector>

/* ------------------------------------------------------------------------
 * Routes (pure).  InfiniBand routing by FLID (UCX 1.16+):
 * fec0:0000:FLID:SUBNET::/64
 */
namespace {

union ibv_gid make_gid(uint64_t prefix, uint64_t id)
{
    union ibv_gid gid;

    gid.global.subnet_prefix = htobe64(prefix);
    gid.global.interface_id  = htobe64(id);
    return gid;
}

union ibv_gid flid_gid(uint16_t flid, uint16_t subnet, uint64_t id)
{
    return make_gid(0xfec0000000000000ull | ((uint64_t)flid << 16) | subnet,
                    id);
}

tm_verbs_local_t ib_local(const union ibv_gid &gid)
{
    tm_verbs_local_t local;

    memset(&local, 0, sizeof(local));
    local.link_layer = IBV_LINK_LAYER_INFINIBAND;
    local.port_num   = 1;
    local.gid_index  = 3;
    local.gid        = gid;
    return local;
}

tm_verbs_peer_t ib_peer(uint16_t lid, const union ibv_gid &gid)
{
    tm_verbs_peer_t peer;

    memset(&peer, 0, sizeof(peer));
    peer.link_layer = IBV_LINK_LAYER_INFINIBAND;
    peer.lid        = lid;
    peer.gid        = gid;
    return peer;
}

} // namespace

TEST(verbs_route, flid_is_in_site_local_gids_only)
{
    union ibv_gid gid = flid_gid(0x1234, 0x0007, 1);

    EXPECT_EQ(0xfe, gid.raw[0]);
    EXPECT_EQ(0x12, gid.raw[4]);
    EXPECT_EQ(0x1234, tm_verbs_gid_flid(&gid));
    gid = make_gid(0xfe80000000000000ull, 1);               /* link local */
    EXPECT_EQ(0, tm_verbs_gid_flid(&gid));
    gid = make_gid(0xfec0000100000000ull | 0x12340007, 1);  /* not fec0:0000 */
    EXPECT_EQ(0, tm_verbs_gid_flid(&gid));
}

TEST(verbs_route, same_subnet_goes_by_lid_without_grh)
{
    union ibv_gid gid = make_gid(0xfe80000000000000ull, 1);
    tm_verbs_local_t local = ib_local(gid);
    tm_verbs_peer_t peer   = ib_peer(0x21,
                                     make_gid(0xfe80000000000000ull, 2));
    struct ibv_ah_attr ah;

    tm_verbs_ah_attr_fill(&local, &peer, &ah);
    EXPECT_EQ(0x21, ah.dlid);
    EXPECT_EQ(1, ah.port_num);
    EXPECT_EQ(0, ah.is_global);

    /* a port that requires a GRH gets one, still to the LID; RoCE too */
    local.port_flags = IBV_QPF_GRH_REQUIRED;
    tm_verbs_ah_attr_fill(&local, &peer, &ah);
    EXPECT_EQ(0x21, ah.dlid);
    EXPECT_EQ(1, ah.is_global);
    local.port_flags = 0;
    local.link_layer = IBV_LINK_LAYER_ETHERNET;
    tm_verbs_ah_attr_fill(&local, &peer, &ah);
    EXPECT_EQ(1, ah.is_global);
    EXPECT_EQ(0, memcmp(peer.gid.raw, ah.grh.dgid.raw, 16));
}

/* Another subnet: the routers forward by the peer's FLID, not its LID (which
 * only its own subnet knows), with the global route to its GID */
TEST(verbs_route, other_subnet_goes_by_flid_with_grh)
{
    tm_verbs_local_t local = ib_local(flid_gid(0x0c01, 0x0001, 1));
    tm_verbs_peer_t peer   = ib_peer(0x21, flid_gid(0x0c77, 0x0002, 2));
    struct ibv_ah_attr ah;

    tm_verbs_ah_attr_fill(&local, &peer, &ah);
    EXPECT_EQ(0x0c77, ah.dlid);
    ASSERT_EQ(1, ah.is_global);
    EXPECT_EQ(0, memcmp(peer.gid.raw, ah.grh.dgid.raw, 16));
    EXPECT_EQ(3, ah.grh.sgid_index);
    EXPECT_EQ(TM_VERBS_HOP_LIMIT, ah.grh.hop_limit);

    /* the same site-local subnet: the LID routes (prefixes still differ,
     * by the FLIDs, so the GRH stays) */
    peer = ib_peer(0x21, flid_gid(0x0c77, 0x0001, 2));
    tm_verbs_ah_attr_fill(&local, &peer, &ah);
    EXPECT_EQ(0x21, ah.dlid);
    EXPECT_EQ(1, ah.is_global);

    /* without a FLID of our own there is no FLID route */
    local = ib_local(make_gid(0xfe80000000000000ull, 1));
    peer  = ib_peer(0x21, flid_gid(0x0c77, 0x0002, 2));
    tm_verbs_ah_attr_fill(&local, &peer, &ah);
    EXPECT_EQ(0x21, ah.dlid);
}

/* Across subnets only with a FLID on both sides */
TEST(verbs_route, other_subnet_is_reachable_by_flid_only)
{
    union ibv_gid ours = flid_gid(0x0c01, 0x0001, 1);
    union ibv_gid ll   = make_gid(0xfe80000000000000ull, 1);
    tm_verbs_peer_t peer = ib_peer(0x21, flid_gid(0x0c77, 0x0002, 2));

    EXPECT_TRUE(tm_verbs_peer_reachable(IBV_LINK_LAYER_INFINIBAND, &ours,
                                        &peer));
    EXPECT_FALSE(tm_verbs_peer_reachable(IBV_LINK_LAYER_INFINIBAND, &ll,
                                         &peer));
    peer = ib_peer(0x21, make_gid(0xfec0000000000002ull, 2));
    EXPECT_FALSE(tm_verbs_peer_reachable(IBV_LINK_LAYER_INFINIBAND, &ours,
                                         &peer));
}


/* ------------------------------------------------------------------------
 * On the first device listed: a TM-capable NIC where there is one (e.g.
 * mlx5 ConnectX-5 or later with an active port), else the software NIC,
 * through the same functions
 */
namespace {

class verbs_hw : public ::testing::Test {
protected:
    void SetUp() override {
        tm_dev_info_t info[8];
        unsigned count = tm_dev_list(info, 8);

        ASSERT_GE(count, 1u) << "the software NIC is always listed";
        m_info = info[0];
        std::cout << "[ device   ] " << m_info.name << " ("
                  << m_info.lib->name << ")" << std::endl;

        memset(&m_attr, 0, sizeof(m_attr));
        m_attr.max_num_tags = 16;
        m_attr.max_ops      = 16;
        m_attr.srq_depth    = 64;
        ASSERT_EQ(0, tm_dev_open(&m_info, &m_attr, &m_dev)) << m_info.name;
        tm_dev_query(m_dev, &m_caps);
    }

    void TearDown() override {
        if (m_dev != NULL) {
            tm_dev_close(m_dev);
        }
    }

    /* Two connections on srq, connected to each other */
    void loopback(tm_dev_srq_t *srq, tm_dev_cq_t *send_cq, tm_dev_conn_t **a,
                  tm_dev_conn_t **b) {
        uint8_t dev_addr[TM_DEV_ADDR_MAX], addr_a[TM_DEV_ADDR_MAX],
                addr_b[TM_DEV_ADDR_MAX];

        ASSERT_EQ(0, tm_dev_create_conn(m_dev, srq, send_cq, a));
        ASSERT_EQ(0, tm_dev_create_conn(m_dev, srq, send_cq, b));
        EXPECT_NE(tm_dev_conn_qp_num(*a), tm_dev_conn_qp_num(*b));
        tm_dev_addr(m_dev, dev_addr);
        tm_dev_conn_addr(*a, addr_a);
        tm_dev_conn_addr(*b, addr_b);
        ASSERT_EQ(0, tm_dev_connect(*a, dev_addr, addr_b));
        ASSERT_EQ(0, tm_dev_connect(*b, dev_addr, addr_a));
    }

    int poll_one(tm_dev_cq_t *cq, tm_dev_wc_t *wc) {
        for (int i = 0; i < 10000000; ++i) {
            int n = tm_dev_poll_cq(cq, 1, wc);
            if (n != 0) {
                return n;
            }
        }
        return 0;
    }

    tm_dev_info_t  m_info;
    tm_dev_attr_t  m_attr;
    tm_dev_t       *m_dev = NULL;
    tm_dev_caps_t  m_caps;
};

} // namespace

TEST_F(verbs_hw, open_and_query)
{
    EXPECT_STREQ(m_info.name, m_dev->name);
    EXPECT_TRUE(m_caps.tm.flags & IBV_TM_CAP_RC);
    EXPECT_EQ(16u, m_caps.tm.max_num_tags);
    EXPECT_LE(m_caps.tm.max_ops, 16u);
    EXPECT_EQ(64u, m_caps.max_srq_wr);
    EXPECT_GT(m_caps.tm.max_rndv_hdr_size, 0u);
    EXPECT_GT(m_caps.max_msg_size, 0u);
    EXPECT_GT(m_caps.eager_packet_size, 0u);

    uint8_t addr[TM_DEV_ADDR_MAX];
    tm_dev_addr(m_dev, addr);
    EXPECT_TRUE(tm_dev_is_reachable(m_dev, addr));
}

TEST_F(verbs_hw, inline_size_is_what_the_probe_qp_got)
{
    /* UCX's minimum is asked; mlx5 (and the software NIC, as mlx5) grant
     * what fills the WQE: 124 bytes (tm_verbs_mlx5_sq_size) */
    tm_verbs_mlx5_sq_t sq;

    ASSERT_EQ(0, tm_verbs_mlx5_sq_size(1, TM_VERBS_MAX_SEND_SGE,
                                       TM_VERBS_MIN_INLINE, 512, &sq));
    EXPECT_GE(m_caps.max_inline, (uint32_t)TM_VERBS_MIN_INLINE);
    EXPECT_LE(m_caps.max_inline, 1024u);
    if (m_info.lib == &tm_verbs_softnic) {
        EXPECT_EQ(sq.max_inline, m_caps.max_inline);
        EXPECT_EQ(124u, m_caps.max_inline);
    }
}

TEST_F(verbs_hw, reg_mr)
{
    std::vector<char> buf(8192);
    tm_dev_mr_t *mr;

    ASSERT_EQ(0, tm_dev_reg_mr(m_dev, buf.data(), buf.size(), 0, &mr));
    EXPECT_EQ(tm_dev_ibv_context(m_dev), mr->context);
    EXPECT_EQ(buf.data(), mr->addr);
    EXPECT_EQ(buf.size(), mr->length);
    EXPECT_EQ(0, tm_dev_dereg_mr(m_dev, mr));
}

TEST_F(verbs_hw, tagged_eager_send_over_loopback)
{
    const size_t size = 4096;
    std::vector<char> buf(8 * size);
    tm_dev_cq_t *send_cq, *recv_cq;
    tm_dev_srq_t *srq;
    tm_dev_conn_t *a, *b;
    tm_dev_mr_t *mr;
    tm_dev_wc_t wc;

    ASSERT_EQ(0, tm_dev_reg_mr(m_dev, buf.data(), buf.size(), 0, &mr));
    ASSERT_EQ(0, tm_dev_create_cq(m_dev, 64, &send_cq));
    ASSERT_EQ(0, tm_dev_create_cq(m_dev, 256, &recv_cq));
    ASSERT_EQ(0, tm_dev_create_srq(m_dev, recv_cq, &srq));
    ASSERT_NO_FATAL_FAILURE(loopback(srq, send_cq, &a, &b));

    /* Untagged buffers (mlx5 wants a few dozen before matching) */
    for (uint64_t i = 0; i < 40; ++i) {
        struct ibv_sge sge = {(uintptr_t)buf.data() + 2 * size, (uint32_t)size,
                              mr->lkey};
        struct ibv_recv_wr wr, *bad;

        memset(&wr, 0, sizeof(wr));
        wr.wr_id   = 1000 + i;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ASSERT_EQ(0, tm_dev_post_srq_recv(srq, &wr, &bad));
    }

    /* A tagged buffer for tag 0x55 */
    struct ibv_sge tsge = {(uintptr_t)buf.data() + size, (uint32_t)size,
                           mr->lkey};
    struct ibv_ops_wr op, *bad_op;
    memset(&op, 0, sizeof(op));
    op.wr_id              = 77;
    op.opcode             = IBV_WR_TAG_ADD;
    op.flags              = IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC;
    op.tm.unexpected_cnt  = 0;
    op.tm.add.recv_wr_id  = 55;
    op.tm.add.sg_list     = &tsge;
    op.tm.add.num_sge     = 1;
    op.tm.add.tag         = 0x55;
    op.tm.add.mask        = ~0ull;
    ASSERT_EQ(0, tm_dev_post_srq_ops(srq, &op, &bad_op));
    ASSERT_EQ(1, poll_one(recv_cq, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(IBV_WC_TM_ADD, wc.opcode);
    EXPECT_EQ(77u, wc.wr_id);

    /* EAGER message with tag 0x55 from a to b */
    struct ibv_tmh *tmh = (struct ibv_tmh*)buf.data();
    memset(tmh, 0, sizeof(*tmh));
    tmh->opcode  = IBV_TMH_EAGER;
    tmh->app_ctx = htonl(0x1234);
    tmh->tag     = htobe64(0x55);
    memset(buf.data() + sizeof(*tmh), 'x', 100);

    struct ibv_sge ssge = {(uintptr_t)buf.data(),
                           (uint32_t)(sizeof(*tmh) + 100), mr->lkey};
    struct ibv_send_wr swr, *bad_swr;
    memset(&swr, 0, sizeof(swr));
    swr.wr_id      = 9;
    swr.sg_list    = &ssge;
    swr.num_sge    = 1;
    swr.opcode     = IBV_WR_SEND;
    swr.send_flags = IBV_SEND_SIGNALED;
    ASSERT_EQ(0, tm_dev_post_send(a, &swr, &bad_swr));

    /* Either completion may come first: poll both CQs (a NIC acknowledges
     * the send by itself; the software NIC's receive side runs when the
     * receive CQ is polled) */
    tm_dev_wc_t swc;
    int got_send = 0, got_recv = 0;
    for (int i = 0; (i < 10000000) && !(got_send && got_recv); ++i) {
        got_send += tm_dev_poll_cq(send_cq, 1, &swc);
        got_recv += got_recv ? 0 : tm_dev_poll_cq(recv_cq, 1, &wc);
    }
    ASSERT_EQ(1, got_send);
    EXPECT_EQ(IBV_WC_SUCCESS, swc.status);
    EXPECT_EQ(9u, swc.wr_id);
    EXPECT_EQ(tm_dev_conn_qp_num(a), swc.qp_num);

    ASSERT_EQ(1, got_recv);
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(IBV_WC_TM_RECV, wc.opcode);
    EXPECT_EQ(55u, wc.wr_id);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_TM_MATCH);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_TM_DATA_VALID);
    EXPECT_EQ(0x55ull, wc.tm_info.tag);
    EXPECT_EQ(0x1234u, wc.tm_info.priv);
    EXPECT_EQ(tm_dev_conn_rx_qp_num(b), wc.qp_num);
    EXPECT_EQ(100u, wc.byte_len);
    EXPECT_EQ(0, memcmp(buf.data() + size, buf.data() + sizeof(*tmh), 100));

    tm_dev_destroy_conn(a);
    tm_dev_destroy_conn(b);
    tm_dev_destroy_srq(srq);
    tm_dev_destroy_cq(recv_cq);
    tm_dev_destroy_cq(send_cq);
    EXPECT_EQ(0, tm_dev_dereg_mr(m_dev, mr));
}

/* The RC parameters of connected QPs, read back through the device's own
 * ibv_query_qp: UCX's defaults (rc_iface.c: RNR_TIMEOUT=1ms, encoded 13) */
TEST_F(verbs_hw, connected_qps_have_ucx_rc_parameters)
{
    tm_dev_cq_t *cq;
    tm_dev_srq_t *srq;
    tm_dev_conn_t *a, *b;

    ASSERT_EQ(0, tm_dev_create_cq(m_dev, 64, &cq));
    ASSERT_EQ(0, tm_dev_create_srq(m_dev, cq, &srq));
    ASSERT_NO_FATAL_FAILURE(loopback(srq, cq, &a, &b));

    for (struct ibv_qp *qp : {tm_dev_ibv_qp(a), tm_dev_ibv_rx_qp(a),
                              tm_dev_ibv_qp(b), tm_dev_ibv_rx_qp(b)}) {
        struct ibv_qp_attr attr;
        struct ibv_qp_init_attr init;

        memset(&attr, 0, sizeof(attr));
        ASSERT_EQ(0, m_info.lib->query_qp(qp, &attr,
                                          IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER |
                                          IBV_QP_TIMEOUT | IBV_QP_RNR_RETRY |
                                          IBV_QP_RETRY_CNT, &init));
        EXPECT_EQ(IBV_QPS_RTS, attr.qp_state) << qp->qp_num;
        EXPECT_EQ(13, attr.min_rnr_timer) << "0.96 ms, UCX's 1 ms";
        EXPECT_EQ(18, attr.timeout);
        EXPECT_EQ(7, attr.retry_cnt);
        EXPECT_EQ(7, attr.rnr_retry);
    }

    tm_dev_destroy_conn(a);
    tm_dev_destroy_conn(b);
    tm_dev_destroy_srq(srq);
    tm_dev_destroy_cq(cq);
}

/* The local ACK timeout and retry count the device was opened with (rc_tm:
 * UCX_RC_TM_TIMEOUT, RETRY_COUNT) on every QP of a connection, those
 * connected to a remote SRQ too; out of their 5 and 3 bits, no device */
TEST_F(verbs_hw, connected_qps_have_the_timeout_asked)
{
    tm_dev_t *bad;
    tm_dev_attr_t attr = m_attr;
    attr.timeout = TM_DEV_ATTR_SET | 32;
    EXPECT_EQ(EINVAL, tm_dev_open(&m_info, &attr, &bad));
    attr.timeout   = TM_DEV_ATTR_SET | 12;
    attr.retry_cnt = TM_DEV_ATTR_SET | 8;
    EXPECT_EQ(EINVAL, tm_dev_open(&m_info, &attr, &bad));

    tm_dev_close(m_dev);
    m_dev = NULL;
    attr.retry_cnt = TM_DEV_ATTR_SET | 0;
    ASSERT_EQ(0, tm_dev_open(&m_info, &attr, &m_dev));

    tm_dev_cq_t *cq;
    tm_dev_srq_t *srq;
    tm_dev_conn_t *a, *b, *c = NULL;
    ASSERT_EQ(0, tm_dev_create_cq(m_dev, 64, &cq));
    ASSERT_EQ(0, tm_dev_create_srq(m_dev, cq, &srq));
    ASSERT_NO_FATAL_FAILURE(loopback(srq, cq, &a, &b));
    std::vector<struct ibv_qp*> qps = {tm_dev_ibv_qp(a), tm_dev_ibv_qp(b)};
    tm_dev_query(m_dev, &m_caps);
    if (m_caps.flags & TM_DEV_CAP_CONNECT_TO_SRQ) {
        uint8_t dev_addr[TM_DEV_ADDR_MAX], srq_addr[TM_DEV_ADDR_MAX];
        tm_dev_addr(m_dev, dev_addr);
        tm_dev_srq_addr(srq, srq_addr);
        ASSERT_EQ(0, tm_dev_create_conn(m_dev, srq, cq, &c));
        ASSERT_EQ(0, tm_dev_connect_to_srq(c, dev_addr, srq_addr));
        qps.push_back(tm_dev_ibv_qp(c));
    }

    for (struct ibv_qp *qp : qps) {
        struct ibv_qp_attr qattr;
        struct ibv_qp_init_attr init;

        memset(&qattr, 0, sizeof(qattr));
        ASSERT_EQ(0, m_info.lib->query_qp(qp, &qattr,
                                          IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT,
                                          &init));
        EXPECT_EQ(12, qattr.timeout) << qp->qp_num;
        EXPECT_EQ(0, qattr.retry_cnt) << qp->qp_num;
    }

    if (c != NULL) {
        tm_dev_destroy_conn(c);
    }
    tm_dev_destroy_conn(a);
    tm_dev_destroy_conn(b);
    tm_dev_destroy_srq(srq);
    tm_dev_destroy_cq(cq);
}
