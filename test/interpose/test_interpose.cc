/*
 * The interposer as a program linked against libibverbs alone sees it
 * (LD_PRELOAD; main() re-executes the program with it when it is not
 * loaded): the device list, the software NIC's device and context, its
 * address handles and UD QPs as UCX's ud_verbs and ibv_ud_pingpong use
 * them, its asynchronous event file descriptor, and a clean error for
 * every object the software NIC does not have (the verbs' man pages: NULL
 * with errno, or the error code).
 */
#include <infiniband/verbs.h>

#include <gtest/gtest.h>

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace {

const char *kSoft = "soft";

struct ibv_device *find_soft(struct ibv_device **list)
{
    for (; *list != NULL; list++) {
        if (!strcmp(ibv_get_device_name(*list), kSoft)) {
            return *list;
        }
    }
    return NULL;
}

/* The software NIC's device opened, with a PD */
class interpose : public ::testing::Test {
protected:
    void SetUp() override
    {
        m_list = ibv_get_device_list(NULL);
        ASSERT_NE(nullptr, m_list);
        struct ibv_device *dev = find_soft(m_list);
        ASSERT_NE(nullptr, dev);
        m_ctx = ibv_open_device(dev);
        ASSERT_NE(nullptr, m_ctx) << strerror(errno);
        m_pd = ibv_alloc_pd(m_ctx);
        ASSERT_NE(nullptr, m_pd) << strerror(errno);
    }

    void TearDown() override
    {
        if (m_pd != NULL) {
            EXPECT_EQ(0, ibv_dealloc_pd(m_pd));
        }
        if (m_ctx != NULL) {
            EXPECT_EQ(0, ibv_close_device(m_ctx));
        }
        if (m_list != NULL) {
            ibv_free_device_list(m_list);
        }
    }

    struct ibv_device  **m_list = NULL;
    struct ibv_context  *m_ctx  = NULL;
    struct ibv_pd       *m_pd   = NULL;
};

int thread_count()
{
    DIR *dir = opendir("/proc/self/task");
    int n    = 0;

    if (dir == NULL) {
        return -1;
    }
    while (struct dirent *d = readdir(dir)) {
        n += (d->d_name[0] != '.');
    }
    closedir(dir);
    return n;
}

} // namespace

TEST(interpose_list, the_software_nic_ends_the_list_and_is_counted)
{
    int num = -1;
    struct ibv_device **list = ibv_get_device_list(&num);

    ASSERT_NE(nullptr, list) << strerror(errno);
    ASSERT_GE(num, 1);
    EXPECT_EQ(nullptr, list[num]);
    EXPECT_STREQ(kSoft, ibv_get_device_name(list[num - 1]));
    ibv_free_device_list(list);
}

TEST(interpose_list, lists_are_freed_in_any_order)
{
    struct ibv_device **a = ibv_get_device_list(NULL);
    struct ibv_device **b = ibv_get_device_list(NULL);

    ASSERT_NE(nullptr, a);
    ASSERT_NE(nullptr, b);
    EXPECT_NE(a, b);
    ibv_free_device_list(a);
    EXPECT_NE(nullptr, find_soft(b));   /* b still valid */
    ibv_free_device_list(b);
}

TEST_F(interpose, device_index_is_minus_one_and_guid_is_the_node_guid)
{
    struct ibv_device_attr attr;

    EXPECT_EQ(-1, ibv_get_device_index(m_ctx->device));
    ASSERT_EQ(0, ibv_query_device(m_ctx, &attr));
    EXPECT_NE(0u, attr.node_guid);
    EXPECT_EQ(attr.node_guid, ibv_get_device_guid(m_ctx->device));
}

TEST_F(interpose, exported_query_port_answers_as_the_inline)
{
    struct ibv_port_attr inl, exported;

    memset(&exported, 0xa5, sizeof(exported));
    ASSERT_EQ(0, ibv_query_port(m_ctx, 1, &inl));
    ASSERT_EQ(0, (ibv_query_port)(m_ctx, 1,
                                  (struct _compat_ibv_port_attr *)&exported));
    EXPECT_EQ(inl.state, exported.state);
    EXPECT_EQ(inl.lid, exported.lid);
    EXPECT_EQ(inl.gid_tbl_len, exported.gid_tbl_len);
    EXPECT_EQ(inl.max_msg_sz, exported.max_msg_sz);
    EXPECT_EQ(inl.link_layer, exported.link_layer);
}

TEST_F(interpose, gid_table_holds_the_gids_of_port_one)
{
    struct ibv_port_attr port;
    union ibv_gid gid;

    ASSERT_EQ(0, ibv_query_port(m_ctx, 1, &port));
    std::vector<struct ibv_gid_entry> table(port.gid_tbl_len + 1);
    ssize_t n = ibv_query_gid_table(m_ctx, table.data(), table.size(), 0);
    ASSERT_EQ((ssize_t)port.gid_tbl_len, n);
    ASSERT_EQ(0, ibv_query_gid(m_ctx, 1, 0, &gid));
    EXPECT_EQ(0, memcmp(&gid, &table[0].gid, sizeof(gid)));
    EXPECT_EQ(1u, table[0].port_num);
    EXPECT_EQ(0u, table[0].gid_index);

    /* too small an array: an error, not an overflow */
    EXPECT_EQ(-EINVAL, ibv_query_gid_table(m_ctx, table.data(), 0, 0));
}

TEST_F(interpose, pkey_index_finds_the_default_key)
{
    __be16 pkey;

    ASSERT_EQ(0, ibv_query_pkey(m_ctx, 1, 0, &pkey));
    EXPECT_EQ(0, ibv_get_pkey_index(m_ctx, 1, pkey));
    EXPECT_LT(ibv_get_pkey_index(m_ctx, 1, htobe16(0x1234)), 0);
}

TEST_F(interpose, objects_it_does_not_have_fail_cleanly)
{
    union ibv_gid gid          = {};
    struct ibv_ece ece         = {};
    char buf[64];

    errno = 0;
    EXPECT_EQ(nullptr, ibv_import_pd(m_ctx, 1));
    EXPECT_EQ(EOPNOTSUPP, errno);
    errno = 0;
    EXPECT_EQ(nullptr, ibv_import_mr(m_pd, 1));
    EXPECT_EQ(EOPNOTSUPP, errno);
    errno = 0;
    EXPECT_EQ(nullptr, ibv_import_dm(m_ctx, 1));
    EXPECT_EQ(EOPNOTSUPP, errno);
    errno = 0;
    EXPECT_EQ(nullptr, ibv_reg_dmabuf_mr(m_pd, 0, sizeof(buf), 0, -1,
                                         IBV_ACCESS_LOCAL_WRITE));
    EXPECT_EQ(EOPNOTSUPP, errno);
    /* an I/O virtual address other than the buffer's */
    errno = 0;
    EXPECT_EQ(nullptr, ibv_reg_mr_iova(m_pd, buf, sizeof(buf), 0x1000,
                                       IBV_ACCESS_LOCAL_WRITE));
    EXPECT_EQ(EOPNOTSUPP, errno);

    struct ibv_cq *cq = ibv_create_cq(m_ctx, 4, NULL, NULL, 0);
    ASSERT_NE(nullptr, cq) << strerror(errno);
    struct ibv_qp_init_attr qp_attr = {};
    qp_attr.send_cq          = cq;
    qp_attr.recv_cq          = cq;
    qp_attr.qp_type          = IBV_QPT_RC;
    qp_attr.cap.max_send_wr  = 1;
    qp_attr.cap.max_recv_wr  = 1;
    qp_attr.cap.max_send_sge = 1;
    qp_attr.cap.max_recv_sge = 1;
    struct ibv_qp *qp = ibv_create_qp(m_pd, &qp_attr);
    ASSERT_NE(nullptr, qp) << strerror(errno);

    EXPECT_EQ(EOPNOTSUPP, ibv_attach_mcast(qp, &gid, 0));
    EXPECT_EQ(EOPNOTSUPP, ibv_detach_mcast(qp, &gid, 0));
    EXPECT_EQ(EOPNOTSUPP, ibv_query_ece(qp, &ece));
    ece.vendor_id = 0x15b3;
    EXPECT_EQ(EOPNOTSUPP, ibv_set_ece(qp, &ece));
    EXPECT_EQ(nullptr, ibv_qp_to_qp_ex(qp));   /* created without send ops */
    /* with send ops, the QP's own extended QP (libibverbs' would read a
     * struct verbs_qp the soft QP is not) */
    struct ibv_qp_init_attr_ex ex_attr = {};
    ex_attr.send_cq        = cq;
    ex_attr.recv_cq        = cq;
    ex_attr.qp_type        = IBV_QPT_RC;
    ex_attr.cap            = qp_attr.cap;
    ex_attr.comp_mask      = IBV_QP_INIT_ATTR_PD |
                             IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ex_attr.pd             = m_pd;
    ex_attr.send_ops_flags = IBV_QP_EX_WITH_SEND;
    struct ibv_qp *ex_qp = ibv_create_qp_ex(m_ctx, &ex_attr);
    ASSERT_NE(nullptr, ex_qp) << strerror(errno);
    struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(ex_qp);
    ASSERT_NE(nullptr, qpx);
    EXPECT_EQ(ex_qp, &qpx->qp_base);
    EXPECT_NE(nullptr, (void *)qpx->wr_start);
    EXPECT_EQ(0, ibv_destroy_qp(ex_qp));
    EXPECT_EQ(0, ibv_query_qp_data_in_order(qp, IBV_WR_SEND, 0));

    struct ibv_mr *mr = ibv_reg_mr(m_pd, buf, sizeof(buf),
                                   IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(nullptr, mr) << strerror(errno);
    errno = 0;
    EXPECT_EQ(IBV_REREG_MR_ERR_INPUT,
              ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
                           IBV_ACCESS_LOCAL_WRITE |
                           IBV_ACCESS_REMOTE_READ));
    EXPECT_EQ(EOPNOTSUPP, errno);
    EXPECT_EQ(0, ibv_dereg_mr(mr));     /* the old MR stayed valid */

    EXPECT_EQ(0, ibv_destroy_qp(qp));
    EXPECT_EQ(0, ibv_destroy_cq(cq));
}

/* What UCX's ib md checks of a device: its node /dev/infiniband/softnic0
 * (the dev_name, ib_md.c uct_ib_device_is_accessible), and that mlx5's
 * transports refuse it: mlx5dv_is_supported() compares the struct
 * verbs_device's ops around the device (rdma-core providers/mlx5/mlx5.c
 * is_mlx5_dev), which must be there to read, and not mlx5's */
TEST_F(interpose, device_is_a_generic_hca_to_mlx5)
{
    EXPECT_STREQ("softnic0", m_ctx->device->dev_name);
    EXPECT_EQ(IBV_TRANSPORT_IB, m_ctx->device->transport_type);
    void *mlx5 = dlopen("libmlx5.so.1", RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(nullptr, mlx5) << "rdma-core's mlx5 provider (Debian's "
                                "ibverbs-providers): " << dlerror();
    typedef bool (*is_supported_t)(struct ibv_device *);
    is_supported_t is_supported =
            (is_supported_t)dlsym(mlx5, "mlx5dv_is_supported");
    ASSERT_NE(nullptr, (void *)is_supported) << dlerror();
    EXPECT_FALSE(is_supported(m_ctx->device));
    dlclose(mlx5);
}

/* Memory as UCX's ib md registers it (ibv_reg_mr_iova2 at the buffer's
 * own address: local and remote write, remote read and atomic, and
 * relaxed ordering, an optional flag a device may ignore: the kernel's
 * IB_ACCESS_OPTIONAL range) */
TEST_F(interpose, memory_registers_as_ucx_asks)
{
    static char buf[8192];
    struct ibv_mr *mr = ibv_reg_mr_iova2(m_pd, buf, sizeof(buf),
                                         (uintptr_t)buf,
                                         IBV_ACCESS_LOCAL_WRITE |
                                         IBV_ACCESS_REMOTE_WRITE |
                                         IBV_ACCESS_REMOTE_READ |
                                         IBV_ACCESS_REMOTE_ATOMIC |
                                         IBV_ACCESS_RELAXED_ORDERING);
    ASSERT_NE(nullptr, mr) << strerror(errno);
    EXPECT_EQ((void *)buf, mr->addr);
    EXPECT_EQ(sizeof(buf), mr->length);
    EXPECT_EQ(mr->lkey, mr->rkey);
    EXPECT_EQ(0, ibv_dereg_mr(mr));
}

/* The context's async_fd (ibv_get_async_event(3)): readable while an event
 * waits, as UCX's async thread polls it; non-blocking, a read with none
 * fails with EAGAIN.  A CQ that overruns raises IBV_EVENT_CQ_ERR */
TEST_F(interpose, async_fd_is_readable_while_an_event_waits)
{
    struct ibv_async_event event;
    int fd = m_ctx->async_fd;

    ASSERT_GE(fd, 0);
    ASSERT_EQ(0, fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK));
    struct pollfd pfd = { fd, POLLIN, 0 };
    EXPECT_EQ(0, poll(&pfd, 1, 0));
    errno = 0;
    EXPECT_EQ(-1, ibv_get_async_event(m_ctx, &event));
    EXPECT_EQ(EAGAIN, errno);

    /* 5 completions into a CQ of 4 entries: sends of datagrams nobody
     * takes, which complete at once */
    struct ibv_cq *cq = ibv_create_cq(m_ctx, 4, NULL, NULL, 0);
    ASSERT_NE(nullptr, cq) << strerror(errno);
    ASSERT_EQ(4, cq->cqe);
    struct ibv_qp_init_attr qa = {};
    qa.send_cq          = cq;
    qa.recv_cq          = cq;
    qa.qp_type          = IBV_QPT_UD;
    qa.cap.max_send_wr  = 8;
    qa.cap.max_recv_wr  = 1;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    struct ibv_qp *qp = ibv_create_qp(m_pd, &qa);
    ASSERT_NE(nullptr, qp) << strerror(errno);
    struct ibv_qp_attr attr = {};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    attr.qkey     = 1;
    ASSERT_EQ(0, ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                               IBV_QP_PORT | IBV_QP_QKEY));
    attr.qp_state = IBV_QPS_RTR;
    ASSERT_EQ(0, ibv_modify_qp(qp, &attr, IBV_QP_STATE));
    attr.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(0, ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN));
    struct ibv_ah_attr ah_attr = {};
    ah_attr.is_global = 1;
    ah_attr.port_num  = 1;
    ASSERT_EQ(0, ibv_query_gid(m_ctx, 1, 0, &ah_attr.grh.dgid));
    struct ibv_ah *ah = ibv_create_ah(m_pd, &ah_attr);
    ASSERT_NE(nullptr, ah) << strerror(errno);
    char byte = 0;
    for (uint64_t i = 0; i < 5; ++i) {
        struct ibv_sge sge = { (uintptr_t)&byte, 1, 0 };
        struct ibv_send_wr wr = {}, *bad = NULL;
        wr.wr_id             = i;
        wr.sg_list           = &sge;
        wr.num_sge           = 1;
        wr.opcode            = IBV_WR_SEND;
        wr.send_flags        = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
        wr.wr.ud.ah          = ah;
        wr.wr.ud.remote_qpn  = 0xfffffe;       /* nobody's */
        wr.wr.ud.remote_qkey = 1;
        ASSERT_EQ(0, ibv_post_send(qp, &wr, &bad));
    }
    ASSERT_EQ(1, poll(&pfd, 1, 5000)) << "no event for the overrun";
    ASSERT_EQ(0, ibv_get_async_event(m_ctx, &event));
    EXPECT_EQ(IBV_EVENT_CQ_ERR, event.event_type);
    EXPECT_EQ(cq, event.element.cq);
    ibv_ack_async_event(&event);
    EXPECT_EQ(0, poll(&pfd, 1, 0)) << "readable with nothing waiting";

    EXPECT_EQ(0, ibv_destroy_ah(ah));
    EXPECT_EQ(0, ibv_destroy_qp(qp));
    EXPECT_EQ(0, ibv_destroy_cq(cq));
}

/* Address handles and UD QPs through libibverbs' own functions: a
 * datagram, its GRH, and the answer made from its completion
 * (ibv_create_ah_from_wc); an address without a GRH is refused where the
 * port requires one, as on mlx5 (EINVAL) */
TEST_F(interpose, datagram_and_its_answer)
{
    struct ibv_ah_attr no_grh = {};
    no_grh.port_num = 1;
    no_grh.dlid     = 1;
    errno = 0;
    EXPECT_EQ(nullptr, ibv_create_ah(m_pd, &no_grh));
    EXPECT_EQ(EINVAL, errno);

    struct ibv_cq *cq = ibv_create_cq(m_ctx, 16, NULL, NULL, 0);
    ASSERT_NE(nullptr, cq) << strerror(errno);
    static char buf[4096];
    struct ibv_mr *mr = ibv_reg_mr(m_pd, buf, sizeof(buf),
                                   IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(nullptr, mr) << strerror(errno);
    struct ibv_qp *qp[2];
    for (auto &q : qp) {
        struct ibv_qp_init_attr qa = {};
        qa.send_cq          = cq;
        qa.recv_cq          = cq;
        qa.qp_type          = IBV_QPT_UD;
        qa.cap.max_send_wr  = 4;
        qa.cap.max_recv_wr  = 4;
        qa.cap.max_send_sge = 1;
        qa.cap.max_recv_sge = 1;
        q = ibv_create_qp(m_pd, &qa);
        ASSERT_NE(nullptr, q) << strerror(errno);
        struct ibv_qp_attr attr = {};
        attr.qp_state = IBV_QPS_INIT;
        attr.port_num = 1;
        attr.qkey     = 0x11;
        ASSERT_EQ(0, ibv_modify_qp(q, &attr, IBV_QP_STATE |
                                   IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                   IBV_QP_QKEY));
        attr.qp_state = IBV_QPS_RTR;
        ASSERT_EQ(0, ibv_modify_qp(q, &attr, IBV_QP_STATE));
        attr.qp_state = IBV_QPS_RTS;
        ASSERT_EQ(0, ibv_modify_qp(q, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN));
    }
    auto post_recv = [&](struct ibv_qp *q, size_t off) {
        struct ibv_sge sge = { (uintptr_t)(buf + off), 1024, mr->lkey };
        struct ibv_recv_wr wr = {}, *bad = NULL;
        wr.wr_id   = off;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        return ibv_post_recv(q, &wr, &bad);
    };
    auto send = [&](struct ibv_qp *q, struct ibv_ah *ah, uint32_t qpn,
                    const char *msg) {
        struct ibv_sge sge = { (uintptr_t)msg, (uint32_t)strlen(msg), 0 };
        struct ibv_send_wr wr = {}, *bad = NULL;
        wr.sg_list           = &sge;
        wr.num_sge           = 1;
        wr.opcode            = IBV_WR_SEND;
        wr.send_flags        = IBV_SEND_INLINE;
        wr.wr.ud.ah          = ah;
        wr.wr.ud.remote_qpn  = qpn;
        wr.wr.ud.remote_qkey = 0x11;
        return ibv_post_send(q, &wr, &bad);
    };
    auto recv_one = [&](struct ibv_wc *wc) {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (;;) {
            int n = ibv_poll_cq(cq, 1, wc);
            if (n != 0) {
                return n;
            }
            clock_gettime(CLOCK_MONOTONIC, &t);
            if (t.tv_sec - t0.tv_sec > 5) {
                return 0;
            }
        }
    };
    ASSERT_EQ(0, post_recv(qp[1], 0));
    ASSERT_EQ(0, post_recv(qp[0], 2048));
    struct ibv_ah_attr ah_attr = {};
    ah_attr.is_global     = 1;
    ah_attr.port_num      = 1;
    ah_attr.grh.hop_limit = 1;
    ASSERT_EQ(0, ibv_query_gid(m_ctx, 1, 0, &ah_attr.grh.dgid));
    struct ibv_ah *ah = ibv_create_ah(m_pd, &ah_attr);
    ASSERT_NE(nullptr, ah) << strerror(errno);
    ASSERT_EQ(0, send(qp[0], ah, qp[1]->qp_num, "ping"));
    struct ibv_wc wc;
    ASSERT_EQ(1, recv_one(&wc));
    ASSERT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(0u, wc.wr_id);
    EXPECT_EQ(40u + 4, wc.byte_len);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH);
    EXPECT_EQ(qp[0]->qp_num, wc.src_qp);
    EXPECT_EQ(0, memcmp("ping", buf + 40, 4));

    struct ibv_ah *back = ibv_create_ah_from_wc(m_pd, &wc,
                                                (struct ibv_grh *)buf, 1);
    ASSERT_NE(nullptr, back) << strerror(errno);
    ASSERT_EQ(0, send(qp[1], back, wc.src_qp, "pong"));
    ASSERT_EQ(1, recv_one(&wc));
    ASSERT_EQ(IBV_WC_SUCCESS, wc.status);
    EXPECT_EQ(2048u, wc.wr_id);
    EXPECT_EQ(0, memcmp("pong", buf + 2048 + 40, 4));

    EXPECT_EQ(0, ibv_destroy_ah(back));
    EXPECT_EQ(0, ibv_destroy_ah(ah));
    for (auto q : qp) {
        EXPECT_EQ(0, ibv_destroy_qp(q));
    }
    EXPECT_EQ(0, ibv_dereg_mr(mr));
    EXPECT_EQ(0, ibv_destroy_cq(cq));
}

/* The engine thread starts with the device's first PD (softnic.h) */
TEST(interpose_progress, contexts_get_the_engine_thread_unless_inline)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    ASSERT_NE(nullptr, list);
    struct ibv_device *dev = find_soft(list);
    ASSERT_NE(nullptr, dev);

    for (const char *mode : {"thread", "inline"}) {
        setenv("SOFTNIC_PROGRESS", mode, 1);
        struct ibv_context *ctx = ibv_open_device(dev);
        ASSERT_NE(nullptr, ctx) << mode << ": " << strerror(errno);
        int before        = thread_count();
        struct ibv_pd *pd = ibv_alloc_pd(ctx);
        ASSERT_NE(nullptr, pd);
        EXPECT_EQ(before + (strcmp(mode, "thread") == 0), thread_count())
                << mode;
        EXPECT_EQ(0, ibv_dealloc_pd(pd));
        EXPECT_EQ(0, ibv_close_device(ctx));
    }

    setenv("SOFTNIC_PROGRESS", "sometimes", 1);
    errno = 0;
    EXPECT_EQ(nullptr, ibv_open_device(dev));
    EXPECT_EQ(EINVAL, errno);
    unsetenv("SOFTNIC_PROGRESS");
    ibv_free_device_list(list);
}

/* Runs itself again with the interposer preloaded (RC_TM_BUILDDIR) */
int main(int argc, char **argv)
{
    const char *preload = getenv("LD_PRELOAD");
    const char *build   = getenv("RC_TM_BUILDDIR");

    if ((preload == NULL) || (strstr(preload, "libsoftnic_verbs") == NULL)) {
        if (build == NULL) {
            fprintf(stderr, "test_interpose: set RC_TM_BUILDDIR\n");
            return 1;
        }
        std::string so = std::string(build) +
                         "/test/interpose/.libs/libsoftnic_verbs.so";
        setenv("LD_PRELOAD", so.c_str(), 1);
        execv("/proc/self/exe", argv);
        perror("test_interpose: execv");
        return 1;
    }
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
