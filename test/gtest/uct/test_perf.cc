/*
 * The performance figures rc_tm gives UCX, which picks lanes and protocols
 * by them (uct.h: uct_iface_attr_t's latency, bandwidth and overhead;
 * uct_v2.h: uct_iface_estimate_perf, asked per operation).  The software
 * NIC reports the figures it is configured with (UCX_RC_TM_SOFT_LATENCY,
 * UCX_RC_TM_SOFT_BW); its bandwidth is each process's own, as that of
 * UCX's shared-memory transports, and it has no PCI: no doorbell, no
 * descriptor fetch.  Its RDMA reads and writes are copies by the CPU
 * (process_vm_readv/writev, as UCX's cma): they cost the initiator's CPU,
 * and a rendezvous the receiver's; a long one is copied by both sides, at
 * twice one CPU's rate.  A NIC's figures come from its port
 * (test_verbs_perf).
 */
#include "uct_fixture.h"

#include <uct/api/v2/uct_v2.h>

using namespace rc_tm_test;

namespace {

const double MIB = 1024.0 * 1024.0;   /* UCX's "MBs" */

class rc_tm_perf : public uct_fixture {
protected:
    void open_with(const char *latency, const char *bandwidth)
    {
        open({{"SOFT_LATENCY", latency}, {"SOFT_BW", bandwidth}});
    }

    static bool is_rdma(uct_ep_operation_t op)
    {
        return (op == UCT_EP_OP_PUT_SHORT) || (op == UCT_EP_OP_PUT_ZCOPY) ||
               (op == UCT_EP_OP_GET_ZCOPY);
    }

    uct_perf_attr_t estimate(uct_ep_operation_t op)
    {
        uct_perf_attr_t perf = {};

        perf.field_mask = UCT_PERF_ATTR_FIELD_OPERATION |
                          UCT_PERF_ATTR_FIELD_SEND_PRE_OVERHEAD |
                          UCT_PERF_ATTR_FIELD_SEND_POST_OVERHEAD |
                          UCT_PERF_ATTR_FIELD_RECV_OVERHEAD |
                          UCT_PERF_ATTR_FIELD_BANDWIDTH |
                          UCT_PERF_ATTR_FIELD_LATENCY |
                          UCT_PERF_ATTR_FIELD_MAX_INFLIGHT_EPS;
        perf.operation  = op;
        EXPECT_EQ(UCS_OK, uct_iface_estimate_perf(m_sender.iface, &perf));
        return perf;
    }
};

} // namespace

TEST_F(rc_tm_perf, iface_reports_the_configured_figures)
{
    open_with("300ns", "5000MBs");
    const uct_iface_attr_t &attr = m_sender.attr;

    EXPECT_DOUBLE_EQ(300e-9, attr.latency.c);
    EXPECT_DOUBLE_EQ(0, attr.latency.m);
    EXPECT_DOUBLE_EQ(5000.0 * MIB, attr.bandwidth.dedicated);
    EXPECT_DOUBLE_EQ(0, attr.bandwidth.shared);
    EXPECT_GT(attr.overhead, 0);
    EXPECT_LT(attr.overhead, 1e-6);
}

TEST_F(rc_tm_perf, other_figures_are_reported_as_set)
{
    open_with("1us", "20000MBs");

    EXPECT_DOUBLE_EQ(1e-6, m_sender.attr.latency.c);
    EXPECT_DOUBLE_EQ(20000.0 * MIB, m_sender.attr.bandwidth.dedicated);
}

TEST_F(rc_tm_perf, every_operation_is_estimated_from_the_device_figures)
{
    open_with("300ns", "5000MBs");
    const uct_iface_attr_t &attr = m_sender.attr;

    for (uct_ep_operation_t op : {UCT_EP_OP_AM_SHORT, UCT_EP_OP_AM_BCOPY,
                                  UCT_EP_OP_AM_ZCOPY, UCT_EP_OP_PUT_SHORT,
                                  UCT_EP_OP_PUT_ZCOPY, UCT_EP_OP_GET_ZCOPY,
                                  UCT_EP_OP_EAGER_SHORT,
                                  UCT_EP_OP_EAGER_BCOPY,
                                  UCT_EP_OP_EAGER_ZCOPY,
                                  UCT_EP_OP_RNDV_ZCOPY}) {
        uct_perf_attr_t perf = estimate(op);

        /* a long read or write is copied by both sides' CPUs */
        bool rdma = is_rdma(op) || (op == UCT_EP_OP_RNDV_ZCOPY);
        EXPECT_DOUBLE_EQ((rdma ? 2 : 1) * attr.bandwidth.dedicated,
                         perf.bandwidth.dedicated) << "op " << op;
        EXPECT_DOUBLE_EQ(0, perf.bandwidth.shared);
        EXPECT_DOUBLE_EQ(300e-9, perf.latency.c)
                << "op " << op << ": no descriptor fetch in software";
        if (is_rdma(op)) {
            EXPECT_GT(perf.send_pre_overhead, attr.overhead) << "op " << op;
        } else {
            EXPECT_DOUBLE_EQ(attr.overhead, perf.send_pre_overhead)
                    << "op " << op;
        }
        if (op == UCT_EP_OP_RNDV_ZCOPY) {
            EXPECT_GT(perf.recv_overhead, attr.overhead)
                    << "the receiver's device reads a rendezvous";
        } else {
            EXPECT_DOUBLE_EQ(attr.overhead, perf.recv_overhead)
                    << "op " << op;
        }
        EXPECT_DOUBLE_EQ(0, perf.send_post_overhead)
                << "op " << op << ": no doorbell over PCI in software";
        EXPECT_GT(perf.max_inflight_eps, 0u);
    }
}
