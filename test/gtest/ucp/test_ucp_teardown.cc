/*
 * A process that used rc_tm leaves nothing in /dev/shm once it exits
 * normally, whatever order it closed (or did not close) its UCP objects in.
 * Each scenario runs in a child process; the test checks /dev/shm after the
 * child exited.  The child checks that its connections made segments, so
 * that an empty /dev/shm is not a scenario that never used the device.
 */
#include <gtest/gtest.h>

#include <ucp/api/ucp.h>

#include "../common/rc_tm_config.h"

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

/* LeakSanitizer, when built with it: scenarios that leave UCP objects open
 * on purpose leak their memory on purpose too */
extern "C" void __lsan_disable(void) __attribute__((weak));

namespace {

const char *const SHM_PREFIX = "rc_tm_soft.";

/* Names in /dev/shm of segments created by process pid */
std::vector<std::string> segments_of(pid_t pid)
{
    std::string prefix = SHM_PREFIX + std::to_string(pid) + ".";
    std::vector<std::string> names;
    DIR *dir = opendir("/dev/shm");
    struct dirent *de;

    if (dir == nullptr) {
        return names;
    }
    while ((de = readdir(dir)) != nullptr) {
        if (!strncmp(de->d_name, prefix.c_str(), prefix.size())) {
            names.push_back(de->d_name);
        }
    }
    closedir(dir);
    return names;
}

/* Exit codes of a scenario's process */
enum {
    CHILD_OK        = 0,
    CHILD_FAILED    = 2,   /* a UCP call the scenario relies on failed */
    CHILD_NO_SHM    = 3    /* it never created a segment */
};

/* The objects of one process's use of UCP over rc_tm */
struct ucp_user {
    ucp_context_h              context = nullptr;
    std::vector<ucp_worker_h>  workers;
    std::vector<ucp_ep_h>      eps;

    bool init()
    {
        ucp_config_t *config;
        ucp_params_t params = {};

        if ((ucp_config_read(NULL, NULL, &config) != UCS_OK) ||
            (ucp_config_modify(config, "TLS", rc_tm_test_tls()) != UCS_OK)) {
            return false;
        }
        params.field_mask   = UCP_PARAM_FIELD_FEATURES;
        params.features     = UCP_FEATURE_TAG;
        ucs_status_t status = ucp_init(&params, config, &context);
        ucp_config_release(config);
        return status == UCS_OK;
    }

    ucp_worker_h add_worker()
    {
        ucp_worker_params_t params = {};
        ucp_worker_h worker;

        params.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        params.thread_mode = UCS_THREAD_MODE_SINGLE;
        if (ucp_worker_create(context, &params, &worker) != UCS_OK) {
            return nullptr;
        }
        workers.push_back(worker);
        return worker;
    }

    ucs_status_t connect(ucp_worker_h from, const ucp_address_t *address)
    {
        ucp_ep_params_t params = {};
        ucp_ep_h ep;

        params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        params.address    = address;
        ucs_status_t status = ucp_ep_create(from, &params, &ep);
        if (status == UCS_OK) {
            eps.push_back(ep);
        }
        return status;
    }

    ucs_status_t connect(ucp_worker_h from, ucp_worker_h to)
    {
        ucp_address_t *address;
        size_t length;

        if (ucp_worker_get_address(to, &address, &length) != UCS_OK) {
            return UCS_ERR_IO_ERROR;
        }
        ucs_status_t status = connect(from, address);
        ucp_worker_release_address(to, address);
        return status;
    }

    /* n workers, an endpoint from each to each other, one message on each:
     * every kind of segment (device, rings, accept queues) exists.  A
     * CHILD_* code. */
    int setup_mesh(unsigned n)
    {
        if (!init()) {
            return CHILD_FAILED;
        }
        for (unsigned i = 0; i < n; ++i) {
            if (add_worker() == nullptr) {
                return CHILD_FAILED;
            }
        }
        for (unsigned i = 0; i < n; ++i) {
            for (unsigned j = 0; j < n; ++j) {
                if ((i != j) &&
                    ((connect(workers[i], workers[j]) != UCS_OK) ||
                     !exchange(workers[i], workers[j], eps.back()))) {
                    return CHILD_FAILED;
                }
            }
        }
        return segments_of(getpid()).empty() ? CHILD_NO_SHM : CHILD_OK;
    }

    int setup_pair()
    {
        return setup_mesh(2);
    }

    static bool done(void *req)
    {
        return !UCS_PTR_IS_PTR(req) ||
               (ucp_request_check_status(req) != UCS_INPROGRESS);
    }

    bool exchange(ucp_worker_h from, ucp_worker_h to, ucp_ep_h ep)
    {
        char sbuf[2048], rbuf[2048];
        ucp_request_param_t param = {};

        memset(sbuf, 's', sizeof(sbuf));
        void *s = ucp_tag_send_nbx(ep, sbuf, sizeof(sbuf), 7, &param);
        void *r = ucp_tag_recv_nbx(to, rbuf, sizeof(rbuf), 7, UINT64_MAX,
                                   &param);
        for (long i = 0; (i < 10000000) && !(done(s) && done(r)); ++i) {
            ucp_worker_progress(from);
            ucp_worker_progress(to);
        }
        bool ok = done(s) && done(r) && !UCS_PTR_IS_ERR(s) &&
                  !UCS_PTR_IS_ERR(r) && (rbuf[0] == 's');
        for (void *req : {s, r}) {
            if (UCS_PTR_IS_PTR(req)) {
                ucp_request_free(req);
            }
        }
        return ok;
    }

    void close_eps()
    {
        for (ucp_ep_h ep : eps) {
            ucp_request_param_t param = {};
            param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            param.flags        = UCP_EP_CLOSE_FLAG_FORCE;
            void *req = ucp_ep_close_nbx(ep, &param);
            while (!done(req)) {
                for (ucp_worker_h w : workers) {
                    ucp_worker_progress(w);
                }
            }
            if (UCS_PTR_IS_PTR(req)) {
                ucp_request_free(req);
            }
        }
        eps.clear();
    }

    void destroy_workers()
    {
        for (ucp_worker_h w : workers) {
            ucp_worker_destroy(w);
        }
        workers.clear();
    }

    void cleanup()
    {
        ucp_cleanup(context);
        context = nullptr;
    }
};

class rc_tm_teardown : public testing::Test {
protected:
    /* Runs scenario in a child process that then exits normally; checks
     * its exit code and that it left no segment behind.  leaves_objects:
     * the scenario does not close everything (its memory is not checked
     * for leaks then). */
    void run(const std::function<int()> &scenario, bool leaves_objects)
    {
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            if (leaves_objects && (__lsan_disable != nullptr)) {
                __lsan_disable();
            }
            exit(scenario());   /* a normal exit: atexit handlers run */
        }
        expect_clean_exit(pid);
    }

    void expect_clean_exit(pid_t pid)
    {
        int status;
        ASSERT_EQ(pid, waitpid(pid, &status, 0));
        ASSERT_TRUE(WIFEXITED(status)) << "process " << pid << " was killed";
        EXPECT_EQ(CHILD_OK, WEXITSTATUS(status)) << "process " << pid;
        EXPECT_EQ(std::vector<std::string>(), segments_of(pid))
                << "left in /dev/shm by process " << pid;
    }
};

} // namespace

TEST_F(rc_tm_teardown, endpoints_open_when_the_workers_go)
{
    run([]() -> int {
        ucp_user u;
        int code = u.setup_pair();
        if (code != CHILD_OK) {
            return code;
        }
        u.destroy_workers();
        u.cleanup();
        return CHILD_OK;
    }, false);
}

TEST_F(rc_tm_teardown, context_cleaned_up_without_destroying_its_endpoints)
{
    run([]() -> int {
        ucp_user u;
        int code = u.setup_pair();
        if (code != CHILD_OK) {
            return code;
        }
        u.cleanup();   /* workers and endpoints never destroyed */
        return CHILD_OK;
    }, true);
}

/* Hundreds of contexts, in every teardown order, in one process: thousands
 * of segments at once, more than any fixed table would hold */
TEST_F(rc_tm_teardown, hundreds_of_contexts_in_every_order)
{
    run([]() -> int {
        std::vector<ucp_user> kept(200);
        for (size_t i = 0; i < kept.size(); ++i) {
            ucp_user &u = kept[i];
            int code = u.setup_mesh(3);
            if (code != CHILD_OK) {
                return code;
            }
            switch (i % 4) {
            case 0:                          /* everything closed in order */
                u.close_eps();
                u.destroy_workers();
                u.cleanup();
                break;
            case 1:                          /* endpoints left open */
                u.destroy_workers();
                u.cleanup();
                break;
            case 2:                          /* only the context */
                u.cleanup();
                break;
            case 3:                          /* nothing at all */
                break;
            }
        }
        return CHILD_OK;
    }, true);
}

TEST_F(rc_tm_teardown, failed_wireup)
{
    run([]() -> int {
        ucp_user u;
        int code = u.setup_pair();
        if (code != CHILD_OK) {
            return code;
        }
        /* The address of a worker that is gone by the time we connect */
        ucp_worker_h gone = u.add_worker();
        ucp_address_t *address;
        size_t length;
        if ((gone == nullptr) ||
            (ucp_worker_get_address(gone, &address, &length) != UCS_OK)) {
            return CHILD_FAILED;
        }
        std::vector<char> copy((char*)address, (char*)address + length);
        ucp_worker_release_address(gone, address);
        ucp_worker_destroy(gone);
        u.workers.pop_back();

        ucs_status_t status = u.connect(u.workers[0],
                                        (const ucp_address_t*)copy.data());
        if (status == UCS_OK) {
            return CHILD_FAILED;   /* connected to nobody */
        }
        u.close_eps();
        u.destroy_workers();
        u.cleanup();
        return CHILD_OK;
    }, false);
}

/* A child forked from a process that uses rc_tm: it uses rc_tm itself and
 * exits without closing anything.  Neither leaves anything, and the
 * child's exit does not disturb the parent's connections. */
TEST_F(rc_tm_teardown, forked_child)
{
    int pipefd[2];
    ASSERT_EQ(0, pipe(pipefd));
    run([&]() -> int {
        ucp_user u;
        int code = u.setup_pair();
        if (code != CHILD_OK) {
            return code;
        }
        pid_t child = fork();
        if (child < 0) {
            return CHILD_FAILED;
        }
        if (child == 0) {
            ucp_user own;
            if (__lsan_disable != nullptr) {
                __lsan_disable();   /* exits without closing anything */
            }
            exit(own.setup_pair());
        }
        if (write(pipefd[1], &child, sizeof(child)) != sizeof(child)) {
            return CHILD_FAILED;
        }
        int status;
        if ((waitpid(child, &status, 0) != child) || !WIFEXITED(status) ||
            (WEXITSTATUS(status) != CHILD_OK)) {
            return CHILD_FAILED;
        }
        /* Our own connections still work after the child is gone */
        if (!u.exchange(u.workers[0], u.workers[1], u.eps[0]) ||
            !u.exchange(u.workers[1], u.workers[0], u.eps[1])) {
            return CHILD_FAILED;
        }
        u.close_eps();
        u.destroy_workers();
        u.cleanup();
        return CHILD_OK;
    }, true);  /* UCX 1.13 keeps two endpoint records of a process that
                  forked (LeakSanitizer); not ours to check here */
    close(pipefd[1]);
    pid_t grandchild = 0;
    ASSERT_EQ((ssize_t)sizeof(grandchild),
              read(pipefd[0], &grandchild, sizeof(grandchild)));
    close(pipefd[0]);
    EXPECT_EQ(std::vector<std::string>(), segments_of(grandchild))
            << "left in /dev/shm by the forked child";
}
