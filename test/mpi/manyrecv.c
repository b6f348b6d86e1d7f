/*
 * Many more posted receives than the device list holds (run with
 * UCX_RC_TM_LIST_SIZE=16): the receiver posts NRECV receives >= 1 KiB
 * (UCP offers every one to rc_tm), then the sender sends them in an order
 * unrelated to the posting order: reversed tags, then interleaved, then
 * many receives on one tag (matched in posting order).
 *
 * Pairs (0,1), (2,3)...: the even rank sends, the odd one receives.
 */
#include "rc_tm_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NRECV   2000
#define SLOT    4096

static size_t msg_size(int round, int i)
{
    /* mostly eager >= 1 KiB, every 50th a rendezvous */
    if ((i % 50) == 7) {
        return 20000 + i;
    }
    return 1024 + ((i * 37 + round * 11) % (SLOT - 1024));
}

static int send_index(int round, int k)
{
    switch (round) {
    case 0:  return NRECV - 1 - k;                  /* reversed */
    case 1:  return (k * 7) % NRECV;                /* interleaved (7 ∤ 2000) */
    default: return k;                              /* same tag: in order */
    }
}

int main(int argc, char **argv)
{
    MPI_Request *reqs;
    MPI_Status st;
    rt_counters_t sum;
    char **bufs;
    int round, i, k, partner, sender, active, tag, count;
    size_t s, maxs = 20000 + NRECV;
    uint64_t post_sw;

    rt_init(&argc, &argv, argv[0], 2);
    partner = rt_rank ^ 1;
    active  = partner < rt_size;
    sender  = !(rt_rank & 1);
    bufs    = malloc(NRECV * sizeof(*bufs));
    reqs    = malloc(NRECV * sizeof(*reqs));
    RT_CHECK(bufs && reqs, "out of memory");
    for (i = 0; i < NRECV; ++i) {
        bufs[i] = malloc(maxs);
        RT_CHECK(bufs[i], "out of memory");
    }
    rt_prime_offload(MPI_COMM_WORLD);

    for (round = 0; round < 3; ++round) {
        if (active && !sender) {
            for (i = 0; i < NRECV; ++i) {
                tag = (round == 2) ? 9 : 1000 + i;
                RT_MPI(MPI_Irecv(bufs[i], (int)maxs, MPI_BYTE, partner, tag,
                                 MPI_COMM_WORLD, &reqs[i]));
            }
        }
        RT_MPI(MPI_Barrier(MPI_COMM_WORLD)); /* all receives posted */
        if (active && sender) {
            for (k = 0; k < NRECV; ++k) {
                i   = send_index(round, k);
                s   = msg_size(round, i);
                tag = (round == 2) ? 9 : 1000 + i;
                rt_fill(bufs[0], s, ((uint64_t)round << 32) | i);
                RT_MPI(MPI_Send(bufs[0], (int)s, MPI_BYTE, partner, tag,
                                MPI_COMM_WORLD));
            }
        } else if (active) {
            for (i = 0; i < NRECV; ++i) {
                RT_MPI(MPI_Wait(&reqs[i], &st));
                MPI_Get_count(&st, MPI_BYTE, &count);
                s   = msg_size(round, i);
                tag = (round == 2) ? 9 : 1000 + i;
                RT_CHECK((size_t)count == s && st.MPI_TAG == tag &&
                         st.MPI_SOURCE == partner, "round %d receive %d: %d "
                         "bytes tag %d from %d, expected %zu tag %d from %d",
                         round, i, count, st.MPI_TAG, st.MPI_SOURCE, s, tag,
                         partner);
                RT_VERIFY(bufs[i], s, ((uint64_t)round << 32) | i,
                          "round %d receive %d", round, i);
            }
        }
        RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
    }

    rt_end(&sum);
    RT_CHECK(sum.c[RT_LIST_ADD] > 0 && sum.c[RT_RX_EXP] > 0,
             "no receive posted to and matched in the device (LIST_ADD %llu "
             "RX_EXP %llu)", (unsigned long long)sum.c[RT_LIST_ADD],
             (unsigned long long)sum.c[RT_RX_EXP]);
    /* Receives beyond the device list: refused (LIST_FULL, UCP keeps them)
     * or kept in rc_tm's software list (POST_SW, if the module has it) */
    if (!rt_named_total("POST_SW", &post_sw)) {
        post_sw = 0;
    }
    RT_CHECK(sum.c[RT_LIST_FULL] + post_sw > 0, "the device list never "
             "filled up (LIST_FULL = 0, POST_SW = 0): run with "
             "UCX_RC_TM_LIST_SIZE=16");
    RT_CHECK(rt_rndv_matched_in_device(&sum) > 0, "no rendezvous matched in "
             "the device");
    for (i = 0; i < NRECV; ++i) {
        free(bufs[i]);
    }
    free(bufs);
    free(reqs);
    return rt_finish();
}
