/*
 * A rendezvous the device leaves to software (IBV_WC_TM_RNDV_INCOMPLETE:
 * the posted buffer is shorter than the data), over a packet, so mlx5 may
 * complete it in two CQEs: CONSUMED_SW_RNDV (MATCH only), then a final one
 * that is either EXPECTED (DATA_VALID) or MSG_COMPLETION_CANCELED, which
 * says MATCH | DATA_VALID again, with opcode 0 and no QP number in its
 * no-packet form (issue 36 item 7; UCX_RC_TM_SOFT_RNDV_FINAL).  Either way
 * the receive completes once, truncated, with what fits, and the sender's
 * operation completes.
 */
#include "uct_fixture.h"

using namespace rc_tm_test;

namespace {

class rc_tm_rndv_incomplete : public uct_fixture,
                              public testing::WithParamInterface<const char*> {
protected:
    void SetUp() override
    {
        uct_fixture::SetUp();
        /* every rendezvous request is longer than a packet */
        open({{"SOFT_PACKET_SIZE", "16"}, {"SOFT_RNDV_FINAL", GetParam()}});
    }

    void rndv_into_smaller_buffer(uint64_t tag, uint8_t seed)
    {
        mapped_buffer sbuf(m_component, m_md, 64 * 1024, 0);
        mapped_buffer rbuf(m_component, m_md, 32 * 1024, 0);
        sbuf.pattern(seed);
        tag_recv r;
        uct_iov_t riov = rbuf.iov(rbuf.m_buf.size());
        ASSERT_EQ(UCS_OK, uct_iface_tag_recv_zcopy(m_receiver.iface, tag,
                                                   UINT64_MAX, &riov, 1,
                                                   &r.ctx));

        test_completion comp;
        uct_iov_t siov = sbuf.iov(sbuf.m_buf.size());
        char header[24] = {};
        ucs_status_ptr_t op = uct_ep_tag_rndv_zcopy(m_sender.eps.at(0), tag,
                                                    header, sizeof(header),
                                                    &siov, 1, 0, &comp.comp);
        ASSERT_FALSE(UCS_PTR_IS_ERR(op));
        ASSERT_TRUE(wait_for([&] { return (r.completed > 0) && comp.done; }));
        flush(m_receiver);
        flush(m_sender);
        EXPECT_EQ(1, r.consumed);
        EXPECT_EQ(1, r.completed);
        EXPECT_TRUE(r.order_ok);
        EXPECT_EQ(UCS_ERR_MESSAGE_TRUNCATED, r.status);
        EXPECT_EQ(tag, r.stag);
        EXPECT_TRUE(rbuf.has_pattern(seed, rbuf.m_buf.size()));
        EXPECT_EQ(UCS_OK, comp.status);
    }
};

} // namespace

TEST_P(rc_tm_rndv_incomplete, completes_once_and_frees_its_entry)
{
    rndv_into_smaller_buffer(0x60, 3);
    /* the entry was freed once: the next receive is listed and matched */
    rndv_into_smaller_buffer(0x61, 4);
    EXPECT_EQ(2u, counters(m_receiver)[RX_RNDV_INCOMPLETE]);
    EXPECT_EQ(2u, counters(m_receiver)[POST_DEVICE]);
}

INSTANTIATE_TEST_SUITE_P(final_cqe, rc_tm_rndv_incomplete,
                         testing::Values("canceled", "expected"));
