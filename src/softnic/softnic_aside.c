/*
 * Software NIC: the engine stands aside where it has no CPU of its own
 * (SOFTNIC_ENGINE_ASIDE_AUTO; docs/soft-device-datapath.md, The engine).
 *
 * A NIC works beside the CPUs that post to it; the engine only beside
 * whatever else runs.  Where the threads that want a CPU (ranks that poll
 * or compute, other programs) take every CPU the process may run on, the
 * engine takes turns with them, and threaded progress (the device lock, a
 * doorbell fenced at every peer's post, a round over every CQ at each
 * empty poll) costs more than the inline work it replaces: on 2 CPUs
 * tag_lat 8 B took 0.65-0.78 us against 0.33 inline, tag_bw 8 B 4.2-7.4
 * against 13.6 M messages/s.
 *
 * So the engine looks every SN_ENGINE_LOOK_NS at the CPUs the process may
 * run on (its creator's set, before the engine left its CPU), at the
 * threads runnable on the machine besides itself (/proc/loadavg), and at
 * its own run and wait for a CPU since the last look
 * (/proc/thread-self/schedstat).  When 3 of its last 4 looks found no CPU
 * to spare, or it waited for one at least as long as it ran, it stands
 * aside, and looks again every SN_ENGINE_ASIDE_LOOK_NS until 4 looks in a
 * row find one.
 *
 * Standing aside is a hand-over at a poll: the engine asks (and from then
 * on touches nothing of the device: no round, its doorbell flag off, so
 * peers neither fence nor ring), and software, at its next poll, turns
 * threaded progress off: its verbs and polls then run exactly as inline
 * (no lock, one CQ's work per poll).  Back, the engine asks again, and
 * software turns it on at a poll and wakes it.  Only software changes
 * ctx->threaded, between two of its own verbs, so every lock it took it
 * gives back.  A device with a completion channel's CQ keeps its engine
 * (a program asleep on the channel does not poll); one created while the
 * engine stands aside takes it back (sn_engine_take_back).
 */
#include "softnic_int.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

/* At least this much of the engine's time (run and wait) since a look
 * before its waits count */
#define SN_LOOK_MIN_NS      (1000ull * 1000)

static bool sn_ctx_has_channel_cq(sn_context_t *ctx);

/* Software, at a poll (sn_engine_check_mode): does what the engine asked */
void sn_engine_switch(sn_context_t *ctx)
{
    uint32_t mode = atomic_load_explicit(&ctx->engine_mode,
                                         memory_order_acquire);

    if ((mode == SN_ENGINE_ASIDE_ASKED) && ctx->threaded) {
        if (sn_ctx_has_channel_cq(ctx)) {
            /* created since the engine looked: it stays */
            atomic_store_explicit(&ctx->engine_mode, SN_ENGINE_ACTIVE,
                                  memory_order_release);
            sn_db_wake(&ctx->seg->db);
            return;
        }
        /* the engine published its last round before it asked */
        ctx->threaded = false;
        ctx->aside    = true;
        atomic_store_explicit(&ctx->engine_mode, SN_ENGINE_ASIDE,
                              memory_order_release);
        sn_debug("device %u: the engine stands aside (no CPU of its own)",
                 ctx->dev_seq);
    } else if ((mode == SN_ENGINE_RESUME_ASKED) && ctx->aside) {
        sn_engine_take_back(ctx);
    }
}

/* Software: threaded progress again, and the engine woken to it */
void sn_engine_take_back(sn_context_t *ctx)
{
    if (!ctx->aside && !ctx->threaded) {
        return;
    }
    ctx->aside    = false;
    ctx->threaded = true;
    atomic_store_explicit(&ctx->engine_mode, SN_ENGINE_ACTIVE,
                          memory_order_release);
    sn_db_wake(&ctx->seg->db);
    sn_debug("device %u: the engine works again", ctx->dev_seq);
}

int softnic_test_engine_aside_rule(uint32_t *history,
                                   const softnic_cpu_look_t *look, int aside)
{
    bool busy = (look->others >= look->allowed) ||
                ((look->run_ns + look->wait_ns >= SN_LOOK_MIN_NS) &&
                 (look->wait_ns >= look->run_ns));

    *history = ((*history << 1) | busy) & 0xf;
    if (!aside) {
        return __builtin_popcount(*history) >= 3;
    }
    return *history != 0;       /* 4 looks in a row with a CPU to spare */
}

static int sn_proc_open(const char *path)
{
    return open(path, O_RDONLY | O_CLOEXEC);
}

/* In the engine's thread, at its start: the process's CPUs (before it left
 * its creator's), and the files it looks at */
void sn_engine_look_init(sn_context_t *ctx)
{
    ctx->look.loadavg_fd    = sn_proc_open("/proc/loadavg");
    ctx->look.schedstat_fd  = sn_proc_open("/proc/thread-self/schedstat");
    ctx->look.history = 0;
    ctx->look.run_ns   = 0;
    ctx->look.wait_ns  = 0;
}

void sn_engine_look_cleanup(sn_context_t *ctx)
{
    if (ctx->look.loadavg_fd >= 0) {
        close(ctx->look.loadavg_fd);
    }
    if (ctx->look.schedstat_fd >= 0) {
        close(ctx->look.schedstat_fd);
    }
    ctx->look.loadavg_fd = ctx->look.schedstat_fd = -1;
}

static ssize_t sn_proc_read(int fd, char *buf, size_t len)
{
    ssize_t n = (fd >= 0) ? pread(fd, buf, len - 1, 0) : -1;

    buf[(n > 0) ? n : 0] = '\0';
    return n;
}

/* What the machine has now; false when it cannot be read (the engine then
 * keeps working, as before it looked) */
static bool sn_engine_look(sn_context_t *ctx, softnic_cpu_look_t *look)
{
    unsigned long long run = 0, wait = 0;
    unsigned running = 0;
    char buf[128];

    if (atomic_load_explicit(&ctx->look.fixed, memory_order_acquire)) {
        look->allowed = atomic_load(&ctx->look.fixed_allowed);
        look->others  = atomic_load(&ctx->look.fixed_others);
        look->run_ns  = atomic_load(&ctx->look.fixed_run_ns);
        look->wait_ns = atomic_load(&ctx->look.fixed_wait_ns);
        return true;
    }

    /* "0.52 0.58 0.59 3/421 12345": runnable scheduling entities */
    if ((sn_proc_read(ctx->look.loadavg_fd, buf, sizeof(buf)) <= 0) ||
        (sscanf(buf, "%*s %*s %*s %u/", &running) != 1) || (running == 0)) {
        return false;
    }
    look->allowed = ctx->look.allowed_cpus;
    look->others  = running - 1;        /* the engine runs as it looks */
    look->run_ns  = look->wait_ns = 0;
    if ((sn_proc_read(ctx->look.schedstat_fd, buf, sizeof(buf)) > 0) &&
        (sscanf(buf, "%llu %llu", &run, &wait) == 2)) {
        look->run_ns      = run - ctx->look.run_ns;
        look->wait_ns     = wait - ctx->look.wait_ns;
        ctx->look.run_ns  = run;
        ctx->look.wait_ns = wait;
    }
    return true;
}

/* A completion channel's CQ needs the engine: its program may sleep on the
 * channel rather than poll (the CQ list: software's, or the lock held) */
static bool sn_ctx_has_channel_cq(sn_context_t *ctx)
{
    sn_list_t *it;

    for (it = ctx->cqs.next; it != &ctx->cqs; it = it->next) {
        if (sn_container_of(it, sn_cq_t, link)->ex.channel != NULL) {
            return true;
        }
    }
    return false;
}

static bool sn_engine_needed(sn_context_t *ctx)
{
    bool needed;

    pthread_mutex_lock(&ctx->lock);
    needed = sn_ctx_has_channel_cq(ctx);
    pthread_mutex_unlock(&ctx->lock);
    return needed;
}

/* The engine, while it works: a look now; whether to stand aside */
bool sn_engine_wants_aside(sn_context_t *ctx)
{
    softnic_cpu_look_t look;

    if (!sn_engine_look(ctx, &look)) {
        return false;
    }
    return softnic_test_engine_aside_rule(&ctx->look.history, &look, 0) &&
           !sn_engine_needed(ctx);
}

/* The engine, aside: waits for software (a poll) or a wake, at most one
 * look's period */
static void sn_engine_aside_wait(sn_context_t *ctx)
{
    const struct timespec period = {
        .tv_sec  = SN_ENGINE_ASIDE_LOOK_NS / 1000000000ull,
        .tv_nsec = SN_ENGINE_ASIDE_LOOK_NS % 1000000000ull
    };
    uint32_t seq = atomic_load_explicit(&ctx->seg->db.seq,
                                        memory_order_seq_cst);

    if (atomic_load_explicit(&ctx->engine_stop, memory_order_seq_cst)) {
        return;
    }
    /* the doorbell's state stays AWAKE: nobody rings it meanwhile but to
     * stop the engine or give it back its work */
    syscall(SYS_futex, &ctx->seg->db.seq, FUTEX_WAIT, seq, &period, NULL, 0);
}

/*
 * The engine, which decided to stand aside: asks, then touches nothing of
 * the device until software gave it back its work (a poll after it asked
 * to resume, having found a CPU to spare 4 looks in a row; or a channel's
 * CQ created), or it is stopped.  Its last round was published.
 */
void sn_engine_stand_aside(sn_context_t *ctx)
{
    softnic_cpu_look_t look;
    uint32_t mode;
    int aside;

    /* peers no longer fence and look at it when they post */
    atomic_store_explicit(&ctx->seg->db.engine, 0, memory_order_seq_cst);
    atomic_fetch_add_explicit(&ctx->engine_asides, 1, memory_order_relaxed);
    atomic_store_explicit(&ctx->engine_mode, SN_ENGINE_ASIDE_ASKED,
                          memory_order_release);
    for (;;) {
        sn_engine_aside_wait(ctx);
        if (atomic_load_explicit(&ctx->engine_stop, memory_order_seq_cst)) {
            return;             /* sn_engine_stop sets the rest */
        }
        mode = atomic_load_explicit(&ctx->engine_mode, memory_order_acquire);
        if (mode == SN_ENGINE_ACTIVE) {
            break;              /* software took it back */
        }
        if ((mode == SN_ENGINE_ASIDE) && sn_engine_look(ctx, &look)) {
            aside = softnic_test_engine_aside_rule(&ctx->look.history,
                                                   &look, 1);
            if (!aside) {
                atomic_store_explicit(&ctx->engine_mode,
                                      SN_ENGINE_RESUME_ASKED,
                                      memory_order_release);
            }
        }
    }
    ctx->look.history = 0;
    atomic_store_explicit(&ctx->seg->db.engine, 1, memory_order_seq_cst);
}

int softnic_test_engine_cpus(struct ibv_context *context,
                             const softnic_cpu_look_t *look)
{
    sn_context_t *ctx;

    if (!sn_is_softnic(context)) {
        return EINVAL;
    }
    ctx = sn_ctx(context);
    if (look != NULL) {
        atomic_store(&ctx->look.fixed_allowed, look->allowed);
        atomic_store(&ctx->look.fixed_others, look->others);
        atomic_store(&ctx->look.fixed_run_ns, look->run_ns);
        atomic_store(&ctx->look.fixed_wait_ns, look->wait_ns);
    }
    atomic_store_explicit(&ctx->look.fixed, look != NULL,
                          memory_order_release);
    if ((ctx->threaded || ctx->aside) && (ctx->seg != NULL)) {
        sn_db_wake(&ctx->seg->db);  /* an engine asleep looks at once */
    }
    return 0;
}
