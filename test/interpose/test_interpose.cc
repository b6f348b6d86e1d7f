/*
 * The interposer as a program linked against libibverbs alone sees it
 * (LD_PRELOAD; main() re-executes the program with it when it is not
 * loaded): the device list, the software NIC's device and context, and a
 * clean error for every object the software NIC does not have (the verbs'
 * man pages: NULL with errno, or the error code).
 */
#include <infiniband/verbs.h>

#include <gtest/gtest.h>

#include <dirent.h>
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
    struct ibv_ah_attr ah_attr = {};
    union ibv_gid gid          = {};
    struct ibv_ece ece         = {};
    char buf[64];

    errno = 0;
    EXPECT_EQ(nullptr, ibv_create_ah(m_pd, &ah_attr));
    EXPECT_EQ(EOPNOTSUPP, errno);
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
