/*
 * Software NIC: port 1's attributes that a NIC's subnet manager sets (LID,
 * MTU, P_Key table), the P_Key rules, and the port's asynchronous events.
 *
 * P_Key table: SOFTNIC_PKEY_TABLE, read when a device is opened, lists the
 * table's entries in index order ("0x7fff,0xffff"; default "0xffff", the
 * default partition with full membership).  A QP takes the key at its
 * pkey_index; a requester whose key does not match its responder's (the
 * same partition, the low 15 bits, and at least one full member: bit 15)
 * sends packets that the responder drops silently, as IB does (the P_Key
 * violation is counted, never answered).  On RC the requester then runs
 * out of retries: its first request completes with IBV_WC_RETRY_EXC_ERR
 * and the QP goes to the error state.  The software NIC decides the match
 * when the QP goes to RTR (not again when a table changes under a
 * connected QP, as a NIC would at every packet) and collapses the retries:
 * the failure comes at the first push, not after retry_cnt timeouts.  Connections to a remote
 * SRQ (the extension, not mlx5's) take no P_Key check.
 */
#ifndef SOFTNIC_PORT_H_
#define SOFTNIC_PORT_H_

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>

/* Port 1's LID, the device's (every context reads it), as a subnet
 * manager assigns one: nonzero (0 is no LID; ibv_rc_pingpong refuses it).
 * A QP connected without a GRH to this LID reaches a QP of the device */
#define SN_PORT_LID            1
#define SN_PKEY_TBL_MAX        16
#define SN_PKEY_DEFAULT        0xffff
#define SN_PKEY_FULL           0x8000    /* membership bit */
#define SN_PKEY_PARTITION      0x7fff
#define SN_PORT_EVENTS_MAX     8
/* rdma-core 56's struct ibv_port_attr adds active_speed_ex after the
 * layout of 44 (port_cap_flags2 at 48, padding to 52): a caller built
 * against 56 passes the longer struct, which this build's headers may not
 * have.  The ABI fixes the offset */
#define SN_PORT_ATTR_SPEED_EX_OFFSET 52

typedef struct sn_port {
    uint16_t           lid;
    enum ibv_mtu       mtu;
    uint16_t           pkeys[SN_PKEY_TBL_MAX];   /* host order */
    uint16_t           npkeys;
    /* raised and not yet read by software (softnic_get_async_event) */
    enum ibv_event_type events[SN_PORT_EVENTS_MAX];
    unsigned           nevents;
} sn_port_t;

struct sn_context;
struct sn_qp;

/* At open: the defaults, and the P_Key table from the environment */
void sn_port_init(sn_port_t *port);
int  sn_port_query(struct ibv_context *context, uint8_t port_num,
                   struct ibv_port_attr *port_attr, size_t port_attr_len);
/* The key at index; 0 (invalid) beyond the table */
uint16_t sn_port_pkey(const struct sn_context *ctx, uint16_t index);
/* Whether a requester with key a reaches a responder with key b */
bool sn_pkey_match(uint16_t a, uint16_t b);
/* The QP's key, published in its inbound ring for its requesters */
void sn_qp_pkey_publish(struct sn_qp *qp);
/* INIT -> RTR: whether the responder drops what the QP sends */
void sn_qp_pkey_judge(struct sn_qp *qp, uint16_t pkey_index);
/* A QP whose packets are dropped: its requests run out of retries */
void sn_qp_pkey_dropped(struct sn_qp *qp);
/* Under the context's lock: a port event not yet read, taken */
bool sn_port_event_get(struct sn_context *ctx, struct ibv_async_event *event);

#endif
