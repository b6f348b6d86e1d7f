/*
 * The software NIC's engine thread (SOFTNIC_PROGRESS_THREAD): the device
 * works without being polled, sleeps on its doorbell when idle and is woken
 * by it, watches a peer it waits on while asleep, and stops with nothing
 * lost.  Waits below are bounded loops on the state they wait for (a hang
 * detector), never sleeps standing in for synchronisation.
 */
#include "soft_fixture.h"

#include <sched.h>

using namespace soft_test;

namespace {

softnic_engine_stats_t engine_stats(node &n)
{
    softnic_engine_stats_t st;

    EXPECT_EQ(0, softnic_test_engine_stats(tm_dev_ibv_context(n.dev), &st));
    return st;
}

std::string describe(const softnic_engine_stats_t &st)
{
    return "running " + std::to_string(st.running) + ", sleeping " +
           std::to_string(st.sleeping) + ", sleeps " +
           std::to_string(st.sleeps) + ", doorbell wakes " +
           std::to_string(st.doorbell_wakes) + ", timer wakes " +
           std::to_string(st.timer_wakes) + ", rounds " +
           std::to_string(st.passes) + ", assists " +
           std::to_string(st.assists) + ", parks " +
           std::to_string(st.parks);
}

unsigned cq_pending(node &n)
{
    return softnic_test_cq_pending(n.cq->cq);
}

/* Yields until pred holds; false after 10 s (only a hang gets there) */
bool eventually(const std::function<bool()> &pred)
{
    double deadline = now_sec() + 10.0;

    while (!pred()) {
        if (now_sec() > deadline) {
            return false;
        }
        sched_yield();
    }
    return true;
}

/* The engine is in its sleep: announced, past its last look (the count
 * of sleeps moved past `since`) and not rung since */
bool asleep(node &n, uint64_t since, int how)
{
    softnic_engine_stats_t st = engine_stats(n);

    return (st.sleeping == how) && (st.sleeps > since);
}

class soft_engine : public soft_pair {
    void set_attr(tm_dev_attr_t &a) override
    {
        a.soft_progress = TM_DEV_SOFT_PROGRESS_THREAD;
    }
};

} // namespace

TEST(soft_engine_config, inline_by_default)
{
    node n;
    tm_dev_attr_t attr;

    memset(&attr, 0, sizeof(attr));
    ASSERT_NO_FATAL_FAILURE(n.open(attr));
    EXPECT_EQ(0, engine_stats(n).running);
    /* the choice is made before any CQ: it cannot change under one */
    struct softnic_dv_attr dv;
    memset(&dv, 0, sizeof(dv));
    dv.progress = SOFTNIC_PROGRESS_THREAD;
    EXPECT_EQ(EBUSY, softnic_dv_set_attr(tm_dev_ibv_context(n.dev), &dv));
    dv.progress = 7;
    EXPECT_EQ(EINVAL, softnic_dv_set_attr(tm_dev_ibv_context(n.dev), &dv));
    n.close();
}

/* The receiver's NIC lists the entry, judges and places both messages and
 * writes their completions while its software only posts: the data is in
 * the buffers before the completions are read */
TEST_F(soft_engine, works_without_a_poll)
{
    ASSERT_TRUE(engine_stats(r).running);
    std::vector<char*> rbufs;
    r.post_rbufs(4, 256, 100, &rbufs);
    char *tbuf = r.alloc(256);
    uint32_t handle;
    ASSERT_EQ(0, r.add_tag(0x42, ~0ull, tbuf, 256, 7, 0, &handle, 1));
    ASSERT_TRUE(eventually([&] {
        return softnic_test_listed_tags(r.srq) == 1;
    })) << "the NIC did not carry out the ADD";

    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 0x42, 9, "matched"), 11));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 0x43, 9, "unexp"), 12));
    ASSERT_TRUE(eventually([&] { return cq_pending(r) == 3; }))
            << cq_pending(r) << " completions";
    EXPECT_EQ(0, memcmp(tbuf, "matched", 7));
    EXPECT_EQ(0, memcmp(rbufs[0] + TMH, "unexp", 5));
    EXPECT_EQ(0u, softnic_test_pending_arrivals(tm_dev_ibv_rx_qp(cr)));

    tm_dev_wc_t wc;
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_TM_ADD, wc.opcode);
    ASSERT_TRUE(r.next(&wc));
    EXPECT_TM_RECV(wc, 7, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, 0x42, 9, 7);
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_RECV, wc.opcode);
    EXPECT_EQ(100u, wc.wr_id);

    /* the sender's NIC completes its sends once the receiver's took them */
    ASSERT_TRUE(eventually([&] { return cq_pending(s) == 2; }));
    ASSERT_TRUE(s.next(&wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(11u, wc.wr_id);
    ASSERT_TRUE(s.next(&wc));
    EXPECT_EQ(12u, wc.wr_id);
}

/* Idle, the engine sleeps without a timer and makes no rounds; a message
 * rings its doorbell, and it delivers it */
TEST_F(soft_engine, sleeps_until_its_doorbell_rings)
{
    r.post_rbufs(2, 256, 100);
    ASSERT_TRUE(eventually([&] { return asleep(r, 0, 2); }))
            << "an idle engine never slept";
    softnic_engine_stats_t before = engine_stats(r);
    for (int i = 0; i < 1000; ++i) {
        sched_yield();
    }
    softnic_engine_stats_t idle = engine_stats(r);
    EXPECT_EQ(2, idle.sleeping);
    EXPECT_EQ(before.passes, idle.passes) << "an idle engine made rounds: "
            << describe(before) << " -> " << describe(idle);
    EXPECT_EQ(before.timer_wakes, idle.timer_wakes);
    EXPECT_EQ(0u, cq_pending(r));

    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_NO_TAG, 0, 0, "ring"), 1));
    ASSERT_TRUE(eventually([&] { return cq_pending(r) == 1; }))
            << "the doorbell did not wake the engine";
    softnic_engine_stats_t after = engine_stats(r);
    EXPECT_GT(after.doorbell_wakes, before.doorbell_wakes);
    /* counted after the round's unlock, which follows its completions */
    EXPECT_TRUE(eventually([&] {
        return engine_stats(r).passes > before.passes;
    })) << describe(engine_stats(r));
    tm_dev_wc_t wc;
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_TM_NO_TAG, wc.opcode);

    /* a local verb rings it too: a list operation while it sleeps */
    ASSERT_TRUE(eventually([&] { return asleep(r, before.sleeps, 2); }))
            << describe(engine_stats(r));
    before = engine_stats(r);
    char *tbuf = r.alloc(64);
    ASSERT_EQ(0, r.add_tag(0x1, ~0ull, tbuf, 64, 5, 0, nullptr, 2));
    ASSERT_TRUE(eventually([&] { return cq_pending(r) == 1; }));
    EXPECT_GT(engine_stats(r).doorbell_wakes, before.doorbell_wakes);
}

/* Software that polls and finds nothing runs a round of the device's work
 * itself, and the engine stands aside while it polls (on a machine with
 * fewer cores than busy threads the two would take turns at the
 * scheduler's pace); a message still completes */
TEST_F(soft_engine, a_polling_thread_works_and_the_engine_stands_aside)
{
    softnic_engine_stats_t before = engine_stats(r), st;

    r.post_rbufs(2, 256, 100);
    ASSERT_TRUE(eventually([&] {
        r.poll();
        st = engine_stats(r);
        if (st.sleeping != 0) {
            /* asleep it sees no polls: a steering call rings it (the
             * mode it has already) */
            softnic_test_set_mode(r.dev, SOFTNIC_MODE_AUTO);
        }
        return (st.parks > before.parks) && (st.assists > before.assists);
    })) << describe(st);

    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_NO_TAG, 0, 0, "polled"), 1));
    ASSERT_TRUE(eventually([&] {
        r.poll();
        return !r.wcs.empty();
    })) << describe(engine_stats(r));
    EXPECT_EQ(IBV_WC_TM_NO_TAG, r.wcs.front().opcode);
}

/* A send its peer does not take (no untagged buffer: RNR) keeps the
 * sender's engine on its liveness timer, asleep; once taken, the engine
 * completes it and sleeps without a timer again */
TEST_F(soft_engine, timer_only_while_a_peer_owes_something)
{
    ASSERT_TRUE(eventually([&] { return asleep(s, 0, 2); }));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_NO_TAG, 0, 0, "held"), 1));
    uint64_t sleeps = engine_stats(s).sleeps;
    ASSERT_TRUE(eventually([&] { return asleep(s, sleeps, 1); }))
            << "waiting on its peer, the engine slept without its timer";
    uint64_t timer_wakes = engine_stats(s).timer_wakes;
    ASSERT_TRUE(eventually([&] {
        return engine_stats(s).timer_wakes > timer_wakes;
    }));
    EXPECT_EQ(0u, cq_pending(s));

    sleeps = engine_stats(s).sleeps;
    r.post_rbufs(1, 256, 100);          /* rings r's engine: RNR ends */
    ASSERT_TRUE(eventually([&] { return cq_pending(s) == 1; }));
    tm_dev_wc_t wc;
    ASSERT_TRUE(s.next(&wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    ASSERT_TRUE(eventually([&] { return asleep(s, sleeps, 2); }))
            << describe(engine_stats(s));
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_TM_NO_TAG, wc.opcode);
}

/* The receiver takes some messages, then closes with the rest in its ring
 * and more queued at the sender: it stops cleanly (its engine joined, its
 * completions were all written), and every send completes, the taken ones
 * with success, then RETRY_EXC_ERR, then flushes: nothing lost.  The
 * sender's engine notices the closed peer while asleep on its timer. */
TEST_F(soft_engine, close_with_work_in_flight_loses_nothing)
{
    const unsigned taken = 20, sent = 200;
    std::string payload(2000, 'x');

    r.post_rbufs(taken, 4096, 100);
    for (unsigned i = 0; i < sent; ++i) {
        ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_NO_TAG, 0, 0, payload), i))
                << i;
    }
    ASSERT_TRUE(eventually([&] { return cq_pending(r) == taken; }));
    EXPECT_EQ(taken, cq_pending(r));
    r.close();

    std::vector<tm_dev_wc_t> wcs;
    tm_dev_wc_t wc;
    while ((wcs.size() < sent) && s.next(&wc)) {
        wcs.push_back(wc);
    }
    ASSERT_EQ(sent, wcs.size());
    for (unsigned i = 0; i < sent; ++i) {
        EXPECT_EQ(i, wcs[i].wr_id);
        EXPECT_EQ((i < taken) ? IBV_WC_SUCCESS :
                  (i == taken) ? IBV_WC_RETRY_EXC_ERR : IBV_WC_WR_FLUSH_ERR,
                  wcs[i].status) << i;
    }
    s.poll();
    EXPECT_TRUE(s.wcs.empty());
}

/* Connections made, used and destroyed, and a whole device closed, while
 * both engines work on them (ASan and TSan builds check the rest) */
TEST_F(soft_engine, destroy_while_the_engine_runs)
{
    r.post_rbufs(512, 256, 100);
    s.post_rbufs(512, 256, 100);
    for (int round = 0; round < 30; ++round) {
        tm_dev_conn_t *a = s.create_conn(), *b = r.create_conn();
        ASSERT_NO_FATAL_FAILURE(connect_pair(s, a, r, b));
        for (int i = 0; i < 8; ++i) {
            s.send(a, tm_msg(IBV_TMH_NO_TAG, 0, 0, "a"), i);
            r.send(b, tm_msg(IBV_TMH_NO_TAG, 0, 0, "b"), i);
        }
        tm_dev_destroy_conn(a);
        tm_dev_destroy_conn(b);
        s.conns.pop_back();
        r.conns.pop_back();
        s.poll();
        r.poll();
    }
    for (int i = 0; i < 64; ++i) {
        s.send(cs, tm_msg(IBV_TMH_NO_TAG, 0, 0, "c"), i);
        r.send(cr, tm_msg(IBV_TMH_NO_TAG, 0, 0, "d"), i);
    }
    r.close();                  /* its engine mid-work, nothing polled */
    s.close();
}
