/*
 * A software rendezvous request (uct_ep_tag_rndv_request) that matches a
 * posted receive: rndv_cb gets the request's header, and UCT promises where
 * it is.  Without UCT_TAG_RECV_CB_INLINE_DATA the header points into the
 * receive's own buffer (UCP then reads it there, or, for device memory,
 * packs it from there); with the flag it may be anywhere.  The receive
 * listed in the device as itself, through a bounce segment, and matched in
 * software from the device's unexpected message.
 */
#include "uct_fixture.h"

#include <cstring>

using namespace rc_tm_test;

namespace {

class rc_tm_rndv_request : public uct_fixture {
protected:
    static const size_t HEADER_LEN = 40;

    /* Posts a receive of length bytes for tag, sends a request with a
     * header to it, and checks the header rndv_cb got against the promise */
    void request_matches(size_t length, uint64_t tag, tag_recv &r)
    {
        mapped_buffer rbuf(m_component, m_md, length, 'x');
        uct_iov_t iov = rbuf.iov(length);
        ASSERT_EQ(UCS_OK, uct_iface_tag_recv_zcopy(m_receiver.iface, tag,
                                                   UINT64_MAX, &iov, 1,
                                                   &r.ctx));
        char header[HEADER_LEN];
        memset(header, 'q', sizeof(header));
        ASSERT_EQ(UCS_OK, uct_ep_tag_rndv_request(m_sender.eps.at(0), tag,
                                                  header, sizeof(header), 0));
        ASSERT_TRUE(wait_for([&] { return r.rndv_req > 0; }));
        EXPECT_EQ(UCS_OK, r.status);
        EXPECT_EQ(0, r.completed);
        EXPECT_EQ(std::vector<char>(header, header + sizeof(header)),
                  r.rndv_header);
        if (!(r.rndv_flags & UCT_TAG_RECV_CB_INLINE_DATA)) {
            EXPECT_EQ(rbuf.ptr(), r.rndv_header_ptr)
                    << "not inline data, so the receive's buffer";
            EXPECT_EQ(0, memcmp(header, rbuf.ptr(), sizeof(header)));
        }
    }
};

} // namespace

TEST_F(rc_tm_rndv_request, receive_listed_as_itself)
{
    open();
    tag_recv r;
    request_matches(4096, 0x50, r);
    EXPECT_EQ(1u, counters(m_receiver)[RX_RNDV_REQ_EXP]);
}

/* mlx5's entries take one scatter entry: a short receive is listed as a
 * bounce segment as long as an eager message, and the request lands there */
TEST_F(rc_tm_rndv_request, receive_listed_with_a_bounce_segment)
{
    open({{"SOFT_TM_MAX_SGE", "1"}});
    tag_recv r;
    request_matches(HEADER_LEN + 24, 0x51, r);
    EXPECT_EQ(1u, counters(m_receiver)[LIST_BOUNCE]);
    EXPECT_EQ(1u, counters(m_receiver)[RX_RNDV_REQ_EXP]);
}

/* The device's list holds one entry: the second receive is matched in
 * software from the device's unexpected message, whose buffer is the SRQ's */
TEST_F(rc_tm_rndv_request, receive_matched_in_software)
{
    open({{"LIST_SIZE", "1"}});
    mapped_buffer first(m_component, m_md, 4096, 0);
    uct_iov_t iov = first.iov(4096);
    tag_recv r0, r;
    ASSERT_EQ(UCS_OK, uct_iface_tag_recv_zcopy(m_receiver.iface, 0x52,
                                               UINT64_MAX, &iov, 1, &r0.ctx));
    request_matches(4096, 0x53, r);
    EXPECT_EQ(1u, counters(m_receiver)[POST_SW]);
    EXPECT_EQ(1u, counters(m_receiver)[RX_SW_MATCH]);
    EXPECT_EQ(UCS_OK, uct_iface_tag_recv_cancel(m_receiver.iface, &r0.ctx, 1));
}
