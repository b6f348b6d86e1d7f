/*
 * Send completion moderation (UCX_RC_TM_TX_CQ_MODERATION): most sends ask
 * the device for no completion.  What a user relies on must not change:
 *  - a flush completes, and only once the peer took every send before it;
 *  - a stream of sends far longer than the send completion queue never
 *    stalls and arrives in order;
 *  - an endpoint destroyed with sends in flight gives back the completion
 *    queue entries they held;
 *  - sends that asked for no completion still hold completion queue
 *    entries (a failed connection completes each), and a completion comes
 *    back for them when entries run short;
 *  - send completions polled only when nothing was received starve
 *    neither direction of a two-way stream.
 */
#include "uct_fixture.h"

#include <chrono>
#include <cstring>
#include <functional>
#include <string>

using namespace rc_tm_test;

namespace {

class rc_tm_tx_moderation : public uct_fixture {
protected:
    uct_ep_h ep() { return m_sender.eps.at(0); }

    /* One-byte active message carrying value: UCS_OK or NO_RESOURCE */
    ucs_status_t am_short(char value)
    {
        uint64_t header = (uint8_t)value;
        return uct_ep_am_short(ep(), 1, header, NULL, 0);
    }

    /* The first byte of every active message's header, in order */
    std::string am_order()
    {
        std::string order;
        for (const auto &msg : m_receiver.am_received) {
            order += msg.empty() ? '?' : msg[0];
        }
        return order;
    }
};

} // namespace

/* Fewer sends than the moderation period: none of them asked for a
 * completion, and the flush must still learn when they are done */
TEST_F(rc_tm_tx_moderation, flush_completes_after_sends_without_completion)
{
    open({}, {{"TX_CQ_MODERATION", "64"}});
    std::string sent;
    for (int i = 0; i < 10; ++i) {
        ASSERT_EQ(UCS_OK, am_short((char)('a' + i)));
        sent += (char)('a' + i);
    }

    test_completion comp;
    ASSERT_EQ(UCS_INPROGRESS, uct_ep_flush(ep(), 0, &comp.comp));

    if (soft_thread()) {
        /* The peer's NIC takes them by itself, as a NIC does: the flush
         * completes with the sender alone progressing */
        auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::seconds(10);
        while ((comp.done == 0) &&
               (std::chrono::steady_clock::now() < deadline)) {
            uct_worker_progress(m_sender.worker);
        }
        EXPECT_EQ(1, comp.done);
    } else {
        /* The peer has not taken them yet: the flush cannot be done */
        for (int i = 0; i < 100; ++i) {
            uct_worker_progress(m_sender.worker);
        }
        EXPECT_EQ(0, comp.done);
    }

    ASSERT_TRUE(wait_for([&] { return comp.done == 1; }));
    EXPECT_EQ(UCS_OK, comp.status);
    ASSERT_TRUE(wait_for([&] { return am_order().size() >= sent.size(); }));
    EXPECT_EQ(sent, am_order());

    /* Nothing unsent: a second flush is done at once */
    EXPECT_EQ(UCS_OK, uct_ep_flush(ep(), 0, NULL));
}

/* Thousands of sends through a send CQ of 8 entries, with one completion
 * every 1, 4 or 64 sends (64 is capped at a quarter of the send queue) */
TEST_F(rc_tm_tx_moderation, long_stream_never_stalls_and_keeps_order)
{
    for (const char *moderation : {"1", "4", "64"}) {
        SCOPED_TRACE(std::string("TX_CQ_MODERATION=") + moderation);
        open({}, {{"TX_QUEUE_LEN", "8"}, {"TX_CQ_MODERATION", moderation}});
        m_receiver.am_received.clear();
        std::string sent;
        const int count = 5000;
        for (int i = 0; i < count; ++i) {
            char value = (char)('A' + i % 26);
            ASSERT_TRUE(wait_for([&] {
                return am_short(value) != UCS_ERR_NO_RESOURCE;
            })) << "send " << i << " stalled";
            sent += value;
        }
        flush(m_sender);
        ASSERT_TRUE(wait_for([&] { return am_order().size() >= sent.size(); }));
        EXPECT_EQ(sent, am_order());
        close();
    }
}

/* Every send holds an entry of the interface's send CQ until a completion
 * covers it.  Destroying their endpoint completes them, and must give the
 * entries back, or the interface runs out of them for good: once the
 * stopped connection's flushed completions were polled, which the
 * sender's progress does */
TEST_F(rc_tm_tx_moderation, destroyed_endpoint_gives_back_its_cq_entries)
{
    open({}, {{"TX_QUEUE_LEN", "4"}});
    mapped_buffer src(m_component, m_md, 4096, 's');
    uct_iov_t iov = src.iov(256);
    uint64_t header = 1;

    for (int round = 0; round < 3; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        /* The receiver does not progress: sends stay in flight (inline;
         * its NIC on its own thread takes them) */
        std::vector<test_completion> comps(8);
        int posted = 0, polls = 0, idle_polls = 0;
        ucs_status_t status;
        while (posted < 4) {
            status = uct_ep_am_zcopy(ep(), 1, &header, sizeof(header), &iov,
                                     1, 0, &comps.at(posted).comp);
            if (status == UCS_INPROGRESS) {
                ++posted;
                continue;
            }
            ASSERT_EQ(UCS_ERR_NO_RESOURCE, status);
            /* with the NIC on its own thread, its flushes take their time
             * (a progress call that polls nothing does not count) */
            if (uct_worker_progress(m_sender.worker) || !soft_thread()) {
                ASSERT_LT(++polls, 100) << "the CQ entries did not come back";
            } else {
                ASSERT_LT(++idle_polls, 100000000)
                        << "the CQ entries did not come back";
            }
        }
        EXPECT_EQ(UCS_ERR_NO_RESOURCE,
                  uct_ep_am_zcopy(ep(), 1, &header, sizeof(header), &iov, 1,
                                  0, &comps.at(posted).comp));

        destroy_eps(m_sender);
        destroy_eps(m_receiver);
        for (int i = 0; i < posted; ++i) {
            EXPECT_EQ(1, comps[i].done) << i;
        }
        connect(m_sender, m_receiver);
    }

    /* and the new endpoint's sends complete as usual */
    test_completion comp;
    ucs_status_t status;
    ASSERT_TRUE(wait_for([&] {
        status = uct_ep_am_zcopy(ep(), 1, &header, sizeof(header), &iov, 1, 0,
                                 &comp.comp);
        return status != UCS_ERR_NO_RESOURCE;
    }));
    ASSERT_EQ(UCS_INPROGRESS, status);
    ASSERT_TRUE(wait_for([&] { return comp.done == 1; }));
    EXPECT_EQ(UCS_OK, comp.status);
}

/* Both sides stream at once: a progress call that received something
 * leaves send completions for later, and neither direction may stall on
 * that (every message arrives, in order) */
TEST_F(rc_tm_tx_moderation, streams_in_both_directions_never_stall)
{
    open({}, {{"TX_QUEUE_LEN", "8"}, {"TX_CQ_MODERATION", "4"}});
    const int count = 5000;
    int sent[2] = {0, 0};
    uct_ep_h eps[2] = {m_sender.eps.at(0), m_receiver.eps.at(0)};
    entity *dest[2] = {&m_receiver, &m_sender};

    ASSERT_TRUE(wait_for([&] {
        for (int side = 0; side < 2; ++side) {
            if ((sent[side] < count) &&
                (uct_ep_am_short(eps[side], 1, (uint8_t)('a' + sent[side] % 26),
                                 NULL, 0) == UCS_OK)) {
                ++sent[side];
            }
        }
        return (sent[0] == count) && (sent[1] == count) &&
               (m_receiver.am_received.size() >= (size_t)count) &&
               (m_sender.am_received.size() >= (size_t)count);
    })) << sent[0] << " and " << sent[1] << " sent, "
        << m_receiver.am_received.size() << " and "
        << m_sender.am_received.size() << " arrived";

    for (int side = 0; side < 2; ++side) {
        ASSERT_EQ((size_t)count, dest[side]->am_received.size());
        for (int i = 0; i < count; ++i) {
            ASSERT_EQ((char)('a' + i % 26), dest[side]->am_received[i].at(0))
                    << "side " << side << " message " << i;
        }
    }
}

/* Sends that asked for no completion hold send CQ entries too: no more
 * sends are in flight than the CQ has entries.  And when the entries run
 * short the sends ask, so that completions give every entry back */
TEST_F(rc_tm_tx_moderation, silent_sends_hold_cq_entries_and_get_them_back)
{
    open({}, {{"TX_QUEUE_LEN", "100"}, {"TX_CQ_MODERATION", "64"}});
    if (soft_thread()) {
        /* the receiver's NIC would take the sends on its own thread, and
         * the sender's polls get their entries back at any moment */
        GTEST_SKIP() << "holds sends in flight by not progressing the "
                        "receiver: inline progress only";
    }
    size_t delivered = 0;

    for (int round = 0; round < 3; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        /* The receiver does not progress: sends stay in flight, and the
         * sender gets back only what completions return */
        int posted = 0;
        ASSERT_TRUE(progress_until(m_sender, [&] {
            while ((posted < 100) && (am_short('x') == UCS_OK)) {
                ++posted;
            }
            return posted == 100;
        })) << "only " << posted << " sends could be in flight";
        EXPECT_EQ(UCS_ERR_NO_RESOURCE, am_short('x'));

        /* The receiver takes them */
        delivered += posted;
        ASSERT_TRUE(wait_for([&] {
            return m_receiver.am_received.size() == delivered;
        }));
    }
}
