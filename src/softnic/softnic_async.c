/*
 * Software NIC: asynchronous events.
 *
 * Besides the port's events (softnic_port.c), the NIC raises two:
 *  - IBV_EVENT_CQ_ERR, once, when a CQ overruns (sn_cq_overrun).  On mlx5
 *    that is the only sign: the kernel reports the CQ's error event
 *    (drivers/infiniband/hw/mlx5/cq.c mlx5_ib_cq_event), while the
 *    provider's poll only checks the CQEs' ownership (providers/mlx5/cq.c
 *    get_sw_cqe), so the CQ just delivers nothing more.  Its polls do not
 *    fail.
 *  - IBV_EVENT_QP_LAST_WQE_REACHED: a QP
 * attached to an SRQ (all of ours are) that entered the error state will
 * take nothing more from the SRQ, and every completion of what it took is
 * on the CQs.  Not for a QP without a send queue, nor for one that never
 * left INIT (sn_qp_raises_last_wqe).  On a NIC the event comes after the
 * state change, once the QP's work in flight is over; a consumer that
 * destroys the QP earlier loses the completions still to come (destroy
 * purges the CQs).  The
 * software NIC takes the same reading: the event is raised by the device's
 * progress (a poll of the QP's send CQ, or the engine thread), never by
 * the state change itself, and only once the QP's sends are flushed onto
 * its CQ and no matched
 * transfer of its own is left in the SRQ's data stage (softnic_test.h's
 * DATA events).
 *
 * As through the kernel's uverbs:
 *  - software reads events (softnic_get_async_event, for
 *    ibv_get_async_event) and acknowledges each (softnic_ack_async_event);
 *  - an event not yet read when its QP is destroyed is dropped;
 *  - destroying a QP whose events were read but not all acknowledged
 *    waits for the acknowledgements, as libibverbs' ibv_cmd_destroy_qp
 *    waits for events_completed to reach the kernel's events_reported
 *    (another thread may be between its read and its ack: UCX's async
 *    thread is); where none comes within SN_EVENT_ACK_WAIT_S, libibverbs
 *    would wait forever: the software NIC reports it and aborts instead,
 *    so the bug shows in a test.
 * The context's async_fd is the read end of a pipe that holds one byte
 * while an event waits to be read, so poll(), select() and epoll (UCX's
 * async thread, level-triggered) see it readable then, as the kernel's
 * async event file is; a read with nothing pending fails with EAGAIN, as
 * a non-blocking read of that file does (softnic_get_async_event never
 * blocks).  Whoever adds an event raises it (sn_async_raise); a read takes
 * the byte and puts it back while events remain.  An event dropped unread
 * (its QP, CQ or SRQ destroyed) leaves the byte until the next read, which
 * finds nothing (EAGAIN) and takes it.
 */
#include "softnic_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How long destroying a QP waits for the acknowledgement of an event that
 * was read (libibverbs: forever) */
#define SN_EVENT_ACK_WAIT_S    5

/* sn_cq_t::overrun */
enum {
    SN_CQ_ERR_NONE,         /* delivering */
    SN_CQ_ERR_RAISED,       /* overran: IBV_EVENT_CQ_ERR waits to be read */
    SN_CQ_ERR_READ          /* ... and software read it */
};


/* ---- the context's event file descriptor ---- */

int sn_async_fd_open(sn_context_t *ctx)
{
    char path[64];
    int fds[2];
    int ret;

    if (pipe2(fds, O_CLOEXEC) != 0) {
        return errno;
    }
    /* a description of our own for draining: the user sets O_NONBLOCK on
     * async_fd or not (UCX and the device layer do), ours never blocks */
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fds[0]);
    ctx->async_drain_fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if ((ctx->async_drain_fd < 0) ||
        (fcntl(fds[1], F_SETFL, O_NONBLOCK) != 0)) {
        ret = errno;
        if (ctx->async_drain_fd >= 0) {
            close(ctx->async_drain_fd);
        }
        close(fds[0]);
        close(fds[1]);
        return ret;
    }
    ctx->vctx.context.async_fd = fds[0];
    ctx->async_wake_fd         = fds[1];
    atomic_store(&ctx->async_token, false);
    return 0;
}

void sn_async_fd_close(sn_context_t *ctx)
{
    close(ctx->async_drain_fd);
    close(ctx->async_wake_fd);
    close(ctx->vctx.context.async_fd);
}

/* An event was added (from any thread, the device lock held or not) */
void sn_async_raise(sn_context_t *ctx)
{
    static const char byte = 0;

    if (!atomic_exchange(&ctx->async_token, true)) {
        (void)!write(ctx->async_wake_fd, &byte, 1);
    }
}

/* An event not read yet (the device lock held) */
static bool sn_async_pending(sn_context_t *ctx)
{
    sn_list_t *it, *sit;
    sn_srq_t *srq;
    sn_cq_t *cq;

    if ((ctx->port.nevents != 0) || !sn_list_empty(&ctx->events)) {
        return true;
    }
    for (it = ctx->cqs.next; it != &ctx->cqs; it = it->next) {
        cq = sn_container_of(it, sn_cq_t, link);
        if (__atomic_load_n(&cq->overrun, __ATOMIC_ACQUIRE) ==
            SN_CQ_ERR_RAISED) {
            return true;
        }
        for (sit = cq->srqs.next; sit != &cq->srqs; sit = sit->next) {
            srq = sn_container_of(sit, sn_srq_t, link);
            if ((srq->rq != NULL) && srq->rq->limit_due) {
                return true;
            }
        }
    }
    return false;
}

/* After a read (the device lock held): the byte goes, and comes back
 * while events remain.  Taken first, so that an event raised meanwhile,
 * which found the byte there and wrote none, is seen by the look after */
static void sn_async_settle(sn_context_t *ctx)
{
    char byte;

    if (atomic_exchange(&ctx->async_token, false)) {
        (void)!read(ctx->async_drain_fd, &byte, 1);
    }
    if (sn_async_pending(ctx)) {
        sn_async_raise(ctx);
    }
}

/* A full CQ overran (from the NIC's work, which may not hold the context's
 * lock): it takes no more entries, and its error event is raised once */
void sn_cq_overrun(sn_cq_t *cq)
{
    int none = SN_CQ_ERR_NONE;

    if (__atomic_compare_exchange_n(&cq->overrun, &none, SN_CQ_ERR_RAISED,
                                    false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_RELAXED)) {
        sn_warn("CQ %p overrun: more completions than its %u entries",
                (void*)cq, cq->depth);
        sn_async_raise(sn_ctx(cq->ex.context));
    }
}

/* A CQ's error event not read yet (the context's lock held: a CQ leaves
 * ctx->cqs, with its unread event, when it is destroyed) */
static bool sn_cq_err_event_get(sn_context_t *ctx,
                                struct ibv_async_event *event)
{
    int raised;
    sn_list_t *it;
    sn_cq_t *cq;

    for (it = ctx->cqs.next; it != &ctx->cqs; it = it->next) {
        cq     = sn_container_of(it, sn_cq_t, link);
        raised = SN_CQ_ERR_RAISED;
        if (__atomic_compare_exchange_n(&cq->overrun, &raised,
                                        SN_CQ_ERR_READ, false,
                                        __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            memset(event, 0, sizeof(*event));
            event->event_type = IBV_EVENT_CQ_ERR;
            event->element.cq = ibv_cq_ex_to_cq(&cq->ex);
            return true;
        }
    }
    return false;
}

/* Whether the QP will say it reached its last WQE once in error.  No
 * source says that firmware raises the event for a QP without a send queue
 * (UCX waits for it on its send QP only) or for one that never left INIT
 * (nothing in flight to end): the harsher reading, it never comes for
 * them.  Every QP that leaves INIT gets its outbound ring (sn_qp_set_out). */
static bool sn_qp_raises_last_wqe(const sn_qp_t *qp)
{
    return !qp->rx_only && (qp->out != NULL);
}

/* From the device's progress: raises the event when the QP's last work
 * is done */
void sn_qp_last_wqe_check(sn_qp_t *qp)
{
    sn_context_t *ctx = sn_qp_ctx(qp);

    if (!sn_qp_raises_last_wqe(qp)) {
        qp->last_wqe_due = false;
        return;
    }
    if ((qp->ibv.state != IBV_QPS_ERR) || (qp->sq_head != qp->sq_tail) ||
        (qp->xfers_queued != 0)) {
        return;
    }
    sn_debug("QP 0x%x: last WQE reached", qp->ibv.qp_num);
    qp->last_wqe_due = false;
    sn_list_add_tail(&ctx->events, &qp->event_link);
    sn_async_raise(ctx);
}

/* The QP goes: an event software has not read goes with it */
void sn_qp_events_drop(sn_qp_t *qp)
{
    sn_list_del(&qp->event_link);
}

int softnic_get_async_event(struct ibv_context *context,
                            struct ibv_async_event *event)
{
    sn_context_t *ctx = sn_ctx(context);
    sn_qp_t *qp;

    sn_ctx_lock(ctx);           /* the engine raises them */
    if (sn_port_event_get(ctx, event) ||   /* nothing to acknowledge */
        sn_cq_err_event_get(ctx, event) || sn_rq_event_get(ctx, event)) {
        sn_async_settle(ctx);
        sn_ctx_unlock(ctx);
        return 0;
    }
    if (sn_list_empty(&ctx->events)) {
        sn_async_settle(ctx);
        sn_ctx_unlock(ctx);
        errno = EAGAIN;
        return -1;
    }
    qp = sn_container_of(ctx->events.next, sn_qp_t, event_link);
    sn_list_del(&qp->event_link);
    __atomic_add_fetch(&qp->events_reported, 1, __ATOMIC_RELEASE);
    sn_async_settle(ctx);
    sn_ctx_unlock(ctx);
    event->event_type = IBV_EVENT_QP_LAST_WQE_REACHED;
    event->element.qp = &qp->ibv;
    return 0;
}

void softnic_ack_async_event(struct ibv_async_event *event)
{
    struct ibv_qp *qp = event->element.qp;
    struct ibv_cq *cq = event->element.cq;

    if (event->event_type == IBV_EVENT_CQ_ERR) {
        /* as libibverbs counts it (ibv_destroy_cq waits for the count) */
        pthread_mutex_lock(&cq->mutex);
        ++cq->async_events_completed;
        pthread_cond_signal(&cq->cond);
        pthread_mutex_unlock(&cq->mutex);
        return;
    }
    if (event->event_type == IBV_EVENT_SRQ_LIMIT_REACHED) {
        pthread_mutex_lock(&event->element.srq->mutex);
        ++event->element.srq->events_completed;
        pthread_cond_signal(&event->element.srq->cond);
        pthread_mutex_unlock(&event->element.srq->mutex);
        return;
    }
    if (event->event_type != IBV_EVENT_QP_LAST_WQE_REACHED) {
        return;
    }
    pthread_mutex_lock(&qp->mutex);
    ++qp->events_completed;
    pthread_cond_signal(&qp->cond);
    pthread_mutex_unlock(&qp->mutex);
}

/* Before a QP that software destroys goes: its events read are all
 * acknowledged, or will be soon */
void sn_qp_events_check_acked(sn_qp_t *qp)
{
    struct timespec deadline;
    uint32_t reported;
    int ret = 0;

    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += SN_EVENT_ACK_WAIT_S;
    pthread_mutex_lock(&qp->ibv.mutex);
    for (;;) {
        reported = __atomic_load_n(&qp->events_reported, __ATOMIC_ACQUIRE);
        if ((reported == qp->ibv.events_completed) || (ret == ETIMEDOUT)) {
            break;
        }
        ret = pthread_cond_timedwait(&qp->ibv.cond, &qp->ibv.mutex,
                                     &deadline);
    }
    pthread_mutex_unlock(&qp->ibv.mutex);
    if (reported == qp->ibv.events_completed) {
        return;
    }
    sn_error("QP 0x%x destroyed with %u asynchronous event(s) read and not "
             "acknowledged for %d s: ibv_destroy_qp waits for them forever",
             qp->ibv.qp_num, reported - qp->ibv.events_completed,
             SN_EVENT_ACK_WAIT_S);
    abort();
}
