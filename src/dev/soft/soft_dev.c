/*
 * Software TM-SRQ device: open/close/query, addresses, CQs, the ops table.
 *
 * One device named "soft" is always listed.  Each open creates a device
 * segment in shared memory (the registration table peers check keys
 * against); connections carry messages over per-connection rings; the
 * receive-side work runs inside poll_cq (there is no device thread).
 */
#include "soft_dev.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Atomic uint32_t soft_next_dev_seq;

static void soft_list(tm_dev_info_t *info, unsigned max, unsigned *count)
{
    if (*count >= max) {
        return;
    }
    memset(&info[*count], 0, sizeof(info[*count]));
    strncpy(info[*count].name, "soft", sizeof(info[*count].name) - 1);
    info[*count].ops = &tm_dev_soft_ops;
    ++*count;
}

static uint32_t soft_attr_or(uint32_t value, uint32_t def)
{
    return value ? value : def;
}

/* Fills caps from attr (zero fields: defaults); EINVAL if unusable */
static int soft_caps_from_attr(const tm_dev_attr_t *attr, tm_dev_caps_t *caps,
                               uint32_t *srq_depth)
{
    const uint32_t min_hdr = sizeof(struct ibv_tmh) + sizeof(struct ibv_rvh);
    tm_dev_attr_t zero = {0};

    if (attr == NULL) {
        attr = &zero;
    }
    memset(caps, 0, sizeof(*caps));
    caps->tm.max_num_tags      = soft_attr_or(attr->max_num_tags, SOFT_DEF_MAX_NUM_TAGS);
    caps->tm.max_ops           = soft_attr_or(attr->max_ops, SOFT_DEF_MAX_OPS);
    caps->tm.max_rndv_hdr_size = soft_attr_or(attr->max_rndv_hdr_size,
                                              SOFT_DEF_RNDV_HDR_SIZE);
    caps->tm.max_sge           = 1;
    caps->tm.flags             = IBV_TM_CAP_RC;
    *srq_depth                 = soft_attr_or(attr->srq_depth, SOFT_DEF_SRQ_DEPTH);
    caps->max_srq_wr           = *srq_depth;
    caps->max_send_wr          = soft_attr_or(attr->max_send_wr, SOFT_DEF_MAX_SEND_WR);
    caps->max_inline           = SOFT_MAX_INLINE;
    caps->max_msg_size         = soft_attr_or(attr->max_msg_size, SOFT_DEF_MAX_MSG_SIZE);
    caps->max_rdma_size        = SOFT_MAX_RDMA_SIZE;
    caps->eager_packet_size    = soft_attr_or(attr->eager_packet_size,
                                              SOFT_DEF_EAGER_PACKET);
    caps->max_send_sge         = SOFT_MAX_SGE;
    caps->flags                = TM_DEV_CAP_CONNECT_TO_SRQ;
    caps->dev_addr_len         = SOFT_DEV_ADDR_LEN;
    caps->conn_addr_len        = sizeof(soft_conn_addr_t);
    caps->srq_addr_len         = sizeof(uint32_t);

    if ((caps->tm.max_num_tags > SOFT_MAX_NUM_TAGS_LIMIT) ||
        (caps->tm.max_rndv_hdr_size < min_hdr) ||
        (caps->max_msg_size < caps->tm.max_rndv_hdr_size) ||
        (caps->max_msg_size > (1u << 30)) ||
        (*srq_depth > (1u << 24)) || (caps->max_send_wr > (1u << 20)) ||
        (caps->tm.max_ops > (1u << 20))) {
        return EINVAL;
    }
    return 0;
}

static int soft_open(const tm_dev_info_t *info, const tm_dev_attr_t *attr,
                     tm_dev_t **dev_p)
{
    soft_proc_id_t self;
    char name[96];
    soft_dev_t *dev;
    uint32_t ring;
    int ret;

    dev = calloc(1, sizeof(*dev));
    if (dev == NULL) {
        return ENOMEM;
    }
    ret = soft_caps_from_attr(attr, &dev->caps, &dev->srq_depth);
    if (ret != 0) {
        tm_dev_error("soft: invalid device attributes");
        goto err_free;
    }
    ret = soft_proc_self(&self);
    if (ret != 0) {
        tm_dev_error("soft: cannot read own process identity: %s",
                     strerror(ret));
        goto err_free;
    }

    /* a ring holds a few of the largest messages */
    ring = soft_roundup_pow2(2 * (dev->caps.max_msg_size + sizeof(soft_rec_t) +
                                  SOFT_CACHE_LINE));
    dev->ring_size = (ring < (128u << 10)) ? (128u << 10) : ring;

    dev->super.ops = &tm_dev_soft_ops;
    snprintf(dev->super.name, sizeof(dev->super.name), "%s", info->name);
    dev->addr.host_id = soft_host_id();
    dev->addr.proc    = self;
    dev->addr.dev_seq = atomic_fetch_add(&soft_next_dev_seq, 1);
    dev->mode         = TM_SOFT_MODE_AUTO;
    dev->order        = TM_SOFT_ORDER_OPS_FIRST;
    dev->rng          = 1;
    soft_list_init(&dev->peers);
    soft_list_init(&dev->cqs);
    soft_list_init(&dev->conns);

    soft_reclaim_leftovers();

    ret = soft_mr_table_init(dev);
    if (ret != 0) {
        goto err_free;
    }
    soft_seg_name(name, sizeof(name), &self, dev->addr.dev_seq, 0, 0);
    ret = soft_shm_create(&dev->shm, name, sizeof(soft_dev_seg_t));
    if (ret != 0) {
        goto err_mr;
    }
    dev->seg = dev->shm.base;
    soft_seg_hdr_init(&dev->seg->hdr, &self, SOFT_SEG_DEV);

    tm_dev_debug("soft: opened device %u (tags %u, ops %u, ring %u)",
                 dev->addr.dev_seq, dev->caps.tm.max_num_tags,
                 dev->caps.tm.max_ops, dev->ring_size);
    *dev_p = &dev->super;
    return 0;

err_mr:
    soft_mr_table_cleanup(dev);
err_free:
    free(dev);
    return ret;
}

static void soft_close(tm_dev_t *tdev)
{
    soft_dev_t *dev = soft_dev(tdev);

    if (!soft_list_empty(&dev->conns) || !soft_list_empty(&dev->cqs)) {
        tm_dev_warn("soft: device closed with objects still open");
    }
    if (soft_dev_is_ours(dev)) {
        atomic_store(&dev->seg->hdr.closed, 1);
    }
    soft_shm_destroy(&dev->shm);
    soft_mr_table_cleanup(dev);
    free(dev);
}

static void soft_query(tm_dev_t *tdev, tm_dev_caps_t *caps)
{
    *caps = soft_dev(tdev)->caps;
}

/* Packed address: a type byte, then fields little endian, no padding */
static void soft_dev_addr(tm_dev_t *tdev, void *addr)
{
    const soft_dev_addr_t *a = &soft_dev(tdev)->addr;
    uint8_t *p = addr;

    p[0] = TM_DEV_ADDR_SOFT;
    memcpy(p + 1, &a->host_id, 4);
    memcpy(p + 5, &a->proc.pid, 4);
    memcpy(p + 9, &a->proc.uid, 4);
    memcpy(p + 13, &a->proc.start_time, 8);
    memcpy(p + 21, &a->dev_seq, 4);
}

bool soft_dev_addr_unpack(const void *buf, soft_dev_addr_t *a)
{
    const uint8_t *p = buf;

    if (p[0] != TM_DEV_ADDR_SOFT) {
        return false;
    }
    memcpy(&a->host_id, p + 1, 4);
    memcpy(&a->proc.pid, p + 5, 4);
    memcpy(&a->proc.uid, p + 9, 4);
    memcpy(&a->proc.start_time, p + 13, 8);
    memcpy(&a->dev_seq, p + 21, 4);
    return true;
}

/* Same host (boot id) and same user (process_vm_* needs it) */
bool soft_is_reachable_addr(soft_dev_t *dev, const soft_dev_addr_t *peer)
{
    return (peer->host_id == dev->addr.host_id) &&
           (peer->proc.uid == dev->addr.proc.uid);
}

static int soft_is_reachable(tm_dev_t *tdev, const void *addr)
{
    soft_dev_addr_t peer;

    return soft_dev_addr_unpack(addr, &peer) &&
           soft_is_reachable_addr(soft_dev(tdev), &peer);
}

static int soft_create_cq(tm_dev_t *tdev, unsigned depth, tm_dev_cq_t **cq_p)
{
    soft_dev_t *dev = soft_dev(tdev);
    soft_cq_t *cq;

    if ((depth == 0) || (depth > (1u << 24))) {
        return EINVAL;
    }
    cq = calloc(1, sizeof(*cq));
    if (cq == NULL) {
        return ENOMEM;
    }
    /* room for the two completions of one matched message at least */
    cq->depth = soft_roundup_pow2(depth < 4 ? 4 : depth);
    cq->wc    = calloc(cq->depth, sizeof(*cq->wc));
    if (cq->wc == NULL) {
        free(cq);
        return ENOMEM;
    }
    cq->super.dev = tdev;
    soft_list_init(&cq->srqs);
    soft_list_init(&cq->send_conns);
    soft_list_add_tail(&dev->cqs, &cq->link);
    *cq_p = &cq->super;
    return 0;
}

static void soft_destroy_cq(tm_dev_cq_t *tcq)
{
    soft_cq_t *cq = soft_container_of(tcq, soft_cq_t, super);

    if (!soft_list_empty(&cq->srqs) || !soft_list_empty(&cq->send_conns)) {
        tm_dev_warn("soft: CQ destroyed while still in use");
    }
    soft_list_del(&cq->link);
    free(cq->wc);
    free(cq);
}

/* Device work for this CQ, then the completions it produced */
static int soft_poll_cq(tm_dev_cq_t *tcq, int max, tm_dev_wc_t *wc)
{
    soft_cq_t *cq   = soft_container_of(tcq, soft_cq_t, super);
    soft_dev_t *dev = soft_dev(tcq->dev);
    soft_list_t *it, *next;
    int n;

    for (it = cq->srqs.next; it != &cq->srqs; it = it->next) {
        soft_srq_accept(soft_container_of(it, soft_srq_t, link));
        if (dev->mode == TM_SOFT_MODE_AUTO) {
            soft_srq_progress(soft_container_of(it, soft_srq_t, link));
        }
    }
    for (it = cq->send_conns.next; it != &cq->send_conns; it = next) {
        next = it->next;
        soft_conn_progress_send(soft_container_of(it, soft_conn_t, cq_link));
    }

    for (n = 0; (n < max) && (cq->head != cq->tail); ++n) {
        wc[n] = cq->wc[cq->head++ & (cq->depth - 1)];
    }
    return n;
}

const tm_dev_ops_t tm_dev_soft_ops = {
    .name          = "soft",
    .list          = soft_list,
    .open          = soft_open,
    .close         = soft_close,
    .query         = soft_query,
    .dev_addr      = soft_dev_addr,
    .is_reachable  = soft_is_reachable,
    .reg_mr        = soft_reg_mr,
    .dereg_mr      = soft_dereg_mr,
    .create_cq     = soft_create_cq,
    .destroy_cq    = soft_destroy_cq,
    .poll_cq       = soft_poll_cq,
    .create_srq    = soft_create_srq,
    .destroy_srq   = soft_destroy_srq,
    .post_srq_ops  = soft_post_srq_ops,
    .post_srq_recv = soft_post_srq_recv,
    .create_conn   = soft_create_conn,
    .destroy_conn  = soft_destroy_conn,
    .conn_addr     = soft_conn_addr,
    .connect       = soft_connect,
    .conn_qp_num   = soft_conn_qp_num,
    .srq_addr       = soft_srq_addr,
    .connect_to_srq = soft_connect_to_srq,
    .srq_conn       = soft_srq_conn,
    .post_send     = soft_post_send,
};
