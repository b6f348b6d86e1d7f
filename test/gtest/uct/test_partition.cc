/*
 * Connection setup at the UCT level (issue 36, items 9, 10, 15): the
 * partition an interface uses (UCX_RC_TM_PKEY, as UCX_IB_PKEY) and whom it
 * reaches, the service level (UCX_RC_TM_SL, as UCX_IB_SL), the inline
 * size of UCX's send queue, and the connections' timeout and retry count.
 * The software NIC's P_Key table is set with SOFTNIC_PKEY_TABLE, read when
 * a device is opened.
 */
#include "uct_fixture.h"
#include "../common/rc_tm_config.h"

#include <cstring>
#include <stdlib.h>

using namespace rc_tm_test;

namespace {

class rc_tm_partition : public uct_fixture {
protected:
    void TearDown() override {
        if (m_other.iface != nullptr) {
            uct_iface_close(m_other.iface);
        }
        if (m_other.worker != nullptr) {
            uct_worker_destroy(m_other.worker);
        }
        if (m_other_md != nullptr) {
            uct_md_close(m_other_md);
        }
        uct_fixture::TearDown();
        unsetenv("SOFTNIC_PKEY_TABLE");
    }

    /* The fixture's two interfaces, on a port whose table is table */
    void open_on(const char *table, const config_t &md_config = {}) {
        setenv("SOFTNIC_PKEY_TABLE", table, 1);
        open(md_config);
    }

    /* md_config on a port whose table is table: the md's open status */
    ucs_status_t md_open_on(const char *table, const config_t &md_config,
                            uct_md_h *md_p) {
        uct_md_config_t *config;
        ucs_status_t status;

        setenv("SOFTNIC_PKEY_TABLE", table, 1);
        EXPECT_EQ(UCS_OK, uct_md_config_read(m_component, NULL, NULL,
                                             &config));
        for (const auto &kv : md_config) {
            EXPECT_EQ(UCS_OK, rc_tm_config_modify(config, kv.first,
                                                  kv.second));
        }
        status = uct_md_open(m_component, "soft", config, md_p);
        uct_config_release(config);
        return status;
    }

    /* A third interface, on another device whose table is table: its
     * device address */
    std::vector<char> other_device(const char *table) {
        std::vector<char> addr;
        uct_md_h md = m_md;

        EXPECT_EQ(UCS_OK, md_open_on(table, {}, &m_other_md));
        m_md = m_other_md;      /* open_iface opens on the fixture's md */
        EXPECT_EQ(UCS_OK, open_iface(m_other, {}, UCT_IFACE_FEATURE_AM));
        m_md = md;
        addr.resize(m_other.attr.device_addr_len);
        EXPECT_EQ(UCS_OK, uct_iface_get_device_address(
                                  m_other.iface,
                                  (uct_device_addr_t*)addr.data()));
        return addr;
    }

    bool reaches(uct_iface_h iface, std::vector<char> &dev) {
        return uct_iface_is_reachable(iface, (uct_device_addr_t*)dev.data(),
                                      NULL);
    }

    /* An active message from sender to receiver arrives */
    void am_arrives() {
        uint64_t header = 0x5a5a;

        ASSERT_EQ(UCS_OK, uct_ep_am_short(m_sender.eps.at(0), 5, header,
                                          NULL, 0));
        EXPECT_TRUE(wait_for([&] {
            return !m_receiver.am_received.empty();
        }, 5.0)) << "the connection carries nothing";
        EXPECT_TRUE(m_sender.ep_errors.empty());
    }

    entity    m_other;
    uct_md_h  m_other_md = nullptr;
};

} // namespace

/* Index 0 holds a limited key, as some fabrics configure it: the
 * interfaces take the full member at index 1, as UCX does, and connect */
TEST_F(rc_tm_partition, limited_index_0_connects)
{
    open_on("0x7fff,0xffff");
    am_arrives();
}

/* As UCX's is_reachable: the same partition, and one full member at least */
TEST_F(rc_tm_partition, other_partition_does_not_reach)
{
    open_on("0xffff");
    std::vector<char> other = other_device("0x9234");
    EXPECT_FALSE(reaches(m_sender.iface, other));
}

TEST_F(rc_tm_partition, full_member_reaches_limited_one)
{
    open_on("0xffff");
    std::vector<char> other = other_device("0x7fff");
    EXPECT_TRUE(reaches(m_sender.iface, other));
}

/* Two limited members: neither reaches the other */
TEST_F(rc_tm_partition, two_limited_members_do_not_reach)
{
    /* one interface here: the fixture's pair would not connect */
    ASSERT_EQ(UCS_OK, md_open_on("0x7fff", {}, &m_md));
    ASSERT_EQ(UCS_OK, open_iface(m_sender, {}, UCT_IFACE_FEATURE_AM));
    std::vector<char> other = other_device("0x7fff");
    EXPECT_FALSE(reaches(m_sender.iface, other));
    std::vector<char> self(m_sender.attr.device_addr_len);
    ASSERT_EQ(UCS_OK, uct_iface_get_device_address(
                              m_sender.iface, (uct_device_addr_t*)self.data()));
    EXPECT_FALSE(reaches(m_other.iface, self));
}

/* UCX_RC_TM_PKEY names a partition: its full member, wherever it is; a
 * partition the port lacks, or a value beyond 15 bits, opens nothing */
TEST_F(rc_tm_partition, pkey_config)
{
    uct_md_h md;

    EXPECT_EQ(UCS_ERR_NO_ELEM, md_open_on("0xffff", {{"PKEY", "0x1234"}},
                                          &md));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, md_open_on("0xffff",
                                                {{"PKEY", "0x8000"}}, &md));
    open_on("0xffff,0x1234,0x9234", {{"PKEY", "0x1234"}});
    am_arrives();
    std::vector<char> other = other_device("0xffff");
    EXPECT_FALSE(reaches(m_sender.iface, other))
            << "0x9234 is not the default partition";
}

/* UCX_RC_TM_SL: auto or 0..15, as UCX_IB_SL */
TEST_F(rc_tm_partition, sl_config)
{
    uct_md_h md;

    EXPECT_EQ(UCS_ERR_INVALID_PARAM, md_open_on("0xffff", {{"SL", "16"}},
                                                &md));
    open_on("0xffff", {{"SL", "5"}});
    am_arrives();
}

/* UCX_RC_TM_TIMEOUT and RETRY_COUNT, as UCX_RC_TIMEOUT and
 * UCX_RC_RETRY_COUNT: a time the QP's 5-bit exponent can say (4.096 us *
 * 2^1..2^31) and 0..7 retries; else the md does not open */
TEST_F(rc_tm_partition, timeout_and_retry_count_config)
{
    uct_md_h md;

    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              md_open_on("0xffff", {{"TIMEOUT", "0s"}}, &md));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              md_open_on("0xffff", {{"TIMEOUT", "10000s"}}, &md));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              md_open_on("0xffff", {{"RETRY_COUNT", "8"}}, &md));
    open_on("0xffff", {{"TIMEOUT", "10ms"}, {"RETRY_COUNT", "0"}});
    am_arrives();
}

/* UCX's send queue (TX_MIN_INLINE 64) on mlx5's sizing: 124 bytes inline */
TEST_F(rc_tm_partition, inline_is_what_ucx_queue_gets)
{
    open_on("0xffff", {{"TX_MIN_INLINE", "64"}});
    EXPECT_EQ(124u, m_sender.attr.cap.put.max_short);
}

/* By default the software NIC is asked for all the inline data it
 * grants, a full 1 KiB mlx5 WQE's: there an inline send saves a copy */
TEST_F(rc_tm_partition, soft_nic_inline_is_a_full_wqe)
{
    open_on("0xffff");
    EXPECT_EQ(828u, m_sender.attr.cap.put.max_short);
}

/* More than the device can carry inline: the md does not open */
TEST_F(rc_tm_partition, inline_beyond_the_device_fails_md_open)
{
    uct_md_h md;

    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              md_open_on("0xffff", {{"TX_MIN_INLINE", "829"}}, &md));
}
