/*
 * What the software NIC's tests share: message builders, a node (device,
 * CQ, TM-SRQ, registered arena) driven through the device layer, and the
 * two-node fixture.
 */
#ifndef RC_TM_TEST_DEV_SOFT_FIXTURE_H_
#define RC_TM_TEST_DEV_SOFT_FIXTURE_H_

#include <gtest/gtest.h>

#include "dev/tm_dev.h"
#include "../common/softnic_steer.h"
#include "../common/tm_wire_msg.h"

#include <infiniband/tm_types.h>
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <string>
#include <vector>

namespace soft_test {

const size_t TMH = sizeof(struct ibv_tmh);
const size_t RVH = sizeof(struct ibv_rvh);

inline double now_sec()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

inline std::vector<std::string> shm_names(const std::string &prefix)
{
    std::vector<std::string> names;
    DIR *dir = opendir("/dev/shm");
    struct dirent *de;

    if (dir == NULL) {
        return names;
    }
    while ((de = readdir(dir)) != NULL) {
        if (!strncmp(de->d_name, prefix.c_str(), prefix.size())) {
            names.push_back(de->d_name);
        }
    }
    closedir(dir);
    return names;
}

using rc_tm_test::tm_msg;

inline std::string rndv_msg(uint64_t tag, uint32_t app_ctx, const void *va,
                     uint32_t rkey, uint32_t len, const std::string &hdr = "")
{
    return tm_msg(IBV_TMH_RNDV, tag, app_ctx,
                  rc_tm_test::rvh((uintptr_t)va, rkey, len) + hdr);
}

/* A device with one CQ and one TM-SRQ, and a registered arena */
struct node {
    tm_dev_t               *dev   = nullptr;
    tm_dev_cq_t            *cq    = nullptr;
    tm_dev_srq_t           *srq   = nullptr;
    tm_dev_mr_t            *mr    = nullptr;
    std::vector<char>      arena;
    size_t                 arena_pos = 0;
    std::vector<tm_dev_conn_t*> conns;
    std::vector<tm_dev_mr_t*> extra_mrs; /* deregistered at close */
    std::deque<tm_dev_wc_t> wcs;       /* polled, not yet looked at */

    /* Unless attr says otherwise, the connections' local ACK timeout is
     * 16.8 ms (TEST_TIMEOUT): a peer that is gone is found out when the
     * retries run out, (7 + 1) * 16.8 ms, not the device's 8 * 1.07 s */
    enum : uint8_t { TEST_TIMEOUT = 12 };

    void open(const tm_dev_attr_t &attr_in, unsigned cq_depth = 1024,
              size_t arena_size = 8 << 20) {
        tm_dev_attr_t attr = attr_in;
        tm_dev_info_t info;
        if (attr.timeout == 0) {
            attr.timeout = TM_DEV_ATTR_SET | TEST_TIMEOUT;
        }
        ASSERT_EQ(0, tm_dev_find("soft", &info));
        ASSERT_EQ(0, tm_dev_open(&info, &attr, &dev));
        ASSERT_EQ(0, tm_dev_create_cq(dev, cq_depth, &cq));
        ASSERT_EQ(0, tm_dev_create_srq(dev, cq, &srq));
        arena.assign(arena_size, 0);
        ASSERT_EQ(0, tm_dev_reg_mr(dev, arena.data(), arena.size(),
                                   IBV_ACCESS_LOCAL_WRITE |
                                   IBV_ACCESS_REMOTE_READ |
                                   IBV_ACCESS_REMOTE_WRITE, &mr));
    }

    void close() {
        for (tm_dev_conn_t *c : conns) {
            tm_dev_destroy_conn(c);
        }
        conns.clear();
        for (tm_dev_mr_t *m : extra_mrs) {
            tm_dev_dereg_mr(dev, m);
        }
        extra_mrs.clear();
        if (mr)  { tm_dev_dereg_mr(dev, mr); mr = nullptr; }
        if (srq) { tm_dev_destroy_srq(srq); srq = nullptr; }
        if (cq)  { tm_dev_destroy_cq(cq); cq = nullptr; }
        if (dev) { tm_dev_close(dev); dev = nullptr; }
    }

    tm_dev_conn_t *create_conn() {
        tm_dev_conn_t *c = nullptr;
        EXPECT_EQ(0, tm_dev_create_conn(dev, srq, cq, &c));
        conns.push_back(c);
        return c;
    }

    /* size bytes of the registered arena */
    char *alloc(size_t size) {
        size = (size + 63) & ~size_t(63);
        if (arena_pos + size > arena.size()) {
            arena_pos = 0;
        }
        char *p = arena.data() + arena_pos;
        arena_pos += size;
        return p;
    }

    int send(tm_dev_conn_t *c, const std::string &msg, uint64_t wr_id,
             bool signaled = true) {
        char *buf = alloc(msg.size());
        memcpy(buf, msg.data(), msg.size());
        struct ibv_sge sge = { (uintptr_t)buf, (uint32_t)msg.size(), mr->lkey };
        return send_sge(c, sge, wr_id, signaled ? IBV_SEND_SIGNALED : 0);
    }

    /* A SEND of one gather entry, as given */
    int send_sge(tm_dev_conn_t *c, struct ibv_sge sge, uint64_t wr_id,
                 unsigned send_flags) {
        struct ibv_send_wr wr, *bad;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id      = wr_id;
        wr.opcode     = IBV_WR_SEND;
        wr.sg_list    = &sge;
        wr.num_sge    = 1;
        wr.send_flags = send_flags;
        return tm_dev_post_send(c, &wr, &bad);
    }

    int rdma(tm_dev_conn_t *c, ibv_wr_opcode op, void *local, uint32_t len,
             uint64_t remote, uint32_t rkey, uint64_t wr_id) {
        struct ibv_sge sge = { (uintptr_t)local, len, mr->lkey };
        struct ibv_send_wr wr, *bad;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id               = wr_id;
        wr.opcode              = op;
        wr.sg_list             = &sge;
        wr.num_sge             = 1;
        wr.send_flags          = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = remote;
        wr.wr.rdma.rkey        = rkey;
        return tm_dev_post_send(c, &wr, &bad);
    }

    /* Untagged buffers of size bytes; wr_id = first_id + i */
    void post_rbufs(unsigned n, uint32_t size, uint64_t first_id,
                    std::vector<char*> *bufs = nullptr) {
        for (unsigned i = 0; i < n; ++i) {
            char *buf = alloc(size);
            memset(buf, 0, size);
            struct ibv_sge sge = { (uintptr_t)buf, size, mr->lkey };
            struct ibv_recv_wr wr, *bad;
            memset(&wr, 0, sizeof(wr));
            wr.wr_id   = first_id + i;
            wr.sg_list = &sge;
            wr.num_sge = 1;
            ASSERT_EQ(0, tm_dev_post_srq_recv(srq, &wr, &bad));
            if (bufs) {
                bufs->push_back(buf);
            }
        }
    }

    int add_tag(uint64_t tag, uint64_t mask, void *buf, uint32_t len,
                uint64_t recv_wr_id, uint32_t unexp_cnt, uint32_t *handle,
                uint64_t wr_id = 0, int flags = IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC) {
        struct ibv_sge sge = { (uintptr_t)buf, len, mr->lkey };
        struct ibv_ops_wr wr, *bad = nullptr;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id             = wr_id;
        wr.opcode            = IBV_WR_TAG_ADD;
        wr.flags             = flags;
        wr.tm.unexpected_cnt = unexp_cnt;
        wr.tm.add.recv_wr_id = recv_wr_id;
        wr.tm.add.sg_list    = &sge;
        wr.tm.add.num_sge    = 1;
        wr.tm.add.tag        = tag;
        wr.tm.add.mask       = mask;
        int ret = tm_dev_post_srq_ops(srq, &wr, &bad);
        if (ret == 0 && handle) {
            *handle = wr.tm.handle;
        }
        if (ret != 0) {
            EXPECT_EQ(&wr, bad);
        }
        return ret;
    }

    int list_op(ibv_ops_wr_opcode opcode, uint32_t handle, uint32_t unexp_cnt,
                uint64_t wr_id = 0,
                int flags = IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC) {
        struct ibv_ops_wr wr, *bad = nullptr;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id             = wr_id;
        wr.opcode            = opcode;
        wr.flags             = flags;
        wr.tm.unexpected_cnt = unexp_cnt;
        wr.tm.handle         = handle;
        return tm_dev_post_srq_ops(srq, &wr, &bad);
    }

    /* Polls until the CQ gives nothing more */
    void poll() {
        tm_dev_wc_t wc[16];
        int n;
        while ((n = tm_dev_poll_cq(cq, 16, wc)) > 0) {
            wcs.insert(wcs.end(), wc, wc + n);
        }
        ASSERT_GE(n, 0);
    }

    /* Next completion, polling up to timeout seconds */
    bool next(tm_dev_wc_t *wc, double timeout = 5.0) {
        double deadline = now_sec() + timeout;
        while (wcs.empty()) {
            poll();
            if (wcs.empty() && now_sec() > deadline) {
                return false;
            }
        }
        *wc = wcs.front();
        wcs.pop_front();
        return true;
    }
};

inline void connect_pair(node &a, tm_dev_conn_t *ca, node &b, tm_dev_conn_t *cb)
{
    char da[TM_DEV_ADDR_MAX], db[TM_DEV_ADDR_MAX];
    char aa[TM_DEV_ADDR_MAX], ab[TM_DEV_ADDR_MAX];

    tm_dev_addr(a.dev, da);
    tm_dev_addr(b.dev, db);
    tm_dev_conn_addr(ca, aa);
    tm_dev_conn_addr(cb, ab);
    ASSERT_EQ(0, tm_dev_connect(ca, db, ab));
    ASSERT_EQ(0, tm_dev_connect(cb, da, aa));
}

/* The shared-read counters of n's device */
inline softnic_share_stats_t share_stats(node &n)
{
    softnic_share_stats_t st;

    EXPECT_EQ(0, softnic_test_share_stats(tm_dev_ibv_context(n.dev), &st));
    return st;
}

/* Two devices in this process: s sends to r over one connection */
class soft_pair : public ::testing::Test {
protected:
    node s, r;
    tm_dev_conn_t *cs = nullptr, *cr = nullptr;
    tm_dev_attr_t attr;

    virtual void set_attr(tm_dev_attr_t &a) { (void)a; }

    void SetUp() override {
        memset(&attr, 0, sizeof(attr));
        set_attr(attr);
        ASSERT_NO_FATAL_FAILURE(s.open(attr));
        ASSERT_NO_FATAL_FAILURE(r.open(attr));
        cs = s.create_conn();
        cr = r.create_conn();
        ASSERT_NO_FATAL_FAILURE(connect_pair(s, cs, r, cr));
    }

    void TearDown() override {
        s.close();
        r.close();
    }

    void manual() { softnic_test_set_mode(r.dev, SOFTNIC_MODE_MANUAL); }

    /* In MANUAL mode: the CQ holds exactly these completions */
    std::vector<tm_dev_wc_t> drain(node &n) {
        n.poll();
        std::vector<tm_dev_wc_t> v(n.wcs.begin(), n.wcs.end());
        n.wcs.clear();
        return v;
    }
};

/* A matched eager message longer than 64 bytes: MATCH, then DATA_VALID */
class soft_pair_small_packet : public soft_pair {
    void set_attr(tm_dev_attr_t &a) override { a.eager_packet_size = 64; }
};

#define EXPECT_TM_RECV(_wc, _wr_id, _flags, _tag, _priv, _len) \
    do { \
        EXPECT_EQ(IBV_WC_SUCCESS, (_wc).status); \
        EXPECT_EQ(IBV_WC_TM_RECV, (_wc).opcode); \
        EXPECT_EQ((uint64_t)(_wr_id), (_wc).wr_id); \
        EXPECT_EQ((unsigned)(_flags), (_wc).wc_flags); \
        EXPECT_EQ((uint64_t)(_tag), (_wc).tm_info.tag); \
        EXPECT_EQ((uint32_t)(_priv), (_wc).tm_info.priv); \
        EXPECT_EQ((uint32_t)(_len), (_wc).byte_len); \
    } while (0)

} // namespace soft_test

#endif
