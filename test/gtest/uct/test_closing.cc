/*
 * Closing endpoints (docs/verbs-device.md, items 9 and 11): a destroyed
 * endpoint's QPs and send CQ entries come back in bounded progress.  The
 * closing path waits for IBV_EVENT_QP_LAST_WQE_REACHED on the sending QP
 * only, as UCX does: no source says that firmware raises it for the
 * receive-only QP, nor for a QP that never left INIT, and the software NIC
 * never does.
 */
#include "uct_fixture.h"
#include "../common/softnic_steer.h"

#include <cstring>

using namespace rc_tm_test;

namespace {

class rc_tm_closing : public uct_fixture {
protected:
    tm_dev_t *dev(entity &e)
    {
        tm_dev_t *d;
        tm_dev_srq_t *srq;
        uct_rc_tm_iface_device(e.iface, &d, &srq);
        return d;
    }

    /* Messages to e tagged tag .. tag + count - 1 */
    static size_t arrived(const entity &e, uint64_t tag, unsigned count)
    {
        size_t n = 0;
        for (const unexpected_msg &msg : e.unexpected) {
            n += (msg.tag >= tag) && (msg.tag < tag + count);
        }
        return n;
    }

    /* Sends tagged messages both ways and waits for them (messages of a
     * destroyed endpoint may still arrive meanwhile: other tags) */
    void exchange(unsigned count)
    {
        m_sender.unexpected.clear();
        m_receiver.unexpected.clear();
        for (unsigned i = 0; i < count; ++i) {
            ASSERT_EQ(UCS_OK, uct_ep_tag_eager_short(m_sender.eps.at(0),
                                                     0x100 + i, "s", 1));
            ASSERT_EQ(UCS_OK, uct_ep_tag_eager_short(m_receiver.eps.at(0),
                                                     0x200 + i, "r", 1));
        }
        ASSERT_TRUE(wait_for([&] {
            return (arrived(m_receiver, 0x100, count) == count) &&
                   (arrived(m_sender, 0x200, count) == count);
        }));
    }
};

} // namespace

/* Connections made, used and destroyed, round after round: each time both
 * sides' QPs are destroyed in bounded progress, and the send CQ entries of
 * sends still in flight come back.  Waiting for the receive-only QP's last
 * WQE, they would be held until the interface closes. */
TEST_F(rc_tm_closing, destroyed_endpoints_give_back_their_qps_and_credits)
{
    open({}, {{"TX_QUEUE_LEN", "4"}});
    ASSERT_TRUE(softnic_is_soft(dev(m_sender)));
    destroy_eps(m_sender);
    destroy_eps(m_receiver);
    ASSERT_TRUE(wait_for([&] {
        return (softnic_test_qp_count(dev(m_sender)) == 0) &&
               (softnic_test_qp_count(dev(m_receiver)) == 0);
    })) << "the fixture's connection was not destroyed";

    for (int round = 0; round < 8; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        connect(m_sender, m_receiver);
        ASSERT_NO_FATAL_FAILURE(exchange(3));
        ASSERT_TRUE(wait_for([&] {
            return uct_ep_flush(m_sender.eps.at(0), 0, NULL) == UCS_OK;
        }));
        /* every credit taken again: left in flight by the destroy */
        for (int i = 0; i < 4; ++i) {
            ASSERT_EQ(UCS_OK, uct_ep_tag_eager_short(m_sender.eps.at(0),
                                                     0x300 + i, "x", 1))
                    << "send CQ entries held by destroyed endpoints";
        }
        destroy_eps(m_sender);
        destroy_eps(m_receiver);
        ASSERT_TRUE(wait_for([&] {
            return (softnic_test_qp_count(dev(m_sender)) == 0) &&
                   (softnic_test_qp_count(dev(m_receiver)) == 0);
        })) << softnic_test_qp_count(dev(m_sender)) << " and "
            << softnic_test_qp_count(dev(m_receiver)) << " QPs left";
    }
}

/* An endpoint destroyed before it was connected (UCP's wireup gives up on
 * it): its QPs never left INIT, nothing is in flight, and no event will
 * come for them: they go at once */
TEST_F(rc_tm_closing, endpoint_destroyed_before_connecting_goes_at_once)
{
    open();
    ASSERT_TRUE(softnic_is_soft(dev(m_sender)));
    unsigned qps = softnic_test_qp_count(dev(m_sender));

    uct_ep_params_t params = {};
    params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
    params.iface      = m_sender.iface;
    uct_ep_h ep;
    ASSERT_EQ(UCS_OK, uct_ep_create(&params, &ep));
    EXPECT_EQ(qps + 2, softnic_test_qp_count(dev(m_sender)));

    uct_ep_destroy(ep);
    EXPECT_EQ(qps, softnic_test_qp_count(dev(m_sender)));
    for (int i = 0; i < 100; ++i) {
        progress();
    }
    EXPECT_EQ(qps, softnic_test_qp_count(dev(m_sender)));

    /* and the interface goes on as before */
    ASSERT_NO_FATAL_FAILURE(exchange(2));
}

/* The receiving endpoint is destroyed while the NIC reads a rendezvous it
 * matched: the MATCH came without a packet, so names no QP (QP number 0,
 * docs/verbs-device.md rows 7 and 20).  The closing connection waits for
 * every matched receive of unknown QP: its read finishes, and the receive
 * completes with the data.  Destroyed at the first empty poll, it never
 * completes. */
TEST_F(rc_tm_closing, rendezvous_read_by_the_nic_completes_after_its_endpoint)
{
    open();
    tm_dev_t *d;
    tm_dev_srq_t *srq;
    uct_rc_tm_iface_device(m_receiver.iface, &d, &srq);
    ASSERT_TRUE(softnic_is_soft(d));

    const size_t len = 65536;
    mapped_buffer rbuf(m_component, m_md, len, 0);
    mapped_buffer sbuf(m_component, m_md, len, 0);
    sbuf.pattern(7);
    tag_recv r;
    uct_iov_t riov = rbuf.iov(len);
    ASSERT_EQ(UCS_OK, uct_iface_tag_recv_zcopy(m_receiver.iface, 0x66,
                                               UINT64_MAX, &riov, 1, &r.ctx));
    ASSERT_TRUE(wait_for([&] { return softnic_test_listed_tags(srq) == 1; }));

    softnic_test_set_mode(d, SOFTNIC_MODE_MANUAL);
    char header[16] = {};
    uct_iov_t siov = sbuf.iov(len);
    test_completion comp;
    scope_exit cancel_send{[&] { destroy_eps(m_sender); }};
    ASSERT_FALSE(UCS_PTR_IS_ERR(uct_ep_tag_rndv_zcopy(m_sender.eps.at(0), 0x66,
                                                      header, sizeof(header),
                                                      &siov, 1, 0,
                                                      &comp.comp)));
    ASSERT_TRUE(wait_for([&] {
        return softnic_test_step_any_arrival(srq) == 0;
    }));
    ASSERT_TRUE(wait_for([&] { return r.consumed > 0; }));
    ASSERT_EQ(1u, softnic_test_pending_data(srq)) << "MATCH only";

    uct_ep_destroy(m_receiver.eps.at(0));
    m_receiver.eps.clear();
    for (int i = 0; i < 100; ++i) {
        uct_worker_progress(m_receiver.worker);
    }
    EXPECT_EQ(0, r.completed);

    ASSERT_EQ(0, softnic_test_step_data(srq));
    softnic_test_set_mode(d, SOFTNIC_MODE_AUTO);
    ASSERT_TRUE(wait_for([&] { return r.completed > 0; }))
            << "the final completion was dropped with the QP";
    EXPECT_EQ(UCS_OK, r.status);
    EXPECT_TRUE(rbuf.has_pattern(7, len));
    ASSERT_TRUE(wait_for([&] { return comp.done > 0; }));
    EXPECT_EQ(UCS_OK, comp.status);
}
