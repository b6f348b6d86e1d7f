/*
 * The module registers component, memory domain and transport "rc_tm" and
 * they are usable through UCX's public API.
 */
#include <gtest/gtest.h>
#include "../common/rc_tm_config.h"
#include "uct_component.h"

#include <uct/api/uct.h>

#include <string>
#include <vector>

namespace {

class rc_tm_component : public testing::Test {
protected:
    void SetUp() override
    {
        m_component = find_component("rc_tm");
        ASSERT_NE(nullptr, m_component) << "component rc_tm not registered";
        std::vector<std::string> names = md_names(m_component);
        ASSERT_FALSE(names.empty()) << "rc_tm lists no memory domain";
        m_md_name = names.back(); /* the software device is always last */

        uct_md_config_t *config;
        ASSERT_EQ(UCS_OK, uct_md_config_read(m_component, NULL, NULL, &config));
        ASSERT_EQ(UCS_OK, uct_md_open(m_component, m_md_name.c_str(), config,
                                      &m_md));
        uct_config_release(config);
    }

    void TearDown() override
    {
        if (m_md != NULL) {
            uct_md_close(m_md);
        }
    }

    uct_component_h m_component = nullptr;
    std::string     m_md_name;
    uct_md_h        m_md        = nullptr;
};

} // namespace

TEST_F(rc_tm_component, software_device_is_listed)
{
    EXPECT_EQ("soft", m_md_name);
}

TEST_F(rc_tm_component, md_registers_memory)
{
    uct_md_attr_t attr;
    ASSERT_EQ(UCS_OK, uct_md_query(m_md, &attr));
    EXPECT_EQ(std::string("rc_tm"), attr.component_name);
    EXPECT_TRUE(attr.cap.flags & UCT_MD_FLAG_REG);
    EXPECT_GT(attr.rkey_packed_size, 0u);
}

TEST_F(rc_tm_component, transport_rc_tm_on_md)
{
    uct_tl_resource_desc_t *resources;
    unsigned count;
    ASSERT_EQ(UCS_OK, uct_md_query_tl_resources(m_md, &resources, &count));

    bool found = false;
    for (unsigned i = 0; i < count; ++i) {
        if (std::string(resources[i].tl_name) == "rc_tm") {
            /* As UCX's ib transports name a port: <device>:<port> */
            EXPECT_EQ(m_md_name + ":1", resources[i].dev_name);
            found = true;
        }
    }
    uct_release_tl_resource_list(resources);
    EXPECT_TRUE(found) << "transport rc_tm not listed on md " << m_md_name;
}

TEST_F(rc_tm_component, config_variables_have_rc_tm_prefix)
{
    uct_md_config_t *config;
    ASSERT_EQ(UCS_OK, uct_md_config_read(m_component, NULL, NULL, &config));
    char value[64];
    EXPECT_EQ(UCS_OK, uct_config_get(config, "LIST_SIZE", value,
                                     sizeof(value)));
    EXPECT_EQ(std::string("1024"), value);
    uct_config_release(config);
}

TEST_F(rc_tm_component, invalid_config_is_refused)
{
    uct_md_config_t *config;
    uct_md_h md;
    ASSERT_EQ(UCS_OK, uct_md_config_read(m_component, NULL, NULL, &config));
    ASSERT_EQ(UCS_OK, rc_tm_config_modify(config, "LIST_SIZE", "0"));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_md_open(m_component, m_md_name.c_str(), config, &md));
    EXPECT_NE(UCS_OK, rc_tm_config_modify(config, "LIST_SIZE", "many"));
    ASSERT_EQ(UCS_OK, rc_tm_config_modify(config, "LIST_SIZE", "1024"));
    for (const char *ops : {"0", "inf"}) {
        ASSERT_EQ(UCS_OK, rc_tm_config_modify(config, "LIST_MAX_OPS", ops));
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_md_open(m_component, m_md_name.c_str(), config, &md))
                << "LIST_MAX_OPS=" << ops;
    }
    ASSERT_EQ(UCS_OK, rc_tm_config_modify(config, "LIST_MAX_OPS", "auto"));
    for (const char *sge : {"0", "3"}) {
        ASSERT_EQ(UCS_OK, rc_tm_config_modify(config, "SOFT_TM_MAX_SGE", sge));
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_md_open(m_component, m_md_name.c_str(), config, &md))
                << "SOFT_TM_MAX_SGE=" << sge;
    }
    ASSERT_EQ(UCS_OK, rc_tm_config_modify(config, "SOFT_TM_MAX_SGE", "1"));
    /* a figure UCX would take for a measurement */
    ASSERT_EQ(UCS_OK, rc_tm_config_modify(config, "SOFT_BW", "auto"));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_md_open(m_component, m_md_name.c_str(), config, &md));
    uct_config_release(config);
}

/* A mlx5 TM-SRQ needs 33 untagged buffers (rdma-core's tests): fewer, or
 * more than a verbs SRQ can be asked for, is a configuration error at md
 * open; 33 and 'auto' work */
TEST_F(rc_tm_component, srq_of_fewer_than_33_buffers_is_refused)
{
    uct_md_config_t *config;
    uct_md_h md;
    ASSERT_EQ(UCS_OK, uct_md_config_read(m_component, NULL, NULL, &config));
    for (const char *depth : {"32", "inf", "4294967296"}) {
        ASSERT_EQ(UCS_OK, rc_tm_config_modify(config, "SRQ_DEPTH", depth));
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_md_open(m_component, m_md_name.c_str(), config, &md))
                << "SRQ_DEPTH=" << depth;
    }
    for (const char *depth : {"33", "auto"}) {
        ASSERT_EQ(UCS_OK, rc_tm_config_modify(config, "SRQ_DEPTH", depth));
        ASSERT_EQ(UCS_OK, uct_md_open(m_component, m_md_name.c_str(), config,
                                      &md))
                << "SRQ_DEPTH=" << depth;
        uct_md_close(md);
    }
    uct_config_release(config);
}

TEST_F(rc_tm_component, foreign_rkey_is_refused)
{
    uint64_t foreign[2] = {0x1234567812345678ull, 0};
    uct_rkey_bundle_t bundle;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rkey_unpack(m_component, foreign, &bundle));
}

TEST_F(rc_tm_component, rkey_pack_unpack)
{
    std::vector<char> buffer(4096);
    uct_mem_h memh;
    ASSERT_EQ(UCS_OK, uct_md_mem_reg(m_md, buffer.data(), buffer.size(),
                                     UCT_MD_MEM_ACCESS_ALL, &memh));

    uct_md_attr_t attr;
    ASSERT_EQ(UCS_OK, uct_md_query(m_md, &attr));
    std::vector<char> packed(attr.rkey_packed_size);
    ASSERT_EQ(UCS_OK, uct_md_mkey_pack(m_md, memh, packed.data()));

    uct_rkey_bundle_t bundle;
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(m_component, packed.data(), &bundle));
    EXPECT_EQ(UCS_OK, uct_rkey_release(m_component, &bundle));
    EXPECT_EQ(UCS_OK, uct_md_mem_dereg(m_md, memh));
}
