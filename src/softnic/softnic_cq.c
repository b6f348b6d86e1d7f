/*
 * Software NIC: completion queues.
 *
 * Every CQ is an extended CQ (struct ibv_cq_ex): ibv_start_poll() first
 * runs the NIC's work for the CQ (the receive side of the TM-SRQs that
 * complete here, the send side of the QPs that complete here; the receive
 * side only in SOFTNIC_MODE_AUTO), then makes the oldest entry current;
 * ibv_next_poll() moves to the next; ibv_end_poll() consumes those read.
 * ibv_poll_cq() works too (without the TM information).  With an engine
 * thread (softnic_engine.c) the engine does that work and a poll only
 * reads: the CQ is a single-producer single-consumer queue, the NIC
 * writing entries and publishing them (ready, release), software reading
 * up to ready (acquire) and giving them back (head, release), as a NIC's
 * CQ is shared with its driver.
 *
 * The NIC does not wait for room in a CQ: a full one overruns, as on a
 * NIC.  mlx5's poll only reads CQEs that software owns, so an overrun CQ
 * is not seen there: it just delivers nothing more (what it held before
 * is still polled), and the only signal is IBV_EVENT_CQ_ERR on the async
 * events (softnic_async.c).  Software sizes its CQs for every completion
 * it may have outstanding.
 *
 * rdma-core's mlx5 provider does part of the tag-matching work when a
 * completion is polled (a receive's wr_id, freeing list handles, SYNC_REQ):
 * so does this one (sn_srq_cqe_poll), at the same moment.  A destroyed QP's
 * unpolled completions are removed (sn_cq_purge_qp), as mlx5's are.
 *
 * A CQE the provider cannot parse (softnic_test_push_unparseable_cqe) fails
 * the poll call that takes it with -2 and is consumed, as mlx5's
 * CQ_POLL_ERR (providers/mlx5/cq.c mlx5_start_poll, mlx5_next_poll,
 * poll_cq: the last also drops what it read before in the call).
 */
#include "softnic_int.h"
#include "softnic_channel.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* mlx5's return for a CQE mlx5_parse_cqe fails on, and such a CQE's kind
 * (a value no sn_cqe_kind_t has) */
#define SN_CQ_POLL_ERR      (-2)
#define SN_CQE_UNPARSEABLE  0xff

#define SN_CQ_WC_FLAGS  (IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | \
                         IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP | \
                         IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | \
                         IBV_WC_EX_WITH_DLID_PATH_BITS | \
                         IBV_WC_EX_WITH_TM_INFO)

/* mlx5's poll of a requester CQE takes its wr_id from the QP's send queue
 * (rdma-core providers/mlx5/cq.c, MLX5_CQE_REQ_ERR: sq.wrid, sq.wqe_head);
 * a QP created with max_send_wr 0 has none allocated and the poll crashes.
 * The harsher reading of a crash: abort */
static void sn_cqe_check_parseable(const sn_cqe_t *cqe)
{
    if (sn_unlikely(cqe->kind == SN_CQE_REQ_NO_SQ)) {
        sn_error("QP 0x%x: requester CQE (%s) polled for a QP created "
                 "without a send queue: mlx5's poll dereferences the send "
                 "queue it has not", cqe->qp_num,
                 ibv_wc_status_str(cqe->status));
        abort();
    }
}

static inline const sn_cqe_t *sn_cq_current(struct ibv_cq_ex *ex)
{
    return sn_cq(ex)->cur_cqe;
}

/* The NIC's work whose completions come to this CQ (each poll inline, each
 * round of the engine: the checks that find nothing to do are inline); how
 * much was done */
static inline unsigned sn_cq_run(sn_cq_t *cq)
{
    sn_context_t *ctx = sn_ctx(cq->ex.context);
    sn_list_t *it, *next;
    unsigned work = 0;
    uint32_t sq_head, sq_sent;
    sn_srq_t *srq;
    sn_qp_t *qp;

    work += sn_rdma_serve(ctx);
    for (it = cq->srqs.next; it != &cq->srqs; it = it->next) {
        srq = sn_container_of(it, sn_srq_t, link);
        if (sn_unlikely(atomic_load_explicit(&srq->seg->requests,
                                             memory_order_acquire) !=
                        srq->accepted)) {
            sn_srq_accept(srq);
            ++work;
        }
        if (sn_likely(ctx->mode == SOFTNIC_MODE_AUTO)) {
            work += sn_srq_progress(srq);
        }
    }
    for (it = cq->send_busy.next; it != &cq->send_busy; it = next) {
        next    = it->next;
        qp      = sn_container_of(it, sn_qp_t, busy_link);
        sq_head = qp->sq_head;
        sq_sent = qp->sq_sent;
        sn_qp_progress_send(qp);
        work   += (qp->sq_head != sq_head) + (qp->sq_sent != sq_sent);
        if (!sn_qp_waits_on_peer(qp) && !qp->last_wqe_due) {
            sn_list_del(&qp->busy_link);
        }
    }
    return work;
}

unsigned sn_cq_work(sn_cq_t *cq)
{
    return sn_cq_run(cq);
}

/* Inline, a poll does the NIC's work first; with an engine the poll reads
 * what the engine published, and when that is nothing it lends the device
 * its thread (sn_engine_assist).  A poll that would find nothing takes a
 * held match (softnic_hold.c) */
static inline uint32_t sn_cq_poll_prepare(sn_cq_t *cq)
{
    sn_context_t *ctx = sn_ctx(cq->ex.context);
    uint32_t ready;

    sn_engine_check_mode(ctx);
    if (!ctx->threaded) {
        sn_cq_run(cq);
        if (sn_unlikely(cq->held != NULL) && (cq->head == cq->tail)) {
            sn_cq_release_held_on_empty(cq);
        }
        cq->ready = cq->tail;
        return cq->tail;
    }
    ready = __atomic_load_n(&cq->ready, __ATOMIC_ACQUIRE);
    if (cq->head != ready) {
        return ready;
    }
    sn_engine_assist(ctx);
    ready = __atomic_load_n(&cq->ready, __ATOMIC_ACQUIRE);
    if ((cq->head == ready) &&
        sn_unlikely(__atomic_load_n(&cq->held, __ATOMIC_RELAXED) != NULL)) {
        sn_cq_release_held_on_empty(cq);
        ready = __atomic_load_n(&cq->ready, __ATOMIC_ACQUIRE);
    }
    return ready;
}

/* The polled entry: what the provider does at poll for a TM completion is
 * done now, once (cur only moves forward); SN_CQ_POLL_ERR when the provider
 * could not parse it */
static inline int sn_cq_load(sn_cq_t *cq)
{
    sn_cqe_t *cqe = &cq->cqe[cq->cur & (cq->depth - 1)];

    cq->cur_cqe = cqe;
    if (cqe->kind != SN_CQE_PLAIN) {
        if (sn_unlikely(cqe->kind == SN_CQE_UNPARSEABLE)) {
            return SN_CQ_POLL_ERR;
        }
        sn_cqe_check_parseable(cqe);
        sn_srq_cqe_poll(cqe);
    }
    cq->ex.status = cqe->status;
    cq->ex.wr_id  = cqe->wr_id;
    return 0;
}

static int sn_start_poll(struct ibv_cq_ex *ex, struct ibv_poll_cq_attr *attr)
{
    sn_cq_t *cq = sn_cq(ex);
    uint32_t ready;

    if (sn_unlikely(attr->comp_mask != 0)) {
        return EINVAL;
    }
    ready = sn_cq_poll_prepare(cq);
    if (cq->head == ready) {
        return ENOENT;
    }
    cq->cur_end = ready;
    cq->cur = cq->head;
    if (sn_unlikely(sn_cq_load(cq) != 0)) {
        /* consumed: no end_poll follows a failed start */
        __atomic_store_n(&cq->head, cq->cur + 1, __ATOMIC_RELEASE);
        return SN_CQ_POLL_ERR;
    }
    return 0;
}

static int sn_next_poll(struct ibv_cq_ex *ex)
{
    sn_cq_t *cq = sn_cq(ex);

    if (cq->cur + 1 == cq->cur_end) {
        return ENOENT;
    }
    ++cq->cur;
    return sn_cq_load(cq);  /* a failed one is consumed by end_poll */
}

static void sn_end_poll(struct ibv_cq_ex *ex)
{
    sn_cq_t *cq = sn_cq(ex);

    /* release: our reads of the entries come before the NIC reuses them */
    __atomic_store_n(&cq->head, cq->cur + 1, __ATOMIC_RELEASE);
}

static enum ibv_wc_opcode sn_read_opcode(struct ibv_cq_ex *ex)
{
    return sn_cq_current(ex)->opcode;
}

static uint32_t sn_read_vendor_err(struct ibv_cq_ex *ex)
{
    return sn_cq_current(ex)->vendor_err;
}

static uint32_t sn_read_byte_len(struct ibv_cq_ex *ex)
{
    return sn_cq_current(ex)->byte_len;
}

static __be32 sn_read_imm_data(struct ibv_cq_ex *ex)
{
    return sn_cq_current(ex)->imm_data;
}

/* The QP number a completion reads.  A MATCH-only one other than a
 * software rendezvous's (CONSUMED_SW_RDNV, IBV_WC_TM_RNDV_INCOMPLETE, with a
 * packet) is mlx5's TM_CONSUMED, a CQE without a packet (rdma-core's
 * mlx5_cq_read_wc_opcode reads it only so), whose qpn field no source says
 * firmware fills: the harsher reading, 0.  cqe->qp_num still names its QP,
 * whose destruction removes it (sn_cq_purge_qp). */
static uint32_t sn_cqe_qp_num(const sn_cqe_t *cqe)
{
    if (sn_unlikely((cqe->wc_flags & (IBV_WC_TM_MATCH |
                                      IBV_WC_TM_DATA_VALID)) ==
                    IBV_WC_TM_MATCH) &&
        (cqe->status != IBV_WC_TM_RNDV_INCOMPLETE)) {
        return 0;
    }
    return cqe->qp_num;
}

static uint32_t sn_read_qp_num(struct ibv_cq_ex *ex)
{
    return sn_cqe_qp_num(sn_cq_current(ex));
}

static uint32_t sn_read_src_qp(struct ibv_cq_ex *ex)
{
    return sn_cq_current(ex)->src_qp;
}

static unsigned int sn_read_wc_flags(struct ibv_cq_ex *ex)
{
    return sn_cq_current(ex)->wc_flags;
}

static void sn_read_tm_info(struct ibv_cq_ex *ex,
                            struct ibv_wc_tm_info *tm_info)
{
    *tm_info = sn_cq_current(ex)->tm_info;
}

/* The path of a UD datagram (mlx5's CQE slid, sl, ml_path); 0 for RC,
 * whose completions say nothing of use there */
static uint32_t sn_read_slid(struct ibv_cq_ex *ex)
{
    return sn_cq_current(ex)->slid;
}

static uint8_t sn_read_sl(struct ibv_cq_ex *ex)
{
    return sn_cq_current(ex)->sl;
}

static uint8_t sn_read_dlid_path_bits(struct ibv_cq_ex *ex)
{
    return sn_cq_current(ex)->dlid_path_bits;
}

static __attribute__((noinline)) int
sn_poll_cq_read(sn_cq_t *cq, uint32_t ready, int num_entries,
                struct ibv_wc *wc)
{
    uint32_t head = cq->head;
    sn_cqe_t *cqe;
    int n;

    for (n = 0; (n < num_entries) && (head != ready); ++n) {
        cqe = &cq->cqe[head++ & (cq->depth - 1)];
        if (cqe->kind != SN_CQE_PLAIN) {
            if (sn_unlikely(cqe->kind == SN_CQE_UNPARSEABLE)) {
                /* consumed, with those read before it */
                n = SN_CQ_POLL_ERR;
                break;
            }
            sn_cqe_check_parseable(cqe);
            sn_srq_cqe_poll(cqe);
        }
        wc[n].wr_id      = cqe->wr_id;
        wc[n].status     = cqe->status;
        wc[n].opcode     = cqe->opcode;
        wc[n].vendor_err = cqe->vendor_err;
        wc[n].byte_len   = cqe->byte_len;
        wc[n].imm_data   = cqe->imm_data;
        wc[n].qp_num     = sn_cqe_qp_num(cqe);
        wc[n].wc_flags   = cqe->wc_flags;
        /* the path: a UD datagram's (softnic_ud.c), else 0 */
        wc[n].src_qp         = cqe->src_qp;
        wc[n].pkey_index     = 0;
        wc[n].slid           = cqe->slid;
        wc[n].sl             = cqe->sl;
        wc[n].dlid_path_bits = cqe->dlid_path_bits;
    }
    __atomic_store_n(&cq->head, head, __ATOMIC_RELEASE);
    return n;
}

/* Most polls find nothing: that path stays short */
int sn_poll_cq(struct ibv_cq *ibv_cq, int num_entries, struct ibv_wc *wc)
{
    sn_cq_t *cq    = sn_cq((struct ibv_cq_ex*)ibv_cq);
    uint32_t ready = sn_cq_poll_prepare(cq);

    if ((cq->head == ready) || (num_entries <= 0)) {
        return 0;
    }
    return sn_poll_cq_read(cq, ready, num_entries, wc);
}

void softnic_test_push_unparseable_cqe(struct ibv_srq *ibv_srq)
{
    sn_context_t *ctx;
    sn_cqe_t *cqe;

    if (!sn_is_softnic(ibv_srq->context)) {
        return;
    }
    ctx = sn_ctx(ibv_srq->context);
    sn_ctx_lock(ctx);
    cqe         = sn_cq_push(sn_srq(ibv_srq)->cq);
    cqe->kind   = SN_CQE_UNPARSEABLE;
    /* what a reader that took it for a completion would see */
    cqe->wr_id  = 0xbad0c0e;
    cqe->status = IBV_WC_SUCCESS;
    cqe->opcode = IBV_WC_RECV;
    cqe->qp_num = 0xffffff;
    if (ctx->threaded) {
        sn_ctx_publish(ctx);
    }
    sn_ctx_unlock(ctx);
    sn_ctx_kick(ctx, false);
}

void softnic_test_overrun_cq(struct ibv_srq *ibv_srq)
{
    sn_context_t *ctx;

    if (!sn_is_softnic(ibv_srq->context)) {
        return;
    }
    ctx = sn_ctx(ibv_srq->context);
    sn_ctx_lock(ctx);
    sn_cq_overrun(sn_srq(ibv_srq)->cq);
    sn_ctx_unlock(ctx);
    sn_ctx_kick(ctx, false);
}

struct ibv_cq_ex *sn_create_cq_ex(struct ibv_context *context,
                                  struct ibv_cq_init_attr_ex *attr)
{
    sn_context_t *ctx = sn_ctx(context);
    sn_cq_t *cq;
    int ret;

    /* comp_vector as the kernel's create_cq checks it */
    if ((attr->cqe == 0) || (attr->cqe > SN_MAX_CQE) ||
        (attr->comp_vector >= (uint32_t)context->num_comp_vectors) ||
        (attr->comp_mask & ~(uint32_t)IBV_CQ_INIT_ATTR_MASK_FLAGS) ||
        (attr->wc_flags & ~(uint64_t)SN_CQ_WC_FLAGS)) {
        errno = (attr->wc_flags & ~(uint64_t)SN_CQ_WC_FLAGS) ? EOPNOTSUPP :
                                                               EINVAL;
        return NULL;
    }
    if (attr->channel != NULL) {
        ret = sn_cq_channel_check(context, attr->channel);
        if (ret != 0) {
            errno = ret;
            return NULL;
        }
    }

    cq = calloc(1, sizeof(*cq));
    if (cq == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    /* room for the two completions of one matched message at least */
    cq->depth = sn_roundup_pow2((attr->cqe < 4) ? 4 : attr->cqe);
    /* and a slot past the ring for a held match (softnic_hold.c) */
    cq->cqe   = calloc(cq->depth + 1, sizeof(*cq->cqe));
    if (cq->cqe == NULL) {
        free(cq);
        errno = ENOMEM;
        return NULL;
    }

    cq->ex.context         = context;
    cq->ex.channel         = attr->channel;
    cq->ex.cq_context      = attr->cq_context;
    cq->ex.cqe             = (int)cq->depth;
    cq->ex.start_poll      = sn_start_poll;
    cq->ex.next_poll       = sn_next_poll;
    cq->ex.end_poll        = sn_end_poll;
    cq->ex.read_opcode     = sn_read_opcode;
    cq->ex.read_vendor_err = sn_read_vendor_err;
    cq->ex.read_byte_len   = sn_read_byte_len;
    cq->ex.read_imm_data   = sn_read_imm_data;
    cq->ex.read_qp_num     = sn_read_qp_num;
    cq->ex.read_src_qp     = sn_read_src_qp;
    cq->ex.read_wc_flags   = sn_read_wc_flags;
    cq->ex.read_slid       = sn_read_slid;
    cq->ex.read_sl         = sn_read_sl;
    cq->ex.read_dlid_path_bits = sn_read_dlid_path_bits;
    cq->ex.read_tm_info    = sn_read_tm_info;
    pthread_mutex_init(&cq->ex.mutex, NULL);
    pthread_cond_init(&cq->ex.cond, NULL);
    sn_list_init(&cq->srqs);
    sn_list_init(&cq->send_qps);
    sn_list_init(&cq->send_busy);
    sn_cq_channel_attach(cq);
    if ((attr->channel != NULL) && ctx->aside) {
        sn_engine_take_back(ctx);   /* its program may sleep on it */
    }
    sn_ctx_lock(ctx);
    sn_list_add_tail(&ctx->cqs, &cq->link);
    sn_ctx_unlock(ctx);
    return &cq->ex;
}

int softnic_destroy_cq(struct ibv_cq *ibv_cq)
{
    sn_cq_t *cq       = sn_cq((struct ibv_cq_ex*)ibv_cq);
    sn_context_t *ctx = sn_ctx(ibv_cq->context);

    sn_ctx_lock(ctx);
    if (!sn_list_empty(&cq->srqs) || !sn_list_empty(&cq->send_qps)) {
        sn_ctx_unlock(ctx);
        return EBUSY;       /* an SRQ or QP still completes here */
    }
    sn_list_del(&cq->link); /* the engine no longer sees it */
    cq->armed = 0;
    sn_ctx_unlock(ctx);
    sn_cq_channel_detach(cq);
    pthread_mutex_destroy(&cq->ex.mutex);
    pthread_cond_destroy(&cq->ex.cond);
    free(cq->cqe);
    free(cq);
    return 0;
}

/*
 * Removes the completions of QP qp_num that software has not polled yet,
 * keeping the others in order, as rdma-core's mlx5 provider does when it
 * destroys a QP (providers/mlx5/cq.c __mlx5_cq_clean, from mlx5_destroy_qp
 * on the QP's receive CQ, then its send CQ): sweeping from the newest back,
 * each kept entry moves over the removed ones, and the consumer index
 * advances past what was removed.
 *
 * Removed entries get none of the provider's work at poll
 * (sn_srq_cqe_poll), as __mlx5_cq_clean runs no handle_tag_matching: a
 * tagged message's completion keeps its entry's reference, so that handle
 * is never free again, and an unexpected message is not counted by the
 * provider.  The untagged buffer a removed receive used is gone: the NIC
 * took it at arrival, and mlx5 too only gives its WQE back to the SRQ's
 * free list (mlx5_free_srq_wqe), where a new post may use it.  List
 * operations complete with QP number 0 (mlx5: its command QP's) and are
 * never removed.
 */
void sn_cq_purge_qp(sn_cq_t *cq, uint32_t qp_num)
{
    uint32_t mask  = cq->depth - 1;
    uint32_t freed = 0;
    uint32_t i     = cq->tail;
    sn_cqe_t *cqe;

    sn_cq_purge_held(cq, qp_num);
    while (i != cq->head) {
        cqe = &cq->cqe[--i & mask];
        if (cqe->qp_num == qp_num) {
            ++freed;
        } else if (freed != 0) {
            cq->cqe[(i + freed) & mask] = *cqe;
        }
    }
    if (freed != 0) {
        cq->head += freed;
        sn_debug("QP 0x%x destroyed: %u unpolled completions removed from "
                 "CQ %p", qp_num, freed, (void*)cq);
    }
}
