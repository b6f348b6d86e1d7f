/*
 * The offload report through UCP (UCX_RC_TM_REPORT=y, as a user sets it):
 * two workers of one context over rc_tm, the receiver's worker destroyed
 * alone so that its interface's report is the one printed.  Workloads a
 * user meets: messages below UCX_TM_THRESH, which UCP never gives the
 * device, and more receives posted than the device's list holds.
 */
#include <gtest/gtest.h>
#include "../common/rc_tm_config.h"
#include "../common/scoped_env.h"
#include "../common/stdout_capture.h"
#include "../common/wait_until.h"

#include <ucp/api/ucp.h>

#include <memory>
#include <regex>
#include <string>
#include <utility>
#include <vector>

namespace {

class rc_tm_ucp_report : public testing::Test {
protected:
    /* env: UCX_* variables for this test (UCX_RC_TM_REPORT=y always), set
     * before UCP reads its and rc_tm's configuration */
    void init(const std::vector<std::pair<const char*, const char*>> &env = {})
    {
        m_env.emplace_back(new scoped_env("UCX_RC_TM_REPORT", "y"));
        for (const auto &kv : env) {
            m_env.emplace_back(new scoped_env(kv.first, kv.second));
        }

        ucp_config_t *config;
        ASSERT_EQ(UCS_OK, ucp_config_read(NULL, NULL, &config));
        ASSERT_EQ(UCS_OK, ucp_config_modify(config, "TLS", rc_tm_test_tls()));
        ucp_params_t params = {};
        params.field_mask   = UCP_PARAM_FIELD_FEATURES;
        params.features     = UCP_FEATURE_TAG;
        ucs_status_t status = ucp_init(&params, config, &m_context);
        ucp_config_release(config);
        ASSERT_EQ(UCS_OK, status);

        for (auto w : {&m_sender, &m_receiver}) {
            ucp_worker_params_t wparams = {};
            wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
            wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
            ASSERT_EQ(UCS_OK, ucp_worker_create(m_context, &wparams, w));
        }
        m_ep         = connect(m_sender, m_receiver);
        m_reverse_ep = connect(m_receiver, m_sender);
    }

    void TearDown() override
    {
        close_eps();
        for (ucp_worker_h *w : {&m_sender, &m_receiver}) {
            if (*w != nullptr) {
                ucp_worker_destroy(*w);
            }
        }
        if (m_context != nullptr) {
            ucp_cleanup(m_context);
        }
    }

    ucp_ep_h connect(ucp_worker_h from, ucp_worker_h to)
    {
        ucp_address_t *addr;
        size_t length;
        EXPECT_EQ(UCS_OK, ucp_worker_get_address(to, &addr, &length));
        ucp_ep_params_t params = {};
        params.field_mask      = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                 UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
        params.address         = addr;
        params.err_mode        = UCP_ERR_HANDLING_MODE_NONE;
        ucp_ep_h ep = nullptr;
        EXPECT_EQ(UCS_OK, ucp_ep_create(from, &params, &ep));
        ucp_worker_release_address(to, addr);
        return ep;
    }

    void close_eps()
    {
        for (ucp_ep_h *ep : {&m_ep, &m_reverse_ep}) {
            if (*ep == nullptr) {
                continue;
            }
            ucp_request_param_t param = {};
            void *req = ucp_ep_close_nbx(*ep, &param);
            wait_for([&] {
                return !UCS_PTR_IS_PTR(req) ||
                       (ucp_request_check_status(req) != UCS_INPROGRESS);
            });
            if (UCS_PTR_IS_PTR(req)) {
                ucp_request_free(req);
            }
            *ep = nullptr;
        }
    }

    /* What the receiver's worker printed when destroyed */
    std::string receiver_report()
    {
        EXPECT_EQ(nullptr, getenv("UCX_LOG_FILE"))
                << "the report goes to UCX_LOG_FILE, not stdout";
        close_eps();
        stdout_capture capture;
        EXPECT_TRUE(capture.ok());
        ucp_worker_destroy(m_receiver);
        m_receiver = nullptr;
        return capture.text();
    }

    void progress()
    {
        ucp_worker_progress(m_sender);
        ucp_worker_progress(m_receiver);
    }

    bool wait_for(const std::function<bool()> &pred, double seconds = 20)
    {
        return wait_until(pred, [this] { progress(); }, seconds);
    }

    ucs_status_t wait(void *req)
    {
        if (!UCS_PTR_IS_PTR(req)) {
            return UCS_PTR_STATUS(req);
        }
        EXPECT_TRUE(wait_for([&] {
            return ucp_request_check_status(req) != UCS_INPROGRESS;
        }));
        ucs_status_t status = ucp_request_check_status(req);
        ucp_request_free(req);
        return status;
    }

    void *send(ucp_tag_t tag, const std::vector<char> &buf)
    {
        ucp_request_param_t param = {};
        return ucp_tag_send_nbx(m_ep, buf.data(), buf.size(), tag, &param);
    }

    void *recv(ucp_tag_t tag, std::vector<char> &buf)
    {
        ucp_request_param_t param = {};
        return ucp_tag_recv_nbx(m_receiver, buf.data(), buf.size(), tag,
                                UINT64_MAX, &param);
    }

    /* count receives of size bytes posted, then their messages sent; all
     * complete with the right data */
    void exchange(int count, size_t size)
    {
        std::vector<std::vector<char>> bufs(count, std::vector<char>(size));
        std::vector<std::vector<char>> datas;
        std::vector<void*> rreqs, sreqs;
        for (int i = 0; i < count; ++i) {
            rreqs.push_back(recv(0x1000 + i, bufs[i]));
        }
        datas.reserve(count);
        for (int i = 0; i < count; ++i) {
            datas.emplace_back(size, (char)i);
            sreqs.push_back(send(0x1000 + i, datas.back()));
        }
        for (int i = 0; i < count; ++i) {
            EXPECT_EQ(UCS_OK, wait(rreqs[i])) << i;
            EXPECT_EQ(UCS_OK, wait(sreqs[i])) << i;
            EXPECT_EQ(datas[i], bufs[i]) << i;
        }
    }

    /* UCP gives the transport receives only once a message arrived
     * unexpected through it: one first, received after it arrived */
    void activate_offload()
    {
        std::vector<char> data(2048, 'a'), buf(2048);
        void *sreq = send(0xffff, data);
        ucp_tag_message_h msg = nullptr;
        ucp_tag_recv_info_t info;
        ASSERT_TRUE(wait_for([&] {
            msg = ucp_tag_probe_nb(m_receiver, 0xffff, UINT64_MAX, 0, &info);
            return msg != nullptr;
        }));
        ASSERT_EQ(UCS_OK, wait(recv(0xffff, buf)));
        ASSERT_EQ(UCS_OK, wait(sreq));
    }

    static bool has(const std::string &text, const std::string &part)
    {
        return text.find(part) != std::string::npos;
    }

    std::vector<std::unique_ptr<scoped_env>> m_env;
    ucp_context_h m_context    = nullptr;
    ucp_worker_h  m_sender     = nullptr;
    ucp_worker_h  m_receiver   = nullptr;
    ucp_ep_h      m_ep         = nullptr;
    ucp_ep_h      m_reverse_ep = nullptr;
};

} // namespace

/* 8-byte messages, every receive posted before its message: UCP matches
 * them all itself, and the report says why the device saw none */
TEST_F(rc_tm_ucp_report, below_threshold_messages_are_matched_by_ucp)
{
    init();
    exchange(200, 8);

    std::string report = receiver_report();
    EXPECT_TRUE(has(report, "messages: 200 tagged; the device matched 0"))
            << report;
    EXPECT_TRUE(has(report, "receives: 0 given to rc_tm")) << report;
    EXPECT_TRUE(has(report, "advice: no receive reached rc_tm, UCP matched "
                            "all 200 messages: messages below UCX_TM_THRESH "
                            "(1 KiB) are matched by UCP, not the device"))
            << report;
}

/* The threshold the advice names is the one UCP runs with */
TEST_F(rc_tm_ucp_report, the_advice_names_the_threshold_set)
{
    init({{"UCX_TM_THRESH", "2k"}});
    activate_offload();
    exchange(50, 1024);

    std::string report = receiver_report();
    EXPECT_TRUE(has(report, "receives: 0 given to rc_tm")) << report;
    EXPECT_TRUE(has(report, "messages below UCX_TM_THRESH (2 KiB) are "
                            "matched by UCP")) << report;
}

/* A device list of 8 and 100 receives of 4 KiB posted at once: UCP gives
 * them all to rc_tm, 92 wait in software, and the advice says so */
TEST_F(rc_tm_ucp_report, full_device_list_advises_a_longer_list)
{
    init({{"UCX_RC_TM_LIST_SIZE", "8"}});
    activate_offload();
    exchange(100, 4096);

    std::string report = receiver_report();
    EXPECT_TRUE(has(report, "rc_tm offload report, ")) << report;
    EXPECT_TRUE(has(report, "receives: 100 given to rc_tm: 8 to the device, "
                            "92 to software while its list was full (peak "
                            "92)")) << report;
    EXPECT_TRUE(has(report, "advice: 92 % of receives stayed in software "
                            "because the device list (8) was full: raise "
                            "UCX_RC_TM_LIST_SIZE")) << report;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(report, m, std::regex(
            "the device matched ([0-9]+) .*rc_tm's software list ([0-9]+); "
            "([0-9]+) unexpected"))) << report;
    EXPECT_EQ(100, std::stol(m[1]) + std::stol(m[2])) << report;
    EXPECT_EQ("1", m[3].str()) << "the activating message alone:\n" << report;
}

/* UCX_TM_SW_RNDV=y: every rendezvous is UCP's own (the device matches its
 * request only), and the advice names the setting */
TEST_F(rc_tm_ucp_report, software_rendezvous_setting_is_advised_against)
{
    init({{"UCX_TM_SW_RNDV", "y"}});
    activate_offload();
    exchange(10, 65536);

    std::string report = receiver_report();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(report, m, std::regex(
            "rendezvous: ([0-9]+) carried by the device .* ([0-9]+) as UCP's "
            "software rendezvous"))) << report;
    EXPECT_EQ("0", m[1].str()) << report;
    EXPECT_EQ("10", m[2].str()) << report;
    EXPECT_TRUE(has(report, "advice: UCX_TM_SW_RNDV=")) << report;
    EXPECT_TRUE(has(report, "sends every rendezvous as UCP's software "
                            "rendezvous")) << report;
}
