/*
 * Reference model of MPI receive matching, for the interleaving explorer.
 *
 * Deliberately naive: a posted-receive queue and an unexpected-message
 * queue, each a plain list scanned from the front.
 *
 *  - a message takes the first-posted receive that matches it, else it joins
 *    the unexpected queue;
 *  - a receive takes the first-arrived unexpected message that matches it,
 *    else it joins the posted queue;
 *  - messages of one connection arrive in the order they were sent
 *    (non-overtaking: arriving out of order is a usage error);
 *  - match: (msg_tag & mask) == (recv_tag & mask);
 *  - cancel removes a receive that is still posted; one that already has its
 *    message cannot be canceled.
 *
 * find_linearization() decides whether an observed outcome is one MPI
 * allows: whether some order of the events, each placed inside the time
 * window in which it may have taken effect, makes the model produce exactly
 * that outcome.
 */
#ifndef RC_TM_TEST_EXPLORE_MPI_MODEL_H_
#define RC_TM_TEST_EXPLORE_MPI_MODEL_H_

#include <cstdint>
#include <list>
#include <string>
#include <vector>

namespace rc_tm_explore {

static inline bool tag_matches(uint64_t msg_tag, uint64_t recv_tag,
                               uint64_t mask)
{
    return (msg_tag & mask) == (recv_tag & mask);
}

struct model_recv {
    uint64_t tag;
    uint64_t mask;
};

struct model_msg {
    int      conn;
    uint64_t tag;
};

class mpi_model {
public:
    static const int NONE = -1;

    enum recv_state { NOT_POSTED, POSTED, MATCHED, CANCELED };

    mpi_model(const std::vector<model_recv> &recvs,
              const std::vector<model_msg> &msgs);

    /* Returns the message the receive took from the unexpected queue, or
     * NONE (it is now posted).  Posting twice is a usage error (throws). */
    int post(int recv);

    /* Returns the receive the message matched, or NONE (now unexpected).
     * Arriving twice, or before an earlier message of the same connection,
     * throws. */
    int arrive(int msg);

    /* True when the receive was posted and unmatched: it is canceled now */
    bool cancel(int recv);

    recv_state state(int recv) const  { return m_recv_state.at(recv); }
    int recv_match(int recv) const    { return m_recv_match.at(recv); }
    int msg_match(int msg) const      { return m_msg_match.at(msg); }
    bool arrived(int msg) const       { return m_arrived.at(msg); }
    const std::list<int> &posted() const     { return m_posted; }
    const std::list<int> &unexpected() const { return m_unexpected; }

private:
    std::vector<model_recv>  m_recvs;
    std::vector<model_msg>   m_msgs;
    std::list<int>           m_posted;       /* receive ids, posting order */
    std::list<int>           m_unexpected;   /* message ids, arrival order */
    std::vector<recv_state>  m_recv_state;
    std::vector<int>         m_recv_match;
    std::vector<int>         m_msg_match;
    std::vector<bool>        m_arrived;
};


/* What a run produced, in the model's terms */
struct outcome {
    std::vector<int>  recv_msg;       /* message taken, or mpi_model::NONE */
    std::vector<bool> recv_canceled;  /* completed as canceled */
    std::vector<int>  msg_recv;       /* receive, or NONE: left unexpected */
};

/* An event of a run with the window (in steps of the run, inclusive) in
 * which it may have taken effect.  Posts have lo == hi. */
struct timed_event {
    enum kind_t { POST, ARRIVE, CANCEL } kind;
    int id;      /* receive (POST, CANCEL) or message (ARRIVE) */
    int lo, hi;
};

std::string to_string(const timed_event &ev);

/*
 * Is there an order of events, each at a time inside its window (ties in
 * any order) and messages of one connection in sending order, for which the
 * model gives exactly `observed` (pairs, cancellations, and what is left
 * unexpected or posted)?  On success the order is stored in *order.
 * Receives that end neither matched nor canceled must not be posted twice;
 * a receive whose cancel failed has no CANCEL event.
 */
bool find_linearization(const std::vector<model_recv> &recvs,
                        const std::vector<model_msg> &msgs,
                        const std::vector<timed_event> &events,
                        const outcome &observed,
                        std::vector<timed_event> *order);

/* The model's outcome for events applied in the given order */
outcome model_outcome(const std::vector<model_recv> &recvs,
                      const std::vector<model_msg> &msgs,
                      const std::vector<timed_event> &order);

std::string to_string(const outcome &o);

} // namespace rc_tm_explore

#endif
