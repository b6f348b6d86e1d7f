/*
 * Every interleaving of small tag-matching scenarios over rc_tm, checked
 * against the MPI model (docs/explorer.md).
 *
 * Environment:
 *   RC_TM_EXPLORE_BOUNDS=large   also scenarios drawn at the bounds
 *                                (RC_TM_EXPLORE_COUNT of them, 24, from
 *                                number RC_TM_EXPLORE_FIRST, 0)
 *   RC_TM_EXPLORE_REDUCE=none    execute every schedule (no state merging)
 *   RC_TM_EXPLORE_REDUCE=validate  and check that equal states have equal
 *                                subtrees
 *   RC_TM_EXPLORE_ONLY=a,b       only scenarios whose name contains a or b
 *   RC_TM_EXPLORE_REPLAY='name:U,O,A0,P,...'
 *                                only that schedule of that scenario, traced
 */
#include "explorer.h"

#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <sstream>

using namespace rc_tm_explore;

namespace {

const uint64_t FULL = UINT64_MAX;

/* Tags as MPI libraries build them: source in the high half, tag below */
const uint64_t SRC_MASK = 0xffffffff00000000ull;   /* ANY_TAG of one source */
uint64_t tag_of(uint64_t src, uint64_t tag) { return (src << 32) | tag; }

user_op post_op(int r)   { return {user_op::POST, r}; }
user_op cancel_op(int r) { return {user_op::CANCEL, r}; }

std::vector<user_op> post_all(int n)
{
    std::vector<user_op> p;
    for (int r = 0; r < n; ++r) {
        p.push_back(post_op(r));
    }
    return p;
}

struct totals {
    uint64_t interleavings = 0, executed = 0, steps = 0;
    double   seconds       = 0;
    unsigned scenarios     = 0;
};

totals &grand_total()
{
    static totals t;
    return t;
}

/* Prints the figures of the whole run once every test is done */
class explore_report : public testing::Environment {
public:
    void TearDown() override
    {
        const totals &t = grand_total();
        if (t.scenarios == 0) {
            return;
        }
        std::cout << "[explore] total: " << t.scenarios << " scenarios, "
                  << t.interleavings << " complete interleavings covered, "
                  << t.executed << " executed, " << t.steps << " steps, "
                  << std::fixed << std::setprecision(1) << t.seconds << " s"
                  << std::endl;
    }
};

testing::Environment *const report_env =
        testing::AddGlobalTestEnvironment(new explore_report);

bool large_bounds()
{
    const char *v = getenv("RC_TM_EXPLORE_BOUNDS");
    return (v != nullptr) && (std::string(v) == "large");
}

unsigned env_unsigned(const char *name, unsigned def)
{
    const char *v = getenv(name);
    return (v != nullptr) ? (unsigned)strtoul(v, NULL, 0) : def;
}

/* Scenario number i of the large family: drawn at the bounds (three
 * messages of any kind on two connections, three receives, exact, ANY_TAG
 * or ANY_SOURCE, maybe a cancel, list of 1 or 2, maybe one list operation at
 * a time), from a seed that is i: the name is enough to replay it */
scenario drawn_scenario(unsigned i)
{
    uint64_t state = 0x9e3779b97f4a7c15ull * (i + 1);
    auto draw = [&](unsigned n) {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        return (unsigned)((state * 2685821657736338717ull) >> 33) % n;
    };
    scenario s;

    s.name      = "drawn" + std::to_string(i);
    s.list_size = 1 + draw(2);
    s.max_ops   = (draw(4) == 0) ? 1 : 256;
    for (int m = 0; m < 3; ++m) {
        int conn = (m == 0) ? 0 : draw(2);
        s.msgs.push_back({conn, tag_of(conn + 1, 1 + draw(2)),
                          (msg_kind)draw(3)});
    }
    for (int r = 0; r < 3; ++r) {
        switch (draw(4)) {
        case 0:
        case 1:
            s.recvs.push_back({tag_of(1 + draw(2), 1 + draw(2)), FULL});
            break;
        case 2:
            s.recvs.push_back({tag_of(1 + draw(2), 0), SRC_MASK});
            break;
        default:
            s.recvs.push_back({tag_of(0, 1 + draw(2)), 0xffffffffull, false});
            break;
        }
    }
    s.program = post_all(3);
    if (draw(2)) {
        int r = draw(3);
        s.program.insert(s.program.begin() + r + 1 + draw(3 - r),
                         cancel_op(r));
    }
    s.name += "_list" + std::to_string(s.list_size) +
              ((s.max_ops == 1) ? "_ops1" : "");
    return s;
}

/* RC_TM_EXPLORE_ONLY=a,b: only scenarios whose name contains a or b */
bool selected(const std::string &name)
{
    const char *v = getenv("RC_TM_EXPLORE_ONLY");
    std::istringstream is((v != nullptr) ? v : "");
    std::string part;

    if (v == nullptr) {
        return true;
    }
    while (std::getline(is, part, ',')) {
        if (!part.empty() && (name.find(part) != std::string::npos)) {
            return true;
        }
    }
    return false;
}

reduction reduce()
{
    const char *v = getenv("RC_TM_EXPLORE_REDUCE");
    std::string mode = (v == nullptr) ? "state" : v;
    return (mode == "none") ? REDUCE_NONE :
           (mode == "validate") ? REDUCE_VALIDATE : REDUCE_STATE;
}

class rc_tm_explore : public rc_tm_explorer {
protected:
    /* Explores each scenario, or replays the one RC_TM_EXPLORE_REPLAY names */
    void explore_all(const std::vector<scenario> &scenarios)
    {
        const char *replay_env = getenv("RC_TM_EXPLORE_REPLAY");

        for (const scenario &s : scenarios) {
            if (!selected(s.name)) {
                continue;
            }
            if (replay_env != nullptr) {
                replay_one(s, replay_env);
                continue;
            }

            explore_stats st = explore(s, reduce());
            print(s, st);
            totals &t = grand_total();
            t.interleavings += st.interleavings;
            t.executed      += st.executed;
            t.steps         += st.steps;
            t.seconds       += st.seconds;
            ++t.scenarios;
            if (st.failed) {
                return;
            }
            EXPECT_GT(st.interleavings, 0u);
        }
    }

    static void print(const scenario &s, const explore_stats &st)
    {
        std::cout << "[explore] " << std::left << std::setw(30) << s.name
                  << std::right << std::setw(11) << st.interleavings
                  << " interleavings, " << std::setw(7) << st.executed
                  << " executed, " << std::setw(6) << st.states
                  << " states, " << st.distinct_outcomes
                  << " outcomes, depth " << st.max_depth << ", "
                  << std::fixed << std::setprecision(2) << st.seconds
                  << " s" << std::endl;
    }

    void replay_one(const scenario &s, const std::string &spec)
    {
        size_t colon = spec.find(':');
        std::vector<action> schedule;
        std::string report;

        if ((colon == std::string::npos) || (spec.substr(0, colon) != s.name)) {
            return;
        }
        ASSERT_TRUE(parse_schedule(spec.substr(colon + 1), &schedule))
                << "bad schedule '" << spec.substr(colon + 1) << "'";
        bool ok = replay(s, schedule, &report);
        std::cout << s.describe() << "\n  schedule: "
                  << schedule_str(schedule) << "\n" << report;
        EXPECT_TRUE(ok) << "the schedule diverges";
    }
};

scenario make(const std::string &name, unsigned list,
              std::vector<msg_spec> msgs, std::vector<recv_spec> recvs,
              std::vector<user_op> program)
{
    scenario s;
    s.name      = name + "_list" + std::to_string(list);
    s.list_size = list;
    s.msgs      = msgs;
    s.recvs     = recvs;
    s.program   = program;
    return s;
}

/* Each scenario with a device list of 2 (the receives fit) and of 1 (the
 * later ones overflow into rc_tm's software list) */
std::vector<scenario> both_lists(const std::string &name,
                                 std::vector<msg_spec> msgs,
                                 std::vector<recv_spec> recvs,
                                 std::vector<user_op> program)
{
    return {make(name, 2, msgs, recvs, program),
            make(name, 1, msgs, recvs, program)};
}

} // namespace


/* The race the seed documents: m0, m1 arrive around the posting of r0, r1
 * (one connection: m0 must go to r0; two: either, by arrival order) */
TEST_F(rc_tm_explore, seed_race)
{
    const uint64_t t = tag_of(1, 7);
    std::vector<scenario> all = both_lists(
            "seed_race", {{0, t, MSG_EAGER}, {0, t, MSG_EAGER}},
            {{t, FULL}, {t, FULL}}, post_all(2));
    for (scenario &s : both_lists("seed_race_2conns",
                                  {{0, t, MSG_EAGER}, {1, t, MSG_EAGER}},
                                  {{t, FULL}, {t, FULL}}, post_all(2))) {
        all.push_back(s);
    }
    explore_all(all);
}

/* ANY_TAG-like partial masks (receive tag bits outside the mask set on
 * purpose), and a sender wildcard UCP keeps in software, which holds back
 * later overlapping receives */
TEST_F(rc_tm_explore, masks)
{
    const uint64_t a = tag_of(1, 5), b = tag_of(1, 6);
    std::vector<scenario> all = both_lists(
            "any_tag_first", {{0, a, MSG_EAGER}, {0, b, MSG_EAGER}},
            {{tag_of(1, 0xbad), SRC_MASK}, {a, FULL}}, post_all(2));
    for (scenario &s : both_lists(
            "exact_then_any_tag", {{0, b, MSG_EAGER}, {0, a, MSG_EAGER}},
            {{a, FULL}, {tag_of(1, 0), SRC_MASK}}, post_all(2))) {
        all.push_back(s);
    }
    /* ANY_SOURCE: not offloaded; the exact receive after it waits in UCP
     * until it is canceled, then r2 goes to rc_tm */
    for (scenario &s : both_lists(
            "any_source_kept_by_ucp",
            {{0, a, MSG_EAGER}, {1, tag_of(2, 5), MSG_EAGER}},
            {{tag_of(0, 5), 0xffffffffull, false}, {a, FULL}, {a, FULL}},
            {post_op(0), post_op(1), cancel_op(0), post_op(2)})) {
        all.push_back(s);
    }
    explore_all(all);
}

/* Cancels racing with arrivals: the canceled receive either reports
 * UCS_ERR_CANCELED or its message, never both, never another's */
TEST_F(rc_tm_explore, cancel)
{
    const uint64_t t = tag_of(1, 3);
    std::vector<scenario> all = both_lists(
            "cancel_first", {{0, t, MSG_EAGER}, {0, t, MSG_EAGER}},
            {{t, FULL}, {t, FULL}}, {post_op(0), post_op(1), cancel_op(0)});
    for (scenario &s : both_lists(
            "cancel_second", {{0, t, MSG_EAGER}, {1, t, MSG_EAGER}},
            {{t, FULL}, {t, FULL}, {t, FULL}},
            {post_op(0), post_op(1), cancel_op(1), post_op(2)})) {
        all.push_back(s);
    }
    explore_all(all);
}

/* Two-step matches: a rendezvous the device reads (or UCP fetches when it
 * was unexpected) and an eager message longer than the device's packet */
TEST_F(rc_tm_explore, two_step_transfers)
{
    const uint64_t t = tag_of(1, 9);
    std::vector<scenario> all = both_lists(
            "rndv_and_eager", {{0, t, MSG_RNDV}, {1, t, MSG_EAGER}},
            {{t, FULL}, {t, FULL}}, post_all(2));
    for (scenario &s : both_lists(
            "long_eager", {{0, t, MSG_EAGER_LONG}, {0, t, MSG_EAGER}},
            {{t, FULL}, {t, FULL}}, post_all(2))) {
        all.push_back(s);
    }
    for (scenario &s : both_lists(
            "rndv_cancel", {{0, t, MSG_RNDV}},
            {{t, FULL}, {t, FULL}}, {post_op(0), post_op(1), cancel_op(0)})) {
        all.push_back(s);
    }
    explore_all(all);
}

/* Limits: one list operation at a time (receives wait in rc_tm's software
 * list, DELs queue), and no software list (rc_tm refuses, UCP keeps them) */
TEST_F(rc_tm_explore, limits)
{
    const uint64_t t = tag_of(1, 4);
    std::vector<scenario> all;
    for (scenario s : both_lists("one_op", {{0, t, MSG_EAGER},
                                            {0, t, MSG_EAGER}},
                                 {{t, FULL}, {t, FULL}},
                                 {post_op(0), post_op(1), cancel_op(0)})) {
        s.name   += "_ops1";
        s.max_ops = 1;
        all.push_back(s);
    }
    scenario s = make("no_sw_list", 1, {{0, t, MSG_EAGER}, {0, t, MSG_EAGER}},
                      {{t, FULL}, {t, FULL}}, post_all(2));
    s.sw_list_size = 0;
    all.push_back(s);
    /* promotion with hysteresis: r2 stays in software while one entry is
     * free, so r3 must not take a free entry ahead of it (one receive more
     * than the bounds: with fewer the window never opens) */
    scenario hyst = make("promote_hysteresis", 2,
                         {{0, t, MSG_EAGER}, {0, t, MSG_EAGER},
                          {0, t, MSG_EAGER}},
                         {{t, FULL}, {t, FULL}, {tag_of(1, 0), SRC_MASK},
                          {t, FULL}}, post_all(4));
    hyst.promote_thresh = 2;
    all.push_back(hyst);
    explore_all(all);
}

/* The bounds: three messages on two connections, three receives */
TEST_F(rc_tm_explore, three_messages)
{
    const uint64_t a = tag_of(1, 1), b = tag_of(2, 1);
    std::vector<scenario> all = both_lists(
            "three_same_tag",
            {{0, a, MSG_EAGER}, {1, b, MSG_EAGER}, {0, a, MSG_EAGER}},
            {{a, FULL}, {tag_of(0, 1), 0xffffffffull, false}, {a, FULL}},
            post_all(3));
    for (scenario &s : both_lists(
            "three_masks",
            {{0, a, MSG_EAGER}, {1, b, MSG_RNDV}, {0, tag_of(1, 2), MSG_EAGER}},
            {{tag_of(1, 0), SRC_MASK}, {b, FULL}, {a, FULL}},
            post_all(3))) {
        all.push_back(s);
    }
    explore_all(all);
}

/* Everything at once: three messages of the three kinds on two connections,
 * three receives with the three kinds of mask, and a cancel */
TEST_F(rc_tm_explore, full_bounds)
{
    const uint64_t a = tag_of(1, 1), b = tag_of(2, 1);
    std::vector<scenario> all = both_lists(
            "mixed_cancel",
            {{0, a, MSG_RNDV}, {1, b, MSG_EAGER}, {0, a, MSG_EAGER_LONG}},
            {{tag_of(1, 0), SRC_MASK}, {a, FULL}, {b, FULL}},
            {post_op(0), post_op(1), cancel_op(0), post_op(2)});
    for (scenario &s : both_lists(
            "mixed_wildcards",
            {{0, a, MSG_EAGER}, {1, b, MSG_RNDV}, {1, b, MSG_EAGER}},
            {{b, FULL}, {tag_of(0, 1), 0xffffffffull, false}, {a, FULL}},
            {post_op(0), post_op(1), post_op(2), cancel_op(1)})) {
        all.push_back(s);
    }
    explore_all(all);
}

/* The state description is complete enough to merge states: exhaustive
 * search, checking that equal states always have equal subtrees, gives the
 * number of interleavings the cached search claims to cover */
TEST_F(rc_tm_explore, state_merging_is_exact)
{
    const uint64_t t = tag_of(1, 2);
    std::vector<scenario> all = {make("check_cancel", 1,
                                      {{0, t, MSG_RNDV}, {1, t, MSG_EAGER}},
                                      {{t, FULL}, {t, FULL}},
                                      {post_op(0), post_op(1), cancel_op(0)})};
    scenario ops1 = make("check_one_op", 1,
                         {{0, t, MSG_EAGER_LONG}, {0, t, MSG_EAGER}},
                         {{tag_of(1, 0), SRC_MASK}, {t, FULL}}, post_all(2));
    ops1.max_ops = 1;
    all.push_back(ops1);

    if (getenv("RC_TM_EXPLORE_REPLAY") != nullptr) {
        return;
    }
    for (const scenario &s : all) {
        explore_stats full = explore(s, REDUCE_VALIDATE);
        ASSERT_FALSE(full.failed);
        explore_stats merged = explore(s, REDUCE_STATE);
        ASSERT_FALSE(merged.failed);
        print(s, full);
        print(s, merged);
        EXPECT_EQ(full.interleavings, merged.interleavings) << s.name;
        EXPECT_EQ(full.executed, full.interleavings);
        EXPECT_LT(merged.executed, full.executed);
    }
}

/* RC_TM_EXPLORE_BOUNDS=large: RC_TM_EXPLORE_COUNT (24) scenarios drawn at
 * the bounds, from RC_TM_EXPLORE_FIRST (0) on */
TEST_F(rc_tm_explore, drawn_at_the_bounds)
{
    std::vector<scenario> all;

    if (!large_bounds() && (getenv("RC_TM_EXPLORE_REPLAY") == nullptr)) {
        GTEST_SKIP() << "RC_TM_EXPLORE_BOUNDS=large explores these";
    }
    unsigned first = env_unsigned("RC_TM_EXPLORE_FIRST", 0);
    unsigned count = env_unsigned("RC_TM_EXPLORE_COUNT", 24);
    if (getenv("RC_TM_EXPLORE_REPLAY") != nullptr) {
        /* the name says which: drawn<i>_... */
        std::string name = getenv("RC_TM_EXPLORE_REPLAY");
        if (name.compare(0, 5, "drawn") != 0) {
            return;
        }
        first = strtoul(name.c_str() + 5, NULL, 10);
        count = 1;
    }
    for (unsigned i = first; i < first + count; ++i) {
        all.push_back(drawn_scenario(i));
    }
    explore_all(all);
}
