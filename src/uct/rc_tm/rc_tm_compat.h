/*
 * The one place where UCX versions differ.  rc_tm is built against UCX's
 * internal headers, which change between releases; everything the transport
 * uses that changed between UCX 1.13 and 1.22 goes through the names below,
 * chosen from UCX's own version macros, so that the rest of rc_tm reads as if
 * there were one UCX.  Entry points whose signatures changed (md ops, rkeys,
 * the internal iface ops) are adapted in rc_tm_compat.c.
 *
 * Each feature names the release that brought it (checked against UCX's
 * release tags).
 */
#ifndef UCT_RC_TM_COMPAT_H_
#define UCT_RC_TM_COMPAT_H_

#include <uct/api/version.h>
#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>
#include <ucs/datastruct/mpool.h>
#include <ucs/memory/rcache.h>

/* The oldest and newest UCX this source builds against (configure checks) */
#define UCT_RC_TM_UCX_MIN_MINOR  13
#define UCT_RC_TM_UCX_MAX_MINOR  22

#define UCT_RC_TM_UCX_AT_LEAST(_minor) \
    ((UCT_VERNO_MAJOR > 1) || (UCT_VERNO_MINOR >= (_minor)))

/* 1.14: md ops v2 (query, mem_reg params, mem_attach), mpool params,
 * ep_connect_to_ep_v2, UCT_FLUSH_FLAG_REMOTE */
#define UCT_RC_TM_UCX_MD_V2              UCT_RC_TM_UCX_AT_LEAST(14)
#define UCT_RC_TM_UCX_FLUSH_REMOTE       UCT_RC_TM_UCX_AT_LEAST(14)
/* 1.15: iface_is_reachable_v2 */
#define UCT_RC_TM_UCX_REACHABLE_V2       UCT_RC_TM_UCX_AT_LEAST(15)
/* 1.16: registration cache config in UCS, rkey_compare, ep_is_connected,
 * no shared internal ops table any more */
#define UCT_RC_TM_UCX_UCS_RCACHE_CONFIG  UCT_RC_TM_UCX_AT_LEAST(16)
#define UCT_RC_TM_UCX_RKEY_COMPARE       UCT_RC_TM_UCX_AT_LEAST(16)
#define UCT_RC_TM_UCX_EP_IS_CONNECTED    UCT_RC_TM_UCX_AT_LEAST(16)
/* 1.16: mkey_pack is given the address and length packed */
#define UCT_RC_TM_UCX_MKEY_PACK_ADDR     UCT_RC_TM_UCX_AT_LEAST(16)
/* 1.17: the cache aligns each lookup as asked (ucs_rcache_get) */
#define UCT_RC_TM_UCX_RCACHE_GET_ALIGN   UCT_RC_TM_UCX_AT_LEAST(17)
/* 1.18: the cache merges regions through an op */
#define UCT_RC_TM_UCX_RCACHE_MERGE       UCT_RC_TM_UCX_AT_LEAST(18)
/* 1.19: rkey_unpack params, mem_alloc on a system device */
#define UCT_RC_TM_UCX_RKEY_UNPACK_V2     UCT_RC_TM_UCX_AT_LEAST(19)
#define UCT_RC_TM_UCX_ALLOC_SYS_DEV      UCT_RC_TM_UCX_AT_LEAST(19)
/* 1.20: device endpoints; a cache lock for the LRU of unlocked caches */
#define UCT_RC_TM_UCX_DEVICE_EP          UCT_RC_TM_UCX_AT_LEAST(20)
#define UCT_RC_TM_UCX_RCACHE_LRU_LOCK    UCT_RC_TM_UCX_AT_LEAST(20)
/* iface_query_v2: 1.20, gone in 1.21, back in 1.22; memory elements of
 * the device API: an iface op in 1.20, an md op from 1.21 */
#define UCT_RC_TM_UCX_IFACE_QUERY_V2 \
    ((UCT_VERNO_MINOR == 20) || UCT_RC_TM_UCX_AT_LEAST(22))
#define UCT_RC_TM_UCX_IFACE_MEM_ELEMENT  (UCT_VERNO_MINOR == 20)
#define UCT_RC_TM_UCX_MD_MEM_ELEM        UCT_RC_TM_UCX_AT_LEAST(21)
/* 1.21: ep_invalidate params */
#define UCT_RC_TM_UCX_EP_INVALIDATE_V2   UCT_RC_TM_UCX_AT_LEAST(21)
/* 1.22: ep_check may take a completion (UCX's check of its parameters no
 * longer refuses one) */
#define UCT_RC_TM_UCX_EP_CHECK_COMP      UCT_RC_TM_UCX_AT_LEAST(22)
/* 1.22: mem_query attr v2, put of a gather list */
#define UCT_RC_TM_UCX_MEM_QUERY_V2       UCT_RC_TM_UCX_AT_LEAST(22)
#define UCT_RC_TM_UCX_PUT_SGL            UCT_RC_TM_UCX_AT_LEAST(22)


/* ----- registration cache ----- */

#if UCT_RC_TM_UCX_UCS_RCACHE_CONFIG
typedef ucs_rcache_config_t uct_rc_tm_rcache_config_t;
#  define UCT_RC_TM_RCACHE_CONFIG_TABLE  ucs_config_rcache_table
#else
typedef uct_md_rcache_config_t uct_rc_tm_rcache_config_t;
#  define UCT_RC_TM_RCACHE_CONFIG_TABLE  uct_md_config_rcache_table
#endif

/*
 * Defaults rc_tm gives UCX's UCX_RC_TM_RCACHE_* table: a cached region is
 * aligned to 'align' bytes (as UCX's ib md has it), where the table still
 * has an address alignment (1.13 - 1.16); later UCX take the alignment per
 * lookup (uct_rc_tm_rcache_get).
 */
#if UCT_RC_TM_UCX_RCACHE_GET_ALIGN
#  define UCT_RC_TM_RCACHE_CONFIG_DEFAULTS(_align)  ""
#else
#  define UCT_RC_TM_RCACHE_CONFIG_DEFAULTS(_align) \
    "RCACHE_ADDR_ALIGN=" UCS_PP_MAKE_STRING(_align)
#endif

/* The op a cache calls when a lookup's region swallows cached neighbours
 * (1.18): rc_tm registers the merged region anew, nothing carries over */
#if UCT_RC_TM_UCX_RCACHE_MERGE
void uct_rc_tm_rcache_merge(void *context, ucs_rcache_t *rcache, void *arg,
                            ucs_rcache_region_t *region);
#  define UCT_RC_TM_RCACHE_OPS_MERGE  .merge = uct_rc_tm_rcache_merge
#else
#  define UCT_RC_TM_RCACHE_OPS_MERGE
#endif

/* Cache parameters from the configuration, for a cache whose lookups come
 * from any thread with no lock of rc_tm's around them */
void uct_rc_tm_rcache_params(ucs_rcache_params_t *params,
                             const uct_rc_tm_rcache_config_t *config);

/* The cost of a lookup, in seconds, as UCX's mds report it */
double uct_rc_tm_rcache_overhead(const uct_rc_tm_rcache_config_t *config);

static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_tm_rcache_get(ucs_rcache_t *rcache, void *address, size_t length,
                     size_t align, int prot, void *arg,
                     ucs_rcache_region_t **region_p)
{
#if UCT_RC_TM_UCX_RCACHE_GET_ALIGN
    return ucs_rcache_get(rcache, address, length, align, prot, arg, region_p);
#else
    /* aligned by the cache's parameters (uct_rc_tm_rcache_params) */
    return ucs_rcache_get(rcache, address, length, prot, arg, region_p);
#endif
}


/* ----- memory pools ----- */

/* A pool of malloc'ed chunks of elems_per_chunk elements, unlimited */
ucs_status_t uct_rc_tm_mpool_init(ucs_mpool_t *mp, size_t elem_size,
                                  size_t alignment, unsigned elems_per_chunk,
                                  ucs_mpool_ops_t *ops, const char *name);

/* An interface's buffer pool settings, UCX_RC_TM_<_prefix>MAX_BUFS and the
 * others UCX has for its transports */
#if UCT_RC_TM_UCX_MD_V2
#  define UCT_RC_TM_IFACE_MPOOL_CONFIG_FIELDS(_prefix, _max, _grow, _name, \
                                              _offset) \
    UCT_IFACE_MPOOL_CONFIG_FIELDS(_prefix, _max, _grow, 128m, 1.0, _name, \
                                  _offset, "")
#else
#  define UCT_RC_TM_IFACE_MPOOL_CONFIG_FIELDS(_prefix, _max, _grow, _name, \
                                              _offset) \
    UCT_IFACE_MPOOL_CONFIG_FIELDS(_prefix, _max, _grow, _name, _offset, "")
#endif


/* ----- interface and endpoint ----- */

/* The internal ops UCX asks of every transport (rc_tm_compat.c) */
extern uct_iface_internal_ops_t uct_rc_tm_iface_internal_ops;

/* ep_check's arguments, checked as UCX's rc checks them where UCX checks
 * parameters: no flags, and no completion, which rc_tm takes in no UCX
 * version (its probe reports failures through the error handler; UCX
 * 1.22's rc takes one) */
#if UCT_RC_TM_UCX_EP_CHECK_COMP
#  define UCT_RC_TM_EP_CHECK_PARAMS(_flags, _comp) \
    UCT_CHECK_PARAM((_comp) == NULL, "Unsupported completion on ep_check"); \
    UCT_EP_KEEPALIVE_CHECK_PARAM(_flags)
#else
#  define UCT_RC_TM_EP_CHECK_PARAMS(_flags, _comp) \
    UCT_EP_KEEPALIVE_CHECK_PARAM(_flags, _comp)
#endif

/* ep_flush's flags, as UCX's rc checks them where UCX checks parameters
 * and has UCT_FLUSH_FLAG_REMOTE (1.14) */
#if UCT_RC_TM_UCX_FLUSH_REMOTE
#  define UCT_RC_TM_EP_FLUSH_CHECK_FLAGS(_flags) \
    UCT_CHECK_PARAM(!ucs_test_all_flags(_flags, UCT_FLUSH_FLAG_CANCEL | \
                                                UCT_FLUSH_FLAG_REMOTE), \
                    "flush flags CANCEL and REMOTE are mutually exclusive")
#else
#  define UCT_RC_TM_EP_FLUSH_CHECK_FLAGS(_flags)
#endif

#endif
