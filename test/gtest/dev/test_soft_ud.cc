/*
 * UD datagrams on the software NIC (issue 45), through the verbs alone, as
 * UCX's ud_verbs and ibv_ud_pingpong use them: devices with a UD QP each,
 * sending datagrams named by an address handle, a QP number and a Q_Key.
 * What is checked is the verbs semantics of a datagram and its receive
 * (IBTA, mlx5 where it decides: docs/verbs-device.md rows 34-35): the GRH,
 * the completion, the drops, many senders.  The QP, its sends and address
 * handles: test_soft_ud_qp.cc.  Every test runs with the device's work
 * inline and on its engine thread.
 */
#include "ud_fixture.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>

using namespace ud_test;

namespace {

class soft_ud : public ud_pair {};

} // namespace


/* The receive gets the GRH (40 bytes, IBV_WC_GRH), then the payload;
 * byte_len counts both; the completion names the sender's QP, LID and
 * SL.  The GRH is the one the sender's address made: version 6, its
 * traffic class and flow label, IBA's next header, the hop limit, both
 * GIDs, and the payload length of BTH, DETH, the data and ICRC */
TEST_P(soft_ud, datagram_lands_after_its_grh)
{
    ASSERT_NE(nullptr, pair());
    struct ibv_ah *ah = s.ah_to(r.gid(), 3, 0x2a, 0x12345);
    ASSERT_NE(nullptr, ah);
    memset(r.at(0), '.', 256);
    ASSERT_EQ(0, r.post_recv(7, {{0, 256}}));
    ASSERT_EQ(0, s.send(ah, r.qp->qp_num, 1, std::string(101, 'u'), 0));

    struct ibv_wc wc;
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(IBV_WC_RECV, wc.opcode);
    EXPECT_EQ(7u, wc.wr_id);
    EXPECT_EQ(kGrh + 101, wc.byte_len);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH);
    EXPECT_FALSE(wc.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(r.qp->qp_num, wc.qp_num);
    EXPECT_EQ(s.qp->qp_num, wc.src_qp);
    struct ibv_port_attr port;
    ASSERT_EQ(0, ibv_query_port(s.ctx, 1, &port));
    EXPECT_EQ(port.lid, wc.slid);
    EXPECT_EQ(3, wc.sl);
    EXPECT_EQ(0, wc.dlid_path_bits);
    EXPECT_EQ(std::string(101, 'u'), std::string(r.at(kGrh), 101));
    EXPECT_EQ('.', *r.at(kGrh + 101)) << "written past the datagram";

    struct ibv_grh grh;
    memcpy(&grh, r.at(0), sizeof(grh));
    EXPECT_EQ((6u << 28) | (0x2au << 20) | 0x12345u,
              be32toh(grh.version_tclass_flow));
    EXPECT_EQ(12u + 8 + 101 + 3 + 4, be16toh(grh.paylen)) << "BTH, DETH, "
            "the data padded to 4 bytes, ICRC";
    EXPECT_EQ(kIbNext, grh.next_hdr);
    EXPECT_EQ(64, grh.hop_limit);
    union ibv_gid sg = s.gid(), dg = r.gid();
    EXPECT_EQ(0, memcmp(&grh.sgid, &sg, sizeof(sg)));
    EXPECT_EQ(0, memcmp(&grh.dgid, &dg, sizeof(dg)));
    ASSERT_NO_FATAL_FAILURE(expect_sent(1));
}

/* The extended CQ's readers say what ibv_poll_cq says */
TEST_P(soft_ud, extended_cq_reads_the_sender)
{
    struct ibv_ah *ah = pair();
    ASSERT_NE(nullptr, ah);
    ASSERT_EQ(0, r.post_recv(7, {{0, 256}}));
    ASSERT_EQ(0, s.send(ah, r.qp->qp_num, 1, "x", 0, IBV_SEND_SIGNALED,
                        kQkey, true, 0x5678));
    struct ibv_poll_cq_attr pa = {};
    double deadline = now_sec() + 5;
    int ret;
    while ((ret = ibv_start_poll(r.cq, &pa)) == ENOENT) {
        s.poll();
        ASSERT_LT(now_sec(), deadline) << "nothing received";
    }
    ASSERT_EQ(0, ret);
    EXPECT_EQ(IBV_WC_SUCCESS, r.cq->status);
    EXPECT_EQ(IBV_WC_RECV, ibv_wc_read_opcode(r.cq));
    EXPECT_EQ(kGrh + 1, ibv_wc_read_byte_len(r.cq));
    EXPECT_EQ(s.qp->qp_num, ibv_wc_read_src_qp(r.cq));
    EXPECT_EQ(r.qp->qp_num, ibv_wc_read_qp_num(r.cq));
    EXPECT_EQ(1u, ibv_wc_read_slid(r.cq));
    EXPECT_EQ(0, ibv_wc_read_sl(r.cq));
    EXPECT_EQ((unsigned)(IBV_WC_GRH | IBV_WC_WITH_IMM),
              ibv_wc_read_wc_flags(r.cq));
    EXPECT_EQ(0x5678u, be32toh(ibv_wc_read_imm_data(r.cq)));
    ibv_end_poll(r.cq);
}

/* Nothing answers a datagram: one nobody can take is lost, and its send
 * completes with success all the same (IBTA 9.8.3.3: UD responders drop
 * what they cannot place).  No receive posted: dropped, not kept for a
 * later receive */
TEST_P(soft_ud, datagram_without_a_receive_is_dropped)
{
    struct ibv_ah *ah = pair();
    ASSERT_NE(nullptr, ah);
    ASSERT_EQ(0, s.send(ah, r.qp->qp_num, 1, "first", 0));
    ASSERT_NO_FATAL_FAILURE(expect_sent(1));
    EXPECT_EQ(0u, quiet(r, 0.1));

    ASSERT_EQ(0, r.post_recv(2, {{0, 256}}));
    EXPECT_EQ(0u, quiet(r, 0.1)) << "the first datagram was kept";
    ASSERT_EQ(0, s.send(ah, r.qp->qp_num, 3, "second", 64));
    struct ibv_wc wc;
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(2u, wc.wr_id);
    EXPECT_EQ(kGrh + 6, wc.byte_len);
    EXPECT_EQ("second", std::string(r.at(kGrh), 6));
    ASSERT_NO_FATAL_FAILURE(expect_sent(3));
    EXPECT_EQ(0u, quiet(r, 0.1));
}

/* The Q_Key must match the receiving QP's (IBTA 10.2.5); a send whose
 * Q_Key has its high bit set uses the sending QP's own (C10-15) */
TEST_P(soft_ud, qkey_must_match)
{
    struct ibv_ah *ah = pair();
    ASSERT_NE(nullptr, ah);
    ASSERT_EQ(0, r.post_recv(1, {{0, 256}}));
    ASSERT_EQ(0, s.send(ah, r.qp->qp_num, 11, "wrong key", 0,
                        IBV_SEND_SIGNALED, kQkey + 1));
    ASSERT_NO_FATAL_FAILURE(expect_sent(11));
    EXPECT_EQ(0u, quiet(r, 0.1)) << "a datagram of another Q_Key arrived";

    ASSERT_EQ(0, s.send(ah, r.qp->qp_num, 12, "own key", 0,
                        IBV_SEND_SIGNALED, 0x80000000u));
    struct ibv_wc wc;
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ("own key", std::string(r.at(kGrh), 7));
    ASSERT_NO_FATAL_FAILURE(expect_sent(12));
}

/* A QP number nobody owns, or a QP destroyed: the send completes, and
 * the datagram goes nowhere */
TEST_P(soft_ud, datagram_to_no_qp_completes_locally)
{
    struct ibv_ah *ah = pair();
    ASSERT_NE(nullptr, ah);
    uint32_t gone = r.qp->qp_num;
    ASSERT_EQ(0, s.send(ah, gone, 1, "alive", 0));
    ASSERT_NO_FATAL_FAILURE(expect_sent(1));
    ASSERT_EQ(0, softnic_destroy_qp(r.qp));
    r.qp = nullptr;
    ASSERT_EQ(0, s.send(ah, gone, 2, "to a QP gone", 0));
    ASSERT_NO_FATAL_FAILURE(expect_sent(2));
    ASSERT_EQ(0, s.send(ah, 0xfffffe, 3, "to nobody", 0));
    ASSERT_NO_FATAL_FAILURE(expect_sent(3));
    EXPECT_EQ(IBV_QPS_RTS, s.state());
}

/* An address that reaches no software NIC (another host's GID, a GID
 * that is no software NIC's) makes an address handle, as on mlx5, and
 * its datagrams are lost */
TEST_P(soft_ud, address_nobody_owns_drops)
{
    ASSERT_NE(nullptr, pair());
    ASSERT_EQ(0, r.post_recv(1, {{0, 256}}));
    union ibv_gid other = r.gid();
    other.raw[2] ^= 0xff;                       /* another host */
    struct ibv_ah *far = s.ah_to(other);
    ASSERT_NE(nullptr, far);
    union ibv_gid link_local;
    memset(&link_local, 0, sizeof(link_local));
    link_local.raw[0] = 0xfe;
    link_local.raw[1] = 0x80;
    link_local.raw[15] = 1;
    struct ibv_ah *foreign = s.ah_to(link_local);
    ASSERT_NE(nullptr, foreign);
    ASSERT_EQ(0, s.send(far, r.qp->qp_num, 1, "far", 0));
    ASSERT_EQ(0, s.send(foreign, r.qp->qp_num, 2, "foreign", 0));
    ASSERT_NO_FATAL_FAILURE(expect_sent(1));
    ASSERT_NO_FATAL_FAILURE(expect_sent(2));
    EXPECT_EQ(0u, quiet(r, 0.1));
}

/* The answer to a datagram, from its completion and GRH
 * (ibv_init_ah_from_wc(3)): back to the sender's QP */
TEST_P(soft_ud, reply_to_the_sender_of_a_completion)
{
    struct ibv_ah *ah = pair();
    ASSERT_NE(nullptr, ah);
    ASSERT_EQ(0, r.post_recv(1, {{0, 256}}));
    ASSERT_EQ(0, s.post_recv(2, {{4096, 256}}));
    ASSERT_EQ(0, s.send(ah, r.qp->qp_num, 3, "ping", 0));
    struct ibv_wc wc;
    ASSERT_TRUE(next(r, &wc));
    ASSERT_EQ(IBV_WC_SUCCESS, wc.status);

    struct ibv_ah_attr attr;
    ASSERT_EQ(0, softnic_init_ah_from_wc(r.ctx, 1, &wc,
                                         (struct ibv_grh *)r.at(0), &attr));
    union ibv_gid sg = s.gid();
    EXPECT_TRUE(attr.is_global);
    EXPECT_EQ(0, memcmp(&attr.grh.dgid, &sg, sizeof(sg)));
    EXPECT_EQ(wc.slid, attr.dlid);
    struct ibv_ah *back = softnic_create_ah_from_wc(r.pd, &wc,
                                                    (struct ibv_grh *)r.at(0),
                                                    1);
    ASSERT_NE(nullptr, back);
    r.ahs.push_back(back);
    ASSERT_EQ(0, r.send(back, wc.src_qp, 4, "pong", 1024));
    ASSERT_TRUE(next(s, &wc));      /* ping's send, or pong's arrival */
    std::vector<uint64_t> ids = { wc.wr_id };
    ASSERT_TRUE(next(s, &wc));
    ids.push_back(wc.wr_id);
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ(std::vector<uint64_t>({2, 3}), ids);
    EXPECT_EQ("pong", std::string(s.at(4096 + kGrh), 4));
}


/* A receive too short for the GRH and the data: it completes with
 * IBV_WC_LOC_LEN_ERR and the QP enters the error state (the harsher
 * reading: docs/verbs-device.md row 35); the sender knows nothing */
TEST_P(soft_ud, receive_too_short_fails_it_and_the_qp)
{
    struct ibv_ah *ah = pair();
    ASSERT_NE(nullptr, ah);
    ASSERT_EQ(0, r.post_recv(1, {{0, (uint32_t)kGrh + 10}}));
    ASSERT_EQ(0, r.post_recv(2, {{256, 256}}));
    ASSERT_EQ(0, s.send(ah, r.qp->qp_num, 1, std::string(11, 'l'), 0));
    struct ibv_wc wc;
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(1u, wc.wr_id);
    EXPECT_EQ(IBV_WC_LOC_LEN_ERR, wc.status);
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ(2u, wc.wr_id);
    EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, wc.status);
    EXPECT_EQ(IBV_QPS_ERR, r.state());
    ASSERT_NO_FATAL_FAILURE(expect_sent(1));
}

/* Datagrams that reach a QP before RTR are not received (a QP in INIT
 * takes nothing), nor kept for later */
TEST_P(soft_ud, qp_before_rtr_takes_nothing)
{
    s.qp = s.create();
    r.qp = r.create();
    ASSERT_NE(nullptr, s.qp);
    ASSERT_NE(nullptr, r.qp);
    ASSERT_EQ(0, ud_side::to_rts(s.qp));
    struct ibv_ah *ah = s.ah_to(r.gid());
    ASSERT_NE(nullptr, ah);
    struct ibv_qp_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    attr.qkey     = kQkey;
    ASSERT_EQ(0, softnic_modify_qp(r.qp, &attr, IBV_QP_STATE |
                                   IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                   IBV_QP_QKEY));
    ASSERT_EQ(0, r.post_recv(1, {{0, 256}}));
    ASSERT_EQ(0, s.send(ah, r.qp->qp_num, 1, "early", 0));
    ASSERT_NO_FATAL_FAILURE(expect_sent(1));
    EXPECT_EQ(0u, quiet(r, 0.1));
    attr.qp_state = IBV_QPS_RTR;
    ASSERT_EQ(0, softnic_modify_qp(r.qp, &attr, IBV_QP_STATE));
    EXPECT_EQ(0u, quiet(r, 0.1)) << "a datagram sent before RTR arrived";
    ASSERT_EQ(0, s.send(ah, r.qp->qp_num, 2, "in time", 0));
    struct ibv_wc wc;
    ASSERT_TRUE(next(r, &wc));
    EXPECT_EQ("in time", std::string(r.at(kGrh), 7));
}

/* RC and UD do not meet: an RC QP does not connect to a UD QP's number
 * (ECONNREFUSED, as to no QP), and a datagram to an RC QP is dropped */
TEST_P(soft_ud, rc_and_ud_do_not_mix)
{
    struct ibv_ah *ah = pair();
    ASSERT_NE(nullptr, ah);
    struct ibv_qp_init_attr init;
    memset(&init, 0, sizeof(init));
    init.send_cq          = ibv_cq_ex_to_cq(r.cq);
    init.recv_cq          = ibv_cq_ex_to_cq(r.cq);
    init.qp_type          = IBV_QPT_RC;
    init.cap.max_send_wr  = 4;
    init.cap.max_recv_wr  = 4;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    struct ibv_qp *rc = softnic_create_qp(r.pd, &init);
    ASSERT_NE(nullptr, rc);
    EXPECT_EQ(ECONNREFUSED, verbs_connect::connect_qp(rc, s.ctx,
                                                      s.qp->qp_num));
    struct ibv_sge sge = { (uintptr_t)r.at(0), 256, r.mr->lkey };
    struct ibv_recv_wr rwr, *bad = nullptr;
    memset(&rwr, 0, sizeof(rwr));
    rwr.sg_list = &sge;
    rwr.num_sge = 1;
    ASSERT_EQ(0, ibv_post_recv(rc, &rwr, &bad));
    ASSERT_EQ(0, s.send(ah, rc->qp_num, 1, "to RC", 0));
    ASSERT_NO_FATAL_FAILURE(expect_sent(1));
    EXPECT_EQ(0u, quiet(r, 0.1));
    EXPECT_EQ(0, softnic_destroy_qp(rc));
}

/* Many senders, one receiving QP: every datagram arrives, each sender's
 * in its order, named by its QP */
TEST_P(soft_ud, many_senders_reach_one_qp)
{
    const int senders = 4, each = 200;
    r.qp = r.create(6, 1, 64, nullptr, 1024);
    ASSERT_NE(nullptr, r.qp);
    ASSERT_EQ(0, ud_side::to_rts(r.qp));
    for (int i = 0; i < senders * each; ++i) {
        ASSERT_EQ(0, r.post_recv(i, {{(size_t)i * 64, 64}}));
    }
    union ibv_gid dgid = r.gid();
    uint32_t dqpn      = r.qp->qp_num;
    std::vector<std::unique_ptr<ud_side>> tx(senders);
    std::vector<uint32_t> qpns(senders);
    for (int t = 0; t < senders; ++t) {
        tx[t].reset(new ud_side());
        ASSERT_NO_FATAL_FAILURE(tx[t]->open(list[0], GetParam()));
        tx[t]->qp = tx[t]->create();
        ASSERT_NE(nullptr, tx[t]->qp);
        ASSERT_EQ(0, ud_side::to_rts(tx[t]->qp));
        qpns[t] = tx[t]->qp->qp_num;
    }
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < senders; ++t) {
        threads.emplace_back([&, t] {
            ud_side &x        = *tx[t];
            struct ibv_ah *ah = x.ah_to(dgid);
            for (int i = 0; i < each; ++i) {
                uint32_t v[2] = { (uint32_t)t, (uint32_t)i };
                memcpy(x.at(i * 8), v, 8);
                struct ibv_sge sge = { (uintptr_t)x.at(i * 8), 8,
                                       x.mr->lkey };
                /* unsignaled but every 16th: the send queue's 256 */
                while (x.send_sge(ah, dqpn, i, &sge, 1,
                                  (i % 16 == 15) ? IBV_SEND_SIGNALED : 0) ==
                       ENOMEM) {
                    x.poll();
                }
                x.poll();
            }
            double deadline = now_sec() + 5;
            while ((x.wcs.size() < each / 16) && (now_sec() < deadline)) {
                x.poll();
            }
            for (auto &wc : x.wcs) {
                failures += (wc.status != IBV_WC_SUCCESS);
            }
        });
    }
    std::vector<int> seen(senders, 0);
    int got = 0;
    double deadline = now_sec() + 20;
    while ((got < senders * each) && (now_sec() < deadline)) {
        r.poll();
        while (!r.wcs.empty()) {
            struct ibv_wc wc = r.wcs.front();
            r.wcs.pop_front();
            ASSERT_EQ(IBV_WC_SUCCESS, wc.status);
            ASSERT_EQ(kGrh + 8, wc.byte_len);
            uint32_t v[2];
            memcpy(v, r.at(wc.wr_id * 64 + kGrh), 8);
            ASSERT_LT(v[0], (uint32_t)senders);
            EXPECT_EQ(qpns[v[0]], wc.src_qp);
            EXPECT_EQ((uint32_t)seen[v[0]], v[1]) << "out of order";
            seen[v[0]] = v[1] + 1;
            ++got;
        }
    }
    for (auto &th : threads) {
        th.join();
    }
    EXPECT_EQ(senders * each, got);
    EXPECT_EQ(0, failures.load());
    for (auto &x : tx) {
        x->close();
    }
}

/* A sender that dies holding a receiving QP's ring, between its record and
 * the ring's tail, stops no one: the next sender takes the ring over, after
 * what the dead one published, which is delivered; whether the receiver
 * took that record before the next send or not */
TEST_P(soft_ud, sender_dying_in_the_ring_stops_no_one)
{
    struct ibv_ah *ah = pair();
    ASSERT_NE(nullptr, ah);
    for (uint64_t taken_first = 0; taken_first <= 1; ++taken_first) {
        SCOPED_TRACE(taken_first ? "the dead one's record taken first" :
                                   "the dead one's record still there");
        uint64_t id = 1 + 2 * taken_first;
        ASSERT_EQ(0, r.post_recv(id, {{0, 256}}));
        ASSERT_EQ(0, r.post_recv(id + 1, {{256, 256}}));
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            _exit((softnic_test_ud_die_holding(r.qp, 1) == 0) ? 0 : 1);
        }
        int status = 0;
        ASSERT_EQ(pid, waitpid(pid, &status, 0));
        ASSERT_TRUE(WIFEXITED(status) && (WEXITSTATUS(status) == 0));

        struct ibv_wc wc;
        if (taken_first) {
            ASSERT_TRUE(next(r, &wc));
            EXPECT_EQ(id, wc.wr_id);
        }
        ASSERT_EQ(0, s.send(ah, r.qp->qp_num, id, "after", 0));
        ASSERT_NO_FATAL_FAILURE(expect_sent(id));
        if (!taken_first) {
            ASSERT_TRUE(next(r, &wc));
        }
        EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
        EXPECT_EQ(id, wc.wr_id);
        EXPECT_EQ(kGrh, wc.byte_len) << "the dead sender's datagram";
        EXPECT_EQ(r.qp->qp_num, wc.src_qp);
        ASSERT_TRUE(next(r, &wc));
        EXPECT_EQ(id + 1, wc.wr_id);
        EXPECT_EQ(kGrh + 5, wc.byte_len);
        EXPECT_EQ("after", std::string(r.at(256 + kGrh), 5));
    }
}


/* A solicited datagram raises a CQ armed for solicited completions only;
 * an unsolicited one does not (ibv_req_notify_cq(3)) */
TEST_P(soft_ud, solicited_datagram_raises_a_solicited_arm)
{
    struct ibv_comp_channel *ch = nullptr;
    ud_side e;
    ASSERT_NO_FATAL_FAILURE(e.open(list[0], GetParam(), &ch));
    s.qp = s.create();
    e.qp = e.create();
    ASSERT_NE(nullptr, s.qp);
    ASSERT_NE(nullptr, e.qp);
    ASSERT_EQ(0, ud_side::to_rts(s.qp));
    ASSERT_EQ(0, ud_side::to_rts(e.qp));
    struct ibv_ah *ah = s.ah_to(e.gid());
    ASSERT_NE(nullptr, ah);
    ASSERT_EQ(0, e.post_recv(1, {{0, 256}}));
    ASSERT_EQ(0, e.post_recv(2, {{256, 256}}));
    ASSERT_EQ(0, ibv_req_notify_cq(ibv_cq_ex_to_cq(e.cq), 1));

    struct pollfd pfd = { ch->fd, POLLIN, 0 };
    ASSERT_EQ(0, s.send(ah, e.qp->qp_num, 1, "plain", 0));
    double deadline = now_sec() + 5;
    while (e.wcs.empty() && (now_sec() < deadline)) {
        e.poll();
    }
    ASSERT_EQ(1u, e.wcs.size());
    EXPECT_EQ(0, poll(&pfd, 1, 100)) << "an unsolicited datagram raised it";
    ASSERT_EQ(0, s.send(ah, e.qp->qp_num, 2, "solicited", 0,
                        IBV_SEND_SIGNALED | IBV_SEND_SOLICITED));
    EXPECT_EQ(1, poll(&pfd, 1, 5000)) << "no event for a solicited one";
    struct ibv_cq *ev_cq = nullptr;
    void *ev_ctx         = nullptr;
    ASSERT_EQ(0, softnic_get_cq_event(ch, &ev_cq, &ev_ctx));
    EXPECT_EQ(ibv_cq_ex_to_cq(e.cq), ev_cq);
    softnic_ack_cq_events(ev_cq, 1);
    e.close(ch);
}

INSTANTIATE_TEST_SUITE_P(progress, soft_ud,
                         ::testing::Values((uint32_t)SOFTNIC_PROGRESS_INLINE,
                                           (uint32_t)SOFTNIC_PROGRESS_THREAD),
                         [](const ::testing::TestParamInfo<uint32_t> &p) {
                             return std::string(p.param ==
                                                SOFTNIC_PROGRESS_INLINE ?
                                                "inline" : "thread");
                         });
