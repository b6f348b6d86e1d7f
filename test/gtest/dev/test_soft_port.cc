/*
 * The software NIC's port and QPs as rdma-core's mlx5 provider has them:
 *  - an Ethernet (RoCE) port (SOFTNIC_LINK_LAYER=eth) on which no TM-SRQ
 *    can be created, so that the device is not listed for tag matching;
 *  - no TM-SRQ of fewer than 33 untagged buffers;
 *  - ibv_query_qp reading back what the device layer set;
 *  - destroying a QP drops its completions software has not polled
 *    (rdma-core's __mlx5_cq_clean), leaving behind what mlx5 leaves.
 */
#include "soft_fixture.h"
#include "../common/scoped_env.h"
#include "log_capture.h"

#include "dev/verbs/verbs_lib.h"

#include <algorithm>

using namespace soft_test;

namespace {

unsigned soft_listed()
{
    tm_dev_info_t info[16];
    unsigned n = tm_dev_list(info, 16), soft = 0;

    for (unsigned i = 0; i < n; ++i) {
        soft += !strcmp(info[i].name, "soft");
    }
    return soft;
}

/* On a software NIC opened with SOFTNIC_LINK_LAYER=link_layer: port 1's
 * link layer and GID type, and the errno of creating a TM-SRQ of max_wr
 * untagged buffers (0 if it could) */
void soft_port_probe(const char *link_layer, uint8_t *ll, uint32_t *gid_type,
                     int *srq_err, uint32_t max_wr = 33)
{
    scoped_env env("SOFTNIC_LINK_LAYER", link_layer);
    struct ibv_context *ctx = softnic_open_device(
            softnic_get_device_list(nullptr)[0]);
    struct ibv_cq_init_attr_ex cq_attr = {};
    struct ibv_srq_init_attr_ex attr   = {};
    struct ibv_port_attr port;
    struct ibv_gid_entry entry;

    ASSERT_NE(nullptr, ctx);
    ASSERT_EQ(0, ibv_query_port(ctx, 1, &port));
    *ll = port.link_layer;
    ASSERT_EQ(0, softnic_query_gid_ex(ctx, 1, 0, &entry, 0, sizeof(entry)));
    *gid_type = entry.gid_type;

    struct ibv_pd *pd = softnic_alloc_pd(ctx);
    ASSERT_NE(nullptr, pd);
    cq_attr.cqe      = 4;
    cq_attr.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_TM_INFO;
    struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &cq_attr);
    ASSERT_NE(nullptr, cq) << "a CQ works on either link layer";

    attr.attr.max_wr         = max_wr;
    attr.attr.max_sge        = 1;
    attr.comp_mask           = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                               IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
    attr.srq_type            = IBV_SRQT_TM;
    attr.pd                  = pd;
    attr.cq                  = ibv_cq_ex_to_cq(cq);
    attr.tm_cap.max_num_tags = 4;
    attr.tm_cap.max_ops      = 4;
    errno = 0;
    struct ibv_srq *srq = ibv_create_srq_ex(ctx, &attr);
    *srq_err = (srq == nullptr) ? errno : 0;
    if (srq != nullptr) {
        EXPECT_EQ(0, softnic_destroy_srq(srq));
    }
    EXPECT_EQ(0, softnic_destroy_cq(ibv_cq_ex_to_cq(cq)));
    EXPECT_EQ(0, softnic_dealloc_pd(pd));
    EXPECT_EQ(0, softnic_close_device(ctx));
}

} // namespace


/* ------------------------------------------------------------------------
 * Link layer (RoCE: no TM-SRQ, as on mlx5)
 */

/* mlx5's TM-SRQ connects its command QP without a GRH, which the kernel
 * refuses on Ethernet (EINVAL): the software NIC's Ethernet port does too */
TEST(soft_port, ethernet_port_refuses_a_tm_srq_as_mlx5)
{
    uint8_t ll;
    uint32_t gid_type;
    int err;

    ASSERT_NO_FATAL_FAILURE(soft_port_probe("eth", &ll, &gid_type, &err));
    EXPECT_EQ(IBV_LINK_LAYER_ETHERNET, ll);
    EXPECT_EQ((uint32_t)IBV_GID_TYPE_ROCE_V2, gid_type);
    EXPECT_EQ(EINVAL, err);

    for (const char *setting : {(const char*)nullptr, "ib", "nonsense"}) {
        ASSERT_NO_FATAL_FAILURE(soft_port_probe(setting, &ll, &gid_type,
                                                &err));
        EXPECT_EQ(IBV_LINK_LAYER_INFINIBAND, ll) << (setting ? setting : "-");
        EXPECT_EQ((uint32_t)IBV_GID_TYPE_IB, gid_type);
        EXPECT_EQ(0, err);
    }
}

/* rdma-core's tests post 33 untagged buffers to a mlx5 TM-SRQ, "a hardware
 * limitation": the software NIC refuses a TM-SRQ that cannot hold them, and
 * so does the device layer's open */
TEST(soft_port, tm_srq_needs_33_untagged_buffers)
{
    uint8_t ll;
    uint32_t gid_type;
    int err;

    ASSERT_NO_FATAL_FAILURE(soft_port_probe(nullptr, &ll, &gid_type, &err,
                                            32));
    EXPECT_EQ(EINVAL, err);
    ASSERT_NO_FATAL_FAILURE(soft_port_probe(nullptr, &ll, &gid_type, &err,
                                            33));
    EXPECT_EQ(0, err);

    tm_dev_info_t info;
    tm_dev_attr_t attr = {};
    tm_dev_t *dev;
    ASSERT_EQ(0, tm_dev_find("soft", &info));
    attr.srq_depth = TM_DEV_MIN_SRQ_DEPTH - 1;
    EXPECT_EQ(EINVAL, tm_dev_open(&info, &attr, &dev));
    attr.srq_depth = TM_DEV_MIN_SRQ_DEPTH;
    ASSERT_EQ(0, tm_dev_open(&info, &attr, &dev));
    tm_dev_close(dev);
}

/* Listing tries a TM-SRQ on an Ethernet port: the software NIC is not
 * listed then, and says why; with the setting off it is */
TEST(soft_port, ethernet_port_without_tm_srq_is_not_listed)
{
    tm_dev_info_t info;

    {
        scoped_env eth("SOFTNIC_LINK_LAYER", "eth");
        log_capture log;

        EXPECT_EQ(0u, soft_listed());
        EXPECT_TRUE(log.contains("soft: port 1 is Ethernet (RoCE) and no "
                                 "TM-SRQ can be created on it"));
        EXPECT_TRUE(log.contains(strerror(EINVAL)));
        EXPECT_EQ(ENODEV, tm_dev_find("soft", &info));

        /* and opened anyway, it is not usable for tag matching */
        tm_dev_t *dev = nullptr;
        memset(&info, 0, sizeof(info));
        strcpy(info.name, "soft");
        info.lib = &tm_verbs_softnic;
        EXPECT_EQ(EINVAL, tm_dev_open(&info, nullptr, &dev));
        EXPECT_EQ(nullptr, dev);
    }

    for (const char *setting : {(const char*)nullptr, "ib", "InfiniBand"}) {
        scoped_env ib("SOFTNIC_LINK_LAYER", setting);
        EXPECT_EQ(1u, soft_listed()) << (setting ? setting : "-");
        EXPECT_EQ(0, tm_dev_find("soft", &info));
    }
}

/* Listing opens the device to probe it: that must cost no shared memory,
 * which an opened device makes with its first PD */
TEST(soft_port, shared_memory_comes_with_the_first_pd)
{
    char prefix[128] = {};
    softnic_test_shm_prefix(prefix, sizeof(prefix));
    size_t before = shm_names(prefix).size();

    struct ibv_context *ctx = softnic_open_device(
            softnic_get_device_list(nullptr)[0]);
    ASSERT_NE(nullptr, ctx);
    struct ibv_port_attr port;
    ASSERT_EQ(0, ibv_query_port(ctx, 1, &port));
    EXPECT_EQ(before, shm_names(prefix).size());

    struct ibv_pd *pd = softnic_alloc_pd(ctx);
    ASSERT_NE(nullptr, pd);
    EXPECT_EQ(before + 1, shm_names(prefix).size()) << "the device segment";
    EXPECT_EQ(0, softnic_dealloc_pd(pd));
    EXPECT_EQ(0, softnic_close_device(ctx));
    EXPECT_EQ(before, shm_names(prefix).size());
}


/* ------------------------------------------------------------------------
 * ibv_query_qp
 */
TEST_F(soft_pair, query_qp_reads_back_the_connection)
{
    struct ibv_qp_attr attr;
    struct ibv_qp_init_attr init;
    union ibv_gid r_gid;

    ASSERT_EQ(0, softnic_query_gid(tm_dev_ibv_context(r.dev), 1, 0, &r_gid));

    /* the sending QP talks to the peer's receive-only QP */
    memset(&attr, 0xa5, sizeof(attr));
    ASSERT_EQ(0, softnic_query_qp(tm_dev_ibv_qp(cs), &attr, IBV_QP_STATE,
                                  &init));
    EXPECT_EQ(IBV_QPS_RTS, attr.qp_state);
    EXPECT_EQ(IBV_QPS_RTS, attr.cur_qp_state);
    EXPECT_EQ(tm_dev_conn_rx_qp_num(cr), attr.dest_qp_num);
    EXPECT_EQ(IBV_MTU_4096, attr.path_mtu);
    EXPECT_EQ(1, attr.port_num);
    EXPECT_EQ(0, attr.pkey_index);
    EXPECT_EQ(1, attr.ah_attr.is_global) << "the port requires a GRH";
    EXPECT_EQ(0, memcmp(r_gid.raw, attr.ah_attr.grh.dgid.raw, 16));
    EXPECT_EQ(7, attr.rnr_retry);
    EXPECT_EQ(7, attr.retry_cnt);
    EXPECT_EQ((uint8_t)node::TEST_TIMEOUT, attr.timeout);
    EXPECT_EQ(IBV_QPT_RC, init.qp_type);
    EXPECT_EQ(tm_dev_ibv_srq(s.srq), init.srq);
    EXPECT_EQ(ibv_cq_ex_to_cq(s.cq->cq), init.send_cq);
    EXPECT_GT(init.cap.max_send_wr, 0u);
    EXPECT_EQ(0, init.sq_sig_all);

    /* the receive-only one, the other way, without a send queue */
    ASSERT_EQ(0, softnic_query_qp(tm_dev_ibv_rx_qp(cr), &attr, IBV_QP_STATE,
                                  &init));
    EXPECT_EQ(IBV_QPS_RTS, attr.qp_state);
    EXPECT_EQ(tm_dev_conn_qp_num(cs), attr.dest_qp_num);
    EXPECT_EQ(0u, init.cap.max_send_wr);

    /* a refused transition changes nothing */
    struct ibv_qp_attr bad;
    uint8_t rnr_timer = attr.min_rnr_timer;
    memset(&bad, 0, sizeof(bad));
    bad.qp_state      = IBV_QPS_RTR;
    bad.min_rnr_timer = 31;
    EXPECT_EQ(EINVAL, softnic_modify_qp(tm_dev_ibv_rx_qp(cr), &bad,
                                        IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER));
    ASSERT_EQ(0, softnic_query_qp(tm_dev_ibv_rx_qp(cr), &attr, IBV_QP_STATE,
                                  &init));
    EXPECT_EQ(IBV_QPS_RTS, attr.qp_state);
    EXPECT_EQ(rnr_timer, attr.min_rnr_timer);
}


/* ------------------------------------------------------------------------
 * Destroying a QP drops its unpolled completions (__mlx5_cq_clean)
 */
namespace {

void destroy_conn(node &n, tm_dev_conn_t *c)
{
    n.conns.erase(std::remove(n.conns.begin(), n.conns.end(), c),
                  n.conns.end());
    tm_dev_destroy_conn(c);
}

/* One matching-list handle: a handle kept by a dropped completion fills
 * the list */
class soft_pair_one_tag : public soft_pair {
    void set_attr(tm_dev_attr_t &a) override { a.max_num_tags = 1; }
};

} // namespace

TEST_F(soft_pair_one_tag, destroying_a_conn_drops_its_unpolled_receives)
{
    tm_dev_conn_t *cs2 = s.create_conn(), *cr2 = r.create_conn();
    char *tbuf = r.alloc(64);
    uint32_t h;

    ASSERT_NO_FATAL_FAILURE(connect_pair(s, cs2, r, cr2));
    manual();
    r.post_rbufs(4, 256, 100);
    ASSERT_EQ(0, r.add_tag(7, ~0ull, tbuf, 64, 70, 0, &h, 5));
    ASSERT_EQ(0, softnic_test_step_op(r.srq));       /* ADD, QP number 0 */

    /* on cr: untagged (buffer 100), matched (the entry), unexpected
     * (buffer 101); then on cr2 (buffer 102) */
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_NO_TAG, 0, 0, "a"), 1));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 7, 0, "t"), 2));
    ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_EAGER, 99, 0, "u"), 3));
    ASSERT_EQ(0, s.send(cs2, tm_msg(IBV_TMH_NO_TAG, 0, 0, "b"), 4));
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(0, softnic_test_step_arrival(cr));
    }
    ASSERT_EQ(0, softnic_test_step_arrival(cr2));
    EXPECT_EQ(1u, softnic_test_hw_unexp(r.srq));

    /* destroyed before anything was polled: what remains is the list
     * operation's completion and cr2's, in order */
    destroy_conn(r, cr);
    cr = nullptr;
    std::vector<tm_dev_wc_t> v = drain(r);
    ASSERT_EQ(2u, v.size());
    EXPECT_EQ(IBV_WC_TM_ADD, v[0].opcode);
    EXPECT_EQ(5u, v[0].wr_id);
    EXPECT_EQ(IBV_WC_SUCCESS, v[0].status);
    EXPECT_EQ(IBV_WC_TM_NO_TAG, v[1].opcode);
    EXPECT_EQ(102u, v[1].wr_id);
    EXPECT_EQ(tm_dev_conn_rx_qp_num(cr2), v[1].qp_num);

    /* the buffers the dropped receives used are gone: the next message
     * takes the next one */
    ASSERT_EQ(0, s.send(cs2, tm_msg(IBV_TMH_NO_TAG, 0, 0, "c"), 5));
    ASSERT_EQ(0, softnic_test_step_arrival(cr2));
    v = drain(r);
    ASSERT_EQ(1u, v.size());
    EXPECT_EQ(103u, v[0].wr_id);
    EXPECT_EQ(0u, softnic_test_free_rbufs(r.srq));

    /* the matched message's completion kept its handle (the provider's
     * work at poll never ran): the one-entry list stays full */
    EXPECT_EQ(0u, softnic_test_listed_tags(r.srq));
    EXPECT_EQ(ENOMEM, r.add_tag(8, ~0ull, tbuf, 64, 80, 0, nullptr));
}

TEST_F(soft_pair, destroying_a_conn_drops_its_unpolled_send_completions)
{
    tm_dev_conn_t *cs2 = s.create_conn(), *cr2 = r.create_conn();
    tm_dev_wc_t wc;

    ASSERT_NO_FATAL_FAILURE(connect_pair(s, cs2, r, cr2));
    r.post_rbufs(8, 256, 100);
    for (uint64_t i = 1; i <= 3; ++i) {
        ASSERT_EQ(0, s.send(cs, tm_msg(IBV_TMH_NO_TAG, 0, 0, "x"), i));
    }
    ASSERT_EQ(0, s.send(cs2, tm_msg(IBV_TMH_NO_TAG, 0, 0, "y"), 9));
    for (int i = 0; i < 4; ++i) {
        ASSERT_TRUE(r.next(&wc));        /* the receiver takes all four */
    }

    /* one send completion read, the rest generated but not polled */
    double deadline = now_sec() + 5;
    int n = 0;
    while ((n == 0) && (now_sec() < deadline)) {
        n = tm_dev_poll_cq(s.cq, 1, &wc);
    }
    ASSERT_EQ(1, n);
    EXPECT_EQ(1u, wc.wr_id);

    destroy_conn(s, cs);
    cs = nullptr;
    std::vector<tm_dev_wc_t> v = drain(s);
    ASSERT_EQ(1u, v.size()) << "cs's 2 and 3 are gone";
    EXPECT_EQ(9u, v[0].wr_id);
    EXPECT_EQ(tm_dev_conn_qp_num(cs2), v[0].qp_num);
}


/* ---- arguments the kernel checks before any provider sees them ---- */

/* ib_check_mr_access: remote write or atomic access without local write is
 * EINVAL; with it, or read-only, the region is made */
TEST(soft_verbs_args, remote_write_needs_local_write)
{
    struct ibv_context *ctx = softnic_open_device(
            softnic_get_device_list(nullptr)[0]);
    ASSERT_NE(nullptr, ctx);
    struct ibv_pd *pd = softnic_alloc_pd(ctx);
    ASSERT_NE(nullptr, pd);
    static char buf[64];

    for (int access : std::vector<int>{
                 IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_ATOMIC,
                 IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ}) {
        errno = 0;
        EXPECT_EQ(nullptr, softnic_reg_mr(pd, buf, sizeof(buf), access))
                << access;
        EXPECT_EQ(EINVAL, errno) << access;
    }
    for (int access : std::vector<int>{
                 0, IBV_ACCESS_REMOTE_READ,
                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                 IBV_ACCESS_REMOTE_ATOMIC}) {
        struct ibv_mr *mr = softnic_reg_mr(pd, buf, sizeof(buf), access);
        EXPECT_NE(nullptr, mr) << access;
        if (mr != nullptr) {
            EXPECT_EQ(0, softnic_dereg_mr(mr));
        }
    }
    EXPECT_EQ(0, softnic_dealloc_pd(pd));
    EXPECT_EQ(0, softnic_close_device(ctx));
}

/* uverbs' create_cq: a completion vector the device does not have is
 * EINVAL */
TEST(soft_verbs_args, cq_comp_vector_must_exist)
{
    struct ibv_context *ctx = softnic_open_device(
            softnic_get_device_list(nullptr)[0]);
    ASSERT_NE(nullptr, ctx);
    struct ibv_cq_init_attr_ex attr = {};

    attr.cqe         = 16;
    attr.comp_vector = (uint32_t)ctx->num_comp_vectors;
    errno            = 0;
    EXPECT_EQ(nullptr, ibv_create_cq_ex(ctx, &attr));
    EXPECT_EQ(EINVAL, errno);

    attr.comp_vector = (uint32_t)ctx->num_comp_vectors - 1;
    struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &attr);
    ASSERT_NE(nullptr, cq);
    EXPECT_EQ(0, softnic_destroy_cq(ibv_cq_ex_to_cq(cq)));
    EXPECT_EQ(0, softnic_close_device(ctx));
}
