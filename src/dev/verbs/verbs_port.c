/*
 * Verbs backend: the port a device is used through, and what the
 * connections take from it (the GID, the P_Key index), read at open and
 * again on a port event.
 */
#include "verbs_dev.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The first active port, its attributes in attr; ENETDOWN if none is */
int tm_verbs_port_active(struct ibv_context *ctx, uint8_t nports,
                         uint8_t *port_num, struct ibv_port_attr *attr)
{
    uint8_t port;

    for (port = 1; port <= nports; ++port) {
        if ((ibv_query_port(ctx, port, attr) == 0) &&
            (attr->state == IBV_PORT_ACTIVE)) {
            *port_num = port;
            return 0;
        }
    }
    return ENETDOWN;
}

/*
 * The GID the connection's address carries.  InfiniBand: index 0 (the port
 * GID).  RoCE: prefer RoCE v2 with an IPv4 address, then any RoCE v2, then
 * any valid entry, as UCX does by default.
 */
static int tm_verbs_gid_select(tm_verbs_dev_t *dev)
{
    struct ibv_gid_entry entry;
    int best_rank = -1;
    int rank;
    int i;

    if (!tm_verbs_is_eth(dev->port_attr.link_layer)) {
        dev->gid_index = 0;
        errno          = 0;
        return dev->lib->query_gid(dev->ctx, dev->port_num, 0, &dev->gid) ?
               tm_verbs_errno(EADDRNOTAVAIL) : 0;
    }

    for (i = 0; (i < dev->port_attr.gid_tbl_len) && (i <= UINT8_MAX); ++i) {
        if (dev->lib->query_gid_ex(dev->ctx, dev->port_num, i, &entry, 0,
                                   sizeof(entry)) != 0) {
            continue;   /* empty entry (ENODATA) */
        }

        rank = (entry.gid_type == IBV_GID_TYPE_ROCE_V2) ?
               (tm_verbs_gid_is_ipv4(&entry.gid) ? 2 : 1) : 0;
        if (rank > best_rank) {
            best_rank      = rank;
            dev->gid_index = (uint8_t)i;
            dev->gid       = entry.gid;
        }
    }

    if (best_rank < 0) {
        tm_dev_debug("verbs: %s port %u: no usable GID", dev->super.name,
                     dev->port_num);
        return EADDRNOTAVAIL;
    }
    return 0;
}

/*
 * The P_Key index of the QPs, as UCX's ib transports choose it: on RoCE
 * index 0 (the default key); on InfiniBand the first full member of the
 * port's table (or of the partition asked for), else the first limited
 * one.  Index 0 may hold a limited key: two limited members cannot talk.
 */
static int tm_verbs_pkey_init(tm_verbs_dev_t *dev)
{
    unsigned len = dev->port_attr.pkey_tbl_len;
    uint16_t *table;
    __be16 value;
    unsigned i;
    int ret;

    if (tm_verbs_is_eth(dev->port_attr.link_layer)) {
        dev->pkey_index = 0;
        dev->pkey       = TM_VERBS_PKEY_DEFAULT;
        return 0;
    }
    table = calloc((len != 0) ? len : 1, sizeof(*table));
    if (table == NULL) {
        return ENOMEM;
    }
    for (i = 0; i < len; ++i) {
        if (dev->lib->query_pkey(dev->ctx, dev->port_num, (int)i,
                                 &value) == 0) {
            table[i] = be16toh(value);
        }           /* else left empty, as UCX skips it */
    }
    ret = tm_verbs_pkey_select(table, len, dev->pkey_want, &dev->pkey_index,
                               &dev->pkey);
    free(table);
    if (ret == EINVAL) {
        tm_dev_error("verbs: %s: partition 0x%x is beyond 0x7fff",
                     dev->super.name, dev->pkey_want & ~TM_DEV_ATTR_SET);
        return ret;
    } else if ((ret != 0) && (dev->pkey_want & TM_DEV_ATTR_SET)) {
        tm_dev_error("verbs: %s port %u: no P_Key of partition 0x%x",
                     dev->super.name, dev->port_num,
                     dev->pkey_want & ~TM_DEV_ATTR_SET);
        return ret;
    } else if (ret != 0) {
        tm_dev_error("verbs: %s port %u: no valid P_Key in its table of %u",
                     dev->super.name, dev->port_num, len);
        return ret;
    }
    tm_dev_debug("verbs: %s port %u: P_Key 0x%x at index %u", dev->super.name,
                 dev->port_num, dev->pkey, dev->pkey_index);
    return 0;
}

int tm_verbs_port_init(tm_verbs_dev_t *dev)
{
    int ret;

    ret = tm_verbs_port_active(dev->ctx, dev->dev_attr.orig_attr.phys_port_cnt,
                               &dev->port_num, &dev->port_attr);
    if (ret != 0) {
        tm_dev_debug("verbs: %s: no active port", dev->super.name);
        return ret;
    }

    ret = tm_verbs_gid_select(dev);
    if (ret != 0) {
        return ret;
    }
    return tm_verbs_pkey_init(dev);
}

/* The port's LID, MTU or P_Key table changed (an asynchronous event, read
 * in progress): connections created from now on take the new ones; those
 * already up keep what they were connected with */
int tm_verbs_port_refresh(tm_verbs_dev_t *dev)
{
    struct ibv_port_attr attr;
    uint16_t index, pkey;
    int ret;

    ret = ibv_query_port(dev->ctx, dev->port_num, &attr);
    if (ret != 0) {
        tm_dev_warn("verbs: %s port %u: ibv_query_port() failed: %s",
                    dev->super.name, dev->port_num, strerror(ret));
        return ret;
    }
    index          = dev->pkey_index;
    pkey           = dev->pkey;
    dev->port_attr = attr;
    ret            = tm_verbs_pkey_init(dev);
    if (ret != 0) {
        dev->pkey_index = index;    /* keep what worked */
        dev->pkey       = pkey;
    }
    tm_dev_debug("verbs: %s port %u: LID %u, MTU %u, P_Key 0x%x at index %u",
                 dev->super.name, dev->port_num, attr.lid,
                 tm_verbs_mtu_bytes(attr.active_mtu), dev->pkey,
                 dev->pkey_index);
    return ret;
}
