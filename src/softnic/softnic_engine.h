/*
 * Software NIC: the device's engine thread (SOFTNIC_PROGRESS_THREAD), its
 * doorbell and the device lock (softnic_engine.c;
 * docs/soft-device-datapath.md, "The engine").  Included by softnic_int.h.
 *
 * Inline (the default), none of this runs: the work is done in the polls
 * of the CQs, the lock is never taken, and a doorbell is rung only at a
 * peer that has an engine (one load otherwise).
 */
#ifndef SOFTNIC_ENGINE_H_
#define SOFTNIC_ENGINE_H_

#pragma GCC visibility push(hidden)

/* How long the engine spins on an empty round before it sleeps */
#define SN_ENGINE_SPIN_NS      (50ull * 1000)
/* How long the engine stands aside while software polls (sn_engine_park),
 * and the timer slack it asks for (the default is 50 us) */
#define SN_ENGINE_PARK_NS      (100 * 1000)
#define SN_ENGINE_PARK_SLACK_NS 1000

/* The device lock: taken by the verbs that change what the engine works
 * on, and by the engine for each round of its work; never inline */
static inline void sn_ctx_lock(sn_context_t *ctx)
{
    if (ctx->threaded) {
        pthread_mutex_lock(&ctx->lock);
    }
}

static inline void sn_ctx_unlock(sn_context_t *ctx)
{
    if (ctx->threaded) {
        pthread_mutex_unlock(&ctx->lock);
    }
}

void sn_db_wake(sn_doorbell_t *db);

/*
 * Wakes the engine of the device whose segment this is, if it sleeps:
 * called after publishing what it must see (a record in a ring it
 * consumes, room in a ring it produces into, a connection request).  The
 * fence orders our publication before the look at its state, as the engine
 * announces its sleep before it looks for work a last time: one of the two
 * sees the other.
 */
static inline void sn_db_ring(sn_dev_seg_t *seg)
{
    sn_doorbell_t *db = &seg->db;

    if (sn_likely(!atomic_load_explicit(&db->engine, memory_order_relaxed))) {
        return;
    }
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&db->sleep, memory_order_relaxed) !=
        SN_DB_AWAKE) {
        sn_db_wake(db);
    }
}

/* A QP rings its peer's device for what it produced (records in the
 * peer's ring) or consumed (room in the ring the peer produces into) since
 * it last did */
static inline void sn_qp_ring_peer(sn_qp_t *qp)
{
    /* each read alone, as it was stored (an atomic load is never merged):
     * gcc copied both with one 16-byte load over out_tail, which the store
     * of out_tail that publishing a record just made cannot forward to;
     * the load then waited for every store of the record to reach the
     * cache, a few hundred nanoseconds of transfers from the peer's CPU
     * for a 4 KiB SEND */
    uint64_t out_tail = __atomic_load_n(&qp->out_tail, __ATOMIC_RELAXED);
    uint64_t in_head  = __atomic_load_n(&qp->in_head, __ATOMIC_RELAXED);

    if ((qp->peer != NULL) && ((qp->db_out_tail != out_tail) ||
                               (qp->db_in_head != in_head))) {
        if (qp->db_out_tail != out_tail) {
            sn_qp_check_peer_parked(qp);
        }
        qp->db_out_tail = out_tail;
        qp->db_in_head  = in_head;
        sn_db_ring(qp->peer->seg);
    }
}

/* After a verb that gave the local engine work: wakes it if it sleeps
 * (if only_idle, only when it sleeps without its liveness timer) */
static inline void sn_ctx_kick(sn_context_t *ctx, bool only_idle)
{
    uint32_t state;

    if (!ctx->threaded) {
        return;
    }
    state = atomic_load_explicit(&ctx->seg->db.sleep, memory_order_relaxed);
    if ((state == SN_DB_IDLE) || (!only_idle && (state != SN_DB_AWAKE))) {
        sn_db_wake(&ctx->seg->db);
    }
}

/* The engine's stand-aside (softnic_aside.c): where the mode is */
enum {
    SN_ENGINE_ACTIVE,           /* the engine works, software polls lend
                                   it their time */
    SN_ENGINE_ASIDE,            /* it touches nothing: the polls work as
                                   inline */
    SN_ENGINE_ASIDE_ASKED,      /* it asked to stand aside and touches
                                   nothing: software switches at a poll */
    SN_ENGINE_RESUME_ASKED      /* it has a CPU again: software switches
                                   back at a poll */
};

/* How often the engine looks at the CPUs while it works, and while it
 * stands aside */
#define SN_ENGINE_LOOK_NS       (10ull * 1000 * 1000)
#define SN_ENGINE_ASIDE_LOOK_NS (20ull * 1000 * 1000)

void sn_engine_switch(sn_context_t *ctx);
void sn_engine_take_back(sn_context_t *ctx);
bool sn_engine_wants_aside(sn_context_t *ctx);
void sn_engine_stand_aside(sn_context_t *ctx);
void sn_engine_look_init(sn_context_t *ctx);
void sn_engine_look_cleanup(sn_context_t *ctx);

/* At each poll: the engine asked software to switch (a load, and only
 * where an engine was started) */
static inline void sn_engine_check_mode(sn_context_t *ctx)
{
    if (sn_unlikely((ctx->threaded || ctx->aside) &&
                    (atomic_load_explicit(&ctx->engine_mode,
                                          memory_order_relaxed) >=
                     SN_ENGINE_ASIDE_ASKED))) {
        sn_engine_switch(ctx);
    }
}

int  sn_engine_start(sn_context_t *ctx);
void sn_engine_stop(sn_context_t *ctx);
/* Makes the CQs' completions visible (after work done outside the
 * engine: the test steering's steps) */
void sn_ctx_publish(sn_context_t *ctx);
void sn_engine_assist(sn_context_t *ctx);

#pragma GCC visibility pop

#endif
