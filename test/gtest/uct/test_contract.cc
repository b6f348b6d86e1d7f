/*
 * Promises of the UCT API that every UCX transport keeps, checked on rc_tm
 * as a UCP or Open MPI user would meet them:
 *  1. a receive context can be posted once at a time;
 *  2. room freed in the receive lists is room available;
 *  3. destroying an endpoint completes everything still outstanding on it,
 *     and what its peer sent before is still delivered;
 *  4. pending requests keep their place against new sends;
 *  5. a flush queued behind pending requests completes, once.
 */
#include "uct_fixture.h"
#include "../common/softnic_steer.h"

#include <chrono>
#include <cstring>

using namespace rc_tm_test;

namespace {

/* A completion that counts its calls: invocations() also sees a second
 * invocation, which would not call func again (count went below 0) */
struct counted_completion {
    uct_completion_t comp;
    int              calls  = 0;
    ucs_status_t     status = UCS_INPROGRESS;

    int invocations() const { return 1 - comp.count; }

    counted_completion()
    {
        comp.func   = [](uct_completion_t *self) {
            auto *c = reinterpret_cast<counted_completion*>(self);
            ++c->calls;
            c->status = self->status;
        };
        comp.count  = 1;
        comp.status = UCS_OK;
    }
};

class rc_tm_contract : public uct_fixture {
protected:
    void TearDown() override
    {
        m_buffers.clear();   /* registered with the md the fixture closes */
        uct_fixture::TearDown();
    }

    uct_ep_h ep() { return m_sender.eps.at(0); }

    static size_t pack_vector(void *dest, void *arg)
    {
        auto *src = static_cast<std::vector<char>*>(arg);
        memcpy(dest, src->data(), src->size());
        return src->size();
    }

    ucs_status_t post(tag_recv &r, mapped_buffer &buf, uint64_t tag)
    {
        uct_iov_t iov = buf.iov(buf.m_buf.size());
        return uct_iface_tag_recv_zcopy(m_receiver.iface, tag, UINT64_MAX,
                                        &iov, 1, &r.ctx);
    }

    mapped_buffer *new_buffer(size_t size = 256)
    {
        m_buffers.emplace_back(new mapped_buffer(m_component, m_md, size, 0));
        return m_buffers.back().get();
    }

    void send_tag(uint64_t tag, size_t size = 64)
    {
        std::vector<char> data(size, 'd');
        ssize_t packed;
        ASSERT_TRUE(wait_for([&] {
            packed = uct_ep_tag_eager_bcopy(ep(), tag, 0, pack_vector, &data,
                                            0);
            return packed != UCS_ERR_NO_RESOURCE;
        }));
        ASSERT_EQ((ssize_t)size, packed);
    }

    /* Progresses the receiver alone, at most max times, until pred holds.
     * With the NIC on its own thread (soft_thread()), its work takes the
     * time it takes, as on a NIC: only progress calls that found something
     * to do count, for a bounded time */
    bool within_receiver_progress(int max, const std::function<bool()> &pred)
    {
        auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::seconds(10);
        int i = 0;

        while (i <= max) {
            if (pred()) {
                return true;
            }
            if (uct_worker_progress(m_receiver.worker) || !soft_thread()) {
                ++i;
            } else if (std::chrono::steady_clock::now() > deadline) {
                break;
            }
        }
        return pred();
    }

    /* Sends one-byte active messages carrying `value` until the endpoint
     * refuses; returns how many went */
    int fill_send_queue(char value)
    {
        std::vector<char> payload(1, value);
        int sent = 0;
        while (uct_ep_am_bcopy(ep(), 1, pack_vector, &payload, 0) > 0) {
            ++sent;
            EXPECT_LT(sent, 100000);
        }
        return sent;
    }

    /* The first byte of every active message received, in order */
    std::string am_order()
    {
        std::string order;
        for (const auto &msg : m_receiver.am_received) {
            order += msg.empty() ? '?' : msg[0];
        }
        return order;
    }

    std::vector<std::unique_ptr<mapped_buffer>> m_buffers;
};

/* A pending request that sends one active message of one byte */
struct pending_am {
    uct_pending_req_t req;
    uct_ep_h          ep;
    char              value;
    int               sent = 0;

    pending_am(uct_ep_h e, char v) : ep(e), value(v)
    {
        req.func = [](uct_pending_req_t *self) -> ucs_status_t {
            auto *p = reinterpret_cast<pending_am*>(self);
            std::vector<char> payload(1, p->value);
            ssize_t r = uct_ep_am_bcopy(p->ep, 1, [](void *dest, void *arg) {
                auto *v = static_cast<std::vector<char>*>(arg);
                memcpy(dest, v->data(), v->size());
                return v->size();
            }, &payload, 0);
            if (r < 0) {
                return (ucs_status_t)r;
            }
            p->sent = 1;
            return UCS_OK;
        };
    }
};

} // namespace


/* ----- 1. a receive context can be posted once ----- */

TEST_F(rc_tm_contract, context_still_posted_is_refused)
{
    open();
    mapped_buffer *b1 = new_buffer(), *b2 = new_buffer();
    tag_recv r;

    /* priv of a context never posted may hold anything */
    memset(r.ctx.priv, 0xa5, sizeof(r.ctx.priv));
    ASSERT_EQ(UCS_OK, post(r, *b1, 0x10));
    EXPECT_EQ(UCS_ERR_ALREADY_EXISTS, post(r, *b2, 0x11))
            << "same context, another buffer and tag";

    /* The first post is intact: its message arrives in b1 */
    send_tag(0x10);
    ASSERT_TRUE(wait_for([&] { return r.completed > 0; }));
    EXPECT_EQ(1, r.completed);
    EXPECT_EQ(UCS_OK, r.status);
    EXPECT_EQ('d', b1->ptr()[0]);
    EXPECT_EQ(0, b2->ptr()[0]);

    /* Completed: the context may be posted again */
    EXPECT_EQ(UCS_OK, post(r, *b2, 0x12));
    uct_iface_tag_recv_cancel(m_receiver.iface, &r.ctx, 1);
}

TEST_F(rc_tm_contract, context_reposted_at_once_after_forced_cancel)
{
    open({{"LIST_SIZE", "1"}});
    tag_recv device_recv, sw_recv;
    mapped_buffer *b1 = new_buffer(), *b2 = new_buffer(), *b3 = new_buffer();

    ASSERT_EQ(UCS_OK, post(device_recv, *b1, 0x20));   /* in the device */
    ASSERT_EQ(UCS_OK, post(sw_recv, *b2, 0x21));       /* in software */
    for (tag_recv *r : {&device_recv, &sw_recv}) {
        ASSERT_EQ(UCS_OK, uct_iface_tag_recv_cancel(m_receiver.iface, &r->ctx,
                                                    1));
    }
    /* No progress in between */
    EXPECT_EQ(UCS_OK, post(device_recv, *b3, 0x22));
    EXPECT_EQ(UCS_OK, post(sw_recv, *b1, 0x23));

    send_tag(0x22);
    send_tag(0x23);
    ASSERT_TRUE(wait_for([&] {
        return (device_recv.completed > 0) && (sw_recv.completed > 0);
    }));
    EXPECT_EQ(0x22u, device_recv.stag);
    EXPECT_EQ(0x23u, sw_recv.stag);
    EXPECT_EQ(1, device_recv.completed);
    EXPECT_EQ(1, sw_recv.completed);
}

TEST_F(rc_tm_contract, context_reposted_only_after_canceled_completion)
{
    open({{"LIST_SIZE", "1"}});
    tag_recv device_recv, sw_recv;
    mapped_buffer *b1 = new_buffer(), *b2 = new_buffer();
    mapped_buffer *b3 = new_buffer(), *b4 = new_buffer();

    ASSERT_EQ(UCS_OK, post(device_recv, *b1, 0x30));
    ASSERT_EQ(UCS_OK, post(sw_recv, *b2, 0x31));
    for (tag_recv *r : {&device_recv, &sw_recv}) {
        ASSERT_EQ(UCS_OK, uct_iface_tag_recv_cancel(m_receiver.iface, &r->ctx,
                                                    0));
        EXPECT_EQ(0, r->completed);
        EXPECT_EQ(UCS_ERR_ALREADY_EXISTS, post(*r, *b3, 0x32))
                << "its cancel has not completed yet";
    }

    ASSERT_TRUE(wait_for([&] {
        return (device_recv.completed > 0) && (sw_recv.completed > 0);
    }));
    for (tag_recv *r : {&device_recv, &sw_recv}) {
        EXPECT_EQ(UCS_ERR_CANCELED, r->status);
    }
    EXPECT_EQ(UCS_OK, post(device_recv, *b3, 0x33));
    EXPECT_EQ(UCS_OK, post(sw_recv, *b4, 0x34));
    for (tag_recv *r : {&device_recv, &sw_recv}) {
        uct_iface_tag_recv_cancel(m_receiver.iface, &r->ctx, 1);
    }
}

/* A completion callback may post its own context again (UCP does) */
TEST_F(rc_tm_contract, context_reposted_from_its_completion)
{
    open();
    mapped_buffer *b1 = new_buffer(), *b2 = new_buffer();
    struct reposting_recv {
        tag_recv                  r;
        uct_iface_h               iface;
        uct_iov_t                 next_iov;
        ucs_status_t              repost = UCS_INPROGRESS;
        decltype(uct_tag_context_t::completed_cb) inner;
    } rr;
    rr.iface    = m_receiver.iface;
    rr.next_iov = b2->iov(b2->m_buf.size());
    rr.inner    = rr.r.ctx.completed_cb;
    rr.r.ctx.completed_cb = [](uct_tag_context_t *self, uct_tag_t stag,
                               uint64_t imm, size_t length, void *inline_data,
                               ucs_status_t status) {
        auto *p = reinterpret_cast<reposting_recv*>(self);
        p->inner(self, stag, imm, length, inline_data, status);
        if (p->repost == UCS_INPROGRESS) {
            p->repost = uct_iface_tag_recv_zcopy(p->iface, 0x41, UINT64_MAX,
                                                 &p->next_iov, 1, self);
        }
    };

    uct_iov_t iov = b1->iov(b1->m_buf.size());
    ASSERT_EQ(UCS_OK, uct_iface_tag_recv_zcopy(m_receiver.iface, 0x40,
                                               UINT64_MAX, &iov, 1, &rr.r.ctx));
    send_tag(0x40);
    ASSERT_TRUE(wait_for([&] { return rr.r.completed > 0; }));
    EXPECT_EQ(UCS_OK, rr.repost);
    send_tag(0x41);
    ASSERT_TRUE(wait_for([&] { return rr.r.completed > 1; }));
    EXPECT_EQ(0x41u, rr.r.stag);
}


/* ----- 2. room freed is room available ----- */

class rc_tm_room : public rc_tm_contract,
                   public testing::WithParamInterface<std::tuple<int, int>> {
};

/* Both lists full; one posted receive canceled (which: the parameter;
 * forced or not: the other) makes room for one more within a progress call
 * or two, wherever it sat.  The device list is 16 (software receives move
 * back to it only once 2 entries are free), the software list 4. */
TEST_P(rc_tm_room, cancel_makes_room)
{
    const int which = std::get<0>(GetParam());
    const int force = std::get<1>(GetParam());
    open({{"LIST_SIZE", "16"}}, {{"TM_SW_LIST_SIZE", "4"}});
    const unsigned limit = m_receiver.attr.cap.tag.recv.max_outstanding;
    ASSERT_EQ(20u, limit);

    std::vector<tag_recv> r(limit + 1);
    for (unsigned i = 0; i < limit; ++i) {
        ASSERT_EQ(UCS_OK, post(r[i], *new_buffer(), 0x100 + i)) << i;
    }
    mapped_buffer *extra = new_buffer();
    ASSERT_EQ(UCS_ERR_EXCEEDS_LIMIT, post(r[limit], *extra, 0x1ff));

    ASSERT_EQ(UCS_OK, uct_iface_tag_recv_cancel(m_receiver.iface, &r[which].ctx,
                                                force));
    ucs_status_t status = UCS_ERR_EXCEEDS_LIMIT;
    EXPECT_TRUE(within_receiver_progress(2, [&] {
        status = post(r[limit], *extra, 0x1ff);
        return status == UCS_OK;
    })) << "cancel of receive " << which << " (force " << force << "): "
        << ucs_status_string(status);

    /* And the limit holds again */
    EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT, post(r[which], *new_buffer(), 0x200));

    /* Every live receive still gets its message */
    for (unsigned i = 0; i <= limit; ++i) {
        if ((int)i != which) {
            send_tag((i == limit) ? 0x1ff : 0x100 + i);
        }
    }
    ASSERT_TRUE(wait_for([&] {
        for (unsigned i = 0; i <= limit; ++i) {
            if (((int)i != which) && (r[i].completed == 0)) {
                return false;
            }
        }
        return true;
    }));
    for (unsigned i = 0; i <= limit; ++i) {
        if ((int)i != which) {
            EXPECT_EQ(UCS_OK, r[i].status) << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(device_and_software_entries, rc_tm_room,
                         testing::Combine(testing::Values(0, 7, 15, 16, 19),
                                          testing::Values(0, 1)));

/* A receive matched frees its room as well, device list only */
TEST_F(rc_tm_contract, match_makes_room_without_software_list)
{
    open({{"LIST_SIZE", "2"}}, {{"TM_SW_LIST_SIZE", "0"}});
    ASSERT_EQ(2u, m_receiver.attr.cap.tag.recv.max_outstanding);
    tag_recv r[3];
    ASSERT_EQ(UCS_OK, post(r[0], *new_buffer(), 1));
    ASSERT_EQ(UCS_OK, post(r[1], *new_buffer(), 2));
    mapped_buffer *extra = new_buffer();
    ASSERT_EQ(UCS_ERR_EXCEEDS_LIMIT, post(r[2], *extra, 3));
    ASSERT_EQ(UCS_OK, uct_iface_tag_recv_cancel(m_receiver.iface, &r[1].ctx, 0));
    EXPECT_TRUE(within_receiver_progress(2, [&] {
        return post(r[2], *extra, 3) == UCS_OK;
    }));
    uct_iface_tag_recv_cancel(m_receiver.iface, &r[0].ctx, 1);
    uct_iface_tag_recv_cancel(m_receiver.iface, &r[2].ctx, 1);
}


/* ----- 3. destroying an endpoint completes everything on it ----- */

TEST_F(rc_tm_contract, destroy_completes_every_outstanding_operation)
{
    open();
    mapped_buffer src(m_component, m_md, 64 * 1024, 's');
    mapped_buffer dst(m_component, m_md, 64 * 1024, 0);
    std::vector<counted_completion> comps(64);
    size_t started = 0;

    auto track = [&](ucs_status_t status) {
        ASSERT_TRUE((status == UCS_INPROGRESS) || (status == UCS_OK) ||
                    (status == UCS_ERR_NO_RESOURCE))
                << ucs_status_string(status);
        if (status == UCS_INPROGRESS) {
            ++started;
        }
    };

    /* The receiver never progresses: sends, reads, flushes and rendezvous
     * stay outstanding */
    for (int round = 0; round < 4; ++round) {
        uct_iov_t iov = src.iov(4096);
        uint64_t hdr  = 7;
        track(uct_ep_am_zcopy(ep(), 1, &hdr, sizeof(hdr), &iov, 1, 0,
                              &comps.at(started).comp));
        track(uct_ep_tag_eager_zcopy(ep(), 0x300 + round, 0, &iov, 1, 0,
                                     &comps.at(started).comp));
        uct_iov_t get_iov = dst.iov(4096);
        track(uct_ep_get_zcopy(ep(), &get_iov, 1, src.addr(), src.m_rkey.rkey,
                               &comps.at(started).comp));
        uct_iov_t rndv_iov = src.iov(src.m_buf.size());
        char header[20] = {};
        ucs_status_ptr_t op = uct_ep_tag_rndv_zcopy(ep(), 0x400 + round,
                                                    header, sizeof(header),
                                                    &rndv_iov, 1, 0,
                                                    &comps.at(started).comp);
        ASSERT_FALSE(UCS_PTR_IS_ERR(op)) << ucs_status_string(UCS_PTR_STATUS(op));
        ++started;
        track(uct_ep_flush(ep(), 0, &comps.at(started).comp));
    }
    ASSERT_GE(started, 16u);

    uct_ep_destroy(ep());
    m_sender.eps.clear();

    size_t called = 0;
    for (size_t i = 0; i < started; ++i) {
        EXPECT_EQ(1, comps[i].invocations()) << "operation " << i;
        EXPECT_TRUE((comps[i].status == UCS_ERR_CANCELED) ||
                    (comps[i].status == UCS_OK))
                << i << ": " << ucs_status_string(comps[i].status);
        called += comps[i].calls;
    }
    EXPECT_EQ(started, called);

    /* Nothing completes later, whoever progresses */
    for (int i = 0; i < 1000; ++i) {
        progress();
    }
    for (size_t i = 0; i < started; ++i) {
        EXPECT_EQ(1, comps[i].invocations()) << "operation " << i;
    }
}

/* What the NIC took for an endpoint before it was destroyed is delivered:
 * destroying a QP drops its unpolled completions (mlx5), so the transport
 * stops the QP and destroys it only once its completions were polled.
 * One receiver progress runs the software NIC over 21 arrivals and polls
 * 16 of them; the rest, the matched message's among them, stay on the CQ
 * while the endpoint is destroyed. */
TEST_F(rc_tm_contract, destroy_delivers_what_the_nic_took)
{
    open();
    mapped_buffer rbuf(m_component, m_md, 4096, 0);
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, rbuf, 0x77));

    std::vector<char> data(200, 'u'), matched(300, 'm');
    for (unsigned i = 0; i < 20; ++i) {
        ASSERT_EQ((ssize_t)data.size(),
                  uct_ep_tag_eager_bcopy(ep(), 0x500 + i, 0, pack_vector,
                                         &data, 0));
    }
    ASSERT_EQ((ssize_t)matched.size(),
              uct_ep_tag_eager_bcopy(ep(), 0x77, 0, pack_vector, &matched, 0));
    if (soft_thread()) {
        /* the receiver's NIC takes them by itself: the sender's flush
         * completes once it has (sender progress alone) */
        auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::seconds(10);
        while (uct_ep_flush(ep(), 0, NULL) != UCS_OK) {
            ASSERT_LT(std::chrono::steady_clock::now(), deadline);
            uct_worker_progress(m_sender.worker);
        }
    }
    uct_worker_progress(m_receiver.worker);
    ASSERT_LT(m_receiver.unexpected.size(), 20u) << "no completion left";

    uct_ep_destroy(m_receiver.eps.at(0));
    m_receiver.eps.clear();
    ASSERT_TRUE(wait_for([&] {
        return (m_receiver.unexpected.size() == 20) && (r.completed > 0);
    })) << m_receiver.unexpected.size() << " unexpected of 20 delivered";
    EXPECT_EQ(UCS_OK, r.status);
    EXPECT_EQ(0, memcmp(matched.data(), rbuf.ptr(), matched.size()));
    for (unsigned i = 0; i < 20; ++i) {
        EXPECT_EQ(0x500u + i, m_receiver.unexpected[i].tag);
    }
}

/* A rendezvous the receiver finishes in software is a read on its own
 * endpoint: destroying that endpoint completes the receive */
TEST_F(rc_tm_contract, destroy_completes_the_receive_of_a_pending_read)
{
    open({{"LIST_SIZE", "1"}}, {{"TX_QUEUE_LEN", "4"}});
    mapped_buffer src(m_component, m_md, 32 * 1024, 's');
    tag_recv blocker, r;
    ASSERT_EQ(UCS_OK, post(blocker, *new_buffer(), 0x500));  /* device */
    mapped_buffer *rbuf = new_buffer(32 * 1024);
    ASSERT_EQ(UCS_OK, post(r, *rbuf, 0x501));                /* software */

    /* The receiver's endpoint to the sender has no credit left: its sends
     * wait for the sender, which does not progress */
    uct_ep_h back = m_receiver.eps.at(0);
    std::vector<char> payload(8, 'b');
    int sent = 0;
    while (uct_ep_am_bcopy(back, 1, pack_vector, &payload, 0) > 0) {
        ASSERT_LT(++sent, 100000);
    }

    counted_completion rndv_comp;
    uct_iov_t iov = src.iov(src.m_buf.size());
    char header[20] = {};
    ucs_status_ptr_t op = uct_ep_tag_rndv_zcopy(ep(), 0x501, header,
                                                sizeof(header), &iov, 1, 0,
                                                &rndv_comp.comp);
    ASSERT_FALSE(UCS_PTR_IS_ERR(op));
    /* The receiver matches it in software and must read the data */
    ASSERT_TRUE(within_receiver_progress(1000, [&] {
        return r.consumed > 0;
    }));
    EXPECT_EQ(0, r.completed);

    uct_ep_destroy(back);
    m_receiver.eps.clear();
    EXPECT_EQ(1, r.completed);
    EXPECT_EQ(UCS_ERR_CANCELED, r.status);
    for (int i = 0; i < 1000; ++i) {
        uct_worker_progress(m_receiver.worker);
    }
    EXPECT_EQ(1, r.completed);
    uct_iface_tag_recv_cancel(m_receiver.iface, &blocker.ctx, 1);

    /* The sender's rendezvous never got its FIN */
    EXPECT_EQ(0, rndv_comp.invocations());
    uct_ep_destroy(ep());
    m_sender.eps.clear();
    EXPECT_EQ(1, rndv_comp.invocations());
    EXPECT_EQ(UCS_ERR_CANCELED, rndv_comp.status);
}


/* A receive finished in software completes only once its FIN is posted:
 * completed with the FIN still queued for a credit, it let its user stop
 * progressing, and the sender waited forever (ucp_deep_queue -n 3000 -s
 * 16384 hung in thread mode).  Six reads on four credits: the FINs queue
 * behind the last reads.  The receiver alone progresses until it is
 * quiet, then the sender alone: every receive completed has had its FIN
 * reach the sender. */
TEST_F(rc_tm_contract, a_receive_read_in_software_completes_after_its_fin)
{
    const config_t receiver = {{"TX_QUEUE_LEN", "4"}};
    open({{"LIST_SIZE", "1"}}, {}, &receiver);
    const int count = 6;
    mapped_buffer src(m_component, m_md, 16 * 1024, 's');
    tag_recv blocker;
    std::vector<tag_recv> r(count);
    ASSERT_EQ(UCS_OK, post(blocker, *new_buffer(), 0x600));  /* device */
    for (int i = 0; i < count; ++i) {                         /* software */
        ASSERT_EQ(UCS_OK, post(r[i], *new_buffer(16 * 1024), 0x601 + i));
    }

    std::vector<counted_completion> rndv(count);
    uct_iov_t iov = src.iov(src.m_buf.size());
    char header[20] = {};
    for (int i = 0; i < count; ++i) {
        ucs_status_ptr_t op = uct_ep_tag_rndv_zcopy(ep(), 0x601 + i, header,
                                                    sizeof(header), &iov, 1,
                                                    0, &rndv[i].comp);
        ASSERT_FALSE(UCS_PTR_IS_ERR(op))
                << i << ": " << ucs_status_string(UCS_PTR_STATUS(op));
    }

    auto completed = [&] {
        int n = 0;
        for (auto &x : r) {
            n += x.completed;
        }
        return n;
    };
    auto fins = [&] {
        int n = 0;
        for (auto &x : rndv) {
            n += x.invocations();
        }
        return n;
    };
    ASSERT_TRUE(within_receiver_progress(1000, [&] {
        return counters(m_receiver)[RX_SW_MATCH] == (uint64_t)count;
    }));
    for (int i = 0; i < 1000; ++i) {
        uct_worker_progress(m_receiver.worker);
    }
    int done = completed();
    EXPECT_GT(done, 0);
    for (int i = 0; i < 1000; ++i) {
        uct_worker_progress(m_sender.worker);
    }
    EXPECT_GE(fins(), done) << "receives completed before their FINs went";

    ASSERT_TRUE(wait_for([&] { return (completed() == count) &&
                                      (fins() == count); }));
    for (int i = 0; i < count; ++i) {
        EXPECT_EQ(UCS_OK, r[i].status) << i;
        EXPECT_EQ(UCS_OK, rndv[i].status) << i;
    }
    uct_iface_tag_recv_cancel(m_receiver.iface, &blocker.ctx, 1);
}

/* ----- 4. pending requests keep their place ----- */

TEST_F(rc_tm_contract, send_from_completion_waits_behind_pending)
{
    open({}, {{"TX_QUEUE_LEN", "4"}});
    mapped_buffer buf(m_component, m_md, 64, 'z');

    /* Its completion sends 'C' (or queues it, as UCP would) */
    struct sending_completion {
        uct_completion_t comp;
        uct_ep_h         ep;
        pending_am       *later;
        ucs_status_t     status = UCS_INPROGRESS;
    } sc;
    pending_am late_c(ep(), 'C');
    sc.ep    = ep();
    sc.later = &late_c;
    sc.comp.count  = 1;
    sc.comp.status = UCS_OK;
    sc.comp.func   = [](uct_completion_t *self) {
        auto *s = reinterpret_cast<sending_completion*>(self);
        s->status = s->later->req.func(&s->later->req);
        if (s->status == UCS_ERR_NO_RESOURCE) {
            EXPECT_EQ(UCS_OK, uct_ep_pending_add(s->ep, &s->later->req, 0));
        }
    };

    uct_iov_t iov = buf.iov(1);
    ucs_status_t status = uct_ep_am_zcopy(ep(), 1, NULL, 0, &iov, 1, 0,
                                          &sc.comp);
    ASSERT_EQ(UCS_INPROGRESS, status);
    int filled = fill_send_queue('A');

    pending_am b(ep(), 'B');
    ASSERT_EQ(UCS_OK, uct_ep_pending_add(ep(), &b.req, 0));

    ASSERT_TRUE(wait_for([&] { return b.sent && late_c.sent; }));
    ASSERT_TRUE(wait_for([&] {
        return m_receiver.am_received.size() >= (size_t)filled + 3;
    }));
    std::string order = am_order();
    EXPECT_EQ("z" + std::string(filled, 'A') + "BC", order);
}

/* ----- 5. a flush queued behind pending sends completes ----- */

struct pending_flush {
    uct_pending_req_t  req;
    uct_ep_h           ep;
    counted_completion done;
    int                attempts = 0;

    explicit pending_flush(uct_ep_h e) : ep(e)
    {
        req.func = [](uct_pending_req_t *self) -> ucs_status_t {
            auto *p = reinterpret_cast<pending_flush*>(self);
            ++p->attempts;
            ucs_status_t status = uct_ep_flush(p->ep, 0, &p->done.comp);
            if (status == UCS_OK) {
                /* done at once: completes as a UCT completion would */
                if (--p->done.comp.count == 0) {
                    p->done.comp.func(&p->done.comp);
                }
            } else if (status != UCS_INPROGRESS) {
                return status;   /* stays queued */
            }
            return UCS_OK;
        };
    }
};

TEST_F(rc_tm_contract, flush_behind_pending_completes_once)
{
    open({}, {{"TX_QUEUE_LEN", "4"}});
    int filled = fill_send_queue('A');
    pending_am b(ep(), 'B');
    ASSERT_EQ(UCS_OK, uct_ep_pending_add(ep(), &b.req, 0));

    counted_completion direct;
    EXPECT_EQ(UCS_ERR_NO_RESOURCE, uct_ep_flush(ep(), 0, &direct.comp))
            << "requests are queued ahead of the flush";

    pending_flush f(ep());
    ASSERT_EQ(UCS_OK, uct_ep_pending_add(ep(), &f.req, 0));
    ASSERT_TRUE(wait_for([&] { return f.done.calls > 0; }, 60))
            << "flush retried " << f.attempts << " times";
    EXPECT_TRUE(b.sent);
    EXPECT_EQ(UCS_OK, f.done.status);
    ASSERT_TRUE(wait_for([&] {
        return m_receiver.am_received.size() >= (size_t)filled + 1;
    }));
    for (int i = 0; i < 1000; ++i) {
        progress();
    }
    EXPECT_EQ(1, f.done.invocations());
    EXPECT_EQ(0, direct.invocations());
}

/* The flush is the last request and every send completes before it is
 * dispatched: nothing more will complete to retry it */
TEST_F(rc_tm_contract, flush_behind_pending_completes_when_all_is_done)
{
    open({}, {{"TX_QUEUE_LEN", "1"}});
    fill_send_queue('A');
    pending_flush f(ep());
    ASSERT_EQ(UCS_OK, uct_ep_pending_add(ep(), &f.req, 0));
    ASSERT_TRUE(wait_for([&] { return f.done.calls > 0; }, 60))
            << "flush retried " << f.attempts << " times";
    EXPECT_EQ(UCS_OK, f.done.status);
    for (int i = 0; i < 1000; ++i) {
        progress();
    }
    EXPECT_EQ(1, f.done.invocations());
}

/* A NIC may still write completions for a QP after it entered the error
 * state; it says when it wrote its last with IBV_EVENT_QP_LAST_WQE_REACHED.
 * Here the device matched a message longer than a packet for the endpoint
 * (MATCH polled), and the endpoint is destroyed before the device placed
 * the data: however often the receiver progresses meanwhile (its CQs are
 * empty), the connection must stay until the entry's final completion was
 * written and polled.  Destroyed at the first empty poll, the receive never
 * completes. */
TEST_F(rc_tm_contract, destroy_waits_for_the_last_wqe)
{
    open();
    tm_dev_t *dev;
    tm_dev_srq_t *srq;
    uct_rc_tm_iface_device(m_receiver.iface, &dev, &srq);
    ASSERT_TRUE(softnic_is_soft(dev));

    mapped_buffer rbuf(m_component, m_md, 8192, 0);
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, rbuf, 0x77));
    ASSERT_TRUE(wait_for([&] { return softnic_test_listed_tags(srq) == 1; }));

    softnic_test_set_mode(dev, SOFTNIC_MODE_MANUAL);
    std::vector<char> data(6000, 'd');     /* over the 4 KiB packet */
    ASSERT_EQ((ssize_t)data.size(),
              uct_ep_tag_eager_bcopy(ep(), 0x77, 0, pack_vector, &data, 0));
    softnic_event_t ev;
    ASSERT_EQ(1u, softnic_test_events(srq, &ev, 1));
    ASSERT_EQ(SOFTNIC_EV_ARRIVAL, ev.kind);
    ASSERT_EQ(0, softnic_test_step(srq, &ev));
    ASSERT_EQ(1u, softnic_test_pending_data(srq)) << "MATCH only";
    progress();

    uct_ep_destroy(m_receiver.eps.at(0));
    m_receiver.eps.clear();
    for (int i = 0; i < 100; ++i) {
        uct_worker_progress(m_receiver.worker);
    }
    EXPECT_EQ(0, r.completed);

    ASSERT_EQ(0, softnic_test_step_data(srq));
    softnic_test_set_mode(dev, SOFTNIC_MODE_AUTO);
    ASSERT_TRUE(wait_for([&] { return r.completed > 0; }))
            << "the final completion was dropped with the QP";
    EXPECT_EQ(UCS_OK, r.status);
    EXPECT_EQ(0, memcmp(data.data(), rbuf.ptr(), data.size()));
}

/* Room in the device's list comes back at an entry's final completion, not
 * at its MATCH (rdma-core frees the handle then): with a one-entry list, a
 * receive posted between the MATCH of a message longer than a packet and
 * its final completion waits in software, and is matched all the same. */
TEST_F(rc_tm_contract, list_room_comes_back_at_the_final_completion)
{
    open({{"LIST_SIZE", "1"}});
    tm_dev_t *dev;
    tm_dev_srq_t *srq;
    uct_rc_tm_iface_device(m_receiver.iface, &dev, &srq);
    ASSERT_TRUE(softnic_is_soft(dev));

    mapped_buffer b1(m_component, m_md, 8192, 0), b2(m_component, m_md, 8192, 0);
    tag_recv r1, r2;
    ASSERT_EQ(UCS_OK, post(r1, b1, 0x51));
    ASSERT_TRUE(wait_for([&] { return softnic_test_listed_tags(srq) == 1; }));

    softnic_test_set_mode(dev, SOFTNIC_MODE_MANUAL);
    std::vector<char> m1(6000, '1'), m2(6000, '2');
    ASSERT_EQ((ssize_t)m1.size(),
              uct_ep_tag_eager_bcopy(ep(), 0x51, 0, pack_vector, &m1, 0));
    softnic_event_t ev;
    ASSERT_EQ(1u, softnic_test_events(srq, &ev, 1));
    ASSERT_EQ(0, softnic_test_step(srq, &ev));
    ASSERT_EQ(1u, softnic_test_pending_data(srq)) << "MATCH only";
    progress();

    ASSERT_EQ(UCS_OK, post(r2, b2, 0x52));
    EXPECT_EQ(1u, counters(m_receiver)[POST_SW]) << "the entry is not free";

    ASSERT_EQ(0, softnic_test_step_data(srq));
    softnic_test_set_mode(dev, SOFTNIC_MODE_AUTO);
    ASSERT_TRUE(wait_for([&] { return r1.completed > 0; }));
    EXPECT_EQ(UCS_OK, r1.status);
    EXPECT_EQ(0, memcmp(m1.data(), b1.ptr(), m1.size()));
    ASSERT_EQ((ssize_t)m2.size(),
              uct_ep_tag_eager_bcopy(ep(), 0x52, 0, pack_vector, &m2, 0));
    ASSERT_TRUE(wait_for([&] { return r2.completed > 0; }));
    EXPECT_EQ(UCS_OK, r2.status);
    EXPECT_EQ(0, memcmp(m2.data(), b2.ptr(), m2.size()));
}
