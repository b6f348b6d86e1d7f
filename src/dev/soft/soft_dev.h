/*
 * Software TM-SRQ device: internal definitions shared by its sources.
 *
 * Layout of the backend:
 *   soft_dev.c   open/close/query, addresses, CQs, the ops table
 *   soft_wire.c  shared-memory segments, rings, peer liveness, leftovers
 *   soft_mr.c    registration table (in shared memory), key checks, RDMA copy
 *   soft_conn.c  connections: send queue, ring producer, send completions
 *   soft_tm.c    TM-SRQ: list operations, matching, phase, receive completions
 *   soft_test.c  test steering (soft_dev_test.h)
 *
 * Threading: a device and everything created from it is used by one thread
 * at a time (as UCT ifaces are); only the shared-memory structures (rings,
 * registration tables) are touched concurrently, by other devices/processes.
 */
#ifndef RC_TM_SOFT_DEV_H_
#define RC_TM_SOFT_DEV_H_

#include "dev/tm_dev.h"
#include "soft_dev_test.h"
#include "matcher/tag_matcher.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define SOFT_CACHE_LINE        64
#define SOFT_ALIGNED           __attribute__((aligned(SOFT_CACHE_LINE)))
#define soft_likely(x)         __builtin_expect(!!(x), 1)
#define soft_unlikely(x)       __builtin_expect(!!(x), 0)
#define SOFT_ARRAY_SIZE(a)     (sizeof(a) / sizeof((a)[0]))

/* Defaults (tm_dev_attr_t fields left zero) */
#define SOFT_DEF_MAX_NUM_TAGS      1024
#define SOFT_DEF_MAX_OPS           256
#define SOFT_DEF_RNDV_HDR_SIZE     64
#define SOFT_DEF_SRQ_DEPTH         4096
#define SOFT_DEF_EAGER_PACKET      4096
#define SOFT_DEF_MAX_MSG_SIZE      (64 * 1024)
#define SOFT_DEF_MAX_SEND_WR       256
#define SOFT_MAX_INLINE            256
#define SOFT_MAX_SGE               4        /* send-side gather entries */
#define SOFT_MAX_RDMA_SIZE         (1ul << 31)
#define SOFT_TAG_INDEX_BITS        20       /* handle = gen << 20 | index */
#define SOFT_MAX_NUM_TAGS_LIMIT    ((1u << SOFT_TAG_INDEX_BITS) - 1)

/* Registration table: key = generation << 20 | slot (slot 0 unused).  UCP
 * registers every offloaded receive buffer, so MPI codes with deep receive
 * queues need far more than 64k regions; the shared table is sparse (pages
 * are touched only as slots are first used). */
#define SOFT_MR_SLOT_BITS          20
#define SOFT_MR_SLOTS              (1u << SOFT_MR_SLOT_BITS)
#define SOFT_MR_GEN_MAX            ((1u << (32 - SOFT_MR_SLOT_BITS)) - 1)
/* A freed slot is reused only once this many wait behind it (FIFO); until
 * then registrations take never-used slots */
#define SOFT_MR_REUSE_MIN          4096

/* How often a connection waiting on its peer checks that the peer lives */
#define SOFT_LIVENESS_PERIOD_NS    (20ull * 1000 * 1000)

#define SOFT_SHM_PREFIX            "rc_tm_soft."
#define SOFT_MAGIC                 0x72637473u   /* "rcts" */
#define SOFT_VERSION               3u     /* 3: 20-bit key slots */


/* ---- Addresses (packed, what dev_addr/conn_addr write) ---- */

typedef struct soft_proc_id {
    uint32_t pid;
    uint32_t uid;
    uint64_t start_time;        /* /proc/<pid>/stat field 22: tells pid reuse */
} soft_proc_id_t;

/* Unpacked; on the wire it is SOFT_DEV_ADDR_LEN bytes (soft_dev_addr_pack) */
typedef struct soft_dev_addr {
    uint32_t        host_id;    /* hash of the boot id: same host only */
    soft_proc_id_t  proc;
    uint32_t        dev_seq;    /* device number within the process */
} soft_dev_addr_t;

/* type byte, host, pid, uid, start time, device number: fits UCP's 31 bytes */
#define SOFT_DEV_ADDR_LEN   (1 + 4 + 4 + 4 + 8 + 4)

typedef struct soft_conn_addr {
    uint32_t        conn_seq;   /* names the connection's inbound segment */
    uint32_t        qp_num;
} soft_conn_addr_t;


/* ---- Shared memory ---- */

typedef struct soft_list {
    struct soft_list *prev, *next;
} soft_list_t;

typedef struct soft_shm {
    void            *base;
    size_t          size;
    char            name[96];   /* /dev/shm name; empty when not owned */
    pid_t           owner;      /* process that created it (fork copies) */
    soft_list_t     owned_link; /* in the process's list of its segments */
} soft_shm_t;

/* Header of every segment: who owns it */
typedef struct soft_seg_hdr {
    uint32_t        magic;
    uint32_t        version;
    soft_proc_id_t  owner;
    uint32_t        kind;       /* SOFT_SEG_DEV / SOFT_SEG_CONN */
    _Atomic uint32_t closed;    /* owner destroyed it: peers see a dead end */
} soft_seg_hdr_t;

enum { SOFT_SEG_DEV = 1, SOFT_SEG_CONN = 2, SOFT_SEG_SRQ = 3 };

/* One registration (shared memory, read by peers) */
typedef struct soft_mr_slot {
    _Atomic uint32_t gen;       /* 0: free; else the key's generation */
    uint32_t        access;
    uint64_t        addr;
    uint64_t        length;
    uint64_t        reserved;
} soft_mr_slot_t;

/* Device segment: header, then the registration table */
typedef struct soft_dev_seg {
    soft_seg_hdr_t  hdr;
    soft_mr_slot_t  mr[SOFT_MR_SLOTS] SOFT_ALIGNED;
} soft_dev_seg_t;

/*
 * A TM-SRQ's accept queue: a peer asking for a connection to the SRQ
 * (connect_to_srq) claims a slot, fills it and marks it ready; the SRQ's
 * device accepts it in its next poll.  The requester creates both rings.
 */
#define SOFT_ACCEPT_SLOTS   64

typedef struct soft_accept_slot {
    _Atomic uint32_t state;     /* SOFT_SLOT_* */
    uint32_t        in_seq;     /* ring the requester produces into (c<n>) */
    uint32_t        out_seq;    /* requester's inbound ring (c<n>) */
    uint32_t        qp_num;     /* requester's connection */
    soft_proc_id_t  proc;       /* requester's device */
    uint32_t        host_id;
    uint32_t        dev_seq;
} soft_accept_slot_t;

enum { SOFT_SLOT_FREE, SOFT_SLOT_CLAIMED, SOFT_SLOT_READY };

typedef struct soft_srq_seg {
    soft_seg_hdr_t     hdr;
    _Atomic uint32_t   requests SOFT_ALIGNED;  /* slots made ready, ever */
    soft_accept_slot_t slot[SOFT_ACCEPT_SLOTS] SOFT_ALIGNED;
} soft_srq_seg_t;

/*
 * Ring: single producer (the peer connection), single consumer (the owner's
 * TM-SRQ).  Byte positions grow forever; records are cache-line aligned and
 * never wrap (a PAD record fills the end of the buffer).
 *
 * The consumer polls the type of the record at its own position, not the
 * producer's position: a new message costs the consumer one cache-line
 * transfer (the record, header and small payload together) instead of two.
 * Type 0 means "nothing yet".  Stale bytes of an earlier lap never look like
 * a record because the producer writes type 0 at the start of the next record
 * (the "terminator") before it publishes a record's type with a release
 * store; so the consumer, having acquired a record, sees 0 or a newer record
 * where the next one starts.  The ring keeps one line free for it.
 * tail is not maintained (kept for the layout); head is the consumer's
 * position, read by the producer only when it needs it (ring full, send
 * completions).
 */
typedef struct soft_ring_ctl {
    soft_seg_hdr_t   hdr;
    uint32_t         size;      /* bytes of data, a power of two */
    _Atomic uint32_t producer_attached;
    soft_proc_id_t   producer;
    uint8_t          pad0[SOFT_CACHE_LINE];
    _Atomic uint64_t tail SOFT_ALIGNED;   /* unused (version 1: producer) */
    _Atomic uint64_t head SOFT_ALIGNED;   /* written by the consumer */
    uint8_t          data[] SOFT_ALIGNED;
} soft_ring_ctl_t;

typedef struct soft_rec {
    uint32_t        len;        /* payload bytes */
    uint16_t        type;       /* 0 (not yet) / SOFT_REC_MSG / SOFT_REC_PAD,
                                 * accessed atomically (the record's flag) */
    uint16_t        flags;      /* SOFT_REC_F_* */
    uint32_t        imm_data;   /* big endian, as posted */
    uint32_t        reserved;
} soft_rec_t;

enum { SOFT_REC_MSG = 1, SOFT_REC_PAD = 2 };
enum { SOFT_REC_F_IMM = 1 };

/* Ring bytes a record of len payload bytes takes (whole cache lines) */
static inline uint32_t soft_rec_size(uint32_t len)
{
    return (sizeof(soft_rec_t) + len + SOFT_CACHE_LINE - 1) &
           ~(uint32_t)(SOFT_CACHE_LINE - 1);
}

static inline soft_rec_t *soft_ring_rec(soft_ring_ctl_t *ring, uint32_t mask,
                                        uint64_t pos)
{
    return (soft_rec_t *)(ring->data + (pos & mask));
}

/* The record's flag: acquire, so that its contents are visible after it */
static inline uint16_t soft_rec_type(const soft_rec_t *rec)
{
    return __atomic_load_n(&rec->type, __ATOMIC_ACQUIRE);
}


/* ---- Process-local objects ---- */

typedef struct soft_dev        soft_dev_t;
typedef struct soft_cq         soft_cq_t;
typedef struct soft_srq        soft_srq_t;
typedef struct soft_conn       soft_conn_t;
typedef struct soft_peer       soft_peer_t;

/* A peer device whose registration table we mapped (shared by its conns) */
struct soft_peer {
    soft_list_t        link;
    soft_dev_addr_t    addr;
    soft_shm_t         shm;
    soft_dev_seg_t     *seg;
    unsigned           refcount;
};

/* A registration, local side: one per slot of the table, kept in an array
 * so that registering allocates nothing */
typedef struct soft_mr {
    tm_dev_mr_t        super;
    uint32_t           slot;
    uint16_t           next_gen;     /* generation of the slot's next use */
} soft_mr_t;

struct soft_dev {
    tm_dev_t           super;
    soft_dev_addr_t    addr;
    tm_dev_caps_t      caps;
    uint32_t           srq_depth;
    uint32_t           ring_size;
    soft_shm_t         shm;
    soft_dev_seg_t     *seg;
    /* registration table, local side: the registrations by slot, a FIFO
     * of freed slots and the first never-used slot */
    soft_mr_t          *mrs;
    uint32_t           *mr_free;
    uint32_t           mr_free_head, mr_free_count;
    uint32_t           mr_fresh;
    soft_list_t        peers;
    soft_list_t        cqs;
    soft_list_t        conns;
    uint32_t           next_conn_seq;
    uint32_t           next_srq_seq;
    /* steering (soft_dev_test.h) */
    tm_soft_mode_t     mode;
    tm_soft_order_t    order;
    uint64_t           rng;
};

struct soft_cq {
    tm_dev_cq_t        super;
    soft_list_t        link;         /* in dev->cqs */
    tm_dev_wc_t        *wc;
    uint32_t           depth;        /* power of two */
    uint32_t           head, tail;   /* tail - head = queued completions */
    soft_list_t        srqs;         /* TM-SRQs whose completions come here */
    soft_list_t        send_conns;   /* conns whose send completions come here */
};

/* Matching list entry (indexed by the low bits of its handle) */
typedef struct soft_tag {
    tm_matcher_entry_t entry;        /* in srq->listed; entry.seq is the
                                        order of ADD processing */
    soft_list_t        link;         /* in srq->tag_free */
    uint64_t           tag, mask;
    uint64_t           recv_wr_id;
    uint64_t           addr;
    uint32_t           length;
    uint32_t           lkey;
    uint32_t           gen;          /* handle generation */
    uint8_t            state;        /* SOFT_TAG_* */
} soft_tag_t;

enum {
    SOFT_TAG_FREE,
    SOFT_TAG_POSTED,                 /* ADD posted, not yet processed */
    SOFT_TAG_LISTED,                 /* in the matching list */
    SOFT_TAG_DEAD                    /* consumed/deleted, waiting for its ops */
};

/* A posted list operation */
typedef struct soft_op {
    uint64_t           wr_id;
    uint32_t           index;        /* tag index (ADD/DEL) */
    uint32_t           gen;          /* tag generation the handle named */
    uint32_t           unexpected_cnt;
    uint8_t            opcode;       /* IBV_WR_TAG_* */
    uint8_t            flags;        /* IBV_OPS_* */
} soft_op_t;

/* Untagged SRQ buffer */
typedef struct soft_rbuf {
    uint64_t           wr_id;
    uint64_t           addr;
    uint32_t           length;
    uint32_t           lkey;
} soft_rbuf_t;

/* The second half of a matched message: DATA_VALID (and FIN for rndv) */
typedef struct soft_xfer {
    soft_conn_t        *conn;        /* where it came from */
    uint64_t           recv_wr_id;
    uint64_t           tag;
    uint32_t           app_ctx;
    uint32_t           byte_len;     /* eager: already placed */
    unsigned           imm_flag;     /* IBV_WC_WITH_IMM or 0 */
    uint32_t           imm_data;
    bool               rndv;
    uint64_t           local_addr;
    uint32_t           lkey;
    uint64_t           remote_va;
    uint32_t           rkey;
    uint32_t           rndv_len;
    uint8_t            fin[sizeof(struct ibv_tmh) + sizeof(struct ibv_rvh)];
} soft_xfer_t;

struct soft_srq {
    tm_dev_srq_t       super;
    soft_list_t        link;         /* in cq->srqs */
    soft_cq_t          *cq;
    /* accept queue for connect_to_srq */
    uint32_t           seq;
    soft_shm_t         shm;
    soft_srq_seg_t     *seg;
    uint32_t           accepted;     /* requests taken from seg */
    soft_list_t        conns;        /* conns whose receives come here */
    soft_list_t        *rr_next;     /* round-robin position in conns */
    /* untagged buffers: FIFO */
    soft_rbuf_t        *rbufs;
    uint32_t           rbuf_mask, rbuf_head, rbuf_tail;
    /* matching list */
    soft_tag_t         *tags;
    uint32_t           max_tags;
    uint32_t           tags_used;    /* POSTED + LISTED (what the cap counts) */
    tm_matcher_t       listed;       /* LISTED entries: matched like the
                                        NIC, first added wins, in a time
                                        that does not grow with the list */
    soft_list_t        tag_free;     /* FIFO, so handles are reused late */
    uint32_t           *tag_refs;    /* pending ops naming each tag */
    uint64_t           next_add_seq; /* the sequence counter of listed */
    /* list operations: FIFO of max_ops */
    soft_op_t          *ops;
    uint32_t           max_ops, op_head, op_tail;
    /* phase */
    uint32_t           hw_unexp;
    bool               in_phase;
    uint64_t           match_barrier; /* entries with seq >= this wait */
    /* pending DATA_VALID / rndv reads, FIFO of max_tags */
    soft_xfer_t        *xfers;
    uint32_t           xfer_mask, xfer_head, xfer_tail;
    /* steering */
    bool               hold_ops;
};

/* A send work request, kept until it completes (in order) */
typedef struct soft_wqe {
    uint64_t           wr_id;
    uint64_t           ring_end;     /* SEND: done when peer head passes it */
    uint8_t            opcode;       /* IBV_WR_* */
    uint8_t            signaled;
    uint8_t            state;        /* SOFT_WQE_* */
    uint8_t            status;       /* completion status when DONE */
    uint32_t           byte_len;
    uint32_t           imm_data;     /* SEND_WITH_IMM, big endian */
    /* what is needed to push it later (ring full, or earlier ones waiting) */
    uint32_t           num_sge;
    struct ibv_sge     sge[SOFT_MAX_SGE];
    uint64_t           remote_addr;
    uint32_t           rkey;
    uint32_t           inline_len;
    uint8_t            inline_data[SOFT_MAX_INLINE];
} soft_wqe_t;

enum {
    SOFT_WQE_QUEUED,                 /* not yet on the wire */
    SOFT_WQE_SENT,                   /* in the peer's ring */
    SOFT_WQE_DONE                    /* completion ready */
};

enum {
    SOFT_CONN_INIT,
    SOFT_CONN_CONNECTED,
    SOFT_CONN_ERROR
};

/* Device-generated FIN waiting for room in the outbound ring */
typedef struct soft_fin {
    uint8_t            data[sizeof(struct ibv_tmh) + sizeof(struct ibv_rvh)];
} soft_fin_t;

struct soft_conn {
    tm_dev_conn_t      super;
    soft_list_t        dev_link;     /* in dev->conns */
    soft_list_t        srq_link;     /* in srq->conns */
    soft_list_t        cq_link;      /* in send_cq->send_conns */
    soft_srq_t         *srq;
    soft_cq_t          *send_cq;
    uint32_t           qp_num;
    uint32_t           seq;
    int                state;
    bool               passive;      /* accepted by our SRQ, owned by it */
    /* inbound: our segment, consumed by our SRQ */
    soft_shm_t         in_shm;
    soft_ring_ctl_t    *in;
    uint32_t           in_mask;
    uint64_t           in_head;      /* local copy of in->head */
    /* outbound: the peer's inbound segment, we produce */
    soft_shm_t         out_shm;
    soft_ring_ctl_t    *out;
    uint32_t           out_mask;
    uint64_t           out_tail;     /* local copy of out->tail */
    uint64_t           out_head_cache;
    uint32_t           head_polls;
    soft_peer_t        *peer;        /* peer device's registration table */
    soft_proc_id_t     peer_proc;
    uint64_t           next_liveness_ns;
    uint32_t           liveness_polls;
    /* send queue: FIFO of max_send_wr */
    soft_wqe_t         *sq;
    uint32_t           sq_mask, sq_size;
    uint32_t           sq_head;      /* oldest not yet completed */
    uint32_t           sq_sent;      /* oldest not yet on the wire */
    uint32_t           sq_tail;      /* next free */
    /* FINs the device could not put on the wire yet */
    soft_fin_t         *fins;
    uint32_t           fin_count, fin_cap;
};


/* ---- Helpers ---- */

/* Everything below is internal to the library: calls between the sources
 * need no PLT/GOT indirection (the hot path crosses files) */
#pragma GCC visibility push(hidden)

#define soft_container_of(ptr, type, member) \
    ((type *)((char *)(ptr) - offsetof(type, member)))

static inline void soft_list_init(soft_list_t *h) { h->prev = h->next = h; }
static inline bool soft_list_empty(const soft_list_t *h) { return h->next == h; }
static inline void soft_list_add_tail(soft_list_t *h, soft_list_t *e)
{
    e->prev = h->prev; e->next = h;
    h->prev->next = e; h->prev = e;
}
static inline void soft_list_del(soft_list_t *e)
{
    e->prev->next = e->next; e->next->prev = e->prev;
    e->prev = e->next = e;
}

static inline soft_dev_t *soft_dev(tm_dev_t *dev)
{
    return soft_container_of(dev, soft_dev_t, super);
}

static inline uint32_t soft_roundup_pow2(uint32_t v)
{
    uint32_t p = 1;
    while (p < v) {
        p <<= 1;
    }
    return p;
}

static inline bool soft_cq_has_room(const soft_cq_t *cq, unsigned n)
{
    return cq->depth - (cq->tail - cq->head) >= n;
}

static inline tm_dev_wc_t *soft_cq_push(soft_cq_t *cq)
{
    tm_dev_wc_t *wc = &cq->wc[cq->tail++ & (cq->depth - 1)];
    wc->wc_flags   = 0;
    wc->imm_data   = 0;
    wc->vendor_err = 0;
    wc->byte_len   = 0;
    wc->tm_info.tag  = 0;
    wc->tm_info.priv = 0;
    return wc;
}

uint64_t soft_now_ns(void);

/* soft_dev.c */
bool soft_is_reachable_addr(soft_dev_t *dev, const soft_dev_addr_t *peer);
bool soft_dev_addr_unpack(const void *buf, soft_dev_addr_t *addr);

/* soft_wire.c */
int  soft_proc_self(soft_proc_id_t *id);
int  soft_proc_start_time(pid_t pid, uint64_t *start_time);
bool soft_proc_alive(const soft_proc_id_t *id);
uint32_t soft_host_id(void);
void soft_seg_name(char *buf, size_t len, const soft_proc_id_t *owner,
                   uint32_t dev_seq, char kind, uint32_t seq);
int  soft_shm_create(soft_shm_t *shm, const char *name, size_t size);
int  soft_shm_attach(soft_shm_t *shm, const char *name);
bool soft_shm_is_ours(const soft_shm_t *shm);
void soft_shm_destroy(soft_shm_t *shm);
void soft_shm_detach(soft_shm_t *shm);

/* False in a forked child holding a copy of its parent's device: it must
 * not touch the shared state the parent's peers see */
static inline bool soft_dev_is_ours(soft_dev_t *dev)
{
    return soft_shm_is_ours(&dev->shm);
}

void soft_seg_hdr_init(soft_seg_hdr_t *hdr, const soft_proc_id_t *owner,
                       uint32_t kind);
void soft_reclaim_leftovers(void);
size_t soft_ring_seg_size(uint32_t ring_size);

/* soft_mr.c */
int  soft_mr_table_init(soft_dev_t *dev);
void soft_mr_table_cleanup(soft_dev_t *dev);
int  soft_reg_mr(tm_dev_t *dev, void *addr, size_t length, int access,
                 tm_dev_mr_t **mr_p);
int  soft_dereg_mr(tm_dev_mr_t *mr);
bool soft_key_check(const soft_dev_seg_t *seg, uint32_t key, uint64_t addr,
                    uint64_t length, uint32_t access);
int  soft_rdma_copy(pid_t peer, bool write, void *local, uint64_t remote,
                    size_t length);
int  soft_peer_get(soft_dev_t *dev, const soft_dev_addr_t *addr,
                   soft_peer_t **peer_p);
void soft_peer_put(soft_dev_t *dev, soft_peer_t *peer);

/* soft_conn.c */
int  soft_conn_accept(soft_srq_t *srq, const soft_accept_slot_t *req);
void soft_srq_addr(tm_dev_srq_t *srq, void *addr);
int  soft_connect_to_srq(tm_dev_conn_t *conn, const void *dev_addr,
                         const void *srq_addr);
tm_dev_conn_t *soft_srq_conn(tm_dev_srq_t *srq, uint32_t qp_num);
int  soft_create_conn(tm_dev_t *dev, tm_dev_srq_t *srq, tm_dev_cq_t *send_cq,
                      tm_dev_conn_t **conn_p);
void soft_destroy_conn(tm_dev_conn_t *conn);
void soft_conn_addr(tm_dev_conn_t *conn, void *addr);
int  soft_connect(tm_dev_conn_t *conn, const void *dev_addr,
                  const void *conn_addr);
uint32_t soft_conn_qp_num(tm_dev_conn_t *conn);
int  soft_post_send(tm_dev_conn_t *conn, struct ibv_send_wr *wr,
                    struct ibv_send_wr **bad_wr);
void soft_conn_progress_send(soft_conn_t *conn);
unsigned soft_conn_reap(soft_conn_t *conn, soft_cq_t *cq);
int  soft_conn_send_fin(soft_conn_t *conn, const void *fin, size_t len);
void soft_conn_set_error(soft_conn_t *conn);
bool soft_conn_peer_alive(soft_conn_t *conn);

/* ring consumer (the TM-SRQ of the connection's device) */

/* The record at the consumer's position, if published: the one cache line
 * the consumer needs to see a small message (no producer counter to read) */
static inline soft_rec_t *soft_ring_head_rec(soft_conn_t *conn)
{
    return soft_ring_rec(conn->in, conn->in_mask, conn->in_head);
}

static inline void soft_ring_advance(soft_conn_t *conn, uint32_t len)
{
    conn->in_head += soft_rec_size(len);
    /* release: our reads of the record come before the producer reuses it */
    atomic_store_explicit(&conn->in->head, conn->in_head, memory_order_release);
}

bool soft_ring_skip_pad(soft_conn_t *conn, soft_rec_t **rec_p);

/* The oldest message waiting on conn's inbound ring, if any */
static inline bool soft_ring_peek(soft_conn_t *conn, soft_rec_t **rec_p)
{
    soft_rec_t *rec = soft_ring_head_rec(conn);
    uint16_t type   = soft_rec_type(rec);

    if (soft_likely(type == SOFT_REC_MSG)) {
        *rec_p = rec;
        return true;
    }
    return (type != 0) && soft_ring_skip_pad(conn, rec_p);
}

static inline void soft_ring_release(soft_conn_t *conn, soft_rec_t *rec)
{
    soft_ring_advance(conn, rec->len);
}

/* soft_tm.c */
int  soft_create_srq(tm_dev_t *dev, tm_dev_cq_t *recv_cq, tm_dev_srq_t **srq_p);
void soft_destroy_srq(tm_dev_srq_t *srq);
int  soft_post_srq_ops(tm_dev_srq_t *srq, struct ibv_ops_wr *wr,
                       struct ibv_ops_wr **bad_wr);
int  soft_post_srq_recv(tm_dev_srq_t *srq, struct ibv_recv_wr *wr,
                        struct ibv_recv_wr **bad_wr);
int  soft_srq_step_op(soft_srq_t *srq);
int  soft_srq_step_arrival(soft_srq_t *srq, soft_conn_t *conn);
int  soft_srq_step_data(soft_srq_t *srq);
void soft_srq_progress(soft_srq_t *srq);
void soft_srq_accept(soft_srq_t *srq);
bool soft_srq_arrival_ready(soft_srq_t *srq, soft_conn_t *conn);
bool soft_srq_op_ready(const soft_srq_t *srq);
bool soft_srq_data_ready(const soft_srq_t *srq);
void soft_srq_forget_conn(soft_srq_t *srq, soft_conn_t *conn);

/* soft_test.c */
int  soft_srq_step_random(soft_srq_t *srq, uint64_t *seed);

#pragma GCC visibility pop

#endif
