/*
 * Software NIC: port 1's LID, MTU and P_Key table, the P_Key rules on
 * connected QPs, and the port's asynchronous events (softnic_port.h).
 */
#include "softnic_int.h"
#include "softnic_engine.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* SOFTNIC_PKEY_TABLE: keys separated by commas, in index order.  A value
 * not understood is reported and the default table kept, so that a typo
 * does not silently partition the port. */
static void sn_port_env_pkeys(sn_port_t *port)
{
    const char *value = getenv("SOFTNIC_PKEY_TABLE");
    uint16_t keys[SN_PKEY_TBL_MAX];
    const char *p     = value;
    unsigned long key;
    unsigned n        = 0;
    char *end;

    if ((value == NULL) || (*value == '\0')) {
        return;
    }
    for (;;) {
        errno = 0;
        key   = strtoul(p, &end, 16);
        if ((end == p) || (errno != 0) || (key > 0xffff) ||
            (n == SN_PKEY_TBL_MAX)) {
            sn_warn("SOFTNIC_PKEY_TABLE=%s not understood (up to %d keys, "
                    "hexadecimal, separated by commas): 0x%x", value,
                    SN_PKEY_TBL_MAX, SN_PKEY_DEFAULT);
            return;
        }
        keys[n++] = (uint16_t)key;
        if (*end == '\0') {
            break;
        }
        if (*end != ',') {
            n = SN_PKEY_TBL_MAX;    /* reported above */
            continue;
        }
        p = end + 1;
    }
    memcpy(port->pkeys, keys, n * sizeof(keys[0]));
    port->npkeys = (uint16_t)n;
}

void sn_port_init(sn_port_t *port)
{
    memset(port, 0, sizeof(*port));
    port->lid      = SN_PORT_LID;
    port->mtu      = IBV_MTU_4096;
    port->pkeys[0] = SN_PKEY_DEFAULT;
    port->npkeys   = 1;
    sn_port_env_pkeys(port);
}

static void sn_port_attr_fill(struct ibv_port_attr *port_attr, size_t len,
                              const struct ibv_port_attr *a);

int sn_port_query(struct ibv_context *context, uint8_t port_num,
                  struct ibv_port_attr *port_attr, size_t port_attr_len)
{
    const sn_context_t *ctx = sn_ctx(context);
    struct ibv_port_attr a;

    if (port_num != 1) {
        return EINVAL;
    }
    memset(&a, 0, sizeof(a));
    a.state        = IBV_PORT_ACTIVE;
    a.max_mtu      = IBV_MTU_4096;
    a.active_mtu   = ctx->port.mtu;
    a.gid_tbl_len  = 1;
    a.max_msg_sz   = SN_MAX_MSG_SIZE;
    a.pkey_tbl_len = ctx->port.npkeys;
    a.lid          = ctx->port.lid;
    a.link_layer   = ctx->link_layer;
    /* the transport and UCX address the device with a GRH; a QP may still
     * be connected without one to the port's LID (sn_qp_av_uid) */
    a.flags        = IBV_QPF_GRH_REQUIRED;
    a.phys_state   = 5;                    /* LinkUp */
    a.active_width = 1;
    a.active_speed = 1;
    sn_port_attr_fill(port_attr, port_attr_len, &a);
    return 0;
}

/* The caller's whole struct, as libibverbs' __lib_query_port clears it
 * before the provider fills it: what this build's struct has, zero past
 * it, and a newer libibverbs' active_speed_ex where the caller has room */
_Static_assert(offsetof(struct ibv_port_attr, port_cap_flags2) + 4 ==
               SN_PORT_ATTR_SPEED_EX_OFFSET, "rdma-core's port attributes");

static void sn_port_attr_fill(struct ibv_port_attr *port_attr, size_t len,
                              const struct ibv_port_attr *a)
{
    uint32_t speed_ex = a->active_speed;    /* the kernel's, as is */

    memset(port_attr, 0, len);
    memcpy(port_attr, a, (len < sizeof(*a)) ? len : sizeof(*a));
    if (len >= SN_PORT_ATTR_SPEED_EX_OFFSET + sizeof(speed_ex)) {
        memcpy((char*)port_attr + SN_PORT_ATTR_SPEED_EX_OFFSET, &speed_ex,
               sizeof(speed_ex));
    }
}

/* libibverbs' exported ibv_query_port (IBVERBS_1.1) writes its struct
 * _compat_ibv_port_attr: the fields up to flags */
int softnic_query_port(struct ibv_context *context, uint8_t port_num,
                       struct ibv_port_attr *port_attr)
{
    return sn_port_query(context, port_num, port_attr,
                         offsetof(struct ibv_port_attr, port_cap_flags2));
}

/* As libibverbs' ibv_query_pkey: -1 and errno for an index beyond the
 * table (the sysfs entry it reads does not exist) */
int softnic_query_pkey(struct ibv_context *context, uint8_t port_num,
                       int index, __be16 *pkey)
{
    const sn_context_t *ctx = sn_ctx(context);

    if ((port_num != 1) || (index < 0) || (index >= ctx->port.npkeys)) {
        errno = EINVAL;
        return -1;
    }
    *pkey = htobe16(ctx->port.pkeys[index]);
    return 0;
}

uint16_t sn_port_pkey(const sn_context_t *ctx, uint16_t index)
{
    return (index < ctx->port.npkeys) ? ctx->port.pkeys[index] : 0;
}

/* IB spec 10.9.1.2: 0x0000 and 0x8000 are invalid and match nothing */
bool sn_pkey_match(uint16_t a, uint16_t b)
{
    return ((a & SN_PKEY_PARTITION) != 0) &&
           ((a & SN_PKEY_PARTITION) == (b & SN_PKEY_PARTITION)) &&
           ((a | b) & SN_PKEY_FULL);
}

void sn_qp_pkey_publish(sn_qp_t *qp)
{
    sn_context_t *ctx = sn_qp_ctx(qp);

    if ((qp->in != NULL) && sn_ctx_is_ours(ctx)) {
        atomic_store(&qp->in->pkey, sn_port_pkey(ctx, qp->attr.pkey_index));
    }
}

void sn_qp_pkey_judge(sn_qp_t *qp, uint16_t pkey_index)
{
    uint16_t ours   = sn_port_pkey(sn_qp_ctx(qp), pkey_index);
    uint16_t theirs = (uint16_t)atomic_load(&qp->out->pkey);

    qp->pkey_drop = !sn_pkey_match(ours, theirs);
    if (qp->pkey_drop) {
        sn_debug("QP 0x%x: P_Key 0x%x does not reach the responder's 0x%x: "
                 "its packets will be dropped", qp->ibv.qp_num, ours, theirs);
    }
}

void sn_qp_pkey_dropped(sn_qp_t *qp)
{
    if (qp->sq_head == qp->sq_tail) {
        return;
    }
    sn_debug("QP 0x%x: no answer to its requests (P_Key mismatch): retries "
             "exceeded", qp->ibv.qp_num);
    sn_qp_set_error(qp);
    sn_qp_fail_from(qp, qp->sq_head, IBV_WC_RETRY_EXC_ERR);
}

bool sn_port_event_get(sn_context_t *ctx, struct ibv_async_event *event)
{
    sn_port_t *port = &ctx->port;

    if (port->nevents == 0) {
        return false;
    }
    memset(event, 0, sizeof(*event));
    event->event_type       = port->events[0];
    event->element.port_num = 1;
    memmove(&port->events[0], &port->events[1],
            --port->nevents * sizeof(port->events[0]));
    return true;
}

/* Test steering (softnic_test.h): what a subnet manager does to the port */
int softnic_test_port_event(struct ibv_context *context,
                            const softnic_test_port_t *attr,
                            enum ibv_event_type event)
{
    sn_context_t *ctx;
    sn_list_t *e;

    if (!sn_is_softnic(context) || (attr->npkeys > SN_PKEY_TBL_MAX)) {
        return EINVAL;
    }
    ctx = sn_ctx(context);
    sn_ctx_lock(ctx);
    if (ctx->port.nevents == SN_PORT_EVENTS_MAX) {
        sn_ctx_unlock(ctx);
        return ENOSPC;
    }
    ctx->port.lid = attr->lid;
    ctx->port.mtu = attr->mtu;
    if (attr->npkeys != 0) {
        memcpy(ctx->port.pkeys, attr->pkeys,
               attr->npkeys * sizeof(attr->pkeys[0]));
        ctx->port.npkeys = attr->npkeys;
    }
    /* a QP keeps its index; the key there is what its packets carry now */
    for (e = ctx->qps.next; e != &ctx->qps; e = e->next) {
        sn_qp_pkey_publish(sn_container_of(e, sn_qp_t, ctx_link));
    }
    ctx->port.events[ctx->port.nevents++] = event;
    sn_async_raise(ctx);
    sn_ctx_unlock(ctx);
    return 0;
}
