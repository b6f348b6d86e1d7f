/*
 * Faults the receive CQ reports (issue 36): a completion the provider could
 * not parse (item 3), and a responder error on a connection's send QP
 * (item 5).  The fixture: fault_fixture.h.
 */
#include "fault_fixture.h"

#include <dev/verbs/verbs_dev.h>
#include <softnic/softnic_test.h>

namespace {

/* A connection address whose two QPs trade places: the peer then connects
 * its send QP to our send QP, and its receive-only QP to ours */
void swap_qps(std::vector<char> &addr)
{
    tm_verbs_conn_addr_t a;

    ASSERT_GE(addr.size(), sizeof(a));
    memcpy(&a, addr.data(), sizeof(a));
    std::swap(a.qpn, a.rx_qpn);
    std::swap(a.psn, a.rx_psn);
    memcpy(addr.data(), &a, sizeof(a));
}

} // namespace

/* An endpoint pair whose send QPs are connected to each other: the
 * sender's messages land on the receiver's send QP, as a misbehaving peer
 * may make them (rc_tm connects the peer's send QP to our receive-only QP) */
class rc_tm_fault_cq : public rc_tm_fault {
protected:
    void connect_crossed(uct_ep_h *ep_s, uct_ep_h *ep_r)
    {
        uct_ep_params_t params = {};
        params.field_mask      = UCT_EP_PARAM_FIELD_IFACE;
        params.iface           = m_sender.iface;
        ASSERT_EQ(UCS_OK, uct_ep_create(&params, ep_s));
        m_sender.eps.push_back(*ep_s);
        params.iface           = m_receiver.iface;
        ASSERT_EQ(UCS_OK, uct_ep_create(&params, ep_r));
        m_receiver.eps.push_back(*ep_r);

        std::vector<char> dev_s(m_sender.attr.device_addr_len);
        std::vector<char> dev_r(m_receiver.attr.device_addr_len);
        std::vector<char> addr_s(m_sender.attr.ep_addr_len);
        std::vector<char> addr_r(m_receiver.attr.ep_addr_len);
        uct_iface_get_device_address(m_sender.iface,
                                     (uct_device_addr_t*)dev_s.data());
        uct_iface_get_device_address(m_receiver.iface,
                                     (uct_device_addr_t*)dev_r.data());
        ASSERT_EQ(UCS_OK, uct_ep_get_address(*ep_s,
                                             (uct_ep_addr_t*)addr_s.data()));
        ASSERT_EQ(UCS_OK, uct_ep_get_address(*ep_r,
                                             (uct_ep_addr_t*)addr_r.data()));
        ASSERT_NO_FATAL_FAILURE(swap_qps(addr_s));
        ASSERT_NO_FATAL_FAILURE(swap_qps(addr_r));
        ASSERT_EQ(UCS_OK, uct_ep_connect_to_ep(*ep_s,
                                (uct_device_addr_t*)dev_r.data(),
                                (uct_ep_addr_t*)addr_r.data()));
        ASSERT_EQ(UCS_OK, uct_ep_connect_to_ep(*ep_r,
                                (uct_device_addr_t*)dev_s.data(),
                                (uct_ep_addr_t*)addr_s.data()));
    }

    /* Short active messages ep takes before it runs out of send credits,
     * with no progress in between */
    static int sends_until_no_resource(uct_ep_h ep, int bound)
    {
        uint64_t hdr = 0;
        int n        = 0;
        ucs_status_t status;

        while ((n < bound) &&
               ((status = uct_ep_am_short(ep, 1, hdr, NULL, 0)) == UCS_OK)) {
            ++n;
        }
        EXPECT_TRUE((n == bound) || (status == UCS_ERR_NO_RESOURCE))
                << ucs_status_string(status);
        return n;
    }
};

/* Item 3: mlx5's poll returns CQ_POLL_ERR (-2) for a CQE it cannot parse,
 * and that CQE is gone.  The interface neither takes the error for a count
 * of completions nor reads entries that were never written: it says so,
 * and fails every connection it has (which one lost what cannot be told).
 * What came before it is delivered, later completions still count: a new
 * connection works, until the next such CQE fails it too.  The first CQE
 * fails ibv_next_poll (after a message, in one batch), the second
 * ibv_start_poll. */
TEST_F(rc_tm_fault_cq, completion_the_provider_cannot_parse_fails_connections)
{
    open();
    tm_dev_srq_t *srq;
    tm_dev_t *dev = device(m_receiver, &srq);
    std::vector<char> data(100, 'n');
    ucx_log_capture log;

    softnic_test_set_mode(dev, SOFTNIC_MODE_MANUAL);
    ASSERT_EQ(100, uct_ep_am_bcopy(m_sender.eps[0], 1, pack_vector, &data,
                                   0));
    ASSERT_TRUE(wait_for([&] {
        return softnic_test_step_any_arrival(srq) == 0;
    }));
    softnic_test_push_unparseable_cqe(tm_dev_ibv_srq(srq));
    softnic_test_set_mode(dev, SOFTNIC_MODE_AUTO);
    ASSERT_TRUE(wait_for([&] { return !m_receiver.ep_errors.empty(); }))
            << "the receiver's connection did not fail" << log.text();
    EXPECT_TRUE(log.has("could not parse")) << log.text();
    EXPECT_EQ(UCS_ERR_CONNECTION_RESET, m_receiver.ep_errors[0]);
    EXPECT_EQ(1u, m_receiver.ep_errors.size());
    ASSERT_EQ(1u, m_receiver.am_received.size()) << "the message before it";
    EXPECT_EQ(data, m_receiver.am_received[0]);

    /* The interface goes on */
    ASSERT_NO_FATAL_FAILURE(connect(m_sender, m_receiver));
    ASSERT_EQ(100, uct_ep_am_bcopy(m_sender.eps[1], 1, pack_vector, &data,
                                   0));
    ASSERT_TRUE(wait_for([&] { return m_receiver.am_received.size() == 2; }));
    EXPECT_EQ(1u, m_receiver.ep_errors.size());

    softnic_test_push_unparseable_cqe(tm_dev_ibv_srq(srq));
    ASSERT_TRUE(wait_for([&] { return m_receiver.ep_errors.size() == 2; }))
            << "the new connection did not fail" << log.text();
    EXPECT_EQ(2u, m_receiver.am_received.size());
}

/* Item 5: a responder error on a connection's send QP (here: a rendezvous
 * there, which only a receive-only QP serves) comes on the SRQ's CQ with
 * the SRQ buffer's wr_id, as mlx5 gives srq->wrid[wqe_counter] and frees
 * that WQE.  The interface takes that buffer back and counts it used,
 * whatever the syndrome, and does not take it for a send's number: the
 * send credits of the interface are what they were, and the SRQ is full
 * again at the next refill (every buffer of the pool is needed for that:
 * UCX_RC_TM_RX_MAX_BUFS is the SRQ's depth). */
TEST_F(rc_tm_fault_cq, responder_error_on_a_send_qp_gives_back_its_buffer)
{
    const int depth = 33, tx_len = 64;
    const config_t tx_config = {{"TX_QUEUE_LEN", std::to_string(tx_len)}};
    const config_t rx_config = {{"TX_QUEUE_LEN", std::to_string(tx_len)},
                                {"RX_MAX_BUFS", std::to_string(depth)},
                                {"RX_BUFS_GROW", std::to_string(depth)}};
    open({{"SRQ_DEPTH", std::to_string(depth)}}, tx_config, &rx_config);
    tm_dev_srq_t *srq;
    device(m_receiver, &srq);
    struct ibv_srq *ibv_srq = tm_dev_ibv_srq(srq);
    ASSERT_EQ((unsigned)depth, softnic_test_free_rbufs(ibv_srq));

    uct_ep_h ep_s, ep_r;
    ASSERT_NO_FATAL_FAILURE(connect_crossed(&ep_s, &ep_r));
    ucx_log_capture log;
    guarded_buffer sbuf(m_component, m_md, 4096, 's');
    test_completion comp;
    ASSERT_FALSE(UCS_PTR_IS_ERR(send_rndv(ep_s, 0x55, sbuf, 4096, comp)));
    ASSERT_TRUE(wait_for([&] { return !m_receiver.ep_errors.empty(); }))
            << "the receiver's crossed connection did not fail" << log.text();
    EXPECT_TRUE(log.has("receive side of qp")) << log.text();
    EXPECT_EQ(1u, m_receiver.ep_errors.size()) << "only the crossed one";
    EXPECT_EQ((unsigned)depth - 1, softnic_test_free_rbufs(ibv_srq));

    /* Send credits: the interface's (TX_QUEUE_LEN) bound a healthy
     * connection, as before */
    EXPECT_EQ(tx_len, sends_until_no_resource(m_receiver.eps[0], 4 * tx_len));
    ASSERT_TRUE(wait_for([&] {
        return m_sender.am_received.size() == (size_t)tx_len;
    }));

    /* The SRQ's buffers: full again once the interface refills it */
    std::vector<char> data(64, 'a');
    bool full = false;
    for (int i = 0; (i < 2 * depth) && !full; ++i) {
        ASSERT_EQ(64, uct_ep_am_bcopy(m_sender.eps[0], 1, pack_vector, &data,
                                      0));
        ASSERT_TRUE(wait_for([&] {
            return m_receiver.am_received.size() == (size_t)i + 1;
        }));
        full = (softnic_test_free_rbufs(ibv_srq) == (unsigned)depth);
    }
    EXPECT_TRUE(full) << "the SRQ holds " << softnic_test_free_rbufs(ibv_srq)
                      << " of " << depth << " buffers";
    destroy_eps(m_sender);      /* the rendezvous' completion is ours */
}

/* Item 4: on mlx5 an overrun CQ just delivers nothing more (the provider's
 * poll only checks ownership bits); IBV_EVENT_CQ_ERR on the async events
 * is the only sign.  The interface reads those events from progress, now
 * and then, and fails every connection it has with a clear error instead
 * of leaving its requests waiting forever.  Here the receive CQ overruns
 * before a message arrives: the message is lost, and the receiver's
 * connection fails all the same. */
TEST_F(rc_tm_fault_cq, overrun_receive_cq_fails_every_connection)
{
    open();
    tm_dev_srq_t *srq;
    device(m_receiver, &srq);
    std::vector<char> data(100, 'o');
    ucx_log_capture log;

    softnic_test_overrun_cq(tm_dev_ibv_srq(srq));
    ASSERT_EQ(100, uct_ep_am_bcopy(m_sender.eps[0], 1, pack_vector, &data,
                                   0));
    ASSERT_TRUE(wait_for([&] { return !m_receiver.ep_errors.empty(); }))
            << "the receiver's connection did not fail" << log.text();
    EXPECT_TRUE(log.has("IBV_EVENT_CQ_ERR")) << log.text();
    EXPECT_EQ(UCS_ERR_IO_ERROR, m_receiver.ep_errors[0]);
    EXPECT_TRUE(m_receiver.am_received.empty()) << "lost with the CQ";
    EXPECT_TRUE(m_sender.ep_errors.empty()) << "its own CQs are fine";

    /* A connection made since fails too: the CQ delivers nothing */
    ASSERT_NO_FATAL_FAILURE(connect(m_sender, m_receiver));
    ASSERT_TRUE(wait_for([&] { return m_receiver.ep_errors.size() == 2; }))
            << "the new connection did not fail" << log.text();
}

/* Item 4: IBV_EVENT_DEVICE_FATAL fails everything of the device, as UCX's
 * ib device fails the interfaces' endpoints then (UCX 1.18
 * uct_ib_device_async_event_dispatch_fatal): an operation still owed
 * completes with the error, and both interfaces (one device here) hear of
 * it. */
TEST_F(rc_tm_fault_cq, device_fatal_completes_what_is_owed_with_an_error)
{
    open();
    tm_dev_t *dev = device(m_sender);
    guarded_buffer sbuf(m_component, m_md, 256, 'f');
    uct_iov_t iov = sbuf.iov(256);
    test_completion comp;
    ucx_log_capture log;

    /* the message waits for the receiver's NIC, so its send is owed */
    softnic_test_set_mode(dev, SOFTNIC_MODE_MANUAL);
    ASSERT_EQ(UCS_INPROGRESS, uct_ep_am_zcopy(m_sender.eps[0], 1, NULL, 0,
                                              &iov, 1, 0, &comp.comp));
    softnic_test_port_t port = {};
    port.mtu = IBV_MTU_4096;
    ASSERT_EQ(0, softnic_test_port_event(tm_dev_ibv_context(dev), &port,
                                         IBV_EVENT_DEVICE_FATAL));
    ASSERT_TRUE(wait_for([&] { return comp.done != 0; }))
            << "the send is still owed" << log.text();
    EXPECT_EQ(UCS_ERR_IO_ERROR, comp.status);
    EXPECT_TRUE(log.has("IBV_EVENT_DEVICE_FATAL")) << log.text();
    ASSERT_TRUE(wait_for([&] {
        return !m_sender.ep_errors.empty() && !m_receiver.ep_errors.empty();
    })) << log.text();
    EXPECT_EQ(UCS_ERR_IO_ERROR, m_sender.ep_errors[0]);
    EXPECT_EQ(UCS_ERR_IO_ERROR, m_receiver.ep_errors[0]);
}
