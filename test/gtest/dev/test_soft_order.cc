/*
 * Completions in the order a NIC gives them (issue 37).  On an RC
 * connection the responder acknowledges a SEND when it takes it, before it
 * sends anything in reaction (the FIN of a rendezvous its NIC read, a
 * reply): the requester's send completion is generated no later than the
 * completion of that reaction.  rdma-core's tests/test_tag_matching.py
 * (test_tm_rndv) polls the client's SEND completion before its FIN's.
 *
 * With one CQ for both, the SEND's completion comes first; with separate
 * send and receive CQs, once the FIN's completion is polled the SEND's is
 * already on the send CQ (softnic_test_cq_pending runs no work).  Inline
 * the sender's NIC works in its polls or MANUAL steps; with the engine it
 * works on its own, and rendezvous are repeated: there, without the
 * arrival's look at the acks, the order is a race that 100 rounds lose.
 */
#include "soft_fixture.h"

using namespace soft_test;

namespace {

const unsigned ROUNDS = 100;

/* The sender also has a connection whose send CQ is its own (scq), apart
 * from the CQ of its TM-SRQ, where the FIN completes */
class soft_order : public soft_pair {
protected:
    tm_dev_cq_t   *scq = nullptr;
    tm_dev_conn_t *cs2 = nullptr, *cr2 = nullptr;

    void SetUp() override {
        ASSERT_NO_FATAL_FAILURE(soft_pair::SetUp());
        ASSERT_EQ(0, tm_dev_create_cq(s.dev, 64, &scq));
        ASSERT_EQ(0, tm_dev_create_conn(s.dev, s.srq, scq, &cs2));
        cr2 = r.create_conn();
        ASSERT_NO_FATAL_FAILURE(connect_pair(s, cs2, r, cr2));
    }

    void TearDown() override {
        if (cs2) { tm_dev_destroy_conn(cs2); cs2 = nullptr; }
        if (scq) { tm_dev_destroy_cq(scq); scq = nullptr; }
        soft_pair::TearDown();
    }

    unsigned scq_pending() { return softnic_test_cq_pending(scq->cq); }

    /* The receiver lists tag for len bytes; the sender posts its
     * rendezvous (wr_id) on c */
    void post_rndv(tm_dev_conn_t *c, uint64_t tag, uint32_t len,
                   uint64_t wr_id) {
        char *src = s.alloc(len), *dst = r.alloc(len);

        memset(src, (int)tag, len);
        ASSERT_EQ(0, r.add_tag(tag, ~0ull, dst, len, 100 + tag, 0,
                               nullptr));
        ASSERT_EQ(0, s.send(c, rndv_msg(tag, 0, src, s.mr->rkey, len),
                            wr_id));
    }

    /* Inline, MANUAL: the receiver lists the tag, takes the rendezvous
     * (acknowledging the SEND), reads it and sends the FIN */
    void receiver_reads(tm_dev_conn_t *c) {
        ASSERT_EQ(0, softnic_test_step_op(r.srq));
        ASSERT_EQ(0, softnic_test_step_arrival(c));
        ASSERT_EQ(0, softnic_test_step_data(r.srq));
        ASSERT_EQ(3u, drain(r).size());     /* ADD, MATCH, DATA_VALID */
    }
};

void expect_send(const tm_dev_wc_t &wc, uint64_t wr_id)
{
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(IBV_WC_SEND, wc.opcode) << "the FIN's completion came first";
    EXPECT_EQ(wr_id, wc.wr_id);
}

void expect_fin(const tm_dev_wc_t &wc, uint64_t wr_id)
{
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(IBV_WC_TM_NO_TAG, wc.opcode);
    EXPECT_EQ(wr_id, wc.wr_id);
}

/* Polls cq until it gives one completion; false after 5 s */
bool poll_one(tm_dev_cq_t *cq, tm_dev_wc_t *wc)
{
    double deadline = now_sec() + 5.0;
    int n;

    while ((n = tm_dev_poll_cq(cq, 1, wc)) == 0) {
        if (now_sec() > deadline) {
            return false;
        }
    }
    return n == 1;
}

class soft_order_engine : public soft_order {
    void set_attr(tm_dev_attr_t &a) override
    {
        a.soft_progress = TM_DEV_SOFT_PROGRESS_THREAD;
    }
};

} // namespace

/* One CQ: the poll that finds the FIN on the ring completes the SEND the
 * receiver took before it (the sender's NIC had not looked at its
 * consumer position since) */
TEST_F(soft_order, one_cq_send_completes_before_its_fin)
{
    tm_dev_wc_t wc;

    s.post_rbufs(1, 256, 700);          /* where the FIN lands */
    manual();
    ASSERT_NO_FATAL_FAILURE(post_rndv(cs, 0x11, 4096, 11));
    ASSERT_NO_FATAL_FAILURE(receiver_reads(cr));
    ASSERT_TRUE(s.next(&wc));
    expect_send(wc, 11);
    ASSERT_TRUE(s.next(&wc));
    expect_fin(wc, 700);
}

/* Separate CQs, the sender steered too (its polls generate no receive
 * completion): once the step that takes the FIN is done and the FIN
 * polled, the SEND's completion is on the send CQ, never polled before */
TEST_F(soft_order, fin_polled_send_completion_already_generated)
{
    tm_dev_wc_t wc;

    s.post_rbufs(1, 256, 700);
    manual();
    softnic_test_set_mode(s.dev, SOFTNIC_MODE_MANUAL);
    ASSERT_NO_FATAL_FAILURE(post_rndv(cs2, 0x12, 4096, 12));
    ASSERT_NO_FATAL_FAILURE(receiver_reads(cr2));
    ASSERT_EQ(0, softnic_test_step_arrival(cs2));
    ASSERT_TRUE(s.next(&wc));
    expect_fin(wc, 700);
    EXPECT_EQ(1u, scq_pending());
    ASSERT_TRUE(poll_one(scq, &wc));
    expect_send(wc, 12);
}

/* Separate CQs, inline AUTO: a poll of the receive CQ alone takes the FIN
 * and completes the SEND on the send CQ */
TEST_F(soft_order, fin_poll_completes_the_send_on_its_own_cq)
{
    tm_dev_wc_t wc;

    s.post_rbufs(1, 256, 700);
    manual();
    ASSERT_NO_FATAL_FAILURE(post_rndv(cs2, 0x13, 4096, 13));
    ASSERT_NO_FATAL_FAILURE(receiver_reads(cr2));
    ASSERT_TRUE(s.next(&wc));
    expect_fin(wc, 700);
    EXPECT_EQ(1u, scq_pending());
    ASSERT_TRUE(poll_one(scq, &wc));
    expect_send(wc, 13);
}

/* A NIC's acknowledgement comes back once the responder took the SEND:
 * the first poll of the send CQ after that has its completion, also after
 * unsignaled SENDs (which complete silently) and at any point of the
 * device's own pace of looking (issue 47: a zero-copy send waited up to 16
 * polls for it, a latency at every message UCP sends that way) */
TEST_F(soft_order, signaled_send_completes_at_the_first_poll_after_taken)
{
    tm_dev_wc_t wc;

    s.post_rbufs(1, 256, 700);
    r.post_rbufs(4 * ROUNDS, 256, 800);
    manual();
    softnic_test_set_mode(s.dev, SOFTNIC_MODE_MANUAL);
    for (unsigned i = 0; i < ROUNDS; ++i) {
        unsigned unsignaled = i % 4;

        for (unsigned k = 0; k < unsignaled; ++k) {
            ASSERT_EQ(0, s.send(cs2, std::string(16, 'u'), 1, false));
        }
        ASSERT_EQ(0, s.send(cs2, std::string(16, 's'), 50 + i));
        for (unsigned k = 0; k <= unsignaled; ++k) {
            ASSERT_EQ(0, softnic_test_step_arrival(cr2));
        }
        ASSERT_EQ(1, tm_dev_poll_cq(scq, 1, &wc)) << "round " << i;
        expect_send(wc, 50 + i);
        ASSERT_EQ(unsignaled + 1, drain(r).size());
    }
}

/* Both engines at work, one CQ: the SEND comes first, every time */
TEST_F(soft_order_engine, one_cq_send_completes_before_its_fin)
{
    tm_dev_wc_t wc;

    s.post_rbufs(ROUNDS, 256, 700);
    for (unsigned i = 0; i < ROUNDS; ++i) {
        ASSERT_NO_FATAL_FAILURE(post_rndv(cs, 0x20 + i, 64, 20 + i));
        ASSERT_TRUE(s.next(&wc));
        expect_send(wc, 20 + i);
        ASSERT_TRUE(s.next(&wc));
        expect_fin(wc, 700 + i);
        for (unsigned k = 0; k < 3; ++k) {  /* ADD, MATCH, DATA_VALID */
            ASSERT_TRUE(r.next(&wc));
        }
    }
}

/* Both engines at work, separate CQs: once the FIN is polled, the SEND's
 * completion is published on the send CQ, every time */
TEST_F(soft_order_engine, fin_polled_send_completion_already_published)
{
    tm_dev_wc_t wc;

    s.post_rbufs(ROUNDS, 256, 700);
    for (unsigned i = 0; i < ROUNDS; ++i) {
        ASSERT_NO_FATAL_FAILURE(post_rndv(cs2, 0x40 + i, 64, 40 + i));
        ASSERT_TRUE(s.next(&wc));
        expect_fin(wc, 700 + i);
        EXPECT_EQ(1u, scq_pending()) << "round " << i;
        ASSERT_TRUE(poll_one(scq, &wc));
        expect_send(wc, 40 + i);
        for (unsigned k = 0; k < 3; ++k) {
            ASSERT_TRUE(r.next(&wc));
        }
    }
}
