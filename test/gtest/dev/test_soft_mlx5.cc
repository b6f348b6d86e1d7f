/*
 * The software NIC behaves as mlx5 does where the seed documents leave it
 * open (docs/verbs-device.md, "What mlx5 does"): one or more tests per
 * item, each showing the mlx5 behaviour on the software NIC.  The
 * transport's side of each item is tested in the transport's suites.
 */
#include "soft_fixture.h"

using namespace soft_test;

namespace {

/* Takes qp (in INIT) to RTS, talking to the QP peer_qpn of node peer, with
 * the verbs a NIC needs (bypassing the device layer's pairing) */
void connect_qp(node &self, struct ibv_qp *qp, node &peer, uint32_t peer_qpn)
{
    struct ibv_qp_attr attr;
    union ibv_gid gid;

    ASSERT_EQ(0, softnic_query_gid(tm_dev_ibv_context(peer.dev), 1, 0, &gid));
    memset(&attr, 0, sizeof(attr));
    attr.qp_state              = IBV_QPS_RTR;
    attr.path_mtu              = IBV_MTU_4096;
    attr.dest_qp_num           = peer_qpn;
    attr.max_dest_rd_atomic    = 1;
    attr.min_rnr_timer         = 13;
    attr.ah_attr.is_global     = 1;
    attr.ah_attr.port_num      = 1;
    attr.ah_attr.grh.dgid      = gid;
    attr.ah_attr.grh.hop_limit = 64;
    ASSERT_EQ(0, softnic_modify_qp(qp, &attr,
                                   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                   IBV_QP_MAX_DEST_RD_ATOMIC |
                                   IBV_QP_MIN_RNR_TIMER));
    memset(&attr, 0, sizeof(attr));
    attr.qp_state      = IBV_QPS_RTS;
    attr.timeout       = 18;
    attr.retry_cnt     = 7;
    attr.rnr_retry     = 7;
    attr.max_rd_atomic = 1;
    ASSERT_EQ(0, softnic_modify_qp(qp, &attr,
                                   IBV_QP_STATE | IBV_QP_SQ_PSN |
                                   IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC));
    (void)self;
}

} // namespace


/* ----- 1. rendezvous in the NIC only on a receive-only QP ----- */

/* The device layer's connection is two QPs: the peer's sends arrive on the
 * receive-only one, where the NIC reads a matched rendezvous itself */
TEST_F(soft_pair, rndv_is_read_by_the_nic_on_the_receive_only_qp)
{
    const uint32_t len = 5000;
    char *src = s.alloc(len), *dst = r.alloc(len);

    memset(src, 'R', len);
    r.post_rbufs(4, 256, 100);
    ASSERT_EQ(0, r.add_tag(7, ~0ull, dst, len, 70, 0, nullptr));
    ASSERT_EQ(0, s.send(cs, rndv_msg(7, 9, src, s.mr->rkey, len), 1));

    tm_dev_wc_t wc;
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_TM_ADD, wc.opcode);
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_TM_RECV, wc.opcode);
    EXPECT_EQ(tm_dev_conn_rx_qp_num(cr), wc.qp_num);
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_TM_DATA_VALID);
    EXPECT_EQ(std::string(len, 'R'), std::string(dst, len));
}

/* A rendezvous arriving on a QP that has a send queue: the NIC cannot read
 * it.  The harsher reading: a request it cannot serve (the QP fails, the
 * receive side gets an error completion), nothing matched or read */
TEST_F(soft_pair, rndv_on_a_qp_with_a_send_queue_is_refused)
{
    /* two sending QPs connected to each other, as one QP per connection
     * would be */
    tm_dev_conn_t *xs = s.create_conn(), *xr = r.create_conn();
    ASSERT_NO_FATAL_FAILURE(connect_qp(s, tm_dev_ibv_qp(xs), r,
                                       tm_dev_conn_qp_num(xr)));
    ASSERT_NO_FATAL_FAILURE(connect_qp(r, tm_dev_ibv_qp(xr), s,
                                       tm_dev_conn_qp_num(xs)));

    const uint32_t len = 5000;
    char *src = s.alloc(len), *dst = r.alloc(len);
    memset(src, 'R', len);
    memset(dst, 0, len);
    r.post_rbufs(4, 256, 100);
    ASSERT_EQ(0, r.add_tag(7, ~0ull, dst, len, 70, 0, nullptr));
    ASSERT_EQ(0, s.send(xs, rndv_msg(7, 9, src, s.mr->rkey, len), 1));

    tm_dev_wc_t wc;
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_TM_ADD, wc.opcode);
    ASSERT_TRUE(r.next(&wc));
    EXPECT_NE(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(IBV_WC_SEND, wc.opcode) << "error completions carry opcode 0";
    EXPECT_EQ(tm_dev_conn_qp_num(xr), wc.qp_num);
    EXPECT_EQ(1u, softnic_test_listed_tags(r.srq)) << "nothing matched";
    EXPECT_EQ(std::string(len, 0), std::string(dst, len)) << "nothing read";

    /* the sender's request fails: its peer QP is gone */
    ASSERT_TRUE(s.next(&wc));
    EXPECT_NE(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(tm_dev_conn_qp_num(xs), wc.qp_num);
}
