/*
 * The software NIC between processes: traffic, dead and closed peers,
 * leftovers of killed processes.  Waits on other processes poll with a
 * deadline (no sleeps).
 */
#include "soft_fixture.h"

using namespace soft_test;

/* ------------------------------------------------------------------------
 * Processes: two processes talking, a dead peer, leftovers
 */
namespace {

struct pipe_pair {
    int p2c[2], c2p[2];
    pipe_pair() { EXPECT_EQ(0, pipe(p2c)); EXPECT_EQ(0, pipe(c2p)); }
    ~pipe_pair() { close_fd(p2c[0]); close_fd(p2c[1]); close_fd(c2p[0]); close_fd(c2p[1]); }

    /* Each side keeps only its own ends, so that either side's death is
     * EOF to the other instead of a read that waits forever */
    pid_t fork() {
        pid_t pid = ::fork();
        if (pid == 0) {
            close_fd(p2c[1]);
            close_fd(c2p[0]);
        } else if (pid > 0) {
            close_fd(p2c[0]);
            close_fd(c2p[1]);
        }
        return pid;
    }

    static void close_fd(int &fd) {
        if (fd >= 0) {
            ::close(fd);
            fd = -1;
        }
    }
};

bool write_all(int fd, const void *buf, size_t len)
{
    return write(fd, buf, len) == (ssize_t)len;
}

bool read_all(int fd, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n <= 0) {
            return false;
        }
        got += n;
    }
    return true;
}

struct addr_msg {
    char dev[TM_DEV_ADDR_MAX];
    char conn[TM_DEV_ADDR_MAX];
    uint64_t va;
    uint32_t rkey;
};

/* Child side: open, exchange addresses, connect; returns exit code on error */
int child_setup(node &n, tm_dev_conn_t **c, int rfd, int wfd, addr_msg *peer,
                char **buf)
{
    tm_dev_attr_t attr;
    memset(&attr, 0, sizeof(attr));
    n.open(attr);
    if (n.dev == nullptr) {
        return 10;
    }
    *c = n.create_conn();
    addr_msg me;
    memset(&me, 0, sizeof(me));
    tm_dev_addr(n.dev, me.dev);
    tm_dev_conn_addr(*c, me.conn);
    *buf    = n.alloc(1 << 20);
    me.va   = (uintptr_t)*buf;
    me.rkey = n.mr->rkey;
    if (!write_all(wfd, &me, sizeof(me)) || !read_all(rfd, peer, sizeof(*peer))) {
        return 11;
    }
    if (tm_dev_connect(*c, peer->dev, peer->conn) != 0) {
        return 12;
    }
    return 0;
}

/* Parent side: open, exchange addresses (ours naming len bytes of the
 * arena in *buf, if buf), connect */
void parent_setup(node &n, tm_dev_conn_t **c, pipe_pair &pp, addr_msg *peer,
                  size_t len = 0, char **buf = nullptr)
{
    tm_dev_attr_t attr;
    memset(&attr, 0, sizeof(attr));
    ASSERT_NO_FATAL_FAILURE(n.open(attr));
    *c = n.create_conn();
    addr_msg me;
    memset(&me, 0, sizeof(me));
    tm_dev_addr(n.dev, me.dev);
    tm_dev_conn_addr(*c, me.conn);
    if (buf != nullptr) {
        *buf    = n.alloc(len);
        me.va   = (uintptr_t)*buf;
        me.rkey = n.mr->rkey;
    }
    ASSERT_TRUE(write_all(pp.p2c[1], &me, sizeof(me)));
    ASSERT_TRUE(read_all(pp.c2p[0], peer, sizeof(*peer)));
    ASSERT_EQ(0, tm_dev_connect(*c, peer->dev, peer->conn));
}

/* Forks a peer that connects to this process and then consumes nothing
 * (it never polls) until it is killed, and connects this side to it */
void connect_idle_peer(pipe_pair &pp, node &n, tm_dev_conn_t **c,
                       addr_msg *peer, pid_t *pid)
{
    *pid = pp.fork();
    ASSERT_GE(*pid, 0);
    if (*pid == 0) {
        node child;
        tm_dev_conn_t *child_conn;
        addr_msg parent;
        char *buf, ready = 1;
        int ret = child_setup(child, &child_conn, pp.p2c[0], pp.c2p[1],
                              &parent, &buf);
        (void)write_all(pp.c2p[1], &ready, 1);
        pause();
        _exit(ret);
    }
    char ready;
    parent_setup(n, c, pp, peer);
    if (testing::Test::HasFatalFailure() ||
        !read_all(pp.c2p[0], &ready, 1)) {
        kill(*pid, SIGKILL);            /* no paused child left behind */
        waitpid(*pid, nullptr, 0);
        FAIL() << "the idle peer did not connect";
    }
}

} // namespace

TEST(soft_proc, two_processes_tagged_eager_rndv_and_rdma)
{
    pipe_pair pp;
    const uint32_t big = 300000;
    pid_t pid = pp.fork();
    ASSERT_GE(pid, 0);

    if (pid == 0) {
        /* child: echoes every tagged message back, and serves an rndv */
        node n;
        tm_dev_conn_t *c;
        addr_msg peer;
        char *buf;
        int ret = child_setup(n, &c, pp.p2c[0], pp.c2p[1], &peer, &buf);
        if (ret) {
            _exit(ret);
        }
        for (uint32_t i = 0; i < big; ++i) {
            buf[i] = (char)(i * 13);
        }
        std::vector<char*> rb;
        n.post_rbufs(64, 4096, 0, &rb);
        int echoed = 0;
        double deadline = now_sec() + 20;
        while (echoed < 100 && now_sec() < deadline) {
            tm_dev_wc_t wc;
            if (!n.next(&wc, 1.0)) {
                continue;
            }
            if (wc.opcode == IBV_WC_RECV && wc.status == IBV_WC_SUCCESS) {
                std::string msg(rb[wc.wr_id], wc.byte_len);
                if (n.send(c, msg, 1000 + echoed, false)) {
                    _exit(13);
                }
                ++echoed;
                n.post_rbufs(1, 4096, rb.size(), &rb);
            } else if (wc.status != IBV_WC_SUCCESS) {
                _exit(14);
            }
        }
        /* then the rendezvous: send a request for our buffer, wait for FIN */
        std::string req = rndv_msg(0xbeef, 1, buf, n.mr->rkey, big);
        if (n.send(c, req, 5000)) {
            _exit(15);
        }
        bool fin = false;
        while (!fin && now_sec() < deadline) {
            tm_dev_wc_t wc;
            if (n.next(&wc, 1.0) && wc.opcode == IBV_WC_TM_NO_TAG &&
                ((struct ibv_tmh *)rb[wc.wr_id])->opcode == IBV_TMH_FIN) {
                fin = true;
            }
        }
        char done;
        (void)read_all(pp.p2c[0], &done, 1);    /* parent finished its RDMA */
        n.close();
        _exit(fin ? 0 : 16);
    }

    node n;
    tm_dev_conn_t *c;
    addr_msg peer;
    ASSERT_NO_FATAL_FAILURE(parent_setup(n, &c, pp, &peer));
    ASSERT_TRUE(tm_dev_is_reachable(n.dev, peer.dev));

    /* 100 ping-pongs: the echo of tag i matches a posted entry */
    for (int i = 0; i < 100; ++i) {
        char *buf = n.alloc(64);
        /* signaled: as on mlx5, only a signaled operation's completion
         * frees the operation slots before it */
        ASSERT_EQ(0, n.add_tag(i, ~0ull, buf, 64, i, 0, nullptr, 1000 + i));
        ASSERT_EQ(0, n.send(c, tm_msg(IBV_TMH_EAGER, i, i * 3, "ping" + std::to_string(i)),
                            i, false));
        tm_dev_wc_t wc;
        ASSERT_TRUE(n.next(&wc));
        EXPECT_EQ(IBV_WC_TM_ADD, wc.opcode);
        EXPECT_EQ(1000u + i, wc.wr_id);
        ASSERT_TRUE(n.next(&wc));
        EXPECT_TM_RECV(wc, i, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, i, i * 3,
                       4 + std::to_string(i).size());
        EXPECT_EQ("ping" + std::to_string(i), std::string(buf, wc.byte_len));
    }

    /* the child's rendezvous request matches; the device reads across processes */
    char *dst = n.alloc(big);
    ASSERT_EQ(0, n.add_tag(0xbeef, ~0ull, dst, big, 77, 0, nullptr, 0, 0));
    tm_dev_wc_t wc;
    ASSERT_TRUE(n.next(&wc));
    EXPECT_TM_RECV(wc, 77, IBV_WC_TM_MATCH, 0xbeef, 1, 0);
    ASSERT_TRUE(n.next(&wc));
    EXPECT_TM_RECV(wc, 77, IBV_WC_TM_DATA_VALID, 0, 0, big);
    for (uint32_t i = 0; i < big; i += 997) {
        ASSERT_EQ((char)(i * 13), dst[i]) << i;
    }

    /* RDMA READ of the child's buffer by key */
    char *local = n.alloc(4096);
    ASSERT_EQ(0, n.rdma(c, IBV_WR_RDMA_READ, local, 4096, peer.va + 1000,
                        peer.rkey, 9));
    ASSERT_TRUE(n.next(&wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(IBV_WC_RDMA_READ, wc.opcode);
    EXPECT_EQ((char)(1000 * 13), local[0]);

    char done = 1;
    ASSERT_TRUE(write_all(pp.p2c[1], &done, 1));
    int status;
    ASSERT_EQ(pid, waitpid(pid, &status, 0));
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(0, WEXITSTATUS(status));
    n.close();
}

TEST(soft_proc, dead_peer_gives_error_completions_in_bounded_time)
{
    pipe_pair pp;
    node n;
    tm_dev_conn_t *c;
    addr_msg peer;
    pid_t pid;
    ASSERT_NO_FATAL_FAILURE(connect_idle_peer(pp, n, &c, &peer, &pid));

    /* outstanding sends (never consumed) and a read */
    for (int i = 0; i < 5; ++i) {
        ASSERT_EQ(0, n.send(c, tm_msg(IBV_TMH_NO_TAG, 0, 0, "x"), i));
    }
    n.poll();
    EXPECT_TRUE(n.wcs.empty());                   /* peer alive: they wait */

    /* not before the retries ran out, as a NIC (counted from before the
     * kill: an engine thread may see the peer gone before waitpid returns) */
    double t0 = now_sec();
    kill(pid, SIGKILL);
    int status;
    ASSERT_EQ(pid, waitpid(pid, &status, 0));

    tm_dev_wc_t wc;
    ASSERT_TRUE(n.next(&wc, 2.0));
    EXPECT_GE(now_sec() - t0, 8 * 4.096e-6 * (1 << node::TEST_TIMEOUT));
    EXPECT_EQ(IBV_WC_RETRY_EXC_ERR, wc.status);
    EXPECT_EQ(0u, wc.wr_id);
    for (int i = 1; i < 5; ++i) {
        ASSERT_TRUE(n.next(&wc, 1.0));
        EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, wc.status);
        EXPECT_EQ((uint64_t)i, wc.wr_id);
    }
    /* later posts flush at once; RDMA to the dead peer fails too */
    char *local = n.alloc(64);
    ASSERT_EQ(0, n.rdma(c, IBV_WR_RDMA_READ, local, 64, peer.va, peer.rkey, 9));
    ASSERT_TRUE(n.next(&wc, 1.0));
    EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, wc.status);
    n.close();
}

TEST(soft_proc, rdma_to_dead_peer_fails)
{
    pipe_pair pp;
    node n;
    tm_dev_conn_t *c;
    addr_msg peer;
    pid_t pid;
    ASSERT_NO_FATAL_FAILURE(connect_idle_peer(pp, n, &c, &peer, &pid));
    kill(pid, SIGKILL);
    int status;
    ASSERT_EQ(pid, waitpid(pid, &status, 0));

    char *local = n.alloc(64);
    ASSERT_EQ(0, n.rdma(c, IBV_WR_RDMA_READ, local, 64, peer.va, peer.rkey, 9));
    tm_dev_wc_t wc;
    ASSERT_TRUE(n.next(&wc, 2.0));
    EXPECT_NE(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(9u, wc.wr_id);
    n.close();
}

/* A zero-length RDMA WRITE checks no key, but a NIC still needs the
 * responder's ACK: to a live peer it succeeds, to a dead one it fails as
 * retries run out (UCX's endpoint check, rc_tm's too, is one) */
TEST(soft_proc, zero_length_write_to_dead_peer_fails)
{
    pipe_pair pp;
    node n;
    tm_dev_conn_t *c;
    addr_msg peer;
    pid_t pid;
    ASSERT_NO_FATAL_FAILURE(connect_idle_peer(pp, n, &c, &peer, &pid));

    tm_dev_wc_t wc;
    ASSERT_EQ(0, n.rdma(c, IBV_WR_RDMA_WRITE, nullptr, 0, 0, 0, 8));
    ASSERT_TRUE(n.next(&wc, 2.0));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(8u, wc.wr_id);

    kill(pid, SIGKILL);
    int status;
    ASSERT_EQ(pid, waitpid(pid, &status, 0));
    ASSERT_EQ(0, n.rdma(c, IBV_WR_RDMA_WRITE, nullptr, 0, 0, 0, 9));
    ASSERT_TRUE(n.next(&wc, 2.0));
    EXPECT_EQ(IBV_WC_RETRY_EXC_ERR, wc.status);
    EXPECT_EQ(9u, wc.wr_id);
    n.close();
}

/* A reader that dies holding a read it offered to this process's device
 * (softnic_rdma.c): while it fills the slot, nothing is offered yet and the
 * device looks at the reader the claim names; just after the offer, the
 * device's copy finds it gone; after its last chunk, nothing is left to
 * copy and the device looks at the reader itself.  Each way the slot comes
 * back. */
static void reader_dies_holding_a_shared_read(softnic_share_point_t point)
{
    const size_t len = 4 << 20;
    pipe_pair pp;
    pid_t pid = pp.fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        node n;
        tm_dev_conn_t *c;
        addr_msg peer;
        char *buf, go;
        int ret = child_setup(n, &c, pp.p2c[0], pp.c2p[1], &peer, &buf);
        if ((ret != 0) || !read_all(pp.p2c[0], &go, 1)) {
            _exit((ret != 0) ? ret : 17);
        }
        softnic_test_set_share_hook([](softnic_share_point_t at, void *p) {
            if (at == *(softnic_share_point_t *)p) {
                _exit(0);
            }
        }, &point);
        char *local = n.alloc(len);
        if (n.rdma(c, IBV_WR_RDMA_READ, local, len, peer.va, peer.rkey, 1)) {
            _exit(18);
        }
        tm_dev_wc_t wc;
        (void)n.next(&wc);
        _exit(19);                      /* the hook did not run */
    }
    node n;
    tm_dev_conn_t *c;
    addr_msg peer;
    char *buf;
    ASSERT_NO_FATAL_FAILURE(parent_setup(n, &c, pp, &peer, len, &buf));
    char go = 1;
    ASSERT_TRUE(write_all(pp.p2c[1], &go, 1));
    int status;
    ASSERT_EQ(pid, waitpid(pid, &status, 0));
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(0, WEXITSTATUS(status));

    softnic_share_stats_t st = share_stats(n);
    EXPECT_EQ(1u, st.taken);            /* the dead reader's */
    double deadline = now_sec() + 10;
    while ((st.taken != 0) && (now_sec() < deadline)) {
        n.poll();
        st = share_stats(n);
    }
    EXPECT_EQ(0u, st.taken);
    n.close();
}

TEST(soft_proc, reader_dead_while_it_fills_the_slot_gives_it_back)
{
    reader_dies_holding_a_shared_read(SOFTNIC_SHARE_FILLING);
}

TEST(soft_proc, reader_dead_after_its_offer_gives_the_slot_back)
{
    reader_dies_holding_a_shared_read(SOFTNIC_SHARE_OFFERED);
}

TEST(soft_proc, reader_dead_after_its_last_chunk_gives_the_slot_back)
{
    reader_dies_holding_a_shared_read(SOFTNIC_SHARE_CLOSED);
}

TEST(soft_proc, leftover_shm_of_killed_process_is_reclaimed)
{
    pipe_pair pp;
    pid_t pid = pp.fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        node n;
        tm_dev_attr_t attr;
        memset(&attr, 0, sizeof(attr));
        n.open(attr);
        n.create_conn();
        char prefix[128] = {};
        softnic_test_shm_prefix(prefix, sizeof(prefix));
        (void)write_all(pp.c2p[1], prefix, sizeof(prefix));
        pause();
        _exit(0);
    }
    char prefix[128];
    ASSERT_TRUE(read_all(pp.c2p[0], prefix, sizeof(prefix)));
    EXPECT_NE(std::string::npos, std::string(prefix).find(std::to_string(pid)));
    EXPECT_EQ(4u, shm_names(prefix).size());    /* device, SRQ, 2 rings */
    kill(pid, SIGKILL);
    int status;
    ASSERT_EQ(pid, waitpid(pid, &status, 0));
    /* the killed process left them (or a device another test process
     * brought up meanwhile already reclaimed them) */
    size_t left = shm_names(prefix).size();
    EXPECT_TRUE((left == 4u) || (left == 0u)) << left;

    node n;
    tm_dev_attr_t attr;
    memset(&attr, 0, sizeof(attr));
    ASSERT_NO_FATAL_FAILURE(n.open(attr));       /* opening reclaims them */
    EXPECT_EQ(0u, shm_names(prefix).size());
    n.close();
}

TEST(soft_proc, shm_removed_at_exit)
{
    pipe_pair pp;
    pid_t pid = pp.fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        node n;
        tm_dev_attr_t attr;
        memset(&attr, 0, sizeof(attr));
        n.open(attr);
        n.create_conn();
        char prefix[128] = {};
        softnic_test_shm_prefix(prefix, sizeof(prefix));
        (void)write_all(pp.c2p[1], prefix, sizeof(prefix));
        exit(0);                                 /* without closing */
    }
    char prefix[128];
    ASSERT_TRUE(read_all(pp.c2p[0], prefix, sizeof(prefix)));
    int status;
    ASSERT_EQ(pid, waitpid(pid, &status, 0));
    EXPECT_EQ(0u, shm_names(prefix).size());
}

TEST_F(soft_pair, closed_peer_fails_outstanding_sends)
{
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_NO_TAG, 0, 0, "x"), i));
    }
    r.close();
    tm_dev_wc_t wc;
    ASSERT_TRUE(s.next(&wc, 2.0));
    EXPECT_EQ(IBV_WC_RETRY_EXC_ERR, wc.status);
    for (int i = 1; i < 3; ++i) {
        ASSERT_TRUE(s.next(&wc, 1.0));
        EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, wc.status);
    }
}
