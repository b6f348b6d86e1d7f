/*
 * UD QPs and address handles on the software NIC (issue 45), through the
 * verbs alone, as UCX's ud_verbs and ibv_ud_pingpong use them: devices with
 * a UD QP each, sending datagrams named by an address handle, a QP number
 * and a Q_Key.  What is checked is the verbs semantics (IBTA, the kernel's
 * UD state table, and mlx5 where it decides: docs/verbs-device.md rows
 * 33-35).  Every test runs with the device's work inline and on its engine
 * thread.
 */
#include <gtest/gtest.h>

#include "softnic/softnic.h"
#include "softnic/softnic_test.h"
#include "verbs_connect.h"

#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using verbs_connect::now_sec;

const uint32_t kQkey   = 0x11111111;
const size_t   kGrh    = 40;
const uint8_t  kIbNext = 0x1b;      /* the GRH's next header: IBA */

/* A device, its PD, a CQ for sends and receives, a registered arena, a
 * UD QP */
struct ud_side {
    struct ibv_context *ctx = nullptr;
    struct ibv_pd      *pd  = nullptr;
    struct ibv_cq_ex   *cq  = nullptr;
    struct ibv_mr      *mr  = nullptr;
    struct ibv_qp      *qp  = nullptr;
    std::vector<struct ibv_ah*> ahs;
    std::vector<char>  arena = std::vector<char>(1 << 20);
    std::deque<struct ibv_wc> wcs;

    void open(struct ibv_device *dev, uint32_t progress,
              struct ibv_comp_channel **channel = nullptr) {
        ctx = softnic_open_device(dev);
        ASSERT_NE(nullptr, ctx);
        if (channel != nullptr) {
            /* the usual order: the channel first (it asks for the
             * engine), then the CQ */
            *channel = softnic_create_comp_channel(ctx);
            ASSERT_NE(nullptr, *channel);
        } else {
            struct softnic_dv_attr dv;
            memset(&dv, 0, sizeof(dv));
            dv.progress = progress;
            ASSERT_EQ(0, softnic_dv_set_attr(ctx, &dv));
        }
        pd = softnic_alloc_pd(ctx);
        ASSERT_NE(nullptr, pd);
        struct ibv_cq_init_attr_ex ca;
        memset(&ca, 0, sizeof(ca));
        ca.cqe      = 4096;
        ca.channel  = (channel != nullptr) ? *channel : nullptr;
        ca.wc_flags = IBV_WC_STANDARD_FLAGS;
        cq = ibv_create_cq_ex(ctx, &ca);
        ASSERT_NE(nullptr, cq);
        mr = softnic_reg_mr(pd, arena.data(), arena.size(),
                            IBV_ACCESS_LOCAL_WRITE);
        ASSERT_NE(nullptr, mr);
    }

    void close() {
        for (struct ibv_ah *ah : ahs) {
            EXPECT_EQ(0, softnic_destroy_ah(ah));
        }
        ahs.clear();
        if (qp)  { EXPECT_EQ(0, softnic_destroy_qp(qp)); qp = nullptr; }
        if (mr)  { EXPECT_EQ(0, softnic_dereg_mr(mr)); mr = nullptr; }
        if (cq)  {
            EXPECT_EQ(0, softnic_destroy_cq(ibv_cq_ex_to_cq(cq)));
            cq = nullptr;
        }
        if (pd)  { EXPECT_EQ(0, softnic_dealloc_pd(pd)); pd = nullptr; }
        if (ctx) { EXPECT_EQ(0, softnic_close_device(ctx)); ctx = nullptr; }
    }

    /* A UD QP as UCX's ud_verbs asks for one (uct_ud_iface_create_qp: 6
     * send gather entries, 1 receive scatter entry, 64 bytes inline) */
    struct ibv_qp *create(uint32_t send_sge = 6, uint32_t recv_sge = 1,
                          uint32_t inl = 64, struct ibv_srq *srq = nullptr,
                          uint32_t recv_wr = 2048) {
        struct ibv_qp_init_attr init;
        memset(&init, 0, sizeof(init));
        init.send_cq             = ibv_cq_ex_to_cq(cq);
        init.recv_cq             = ibv_cq_ex_to_cq(cq);
        init.srq                 = srq;
        init.qp_type             = IBV_QPT_UD;
        init.cap.max_send_wr     = 256;
        init.cap.max_recv_wr     = srq ? 0 : recv_wr;
        init.cap.max_send_sge    = send_sge;
        init.cap.max_recv_sge    = srq ? 0 : recv_sge;
        init.cap.max_inline_data = inl;
        return softnic_create_qp(pd, &init);
    }

    /* RESET -> INIT (P_Key index 0, port 1, qkey) -> RTR -> RTS */
    static int to_rts(struct ibv_qp *q, uint32_t qkey = kQkey) {
        struct ibv_qp_attr attr;
        int ret;

        memset(&attr, 0, sizeof(attr));
        attr.qp_state = IBV_QPS_INIT;
        attr.port_num = 1;
        attr.qkey     = qkey;
        ret = softnic_modify_qp(q, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                IBV_QP_PORT | IBV_QP_QKEY);
        if (ret != 0) {
            return ret;
        }
        attr.qp_state = IBV_QPS_RTR;
        ret = softnic_modify_qp(q, &attr, IBV_QP_STATE);
        if (ret != 0) {
            return ret;
        }
        attr.qp_state = IBV_QPS_RTS;
        attr.sq_psn   = 0x123;
        return softnic_modify_qp(q, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN);
    }

    union ibv_gid gid() {
        union ibv_gid g;
        EXPECT_EQ(0, softnic_query_gid(ctx, 1, 0, &g));
        return g;
    }

    /* An address handle to the device whose GID this is */
    struct ibv_ah *ah_to(const union ibv_gid &dgid, uint8_t sl = 0,
                         uint8_t tclass = 0, uint32_t flow = 0) {
        struct ibv_ah_attr a = verbs_connect::grh_to(dgid);
        a.dlid               = 1;
        a.sl                 = sl;
        a.grh.traffic_class  = tclass;
        a.grh.flow_label     = flow;
        struct ibv_ah *ah    = softnic_create_ah(pd, &a);
        EXPECT_NE(nullptr, ah) << strerror(errno);
        if (ah != nullptr) {
            ahs.push_back(ah);
        }
        return ah;
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
        return ibv_post_recv(qp, &wr, &bad);
    }

    /* One datagram of msg (copied to off) to qpn at ah */
    int send(struct ibv_ah *ah, uint32_t qpn, uint64_t wr_id,
             const std::string &msg, size_t off,
             unsigned flags = IBV_SEND_SIGNALED, uint32_t qkey = kQkey,
             bool imm = false, uint32_t imm_data = 0) {
        memcpy(at(off), msg.data(), msg.size());
        struct ibv_sge sge = { (uintptr_t)at(off), (uint32_t)msg.size(),
                               mr->lkey };
        return send_sge(ah, qpn, wr_id, &sge, 1, flags, qkey, imm, imm_data);
    }

    int send_sge(struct ibv_ah *ah, uint32_t qpn, uint64_t wr_id,
                 struct ibv_sge *sge, int num_sge, unsigned flags,
                 uint32_t qkey = kQkey, bool imm = false,
                 uint32_t imm_data = 0) {
        struct ibv_send_wr wr, *bad = nullptr;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id             = wr_id;
        wr.opcode            = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
        wr.sg_list           = sge;
        wr.num_sge           = num_sge;
        wr.send_flags        = flags;
        wr.imm_data          = htobe32(imm_data);
        wr.wr.ud.ah          = ah;
        wr.wr.ud.remote_qpn  = qpn;
        wr.wr.ud.remote_qkey = qkey;
        return ibv_post_send(qp, &wr, &bad);
    }

    void poll() {
        struct ibv_wc wc[16];
        int n;
        while ((n = ibv_poll_cq(ibv_cq_ex_to_cq(cq), 16, wc)) > 0) {
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

/* s sends to r; the parameter: where the device's work runs */
class soft_ud : public ::testing::TestWithParam<uint32_t> {
protected:
    struct ibv_device **list = nullptr;
    ud_side s, r;

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

    /* s.qp and r.qp created and in RTS; s's address handle to r */
    struct ibv_ah *pair(uint32_t recv_sge = 1) {
        s.qp = s.create();
        EXPECT_NE(nullptr, s.qp);
        r.qp = r.create(6, recv_sge);
        EXPECT_NE(nullptr, r.qp);
        if ((s.qp == nullptr) || (r.qp == nullptr)) {
            return nullptr;
        }
        EXPECT_EQ(0, ud_side::to_rts(s.qp));
        EXPECT_EQ(0, ud_side::to_rts(r.qp));
        return s.ah_to(r.gid());
    }

    /* Polls both sides until n completes something; false on timeout */
    bool next(ud_side &n, struct ibv_wc *wc, double timeout = 5.0) {
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

    /* Polls both sides for `secs`: how many completions n got */
    size_t quiet(ud_side &n, double secs) {
        double deadline = now_sec() + secs;
        while (now_sec() < deadline) {
            s.poll();
            r.poll();
        }
        return n.wcs.size();
    }

    /* The next completion of s: a successful send of wr_id */
    void expect_sent(uint64_t wr_id) {
        struct ibv_wc wc;
        ASSERT_TRUE(next(s, &wc)) << "no send completion";
        EXPECT_EQ(IBV_WC_SUCCESS, wc.status) << ibv_wc_status_str(wc.status);
        EXPECT_EQ(IBV_WC_SEND, wc.opcode);
        EXPECT_EQ(wr_id, wc.wr_id);
    }
};

} // namespace


/* ----- a datagram and its receive ----- */

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

/* ibv_create_ah(3), as mlx5_create_ah: the port must exist and, on a port
 * that requires a GRH (ours), the address must carry one (EINVAL); the
 * GID index must name a GID of the port */
TEST_P(soft_ud, address_handle_rules)
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


/* ----- sends ----- */

/* Unsignaled sends complete silently; a signaled one after them comes
 * alone (ibv_post_send(3)), and the datagrams arrive in order */
TEST_P(soft_ud, unsignaled_sends_complete_silently)
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
TEST_P(soft_ud, inline_data_is_taken_at_post)
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
TEST_P(soft_ud, gather_of_six_and_a_grh_across_two_scatter_entries)
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
TEST_P(soft_ud, longer_than_the_mtu_fails_and_the_qp_enters_sqe)
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

    ASSERT_EQ(0, r.send(back, s.qp->qp_num, 21, "to a QP in SQE", 0));
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
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ("recovered", std::string(r.at(kGrh), 9));
}

/* A local key that does not cover the data: IBV_WC_LOC_PROT_ERR, SQE */
TEST_P(soft_ud, bad_lkey_fails_locally)
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
TEST_P(soft_ud, bad_requests_are_refused_at_post)
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


/* ----- receives ----- */

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

/* A UD QP on a basic SRQ receives through it; tag matching is RC's: a
 * TM-SRQ takes no UD QP */
TEST_P(soft_ud, basic_srq_serves_a_ud_qp)
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


/* ----- the QP ----- */

/* The kernel's UD state table (ib_modify_qp_is_ok): RESET -> INIT needs
 * the P_Key index, port and Q_Key and takes nothing else (no access
 * flags); INIT -> RTR needs nothing and takes no address; RTR -> RTS
 * needs the send PSN.  ibv_query_qp reads back the Q_Key and what
 * creation granted: the gather list asked, and mlx5's inline size (a UD
 * WQE of 64 bytes of segments: 124 for 6 entries and 64 asked) */
TEST_P(soft_ud, modify_follows_the_ud_state_table)
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
TEST_P(soft_ud, create_qp_ex_makes_a_ud_qp)
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
    e.close();
    EXPECT_EQ(0, softnic_destroy_comp_channel(ch));
}

INSTANTIATE_TEST_SUITE_P(progress, soft_ud,
                         ::testing::Values((uint32_t)SOFTNIC_PROGRESS_INLINE,
                                           (uint32_t)SOFTNIC_PROGRESS_THREAD),
                         [](const ::testing::TestParamInfo<uint32_t> &p) {
                             return std::string(p.param ==
                                                SOFTNIC_PROGRESS_INLINE ?
                                                "inline" : "thread");
                         });
