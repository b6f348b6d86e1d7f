/*
 * Software NIC: completion channels and the arming of CQs
 * (softnic_channel.c; docs/soft-device-datapath.md, "Completion channels").
 */
#ifndef SOFTNIC_CHANNEL_H_
#define SOFTNIC_CHANNEL_H_

#include "softnic_int.h"

#pragma GCC visibility push(hidden)

/* sn_cq_t::armed: what raises the CQ's next event */
enum {
    SN_CQ_ARM_NEXT      = 1,    /* any completion */
    SN_CQ_ARM_SOLICITED = 2     /* a solicited or failed one */
};

/*
 * A completion channel.  Its fd is a pipe's read end holding one byte per
 * event raised and not yet read; the queue says which CQs they are for.
 * An event is queued before its byte is written, so a reader that took a
 * byte finds its event, unless the CQ was destroyed meanwhile (then it
 * reads again).
 */
typedef struct sn_channel {
    struct ibv_comp_channel ibv;
    int                wake_fd;   /* the pipe's write end, non-blocking */
    int                drain_fd;  /* its read end opened again,
                                     non-blocking whatever the user set on
                                     ibv.fd: takes back the bytes of a
                                     destroyed CQ's events */
    pthread_mutex_t    lock;      /* the queue (inside the device lock) */
    sn_list_t          queue;     /* CQs with events not yet read */
} sn_channel_t;

/* ibv_req_notify_cq (context ops) */
int  sn_cq_req_notify(struct ibv_cq *ibv_cq, int solicited_only);
/* Creation of a CQ with channel: 0, or the errno that refuses it */
int  sn_cq_channel_check(struct ibv_context *context,
                         struct ibv_comp_channel *channel);
/* The CQ created takes a reference on its channel */
void sn_cq_channel_attach(sn_cq_t *cq);
/* The CQ destroyed (out of the device's list, the lock not held): its
 * unread events withdrawn, then waits until those read were acknowledged,
 * and drops its reference */
void sn_cq_channel_detach(sn_cq_t *cq);

#pragma GCC visibility pop

#endif
