/*
 * Software NIC: unreliable datagrams (softnic_ud.c) and address handles
 * (softnic_ah.c).  Included by softnic_int.h.
 *
 * A UD QP owns its inbound ring, as an RC QP does, but any QP of the
 * device may produce into it: a send takes the ring's producer lock
 * (sn_ring_ctl_t::prod_lock), writes one record (a datagram's header and
 * its payload) and lets go.  The sender finds the ring from the address
 * handle's device and the remote QP number, through the device's registry
 * (softnic_wire.h), and keeps it mapped (a destination, sn_ud_dest_t).
 *
 * As on a fabric, a datagram nobody takes is dropped silently and its
 * send completes with success, locally: no QP of that number (or not a
 * UD one), a device the address does not reach, a receiver not in RTR or
 * RTS, another Q_Key or a P_Key that does not match, a ring that is full,
 * or, on the receiving side, no receive posted.
 */
#ifndef SOFTNIC_UD_H_
#define SOFTNIC_UD_H_

#pragma GCC visibility push(hidden)

/* A UD QP's inbound ring: room for many datagrams of an MTU, from every
 * sender (a datagram that finds it full is dropped) */
#define SN_UD_RING_SIZE        (1u << 20)
/* The GRH (or, on RoCE, the IP header) a receive gets ahead of the data:
 * 40 bytes, present or not, and counted in byte_len */
#define SN_UD_GRH_LEN          40
/* A destination not found is looked up again after this long */
#define SN_UD_RETRY_NS         (20ull * 1000 * 1000)
/* mlx5's UD send WQE: control (16 bytes) and datagram (48) segments
 * (providers/mlx5/verbs.c _sq_overhead) */
#define SN_UD_WQE_OVERHEAD     64
/* The Q_Key bit that says "use the QP's own" (IBTA 10.2.5, C10-15) */
#define SN_UD_QKEY_OWN         0x80000000u

/* A datagram on the ring: this header, then the payload.  What the
 * receiving NIC reads of the packet's headers (LRH, GRH, BTH, DETH) */
typedef struct sn_ud_hdr {
    uint32_t           src_qp;
    uint16_t           slid;         /* the sender's LID | path bits */
    uint8_t            sl;
    uint8_t            grh;          /* the address was global */
    uint8_t            dlid_path_bits;
    uint8_t            hop_limit;
    uint8_t            traffic_class;
    uint8_t            reserved;
    uint32_t           flow_label;
    union ibv_gid      sgid, dgid;
} sn_ud_hdr_t;

/* An address handle */
typedef struct sn_ah {
    struct ibv_ah      ibv;
    struct ibv_ah_attr attr;
    uint32_t           uid;          /* whose device it names */
    bool               reachable;    /* a software NIC of our host and
                                        user (else sends are dropped) */
} sn_ah_t;

/* Where a UD QP sends: a receiving QP's ring, mapped */
typedef struct sn_ud_dest {
    uint32_t           uid, qpn;
    sn_shm_t           shm;
    sn_ring_ctl_t      *ring;        /* NULL: not found (retry_ns) */
    uint32_t           mask;
    sn_peer_t          *peer;        /* its device: the doorbell */
    uint64_t           retry_ns;
} sn_ud_dest_t;

/* A UD QP's own state */
typedef struct sn_ud {
    uint32_t           qkey;
    sn_ud_dest_t       **dests;      /* open addressing on (uid, qpn) */
    uint32_t           dest_mask, ndests;
} sn_ud_t;

static inline sn_ah_t *sn_ah(struct ibv_ah *ah)
{
    return sn_container_of(ah, sn_ah_t, ibv);
}

/* softnic_ud.c */
int  sn_ud_qp_init(sn_qp_t *qp);
void sn_ud_qp_cleanup(sn_qp_t *qp);
int  sn_ud_modify_check(const sn_qp_t *qp, enum ibv_qp_state from,
                        enum ibv_qp_state to, int attr_mask);
void sn_ud_modified(sn_qp_t *qp, const struct ibv_qp_attr *attr,
                    int attr_mask);
uint32_t sn_ud_inline_grant(const struct ibv_qp_cap *cap);
int  sn_ud_post_send(sn_qp_t *qp, struct ibv_send_wr *wr,
                     struct ibv_send_wr **bad_wr);
int  sn_ud_step_arrival(sn_srq_t *srq, sn_qp_t *qp);

#pragma GCC visibility pop

#endif
