/*
 * rc_tm at the UCT level: interface capabilities, active messages, RMA,
 * pending, flush and configuration, over the software device.
 */
#include "uct_fixture.h"

#include <cstring>

using namespace rc_tm_test;

namespace {

class rc_tm_uct : public uct_fixture {
protected:
    static size_t pack_pattern(void *dest, void *arg)
    {
        auto *src = static_cast<std::vector<char>*>(arg);
        memcpy(dest, src->data(), src->size());
        return src->size();
    }

    static void unpack_into(void *arg, const void *data, size_t length)
    {
        auto *dst = static_cast<std::vector<char>*>(arg);
        dst->assign((const char*)data, (const char*)data + length);
    }

    static std::vector<char> pattern(size_t size, uint8_t seed)
    {
        std::vector<char> v(size);
        for (size_t i = 0; i < size; ++i) {
            v[i] = (char)(seed + i * 13);
        }
        return v;
    }

    uct_ep_h ep() { return m_sender.eps.at(0); }

    bool wait_am(size_t count)
    {
        return wait_for([&] { return m_receiver.am_received.size() >= count; });
    }
};

} // namespace

TEST_F(rc_tm_uct, caps_are_what_ucp_needs_for_tag_offload)
{
    open();
    const uct_iface_attr_t &attr = m_sender.attr;
    uint64_t needed = UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_AM_BCOPY |
                      UCT_IFACE_FLAG_AM_ZCOPY | UCT_IFACE_FLAG_PUT_ZCOPY |
                      UCT_IFACE_FLAG_GET_ZCOPY | UCT_IFACE_FLAG_PENDING |
                      UCT_IFACE_FLAG_CONNECT_TO_EP |
                      UCT_IFACE_FLAG_TAG_EAGER_SHORT |
                      UCT_IFACE_FLAG_TAG_EAGER_BCOPY |
                      UCT_IFACE_FLAG_TAG_EAGER_ZCOPY |
                      UCT_IFACE_FLAG_TAG_RNDV_ZCOPY;
    EXPECT_EQ(needed, attr.cap.flags & needed);
    /* The software device takes connections to its SRQ: no auxiliary
     * wireup transport is needed */
    EXPECT_TRUE(attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_IFACE);
    EXPECT_GT(attr.iface_addr_len, 0u);
    EXPECT_GE(attr.cap.tag.rndv.max_hdr, 17u);
    EXPECT_LE(attr.cap.tag.rndv.max_zcopy, attr.cap.tag.recv.max_zcopy);
    EXPECT_GT(attr.cap.tag.recv.max_outstanding, 0u);
    EXPECT_GT(attr.cap.tag.eager.max_bcopy, attr.cap.tag.eager.max_short);
    EXPECT_GT(attr.ep_addr_len, 0u);
    EXPECT_GT(attr.device_addr_len, 0u);
    EXPECT_EQ(UCT_MD_FLAG_REG, m_md_attr.cap.flags & UCT_MD_FLAG_REG);
}

TEST_F(rc_tm_uct, tag_caps_only_with_tag_feature_and_callbacks)
{
    open();
    entity plain;
    ASSERT_EQ(UCS_OK, open_iface(plain, {}, UCT_IFACE_FEATURE_AM));
    EXPECT_FALSE(plain.attr.cap.flags & UCT_IFACE_FLAG_TAG_EAGER_BCOPY);
    EXPECT_TRUE(plain.attr.cap.flags & UCT_IFACE_FLAG_AM_BCOPY);
    uct_iface_close(plain.iface);
    uct_worker_destroy(plain.worker);
}

TEST_F(rc_tm_uct, invalid_iface_config_stops_iface_creation)
{
    open();
    entity bad;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              open_iface(bad, {{"SEG_SIZE", "16"}}, UCT_IFACE_FEATURE_AM));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              open_iface(bad, {{"TM_EAGER_MAX", "1m"}}, UCT_IFACE_FEATURE_AM));
    EXPECT_EQ(nullptr, bad.iface);
}

/* (Its limits: test_params.cc) */
TEST_F(rc_tm_uct, am_short)
{
    open();
    uint64_t header = 0x1122334455667788ull;
    std::vector<char> payload = pattern(m_sender.attr.cap.am.max_short -
                                        sizeof(header), 3);

    ASSERT_EQ(UCS_OK, uct_ep_am_short(ep(), 5, header, payload.data(),
                                      payload.size()));
    ASSERT_TRUE(wait_am(1));
    const std::vector<char> &got = m_receiver.am_received[0];
    ASSERT_EQ(sizeof(header) + payload.size(), got.size());
    EXPECT_EQ(0, memcmp(&header, got.data(), sizeof(header)));
    EXPECT_EQ(0, memcmp(payload.data(), got.data() + sizeof(header),
                        payload.size()));
}

TEST_F(rc_tm_uct, am_bcopy_max_size_and_order)
{
    open();
    size_t size = m_sender.attr.cap.am.max_bcopy;
    const int count = 50;

    for (int i = 0; i < count; ++i) {
        std::vector<char> payload = pattern(size - i, i);
        ssize_t packed;
        ASSERT_TRUE(wait_for([&] {
            packed = uct_ep_am_bcopy(ep(), 1, pack_pattern, &payload, 0);
            return packed != UCS_ERR_NO_RESOURCE;
        }));
        ASSERT_EQ((ssize_t)payload.size(), packed);
    }
    ASSERT_TRUE(wait_am(count));
    for (int i = 0; i < count; ++i) {
        EXPECT_EQ(pattern(size - i, i), m_receiver.am_received[i]) << i;
    }
}

TEST_F(rc_tm_uct, am_zcopy_with_header)
{
    open();
    mapped_buffer buf(m_component, m_md, m_sender.attr.cap.am.max_zcopy - 8, 0);
    buf.pattern(9);
    uct_iov_t iov      = buf.iov(buf.m_buf.size());
    uint64_t header    = 42;
    test_completion comp;

    ucs_status_t status = uct_ep_am_zcopy(ep(), 2, &header, sizeof(header),
                                          &iov, 1, 0, &comp.comp);
    ASSERT_TRUE((status == UCS_OK) || (status == UCS_INPROGRESS));
    ASSERT_TRUE(wait_am(1));
    if (status == UCS_INPROGRESS) {
        ASSERT_TRUE(wait_for([&] { return comp.done; }));
        EXPECT_EQ(UCS_OK, comp.status);
    }
    const std::vector<char> &got = m_receiver.am_received[0];
    ASSERT_EQ(sizeof(header) + buf.m_buf.size(), got.size());
    EXPECT_EQ(0, memcmp(&header, got.data(), sizeof(header)));
    EXPECT_EQ(0, memcmp(buf.ptr(), got.data() + 8, buf.m_buf.size()));
}

TEST_F(rc_tm_uct, am_descriptor_kept_and_released)
{
    open();
    m_receiver.keep_am = true;
    std::vector<char> payload = pattern(1000, 4);
    /* More messages than the SRQ holds buffers at a time would deadlock if
     * kept descriptors were not replaced by fresh buffers */
    const int count = 300;
    for (int i = 0; i < count; ++i) {
        ssize_t packed;
        ASSERT_TRUE(wait_for([&] {
            packed = uct_ep_am_bcopy(ep(), 1, pack_pattern, &payload, 0);
            return packed != UCS_ERR_NO_RESOURCE;
        }));
    }
    ASSERT_TRUE(wait_am(count));
    ASSERT_EQ((size_t)count, m_receiver.am_kept.size());
    /* Kept data stays intact while later messages arrive */
    for (void *data : m_receiver.am_kept) {
        EXPECT_EQ(0, memcmp(data, payload.data(), payload.size()));
    }
}

TEST_F(rc_tm_uct, put_short_bcopy_zcopy)
{
    open();
    mapped_buffer remote(m_component, m_md, 64 * 1024, 0);
    mapped_buffer local(m_component, m_md, 64 * 1024, 0);
    local.pattern(5);

    ASSERT_EQ(UCS_OK, uct_ep_put_short(ep(), local.ptr(), 64, remote.addr(),
                                       remote.m_rkey.rkey));
    flush(m_sender);
    EXPECT_EQ(0, memcmp(local.ptr(), remote.ptr(), 64));

    std::vector<char> data = pattern(m_sender.attr.cap.put.max_bcopy, 8);
    ASSERT_EQ((ssize_t)data.size(),
              uct_ep_put_bcopy(ep(), pack_pattern, &data, remote.addr(),
                               remote.m_rkey.rkey));
    flush(m_sender);
    EXPECT_EQ(0, memcmp(data.data(), remote.ptr(), data.size()));

    test_completion comp;
    uct_iov_t iov = local.iov(local.m_buf.size());
    ucs_status_t status = uct_ep_put_zcopy(ep(), &iov, 1, remote.addr(),
                                           remote.m_rkey.rkey, &comp.comp);
    ASSERT_TRUE((status == UCS_OK) || (status == UCS_INPROGRESS));
    if (status == UCS_INPROGRESS) {
        ASSERT_TRUE(wait_for([&] { return comp.done; }));
        EXPECT_EQ(UCS_OK, comp.status);
    }
    EXPECT_TRUE(remote.has_pattern(5, remote.m_buf.size()));
}

TEST_F(rc_tm_uct, get_bcopy_zcopy)
{
    open();
    mapped_buffer remote(m_component, m_md, 1024 * 1024, 0);
    mapped_buffer local(m_component, m_md, 1024 * 1024, 0);
    remote.pattern(11);

    std::vector<char> got;
    test_completion comp1;
    ucs_status_t status = uct_ep_get_bcopy(ep(), unpack_into, &got, 4096,
                                           remote.addr(), remote.m_rkey.rkey,
                                           &comp1.comp);
    ASSERT_TRUE((status == UCS_OK) || (status == UCS_INPROGRESS));
    ASSERT_TRUE(wait_for([&] { return (status == UCS_OK) || comp1.done; }));
    ASSERT_EQ(4096u, got.size());
    EXPECT_EQ(0, memcmp(got.data(), remote.ptr(), got.size()));

    test_completion comp2;
    uct_iov_t iov = local.iov(local.m_buf.size());
    status = uct_ep_get_zcopy(ep(), &iov, 1, remote.addr(), remote.m_rkey.rkey,
                              &comp2.comp);
    ASSERT_TRUE((status == UCS_OK) || (status == UCS_INPROGRESS));
    ASSERT_TRUE(wait_for([&] { return (status == UCS_OK) || comp2.done; }));
    EXPECT_EQ(UCS_OK, comp2.status);
    EXPECT_TRUE(local.has_pattern(11, local.m_buf.size()));
}

TEST_F(rc_tm_uct, bad_rkey_fails_the_operation_and_touches_nothing)
{
    open();
    mapped_buffer remote(m_component, m_md, 4096, 'r');
    mapped_buffer local(m_component, m_md, 8192, 'l');
    uct_iov_t iov = local.iov(8192);

    /* Past the end of the registered region: the operation fails, and, as
     * on any RC connection, the connection with it */
    test_completion comp;
    ucs_status_t status = uct_ep_put_zcopy(ep(), &iov, 1, remote.addr(),
                                           remote.m_rkey.rkey, &comp.comp);
    ASSERT_EQ(UCS_INPROGRESS, status);
    ASSERT_TRUE(wait_for([&] { return comp.done; }));
    EXPECT_NE(UCS_OK, comp.status);
    EXPECT_EQ(std::vector<char>(4096, 'r'), remote.m_buf);

    std::vector<char> payload = pattern(100, 1);
    EXPECT_LT(uct_ep_am_bcopy(ep(), 1, pack_pattern, &payload, 0), 0);
    EXPECT_NE(UCS_OK, uct_ep_flush(ep(), 0, NULL));

    /* A key that was never issued, on a new connection */
    connect(m_sender, m_receiver);
    uct_ep_h ep2 = m_sender.eps.back();
    test_completion comp2;
    iov = local.iov(16);
    status = uct_ep_get_zcopy(ep2, &iov, 1, remote.addr(),
                              remote.m_rkey.rkey ^ 0x5a5a0000, &comp2.comp);
    ASSERT_EQ(UCS_INPROGRESS, status);
    ASSERT_TRUE(wait_for([&] { return comp2.done; }));
    EXPECT_NE(UCS_OK, comp2.status);
    EXPECT_EQ(std::vector<char>(8192, 'l'), local.m_buf);

    /* Other connections are unharmed */
    connect(m_sender, m_receiver);
    ASSERT_EQ(100, uct_ep_am_bcopy(m_sender.eps.back(), 1, pack_pattern,
                                   &payload, 0));
    ASSERT_TRUE(wait_am(1));
}

TEST_F(rc_tm_uct, pending_add_and_flush)
{
    open({}, {{"TX_QUEUE_LEN", "8"}});
    std::vector<char> payload = pattern(100, 2);

    /* Fill the send queue */
    int sent = 0;
    while (uct_ep_am_bcopy(ep(), 1, pack_pattern, &payload, 0) > 0) {
        ++sent;
        ASSERT_LT(sent, 100000);
    }
    ASSERT_GT(sent, 0);

    struct pending_req {
        uct_pending_req_t  req;
        uct_ep_h           ep;
        std::vector<char>  *payload;
        int                done = 0;
    } pending;
    pending.ep      = ep();
    pending.payload = &payload;
    pending.req.func = [](uct_pending_req_t *self) -> ucs_status_t {
        auto *p = reinterpret_cast<pending_req*>(self);
        ssize_t r = uct_ep_am_bcopy(p->ep, 1, pack_pattern, p->payload, 0);
        if (r < 0) {
            return (ucs_status_t)r;
        }
        p->done = 1;
        return UCS_OK;
    };
    ASSERT_EQ(UCS_OK, uct_ep_pending_add(ep(), &pending.req, 0));
    ASSERT_TRUE(wait_for([&] { return pending.done; }));
    ASSERT_TRUE(wait_am(sent + 1));

    /* With resources available, pending_add refuses */
    EXPECT_EQ(UCS_ERR_BUSY, uct_ep_pending_add(ep(), &pending.req, 0));

    test_completion comp;
    ucs_status_t status = uct_ep_flush(ep(), 0, &comp.comp);
    if (status == UCS_INPROGRESS) {
        ASSERT_TRUE(wait_for([&] { return comp.done; }));
    } else {
        EXPECT_EQ(UCS_OK, status);
    }
    flush(m_sender);
    EXPECT_EQ(UCS_OK, uct_ep_fence(ep(), 0));
}

TEST_F(rc_tm_uct, pending_purge)
{
    open({}, {{"TX_QUEUE_LEN", "4"}});
    std::vector<char> payload = pattern(100, 2);
    while (uct_ep_am_bcopy(ep(), 1, pack_pattern, &payload, 0) > 0) {
    }

    uct_pending_req_t reqs[3];
    for (auto &r : reqs) {
        r.func = [](uct_pending_req_t*) { return UCS_ERR_NO_RESOURCE; };
        ASSERT_EQ(UCS_OK, uct_ep_pending_add(ep(), &r, 0));
    }
    int purged = 0;
    uct_ep_pending_purge(ep(), [](uct_pending_req_t *, void *arg) {
        ++*static_cast<int*>(arg);
    }, &purged);
    EXPECT_EQ(3, purged);
}

TEST_F(rc_tm_uct, destroy_with_operations_in_flight)
{
    open();
    {
        mapped_buffer remote(m_component, m_md, 1024 * 1024, 0);
        mapped_buffer local(m_component, m_md, 1024 * 1024, 0);
        std::vector<char> payload = pattern(2000, 2);
        for (int i = 0; i < 20; ++i) {
            uct_ep_am_bcopy(ep(), 1, pack_pattern, &payload, 0);
            uct_iov_t iov = local.iov(local.m_buf.size());
            uct_ep_put_zcopy(ep(), &iov, 1, remote.addr(), remote.m_rkey.rkey,
                             NULL);
        }
        uct_ep_destroy(ep());
        m_sender.eps.clear();
    }
    close(); /* no flush: must not crash, leak or hang */
}
