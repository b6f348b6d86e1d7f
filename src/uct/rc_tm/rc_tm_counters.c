/*
 * rc_tm counters: per interface, and process-wide totals (closed interfaces
 * plus open ones) for users above UCP, who never see a UCT interface.  The
 * memory domain's counters (registration cache hits and misses) come last:
 * an interface reports its md's, and the totals add every md once.
 */
#include "rc_tm_iface.h"

#include <ucs/debug/log.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>

#define UCT_RC_TM_IFACE_STAT_NAME(_s) [UCT_RC_TM_STAT_##_s] = #_s

const char *uct_rc_tm_stat_names[] = {
    UCT_RC_TM_IFACE_STAT_NAME(RX_EXP),
    UCT_RC_TM_IFACE_STAT_NAME(RX_EAGER_UNEXP),
    UCT_RC_TM_IFACE_STAT_NAME(RX_RNDV_EXP),
    UCT_RC_TM_IFACE_STAT_NAME(RX_RNDV_UNEXP),
    UCT_RC_TM_IFACE_STAT_NAME(RX_RNDV_INCOMPLETE),
    UCT_RC_TM_IFACE_STAT_NAME(RX_RNDV_REQ_EXP),
    UCT_RC_TM_IFACE_STAT_NAME(RX_RNDV_REQ_UNEXP),
    UCT_RC_TM_IFACE_STAT_NAME(LIST_ADD),
    UCT_RC_TM_IFACE_STAT_NAME(LIST_DEL),
    UCT_RC_TM_IFACE_STAT_NAME(LIST_SYNC),
    UCT_RC_TM_IFACE_STAT_NAME(LIST_DEL_RACE),
    UCT_RC_TM_IFACE_STAT_NAME(LIST_FULL),
    UCT_RC_TM_IFACE_STAT_NAME(TX_RNDV),
    UCT_RC_TM_IFACE_STAT_NAME(POST_DEVICE),
    UCT_RC_TM_IFACE_STAT_NAME(POST_SW),
    UCT_RC_TM_IFACE_STAT_NAME(RX_SW_MATCH),
    UCT_RC_TM_IFACE_STAT_NAME(SW_WON),
    UCT_RC_TM_IFACE_STAT_NAME(PROMOTE),
    UCT_RC_TM_IFACE_STAT_NAME(SW_FULL),
    UCT_RC_TM_IFACE_STAT_NAME(LIST_BOUNCE),
    UCT_RC_TM_IFACE_STAT_NAME(LIST_SPILL),
    UCT_RC_TM_IFACE_STAT_NAME(RX_TRUNCATED),
    UCT_RC_TM_IFACE_STAT_NAME(RX_SW_MATCH_RNDV),
    UCT_RC_TM_IFACE_STAT_NAME(RX_SW_MATCH_RNDV_REQ),
    UCT_RC_TM_IFACE_STAT_NAME(CANCEL),
    UCT_RC_TM_IFACE_STAT_NAME(RCACHE_HIT),
    UCT_RC_TM_IFACE_STAT_NAME(RCACHE_MISS)
};

_Static_assert(UCT_RC_TM_STAT_MD_FIRST + UCT_RC_TM_MD_STAT_LAST ==
               UCT_RC_TM_STAT_LAST, "the md's counters close the list");
_Static_assert(UCT_RC_TM_STAT_MD_FIRST + UCT_RC_TM_MD_STAT_RCACHE_MISS ==
               UCT_RC_TM_STAT_RCACHE_MISS, "the md's counters in md order");

static pthread_mutex_t uct_rc_tm_counters_lock = PTHREAD_MUTEX_INITIALIZER;
static UCS_LIST_HEAD(uct_rc_tm_ifaces);
static UCS_LIST_HEAD(uct_rc_tm_mds);
static uint64_t uct_rc_tm_closed_stats[UCT_RC_TM_STAT_LAST];

/* Counted with atomic adds, by whichever thread registers */
static void uct_rc_tm_md_stats_read(const uct_rc_tm_md_t *md,
                                    uint64_t *counters)
{
    unsigned i;

    for (i = 0; i < UCT_RC_TM_MD_STAT_LAST; ++i) {
        counters[i] = *(volatile const uint64_t*)&md->stats[i];
    }
}

/* Into counters in uct_rc_tm_stat_t order, at most count of them */
static void uct_rc_tm_md_stats_add(const uct_rc_tm_md_t *md,
                                   uint64_t *counters, unsigned count)
{
    uint64_t md_stats[UCT_RC_TM_MD_STAT_LAST];
    unsigned i;

    uct_rc_tm_md_stats_read(md, md_stats);
    for (i = UCT_RC_TM_STAT_MD_FIRST; i < count; ++i) {
        counters[i] += md_stats[i - UCT_RC_TM_STAT_MD_FIRST];
    }
}

unsigned uct_rc_tm_iface_counters(uct_iface_h tl_iface, uint64_t *counters,
                                  unsigned max)
{
    uct_rc_tm_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_tm_iface_t);
    unsigned count           = ucs_min(max, UCT_RC_TM_STAT_LAST);

    memcpy(counters, iface->stats, count * sizeof(*counters));
    /* Its own slots for the md's counters stay 0 */
    uct_rc_tm_md_stats_add(iface->md, counters, count);
    return count;
}

const char *uct_rc_tm_counter_name(unsigned index)
{
    return (index < UCT_RC_TM_STAT_LAST) ? uct_rc_tm_stat_names[index] : NULL;
}

unsigned uct_rc_tm_counters_total(uint64_t *counters, unsigned max)
{
    unsigned count = ucs_min(max, UCT_RC_TM_STAT_LAST);
    uct_rc_tm_iface_t *iface;
    uct_rc_tm_md_t *md;
    unsigned i;

    pthread_mutex_lock(&uct_rc_tm_counters_lock);
    memcpy(counters, uct_rc_tm_closed_stats, count * sizeof(*counters));
    ucs_list_for_each(iface, &uct_rc_tm_ifaces, list) {
        for (i = 0; i < count; ++i) {
            counters[i] += iface->stats[i];
        }
    }
    ucs_list_for_each(md, &uct_rc_tm_mds, list) {
        uct_rc_tm_md_stats_add(md, counters, count);
    }
    pthread_mutex_unlock(&uct_rc_tm_counters_lock);
    return count;
}

void uct_rc_tm_iface_stats_open(uct_rc_tm_iface_t *iface)
{
    memset(iface->stats, 0, sizeof(iface->stats));
    pthread_mutex_lock(&uct_rc_tm_counters_lock);
    ucs_list_add_tail(&uct_rc_tm_ifaces, &iface->list);
    pthread_mutex_unlock(&uct_rc_tm_counters_lock);
}

void uct_rc_tm_iface_stats_close(uct_rc_tm_iface_t *iface)
{
    int i;

    pthread_mutex_lock(&uct_rc_tm_counters_lock);
    ucs_list_del(&iface->list);
    for (i = 0; i < UCT_RC_TM_STAT_MD_FIRST; ++i) {
        uct_rc_tm_closed_stats[i] += iface->stats[i];
        ucs_debug("rc_tm iface %p: %s %" PRIu64, iface,
                  uct_rc_tm_stat_names[i], iface->stats[i]);
    }
    pthread_mutex_unlock(&uct_rc_tm_counters_lock);
}

void uct_rc_tm_md_stats_open(uct_rc_tm_md_t *md)
{
    memset(md->stats, 0, sizeof(md->stats));
    pthread_mutex_lock(&uct_rc_tm_counters_lock);
    ucs_list_add_tail(&uct_rc_tm_mds, &md->list);
    pthread_mutex_unlock(&uct_rc_tm_counters_lock);
}

void uct_rc_tm_md_stats_close(uct_rc_tm_md_t *md)
{
    unsigned i;

    pthread_mutex_lock(&uct_rc_tm_counters_lock);
    ucs_list_del(&md->list);
    uct_rc_tm_md_stats_add(md, uct_rc_tm_closed_stats, UCT_RC_TM_STAT_LAST);
    for (i = UCT_RC_TM_STAT_MD_FIRST; i < UCT_RC_TM_STAT_LAST; ++i) {
        ucs_debug("rc_tm md %p (%s): %s %" PRIu64, md, md->dev->name,
                  uct_rc_tm_stat_names[i],
                  md->stats[i - UCT_RC_TM_STAT_MD_FIRST]);
    }
    pthread_mutex_unlock(&uct_rc_tm_counters_lock);
}
