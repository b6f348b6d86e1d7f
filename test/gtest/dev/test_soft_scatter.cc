/*
 * List entries of two scatter entries (tm_caps.max_sge 2, a software NIC
 * setting; mlx5 takes one): the device places a matched message across
 * them in order, whatever places it (an eager copy, the rendezvous read,
 * the headers of a rendezvous left to software), and checks each key.
 */
#include "soft_fixture.h"

using namespace soft_test;

namespace {

/* An ADD whose entry is the given pieces of the arena */
int add_scattered(node &n, uint64_t tag, const std::vector<ibv_sge> &sges,
                  uint64_t recv_wr_id)
{
    std::vector<ibv_sge> sg_list = sges;
    struct ibv_ops_wr wr, *bad = nullptr;

    memset(&wr, 0, sizeof(wr));
    wr.opcode            = IBV_WR_TAG_ADD;
    wr.flags             = IBV_OPS_TM_SYNC;
    wr.tm.add.recv_wr_id = recv_wr_id;
    wr.tm.add.sg_list    = sg_list.data();
    wr.tm.add.num_sge    = (int)sg_list.size();
    wr.tm.add.tag        = tag;
    wr.tm.add.mask       = ~0ull;
    return tm_dev_post_srq_ops(n.srq, &wr, &bad);
}

ibv_sge piece(node &n, char *buf, uint32_t len)
{
    return ibv_sge{(uintptr_t)buf, len, n.mr->lkey};
}

std::string pattern(size_t len, int seed)
{
    std::string s(len, 0);
    for (size_t i = 0; i < len; ++i) {
        s[i] = (char)(i * 13 + seed);
    }
    return s;
}

} // namespace

/* mlx5's one scatter entry is the default: two are refused at post */
TEST_F(soft_pair, list_entries_take_one_scatter_entry_by_default)
{
    tm_dev_caps_t caps;
    char *a = r.alloc(64), *b = r.alloc(64);

    tm_dev_query(r.dev, &caps);
    EXPECT_EQ(1, caps.tm.max_sge);
    EXPECT_EQ(EINVAL, add_scattered(r, 1, {piece(r, a, 64), piece(r, b, 64)},
                                    7));
    EXPECT_EQ(0u, softnic_test_listed_tags(r.srq));
    EXPECT_EQ(0, add_scattered(r, 1, {piece(r, a, 64)}, 7));
}

class soft_pair_two_sge : public soft_pair {
    void set_attr(tm_dev_attr_t &a) override { a.soft_tm_max_sge = 2; }
};

TEST_F(soft_pair_two_sge, eager_is_placed_across_the_entries)
{
    tm_dev_caps_t caps;
    char *a = r.alloc(100), *b = r.alloc(1000);
    std::string data = pattern(300, 1);

    tm_dev_query(r.dev, &caps);
    EXPECT_EQ(2, caps.tm.max_sge);
    memset(a, 0, 100);
    memset(b, 'x', 1000);
    ASSERT_EQ(0, add_scattered(r, 5, {piece(r, a, 100), piece(r, b, 1000)},
                               50));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 5, 6, data), 1));

    tm_dev_wc_t wc;
    ASSERT_TRUE(r.next(&wc));
    EXPECT_TM_RECV(wc, 50, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, 5, 6, 300);
    EXPECT_EQ(data.substr(0, 100), std::string(a, 100));
    EXPECT_EQ(data.substr(100), std::string(b, 200));
    EXPECT_EQ('x', b[200]) << "nothing past the message";
}

/* Longer than both entries together: a length error, as with one */
TEST_F(soft_pair_two_sge, eager_longer_than_all_entries_is_length_error)
{
    char *a = r.alloc(64), *b = r.alloc(64);

    ASSERT_EQ(0, add_scattered(r, 5, {piece(r, a, 64), piece(r, b, 64)}, 50));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 5, 6, pattern(129, 2)), 1));

    tm_dev_wc_t wc;
    ASSERT_TRUE(r.next(&wc));
    EXPECT_NE(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(0u, softnic_test_listed_tags(r.srq)) << "the entry is consumed";
}

/* Each entry's key is checked: a bad one on the second fails the match */
TEST_F(soft_pair_two_sge, bad_key_on_the_second_entry_is_protection_error)
{
    char *a = r.alloc(64), *b = r.alloc(64);
    ibv_sge second = piece(r, b, 64);

    second.lkey ^= 0x100;
    ASSERT_EQ(0, add_scattered(r, 5, {piece(r, a, 64), second}, 50));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 5, 6, pattern(100, 3)), 1));

    tm_dev_wc_t wc;
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_LOC_PROT_ERR, wc.status);
}

/* The device's rendezvous read fills the entries in order */
TEST_F(soft_pair_two_sge, rndv_is_read_across_the_entries)
{
    const uint32_t len = 100000;
    char *src = s.alloc(len), *a = r.alloc(60000), *b = r.alloc(60000);
    std::string data = pattern(len, 4);

    memcpy(src, data.data(), len);
    s.post_rbufs(1, 256, 700);               /* where the FIN lands */
    ASSERT_EQ(0, add_scattered(r, 9, {piece(r, a, 60000),
                                      piece(r, b, 60000)}, 88));
    ASSERT_EQ(0, s.send(cs, rndv_msg(9, 3, src, s.mr->rkey, len), 11));

    tm_dev_wc_t wc;
    ASSERT_TRUE(r.next(&wc));
    EXPECT_TM_RECV(wc, 88, IBV_WC_TM_MATCH, 9, 3, 0);
    ASSERT_TRUE(r.next(&wc));
    EXPECT_TM_RECV(wc, 88, IBV_WC_TM_DATA_VALID, 0, 0, len);
    EXPECT_EQ(0, memcmp(data.data(), a, 60000));
    EXPECT_EQ(0, memcmp(data.data() + 60000, b, len - 60000));
}

/* A rendezvous longer than the entries is left to software: its headers
 * are placed across them */
TEST_F(soft_pair_two_sge, rndv_headers_are_placed_across_the_entries)
{
    char *src = s.alloc(5000), *a = r.alloc(20), *b = r.alloc(1000);
    std::string req = rndv_msg(3, 4, src, s.mr->rkey, 5000, "userhdr");

    ASSERT_EQ(0, add_scattered(r, 3, {piece(r, a, 20), piece(r, b, 1000)},
                               66));
    ASSERT_EQ(0, s.send(cs, req, 1));

    tm_dev_wc_t wc;
    ASSERT_TRUE(r.next(&wc));
    EXPECT_EQ(IBV_WC_TM_RNDV_INCOMPLETE, wc.status);
    EXPECT_EQ(66u, wc.wr_id);
    EXPECT_EQ(req.size(), wc.byte_len);
    EXPECT_EQ(req.substr(0, 20), std::string(a, 20));
    EXPECT_EQ(req.substr(20), std::string(b, req.size() - 20));
}
