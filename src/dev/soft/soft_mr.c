/*
 * Memory registration of the software device.
 *
 * The registration table lives in the device's shared-memory segment so
 * that peers can check a key before they touch memory.  A key is
 * (generation << 20 | slot): deregistering clears the slot's generation and
 * the next registration of that slot uses a new one, so an old key is stale.
 * Freed slots are reused in FIFO order and only once SOFT_MR_REUSE_MIN others
 * wait behind them, so a stale key could look valid again only after
 * SOFT_MR_GEN_MAX * SOFT_MR_REUSE_MIN (16M) registrations; until then new
 * registrations take never-used slots, which keeps the touched part of the
 * table as small as the number of live regions allows.
 *
 * RDMA read/write is one copy between processes with process_vm_readv /
 * process_vm_writev (same user; also within one process).
 */
#include "soft_dev.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#define SOFT_MR_SLOT_MASK   (SOFT_MR_SLOTS - 1)

static inline uint32_t soft_key_slot(uint32_t key)
{
    return key & SOFT_MR_SLOT_MASK;
}

static inline uint32_t soft_key_gen(uint32_t key)
{
    return key >> SOFT_MR_SLOT_BITS;
}

int soft_mr_table_init(soft_dev_t *dev)
{
    /* calloc: untouched pages of these large arrays stay unallocated */
    dev->mr_free = calloc(SOFT_MR_SLOTS, sizeof(*dev->mr_free));
    dev->mrs     = calloc(SOFT_MR_SLOTS, sizeof(*dev->mrs));
    if ((dev->mr_free == NULL) || (dev->mrs == NULL)) {
        free(dev->mr_free);
        free(dev->mrs);
        return ENOMEM;
    }
    dev->mr_free_head  = 0;
    dev->mr_free_count = 0;
    dev->mr_fresh      = 1;     /* slot 0 is never used */
    return 0;
}

void soft_mr_table_cleanup(soft_dev_t *dev)
{
    free(dev->mr_free);
    free(dev->mrs);
}

/* A free slot, or 0 when the table is full */
static uint32_t soft_mr_slot_get(soft_dev_t *dev)
{
    uint32_t index;

    if ((dev->mr_free_count < SOFT_MR_REUSE_MIN) &&
        (dev->mr_fresh < SOFT_MR_SLOTS)) {
        return dev->mr_fresh++;
    }
    if (dev->mr_free_count == 0) {
        return 0;
    }
    index             = dev->mr_free[dev->mr_free_head];
    dev->mr_free_head = (dev->mr_free_head + 1) % SOFT_MR_SLOTS;
    --dev->mr_free_count;
    return index;
}

static void soft_mr_slot_put(soft_dev_t *dev, uint32_t index)
{
    dev->mr_free[(dev->mr_free_head + dev->mr_free_count) % SOFT_MR_SLOTS] =
            index;
    ++dev->mr_free_count;
}

int soft_reg_mr(tm_dev_t *tdev, void *addr, size_t length, int access,
                tm_dev_mr_t **mr_p)
{
    soft_dev_t *dev = soft_dev(tdev);
    soft_mr_slot_t *slot;
    soft_mr_t *mr;
    uint32_t index, gen;

    if ((addr == NULL) && (length != 0)) {
        return EINVAL;
    }
    index = soft_mr_slot_get(dev);
    if (index == 0) {
        tm_dev_error("soft: registration table full (%u regions)",
                     SOFT_MR_SLOTS - 1);
        return ENOMEM;
    }

    /* generation 0 means "free" */
    mr           = &dev->mrs[index];
    gen          = mr->next_gen + 1;
    mr->next_gen = (gen == SOFT_MR_GEN_MAX) ? 0 : gen;

    /* fields first, then the generation that makes them valid */
    slot         = &dev->seg->mr[index];
    slot->addr   = (uintptr_t)addr;
    slot->length = length;
    slot->access = (uint32_t)access;
    atomic_store_explicit(&slot->gen, gen, memory_order_release);

    mr->slot          = index;
    mr->super.dev     = tdev;
    mr->super.addr    = addr;
    mr->super.length  = length;
    mr->super.lkey    = (gen << SOFT_MR_SLOT_BITS) | index;
    mr->super.rkey    = mr->super.lkey;
    *mr_p = &mr->super;
    return 0;
}

int soft_dereg_mr(tm_dev_mr_t *tmr)
{
    soft_mr_t *mr   = soft_container_of(tmr, soft_mr_t, super);
    soft_dev_t *dev = soft_dev(tmr->dev);

    atomic_store_explicit(&dev->seg->mr[mr->slot].gen, 0, memory_order_release);
    soft_mr_slot_put(dev, mr->slot);
    return 0;
}

/*
 * Is [addr, addr+length) inside the region named by key, with access?
 * Reads the slot like a seqlock: the generation before and after must both
 * be the key's.
 */
bool soft_key_check(const soft_dev_seg_t *seg, uint32_t key, uint64_t addr,
                    uint64_t length, uint32_t access)
{
    const soft_mr_slot_t *slot;
    uint64_t base, len;
    uint32_t gen, slot_access;

    if ((soft_key_slot(key) == 0) || (soft_key_gen(key) == 0)) {
        return false;
    }
    slot = &seg->mr[soft_key_slot(key)];
    gen  = atomic_load_explicit(&slot->gen, memory_order_acquire);
    if (gen != soft_key_gen(key)) {
        return false;
    }
    base        = slot->addr;
    len         = slot->length;
    slot_access = slot->access;
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&slot->gen, memory_order_relaxed) != gen) {
        return false;
    }
    if ((slot_access & access) != access) {
        return false;
    }
    /* overflow-safe: addr >= base and addr + length <= base + len */
    return (addr >= base) && (length <= len) && (addr - base <= len - length);
}

/* Copies between local memory and another process's (or our own) memory */
int soft_rdma_copy(pid_t peer, bool write, void *local, uint64_t remote,
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

/* Field by field: the structures' padding is not part of an address */
static bool soft_dev_addr_equal(const soft_dev_addr_t *a,
                                const soft_dev_addr_t *b)
{
    return (a->host_id == b->host_id) && (a->proc.pid == b->proc.pid) &&
           (a->proc.uid == b->proc.uid) &&
           (a->proc.start_time == b->proc.start_time) &&
           (a->dev_seq == b->dev_seq);
}

/* Maps a peer device's segment (its registration table), shared by conns */
int soft_peer_get(soft_dev_t *dev, const soft_dev_addr_t *addr,
                  soft_peer_t **peer_p)
{
    char name[96];
    soft_list_t *it;
    soft_peer_t *peer;
    int ret;

    for (it = dev->peers.next; it != &dev->peers; it = it->next) {
        peer = soft_container_of(it, soft_peer_t, link);
        if (soft_dev_addr_equal(&peer->addr, addr)) {
            ++peer->refcount;
            *peer_p = peer;
            return 0;
        }
    }

    peer = calloc(1, sizeof(*peer));
    if (peer == NULL) {
        return ENOMEM;
    }
    soft_seg_name(name, sizeof(name), &addr->proc, addr->dev_seq, 0, 0);
    ret = soft_shm_attach(&peer->shm, name);
    if (ret != 0) {
        free(peer);
        return ret;
    }
    peer->seg = peer->shm.base;
    if ((peer->shm.size < sizeof(soft_dev_seg_t)) ||
        (peer->seg->hdr.magic != SOFT_MAGIC) ||
        (peer->seg->hdr.kind != SOFT_SEG_DEV)) {
        soft_shm_detach(&peer->shm);
        free(peer);
        return EINVAL;
    }
    peer->addr     = *addr;
    peer->refcount = 1;
    soft_list_add_tail(&dev->peers, &peer->link);
    *peer_p = peer;
    return 0;
}

void soft_peer_put(soft_dev_t *dev, soft_peer_t *peer)
{
    (void)dev;
    if (--peer->refcount == 0) {
        soft_list_del(&peer->link);
        soft_shm_detach(&peer->shm);
        free(peer);
    }
}
