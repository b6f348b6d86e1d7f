/*
 * The software NIC's matching list behaves as mlx5's does (rdma-core's
 * provider: handles, when list slots and operation slots come back,
 * SYNC_REQ).  The items continue test_soft_mlx5.cc's numbering.
 */
#include "soft_fixture.h"

using namespace soft_test;

/* The suites of this file (soft_mlx5_list*) */
class soft_mlx5_list : public soft_pair {
protected:
    /* n unexpected tagged messages, each into an untagged buffer (in AUTO
     * mode, in batches the CQ holds); sync_req gets the 1-based numbers of
     * those whose completion carried IBV_WC_TM_SYNC_REQ */
    void unexpected(unsigned n, std::vector<unsigned> *sync_req) {
        const std::string msg = tm_msg(IBV_TMH_EAGER, 0xdead, 0, "");
        unsigned sent = 0, got = 0;
        tm_dev_wc_t wc;

        while (sent < n) {
            unsigned batch = std::min(n - sent, 256u);
            r.post_rbufs(batch, 64, 0);
            for (unsigned i = 0; i < batch; ++i) {
                ASSERT_EQ(0, s.send(cs, msg, i));
            }
            sent += batch;
            while (got < sent) {
                ASSERT_TRUE(r.next(&wc));
                ASSERT_EQ(IBV_WC_SUCCESS, wc.status);
                ASSERT_EQ(IBV_WC_RECV, wc.opcode);
                ++got;
                if (wc.wc_flags & IBV_WC_TM_SYNC_REQ) {
                    sync_req->push_back(got);
                }
            }
            for (unsigned i = 0; i < batch; ++i) {      /* the send queue */
                ASSERT_TRUE(s.next(&wc));
                ASSERT_EQ(IBV_WC_SUCCESS, wc.status);
            }
        }
    }
};

/* max_num_tags 2, max_ops 3, eager messages over 64 bytes in two CQEs */
class soft_mlx5_list_tiny : public soft_pair {
    void set_attr(tm_dev_attr_t &a) override {
        a.max_num_tags      = 2;
        a.max_ops           = 3;
        a.eager_packet_size = 64;
    }
};


/* ----- 4. list handles are bare indices, reused at once ----- */

/* Once an entry's final completion is polled, its handle is the next ADD's */
TEST_F(soft_mlx5_list, consumed_entrys_handle_is_the_next_adds)
{
    char *buf = r.alloc(64);
    uint32_t h, h2;

    manual();
    ASSERT_EQ(0, r.add_tag(1, ~0ull, buf, 64, 10, 0, &h, 1));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 1, 0, "m"), 1));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(2u, v.size());
    EXPECT_TM_RECV(v[1], 10, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, 1, 0, 1);
    EXPECT_LT(h, 2u) << "a bare index";

    ASSERT_EQ(0, r.add_tag(2, ~0ull, buf, 64, 11, 0, &h2, 2));
    EXPECT_EQ(h, h2);
}

/* Freed handles are handed out last-freed first */
TEST_F(soft_mlx5_list, last_freed_handle_is_handed_out_first)
{
    char *buf = r.alloc(64);
    uint32_t h[3], g[2];

    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(0, r.add_tag(i, ~0ull, buf, 64, i, 0, &h[i], i));
    }
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, h[0], 0, 10));
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, h[1], 0, 11));
    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(5u, v.size());
    EXPECT_EQ(IBV_WC_SUCCESS, v[3].status);
    EXPECT_EQ(IBV_WC_SUCCESS, v[4].status);

    ASSERT_EQ(0, r.add_tag(5, ~0ull, buf, 64, 5, 0, &g[0], 5));
    ASSERT_EQ(0, r.add_tag(6, ~0ull, buf, 64, 6, 0, &g[1], 6));
    EXPECT_EQ(h[1], g[0]);
    EXPECT_EQ(h[0], g[1]);
}

/* rdma-core does not check a DEL's handle: one naming an entry that was
 * consumed, whose index a new entry took, deletes the new entry */
TEST_F(soft_mlx5_list, del_of_a_reused_handle_deletes_the_new_entry)
{
    char *a = r.alloc(64), *b = r.alloc(64);
    uint32_t ha, hb;

    manual();
    r.post_rbufs(1, 256, 100);
    ASSERT_EQ(0, r.add_tag(1, ~0ull, a, 64, 10, 0, &ha, 1));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 1, 0, "m"), 1));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    ASSERT_EQ(2u, drain(r).size());

    ASSERT_EQ(0, r.add_tag(2, ~0ull, b, 64, 20, 0, &hb, 2));
    ASSERT_EQ(ha, hb);
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, ha, 0, 3));  /* meant for a */
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(2u, v.size());
    EXPECT_EQ(IBV_WC_TM_DEL, v[1].opcode);
    EXPECT_EQ(IBV_WC_SUCCESS, v[1].status);
    EXPECT_EQ(0u, softnic_test_listed_tags(r.srq));

    /* b's message finds nothing */
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 2, 0, "n"), 2));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    v = drain(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_EQ(IBV_WC_RECV, v[0].opcode);
    EXPECT_EQ(100u, v[0].wr_id);
}

/* A DEL of a handle nothing holds completes with IBV_WC_TM_ERR, and, as in
 * rdma-core (mlx5_tm_release_tag of a reference never taken), the handle is
 * freed a second time: the next two ADDs share it, and the second takes the
 * first's place in the list */
TEST_F(soft_mlx5_list_tiny, signaled_del_of_a_free_handle_frees_it_twice)
{
    char *buf = r.alloc(64);
    uint32_t h[2];

    manual();
    ASSERT_EQ(0, r.add_tag(9, ~0ull, buf, 64, 9, 0, &h[0], 9));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, h[0], 0, 6));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(2u, drain(r).size());                 /* ADD, DEL: free */
    const uint32_t freed = h[0];

    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, freed, 0, 7));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_EQ(IBV_WC_TM_DEL, v[0].opcode);
    EXPECT_EQ(IBV_WC_TM_ERR, v[0].status);
    EXPECT_EQ(7u, v[0].wr_id);

    ASSERT_EQ(0, r.add_tag(1, ~0ull, buf, 64, 1, 0, &h[0], 1));
    ASSERT_EQ(0, r.add_tag(2, ~0ull, buf, 64, 2, 0, &h[1], 2));
    EXPECT_EQ(freed, h[0]);
    EXPECT_EQ(freed, h[1]) << "freed once only";
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    EXPECT_EQ(1u, softnic_test_listed_tags(r.srq));
    /* a handle past the list is refused at post (rdma-core would index
     * past its array) */
    EXPECT_EQ(EINVAL, r.list_op(IBV_WR_TAG_DEL, 2, 0, 8));
}

/* Unsignaled, a DEL of a free handle drops its count below 0, as in
 * rdma-core: the next entry given that handle is freed by its ADD's
 * completion while still listed, and the message it takes completes with
 * IBV_WC_GENERAL_ERR (rdma-core finds no entry at the index) */
TEST_F(soft_mlx5_list_tiny, unsignaled_del_of_a_free_handle_breaks_the_next_entry)
{
    char *buf = r.alloc(64);
    uint32_t h;

    manual();
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, 0, 0, 7, 0));
    ASSERT_EQ(0, r.add_tag(1, ~0ull, buf, 64, 10, 0, &h, 1));
    ASSERT_EQ(0u, h);
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 1, 0, "m"), 1));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(2u, v.size());
    EXPECT_EQ(IBV_WC_TM_ADD, v[0].opcode);
    EXPECT_EQ(IBV_WC_SUCCESS, v[0].status);
    EXPECT_EQ(IBV_WC_GENERAL_ERR, v[1].status);
}


/* ----- 5. a list slot comes back when its last completion is polled ----- */

/* A two-CQE message: the slot stays taken after its MATCH is polled, and
 * after its final completion is generated, until that is polled */
TEST_F(soft_mlx5_list_tiny, list_slot_is_taken_until_the_final_is_polled)
{
    char *a = r.alloc(256), *b = r.alloc(64);
    uint32_t ha, hb, h;

    manual();
    ASSERT_EQ(0, r.add_tag(1, ~0ull, a, 256, 10, 0, &ha, 1));
    ASSERT_EQ(0, r.add_tag(2, ~0ull, b, 64, 20, 0, &hb, 2));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(2u, drain(r).size());
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 1, 0, std::string(200, 'p')),
                        1));

    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_EQ((unsigned)IBV_WC_TM_MATCH, v[0].wc_flags);
    EXPECT_EQ(1u, softnic_test_listed_tags(r.srq)) << "the NIC let it go";
    EXPECT_EQ(ENOMEM, r.add_tag(3, ~0ull, b, 64, 30, 0, &h, 3));

    ASSERT_EQ(0, softnic_test_step_data(r.srq));
    EXPECT_EQ(ENOMEM, r.add_tag(3, ~0ull, b, 64, 30, 0, &h, 3))
        << "generated is not polled";
    v = drain(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_TM_RECV(v[0], 10, IBV_WC_TM_DATA_VALID, 0, 0, 200);
    ASSERT_EQ(0, r.add_tag(3, ~0ull, b, 64, 30, 0, &h, 3));
    EXPECT_EQ(ha, h);
}

/* A signaled DEL: the slot comes back with the DEL's completion polled */
TEST_F(soft_mlx5_list_tiny, deleted_slot_is_taken_until_the_del_is_polled)
{
    char *buf = r.alloc(64);
    uint32_t ha, hb, h;

    manual();
    ASSERT_EQ(0, r.add_tag(1, ~0ull, buf, 64, 10, 0, &ha, 1));
    ASSERT_EQ(0, r.add_tag(2, ~0ull, buf, 64, 20, 0, &hb, 2));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(2u, drain(r).size());

    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, ha, 0, 3));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    EXPECT_EQ(1u, softnic_test_listed_tags(r.srq));
    EXPECT_EQ(ENOMEM, r.add_tag(3, ~0ull, buf, 64, 30, 0, &h, 4));
    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_EQ(IBV_WC_SUCCESS, v[0].status);
    ASSERT_EQ(0, r.add_tag(3, ~0ull, buf, 64, 30, 0, &h, 4));
    EXPECT_EQ(ha, h);
}

/* An unsignaled DEL gives its slot back when posted (rdma-core expects no
 * completion for it): the new entry takes the index at once, and the NIC,
 * doing both in order, deletes the old entry and lists the new one */
TEST_F(soft_mlx5_list_tiny, unsignaled_del_frees_the_slot_when_posted)
{
    char *buf = r.alloc(64);
    uint32_t ha, hb, h;

    manual();
    r.post_rbufs(1, 256, 100);
    ASSERT_EQ(0, r.add_tag(1, ~0ull, buf, 64, 10, 0, &ha, 1));
    ASSERT_EQ(0, r.add_tag(2, ~0ull, buf, 64, 20, 0, &hb, 2));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(2u, drain(r).size());

    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, ha, 0, 3, IBV_OPS_TM_SYNC));
    ASSERT_EQ(0, r.add_tag(3, ~0ull, buf, 64, 30, 0, &h, 4));
    EXPECT_EQ(ha, h);
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(1u, drain(r).size());
    EXPECT_EQ(2u, softnic_test_listed_tags(r.srq));

    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 1, 0, "old"), 1));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 3, 0, "new"), 2));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(2u, v.size());
    EXPECT_EQ(IBV_WC_RECV, v[0].opcode) << "the old entry is gone";
    EXPECT_TM_RECV(v[1], 30, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, 3, 0, 3);
}

/* max_ops: an unsignaled operation's slot comes back only when the
 * completion of a later signaled one is polled (rdma-core moves the command
 * QP's tail there) */
TEST_F(soft_mlx5_list_tiny, unsignaled_op_slot_comes_back_with_a_later_completion)
{
    manual();
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_SYNC, 0, 0, 1, IBV_OPS_TM_SYNC));
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_SYNC, 0, 0, 2, IBV_OPS_TM_SYNC));
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_SYNC, 0, 0, 3));
    EXPECT_EQ(ENOMEM, r.list_op(IBV_WR_TAG_SYNC, 0, 0, 4));

    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    EXPECT_EQ(0u, drain(r).size());
    EXPECT_EQ(ENOMEM, r.list_op(IBV_WR_TAG_SYNC, 0, 0, 4))
        << "done, but nothing polled";
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    EXPECT_EQ(ENOMEM, r.list_op(IBV_WR_TAG_SYNC, 0, 0, 4));

    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_EQ(3u, v[0].wr_id);
    for (int i = 4; i < 7; ++i) {
        EXPECT_EQ(0, r.list_op(IBV_WR_TAG_SYNC, 0, 0, i)) << i;
    }
    EXPECT_EQ(ENOMEM, r.list_op(IBV_WR_TAG_SYNC, 0, 0, 7));
}


/* ----- 6. SYNC_REQ as rdma-core's mlx5 provider sets it ----- */

/* ADD and DEL completions ask when the NIC's count differs from the count
 * recorded at the entry's ADD: the last ADD carrying IBV_OPS_TM_SYNC (a
 * SYNC's count is not recorded), whatever the device's phase */
TEST_F(soft_mlx5_list, add_and_del_ask_for_sync_by_the_count_of_the_add)
{
    char *buf = r.alloc(64);
    uint32_t h0, h1, h2;

    manual();
    r.post_rbufs(2, 256, 100);
    ASSERT_EQ(0, r.add_tag(1, ~0ull, buf, 64, 10, 0, &h0, 1));  /* count 0 */
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 9, 0, "u"), 1));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_SYNC, 0, 1, 2));       /* in phase */
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_TRUE(softnic_test_in_phase(r.srq));
    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(3u, v.size());
    EXPECT_EQ(0u, v[0].wc_flags);
    EXPECT_EQ(0u, v[2].wc_flags) << "never on a SYNC";

    /* no count: the ADD records the last counted ADD's (0), not the SYNC's */
    ASSERT_EQ(0, r.add_tag(2, ~0ull, buf, 64, 20, 7, &h1, 3, IBV_OPS_SIGNALED));
    /* with the NIC's count: recorded */
    ASSERT_EQ(0, r.add_tag(3, ~0ull, buf, 64, 30, 1, &h2, 4));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_TRUE(softnic_test_in_phase(r.srq));
    v = drain(r);
    ASSERT_EQ(2u, v.size());
    EXPECT_EQ((unsigned)IBV_WC_TM_SYNC_REQ, v[0].wc_flags);
    EXPECT_EQ(0u, v[1].wc_flags);

    /* a DEL is judged by its entry's ADD, not by its own count */
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, h0, 1, 5));
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, h1, 1, 6));
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, h2, 0, 7, IBV_OPS_SIGNALED));
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(0, softnic_test_step_op(r.srq));
    }
    v = drain(r);
    ASSERT_EQ(3u, v.size());
    EXPECT_EQ((unsigned)IBV_WC_TM_SYNC_REQ, v[0].wc_flags);
    EXPECT_EQ((unsigned)IBV_WC_TM_SYNC_REQ, v[1].wc_flags);
    EXPECT_EQ(0u, v[2].wc_flags);
}

/* Out of phase, completions other than ADD / DEL never ask: SYNC (even with
 * a stale count), TM_RECV, NO_TAG, and a few unexpected messages */
TEST_F(soft_mlx5_list, no_sync_req_on_sync_tm_recv_no_tag)
{
    char *buf = r.alloc(64);

    manual();
    r.post_rbufs(3, 256, 100);
    ASSERT_EQ(0, r.add_tag(1, ~0ull, buf, 64, 10, 0, nullptr, 1));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 9, 0, "u"), 1));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 9, 0, "v"), 2));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 1, 0, "m"), 3));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_NO_TAG, 0, 0, "am"), 4));
    for (int i = 0; i < 4; ++i) {
        ASSERT_EQ(0, softnic_test_step_arrival(cr));
    }
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_SYNC, 0, 1, 2));       /* stale */
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    EXPECT_FALSE(softnic_test_in_phase(r.srq));

    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(6u, v.size());
    EXPECT_EQ(IBV_WC_RECV, v[1].opcode);
    EXPECT_EQ(IBV_WC_RECV, v[2].opcode);
    EXPECT_EQ(IBV_WC_TM_RECV, v[3].opcode);
    EXPECT_EQ(IBV_WC_TM_NO_TAG, v[4].opcode);
    EXPECT_EQ(IBV_WC_TM_SYNC, v[5].opcode);
    for (size_t i = 1; i < v.size(); ++i) {
        EXPECT_FALSE(v[i].wc_flags & IBV_WC_TM_SYNC_REQ) << i;
    }
}

/* An unexpected message asks only once more than 0x3fff are not
 * acknowledged by an ADD carrying the count */
TEST_F(soft_mlx5_list, unexpected_asks_for_sync_past_0x3fff_unacknowledged)
{
    std::vector<unsigned> sync_req;
    char *buf = r.alloc(64);

    ASSERT_NO_FATAL_FAILURE(unexpected(0x4001, &sync_req));
    ASSERT_EQ(2u, sync_req.size());
    EXPECT_EQ(0x4000u, sync_req[0]);
    EXPECT_EQ(0x4001u, sync_req[1]);
    EXPECT_EQ(0x4001u, softnic_test_hw_unexp(r.srq));

    /* an ADD acknowledges them: in phase, and the next does not ask */
    ASSERT_EQ(0, r.add_tag(1, ~0ull, buf, 64, 10, 0x4001, nullptr, 1));
    tm_dev_wc_t wc;
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_TM_ADD, wc.opcode);
    EXPECT_EQ(0u, wc.wc_flags);
    EXPECT_TRUE(softnic_test_in_phase(r.srq));
    sync_req.clear();
    ASSERT_NO_FATAL_FAILURE(unexpected(1, &sync_req));
    EXPECT_TRUE(sync_req.empty());
}

/* The NIC's count is 16 bits: after 0x10002 unexpected messages it is 2,
 * and an ADD carrying 0x10002 brings it in phase (its entry matches).
 * rdma-core compares the full count an ADD carried with the NIC's 16 bits:
 * that ADD's completion asks for SYNC, one carrying 2 does not */
TEST_F(soft_mlx5_list, unexpected_count_wraps_at_16_bits)
{
    std::vector<unsigned> sync_req;
    char *b1 = r.alloc(64), *b2 = r.alloc(64), *b3 = r.alloc(64);

    ASSERT_NO_FATAL_FAILURE(unexpected(0x10002, &sync_req));
    ASSERT_FALSE(sync_req.empty());
    EXPECT_EQ(0x4000u, sync_req.front());
    EXPECT_EQ(2u, softnic_test_hw_unexp(r.srq));
    EXPECT_FALSE(softnic_test_in_phase(r.srq));

    manual();
    ASSERT_EQ(0, r.add_tag(7, ~0ull, b1, 64, 70, 0x10001, nullptr, 1));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    EXPECT_FALSE(softnic_test_in_phase(r.srq)) << "0x10001 is not 2";
    ASSERT_EQ(0, r.add_tag(8, ~0ull, b2, 64, 80, 0x10002, nullptr, 2));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    EXPECT_TRUE(softnic_test_in_phase(r.srq));
    ASSERT_EQ(0, r.add_tag(9, ~0ull, b3, 64, 90, 2, nullptr, 3));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(3u, v.size());
    EXPECT_EQ((unsigned)IBV_WC_TM_SYNC_REQ, v[0].wc_flags);
    EXPECT_EQ((unsigned)IBV_WC_TM_SYNC_REQ, v[1].wc_flags);
    EXPECT_EQ(0u, v[2].wc_flags);

    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 8, 0, "m"), 1));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    v = drain(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_TM_RECV(v[0], 80, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, 8, 0, 1);
}


/* ----- 8. a failed DEL and the match that consumed its entry ----- */

/* Nothing on a NIC orders the failed DEL of an entry against the
 * completion of the message that consumed it (issue 36 item 6).  The
 * software NIC gives the match first, unless it holds single-packet
 * matches back (UCX_RC_TM_SOFT_HOLD_MATCH): then the DEL comes first. */
class soft_mlx5_hold : public soft_pair {
protected:
    uint32_t h = 0;

    void set_attr(tm_dev_attr_t &a) override {
        a.soft_hold_match = 1;
    }

    /* An entry for tag 5 (receive wr_id 66), listed */
    void list_entry(char *buf) {
        ASSERT_EQ(0, r.add_tag(5, ~0ull, buf, 64, 66, 0, &h, 1));
        ASSERT_EQ(0, softnic_test_step_op(r.srq));
        ASSERT_EQ(1u, drain(r).size());
    }
};

class soft_mlx5_hold_thread : public soft_mlx5_hold {
protected:
    void set_attr(tm_dev_attr_t &a) override {
        a.soft_hold_match = 1;
        a.soft_progress   = TM_DEV_SOFT_PROGRESS_THREAD;
    }

    /* Lists an entry for tag 5 (receive wr_id 66) and sends it a
     * single-packet message */
    void list_and_send(char *buf) {
        tm_dev_wc_t wc;

        ASSERT_EQ(0, r.add_tag(5, ~0ull, buf, 64, 66, 0, &h, 1));
        ASSERT_TRUE(r.next(&wc));
        ASSERT_EQ(IBV_WC_TM_ADD, wc.opcode);
        ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 5, 7, "hello"), 1));
    }
};

static void expect_failed_del(const tm_dev_wc_t &wc, uint64_t wr_id)
{
    EXPECT_EQ(IBV_WC_TM_DEL, wc.opcode);
    EXPECT_EQ(IBV_WC_TM_ERR, wc.status);
    EXPECT_EQ(wr_id, wc.wr_id);
}

/* Without the setting: the match, then the DEL that found its entry gone */
TEST_F(soft_mlx5_list, failed_del_completes_after_the_match)
{
    char *buf = r.alloc(64);
    uint32_t h, h2;

    manual();
    ASSERT_EQ(0, r.add_tag(5, ~0ull, buf, 64, 66, 0, &h, 1));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(1u, drain(r).size());
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 5, 7, "hello"), 1));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, h, 0, 9));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));

    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(2u, v.size());
    EXPECT_TM_RECV(v[0], 66, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, 5, 7, 5);
    expect_failed_del(v[1], 9);
    ASSERT_EQ(0, r.add_tag(6, ~0ull, buf, 64, 67, 0, &h2, 2));
    EXPECT_EQ(h, h2) << "both completions polled: the entry is free";
}

/* With it: the DEL processed while the match is held completes first */
TEST_F(soft_mlx5_hold, failed_del_completes_before_the_held_match)
{
    char *buf = r.alloc(64);
    uint32_t h2;

    manual();
    ASSERT_NO_FATAL_FAILURE(list_entry(buf));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 5, 7, "hello"), 1));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, h, 0, 9));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));

    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(2u, v.size());
    expect_failed_del(v[0], 9);
    EXPECT_TM_RECV(v[1], 66, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, 5, 7, 5);
    EXPECT_EQ("hello", std::string(buf, 5));
    ASSERT_EQ(0, r.add_tag(6, ~0ull, buf, 64, 67, 0, &h2, 2));
    EXPECT_EQ(h, h2) << "both completions polled: the entry is free";
}

/* A held match is not lost: a poll that finds nothing else takes it, and
 * a DEL processed after that completes after it */
TEST_F(soft_mlx5_hold, held_match_is_polled_without_a_del)
{
    char *buf = r.alloc(64);

    manual();
    ASSERT_NO_FATAL_FAILURE(list_entry(buf));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 5, 7, "hello"), 1));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, h, 0, 9));

    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_TM_RECV(v[0], 66, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, 5, 7, 5);
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    v = drain(r);
    ASSERT_EQ(1u, v.size());
    expect_failed_del(v[0], 9);
}

/* A later completion does not overtake a held match: an unexpected
 * message after it completes after it, and so does a DEL processed once
 * that completion released it */
TEST_F(soft_mlx5_hold, unexpected_message_does_not_overtake_a_held_match)
{
    char *buf = r.alloc(64);

    manual();
    r.post_rbufs(1, 64, 100);
    ASSERT_NO_FATAL_FAILURE(list_entry(buf));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 5, 7, "hello"), 1));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 6, 8, "world"), 2));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, h, 0, 9));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));

    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(3u, v.size());
    EXPECT_TM_RECV(v[0], 66, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, 5, 7, 5);
    EXPECT_EQ(IBV_WC_SUCCESS, v[1].status);
    EXPECT_EQ(100u, v[1].wr_id) << "the unexpected one, untagged buffer";
    EXPECT_EQ(0u, v[1].wc_flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID));
    expect_failed_del(v[2], 9);
}

/* With the engine thread: the match is held once the engine took the
 * message (the sender's SEND completed); a DEL posted before the receiver
 * polls completes first */
TEST_F(soft_mlx5_hold_thread, failed_del_completes_before_the_held_match)
{
    char *buf = r.alloc(64);
    tm_dev_wc_t wc;

    ASSERT_NO_FATAL_FAILURE(list_and_send(buf));
    ASSERT_TRUE(s.next(&wc));
    ASSERT_EQ(IBV_WC_SUCCESS, wc.status);
    ASSERT_EQ(0, r.list_op(IBV_WR_TAG_DEL, h, 0, 9));

    ASSERT_TRUE(r.next(&wc));
    expect_failed_del(wc, 9);
    ASSERT_TRUE(r.next(&wc));
    EXPECT_TM_RECV(wc, 66, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, 5, 7, 5);
}

/* ... and without a DEL the poll takes the held match */
TEST_F(soft_mlx5_hold_thread, held_match_is_polled_without_a_del)
{
    char *buf = r.alloc(64);
    tm_dev_wc_t wc;

    ASSERT_NO_FATAL_FAILURE(list_and_send(buf));
    ASSERT_TRUE(r.next(&wc));
    EXPECT_TM_RECV(wc, 66, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, 5, 7, 5);
    EXPECT_EQ("hello", std::string(buf, 5));
}
