/*
 * Which devices rc_tm lists and how it names them (issue 36, item 13), and
 * fork safety (item 12), through UCT's public API:
 *  - a NIC's network device is "<device>:<port>", as UCX's ib transports
 *    name it; the md keeps the device's name;
 *  - the software NIC is listed where no tag-matching NIC is, or always or
 *    never as UCX_RC_TM_SOFT says;
 *  - ibv_fork_init() is called as UCX's ib md calls it (UCX_RC_TM_FORK_INIT),
 *    before any device is brought up, so that UCX's own later call succeeds.
 * The fork tests run in a process of their own (a death test, re-executed),
 * since fork init is possible only before the first device in a process.
 */
#include <gtest/gtest.h>
#include "../common/rc_tm_config.h"
#include "uct_component.h"
#include "../common/scoped_env.h"

#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>
#include <infiniband/verbs.h>
#include <softnic/softnic.h>
#include <dev/tm_dev.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

/* The module's pure helpers (rc_tm_md.c) */
extern "C" {
unsigned uct_rc_tm_select_devices(tm_dev_info_t *devices, unsigned count,
                                  ucs_ternary_auto_value_t soft);
void uct_rc_tm_dev_net_name(const char *name, unsigned port_num, char *buf,
                            size_t max);
}

namespace {

ucs_status_t open_md(uct_component_h component, const char *name,
                     const char *fork_init, uct_md_h *md_p)
{
    uct_md_config_t *config;
    ucs_status_t status;

    status = uct_md_config_read(component, NULL, NULL, &config);
    if (status != UCS_OK) {
        return status;
    }
    if (fork_init != NULL) {
        status = rc_tm_config_modify(config, "FORK_INIT", fork_init);
    }
    if (status == UCS_OK) {
        status = uct_md_open(component, name, config, md_p);
    }
    uct_config_release(config);
    return status;
}

tm_dev_info_t dev_info(const char *name, bool soft)
{
    tm_dev_info_t info;

    memset(&info, 0, sizeof(info));
    snprintf(info.name, sizeof(info.name), "%s", name);
    info.soft = soft;
    return info;
}

std::string selected(std::vector<tm_dev_info_t> devices,
                     ucs_ternary_auto_value_t soft)
{
    unsigned count = uct_rc_tm_select_devices(devices.data(), devices.size(),
                                              soft);
    std::string names;

    for (unsigned i = 0; i < count; ++i) {
        names += (i ? "," : "") + std::string(devices[i].name);
    }
    return names;
}

} // namespace


/* ------------------------------------------------------------------------
 * Names (item 13)
 */
TEST(rc_tm_devices, nic_port_is_named_as_ucx_names_it)
{
    char name[64];

    uct_rc_tm_dev_net_name("mlx5_0", 1, name, sizeof(name));
    EXPECT_STREQ("mlx5_0:1", name);
    uct_rc_tm_dev_net_name("mlx5_3", 2, name, sizeof(name));
    EXPECT_STREQ("mlx5_3:2", name);
}

TEST(rc_tm_devices, iface_opens_on_the_name_ucx_gives_only)
{
    uct_component_h component = find_component("rc_tm");
    ASSERT_NE(nullptr, component);
    uct_md_h md;
    ASSERT_EQ(UCS_OK, open_md(component, "soft", NULL, &md));

    uct_tl_resource_desc_t *resources;
    unsigned count;
    ASSERT_EQ(UCS_OK, uct_md_query_tl_resources(md, &resources, &count));
    ASSERT_EQ(1u, count);
    EXPECT_STREQ("rc_tm", resources[0].tl_name);
    EXPECT_STREQ("soft:1", resources[0].dev_name);
    EXPECT_EQ(UCT_DEVICE_TYPE_NET, resources[0].dev_type);
    uct_release_tl_resource_list(resources);

    ucs_async_context_t *async;
    uct_worker_h worker;
    ASSERT_EQ(UCS_OK, ucs_async_context_create(UCS_ASYNC_MODE_POLL, &async));
    ASSERT_EQ(UCS_OK, uct_worker_create(async, UCS_THREAD_MODE_SINGLE,
                                        &worker));
    uct_iface_config_t *config;
    ASSERT_EQ(UCS_OK, uct_md_iface_config_read(md, "rc_tm", NULL, NULL,
                                               &config));
    for (const char *dev_name : {"soft", "soft:2"}) {
        uct_iface_params_t params   = {};
        uct_iface_h iface;
        params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                      UCT_IFACE_PARAM_FIELD_DEVICE;
        params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
        params.mode.device.tl_name  = "rc_tm";
        params.mode.device.dev_name = dev_name;
        EXPECT_EQ(UCS_ERR_NO_DEVICE,
                  uct_iface_open(md, worker, &params, config, &iface))
                << dev_name;
    }
    uct_config_release(config);
    uct_worker_destroy(worker);
    ucs_async_context_destroy(async);
    uct_md_close(md);
}

/* ------------------------------------------------------------------------
 * The software NIC stays out of the way (item 13)
 */
TEST(rc_tm_devices, software_nic_only_where_no_nic_is_by_default)
{
    const tm_dev_info_t nic0 = dev_info("mlx5_0", false);
    const tm_dev_info_t nic1 = dev_info("mlx5_1", false);
    const tm_dev_info_t soft = dev_info("soft", true);

    EXPECT_EQ("mlx5_0,mlx5_1", selected({nic0, nic1, soft}, UCS_AUTO));
    EXPECT_EQ("soft", selected({soft}, UCS_AUTO));
    EXPECT_EQ("mlx5_0,soft", selected({nic0, soft}, UCS_YES));
    EXPECT_EQ("soft", selected({soft}, UCS_YES));
    EXPECT_EQ("mlx5_0", selected({nic0, soft}, UCS_NO));
    EXPECT_EQ("", selected({soft}, UCS_NO));
    EXPECT_EQ("", selected({}, UCS_AUTO));
}

TEST(rc_tm_devices, soft_setting_lists_or_withholds_the_software_nic)
{
    uct_component_h component = find_component("rc_tm");
    ASSERT_NE(nullptr, component);

    /* No NIC here: the software NIC is listed by default */
    EXPECT_EQ(std::vector<std::string>{"soft"}, md_names(component));
    {
        scoped_env env("UCX_RC_TM_SOFT", "y");
        EXPECT_EQ(std::vector<std::string>{"soft"}, md_names(component));
    }
    {
        scoped_env env("UCX_RC_TM_SOFT", "n");
        EXPECT_TRUE(md_names(component).empty());

        /* Nor can it be opened by its name */
        uct_md_h md;
        EXPECT_EQ(UCS_ERR_NO_DEVICE, open_md(component, "soft", NULL, &md));
    }
}

/* ------------------------------------------------------------------------
 * Fork (item 12)
 */
class rc_tm_fork_DeathTest : public testing::Test {
protected:
    void SetUp() override
    {
        /* A fresh process: this binary run again for this test alone */
        testing::FLAGS_gtest_death_test_style = "threadsafe";
    }
};

/* Exit codes of the child: 0 or the first check that failed */
static void fork_init_by_default_child()
{
    uct_component_h component = find_component("rc_tm");
    uct_md_h md;
    void *buf;
    uct_mem_h memh;

    if ((component == NULL) || md_names(component).empty()) {
        exit(2);
    }
    if (softnic_is_fork_initialized() != IBV_FORK_ENABLED) {
        exit(3);    /* listing brings the software NIC up: too late after */
    }
    if (open_md(component, "soft", NULL, &md) != UCS_OK) {
        exit(4);
    }
    if (ibv_is_fork_initialized() == IBV_FORK_DISABLED) {
        exit(5);
    }
    buf = malloc(4096);
    if (uct_md_mem_reg(md, buf, 4096, UCT_MD_MEM_ACCESS_ALL, &memh) !=
        UCS_OK) {
        exit(6);
    }
    /* UCX's ib md, opened now, calls it again: that succeeds */
    if ((ibv_fork_init() != 0) || (softnic_fork_init() != 0)) {
        exit(7);
    }
    uct_md_mem_dereg(md, memh);
    uct_md_close(md);
    free(buf);
    exit(0);
}

TEST_F(rc_tm_fork_DeathTest, listing_calls_fork_init_before_any_device)
{
    EXPECT_EXIT(fork_init_by_default_child(), testing::ExitedWithCode(0),
                "");
}

static void fork_init_too_late_child()
{
    uct_component_h component = find_component("rc_tm");
    uct_md_h md, md_try, md_yes;

    if (component == NULL) {
        exit(2);
    }
    /* Without fork init, the device is brought up first */
    if (open_md(component, "soft", "n", &md) != UCS_OK) {
        exit(3);
    }
    if (softnic_is_fork_initialized() != IBV_FORK_DISABLED) {
        exit(4);
    }
    /* try: the failure is only logged, as UCX's ib md does */
    if (open_md(component, "soft", "try", &md_try) != UCS_OK) {
        exit(5);
    }
    uct_md_close(md_try);
    /* y: the md does not open */
    if (open_md(component, "soft", "y", &md_yes) != UCS_ERR_IO_ERROR) {
        exit(6);
    }
    uct_md_close(md);
    exit(0);
}

TEST_F(rc_tm_fork_DeathTest, fork_init_yes_fails_when_too_late)
{
    EXPECT_EXIT(fork_init_too_late_child(), testing::ExitedWithCode(0), "");
}
