/*
 * UD QPs on the software NIC (issue 45), through the verbs alone: the
 * kernel's UD state table, what creation grants (mlx5's sizes), sends
 * (unsignaled, inline, gather lists, local errors and SQE, requests
 * refused at post), address handles, a basic SRQ (docs/verbs-device.md
 * rows 33-34).  Datagrams and their receives: test_soft_ud.cc.  Every test
 * runs with the device's work inline and on its engine thread.
 */
#include "ud_fixture.h"

using namespace ud_test;

namespace {

class soft_ud_qp : public ud_pair {};

} // namespace


/* ibv_create_ah(3), as mlx5_create_ah: the port must exist and, on a port
 * that requires a GRH (ours), the address must carry one (EINVAL); the
 * GID index must name a GID of the port */
TEST_P(soft_ud_qp, address_handle_rules)
{
    struct ibv_port_attr port;
    ASSERT_EQ(0, ibv_query_port(s.ctx, 1, &port));
    ASSERT_TRUE(port.flags & IBV_QPF_GRH_REQUIRED);

    struct ibv_ah_attr a = verbs_connect::lid_to(1);
    errno = 0;
    EXPECT_EQ(nullptr, softnic_create_ah(s.pd, &a)) << "no GRH";
    EXPECT_EQ(EINVAL, errno);
    a = verbs_connect::grh_to(r.gid());
    a.port_num = 2;
    errno = 0;
    EXPECT_EQ(nullptr, softnic_create_ah(s.pd, &a)) << "port 2";
    EXPECT_EQ(EINVAL, errno);
    a.port_num       = 1;
    a.grh.sgid_index = 1;
    errno = 0;
    EXPECT_EQ(nullptr, softnic_create_ah(s.pd, &a)) << "GID index 1";
    EXPECT_EQ(EINVAL, errno);
    a.grh.sgid_index = 0;
    struct ibv_ah *ah = softnic_create_ah(s.pd, &a);
    ASSERT_NE(nullptr, ah);
    EXPECT_EQ(s.ctx, ah->context);
    EXPECT_EQ(s.pd, ah->pd);
    EXPECT_EQ(0, softnic_destroy_ah(ah));
}

/* Unsignaled sends complete silently; a signaled one after them comes
 * alone (ibv_post_send(3)), and the datagrams arrive in order */
TEST_P(soft_ud_qp, unsignaled_sends_complete_silently)
{
    struct ibv_ah *ah = pair();
    ASSERT_NE(nullptr, ah);
    for (uint64_t i = 1; i <= 3; ++i) {
        ASSERT_EQ(0, r.post_recv(i, {{i * 256, 256}}));
    }
    ASSERT_EQ(0, s.send(ah, r.qp->qp_num, 1, "one", 0, 0));
    ASSERT_EQ(0, s.send(ah, r.qp->qp_num, 2, "two", 64, 0));
    ASSERT_EQ(0, s.send(ah, r.qp->qp_num, 3, "three", 128));
    ASSERT_NO_FATAL_FAILURE(expect_sent(3));
    struct ibv_wc wc;
    for (uint64_t i = 1; i <= 3; ++i) {
        ASSERT_TRUE(next(r, &wc));
        EXPECT_EQ(i, wc.wr_id);
    }
    EXPECT_EQ("one", std::string(r.at(256 + kGrh), 3));
    EXPECT_EQ("three", std::string(r.at(768 + kGrh), 5));
    EXPECT_EQ(0u, quiet(s, 0.1)) << "an unsignaled send completed";
}

/* Inline data is taken at post: the buffer may change at once, and needs
 * no key.  Past the inline size granted: ENOMEM (mlx5's post_send) */
TEST_P(soft_ud_qp, inline_data_is_taken_at_post)
{
    struct ibv_ah *ah = pair();
    ASSERT_NE(nullptr, ah);
    ASSERT_EQ(0, r.post_recv(1, {{0, 256}}));
    char buf[16] = "inline";
    struct ibv_sge sge = { (uintptr_t)buf, 7, 0 };
    ASSERT_EQ(0, s.send_sge(ah, r.qp->qp_num, 1, &sge, 1,
                            IBV_SEND_INLINE | IBV_SEND_SIGNALED));
    strcpy(buf, "changed");
    struct ibv_wc wc;
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_STREQ("inline", r.at(kGrh));
    ASSERT_NO_FATAL_FAILURE(expect_sent(1));

    struct ibv_qp_attr attr;
    struct ibv_qp_init_attr init;
    ASSERT_EQ(0, softnic_query_qp(s.qp, &attr, 0, &init));
    std::vector<char> big(init.cap.max_inline_data + 1, 'b');
    sge = { (uintptr_t)big.data(), (uint32_t)big.size(), 0 };
    EXPECT_EQ(ENOMEM, s.send_sge(ah, r.qp->qp_num, 2, &sge, 1,
                                 IBV_SEND_INLINE | IBV_SEND_SIGNALED));
}

/* Six gather entries (UCX's UD asks six), in order; a seventh is past
 * the gather list granted (ENOMEM, mlx5's post_send).  A receive of two
 * scatter entries takes the GRH across them, then the data */
TEST_P(soft_ud_qp, gather_of_six_and_a_grh_across_two_scatter_entries)
{
    struct ibv_ah *ah = pair(2);
    ASSERT_NE(nullptr, ah);
    memset(r.at(0), '.', 8192);
    ASSERT_EQ(0, r.post_recv(1, {{0, 24}, {4096, 1024}}));
    std::string whole;
    std::vector<struct ibv_sge> sge;
    for (int i = 0; i < 7; ++i) {
        std::string piece(10 + i, (char)('a' + i));
        memcpy(s.at(512 * i), piece.data(), piece.size());
        sge.push_back({ (uintptr_t)s.at(512 * i), (uint32_t)piece.size(),
                        s.mr->lkey });
        if (i < 6) {
            whole += piece;
        }
    }
    EXPECT_EQ(ENOMEM, s.send_sge(ah, r.qp->qp_num, 1, sge.data(), 7,
                                 IBV_SEND_SIGNALED));
    ASSERT_EQ(0, s.send_sge(ah, r.qp->qp_num, 2, sge.data(), 6,
                            IBV_SEND_SIGNALED));
    struct ibv_wc wc;
    ASSERT_TRUE(next(r, &wc));
    ASSERT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(kGrh + whole.size(), wc.byte_len);
    std::vector<char> grh(kGrh);
    memcpy(grh.data(), r.at(0), 24);
    memcpy(grh.data() + 24, r.at(4096), kGrh - 24);
    EXPECT_EQ(6u, be32toh(*(uint32_t *)grh.data()) >> 28);
    EXPECT_EQ(kIbNext, ((struct ibv_grh *)grh.data())->next_hdr);
    EXPECT_EQ(whole, std::string(r.at(4096 + kGrh - 24), whole.size()));
    EXPECT_EQ('.', *r.at(24)) << "the first entry overrun";
    ASSERT_NO_FATAL_FAILURE(expect_sent(2));
}

/* A datagram is one packet: longer than the path MTU, its send fails
 * locally (IBV_WC_LOC_LEN_ERR) and the QP enters SQE, where later sends
 * are flushed and receives go on; SQE -> RTS sends again (IBTA 10.3.1) */
TEST_P(soft_ud_qp, longer_than_the_mtu_fails_and_the_qp_enters_sqe)
{
    struct ibv_ah *ah = pair();
    ASSERT_NE(nullptr, ah);
    struct ibv_ah *back = r.ah_to(s.gid());
    ASSERT_NE(nullptr, back);
    ASSERT_EQ(0, r.post_recv(1, {{0, 8192}}));
    ASSERT_EQ(0, s.post_recv(2, {{0, 256}}));
    ASSERT_EQ(0, s.send(ah, r.qp->qp_num, 11, std::string(4097, 'm'), 0));
    ASSERT_EQ(0, s.send(ah, r.qp->qp_num, 12, "after", 8192));

    struct ibv_wc wc;
    ASSERT_TRUE(next(s, &wc));
    EXPECT_EQ(11u, wc.wr_id);
    EXPECT_EQ(IBV_WC_LOC_LEN_ERR, wc.status);
    ASSERT_TRUE(next(s, &wc));
    EXPECT_EQ(12u, wc.wr_id);
    EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, wc.status);
    EXPECT_EQ(IBV_QPS_SQE, s.state());
    EXPECT_EQ(0u, quiet(r, 0.1)) << "a send of a QP in SQE went out";

    /* (sent from past r's receive buffer; one CQ per side: r's send
     * completes there too) */
    ASSERT_EQ(0, r.send(back, s.qp->qp_num, 21, "to a QP in SQE", 16384));
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(21u, wc.wr_id);
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    ASSERT_TRUE(next(s, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status) << "receives stop in SQE";
    EXPECT_EQ(2u, wc.wr_id);

    struct ibv_qp_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(0, softnic_modify_qp(s.qp, &attr, IBV_QP_STATE));
    ASSERT_EQ(0, s.send(ah, r.qp->qp_num, 13, "recovered", 0));
    ASSERT_NO_FATAL_FAILURE(expect_sent(13));
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(1u, wc.wr_id);
    EXPECT_EQ(IBV_WC_RECV, wc.opcode);
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ("recovered", std::string(r.at(kGrh), 9));
}

/* A local key that does not cover the data: IBV_WC_LOC_PROT_ERR, SQE */
TEST_P(soft_ud_qp, bad_lkey_fails_locally)
{
    struct ibv_ah *ah = pair();
    ASSERT_NE(nullptr, ah);
    struct ibv_sge sge = { (uintptr_t)s.at(0), 16, s.mr->lkey + 1 };
    ASSERT_EQ(0, s.send_sge(ah, r.qp->qp_num, 1, &sge, 1,
                            IBV_SEND_SIGNALED));
    struct ibv_wc wc;
    ASSERT_TRUE(next(s, &wc));
    EXPECT_EQ(IBV_WC_LOC_PROT_ERR, wc.status);
    EXPECT_EQ(IBV_QPS_SQE, s.state());
}

/* ibv_post_send(3) on a UD QP: an opcode UD has not, or no address
 * handle, is refused with the request returned in bad_wr */
TEST_P(soft_ud_qp, bad_requests_are_refused_at_post)
{
    struct ibv_ah *ah = pair();
    ASSERT_NE(nullptr, ah);
    struct ibv_sge sge = { (uintptr_t)s.at(0), 8, s.mr->lkey };
    struct ibv_send_wr wr, *bad = nullptr;
    memset(&wr, 0, sizeof(wr));
    wr.opcode            = IBV_WR_RDMA_WRITE;
    wr.sg_list           = &sge;
    wr.num_sge           = 1;
    wr.wr.ud.ah          = ah;
    wr.wr.ud.remote_qpn  = r.qp->qp_num;
    wr.wr.ud.remote_qkey = kQkey;
    EXPECT_EQ(EINVAL, ibv_post_send(s.qp, &wr, &bad));
    EXPECT_EQ(&wr, bad);
    wr.opcode   = IBV_WR_SEND;
    wr.wr.ud.ah = nullptr;
    bad         = nullptr;
    EXPECT_EQ(EINVAL, ibv_post_send(s.qp, &wr, &bad));
    EXPECT_EQ(&wr, bad);
}


/* A UD QP on a basic SRQ receives through it; tag matching is RC's: a
 * TM-SRQ takes no UD QP */
TEST_P(soft_ud_qp, basic_srq_serves_a_ud_qp)
{
    struct ibv_srq_init_attr sa;
    memset(&sa, 0, sizeof(sa));
    sa.attr.max_wr  = 16;
    sa.attr.max_sge = 1;
    struct ibv_srq *srq = softnic_create_srq(r.pd, &sa);
    ASSERT_NE(nullptr, srq);
    s.qp = s.create();
    r.qp = r.create(6, 1, 64, srq);
    ASSERT_NE(nullptr, s.qp);
    ASSERT_NE(nullptr, r.qp);
    ASSERT_EQ(0, ud_side::to_rts(s.qp));
    ASSERT_EQ(0, ud_side::to_rts(r.qp));
    struct ibv_sge sge = { (uintptr_t)r.at(0), 256, r.mr->lkey };
    struct ibv_recv_wr rwr, *bad = nullptr;
    memset(&rwr, 0, sizeof(rwr));
    rwr.wr_id   = 9;
    rwr.sg_list = &sge;
    rwr.num_sge = 1;
    ASSERT_EQ(0, ibv_post_srq_recv(srq, &rwr, &bad));
    struct ibv_ah *ah = s.ah_to(r.gid());
    ASSERT_NE(nullptr, ah);
    ASSERT_EQ(0, s.send(ah, r.qp->qp_num, 1, "via srq", 0));
    struct ibv_wc wc;
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(9u, wc.wr_id);
    EXPECT_EQ("via srq", std::string(r.at(kGrh), 7));
    ASSERT_EQ(0, softnic_destroy_qp(r.qp));
    r.qp = nullptr;
    EXPECT_EQ(0, softnic_destroy_srq(srq));

    struct ibv_srq_init_attr_ex tm;
    memset(&tm, 0, sizeof(tm));
    tm.attr.max_wr          = 64;
    tm.attr.max_sge         = 1;
    tm.srq_type             = IBV_SRQT_TM;
    tm.pd                   = r.pd;
    tm.cq                   = ibv_cq_ex_to_cq(r.cq);
    tm.tm_cap.max_num_tags  = 16;
    tm.tm_cap.max_ops       = 16;
    tm.comp_mask            = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                              IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
    struct ibv_srq *tm_srq = ibv_create_srq_ex(r.ctx, &tm);
    ASSERT_NE(nullptr, tm_srq) << strerror(errno);
    errno = 0;
    EXPECT_EQ(nullptr, r.create(6, 1, 64, tm_srq));
    EXPECT_EQ(EINVAL, errno);
    EXPECT_EQ(0, softnic_destroy_srq(tm_srq));
}

/* The kernel's UD state table (ib_modify_qp_is_ok): RESET -> INIT needs
 * the P_Key index, port and Q_Key and takes nothing else (no access
 * flags); INIT -> RTR needs nothing and takes no address; RTR -> RTS
 * needs the send PSN.  ibv_query_qp reads back the Q_Key and what
 * creation granted: the gather list asked, and mlx5's inline size (a UD
 * WQE of 64 bytes of segments: 124 for 6 entries and 64 asked) */
TEST_P(soft_ud_qp, modify_follows_the_ud_state_table)
{
    s.qp = s.create();
    ASSERT_NE(nullptr, s.qp);
    struct ibv_qp_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state        = IBV_QPS_INIT;
    attr.port_num        = 1;
    attr.qkey            = 0x42;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    EXPECT_EQ(EINVAL, softnic_modify_qp(s.qp, &attr, IBV_QP_STATE |
                                        IBV_QP_PKEY_INDEX | IBV_QP_PORT))
            << "no Q_Key";
    EXPECT_EQ(EINVAL, softnic_modify_qp(s.qp, &attr, IBV_QP_STATE |
                                        IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                        IBV_QP_QKEY | IBV_QP_ACCESS_FLAGS))
            << "access flags on UD";
    ASSERT_EQ(0, softnic_modify_qp(s.qp, &attr, IBV_QP_STATE |
                                   IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                   IBV_QP_QKEY));
    attr.qp_state    = IBV_QPS_RTR;
    attr.dest_qp_num = 0x100;
    EXPECT_EQ(EINVAL, softnic_modify_qp(s.qp, &attr, IBV_QP_STATE |
                                        IBV_QP_DEST_QPN))
            << "a UD QP has no peer";
    ASSERT_EQ(0, softnic_modify_qp(s.qp, &attr, IBV_QP_STATE));
    attr.qp_state = IBV_QPS_RTS;
    EXPECT_EQ(EINVAL, softnic_modify_qp(s.qp, &attr, IBV_QP_STATE))
            << "no send PSN";
    ASSERT_EQ(0, softnic_modify_qp(s.qp, &attr, IBV_QP_STATE |
                                   IBV_QP_SQ_PSN));

    struct ibv_qp_init_attr init;
    memset(&attr, 0, sizeof(attr));
    ASSERT_EQ(0, softnic_query_qp(s.qp, &attr, IBV_QP_QKEY, &init));
    EXPECT_EQ(IBV_QPS_RTS, attr.qp_state);
    EXPECT_EQ(0x42u, attr.qkey);
    EXPECT_EQ(IBV_QPT_UD, init.qp_type);
    EXPECT_EQ(6u, init.cap.max_send_sge);
    EXPECT_EQ(124u, init.cap.max_inline_data);
    EXPECT_EQ(IBV_QPT_UD, s.qp->qp_type);
}

/* ibv_create_qp_ex makes a UD QP as ibv_create_qp does (UCX's ib iface
 * creates its QPs with it); the extended post API is RC's here
 * (EOPNOTSUPP for send ops on UD, docs/verbs-device.md row 33) */
TEST_P(soft_ud_qp, create_qp_ex_makes_a_ud_qp)
{
    struct ibv_qp_init_attr_ex init;
    memset(&init, 0, sizeof(init));
    init.send_cq          = ibv_cq_ex_to_cq(s.cq);
    init.recv_cq          = ibv_cq_ex_to_cq(s.cq);
    init.qp_type          = IBV_QPT_UD;
    init.cap.max_send_wr  = 16;
    init.cap.max_recv_wr  = 16;
    init.cap.max_send_sge = 6;
    init.cap.max_recv_sge = 1;
    init.comp_mask        = IBV_QP_INIT_ATTR_PD |
                            IBV_QP_INIT_ATTR_CREATE_FLAGS;
    init.pd               = s.pd;
    s.qp = ibv_create_qp_ex(s.ctx, &init);
    ASSERT_NE(nullptr, s.qp) << strerror(errno);
    EXPECT_EQ(IBV_QPT_UD, s.qp->qp_type);
    EXPECT_EQ(0, ud_side::to_rts(s.qp));
}

INSTANTIATE_TEST_SUITE_P(progress, soft_ud_qp,
                         ::testing::Values((uint32_t)SOFTNIC_PROGRESS_INLINE,
                                           (uint32_t)SOFTNIC_PROGRESS_THREAD),
                         [](const ::testing::TestParamInfo<uint32_t> &p) {
                             return std::string(p.param ==
                                                SOFTNIC_PROGRESS_INLINE ?
                                                "inline" : "thread");
                         });
