/*
 * RC QPs with their own receive queue, and basic SRQs, on the software NIC
 * (issue 37), through the verbs alone, as rdma-core's tests and the verbs
 * tools (ibv_rc_pingpong, ibv_srq_pingpong) use them: two devices, a QP on
 * each, connected with modify_qp.  What is checked is the verbs semantics
 * (IBTA, and mlx5 where it decides: docs/verbs-device.md row 26).  Every
 * test runs with the device's work inline and on its engine thread.
 */
#include <gtest/gtest.h>

#include "softnic/softnic.h"
#include "verbs_connect.h"

#include <endian.h>
#include <errno.h>
#include <string.h>
#include <time.h>

#include <deque>
#include <string>
#include <vector>

namespace {

using namespace verbs_connect;

/* A device, its PD, one CQ for sends and receives, a registered arena */
struct side {
    struct ibv_context *ctx = nullptr;
    struct ibv_pd      *pd  = nullptr;
    struct ibv_cq_ex   *cq  = nullptr;
    struct ibv_mr      *mr  = nullptr;
    struct ibv_qp      *qp  = nullptr;
    struct ibv_srq     *srq = nullptr;
    std::vector<char>  arena = std::vector<char>(1 << 20);
    std::deque<struct ibv_wc> wcs;

    void open(struct ibv_device *dev, uint32_t progress) {
        ctx = verbs_connect::open_device(dev, progress);
        ASSERT_NE(nullptr, ctx);
        pd = softnic_alloc_pd(ctx);
        ASSERT_NE(nullptr, pd);
        struct ibv_cq_init_attr_ex ca;
        memset(&ca, 0, sizeof(ca));
        ca.cqe      = 256;
        ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
                      IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP;
        cq = ibv_create_cq_ex(ctx, &ca);
        ASSERT_NE(nullptr, cq);
        mr = softnic_reg_mr(pd, arena.data(), arena.size(),
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        ASSERT_NE(nullptr, mr);
    }

    void close() {
        if (qp)  { EXPECT_EQ(0, softnic_destroy_qp(qp)); qp = nullptr; }
        if (srq) { EXPECT_EQ(0, softnic_destroy_srq(srq)); srq = nullptr; }
        if (mr)  { EXPECT_EQ(0, softnic_dereg_mr(mr)); mr = nullptr; }
        if (cq)  {
            EXPECT_EQ(0, softnic_destroy_cq(ibv_cq_ex_to_cq(cq)));
            cq = nullptr;
        }
        if (pd)  { EXPECT_EQ(0, softnic_dealloc_pd(pd)); pd = nullptr; }
        if (ctx) { EXPECT_EQ(0, softnic_close_device(ctx)); ctx = nullptr; }
    }

    /* A QP receiving into its own queue (srq_ == nullptr) or srq_ */
    struct ibv_qp *create_qp(uint32_t recv_wr, uint32_t recv_sge,
                             struct ibv_srq *srq_ = nullptr,
                             int sq_sig_all = 0) {
        struct ibv_qp_init_attr init;
        memset(&init, 0, sizeof(init));
        init.sq_sig_all       = sq_sig_all;
        init.send_cq          = ibv_cq_ex_to_cq(cq);
        init.recv_cq          = ibv_cq_ex_to_cq(cq);
        init.srq              = srq_;
        init.qp_type          = IBV_QPT_RC;
        init.cap.max_send_wr  = 16;
        init.cap.max_send_sge = 2;
        init.cap.max_recv_wr  = recv_wr;
        init.cap.max_recv_sge = recv_sge;
        return softnic_create_qp(pd, &init);
    }

    char *at(size_t off) { return arena.data() + off; }

    int post_recv(uint64_t wr_id, std::vector<std::pair<size_t, uint32_t>>
                  pieces) {
        std::vector<struct ibv_sge> sge;
        for (auto &p : pieces) {
            sge.push_back({ (uintptr_t)at(p.first), p.second, mr->lkey });
        }
        struct ibv_recv_wr wr, *bad = nullptr;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id   = wr_id;
        wr.sg_list = sge.data();
        wr.num_sge = (int)sge.size();
        return srq ? ibv_post_srq_recv(srq, &wr, &bad) :
                     ibv_post_recv(qp, &wr, &bad);
    }

    int send(uint64_t wr_id, const std::string &msg, size_t off,
             bool imm = false, uint32_t imm_data = 0) {
        memcpy(at(off), msg.data(), msg.size());
        struct ibv_sge sge = { (uintptr_t)at(off), (uint32_t)msg.size(),
                               mr->lkey };
        struct ibv_send_wr wr, *bad = nullptr;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id      = wr_id;
        wr.opcode     = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
        wr.sg_list    = &sge;
        wr.num_sge    = 1;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.imm_data   = htobe32(imm_data);
        return ibv_post_send(qp, &wr, &bad);
    }

    /* A request of 16 bytes from off, with the flags given: a SEND, or an
     * RDMA WRITE to the peer's arena at its offset 4096 */
    int post(uint64_t wr_id, enum ibv_wr_opcode opcode, unsigned flags,
             size_t off, const side &peer) {
        struct ibv_sge sge = { (uintptr_t)at(off), 16, mr->lkey };
        struct ibv_send_wr wr, *bad = nullptr;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id               = wr_id;
        wr.opcode              = opcode;
        wr.sg_list             = &sge;
        wr.num_sge             = 1;
        wr.send_flags          = flags;
        wr.wr.rdma.remote_addr = (uintptr_t)peer.arena.data() + 4096;
        wr.wr.rdma.rkey        = peer.mr->rkey;
        return ibv_post_send(qp, &wr, &bad);
    }

    void poll() {
        struct ibv_wc wc[8];
        int n;
        while ((n = ibv_poll_cq(ibv_cq_ex_to_cq(cq), 8, wc)) > 0) {
            wcs.insert(wcs.end(), wc, wc + n);
        }
        ASSERT_GE(n, 0);
    }

    enum ibv_qp_state state() {
        struct ibv_qp_attr attr;
        struct ibv_qp_init_attr init;
        EXPECT_EQ(0, softnic_query_qp(qp, &attr, IBV_QP_STATE, &init));
        return attr.qp_state;
    }
};

struct rnr_params {
    uint8_t min_rnr_timer = 1;       /* 0.01 ms */
    uint8_t rnr_retry     = 7;
};

/* s sends to r; the parameter: where the device's work runs */
class soft_rq : public ::testing::TestWithParam<uint32_t> {
protected:
    struct ibv_device **list = nullptr;
    side s, r;

    void SetUp() override {
        int n = 0;
        list = softnic_get_device_list(&n);
        ASSERT_NE(nullptr, list);
        ASSERT_GE(n, 1);
        ASSERT_NO_FATAL_FAILURE(s.open(list[0], GetParam()));
        ASSERT_NO_FATAL_FAILURE(r.open(list[0], GetParam()));
    }

    void TearDown() override {
        s.close();
        r.close();
        if (list) {
            softnic_free_device_list(list);
        }
    }

    /* s.qp and r.qp, each with its own receive queue (r's on r.srq if
     * set), connected */
    void pair(const rnr_params &rnr = rnr_params(), uint32_t recv_wr = 16,
              uint32_t recv_sge = 2) {
        s.qp = s.create_qp(recv_wr, recv_sge);
        ASSERT_NE(nullptr, s.qp);
        r.qp = r.create_qp(recv_wr, recv_sge, r.srq);
        ASSERT_NE(nullptr, r.qp);
        ASSERT_EQ(0, connect_qp(s.qp, r.ctx, r.qp->qp_num,
                                rnr.min_rnr_timer, rnr.rnr_retry));
        ASSERT_EQ(0, connect_qp(r.qp, s.ctx, s.qp->qp_num,
                                rnr.min_rnr_timer, rnr.rnr_retry));
    }

    /* Polls both sides until n completes something; false on timeout */
    bool next(side &n, struct ibv_wc *wc, double timeout = 5.0) {
        double deadline = now_sec() + timeout;
        while (n.wcs.empty()) {
            s.poll();
            r.poll();
            if (n.wcs.empty() && (now_sec() > deadline)) {
                return false;
            }
        }
        *wc = n.wcs.front();
        n.wcs.pop_front();
        return true;
    }

    /* Polls both sides for `secs`: how many completions n got (the check
     * that something does NOT happen) */
    size_t quiet(side &n, double secs) {
        double deadline = now_sec() + secs;
        while (now_sec() < deadline) {
            s.poll();
            r.poll();
        }
        return n.wcs.size();
    }
};

} // namespace


/* ----- a QP's own receive queue ----- */

TEST_P(soft_rq, sends_complete_into_posted_receives)
{
    ASSERT_NO_FATAL_FAILURE(pair());
    ASSERT_EQ(0, r.post_recv(11, {{0, 256}}));
    ASSERT_EQ(0, r.post_recv(12, {{256, 256}}));
    ASSERT_EQ(0, s.send(1, "hello", 0));
    ASSERT_EQ(0, s.send(2, std::string(100, 'i'), 64, true, 0xabcd1234));

    struct ibv_wc wc;
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(IBV_WC_RECV, wc.opcode);
    EXPECT_EQ(11u, wc.wr_id);
    EXPECT_EQ(5u, wc.byte_len);
    EXPECT_EQ(r.qp->qp_num, wc.qp_num);
    EXPECT_EQ(s.qp->qp_num, wc.src_qp);
    EXPECT_FALSE(wc.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ("hello", std::string(r.at(0), 5));
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(IBV_WC_RECV, wc.opcode);
    EXPECT_EQ(12u, wc.wr_id);
    EXPECT_EQ(100u, wc.byte_len);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(0xabcd1234u, be32toh(wc.imm_data));
    EXPECT_EQ(std::string(100, 'i'), std::string(r.at(256), 100));

    for (uint64_t id = 1; id <= 2; ++id) {
        ASSERT_TRUE(next(s, &wc));
        EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
        EXPECT_EQ(IBV_WC_SEND, wc.opcode);
        EXPECT_EQ(id, wc.wr_id);
    }
}

/* A QP created with sq_sig_all completes every request, asked or not, as
 * mlx5 ORs CQ_UPDATE into each of its WQEs (providers/mlx5, verbs.c and
 * qp.c: sq_signal_bits); without it only those asked complete */
TEST_P(soft_rq, sq_sig_all_completes_every_request)
{
    s.qp = s.create_qp(16, 2, nullptr, 1);
    ASSERT_NE(nullptr, s.qp);
    r.qp = r.create_qp(16, 2);
    ASSERT_NE(nullptr, r.qp);
    ASSERT_EQ(0, connect_qp(s.qp, r.ctx, r.qp->qp_num, 1, 7));
    ASSERT_EQ(0, connect_qp(r.qp, s.ctx, s.qp->qp_num, 1, 7));
    struct ibv_qp_attr attr;
    struct ibv_qp_init_attr init;
    ASSERT_EQ(0, softnic_query_qp(s.qp, &attr, IBV_QP_STATE, &init));
    EXPECT_EQ(1, init.sq_sig_all);

    ASSERT_EQ(0, r.post_recv(11, {{0, 64}}));
    ASSERT_EQ(0, r.post_recv(12, {{64, 64}}));
    ASSERT_EQ(0, s.post(1, IBV_WR_SEND, IBV_SEND_INLINE, 0, r));
    ASSERT_EQ(0, s.post(2, IBV_WR_SEND, 0, 16, r));
    ASSERT_EQ(0, s.post(3, IBV_WR_RDMA_WRITE, 0, 32, r));

    const enum ibv_wc_opcode opcode[] = { IBV_WC_SEND, IBV_WC_SEND,
                                          IBV_WC_RDMA_WRITE };
    struct ibv_wc wc;
    for (uint64_t id = 1; id <= 3; ++id) {
        ASSERT_TRUE(next(s, &wc)) << "request " << id;
        EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
        EXPECT_EQ(opcode[id - 1], wc.opcode);
        EXPECT_EQ(id, wc.wr_id);
    }
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(11u, wc.wr_id);
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(12u, wc.wr_id);
}

TEST_P(soft_rq, without_sq_sig_all_only_requests_asked_complete)
{
    ASSERT_NO_FATAL_FAILURE(pair());
    ASSERT_EQ(0, r.post_recv(11, {{0, 64}}));
    ASSERT_EQ(0, r.post_recv(12, {{64, 64}}));
    ASSERT_EQ(0, s.post(1, IBV_WR_SEND, IBV_SEND_INLINE, 0, r));
    ASSERT_EQ(0, s.post(2, IBV_WR_SEND, 0, 16, r));
    ASSERT_EQ(0, s.post(3, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, 32, r));

    /* completions come in order: the first one is the request asked */
    struct ibv_wc wc;
    ASSERT_TRUE(next(s, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(IBV_WC_RDMA_WRITE, wc.opcode);
    EXPECT_EQ(3u, wc.wr_id);
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(11u, wc.wr_id);
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(12u, wc.wr_id);
    s.poll();
    EXPECT_TRUE(s.wcs.empty());
}

/* An RDMA WRITE with immediate writes its data where it says and takes a
 * receive, whose buffer it leaves alone: IBV_WC_RECV_RDMA_WITH_IMM with
 * the length written; the requester's completion is an RDMA WRITE's */
TEST_P(soft_rq, rdma_write_with_imm_consumes_a_receive)
{
    ASSERT_NO_FATAL_FAILURE(pair());
    memset(r.at(0), '.', 8192);
    ASSERT_EQ(0, r.post_recv(81, {{0, 64}}));
    memset(s.at(0), 'w', 100);
    struct ibv_sge sge = { (uintptr_t)s.at(0), 100, s.mr->lkey };
    struct ibv_send_wr wr, *bad = nullptr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id               = 3;
    wr.opcode              = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.sg_list             = &sge;
    wr.num_sge             = 1;
    wr.send_flags          = IBV_SEND_SIGNALED;
    wr.imm_data            = htobe32(0x77);
    wr.wr.rdma.remote_addr = (uintptr_t)r.at(4096);
    wr.wr.rdma.rkey        = r.mr->rkey;
    ASSERT_EQ(0, ibv_post_send(s.qp, &wr, &bad));

    struct ibv_wc wc;
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(IBV_WC_RECV_RDMA_WITH_IMM, wc.opcode);
    EXPECT_EQ(81u, wc.wr_id);
    EXPECT_EQ(100u, wc.byte_len);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(0x77u, be32toh(wc.imm_data));
    EXPECT_EQ(std::string(100, 'w'), std::string(r.at(4096), 100));
    EXPECT_EQ('.', *r.at(0)) << "the receive's buffer is not written";
    ASSERT_TRUE(next(s, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(IBV_WC_RDMA_WRITE, wc.opcode);
    EXPECT_EQ(3u, wc.wr_id);
}

TEST_P(soft_rq, a_message_scatters_over_the_receive_entries)
{
    ASSERT_NO_FATAL_FAILURE(pair());
    memset(r.at(0), '.', 1024);
    /* 10 bytes, then 100 elsewhere */
    ASSERT_EQ(0, r.post_recv(7, {{0, 10}, {512, 100}}));
    std::string msg;
    for (int i = 0; i < 50; ++i) {
        msg += (char)('A' + i % 26);
    }
    ASSERT_EQ(0, s.send(1, msg, 0));

    struct ibv_wc wc;
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(50u, wc.byte_len);
    EXPECT_EQ(msg.substr(0, 10), std::string(r.at(0), 10));
    EXPECT_EQ('.', *r.at(10)) << "nothing past the first entry";
    EXPECT_EQ(msg.substr(10), std::string(r.at(512), 40));
    EXPECT_EQ('.', *r.at(552));
}

/* A message longer than the receive: the receive fails with a length
 * error and the QP enters the error state (flushing the next receive);
 * the requester sees an invalid request (IBTA 9.7.5.2.4, mlx5's
 * REMOTE_INVAL_REQ_ERR syndrome), and its next request is flushed */
TEST_P(soft_rq, a_message_longer_than_the_receive_fails_both_sides)
{
    ASSERT_NO_FATAL_FAILURE(pair());
    ASSERT_EQ(0, r.post_recv(21, {{0, 16}}));
    ASSERT_EQ(0, r.post_recv(22, {{64, 16}}));
    ASSERT_EQ(0, s.send(1, std::string(32, 'x'), 0));
    ASSERT_EQ(0, s.send(2, "y", 64));

    struct ibv_wc wc;
    ASSERT_TRUE(next(s, &wc));
    EXPECT_EQ(IBV_WC_REM_INV_REQ_ERR, wc.status);
    EXPECT_EQ(1u, wc.wr_id);
    ASSERT_TRUE(next(s, &wc));
    EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, wc.status);
    EXPECT_EQ(2u, wc.wr_id);
    EXPECT_EQ(IBV_QPS_ERR, s.state());

    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(IBV_WC_LOC_LEN_ERR, wc.status);
    EXPECT_EQ(IBV_WC_SEND, wc.opcode) << "mlx5: opcode 0 on error CQEs";
    EXPECT_EQ(21u, wc.wr_id);
    EXPECT_EQ(r.qp->qp_num, wc.qp_num);
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, wc.status);
    EXPECT_EQ(22u, wc.wr_id);
    EXPECT_EQ(IBV_QPS_ERR, r.state());
}

/* No receive posted: the requester waits (RNR, retried for ever with
 * rnr_retry 7), and the message lands once a receive is posted */
TEST_P(soft_rq, rnr_waits_until_a_receive_is_posted)
{
    ASSERT_NO_FATAL_FAILURE(pair());
    ASSERT_EQ(0, s.send(1, "late", 0));
    EXPECT_EQ(0u, quiet(s, 0.1)) << "the SEND completed before a receive";
    EXPECT_EQ(0u, r.wcs.size());

    ASSERT_EQ(0, r.post_recv(31, {{0, 64}}));
    struct ibv_wc wc;
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(31u, wc.wr_id);
    EXPECT_EQ("late", std::string(r.at(0), 4));
    ASSERT_TRUE(next(s, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(1u, wc.wr_id);
    EXPECT_EQ(IBV_QPS_RTS, s.state());
}

/* RNR retries spent (rnr_retry 2 of 0.01 ms): the request fails with
 * IBV_WC_RNR_RETRY_EXC_ERR, the next is flushed, the requester's QP is in
 * error; the responder takes nothing of it later */
TEST_P(soft_rq, rnr_retries_spent_fail_the_request)
{
    rnr_params rnr;
    rnr.rnr_retry = 2;
    ASSERT_NO_FATAL_FAILURE(pair(rnr));
    ASSERT_EQ(0, s.send(1, "never", 0));
    ASSERT_EQ(0, s.send(2, "nor this", 64));

    struct ibv_wc wc;
    ASSERT_TRUE(next(s, &wc));
    EXPECT_EQ(IBV_WC_RNR_RETRY_EXC_ERR, wc.status);
    EXPECT_EQ(1u, wc.wr_id);
    ASSERT_TRUE(next(s, &wc));
    EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, wc.status);
    EXPECT_EQ(2u, wc.wr_id);
    EXPECT_EQ(IBV_QPS_ERR, s.state());

    ASSERT_EQ(0, r.post_recv(41, {{0, 64}}));
    EXPECT_EQ(0u, quiet(r, 0.1)) << "a message the requester gave up on";
    EXPECT_EQ(IBV_QPS_RTS, r.state());
}

/* rnr_retry 0: the first RNR NAK fails the request */
TEST_P(soft_rq, rnr_retry_zero_fails_at_once)
{
    rnr_params rnr;
    rnr.rnr_retry     = 0;
    rnr.min_rnr_timer = 31;          /* 491 ms: not waited for */
    ASSERT_NO_FATAL_FAILURE(pair(rnr));
    ASSERT_EQ(0, s.send(1, "x", 0));
    struct ibv_wc wc;
    ASSERT_TRUE(next(s, &wc, 0.4));
    EXPECT_EQ(IBV_WC_RNR_RETRY_EXC_ERR, wc.status);
}

/* A QP moved to the error state flushes its receives in posting order,
 * and those posted afterwards */
TEST_P(soft_rq, error_flushes_the_receives_in_order)
{
    ASSERT_NO_FATAL_FAILURE(pair());
    for (uint64_t id = 51; id <= 53; ++id) {
        ASSERT_EQ(0, r.post_recv(id, {{0, 64}}));
    }
    struct ibv_qp_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(0, softnic_modify_qp(r.qp, &attr, IBV_QP_STATE));

    struct ibv_wc wc;
    for (uint64_t id = 51; id <= 54; ++id) {
        if (id == 54) {
            ASSERT_EQ(0, r.post_recv(54, {{0, 64}}));
        }
        ASSERT_TRUE(next(r, &wc));
        EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, wc.status);
        EXPECT_EQ(IBV_WC_SEND, wc.opcode) << "mlx5: opcode 0 on error CQEs";
        EXPECT_EQ(id, wc.wr_id);
        EXPECT_EQ(r.qp->qp_num, wc.qp_num);
    }
    EXPECT_EQ(0u, quiet(r, 0.05));
}

/* A SEND the responder took is acknowledged, as a NIC acks on arrival,
 * even when the responder's QP is destroyed before the requester polls (a
 * pingpong's last reply, taken by a peer that then exits): it completes
 * with success, the requester's QP stays in RTS and its receives are not
 * flushed */
TEST_P(soft_rq, a_send_taken_completes_after_the_peer_qp_is_destroyed)
{
    ASSERT_NO_FATAL_FAILURE(pair());
    ASSERT_EQ(0, s.post_recv(61, {{0, 64}}));
    ASSERT_EQ(0, r.post_recv(62, {{0, 64}}));
    ASSERT_EQ(0, s.send(6, "last", 512));

    /* only the responder's side runs until it took the message */
    double deadline = now_sec() + 5.0;
    while (r.wcs.empty() && (now_sec() < deadline)) {
        r.poll();
    }
    ASSERT_EQ(1u, r.wcs.size());
    EXPECT_EQ(IBV_WC_SUCCESS, r.wcs.front().status);
    EXPECT_EQ(0, softnic_destroy_qp(r.qp));
    r.qp = nullptr;

    struct ibv_wc wc;
    ASSERT_TRUE(next(s, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(6u, wc.wr_id);
    EXPECT_EQ(0u, quiet(s, 0.1)) << "receive 61 flushed";
    EXPECT_EQ(IBV_QPS_RTS, s.state());
}

/* A SEND its peer never takes (the peer's QP destroyed: no ACK comes)
 * fails as on a NIC: only once the requester has sent it retry_cnt times
 * more, each after the local ACK timeout (IBTA 9.7.6), so not before
 * (7 + 1) * 4.096 us * 2^14 (verbs_connect's to_rts); then the rest is
 * flushed */
TEST_P(soft_rq, a_send_never_taken_fails_once_retries_run_out)
{
    const double retries = (7 + 1) * 4.096e-6 * (1 << 14);

    ASSERT_NO_FATAL_FAILURE(pair());
    EXPECT_EQ(0, softnic_destroy_qp(r.qp));
    r.qp = nullptr;

    double t0 = now_sec();
    ASSERT_EQ(0, s.send(7, "lost", 512));
    ASSERT_EQ(0, s.send(8, "after", 768));
    struct ibv_wc wc;
    ASSERT_TRUE(next(s, &wc, 10 * retries));
    double waited = now_sec() - t0;
    EXPECT_EQ(IBV_WC_RETRY_EXC_ERR, wc.status) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(7u, wc.wr_id);
    EXPECT_GE(waited, retries) << "failed before the retries ran out";
    ASSERT_TRUE(next(s, &wc));
    EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, wc.status);
    EXPECT_EQ(8u, wc.wr_id);
    EXPECT_EQ(IBV_QPS_ERR, s.state());
}

/* RTS's timeout and retry count as mlx5 takes them: the kernel writes
 * timeout << 3 into a byte (the firmware and ibv_query_qp see its 5 low
 * bits); a retry count past its 3 bits is refused (mlx5 would write it
 * into the next field) */
TEST_P(soft_rq, rts_keeps_5_bits_of_timeout_and_refuses_8_retries)
{
    s.qp = s.create_qp(16, 2);
    ASSERT_NE(nullptr, s.qp);
    union ibv_gid gid;
    ASSERT_EQ(0, softnic_query_gid(r.ctx, 1, 0, &gid));
    ASSERT_EQ(0, to_init(s.qp));
    ASSERT_EQ(0, to_rtr(s.qp, grh_to(gid), s.qp->qp_num));

    struct ibv_qp_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state      = IBV_QPS_RTS;
    attr.timeout       = 32 + 14;
    attr.retry_cnt     = 8;
    attr.rnr_retry     = 7;
    attr.max_rd_atomic = 1;
    const int mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                     IBV_QP_MAX_QP_RD_ATOMIC;
    EXPECT_EQ(EINVAL, softnic_modify_qp(s.qp, &attr, mask));
    EXPECT_EQ(IBV_QPS_RTR, s.state());
    attr.retry_cnt = 7;
    ASSERT_EQ(0, softnic_modify_qp(s.qp, &attr, mask));

    struct ibv_qp_init_attr init;
    ASSERT_EQ(0, softnic_query_qp(s.qp, &attr, IBV_QP_TIMEOUT |
                                  IBV_QP_RETRY_CNT, &init));
    EXPECT_EQ(14, attr.timeout);
    EXPECT_EQ(7, attr.retry_cnt);
}

/* What creation grants and ibv_query_qp reports, as mlx5 sizes its
 * receive queue (mlx5_calc_rq_size): WQEs in a power of two filling
 * 64 bytes at least, scatter entries filling a power-of-two WQE */
TEST_P(soft_rq, receive_queue_caps_as_mlx5)
{
    struct ibv_qp_init_attr init;
    memset(&init, 0, sizeof(init));
    init.send_cq          = ibv_cq_ex_to_cq(r.cq);
    init.recv_cq          = ibv_cq_ex_to_cq(r.cq);
    init.qp_type          = IBV_QPT_RC;
    init.cap.max_send_wr  = 4;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_wr  = 5;
    init.cap.max_recv_sge = 3;
    r.qp = softnic_create_qp(r.pd, &init);
    ASSERT_NE(nullptr, r.qp);
    EXPECT_EQ(8u, init.cap.max_recv_wr);
    EXPECT_EQ(4u, init.cap.max_recv_sge);
    struct ibv_qp_attr attr;
    struct ibv_qp_init_attr q;
    ASSERT_EQ(0, softnic_query_qp(r.qp, &attr, IBV_QP_CAP, &q));
    EXPECT_EQ(8u, attr.cap.max_recv_wr);
    EXPECT_EQ(4u, attr.cap.max_recv_sge);
    EXPECT_EQ(8u, q.cap.max_recv_wr);
    EXPECT_EQ(nullptr, q.srq);

    /* one receive of one entry: a 16-byte WQE, four fill 64 bytes */
    init.cap.max_recv_wr  = 1;
    init.cap.max_recv_sge = 1;
    struct ibv_qp *one = softnic_create_qp(r.pd, &init);
    ASSERT_NE(nullptr, one);
    EXPECT_EQ(4u, init.cap.max_recv_wr);
    EXPECT_EQ(1u, init.cap.max_recv_sge);
    EXPECT_EQ(0, softnic_destroy_qp(one));

    /* past the device's limits */
    struct ibv_device_attr_ex dev;
    ASSERT_EQ(0, ibv_query_device_ex(r.ctx, nullptr, &dev));
    init.cap.max_recv_wr  = 1;
    init.cap.max_recv_sge = dev.orig_attr.max_sge + 1;
    errno = 0;
    EXPECT_EQ(nullptr, softnic_create_qp(r.pd, &init));
    EXPECT_EQ(EINVAL, errno);
    init.cap.max_recv_sge = 1;
    init.cap.max_recv_wr  = dev.orig_attr.max_qp_wr + 1;
    errno = 0;
    EXPECT_EQ(nullptr, softnic_create_qp(r.pd, &init));
    EXPECT_EQ(EINVAL, errno);

    /* more entries than granted, more receives than room */
    struct ibv_sge sge[5];
    for (auto &e : sge) {
        e = { (uintptr_t)r.at(0), 8, r.mr->lkey };
    }
    struct ibv_recv_wr wr, *bad = nullptr;
    memset(&wr, 0, sizeof(wr));
    wr.sg_list = sge;
    wr.num_sge = 5;
    EXPECT_EQ(EINVAL, ibv_post_recv(r.qp, &wr, &bad));
    EXPECT_EQ(&wr, bad);
    wr.num_sge = 1;
    for (int i = 0; i < 8; ++i) {
        ASSERT_EQ(0, ibv_post_recv(r.qp, &wr, &bad));
    }
    EXPECT_EQ(ENOMEM, ibv_post_recv(r.qp, &wr, &bad));
}


/* ----- basic SRQs ----- */

TEST_P(soft_rq, basic_srq_receives_for_its_qps)
{
    struct ibv_srq_init_attr sa;
    memset(&sa, 0, sizeof(sa));
    sa.attr.max_wr  = 10;
    sa.attr.max_sge = 2;
    r.srq = softnic_create_srq(r.pd, &sa);
    ASSERT_NE(nullptr, r.srq);
    /* mlx5_alloc_srq_buf: max_wr + 1 rounded up, less one; 3 entries fill
     * the 64-byte WQE a second one needs */
    EXPECT_EQ(15u, sa.attr.max_wr);
    EXPECT_EQ(3u, sa.attr.max_sge);
    ASSERT_NO_FATAL_FAILURE(pair());

    struct ibv_recv_wr wr, *bad = nullptr;
    memset(&wr, 0, sizeof(wr));
    EXPECT_EQ(EINVAL, ibv_post_recv(r.qp, &wr, &bad))
        << "a QP on an SRQ has no receive queue";

    ASSERT_EQ(0, r.post_recv(61, {{0, 4}, {100, 60}}));
    ASSERT_EQ(0, r.post_recv(62, {{256, 64}}));
    ASSERT_EQ(0, s.send(1, "through the srq", 0));
    ASSERT_EQ(0, s.send(2, "again", 64, true, 5));

    struct ibv_wc wc;
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(IBV_WC_RECV, wc.opcode);
    EXPECT_EQ(61u, wc.wr_id);
    EXPECT_EQ(r.qp->qp_num, wc.qp_num);
    EXPECT_EQ(15u, wc.byte_len);
    EXPECT_EQ("thro", std::string(r.at(0), 4));
    EXPECT_EQ("ugh the srq", std::string(r.at(100), 11));
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(62u, wc.wr_id);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(5u, be32toh(wc.imm_data));
    EXPECT_EQ(EBUSY, softnic_destroy_srq(r.srq)) << "a QP is attached";
}

/* An empty SRQ: RNR as for a QP's own receive queue */
TEST_P(soft_rq, basic_srq_empty_is_rnr)
{
    struct ibv_srq_init_attr sa;
    memset(&sa, 0, sizeof(sa));
    sa.attr.max_wr  = 4;
    sa.attr.max_sge = 1;
    r.srq = softnic_create_srq(r.pd, &sa);
    ASSERT_NE(nullptr, r.srq);
    rnr_params rnr;
    rnr.rnr_retry = 1;
    ASSERT_NO_FATAL_FAILURE(pair(rnr));
    ASSERT_EQ(0, s.send(1, "x", 0));
    struct ibv_wc wc;
    ASSERT_TRUE(next(s, &wc));
    EXPECT_EQ(IBV_WC_RNR_RETRY_EXC_ERR, wc.status);
}

/* The limit, armed, raises IBV_EVENT_SRQ_LIMIT_REACHED once fewer than it
 * remain, and is disarmed (ibv_query_srq reads 0) */
TEST_P(soft_rq, basic_srq_limit_event)
{
    struct ibv_srq_init_attr sa;
    memset(&sa, 0, sizeof(sa));
    sa.attr.max_wr  = 8;
    sa.attr.max_sge = 1;
    r.srq = softnic_create_srq(r.pd, &sa);
    ASSERT_NE(nullptr, r.srq);
    ASSERT_NO_FATAL_FAILURE(pair());

    struct ibv_srq_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.srq_limit = sa.attr.max_wr + 1;
    EXPECT_EQ(EINVAL, softnic_modify_srq(r.srq, &attr, IBV_SRQ_LIMIT));
    attr.max_wr = 32;
    EXPECT_EQ(EINVAL, softnic_modify_srq(r.srq, &attr, IBV_SRQ_MAX_WR))
        << "mlx5 resizes no SRQ";
    for (uint64_t id = 0; id < 4; ++id) {
        ASSERT_EQ(0, r.post_recv(70 + id, {{64 * id, 64}}));
    }
    attr.srq_limit = 3;
    ASSERT_EQ(0, softnic_modify_srq(r.srq, &attr, IBV_SRQ_LIMIT));
    ASSERT_EQ(0, softnic_query_srq(r.srq, &attr));
    EXPECT_EQ(3u, attr.srq_limit);
    EXPECT_EQ(sa.attr.max_wr, attr.max_wr);

    auto limit_events = [&]() {
        struct ibv_async_event ev;
        int n = 0;
        while (softnic_get_async_event(r.ctx, &ev) == 0) {
            if (ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED) {
                EXPECT_EQ(r.srq, ev.element.srq);
                ++n;
            }
            softnic_ack_async_event(&ev);
        }
        EXPECT_EQ(EAGAIN, errno);
        return n;
    };

    struct ibv_wc wc;
    ASSERT_EQ(0, s.send(1, "a", 0));
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(0, limit_events()) << "3 remain: not fewer than 3";
    ASSERT_EQ(0, s.send(2, "b", 0));
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(1, limit_events());
    ASSERT_EQ(0, softnic_query_srq(r.srq, &attr));
    EXPECT_EQ(0u, attr.srq_limit) << "disarmed";
    ASSERT_EQ(0, s.send(3, "c", 0));
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(0, limit_events()) << "once";
    EXPECT_EQ(1u, r.srq->events_completed) << "acknowledged";
}

/* ibv_create_srq_ex makes basic SRQs too (given no more than a PD and the
 * type, the inline calls libibverbs' exported ibv_create_srq, which reaches
 * a provider only: callers go through softnic_create_srq for that, as for
 * every exported verb); bad capabilities are refused */
TEST_P(soft_rq, basic_srq_create_ex_and_bad_caps)
{
    struct ibv_srq_init_attr_ex ex;
    memset(&ex, 0, sizeof(ex));
    ex.comp_mask   = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                     IBV_SRQ_INIT_ATTR_CQ;
    ex.cq          = ibv_cq_ex_to_cq(r.cq);
    ex.srq_type    = IBV_SRQT_BASIC;
    ex.pd          = r.pd;
    ex.attr.max_wr = 100;
    ex.attr.max_sge = 1;
    struct ibv_srq *srq = ibv_create_srq_ex(r.ctx, &ex);
    ASSERT_NE(nullptr, srq);
    EXPECT_EQ(127u, ex.attr.max_wr);
    EXPECT_EQ(1u, ex.attr.max_sge);
    EXPECT_EQ(0, softnic_destroy_srq(srq));

    struct ibv_device_attr_ex dev;
    ASSERT_EQ(0, ibv_query_device_ex(r.ctx, nullptr, &dev));
    struct ibv_srq_init_attr sa;
    memset(&sa, 0, sizeof(sa));
    sa.attr.max_wr  = 4;
    sa.attr.max_sge = dev.orig_attr.max_srq_sge + 1;
    errno = 0;
    EXPECT_EQ(nullptr, softnic_create_srq(r.pd, &sa));
    EXPECT_EQ(EINVAL, errno);
    sa.attr.max_sge = 1;
    sa.attr.max_wr  = dev.orig_attr.max_srq_wr + 1;
    errno = 0;
    EXPECT_EQ(nullptr, softnic_create_srq(r.pd, &sa));
    EXPECT_EQ(EINVAL, errno);
}

INSTANTIATE_TEST_SUITE_P(progress, soft_rq,
                         ::testing::Values((uint32_t)SOFTNIC_PROGRESS_INLINE,
                                           (uint32_t)SOFTNIC_PROGRESS_THREAD),
                         [](const ::testing::TestParamInfo<uint32_t> &p) {
                             return std::string(p.param ==
                                                SOFTNIC_PROGRESS_INLINE ?
                                                "inline" : "thread");
                         });
