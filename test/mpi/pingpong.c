/*
 * Ping-pong between rank pairs (0,1), (2,3), ... over every protocol size:
 * powers of two from 1 B to 4 MiB and odd sizes around UCX_TM_THRESH (1 KiB)
 * and around rc_tm's eager/rendezvous switch (~8 KiB).
 *
 * Phase 1 (pre-posted): both sides post their receive, a barrier, then the
 * ping: every receive >= 1 KiB is in the device when its message arrives,
 * so the device must match eager and rendezvous messages (RX_EXP,
 * RX_RNDV_EXP).  Phase 2: plain blocking MPI_Send/MPI_Recv ping-pong, the
 * natural timing (expected or unexpected, whichever wins).
 */
#include "rc_tm_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t sizes[128];
static int nsizes;

static void add_size(size_t s)
{
    int i;

    for (i = 0; i < nsizes; ++i) {
        if (sizes[i] == s) {
            return;
        }
    }
    sizes[nsizes++] = s;
}

static void make_sizes(void)
{
    size_t s;
    long d;

    for (s = 1; s <= 4u << 20; s *= 2) {
        add_size(s);
    }
    for (d = -2; d <= 2; ++d) {
        add_size(1024 + d);  /* UCX_TM_THRESH */
    }
    /* eager limit: 8 KiB segment less headers */
    for (s = 8100; s <= 8200; s += 7) {
        add_size(s);
    }
    for (d = -3; d <= 3; ++d) {
        add_size(8192 + d);
        add_size(8176 + d);
        add_size(8160 + d);
    }
    add_size(16 * 1024 + 1);
    add_size(100001);
    add_size((4u << 20) - 1);
}

int main(int argc, char **argv)
{
    rt_counters_t sum;
    char *sbuf, *rbuf;
    int i, it, partner, ping, iters;
    size_t s, maxsize = 4u << 20;
    uint64_t seed;
    MPI_Request rreq;
    MPI_Status st;
    int count;

    rt_init(&argc, &argv, argv[0], 2);
    make_sizes();
    sbuf = malloc(maxsize);
    rbuf = malloc(maxsize);
    RT_CHECK(sbuf && rbuf, "out of memory");

    /* Pairs; an odd last rank talks to itself */
    partner = (rt_rank ^ 1) < rt_size ? (rt_rank ^ 1) : rt_rank;
    ping    = !(rt_rank & 1);

    rt_prime_offload(MPI_COMM_WORLD);

    /* Phase 1: receives posted before the messages are sent */
    for (i = 0; i < nsizes; ++i) {
        s     = sizes[i];
        iters = (s >= (1u << 20)) ? 2 : 4;
        for (it = 0; it < iters; ++it) {
            seed = ((uint64_t)i << 32) | ((uint64_t)it << 8);
            memset(rbuf, 0xee, s);
            RT_MPI(MPI_Irecv(rbuf, (int)s, MPI_BYTE, partner, i, MPI_COMM_WORLD,
                             &rreq));
            RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
            if (partner == rt_rank) {
                /* odd rank out: a message to itself */
                rt_fill(sbuf, s, seed + rt_rank);
                RT_MPI(MPI_Send(sbuf, (int)s, MPI_BYTE, rt_rank, i,
                                MPI_COMM_WORLD));
                RT_MPI(MPI_Wait(&rreq, &st));
                RT_VERIFY(rbuf, s, seed + rt_rank,
                          "phase 1 self size %zu iter %d", s, it);
            } else if (ping) {
                rt_fill(sbuf, s, seed + rt_rank);
                RT_MPI(MPI_Send(sbuf, (int)s, MPI_BYTE, partner, i,
                                MPI_COMM_WORLD));
                RT_MPI(MPI_Wait(&rreq, &st));
                RT_VERIFY(rbuf, s, seed + partner + 1,
                          "phase 1 pong size %zu iter %d from %d", s, it, partner);
            } else {
                RT_MPI(MPI_Wait(&rreq, &st));
                RT_VERIFY(rbuf, s, seed + partner,
                          "phase 1 ping size %zu iter %d from %d", s, it, partner);
                rt_fill(sbuf, s, seed + rt_rank + 1);
                RT_MPI(MPI_Send(sbuf, (int)s, MPI_BYTE, partner, i,
                                MPI_COMM_WORLD));
            }
            MPI_Get_count(&st, MPI_BYTE, &count);
            RT_CHECK((size_t)count == s && st.MPI_SOURCE == partner &&
                     st.MPI_TAG == i, "phase 1 size %zu: status count %d "
                     "source %d tag %d", s, count, st.MPI_SOURCE, st.MPI_TAG);
        }
    }

    /* Phase 2: blocking ping-pong, natural timing */
    for (i = 0; i < nsizes; ++i) {
        s     = sizes[i];
        iters = (s >= (1u << 20)) ? 2 : 10;
        for (it = 0; it < iters; ++it) {
            seed = ((uint64_t)i << 32) | ((uint64_t)it << 8) | 0x80;
            if (partner == rt_rank) {
                break;
            }
            if (ping) {
                rt_fill(sbuf, s, seed);
                RT_MPI(MPI_Send(sbuf, (int)s, MPI_BYTE, partner, 1000 + i,
                                MPI_COMM_WORLD));
                RT_MPI(MPI_Recv(rbuf, (int)s, MPI_BYTE, partner, 1000 + i,
                                MPI_COMM_WORLD, &st));
                RT_VERIFY(rbuf, s, seed + 1, "phase 2 pong size %zu iter %d",
                          s, it);
            } else {
                RT_MPI(MPI_Recv(rbuf, (int)s, MPI_BYTE, partner, 1000 + i,
                                MPI_COMM_WORLD, &st));
                RT_VERIFY(rbuf, s, seed, "phase 2 ping size %zu iter %d",
                          s, it);
                rt_fill(sbuf, s, seed + 1);
                RT_MPI(MPI_Send(sbuf, (int)s, MPI_BYTE, partner, 1000 + i,
                                MPI_COMM_WORLD));
            }
            MPI_Get_count(&st, MPI_BYTE, &count);
            RT_CHECK((size_t)count == s, "phase 2 size %zu: count %d", s,
                     count);
        }
    }

    rt_end(&sum);
    /* Receives >= 1 KiB were posted before their messages, after the
     * offload was primed: the device matched eager and rendezvous ones */
    RT_CHECK(sum.c[RT_RX_EXP] > 0, "no eager message matched in the device "
             "(RX_EXP = 0): tag offload not used");
    RT_CHECK(rt_rndv_matched_in_device(&sum) > 0, "no rendezvous matched in "
             "the device (RX_RNDV_EXP = RX_RNDV_REQ_EXP = 0 and TX_RNDV <= "
             "RX_RNDV_UNEXP)");
    RT_CHECK(rt_rndv_sent(&sum) > 0, "no rendezvous sent through rc_tm");
    RT_CHECK(sum.c[RT_LIST_ADD] > 0, "no receive posted to the device");
    free(sbuf);
    free(rbuf);
    return rt_finish();
}
