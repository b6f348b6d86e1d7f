/*
 * A send that UCT reported complete is delivered without another call of
 * the sender's.  UCT's short and bcopy sends complete when posted (the data
 * was copied), and on a NIC the posted work goes out while the host
 * computes or blocks; UCP completes MPI sends on that.  Here the sender
 * posts far more than the receiver's ring holds, and from then on only the
 * receiver's worker is progressed.  make check runs it with the software
 * NIC inline (work only in polls) and on its engine thread.
 */
#include "uct_fixture.h"

#include <cstring>

using namespace rc_tm_test;

namespace {

class rc_tm_backlog : public uct_fixture {
protected:
    uct_ep_h ep() { return m_sender.eps.at(0); }

    static size_t pack(void *dest, void *arg)
    {
        auto *src = static_cast<std::vector<char>*>(arg);
        memcpy(dest, src->data(), src->size());
        return src->size();
    }

    static std::vector<char> payload(unsigned i, size_t size)
    {
        std::vector<char> v(size);
        for (size_t j = 0; j < size; ++j) {
            v[j] = (char)(i * 11 + j);
        }
        return v;
    }

    /* Posts sends with post(i) until count went or the sender runs out of
     * resources (without a progress call of its own); how many went */
    unsigned burst(unsigned count, const std::function<ssize_t(unsigned)> &post)
    {
        unsigned i;
        for (i = 0; i < count; ++i) {
            ssize_t ret = post(i);
            if (ret == UCS_ERR_NO_RESOURCE) {
                break;
            }
            EXPECT_GE(ret, 0) << i;
        }
        return i;
    }

    /* Progresses the receiver until the first sent of datas, sent with
     * tags 0x100 + i and immediate data i, reached the unexpected callback:
     * each in order, with its data */
    void expect_unexpected_in_order(const std::vector<std::vector<char>> &datas,
                                    unsigned sent)
    {
        ASSERT_TRUE(progress_until(m_receiver, [&] {
            return m_receiver.unexpected.size() >= sent;
        })) << m_receiver.unexpected.size() << " of " << sent << " arrived";
        for (unsigned i = 0; i < sent; ++i) {
            const unexpected_msg &m = m_receiver.unexpected[i];
            ASSERT_EQ(0x100u + i, m.tag) << "out of order";
            EXPECT_EQ(i, m.imm);
            EXPECT_EQ(datas[i], m.data) << i;
        }
    }

    /* The software NIC's ring for rc_tm's largest SEND (64 KiB) holds
     * 256 KiB: a burst of more than twice that has to wait for room */
    static const size_t RING_BYTES = 256 * 1024;
};

} // namespace

/* Tagged eager bcopy sends the receiver did not post for: each reaches the
 * unexpected callback, in order, with its data */
TEST_F(rc_tm_backlog, eager_bcopy_unexpected)
{
    open();
    /* half a send queue (256 WRs) of these overfills the ring twice */
    const size_t size = 8000;
    std::vector<std::vector<char>> datas;
    for (unsigned i = 0; i < 1024; ++i) {
        datas.push_back(payload(i, size));
    }
    unsigned sent = burst(datas.size(), [&](unsigned i) {
        return uct_ep_tag_eager_bcopy(ep(), 0x100 + i, i, pack, &datas[i], 0);
    });
    ASSERT_GT(sent * size, 2 * RING_BYTES)
        << sent << " sends: the burst fits the ring";

    ASSERT_NO_FATAL_FAILURE(expect_unexpected_in_order(datas, sent));
}

/* Copy sends small enough to go inline (800 B) behind large ones that
 * fill the ring: they wait in the send queue while their send buffer is
 * free again at post, taken by the next send; each arrives, in order,
 * with its own data */
TEST_F(rc_tm_backlog, eager_bcopy_of_inline_size_waits_for_room)
{
    open();
    const unsigned large = 48;  /* 8000 B each: more than the ring holds */
    std::vector<std::vector<char>> datas;
    size_t bytes = 0;
    for (unsigned i = 0; i < 2048; ++i) {
        datas.push_back(payload(i, (i < large) ? 8000 : 800));
    }
    unsigned sent = burst(datas.size(), [&](unsigned i) {
        return uct_ep_tag_eager_bcopy(ep(), 0x100 + i, i, pack, &datas[i], 0);
    });
    for (unsigned i = 0; i < sent; ++i) {
        bytes += datas[i].size();
    }
    ASSERT_GT(sent, large);
    ASSERT_GT(bytes, 2 * RING_BYTES) << sent << " sends: the burst fits the ring";

    ASSERT_NO_FATAL_FAILURE(expect_unexpected_in_order(datas, sent));
}

/* Expected: receives posted first, more than the device lists, each filled
 * by the message of its tag */
TEST_F(rc_tm_backlog, eager_bcopy_expected)
{
    open();
    const size_t size  = 8000;    /* 128 of these overfill the ring twice */
    const unsigned max = 2048;
    std::vector<std::unique_ptr<mapped_buffer>> bufs;
    std::vector<tag_recv> recvs(max);
    std::vector<std::vector<char>> datas;
    for (unsigned i = 0; i < max; ++i) {
        bufs.emplace_back(new mapped_buffer(m_component, m_md, size, 0));
        uct_iov_t iov = bufs[i]->iov(size);
        ASSERT_EQ(UCS_OK, uct_iface_tag_recv_zcopy(m_receiver.iface, 0x200 + i,
                                                   UINT64_MAX, &iov, 1,
                                                   &recvs[i].ctx));
        datas.push_back(payload(i, size));
    }
    unsigned sent = burst(max, [&](unsigned i) {
        return uct_ep_tag_eager_bcopy(ep(), 0x200 + i, 0, pack, &datas[i], 0);
    });
    ASSERT_GT(sent * size, 2 * RING_BYTES)
        << sent << " sends: the burst fits the ring";

    ASSERT_TRUE(progress_until(m_receiver, [&] {
        for (unsigned i = 0; i < sent; ++i) {
            if (recvs[i].completed == 0) {
                return false;
            }
        }
        return true;
    }));
    for (unsigned i = 0; i < sent; ++i) {
        EXPECT_EQ(UCS_OK, recvs[i].status) << i;
        EXPECT_EQ(size, recvs[i].length) << i;
        EXPECT_EQ(0, memcmp(datas[i].data(), bufs[i]->ptr(), size)) << i;
    }
    EXPECT_TRUE(m_receiver.unexpected.empty());
    /* the rest are still posted: TearDown cancels them */
    for (unsigned i = sent; i < max; ++i) {
        uct_iface_tag_recv_cancel(m_receiver.iface, &recvs[i].ctx, 1);
    }
}

/* Active messages, short and bcopy, with a put between them: each put
 * lands before the message posted after it arrives (RC's order) */
TEST_F(rc_tm_backlog, am_and_put_in_order)
{
    open();
    /* half a send queue (256 WRs) of these, a put before each, overfills
     * the ring twice */
    const size_t size = 8000;
    const unsigned max = 600;
    mapped_buffer target(m_component, m_md, max * sizeof(uint64_t), 0);
    std::vector<std::vector<char>> datas;
    for (unsigned i = 0; i < max; ++i) {
        datas.push_back(payload(i, size));
    }
    unsigned sent = burst(max, [&](unsigned i) -> ssize_t {
        uint64_t word = 0xfeed000000000000ull + i;
        ucs_status_t status = uct_ep_put_short(ep(), &word, sizeof(word),
                                               target.addr() + i * 8,
                                               target.m_rkey.rkey);
        if (status != UCS_OK) {
            return status;
        }
        if (i % 4 == 0) {
            uint64_t hdr = i;
            return uct_ep_am_short(ep(), 1, hdr, datas[i].data(), 100);
        }
        return uct_ep_am_bcopy(ep(), 1, pack, &datas[i], 0);
    });
    ASSERT_GT(sent * size, 2 * RING_BYTES)
        << sent << " sends: the burst fits the ring";

    ASSERT_TRUE(progress_until(m_receiver, [&] {
        return m_receiver.am_received.size() >= sent;
    })) << m_receiver.am_received.size() << " of " << sent << " arrived";
    const uint64_t *words = (const uint64_t *)target.ptr();
    for (unsigned i = 0; i < sent; ++i) {
        EXPECT_EQ(0xfeed000000000000ull + i, words[i]) << i;
        if (i % 4 != 0) {
            EXPECT_EQ(datas[i], m_receiver.am_received[i]) << i;
        }
    }
}
