/*
 * UCP over rc_tm connected endpoint to endpoint, as on a NIC (issue 36
 * item 1): UCX_RC_TM_SOFT_CONNECT_TO_SRQ=n withholds the software NIC's
 * connections to a remote SRQ, so rc_tm has no interface address and UCP
 * wires it up through an auxiliary transport.  UCP (1.13 to 1.22) takes as
 * auxiliary transport of an endpoint made from a worker address only one
 * with UCT_IFACE_FLAG_CB_ASYNC (ud_verbs); an endpoint made through a
 * connection manager (a listener, UCP_EP_PARAM_FIELD_SOCK_ADDR) takes any
 * with active messages, tcp here.
 */
#include <gtest/gtest.h>

#include "../common/wait_until.h"

#include <ucp/api/ucp.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

extern "C" unsigned uct_rc_tm_counters_total(uint64_t *counters,
                                             unsigned max);

namespace {

class rc_tm_ucp_p2p : public testing::Test {
protected:
    void SetUp() override
    {
        setenv("UCX_RC_TM_SOFT_CONNECT_TO_SRQ", "n", 1);
    }

    void TearDown() override
    {
        for (ucp_ep_h ep : {m_client_ep, m_server_ep}) {
            if (ep != nullptr) {
                ucp_request_param_t param = {};
                param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
                param.flags        = UCP_EP_CLOSE_FLAG_FORCE;
                void *req = ucp_ep_close_nbx(ep, &param);
                if (UCS_PTR_IS_PTR(req)) {
                    wait_for([&] {
                        return ucp_request_check_status(req) != UCS_INPROGRESS;
                    });
                    ucp_request_free(req);
                }
            }
        }
        if (m_listener != nullptr) {
            ucp_listener_destroy(m_listener);
        }
        for (ucp_worker_h w : {m_client, m_server}) {
            if (w != nullptr) {
                ucp_worker_destroy(w);
            }
        }
        if (m_context != nullptr) {
            ucp_cleanup(m_context);
        }
        unsetenv("UCX_RC_TM_SOFT_CONNECT_TO_SRQ");
    }

    void init(const char *tls)
    {
        ucp_config_t *config;
        ASSERT_EQ(UCS_OK, ucp_config_read(NULL, NULL, &config));
        ASSERT_EQ(UCS_OK, ucp_config_modify(config, "TLS", tls));
        /* tcp's connection manager, not rdmacm's where the host has one:
         * the wireup needs no RDMA stack but the software NIC */
        ASSERT_EQ(UCS_OK, ucp_config_modify(config, "SOCKADDR_TLS_PRIORITY",
                                            "tcp"));
        ucp_params_t params = {};
        params.field_mask   = UCP_PARAM_FIELD_FEATURES;
        params.features     = UCP_FEATURE_TAG;
        ucs_status_t status = ucp_init(&params, config, &m_context);
        ucp_config_release(config);
        ASSERT_EQ(UCS_OK, status);
        for (auto w : {&m_client, &m_server}) {
            ucp_worker_params_t wparams = {};
            wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
            wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
            ASSERT_EQ(UCS_OK, ucp_worker_create(m_context, &wparams, w));
        }
    }

    void progress()
    {
        ucp_worker_progress(m_client);
        ucp_worker_progress(m_server);
    }

    bool wait_for(const std::function<bool()> &pred, double seconds = 20)
    {
        return wait_until(pred, [this] { progress(); }, seconds);
    }

    static void on_conn_request(ucp_conn_request_h request, void *arg)
    {
        *static_cast<ucp_conn_request_h*>(arg) = request;
    }

    ucp_context_h      m_context   = nullptr;
    ucp_worker_h       m_client    = nullptr;
    ucp_worker_h       m_server    = nullptr;
    ucp_listener_h     m_listener  = nullptr;
    ucp_ep_h           m_client_ep = nullptr;
    ucp_ep_h           m_server_ep = nullptr;
};

} // namespace

/* rc_tm alone cannot connect two workers without its extension: the
 * endpoint is refused at once (UCS_ERR_UNREACHABLE, UCP's "no auxiliary
 * transport" error), it does not hang */
TEST_F(rc_tm_ucp_p2p, rc_tm_alone_is_refused_not_hung)
{
    init("rc_tm");
    ucp_address_t *addr;
    size_t length;
    ASSERT_EQ(UCS_OK, ucp_worker_get_address(m_server, &addr, &length));
    ucp_ep_params_t params = {};
    params.field_mask      = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    params.address         = addr;
    ucp_ep_h ep            = nullptr;
    EXPECT_EQ(UCS_ERR_UNREACHABLE, ucp_ep_create(m_client, &params, &ep));
    ucp_worker_release_address(m_server, addr);
}

/* Through a listener, with tcp as auxiliary transport: both endpoints'
 * rc_tm lanes are connected endpoint to endpoint (connect_to_ep on both
 * sides, UCP's wireup endpoints replaced) and the tag messages go through
 * rc_tm's device, eager and rendezvous */
TEST_F(rc_tm_ucp_p2p, listener_wires_rc_tm_up_over_tcp)
{
    init("rc_tm,tcp");
    ucp_conn_request_h conn_request = nullptr;
    struct sockaddr_in sa = {};
    sa.sin_family      = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    ucp_listener_params_t lparams = {};
    lparams.field_mask       = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                               UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lparams.sockaddr.addr    = (const struct sockaddr*)&sa;
    lparams.sockaddr.addrlen = sizeof(sa);
    lparams.conn_handler.cb  = on_conn_request;
    lparams.conn_handler.arg = &conn_request;
    ASSERT_EQ(UCS_OK, ucp_listener_create(m_server, &lparams, &m_listener));

    ucp_listener_attr_t lattr = {};
    lattr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    ASSERT_EQ(UCS_OK, ucp_listener_query(m_listener, &lattr));
    sa.sin_port = ((struct sockaddr_in*)&lattr.sockaddr)->sin_port;

    ucp_ep_params_t params = {};
    params.field_mask       = UCP_EP_PARAM_FIELD_FLAGS |
                              UCP_EP_PARAM_FIELD_SOCK_ADDR;
    params.flags            = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    params.sockaddr.addr    = (const struct sockaddr*)&sa;
    params.sockaddr.addrlen = sizeof(sa);
    ASSERT_EQ(UCS_OK, ucp_ep_create(m_client, &params, &m_client_ep));
    ASSERT_TRUE(wait_for([&] { return conn_request != nullptr; }));

    ucp_ep_params_t sparams = {};
    sparams.field_mask   = UCP_EP_PARAM_FIELD_CONN_REQUEST;
    sparams.conn_request = conn_request;
    ASSERT_EQ(UCS_OK, ucp_ep_create(m_server, &sparams, &m_server_ep));

    std::vector<uint64_t> before(32), after(32);
    unsigned n = uct_rc_tm_counters_total(before.data(), before.size());
    for (size_t size : {64ul, 4096ul, 1ul << 20}) {
        for (int round = 0; round < 4; ++round) {
            std::vector<char> data(size), buf(size);
            for (size_t i = 0; i < size; ++i) {
                data[i] = (char)(i * 7 + round + size);
            }
            ucp_request_param_t param = {};
            void *rreq = ucp_tag_recv_nbx(m_server, buf.data(), buf.size(),
                                          round, UINT64_MAX, &param);
            void *sreq = ucp_tag_send_nbx(m_client_ep, data.data(),
                                          data.size(), round, &param);
            for (void *req : {sreq, rreq}) {
                ASSERT_FALSE(UCS_PTR_IS_ERR(req));
                if (UCS_PTR_IS_PTR(req)) {
                    ASSERT_TRUE(wait_for([&] {
                        return ucp_request_check_status(req) !=
                               UCS_INPROGRESS;
                    }));
                    EXPECT_EQ(UCS_OK, ucp_request_check_status(req));
                    ucp_request_free(req);
                }
            }
            ASSERT_EQ(data, buf) << size << " bytes, round " << round;
        }
    }
    ASSERT_EQ(n, uct_rc_tm_counters_total(after.data(), after.size()));
    /* the device matched messages (counter 0: RX_EXP, test_ucp_tag.cc) */
    EXPECT_GT(after[0], before[0]);
}
