/*
 * What UCP's wireup asks of a transport besides connecting (uct_v2.h):
 * whether a peer is reachable, in the scope asked (UCX 1.15 and later), and
 * whether an endpoint is connected to a given peer's endpoint (UCX 1.16 and
 * later), which UCP uses to find the lane an endpoint already has to a
 * peer.  The answers come from what the QPs were connected to.  A UCX that
 * has not the call has no test of it: its UCP never asks.
 */
#include "uct_fixture.h"
#include "../common/ucx_log_capture.h"

#include <uct/api/v2/uct_v2.h>
#include <uct/api/version.h>

#include <vector>

#define RC_TM_TEST_UCX_AT_LEAST(_minor) \
    ((UCT_VERNO_MAJOR > 1) || (UCT_VERNO_MINOR >= (_minor)))

using namespace rc_tm_test;

namespace {

/* The device address is magic, link layer, LID (2), GID (16), P_Key (2)
 * (src/dev/verbs/verbs_dev.h): another port differs in the GID's last byte */
const size_t GID_LAST_BYTE = 4 + 16 - 1;

class rc_tm_wireup : public uct_fixture {
protected:
    std::vector<char> device_address(entity &e)
    {
        std::vector<char> addr(e.attr.device_addr_len);
        EXPECT_EQ(UCS_OK, uct_iface_get_device_address(
                                  e.iface, (uct_device_addr_t*)addr.data()));
        return addr;
    }

    std::vector<char> ep_address(entity &e, size_t index)
    {
        std::vector<char> addr(e.attr.ep_addr_len);
        EXPECT_EQ(UCS_OK, uct_ep_get_address(e.eps.at(index),
                                             (uct_ep_addr_t*)addr.data()));
        return addr;
    }
};

} // namespace

#if RC_TM_TEST_UCX_AT_LEAST(15)
/* Two interfaces of one device: reachable over the network and on the very
 * device; an address of no device of ours reaches nothing, and says why */
TEST_F(rc_tm_wireup, is_reachable_honours_the_scope)
{
    open();
    std::vector<char> dev = device_address(m_receiver);
    uct_iface_is_reachable_params_t params = {};
    char info[256];

    params.field_mask  = UCT_IFACE_IS_REACHABLE_FIELD_DEVICE_ADDR |
                         UCT_IFACE_IS_REACHABLE_FIELD_SCOPE;
    params.device_addr = (const uct_device_addr_t*)dev.data();
    params.scope       = UCT_IFACE_REACHABILITY_SCOPE_NETWORK;
    EXPECT_TRUE(uct_iface_is_reachable_v2(m_sender.iface, &params));
    params.scope       = UCT_IFACE_REACHABILITY_SCOPE_DEVICE;
    EXPECT_TRUE(uct_iface_is_reachable_v2(m_sender.iface, &params));

    /* Another port of the same subnet: reachable, not this device */
    std::vector<char> other(dev);
    other.at(GID_LAST_BYTE) ^= 0x5a;    /* another port */
    params.device_addr = (const uct_device_addr_t*)other.data();
    params.field_mask |= UCT_IFACE_IS_REACHABLE_FIELD_INFO_STRING |
                         UCT_IFACE_IS_REACHABLE_FIELD_INFO_STRING_LENGTH;
    params.info_string        = info;
    params.info_string_length = sizeof(info);
    params.scope       = UCT_IFACE_REACHABILITY_SCOPE_DEVICE;
    EXPECT_FALSE(uct_iface_is_reachable_v2(m_sender.iface, &params));
    params.scope       = UCT_IFACE_REACHABILITY_SCOPE_NETWORK;
    EXPECT_TRUE(uct_iface_is_reachable_v2(m_sender.iface, &params));

    /* No device address at all */
    params.field_mask  = UCT_IFACE_IS_REACHABLE_FIELD_SCOPE;
    EXPECT_FALSE(uct_iface_is_reachable_v2(m_sender.iface, &params));
}
#endif

#if RC_TM_TEST_UCX_AT_LEAST(16)
/* An endpoint is connected to the peer's endpoint it was connected to, not
 * to another endpoint of the same peer; one not yet connected to nothing */
TEST_F(rc_tm_wireup, ep_is_connected_to_its_peer_endpoint_only)
{
    open();     /* connects the first pair */
    connect(m_sender, m_receiver);
    std::vector<char> dev   = device_address(m_receiver);
    std::vector<char> peer0 = ep_address(m_receiver, 0);
    std::vector<char> peer1 = ep_address(m_receiver, 1);
    uct_ep_is_connected_params_t params = {};

    params.field_mask  = UCT_EP_IS_CONNECTED_FIELD_DEVICE_ADDR |
                         UCT_EP_IS_CONNECTED_FIELD_EP_ADDR;
    params.device_addr = (const uct_device_addr_t*)dev.data();
    params.ep_addr     = (const uct_ep_addr_t*)peer0.data();
    EXPECT_TRUE(uct_ep_is_connected(m_sender.eps[0], &params));
    EXPECT_FALSE(uct_ep_is_connected(m_sender.eps[1], &params));
    params.ep_addr     = (const uct_ep_addr_t*)peer1.data();
    EXPECT_FALSE(uct_ep_is_connected(m_sender.eps[0], &params));
    EXPECT_TRUE(uct_ep_is_connected(m_sender.eps[1], &params));

    /* The same endpoint address on another device: not this peer */
    std::vector<char> other(dev);
    other.at(GID_LAST_BYTE) ^= 0x5a;
    params.device_addr = (const uct_device_addr_t*)other.data();
    EXPECT_FALSE(uct_ep_is_connected(m_sender.eps[1], &params));

    /* An endpoint that was never connected */
    uct_ep_params_t ep_params = {};
    uct_ep_h lone;
    ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
    ep_params.iface      = m_sender.iface;
    ASSERT_EQ(UCS_OK, uct_ep_create(&ep_params, &lone));
    params.device_addr = (const uct_device_addr_t*)dev.data();
    EXPECT_FALSE(uct_ep_is_connected(lone, &params));
    uct_ep_destroy(lone);
}

/* Without a device address an endpoint is connected to nothing, and the
 * caller is told why, as by UCX's rc (in every build) */
TEST_F(rc_tm_wireup, ep_is_connected_without_a_device_address_is_an_error)
{
    open();
    std::vector<char> peer = ep_address(m_receiver, 0);
    uct_ep_is_connected_params_t params = {};

    params.field_mask = UCT_EP_IS_CONNECTED_FIELD_EP_ADDR;
    params.ep_addr    = (const uct_ep_addr_t*)peer.data();
    ucx_log_capture log;
    EXPECT_FALSE(uct_ep_is_connected(m_sender.eps[0], &params));
    EXPECT_TRUE(log.has("device_addr must be provided")) << log.text();
    EXPECT_EQ(1u, log.count()) << log.text();
}
#endif

#if RC_TM_TEST_UCX_AT_LEAST(14)
/* UCP 1.14 and later connect through connect_to_ep_v2: the same connection
 * as connect_to_ep, data flows */
TEST_F(rc_tm_wireup, connect_to_ep_v2_connects)
{
    open();
    uct_ep_params_t ep_params = {};
    uct_ep_h ep_a, ep_b;
    ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
    ep_params.iface      = m_sender.iface;
    ASSERT_EQ(UCS_OK, uct_ep_create(&ep_params, &ep_a));
    ep_params.iface      = m_receiver.iface;
    ASSERT_EQ(UCS_OK, uct_ep_create(&ep_params, &ep_b));
    m_sender.eps.push_back(ep_a);
    m_receiver.eps.push_back(ep_b);

    std::vector<char> dev_a = device_address(m_sender);
    std::vector<char> dev_b = device_address(m_receiver);
    std::vector<char> addr_a = ep_address(m_sender, m_sender.eps.size() - 1);
    std::vector<char> addr_b = ep_address(m_receiver,
                                          m_receiver.eps.size() - 1);
    uct_ep_connect_to_ep_params_t params = {};
    ASSERT_EQ(UCS_OK, uct_ep_connect_to_ep_v2(
                              ep_a, (const uct_device_addr_t*)dev_b.data(),
                              (const uct_ep_addr_t*)addr_b.data(), &params));
    ASSERT_EQ(UCS_OK, uct_ep_connect_to_ep_v2(
                              ep_b, (const uct_device_addr_t*)dev_a.data(),
                              (const uct_ep_addr_t*)addr_a.data(), &params));

    uint64_t payload = 0x1234;
    m_receiver.am_received.clear();
    ucs_status_t status;
    ASSERT_TRUE(wait_for([&] {
        status = uct_ep_am_short(ep_a, 1, payload, nullptr, 0);
        return status != UCS_ERR_NO_RESOURCE;
    }));
    ASSERT_EQ(UCS_OK, status);
    EXPECT_TRUE(wait_for([&] { return !m_receiver.am_received.empty(); }));
}
#endif

/* UCX_RC_TM_SOFT_CONNECT_TO_SRQ=n withholds the software NIC's connections
 * to a remote SRQ (issue 36 item 1): the interface then connects endpoint
 * to endpoint only, as on mlx5 (UCT_IFACE_FLAG_CONNECT_TO_EP, no interface
 * address), so UCP must wire it up through an auxiliary transport; the
 * endpoints connected to each other carry data both ways */
TEST_F(rc_tm_wireup, withheld_connect_to_srq_connects_endpoint_to_endpoint)
{
    open({{"SOFT_CONNECT_TO_SRQ", "n"}});   /* connects the first pair */
    for (entity *e : {&m_sender, &m_receiver}) {
        EXPECT_FALSE(e->attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_IFACE);
        EXPECT_TRUE(e->attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_EP);
        EXPECT_EQ(0u, e->attr.iface_addr_len);
        EXPECT_GT(e->attr.ep_addr_len, 0u);
    }

    ucs_status_t status;
    ASSERT_TRUE(wait_for([&] {
        status = uct_ep_am_short(m_sender.eps.at(0), 1, 0x1234, nullptr, 0);
        return status != UCS_ERR_NO_RESOURCE;
    }));
    ASSERT_EQ(UCS_OK, status);
    ASSERT_TRUE(wait_for([&] {
        status = uct_ep_am_short(m_receiver.eps.at(0), 1, 0x5678, nullptr, 0);
        return status != UCS_ERR_NO_RESOURCE;
    }));
    ASSERT_EQ(UCS_OK, status);
    EXPECT_TRUE(wait_for([&] {
        return !m_receiver.am_received.empty() &&
               !m_sender.am_received.empty();
    }));
}
