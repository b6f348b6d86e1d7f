#include "explorer_int.h"

namespace rc_tm_explore {

/* ----- checks ----- */

/* Unexpected tagged messages software has handled (rc_tm's count) */
uint64_t rc_tm_explorer::sw_unexpected()
{
    return rc_tm_explore_sw_unexpected(m_receiver.iface);
}

/* rc_tm's and the device's state (explore_state.c), UCP's queues and
 * callbacks so far, and the order of the times the check uses: all that
 * decides what the rest of a schedule does and how it is judged */
/* The device may end a schedule out of phase, and software with a count
 * it has not sent (the next list operation would bring it); every schedule
 * starts from the same state: a receive that nothing matches brings the
 * count, as a user's next receive would, and is canceled */
void rc_tm_explorer::resync_device(std::vector<std::string> *errors)
{
    mapped_buffer buf(m_component, m_md, 64, 0);
    uct_iov_t iov = buf.iov(64);
    struct resync_ctx {
        uct_tag_context_t ctx;
        bool              done;
    } r = {};

    r.ctx.tag_consumed_cb = [](uct_tag_context_t *) {};
    r.ctx.completed_cb    = [](uct_tag_context_t *self, uct_tag_t, uint64_t,
                               size_t, void *, ucs_status_t) {
        ucs_container_of(self, resync_ctx, ctx)->done = true;
    };
    if ((uct_iface_tag_recv_zcopy(m_receiver.iface, UINT64_MAX, UINT64_MAX,
                                  &iov, 1, &r.ctx) != UCS_OK) ||
        !wait_for([&] { return softnic_test_in_phase(m_srq) != 0; }) ||
        (uct_iface_tag_recv_cancel(m_receiver.iface, &r.ctx, 0) != UCS_OK) ||
        !wait_for([&] { return r.done; })) {
        errors->push_back("cleanup: could not bring the device back in phase");
    }
}

bool rc_tm_explorer::current_state(state_key *key)
{
    rc_tm_explore_state_args_t args;
    uint64_t h1 = 0x9e3779b97f4a7c15ull, h2 = 0xc2b2ae3d27d4eb4full;
    size_t n;

    if (!m_errors.empty()) {
        return false;
    }
    args.iface      = m_receiver.iface;
    args.recv_ctx   = m_recv_ctxs.data();
    args.num_recvs  = m_recv_ctxs.size();
    args.eps        = m_receiver.eps.data();
    args.num_eps    = m_receiver.eps.size();
    args.base_unexp = m_base_unexp;
    m_words.resize(1024);
    n = rc_tm_explore_state(&args, m_words.data(), m_words.size());
    if (n == 0) {
        return false;
    }
    m_words.resize(n);

    m_words.push_back(0xabcd);
    m_words.push_back((m_pc << 8) | (m_dirty << 1) | (m_gets_pending << 16));
    for (int r : m_expected) {
        m_words.push_back(0x100 | r);
    }
    m_words.push_back(0xabce);
    for (int m : m_unexpected) {
        m_words.push_back(0x200 | m);
    }
    m_words.push_back(0xabcf);
    for (const auto &rec : m_recvs) {
        m_words.push_back((uint64_t)rec->posted | (rec->in_rc_tm << 1) |
                          (rec->force_canceled << 2) |
                          (rec->cancel_called << 3) | (rec->done << 4) |
                          (rec->canceled << 5) | (rec->by_harness << 6) |
                          ((rec->consumed_seq < rec->completed_seq) << 7) |
                          (rec->consumed_cbs << 8) |
                          (rec->completed_cbs << 12) |
                          ((uint64_t)(rec->msg + 1) << 16));
    }
    for (const auto &msg : m_msgs) {
        m_words.push_back((uint64_t)msg->delivered |
                          ((uint64_t)(msg->recv + 1) << 8) |
                          (msg->acked << 16));
    }

    /* times: only their order matters, ties included */
    m_times.clear();
    for (size_t r = 0; r < m_recvs.size(); ++r) {
        const h_recv &rec = *m_recvs[r];
        m_times.push_back({rec.t_post, 0x1000 | r});
        m_times.push_back({rec.t_cancel, 0x2000 | r});
        m_times.push_back({rec.t_consumed, 0x3000 | r});
        m_times.push_back({rec.canceled ? rec.t_done : -1, 0x4000 | r});
    }
    for (size_t m = 0; m < m_msgs.size(); ++m) {
        m_times.push_back({m_msgs[m]->t_arrival, 0x5000 | m});
        m_times.push_back({m_msgs[m]->t_obs, 0x6000 | m});
    }
    std::sort(m_times.begin(), m_times.end());
    m_words.push_back(0xabd0);
    for (size_t i = 0; i < m_times.size(); ++i) {
        if (m_times[i].first < 0) {
            m_words.push_back(m_times[i].second);          /* not yet */
        } else {
            bool tie = (i > 0) && (m_times[i].first == m_times[i - 1].first);
            m_words.push_back(m_times[i].second | (tie ? 0x10000 : 0x20000));
        }
    }

    /* two independent 64-bit hashes of the words */
    for (uint64_t w : m_words) {
        h1  = (h1 ^ w) * 0x100000001b3ull;
        h1 ^= h1 >> 29;
        h2  = (h2 + w) * 0xff51afd7ed558ccdull;
        h2 ^= h2 >> 33;
    }
    key->h1 = h1;
    key->h2 = h2;
    return true;
}

bool rc_tm_explorer::check_schedule(std::string *report,
                                    std::string *outcome_key)
{
    outcome observed;
    std::vector<timed_event> events, order;
    unsigned pending_in_rc_tm = 0;

    /* Software must have nothing left to do: one more progress changes
     * nothing the harness sees */
    uint64_t seq = m_cb_seq;
    uct_iface_progress(m_receiver.iface);
    if ((m_cb_seq != seq) || (m_gets_pending != 0)) {
        error("software work was left when the schedule ended (the explorer "
              "missed a progress point)");
    }

    for (size_t m = 0; m < m_msgs.size(); ++m) {
        const h_msg &msg = *m_msgs[m];
        if (msg.delivered == 0) {
            error("m" + std::to_string(m) + " lost: never delivered");
        }
        if (msg.t_arrival < 0) {
            error("m" + std::to_string(m) + " never reached the device");
        }
    }

    for (size_t r = 0; r < m_recvs.size(); ++r) {
        const h_recv &rec = *m_recvs[r];
        std::string name  = "r" + std::to_string(r);

        if (rec.in_rc_tm && !rec.force_canceled) {
            if (rec.done && !rec.canceled &&
                ((rec.consumed_cbs != 1) || (rec.completed_cbs != 1) ||
                 (rec.consumed_seq > rec.completed_seq))) {
                error(name + ": callbacks out of order (tag_consumed_cb then "
                      "completed_cb, once each)");
            }
            if (!rec.done) {
                if (rec.consumed_cbs != 0) {
                    error(name + ": consumed but never completed");
                }
                ++pending_in_rc_tm;
            }
        } else if (!rec.in_rc_tm &&
                   ((rec.consumed_cbs != 0) || (rec.completed_cbs != 0))) {
            error(name + ": rc_tm called back for a receive it never had");
        }
        if (rec.cancel_called && !rec.done) {
            error(name + ": canceled but never completed");
        }
    }

    /* The device may end out of phase (mlx5 asks for the count on an
     * unexpected message only past 0x3fff of them): the next list operation
     * carries it.  What must hold is that no message was lost between them */
    if (softnic_test_hw_unexp(m_srq) != (uint16_t)sw_unexpected()) {
        error("device judged " + std::to_string(softnic_test_hw_unexp(m_srq)) +
              " messages unexpected, software counted " +
              std::to_string(sw_unexpected()));
    }
    if (softnic_test_listed_tags(m_srq) > pending_in_rc_tm) {
        error(std::to_string(softnic_test_listed_tags(m_srq)) + " entries listed "
              "in the device for " + std::to_string(pending_in_rc_tm) +
              " pending receives");
    }

    /* The outcome, and the windows in which each event may have taken
     * effect: a message between reaching the device and the harness
     * learning its fate, a cancel between its call and its report */
    observed.recv_msg.assign(m_recvs.size(), mpi_model::NONE);
    observed.recv_canceled.assign(m_recvs.size(), false);
    observed.msg_recv.assign(m_msgs.size(), mpi_model::NONE);
    for (size_t r = 0; r < m_recvs.size(); ++r) {
        const h_recv &rec = *m_recvs[r];
        if (rec.posted) {
            events.push_back({timed_event::POST, (int)r, rec.t_post,
                              rec.t_post});
        }
        if (rec.done && rec.canceled) {
            observed.recv_canceled[r] = true;
            events.push_back({timed_event::CANCEL, (int)r, rec.t_cancel,
                              rec.t_done});
        } else if (rec.done) {
            observed.recv_msg[r] = rec.msg;
        }
    }
    for (size_t m = 0; m < m_msgs.size(); ++m) {
        const h_msg &msg = *m_msgs[m];
        observed.msg_recv[m] = msg.recv;
        events.push_back({timed_event::ARRIVE, (int)m, msg.t_arrival,
                          std::max(msg.t_obs, msg.t_arrival)});
    }
    *outcome_key = to_string(observed);

    std::ostringstream os;
    if (m_errors.empty() &&
        !find_linearization(m_model_recvs, m_model_msgs, events, observed,
                            &order)) {
        error("no order of the events within their windows gives this "
              "outcome in the MPI model");
    }

    if (m_errors.empty()) {
        return true;
    }

    /* the model's outcome with everything at its first possible moment */
    std::vector<timed_event> natural;
    for (const timed_event &ev : events) {
        natural.push_back(ev);
        if (ev.kind == timed_event::CANCEL) {
            natural.back().hi = ev.lo;
        }
    }
    for (size_t r = 0; r < m_recvs.size(); ++r) {
        if (m_recvs[r]->cancel_called && !observed.recv_canceled[r]) {
            natural.push_back({timed_event::CANCEL, (int)r,
                               m_recvs[r]->t_cancel, m_recvs[r]->t_cancel});
        }
    }
    std::stable_sort(natural.begin(), natural.end(),
                     [](const timed_event &a, const timed_event &b) {
                         return a.lo < b.lo;
                     });

    os << "  errors:\n";
    for (const std::string &e : m_errors) {
        os << "    " << e << "\n";
    }
    os << "  observed:      " << *outcome_key << "\n";
    os << "  model (events at their first moment): "
       << to_string(model_outcome(m_model_recvs, m_model_msgs, natural))
       << "\n  event windows:";
    for (const timed_event &ev : events) {
        os << " " << to_string(ev);
    }
    os << "\n";
    *report += os.str();
    m_errors.clear();
    return false;
}

/* Back to a clean state for the next schedule: what is still posted is
 * canceled, rendezvous left with UCP are released, everything flushed;
 * then the device must hold nothing and be in phase */
bool rc_tm_explorer::cleanup(std::string *report)
{
    bool complete = (m_pc == m_scn->program.size());
    std::vector<std::string> errors;
    bool ok;

    softnic_test_set_mode(m_dev, SOFTNIC_MODE_AUTO);
    for (const auto &msg : m_msgs) {
        complete = complete && (msg->delivered > 0);
    }
    for (auto &rec : m_recvs) {
        if (!rec->in_rc_tm || rec->done || rec->force_canceled) {
            continue;
        }
        rec->cancel_called = true;
        m_expected.remove(rec->id);
        if (uct_iface_tag_recv_cancel(m_receiver.iface, &rec->ctx, 0) !=
            UCS_OK) {
            errors.push_back("cleanup cancel of r" + std::to_string(rec->id) +
                             " failed");
            continue;
        }
        if (!wait_for([&] { return rec->done; })) {
            errors.push_back("cleanup cancel of r" + std::to_string(rec->id) +
                             " never completed");
        } else if (!rec->canceled && complete) {
            errors.push_back("r" + std::to_string(rec->id) + " got a message "
                             "after every message had been delivered");
        }
    }

    /* a schedule cut short (its state was explored before): what is still
     * on the wire arrives now, unexpected or into UCP's receives */
    if (!wait_for([&] {
            for (const auto &msg : m_msgs) {
                if (msg->delivered == 0) {
                    return false;
                }
            }
            return m_gets_pending == 0;
        })) {
        errors.push_back("cleanup: messages never delivered");
    }

    for (size_t m = 0; m < m_msgs.size(); ++m) {
        h_msg &msg = *m_msgs[m];
        if (msg.rndv_op == nullptr) {
            continue;
        }
        if (!msg.acked && (msg.recv == mpi_model::NONE)) {
            /* left in UCP's unexpected queue: nobody will fetch it */
            uct_ep_tag_rndv_cancel(m_sender.eps[m_scn->msgs[m].conn],
                                   msg.rndv_op);
            msg.acked = true;
        }
        if (!msg.acked && !wait_for([&] { return msg.rndv_comp.done != 0; })) {
            errors.push_back("rendezvous m" + std::to_string(m) + " never "
                             "completed at the sender (no FIN)");
        } else if (!msg.acked && (msg.rndv_comp.status != UCS_OK)) {
            errors.push_back("rendezvous m" + std::to_string(m) + " completed "
                             "with " + ucs_status_string(msg.rndv_comp.status));
        } else if (msg.acked && msg.rndv_comp.done) {
            errors.push_back("rendezvous m" + std::to_string(m) + " completed "
                             "at the sender although UCP fetched it");
        }
    }

    for (entity *e : {&m_sender, &m_receiver}) {
        ucs_status_t status = UCS_INPROGRESS;
        ok = wait_for([&] {
            status = uct_iface_flush(e->iface, 0, NULL);
            return status != UCS_INPROGRESS;
        });
        if (!ok || (status != UCS_OK)) {
            errors.push_back("flush failed");
        }
    }
    /* list operations are not sends: flush does not wait for them, and an
     * answer to a SYNC_REQ may have been posted by the last progress */
    for (unsigned i = 0; i < 1000; ++i) {
        progress();
        if ((softnic_test_pending_ops(m_srq) == 0) &&
            (softnic_test_pending_data(m_srq) == 0) &&
            (softnic_test_hw_unexp(m_srq) == (uint16_t)sw_unexpected())) {
            break;
        }
    }

    resync_device(&errors);

    if ((softnic_test_pending_ops(m_srq) != 0) || (softnic_test_listed_tags(m_srq) != 0) ||
        (softnic_test_pending_data(m_srq) != 0)) {
        errors.push_back("device not empty after cleanup: " +
                         std::to_string(softnic_test_pending_ops(m_srq)) + " ops, " +
                         std::to_string(softnic_test_listed_tags(m_srq)) +
                         " listed entries, " +
                         std::to_string(softnic_test_pending_data(m_srq)) +
                         " transfers");
    }
    /* out of phase is allowed (the next list operation brings the count),
     * a count that differs is not */
    if (softnic_test_hw_unexp(m_srq) != (uint16_t)sw_unexpected()) {
        errors.push_back("device and software count unexpected messages "
                         "differently after cleanup");
    }
    softnic_test_set_mode(m_dev, SOFTNIC_MODE_MANUAL);

    for (const std::string &e : m_errors) {
        errors.push_back(e);   /* raised by callbacks during cleanup */
    }
    m_errors.clear();
    if (errors.empty()) {
        return true;
    }
    *report += "  after the schedule:\n";
    for (const std::string &e : errors) {
        *report += "    " + e + "\n";
    }
    return false;
}

} // namespace rc_tm_explore
