/*
 * UCT's component list, as the tests that look rc_tm up in it read it.
 */
#ifndef RC_TM_TEST_UCT_COMPONENT_H_
#define RC_TM_TEST_UCT_COMPONENT_H_

#include <gtest/gtest.h>
#include <uct/api/uct.h>

#include <string>
#include <vector>

/* The component registered as name, or NULL */
inline uct_component_h find_component(const char *name)
{
    uct_component_h *components, found = NULL;
    unsigned count;

    EXPECT_EQ(UCS_OK, uct_query_components(&components, &count));
    for (unsigned i = 0; i < count; ++i) {
        uct_component_attr_t attr = {};
        attr.field_mask           = UCT_COMPONENT_ATTR_FIELD_NAME;
        EXPECT_EQ(UCS_OK, uct_component_query(components[i], &attr));
        if (std::string(attr.name) == name) {
            found = components[i];
        }
    }
    uct_release_component_list(components);
    return found;
}

/* The memory domains a component lists */
inline std::vector<std::string> md_names(uct_component_h component)
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

#endif
