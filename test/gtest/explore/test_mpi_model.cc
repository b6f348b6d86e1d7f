/*
 * The reference model of MPI matching, and the search for an order of
 * events that explains an outcome.
 */
#include "mpi_model.h"

#include <gtest/gtest.h>

#include <stdexcept>

using namespace rc_tm_explore;

namespace {

const uint64_t FULL = UINT64_MAX;
const int NONE      = mpi_model::NONE;

/* ANY_TAG-like: the high half (the source) must match, any low half */
const uint64_t SRC_MASK = 0xffffffff00000000ull;

timed_event post(int r, int t)         { return {timed_event::POST, r, t, t}; }
timed_event arrive(int m, int lo, int hi) { return {timed_event::ARRIVE, m, lo, hi}; }
timed_event cancel(int r, int lo, int hi) { return {timed_event::CANCEL, r, lo, hi}; }

outcome make_outcome(std::vector<int> recv_msg, std::vector<bool> canceled,
                     size_t nmsgs)
{
    outcome o;
    o.recv_msg      = recv_msg;
    o.recv_canceled = canceled;
    o.msg_recv.assign(nmsgs, NONE);
    for (size_t r = 0; r < recv_msg.size(); ++r) {
        if (recv_msg[r] != NONE) {
            o.msg_recv[recv_msg[r]] = r;
        }
    }
    return o;
}

} // namespace

TEST(mpi_model, first_posted_matching_receive_wins)
{
    mpi_model m({{0, 0}, {7, FULL}}, {{0, 7}, {0, 7}});
    EXPECT_EQ(NONE, m.post(0));       /* any tag */
    EXPECT_EQ(NONE, m.post(1));
    EXPECT_EQ(0, m.arrive(0));
    EXPECT_EQ(1, m.arrive(1));
    EXPECT_EQ(mpi_model::MATCHED, m.state(0));
    EXPECT_TRUE(m.posted().empty());
}

TEST(mpi_model, first_arrived_matching_message_wins)
{
    mpi_model m({{5, FULL}, {0, 0}}, {{0, 4}, {1, 5}, {0, 5}});
    EXPECT_EQ(NONE, m.arrive(0));
    EXPECT_EQ(NONE, m.arrive(1));
    EXPECT_EQ(NONE, m.arrive(2));
    EXPECT_EQ(1, m.post(0));          /* first tag-5 message: m1, not m2 */
    EXPECT_EQ(0, m.post(1));          /* any tag: the oldest, m0 */
    EXPECT_EQ(std::list<int>({2}), m.unexpected());
}

TEST(mpi_model, masks_compare_only_masked_bits)
{
    const uint64_t src1 = 1ull << 32, src2 = 2ull << 32;
    /* receive tag bits outside its mask do not matter */
    mpi_model m({{src1 | 0xdead, SRC_MASK}}, {{0, src2 | 3}, {0, src1 | 9}});
    EXPECT_EQ(NONE, m.post(0));
    EXPECT_EQ(NONE, m.arrive(0));
    EXPECT_EQ(0, m.arrive(1));
    EXPECT_TRUE(tag_matches(0xff0f, 0x000f, 0x00ff));
    EXPECT_FALSE(tag_matches(0xff0f, 0x000e, 0x00ff));
}

TEST(mpi_model, messages_of_a_connection_do_not_overtake)
{
    mpi_model m({}, {{0, 1}, {1, 1}, {0, 1}});
    EXPECT_THROW(m.arrive(2), std::logic_error);
    EXPECT_EQ(NONE, m.arrive(1));     /* another connection: free */
    EXPECT_EQ(NONE, m.arrive(0));
    EXPECT_EQ(NONE, m.arrive(2));
    EXPECT_THROW(m.arrive(2), std::logic_error);
}

TEST(mpi_model, cancel_only_while_posted)
{
    mpi_model m({{1, FULL}, {1, FULL}}, {{0, 1}});
    EXPECT_FALSE(m.cancel(0));        /* not posted yet */
    m.post(0);
    m.post(1);
    EXPECT_TRUE(m.cancel(0));
    EXPECT_EQ(mpi_model::CANCELED, m.state(0));
    EXPECT_EQ(1, m.arrive(0));        /* the canceled one is gone */
    EXPECT_FALSE(m.cancel(1));        /* already has its message */
    EXPECT_EQ(mpi_model::MATCHED, m.state(1));
    EXPECT_THROW(m.post(0), std::logic_error);
}

/* The seed race: m1, m2 of one connection, b1, b2 posted around them.
 * Whatever the timing, m1 goes to b1: the crossed pairing is never allowed. */
TEST(mpi_model, seed_race_crossing_is_never_explained)
{
    std::vector<model_recv> recvs = {{3, FULL}, {3, FULL}};
    std::vector<model_msg> msgs   = {{0, 3}, {0, 3}};
    outcome straight = make_outcome({0, 1}, {false, false}, 2);
    outcome crossed  = make_outcome({1, 0}, {false, false}, 2);

    /* windows as wide as possible */
    std::vector<timed_event> ev = {post(0, 5), post(1, 10), arrive(0, 0, 20),
                                   arrive(1, 0, 20)};
    std::vector<timed_event> order;
    EXPECT_TRUE(find_linearization(recvs, msgs, ev, straight, &order));
    EXPECT_EQ(4u, order.size());
    EXPECT_FALSE(find_linearization(recvs, msgs, ev, crossed, nullptr));

    /* on two connections both orders are possible, if the windows allow */
    std::vector<model_msg> two = {{0, 3}, {1, 3}};
    EXPECT_TRUE(find_linearization(recvs, two, ev, crossed, nullptr));
    std::vector<timed_event> m0_first = {post(0, 5), post(1, 10),
                                         arrive(0, 0, 6), arrive(1, 7, 20)};
    EXPECT_FALSE(find_linearization(recvs, two, m0_first, crossed, nullptr));
    EXPECT_TRUE(find_linearization(recvs, two, m0_first, straight, nullptr));
}

TEST(mpi_model, windows_bound_what_is_explained)
{
    std::vector<model_recv> recvs = {{3, FULL}};
    std::vector<model_msg> msgs   = {{0, 3}};
    outcome matched    = make_outcome({0}, {false}, 1);
    outcome unexpected = make_outcome({NONE}, {false}, 1);

    /* arrived and settled before the receive was posted: the receive takes
     * it from the unexpected queue; arriving after, it matches the posted
     * receive: both give the pair */
    EXPECT_TRUE(find_linearization(recvs, msgs, {arrive(0, 1, 2), post(0, 3)},
                                   matched, nullptr));
    EXPECT_TRUE(find_linearization(recvs, msgs, {post(0, 1), arrive(0, 2, 3)},
                                   matched, nullptr));
    /* a message left unexpected with a matching receive posted is never
     * right */
    EXPECT_FALSE(find_linearization(recvs, msgs, {post(0, 1), arrive(0, 2, 3)},
                                    unexpected, nullptr));
    EXPECT_FALSE(find_linearization(recvs, msgs, {arrive(0, 1, 2), post(0, 3)},
                                    unexpected, nullptr));
}

TEST(mpi_model, cancel_may_win_or_lose_inside_its_window)
{
    std::vector<model_recv> recvs = {{3, FULL}};
    std::vector<model_msg> msgs   = {{0, 3}};
    outcome won      = make_outcome({0}, {false}, 1);
    outcome canceled = make_outcome({NONE}, {true}, 1);

    /* the message may take effect before or after the cancel */
    EXPECT_TRUE(find_linearization(recvs, msgs,
                                   {post(0, 1), cancel(0, 2, 6),
                                    arrive(0, 3, 5)}, canceled, nullptr));
    EXPECT_TRUE(find_linearization(recvs, msgs,
                                   {post(0, 1), arrive(0, 3, 5)}, won,
                                   nullptr));
    /* canceled, but the message had settled before the cancel was asked */
    EXPECT_FALSE(find_linearization(recvs, msgs,
                                    {post(0, 1), arrive(0, 2, 3),
                                     cancel(0, 4, 6)}, canceled, nullptr));
}

TEST(mpi_model, outcome_of_an_order)
{
    std::vector<model_recv> recvs = {{0, 0}, {2, FULL}};
    std::vector<model_msg> msgs   = {{0, 1}, {1, 2}};
    outcome o = model_outcome(recvs, msgs, {arrive(1, 0, 0), post(0, 1),
                                            post(1, 2), arrive(0, 3, 3)});
    EXPECT_EQ(std::vector<int>({1, NONE}), o.recv_msg);
    EXPECT_EQ(std::vector<int>({NONE, 0}), o.msg_recv);
    EXPECT_EQ("r0=m1 r1=- unexpected: m0", to_string(o));
}
