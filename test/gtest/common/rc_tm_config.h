/*
 * What tests see differently from one UCX release to another.
 *
 * Setting rc_tm's configuration: uct_config_modify() takes the variable's
 * name without UCX_ and, from UCX 1.18, with the transport's prefix
 * (RC_TM_LIST_SIZE); earlier UCX take it without (LIST_SIZE).
 */
#ifndef RC_TM_TEST_CONFIG_H_
#define RC_TM_TEST_CONFIG_H_

#include <uct/api/uct.h>
#include <uct/api/version.h>

#include <cstdlib>
#include <string>

/* UCX_TLS of the UCP-level tests: rc_tm alone, or what RC_TM_TEST_TLS
 * names (rc_tm and an auxiliary transport for wireup, e.g. rc_tm,tcp, where
 * UCX_RC_TM_SOFT_CONNECT_TO_SRQ=n makes rc_tm connect endpoint to endpoint
 * only, as on a NIC) */
static inline const char *rc_tm_test_tls()
{
    const char *tls = getenv("RC_TM_TEST_TLS");

    return ((tls != NULL) && (*tls != '\0')) ? tls : "rc_tm";
}

/* Sets UCX_RC_TM_<name> in a config read with uct_md_config_read() or
 * uct_md_iface_config_read() for rc_tm */
static inline ucs_status_t rc_tm_config_modify(void *config,
                                               const std::string &name,
                                               const std::string &value)
{
#if (UCT_VERNO_MAJOR > 1) || (UCT_VERNO_MINOR >= 18)
    const std::string full_name = "RC_TM_" + name;
#else
    const std::string &full_name = name;
#endif
    return uct_config_modify(config, full_name.c_str(), value.c_str());
}

/* UCP 1.16 and later keep an md's registrations in their own cache
 * (md attribute cache_mem_types): a buffer registered again through UCP
 * does not reach the md */
#define RC_TM_UCP_CACHES_REGISTRATIONS \
    ((UCT_VERNO_MAJOR > 1) || (UCT_VERNO_MINOR >= 16))

/* UCP 1.21 and later also match a network device by its name before the
 * ':' in UCX_NET_DEVICES ("mlx5_0" selects "mlx5_0:1", ucp_context.c
 * ucp_is_resource_in_device_list); earlier UCP match the whole name only */
#define RC_TM_UCP_NET_DEVICES_BASENAME \
    ((UCT_VERNO_MAJOR > 1) || (UCT_VERNO_MINOR >= 21))

#endif
