/*
 * Software NIC: what processes share (shared-memory segments in /dev/shm).
 *
 * Every segment is named after the process that created it (pid and start
 * time, so that a reused pid is not mistaken for it) and its context (the
 * device opened, numbered within the process):
 *   rc_tm_soft.<pid>.<start>.d<dev>          the device: registration table
 *   rc_tm_soft.<pid>.<start>.d<dev>.q<qpn>   a QP's inbound ring
 *   rc_tm_soft.<pid>.<start>.d<dev>.r<n>     a ring a QP accepted by a remote
 *                                            TM-SRQ takes in from
 *   rc_tm_soft.<pid>.<start>.d<dev>.s<srqn>  a TM-SRQ's accept queue
 *
 * QP and TM-SRQ numbers are the device's, as a NIC's firmware gives them:
 * unique among all the processes of the host's user, whose contexts share
 * one GID.  Each number in use has an entry, a symbolic link whose target
 * names its owner (the suffix of the owner's device segment name):
 *   rc_tm_soft.u<uid>.q<qpn>   -> <pid>.<start>.d<dev>
 *   rc_tm_soft.u<uid>.s<srqn>  -> <pid>.<start>.d<dev>
 * Creating the link takes the number (symlink fails when it exists) and
 * publishes its owner in one step; a peer reads it (readlink) to find the
 * segment a QP or SRQ number names.  An entry whose owner died is ignored,
 * never reused while it exists, and unlinked by the next sweep of
 * leftovers (sn_reclaim_leftovers, under a lock: the name may be reused
 * once it is gone).
 */
#ifndef SOFTNIC_WIRE_H_
#define SOFTNIC_WIRE_H_

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define SN_CACHE_LINE          64
#define SN_ALIGNED             __attribute__((aligned(SN_CACHE_LINE)))

#define SN_SHM_PREFIX          "rc_tm_soft."
#define SN_MAGIC               0x72637473u   /* "rcts" */
#define SN_VERSION             16u           /* 14: one GID per device,
                                                numbers by registry; 15:
                                                UD rings (many producers);
                                                16: inline data beside the
                                                send queue, as granted */

/* Registration table: key = generation << 20 | slot (slot 0 unused).  UCP
 * registers every offloaded receive buffer, so MPI codes with deep receive
 * queues need far more than 64k regions; the shared table is sparse (pages
 * are touched only as slots are first used). */
#define SN_MR_SLOT_BITS        20
#define SN_MR_SLOTS            (1u << SN_MR_SLOT_BITS)
#define SN_MR_GEN_MAX          ((1u << (32 - SN_MR_SLOT_BITS)) - 1)


/* A process, told apart from a later one with the same pid */
typedef struct sn_proc_id {
    uint32_t pid;
    uint32_t uid;
    uint64_t start_time;        /* /proc/<pid>/stat field 22 */
} sn_proc_id_t;

/* Header of every segment: who owns it */
typedef struct sn_seg_hdr {
    uint32_t         magic;
    uint32_t         version;
    sn_proc_id_t     owner;
    uint32_t         kind;      /* SN_SEG_* */
    _Atomic uint32_t closed;    /* owner destroyed it: peers see a dead end */
} sn_seg_hdr_t;

enum { SN_SEG_DEV = 1, SN_SEG_RING = 2, SN_SEG_SRQ = 3 };

/* One registration (read by peers) */
typedef struct sn_mr_slot {
    _Atomic uint32_t gen;       /* 0: free; else the key's generation */
    uint32_t         access;
    uint64_t         addr;
    uint64_t         length;
    uint64_t         reserved;
} sn_mr_slot_t;

/*
 * A device's doorbell (softnic_engine.c): how the device's engine thread,
 * asleep, learns of work.  seq is a futex word (non-private: peers ring it
 * through their own mapping of the segment); whoever publishes work the
 * engine must see (a record in a ring it consumes, room in a ring it
 * produces into, a connection request, a local verb) and finds it asleep
 * bumps seq and wakes it.  engine is set for the life of an engine (before
 * any QP of the device exists), so that a device without one costs its
 * peers one load.
 */
typedef struct sn_doorbell {
    _Atomic uint32_t seq;       /* futex word: bumped by each wake */
    _Atomic uint32_t sleep;     /* SN_DB_* */
    _Atomic uint32_t engine;    /* 1 while the device has an engine */
    _Atomic uint32_t wakes;     /* wakes asked of it (statistics) */
} sn_doorbell_t;

enum {
    SN_DB_AWAKE,                /* running or spinning */
    SN_DB_TIMED,                /* asleep until rung or its liveness timer */
    SN_DB_IDLE                  /* asleep until rung */
};

/*
 * A shared read (softnic_rdma.c): a peer's NIC reading this device's memory
 * offers the read here in chunks, and this device, when it runs, copies
 * some of them into the reader's memory (process_vm_writev), as a
 * responder's NIC serves a read: two CPUs copy where one would.  claim is
 * generation << 32 | state: SN_SHARE_FREE, SN_SHARE_FILLING | the reader's
 * pid while it fills the slot, or SN_SHARE_OPEN + the next chunk to take;
 * a chunk is taken by compare-and-swap, by either side, so a stale look at
 * a reused slot takes nothing.  SN_SHARE_CLOSED in the state: no chunk is
 * taken any more, and the rest still counts those that were.  The reader
 * waits for the chunks this device took (done) before it frees the slot; a
 * reader that dies holding it, filling it included, has the slot freed by
 * this device.
 */
#define SN_SHARE_SLOTS         16

enum { SN_SHARE_FREE, SN_SHARE_OPEN = 2 };
#define SN_SHARE_FILLING       0x40000000u  /* | pid (below 2^22) */
#define SN_SHARE_CLOSED        0x80000000u

typedef struct sn_share_slot {
    _Atomic uint64_t claim;
    _Atomic uint32_t done;      /* chunks this device copied (or failed) */
    _Atomic uint32_t error;     /* errno of a copy of ours that failed */
    _Atomic uint32_t pid;       /* the reader, with start_time */
    _Atomic uint32_t rkey;      /* of our memory */
    _Atomic uint64_t local;     /* the reader's address */
    _Atomic uint64_t remote;    /* ours */
    _Atomic uint64_t length;
    _Atomic uint32_t chunk;     /* bytes a chunk, the last one shorter */
    _Atomic uint32_t nchunks;
    _Atomic uint64_t start_time;
} SN_ALIGNED sn_share_slot_t;

/*
 * Wake bits of parked rings (softnic_park.c): a consumer stops looking at
 * an inbound ring that stays empty while it has many, and parks it
 * (sn_ring_ctl_t.parked = 1 + the ring's wake slot).  The ring's producer,
 * having published into a parked ring, takes the park (exchanges it to 0)
 * and sets the slot's bit in its consumer's device segment, then the
 * word's bit in sum; the consumer reads sum on each arrival run.  A
 * producer bound to a bad slot number sets nothing.
 */
#define SN_WAKE_SLOTS          4096
#define SN_WAKE_WORDS          (SN_WAKE_SLOTS / 64)

typedef struct sn_wake {
    _Atomic uint64_t sum;       /* bit w: word[w] has bits set */
    _Atomic uint64_t word[SN_WAKE_WORDS] SN_ALIGNED;
} sn_wake_t;

/* Device segment: header, doorbell, wake bits, shared reads, then the
 * registration table */
typedef struct sn_dev_seg {
    sn_seg_hdr_t     hdr;
    sn_doorbell_t    db SN_ALIGNED;
    sn_wake_t        wake SN_ALIGNED;
    _Atomic uint32_t shares SN_ALIGNED;  /* slots taken: 0, nothing to do */
    sn_share_slot_t  share[SN_SHARE_SLOTS];
    sn_mr_slot_t     mr[SN_MR_SLOTS] SN_ALIGNED;
} sn_dev_seg_t;


/*
 * A TM-SRQ's accept queue (softnic_dv_connect_qp_to_srq): a peer asking
 * for a connection to the SRQ claims a slot, fills it and marks it ready;
 * the SRQ's NIC accepts it when it next runs, with a pair of QPs: a
 * receive-only one for the requester's sending QP, a sending one for its
 * receive-only QP.  The requester creates the four rings of the connection
 * (the two the accepted QPs take in are its 'r' segments, named by numbers
 * of its own; the other two are its QPs' rings, named by their numbers).
 */
#define SN_ACCEPT_SLOTS   64

typedef struct sn_accept_slot {
    _Atomic uint32_t state;     /* SN_SLOT_* */
    uint32_t         in_qpn;    /* the ring the requester's sending QP
                                   produces into */
    uint32_t         out_qpn;   /* that QP: its inbound ring */
    uint32_t         rx_in_qpn; /* the ring its receive-only QP produces
                                   into */
    uint32_t         rx_out_qpn;/* that QP: its inbound ring */
    uint32_t         reserved;
    sn_proc_id_t     proc;      /* the requester's device */
    uint32_t         host_id;
    uint32_t         dev_seq;
} sn_accept_slot_t;

enum { SN_SLOT_FREE, SN_SLOT_CLAIMED, SN_SLOT_READY };

typedef struct sn_srq_seg {
    sn_seg_hdr_t     hdr;
    _Atomic uint32_t requests SN_ALIGNED;  /* slots made ready, ever */
    sn_accept_slot_t slot[SN_ACCEPT_SLOTS] SN_ALIGNED;
} sn_srq_seg_t;


/*
 * Ring: single producer (the peer QP's requester), single consumer (the
 * owner's responder); a UD QP's ring has one producer at a time among
 * many (prod_lock).  Byte positions grow forever; records are cache-line
 * aligned and never wrap (a PAD record fills the end of the buffer).
 *
 * The consumer polls the type of the record at its own position, not the
 * producer's position: a new message costs the consumer one cache-line
 * transfer (the record, header and small payload together) instead of two.
 * Type 0 means "nothing yet".  Stale bytes of an earlier lap never look like
 * a record because the producer writes type 0 at the start of the next record
 * (the "terminator") before it publishes a record's type with a release
 * store; so the consumer, having acquired a record, sees 0 or a newer record
 * where the next one starts.  The ring keeps one line free for it.  The
 * consumer writes the last byte of each line of a message it took before it
 * moves head (sn_ring_hand_back), so that the producer's next lap fetches
 * lines written instead of invalidating ones read.  head is
 * the consumer's position, read by the producer only when it needs it (ring
 * full, send completions).  parked is the consumer's too, written only
 * when it parks the ring or takes it back (softnic_park.c), so that a
 * producer's look at it after each publication stays in its cache: it
 * shares the read-mostly first line, away from the aligned pair of lines
 * of head (a load of one line of a pair may fetch the other).
 */
typedef struct sn_ring_ctl {
    sn_seg_hdr_t     hdr;
    uint32_t         size;      /* bytes of data, a power of two */
    _Atomic uint32_t producer_attached;
    sn_proc_id_t     producer;
    _Atomic uint32_t parked;    /* 0, or 1 + the consumer's wake slot of
                                   the ring */
    _Atomic uint32_t pkey;      /* the consumer QP's P_Key (its port's
                                   table at its index) */
    uint32_t         qp_type;   /* the consumer QP's: IBV_QPT_RC or UD */
    _Atomic uint32_t qkey;      /* UD: the consumer QP's Q_Key */
    _Atomic uint32_t rx_on;     /* UD: the consumer QP takes datagrams
                                   (RTR or RTS) */
    uint8_t          pad0[SN_CACHE_LINE];
    _Atomic uint64_t head SN_ALIGNED;     /* written by the consumer */
    uint8_t          pad1[SN_CACHE_LINE];
    /* The producer's send backlog, which the consumer's device may take
     * while the producer does not poll (softnic_pull.c): under lock, which
     * either side holds for one step; written only while a backlog is
     * offered, so away from head's pair of lines */
    _Atomic uint32_t backlog_lock SN_ALIGNED;
    _Atomic uint32_t backlog_sent;  /* the producer's oldest WQE not on
                                       the wire, the consumer's next pull */
    _Atomic uint32_t backlog_tail;  /* offered up to (excluding) this */
    _Atomic uint32_t backlog_pushes;/* the producer's pushes while it
                                       offers: it still polls */
    uint32_t         sq_mask;       /* the producer's send queue ... */
    uint32_t         wqe_size;      /* ... of entries of this size ... */
    uint64_t         sq_addr;       /* ... in its own memory, */
    uint64_t         sq_inline_addr;/* and each entry's inline data */
    uint32_t         sq_inline_size;/* in slots of this size there */
    /* What the consumer answers, when not an ack, to the record at
     * nak_pos (softnic_rq.h, SN_NAK_*): written only for QPs whose
     * receives are not tag matching, so away from head.  rnr_retry is the
     * producer's (its QP's, at RTS) */
    _Atomic uint32_t nak SN_ALIGNED;
    uint32_t         nak_status;    /* SN_NAK_FAILED: the requester's */
    uint64_t         nak_pos;
    uint64_t         rnr_t0_ns;     /* SN_NAK_RNR: the first NAK ... */
    uint64_t         rnr_timer_ns;  /* ... and the wait between retries */
    uint32_t         rnr_retry;     /* 7: retried for ever */
    /* A UD QP's ring has many producers (softnic_ud.c): each writes its
     * records under prod_lock (0, or the holder's pid and the low bits of
     * its start time) from prod_tail, which is the end of what was
     * published once the lock is free; a holder that died leaves it
     * behind its last published record, and the next holder, which takes
     * the lock from the dead, looks past it (sn_ud_ring_lock) */
    _Atomic uint64_t prod_lock SN_ALIGNED;
    uint64_t         prod_tail;
    uint8_t          data[] SN_ALIGNED;
} sn_ring_ctl_t;

typedef struct sn_rec {
    uint32_t         len;       /* payload bytes */
    uint16_t         type;      /* 0 (not yet) / SN_REC_MSG / SN_REC_PAD /
                                 * SN_REC_BACKLOG, accessed atomically (the
                                 * record's flag) */
    uint16_t         flags;     /* SN_REC_F_* */
    uint32_t         imm_data;  /* big endian, as posted */
    uint32_t         write_len; /* SN_REC_F_WRITE: bytes the RDMA WRITE
                                   before it wrote */
} sn_rec_t;

/* SN_REC_BACKLOG: a mark where the producer's next record goes, written
 * under the backlog lock: the rest waits in its send queue (softnic_pull.c) */
enum { SN_REC_MSG = 1, SN_REC_PAD = 2, SN_REC_BACKLOG = 3 };
/* SN_REC_F_WRITE: the immediate data of an RDMA WRITE with immediate,
 * whose data went before it (no payload; it consumes a receive) */
/* SN_REC_F_SOLICITED: the sender set IBV_SEND_SOLICITED (the solicited
 * event bit: its receive completion raises a solicited-only arm) */
enum { SN_REC_F_IMM = 1, SN_REC_F_WRITE = 2, SN_REC_F_SOLICITED = 4 };

/* Ring bytes a record of len payload bytes takes (whole cache lines) */
static inline uint32_t sn_rec_size(uint32_t len)
{
    return (sizeof(sn_rec_t) + len + SN_CACHE_LINE - 1) &
           ~(uint32_t)(SN_CACHE_LINE - 1);
}

static inline sn_rec_t *sn_ring_rec(sn_ring_ctl_t *ring, uint32_t mask,
                                    uint64_t pos)
{
    return (sn_rec_t *)(ring->data + (pos & mask));
}

/* The record's flag: acquire, so that its contents are visible after it */
static inline uint16_t sn_rec_type(const sn_rec_t *rec)
{
    return __atomic_load_n(&rec->type, __ATOMIC_ACQUIRE);
}

static inline uint64_t sn_ring_seg_size(uint32_t ring_size)
{
    return sizeof(sn_ring_ctl_t) + ring_size;
}

#endif
