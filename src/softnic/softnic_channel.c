/*
 * Software NIC: completion channels, the arming of CQs and their events,
 * the legacy CQ verbs (ibv_create_cq, ibv_resize_cq).
 *
 * As libibverbs with mlx5 and the kernel's uverbs:
 *  - ibv_req_notify_cq arms the CQ once; the first completion that
 *    qualifies (any, or with solicited_only one from a SEND with
 *    IBV_SEND_SOLICITED or a failed one, the IB specification's Request
 *    Completion Notification) raises one event on its channel and disarms
 *    it.  mlx5_arm_cq writes the consumer index into the arm doorbell, and
 *    the NIC raises the event at once when the CQ already holds entries
 *    past it: so does this NIC, for entries software has not polled.  A
 *    request for the next completion while armed for a solicited one
 *    widens the arm; the reverse leaves it.  A CQ without a channel arms
 *    (0, as mlx5_arm_cq, which never looks at the channel) and its events
 *    go nowhere, as the kernel drops them.
 *  - ibv_get_cq_event reads one event from the channel's fd (blocking, or
 *    EAGAIN when the user set O_NONBLOCK on it); ibv_ack_cq_events counts
 *    them; ibv_destroy_cq drops the CQ's events not yet read and waits
 *    until those read were acknowledged (libibverbs' ibv_cmd_destroy_cq
 *    against the kernel's comp_events_reported); ibv_destroy_comp_channel
 *    fails with EBUSY while a CQ uses the channel.
 *
 * Events are raised where completions become visible to software: when
 * the engine publishes a CQ (sn_cq_publish: one predicted branch, once a
 * round, not per completion).  Inline progress runs the device's work only
 * in polls, and a program asleep on its channel would wait for ever: a CQ
 * with a channel therefore moves the device to its engine thread
 * (SOFTNIC_PROGRESS_THREAD), done when the channel or the CQ is created
 * while the device has no CQ yet; otherwise creating that CQ is refused
 * with EOPNOTSUPP.
 */
#include "softnic_channel.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline sn_channel_t *sn_channel(struct ibv_comp_channel *channel)
{
    return sn_container_of(channel, sn_channel_t, ibv);
}

/* The device's work on its engine: 0, or EOPNOTSUPP when it already has
 * CQs polled inline (progress changes only without CQs) */
static int sn_ctx_want_engine(struct ibv_context *context)
{
    struct softnic_dv_attr attr = {.progress = SOFTNIC_PROGRESS_THREAD};

    if (sn_ctx(context)->attr.progress == SOFTNIC_PROGRESS_THREAD) {
        return 0;
    }
    if (softnic_dv_set_attr(context, &attr) != 0) {
        return EOPNOTSUPP;
    }
    sn_debug("device %u: a completion channel moves its work to the engine",
             sn_ctx(context)->dev_seq);
    return 0;
}

struct ibv_comp_channel *softnic_create_comp_channel(struct ibv_context *context)
{
    sn_channel_t *ch;
    char path[64];
    int fds[2];
    int ret;

    ch = calloc(1, sizeof(*ch));
    if (ch == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    if (pipe2(fds, O_CLOEXEC) != 0) {
        ret = errno;
        goto err_free;
    }
    /* a description of our own: the user may set O_NONBLOCK on ibv.fd or
     * not, ours never blocks */
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fds[0]);
    ch->drain_fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if ((ch->drain_fd < 0) ||
        (fcntl(fds[1], F_SETFL, O_NONBLOCK) != 0)) {
        ret = errno;
        goto err_close;
    }
    ch->ibv.context = context;
    ch->ibv.fd      = fds[0];
    ch->ibv.refcnt  = 0;
    ch->wake_fd     = fds[1];
    pthread_mutex_init(&ch->lock, NULL);
    sn_list_init(&ch->queue);
    /* the usual order (ibv_rc_pingpong -e): the channel, then the CQs.
     * Not yet possible, creating a CQ with the channel says so */
    (void)sn_ctx_want_engine(context);
    return &ch->ibv;

err_close:
    if (ch->drain_fd >= 0) {
        close(ch->drain_fd);
    }
    close(fds[0]);
    close(fds[1]);
err_free:
    free(ch);
    errno = ret;
    return NULL;
}

int softnic_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    struct ibv_context *context = channel->context;
    sn_channel_t *ch            = sn_channel(channel);

    pthread_mutex_lock(&context->mutex);
    if (channel->refcnt != 0) {
        pthread_mutex_unlock(&context->mutex);
        return EBUSY;
    }
    pthread_mutex_unlock(&context->mutex);
    close(ch->drain_fd);
    close(ch->wake_fd);
    close(channel->fd);
    pthread_mutex_destroy(&ch->lock);
    free(ch);
    return 0;
}

/* Under the device lock: one event for cq on its channel */
static void sn_channel_raise(sn_cq_t *cq)
{
    sn_channel_t *ch = sn_channel(cq->ex.channel);
    const char token = 0;

    pthread_mutex_lock(&ch->lock);
    if (cq->events_queued++ == 0) {
        sn_list_add_tail(&ch->queue, &cq->event_link);
    }
    pthread_mutex_unlock(&ch->lock);
    if (write(ch->wake_fd, &token, 1) != 1) {
        /* a pipe's worth of unread events: the reader is far behind */
        sn_warn("completion channel %d: event not signalled: %s",
                ch->ibv.fd, strerror(errno));
    }
}

/* What a solicited-only arm waits for */
static inline bool sn_cqe_solicits(const sn_cqe_t *cqe)
{
    return cqe->solicited || ((cqe->status != IBV_WC_SUCCESS) &&
                              (cqe->status != IBV_WC_TM_RNDV_INCOMPLETE));
}

void sn_cq_arm_judge(sn_cq_t *cq)
{
    uint32_t ready = cq->ready;
    bool fire      = false;
    uint32_t i;

    if (cq->armed == SN_CQ_ARM_NEXT) {
        fire = (cq->arm_next != ready);
    } else {
        for (i = cq->arm_next; (i != ready) && !fire; ++i) {
            fire = sn_cqe_solicits(&cq->cqe[i & (cq->depth - 1)]);
        }
    }
    cq->arm_next = ready;
    if (fire) {
        cq->armed = 0;
        sn_channel_raise(cq);
    }
}

int sn_cq_req_notify(struct ibv_cq *ibv_cq, int solicited_only)
{
    sn_cq_t *cq       = sn_cq((struct ibv_cq_ex*)ibv_cq);
    sn_context_t *ctx = sn_ctx(ibv_cq->context);

    if (ibv_cq->channel == NULL) {
        return 0;
    }
    sn_ctx_lock(ctx);
    if (cq->armed != SN_CQ_ARM_NEXT) {
        cq->armed = solicited_only ? SN_CQ_ARM_SOLICITED : SN_CQ_ARM_NEXT;
    }
    /* entries past the consumer index count, as on mlx5 */
    cq->arm_next = __atomic_load_n(&cq->head, __ATOMIC_ACQUIRE);
    sn_cq_arm_judge(cq);
    sn_ctx_unlock(ctx);
    return 0;
}

int softnic_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
                         void **cq_context)
{
    sn_channel_t *ch = sn_channel(channel);
    sn_cq_t *scq;
    ssize_t ret;
    char token;

    for (;;) {
        ret = read(channel->fd, &token, 1);
        if (ret != 1) {
            if (ret == 0) {
                errno = EIO;
            }
            return -1;      /* EAGAIN when the user made fd non-blocking */
        }
        pthread_mutex_lock(&ch->lock);
        if (!sn_list_empty(&ch->queue)) {
            break;
        }
        /* the event of a CQ destroyed meanwhile */
        pthread_mutex_unlock(&ch->lock);
    }
    scq = sn_container_of(ch->queue.next, sn_cq_t, event_link);
    if (--scq->events_queued == 0) {
        sn_list_del(&scq->event_link);
    }
    ++scq->events_reported;
    pthread_mutex_unlock(&ch->lock);
    *cq         = ibv_cq_ex_to_cq(&scq->ex);
    *cq_context = (*cq)->cq_context;
    return 0;
}

void softnic_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
    pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    pthread_cond_signal(&cq->cond);
    pthread_mutex_unlock(&cq->mutex);
}

int sn_cq_channel_check(struct ibv_context *context,
                        struct ibv_comp_channel *channel)
{
    int ret;

    if (channel->context != context) {
        sn_debug("a CQ's completion channel belongs to another context");
        return EINVAL;
    }
    ret = sn_ctx_want_engine(context);
    if (ret != 0) {
        sn_error("device %u: a CQ with a completion channel needs the "
                 "device's engine (SOFTNIC_PROGRESS_THREAD), and progress "
                 "cannot change once the device has CQs: create the channel "
                 "or set the progress before the first CQ",
                 sn_ctx(context)->dev_seq);
    }
    return ret;
}

void sn_cq_channel_attach(sn_cq_t *cq)
{
    struct ibv_comp_channel *channel = cq->ex.channel;

    sn_list_init(&cq->event_link);
    if (channel != NULL) {
        pthread_mutex_lock(&channel->context->mutex);
        ++channel->refcnt;
        pthread_mutex_unlock(&channel->context->mutex);
    }
}

void sn_cq_channel_detach(sn_cq_t *cq)
{
    struct ibv_comp_channel *channel = cq->ex.channel;
    sn_channel_t *ch;
    uint32_t withdrawn, reported;
    char token;

    if (channel == NULL) {
        return;
    }
    ch = sn_channel(channel);
    pthread_mutex_lock(&ch->lock);
    withdrawn = cq->events_queued;
    if (withdrawn != 0) {
        sn_list_del(&cq->event_link);
        cq->events_queued = 0;
    }
    reported = cq->events_reported;
    pthread_mutex_unlock(&ch->lock);
    /* their bytes; one a reader took already makes it read again */
    while ((withdrawn-- != 0) && (read(ch->drain_fd, &token, 1) == 1)) {
    }

    pthread_mutex_lock(&cq->ex.mutex);
    if (cq->ex.comp_events_completed != reported) {
        sn_warn("CQ %p destroyed with %u events not acknowledged: waits "
                "for ibv_ack_cq_events, as libibverbs does", (void*)cq,
                reported - cq->ex.comp_events_completed);
    }
    while (cq->ex.comp_events_completed != reported) {
        pthread_cond_wait(&cq->ex.cond, &cq->ex.mutex);
    }
    pthread_mutex_unlock(&cq->ex.mutex);

    pthread_mutex_lock(&channel->context->mutex);
    --channel->refcnt;
    pthread_mutex_unlock(&channel->context->mutex);
}

struct ibv_cq *softnic_create_cq(struct ibv_context *context, int cqe,
                                 void *cq_context,
                                 struct ibv_comp_channel *channel,
                                 int comp_vector)
{
    struct ibv_cq_init_attr_ex attr = {
        .cqe         = (uint32_t)cqe,
        .cq_context  = cq_context,
        .channel     = channel,
        .comp_vector = (uint32_t)comp_vector,
        .wc_flags    = IBV_WC_STANDARD_FLAGS
    };
    struct ibv_cq_ex *cq;

    if (cqe <= 0) {         /* as mlx5_create_cq */
        errno = EINVAL;
        return NULL;
    }
    cq = sn_create_cq_ex(context, &attr);
    return (cq == NULL) ? NULL : ibv_cq_ex_to_cq(cq);
}

/*
 * ibv_resize_cq, as mlx5_resize_cq and the kernel's mlx5_ib_resize_cq: the
 * size is rounded up as at creation, the same size changes nothing, the
 * entries not yet polled move to the new ring (EINVAL when they do not
 * fit).  Not while another thread polls the CQ (mlx5 serialises the two
 * with the CQ's lock; software that polls and resizes from one thread, as
 * all do, sees no difference).
 */
int softnic_resize_cq(struct ibv_cq *ibv_cq, int cqe)
{
    sn_cq_t *cq       = sn_cq((struct ibv_cq_ex*)ibv_cq);
    sn_context_t *ctx = sn_ctx(ibv_cq->context);
    sn_cqe_t *ring, *old;
    uint32_t depth, i;

    if ((cqe <= 0) || ((long long)cqe * 64 > INT_MAX) ||
        ((uint32_t)cqe > SN_MAX_CQE)) {
        errno = EINVAL;
        return EINVAL;
    }
    depth = sn_roundup_pow2((cqe < 4) ? 4 : (uint32_t)cqe);
    if (depth == cq->depth) {
        return 0;
    }
    ring = calloc(depth + 1, sizeof(*ring));   /* and the hold slot */
    if (ring == NULL) {
        errno = ENOMEM;
        return ENOMEM;
    }
    sn_ctx_lock(ctx);
    if (cq->tail - cq->head > depth) {
        sn_ctx_unlock(ctx);
        free(ring);
        errno = EINVAL;
        return EINVAL;
    }
    for (i = cq->head; i != cq->tail; ++i) {
        ring[i & (depth - 1)] = cq->cqe[i & (cq->depth - 1)];
    }
    if (cq->held != NULL) {
        ring[depth] = *cq->held;
        __atomic_store_n(&cq->held, &ring[depth], __ATOMIC_RELAXED);
    }
    old       = cq->cqe;
    cq->cqe   = ring;
    cq->depth = depth;
    cq->ex.cqe = (int)depth;
    sn_ctx_unlock(ctx);
    free(old);
    return 0;
}
