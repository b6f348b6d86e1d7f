/*
 * What a poll looks at (softnic_park.c): a receiver with many connections
 * parks the rings that stay empty, a producer's publication wakes its ring,
 * a wake lost to the race with a park is found by the sweep (inline) or by
 * the engine's look before it sleeps (thread), a parked QP goes away
 * cleanly, and a message that waited for RTR in a parked ring is taken
 * at RTR.  Waits are bounded loops on the state they wait for.
 */
#include "soft_fixture.h"

#include <algorithm>
#include <functional>
#include <sched.h>
#include <set>

using namespace soft_test;

namespace {

/* Connections of the receiver: 2 QPs each on its SRQ, more than the 8 an
 * SRQ may have and park none (SN_PARK_MIN_QPS) */
const unsigned CONNS = 12;

class soft_park : public ::testing::Test {
protected:
    node s, r;
    std::vector<tm_dev_conn_t*> cs, cr;
    std::vector<char*> rbufs;           /* wr_id 1000 + i */

    virtual void set_attr(tm_dev_attr_t &a) { (void)a; }

    void SetUp() override {
        tm_dev_attr_t attr;

        memset(&attr, 0, sizeof(attr));
        set_attr(attr);
        ASSERT_NO_FATAL_FAILURE(s.open(attr));
        ASSERT_NO_FATAL_FAILURE(r.open(attr));
        for (unsigned i = 0; i < CONNS; ++i) {
            cs.push_back(s.create_conn());
            cr.push_back(r.create_conn());
            ASSERT_NO_FATAL_FAILURE(connect_pair(s, cs[i], r, cr[i]));
        }
        r.post_rbufs(64, 256, 1000, &rbufs);
    }

    void TearDown() override {
        s.close();
        r.close();
    }

    /* Polls r until pred holds; false if a bounded number of polls did
     * not get there */
    bool poll_until(const std::function<bool()> &pred) {
        for (unsigned i = 0; i < 100000; ++i) {
            if (pred()) {
                return true;
            }
            r.poll();
        }
        return false;
    }

    /* Polls r until its rings are parked */
    bool park_all() {
        return poll_until([this]() {
            return softnic_test_park_stats(r.srq).parked == 2 * CONNS;
        });
    }

    /* Sends one untagged message on each connection, then receives them
     * all: each in its own buffer with its own payload */
    void send_all_and_receive() {
        std::set<std::string> want, got;
        tm_dev_wc_t wc;

        for (unsigned i = 0; i < CONNS; ++i) {
            std::string msg = tm_msg(IBV_TMH_NO_TAG, 0, 0,
                                     "conn " + std::to_string(i));
            want.insert(msg);
            ASSERT_EQ(0, s.send(cs[i], msg, i));
        }
        for (unsigned i = 0; i < CONNS; ++i) {
            ASSERT_TRUE(r.next(&wc)) << "message " << i << " not received";
            EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
            got.insert(std::string(rbufs.at(wc.wr_id - 1000), wc.byte_len));
        }
        EXPECT_EQ(want, got);
    }

    unsigned parked_conns() {
        unsigned n = 0;

        for (tm_dev_conn_t *c : cr) {
            n += softnic_test_conn_parked(c);
        }
        return n;
    }
};

class soft_park_engine : public soft_park {
    void set_attr(tm_dev_attr_t &a) override
    {
        a.soft_progress = TM_DEV_SOFT_PROGRESS_THREAD;
    }
};

} // namespace

TEST_F(soft_park, idle_rings_are_parked)
{
    softnic_park_stats_t st = softnic_test_park_stats(r.srq);

    EXPECT_EQ(2 * CONNS, st.active);
    EXPECT_EQ(0u, st.parked);
    ASSERT_TRUE(park_all());
    st = softnic_test_park_stats(r.srq);
    EXPECT_EQ(0u, st.active);
    EXPECT_EQ(0u, st.woken);
    EXPECT_EQ(0u, st.swept);
    EXPECT_EQ(CONNS, parked_conns());
}

/* A connection's QPs and a few more: no ring is parked, however long
 * they stay empty */
TEST_F(soft_pair, an_srq_with_few_qps_parks_nothing)
{
    for (unsigned i = 0; i < 3; ++i) {
        tm_dev_conn_t *a = s.create_conn(), *b = r.create_conn();
        ASSERT_NO_FATAL_FAILURE(connect_pair(s, a, r, b));
    }
    for (unsigned i = 0; i < 20000; ++i) {
        r.poll();
    }
    EXPECT_EQ(8u, softnic_test_park_stats(r.srq).active);
    EXPECT_EQ(0u, softnic_test_park_stats(r.srq).parked);
}

TEST_F(soft_park, a_message_wakes_its_parked_ring)
{
    ASSERT_TRUE(park_all());
    softnic_park_stats_t before = softnic_test_park_stats(r.srq);

    ASSERT_NO_FATAL_FAILURE(send_all_and_receive());
    softnic_park_stats_t after = softnic_test_park_stats(r.srq);
    /* every receive-only QP got a message: each woken by it */
    EXPECT_EQ(CONNS, after.woken);
    EXPECT_EQ(before.swept, after.swept);
    EXPECT_EQ(before.active + before.parked, after.active + after.parked);
}

TEST_F(soft_park, a_lost_wake_is_found_by_the_sweep)
{
    ASSERT_TRUE(park_all());
    softnic_test_drop_wakes(s.dev, 1);

    ASSERT_NO_FATAL_FAILURE(send_all_and_receive());
    softnic_park_stats_t st = softnic_test_park_stats(r.srq);
    EXPECT_EQ(0u, st.woken);
    EXPECT_EQ(CONNS, st.swept);
}

TEST_F(soft_park, parked_qps_go_away_cleanly)
{
    ASSERT_TRUE(park_all());
    softnic_park_stats_t before = softnic_test_park_stats(r.srq);
    unsigned gone = 0;

    for (unsigned i = 0; i < CONNS; ++i) {
        if (softnic_test_conn_parked(cr[i])) {
            tm_dev_destroy_conn(cr[i]);
            r.conns.erase(std::find(r.conns.begin(), r.conns.end(), cr[i]));
            cr[i] = nullptr;
            ++gone;
        }
    }
    ASSERT_GT(gone, 0u);
    softnic_park_stats_t after = softnic_test_park_stats(r.srq);
    EXPECT_EQ(before.parked - (2 * gone), after.parked);
    EXPECT_EQ(before.active, after.active);
    /* the rest still receives */
    for (unsigned i = 0; i < CONNS; ++i) {
        if (cr[i] != nullptr) {
            ASSERT_EQ(0, s.send(cs[i], tm_msg(IBV_TMH_NO_TAG, 0, 0, "x"), i));
            tm_dev_wc_t wc;
            ASSERT_TRUE(r.next(&wc));
            EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
        }
    }
}

/* A QP parked before RTR, with a message waiting for RTR in its ring
 * (its producer's wake came while it could take nothing, and it was
 * parked again): RTR takes the message at the next poll, not at a sweep */
TEST_F(soft_park, a_message_waiting_for_rtr_is_taken_at_once)
{
    tm_dev_conn_t *late_s = s.create_conn(), *late_r = r.create_conn();
    char sa[TM_DEV_ADDR_MAX], ra[TM_DEV_ADDR_MAX];
    char csa[TM_DEV_ADDR_MAX], cra[TM_DEV_ADDR_MAX];
    const std::string msg = tm_msg(IBV_TMH_NO_TAG, 0, 0, "before RTR");
    auto parked = [&]() {
        return softnic_test_qp_parked(tm_dev_ibv_rx_qp(late_r));
    };

    tm_dev_addr(s.dev, sa);
    tm_dev_addr(r.dev, ra);
    tm_dev_conn_addr(late_s, csa);
    tm_dev_conn_addr(late_r, cra);
    ASSERT_TRUE(poll_until(parked));
    ASSERT_EQ(0, tm_dev_connect(late_s, ra, cra));
    ASSERT_EQ(0, s.send(late_s, msg, 1));
    r.poll();
    EXPECT_EQ(1u, softnic_test_park_stats(r.srq).woken);    /* by it */
    ASSERT_TRUE(poll_until(parked));    /* again, the message inside */
    EXPECT_TRUE(r.wcs.empty());

    ASSERT_EQ(0, tm_dev_connect(late_r, sa, csa));
    r.poll();
    ASSERT_EQ(1u, r.wcs.size());
    EXPECT_EQ(IBV_WC_SUCCESS, r.wcs.front().status);
    EXPECT_EQ(msg, std::string(rbufs.at(r.wcs.front().wr_id - 1000),
                               r.wcs.front().byte_len));
}

/* The engine parks too.  With every wake lost, messages sent while it
 * sleeps are still received without a poll of ours: the doorbell wakes it,
 * and its sweeps, or its look at the parked rings before it sleeps again,
 * find them */
TEST_F(soft_park_engine, a_lost_wake_does_not_strand_a_sleeping_engine)
{
    softnic_engine_stats_t st;
    double deadline;

    ASSERT_TRUE(park_all());
    softnic_test_drop_wakes(s.dev, 1);
    deadline = now_sec() + 10.0;
    do {
        ASSERT_EQ(0, softnic_test_engine_stats(tm_dev_ibv_context(r.dev),
                                               &st));
        ASSERT_LT(now_sec(), deadline) << "the engine did not sleep";
        sched_yield();
    } while (st.sleeping == 0);

    for (unsigned i = 0; i < CONNS; ++i) {
        ASSERT_EQ(0, s.send(cs[i], tm_msg(IBV_TMH_NO_TAG, 0, 0, "y"), i));
    }
    deadline = now_sec() + 10.0;
    while (softnic_test_cq_pending(r.cq->cq) < CONNS) {
        ASSERT_LT(now_sec(), deadline) << "messages stranded in parked rings";
        sched_yield();
    }
    EXPECT_EQ(0u, softnic_test_park_stats(r.srq).woken);
}


/* A receive-only QP sends nothing but its NIC's FINs.  With the peer
 * taking nothing off its ring (MANUAL), FINs fill it and the next ones
 * wait in the QP, each with the final completion of the receive it
 * answers: it becomes busy, and once the peer takes the FINs, a poll of
 * ours sends the waiting ones, in order, and completes their receives */
class soft_pair_fin_ring : public soft_pair {
    void set_attr(tm_dev_attr_t &a) override { a.max_msg_size = 1024; }
};

TEST_F(soft_pair_fin_ring, fins_waiting_behind_a_full_ring_go_out)
{
    /* a 128 KiB ring of 64-byte records holds 2047 */
    const unsigned batch = 32, total = 2048 + (3 * batch), room = 2047;
    char *dst = r.alloc(64), *src = s.alloc(64);
    std::vector<char*> fins;
    unsigned sent = 0, recvd = 0, posted = 0, finals = 0;
    tm_dev_wc_t wc;

    softnic_test_set_mode(s.dev, SOFTNIC_MODE_MANUAL);
    while (sent < total) {
        for (unsigned i = 0; i < batch; ++i) {
            ASSERT_EQ(0, r.add_tag(sent + i, ~0ull, dst, 64, sent + i, 0,
                                   nullptr));
        }
        for (unsigned i = 0; i < batch; ++i) {
            ASSERT_EQ(0, s.send(cs, rndv_msg(sent + i, 0, src, s.mr->rkey, 0,
                                             ""), sent + i));
        }
        /* our side: each request matched and read (0 bytes); its receive
         * completes once its FIN is on the wire */
        for (unsigned matched = 0; matched < batch;) {
            ASSERT_TRUE(r.next(&wc)) << "request " << sent + matched;
            matched += (wc.wc_flags & IBV_WC_TM_MATCH) != 0;
            finals  += (wc.wc_flags & IBV_WC_TM_DATA_VALID) != 0;
        }
        for (unsigned i = 0; i < batch; ++i) {
            ASSERT_TRUE(s.next(&wc));
            EXPECT_EQ(IBV_WC_SEND, wc.opcode);
        }
        sent += batch;
    }
    r.poll();
    for (const tm_dev_wc_t &c : r.wcs) {
        finals += (c.wc_flags & IBV_WC_TM_DATA_VALID) != 0;
    }
    r.wcs.clear();
    EXPECT_EQ(room, finals) << "receives completed before their FINs went";

    softnic_test_set_mode(s.dev, SOFTNIC_MODE_AUTO);
    while (recvd < total) {
        if (posted - recvd < 64) {
            s.post_rbufs(64, 64, posted, &fins);
            posted += 64;
        }
        r.poll();               /* our NIC sends what waits */
        for (const tm_dev_wc_t &c : r.wcs) {
            EXPECT_TRUE(c.wc_flags & IBV_WC_TM_DATA_VALID);
            ++finals;
        }
        r.wcs.clear();
        ASSERT_TRUE(s.next(&wc)) << recvd << " FINs of " << total;
        ASSERT_EQ(IBV_WC_TM_NO_TAG, wc.opcode);
        const struct ibv_tmh *tmh = (const struct ibv_tmh *)fins.at(wc.wr_id);
        ASSERT_EQ(IBV_TMH_FIN, tmh->opcode);
        EXPECT_EQ((uint64_t)recvd, be64toh(tmh->tag));
        ++recvd;
    }
    r.poll();
    finals += r.wcs.size();
    EXPECT_EQ(total, finals);
}
