/*
 * Each operation at the limit the interface reports (uct_iface_attr_t),
 * which must work, the peer getting it intact (rc_tm_limits); and, where
 * UCX checks the parameters of calls (ENABLE_PARAMS_CHECK in its build,
 * RC_TM_UCX_PARAMS_CHECK here), one past it, and every other parameter
 * UCX's rc transports refuse (rc_tm_params_check): UCS_ERR_INVALID_PARAM,
 * an error that names the call and the limit, in UCX's words, and nothing
 * on the wire.  That suite is compiled only where UCX checks: elsewhere the
 * checks compile away, as UCX's own, and the caller promises what uct.h
 * asks.
 */
#include "uct_fixture.h"
#include "../common/ucx_log_capture.h"

#include <uct/api/version.h>

#include <cstring>
#include <string>

using namespace rc_tm_test;

namespace {

const uint64_t TAG         = 0x7a65;
const uint8_t  AM_ID       = 3;
const uint8_t  SENTINEL_ID = 9;
const uint64_t SENTINEL    = 0x5e471e15e471e1ull;
/* rendezvous and receives of at most this, not the device's 2 GiB: their
 * limit is reached with buffers a test can hold */
const size_t   RNDV_MAX    = 256 * 1024;

class rc_tm_limits : public uct_fixture {
protected:
    void open_small_rndv()
    {
        open({}, {{"TM_RNDV_MAX", std::to_string(RNDV_MAX)}});
        ASSERT_EQ(RNDV_MAX, m_sender.attr.cap.tag.rndv.max_zcopy);
        ASSERT_EQ(RNDV_MAX, m_receiver.attr.cap.tag.recv.max_zcopy);
    }

    uct_ep_h ep() { return m_sender.eps.at(0); }
    const uct_iface_attr_t &attr() const { return m_sender.attr; }

    static std::vector<char> pattern(size_t size, uint8_t seed)
    {
        std::vector<char> v(size);
        for (size_t i = 0; i < size; ++i) {
            v[i] = (char)(seed + i * 13);
        }
        return v;
    }

    static size_t pack(void *dest, void *arg)
    {
        auto *src = static_cast<std::vector<char>*>(arg);
        memcpy(dest, src->data(), src->size());
        return src->size();
    }

    static uct_iov_t iov_of(const void *buffer, size_t length)
    {
        uct_iov_t iov = {};
        iov.buffer    = const_cast<void*>(buffer);
        iov.length    = length;
        iov.count     = 1;
        return iov;
    }

    /* A zero-copy send's status: done now, or once its completion came */
    void wait_zcopy(ucs_status_t status, test_completion &comp)
    {
        ASSERT_TRUE((status == UCS_OK) || (status == UCS_INPROGRESS))
                << ucs_status_string(status);
        if (status == UCS_INPROGRESS) {
            ASSERT_TRUE(wait_for([&] { return comp.done != 0; }));
            EXPECT_EQ(UCS_OK, comp.status);
        }
    }

    bool wait_am(size_t count)
    {
        return wait_for([&] { return m_receiver.am_received.size() >= count; });
    }

    /* An AM after the call under test, on its connection: a connection
     * delivers in order, so once this is there, what the call sent is too */
    void send_sentinel()
    {
        size_t before = m_receiver.am_received.size();
        ASSERT_EQ(UCS_OK, uct_ep_am_short(ep(), SENTINEL_ID, SENTINEL, NULL,
                                          0));
        ASSERT_TRUE(wait_am(before + 1));
    }

    /* The receiver got nothing but the sentinel (which it then forgets) */
    void expect_nothing_arrived()
    {
        send_sentinel();
        ASSERT_EQ(1u, m_receiver.am_received.size())
                << "an active message went out";
        ASSERT_EQ(sizeof(SENTINEL), m_receiver.am_received[0].size());
        EXPECT_EQ(0, memcmp(&SENTINEL, m_receiver.am_received[0].data(),
                            sizeof(SENTINEL)));
        EXPECT_TRUE(m_receiver.unexpected.empty())
                << "a tagged message went out";
        m_receiver.am_received.clear();
    }
};

class rc_tm_params_check : public rc_tm_limits {
protected:
    static std::string length_error(const std::string &name, size_t length,
                                    size_t max)
    {
        return "Invalid " + name + " length: " + std::to_string(length) +
               " (expected: <= " + std::to_string(max) + ")";
    }

    static std::string iov_error(const std::string &name, size_t iovcnt,
                                 size_t max)
    {
        return "iovcnt(" + std::to_string(iovcnt) + ") should be limited by " +
               std::to_string(max) + " in " + name;
    }

    static std::string am_id_error()
    {
        return "Invalid active message id (valid range: 0.." +
               std::to_string(UCT_AM_ID_MAX - 1) + ")";
    }

    /* The call was refused, said why in error (and nothing else), and put
     * nothing on the wire */
    void expect_refused(ssize_t status, const ucx_log_capture &log,
                        const std::string &error)
    {
        EXPECT_EQ(UCS_ERR_INVALID_PARAM, status);
        expect_nothing_arrived();
        EXPECT_TRUE(log.has(error)) << "expected: " << error << log.text();
        EXPECT_EQ(1u, log.count()) << log.text();
    }

    void expect_refused(ucs_status_ptr_t op, const ucx_log_capture &log,
                        const std::string &error)
    {
        ASSERT_TRUE(UCS_PTR_IS_ERR(op));
        expect_refused(UCS_PTR_STATUS(op), log, error);
    }
};

} // namespace


/* ----- at the limit: works ----- */

/* uct.h: max_short is the "total maximum size (incl. the header)" */
TEST_F(rc_tm_limits, am_short_of_max_short_with_its_header)
{
    open();
    uint64_t header = 0x1122334455667788ull;
    std::vector<char> payload = pattern(attr().cap.am.max_short -
                                        sizeof(header), 1);

    ASSERT_EQ(UCS_OK, uct_ep_am_short(ep(), AM_ID, header, payload.data(),
                                      payload.size()));
    ASSERT_TRUE(wait_am(1));
    const std::vector<char> &got = m_receiver.am_received[0];
    ASSERT_EQ(attr().cap.am.max_short, got.size());
    EXPECT_EQ(0, memcmp(&header, got.data(), sizeof(header)));
    EXPECT_EQ(0, memcmp(payload.data(), got.data() + sizeof(header),
                        payload.size()));
}

/* As UCP sends them: header, payload and footer in three iovs */
TEST_F(rc_tm_limits, am_short_iov_of_max_short)
{
    open();
    std::vector<char> data = pattern(attr().cap.am.max_short, 2);
    uct_iov_t iov[3] = {iov_of(data.data(), 8),
                        iov_of(data.data() + 8, data.size() - 16),
                        iov_of(data.data() + data.size() - 8, 8)};

    ASSERT_EQ(UCS_OK, uct_ep_am_short_iov(ep(), AM_ID, iov, 3));
    ASSERT_TRUE(wait_am(1));
    EXPECT_EQ(data, m_receiver.am_received[0]);
}

TEST_F(rc_tm_limits, am_bcopy_of_max_bcopy)
{
    open();
    std::vector<char> data = pattern(attr().cap.am.max_bcopy, 3);

    ASSERT_EQ((ssize_t)data.size(),
              uct_ep_am_bcopy(ep(), UCT_AM_ID_MAX - 1, pack, &data, 0));
    ASSERT_TRUE(wait_am(1));
    EXPECT_EQ(data, m_receiver.am_received[0]);
}

/* max_zcopy counts the header too; the header alone is up to max_hdr */
TEST_F(rc_tm_limits, am_zcopy_of_max_hdr_and_max_zcopy)
{
    open();
    ASSERT_LE(attr().cap.am.max_hdr, attr().cap.am.max_zcopy);
    std::vector<char> header = pattern(attr().cap.am.max_hdr, 4);
    mapped_buffer buf(m_component, m_md,
                      attr().cap.am.max_zcopy - header.size(), 0);
    buf.pattern(5);
    std::vector<uct_iov_t> iov(attr().cap.am.max_iov, buf.iov(0));
    iov[0] = buf.iov(buf.m_buf.size());
    test_completion comp;

    wait_zcopy(uct_ep_am_zcopy(ep(), AM_ID, header.data(), header.size(),
                               iov.data(), iov.size(), 0, &comp.comp), comp);
    ASSERT_TRUE(wait_am(1));
    const std::vector<char> &got = m_receiver.am_received[0];
    ASSERT_EQ(attr().cap.am.max_zcopy, got.size());
    EXPECT_EQ(0, memcmp(header.data(), got.data(), header.size()));
    EXPECT_EQ(0, memcmp(buf.ptr(), got.data() + header.size(),
                        buf.m_buf.size()));
}

TEST_F(rc_tm_limits, put_short_bcopy_and_get_bcopy_at_their_limits)
{
    open();
    mapped_buffer remote(m_component, m_md, attr().cap.put.max_bcopy, 0);
    std::vector<char> data = pattern(attr().cap.put.max_short, 6);

    ASSERT_EQ(UCS_OK, uct_ep_put_short(ep(), data.data(), data.size(),
                                       remote.addr(), remote.m_rkey.rkey));
    flush(m_sender);
    EXPECT_EQ(0, memcmp(data.data(), remote.ptr(), data.size()));

    data = pattern(attr().cap.put.max_bcopy, 7);
    ASSERT_EQ((ssize_t)data.size(),
              uct_ep_put_bcopy(ep(), pack, &data, remote.addr(),
                               remote.m_rkey.rkey));
    flush(m_sender);
    EXPECT_EQ(0, memcmp(data.data(), remote.ptr(), data.size()));

    ASSERT_GE(remote.m_buf.size(), attr().cap.get.max_bcopy);
    std::vector<char> got;
    test_completion comp;
    ucs_status_t status = uct_ep_get_bcopy(
            ep(), [](void *arg, const void *src, size_t length) {
                static_cast<std::vector<char>*>(arg)->assign(
                        (const char*)src, (const char*)src + length);
            }, &got, attr().cap.get.max_bcopy, remote.addr(),
            remote.m_rkey.rkey, &comp.comp);
    wait_zcopy(status, comp);
    EXPECT_EQ(std::vector<char>(remote.m_buf.begin(),
                                remote.m_buf.begin() +
                                attr().cap.get.max_bcopy), got);
}

/* The device's largest RDMA operation, 2 GiB on the software NIC: 4 GiB of
 * buffers, so not under the sanitizers, whose shadow of them would be
 * several times that.  Each 8 bytes of a buffer hold their own index,
 * scrambled by seed: a byte-wise pattern costs seconds at this size. */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
static void fill_words(mapped_buffer &buf, uint64_t seed)
{
    uint64_t *word = reinterpret_cast<uint64_t*>(buf.ptr());

    for (size_t i = 0; i < buf.m_buf.size() / sizeof(*word); ++i) {
        word[i] = (i * 0x9e3779b97f4a7c15ull) ^ seed;
    }
}

TEST_F(rc_tm_limits, put_and_get_zcopy_of_max_zcopy)
{
    open();
    ASSERT_EQ(attr().cap.put.max_zcopy, attr().cap.get.max_zcopy);
    ASSERT_EQ(0u, attr().cap.put.max_zcopy % sizeof(uint64_t));
    mapped_buffer local(m_component, m_md, attr().cap.put.max_zcopy, 0);
    mapped_buffer remote(m_component, m_md, attr().cap.put.max_zcopy, 0);
    fill_words(local, 8);

    uct_iov_t iov = local.iov(local.m_buf.size());
    test_completion put;
    wait_zcopy(uct_ep_put_zcopy(ep(), &iov, 1, remote.addr(),
                                remote.m_rkey.rkey, &put.comp), put);
    flush(m_sender);
    EXPECT_TRUE(remote.m_buf == local.m_buf);

    /* read back over other contents */
    std::vector<char> put_data(remote.m_buf.begin(),
                               remote.m_buf.begin() + 4096);
    fill_words(local, 9);
    test_completion get;
    wait_zcopy(uct_ep_get_zcopy(ep(), &iov, 1, remote.addr(),
                                remote.m_rkey.rkey, &get.comp), get);
    EXPECT_TRUE(local.m_buf == remote.m_buf);
    EXPECT_EQ(0, memcmp(put_data.data(), local.ptr(), put_data.size()))
            << "what was put was read";
}
#endif

TEST_F(rc_tm_limits, tag_eager_short_bcopy_zcopy_at_their_limits)
{
    open();
    std::vector<char> data = pattern(attr().cap.tag.eager.max_short, 9);
    ASSERT_EQ(UCS_OK, uct_ep_tag_eager_short(ep(), TAG, data.data(),
                                             data.size()));

    std::vector<char> bdata = pattern(attr().cap.tag.eager.max_bcopy, 10);
    ASSERT_EQ((ssize_t)bdata.size(),
              uct_ep_tag_eager_bcopy(ep(), TAG + 1, 0, pack, &bdata, 0));

    mapped_buffer zbuf(m_component, m_md, attr().cap.tag.eager.max_zcopy, 0);
    zbuf.pattern(11);
    std::vector<uct_iov_t> iov(attr().cap.tag.eager.max_iov, zbuf.iov(0));
    iov[0] = zbuf.iov(zbuf.m_buf.size());
    test_completion comp;
    wait_zcopy(uct_ep_tag_eager_zcopy(ep(), TAG + 2, 0, iov.data(), iov.size(),
                                      0, &comp.comp), comp);

    ASSERT_TRUE(wait_for([&] { return m_receiver.unexpected.size() >= 3; }));
    EXPECT_EQ(TAG, m_receiver.unexpected[0].tag);
    EXPECT_EQ(data, m_receiver.unexpected[0].data);
    EXPECT_EQ(TAG + 1, m_receiver.unexpected[1].tag);
    EXPECT_EQ(bdata, m_receiver.unexpected[1].data);
    EXPECT_EQ(TAG + 2, m_receiver.unexpected[2].tag);
    EXPECT_EQ(zbuf.m_buf, m_receiver.unexpected[2].data);
}

/* A rendezvous of max_zcopy with a header of max_hdr into a receive of
 * recv.max_zcopy */
TEST_F(rc_tm_limits, tag_rndv_zcopy_and_recv_zcopy_at_their_limits)
{
    open_small_rndv();
    mapped_buffer sbuf(m_component, m_md, attr().cap.tag.rndv.max_zcopy, 0);
    mapped_buffer rbuf(m_component, m_md,
                       m_receiver.attr.cap.tag.recv.max_zcopy, 'x');
    sbuf.pattern(12);
    tag_recv r;
    std::vector<uct_iov_t> riov(m_receiver.attr.cap.tag.recv.max_iov,
                                rbuf.iov(0));
    riov[0] = rbuf.iov(rbuf.m_buf.size());
    ASSERT_EQ(UCS_OK, uct_iface_tag_recv_zcopy(m_receiver.iface, TAG,
                                               UINT64_MAX, riov.data(),
                                               riov.size(), &r.ctx));

    std::vector<char> header = pattern(attr().cap.tag.rndv.max_hdr, 13);
    std::vector<uct_iov_t> siov(attr().cap.tag.rndv.max_iov, sbuf.iov(0));
    siov[0] = sbuf.iov(sbuf.m_buf.size());
    test_completion comp;
    ucs_status_ptr_t op = uct_ep_tag_rndv_zcopy(ep(), TAG, header.data(),
                                                header.size(), siov.data(),
                                                siov.size(), 0, &comp.comp);
    ASSERT_FALSE(UCS_PTR_IS_ERR(op)) << ucs_status_string(UCS_PTR_STATUS(op));
    ASSERT_TRUE(wait_for([&] { return (r.completed > 0) && comp.done; }));
    EXPECT_EQ(UCS_OK, r.status);
    EXPECT_EQ(UCS_OK, comp.status);
    EXPECT_EQ(sbuf.m_buf.size(), r.length);
    EXPECT_TRUE(rbuf.has_pattern(12, rbuf.m_buf.size()));
}

/* uct.h bounds the request's header by rndv.max_hdr, but UCP's carry RTS
 * headers past it: rc_tm, as rc_mlx5, takes what a WQE of 256 bytes holds
 * inline after the tag header, 240 bytes, however much more the device
 * grants */
TEST_F(rc_tm_limits, tag_rndv_request_of_the_inline_header)
{
    const size_t max_hdr = 256 - 16;

    open();
    ASSERT_GE(attr().cap.am.max_hdr, max_hdr);
    ASSERT_LT(attr().cap.tag.rndv.max_hdr, max_hdr);
    std::vector<char> header = pattern(max_hdr, 14);

    ASSERT_EQ(UCS_OK, uct_ep_tag_rndv_request(ep(), TAG, header.data(),
                                              header.size(), 0));
    ASSERT_TRUE(wait_for([&] { return !m_receiver.unexpected.empty(); }));
    EXPECT_TRUE(m_receiver.unexpected[0].rndv);
    EXPECT_EQ(header, m_receiver.unexpected[0].data);
}


/* Whether or not the UCX checks parameters: a call whose message is built
 * on the sender's stack is refused when it could not fit there (a UCX
 * without checks would otherwise let it overrun the buffer), and sends
 * nothing */
TEST_F(rc_tm_limits, messages_too_long_to_build_are_refused_in_every_build)
{
    open();
    std::vector<char> big = pattern(8192, 15);
    uct_iov_t iov         = iov_of(big.data(), big.size());
    ucx_log_capture log;

    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_am_short(ep(), AM_ID, 1, big.data(), big.size()));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_am_short_iov(ep(), AM_ID, &iov, 1));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_tag_eager_short(ep(), TAG, big.data(), big.size()));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_tag_rndv_request(ep(), TAG, big.data(), big.size(), 0));

    mapped_buffer sbuf(m_component, m_md, 64, 0);
    uct_iov_t siov      = sbuf.iov(sbuf.m_buf.size());
    ucs_status_ptr_t op = uct_ep_tag_rndv_zcopy(ep(), TAG, big.data(),
                                                big.size(), &siov, 1, 0,
                                                NULL);
    ASSERT_TRUE(UCS_PTR_IS_ERR(op));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, UCS_PTR_STATUS(op));
    EXPECT_EQ(5u, log.count()) << log.text();
    expect_nothing_arrived();
}


/* ----- one past, where UCX checks parameters: refused ----- */

#if RC_TM_UCX_PARAMS_CHECK

TEST_F(rc_tm_params_check, active_message_id_past_the_last)
{
    open();
    uint8_t id = UCT_AM_ID_MAX;
    std::vector<char> data = pattern(16, 20);
    mapped_buffer buf(m_component, m_md, 16, 0);
    uct_iov_t iov = iov_of(data.data(), data.size());
    uct_iov_t ziov = buf.iov(16);
    test_completion comp;

    {
        ucx_log_capture log;
        expect_refused(uct_ep_am_short(ep(), id, 1, data.data(), data.size()),
                       log, am_id_error());
    }
    {
        ucx_log_capture log;
        expect_refused(uct_ep_am_short_iov(ep(), id, &iov, 1), log,
                       am_id_error());
    }
    {
        ucx_log_capture log;
        expect_refused(uct_ep_am_bcopy(ep(), id, pack, &data, 0), log,
                       am_id_error());
    }
    {
        ucx_log_capture log;
        expect_refused(uct_ep_am_zcopy(ep(), id, data.data(), 8, &ziov, 1, 0,
                                       &comp.comp),
                       log, am_id_error());
        EXPECT_EQ(0, comp.done);
    }
}

TEST_F(rc_tm_params_check, am_short_past_max_short)
{
    open();
    size_t max = attr().cap.am.max_short;
    std::vector<char> payload = pattern(max - 8 + 1, 21);
    ucx_log_capture log;

    expect_refused(uct_ep_am_short(ep(), AM_ID, 1, payload.data(),
                                   payload.size()),
                   log, length_error("am_short", max + 1, max));
}

TEST_F(rc_tm_params_check, am_short_iov_past_max_short)
{
    open();
    size_t max = attr().cap.am.max_short;
    std::vector<char> data = pattern(max + 1, 22);
    uct_iov_t iov[2] = {iov_of(data.data(), 8),
                        iov_of(data.data() + 8, data.size() - 8)};
    ucx_log_capture log;

    expect_refused(uct_ep_am_short_iov(ep(), AM_ID, iov, 2), log,
                   length_error("am_short_iov", max + 1, max));
}

TEST_F(rc_tm_params_check, am_zcopy_past_max_hdr_max_zcopy_and_max_iov)
{
    open();
    const uct_iface_attr_t &a = attr();
    std::vector<char> header = pattern(a.cap.am.max_hdr + 1, 23);
    mapped_buffer buf(m_component, m_md, a.cap.am.max_zcopy + 1, 0);
    test_completion comp;

    {
        uct_iov_t iov = buf.iov(0);
        ucx_log_capture log;
        expect_refused(uct_ep_am_zcopy(ep(), AM_ID, header.data(),
                                       header.size(), &iov, 1, 0, &comp.comp),
                       log, length_error("am_zcopy header", header.size(),
                                         a.cap.am.max_hdr));
    }
    {
        /* header and payload together one past */
        uct_iov_t iov = buf.iov(a.cap.am.max_zcopy + 1 - 8);
        ucx_log_capture log;
        expect_refused(uct_ep_am_zcopy(ep(), AM_ID, header.data(), 8, &iov, 1,
                                       0, &comp.comp),
                       log, length_error("am_zcopy", a.cap.am.max_zcopy + 1,
                                         a.cap.am.max_zcopy));
    }
    {
        std::vector<uct_iov_t> iov(a.cap.am.max_iov + 1, buf.iov(4));
        ucx_log_capture log;
        expect_refused(uct_ep_am_zcopy(ep(), AM_ID, header.data(), 8,
                                       iov.data(), iov.size(), 0, &comp.comp),
                       log, iov_error("am_zcopy", iov.size(),
                                      a.cap.am.max_iov));
    }
    EXPECT_EQ(0, comp.done);
}

TEST_F(rc_tm_params_check, rma_past_their_limits)
{
    open();
    const uct_iface_attr_t &a = attr();
    mapped_buffer remote(m_component, m_md, 64 * 1024, 'r');
    mapped_buffer local(m_component, m_md, 64 * 1024, 'l');
    std::vector<char> data = pattern(a.cap.put.max_short + 1, 24);
    test_completion comp;
    int unpacked = 0;

    {
        ucx_log_capture log;
        expect_refused(uct_ep_put_short(ep(), data.data(), data.size(),
                                        remote.addr(), remote.m_rkey.rkey),
                       log, length_error("put_short", data.size(),
                                         a.cap.put.max_short));
    }
    {
        ucx_log_capture log;
        ASSERT_LT(a.cap.get.max_bcopy, remote.m_buf.size());
        expect_refused(uct_ep_get_bcopy(ep(),
                                        [](void *arg, const void*, size_t) {
                                            ++*static_cast<int*>(arg);
                                        }, &unpacked,
                                        a.cap.get.max_bcopy + 1, remote.addr(),
                                        remote.m_rkey.rkey, &comp.comp),
                       log, length_error("get_bcopy", a.cap.get.max_bcopy + 1,
                                         a.cap.get.max_bcopy));
    }
    /* The zero-copy limits are the device's (2 GiB): refused before
     * anything of the buffer is read, so a short buffer stands for it */
    uct_iov_t past = local.iov(0);
    past.length    = a.cap.put.max_zcopy + 1;
    {
        ucx_log_capture log;
        expect_refused(uct_ep_put_zcopy(ep(), &past, 1, remote.addr(),
                                        remote.m_rkey.rkey, &comp.comp),
                       log, length_error("put_zcopy", past.length,
                                         a.cap.put.max_zcopy));
    }
    past.length = a.cap.get.max_zcopy + 1;
    {
        ucx_log_capture log;
        expect_refused(uct_ep_get_zcopy(ep(), &past, 1, remote.addr(),
                                        remote.m_rkey.rkey, &comp.comp),
                       log, length_error("get_zcopy", past.length,
                                         a.cap.get.max_zcopy));
    }
    std::vector<uct_iov_t> iov(a.cap.put.max_iov + 1, local.iov(8));
    {
        ucx_log_capture log;
        expect_refused(uct_ep_put_zcopy(ep(), iov.data(), iov.size(),
                                        remote.addr(), remote.m_rkey.rkey,
                                        &comp.comp),
                       log, iov_error("put_zcopy", iov.size(),
                                      a.cap.put.max_iov));
    }
    iov.resize(a.cap.get.max_iov + 1, local.iov(8));
    {
        ucx_log_capture log;
        expect_refused(uct_ep_get_zcopy(ep(), iov.data(), iov.size(),
                                        remote.addr(), remote.m_rkey.rkey,
                                        &comp.comp),
                       log, iov_error("get_zcopy", iov.size(),
                                      a.cap.get.max_iov));
    }

    /* Nothing was written or read either */
    flush(m_sender);
    EXPECT_EQ(std::vector<char>(remote.m_buf.size(), 'r'), remote.m_buf);
    EXPECT_EQ(std::vector<char>(local.m_buf.size(), 'l'), local.m_buf);
    EXPECT_EQ(0, unpacked);
    EXPECT_EQ(0, comp.done);
}

TEST_F(rc_tm_params_check, tag_eager_past_their_limits)
{
    open();
    const uct_iface_attr_t &a = attr();
    std::vector<char> data = pattern(a.cap.tag.eager.max_short + 1, 25);
    mapped_buffer buf(m_component, m_md, a.cap.tag.eager.max_zcopy + 1, 0);
    test_completion comp;

    {
        ucx_log_capture log;
        expect_refused(uct_ep_tag_eager_short(ep(), TAG, data.data(),
                                              data.size()),
                       log, length_error("tag_eager_short", data.size(),
                                         a.cap.tag.eager.max_short));
    }
    {
        uct_iov_t iov = buf.iov(buf.m_buf.size());
        ucx_log_capture log;
        expect_refused(uct_ep_tag_eager_zcopy(ep(), TAG, 0, &iov, 1, 0,
                                              &comp.comp),
                       log, length_error("tag_eager_zcopy", iov.length,
                                         a.cap.tag.eager.max_zcopy));
    }
    {
        std::vector<uct_iov_t> iov(a.cap.tag.eager.max_iov + 1, buf.iov(8));
        ucx_log_capture log;
        expect_refused(uct_ep_tag_eager_zcopy(ep(), TAG, 0, iov.data(),
                                              iov.size(), 0, &comp.comp),
                       log, iov_error("tag_eager_zcopy", iov.size(),
                                      a.cap.tag.eager.max_iov));
    }
    EXPECT_EQ(0, comp.done);
}

TEST_F(rc_tm_params_check, tag_rndv_past_their_limits)
{
    open_small_rndv();
    const uct_iface_attr_t &a = attr();
    mapped_buffer buf(m_component, m_md, a.cap.tag.rndv.max_zcopy + 1, 0);
    std::vector<char> header = pattern(a.cap.am.max_hdr + 1, 26);
    test_completion comp;

    {
        uct_iov_t iov = buf.iov(buf.m_buf.size());
        ucx_log_capture log;
        expect_refused(uct_ep_tag_rndv_zcopy(ep(), TAG, header.data(), 8, &iov,
                                             1, 0, &comp.comp),
                       log, length_error("tag_rndv_zcopy", iov.length,
                                         a.cap.tag.rndv.max_zcopy));
    }
    {
        uct_iov_t iov = buf.iov(64);
        ucx_log_capture log;
        expect_refused(uct_ep_tag_rndv_zcopy(ep(), TAG, header.data(),
                                             a.cap.tag.rndv.max_hdr + 1, &iov,
                                             1, 0, &comp.comp),
                       log, length_error("tag_rndv_zcopy header",
                                         a.cap.tag.rndv.max_hdr + 1,
                                         a.cap.tag.rndv.max_hdr));
    }
    {
        std::vector<uct_iov_t> iov(a.cap.tag.rndv.max_iov + 1, buf.iov(8));
        ucx_log_capture log;
        expect_refused(uct_ep_tag_rndv_zcopy(ep(), TAG, header.data(), 8,
                                             iov.data(), iov.size(), 0,
                                             &comp.comp),
                       log, iov_error("tag_rndv_zcopy", iov.size(),
                                      a.cap.tag.rndv.max_iov));
    }
    {
        /* past what a 256-byte inline WQE holds after the tag header */
        ucx_log_capture log;
        expect_refused(uct_ep_tag_rndv_request(ep(), TAG, header.data(),
                                               241, 0),
                       log, length_error("tag_rndv_request header", 241,
                                         240));
    }
    EXPECT_EQ(0, comp.done);
}

/* A receive refused is not posted: a message to its tag is unexpected */
TEST_F(rc_tm_params_check, tag_recv_zcopy_past_its_limits)
{
    open_small_rndv();
    const uct_iface_attr_t &a = m_receiver.attr;
    mapped_buffer buf(m_component, m_md, a.cap.tag.recv.max_zcopy + 1, 0);
    tag_recv r;

    {
        uct_iov_t iov = buf.iov(buf.m_buf.size());
        ucx_log_capture log;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_iface_tag_recv_zcopy(m_receiver.iface, TAG, UINT64_MAX,
                                           &iov, 1, &r.ctx));
        EXPECT_TRUE(log.has(length_error("tag_recv_zcopy", iov.length,
                                         a.cap.tag.recv.max_zcopy)))
                << log.text();
    }
    {
        std::vector<uct_iov_t> iov(a.cap.tag.recv.max_iov + 1, buf.iov(8));
        ucx_log_capture log;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_iface_tag_recv_zcopy(m_receiver.iface, TAG, UINT64_MAX,
                                           iov.data(), iov.size(), &r.ctx));
        EXPECT_TRUE(log.has(iov_error("tag_recv_zcopy", iov.size(),
                                      a.cap.tag.recv.max_iov)))
                << log.text();
    }

    std::vector<char> data = pattern(100, 27);
    ASSERT_EQ(UCS_OK, uct_ep_tag_eager_short(ep(), TAG, data.data(),
                                             data.size()));
    ASSERT_TRUE(wait_for([&] { return !m_receiver.unexpected.empty(); }));
    EXPECT_EQ(data, m_receiver.unexpected[0].data);
    EXPECT_EQ(0, r.consumed);
    EXPECT_EQ(0, r.completed);
}

/* ep_check takes no flags, and rc_tm no completion (UCX 1.22's rc does) */
TEST_F(rc_tm_params_check, ep_check_with_flags_or_a_completion)
{
    open();
    test_completion comp;
    {
        ucx_log_capture log;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_check(ep(), 1, NULL));
        EXPECT_TRUE(log.has("Unsupported flags: 1")) << log.text();
    }
    {
        ucx_log_capture log;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_check(ep(), 0, &comp.comp));
        EXPECT_TRUE(log.has("Unsupported completion on ep_check"))
                << log.text();
    }
    EXPECT_EQ(0, comp.done);
    expect_nothing_arrived();
}

#if (UCT_VERNO_MAJOR > 1) || (UCT_VERNO_MINOR >= 14)
/* UCT_FLUSH_FLAG_REMOTE (UCX 1.14) and CANCEL exclude each other */
TEST_F(rc_tm_params_check, flush_both_cancel_and_remote)
{
    open();
    ucx_log_capture log;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_flush(ep(), UCT_FLUSH_FLAG_CANCEL | UCT_FLUSH_FLAG_REMOTE,
                           NULL));
    EXPECT_TRUE(log.has("flush flags CANCEL and REMOTE are mutually "
                        "exclusive")) << log.text();
}
#endif

#endif /* RC_TM_UCX_PARAMS_CHECK */
