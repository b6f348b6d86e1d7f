#include "uct_fixture.h"
#include "../common/rc_tm_config.h"
#include "../common/wait_until.h"

#include <cstring>

namespace rc_tm_test {

/* ----- callbacks ----- */

static ucs_status_t am_handler(void *arg, void *data, size_t length,
                               unsigned flags)
{
    entity *e = static_cast<entity*>(arg);

    EXPECT_TRUE(flags & UCT_CB_PARAM_FLAG_DESC);
    e->am_received.emplace_back((char*)data, (char*)data + length);
    if (e->keep_am && (flags & UCT_CB_PARAM_FLAG_DESC)) {
        e->am_kept.push_back(data);
        return UCS_INPROGRESS;
    }
    return UCS_OK;
}

static ucs_status_t unexp_eager(void *arg, void *data, size_t length,
                                unsigned flags, uct_tag_t stag, uint64_t imm,
                                void **context)
{
    entity *e = static_cast<entity*>(arg);
    unexpected_msg msg = {};

    if (e->on_eager) {
        return e->on_eager(data, length, flags, stag, imm);
    }

    msg.rndv  = false;
    msg.tag   = stag;
    msg.imm   = imm;
    msg.flags = flags;
    msg.data.assign((char*)data, (char*)data + length);
    e->unexpected.push_back(msg);
    return UCS_OK;
}

static ucs_status_t unexp_rndv(void *arg, unsigned flags, uint64_t stag,
                               const void *header, unsigned header_length,
                               uint64_t remote_addr, size_t length,
                               const void *rkey_buf)
{
    entity *e = static_cast<entity*>(arg);
    unexpected_msg msg = {};

    if (e->on_rndv) {
        return e->on_rndv(flags, stag, header, header_length, remote_addr,
                          length, rkey_buf);
    }

    msg.rndv        = true;
    msg.tag         = stag;
    msg.imm         = 0;
    msg.flags       = flags;
    msg.data.assign((const char*)header, (const char*)header + header_length);
    msg.remote_addr = remote_addr;
    msg.length      = length;
    if (rkey_buf != NULL) {
        msg.rkey_buf.assign((const char*)rkey_buf, (const char*)rkey_buf + 8);
    }
    e->unexpected.push_back(msg);
    return UCS_OK;
}

static ucs_status_t ep_error(void *arg, uct_ep_h ep, ucs_status_t status)
{
    static_cast<entity*>(arg)->ep_errors.push_back(status);
    return UCS_OK;
}

/* ----- tag_recv / completion ----- */

static void tag_consumed(uct_tag_context_t *self)
{
    tag_recv *r = tag_recv::from(self);
    ++r->consumed;
    if (r->completed) {
        r->order_ok = 0;
    }
}

static void tag_completed(uct_tag_context_t *self, uct_tag_t stag,
                          uint64_t imm, size_t length, void *inline_data,
                          ucs_status_t status)
{
    tag_recv *r = tag_recv::from(self);
    ++r->completed;
    r->stag   = stag;
    r->imm    = imm;
    r->length = length;
    r->status = status;
}

static void tag_rndv(uct_tag_context_t *self, uct_tag_t stag,
                     const void *header, unsigned header_length,
                     ucs_status_t status, unsigned flags)
{
    tag_recv *r = tag_recv::from(self);
    ++r->rndv_req;
    r->stag   = stag;
    r->status = status;
    r->rndv_header.assign((const char*)header,
                          (const char*)header + header_length);
    r->rndv_header_ptr = header;
    r->rndv_flags      = flags;
}

tag_recv::tag_recv()
{
    memset(&ctx, 0, sizeof(ctx));
    ctx.tag_consumed_cb = tag_consumed;
    ctx.completed_cb    = tag_completed;
    ctx.rndv_cb         = tag_rndv;
}

tag_recv *tag_recv::from(uct_tag_context_t *ctx)
{
    return reinterpret_cast<tag_recv*>(ctx);
}

static void completion_cb(uct_completion_t *self)
{
    test_completion *c = reinterpret_cast<test_completion*>(self);
    c->done   = 1;
    c->status = self->status;
}

test_completion::test_completion(int count)
{
    comp.func   = completion_cb;
    comp.count  = count;
    comp.status = UCS_OK;
}

/* ----- buffers ----- */

mapped_buffer::mapped_buffer(uct_component_h component, uct_md_h md,
                             size_t size, char fill) :
    m_component(component), m_md(md), m_buf(size, fill)
{
    uct_md_attr_t attr;

    EXPECT_EQ(UCS_OK, uct_md_mem_reg(md, m_buf.data(), size,
                                     UCT_MD_MEM_ACCESS_ALL, &m_memh));
    EXPECT_EQ(UCS_OK, uct_md_query(md, &attr));
    m_rkey_buf.resize(attr.rkey_packed_size);
    EXPECT_EQ(UCS_OK, uct_md_mkey_pack(md, m_memh, m_rkey_buf.data()));
    EXPECT_EQ(UCS_OK, uct_rkey_unpack(component, m_rkey_buf.data(), &m_rkey));
}

mapped_buffer::~mapped_buffer()
{
    uct_rkey_release(m_component, &m_rkey);
    if (m_memh != nullptr) {
        uct_md_mem_dereg(m_md, m_memh);
    }
}

void mapped_buffer::pattern(uint8_t seed)
{
    for (size_t i = 0; i < m_buf.size(); ++i) {
        m_buf[i] = (char)(seed + i * 7);
    }
}

bool mapped_buffer::has_pattern(uint8_t seed, size_t length) const
{
    for (size_t i = 0; i < length; ++i) {
        if (m_buf[i] != (char)(seed + i * 7)) {
            return false;
        }
    }
    return true;
}

uct_iov_t mapped_buffer::iov(size_t length) const
{
    uct_iov_t iov;
    iov.buffer = (void*)m_buf.data();
    iov.length = length;
    iov.memh   = m_memh;
    iov.stride = 0;
    iov.count  = 1;
    return iov;
}

/* ----- fixture ----- */

void uct_fixture::SetUp()
{
    uct_component_h *components;
    unsigned count;

    ASSERT_EQ(UCS_OK, uct_query_components(&components, &count));
    for (unsigned i = 0; i < count; ++i) {
        uct_component_attr_t attr = {};
        attr.field_mask           = UCT_COMPONENT_ATTR_FIELD_NAME;
        ASSERT_EQ(UCS_OK, uct_component_query(components[i], &attr));
        if (std::string(attr.name) == "rc_tm") {
            m_component = components[i];
        }
    }
    uct_release_component_list(components);
    ASSERT_NE(nullptr, m_component) << "component rc_tm not registered";
    ASSERT_EQ(UCS_OK, ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                               &m_async));
}

void uct_fixture::TearDown()
{
    close();
    if (m_async != nullptr) {
        ucs_async_context_destroy(m_async);
    }
}

static void apply(void *config, const config_t &values)
{
    for (const auto &kv : values) {
        ASSERT_EQ(UCS_OK, rc_tm_config_modify(config, kv.first, kv.second))
                << kv.first << "=" << kv.second;
    }
}

void uct_fixture::open(const config_t &md_config, const config_t &iface_config,
                       const config_t *receiver_config)
{
    uct_md_config_t *config;

    ASSERT_EQ(UCS_OK, uct_md_config_read(m_component, NULL, NULL, &config));
    apply(config, md_config);
    ucs_status_t status = uct_md_open(m_component, "soft", config, &m_md);
    uct_config_release(config);
    ASSERT_EQ(UCS_OK, status);
    ASSERT_EQ(UCS_OK, uct_md_query(m_md, &m_md_attr));

    uint64_t features = UCT_IFACE_FEATURE_AM | UCT_IFACE_FEATURE_PUT |
                        UCT_IFACE_FEATURE_GET | UCT_IFACE_FEATURE_TAG;
    ASSERT_EQ(UCS_OK, open_iface(m_sender, iface_config, features));
    ASSERT_EQ(UCS_OK, open_iface(m_receiver, (receiver_config != nullptr) ?
                                             *receiver_config : iface_config,
                                 features));
    connect(m_sender, m_receiver);
}

ucs_status_t uct_fixture::open_iface(entity &e, const config_t &iface_config,
                                     uint64_t features)
{
    uct_iface_config_t *config;
    uct_iface_params_t params = {};
    ucs_status_t status;

    status = uct_worker_create(m_async, UCS_THREAD_MODE_SINGLE, &e.worker);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_md_iface_config_read(m_md, "rc_tm", NULL, NULL, &config);
    EXPECT_EQ(UCS_OK, status);
    apply(config, iface_config);

    params.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                        UCT_IFACE_PARAM_FIELD_DEVICE |
                        UCT_IFACE_PARAM_FIELD_FEATURES |
                        UCT_IFACE_PARAM_FIELD_RX_HEADROOM |
                        UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                        UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                        UCT_IFACE_PARAM_FIELD_HW_TM_EAGER_CB |
                        UCT_IFACE_PARAM_FIELD_HW_TM_EAGER_ARG |
                        UCT_IFACE_PARAM_FIELD_HW_TM_RNDV_CB |
                        UCT_IFACE_PARAM_FIELD_HW_TM_RNDV_ARG;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = "rc_tm";
    params.mode.device.dev_name = "soft:1";  /* as UCP names it */
    params.features             = features;
    params.rx_headroom          = m_rx_headroom;
    params.err_handler          = ep_error;
    params.err_handler_arg      = &e;
    params.eager_cb             = unexp_eager;
    params.eager_arg            = &e;
    params.rndv_cb              = unexp_rndv;
    params.rndv_arg             = &e;

    status = uct_iface_open(m_md, e.worker, &params, config, &e.iface);
    uct_config_release(config);
    if (status != UCS_OK) {
        uct_worker_destroy(e.worker);
        e.worker = nullptr;
        return status;
    }

    EXPECT_EQ(UCS_OK, uct_iface_query(e.iface, &e.attr));
    for (uint8_t id = 0; id < UCT_AM_ID_MAX; ++id) {
        EXPECT_EQ(UCS_OK, uct_iface_set_am_handler(e.iface, id, am_handler,
                                                   &e, 0));
    }
    uct_iface_progress_enable(e.iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    return UCS_OK;
}

void uct_fixture::connect(entity &a, entity &b)
{
    uct_ep_params_t params = {};
    uct_ep_h ep_a, ep_b;

    params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
    params.iface      = a.iface;
    ASSERT_EQ(UCS_OK, uct_ep_create(&params, &ep_a));
    params.iface      = b.iface;
    ASSERT_EQ(UCS_OK, uct_ep_create(&params, &ep_b));

    std::vector<char> dev_a(a.attr.device_addr_len), dev_b(b.attr.device_addr_len);
    std::vector<char> addr_a(a.attr.ep_addr_len), addr_b(b.attr.ep_addr_len);
    ASSERT_EQ(UCS_OK, uct_iface_get_device_address(a.iface,
                                (uct_device_addr_t*)dev_a.data()));
    ASSERT_EQ(UCS_OK, uct_iface_get_device_address(b.iface,
                                (uct_device_addr_t*)dev_b.data()));
    ASSERT_EQ(UCS_OK, uct_ep_get_address(ep_a, (uct_ep_addr_t*)addr_a.data()));
    ASSERT_EQ(UCS_OK, uct_ep_get_address(ep_b, (uct_ep_addr_t*)addr_b.data()));
    ASSERT_TRUE(uct_iface_is_reachable(a.iface,
                                       (uct_device_addr_t*)dev_b.data(), NULL));
    ASSERT_EQ(UCS_OK, uct_ep_connect_to_ep(ep_a,
                                           (uct_device_addr_t*)dev_b.data(),
                                           (uct_ep_addr_t*)addr_b.data()));
    ASSERT_EQ(UCS_OK, uct_ep_connect_to_ep(ep_b,
                                           (uct_device_addr_t*)dev_a.data(),
                                           (uct_ep_addr_t*)addr_a.data()));
    a.eps.push_back(ep_a);
    b.eps.push_back(ep_b);
}

void uct_fixture::destroy_eps(entity &e)
{
    for (uct_ep_h ep : e.eps) {
        uct_ep_destroy(ep);
    }
    e.eps.clear();
}

static void close_entity(entity &e, size_t rx_headroom)
{
    for (void *data : e.am_kept) {
        uct_iface_release_desc((char*)data - rx_headroom);
    }
    e.am_kept.clear();
    for (uct_ep_h ep : e.eps) {
        uct_ep_destroy(ep);
    }
    e.eps.clear();
    if (e.iface != nullptr) {
        uct_iface_close(e.iface);
        e.iface = nullptr;
    }
    if (e.worker != nullptr) {
        uct_worker_destroy(e.worker);
        e.worker = nullptr;
    }
}

void uct_fixture::close_ifaces()
{
    close_entity(m_sender, m_rx_headroom);
    close_entity(m_receiver, m_rx_headroom);
}

void uct_fixture::close()
{
    close_ifaces();
    if (m_md != nullptr) {
        uct_md_close(m_md);
        m_md = nullptr;
    }
}

void uct_fixture::progress()
{
    if (m_sender.worker != nullptr) {
        uct_worker_progress(m_sender.worker);
    }
    if (m_receiver.worker != nullptr) {
        uct_worker_progress(m_receiver.worker);
    }
}

bool uct_fixture::soft_thread()
{
    const char *value = getenv("UCX_RC_TM_SOFT_PROGRESS");

    return (value != NULL) && !strcmp(value, "thread");
}

bool uct_fixture::wait_for(const std::function<bool()> &pred, double seconds)
{
    return wait_until(pred, [this] { progress(); }, seconds);
}

bool uct_fixture::progress_until(entity &e, const std::function<bool()> &pred,
                                 double seconds)
{
    return wait_until(pred, [&e] { uct_worker_progress(e.worker); },
                      seconds);
}

void uct_fixture::flush(entity &e)
{
    ucs_status_t status;
    ASSERT_TRUE(wait_for([&] {
        status = uct_iface_flush(e.iface, 0, NULL);
        return status != UCS_INPROGRESS;
    }));
    ASSERT_EQ(UCS_OK, status);
}

std::vector<uint64_t> uct_fixture::counters(entity &e)
{
    std::vector<uint64_t> c(COUNTER_LAST);
    EXPECT_EQ((unsigned)COUNTER_LAST,
              uct_rc_tm_iface_counters(e.iface, c.data(), c.size()));
    return c;
}

} // namespace rc_tm_test
