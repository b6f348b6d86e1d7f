/*
 * The software NIC: an RC NIC with tag-matching offload (TM-SRQ), and UD
 * (unreliable datagrams, with address handles), in software, for the
 * processes of one host.  Messages travel over rings in
 * shared memory; RDMA reads and writes are single copies between processes
 * (process_vm_readv/writev).  The device's work (tag matching, placement,
 * rendezvous reads, send completions) runs when its CQ is polled
 * (SOFTNIC_PROGRESS_INLINE, the default), or on the device's own engine
 * thread, as on a NIC (SOFTNIC_PROGRESS_THREAD, softnic_dv_set_attr).
 *
 * It is reached through rdma-core's own objects and API, as a NIC is:
 *  - the verbs that <infiniband/verbs.h> implements as inlines
 *    (ibv_post_send, ibv_post_recv, ibv_post_srq_recv, ibv_post_srq_ops,
 *    ibv_create_cq_ex, ibv_create_qp_ex and the extended QP's ibv_wr_*,
 *    ibv_create_srq_ex, ibv_query_device_ex, ibv_query_port,
 *    ibv_get_srq_num, ibv_start_poll / ibv_next_poll / ibv_end_poll and the
 *    CQ's ibv_wc_read_*) reach it unchanged through its objects: a
 *    struct verbs_context with abi_compat set, a struct ibv_cq_ex;
 *  - for each verb libibverbs exports (device list, open and close, PD, MR,
 *    QP create / modify / query / destroy, CQ create / resize / destroy,
 *    completion channels and their events, SRQ create (basic) /
 *    modify / query / destroy, device, port, GID
 *    and P_Key queries, address handles) there is a softnic_<verb> below
 *    with the same signature: the
 *    caller picks libibverbs' function or this one per device.
 * Nothing is interposed: libibverbs and its other users see nothing of it.
 *
 * Its addresses: port 1 is an InfiniBand port that requires a GRH
 * (IBV_QPF_GRH_REQUIRED), LID 1; its GID names the device (host, user), the
 * same for every context of the host's user, as a NIC port's GID and LID
 * are the port's.  QP and TM-SRQ numbers are the device's: unique among
 * all its contexts in all processes, so that (GID, QP number) names one
 * QP, whichever context reads the GID.  A QP connects with a GRH naming
 * the device, or without one to the port's LID.  Two software NICs reach
 * each other when their subnet prefixes (host and user) are equal.
 *
 * The environment variable SOFTNIC_LINK_LAYER, read when a device is
 * opened, makes port 1 an Ethernet (RoCE v2) port with "eth" ("ethernet",
 * "roce"; default "ib"): a TM-SRQ then cannot be created on it, and
 * ibv_create_srq_ex fails with EINVAL as on mlx5, whose TM-SRQ has an
 * internal command QP that the kernel refuses to connect without a GRH on
 * an Ethernet port.  Other objects work as on InfiniBand.
 *
 * SOFTNIC_PKEY_TABLE, also read at open, sets port 1's P_Key table
 * ("0x7fff,0xffff": keys in index order; default "0xffff"), whose
 * membership rules connected QPs obey (softnic_port.h).
 *
 * Extensions, for the software NIC only (as mlx5dv extends verbs for
 * mlx5): a QP connected to a remote TM-SRQ without the remote software,
 * and the settings of the device (softnic_dv_*).
 */
#ifndef SOFTNIC_H_
#define SOFTNIC_H_

#include <infiniband/verbs.h>
#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SOFTNIC_DEVICE_NAME    "soft"
/* Its dev_name: the node UCX looks for is /dev/infiniband/softnic0 */
#define SOFTNIC_DEVICE_DEV_NAME "softnic0"

/* Where the NIC's messages go: without a logger, errors go to stderr and
 * the rest is dropped */
typedef enum {
    SOFTNIC_LOG_ERROR,
    SOFTNIC_LOG_WARN,
    SOFTNIC_LOG_DEBUG
} softnic_log_level_t;

typedef void (*softnic_log_func_t)(softnic_log_level_t level, const char *fmt,
                                   va_list ap);
void softnic_set_log(softnic_log_func_t func);

/* What libibverbs exports, for the software NIC */
struct ibv_device **softnic_get_device_list(int *num_devices);
void softnic_free_device_list(struct ibv_device **list);
const char *softnic_get_device_name(struct ibv_device *device);
struct ibv_context *softnic_open_device(struct ibv_device *device);
int softnic_close_device(struct ibv_context *context);
int softnic_query_gid(struct ibv_context *context, uint8_t port_num,
                      int index, union ibv_gid *gid);
int softnic_query_gid_ex(struct ibv_context *context, uint32_t port_num,
                         uint32_t gid_index, struct ibv_gid_entry *entry,
                         uint32_t flags, size_t entry_size);
int softnic_query_pkey(struct ibv_context *context, uint8_t port_num,
                       int index, __be16 *pkey);
struct ibv_pd *softnic_alloc_pd(struct ibv_context *context);
int softnic_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *softnic_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
                              int access);
int softnic_dereg_mr(struct ibv_mr *mr);
struct ibv_qp *softnic_create_qp(struct ibv_pd *pd,
                                 struct ibv_qp_init_attr *attr);
int softnic_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
                      int attr_mask);
int softnic_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
                     int attr_mask, struct ibv_qp_init_attr *init_attr);
int softnic_destroy_qp(struct ibv_qp *qp);
/* ibv_qp_to_qp_ex: the QP's struct ibv_qp_ex when ibv_create_qp_ex made it
 * with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, else NULL (as libibverbs) */
struct ibv_qp_ex *softnic_qp_to_qp_ex(struct ibv_qp *qp);
int softnic_destroy_cq(struct ibv_cq *cq);
int softnic_destroy_srq(struct ibv_srq *srq);
/* Basic SRQs (IBV_SRQT_BASIC; ibv_create_srq_ex makes them too) */
struct ibv_srq *softnic_create_srq(struct ibv_pd *pd,
                                   struct ibv_srq_init_attr *attr);
int softnic_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr,
                       int attr_mask);
int softnic_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr);
/* ibv_get_async_event (never blocks: -1 with EAGAIN when none is pending)
 * and ibv_ack_async_event */
int softnic_get_async_event(struct ibv_context *context,
                            struct ibv_async_event *event);
void softnic_ack_async_event(struct ibv_async_event *event);
/* ibv_fork_init (0, or EINVAL once a PD was allocated in this process)
 * and ibv_is_fork_initialized (IBV_FORK_DISABLED or IBV_FORK_ENABLED) */
int softnic_fork_init(void);
enum ibv_fork_status softnic_is_fork_initialized(void);
/* Completion channels (softnic_channel.c): channel->fd is a pipe's read
 * end, readable while events wait (poll it, or set O_NONBLOCK: then
 * softnic_get_cq_event fails with EAGAIN); one event per armed CQ
 * (ibv_req_notify_cq) when a completion, or with solicited_only a
 * solicited or failed one, is added.  A CQ with a channel runs the
 * device's work on its engine thread (docs/soft-device-datapath.md).
 * softnic_destroy_cq waits until the events read were acknowledged, as
 * libibverbs' does. */
struct ibv_comp_channel *softnic_create_comp_channel(struct ibv_context *context);
int softnic_destroy_comp_channel(struct ibv_comp_channel *channel);
struct ibv_cq *softnic_create_cq(struct ibv_context *context, int cqe,
                                 void *cq_context,
                                 struct ibv_comp_channel *channel,
                                 int comp_vector);
int softnic_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
                         void **cq_context);
void softnic_ack_cq_events(struct ibv_cq *cq, unsigned int nevents);
int softnic_resize_cq(struct ibv_cq *cq, int cqe);
/* ibv_query_device, and ibv_query_port as libibverbs exports it (the
 * layout of struct _compat_ibv_port_attr: up to flags); the inline
 * ibv_query_port of <infiniband/verbs.h> needs neither */
int softnic_query_device(struct ibv_context *context,
                         struct ibv_device_attr *device_attr);
int softnic_query_port(struct ibv_context *context, uint8_t port_num,
                       struct ibv_port_attr *port_attr);
struct ibv_ah *softnic_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr);
int softnic_destroy_ah(struct ibv_ah *ah);
int softnic_init_ah_from_wc(struct ibv_context *context, uint8_t port_num,
                            struct ibv_wc *wc, struct ibv_grh *grh,
                            struct ibv_ah_attr *ah_attr);
struct ibv_ah *softnic_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
                                         struct ibv_grh *grh,
                                         uint8_t port_num);


/* ----- Extensions ----- */

/* 1 when context is a software NIC's */
int softnic_dv_is_softnic(struct ibv_context *context);

/* Where the device's work runs (softnic_dv_attr::progress) */
enum softnic_progress {
    SOFTNIC_PROGRESS_KEEP   = 0,  /* softnic_dv_set_attr: unchanged */
    SOFTNIC_PROGRESS_INLINE = 1,  /* inside the polls of its CQs (default) */
    SOFTNIC_PROGRESS_THREAD = 2   /* on its own engine thread, which sleeps
                                     on a doorbell when there is nothing to
                                     do: completions appear without a poll */
};

/* Settings of a device; 0 in softnic_dv_set_attr keeps the current value.
 * They apply to QPs and SRQs created afterwards; progress can change only
 * while the device has no CQ (EBUSY otherwise). */
struct softnic_dv_attr {
    uint32_t packet_size;        /* a matched eager message longer than this
                                    completes as MATCH, then DATA_VALID
                                    (a NIC's packet is its MTU); default 4k */
    uint32_t max_send_size;      /* largest SEND (its ring holds a few);
                                    RDMA reads and writes go up to 2 GiB */
    uint32_t max_rndv_hdr_size;  /* tm_caps.max_rndv_hdr_size; default 64,
                                    as mlx5 */
    uint32_t progress;           /* enum softnic_progress */
    uint32_t tm_max_sge;         /* tm_caps.max_sge: scatter entries of a
                                    tag-matching list entry, 1 or 2;
                                    default 1, as mlx5 */
    uint32_t hold_match;         /* enum softnic_hold_match: whether a
                                    failed DEL of an entry a single-packet
                                    message consumed may complete before
                                    that match; default off */
    uint32_t rndv_final;         /* enum softnic_rndv_final: the second
                                    completion of a two-completion software
                                    rendezvous; default CANCELED */
    uint32_t timeout;            /* SOFTNIC_DV_SET | the local ACK timeout
                                    (ibv_qp_attr::timeout, 0..31) of the
                                    QPs connected without RTS (to a remote
                                    SRQ, and those an SRQ accepts); default
                                    18, as UCX's RC */
    uint32_t retry_cnt;          /* SOFTNIC_DV_SET | their retry count,
                                    0..7; default 7 */
    uint32_t engine_aside;       /* enum softnic_engine_aside: whether the
                                    engine stands aside where it has no CPU
                                    of its own; default NEVER */
};

/*
 * softnic_dv_attr::engine_aside.  A NIC works beside the CPUs; the engine
 * only beside whatever else runs.  With AUTO it looks every 10 ms at the
 * CPUs the process may run on and at the threads that want them (and at
 * its own waits for a CPU), and where it has none of its own it stands
 * aside: the device then works in the polls of its CQs, as with
 * SOFTNIC_PROGRESS_INLINE, until it has one again.  For software whose
 * polls drive every CQ it waits on, as inline progress asks (a program
 * asleep on a completion channel is not: a device with a channel's CQ
 * keeps its engine).
 */
enum softnic_engine_aside {
    SOFTNIC_ENGINE_ASIDE_KEEP  = 0,  /* softnic_dv_set_attr: unchanged */
    SOFTNIC_ENGINE_ASIDE_NEVER = 1,  /* the engine always works (default) */
    SOFTNIC_ENGINE_ASIDE_AUTO  = 2   /* it stands aside without a CPU */
};

/* softnic_dv_attr::timeout and retry_cnt: a value (0 is one) */
#define SOFTNIC_DV_SET  (1u << 16)

/*
 * softnic_dv_attr::hold_match.  Nothing orders the completion of a failed
 * DEL (IBV_WC_TM_DEL, IBV_WC_TM_ERR: a message consumed the entry) against
 * the completion of that consumption on a NIC; the software NIC gives the
 * match first unless this is on.  While on, the single completion of a
 * matched eager message that fits a packet (MATCH | DATA_VALID) is held
 * back by the device: a DEL of that entry processed meanwhile completes
 * first, then the match.  Otherwise the held completion goes to the CQ
 * before any later completion there (matches keep their order with each
 * other and with unexpected messages), or when a poll would find the CQ
 * empty.
 */
enum softnic_hold_match {
    SOFTNIC_HOLD_MATCH_KEEP = 0,  /* softnic_dv_set_attr: unchanged */
    SOFTNIC_HOLD_MATCH_OFF  = 1,  /* the match first (default) */
    SOFTNIC_HOLD_MATCH_ON   = 2   /* a racing DEL first */
};

/*
 * softnic_dv_attr::rndv_final.  A software rendezvous (status
 * IBV_WC_TM_RNDV_INCOMPLETE) longer than a packet completes in two CQEs on
 * mlx5: CONSUMED_SW_RNDV (MATCH only), then a final one of either kind
 * (rdma-core providers/mlx5/cq.c, handle_tag_matching).
 */
enum softnic_rndv_final {
    SOFTNIC_RNDV_FINAL_KEEP     = 0, /* softnic_dv_set_attr: unchanged */
    SOFTNIC_RNDV_FINAL_EXPECTED = 1, /* EXPECTED (0x2): opcode
                                        IBV_WC_TM_RECV, DATA_VALID,
                                        IBV_WC_SUCCESS, the QP's number */
    SOFTNIC_RNDV_FINAL_CANCELED = 2  /* MSG_COMPLETION_CANCELED (0xC), a
                                        NO_PACKET CQE: opcode 0
                                        (IBV_WC_SEND), MATCH | DATA_VALID,
                                        IBV_WC_TM_RNDV_INCOMPLETE, QP
                                        number 0, length 0 (default) */
};

int softnic_dv_query(struct ibv_context *context,
                     struct softnic_dv_attr *attr);
int softnic_dv_set_attr(struct ibv_context *context,
                        const struct softnic_dv_attr *attr);

/*
 * Connects a pair of QPs in INIT to the TM-SRQ srq_num (ibv_get_srq_num) of
 * the software NIC with GID gid, which needs nothing of the remote
 * software: that NIC accepts the connection itself with a pair of QPs of
 * its own, owned by the SRQ.  qp sends, to the remote receive-only QP;
 * rx_qp (created without a send queue) receives what the remote sending QP
 * sends.  Both are in RTS when this returns 0; messages wait until the
 * remote NIC accepts.
 */
int softnic_dv_connect_qp_to_srq(struct ibv_qp *qp, struct ibv_qp *rx_qp,
                                 const union ibv_gid *gid, uint32_t srq_num);

/* The pair of QPs an SRQ accepted for a remote peer, found by either QP
 * number: 0, or ENOENT.  They belong to the SRQ (destroyed with it); the
 * sending one's completions go to the SRQ's CQ.  The remote software uses
 * it to read a rendezvous it finishes itself, and to send FIN. */
int softnic_dv_srq_conn(struct ibv_srq *srq, uint32_t qp_num,
                        struct ibv_qp **qp, struct ibv_qp **rx_qp);

#ifdef __cplusplus
}
#endif

#endif
