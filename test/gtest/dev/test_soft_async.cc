/*
 * The software NIC's asynchronous events, through the device layer:
 * IBV_EVENT_QP_LAST_WQE_REACHED comes after a QP's state change, once the
 * QP's last work is done, as on a NIC (docs/verbs-device.md, item 9); never
 * for a QP without a send queue, nor for one that never left INIT (item 11:
 * no source says firmware raises it there).
 */
#include "soft_fixture.h"

#include <softnic/softnic.h>

#include <chrono>
#include <future>
#include <thread>

using namespace soft_test;

namespace {

class soft_async : public soft_pair {};
class soft_async_small_packet : public soft_pair_small_packet {};
class soft_async_DeathTest : public soft_pair {};

/* Both QPs of conn to the error state: tm_dev_conn_set_error moves the
 * sending one only (UCX leaves its TM QP as it is) */
void both_to_error(tm_dev_conn_t *conn)
{
    struct ibv_qp_attr attr = {};

    attr.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(0, tm_dev_conn_set_error(conn));
    ASSERT_EQ(0, softnic_modify_qp(tm_dev_ibv_rx_qp(conn), &attr,
                                   IBV_QP_STATE));
}

} // namespace

/* The event is the device's, not the state change's: a poll raises it,
 * after the flush completions of the QP's sends, which that poll returns */
TEST_F(soft_async, last_wqe_comes_after_the_flushes_not_at_the_state_change)
{
    manual();                  /* the receiver takes nothing */
    for (uint64_t i = 1; i <= 3; ++i) {
        ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_NO_TAG, 0, 0, "x"), i));
    }
    ASSERT_EQ(0, tm_dev_conn_set_error(cs));
    EXPECT_EQ(0u, tm_dev_progress_events(s.dev));
    EXPECT_FALSE(tm_dev_conn_send_drained(cs));

    std::vector<tm_dev_wc_t> v = drain(s);
    ASSERT_EQ(3u, v.size());
    for (unsigned i = 0; i < v.size(); ++i) {
        EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, v[i].status);
        EXPECT_EQ(i + 1u, v[i].wr_id);
    }
    EXPECT_EQ(1u, tm_dev_progress_events(s.dev))
            << "the sending QP's: none for the receive-only one";
    EXPECT_TRUE(tm_dev_conn_send_drained(cs));
    EXPECT_EQ(0u, drain(s).size()) << "nothing after the event";
    EXPECT_EQ(0u, tm_dev_progress_events(s.dev)) << "raised once";
}

/* A matched message still has its data to place when its connection
 * enters the error state: the data is placed all the same, and the QP it
 * came on, without a send queue, never reaches its last WQE */
TEST_F(soft_async_small_packet, no_last_wqe_for_a_qp_without_a_send_queue)
{
    const std::string payload(200, 'e');
    char *buf = r.alloc(512);

    manual();
    ASSERT_EQ(0, r.add_tag(0x51, ~0ull, buf, 512, 60, 0, nullptr, 1));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(1u, drain(r).size());
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 0x51, 0xa1, payload), 1));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));
    ASSERT_EQ(1u, softnic_test_pending_data(r.srq));

    ASSERT_NO_FATAL_FAILURE(both_to_error(cr));
    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_TM_RECV(v[0], 60, IBV_WC_TM_MATCH, 0x51, 0xa1, 0);
    EXPECT_EQ(1u, tm_dev_progress_events(r.dev)) << "the sending QP's";
    EXPECT_TRUE(tm_dev_conn_send_drained(cr));

    ASSERT_EQ(0, softnic_test_step_data(r.srq));
    v = drain(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_TM_RECV(v[0], 60, IBV_WC_TM_DATA_VALID, 0, 0, payload.size());
    EXPECT_EQ(0u, tm_dev_progress_events(r.dev));
    EXPECT_EQ(0u, drain(r).size());
    EXPECT_EQ(0u, tm_dev_progress_events(r.dev)) << "none, ever";
}

/* A connection that never left INIT has nothing in flight, and neither of
 * its QPs says anything when it enters the error state */
TEST_F(soft_async, no_last_wqe_for_a_qp_that_never_left_init)
{
    tm_dev_conn_t *idle = s.create_conn();

    ASSERT_NO_FATAL_FAILURE(both_to_error(idle));
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(0u, drain(s).size());
        EXPECT_EQ(0u, tm_dev_progress_events(s.dev));
    }
    EXPECT_FALSE(tm_dev_conn_send_drained(idle));
}

/* As the kernel drops the events of a destroyed QP that software has not
 * read: only the other connection's remain */
TEST_F(soft_async, an_event_not_read_goes_with_its_qp)
{
    tm_dev_conn_t *cs2 = s.create_conn(), *cr2 = r.create_conn();

    ASSERT_NO_FATAL_FAILURE(connect_pair(s, cs2, r, cr2));
    ASSERT_EQ(0, tm_dev_conn_set_error(cs));
    ASSERT_EQ(0, tm_dev_conn_set_error(cs2));
    EXPECT_EQ(0u, drain(s).size());

    s.conns.erase(std::remove(s.conns.begin(), s.conns.end(), cs),
                  s.conns.end());
    tm_dev_destroy_conn(cs);
    cs = nullptr;
    EXPECT_EQ(1u, tm_dev_progress_events(s.dev));
    EXPECT_TRUE(tm_dev_conn_send_drained(cs2));
}

/* libibverbs' destroy of a QP waits for every event read for it to be
 * acknowledged, forever if it never is: the software NIC aborts instead */
/* As libibverbs' ibv_destroy_qp (ibv_cmd_destroy_qp): destroying a QP
 * whose event was read and not yet acknowledged waits for the ack, which
 * another thread gives (UCX's async thread reads the events while its
 * worker destroys the QPs) */
TEST_F(soft_async, destroy_waits_for_the_ack_of_an_event_read)
{
    struct ibv_context *ctx = tm_dev_ibv_context(s.dev);
    struct ibv_async_event ev;

    ASSERT_EQ(0, tm_dev_conn_set_error(cs));
    EXPECT_EQ(0u, drain(s).size());
    ASSERT_EQ(0, softnic_get_async_event(ctx, &ev));
    ASSERT_EQ(IBV_EVENT_QP_LAST_WQE_REACHED, ev.event_type);

    std::promise<int> destroyed;
    std::future<int> result = destroyed.get_future();
    struct ibv_qp *qp = ev.element.qp;
    std::thread destroyer([&] {
        destroyed.set_value(softnic_destroy_qp(qp));
    });
    EXPECT_EQ(std::future_status::timeout,
              result.wait_for(std::chrono::milliseconds(200)))
            << "destroyed with an event not acknowledged";
    softnic_ack_async_event(&ev);
    EXPECT_EQ(std::future_status::ready,
              result.wait_for(std::chrono::seconds(5)));
    destroyer.join();
    EXPECT_EQ(0, result.get());
    cs->qp = nullptr;           /* destroyed: the pair keeps its rx QP */
}

/* No ack at all: libibverbs would wait forever; the software NIC says so
 * and aborts, after waiting for one as long as SN_EVENT_ACK_WAIT_S */
TEST_F(soft_async_DeathTest, destroy_with_an_event_read_and_not_acknowledged)
{
    struct ibv_context *ctx = tm_dev_ibv_context(s.dev);
    struct ibv_async_event ev;

    ASSERT_EQ(0, tm_dev_conn_set_error(cs));
    EXPECT_EQ(0u, drain(s).size());
    ASSERT_EQ(0, softnic_get_async_event(ctx, &ev));
    EXPECT_EQ(IBV_EVENT_QP_LAST_WQE_REACHED, ev.event_type);
    EXPECT_EQ(tm_dev_ibv_qp(cs), ev.element.qp);

    EXPECT_DEATH(softnic_destroy_qp(ev.element.qp),
                 "read and not acknowledged");
    softnic_ack_async_event(&ev);
}

/* Closing moves the sending QP to the error state and leaves the
 * receive-only one in RTS, as UCX's rc_mlx5 leaves its TM QP: a transfer
 * matched there goes on to its final completion */
TEST_F(soft_async_small_packet, set_error_leaves_the_receive_only_qp_as_it_is)
{
    const std::string payload(200, 'f');
    char *buf = r.alloc(512);
    struct ibv_qp_init_attr init;
    struct ibv_qp_attr attr;

    manual();
    ASSERT_EQ(0, r.add_tag(0x52, ~0ull, buf, 512, 61, 0, nullptr, 1));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));
    ASSERT_EQ(1u, drain(r).size());
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 0x52, 0xa2, payload), 1));
    ASSERT_EQ(0, softnic_test_step_arrival(cr));

    ASSERT_EQ(0, tm_dev_conn_set_error(cr));
    ASSERT_EQ(0, softnic_query_qp(tm_dev_ibv_qp(cr), &attr, IBV_QP_STATE,
                                  &init));
    EXPECT_EQ(IBV_QPS_ERR, attr.qp_state);
    ASSERT_EQ(0, softnic_query_qp(tm_dev_ibv_rx_qp(cr), &attr, IBV_QP_STATE,
                                  &init));
    EXPECT_EQ(IBV_QPS_RTS, attr.qp_state);
    EXPECT_FALSE(tm_dev_conn_rx_failed(cr));

    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_TM_RECV(v[0], 61, IBV_WC_TM_MATCH, 0x52, 0xa2, 0);
    ASSERT_EQ(0, softnic_test_step_data(r.srq));
    v = drain(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_TM_RECV(v[0], 61, IBV_WC_TM_DATA_VALID, 0, 0, payload.size());
    EXPECT_EQ(0, memcmp(buf, payload.data(), payload.size()));
}
