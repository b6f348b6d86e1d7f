/*
 * The verbs backend's completion reading, over a scripted extended CQ:
 * batches, the reads each kind of completion needs, errors.
 */
#include <gtest/gtest.h>

#include "dev/tm_dev.h"
#include "dev/verbs/verbs_dev.h"
#include "dev/verbs/verbs_lib.h"
#include "log_capture.h"

#include <infiniband/tm_types.h>
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <iostream>
#include <string>
#include <vector>

/* ------------------------------------------------------------------------
 * Completions, over a scripted extended CQ
 */
namespace {

struct fake_wc {
    uint64_t              wr_id;
    enum ibv_wc_status    status;
    enum ibv_wc_opcode    opcode;
    unsigned              wc_flags;
    uint32_t              byte_len;
    uint32_t              qp_num;
    uint32_t              vendor_err;
    uint64_t              tag;
    uint32_t              priv;
    bool                  bad;   /* mlx5_parse_cqe fails on it */
};

/* What mlx5's poll calls return for a CQE they cannot parse (cq.c
 * CQ_POLL_ERR); they consume it */
const int CQ_POLL_ERR = -2;

struct fake_cq {
    struct ibv_cq_ex      cq;
    std::vector<fake_wc>  wcs;
    size_t                pos;           /* the completion being read */
    bool                  have_current;  /* pos was handed out, not yet consumed */
    int                   start_err;     /* start_poll error other than ENOENT */
    size_t                next_err_at;   /* next_poll fails at this position */
    int                   ends;          /* end_poll calls */
    int                   vendor_reads;
    int                   tm_reads;
};

fake_cq *g_fake;

const fake_wc &cur() { return g_fake->wcs[g_fake->pos]; }

void load(struct ibv_cq_ex *cq)
{
    cq->wr_id            = cur().wr_id;
    cq->status           = cur().status;
    g_fake->have_current = true;
}

int fake_start(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *)
{
    if (g_fake->start_err != 0) {
        return g_fake->start_err;
    }
    if (g_fake->pos >= g_fake->wcs.size()) {
        return ENOENT;
    }
    if (cur().bad) {
        ++g_fake->pos;
        return CQ_POLL_ERR;
    }
    load(cq);
    return 0;
}

int fake_next(struct ibv_cq_ex *cq)
{
    /* The current completion is consumed by moving on */
    ++g_fake->pos;
    g_fake->have_current = false;
    if (g_fake->pos == g_fake->next_err_at) {
        ++g_fake->pos;      /* a completion consumed but not parsed */
        return EIO;
    }
    if (g_fake->pos >= g_fake->wcs.size()) {
        return ENOENT;
    }
    if (cur().bad) {
        ++g_fake->pos;
        return CQ_POLL_ERR;
    }
    load(cq);
    return 0;
}

void fake_end(struct ibv_cq_ex *)
{
    ++g_fake->ends;
    if (g_fake->have_current) {
        ++g_fake->pos;
        g_fake->have_current = false;
    }
}

enum ibv_wc_opcode fake_opcode(struct ibv_cq_ex *) { return cur().opcode; }
uint32_t fake_vendor_err(struct ibv_cq_ex *) { ++g_fake->vendor_reads; return cur().vendor_err; }
uint32_t fake_byte_len(struct ibv_cq_ex *) { return cur().byte_len; }
uint32_t fake_qp_num(struct ibv_cq_ex *) { return cur().qp_num; }
unsigned int fake_wc_flags(struct ibv_cq_ex *) { return cur().wc_flags; }

void fake_tm_info(struct ibv_cq_ex *, struct ibv_wc_tm_info *info)
{
    ++g_fake->tm_reads;
    info->tag  = cur().tag;
    info->priv = cur().priv;
}

/* ibv_poll_cq of the fake CQ's context: the same script, as struct ibv_wc */
int fake_poll_cq(struct ibv_cq *, int num, struct ibv_wc *wc)
{
    int n = 0;

    for (; (n < num) && (g_fake->pos < g_fake->wcs.size()); ++n) {
        if (cur().bad) {
            ++g_fake->pos;      /* as mlx5's poll_cq: those read are lost */
            return CQ_POLL_ERR;
        }
        memset(&wc[n], 0, sizeof(wc[n]));
        wc[n].wr_id      = cur().wr_id;
        wc[n].status     = cur().status;
        wc[n].opcode     = cur().opcode;
        wc[n].wc_flags   = cur().wc_flags;
        wc[n].byte_len   = cur().byte_len;
        wc[n].qp_num     = cur().qp_num;
        wc[n].vendor_err = cur().vendor_err;
        ++g_fake->pos;
    }
    return n;
}

class verbs_poll : public ::testing::Test {
protected:
    void SetUp() override {
        memset(&m_fake.cq, 0, sizeof(m_fake.cq));
        m_fake.cq.start_poll      = fake_start;
        m_fake.cq.next_poll       = fake_next;
        m_fake.cq.end_poll        = fake_end;
        m_fake.cq.read_opcode     = fake_opcode;
        m_fake.cq.read_vendor_err = fake_vendor_err;
        m_fake.cq.read_byte_len   = fake_byte_len;
        m_fake.cq.read_qp_num     = fake_qp_num;
        m_fake.cq.read_wc_flags   = fake_wc_flags;
        m_fake.cq.read_tm_info    = fake_tm_info;
        memset(&m_context, 0, sizeof(m_context));
        m_context.ops.poll_cq     = fake_poll_cq;
        m_fake.cq.context         = &m_context;
        m_fake.pos                = 0;
        m_fake.have_current       = false;
        m_fake.start_err          = 0;
        m_fake.next_err_at        = (size_t)-1;
        m_fake.ends               = 0;
        m_fake.vendor_reads       = 0;
        m_fake.tm_reads           = 0;
        g_fake                    = &m_fake;

        memset(&m_dev, 0, sizeof(m_dev));
        strcpy(m_dev.super.name, "fake0");
        m_dev.lib = &tm_verbs_libibverbs;
        m_cq.dev  = &m_dev.super;
        m_cq.cq   = &m_fake.cq;
        m_cq.tm   = 1;          /* an SRQ's CQ: the extended reads */
        m_cq.err  = 0;
    }

    void TearDown() override { g_fake = NULL; }

    void add(uint64_t wr_id, enum ibv_wc_opcode opcode, unsigned flags = 0,
             enum ibv_wc_status status = IBV_WC_SUCCESS, uint32_t len = 0,
             uint64_t tag = 0, uint32_t priv = 0, uint32_t vendor_err = 0) {
        fake_wc wc = {wr_id, status, opcode, flags, len, 0x77, vendor_err,
                      tag, priv, false};
        m_fake.wcs.push_back(wc);
    }

    /* A CQE the provider cannot parse, with what it would read as */
    void add_bad(uint64_t wr_id) {
        add(wr_id, IBV_WC_RECV);
        m_fake.wcs.back().bad = true;
    }

    int poll(int max, tm_dev_wc_t *wc) {
        return tm_dev_poll_cq(&m_cq, max, wc);
    }

    fake_cq            m_fake;
    struct ibv_context m_context;
    tm_verbs_dev_t     m_dev;
    tm_dev_cq_t        m_cq;
};

} // namespace

/* A CQ no SRQ completes on (sends only): one ibv_poll_cq for a batch */
TEST_F(verbs_poll, send_cq_is_polled_in_batches_without_tm_reads)
{
    tm_dev_wc_t wc[4];

    m_cq.tm = 0;
    add(10, IBV_WC_SEND);
    add(11, IBV_WC_RDMA_READ, 0, IBV_WC_SUCCESS, 4096);
    add(12, IBV_WC_SEND, 0, IBV_WC_RETRY_EXC_ERR, 0, 0, 0, 0x44);
    ASSERT_EQ(2, poll(2, wc));
    EXPECT_EQ(10u, wc[0].wr_id);
    EXPECT_EQ(IBV_WC_RDMA_READ, wc[1].opcode);
    EXPECT_EQ(4096u, wc[1].byte_len);
    EXPECT_EQ(0x77u, wc[1].qp_num);
    ASSERT_EQ(1, poll(4, wc));
    EXPECT_EQ(IBV_WC_RETRY_EXC_ERR, wc[0].status);
    EXPECT_EQ(0x44u, wc[0].vendor_err);
    EXPECT_EQ(0u, wc[0].tm_info.tag);
    EXPECT_EQ(0, poll(4, wc));
    EXPECT_EQ(0, m_fake.ends) << "no extended polling";
    EXPECT_EQ(0, m_fake.tm_reads);
}

TEST_F(verbs_poll, empty_cq_returns_zero_without_end_poll)
{
    tm_dev_wc_t wc[4];

    EXPECT_EQ(0, poll(4, wc));
    EXPECT_EQ(0, m_fake.ends);
    EXPECT_EQ(0, poll(0, wc));
}

TEST_F(verbs_poll, start_poll_error_is_negative_errno_without_end_poll)
{
    tm_dev_wc_t wc[4];

    add(1, IBV_WC_SEND);
    m_fake.start_err = EINVAL;
    log_capture log;
    EXPECT_EQ(-EINVAL, poll(4, wc));
    EXPECT_EQ(0, m_fake.ends);
    EXPECT_TRUE(log.contains("ibv_start_poll"));
}

TEST_F(verbs_poll, batches_are_bounded_by_max_and_ended)
{
    tm_dev_wc_t wc[4];

    add(10, IBV_WC_SEND, 0, IBV_WC_SUCCESS, 0);
    add(11, IBV_WC_RDMA_READ, 0, IBV_WC_SUCCESS, 4096);
    add(12, IBV_WC_RDMA_WRITE);

    ASSERT_EQ(2, poll(2, wc));
    EXPECT_EQ(1, m_fake.ends);
    EXPECT_EQ(10u, wc[0].wr_id);
    EXPECT_EQ(IBV_WC_SEND, wc[0].opcode);
    EXPECT_EQ(11u, wc[1].wr_id);
    EXPECT_EQ(IBV_WC_RDMA_READ, wc[1].opcode);
    EXPECT_EQ(4096u, wc[1].byte_len);
    EXPECT_EQ(0x77u, wc[1].qp_num);

    ASSERT_EQ(1, poll(4, wc));
    EXPECT_EQ(2, m_fake.ends);
    EXPECT_EQ(12u, wc[0].wr_id);
    EXPECT_EQ(IBV_WC_RDMA_WRITE, wc[0].opcode);

    EXPECT_EQ(0, poll(4, wc));
    EXPECT_EQ(2, m_fake.ends);
    EXPECT_EQ(0, m_fake.tm_reads) << "tm info read for a non-TM completion";
}

TEST_F(verbs_poll, matched_message_keeps_tm_recv_and_tm_info)
{
    tm_dev_wc_t wc[4];

    add(5, IBV_WC_TM_RECV, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID,
        IBV_WC_SUCCESS, 100, 0xfeedull, 42);
    add(6, IBV_WC_TM_RECV, IBV_WC_TM_MATCH, IBV_WC_SUCCESS, 0, 0x1ull, 1);
    add(6, IBV_WC_TM_RECV, IBV_WC_TM_DATA_VALID, IBV_WC_SUCCESS, 65536,
        0x1ull, 1);

    ASSERT_EQ(3, poll(4, wc));
    EXPECT_EQ(IBV_WC_TM_RECV, wc[0].opcode);
    EXPECT_EQ(5u, wc[0].wr_id);
    EXPECT_EQ(100u, wc[0].byte_len);
    EXPECT_EQ(0xfeedull, wc[0].tm_info.tag);
    EXPECT_EQ(42u, wc[0].tm_info.priv);
    EXPECT_EQ((unsigned)(IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID),
              wc[0].wc_flags);
    EXPECT_EQ(IBV_WC_TM_RECV, wc[1].opcode);
    EXPECT_EQ((unsigned)IBV_WC_TM_MATCH, wc[1].wc_flags);
    EXPECT_EQ(IBV_WC_TM_RECV, wc[2].opcode);
    EXPECT_EQ((unsigned)IBV_WC_TM_DATA_VALID, wc[2].wc_flags);
    EXPECT_EQ(0u, wc[0].vendor_err);
    EXPECT_EQ(0, m_fake.vendor_reads) << "vendor_err read on success";
}

TEST_F(verbs_poll, unexpected_tagged_message_is_reported_as_recv)
{
    tm_dev_wc_t wc[2];

    /* mlx5: TM_RECV with neither MATCH nor DATA_VALID, maybe SYNC_REQ */
    add(9, IBV_WC_TM_RECV, IBV_WC_TM_SYNC_REQ, IBV_WC_SUCCESS,
        sizeof(struct ibv_tmh) + 10, 0xabcull, 3);

    ASSERT_EQ(1, poll(2, wc));
    EXPECT_EQ(IBV_WC_RECV, wc[0].opcode);
    EXPECT_EQ(9u, wc[0].wr_id);
    EXPECT_EQ(sizeof(struct ibv_tmh) + 10, wc[0].byte_len);
    EXPECT_EQ((unsigned)IBV_WC_TM_SYNC_REQ, wc[0].wc_flags);
    /* its tag is in its header, in the buffer: the CQE's tag field is the
     * MATCH completion's (mlx5 scatters the TMH into that CQE alone), and
     * nothing may depend on what it holds here */
    EXPECT_EQ(0ull, wc[0].tm_info.tag);
    EXPECT_EQ(0u, wc[0].tm_info.priv);
}

TEST_F(verbs_poll, list_and_no_tag_completions_pass_through)
{
    tm_dev_wc_t wc[4];

    add(1, IBV_WC_TM_ADD, IBV_WC_TM_SYNC_REQ);
    add(2, IBV_WC_TM_DEL, 0, IBV_WC_TM_ERR);
    add(3, IBV_WC_TM_NO_TAG, 0, IBV_WC_SUCCESS, 48);
    add(4, IBV_WC_TM_SYNC);

    ASSERT_EQ(4, poll(4, wc));
    EXPECT_EQ(IBV_WC_TM_ADD, wc[0].opcode);
    EXPECT_EQ((unsigned)IBV_WC_TM_SYNC_REQ, wc[0].wc_flags);
    EXPECT_EQ(IBV_WC_TM_DEL, wc[1].opcode);
    EXPECT_EQ(IBV_WC_TM_ERR, wc[1].status);
    EXPECT_EQ(IBV_WC_TM_NO_TAG, wc[2].opcode);
    EXPECT_EQ(48u, wc[2].byte_len);
    EXPECT_EQ(0u, wc[2].tm_info.tag);
    EXPECT_EQ(IBV_WC_TM_SYNC, wc[3].opcode);
    EXPECT_EQ(0, m_fake.tm_reads);
}

TEST_F(verbs_poll, errors_carry_vendor_error)
{
    tm_dev_wc_t wc[2];

    add(7, IBV_WC_SEND, 0, IBV_WC_RETRY_EXC_ERR, 0, 0, 0, 0x81);
    add(8, IBV_WC_TM_RECV, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID,
        IBV_WC_TM_RNDV_INCOMPLETE, 64, 0x5ull, 9, 0);

    ASSERT_EQ(2, poll(2, wc));
    EXPECT_EQ(IBV_WC_RETRY_EXC_ERR, wc[0].status);
    EXPECT_EQ(0x81u, wc[0].vendor_err);
    EXPECT_EQ(IBV_WC_TM_RNDV_INCOMPLETE, wc[1].status);
    EXPECT_EQ(IBV_WC_TM_RECV, wc[1].opcode);
    EXPECT_EQ(0x5ull, wc[1].tm_info.tag);
}

TEST_F(verbs_poll, next_poll_error_returns_what_was_read)
{
    tm_dev_wc_t wc[4];

    add(1, IBV_WC_SEND);
    add(2, IBV_WC_SEND);
    add(3, IBV_WC_SEND);
    m_fake.next_err_at = 1;

    log_capture log;
    ASSERT_EQ(1, poll(4, wc));
    EXPECT_EQ(1u, wc[0].wr_id);
    EXPECT_EQ(1, m_fake.ends) << "a started batch must be ended";
    EXPECT_TRUE(log.contains("ibv_next_poll"));
    EXPECT_EQ(-EIO, poll(4, wc)) << "the error is the next poll's";
    ASSERT_EQ(1, poll(4, wc));
    EXPECT_EQ(3u, wc[0].wr_id);
}

/* Issue 36 item 3: mlx5's start_poll fails with CQ_POLL_ERR (-2) on a CQE
 * it cannot parse, and consumes it.  An error, never a count of 2; no
 * end_poll; the next poll goes on after it. */
TEST_F(verbs_poll, start_poll_parse_error_is_an_error_not_a_count)
{
    tm_dev_wc_t wc[4];

    add_bad(1);
    add(2, IBV_WC_RECV, 0, IBV_WC_SUCCESS, 16);

    log_capture log;
    EXPECT_EQ(-EBADMSG, poll(4, wc));
    EXPECT_EQ(0, m_fake.ends);
    EXPECT_TRUE(log.contains("ibv_start_poll"));
    ASSERT_EQ(1, poll(4, wc));
    EXPECT_EQ(2u, wc[0].wr_id);
    EXPECT_EQ(1, m_fake.ends);
}

/* ... the same from next_poll: what was read before goes now, the batch is
 * ended, and the next poll returns the error, once */
TEST_F(verbs_poll, next_poll_parse_error_is_the_next_polls_error)
{
    tm_dev_wc_t wc[4];

    add(1, IBV_WC_RECV, 0, IBV_WC_SUCCESS, 16);
    add_bad(2);
    add(3, IBV_WC_RECV, 0, IBV_WC_SUCCESS, 16);

    log_capture log;
    ASSERT_EQ(1, poll(4, wc));
    EXPECT_EQ(1u, wc[0].wr_id);
    EXPECT_EQ(1, m_fake.ends);
    EXPECT_TRUE(log.contains("ibv_next_poll"));
    EXPECT_EQ(-EBADMSG, poll(4, wc));
    ASSERT_EQ(1, poll(4, wc));
    EXPECT_EQ(3u, wc[0].wr_id);
    EXPECT_EQ(0, poll(4, wc));
}

/* ... and from ibv_poll_cq on a send CQ (mlx5's poll_cq returns -2, the
 * completions it read before in the call lost with it) */
TEST_F(verbs_poll, send_cq_parse_error_is_an_error_not_a_count)
{
    tm_dev_wc_t wc[4];

    m_cq.tm = 0;
    add(1, IBV_WC_SEND);
    add_bad(2);
    add(3, IBV_WC_SEND);

    log_capture log;
    EXPECT_EQ(-EBADMSG, poll(4, wc));
    EXPECT_TRUE(log.contains("ibv_poll_cq"));
    ASSERT_EQ(1, poll(4, wc));
    EXPECT_EQ(3u, wc[0].wr_id);
}

/* List operations concern no connection: their qp_num is not read (0), a
 * message's and a send's is */
TEST_F(verbs_poll, only_connection_completions_carry_a_qp_number)
{
    tm_dev_wc_t wc[5];

    add(1, IBV_WC_TM_ADD);
    add(2, IBV_WC_TM_DEL, 0, IBV_WC_TM_ERR);
    add(3, IBV_WC_TM_SYNC);
    add(4, IBV_WC_TM_NO_TAG, 0, IBV_WC_SUCCESS, 16);
    add(5, IBV_WC_SEND);

    ASSERT_EQ(5, poll(5, wc));
    EXPECT_EQ(0u, wc[0].qp_num);
    EXPECT_EQ(0u, wc[1].qp_num);
    EXPECT_EQ(0u, wc[2].qp_num);
    EXPECT_EQ(0x77u, wc[3].qp_num);
    EXPECT_EQ(0x77u, wc[4].qp_num);
}

/* A tag-matching completion without a packet names no QP: mlx5 reads the
 * CQE's qpn field (mlx5_cq_read_wc_qp_num) where firmware need not write
 * it.  The MATCH-only TM_CONSUMED and MSG_COMPLETION_CANCELED read as
 * IBV_WC_SEND give 0 whatever the provider reads; completions with a
 * packet (CONSUMED_SW_RDNV: MATCH only with RNDV_INCOMPLETE; EXPECTED;
 * CONSUMED_MSG; an unexpected message; a responder error) keep it */
TEST_F(verbs_poll, completions_without_a_packet_carry_no_qp_number)
{
    tm_dev_wc_t wc[8];

    add(1, IBV_WC_TM_RECV, IBV_WC_TM_MATCH, IBV_WC_SUCCESS, 0, 0x1ull, 1);
    add(2, IBV_WC_SEND, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID,
        IBV_WC_TM_RNDV_INCOMPLETE);
    add(3, IBV_WC_TM_RECV, IBV_WC_TM_MATCH, IBV_WC_TM_RNDV_INCOMPLETE, 0,
        0x3ull, 3);
    add(1, IBV_WC_TM_RECV, IBV_WC_TM_DATA_VALID, IBV_WC_SUCCESS, 9000);
    add(4, IBV_WC_TM_RECV, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID,
        IBV_WC_TM_RNDV_INCOMPLETE, 60, 0x4ull, 4);
    add(5, IBV_WC_TM_RECV, 0, IBV_WC_SUCCESS, 30);
    add(6, IBV_WC_SEND, 0, IBV_WC_LOC_LEN_ERR);

    ASSERT_EQ(7, poll(8, wc));
    EXPECT_EQ(0u, wc[0].qp_num) << "TM_CONSUMED";
    EXPECT_EQ(0u, wc[1].qp_num) << "MSG_COMPLETION_CANCELED, no packet";
    for (int i = 2; i < 7; ++i) {
        EXPECT_EQ(0x77u, wc[i].qp_num) << i;
    }
    EXPECT_EQ((unsigned)IBV_WC_TM_MATCH, wc[0].wc_flags);
    EXPECT_EQ(0x1ull, wc[0].tm_info.tag);
}
