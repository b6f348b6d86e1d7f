/*
 * Faults at the UCT level, over the software device: a peer process killed
 * in the middle of a rendezvous (either side), receive resources exhausted,
 * invalid rkeys, and malformed wire headers sent by a peer that speaks to
 * the device directly.  Every test checks that the error reaches the caller
 * (a completion status, the error handler, or an error message when a
 * message cannot be attributed to any request), that every wait is bounded,
 * and that no byte outside the registered buffers changes (guard bytes on
 * both sides of each buffer, outside its registration).
 *
 * docs/testing.md lists these cases next to those other suites cover.
 */
#include "../uct/uct_fixture.h"

#include "../common/softnic_steer.h"
#include "../common/ucx_log_capture.h"
#include <dev/tm_dev.h>

#include <ucs/debug/log_def.h>

#include <cstdarg>
#include <cstring>
#include <endian.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace rc_tm_test;

namespace {

const uint64_t FULL_MASK = UINT64_MAX;
const size_t   TMH       = sizeof(struct ibv_tmh);
const size_t   RVH       = sizeof(struct ibv_rvh);

/* Registered memory with guard bytes on both sides that no registration
 * covers */
struct guarded_buffer {
    static const size_t GUARD = 4096;

    guarded_buffer(uct_component_h component, uct_md_h md, size_t size,
                   char fill) :
        m_component(component), m_md(md), m_mem(size + 2 * GUARD, 'G'),
        m_size(size)
    {
        uct_md_attr_t attr;

        memset(data(), fill, size);
        EXPECT_EQ(UCS_OK, uct_md_mem_reg(md, data(), size,
                                         UCT_MD_MEM_ACCESS_ALL, &m_memh));
        EXPECT_EQ(UCS_OK, uct_md_query(md, &attr));
        m_rkey_buf.resize(attr.rkey_packed_size);
        EXPECT_EQ(UCS_OK, uct_md_mkey_pack(md, m_memh, m_rkey_buf.data()));
        EXPECT_EQ(UCS_OK, uct_rkey_unpack(component, m_rkey_buf.data(),
                                          &m_rkey));
    }

    ~guarded_buffer()
    {
        uct_rkey_release(m_component, &m_rkey);
        dereg();
    }

    void dereg()
    {
        if (m_memh != nullptr) {
            EXPECT_EQ(UCS_OK, uct_md_mem_dereg(m_md, m_memh));
            m_memh = nullptr;
        }
    }

    char *data() { return m_mem.data() + GUARD; }
    uint64_t addr() { return (uintptr_t)data(); }
    uint64_t rkey() const { return m_rkey.rkey; }

    uct_iov_t iov(size_t length, uct_mem_h memh = nullptr)
    {
        uct_iov_t iov;
        iov.buffer = data();
        iov.length = length;
        iov.memh   = (memh != nullptr) ? memh : m_memh;
        iov.stride = 0;
        iov.count  = 1;
        return iov;
    }

    bool guards_intact() const
    {
        for (size_t i = 0; i < GUARD; ++i) {
            if ((m_mem[i] != 'G') || (m_mem[GUARD + m_size + i] != 'G')) {
                return false;
            }
        }
        return true;
    }

    bool all(char c) const
    {
        for (size_t i = 0; i < m_size; ++i) {
            if (m_mem[GUARD + i] != c) {
                return false;
            }
        }
        return true;
    }

    void pattern(uint8_t seed)
    {
        for (size_t i = 0; i < m_size; ++i) {
            data()[i] = (char)(seed + i * 11);
        }
    }

    bool has_pattern(uint8_t seed) const
    {
        for (size_t i = 0; i < m_size; ++i) {
            if (m_mem[GUARD + i] != (char)(seed + i * 11)) {
                return false;
            }
        }
        return true;
    }

    uct_component_h    m_component;
    uct_md_h           m_md;
    std::vector<char>  m_mem;
    size_t             m_size;
    uct_mem_h          m_memh = nullptr;
    std::vector<char>  m_rkey_buf;
    uct_rkey_bundle_t  m_rkey;
};


std::string tm_msg(uint8_t opcode, uint64_t tag, uint32_t app_ctx,
                   const std::string &payload)
{
    struct ibv_tmh tmh;

    memset(&tmh, 0, sizeof(tmh));
    tmh.opcode  = opcode;
    tmh.app_ctx = htobe32(app_ctx);
    tmh.tag     = htobe64(tag);
    return std::string((const char*)&tmh, TMH) + payload;
}

std::string rvh(uint64_t va, uint32_t rkey, uint32_t len)
{
    struct ibv_rvh h;

    h.va   = htobe64(va);
    h.rkey = htobe32(rkey);
    h.len  = htobe32(len);
    return std::string((const char*)&h, RVH);
}

/* A peer that speaks to the device directly: its own soft device, with a
 * connection to an rc_tm interface's SRQ, sending whatever bytes a test
 * writes */
struct raw_peer {
    tm_dev_t          *dev  = nullptr;
    tm_dev_cq_t       *cq   = nullptr;
    tm_dev_srq_t      *srq  = nullptr;
    tm_dev_conn_t     *conn = nullptr;
    tm_dev_mr_t       *mr   = nullptr;
    std::vector<char> arena = std::vector<char>(1 << 20);
    size_t            pos   = 0;
    unsigned          sent  = 0, completed = 0;
    std::vector<enum ibv_wc_status> statuses;

    void open(uct_iface_h iface, const uct_iface_attr_t &attr)
    {
        tm_dev_attr_t dattr = {};
        tm_dev_info_t info;
        ASSERT_EQ(0, tm_dev_find("soft", &info));
        ASSERT_EQ(0, tm_dev_open(&info, &dattr, &dev));
        ASSERT_EQ(0, tm_dev_create_cq(dev, 256, &cq));
        ASSERT_EQ(0, tm_dev_create_srq(dev, cq, &srq));
        ASSERT_EQ(0, tm_dev_reg_mr(dev, arena.data(), arena.size(),
                                   IBV_ACCESS_LOCAL_WRITE, &mr));
        for (unsigned i = 0; i < 16; ++i) {
            struct ibv_sge sge = {(uintptr_t)alloc(8192), 8192, mr->lkey};
            struct ibv_recv_wr wr = {}, *bad;
            wr.sg_list = &sge;
            wr.num_sge = 1;
            ASSERT_EQ(0, tm_dev_post_srq_recv(srq, &wr, &bad));
        }
        ASSERT_EQ(0, tm_dev_create_conn(dev, srq, cq, &conn));

        std::vector<char> dev_addr(attr.device_addr_len);
        std::vector<char> srq_addr(attr.iface_addr_len);
        ASSERT_EQ(UCS_OK, uct_iface_get_device_address(iface,
                                (uct_device_addr_t*)dev_addr.data()));
        ASSERT_EQ(UCS_OK, uct_iface_get_address(iface,
                                (uct_iface_addr_t*)srq_addr.data()));
        ASSERT_EQ(0, tm_dev_connect_to_srq(conn, dev_addr.data(),
                                           srq_addr.data()));
    }

    void close()
    {
        if (conn != nullptr) {
            tm_dev_destroy_conn(conn);
        }
        if (mr != nullptr) {
            tm_dev_dereg_mr(dev, mr);
        }
        if (srq != nullptr) {
            tm_dev_destroy_srq(srq);
        }
        if (cq != nullptr) {
            tm_dev_destroy_cq(cq);
        }
        if (dev != nullptr) {
            tm_dev_close(dev);
        }
        conn = nullptr; mr = nullptr; srq = nullptr; cq = nullptr;
        dev  = nullptr;
    }

    char *alloc(size_t size)
    {
        char *p = arena.data() + pos;
        pos    += (size + 63) & ~size_t(63);
        return p;
    }

    int send(const std::string &msg)
    {
        char *buf = alloc(msg.size());
        memcpy(buf, msg.data(), msg.size());
        struct ibv_sge sge = {(uintptr_t)buf, (uint32_t)msg.size(), mr->lkey};
        struct ibv_send_wr wr = {}, *bad;
        wr.wr_id      = sent;
        wr.opcode     = IBV_WR_SEND;
        wr.sg_list    = &sge;
        wr.num_sge    = 1;
        wr.send_flags = IBV_SEND_SIGNALED;
        int ret = tm_dev_post_send(conn, &wr, &bad);
        sent   += (ret == 0);
        return ret;
    }

    /* Polls this device; true when every send completed (the receiving
     * device took the message) */
    bool sends_done()
    {
        tm_dev_wc_t wc[16];
        int n = tm_dev_poll_cq(cq, 16, wc);
        for (int i = 0; i < n; ++i) {
            if (wc[i].opcode == IBV_WC_SEND) {
                ++completed;
                statuses.push_back(wc[i].status);
            }
        }
        return completed == sent;
    }
};

/* Large enough to go rendezvous */
const size_t RNDV_SIZE = 256 * 1024;

class rc_tm_fault : public uct_fixture {
protected:
    void TearDown() override
    {
        m_raw.close();
        if (m_peer > 0) {
            kill(m_peer, SIGKILL);
            waitpid(m_peer, NULL, 0);
        }
        if (m_fd >= 0) {
            ::close(m_fd);
        }
        uct_fixture::TearDown();
    }

    void open_md(const config_t &md_config = {})
    {
        uct_md_config_t *config;
        ASSERT_EQ(UCS_OK, uct_md_config_read(m_component, NULL, NULL,
                                             &config));
        for (const auto &kv : md_config) {
            ASSERT_EQ(UCS_OK, uct_config_modify(config, kv.first.c_str(),
                                                kv.second.c_str()));
        }
        ucs_status_t status = uct_md_open(m_component, "soft", config, &m_md);
        uct_config_release(config);
        ASSERT_EQ(UCS_OK, status);
        ASSERT_EQ(UCS_OK, uct_md_query(m_md, &m_md_attr));
    }

    /* One interface in this process, connected to the peer process's over
     * the socket (as UCP would exchange the addresses) */
    bool open_connected(entity &e, const config_t &md_config = {},
                        const config_t &iface_config = {})
    {
        open_md(md_config);
        uint64_t features = UCT_IFACE_FEATURE_AM | UCT_IFACE_FEATURE_TAG |
                            UCT_IFACE_FEATURE_GET | UCT_IFACE_FEATURE_PUT;
        if ((m_md == nullptr) ||
            (open_iface(e, iface_config, features) != UCS_OK)) {
            return false;
        }
        uct_ep_params_t params = {};
        params.field_mask      = UCT_EP_PARAM_FIELD_IFACE;
        params.iface           = e.iface;
        uct_ep_h ep;
        if (uct_ep_create(&params, &ep) != UCS_OK) {
            return false;
        }
        e.eps.push_back(ep);

        size_t dev_len = e.attr.device_addr_len;
        std::vector<char> mine(dev_len + e.attr.ep_addr_len);
        std::vector<char> peer(mine.size());
        uct_iface_get_device_address(e.iface, (uct_device_addr_t*)mine.data());
        uct_ep_get_address(ep, (uct_ep_addr_t*)(mine.data() + dev_len));
        return (write(m_fd, mine.data(), mine.size()) ==
                (ssize_t)mine.size()) &&
               (read(m_fd, peer.data(), peer.size()) ==
                (ssize_t)peer.size()) &&
               (uct_ep_connect_to_ep(ep, (uct_device_addr_t*)peer.data(),
                                     (uct_ep_addr_t*)(peer.data() + dev_len))
                == UCS_OK);
    }

    /* Runs body in a child process with its own UCX objects; its exit code
     * is the step where it failed (0: fine).  Bodies end waiting for the
     * parent to kill them (or to close the socket). */
    void fork_peer(const std::function<int()> &body)
    {
        int fds[2];
        ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM, 0, fds));
        fflush(stdout);
        m_peer = fork();
        ASSERT_GE(m_peer, 0);
        if (m_peer == 0) {
            ::close(fds[0]);
            m_fd = fds[1];
            uct_fixture::SetUp();   /* a fresh async context for the child */
            _exit(body());
        }
        ::close(fds[1]);
        m_fd = fds[0];
    }

    /* A child that sends one rendezvous with tag when told ('p'), says
     * when it did ('s'), then waits to be killed with its buffer still
     * registered */
    void fork_rndv_sender(uct_tag_t tag)
    {
        fork_peer([this, tag]() {
            if (!open_connected(m_sender)) {
                return 2;
            }
            guarded_buffer sbuf(m_component, m_md, RNDV_SIZE, 's');
            test_completion comp;
            if (!wait_peer('p') ||
                UCS_PTR_IS_ERR(send_rndv(m_sender.eps[0], tag, sbuf,
                                         RNDV_SIZE, comp))) {
                return 3;
            }
            progress();
            return (signal_peer('s') && wait_peer('k')) ? 0 : 4;
        });
    }

    bool signal_peer(char token)
    {
        return write(m_fd, &token, 1) == 1;
    }

    bool wait_peer(char expected)
    {
        char token = 0;
        return (read(m_fd, &token, 1) == 1) && (token == expected);
    }

    void kill_peer()
    {
        ASSERT_GT(m_peer, 0);
        ASSERT_EQ(0, kill(m_peer, SIGKILL));
        int status;
        ASSERT_EQ(m_peer, waitpid(m_peer, &status, 0));
        EXPECT_TRUE(WIFSIGNALED(status))
                << "the peer exited by itself (failed at step "
                << WEXITSTATUS(status) << ")";
        m_peer = 0;
    }

    tm_dev_t *device(entity &e, tm_dev_srq_t **srq_p = nullptr)
    {
        tm_dev_t *dev;
        tm_dev_srq_t *srq;
        uct_rc_tm_iface_device(e.iface, &dev, &srq);
        EXPECT_TRUE(softnic_is_soft(dev));
        if (srq_p != nullptr) {
            *srq_p = srq;
        }
        return dev;
    }

    /* One device event in MANUAL mode: the oldest arrival of any connection */
    static int step_arrival(tm_dev_srq_t *srq)
    {
        softnic_event_t ev[16];
        unsigned n = softnic_test_events(srq, ev, 16);
        for (unsigned i = 0; i < n; ++i) {
            if (ev[i].kind == SOFTNIC_EV_ARRIVAL) {
                return softnic_test_step(srq, &ev[i]);
            }
        }
        return EAGAIN;
    }

    ucs_status_t post(tag_recv &r, entity &e, guarded_buffer &buf,
                      uint64_t tag, size_t length)
    {
        uct_iov_t iov = buf.iov(length);
        return uct_iface_tag_recv_zcopy(e.iface, tag, FULL_MASK, &iov, 1,
                                        &r.ctx);
    }

    static size_t pack_vector(void *dest, void *arg)
    {
        auto *v = static_cast<std::vector<char>*>(arg);
        memcpy(dest, v->data(), v->size());
        return v->size();
    }

    ucs_status_ptr_t send_rndv(uct_ep_h ep, uint64_t tag, guarded_buffer &buf,
                               size_t length, test_completion &comp)
    {
        char header[16];
        memset(header, 'h', sizeof(header));
        uct_iov_t iov = buf.iov(length);
        return uct_ep_tag_rndv_zcopy(ep, tag, header, sizeof(header), &iov, 1,
                                     0, &comp.comp);
    }

    pid_t     m_peer = 0;
    int       m_fd   = -1;
    raw_peer  m_raw;
};

} // namespace


/* ----- a peer killed in the middle of a rendezvous ----- */

/* The sender dies after its request arrived, before the receiver's device
 * reads the data: the receive completes with an error, nothing is written */
TEST_F(rc_tm_fault, sender_killed_before_the_device_reads)
{
    fork_rndv_sender(0x11);

    ASSERT_TRUE(open_connected(m_receiver));
    tm_dev_srq_t *srq;
    tm_dev_t *dev = device(m_receiver, &srq);
    guarded_buffer rbuf(m_component, m_md, RNDV_SIZE, 'r');
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, m_receiver, rbuf, 0x11, RNDV_SIZE));
    ASSERT_TRUE(wait_for([&] { return softnic_test_listed_tags(srq) == 1; }));
    softnic_test_set_mode(dev, SOFTNIC_MODE_MANUAL);   /* the request waits */
    ASSERT_TRUE(signal_peer('p'));
    ASSERT_TRUE(wait_peer('s'));
    kill_peer();

    ucx_log_capture log;
    softnic_test_set_mode(dev, SOFTNIC_MODE_AUTO);
    ASSERT_TRUE(wait_for([&] { return r.completed > 0; }))
            << "the receive of a dead sender's rendezvous never completed";
    EXPECT_NE(UCS_OK, r.status);
    EXPECT_EQ(1, r.consumed);
    EXPECT_EQ(0u, counters(m_receiver)[RX_SW_MATCH]) << "not in the device";
    EXPECT_TRUE(rbuf.all('r')) << "the failed read wrote into the buffer";
    EXPECT_TRUE(rbuf.guards_intact());
}

/* The same, when the receive waits in rc_tm's software list and the
 * transport reads the data itself */
TEST_F(rc_tm_fault, sender_killed_before_software_reads)
{
    fork_rndv_sender(0x11);

    ASSERT_TRUE(open_connected(m_receiver, {{"LIST_SIZE", "1"}}));
    tm_dev_t *dev = device(m_receiver);
    guarded_buffer fbuf(m_component, m_md, 1024, 'f');
    guarded_buffer rbuf(m_component, m_md, RNDV_SIZE, 'r');
    tag_recv filler, r;
    ASSERT_EQ(UCS_OK, post(filler, m_receiver, fbuf, 0x99, 1024));
    ASSERT_EQ(UCS_OK, post(r, m_receiver, rbuf, 0x11, RNDV_SIZE));
    EXPECT_EQ(1u, counters(m_receiver)[POST_SW]);
    flush(m_receiver);
    softnic_test_set_mode(dev, SOFTNIC_MODE_MANUAL);
    ASSERT_TRUE(signal_peer('p'));
    ASSERT_TRUE(wait_peer('s'));
    kill_peer();

    ucx_log_capture log;
    softnic_test_set_mode(dev, SOFTNIC_MODE_AUTO);
    ASSERT_TRUE(wait_for([&] { return r.completed > 0; }))
            << "the receive of a dead sender's rendezvous never completed";
    EXPECT_NE(UCS_OK, r.status);
    EXPECT_EQ(1u, counters(m_receiver)[RX_SW_MATCH]);
    EXPECT_TRUE(rbuf.all('r'));
    EXPECT_TRUE(rbuf.guards_intact());
    EXPECT_FALSE(m_receiver.ep_errors.empty())
            << "the failed read did not reach the error handler";
    EXPECT_EQ(0, filler.completed);
    uct_iface_tag_recv_cancel(m_receiver.iface, &filler.ctx, 1);
}

/* An unexpected rendezvous whose sender died before the receiver fetched
 * the data (what UCP does with its rkey): the read fails */
TEST_F(rc_tm_fault, sender_killed_before_an_unexpected_rendezvous_is_fetched)
{
    fork_peer([&]() {
        if (!open_connected(m_sender)) {
            return 2;
        }
        guarded_buffer sbuf(m_component, m_md, RNDV_SIZE, 's');
        test_completion comp;
        if (UCS_PTR_IS_ERR(send_rndv(m_sender.eps[0], 0x11, sbuf, RNDV_SIZE,
                                     comp))) {
            return 3;
        }
        progress();
        return wait_peer('k') ? 0 : 4;
    });

    ASSERT_TRUE(open_connected(m_receiver));
    ASSERT_TRUE(wait_for([&] { return !m_receiver.unexpected.empty(); }));
    unexpected_msg m = m_receiver.unexpected[0];
    ASSERT_TRUE(m.rndv);
    ASSERT_EQ(RNDV_SIZE, m.length);
    kill_peer();

    ucx_log_capture log;
    uct_rkey_bundle_t rkey;
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(m_component, m.rkey_buf.data(), &rkey));
    guarded_buffer rbuf(m_component, m_md, RNDV_SIZE, 'r');
    uct_iov_t iov = rbuf.iov(RNDV_SIZE);
    test_completion get;
    ucs_status_t status = uct_ep_get_zcopy(m_receiver.eps[0], &iov, 1,
                                           m.remote_addr, rkey.rkey,
                                           &get.comp);
    ASSERT_EQ(UCS_INPROGRESS, status);
    ASSERT_TRUE(wait_for([&] { return get.done; }));
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, get.status);
    EXPECT_TRUE(rbuf.all('r'));
    EXPECT_TRUE(rbuf.guards_intact());
    EXPECT_FALSE(m_receiver.ep_errors.empty());
    uct_rkey_release(m_component, &rkey);
}

/* The receiver dies after its device matched the request, before it read
 * the data and sent FIN.  The sender learns it by checking the endpoint (UCP
 * does so for endpoints with peer error handling): the rendezvous completes
 * with an error and the error handler is called. */
TEST_F(rc_tm_fault, receiver_killed_while_the_sender_awaits_fin)
{
    fork_peer([&]() {
        if (!open_connected(m_receiver)) {
            return 2;
        }
        tm_dev_srq_t *srq;
        tm_dev_t *dev = device(m_receiver, &srq);
        guarded_buffer rbuf(m_component, m_md, RNDV_SIZE, 'r');
        tag_recv r;
        if ((post(r, m_receiver, rbuf, 0x22, RNDV_SIZE) != UCS_OK) ||
            !wait_for([&] { return softnic_test_pending_ops(srq) == 0; })) {
            return 3;
        }
        softnic_test_set_mode(dev, SOFTNIC_MODE_MANUAL);
        if (!signal_peer('r')) {
            return 4;
        }
        /* Match the request, but neither read nor answer */
        if (!wait_for([&] {
                step_arrival(srq);
                return r.consumed > 0;
            })) {
            return 5;
        }
        return (signal_peer('m') && wait_peer('k')) ? 0 : 6;
    });

    ASSERT_TRUE(open_connected(m_sender));
    ASSERT_TRUE(m_sender.attr.cap.flags & UCT_IFACE_FLAG_EP_CHECK);
    ASSERT_TRUE(wait_peer('r'));
    guarded_buffer sbuf(m_component, m_md, RNDV_SIZE, 's');
    test_completion comp;
    ASSERT_FALSE(UCS_PTR_IS_ERR(send_rndv(m_sender.eps[0], 0x22, sbuf,
                                          RNDV_SIZE, comp)));
    ASSERT_TRUE(wait_peer('m'));
    /* The request was taken: nothing is left in flight on the connection */
    ASSERT_TRUE(wait_for([&] {
        return uct_ep_flush(m_sender.eps[0], 0, NULL) == UCS_OK;
    }));
    kill_peer();

    ucx_log_capture log;
    EXPECT_FALSE(comp.done);
    ASSERT_EQ(UCS_OK, uct_ep_check(m_sender.eps[0], 0, NULL));
    ASSERT_TRUE(wait_for([&] { return comp.done; }))
            << "the rendezvous to a dead receiver never completed"
            << log.text();
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, comp.status);
    EXPECT_FALSE(m_sender.ep_errors.empty());
    EXPECT_TRUE(sbuf.all('s'));
    EXPECT_TRUE(sbuf.guards_intact());
}

/* The same when the request was unexpected at the receiver (held by its
 * software, as UCP's unexpected queue holds it) */
TEST_F(rc_tm_fault, receiver_killed_holding_an_unexpected_request)
{
    fork_peer([&]() {
        if (!open_connected(m_receiver) || !signal_peer('r') ||
            !wait_for([&] { return !m_receiver.unexpected.empty(); })) {
            return 2;
        }
        return (signal_peer('u') && wait_peer('k')) ? 0 : 3;
    });

    ASSERT_TRUE(open_connected(m_sender));
    ASSERT_TRUE(m_sender.attr.cap.flags & UCT_IFACE_FLAG_EP_CHECK);
    ASSERT_TRUE(wait_peer('r'));
    guarded_buffer sbuf(m_component, m_md, RNDV_SIZE, 's');
    test_completion comp;
    ASSERT_FALSE(UCS_PTR_IS_ERR(send_rndv(m_sender.eps[0], 0x23, sbuf,
                                          RNDV_SIZE, comp)));
    ASSERT_TRUE(wait_peer('u'));
    /* The request was taken: nothing is left in flight on the connection
     * (a NIC on its own thread acknowledges it later than the peer's
     * software sees it; a check while it is in flight relies on it) */
    ASSERT_TRUE(wait_for([&] {
        return uct_ep_flush(m_sender.eps[0], 0, NULL) == UCS_OK;
    }));
    kill_peer();

    ucx_log_capture log;
    ASSERT_EQ(UCS_OK, uct_ep_check(m_sender.eps[0], 0, NULL));
    ASSERT_TRUE(wait_for([&] { return comp.done; })) << log.text();
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, comp.status);
    EXPECT_FALSE(m_sender.ep_errors.empty());
    EXPECT_TRUE(sbuf.guards_intact());

    /* Nothing waits for the dead peer: a flush answers at once, with the
     * connection's error */
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, uct_iface_flush(m_sender.iface, 0,
                                                        NULL));
}

/* A check of a live peer succeeds and changes nothing */
TEST_F(rc_tm_fault, endpoint_check_of_a_live_peer)
{
    open();
    ASSERT_TRUE(m_sender.attr.cap.flags & UCT_IFACE_FLAG_EP_CHECK);
    for (int i = 0; i < 100; ++i) {
        ASSERT_EQ(UCS_OK, uct_ep_check(m_sender.eps[0], 0, NULL));
        progress();
    }
    flush(m_sender);
    EXPECT_TRUE(m_sender.ep_errors.empty());
    EXPECT_TRUE(m_receiver.am_received.empty());
    EXPECT_TRUE(m_receiver.unexpected.empty());
    std::vector<char> data(100, 'd');
    ASSERT_EQ(100, uct_ep_am_bcopy(m_sender.eps[0], 1, pack_vector, &data, 0));
    ASSERT_TRUE(wait_for([&] { return m_receiver.am_received.size() == 1; }));
}


/* ----- receive resources exhausted ----- */

/* The fewest untagged buffers (33), a flood of active messages and
 * unexpected tagged messages while the user keeps every descriptor: the
 * device waits for buffers (RNR), nothing is lost, every sender's order
 * holds */
TEST_F(rc_tm_fault, smallest_srq_under_a_flood)
{
    open({{"SRQ_DEPTH", "33"}});
    m_receiver.keep_am = true;
    const int count    = 2000;
    for (int i = 0; i < count; ++i) {
        std::vector<char> data(64 + i % 1000, (char)i);
        memcpy(data.data(), &i, sizeof(i));
        ssize_t ret;
        ASSERT_TRUE(wait_for([&] {
            ret = (i % 2) ?
                  uct_ep_am_bcopy(m_sender.eps[0], 1, pack_vector, &data, 0) :
                  uct_ep_tag_eager_bcopy(m_sender.eps[0], 0x500 + i, 0,
                                         pack_vector, &data, 0);
            return ret != UCS_ERR_NO_RESOURCE;
        }));
        ASSERT_EQ((ssize_t)data.size(), ret);
    }
    ASSERT_TRUE(wait_for([&] {
        return m_receiver.am_received.size() + m_receiver.unexpected.size() ==
               (size_t)count;
    }));
    for (int i = 1, k = 0; i < count; i += 2, ++k) {
        int seq;
        memcpy(&seq, m_receiver.am_received[k].data(), sizeof(seq));
        ASSERT_EQ(i, seq) << "active message " << k;
    }
    for (int i = 0, k = 0; i < count; i += 2, ++k) {
        EXPECT_EQ((uint64_t)(0x500 + i), m_receiver.unexpected[k].tag);
    }
}

/* Receive buffers limited (UCX_RC_TM_RX_MAX_BUFS) and all of them held by
 * the user: the device waits; once the user returns them, the SRQ is
 * refilled and the rest arrives */
TEST_F(rc_tm_fault, held_descriptors_returned_refill_the_srq)
{
    open({{"SRQ_DEPTH", "33"}}, {{"RX_MAX_BUFS", "8"}, {"RX_BUFS_GROW", "8"}});
    m_receiver.keep_am = true;
    const int count    = 40;
    std::vector<char> data(1000, 'a');
    for (int i = 0; i < count; ++i) {
        memcpy(data.data(), &i, sizeof(i));
        ssize_t ret;
        ASSERT_TRUE(wait_for([&] {
            ret = uct_ep_am_bcopy(m_sender.eps[0], 1, pack_vector, &data, 0);
            return ret != UCS_ERR_NO_RESOURCE;
        }));
    }
    ASSERT_TRUE(wait_for([&] { return m_receiver.am_received.size() >= 8; }));
    /* Polling cannot make more arrive: every buffer is held */
    for (int i = 0; i < 1000; ++i) {
        progress();
    }
    ASSERT_EQ(8u, m_receiver.am_received.size());

    for (void *desc : m_receiver.am_kept) {
        uct_iface_release_desc((char*)desc - m_rx_headroom);
    }
    m_receiver.am_kept.clear();
    m_receiver.keep_am = false;
    ASSERT_TRUE(wait_for([&] {
        return m_receiver.am_received.size() == (size_t)count;
    })) << "returned descriptors did not go back to the SRQ";
    for (int i = 0; i < count; ++i) {
        int seq;
        memcpy(&seq, m_receiver.am_received[i].data(), sizeof(seq));
        EXPECT_EQ(i, seq);
    }
}

/* One list operation at a time (UCX_RC_TM_LIST_MAX_OPS=1): receives,
 * cancels and DELs queue behind each other; every receive still gets the
 * right message, every cancel its answer */
TEST_F(rc_tm_fault, one_list_operation_at_a_time)
{
    open({{"LIST_MAX_OPS", "1"}, {"LIST_SIZE", "4"}});
    const int count = 200;
    std::vector<std::unique_ptr<guarded_buffer>> bufs;
    std::vector<tag_recv> recvs(count);
    std::vector<bool> canceled(count, false);
    for (int i = 0; i < count; ++i) {
        bufs.emplace_back(new guarded_buffer(m_component, m_md, 256, 0));
        ASSERT_EQ(UCS_OK, post(recvs[i], m_receiver, *bufs[i], 0x700 + i % 4,
                               256));
        if (i % 7 == 3) {
            ASSERT_EQ(UCS_OK, uct_iface_tag_recv_cancel(m_receiver.iface,
                                                        &recvs[i].ctx, 0));
            canceled[i] = true;
        }
    }

    /* Per tag, messages numbered in sending order; receives of a tag take
     * them in posting order, skipping the canceled ones */
    std::vector<int> next_seq(4, 0), sent(4, 0);
    for (int i = 0; i < count; ++i) {
        if (!canceled[i]) {
            std::vector<char> data(16);
            int tag = i % 4, seq = sent[tag]++;
            memcpy(data.data(), &seq, sizeof(seq));
            ssize_t ret;
            ASSERT_TRUE(wait_for([&] {
                ret = uct_ep_tag_eager_bcopy(m_sender.eps[0], 0x700 + tag, 0,
                                             pack_vector, &data, 0);
                return ret != UCS_ERR_NO_RESOURCE;
            }));
        }
    }
    ASSERT_TRUE(wait_for([&] {
        for (const tag_recv &r : recvs) {
            if (!r.completed) {
                return false;
            }
        }
        return true;
    }));
    for (int i = 0; i < count; ++i) {
        if (canceled[i]) {
            EXPECT_EQ(UCS_ERR_CANCELED, recvs[i].status) << i;
            continue;
        }
        int seq;
        memcpy(&seq, bufs[i]->data(), sizeof(seq));
        EXPECT_EQ(UCS_OK, recvs[i].status) << i;
        EXPECT_EQ(next_seq[i % 4]++, seq) << "receive " << i;
        EXPECT_TRUE(bufs[i]->guards_intact());
    }
    flush(m_receiver);
}


/* ----- invalid rkeys ----- */

/* Keys of a deregistered region: get and put fail, nothing is touched on
 * either side.  Without the registration cache, which keeps a region
 * registered after deregistration until its memory is unmapped (that case:
 * test_rcache.cc) */
TEST_F(rc_tm_fault, stale_rkey_after_deregistration)
{
    open({{"RCACHE", "no"}});
    guarded_buffer remote(m_component, m_md, 8192, 'R');
    guarded_buffer local(m_component, m_md, 8192, 'L');
    uint64_t stale = remote.rkey();
    remote.dereg();

    ucx_log_capture log;
    uct_iov_t iov = local.iov(4096);
    test_completion get;
    ASSERT_EQ(UCS_INPROGRESS, uct_ep_get_zcopy(m_sender.eps[0], &iov, 1,
                                               remote.addr(), stale,
                                               &get.comp));
    ASSERT_TRUE(wait_for([&] { return get.done; }));
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, get.status);
    EXPECT_TRUE(local.all('L'));

    /* The connection failed with it (as on RC); a new one for the put */
    connect(m_sender, m_receiver);
    test_completion put;
    ASSERT_EQ(UCS_INPROGRESS, uct_ep_put_zcopy(m_sender.eps.back(), &iov, 1,
                                               remote.addr(), stale,
                                               &put.comp));
    ASSERT_TRUE(wait_for([&] { return put.done; }));
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, put.status);
    EXPECT_TRUE(remote.all('R'));
    EXPECT_TRUE(remote.guards_intact());
    EXPECT_TRUE(local.guards_intact());
    EXPECT_EQ(2u, m_sender.ep_errors.size());
}

/* A valid key, but an access past either end of its region, and a key that
 * was never issued for a put */
TEST_F(rc_tm_fault, rkey_out_of_range_or_wrong)
{
    open();
    guarded_buffer remote(m_component, m_md, 8192, 'R');
    guarded_buffer local(m_component, m_md, 8192, 'L');

    ucx_log_capture log;
    struct {
        uint64_t addr;
        size_t   length;
        uint64_t rkey;
        bool     put;
    } cases[] = {
        {remote.addr() + 4096, 8192, remote.rkey(), false}, /* past the end */
        {remote.addr() - 64,   128,  remote.rkey(), false}, /* before start */
        {remote.addr() + 8192, 1,    remote.rkey(), true},
        {remote.addr(),        64,   remote.rkey() ^ 0x5a5a0000, true},
    };
    for (const auto &c : cases) {
        connect(m_sender, m_receiver);
        uct_iov_t iov = local.iov(c.length);
        test_completion comp;
        ucs_status_t status = c.put ?
                uct_ep_put_zcopy(m_sender.eps.back(), &iov, 1, c.addr, c.rkey,
                                 &comp.comp) :
                uct_ep_get_zcopy(m_sender.eps.back(), &iov, 1, c.addr, c.rkey,
                                 &comp.comp);
        ASSERT_EQ(UCS_INPROGRESS, status);
        ASSERT_TRUE(wait_for([&] { return comp.done; }));
        EXPECT_EQ(UCS_ERR_INVALID_ADDR, comp.status);
    }
    EXPECT_TRUE(remote.all('R'));
    EXPECT_TRUE(local.all('L'));
    EXPECT_TRUE(remote.guards_intact());
    EXPECT_TRUE(local.guards_intact());
}

/* The sender deregisters its buffer while its rendezvous request is on the
 * way: the receiver's device read fails, the receive reports it, its buffer
 * is untouched, no FIN is sent */
TEST_F(rc_tm_fault, rendezvous_with_a_stale_rkey)
{
    open({{"RCACHE", "no"}});   /* a cached region stays registered */
    tm_dev_srq_t *srq;
    tm_dev_t *dev = device(m_receiver, &srq);
    guarded_buffer rbuf(m_component, m_md, 65536, 'r');
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, m_receiver, rbuf, 0x33, 65536));
    flush(m_receiver);

    softnic_test_set_mode(dev, SOFTNIC_MODE_MANUAL);
    test_completion comp;
    {
        guarded_buffer sbuf(m_component, m_md, 65536, 's');
        ASSERT_FALSE(UCS_PTR_IS_ERR(send_rndv(m_sender.eps[0], 0x33, sbuf,
                                              65536, comp)));
        sbuf.dereg();
    }

    ucx_log_capture log;
    softnic_test_set_mode(dev, SOFTNIC_MODE_AUTO);
    ASSERT_TRUE(wait_for([&] { return r.completed > 0; }));
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, r.status);
    EXPECT_TRUE(rbuf.all('r'));
    EXPECT_TRUE(rbuf.guards_intact());
    for (int i = 0; i < 1000; ++i) {
        progress();
    }
    EXPECT_FALSE(comp.done) << "FIN for a rendezvous that failed";
    destroy_eps(m_sender);
    EXPECT_TRUE(comp.done) << "the endpoint's destruction completes it";
    EXPECT_EQ(UCS_ERR_CANCELED, comp.status);
}


/* ----- malformed wire headers from a peer ----- */

/* A tagged message with an opcode TMH does not have: dropped with an error
 * message, the receive posted for its tag untouched, matching unharmed */
TEST_F(rc_tm_fault, unknown_tmh_opcode_is_dropped)
{
    open();
    m_raw.open(m_receiver.iface, m_receiver.attr);
    guarded_buffer rbuf(m_component, m_md, 4096, 'r');
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, m_receiver, rbuf, 0x44, 4096));
    flush(m_receiver);

    ucx_log_capture log;
    ASSERT_EQ(0, m_raw.send(tm_msg(0x7f, 0x44, 0, std::string(100, 'x'))));
    ASSERT_TRUE(wait_for([&] { return m_raw.sends_done(); }));
    ASSERT_TRUE(wait_for([&] { return log.has("malformed"); }));
    EXPECT_EQ(0, r.completed);
    EXPECT_TRUE(rbuf.all('r'));
    EXPECT_EQ(0u, counters(m_receiver)[RX_EAGER_UNEXP]);
    EXPECT_TRUE(m_receiver.unexpected.empty());

    /* The device is still in phase: the next message matches in it */
    std::vector<char> data(100, 'd');
    ASSERT_EQ(100, uct_ep_tag_eager_bcopy(m_sender.eps[0], 0x44, 0,
                                          pack_vector, &data, 0));
    ASSERT_TRUE(wait_for([&] { return r.completed > 0; }));
    EXPECT_EQ(UCS_OK, r.status);
    EXPECT_EQ(1u, counters(m_receiver)[RX_EXP]);
    EXPECT_TRUE(rbuf.guards_intact());
}

/* A rendezvous request too short for its RVH: dropped, not counted as
 * unexpected (the device did not count it either) */
TEST_F(rc_tm_fault, truncated_rendezvous_header_is_dropped)
{
    open();
    m_raw.open(m_receiver.iface, m_receiver.attr);
    guarded_buffer rbuf(m_component, m_md, 4096, 'r');
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, m_receiver, rbuf, 0x45, 4096));
    flush(m_receiver);

    ucx_log_capture log;
    std::string header = rvh(0x1000, 0x10001, 4096).substr(0, RVH - 4);
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_RNDV, 0x45, 1, header)));
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_RNDV, 0x46, 1, "")));
    ASSERT_TRUE(wait_for([&] { return m_raw.sends_done(); }));
    ASSERT_TRUE(wait_for([&] { return log.count() >= 2; }));
    EXPECT_TRUE(log.has("malformed"));
    EXPECT_EQ(0, r.completed);
    EXPECT_TRUE(rbuf.all('r'));
    EXPECT_EQ(0u, counters(m_receiver)[RX_RNDV_UNEXP]);

    std::vector<char> data(100, 'd');
    ASSERT_EQ(100, uct_ep_tag_eager_bcopy(m_sender.eps[0], 0x45, 0,
                                          pack_vector, &data, 0));
    ASSERT_TRUE(wait_for([&] { return r.completed > 0; }));
    EXPECT_EQ(UCS_OK, r.status);
    EXPECT_EQ(1u, counters(m_receiver)[RX_EXP]);
}

/* A rendezvous whose RVH claims more bytes than the sender registered: the
 * device's read fails, the receive reports it, no byte of its buffer or
 * around it changes */
TEST_F(rc_tm_fault, rendezvous_longer_than_the_sender_registered)
{
    open();
    m_raw.open(m_receiver.iface, m_receiver.attr);
    std::vector<char> exposed(3 * 4096, 'e');
    tm_dev_mr_t *mr;
    ASSERT_EQ(0, tm_dev_reg_mr(m_raw.dev, exposed.data() + 4096, 4096,
                               IBV_ACCESS_REMOTE_READ, &mr));
    guarded_buffer rbuf(m_component, m_md, 16384, 'r');
    tag_recv r;
    ASSERT_EQ(UCS_OK, post(r, m_receiver, rbuf, 0x47, 16384));
    flush(m_receiver);

    ucx_log_capture log;
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_RNDV, 0x47, 1,
                                   rvh((uintptr_t)exposed.data() + 4096,
                                       mr->rkey, 8192))));
    ASSERT_TRUE(wait_for([&] { return r.completed > 0; }));
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, r.status);
    EXPECT_TRUE(rbuf.all('r'));
    EXPECT_TRUE(rbuf.guards_intact());
    EXPECT_EQ(std::vector<char>(3 * 4096, 'e'), exposed);
    tm_dev_dereg_mr(m_raw.dev, mr);
}

/* FINs naming no rendezvous (an index past the table, a generation not in
 * use), and a FIN naming it but coming from another peer than the one the
 * request went to, are ignored: the rendezvous is neither completed nor
 * harmed */
TEST_F(rc_tm_fault, fin_for_an_unknown_operation_is_ignored)
{
    open();
    guarded_buffer sbuf(m_component, m_md, 65536, 's');
    test_completion comp;
    ucs_status_ptr_t op = send_rndv(m_sender.eps[0], 0x48, sbuf, 65536, comp);
    ASSERT_FALSE(UCS_PTR_IS_ERR(op));
    ASSERT_TRUE(wait_for([&] { return !m_receiver.unexpected.empty(); }));

    /* The first rendezvous of an interface is slot 0, generation 1 */
    const uint32_t op_id = 1u << 16;
    m_raw.open(m_sender.iface, m_sender.attr);
    std::string fin_rvh = rvh(sbuf.addr(), sbuf.rkey(), 65536);
    ucx_log_capture log;
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_FIN, 0x48, 0xffff, fin_rvh)));
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_FIN, 0x48, 2u << 16, fin_rvh)));
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_FIN, 0, 0x7fffffff, "")));
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_FIN, 0x48, op_id, fin_rvh)));
    ASSERT_TRUE(wait_for([&] { return m_raw.sends_done(); }));
    ASSERT_TRUE(wait_for([&] { return log.has("which it was not sent to"); }))
        << "the FIN from another peer was not refused";
    for (int i = 0; i < 100; ++i) {
        progress();
    }
    EXPECT_FALSE(comp.done) << "a FIN for another operation completed it";

    /* UCP fetches an unexpected rendezvous itself and cancels the
     * operation; a FIN for it arriving later has the old generation */
    ASSERT_EQ(UCS_OK, uct_ep_tag_rndv_cancel(m_sender.eps[0], op));
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_FIN, 0x48, op_id, fin_rvh)));
    ASSERT_TRUE(wait_for([&] { return m_raw.sends_done(); }));
    for (int i = 0; i < 100; ++i) {
        progress();
    }
    EXPECT_FALSE(comp.done);
    EXPECT_TRUE(sbuf.all('s'));
    EXPECT_TRUE(sbuf.guards_intact());

    /* Rendezvous work as before */
    guarded_buffer rbuf(m_component, m_md, 65536, 'r');
    tag_recv r;
    test_completion comp2;
    ASSERT_EQ(UCS_OK, post(r, m_receiver, rbuf, 0x49, 65536));
    sbuf.pattern(5);
    ASSERT_FALSE(UCS_PTR_IS_ERR(send_rndv(m_sender.eps[0], 0x49, sbuf, 65536,
                                          comp2)));
    ASSERT_TRUE(wait_for([&] { return comp2.done && r.completed; }));
    EXPECT_EQ(UCS_OK, comp2.status);
    EXPECT_EQ(UCS_OK, r.status);
    EXPECT_TRUE(rbuf.has_pattern(5));
}

/* An active message with an id past UCT_AM_ID_MAX: dropped with an error
 * message, no handler called */
TEST_F(rc_tm_fault, active_message_with_an_unknown_id_is_dropped)
{
    open();
    m_raw.open(m_receiver.iface, m_receiver.attr);

    ucx_log_capture log;
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_NO_TAG, 0, 200,
                                   std::string(64, 'a'))));
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_NO_TAG, 0, UCT_AM_ID_MAX, "")));
    ASSERT_TRUE(wait_for([&] { return m_raw.sends_done(); }));
    ASSERT_TRUE(wait_for([&] { return log.count() >= 2; }));
    EXPECT_TRUE(log.has("malformed active message"));
    EXPECT_TRUE(m_receiver.am_received.empty());

    /* A valid id from the same peer is delivered */
    ASSERT_EQ(0, m_raw.send(tm_msg(IBV_TMH_NO_TAG, 0, 3, "hello")));
    ASSERT_TRUE(wait_for([&] { return m_receiver.am_received.size() == 1; }));
    EXPECT_EQ(std::string("hello"),
              std::string(m_receiver.am_received[0].begin(),
                          m_receiver.am_received[0].end()));
}

/* A message shorter than the tag-matching header */
TEST_F(rc_tm_fault, message_shorter_than_its_header_is_dropped)
{
    open();
    m_raw.open(m_receiver.iface, m_receiver.attr);

    ucx_log_capture log;
    ASSERT_EQ(0, m_raw.send(std::string(6, 'z')));
    ASSERT_TRUE(wait_for([&] { return m_raw.sends_done(); }));
    ASSERT_TRUE(wait_for([&] { return log.has("shorter than its header"); }));
    EXPECT_TRUE(m_receiver.am_received.empty());
    EXPECT_TRUE(m_receiver.unexpected.empty());
}
