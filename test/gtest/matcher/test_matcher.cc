/*
 * Tests of the software tag matcher (src/matcher/tag_matcher.h): targeted
 * cases, and randomized sequences compared with a reference model that keeps
 * every entry in one list in posting order and scans it.
 */

#include <matcher/tag_matcher.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <list>
#include <memory>
#include <random>
#include <set>
#include <vector>

namespace {

/* Open MPI's pml ucx layout: user tag | source rank | communicator id */
const uint64_t TAG_SHIFT  = 40;
const uint64_t SRC_SHIFT  = 20;
const uint64_t FIELD_MASK = 0xfffff;
const uint64_t MASK_FULL  = TM_MATCHER_MASK_FULL;
const uint64_t ANY_TAG    = (1ull << TAG_SHIFT) - 1;
const uint64_t ANY_SOURCE = ~(FIELD_MASK << SRC_SHIFT);
const uint64_t ANY_BOTH   = FIELD_MASK;

uint64_t make_tag(uint64_t tag, uint64_t src, uint64_t ctx)
{
    return (tag << TAG_SHIFT) | (src << SRC_SHIFT) | ctx;
}

class matcher : public testing::Test {
protected:
    void SetUp() override
    {
        ASSERT_EQ(0, tm_matcher_init(&m, NULL));
    }

    void TearDown() override
    {
        tm_matcher_cleanup(&m);
    }

    void post(tm_matcher_entry_t *e, uint64_t tag, uint64_t mask)
    {
        ASSERT_EQ(0, tm_matcher_post(&m, e, tag, mask, e));
    }

    /* Entries in posting order, by iteration */
    std::vector<tm_matcher_entry_t*> entries()
    {
        std::vector<tm_matcher_entry_t*> v;
        tm_matcher_entry_t *e, *tmp;

        tm_matcher_for_each(&m, e, tmp) {
            v.push_back(e);
        }
        return v;
    }

    tm_matcher_t m;
};

TEST_F(matcher, empty)
{
    EXPECT_EQ(0u, tm_matcher_count(&m));
    EXPECT_EQ(NULL, tm_matcher_first(&m));
    EXPECT_EQ(NULL, tm_matcher_match(&m, 0));
    EXPECT_EQ(NULL, tm_matcher_peek(&m, 1));
    EXPECT_EQ(NULL, tm_matcher_search(&m, 1, MASK_FULL, 1));
    EXPECT_EQ(NULL, tm_matcher_search(&m, 1, ANY_TAG, 1));
}

TEST_F(matcher, exact)
{
    tm_matcher_entry_t e[3];

    post(&e[0], make_tag(1, 2, 3), MASK_FULL);
    post(&e[1], make_tag(4, 5, 6), MASK_FULL);
    post(&e[2], make_tag(7, 8, 9), MASK_FULL);
    EXPECT_EQ(3u, tm_matcher_count(&m));
    EXPECT_EQ(&e[0], e[0].arg);
    EXPECT_LT(e[0].seq, e[1].seq);
    EXPECT_LT(e[1].seq, e[2].seq);

    EXPECT_EQ(NULL, tm_matcher_match(&m, make_tag(1, 2, 4)));
    EXPECT_EQ(&e[1], tm_matcher_match(&m, make_tag(4, 5, 6)));
    EXPECT_EQ(NULL, tm_matcher_match(&m, make_tag(4, 5, 6)));
    EXPECT_EQ(&e[2], tm_matcher_match(&m, make_tag(7, 8, 9)));
    EXPECT_EQ(&e[0], tm_matcher_match(&m, make_tag(1, 2, 3)));
    EXPECT_EQ(0u, tm_matcher_count(&m));
}

TEST_F(matcher, tag_is_masked_at_post)
{
    tm_matcher_entry_t e;

    post(&e, make_tag(77, 2, 3), ANY_TAG);
    EXPECT_EQ(make_tag(0, 2, 3), e.tag);
    EXPECT_EQ(ANY_TAG, e.mask);
    EXPECT_EQ(NULL, tm_matcher_peek(&m, make_tag(5, 1, 3)));
    EXPECT_EQ(&e, tm_matcher_match(&m, make_tag(5, 2, 3)));
}

TEST_F(matcher, earliest_posted_wins_across_groups)
{
    tm_matcher_entry_t any_tag, exact, any_src, any_both, later_any_tag;
    uint64_t tag = make_tag(9, 4, 1);

    post(&any_tag, make_tag(0, 4, 1), ANY_TAG);
    post(&exact, tag, MASK_FULL);
    post(&any_src, make_tag(9, 0, 1), ANY_SOURCE);
    post(&any_both, make_tag(0, 0, 1), ANY_BOTH);
    post(&later_any_tag, make_tag(0, 4, 1), ANY_TAG);

    EXPECT_EQ(&any_tag, tm_matcher_match(&m, tag));
    EXPECT_EQ(&exact, tm_matcher_match(&m, tag));
    EXPECT_EQ(&any_src, tm_matcher_match(&m, tag));
    EXPECT_EQ(&any_both, tm_matcher_match(&m, tag));
    EXPECT_EQ(&later_any_tag, tm_matcher_match(&m, tag));
    EXPECT_EQ(NULL, tm_matcher_match(&m, tag));

    /* The other way round: the exact one first */
    post(&exact, tag, MASK_FULL);
    post(&any_both, make_tag(0, 0, 1), ANY_BOTH);
    post(&any_tag, make_tag(0, 4, 1), ANY_TAG);
    EXPECT_EQ(&exact, tm_matcher_match(&m, tag));
    /* A message only the wildcards match */
    EXPECT_EQ(&any_both, tm_matcher_match(&m, make_tag(1, 4, 1)));
    EXPECT_EQ(&any_tag, tm_matcher_match(&m, make_tag(1, 4, 1)));
    EXPECT_EQ(0u, tm_matcher_count(&m));
}

TEST_F(matcher, fifo_within_key)
{
    const int n = 100;
    tm_matcher_entry_t e[n];
    uint64_t tag = make_tag(3, 3, 3);

    for (int i = 0; i < n; ++i) {
        post(&e[i], tag, MASK_FULL);
    }
    for (int i = 0; i < n; ++i) {
        ASSERT_EQ(&e[i], tm_matcher_match(&m, tag)) << i;
        ASSERT_EQ(size_t(n - i - 1), tm_matcher_count(&m));
    }
}

TEST_F(matcher, cancel)
{
    tm_matcher_entry_t e[6];
    uint64_t tag = make_tag(1, 1, 1);

    for (int i = 0; i < 6; ++i) {
        post(&e[i], tag, MASK_FULL);
    }

    tm_matcher_remove(&m, &e[2]); /* in the middle */
    tm_matcher_remove(&m, &e[0]); /* the first */
    tm_matcher_remove(&m, &e[5]); /* the last */
    EXPECT_EQ(3u, tm_matcher_count(&m));
    EXPECT_EQ((std::vector<tm_matcher_entry_t*>{&e[1], &e[3], &e[4]}),
              entries());

    /* Appending after removing the last one */
    post(&e[5], tag, MASK_FULL);
    EXPECT_EQ(&e[1], tm_matcher_match(&m, tag));
    EXPECT_EQ(&e[3], tm_matcher_match(&m, tag));
    tm_matcher_remove(&m, &e[4]);
    EXPECT_EQ(&e[5], tm_matcher_match(&m, tag));
    EXPECT_EQ(NULL, tm_matcher_match(&m, tag));

    /* The only one, and a wildcard */
    post(&e[0], tag, ANY_TAG);
    tm_matcher_remove(&m, &e[0]);
    EXPECT_EQ(NULL, tm_matcher_match(&m, tag));
    EXPECT_EQ(0u, tm_matcher_count(&m));
    EXPECT_EQ(NULL, tm_matcher_first(&m));
}

TEST_F(matcher, peek_does_not_remove)
{
    tm_matcher_entry_t wild, exact;
    uint64_t tag = make_tag(2, 2, 2);

    post(&wild, tag, ANY_SOURCE);
    post(&exact, tag, MASK_FULL);

    EXPECT_EQ(&wild, tm_matcher_peek(&m, tag));
    EXPECT_EQ(&wild, tm_matcher_peek(&m, tag));
    EXPECT_EQ(2u, tm_matcher_count(&m));
    EXPECT_EQ(&wild, tm_matcher_match(&m, tag));
    EXPECT_EQ(&exact, tm_matcher_peek(&m, tag));
    EXPECT_EQ(&exact, tm_matcher_match(&m, tag));
    EXPECT_EQ(NULL, tm_matcher_peek(&m, tag));
}

TEST_F(matcher, iteration_order_and_promotion)
{
    const int n = 40;
    tm_matcher_entry_t e[n], *it, *tmp;
    const uint64_t masks[] = {MASK_FULL, ANY_TAG, ANY_SOURCE, ANY_BOTH};
    std::vector<tm_matcher_entry_t*> expected;

    for (int i = 0; i < n; ++i) {
        post(&e[i], make_tag(i % 3, i % 5, 1), masks[i % 4]);
        expected.push_back(&e[i]);
    }
    EXPECT_EQ(expected, entries());

    /* Promote the 10 oldest: remove them while iterating */
    int promoted = 0;
    tm_matcher_for_each(&m, it, tmp) {
        if (promoted == 10) {
            break;
        }
        EXPECT_EQ(&e[promoted], it);
        tm_matcher_remove(&m, it);
        ++promoted;
    }
    expected.erase(expected.begin(), expected.begin() + 10);
    EXPECT_EQ(expected, entries());
    EXPECT_EQ(size_t(n - 10), tm_matcher_count(&m));
}

TEST_F(matcher, shared_sequence_counter)
{
    uint64_t seq = 1000;
    tm_matcher_t m2;
    tm_matcher_entry_t a, b, c;

    ASSERT_EQ(0, tm_matcher_init(&m2, &seq));
    ASSERT_EQ(0, tm_matcher_post(&m2, &a, 1, MASK_FULL, NULL));
    EXPECT_EQ(1000u, a.seq);
    seq += 10; /* taken by entries elsewhere (the device) */
    ASSERT_EQ(0, tm_matcher_post(&m2, &b, 1, MASK_FULL, NULL));
    EXPECT_EQ(1011u, b.seq);
    EXPECT_EQ(1012u, seq);

    /* An entry back from the device keeps its place on the timeline */
    ASSERT_EQ(0, tm_matcher_post_seq(&m2, &c, 1, ANY_TAG, NULL, 1005));
    EXPECT_EQ(1012u, seq);
    EXPECT_EQ(&a, tm_matcher_first(&m2));
    EXPECT_EQ(&c, tm_matcher_next(&m2, &a));
    EXPECT_EQ(&b, tm_matcher_next(&m2, &c));
    EXPECT_EQ(&a, tm_matcher_match(&m2, 1));
    EXPECT_EQ(&c, tm_matcher_match(&m2, 1));
    EXPECT_EQ(&b, tm_matcher_match(&m2, 1));
    tm_matcher_cleanup(&m2);
}

TEST_F(matcher, post_seq_in_order_within_key)
{
    tm_matcher_entry_t e[5];
    const uint64_t seqs[] = {20, 40, 10, 30, 50};
    uint64_t tag = make_tag(1, 2, 3);

    for (int i = 0; i < 5; ++i) {
        ASSERT_EQ(0, tm_matcher_post_seq(&m, &e[i], tag, MASK_FULL, NULL,
                                         seqs[i]));
    }
    EXPECT_EQ((std::vector<tm_matcher_entry_t*>{&e[2], &e[0], &e[3], &e[1],
                                                &e[4]}),
              entries());
    tm_matcher_remove(&m, &e[4]); /* the last, after reordering */
    EXPECT_EQ(&e[2], tm_matcher_match(&m, tag));
    EXPECT_EQ(&e[0], tm_matcher_match(&m, tag));
    EXPECT_EQ(&e[3], tm_matcher_match(&m, tag));
    EXPECT_EQ(&e[1], tm_matcher_match(&m, tag));
    EXPECT_EQ(NULL, tm_matcher_match(&m, tag));
}

TEST_F(matcher, unexpected_queue_search)
{
    tm_matcher_entry_t msg[4];

    /* Arriving messages, with their full tags */
    post(&msg[0], make_tag(5, 1, 1), MASK_FULL);
    post(&msg[1], make_tag(6, 2, 1), MASK_FULL);
    post(&msg[2], make_tag(5, 1, 1), MASK_FULL);
    post(&msg[3], make_tag(7, 2, 1), MASK_FULL);

    /* Probe, then receives */
    EXPECT_EQ(&msg[1], tm_matcher_search(&m, make_tag(0, 2, 1), ANY_TAG, 0));
    EXPECT_EQ(4u, tm_matcher_count(&m));
    EXPECT_EQ(&msg[0], tm_matcher_search(&m, make_tag(5, 1, 1), MASK_FULL, 1));
    EXPECT_EQ(&msg[1], tm_matcher_search(&m, make_tag(0, 2, 1), ANY_TAG, 1));
    EXPECT_EQ(NULL, tm_matcher_search(&m, make_tag(6, 2, 1), MASK_FULL, 1));
    EXPECT_EQ(&msg[3], tm_matcher_search(&m, make_tag(7, 0, 1), ANY_SOURCE, 1));
    EXPECT_EQ(&msg[2], tm_matcher_search(&m, make_tag(0, 0, 1), ANY_BOTH, 1));
    EXPECT_EQ(0u, tm_matcher_count(&m));
}

TEST_F(matcher, many_masks_reuse_groups)
{
    const int n = 50;
    tm_matcher_entry_t e[n];
    uint64_t tag = ~0ull;

    for (int round = 0; round < 3; ++round) {
        for (int i = 0; i < n; ++i) {
            /* A distinct mask per entry, all matching tag */
            post(&e[i], tag, ~(1ull << ((i + round * 7) % 64)));
        }
        for (int i = 0; i < n; ++i) {
            ASSERT_EQ(&e[i], tm_matcher_match(&m, tag)) << round << " " << i;
        }
    }
    /* Each round's masks took the groups of the previous round's */
    EXPECT_LE(m.ngroups, unsigned(n));
    EXPECT_LE(m.nactive, unsigned(n));
}

TEST_F(matcher, reserve_avoids_growth)
{
    const size_t n = 5000;
    std::vector<tm_matcher_entry_t> e(n);

    ASSERT_EQ(0, tm_matcher_reserve(&m, MASK_FULL, n));
    ASSERT_EQ(1u, m.ngroups);
    tm_matcher_entry_t **buckets = m.groups[0].buckets;

    for (size_t i = 0; i < n; ++i) {
        post(&e[i], make_tag(i, 1, 1), MASK_FULL);
    }
    EXPECT_EQ(buckets, m.groups[0].buckets); /* not reallocated */
    for (size_t i = n; i-- > 0;) {
        ASSERT_EQ(&e[i], tm_matcher_match(&m, make_tag(i, 1, 1)));
    }
}

/* A group drained by tm_matcher_remove() gives its grown buckets back (a
 * drained deep queue's buckets, spread over memory, made every later
 * lookup a cache miss), and works on */
TEST_F(matcher, drained_group_shrinks)
{
    const size_t n = 5000;
    std::vector<tm_matcher_entry_t> e(n);

    for (size_t i = 0; i < n; ++i) {
        post(&e[i], make_tag(i, 1, 1), MASK_FULL);
    }
    ASSERT_EQ(1u, m.ngroups);
    EXPECT_GE(m.groups[0].bucket_mask + 1, 2 * n);
    for (size_t i = 0; i < n; ++i) {
        tm_matcher_remove(&m, &e[i]);
    }
    EXPECT_EQ(0u, tm_matcher_count(&m));
    EXPECT_LE(m.groups[0].bucket_mask + 1, 16u) << "the buckets stayed";

    for (size_t i = 0; i < 100; ++i) {
        post(&e[i], make_tag(i, 1, 1), MASK_FULL);
    }
    for (size_t i = 100; i-- > 0;) {
        ASSERT_EQ(&e[i], tm_matcher_match(&m, make_tag(i, 1, 1))) << i;
    }
    EXPECT_EQ(0u, tm_matcher_count(&m));
}

TEST_F(matcher, growth_100k)
{
    const size_t n = 100000;
    std::vector<tm_matcher_entry_t> e(n);
    std::vector<size_t> order(n);
    std::mt19937_64 rng(12345);

    /* Distinct exact tags over 256 sources, and every 16th entry an
     * ANY_TAG receive on one of those sources */
    auto is_wild = [](size_t i) { return (i % 16) == 15; };
    auto src_of  = [&](size_t i) { return is_wild(i) ? (i >> 4) & 0xff :
                                                       i & 0xff; };
    for (size_t i = 0; i < n; ++i) {
        if (is_wild(i)) {
            post(&e[i], make_tag(0, src_of(i), 7), ANY_TAG);
        } else {
            post(&e[i], make_tag(i, src_of(i), 7), MASK_FULL);
        }
        order[i] = i;
    }
    EXPECT_EQ(n, tm_matcher_count(&m));

    size_t i = 0;
    for (tm_matcher_entry_t *it = tm_matcher_first(&m); it != NULL;
         it = tm_matcher_next(&m, it), ++i) {
        ASSERT_EQ(&e[i], it);
    }
    EXPECT_EQ(n, i);

    /* Match the exact ones in random order: an exact entry wins unless a
     * wildcard of its source posted before it is still there */
    std::vector<std::deque<size_t>> wild(256);
    for (size_t j = 0; j < n; ++j) {
        if (is_wild(j)) {
            wild[src_of(j)].push_back(j);
        }
    }
    std::shuffle(order.begin(), order.end(), rng);
    size_t wild_taken = 0;
    for (size_t j : order) {
        if (is_wild(j)) {
            continue;
        }
        std::deque<size_t> &w = wild[src_of(j)];
        for (;;) {
            bool wild_first = !w.empty() && (w.front() < j);
            size_t expected = wild_first ? w.front() : j;
            ASSERT_EQ(&e[expected], tm_matcher_match(&m, e[j].tag)) << j;
            if (!wild_first) {
                break;
            }
            w.pop_front();
            ++wild_taken;
        }
    }
    EXPECT_GT(wild_taken, 1000u); /* the wildcards did compete */
    for (size_t s = 0; s < wild.size(); ++s) {
        for (size_t j : wild[s]) {
            ASSERT_EQ(&e[j], tm_matcher_match(&m, make_tag(1, s, 7)));
        }
    }
    EXPECT_EQ(0u, tm_matcher_count(&m));
}

/*
 * Reference model: every entry in one list in posting order; a match scans
 * it from the oldest.
 */
struct ref_entry {
    uint64_t           tag;
    uint64_t           mask;
    uint64_t           seq;
    tm_matcher_entry_t *e;
};

class reference {
public:
    void post(tm_matcher_entry_t *e, uint64_t tag, uint64_t mask,
              uint64_t seq)
    {
        ref_entry r = {tag & mask, mask, seq, e};
        auto it     = entries.end();
        while ((it != entries.begin()) && (std::prev(it)->seq > seq)) {
            --it;
        }
        entries.insert(it, r);
    }

    void remove(tm_matcher_entry_t *e)
    {
        for (auto it = entries.begin(); it != entries.end(); ++it) {
            if (it->e == e) {
                entries.erase(it);
                return;
            }
        }
        ADD_FAILURE() << "removing an entry not posted";
    }

    tm_matcher_entry_t *match(uint64_t tag, bool remove)
    {
        for (auto it = entries.begin(); it != entries.end(); ++it) {
            if ((tag & it->mask) == it->tag) {
                tm_matcher_entry_t *e = it->e;
                if (remove) {
                    entries.erase(it);
                }
                return e;
            }
        }
        return NULL;
    }

    tm_matcher_entry_t *search(uint64_t tag, uint64_t mask, bool remove)
    {
        for (auto it = entries.begin(); it != entries.end(); ++it) {
            if (((it->tag ^ tag) & mask) == 0) {
                tm_matcher_entry_t *e = it->e;
                if (remove) {
                    entries.erase(it);
                }
                return e;
            }
        }
        return NULL;
    }

    std::list<ref_entry> entries;
};

class matcher_random : public matcher {
protected:
    uint64_t random_tag(std::mt19937_64 &rng)
    {
        if (rng() % 16 == 0) {
            return rng(); /* anything, for the hash */
        }
        /* Few values per field, so that masks overlap often */
        return make_tag(rng() % 4, rng() % 4, rng() % 2);
    }

    uint64_t random_mask(std::mt19937_64 &rng)
    {
        switch (rng() % 10) {
        case 0:  return ANY_TAG;
        case 1:  return ANY_SOURCE;
        case 2:  return ANY_BOTH;
        case 3:  return (rng() % 4 == 0) ? rng() : ANY_TAG;
        default: return MASK_FULL;
        }
    }

    /* A tag some posted entry matches, or a random one */
    uint64_t arriving_tag(std::mt19937_64 &rng, const reference &ref)
    {
        if (ref.entries.empty() || (rng() % 4 == 0)) {
            return random_tag(rng);
        }
        auto it = ref.entries.begin();
        std::advance(it, rng() % ref.entries.size());
        return it->tag | (random_tag(rng) & ~it->mask);
    }

    void check_same(const reference &ref)
    {
        ASSERT_EQ(ref.entries.size(), tm_matcher_count(&m));
        tm_matcher_entry_t *e = tm_matcher_first(&m);
        for (const ref_entry &r : ref.entries) {
            ASSERT_EQ(r.e, e);
            ASSERT_EQ(r.seq, e->seq);
            ASSERT_EQ(r.tag, e->tag);
            e = tm_matcher_next(&m, e);
        }
        ASSERT_EQ(NULL, e);
    }

    void run(uint64_t seed, int nops, size_t max_entries);
};

void matcher_random::run(uint64_t seed, int nops, size_t max_entries)
{
    std::mt19937_64 rng(seed);
    std::vector<tm_matcher_entry_t> pool(max_entries);
    std::vector<tm_matcher_entry_t*> free_entries, posted;
    std::set<uint64_t> used_seqs;
    reference ref;
    uint64_t seq = 0;

    /* A matcher of its own, on a counter the test controls */
    tm_matcher_cleanup(&m);
    ASSERT_EQ(0, tm_matcher_init(&m, &seq));

    for (auto &e : pool) {
        free_entries.push_back(&e);
    }

    auto forget = [&](tm_matcher_entry_t *e) {
        posted.erase(std::find(posted.begin(), posted.end(), e));
        free_entries.push_back(e);
    };

    for (int op = 0; op < nops; ++op) {
        SCOPED_TRACE(op);
        unsigned what = rng() % 100;

        if ((what < 40) && !free_entries.empty()) {
            /* post: odd numbers, the counter skips the even ones */
            tm_matcher_entry_t *e = free_entries.back();
            uint64_t tag = random_tag(rng), mask = random_mask(rng);
            ++seq;
            ASSERT_EQ(0, tm_matcher_post(&m, e, tag, mask, e));
            ref.post(e, tag, mask, e->seq);
            used_seqs.insert(e->seq);
            free_entries.pop_back();
            posted.push_back(e);
        } else if ((what < 45) && !free_entries.empty() && (seq > 0)) {
            /* post_seq, out of order: one of the skipped (even) numbers */
            tm_matcher_entry_t *e = free_entries.back();
            uint64_t tag = random_tag(rng), mask = random_mask(rng);
            uint64_t s = (rng() % seq) & ~1ull;
            if (used_seqs.count(s) || (s >= seq)) {
                continue;
            }
            ASSERT_EQ(0, tm_matcher_post_seq(&m, e, tag, mask, e, s));
            ref.post(e, tag, mask, s);
            used_seqs.insert(s);
            free_entries.pop_back();
            posted.push_back(e);
        } else if ((what < 60) && !posted.empty()) {
            /* cancel */
            tm_matcher_entry_t *e = posted[rng() % posted.size()];
            tm_matcher_remove(&m, e);
            ref.remove(e);
            forget(e);
        } else if (what < 85) {
            /* match */
            uint64_t tag = arriving_tag(rng, ref);
            tm_matcher_entry_t *expected = ref.match(tag, true);
            ASSERT_EQ(expected, tm_matcher_match(&m, tag)) << std::hex << tag;
            if (expected != NULL) {
                forget(expected);
            }
        } else if (what < 92) {
            /* peek */
            uint64_t tag = arriving_tag(rng, ref);
            ASSERT_EQ(ref.match(tag, false), tm_matcher_peek(&m, tag))
                << std::hex << tag;
        } else {
            /* search, as an unexpected queue would */
            uint64_t tag = arriving_tag(rng, ref);
            uint64_t mask = random_mask(rng);
            bool remove = rng() % 2;
            tm_matcher_entry_t *expected = ref.search(tag, mask, remove);
            ASSERT_EQ(expected, tm_matcher_search(&m, tag, mask, remove))
                << std::hex << tag << "/" << mask;
            if (remove && (expected != NULL)) {
                forget(expected);
            }
        }

        if ((op % 64) == 0) {
            check_same(ref);
        }
    }
    check_same(ref);

    /* Drain */
    while (!posted.empty()) {
        tm_matcher_entry_t *e = posted.back();
        tm_matcher_remove(&m, e);
        ref.remove(e);
        forget(e);
    }
    check_same(ref);
}

uint64_t random_seed()
{
    const char *env = getenv("TM_MATCHER_SEED");
    return (env != NULL) ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
}

TEST_F(matcher_random, against_reference)
{
    uint64_t base = random_seed();

    for (uint64_t i = 0; i < 20; ++i) {
        uint64_t seed = base + i;
        SCOPED_TRACE(testing::Message() << "seed " << seed
                     << " (rerun: TM_MATCHER_SEED=" << seed << ")");
        run(seed, 20000, (i % 2) ? 64 : 2000);
        if (HasFatalFailure()) {
            return;
        }
    }
}

} // namespace
