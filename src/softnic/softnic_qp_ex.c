/*
 * Software NIC: the extended QP's post API (ibv_wr_post(3)), which perftest
 * uses on mlx5's vendor ids unless told --use_old_post_send.
 *
 * create_qp_ex with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS gives the QP a
 * struct ibv_qp_ex whose ibv_wr_* pointers build a batch of struct
 * ibv_send_wr in arrays the QP allocated at creation (sn_wr_batch_t);
 * wr_complete posts the batch through ibv_post_send's own path.  As on
 * mlx5 (providers/mlx5/qp.c):
 *  - wr_start takes the QP's send lock, wr_complete and wr_abort drop it;
 *  - each builder (wr_send, wr_rdma_write, ...) begins a work request with
 *    the QP's wr_id and wr_flags; a setter (wr_set_sge*, wr_set_inline_*)
 *    gives its data; inline data are copied at the setter's call;
 *  - an error (more work requests than the send queue holds, too many
 *    gather entries, too much inline data: ENOMEM) is kept in the batch:
 *    wr_complete returns it and posts nothing;
 *  - every builder the device carries on RC is set whatever send_ops_flags
 *    asked; those it does not carry (SEND_WITH_INV, atomics, LOCAL_INV,
 *    BIND_MW) are refused at creation (EOPNOTSUPP) and their pointers are
 *    left NULL, as mlx5 leaves unset what a QP type lacks.
 */
#include "softnic_int.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* sn_qp_t's union makes the QP's struct ibv_qp the ibv_qp_ex's qp_base */
_Static_assert(offsetof(struct ibv_qp_ex, qp_base) == 0,
               "struct ibv_qp_ex must begin with its struct ibv_qp");

static inline sn_qp_t *sn_qp_of_ex(struct ibv_qp_ex *qp_ex)
{
    return sn_container_of(qp_ex, sn_qp_t, ibv_ex);
}

/* ---- batch ---- */

static void sn_wr_start(struct ibv_qp_ex *qp_ex)
{
    sn_wr_batch_t *batch = sn_qp_of_ex(qp_ex)->wr_batch;

    pthread_spin_lock(&batch->lock);
    batch->err   = 0;
    batch->count = 0;
    batch->cur   = NULL;
}

static int sn_wr_complete(struct ibv_qp_ex *qp_ex)
{
    sn_qp_t *qp          = sn_qp_of_ex(qp_ex);
    sn_wr_batch_t *batch = qp->wr_batch;
    int ret              = batch->err;

    if ((ret == 0) && (batch->count != 0)) {
        batch->wrs[batch->count - 1].next = NULL;
        ret = sn_post_send_batch(qp, batch->wrs, batch->count);
    }
    pthread_spin_unlock(&batch->lock);
    return ret;
}

static void sn_wr_abort(struct ibv_qp_ex *qp_ex)
{
    pthread_spin_unlock(&sn_qp_of_ex(qp_ex)->wr_batch->lock);
}

static inline void sn_wr_fail(sn_wr_batch_t *batch, int err)
{
    if (batch->err == 0) {
        batch->err = err;
    }
    batch->cur = NULL;          /* the setters that follow do nothing */
}

/* Begins a work request: mlx5's _common_wqe_init */
static struct ibv_send_wr *sn_wr_begin(struct ibv_qp_ex *qp_ex,
                                       enum ibv_wr_opcode opcode)
{
    sn_wr_batch_t *batch = sn_qp_of_ex(qp_ex)->wr_batch;
    struct ibv_send_wr *wr;

    if (sn_unlikely(batch->count >= batch->max_wr)) {
        sn_wr_fail(batch, ENOMEM);  /* the send queue overflows */
        return NULL;
    }
    wr             = &batch->wrs[batch->count];
    wr->next       = wr + 1;
    wr->wr_id      = qp_ex->wr_id;
    wr->opcode     = opcode;
    wr->send_flags = qp_ex->wr_flags & ~IBV_SEND_INLINE; /* the setter says */
    wr->sg_list    = &batch->sges[batch->count * SN_MAX_SGE];
    wr->num_sge    = 0;
    wr->imm_data   = 0;
    ++batch->count;
    batch->cur     = wr;
    return wr;
}

/* ---- builders ---- */

static void sn_wr_send(struct ibv_qp_ex *qp_ex)
{
    sn_wr_begin(qp_ex, IBV_WR_SEND);
}

static void sn_wr_send_imm(struct ibv_qp_ex *qp_ex, __be32 imm_data)
{
    struct ibv_send_wr *wr = sn_wr_begin(qp_ex, IBV_WR_SEND_WITH_IMM);

    if (wr != NULL) {
        wr->imm_data = imm_data;
    }
}

static void sn_wr_rdma(struct ibv_qp_ex *qp_ex, enum ibv_wr_opcode opcode,
                       uint32_t rkey, uint64_t remote_addr, __be32 imm_data)
{
    struct ibv_send_wr *wr = sn_wr_begin(qp_ex, opcode);

    if (wr != NULL) {
        wr->wr.rdma.rkey        = rkey;
        wr->wr.rdma.remote_addr = remote_addr;
        wr->imm_data            = imm_data;
    }
}

static void sn_wr_rdma_write(struct ibv_qp_ex *qp_ex, uint32_t rkey,
                             uint64_t remote_addr)
{
    sn_wr_rdma(qp_ex, IBV_WR_RDMA_WRITE, rkey, remote_addr, 0);
}

static void sn_wr_rdma_write_imm(struct ibv_qp_ex *qp_ex, uint32_t rkey,
                                 uint64_t remote_addr, __be32 imm_data)
{
    sn_wr_rdma(qp_ex, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, remote_addr,
               imm_data);
}

static void sn_wr_rdma_read(struct ibv_qp_ex *qp_ex, uint32_t rkey,
                            uint64_t remote_addr)
{
    sn_wr_rdma(qp_ex, IBV_WR_RDMA_READ, rkey, remote_addr, 0);
}

/* ---- setters ---- */

static void sn_wr_set_sge_list(struct ibv_qp_ex *qp_ex, size_t num_sge,
                               const struct ibv_sge *sg_list)
{
    sn_qp_t *qp            = sn_qp_of_ex(qp_ex);
    struct ibv_send_wr *wr = qp->wr_batch->cur;
    size_t i;

    if (sn_unlikely(wr == NULL)) {
        return;                 /* its builder failed */
    }
    if (sn_unlikely(num_sge > qp->attr.cap.max_send_sge)) {
        sn_wr_fail(qp->wr_batch, ENOMEM);   /* as mlx5 */
        return;
    }
    for (i = 0; i < num_sge; ++i) {
        wr->sg_list[i] = sg_list[i];
    }
    wr->num_sge       = (int)num_sge;
    qp->wr_batch->cur = NULL;
}

static void sn_wr_set_sge(struct ibv_qp_ex *qp_ex, uint32_t lkey,
                          uint64_t addr, uint32_t length)
{
    struct ibv_sge sge = { .addr = addr, .length = length, .lkey = lkey };

    sn_wr_set_sge_list(qp_ex, 1, &sge);
}

/* The data are copied now: the caller may reuse its buffers on return */
static void sn_wr_set_inline_data_list(struct ibv_qp_ex *qp_ex,
                                       size_t num_buf,
                                       const struct ibv_data_buf *buf_list)
{
    sn_wr_batch_t *batch   = sn_qp_of_ex(qp_ex)->wr_batch;
    struct ibv_send_wr *wr = batch->cur;
    uint8_t *dst;
    size_t i, len = 0;

    if (sn_unlikely(wr == NULL)) {
        return;
    }
    for (i = 0; i < num_buf; ++i) {
        len += buf_list[i].length;
    }
    if (sn_unlikely(len > batch->max_inline)) {
        sn_wr_fail(batch, ENOMEM);          /* as mlx5 */
        return;
    }
    dst = &batch->inline_buf[(size_t)(wr - batch->wrs) * batch->max_inline];
    for (i = 0, len = 0; i < num_buf; ++i) {
        memcpy(dst + len, buf_list[i].addr, buf_list[i].length);
        len += buf_list[i].length;
    }
    wr->sg_list[0].addr   = (uintptr_t)dst;
    wr->sg_list[0].length = (uint32_t)len;
    wr->sg_list[0].lkey   = 0;
    wr->num_sge           = 1;
    wr->send_flags       |= IBV_SEND_INLINE;
    batch->cur            = NULL;
}

static void sn_wr_set_inline_data(struct ibv_qp_ex *qp_ex, void *addr,
                                  size_t length)
{
    struct ibv_data_buf buf = { .addr = addr, .length = length };

    sn_wr_set_inline_data_list(qp_ex, 1, &buf);
}


/* ---- creation ---- */

static sn_wr_batch_t *sn_wr_batch_alloc(uint32_t max_wr, uint32_t max_inline)
{
    sn_wr_batch_t *batch = calloc(1, sizeof(*batch));
    size_t n             = (max_wr != 0) ? max_wr : 1;

    if (batch == NULL) {
        return NULL;
    }
    pthread_spin_init(&batch->lock, PTHREAD_PROCESS_PRIVATE);
    batch->max_wr     = max_wr;
    batch->max_inline = max_inline;
    batch->wrs        = calloc(n, sizeof(*batch->wrs));
    batch->sges       = calloc(n * SN_MAX_SGE, sizeof(*batch->sges));
    batch->inline_buf = calloc(n, (max_inline != 0) ? max_inline : 1);
    if ((batch->wrs == NULL) || (batch->sges == NULL) ||
        (batch->inline_buf == NULL)) {
        sn_wr_batch_free(batch);
        return NULL;
    }
    return batch;
}

void sn_wr_batch_free(sn_wr_batch_t *batch)
{
    if (batch == NULL) {
        return;
    }
    free(batch->inline_buf);
    free(batch->sges);
    free(batch->wrs);
    pthread_spin_destroy(&batch->lock);
    free(batch);
}

static void sn_qp_ex_fill_ops(struct ibv_qp_ex *qp_ex)
{
    qp_ex->wr_start                = sn_wr_start;
    qp_ex->wr_complete             = sn_wr_complete;
    qp_ex->wr_abort                = sn_wr_abort;
    qp_ex->wr_send                 = sn_wr_send;
    qp_ex->wr_send_imm             = sn_wr_send_imm;
    qp_ex->wr_rdma_write           = sn_wr_rdma_write;
    qp_ex->wr_rdma_write_imm       = sn_wr_rdma_write_imm;
    qp_ex->wr_rdma_read            = sn_wr_rdma_read;
    qp_ex->wr_set_sge              = sn_wr_set_sge;
    qp_ex->wr_set_sge_list         = sn_wr_set_sge_list;
    qp_ex->wr_set_inline_data      = sn_wr_set_inline_data;
    qp_ex->wr_set_inline_data_list = sn_wr_set_inline_data_list;
}

static int sn_qp_init_attr_ex_check(const struct ibv_qp_init_attr_ex *attr)
{
    const uint32_t known = IBV_QP_INIT_ATTR_PD |
                           IBV_QP_INIT_ATTR_CREATE_FLAGS |
                           IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;

    if ((attr->comp_mask & ~known) || !(attr->comp_mask & IBV_QP_INIT_ATTR_PD) ||
        (attr->pd == NULL)) {
        return EINVAL;
    }
    if (((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) &&
         (attr->create_flags != 0)) ||
        ((attr->qp_type != IBV_QPT_RC) && (attr->qp_type != IBV_QPT_UD))) {
        return EOPNOTSUPP;
    }
    /* mlx5_qp_fill_wr_pfns' answer for ops a QP cannot carry; the extended
     * post API is RC's here */
    if ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
        ((attr->qp_type != IBV_QPT_RC) ||
         (attr->send_ops_flags & ~(uint64_t)SN_QP_EX_SEND_OPS))) {
        return EOPNOTSUPP;
    }
    return 0;
}

struct ibv_qp *sn_create_qp_ex(struct ibv_context *context,
                               struct ibv_qp_init_attr_ex *attr)
{
    struct ibv_qp_init_attr basic;
    struct ibv_qp *ibv_qp;
    sn_qp_t *qp;
    int ret;

    ret = sn_qp_init_attr_ex_check(attr);
    if ((ret == 0) && (attr->pd->context != context)) {
        ret = EINVAL;
    }
    if (ret != 0) {
        errno = ret;
        return NULL;
    }
    memset(&basic, 0, sizeof(basic));
    basic.qp_context = attr->qp_context;
    basic.send_cq    = attr->send_cq;
    basic.recv_cq    = attr->recv_cq;
    basic.srq        = attr->srq;
    basic.cap        = attr->cap;
    basic.qp_type    = attr->qp_type;
    basic.sq_sig_all = attr->sq_sig_all;
    ibv_qp = softnic_create_qp(attr->pd, &basic);
    if (ibv_qp == NULL) {
        return NULL;
    }
    attr->cap = basic.cap;
    if (!(attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) {
        return ibv_qp;          /* no ibv_qp_ex, as libibverbs' VERBS_QP_EX */
    }
    qp           = sn_qp(ibv_qp);
    qp->wr_batch = sn_wr_batch_alloc(qp->sq_size,
                                     qp->attr.cap.max_inline_data);
    if (qp->wr_batch == NULL) {
        softnic_destroy_qp(ibv_qp);
        errno = ENOMEM;
        return NULL;
    }
    sn_qp_ex_fill_ops(&qp->ibv_ex);
    return ibv_qp;
}

struct ibv_qp_ex *softnic_qp_to_qp_ex(struct ibv_qp *ibv_qp)
{
    sn_qp_t *qp = sn_qp(ibv_qp);

    return (qp->wr_batch != NULL) ? &qp->ibv_ex : NULL;
}
