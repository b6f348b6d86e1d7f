/*
 * Interleavings the explorer found handled wrongly, replayed step by step
 * at the UCT level (the software device in MANUAL mode).
 */
#include "../uct/uct_fixture.h"

#include "../common/softnic_steer.h"

#include <cstring>

using namespace rc_tm_test;

namespace {

class rc_tm_regression : public uct_fixture {
protected:
    void open_manual()
    {
        tm_dev_t *dev;

        open({{"SOFT_PROGRESS", "inline"}});    /* stepped by the test */
        ASSERT_FALSE(HasFatalFailure());
        uct_rc_tm_iface_device(m_receiver.iface, &dev, &m_srq);
        ASSERT_TRUE(softnic_is_soft(dev));
        softnic_test_set_mode(dev, SOFTNIC_MODE_MANUAL);
    }

    static size_t pack(void *dest, void *arg)
    {
        memcpy(dest, arg, 16);
        return 16;
    }

    void send(uint64_t tag)
    {
        char data[16] = {};
        ASSERT_EQ(16, uct_ep_tag_eager_bcopy(m_sender.eps.at(0), tag, 0, pack,
                                             data, 0));
    }

    /* The device judges the next message of the (only) connection */
    void step_arrival()
    {
        softnic_event_t ev[8];
        unsigned n = softnic_test_events(m_srq, ev, 8);

        for (unsigned i = 0; i < n; ++i) {
            if (ev[i].kind == SOFTNIC_EV_ARRIVAL) {
                ASSERT_EQ(0, softnic_test_step(m_srq, &ev[i]));
                return;
            }
        }
        FAIL() << "no message waiting";
    }

    tm_dev_srq_t *m_srq = nullptr;
};

} // namespace

/* Explorer schedule U,O,A0,A0,P of seed_race: m1 is the last message the
 * device judges unexpected, so it is out of phase.  On mlx5 that message's
 * completion does not ask for the count (IBV_WC_TM_SYNC_REQ comes on an
 * unexpected message only past 0x3fff of them), so nothing is posted for
 * it; the next list operation carries the count and brings the device back
 * in phase, and until then every message goes to software, which matches it
 * there. */
TEST_F(rc_tm_regression, unexpected_message_is_synced_by_the_next_list_operation)
{
    open_manual();
    mapped_buffer buf(m_component, m_md, 256, 0), buf2(m_component, m_md, 256, 0);
    uct_iov_t iov = buf.iov(256), iov2 = buf2.iov(256);
    tag_recv r0, r1;

    ASSERT_EQ(UCS_OK, uct_iface_tag_recv_zcopy(m_receiver.iface, 7, UINT64_MAX,
                                               &iov, 1, &r0.ctx));
    ASSERT_EQ(0, softnic_test_step_op(m_srq));         /* the ADD */
    send(7);
    send(7);
    step_arrival();                                /* m0 matches r0 */
    step_arrival();                                /* m1: unexpected */
    EXPECT_FALSE(softnic_test_in_phase(m_srq));

    uct_iface_progress(m_receiver.iface);
    EXPECT_EQ(1, r0.completed);
    ASSERT_EQ(1u, m_receiver.unexpected.size());
    EXPECT_EQ(0u, softnic_test_pending_ops(m_srq)) << "a SYNC for no request";

    /* the next receive's ADD carries the count */
    ASSERT_EQ(UCS_OK, uct_iface_tag_recv_zcopy(m_receiver.iface, 8, UINT64_MAX,
                                               &iov2, 1, &r1.ctx));
    ASSERT_EQ(1u, softnic_test_pending_ops(m_srq));
    ASSERT_EQ(0, softnic_test_step_op(m_srq));
    EXPECT_TRUE(softnic_test_in_phase(m_srq));
    EXPECT_EQ(1u, softnic_test_hw_unexp(m_srq));
    send(8);
    step_arrival();                                /* matched by the device */
    uct_iface_progress(m_receiver.iface);
    EXPECT_EQ(1, r1.completed);
    EXPECT_EQ(1u, m_receiver.unexpected.size());
}
