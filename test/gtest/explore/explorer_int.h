/*
 * The interleaving explorer's private parts, shared by its sources:
 * explorer.cc (scenarios, setup, choice points, the search),
 * explorer_ucp.cc (the harness standing in for UCP, and rc_tm's callbacks)
 * and explorer_checks.cc (the state fingerprint and the checks).
 */
#ifndef RC_TM_EXPLORER_INT_H
#define RC_TM_EXPLORER_INT_H

#include "explorer.h"
#include "explore_state.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <set>
#include <sstream>


/* Trace lines are built only when tracing */
#define EXPLORE_LOG_OF(_ex, _line) \
    do { \
        if ((_ex)->m_trace) { \
            (_ex)->log_line(_line); \
        } \
    } while (0)
#define EXPLORE_LOG(_line) EXPLORE_LOG_OF(this, _line)

namespace rc_tm_explore {

using namespace rc_tm_test;


const uint32_t MSG_MAGIC     = 0x4d534721;
const size_t   HDR_LEN       = 16;      /* magic, id, run, conn */
const size_t   RECV_SIZE     = 512;
const unsigned PACKET_SIZE   = 64;      /* UCX_RC_TM_SOFT_PACKET_SIZE */
const unsigned MAX_DEPTH     = 120;
const unsigned POLL_BATCH    = 16;      /* rc_tm's per-poll completion batch */

/* by msg_kind: eager, eager longer than PACKET_SIZE (two steps), rndv */
const size_t msg_sizes[] = {32, 160, 256};

inline std::string hex(uint64_t v)
{
    std::ostringstream os;
    os << "0x" << std::hex << v;
    return os.str();
}

inline std::string mask_str(uint64_t mask)
{
    return (mask == UINT64_MAX) ? "full" : hex(mask);
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

} // namespace rc_tm_explore

#endif
