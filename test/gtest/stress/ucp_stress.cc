/*
 * Randomized tag traffic through UCP over rc_tm between two processes.
 *
 * Each process opens its own UCP context (UCX_TLS=rc_tm, the module linked
 * in) with several workers; every worker sends to and receives from every
 * worker of the other process.  One (sending worker, receiving worker) pair
 * is a flow: the flow id is the sender field of the tag, and every receive
 * names its flow (UCP's tag_sender_mask), so flows never compete for a
 * receive.  What each flow sends and what its receiver posts are scripts
 * drawn from the seed, known to both sides; the receiver runs the reference
 * model (mpi_model.h) over them and compares every outcome with it.  Cancels
 * are the only outcome the scripts leave open: a canceled receive either
 * reports UCS_ERR_CANCELED (it is then reposted, and the model skips it) or
 * completes with the message the model gives it.  docs/testing.md has the
 * whole argument.
 */
#include "stress_int.h"

namespace rc_tm_test {

namespace stress {

namespace {

stress_peer *log_peer; /* for the log handler */

ucs_log_func_rc_t log_handler(const char *file, unsigned line,
                              const char *function, ucs_log_level_t level,
                              const ucs_log_component_config_t *comp_conf,
                              const char *message, va_list ap)
{
    if ((level <= UCS_LOG_LEVEL_ERROR) && (log_peer != nullptr)) {
        char text[256];
        va_list copy;
        va_copy(copy, ap);
        vsnprintf(text, sizeof(text), message, copy);
        va_end(copy);
        ++log_peer->me().log_errors;
        log_peer->report("UCX logged an error at %s:%u: %s", file, line, text);
    }
    return UCS_LOG_FUNC_RC_CONTINUE;
}

} // namespace

void send_cb(void *request, ucs_status_t status, void *user_data)
{
    send_slot *slot = static_cast<send_slot*>(user_data);

    slot->flow->peer->on_send_done(slot, status);
    ucp_request_free(request);
}

void stress_peer::report(const char *fmt, ...)
{
    char text[REPORT_LEN - 32];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    ++m_me.divergences;
    if (m_me.nreports < MAX_REPORTS) {
        snprintf(m_me.reports[m_me.nreports++], REPORT_LEN, "process %u: %s",
                 m_rank, text);
        fprintf(stderr, "[stress] process %u: %s\n", m_rank, text);
    }
}

uint64_t stress_peer::flow_messages(unsigned flow) const
{
    uint64_t flows = 2ull * m_workers * m_workers;
    return m_config.messages / flows + (flow < m_config.messages % flows);
}

bool stress_peer::exchange(const void *out, size_t out_len,
                           std::vector<char> &in)
{
    size_t len;

    if ((write(m_fd, &out_len, sizeof(out_len)) != sizeof(out_len)) ||
        (write(m_fd, out, out_len) != (ssize_t)out_len) ||
        (read(m_fd, &len, sizeof(len)) != sizeof(len)) || (len > MAX_ADDR)) {
        return false;
    }
    in.resize(len);
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(m_fd, in.data() + got, len - got);
        if (r <= 0) {
            return false;
        }
        got += r;
    }
    return true;
}

bool stress_peer::barrier()
{
    char token = 'b';
    return (write(m_fd, &token, 1) == 1) && (read(m_fd, &token, 1) == 1);
}

void stress_peer::set_device_order(ucp_worker_h worker)
{
    uct_iface_h ifaces[8];
    unsigned count = rc_tm_test_worker_ifaces(worker, "rc_tm", ifaces, 8);
    tm_dev_srq_t *srq;
    tm_dev_t *dev;

    if (count == 0) {
        report("worker has no rc_tm interface (is the module linked?)");
    }
    for (unsigned i = 0; i < count; ++i) {
        uct_rc_tm_iface_device(ifaces[i], &dev, &srq);
        if (m_config.random_order && softnic_is_soft(dev) &&
            m_steered.insert(dev).second) {
            softnic_test_set_order(dev, SOFTNIC_ORDER_RANDOM,
                              mix(m_config.seed + m_rank));
        }
    }
}

bool stress_peer::setup()
{
    ucp_config_t *config;
    ucs_status_t status;

    status = ucp_config_read(NULL, NULL, &config);
    if (status != UCS_OK) {
        report("ucp_config_read: %s", ucs_status_string(status));
        return false;
    }
    ucp_config_modify(config, "TLS", rc_tm_test_tls());
    ucp_params_t params    = {};
    params.field_mask      = UCP_PARAM_FIELD_FEATURES |
                             UCP_PARAM_FIELD_TAG_SENDER_MASK;
    params.features        = UCP_FEATURE_TAG;
    params.tag_sender_mask = SENDER_MASK;
    status = ucp_init(&params, config, &m_context);
    ucp_config_release(config);
    if (status != UCS_OK) {
        report("ucp_init: %s", ucs_status_string(status));
        return false;
    }

    for (unsigned w = 0; w < m_workers; ++w) {
        ucp_worker_params_t wparams = {};
        wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
        ucp_worker_h worker;
        status = ucp_worker_create(m_context, &wparams, &worker);
        if (status != UCS_OK) {
            report("ucp_worker_create: %s", ucs_status_string(status));
            return false;
        }
        m_worker.push_back(worker);
        set_device_order(worker);
    }

    /* Addresses of all workers, both ways */
    std::vector<char> mine, theirs;
    for (ucp_worker_h worker : m_worker) {
        ucp_address_t *addr;
        size_t len;
        if (ucp_worker_get_address(worker, &addr, &len) != UCS_OK) {
            return false;
        }
        mine.insert(mine.end(), (char*)&len, (char*)&len + sizeof(len));
        mine.insert(mine.end(), (char*)addr, (char*)addr + len);
        ucp_worker_release_address(worker, addr);
    }
    if (!exchange(mine.data(), mine.size(), theirs)) {
        report("address exchange failed");
        return false;
    }

    unsigned peer = 1 - m_rank;
    size_t off    = 0;
    for (unsigned b = 0; b < m_workers; ++b) {
        size_t len;
        memcpy(&len, theirs.data() + off, sizeof(len));
        const char *addr = theirs.data() + off + sizeof(len);
        off += sizeof(len) + len;
        for (unsigned a = 0; a < m_workers; ++a) {
            ucp_ep_params_t eparams = {};
            eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
            eparams.address    = (const ucp_address_t*)addr;
            ucp_ep_h ep;
            status = ucp_ep_create(m_worker[a], &eparams, &ep);
            if (status != UCS_OK) {
                report("ucp_ep_create: %s", ucs_status_string(status));
                return false;
            }
            m_eps.push_back(ep);
            out_flow f;
            f.peer = this;
            f.id   = (m_rank * m_workers + a) * m_workers + b;
            f.ep   = ep;
            f.n    = flow_messages(f.id);
            m_out.push_back(f);
        }
    }

    m_rng.seed(mix(m_config.seed ^ (m_rank + 1)));
    for (unsigned b = 0; b < m_workers; ++b) {
        m_rx.emplace_back();
        m_rx.back().worker = m_worker[b];
        for (unsigned a = 0; a < m_workers; ++a) {
            m_in.emplace_back();
            in_flow &f = m_in.back();
            f.peer   = this;
            f.id     = (peer * m_workers + a) * m_workers + b;
            f.worker = m_worker[b];
            f.n      = flow_messages(f.id);
            f.values.resize(f.n);
            for (uint64_t j = 0; j < f.n; ++j) {
                f.values[j] = script_message(m_config.seed, f.id, j).value;
            }
            f.model = new mpi_model(f.values);
            m_rx.back().flows.push_back(&f);
        }
    }
    return true;
}

void stress_peer::progress()
{
    for (ucp_worker_h worker : m_worker) {
        ucp_worker_progress(worker);
    }
}

void stress_peer::on_send_done(send_slot *slot, ucs_status_t status)
{
    if (status != UCS_OK) {
        report("flow %u: a send completed with %s", slot->flow->id,
               ucs_status_string(status));
    }
    ++slot->flow->completed;
    m_send_bufs.put(slot->buf, slot->size, 0);
    delete slot;
}

void stress_peer::send_next(out_flow &f)
{
    uint64_t seq = f.next++;
    message m    = script_message(m_config.seed, f.id, seq);
    size_t cap   = CLASSES[m.value >> 2].max;
    send_slot *slot = new send_slot{&f, m_send_bufs.get(cap), cap};

    fill_payload(slot->buf, m.size, f.id, (uint32_t)seq, m.key);
    ucp_request_param_t param = {};
    param.op_attr_mask        = UCP_OP_ATTR_FIELD_CALLBACK |
                                UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send             = send_cb;
    param.user_data           = slot;
    /* Every other send asks for fast completion: UCP's protocol v2 (UCX
     * 1.16 and later) gives those, above its eager range, to the device's
     * rendezvous and the others to its own (a request the device matches),
     * so both rendezvous run; UCX 1.13 gives both to the device */
    if (seq & 1) {
        param.op_attr_mask   |= UCP_OP_ATTR_FLAG_FAST_CMPL;
    }
    void *req = ucp_tag_send_nbx(f.ep, slot->buf, m.size,
                                 make_tag(f.id, m.value), &param);
    if (!UCS_PTR_IS_PTR(req)) {
        on_send_done(slot, UCS_PTR_STATUS(req));
    }
}

void stress_peer::step_out(out_flow &f)
{
    uint64_t allow = std::min(f.n, m_shared->allow[f.id].load(
                                           std::memory_order_acquire));
    for (unsigned burst = 0; (burst < 64) && (f.next < allow); ++burst) {
        send_next(f);
    }
}

/* Where each flow stands, for a run that did not end */
void stress_peer::dump_state()
{
    for (in_flow &f : m_in) {
        fprintf(stderr, "[stress] process %u in flow %u: phase %d posted %"
                PRIu64 " done %" PRIu64 " received %" PRIu64 "/%" PRIu64
                " script %" PRIu64 " model at %zu, %" PRIu64 " without "
                "message, max expected %" PRId64 " allow %" PRIu64 "\n",
                m_rank, f.id, f.phase, f.posted, f.done, f.received, f.n,
                f.next_script, f.cursor, f.none_pending, f.max_expected,
                f.allow);
    }
    for (out_flow &f : m_out) {
        fprintf(stderr, "[stress] process %u out flow %u: sent %" PRIu64
                " completed %" PRIu64 "/%" PRIu64 " allow %" PRIu64 "\n",
                m_rank, f.id, f.next, f.completed, f.n,
                (uint64_t)m_shared->allow[f.id].load());
    }
}

void stress_peer::wait_req(void *req, double deadline)
{
    if (!UCS_PTR_IS_PTR(req)) {
        return;
    }
    while ((ucp_request_check_status(req) == UCS_INPROGRESS) &&
           (now_sec() < deadline)) {
        progress();
    }
    if (ucp_request_check_status(req) == UCS_INPROGRESS) {
        report("teardown: a request did not complete");
        return; /* leaked: the process is failing anyway */
    }
    ucp_request_free(req);
}

void stress_peer::teardown()
{
    double deadline = now_sec() + 30;

    for (ucp_ep_h ep : m_eps) {
        ucp_request_param_t param = {};
        wait_req(ucp_ep_close_nbx(ep, &param), deadline);
    }
    barrier();
    for (ucp_worker_h worker : m_worker) {
        ucp_worker_destroy(worker);
    }
    if (m_context != nullptr) {
        ucp_cleanup(m_context);
    }
    for (in_flow &f : m_in) {
        delete f.model;
    }
}

void stress_peer::run()
{
    /* Process-wide totals: this run's share is what it adds (a forked child
     * starts with its parent's) */
    uint64_t before[C_LAST];
    uct_rc_tm_counters_total(before, C_LAST);

    log_peer = this;
    ucs_log_push_handler(log_handler);

    if (setup() && barrier()) {
        double start   = now_sec();
        m_deadline     = start + m_config.timeout;
        unsigned iter  = 0;
        bool done      = false;

        while (!done) {
            progress();
            ++m_iter;
            for (rx_worker &w : m_rx) {
                if (w.in_round) {
                    w.in_round = false;
                    for (in_flow *f : w.flows) {
                        w.in_round = w.in_round || outstanding(*f) ||
                                     !f->planned.empty();
                    }
                }
                if (!w.in_round) {
                    start_round(w);
                }
            }
            for (in_flow &f : m_in) {
                step_in(f);
            }
            for (out_flow &f : m_out) {
                step_out(f);
            }
            done = true;
            for (in_flow &f : m_in) {
                done = done && (f.phase == DONE);
            }
            for (out_flow &f : m_out) {
                done = done && (f.completed == f.n);
            }
            if (((++iter & 1023) == 0) && (now_sec() > m_deadline)) {
                report("no end after %.0f s", m_config.timeout);
                dump_state();
                break;
            }
        }
        m_me.seconds  = now_sec() - start;
        m_me.finished = done;
        m_me.done.store(1);

        /* The peer may still need this process: its reads of our send
         * buffers are ours to answer with nothing, but acks and FINs are */
        while (!m_shared->rank[1 - m_rank].done.load() &&
               (now_sec() < m_deadline)) {
            progress();
        }
    } else {
        m_me.done.store(1);
    }

    teardown();
    uct_rc_tm_counters_total(m_me.counters, C_LAST);
    for (unsigned i = 0; i < C_LAST; ++i) {
        m_me.counters[i] -= before[i];
    }
    ucs_log_pop_handler();
    log_peer = nullptr;
}

/* Sets UCX variables for the run, and restores them in the parent */
class env_guard {
public:
    explicit env_guard(const stress_config &config)
    {
        for (const auto &kv : config.env) {
            const char *old = getenv(kv.first.c_str());
            m_saved.emplace_back(kv.first, old ? old : "", old != nullptr);
            setenv(kv.first.c_str(), kv.second.c_str(), 1);
        }
    }

    ~env_guard()
    {
        for (const auto &s : m_saved) {
            if (std::get<2>(s)) {
                setenv(std::get<0>(s).c_str(), std::get<1>(s).c_str(), 1);
            } else {
                unsetenv(std::get<0>(s).c_str());
            }
        }
    }

private:
    std::vector<std::tuple<std::string, std::string, bool>> m_saved;
};

} // namespace stress

using namespace stress;

uint64_t stress_seed()
{
    const char *env = getenv("RC_TM_STRESS_SEED");
    if ((env != nullptr) && (*env != '\0')) {
        return strtoull(env, nullptr, 0);
    }
    std::random_device rd;
    return ((uint64_t)rd() << 32) | rd();
}

const char *stress_counter_name(unsigned index)
{
    return uct_rc_tm_counter_name(index);
}

stress_result run_ucp_stress(const stress_config &config)
{
    stress_result result;
    int fds[2];

    if ((config.workers == 0) || (config.workers > MAX_WORKERS) ||
        (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0)) {
        result.reports.push_back("bad configuration or no socketpair");
        return result;
    }

    void *mem = mmap(NULL, sizeof(shared_state), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        result.reports.push_back("mmap failed");
        return result;
    }
    shared_state *shared = new (mem) shared_state();
    env_guard env(config);

    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        stress_peer(config, 1, fds[1], shared).run();
        _exit(0);
    }

    close(fds[1]);
    if (pid < 0) {
        result.reports.push_back("fork failed");
    } else {
        stress_peer(config, 0, fds[0], shared).run();
    }
    close(fds[0]);

    /* The child ends by itself within its own deadlines; past them, it hangs */
    int status     = 0;
    double limit   = now_sec() + 60;
    pid_t waited   = 0;
    while ((pid > 0) &&
           ((waited = waitpid(pid, &status, WNOHANG)) == 0) &&
           (now_sec() < limit)) {
        usleep(10000);
    }
    if ((pid > 0) && (waited == 0)) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        result.reports.push_back("the child process hung at its end: killed");
    } else if ((pid > 0) && (!WIFEXITED(status) || WEXITSTATUS(status))) {
        result.reports.push_back("the child process failed (status " +
                                 std::to_string(status) + ")");
    }

    result.completed = (pid > 0) && shared->rank[0].finished &&
                       shared->rank[1].finished;
    for (unsigned r = 0; r < 2; ++r) {
        const shared_rank &s  = shared->rank[r];
        result.messages      += s.messages;
        result.bytes         += s.bytes;
        result.divergences   += s.divergences;
        result.cancels       += s.cancels;
        result.cancels_won   += s.cancels_won;
        result.small_recvs   += s.small_recvs;
        result.drained       += s.drained;
        result.never_matched += s.never_matched;
        result.log_errors    += s.log_errors;
        result.seconds        = std::max(result.seconds, s.seconds);
        memcpy(result.counters[r], s.counters, sizeof(s.counters));
        for (unsigned i = 0; i < s.nreports; ++i) {
            result.reports.push_back(s.reports[i]);
        }
    }
    shared->~shared_state();
    munmap(mem, sizeof(shared_state));
    return result;
}

} // namespace rc_tm_test
