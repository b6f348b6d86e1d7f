/*
 * UCX_NET_DEVICES through UCP (issue 36, item 13): rc_tm's device is named
 * as UCX's ib transports name a port, "<device>:<port>", so a site's
 * selection by that name keeps rc_tm, and the device name alone drops or
 * keeps rc_tm as it does UCX's own ib transports.  Without a NIC here, the
 * device is the software NIC's: "soft:1".
 */
#include <gtest/gtest.h>

#include "../common/rc_tm_config.h"

#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

/* ucp_init with the tests' UCX_TLS (rc_tm_test_tls()) and the given
 * UCX_NET_DEVICES; the context's resources as ucp_context_print_info()
 * prints them */
ucs_status_t init(const char *net_devices, ucp_context_h *context_p,
                  std::string *info)
{
    ucp_config_t *config;
    ucs_status_t status;

    status = ucp_config_read(NULL, NULL, &config);
    if (status != UCS_OK) {
        return status;
    }
    EXPECT_EQ(UCS_OK, ucp_config_modify(config, "TLS", rc_tm_test_tls()));
    EXPECT_EQ(UCS_OK, ucp_config_modify(config, "NET_DEVICES", net_devices));

    ucp_params_t params = {};
    params.field_mask   = UCP_PARAM_FIELD_FEATURES;
    params.features     = UCP_FEATURE_TAG;
    status = ucp_init(&params, config, context_p);
    ucp_config_release(config);
    if (status != UCS_OK) {
        return status;
    }

    char *buf   = NULL;
    size_t size = 0;
    FILE *f     = open_memstream(&buf, &size);
    ucp_context_print_info(*context_p, f);
    fclose(f);
    *info = std::string(buf, size);
    free(buf);
    return UCS_OK;
}

ucs_status_t connect(ucp_worker_h from, ucp_worker_h to, ucp_ep_h *ep_p)
{
    ucp_address_t *addr;
    size_t length;

    ucs_status_t status = ucp_worker_get_address(to, &addr, &length);
    if (status != UCS_OK) {
        return status;
    }
    ucp_ep_params_t params = {};
    params.field_mask      = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    params.address         = addr;
    status = ucp_ep_create(from, &params, ep_p);
    ucp_worker_release_address(to, addr);
    return status;
}

bool wait(ucp_worker_h a, ucp_worker_h b, void *req)
{
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);

    if (!UCS_PTR_IS_PTR(req)) {
        return UCS_PTR_STATUS(req) == UCS_OK;
    }
    while (ucp_request_check_status(req) == UCS_INPROGRESS) {
        if (std::chrono::steady_clock::now() > deadline) {
            return false;
        }
        ucp_worker_progress(a);
        ucp_worker_progress(b);
    }
    bool ok = (ucp_request_check_status(req) == UCS_OK);
    ucp_request_free(req);
    return ok;
}

} // namespace

TEST(rc_tm_ucp_devices, net_devices_selects_rc_tm_by_device_and_port)
{
    ucp_context_h context;
    std::string info;

    ASSERT_EQ(UCS_OK, init("soft:1", &context, &info));
    EXPECT_NE(std::string::npos, info.find("rc_tm/soft:1")) << info;

    /* A tagged message goes through it, the only transport */
    ucp_worker_h workers[2];
    for (ucp_worker_h &w : workers) {
        ucp_worker_params_t wparams = {};
        ASSERT_EQ(UCS_OK, ucp_worker_create(context, &wparams, &w));
    }
    ucp_ep_h ep;
    ASSERT_EQ(UCS_OK, connect(workers[0], workers[1], &ep));

    char sbuf[64] = "named as UCX names it", rbuf[64] = {};
    ucp_request_param_t param = {};
    void *rreq = ucp_tag_recv_nbx(workers[1], rbuf, sizeof(rbuf), 0x36,
                                  UINT64_MAX, &param);
    void *sreq = ucp_tag_send_nbx(ep, sbuf, sizeof(sbuf), 0x36, &param);
    EXPECT_TRUE(wait(workers[0], workers[1], sreq));
    EXPECT_TRUE(wait(workers[0], workers[1], rreq));
    EXPECT_STREQ(sbuf, rbuf);

    void *creq = ucp_ep_close_nbx(ep, &param);
    EXPECT_TRUE(wait(workers[0], workers[1], creq));
    for (ucp_worker_h w : workers) {
        ucp_worker_destroy(w);
    }
    ucp_cleanup(context);
}

/* UCX_NET_DEVICES=mlx5_0 drops rc_mlx5 before UCX 1.21 (no transport is
 * left) and selects its ports from 1.21: rc_tm follows */
TEST(rc_tm_ucp_devices, device_name_without_port_as_ucx_ib)
{
    ucp_context_h context;
    std::string info;

#if RC_TM_UCP_NET_DEVICES_BASENAME
    ASSERT_EQ(UCS_OK, init("soft", &context, &info));
    EXPECT_NE(std::string::npos, info.find("rc_tm/soft:1")) << info;
    ucp_cleanup(context);
#else
    if (init("soft", &context, &info) == UCS_OK) {
        EXPECT_EQ(std::string::npos, info.find("rc_tm/")) << info;
        ucp_cleanup(context);
    }
#endif
}
