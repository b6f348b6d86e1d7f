#include "explorer.h"
#include "explore_state.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <set>
#include <sstream>

using namespace rc_tm_test;

/* Trace lines are built only when tracing */
#define EXPLORE_LOG_OF(_ex, _line) \
    do { \
        if ((_ex)->m_trace) { \
            (_ex)->log_line(_line); \
        } \
    } while (0)
#define EXPLORE_LOG(_line) EXPLORE_LOG_OF(this, _line)

namespace rc_tm_explore {

namespace {

const uint32_t MSG_MAGIC     = 0x4d534721;
const size_t   HDR_LEN       = 16;      /* magic, id, run, conn */
const size_t   RECV_SIZE     = 512;
const unsigned PACKET_SIZE   = 64;      /* UCX_RC_TM_SOFT_PACKET_SIZE */
const unsigned MAX_DEPTH     = 120;
const unsigned POLL_BATCH    = 16;      /* rc_tm's per-poll completion batch */

/* by msg_kind: eager, eager longer than PACKET_SIZE (two steps), rndv */
const size_t msg_sizes[] = {32, 160, 256};

std::string hex(uint64_t v)
{
    std::ostringstream os;
    os << "0x" << std::hex << v;
    return os.str();
}

std::string mask_str(uint64_t mask)
{
    return (mask == UINT64_MAX) ? "full" : hex(mask);
}

} // namespace


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


/* ----- harness state ----- */

struct rc_tm_explorer::h_recv {
    uct_tag_context_t ctx;          /* first: callbacks find us from it */
    rc_tm_explorer    *ex;
    int               id;
    std::unique_ptr<mapped_buffer> buf;

    /* per schedule */
    bool              posted, in_rc_tm, force_canceled, cancel_called;
    bool              done, canceled, by_harness;
    int               msg;
    int               t_post, t_cancel, t_consumed, t_done;
    int               consumed_cbs, completed_cbs;
    uint64_t          consumed_seq, completed_seq;

    void reset()
    {
        posted = in_rc_tm = force_canceled = cancel_called = false;
        done = canceled = by_harness = false;
        msg          = mpi_model::NONE;
        t_post       = t_cancel = t_consumed = t_done = -1;
        consumed_cbs = completed_cbs = 0;
        consumed_seq = completed_seq = 0;
        memset(buf->ptr(), 0, buf->m_buf.size());
    }
};

struct rc_tm_explorer::h_msg {
    std::unique_ptr<mapped_buffer> sbuf;     /* rendezvous source */

    /* per schedule */
    int               t_arrival, t_obs, delivered, recv;
    void              *rndv_op;
    test_completion   rndv_comp;
    bool              acked;                 /* UCP finished it itself */
    std::vector<char> data;                  /* eager payload kept by UCP */
    uint64_t          remote_addr;
    std::vector<char> rkey_buf;

    void reset()
    {
        t_arrival = t_obs = -1;
        delivered = 0;
        recv      = mpi_model::NONE;
        rndv_op   = nullptr;
        rndv_comp = test_completion();
        acked     = false;
        data.clear();
        remote_addr = 0;
        rkey_buf.clear();
    }
};

struct rc_tm_explorer::h_get {
    uct_completion_t  comp;          /* first */
    rc_tm_explorer    *ex;
    int               recv, msg;
    bool              pending;
    uct_rkey_bundle_t rkey;
};


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
