/*
 * Synchronous send: MPI_Ssend and MPI_Issend, eager (short and >= 1 KiB)
 * and rendezvous sizes, to a receive posted before (matched in the device)
 * and after the send (unexpected).  A synchronous send must not complete
 * before its receive is posted: the sender tests its MPI_Issend for a while
 * before the receiver posts, and it must still be pending.
 *
 * Pairs (0,1)...: the even rank sends, the odd one receives.
 */
#include "rc_tm_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPS 5

static const size_t sizes[] = {1, 64, 1024, 4000, 8100, 8300, 65536, 1 << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

int main(int argc, char **argv)
{
    MPI_Request req;
    MPI_Status st;
    rt_counters_t sum;
    char *buf;
    int partner, sender, active, k, rep, flag, count, spins;
    double t0;
    uint64_t seed;
    size_t s;

    rt_init(&argc, &argv, argv[0], 2);
    partner = rt_rank ^ 1;
    active  = partner < rt_size;
    sender  = !(rt_rank & 1);
    buf     = malloc(1 << 20);
    RT_CHECK(buf, "out of memory");
    rt_prime_offload(MPI_COMM_WORLD);

    for (k = 0; k < (int)NSIZES; ++k) {
        s = sizes[k];
        for (rep = 0; rep < REPS; ++rep) {
            seed = ((uint64_t)k << 32) | (uint64_t)rep << 8;

            /* 1: receive posted first, MPI_Ssend */
            if (active && !sender) {
                RT_MPI(MPI_Irecv(buf, (int)s, MPI_BYTE, partner, 1,
                                 MPI_COMM_WORLD, &req));
            }
            RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
            if (active && sender) {
                rt_fill(buf, s, seed | 1);
                RT_MPI(MPI_Ssend(buf, (int)s, MPI_BYTE, partner, 1,
                                 MPI_COMM_WORLD));
            } else if (active) {
                RT_MPI(MPI_Wait(&req, &st));
                MPI_Get_count(&st, MPI_BYTE, &count);
                RT_CHECK((size_t)count == s, "Ssend size %zu: %d bytes", s,
                         count);
                RT_VERIFY(buf, s, seed | 1, "Ssend size %zu (pre-posted)", s);
            }

            /* 2: MPI_Issend first; it must stay pending until the receive
             * is posted */
            if (active && sender) {
                rt_fill(buf, s, seed | 2);
                RT_MPI(MPI_Issend(buf, (int)s, MPI_BYTE, partner, 2,
                                  MPI_COMM_WORLD, &req));
                t0 = MPI_Wtime();
                spins = 0;
                do {
                    RT_MPI(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
                    RT_CHECK(!flag, "Issend size %zu completed before its "
                             "receive was posted", s);
                    ++spins;
                } while ((MPI_Wtime() - t0 < 0.002) || (spins < 20));
            }
            RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
            if (active && sender) {
                RT_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
            } else if (active) {
                RT_MPI(MPI_Recv(buf, (int)s, MPI_BYTE, partner, 2,
                                MPI_COMM_WORLD, &st));
                MPI_Get_count(&st, MPI_BYTE, &count);
                RT_CHECK((size_t)count == s, "Issend size %zu: %d bytes", s,
                         count);
                RT_VERIFY(buf, s, seed | 2, "Issend size %zu (unexpected)", s);
            }

            /* 3: blocking MPI_Ssend against a blocking receive, natural
             * timing, both directions */
            if (active) {
                if (sender) {
                    rt_fill(buf, s, seed | 3);
                    RT_MPI(MPI_Ssend(buf, (int)s, MPI_BYTE, partner, 3,
                                     MPI_COMM_WORLD));
                    RT_MPI(MPI_Recv(buf, (int)s, MPI_BYTE, partner, 3,
                                    MPI_COMM_WORLD, &st));
                    RT_VERIFY(buf, s, seed | 4, "Ssend back size %zu", s);
                } else {
                    RT_MPI(MPI_Recv(buf, (int)s, MPI_BYTE, partner, 3,
                                    MPI_COMM_WORLD, &st));
                    RT_VERIFY(buf, s, seed | 3, "Ssend size %zu", s);
                    rt_fill(buf, s, seed | 4);
                    RT_MPI(MPI_Ssend(buf, (int)s, MPI_BYTE, partner, 3,
                                     MPI_COMM_WORLD));
                }
            }
        }
    }

    rt_end(&sum);
    RT_CHECK(sum.c[RT_RX_EXP] > 0, "no synchronous eager message matched in "
             "the device");
    RT_CHECK(sum.c[RT_RX_EAGER_UNEXP] > 0, "no unexpected eager message "
             "through rc_tm");
    RT_CHECK(rt_rndv_unexpected(&sum) > 0 && rt_rndv_matched_in_device(&sum) > 0,
             "rendezvous synchronous sends did not go through rc_tm both "
             "ways (unexpected and matched in the device)");
    free(buf);
    return rt_finish();
}
