/*
 * The stress test's private parts, shared by its sources: ucp_stress.cc
 * (the two processes, setup, sends, the run), stress_recv.cc (posting,
 * cancels, completions checked against the model) and stress_script.cc
 * (the traffic scripts both processes derive from the seed).
 */
#ifndef RC_TM_TEST_STRESS_STRESS_INT_H_
#define RC_TM_TEST_STRESS_STRESS_INT_H_

#include "ucp_stress.h"
#include "mpi_model.h"

#include "../common/rc_tm_config.h"
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
namespace stress {

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

/* One message of a flow's script */
struct message {
    unsigned value;
    size_t   size;
    uint64_t key;      /* pattern of the payload */
};

/* One receive of a flow's script: aimed at message i's value */
struct recv_plan {
    unsigned ignore;
    bool     cancel;
    unsigned cancel_delay;   /* progress rounds before the cancel */
    bool     small;
};

uint64_t mix(uint64_t x);
uint64_t script_hash(uint64_t seed, uint64_t salt, unsigned flow, uint64_t i);
double now_sec();
uint64_t make_tag(unsigned flow, unsigned value);
message script_message(uint64_t seed, unsigned flow, uint64_t seq);
recv_plan script_recv(uint64_t seed, unsigned flow, uint64_t i,
                      unsigned cancel_permille);
size_t recv_buffer_size(unsigned value, unsigned ignore, bool small);
uint64_t lcg(uint64_t x);
void fill_payload(char *p, size_t len, unsigned flow, uint32_t seq,
                  uint64_t key);
bool payload_intact(const char *p, size_t len, uint64_t key);
bool all_bytes(const char *p, size_t len, uint8_t byte);

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

void recv_cb(void *request, ucs_status_t status,
             const ucp_tag_recv_info_t *info, void *user_data);
void send_cb(void *request, ucs_status_t status, void *user_data);

} // namespace stress
} // namespace rc_tm_test

#endif
