/*
 * A peer killed in the middle of a rendezvous, seen through UCP: endpoints
 * with peer error handling learn it from UCP's keepalive, and the pending
 * request completes with an error.
 */
#include <gtest/gtest.h>

#include <ucp/api/ucp.h>

#include "../common/rc_tm_config.h"

#include <chrono>
#include <cstring>
#include <functional>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

const size_t RNDV_SIZE = 1024 * 1024;

struct ucp_peer {
    ucp_context_h context = nullptr;
    ucp_worker_h  worker  = nullptr;
    ucp_ep_h      ep      = nullptr;
    int           errors  = 0;
    ucs_status_t  error   = UCS_OK;

    static void on_error(void *arg, ucp_ep_h ep, ucs_status_t status)
    {
        auto *p = static_cast<ucp_peer*>(arg);
        ++p->errors;
        p->error = status;
    }

    /* UCP on rc_tm alone, keepalive every 100 ms, rendezvous from 64 KiB.
     * With peer error handling UCP offloads no tags, and from UCX 1.16 it
     * reads no rendezvous over an md without RMA invalidation; its cost
     * model then sends even a megabyte as eager fragments, which complete
     * once sent.  These tests are about a rendezvous: ask for one. */
    bool open()
    {
        ucp_config_t *config;
        if (ucp_config_read(NULL, NULL, &config) != UCS_OK) {
            return false;
        }
        ucp_config_modify(config, "TLS", rc_tm_test_tls());
        ucp_config_modify(config, "KEEPALIVE_INTERVAL", "0.1s");
        ucp_config_modify(config, "RNDV_THRESH", "64k");
        ucp_params_t params = {};
        params.field_mask   = UCP_PARAM_FIELD_FEATURES;
        params.features     = UCP_FEATURE_TAG;
        ucs_status_t status = ucp_init(&params, config, &context);
        ucp_config_release(config);
        if (status != UCS_OK) {
            return false;
        }
        ucp_worker_params_t wparams = {};
        wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
        return ucp_worker_create(context, &wparams, &worker) == UCS_OK;
    }

    bool connect(int fd)
    {
        ucp_address_t *addr;
        size_t len, peer_len;
        if (ucp_worker_get_address(worker, &addr, &len) != UCS_OK) {
            return false;
        }
        bool ok = (write(fd, &len, sizeof(len)) == sizeof(len)) &&
                  (write(fd, addr, len) == (ssize_t)len);
        ucp_worker_release_address(worker, addr);
        std::vector<char> peer(4096);
        if (!ok ||
            (read(fd, &peer_len, sizeof(peer_len)) != sizeof(peer_len)) ||
            (peer_len > peer.size()) ||
            (read(fd, peer.data(), peer_len) != (ssize_t)peer_len)) {
            return false;
        }
        ucp_ep_params_t eparams    = {};
        eparams.field_mask         = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                     UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                     UCP_EP_PARAM_FIELD_ERR_HANDLER;
        eparams.address            = (const ucp_address_t*)peer.data();
        eparams.err_mode           = UCP_ERR_HANDLING_MODE_PEER;
        eparams.err_handler.cb     = on_error;
        eparams.err_handler.arg    = this;
        return ucp_ep_create(worker, &eparams, &ep) == UCS_OK;
    }

    /* A hang detector, not a wait */
    bool wait_for(const std::function<bool()> &pred, double seconds = 20)
    {
        auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(seconds);
        while (!pred()) {
            if (std::chrono::steady_clock::now() > deadline) {
                return false;
            }
            ucp_worker_progress(worker);
        }
        return true;
    }

    void close()
    {
        if (ep != nullptr) {
            ucp_request_param_t param = {};
            param.op_attr_mask        = UCP_OP_ATTR_FIELD_FLAGS;
            param.flags               = UCP_EP_CLOSE_FLAG_FORCE;
            void *req = ucp_ep_close_nbx(ep, &param);
            if (UCS_PTR_IS_PTR(req)) {
                wait_for([&] {
                    return ucp_request_check_status(req) != UCS_INPROGRESS;
                });
                ucp_request_free(req);
            }
        }
        if (worker != nullptr) {
            ucp_worker_destroy(worker);
        }
        if (context != nullptr) {
            ucp_cleanup(context);
        }
    }
};

} // namespace

/* The receiver holds the request as an unexpected message and dies */
TEST(rc_tm_fault_ucp, receiver_killed_during_a_rendezvous_send)
{
    int fds[2];
    ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM, 0, fds));
    fflush(stdout);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ::close(fds[0]);
        ucp_peer r;
        char token = 'r';
        if (!r.open() || !r.connect(fds[1]) ||
            (write(fds[1], &token, 1) != 1)) {
            _exit(2);
        }
        /* Progress until the request arrived, then wait to be killed */
        ucp_tag_recv_info_t info;
        if (!r.wait_for([&] {
                return ucp_tag_probe_nb(r.worker, 0x77, UINT64_MAX, 0,
                                        &info) != nullptr;
            })) {
            _exit(3);
        }
        token = 'u';
        if (write(fds[1], &token, 1) != 1) {
            _exit(4);
        }
        r.wait_for([] { return false; }, 60);
        _exit(5);
    }

    ::close(fds[1]);
    ucp_peer s;
    ASSERT_TRUE(s.open());
    ASSERT_TRUE(s.connect(fds[0]));
    char token;
    ASSERT_EQ(1, read(fds[0], &token, 1));
    std::vector<char> data(RNDV_SIZE, 's');
    ucp_request_param_t param = {};
    void *req = ucp_tag_send_nbx(s.ep, data.data(), data.size(), 0x77, &param);
    ASSERT_TRUE(UCS_PTR_IS_PTR(req));
    ASSERT_TRUE(s.wait_for([&] {
        return (recv(fds[0], &token, 1, MSG_DONTWAIT) == 1) ||
               (ucp_request_check_status(req) != UCS_INPROGRESS);
    })) << "the receiver did not see the request";
    ASSERT_EQ('u', token);
    /* A rendezvous send cannot end before its receiver takes the data */
    ASSERT_EQ(UCS_INPROGRESS, ucp_request_check_status(req));
    ASSERT_EQ(0, kill(pid, SIGKILL));
    int status;
    ASSERT_EQ(pid, waitpid(pid, &status, 0));

    ASSERT_TRUE(s.wait_for([&] {
        return ucp_request_check_status(req) != UCS_INPROGRESS;
    })) << "the send to a dead receiver never completed";
    EXPECT_NE(UCS_OK, ucp_request_check_status(req));
    ucp_request_free(req);
    EXPECT_GE(s.errors, 1);
    EXPECT_EQ(std::vector<char>(RNDV_SIZE, 's'), data);
    s.close();
    ::close(fds[0]);
}
