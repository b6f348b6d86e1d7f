/*
 * Software NIC: memory registration and RDMA copies.
 *
 * The registration table lives in the device's shared-memory segment so
 * that peers can check a key before they touch memory.  A key is
 * (generation << 20 | slot): deregistering clears the slot's generation and
 * the next registration of that slot uses a new one, so an old key is stale.
 * Freed slots are reused in FIFO order and only once SN_MR_REUSE_MIN others
 * wait behind them, so a stale key could look valid again only after
 * SN_MR_GEN_MAX * SN_MR_REUSE_MIN (16M) registrations; until then new
 * registrations take never-used slots, which keeps the touched part of the
 * table as small as the number of live regions allows.
 * RDMA copies are in softnic_rdma.c.
 */
#include "softnic_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SN_MR_SLOT_MASK   (SN_MR_SLOTS - 1)

static inline uint32_t sn_key_slot(uint32_t key)
{
    return key & SN_MR_SLOT_MASK;
}

static inline uint32_t sn_key_gen(uint32_t key)
{
    return key >> SN_MR_SLOT_BITS;
}

int sn_mr_table_init(sn_context_t *dev)
{
    /* calloc: untouched pages of these large arrays stay unallocated */
    dev->mr_free = calloc(SN_MR_SLOTS, sizeof(*dev->mr_free));
    dev->mrs     = calloc(SN_MR_SLOTS, sizeof(*dev->mrs));
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

void sn_mr_table_cleanup(sn_context_t *dev)
{
    free(dev->mr_free);
    free(dev->mrs);
}

/* A free slot, or 0 when the table is full */
static uint32_t sn_mr_slot_get(sn_context_t *dev)
{
    uint32_t index;

    if ((dev->mr_free_count < SN_MR_REUSE_MIN) &&
        (dev->mr_fresh < SN_MR_SLOTS)) {
        return dev->mr_fresh++;
    }
    if (dev->mr_free_count == 0) {
        return 0;
    }
    index             = dev->mr_free[dev->mr_free_head];
    dev->mr_free_head = (dev->mr_free_head + 1) % SN_MR_SLOTS;
    --dev->mr_free_count;
    return index;
}

static void sn_mr_slot_put(sn_context_t *dev, uint32_t index)
{
    dev->mr_free[(dev->mr_free_head + dev->mr_free_count) % SN_MR_SLOTS] =
            index;
    ++dev->mr_free_count;
}

struct ibv_mr *softnic_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
                              int access)
{
    sn_context_t *dev = sn_ctx(pd->context);
    sn_mr_slot_t *slot;
    sn_mr_t *mr;
    uint32_t index, gen;

    /* As the kernel's ib_check_mr_access: a remote write or atomic needs
     * local write (the IB specification) */
    if (((addr == NULL) && (length != 0)) ||
        ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
         !(access & IBV_ACCESS_LOCAL_WRITE))) {
        errno = EINVAL;
        return NULL;
    }

    index = sn_mr_slot_get(dev);
    if (index == 0) {
        sn_error("registration table full (%u regions)", SN_MR_SLOTS - 1);
        errno = ENOMEM;
        return NULL;
    }

    /* generation 0 means "free" */
    mr           = &dev->mrs[index];
    gen          = mr->next_gen + 1;
    mr->next_gen = (gen == SN_MR_GEN_MAX) ? 0 : gen;

    /* fields first, then the generation that makes them valid */
    slot         = &dev->seg->mr[index];
    slot->addr   = (uintptr_t)addr;
    slot->length = length;
    slot->access = (uint32_t)access;
    atomic_store_explicit(&slot->gen, gen, memory_order_release);

    mr->slot        = index;
    mr->ibv.context = pd->context;
    mr->ibv.pd      = pd;
    mr->ibv.addr    = addr;
    mr->ibv.length  = length;
    mr->ibv.handle  = index;
    mr->ibv.lkey    = (gen << SN_MR_SLOT_BITS) | index;
    mr->ibv.rkey    = mr->ibv.lkey;
    return &mr->ibv;
}

int softnic_dereg_mr(struct ibv_mr *ibv_mr)
{
    sn_mr_t *mr       = sn_container_of(ibv_mr, sn_mr_t, ibv);
    sn_context_t *dev = sn_ctx(ibv_mr->context);

    atomic_store_explicit(&dev->seg->mr[mr->slot].gen, 0, memory_order_release);
    sn_mr_slot_put(dev, mr->slot);
    return 0;
}

/*
 * Is [addr, addr+length) inside the region named by key, with access?
 * Reads the slot like a seqlock: the generation before and after must both
 * be the key's.
 */
bool sn_key_check(const sn_dev_seg_t *seg, uint32_t key, uint64_t addr,
                  uint64_t length, uint32_t access)
{
    const sn_mr_slot_t *slot;
    uint64_t base, len;
    uint32_t gen, slot_access;

    if ((sn_key_slot(key) == 0) || (sn_key_gen(key) == 0)) {
        return false;
    }
    slot = &seg->mr[sn_key_slot(key)];
    gen  = atomic_load_explicit(&slot->gen, memory_order_acquire);
    if (gen != sn_key_gen(key)) {
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

/* Maps a peer device's segment (its registration table), shared by QPs */
int sn_peer_get(sn_context_t *dev, const sn_proc_id_t *proc, uint16_t dev_seq,
                sn_peer_t **peer_p)
{
    char name[96];
    sn_list_t *it;
    sn_peer_t *peer;
    int ret;

    for (it = dev->peers.next; it != &dev->peers; it = it->next) {
        peer = sn_container_of(it, sn_peer_t, link);
        if ((peer->proc.pid == proc->pid) &&
            (peer->proc.start_time == proc->start_time) &&
            (peer->dev_seq == dev_seq)) {
            ++peer->refcount;
            *peer_p = peer;
            return 0;
        }
    }

    peer = calloc(1, sizeof(*peer));
    if (peer == NULL) {
        return ENOMEM;
    }
    sn_seg_name(name, sizeof(name), proc, dev_seq, 0, 0);
    ret = sn_shm_attach(&peer->shm, name);
    if (ret != 0) {
        free(peer);
        return ret;
    }
    peer->seg = peer->shm.base;
    if ((peer->shm.size < sizeof(sn_dev_seg_t)) ||
        (peer->seg->hdr.magic != SN_MAGIC) ||
        (peer->seg->hdr.kind != SN_SEG_DEV)) {
        sn_shm_detach(&peer->shm);
        free(peer);
        return EINVAL;
    }
    peer->proc     = *proc;
    peer->dev_seq  = dev_seq;
    peer->refcount = 1;
    sn_list_add_tail(&dev->peers, &peer->link);
    *peer_p = peer;
    return 0;
}

void sn_peer_put(sn_context_t *dev, sn_peer_t *peer)
{
    (void)dev;
    if (--peer->refcount == 0) {
        sn_list_del(&peer->link);
        sn_shm_detach(&peer->shm);
        free(peer);
    }
}
