/*
 * rc_tm interface: one TM-SRQ with its receive CQ, one send CQ, and the
 * connections (endpoints) to peers, on one tag-matching device.
 *
 * Every message on the wire starts with struct ibv_tmh:
 *   active message     TMH{NO_TAG, app_ctx = am_id} | payload
 *   tag eager          TMH{EAGER, app_ctx = imm >> 32, tag} | payload,
 *                      immediate data = low 32 bits of imm (when imm != 0)
 *   software rndv req  TMH{EAGER, app_ctx = 0, tag} | header, imm data 0
 *                      with IBV_WC_WITH_IMM (so never confused with eager)
 *   rendezvous         TMH{RNDV, app_ctx = rndv op id, tag} | RVH | header
 *   rendezvous done    by the receiver's NIC: TMH{FIN, app_ctx = rndv op id}
 *                      (it arrives on our sending QP); by the receiver's
 *                      software: TMH{NO_TAG, app_ctx = UCT_RC_TM_CTL_FIN} |
 *                      rndv op id (32 bits, big endian)
 *   endpoint check     a zero-length RDMA WRITE: no message
 *
 * Software sends on the peer's receive-only QP, where its NIC does
 * rendezvous: no TMH FIN goes there, whose counting as unexpected no source
 * gives (docs/verbs-device.md row 23).  NO_TAG is never counted.
 */
#ifndef UCT_RC_TM_IFACE_H_
#define UCT_RC_TM_IFACE_H_

#include "rc_tm_md.h"

#include <uct/base/uct_iface.h>
#include <uct/base/uct_iov.inl>
#include <ucs/arch/cpu.h>
#include <ucs/sys/math.h>
#include <ucs/datastruct/arbiter.h>
#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/mpool.h>
#include <ucs/datastruct/queue.h>
#include <ucs/datastruct/list.h>
#include <ucs/datastruct/string_buffer.h>
#include <matcher/tag_matcher.h>

#define UCT_RC_TM_POLL_BATCH       16
/* Progress calls between two reads of the device's asynchronous events
 * (a CQ's error is the only sign of its overrun on mlx5): a NIC's read is
 * a system call that finds nothing, almost always */
#define UCT_RC_TM_EVENTS_INTERVAL  256
#define UCT_RC_TM_TMH_LEN          sizeof(struct ibv_tmh)
#define UCT_RC_TM_RNDV_HDR_LEN     (sizeof(struct ibv_tmh) + \
                                    sizeof(struct ibv_rvh))
/* At most this many bytes go inline, whatever the device grants: some
 * inline sends are built in a buffer on the stack, and every short send is
 * checked against it, in builds without UCX's parameter checks too */
#define UCT_RC_TM_SHORT_MAX        1024
/* The longest header of a software rendezvous request: what a 256-byte
 * inline send holds after the TMH, about what rc_mlx5's WQE takes inline
 * (UCP's RTS and its packed keys take about 100).  A receive at least
 * this long holds any request, and may take the spill segment. */
#define UCT_RC_TM_RNDV_REQUEST_MAX_HDR  (256 - UCT_RC_TM_TMH_LEN)

/* The capabilities an interface reports (uct_iface_attr_t::cap) */
typedef __typeof__(((uct_iface_attr_t*)NULL)->cap) uct_rc_tm_iface_cap_t;

typedef struct uct_rc_tm_ep uct_rc_tm_ep_t;

/* Counters a user can read: uct_rc_tm_iface_counters(), UCX's VFS, the
 * offload report (UCX_RC_TM_REPORT, rc_tm_report.c), and at iface close at
 * debug level (the md's, at md close) */
typedef enum {
    UCT_RC_TM_STAT_RX_EXP,            /* eager matched in device */
    UCT_RC_TM_STAT_RX_EAGER_UNEXP,    /* eager unexpected (to software) */
    UCT_RC_TM_STAT_RX_RNDV_EXP,       /* rendezvous matched in device */
    UCT_RC_TM_STAT_RX_RNDV_UNEXP,     /* rendezvous unexpected */
    UCT_RC_TM_STAT_RX_RNDV_INCOMPLETE,/* rendezvous finished in software */
    UCT_RC_TM_STAT_RX_RNDV_REQ_EXP,   /* software rndv request, matched */
    UCT_RC_TM_STAT_RX_RNDV_REQ_UNEXP, /* software rndv request, unexpected */
    UCT_RC_TM_STAT_LIST_ADD,
    UCT_RC_TM_STAT_LIST_DEL,
    UCT_RC_TM_STAT_LIST_SYNC,
    UCT_RC_TM_STAT_LIST_DEL_RACE,     /* DEL lost to a match (IBV_WC_TM_ERR) */
    UCT_RC_TM_STAT_LIST_FULL,         /* device list full: recv kept in
                                         software (refused without it) */
    UCT_RC_TM_STAT_TX_RNDV,           /* rendezvous requests sent */
    UCT_RC_TM_STAT_POST_DEVICE,       /* receives posted to the device */
    UCT_RC_TM_STAT_POST_SW,           /* receives kept in software */
    UCT_RC_TM_STAT_RX_SW_MATCH,       /* messages matched in software */
    UCT_RC_TM_STAT_SW_WON,            /* ... to a device entry (race) */
    UCT_RC_TM_STAT_PROMOTE,           /* software receives moved to device */
    UCT_RC_TM_STAT_SW_FULL,           /* recv refused: software list full */
    UCT_RC_TM_STAT_LIST_BOUNCE,       /* entries listed with a bounce
                                         segment (shorter than an eager
                                         message) */
    UCT_RC_TM_STAT_LIST_SPILL,        /* ... with the spill segment
                                         behind their buffer instead */
    UCT_RC_TM_STAT_RX_TRUNCATED,      /* ... that a message did not fit */
    UCT_RC_TM_STAT_RX_SW_MATCH_RNDV,  /* RX_SW_MATCH that were rendezvous
                                         (software reads them) */
    UCT_RC_TM_STAT_RX_SW_MATCH_RNDV_REQ,/* RX_SW_MATCH that were software
                                         rndv requests (also in
                                         RX_RNDV_REQ_EXP) */
    UCT_RC_TM_STAT_CANCEL,            /* receives the user canceled */
    /* The memory domain's (uct_rc_tm_md_stat_t, same order): registrations
     * are the md's, which UCP shares between its workers' interfaces, so
     * every interface of one md reports the md's counts, and the totals
     * count each md once */
    UCT_RC_TM_STAT_RCACHE_HIT,        /* registration found in the cache */
    UCT_RC_TM_STAT_RCACHE_MISS,       /* ... that went to the device */
    UCT_RC_TM_STAT_LAST
} uct_rc_tm_stat_t;

#define UCT_RC_TM_STAT_MD_FIRST    UCT_RC_TM_STAT_RCACHE_HIT


typedef struct uct_rc_tm_iface_config {
    uct_iface_config_t        super;
    size_t                    seg_size;      /* largest AM / eager bcopy msg */
    unsigned                  tx_queue_len;  /* sends in flight per iface */
    unsigned                  tx_moderation; /* sends per completion */
    unsigned                  rndv_queue_len;/* rendezvous sends awaiting FIN */
    size_t                    eager_max;     /* largest tagged eager message */
    size_t                    rndv_max;      /* largest rendezvous message */
    int                       sync_always;   /* every list op carries sync */
    unsigned                  sw_list_size;  /* receives kept in software */
    unsigned                  promote_thresh;
    int                       report;        /* offload report at close */
    uct_iface_mpool_config_t  rx_mpool;
    uct_iface_mpool_config_t  tx_mpool;
} uct_rc_tm_iface_config_t;


/* An untagged SRQ buffer: [lkey][rx headroom][message: TMH | payload].
 * The user's receive descriptor for payload at D is D - rx_headroom, and its
 * release pointer sits just before that (uct_recv_desc()): inside the
 * headroom or the already parsed TMH, never in the payload. */
typedef struct uct_rc_tm_rx_elem {
    uint32_t lkey;
    uint32_t reserved;
} uct_rc_tm_rx_elem_t;


/* Send bookkeeping for an op that needs something done when it completes */
typedef struct uct_rc_tm_tx_op uct_rc_tm_tx_op_t;
typedef void (*uct_rc_tm_tx_op_cb_t)(uct_rc_tm_tx_op_t *op, ucs_status_t status);

struct uct_rc_tm_tx_op {
    ucs_queue_elem_t          queue;
    uint64_t                  sn;       /* completes with the ep's sn-th send */
    uct_rc_tm_tx_op_cb_t      handler;
    uct_completion_t          *comp;
    size_t                    length;
    union {
        struct {                         /* get_bcopy */
            uct_unpack_callback_t unpack_cb;
            void                  *unpack_arg;
        };
        struct {                         /* rendezvous finished in software:
                                            its read, then its FIN, which
                                            may wait for a credit */
            struct uct_rc_tm_recv *recv;
            uct_rc_tm_ep_t        *ep;
            uint64_t              tag;
            uint32_t              app_ctx;
            uint32_t              rkey;
            uint64_t              remote_addr;
            int                   fin;      /* the FIN (length: the data
                                               read), not the read */
            ucs_status_t          recv_status;
        };
    };
    /* bcopy payload follows */
};


/* A receive posted with iface_tag_recv_zcopy */
typedef enum {
    UCT_RC_TM_RECV_POSTED    = UCS_BIT(0), /* in the matcher: may match */
    UCT_RC_TM_RECV_IN_DEVICE = UCS_BIT(1), /* in the device list: may match */
    UCT_RC_TM_RECV_IN_SW     = UCS_BIT(2), /* in the software list */
    UCT_RC_TM_RECV_CONSUMED  = UCS_BIT(3), /* the device matched it (MATCH
                                              seen): no DEL may name it */
    UCT_RC_TM_RECV_CANCELING = UCS_BIT(4), /* non-force cancel asked */
    UCT_RC_TM_RECV_RELEASED  = UCS_BIT(5), /* the context is the user's
                                              again (completed or
                                              force-canceled): no callbacks */
    UCT_RC_TM_RECV_SW_WON    = UCS_BIT(6), /* in the device, but software
                                              gave it a message: DEL posted */
    UCT_RC_TM_RECV_SW_RNDV   = UCS_BIT(7), /* matched a rendezvous software
                                              reads: headers in the buffer at
                                              the final completion */
    UCT_RC_TM_RECV_SLOT      = UCS_BIT(8), /* holds a device list slot */
    UCT_RC_TM_RECV_AWAIT_FINAL = UCS_BIT(9),/* in tm.matched: MATCH seen,
                                              the final completion not yet */
    UCT_RC_TM_RECV_FAILED    = UCS_BIT(10),/* completed when its connection
                                              failed: a late final
                                              completion is dropped */
    UCT_RC_TM_RECV_EVICTING  = UCS_BIT(11),/* DEL posted to find a receive
                                              a failed message took: back
                                              to software if it succeeds */
    UCT_RC_TM_RECV_SPILL     = UCS_BIT(12),/* listed with rx.spill
                                              behind its buffer */
    UCT_RC_TM_RECV_DEL_FAILED = UCS_BIT(13),/* in tm.del_failed: its DEL
                                              failed, no consumption seen
                                              yet: consumed or lost */
    UCT_RC_TM_RECV_QP_WAITED = UCS_BIT(14) /* matched on an unknown QP, and
                                              awaited its final completion
                                              at a check of the receive-only
                                              QPs */
} uct_rc_tm_recv_flags_t;

typedef struct uct_rc_tm_recv {
    tm_matcher_entry_t        match;    /* all posted receives, in posting
                                           order: the shadow list */
    ucs_list_link_t           sw_list;  /* software list, posting order;
                                           matched by the device: in
                                           tm.matched until its final
                                           completion; or in
                                           tm.del_failed */
    ucs_queue_elem_t          queue;    /* DEL or cancel completion waiting */
    uct_tag_context_t         *ctx;
    void                      *buffer;
    size_t                    length;
    uint32_t                  lkey;
    uint32_t                  handle;   /* device list handle */
    uct_rc_tm_rx_elem_t       *bounce;  /* what the device writes to when
                                           buffer is shorter than an eager
                                           message: a NIC never truncates
                                           gracefully */
    unsigned                  ctx_index;/* in tm.ctxs until released */
    unsigned                  flags;    /* uct_rc_tm_recv_flags_t */
    unsigned                  refs;     /* owner + list ops in flight +
                                           the device slot */
    unsigned                  slot_cqes;/* completions the slot still owes,
                                           counted as rdma-core does: it is
                                           free again at 0 */
    /* From the MATCH completion, the only one that carries them (mlx5) */
    uint64_t                  stag;     /* the message's tag */
    uint32_t                  app_ctx;
    uint32_t                  rx_qp_num;/* the QP it came on; 0: not
                                           known (a MATCH without a packet
                                           names none, tm_dev_wc_t) */
} uct_rc_tm_recv_t;

/* A rendezvous send waiting for FIN */
typedef struct uct_rc_tm_rndv_op {
    uct_completion_t          *comp;    /* NULL: free or canceled */
    uct_rc_tm_ep_t            *ep;      /* its FIN comes from this peer */
    uint16_t                  gen;      /* tells a late FIN from a new op */
    uint16_t                  next_free;
} uct_rc_tm_rndv_op_t;

/* rndv_free when every rendezvous op waits for its FIN */
#define UCT_RC_TM_RNDV_OP_NONE     UINT16_MAX

/* The app context of a NO_TAG message that is the transport's, not an
 * active message: past every AM id, and fixed on the wire whatever UCX's
 * UCT_AM_ID_MAX */
#define UCT_RC_TM_CTL_FIN          0x80000000u

/* A rendezvous finished by the receiver's software: UCT_RC_TM_FIN_MSG_LEN
 * bytes on the wire (not the padded sizeof) */
typedef struct uct_rc_tm_fin_msg {
    struct ibv_tmh            tmh;      /* NO_TAG, UCT_RC_TM_CTL_FIN */
    uint32_t                  op_id;    /* big endian */
} uct_rc_tm_fin_msg_t;

#define UCT_RC_TM_FIN_MSG_LEN \
    (ucs_offsetof(uct_rc_tm_fin_msg_t, op_id) + sizeof(uint32_t))


KHASH_MAP_INIT_INT(uct_rc_tm_qpn, uct_rc_tm_ep_t*);
/* Posted receive buffers are aligned, so khash's int64 hash, which keeps
 * their low bits, would put them all in a few buckets: mix every bit in */
#define uct_rc_tm_buf_hash(_addr) \
    ((khint32_t)(((uint64_t)(_addr) * 0x9e3779b97f4a7c15ull) >> 32))
KHASH_INIT(uct_rc_tm_bufs, uint64_t, char, 0, uct_rc_tm_buf_hash,
           kh_int64_hash_equal);


typedef struct uct_rc_tm_iface {
    uct_base_iface_t          super;
    ucs_list_link_t           list;     /* all interfaces, for the totals */
    uct_rc_tm_md_t            *md;
    tm_dev_t                  *dev;
    tm_dev_cq_t               *send_cq;
    tm_dev_cq_t               *recv_cq;
    tm_dev_srq_t              *srq;
    khash_t(uct_rc_tm_qpn)    eps;      /* qp_num -> endpoint */
    int                       cq_failed;/* a CQ or the device failed:
                                           said once */
    unsigned                  events_countdown; /* progress calls until the
                                                   next read of events */
    ucs_list_link_t           closing;  /* connections of destroyed eps,
                                           until their completions are
                                           polled (rc_tm_ep.c) */
    ucs_arbiter_t             arbiter;  /* endpoints with pending requests */

    struct {
        ucs_mpool_t           mp;       /* untagged SRQ buffers */
        unsigned              posted;   /* buffers the SRQ holds */
        unsigned              depth;
        unsigned              refill;   /* buffers missing before a refill */
        size_t                headroom;    /* the user's rx headroom */
        size_t                msg_offset;  /* element -> message (TMH) */
        uct_recv_desc_t       release_desc;
        uct_allocated_memory_t spill;      /* where the list entries of short
                                              receives end (rc_tm_tag.h);
                                              address NULL: a device whose
                                              entries take one scatter
                                              entry (mlx5) */
    } rx;

    struct {
        ucs_mpool_t           mp;       /* bcopy buffers and op records */
        int                   available;/* sends the send CQ can still take */
        int                   depth;    /* sends it takes: all available
                                           means none outstanding */
        ucs_list_link_t       ctl_eps;  /* endpoints with control messages
                                           waiting for credits */
    } tx;

    struct {
        int                   enabled;
        uct_tag_unexp_eager_cb_t eager_cb;
        void                  *eager_arg;
        uct_tag_unexp_rndv_cb_t  rndv_cb;
        void                  *rndv_arg;
        uint32_t              unexpected_cnt; /* fully handled by software */
        unsigned              num_tags;       /* device list slots taken */
        unsigned              num_sw;         /* entries software holds */
        unsigned              sw_peak;        /* most num_sw ever was */
        unsigned              ops_in_flight;  /* list ops posted, not done */
        unsigned              evicting;       /* EVICTING receives: nothing
                                                 goes to the device */
        unsigned              dels_pending;   /* DELs queued or in flight */
        unsigned              num_del_failed; /* receives in del_failed */
        unsigned              len_errs;       /* LOC_LEN_ERR failures not yet
                                                 matched to a lost receive */
        int                   sync_pending;   /* SYNC_REQ not yet answered */
        int                   in_batch;       /* dispatching a polled batch:
                                                 DELs wait for its end */
        uint64_t              ops_posted;     /* list ops ever posted */
        uint64_t              count_op_sn;    /* ops_posted of the newest op
                                                 that carried a count */
        uint32_t              count_op_cnt;   /* ... and that count */
        uint64_t              seq;            /* posting order */
        tm_matcher_t          matcher;        /* every posted receive */
        ucs_list_link_t       sw_list;        /* receives kept in software */
        ucs_list_link_t       matched;        /* matched by the device, final
                                                 completion to come */
        ucs_list_link_t       del_failed;     /* DEL_FAILED receives */
        ucs_queue_head_t      del_queue;      /* DELs waiting for a slot */
        ucs_queue_head_t      cancel_queue;   /* cancels to report */
        ucs_mpool_t           recv_mp;
        struct {                              /* receives whose context is
                                                 still owed a completion */
            uct_rc_tm_recv_t  **recv;         /* by index; NULL: free */
            unsigned          *free;          /* stack of free indices */
            unsigned          size, num_free;
        } ctxs;
        khash_t(uct_rc_tm_bufs) bufs;         /* posted receive buffers */
        uct_rc_tm_rndv_op_t   *rndv_ops;
        unsigned              rndv_free;      /* free list head */
        unsigned              rndv_in_flight;
    } tm;

    struct {
        size_t                seg_size;
        size_t                max_inline;
        size_t                eager_max;
        size_t                rndv_max;
        unsigned              rndv_queue_len;
        unsigned              tx_moderation;
        int                   sync_always;
        unsigned              sw_list_size;   /* receives kept in software */
        unsigned              promote_thresh; /* free device slots that
                                                 start a promotion */
        int                   report;         /* UCX_RC_TM_REPORT */
    } config;

    uint64_t                  stats[UCT_RC_TM_STAT_LAST];

    /* What iface_query reports, set once at open: where UCX checks
     * parameters (ENABLE_PARAMS_CHECK), the sends check their lengths and
     * iov counts against these very numbers */
    uct_rc_tm_iface_cap_t     cap;
    /* no field of cap: what fits inline, up to
     * UCT_RC_TM_RNDV_REQUEST_MAX_HDR */
    size_t                    rndv_request_max_hdr;
} uct_rc_tm_iface_t;


extern uct_tl_t uct_rc_tm_tl;
extern const char *uct_rc_tm_stat_names[];

/* Receive path (rc_tm_iface.c, rc_tm_progress.c) */
unsigned uct_rc_tm_iface_progress(uct_iface_h tl_iface);
/* Reaches the peer at dev_addr; same_device: only this iface's own device
 * (UCX's reachability scope "device") */
int uct_rc_tm_iface_reaches(uct_iface_h tl_iface,
                            const uct_device_addr_t *dev_addr, int same_device);
const char *uct_rc_tm_iface_dev_name(uct_iface_h tl_iface);
ucs_status_t uct_rc_tm_iface_estimate_perf(uct_iface_h tl_iface,
                                           uct_perf_attr_t *perf_attr);
uct_rc_tm_ep_t *uct_rc_tm_iface_lookup_ep(uct_rc_tm_iface_t *iface,
                                          uint32_t qp_num);
void uct_rc_tm_iface_release_rx(uct_rc_tm_iface_t *iface, void *elem);
void uct_rc_tm_iface_post_rx(uct_rc_tm_iface_t *iface);

/* Tag offload (rc_tm_tag.c) */
ucs_status_t uct_rc_tm_tag_init(uct_rc_tm_iface_t *iface,
                                const uct_iface_params_t *params,
                                const uct_rc_tm_iface_config_t *config);
void uct_rc_tm_tag_cleanup(uct_rc_tm_iface_t *iface);
void uct_rc_tm_tag_cap_init(uct_rc_tm_iface_t *iface);
void uct_rc_tm_tag_handle_wc(uct_rc_tm_iface_t *iface, const tm_dev_wc_t *wc);
/* Around the dispatch of a polled receive batch: DELs wait for its end */
void uct_rc_tm_tag_batch_start(uct_rc_tm_iface_t *iface);
void uct_rc_tm_tag_batch_end(uct_rc_tm_iface_t *iface);
void uct_rc_tm_tag_fail_matched(uct_rc_tm_iface_t *iface, uint32_t qp_num,
                                enum ibv_wc_status wc_status);
/* Whether a receive the device matched on QP qp_num, or on a QP not
 * known, awaits its final completion */
int uct_rc_tm_tag_awaits_final(uct_rc_tm_iface_t *iface, uint32_t qp_num);
void uct_rc_tm_tag_find_lost(uct_rc_tm_iface_t *iface);
void uct_rc_tm_tag_resolve_del_failed(uct_rc_tm_iface_t *iface);
unsigned uct_rc_tm_tag_progress(uct_rc_tm_iface_t *iface);
void uct_rc_tm_tag_handle_fin(uct_rc_tm_iface_t *iface, uint32_t qp_num,
                              uint32_t op_id);
ucs_status_t uct_rc_tm_tag_handle_unexp(uct_rc_tm_iface_t *iface,
                                        const tm_dev_wc_t *wc,
                                        struct ibv_tmh *tmh);
void uct_rc_tm_tag_rndv_op_release(uct_rc_tm_iface_t *iface,
                                   uct_rc_tm_rndv_op_t *op);
void uct_rc_tm_tag_rndv_ops_purge(uct_rc_tm_iface_t *iface,
                                  uct_rc_tm_ep_t *ep, ucs_status_t status);
/* Control messages (FIN, rendezvous reads) that waited for send credits:
 * sent as credits return; failed with status when they never will be */
void uct_rc_tm_tag_ctl_progress(uct_rc_tm_iface_t *iface);
void uct_rc_tm_tag_ctl_purge(uct_rc_tm_ep_t *ep, ucs_status_t status);
ucs_status_t uct_rc_tm_iface_tag_recv_zcopy(uct_iface_h tl_iface,
                                            uct_tag_t tag, uct_tag_t tag_mask,
                                            const uct_iov_t *iov,
                                            size_t iovcnt,
                                            uct_tag_context_t *ctx);
ucs_status_t uct_rc_tm_iface_tag_recv_cancel(uct_iface_h tl_iface,
                                             uct_tag_context_t *ctx,
                                             int force);

/* Counters, for tests and users (public symbols of the module): of one
 * interface, and summed over every interface the process opened.  Fill at
 * most max, in uct_rc_tm_stat_t order, and return how many they filled. */
unsigned uct_rc_tm_iface_counters(uct_iface_h tl_iface, uint64_t *counters,
                                  unsigned max);
unsigned uct_rc_tm_counters_total(uint64_t *counters, unsigned max);
const char *uct_rc_tm_counter_name(unsigned index);
/* An interface's counters start at 0 and count in the totals until close */
void uct_rc_tm_iface_stats_open(uct_rc_tm_iface_t *iface);
void uct_rc_tm_iface_stats_close(uct_rc_tm_iface_t *iface);

/* The offload report (rc_tm_report.c): its text, printed at close with
 * UCX_RC_TM_REPORT=y and readable through UCX's VFS with the counters */
void uct_rc_tm_report_text(uct_rc_tm_iface_t *iface, ucs_string_buffer_t *strb);
void uct_rc_tm_report_print(uct_rc_tm_iface_t *iface);
void uct_rc_tm_iface_vfs_populate(uct_rc_tm_iface_t *iface);
void uct_rc_tm_iface_device(uct_iface_h tl_iface, tm_dev_t **dev_p,
                            tm_dev_srq_t **srq_p);

static UCS_F_ALWAYS_INLINE void
uct_rc_tm_stat(uct_rc_tm_iface_t *iface, uct_rc_tm_stat_t stat)
{
    ++iface->stats[stat];
}

/* A receive joined the software list (the device's list was full): its
 * high-water mark, for the report; off the path of a list with room */
static UCS_F_ALWAYS_INLINE void
uct_rc_tm_sw_list_grew(uct_rc_tm_iface_t *iface)
{
    ++iface->tm.num_sw;
    iface->tm.sw_peak = ucs_max(iface->tm.sw_peak, iface->tm.num_sw);
}

/* No rendezvous can start before a FIN frees an op (UCX_RC_TM_RNDV_QUEUE_LEN
 * in flight): the interface's resource, not one connection's */
static UCS_F_ALWAYS_INLINE int
uct_rc_tm_iface_rndv_ops_exhausted(const uct_rc_tm_iface_t *iface)
{
    return iface->tm.rndv_free == UCT_RC_TM_RNDV_OP_NONE;
}

/* What a failed completion means for the receive it names */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_tm_wc_recv_status(enum ibv_wc_status status)
{
    switch (status) {
    case IBV_WC_SUCCESS:
        return UCS_OK;
    case IBV_WC_LOC_LEN_ERR:
        return UCS_ERR_MESSAGE_TRUNCATED;
    case IBV_WC_REM_ACCESS_ERR:
        return UCS_ERR_INVALID_ADDR;
    default:
        return UCS_ERR_IO_ERROR;
    }
}

/* Before handing payload (which follows a TMH) to the user with
 * UCT_CB_PARAM_FLAG_DESC */
static UCS_F_ALWAYS_INLINE void
uct_rc_tm_iface_set_release_desc(uct_rc_tm_iface_t *iface, void *payload)
{
    uct_recv_desc(UCS_PTR_BYTE_OFFSET(payload, -(ptrdiff_t)iface->rx.headroom)) =
            &iface->rx.release_desc;
}

/* UCX's checks of a call's parameters (uct_iface.h) for the calls that
 * return a pointer: the same conditions, the same messages, and as UCX's,
 * nothing without ENABLE_PARAMS_CHECK */
#define UCT_RC_TM_CHECK_IOV_SIZE_PTR(_iovcnt, _max_iov, _name) \
    UCT_CHECK_PARAM_PTR((_iovcnt) <= (_max_iov), \
                        "iovcnt(%lu) should be limited by %lu in %s", \
                        (unsigned long)(_iovcnt), (unsigned long)(_max_iov), \
                        _name)

#define UCT_RC_TM_CHECK_LENGTH_PTR(_length, _max_length, _name) \
    UCT_CHECK_PARAM_PTR((_length) <= (_max_length), \
                        "Invalid %s length: %zu (expected: <= %zu)", _name, \
                        (size_t)(_length), (size_t)(_max_length))

/* In every build: a message built on the stack (char msg[SHORT_MAX]) never
 * overruns it, whatever the caller passed.  UCX's parameter checks, which
 * bound it more tightly, compile away in a UCX built without them. */
#define UCT_RC_TM_CHECK_MSG_FITS(_length, _name, _err) \
    if (ucs_unlikely((_length) > UCT_RC_TM_SHORT_MAX)) { \
        ucs_error("Invalid %s length: %zu (expected: <= %d)", _name, \
                  (size_t)(_length), UCT_RC_TM_SHORT_MAX); \
        return _err; \
    }

/* A copy of user data that may be empty: memcpy needs valid pointers even
 * for no bytes, and users pass NULL with length 0 */
static UCS_F_ALWAYS_INLINE void
uct_rc_tm_copy(void *dest, const void *src, size_t length)
{
    if (length > 0) {
        memcpy(dest, src, length);
    }
}

static UCS_F_ALWAYS_INLINE void
uct_rc_tm_fill_tmh(struct ibv_tmh *tmh, uint8_t opcode, uint32_t app_ctx,
                   uint64_t tag)
{
    tmh->opcode      = opcode;
    tmh->reserved[0] = 0;
    tmh->reserved[1] = 0;
    tmh->reserved[2] = 0;
    tmh->app_ctx     = htobe32(app_ctx);
    tmh->tag         = htobe64(tag);
}

#endif
