/*
 * Floods of unexpected messages: every rank but 0 sends NMSG messages to
 * rank 0 (Isend, mixed short eager, eager >= 1 KiB and rendezvous sizes)
 * before rank 0 posts any receive; then rank 0 receives them, per sender in
 * sending order, the senders taken round robin.  Repeated for a few rounds,
 * the second with receives posted in the reverse order of the senders.
 */
#include "rc_tm_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NMSG     1500
#define ROUNDS   2
#define MAXSIZE  (32 * 1024)

static size_t msg_size(int src, int i)
{
    if ((i % 100) == 3) {
        return 16 * 1024 + src; /* rendezvous */
    }
    if ((i % 3) == 0) {
        return 1024 + (i % 2000);     /* eager, offloadable size */
    }
    return 1 + ((i * 13 + src) % 200); /* short eager */
}

static uint64_t msg_seed(int round, int src, int i)
{
    return ((uint64_t)round << 48) | ((uint64_t)src << 24) | (uint64_t)i;
}

int main(int argc, char **argv)
{
    MPI_Request *reqs;
    MPI_Status st;
    rt_counters_t sum;
    char *sbuf, *rbuf;
    size_t off, s;
    int round, i, k, src, nsend, count, tag;
    uint64_t sent_eager = 0, sent_rndv = 0, tot[2], all[2];

    rt_init(&argc, &argv, argv[0], 2);
    nsend = rt_size - 1;
    reqs  = malloc(NMSG * sizeof(*reqs));
    /* senders keep every message in its own place until the Waitall */
    sbuf  = malloc((size_t)NMSG * (MAXSIZE / 8));
    rbuf  = malloc(MAXSIZE);
    RT_CHECK(reqs && sbuf && rbuf, "out of memory");
    rt_prime_offload(MPI_COMM_WORLD);

    for (round = 0; round < ROUNDS; ++round) {
        if (rt_rank != 0) {
            for (i = 0, off = 0; i < NMSG; ++i) {
                s   = msg_size(rt_rank, i);
                tag = i % 5; /* several tags, each kept in order */
                rt_fill(sbuf + off, s, msg_seed(round, rt_rank, i));
                RT_MPI(MPI_Isend(sbuf + off, (int)s, MPI_BYTE, 0, tag,
                                 MPI_COMM_WORLD, &reqs[i]));
                off += s;
                if (s > 8192) {
                    ++sent_rndv;
                } else {
                    ++sent_eager;
                }
            }
        }
        /* every message is sent (or its rendezvous request is) before
         * rank 0 posts a receive */
        RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
        if (rt_rank == 0) {
            for (i = 0; i < NMSG; ++i) {
                for (k = 0; k < nsend; ++k) {
                    src = (round & 1) ? nsend - k : 1 + k;
                    tag = i % 5;
                    RT_MPI(MPI_Recv(rbuf, MAXSIZE, MPI_BYTE, src, tag,
                                    MPI_COMM_WORLD, &st));
                    MPI_Get_count(&st, MPI_BYTE, &count);
                    s = msg_size(src, i);
                    RT_CHECK((size_t)count == s, "round %d: message %d from "
                             "%d has %d bytes, expected %zu", round, i, src,
                             count, s);
                    RT_VERIFY(rbuf, s, msg_seed(round, src, i),
                              "round %d message %d from %d", round, i, src);
                }
            }
        } else {
            RT_MPI(MPI_Waitall(NMSG, reqs, MPI_STATUSES_IGNORE));
        }
        RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
    }

    tot[0] = sent_eager;
    tot[1] = sent_rndv;
    RT_MPI(MPI_Allreduce(tot, all, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD));
    rt_end(&sum);
    if (rt_rank == 0) {
        printf("flood: sent %llu eager and %llu rendezvous messages to rank "
               "0\n", (unsigned long long)all[0], (unsigned long long)all[1]);
    }
    /* Nearly all arrive before their receive: unexpected in rc_tm */
    RT_CHECK(sum.c[RT_RX_EAGER_UNEXP] >= all[0] / 2, "only %llu unexpected "
             "eager messages through rc_tm, %llu were sent unexpected",
             (unsigned long long)sum.c[RT_RX_EAGER_UNEXP],
             (unsigned long long)all[0]);
    RT_CHECK(rt_rndv_unexpected(&sum) >= all[1] / 2, "only %llu unexpected "
             "rendezvous through rc_tm, %llu were sent unexpected",
             (unsigned long long)rt_rndv_unexpected(&sum),
             (unsigned long long)all[1]);
    RT_CHECK(sum.c[RT_RX_EXP] + sum.c[RT_RX_EAGER_UNEXP] +
             rt_rndv_unexpected(&sum) + rt_rndv_matched_in_device(&sum) >=
             all[0] + all[1], "rc_tm received fewer messages than were sent");
    free(reqs);
    free(sbuf);
    free(rbuf);
    return rt_finish();
}
