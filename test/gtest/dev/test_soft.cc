/*
 * Tests of the software NIC: one or more tests per rule of
 * shared/notes/tm-device-semantics.md (device, matching, rendezvous, list
 * operations; the phase rules are in test_soft_phase.cc).  The NIC is
 * used only through the device layer (dev/tm_dev.h), whose verbs backend
 * reaches it through rdma-core's API as it reaches a NIC, and steered
 * through softnic/softnic_test.h.
 *
 * Receiver-side rules are checked in MANUAL mode where the interleaving
 * matters: the test performs each device event itself, so nothing depends
 * on timing.
 */
#include "soft_fixture.h"

using namespace soft_test;

/* ------------------------------------------------------------------------
 * Device, capabilities, addresses
 */
TEST(soft_dev, listed_once_last)
{
    tm_dev_info_t info[16];
    unsigned n = tm_dev_list(info, 16), soft = 0;

    for (unsigned i = 0; i < n; ++i) {
        soft += !strcmp(info[i].name, "soft");
    }
    EXPECT_EQ(1u, soft);
    ASSERT_GE(n, 1u);
    EXPECT_STREQ("soft", info[n - 1].name);
    EXPECT_EQ(0u, tm_dev_list(info, 0));
}

TEST(soft_dev, defaults_and_attributes)
{
    tm_dev_info_t info;
    tm_dev_attr_t attr;
    tm_dev_caps_t caps;
    tm_dev_t *dev;

    ASSERT_EQ(0, tm_dev_find("soft", &info));
    memset(&attr, 0, sizeof(attr));
    ASSERT_EQ(0, tm_dev_open(&info, &attr, &dev));
    tm_dev_query(dev, &caps);
    EXPECT_EQ(1024u, caps.tm.max_num_tags);
    EXPECT_EQ(64u, caps.tm.max_ops);         /* the device layer's default */
    EXPECT_EQ(64u, caps.tm.max_rndv_hdr_size);
    EXPECT_EQ(1u, caps.tm.max_sge);
    EXPECT_EQ((uint32_t)IBV_TM_CAP_RC, caps.tm.flags);
    EXPECT_GE(caps.max_msg_size, 16u * 1024);
    EXPECT_GE(caps.max_rdma_size, 1ull << 30);
    EXPECT_GT(caps.max_srq_wr, 0u);
    EXPECT_GT(caps.max_send_wr, 0u);
    EXPECT_GT(caps.eager_packet_size, 0u);
    EXPECT_LE(caps.dev_addr_len, (size_t)TM_DEV_ADDR_MAX);
    EXPECT_LE(caps.conn_addr_len, (size_t)TM_DEV_ADDR_MAX);
    tm_dev_close(dev);

    attr.max_num_tags      = 3;
    attr.max_ops           = 5;
    attr.max_rndv_hdr_size = 128;
    attr.srq_depth         = 40;
    attr.eager_packet_size = 100;
    attr.max_msg_size      = 4096;
    attr.max_send_wr       = 9;
    ASSERT_EQ(0, tm_dev_open(&info, &attr, &dev));
    tm_dev_query(dev, &caps);
    EXPECT_EQ(3u, caps.tm.max_num_tags);
    EXPECT_EQ(5u, caps.tm.max_ops);
    EXPECT_EQ(128u, caps.tm.max_rndv_hdr_size);
    EXPECT_EQ(40u, caps.max_srq_wr);
    EXPECT_EQ(100u, caps.eager_packet_size);
    EXPECT_EQ(4096u, caps.max_msg_size);
    EXPECT_EQ(9u, caps.max_send_wr);
    tm_dev_close(dev);

    attr.max_rndv_hdr_size = 8;     /* cannot hold TMH + RVH */
    EXPECT_EQ(EINVAL, tm_dev_open(&info, &attr, &dev));

    memset(&attr, 0, sizeof(attr));
    ASSERT_EQ(0, tm_dev_open(&info, &attr, &dev));
    tm_dev_query(dev, &caps);
    EXPECT_TRUE(caps.flags & TM_DEV_CAP_CONNECT_TO_SRQ);
    EXPECT_GT(caps.srq_addr_len, 0u);
    EXPECT_LE(caps.srq_addr_len, (size_t)TM_DEV_ADDR_MAX);
    EXPECT_GE(caps.max_send_sge, 2u);
    EXPECT_LE(caps.dev_addr_len, 31u);          /* what UCP carries */
    /* a verbs address {magic, link layer, LID, GID}: InfiniBand, LID 1 (the
     * device's), and the software NIC's GID (a unique local address, fd 'S'
     * ...) */
    uint8_t addr[TM_DEV_ADDR_MAX];
    tm_dev_addr(dev, addr);
    EXPECT_EQ(0x56, addr[0]);
    EXPECT_EQ(IBV_LINK_LAYER_INFINIBAND, addr[1]);
    EXPECT_EQ(1, addr[2] << 8 | addr[3]);   /* big endian */
    EXPECT_EQ(0xfd, addr[4]);
    EXPECT_EQ('S', addr[5]);
    EXPECT_STREQ("software NIC", tm_dev_driver(dev));
    tm_dev_close(dev);
}

TEST(soft_dev, addresses_and_reachability)
{
    node a, b;
    tm_dev_attr_t attr;
    char addr[TM_DEV_ADDR_MAX], junk[TM_DEV_ADDR_MAX];

    memset(&attr, 0, sizeof(attr));
    ASSERT_NO_FATAL_FAILURE(a.open(attr));
    ASSERT_NO_FATAL_FAILURE(b.open(attr));
    tm_dev_addr(b.dev, addr);
    EXPECT_TRUE(tm_dev_is_reachable(a.dev, addr));
    tm_dev_addr(a.dev, addr);
    EXPECT_TRUE(tm_dev_is_reachable(a.dev, addr));   /* loopback */
    memset(junk, 0x5a, sizeof(junk));
    EXPECT_FALSE(tm_dev_is_reachable(a.dev, junk));

    tm_dev_conn_t *c1 = a.create_conn(), *c2 = a.create_conn();
    EXPECT_NE(tm_dev_conn_qp_num(c1), tm_dev_conn_qp_num(c2));
    a.close();
    b.close();
}

TEST(soft_dev, shm_removed_at_close)
{
    char prefix[128];
    node a;
    tm_dev_attr_t attr;

    softnic_test_shm_prefix(prefix, sizeof(prefix));
    memset(&attr, 0, sizeof(attr));
    ASSERT_NO_FATAL_FAILURE(a.open(attr));
    a.create_conn();
    /* device, SRQ, a ring per QP of the connection */
    EXPECT_EQ(4u, shm_names(prefix).size());
    a.close();
    EXPECT_EQ(0u, shm_names(prefix).size());
}


/* ------------------------------------------------------------------------
 * Matched eager, unexpected, NO_TAG, FIN
 */
TEST_F(soft_pair, matched_eager_one_completion)
{
    char *buf = r.alloc(256);
    uint32_t h;

    ASSERT_EQ(0, r.add_tag(0x1234, ~0ull, buf, 256, 77, 0, &h, 5));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 0x1234, 0xabcd, "hello"), 9));

    tm_dev_wc_t wc;
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_TM_ADD, wc.opcode);
    EXPECT_EQ(5u, wc.wr_id);
    EXPECT_EQ(0u, wc.wc_flags);
    ASSERT_TRUE(r.next(&wc));
    EXPECT_TM_RECV(wc, 77, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, 0x1234,
                   0xabcd, 5);
    /* it came on the receive-only QP, which the sending QP talks to */
    EXPECT_EQ(tm_dev_conn_rx_qp_num(cr), wc.qp_num);
    EXPECT_EQ("hello", std::string(buf, 5));

    ASSERT_TRUE(s.next(&wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(IBV_WC_SEND, wc.opcode);
    EXPECT_EQ(9u, wc.wr_id);
    EXPECT_EQ(tm_dev_conn_qp_num(cs), wc.qp_num);
}

TEST_F(soft_pair, unexpected_lands_whole_in_untagged_buffer)
{
    std::vector<char*> bufs;
    std::string msg = tm_msg(IBV_TMH_EAGER, 42, 7, "payload");

    r.post_rbufs(1, 1024, 100, &bufs);
    ASSERT_EQ(0, s.send(cs, msg, 1));
    tm_dev_wc_t wc;
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(IBV_WC_RECV, wc.opcode);
    EXPECT_EQ(100u, wc.wr_id);
    EXPECT_EQ(msg.size(), wc.byte_len);
    /* out of phase now, but mlx5 asks for SYNC on an unexpected message only
     * past 0x3fff unacknowledged ones */
    EXPECT_FALSE(wc.wc_flags & IBV_WC_TM_SYNC_REQ);
    EXPECT_EQ(msg, std::string(bufs[0], msg.size()));
    EXPECT_EQ(1u, softnic_test_hw_unexp(r.srq));
    EXPECT_FALSE(softnic_test_in_phase(r.srq));
}

/* An untagged buffer's key is checked when a message lands in it, as a
 * NIC translates it then: one whose region was deregistered after the post
 * fails the receive (LOC_PROT_ERR, the buffer consumed, nothing written),
 * though a buffer of that region took a message before and the same memory
 * is registered again (under another key) by then */
TEST_F(soft_pair, untagged_buffer_deregistered_after_post_is_protection_error)
{
    std::vector<char> region(2048, 0x5a);
    std::string msg = tm_msg(IBV_TMH_EAGER, 42, 7, "payload");
    tm_dev_mr_t *mr, *again;
    tm_dev_wc_t wc;

    ASSERT_EQ(0, tm_dev_reg_mr(r.dev, region.data(), region.size(),
                               IBV_ACCESS_LOCAL_WRITE, &mr));
    for (unsigned i = 0; i < 2; ++i) {
        struct ibv_sge sge = { (uintptr_t)&region[i * 1024], 1024, mr->lkey };
        struct ibv_recv_wr wr, *bad;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id   = 100 + i;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ASSERT_EQ(0, tm_dev_post_srq_recv(r.srq, &wr, &bad));
    }

    ASSERT_EQ(0, s.send(cs, msg, 1));
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(100u, wc.wr_id);
    EXPECT_EQ(msg, std::string(&region[0], msg.size()));

    ASSERT_EQ(0, tm_dev_dereg_mr(r.dev, mr));
    ASSERT_EQ(0, tm_dev_reg_mr(r.dev, region.data(), region.size(),
                               IBV_ACCESS_LOCAL_WRITE, &again));
    r.extra_mrs.push_back(again);
    ASSERT_EQ(0, s.send(cs, msg, 2));
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_LOC_PROT_ERR, wc.status);
    EXPECT_EQ(101u, wc.wr_id);
    EXPECT_EQ(std::string(msg.size(), 0x5a),
              std::string(&region[1024], msg.size()));
}

/* A SEND's gather entries are translated when the NIC reads them, even
 * with nothing ahead of it in its queue: an entry under a wrong key, or
 * past its region's end, second of two or alone, fails at its requester
 * (LOC_PROT_ERR, the QP in error, the next send flushed), and nothing of it
 * reaches the peer: the untagged buffer it would have taken holds the
 * message of the connection that comes after */
TEST_F(soft_pair, send_with_a_bad_gather_entry_fails_at_its_requester)
{
    std::vector<char> small(64, 'x');
    const std::string msg = "after the failed sends";
    tm_dev_mr_t *small_mr;
    std::vector<char*> bufs;
    tm_dev_wc_t wc;

    ASSERT_EQ(0, tm_dev_reg_mr(s.dev, small.data(), small.size(), 0,
                               &small_mr));
    s.extra_mrs.push_back(small_mr);
    const char *good = s.alloc(64);
    const std::vector<std::vector<ibv_sge>> cases = {
        {{(uintptr_t)good, 64, s.mr->lkey + 1}},
        {{(uintptr_t)small.data(), 128, small_mr->lkey}},
        {{(uintptr_t)good, 64, s.mr->lkey},
         {(uintptr_t)small.data(), 65, small_mr->lkey}},
    };

    r.post_rbufs(1, 256, 100, &bufs);
    for (std::vector<ibv_sge> sges : cases) {
        tm_dev_conn_t *c = s.create_conn(), *peer = r.create_conn();
        ASSERT_NO_FATAL_FAILURE(connect_pair(s, c, r, peer));
        struct ibv_send_wr wr, *bad;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id      = 1;
        wr.opcode     = IBV_WR_SEND;
        wr.sg_list    = sges.data();
        wr.num_sge    = (int)sges.size();
        wr.send_flags = IBV_SEND_SIGNALED;
        ASSERT_EQ(0, tm_dev_post_send(c, &wr, &bad));
        ASSERT_EQ(0, s.send(c, msg, 2));

        ASSERT_TRUE(s.next(&wc));
        EXPECT_EQ(IBV_WC_LOC_PROT_ERR, wc.status) << sges.size() << " entries";
        EXPECT_EQ(1u, wc.wr_id);
        ASSERT_TRUE(s.next(&wc));
        EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, wc.status);
        EXPECT_EQ(2u, wc.wr_id);
    }

    ASSERT_EQ(0, s.send(cs, msg, 3));
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(100u, wc.wr_id);
    EXPECT_EQ(msg, std::string(bufs[0], msg.size()));
}

/* NO_TAG, FIN and messages shorter than a TMH go whole to an untagged
 * buffer, never to a listed entry.  Of them only the FIN counts as
 * unexpected, because it arrived on the receive-only QP, where no NIC's
 * FIN comes (choice 18; the NIC's own FIN is not counted:
 * soft_pair.fin_on_the_receive_only_qp_counts_as_unexpected) */
TEST_F(soft_pair, no_tag_and_fin_are_not_matched)
{
    std::vector<char*> bufs;
    std::string m1 = tm_msg(IBV_TMH_NO_TAG, 0, 0, "am-data");
    std::string m2 = tm_msg(IBV_TMH_FIN, 5, 6, "");
    std::string m3 = "xy";       /* shorter than a TMH */
    char *tbuf = r.alloc(64);

    /* a listed entry matching everything must not take them */
    ASSERT_EQ(0, r.add_tag(0, 0, tbuf, 64, 1, 0, nullptr, 0, 0));
    r.post_rbufs(3, 256, 10, &bufs);
    ASSERT_EQ(0, s.send(cs, m1, 1));
    ASSERT_EQ(0, s.send(cs, m2, 2));
    ASSERT_EQ(0, s.send(cs, m3, 3));

    tm_dev_wc_t wc;
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_TM_NO_TAG, wc.opcode);
    EXPECT_EQ(10u, wc.wr_id);
    EXPECT_EQ(m1.size(), wc.byte_len);
    EXPECT_EQ(0u, wc.wc_flags);
    EXPECT_EQ(m1, std::string(bufs[0], m1.size()));
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_TM_NO_TAG, wc.opcode) << "mlx5 reports a FIN so";
    EXPECT_EQ(m2, std::string(bufs[1], m2.size()));
    EXPECT_EQ(0u, wc.wc_flags);
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_RECV, wc.opcode);
    EXPECT_EQ(2u, wc.byte_len);
    EXPECT_EQ(1u, softnic_test_hw_unexp(r.srq)) << "the FIN alone";
    EXPECT_FALSE(softnic_test_in_phase(r.srq));
    EXPECT_EQ(1u, softnic_test_listed_tags(r.srq));
}

TEST_F(soft_pair, mask_and_first_added_entry_wins)
{
    char *b1 = r.alloc(64), *b2 = r.alloc(64), *b3 = r.alloc(64);

    ASSERT_EQ(0, r.add_tag(0x100, 0xf00, b1, 64, 1, 0, nullptr, 0, 0)); /* no */
    ASSERT_EQ(0, r.add_tag(0x010, 0x0f0, b2, 64, 2, 0, nullptr, 0, 0)); /* yes */
    ASSERT_EQ(0, r.add_tag(0x011, ~0ull, b3, 64, 3, 0, nullptr, 0, 0)); /* yes */
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 0x211, 0, "a"), 1));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 0x211 - 0x200, 0, "b"), 2));

    tm_dev_wc_t wc;
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(2u, wc.wr_id);        /* masked entry, added before the exact one */
    EXPECT_EQ('a', b2[0]);
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(3u, wc.wr_id);
    EXPECT_EQ('b', b3[0]);
    EXPECT_EQ(1u, softnic_test_listed_tags(r.srq));
}

TEST_F(soft_pair, eager_longer_than_tagged_buffer_is_length_error)
{
    char *buf = r.alloc(64);

    memset(buf, 0x11, 64);
    ASSERT_EQ(0, r.add_tag(9, ~0ull, buf, 4, 33, 0, nullptr, 0, 0));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 9, 0, "too long"), 1));
    tm_dev_wc_t wc;
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_LOC_LEN_ERR, wc.status);
    EXPECT_EQ(IBV_WC_TM_RECV, wc.opcode);
    EXPECT_EQ(33u, wc.wr_id);
    EXPECT_EQ(8u, wc.byte_len);
    EXPECT_EQ(0x11, buf[0]);                       /* nothing written */
    EXPECT_EQ(0u, softnic_test_listed_tags(r.srq));     /* entry consumed */
}


/* ------------------------------------------------------------------------
 * Two-step completions: long eager, rendezvous
 */
TEST_F(soft_pair_small_packet, long_eager_match_then_data_valid)
{
    char *buf = r.alloc(1024);
    std::string big(200, 'q');

    manual();
    ASSERT_EQ(0, r.add_tag(5, ~0ull, buf, 1024, 50, 0, nullptr, 0, 0));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 5, 3, big), 1));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 6, 3, "x"), 2));
    r.post_rbufs(1, 256, 900);

    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(1u, v.size());
    /* MATCH carries the tag and app context, and no length */
    EXPECT_TM_RECV(v[0], 50, IBV_WC_TM_MATCH, 5, 3, 0);
    EXPECT_EQ(1u, softnic_test_pending_data(r.srq));

    /* MATCH is ordered with later arrivals; DATA_VALID comes on its own */
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    ASSERT_EQ(0, softnic_test_step_data(r.srq));
    v = drain(r);
    ASSERT_EQ(2u, v.size());
    EXPECT_EQ(IBV_WC_RECV, v[0].opcode);
    /* DATA_VALID carries the length and no tag (mlx5 scatters the TMH
     * into the MATCH completion only) */
    EXPECT_TM_RECV(v[1], 50, IBV_WC_TM_DATA_VALID, 0, 0, 200);
    EXPECT_EQ(big, std::string(buf, 200));
    EXPECT_EQ(EAGAIN, softnic_test_step_data(r.srq));
}

TEST_F(soft_pair, short_eager_is_one_completion_even_in_manual_mode)
{
    char *buf = r.alloc(64);

    manual();
    ASSERT_EQ(0, r.add_tag(5, ~0ull, buf, 64, 50, 0, nullptr, 0, 0));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 5, 3, "abc"), 1));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_TM_RECV(v[0], 50, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, 5, 3, 3);
    EXPECT_EQ(0u, softnic_test_pending_data(r.srq));
}

TEST_F(soft_pair, expected_rndv_is_read_by_device_and_answered_with_fin)
{
    const uint32_t len = 100000;
    char *src = s.alloc(len), *dst = r.alloc(len);
    std::vector<char*> sbufs;

    for (uint32_t i = 0; i < len; ++i) {
        src[i] = (char)(i * 7);
    }
    memset(dst, 0, len);
    s.post_rbufs(1, 256, 700, &sbufs);       /* where the FIN lands */
    manual();
    ASSERT_EQ(0, r.add_tag(0x77, ~0ull, dst, len, 88, 0, nullptr, 0, 0));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    std::string req = rndv_msg(0x77, 0x55, src, s.mr->rkey, len, "hdr");
    ASSERT_EQ(0, s.send(cs, req, 11));

    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_TM_RECV(v[0], 88, IBV_WC_TM_MATCH, 0x77, 0x55, 0);
    EXPECT_EQ(0, dst[1]);                    /* not read yet */

    ASSERT_EQ(0, softnic_test_step_data(r.srq));
    v = drain(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_TM_RECV(v[0], 88, IBV_WC_TM_DATA_VALID, 0, 0, len);
    EXPECT_EQ(0, memcmp(src, dst, len));

    /* the sender: its SEND completes, and the FIN arrives as TM_NO_TAG (as
     * mlx5 reports it), on the QP the sender sends on */
    tm_dev_wc_t wc;
    bool got_send = false, got_fin = false;
    while ((!got_send || !got_fin) && s.next(&wc)) {
        if (wc.opcode == IBV_WC_SEND) {
            EXPECT_EQ(11u, wc.wr_id);
            got_send = true;
        } else {
            EXPECT_EQ(IBV_WC_TM_NO_TAG, wc.opcode);
            EXPECT_EQ(tm_dev_conn_qp_num(cs), wc.qp_num);
            EXPECT_EQ(700u, wc.wr_id);
            EXPECT_EQ(TMH + RVH, wc.byte_len);
            const struct ibv_tmh *tmh = (const struct ibv_tmh *)sbufs[0];
            EXPECT_EQ(IBV_TMH_FIN, tmh->opcode);
            EXPECT_EQ(0x77u, be64toh(tmh->tag));
            EXPECT_EQ(0x55u, be32toh(tmh->app_ctx));
            EXPECT_EQ(0, memcmp(sbufs[0] + TMH, req.data() + TMH, RVH));
            got_fin = true;
        }
    }
    EXPECT_TRUE(got_send && got_fin);
    EXPECT_EQ(0u, softnic_test_hw_unexp(s.srq));  /* FIN is not unexpected */
}

TEST_F(soft_pair, rndv_larger_than_tagged_buffer_is_incomplete)
{
    const uint32_t len = 5000;
    char *src = s.alloc(len), *dst = r.alloc(len);
    std::string req = rndv_msg(3, 4, src, s.mr->rkey, len, "userhdr");

    memset(dst, 0, len);
    ASSERT_EQ(0, r.add_tag(3, ~0ull, dst, 1000, 66, 0, nullptr, 0, 0));
    ASSERT_EQ(0, s.send(cs, req, 1));
    tm_dev_wc_t wc;
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_TM_RNDV_INCOMPLETE, wc.status);
    EXPECT_EQ(IBV_WC_TM_RECV, wc.opcode);
    EXPECT_EQ(66u, wc.wr_id);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_TM_MATCH);
    EXPECT_EQ(3u, wc.tm_info.tag);
    EXPECT_EQ(4u, wc.tm_info.priv);
    EXPECT_EQ(req.size(), wc.byte_len);
    EXPECT_EQ(req, std::string(dst, req.size()));
    EXPECT_EQ(0u, softnic_test_pending_data(r.srq));
    EXPECT_EQ(0u, softnic_test_listed_tags(r.srq));
    EXPECT_FALSE(r.next(&wc, 0.05));         /* no DATA_VALID follows */
}


/* ------------------------------------------------------------------------
 * List operations: post-time limits, order, DEL races
 */
class soft_pair_tiny : public soft_pair {
    void set_attr(tm_dev_attr_t &a) override {
        a.max_num_tags = 2;
        a.max_ops      = 3;
    }
};

TEST_F(soft_pair_tiny, list_full_fails_at_post_and_changes_nothing)
{
    char *buf = r.alloc(64);
    uint32_t h1, h2, h3 = 0xdeadbeef;

    manual();
    ASSERT_EQ(0, r.add_tag(1, ~0ull, buf, 64, 1, 0, &h1));
    ASSERT_EQ(0, r.add_tag(2, ~0ull, buf, 64, 2, 0, &h2));
    EXPECT_NE(h1, h2);
    EXPECT_EQ(ENOMEM, r.add_tag(3, ~0ull, buf, 64, 3, 0, &h3));
    EXPECT_EQ(0xdeadbeefu, h3);
    EXPECT_EQ(2u, softnic_test_pending_ops(r.srq));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    EXPECT_EQ(2u, softnic_test_listed_tags(r.srq));
    /* still full once processed */
    EXPECT_EQ(ENOMEM, r.add_tag(3, ~0ull, buf, 64, 3, 0, &h3));
    EXPECT_EQ(0u, softnic_test_pending_ops(r.srq));
    EXPECT_EQ(2u, drain(r).size());

    /* a chain: the first fitting WR is posted, bad_wr names the failing one.
     * The handle of a deleted entry is free once the DEL's completion is
     * polled (as rdma-core's provider frees it) */
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, h1, 0));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    EXPECT_EQ(ENOMEM, r.add_tag(3, ~0ull, buf, 64, 3, 0, &h3));
    EXPECT_EQ(1u, drain(r).size());
    struct ibv_sge sge = { (uintptr_t)buf, 64, r.mr->lkey };
    struct ibv_ops_wr w[2], *bad = nullptr;
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 2; ++i) {
        w[i].opcode         = IBV_WR_TAG_ADD;
        w[i].tm.add.sg_list = &sge;
        w[i].tm.add.num_sge = 1;
        w[i].tm.add.tag     = 10 + i;
        w[i].tm.add.mask    = ~0ull;
    }
    w[0].next = &w[1];
    EXPECT_EQ(ENOMEM, tm_dev_post_srq_ops(r.srq, &w[0], &bad));
    EXPECT_EQ(&w[1], bad);
    EXPECT_EQ(1u, softnic_test_pending_ops(r.srq));
}

TEST_F(soft_pair_tiny, max_ops_exceeded_fails_at_post_and_changes_nothing)
{
    manual();
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_SYNC, 0, 0, 1));
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_SYNC, 0, 0, 2));
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_SYNC, 0, 0, 3));
    EXPECT_EQ(ENOMEM, r.list_op(IBV_WR_TAG_SYNC, 0, 0, 4));
    char *buf = r.alloc(64);
    EXPECT_EQ(ENOMEM, r.add_tag(1, ~0ull, buf, 64, 1, 0, nullptr));
    EXPECT_EQ(3u, softnic_test_pending_ops(r.srq));

    /* one is done, but its room comes back with its completion polled (as
     * mlx5's command QP's send queue) */
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    EXPECT_EQ(ENOMEM, r.add_tag(1, ~0ull, buf, 64, 1, 0, nullptr, 5));
    r.poll();
    EXPECT_EQ(0, r.add_tag(1, ~0ull, buf, 64, 1, 0, nullptr, 5));
    while (softnic_test_step_op(r.srq) == 0) {
    }
    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(4u, v.size());
    for (unsigned i = 0; i < 3; ++i) {
        EXPECT_EQ(IBV_WC_TM_SYNC, v[i].opcode);
        EXPECT_EQ(i + 1, v[i].wr_id);            /* posting order */
    }
    EXPECT_EQ(IBV_WC_TM_ADD, v[3].opcode);
    EXPECT_EQ(5u, v[3].wr_id);
    EXPECT_EQ(1u, softnic_test_listed_tags(r.srq));
}

TEST_F(soft_pair, unsignaled_ops_give_no_completion)
{
    char *buf = r.alloc(64);
    ASSERT_EQ(0, r.add_tag(1, ~0ull, buf, 64, 1, 0, nullptr, 0, IBV_OPS_TM_SYNC));
    r.poll();
    EXPECT_TRUE(r.wcs.empty());
    EXPECT_EQ(1u, softnic_test_listed_tags(r.srq));
}

TEST_F(soft_pair, list_ops_are_asynchronous_to_arrivals)
{
    char *buf = r.alloc(64);

    manual();
    r.post_rbufs(1, 256, 10);
    ASSERT_EQ(0, r.add_tag(1, ~0ull, buf, 64, 1, 0, nullptr));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 1, 0, "m"), 1));
    /* the message is judged before the ADD took effect */
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(2u, v.size());
    EXPECT_EQ(IBV_WC_RECV, v[0].opcode);
    EXPECT_EQ(IBV_WC_TM_ADD, v[1].opcode);
    EXPECT_TRUE(v[1].wc_flags & IBV_WC_TM_SYNC_REQ);
}

TEST_F(soft_pair, del_of_listed_entry_succeeds)
{
    char *buf = r.alloc(64);
    uint32_t h;

    r.post_rbufs(1, 256, 10);
    ASSERT_EQ(0, r.add_tag(1, ~0ull, buf, 64, 1, 0, &h, 1));
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, h, 0, 2));
    r.poll();
    ASSERT_EQ(2u, r.wcs.size());
    EXPECT_EQ(IBV_WC_TM_DEL, r.wcs[1].opcode);
    EXPECT_EQ(IBV_WC_SUCCESS, r.wcs[1].status);
    EXPECT_EQ(0u, softnic_test_listed_tags(r.srq));
    r.wcs.clear();
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 1, 0, "m"), 1));
    tm_dev_wc_t wc;
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_RECV, wc.opcode);          /* deleted: not matched */
}

TEST_F(soft_pair, del_after_consumption_is_tm_err)
{
    char *buf = r.alloc(64);
    uint32_t h;

    manual();
    ASSERT_EQ(0, r.add_tag(1, ~0ull, buf, 64, 1, 0, &h, 1));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 1, 0, "m"), 1));
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, h, 0, 2));   /* software races */
    ASSERT_EQ(0, softnic_test_step_arrival(cr));             /* message wins */
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(3u, v.size());
    EXPECT_EQ(IBV_WC_TM_RECV, v[1].opcode);
    EXPECT_EQ(IBV_WC_TM_DEL, v[2].opcode);
    EXPECT_EQ(IBV_WC_TM_ERR, v[2].status);
    EXPECT_EQ(2u, v[2].wr_id);

    /* handles are bare indices, reused at once (as on mlx5, where nothing
     * checks a DEL's handle): a DEL naming the old entry deletes the new
     * one, so software must never post one for an entry already consumed */
    uint32_t h2;
    ASSERT_EQ(0, r.add_tag(1, ~0ull, buf, 64, 3, 0, &h2, 3));
    EXPECT_EQ(h, h2);
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, h, 0, 4));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    v = drain(r);
    ASSERT_EQ(2u, v.size());
    EXPECT_EQ(IBV_WC_TM_DEL, v[1].opcode);
    EXPECT_EQ(IBV_WC_SUCCESS, v[1].status);
    EXPECT_EQ(0u, softnic_test_listed_tags(r.srq)) << "the new entry is gone";
}
