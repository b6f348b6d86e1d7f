/*
 * What was posted is carried out without its poster's help, as a NIC does:
 * sends that wait for room in the peer's ring are taken by the peer's
 * device while the sender makes no call, and a FIN that waits for room
 * goes out before the receive it answers completes
 * (docs/soft-device-datapath.md, "Sends that wait for room").  The sender
 * here is never polled until the receiver is done.
 */
#include "soft_fixture.h"

using namespace soft_test;

namespace {

const unsigned DEPTH = 4096;

/* Deep send queues, lists and CQs: bursts far beyond a ring (2048 lines) */
class soft_backlog : public soft_pair {
protected:
    void SetUp() override {
        memset(&attr, 0, sizeof(attr));
        attr.max_send_wr  = DEPTH;
        attr.max_num_tags = DEPTH;
        attr.srq_depth    = DEPTH;
        attr.max_msg_size = 8192;   /* rings of 128 KiB, the least */
        attr.max_inline   = max_inline;
        ASSERT_NO_FATAL_FAILURE(s.open(attr, 4 * DEPTH));
        ASSERT_NO_FATAL_FAILURE(r.open(attr, 4 * DEPTH));
        cs = s.create_conn();
        cr = r.create_conn();
        ASSERT_NO_FATAL_FAILURE(connect_pair(s, cs, r, cr));
    }

    /* Not a TM message (no TM opcode): an untagged receive */
    static std::string payload(unsigned i, size_t size) {
        std::string p(size, 0);
        for (size_t j = 0; j < size; ++j) {
            p[j] = (char)(i * 13 + j);
        }
        p[0] = (char)0xff;
        return p;
    }

    /* Polls n alone until it holds count completions of opcode */
    std::vector<tm_dev_wc_t> collect(node &n, ibv_wc_opcode opcode,
                                     size_t count, double timeout = 10) {
        std::vector<tm_dev_wc_t> v;
        tm_dev_wc_t wc;
        while ((v.size() < count) && n.next(&wc, timeout)) {
            if (wc.opcode == opcode) {
                v.push_back(wc);
            }
        }
        return v;
    }

    /* Polls n alone until its polls find nothing more (inline, a poll
     * does all the device can do; once it takes the sender's backlog it
     * does not wait again): the completions of opcode */
    std::vector<tm_dev_wc_t> settle(node &n, ibv_wc_opcode opcode) {
        std::vector<tm_dev_wc_t> v;
        for (unsigned idle = 0; idle < 64;) {
            n.poll();
            idle = n.wcs.empty() ? idle + 1 : 0;
            for (const tm_dev_wc_t &wc : n.wcs) {
                if (wc.opcode == opcode) {
                    v.push_back(wc);
                }
            }
            n.wcs.clear();
        }
        return v;
    }

    /* The sender's completions once it polls again: every request (wr_id
     * 0 to count - 1), in order */
    void expect_sends_complete(unsigned count) {
        tm_dev_wc_t wc;
        for (unsigned i = 0; i < count; ++i) {
            ASSERT_TRUE(s.next(&wc)) << i;
            EXPECT_EQ(IBV_WC_SUCCESS, wc.status) << i;
            ASSERT_EQ(i, wc.wr_id);
        }
    }

    /* Lists a receive of tag (wr_id 1000 + tag) and waits for its ADD */
    void add(uint64_t tag, void *buf, uint32_t len) {
        tm_dev_wc_t wc;
        ASSERT_EQ(0, r.add_tag(tag, ~0ull, buf, len, 1000 + tag, 0, nullptr));
        ASSERT_TRUE(r.next(&wc));
        ASSERT_EQ(IBV_WC_TM_ADD, wc.opcode);
        ASSERT_EQ(IBV_WC_SUCCESS, wc.status);
    }

    int send_inline(const std::string &msg, uint64_t wr_id) {
        struct ibv_sge sge = { (uintptr_t)msg.data(), (uint32_t)msg.size(), 0 };
        return s.send_sge(cs, sge, wr_id, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
    }

    uint32_t max_inline = 0;        /* what each send QP asks */
};

/* QPs that ask all the inline data a 1 KiB mlx5 WQE holds */
class soft_backlog_full_wqe : public soft_backlog {
protected:
    soft_backlog_full_wqe() { max_inline = 828; }
};

} // namespace

/* 1 KiB messages, 4 MiB of them: the ring holds some 120 */
TEST_F(soft_backlog, sends_waiting_for_room_arrive_without_the_sender)
{
    const unsigned count = 4000;
    const size_t size    = 1024;
    std::vector<char*> rbufs;

    r.post_rbufs(count, size, 0, &rbufs);
    for (unsigned i = 0; i < count; ++i) {
        ASSERT_EQ(0, s.send(cs, payload(i, size), i)) << i;
    }

    std::vector<tm_dev_wc_t> v = collect(r, IBV_WC_RECV, count);
    ASSERT_EQ(count, v.size()) << "messages the receiver never got";
    for (unsigned i = 0; i < count; ++i) {
        EXPECT_EQ(IBV_WC_SUCCESS, v[i].status);
        ASSERT_EQ(i, v[i].wr_id) << "out of order";
        EXPECT_EQ(size, v[i].byte_len);
        EXPECT_EQ(payload(i, size), std::string(rbufs[i], size)) << i;
    }
    expect_sends_complete(count);
}

/* Inline sends (their data is in the send queue), tagged ones matched by
 * the receiver's list, and RDMA WRITEs between them land in posting order */
TEST_F(soft_backlog, inline_tagged_sends_and_writes_in_order)
{
    const unsigned count = 2000;
    const size_t size    = 120;     /* within the 124 bytes mlx5 grants */
    uint64_t *dst = (uint64_t *)r.alloc(count * sizeof(uint64_t));
    std::vector<char*> tbufs;

    memset(dst, 0, count * sizeof(uint64_t));
    for (unsigned i = 0; i < count; ++i) {
        tbufs.push_back(r.alloc(size));
        ASSERT_NO_FATAL_FAILURE(add(i, tbufs[i], size));
    }
    for (unsigned i = 0; i < count; ++i) {
        uint64_t *src = (uint64_t *)s.alloc(sizeof(uint64_t));
        *src = 0x5a5a000000000000ull + i;
        ASSERT_EQ(0, s.rdma(cs, IBV_WR_RDMA_WRITE, src, sizeof(*src),
                            (uintptr_t)&dst[i], r.mr->rkey, 2 * i));
        std::string msg = tm_msg(IBV_TMH_EAGER, i, i, payload(i, size - TMH));
        ASSERT_EQ(0, ((i % 2) == 0) ? send_inline(msg, 2 * i + 1) :
                                      s.send(cs, msg, 2 * i + 1)) << i;
    }

    std::vector<tm_dev_wc_t> v = collect(r, IBV_WC_TM_RECV, count);
    ASSERT_EQ(count, v.size());
    for (unsigned i = 0; i < count; ++i) {
        EXPECT_EQ(IBV_WC_SUCCESS, v[i].status);
        ASSERT_EQ(1000u + i, v[i].wr_id) << "out of order";
        EXPECT_EQ(payload(i, size - TMH), std::string(tbufs[i], size - TMH));
        /* the WRITE posted before it landed first */
        EXPECT_EQ(0x5a5a000000000000ull + i, dst[i]) << i;
    }
    expect_sends_complete(2 * count);
}

/* An RDMA READ is its requester's to carry out (it waits for it): the
 * receiver takes what comes before it, the rest once the sender polls */
TEST_F(soft_backlog, read_in_the_backlog_waits_for_its_requester)
{
    const unsigned count = 400;
    const size_t size    = 1024;
    char *remote = r.alloc(64), *local = s.alloc(64);

    memset(remote, 'R', 64);
    r.post_rbufs(2 * count, size, 0);
    for (unsigned i = 0; i < count; ++i) {
        ASSERT_EQ(0, s.send(cs, payload(i, size), i));
    }
    ASSERT_EQ(0, s.rdma(cs, IBV_WR_RDMA_READ, local, 64, (uintptr_t)remote,
                        r.mr->rkey, count));
    for (unsigned i = count + 1; i <= 2 * count; ++i) {
        ASSERT_EQ(0, s.send(cs, payload(i, size), i));
    }

    EXPECT_EQ(count, collect(r, IBV_WC_RECV, count).size());
    EXPECT_EQ(0u, settle(r, IBV_WC_RECV).size()) << "taken past the READ";
    EXPECT_NE(0, memcmp(local, remote, 64));
    /* the sender polls: its READ, then everything flows again */
    std::vector<tm_dev_wc_t> v;
    size_t received = 0;
    double deadline = now_sec() + 10;
    while (((v.size() < 2 * count + 1) || (received < count)) &&
           (now_sec() < deadline)) {
        s.poll();
        while (!s.wcs.empty()) {
            v.push_back(s.wcs.front());
            s.wcs.pop_front();
        }
        r.poll();
        received += r.wcs.size();
        r.wcs.clear();
    }
    ASSERT_EQ(2 * count + 1, v.size());
    for (unsigned i = 0; i < v.size(); ++i) {
        EXPECT_EQ(IBV_WC_SUCCESS, v[i].status);
        EXPECT_EQ(i, v[i].wr_id);
    }
    EXPECT_EQ(IBV_WC_RDMA_READ, v[count].opcode);
    EXPECT_EQ(0, memcmp(local, remote, 64));
    EXPECT_EQ(count, received);
}

/* A send whose gather entry the sender's device refuses (a bad lkey) is not
 * the receiver's to judge: it stops there, and the sender fails it */
TEST_F(soft_backlog, bad_local_key_is_failed_by_its_requester)
{
    const unsigned count = 400;
    const size_t size    = 1024;
    char *buf = s.alloc(size);

    r.post_rbufs(2 * count, size, 0);
    for (unsigned i = 0; i < count; ++i) {
        ASSERT_EQ(0, s.send(cs, payload(i, size), i));
    }
    struct ibv_sge sge = { (uintptr_t)buf, (uint32_t)size, s.mr->lkey + 1 };
    ASSERT_EQ(0, s.send_sge(cs, sge, count, IBV_SEND_SIGNALED));

    EXPECT_EQ(count, collect(r, IBV_WC_RECV, count).size());
    EXPECT_EQ(0u, settle(r, IBV_WC_RECV).size()) << "taken past the bad key";
    std::vector<tm_dev_wc_t> v = collect(s, IBV_WC_SEND, count);
    ASSERT_EQ(count, v.size());
    tm_dev_wc_t wc;
    ASSERT_TRUE(s.next(&wc));
    EXPECT_EQ(IBV_WC_LOC_PROT_ERR, wc.status);
    EXPECT_EQ(count, wc.wr_id);
}

/* A FIN that waits for room in the sender's ring goes before the receive it
 * answers completes: a receiver whose receives completed owes the sender
 * nothing.  More rendezvous than the FIN ring holds, read by the device
 * while the sender does not poll */
TEST_F(soft_backlog, fin_goes_out_before_its_receive_completes)
{
    const unsigned count = 3000;
    const uint32_t len   = 64;
    char *src = s.alloc(len);
    std::vector<char*> sbufs;

    memset(src, 'S', len);
    s.post_rbufs(count, 256, 0, &sbufs);
    for (unsigned i = 0; i < count; ++i) {
        ASSERT_NO_FATAL_FAILURE(add(i, r.alloc(len), len));
    }
    for (unsigned i = 0; i < count; ++i) {
        ASSERT_EQ(0, s.send(cs, rndv_msg(i, i, src, s.mr->rkey, len), i,
                            false));
    }

    /* the receiver alone: all matched and read, but the FIN ring fills */
    size_t finals = 0, matches = 0;
    double deadline = now_sec() + 10;
    while ((matches < count) && (now_sec() < deadline)) {
        r.poll();
        for (const tm_dev_wc_t &wc : r.wcs) {
            EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
            matches += !!(wc.wc_flags & IBV_WC_TM_MATCH);
            finals  += !!(wc.wc_flags & IBV_WC_TM_DATA_VALID);
        }
        r.wcs.clear();
    }
    ASSERT_EQ(count, matches);
    EXPECT_LT(finals, (size_t)count) << "receives completed, FINs not sent";

    /* both: every receive completes */
    deadline = now_sec() + 10;
    size_t fins = 0;
    while ((finals < count) && (now_sec() < deadline)) {
        s.poll();
        fins += s.wcs.size();
        s.wcs.clear();
        r.poll();
        finals += r.wcs.size();
        r.wcs.clear();
    }
    ASSERT_EQ((size_t)count, finals);
    /* then the sender alone gets every FIN */
    std::vector<tm_dev_wc_t> v = collect(s, IBV_WC_TM_NO_TAG, count - fins);
    EXPECT_EQ(count - fins, v.size()) << "FINs the receiver kept";
}

/* Inline sends as long as a 1 KiB WQE holds, far more than the ring takes:
 * those that wait keep their bytes in the send queue until the receiver's
 * device takes them out of the sender's memory (the sender not polled),
 * then until the sender pushes them itself, each intact and in order */
TEST_F(soft_backlog_full_wqe, full_wqe_inline_sends_wait_in_the_send_queue)
{
    const unsigned count = 1000;
    const size_t size    = 828;
    std::vector<char*> rbufs;
    std::vector<tm_dev_wc_t> v;
    tm_dev_caps_t caps;

    tm_dev_query(s.dev, &caps);
    ASSERT_EQ(size, caps.max_inline);
    r.post_rbufs(2 * count, size, 0, &rbufs);
    for (unsigned i = 0; i < count; ++i) {
        ASSERT_EQ(0, send_inline(payload(i, size), i)) << i;
    }
    v = collect(r, IBV_WC_RECV, count);
    ASSERT_EQ(count, v.size()) << "taken by the receiver's device";
    expect_sends_complete(count);

    for (unsigned i = count; i < 2 * count; ++i) {
        ASSERT_EQ(0, send_inline(payload(i, size), i)) << i;
    }
    double deadline = now_sec() + 30;
    while (v.size() < 2 * count) {  /* the sender pushes as room comes */
        tm_dev_wc_t wc;
        ASSERT_LT(now_sec(), deadline) << v.size() << " arrived";
        s.poll();
        if (r.next(&wc, 0)) {
            ASSERT_EQ(IBV_WC_RECV, wc.opcode);
            v.push_back(wc);
        }
    }
    for (unsigned i = 0; i < 2 * count; ++i) {
        EXPECT_EQ(IBV_WC_SUCCESS, v[i].status);
        ASSERT_EQ(i, v[i].wr_id) << "out of order";
        EXPECT_EQ(size, v[i].byte_len);
        EXPECT_EQ(payload(i, size), std::string(rbufs[i], size)) << i;
    }
}
