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
#include "ucp_stress.h"
#include "mpi_model.h"

#include "../common/softnic_steer.h"

#include <ucp/api/ucp.h>
#include <uct/api/uct.h>
#include <ucs/debug/log_def.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <new>
#include <random>
#include <set>
#include <tuple>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern "C" {
unsigned uct_rc_tm_counters_total(uint64_t *counters, unsigned max);
const char *uct_rc_tm_counter_name(unsigned index);
void uct_rc_tm_iface_device(uct_iface_h iface, tm_dev_t **dev_p,
                            tm_dev_srq_t **srq_p);
unsigned rc_tm_test_worker_ifaces(ucp_worker_h worker, const char *tl_name,
                                  uct_iface_h *ifaces, unsigned max);
}

namespace rc_tm_test {

namespace {

const unsigned MAX_WORKERS = 4;
const unsigned MAX_FLOWS   = 2 * MAX_WORKERS * MAX_WORKERS;
const unsigned MAX_REPORTS = 8;
const unsigned REPORT_LEN  = 400;
const size_t   MAX_ADDR    = 4096;

/* Tag: marker | flow (the sender field) | value (4 bits the masks play with) */
const uint64_t TAG_MARKER  = 0x5aull << 56;
const unsigned FLOW_SHIFT  = 40;
const uint64_t SENDER_MASK = 0xffull << FLOW_SHIFT;
const unsigned ANY_VALUE   = mpi_model::NUM_VALUES - 1;

/* A tag value's two high bits choose its message sizes.  Receive buffers
 * are 1 KiB or more (UCX_TM_THRESH), so UCP offloads them, except the
 * SMALL_RECV ones it must keep in software. */
struct size_class {
    size_t   min, max;
    size_t   recv_buf;
    unsigned weight;      /* percent of messages */
};
const size_class CLASSES[4] = {
    {8,     256,    1024,   60},   /* eager short / bcopy */
    {257,   4096,   4096,   30},   /* eager bcopy / zcopy */
    {4097,  32768,  32768,   8},   /* both sides of the rendezvous threshold */
    {32769, 131072, 131072,  2}    /* rendezvous */
};
const size_t SMALL_RECV        = 256;
const unsigned SMALL_PERCENT   = 30;  /* of exact receives of class 0 */

/* Value bits a receive ignores (0: exact tag; 0xf: any tag of its sender) */
struct ignore_choice {
    unsigned ignore, weight;
};
const ignore_choice IGNORES[] = {
    {0x0, 55}, {0x1, 10}, {0x2, 5}, {0x3, 10}, {0x4, 4}, {0x7, 6}, {0xc, 4},
    {0xf, 6}
};

const size_t  GUARD      = 64;   /* bytes checked around and after data */
const uint8_t GUARD_BYTE = 0xa5;
const uint8_t FILL_BYTE  = 0xee;
const size_t  HEADER     = 8;    /* flow, sequence number */

const uint64_t MSG_SALT  = 0x6d657373616765ull;
const uint64_t RECV_SALT = 0x72656365697665ull;

uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x  = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x  = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t script_hash(uint64_t seed, uint64_t salt, unsigned flow, uint64_t i)
{
    return mix(mix(mix(seed ^ salt) + flow) + i);
}

double now_sec()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

uint64_t make_tag(unsigned flow, unsigned value)
{
    return TAG_MARKER | ((uint64_t)flow << FLOW_SHIFT) | value;
}

/* One message of a flow's script */
struct message {
    unsigned value;
    size_t   size;
    uint64_t key;      /* pattern of the payload */
};

message script_message(uint64_t seed, unsigned flow, uint64_t seq)
{
    uint64_t h = script_hash(seed, MSG_SALT, flow, seq);
    unsigned r = h % 100, cls = 0, acc = 0;
    message m;

    for (cls = 0; cls < 3; ++cls) {
        acc += CLASSES[cls].weight;
        if (r < acc) {
            break;
        }
    }
    m.value = (cls << 2) | ((h >> 8) & 3);
    m.size  = CLASSES[cls].min +
              (h >> 16) % (CLASSES[cls].max - CLASSES[cls].min + 1);
    m.key   = mix(h);
    return m;
}

/* One receive of a flow's script: aimed at message i's value */
struct recv_plan {
    unsigned ignore;
    bool     cancel;
    unsigned cancel_delay;   /* progress rounds before the cancel */
    bool     small;
};

recv_plan script_recv(uint64_t seed, unsigned flow, uint64_t i,
                      unsigned cancel_permille)
{
    uint64_t h = script_hash(seed, RECV_SALT, flow, i);
    unsigned r = h % 100, acc = 0;
    recv_plan p;

    p.ignore = ANY_VALUE;
    for (const ignore_choice &c : IGNORES) {
        acc += c.weight;
        if (r < acc) {
            p.ignore = c.ignore;
            break;
        }
    }
    p.cancel       = ((h >> 8) % 1000) < cancel_permille;
    p.cancel_delay = (h >> 20) % 256;
    p.small        = ((h >> 28) % 100) < SMALL_PERCENT;
    return p;
}

size_t recv_buffer_size(unsigned value, unsigned ignore, bool small)
{
    size_t size = 0;

    for (unsigned cls = 0; cls < 4; ++cls) {
        if ((((value >> 2) ^ cls) & ~(ignore >> 2) & 3) == 0) {
            size = std::max(size, CLASSES[cls].recv_buf);
        }
    }
    if (small && (ignore == 0) && ((value >> 2) == 0)) {
        size = SMALL_RECV;
    }
    return size;
}

uint64_t lcg(uint64_t x)
{
    return x * 6364136223846793005ull + 1442695040888963407ull;
}

void fill_payload(char *p, size_t len, unsigned flow, uint32_t seq,
                  uint64_t key)
{
    uint32_t header[2] = {flow, seq};
    size_t off;

    memcpy(p, header, HEADER);
    for (off = HEADER; off + 8 <= len; off += 8) {
        key = lcg(key);
        memcpy(p + off, &key, 8);
    }
    if (off < len) {
        key = lcg(key);
        memcpy(p + off, &key, len - off);
    }
}

bool payload_intact(const char *p, size_t len, uint64_t key)
{
    size_t off;

    for (off = HEADER; off + 8 <= len; off += 8) {
        key = lcg(key);
        if (memcmp(p + off, &key, 8) != 0) {
            return false;
        }
    }
    if (off < len) {
        key = lcg(key);
        return memcmp(p + off, &key, len - off) == 0;
    }
    return true;
}

bool all_bytes(const char *p, size_t len, uint8_t byte)
{
    for (size_t i = 0; i < len; ++i) {
        if ((uint8_t)p[i] != byte) {
            return false;
        }
    }
    return true;
}

/* ----- what the two processes share (MAP_SHARED, before fork) ----- */

struct shared_rank {
    std::atomic<int> done;          /* its own flows finished */
    int              finished;      /* ran to the end */
    uint64_t         messages, bytes, divergences, cancels, cancels_won;
    uint64_t         small_recvs, drained, never_matched, log_errors;
    double           seconds;
    uint64_t         counters[C_LAST];
    unsigned         nreports;
    char             reports[MAX_REPORTS][REPORT_LEN];
};

struct shared_state {
    /* A flow's sender may send messages [0, allow): the receiver raises it
     * as it posts (flow control outside UCP; it decides nothing about
     * matching) */
    std::atomic<uint64_t> allow[MAX_FLOWS];
    shared_rank           rank[2];
};

/* Buffers with guard bytes on both sides, kept for reuse (registration
 * cache hits, no mmap churn) */
class buffer_pool {
public:
    ~buffer_pool()
    {
        for (auto &kv : m_free) {
            for (char *base : kv.second) {
                delete[] base;
            }
        }
    }

    char *get(size_t size)
    {
        std::vector<char*> &list = m_free[size];
        char *base;

        if (!list.empty()) {
            base = list.back();
            list.pop_back();
        } else {
            base = new char[size + 2 * GUARD];
            memset(base, GUARD_BYTE, GUARD);
            memset(base + GUARD, FILL_BYTE, size);
            memset(base + GUARD + size, GUARD_BYTE, GUARD);
        }
        return base + GUARD;
    }

    /* touched: bytes from the start that may have been written */
    void put(char *data, size_t size, size_t touched)
    {
        memset(data, FILL_BYTE, std::min(size, touched));
        m_free[size].push_back(data - GUARD);
    }

    static bool guards_intact(const char *data, size_t size)
    {
        return all_bytes(data - GUARD, GUARD, GUARD_BYTE) &&
               all_bytes(data + size, GUARD, GUARD_BYTE);
    }

private:
    std::map<size_t, std::vector<char*>> m_free;
};

class stress_peer;

const int64_t NOT_YET  = -2;  /* model has not reached the receive */
const int64_t NONE     = -1;  /* no message of the stream for it */
const int64_t CANCELED = -3;

struct in_flow;

struct recv_rec {
    in_flow  *flow;
    size_t   index;
    char     *buf;
    size_t   size;
    void     *req          = nullptr;
    int64_t  expected      = NOT_YET;
    int64_t  got           = NOT_YET;
    uint64_t done_stamp    = 0;
    uint64_t cancel_stamp  = 0;
    uint64_t cancel_at     = 0;
    unsigned value, ignore;
    bool     done          = false;
    bool     cancel_plan   = false;
    bool     cancel_issued = false;
    bool     last_cancel   = false;   /* end of run: no message for it */
    bool     drain         = false;
};

enum flow_phase { SCRIPT, DRAIN, FINISH, DONE };

struct in_flow {
    stress_peer            *peer;
    unsigned               id;
    ucp_worker_h           worker;
    uint64_t               n;
    std::vector<uint8_t>   values;     /* of the sender's messages */
    mpi_model              *model  = nullptr;
    std::deque<recv_rec>   recs;       /* posting order */
    size_t                 cursor  = 0;/* next receive for the model */
    uint64_t               next_script = 0;
    std::deque<std::pair<unsigned, unsigned>> reposts;
    std::vector<size_t>    planned;    /* receives with a cancel to issue */
    uint64_t               posted = 0, done = 0, none_pending = 0;
    uint64_t               received = 0, stamp = 0;
    int64_t                max_expected = -1;
    uint64_t               allow = 0;
    uint64_t               ahead = 0;  /* messages sent before receives */
    uint64_t               quota = 0;  /* receives left in this round */
    bool                   small = false; /* round with small receives */
    flow_phase             phase = SCRIPT;
};

/* A receiving worker posts in rounds: a batch of receives for each of its
 * flows, then it waits until they all completed.  UCP offloads a receive
 * only while it keeps none in software, so an ever-refilled queue would
 * keep everything in software once one small receive got there. */
struct rx_worker {
    ucp_worker_h           worker;
    std::vector<in_flow*>  flows;
    bool                   in_round = false;
};

struct out_flow {
    stress_peer  *peer;
    unsigned     id;
    ucp_ep_h     ep;
    uint64_t     n, next = 0, completed = 0;
};

struct send_slot {
    out_flow *flow;
    char     *buf;
    size_t   size;
};

stress_peer *log_peer; /* for the log handler */

class stress_peer {
public:
    stress_peer(const stress_config &config, unsigned rank, int fd,
                shared_state *shared) :
        m_config(config), m_rank(rank), m_fd(fd), m_shared(shared),
        m_me(shared->rank[rank]), m_workers(config.workers)
    {
    }

    void run();
    void report(const char *fmt, ...) __attribute__((format(printf, 2, 3)));
    void on_recv_done(recv_rec &rec, ucs_status_t status,
                      const ucp_tag_recv_info_t *info);
    void on_send_done(send_slot *slot, ucs_status_t status);

    shared_rank &me() { return m_me; }

private:
    bool setup();
    void teardown();
    bool exchange(const void *out, size_t out_len, std::vector<char> &in);
    bool barrier();
    void progress();
    void post_recv(in_flow &f, unsigned value, unsigned ignore, bool small,
                   bool drain, const recv_plan *plan);
    void issue_cancels(in_flow &f);
    void start_round(rx_worker &w);
    bool outstanding(const in_flow &f) const;
    void advance_model(in_flow &f);
    void compare(recv_rec &rec);
    void step_in(in_flow &f);
    void step_out(out_flow &f);
    void send_next(out_flow &f);
    void set_device_order(ucp_worker_h worker);
    void dump_state();
    uint64_t flow_messages(unsigned flow) const;
    void wait_req(void *req, double deadline);

    const stress_config     &m_config;
    unsigned                m_rank;
    int                     m_fd;
    shared_state            *m_shared;
    shared_rank             &m_me;
    unsigned                m_workers;
    ucp_context_h           m_context = nullptr;
    std::vector<ucp_worker_h> m_worker;
    std::vector<ucp_ep_h>   m_eps;
    std::deque<in_flow>     m_in;
    std::deque<rx_worker>   m_rx;
    std::mt19937_64         m_rng;
    uint64_t                m_iter = 0;
    std::deque<out_flow>    m_out;
    buffer_pool             m_recv_bufs, m_send_bufs;
    std::set<tm_dev_t*>     m_steered;
    double                  m_deadline = 0;
};

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

void recv_cb(void *request, ucs_status_t status,
             const ucp_tag_recv_info_t *info, void *user_data)
{
    recv_rec *rec = static_cast<recv_rec*>(user_data);

    rec->flow->peer->on_recv_done(*rec, status, info);
    ucp_request_free(request);
}

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
    ucp_config_modify(config, "TLS", "rc_tm");
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

} // namespace

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
