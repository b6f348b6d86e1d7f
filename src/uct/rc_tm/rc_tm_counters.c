/*
 * rc_tm counters: per interface, and process-wide totals (closed interfaces
 * plus open ones) for users above UCP, who never see a UCT interface.
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
    UCT_RC_TM_IFACE_STAT_NAME(RX_TRUNCATED)
};

unsigned uct_rc_tm_iface_counters(uct_iface_h tl_iface, uint64_t *counters,
                                  unsigned max)
{
    uct_rc_tm_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_tm_iface_t);
    unsigned count           = ucs_min(max, UCT_RC_TM_STAT_LAST);

    memcpy(counters, iface->stats, count * sizeof(*counters));
    return count;
}

const char *uct_rc_tm_counter_name(unsigned index)
{
    return (index < UCT_RC_TM_STAT_LAST) ? uct_rc_tm_stat_names[index] : NULL;
}

static pthread_mutex_t uct_rc_tm_ifaces_lock = PTHREAD_MUTEX_INITIALIZER;
static UCS_LIST_HEAD(uct_rc_tm_ifaces);
static uint64_t uct_rc_tm_closed_stats[UCT_RC_TM_STAT_LAST];

unsigned uct_rc_tm_counters_total(uint64_t *counters, unsigned max)
{
    unsigned count = ucs_min(max, UCT_RC_TM_STAT_LAST);
    uct_rc_tm_iface_t *iface;
    unsigned i;

    pthread_mutex_lock(&uct_rc_tm_ifaces_lock);
    memcpy(counters, uct_rc_tm_closed_stats, count * sizeof(*counters));
    ucs_list_for_each(iface, &uct_rc_tm_ifaces, list) {
        for (i = 0; i < count; ++i) {
            counters[i] += iface->stats[i];
        }
    }
    pthread_mutex_unlock(&uct_rc_tm_ifaces_lock);
    return count;
}

void uct_rc_tm_iface_stats_open(uct_rc_tm_iface_t *iface)
{
    memset(iface->stats, 0, sizeof(iface->stats));
    pthread_mutex_lock(&uct_rc_tm_ifaces_lock);
    ucs_list_add_tail(&uct_rc_tm_ifaces, &iface->list);
    pthread_mutex_unlock(&uct_rc_tm_ifaces_lock);
}

void uct_rc_tm_iface_stats_close(uct_rc_tm_iface_t *iface)
{
    int i;

    pthread_mutex_lock(&uct_rc_tm_ifaces_lock);
    ucs_list_del(&iface->list);
    for (i = 0; i < UCT_RC_TM_STAT_LAST; ++i) {
        uct_rc_tm_closed_stats[i] += iface->stats[i];
        ucs_debug("rc_tm iface %p: %s %" PRIu64, iface,
                  uct_rc_tm_stat_names[i], iface->stats[i]);
    }
    pthread_mutex_unlock(&uct_rc_tm_ifaces_lock);
}
