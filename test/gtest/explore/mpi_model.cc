#include "mpi_model.h"

#include <algorithm>
#include <climits>
#include <sstream>
#include <stdexcept>

namespace rc_tm_explore {

const int mpi_model::NONE;

mpi_model::mpi_model(const std::vector<model_recv> &recvs,
                     const std::vector<model_msg> &msgs) :
    m_recvs(recvs), m_msgs(msgs), m_recv_state(recvs.size(), NOT_POSTED),
    m_recv_match(recvs.size(), NONE), m_msg_match(msgs.size(), NONE),
    m_arrived(msgs.size(), false)
{
}

int mpi_model::post(int recv)
{
    if (m_recv_state.at(recv) != NOT_POSTED) {
        throw std::logic_error("receive posted twice");
    }

    const model_recv &r = m_recvs[recv];
    for (auto it = m_unexpected.begin(); it != m_unexpected.end(); ++it) {
        if (tag_matches(m_msgs[*it].tag, r.tag, r.mask)) {
            int msg = *it;
            m_unexpected.erase(it);
            m_recv_state[recv] = MATCHED;
            m_recv_match[recv] = msg;
            m_msg_match[msg]   = recv;
            return msg;
        }
    }
    m_recv_state[recv] = POSTED;
    m_posted.push_back(recv);
    return NONE;
}

int mpi_model::arrive(int msg)
{
    if (m_arrived.at(msg)) {
        throw std::logic_error("message arrived twice");
    }
    for (int earlier = 0; earlier < msg; ++earlier) {
        if ((m_msgs[earlier].conn == m_msgs[msg].conn) && !m_arrived[earlier]) {
            throw std::logic_error("message overtook an earlier one of its "
                                   "connection");
        }
    }

    m_arrived[msg] = true;
    for (auto it = m_posted.begin(); it != m_posted.end(); ++it) {
        const model_recv &r = m_recvs[*it];
        if (tag_matches(m_msgs[msg].tag, r.tag, r.mask)) {
            int recv = *it;
            m_posted.erase(it);
            m_recv_state[recv] = MATCHED;
            m_recv_match[recv] = msg;
            m_msg_match[msg]   = recv;
            return recv;
        }
    }
    m_unexpected.push_back(msg);
    return NONE;
}

bool mpi_model::cancel(int recv)
{
    if (m_recv_state.at(recv) != POSTED) {
        return false;
    }
    m_posted.remove(recv);
    m_recv_state[recv] = CANCELED;
    return true;
}


std::string to_string(const timed_event &ev)
{
    std::ostringstream os;

    switch (ev.kind) {
    case timed_event::POST:
        os << "post(r" << ev.id << ")@" << ev.lo;
        return os.str();
    case timed_event::ARRIVE:
        os << "arrive(m" << ev.id << ")";
        break;
    case timed_event::CANCEL:
        os << "cancel(r" << ev.id << ")";
        break;
    }
    os << "@[" << ev.lo << "," << ev.hi << "]";
    return os.str();
}

std::string to_string(const outcome &o)
{
    std::ostringstream os;

    for (size_t r = 0; r < o.recv_msg.size(); ++r) {
        os << (r ? " " : "") << "r" << r << "=";
        if (o.recv_canceled[r]) {
            os << "canceled";
        } else if (o.recv_msg[r] != mpi_model::NONE) {
            os << "m" << o.recv_msg[r];
        } else {
            os << "-";
        }
    }
    os << " unexpected:";
    for (size_t m = 0; m < o.msg_recv.size(); ++m) {
        if (o.msg_recv[m] == mpi_model::NONE) {
            os << " m" << m;
        }
    }
    return os.str();
}

namespace {

/* Depth-first search over the orders of events, cutting a branch as soon as
 * the model disagrees with the observed outcome */
class linearizer {
public:
    linearizer(const std::vector<model_recv> &recvs,
               const std::vector<model_msg> &msgs,
               const std::vector<timed_event> &events,
               const outcome &observed) :
        m_recvs(recvs), m_msgs(msgs), m_events(events), m_observed(observed),
        m_fired(events.size(), false)
    {
    }

    /* Every event ev fired so far sits at a time <= the earliest window
     * end of the events not fired yet, so the next one may be any event
     * whose window starts by then */
    bool search(const mpi_model &model)
    {
        int deadline = INT_MAX;
        bool all_fired = true;

        for (size_t i = 0; i < m_events.size(); ++i) {
            if (!m_fired[i]) {
                deadline  = std::min(deadline, m_events[i].hi);
                all_fired = false;
            }
        }
        if (all_fired) {
            return final_state_agrees(model);
        }

        for (size_t i = 0; i < m_events.size(); ++i) {
            const timed_event &ev = m_events[i];

            if (m_fired[i] || (ev.lo > deadline) ||
                ((ev.kind == timed_event::ARRIVE) && !may_arrive(model, ev.id))) {
                continue;
            }

            mpi_model next = model;
            if (!apply(next, ev)) {
                continue;
            }
            m_fired[i] = true;
            m_order.push_back(ev);
            if (search(next)) {
                return true;
            }
            m_order.pop_back();
            m_fired[i] = false;
        }
        return false;
    }

    const std::vector<timed_event> &order() const { return m_order; }

private:
    bool may_arrive(const mpi_model &model, int msg) const
    {
        for (int earlier = 0; earlier < msg; ++earlier) {
            if ((m_msgs[earlier].conn == m_msgs[msg].conn) &&
                !model.arrived(earlier)) {
                return false;
            }
        }
        return true;
    }

    /* Applies ev; false when the model now contradicts the observation */
    bool apply(mpi_model &model, const timed_event &ev) const
    {
        int got;

        switch (ev.kind) {
        case timed_event::POST:
            got = model.post(ev.id);
            return (got == mpi_model::NONE) ||
                   (m_observed.recv_msg[ev.id] == got);
        case timed_event::ARRIVE:
            got = model.arrive(ev.id);
            return (got == mpi_model::NONE) ||
                   (m_observed.msg_recv[ev.id] == got);
        case timed_event::CANCEL:
            return m_observed.recv_canceled[ev.id] && model.cancel(ev.id);
        }
        return false;
    }

    bool final_state_agrees(const mpi_model &model) const
    {
        for (size_t r = 0; r < m_recvs.size(); ++r) {
            if (m_observed.recv_canceled[r]) {
                if (model.state(r) != mpi_model::CANCELED) {
                    return false;
                }
            } else if (model.recv_match(r) != m_observed.recv_msg[r]) {
                return false;
            }
        }
        for (size_t m = 0; m < m_msgs.size(); ++m) {
            if (model.msg_match(m) != m_observed.msg_recv[m]) {
                return false;
            }
        }
        return true;
    }

    const std::vector<model_recv>  &m_recvs;
    const std::vector<model_msg>   &m_msgs;
    const std::vector<timed_event> &m_events;
    const outcome                  &m_observed;
    std::vector<bool>              m_fired;
    std::vector<timed_event>       m_order;
};

} // namespace

bool find_linearization(const std::vector<model_recv> &recvs,
                        const std::vector<model_msg> &msgs,
                        const std::vector<timed_event> &events,
                        const outcome &observed,
                        std::vector<timed_event> *order)
{
    linearizer lin(recvs, msgs, events, observed);
    mpi_model model(recvs, msgs);

    if (!lin.search(model)) {
        return false;
    }
    if (order != nullptr) {
        *order = lin.order();
    }
    return true;
}

outcome model_outcome(const std::vector<model_recv> &recvs,
                      const std::vector<model_msg> &msgs,
                      const std::vector<timed_event> &order)
{
    mpi_model model(recvs, msgs);
    outcome o;

    for (const timed_event &ev : order) {
        switch (ev.kind) {
        case timed_event::POST:
            model.post(ev.id);
            break;
        case timed_event::ARRIVE:
            model.arrive(ev.id);
            break;
        case timed_event::CANCEL:
            model.cancel(ev.id);
            break;
        }
    }

    o.recv_msg.resize(recvs.size());
    o.recv_canceled.resize(recvs.size());
    o.msg_recv.resize(msgs.size());
    for (size_t r = 0; r < recvs.size(); ++r) {
        o.recv_msg[r]      = model.recv_match(r);
        o.recv_canceled[r] = (model.state(r) == mpi_model::CANCELED);
    }
    for (size_t m = 0; m < msgs.size(); ++m) {
        o.msg_recv[m] = model.msg_match(m);
    }
    return o;
}

} // namespace rc_tm_explore
