#include "explorer_int.h"

namespace rc_tm_explore {

/* ----- the harness: UCP's expected and unexpected queues ----- */

/* What rc_tm posted to the device during f (trace only) */
void rc_tm_explorer::trace_list_ops(const std::function<void()> &f)
{
    std::vector<uint64_t> before = counters(m_receiver), after;
    std::string posted;

    f();
    after = counters(m_receiver);
    for (auto op : {std::make_pair(LIST_ADD, "ADD"),
                    std::make_pair(LIST_DEL, "DEL"),
                    std::make_pair(LIST_SYNC, "SYNC")}) {
        for (uint64_t i = before[op.first]; i < after[op.first]; ++i) {
            posted += std::string(posted.empty() ? "" : " ") + op.second;
        }
    }
    if (!posted.empty()) {
        EXPLORE_LOG("    rc_tm posts " + posted + " (device: " +
            std::to_string(softnic_test_pending_ops(m_srq)) + " pending, " +
            (softnic_test_in_phase(m_srq) ? "in phase" : "out of phase") + ", " +
            std::to_string(softnic_test_hw_unexp(m_srq)) + " unexpected)");
    }
}

void rc_tm_explorer::post(int r)
{
    const recv_spec &spec = m_scn->recvs[r];
    h_recv &rec           = *m_recvs[r];

    rec.posted = true;
    rec.t_post = m_now;

    for (auto it = m_unexpected.begin(); it != m_unexpected.end(); ++it) {
        if (tag_matches(m_scn->msgs[*it].tag, spec.tag, spec.mask)) {
            int m = *it;
            m_unexpected.erase(it);
            EXPLORE_LOG(std::to_string(m_now) + " U: post r" + std::to_string(r) +
                ": takes m" + std::to_string(m) + " from UCP's unexpected "
                "queue");
            deliver(r, m);
            return;
        }
    }

    m_expected.push_back(r);
    if (may_offload(r)) {
        offload(r);
    } else {
        EXPLORE_LOG(std::to_string(m_now) + " U: post r" + std::to_string(r) +
            ": kept in UCP's software queue");
    }
}

/* UCP's rule (ucp_tag_offload_post): a receive with a partial mask is not
 * offloaded while UCP holds any receive in software, a full-mask one not
 * while it holds a partial-mask one or one with the same tag; a sender
 * wildcard never is.  So no earlier software receive could take a message
 * that the offloaded receive matches. */
bool rc_tm_explorer::may_offload(int r) const
{
    const recv_spec &spec = m_scn->recvs[r];

    if (!spec.offload) {
        return false;
    }
    for (int q : m_expected) {
        const recv_spec &other = m_scn->recvs[q];
        if ((q == r) || m_recvs[q]->in_rc_tm) {
            continue;
        }
        if ((spec.mask != UINT64_MAX) || (other.mask != UINT64_MAX) ||
            (other.tag == spec.tag)) {
            return false;
        }
    }
    return true;
}

void rc_tm_explorer::offload(int r)
{
    const recv_spec &spec = m_scn->recvs[r];
    h_recv &rec           = *m_recvs[r];
    uct_iov_t iov         = rec.buf->iov(RECV_SIZE);
    ucs_status_t status;

    status = uct_iface_tag_recv_zcopy(m_receiver.iface, spec.tag, spec.mask,
                                      &iov, 1, &rec.ctx);
    if (status == UCS_OK) {
        rec.in_rc_tm = true;
    } else if ((status != UCS_ERR_NO_RESOURCE) &&
               (status != UCS_ERR_EXCEEDS_LIMIT)) {
        error("tag_recv_zcopy(r" + std::to_string(r) + "): " +
              ucs_status_string(status));
    }
    EXPLORE_LOG(std::to_string(m_now) + " U: post r" + std::to_string(r) +
        ": tag_recv_zcopy -> " + ucs_status_string(status) +
        ((status == UCS_OK) ? "" : " (stays in UCP's software queue)"));
}

void rc_tm_explorer::cancel(int r)
{
    h_recv &rec = *m_recvs[r];
    auto it     = std::find(m_expected.begin(), m_expected.end(), r);

    rec.cancel_called = true;
    rec.t_cancel      = m_now;
    if (it == m_expected.end()) {
        /* ucp_tag_exp_remove() finds nothing: the receive has its message */
        EXPLORE_LOG(std::to_string(m_now) + " U: cancel r" + std::to_string(r) +
            ": already matched, the cancel loses");
        return;
    }

    m_expected.erase(it);
    if (!rec.in_rc_tm) {
        rec.done     = true;
        rec.canceled = true;
        rec.t_done   = m_now;
        rec.by_harness = true;
        EXPLORE_LOG(std::to_string(m_now) + " U: cancel r" + std::to_string(r) +
            ": canceled in UCP's software queue");
        return;
    }

    ucs_status_t status = uct_iface_tag_recv_cancel(m_receiver.iface, &rec.ctx,
                                                    0);
    if (status != UCS_OK) {
        error("tag_recv_cancel(r" + std::to_string(r) + "): " +
              ucs_status_string(status));
    }
    m_dirty = true;   /* a software receive is reported from progress */
    EXPLORE_LOG(std::to_string(m_now) + " U: cancel r" + std::to_string(r) +
        ": tag_recv_cancel(force=0)");
}

/* A message rc_tm reported unexpected: UCP's expected queue first
 * (ucp_tag_exp_search, earliest posted), then its unexpected queue */
void rc_tm_explorer::incoming(int m)
{
    for (auto it = m_expected.begin(); it != m_expected.end(); ++it) {
        const recv_spec &spec = m_scn->recvs[*it];
        if (!tag_matches(m_scn->msgs[m].tag, spec.tag, spec.mask)) {
            continue;
        }

        int r       = *it;
        h_recv &rec = *m_recvs[r];
        m_expected.erase(it);
        if (rec.in_rc_tm) {
            /* ucp_eager_common_matched(): UCP took it, rc_tm must forget it */
            rec.force_canceled = true;
            ucs_status_t status = uct_iface_tag_recv_cancel(m_receiver.iface,
                                                            &rec.ctx, 1);
            if (status != UCS_OK) {
                error("forced tag_recv_cancel(r" + std::to_string(r) +
                      "): " + ucs_status_string(status));
            }
            EXPLORE_LOG("    UCP matches m" + std::to_string(m) + " to offloaded r" +
                std::to_string(r) + ": forced cancel");
        } else {
            EXPLORE_LOG("    UCP matches m" + std::to_string(m) + " to r" +
                std::to_string(r));
        }
        deliver(r, m);
        return;
    }

    EXPLORE_LOG("    m" + std::to_string(m) + " joins UCP's unexpected queue");
    m_unexpected.push_back(m);
}

void rc_tm_explorer::deliver(int r, int m)
{
    h_msg &msg = *m_msgs[m];

    if (m_scn->msgs[m].kind == MSG_RNDV) {
        start_get(r, m);
        return;
    }
    memcpy(m_recvs[r]->buf->ptr(), msg.data.data(), msg.data.size());
    harness_complete(r, m);
}

/* UCP's unexpected rendezvous: get_zcopy with the packed rkey, then the
 * sender is told (ATS; here its operation is released directly) */
void rc_tm_explorer::start_get(int r, int m)
{
    h_msg &msg = *m_msgs[m];
    h_get &get = (m_gets.emplace_back(), m_gets.back());
    ucs_status_t status;

    get.comp.func   = cb_get_done;
    get.comp.count  = 1;
    get.comp.status = UCS_OK;
    get.ex          = this;
    get.recv        = r;
    get.msg         = m;
    get.pending     = false;
    status = uct_rkey_unpack(m_component, msg.rkey_buf.data(), &get.rkey);
    if (status != UCS_OK) {
        error("rkey_unpack for m" + std::to_string(m) + ": " +
              ucs_status_string(status));
        return;
    }

    uct_iov_t iov = m_recvs[r]->buf->iov(msg_length(m));
    status = uct_ep_get_zcopy(m_receiver.eps.at(m_scn->msgs[m].conn), &iov, 1,
                              msg.remote_addr, get.rkey.rkey, &get.comp);
    if (status == UCS_OK) {
        cb_get_done(&get.comp);
    } else if (status == UCS_INPROGRESS) {
        ++m_gets_pending;
        get.pending = true;
        m_dirty     = true;
    } else {
        error("get_zcopy for m" + std::to_string(m) + ": " +
              ucs_status_string(status));
        uct_rkey_release(m_component, &get.rkey);
    }
}

void rc_tm_explorer::cb_get_done(uct_completion_t *comp)
{
    h_get *get         = reinterpret_cast<h_get*>(comp);
    rc_tm_explorer *ex = get->ex;
    h_msg &msg         = *ex->m_msgs[get->msg];

    if (get->pending) {
        --ex->m_gets_pending;
        get->pending = false;
    }
    if (comp->status != UCS_OK) {
        ex->error("get of m" + std::to_string(get->msg) + " failed: " +
                  ucs_status_string(comp->status));
    }
    uct_rkey_release(ex->m_component, &get->rkey);
    ex->harness_complete(get->recv, get->msg);

    if (uct_ep_tag_rndv_cancel(ex->m_sender.eps.at(
                                   ex->m_scn->msgs[get->msg].conn),
                               msg.rndv_op) != UCS_OK) {
        ex->error("rndv_cancel of m" + std::to_string(get->msg));
    }
    msg.acked = true;
}

void rc_tm_explorer::harness_complete(int r, int m)
{
    h_recv &rec = *m_recvs[r];
    const std::vector<char> &data = payload(m);

    if (rec.done) {
        error("r" + std::to_string(r) + " completed twice");
    }
    rec.done       = true;
    rec.by_harness = true;
    rec.msg        = m;
    rec.t_done     = m_now;
    if (m_msgs[m]->recv != mpi_model::NONE) {
        error("m" + std::to_string(m) + " given to a second receive");
    }
    m_msgs[m]->recv = r;
    if (memcmp(rec.buf->ptr(), data.data(), data.size()) != 0) {
        error("r" + std::to_string(r) + " does not hold m" + std::to_string(m) +
              "'s data");
    }
    EXPLORE_LOG("    r" + std::to_string(r) + " completes with m" + std::to_string(m) +
        " (by UCP)");
}

ucs_status_t rc_tm_explorer::on_eager(void *data, size_t length, uint64_t stag)
{
    int m = identify(data, length);

    ++m_cb_seq;
    if (m < 0) {
        error("unexpected eager message of unknown content (tag " + hex(stag) +
              ", " + std::to_string(length) + " bytes)");
        return UCS_OK;
    }

    const std::vector<char> &expect = payload(m);
    EXPLORE_LOG("    rc_tm reports m" + std::to_string(m) + " unexpected (eager)");
    if ((stag != m_scn->msgs[m].tag) ||
        (length != expect.size()) ||
        (memcmp(data, expect.data(), length) != 0)) {
        error("unexpected eager m" + std::to_string(m) + " with wrong tag, "
              "length or data");
    }
    observe(m, "unexpected");
    m_msgs[m]->t_obs = m_now;
    m_msgs[m]->data.assign((char*)data, (char*)data + length);
    incoming(m);
    return UCS_OK;
}

ucs_status_t rc_tm_explorer::on_rndv(uint64_t stag, const void *header,
                                     unsigned header_length,
                                     uint64_t remote_addr, size_t length,
                                     const void *rkey_buf)
{
    int m = identify(header, header_length);

    ++m_cb_seq;
    if ((m < 0) || (remote_addr == 0) || (m_scn->msgs[m].kind != MSG_RNDV)) {
        error("unexpected rendezvous of unknown origin (tag " + hex(stag) + ")");
        return UCS_OK;
    }

    EXPLORE_LOG("    rc_tm reports m" + std::to_string(m) + " unexpected (rendezvous)");
    if ((stag != m_scn->msgs[m].tag) || (length != msg_length(m)) ||
        (remote_addr != m_msgs[m]->sbuf->addr()) || (rkey_buf == NULL)) {
        error("unexpected rendezvous m" + std::to_string(m) + " with wrong "
              "tag, length, address or no rkey");
        return UCS_OK;
    }
    observe(m, "unexpected");
    m_msgs[m]->t_obs       = m_now;
    m_msgs[m]->remote_addr = remote_addr;
    m_msgs[m]->rkey_buf.assign((const char*)rkey_buf,
                               (const char*)rkey_buf +
                               m_md_attr.rkey_packed_size);
    incoming(m);
    return UCS_OK;
}


/* ----- rc_tm's callbacks of an offloaded receive ----- */

void rc_tm_explorer::cb_consumed(uct_tag_context_t *ctx)
{
    h_recv *rec        = reinterpret_cast<h_recv*>(ctx);
    rc_tm_explorer *ex = rec->ex;
    std::string name   = "r" + std::to_string(rec->id);

    ++rec->consumed_cbs;
    rec->consumed_seq = ++ex->m_cb_seq;
    rec->t_consumed   = ex->m_now;
    EXPLORE_LOG_OF(ex, "    rc_tm: tag_consumed_cb(" + name + ")");
    if (rec->force_canceled) {
        ex->error("tag_consumed_cb(" + name + ") after a forced cancel");
    }
    if (rec->done || (rec->consumed_cbs > 1)) {
        ex->error("tag_consumed_cb(" + name + ") again or after completion");
    }
    /* ucp_tag_offload_tag_consumed(): out of UCP's expected queue */
    ex->m_expected.remove(rec->id);
}

void rc_tm_explorer::cb_completed(uct_tag_context_t *ctx, uct_tag_t stag,
                                  uint64_t imm, size_t length,
                                  void *inline_data, ucs_status_t status)
{
    h_recv *rec        = reinterpret_cast<h_recv*>(ctx);
    rc_tm_explorer *ex = rec->ex;
    std::string name   = "r" + std::to_string(rec->id);

    ++rec->completed_cbs;
    rec->completed_seq = ++ex->m_cb_seq;
    EXPLORE_LOG_OF(ex, "    rc_tm: completed_cb(" + name + ", " +
            ucs_status_string(status) + ")");
    if (rec->force_canceled) {
        ex->error("completed_cb(" + name + ") after a forced cancel");
        return;
    }
    if (rec->done) {
        ex->error("completed_cb(" + name + ") of a completed receive");
        return;
    }
    if (std::find(ex->m_expected.begin(), ex->m_expected.end(), rec->id) !=
        ex->m_expected.end()) {
        /* UCP would keep a completed request in its expected queue */
        ex->error("completed_cb(" + name + ") while UCP still expects it "
                  "(no tag_consumed_cb)");
        ex->m_expected.remove(rec->id);
    }
    rec->done   = true;
    rec->t_done = ex->m_now;

    if (status == UCS_ERR_CANCELED) {
        rec->canceled = true;
        if (!rec->cancel_called) {
            ex->error(name + " canceled, but nobody canceled it");
        }
        if (rec->consumed_cbs != 0) {
            ex->error(name + " canceled after tag_consumed_cb");
        }
        return;
    }
    if (status != UCS_OK) {
        ex->error(name + " completed with " + ucs_status_string(status));
        return;
    }

    int m = ex->identify(rec->buf->ptr(), length);
    if (m < 0) {
        ex->error(name + " completed with data of no message of this "
                  "schedule");
        return;
    }
    const std::vector<char> &expect = ex->payload(m);
    if ((stag != ex->m_scn->msgs[m].tag) || (imm != 0) ||
        (length != expect.size()) || (inline_data != NULL) ||
        (memcmp(rec->buf->ptr(), expect.data(), expect.size()) != 0)) {
        ex->error(name + " completed with m" + std::to_string(m) + " but "
                  "wrong tag, length or data");
    }
    if (rec->consumed_cbs != 1) {
        ex->error(name + " completed with a message without tag_consumed_cb");
    }
    EXPLORE_LOG_OF(ex, "    " + name + " completes with m" + std::to_string(m) +
            " (by rc_tm)");
    rec->msg = m;
    ex->observe(m, "by rc_tm");
    ex->m_msgs[m]->t_obs = (rec->t_consumed >= 0) ? rec->t_consumed :
                           ex->m_now;
    if (ex->m_msgs[m]->recv != mpi_model::NONE) {
        ex->error("m" + std::to_string(m) + " given to a second receive");
    }
    ex->m_msgs[m]->recv = rec->id;
}

void rc_tm_explorer::cb_rndv(uct_tag_context_t *ctx, uct_tag_t stag,
                             const void *header, unsigned header_length,
                             ucs_status_t status, unsigned flags)
{
    h_recv *rec = reinterpret_cast<h_recv*>(ctx);

    rec->ex->error("rndv_cb(r" + std::to_string(rec->id) + "): no software "
                   "rendezvous request was sent");
}

} // namespace rc_tm_explore
