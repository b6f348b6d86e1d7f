/*
 * Tests of the software NIC's phase rules (shared/notes/tm-device-semantics.md):
 * the unexpected count, SYNC and SYNC_REQ, and the seed documents' race
 * between the device and software, driven step by step in MANUAL mode
 * through the device layer (dev/tm_dev.h).  The other rules are in
 * test_soft.cc.
 */
#include "soft_fixture.h"

using namespace soft_test;

/* ------------------------------------------------------------------------
 * Phase synchronisation
 */
TEST_F(soft_pair, phase_counter_and_sync_req)
{
    char *b0 = r.alloc(64), *b1 = r.alloc(64);

    manual();
    r.post_rbufs(4, 256, 10);
    /* b0 listed in phase */
    ASSERT_EQ(0, r.add_tag(7, ~0ull, b0, 64, 100, 0, nullptr, 1));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    /* an unexpected message (other tag) puts the device out of phase */
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 9, 0, "u"), 1));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    EXPECT_EQ(1u, softnic_test_hw_unexp(r.srq));
    EXPECT_FALSE(softnic_test_in_phase(r.srq));
    /* b1 added with a stale count: kept, not matchable */
    ASSERT_EQ(0, r.add_tag(8, ~0ull, b1, 64, 101, 0, nullptr, 2));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    EXPECT_EQ(2u, softnic_test_listed_tags(r.srq));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 8, 0, "x"), 2));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));     /* unexpected despite b1 */
    EXPECT_EQ(2u, softnic_test_hw_unexp(r.srq));
    /* b0 was matchable before: it stays matchable */
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 7, 0, "y"), 3));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));

    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(5u, v.size());
    EXPECT_EQ(IBV_WC_TM_ADD, v[0].opcode);
    EXPECT_EQ(0u, v[0].wc_flags);
    /* SYNC_REQ as rdma-core's mlx5 sets it: on the ADD whose count differs
     * from the NIC's, not on unexpected messages (until 0x3fff of them are
     * unacknowledged), never on TM_RECV */
    EXPECT_EQ(IBV_WC_RECV, v[1].opcode);
    EXPECT_EQ(0u, v[1].wc_flags);
    EXPECT_EQ(IBV_WC_TM_ADD, v[2].opcode);
    EXPECT_EQ((unsigned)IBV_WC_TM_SYNC_REQ, v[2].wc_flags);
    EXPECT_EQ(IBV_WC_RECV, v[3].opcode);
    EXPECT_EQ(0u, v[3].wc_flags);
    EXPECT_TM_RECV(v[4], 100, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, 7, 0,
                   1);

    /* a SYNC with a wrong count changes nothing; the right one syncs */
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_SYNC, 0, 1, 3));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    EXPECT_FALSE(softnic_test_in_phase(r.srq));
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_SYNC, 0, 2, 4));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    EXPECT_TRUE(softnic_test_in_phase(r.srq));
    /* an op without IBV_OPS_TM_SYNC does not sync */
    v = drain(r);
    ASSERT_EQ(2u, v.size());
    EXPECT_EQ(IBV_WC_TM_SYNC, v[0].opcode);
    EXPECT_EQ(0u, v[0].wc_flags) << "never on a SYNC completion";
    EXPECT_EQ(IBV_WC_TM_SYNC, v[1].opcode);
    EXPECT_EQ(0u, v[1].wc_flags);

    /* back in phase: b1 is matchable now */
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 8, 0, "z"), 4));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    v = drain(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_TM_RECV(v[0], 101, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, 8, 0, 1);
}

TEST_F(soft_pair, op_without_sync_flag_keeps_phase)
{
    manual();
    r.post_rbufs(1, 256, 10);
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 9, 0, "u"), 1));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_SYNC, 0, 1, 1, IBV_OPS_SIGNALED));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    EXPECT_FALSE(softnic_test_in_phase(r.srq));
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_SYNC, 0, 1, 1,
                           IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    EXPECT_TRUE(softnic_test_in_phase(r.srq));
}


/*
 * The seed's race: m1, m2 (same tag) and buffers b1, b2; b1 posted after m1
 * arrived but before m2.  A tiny software layer acting like the transport
 * (shadow list, unexpected count, SYNC on request) must give m1 to b1 and
 * m2 to b2.
 */
namespace {

struct sw_tm {
    struct posted {
        uint64_t tag;
        char     *buf;
        uint32_t handle;
        bool     in_hw;
        bool     done;
        std::string data;
    };
    node                 &n;
    uint32_t             unexp = 0;       /* unexpected messages handled */
    std::vector<posted>  shadow;          /* in posting order */
    std::deque<std::string> unexp_queue;  /* unexpected, not yet matched */

    explicit sw_tm(node &nd) : n(nd) { shadow.reserve(16); }

    /* MPI-style post: the unexpected queue first, else to the device */
    void post(uint64_t tag) {
        posted p = { tag, n.alloc(256), 0, false, false, "" };
        for (auto it = unexp_queue.begin(); it != unexp_queue.end(); ++it) {
            const struct ibv_tmh *tmh = (const struct ibv_tmh *)it->data();
            if (be64toh(tmh->tag) == tag) {
                p.data = it->substr(TMH);
                p.done = true;
                unexp_queue.erase(it);
                shadow.push_back(p);
                return;
            }
        }
        p.in_hw = true;
        ASSERT_EQ(0, n.add_tag(tag, ~0ull, p.buf, 256, shadow.size(), unexp,
                               &p.handle, 0, IBV_OPS_TM_SYNC));
        shadow.push_back(p);
    }

    void handle(const tm_dev_wc_t &wc, const std::vector<char*> &rbufs,
                uint64_t rbuf_base) {
        ASSERT_EQ(IBV_WC_SUCCESS, wc.status);
        if (wc.opcode == IBV_WC_RECV) {
            std::string msg(rbufs[wc.wr_id - rbuf_base], wc.byte_len);
            ++unexp;
            const struct ibv_tmh *tmh = (const struct ibv_tmh *)msg.data();
            for (posted &p : shadow) {
                if (!p.done && (p.tag == be64toh(tmh->tag))) {
                    /* software matched it: take the buffer back from the device */
                    p.data = msg.substr(TMH);
                    p.done = true;
                    if (p.in_hw) {
                        ASSERT_EQ(0, n.list_op(IBV_WR_TAG_DEL, p.handle, unexp,
                                               0, IBV_OPS_TM_SYNC));
                    }
                    goto out;
                }
            }
            unexp_queue.push_back(msg);
        } else if (wc.opcode == IBV_WC_TM_RECV) {
            posted &p = shadow[wc.wr_id];
            EXPECT_FALSE(p.done);
            p.data = std::string(p.buf, wc.byte_len);
            p.done = true;
        }
out:
        if (wc.wc_flags & IBV_WC_TM_SYNC_REQ) {
            ASSERT_EQ(0, n.list_op(IBV_WR_TAG_SYNC, 0, unexp, 0, IBV_OPS_TM_SYNC));
        }
    }

    void poll(const std::vector<char*> &rbufs, uint64_t rbuf_base) {
        n.poll();
        while (!n.wcs.empty()) {
            tm_dev_wc_t wc = n.wcs.front();
            n.wcs.pop_front();
            handle(wc, rbufs, rbuf_base);
        }
    }
};

} // namespace

TEST_F(soft_pair, seed_race_m1_m2_b1_b2)
{
    std::vector<char*> rbufs;
    sw_tm sw(r);

    manual();
    r.post_rbufs(8, 256, 1000, &rbufs);
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 5, 0, "m1"), 1));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 5, 0, "m2"), 2));

    ASSERT_EQ(0, softnic_test_step_arrival(cr));      /* m1: unexpected */
    sw.post(5);                                  /* b1, count 0 */
    ASSERT_EQ(0, softnic_test_step_op(r.srq));        /* b1 listed out of phase */
    ASSERT_EQ(0, softnic_test_step_arrival(cr));      /* m2: must not take b1 */
    EXPECT_EQ(2u, softnic_test_hw_unexp(r.srq));
    sw.post(5);                                  /* b2, count still 0 */
    sw.poll(rbufs, 1000);                        /* m1 -> b1, m2 -> b2 */
    while (softnic_test_step_op(r.srq) == 0) {
        sw.poll(rbufs, 1000);
    }
    sw.poll(rbufs, 1000);

    ASSERT_EQ(2u, sw.shadow.size());
    EXPECT_TRUE(sw.shadow[0].done && sw.shadow[1].done);
    EXPECT_EQ("m1", sw.shadow[0].data);
    EXPECT_EQ("m2", sw.shadow[1].data);
    EXPECT_TRUE(softnic_test_in_phase(r.srq));
    EXPECT_EQ(0u, softnic_test_listed_tags(r.srq));
}

/* The same with every interleaving the seeds reach: order is always kept */
TEST_F(soft_pair, seed_race_random_interleavings)
{
    for (uint64_t seed = 1; seed <= 300; ++seed) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        node rr;
        tm_dev_conn_t *c_s, *c_r;
        std::vector<char*> rbufs;
        ASSERT_NO_FATAL_FAILURE(rr.open(attr, 1024, 1 << 20));
        softnic_test_set_mode(rr.dev, SOFTNIC_MODE_MANUAL);
        c_s = s.create_conn();
        c_r = rr.create_conn();
        ASSERT_NO_FATAL_FAILURE(connect_pair(s, c_s, rr, c_r));
        rr.post_rbufs(8, 256, 1000, &rbufs);
        sw_tm sw(rr);
        const int nmsg = 4;
        for (int i = 0; i < nmsg; ++i) {
            ASSERT_EQ(0, s.send(c_s, tm_msg(IBV_TMH_EAGER, 5, 0,
                                            "m" + std::to_string(i)), i));
        }
        uint64_t rng = seed;
        int posted = 0;
        for (int iter = 0; iter < 1000; ++iter) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            unsigned choice = (rng >> 33) % 4;
            if ((choice == 0) && (posted < nmsg)) {
                sw.post(5);
                ++posted;
            } else if (choice == 1) {
                sw.poll(rbufs, 1000);
            } else {
                uint64_t s2 = rng;
                softnic_test_step_random(rr.srq, &s2);
            }
            bool all = (posted == nmsg);
            for (auto &p : sw.shadow) {
                all = all && p.done;
            }
            if (all) {
                break;
            }
        }
        ASSERT_EQ((size_t)nmsg, sw.shadow.size());
        for (int i = 0; i < nmsg; ++i) {
            EXPECT_TRUE(sw.shadow[i].done);
            EXPECT_EQ("m" + std::to_string(i), sw.shadow[i].data);
        }
        /* sender side: drain its completions so the next round starts clean */
        s.poll();
        s.wcs.clear();
        for (size_t i = 0; i < s.conns.size(); ++i) {
            if (s.conns[i] == c_s) {
                tm_dev_destroy_conn(c_s);
                s.conns.erase(s.conns.begin() + i);
                break;
            }
        }
        rr.close();
        if (HasFailure()) {
            break;
        }
    }
}
