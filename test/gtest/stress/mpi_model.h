/*
 * Reference model of MPI matching for one sender's ordered message stream
 * against one receiver's receives in posting order (receives name the
 * sender, so senders never compete for a receive).
 *
 * A message carries a small tag value (0..15); a receive accepts the values
 * v with (v & ~ignore) == (value & ~ignore).  Because the whole stream is
 * known in advance (the scripts are seeded), the model gives each receive,
 * in posting order, the earliest message not yet taken that it accepts.
 * That is what every interleaving of posts and arrivals gives under MPI's
 * rules (first-posted receive wins, no overtaking): docs/testing.md has the
 * argument, and test_stress.cc checks it against an event-by-event
 * simulation.
 */
#ifndef RC_TM_TEST_STRESS_MPI_MODEL_H_
#define RC_TM_TEST_STRESS_MPI_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rc_tm_test {

class mpi_model {
public:
    static const unsigned NUM_VALUES = 16;

    explicit mpi_model(const std::vector<uint8_t> &values) :
        m_by_value(NUM_VALUES), m_head(NUM_VALUES, 0)
    {
        for (size_t i = 0; i < values.size(); ++i) {
            m_by_value[values[i] % NUM_VALUES].push_back((uint32_t)i);
        }
    }

    static bool accepts(unsigned recv_value, unsigned ignore, unsigned value)
    {
        return ((value ^ recv_value) & ~ignore & (NUM_VALUES - 1)) == 0;
    }

    /* The next receive in posting order: the index of the message it gets,
     * or -1 if no message left in the stream matches it */
    int64_t match(unsigned recv_value, unsigned ignore)
    {
        unsigned best_value = NUM_VALUES;
        uint32_t best       = UINT32_MAX;

        /* Messages of one value are taken oldest first, so the earliest one
         * not taken is always at the head of its list */
        for (unsigned v = 0; v < NUM_VALUES; ++v) {
            if (accepts(recv_value, ignore, v) &&
                (m_head[v] < m_by_value[v].size()) &&
                (m_by_value[v][m_head[v]] < best)) {
                best       = m_by_value[v][m_head[v]];
                best_value = v;
            }
        }
        if (best_value == NUM_VALUES) {
            return -1;
        }
        ++m_head[best_value];
        return best;
    }

    /* Messages no receive took so far */
    size_t left() const
    {
        size_t n = 0;
        for (unsigned v = 0; v < NUM_VALUES; ++v) {
            n += m_by_value[v].size() - m_head[v];
        }
        return n;
    }

private:
    std::vector<std::vector<uint32_t>> m_by_value;
    std::vector<size_t>                m_head;
};

} // namespace rc_tm_test

#endif
