/*
 * UCP tag API over rc_tm: two workers of one context, UCX_TLS=rc_tm only, so
 * the tag lane is rc_tm's and the device does the matching.  The counters of
 * the module say where matching happened.
 */
#include <gtest/gtest.h>
#include "../common/rc_tm_config.h"
#include "../common/wait_until.h"

#include <ucp/api/ucp.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

extern "C" unsigned uct_rc_tm_counters_total(uint64_t *counters,
                                             unsigned max);

namespace {

enum { RX_EXP, RX_EAGER_UNEXP, RX_RNDV_EXP, RX_RNDV_UNEXP, RX_RNDV_INCOMPLETE,
       RX_RNDV_REQ_EXP, RX_RNDV_REQ_UNEXP, LIST_ADD, LIST_DEL, LIST_SYNC,
       LIST_DEL_RACE, LIST_FULL, TX_RNDV, POST_DEVICE, POST_SW,
    RX_SW_MATCH, SW_WON, PROMOTE, SW_FULL, LIST_BOUNCE, LIST_SPILL,
    RX_TRUNCATED, RX_SW_MATCH_RNDV, RX_SW_MATCH_RNDV_REQ,
    CANCEL, RCACHE_HIT, RCACHE_MISS,
    COUNTER_LAST };

std::vector<uint64_t> counters()
{
    std::vector<uint64_t> c(COUNTER_LAST);
    EXPECT_EQ((unsigned)COUNTER_LAST,
              uct_rc_tm_counters_total(c.data(), c.size()));
    return c;
}

const ucp_tag_t FULL_MASK = UINT64_MAX;

class rc_tm_ucp : public testing::Test {
protected:
    void SetUp() override
    {
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
        m_ep = connect(m_sender, m_receiver);
        m_reverse_ep = connect(m_receiver, m_sender);
        m_base = counters();
    }

    void TearDown() override
    {
        for (ucp_ep_h ep : {m_ep, m_reverse_ep}) {
            if (ep != nullptr) {
                ucp_request_param_t param = {};
                void *req = ucp_ep_close_nbx(ep, &param);
                wait_for([&] {
                    return !UCS_PTR_IS_PTR(req) ||
                           (ucp_request_check_status(req) != UCS_INPROGRESS);
                });
                if (UCS_PTR_IS_PTR(req)) {
                    ucp_request_free(req);
                }
            }
        }
        for (ucp_worker_h w : {m_sender, m_receiver}) {
            if (w != nullptr) {
                ucp_worker_destroy(w);
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

    void progress()
    {
        ucp_worker_progress(m_sender);
        ucp_worker_progress(m_receiver);
    }

    bool wait_for(const std::function<bool()> &pred, double seconds = 20)
    {
        return wait_until(pred, [this] { progress(); }, seconds);
    }

    /* Waits for a request and frees it; the status it ended with */
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

    /* fast: a send that completes once the data is on its way
     * (UCP_OP_ATTR_FLAG_FAST_CMPL): the sends UCP's protocol v2 (UCX 1.16
     * and later) gives the device's rendezvous; it sends others above its
     * eager range as a software rendezvous (a request the device matches,
     * then UCP's own read), by its cost model (docs/design.md) */
    void *send(ucp_tag_t tag, const std::vector<char> &buf, bool sync = false,
               bool fast = false)
    {
        ucp_request_param_t param = {};
        if (fast) {
            param.op_attr_mask = UCP_OP_ATTR_FLAG_FAST_CMPL;
        }
        return sync ? ucp_tag_send_sync_nbx(m_ep, buf.data(), buf.size(), tag,
                                            &param) :
                      ucp_tag_send_nbx(m_ep, buf.data(), buf.size(), tag,
                                       &param);
    }

    /* Receive info is filled immediately only for a receive that completes
     * at once; otherwise the callback reports it */
    static void recv_done(void *request, ucs_status_t status,
                          const ucp_tag_recv_info_t *info, void *user_data)
    {
        *static_cast<ucp_tag_recv_info_t*>(user_data) = *info;
    }

    void *recv(ucp_tag_t tag, std::vector<char> &buf,
               ucp_tag_t mask = FULL_MASK, ucp_tag_recv_info_t *info = nullptr)
    {
        ucp_request_param_t param = {};
        if (info != nullptr) {
            param.op_attr_mask       = UCP_OP_ATTR_FIELD_RECV_INFO |
                                       UCP_OP_ATTR_FIELD_CALLBACK |
                                       UCP_OP_ATTR_FIELD_USER_DATA;
            param.recv_info.tag_info = info;
            param.cb.recv            = recv_done;
            param.user_data          = info;
        }
        return ucp_tag_recv_nbx(m_receiver, buf.data(), buf.size(), tag, mask,
                                &param);
    }

    static std::vector<char> pattern(size_t size, uint8_t seed)
    {
        std::vector<char> v(size);
        for (size_t i = 0; i < size; ++i) {
            v[i] = (char)(seed + i * 31);
        }
        return v;
    }

    /* UCP hands receives to the transport only once an unexpected tagged
     * message came through it: send one first */
    void activate_offload()
    {
        std::vector<char> data = pattern(2048, 1), buf(2048);
        void *sreq = send(0xffff, data);
        ASSERT_TRUE(wait_for([&] {
            return counters()[RX_EAGER_UNEXP] > m_base[RX_EAGER_UNEXP];
        }));
        ASSERT_EQ(UCS_OK, wait(recv(0xffff, buf)));
        ASSERT_EQ(UCS_OK, wait(sreq));
        ASSERT_EQ(data, buf);
    }

    /* Expected: receive posted first, so the device matches it */
    void expected(size_t size, bool sync = false, bool fast = false)
    {
        std::vector<char> data = pattern(size, (uint8_t)size), buf(size);
        ucp_tag_recv_info_t info;
        void *rreq = recv(size, buf, FULL_MASK, &info);
        void *sreq = send(size, data, sync, fast);
        EXPECT_EQ(UCS_OK, wait(rreq));
        EXPECT_EQ(UCS_OK, wait(sreq));
        EXPECT_EQ(data, buf) << size;
        EXPECT_EQ(size, info.length);
        EXPECT_EQ((ucp_tag_t)size, info.sender_tag);
    }

    /* Unexpected: the message arrives before its receive */
    void unexpected(size_t size, bool sync = false, bool fast = false)
    {
        std::vector<char> data = pattern(size, (uint8_t)size + 1), buf(size);
        void *sreq = send(size + 1, data, sync, fast);
        ucp_tag_message_h msg = nullptr;
        ucp_tag_recv_info_t info;
        ASSERT_TRUE(wait_for([&] {
            msg = ucp_tag_probe_nb(m_receiver, size + 1, FULL_MASK, 0, &info);
            return msg != nullptr;
        }));
        EXPECT_EQ(size, info.length);
        EXPECT_EQ(UCS_OK, wait(recv(size + 1, buf)));
        EXPECT_EQ(UCS_OK, wait(sreq));
        EXPECT_EQ(data, buf) << size;
    }

    ucp_context_h         m_context    = nullptr;
    ucp_worker_h          m_sender     = nullptr;
    ucp_worker_h          m_receiver   = nullptr;
    ucp_ep_h              m_ep         = nullptr;
    ucp_ep_h              m_reverse_ep = nullptr;
    std::vector<uint64_t> m_base;
};

} // namespace

TEST_F(rc_tm_ucp, eager_expected_matched_in_device)
{
    activate_offload();
    uint64_t before = counters()[RX_EXP];
    for (size_t size : {1024ul, 4096ul, 7000ul}) {
        expected(size);
    }
    EXPECT_GE(counters()[RX_EXP] - before, 3u)
            << "expected eager receives were not matched by the device";
}

TEST_F(rc_tm_ucp, eager_unexpected_with_probe)
{
    activate_offload();
    for (size_t size : {8ul, 4096ul}) {
        unexpected(size);
    }
}

TEST_F(rc_tm_ucp, rndv_expected_read_by_device)
{
    activate_offload();
    uint64_t rndv_before = counters()[TX_RNDV];
    uint64_t exp_before  = counters()[RX_RNDV_EXP];
    for (size_t size : {65536ul, 262144ul}) {
        expected(size, false, true);
    }
    EXPECT_GE(counters()[TX_RNDV] - rndv_before, 2u);
    EXPECT_GE(counters()[RX_RNDV_EXP] - exp_before, 2u)
            << "expected rendezvous were not read by the device";
}

/* Whichever rendezvous UCP picks for a plain send, the device matches it:
 * its own (read by the device) or UCP's request (then UCP's read) */
TEST_F(rc_tm_ucp, rndv_expected_matched_in_device)
{
    activate_offload();
    std::vector<uint64_t> before = counters();
    for (size_t size : {65536ul, 1048576ul}) {
        expected(size);
    }
    std::vector<uint64_t> after = counters();
    EXPECT_GE((after[RX_RNDV_EXP] - before[RX_RNDV_EXP]) +
              (after[RX_RNDV_REQ_EXP] - before[RX_RNDV_REQ_EXP]), 2u)
            << "expected rendezvous were not matched by the device";
}

TEST_F(rc_tm_ucp, rndv_unexpected)
{
    activate_offload();
    uint64_t before = counters()[RX_RNDV_UNEXP];
    for (size_t size : {65536ul, 262144ul}) {
        unexpected(size, false, true);
    }
    EXPECT_GE(counters()[RX_RNDV_UNEXP] - before, 2u);
}

TEST_F(rc_tm_ucp, sync_send)
{
    activate_offload();
    expected(4096, true);
    unexpected(4096, true);
    expected(100000, true);
}

TEST_F(rc_tm_ucp, cancel_posted_receive)
{
    activate_offload();
    std::vector<char> buf(4096);
    void *rreq = recv(0x77, buf);
    ASSERT_TRUE(UCS_PTR_IS_PTR(rreq));
    ucp_request_cancel(m_receiver, rreq);
    EXPECT_EQ(UCS_ERR_CANCELED, wait(rreq));

    /* The tag still works afterwards */
    expected(4096);
}

TEST_F(rc_tm_ucp, wildcard_receive_and_order)
{
    activate_offload();
    const int count = 64;
    std::vector<std::vector<char>> bufs(count, std::vector<char>(2048));
    std::vector<void*> rreqs;
    for (int i = 0; i < count; ++i) {
        rreqs.push_back(recv(0x500, bufs[i], 0xff00));
    }
    std::vector<void*> sreqs;
    std::vector<std::vector<char>> datas;
    datas.reserve(count); /* sends point into these until they complete */
    for (int i = 0; i < count; ++i) {
        datas.push_back(pattern(2048, i));
        sreqs.push_back(send(0x500 + (i % 16), datas.back()));
    }
    for (int i = 0; i < count; ++i) {
        EXPECT_EQ(UCS_OK, wait(rreqs[i]));
        EXPECT_EQ(UCS_OK, wait(sreqs[i]));
        EXPECT_EQ(datas[i], bufs[i]) << "message " << i << " out of order";
    }
}

/* A flood of small unexpected messages: the receiver's buffers are held by
 * UCP's unexpected queue while more keep arriving */
TEST_F(rc_tm_ucp, flood_of_unexpected_messages)
{
    const int count = 5000;
    std::vector<std::vector<char>> datas;
    datas.reserve(count);
    std::vector<void*> sreqs;
    for (int i = 0; i < count; ++i) {
        datas.push_back(pattern(8, i));
        sreqs.push_back(send(0x1000 + i, datas.back()));
    }
    for (int i = 0; i < count; ++i) {
        std::vector<char> buf(8);
        ASSERT_EQ(UCS_OK, wait(recv(0x1000 + i, buf))) << i;
        ASSERT_EQ(datas[i], buf) << i;
    }
    for (void *req : sreqs) {
        EXPECT_EQ(UCS_OK, wait(req));
    }
}

/* A send that UCP reported complete reaches the receiver without another
 * call of the sender's, as a NIC carries out what was posted to it: a
 * burst far deeper than what the peer's ring holds, the sender's requests
 * all complete (both progress until then, the receiver behind), then only
 * the receiver progresses (the sender blocks outside UCX).  Expected (pre-posted, most
 * beyond the device's list) and unexpected receives. */
class rc_tm_ucp_burst : public rc_tm_ucp {
protected:
    void burst(int count, size_t size, bool preposted)
    {
        std::vector<std::vector<char>> datas, bufs(count,
                                                   std::vector<char>(size));
        std::vector<void*> rreqs(count), sreqs;
        activate_offload();
        for (int i = 0; preposted && (i < count); ++i) {
            rreqs[i] = recv(0x10000 + i, bufs[i]);
        }
        datas.reserve(count);
        for (int i = count - 1; i >= 0; --i) {
            datas.push_back(pattern(size, i));
            sreqs.push_back(send(0x10000 + i, datas.back()));
        }
        auto sender_done = [&] {
            for (void *req : sreqs) {
                if (UCS_PTR_IS_PTR(req) &&
                    (ucp_request_check_status(req) == UCS_INPROGRESS)) {
                    return false;
                }
            }
            return true;
        };
        /* the receiver lags (a call for 64 of the sender's), so that the
         * last sends find its ring full */
        auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::seconds(20);
        for (unsigned calls = 1; !sender_done() &&
             (std::chrono::steady_clock::now() < deadline); ++calls) {
            ucp_worker_progress(m_sender);
            if ((calls % 64) == 0) {
                ucp_worker_progress(m_receiver);
            }
        }
        ASSERT_TRUE(sender_done()) << "the sends did not complete";
        for (void *req : sreqs) {
            if (UCS_PTR_IS_PTR(req)) {
                EXPECT_EQ(UCS_OK, ucp_request_check_status(req));
                ucp_request_free(req);
            }
        }

        /* from now on the sender makes no call */
        for (int i = 0; !preposted && (i < count); ++i) {
            rreqs[i] = recv(0x10000 + i, bufs[i]);
        }
        int done = 0, wrong = 0;
        deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        for (int i = 0; i < count; ++i) {
            while (UCS_PTR_IS_PTR(rreqs[i]) &&
                   (ucp_request_check_status(rreqs[i]) == UCS_INPROGRESS) &&
                   (std::chrono::steady_clock::now() < deadline)) {
                ucp_worker_progress(m_receiver);
            }
            if (!UCS_PTR_IS_PTR(rreqs[i])) {
                EXPECT_EQ(UCS_OK, UCS_PTR_STATUS(rreqs[i])) << i;
            } else if (ucp_request_check_status(rreqs[i]) != UCS_INPROGRESS) {
                EXPECT_EQ(UCS_OK, ucp_request_check_status(rreqs[i])) << i;
                ucp_request_free(rreqs[i]);
            } else {
                continue;       /* TearDown's closes cancel it */
            }
            ++done;
            wrong += (datas[count - 1 - i] != bufs[i]);
        }
        EXPECT_EQ(count, done) << "receives never completed";
        EXPECT_EQ(0, wrong) << "receives completed with wrong data";
        /* what is left in flight is for TearDown's closes, which progress
         * both workers again */
    }
};

TEST_F(rc_tm_ucp_burst, deeper_than_the_ring_preposted)
{
    burst(4096, 512, true);
}

TEST_F(rc_tm_ucp_burst, deeper_than_the_ring_unexpected)
{
    burst(2048, 1024, false);
}

/* UCP (1.13, tag offload) registers the buffer of every receive it gives
 * the device, and of every rendezvous it sends: the same buffers again are
 * found in rc_tm's registration cache, not registered with the device */
TEST_F(rc_tm_ucp, repeated_offloaded_receives_of_one_buffer_hit_the_cache)
{
    activate_offload();
    const int rounds = 20;
    for (size_t size : {4096ul, 16384ul, 65536ul}) {
        /* One buffer each side, refilled every round (a new vector each
         * round may come at a new address: a miss that says nothing) */
        std::vector<char> buf(size), data(size);
        std::vector<uint64_t> before = counters();
        for (int i = 0; i < rounds; ++i) {
            std::vector<char> fill = pattern(size, (uint8_t)i);
            std::copy(fill.begin(), fill.end(), data.begin());
            void *rreq = recv(0x600 + i, buf);
            void *sreq = send(0x600 + i, data);
            ASSERT_EQ(UCS_OK, wait(rreq));
            ASSERT_EQ(UCS_OK, wait(sreq));
            ASSERT_EQ(data, buf) << size << " round " << i;
        }
        std::vector<uint64_t> after = counters();
        uint64_t matched = (after[RX_EXP] - before[RX_EXP]) +
                           (after[RX_RNDV_EXP] - before[RX_RNDV_EXP]) +
                           (after[RX_RNDV_REQ_EXP] - before[RX_RNDV_REQ_EXP]);
        uint64_t hit     = after[RCACHE_HIT] - before[RCACHE_HIT];
        uint64_t miss    = after[RCACHE_MISS] - before[RCACHE_MISS];
        RecordProperty("hits_" + std::to_string(size), std::to_string(hit));
        RecordProperty("misses_" + std::to_string(size), std::to_string(miss));
        EXPECT_EQ((uint64_t)rounds, matched) << size << ": not offloaded";
#if !RC_TM_UCP_CACHES_REGISTRATIONS
        /* Every round's receive after the first one hits (a UCP that keeps
         * registrations in its own cache asks the md once) */
        EXPECT_GE(hit, (uint64_t)rounds - 1) << size;
#endif
        /* The first registration of the receive (and send) buffer, and any
         * pool the transport grew: not one per round */
        EXPECT_LE(miss, 4u) << size;
    }
}

/* An interface with few rendezvous ops: more rendezvous sends than it has
 * ops wait for FINs.  A refused send once made UCP retry it in a loop
 * inside the send call, or left it descheduled with no send completion to
 * wake it; the test then hung, so a hang here ends the process. */
class rc_tm_ucp_few_rndv_ops : public rc_tm_ucp {
protected:
    static const unsigned RNDV_OPS = 4;

    void SetUp() override
    {
        setenv("UCX_RC_TM_RNDV_QUEUE_LEN", std::to_string(RNDV_OPS).c_str(),
               1);
        signal(SIGALRM, hung);
        alarm(120);
        rc_tm_ucp::SetUp();
    }

    void TearDown() override
    {
        rc_tm_ucp::TearDown();
        alarm(0);
        signal(SIGALRM, SIG_DFL);
        unsetenv("UCX_RC_TM_RNDV_QUEUE_LEN");
    }

    static void hung(int)
    {
        static const char msg[] = "rc_tm_ucp_few_rndv_ops: hung\n";
        ssize_t ret = write(2, msg, sizeof(msg) - 1);
        (void)ret;
        _exit(1);
    }
};

TEST_F(rc_tm_ucp_few_rndv_ops, more_rendezvous_sends_than_ops_all_complete)
{
    activate_offload();
    const int count   = 6 * RNDV_OPS;
    const size_t size = 65536;
    std::vector<std::vector<char>> bufs(count, std::vector<char>(size));
    std::vector<std::vector<char>> datas;
    std::vector<void*> rreqs, sreqs;
    uint64_t rndv_before = counters()[TX_RNDV];

    datas.reserve(count);
    for (int i = 0; i < count; ++i) {
        rreqs.push_back(recv(0x700 + i, bufs[i]));
    }
    /* The receiver does not progress: all but the first RNDV_OPS wait */
    for (int i = 0; i < count; ++i) {
        datas.push_back(pattern(size, (uint8_t)i));
        sreqs.push_back(send(0x700 + i, datas.back(), false, true));
    }
    for (int i = 0; i < count; ++i) {
        ASSERT_EQ(UCS_OK, wait(rreqs[i])) << i;
        ASSERT_EQ(UCS_OK, wait(sreqs[i])) << i;
        EXPECT_EQ(datas[i], bufs[i]) << i;
    }
    EXPECT_EQ((uint64_t)count, counters()[TX_RNDV] - rndv_before)
            << "the messages did not go by rendezvous";
}
