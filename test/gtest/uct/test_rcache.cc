/*
 * The registration cache (UCX_RC_TM_RCACHE): a buffer registered again is
 * found, not registered; a cached key reaches its buffer at any offset,
 * however far the cached region reaches beyond it; memory given back to the
 * system and mapped again is registered anew (UCM's unmap events), never
 * found with the old keys; and with the cache off every registration is the
 * device's.  Hits and misses are the md's counters, read through an
 * interface on it.
 */
#include "uct_fixture.h"
#include "../common/rc_tm_config.h"
#include "../common/ucx_log_capture.h"

#include <ucm/api/ucm.h>
#include <ucs/debug/log_def.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <sys/mman.h>

using namespace rc_tm_test;

namespace {

const uint64_t FULL_MASK = UINT64_MAX;


/* Anonymous memory of our own: no other buffer of the test shares its
 * pages, so what the cache holds for it is this test's doing alone */
struct mapping {
    explicit mapping(size_t size, void *at = nullptr) : m_size(size)
    {
        int flags = MAP_PRIVATE | MAP_ANONYMOUS;
        if (at != nullptr) {
            flags |= MAP_FIXED_NOREPLACE;
        }
        void *p = mmap(at, size, PROT_READ | PROT_WRITE, flags, -1, 0);
        m_ptr   = (p == MAP_FAILED) ? nullptr : static_cast<char*>(p);
    }

    ~mapping() { unmap(); }

    void unmap()
    {
        if (m_ptr != nullptr) {
            munmap(m_ptr, m_size);
            m_ptr = nullptr;
        }
    }

    char   *m_ptr;
    size_t m_size;
};

void fill(char *p, size_t length, uint8_t seed)
{
    for (size_t i = 0; i < length; ++i) {
        p[i] = (char)(seed + i * 13);
    }
}

/* p[offset, offset + length) as fill(p, ..., seed) left it */
bool filled(const char *p, size_t length, uint8_t seed, size_t offset = 0)
{
    for (size_t i = offset; i < offset + length; ++i) {
        if (p[i] != (char)(seed + i * 13)) {
            return false;
        }
    }
    return true;
}

class rc_tm_rcache : public uct_fixture {
protected:
    void TearDown() override
    {
        for (uct_mem_h memh : m_held) {
            uct_md_mem_dereg(m_md, memh);
        }
        m_held.clear();
        uct_fixture::TearDown();
    }

    /* The md's registration counters so far */
    uint64_t hits()   { return counters(m_receiver)[RCACHE_HIT]; }
    uint64_t misses() { return counters(m_receiver)[RCACHE_MISS]; }

    /* Registered until dereg() or the end of the test */
    uct_mem_h reg(void *address, size_t length)
    {
        uct_mem_h memh = nullptr;
        EXPECT_EQ(UCS_OK, uct_md_mem_reg(m_md, address, length,
                                         UCT_MD_MEM_ACCESS_ALL, &memh));
        if (memh != nullptr) {
            m_held.push_back(memh);
        }
        return memh;
    }

    void dereg(uct_mem_h memh)
    {
        auto it = std::find(m_held.begin(), m_held.end(), memh);
        ASSERT_NE(m_held.end(), it);
        m_held.erase(it);
        EXPECT_EQ(UCS_OK, uct_md_mem_dereg(m_md, memh));
    }

    /* The key a peer gets: packed and unpacked as UCP carries it */
    uct_rkey_t rkey(uct_mem_h memh)
    {
        std::vector<char> packed(m_md_attr.rkey_packed_size);
        uct_rkey_bundle_t bundle;
        EXPECT_EQ(UCS_OK, uct_md_mkey_pack(m_md, memh, packed.data()));
        EXPECT_EQ(UCS_OK, uct_rkey_unpack(m_component, packed.data(),
                                          &bundle));
        uct_rkey_t key = bundle.rkey;
        uct_rkey_release(m_component, &bundle);
        return key;
    }

    /* An RDMA read or write of [remote, remote + length) through key, on a
     * new connection (a failed one fails its connection, as on RC) */
    ucs_status_t rdma(bool put, uint64_t remote, uct_rkey_t key,
                      char *local, size_t length, uct_mem_h local_memh)
    {
        connect(m_sender, m_receiver);
        uct_iov_t iov = {local, length, local_memh, 0, 1};
        test_completion comp;
        ucs_status_t status = put ?
                uct_ep_put_zcopy(m_sender.eps.back(), &iov, 1, remote, key,
                                 &comp.comp) :
                uct_ep_get_zcopy(m_sender.eps.back(), &iov, 1, remote, key,
                                 &comp.comp);
        if (status == UCS_INPROGRESS) {
            EXPECT_TRUE(wait_for([&] { return comp.done; }));
            status = comp.status;
        }
        return status;
    }

    /* A rendezvous of length bytes from send_buf (registered as send_memh)
     * into a receive posted on recv_buf (recv_memh): the device reads it
     * through the key the RVH carries */
    void rendezvous(char *send_buf, uct_mem_h send_memh, char *recv_buf,
                    uct_mem_h recv_memh, size_t length, uint64_t tag)
    {
        tag_recv r;
        uct_iov_t riov = {recv_buf, length, recv_memh, 0, 1};
        ASSERT_EQ(UCS_OK, uct_iface_tag_recv_zcopy(m_receiver.iface, tag,
                                                   FULL_MASK, &riov, 1,
                                                   &r.ctx));
        flush(m_receiver);

        test_completion comp;
        uct_iov_t siov = {send_buf, length, send_memh, 0, 1};
        char header[16] = {};
        ucs_status_ptr_t op = uct_ep_tag_rndv_zcopy(m_sender.eps.at(0), tag,
                                                    header, sizeof(header),
                                                    &siov, 1, 0, &comp.comp);
        ASSERT_FALSE(UCS_PTR_IS_ERR(op));
        ASSERT_TRUE(wait_for([&] { return (r.completed > 0) && comp.done; }));
        EXPECT_EQ(UCS_OK, r.status);
        EXPECT_EQ(length, r.length);
    }

    std::vector<uct_mem_h> m_held;
};

} // namespace

TEST_F(rc_tm_rcache, same_buffer_twice_hits)
{
    open();
    mapping buf(1 << 20);
    ASSERT_NE(nullptr, buf.m_ptr);
    uint64_t hit0 = hits(), miss0 = misses();

    uct_mem_h first = reg(buf.m_ptr, 65536);
    EXPECT_EQ(miss0 + 1, misses());
    EXPECT_EQ(hit0, hits());

    uct_mem_h second = reg(buf.m_ptr, 65536);
    EXPECT_EQ(miss0 + 1, misses()) << "the same buffer went to the device";
    EXPECT_EQ(hit0 + 1, hits());
    EXPECT_EQ(first, second);
    EXPECT_EQ(rkey(first), rkey(second));

    /* A deregistered buffer stays in the cache while its memory is mapped:
     * UCP deregisters an offloaded receive's buffer when it completes */
    dereg(first);
    dereg(second);
    uct_mem_h third = reg(buf.m_ptr, 65536);
    EXPECT_EQ(miss0 + 1, misses());
    EXPECT_EQ(hit0 + 2, hits());
    EXPECT_EQ(first, third);

    /* Part of a cached buffer is found too */
    reg(buf.m_ptr + 4096, 8192);
    EXPECT_EQ(miss0 + 1, misses());
    EXPECT_EQ(hit0 + 3, hits());
}

TEST_F(rc_tm_rcache, different_buffers_miss)
{
    open();
    mapping a(1 << 20), b(1 << 20);
    ASSERT_NE(nullptr, a.m_ptr);
    ASSERT_NE(nullptr, b.m_ptr);
    uint64_t hit0 = hits(), miss0 = misses();

    uct_mem_h ma = reg(a.m_ptr, 65536);
    uct_mem_h mb = reg(b.m_ptr, 65536);
    /* Beyond the first one's end, in the same mapping */
    uct_mem_h mc = reg(a.m_ptr + 131072, 65536);
    EXPECT_EQ(miss0 + 3, misses());
    EXPECT_EQ(hit0, hits());
    EXPECT_NE(rkey(ma), rkey(mb));
    EXPECT_NE(rkey(ma), rkey(mc));
    EXPECT_NE(rkey(mb), rkey(mc));
}

/* A handle found in the cache names a region that starts before the buffer
 * (aligned down) and may end after it (aligned up, or merged with an
 * overlapping neighbour): keys name virtual addresses, so RDMA through it
 * at any offset of the buffer reaches exactly those bytes */
TEST_F(rc_tm_rcache, cached_key_reaches_the_buffer_at_any_offset)
{
    open();
    mapping remote(1 << 20), local(1 << 20);
    ASSERT_NE(nullptr, remote.m_ptr);
    ASSERT_NE(nullptr, local.m_ptr);
    fill(remote.m_ptr, remote.m_size, 5);
    uct_mem_h lmemh = reg(local.m_ptr, local.m_size);

    reg(remote.m_ptr, 65536);
    uint64_t hit0 = hits(), miss0 = misses();
    /* Unaligned, inside: found, with the whole region's key */
    char *sub        = remote.m_ptr + 1003;
    uct_mem_h smemh  = reg(sub, 3000);
    EXPECT_EQ(hit0 + 1, hits());
    EXPECT_EQ(miss0, misses());
    uct_rkey_t skey  = rkey(smemh);

    for (size_t offset : {0ul, 1ul, 777ul, 2999ul}) {
        size_t length = 3000 - offset;
        memset(local.m_ptr, 0, length);
        ASSERT_EQ(UCS_OK, rdma(false, (uintptr_t)sub + offset, skey,
                               local.m_ptr, length, lmemh)) << offset;
        EXPECT_EQ(0, memcmp(local.m_ptr, sub + offset, length)) << offset;
    }

    /* A write at an offset changes those bytes and no others */
    fill(local.m_ptr, 100, 9);
    ASSERT_EQ(UCS_OK, rdma(true, (uintptr_t)sub + 50, skey, local.m_ptr, 100,
                           lmemh));
    EXPECT_TRUE(filled(remote.m_ptr, 1053, 5));
    EXPECT_TRUE(filled(sub + 50, 100, 9));
    EXPECT_TRUE(filled(remote.m_ptr, remote.m_size - 1153, 5, 1153));
    fill(remote.m_ptr, remote.m_size, 5);

    /* Overlapping the cached region's end: a new, merged region, from the
     * first buffer's start to past this one's end.  Its key reaches both
     * ends; the handle held before keeps its own key */
    char *tail      = remote.m_ptr + 60000;
    miss0           = misses();   /* RDMA grew the interfaces' pools */
    uct_mem_h tmemh = reg(tail, 8000);
    EXPECT_EQ(miss0 + 1, misses());
    uct_rkey_t tkey = rkey(tmemh);
    EXPECT_NE(skey, tkey);
    ASSERT_EQ(UCS_OK, rdma(false, (uintptr_t)tail + 7000, tkey, local.m_ptr,
                           1000, lmemh));
    EXPECT_EQ(0, memcmp(local.m_ptr, tail + 7000, 1000));
    ASSERT_EQ(UCS_OK, rdma(false, (uintptr_t)remote.m_ptr, tkey, local.m_ptr,
                           100, lmemh));
    EXPECT_EQ(0, memcmp(local.m_ptr, remote.m_ptr, 100));
    ASSERT_EQ(UCS_OK, rdma(false, (uintptr_t)sub + 100, skey, local.m_ptr,
                           100, lmemh));
    EXPECT_EQ(0, memcmp(local.m_ptr, sub + 100, 100));

    /* Rendezvous between two buffers that are offsets into cached regions
     * (longer than a segment: listed with the user's buffer, not a bounce):
     * the RVH carries the sender's buffer address and its region's key, the
     * receive is listed with its region's lkey */
    char *sbuf      = remote.m_ptr + 11;
    char *rbuf      = local.m_ptr + 200005;
    hit0            = hits();
    miss0           = misses();
    uct_mem_h s2    = reg(sbuf, 16000);
    uct_mem_h rmemh = reg(rbuf, 20000);
    EXPECT_EQ(miss0, misses());
    EXPECT_EQ(hit0 + 2, hits());
    memset(rbuf, 0, 20000);
    rendezvous(sbuf, s2, rbuf, rmemh, 16000, 0x99);
    EXPECT_EQ(0, memcmp(rbuf, sbuf, 16000));
    EXPECT_EQ(0, rbuf[16000]);
    EXPECT_EQ(0, rbuf[-1]);
}

/* Memory unmapped and mapped again at the same address: the unmap event
 * drops the cached region, so the new memory is registered anew and the
 * old key names nothing any more (on a NIC the old key would still reach
 * the old, pinned pages: stale data) */
TEST_F(rc_tm_rcache, unmapped_and_mapped_again_registers_anew)
{
    open();
    mapping local(65536);
    ASSERT_NE(nullptr, local.m_ptr);
    uct_mem_h lmemh = reg(local.m_ptr, local.m_size);

    const size_t size = 262144;
    auto buf = std::make_unique<mapping>(size);
    ASSERT_NE(nullptr, buf->m_ptr);
    char *address = buf->m_ptr;
    fill(address, size, 1);
    uct_mem_h old_memh  = reg(address, size);
    uct_rkey_t old_key  = rkey(old_memh);
    dereg(old_memh);
    /* Still registered: the cache keeps it */
    ASSERT_EQ(UCS_OK, rdma(false, (uintptr_t)address + 100, old_key,
                           local.m_ptr, 100, lmemh));
    EXPECT_TRUE(filled(local.m_ptr, 100, (uint8_t)(1 + 100 * 13)));

    buf.reset();
    buf = std::make_unique<mapping>(size, address);
    if (buf->m_ptr != address) {
        GTEST_SKIP() << "could not map " << (void*)address << " again";
    }
    fill(address, size, 2);

    uint64_t hit0 = hits(), miss0 = misses();
    uct_mem_h new_memh = reg(address, size);
    EXPECT_EQ(miss0 + 1, misses()) << "unmapped memory found in the cache";
    EXPECT_EQ(hit0, hits());
    uct_rkey_t new_key = rkey(new_memh);
    EXPECT_NE(old_key, new_key);

    ASSERT_EQ(UCS_OK, rdma(false, (uintptr_t)address + 100, new_key,
                           local.m_ptr, 1000, lmemh));
    EXPECT_TRUE(filled(local.m_ptr, 1000, (uint8_t)(2 + 100 * 13)));

    ucx_log_capture log;
    EXPECT_NE(UCS_OK, rdma(false, (uintptr_t)address + 100, old_key,
                           local.m_ptr, 100, lmemh))
            << "the old registration outlived its memory";
}

/* Whether UCM reported an unmap of [watch, watch + 1) while it lived: the
 * event the cache invalidates regions on */
class unmap_watch {
public:
    explicit unmap_watch(const void *address) : m_address((uintptr_t)address)
    {
        EXPECT_EQ(UCS_OK, ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED, 0,
                                                callback, this));
    }

    ~unmap_watch()
    {
        ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED, callback, this);
    }

    bool seen() const { return m_seen; }

private:
    static void callback(ucm_event_type_t type, ucm_event_t *event, void *arg)
    {
        auto *self      = static_cast<unmap_watch*>(arg);
        uintptr_t start = (uintptr_t)event->vm_unmapped.address;
        if ((self->m_address >= start) &&
            (self->m_address < start + event->vm_unmapped.size)) {
            self->m_seen = true;
        }
    }

    uintptr_t     m_address;
    volatile bool m_seen = false;
};

/* The same through malloc and free, as a user's buffers come and go: with
 * glibc's allocator and UCM's, a buffer beyond the largest mmap threshold
 * (32 MiB) is its own mapping, unmapped at free, and the next one is at the
 * same address: it must be registered anew.  An allocator that keeps freed
 * memory mapped (ASan's) gives back the same memory, and a hit is right;
 * one that unmaps without libc (valgrind's) hides the unmap from UCM, and
 * the cache keeps a stale registration: UCX's limitation, not checked
 * here. */
TEST_F(rc_tm_rcache, freed_and_allocated_again_registers_anew)
{
    open();
    mapping local(65536);
    ASSERT_NE(nullptr, local.m_ptr);
    uct_mem_h lmemh = reg(local.m_ptr, local.m_size);

    const size_t size = 64 << 20, page = 4096, last = size - page;
    int checked       = 0;
    for (int round = 0; round < 3; ++round) {
        char *p = static_cast<char*>(malloc(size));
        ASSERT_NE(nullptr, p);
        uintptr_t address = (uintptr_t)p;
        uct_mem_h memh    = reg(p, size);
        uct_rkey_t key    = rkey(memh);
        dereg(memh);
        bool unmapped;
        {
            unmap_watch watch(p);
            free(p);
            unmapped = watch.seen();
        }

        char *q = static_cast<char*>(malloc(size));
        ASSERT_NE(nullptr, q);
        fill(q + last, page, 2);     /* pages we touch, not 64 MiB */
        uint64_t hit0 = hits(), miss0 = misses();
        uct_mem_h qmemh = reg(q, size);
        uct_rkey_t qkey = rkey(qmemh);
        if (unmapped && ((uintptr_t)q == address)) {
            ++checked;
            EXPECT_EQ(miss0 + 1, misses()) << "round " << round;
            EXPECT_EQ(hit0, hits()) << "round " << round;
            EXPECT_NE(key, qkey) << "round " << round;
        }
        ASSERT_EQ(UCS_OK, rdma(false, (uintptr_t)q + last, qkey, local.m_ptr,
                               page, lmemh));
        EXPECT_TRUE(filled(local.m_ptr, page, 2));
        dereg(qmemh);
        free(q);
    }
    if (checked == 0) {
        GTEST_SKIP() << "UCM saw no freed buffer unmapped, or none mapped "
                        "again at its address";
    }
}

/* UCX_RC_TM_RCACHE=no: every registration is the device's own, and a
 * deregistered key names nothing */
TEST_F(rc_tm_rcache, disabled_registers_every_time)
{
    open({{"RCACHE", "no"}});
    mapping buf(65536), local(65536);
    ASSERT_NE(nullptr, buf.m_ptr);
    ASSERT_NE(nullptr, local.m_ptr);
    fill(buf.m_ptr, buf.m_size, 3);
    uct_mem_h lmemh = reg(local.m_ptr, local.m_size);
    uint64_t hit0 = hits(), miss0 = misses();

    uct_mem_h first  = reg(buf.m_ptr, buf.m_size);
    uct_mem_h second = reg(buf.m_ptr, buf.m_size);
    EXPECT_NE(first, second);
    uct_rkey_t key1 = rkey(first), key2 = rkey(second);
    EXPECT_NE(key1, key2);
    EXPECT_EQ(hit0, hits());
    EXPECT_EQ(miss0, misses());

    for (uct_rkey_t key : {key1, key2}) {
        ASSERT_EQ(UCS_OK, rdma(false, (uintptr_t)buf.m_ptr + 10, key,
                               local.m_ptr, 1000, lmemh));
        EXPECT_TRUE(filled(local.m_ptr, 1000, (uint8_t)(3 + 10 * 13)));
    }

    dereg(first);
    ucx_log_capture log;
    EXPECT_NE(UCS_OK, rdma(false, (uintptr_t)buf.m_ptr, key1, local.m_ptr,
                           100, lmemh));
    EXPECT_EQ(UCS_OK, rdma(false, (uintptr_t)buf.m_ptr, key2, local.m_ptr,
                           100, lmemh));
}

/* UCM's memory events off (UCX_MEM_EVENTS=n) while it lives: a cache needs
 * them to learn of unmapped memory, so none can be made */
class without_memory_events {
public:
    without_memory_events() : m_saved(ucm_global_opts.enable_events)
    {
        ucm_global_opts.enable_events = 0;
    }
    ~without_memory_events()
    {
        ucm_global_opts.enable_events = m_saved;
    }

private:
    int m_saved;
};

/* A cache that cannot be made: "yes" refuses to open the md and says why,
 * "try" registers directly */
TEST_F(rc_tm_rcache, yes_fails_without_a_cache_and_try_goes_on)
{
    without_memory_events no_events;
    uct_md_config_t *config;
    uct_md_h md = nullptr;
    ASSERT_EQ(UCS_OK, uct_md_config_read(m_component, NULL, NULL, &config));
    ASSERT_EQ(UCS_OK, rc_tm_config_modify(config, "RCACHE", "yes"));
    {
        ucx_log_capture log;
        EXPECT_NE(UCS_OK, uct_md_open(m_component, "soft", config, &md));
        EXPECT_TRUE(log.has("UCX_RC_TM_RCACHE=yes"));
    }
    uct_config_release(config);

    open({{"RCACHE", "try"}});
    mapping buf(65536);
    ASSERT_NE(nullptr, buf.m_ptr);
    uct_mem_h first  = reg(buf.m_ptr, buf.m_size);
    uct_mem_h second = reg(buf.m_ptr, buf.m_size);
    EXPECT_NE(first, second);
    EXPECT_EQ(0u, hits());
    EXPECT_EQ(0u, misses());
}
