/*
 * Verbs backend, the parts that need no device: what a device can do (its
 * attributes clamped into limits, then capabilities), what addresses say
 * (packing, unpacking, reachability), the P_Key UCX would choose, and what
 * mlx5's send queues take.  The unit test checks them
 * without a NIC.
 */
#include "verbs_dev.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(tm_verbs_dev_addr_t) <= TM_DEV_ADDR_MAX,
               "verbs device address too large");
_Static_assert(sizeof(tm_verbs_conn_addr_t) <= TM_DEV_ADDR_MAX,
               "verbs connection address too large");

const char *tm_verbs_tm_unusable(const struct ibv_device_attr_ex *attr)
{
    if (!(attr->tm_caps.flags & IBV_TM_CAP_RC)) {
        return "no tag matching on RC (tm_caps.flags lacks IBV_TM_CAP_RC)";
    }
    if (attr->tm_caps.max_num_tags == 0) {
        return "empty tag matching list (tm_caps.max_num_tags is 0)";
    }
    if (attr->tm_caps.max_ops == 0) {
        return "no tag list operations (tm_caps.max_ops is 0)";
    }
    return NULL;
}

uint32_t tm_verbs_mtu_bytes(enum ibv_mtu mtu)
{
    switch (mtu) {
    case IBV_MTU_256:  return 256;
    case IBV_MTU_512:  return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
    default:           return 0;
    }
}

static uint32_t tm_verbs_clamp(uint32_t req, uint32_t def, uint32_t max)
{
    uint32_t value = (req != 0) ? req : def;

    return (value < max) ? value : max;
}

void tm_verbs_limits_init(tm_verbs_limits_t *lim,
                          const struct ibv_device_attr_ex *dev_attr,
                          const struct ibv_port_attr *port_attr,
                          const tm_dev_attr_t *req)
{
    const struct ibv_device_attr *orig = &dev_attr->orig_attr;
    const struct ibv_tm_caps *tm       = &dev_attr->tm_caps;
    /* Some drivers leave max_msg_sz 0; RC allows 2^31 */
    uint32_t port_msg = (port_attr->max_msg_sz != 0) ?
                        port_attr->max_msg_sz : (1u << 31);
    int sge           = (orig->max_sge > 0) ? orig->max_sge : 1;

    memset(lim, 0, sizeof(*lim));
    lim->max_num_tags      = tm_verbs_clamp(req->max_num_tags,
                                            TM_VERBS_DEF_NUM_TAGS,
                                            tm->max_num_tags);
    lim->max_ops           = tm_verbs_clamp(req->max_ops, TM_VERBS_DEF_MAX_OPS,
                                            tm->max_ops);
    lim->max_rndv_hdr_size = tm_verbs_clamp(req->max_rndv_hdr_size,
                                            tm->max_rndv_hdr_size,
                                            tm->max_rndv_hdr_size);
    lim->srq_depth         = tm_verbs_clamp(req->srq_depth,
                                            TM_VERBS_DEF_SRQ_DEPTH,
                                            (uint32_t)orig->max_srq_wr);
    lim->max_send_wr       = tm_verbs_clamp(req->max_send_wr,
                                            TM_VERBS_DEF_SEND_WR,
                                            (uint32_t)orig->max_qp_wr);
    lim->max_send_sge      = tm_verbs_clamp(0, TM_VERBS_MAX_SEND_SGE,
                                            (uint32_t)sge);
    lim->max_msg_size      = tm_verbs_clamp(req->max_msg_size, port_msg,
                                            port_msg);
    lim->max_rdma_size     = port_msg;
    /* The NIC's packet is the path MTU: a longer matched eager message
     * completes as MATCH, then DATA_VALID.  The request does not apply. */
    lim->eager_packet_size = tm_verbs_mtu_bytes(port_attr->active_mtu);
    lim->max_rd_atomic     = tm_verbs_clamp(0, TM_VERBS_MAX_RD_ATOMIC,
                                            (uint32_t)orig->max_qp_init_rd_atom);
    lim->max_inline        = req->max_inline ? req->max_inline :
                             TM_VERBS_MIN_INLINE;  /* asked; then probed */
    lim->max_dest_rd_atomic = tm_verbs_clamp(0, TM_VERBS_MAX_RD_ATOMIC,
                                             (uint32_t)orig->max_qp_rd_atom);
}

void tm_verbs_caps_fill(tm_dev_caps_t *caps,
                        const struct ibv_device_attr_ex *dev_attr,
                        const tm_verbs_limits_t *lim)
{
    memset(caps, 0, sizeof(*caps));
    /* What was asked of the SRQ, not the NIC's maximum: callers size their
     * queues from these */
    caps->tm                   = dev_attr->tm_caps;
    caps->tm.max_num_tags      = lim->max_num_tags;
    caps->tm.max_ops           = lim->max_ops;
    caps->tm.max_rndv_hdr_size = lim->max_rndv_hdr_size;
    caps->max_srq_wr           = lim->srq_depth;
    caps->max_send_wr          = lim->max_send_wr;
    caps->max_inline           = lim->max_inline;
    caps->max_msg_size         = lim->max_msg_size;
    caps->max_rdma_size        = lim->max_rdma_size;
    caps->eager_packet_size    = lim->eager_packet_size;
    caps->max_send_sge         = lim->max_send_sge;
    caps->dev_addr_len         = sizeof(tm_verbs_dev_addr_t);
    caps->conn_addr_len        = sizeof(tm_verbs_conn_addr_t);
}



/*
 * Performance figures of a NIC's port, as UCX's ib transports read them:
 * the wire's rate is lanes x signalling rate x line-code efficiency, less
 * each packet's headers; the latency is UCX's figure for the generation,
 * 200 ns more over Ethernet.  The work-request costs are UCX's defaults
 * for a transport that posts through libibverbs (rc_verbs: 75 ns per work
 * request, 40 ns of doorbell, 350 ns for the NIC to fetch a descriptor).
 */
#define TM_VERBS_POST_TIME      75e-9
#define TM_VERBS_DOORBELL_TIME  40e-9
#define TM_VERBS_WQE_FETCH_TIME 350e-9
#define TM_VERBS_ROCE_LATENCY   200e-9
/* Bytes around a packet's payload: LRH, BTH, ICRC and VCRC on InfiniBand;
 * Ethernet header and FCS, an IPv6-sized network header, BTH and ICRC on
 * RoCE */
#define TM_VERBS_IB_PKT_HDRS    (8 + 12 + 4 + 2)
#define TM_VERBS_ROCE_PKT_HDRS  (14 + 4 + 40 + 12 + 4)

static unsigned tm_verbs_port_lanes(uint8_t active_width)
{
    switch (active_width) {
    case 1:  return 1;
    case 2:  return 4;
    case 4:  return 8;
    case 8:  return 12;
    case 16: return 2;
    default: return 1;      /* unknown: the least, as UCX */
    }
}

void tm_verbs_port_perf(const struct ibv_port_attr *port, tm_dev_perf_t *perf)
{
    int eth         = tm_verbs_is_eth(port->link_layer);
    double code     = 64.0 / 66.0;  /* FDR10 and later, and Ethernet */
    uint32_t mtu    = tm_verbs_mtu_bytes(port->active_mtu);
    uint32_t hdrs   = eth ? TM_VERBS_ROCE_PKT_HDRS : TM_VERBS_IB_PKT_HDRS;
    double signal, wire;

    switch (port->active_speed) {
    case 2:   signal = 5e9;         code = 0.8; perf->latency = 2500e-9; break;
    case 4:   signal = eth ? 10.3125e9 : 10e9;
              code   = eth ? code : 0.8;        perf->latency = 1300e-9; break;
    case 8:   signal = 10.3125e9;               perf->latency = 700e-9;  break;
    case 16:  signal = 14.0625e9;               perf->latency = 700e-9;  break;
    case 32:  signal = 25.78125e9;              perf->latency = 600e-9;  break;
    case 64:  signal = 2 * 25.78125e9;          perf->latency = 600e-9;  break;
    case 128: signal = 100e9;                   perf->latency = 600e-9;  break;
    default:  /* SDR, or a speed this build does not know: the least */
              signal = 2.5e9;       code = 0.8; perf->latency = 5000e-9; break;
    }

    if (eth) {
        perf->latency += TM_VERBS_ROCE_LATENCY;
    }
    if (mtu == 0) {
        mtu = 256;
    }
    wire             = tm_verbs_port_lanes(port->active_width) * signal *
                       code / 8.0;
    perf->bandwidth  = wire * mtu / (mtu + hdrs);
    perf->rdma_bandwidth = perf->bandwidth;
    perf->post       = TM_VERBS_POST_TIME;
    perf->doorbell   = TM_VERBS_DOORBELL_TIME;
    perf->wqe_fetch  = TM_VERBS_WQE_FETCH_TIME;
    perf->rdma_copy  = 0;
    perf->per_process = 0;
}


/*
 * Addresses.  Multi-byte fields are stored big endian byte by byte, so the
 * packed form is the same on every host and needs no alignment.
 */
static void tm_verbs_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void tm_verbs_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint16_t tm_verbs_get16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t tm_verbs_get32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
           ((uint32_t)p[2] << 8) | p[3];
}

void tm_verbs_dev_addr_pack(void *addr, uint8_t link_layer, uint16_t lid,
                            const union ibv_gid *gid, uint16_t pkey)
{
    tm_verbs_dev_addr_t packed;

    packed.magic      = TM_VERBS_DEV_ADDR_MAGIC;
    packed.link_layer = link_layer;
    tm_verbs_put16(packed.lid, lid);
    memcpy(packed.gid, gid->raw, sizeof(packed.gid));
    tm_verbs_put16(packed.pkey, pkey);
    memcpy(addr, &packed, sizeof(packed));
}

int tm_verbs_dev_addr_unpack(const void *addr, tm_verbs_peer_t *peer)
{
    tm_verbs_dev_addr_t packed;

    memcpy(&packed, addr, sizeof(packed));
    if (packed.magic != TM_VERBS_DEV_ADDR_MAGIC) {
        return EINVAL;
    }

    memset(peer, 0, sizeof(*peer));
    peer->link_layer = packed.link_layer;
    peer->lid        = tm_verbs_get16(packed.lid);
    peer->pkey       = tm_verbs_get16(packed.pkey);
    memcpy(peer->gid.raw, packed.gid, sizeof(packed.gid));
    return 0;
}

void tm_verbs_conn_addr_pack(void *addr, enum ibv_mtu mtu, uint16_t lid,
                             const tm_verbs_qp_addr_t *tx,
                             const tm_verbs_qp_addr_t *rx,
                             const union ibv_gid *gid)
{
    tm_verbs_conn_addr_t packed;

    packed.magic = TM_VERBS_CONN_ADDR_MAGIC;
    packed.mtu   = (uint8_t)mtu;
    tm_verbs_put16(packed.lid, lid);
    tm_verbs_put32(packed.qpn, tx->qpn & 0xffffff);
    tm_verbs_put32(packed.psn, tx->psn & 0xffffff);
    tm_verbs_put32(packed.rx_qpn, rx->qpn & 0xffffff);
    tm_verbs_put32(packed.rx_psn, rx->psn & 0xffffff);
    memcpy(packed.gid, gid->raw, sizeof(packed.gid));
    memcpy(addr, &packed, sizeof(packed));
}

int tm_verbs_conn_addr_unpack(const void *addr, tm_verbs_peer_t *peer)
{
    tm_verbs_conn_addr_t packed;

    memcpy(&packed, addr, sizeof(packed));
    if ((packed.magic != TM_VERBS_CONN_ADDR_MAGIC) ||
        (tm_verbs_mtu_bytes((enum ibv_mtu)packed.mtu) == 0)) {
        return EINVAL;
    }

    memset(peer, 0, sizeof(*peer));
    peer->mtu = (enum ibv_mtu)packed.mtu;
    peer->lid = tm_verbs_get16(packed.lid);
    peer->tx.qpn = tm_verbs_get32(packed.qpn);
    peer->tx.psn = tm_verbs_get32(packed.psn);
    peer->rx.qpn = tm_verbs_get32(packed.rx_qpn);
    peer->rx.psn = tm_verbs_get32(packed.rx_psn);
    memcpy(peer->gid.raw, packed.gid, sizeof(packed.gid));
    return 0;
}

/* ::ffff:a.b.c.d, the form RoCE v2 gives an IPv4 address */
int tm_verbs_gid_is_ipv4(const union ibv_gid *gid)
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                       0xff, 0xff};

    return !memcmp(gid->raw, prefix, sizeof(prefix));
}

/* fec0:0000:FLID:SUBNET::/64 (UCX's UCT_IB_SITE_LOCAL_FLID_MASK) */
uint16_t tm_verbs_gid_flid(const union ibv_gid *gid)
{
    static const uint8_t prefix[4] = {0xfe, 0xc0, 0, 0};

    if (memcmp(gid->raw, prefix, sizeof(prefix)) != 0) {
        return 0;
    }
    return tm_verbs_get16(&gid->raw[4]);
}

/* The subnet of a site-local GID: the low 16 bits of its prefix */
static uint16_t tm_verbs_gid_subnet16(const union ibv_gid *gid)
{
    return tm_verbs_get16(&gid->raw[6]);
}

int tm_verbs_peer_reachable(uint8_t link_layer, const union ibv_gid *gid,
                            const tm_verbs_peer_t *peer)
{
    if (tm_verbs_is_eth(link_layer) != tm_verbs_is_eth(peer->link_layer)) {
        return 0;
    }

    if (tm_verbs_is_eth(link_layer)) {
        /* RoCE is routed by IP: the address families must agree */
        return tm_verbs_gid_is_ipv4(gid) == tm_verbs_gid_is_ipv4(&peer->gid);
    }

    /* InfiniBand: the same subnet, where the LID routes; or, across
     * subnets, routers forwarding by FLID, which both ports need (a port
     * with a FLID has its own prefix, so two ports of one subnet get here
     * too) */
    return (gid->global.subnet_prefix == peer->gid.global.subnet_prefix) ||
           ((tm_verbs_gid_flid(gid) != 0) &&
            (tm_verbs_gid_flid(&peer->gid) != 0));
}

/* As UCX's ib transports tell the same device (uct_ib_iface_is_same_device):
 * the same link layer and GID, and on InfiniBand the same LID */
int tm_verbs_peer_same_port(const tm_verbs_peer_t *a, const tm_verbs_peer_t *b)
{
    return (a->link_layer == b->link_layer) &&
           (tm_verbs_is_eth(a->link_layer) || (a->lid == b->lid)) &&
           (memcmp(a->gid.raw, b->gid.raw, sizeof(a->gid.raw)) == 0);
}

/* The LID a packet to the peer carries.  In another subnet the peer's own
 * LID means nothing to our switches: the routers take the peer's FLID (UCX
 * 1.16 and later: uct_ib_iface_resolve_remote_flid).  In our own subnet,
 * even between site-local GIDs, the LID routes. */
static uint16_t tm_verbs_peer_dlid(const tm_verbs_local_t *local,
                                   const tm_verbs_peer_t *peer)
{
    if (!tm_verbs_is_eth(local->link_layer) &&
        (tm_verbs_gid_flid(&local->gid) != 0) &&
        (tm_verbs_gid_flid(&peer->gid) != 0) &&
        (tm_verbs_gid_subnet16(&local->gid) !=
         tm_verbs_gid_subnet16(&peer->gid))) {
        return tm_verbs_gid_flid(&peer->gid);
    }
    return peer->lid;
}

void tm_verbs_ah_attr_fill(const tm_verbs_local_t *local,
                           const tm_verbs_peer_t *peer,
                           struct ibv_ah_attr *ah)
{
    int global = tm_verbs_is_eth(local->link_layer) ||
                 (local->port_flags & IBV_QPF_GRH_REQUIRED) ||
                 (local->gid.global.subnet_prefix !=
                  peer->gid.global.subnet_prefix);

    memset(ah, 0, sizeof(*ah));
    ah->port_num = local->port_num;
    ah->sl       = local->sl;
    ah->dlid     = tm_verbs_peer_dlid(local, peer);
    if (global) {
        ah->is_global      = 1;
        ah->grh.dgid       = peer->gid;
        ah->grh.sgid_index = local->gid_index;
        ah->grh.hop_limit  = TM_VERBS_HOP_LIMIT;
    }
}




/*
 * Partitions
 */
int tm_verbs_pkey_select(const uint16_t *table, unsigned len, uint32_t want,
                         uint16_t *index, uint16_t *pkey)
{
    int any       = !(want & TM_DEV_ATTR_SET);
    int limited   = -1;
    uint16_t part = (uint16_t)want;
    unsigned i;

    if (!any && ((want & ~TM_DEV_ATTR_SET) > TM_VERBS_PKEY_PARTITION)) {
        return EINVAL;
    }
    for (i = 0; i < len; ++i) {
        if ((table[i] & TM_VERBS_PKEY_PARTITION) == 0) {
            continue;       /* empty (0), or invalid (0x8000) */
        }
        if (!any && ((table[i] & TM_VERBS_PKEY_PARTITION) != part)) {
            continue;
        }
        if (table[i] & TM_VERBS_PKEY_FULL) {
            *index = (uint16_t)i;
            *pkey  = table[i];
            return 0;
        }
        if (limited < 0) {
            limited = (int)i;
        }
    }
    if (limited < 0) {
        return ENOENT;
    }
    *index = (uint16_t)limited;
    *pkey  = table[limited];
    return 0;
}

int tm_verbs_pkey_reachable(uint16_t a, uint16_t b)
{
    return ((a | b) & TM_VERBS_PKEY_FULL) &&
           !((a ^ b) & TM_VERBS_PKEY_PARTITION);
}


/*
 * Memory: what rdma-core's mlx5 allocates for a send queue
 */
static uint32_t tm_verbs_align(uint32_t value, uint32_t to)
{
    return (value + to - 1) & ~(to - 1);
}

static uint64_t tm_verbs_roundup_pow2(uint64_t value)
{
    uint64_t pow2 = 1;

    while (pow2 < value) {
        pow2 <<= 1;
    }
    return pow2;
}

int tm_verbs_mlx5_sq_size(uint32_t max_wr, uint32_t max_sge,
                          uint32_t max_inline, uint32_t max_desc,
                          tm_verbs_mlx5_sq_t *sq)
{
    uint32_t gather = TM_VERBS_MLX5_RC_OVERHEAD + (max_sge * 16);
    uint32_t inl    = 0;

    memset(sq, 0, sizeof(*sq));
    if (max_wr == 0) {
        sq->max_inline = max_inline;    /* untouched, as mlx5 leaves it */
        return 0;
    }
    if (max_inline != 0) {
        inl = TM_VERBS_MLX5_RC_OVERHEAD + tm_verbs_align(4 + max_inline, 16);
    }
    sq->wqe_size = tm_verbs_align((gather > inl) ? gather : inl,
                                  TM_VERBS_MLX5_SEND_WQE_BB);
    if ((gather > max_desc) || (inl > max_desc) || (sq->wqe_size > max_desc)) {
        memset(sq, 0, sizeof(*sq));
        return EINVAL;
    }
    sq->max_inline = sq->wqe_size - TM_VERBS_MLX5_RC_OVERHEAD - 4;
    sq->bytes      = tm_verbs_roundup_pow2((uint64_t)max_wr * sq->wqe_size);
    return 0;
}
