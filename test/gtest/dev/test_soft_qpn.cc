/*
 * The QP number of tag-matching completions (docs/verbs-device.md rows 7
 * and 20, issue 36 item 7).  rdma-core's mlx5 reads it from the CQE's qpn
 * field whatever the CQE (providers/mlx5/cq.c mlx5_cq_read_wc_qp_num), and
 * reads TM_CONSUMED (the MATCH-only completion of a rendezvous the NIC
 * reads, or of an eager message over a packet) only as a CQE without a
 * packet (mlx5_cq_read_wc_opcode, MLX5_CQE_NO_PACKET), whose qpn no source
 * says firmware fills.  The software NIC takes the harsher reading: 0.
 * Completions with a packet (the final one, a software rendezvous's
 * CONSUMED_SW_RDNV) name the receive-only QP.
 */
#include "soft_fixture.h"

using namespace soft_test;

namespace {

struct raw_wc {
    uint64_t wr_id;
    unsigned flags;
    uint32_t qp_num;
};

/* The completions on n's CQ as the provider gives them, without the
 * device layer (ibv_start_poll, ibv_wc_read_*) */
std::vector<raw_wc> raw_poll(node &n)
{
    struct ibv_cq_ex *ex = n.cq->cq;
    struct ibv_poll_cq_attr attr = {};
    std::vector<raw_wc> v;
    int ret;

    for (ret = ibv_start_poll(ex, &attr); ret == 0; ret = ibv_next_poll(ex)) {
        v.push_back({ex->wr_id, ibv_wc_read_wc_flags(ex) &
                                (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID),
                     ibv_wc_read_qp_num(ex)});
    }
    if (ret == ENOENT && !v.empty()) {
        ibv_end_poll(ex);
    }
    EXPECT_EQ(ENOENT, ret);
    return v;
}

} // namespace

class soft_qpn : public soft_pair {};
class soft_qpn_small_packet : public soft_pair_small_packet {};

/* A rendezvous the NIC reads: MATCH only with QP number 0, then the final
 * completion (a packet) with the receive-only QP's */
TEST_F(soft_qpn, nic_read_rndv_match_has_qp_number_0)
{
    const uint32_t len = 3000;
    char *src = s.alloc(len), *dst = r.alloc(len);

    memset(src, 'N', len);
    s.post_rbufs(1, 256, 700);                  /* for the FIN */
    manual();
    ASSERT_EQ(0, r.add_tag(0x52, ~0ull, dst, len, 61, 0, nullptr, 1));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(1u, raw_poll(r).size());
    ASSERT_EQ(0, s.send(cs, rndv_msg(0x52, 0xa2, src, s.mr->rkey, len), 1));

    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    std::vector<raw_wc> v = raw_poll(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_EQ(61u, v[0].wr_id);
    EXPECT_EQ((unsigned)IBV_WC_TM_MATCH, v[0].flags);
    EXPECT_EQ(0u, v[0].qp_num) << "TM_CONSUMED: no packet";

    ASSERT_EQ(0, softnic_test_step_data(r.srq));
    v = raw_poll(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_EQ((unsigned)IBV_WC_TM_DATA_VALID, v[0].flags);
    EXPECT_EQ(tm_dev_conn_rx_qp_num(cr), v[0].qp_num) << "EXPECTED: a packet";
    EXPECT_EQ(std::string(len, 'N'), std::string(dst, len));
}

/* An eager message over a packet, read with ibv_poll_cq: the same */
TEST_F(soft_qpn, eager_over_a_packet_match_has_qp_number_0)
{
    const std::string payload(6000, 'e');       /* over the 4 KiB packet */
    char *dst = r.alloc(payload.size());
    struct ibv_wc wc[4];

    manual();
    ASSERT_EQ(0, r.add_tag(0x53, ~0ull, dst, payload.size(), 62, 0, nullptr,
                           1));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(1u, raw_poll(r).size());
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 0x53, 0, payload), 1));

    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    ASSERT_EQ(1, ibv_poll_cq(ibv_cq_ex_to_cq(r.cq->cq), 4, wc));
    EXPECT_EQ(62u, wc[0].wr_id);
    EXPECT_EQ((unsigned)IBV_WC_TM_MATCH,
              wc[0].wc_flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID));
    EXPECT_EQ(0u, wc[0].qp_num);

    ASSERT_EQ(0, softnic_test_step_data(r.srq));
    ASSERT_EQ(1, ibv_poll_cq(ibv_cq_ex_to_cq(r.cq->cq), 4, wc));
    EXPECT_EQ(tm_dev_conn_rx_qp_num(cr), wc[0].qp_num);
    EXPECT_EQ(payload, std::string(dst, payload.size()));
}

/* A software rendezvous over a packet: its MATCH-only completion
 * (CONSUMED_SW_RDNV, RNDV_INCOMPLETE) has a packet, and names the QP that
 * software reads the data over */
TEST_F(soft_qpn_small_packet, sw_rndv_match_names_the_receive_only_qp)
{
    const uint32_t len = 5000;
    char *src = s.alloc(len), *dst = r.alloc(128);

    manual();
    ASSERT_EQ(0, r.add_tag(3, ~0ull, dst, 128, 66, 0, nullptr, 1));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(1u, raw_poll(r).size());
    ASSERT_EQ(0, s.send(cs, rndv_msg(3, 4, src, s.mr->rkey, len,
                                     std::string(40, 'h')), 1));

    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    std::vector<raw_wc> v = raw_poll(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_EQ((unsigned)IBV_WC_TM_MATCH, v[0].flags);
    EXPECT_EQ(tm_dev_conn_rx_qp_num(cr), v[0].qp_num);
}
