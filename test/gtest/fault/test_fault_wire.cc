/*
 * Faults at the UCT level: malformed wire headers from a peer that speaks
 * to the device directly (unknown opcodes, truncated headers, a rendezvous
 * longer than its registration, FINs for unknown operations, unknown
 * active message ids, messages shorter than their header).  The fixture
 * and what every test checks: fault_fixture.h and test_fault.cc.
 */
#include "fault_fixture.h"

/* ----- malformed wire headers from a peer ----- */

/* A tagged message with an opcode TMH does not have: dropped with an error
 * message, the receive posted for its tag untouched, matching unharmed */
TEST_F(rc_tm_fault, unknown_tmh_opcode_is_dropped)
{
    open_with_raw_peer();
    guarded_buffer rbuf(m_component, m_md, 4096, 'r');
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, m_receiver, rbuf, 0x44, 4096));
    flush(m_receiver);

    ucx_log_capture log;
    ASSERT_EQ(0, m_raw.send(tm_msg(0x7f, 0x44, 0, std::string(100, 'x'))));
    ASSERT_TRUE(wait_for([&] { return m_raw.sends_done(); }));
    ASSERT_TRUE(wait_for([&] { return log.has("malformed"); }));
    EXPECT_EQ(0, r.completed);
    EXPECT_TRUE(rbuf.all('r'));
    EXPECT_EQ(0u, counters(m_receiver)[RX_EAGER_UNEXP]);
    EXPECT_TRUE(m_receiver.unexpected.empty());

    /* The device is still in phase: the next message matches in it */
    ASSERT_NO_FATAL_FAILURE(expect_eager_matches_in_device(r, 0x44));
    EXPECT_TRUE(rbuf.guards_intact());
}

/* A rendezvous request too short for its RVH: dropped, not counted as
 * unexpected (the device did not count it either) */
TEST_F(rc_tm_fault, truncated_rendezvous_header_is_dropped)
{
    open_with_raw_peer();
    guarded_buffer rbuf(m_component, m_md, 4096, 'r');
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, m_receiver, rbuf, 0x45, 4096));
    flush(m_receiver);

    ucx_log_capture log;
    std::string header = rvh(0x1000, 0x10001, 4096).substr(0, RVH - 4);
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_RNDV, 0x45, 1, header)));
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_RNDV, 0x46, 1, "")));
    ASSERT_TRUE(wait_for([&] { return m_raw.sends_done(); }));
    ASSERT_TRUE(wait_for([&] { return log.count() >= 2; }));
    EXPECT_TRUE(log.has("malformed"));
    EXPECT_EQ(0, r.completed);
    EXPECT_TRUE(rbuf.all('r'));
    EXPECT_EQ(0u, counters(m_receiver)[RX_RNDV_UNEXP]);

    ASSERT_NO_FATAL_FAILURE(expect_eager_matches_in_device(r, 0x45));
}

/* A rendezvous whose RVH claims more bytes than the sender registered: the
 * device's read fails, the receive reports it, no byte of its buffer or
 * around it changes */
TEST_F(rc_tm_fault, rendezvous_longer_than_the_sender_registered)
{
    open_with_raw_peer();
    std::vector<char> exposed(3 * 4096, 'e');
    tm_dev_mr_t *mr;
    ASSERT_EQ(0, tm_dev_reg_mr(m_raw.dev, exposed.data() + 4096, 4096,
                               IBV_ACCESS_REMOTE_READ, &mr));
    guarded_buffer rbuf(m_component, m_md, 16384, 'r');
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, m_receiver, rbuf, 0x47, 16384));
    flush(m_receiver);

    ucx_log_capture log;
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_RNDV, 0x47, 1,
                                   rvh((uintptr_t)exposed.data() + 4096,
                                       mr->rkey, 8192))));
    ASSERT_TRUE(wait_for([&] { return r.completed > 0; }));
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, r.status);
    EXPECT_TRUE(rbuf.all('r'));
    EXPECT_TRUE(rbuf.guards_intact());
    EXPECT_EQ(std::vector<char>(3 * 4096, 'e'), exposed);
    tm_dev_dereg_mr(m_raw.dev, mr);
}

/* FINs naming no rendezvous (an index past the table, a generation not in
 * use), and a FIN naming it but coming from another peer than the one the
 * request went to, are ignored: the rendezvous is neither completed nor
 * harmed */
TEST_F(rc_tm_fault, fin_for_an_unknown_operation_is_ignored)
{
    open();
    guarded_buffer sbuf(m_component, m_md, 65536, 's');
    test_completion comp;
    ucs_status_ptr_t op = send_rndv(m_sender.eps[0], 0x48, sbuf, 65536, comp);
    ASSERT_FALSE(UCS_PTR_IS_ERR(op));
    ASSERT_TRUE(wait_for([&] { return !m_receiver.unexpected.empty(); }));

    /* The first rendezvous of an interface is slot 0, generation 1 */
    const uint32_t op_id = 1u << 16;
    m_raw.open(m_sender.iface, m_sender.attr);
    std::string fin_rvh = rvh(sbuf.addr(), sbuf.rkey(), 65536);
    ucx_log_capture log;
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_FIN, 0x48, 0xffff, fin_rvh)));
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_FIN, 0x48, 2u << 16, fin_rvh)));
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_FIN, 0, 0x7fffffff, "")));
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_FIN, 0x48, op_id, fin_rvh)));
    ASSERT_TRUE(wait_for([&] { return m_raw.sends_done(); }));
    ASSERT_TRUE(wait_for([&] { return log.has("which it was not sent to"); }))
        << "the FIN from another peer was not refused";
    for (int i = 0; i < 100; ++i) {
        progress();
    }
    EXPECT_FALSE(comp.done) << "a FIN for another operation completed it";

    /* UCP fetches an unexpected rendezvous itself and cancels the
     * operation; a FIN for it arriving later has the old generation */
    ASSERT_EQ(UCS_OK, uct_ep_tag_rndv_cancel(m_sender.eps[0], op));
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_FIN, 0x48, op_id, fin_rvh)));
    ASSERT_TRUE(wait_for([&] { return m_raw.sends_done(); }));
    for (int i = 0; i < 100; ++i) {
        progress();
    }
    EXPECT_FALSE(comp.done);
    EXPECT_TRUE(sbuf.all('s'));
    EXPECT_TRUE(sbuf.guards_intact());

    /* Rendezvous work as before */
    guarded_buffer rbuf(m_component, m_md, 65536, 'r');
    tag_recv r;
    test_completion comp2;
    ASSERT_EQ(UCS_OK, post(r, m_receiver, rbuf, 0x49, 65536));
    sbuf.pattern(5);
    ASSERT_FALSE(UCS_PTR_IS_ERR(send_rndv(m_sender.eps[0], 0x49, sbuf, 65536,
                                          comp2)));
    ASSERT_TRUE(wait_for([&] { return comp2.done && r.completed; }));
    EXPECT_EQ(UCS_OK, comp2.status);
    EXPECT_EQ(UCS_OK, r.status);
    EXPECT_TRUE(rbuf.has_pattern(5));
}

/* An active message with an id past UCT_AM_ID_MAX: dropped with an error
 * message, no handler called */
TEST_F(rc_tm_fault, active_message_with_an_unknown_id_is_dropped)
{
    open_with_raw_peer();

    ucx_log_capture log;
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_NO_TAG, 0, 200,
                                   std::string(64, 'a'))));
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_NO_TAG, 0, UCT_AM_ID_MAX, "")));
    /* an id read as 32 bits, not as its low 8 (id 3 below), and the
     * transport's control id without its op id (issue 36, item 8) */
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_NO_TAG, 0, 0x103, "x")));
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_NO_TAG, 0, 0x80000000u, "")));
    ASSERT_TRUE(wait_for([&] { return m_raw.sends_done(); }));
    ASSERT_TRUE(wait_for([&] { return log.count() >= 4; }));
    EXPECT_TRUE(log.has("malformed active message"));
    EXPECT_TRUE(m_receiver.am_received.empty());

    /* A valid id from the same peer is delivered */
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_NO_TAG, 0, 3, "hello")));
    ASSERT_TRUE(wait_for([&] { return m_receiver.am_received.size() == 1; }));
    EXPECT_EQ(std::string("hello"),
              std::string(m_receiver.am_received[0].begin(),
                          m_receiver.am_received[0].end()));
}

/* A message shorter than the tag-matching header */
TEST_F(rc_tm_fault, message_shorter_than_its_header_is_dropped)
{
    open_with_raw_peer();

    ucx_log_capture log;
    ASSERT_EQ(0, m_raw.send(std::string(6, 'z')));
    ASSERT_TRUE(wait_for([&] { return m_raw.sends_done(); }));
    ASSERT_TRUE(wait_for([&] { return log.has("shorter than its header"); }));
    EXPECT_TRUE(m_receiver.am_received.empty());
    EXPECT_TRUE(m_receiver.unexpected.empty());
}
