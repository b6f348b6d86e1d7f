/*
 * Connection setup as mlx5 and UCX's ib transports have it (issue 36,
 * items 9, 10 and 15), on the software NIC and through the device layer:
 *  - the port's P_Key table (SOFTNIC_PKEY_TABLE), its membership rules on
 *    connected QPs, and the key the device layer picks (UCX's: the first
 *    full member, or the partition asked for);
 *  - the service level and hop limit of the address vector;
 *  - a port event (new LID, MTU) that new connections follow, and the
 *    context's async_fd that says one waits;
 *  - the inline size mlx5 grants, and the default send queue.
 */
#include "soft_fixture.h"
#include "../common/scoped_env.h"

#include "dev/verbs/verbs_dev.h"
#include "dev/verbs/verbs_lib.h"

#include <poll.h>

using namespace soft_test;

namespace {

/* The software NIC's port 1 P_Key table, opened with SOFTNIC_PKEY_TABLE */
std::vector<uint16_t> soft_pkey_table(const char *env)
{
    scoped_env guard("SOFTNIC_PKEY_TABLE", env);
    struct ibv_context *ctx = softnic_open_device(
            softnic_get_device_list(nullptr)[0]);
    std::vector<uint16_t> table;
    struct ibv_device_attr_ex dev_attr;
    struct ibv_port_attr port;
    __be16 key;

    EXPECT_NE(nullptr, ctx);
    if (ctx == nullptr) {
        return table;
    }
    EXPECT_EQ(0, ibv_query_port(ctx, 1, &port));
    EXPECT_EQ(0, ibv_query_device_ex(ctx, NULL, &dev_attr));
    EXPECT_EQ(port.pkey_tbl_len, dev_attr.orig_attr.max_pkeys);
    for (int i = 0; i < port.pkey_tbl_len; ++i) {
        EXPECT_EQ(0, softnic_query_pkey(ctx, 1, i, &key));
        table.push_back(be16toh(key));
    }
    errno = 0;
    EXPECT_EQ(-1, softnic_query_pkey(ctx, 1, port.pkey_tbl_len, &key))
            << "no entry beyond the table, as ibv_query_pkey";
    EXPECT_EQ(EINVAL, errno);
    softnic_close_device(ctx);
    return table;
}

/* Two devices opened with their own P_Key tables (nullptr: the default) and
 * device-layer attributes */
struct pkey_pair {
    node s, r;
    tm_dev_conn_t *cs = nullptr, *cr = nullptr;

    void open(const char *s_table, const char *r_table,
              const tm_dev_attr_t &attr = tm_dev_attr_t()) {
        {
            scoped_env guard("SOFTNIC_PKEY_TABLE", s_table);
            ASSERT_NO_FATAL_FAILURE(s.open(attr));
        }
        scoped_env guard("SOFTNIC_PKEY_TABLE", r_table);
        ASSERT_NO_FATAL_FAILURE(r.open(attr));
    }

    void connect() {
        cs = s.create_conn();
        cr = r.create_conn();
        ASSERT_NO_FATAL_FAILURE(connect_pair(s, cs, r, cr));
    }

    /* An RDMA write from s to r: its completion status */
    enum ibv_wc_status write() {
        char *src = s.alloc(64), *dst = r.alloc(64);
        tm_dev_wc_t wc;

        memset(src, 'p', 64);
        memset(dst, 0, 64);
        EXPECT_EQ(0, s.rdma(cs, IBV_WR_RDMA_WRITE, src, 64, (uintptr_t)dst,
                            r.mr->rkey, 7));
        if (!s.next(&wc)) {
            ADD_FAILURE() << "no completion";
            return IBV_WC_GENERAL_ERR;
        }
        EXPECT_EQ(7u, wc.wr_id);
        if (wc.status == IBV_WC_SUCCESS) {
            EXPECT_EQ(0, memcmp(src, dst, 64));
        } else {
            EXPECT_EQ(std::string(64, '\0'), std::string(dst, 64))
                    << "a dropped packet writes nothing";
        }
        return wc.status;
    }

    bool reachable(node &from, node &to) {
        uint8_t addr[TM_DEV_ADDR_MAX];

        tm_dev_addr(to.dev, addr);
        return tm_dev_is_reachable(from.dev, addr);
    }

    ~pkey_pair() {
        s.close();
        r.close();
    }
};

struct ibv_qp_attr qp_query(struct ibv_qp *qp)
{
    struct ibv_qp_attr attr;
    struct ibv_qp_init_attr init;

    memset(&attr, 0, sizeof(attr));
    EXPECT_EQ(0, softnic_query_qp(qp, &attr, IBV_QP_PKEY_INDEX | IBV_QP_AV |
                                  IBV_QP_PATH_MTU, &init));
    return attr;
}

} // namespace


/* ---- the software NIC's P_Key table and its rules (reproduction) ---- */

TEST(soft_pkey, table_is_set_from_the_environment)
{
    EXPECT_EQ(std::vector<uint16_t>({0xffff}), soft_pkey_table(nullptr))
            << "the default partition, full membership";
    EXPECT_EQ(std::vector<uint16_t>({0x7fff, 0xffff, 0x1234}),
              soft_pkey_table("0x7fff,0xffff,0x1234"));
    EXPECT_EQ(std::vector<uint16_t>({0xffff}), soft_pkey_table("0xffff,zz"))
            << "not understood: the default, not a partitioned port";
}

/* The kernel refuses a P_Key index beyond the port's table (EINVAL) */
TEST(soft_pkey, qp_index_must_be_in_the_table)
{
    scoped_env guard("SOFTNIC_PKEY_TABLE", "0x7fff,0xffff");
    node n;
    ASSERT_NO_FATAL_FAILURE(n.open(tm_dev_attr_t()));
    tm_dev_conn_t *c = n.create_conn();
    struct ibv_qp_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state   = IBV_QPS_INIT;
    attr.pkey_index = 2;
    EXPECT_EQ(EINVAL, softnic_modify_qp(tm_dev_ibv_qp(c), &attr,
                                        IBV_QP_STATE | IBV_QP_PKEY_INDEX));
    attr.pkey_index = 0;
    EXPECT_EQ(0, softnic_modify_qp(tm_dev_ibv_qp(c), &attr,
                                   IBV_QP_STATE | IBV_QP_PKEY_INDEX));
    n.close();
}

/* Two limited members of one partition: the QPs connect (a NIC knows
 * nothing of the peer's key at RTR), the responder drops every packet, the
 * requester runs out of retries and nothing is written */
TEST(soft_pkey, two_limited_members_cannot_talk)
{
    pkey_pair p;
    ASSERT_NO_FATAL_FAILURE(p.open("0x7fff", "0x7fff"));
    ASSERT_NO_FATAL_FAILURE(p.connect());
    EXPECT_EQ(IBV_WC_RETRY_EXC_ERR, p.write());
    EXPECT_FALSE(p.reachable(p.s, p.r)) << "as UCX's is_reachable";
}

TEST(soft_pkey, other_partitions_cannot_talk)
{
    pkey_pair p;
    ASSERT_NO_FATAL_FAILURE(p.open("0xffff", "0x9234"));
    ASSERT_NO_FATAL_FAILURE(p.connect());
    EXPECT_EQ(IBV_WC_RETRY_EXC_ERR, p.write());
    EXPECT_FALSE(p.reachable(p.s, p.r));
    EXPECT_FALSE(p.reachable(p.r, p.s));
}

TEST(soft_pkey, a_full_member_talks_to_a_limited_one)
{
    pkey_pair p;
    ASSERT_NO_FATAL_FAILURE(p.open("0x7fff", "0xffff"));
    ASSERT_NO_FATAL_FAILURE(p.connect());
    EXPECT_EQ(IBV_WC_SUCCESS, p.write());
    EXPECT_TRUE(p.reachable(p.s, p.r));
    EXPECT_TRUE(p.reachable(p.r, p.s));
}


/* ---- the key the device layer picks (item 9) ---- */

/* Index 0 holds a limited key: the QPs take the full member at index 1,
 * as UCX does, and the connection carries data */
TEST(soft_pkey, limited_index_0_still_connects)
{
    pkey_pair p;
    ASSERT_NO_FATAL_FAILURE(p.open("0x7fff,0xffff", "0x7fff,0xffff"));
    ASSERT_NO_FATAL_FAILURE(p.connect());
    for (struct ibv_qp *qp : {tm_dev_ibv_qp(p.cs), tm_dev_ibv_rx_qp(p.cs),
                              tm_dev_ibv_qp(p.cr), tm_dev_ibv_rx_qp(p.cr)}) {
        EXPECT_EQ(1, qp_query(qp).pkey_index) << qp->qp_num;
    }
    EXPECT_EQ(IBV_WC_SUCCESS, p.write());
    EXPECT_TRUE(p.reachable(p.s, p.r));
}

/* A partition asked for (UCX_IB_PKEY's meaning): its full member, wherever
 * it is in the table; a partition the port lacks opens nothing */
TEST(soft_pkey, partition_asked_for)
{
    tm_dev_attr_t attr = {};
    tm_dev_info_t info;
    tm_dev_t *dev;

    attr.pkey = TM_DEV_ATTR_SET | 0x1234;
    {
        pkey_pair p;
        ASSERT_NO_FATAL_FAILURE(p.open("0xffff,0x1234,0x9234",
                                       "0x9234", attr));
        ASSERT_NO_FATAL_FAILURE(p.connect());
        EXPECT_EQ(2, qp_query(tm_dev_ibv_qp(p.cs)).pkey_index);
        EXPECT_EQ(0, qp_query(tm_dev_ibv_qp(p.cr)).pkey_index);
        EXPECT_EQ(IBV_WC_SUCCESS, p.write());
    }

    scoped_env guard("SOFTNIC_PKEY_TABLE", "0xffff,0x9235");
    ASSERT_EQ(0, tm_dev_find("soft", &info));
    EXPECT_EQ(ENOENT, tm_dev_open(&info, &attr, &dev));
    attr.pkey = TM_DEV_ATTR_SET | 0x8000;
    EXPECT_EQ(EINVAL, tm_dev_open(&info, &attr, &dev));
}


/* ---- service level and hop limit (item 15) ---- */

/* UCX's defaults: SL 0 (SL=auto without adaptive routing), hop limit 255
 * (HOP_LIMIT); a service level set is what the address vector carries */
TEST(soft_pkey, address_vector_has_ucx_sl_and_hop_limit)
{
    for (uint32_t sl : {0u, TM_DEV_ATTR_SET | 5u}) {
        tm_dev_attr_t attr = {};
        pkey_pair p;

        attr.sl = sl;
        ASSERT_NO_FATAL_FAILURE(p.open(nullptr, nullptr, attr));
        ASSERT_NO_FATAL_FAILURE(p.connect());
        for (struct ibv_qp *qp : {tm_dev_ibv_qp(p.cs),
                                  tm_dev_ibv_rx_qp(p.cs)}) {
            struct ibv_qp_attr a = qp_query(qp);
            EXPECT_EQ((uint8_t)sl, a.ah_attr.sl);
            EXPECT_EQ(1, a.ah_attr.is_global) << "the port requires a GRH";
            EXPECT_EQ(255, a.ah_attr.grh.hop_limit);
        }
    }

    tm_dev_attr_t attr = {};
    tm_dev_info_t info;
    tm_dev_t *dev;

    attr.sl = TM_DEV_ATTR_SET | 16;
    ASSERT_EQ(0, tm_dev_find("soft", &info));
    EXPECT_EQ(EINVAL, tm_dev_open(&info, &attr, &dev)) << "16 SLs";
}


/* ---- a port event (item 15) ---- */

/* The subnet manager gives the port a LID and a smaller MTU: the event
 * comes as on a NIC, and the port says so */
TEST(soft_pkey, port_event_is_raised_and_queried)
{
    struct ibv_context *ctx = softnic_open_device(
            softnic_get_device_list(nullptr)[0]);
    softnic_test_port_t port = {};
    struct ibv_async_event event;
    struct ibv_port_attr attr;

    ASSERT_NE(nullptr, ctx);
    port.lid = 0x42;
    port.mtu = IBV_MTU_1024;
    ASSERT_EQ(0, softnic_test_port_event(ctx, &port, IBV_EVENT_LID_CHANGE));
    ASSERT_EQ(0, softnic_get_async_event(ctx, &event));
    EXPECT_EQ(IBV_EVENT_LID_CHANGE, event.event_type);
    EXPECT_EQ(1, event.element.port_num);
    softnic_ack_async_event(&event);
    EXPECT_EQ(-1, softnic_get_async_event(ctx, &event));
    ASSERT_EQ(0, ibv_query_port(ctx, 1, &attr));
    EXPECT_EQ(0x42, attr.lid);
    EXPECT_EQ(IBV_MTU_1024, attr.active_mtu);
    softnic_close_device(ctx);
}

/* The context's async_fd (ibv_get_async_event(3)) is readable while an
 * event waits to be read, and no longer once all were: two port events,
 * read one by one */
TEST(soft_pkey, async_fd_is_readable_while_events_wait)
{
    struct ibv_context *ctx = softnic_open_device(
            softnic_get_device_list(nullptr)[0]);
    softnic_test_port_t port = {};
    struct ibv_async_event event;

    ASSERT_NE(nullptr, ctx);
    ASSERT_GE(ctx->async_fd, 0);
    struct pollfd pfd = { ctx->async_fd, POLLIN, 0 };
    EXPECT_EQ(0, poll(&pfd, 1, 0));
    port.lid = 1;
    port.mtu = IBV_MTU_4096;
    ASSERT_EQ(0, softnic_test_port_event(ctx, &port, IBV_EVENT_LID_CHANGE));
    ASSERT_EQ(0, softnic_test_port_event(ctx, &port, IBV_EVENT_PORT_ACTIVE));
    for (enum ibv_event_type type : {IBV_EVENT_LID_CHANGE,
                                     IBV_EVENT_PORT_ACTIVE}) {
        EXPECT_EQ(1, poll(&pfd, 1, 0)) << "an event waits";
        ASSERT_EQ(0, softnic_get_async_event(ctx, &event));
        EXPECT_EQ(type, event.event_type);
        softnic_ack_async_event(&event);
    }
    EXPECT_EQ(0, poll(&pfd, 1, 0)) << "readable with nothing to read";
    errno = 0;
    EXPECT_EQ(-1, softnic_get_async_event(ctx, &event));
    EXPECT_EQ(EAGAIN, errno);
    softnic_close_device(ctx);
}

/* The device layer reads the event and re-queries the port: the addresses
 * it hands out and the connections it makes from then on have the new LID
 * and MTU */
TEST(soft_pkey, new_connections_follow_a_port_event)
{
    softnic_test_port_t port = {};
    uint8_t addr[TM_DEV_ADDR_MAX];
    tm_verbs_peer_t peer;
    pkey_pair p;

    ASSERT_NO_FATAL_FAILURE(p.open(nullptr, nullptr));
    port.lid = 0x42;
    port.mtu = IBV_MTU_1024;
    ASSERT_EQ(0, softnic_test_port_event(tm_dev_ibv_context(p.s.dev), &port,
                                         IBV_EVENT_LID_CHANGE));
    EXPECT_EQ(1u, tm_dev_progress_events(p.s.dev));

    tm_dev_addr(p.s.dev, addr);
    ASSERT_EQ(0, tm_verbs_dev_addr_unpack(addr, &peer));
    EXPECT_EQ(0x42, peer.lid);
    ASSERT_NO_FATAL_FAILURE(p.connect());
    EXPECT_EQ(IBV_MTU_1024, qp_query(tm_dev_ibv_qp(p.cs)).path_mtu);
    EXPECT_EQ(IBV_MTU_1024, qp_query(tm_dev_ibv_qp(p.cr)).path_mtu)
            << "the peer takes the smaller MTU of the address";
    EXPECT_EQ(IBV_WC_SUCCESS, p.write());
}

/* The table changes (PKEY_CHANGE): a port that had only a limited key gets
 * a full one, and new connections use it */
TEST(soft_pkey, new_connections_follow_a_pkey_change)
{
    softnic_test_port_t port = {};
    pkey_pair p;

    ASSERT_NO_FATAL_FAILURE(p.open("0x7fff", "0x7fff"));
    EXPECT_FALSE(p.reachable(p.r, p.s));
    port.mtu      = IBV_MTU_4096;
    port.pkeys[0] = 0x7fff;
    port.pkeys[1] = 0xffff;
    port.npkeys   = 2;
    ASSERT_EQ(0, softnic_test_port_event(tm_dev_ibv_context(p.s.dev), &port,
                                         IBV_EVENT_PKEY_CHANGE));
    EXPECT_EQ(1u, tm_dev_progress_events(p.s.dev));
    EXPECT_TRUE(p.reachable(p.r, p.s));
    ASSERT_NO_FATAL_FAILURE(p.connect());
    EXPECT_EQ(1, qp_query(tm_dev_ibv_qp(p.cs)).pkey_index);
    EXPECT_EQ(IBV_WC_SUCCESS, p.write());
}


/* ---- memory (item 10) ---- */

/* mlx5 grants the inline data that fills the WQE (mlx5_calc_sq_size), up
 * to a WQE of max_sq_desc_sz (1 KiB from ConnectX-4 on), refuses a QP that
 * asks more, and a longer inline send; a QP without a send queue keeps
 * what was asked */
TEST(soft_pkey, inline_grant_is_mlx5s)
{
    node n;
    ASSERT_NO_FATAL_FAILURE(n.open(tm_dev_attr_t()));
    struct ibv_context *ctx = tm_dev_ibv_context(n.dev);
    struct ibv_pd *pd       = softnic_alloc_pd(ctx);
    const struct { uint32_t wr, sge, asked, granted; } cases[] = {
        {256, 2, 64, 124},      /* UCX's TX_MIN_INLINE */
        {256, 2, 0, 60},        /* the gather list's WQE */
        {1, 1, 0, 60},
        {16, 2, 256, 316},
        {256, 2, 572, 572},     /* a WQE of 768 */
        {256, 2, 828, 828},     /* the 1 KiB WQE, full */
        {0, 0, 0, 0}
    };

    ASSERT_NE(nullptr, pd);
    for (const auto &c : cases) {
        struct ibv_qp_init_attr init = {};

        init.send_cq             = ibv_cq_ex_to_cq(n.cq->cq);
        init.recv_cq             = ibv_cq_ex_to_cq(n.cq->cq);
        init.srq                 = tm_dev_ibv_srq(n.srq);
        init.qp_type             = IBV_QPT_RC;
        init.cap.max_send_wr     = c.wr;
        init.cap.max_send_sge    = c.sge;
        init.cap.max_inline_data = c.asked;
        struct ibv_qp *qp = softnic_create_qp(pd, &init);
        ASSERT_NE(nullptr, qp);
        EXPECT_EQ(c.granted, init.cap.max_inline_data)
                << c.wr << " WRs, " << c.sge << " SGEs, " << c.asked;
        if (c.wr != 0) {
            tm_verbs_mlx5_sq_t sq;
            ASSERT_EQ(0, tm_verbs_mlx5_sq_size(c.wr, c.sge, c.asked, 1024,
                                               &sq));
            EXPECT_EQ(sq.max_inline, c.granted)
                    << "the device layer's arithmetic agrees";
        }
        EXPECT_EQ(0, softnic_destroy_qp(qp));
    }

    /* one byte more needs a WQE past 1 KiB: refused, as mlx5 refuses it */
    struct ibv_qp_init_attr init = {};
    tm_verbs_mlx5_sq_t sq;

    init.send_cq             = ibv_cq_ex_to_cq(n.cq->cq);
    init.recv_cq             = ibv_cq_ex_to_cq(n.cq->cq);
    init.srq                 = tm_dev_ibv_srq(n.srq);
    init.qp_type             = IBV_QPT_RC;
    init.cap.max_send_wr     = 256;
    init.cap.max_send_sge    = 2;
    init.cap.max_inline_data = 829;
    errno                    = 0;
    EXPECT_EQ(nullptr, softnic_create_qp(pd, &init));
    EXPECT_EQ(EINVAL, errno);
    EXPECT_EQ(EINVAL, tm_verbs_mlx5_sq_size(256, 2, 829, 1024, &sq));
    softnic_dealloc_pd(pd);
    n.close();
}

/* A connection asks UCX's send queue and inline size: 256 WRs, 124 bytes
 * granted, and an inline send longer than that is refused */
TEST(soft_pkey, connection_has_ucx_queue_defaults)
{
    pkey_pair p;
    tm_dev_caps_t caps;
    struct ibv_qp_attr attr;
    struct ibv_qp_init_attr init;

    ASSERT_NO_FATAL_FAILURE(p.open(nullptr, nullptr));
    tm_dev_query(p.s.dev, &caps);
    EXPECT_EQ(256u, caps.max_send_wr);
    EXPECT_EQ(124u, caps.max_inline);
    EXPECT_EQ(4095u, caps.max_srq_wr) << "UCX's RC RX_QUEUE_LEN";
    ASSERT_NO_FATAL_FAILURE(p.connect());
    ASSERT_EQ(0, softnic_query_qp(tm_dev_ibv_qp(p.cs), &attr, 0, &init));
    EXPECT_EQ(256u, init.cap.max_send_wr);
    EXPECT_EQ(124u, init.cap.max_inline_data);

    char *buf = p.s.alloc(256);
    struct ibv_sge sge = { (uintptr_t)buf, 125, p.s.mr->lkey };
    EXPECT_EQ(EINVAL, p.s.send_sge(p.cs, sge, 1, IBV_SEND_INLINE))
            << "longer than granted";
}
