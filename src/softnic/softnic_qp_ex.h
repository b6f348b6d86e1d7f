/*
 * Software NIC: the extended QP's post API (ibv_wr_start .. ibv_wr_complete,
 * softnic_qp_ex.c).  Included by softnic_int.h.
 */
#ifndef SOFTNIC_QP_EX_H_
#define SOFTNIC_QP_EX_H_

#pragma GCC visibility push(hidden)

/* The ibv_wr_* of an RC QP that the software NIC carries (mlx5 takes
 * these and, on RC, also SEND_WITH_INV, atomics, LOCAL_INV and BIND_MW) */
#define SN_QP_EX_SEND_OPS  (IBV_QP_EX_WITH_SEND | \
                            IBV_QP_EX_WITH_SEND_WITH_IMM | \
                            IBV_QP_EX_WITH_RDMA_WRITE | \
                            IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | \
                            IBV_QP_EX_WITH_RDMA_READ)

/* The work requests built between wr_start and wr_complete: a chain of
 * struct ibv_send_wr in arrays sized by the send queue at creation, so
 * that posting allocates nothing */
typedef struct sn_wr_batch {
    pthread_spinlock_t  lock;        /* held from wr_start to wr_complete /
                                        wr_abort, as mlx5's sq.lock */
    int                 err;         /* first error of the batch, or 0 */
    uint32_t            count;       /* work requests begun */
    uint32_t            max_wr;      /* entries of wrs */
    uint32_t            max_inline;  /* bytes of inline data per entry */
    struct ibv_send_wr  *cur;        /* the one the setters fill, or NULL */
    struct ibv_send_wr  *wrs;        /* [max_wr] */
    struct ibv_sge      *sges;       /* [max_wr][SN_MAX_SGE] */
    uint8_t             *inline_buf; /* [max_wr][max_inline] */
} sn_wr_batch_t;

/* context ops: create_qp_ex */
struct ibv_qp *sn_create_qp_ex(struct ibv_context *context,
                               struct ibv_qp_init_attr_ex *attr);
void sn_wr_batch_free(sn_wr_batch_t *batch);

/* softnic_req.c: posts count chained work requests whole, or none of them
 * (ENOMEM) when the send queue lacks room for them all */
int sn_post_send_batch(sn_qp_t *qp, struct ibv_send_wr *wr, uint32_t count);

#pragma GCC visibility pop

#endif
