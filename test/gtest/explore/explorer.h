/*
 * Interleaving explorer for rc_tm's tag matching (docs/explorer.md).
 *
 * A scenario is a few tagged messages on one or two connections and a
 * program of receive posts and cancels.  The explorer drives rc_tm over the
 * software device in MANUAL mode and enumerates, depth first, every order of
 * the events that can happen at the receiver:
 *
 *   U    the next operation of the program (post or cancel a receive),
 *        done by a harness that plays UCP's part as UCX 1.13.1 does;
 *   O    the device processes its oldest pending list operation;
 *   A<c> the device judges and places the next message of connection c;
 *   D    the device finishes a two-step transfer (DATA_VALID, rendezvous);
 *   P    software progress: uct_iface_progress() of the receiver.
 *
 * Each schedule is replayed from the start on interfaces brought back to an
 * equivalent clean state (no snapshot is possible: the device's rings are
 * shared memory).  A schedule that reaches a state whose subtree was
 * explored before stops there (explore_state.h); a complete one is checked
 * against the reference model (mpi_model.h) and the callback rules.  A
 * divergence fails the test with the schedule, which RC_TM_EXPLORE_REPLAY
 * replays with a trace.
 */
#ifndef RC_TM_TEST_EXPLORE_EXPLORER_H_
#define RC_TM_TEST_EXPLORE_EXPLORER_H_

#include "mpi_model.h"
#include "../uct/uct_fixture.h"

#include "../common/softnic_steer.h"

#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace rc_tm_explore {

enum msg_kind {
    MSG_EAGER,        /* one-step match (MATCH|DATA_VALID) */
    MSG_EAGER_LONG,   /* longer than the device's packet: MATCH, then DATA */
    MSG_RNDV          /* hardware rendezvous: MATCH, then DATA (read + FIN) */
};

struct msg_spec {
    int       conn;
    uint64_t  tag;
    msg_kind  kind;
};

struct recv_spec {
    uint64_t  tag;
    uint64_t  mask;
    /* false: UCP never offloads it (a sender wildcard), it stays in UCP's
     * software queue and blocks offloading later receives that overlap */
    bool      offload = true;
};

struct user_op {
    enum kind_t { POST, CANCEL } kind;
    int recv;
};

struct scenario {
    std::string              name;
    unsigned                 list_size    = 2;     /* UCX_RC_TM_LIST_SIZE */
    unsigned                 max_ops      = 256;   /* UCX_RC_TM_LIST_MAX_OPS */
    unsigned                 sw_list_size = 65536; /* UCX_RC_TM_TM_SW_LIST_SIZE */
    unsigned                 promote_thresh = 0;   /* UCX_RC_TM_TM_PROMOTE_THRESH */
    std::vector<msg_spec>    msgs;
    std::vector<recv_spec>   recvs;
    std::vector<user_op>     program;

    int num_conns() const;
    std::string describe() const;
};

enum action_kind { ACT_USER, ACT_OP, ACT_ARRIVAL, ACT_DATA, ACT_PROGRESS };

struct action {
    action_kind kind;
    int         conn;   /* ACT_ARRIVAL */

    bool operator==(const action &other) const
    {
        return (kind == other.kind) && (conn == other.conn);
    }
    std::string str() const;
};

std::string schedule_str(const std::vector<action> &schedule);
bool parse_schedule(const std::string &text, std::vector<action> *schedule);

/* How much of the search the explorer may skip (docs/explorer.md) */
enum reduction {
    REDUCE_NONE,     /* every schedule executed */
    REDUCE_STATE,    /* a state's subtree explored once (default) */
    REDUCE_VALIDATE  /* none, but check that equal states have equal
                        subtrees (tests the state description) */
};

struct explore_stats {
    uint64_t interleavings    = 0;  /* complete schedules covered */
    uint64_t executed         = 0;  /* complete schedules executed */
    uint64_t merged           = 0;  /* cut: state seen before */
    uint64_t states           = 0;  /* distinct states (REDUCE_STATE) */
    uint64_t steps            = 0;  /* actions executed, replays included */
    unsigned max_depth        = 0;
    unsigned distinct_outcomes = 0;
    double   seconds          = 0;
    bool     failed           = false;
};

class rc_tm_explorer : public rc_tm_test::uct_fixture {
protected:
    rc_tm_explorer();
    ~rc_tm_explorer();
    void TearDown() override;

    /* Every interleaving of s; fails the test at the first divergence */
    explore_stats explore(const scenario &s, reduction reduce);

    /* One schedule on a fresh setup, with a trace; true if it held */
    bool replay(const scenario &s, const std::vector<action> &schedule,
                std::string *report);

private:
    struct h_recv;
    struct h_msg;
    struct h_get;

    /* setup, per scenario and per schedule */
    void setup(const scenario &s);
    void begin_schedule();
    void send_messages();

    /* the choice points */
    void enabled(std::vector<action> *actions);
    void execute(const action &act);
    void user_step();
    void progress_step();
    void drain_sender();
    bool tx_outstanding() const;

    /* the harness: UCP's side */
    void post(int r);
    void cancel(int r);
    void offload(int r);
    bool may_offload(int r) const;
    void incoming(int m);
    void deliver(int r, int m);
    void start_get(int r, int m);
    void harness_complete(int r, int m);
    ucs_status_t on_eager(void *data, size_t length, uint64_t stag);
    ucs_status_t on_rndv(uint64_t stag, const void *header,
                         unsigned header_length, uint64_t remote_addr,
                         size_t length, const void *rkey_buf);
    static void cb_consumed(uct_tag_context_t *ctx);
    static void cb_completed(uct_tag_context_t *ctx, uct_tag_t stag,
                             uint64_t imm, size_t length, void *inline_data,
                             ucs_status_t status);
    static void cb_rndv(uct_tag_context_t *ctx, uct_tag_t stag,
                        const void *header, unsigned header_length,
                        ucs_status_t status, unsigned flags);
    static void cb_get_done(uct_completion_t *comp);

    /* checking */
    const std::vector<char> &payload(int m) const;
    std::vector<char> make_payload(int m) const;
    size_t msg_length(int m) const;
    int identify(const void *data, size_t length) const;
    void observe(int m, const char *how);
    void error(const std::string &what);
    void log_line(const std::string &line);
    void trace_list_ops(const std::function<void()> &f);
    bool check_schedule(std::string *report, std::string *outcome_key);
    bool cleanup(std::string *report);
    uint64_t sw_unexpected();

    /* the search: one node per choice point of the current schedule */
    struct state_key {
        uint64_t h1, h2;
        bool operator==(const state_key &o) const
        {
            return (h1 == o.h1) && (h2 == o.h2);
        }
    };
    struct state_key_hash {
        size_t operator()(const state_key &k) const { return k.h1; }
    };
    struct dfs_node {
        std::vector<action> enabled;
        std::vector<action> done;    /* explored from here already */
        action              chosen;
        bool                keyed;       /* key valid */
        state_key           key;
        uint64_t            covered;     /* complete schedules below */
    };
    enum run_result { RUN_COMPLETE, RUN_MERGED, RUN_FAILED };
    run_result run(std::vector<dfs_node> *stack, reduction reduce,
                   std::string *report, std::string *outcome_key,
                   uint64_t *merged_count);
    bool current_state(state_key *key);
    void resync_device(std::vector<std::string> *errors);
    static bool contains(const std::vector<action> &v, const action &a);

    std::unordered_map<state_key, uint64_t, state_key_hash> m_memo;
    std::vector<uct_tag_context_t*>     m_recv_ctxs;
    std::vector<uint64_t>               m_words;
    std::vector<std::pair<int, uint64_t>> m_times;
    std::vector<std::vector<char>>      m_payloads;  /* this schedule's */
    std::unordered_map<state_key, std::string, state_key_hash> m_memo_path;
    uint32_t                            m_base_unexp = 0;

    const scenario                      *m_scn    = nullptr;
    tm_dev_t                            *m_dev    = nullptr;
    tm_dev_srq_t                        *m_srq    = nullptr;
    tm_dev_srq_t                        *m_sender_srq = nullptr;
    std::vector<struct ibv_qp*>         m_conns;     /* receiver side, by index */
    std::vector<std::unique_ptr<h_recv>> m_recvs;
    std::vector<std::unique_ptr<h_msg>>  m_msgs;
    std::deque<h_get>                   m_gets;
    std::list<int>                      m_expected;  /* UCP's expected queue */
    std::list<int>                      m_unexpected;/* UCP's unexpected queue */
    size_t                              m_pc      = 0;   /* next program op */
    int                                 m_now     = 0;   /* step */
    uint64_t                            m_run     = 0;   /* schedule number */
    uint64_t                            m_cb_seq  = 0;
    bool                                m_dirty   = false;
    unsigned                            m_gets_pending = 0;
    std::vector<std::vector<int>>       m_conn_msgs;     /* ids, sending order */
    std::vector<int>                    m_next_arrival;  /* per connection */
    std::vector<model_recv>             m_model_recvs;
    std::vector<model_msg>              m_model_msgs;
    std::vector<std::string>            m_errors;
    bool                                m_trace   = false;
    std::string                         m_log;
};

} // namespace rc_tm_explore

#endif
