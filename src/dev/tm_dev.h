/*
 * Tag-matching device layer.
 *
 * What the rc_tm transport needs of a NIC with a tag-matching shared
 * receive queue (TM-SRQ), implemented by one backend (src/dev/verbs) that
 * speaks rdma-core's API only: the same functions drive a ConnectX NIC
 * through libibverbs and the software NIC (src/softnic) through the
 * rdma-core objects it presents.  Work requests and completions are
 * rdma-core's own structures (struct ibv_ops_wr, ibv_recv_wr, ibv_send_wr,
 * ibv_tmh/ibv_rvh on the wire, IBV_WC_TM_* opcodes and flags, struct
 * ibv_wc_tm_info).  This layer knows nothing of UCT or UCP.
 *
 * Conventions: functions returning int return 0 or a positive errno value
 * (as rdma-core's ibv_post_* do); poll returns a count or a negative errno.
 * Objects are owned by their creator and destroyed explicitly, children
 * before parents (conn/srq before cq, everything before the device).
 */
#ifndef RC_TM_DEV_TM_DEV_H_
#define RC_TM_DEV_TM_DEV_H_

#include <infiniband/verbs.h>
#include <infiniband/tm_types.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TM_DEV_NAME_MAX      32
#define TM_DEV_ADDR_MAX      64   /* largest packed device / connection address */

typedef struct tm_dev          tm_dev_t;
typedef struct tm_dev_cq       tm_dev_cq_t;
typedef struct tm_dev_srq      tm_dev_srq_t;
typedef struct tm_dev_conn     tm_dev_conn_t;
typedef struct tm_verbs_lib    tm_verbs_lib_t;

/* A registered memory region is rdma-core's own (lkey, rkey, addr, length):
 * nothing wraps it, so registering allocates nothing of ours */
typedef struct ibv_mr          tm_dev_mr_t;


/* A device as listed by tm_dev_list() */
typedef struct tm_dev_info {
    char                 name[TM_DEV_NAME_MAX];  /* "mlx5_0", "soft" */
    const tm_verbs_lib_t *lib;                   /* what opens it: libibverbs
                                                    or the software NIC */
    int                  soft;                   /* it is the software NIC */
} tm_dev_info_t;


/*
 * Settings asked of a device when it is opened; zero means "default".
 * Each is clamped to what the NIC reports.  eager_packet_size,
 * max_msg_size and the soft_* settings apply to the software NIC only (a
 * NIC's packet is its MTU, its largest message its port's, its list
 * entries' scatter entries its own: mlx5 takes 1; the order and form of
 * its completions are its own).
 */
/* Fewest untagged SRQ buffers tag matching works with: rdma-core's tests
 * post 33 to a mlx5 TM-SRQ, a hardware limitation */
#define TM_DEV_MIN_SRQ_DEPTH    33

typedef struct tm_dev_attr {
    uint32_t            max_num_tags;       /* matching list size */
    uint32_t            max_ops;            /* outstanding list operations */
    uint32_t            max_rndv_hdr_size;  /* TMH + RVH + user header */
    uint32_t            srq_depth;          /* untagged SRQ buffers, at least
                                               TM_DEV_MIN_SRQ_DEPTH */
    uint32_t            eager_packet_size;  /* longer matched eager: MATCH, then DATA_VALID */
    uint32_t            max_msg_size;       /* largest SEND */
    uint32_t            max_send_wr;        /* per connection */
    uint32_t            max_inline;         /* inline data asked of each send
                                               QP; 0: 64, UCX's TX_MIN_INLINE
                                               (the provider may grant more) */
    uint32_t            soft_progress;      /* TM_DEV_SOFT_PROGRESS_* */
    uint32_t            soft_engine_aside;  /* with an engine: it stands
                                               aside where it has no CPU
                                               of its own (softnic_dv_attr::
                                               engine_aside AUTO); 0: it
                                               always works */
    uint32_t            soft_tm_max_sge;    /* tm_caps.max_sge: 1 or 2 */
    uint32_t            soft_no_connect_to_srq; /* withhold the software
                                               NIC's connections to a remote
                                               SRQ: connect QP to QP only,
                                               as on mlx5 */
    uint32_t            soft_hold_match;    /* hold a single-packet
                                               match's completion, so that a
                                               DEL that lost its entry to it
                                               completes first (softnic_dv_
                                               attr::hold_match) */
    uint32_t            soft_rndv_final;    /* TM_DEV_SOFT_RNDV_FINAL_* */
    uint32_t            pkey;               /* 0: the port's first P_Key of
                                               full membership (UCX's
                                               UCX_IB_PKEY=auto); else
                                               TM_DEV_ATTR_SET | partition */
    uint32_t            sl;                 /* 0: SL 0 (UCX's SL=auto
                                               without adaptive routing);
                                               else TM_DEV_ATTR_SET | SL */
    uint32_t            timeout;            /* 0: 18 (UCX's RC TIMEOUT=1s);
                                               else TM_DEV_ATTR_SET | the
                                               QPs' local ACK timeout,
                                               4.096 us * 2^timeout (0:
                                               for ever) */
    uint32_t            retry_cnt;          /* 0: 7 (UCX's RC RETRY_COUNT);
                                               else TM_DEV_ATTR_SET |
                                               retries, 0..7 */
    double              soft_latency;       /* the software NIC's figures
                                               (tm_dev_perf_t): seconds */
    double              soft_bandwidth;     /* bytes per second, one
                                               CPU's copies */
} tm_dev_attr_t;

/* tm_dev_attr_t::pkey, sl, timeout and retry_cnt: a value the user set (0
 * is "auto") */
#define TM_DEV_ATTR_SET         (1u << 16)

/* tm_dev_attr_t::soft_progress: where the software NIC does its work (a
 * NIC has its own engine) */
enum {
    TM_DEV_SOFT_PROGRESS_INLINE,    /* in the polls of its CQs (default) */
    TM_DEV_SOFT_PROGRESS_THREAD     /* on its engine thread, as a NIC */
};

/* tm_dev_attr_t::soft_rndv_final: the second completion of a software
 * rendezvous that completes in two, in one of mlx5's two forms
 * (softnic_dv_attr::rndv_final) */
enum {
    TM_DEV_SOFT_RNDV_FINAL_CANCELED, /* MSG_COMPLETION_CANCELED (default) */
    TM_DEV_SOFT_RNDV_FINAL_EXPECTED  /* EXPECTED */
};

/*
 * Performance figures, for UCX's interface attributes and estimates.  A NIC
 * has them from its port's speed, width and MTU, as UCX's ib transports
 * derive them; the software NIC has the figures it was opened with
 * (measured, docs/performance.md).
 */
typedef struct tm_dev_perf {
    double              latency;    /* one way on the wire, seconds */
    double              bandwidth;  /* of the port, bytes per second */
    double              rdma_bandwidth; /* of an RDMA read or write: the
                                       port's on a NIC; the software NIC's
                                       long reads are copied by both sides'
                                       CPUs (softnic_rdma.c), twice its
                                       one-CPU rate */
    double              post;       /* CPU time of posting or completing one
                                       work request through the provider */
    double              doorbell;   /* telling the device of new work (a
                                       NIC's write over PCI) */
    double              wqe_fetch;  /* the device's read of a work request
                                       not given inline (a NIC's DMA) */
    double              rdma_copy;  /* CPU time of an RDMA read or write
                                       (the software NIC copies with
                                       process_vm_readv/writev); 0 on a NIC,
                                       whose DMA costs no CPU */
    int                 per_process; /* the bandwidth is each process's own
                                       (the software NIC copies on its own
                                       CPU); a NIC's port is shared */
} tm_dev_perf_t;


/* What an opened device can do (ibv_query_device_ex's tm_caps and limits) */
typedef struct tm_dev_caps {
    struct ibv_tm_caps  tm;                 /* max_rndv_hdr_size, max_num_tags,
                                               max_ops, max_sge, flags */
    uint32_t            max_srq_wr;
    uint32_t            max_send_wr;
    uint32_t            max_inline;         /* IBV_SEND_INLINE up to this */
    uint32_t            max_msg_size;       /* largest SEND */
    uint64_t            max_rdma_size;      /* largest RDMA READ/WRITE */
    uint32_t            eager_packet_size;
    uint32_t            max_send_sge;       /* gather entries of one send */
    unsigned            flags;              /* TM_DEV_CAP_* */
    size_t              dev_addr_len;       /* bytes of a packed device address */
    size_t              conn_addr_len;      /* bytes of a packed connection address */
    size_t              srq_addr_len;       /* bytes of a packed SRQ address */
} tm_dev_caps_t;

/* tm_dev_caps_t::flags */
enum {
    /* tm_dev_connect_to_srq(): a connection the remote software does not
     * set up (the software NIC's extension) */
    TM_DEV_CAP_CONNECT_TO_SRQ = 1u << 0
};


/* The device layer's objects: each wraps the rdma-core object it owns */
struct tm_dev {
    char                name[TM_DEV_NAME_MAX];
    int                 fatal;      /* IBV_EVENT_DEVICE_FATAL was read */
    uint8_t             port_num;   /* the active port it uses */
};

struct tm_dev_cq   { tm_dev_t *dev; struct ibv_cq_ex *cq;
                     int tm; /* an SRQ's: TM information to read */
                     int err; /* a failed ibv_next_poll, for the next poll */
                     int failed; /* IBV_EVENT_CQ_ERR was read for it */ };
struct tm_dev_srq  { tm_dev_t *dev; struct ibv_srq *srq; };
/* A connection is two RC QPs on the TM-SRQ, as UCX's rc_mlx5 makes them:
 * qp sends; rx_qp has no send queue, and the peer's sends go to it (the
 * kernel enables the NIC's rendezvous only on such a QP: the NIC reads and
 * sends FIN on it) */
struct tm_dev_conn { tm_dev_t *dev; struct ibv_qp *qp; struct ibv_qp *rx_qp;
                     unsigned last_wqe; /* TM_DEV_CONN_LAST_WQE_* seen */ };

enum {
    TM_DEV_CONN_LAST_WQE_TX   = 1,  /* qp reached its last WQE */
    TM_DEV_CONN_LAST_WQE_RX   = 2   /* rx_qp did (not waited for) */
};


/*
 * A work completion: struct ibv_wc's fields that TM uses, plus the TM info
 * that rdma-core's extended CQ reads with ibv_wc_read_tm_info().
 * wc_flags carries IBV_WC_TM_SYNC_REQ / IBV_WC_TM_MATCH / IBV_WC_TM_DATA_VALID.
 */
typedef struct tm_dev_wc {
    uint64_t              wr_id;
    enum ibv_wc_status    status;
    enum ibv_wc_opcode    opcode;
    uint32_t              byte_len;
    uint32_t              qp_num;     /* connection the message came on / went out
                                         on; 0 for list operations and for
                                         tag-matching completions without
                                         a packet (a MATCH-only TM_CONSUMED,
                                         MSG_COMPLETION_CANCELED read as
                                         IBV_WC_SEND): mlx5 need not fill it */
    unsigned              wc_flags;   /* also IBV_WC_WITH_IMM */
    uint32_t              imm_data;   /* big-endian, as in struct ibv_wc */
    uint32_t              vendor_err;
    struct ibv_wc_tm_info tm_info;    /* {tag, priv = app_ctx} for IBV_WC_TM_RECV */
} tm_dev_wc_t;


/*
 * Logging.  The device layer does not depend on UCX; the transport routes
 * these messages (and the software NIC's) into UCX's logger with
 * tm_dev_set_log_func().  Without a logger, errors go to stderr and the
 * rest is dropped.
 */
typedef enum {
    TM_DEV_LOG_ERROR,
    TM_DEV_LOG_WARN,
    TM_DEV_LOG_DEBUG
} tm_dev_log_level_t;

typedef void (*tm_dev_log_func_t)(tm_dev_log_level_t level, const char *file,
                                  int line, const char *fmt, va_list ap);

void tm_dev_set_log_func(tm_dev_log_func_t func);
void tm_dev_log(tm_dev_log_level_t level, const char *file, int line,
                const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define tm_dev_error(...) tm_dev_log(TM_DEV_LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)
#define tm_dev_warn(...)  tm_dev_log(TM_DEV_LOG_WARN,  __FILE__, __LINE__, __VA_ARGS__)
#define tm_dev_debug(...) tm_dev_log(TM_DEV_LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)


/* ---- Devices ---- */

/* Every usable device: TM-capable NICs first, then the software NIC.
 * Returns the number written to info (at most max). */
unsigned tm_dev_list(tm_dev_info_t *info, unsigned max);

/* Finds a device by name in tm_dev_list(); 0 or ENODEV */
int tm_dev_find(const char *name, tm_dev_info_t *info);

/* Makes memory registration fork-safe, on NICs (ibv_fork_init, unless the
 * kernel makes it unneeded) and on the software NIC.  Effective only
 * before any device is brought up in the process: afterwards EINVAL, as
 * rdma-core answers.  0, or the first error. */
int tm_dev_fork_init(void);

int  tm_dev_open(const tm_dev_info_t *info, const tm_dev_attr_t *attr,
                 tm_dev_t **dev_p);
void tm_dev_close(tm_dev_t *dev);
void tm_dev_query(tm_dev_t *dev, tm_dev_caps_t *caps);
/* Its figures now (a NIC's port may have changed speed) */
void tm_dev_perf(tm_dev_t *dev, tm_dev_perf_t *perf);
/* What drives the device under the verbs API: "software NIC", "mlx5" ... */
const char *tm_dev_driver(tm_dev_t *dev);
void tm_dev_addr(tm_dev_t *dev, void *addr);
int  tm_dev_is_reachable(tm_dev_t *dev, const void *dev_addr);
/* The address names this device's own port (UCX's reachability scope
 * "device") */
int  tm_dev_addr_is_local(tm_dev_t *dev, const void *dev_addr);

int  tm_dev_reg_mr(tm_dev_t *dev, void *addr, size_t length, int access,
                   tm_dev_mr_t **mr_p);
int  tm_dev_dereg_mr(tm_dev_t *dev, tm_dev_mr_t *mr);


/* ---- Queues ---- */

int  tm_dev_create_cq(tm_dev_t *dev, unsigned depth, tm_dev_cq_t **cq_p);
void tm_dev_destroy_cq(tm_dev_cq_t *cq);
/* Up to max completions into wc: how many, 0 when none, or a negative
 * errno, never a count: -EBADMSG when the provider consumed a completion it
 * could not parse (mlx5's CQ_POLL_ERR: it is lost, later polls go on), any
 * other when the CQ failed.  An error after some completions were read is
 * returned by the next call. */
int  tm_dev_poll_cq(tm_dev_cq_t *cq, int max, tm_dev_wc_t *wc);

/* TM-SRQ: receive and list-operation completions go to recv_cq */
int  tm_dev_create_srq(tm_dev_t *dev, tm_dev_cq_t *recv_cq,
                       tm_dev_srq_t **srq_p);
void tm_dev_destroy_srq(tm_dev_srq_t *srq);

static inline int tm_dev_post_srq_ops(tm_dev_srq_t *srq, struct ibv_ops_wr *wr,
                                      struct ibv_ops_wr **bad_wr)
{
    return ibv_post_srq_ops(srq->srq, wr, bad_wr);
}

static inline int tm_dev_post_srq_recv(tm_dev_srq_t *srq,
                                       struct ibv_recv_wr *wr,
                                       struct ibv_recv_wr **bad_wr)
{
    return ibv_post_srq_recv(srq->srq, wr, bad_wr);
}


/* ---- Asynchronous events ---- */

/* Reads and acknowledges the device's pending asynchronous events, without
 * waiting; marks the connections whose QPs reached their last WQE
 * (tm_dev_conn_send_drained), the CQs in error (tm_dev_cq_failed) and a device
 * that failed (tm_dev_failed), and reads a port that changed again.
 * Returns how many it read.  Every event read is acknowledged at once:
 * rdma-core's destroy of a QP waits forever for the events read for it
 * but not acknowledged.  Any thread's read marks them for all. */
unsigned tm_dev_progress_events(tm_dev_t *dev);

/* A CQ in error: on mlx5 an overrun CQ (or one the NIC failed) delivers
 * nothing more, and its polls do not say so: IBV_EVENT_CQ_ERR, as
 * tm_dev_progress_events() read it, is the only sign.  Completions are
 * lost for every QP that completes there. */
static inline int tm_dev_cq_failed(tm_dev_cq_t *cq)
{
    return __atomic_load_n(&cq->failed, __ATOMIC_ACQUIRE);
}

/* IBV_EVENT_DEVICE_FATAL was read: nothing of the device works any more */
static inline int tm_dev_failed(tm_dev_t *dev)
{
    return __atomic_load_n(&dev->fatal, __ATOMIC_ACQUIRE);
}


/* ---- Connections ---- */

/* RC connection whose receives go to srq and send completions to send_cq */
int  tm_dev_create_conn(tm_dev_t *dev, tm_dev_srq_t *srq, tm_dev_cq_t *send_cq,
                        tm_dev_conn_t **conn_p);
void tm_dev_destroy_conn(tm_dev_conn_t *conn);
/* The sending QP to the error state: it sends nothing more, and flushes
 * what was posted; its completions stay on its CQ, and more may come after
 * set_error: all are to be polled before tm_dev_destroy_conn, which drops
 * them (as rdma-core's mlx5 does).  The receive-only QP stays as it is, as
 * UCX leaves its TM QP: reads the device does there go on to their final
 * completions, which a QP in error would never give (its flushes go to a
 * CQ never polled); it is destroyed as it is */
int  tm_dev_conn_set_error(tm_dev_conn_t *conn);
/* Whether the receive-only QP is in the error state (ibv_query_qp): how a
 * failed rendezvous read of the device, or a FIN that failed, is learned.
 * Its requester CQEs go to a CQ never polled, as mlx5's poll cannot parse
 * them for a QP without a send queue.  A syscall: not for the hot path */
int  tm_dev_conn_rx_failed(tm_dev_conn_t *conn);
/* Whether the sending QP of a connection in the error state reached its
 * last WQE (IBV_EVENT_QP_LAST_WQE_REACHED, as tm_dev_progress_events() read
 * it): every completion of its own is on the CQs by then, and only a poll
 * that finds them empty after that has them all.  UCX waits for this event
 * on its send QP only.  The receive-only QP is not waited for: no source
 * says that firmware raises the event for a QP without a send queue, nor
 * for a QP that never left INIT. */
static inline int tm_dev_conn_send_drained(tm_dev_conn_t *conn)
{
    return __atomic_load_n(&conn->last_wqe, __ATOMIC_ACQUIRE) &
           TM_DEV_CONN_LAST_WQE_TX;
}
void tm_dev_conn_addr(tm_dev_conn_t *conn, void *addr);
int  tm_dev_connect(tm_dev_conn_t *conn, const void *dev_addr,
                    const void *conn_addr);
/* Nonzero when we connected conn to the peer at dev_addr: to its
 * connection at conn_addr, or to its SRQ at srq_addr, or (both NULL) to
 * anything of that peer's */
int  tm_dev_conn_is_connected(tm_dev_conn_t *conn, const void *dev_addr,
                              const void *conn_addr, const void *srq_addr);

/* The QP we send on, and the one we receive on */
static inline uint32_t tm_dev_conn_qp_num(tm_dev_conn_t *conn)
{
    return conn->qp->qp_num;
}

static inline uint32_t tm_dev_conn_rx_qp_num(tm_dev_conn_t *conn)
{
    return conn->rx_qp->qp_num;
}

/* IBV_WR_SEND (sg_list or IBV_SEND_INLINE), IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE */
static inline int tm_dev_post_send(tm_dev_conn_t *conn, struct ibv_send_wr *wr,
                                   struct ibv_send_wr **bad_wr)
{
    return ibv_post_send(conn->qp, wr, bad_wr);
}

/*
 * Connection to a remote TM-SRQ that needs nothing of the remote software
 * (TM_DEV_CAP_CONNECT_TO_SRQ): the remote NIC accepts it by itself.  Its
 * passive half sends FIN for rendezvous the remote NIC matched; remote
 * software reaches it with tm_dev_srq_conn() (to read a rendezvous it
 * finishes itself, and send FIN), and its send completions go to the remote
 * SRQ's receive CQ.  Without the capability these return EOPNOTSUPP / NULL.
 */
void tm_dev_srq_addr(tm_dev_srq_t *srq, void *addr);
int  tm_dev_connect_to_srq(tm_dev_conn_t *conn, const void *dev_addr,
                           const void *srq_addr);
tm_dev_conn_t *tm_dev_srq_conn(tm_dev_srq_t *srq, uint32_t qp_num);


/* ---- The rdma-core objects underneath (for tests that steer the
 * software NIC through softnic_test.h) ---- */

struct ibv_context *tm_dev_ibv_context(tm_dev_t *dev);

static inline struct ibv_srq *tm_dev_ibv_srq(tm_dev_srq_t *srq)
{
    return srq->srq;
}

static inline struct ibv_qp *tm_dev_ibv_qp(tm_dev_conn_t *conn)
{
    return conn->qp;
}

static inline struct ibv_qp *tm_dev_ibv_rx_qp(tm_dev_conn_t *conn)
{
    return conn->rx_qp;
}

#ifdef __cplusplus
}
#endif

#endif
