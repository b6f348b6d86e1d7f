/*
 * Software NIC: the TM-SRQ's objects (softnic_srq.c, softnic_resp.c): the
 * entries of its matching list, its list operations, untagged buffers and
 * the second halves of matched messages.  An SRQ that is not tag matching
 * (a basic SRQ, a QP's own receive queue) is an sn_srq_t too, with rq set
 * (softnic_rq.h).  Included by softnic_int.h.
 */
#ifndef SOFTNIC_SRQ_H_
#define SOFTNIC_SRQ_H_

/*
 * A matching-list entry; its handle is its index, bare, as on mlx5.  Two
 * views of it, as there are on a NIC:
 *  - the NIC's: what the list holds at that index (listed, and what it
 *    matches and where it places), set when an ADD is processed;
 *  - the provider's (rdma-core's struct mlx5_tag_entry): the receive's
 *    wr_id and how many completions it still expects.  The handle is free
 *    again when that count drops to 0: after the ADD's completion and the
 *    entry's final completion (not its MATCH), or a successful DEL's.
 * Free handles are reused last-freed first: at once, which mlx5's FIFO
 * does only later, so that software naming a handle it no longer owns
 * shows at once.  Nothing checks a DEL's handle (rdma-core does not): a
 * DEL of a free handle gives a reference it never took, as rdma-core's
 * mlx5_tm_release_tag does, so a signaled one frees the handle a second
 * time (the next ADDs share it) and an unsignaled one leaves the count
 * below 0 (the next entry there is freed while listed).
 */
typedef struct sn_tag {
    /* the NIC's */
    tm_matcher_entry_t entry;        /* in srq->listed; entry.seq is the
                                        order of ADD processing */
    uint64_t           tag, mask;
    struct ibv_sge     sge[SN_TM_MAX_SGE];
    uint32_t           length;       /* of all its scatter entries */
    uint8_t            num_sge;
    bool               listed;
    /* the provider's */
    struct sn_tag      *next_free;
    uint64_t           recv_wr_id;
    int                expect_cqe;
    uint32_t           phase_cnt;    /* the provider's count at its ADD */
} sn_tag_t;

/* A posted list operation (its work request, as the NIC reads it) */
typedef struct sn_op {
    uint64_t           wr_id;
    uint32_t           index;        /* the handle (ADD/DEL) */
    uint32_t           unexpected_cnt;
    uint8_t            opcode;       /* IBV_WR_TAG_* */
    uint8_t            flags;        /* IBV_OPS_* */
    /* ADD */
    uint8_t            num_sge;
    uint32_t           length;       /* of all of sge */
    uint64_t           tag, mask;
    struct ibv_sge     sge[SN_TM_MAX_SGE];
} sn_op_t;

/* Untagged SRQ buffer */
typedef struct sn_rbuf {
    uint64_t           wr_id;
    uint64_t           addr;
    uint32_t           length;
    uint32_t           lkey;
} sn_rbuf_t;

/* The second half of a matched message: its final completion (DATA_VALID;
 * for a rendezvous the NIC's read before it and FIN after) */
typedef struct sn_xfer {
    sn_qp_t            *qp;          /* where it came from */
    uint32_t           tag_index;
    uint32_t           byte_len;     /* eager: already placed */
    unsigned           imm_flag;     /* IBV_WC_WITH_IMM or 0 */
    uint32_t           imm_data;
    bool               rndv;         /* the NIC reads it */
    bool               sw_rndv;      /* software reads it: the headers are
                                        placed now */
    uint32_t           hdr_len;      /* sw_rndv: header bytes to place */
    uint8_t            hdr[128];     /* ... kept from the message */
    struct ibv_sge     sge[SN_TM_MAX_SGE]; /* the entry's buffer */
    uint8_t            num_sge;
    uint64_t           remote_va;
    uint32_t           rkey;
    uint32_t           rndv_len;
    uint8_t            fin[sizeof(struct ibv_tmh) + sizeof(struct ibv_rvh)];
} sn_xfer_t;

struct sn_srq {
    struct ibv_srq     ibv;
    sn_list_t          link;         /* in cq->srqs */
    sn_cq_t            *cq;
    /* accept queue for softnic_dv_connect_qp_to_srq: the SRQ number, the
     * device's (TM-SRQ: its registry entry, num_entry) */
    uint32_t           num;
    sn_shm_t           num_entry;
    sn_shm_t           shm;
    sn_srq_seg_t       *seg;
    uint32_t           accepted;     /* requests taken from seg */
    sn_list_t          qps;          /* QPs whose receives come here */
    sn_list_t          active;       /* those whose rings a run looks at;
                                        the others are parked */
    sn_list_t          *rr_next;     /* round-robin position in active */
    uint32_t           nactive, nparked;
    uint32_t           runs;         /* of the arrival stage */
    uint64_t           woken, swept; /* parked QPs taken back (statistics) */
    struct sn_rq       *rq;          /* not tag matching: a basic SRQ or
                                        a QP's own receive queue
                                        (softnic_rq.h); NULL on a TM-SRQ */
    /* untagged buffers: FIFO */
    sn_rbuf_t          *rbufs;
    uint32_t           max_wr;
    uint32_t           rbuf_mask, rbuf_head, rbuf_tail;
    uint32_t           packet_size;  /* longer matched eager: two steps */
    uint8_t            hold_match, rndv_final; /* enum softnic_* */
    /* matching list */
    sn_tag_t           *tags;
    uint32_t           max_tags;
    uint32_t           max_sge;      /* of a list entry: tm_caps.max_sge */
    tm_matcher_t       listed;       /* listed entries: matched like the
                                        NIC, first added wins, in a time
                                        that does not grow with the list */
    sn_tag_t           *tag_free;    /* free handles (the provider's) */
    uint64_t           next_add_seq; /* the sequence counter of listed */
    /* list operations: FIFO of max_ops; an operation's slot is free once
     * the completion of it or of a later one is polled (op_retired), as
     * mlx5's command QP frees its send queue */
    sn_op_t            *ops;
    uint32_t           max_ops, op_retired, op_head, op_tail;
    /* phase: the NIC's 16-bit count, and the provider's (rdma-core's
     * unexp_in: unexpected messages polled, unexp_out: the count of the
     * last ADD that carried one) */
    uint16_t           hw_unexp;
    bool               in_phase;
    uint64_t           match_barrier; /* entries with seq >= this wait */
    uint32_t           unexp_in, unexp_out;
    /* pending DATA_VALID / rndv reads, FIFO of max_tags */
    sn_xfer_t          *xfers;
    uint32_t           xfer_mask, xfer_head, xfer_tail;
    /* steering */
    bool               hold_ops;
};


#pragma GCC visibility push(hidden)

/* softnic_srq.c */
struct ibv_srq *sn_create_srq_ex(struct ibv_context *context,
                                 struct ibv_srq_init_attr_ex *attr);
int  sn_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num);
int  sn_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
                      struct ibv_recv_wr **bad_wr);
int  sn_post_srq_ops(struct ibv_srq *srq, struct ibv_ops_wr *wr,
                     struct ibv_ops_wr **bad_wr);
bool sn_srq_op_ready(const sn_srq_t *srq);
int  sn_srq_step_op(sn_srq_t *srq);
unsigned sn_srq_progress(sn_srq_t *srq);
void sn_srq_go_out_of_phase(sn_srq_t *srq);
void sn_srq_tag_unlist(sn_srq_t *srq, sn_tag_t *tag);
void sn_srq_cqe_poll(sn_cqe_t *cqe);

/* The first-added matchable entry for tag, or NULL.  The first-added of all
 * matching entries decides: if it was added out of phase, so were all later
 * ones. */
static inline sn_tag_t *sn_srq_tag_match(sn_srq_t *srq, uint64_t msg_tag)
{
    tm_matcher_entry_t *e = tm_matcher_peek(&srq->listed, msg_tag);

    if ((e == NULL) || (e->seq >= srq->match_barrier)) {
        return NULL;
    }
    return e->arg;
}

#pragma GCC visibility pop

#endif
