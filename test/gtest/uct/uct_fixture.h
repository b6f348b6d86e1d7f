/*
 * Two rc_tm interfaces on the software device, opened through UCX's public
 * API exactly as UCP opens them, with endpoints connected to each other.
 */
#ifndef RC_TM_TEST_UCT_FIXTURE_H_
#define RC_TM_TEST_UCT_FIXTURE_H_

#include <gtest/gtest.h>

#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

extern "C" {
/* Exported by the module: per-interface counters (UCT_RC_TM_STAT_*) */
unsigned uct_rc_tm_iface_counters(uct_iface_h iface, uint64_t *counters,
                                  unsigned max);
/* ... and the device objects under an interface (to steer the software
 * NIC) */
struct tm_dev;
struct tm_dev_srq;
void uct_rc_tm_iface_device(uct_iface_h iface, struct tm_dev **dev_p,
                            struct tm_dev_srq **srq_p);
}

namespace rc_tm_test {

/* Indices of the module's counters (rc_tm_iface.h uct_rc_tm_stat_t) */
enum counter {
    RX_EXP, RX_EAGER_UNEXP, RX_RNDV_EXP, RX_RNDV_UNEXP, RX_RNDV_INCOMPLETE,
    RX_RNDV_REQ_EXP, RX_RNDV_REQ_UNEXP, LIST_ADD, LIST_DEL, LIST_SYNC,
    LIST_DEL_RACE, LIST_FULL, TX_RNDV, POST_DEVICE, POST_SW,
    RX_SW_MATCH, SW_WON, PROMOTE, SW_FULL, LIST_BOUNCE, LIST_SPILL,
    RX_TRUNCATED, RX_SW_MATCH_RNDV, RX_SW_MATCH_RNDV_REQ,
    CANCEL, RCACHE_HIT, RCACHE_MISS,
    COUNTER_LAST
};

typedef std::map<std::string, std::string> config_t;

/* What arrived through the unexpected callbacks of one interface */
struct unexpected_msg {
    bool                 rndv;
    uint64_t             tag;
    uint64_t             imm;
    unsigned             flags;
    std::vector<char>    data;      /* eager payload, or rndv header */
    uint64_t             remote_addr;
    size_t               length;
    std::vector<char>    rkey_buf;
};

struct entity {
    uct_worker_h                 worker = nullptr;
    uct_iface_h                  iface  = nullptr;
    uct_iface_attr_t             attr;
    std::vector<uct_ep_h>        eps;
    std::vector<unexpected_msg>  unexpected;
    std::vector<std::vector<char>> am_received;
    std::vector<void*>           am_kept;     /* descriptors held (DESC) */
    bool                         keep_am = false;

    /* When set, unexpected tagged messages go here instead of `unexpected`
     * (a test playing UCP's role reacts inside the callback, as UCP does) */
    std::function<ucs_status_t(void *data, size_t length, unsigned flags,
                               uint64_t stag, uint64_t imm)> on_eager;
    std::function<ucs_status_t(unsigned flags, uint64_t stag,
                               const void *header, unsigned header_length,
                               uint64_t remote_addr, size_t length,
                               const void *rkey_buf)>        on_rndv;
    std::vector<ucs_status_t>    ep_errors;   /* the error handler's calls */
};

/* A registered buffer */
struct mapped_buffer {
    mapped_buffer(uct_component_h component, uct_md_h md, size_t size,
                  char fill);
    ~mapped_buffer();
    void pattern(uint8_t seed);
    bool has_pattern(uint8_t seed, size_t length) const;
    uct_iov_t iov(size_t length) const;
    uint64_t addr() const { return (uintptr_t)m_buf.data(); }
    char *ptr() { return m_buf.data(); }

    uct_component_h   m_component;
    uct_md_h          m_md;
    std::vector<char> m_buf;
    uct_mem_h         m_memh = nullptr;
    std::vector<char> m_rkey_buf;
    uct_rkey_bundle_t m_rkey;
};

class uct_fixture : public testing::Test {
protected:
    void SetUp() override;
    void TearDown() override;

    /* Opens the md with md_config and two entities with iface_config (the
     * receiver with receiver_config, when given) */
    void open(const config_t &md_config = {},
              const config_t &iface_config = {},
              const config_t *receiver_config = nullptr);
    ucs_status_t open_iface(entity &e, const config_t &iface_config,
                            uint64_t features);
    void connect(entity &a, entity &b);
    /* Destroys e's endpoints: whatever they still owe completes now (with
     * UCS_ERR_CANCELED), so completions on the test's stack must outlive
     * this call */
    void destroy_eps(entity &e);
    /* Closes both entities (endpoints, interfaces, workers): the md stays,
     * for the memory the test registered with it */
    void close_ifaces();
    void close();

    void progress();
    /* UCX_RC_TM_SOFT_PROGRESS=thread: the software NIC works on its own
     * thread, as a NIC does (make check runs the suites both ways) */
    static bool soft_thread();
    /* Progresses until pred holds; false after a bound that only a hang
     * reaches (this is a hang detector, not a wait) */
    bool wait_for(const std::function<bool()> &pred, double seconds = 10.0);
    /* The same, progressing e alone (its peer makes no call) */
    bool progress_until(entity &e, const std::function<bool()> &pred,
                        double seconds = 10.0);
    void flush(entity &e);

    std::vector<uint64_t> counters(entity &e);

    uct_component_h                         m_component = nullptr;
    uct_md_h                                m_md        = nullptr;
    uct_md_attr_t                           m_md_attr;
    ucs_async_context_t                     *m_async    = nullptr;
    entity                                  m_sender, m_receiver;
    size_t                                  m_rx_headroom = 16;
};

/* A posted tagged receive and what its callbacks reported */
struct tag_recv {
    uct_tag_context_t ctx;     /* first: callbacks find the object from it */
    int               consumed  = 0;
    int               completed = 0;
    int               rndv_req  = 0;
    int               order_ok  = 1;   /* consumed came before completed */
    uint64_t          stag      = 0;
    uint64_t          imm       = 0;
    size_t            length    = 0;
    ucs_status_t      status    = UCS_INPROGRESS;
    std::vector<char> rndv_header;
    const void        *rndv_header_ptr = nullptr; /* as rndv_cb got it */
    unsigned          rndv_flags       = 0;

    tag_recv();
    static tag_recv *from(uct_tag_context_t *ctx);
};

/* Runs f when it goes out of scope: e.g. destroys the endpoints that owe
 * completions on the test's stack, before those go, even when an assertion
 * ends the test early */
struct scope_exit {
    std::function<void()> f;
    ~scope_exit() { f(); }
};

/* A completion to wait for */
struct test_completion {
    uct_completion_t  comp;
    int               done   = 0;
    ucs_status_t      status = UCS_OK;

    explicit test_completion(int count = 1);
};

} // namespace rc_tm_test

#endif
