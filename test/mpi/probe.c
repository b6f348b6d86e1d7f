/*
 * Probe and matched probe: MPI_Probe, MPI_Iprobe, MPI_Mprobe/MPI_Mrecv and
 * MPI_Improbe/MPI_Imrecv, with specific and wildcard source/tag, over short
 * eager, eager >= 1 KiB and rendezvous sizes.  A probed message is an
 * unexpected one (it arrived before any receive): rc_tm hands it to UCP's
 * unexpected queue.  The size the probe reports is used to allocate the
 * receive buffer, as applications do.
 *
 * Rank 0 probes and receives; every other rank sends NMSG messages per
 * method, tags chosen from the message index.
 */
#include "rc_tm_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NMSG 30

static size_t msg_size(int src, int i)
{
    static const size_t sizes[] = {1, 900, 1500, 7000, 8300, 50000, 100};

    return sizes[(i + src) % 7] + (size_t)src;
}

static uint64_t msg_seed(int method, int src, int i)
{
    return ((uint64_t)method << 40) | ((uint64_t)src << 20) | (uint64_t)i;
}

static int msg_tag(int i)
{
    return 200 + (i % 4);
}

enum { M_PROBE, M_IPROBE, M_MPROBE, M_IMPROBE, M_LAST };
static const char *method_names[] = {"Probe", "Iprobe", "Mprobe", "Improbe"};

static void receive_all(int method)
{
    int total = (rt_size - 1) * NMSG, n, src, tag, count, flag, i;
    int *next = calloc(rt_size, sizeof(int));
    MPI_Message msg;
    MPI_Request req;
    MPI_Status st, st2;
    char *buf;
    size_t s;

    RT_CHECK(next, "out of memory");
    for (n = 0; n < total; ++n) {
        /* alternate: wildcard source+tag, then a specific source */
        int want_src = (n & 1) ? 1 + (n / 2) % (rt_size - 1) : MPI_ANY_SOURCE;
        int want_tag = MPI_ANY_TAG;

        if (want_src != MPI_ANY_SOURCE) {
            if (next[want_src] >= NMSG) {
                want_src = MPI_ANY_SOURCE;
            } else {
                want_tag = msg_tag(next[want_src]);
            }
        }

        switch (method) {
        case M_PROBE:
            RT_MPI(MPI_Probe(want_src, want_tag, MPI_COMM_WORLD, &st));
            break;
        case M_IPROBE:
            do {
                RT_MPI(MPI_Iprobe(want_src, want_tag, MPI_COMM_WORLD, &flag,
                                  &st));
            } while (!flag);
            break;
        case M_MPROBE:
            RT_MPI(MPI_Mprobe(want_src, want_tag, MPI_COMM_WORLD, &msg, &st));
            break;
        default:
            do {
                RT_MPI(MPI_Improbe(want_src, want_tag, MPI_COMM_WORLD, &flag,
                                   &msg, &st));
            } while (!flag);
            break;
        }

        src = st.MPI_SOURCE;
        tag = st.MPI_TAG;
        RT_CHECK(src >= 1 && src < rt_size, "%s: source %d",
                 method_names[method], src);
        i = next[src]++;
        RT_CHECK(i < NMSG && tag == msg_tag(i), "%s: message %d from %d has "
                 "tag %d, expected %d", method_names[method], i, src, tag,
                 msg_tag(i));
        MPI_Get_count(&st, MPI_BYTE, &count);
        s = msg_size(src, i);
        RT_CHECK((size_t)count == s, "%s: probe reports %d bytes for message "
                 "%d from %d, expected %zu", method_names[method], count, i,
                 src, s);
        buf = malloc(count ? count : 1);
        RT_CHECK(buf, "out of memory");

        switch (method) {
        case M_PROBE:
        case M_IPROBE:
            /* the probed message, by its source and tag */
            RT_MPI(MPI_Recv(buf, count, MPI_BYTE, src, tag, MPI_COMM_WORLD,
                            &st2));
            break;
        case M_MPROBE:
            RT_MPI(MPI_Mrecv(buf, count, MPI_BYTE, &msg, &st2));
            RT_CHECK(msg == MPI_MESSAGE_NULL, "Mrecv left the message handle");
            break;
        default:
            RT_MPI(MPI_Imrecv(buf, count, MPI_BYTE, &msg, &req));
            RT_MPI(MPI_Wait(&req, &st2));
            break;
        }
        MPI_Get_count(&st2, MPI_BYTE, &count);
        RT_CHECK((size_t)count == s && st2.MPI_SOURCE == src &&
                 st2.MPI_TAG == tag, "%s: the receive after the probe got %d "
                 "bytes from %d tag %d, probe said %zu from %d tag %d",
                 method_names[method], count, st2.MPI_SOURCE, st2.MPI_TAG, s,
                 src, tag);
        RT_VERIFY(buf, s, msg_seed(method, src, i), "%s message %d from %d",
                  method_names[method], i, src);
        free(buf);
    }

    /* nothing left over */
    RT_MPI(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
    RT_CHECK(!flag, "%s: a message from %d tag %d is left after all were "
             "received", method_names[method], st.MPI_SOURCE, st.MPI_TAG);
    free(next);
}

int main(int argc, char **argv)
{
    MPI_Request reqs[NMSG];
    rt_counters_t sum;
    char *sbuf[NMSG];
    int method, i;
    size_t s;

    rt_init(&argc, &argv, argv[0], 2);
    for (i = 0; i < NMSG; ++i) {
        sbuf[i] = malloc(64 * 1024);
        RT_CHECK(sbuf[i], "out of memory");
    }
    rt_prime_offload(MPI_COMM_WORLD);

    for (method = 0; method < M_LAST; ++method) {
        if (rt_rank != 0) {
            for (i = 0; i < NMSG; ++i) {
                s = msg_size(rt_rank, i);
                rt_fill(sbuf[i], s, msg_seed(method, rt_rank, i));
                RT_MPI(MPI_Isend(sbuf[i], (int)s, MPI_BYTE, 0, msg_tag(i),
                                 MPI_COMM_WORLD, &reqs[i]));
            }
            RT_MPI(MPI_Waitall(NMSG, reqs, MPI_STATUSES_IGNORE));
        } else {
            receive_all(method);
        }
        RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
    }

    rt_end(&sum);
    RT_CHECK(sum.c[RT_RX_EAGER_UNEXP] > 0, "no unexpected eager message "
             "through rc_tm");
    RT_CHECK(rt_rndv_unexpected(&sum) > 0, "no unexpected rendezvous through "
             "rc_tm (probed rendezvous messages)");
    for (i = 0; i < NMSG; ++i) {
        free(sbuf[i]);
    }
    return rt_finish();
}
