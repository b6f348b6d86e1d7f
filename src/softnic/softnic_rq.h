/*
 * Software NIC: receive queues that are not tag matching (softnic_rq.c):
 * the receive queue of an RC QP created without an SRQ, and basic SRQs
 * (IBV_SRQT_BASIC).  Both are an sn_srq_t whose rq is set, so that the
 * arrival stage, the parking of rings and the CQ's work treat them as any
 * SRQ; only what an arrival does differs (sn_rq_arrive).  A QP's own
 * receive queue is an SRQ of its own that software never sees
 * (qp->ibv.srq is NULL).  Included by softnic_int.h.
 */
#ifndef SOFTNIC_RQ_H_
#define SOFTNIC_RQ_H_

#pragma GCC visibility push(hidden)

/* Scatter entries a receive WQE holds: mlx5 grants up to 7 on a basic SRQ
 * asked for the device's 4 (mlx5_alloc_srq_buf rounds the WQE up), and a
 * QP's own queue as many as asked, the device's 8 at most, rounded up to a
 * power of two */
#define SN_RQ_MAX_SGE          8

/* A posted receive */
typedef struct sn_rwqe {
    uint64_t           wr_id;
    uint32_t           num_sge;
    uint32_t           length;       /* of all its scatter entries */
    struct ibv_sge     sge[SN_RQ_MAX_SGE];
} sn_rwqe_t;

/* A receive queue: FIFO of max_wr (what creation granted) */
typedef struct sn_rq {
    sn_rwqe_t          *wqes;
    uint32_t           mask, max_wr, max_sge;
    uint32_t           head, tail;
    sn_qp_t            *owner;       /* a QP's own; NULL: a basic SRQ */
    uint32_t           limit;        /* armed SRQ limit (0: disarmed) */
    bool               limit_due;    /* IBV_EVENT_SRQ_LIMIT_REACHED not
                                        read yet */
} sn_rq_t;

/*
 * What the responder tells the requester of the record at nak_pos of its
 * ring when that is not an ack (sn_ring_ctl_t's NAK line): an RNR wait, or
 * a NAK with a status.  The requester may end an RNR wait (its retries ran
 * out) and the responder may end it (a receive came) by compare-and-swap
 * on nak, so exactly one of them does.
 */
enum {
    SN_NAK_NONE   = 0,
    SN_NAK_RNR    = 1,               /* RNR NAKs since rnr_t0_ns */
    SN_NAK_FAILED = 2                /* nak_status; the ring is dead */
};

/* softnic_rq.c */
int  sn_rq_qp_attr_check(const struct ibv_qp_init_attr *attr);
sn_srq_t *sn_rq_own_create(sn_context_t *ctx, struct ibv_pd *pd,
                           struct ibv_cq *recv_cq, struct ibv_qp_cap *cap);
void sn_rq_own_destroy(sn_srq_t *srq);
struct ibv_srq *sn_rq_create_srq_ex(struct ibv_context *context,
                                    struct ibv_srq_init_attr_ex *attr);
int  sn_rq_srq_attach(sn_srq_t *srq, struct ibv_cq *recv_cq);
int  sn_rq_destroy_srq(sn_srq_t *srq);
int  sn_rq_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                     struct ibv_recv_wr **bad_wr);
int  sn_rq_post_srq_recv(sn_srq_t *srq, struct ibv_recv_wr *wr,
                         struct ibv_recv_wr **bad_wr);
bool sn_rq_arrival_can(sn_srq_t *srq, sn_qp_t *qp);
void sn_rq_taken(sn_srq_t *srq);
int  sn_rq_arrive(sn_srq_t *srq, sn_qp_t *qp, const sn_rec_t *rec);
void sn_rq_qp_error(sn_qp_t *qp);
bool sn_qp_nak_check(sn_qp_t *qp, uint64_t now);
bool sn_rq_event_get(sn_context_t *ctx, struct ibv_async_event *event);

#pragma GCC visibility pop

#endif
