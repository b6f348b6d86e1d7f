/*
 * Tag-matching device interface.
 *
 * What the rc_tm transport needs of a device with a tag-matching shared
 * receive queue (TM-SRQ).  Work requests and completions are rdma-core's own
 * structures (struct ibv_ops_wr, ibv_recv_wr, ibv_send_wr, ibv_tmh/ibv_rvh on
 * the wire, IBV_WC_TM_* opcodes and flags, struct ibv_wc_tm_info), so the
 * code that speaks tag matching is the same whichever backend is underneath;
 * only the entry points below differ.
 *
 * Backends: "verbs" (rdma-core, real TM-capable NICs) and "soft" (a software
 * TM-SRQ device over shared memory).  This layer knows nothing of UCT or UCP.
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
typedef struct tm_dev_mr       tm_dev_mr_t;
typedef struct tm_dev_cq       tm_dev_cq_t;
typedef struct tm_dev_srq      tm_dev_srq_t;
typedef struct tm_dev_conn     tm_dev_conn_t;
typedef struct tm_dev_ops      tm_dev_ops_t;


/* A device as listed by tm_dev_list() */
typedef struct tm_dev_info {
    char                name[TM_DEV_NAME_MAX];   /* "soft", "mlx5_0", ... */
    const tm_dev_ops_t  *ops;                    /* backend that drives it */
} tm_dev_info_t;


/*
 * Settings a backend may honour when a device is opened.  The soft device
 * honours all of them; the verbs backend clamps to what the NIC reports.
 * Zero means "backend default".
 */
typedef struct tm_dev_attr {
    uint32_t            max_num_tags;       /* matching list size */
    uint32_t            max_ops;            /* outstanding list operations */
    uint32_t            max_rndv_hdr_size;  /* TMH + RVH + user header */
    uint32_t            srq_depth;          /* untagged SRQ buffers */
    uint32_t            eager_packet_size;  /* longer matched eager: MATCH, then DATA_VALID */
    uint32_t            max_msg_size;       /* largest SEND */
    uint32_t            max_send_wr;        /* per connection */
} tm_dev_attr_t;


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
    /* connect_to_srq: a connection the remote software does not set up */
    TM_DEV_CAP_CONNECT_TO_SRQ = 1u << 0
};

/* Every packed device address starts with this byte, naming its backend, so
 * is_reachable can refuse another backend's address before reading on */
enum {
    TM_DEV_ADDR_SOFT  = 0x53,   /* 'S' */
    TM_DEV_ADDR_VERBS = 0x56    /* 'V' */
};


/* A registered memory region */
struct tm_dev_mr {
    tm_dev_t            *dev;
    void                *addr;
    size_t              length;
    uint32_t            lkey;
    uint32_t            rkey;
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
    uint32_t              qp_num;     /* connection the message came on / went out on */
    unsigned              wc_flags;   /* also IBV_WC_WITH_IMM */
    uint32_t              imm_data;   /* big-endian, as in struct ibv_wc */
    uint32_t              vendor_err;
    struct ibv_wc_tm_info tm_info;    /* {tag, priv = app_ctx} for IBV_WC_TM_RECV */
} tm_dev_wc_t;


/* Backend entry points; callers use the tm_dev_* wrappers below */
struct tm_dev_ops {
    const char *name;

    /* Append this backend's devices to info[*count..max); never fails hard:
     * a backend with no usable device adds nothing (and says why at debug). */
    void (*list)(tm_dev_info_t *info, unsigned max, unsigned *count);

    int  (*open)(const tm_dev_info_t *info, const tm_dev_attr_t *attr,
                 tm_dev_t **dev_p);
    void (*close)(tm_dev_t *dev);
    void (*query)(tm_dev_t *dev, tm_dev_caps_t *caps);
    void (*dev_addr)(tm_dev_t *dev, void *addr);
    int  (*is_reachable)(tm_dev_t *dev, const void *dev_addr);

    int  (*reg_mr)(tm_dev_t *dev, void *addr, size_t length, int access,
                   tm_dev_mr_t **mr_p);
    int  (*dereg_mr)(tm_dev_mr_t *mr);

    int  (*create_cq)(tm_dev_t *dev, unsigned depth, tm_dev_cq_t **cq_p);
    void (*destroy_cq)(tm_dev_cq_t *cq);
    int  (*poll_cq)(tm_dev_cq_t *cq, int max, tm_dev_wc_t *wc);

    /* TM-SRQ: receive and list-operation completions go to recv_cq */
    int  (*create_srq)(tm_dev_t *dev, tm_dev_cq_t *recv_cq, tm_dev_srq_t **srq_p);
    void (*destroy_srq)(tm_dev_srq_t *srq);
    int  (*post_srq_ops)(tm_dev_srq_t *srq, struct ibv_ops_wr *wr,
                         struct ibv_ops_wr **bad_wr);
    int  (*post_srq_recv)(tm_dev_srq_t *srq, struct ibv_recv_wr *wr,
                          struct ibv_recv_wr **bad_wr);

    /* RC connection whose receives go to srq and send completions to send_cq */
    int  (*create_conn)(tm_dev_t *dev, tm_dev_srq_t *srq, tm_dev_cq_t *send_cq,
                        tm_dev_conn_t **conn_p);
    void (*destroy_conn)(tm_dev_conn_t *conn);
    void (*conn_addr)(tm_dev_conn_t *conn, void *addr);
    int  (*connect)(tm_dev_conn_t *conn, const void *dev_addr,
                    const void *conn_addr);
    uint32_t (*conn_qp_num)(tm_dev_conn_t *conn);

    /*
     * Connection to a remote TM-SRQ that needs nothing of the remote
     * software (TM_DEV_CAP_CONNECT_TO_SRQ): the remote device accepts it by
     * itself.  Its passive half sends FIN for rendezvous the remote device
     * matched; remote software reaches it with srq_conn() (to read a
     * rendezvous it finishes itself, and send FIN), and its send completions
     * go to the remote SRQ's receive CQ.  Others return EOPNOTSUPP.
     */
    void (*srq_addr)(tm_dev_srq_t *srq, void *addr);
    int  (*connect_to_srq)(tm_dev_conn_t *conn, const void *dev_addr,
                           const void *srq_addr);
    tm_dev_conn_t *(*srq_conn)(tm_dev_srq_t *srq, uint32_t qp_num);
    /* IBV_WR_SEND (sg_list or IBV_SEND_INLINE), IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE */
    int  (*post_send)(tm_dev_conn_t *conn, struct ibv_send_wr *wr,
                      struct ibv_send_wr **bad_wr);
};


/* Every backend object starts with a pointer to its device; the device with its ops */
struct tm_dev {
    const tm_dev_ops_t  *ops;
    char                name[TM_DEV_NAME_MAX];
};

struct tm_dev_cq   { tm_dev_t *dev; };
struct tm_dev_srq  { tm_dev_t *dev; };
struct tm_dev_conn { tm_dev_t *dev; };


/*
 * Logging.  The device layer does not depend on UCX; the transport routes
 * these messages into UCX's logger with tm_dev_set_log_func().  Without a
 * logger, errors go to stderr and the rest is dropped.
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


/* Lists every device of every built backend: TM-capable NICs first, then
 * the software device.  Returns the number written to info (at most max). */
unsigned tm_dev_list(tm_dev_info_t *info, unsigned max);

/* Finds a device by name in tm_dev_list(); 0 or ENODEV */
int tm_dev_find(const char *name, tm_dev_info_t *info);

static inline int tm_dev_open(const tm_dev_info_t *info,
                              const tm_dev_attr_t *attr, tm_dev_t **dev_p)
{
    return info->ops->open(info, attr, dev_p);
}

static inline void tm_dev_close(tm_dev_t *dev)
{
    dev->ops->close(dev);
}

static inline void tm_dev_query(tm_dev_t *dev, tm_dev_caps_t *caps)
{
    dev->ops->query(dev, caps);
}

static inline void tm_dev_addr(tm_dev_t *dev, void *addr)
{
    dev->ops->dev_addr(dev, addr);
}

static inline int tm_dev_is_reachable(tm_dev_t *dev, const void *dev_addr)
{
    return dev->ops->is_reachable(dev, dev_addr);
}

static inline int tm_dev_reg_mr(tm_dev_t *dev, void *addr, size_t length,
                                int access, tm_dev_mr_t **mr_p)
{
    return dev->ops->reg_mr(dev, addr, length, access, mr_p);
}

static inline int tm_dev_dereg_mr(tm_dev_mr_t *mr)
{
    return mr->dev->ops->dereg_mr(mr);
}

static inline int tm_dev_create_cq(tm_dev_t *dev, unsigned depth,
                                   tm_dev_cq_t **cq_p)
{
    return dev->ops->create_cq(dev, depth, cq_p);
}

static inline void tm_dev_destroy_cq(tm_dev_cq_t *cq)
{
    cq->dev->ops->destroy_cq(cq);
}

static inline int tm_dev_poll_cq(tm_dev_cq_t *cq, int max, tm_dev_wc_t *wc)
{
    return cq->dev->ops->poll_cq(cq, max, wc);
}

static inline int tm_dev_create_srq(tm_dev_t *dev, tm_dev_cq_t *recv_cq,
                                    tm_dev_srq_t **srq_p)
{
    return dev->ops->create_srq(dev, recv_cq, srq_p);
}

static inline void tm_dev_destroy_srq(tm_dev_srq_t *srq)
{
    srq->dev->ops->destroy_srq(srq);
}

static inline int tm_dev_post_srq_ops(tm_dev_srq_t *srq, struct ibv_ops_wr *wr,
                                      struct ibv_ops_wr **bad_wr)
{
    return srq->dev->ops->post_srq_ops(srq, wr, bad_wr);
}

static inline int tm_dev_post_srq_recv(tm_dev_srq_t *srq,
                                       struct ibv_recv_wr *wr,
                                       struct ibv_recv_wr **bad_wr)
{
    return srq->dev->ops->post_srq_recv(srq, wr, bad_wr);
}

static inline int tm_dev_create_conn(tm_dev_t *dev, tm_dev_srq_t *srq,
                                     tm_dev_cq_t *send_cq,
                                     tm_dev_conn_t **conn_p)
{
    return dev->ops->create_conn(dev, srq, send_cq, conn_p);
}

static inline void tm_dev_destroy_conn(tm_dev_conn_t *conn)
{
    conn->dev->ops->destroy_conn(conn);
}

static inline void tm_dev_conn_addr(tm_dev_conn_t *conn, void *addr)
{
    conn->dev->ops->conn_addr(conn, addr);
}

static inline int tm_dev_connect(tm_dev_conn_t *conn, const void *dev_addr,
                                 const void *conn_addr)
{
    return conn->dev->ops->connect(conn, dev_addr, conn_addr);
}

static inline uint32_t tm_dev_conn_qp_num(tm_dev_conn_t *conn)
{
    return conn->dev->ops->conn_qp_num(conn);
}

static inline void tm_dev_srq_addr(tm_dev_srq_t *srq, void *addr)
{
    srq->dev->ops->srq_addr(srq, addr);
}

static inline int tm_dev_connect_to_srq(tm_dev_conn_t *conn,
                                        const void *dev_addr,
                                        const void *srq_addr)
{
    return conn->dev->ops->connect_to_srq(conn, dev_addr, srq_addr);
}

static inline tm_dev_conn_t *tm_dev_srq_conn(tm_dev_srq_t *srq,
                                             uint32_t qp_num)
{
    return srq->dev->ops->srq_conn(srq, qp_num);
}

static inline int tm_dev_post_send(tm_dev_conn_t *conn, struct ibv_send_wr *wr,
                                   struct ibv_send_wr **bad_wr)
{
    return conn->dev->ops->post_send(conn, wr, bad_wr);
}

/* Backends (each defined in its own directory) */
extern const tm_dev_ops_t tm_dev_soft_ops;
#ifdef HAVE_TM_DEV_VERBS
extern const tm_dev_ops_t tm_dev_verbs_ops;
#endif

#ifdef __cplusplus
}
#endif

#endif
