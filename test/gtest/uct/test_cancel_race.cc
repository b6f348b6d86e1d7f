/*
 * A cancel racing the device's consumption of the entry (issue 36 item 6).
 * The DEL of a consumed entry fails, and no source orders its completion
 * against the consumption's: the software NIC's UCX_RC_TM_SOFT_HOLD_MATCH
 * gives the failed DEL's first.  Whatever the order, UCT's promise holds:
 * every receive completes once, canceled or with its message's data.
 */
#include "uct_fixture.h"

#include "../common/softnic_steer.h"

#include <cstring>
#include <iostream>

using namespace rc_tm_test;

namespace {

class rc_tm_cancel_race : public uct_fixture {
protected:
    struct posted {
        std::unique_ptr<mapped_buffer> buf;
        tag_recv                       recv;
    };

    ucs_status_t post(posted &p, uint64_t tag)
    {
        p.buf.reset(new mapped_buffer(m_component, m_md, 64, 0));
        uct_iov_t iov = p.buf->iov(64);
        return uct_iface_tag_recv_zcopy(m_receiver.iface, tag, UINT64_MAX,
                                        &iov, 1, &p.recv.ctx);
    }

    void send(uint64_t tag, int value)
    {
        ucs_status_t status;
        ASSERT_TRUE(wait_for([&] {
            status = uct_ep_tag_eager_short(m_sender.eps.at(0), tag, &value,
                                            sizeof(value));
            return status != UCS_ERR_NO_RESOURCE;
        }));
        ASSERT_EQ(UCS_OK, status);
    }

    static int value(posted &p)
    {
        int v;
        memcpy(&v, p.buf->ptr(), sizeof(v));
        return v;
    }

    void receiver_device(tm_dev_t **dev, tm_dev_srq_t **srq)
    {
        uct_rc_tm_iface_device(m_receiver.iface, dev, srq);
        ASSERT_TRUE(softnic_is_soft(*dev));
    }
};

} // namespace

/* The single-packet match is consumed, then the cancel's DEL fails, and the
 * DEL's completion is polled first.  Taken for a receive a message too long
 * had taken, it was completed truncated; the match then completed it a
 * second time, into a buffer already returned, and freed it twice. */
TEST_F(rc_tm_cancel_race, failed_del_polled_before_the_match)
{
    if (soft_thread()) {
        GTEST_SKIP() << "steers the software NIC step by step: inline "
                        "progress only (the next test races it on the "
                        "engine thread)";
    }
    open({{"SOFT_HOLD_MATCH", "y"}});
    tm_dev_t *dev;
    tm_dev_srq_t *srq;
    receiver_device(&dev, &srq);
    softnic_test_set_mode(dev, SOFTNIC_MODE_MANUAL);

    posted r;
    ASSERT_EQ(UCS_OK, post(r, 0xa1));
    ASSERT_EQ(0, softnic_test_step_op(srq));              /* its ADD */
    ASSERT_EQ(UCS_OK, uct_iface_tag_recv_cancel(m_receiver.iface,
                                                &r.recv.ctx, 0));
    send(0xa1, 7);

    /* The message consumes the entry; at once, with no poll between, the
     * DEL fails on the consumed entry */
    bool raced = false;
    ASSERT_TRUE(wait_for([&] {
        if (softnic_test_step_any_arrival(srq) != 0) {
            return false;
        }
        raced = (softnic_test_step_op(srq) == 0);
        return true;
    }));
    ASSERT_TRUE(raced) << "the DEL was not pending";

    ASSERT_TRUE(wait_for([&] { return r.recv.completed > 0; }));
    flush(m_receiver);
    EXPECT_EQ(1, r.recv.completed);
    EXPECT_EQ(1, r.recv.consumed);
    EXPECT_EQ(UCS_OK, r.recv.status) << "the message won the race";
    EXPECT_EQ(7, value(r));
    EXPECT_EQ(1u, counters(m_receiver)[LIST_DEL_RACE]);
    EXPECT_EQ(0u, counters(m_receiver)[RX_TRUNCATED]);

    /* The list works on: nothing was freed twice */
    softnic_test_set_mode(dev, SOFTNIC_MODE_AUTO);
    posted next;
    ASSERT_EQ(UCS_OK, post(next, 0xb2));
    send(0xb2, 8);
    ASSERT_TRUE(wait_for([&] { return next.recv.completed > 0; }));
    EXPECT_EQ(UCS_OK, next.recv.status);
    EXPECT_EQ(8, value(next));
}

/* Cancels racing messages on the engine thread, with every racing DEL's
 * completion first: each receive completes exactly once, canceled or with
 * its own message, and no list slot is lost (make check also runs this
 * under AddressSanitizer) */
TEST_F(rc_tm_cancel_race, racing_cancels_complete_once_on_the_engine_thread)
{
    const int rounds = 200;
    const size_t depth = 8;

    open({{"SOFT_PROGRESS", "thread"}, {"SOFT_HOLD_MATCH", "y"}});
    tm_dev_t *dev;
    tm_dev_srq_t *srq;
    receiver_device(&dev, &srq);

    unsigned delivered = 0, canceled = 0;
    for (int round = 0; round < rounds; ++round) {
        std::vector<posted> r(depth);
        size_t unexpected_before = m_receiver.unexpected.size();
        for (size_t i = 0; i < depth; ++i) {
            ASSERT_EQ(UCS_OK, post(r[i], 0x100 + i));
        }
        for (size_t i = 0; i < depth; ++i) {
            send(0x100 + i, int(round * depth + i));
        }
        /* The engine matches meanwhile: a varying head start moves the
         * race through the queue (no completion is reported before the
         * next progress call, so every receive is still the user's to
         * cancel) */
        for (volatile int spin = 0; spin < (round % 16) * 2000; ++spin) {
        }
        for (size_t i = 0; i < depth; ++i) {
            ASSERT_EQ(UCS_OK, uct_iface_tag_recv_cancel(m_receiver.iface,
                                                        &r[i].recv.ctx, 0));
        }
        ASSERT_TRUE(wait_for([&] {
            for (auto &p : r) {
                if (p.recv.completed == 0) {
                    return false;
                }
            }
            return true;
        })) << "round " << round;
        /* a message whose receive was canceled arrives unexpected */
        ASSERT_TRUE(wait_for([&] {
            size_t arrived = m_receiver.unexpected.size() - unexpected_before;
            for (auto &p : r) {
                arrived += (p.recv.status == UCS_OK);
            }
            return arrived == depth;
        })) << "round " << round;
        flush(m_receiver);
        for (size_t i = 0; i < depth; ++i) {
            ASSERT_EQ(1, r[i].recv.completed) << "round " << round;
            if (r[i].recv.status == UCS_OK) {
                EXPECT_EQ(int(round * depth + i), value(r[i]));
                ++delivered;
            } else {
                EXPECT_EQ(UCS_ERR_CANCELED, r[i].recv.status);
                ++canceled;
            }
        }
        ASSERT_TRUE(wait_for([&] {
            return softnic_test_listed_tags(srq) == 0;
        })) << "round " << round << ": a list slot was lost";
    }
    EXPECT_EQ(canceled, m_receiver.unexpected.size());
    EXPECT_EQ(0u, counters(m_receiver)[RX_TRUNCATED]);
    std::cout << "[cancel race] " << delivered << " delivered, " << canceled
              << " canceled, " << counters(m_receiver)[LIST_DEL_RACE]
              << " failed DELs" << std::endl;
}
