/*
 * uct.h, for every zero-copy operation: "If iovcnt is zero, the data is
 * considered empty".  So an operation with no iov (and no iov array) moves
 * its header alone, or nothing, and completes as one with data would.
 */
#include "uct_fixture.h"

#include <cstring>

using namespace rc_tm_test;

namespace {

class rc_tm_empty_iov : public uct_fixture {
protected:
    uct_ep_h ep() { return m_sender.eps.at(0); }

    /* The operation's status, and its completion when it was deferred */
    bool completes(ucs_status_t status, test_completion &comp)
    {
        if (status == UCS_OK) {
            return true;
        }
        EXPECT_EQ(UCS_INPROGRESS, status);
        return (status == UCS_INPROGRESS) &&
               wait_for([&] { return comp.done > 0; }) &&
               (comp.status == UCS_OK);
    }

    ucs_status_t post_empty(tag_recv &r, uint64_t tag)
    {
        return uct_iface_tag_recv_zcopy(m_receiver.iface, tag, UINT64_MAX,
                                        nullptr, 0, &r.ctx);
    }
};

} // namespace

TEST_F(rc_tm_empty_iov, am_zcopy_sends_its_header_alone)
{
    open();
    uint64_t header = 0x1122334455667788ull;
    test_completion comp;

    ASSERT_TRUE(completes(uct_ep_am_zcopy(ep(), 3, &header, sizeof(header),
                                          nullptr, 0, 0, &comp.comp),
                          comp));
    ASSERT_TRUE(wait_for([&] { return !m_receiver.am_received.empty(); }));
    const std::vector<char> &got = m_receiver.am_received[0];
    ASSERT_EQ(sizeof(header), got.size());
    EXPECT_EQ(0, memcmp(&header, got.data(), sizeof(header)));
}

TEST_F(rc_tm_empty_iov, put_and_get_zcopy_move_nothing)
{
    open();
    mapped_buffer remote(m_component, m_md, 64, 'r');
    test_completion put, get;

    ASSERT_TRUE(completes(uct_ep_put_zcopy(ep(), nullptr, 0, remote.addr(),
                                           remote.m_rkey.rkey, &put.comp),
                          put));
    ASSERT_TRUE(completes(uct_ep_get_zcopy(ep(), nullptr, 0, remote.addr(),
                                           remote.m_rkey.rkey, &get.comp),
                          get));
    EXPECT_EQ(std::string(64, 'r'), std::string(remote.ptr(), 64));
}

/* An empty receive takes an empty eager message, matched by the device */
TEST_F(rc_tm_empty_iov, eager_zcopy_into_an_empty_receive)
{
    open();
    tag_recv r;
    test_completion comp;

    ASSERT_EQ(UCS_OK, post_empty(r, 0x77));
    ASSERT_TRUE(completes(uct_ep_tag_eager_zcopy(ep(), 0x77, 5, nullptr, 0,
                                                 0, &comp.comp),
                          comp));
    ASSERT_TRUE(wait_for([&] { return r.completed > 0; }));
    EXPECT_EQ(UCS_OK, r.status);
    EXPECT_EQ(0x77u, r.stag);
    EXPECT_EQ(5u, r.imm);
    EXPECT_EQ(0u, r.length);
    EXPECT_EQ(1u, counters(m_receiver)[RX_EXP]);
}

/* Empty receives share no buffer: two at once are two receives, each
 * taking its own message */
TEST_F(rc_tm_empty_iov, two_empty_receives_at_once)
{
    open();
    tag_recv r1, r2;
    char none = 0;

    ASSERT_EQ(UCS_OK, post_empty(r1, 1));
    ASSERT_EQ(UCS_OK, post_empty(r2, 2));
    ASSERT_EQ(UCS_OK, uct_ep_tag_eager_short(ep(), 2, &none, 0));
    ASSERT_EQ(UCS_OK, uct_ep_tag_eager_short(ep(), 1, &none, 0));
    ASSERT_TRUE(wait_for([&] {
        return (r1.completed > 0) && (r2.completed > 0);
    }));
    EXPECT_EQ(1u, r1.stag);
    EXPECT_EQ(2u, r2.stag);
    EXPECT_EQ(UCS_OK, r1.status);
    EXPECT_EQ(UCS_OK, r2.status);
}

/* A rendezvous of no data: the device reads nothing and both sides
 * complete */
TEST_F(rc_tm_empty_iov, rndv_zcopy_of_no_data)
{
    open();
    tag_recv r;
    test_completion comp;
    char header[16];

    memset(header, 'h', sizeof(header));
    ASSERT_EQ(UCS_OK, post_empty(r, 0x99));
    ucs_status_ptr_t op = uct_ep_tag_rndv_zcopy(ep(), 0x99, header,
                                                sizeof(header), nullptr, 0,
                                                0, &comp.comp);
    ASSERT_FALSE(UCS_PTR_IS_ERR(op)) << ucs_status_string(UCS_PTR_STATUS(op));
    ASSERT_TRUE(wait_for([&] { return (r.completed > 0) && comp.done; }));
    EXPECT_EQ(UCS_OK, r.status);
    EXPECT_EQ(0u, r.length);
    EXPECT_EQ(UCS_OK, comp.status);
}
