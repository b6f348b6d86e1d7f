/*
 * Software tag matcher: see tag_matcher.h for the interface.
 *
 * Layout: a matcher has one group per distinct mask.  A group is a chained
 * hash table: a bucket points to the first entry of a key, which chains to
 * the first entry of the next key in that bucket.  The entries sharing a key
 * form a doubly linked list in sequence order, the first one's prev pointing
 * to the last one, so that appending needs nothing but the first entry.
 * Everything is linked through the entries: a table is one pointer per
 * bucket, at most half a key per bucket on average, and removing an entry
 * is a few pointer updates, without loops.
 */

#include "tag_matcher.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>


#define TM_MATCHER_MIN_BUCKETS      16
#define TM_MATCHER_SHRINK_BUCKETS   4096 /* an empty group this large shrinks */
#define TM_MATCHER_MIN_GROUPS       4
#define TM_MATCHER_CACHE_LINE       64

/* Buckets per key, at least: most lookups then find their key first in its
 * chain (or an empty bucket), so the branch on the key compare, which waits
 * for the entry to come from memory, is rarely mispredicted.  A bucket is
 * one pointer, so this is still 16 bytes or less per key. */
#define TM_MATCHER_BUCKETS_PER_KEY  2

#define tm_matcher_likely(_x)   __builtin_expect(!!(_x), 1)
#define tm_matcher_unlikely(_x) __builtin_expect(!!(_x), 0)


static inline size_t tm_matcher_group_bucket(const tm_matcher_group_t *g,
                                             uint64_t key)
{
    /* Fibonacci hashing: the top bits of the product depend on every bit of
     * the key, which matters because masked tags differ in arbitrary bit
     * ranges (Open MPI packs tag, source and communicator). */
    key ^= key >> 32;
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> g->shift);
}

/*
 * The link that points to the first entry with key: a bucket or the chain
 * field of the previous key's first entry.  If there is no such entry, the
 * link at the end of the bucket's chain, which points to NULL.
 */
static inline tm_matcher_entry_t **
tm_matcher_group_find(const tm_matcher_group_t *g, uint64_t key)
{
    tm_matcher_entry_t **link = &g->buckets[tm_matcher_group_bucket(g, key)];

    while ((*link != NULL) && ((*link)->tag != key)) {
        link = &(*link)->chain;
    }
    return link;
}

static unsigned tm_matcher_log2(size_t n)
{
    return (unsigned)(63 - __builtin_clzll(n));
}

static tm_matcher_entry_t **tm_matcher_buckets_alloc(size_t nbuckets)
{
    size_t size = nbuckets * sizeof(tm_matcher_entry_t*);
    void *buckets;

    if (posix_memalign(&buckets, TM_MATCHER_CACHE_LINE, size) != 0) {
        return NULL;
    }
    memset(buckets, 0, size);
    return buckets;
}

/* Rehash into nbuckets buckets (a power of 2) */
static int tm_matcher_group_resize(tm_matcher_group_t *g, size_t nbuckets)
{
    tm_matcher_entry_t **old_buckets = g->buckets;
    size_t old_nbuckets              = g->bucket_mask + 1;
    tm_matcher_entry_t **buckets, *first, *chain, **bucket;
    size_t i;

    buckets = tm_matcher_buckets_alloc(nbuckets);
    if (buckets == NULL) {
        return -ENOMEM;
    }

    g->buckets     = buckets;
    g->bucket_mask = nbuckets - 1;
    g->shift       = 64 - tm_matcher_log2(nbuckets);
    for (i = 0; i < old_nbuckets; ++i) {
        for (first = old_buckets[i]; first != NULL; first = chain) {
            chain        = first->chain;
            bucket       = &buckets[tm_matcher_group_bucket(g, first->tag)];
            first->chain = *bucket;
            *bucket      = first;
        }
    }

    free(old_buckets);
    return 0;
}

/* Make room for nkeys keys, with TM_MATCHER_BUCKETS_PER_KEY buckets each */
static int tm_matcher_group_reserve(tm_matcher_group_t *g, size_t nkeys)
{
    size_t nbuckets = g->bucket_mask + 1;

    if (nkeys * TM_MATCHER_BUCKETS_PER_KEY <= nbuckets) {
        return 0;
    }

    while (nkeys * TM_MATCHER_BUCKETS_PER_KEY > nbuckets) {
        nbuckets *= 2;
    }
    return tm_matcher_group_resize(g, nbuckets);
}

static int tm_matcher_group_init(tm_matcher_group_t *g, uint64_t mask)
{
    g->mask        = mask;
    g->count       = 0;
    g->nkeys       = 0;
    g->bucket_mask = TM_MATCHER_MIN_BUCKETS - 1;
    g->shift       = 64 - tm_matcher_log2(TM_MATCHER_MIN_BUCKETS);
    g->buckets     = tm_matcher_buckets_alloc(TM_MATCHER_MIN_BUCKETS);
    return (g->buckets == NULL) ? -ENOMEM : 0;
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

/* The group of mask in the match loop; NULL if there is none */
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
 * Index of the group of mask, in the match loop or not; creates it (reusing
 * the table of a group out of the loop, if there is one) if needed.
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
        /* Out of the loop, so empty: its buckets are empty, whatever mask */
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

/*
 * Take the groups that hold no entries out of the match loop.  Done only
 * when a new mask needs a group: a group that empties stays in the loop
 * until then, so a mask whose entries come and go (one receive posted and
 * matched over and over) does not leave and re-enter it each time.
 */
static void tm_matcher_groups_sweep(tm_matcher_t *m)
{
    unsigned i = 0;

    while (i < m->nactive) {
        if (m->groups[i].count == 0) {
            tm_matcher_group_swap(m, i, --m->nactive);
        } else {
            ++i;
        }
    }
}

/* The group of mask, created if needed, in the match loop */
static tm_matcher_group_t *tm_matcher_group_get(tm_matcher_t *m, uint64_t mask)
{
    tm_matcher_group_t *g = tm_matcher_active_group(m, mask);
    int i;

    if (tm_matcher_likely(g != NULL)) {
        return g;
    }

    tm_matcher_groups_sweep(m);
    i = tm_matcher_group_index(m, mask);
    if (i < 0) {
        return NULL;
    }

    tm_matcher_group_swap(m, i, m->nactive);
    return &m->groups[m->nactive++];
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

/* Insert e into the list of the key whose first entry *link is */
static void tm_matcher_key_insert(tm_matcher_entry_t **link,
                                  tm_matcher_entry_t *e)
{
    tm_matcher_entry_t *first = *link;
    tm_matcher_entry_t *last  = first->prev;
    tm_matcher_entry_t *pos;

    if (tm_matcher_likely(last->seq < e->seq)) {
        e->prev     = last;
        e->next     = NULL;
        last->next  = e;
        first->prev = e;
    } else if (first->seq > e->seq) {
        /* e becomes the first entry, in the bucket chain instead of first */
        e->chain    = first->chain;
        e->prev     = last;
        e->next     = first;
        first->prev = e;
        *link       = e;
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
    tm_matcher_entry_t **link;
    tm_matcher_group_t *g;

    g = tm_matcher_group_get(m, mask);
    if (tm_matcher_unlikely(g == NULL)) {
        return -ENOMEM;
    }

    e->tag  = tag & mask;
    e->mask = mask;
    e->seq  = seq;
    e->arg  = arg;

    link = tm_matcher_group_find(g, e->tag);
    if (*link == NULL) {
        if (tm_matcher_unlikely((g->nkeys + 1) * TM_MATCHER_BUCKETS_PER_KEY >
                                g->bucket_mask + 1)) {
            if (tm_matcher_group_reserve(g, g->nkeys + 1) != 0) {
                return -ENOMEM;
            }
            link = tm_matcher_group_find(g, e->tag);
        }
        /* A new key, at the end of its bucket's chain */
        e->chain = NULL;
        e->prev  = e;
        e->next  = NULL;
        *link    = e;
        ++g->nkeys;
    } else {
        tm_matcher_key_insert(link, e);
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

/*
 * Unlink e from its group.  link: the link pointing to e if e is the first
 * entry of its key and the caller knows it, NULL otherwise.
 */
static inline __attribute__((always_inline)) void tm_matcher_unlink(tm_matcher_t *m, tm_matcher_group_t *g,
                              tm_matcher_entry_t **link, tm_matcher_entry_t *e)
{
    tm_matcher_entry_t *next = e->next;

    if (tm_matcher_entry_is_first(e)) {
        if (link == NULL) {
            link = tm_matcher_group_find(g, e->tag);
        }
        if (next == NULL) {
            *link = e->chain;
            --g->nkeys;
        } else {
            /* next becomes the first entry of the key */
            next->chain = e->chain;
            next->prev  = e->prev;
            *link       = next;
        }
    } else {
        e->prev->next = next;
        if (next != NULL) {
            next->prev = e->prev;
        } else {
            /* e was the last one: the first one points to its predecessor */
            if (link == NULL) {
                link = tm_matcher_group_find(g, e->tag);
            }
            (*link)->prev = e->prev;
        }
    }

    tm_matcher_order_del(&e->order);
    --g->count;
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
        free(m->groups[i].buckets);
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

/* Out of line, for the paths where size matters more than speed */
static void tm_matcher_unlink_slow(tm_matcher_t *m, tm_matcher_group_t *g,
                                   tm_matcher_entry_t **link,
                                   tm_matcher_entry_t *e)
{
    tm_matcher_unlink(m, g, link, e);
}

void tm_matcher_remove(tm_matcher_t *m, tm_matcher_entry_t *e)
{
    tm_matcher_group_t *g = tm_matcher_active_group(m, e->mask);

    tm_matcher_unlink_slow(m, g, NULL, e);
    /* A deep queue drained: its buckets, spread over memory, would make
     * every later lookup a cache miss (kept if the allocation fails) */
    if (tm_matcher_unlikely((g->count == 0) &&
                            (g->bucket_mask >= TM_MATCHER_SHRINK_BUCKETS))) {
        tm_matcher_group_resize(g, TM_MATCHER_MIN_BUCKETS);
    }
}

/* The link to the first entry with key in g, NULL if there is none */
static inline tm_matcher_entry_t **
tm_matcher_group_lookup(const tm_matcher_group_t *g, uint64_t key)
{
    tm_matcher_entry_t **link = tm_matcher_group_find(g, key);

    return (*link != NULL) ? link : NULL;
}

/* Earliest entry matched by tag, and where it is */
static inline tm_matcher_entry_t *
tm_matcher_find(const tm_matcher_t *m, uint64_t tag,
                tm_matcher_group_t **group_p, tm_matcher_entry_t ***link_p)
{
    tm_matcher_entry_t *best = NULL;
    tm_matcher_entry_t **link;
    tm_matcher_group_t *g;
    unsigned i;

    for (i = 0; i < m->nactive; ++i) {
        g = &m->groups[i];
        if (g->count == 0) {
            continue;
        }
        link = tm_matcher_group_lookup(g, tag & g->mask);
        if ((link != NULL) && ((best == NULL) || ((*link)->seq < best->seq))) {
            best     = *link;
            *group_p = g;
            *link_p  = link;
        }
    }
    return best;
}

tm_matcher_entry_t *tm_matcher_match(tm_matcher_t *m, uint64_t tag)
{
    tm_matcher_entry_t **link;
    tm_matcher_group_t *g;
    tm_matcher_entry_t *e;

    if (tm_matcher_likely(m->nactive == 1)) {
        /* One mask (typically the full one): no comparison of groups */
        g    = &m->groups[0];
        link = tm_matcher_group_find(g, tag & g->mask);
        e    = *link;
    } else {
        e = tm_matcher_find(m, tag, &g, &link);
    }


    if (e != NULL) {
        tm_matcher_unlink(m, g, link, e);
    }
    return e;
}

tm_matcher_entry_t *tm_matcher_peek(tm_matcher_t *m, uint64_t tag)
{
    tm_matcher_entry_t **link;
    tm_matcher_group_t *g;

    return tm_matcher_find(m, tag, &g, &link);
}

tm_matcher_entry_t *tm_matcher_search(tm_matcher_t *m, uint64_t tag,
                                      uint64_t mask, int remove)
{
    tm_matcher_entry_t *best        = NULL;
    tm_matcher_group_t *best_g      = NULL;
    tm_matcher_entry_t **best_link  = NULL;
    tm_matcher_entry_t **link;
    tm_matcher_link_t *order;
    tm_matcher_group_t *g;
    unsigned i;

    if (mask == TM_MATCHER_MASK_FULL) {
        /* An entry equal to tag has tag as its key: one lookup per group */
        for (i = 0; i < m->nactive; ++i) {
            g = &m->groups[i];
            if ((tag & g->mask) != tag) {
                continue;
            }
            link = tm_matcher_group_lookup(g, tag);
            if ((link != NULL) &&
                ((best == NULL) || ((*link)->seq < best->seq))) {
                best      = *link;
                best_g    = g;
                best_link = link;
            }
        }
    } else {
        for (order = m->order.next; order != &m->order; order = order->next) {
            if (((tm_matcher_entry_of_link(order)->tag ^ tag) & mask) == 0) {
                best   = tm_matcher_entry_of_link(order);
                best_g = tm_matcher_active_group(m, best->mask);
                break;
            }
        }
    }

    if ((best != NULL) && remove) {
        /* best_link is known only for the first entry of a key */
        tm_matcher_unlink_slow(m, best_g, best_link, best);
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
