/*
 * rdma-core verbs backend of the tag-matching device: internal definitions.
 *
 * Objects embed the generic tm_dev_* header first, so that the interface's
 * pointers convert to ours by a cast.  Each object owns the verbs resource it
 * wraps and nothing else: a connection does not own its SRQ or CQ, an SRQ
 * does not own its CQ.
 *
 * The helpers declared below are pure (no verbs calls) and exported only so
 * that the unit test can check them without a NIC.
 */
#ifndef RC_TM_DEV_VERBS_VERBS_DEV_H_
#define RC_TM_DEV_VERBS_VERBS_DEV_H_

#include "dev/tm_dev.h"

#include <infiniband/verbs.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Defaults used where tm_dev_attr_t says 0 (then clamped to the NIC) */
#define TM_VERBS_DEF_NUM_TAGS        1024   /* UCX's TM_LIST_SIZE */
#define TM_VERBS_DEF_MAX_OPS         64
#define TM_VERBS_DEF_SRQ_DEPTH       4096   /* UCX's RX_QUEUE_LEN */
#define TM_VERBS_DEF_SEND_WR         1024
#define TM_VERBS_MAX_INLINE          64     /* asked of every QP */
#define TM_VERBS_MAX_SEND_SGE        2      /* header + payload */
#define TM_VERBS_MAX_RD_ATOMIC       16     /* rendezvous reads in flight */

/* RC transport parameters (UCX rc defaults) */
#define TM_VERBS_PORT_DEFAULT        1
#define TM_VERBS_TIMEOUT             18     /* 4.096us * 2^18 ~ 1.07 s */
#define TM_VERBS_RETRY_CNT           7
#define TM_VERBS_RNR_RETRY           7      /* infinite: RNR is flow control */
#define TM_VERBS_MIN_RNR_TIMER       23     /* 30.72 ms */
#define TM_VERBS_HOP_LIMIT           64

/* Packed addresses are tagged so that foreign ones are refused */
#define TM_VERBS_DEV_ADDR_MAGIC      TM_DEV_ADDR_VERBS  /* first byte: the backend */
#define TM_VERBS_CONN_ADDR_MAGIC     0xc7


/* Settings in effect on an opened device: the request clamped to the NIC */
typedef struct tm_verbs_limits {
    uint32_t            max_num_tags;
    uint32_t            max_ops;
    uint32_t            max_rndv_hdr_size;
    uint32_t            srq_depth;
    uint32_t            max_send_wr;
    uint32_t            max_send_sge;
    uint32_t            max_msg_size;
    uint64_t            max_rdma_size;
    uint32_t            eager_packet_size;  /* path MTU in bytes */
    uint8_t             max_rd_atomic;      /* as initiator */
    uint8_t             max_dest_rd_atomic; /* as responder */
} tm_verbs_limits_t;


/* Device address: what is_reachable needs.  Byte arrays, no padding. */
typedef struct tm_verbs_dev_addr {
    uint8_t             magic;
    uint8_t             link_layer;         /* IBV_LINK_LAYER_* */
    uint8_t             lid[2];             /* big endian */
    uint8_t             gid[16];
} tm_verbs_dev_addr_t;

/* Connection address: everything the peer needs to reach our QP */
typedef struct tm_verbs_conn_addr {
    uint8_t             magic;
    uint8_t             mtu;                /* enum ibv_mtu of our port */
    uint8_t             lid[2];             /* big endian */
    uint8_t             qpn[4];             /* big endian, 24 bits used */
    uint8_t             psn[4];             /* big endian, 24 bits used */
    uint8_t             gid[16];
} tm_verbs_conn_addr_t;

/* Unpacked (host order) form of both */
typedef struct tm_verbs_peer {
    uint8_t             link_layer;
    enum ibv_mtu        mtu;
    uint16_t            lid;
    uint32_t            qpn;
    uint32_t            psn;
    union ibv_gid       gid;
} tm_verbs_peer_t;


typedef struct tm_verbs_dev {
    tm_dev_t                    super;
    struct ibv_context          *ctx;
    struct ibv_pd               *pd;
    struct ibv_device_attr_ex   dev_attr;
    struct ibv_port_attr        port_attr;
    uint8_t                     port_num;
    uint8_t                     gid_index;
    union ibv_gid               gid;
    tm_verbs_limits_t           lim;
} tm_verbs_dev_t;

typedef struct tm_verbs_mr {
    tm_dev_mr_t                 super;
    struct ibv_mr               *mr;
} tm_verbs_mr_t;

typedef struct tm_verbs_cq {
    tm_dev_cq_t                 super;
    struct ibv_cq_ex            *cq;
} tm_verbs_cq_t;

typedef struct tm_verbs_srq {
    tm_dev_srq_t                super;
    struct ibv_srq              *srq;
    tm_verbs_cq_t               *cq;        /* receive CQ, not owned */
} tm_verbs_srq_t;

typedef struct tm_verbs_conn {
    tm_dev_conn_t               super;
    struct ibv_qp               *qp;
    uint32_t                    psn;
} tm_verbs_conn_t;


static inline tm_verbs_dev_t *tm_verbs_dev(tm_dev_t *dev)
{
    return (tm_verbs_dev_t*)dev;
}


/* Entry points, by file */

/* verbs_dev.c */
void tm_verbs_list(tm_dev_info_t *info, unsigned max, unsigned *count);
int  tm_verbs_open(const tm_dev_info_t *info, const tm_dev_attr_t *attr,
                   tm_dev_t **dev_p);
void tm_verbs_close(tm_dev_t *dev);
void tm_verbs_query(tm_dev_t *dev, tm_dev_caps_t *caps);
void tm_verbs_dev_addr(tm_dev_t *dev, void *addr);
int  tm_verbs_is_reachable(tm_dev_t *dev, const void *dev_addr);
int  tm_verbs_reg_mr(tm_dev_t *dev, void *addr, size_t length, int access,
                     tm_dev_mr_t **mr_p);
int  tm_verbs_dereg_mr(tm_dev_mr_t *mr);

/* verbs_queue.c */
int  tm_verbs_create_cq(tm_dev_t *dev, unsigned depth, tm_dev_cq_t **cq_p);
void tm_verbs_destroy_cq(tm_dev_cq_t *cq);
int  tm_verbs_poll_cq(tm_dev_cq_t *cq, int max, tm_dev_wc_t *wc);
int  tm_verbs_create_srq(tm_dev_t *dev, tm_dev_cq_t *recv_cq,
                         tm_dev_srq_t **srq_p);
void tm_verbs_destroy_srq(tm_dev_srq_t *srq);
int  tm_verbs_post_srq_ops(tm_dev_srq_t *srq, struct ibv_ops_wr *wr,
                           struct ibv_ops_wr **bad_wr);
int  tm_verbs_post_srq_recv(tm_dev_srq_t *srq, struct ibv_recv_wr *wr,
                            struct ibv_recv_wr **bad_wr);

/* verbs_conn.c */
int  tm_verbs_create_conn(tm_dev_t *dev, tm_dev_srq_t *srq,
                          tm_dev_cq_t *send_cq, tm_dev_conn_t **conn_p);
void tm_verbs_destroy_conn(tm_dev_conn_t *conn);
void tm_verbs_conn_addr(tm_dev_conn_t *conn, void *addr);
int  tm_verbs_connect(tm_dev_conn_t *conn, const void *dev_addr,
                      const void *conn_addr);
uint32_t tm_verbs_conn_qp_num(tm_dev_conn_t *conn);
int  tm_verbs_post_send(tm_dev_conn_t *conn, struct ibv_send_wr *wr,
                        struct ibv_send_wr **bad_wr);


/* Pure helpers (tested without hardware) */

/* Why a device cannot do RC tag matching, or NULL when it can */
const char *tm_verbs_tm_unusable(const struct ibv_device_attr_ex *attr);

/* Clamps a request (0 = default) to what the device and port report */
void tm_verbs_limits_init(tm_verbs_limits_t *lim,
                          const struct ibv_device_attr_ex *dev_attr,
                          const struct ibv_port_attr *port_attr,
                          const tm_dev_attr_t *req);

void tm_verbs_caps_fill(tm_dev_caps_t *caps,
                        const struct ibv_device_attr_ex *dev_attr,
                        const tm_verbs_limits_t *lim);

/* Bytes of an MTU enum; 0 for an invalid one */
uint32_t tm_verbs_mtu_bytes(enum ibv_mtu mtu);

void tm_verbs_dev_addr_pack(void *addr, uint8_t link_layer, uint16_t lid,
                            const union ibv_gid *gid);
/* 0, or EINVAL when addr is not a verbs device address */
int  tm_verbs_dev_addr_unpack(const void *addr, tm_verbs_peer_t *peer);

void tm_verbs_conn_addr_pack(void *addr, enum ibv_mtu mtu, uint16_t lid,
                             uint32_t qpn, uint32_t psn,
                             const union ibv_gid *gid);
int  tm_verbs_conn_addr_unpack(const void *addr, tm_verbs_peer_t *peer);

/* Whether a peer with this device address can be reached from ours */
int  tm_verbs_peer_reachable(uint8_t link_layer, const union ibv_gid *gid,
                             const tm_verbs_peer_t *peer);

/*
 * Turns the completion an extended CQ points at into a tm_dev_wc_t.
 * Separate from polling so that the test can feed it a fake CQ.
 */
void tm_verbs_wc_read(struct ibv_cq_ex *cq, tm_dev_wc_t *wc);

#ifdef __cplusplus
}
#endif

#endif
