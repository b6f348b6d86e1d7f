/*
 * Faults at the UCT level: receive resources exhausted (the smallest SRQ
 * under a flood, descriptors held by the user, one list operation at a
 * time) and invalid rkeys (stale, out of range, a rendezvous with a stale
 * one).  The fixture and what every test checks: fault_fixture.h and
 * test_fault.cc.
 */
#include "fault_fixture.h"

/* ----- receive resources exhausted ----- */

/* The fewest untagged buffers (33), a flood of active messages and
 * unexpected tagged messages while the user keeps every descriptor: the
 * device waits for buffers (RNR), nothing is lost, every sender's order
 * holds */
TEST_F(rc_tm_fault, smallest_srq_under_a_flood)
{
    open({{"SRQ_DEPTH", "33"}});
    m_receiver.keep_am = true;
    const int count    = 2000;
    for (int i = 0; i < count; ++i) {
        std::vector<char> data(64 + i % 1000, (char)i);
        memcpy(data.data(), &i, sizeof(i));
        ssize_t ret;
        ASSERT_TRUE(wait_for([&] {
            ret = (i % 2) ?
                  uct_ep_am_bcopy(m_sender.eps[0], 1, pack_vector, &data, 0) :
                  uct_ep_tag_eager_bcopy(m_sender.eps[0], 0x500 + i, 0,
                                         pack_vector, &data, 0);
            return ret != UCS_ERR_NO_RESOURCE;
        }));
        ASSERT_EQ((ssize_t)data.size(), ret);
    }
    ASSERT_TRUE(wait_for([&] {
        return m_receiver.am_received.size() + m_receiver.unexpected.size() ==
               (size_t)count;
    }));
    for (int i = 1, k = 0; i < count; i += 2, ++k) {
        int seq;
        memcpy(&seq, m_receiver.am_received[k].data(), sizeof(seq));
        ASSERT_EQ(i, seq) << "active message " << k;
    }
    for (int i = 0, k = 0; i < count; i += 2, ++k) {
        EXPECT_EQ((uint64_t)(0x500 + i), m_receiver.unexpected[k].tag);
    }
}

/* Receive buffers limited (UCX_RC_TM_RX_MAX_BUFS) and all of them held by
 * the user: the device waits; once the user returns them, the SRQ is
 * refilled and the rest arrives */
TEST_F(rc_tm_fault, held_descriptors_returned_refill_the_srq)
{
    open({{"SRQ_DEPTH", "33"}}, {{"RX_MAX_BUFS", "8"}, {"RX_BUFS_GROW", "8"}});
    m_receiver.keep_am = true;
    const int count    = 40;
    std::vector<char> data(1000, 'a');
    for (int i = 0; i < count; ++i) {
        memcpy(data.data(), &i, sizeof(i));
        ssize_t ret;
        ASSERT_TRUE(wait_for([&] {
            ret = uct_ep_am_bcopy(m_sender.eps[0], 1, pack_vector, &data, 0);
            return ret != UCS_ERR_NO_RESOURCE;
        }));
    }
    ASSERT_TRUE(wait_for([&] { return m_receiver.am_received.size() >= 8; }));
    /* Polling cannot make more arrive: every buffer is held */
    for (int i = 0; i < 1000; ++i) {
        progress();
    }
    ASSERT_EQ(8u, m_receiver.am_received.size());

    for (void *desc : m_receiver.am_kept) {
        uct_iface_release_desc((char*)desc - m_rx_headroom);
    }
    m_receiver.am_kept.clear();
    m_receiver.keep_am = false;
    ASSERT_TRUE(wait_for([&] {
        return m_receiver.am_received.size() == (size_t)count;
    })) << "returned descriptors did not go back to the SRQ";
    for (int i = 0; i < count; ++i) {
        int seq;
        memcpy(&seq, m_receiver.am_received[i].data(), sizeof(seq));
        EXPECT_EQ(i, seq);
    }
}

/* One list operation at a time (UCX_RC_TM_LIST_MAX_OPS=1): receives,
 * cancels and DELs queue behind each other; every receive still gets the
 * right message, every cancel its answer */
TEST_F(rc_tm_fault, one_list_operation_at_a_time)
{
    open({{"LIST_MAX_OPS", "1"}, {"LIST_SIZE", "4"}});
    const int count = 200;
    std::vector<std::unique_ptr<guarded_buffer>> bufs;
    std::vector<tag_recv> recvs(count);
    std::vector<bool> canceled(count, false);
    for (int i = 0; i < count; ++i) {
        bufs.emplace_back(new guarded_buffer(m_component, m_md, 256, 0));
        ASSERT_EQ(UCS_OK, post(recvs[i], m_receiver, *bufs[i], 0x700 + i % 4,
                               256));
        if (i % 7 == 3) {
            ASSERT_EQ(UCS_OK, uct_iface_tag_recv_cancel(m_receiver.iface,
                                                        &recvs[i].ctx, 0));
            canceled[i] = true;
        }
    }

    /* Per tag, messages numbered in sending order; receives of a tag take
     * them in posting order, skipping the canceled ones */
    std::vector<int> next_seq(4, 0), sent(4, 0);
    for (int i = 0; i < count; ++i) {
        if (!canceled[i]) {
            std::vector<char> data(16);
            int tag = i % 4, seq = sent[tag]++;
            memcpy(data.data(), &seq, sizeof(seq));
            ssize_t ret;
            ASSERT_TRUE(wait_for([&] {
                ret = uct_ep_tag_eager_bcopy(m_sender.eps[0], 0x700 + tag, 0,
                                             pack_vector, &data, 0);
                return ret != UCS_ERR_NO_RESOURCE;
            }));
        }
    }
    ASSERT_TRUE(wait_for([&] {
        for (const tag_recv &r : recvs) {
            if (!r.completed) {
                return false;
            }
        }
        return true;
    }));
    for (int i = 0; i < count; ++i) {
        if (canceled[i]) {
            EXPECT_EQ(UCS_ERR_CANCELED, recvs[i].status) << i;
            continue;
        }
        int seq;
        memcpy(&seq, bufs[i]->data(), sizeof(seq));
        EXPECT_EQ(UCS_OK, recvs[i].status) << i;
        EXPECT_EQ(next_seq[i % 4]++, seq) << "receive " << i;
        EXPECT_TRUE(bufs[i]->guards_intact());
    }
    flush(m_receiver);
}


/* ----- invalid rkeys ----- */

/* Keys of a deregistered region: get and put fail, nothing is touched on
 * either side.  Without the registration cache, which keeps a region
 * registered after deregistration until its memory is unmapped (that case:
 * test_rcache.cc) */
TEST_F(rc_tm_fault, stale_rkey_after_deregistration)
{
    open({{"RCACHE", "no"}});
    guarded_buffer remote(m_component, m_md, 8192, 'R');
    guarded_buffer local(m_component, m_md, 8192, 'L');
    uint64_t stale = remote.rkey();
    remote.dereg();

    ucx_log_capture log;
    uct_iov_t iov = local.iov(4096);
    test_completion get;
    ASSERT_EQ(UCS_INPROGRESS, uct_ep_get_zcopy(m_sender.eps[0], &iov, 1,
                                               remote.addr(), stale,
                                               &get.comp));
    ASSERT_TRUE(wait_for([&] { return get.done; }));
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, get.status);
    EXPECT_TRUE(local.all('L'));

    /* The connection failed with it (as on RC); a new one for the put */
    connect(m_sender, m_receiver);
    test_completion put;
    ASSERT_EQ(UCS_INPROGRESS, uct_ep_put_zcopy(m_sender.eps.back(), &iov, 1,
                                               remote.addr(), stale,
                                               &put.comp));
    ASSERT_TRUE(wait_for([&] { return put.done; }));
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, put.status);
    EXPECT_TRUE(remote.all('R'));
    EXPECT_TRUE(remote.guards_intact());
    EXPECT_TRUE(local.guards_intact());
    EXPECT_EQ(2u, m_sender.ep_errors.size());
}

/* A valid key, but an access past either end of its region, and a key that
 * was never issued for a put */
TEST_F(rc_tm_fault, rkey_out_of_range_or_wrong)
{
    open();
    guarded_buffer remote(m_component, m_md, 8192, 'R');
    guarded_buffer local(m_component, m_md, 8192, 'L');

    ucx_log_capture log;
    struct {
        uint64_t addr;
        size_t   length;
        uint64_t rkey;
        bool     put;
    } cases[] = {
        {remote.addr() + 4096, 8192, remote.rkey(), false}, /* past the end */
        {remote.addr() - 64,   128,  remote.rkey(), false}, /* before start */
        {remote.addr() + 8192, 1,    remote.rkey(), true},
        {remote.addr(),        64,   remote.rkey() ^ 0x5a5a0000, true},
    };
    for (const auto &c : cases) {
        connect(m_sender, m_receiver);
        uct_iov_t iov = local.iov(c.length);
        test_completion comp;
        ucs_status_t status = c.put ?
                uct_ep_put_zcopy(m_sender.eps.back(), &iov, 1, c.addr, c.rkey,
                                 &comp.comp) :
                uct_ep_get_zcopy(m_sender.eps.back(), &iov, 1, c.addr, c.rkey,
                                 &comp.comp);
        ASSERT_EQ(UCS_INPROGRESS, status);
        ASSERT_TRUE(wait_for([&] { return comp.done; }));
        EXPECT_EQ(UCS_ERR_INVALID_ADDR, comp.status);
    }
    EXPECT_TRUE(remote.all('R'));
    EXPECT_TRUE(local.all('L'));
    EXPECT_TRUE(remote.guards_intact());
    EXPECT_TRUE(local.guards_intact());
}

/* The sender deregisters its buffer while its rendezvous request is on the
 * way: the receiver's device read fails, the receive reports it, its buffer
 * is untouched, no FIN is sent */
TEST_F(rc_tm_fault, rendezvous_with_a_stale_rkey)
{
    open({{"RCACHE", "no"}});   /* a cached region stays registered */
    tm_dev_srq_t *srq;
    tm_dev_t *dev = device(m_receiver, &srq);
    guarded_buffer rbuf(m_component, m_md, 65536, 'r');
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, m_receiver, rbuf, 0x33, 65536));
    /* listed in the device (an iface flush does not wait for that): the
     * device matches it and reads */
    ASSERT_TRUE(wait_for([&] { return softnic_test_listed_tags(srq) == 1; }));

    softnic_test_set_mode(dev, SOFTNIC_MODE_MANUAL);
    test_completion comp;
    {
        guarded_buffer sbuf(m_component, m_md, 65536, 's');
        ASSERT_FALSE(UCS_PTR_IS_ERR(send_rndv(m_sender.eps[0], 0x33, sbuf,
                                              65536, comp)));
        sbuf.dereg();
    }

    ucx_log_capture log;
    softnic_test_set_mode(dev, SOFTNIC_MODE_AUTO);
    ASSERT_TRUE(wait_for([&] { return r.completed > 0; }));
    /* learned from the receive-only QP's state (its requester CQE is never
     * polled: docs/verbs-device.md row 22), which does not say why */
    EXPECT_EQ(UCS_ERR_IO_ERROR, r.status);
    EXPECT_TRUE(rbuf.all('r'));
    EXPECT_TRUE(rbuf.guards_intact());
    for (int i = 0; i < 1000; ++i) {
        progress();
    }
    EXPECT_FALSE(comp.done) << "FIN for a rendezvous that failed";
    destroy_eps(m_sender);
    EXPECT_TRUE(comp.done) << "the endpoint's destruction completes it";
    EXPECT_EQ(UCS_ERR_CANCELED, comp.status);
}

/* A matched rendezvous the NIC reads names no QP at its MATCH (a CQE
 * without a packet: QP number 0, docs/verbs-device.md row 7).  When a
 * receive-only QP is found in error, the receives of unknown QP fail with
 * the ones known to be its own, collateral included: here one of a
 * healthy connection, whose final completion, when it comes, is dropped
 * (no second completion).  The failed QP's endpoint fails, not the other. */
TEST_F(rc_tm_fault, failed_qp_fails_the_receives_of_unknown_qp)
{
    open({{"RCACHE", "no"}});
    connect(m_sender, m_receiver);          /* a second connection */
    tm_dev_srq_t *srq;
    tm_dev_t *dev = device(m_receiver, &srq);
    guarded_buffer rbad(m_component, m_md, 65536, 'r');
    guarded_buffer rgood(m_component, m_md, 65536, 'g');
    guarded_buffer sgood(m_component, m_md, 65536, 'G');
    tag_recv bad, good;
    ASSERT_EQ(UCS_OK, post(bad, m_receiver, rbad, 0x33, 65536));
    ASSERT_EQ(UCS_OK, post(good, m_receiver, rgood, 0x44, 65536));
    ASSERT_TRUE(wait_for([&] { return softnic_test_listed_tags(srq) == 2; }));

    softnic_test_set_mode(dev, SOFTNIC_MODE_MANUAL);
    test_completion cbad, cgood;
    scope_exit cancel_sends{[&] { destroy_eps(m_sender); }};
    {
        guarded_buffer sbuf(m_component, m_md, 65536, 's');
        ASSERT_FALSE(UCS_PTR_IS_ERR(send_rndv(m_sender.eps[0], 0x33, sbuf,
                                              65536, cbad)));
        sbuf.dereg();
    }
    /* the failing read's request is matched first, so read first */
    ASSERT_TRUE(wait_for([&] {
        return softnic_test_step_any_arrival(srq) == 0;
    }));
    ASSERT_FALSE(UCS_PTR_IS_ERR(send_rndv(m_sender.eps[1], 0x44, sgood,
                                          65536, cgood)));
    ASSERT_TRUE(wait_for([&] {
        return softnic_test_step_any_arrival(srq) == 0;
    }));
    ASSERT_TRUE(wait_for([&] { return good.consumed && bad.consumed; }));
    ASSERT_EQ(2u, softnic_test_pending_data(srq)) << "MATCH only, both";

    ucx_log_capture log;
    ASSERT_EQ(0, softnic_test_step_data(srq));   /* the read fails */
    ASSERT_EQ(1u, softnic_test_pending_data(srq));
    ASSERT_TRUE(wait_for([&] { return bad.completed > 0; }))
            << "the failed QP was never found: its receive has QP 0";
    EXPECT_EQ(UCS_ERR_IO_ERROR, bad.status);
    EXPECT_EQ(1, good.completed) << "collateral: its QP is not known";
    EXPECT_EQ(UCS_ERR_IO_ERROR, good.status);
    EXPECT_EQ(1u, m_receiver.ep_errors.size()) << "the failed QP's only";

    /* the healthy connection's NIC finishes its read: the sender has its
     * FIN, the receive no second completion */
    softnic_test_set_mode(dev, SOFTNIC_MODE_AUTO);
    ASSERT_TRUE(wait_for([&] { return cgood.done > 0; }));
    EXPECT_EQ(UCS_OK, cgood.status);
    ASSERT_TRUE(wait_for([&] { return softnic_test_pending_data(srq) == 0; }));
    for (int i = 0; i < 1000; ++i) {
        progress();
    }
    EXPECT_EQ(1, good.completed);
    EXPECT_EQ(1, bad.completed);

    /* and that connection still receives */
    tag_recv next;
    guarded_buffer rnext(m_component, m_md, 64, 'n');
    ASSERT_EQ(UCS_OK, post(next, m_receiver, rnext, 0x55, 64));
    ASSERT_EQ(UCS_OK, uct_ep_tag_eager_short(m_sender.eps[1], 0x55, "x", 1));
    ASSERT_TRUE(wait_for([&] { return next.completed > 0; }));
    EXPECT_EQ(UCS_OK, next.status);
}

/* The receiving endpoint is destroyed while the NIC reads a rendezvous it
 * matched (MATCH seen, QP not known), and the read then fails: the closing
 * connection waits for the receive, finds its receive-only QP in error,
 * and the receive fails; destroyed at once, the receive never completed */
TEST_F(rc_tm_fault, closing_connection_whose_rendezvous_read_failed)
{
    open({{"RCACHE", "no"}});
    tm_dev_srq_t *srq;
    tm_dev_t *dev = device(m_receiver, &srq);
    guarded_buffer rbuf(m_component, m_md, 65536, 'r');
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, m_receiver, rbuf, 0x33, 65536));
    ASSERT_TRUE(wait_for([&] { return softnic_test_listed_tags(srq) == 1; }));

    softnic_test_set_mode(dev, SOFTNIC_MODE_MANUAL);
    test_completion comp;
    scope_exit cancel_send{[&] { destroy_eps(m_sender); }};
    {
        guarded_buffer sbuf(m_component, m_md, 65536, 's');
        ASSERT_FALSE(UCS_PTR_IS_ERR(send_rndv(m_sender.eps[0], 0x33, sbuf,
                                              65536, comp)));
        sbuf.dereg();
    }
    ASSERT_TRUE(wait_for([&] {
        return softnic_test_step_any_arrival(srq) == 0;
    }));
    ASSERT_TRUE(wait_for([&] { return r.consumed > 0; }));

    unsigned qps = softnic_test_qp_count(dev);
    destroy_eps(m_receiver);
    for (int i = 0; i < 100; ++i) {
        progress();
    }
    EXPECT_EQ(0, r.completed);

    ucx_log_capture log;
    ASSERT_EQ(0, softnic_test_step_data(srq));   /* the read fails */
    softnic_test_set_mode(dev, SOFTNIC_MODE_AUTO);
    ASSERT_TRUE(wait_for([&] { return r.completed > 0; }))
            << "the closing connection went without its receive";
    EXPECT_EQ(UCS_ERR_IO_ERROR, r.status);
    EXPECT_TRUE(rbuf.all('r'));
    ASSERT_TRUE(wait_for([&] {
        return softnic_test_qp_count(dev) == qps - 2;
    })) << "the closing connection was not destroyed";
}
