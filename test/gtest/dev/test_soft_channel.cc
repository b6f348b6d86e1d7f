/*
 * Completion channels on the software NIC, and the whole-struct device and
 * port queries (issue 37), from the promises of libibverbs' man pages
 * (ibv_create_comp_channel.3, ibv_req_notify_cq.3, ibv_get_cq_event.3,
 * ibv_query_port.3, ibv_query_device.3) and mlx5 where it decides
 * (docs/verbs-device.md).  Two devices, an RC QP on each; the receiver's
 * CQ has a channel.  Every channel test runs with the devices opened
 * inline and on the engine thread.
 */
#include <gtest/gtest.h>

#include "softnic/softnic.h"
#include "verbs_connect.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace verbs_connect;

/* A device, its PD, a CQ (with channel when asked), an arena, a QP */
struct chan_side {
    struct ibv_context      *ctx = nullptr;
    struct ibv_comp_channel *ch  = nullptr;
    struct ibv_pd           *pd  = nullptr;
    struct ibv_cq           *cq  = nullptr;
    struct ibv_mr           *mr  = nullptr;
    struct ibv_qp           *qp  = nullptr;
    int                     cq_marker = 0;  /* its cq_context */
    std::vector<char>       arena = std::vector<char>(1 << 16);

    void open(struct ibv_device *dev, uint32_t progress, bool channel) {
        ctx = verbs_connect::open_device(dev, progress);
        ASSERT_NE(nullptr, ctx);
        if (channel) {
            ch = softnic_create_comp_channel(ctx);
            ASSERT_NE(nullptr, ch);
            EXPECT_GE(ch->fd, 0);
        }
        pd = softnic_alloc_pd(ctx);
        ASSERT_NE(nullptr, pd);
        /* the legacy verb, as ibv_rc_pingpong -e creates its CQ */
        cq = softnic_create_cq(ctx, 64, &cq_marker, ch, 0);
        ASSERT_NE(nullptr, cq);
        mr = softnic_reg_mr(pd, arena.data(), arena.size(),
                            IBV_ACCESS_LOCAL_WRITE);
        ASSERT_NE(nullptr, mr);
        struct ibv_qp_init_attr init;
        memset(&init, 0, sizeof(init));
        init.send_cq          = cq;
        init.recv_cq          = cq;
        init.qp_type          = IBV_QPT_RC;
        init.cap.max_send_wr  = 16;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_wr  = 16;
        init.cap.max_recv_sge = 1;
        qp = softnic_create_qp(pd, &init);
        ASSERT_NE(nullptr, qp);
    }

    void close() {
        if (qp)  { EXPECT_EQ(0, softnic_destroy_qp(qp)); qp = nullptr; }
        if (mr)  { EXPECT_EQ(0, softnic_dereg_mr(mr)); mr = nullptr; }
        if (cq)  { EXPECT_EQ(0, softnic_destroy_cq(cq)); cq = nullptr; }
        if (ch)  { EXPECT_EQ(0, softnic_destroy_comp_channel(ch)); ch = nullptr; }
        if (pd)  { EXPECT_EQ(0, softnic_dealloc_pd(pd)); pd = nullptr; }
        if (ctx) { EXPECT_EQ(0, softnic_close_device(ctx)); ctx = nullptr; }
    }

    int post_recv(uint64_t wr_id, size_t off, uint32_t len) {
        struct ibv_sge sge = { (uintptr_t)&arena[off], len, mr->lkey };
        struct ibv_recv_wr wr, *bad = nullptr;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id   = wr_id;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        return ibv_post_recv(qp, &wr, &bad);
    }

    int send(uint64_t wr_id, uint32_t len, bool solicited = false) {
        struct ibv_sge sge = { (uintptr_t)arena.data(), len, mr->lkey };
        struct ibv_send_wr wr, *bad = nullptr;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id      = wr_id;
        wr.opcode     = IBV_WR_SEND;
        wr.sg_list    = &sge;
        wr.num_sge    = 1;
        wr.send_flags = IBV_SEND_SIGNALED |
                        (solicited ? IBV_SEND_SOLICITED : 0);
        return ibv_post_send(qp, &wr, &bad);
    }
};

/* s sends to r, whose CQ has a channel; the parameter: the progress both
 * devices are opened with */
class soft_channel : public ::testing::TestWithParam<uint32_t> {
protected:
    struct ibv_device **list = nullptr;
    chan_side s, r;
    unsigned events_unacked  = 0;   /* read by get_event, not acked */

    void SetUp() override {
        int n = 0;
        list = softnic_get_device_list(&n);
        ASSERT_NE(nullptr, list);
        ASSERT_NO_FATAL_FAILURE(s.open(list[0], GetParam(), false));
        ASSERT_NO_FATAL_FAILURE(r.open(list[0], GetParam(), true));
        ASSERT_EQ(0, connect_qp(s.qp, r.ctx, r.qp->qp_num));
        ASSERT_EQ(0, connect_qp(r.qp, s.ctx, s.qp->qp_num));
    }

    void TearDown() override {
        /* a test that failed half-way: destroying the CQ would wait for
         * these acks for ever (ibv_get_cq_event.3) */
        if ((r.cq != nullptr) && (events_unacked != 0)) {
            ack(events_unacked);
        }
        s.close();
        r.close();
        softnic_free_device_list(list);
    }

    void ack(unsigned n) {
        softnic_ack_cq_events(r.cq, n);
        events_unacked -= n;
    }

    /* Whether r's channel fd becomes readable within timeout; the sender's
     * CQ is polled meanwhile (its device's work when inline) */
    bool readable(double timeout) {
        double deadline = now_sec() + timeout;
        struct pollfd pfd = { r.ch->fd, POLLIN, 0 };
        struct ibv_wc wc;
        do {
            if (poll(&pfd, 1, 10) > 0) {
                return true;
            }
            while (ibv_poll_cq(s.cq, 1, &wc) > 0) {
            }
        } while (now_sec() < deadline);
        return false;
    }

    /* The next completion of r's CQ, polled until timeout */
    bool next_r(struct ibv_wc *wc, double timeout = 5.0) {
        double deadline = now_sec() + timeout;
        struct ibv_wc swc;
        while (ibv_poll_cq(r.cq, 1, wc) == 0) {
            while (ibv_poll_cq(s.cq, 1, &swc) > 0) {
            }
            if (now_sec() > deadline) {
                return false;
            }
        }
        return true;
    }

    void get_event() {
        struct ibv_cq *cq = nullptr;
        void *cq_context  = nullptr;
        ASSERT_EQ(0, softnic_get_cq_event(r.ch, &cq, &cq_context));
        ++events_unacked;
        EXPECT_EQ(r.cq, cq);
        EXPECT_EQ(&r.cq_marker, cq_context);
    }
};

} // namespace


/* ibv_create_comp_channel.3, ibv_req_notify_cq.3: an armed CQ gets one
 * event for its next completion, and none more until re-armed */
TEST_P(soft_channel, one_event_per_arm)
{
    struct ibv_wc wc;

    ASSERT_EQ(0, r.post_recv(1, 0, 256));
    ASSERT_EQ(0, r.post_recv(2, 0, 256));
    ASSERT_EQ(0, r.post_recv(3, 0, 256));
    EXPECT_FALSE(readable(0.05)) << "an event before any arm";
    ASSERT_EQ(0, ibv_req_notify_cq(r.cq, 0));
    ASSERT_EQ(0, s.send(11, 8));
    ASSERT_TRUE(readable(5.0)) << "no event for the completion";
    ASSERT_NO_FATAL_FAILURE(get_event());
    ASSERT_TRUE(next_r(&wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(1u, wc.wr_id);

    /* not re-armed: the completion comes, the event does not */
    ASSERT_EQ(0, s.send(12, 8));
    ASSERT_TRUE(next_r(&wc));
    EXPECT_EQ(2u, wc.wr_id);
    EXPECT_FALSE(readable(0.2)) << "an event without an arm";

    /* re-armed on an empty CQ: the next completion raises one */
    ASSERT_EQ(0, ibv_req_notify_cq(r.cq, 0));
    EXPECT_FALSE(readable(0.05));
    ASSERT_EQ(0, s.send(13, 8));
    ASSERT_TRUE(readable(5.0));
    ASSERT_NO_FATAL_FAILURE(get_event());
    ack(2);
    ASSERT_TRUE(next_r(&wc));
    EXPECT_EQ(3u, wc.wr_id);
}

/* mlx5_arm_cq gives the NIC the consumer index: arming a CQ that holds
 * entries software has not polled raises the event at once */
TEST_P(soft_channel, arming_with_unpolled_entries_fires_at_once)
{
    ASSERT_EQ(0, r.post_recv(1, 0, 256));
    ASSERT_EQ(0, ibv_req_notify_cq(r.cq, 0));
    ASSERT_EQ(0, s.send(11, 8));
    ASSERT_TRUE(readable(5.0));
    ASSERT_NO_FATAL_FAILURE(get_event());
    /* the completion is still in the CQ */
    ASSERT_EQ(0, ibv_req_notify_cq(r.cq, 0));
    ASSERT_TRUE(readable(1.0));
    ASSERT_NO_FATAL_FAILURE(get_event());
    ack(2);
}

/* ibv_get_cq_event.3: a channel whose fd is non-blocking fails with
 * EAGAIN when no event waits */
TEST_P(soft_channel, nonblocking_fd_gives_eagain)
{
    struct ibv_cq *cq;
    void *cq_context;
    int flags = fcntl(r.ch->fd, F_GETFL);

    ASSERT_GE(flags, 0);
    ASSERT_EQ(0, fcntl(r.ch->fd, F_SETFL, flags | O_NONBLOCK));
    errno = 0;
    EXPECT_EQ(-1, softnic_get_cq_event(r.ch, &cq, &cq_context));
    EXPECT_EQ(EAGAIN, errno);

    ASSERT_EQ(0, r.post_recv(1, 0, 256));
    ASSERT_EQ(0, ibv_req_notify_cq(r.cq, 0));
    ASSERT_EQ(0, s.send(11, 8));
    ASSERT_TRUE(readable(5.0));
    ASSERT_NO_FATAL_FAILURE(get_event());
    ack(1);
    errno = 0;
    EXPECT_EQ(-1, softnic_get_cq_event(r.ch, &cq, &cq_context));
    EXPECT_EQ(EAGAIN, errno);
}

/* ibv_create_comp_channel.3: destroying a channel a CQ uses fails */
TEST_P(soft_channel, destroy_channel_in_use_is_ebusy)
{
    EXPECT_EQ(EBUSY, softnic_destroy_comp_channel(r.ch));
    struct ibv_comp_channel *ch2 = softnic_create_comp_channel(r.ctx);
    ASSERT_NE(nullptr, ch2);
    struct ibv_cq *cq2 = softnic_create_cq(r.ctx, 4, nullptr, ch2, 0);
    ASSERT_NE(nullptr, cq2);
    EXPECT_EQ(EBUSY, softnic_destroy_comp_channel(ch2));
    EXPECT_EQ(0, softnic_destroy_cq(cq2));
    EXPECT_EQ(0, softnic_destroy_comp_channel(ch2));
}

/* ibv_req_notify_cq.3, IB spec: solicited_only waits for a solicited
 * completion, or a failed one */
TEST_P(soft_channel, solicited_only_waits_for_a_solicited_completion)
{
    struct ibv_wc wc;

    ASSERT_EQ(0, r.post_recv(1, 0, 256));
    ASSERT_EQ(0, r.post_recv(2, 0, 256));
    ASSERT_EQ(0, r.post_recv(3, 0, 16));
    ASSERT_EQ(0, ibv_req_notify_cq(r.cq, 1));
    ASSERT_EQ(0, s.send(11, 8));
    ASSERT_TRUE(next_r(&wc));
    EXPECT_EQ(1u, wc.wr_id);
    EXPECT_FALSE(readable(0.2)) << "an unsolicited completion raised it";

    ASSERT_EQ(0, s.send(12, 8, true));
    ASSERT_TRUE(readable(5.0)) << "no event for a solicited SEND";
    ASSERT_NO_FATAL_FAILURE(get_event());
    ASSERT_TRUE(next_r(&wc));
    EXPECT_EQ(2u, wc.wr_id);

    /* a failed receive (longer than its buffer) raises it too */
    ASSERT_EQ(0, ibv_req_notify_cq(r.cq, 1));
    ASSERT_EQ(0, s.send(13, 32));
    ASSERT_TRUE(readable(5.0)) << "no event for a failed completion";
    ASSERT_NO_FATAL_FAILURE(get_event());
    ack(2);
    ASSERT_TRUE(next_r(&wc));
    EXPECT_EQ(IBV_WC_LOC_LEN_ERR, wc.status);
}

/* ibv_destroy_cq drops the CQ's events not read yet (the kernel's uverbs
 * removes them from the channel) */
TEST_P(soft_channel, destroyed_cq_takes_its_unread_events)
{
    ASSERT_EQ(0, r.post_recv(1, 0, 256));
    ASSERT_EQ(0, ibv_req_notify_cq(r.cq, 0));
    ASSERT_EQ(0, s.send(11, 8));
    ASSERT_TRUE(readable(5.0));
    ASSERT_EQ(0, softnic_destroy_qp(r.qp));
    r.qp = nullptr;
    ASSERT_EQ(0, softnic_destroy_cq(r.cq));
    r.cq = nullptr;
    struct pollfd pfd = { r.ch->fd, POLLIN, 0 };
    EXPECT_EQ(0, poll(&pfd, 1, 0)) << "the channel still signals an event";
}

/* ibv_get_cq_event.3: ibv_destroy_cq waits until every event read was
 * acknowledged (libibverbs' ibv_cmd_destroy_cq) */
TEST_P(soft_channel, destroy_cq_waits_for_the_ack)
{
    ASSERT_EQ(0, r.post_recv(1, 0, 256));
    ASSERT_EQ(0, ibv_req_notify_cq(r.cq, 0));
    ASSERT_EQ(0, s.send(11, 8));
    ASSERT_TRUE(readable(5.0));
    ASSERT_NO_FATAL_FAILURE(get_event());
    ASSERT_EQ(0, softnic_destroy_qp(r.qp));
    r.qp = nullptr;

    std::promise<int> destroyed;
    std::future<int> result = destroyed.get_future();
    struct ibv_cq *cq = r.cq;
    std::thread destroyer([&] { destroyed.set_value(softnic_destroy_cq(cq)); });
    EXPECT_EQ(std::future_status::timeout,
              result.wait_for(std::chrono::milliseconds(200)))
        << "destroyed with an event not acknowledged";
    ack(1);
    EXPECT_EQ(std::future_status::ready,
              result.wait_for(std::chrono::seconds(5)));
    destroyer.join();
    EXPECT_EQ(0, result.get());
    r.cq = nullptr;
}

/* ibv_resize_cq.3: the completions not yet polled stay in the CQ */
TEST_P(soft_channel, resize_keeps_unpolled_completions)
{
    struct ibv_wc wc;

    ASSERT_EQ(0, r.post_recv(1, 0, 256));
    ASSERT_EQ(0, ibv_req_notify_cq(r.cq, 0));
    ASSERT_EQ(0, s.send(11, 8));
    ASSERT_TRUE(readable(5.0));     /* the completion is in the CQ */
    ASSERT_NO_FATAL_FAILURE(get_event());
    ack(1);
    ASSERT_EQ(0, softnic_resize_cq(r.cq, 1000));
    EXPECT_GE(r.cq->cqe, 1000);
    ASSERT_TRUE(next_r(&wc, 1.0));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(1u, wc.wr_id);
    EXPECT_EQ(8u, wc.byte_len);
}

/* A CQ without a channel arms as on mlx5 (0), and nothing is raised */
TEST_P(soft_channel, cq_without_channel_arms)
{
    EXPECT_EQ(0, ibv_req_notify_cq(s.cq, 0));
    EXPECT_EQ(0, ibv_req_notify_cq(s.cq, 1));
}

/* The device's work runs on its engine once a channel exists: completions
 * come while nothing polls (docs/soft-device-datapath.md) */
TEST_P(soft_channel, a_channel_puts_the_device_on_its_engine)
{
    struct softnic_dv_attr dv;
    ASSERT_EQ(0, softnic_dv_query(r.ctx, &dv));
    EXPECT_EQ((uint32_t)SOFTNIC_PROGRESS_THREAD, dv.progress);
}

INSTANTIATE_TEST_SUITE_P(progress, soft_channel,
                         ::testing::Values((uint32_t)SOFTNIC_PROGRESS_INLINE,
                                           (uint32_t)SOFTNIC_PROGRESS_THREAD),
                         [](const ::testing::TestParamInfo<uint32_t> &p) {
                             return std::string(p.param ==
                                                SOFTNIC_PROGRESS_INLINE ?
                                                "inline" : "thread");
                         });


/* ----- creation rules, and the legacy CQ verbs ----- */

class soft_channel_dev : public ::testing::Test {
protected:
    struct ibv_device **list = nullptr;
    struct ibv_context *ctx  = nullptr;

    void SetUp() override {
        int n = 0;
        list = softnic_get_device_list(&n);
        ASSERT_NE(nullptr, list);
        ctx = softnic_open_device(list[0]);
        ASSERT_NE(nullptr, ctx);
    }

    void TearDown() override {
        if (ctx) {
            EXPECT_EQ(0, softnic_close_device(ctx));
        }
        softnic_free_device_list(list);
    }
};

/* A device already polled inline cannot move to its engine: a CQ with a
 * channel is refused there, with a clear error */
TEST_F(soft_channel_dev, channel_cq_on_inline_device_with_cqs_refused)
{
    struct ibv_cq *cq = softnic_create_cq(ctx, 4, nullptr, nullptr, 0);
    ASSERT_NE(nullptr, cq);
    struct ibv_comp_channel *ch = softnic_create_comp_channel(ctx);
    ASSERT_NE(nullptr, ch);
    errno = 0;
    EXPECT_EQ(nullptr, softnic_create_cq(ctx, 4, nullptr, ch, 0));
    EXPECT_EQ(EOPNOTSUPP, errno);
    EXPECT_EQ(0, softnic_destroy_comp_channel(ch));
    EXPECT_EQ(0, softnic_destroy_cq(cq));
}

/* ibv_create_cq.3 and mlx5_create_cq: cqe at least 1, comp_vector below
 * num_comp_vectors; the channel must be the context's */
TEST_F(soft_channel_dev, create_cq_checks)
{
    errno = 0;
    EXPECT_EQ(nullptr, softnic_create_cq(ctx, 0, nullptr, nullptr, 0));
    EXPECT_EQ(EINVAL, errno);
    errno = 0;
    EXPECT_EQ(nullptr, softnic_create_cq(ctx, -1, nullptr, nullptr, 0));
    EXPECT_EQ(EINVAL, errno);
    errno = 0;
    EXPECT_EQ(nullptr, softnic_create_cq(ctx, 4, nullptr, nullptr,
                                         ctx->num_comp_vectors));
    EXPECT_EQ(EINVAL, errno);

    struct ibv_context *other = softnic_open_device(list[0]);
    ASSERT_NE(nullptr, other);
    struct ibv_comp_channel *ch = softnic_create_comp_channel(other);
    ASSERT_NE(nullptr, ch);
    errno = 0;
    EXPECT_EQ(nullptr, softnic_create_cq(ctx, 4, nullptr, ch, 0));
    EXPECT_EQ(EINVAL, errno);
    EXPECT_EQ(0, softnic_destroy_comp_channel(ch));
    EXPECT_EQ(0, softnic_close_device(other));

    int marker;
    struct ibv_cq *cq = softnic_create_cq(ctx, 5, &marker, nullptr, 0);
    ASSERT_NE(nullptr, cq);
    EXPECT_GE(cq->cqe, 5);
    EXPECT_EQ(&marker, cq->cq_context);
    EXPECT_EQ(nullptr, cq->channel);
    EXPECT_EQ(0, softnic_destroy_cq(cq));
}

/* ibv_resize_cq.3: at least the size asked for; bad sizes EINVAL */
TEST_F(soft_channel_dev, resize_cq)
{
    struct ibv_cq *cq = softnic_create_cq(ctx, 4, nullptr, nullptr, 0);
    ASSERT_NE(nullptr, cq);
    EXPECT_EQ(0, softnic_resize_cq(cq, 100));
    EXPECT_GE(cq->cqe, 100);
    EXPECT_EQ(0, softnic_resize_cq(cq, 100));
    EXPECT_EQ(0, softnic_resize_cq(cq, 8));
    EXPECT_GE(cq->cqe, 8);
    EXPECT_EQ(EINVAL, softnic_resize_cq(cq, -1));
    EXPECT_EQ(EINVAL, softnic_resize_cq(cq, 0));
    struct ibv_device_attr attr;
    ASSERT_EQ(0, softnic_query_device(ctx, &attr));
    EXPECT_EQ(EINVAL, softnic_resize_cq(cq, attr.max_cqe + 1));
    EXPECT_EQ(0, softnic_destroy_cq(cq));
}


/* ----- whole-struct queries ----- */

/* rdma-core 56's struct ibv_port_attr: 44's 52 bytes (port_cap_flags2 at
 * 48, padding), then active_speed_ex; laid out by offset, so that the test
 * builds against either header */
enum { PORT_ATTR_44_SIZE = 52, PORT_ATTR_56_SIZE = 56 };
union port_attr_buf {
    struct ibv_port_attr attr;      /* this build's */
    uint8_t              raw[PORT_ATTR_56_SIZE + 32];
};

/* ibv_query_port.3: the caller's struct is filled whole, whatever
 * libibverbs it was built against */
TEST_F(soft_channel_dev, query_port_fills_a_longer_struct)
{
    static_assert(sizeof(struct ibv_port_attr) <= PORT_ATTR_56_SIZE,
                  "an rdma-core newer than 56's layout");
    union port_attr_buf a;
    struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);
    ASSERT_NE(nullptr, vctx);

    memset(&a, 0xff, sizeof(a));
    ASSERT_EQ(0, vctx->query_port(ctx, 1, &a.attr, sizeof(a)));
    EXPECT_EQ(IBV_PORT_ACTIVE, a.attr.state);
    EXPECT_NE(0u, a.attr.active_speed);
    uint32_t speed_ex;
    memcpy(&speed_ex, &a.raw[PORT_ATTR_44_SIZE], sizeof(speed_ex));
    EXPECT_EQ((uint32_t)a.attr.active_speed, speed_ex)
        << "active_speed_ex: the kernel's speed, as 56 reports it";
    for (size_t i = PORT_ATTR_56_SIZE; i < sizeof(a.raw); ++i) {
        EXPECT_EQ(0, a.raw[i]) << "byte " << i << " past the struct";
    }
    EXPECT_EQ(0, a.attr.port_cap_flags2);

    /* the exported ibv_query_port writes its compat struct, no further */
    memset(&a, 0xff, sizeof(a));
    ASSERT_EQ(0, softnic_query_port(ctx, 1, &a.attr));
    EXPECT_EQ(IBV_PORT_ACTIVE, a.attr.state);
    EXPECT_EQ(0xffff, a.attr.port_cap_flags2);
    EXPECT_EQ(EINVAL, softnic_query_port(ctx, 2, &a.attr));
}

/* ibv_query_device.3: the GUIDs name the device (equal in every context
 * of it), the vendor is set, and a longer caller struct is zeroed past
 * what this build knows */
TEST_F(soft_channel_dev, query_device_names_the_device)
{
    struct ibv_context *other = softnic_open_device(list[0]);
    ASSERT_NE(nullptr, other);
    struct ibv_device_attr a, b;
    ASSERT_EQ(0, softnic_query_device(ctx, &a));
    ASSERT_EQ(0, softnic_query_device(other, &b));
    EXPECT_NE(0u, a.node_guid);
    EXPECT_EQ(a.node_guid, b.node_guid);
    EXPECT_EQ(a.sys_image_guid, b.sys_image_guid);
    EXPECT_NE(0u, a.sys_image_guid);
    EXPECT_EQ(0x02c9u, a.vendor_id);
    EXPECT_EQ(4119u, a.vendor_part_id);
    EXPECT_EQ(1, a.phys_port_cnt);
    EXPECT_GE(a.max_cqe, 1);
    EXPECT_EQ(0, softnic_close_device(other));

    struct {
        struct ibv_device_attr_ex ex;
        uint8_t                   beyond[64];
    } big;
    memset(&big, 0xff, sizeof(big));
    struct ibv_query_device_ex_input in;
    memset(&in, 0, sizeof(in));
    struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_device_ex);
    ASSERT_NE(nullptr, vctx);
    ASSERT_EQ(0, vctx->query_device_ex(ctx, &in, &big.ex, sizeof(big)));
    EXPECT_EQ(a.node_guid, big.ex.orig_attr.node_guid);
    EXPECT_EQ(1u, big.ex.phys_port_cnt_ex);
    for (size_t i = 0; i < sizeof(big.beyond); ++i) {
        EXPECT_EQ(0, big.beyond[i]) << "byte " << i << " past the struct";
    }
    /* as libibverbs' ibv_cmd_query_device_any */
    EXPECT_EQ(EINVAL, vctx->query_device_ex(ctx, &in, &big.ex,
                                            sizeof(big.ex.orig_attr) - 1));
    in.comp_mask = 1;
    EXPECT_EQ(EINVAL, vctx->query_device_ex(ctx, &in, &big.ex, sizeof(big)));
}

/* The limits reported are those creation accepts */
TEST_F(soft_channel_dev, query_device_limits_are_accepted)
{
    struct ibv_device_attr a;
    ASSERT_EQ(0, softnic_query_device(ctx, &a));
    errno = 0;
    EXPECT_EQ(nullptr, softnic_create_cq(ctx, a.max_cqe + 1, nullptr,
                                         nullptr, 0));
    EXPECT_EQ(EINVAL, errno);

    struct ibv_pd *pd = softnic_alloc_pd(ctx);
    ASSERT_NE(nullptr, pd);
    struct ibv_srq_init_attr sa;
    memset(&sa, 0, sizeof(sa));
    sa.attr.max_wr  = 16;
    sa.attr.max_sge = a.max_srq_sge;
    struct ibv_srq *srq = softnic_create_srq(pd, &sa);
    ASSERT_NE(nullptr, srq);
    EXPECT_EQ(0, softnic_destroy_srq(srq));
    sa.attr.max_sge = a.max_srq_sge + 1;
    errno = 0;
    EXPECT_EQ(nullptr, softnic_create_srq(pd, &sa));
    EXPECT_EQ(EINVAL, errno);
    EXPECT_EQ(0, softnic_dealloc_pd(pd));
}
