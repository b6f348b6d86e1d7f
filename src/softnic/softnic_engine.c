/*
 * Software NIC: the device's engine (SOFTNIC_PROGRESS_THREAD).
 *
 * As a NIC does, a thread of the device carries out its work on its own:
 * list operations, arrivals judged and placed, rendezvous reads and FINs,
 * sends pushed onto the wire, send completions, peer liveness.  Software
 * only posts work and polls completions.
 *
 * Each round takes the device lock and does, for every CQ of the device,
 * the work polls do inline (sn_cq_work), then publishes the CQs'
 * completions (software reads them without the lock) and rings the
 * doorbells of the peers whose rings it fed or drained.  A round that
 * finds nothing to do is repeated for SN_ENGINE_SPIN_NS (a message that
 * follows soon is taken at once), yielding the CPU between rounds, then
 * the engine sleeps on its doorbell, a futex word in the device segment
 * that peers map: it announces its sleep (SN_DB_TIMED or SN_DB_IDLE),
 * looks for work once more, and waits unless the doorbell's sequence
 * moved.  Whoever publishes work for it fences, sees the announcement and
 * wakes it (sn_db_ring): either the last look finds the work or the ring
 * finds the engine asleep.  Local verbs ring it after they drop the
 * lock, which orders them with its last look.
 *
 * While a QP waits on its peer (sends not yet consumed, FINs queued), the
 * sleep is bounded by SN_LIVENESS_PERIOD_NS and a timer wake checks those
 * peers at once: a dead peer is noticed as when polled.  With nothing
 * outstanding it sleeps until rung: an idle process costs no CPU.
 */
#include "softnic_int.h"

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long sn_futex(_Atomic uint32_t *word, int op, uint32_t val,
                     const struct timespec *timeout)
{
    /* not FUTEX_PRIVATE_FLAG: the word is in a segment other processes
     * map, and they wake it through their own mapping */
    return syscall(SYS_futex, word, op, val, timeout, NULL, 0);
}

void sn_db_wake(sn_doorbell_t *db)
{
    atomic_fetch_add_explicit(&db->seq, 1, memory_order_seq_cst);
    atomic_fetch_add_explicit(&db->wakes, 1, memory_order_relaxed);
    sn_futex(&db->seq, FUTEX_WAKE, 1, NULL);
}

void sn_ctx_publish(sn_context_t *ctx)
{
    sn_list_t *it;

    for (it = ctx->cqs.next; it != &ctx->cqs; it = it->next) {
        sn_cq_publish(sn_container_of(it, sn_cq_t, link));
    }
}

/* One round of the device's work, the lock held; *waiting: a QP waits on
 * its peer (a busy QP: softnic_park.c).  Every step that publishes into a
 * ring or takes records off one rings the peer's doorbell itself, so the
 * round looks at no QP the CQs' work does not (a look at every QP of the
 * device took a third of the CPU of 34 ranks in thread mode) */
static unsigned sn_engine_round_locked(sn_context_t *ctx, bool *waiting)
{
    unsigned work = 0;
    sn_list_t *it;
    sn_cq_t *cq;

    *waiting = false;
    for (it = ctx->cqs.next; it != &ctx->cqs; it = it->next) {
        cq        = sn_container_of(it, sn_cq_t, link);
        work     += sn_cq_work(cq);
        *waiting |= !sn_list_empty(&cq->send_busy);
        sn_cq_publish(cq);
    }
    ctx->liveness_now = false;
    return work;
}

/* last_look: before a sleep, at parked rings too (a wake lost to a race,
 * softnic_park.c, is found there) */
static unsigned sn_engine_round(sn_context_t *ctx, bool *waiting,
                                bool last_look)
{
    unsigned work;

    pthread_mutex_lock(&ctx->lock);
    if (last_look) {
        sn_ctx_sweep_parked(ctx);
    }
    work = sn_engine_round_locked(ctx, waiting);
    pthread_mutex_unlock(&ctx->lock);
    atomic_fetch_add_explicit(&ctx->engine_passes, 1, memory_order_relaxed);
    return work;
}

/*
 * A poll that found nothing lends the device its thread: one round, unless
 * the engine is in one.  It also tells the engine that software is polling
 * (empty_polls), and the engine stands aside meanwhile (sn_engine_park):
 * a NIC works beside the CPU, the engine only beside whatever else runs,
 * and where cores are few a polling thread and a spinning engine take
 * turns at the scheduler's pace (tag_lat 8 B: 124 us against 0.3 us
 * inline on 2 cores).  While software computes, nothing polls and the
 * engine does all the work, as a NIC does.
 */
void sn_engine_assist(sn_context_t *ctx)
{
    bool waiting;

    atomic_fetch_add_explicit(&ctx->empty_polls, 1, memory_order_relaxed);
    if (pthread_mutex_trylock(&ctx->lock) != 0) {
        return;                 /* the engine is at work */
    }
    sn_engine_round_locked(ctx, &waiting);
    pthread_mutex_unlock(&ctx->lock);
    atomic_fetch_add_explicit(&ctx->assists, 1, memory_order_relaxed);
}

/* Software polled since *seen: the engine sleeps SN_ENGINE_PARK_NS, not
 * announced on the doorbell (ringing it costs nobody a system call) */
static bool sn_engine_park(sn_context_t *ctx, uint64_t *seen)
{
    const struct timespec park = {.tv_sec = 0, .tv_nsec = SN_ENGINE_PARK_NS};
    uint64_t polls = atomic_load_explicit(&ctx->empty_polls,
                                          memory_order_relaxed);

    if (polls == *seen) {
        return false;
    }
    *seen = polls;
    atomic_fetch_add_explicit(&ctx->engine_parks, 1, memory_order_relaxed);
    nanosleep(&park, NULL);
    return true;
}

static bool sn_engine_stopping(sn_context_t *ctx)
{
    return atomic_load_explicit(&ctx->engine_stop, memory_order_seq_cst);
}

/* Sleeps on the doorbell unless work came meanwhile; true when its
 * liveness timer woke it */
static bool sn_engine_sleep(sn_context_t *ctx, bool waiting)
{
    sn_doorbell_t *db          = &ctx->seg->db;
    const struct timespec period = {
        .tv_sec  = SN_LIVENESS_PERIOD_NS / 1000000000ull,
        .tv_nsec = SN_LIVENESS_PERIOD_NS % 1000000000ull
    };
    uint32_t state             = waiting ? SN_DB_TIMED : SN_DB_IDLE;
    bool still_waiting;
    uint32_t seq;
    long ret;

    seq = atomic_load_explicit(&db->seq, memory_order_seq_cst);
    atomic_store_explicit(&ctx->engine_sleep_seq, seq, memory_order_relaxed);
    atomic_store_explicit(&db->sleep, state, memory_order_seq_cst);
    /* the last look, after the announcement (see sn_db_ring) */
    if ((sn_engine_round(ctx, &still_waiting, true) != 0) ||
        (still_waiting != waiting) || sn_engine_stopping(ctx)) {
        atomic_store_explicit(&db->sleep, SN_DB_AWAKE, memory_order_relaxed);
        return false;
    }
    atomic_fetch_add_explicit(&ctx->engine_sleeps, 1, memory_order_relaxed);
    atomic_store_explicit(&ctx->engine_in_wait, true, memory_order_release);
    ret = sn_futex(&db->seq, FUTEX_WAIT, seq, waiting ? &period : NULL);
    atomic_store_explicit(&ctx->engine_in_wait, false, memory_order_relaxed);
    atomic_store_explicit(&db->sleep, SN_DB_AWAKE, memory_order_relaxed);
    if ((ret != 0) && (errno == ETIMEDOUT)) {
        atomic_fetch_add_explicit(&ctx->engine_timer_wakes, 1,
                                  memory_order_relaxed);
        return true;
    }
    /* rung (or the sequence had moved already: rung too) */
    atomic_fetch_add_explicit(&ctx->engine_db_wakes, 1, memory_order_relaxed);
    return false;
}

/*
 * The engine keeps off the CPU of the thread that opened the device, when
 * it may run elsewhere, as a NIC works beside the CPU that posts to it:
 * while that thread computes, a woken engine would otherwise queue behind
 * it on its CPU until the scheduler moves one of them.  On 2 CPUs (two
 * ranks, two engines) mpi_overlap's 4 MiB overlap read 0-100 % from run to
 * run without this (five runs), 98-100 % with it (three).  A thread bound
 * to one CPU leaves its engine there.
 */
/* The CPUs the calling thread may run on (the process's, at the start) */
static uint32_t sn_engine_allowed_cpus(void)
{
    cpu_set_t set;

    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        return 1;
    }
    return (uint32_t)CPU_COUNT(&set);
}

static void sn_engine_leave_cpu(int cpu)
{
    cpu_set_t set;

    if ((cpu < 0) || (sched_getaffinity(0, sizeof(set), &set) != 0) ||
        !CPU_ISSET(cpu, &set) || (CPU_COUNT(&set) < 2)) {
        return;
    }
    CPU_CLR(cpu, &set);
    (void)sched_setaffinity(0, sizeof(set), &set);
}

/* Every SN_ENGINE_LOOK_NS while it works, where it may stand aside: a
 * look at the CPUs (softnic_aside.c); true when it stood aside (and now
 * works again, or stops) */
static bool sn_engine_aside_due(sn_context_t *ctx, uint64_t *next_look)
{
    uint64_t now;

    if (!atomic_load_explicit(&ctx->aside_auto, memory_order_relaxed)) {
        return false;
    }
    now = sn_now_ns();
    if (now < *next_look) {
        return false;
    }
    *next_look = now + SN_ENGINE_LOOK_NS;
    if (!sn_engine_wants_aside(ctx)) {
        return false;
    }
    sn_engine_stand_aside(ctx);
    *next_look = sn_now_ns() + SN_ENGINE_LOOK_NS;
    return true;
}

static void *sn_engine_main(void *arg)
{
    sn_context_t *ctx   = arg;
    uint64_t idle_since = 0;
    uint64_t polls_seen = 0;
    uint64_t next_look  = 0;
    uint64_t now;
    bool waiting;

    /* a park of SN_ENGINE_PARK_NS, not the default 50 us more */
    prctl(PR_SET_TIMERSLACK, SN_ENGINE_PARK_SLACK_NS);
    sn_engine_look_init(ctx);
    sn_engine_leave_cpu(ctx->creator_cpu);
    while (!sn_engine_stopping(ctx)) {
        if (sn_engine_aside_due(ctx, &next_look)) {
            idle_since = 0;
            continue;
        }
        if (sn_engine_round(ctx, &waiting, false) != 0) {
            idle_since = 0;
            continue;
        }
        if (sn_engine_park(ctx, &polls_seen)) {
            idle_since = 0;
            continue;
        }
        now = sn_now_ns();
        if (idle_since == 0) {
            idle_since = now;
        }
        if (now - idle_since < SN_ENGINE_SPIN_NS) {
            /* whoever shares the CPU goes first: a rank that polls for
             * what the engine just sent (its FIN, say) would otherwise
             * wait for the spin's end, where cores are few */
            sched_yield();
            continue;
        }
        if (sn_engine_sleep(ctx, waiting)) {
            /* the timer: check the peers now, and sleep again at once if
             * nothing else happened */
            pthread_mutex_lock(&ctx->lock);
            ctx->liveness_now = true;
            pthread_mutex_unlock(&ctx->lock);
            idle_since = sn_now_ns() - SN_ENGINE_SPIN_NS;
        } else {
            idle_since = 0;
        }
    }
    sn_engine_look_cleanup(ctx);
    return NULL;
}

int sn_engine_start(sn_context_t *ctx)
{
    pthread_mutexattr_t attr;
    sigset_t all, old;
    int ret;

    if (ctx->threaded) {
        return 0;
    }
    /* held for a round or a post: a waiter spins a little before it
     * sleeps in the kernel */
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    ret = pthread_mutex_init(&ctx->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    if (ret != 0) {
        return ret;
    }
    atomic_store(&ctx->engine_stop, false);
    atomic_store(&ctx->seg->db.sleep, SN_DB_AWAKE);
    /* before any QP exists: a peer that reaches one sees the flag */
    atomic_store(&ctx->seg->db.engine, 1);
    ctx->threaded = true;
    ctx->aside    = false;
    atomic_store(&ctx->engine_mode, SN_ENGINE_ACTIVE);
    ctx->look.loadavg_fd = ctx->look.schedstat_fd = -1;
    /* the engine takes no signal: they stay with the software's threads */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    ctx->creator_cpu  = sched_getcpu();
    ctx->look.allowed_cpus = sn_engine_allowed_cpus();
    ret = pthread_create(&ctx->engine, NULL, sn_engine_main, ctx);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (ret != 0) {
        sn_error("cannot start the engine of device %u: %s", ctx->dev_seq,
                 strerror(ret));
        ctx->threaded = false;
        atomic_store(&ctx->seg->db.engine, 0);
        pthread_mutex_destroy(&ctx->lock);
        return ret;
    }
    ctx->engine_pid = getpid();
    sn_debug("device %u: engine started", ctx->dev_seq);
    return 0;
}

/* Stops and joins the engine; what it left undone stays for the next one,
 * or for the polls of inline progress */
void sn_engine_stop(sn_context_t *ctx)
{
    if (!ctx->threaded && !ctx->aside) {
        return;
    }
    if (ctx->engine_pid == getpid()) {
        atomic_store_explicit(&ctx->engine_stop, true, memory_order_seq_cst);
        sn_db_wake(&ctx->seg->db);
        pthread_join(ctx->engine, NULL);
        pthread_mutex_destroy(&ctx->lock);
        if (sn_ctx_is_ours(ctx)) {
            atomic_store(&ctx->seg->db.engine, 0);
        }
    }
    /* a forked child has a copy of the context, not its thread */
    ctx->threaded = false;
    ctx->aside    = false;
    atomic_store(&ctx->engine_mode, SN_ENGINE_ACTIVE);
    sn_debug("device %u: engine stopped", ctx->dev_seq);
}

int softnic_test_engine_stats(struct ibv_context *context,
                              softnic_engine_stats_t *stats)
{
    sn_context_t *ctx;
    uint32_t state;

    if (!sn_is_softnic(context)) {
        return EINVAL;
    }
    ctx = sn_ctx(context);
    memset(stats, 0, sizeof(*stats));
    stats->running = ctx->threaded || ctx->aside;
    stats->aside   = ctx->aside;
    stats->asides  = atomic_load(&ctx->engine_asides);
    if (!ctx->threaded) {
        return 0;
    }
    /* asleep: past its last look, in (or entering) its wait, and not rung
     * since (a wake may be on its way); an engine that announced its sleep
     * may still find work */
    state                 = atomic_load(&ctx->engine_in_wait) ?
                            atomic_load(&ctx->seg->db.sleep) : SN_DB_AWAKE;
    if (atomic_load(&ctx->seg->db.seq) != atomic_load(&ctx->engine_sleep_seq)) {
        state = SN_DB_AWAKE;
    }
    stats->sleeping       = (state == SN_DB_TIMED) ? 1 :
                            (state == SN_DB_IDLE) ? 2 : 0;
    stats->sleeps         = atomic_load(&ctx->engine_sleeps);
    stats->timer_wakes    = atomic_load(&ctx->engine_timer_wakes);
    stats->doorbell_wakes = atomic_load(&ctx->engine_db_wakes);
    stats->passes         = atomic_load(&ctx->engine_passes);
    stats->assists        = atomic_load(&ctx->assists);
    stats->parks          = atomic_load(&ctx->engine_parks);
    return 0;
}
