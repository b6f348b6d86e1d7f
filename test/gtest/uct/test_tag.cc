/*
 * rc_tm tag offload at the UCT level, over the software device: what UCP
 * relies on (UCX's own test_tag.cc describes the same contract).
 */
#include "uct_fixture.h"

#include "../common/softnic_steer.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace rc_tm_test;

namespace {

const uint64_t FULL_MASK = UINT64_MAX;

class rc_tm_tag : public uct_fixture {
protected:
    uct_ep_h ep() { return m_sender.eps.at(0); }

    static size_t pack_buf(void *dest, void *arg)
    {
        auto *src = static_cast<std::vector<char>*>(arg);
        memcpy(dest, src->data(), src->size());
        return src->size();
    }

    ucs_status_t post(tag_recv &r, mapped_buffer &buf, uint64_t tag,
                      uint64_t mask = FULL_MASK, size_t length = 0)
    {
        uct_iov_t iov = buf.iov(length ? length : buf.m_buf.size());
        return uct_iface_tag_recv_zcopy(m_receiver.iface, tag, mask, &iov, 1,
                                        &r.ctx);
    }

    void send_eager_bcopy(uint64_t tag, std::vector<char> &data,
                          uint64_t imm = 0)
    {
        ssize_t packed;
        ASSERT_TRUE(wait_for([&] {
            packed = uct_ep_tag_eager_bcopy(ep(), tag, imm, pack_buf, &data, 0);
            return packed != UCS_ERR_NO_RESOURCE;
        }));
        ASSERT_EQ((ssize_t)data.size(), packed);
    }

    ucs_status_ptr_t send_rndv(uint64_t tag, mapped_buffer &buf,
                               test_completion &comp, size_t length = 0)
    {
        uct_iov_t iov = buf.iov(length ? length : buf.m_buf.size());
        char header[24];
        memset(header, 'h', sizeof(header));
        return uct_ep_tag_rndv_zcopy(ep(), tag, header, sizeof(header), &iov, 1,
                                     0, &comp.comp);
    }

    static std::vector<char> pattern(size_t size, uint8_t seed)
    {
        std::vector<char> v(size);
        for (size_t i = 0; i < size; ++i) {
            v[i] = (char)(seed + i * 7);
        }
        return v;
    }
};

} // namespace

TEST_F(rc_tm_tag, eager_short_expected)
{
    open();
    mapped_buffer rbuf(m_component, m_md, 4096, 0);
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, rbuf, 0x1234));

    std::vector<char> data = pattern(m_sender.attr.cap.tag.eager.max_short, 1);
    ASSERT_EQ(UCS_OK, uct_ep_tag_eager_short(ep(), 0x1234, data.data(),
                                             data.size()));
    ASSERT_TRUE(wait_for([&] { return r.completed > 0; }));
    EXPECT_EQ(1, r.consumed);
    EXPECT_EQ(1, r.completed);
    EXPECT_TRUE(r.order_ok) << "tag_consumed_cb must come before completed_cb";
    EXPECT_EQ(UCS_OK, r.status);
    EXPECT_EQ(0x1234u, r.stag);
    EXPECT_EQ(data.size(), r.length);
    EXPECT_EQ(0, memcmp(data.data(), rbuf.ptr(), data.size()));
    EXPECT_EQ(1u, counters(m_receiver)[RX_EXP]);
    EXPECT_EQ(0u, counters(m_receiver)[RX_EAGER_UNEXP]);
}

TEST_F(rc_tm_tag, eager_bcopy_with_imm_expected)
{
    open();
    mapped_buffer rbuf(m_component, m_md, 16384, 0);
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, rbuf, 77));

    std::vector<char> data = pattern(m_sender.attr.cap.tag.eager.max_bcopy, 2);
    send_eager_bcopy(77, data, 0xabcdef0012345678ull);
    ASSERT_TRUE(wait_for([&] { return r.completed > 0; }));
    EXPECT_EQ(UCS_OK, r.status);
    EXPECT_EQ(0xabcdef0012345678ull, r.imm);
    EXPECT_EQ(data.size(), r.length);
    EXPECT_EQ(0, memcmp(data.data(), rbuf.ptr(), data.size()));
    /* app_ctx carries the high half of imm: still an eager message */
    EXPECT_EQ(1u, counters(m_receiver)[RX_EXP]);
    EXPECT_EQ(0u, counters(m_receiver)[RX_RNDV_EXP]);
}

TEST_F(rc_tm_tag, eager_zcopy_expected_with_mask)
{
    open();
    mapped_buffer rbuf(m_component, m_md, 16384, 0);
    mapped_buffer sbuf(m_component, m_md, m_sender.attr.cap.tag.eager.max_zcopy,
                       0);
    sbuf.pattern(3);
    tag_recv r;
    /* Any tag whose high 32 bits are 0x55 */
    ASSERT_EQ(UCS_OK, post(r, rbuf, 0x5500000000ull, 0xffffffff00000000ull));

    test_completion comp;
    uct_iov_t iov = sbuf.iov(sbuf.m_buf.size());
    ucs_status_t status = uct_ep_tag_eager_zcopy(ep(), 0x55000000abull, 9,
                                                 &iov, 1, 0, &comp.comp);
    ASSERT_TRUE((status == UCS_OK) || (status == UCS_INPROGRESS));
    ASSERT_TRUE(wait_for([&] {
        return (r.completed > 0) && ((status == UCS_OK) || comp.done);
    }));
    EXPECT_EQ(0x55000000abull, r.stag);
    EXPECT_EQ(9u, r.imm);
    EXPECT_TRUE(rbuf.has_pattern(3, sbuf.m_buf.size()));
}

TEST_F(rc_tm_tag, eager_unexpected)
{
    open();
    std::vector<char> data = pattern(3000, 4);
    send_eager_bcopy(0x99, data, 5);
    ASSERT_TRUE(wait_for([&] { return !m_receiver.unexpected.empty(); }));
    const unexpected_msg &m = m_receiver.unexpected[0];
    EXPECT_FALSE(m.rndv);
    EXPECT_EQ(0x99u, m.tag);
    EXPECT_EQ(5u, m.imm);
    EXPECT_TRUE(m.flags & UCT_CB_PARAM_FLAG_FIRST);
    EXPECT_FALSE(m.flags & UCT_CB_PARAM_FLAG_MORE);
    EXPECT_EQ(data, m.data);
    EXPECT_EQ(1u, counters(m_receiver)[RX_EAGER_UNEXP]);
}

/* mlx5 fails the QP when an eager message of more than one CQE's 64 bytes
 * is too long for the receive it matched, and its error completion names no
 * receive: the receive must still complete (truncated), and the receives
 * the device held beside it stay posted, in posting order */
/* A receive shorter than an eager message is listed as long as one, so the
 * NIC never matches a message too long for its entry: software reports the
 * truncation and the connection lives on.  A message of several packets
 * (MATCH, then DATA_VALID) and one of a single packet.  On a NIC whose
 * entries take one scatter entry (mlx5) the entry is a bounce segment,
 * copied at completion. */
TEST_F(rc_tm_tag, truncated_eager_with_bounce_segments)
{
    open({{"SOFT_PACKET_SIZE", "256"}, {"SOFT_TM_MAX_SGE", "1"}});
    mapped_buffer rbuf(m_component, m_md, 64, 'x');
    mapped_buffer rbuf2(m_component, m_md, 100, 'x');
    mapped_buffer rbuf3(m_component, m_md, 4096, 0);
    tag_recv r, r2, r3;
    ASSERT_EQ(UCS_OK, post(r, rbuf, 1));
    ASSERT_EQ(UCS_OK, post(r2, rbuf2, 2));
    ASSERT_EQ(UCS_OK, post(r3, rbuf3, 3));
    flush(m_receiver);
    ASSERT_EQ(3u, counters(m_receiver)[POST_DEVICE]);
    EXPECT_EQ(3u, counters(m_receiver)[LIST_BOUNCE]);
    EXPECT_EQ(0u, counters(m_receiver)[LIST_SPILL]);

    std::vector<char> data = pattern(2000, 5), small = pattern(200, 6);
    std::vector<char> next = pattern(1000, 7);
    send_eager_bcopy(1, data);
    send_eager_bcopy(2, small);
    send_eager_bcopy(3, next);
    ASSERT_TRUE(wait_for([&] { return (r.completed > 0) &&
                                      (r2.completed > 0) &&
                                      (r3.completed > 0); }));
    EXPECT_EQ(UCS_ERR_MESSAGE_TRUNCATED, r.status);
    EXPECT_EQ(64u, r.length);
    EXPECT_EQ(0, memcmp(data.data(), rbuf.ptr(), 64));
    EXPECT_EQ(UCS_ERR_MESSAGE_TRUNCATED, r2.status);
    EXPECT_EQ(100u, r2.length);
    EXPECT_EQ(0, memcmp(small.data(), rbuf2.ptr(), 100));
    EXPECT_EQ(UCS_OK, r3.status) << "the connection lives on";
    EXPECT_EQ(next.size(), r3.length);
    EXPECT_EQ(0, memcmp(next.data(), rbuf3.ptr(), next.size()));
    EXPECT_EQ(3u, counters(m_receiver)[RX_EXP]) << "matched by the device";
    EXPECT_EQ(2u, counters(m_receiver)[RX_TRUNCATED]);
}

/* Where entries take two scatter entries (the software NIC), a receive that
 * holds any rendezvous request (240 bytes) is listed as its own buffer and
 * the spill segment behind it: the data lands in place, what did not fit is dropped
 * and reported.  Shorter ones, which may hold a rendezvous request read
 * back from the entry, still take a bounce segment. */
TEST_F(rc_tm_tag, truncated_eager_with_spill_segment)
{
    open({{"SOFT_PACKET_SIZE", "1k"}, {"SOFT_TM_MAX_SGE", "2"}});
    const size_t sizes[] = {300, 400, 64, 4096};
    const size_t sent[]  = {2000, 800, 200, 1000};
    std::vector<std::unique_ptr<mapped_buffer>> rbufs;
    std::vector<std::vector<char>> data;
    tag_recv r[4];

    for (int i = 0; i < 4; ++i) {
        /* a guard byte after each receive: nothing is written past it */
        rbufs.emplace_back(new mapped_buffer(m_component, m_md, sizes[i] + 1,
                                             'x'));
        ASSERT_EQ(UCS_OK, post(r[i], *rbufs.back(), i + 1, FULL_MASK,
                               sizes[i]));
    }
    flush(m_receiver);
    ASSERT_EQ(4u, counters(m_receiver)[POST_DEVICE]);
    EXPECT_EQ(3u, counters(m_receiver)[LIST_SPILL]);
    EXPECT_EQ(1u, counters(m_receiver)[LIST_BOUNCE]) << "64 bytes";

    for (int i = 0; i < 4; ++i) {
        data.push_back(pattern(sent[i], i + 5));
        send_eager_bcopy(i + 1, data.back());
    }
    ASSERT_TRUE(wait_for([&] {
        return std::all_of(r, r + 4, [](const tag_recv &t) {
                               return t.completed > 0; });
    }));
    for (int i = 0; i < 4; ++i) {
        size_t got = std::min(sizes[i], sent[i]);
        EXPECT_EQ((sent[i] > sizes[i]) ? UCS_ERR_MESSAGE_TRUNCATED : UCS_OK,
                  r[i].status) << i;
        EXPECT_EQ(got, r[i].length) << i;
        EXPECT_EQ(0, memcmp(data[i].data(), rbufs[i]->ptr(), got)) << i;
        EXPECT_EQ('x', ((const char*)rbufs[i]->ptr())[sizes[i]]) << i;
    }
    EXPECT_EQ(4u, counters(m_receiver)[RX_EXP]) << "matched by the device";
    EXPECT_EQ(3u, counters(m_receiver)[RX_TRUNCATED]);
}

/* A peer whose eager messages are longer than our SRQ segments (it runs a
 * larger UCX_RC_TM_SEG_SIZE) fails the receiving QP, as mlx5 does, and no
 * completion names the receive the NIC took: it is found by deleting the
 * device's entries, and the others keep their order */
TEST_F(rc_tm_tag, eager_longer_than_our_segments_loses_no_receive)
{
    const config_t receiver = {{"SEG_SIZE", "8k"}};
    open({}, {{"SEG_SIZE", "16k"}}, &receiver);
    mapped_buffer rbuf(m_component, m_md, 8192 - 16, 'x');
    mapped_buffer rbuf2(m_component, m_md, 4096, 0);
    mapped_buffer rbuf3(m_component, m_md, 4096, 0);
    tag_recv r, r2, r3;
    ASSERT_EQ(UCS_OK, post(r, rbuf, 1));
    ASSERT_EQ(UCS_OK, post(r2, rbuf2, 2));
    ASSERT_EQ(UCS_OK, post(r3, rbuf3, 2));
    flush(m_receiver);
    ASSERT_EQ(3u, counters(m_receiver)[POST_DEVICE]);
    ASSERT_EQ(2u, counters(m_receiver)[LIST_BOUNCE] +
                  counters(m_receiver)[LIST_SPILL]) << "r needs neither";

    std::vector<char> data = pattern(12000, 5);
    send_eager_bcopy(1, data);
    ASSERT_TRUE(wait_for([&] { return r.completed > 0; }));
    EXPECT_EQ(UCS_ERR_MESSAGE_TRUNCATED, r.status);
    EXPECT_EQ(0, r2.completed);
    EXPECT_EQ(0, r3.completed);

    /* Over a new connection, the two receives of tag 2 take the next two
     * messages in the order they were posted */
    connect(m_sender, m_receiver);
    uct_ep_h ep2 = m_sender.eps.back();
    std::vector<char> first = pattern(1000, 6), second = pattern(1000, 7);
    for (auto *d : {&first, &second}) {
        ASSERT_TRUE(wait_for([&] {
            return uct_ep_tag_eager_bcopy(ep2, 2, 0, pack_buf, d, 0) !=
                   UCS_ERR_NO_RESOURCE;
        }));
    }
    ASSERT_TRUE(wait_for([&] { return (r2.completed > 0) &&
                                      (r3.completed > 0); }));
    EXPECT_EQ(UCS_OK, r2.status);
    EXPECT_EQ(UCS_OK, r3.status);
    EXPECT_EQ(0, memcmp(first.data(), rbuf2.ptr(), first.size()));
    EXPECT_EQ(0, memcmp(second.data(), rbuf3.ptr(), second.size()));
    EXPECT_EQ(2u, counters(m_receiver)[PROMOTE]) << "listed again";
}

TEST_F(rc_tm_tag, rndv_expected_read_by_device)
{
    open();
    const size_t size = 1024 * 1024;
    mapped_buffer rbuf(m_component, m_md, size, 0);
    mapped_buffer sbuf(m_component, m_md, size, 0);
    sbuf.pattern(6);
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, rbuf, 0x10));

    test_completion comp;
    ucs_status_ptr_t op = send_rndv(0x10, sbuf, comp);
    ASSERT_FALSE(UCS_PTR_IS_ERR(op));
    ASSERT_TRUE(wait_for([&] { return (r.completed > 0) && comp.done; }));
    EXPECT_EQ(UCS_OK, r.status);
    EXPECT_EQ(UCS_OK, comp.status);
    EXPECT_EQ(size, r.length);
    EXPECT_TRUE(rbuf.has_pattern(6, size));
    EXPECT_EQ(1, r.consumed);
    EXPECT_EQ(1u, counters(m_sender)[TX_RNDV]);
    EXPECT_EQ(0u, counters(m_receiver)[RX_RNDV_UNEXP]);
    EXPECT_EQ(1u, counters(m_receiver)[RX_RNDV_EXP]);
    EXPECT_EQ(0u, counters(m_receiver)[RX_EXP]) << "counted as eager";
}

TEST_F(rc_tm_tag, rndv_unexpected_then_get)
{
    open();
    const size_t size = 256 * 1024;
    mapped_buffer sbuf(m_component, m_md, size, 0);
    mapped_buffer rbuf(m_component, m_md, size, 0);
    sbuf.pattern(7);

    test_completion comp;
    ucs_status_ptr_t op = send_rndv(0x20, sbuf, comp);
    ASSERT_FALSE(UCS_PTR_IS_ERR(op));
    ASSERT_TRUE(wait_for([&] { return !m_receiver.unexpected.empty(); }));
    const unexpected_msg m = m_receiver.unexpected[0];
    ASSERT_TRUE(m.rndv);
    EXPECT_EQ(0x20u, m.tag);
    EXPECT_EQ(sbuf.addr(), m.remote_addr);
    EXPECT_EQ(size, m.length);
    EXPECT_EQ(std::vector<char>(24, 'h'), m.data);

    /* What UCP does with an unexpected rendezvous: read with the rkey */
    uct_rkey_bundle_t rkey;
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(m_component, m.rkey_buf.data(), &rkey));
    test_completion get;
    uct_iov_t iov = rbuf.iov(size);
    ucs_status_t status = uct_ep_get_zcopy(m_receiver.eps[0], &iov, 1,
                                           m.remote_addr, rkey.rkey, &get.comp);
    ASSERT_TRUE((status == UCS_OK) || (status == UCS_INPROGRESS));
    ASSERT_TRUE(wait_for([&] { return (status == UCS_OK) || get.done; }));
    EXPECT_TRUE(rbuf.has_pattern(7, size));
    uct_rkey_release(m_component, &rkey);

    /* The sender's operation is then canceled by UCP (it sent its own ack) */
    EXPECT_EQ(UCS_OK, uct_ep_tag_rndv_cancel(ep(), op));
    EXPECT_FALSE(comp.done);
}

TEST_F(rc_tm_tag, rndv_into_smaller_buffer_is_truncated)
{
    open();
    mapped_buffer sbuf(m_component, m_md, 64 * 1024, 0);
    mapped_buffer rbuf(m_component, m_md, 32 * 1024, 0);
    sbuf.pattern(8);
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, rbuf, 0x30));
    test_completion comp;
    ASSERT_FALSE(UCS_PTR_IS_ERR(send_rndv(0x30, sbuf, comp)));
    ASSERT_TRUE(wait_for([&] { return (r.completed > 0) && comp.done; }));
    EXPECT_EQ(UCS_ERR_MESSAGE_TRUNCATED, r.status);
    EXPECT_TRUE(rbuf.has_pattern(8, rbuf.m_buf.size()));
    EXPECT_EQ(1u, counters(m_receiver)[RX_RNDV_INCOMPLETE]);
}

TEST_F(rc_tm_tag, sw_rndv_request_expected_and_unexpected)
{
    open();
    mapped_buffer rbuf(m_component, m_md, 4096, 0);
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, rbuf, 0x40));
    char header[40];
    memset(header, 'q', sizeof(header));
    ASSERT_EQ(UCS_OK, uct_ep_tag_rndv_request(ep(), 0x40, header,
                                              sizeof(header), 0));
    ASSERT_TRUE(wait_for([&] { return r.rndv_req > 0; }));
    EXPECT_EQ(0, r.completed);
    EXPECT_EQ(std::vector<char>(header, header + sizeof(header)),
              r.rndv_header);

    ASSERT_EQ(UCS_OK, uct_ep_tag_rndv_request(ep(), 0x41, header,
                                              sizeof(header), 0));
    ASSERT_TRUE(wait_for([&] { return !m_receiver.unexpected.empty(); }));
    EXPECT_TRUE(m_receiver.unexpected[0].rndv);
    EXPECT_EQ(0u, m_receiver.unexpected[0].remote_addr);
    EXPECT_EQ(std::vector<char>(header, header + sizeof(header)),
              m_receiver.unexpected[0].data);
}

TEST_F(rc_tm_tag, same_buffer_posted_twice)
{
    open();
    mapped_buffer rbuf(m_component, m_md, 4096, 0);
    tag_recv r1, r2;
    ASSERT_EQ(UCS_OK, post(r1, rbuf, 1));
    EXPECT_EQ(UCS_ERR_ALREADY_EXISTS, post(r2, rbuf, 2));
    EXPECT_EQ(UCS_OK, uct_iface_tag_recv_cancel(m_receiver.iface, &r1.ctx, 1));
    /* After a forced cancel the buffer may be posted again */
    EXPECT_EQ(UCS_OK, post(r2, rbuf, 2));
    EXPECT_EQ(UCS_OK, uct_iface_tag_recv_cancel(m_receiver.iface, &r2.ctx, 1));
    flush(m_receiver);
}

/* Without a software list, a full device list refuses receives (UCP then
 * keeps them itself) */
TEST_F(rc_tm_tag, device_list_full_without_software_list)
{
    open({{"LIST_SIZE", "4"}}, {{"TM_SW_LIST_SIZE", "0"}});
    EXPECT_EQ(4u, m_receiver.attr.cap.tag.recv.max_outstanding);
    std::vector<std::unique_ptr<mapped_buffer>> bufs;
    std::vector<tag_recv> recvs(5);
    for (int i = 0; i < 4; ++i) {
        bufs.emplace_back(new mapped_buffer(m_component, m_md, 256, 0));
        ASSERT_EQ(UCS_OK, post(recvs[i], *bufs.back(), i));
    }
    bufs.emplace_back(new mapped_buffer(m_component, m_md, 256, 0));
    EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT, post(recvs[4], *bufs.back(), 4));
    EXPECT_EQ(1u, counters(m_receiver)[LIST_FULL]);

    /* A match frees a slot */
    std::vector<char> data = pattern(100, 1);
    send_eager_bcopy(0, data);
    ASSERT_TRUE(wait_for([&] { return recvs[0].completed > 0; }));
    EXPECT_EQ(UCS_OK, post(recvs[4], *bufs.back(), 4));
    for (int i = 1; i < 5; ++i) {
        uct_iface_tag_recv_cancel(m_receiver.iface, &recvs[i].ctx, 1);
    }
    flush(m_receiver);
}

TEST_F(rc_tm_tag, cancel_non_force_reports_canceled)
{
    open();
    mapped_buffer rbuf(m_component, m_md, 4096, 0);
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, rbuf, 0x50));
    ASSERT_EQ(UCS_OK, uct_iface_tag_recv_cancel(m_receiver.iface, &r.ctx, 0));
    ASSERT_TRUE(wait_for([&] { return r.completed > 0; }));
    EXPECT_EQ(UCS_ERR_CANCELED, r.status);
    EXPECT_EQ(0, r.consumed);

    /* A message for the canceled tag is now unexpected */
    std::vector<char> data = pattern(100, 1);
    send_eager_bcopy(0x50, data);
    ASSERT_TRUE(wait_for([&] { return !m_receiver.unexpected.empty(); }));
    EXPECT_EQ(1, r.completed);
}

TEST_F(rc_tm_tag, cancel_force_never_calls_back)
{
    open();
    mapped_buffer rbuf(m_component, m_md, 4096, 0);
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, rbuf, 0x60));
    ASSERT_EQ(UCS_OK, uct_iface_tag_recv_cancel(m_receiver.iface, &r.ctx, 1));
    std::vector<char> data = pattern(100, 1);
    send_eager_bcopy(0x60, data);
    ASSERT_TRUE(wait_for([&] { return !m_receiver.unexpected.empty(); }));
    flush(m_receiver);
    EXPECT_EQ(0, r.completed);
    EXPECT_EQ(0, r.consumed);
    EXPECT_EQ(1u, counters(m_receiver)[LIST_DEL]);
}

TEST_F(rc_tm_tag, first_posted_matching_receive_wins)
{
    open();
    mapped_buffer b1(m_component, m_md, 1024, 0), b2(m_component, m_md, 1024, 0);
    tag_recv wildcard, exact;
    ASSERT_EQ(UCS_OK, post(wildcard, b1, 0, 0));      /* any tag */
    ASSERT_EQ(UCS_OK, post(exact, b2, 0x70));
    std::vector<char> data = pattern(100, 1);
    send_eager_bcopy(0x70, data);
    ASSERT_TRUE(wait_for([&] { return wildcard.completed > 0; }));
    EXPECT_EQ(0, exact.completed);
    send_eager_bcopy(0x70, data);
    ASSERT_TRUE(wait_for([&] { return exact.completed > 0; }));
}

TEST_F(rc_tm_tag, many_messages_in_order_per_tag)
{
    open();
    const int count = 200;
    std::vector<std::unique_ptr<mapped_buffer>> bufs;
    std::vector<tag_recv> recvs(count);
    for (int i = 0; i < count; ++i) {
        bufs.emplace_back(new mapped_buffer(m_component, m_md, 64, 0));
        ASSERT_EQ(UCS_OK, post(recvs[i], *bufs.back(), 0xabc));
    }
    for (int i = 0; i < count; ++i) {
        std::vector<char> data(8);
        memcpy(data.data(), &i, sizeof(i));
        send_eager_bcopy(0xabc, data);
    }
    ASSERT_TRUE(wait_for([&] { return recvs[count - 1].completed > 0; }));
    for (int i = 0; i < count; ++i) {
        int got;
        memcpy(&got, bufs[i]->ptr(), sizeof(got));
        EXPECT_EQ(i, got) << "receive " << i;
    }
}

/* Two processes: the child receives, the parent sends; addresses travel
 * over a socketpair as UCP would send them over its wireup transport */
TEST_F(rc_tm_tag, two_processes)
{
    int fds[2];
    ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM, 0, fds));
    const size_t size = 512 * 1024;

    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ::close(fds[0]);
        /* Child: its own UCX objects, opened after fork */
        uct_fixture::SetUp();
        uct_md_config_t *config;
        if ((uct_md_config_read(m_component, NULL, NULL, &config) != UCS_OK) ||
            (uct_md_open(m_component, "soft", config, &m_md) != UCS_OK)) {
            _exit(2);
        }
        uct_config_release(config);
        uint64_t features = UCT_IFACE_FEATURE_AM | UCT_IFACE_FEATURE_TAG |
                            UCT_IFACE_FEATURE_GET | UCT_IFACE_FEATURE_PUT;
        if (open_iface(m_receiver, {}, features) != UCS_OK) {
            _exit(3);
        }
        uct_ep_params_t params = {};
        params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
        params.iface      = m_receiver.iface;
        uct_ep_h ep;
        if (uct_ep_create(&params, &ep) != UCS_OK) {
            _exit(4);
        }
        m_receiver.eps.push_back(ep);
        std::vector<char> addr(m_receiver.attr.device_addr_len +
                               m_receiver.attr.ep_addr_len);
        uct_iface_get_device_address(m_receiver.iface,
                                     (uct_device_addr_t*)addr.data());
        uct_ep_get_address(ep, (uct_ep_addr_t*)(addr.data() +
                                                m_receiver.attr.device_addr_len));
        if (write(fds[1], addr.data(), addr.size()) != (ssize_t)addr.size() ||
            read(fds[1], addr.data(), addr.size()) != (ssize_t)addr.size() ||
            uct_ep_connect_to_ep(ep, (uct_device_addr_t*)addr.data(),
                                 (uct_ep_addr_t*)(addr.data() +
                                 m_receiver.attr.device_addr_len)) != UCS_OK) {
            _exit(5);
        }

        mapped_buffer eager_buf(m_component, m_md, 4096, 0);
        mapped_buffer rndv_buf(m_component, m_md, size, 0);
        tag_recv r1, r2;
        if (post(r1, eager_buf, 1) != UCS_OK || post(r2, rndv_buf, 2) != UCS_OK) {
            _exit(6);
        }
        char ready = 'r';
        if (write(fds[1], &ready, 1) != 1) {
            _exit(7);
        }
        bool ok = wait_for([&] { return r1.completed && r2.completed; }, 30);
        int rc  = !ok ? 8 :
                  (r1.status != UCS_OK || r2.status != UCS_OK) ? 9 :
                  !eager_buf.has_pattern(1, 1000) ? 10 :
                  !rndv_buf.has_pattern(2, size) ? 11 : 0;
        /* Stay until the parent saw its rendezvous complete (FIN) */
        if (read(fds[1], &ready, 1) != 1) {
            rc = rc ? rc : 12;
        }
        _exit(rc);
    }

    ::close(fds[1]);
    uct_md_config_t *config;
    ASSERT_EQ(UCS_OK, uct_md_config_read(m_component, NULL, NULL, &config));
    ASSERT_EQ(UCS_OK, uct_md_open(m_component, "soft", config, &m_md));
    uct_config_release(config);
    uint64_t features = UCT_IFACE_FEATURE_AM | UCT_IFACE_FEATURE_TAG |
                        UCT_IFACE_FEATURE_GET | UCT_IFACE_FEATURE_PUT;
    ASSERT_EQ(UCS_OK, open_iface(m_sender, {}, features));
    uct_ep_params_t params = {};
    params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
    params.iface      = m_sender.iface;
    uct_ep_h sep;
    ASSERT_EQ(UCS_OK, uct_ep_create(&params, &sep));
    m_sender.eps.push_back(sep);

    size_t dev_len = m_sender.attr.device_addr_len;
    std::vector<char> peer(dev_len + m_sender.attr.ep_addr_len), mine(peer.size());
    ASSERT_EQ((ssize_t)peer.size(), read(fds[0], peer.data(), peer.size()));
    uct_iface_get_device_address(m_sender.iface, (uct_device_addr_t*)mine.data());
    uct_ep_get_address(sep, (uct_ep_addr_t*)(mine.data() + dev_len));
    ASSERT_EQ((ssize_t)mine.size(), write(fds[0], mine.data(), mine.size()));
    ASSERT_EQ(UCS_OK, uct_ep_connect_to_ep(sep, (uct_device_addr_t*)peer.data(),
                                           (uct_ep_addr_t*)(peer.data() + dev_len)));
    char ready;
    ASSERT_EQ(1, read(fds[0], &ready, 1));

    mapped_buffer ebuf(m_component, m_md, 1000, 0), rbuf(m_component, m_md, size, 0);
    ebuf.pattern(1);
    rbuf.pattern(2);
    std::vector<char> edata(ebuf.ptr(), ebuf.ptr() + 1000);
    send_eager_bcopy(1, edata);
    test_completion comp;
    ASSERT_FALSE(UCS_PTR_IS_ERR(send_rndv(2, rbuf, comp)));
    EXPECT_TRUE(wait_for([&] { return comp.done; }, 30));
    EXPECT_EQ(UCS_OK, comp.status);
    ASSERT_EQ(1, write(fds[0], "x", 1));

    int wstatus;
    ASSERT_EQ(pid, waitpid(pid, &wstatus, 0));
    ASSERT_TRUE(WIFEXITED(wstatus));
    EXPECT_EQ(0, WEXITSTATUS(wstatus)) << "child failed at step "
                                       << WEXITSTATUS(wstatus);
    ::close(fds[0]);
}

/* Without a count on every list operation, the device, out of phase after
 * an unexpected message, asks for one (IBV_WC_TM_SYNC_REQ); once answered,
 * receives posted after the unexpected message are matched in the device */
TEST_F(rc_tm_tag, sync_request_answered)
{
    open({}, {{"TM_SYNC_ALWAYS", "n"}});
    std::vector<char> data = pattern(100, 1);
    send_eager_bcopy(0x80, data);
    ASSERT_TRUE(wait_for([&] { return !m_receiver.unexpected.empty(); }));

    mapped_buffer rbuf(m_component, m_md, 4096, 0);
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, rbuf, 0x81));
    ASSERT_TRUE(wait_for([&] { return counters(m_receiver)[LIST_SYNC] > 0; }));
    flush(m_receiver);

    send_eager_bcopy(0x81, data);
    ASSERT_TRUE(wait_for([&] {
        return (r.completed > 0) || (m_receiver.unexpected.size() > 1);
    }));
    EXPECT_EQ(1, r.completed) << "the device did not match after the sync";
    EXPECT_EQ(1u, m_receiver.unexpected.size());
}

/* Without receives in the device, rdma-core asks for the count on every
 * unexpected message once 0x3fff went unacknowledged by an ADD, and a SYNC
 * does not acknowledge them: answered on every new count, a flood of small
 * messages sent a SYNC per few messages (issue 14).  Answered once per 2^14
 * unexpected messages, as UCX's rc_mlx5 sends its count. */
TEST_F(rc_tm_tag, unexpected_flood_sends_a_count_per_period)
{
    open();
    const unsigned count = 40000;
    unsigned received    = 0;
    uint64_t data        = 0x1234;

    m_receiver.on_eager = [&](void *, size_t length, unsigned, uint64_t stag,
                              uint64_t) {
        EXPECT_EQ(sizeof(data), length);
        EXPECT_EQ(0x77u, stag);
        ++received;
        return UCS_OK;
    };
    for (unsigned i = 0; i < count; ++i) {
        ASSERT_TRUE(wait_for([&] {
            return uct_ep_tag_eager_short(ep(), 0x77, &data, sizeof(data)) !=
                   UCS_ERR_NO_RESOURCE;
        }));
    }
    ASSERT_TRUE(wait_for([&] { return received == count; }));

    std::vector<uint64_t> c = counters(m_receiver);
    EXPECT_EQ(count, c[RX_EAGER_UNEXP]);
    /* one past 2^14 and one past 2^15 (0x3fff go without a request) */
    EXPECT_GE(c[LIST_SYNC], 1u);
    EXPECT_LE(c[LIST_SYNC], count / 16384 + 1);
}

/* The race of the seed documents, at the UCT level: m1 arrives unexpected
 * before b1 is posted; m2 must not match b1 in the device, since software
 * (here the test, acting as UCP) gives m1 to b1 */
TEST_F(rc_tm_tag, message_before_receive_keeps_order)
{
    open();
    std::vector<char> m1 = pattern(100, 1), m2 = pattern(100, 2);
    send_eager_bcopy(0x90, m1);
    ASSERT_TRUE(wait_for([&] { return !m_receiver.unexpected.empty(); }));

    mapped_buffer b1(m_component, m_md, 4096, 0), b2(m_component, m_md, 4096, 0);
    tag_recv r1, r2;
    /* UCP would match m1 against b1 itself and never post b1; posting it
     * anyway must not let the device hand m2 to b1 ahead of m1's owner */
    ASSERT_EQ(UCS_OK, post(r1, b1, 0x90));
    ASSERT_EQ(UCS_OK, post(r2, b2, 0x90));
    send_eager_bcopy(0x90, m2);
    ASSERT_TRUE(wait_for([&] { return r1.completed > 0; }));
    /* In phase after the ADDs carried the count: m2 matches b1, the first
     * posted, and m1 stays with software */
    EXPECT_EQ(0, memcmp(m2.data(), b1.ptr(), m2.size()));
    EXPECT_EQ(m1, m_receiver.unexpected[0].data);
    uct_iface_tag_recv_cancel(m_receiver.iface, &r2.ctx, 1);
    flush(m_receiver);
}

/* Software wins two device receives at once (both added while the device
 * was out of phase) while list operations are full, so both DELs wait in a
 * queue.  The first DEL must not bring the device back in phase: until the
 * second one is done, its receive would be matchable again.  (Found by the
 * stress test with a 4-deep SRQ, whose SYNC requests fill the operations.) */
TEST_F(rc_tm_tag, queued_dels_keep_the_device_out_of_phase)
{
    open({{"LIST_MAX_OPS", "2"}});
    tm_dev_t *dev;
    tm_dev_srq_t *srq;
    uct_rc_tm_iface_device(m_receiver.iface, &dev, &srq);
    ASSERT_TRUE(softnic_is_soft(dev));
    softnic_test_set_mode(dev, SOFTNIC_MODE_MANUAL);

    mapped_buffer b1(m_component, m_md, 4096, 0), b2(m_component, m_md, 4096, 0);
    tag_recv r1, r2;
    ASSERT_EQ(UCS_OK, post(r1, b1, 0xa1));        /* both ADDs wait: the */
    ASSERT_EQ(UCS_OK, post(r2, b2, 0xb2));        /* operations are full */
    std::vector<char> m1 = pattern(100, 1), m2 = pattern(100, 2),
                      m3 = pattern(100, 3);
    send_eager_bcopy(0xa1, m1);
    send_eager_bcopy(0xb2, m2);
    ASSERT_EQ(0, softnic_test_step_any_arrival(srq));                 /* unexpected: out of phase */
    ASSERT_EQ(0, softnic_test_step_any_arrival(srq));
    ASSERT_EQ(0, softnic_test_step_op(srq));           /* listed, not matchable */
    ASSERT_EQ(0, softnic_test_step_op(srq));

    /* Software gives m1 and m2 to the receives and takes both entries back */
    ASSERT_TRUE(wait_for([&] {
        return (r1.completed > 0) && (r2.completed > 0) &&
               (softnic_test_pending_ops(srq) == 2);
    }));
    EXPECT_EQ(2u, counters(m_receiver)[SW_WON]);
    EXPECT_EQ(0, memcmp(m2.data(), b2.ptr(), m2.size()));

    /* The first DEL done, a message for the second receive arrives */
    ASSERT_EQ(0, softnic_test_step_op(srq));
    send_eager_bcopy(0xb2, m3);
    ASSERT_EQ(0, softnic_test_step_any_arrival(srq));
    ASSERT_EQ(0, softnic_test_step_op(srq));
    softnic_test_set_mode(dev, SOFTNIC_MODE_AUTO);

    ASSERT_TRUE(wait_for([&] { return !m_receiver.unexpected.empty(); }))
            << "the device matched m3 to a receive software had completed";
    EXPECT_EQ(m3, m_receiver.unexpected[0].data);
    EXPECT_EQ(1, r2.completed);
    EXPECT_EQ(0, memcmp(m2.data(), b2.ptr(), m2.size()));
    flush(m_receiver);
    EXPECT_EQ(0u, softnic_test_listed_tags(srq));
}

/* A NIC's CQ that overflows is dead (item 8 of issue 13), so the receive CQ
 * must hold everything it can be owed: a completion in every untagged
 * buffer, and for every listed receive its ADD, its MATCH and its final
 * completion.  The receiver polls only once all of it is on the wire, and
 * the software NIC, like a NIC, does not wait for room in the CQ: 33 + 3 *
 * 32 = 129 completions, one past the 128 entries of a CQ sized for one
 * completion per list slot. */
TEST_F(rc_tm_tag, receive_cq_holds_the_worst_case)
{
    const unsigned num_tags = 32, srq_depth = 33;
    const config_t receiver = {{"TX_QUEUE_LEN", "8"},
                               {"TX_CQ_MODERATION", "2"}};
    open({{"LIST_SIZE", std::to_string(num_tags)},
          {"LIST_MAX_OPS", std::to_string(num_tags)},
          {"SRQ_DEPTH", std::to_string(srq_depth)},
          {"SOFT_PACKET_SIZE", "256"}}, {}, &receiver);

    std::vector<std::unique_ptr<mapped_buffer>> bufs;
    std::vector<tag_recv> recvs(num_tags);
    for (unsigned i = 0; i < num_tags; ++i) {
        bufs.emplace_back(new mapped_buffer(m_component, m_md, 4096, 0));
        ASSERT_EQ(UCS_OK, post(recvs[i], *bufs.back(), 0x100 + i));
    }

    /* Two completions per matched message (longer than a packet), then
     * one unexpected message per untagged buffer */
    std::vector<char> data = pattern(1000, 8), small = pattern(100, 9);
    for (unsigned i = 0; i < num_tags + srq_depth; ++i) {
        std::vector<char> &d = (i < num_tags) ? data : small;
        ASSERT_EQ((ssize_t)d.size(),
                  uct_ep_tag_eager_bcopy(ep(), 0x100 + i, 0, pack_buf, &d, 0));
    }

    ASSERT_TRUE(wait_for([&] {
        return (counters(m_receiver)[RX_EXP] == num_tags) &&
               (m_receiver.unexpected.size() == srq_depth);
    })) << "receive CQ overran";
    for (unsigned i = 0; i < num_tags; ++i) {
        EXPECT_EQ(UCS_OK, recvs[i].status) << i;
        EXPECT_EQ(0, memcmp(data.data(), bufs[i]->ptr(), data.size())) << i;
    }
    EXPECT_EQ(0x100u + num_tags, m_receiver.unexpected.front().tag);
}

/* By default the software NIC's SRQ holds 64 untagged buffers (UCX's shared
 * memory FIFO, UCX_RC_TM_SRQ_DEPTH=auto): 64 unexpected messages find one,
 * the next waits on its connection (RNR), and once software posts buffers
 * again every message arrives, in order, none lost */
TEST_F(rc_tm_tag, soft_srq_posts_64_buffers_and_later_messages_wait)
{
    const unsigned count = 100;
    open();
    tm_dev_t *dev;
    tm_dev_srq_t *srq;
    uct_rc_tm_iface_device(m_receiver.iface, &dev, &srq);
    ASSERT_TRUE(softnic_is_soft(dev));
    softnic_test_set_mode(dev, SOFTNIC_MODE_MANUAL);

    std::vector<std::vector<char>> data;
    for (unsigned i = 0; i < count; ++i) {
        data.push_back(pattern(64 + i, (uint8_t)i));
        send_eager_bcopy(0x300 + i, data.back());
    }
    unsigned placed = 0;
    while (softnic_test_step_any_arrival(srq) == 0) {
        ++placed;
    }
    EXPECT_EQ(64u, placed);
    softnic_test_set_mode(dev, SOFTNIC_MODE_AUTO);

    ASSERT_TRUE(wait_for([&] { return m_receiver.unexpected.size() == count; }));
    for (unsigned i = 0; i < count; ++i) {
        EXPECT_EQ(0x300u + i, m_receiver.unexpected[i].tag) << i;
        EXPECT_EQ(data[i], m_receiver.unexpected[i].data) << i;
    }
}
