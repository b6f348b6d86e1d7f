/*
 * Faults at the UCT level, over the software device: a peer process killed
 * in the middle of a rendezvous (either side), receive resources exhausted,
 * invalid rkeys, and malformed wire headers sent by a peer that speaks to
 * the device directly.  Every test checks that the error reaches the caller
 * (a completion status, the error handler, or an error message when a
 * message cannot be attributed to any request), that every wait is bounded,
 * and that no byte outside the registered buffers changes (guard bytes on
 * both sides of each buffer, outside its registration).
 *
 * docs/testing.md lists these cases next to those other suites cover.
 */
#include "fault_fixture.h"

/* ----- a peer killed in the middle of a rendezvous ----- */

/* The sender dies after its request arrived, before the receiver's device
 * reads the data: the receive completes with an error, nothing is written */
TEST_F(rc_tm_fault, sender_killed_before_the_device_reads)
{
    fork_rndv_sender(0x11);

    ASSERT_TRUE(open_connected(m_receiver));
    tm_dev_srq_t *srq;
    tm_dev_t *dev = device(m_receiver, &srq);
    guarded_buffer rbuf(m_component, m_md, RNDV_SIZE, 'r');
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, m_receiver, rbuf, 0x11, RNDV_SIZE));
    ASSERT_TRUE(wait_for([&] { return softnic_test_listed_tags(srq) == 1; }));
    softnic_test_set_mode(dev, SOFTNIC_MODE_MANUAL);   /* the request waits */
    ASSERT_TRUE(signal_peer('p'));
    ASSERT_TRUE(wait_peer('s'));
    kill_peer();

    ucx_log_capture log;
    softnic_test_set_mode(dev, SOFTNIC_MODE_AUTO);
    ASSERT_TRUE(wait_for([&] { return r.completed > 0; }))
            << "the receive of a dead sender's rendezvous never completed";
    EXPECT_NE(UCS_OK, r.status);
    EXPECT_EQ(1, r.consumed);
    EXPECT_EQ(0u, counters(m_receiver)[RX_SW_MATCH]) << "not in the device";
    EXPECT_TRUE(rbuf.all('r')) << "the failed read wrote into the buffer";
    EXPECT_TRUE(rbuf.guards_intact());
}

/* The same, when the receive waits in rc_tm's software list and the
 * transport reads the data itself */
TEST_F(rc_tm_fault, sender_killed_before_software_reads)
{
    fork_rndv_sender(0x11);

    ASSERT_TRUE(open_connected(m_receiver, {{"LIST_SIZE", "1"}}));
    tm_dev_t *dev = device(m_receiver);
    guarded_buffer fbuf(m_component, m_md, 1024, 'f');
    guarded_buffer rbuf(m_component, m_md, RNDV_SIZE, 'r');
    tag_recv filler, r;
    ASSERT_EQ(UCS_OK, post(filler, m_receiver, fbuf, 0x99, 1024));
    ASSERT_EQ(UCS_OK, post(r, m_receiver, rbuf, 0x11, RNDV_SIZE));
    EXPECT_EQ(1u, counters(m_receiver)[POST_SW]);
    flush(m_receiver);
    softnic_test_set_mode(dev, SOFTNIC_MODE_MANUAL);
    ASSERT_TRUE(signal_peer('p'));
    ASSERT_TRUE(wait_peer('s'));
    kill_peer();

    ucx_log_capture log;
    softnic_test_set_mode(dev, SOFTNIC_MODE_AUTO);
    ASSERT_TRUE(wait_for([&] { return r.completed > 0; }))
            << "the receive of a dead sender's rendezvous never completed";
    EXPECT_NE(UCS_OK, r.status);
    EXPECT_EQ(1u, counters(m_receiver)[RX_SW_MATCH]);
    EXPECT_TRUE(rbuf.all('r'));
    EXPECT_TRUE(rbuf.guards_intact());
    EXPECT_FALSE(m_receiver.ep_errors.empty())
            << "the failed read did not reach the error handler";
    EXPECT_EQ(0, filler.completed);
    uct_iface_tag_recv_cancel(m_receiver.iface, &filler.ctx, 1);
}

/* An unexpected rendezvous whose sender died before the receiver fetched
 * the data (what UCP does with its rkey): the read fails */
TEST_F(rc_tm_fault, sender_killed_before_an_unexpected_rendezvous_is_fetched)
{
    fork_peer([&]() {
        if (!open_connected(m_sender)) {
            return 2;
        }
        guarded_buffer sbuf(m_component, m_md, RNDV_SIZE, 's');
        test_completion comp;
        if (UCS_PTR_IS_ERR(send_rndv(m_sender.eps[0], 0x11, sbuf, RNDV_SIZE,
                                     comp))) {
            return 3;
        }
        progress();
        return wait_peer('k') ? 0 : 4;
    });

    ASSERT_TRUE(open_connected(m_receiver));
    ASSERT_TRUE(wait_for([&] { return !m_receiver.unexpected.empty(); }));
    unexpected_msg m = m_receiver.unexpected[0];
    ASSERT_TRUE(m.rndv);
    ASSERT_EQ(RNDV_SIZE, m.length);
    kill_peer();

    ucx_log_capture log;
    uct_rkey_bundle_t rkey;
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(m_component, m.rkey_buf.data(), &rkey));
    guarded_buffer rbuf(m_component, m_md, RNDV_SIZE, 'r');
    uct_iov_t iov = rbuf.iov(RNDV_SIZE);
    test_completion get;
    ucs_status_t status = uct_ep_get_zcopy(m_receiver.eps[0], &iov, 1,
                                           m.remote_addr, rkey.rkey,
                                           &get.comp);
    ASSERT_EQ(UCS_INPROGRESS, status);
    ASSERT_TRUE(wait_for([&] { return get.done; }));
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, get.status);
    EXPECT_TRUE(rbuf.all('r'));
    EXPECT_TRUE(rbuf.guards_intact());
    EXPECT_FALSE(m_receiver.ep_errors.empty());
    uct_rkey_release(m_component, &rkey);
}

/* The receiver dies after its device matched the request, before it read
 * the data and sent FIN.  The sender learns it by checking the endpoint (UCP
 * does so for endpoints with peer error handling): the rendezvous completes
 * with an error and the error handler is called. */
TEST_F(rc_tm_fault, receiver_killed_while_the_sender_awaits_fin)
{
    fork_peer([&]() {
        if (!open_connected(m_receiver)) {
            return 2;
        }
        tm_dev_srq_t *srq;
        tm_dev_t *dev = device(m_receiver, &srq);
        guarded_buffer rbuf(m_component, m_md, RNDV_SIZE, 'r');
        tag_recv r;
        if ((post(r, m_receiver, rbuf, 0x22, RNDV_SIZE) != UCS_OK) ||
            !wait_for([&] { return softnic_test_pending_ops(srq) == 0; })) {
            return 3;
        }
        softnic_test_set_mode(dev, SOFTNIC_MODE_MANUAL);
        if (!signal_peer('r')) {
            return 4;
        }
        /* Match the request, but neither read nor answer */
        if (!wait_for([&] {
                softnic_test_step_any_arrival(srq);
                return r.consumed > 0;
            })) {
            return 5;
        }
        return (signal_peer('m') && wait_peer('k')) ? 0 : 6;
    });

    ASSERT_TRUE(open_connected(m_sender));
    ASSERT_TRUE(m_sender.attr.cap.flags & UCT_IFACE_FLAG_EP_CHECK);
    ASSERT_TRUE(wait_peer('r'));
    guarded_buffer sbuf(m_component, m_md, RNDV_SIZE, 's');
    test_completion comp;
    ASSERT_FALSE(UCS_PTR_IS_ERR(send_rndv(m_sender.eps[0], 0x22, sbuf,
                                          RNDV_SIZE, comp)));
    ASSERT_TRUE(wait_peer('m'));
    /* The request was taken: nothing is left in flight on the connection */
    ASSERT_TRUE(wait_for([&] {
        return uct_ep_flush(m_sender.eps[0], 0, NULL) == UCS_OK;
    }));
    kill_peer();

    ucx_log_capture log;
    EXPECT_FALSE(comp.done);
    check_finds_the_receiver_dead(comp, log);
    EXPECT_TRUE(sbuf.all('s'));
    EXPECT_TRUE(sbuf.guards_intact());
}

/* The same, checked while the request may still be in flight for the
 * transport (the test above waits until it is not): the receiver took it,
 * answered with an active message, and died.  The request asks for its
 * completion (moderation 1), and the sender's progress that delivers the
 * answer leaves the send CQ for the next call.  Where the device completed
 * the request before the receiver died (the engine thread does), its
 * completion is a success, and only a probe of the check's own finds the
 * receiver dead: a check with sends in flight once relied on them alone
 * (this test failed in thread mode). */
TEST_F(rc_tm_fault, check_with_a_send_in_flight_probes_the_peer)
{
    fork_unexpected_receiver(true);

    ASSERT_TRUE(open_connected(m_sender, {}, {{"TX_CQ_MODERATION", "1"}}));
    ASSERT_TRUE(wait_peer('r'));
    guarded_buffer sbuf(m_component, m_md, RNDV_SIZE, 's');
    test_completion comp;
    ASSERT_FALSE(UCS_PTR_IS_ERR(send_rndv(m_sender.eps[0], 0x24, sbuf,
                                          RNDV_SIZE, comp)));
    ASSERT_TRUE(wait_peer('u'));
    ASSERT_TRUE(wait_for([&] { return !m_sender.am_received.empty(); }));
    kill_peer();

    ucx_log_capture log;
    check_finds_the_receiver_dead(comp, log);
    EXPECT_TRUE(sbuf.guards_intact());
}

/* The same when the request was unexpected at the receiver (held by its
 * software, as UCP's unexpected queue holds it) */
TEST_F(rc_tm_fault, receiver_killed_holding_an_unexpected_request)
{
    fork_unexpected_receiver(false);

    ASSERT_TRUE(open_connected(m_sender));
    ASSERT_TRUE(m_sender.attr.cap.flags & UCT_IFACE_FLAG_EP_CHECK);
    ASSERT_TRUE(wait_peer('r'));
    guarded_buffer sbuf(m_component, m_md, RNDV_SIZE, 's');
    test_completion comp;
    ASSERT_FALSE(UCS_PTR_IS_ERR(send_rndv(m_sender.eps[0], 0x23, sbuf,
                                          RNDV_SIZE, comp)));
    ASSERT_TRUE(wait_peer('u'));
    /* The request was taken: nothing is left in flight on the connection
     * (a NIC on its own thread acknowledges it later than the peer's
     * software sees it), so only the check's own probe can find the peer
     * dead */
    ASSERT_TRUE(wait_for([&] {
        return uct_ep_flush(m_sender.eps[0], 0, NULL) == UCS_OK;
    }));
    kill_peer();

    ucx_log_capture log;
    check_finds_the_receiver_dead(comp, log);
    EXPECT_TRUE(sbuf.guards_intact());

    /* Nothing waits for the dead peer: a flush answers at once, with the
     * connection's error */
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, uct_iface_flush(m_sender.iface, 0,
                                                        NULL));
}

/* A check of a live peer succeeds and changes nothing */
TEST_F(rc_tm_fault, endpoint_check_of_a_live_peer)
{
    open();
    ASSERT_TRUE(m_sender.attr.cap.flags & UCT_IFACE_FLAG_EP_CHECK);
    for (int i = 0; i < 100; ++i) {
        ASSERT_EQ(UCS_OK, uct_ep_check(m_sender.eps[0], 0, NULL));
        progress();
    }
    flush(m_sender);
    EXPECT_TRUE(m_sender.ep_errors.empty());
    EXPECT_TRUE(m_receiver.am_received.empty());
    EXPECT_TRUE(m_receiver.unexpected.empty());
    std::vector<char> data(100, 'd');
    ASSERT_EQ(100, uct_ep_am_bcopy(m_sender.eps[0], 1, pack_vector, &data, 0));
    ASSERT_TRUE(wait_for([&] { return m_receiver.am_received.size() == 1; }));
}
