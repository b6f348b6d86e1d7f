/*
 * Software tag matcher: see tag_matcher.h for the interface.
 *
 * Layout: a matcher has one group per distinct mask.  A group is a hash
 * table with linear probing whose slots are {key, first entry}; the entries
 * sharing a key form a doubly linked list in sequence order, the first one's
 * prev pointing to the last one so that appending needs no extra field in
 * the slot.  Tables hold at most half as many keys as slots, so a lookup
 * usually reads one cache line, and slots are freed by backward shifting
 * (no tombstones, lookups never slow down with churn).
 */

#include "tag_matcher.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>


#define TM_MATCHER_MIN_SLOTS    16
#define TM_MATCHER_MIN_GROUPS   4
#define TM_MATCHER_CACHE_LINE   64

#define tm_matcher_likely(_x)   __builtin_expect(!!(_x), 1)
#define tm_matcher_unlikely(_x) __builtin_expect(!!(_x), 0)


typedef struct tm_matcher_slot {
    uint64_t                  key;   /* masked tag */
    tm_matcher_entry_t        *head; /* oldest entry with this key; NULL: free */
} tm_matcher_slot_t;


static inline size_t tm_matcher_group_home(const tm_matcher_group_t *g,
                                           uint64_t key)
{
    /* Fibonacci hashing: the top bits of the product depend on every bit of
     * the key, which matters because masked tags differ in arbitrary bit
     * ranges (Open MPI packs tag, source and communicator). */
    key ^= key >> 32;
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> g->shift);
}

static inline tm_matcher_slot_t *
tm_matcher_group_lookup(const tm_matcher_group_t *g, uint64_t key)
{
    size_t i = tm_matcher_group_home(g, key);
    tm_matcher_slot_t *slot;

    for (;;) {
        slot = &g->slots[i];
        if (slot->head == NULL) {
            return NULL;
        }
        if (slot->key == key) {
            return slot;
        }
        i = (i + 1) & g->slot_mask;
    }
}

/* The slot holding key, or the free slot where it would go */
static inline tm_matcher_slot_t *
tm_matcher_group_probe(const tm_matcher_group_t *g, uint64_t key)
{
    size_t i = tm_matcher_group_home(g, key);
    tm_matcher_slot_t *slot;

    for (;;) {
        slot = &g->slots[i];
        if ((slot->head == NULL) || (slot->key == key)) {
            return slot;
        }
        i = (i + 1) & g->slot_mask;
    }
}

static tm_matcher_slot_t *tm_matcher_slots_alloc(size_t nslots)
{
    size_t size = nslots * sizeof(tm_matcher_slot_t);
    void *slots;

    if (posix_memalign(&slots, TM_MATCHER_CACHE_LINE, size) != 0) {
        return NULL;
    }
    memset(slots, 0, size);
    return slots;
}

static unsigned tm_matcher_log2(size_t n)
{
    return (unsigned)(63 - __builtin_clzll(n));
}

/* Rehash into nslots slots (a power of 2, more than twice nkeys) */
static int tm_matcher_group_resize(tm_matcher_group_t *g, size_t nslots)
{
    tm_matcher_slot_t *old_slots = g->slots;
    size_t old_nslots            = g->slot_mask + 1;
    tm_matcher_slot_t *slots, *slot;
    size_t i;

    slots = tm_matcher_slots_alloc(nslots);
    if (slots == NULL) {
        return -ENOMEM;
    }

    g->slots     = slots;
    g->slot_mask = nslots - 1;
    g->shift     = 64 - tm_matcher_log2(nslots);
    for (i = 0; i < old_nslots; ++i) {
        if (old_slots[i].head != NULL) {
            slot  = tm_matcher_group_probe(g, old_slots[i].key);
            *slot = old_slots[i];
        }
    }

    free(old_slots);
    return 0;
}

/* Make room for nkeys keys at a load factor of at most 1/2 */
static int tm_matcher_group_reserve(tm_matcher_group_t *g, size_t nkeys)
{
    size_t nslots = g->slot_mask + 1;

    if (nkeys * 2 <= nslots) {
        return 0;
    }

    while (nkeys * 2 > nslots) {
        nslots *= 2;
    }
    return tm_matcher_group_resize(g, nslots);
}

/* Free a slot by moving later entries of its probe run back into it */
static void tm_matcher_group_slot_free(tm_matcher_group_t *g,
                                       tm_matcher_slot_t *slot)
{
    tm_matcher_slot_t *slots = g->slots;
    size_t mask              = g->slot_mask;
    size_t hole              = slot - slots;
    size_t i                 = hole;
    size_t home;

    for (;;) {
        i = (i + 1) & mask;
        if (slots[i].head == NULL) {
            break;
        }
        /* Move unless the key's home lies cyclically in (hole, i] */
        home = tm_matcher_group_home(g, slots[i].key);
        if (((i - home) & mask) >= ((i - hole) & mask)) {
            slots[hole] = slots[i];
            hole        = i;
        }
    }

    slots[hole].head = NULL;
    --g->nkeys;
}

static int tm_matcher_group_init(tm_matcher_group_t *g, uint64_t mask)
{
    g->mask      = mask;
    g->count     = 0;
    g->nkeys     = 0;
    g->slot_mask = TM_MATCHER_MIN_SLOTS - 1;
    g->shift     = 64 - tm_matcher_log2(TM_MATCHER_MIN_SLOTS);
    g->slots     = tm_matcher_slots_alloc(TM_MATCHER_MIN_SLOTS);
    return (g->slots == NULL) ? -ENOMEM : 0;
}

static void tm_matcher_group_swap(tm_matcher_t *m, unsigned i, unsigned j)
{
    tm_matcher_group_t tmp;

    if (i != j) {
        tmp          = m->groups[i];
        m->groups[i] = m->groups[j];
        m->groups[j] = tmp;
    }
}

/* The group of mask, which holds entries; NULL if none does */
static inline tm_matcher_group_t *
tm_matcher_active_group(const tm_matcher_t *m, uint64_t mask)
{
    unsigned i;

    for (i = 0; i < m->nactive; ++i) {
        if (m->groups[i].mask == mask) {
            return &m->groups[i];
        }
    }
    return NULL;
}

/*
 * Index of the group of mask, active or not; creates it (reusing the table
 * of a group that holds no entries, if there is one) if needed.
 * Returns -ENOMEM on failure.
 */
static int tm_matcher_group_index(tm_matcher_t *m, uint64_t mask)
{
    tm_matcher_group_t *groups;
    unsigned i, max_groups;

    for (i = 0; i < m->ngroups; ++i) {
        if (m->groups[i].mask == mask) {
            return i;
        }
    }

    if (m->nactive < m->ngroups) {
        /* An empty group: its table is all free slots, whatever its mask */
        i                 = m->ngroups - 1;
        m->groups[i].mask = mask;
        return i;
    }

    if (m->ngroups == m->max_groups) {
        max_groups = m->max_groups * 2;
        groups     = realloc(m->groups, max_groups * sizeof(*groups));
        if (groups == NULL) {
            return -ENOMEM;
        }
        m->groups     = groups;
        m->max_groups = max_groups;
    }

    if (tm_matcher_group_init(&m->groups[m->ngroups], mask) != 0) {
        return -ENOMEM;
    }
    return m->ngroups++;
}

/* The group of mask, made active, with room for one more key */
static tm_matcher_group_t *tm_matcher_group_get(tm_matcher_t *m, uint64_t mask)
{
    tm_matcher_group_t *g = tm_matcher_active_group(m, mask);
    int i;

    if (tm_matcher_likely(g != NULL)) {
        return g;
    }

    i = tm_matcher_group_index(m, mask);
    if (i < 0) {
        return NULL;
    }

    tm_matcher_group_swap(m, i, m->nactive);
    return &m->groups[m->nactive++];
}

static void tm_matcher_group_put(tm_matcher_t *m, tm_matcher_group_t *g)
{
    if (--g->count == 0) {
        /* Keep its table for the next mask, out of the match loop */
        tm_matcher_group_swap(m, g - m->groups, --m->nactive);
    }
}

static inline int tm_matcher_entry_is_first(const tm_matcher_entry_t *e)
{
    /* The first entry's prev is the last one, whose next is NULL */
    return e->prev->next != e;
}

static inline void tm_matcher_order_insert_after(tm_matcher_link_t *pos,
                                                 tm_matcher_link_t *link)
{
    link->prev       = pos;
    link->next       = pos->next;
    pos->next->prev  = link;
    pos->next        = link;
}

static inline void tm_matcher_order_del(tm_matcher_link_t *link)
{
    link->prev->next = link->next;
    link->next->prev = link->prev;
}

/* Insert e into the list of its key, in sequence order */
static void tm_matcher_key_insert(tm_matcher_slot_t *slot,
                                  tm_matcher_entry_t *e)
{
    tm_matcher_entry_t *first = slot->head;
    tm_matcher_entry_t *last  = first->prev;
    tm_matcher_entry_t *pos;

    if (tm_matcher_likely(last->seq < e->seq)) {
        e->prev     = last;
        e->next     = NULL;
        last->next  = e;
        first->prev = e;
    } else if (first->seq > e->seq) {
        e->prev     = last;
        e->next     = first;
        first->prev = e;
        slot->head  = e;
    } else {
        /* Stops at the first entry at the latest: first->seq <= e->seq */
        for (pos = last; pos->seq > e->seq; pos = pos->prev) {
        }
        e->prev   = pos;
        e->next   = pos->next;
        pos->next = e;
        if (e->next != NULL) {
            e->next->prev = e;
        } else {
            first->prev = e;
        }
    }
}

static void tm_matcher_order_insert(tm_matcher_t *m, tm_matcher_entry_t *e)
{
    tm_matcher_link_t *pos = m->order.prev;

    while ((pos != &m->order) &&
           (tm_matcher_entry_of_link(pos)->seq > e->seq)) {
        pos = pos->prev;
    }
    tm_matcher_order_insert_after(pos, &e->order);
}

static int tm_matcher_insert(tm_matcher_t *m, tm_matcher_entry_t *e,
                             uint64_t tag, uint64_t mask, void *arg,
                             uint64_t seq)
{
    tm_matcher_group_t *g;
    tm_matcher_slot_t *slot;

    g = tm_matcher_group_get(m, mask);
    if (tm_matcher_unlikely(g == NULL)) {
        return -ENOMEM;
    }

    e->tag  = tag & mask;
    e->mask = mask;
    e->seq  = seq;
    e->arg  = arg;

    slot = tm_matcher_group_probe(g, e->tag);
    if (slot->head == NULL) {
        if (tm_matcher_unlikely((g->nkeys + 1) * 2 > g->slot_mask + 1)) {
            if (tm_matcher_group_reserve(g, g->nkeys + 1) != 0) {
                if (g->count == 0) {
                    tm_matcher_group_swap(m, g - m->groups, --m->nactive);
                }
                return -ENOMEM;
            }
            slot = tm_matcher_group_probe(g, e->tag);
        }
        slot->key  = e->tag;
        slot->head = e;
        e->prev    = e;
        e->next    = NULL;
        ++g->nkeys;
    } else {
        tm_matcher_key_insert(slot, e);
    }

    if (tm_matcher_likely((m->order.prev == &m->order) ||
                          (tm_matcher_entry_of_link(m->order.prev)->seq <
                           seq))) {
        tm_matcher_order_insert_after(m->order.prev, &e->order);
    } else {
        tm_matcher_order_insert(m, e);
    }

    ++g->count;
    ++m->count;
    return 0;
}

/* Unlink e, found in slot (NULL: look it up if needed), from its group */
static void tm_matcher_unlink(tm_matcher_t *m, tm_matcher_group_t *g,
                              tm_matcher_slot_t *slot, tm_matcher_entry_t *e)
{
    tm_matcher_entry_t *next = e->next;

    if (tm_matcher_entry_is_first(e)) {
        if (slot == NULL) {
            slot = tm_matcher_group_lookup(g, e->tag);
        }
        if (next == NULL) {
            tm_matcher_group_slot_free(g, slot);
        } else {
            next->prev = e->prev;
            slot->head = next;
        }
    } else {
        e->prev->next = next;
        if (next != NULL) {
            next->prev = e->prev;
        } else {
            /* e was the last one: the first one points to its predecessor */
            if (slot == NULL) {
                slot = tm_matcher_group_lookup(g, e->tag);
            }
            slot->head->prev = e->prev;
        }
    }

    tm_matcher_order_del(&e->order);
    tm_matcher_group_put(m, g);
    --m->count;
}

int tm_matcher_init(tm_matcher_t *m, uint64_t *seq)
{
    m->groups = malloc(TM_MATCHER_MIN_GROUPS * sizeof(*m->groups));
    if (m->groups == NULL) {
        return -ENOMEM;
    }

    m->ngroups    = 0;
    m->nactive    = 0;
    m->max_groups = TM_MATCHER_MIN_GROUPS;
    m->count      = 0;
    m->order.next = &m->order;
    m->order.prev = &m->order;
    m->own_seq    = 0;
    m->seq        = (seq != NULL) ? seq : &m->own_seq;
    return 0;
}

void tm_matcher_cleanup(tm_matcher_t *m)
{
    unsigned i;

    for (i = 0; i < m->ngroups; ++i) {
        free(m->groups[i].slots);
    }
    free(m->groups);
    m->groups  = NULL;
    m->ngroups = 0;
    m->nactive = 0;
    m->count   = 0;
}

int tm_matcher_post(tm_matcher_t *m, tm_matcher_entry_t *e, uint64_t tag,
                    uint64_t mask, void *arg)
{
    int ret = tm_matcher_insert(m, e, tag, mask, arg, *m->seq);

    if (tm_matcher_likely(ret == 0)) {
        ++*m->seq;
    }
    return ret;
}

int tm_matcher_post_seq(tm_matcher_t *m, tm_matcher_entry_t *e, uint64_t tag,
                        uint64_t mask, void *arg, uint64_t seq)
{
    return tm_matcher_insert(m, e, tag, mask, arg, seq);
}

void tm_matcher_remove(tm_matcher_t *m, tm_matcher_entry_t *e)
{
    tm_matcher_unlink(m, tm_matcher_active_group(m, e->mask), NULL, e);
}

/* Earliest entry matched by tag, and where it is */
static inline tm_matcher_entry_t *
tm_matcher_find(const tm_matcher_t *m, uint64_t tag,
                tm_matcher_group_t **group_p, tm_matcher_slot_t **slot_p)
{
    tm_matcher_entry_t *best = NULL;
    tm_matcher_group_t *g;
    tm_matcher_slot_t *slot;
    unsigned i;

    for (i = 0; i < m->nactive; ++i) {
        g    = &m->groups[i];
        slot = tm_matcher_group_lookup(g, tag & g->mask);
        if ((slot != NULL) &&
            ((best == NULL) || (slot->head->seq < best->seq))) {
            best     = slot->head;
            *group_p = g;
            *slot_p  = slot;
        }
    }
    return best;
}

tm_matcher_entry_t *tm_matcher_match(tm_matcher_t *m, uint64_t tag)
{
    tm_matcher_group_t *g;
    tm_matcher_slot_t *slot;
    tm_matcher_entry_t *e;

    e = tm_matcher_find(m, tag, &g, &slot);
    if (e != NULL) {
        tm_matcher_unlink(m, g, slot, e);
    }
    return e;
}

tm_matcher_entry_t *tm_matcher_peek(tm_matcher_t *m, uint64_t tag)
{
    tm_matcher_group_t *g;
    tm_matcher_slot_t *slot;

    return tm_matcher_find(m, tag, &g, &slot);
}

tm_matcher_entry_t *tm_matcher_search(tm_matcher_t *m, uint64_t tag,
                                      uint64_t mask, int remove)
{
    tm_matcher_entry_t *best = NULL;
    tm_matcher_group_t *best_g = NULL, *g;
    tm_matcher_slot_t *best_slot = NULL, *slot;
    tm_matcher_link_t *link;
    unsigned i;

    if (mask == TM_MATCHER_MASK_FULL) {
        /* An entry equal to tag has tag as its key: one lookup per group */
        for (i = 0; i < m->nactive; ++i) {
            g = &m->groups[i];
            if ((tag & g->mask) != tag) {
                continue;
            }
            slot = tm_matcher_group_lookup(g, tag);
            if ((slot != NULL) &&
                ((best == NULL) || (slot->head->seq < best->seq))) {
                best      = slot->head;
                best_g    = g;
                best_slot = slot;
            }
        }
    } else {
        for (link = m->order.next; link != &m->order; link = link->next) {
            if (((tm_matcher_entry_of_link(link)->tag ^ tag) & mask) == 0) {
                best   = tm_matcher_entry_of_link(link);
                best_g = tm_matcher_active_group(m, best->mask);
                break;
            }
        }
    }

    if ((best != NULL) && remove) {
        tm_matcher_unlink(m, best_g, best_slot, best);
    }
    return best;
}

int tm_matcher_reserve(tm_matcher_t *m, uint64_t mask, size_t count)
{
    int i = tm_matcher_group_index(m, mask);

    if (i < 0) {
        return -ENOMEM;
    }
    return tm_matcher_group_reserve(&m->groups[i], m->groups[i].nkeys + count);
}
