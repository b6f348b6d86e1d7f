/*
 * Randomized tag traffic through UCP over rc_tm between two processes,
 * every receive's outcome compared with the reference model of MPI
 * matching (mpi_model.h).  docs/testing.md explains the design.
 */
#ifndef RC_TM_TEST_STRESS_UCP_STRESS_H_
#define RC_TM_TEST_STRESS_UCP_STRESS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace rc_tm_test {

/* rc_tm's counters (rc_tm_iface.h uct_rc_tm_stat_t) */
enum stress_counter {
    C_RX_EXP, C_RX_EAGER_UNEXP, C_RX_RNDV_EXP, C_RX_RNDV_UNEXP,
    C_RX_RNDV_INCOMPLETE, C_RX_RNDV_REQ_EXP, C_RX_RNDV_REQ_UNEXP, C_LIST_ADD,
    C_LIST_DEL, C_LIST_SYNC, C_LIST_DEL_RACE, C_LIST_FULL, C_TX_RNDV,
    C_POST_DEVICE, C_POST_SW, C_RX_SW_MATCH, C_SW_WON, C_PROMOTE, C_SW_FULL,
    C_LIST_BOUNCE, C_LIST_SPILL, C_RX_TRUNCATED, C_RX_SW_MATCH_RNDV,
    C_RX_SW_MATCH_RNDV_REQ,
    C_CANCEL, C_RCACHE_HIT, C_RCACHE_MISS,
    C_LAST
};

struct stress_config {
    uint64_t    seed            = 1;
    uint64_t    messages        = 1000000; /* all flows, both directions */
    unsigned    workers         = 2;       /* UCP workers per process */
    unsigned    cancel_permille = 30;      /* receives with a cancel */
    unsigned    recv_window     = 256;     /* receives per flow and round */
    unsigned    send_ahead      = 256;     /* how far senders may run ahead */
    bool        random_order    = true;    /* soft device: random event order */
    double      timeout         = 600;     /* seconds: a hang, not a wait */
    /* UCX_* variables set in both processes (e.g. a small device list) */
    std::vector<std::pair<std::string, std::string>> env;
};

struct stress_result {
    uint64_t    messages       = 0;  /* received and checked */
    uint64_t    bytes          = 0;
    uint64_t    divergences    = 0;  /* outcomes the model disagrees with */
    uint64_t    cancels        = 0;  /* cancel requests */
    uint64_t    cancels_won    = 0;  /* ... that canceled the receive */
    uint64_t    small_recvs    = 0;  /* receives below UCX_TM_THRESH */
    uint64_t    drained        = 0;  /* messages left to wildcard drains */
    uint64_t    never_matched  = 0;  /* receives canceled at the end */
    uint64_t    log_errors     = 0;  /* error messages UCX logged */
    double      seconds        = 0;  /* traffic, slower process */
    uint64_t    counters[2][C_LAST] = {};  /* rc_tm counters per process */
    std::vector<std::string> reports; /* first divergences, failures */
    bool        completed      = false;    /* both processes finished */
};

stress_result run_ucp_stress(const stress_config &config);

/* RC_TM_STRESS_SEED if set, else a fresh seed */
uint64_t stress_seed();

const char *stress_counter_name(unsigned index);

} // namespace rc_tm_test

#endif
