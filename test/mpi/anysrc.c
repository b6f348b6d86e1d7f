/*
 * MPI_ANY_SOURCE and MPI_ANY_TAG receives (wildcards: UCP matches them in
 * software, never in the device) mixed with specific receives that UCP
 * posts to the device.
 *
 * Rank 0 receives, every other rank sends.  Sizes cover short eager,
 * eager >= UCX_TM_THRESH and rendezvous.  Each message's pattern is seeded
 * by (source, tag, index), checked against the status the receive reports.
 *   1: ANY_SOURCE, specific tag
 *   2: specific source, ANY_TAG
 *   3: ANY_SOURCE and ANY_TAG
 *   4: matching order between a specific receive (in the device) and a
 *      wildcard receive posted after it: the first message must go to the
 *      specific one
 */
#include "rc_tm_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PER_SENDER 40
#define MAXSIZE    (40 * 1024)

static const size_t sizes[] = {4, 1100, 3000, 8000, 20000, 40000, 64, 9000};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static size_t msg_size(int src, int i)
{
    return sizes[(src + i) % NSIZES];
}

static uint64_t msg_seed(int phase, int src, int tag, int i)
{
    return ((uint64_t)phase << 48) | ((uint64_t)src << 32) |
           ((uint64_t)tag << 16) | (uint64_t)i;
}

static int msg_tag(int phase, int i)
{
    return (phase == 1) ? 5 : 100 + (i % 7);
}

/* senders: PER_SENDER messages, index i carried in the pattern and in the
 * tag choice; ordered per sender */
static void send_all(int phase, char *buf)
{
    int i, tag;
    size_t s;

    for (i = 0; i < PER_SENDER; ++i) {
        s   = msg_size(rt_rank, i);
        tag = msg_tag(phase, i);
        rt_fill(buf, s, msg_seed(phase, rt_rank, tag, i));
        RT_MPI(MPI_Send(buf, (int)s, MPI_BYTE, 0, tag, MPI_COMM_WORLD));
    }
}

static void recv_all(int phase, char *buf)
{
    int nsend = rt_size - 1, total = nsend * PER_SENDER;
    int *next = calloc(rt_size, sizeof(int));
    int n, src, tag, i, count, from, rtag;
    MPI_Status st;
    size_t s;

    RT_CHECK(next, "out of memory");
    for (n = 0; n < total; ++n) {
        if (phase == 1) {
            from = MPI_ANY_SOURCE;
            rtag = 5;
        } else if (phase == 2) {
            from = 1 + (n % nsend); /* round robin over the senders */
            rtag = MPI_ANY_TAG;
        } else {
            from = MPI_ANY_SOURCE;
            rtag = MPI_ANY_TAG;
        }
        RT_MPI(MPI_Recv(buf, MAXSIZE, MPI_BYTE, from, rtag, MPI_COMM_WORLD,
                        &st));
        src = st.MPI_SOURCE;
        tag = st.MPI_TAG;
        RT_CHECK(src >= 1 && src < rt_size && (from == MPI_ANY_SOURCE ||
                 src == from), "phase %d: status source %d (asked %d)",
                 phase, src, from);
        i = next[src]++;
        RT_CHECK(i < PER_SENDER, "phase %d: too many messages from %d",
                 phase, src);
        RT_CHECK(tag == msg_tag(phase, i), "phase %d: message %d from %d has "
                 "tag %d, expected %d", phase, i, src, tag, msg_tag(phase, i));
        MPI_Get_count(&st, MPI_BYTE, &count);
        s = msg_size(src, i);
        RT_CHECK((size_t)count == s, "phase %d: message %d from %d has %d "
                 "bytes, expected %zu", phase, i, src, count, s);
        RT_VERIFY(buf, s, msg_seed(phase, src, tag, i), "phase %d message "
                  "%d from %d tag %d", phase, i, src, tag);
    }
    free(next);
}

/* Phase 4: rank 0 posts a receive from rank 1 (>= 1 KiB: in the device),
 * then an ANY_SOURCE receive on the same tag; rank 1 sends two messages.
 * Repeated with eager and rendezvous sizes. */
static void phase4(char *buf)
{
    static const size_t psizes[] = {2048, 5000, 30000};
    char *buf2 = buf + MAXSIZE;
    MPI_Request req[2];
    MPI_Status st[2];
    unsigned k;
    int rep, c0, c1;
    size_t s;

    for (k = 0; k < 3; ++k) {
        for (rep = 0; rep < 10; ++rep) {
            s = psizes[k];
            if (rt_rank == 0) {
                RT_MPI(MPI_Irecv(buf, MAXSIZE, MPI_BYTE, 1, 77,
                                 MPI_COMM_WORLD, &req[0]));
                RT_MPI(MPI_Irecv(buf2, MAXSIZE, MPI_BYTE, MPI_ANY_SOURCE, 77,
                                 MPI_COMM_WORLD, &req[1]));
            }
            RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
            if (rt_rank == 1) {
                rt_fill(buf, s, msg_seed(4, 1, k, 2 * rep));
                RT_MPI(MPI_Send(buf, (int)s, MPI_BYTE, 0, 77, MPI_COMM_WORLD));
                rt_fill(buf, s + 1, msg_seed(4, 1, k, 2 * rep + 1));
                RT_MPI(MPI_Send(buf, (int)s + 1, MPI_BYTE, 0, 77,
                                MPI_COMM_WORLD));
            } else if (rt_rank == 0) {
                RT_MPI(MPI_Waitall(2, req, st));
                MPI_Get_count(&st[0], MPI_BYTE, &c0);
                MPI_Get_count(&st[1], MPI_BYTE, &c1);
                RT_CHECK((size_t)c0 == s && (size_t)c1 == s + 1 &&
                         st[1].MPI_SOURCE == 1, "phase 4 size %zu: the "
                         "specific receive got %d bytes, the wildcard one %d "
                         "from %d: matched out of posting order", s, c0, c1,
                         st[1].MPI_SOURCE);
                RT_VERIFY(buf, s, msg_seed(4, 1, k, 2 * rep),
                          "phase 4 specific receive size %zu", s);
                RT_VERIFY(buf2, s + 1, msg_seed(4, 1, k, 2 * rep + 1),
                          "phase 4 wildcard receive size %zu", s + 1);
            }
        }
    }
}

int main(int argc, char **argv)
{
    rt_counters_t sum;
    char *buf;
    int phase;

    rt_init(&argc, &argv, argv[0], 2);
    buf = malloc(2 * MAXSIZE + 1);
    RT_CHECK(buf, "out of memory");
    rt_prime_offload(MPI_COMM_WORLD);

    for (phase = 1; phase <= 3; ++phase) {
        if (rt_rank == 0) {
            recv_all(phase, buf);
        } else {
            send_all(phase, buf);
        }
        RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
    }
    phase4(buf);

    rt_end(&sum);
    RT_CHECK(sum.c[RT_RX_EAGER_UNEXP] > 0, "no unexpected eager message "
             "through rc_tm (wildcard receives are matched in software)");
    RT_CHECK(rt_rndv_unexpected(&sum) > 0, "no unexpected rendezvous through "
             "rc_tm");
    RT_CHECK(sum.c[RT_RX_EXP] + rt_rndv_matched_in_device(&sum) > 0,
             "no message matched in the device (phase 4 posts specific "
             "receives >= 1 KiB first)");
    free(buf);
    return rt_finish();
}
