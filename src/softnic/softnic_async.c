/*
 * Software NIC: asynchronous events.
 *
 * Besides the port's events (softnic_port.c), the one event the NIC
 * raises is IBV_EVENT_QP_LAST_WQE_REACHED: a QP
 * attached to an SRQ (all of ours are) that entered the error state will
 * take nothing more from the SRQ, and every completion of what it took is
 * on the CQs.  On a NIC the event comes after the state change, once the
 * QP's work in flight is over; a consumer that destroys the QP earlier
 * loses the completions still to come (destroy purges the CQs).  The
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
 *  - destroying a QP whose events were read but not all acknowledged is
 *    where libibverbs waits forever (ibv_cmd_destroy_qp waits for
 *    events_completed to reach the kernel's events_reported): the software
 *    NIC reports it and aborts instead, so the bug shows in a test.
 * There is no file descriptor to wait on (context->async_fd is -1): a read
 * with nothing pending fails with EAGAIN, as a non-blocking one does.
 */
#include "softnic_int.h"

#include <errno.h>
#include <stdlib.h>

/* From the device's progress: raises the event when the QP's last work
 * is done */
void sn_qp_last_wqe_check(sn_qp_t *qp)
{
    sn_context_t *ctx = sn_qp_ctx(qp);

    if ((qp->ibv.state != IBV_QPS_ERR) || (qp->sq_head != qp->sq_tail) ||
        (qp->xfers_queued != 0)) {
        return;
    }
    sn_debug("QP 0x%x: last WQE reached", qp->ibv.qp_num);
    qp->last_wqe_due = false;
    sn_list_add_tail(&ctx->events, &qp->event_link);
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
    if (sn_port_event_get(ctx, event)) {    /* nothing to acknowledge */
        sn_ctx_unlock(ctx);
        return 0;
    }
    if (sn_list_empty(&ctx->events)) {
        sn_ctx_unlock(ctx);
        errno = EAGAIN;
        return -1;
    }
    qp = sn_container_of(ctx->events.next, sn_qp_t, event_link);
    sn_list_del(&qp->event_link);
    ++qp->events_reported;
    sn_ctx_unlock(ctx);
    event->event_type = IBV_EVENT_QP_LAST_WQE_REACHED;
    event->element.qp = &qp->ibv;
    return 0;
}

void softnic_ack_async_event(struct ibv_async_event *event)
{
    struct ibv_qp *qp = event->element.qp;

    if (event->event_type != IBV_EVENT_QP_LAST_WQE_REACHED) {
        return;
    }
    pthread_mutex_lock(&qp->mutex);
    ++qp->events_completed;
    pthread_cond_signal(&qp->cond);
    pthread_mutex_unlock(&qp->mutex);
}

/* Before a QP that software destroys goes */
void sn_qp_events_check_acked(sn_qp_t *qp)
{
    if (qp->events_reported == qp->ibv.events_completed) {
        return;
    }
    sn_error("QP 0x%x destroyed with %u asynchronous event(s) read but not "
             "acknowledged: ibv_destroy_qp waits for them forever",
             qp->ibv.qp_num, qp->events_reported - qp->ibv.events_completed);
    abort();
}
