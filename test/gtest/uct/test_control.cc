/*
 * The transport's own messages on a connection (issue 36, item 8): the FIN
 * of a rendezvous software finished, and the endpoint check.  Both go from
 * our sending QP to the peer's receive-only QP, where its NIC does
 * rendezvous; a TMH FIN there may be counted as unexpected (the software
 * NIC's harsher reading, docs/verbs-device.md row 23), and then the peer's
 * device stays out of phase and matches nothing more.  So the FIN is a
 * NO_TAG control message and the check a zero-length RDMA WRITE: the
 * peer's device stays in phase and keeps matching.
 */
#include "uct_fixture.h"

#include "../common/softnic_steer.h"

#include <cstring>

using namespace rc_tm_test;

namespace {

class rc_tm_control : public uct_fixture {
protected:
    static size_t pack_buf(void *dest, void *arg)
    {
        auto *src = static_cast<std::vector<char>*>(arg);
        memcpy(dest, src->data(), src->size());
        return src->size();
    }

    tm_dev_srq_t *srq_of(entity &e)
    {
        tm_dev_t *dev;
        tm_dev_srq_t *srq;

        uct_rc_tm_iface_device(e.iface, &dev, &srq);
        EXPECT_TRUE(softnic_is_soft(dev));
        return srq;
    }

    /* A rendezvous from tx that rx's device matches into a shorter
     * receive: rx's software reads it and sends the FIN to tx */
    void rendezvous_finished_in_software(entity &tx, entity &rx, uint64_t tag)
    {
        mapped_buffer sbuf(m_component, m_md, 64 * 1024, 0);
        mapped_buffer rbuf(m_component, m_md, 32 * 1024, 0);
        uint64_t incomplete = counters(rx)[RX_RNDV_INCOMPLETE];
        char header[24];
        tag_recv r;
        test_completion comp;

        sbuf.pattern(3);
        uct_iov_t riov = rbuf.iov(rbuf.m_buf.size());
        ASSERT_EQ(UCS_OK, uct_iface_tag_recv_zcopy(rx.iface, tag, UINT64_MAX,
                                                   &riov, 1, &r.ctx));
        flush(rx);
        memset(header, 'h', sizeof(header));
        uct_iov_t siov = sbuf.iov(sbuf.m_buf.size());
        ucs_status_ptr_t op = uct_ep_tag_rndv_zcopy(tx.eps.at(0), tag, header,
                                                    sizeof(header), &siov, 1,
                                                    0, &comp.comp);
        ASSERT_FALSE(UCS_PTR_IS_ERR(op));
        ASSERT_TRUE(wait_for([&] { return (r.completed > 0) && comp.done; }))
                << "the FIN did not complete the rendezvous";
        EXPECT_EQ(UCS_OK, comp.status);
        EXPECT_EQ(UCS_ERR_MESSAGE_TRUNCATED, r.status);
        EXPECT_TRUE(rbuf.has_pattern(3, rbuf.m_buf.size()));
        EXPECT_EQ(incomplete + 1, counters(rx)[RX_RNDV_INCOMPLETE])
                << "not finished in software";
    }

    /* rx's device still matches: an eager message from tx lands in the
     * receive posted for it, matched by the device, not by software */
    void expect_device_matches(entity &rx, entity &tx, uint64_t tag)
    {
        mapped_buffer rbuf(m_component, m_md, 4096, 0);
        std::vector<char> data(200, 'e');
        uint64_t exp = counters(rx)[RX_EXP];
        uint64_t sw  = counters(rx)[RX_SW_MATCH];
        tag_recv r;

        EXPECT_TRUE(softnic_test_in_phase(srq_of(rx)))
                << "the device is out of phase";
        uct_iov_t iov = rbuf.iov(rbuf.m_buf.size());
        ASSERT_EQ(UCS_OK, uct_iface_tag_recv_zcopy(rx.iface, tag, UINT64_MAX,
                                                   &iov, 1, &r.ctx));
        flush(rx);
        ssize_t packed;
        ASSERT_TRUE(wait_for([&] {
            packed = uct_ep_tag_eager_bcopy(tx.eps.at(0), tag, 0, pack_buf,
                                            &data, 0);
            return packed != UCS_ERR_NO_RESOURCE;
        }));
        ASSERT_EQ((ssize_t)data.size(), packed);
        ASSERT_TRUE(wait_for([&] { return r.completed > 0; }));
        EXPECT_EQ(UCS_OK, r.status);
        EXPECT_EQ(0, memcmp(data.data(), rbuf.ptr(), data.size()));
        EXPECT_EQ(exp + 1, counters(rx)[RX_EXP]) << "not matched by the device";
        EXPECT_EQ(sw, counters(rx)[RX_SW_MATCH]) << "matched by software";
        EXPECT_TRUE(softnic_test_in_phase(srq_of(rx)));
    }
};

} // namespace

/* Rendezvous finished by the receiver's software, both ways: each FIN
 * lands on the sender's receive-only QP.  The sender's device is never
 * taken out of phase (nothing it counted), and matches what comes next.
 * With a TMH FIN the software NIC counts it, the sender's count stays one
 * behind, and every receive it lists from then on is matched in software. */
TEST_F(rc_tm_control, software_fin_keeps_the_senders_device_matching)
{
    open();
    for (int i = 0; i < 3; ++i) {
        ASSERT_NO_FATAL_FAILURE(rendezvous_finished_in_software(
                m_sender, m_receiver, 0x100 + i));
    }
    ASSERT_NO_FATAL_FAILURE(rendezvous_finished_in_software(
            m_receiver, m_sender, 0x200));
    EXPECT_EQ(0u, softnic_test_hw_unexp(srq_of(m_sender)))
            << "a FIN was counted as unexpected";
    EXPECT_EQ(0u, softnic_test_hw_unexp(srq_of(m_receiver)));

    ASSERT_NO_FATAL_FAILURE(expect_device_matches(m_sender, m_receiver, 0x300));
    ASSERT_NO_FATAL_FAILURE(expect_device_matches(m_receiver, m_sender, 0x301));
}

/* Endpoint checks reach no buffer of the peer's: no untagged buffer taken,
 * nothing counted, no active message or unexpected message, and the peer's
 * device matches what comes next */
TEST_F(rc_tm_control, endpoint_check_keeps_the_peers_device_matching)
{
    open();
    tm_dev_srq_t *srq = srq_of(m_receiver);
    unsigned free_rbufs = softnic_test_free_rbufs(srq);

    for (int i = 0; i < 10; ++i) {
        ASSERT_EQ(UCS_OK, uct_ep_check(m_sender.eps[0], 0, NULL));
        progress();
    }
    flush(m_sender);
    for (int i = 0; i < 100; ++i) {
        progress();
    }
    EXPECT_TRUE(m_sender.ep_errors.empty());
    EXPECT_TRUE(m_receiver.am_received.empty());
    EXPECT_TRUE(m_receiver.unexpected.empty());
    EXPECT_EQ(free_rbufs, softnic_test_free_rbufs(srq))
            << "a check took an untagged buffer";
    EXPECT_EQ(0u, softnic_test_hw_unexp(srq))
            << "a check was counted as unexpected";

    ASSERT_NO_FATAL_FAILURE(expect_device_matches(m_receiver, m_sender, 0x400));
}
