/*
 * The verbs backend of the tag-matching device layer: internal definitions.
 *
 * The backend drives every device, a NIC through libibverbs and the
 * software NIC, with rdma-core's API only (verbs_lib.h says how the
 * exported calls reach either).  Its objects embed the device layer's
 * (tm_dev.h) first, so that the layer's pointers convert to ours by a
 * cast.  Each object owns the verbs resource it wraps and nothing else: a
 * connection does not own its SRQ or CQ, an SRQ does not own its CQ.
 *
 * Files:
 *   verbs_dev.c    discovery, open / close, capabilities, addresses, MRs
 *   verbs_port.c   the port: which one, its GID and P_Key index
 *   verbs_queue.c  CQs (polling the extended CQ), the TM-SRQ
 *   verbs_conn.c   RC QPs: creation, INIT / RTR / RTS, connections to a
 *                  remote SRQ (the software NIC's extension)
 *   verbs_lib.c    the exported verbs of libibverbs and of the software NIC
 *
 * The helpers declared at the end are pure (no verbs calls) and exported
 * only so that the unit test can check them without a NIC.
 */
#ifndef RC_TM_DEV_VERBS_VERBS_DEV_H_
#define RC_TM_DEV_VERBS_VERBS_DEV_H_

#include "dev/tm_dev.h"
#include "verbs_lib.h"

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Defaults used where tm_dev_attr_t says 0 (then clamped to the NIC) */
#define TM_VERBS_DEF_NUM_TAGS        1024   /* UCX's TM_LIST_SIZE */
#define TM_VERBS_DEF_MAX_OPS         64
#define TM_VERBS_DEF_SRQ_DEPTH       4095   /* UCX's RC RX_QUEUE_LEN */
#define TM_VERBS_DEF_SEND_WR         256    /* UCX's TX_QUEUE_LEN */
#define TM_VERBS_MIN_INLINE          64     /* asked of the QPs, as UCX's
                                               TX_MIN_INLINE: mlx5 grants
                                               what fills the WQE (124) */
#define TM_VERBS_MAX_SEND_SGE        2      /* header + payload */
#define TM_VERBS_RX_SEND_CQ_DEPTH    64     /* never polled (tm_verbs_srq_t) */
#define TM_VERBS_MAX_RD_ATOMIC       16     /* rendezvous reads in flight */

/* RC transport parameters (UCX rc defaults) */
#define TM_VERBS_PORT_DEFAULT        1
#define TM_VERBS_TIMEOUT             18     /* 4.096us * 2^18 ~ 1.07 s: a
                                               request to a gone peer fails
                                               after (7 + 1) * 1.07 s */
#define TM_VERBS_RETRY_CNT           7
#define TM_VERBS_RNR_RETRY           7      /* infinite: RNR is flow control */
#define TM_VERBS_MIN_RNR_TIMER       13     /* 0.96 ms: UCX 1.13's RC
                                               RNR_TIMEOUT=1ms, encoded by
                                               uct_ib_to_rnr_fabric_time */
#define TM_VERBS_HOP_LIMIT           255    /* UCX's HOP_LIMIT */

/* Completions a poll of a CQ without TM information reads at once */
#define TM_VERBS_POLL_MAX            16

#define tm_likely(x)                __builtin_expect(!!(x), 1)
#define tm_unlikely(x)              __builtin_expect(!!(x), 0)
#define TM_NOINLINE                 __attribute__((noinline))
#define TM_ALWAYS_INLINE            inline __attribute__((always_inline))

/* The software NIC's CPU time per work request, posted and completed */
#define TM_VERBS_SOFT_POST_TIME      30e-9
/* ... and per RDMA read or write: a system call's copy, as UCX's cma
 * (whose figure it is: measured alike, docs/performance.md) */
#define TM_VERBS_SOFT_RDMA_TIME      500e-9

/* Packed addresses are tagged so that foreign ones are refused */
#define TM_VERBS_DEV_ADDR_MAGIC      0x56   /* 'V' */
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
    uint32_t            max_inline;         /* what the probe QP got */
    uint8_t             max_rd_atomic;      /* as initiator */
    uint8_t             max_dest_rd_atomic; /* as responder */
} tm_verbs_limits_t;


/* Device address: what is_reachable needs.  Byte arrays, no padding. */
typedef struct tm_verbs_dev_addr {
    uint8_t             magic;
    uint8_t             link_layer;         /* IBV_LINK_LAYER_* */
    uint8_t             lid[2];             /* big endian */
    uint8_t             gid[16];
    uint8_t             pkey[2];            /* big endian */
} tm_verbs_dev_addr_t;

/* Connection address: everything the peer needs to reach our two QPs (the
 * one we send on, and the receive-only one its sends go to) */
typedef struct tm_verbs_conn_addr {
    uint8_t             magic;
    uint8_t             mtu;                /* enum ibv_mtu of our port */
    uint8_t             lid[2];             /* big endian */
    uint8_t             qpn[4];             /* big endian, 24 bits used */
    uint8_t             psn[4];             /* its first send PSN */
    uint8_t             rx_qpn[4];
    uint8_t             rx_psn[4];          /* the NIC's reads and FINs */
    uint8_t             gid[16];
} tm_verbs_conn_addr_t;

/* A QP's number and first send PSN */
typedef struct tm_verbs_qp_addr {
    uint32_t            qpn;
    uint32_t            psn;
} tm_verbs_qp_addr_t;

/* Unpacked (host order) form of both */
typedef struct tm_verbs_peer {
    uint8_t             link_layer;
    enum ibv_mtu        mtu;
    uint16_t            lid;
    uint16_t            pkey;               /* device address only */
    tm_verbs_qp_addr_t  tx;                 /* the QP it sends on */
    tm_verbs_qp_addr_t  rx;                 /* its receive-only QP */
    union ibv_gid       gid;
} tm_verbs_peer_t;


typedef struct tm_verbs_dev {
    tm_dev_t                    super;
    const tm_verbs_lib_t        *lib;       /* how its exported verbs go */
    struct ibv_context          *ctx;
    struct ibv_pd               *pd;
    struct ibv_device_attr_ex   dev_attr;
    struct ibv_port_attr        port_attr;
    uint8_t                     port_num;
    uint8_t                     gid_index;
    union ibv_gid               gid;
    uint16_t                    pkey_index; /* of the QPs created now */
    uint16_t                    pkey;       /* the key there, host order */
    uint32_t                    pkey_want;  /* tm_dev_attr_t::pkey */
    uint8_t                     sl;
    uint8_t                     timeout;    /* the QPs' local ACK timeout */
    uint8_t                     retry_cnt;
    tm_verbs_limits_t           lim;
    tm_dev_perf_t               soft_perf;  /* the software NIC's figures */
    unsigned                    flags;      /* TM_DEV_CAP_* */
    char                        driver[TM_DEV_NAME_MAX];
} tm_verbs_dev_t;

typedef struct tm_verbs_conn tm_verbs_conn_t;

/* peer_srq_num of a connection to a peer's QPs */
#define TM_VERBS_NO_SRQ  UINT32_MAX

struct tm_verbs_conn {
    tm_dev_conn_t               super;      /* super.qp, super.rx_qp */
    int                         borrowed;   /* the SRQ's QPs (an accepted
                                               connection): not destroyed */
    int                         peer_known; /* connected by us: to peer */
    tm_verbs_peer_t             peer;       /* its device, and its QPs or
                                               (peer_srq_num) its SRQ */
    uint32_t                    peer_srq_num;
    tm_verbs_conn_t             *next;      /* the SRQ's borrowed ones */
};

typedef struct tm_verbs_srq {
    tm_dev_srq_t                super;      /* super.srq: the TM-SRQ */
    tm_dev_cq_t                 *cq;        /* receive CQ, not owned */
    tm_dev_cq_t                 *rx_send_cq;/* the receive-only QPs' send
                                               CQ, never polled: mlx5's
                                               poll cannot parse their
                                               requester CQEs */
    tm_verbs_conn_t             *borrowed;  /* connections accepted by it */
} tm_verbs_srq_t;


static inline tm_verbs_dev_t *tm_verbs_dev(tm_dev_t *dev)
{
    return (tm_verbs_dev_t*)dev;
}

static inline const tm_verbs_lib_t *tm_verbs_lib_of(tm_dev_t *dev)
{
    return tm_verbs_dev(dev)->lib;
}


/* verbs_conn.c: a CQ, TM-SRQ and QP created and destroyed at open, as UCX
 * does, to learn the inline size the NIC grants (lim.max_inline) and that
 * it can create a TM-SRQ at all */
int tm_verbs_probe_queues(tm_verbs_dev_t *dev);

/* verbs_queue.c: the probes' extended CQ and one-entry TM-SRQ on PD pd.
 * 0, or the errno of what failed (logged; nothing is left created). */
int  tm_verbs_probe_srq_create(const tm_verbs_lib_t *lib,
                               struct ibv_context *ctx, struct ibv_pd *pd,
                               const char *name, struct ibv_cq_ex **cq_p,
                               struct ibv_srq **srq_p);
void tm_verbs_probe_srq_destroy(const tm_verbs_lib_t *lib,
                                struct ibv_cq_ex *cq, struct ibv_srq *srq);

/* verbs_port.c: the first active port (ENETDOWN if none); the port a
 * device opens on (its GID and P_Key index chosen); its attributes read
 * again (a port event): new connections take the new LID, MTU and P_Key
 * index */
int  tm_verbs_port_active(struct ibv_context *ctx, uint8_t nports,
                          uint8_t *port_num, struct ibv_port_attr *attr);
int  tm_verbs_port_init(tm_verbs_dev_t *dev);
int  tm_verbs_port_refresh(tm_verbs_dev_t *dev);

/* errno of a failed verbs call that returns NULL, never 0 */
static inline int tm_verbs_errno(int fallback)
{
    return (errno != 0) ? errno : fallback;
}

/* Whether a TM-SRQ can be created on the device at all: a PD, a CQ and a
 * TM-SRQ, destroyed again.  0, or the errno of what failed. */
int  tm_verbs_probe_tm_srq(const tm_verbs_lib_t *lib, struct ibv_context *ctx,
                           const char *name);


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

/* A NIC port's figures, from its speed, width, MTU and link layer */
void tm_verbs_port_perf(const struct ibv_port_attr *port, tm_dev_perf_t *perf);

/* Bytes of an MTU enum; 0 for an invalid one */
uint32_t tm_verbs_mtu_bytes(enum ibv_mtu mtu);

void tm_verbs_dev_addr_pack(void *addr, uint8_t link_layer, uint16_t lid,
                            const union ibv_gid *gid, uint16_t pkey);
/* 0, or EINVAL when addr is not a verbs device address */
int  tm_verbs_dev_addr_unpack(const void *addr, tm_verbs_peer_t *peer);
/* The two name the same port: its LID (InfiniBand) and its GID */
int  tm_verbs_peer_same_port(const tm_verbs_peer_t *a, const tm_verbs_peer_t *b);

void tm_verbs_conn_addr_pack(void *addr, enum ibv_mtu mtu, uint16_t lid,
                             const tm_verbs_qp_addr_t *tx,
                             const tm_verbs_qp_addr_t *rx,
                             const union ibv_gid *gid);
int  tm_verbs_conn_addr_unpack(const void *addr, tm_verbs_peer_t *peer);

static inline int tm_verbs_is_eth(uint8_t link_layer)
{
    return link_layer == IBV_LINK_LAYER_ETHERNET;
}

/* ::ffff:a.b.c.d, the form RoCE v2 gives an IPv4 address */
int  tm_verbs_gid_is_ipv4(const union ibv_gid *gid);

/*
 * InfiniBand routing by FLID (UCX 1.16 and later, UCX_IB_FLID_ROUTE): a
 * site-local GID fec0:0000:FFFF:SSSS::/64 carries the port's FLID (its LID
 * in the fabric-wide range that the routers forward) in bytes 4-5 and the
 * subnet in bytes 6-7.  0 when gid has no FLID.
 */
uint16_t tm_verbs_gid_flid(const union ibv_gid *gid);

/* Whether a peer with this device address can be reached from ours.
 * InfiniBand: the same subnet prefix, or a FLID on both sides. */
int  tm_verbs_peer_reachable(uint8_t link_layer, const union ibv_gid *gid,
                             const tm_verbs_peer_t *peer);

/*
 * The P_Key a port's QPs use, as UCX's ib transports choose it
 * (uct_ib_iface_init_pkey): the first entry of the table (host order, len
 * entries, 0 is empty) with full membership (bit 15), else the first
 * limited one; want (tm_dev_attr_t::pkey) restricts the choice to one
 * partition (the low 15 bits).  0, EINVAL for a partition above 0x7fff or
 * ENOENT when no entry fits.
 */
#define TM_VERBS_PKEY_FULL       0x8000
#define TM_VERBS_PKEY_PARTITION  0x7fff
#define TM_VERBS_PKEY_DEFAULT    0xffff
int  tm_verbs_pkey_select(const uint16_t *table, unsigned len, uint32_t want,
                          uint16_t *index, uint16_t *pkey);

/* Whether two P_Keys may talk (UCX's uct_ib_iface_is_reachable): the same
 * partition, and at least one of full membership */
int  tm_verbs_pkey_reachable(uint16_t a, uint16_t b);

/*
 * The send queue rdma-core's mlx5 provider gives an RC QP
 * (mlx5_calc_send_wqe, mlx5_calc_sq_size): the WQE is 192 bytes of
 * segments (control, UMR control, mkey context, KLMs) plus the larger of
 * max_sge 16-byte gather entries and the inline segment (4 bytes and the
 * data, in 16-byte units), in 64-byte blocks; the queue is max_wr WQEs,
 * rounded up to a power of two bytes; the inline data granted fills the
 * WQE.  0, or EINVAL where mlx5 refuses (a WQE above max_desc, the
 * device's max_sq_desc_sz).  max_wr 0: no send queue, 0 bytes.
 */
typedef struct tm_verbs_mlx5_sq {
    uint32_t            wqe_size;           /* bytes of one WQE */
    uint32_t            max_inline;         /* granted */
    uint64_t            bytes;              /* of the queue's buffer */
} tm_verbs_mlx5_sq_t;

#define TM_VERBS_MLX5_SEND_WQE_BB     64
#define TM_VERBS_MLX5_RC_OVERHEAD     192
int  tm_verbs_mlx5_sq_size(uint32_t max_wr, uint32_t max_sge,
                           uint32_t max_inline, uint32_t max_desc,
                           tm_verbs_mlx5_sq_t *sq);

/* Where a route to a peer starts: our port and the GID it sends from */
typedef struct tm_verbs_local {
    uint8_t             link_layer;
    uint8_t             port_num;
    uint8_t             sl;                 /* service level */
    uint8_t             gid_index;
    uint32_t            port_flags;         /* ibv_port_attr.flags */
    union ibv_gid       gid;
} tm_verbs_local_t;

/*
 * The address vector to a peer.  DLID: on InfiniBand the peer's FLID when
 * it is in another subnet and both ports have one (the routers forward by
 * it), else its LID.  SL: local's.  GRH (peer GID, our GID index, hop limit): on RoCE,
 * across subnet prefixes, and where the port requires one.
 */
void tm_verbs_ah_attr_fill(const tm_verbs_local_t *local,
                           const tm_verbs_peer_t *peer,
                           struct ibv_ah_attr *ah);

/*
 * Turns the completion an extended CQ points at into a tm_dev_wc_t.
 * Separate from polling so that the test can feed it a fake CQ.
 */
void tm_verbs_wc_read(struct ibv_cq_ex *cq, tm_dev_wc_t *wc);

#ifdef __cplusplus
}
#endif

#endif
