/*
 * The fault suites' fixture: guarded buffers, a raw peer that speaks to
 * the device directly, and rc_tm_fault (two interfaces, a peer process to
 * kill).  Shared by test_fault.cc (killed peers), test_fault_rx.cc
 * (receive resources, rkeys) and test_fault_wire.cc (malformed headers).
 */
#ifndef RC_TM_TEST_FAULT_FIXTURE_H_
#define RC_TM_TEST_FAULT_FIXTURE_H_

#include "../uct/uct_fixture.h"
#include "../common/rc_tm_config.h"

#include "../common/softnic_steer.h"
#include "../common/tm_wire_msg.h"
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

namespace rc_tm_fault_test {

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
            ASSERT_EQ(UCS_OK, rc_tm_config_modify(config, kv.first, kv.second));
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

    /* A child that holds the rendezvous sent to it as an unexpected
     * message (ready: 'r', holding it: 'u'), answering with an active
     * message first if asked, then waits to be killed */
    void fork_unexpected_receiver(bool answer)
    {
        fork_peer([this, answer]() {
            if (!open_connected(m_receiver) || !signal_peer('r') ||
                !wait_for([&] { return !m_receiver.unexpected.empty(); }) ||
                (answer && (uct_ep_am_short(m_receiver.eps[0], 1, 0, NULL,
                                            0) != UCS_OK))) {
                return 2;
            }
            return (signal_peer('u') && wait_peer('k')) ? 0 : 3;
        });
    }

    /* The sender checks its endpoint to the killed receiver: its
     * rendezvous (comp) fails with a timeout, the error handler is called */
    void check_finds_the_receiver_dead(test_completion &comp,
                                       const ucx_log_capture &log)
    {
        ASSERT_EQ(UCS_OK, uct_ep_check(m_sender.eps[0], 0, NULL));
        ASSERT_TRUE(wait_for([&] { return comp.done; }))
                << "the rendezvous to a dead receiver never completed"
                << log.text();
        EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, comp.status);
        EXPECT_FALSE(m_sender.ep_errors.empty());
    }

    /* The pair open, and the raw peer connected to the receiver */
    void open_with_raw_peer()
    {
        open();
        m_raw.open(m_receiver.iface, m_receiver.attr);
    }

    /* After a malformed message: a well-formed eager one for tag from the
     * sender completes r, matched in the device (matching unharmed) */
    void expect_eager_matches_in_device(const tag_recv &r, uct_tag_t tag)
    {
        std::vector<char> data(100, 'd');

        ASSERT_EQ(100, uct_ep_tag_eager_bcopy(m_sender.eps[0], tag, 0,
                                              pack_vector, &data, 0));
        ASSERT_TRUE(wait_for([&] { return r.completed > 0; }));
        EXPECT_EQ(UCS_OK, r.status);
        EXPECT_EQ(1u, counters(m_receiver)[RX_EXP]);
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

} // namespace rc_tm_fault_test

using namespace rc_tm_fault_test;

#endif
