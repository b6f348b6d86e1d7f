/*
 * What the UD tests of the software NIC share (test_soft_ud.cc,
 * test_soft_ud_qp.cc): a device with a CQ, a registered arena and a UD QP,
 * driven through the verbs alone, and the fixture of a sender and a
 * receiver whose work runs where the test's parameter says.
 */
#ifndef RC_TM_TEST_DEV_UD_FIXTURE_H_
#define RC_TM_TEST_DEV_UD_FIXTURE_H_

#include <gtest/gtest.h>

#include "softnic/softnic.h"
#include "softnic/softnic_test.h"
#include "verbs_connect.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

#include <deque>
#include <string>
#include <vector>

namespace ud_test {

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

    /* channel: the CQ's, destroyed after it, before the context */
    void close(struct ibv_comp_channel *channel = nullptr) {
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
        if (channel) {
            EXPECT_EQ(0, softnic_destroy_comp_channel(channel));
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
class ud_pair : public ::testing::TestWithParam<uint32_t> {
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

} // namespace ud_test

#endif
