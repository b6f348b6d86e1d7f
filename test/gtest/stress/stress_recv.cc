/*
 * The receiving side of a stress peer: receives posted in rounds, cancels,
 * and every completion compared with the reference model.
 */
#include "stress_int.h"

namespace rc_tm_test {
namespace stress {

void recv_cb(void *request, ucs_status_t status,
             const ucp_tag_recv_info_t *info, void *user_data)
{
    recv_rec *rec = static_cast<recv_rec*>(user_data);

    rec->flow->peer->on_recv_done(*rec, status, info);
    ucp_request_free(request);
}

void stress_peer::post_recv(in_flow &f, unsigned value, unsigned ignore,
                            bool small, bool drain, const recv_plan *plan)
{
    f.recs.emplace_back();
    recv_rec &rec = f.recs.back();
    rec.flow   = &f;
    rec.index  = f.recs.size() - 1;
    rec.value  = value;
    rec.ignore = ignore;
    rec.drain  = drain;
    rec.size   = recv_buffer_size(value, ignore, small);
    rec.buf    = m_recv_bufs.get(rec.size);
    if (rec.size < 1024) {
        ++m_me.small_recvs;
    }

    ++f.posted;
    if ((plan != nullptr) && plan->cancel) {
        rec.cancel_plan = true;
        rec.cancel_at   = m_iter + plan->cancel_delay;
        f.planned.push_back(rec.index);
    }

    /* Always through the callback: UCP 1.13 does not fill recv_info on an
     * immediate completion */
    ucp_request_param_t param = {};
    param.op_attr_mask        = UCP_OP_ATTR_FIELD_CALLBACK |
                                UCP_OP_ATTR_FIELD_USER_DATA |
                                UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv             = recv_cb;
    param.user_data           = &rec;
    void *req = ucp_tag_recv_nbx(f.worker, rec.buf, rec.size,
                                 make_tag(f.id, value), ~(uint64_t)ignore,
                                 &param);
    if (UCS_PTR_IS_ERR(req)) {
        report("flow %u receive #%zu: ucp_tag_recv_nbx failed: %s", f.id,
               rec.index, ucs_status_string(UCS_PTR_STATUS(req)));
        rec.cancel_plan = false;
        on_recv_done(rec, UCS_PTR_STATUS(req), nullptr);
    } else if (!rec.done) {
        rec.req = req;
    }
}

void stress_peer::issue_cancels(in_flow &f)
{
    for (size_t i = 0; i < f.planned.size();) {
        recv_rec &rec = f.recs[f.planned[i]];
        if (rec.done || (m_iter >= rec.cancel_at)) {
            if (!rec.done) {
                rec.cancel_issued = true;
                rec.cancel_stamp  = f.stamp;
                ++m_me.cancels;
                ucp_request_cancel(f.worker, rec.req);
            }
            f.planned[i] = f.planned.back();
            f.planned.pop_back();
        } else {
            ++i;
        }
    }
}

void stress_peer::compare(recv_rec &rec)
{
    if (rec.got != rec.expected) {
        report("flow %u receive #%zu (value 0x%x ignore 0x%x%s%s): got "
               "message %" PRId64 ", the model gives it %" PRId64
               " (-1: none)", rec.flow->id, rec.index, rec.value, rec.ignore,
               rec.cancel_issued ? ", cancel lost" : "",
               rec.drain ? ", drain" : "", rec.got, rec.expected);
    }
}

/* The model takes receives in posting order; it waits at a receive whose
 * cancel has not played out, since only its outcome says whether that
 * receive took part in matching */
void stress_peer::advance_model(in_flow &f)
{
    while (f.cursor < f.recs.size()) {
        recv_rec &rec = f.recs[f.cursor];
        if (rec.cancel_plan && !rec.done) {
            break;
        }
        ++f.cursor;
        if (rec.got == CANCELED) {
            continue;
        }
        rec.expected = f.model->match(rec.value, rec.ignore);
        if (rec.expected == NONE) {
            f.none_pending += !rec.done;
        } else {
            f.max_expected = std::max(f.max_expected, rec.expected);
        }
        if (rec.done) {
            compare(rec);
        }
    }
}

void stress_peer::on_recv_done(recv_rec &rec, ucs_status_t status,
                               const ucp_tag_recv_info_t *info)
{
    in_flow &f      = *rec.flow;
    size_t touched  = rec.size;

    if (rec.done) {
        report("flow %u receive #%zu completed twice", f.id, rec.index);
        return;
    }
    rec.done       = true;
    rec.req        = nullptr;
    rec.done_stamp = ++f.stamp;
    ++f.done;
    if (rec.expected == NONE) {
        --f.none_pending;
    }

    if (!buffer_pool::guards_intact(rec.buf, rec.size)) {
        report("flow %u receive #%zu: bytes around the %zu-byte buffer were "
               "written", f.id, rec.index, rec.size);
    }

    if (status == UCS_ERR_CANCELED) {
        rec.got = CANCELED;
        if (!rec.cancel_issued) {
            report("flow %u receive #%zu canceled, but no cancel was asked",
                   f.id, rec.index);
        }
        if (!all_bytes(rec.buf, rec.size, FILL_BYTE)) {
            report("flow %u receive #%zu canceled, but its buffer was written",
                   f.id, rec.index);
        }
        /* First-posted receive wins: no later receive of this flow may have
         * completed, before the cancel was asked, with a message this one
         * accepts */
        for (size_t j = rec.index + 1; j < f.recs.size(); ++j) {
            const recv_rec &later = f.recs[j];
            if (later.done && (later.got >= 0) &&
                (later.done_stamp <= rec.cancel_stamp) &&
                mpi_model::accepts(rec.value, rec.ignore,
                                   f.values[later.got])) {
                report("flow %u receive #%zu canceled after the later receive "
                       "#%zu took message %" PRId64 ", which it accepts",
                       f.id, rec.index, j, later.got);
                break;
            }
        }
        if (!rec.last_cancel) {
            ++m_me.cancels_won;
            f.reposts.emplace_back(rec.value, rec.ignore);
        }
        touched = 0;
    } else if (status != UCS_OK) {
        rec.got = NONE;
        report("flow %u receive #%zu completed with %s", f.id, rec.index,
               ucs_status_string(status));
    } else {
        uint32_t header[2];
        memcpy(header, rec.buf, HEADER);
        uint64_t seq = header[1];
        rec.got      = (int64_t)seq;
        if ((header[0] != f.id) || (seq >= f.n)) {
            report("flow %u receive #%zu: payload names flow %u message %u",
                   f.id, rec.index, header[0], header[1]);
            rec.got = NONE;
        } else {
            message m = script_message(m_config.seed, f.id, seq);
            if ((info->sender_tag != make_tag(f.id, m.value)) ||
                (info->length != m.size)) {
                report("flow %u receive #%zu message %" PRIu64 ": tag 0x%"
                       PRIx64 " length %zu, sent 0x%" PRIx64 " length %zu",
                       f.id, rec.index, seq, info->sender_tag, info->length,
                       make_tag(f.id, m.value), m.size);
            } else if (!payload_intact(rec.buf, m.size, m.key)) {
                report("flow %u receive #%zu message %" PRIu64 ": payload "
                       "corrupted", f.id, rec.index, seq);
            } else if (!all_bytes(rec.buf + m.size,
                                  std::min(GUARD, rec.size - m.size),
                                  FILL_BYTE)) {
                report("flow %u receive #%zu message %" PRIu64 ": bytes past "
                       "the message were written", f.id, rec.index, seq);
            }
            touched = std::min(rec.size, m.size + GUARD);
            ++f.received;
            ++m_me.messages;
            m_me.bytes += m.size;
            m_me.drained += rec.drain;
        }
        if (rec.expected != NOT_YET) {
            compare(rec);
        }
    }
    m_recv_bufs.put(rec.buf, rec.size, touched);
    rec.buf = nullptr;
}


bool stress_peer::outstanding(const in_flow &f) const
{
    return (f.posted - f.done - f.none_pending) > 0;
}

void stress_peer::start_round(rx_worker &w)
{
    std::vector<in_flow*> posting;

    for (in_flow *f : w.flows) {
        if (f->phase != SCRIPT) {
            continue;
        }
        /* Most rounds the sender waits for the receives (device and
         * software list matching), some it runs ahead (unexpected path,
         * cancels racing with arrivals) */
        f->quota = 1 + m_rng() % m_config.recv_window;
        f->ahead = (m_rng() % 4) ? 0 : 1 + m_rng() % m_config.send_ahead;
        /* A receive UCP keeps in software stops it from offloading later
         * ones until it completes: only some rounds have them */
        f->small = (m_rng() % 4) == 0;
        posting.push_back(f);
    }

    /* The flows' receives interleaved at random */
    while (!posting.empty()) {
        size_t k   = m_rng() % posting.size();
        in_flow &f = *posting[k];
        if (!f.reposts.empty()) {
            auto r = f.reposts.front();
            f.reposts.pop_front();
            post_recv(f, r.first, r.second, false, false, nullptr);
        } else if (f.next_script < f.n) {
            uint64_t i     = f.next_script++;
            recv_plan plan = script_recv(m_config.seed, f.id, i,
                                         m_config.cancel_permille);
            post_recv(f, f.values[i], plan.ignore, plan.small && f.small,
                      false, &plan);
        }
        if ((--f.quota == 0) ||
            (f.reposts.empty() && (f.next_script == f.n))) {
            posting[k] = posting.back();
            posting.pop_back();
        }
    }
    w.in_round = true;
}

void stress_peer::step_in(in_flow &f)
{
    switch (f.phase) {
    case SCRIPT:
        issue_cancels(f);
        advance_model(f);
        if ((f.next_script == f.n) && f.reposts.empty() && f.planned.empty() &&
            (f.cursor == f.recs.size())) {
            /* Messages no receive takes: one wildcard each, which the model
             * gives them oldest first */
            size_t left = f.model->left();
            for (size_t i = 0; i < left; ++i) {
                post_recv(f, 0, ANY_VALUE, false, true, nullptr);
            }
            advance_model(f);
            f.phase = DRAIN;
        }
        break;
    case DRAIN:
        if (f.posted - f.done == f.none_pending) {
            /* What is left has no message in the stream: must cancel */
            for (recv_rec &rec : f.recs) {
                if (!rec.done) {
                    rec.cancel_issued = true;
                    rec.last_cancel   = true;
                    rec.cancel_stamp  = f.stamp;
                    ++m_me.never_matched;
                    ucp_request_cancel(f.worker, rec.req);
                }
            }
            f.phase = FINISH;
        }
        break;
    case FINISH:
        if (f.done == f.posted) {
            if (f.received != f.n) {
                report("flow %u: %" PRIu64 " of %" PRIu64 " messages received",
                       f.id, f.received, f.n);
            }
            f.phase = DONE;
        }
        break;
    case DONE:
        break;
    }

    uint64_t allow = (f.phase == SCRIPT) ?
                     std::min<uint64_t>(f.n, std::max<uint64_t>(
                             f.received + f.ahead, f.max_expected + 1)) :
                     f.n;
    if (allow > f.allow) {
        f.allow = allow;
        m_shared->allow[f.id].store(allow, std::memory_order_release);
    }
}

} // namespace stress
} // namespace rc_tm_test
