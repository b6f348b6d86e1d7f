/*
 * The software NIC's addresses (issue 37): one GID and one LID for the
 * device, whatever context reads them, and QP numbers unique on the device,
 * as on a NIC, whose GID table and LID are its port's and whose firmware
 * gives QP numbers (docs/verbs-device.md row 28).  rdma-core's pyverbs
 * tests open two contexts of a device in one process and connect each QP
 * with the GID its own context reads (tests/base.py, RCResources.to_rts):
 * that works here.  Through the verbs alone.
 */
#include <gtest/gtest.h>

#include "softnic/softnic.h"
#include "verbs_connect.h"
#include "softnic/softnic_test.h"

#include <endian.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

namespace {

using namespace verbs_connect;

struct ibv_device *soft_device()
{
    int n = 0;
    struct ibv_device **list = softnic_get_device_list(&n);
    return ((list != nullptr) && (n >= 1)) ? list[0] : nullptr;
}

/* A context, its PD, a CQ, a registered arena and QPs with their own
 * receive queues */
struct side {
    struct ibv_context *ctx = nullptr;
    struct ibv_pd      *pd  = nullptr;
    struct ibv_cq_ex   *cq  = nullptr;
    struct ibv_mr      *mr  = nullptr;
    std::vector<struct ibv_qp*> qps;
    std::vector<char>  arena = std::vector<char>(1 << 16);

    void open() {
        ctx = softnic_open_device(soft_device());
        ASSERT_NE(nullptr, ctx);
        pd = softnic_alloc_pd(ctx);
        ASSERT_NE(nullptr, pd);
        struct ibv_cq_init_attr_ex ca;
        memset(&ca, 0, sizeof(ca));
        ca.cqe      = 64;
        ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM;
        cq = ibv_create_cq_ex(ctx, &ca);
        ASSERT_NE(nullptr, cq);
        mr = softnic_reg_mr(pd, arena.data(), arena.size(),
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        ASSERT_NE(nullptr, mr);
    }

    ~side() {
        for (auto qp : qps) {
            EXPECT_EQ(0, softnic_destroy_qp(qp));
        }
        if (mr)  { EXPECT_EQ(0, softnic_dereg_mr(mr)); }
        if (cq)  { EXPECT_EQ(0, softnic_destroy_cq(ibv_cq_ex_to_cq(cq))); }
        if (pd)  { EXPECT_EQ(0, softnic_dealloc_pd(pd)); }
        if (ctx) { EXPECT_EQ(0, softnic_close_device(ctx)); }
    }

    struct ibv_qp *create_qp() {
        struct ibv_qp_init_attr init;
        memset(&init, 0, sizeof(init));
        init.send_cq          = ibv_cq_ex_to_cq(cq);
        init.recv_cq          = ibv_cq_ex_to_cq(cq);
        init.qp_type          = IBV_QPT_RC;
        init.cap.max_send_wr  = 8;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_wr  = 8;
        init.cap.max_recv_sge = 1;
        struct ibv_qp *qp = softnic_create_qp(pd, &init);
        if (qp != nullptr) {
            qps.push_back(qp);
        }
        return qp;
    }

    union ibv_gid gid() {
        union ibv_gid g;
        memset(&g, 0, sizeof(g));
        EXPECT_EQ(0, softnic_query_gid(ctx, 1, 0, &g));
        return g;
    }

    struct ibv_port_attr port() {
        struct ibv_port_attr a;
        memset(&a, 0, sizeof(a));
        EXPECT_EQ(0, ibv_query_port(ctx, 1, &a));
        return a;
    }

    char *at(size_t off) { return arena.data() + off; }

    /* what the CQ has, kept (the device's work runs in the poll) */
    void poll() {
        struct ibv_wc wc[4];
        int n;
        while ((n = ibv_poll_cq(ibv_cq_ex_to_cq(cq), 4, wc)) > 0) {
            wcs.insert(wcs.end(), wc, wc + n);
        }
        EXPECT_GE(n, 0);
    }

    std::vector<struct ibv_wc> wcs;
};

/* Polls a and b until a completion of wr_id is on n's CQ; false on
 * timeout */
bool take(side &a, side &b, side &n, uint64_t wr_id, struct ibv_wc *wc)
{
    double deadline = now_sec() + 5.0;
    for (;;) {
        for (auto it = n.wcs.begin(); it != n.wcs.end(); ++it) {
            if (it->wr_id == wr_id) {
                *wc = *it;
                n.wcs.erase(it);
                return true;
            }
        }
        if (now_sec() > deadline) {
            return false;
        }
        a.poll();
        b.poll();
    }
}

/* a's QP and b's QP, each connected to the other with the address its own
 * side computes (ah_of(side) gives the address side uses) */
template <typename F>
void connect_pair(side &a, struct ibv_qp *qa, side &b, struct ibv_qp *qb,
                  F ah_of)
{
    ASSERT_EQ(0, to_init(qa));
    ASSERT_EQ(0, to_init(qb));
    ASSERT_EQ(0, to_rtr(qa, ah_of(a), qb->qp_num));
    ASSERT_EQ(0, to_rtr(qb, ah_of(b), qa->qp_num));
    ASSERT_EQ(0, to_rts(qa));
    ASSERT_EQ(0, to_rts(qb));
}

/* a SEND from qa into a receive of qb, then an RDMA WRITE into b's arena */
void send_and_write(side &a, struct ibv_qp *qa, side &b, struct ibv_qp *qb)
{
    struct ibv_sge rsge = { (uintptr_t)b.at(0), 64, b.mr->lkey };
    struct ibv_recv_wr rwr, *rbad = nullptr;
    memset(&rwr, 0, sizeof(rwr));
    rwr.wr_id   = 21;
    rwr.sg_list = &rsge;
    rwr.num_sge = 1;
    ASSERT_EQ(0, ibv_post_recv(qb, &rwr, &rbad));

    const std::string hello = "hello, same GID";
    memcpy(a.at(0), hello.data(), hello.size());
    struct ibv_sge sge = { (uintptr_t)a.at(0), (uint32_t)hello.size(),
                           a.mr->lkey };
    struct ibv_send_wr wr, *bad = nullptr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id      = 11;
    wr.opcode     = IBV_WR_SEND;
    wr.sg_list    = &sge;
    wr.num_sge    = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    ASSERT_EQ(0, ibv_post_send(qa, &wr, &bad));

    struct ibv_wc wc;
    ASSERT_TRUE(take(a, b, a, 11, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(qa->qp_num, wc.qp_num);
    ASSERT_TRUE(take(a, b, b, 21, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(IBV_WC_RECV, wc.opcode);
    EXPECT_EQ(qb->qp_num, wc.qp_num);
    EXPECT_EQ(hello.size(), wc.byte_len);
    EXPECT_EQ(hello, std::string(b.at(0), hello.size()));

    const std::string data = "written";
    memcpy(a.at(128), data.data(), data.size());
    sge        = { (uintptr_t)a.at(128), (uint32_t)data.size(), a.mr->lkey };
    wr.wr_id   = 12;
    wr.opcode  = IBV_WR_RDMA_WRITE;
    wr.wr.rdma.remote_addr = (uintptr_t)b.at(1024);
    wr.wr.rdma.rkey        = b.mr->rkey;
    ASSERT_EQ(0, ibv_post_send(qa, &wr, &bad));
    ASSERT_TRUE(take(a, b, a, 12, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(IBV_WC_RDMA_WRITE, wc.opcode);
    EXPECT_EQ(data, std::string(b.at(1024), data.size()));
}

/* Pipes to a forked child; each side keeps its own ends, so that either's
 * death is EOF to the other */
struct child {
    int c2p[2] = { -1, -1 }, p2c[2] = { -1, -1 };
    pid_t pid = -1;

    pid_t fork() {
        EXPECT_EQ(0, pipe(c2p));
        EXPECT_EQ(0, pipe(p2c));
        pid = ::fork();
        if (pid == 0) {
            ::close(c2p[0]);
            ::close(p2c[1]);
        } else {
            ::close(c2p[1]);
            ::close(p2c[0]);
        }
        return pid;
    }

    bool read_all(void *buf, size_t len) {
        size_t got = 0;
        while (got < len) {
            ssize_t n = ::read(c2p[0], (char*)buf + got, len - got);
            if (n <= 0) {
                return false;
            }
            got += n;
        }
        return true;
    }

    ~child() {
        if (pid > 0) {
            int status;
            ::close(p2c[1]);            /* the child's cue to exit */
            kill(pid, SIGKILL);         /* none left behind, whatever it does */
            waitpid(pid, &status, 0);
            ::close(c2p[0]);
        }
    }
};

} // namespace


/* Every context of the device reads the same GID and LID: the port's */
TEST(soft_gid, contexts_read_one_gid_and_lid)
{
    side a, b;
    ASSERT_NO_FATAL_FAILURE(a.open());
    ASSERT_NO_FATAL_FAILURE(b.open());

    union ibv_gid ga = a.gid(), gb = b.gid();
    EXPECT_EQ(0, memcmp(ga.raw, gb.raw, sizeof(ga.raw)));
    EXPECT_NE(0u, ga.global.subnet_prefix);

    struct ibv_port_attr pa = a.port(), pb = b.port();
    EXPECT_EQ(IBV_LINK_LAYER_INFINIBAND, pa.link_layer);
    EXPECT_NE(0, pa.lid) << "ibv_rc_pingpong refuses LID 0 on InfiniBand";
    EXPECT_EQ(pa.lid, pb.lid);

    /* a context opened without a PD too (listing opens one so) */
    struct ibv_context *c = softnic_open_device(soft_device());
    ASSERT_NE(nullptr, c);
    union ibv_gid gc;
    EXPECT_EQ(0, softnic_query_gid(c, 1, 0, &gc));
    EXPECT_EQ(0, memcmp(ga.raw, gc.raw, sizeof(ga.raw)));
    EXPECT_EQ(0, softnic_close_device(c));
}

/* QP numbers are the device's: distinct across contexts, nonzero, 24-bit */
TEST(soft_gid, qp_numbers_distinct_across_contexts)
{
    side a, b;
    ASSERT_NO_FATAL_FAILURE(a.open());
    ASSERT_NO_FATAL_FAILURE(b.open());
    std::set<uint32_t> nums;
    for (int i = 0; i < 32; ++i) {
        for (side *s : { &a, &b }) {
            struct ibv_qp *qp = s->create_qp();
            ASSERT_NE(nullptr, qp);
            EXPECT_NE(0u, qp->qp_num);
            EXPECT_EQ(0u, qp->qp_num >> 24);
            EXPECT_TRUE(nums.insert(qp->qp_num).second) << qp->qp_num;
        }
    }
}

/* As pyverbs' RCResources: each QP's dgid is the GID its own context
 * reads */
TEST(soft_gid, qp_connects_with_the_gid_of_its_own_context)
{
    side a, b;
    ASSERT_NO_FATAL_FAILURE(a.open());
    ASSERT_NO_FATAL_FAILURE(b.open());
    struct ibv_qp *qa = a.create_qp(), *qb = b.create_qp();
    ASSERT_NE(nullptr, qa);
    ASSERT_NE(nullptr, qb);
    ASSERT_NO_FATAL_FAILURE(connect_pair(a, qa, b, qb, [](side &s) {
        return grh_to(s.gid());
    }));
    ASSERT_NO_FATAL_FAILURE(send_and_write(a, qa, b, qb));
    ASSERT_NO_FATAL_FAILURE(send_and_write(b, qb, a, qa));
}

/* Two QPs of one context, connected to each other (loopback) */
TEST(soft_gid, qps_of_one_context_connect)
{
    side a;
    ASSERT_NO_FATAL_FAILURE(a.open());
    struct ibv_qp *q1 = a.create_qp(), *q2 = a.create_qp();
    ASSERT_NE(nullptr, q1);
    ASSERT_NE(nullptr, q2);
    ASSERT_NO_FATAL_FAILURE(connect_pair(a, q1, a, q2, [](side &s) {
        return grh_to(s.gid());
    }));
    ASSERT_NO_FATAL_FAILURE(send_and_write(a, q1, a, q2));
}

/* As ibv_rc_pingpong without -g: no GRH, the port's LID */
TEST(soft_gid, qp_connects_by_lid_without_grh)
{
    side a, b;
    ASSERT_NO_FATAL_FAILURE(a.open());
    ASSERT_NO_FATAL_FAILURE(b.open());
    struct ibv_qp *qa = a.create_qp(), *qb = b.create_qp();
    ASSERT_NE(nullptr, qa);
    ASSERT_NE(nullptr, qb);
    ASSERT_NO_FATAL_FAILURE(connect_pair(a, qa, b, qb, [](side &s) {
        return lid_to(s.port().lid);
    }));
    ASSERT_NO_FATAL_FAILURE(send_and_write(a, qa, b, qb));
}

/* A LID that is not the device's routes nowhere: refused at RTR, as a bad
 * address always was (the harsher reading: a NIC would fail the first
 * send after its retries), and the QP stays usable */
TEST(soft_gid, other_lid_without_grh_is_refused)
{
    side a;
    ASSERT_NO_FATAL_FAILURE(a.open());
    struct ibv_qp *q1 = a.create_qp(), *q2 = a.create_qp();
    ASSERT_NE(nullptr, q1);
    ASSERT_NE(nullptr, q2);
    ASSERT_EQ(0, to_init(q1));
    uint16_t lid = a.port().lid;
    EXPECT_EQ(EINVAL, to_rtr(q1, lid_to((uint16_t)(lid + 1)), q2->qp_num));
    EXPECT_EQ(EINVAL, to_rtr(q1, lid_to(0), q2->qp_num));
    ASSERT_EQ(0, to_init(q2));
    EXPECT_EQ(0, to_rtr(q1, lid_to(lid), q2->qp_num));
}

/* A QP number no QP holds (one given back) is refused as an unknown peer
 * always was: ECONNREFUSED */
TEST(soft_gid, dest_qp_num_nobody_owns_is_refused)
{
    side a;
    ASSERT_NO_FATAL_FAILURE(a.open());
    struct ibv_qp *qp = a.create_qp(), *gone = a.create_qp();
    ASSERT_NE(nullptr, qp);
    ASSERT_NE(nullptr, gone);
    uint32_t num = gone->qp_num;
    a.qps.pop_back();
    ASSERT_EQ(0, softnic_destroy_qp(gone));

    uint32_t pid;
    EXPECT_EQ(ENOENT, softnic_test_num_owner('q', num, &pid));
    ASSERT_EQ(0, to_init(qp));
    EXPECT_EQ(ECONNREFUSED, to_rtr(qp, grh_to(a.gid()), num));
    EXPECT_EQ(ECONNREFUSED, to_rtr(qp, lid_to(a.port().lid), num));
    EXPECT_EQ(ECONNREFUSED, to_rtr(qp, grh_to(a.gid()), 0));
    EXPECT_EQ(ECONNREFUSED, to_rtr(qp, grh_to(a.gid()), 1u << 24));
}

/* QP numbers are unique across the processes of the device */
TEST(soft_gid, qp_numbers_distinct_across_processes)
{
    const int count = 64;
    child c;
    pid_t pid = c.fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        side s;
        s.open();
        std::vector<uint32_t> nums;
        for (int i = 0; i < count; ++i) {
            struct ibv_qp *qp = s.create_qp();
            nums.push_back((qp != nullptr) ? qp->qp_num : 0);
        }
        (void)!write(c.c2p[1], nums.data(), nums.size() * sizeof(nums[0]));
        char cue;
        (void)!read(c.p2c[0], &cue, 1);    /* EOF: the parent is done */
        _exit(0);
    }
    side s;
    ASSERT_NO_FATAL_FAILURE(s.open());
    std::set<uint32_t> ours;
    for (int i = 0; i < count; ++i) {
        struct ibv_qp *qp = s.create_qp();
        ASSERT_NE(nullptr, qp);
        ours.insert(qp->qp_num);
    }
    std::vector<uint32_t> theirs(count);
    ASSERT_TRUE(c.read_all(theirs.data(), theirs.size() * sizeof(theirs[0])));
    for (uint32_t num : theirs) {
        EXPECT_NE(0u, num);
        EXPECT_EQ(0u, ours.count(num)) << "QP number 0x" << std::hex << num
                                       << " in both processes";
        uint32_t owner;
        EXPECT_EQ(0, softnic_test_num_owner('q', num, &owner));
        EXPECT_EQ((uint32_t)pid, owner);
    }
}

/* A QP of a process killed before it cleaned up: connecting to its number
 * fails cleanly, and the next device brought up on the host reclaims the
 * number's entry (at the latest) */
TEST(soft_gid, dead_process_qp_number_is_refused_and_reclaimed)
{
    child c;
    pid_t pid = c.fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        side s;
        s.open();
        struct ibv_qp *qp = s.create_qp();
        uint32_t num = (qp != nullptr) ? qp->qp_num : 0;
        (void)!write(c.c2p[1], &num, sizeof(num));
        pause();
        _exit(0);
    }
    uint32_t num = 0, owner = 0;
    ASSERT_TRUE(c.read_all(&num, sizeof(num)));
    ASSERT_NE(0u, num);
    ASSERT_EQ(0, softnic_test_num_owner('q', num, &owner));
    EXPECT_EQ((uint32_t)pid, owner);

    side a;
    ASSERT_NO_FATAL_FAILURE(a.open());
    struct ibv_qp *qp = a.create_qp();
    ASSERT_NE(nullptr, qp);
    ASSERT_EQ(0, to_init(qp));

    int status;
    kill(pid, SIGKILL);
    ASSERT_EQ(pid, waitpid(pid, &status, 0));
    c.pid = -1;
    /* ESRCH: the entry names a dead owner; ENOENT: a device another
     * process brought up meanwhile (make check runs tests side by side)
     * has already reclaimed it */
    int ret = softnic_test_num_owner('q', num, &owner);
    EXPECT_TRUE((ret == ESRCH) || (ret == ENOENT)) << strerror(ret);
    EXPECT_EQ(ECONNREFUSED, to_rtr(qp, grh_to(a.gid()), num));

    side b;                      /* brought up: sweeps what the dead left */
    ASSERT_NO_FATAL_FAILURE(b.open());
    EXPECT_EQ(ENOENT, softnic_test_num_owner('q', num, &owner));
    EXPECT_EQ(ECONNREFUSED, to_rtr(qp, grh_to(a.gid()), num));
}
