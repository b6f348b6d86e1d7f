/*
 * Software NIC: RDMA copies between processes.
 *
 * A read or write is one copy with process_vm_readv / process_vm_writev
 * (same user; also within one process).  A long read is shared with the
 * responder: on a NIC the requester's NIC and the responder's both work on
 * a read (one sends the data, the other places it), and here one CPU
 * copying 4 MiB runs at its own memory bandwidth (14 GB/s on the project's
 * machine, as fast as one memcpy), which two CPUs double.  So the reader
 * offers the read in chunks in the responder's device segment
 * (sn_share_slot_t, softnic_wire.h) and copies chunks itself; the
 * responder's device, whenever it runs (a poll inline, the engine's round
 * or a poll's assist), copies chunks too, straight into the reader's
 * memory.  Either side takes a chunk by compare-and-swap, so a responder
 * that never runs costs the reader nothing but the offer: the read ends as
 * soon as its chunks are copied.  What verbs see is unchanged: the read
 * completes when all of its data is in place.
 */
#include "softnic_int.h"

#include <errno.h>
#include <sched.h>
#include <sys/uio.h>

/* ThreadSanitizer orders accesses by address.  When one process has two
 * devices (the tests), the reader's device reaches the slot through its
 * mapping of the responder's segment and the responder's through its own:
 * the slot's atomics have two addresses, and the tool cannot see that the
 * claim orders the buffers' accesses.  The two sides also name one object
 * to it, the reader's buffer (same address for both in one process);
 * across processes the tool sees neither side's peer anyway. */
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define sn_share_tsan_release(addr) __tsan_release((void *)(uintptr_t)(addr))
#define sn_share_tsan_acquire(addr) __tsan_acquire((void *)(uintptr_t)(addr))
#else
#define sn_share_tsan_release(addr) do { } while (0)
#define sn_share_tsan_acquire(addr) do { } while (0)
#endif

/* Reads shorter than this are not shared, and a read is cut in halves of
 * at most SN_SHARE_CHUNK_MAX: a chunk costs a system call and a
 * compare-and-swap on a line both sides write (tag_bw at 256 KiB: 17 GB/s
 * with 16 KiB chunks, 27-31 with 32 KiB, 40-42 with 64 KiB, 42-45 with
 * halves; 64 KiB reads gained nothing in halves, 128 KiB ones 20 %) */
#define SN_SHARE_MIN          (128 * 1024)
#define SN_SHARE_CHUNK_MAX    (256 * 1024)

/* A slot we find open or closed, unchanged and with nothing to take, for
 * this many runs has its reader looked at (a few microseconds): a reader
 * that died after its last chunk would hold the slot for good */
#define SN_SHARE_STALE_RUNS   4096

#define SN_SHARE_GEN(claim)   ((uint32_t)((claim) >> 32))
#define SN_SHARE_STATE(claim) ((uint32_t)(claim))
#define SN_SHARE_CLAIM(gen, state) (((uint64_t)(gen) << 32) | (state))
#define SN_SHARE_NEXT(claim) \
    ((SN_SHARE_STATE(claim) & ~SN_SHARE_CLOSED) - SN_SHARE_OPEN)

/* The slot holds an offered read, open or closed (not free, not filling) */
static inline bool sn_share_holds_read(uint32_t state)
{
    return !(state & SN_SHARE_FILLING) &&
           ((state & ~SN_SHARE_CLOSED) >= SN_SHARE_OPEN);
}

/* Tests stop a read where they want (softnic_test_set_share_hook) */
static _Atomic(softnic_share_hook_t) sn_share_hook;
static void *_Atomic sn_share_hook_arg;

static inline void sn_share_at(softnic_share_point_t point)
{
    softnic_share_hook_t hook = atomic_load_explicit(&sn_share_hook,
                                                     memory_order_acquire);

    if (sn_unlikely(hook != NULL)) {
        hook(point, atomic_load_explicit(&sn_share_hook_arg,
                                         memory_order_relaxed));
    }
}

/* Copies between local memory and another process's (or our own) memory */
int sn_rdma_copy(pid_t peer, bool write, void *local, uint64_t remote,
                 size_t length)
{
    struct iovec liov, riov;
    ssize_t n;

    while (length > 0) {
        liov.iov_base = local;
        liov.iov_len  = length;
        riov.iov_base = (void *)(uintptr_t)remote;
        riov.iov_len  = length;
        n = write ? process_vm_writev(peer, &liov, 1, &riov, 1, 0) :
                    process_vm_readv(peer, &liov, 1, &riov, 1, 0);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno;
        }
        if (n == 0) {
            return EFAULT;
        }
        local   = (char *)local + n;
        remote += (uint64_t)n;
        length -= (size_t)n;
    }
    return 0;
}

/* The next chunk of the slot's read, taken; false when none is left (or
 * the slot is no longer the read of generation gen) */
static bool sn_share_take(sn_share_slot_t *slot, uint32_t gen,
                          uint32_t nchunks, uint32_t *chunk)
{
    uint64_t claim = atomic_load_explicit(&slot->claim, memory_order_acquire);
    uint32_t next;

    for (;;) {
        if ((SN_SHARE_GEN(claim) != gen) ||
            !sn_share_holds_read(SN_SHARE_STATE(claim)) ||
            (SN_SHARE_STATE(claim) & SN_SHARE_CLOSED)) {
            return false;
        }
        next = SN_SHARE_NEXT(claim);
        if (next >= nchunks) {
            return false;
        }
        if (atomic_compare_exchange_weak_explicit(&slot->claim, &claim,
                                                  claim + 1,
                                                  memory_order_acq_rel,
                                                  memory_order_acquire)) {
            *chunk = next;
            return true;
        }
    }
}

/* No chunk is taken from now on; how many were, by both sides (the
 * first to close fixes it, whatever was left) */
static uint32_t sn_share_close(sn_share_slot_t *slot, uint32_t gen)
{
    uint64_t claim = atomic_load_explicit(&slot->claim, memory_order_acquire);

    for (;;) {
        if ((SN_SHARE_GEN(claim) != gen) ||
            !sn_share_holds_read(SN_SHARE_STATE(claim))) {
            return 0;   /* not that read's any more (cannot happen) */
        }
        if ((SN_SHARE_STATE(claim) & SN_SHARE_CLOSED) ||
            atomic_compare_exchange_weak_explicit(&slot->claim, &claim,
                                                  claim | SN_SHARE_CLOSED,
                                                  memory_order_acq_rel,
                                                  memory_order_acquire)) {
            return SN_SHARE_NEXT(claim);
        }
    }
}

/* A free slot of the responder's segment, filled and open; NULL when all
 * are in use */
static sn_share_slot_t *sn_share_offer(sn_dev_seg_t *seg,
                                       const sn_proc_id_t *reader,
                                       void *local, uint64_t remote,
                                       uint32_t rkey, size_t length,
                                       uint32_t *gen_p, uint32_t *nchunks_p)
{
    /* a pid past the field's room (none on Linux) names no one: such a
     * reader dying while it fills leaves the slot taken */
    uint32_t filling = SN_SHARE_FILLING |
                       ((reader->pid < SN_SHARE_FILLING) ? reader->pid : 0);
    size_t chunk     = length / 2;
    sn_share_slot_t *slot;
    uint64_t claim;
    uint32_t gen, i;

    if (chunk > SN_SHARE_CHUNK_MAX) {
        chunk = SN_SHARE_CHUNK_MAX;
    }
    chunk = (chunk + 4095) & ~(size_t)4095;
    for (i = 0; i < SN_SHARE_SLOTS; ++i) {
        slot  = &seg->share[i];
        claim = atomic_load_explicit(&slot->claim, memory_order_relaxed);
        if ((SN_SHARE_STATE(claim) != SN_SHARE_FREE) ||
            !atomic_compare_exchange_strong_explicit(
                    &slot->claim, &claim,
                    SN_SHARE_CLAIM(SN_SHARE_GEN(claim) + 1, filling),
                    memory_order_acquire, memory_order_relaxed)) {
            continue;
        }
        /* counted from now, so that the responder looks at the slot even
         * if we die before it is open */
        atomic_fetch_add_explicit(&seg->shares, 1, memory_order_release);
        sn_share_at(SOFTNIC_SHARE_FILLING);
        gen = SN_SHARE_GEN(claim) + 1;
        atomic_store_explicit(&slot->done, 0, memory_order_relaxed);
        atomic_store_explicit(&slot->error, 0, memory_order_relaxed);
        atomic_store_explicit(&slot->pid, reader->pid, memory_order_relaxed);
        atomic_store_explicit(&slot->start_time, reader->start_time,
                              memory_order_relaxed);
        atomic_store_explicit(&slot->rkey, rkey, memory_order_relaxed);
        atomic_store_explicit(&slot->local, (uintptr_t)local,
                              memory_order_relaxed);
        atomic_store_explicit(&slot->remote, remote, memory_order_relaxed);
        atomic_store_explicit(&slot->length, length, memory_order_relaxed);
        atomic_store_explicit(&slot->chunk, (uint32_t)chunk,
                              memory_order_relaxed);
        *nchunks_p = (uint32_t)((length + chunk - 1) / chunk);
        atomic_store_explicit(&slot->nchunks, *nchunks_p,
                              memory_order_relaxed);
        sn_share_tsan_release(local);
        atomic_store_explicit(&slot->claim,
                              SN_SHARE_CLAIM(gen, SN_SHARE_OPEN),
                              memory_order_release);
        *gen_p = gen;
        return slot;
    }
    return NULL;
}

static void sn_share_chunk(const sn_share_slot_t *slot, uint32_t index,
                           uint64_t *offset, size_t *length)
{
    uint64_t chunk = atomic_load_explicit(&slot->chunk, memory_order_relaxed);
    uint64_t total = atomic_load_explicit(&slot->length,
                                          memory_order_relaxed);

    *offset = chunk * index;
    *length = (size_t)((total - *offset < chunk) ? total - *offset : chunk);
}

/* Waits for the chunks the responder took; ESRCH if it died meanwhile */
static int sn_share_wait(sn_share_slot_t *slot, uint32_t taken,
                         const sn_proc_id_t *responder)
{
    unsigned spins = 0;

    while (atomic_load_explicit(&slot->done, memory_order_acquire) < taken) {
        /* a chunk takes microseconds; the responder may share our CPU */
        if ((++spins % 64) != 0) {
            continue;
        }
        if (((spins % (64 * 1024)) == 0) && !sn_proc_alive(responder)) {
            return ESRCH;
        }
        sched_yield();
    }
    return (int)atomic_load_explicit(&slot->error, memory_order_relaxed);
}

/* The slot back to the free ones: by the reader once its read is done, or
 * by the responder when the reader is gone */
static void sn_share_free(sn_dev_seg_t *seg, sn_share_slot_t *slot,
                          uint32_t gen)
{
    atomic_store_explicit(&slot->claim, SN_SHARE_CLAIM(gen, SN_SHARE_FREE),
                          memory_order_release);
    atomic_fetch_sub_explicit(&seg->shares, 1, memory_order_relaxed);
}

int sn_rdma_read(sn_context_t *ctx, sn_dev_seg_t *peer_seg,
                 const sn_proc_id_t *peer_proc, void *local, uint64_t remote,
                 uint32_t rkey, size_t length)
{
    uint32_t gen, nchunks, index, mine = 0, taken;
    sn_share_slot_t *slot = NULL;
    uint64_t offset;
    size_t len;
    int ret = 0, wait_ret;

    if (length >= SN_SHARE_MIN) {
        slot = sn_share_offer(peer_seg, &ctx->proc, local, remote, rkey,
                              length, &gen, &nchunks);
    }
    if (slot == NULL) {
        return sn_rdma_copy((pid_t)peer_proc->pid, false, local, remote,
                            length);
    }
    atomic_fetch_add_explicit(&ctx->shares_offered, 1, memory_order_relaxed);
    sn_db_ring(peer_seg);
    sn_share_at(SOFTNIC_SHARE_OFFERED);
    while ((ret == 0) && sn_share_take(slot, gen, nchunks, &index)) {
        sn_share_chunk(slot, index, &offset, &len);
        ret = sn_rdma_copy((pid_t)peer_proc->pid, false,
                           (char *)local + offset, remote + offset, len);
        ++mine;
    }
    taken    = sn_share_close(slot, gen) - mine;
    sn_share_at(SOFTNIC_SHARE_CLOSED);
    wait_ret = sn_share_wait(slot, taken, peer_proc);
    sn_share_tsan_acquire(local);
    sn_share_free(peer_seg, slot, gen);
    return (ret != 0) ? ret : wait_ret;
}

/* A copy of ours failed: the reader fails the read, and no chunk is taken
 * any more (closed before done counts ours: once it does, the reader may
 * free the slot); a reader that is gone (ESRCH) cannot free it, so we do */
static void sn_share_failed(sn_dev_seg_t *seg, sn_share_slot_t *slot,
                            uint32_t gen, int error)
{
    sn_share_close(slot, gen);
    atomic_store_explicit(&slot->error, (uint32_t)error, memory_order_relaxed);
    atomic_fetch_add_explicit(&slot->done, 1, memory_order_release);
    if (error == ESRCH) {
        sn_share_free(seg, slot, gen);
    }
}

/* The reader of a slot in the state claim is gone: one filling it is
 * named by the claim (its start time is not written yet: any process of
 * that pid counts as it), one that offered it by the slot */
static bool sn_share_reader_dead(const sn_share_slot_t *slot, uint64_t claim)
{
    uint32_t state = SN_SHARE_STATE(claim);
    uint32_t filler;
    sn_proc_id_t reader;

    if (state & SN_SHARE_FILLING) {
        filler = state & ~SN_SHARE_FILLING;
        return (filler != 0) && !sn_proc_pid_alive(filler);
    }
    reader.pid        = atomic_load_explicit(&slot->pid, memory_order_relaxed);
    reader.uid        = 0;
    reader.start_time = atomic_load_explicit(&slot->start_time,
                                             memory_order_relaxed);
    return !sn_proc_alive(&reader);
}

/* A slot of ours we took nothing from, in the state claim: when it stays
 * so for SN_SHARE_STALE_RUNS runs and its reader is dead, the reader died
 * while it filled the slot or after its last chunk (between, our copy
 * finds it gone: ESRCH), and we free the slot. */
static void sn_share_idle(sn_context_t *ctx, uint32_t i, uint64_t claim)
{
    sn_share_slot_t *slot = &ctx->seg->share[i];

    if (ctx->share_idle[i].claim != claim) {
        ctx->share_idle[i].claim = claim;
        ctx->share_idle[i].runs  = 0;
        return;
    }
    if (++ctx->share_idle[i].runs < SN_SHARE_STALE_RUNS) {
        return;
    }
    ctx->share_idle[i].runs = 0;
    if (sn_share_reader_dead(slot, claim) &&
        atomic_compare_exchange_strong_explicit(
                &slot->claim, &claim,
                SN_SHARE_CLAIM(SN_SHARE_GEN(claim), SN_SHARE_FREE),
                memory_order_acq_rel, memory_order_relaxed)) {
        atomic_fetch_sub_explicit(&ctx->seg->shares, 1, memory_order_relaxed);
        sn_debug("shared read slot %u of a dead process freed", i);
    }
}

/* Our part of one offered read: chunks copied into the reader's memory */
static unsigned sn_share_serve(sn_context_t *ctx, uint32_t i)
{
    sn_share_slot_t *slot = &ctx->seg->share[i];
    uint64_t claim = atomic_load_explicit(&slot->claim, memory_order_acquire);
    uint32_t gen   = SN_SHARE_GEN(claim);
    uint32_t nchunks, index, pid, rkey;
    uint64_t local, remote, offset;
    unsigned copied = 0;
    size_t len;
    int ret;

    if (SN_SHARE_STATE(claim) == SN_SHARE_FREE) {
        return 0;
    }
    if (!sn_share_holds_read(SN_SHARE_STATE(claim))) {
        sn_share_idle(ctx, i, claim);   /* being filled */
        return 0;
    }
    /* read before the first take, whose success shows they were the
     * generation's */
    nchunks = atomic_load_explicit(&slot->nchunks, memory_order_relaxed);
    pid     = atomic_load_explicit(&slot->pid, memory_order_relaxed);
    rkey    = atomic_load_explicit(&slot->rkey, memory_order_relaxed);
    local   = atomic_load_explicit(&slot->local, memory_order_relaxed);
    remote  = atomic_load_explicit(&slot->remote, memory_order_relaxed);
    while (sn_share_take(slot, gen, nchunks, &index)) {
        sn_share_tsan_acquire(local);
        sn_share_chunk(slot, index, &offset, &len);
        ret = sn_key_check(ctx->seg, rkey, remote + offset, len,
                           IBV_ACCESS_REMOTE_READ) ?
              sn_rdma_copy((pid_t)pid, true,
                           (void *)(uintptr_t)(remote + offset),
                           local + offset, len) :
              EACCES;
        sn_share_tsan_release(local);
        if (ret != 0) {
            sn_debug("shared read for process %u failed: %s", pid,
                     strerror(ret));
            sn_share_failed(ctx->seg, slot, gen, ret);
            break;
        }
        atomic_fetch_add_explicit(&slot->done, 1, memory_order_release);
        ++copied;
    }
    if (copied == 0) {
        sn_share_idle(ctx, i, claim);
    }
    return copied;
}

unsigned sn_rdma_serve_offers(sn_context_t *ctx)
{
    unsigned copied = 0;
    uint32_t i;

    if (!sn_ctx_is_ours(ctx)) {
        return 0;   /* a forked child's memory is a copy, not the peer's */
    }
    for (i = 0; i < SN_SHARE_SLOTS; ++i) {
        copied += sn_share_serve(ctx, i);
    }
    atomic_fetch_add_explicit(&ctx->share_chunks_served, copied,
                              memory_order_relaxed);
    return copied;
}

void softnic_test_set_share_hook(softnic_share_hook_t hook, void *arg)
{
    atomic_store_explicit(&sn_share_hook_arg, arg, memory_order_relaxed);
    atomic_store_explicit(&sn_share_hook, hook, memory_order_release);
}

int softnic_test_share_stats(struct ibv_context *context,
                             softnic_share_stats_t *stats)
{
    sn_context_t *ctx;

    if (!sn_is_softnic(context)) {
        return EINVAL;
    }
    ctx             = sn_ctx(context);
    stats->offered  = atomic_load(&ctx->shares_offered);
    stats->served   = atomic_load(&ctx->share_chunks_served);
    stats->taken    = atomic_load(&ctx->seg->shares);
    return 0;
}
