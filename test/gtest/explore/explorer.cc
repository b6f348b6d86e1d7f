#include "explorer_int.h"

namespace rc_tm_explore {

int scenario::num_conns() const
{
    int n = 1;
    for (const msg_spec &m : msgs) {
        n = std::max(n, m.conn + 1);
    }
    return n;
}

std::string scenario::describe() const
{
    static const char *kinds[] = {"eager", "eager-long", "rndv"};
    std::ostringstream os;

    os << name << ": LIST_SIZE=" << list_size << " LIST_MAX_OPS=" << max_ops
       << " TM_SW_LIST_SIZE=" << sw_list_size << " TM_PROMOTE_THRESH="
       << promote_thresh << "\n  messages:";
    for (size_t m = 0; m < msgs.size(); ++m) {
        os << " m" << m << "(c" << msgs[m].conn << " " << hex(msgs[m].tag)
           << " " << kinds[msgs[m].kind] << ")";
    }
    os << "\n  receives:";
    for (size_t r = 0; r < recvs.size(); ++r) {
        os << " r" << r << "(" << hex(recvs[r].tag) << "/"
           << mask_str(recvs[r].mask) << (recvs[r].offload ? "" : " kept-by-ucp")
           << ")";
    }
    os << "\n  program:";
    for (const user_op &op : program) {
        os << ((op.kind == user_op::POST) ? " post(r" : " cancel(r") << op.recv
           << ")";
    }
    return os.str();
}

std::string action::str() const
{
    switch (kind) {
    case ACT_USER:
        return "U";
    case ACT_OP:
        return "O";
    case ACT_ARRIVAL:
        return "A" + std::to_string(conn);
    case ACT_DATA:
        return "D";
    case ACT_PROGRESS:
        return "P";
    }
    return "?";
}

std::string schedule_str(const std::vector<action> &schedule)
{
    std::string s;
    for (const action &a : schedule) {
        s += (s.empty() ? "" : ",") + a.str();
    }
    return s;
}

bool parse_schedule(const std::string &text, std::vector<action> *schedule)
{
    std::istringstream is(text);
    std::string tok;

    schedule->clear();
    while (std::getline(is, tok, ',')) {
        if (tok == "U") {
            schedule->push_back({ACT_USER, 0});
        } else if (tok == "O") {
            schedule->push_back({ACT_OP, 0});
        } else if (tok == "D") {
            schedule->push_back({ACT_DATA, 0});
        } else if (tok == "P") {
            schedule->push_back({ACT_PROGRESS, 0});
        } else if ((tok.size() == 2) && (tok[0] == 'A') && isdigit(tok[1])) {
            schedule->push_back({ACT_ARRIVAL, tok[1] - '0'});
        } else {
            return false;
        }
    }
    return true;
}


/* ----- setup ----- */

rc_tm_explorer::rc_tm_explorer()
{
}

rc_tm_explorer::~rc_tm_explorer()
{
}

void rc_tm_explorer::TearDown()
{
    m_recvs.clear();
    m_msgs.clear();
    uct_fixture::TearDown();
}

void rc_tm_explorer::setup(const scenario &s)
{
    /* buffers go before their memory domain */
    m_recvs.clear();
    m_msgs.clear();
    close();

    m_scn = &s;
    /* the explorer steps the device itself: inline progress, whatever the
     * environment says (the ThreadSanitizer build sets thread) */
    open({{"LIST_SIZE", std::to_string(s.list_size)},
          {"LIST_MAX_OPS", std::to_string(s.max_ops)},
          {"SOFT_PACKET_SIZE", std::to_string(PACKET_SIZE)},
          {"SOFT_PROGRESS", "inline"}},
         {{"TM_SW_LIST_SIZE", std::to_string(s.sw_list_size)},
          {"TM_PROMOTE_THRESH", std::to_string(s.promote_thresh)}});
    ASSERT_NE(nullptr, m_receiver.iface);
    for (int c = 1; c < s.num_conns(); ++c) {
        connect(m_sender, m_receiver);
    }
    ASSERT_FALSE(HasFatalFailure());

    uct_rc_tm_iface_device(m_receiver.iface, &m_dev, &m_srq);
    ASSERT_TRUE(softnic_is_soft(m_dev));
    tm_dev_t *sender_dev;
    uct_rc_tm_iface_device(m_sender.iface, &sender_dev, &m_sender_srq);
    ASSERT_EQ(m_dev, sender_dev);   /* one memory domain: MANUAL for both */

    m_receiver.on_eager = [this](void *data, size_t length, unsigned flags,
                                 uint64_t stag, uint64_t imm) {
        return on_eager(data, length, stag);
    };
    m_receiver.on_rndv = [this](unsigned flags, uint64_t stag,
                                const void *header, unsigned header_length,
                                uint64_t remote_addr, size_t length,
                                const void *rkey_buf) {
        return on_rndv(stag, header, header_length, remote_addr, length,
                       rkey_buf);
    };

    m_model_recvs.clear();
    m_model_msgs.clear();
    m_recv_ctxs.clear();
    for (size_t r = 0; r < s.recvs.size(); ++r) {
        std::unique_ptr<h_recv> rec(new h_recv());
        memset(&rec->ctx, 0, sizeof(rec->ctx));
        rec->ctx.tag_consumed_cb = cb_consumed;
        rec->ctx.completed_cb    = cb_completed;
        rec->ctx.rndv_cb         = cb_rndv;
        rec->ex  = this;
        rec->id  = r;
        rec->buf.reset(new mapped_buffer(m_component, m_md, RECV_SIZE, 0));
        m_recv_ctxs.push_back(&rec->ctx);
        m_recvs.push_back(std::move(rec));
        m_model_recvs.push_back({s.recvs[r].tag, s.recvs[r].mask});
    }
    m_conn_msgs.assign(s.num_conns(), {});
    for (size_t m = 0; m < s.msgs.size(); ++m) {
        std::unique_ptr<h_msg> msg(new h_msg());
        if (s.msgs[m].kind == MSG_RNDV) {
            msg->sbuf.reset(new mapped_buffer(m_component, m_md,
                                              msg_sizes[MSG_RNDV], 0));
        }
        m_msgs.push_back(std::move(msg));
        m_conn_msgs[s.msgs[m].conn].push_back(m);
        m_model_msgs.push_back({s.msgs[m].conn, s.msgs[m].tag});
    }
    ASSERT_FALSE(HasFatalFailure());

    /* Which device connection is which endpoint: one active message on each,
     * seen as the only arrival */
    softnic_test_set_mode(m_dev, SOFTNIC_MODE_MANUAL);
    m_conns.assign(s.num_conns(), nullptr);
    for (int c = 0; c < s.num_conns(); ++c) {
        softnic_event_t ev[8];
        unsigned n, i, arrivals = 0;

        ASSERT_EQ(UCS_OK, uct_ep_am_short(m_sender.eps[c], 0, c, NULL, 0));
        n = softnic_test_events(m_srq, ev, 8);
        for (i = 0; i < n; ++i) {
            if (ev[i].kind == SOFTNIC_EV_ARRIVAL) {
                m_conns[c] = ev[i].qp;
                ++arrivals;
            }
        }
        ASSERT_EQ(1u, arrivals);
        ASSERT_EQ(0, softnic_test_step_arrival(m_conns[c]));
        size_t received = m_receiver.am_received.size();
        ASSERT_TRUE(wait_for([&] {
            return m_receiver.am_received.size() > received;
        }));
    }
}

void rc_tm_explorer::begin_schedule()
{
    ++m_run;
    m_now          = 0;
    m_pc           = 0;
    m_cb_seq       = 0;
    m_dirty        = false;
    m_gets_pending = 0;
    m_gets.clear();
    m_expected.clear();
    m_unexpected.clear();
    m_errors.clear();
    m_log.clear();
    m_next_arrival.assign(m_scn->num_conns(), 0);
    m_base_unexp = softnic_test_hw_unexp(m_srq);
    for (auto &rec : m_recvs) {
        rec->reset();
    }
    m_payloads.clear();
    for (size_t m = 0; m < m_msgs.size(); ++m) {
        m_payloads.push_back(make_payload(m));
    }
    for (size_t m = 0; m < m_msgs.size(); ++m) {
        m_msgs[m]->reset();
        if (m_msgs[m]->sbuf) {
            const std::vector<char> &data = payload(m);
            memcpy(m_msgs[m]->sbuf->ptr(), data.data(), data.size());
        }
    }
    send_messages();
}

static size_t pack_vector(void *dest, void *arg)
{
    auto *v = static_cast<std::vector<char>*>(arg);
    memcpy(dest, v->data(), v->size());
    return v->size();
}

/* All messages go out first: the device sees each only at its ARRIVAL */
void rc_tm_explorer::send_messages()
{
    for (size_t m = 0; m < m_msgs.size(); ++m) {
        const msg_spec &spec = m_scn->msgs[m];
        uct_ep_h ep          = m_sender.eps[spec.conn];
        const std::vector<char> &data = payload(m);

        if (spec.kind != MSG_RNDV) {
            ssize_t packed = uct_ep_tag_eager_bcopy(
                    ep, spec.tag, 0, pack_vector,
                    const_cast<std::vector<char>*>(&data), 0);
            if (packed != (ssize_t)data.size()) {
                error("eager send of m" + std::to_string(m) + " failed: " +
                      std::to_string(packed));
            }
            continue;
        }

        uct_iov_t iov = m_msgs[m]->sbuf->iov(data.size());
        m_msgs[m]->rndv_op = uct_ep_tag_rndv_zcopy(ep, spec.tag, data.data(),
                                                   HDR_LEN, &iov, 1, 0,
                                                   &m_msgs[m]->rndv_comp.comp);
        if (UCS_PTR_IS_ERR(m_msgs[m]->rndv_op)) {
            error("rendezvous send of m" + std::to_string(m) + " failed: " +
                  ucs_status_string(UCS_PTR_STATUS(m_msgs[m]->rndv_op)));
            m_msgs[m]->rndv_op = nullptr;
        }
    }
}


/* ----- payloads ----- */

size_t rc_tm_explorer::msg_length(int m) const
{
    return msg_sizes[m_scn->msgs[m].kind];
}

/* Header {magic, id, schedule, connection}, then a pattern of both: data
 * from another message or an earlier schedule never passes for this one */
const std::vector<char> &rc_tm_explorer::payload(int m) const
{
    return m_payloads.at(m);
}

std::vector<char> rc_tm_explorer::make_payload(int m) const
{
    std::vector<char> data(msg_length(m));
    uint32_t hdr[4] = {MSG_MAGIC, (uint32_t)m, (uint32_t)m_run,
                       (uint32_t)m_scn->msgs[m].conn};

    memcpy(data.data(), hdr, sizeof(hdr));
    for (size_t i = HDR_LEN; i < data.size(); ++i) {
        data[i] = (char)(m * 31 + m_run * 7 + i);
    }
    return data;
}

/* The message whose header data starts with, or -1 */
int rc_tm_explorer::identify(const void *data, size_t length) const
{
    uint32_t hdr[4];

    if (length < HDR_LEN) {
        return -1;
    }
    memcpy(hdr, data, sizeof(hdr));
    if ((hdr[0] != MSG_MAGIC) || (hdr[1] >= m_msgs.size()) ||
        (hdr[2] != (uint32_t)m_run)) {
        return -1;
    }
    return hdr[1];
}

void rc_tm_explorer::error(const std::string &what)
{
    m_errors.push_back("step " + std::to_string(m_now) + ": " + what);
    EXPLORE_LOG("  ERROR: " + what);
}

void rc_tm_explorer::log_line(const std::string &line)
{
    if (m_trace) {
        m_log += line + "\n";
    }
}

/* The first time the harness learns what became of message m */
void rc_tm_explorer::observe(int m, const char *how)
{
    h_msg &msg = *m_msgs[m];

    if (++msg.delivered > 1) {
        error("m" + std::to_string(m) + " delivered twice (now " + how + ")");
    }
}


/* ----- choice points ----- */

void rc_tm_explorer::enabled(std::vector<action> *actions)
{
    softnic_event_t ev[8];
    unsigned n, i;

    actions->clear();
    if (m_pc < m_scn->program.size()) {
        actions->push_back({ACT_USER, 0});
    }

    n = softnic_test_events(m_srq, ev, 8);
    for (i = 0; i < n; ++i) {
        switch (ev[i].kind) {
        case SOFTNIC_EV_OP:
            actions->push_back({ACT_OP, 0});
            break;
        case SOFTNIC_EV_ARRIVAL: {
            auto it = std::find(m_conns.begin(), m_conns.end(), ev[i].qp);
            if (it == m_conns.end()) {
                error("arrival on an unknown connection");
            } else {
                actions->push_back({ACT_ARRIVAL, (int)(it - m_conns.begin())});
            }
            break;
        }
        case SOFTNIC_EV_DATA:
            actions->push_back({ACT_DATA, 0});
            break;
        }
    }

    if (m_dirty) {
        actions->push_back({ACT_PROGRESS, 0});
    }
}

/* The sender is not explored: whatever its device and software can do
 * (take FINs, complete its rendezvous) happens at once after each step, as
 * a sender whose NIC and progress are always ahead.  The receiver's sends
 * on a connection complete in order once the sender's device took them, so
 * a frozen sender would hold back the receiver's later reads forever. */
void rc_tm_explorer::drain_sender()
{
    softnic_event_t ev[8];

    while (softnic_test_events(m_sender_srq, ev, 8) > 0) {
        softnic_test_step(m_sender_srq, &ev[0]);
    }
    uct_iface_progress(m_sender.iface);
}

void rc_tm_explorer::execute(const action &act)
{
    int ret;

    ++m_now;
    switch (act.kind) {
    case ACT_USER:
        user_step();
        drain_sender();
        return;
    case ACT_PROGRESS:
        progress_step();
        drain_sender();
        return;
    case ACT_OP:
        ret = softnic_test_step_op(m_srq);
        EXPLORE_LOG(std::to_string(m_now) + " O: device processes a list operation "
            "(" + std::to_string(softnic_test_pending_ops(m_srq)) + " left, " +
            (softnic_test_in_phase(m_srq) ? "in phase" : "out of phase") + ")");
        break;
    case ACT_ARRIVAL: {
        std::vector<int> &order = m_conn_msgs.at(act.conn);
        int next = m_next_arrival.at(act.conn)++;
        if (next >= (int)order.size()) {
            error("an arrival on c" + std::to_string(act.conn) +
                  " with no message left to send on it");
        } else {
            m_msgs[order[next]]->t_arrival = m_now;
            EXPLORE_LOG(std::to_string(m_now) + " A" + std::to_string(act.conn) +
                ": m" + std::to_string(order[next]) + " reaches the device");
        }
        ret = softnic_test_step_arrival(m_conns.at(act.conn));
        break;
    }
    case ACT_DATA:
        EXPLORE_LOG(std::to_string(m_now) + " D: device finishes a transfer");
        ret = softnic_test_step_data(m_srq);
        break;
    default:
        ret = EINVAL;
        break;
    }

    if (ret != 0) {
        error("device step " + act.str() + " failed: " + strerror(ret));
    }
    /* every device event leaves a completion for software */
    m_dirty = true;
    drain_sender();
}

void rc_tm_explorer::user_step()
{
    const user_op &op = m_scn->program.at(m_pc++);

    auto step = [&] {
        if (op.kind == user_op::POST) {
            post(op.recv);
        } else {
            cancel(op.recv);
        }
    };
    if (m_trace) {
        trace_list_ops(step);
    } else {
        step();
    }
}

/* One progress point of the receiver's software: uct_iface_progress(), and
 * again while its own reads and gets wait for their send completions (the
 * soft device looks for them every 16th poll); the device does not move
 * meanwhile, so nothing else can happen in those calls */
void rc_tm_explorer::progress_step()
{
    const unsigned max_calls = 64;
    unsigned count, calls;

    EXPLORE_LOG(std::to_string(m_now) + " P: uct_iface_progress(receiver)");
    m_dirty = false;
    auto progress = [&] {
        count = uct_iface_progress(m_receiver.iface);
        for (calls = 1; (calls < max_calls) && tx_outstanding(); ++calls) {
            drain_sender();
            uct_iface_progress(m_receiver.iface);
        }
    };
    if (m_trace) {
        trace_list_ops(progress);
    } else {
        progress();
    }
    /* a full batch may have left completions behind */
    if ((count >= POLL_BATCH) || tx_outstanding()) {
        m_dirty = true;
    }
}

bool rc_tm_explorer::tx_outstanding() const
{
    return (m_gets_pending > 0) ||
           (rc_tm_explore_tx_outstanding(m_receiver.eps.data(),
                                         m_receiver.eps.size()) > 0);
}


/* ----- the search ----- */

bool rc_tm_explorer::contains(const std::vector<action> &v, const action &a)
{
    return std::find(v.begin(), v.end(), a) != v.end();
}

/* Replays the schedule on the stack, then extends it with the first action
 * possible at each choice point until none is left, or (REDUCE_STATE) until
 * it reaches a state whose subtree was explored already */
rc_tm_explorer::run_result
rc_tm_explorer::run(std::vector<dfs_node> *stack, reduction reduce,
                    std::string *report, std::string *outcome_key,
                    uint64_t *merged_count)
{
    std::vector<action> actions;
    state_key key;
    bool keyed;

    /* Every schedule starts alike, but the provider's 32-bit count of
     * unexpected messages and the 16 bits rc_tm carries part at 0x10000
     * (from there on every unexpected message asks for SYNC): a schedule
     * that could take rc_tm's count there starts on a fresh setup */
    if (sw_unexpected() + m_msgs.size() > UINT16_MAX) {
        setup(*m_scn);
        if (HasFatalFailure()) {
            *report += "  setting up again failed\n";
            return RUN_FAILED;
        }
    }
    begin_schedule();
    for (size_t d = 0; d < stack->size(); ++d) {
        const dfs_node &node = (*stack)[d];

        /* the state description is recomputed where it is checked: every
         * step when validating, else where the schedule turns away from
         * the previous one (nondeterminism shows as different actions) */
        enabled(&actions);
        keyed = node.keyed;
        if (node.keyed &&
            ((reduce == REDUCE_VALIDATE) || (d + 1 == stack->size()))) {
            keyed = current_state(&key);
        } else {
            key = node.key;
        }
        if ((actions != node.enabled) || (keyed != node.keyed) ||
            (keyed && !(key == node.key))) {
            *report += "  replay diverged at step " + std::to_string(d + 1) +
                       ": the device or software is not deterministic\n";
            return RUN_FAILED;
        }
        execute(node.chosen);
    }

    for (;;) {
        enabled(&actions);
        keyed = ((reduce == REDUCE_STATE) || (reduce == REDUCE_VALIDATE)) &&
                current_state(&key);
        if (keyed) {
            auto it = m_memo.find(key);
            if ((it != m_memo.end()) && (reduce == REDUCE_STATE)) {
                *merged_count = it->second;
                return cleanup(report) ? RUN_MERGED : RUN_FAILED;
            }
            for (const dfs_node &node : *stack) {
                if (node.keyed && (node.key == key)) {
                    *report += "  the schedule came back to an earlier state: "
                               "the protocol can loop forever\n";
                    return RUN_FAILED;
                }
            }
        }

        if (actions.empty()) {
            if (keyed && (reduce == REDUCE_STATE)) {
                m_memo[key] = 1;
            }
            break;
        }
        if (stack->size() >= MAX_DEPTH) {
            *report += "  schedule longer than " + std::to_string(MAX_DEPTH) +
                       " steps: the protocol does not settle\n";
            return RUN_FAILED;
        }
        stack->push_back({actions, {}, actions[0], keyed, key, 0});
        execute(actions[0]);
    }

    bool ok = check_schedule(report, outcome_key);
    ok = cleanup(report) && ok;
    return ok ? RUN_COMPLETE : RUN_FAILED;
}

explore_stats rc_tm_explorer::explore(const scenario &s, reduction reduce)
{
    auto start = std::chrono::steady_clock::now();
    std::vector<dfs_node> stack;
    std::set<std::string> outcomes;
    explore_stats stats;

    setup(s);
    if (HasFatalFailure()) {
        stats.failed = true;
        return stats;
    }
    m_memo.clear();
    m_memo_path.clear();

    for (;;) {
        std::string report, key;
        uint64_t merged_count = 0;
        run_result result = run(&stack, reduce, &report, &key, &merged_count);
        std::vector<action> schedule;
        uint64_t covered = 0;

        for (const dfs_node &n : stack) {
            schedule.push_back(n.chosen);
        }
        stats.steps    += stack.size();
        stats.max_depth = std::max(stats.max_depth, (unsigned)stack.size());

        switch (result) {
        case RUN_FAILED: {
            std::string trace;
            bool again = replay(s, schedule, &trace);
            ADD_FAILURE() << "rc_tm diverged from the MPI model\n"
                          << s.describe() << "\n  schedule: "
                          << schedule_str(schedule) << "\n" << report
                          << "  replayed on a fresh setup: "
                          << (again ? "held (depends on earlier schedules)" :
                                      "fails again")
                          << "\n" << trace
                          << "  replay: RC_TM_EXPLORE_REPLAY='" << s.name
                          << ":" << schedule_str(schedule) << "'\n";
            stats.failed = true;
            stats.seconds = std::chrono::duration<double>(
                                std::chrono::steady_clock::now() -
                                start).count();
            return stats;
        }
        case RUN_COMPLETE:
            ++stats.executed;
            outcomes.insert(key);
            covered = 1;
            break;
        case RUN_MERGED:
            ++stats.merged;
            covered = merged_count;
            break;
        }

        /* next sibling of the deepest choice point with one left; a node
         * whose choices are all done has its subtree counted and kept */
        if (stack.empty()) {
            stats.interleavings += covered;
        } else {
            stack.back().covered += covered;
        }
        while (!stack.empty()) {
            dfs_node &top = stack.back();
            const action *next = nullptr;

            top.done.push_back(top.chosen);
            for (const action &a : top.enabled) {
                if (!contains(top.done, a)) {
                    next = &a;
                    break;
                }
            }
            if (next != nullptr) {
                top.chosen = *next;
                break;
            }
            covered = top.covered;
            if (top.keyed && (reduce == REDUCE_VALIDATE)) {
                std::vector<action> path;
                for (const dfs_node &n : stack) {
                    path.push_back(n.chosen);
                }
                path.pop_back();
                auto it = m_memo.find(top.key);
                if ((it != m_memo.end()) && (it->second != covered)) {
                    ADD_FAILURE() << s.name << ": one state, two subtrees ("
                                  << m_memo_path[top.key] << " -> "
                                  << it->second << " interleavings; "
                                  << schedule_str(path) << " -> " << covered
                                  << "): the state description misses "
                                     "something";
                    stats.failed = true;
                    return stats;
                }
                if (it == m_memo.end()) {
                    m_memo_path[top.key] = schedule_str(path);
                }
            }
            if (top.keyed) {
                m_memo[top.key] = covered;
            }
            stack.pop_back();
            if (stack.empty()) {
                stats.interleavings += covered;
            } else {
                stack.back().covered += covered;
            }
        }
        if (stack.empty()) {
            break;
        }
    }

    stats.states            = m_memo.size();
    stats.distinct_outcomes = outcomes.size();
    stats.seconds = std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - start).count();
    m_memo.clear();
    m_memo_path.clear();
    return stats;
}

bool rc_tm_explorer::replay(const scenario &s,
                            const std::vector<action> &schedule,
                            std::string *report)
{
    std::vector<action> actions;
    std::string key;
    bool ok = true;

    setup(s);
    if (HasFatalFailure()) {
        return false;
    }
    m_trace = true;
    begin_schedule();
    for (const action &a : schedule) {
        enabled(&actions);
        if (!contains(actions, a)) {
            *report += "  " + a.str() + " is not possible at step " +
                       std::to_string(m_now + 1) + " (possible: " +
                       schedule_str(actions) + ")\n";
            ok = false;
            break;
        }
        execute(a);
    }
    if (ok) {
        enabled(&actions);
        if (!actions.empty()) {
            *report += "  the schedule is not complete: " +
                       schedule_str(actions) + " still possible\n";
            ok = false;
        } else {
            ok = check_schedule(report, &key);
            if (ok) {
                *report += "  outcome: " + key + "\n";
            }
        }
    }
    std::string log = m_log;
    ok = cleanup(report) && ok;
    m_trace = false;
    *report += "  trace:\n" + log;
    return ok;
}

} // namespace rc_tm_explore
