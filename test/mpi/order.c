/*
 * Non-overtaking order between a pair (MPI 3.1 section 3.5): many messages
 * from one sender with the same tag and communicator are received in the
 * order they were sent, also when eager and rendezvous sizes are mixed (a
 * small eager message must not overtake a rendezvous sent before it).
 *
 * Pairs (0,1), (2,3)...: the even rank sends, the odd one receives.  Each
 * message carries a pattern seeded by its sequence number, so a message
 * delivered to the wrong receive is detected, and its size is checked.
 *   A: receives posted before the sends (matched in the device)
 *   B: sends before the receives are posted (unexpected)
 *   C: blocking sends against receives posted one by one (natural timing)
 */
#include "rc_tm_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NMSG     600
#define MAXSIZE  (64 * 1024)
#define TAG      42

static const size_t pattern_sizes[] = {
    8, 2000, 9000, 16, 1024, 65536, 8, 4096, 12000, 300, 8150, 8200, 1
};
#define NPATTERN (sizeof(pattern_sizes) / sizeof(pattern_sizes[0]))

static size_t msg_size(int phase, int seq)
{
    if (phase == 0) {
        return 1500; /* all the same size first */
    }
    return pattern_sizes[(seq * 7 + phase) % NPATTERN];
}

static uint64_t msg_seed(int phase, int seq)
{
    return ((uint64_t)phase << 40) | (uint64_t)seq;
}

static void run_phase(int phase, int mode, int partner, int sender,
                      char **bufs, MPI_Request *reqs)
{
    MPI_Status st;
    int i, count;
    size_t s;

    if (sender) {
        if (mode == 'C') {
            for (i = 0; i < NMSG; ++i) {
                s = msg_size(phase, i);
                rt_fill(bufs[i], s, msg_seed(phase, i));
                RT_MPI(MPI_Send(bufs[i], (int)s, MPI_BYTE, partner, TAG,
                                MPI_COMM_WORLD));
            }
        } else {
            if (mode == 'A') {
                RT_MPI(MPI_Barrier(MPI_COMM_WORLD)); /* receives posted */
            }
            for (i = 0; i < NMSG; ++i) {
                s = msg_size(phase, i);
                rt_fill(bufs[i], s, msg_seed(phase, i));
                RT_MPI(MPI_Isend(bufs[i], (int)s, MPI_BYTE, partner, TAG,
                                 MPI_COMM_WORLD, &reqs[i]));
            }
            if (mode == 'B') {
                RT_MPI(MPI_Barrier(MPI_COMM_WORLD)); /* sends issued */
            }
            RT_MPI(MPI_Waitall(NMSG, reqs, MPI_STATUSES_IGNORE));
        }
        return;
    }

    /* receiver: every receive takes up to MAXSIZE, the size tells which
     * message arrived */
    if (mode == 'B') {
        RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
    }
    for (i = 0; i < NMSG; ++i) {
        if (mode == 'C') {
            RT_MPI(MPI_Recv(bufs[i], MAXSIZE, MPI_BYTE, partner, TAG,
                            MPI_COMM_WORLD, &st));
            MPI_Get_count(&st, MPI_BYTE, &count);
            s = msg_size(phase, i);
            RT_CHECK((size_t)count == s, "phase %d mode %c: message %d has "
                     "%d bytes, expected %zu (out of order)", phase, mode, i,
                     count, s);
            RT_VERIFY(bufs[i], s, msg_seed(phase, i),
                      "phase %d mode %c message %d", phase, mode, i);
        } else {
            RT_MPI(MPI_Irecv(bufs[i], MAXSIZE, MPI_BYTE, partner, TAG,
                             MPI_COMM_WORLD, &reqs[i]));
        }
    }
    if (mode == 'C') {
        return;
    }
    if (mode == 'A') {
        RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
    }
    for (i = 0; i < NMSG; ++i) {
        RT_MPI(MPI_Wait(&reqs[i], &st));
        MPI_Get_count(&st, MPI_BYTE, &count);
        s = msg_size(phase, i);
        RT_CHECK((size_t)count == s && st.MPI_SOURCE == partner &&
                 st.MPI_TAG == TAG, "phase %d mode %c: receive %d got %d "
                 "bytes from %d tag %d, expected %zu from %d (out of order)",
                 phase, mode, i, count, st.MPI_SOURCE, st.MPI_TAG, s, partner);
        RT_VERIFY(bufs[i], s, msg_seed(phase, i), "phase %d mode %c message "
                  "%d (out of order?)", phase, mode, i);
    }
}

int main(int argc, char **argv)
{
    static const int modes[] = {'A', 'B', 'C'};
    MPI_Request *reqs;
    rt_counters_t sum;
    char **bufs;
    int i, m, phase, partner, sender, active;

    rt_init(&argc, &argv, argv[0], 2);
    partner = rt_rank ^ 1;
    active  = partner < rt_size;    /* an odd last rank only joins barriers */
    sender  = !(rt_rank & 1);
    bufs    = malloc(NMSG * sizeof(*bufs));
    reqs    = malloc(NMSG * sizeof(*reqs));
    RT_CHECK(bufs && reqs, "out of memory");
    for (i = 0; i < NMSG; ++i) {
        bufs[i] = malloc(MAXSIZE);
        RT_CHECK(bufs[i], "out of memory");
    }

    rt_prime_offload(MPI_COMM_WORLD);

    for (phase = 0; phase < 3; ++phase) {
        for (m = 0; m < 3; ++m) {
            if (active) {
                run_phase(phase, modes[m], partner, sender, bufs, reqs);
            } else if (modes[m] != 'C') {
                RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
            }
        }
    }

    rt_end(&sum);
    RT_CHECK(sum.c[RT_RX_EXP] > 0, "no eager message matched in the device");
    RT_CHECK(sum.c[RT_RX_EAGER_UNEXP] > 0, "no unexpected eager message "
             "through rc_tm");
    RT_CHECK(rt_rndv_unexpected(&sum) > 0, "no unexpected rendezvous through "
             "rc_tm");
    RT_CHECK(rt_rndv_matched_in_device(&sum) > 0, "no rendezvous matched in "
             "the device");
    for (i = 0; i < NMSG; ++i) {
        free(bufs[i]);
    }
    free(bufs);
    free(reqs);
    return rt_finish();
}
