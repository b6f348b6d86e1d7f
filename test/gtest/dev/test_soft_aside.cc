/*
 * The engine stands aside where it has no CPU of its own
 * (SOFTNIC_ENGINE_ASIDE_AUTO, softnic_aside.c; issue 47): its rule, applied
 * to looks given outright; then the engine acting on looks fixed with
 * softnic_test_engine_cpus: it hands the device to the polls (which then
 * work as inline: no round of the engine, no assist, no doorbell), takes it
 * back once a CPU is free, and keeps it for a completion channel's CQ.
 * No timing decides anything here: waits are bounded loops on the state
 * they wait for (a hang detector).
 */
#include "soft_fixture.h"

#include <sched.h>

using namespace soft_test;

namespace {

const softnic_cpu_look_t SPARE = {4, 1, 0, 0};   /* 4 CPUs, 1 other thread */
const softnic_cpu_look_t TAKEN = {2, 2, 0, 0};   /* 2 CPUs, 2 busy ranks */

softnic_engine_stats_t stats(node &n)
{
    softnic_engine_stats_t st;

    EXPECT_EQ(0, softnic_test_engine_stats(tm_dev_ibv_context(n.dev), &st));
    return st;
}

int rule(uint32_t *history, softnic_cpu_look_t look, int aside)
{
    return softnic_test_engine_aside_rule(history, &look, aside);
}

class soft_aside : public soft_pair {
protected:
    void set_attr(tm_dev_attr_t &a) override
    {
        a.soft_progress     = TM_DEV_SOFT_PROGRESS_THREAD;
        a.soft_engine_aside = 1;
    }

    void look(const softnic_cpu_look_t &l) {
        EXPECT_EQ(0, softnic_test_engine_cpus(tm_dev_ibv_context(s.dev), &l));
        EXPECT_EQ(0, softnic_test_engine_cpus(tm_dev_ibv_context(r.dev), &l));
    }

    /* Polls both sides (software switches at a poll) and wakes the
     * engines (asleep, they look at nothing) until pred holds; false after
     * 10 s (only a hang gets there) */
    bool polling_until(const softnic_cpu_look_t &l,
                       const std::function<bool()> &pred) {
        double deadline = now_sec() + 10.0;

        while (!pred()) {
            look(l);
            s.poll();
            r.poll();
            if (now_sec() > deadline) {
                return false;
            }
            sched_yield();
        }
        return true;
    }

    void stand_aside() {
        ASSERT_TRUE(polling_until(TAKEN, [&] {
            return stats(s).aside && stats(r).aside;
        })) << "the engines did not stand aside";
        s.wcs.clear();
        r.wcs.clear();
    }
};

} // namespace

/* 3 of the last 4 looks without a CPU to spare: it stands aside */
TEST(soft_engine_aside_rule, three_of_four_looks_without_a_cpu)
{
    uint32_t h = 0;

    EXPECT_FALSE(rule(&h, TAKEN, 0));
    EXPECT_FALSE(rule(&h, SPARE, 0));
    EXPECT_FALSE(rule(&h, TAKEN, 0));
    EXPECT_TRUE(rule(&h, TAKEN, 0));
    h = 0;
    EXPECT_FALSE(rule(&h, TAKEN, 0));
    EXPECT_FALSE(rule(&h, TAKEN, 0));
    EXPECT_TRUE(rule(&h, TAKEN, 0));
}

/* Aside, it works again only after 4 looks in a row with a CPU to spare */
TEST(soft_engine_aside_rule, back_after_four_looks_with_a_cpu)
{
    uint32_t h = 0xf;

    EXPECT_TRUE(rule(&h, SPARE, 1));
    EXPECT_TRUE(rule(&h, SPARE, 1));
    EXPECT_TRUE(rule(&h, TAKEN, 1));
    EXPECT_TRUE(rule(&h, SPARE, 1));
    EXPECT_TRUE(rule(&h, SPARE, 1));
    EXPECT_TRUE(rule(&h, SPARE, 1));
    EXPECT_FALSE(rule(&h, SPARE, 1));
}

/* No CPU to spare: every CPU the process may run on wanted by another
 * thread, or the engine waited for a CPU as long as it ran (over at least
 * 1 ms) */
TEST(soft_engine_aside_rule, what_no_cpu_to_spare_is)
{
    uint32_t h;

    h = 0; rule(&h, {8, 7, 0, 0}, 0);
    EXPECT_EQ(0u, h) << "one CPU of 8 free";
    h = 0; rule(&h, {8, 8, 0, 0}, 0);
    EXPECT_EQ(1u, h) << "8 threads want the 8 CPUs";
    h = 0; rule(&h, {1, 1, 0, 0}, 0);
    EXPECT_EQ(1u, h) << "bound to one CPU beside its rank";
    h = 0; rule(&h, {8, 1, 600000, 600000}, 0);
    EXPECT_EQ(1u, h) << "waited as long as it ran";
    h = 0; rule(&h, {8, 1, 2000000, 100000}, 0);
    EXPECT_EQ(0u, h) << "it hardly waited";
    h = 0; rule(&h, {8, 1, 1000, 50000}, 0);
    EXPECT_EQ(0u, h) << "too little time to judge";
}

/* The default: the engine always works (tests of its semantics, the
 * interposer's programs, which wait on one CQ at a time) */
TEST(soft_engine_aside_config, never_by_default)
{
    node n;
    tm_dev_attr_t attr;
    struct softnic_dv_attr dv;

    memset(&attr, 0, sizeof(attr));
    attr.soft_progress = TM_DEV_SOFT_PROGRESS_THREAD;
    ASSERT_NO_FATAL_FAILURE(n.open(attr));
    ASSERT_EQ(0, softnic_dv_query(tm_dev_ibv_context(n.dev), &dv));
    EXPECT_EQ((uint32_t)SOFTNIC_ENGINE_ASIDE_NEVER, dv.engine_aside);
    memset(&dv, 0, sizeof(dv));
    dv.engine_aside = 3;
    EXPECT_EQ(EINVAL, softnic_dv_set_attr(tm_dev_ibv_context(n.dev), &dv));
    n.close();
}

/* Aside, the polls do the device's work, as inline: the messages arrive
 * and complete, and the engine ran no round, no poll lent it its time
 * (the threaded path) and no peer rang its doorbell */
TEST_F(soft_aside, the_polls_work_as_inline)
{
    tm_dev_wc_t wc;

    ASSERT_NO_FATAL_FAILURE(stand_aside());
    softnic_engine_stats_t r0 = stats(r), s0 = stats(s);
    r.post_rbufs(8, 256, 100);
    for (int i = 0; i < 8; ++i) {
        ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 0x50 + i, 0, "aside"),
                            20 + i));
    }
    for (int i = 0; i < 8; ++i) {
        ASSERT_TRUE(r.next(&wc)) << "message " << i;
        EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
        EXPECT_EQ(IBV_WC_RECV, wc.opcode);
        EXPECT_EQ(100u + i, wc.wr_id);
    }
    for (int i = 0; i < 8; ++i) {
        ASSERT_TRUE(s.next(&wc)) << "send " << i;
        EXPECT_EQ(20u + i, wc.wr_id);
    }
    softnic_engine_stats_t r1 = stats(r), s1 = stats(s);
    EXPECT_TRUE(r1.running && r1.aside && s1.aside);
    EXPECT_EQ(r0.passes, r1.passes) << "the engine ran a round";
    EXPECT_EQ(s0.passes, s1.passes) << "the engine ran a round";
    EXPECT_EQ(r0.assists, r1.assists) << "a poll took the threaded path";
    EXPECT_EQ(r0.doorbell_wakes, r1.doorbell_wakes);
    EXPECT_EQ(1u, r1.asides);
}

/* A CPU free again: at a poll after 4 such looks the engine works again,
 * and the device without being polled */
TEST_F(soft_aside, works_again_once_a_cpu_is_free)
{
    ASSERT_NO_FATAL_FAILURE(stand_aside());
    ASSERT_TRUE(polling_until(SPARE, [&] {
        return !stats(s).aside && !stats(r).aside;
    })) << "the engines did not come back";
    EXPECT_TRUE(stats(r).running);

    r.post_rbufs(1, 256, 100);
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 0x60, 0, "back"), 30));
    double deadline = now_sec() + 10.0;
    while (softnic_test_cq_pending(r.cq->cq) == 0) {
        ASSERT_LT(now_sec(), deadline) << "no completion without a poll";
        sched_yield();
    }
    tm_dev_wc_t wc;
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(100u, wc.wr_id);
}

/* A program may sleep on a completion channel rather than poll: a CQ with
 * one, created while the engine stands aside, takes it back at once */
TEST_F(soft_aside, a_channel_cq_takes_the_engine_back)
{
    struct ibv_context *ctx = tm_dev_ibv_context(r.dev);

    ASSERT_NO_FATAL_FAILURE(stand_aside());
    struct ibv_comp_channel *ch = softnic_create_comp_channel(ctx);
    ASSERT_NE(nullptr, ch);
    struct ibv_cq *cq = softnic_create_cq(ctx, 4, nullptr, ch, 0);
    ASSERT_NE(nullptr, cq);
    EXPECT_FALSE(stats(r).aside);
    EXPECT_TRUE(stats(r).running);
    EXPECT_EQ(0, softnic_destroy_cq(cq));
    EXPECT_EQ(0, softnic_destroy_comp_channel(ch));
}
