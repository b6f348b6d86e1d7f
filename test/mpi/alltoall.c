/*
 * All-to-all with many outstanding requests: every rank posts MPERPAIR
 * receives from every rank (itself included) and MPERPAIR sends to every
 * rank, all non-blocking, then one MPI_Waitall; several rounds with sizes
 * from short eager through rendezvous.  Messages of a pair share tags in
 * part (order checked) and differ in part.  Rounds alternate between
 * receives posted before the sends (barrier between) and sends first.
 */
#include "rc_tm_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MPERPAIR 8
#define ROUNDS   6

static size_t msg_size(int round, int src, int dst, int j)
{
    static const size_t base[ROUNDS] = {8, 1500, 6000, 8200, 30000, 100};

    return base[round] + (size_t)((src * 7 + dst * 3 + j * 11) % 97);
}

static uint64_t msg_seed(int round, int src, int dst, int j)
{
    return ((uint64_t)round << 48) | ((uint64_t)src << 32) |
           ((uint64_t)dst << 16) | (uint64_t)j;
}

static int msg_tag(int j)
{
    return (j < MPERPAIR / 2) ? 50 : 60 + j; /* first half share a tag */
}

int main(int argc, char **argv)
{
    int nreq = 2 * rt_size * MPERPAIR, round, peer, j, n, count;
    size_t slot = 32 * 1024, s;
    MPI_Request *reqs;
    MPI_Status *sts;
    rt_counters_t sum;
    char *sbuf, *rbuf;

    rt_init(&argc, &argv, argv[0], 2);
    nreq = 2 * rt_size * MPERPAIR;
    reqs = malloc(nreq * sizeof(*reqs));
    sts  = malloc(nreq * sizeof(*sts));
    sbuf = malloc((size_t)rt_size * MPERPAIR * slot);
    rbuf = malloc((size_t)rt_size * MPERPAIR * slot);
    RT_CHECK(reqs && sts && sbuf && rbuf, "out of memory");
    rt_prime_offload(MPI_COMM_WORLD);

    for (round = 0; round < ROUNDS * 2; ++round) {
        int r = round % ROUNDS, recv_first = (round / ROUNDS) == 0;

        n = 0;
        if (recv_first) {
            for (peer = 0; peer < rt_size; ++peer) {
                for (j = 0; j < MPERPAIR; ++j) {
                    RT_MPI(MPI_Irecv(rbuf + (peer * MPERPAIR + j) * slot,
                                     (int)slot, MPI_BYTE, peer, msg_tag(j),
                                     MPI_COMM_WORLD, &reqs[n++]));
                }
            }
            RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
        }
        for (j = 0; j < MPERPAIR; ++j) {
            for (peer = 0; peer < rt_size; ++peer) {
                /* a different peer order on each rank */
                int dst = (rt_rank + peer) % rt_size;
                char *p = sbuf + (dst * MPERPAIR + j) * slot;

                s = msg_size(r, rt_rank, dst, j);
                rt_fill(p, s, msg_seed(r, rt_rank, dst, j));
                RT_MPI(MPI_Isend(p, (int)s, MPI_BYTE, dst, msg_tag(j),
                                 MPI_COMM_WORLD, &reqs[n++]));
            }
        }
        if (!recv_first) {
            RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
            for (peer = 0; peer < rt_size; ++peer) {
                for (j = 0; j < MPERPAIR; ++j) {
                    RT_MPI(MPI_Irecv(rbuf + (peer * MPERPAIR + j) * slot,
                                     (int)slot, MPI_BYTE, peer, msg_tag(j),
                                     MPI_COMM_WORLD, &reqs[n++]));
                }
            }
        }
        RT_CHECK(n == nreq, "request count %d", n);
        RT_MPI(MPI_Waitall(nreq, reqs, sts));

        for (peer = 0; peer < rt_size; ++peer) {
            for (j = 0; j < MPERPAIR; ++j) {
                /* receive statuses: where the receives are in reqs[] */
                int idx = (recv_first ? 0 : rt_size * MPERPAIR) +
                          peer * MPERPAIR + j;

                s = msg_size(r, peer, rt_rank, j);
                MPI_Get_count(&sts[idx], MPI_BYTE, &count);
                RT_CHECK((size_t)count == s && sts[idx].MPI_SOURCE == peer,
                         "round %d: receive %d from %d got %d bytes from %d, "
                         "expected %zu", round, j, peer, count,
                         sts[idx].MPI_SOURCE, s);
                RT_VERIFY(rbuf + (peer * MPERPAIR + j) * slot, s,
                          msg_seed(r, peer, rt_rank, j), "round %d message %d "
                          "from %d", round, j, peer);
            }
        }
        RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
    }

    rt_end(&sum);
    RT_CHECK(sum.c[RT_RX_EXP] > 0, "no message matched in the device");
    RT_CHECK(sum.c[RT_RX_EAGER_UNEXP] > 0 && rt_rndv_unexpected(&sum) > 0,
             "no unexpected eager or rendezvous message through rc_tm");
    RT_CHECK(rt_rndv_matched_in_device(&sum) > 0, "no rendezvous matched in "
             "the device");
    free(reqs);
    free(sts);
    free(sbuf);
    free(rbuf);
    return rt_finish();
}
