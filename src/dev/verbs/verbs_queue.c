/*
 * Verbs backend: completion queues and the tag-matching SRQ.
 *
 * Every CQ is an extended CQ (ibv_create_cq_ex) because only the extended
 * interface carries tag-matching information (ibv_wc_read_tm_info), and
 * mlx5 refuses a TM-SRQ whose CQ is not extended.
 */
#include "verbs_dev.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define TM_VERBS_CQ_WC_FLAGS  (IBV_WC_EX_WITH_BYTE_LEN | \
                               IBV_WC_EX_WITH_IMM      | \
                               IBV_WC_EX_WITH_QP_NUM   | \
                               IBV_WC_EX_WITH_TM_INFO)

/* What mlx5's poll calls return for a CQE they could not parse
 * (providers/mlx5/cq.c CQ_POLL_ERR); the software NIC returns the same */
#define TM_VERBS_CQ_POLL_ERR  (-2)

int tm_dev_create_cq(tm_dev_t *tdev, unsigned depth, tm_dev_cq_t **cq_p)
{
    tm_verbs_dev_t *dev = tm_verbs_dev(tdev);
    unsigned max_cqe    = (unsigned)dev->dev_attr.orig_attr.max_cqe;
    struct ibv_cq_init_attr_ex attr;
    tm_dev_cq_t *cq;
    int ret;

    memset(&attr, 0, sizeof(attr));
    attr.cqe      = (depth == 0) ? 1 : ((depth < max_cqe) ? depth : max_cqe);
    attr.wc_flags = TM_VERBS_CQ_WC_FLAGS;

    cq = calloc(1, sizeof(*cq));
    if (cq == NULL) {
        return ENOMEM;
    }

    attr.cq_context = cq;   /* what its IBV_EVENT_CQ_ERR names */
    errno  = 0;
    cq->cq = ibv_create_cq_ex(dev->ctx, &attr);
    if (cq->cq == NULL) {
        ret = (errno != 0) ? errno : ENOMEM;
        tm_dev_debug("verbs: %s: ibv_create_cq_ex(%u entries) failed: %s",
                     tdev->name, attr.cqe, strerror(ret));
        free(cq);
        return ret;
    }

    if (attr.cqe < depth) {
        tm_dev_debug("verbs: %s: CQ depth %u clamped to %u", tdev->name,
                     depth, attr.cqe);
    }

    cq->dev = tdev;
    *cq_p   = cq;
    return 0;
}

void tm_dev_destroy_cq(tm_dev_cq_t *cq)
{
    int ret;

    ret = tm_verbs_lib_of(cq->dev)->destroy_cq(ibv_cq_ex_to_cq(cq->cq));
    if (ret != 0) {
        /* A QP or SRQ still uses it: a caller bug; do not free what the
         * library still references */
        tm_dev_warn("verbs: %s: ibv_destroy_cq() failed: %s",
                    cq->dev->name, strerror(ret));
        return;
    }
    free(cq);
}

/*
 * Whether a tag-matching completion names its QP.  mlx5_cq_read_wc_qp_num
 * reads the CQE's qpn field whatever the CQE (providers/mlx5/cq.c), and a
 * CQE without a packet (MLX5_CQE_NO_PACKET) may leave it unfilled: no
 * source says firmware fills it.  By mlx5_cq_read_wc_opcode and
 * mlx5_cq_read_wc_flags, the MATCH-only completions are TM_CONSUMED (0x1,
 * read only without a packet: a rendezvous the NIC reads, an eager message
 * over a packet) and CONSUMED_SW_RDNV (0x9, status TM_RNDV_INCOMPLETE, read
 * only with a packet); a final completion read as IBV_WC_SEND is
 * MSG_COMPLETION_CANCELED without a packet.  Those without a packet give
 * QP number 0: nothing may depend on a value firmware need not write.
 */
static TM_ALWAYS_INLINE int tm_verbs_wc_names_qp(const tm_dev_wc_t *wc)
{
    if ((wc->wc_flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID)) ==
        IBV_WC_TM_MATCH) {
        return wc->status == IBV_WC_TM_RNDV_INCOMPLETE;
    }
    return wc->opcode != IBV_WC_SEND;
}

/* What the completion the extended CQ points at says: only the fields its
 * kind has are read (a call through the CQ each) */
static TM_ALWAYS_INLINE void tm_verbs_wc_read_inline(struct ibv_cq_ex *cq,
                                                     tm_dev_wc_t *wc)
{
    wc->wr_id      = cq->wr_id;
    wc->status     = cq->status;
    wc->opcode     = ibv_wc_read_opcode(cq);
    wc->byte_len   = 0;
    wc->wc_flags   = 0;
    wc->imm_data   = 0;
    wc->vendor_err = 0;
    memset(&wc->tm_info, 0, sizeof(wc->tm_info));
    if (tm_unlikely(wc->status != IBV_WC_SUCCESS)) {
        /* defined for failed completions only */
        wc->vendor_err = ibv_wc_read_vendor_err(cq);
    }

    switch (wc->opcode) {
    case IBV_WC_TM_ADD:
    case IBV_WC_TM_DEL:
    case IBV_WC_TM_SYNC:
        /* list operations concern no connection */
        wc->qp_num   = 0;
        wc->wc_flags = ibv_wc_read_wc_flags(cq);    /* SYNC_REQ */
        return;
    case IBV_WC_SEND:
        if (tm_unlikely(wc->status == IBV_WC_TM_RNDV_INCOMPLETE)) {
            /* not a send: mlx5's final completion of a software
             * rendezvous in its MSG_COMPLETION_CANCELED form, without a
             * packet, reads as opcode 0 (mlx5_cq_read_wc_opcode has no
             * case for it); its flags (MATCH | DATA_VALID) say what it is */
            break;
        }
        wc->qp_num   = ibv_wc_read_qp_num(cq);
        return;
    case IBV_WC_RDMA_WRITE:
        wc->qp_num   = ibv_wc_read_qp_num(cq);
        return;
    case IBV_WC_RDMA_READ:
        wc->qp_num   = ibv_wc_read_qp_num(cq);
        wc->byte_len = ibv_wc_read_byte_len(cq);
        return;
    default:
        break;
    }

    wc->byte_len = ibv_wc_read_byte_len(cq);
    wc->wc_flags = ibv_wc_read_wc_flags(cq);
    wc->qp_num   = tm_verbs_wc_names_qp(wc) ? ibv_wc_read_qp_num(cq) : 0;
    if (wc->wc_flags & IBV_WC_WITH_IMM) {
        wc->imm_data = ibv_wc_read_imm_data(cq);    /* big endian */
    }
    if (wc->opcode != IBV_WC_TM_RECV) {
        return;
    } else if (!(wc->wc_flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID))) {
        /* mlx5 reports a tagged message that matched nothing as TM_RECV
         * with neither MATCH nor DATA_VALID.  The interface reports it as
         * what it is: the whole message in an untagged SRQ buffer, its tag
         * in the header there (the CQE's tag means nothing) */
        wc->opcode = IBV_WC_RECV;
        return;
    }

    ibv_wc_read_tm_info(cq, &wc->tm_info);
}

void tm_verbs_wc_read(struct ibv_cq_ex *cq, tm_dev_wc_t *wc)
{
    tm_verbs_wc_read_inline(cq, wc);
}

/*
 * What a failed poll returns, as a negative errno.  mlx5's poll calls fail
 * with CQ_POLL_ERR (-2) when mlx5_parse_cqe cannot parse the CQE it took
 * (an unknown QP or SRQ, a NO_PACKET CQE that is not tag matching, a TM CQE
 * on a QP without SRQ, a failed inline scatter): the CQE is consumed and
 * lost, later ones can still be polled (providers/mlx5/cq.c
 * mlx5_start_poll, mlx5_next_poll, poll_cq).  Negated, that would read as a
 * count of 2.  A positive return is an errno (EINVAL ...).
 */
static TM_NOINLINE int tm_verbs_poll_error(tm_dev_cq_t *cq, const char *func,
                                           int ret)
{
    if (ret < 0) {
        tm_dev_error("verbs: %s: %s() failed (%d): a completion the "
                     "provider could not parse was lost", cq->dev->name,
                     func, ret);
        return -EBADMSG;
    }
    tm_dev_debug("verbs: %s: %s() failed: %s", cq->dev->name, func,
                 strerror(ret));
    return -ret;
}

/* A CQ without tag-matching completions (sends only): ibv_poll_cq, one
 * call for a batch */
static int tm_verbs_poll_cq_plain(tm_dev_cq_t *cq, int max, tm_dev_wc_t *wc)
{
    struct ibv_wc ibv_wc[TM_VERBS_POLL_MAX];
    int i, n;

    n = ibv_poll_cq(ibv_cq_ex_to_cq(cq->cq),
                    (max < TM_VERBS_POLL_MAX) ? max : TM_VERBS_POLL_MAX,
                    ibv_wc);
    if (tm_unlikely(n < 0)) {
        /* mlx5 (poll_cq) then also drops what it read before in the
         * call; an overrun CQ does not fail its polls (IBV_EVENT_CQ_ERR) */
        return (n == TM_VERBS_CQ_POLL_ERR) ?
               tm_verbs_poll_error(cq, "ibv_poll_cq", n) : -EIO;
    }
    for (i = 0; i < n; ++i) {
        wc[i].wr_id        = ibv_wc[i].wr_id;
        wc[i].status       = ibv_wc[i].status;
        wc[i].opcode       = ibv_wc[i].opcode;
        wc[i].byte_len     = ibv_wc[i].byte_len;
        wc[i].qp_num       = ibv_wc[i].qp_num;
        wc[i].wc_flags     = ibv_wc[i].wc_flags;
        wc[i].imm_data     = ibv_wc[i].imm_data;
        wc[i].vendor_err   = ibv_wc[i].vendor_err;
        wc[i].tm_info.tag  = 0;
        wc[i].tm_info.priv = 0;
    }
    return n;
}

/* The error of an earlier ibv_next_poll, once */
static TM_NOINLINE int tm_verbs_poll_err_take(tm_dev_cq_t *cq)
{
    int err = cq->err;

    cq->err = 0;
    return err;
}

/* The batch ibv_start_poll began: its completions, until max or ENOENT */
static TM_NOINLINE int tm_verbs_poll_batch(tm_dev_cq_t *cq, int max,
                                           tm_dev_wc_t *wc)
{
    int count = 0;
    int ret;

    for (;;) {
        tm_verbs_wc_read_inline(cq->cq, &wc[count++]);
        if (count == max) {
            break;
        }

        ret = ibv_next_poll(cq->cq);
        if (ret == ENOENT) {
            break;
        } else if (tm_unlikely(ret != 0)) {
            /* The batch still ends with end_poll; the completions read
             * stay valid: they go now, the error with the next poll */
            cq->err = tm_verbs_poll_error(cq, "ibv_next_poll", ret);
            break;
        }
    }

    ibv_end_poll(cq->cq);
    return count;
}

/* Most polls find nothing: that path stays short */
int tm_dev_poll_cq(tm_dev_cq_t *cq, int max, tm_dev_wc_t *wc)
{
    struct ibv_poll_cq_attr attr = {0};
    int ret;

    if (tm_unlikely((max <= 0) || (cq->err != 0))) {
        return (max <= 0) ? 0 : tm_verbs_poll_err_take(cq);
    } else if (!cq->tm) {
        return tm_verbs_poll_cq_plain(cq, max, wc);
    }

    ret = ibv_start_poll(cq->cq, &attr);
    if (ret == ENOENT) {
        return 0;
    } else if (tm_unlikely(ret != 0)) {
        /* No batch was started: end_poll must not be called (mlx5 has
         * released its lock) */
        return tm_verbs_poll_error(cq, "ibv_start_poll", ret);
    }
    return tm_verbs_poll_batch(cq, max, wc);
}


/*
 * Tag-matching SRQ
 */
int tm_dev_create_srq(tm_dev_t *tdev, tm_dev_cq_t *recv_cq,
                      tm_dev_srq_t **srq_p)
{
    tm_verbs_dev_t *dev = tm_verbs_dev(tdev);
    struct ibv_srq_init_attr_ex attr;
    tm_verbs_srq_t *srq;
    int ret;

    memset(&attr, 0, sizeof(attr));
    attr.attr.max_wr          = dev->lim.srq_depth;
    attr.attr.max_sge         = 1;     /* one buffer per untagged receive */
    attr.comp_mask            = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                                IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
    attr.srq_type             = IBV_SRQT_TM;
    attr.pd                   = dev->pd;
    attr.cq                   = ibv_cq_ex_to_cq(recv_cq->cq);
    attr.tm_cap.max_num_tags  = dev->lim.max_num_tags;
    attr.tm_cap.max_ops       = dev->lim.max_ops;

    srq = calloc(1, sizeof(*srq));
    if (srq == NULL) {
        return ENOMEM;
    }

    errno          = 0;
    srq->super.srq = ibv_create_srq_ex(dev->ctx, &attr);
    if (srq->super.srq == NULL) {
        ret = (errno != 0) ? errno : ENOMEM;
        tm_dev_debug("verbs: %s: ibv_create_srq_ex(TM, %u tags, %u ops, "
                     "%u buffers) failed: %s", tdev->name,
                     dev->lim.max_num_tags, dev->lim.max_ops,
                     dev->lim.srq_depth, strerror(ret));
        free(srq);
        return ret;
    }

    /* The receive-only QPs' send CQ.  The NIC writes there only when one
     * of its reads or FINs fails or is flushed, and mlx5's poll would crash
     * on such a CQE (no send queue: rdma-core cq.c, MLX5_CQE_REQ_ERR), so
     * it is never polled; destroying a QP removes its CQEs from it, and an
     * overrun (IBV_EVENT_CQ_ERR) of it concerns no one */
    ret = tm_dev_create_cq(tdev, TM_VERBS_RX_SEND_CQ_DEPTH, &srq->rx_send_cq);
    if (ret != 0) {
        dev->lib->destroy_srq(srq->super.srq);
        free(srq);
        return ret;
    }

    srq->super.dev = tdev;
    srq->cq        = recv_cq;
    recv_cq->tm    = 1;     /* its completions need the extended reads */
    *srq_p         = &srq->super;
    return 0;
}

void tm_dev_destroy_srq(tm_dev_srq_t *tsrq)
{
    tm_verbs_srq_t *srq = (tm_verbs_srq_t*)tsrq;
    tm_verbs_conn_t *conn;
    int ret;

    ret = tm_verbs_lib_of(tsrq->dev)->destroy_srq(tsrq->srq);
    if (ret != 0) {
        tm_dev_warn("verbs: %s: ibv_destroy_srq() failed: %s",
                    tsrq->dev->name, strerror(ret));
        return;
    }
    /* the QPs it accepted went with it */
    while (srq->borrowed != NULL) {
        conn          = srq->borrowed;
        srq->borrowed = conn->next;
        free(conn);
    }
    tm_dev_destroy_cq(srq->rx_send_cq);
    free(srq);
}


/*
 * The probes' queues: an extended CQ and a smallest TM-SRQ on it, created
 * at open (tm_verbs_probe_queues) and, for a port on Ethernet, when listing
 */
int tm_verbs_probe_srq_create(const tm_verbs_lib_t *lib,
                              struct ibv_context *ctx, struct ibv_pd *pd,
                              const char *name, struct ibv_cq_ex **cq_p,
                              struct ibv_srq **srq_p)
{
    struct ibv_cq_init_attr_ex cq_attr;
    struct ibv_srq_init_attr_ex srq_attr;
    struct ibv_cq_ex *cq;
    struct ibv_srq *srq;
    int ret;

    memset(&cq_attr, 0, sizeof(cq_attr));
    cq_attr.cqe      = 4;
    cq_attr.wc_flags = TM_VERBS_CQ_WC_FLAGS;
    errno = 0;
    cq    = ibv_create_cq_ex(ctx, &cq_attr);
    if (cq == NULL) {
        ret = (errno != 0) ? errno : ENOMEM;
        tm_dev_debug("verbs: %s: probe CQ failed: %s", name, strerror(ret));
        return ret;
    }

    memset(&srq_attr, 0, sizeof(srq_attr));
    srq_attr.attr.max_wr         = TM_DEV_MIN_SRQ_DEPTH;
    srq_attr.attr.max_sge        = 1;
    srq_attr.comp_mask           = IBV_SRQ_INIT_ATTR_TYPE |
                                   IBV_SRQ_INIT_ATTR_PD |
                                   IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
    srq_attr.srq_type            = IBV_SRQT_TM;
    srq_attr.pd                  = pd;
    srq_attr.cq                  = ibv_cq_ex_to_cq(cq);
    srq_attr.tm_cap.max_num_tags = 1;
    srq_attr.tm_cap.max_ops      = 1;
    errno = 0;
    srq   = ibv_create_srq_ex(ctx, &srq_attr);
    if (srq == NULL) {
        ret = (errno != 0) ? errno : ENOMEM;
        tm_dev_debug("verbs: %s: cannot create a TM-SRQ: %s", name,
                     strerror(ret));
        lib->destroy_cq(ibv_cq_ex_to_cq(cq));
        return ret;
    }

    *cq_p  = cq;
    *srq_p = srq;
    return 0;
}

void tm_verbs_probe_srq_destroy(const tm_verbs_lib_t *lib,
                                struct ibv_cq_ex *cq, struct ibv_srq *srq)
{
    lib->destroy_srq(srq);
    lib->destroy_cq(ibv_cq_ex_to_cq(cq));
}

int tm_verbs_probe_tm_srq(const tm_verbs_lib_t *lib, struct ibv_context *ctx,
                          const char *name)
{
    struct ibv_cq_ex *cq;
    struct ibv_srq *srq;
    struct ibv_pd *pd;
    int ret;

    errno = 0;
    pd    = lib->alloc_pd(ctx);
    if (pd == NULL) {
        ret = (errno != 0) ? errno : ENOMEM;
        tm_dev_debug("verbs: %s: ibv_alloc_pd() failed: %s", name,
                     strerror(ret));
        return ret;
    }

    ret = tm_verbs_probe_srq_create(lib, ctx, pd, name, &cq, &srq);
    if (ret == 0) {
        tm_verbs_probe_srq_destroy(lib, cq, srq);
    }
    lib->dealloc_pd(pd);
    return ret;
}
