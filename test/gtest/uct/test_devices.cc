/*
 * Which devices rc_tm lists and how it names them (issue 36, item 13),
 * through UCT's public API:
 *  - a NIC's network device is "<device>:<port>", as UCX's ib transports
 *    name it; the md keeps the device's name;
 *  - the software NIC is listed where no tag-matching NIC is, or always or
 *    never as UCX_RC_TM_SOFT says.
 */
#include <gtest/gtest.h>
#include "../common/rc_tm_config.h"

#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>
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

uct_component_h rc_tm_component()
{
    uct_component_h *components, found = NULL;
    unsigned count;

    EXPECT_EQ(UCS_OK, uct_query_components(&components, &count));
    for (unsigned i = 0; i < count; ++i) {
        uct_component_attr_t attr = {};
        attr.field_mask           = UCT_COMPONENT_ATTR_FIELD_NAME;
        EXPECT_EQ(UCS_OK, uct_component_query(components[i], &attr));
        if (!strcmp(attr.name, "rc_tm")) {
            found = components[i];
        }
    }
    uct_release_component_list(components);
    return found;
}

std::vector<std::string> md_names(uct_component_h component)
{
    uct_component_attr_t attr = {};
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    EXPECT_EQ(UCS_OK, uct_component_query(component, &attr));

    std::vector<uct_md_resource_desc_t> rsc(attr.md_resource_count);
    attr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = rsc.data();
    EXPECT_EQ(UCS_OK, uct_component_query(component, &attr));

    std::vector<std::string> names;
    for (const auto &r : rsc) {
        names.push_back(r.md_name);
    }
    return names;
}

/* Sets an environment variable for the life of the object */
class scoped_env {
public:
    scoped_env(const char *name, const char *value) : m_name(name)
    {
        const char *old = getenv(name);
        m_had = (old != NULL);
        if (m_had) {
            m_old = old;
        }
        setenv(name, value, 1);
    }

    ~scoped_env()
    {
        if (m_had) {
            setenv(m_name.c_str(), m_old.c_str(), 1);
        } else {
            unsetenv(m_name.c_str());
        }
    }

private:
    std::string m_name, m_old;
    bool        m_had;
};

ucs_status_t open_md(uct_component_h component, const char *name,
                     uct_md_h *md_p)
{
    uct_md_config_t *config;
    ucs_status_t status;

    status = uct_md_config_read(component, NULL, NULL, &config);
    if (status != UCS_OK) {
        return status;
    }
    status = uct_md_open(component, name, config, md_p);
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
    uct_component_h component = rc_tm_component();
    ASSERT_NE(nullptr, component);
    uct_md_h md;
    ASSERT_EQ(UCS_OK, open_md(component, "soft", &md));

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
    uct_component_h component = rc_tm_component();
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
        EXPECT_EQ(UCS_ERR_NO_DEVICE, open_md(component, "soft", &md));
    }
}

