/*
 * Software tag matcher: posted receives matched in MPI order.
 *
 * A message with tag T matches an entry E when (T & E.mask) == E.tag; among
 * all matching entries the one posted first (lowest sequence number) wins.
 *
 * Entries are grouped by mask; each group is a hash table keyed by the
 * masked tag, whose buckets chain the first entries of each key, and each of
 * those heads the list of the entries with its key in posting order.
 * Matching looks up one key per distinct mask and takes the first entry with
 * the lowest sequence number, so its cost depends on the number of distinct
 * masks present, not on the number of entries.
 *
 * Entries are intrusive: the caller owns their memory (usually embedded in
 * its request) and keeps it untouched while the entry is posted.  Posting and
 * matching allocate nothing, except when a hash table has to grow (amortized,
 * out of line) or a mask is seen for the first time.
 *
 * The same structure serves as an unexpected-message queue: post arriving
 * messages with the full mask, and look for the earliest one matching a new
 * receive with tm_matcher_search().
 *
 * Not thread safe: the caller serializes all calls on one matcher.
 */

#ifndef TM_MATCHER_TAG_MATCHER_H_
#define TM_MATCHER_TAG_MATCHER_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TM_MATCHER_MASK_FULL  UINT64_MAX


typedef struct tm_matcher_entry tm_matcher_entry_t;


/* Link of the posting-order list of all entries */
typedef struct tm_matcher_link {
    struct tm_matcher_link    *next;
    struct tm_matcher_link    *prev;
} tm_matcher_link_t;


/*
 * A posted entry.  Only tag, mask, seq and arg are meant to be read by the
 * caller (while posted, or after a match returned it); nothing is to be
 * written while it is posted.  The fields a match reads come first.
 */
struct tm_matcher_entry {
    tm_matcher_entry_t        *chain; /* first entry of the next key in the
                                         same bucket (first entries only) */
    uint64_t                  tag;    /* posted tag, already masked: the key */
    tm_matcher_entry_t        *next;  /* next with the same key, or NULL */
    tm_matcher_entry_t        *prev;  /* previous with the same key; the
                                         first one points to the last one */
    uint64_t                  seq;    /* posting order: lower was posted first */
    tm_matcher_link_t         order;  /* in the posting-order list */
    uint64_t                  mask;   /* bits of a message tag that must match */
    void                      *arg;   /* the caller's, untouched */
};


/* Entries sharing one mask: a chained hash table of their keys */
typedef struct tm_matcher_group {
    uint64_t                  mask;
    size_t                    count;       /* entries */
    size_t                    nkeys;       /* distinct keys */
    size_t                    bucket_mask; /* bucket count - 1 (a power of 2) */
    unsigned                  shift;       /* 64 - log2(bucket count) */
    tm_matcher_entry_t        **buckets;   /* first entry of a key, chained */
} tm_matcher_group_t;


typedef struct tm_matcher {
    tm_matcher_group_t        *groups;    /* one per mask, in the match loop
                                             first: those holding entries and
                                             some that emptied; then empty
                                             ones kept for new masks */
    unsigned                  ngroups;    /* groups initialized */
    unsigned                  nactive;    /* groups in the match loop */
    unsigned                  max_groups; /* room in groups[] */
    size_t                    count;      /* posted entries */
    tm_matcher_link_t         order;      /* all entries, oldest first */
    uint64_t                  *seq;       /* next sequence number to assign */
    uint64_t                  own_seq;    /* used when the caller gave none */
} tm_matcher_t;


/**
 * Initialize an empty matcher.
 *
 * @param m         matcher to initialize.
 * @param seq       counter of sequence numbers: tm_matcher_post() assigns
 *                  (*seq)++ to each entry.  Sharing it between matchers, or
 *                  with the entries of a device, puts them all on one
 *                  timeline.  NULL: the matcher keeps its own, from 0.
 *
 * @return 0, or -ENOMEM.
 */
int tm_matcher_init(tm_matcher_t *m, uint64_t *seq);

/**
 * Release the matcher's memory.  Posted entries are forgotten (they belong
 * to the caller).
 */
void tm_matcher_cleanup(tm_matcher_t *m);

/**
 * Post an entry with the next sequence number of the matcher's counter.
 * O(1); allocates only if a hash table grows or the mask is new.
 *
 * @param m         matcher.
 * @param e         entry, owned by the caller, not posted anywhere.
 * @param tag       tag to match; bits outside @a mask are ignored.
 * @param mask      bits of a message tag to compare (TM_MATCHER_MASK_FULL:
 *                  all of them).
 * @param arg       stored in e->arg.
 *
 * @return 0, or -ENOMEM (then the entry is not posted and the counter is
 *         unchanged).
 */
int tm_matcher_post(tm_matcher_t *m, tm_matcher_entry_t *e, uint64_t tag,
                    uint64_t mask, void *arg);

/**
 * Post an entry with a sequence number chosen by the caller, for example one
 * it held when it was posted to the device and that is now moved back to
 * software.  O(1) when @a seq is above every posted one; otherwise the entry
 * is inserted in order, walking back from the newest entries.  The counter
 * is not touched.  Sequence numbers must be unique within a matcher.
 *
 * @return 0, or -ENOMEM.
 */
int tm_matcher_post_seq(tm_matcher_t *m, tm_matcher_entry_t *e, uint64_t tag,
                        uint64_t mask, void *arg, uint64_t seq);

/**
 * Remove a posted entry (cancel, or promotion to the device).  O(1), except
 * that a group it leaves empty with 4096 buckets or more shrinks to the
 * fewest (undoing tm_matcher_reserve()): a drained deep queue's buckets,
 * spread over memory, would make every later lookup a cache miss.
 */
void tm_matcher_remove(tm_matcher_t *m, tm_matcher_entry_t *e);

/**
 * Find the earliest-posted entry that a message with tag @a tag matches,
 * and remove it.
 *
 * @return the entry, or NULL if none matches.
 */
tm_matcher_entry_t *tm_matcher_match(tm_matcher_t *m, uint64_t tag);

/**
 * Like tm_matcher_match(), without removing the entry (probe).
 */
tm_matcher_entry_t *tm_matcher_peek(tm_matcher_t *m, uint64_t tag);

/**
 * The reverse direction, for a queue of unexpected messages posted with the
 * full mask: find the earliest-posted entry E with
 * ((E.tag ^ tag) & mask) == 0, the receive being (@a tag, @a mask).
 * With the full mask this is one lookup per group; with a partial mask it
 * scans the entries in posting order (as UCP does for wildcard receives).
 *
 * @param remove    nonzero: remove the entry found.
 *
 * @return the entry, or NULL if none matches.
 */
tm_matcher_entry_t *tm_matcher_search(tm_matcher_t *m, uint64_t tag,
                                      uint64_t mask, int remove);

/**
 * Reserve room for @a count entries with distinct keys under @a mask, so that
 * posting them does not allocate.
 *
 * @return 0, or -ENOMEM.
 */
int tm_matcher_reserve(tm_matcher_t *m, uint64_t mask, size_t count);

/**
 * Number of posted entries.
 */
static inline size_t tm_matcher_count(const tm_matcher_t *m)
{
    return m->count;
}

static inline tm_matcher_entry_t *
tm_matcher_entry_of_link(const tm_matcher_link_t *link)
{
    return (tm_matcher_entry_t*)((char*)link -
                                 offsetof(tm_matcher_entry_t, order));
}

/**
 * Oldest posted entry, or NULL if the matcher is empty.
 */
static inline tm_matcher_entry_t *tm_matcher_first(const tm_matcher_t *m)
{
    return (m->order.next == &m->order) ? NULL :
           tm_matcher_entry_of_link(m->order.next);
}

/**
 * Entry posted after @a e (in sequence order), or NULL if @a e is the newest.
 */
static inline tm_matcher_entry_t *
tm_matcher_next(const tm_matcher_t *m, const tm_matcher_entry_t *e)
{
    return (e->order.next == &m->order) ? NULL :
           tm_matcher_entry_of_link(e->order.next);
}

/**
 * Iterate over the posted entries, oldest first.  The current entry may be
 * removed from the body (the next one is read before the body runs); other
 * entries may not.
 */
#define tm_matcher_for_each(_m, _e, _tmp) \
    for ((_e) = tm_matcher_first(_m), \
         (_tmp) = ((_e) != NULL) ? tm_matcher_next(_m, _e) : NULL; \
         (_e) != NULL; \
         (_e) = (_tmp), \
         (_tmp) = ((_e) != NULL) ? tm_matcher_next(_m, _e) : NULL)

#ifdef __cplusplus
}
#endif

#endif
