/*
 * The extended QP's post API on the software NIC (issue 37): ibv_create_qp_ex
 * with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, then ibv_wr_start .. ibv_wr_complete
 * (ibv_wr_post(3)), as perftest uses it on mlx5.  Two devices, a QP on each,
 * connected with modify_qp; the sender's QP is extended, the receiver's is
 * an ordinary one with its own receive queue.  What is checked is the man
 * page's promise and mlx5's answers where it decides (docs/verbs-device.md
 * row 32).  Every test runs with the device's work inline and on its
 * engine thread.
 */
#include <gtest/gtest.h>

#include "softnic/softnic.h"
#include "verbs_connect.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

#include <deque>
#include <string>
#include <vector>

namespace {

using namespace verbs_connect;

const uint64_t all_ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                         IBV_QP_EX_WITH_RDMA_WRITE |
                         IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                         IBV_QP_EX_WITH_RDMA_READ;

/* A device, its PD, one CQ, a registered arena */
struct side {
    struct ibv_context *ctx = nullptr;
    struct ibv_pd      *pd  = nullptr;
    struct ibv_cq_ex   *cq  = nullptr;
    struct ibv_mr      *mr  = nullptr;
    struct ibv_qp      *qp  = nullptr;
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
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                            IBV_ACCESS_REMOTE_READ);
        ASSERT_NE(nullptr, mr);
    }

    void close() {
        if (qp)  { EXPECT_EQ(0, softnic_destroy_qp(qp)); qp = nullptr; }
        if (mr)  { EXPECT_EQ(0, softnic_dereg_mr(mr)); mr = nullptr; }
        if (cq)  {
            EXPECT_EQ(0, softnic_destroy_cq(ibv_cq_ex_to_cq(cq)));
            cq = nullptr;
        }
        if (pd)  { EXPECT_EQ(0, softnic_dealloc_pd(pd)); pd = nullptr; }
        if (ctx) { EXPECT_EQ(0, softnic_close_device(ctx)); ctx = nullptr; }
    }

    struct ibv_qp_init_attr_ex init_ex(uint32_t send_wr, uint64_t ops) {
        struct ibv_qp_init_attr_ex init;
        memset(&init, 0, sizeof(init));
        init.send_cq          = ibv_cq_ex_to_cq(cq);
        init.recv_cq          = ibv_cq_ex_to_cq(cq);
        init.qp_type          = IBV_QPT_RC;
        init.cap.max_send_wr  = send_wr;
        init.cap.max_send_sge = 2;
        init.cap.max_recv_wr  = 16;
        init.cap.max_recv_sge = 1;
        init.cap.max_inline_data = 64;
        init.comp_mask        = IBV_QP_INIT_ATTR_PD |
                                IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        init.pd               = pd;
        init.send_ops_flags   = ops;
        return init;
    }

    /* An ordinary QP (ibv_create_qp) */
    struct ibv_qp *create_qp() {
        struct ibv_qp_init_attr init;
        memset(&init, 0, sizeof(init));
        init.send_cq          = ibv_cq_ex_to_cq(cq);
        init.recv_cq          = ibv_cq_ex_to_cq(cq);
        init.qp_type          = IBV_QPT_RC;
        init.cap.max_send_wr  = 16;
        init.cap.max_send_sge = 2;
        init.cap.max_recv_wr  = 16;
        init.cap.max_recv_sge = 1;
        return softnic_create_qp(pd, &init);
    }

    char *at(size_t off) { return arena.data() + off; }
    uint64_t addr(size_t off) { return (uintptr_t)at(off); }

    int post_recv(uint64_t wr_id, size_t off, uint32_t len) {
        struct ibv_sge sge = { addr(off), len, mr->lkey };
        struct ibv_recv_wr wr, *bad = nullptr;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id   = wr_id;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        return ibv_post_recv(qp, &wr, &bad);
    }

    void poll() {
        struct ibv_wc wc[8];
        int n;
        while ((n = ibv_poll_cq(ibv_cq_ex_to_cq(cq), 8, wc)) > 0) {
            wcs.insert(wcs.end(), wc, wc + n);
        }
        ASSERT_GE(n, 0);
    }
};

/* RESET -> RTS, with remote reads and writes allowed */
int connect_rw(struct ibv_qp *qp, struct ibv_context *peer_ctx,
               uint32_t peer_qpn)
{
    union ibv_gid gid;
    int ret;

    if (softnic_query_gid(peer_ctx, 1, 0, &gid) != 0) {
        return errno;
    }
    ret = to_init(qp, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (ret == 0) {
        ret = to_rtr(qp, grh_to(gid), peer_qpn);
    }
    if (ret == 0) {
        ret = to_rts(qp);
    }
    return ret;
}

/* s (extended QP) sends to r (ordinary QP); the parameter: where the
 * device's work runs */
class soft_qp_ex : public ::testing::TestWithParam<uint32_t> {
protected:
    struct ibv_device **list = nullptr;
    side s, r;
    struct ibv_qp_ex *qpx = nullptr;

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

    void pair(uint32_t send_wr = 16) {
        struct ibv_qp_init_attr_ex init = s.init_ex(send_wr, all_ops);
        s.qp = ibv_create_qp_ex(s.ctx, &init);
        ASSERT_NE(nullptr, s.qp) << strerror(errno);
        qpx = softnic_qp_to_qp_ex(s.qp);
        ASSERT_NE(nullptr, qpx);
        r.qp = r.create_qp();
        ASSERT_NE(nullptr, r.qp);
        ASSERT_EQ(0, connect_rw(s.qp, r.ctx, r.qp->qp_num));
        ASSERT_EQ(0, connect_rw(r.qp, s.ctx, s.qp->qp_num));
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

    /* One signaled SEND of msg from s's arena at off: the batch's result */
    int send_one(uint64_t wr_id, const std::string &msg, size_t off) {
        memcpy(s.at(off), msg.data(), msg.size());
        ibv_wr_start(qpx);
        qpx->wr_id    = wr_id;
        qpx->wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_send(qpx);
        ibv_wr_set_sge(qpx, s.mr->lkey, s.addr(off), (uint32_t)msg.size());
        return ibv_wr_complete(qpx);
    }

    /* The next completion of n is a successful one of wr_id and opcode */
    void expect_wc(side &n, uint64_t wr_id, enum ibv_wc_opcode opcode,
                   uint32_t byte_len, struct ibv_wc *out = nullptr) {
        struct ibv_wc wc;
        ASSERT_TRUE(next(n, &wc)) << "no completion for " << wr_id;
        EXPECT_EQ(IBV_WC_SUCCESS, wc.status) << ibv_wc_status_str(wc.status);
        EXPECT_EQ(wr_id, wc.wr_id);
        EXPECT_EQ(opcode, wc.opcode);
        if ((opcode & IBV_WC_RECV) || (opcode == IBV_WC_RDMA_READ)) {
            EXPECT_EQ(byte_len, wc.byte_len);
        }
        if (out != nullptr) {
            *out = wc;
        }
    }
};

} // namespace


/* ----- creation ----- */

/* ibv_qp_to_qp_ex gives the extended QP only of a QP created with send
 * ops (libibverbs: VERBS_QP_EX is set by IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) */
TEST_P(soft_qp_ex, qp_to_qp_ex_only_with_send_ops)
{
    s.qp = s.create_qp();
    ASSERT_NE(nullptr, s.qp);
    EXPECT_EQ(nullptr, softnic_qp_to_qp_ex(s.qp));

    struct ibv_qp_init_attr_ex init = s.init_ex(16, 0);
    init.comp_mask    = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    init.create_flags = 0;
    struct ibv_qp *plain = ibv_create_qp_ex(s.ctx, &init);
    ASSERT_NE(nullptr, plain) << strerror(errno);
    EXPECT_EQ(nullptr, softnic_qp_to_qp_ex(plain));
    EXPECT_EQ(0, softnic_destroy_qp(plain));

    init = s.init_ex(16, IBV_QP_EX_WITH_SEND);
    struct ibv_qp *ex = ibv_create_qp_ex(s.ctx, &init);
    ASSERT_NE(nullptr, ex) << strerror(errno);
    struct ibv_qp_ex *qx = softnic_qp_to_qp_ex(ex);
    ASSERT_NE(nullptr, qx);
    EXPECT_EQ(ex, &qx->qp_base);
    EXPECT_EQ(ex->qp_num, qx->qp_base.qp_num);
    EXPECT_EQ(IBV_QPT_RC, qx->qp_base.qp_type);
    /* mlx5 sets every builder of the QP type whatever was asked, and
     * leaves unset what it does not carry */
    EXPECT_NE(nullptr, (void *)qx->wr_rdma_read);
    EXPECT_NE(nullptr, (void *)qx->wr_rdma_write_imm);
    EXPECT_EQ(nullptr, (void *)qx->wr_atomic_fetch_add);
    EXPECT_EQ(nullptr, (void *)qx->wr_set_ud_addr);
    EXPECT_EQ(0, softnic_destroy_qp(ex));
}

/* mlx5_qp_fill_wr_pfns: EOPNOTSUPP for send ops the QP cannot carry; the
 * software NIC carries no atomics, SEND_WITH_INV, LOCAL_INV or BIND_MW,
 * and RC QPs only */
TEST_P(soft_qp_ex, unsupported_ops_and_types_refused)
{
    const uint64_t refused[] = {
        IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
        IBV_QP_EX_WITH_SEND_WITH_INV, IBV_QP_EX_WITH_LOCAL_INV,
        IBV_QP_EX_WITH_BIND_MW, IBV_QP_EX_WITH_TSO };
    for (uint64_t op : refused) {
        struct ibv_qp_init_attr_ex init = s.init_ex(16, all_ops | op);
        errno = 0;
        EXPECT_EQ(nullptr, ibv_create_qp_ex(s.ctx, &init)) << op;
        EXPECT_EQ(EOPNOTSUPP, errno) << op;
    }
    struct ibv_qp_init_attr_ex init = s.init_ex(16, IBV_QP_EX_WITH_SEND);
    init.qp_type = IBV_QPT_UD;
    errno = 0;
    EXPECT_EQ(nullptr, ibv_create_qp_ex(s.ctx, &init));
    EXPECT_EQ(EOPNOTSUPP, errno);
}


/* ----- posting ----- */

/* A batch of each operation arrives and completes as ibv_post_send's work
 * requests do: in order, with the wr_id and flags current at each
 * builder's call, the immediate data, the bytes */
TEST_P(soft_qp_ex, batch_of_each_operation)
{
    ASSERT_NO_FATAL_FAILURE(pair());
    ASSERT_EQ(0, r.post_recv(11, 0, 256));
    ASSERT_EQ(0, r.post_recv(12, 256, 256));
    ASSERT_EQ(0, r.post_recv(13, 512, 256));
    memset(r.at(4096), '.', 8192);
    memcpy(s.at(0), "hello", 5);
    memset(s.at(64), 'i', 100);
    memset(s.at(1024), 'w', 3000);
    memset(s.at(8192), 'x', 700);
    memset(r.at(16384), 'r', 2000);

    ibv_wr_start(qpx);
    qpx->wr_flags = IBV_SEND_SIGNALED;
    qpx->wr_id    = 1;
    ibv_wr_send(qpx);
    ibv_wr_set_sge(qpx, s.mr->lkey, s.addr(0), 5);
    qpx->wr_id    = 2;
    ibv_wr_send_imm(qpx, htobe32(0xabcd1234));
    ibv_wr_set_sge(qpx, s.mr->lkey, s.addr(64), 100);
    qpx->wr_id    = 3;
    ibv_wr_rdma_write(qpx, r.mr->rkey, r.addr(4096));
    ibv_wr_set_sge(qpx, s.mr->lkey, s.addr(1024), 3000);
    qpx->wr_id    = 4;
    ibv_wr_rdma_write_imm(qpx, r.mr->rkey, r.addr(8192), htobe32(77));
    ibv_wr_set_sge(qpx, s.mr->lkey, s.addr(8192), 700);
    qpx->wr_id    = 5;
    ibv_wr_rdma_read(qpx, r.mr->rkey, r.addr(16384));
    ibv_wr_set_sge(qpx, s.mr->lkey, s.addr(32768), 2000);
    qpx->wr_id    = 6;
    qpx->wr_flags = 0;          /* unsignaled: no completion */
    ibv_wr_send(qpx);
    ibv_wr_set_sge(qpx, s.mr->lkey, s.addr(0), 5);
    ASSERT_EQ(0, ibv_wr_complete(qpx));

    struct ibv_wc wc;
    ASSERT_NO_FATAL_FAILURE(expect_wc(r, 11, IBV_WC_RECV, 5, &wc));
    EXPECT_FALSE(wc.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(s.qp->qp_num, wc.src_qp);
    EXPECT_EQ("hello", std::string(r.at(0), 5));
    ASSERT_NO_FATAL_FAILURE(expect_wc(r, 12, IBV_WC_RECV, 100, &wc));
    EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(0xabcd1234u, be32toh(wc.imm_data));
    EXPECT_EQ(std::string(100, 'i'), std::string(r.at(256), 100));
    ASSERT_NO_FATAL_FAILURE(expect_wc(r, 13, IBV_WC_RECV_RDMA_WITH_IMM, 700,
                                      &wc));
    EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(77u, be32toh(wc.imm_data));

    ASSERT_NO_FATAL_FAILURE(expect_wc(s, 1, IBV_WC_SEND, 5));
    ASSERT_NO_FATAL_FAILURE(expect_wc(s, 2, IBV_WC_SEND, 100));
    ASSERT_NO_FATAL_FAILURE(expect_wc(s, 3, IBV_WC_RDMA_WRITE, 3000));
    ASSERT_NO_FATAL_FAILURE(expect_wc(s, 4, IBV_WC_RDMA_WRITE, 700));
    ASSERT_NO_FATAL_FAILURE(expect_wc(s, 5, IBV_WC_RDMA_READ, 2000));
    EXPECT_EQ(std::string(3000, 'w'), std::string(r.at(4096), 3000));
    EXPECT_EQ('.', *r.at(4096 + 3000));
    EXPECT_EQ(std::string(700, 'x'), std::string(r.at(8192), 700));
    EXPECT_EQ(std::string(2000, 'r'), std::string(s.at(32768), 2000));

    /* the unsignaled SEND arrived; behind it, a signaled one completes
     * next on the sender */
    ASSERT_EQ(0, r.post_recv(14, 768, 256));
    ASSERT_EQ(0, r.post_recv(15, 1024, 256));
    ASSERT_NO_FATAL_FAILURE(expect_wc(r, 14, IBV_WC_RECV, 5));
    ASSERT_EQ(0, send_one(7, "after", 0));
    ASSERT_NO_FATAL_FAILURE(expect_wc(r, 15, IBV_WC_RECV, 5));
    ASSERT_NO_FATAL_FAILURE(expect_wc(s, 7, IBV_WC_SEND, 5));
}

/* wr_set_inline_data copies the data at its call (mlx5: into the WQE):
 * the buffer may change before wr_complete; the list form concatenates */
TEST_P(soft_qp_ex, inline_data_copied_at_the_call)
{
    ASSERT_NO_FATAL_FAILURE(pair());
    ASSERT_EQ(0, r.post_recv(21, 0, 256));
    ASSERT_EQ(0, r.post_recv(22, 256, 256));
    memset(r.at(4096), '.', 64);
    char buf[32];
    char part1[] = "inline-", part2[] = "list";

    ibv_wr_start(qpx);
    qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    qpx->wr_id    = 1;
    ibv_wr_send(qpx);
    memcpy(buf, "first", 5);
    ibv_wr_set_inline_data(qpx, buf, 5);
    memcpy(buf, "XXXXX", 5);
    qpx->wr_id    = 2;
    ibv_wr_send(qpx);
    struct ibv_data_buf list[] = { { part1, 7 }, { part2, 4 } };
    ibv_wr_set_inline_data_list(qpx, 2, list);
    memcpy(part1, "YYYYYYY", 7);
    qpx->wr_id    = 3;
    ibv_wr_rdma_write(qpx, r.mr->rkey, r.addr(4096));
    memcpy(buf, "written", 7);
    ibv_wr_set_inline_data(qpx, buf, 7);
    memcpy(buf, "ZZZZZZZ", 7);
    ASSERT_EQ(0, ibv_wr_complete(qpx));

    ASSERT_NO_FATAL_FAILURE(expect_wc(r, 21, IBV_WC_RECV, 5));
    EXPECT_EQ("first", std::string(r.at(0), 5));
    ASSERT_NO_FATAL_FAILURE(expect_wc(r, 22, IBV_WC_RECV, 11));
    EXPECT_EQ("inline-list", std::string(r.at(256), 11));
    ASSERT_NO_FATAL_FAILURE(expect_wc(s, 1, IBV_WC_SEND, 5));
    ASSERT_NO_FATAL_FAILURE(expect_wc(s, 2, IBV_WC_SEND, 11));
    ASSERT_NO_FATAL_FAILURE(expect_wc(s, 3, IBV_WC_RDMA_WRITE, 7));
    EXPECT_EQ("written.", std::string(r.at(4096), 8));
}

/* wr_set_sge_list gathers its entries in order */
TEST_P(soft_qp_ex, sge_list_gathers)
{
    ASSERT_NO_FATAL_FAILURE(pair());
    ASSERT_EQ(0, r.post_recv(31, 0, 256));
    memcpy(s.at(100), "gather-", 7);
    memcpy(s.at(900), "list", 4);
    struct ibv_sge sge[2] = { { s.addr(100), 7, s.mr->lkey },
                              { s.addr(900), 4, s.mr->lkey } };

    ibv_wr_start(qpx);
    qpx->wr_id    = 1;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(qpx);
    ibv_wr_set_sge_list(qpx, 2, sge);
    ASSERT_EQ(0, ibv_wr_complete(qpx));

    ASSERT_NO_FATAL_FAILURE(expect_wc(r, 31, IBV_WC_RECV, 11));
    EXPECT_EQ("gather-list", std::string(r.at(0), 11));
    ASSERT_NO_FATAL_FAILURE(expect_wc(s, 1, IBV_WC_SEND, 11));
}

/* wr_abort posts nothing: the next batch's SEND is the first the receiver
 * takes and the first the sender completes; wr_start works again */
TEST_P(soft_qp_ex, abort_posts_nothing)
{
    ASSERT_NO_FATAL_FAILURE(pair());
    ASSERT_EQ(0, r.post_recv(41, 0, 256));
    memcpy(s.at(0), "aborted", 7);

    ibv_wr_start(qpx);
    qpx->wr_id    = 1;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(qpx);
    ibv_wr_set_sge(qpx, s.mr->lkey, s.addr(0), 7);
    ibv_wr_rdma_write(qpx, r.mr->rkey, r.addr(4096));
    ibv_wr_set_sge(qpx, s.mr->lkey, s.addr(0), 7);
    ibv_wr_abort(qpx);

    ASSERT_EQ(0, send_one(2, "posted", 64));
    ASSERT_NO_FATAL_FAILURE(expect_wc(r, 41, IBV_WC_RECV, 6));
    EXPECT_EQ("posted", std::string(r.at(0), 6));
    ASSERT_NO_FATAL_FAILURE(expect_wc(s, 2, IBV_WC_SEND, 6));
    EXPECT_NE(0, memcmp(r.at(4096), "aborted", 7));
}

/* More work requests than the send queue holds: mlx5 records ENOMEM,
 * wr_complete returns it and rolls the whole batch back */
TEST_P(soft_qp_ex, batch_past_the_send_queue_fails_whole)
{
    ASSERT_NO_FATAL_FAILURE(pair(4));
    ASSERT_EQ(0, r.post_recv(51, 0, 256));
    ASSERT_EQ(0, r.post_recv(52, 256, 256));
    memcpy(s.at(0), "lost", 4);

    ibv_wr_start(qpx);
    qpx->wr_flags = IBV_SEND_SIGNALED;
    for (uint64_t id = 1; id <= 5; ++id) {
        qpx->wr_id = id;
        ibv_wr_send(qpx);
        ibv_wr_set_sge(qpx, s.mr->lkey, s.addr(0), 4);
    }
    EXPECT_EQ(ENOMEM, ibv_wr_complete(qpx));

    /* a full queue's worth goes */
    memcpy(s.at(64), "kept", 4);
    ibv_wr_start(qpx);
    for (uint64_t id = 11; id <= 14; ++id) {
        qpx->wr_id    = id;
        qpx->wr_flags = (id == 11) ? IBV_SEND_SIGNALED : 0;
        if (id == 11) {
            ibv_wr_send(qpx);
        } else {
            ibv_wr_rdma_write(qpx, r.mr->rkey, r.addr(8192));
        }
        ibv_wr_set_sge(qpx, s.mr->lkey, s.addr(64), 4);
    }
    ASSERT_EQ(0, ibv_wr_complete(qpx));
    ASSERT_NO_FATAL_FAILURE(expect_wc(r, 51, IBV_WC_RECV, 4));
    EXPECT_EQ("kept", std::string(r.at(0), 4));
    ASSERT_NO_FATAL_FAILURE(expect_wc(s, 11, IBV_WC_SEND, 4));
}

/* The send queue's room counts what is still outstanding (mlx5_wq_overflow):
 * a SEND held by receiver-not-ready leaves room for 3 of 4 */
TEST_P(soft_qp_ex, outstanding_requests_take_room)
{
    ASSERT_NO_FATAL_FAILURE(pair(4));
    ASSERT_EQ(0, send_one(1, "held", 0));   /* no receive posted yet */

    memcpy(s.at(64), "over", 4);
    ibv_wr_start(qpx);
    qpx->wr_flags = IBV_SEND_SIGNALED;
    for (uint64_t id = 2; id <= 5; ++id) {
        qpx->wr_id = id;
        ibv_wr_send(qpx);
        ibv_wr_set_sge(qpx, s.mr->lkey, s.addr(64), 4);
    }
    EXPECT_EQ(ENOMEM, ibv_wr_complete(qpx));

    ASSERT_EQ(0, r.post_recv(61, 0, 256));
    ASSERT_EQ(0, r.post_recv(62, 256, 256));
    ASSERT_NO_FATAL_FAILURE(expect_wc(r, 61, IBV_WC_RECV, 4));
    EXPECT_EQ("held", std::string(r.at(0), 4));
    ASSERT_NO_FATAL_FAILURE(expect_wc(s, 1, IBV_WC_SEND, 4));
    ASSERT_EQ(0, send_one(6, "next", 128));
    ASSERT_NO_FATAL_FAILURE(expect_wc(r, 62, IBV_WC_RECV, 4));
    EXPECT_EQ("next", std::string(r.at(256), 4));
    ASSERT_NO_FATAL_FAILURE(expect_wc(s, 6, IBV_WC_SEND, 4));
}

/* Too many gather entries, or more inline data than the QP was granted:
 * ENOMEM from wr_complete (mlx5), and nothing of the batch is posted */
TEST_P(soft_qp_ex, oversized_request_fails_the_batch)
{
    ASSERT_NO_FATAL_FAILURE(pair());
    ASSERT_EQ(0, r.post_recv(71, 0, 4096));
    struct ibv_sge sge[8];
    for (auto &e : sge) {
        e = { s.addr(0), 1, s.mr->lkey };
    }
    ibv_wr_start(qpx);
    qpx->wr_id    = 1;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(qpx);
    ibv_wr_set_sge(qpx, s.mr->lkey, s.addr(0), 1);
    ibv_wr_send(qpx);
    ibv_wr_set_sge_list(qpx, 8, sge);
    EXPECT_EQ(ENOMEM, ibv_wr_complete(qpx));

    std::vector<char> big(4096, 'b');
    ibv_wr_start(qpx);
    qpx->wr_id    = 2;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(qpx);
    ibv_wr_set_inline_data(qpx, big.data(), big.size());
    EXPECT_EQ(ENOMEM, ibv_wr_complete(qpx));

    ASSERT_EQ(0, send_one(3, "only", 0));
    ASSERT_NO_FATAL_FAILURE(expect_wc(r, 71, IBV_WC_RECV, 4));
    ASSERT_NO_FATAL_FAILURE(expect_wc(s, 3, IBV_WC_SEND, 4));
}

INSTANTIATE_TEST_SUITE_P(progress, soft_qp_ex,
                         ::testing::Values((uint32_t)SOFTNIC_PROGRESS_INLINE,
                                           (uint32_t)SOFTNIC_PROGRESS_THREAD),
                         [](const ::testing::TestParamInfo<uint32_t> &p) {
                             return std::string(p.param ==
                                                SOFTNIC_PROGRESS_INLINE ?
                                                "inline" : "thread");
                         });
