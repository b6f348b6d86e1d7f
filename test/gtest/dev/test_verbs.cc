/*
 * Tests of the device layer's verbs backend: the exported verb tables,
 * listing (libibverbs' devices say why they are not listed; the software
 * NIC comes last), opening, and the pure parts: limits, capabilities,
 * addresses and reachability.  Routes and the first listed device:
 * test_verbs_port.cc; completion reading: test_verbs_poll.cc.
 */
#include <gtest/gtest.h>

#include "dev/tm_dev.h"
#include "dev/verbs/verbs_dev.h"
#include "dev/verbs/verbs_lib.h"
#include "log_capture.h"

#include <softnic/softnic.h>

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <string>

namespace {

/* Whether rdma-core can enumerate devices here, and how many */
bool rdma_device_list(int *num, int *err)
{
    struct ibv_device **list;

    errno = 0;
    list  = ibv_get_device_list(num);
    *err  = errno;
    if (list == NULL) {
        return false;
    }
    ibv_free_device_list(list);
    return true;
}

tm_dev_info_t sentinel_info()
{
    tm_dev_info_t info;

    memset(&info, 0xa5, sizeof(info));
    return info;
}

bool is_sentinel(const tm_dev_info_t &info)
{
    tm_dev_info_t s = sentinel_info();

    return !memcmp(&info, &s, sizeof(info));
}


} // namespace


/* ------------------------------------------------------------------------
 * The exported verbs and listing
 */
TEST(verbs_lib, exported_verb_tables_are_complete)
{
    for (const tm_verbs_lib_t *lib : {&tm_verbs_libibverbs, &tm_verbs_softnic}) {
        ASSERT_NE(nullptr, lib->name);
        /* every slot after the name and the probe flag is a function */
        const void *const *slot = reinterpret_cast<const void *const *>(
                &lib->get_device_list);
        size_t nslots = (sizeof(*lib) - offsetof(tm_verbs_lib_t,
                                                 get_device_list)) /
                        sizeof(void*);
        for (size_t i = 0; i < nslots; ++i) {
            EXPECT_NE(nullptr, slot[i]) << lib->name << " slot " << i;
        }
    }
    EXPECT_TRUE(tm_verbs_libibverbs.probe) << "NICs prove tag matching";
    EXPECT_EQ((void*)ibv_modify_qp, (void*)tm_verbs_libibverbs.modify_qp);
}

TEST(verbs_list, without_devices_lists_the_software_nic_and_says_why)
{
    tm_dev_info_t info[8];
    unsigned count;
    int num, err;

    if (rdma_device_list(&num, &err)) {
        GTEST_SKIP() << "rdma-core lists " << num << " device(s) here; "
                     << "this test covers ibv_get_device_list() failing";
    }

    for (tm_dev_info_t &i : info) {
        i = sentinel_info();
    }

    log_capture log;
    count = tm_dev_list(info, 8);

    ASSERT_EQ(1u, count);
    EXPECT_STREQ("soft", info[0].name);
    EXPECT_EQ(&tm_verbs_softnic, info[0].lib);
    for (unsigned i = 1; i < 8; ++i) {
        EXPECT_TRUE(is_sentinel(info[i]));
    }
    /* The reason, with the errno rdma-core gave, at debug level */
    EXPECT_TRUE(log.contains("libibverbs lists no devices"));
    EXPECT_TRUE(log.contains(strerror(err))) << "errno " << err;
    EXPECT_TRUE(log.contains("errno " + std::to_string(err)));
}

TEST(verbs_list, lists_within_bounds)
{
    tm_dev_info_t info[4];
    unsigned count;

    for (tm_dev_info_t &i : info) {
        i = sentinel_info();
    }

    log_capture log;
    count = tm_dev_list(info, 3);   /* info[3] must stay untouched */
    ASSERT_GE(count, 1u);
    ASSERT_LE(count, 3u);
    EXPECT_TRUE(is_sentinel(info[3]));
    for (unsigned i = 0; i < count; ++i) {
        EXPECT_LT(strlen(info[i].name), (size_t)TM_DEV_NAME_MAX);
    }

    /* A full table takes nothing */
    EXPECT_EQ(0u, tm_dev_list(info, 0));
    EXPECT_TRUE(is_sentinel(info[3]));
}

TEST(verbs_list, software_nic_is_listed_last)
{
    tm_dev_info_t info[16];
    unsigned count, i;

    count = tm_dev_list(info, 16);
    ASSERT_GE(count, 1u);
    EXPECT_STREQ("soft", info[count - 1].name);
    EXPECT_EQ(&tm_verbs_softnic, info[count - 1].lib);
    for (i = 0; i + 1 < count; ++i) {
        EXPECT_EQ(&tm_verbs_libibverbs, info[i].lib) << info[i].name;
    }
}

TEST(verbs_list, software_nic_is_marked_and_nics_are_not)
{
    tm_dev_info_t info[16];
    unsigned count, i;

    count = tm_dev_list(info, 16);
    ASSERT_GE(count, 1u);
    for (i = 0; i < count; ++i) {
        EXPECT_EQ(info[i].lib == &tm_verbs_softnic, !!info[i].soft)
                << info[i].name;
    }
    EXPECT_TRUE(info[count - 1].soft);
}

TEST(verbs_open, device_tells_the_port_it_uses)
{
    tm_dev_info_t info;
    tm_dev_t *dev;

    /* The transport names the network device "<name>:<port>" from it */
    ASSERT_EQ(0, tm_dev_find("soft", &info));
    ASSERT_EQ(0, tm_dev_open(&info, NULL, &dev));
    EXPECT_STREQ("soft", dev->name);
    EXPECT_EQ(1, dev->port_num);
    tm_dev_close(dev);
}

/* Fork init is possible only before a device is brought up in a process:
 * each test runs in a process of its own (threadsafe death test) */
class verbs_fork_DeathTest : public testing::Test {
protected:
    void SetUp() override
    {
        testing::FLAGS_gtest_death_test_style = "threadsafe";
    }
};

static void fork_init_first_child()
{
    tm_dev_info_t info;
    tm_dev_t *dev;

    if (tm_dev_fork_init() != 0) {
        exit(2);
    }
    if ((softnic_is_fork_initialized() != IBV_FORK_ENABLED) ||
        (ibv_is_fork_initialized() == IBV_FORK_DISABLED)) {
        exit(3);
    }
    if ((tm_dev_find("soft", &info) != 0) ||
        (tm_dev_open(&info, NULL, &dev) != 0)) {
        exit(4);
    }
    /* Done already: a later call succeeds, as rdma-core's does */
    if (tm_dev_fork_init() != 0) {
        exit(5);
    }
    tm_dev_close(dev);
    exit(0);
}

TEST_F(verbs_fork_DeathTest, fork_init_before_any_device_is_recorded)
{
    EXPECT_EXIT(fork_init_first_child(), testing::ExitedWithCode(0), "");
}

static void fork_init_late_child()
{
    tm_dev_info_t info;
    tm_dev_t *dev;

    if ((tm_dev_find("soft", &info) != 0) ||
        (tm_dev_open(&info, NULL, &dev) != 0)) {
        exit(2);
    }
    /* The software NIC refuses it once a device is up, as rdma-core does
     * once a provider has allocated a queue */
    if (tm_dev_fork_init() != EINVAL) {
        exit(3);
    }
    if (softnic_is_fork_initialized() != IBV_FORK_DISABLED) {
        exit(4);
    }
    tm_dev_close(dev);
    exit(0);
}

TEST_F(verbs_fork_DeathTest, fork_init_after_a_device_is_up_is_refused)
{
    EXPECT_EXIT(fork_init_late_child(), testing::ExitedWithCode(0), "");
}

TEST(verbs_open, unknown_device_fails_cleanly)
{
    tm_dev_info_t info;
    tm_dev_t *dev = reinterpret_cast<tm_dev_t*>(0x1);
    int ret;

    memset(&info, 0, sizeof(info));
    strcpy(info.name, "no_such_rdma_dev");
    info.lib = &tm_verbs_libibverbs;

    log_capture log;
    ret = tm_dev_open(&info, NULL, &dev);
    EXPECT_NE(0, ret);
    EXPECT_GT(ret, 0) << "errors are positive errno values";
    EXPECT_EQ(reinterpret_cast<tm_dev_t*>(0x1), dev) << "dev_p written on failure";
    EXPECT_TRUE(log.contains("no_such_rdma_dev"));
}


/* ------------------------------------------------------------------------
 * Capabilities and limits (pure)
 */
namespace {

struct ibv_device_attr_ex mlx5_like_attr()
{
    struct ibv_device_attr_ex attr;

    memset(&attr, 0, sizeof(attr));
    attr.orig_attr.max_qp_wr           = 32768;
    attr.orig_attr.max_srq_wr          = 32767;
    attr.orig_attr.max_sge             = 30;
    attr.orig_attr.max_cqe             = 4194303;
    attr.orig_attr.max_qp_rd_atom      = 16;
    attr.orig_attr.max_qp_init_rd_atom = 16;
    attr.orig_attr.phys_port_cnt       = 1;
    attr.tm_caps.flags                 = IBV_TM_CAP_RC;
    attr.tm_caps.max_num_tags          = 511;
    attr.tm_caps.max_ops               = 32768;
    attr.tm_caps.max_rndv_hdr_size     = 64;
    attr.tm_caps.max_sge               = 1;
    return attr;
}

struct ibv_port_attr active_port(uint8_t link_layer)
{
    struct ibv_port_attr port;

    memset(&port, 0, sizeof(port));
    port.state      = IBV_PORT_ACTIVE;
    port.active_mtu = IBV_MTU_4096;
    port.max_msg_sz = 1u << 30;
    port.lid        = 7;
    port.link_layer = link_layer;
    return port;
}

} // namespace

TEST(verbs_caps, unusable_devices_are_named)
{
    struct ibv_device_attr_ex attr = mlx5_like_attr();

    EXPECT_EQ(nullptr, tm_verbs_tm_unusable(&attr));

    attr.tm_caps.flags = 0;
    ASSERT_NE(nullptr, tm_verbs_tm_unusable(&attr));
    EXPECT_NE(nullptr, strstr(tm_verbs_tm_unusable(&attr), "IBV_TM_CAP_RC"));

    attr = mlx5_like_attr();
    attr.tm_caps.max_num_tags = 0;
    ASSERT_NE(nullptr, tm_verbs_tm_unusable(&attr));
    EXPECT_NE(nullptr, strstr(tm_verbs_tm_unusable(&attr), "max_num_tags"));

    attr = mlx5_like_attr();
    attr.tm_caps.max_ops = 0;
    EXPECT_NE(nullptr, tm_verbs_tm_unusable(&attr));
}

TEST(verbs_caps, defaults_are_clamped_to_the_nic)
{
    struct ibv_device_attr_ex attr = mlx5_like_attr();
    struct ibv_port_attr port      = active_port(IBV_LINK_LAYER_INFINIBAND);
    tm_dev_attr_t req;
    tm_verbs_limits_t lim;

    memset(&req, 0, sizeof(req));
    tm_verbs_limits_init(&lim, &attr, &port, &req);

    EXPECT_EQ(511u, lim.max_num_tags);                /* default 1024 > NIC */
    EXPECT_EQ((uint32_t)TM_VERBS_DEF_MAX_OPS, lim.max_ops);
    EXPECT_EQ(64u, lim.max_rndv_hdr_size);
    EXPECT_EQ((uint32_t)TM_VERBS_DEF_SRQ_DEPTH, lim.srq_depth);
    EXPECT_EQ((uint32_t)TM_VERBS_DEF_SEND_WR, lim.max_send_wr);
    EXPECT_EQ((uint32_t)TM_VERBS_MAX_SEND_SGE, lim.max_send_sge);
    EXPECT_EQ(1u << 30, lim.max_msg_size);
    EXPECT_EQ(1ull << 30, lim.max_rdma_size);
    EXPECT_EQ(4096u, lim.eager_packet_size);
    EXPECT_EQ(16, lim.max_rd_atomic);
    EXPECT_EQ(16, lim.max_dest_rd_atomic);
}

TEST(verbs_caps, requests_are_honoured_up_to_the_nic)
{
    struct ibv_device_attr_ex attr = mlx5_like_attr();
    struct ibv_port_attr port      = active_port(IBV_LINK_LAYER_INFINIBAND);
    tm_dev_attr_t req;
    tm_verbs_limits_t lim;

    memset(&req, 0, sizeof(req));
    req.max_num_tags      = 8;
    req.max_ops           = 1u << 20;     /* above the NIC */
    req.max_rndv_hdr_size = 48;
    req.srq_depth         = 100000;       /* above the NIC */
    req.eager_packet_size = 128;          /* soft device only: ignored */
    req.max_msg_size      = 65536;
    req.max_send_wr       = 16;
    attr.orig_attr.max_qp_init_rd_atom = 4;
    port.active_mtu       = IBV_MTU_1024;
    tm_verbs_limits_init(&lim, &attr, &port, &req);

    EXPECT_EQ(8u, lim.max_num_tags);
    EXPECT_EQ(32768u, lim.max_ops);
    EXPECT_EQ(48u, lim.max_rndv_hdr_size);
    EXPECT_EQ(32767u, lim.srq_depth);
    EXPECT_EQ(1024u, lim.eager_packet_size);
    EXPECT_EQ(65536u, lim.max_msg_size);
    EXPECT_EQ(16u, lim.max_send_wr);
    EXPECT_EQ(4, lim.max_rd_atomic);

    /* A larger rendezvous header than the NIC parses is clamped */
    req.max_rndv_hdr_size = 1024;
    tm_verbs_limits_init(&lim, &attr, &port, &req);
    EXPECT_EQ(64u, lim.max_rndv_hdr_size);
}

TEST(verbs_caps, query_reports_what_is_in_effect)
{
    struct ibv_device_attr_ex attr = mlx5_like_attr();
    struct ibv_port_attr port      = active_port(IBV_LINK_LAYER_ETHERNET);
    tm_dev_attr_t req;
    tm_verbs_limits_t lim;
    tm_dev_caps_t caps;

    memset(&req, 0, sizeof(req));
    req.max_num_tags = 32;
    req.max_ops      = 8;
    req.srq_depth    = 256;
    tm_verbs_limits_init(&lim, &attr, &port, &req);
    memset(&caps, 0xff, sizeof(caps));
    tm_verbs_caps_fill(&caps, &attr, &lim);

    EXPECT_EQ((uint32_t)IBV_TM_CAP_RC, caps.tm.flags);
    EXPECT_EQ(32u, caps.tm.max_num_tags);
    EXPECT_EQ(8u, caps.tm.max_ops);
    EXPECT_EQ(64u, caps.tm.max_rndv_hdr_size);
    EXPECT_EQ(1u, caps.tm.max_sge);
    EXPECT_EQ(256u, caps.max_srq_wr);
    EXPECT_EQ(lim.max_send_wr, caps.max_send_wr);
    EXPECT_EQ((uint32_t)TM_VERBS_MIN_INLINE, caps.max_inline)
            << "what every NIC takes, until a probe QP says more";
    EXPECT_EQ(1u << 30, caps.max_msg_size);
    EXPECT_EQ(1ull << 30, caps.max_rdma_size);
    EXPECT_EQ(4096u, caps.eager_packet_size);
    EXPECT_EQ(sizeof(tm_verbs_dev_addr_t), caps.dev_addr_len);
    EXPECT_EQ(sizeof(tm_verbs_conn_addr_t), caps.conn_addr_len);
    EXPECT_LE(caps.dev_addr_len, (size_t)TM_DEV_ADDR_MAX);
    EXPECT_LE(caps.conn_addr_len, (size_t)TM_DEV_ADDR_MAX);
}

TEST(verbs_caps, mtu_bytes)
{
    EXPECT_EQ(256u, tm_verbs_mtu_bytes(IBV_MTU_256));
    EXPECT_EQ(512u, tm_verbs_mtu_bytes(IBV_MTU_512));
    EXPECT_EQ(1024u, tm_verbs_mtu_bytes(IBV_MTU_1024));
    EXPECT_EQ(2048u, tm_verbs_mtu_bytes(IBV_MTU_2048));
    EXPECT_EQ(4096u, tm_verbs_mtu_bytes(IBV_MTU_4096));
    EXPECT_EQ(0u, tm_verbs_mtu_bytes((enum ibv_mtu)0));
    EXPECT_EQ(0u, tm_verbs_mtu_bytes((enum ibv_mtu)9));
}


/* ------------------------------------------------------------------------
 * Addresses (pure)
 */
namespace {

union ibv_gid make_gid(uint64_t prefix, uint64_t id)
{
    union ibv_gid gid;

    gid.global.subnet_prefix = htobe64(prefix);
    gid.global.interface_id  = htobe64(id);
    return gid;
}

union ibv_gid ipv4_gid(uint32_t ip)
{
    union ibv_gid gid;

    memset(&gid, 0, sizeof(gid));
    gid.raw[10] = 0xff;
    gid.raw[11] = 0xff;
    memcpy(&gid.raw[12], &ip, 4);
    return gid;
}

} // namespace

TEST(verbs_addr, device_address_round_trip)
{
    union ibv_gid gid = make_gid(0xfe80000000000000ull, 0x0002c90300a1b2c3ull);
    uint8_t buf[TM_DEV_ADDR_MAX];
    tm_verbs_peer_t peer;

    memset(buf, 0, sizeof(buf));
    tm_verbs_dev_addr_pack(buf, IBV_LINK_LAYER_INFINIBAND, 0x1234, &gid,
                           0x8123);
    ASSERT_EQ(0, tm_verbs_dev_addr_unpack(buf, &peer));
    EXPECT_EQ(IBV_LINK_LAYER_INFINIBAND, peer.link_layer);
    EXPECT_EQ(0x1234, peer.lid);
    EXPECT_EQ(0x8123, peer.pkey) << "the partition travels (item 9)";
    EXPECT_EQ(0, memcmp(gid.raw, peer.gid.raw, 16));
    /* Big endian on the wire, whatever the host */
    EXPECT_EQ(0x12, buf[offsetof(tm_verbs_dev_addr_t, lid)]);
    EXPECT_EQ(0x34, buf[offsetof(tm_verbs_dev_addr_t, lid) + 1]);
    /* tagged so that foreign addresses are refused (docs/verbs-device.md) */
    EXPECT_EQ(0x56, buf[0]);
}

TEST(verbs_addr, connection_address_round_trip)
{
    union ibv_gid gid = ipv4_gid(inet_addr("10.1.2.3"));
    uint8_t buf[TM_DEV_ADDR_MAX];
    tm_verbs_peer_t peer;

    tm_verbs_qp_addr_t tx = {0xabcdef, 0x12345678}, rx = {0x123456, 0x77};

    tm_verbs_conn_addr_pack(buf, IBV_MTU_2048, 0xbeef, &tx, &rx, &gid);
    ASSERT_EQ(0, tm_verbs_conn_addr_unpack(buf, &peer));
    EXPECT_EQ(IBV_MTU_2048, peer.mtu);
    EXPECT_EQ(0xbeef, peer.lid);
    EXPECT_EQ(0xabcdefu, peer.tx.qpn);
    EXPECT_EQ(0x345678u, peer.tx.psn) << "PSNs are 24 bits";
    EXPECT_EQ(0x123456u, peer.rx.qpn) << "both QPs of the connection";
    EXPECT_EQ(0x77u, peer.rx.psn);
    EXPECT_EQ(0, memcmp(gid.raw, peer.gid.raw, 16));
    /* tagged so that foreign addresses are refused (docs/verbs-device.md) */
    EXPECT_EQ(0xc7, buf[0]);
}

TEST(verbs_addr, foreign_addresses_are_refused)
{
    union ibv_gid gid = make_gid(1, 2);
    uint8_t buf[TM_DEV_ADDR_MAX];
    tm_verbs_peer_t peer;

    memset(buf, 0, sizeof(buf));
    EXPECT_EQ(EINVAL, tm_verbs_dev_addr_unpack(buf, &peer));
    EXPECT_EQ(EINVAL, tm_verbs_conn_addr_unpack(buf, &peer));

    /* A device address is not a connection address and vice versa */
    tm_verbs_dev_addr_pack(buf, IBV_LINK_LAYER_INFINIBAND, 1, &gid, 0xffff);
    EXPECT_EQ(EINVAL, tm_verbs_conn_addr_unpack(buf, &peer));
    tm_verbs_qp_addr_t qp = {2, 3};
    tm_verbs_conn_addr_pack(buf, IBV_MTU_4096, 1, &qp, &qp, &gid);
    EXPECT_EQ(EINVAL, tm_verbs_dev_addr_unpack(buf, &peer));

    /* A connection address with an invalid MTU */
    buf[offsetof(tm_verbs_conn_addr_t, mtu)] = 0;
    EXPECT_EQ(EINVAL, tm_verbs_conn_addr_unpack(buf, &peer));
}

TEST(verbs_addr, reachability)
{
    union ibv_gid ib_a  = make_gid(0xfe80000000000000ull, 1);
    union ibv_gid ib_b  = make_gid(0xfe80000000000000ull, 2);
    union ibv_gid ib_c  = make_gid(0xfec0000000000001ull, 3);
    union ibv_gid v4_a  = ipv4_gid(inet_addr("10.0.0.1"));
    union ibv_gid v4_b  = ipv4_gid(inet_addr("10.0.0.2"));
    union ibv_gid v6    = make_gid(0xfe80000000000000ull, 0x1234);
    uint8_t buf[TM_DEV_ADDR_MAX];
    tm_verbs_peer_t peer;

    /* IB: same subnet prefix */
    tm_verbs_dev_addr_pack(buf, IBV_LINK_LAYER_INFINIBAND, 2, &ib_b, 0xffff);
    ASSERT_EQ(0, tm_verbs_dev_addr_unpack(buf, &peer));
    EXPECT_TRUE(tm_verbs_peer_reachable(IBV_LINK_LAYER_INFINIBAND, &ib_a, &peer));
    EXPECT_TRUE(tm_verbs_peer_reachable(IBV_LINK_LAYER_UNSPECIFIED, &ib_a, &peer));
    EXPECT_FALSE(tm_verbs_peer_reachable(IBV_LINK_LAYER_INFINIBAND, &ib_c, &peer));
    EXPECT_FALSE(tm_verbs_peer_reachable(IBV_LINK_LAYER_ETHERNET, &v4_a, &peer));

    /* RoCE: the same address family */
    tm_verbs_dev_addr_pack(buf, IBV_LINK_LAYER_ETHERNET, 0, &v4_b, 0xffff);
    ASSERT_EQ(0, tm_verbs_dev_addr_unpack(buf, &peer));
    EXPECT_TRUE(tm_verbs_peer_reachable(IBV_LINK_LAYER_ETHERNET, &v4_a, &peer));
    EXPECT_FALSE(tm_verbs_peer_reachable(IBV_LINK_LAYER_ETHERNET, &v6, &peer));
    EXPECT_FALSE(tm_verbs_peer_reachable(IBV_LINK_LAYER_INFINIBAND, &ib_a, &peer));
}

TEST(verbs_addr, is_reachable_refuses_foreign_addresses)
{
    tm_verbs_dev_t dev;
    uint8_t buf[TM_DEV_ADDR_MAX];

    memset(&dev, 0, sizeof(dev));
    dev.lib                   = &tm_verbs_libibverbs;
    dev.port_attr.link_layer  = IBV_LINK_LAYER_INFINIBAND;
    dev.gid                   = make_gid(0xfe80000000000000ull, 1);
    dev.pkey                  = TM_VERBS_PKEY_DEFAULT;  /* as opened */

    memset(buf, 0x5a, sizeof(buf));
    EXPECT_FALSE(tm_dev_is_reachable(&dev.super, buf));

    tm_dev_addr(&dev.super, buf);
    EXPECT_TRUE(tm_dev_is_reachable(&dev.super, buf)) << "itself";
}


/* ------------------------------------------------------------------------
 * Partitions (issue 36, item 9): the P_Key UCX's ib transports choose
 * (uct_ib_iface_init_pkey), and whom it reaches (uct_ib_iface_is_reachable)
 */
TEST(verbs_pkey, auto_takes_the_first_full_member)
{
    const uint16_t table[] = {0x7fff, 0x0000, 0x8000, 0xffff, 0x9234};
    uint16_t index = 99, pkey = 0;

    ASSERT_EQ(0, tm_verbs_pkey_select(table, 5, 0, &index, &pkey));
    EXPECT_EQ(3, index) << "not index 0, which is limited";
    EXPECT_EQ(0xffff, pkey);
}

TEST(verbs_pkey, auto_falls_back_to_the_first_limited_one)
{
    const uint16_t table[] = {0x0000, 0x1234, 0x0005};
    uint16_t index = 99, pkey = 0;

    ASSERT_EQ(0, tm_verbs_pkey_select(table, 3, 0, &index, &pkey));
    EXPECT_EQ(1, index);
    EXPECT_EQ(0x1234, pkey);

    const uint16_t empty[] = {0x0000, 0x8000};
    EXPECT_EQ(ENOENT, tm_verbs_pkey_select(empty, 2, 0, &index, &pkey))
            << "empty and invalid entries are skipped";
}

TEST(verbs_pkey, partition_asked_for)
{
    const uint16_t table[] = {0xffff, 0x1234, 0x9234};
    uint16_t index = 99, pkey = 0;

    ASSERT_EQ(0, tm_verbs_pkey_select(table, 3, TM_DEV_ATTR_SET | 0x1234,
                                      &index, &pkey));
    EXPECT_EQ(2, index) << "its full member, past its limited one";
    EXPECT_EQ(0x9234, pkey);
    ASSERT_EQ(0, tm_verbs_pkey_select(table, 2, TM_DEV_ATTR_SET | 0x1234,
                                      &index, &pkey));
    EXPECT_EQ(1, index);
    EXPECT_EQ(ENOENT, tm_verbs_pkey_select(table, 3,
                                           TM_DEV_ATTR_SET | 0x4321, &index,
                                           &pkey));
    EXPECT_EQ(EINVAL, tm_verbs_pkey_select(table, 3,
                                           TM_DEV_ATTR_SET | 0x8000, &index,
                                           &pkey));
}

TEST(verbs_pkey, reachable_partitions)
{
    EXPECT_TRUE(tm_verbs_pkey_reachable(0xffff, 0xffff));
    EXPECT_TRUE(tm_verbs_pkey_reachable(0xffff, 0x7fff));
    EXPECT_TRUE(tm_verbs_pkey_reachable(0x7fff, 0xffff));
    EXPECT_FALSE(tm_verbs_pkey_reachable(0x7fff, 0x7fff))
            << "two limited members";
    EXPECT_FALSE(tm_verbs_pkey_reachable(0xffff, 0x9234))
            << "other partitions";
}


/* ------------------------------------------------------------------------
 * Memory (issue 36, item 10): the send queue rdma-core's mlx5 allocates
 * (mlx5_calc_send_wqe, mlx5_calc_sq_size), hand-computed:
 *   WQE = align64(max(192 + 16 * sge, 192 + align16(4 + inline)))
 *   granted inline = WQE - 192 - 4
 *   queue = roundup_pow2(WRs * WQE)
 */
TEST(verbs_mlx5_sq, ucx_defaults)
{
    tm_verbs_mlx5_sq_t sq;

    /* 256 WRs, 2 SGEs, 64 inline: max(224, 192 + 80) = 272 -> 320 */
    ASSERT_EQ(0, tm_verbs_mlx5_sq_size(256, 2, 64, 512, &sq));
    EXPECT_EQ(320u, sq.wqe_size);
    EXPECT_EQ(124u, sq.max_inline);
    EXPECT_EQ(128u << 10, sq.bytes) << "81920 rounded up";
    /* the defaults of the device layer are these */
    EXPECT_EQ(256, TM_VERBS_DEF_SEND_WR);
    EXPECT_EQ(64, TM_VERBS_MIN_INLINE);
    EXPECT_EQ(2, TM_VERBS_MAX_SEND_SGE);
}

TEST(verbs_mlx5_sq, old_defaults_pinned_half_a_mebibyte)
{
    tm_verbs_mlx5_sq_t sq;

    /* 1024 WRs, 256 inline: 192 + align16(260) = 464 -> 512 */
    ASSERT_EQ(0, tm_verbs_mlx5_sq_size(1024, 2, 256, 512, &sq));
    EXPECT_EQ(512u, sq.wqe_size);
    EXPECT_EQ(316u, sq.max_inline);
    EXPECT_EQ(512u << 10, sq.bytes);
    /* a 4096-rank all-to-all: 2 GiB then, 512 MiB now */
    EXPECT_EQ(2ull << 30, 4096 * sq.bytes);
    ASSERT_EQ(0, tm_verbs_mlx5_sq_size(256, 2, 64, 512, &sq));
    EXPECT_EQ(512ull << 20, 4096 * sq.bytes);
}

TEST(verbs_mlx5_sq, command_qp)
{
    tm_verbs_mlx5_sq_t sq;

    /* the TM-SRQ's command QP (create_cmd_qp): max_ops WRs of 1 SGE, no
     * inline; UCX's 1024-entry list takes 2050 ops: 2050 * 256 -> 1 MiB */
    ASSERT_EQ(0, tm_verbs_mlx5_sq_size(2050, 1, 0, 512, &sq));
    EXPECT_EQ(256u, sq.wqe_size) << "208 rounded up";
    EXPECT_EQ(60u, sq.max_inline);
    EXPECT_EQ(1u << 20, sq.bytes);
}

TEST(verbs_mlx5_sq, no_send_queue_and_refusals)
{
    tm_verbs_mlx5_sq_t sq;

    ASSERT_EQ(0, tm_verbs_mlx5_sq_size(0, 0, 0, 512, &sq));
    EXPECT_EQ(0u, sq.bytes) << "the receive-only QP";
    EXPECT_EQ(0u, sq.wqe_size);
    /* 400 inline: 192 + 416 = 608 bytes, above a 512-byte descriptor */
    EXPECT_EQ(EINVAL, tm_verbs_mlx5_sq_size(16, 2, 400, 512, &sq));
    ASSERT_EQ(0, tm_verbs_mlx5_sq_size(16, 2, 400, 1024, &sq));
    EXPECT_EQ(640u, sq.wqe_size);
    EXPECT_EQ(444u, sq.max_inline);
    EXPECT_EQ(16u * 1024, sq.bytes) << "10240 rounded up";
    /* 21 gather entries: 192 + 336 = 528 */
    EXPECT_EQ(EINVAL, tm_verbs_mlx5_sq_size(16, 21, 0, 512, &sq));
}
