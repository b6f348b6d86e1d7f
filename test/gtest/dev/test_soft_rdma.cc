/*
 * The software NIC's long RDMA reads are shared with the responder
 * (softnic_rdma.c): the reader offers the read in chunks in the
 * responder's segment, and the responder's device copies chunks too
 * whenever it runs.  What verbs see must not change: the data lands whole,
 * whether the responder helps or never runs, and the offer is withdrawn
 * when the read completes.
 */
#include "soft_fixture.h"

#include <atomic>
#include <thread>

using namespace soft_test;

namespace {

/* A pattern that tells every 8-byte word of a read apart from the others
 * and from the same word of the previous read */
void fill_pattern(char *buf, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; ++i) {
        buf[i] = (char)((i / 8) * 2654435761u + seed * 7 + i % 8);
    }
}

/* The first byte where buf differs from the pattern, or len */
size_t pattern_mismatch(const char *buf, size_t len, uint64_t seed)
{
    std::vector<char> expect(len);

    fill_pattern(expect.data(), len, seed);
    for (size_t i = 0; i < len; ++i) {
        if (buf[i] != expect[i]) {
            return i;
        }
    }
    return len;
}

class soft_rdma : public soft_pair {
protected:
    /* s reads len bytes of r's memory; the read's completion */
    tm_dev_wc_t read(char *local, char *remote, size_t len, uint64_t wr_id) {
        tm_dev_wc_t wc;

        memset(&wc, 0, sizeof(wc));
        EXPECT_EQ(0, s.rdma(cs, IBV_WR_RDMA_READ, local, (uint32_t)len,
                            (uintptr_t)remote, r.mr->rkey, wr_id));
        EXPECT_TRUE(s.next(&wc));
        return wc;
    }

    /* Reads of 16 chunks, the last one short, until the responder has
     * copied some (a hundred reads at most); each read's data whole */
    void reads_until_served() {
        const size_t len = (4 << 20) - 4096 - 3;
        char *remote = r.alloc(len), *local = s.alloc(len);
        unsigned reads = 0;

        while ((reads < 100) && (share_stats(r).served == 0)) {
            fill_pattern(remote, len, reads + 10);
            memset(local, 0, len);
            tm_dev_wc_t wc = read(local, remote, len, reads);
            EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
            ASSERT_EQ(len, pattern_mismatch(local, len, reads + 10))
                << "read " << reads;
            ++reads;
        }

        softnic_share_stats_t rs = share_stats(r);
        EXPECT_GT(rs.served, 0u) << "after " << reads << " reads";
        EXPECT_EQ(reads, share_stats(s).offered);
        EXPECT_EQ(0u, rs.taken);
    }
};

class soft_rdma_engines : public soft_rdma {
    void set_attr(tm_dev_attr_t &a) override {
        a.soft_progress = TM_DEV_SOFT_PROGRESS_THREAD;
    }
};

} // namespace

/* The responder never runs: the reader copies every chunk itself */
TEST_F(soft_rdma, long_read_completes_without_the_responder)
{
    const size_t len = (1 << 20) + 4096 + 1;
    char *remote = r.alloc(len), *local = s.alloc(len);

    fill_pattern(remote, len, 1);
    memset(local, 0, len);
    tm_dev_wc_t wc = read(local, remote, len, 7);
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(7u, wc.wr_id);
    EXPECT_EQ(len, pattern_mismatch(local, len, 1));

    softnic_share_stats_t rs = share_stats(r), ss = share_stats(s);
    EXPECT_EQ(1u, ss.offered);
    EXPECT_EQ(0u, rs.served);
    EXPECT_EQ(0u, rs.taken);        /* the offer is withdrawn */
}

/* Reads too short to share are one copy, offered to nobody */
TEST_F(soft_rdma, short_read_is_not_offered)
{
    const size_t len = 64 * 1024;
    char *remote = r.alloc(len), *local = s.alloc(len);

    fill_pattern(remote, len, 2);
    tm_dev_wc_t wc = read(local, remote, len, 8);
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(len, pattern_mismatch(local, len, 2));
    EXPECT_EQ(0u, share_stats(s).offered);
}

/* While the responder's device runs, it copies some of the chunks straight
 * into the reader's buffer; every read's data is whole.  Whether the
 * responder takes a chunk of one read is the scheduler's choice, so the
 * reads go on until it took some, a hundred at most */
TEST_F(soft_rdma, responder_copies_chunks_while_it_runs)
{
    std::atomic<bool> stop(false);

    /* inline, the responder's device runs in the polls of its CQ */
    std::thread responder([&] {
        while (!stop.load()) {
            r.poll();
        }
    });
    reads_until_served();
    stop.store(true);
    responder.join();
    EXPECT_TRUE(r.wcs.empty());     /* serving completes nothing of r's */
}

/* With engine threads, the responder's engine serves the offer: the
 * reader rings its doorbell, and nothing polls r */
TEST_F(soft_rdma_engines, responder_engine_copies_chunks)
{
    reads_until_served();
}

/* A key that is not the responder's fails the read before any offer */
TEST_F(soft_rdma, bad_rkey_fails_before_the_offer)
{
    const size_t len = 1 << 20;
    char *remote = r.alloc(len), *local = s.alloc(len);

    EXPECT_EQ(0, s.rdma(cs, IBV_WR_RDMA_READ, local, (uint32_t)len,
                        (uintptr_t)remote, r.mr->rkey ^ 0x5a5a, 9));
    tm_dev_wc_t wc;
    ASSERT_TRUE(s.next(&wc));
    EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, wc.status);
    EXPECT_EQ(0u, share_stats(s).offered);
    EXPECT_EQ(0u, share_stats(r).taken);
}

/* A chunk the responder fails (its region deregistered after the offer,
 * while the read is on) fails the read: the reader waits only for the
 * chunks that were taken, never for the ones nobody will copy, and the
 * slot is given back */
TEST_F(soft_rdma, responder_chunk_failure_fails_the_read)
{
    const size_t len = 4 << 20;     /* 16 chunks */
    char *remote = r.alloc(len), *local = s.alloc(len);
    struct hook_arg {
        node        *responder;
        tm_dev_mr_t *mr;
        unsigned    offers;
    } arg = { &r, nullptr, 0 };

    ASSERT_EQ(0, tm_dev_reg_mr(r.dev, remote, len, IBV_ACCESS_REMOTE_READ,
                               &arg.mr));
    softnic_test_set_share_hook([](softnic_share_point_t point, void *p) {
        hook_arg *a = (hook_arg *)p;

        if (point == SOFTNIC_SHARE_OFFERED) {
            ++a->offers;
            tm_dev_dereg_mr(a->responder->dev, a->mr);
            a->responder->poll();   /* takes a chunk, and fails it */
        }
    }, &arg);
    EXPECT_EQ(0, s.rdma(cs, IBV_WR_RDMA_READ, local, (uint32_t)len,
                        (uintptr_t)remote, arg.mr->rkey, 11));
    tm_dev_wc_t wc;
    bool completed = s.next(&wc);
    softnic_test_set_share_hook(nullptr, nullptr);

    ASSERT_TRUE(completed);
    EXPECT_EQ(1u, arg.offers);
    EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, wc.status);
    EXPECT_EQ(11u, wc.wr_id);
    EXPECT_EQ(0u, share_stats(r).served);
    EXPECT_EQ(0u, share_stats(r).taken);
}
