/*
 * A NIC port's performance figures (pure): what UCX's ib transports report
 * for the same port.  Data rates are the InfiniBand specification's: a lane
 * of QDR carries 8 Gb/s of data (10 Gb/s, 8b/10b), of EDR 25 Gb/s
 * (25.78125 Gb/s, 64b/66b), of HDR 50; a port has 1, 2, 4, 8 or 12 lanes.
 * Each packet's headers take their share of the wire.  The latency is
 * UCX's figure for the generation, 200 ns more over Ethernet.
 */
#include <gtest/gtest.h>

#include "dev/tm_dev.h"
#include "dev/verbs/verbs_dev.h"

namespace {

/* active_width and active_speed as ibv_query_port reports them */
enum { WIDTH_1X = 1, WIDTH_4X = 2, WIDTH_12X = 8 };
enum { SPEED_SDR = 1, SPEED_QDR = 4, SPEED_EDR = 32, SPEED_HDR = 64 };

/* Bytes of headers around an InfiniBand packet's payload: LRH, BTH, ICRC,
 * VCRC */
const double IB_HEADERS = 8 + 12 + 4 + 2;

tm_dev_perf_t port_perf(uint8_t width, uint8_t speed, enum ibv_mtu mtu,
                        uint8_t link_layer = IBV_LINK_LAYER_INFINIBAND)
{
    struct ibv_port_attr port = {};
    tm_dev_perf_t perf;

    port.active_width = width;
    port.active_speed = speed;
    port.active_mtu   = mtu;
    port.link_layer   = link_layer;
    tm_verbs_port_perf(&port, &perf);
    return perf;
}

double payload_share(double mtu, double headers)
{
    return mtu / (mtu + headers);
}

} // namespace

TEST(verbs_perf, edr_4x_carries_100_gbps_less_headers)
{
    tm_dev_perf_t perf = port_perf(WIDTH_4X, SPEED_EDR, IBV_MTU_4096);

    EXPECT_NEAR(100e9 / 8 * payload_share(4096, IB_HEADERS), perf.bandwidth,
                1e6);
    EXPECT_DOUBLE_EQ(600e-9, perf.latency);
    EXPECT_FALSE(perf.per_process) << "a port is shared by the host";
}

TEST(verbs_perf, rate_follows_lanes_speed_and_mtu)
{
    EXPECT_NEAR(200e9 / 8 * payload_share(4096, IB_HEADERS),
                port_perf(WIDTH_4X, SPEED_HDR, IBV_MTU_4096).bandwidth, 1e6);
    EXPECT_NEAR(3 * 100e9 / 8 * payload_share(4096, IB_HEADERS),
                port_perf(WIDTH_12X, SPEED_EDR, IBV_MTU_4096).bandwidth, 1e6);
    EXPECT_NEAR(32e9 / 8 * payload_share(2048, IB_HEADERS),
                port_perf(WIDTH_4X, SPEED_QDR, IBV_MTU_2048).bandwidth, 1e6);
    /* a smaller MTU pays the headers more often */
    EXPECT_LT(port_perf(WIDTH_4X, SPEED_EDR, IBV_MTU_1024).bandwidth,
              port_perf(WIDTH_4X, SPEED_EDR, IBV_MTU_4096).bandwidth);
}

TEST(verbs_perf, older_links_are_slower)
{
    tm_dev_perf_t sdr = port_perf(WIDTH_1X, SPEED_SDR, IBV_MTU_2048);
    tm_dev_perf_t qdr = port_perf(WIDTH_4X, SPEED_QDR, IBV_MTU_2048);

    EXPECT_NEAR(2e9 / 8 * payload_share(2048, IB_HEADERS), sdr.bandwidth, 1e6);
    EXPECT_DOUBLE_EQ(5000e-9, sdr.latency);
    EXPECT_DOUBLE_EQ(1300e-9, qdr.latency);
}

TEST(verbs_perf, roce_adds_latency_and_headers)
{
    tm_dev_perf_t ib   = port_perf(WIDTH_4X, SPEED_EDR, IBV_MTU_4096);
    tm_dev_perf_t roce = port_perf(WIDTH_4X, SPEED_EDR, IBV_MTU_4096,
                                   IBV_LINK_LAYER_ETHERNET);

    EXPECT_DOUBLE_EQ(ib.latency + 200e-9, roce.latency);
    EXPECT_LT(roce.bandwidth, ib.bandwidth);
    EXPECT_GT(roce.bandwidth, 0.95 * ib.bandwidth);
}

/* A port reporting what this build does not know is taken at the least,
 * as UCX does: never a zero or infinite figure */
TEST(verbs_perf, unknown_speed_or_width_is_the_least)
{
    tm_dev_perf_t sdr     = port_perf(WIDTH_1X, SPEED_SDR, IBV_MTU_4096);
    tm_dev_perf_t unknown = port_perf(0, 0, (enum ibv_mtu)0);

    EXPECT_GT(unknown.bandwidth, 0);
    EXPECT_LE(unknown.bandwidth, sdr.bandwidth);
    EXPECT_DOUBLE_EQ(sdr.latency, unknown.latency);
}

TEST(verbs_perf, a_nic_charges_doorbell_and_descriptor_fetch)
{
    tm_dev_perf_t perf = port_perf(WIDTH_4X, SPEED_EDR, IBV_MTU_4096);

    EXPECT_GT(perf.post, 0);
    EXPECT_GT(perf.doorbell, 0);
    EXPECT_GT(perf.wqe_fetch, 0);
}
