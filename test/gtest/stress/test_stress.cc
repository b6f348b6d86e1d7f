/*
 * Randomized stress of UCP over rc_tm between two processes, every outcome
 * compared with a reference model of MPI matching (docs/testing.md).
 *
 *   RC_TM_STRESS_SEED=<n>      rerun one traffic script (printed at start
 *                              and on failure)
 *   RC_TM_STRESS_MESSAGES=<n>  messages of the main run (default 1000000)
 */
#include "mpi_model.h"
#include "ucp_stress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <random>

using namespace rc_tm_test;

namespace {

uint64_t env_count(const char *name, uint64_t def)
{
    const char *env = getenv(name);
    return ((env != nullptr) && (*env != '\0')) ? strtoull(env, nullptr, 0) :
                                                   def;
}

/* MPI matching event by event: a posted receive takes the oldest
 * unexpected message it accepts; an arriving message goes to the oldest
 * posted receive that accepts it */
std::vector<int64_t> simulate(const std::vector<uint8_t> &msgs,
                              const std::vector<std::pair<unsigned,
                                                          unsigned>> &recvs,
                              const std::vector<bool> &post_first)
{
    std::vector<int64_t> got(recvs.size(), -1);
    std::vector<size_t> posted, unexpected;
    size_t r = 0, m = 0;

    for (bool is_post : post_first) {
        if (is_post) {
            auto it = std::find_if(unexpected.begin(), unexpected.end(),
                                   [&](size_t j) {
                return mpi_model::accepts(recvs[r].first, recvs[r].second,
                                          msgs[j]);
            });
            if (it != unexpected.end()) {
                got[r] = *it;
                unexpected.erase(it);
            } else {
                posted.push_back(r);
            }
            ++r;
        } else {
            auto it = std::find_if(posted.begin(), posted.end(),
                                   [&](size_t i) {
                return mpi_model::accepts(recvs[i].first, recvs[i].second,
                                          msgs[m]);
            });
            if (it != posted.end()) {
                got[*it] = m;
                posted.erase(it);
            } else {
                unexpected.push_back(m);
            }
            ++m;
        }
    }
    return got;
}

void print_figures(const stress_config &config, const stress_result &r)
{
    printf("[stress] seed %" PRIu64 ": %" PRIu64 " messages (%.1f MB) in "
           "%.2f s, %.0f messages/s, %" PRIu64 " divergences\n", config.seed,
           r.messages, r.bytes / 1e6, r.seconds,
           r.seconds > 0 ? r.messages / r.seconds : 0.0, r.divergences);
    printf("[stress] cancels %" PRIu64 " (canceled %" PRIu64 ", lost to a "
           "message %" PRIu64 "), receives below UCX_TM_THRESH %" PRIu64
           ", drained %" PRIu64 ", never matched %" PRIu64 "\n", r.cancels,
           r.cancels_won, r.cancels - r.cancels_won, r.small_recvs, r.drained,
           r.never_matched);
    for (unsigned p = 0; p < 2; ++p) {
        printf("[stress] process %u rc_tm counters:", p);
        for (unsigned i = 0; i < C_LAST; ++i) {
            printf(" %s=%" PRIu64, stress_counter_name(i), r.counters[p][i]);
        }
        printf("\n");
    }
    fflush(stdout);
}

void check(const stress_config &config, const stress_result &r)
{
    EXPECT_TRUE(r.completed);
    EXPECT_EQ(0u, r.divergences);
    EXPECT_EQ(0u, r.log_errors);
    EXPECT_EQ(config.messages, r.messages);
    for (const std::string &text : r.reports) {
        ADD_FAILURE() << text;
    }
    if (testing::Test::HasFailure()) {
        printf("[stress] reproduce with RC_TM_STRESS_SEED=%" PRIu64 "\n",
               config.seed);
    }
}

/* Every path of the matching protocol was taken, in both processes */
void check_paths(const stress_result &r)
{
    for (unsigned p = 0; p < 2; ++p) {
        const uint64_t *c = r.counters[p];
        EXPECT_GT(c[C_RX_EXP] + c[C_RX_RNDV_EXP], 0u)
                << "process " << p << ": nothing matched in the device";
        EXPECT_GT(c[C_RX_SW_MATCH], 0u)
                << "process " << p << ": nothing matched in software";
        EXPECT_GT(c[C_RX_EAGER_UNEXP], 0u)
                << "process " << p << ": no unexpected eager message";
        EXPECT_GT(c[C_RX_RNDV_UNEXP], 0u)
                << "process " << p << ": no unexpected rendezvous";
        EXPECT_GT(c[C_TX_RNDV], 0u)
                << "process " << p << ": no rendezvous sent";
        EXPECT_GT(c[C_POST_SW], 0u)
                << "process " << p << ": the software list was not used";
        EXPECT_GT(c[C_LIST_DEL], 0u)
                << "process " << p << ": no receive canceled in the device";
    }
}

} // namespace

/* The model against every interleaving: random scripts, random orders of
 * posts and arrivals */
TEST(mpi_model, agrees_with_every_interleaving)
{
    std::mt19937_64 rng(7);
    const unsigned ignores[] = {0x0, 0x1, 0x2, 0x3, 0x4, 0x7, 0xc, 0xf};

    for (int trial = 0; trial < 3000; ++trial) {
        std::vector<uint8_t> msgs(rng() % 9);
        std::vector<std::pair<unsigned, unsigned>> recvs(rng() % 9);
        for (auto &m : msgs) {
            m = rng() % 4 + (rng() % 2) * 4; /* few values: many conflicts */
        }
        for (auto &r : recvs) {
            r = {rng() % 8, ignores[rng() % 8]};
        }

        mpi_model model(msgs);
        std::vector<int64_t> expected;
        for (const auto &r : recvs) {
            expected.push_back(model.match(r.first, r.second));
        }

        std::vector<bool> order(recvs.size(), true);
        order.resize(recvs.size() + msgs.size(), false);
        for (int k = 0; k < 20; ++k) {
            std::shuffle(order.begin(), order.end(), rng);
            ASSERT_EQ(expected, simulate(msgs, recvs, order))
                    << "trial " << trial;
        }
    }
}

/* One stress run of messages_divisor-th of RC_TM_STRESS_MESSAGES (default
 * a million) with the rc_tm settings in env, checked against the model */
static stress_result
run_checked(const std::vector<std::pair<std::string, std::string>> &env,
            uint64_t messages_divisor)
{
    stress_config config;
    config.seed     = stress_seed();
    config.messages = env_count("RC_TM_STRESS_MESSAGES", 1000000) /
                      messages_divisor;
    config.timeout  = env_count("RC_TM_STRESS_TIMEOUT", 300);
    config.env      = env;
    printf("[stress] seed %" PRIu64 " (RC_TM_STRESS_SEED), %" PRIu64
           " messages\n", config.seed, config.messages);
    fflush(stdout);

    stress_result r = run_ucp_stress(config);
    print_figures(config, r);
    check(config, r);
    return r;
}

/* The main run: a small device list (software overflow list in use), the
 * soft device taking its events in a random order */
TEST(rc_tm_stress, ucp_two_processes_against_mpi_model)
{
    stress_result r = run_checked({{"UCX_RC_TM_LIST_SIZE", "8"}}, 1);
    check_paths(r);
}

/* Resources at their smallest: 33 untagged SRQ buffers, the fewest mlx5
 * takes (floods wait for the receiver, RNR), one list operation in flight
 * (the rest queue), a device list of 2 */
TEST(rc_tm_stress, tiny_srq_and_list_operations)
{
    run_checked({{"UCX_RC_TM_LIST_SIZE", "2"},
                 {"UCX_RC_TM_LIST_MAX_OPS", "1"},
                 {"UCX_RC_TM_SRQ_DEPTH", "33"}}, 10);
}

/* List operations without the count: the device comes back in phase only
 * through SYNC requests answered by software */
TEST(rc_tm_stress, sync_on_request_only)
{
    run_checked({{"UCX_RC_TM_LIST_SIZE", "8"},
                 {"UCX_RC_TM_TM_SYNC_ALWAYS", "n"}}, 10);
}
