/*
 * Software NIC: internal definitions shared by its sources.
 *
 * Layout, by verbs object and engine stage (as Linux's rxe):
 *   softnic_context.c  device list, open / close, device and port queries,
 *                      GIDs, PD, the context's verbs
 *   softnic_mr.c       registration table (in shared memory), key checks,
 *                      peers' tables
 *   softnic_rdma.c     RDMA copies; long reads shared with the responder
 *   softnic_cq.c       CQs: the extended poll interface, completion entries,
 *                      a destroyed QP's entries purged
 *   softnic_hold.c     a match completion held back, for a racing DEL
 *                      (softnic_dv_attr::hold_match)
 *   softnic_srq.c      TM-SRQ: untagged buffers, list operations (ADD, DEL,
 *                      SYNC), the matching list and the phase
 *   softnic_qp.c       QPs: creation, states (INIT, RTR, RTS, ERR), rings,
 *                      destruction
 *   softnic_accept.c   connections to a remote SRQ (dv) and their accept
 *   softnic_req.c      requester: send queue, messages onto the peer's ring,
 *                      RDMA read and write
 *   softnic_pull.c     a send backlog the peer's device takes while the
 *                      requester does not poll
 *   softnic_resp.c     responder: arrivals judged and placed (matched,
 *                      unexpected, untagged), the device's rendezvous read
 *                      and FIN, DATA_VALID
 *   softnic_rq.c       receive queues that are not tag matching (a QP's
 *                      own, basic SRQs), RNR and NAKs (softnic_rq.h)
 *   softnic_comp.c     completer: send completions in order, peer liveness,
 *                      errors
 *   softnic_wire.c     shared-memory segments, processes, leftovers,
 *                      the registry of the device's QP and SRQ numbers
 *   softnic_engine.c   the device's engine thread (SOFTNIC_PROGRESS_THREAD),
 *                      its doorbell, the device lock
 *   softnic_test.c     test steering (softnic_test.h)
 *
 * Threading: a context and everything created from it is used by one
 * software thread at a time (as UCT interfaces are); the shared-memory
 * structures (rings, registration tables, doorbells) are touched
 * concurrently, by other devices and processes.  With an engine thread
 * (softnic_engine.h), the engine and the verbs share the device's lock;
 * completions are read without it.
 */
#ifndef SOFTNIC_INT_H_
#define SOFTNIC_INT_H_

#include "softnic.h"
#include "softnic_aside.h"
#include "softnic_port.h"
#include "softnic_test.h"
#include "softnic_wire.h"

#include <matcher/tag_matcher.h>
#include <infiniband/tm_types.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define sn_likely(x)           __builtin_expect(!!(x), 1)
#define sn_unlikely(x)         __builtin_expect(!!(x), 0)
#define SN_ARRAY_SIZE(a)       (sizeof(a) / sizeof((a)[0]))

/* What the device reports (ibv_query_device_ex), and the defaults of what
 * a user sets per object */
#define SN_MAX_NUM_TAGS        ((1u << SN_TAG_INDEX_BITS) - 1)
#define SN_MAX_OPS             (1u << 20)
#define SN_MAX_SRQ_WR          (1u << 24)
/* rdma-core's tests post 33 untagged buffers to a mlx5 TM-SRQ, "a hardware
 * limitation" (tests/test_tag_matching.py, HW_LIMITAION) that nothing else
 * documents; the software NIC takes the harsher reading and refuses a
 * TM-SRQ that cannot hold them */
#define SN_MIN_TM_SRQ_WR       33
#define SN_MAX_QP_WR           (1u << 20)
#define SN_MAX_CQE             (1u << 24)
/* mlx5's largest send WQE (max_sq_desc_sz: 1024 bytes from ConnectX-4 on)
 * less an RC WQE's 192 bytes of segments and the inline segment's 4: the
 * most inline data a QP is granted (mlx5_calc_send_wqe refuses more) */
#define SN_MAX_SQ_DESC         1024
#define SN_MAX_INLINE          (SN_MAX_SQ_DESC - 192 - 4)
#define SN_MAX_SGE             8          /* gather entries of a send, and
                                             scatter of a QP's receive:
                                             UCX's UD asks 6, its RC 5
                                             (UCT_IB_MAX_IOV is 8) */
#define SN_MAX_SRQ_SGE         4          /* of a basic SRQ's receive */
#define SN_TM_MAX_SGE          2          /* scatter entries of a list
                                             entry (mlx5: 1) */
#define SN_MAX_RD_ATOM         16
#define SN_MAX_MSG_SIZE        (1u << 31) /* RDMA; SENDs: max_send_size */
#define SN_DEF_PACKET_SIZE     4096
#define SN_DEF_MAX_SEND        (64 * 1024)
#define SN_DEF_RNDV_HDR_SIZE   64
#define SN_TAG_INDEX_BITS      20         /* handles are indices below this */
#define SN_NO_TAG              UINT32_MAX

/* rdma-core's mlx5: SYNC_REQ on an unexpected message once more than this
 * many were not acknowledged by a count-carrying ADD */
#define SN_MAX_SYNC_DIFF       0x3fff
/* Matched eager messages up to this many bytes mlx5 scatters into the
 * completion itself, and rdma-core's provider reports a buffer too small
 * for one as IBV_WC_LOC_LEN_ERR on the entry's wr_id */
#define SN_INLINE_SCATTER      64

/* A freed registration slot is reused once this many wait behind it (FIFO) */
#define SN_MR_REUSE_MIN        4096

/* How often a QP waiting on its peer checks that the peer lives */
#define SN_LIVENESS_PERIOD_NS  (20ull * 1000 * 1000)
/* A send backlog is taken by the peer's device once its requester has not
 * pushed for this long (softnic_pull.c): one that polls pushes it faster */
#define SN_PULL_IDLE_NS        (50ull * 1000)

/* Messages of one QP taken in a row (sn_srq_run_arrivals) */
#define SN_ARRIVAL_BURST       16

/* GID: prefix {0xfd, 'S', host id, user hash}; id {uid, 0, 'S', version}:
 * one per device (every context of the host's user) */
#define SN_GID_MARK            0x53


/* ---- Lists ---- */

typedef struct sn_list {
    struct sn_list *prev, *next;
} sn_list_t;

#define sn_container_of(ptr, type, member) \
    ((type *)((char *)(ptr) - offsetof(type, member)))

static inline void sn_list_init(sn_list_t *h) { h->prev = h->next = h; }
static inline bool sn_list_empty(const sn_list_t *h) { return h->next == h; }
static inline void sn_list_add_tail(sn_list_t *h, sn_list_t *e)
{
    e->prev = h->prev; e->next = h;
    h->prev->next = e; h->prev = e;
}
static inline void sn_list_del(sn_list_t *e)
{
    e->prev->next = e->next; e->next->prev = e->prev;
    e->prev = e->next = e;
}


/* ---- Shared memory, addresses ---- */

typedef struct sn_shm {
    void            *base;
    size_t          size;
    char            name[96];   /* /dev/shm name; empty when not owned */
    pid_t           owner;      /* process that created it (fork copies) */
    sn_list_t       owned_link; /* in the process's list of its segments */
} sn_shm_t;

/* What a GID says of a device: whose it is.  Which process owns a QP or
 * SRQ of it the device's registry says (sn_num_owner) */
typedef struct sn_dev_addr {
    uint32_t        host_id;    /* hash of the boot id: same host only */
    uint16_t        uid_hash;   /* process_vm_* needs the same user */
    uint32_t        uid;        /* whose registry names its QPs */
} sn_dev_addr_t;


/* ---- Objects ---- */

typedef struct sn_context sn_context_t;
typedef struct sn_cq      sn_cq_t;
typedef struct sn_srq     sn_srq_t;
typedef struct sn_qp      sn_qp_t;
typedef struct sn_peer    sn_peer_t;

/* A peer device whose registration table we mapped (shared by its QPs) */
struct sn_peer {
    sn_list_t          link;
    sn_proc_id_t       proc;
    uint16_t           dev_seq;
    sn_shm_t           shm;
    sn_dev_seg_t       *seg;
    unsigned           refcount;
};

/* A registration, local side: one per slot of the table, kept in an array
 * so that registering allocates nothing */
typedef struct sn_mr {
    struct ibv_mr      ibv;
    uint32_t           slot;
    uint16_t           next_gen;     /* generation of the slot's next use */
} sn_mr_t;

struct sn_context {
    struct verbs_context vctx;       /* ends with the struct ibv_context */
    sn_proc_id_t       proc;
    uint32_t           host_id;
    uint16_t           dev_seq;
    union ibv_gid      gid;
    struct softnic_dv_attr attr;
    uint32_t           ring_size;    /* of QPs created from now on */
    sn_shm_t           shm;
    sn_dev_seg_t       *seg;
    /* registration table, local side: the registrations by slot, a FIFO
     * of freed slots and the first never-used slot */
    sn_mr_t            *mrs;
    uint32_t           *mr_free;
    uint32_t           mr_free_head, mr_free_count;
    uint32_t           mr_fresh;
    sn_list_t          peers;
    sn_list_t          cqs;
    sn_list_t          qps;
    sn_qp_t            **wake_qps;   /* by wake slot (softnic_park.c) */
    _Atomic bool       drop_wakes;   /* steering: producers wake nothing */
    uint32_t           wake_next;    /* where the search for a free one
                                        starts */
    sn_list_t          events;       /* QPs with an asynchronous event not
                                        yet read (softnic_async.c) */
    int                async_wake_fd;  /* the pipe behind async_fd: a byte */
    int                async_drain_fd; /* while an event waits (our own
                                          non-blocking read end) */
    _Atomic bool       async_token;    /* that byte is in the pipe */
    unsigned           srqs;
    uint32_t           next_srq_num;
    /* steering (softnic_test.h) */
    softnic_mode_t     mode;
    softnic_order_t    order;
    uint64_t           rng;
    /* port 1: its link layer (SOFTNIC_LINK_LAYER, read at open: on
     * Ethernet no TM-SRQ), LID, MTU, P_Keys (softnic_port.h) */
    uint8_t            link_layer;
    sn_port_t          port;
    /* the engine (softnic_engine.c): where the device's work runs */
    uint32_t           progress;     /* SOFTNIC_PROGRESS_INLINE / THREAD */
    bool               threaded;     /* an engine runs: verbs take lock */
    bool               liveness_now; /* engine woken by its timer: check
                                        the peers of waiting QPs now */
    pthread_mutex_t    lock;         /* the engine's work vs the verbs */
    pthread_t          engine;
    pid_t              engine_pid;   /* a forked child has no engine */
    int                creator_cpu;  /* where the engine's creator ran */
    _Atomic bool       engine_stop;
    _Atomic uint64_t   engine_sleeps, engine_timer_wakes, engine_db_wakes;
    _Atomic bool       engine_in_wait; /* past its last look (tests) */
    _Atomic uint64_t   engine_passes;
    _Atomic uint64_t   empty_polls;  /* software polls that found nothing:
                                        it is polling (sn_engine_assist) */
    _Atomic uint64_t   assists, engine_parks, engine_asides;
    _Atomic uint32_t   engine_sleep_seq; /* the doorbell's, at its sleep */
    /* standing aside (softnic_aside.c: the mode, SN_ENGINE_*, is handed
     * over; software alone changes threaded and aside) */
    _Atomic uint32_t   engine_mode;
    _Atomic bool       aside_auto;   /* SOFTNIC_ENGINE_ASIDE_AUTO */
    bool               aside;
    sn_aside_look_t    look;
    /* shared reads (softnic_rdma.c): ours offered, chunks of peers' ones
     * we copied */
    _Atomic uint64_t   shares_offered, share_chunks_served;
    struct { uint64_t claim; uint32_t runs; } share_idle[SN_SHARE_SLOTS];
                                     /* our slots with nothing to take */
    /* a peer's request taken from its backlog is read here
     * (softnic_pull.c) */
    void               *pull_buf;
    size_t             pull_size;
};

/* What the provider does with a TM completion when it is polled (as
 * rdma-core's mlx5 does in its poll: the entry's wr_id, its references,
 * SYNC_REQ) */
typedef enum {
    SN_CQE_PLAIN,
    SN_CQE_TM_OP,           /* ADD / DEL / SYNC: wr_id given; DEL status */
    SN_CQE_TM_CONSUMED,     /* an entry consumed, more to come (MATCH) */
    SN_CQE_TM_FINAL,        /* an entry's last completion */
    SN_CQE_TM_UNEXP,        /* a tagged message no entry took */
    SN_CQE_REQ_NO_SQ        /* a requester CQE of a QP created without a
                               send queue: mlx5's poll dereferences the
                               send queue it has not (sn_cq_load aborts) */
} sn_cqe_kind_t;

/* A completion entry */
typedef struct sn_cqe {
    uint64_t           wr_id;
    enum ibv_wc_status status;
    enum ibv_wc_opcode opcode;
    uint32_t           byte_len;
    uint32_t           qp_num;
    unsigned           wc_flags;
    uint32_t           imm_data;     /* big endian */
    uint32_t           vendor_err;
    uint32_t           src_qp;       /* receives of softnic_rq.c */
    uint16_t           slid;         /* UD receives (softnic_ud.c): the */
    uint8_t            sl;           /* sender's LID and SL, the path */
    uint8_t            dlid_path_bits; /* bits of the LID it was sent to */
    struct ibv_wc_tm_info tm_info;
    /* for the provider, at poll */
    uint8_t            kind;         /* sn_cqe_kind_t */
    uint8_t            solicited;    /* a SEND with IBV_SEND_SOLICITED */
    uint16_t           hw_phase;     /* the NIC's count when it wrote it */
    uint32_t           tag_index;    /* SN_NO_TAG, or the entry it names */
    uint32_t           op_seq;       /* SN_CQE_TM_OP: the operation's */
    sn_srq_t           *srq;
} sn_cqe_t;

struct sn_cq {
    struct ibv_cq_ex   ex;
    sn_list_t          link;         /* in ctx->cqs */
    sn_cqe_t           *cqe;
    uint32_t           depth;        /* power of two */
    uint32_t           head, tail;   /* tail - head = queued completions;
                                        head is the consumer's (software),
                                        tail the producer's (the NIC) */
    uint32_t           ready;        /* tail as published to software:
                                        entries before it are complete */
    uint32_t           cur;          /* the polled entry (start/next_poll) */
    uint32_t           cur_end;      /* ready when the batch started */
    const sn_cqe_t     *cur_cqe;     /* ... what the read_* functions read */
    sn_list_t          srqs;         /* TM-SRQs whose completions come here */
    sn_list_t          send_qps;     /* QPs whose send completions come here */
    sn_list_t          send_busy;    /* those with send-side work: a poll
                                        looks at these only */
    int                overrun;      /* SN_CQ_ERR_* (softnic_async.c) */
    sn_cqe_t           lost;         /* where entries past an overrun go */
    sn_cqe_t           *held;        /* a match held back, or NULL */
    /* completion events, under the device lock (softnic_channel.h) */
    uint8_t            armed;        /* SN_CQ_ARM_*, 0 when not armed */
    uint32_t           arm_next;     /* first entry the arm has not seen */
    uint32_t           events_queued;   /* raised, not yet read */
    uint32_t           events_reported; /* read (ibv_get_cq_event) */
    sn_list_t          event_link;   /* in its channel's queue */
};

/* The TM-SRQ: its matching list, list operations, buffers (softnic_srq.h) */
#include "softnic_srq.h"

/* A send work request, kept until it completes (in order) */
typedef struct sn_wqe {
    uint64_t           wr_id;
    uint64_t           ring_end;     /* SEND: done when peer head passes it */
    uint8_t            opcode;       /* IBV_WR_* */
    uint8_t            signaled;
    uint8_t            state;        /* SN_WQE_* */
    uint8_t            status;       /* completion status when DONE */
    uint8_t            solicited;    /* SN_REC_F_SOLICITED or 0 */
    uint32_t           byte_len;
    uint32_t           imm_data;     /* SEND_WITH_IMM, big endian */
    /* what is needed to push it later (ring full, or earlier ones waiting) */
    uint32_t           num_sge;
    struct ibv_sge     sge[SN_MAX_SGE];
    uint64_t           remote_addr;
    uint32_t           rkey;
    uint32_t           inline_len;   /* its bytes: sn_wqe_inline() */
} sn_wqe_t;

enum {
    SN_WQE_QUEUED,                   /* not yet on the wire */
    SN_WQE_SENT,                     /* in the peer's ring */
    SN_WQE_DONE                      /* completion ready */
};

/* The final completion of a matched message, and for a rendezvous the
 * device read, the FIN that goes before it: a FIN waiting for room in the
 * outbound ring holds the completion, so a receiver that waits for it
 * sends the FIN itself (one that stopped polling would hold it for good) */
typedef struct sn_fin {
    uint8_t            data[sizeof(struct ibv_tmh) + sizeof(struct ibv_rvh)];
    uint32_t           tag_index;
    uint32_t           byte_len;
    unsigned           imm_flag;
    uint32_t           imm_data;
} sn_fin_t;

struct sn_qp {
    union {                          /* ibv_ex only when wr_batch is set */
        struct ibv_qp    ibv;        /* ibv.state: RESET .. ERR */
        struct ibv_qp_ex ibv_ex;     /* the ibv_wr_* API (softnic_qp_ex.c) */
    };
    struct sn_wr_batch *wr_batch;    /* created by create_qp_ex with send ops */
    struct sn_ud       *ud;          /* a UD QP's (softnic_ud.h); NULL: RC */
    sn_shm_t           num_entry;    /* ibv.qp_num's registry entry */
    sn_list_t          ctx_link;     /* in ctx->qps */
    sn_list_t          srq_link;     /* in srq->qps */
    sn_list_t          cq_link;      /* in send_cq->send_qps */
    sn_list_t          active_link;  /* in srq->active, unless parked */
    sn_list_t          busy_link;    /* in send_cq->send_busy, or alone */
    uint32_t           wake_slot;    /* 1 + its wake slot; 0: none */
    bool               parked;       /* its ring is not looked at */
    uint32_t           busy_run;     /* the arrival run that last found
                                        its ring holding something */
    sn_srq_t           *srq;
    sn_cq_t            *send_cq;
    bool               rx_only;      /* no send queue: the NIC does
                                        rendezvous on it */
    bool               passive;      /* accepted by our SRQ, owned by it */
    bool               pkey_drop;    /* the responder drops our packets */
    sn_qp_t            *partner;     /* the other QP of an accepted pair */
    /* inbound: our segment, consumed by our SRQ */
    sn_shm_t           in_shm;
    sn_ring_ctl_t      *in;
    uint32_t           in_mask;
    uint64_t           in_head;      /* local copy of in->head */
    sn_rec_t           *in_rec;      /* the record at in_head */
    /* outbound: the peer's inbound segment, we produce */
    sn_shm_t           out_shm;
    sn_ring_ctl_t      *out;
    uint32_t           out_mask;
    uint64_t           out_tail;     /* our position */
    uint64_t           out_head_cache;
    uint32_t           head_polls;
    uint32_t           sig_pending;  /* signaled WQEs not completed */
    sn_peer_t          *peer;        /* peer device's registration table */
    sn_proc_id_t       peer_proc;
    uint64_t           next_liveness_ns;
    uint64_t           gone_deadline_ns; /* peer gone: retries run out */
    uint32_t           liveness_polls;
    /* doorbells rung at the peer for what we produced and consumed */
    uint64_t           db_out_tail, db_in_head;
    /* send queue: FIFO of sq_size, and beside it room for each entry's
     * inline data, as much as was granted (a mlx5 WQE holds it): used
     * only while the ring is full, so its pages are touched only then */
    sn_wqe_t           *sq;
    uint8_t            *sq_inline;
    uint32_t           sq_inline_size;
    uint32_t           sq_mask, sq_size;
    uint32_t           sq_head;      /* oldest not yet completed */
    uint32_t           sq_sent;      /* oldest not yet on the wire */
    uint32_t           sq_tail;      /* next free */
    uint32_t           max_send_size;
    /* softnic_pull.c: our backlog is offered to the peer's device (we
     * hold nothing of the ring but under its backlog lock) ... */
    bool               offered;
    /* ... and, as the consumer, the peer's backlog_sent when its next
     * WQE was found not to be ours to take (1 + index; 0: none) */
    uint32_t           backlog_pushes; /* ours, counted in ring->... */
    uint64_t           pull_stuck;
    uint32_t           pull_seen_pushes; /* the peer's count, and when it */
    uint64_t           pull_seen_ns;     /* was last seen to change */
    uint64_t           pull_alive_ns; /* the peer's pid checked until */
    /* FINs the device could not put on the wire yet */
    sn_fin_t           *fins;
    uint32_t           fin_count, fin_cap;
    /* what creation and modify_qp set, for softnic_query_qp */
    struct ibv_qp_attr attr;
    int                sq_sig_all;
    /* IBV_EVENT_QP_LAST_WQE_REACHED (softnic_async.c): due once the QP is
     * in error, raised when nothing it took from the SRQ is in progress */
    bool               last_wqe_due;
    uint32_t           xfers_queued; /* its matched transfers not done */
    sn_list_t          event_link;   /* in ctx->events while unread */
    uint32_t           events_reported; /* read by software */
};


/* ---- Helpers ---- */

/* Everything below is internal to the library: calls between the sources
 * need no PLT/GOT indirection (the hot path crosses files) */
#pragma GCC visibility push(hidden)

static inline sn_context_t *sn_ctx(struct ibv_context *context)
{
    return sn_container_of(context, sn_context_t, vctx.context);
}

static inline sn_cq_t *sn_cq(struct ibv_cq_ex *cq)
{
    return sn_container_of(cq, sn_cq_t, ex);
}

static inline sn_srq_t *sn_srq(struct ibv_srq *srq)
{
    return sn_container_of(srq, sn_srq_t, ibv);
}

static inline sn_qp_t *sn_qp(struct ibv_qp *qp)
{
    return sn_container_of(qp, sn_qp_t, ibv);
}

/* A send completes with an entry when asked, or always on a QP created
 * with sq_sig_all (mlx5 ORs its CQ_UPDATE bit into every WQE) */
static inline bool sn_wr_signaled(const sn_qp_t *qp,
                                  const struct ibv_send_wr *wr)
{
    return qp->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
}

static inline sn_context_t *sn_qp_ctx(const sn_qp_t *qp)
{
    return sn_ctx(qp->ibv.context);
}

static inline uint32_t sn_roundup_pow2(uint32_t v)
{
    uint32_t p = 1;
    while (p < v) {
        p <<= 1;
    }
    return p;
}

/* Logging (softnic_set_log) */
void sn_log(softnic_log_level_t level, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
#define sn_error(...)   sn_log(SOFTNIC_LOG_ERROR, __VA_ARGS__)
#define sn_warn(...)    sn_log(SOFTNIC_LOG_WARN, __VA_ARGS__)
#define sn_debug(...)   sn_log(SOFTNIC_LOG_DEBUG, __VA_ARGS__)

uint64_t sn_now_ns(void);

/* softnic_context.c */
bool sn_is_softnic(struct ibv_context *context);
void sn_gid_pack(union ibv_gid *gid, const sn_dev_addr_t *addr);
bool sn_gid_unpack(const union ibv_gid *gid, sn_dev_addr_t *addr);
bool sn_reachable(const sn_context_t *ctx, const sn_dev_addr_t *peer);

/* softnic_wire.c */
int  sn_proc_self(sn_proc_id_t *id);
int  sn_proc_start_time(pid_t pid, uint64_t *start_time);
bool sn_proc_alive(const sn_proc_id_t *id);
bool sn_proc_pid_alive(uint32_t pid);    /* any process of that pid */
/* A process named in one word: pid, and the low 32 bits of its start time
 * above it (sn_proc_word) */
bool sn_proc_word_alive(uint64_t word);
static inline uint64_t sn_proc_word(const sn_proc_id_t *id)
{
    return ((uint64_t)(uint32_t)id->start_time << 32) | id->pid;
}
uint32_t sn_host_id(void);
void sn_seg_name(char *buf, size_t len, const sn_proc_id_t *owner,
                 uint32_t dev_seq, char kind, uint32_t num);
int  sn_shm_create(sn_shm_t *shm, const char *name, size_t size);
int  sn_shm_attach(sn_shm_t *shm, const char *name);
bool sn_shm_is_ours(const sn_shm_t *shm);
void sn_shm_destroy(sn_shm_t *shm);
void sn_shm_detach(sn_shm_t *shm);
void sn_seg_hdr_init(sn_seg_hdr_t *hdr, const sn_proc_id_t *owner,
                     uint32_t kind);
void sn_reclaim_leftovers(void);
/* The device's numbers (kind 'q': QPs, 's': TM-SRQs), unique among the
 * processes of the user: one taken for the owner's context dev_seq and
 * published (0, or an errno; ENOMEM when none is free), given back, and
 * who owns one (ENOENT: no one; ESRCH: a process that died) */
int  sn_num_alloc(const sn_proc_id_t *owner, uint32_t dev_seq, char kind,
                  uint32_t *num, sn_shm_t *entry);
void sn_num_free(sn_shm_t *entry);
int  sn_num_owner(uint32_t uid, char kind, uint32_t num, sn_proc_id_t *owner,
                  uint32_t *dev_seq);

/* False in a forked child holding a copy of its parent's context: it must
 * not touch the shared state the parent's peers see */
static inline bool sn_ctx_is_ours(sn_context_t *ctx)
{
    return sn_shm_is_ours(&ctx->shm);
}

/* softnic_mr.c */
int  sn_mr_table_init(sn_context_t *ctx);
void sn_mr_table_cleanup(sn_context_t *ctx);
bool sn_key_check(const sn_dev_seg_t *seg, uint32_t key, uint64_t addr,
                  uint64_t length, uint32_t access);
int  sn_peer_get(sn_context_t *ctx, const sn_proc_id_t *proc,
                 uint16_t dev_seq, sn_peer_t **peer_p);
void sn_peer_put(sn_context_t *ctx, sn_peer_t *peer);

/* softnic_rdma.c: one copy (an errno); a read of a peer's memory whose
 * keys the caller checked, shared with the peer's device when long (which
 * checks the rkey again per chunk); sn_rdma_serve: that device's part,
 * when it runs (how many chunks it copied) */
int  sn_rdma_copy(pid_t peer, bool write, void *local, uint64_t remote,
                  size_t length);
int  sn_rdma_read(sn_context_t *ctx, sn_dev_seg_t *peer_seg,
                  const sn_proc_id_t *peer_proc, void *local,
                  uint64_t remote, uint32_t rkey, size_t length);
unsigned sn_rdma_serve_offers(sn_context_t *ctx);

/* In every CQ run: one load when no peer offered a read */
static inline unsigned sn_rdma_serve(sn_context_t *ctx)
{
    if (sn_likely(atomic_load_explicit(&ctx->seg->shares,
                                       memory_order_relaxed) == 0)) {
        return 0;
    }
    return sn_rdma_serve_offers(ctx);
}

/* softnic_cq.c (the producer's side: softnic_cq.h) */
struct ibv_cq_ex *sn_create_cq_ex(struct ibv_context *context,
                                  struct ibv_cq_init_attr_ex *attr);
int  sn_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);

/* The device's work for a CQ (softnic_cq.c): how much was done */
unsigned sn_cq_work(sn_cq_t *cq);

void sn_cq_overrun(sn_cq_t *cq);
/* Removes the unpolled completions of QP qp_num (the QP is destroyed) */
void sn_cq_purge_qp(sn_cq_t *cq, uint32_t qp_num);

/* softnic_qp.c */
/* A ring of ours for a QP of type qp_type (IBV_QPT_RC or UD) of size
 * bytes (0: the context's ring_size); a peer's, if it is one for qp_type */
int  sn_ring_create(sn_context_t *ctx, char kind, uint32_t num,
                    uint32_t size, uint32_t qp_type, sn_shm_t *shm);
int  sn_ring_attach(const sn_proc_id_t *owner, uint32_t dev_seq, char kind,
                    uint32_t num, uint32_t qp_type, sn_shm_t *shm);
void sn_qp_set_in(sn_qp_t *qp);
int  sn_qp_set_out(sn_context_t *ctx, sn_qp_t *qp,
                   const sn_proc_id_t *peer_proc, uint16_t peer_dev_seq);
sn_qp_t *sn_qp_alloc(sn_context_t *ctx, sn_srq_t *srq, sn_cq_t *cq,
                     uint32_t max_send_wr, uint32_t max_inline);
void sn_qp_link(sn_context_t *ctx, sn_qp_t *qp);
void sn_qp_free(sn_qp_t *qp);
void sn_qp_destroy(sn_qp_t *qp);
void sn_qp_set_error(sn_qp_t *qp);
/* Whose device an address names (its uid): 0, EINVAL (not a software
 * NIC's address, a bad port) or EHOSTUNREACH (another host or user) */
int  sn_av_uid(sn_context_t *ctx, const struct ibv_ah_attr *ah, uint32_t *uid);

/* softnic_accept.c */
void sn_srq_accept(sn_srq_t *srq);
void sn_srq_destroy_qps(sn_srq_t *srq);

/* softnic_req.c (requester) */
int  sn_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                  struct ibv_send_wr **bad_wr);
void sn_qp_push(sn_qp_t *qp);
int  sn_qp_send_fin(sn_qp_t *qp, const sn_fin_t *fin);
void sn_qp_fins_complete(sn_qp_t *qp);

/* softnic_pull.c (a send backlog the peer's device takes) */
void sn_qp_backlog_init(sn_qp_t *qp);
void sn_qp_backlog_offer(sn_qp_t *qp);
bool sn_qp_backlog_begin(sn_qp_t *qp);
void sn_qp_backlog_end(sn_qp_t *qp);
void sn_qp_backlog_withdraw(sn_qp_t *qp);
int  sn_srq_pull_arrival(sn_srq_t *srq, sn_qp_t *qp);

/* softnic_resp.c (responder) */
bool sn_srq_arrival_ready(sn_srq_t *srq, sn_qp_t *qp);
int  sn_srq_arrive(sn_srq_t *srq, sn_qp_t *qp, const sn_rec_t *rec);
void sn_srq_push_final(sn_qp_t *qp, const sn_fin_t *fin);
int  sn_srq_step_arrival(sn_srq_t *srq, sn_qp_t *qp);
bool sn_srq_data_ready(const sn_srq_t *srq);
int  sn_srq_step_data(sn_srq_t *srq);
void sn_srq_forget_qp(sn_srq_t *srq, sn_qp_t *qp);
void sn_srq_rx_error(sn_srq_t *srq, sn_qp_t *qp, enum ibv_wc_status status);
bool sn_ring_skip_pad(sn_qp_t *qp, sn_rec_t **rec_p);

/* softnic_async.c: the context's async_fd, readable while an event waits
 * to be read (sn_async_raise after an event is added) */
int  sn_async_fd_open(sn_context_t *ctx);
void sn_async_fd_close(sn_context_t *ctx);
void sn_async_raise(sn_context_t *ctx);

/* softnic_comp.c (completer) */
void sn_qp_progress_send(sn_qp_t *qp);
void sn_qp_last_wqe_check(sn_qp_t *qp);
void sn_qp_events_drop(sn_qp_t *qp);
void sn_qp_events_check_acked(sn_qp_t *qp);
unsigned sn_qp_reap(sn_qp_t *qp, sn_cq_t *cq);
void sn_qp_complete_acked(sn_qp_t *qp);
void sn_qp_fail_from(sn_qp_t *qp, uint32_t index, enum ibv_wc_status status);
bool sn_qp_peer_alive(sn_qp_t *qp);

static inline sn_wqe_t *sn_sq_wqe(sn_qp_t *qp, uint32_t index)
{
    return &qp->sq[index & qp->sq_mask];
}

static inline uint8_t *sn_wqe_inline(const sn_qp_t *qp, const sn_wqe_t *wqe)
{
    return qp->sq_inline + (size_t)(wqe - qp->sq) * qp->sq_inline_size;
}

/* Is the QP waiting for its peer (so that its death matters)?  Then it
 * has send-side work */
static inline bool sn_qp_waits_on_peer(const sn_qp_t *qp)
{
    return (qp->sq_head != qp->sq_tail) || (qp->fin_count != 0);
}

static inline void sn_wqe_done(sn_wqe_t *wqe, enum ibv_wc_status status)
{
    wqe->state  = SN_WQE_DONE;
    wqe->status = (uint8_t)status;
}

/* softnic_test.c */
int  sn_srq_step_random(sn_srq_t *srq, uint64_t *seed);


#pragma GCC visibility pop

#include "softnic_ring.h"
#include "softnic_engine.h"
#include "softnic_cq.h"
#include "softnic_rq.h"
#include "softnic_qp_ex.h"
#include "softnic_ud.h"

#endif
