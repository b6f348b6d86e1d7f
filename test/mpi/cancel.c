/*
 * Receive cancel: MPI_Cancel on posted receives, MPI_Test_cancelled.
 *
 * Pairs (0,1)...: the odd rank posts NPOST receives on one tag (sizes short,
 * >= 1 KiB and rendezvous: those >= 1 KiB are in the device), the even rank
 * synchronously sends NSENT < NPOST messages (MPI_Ssend completes only once
 * matched), then the receiver cancels every receive.  The first NSENT (in
 * posting order) must have their message and not be cancelled; the others
 * must be cancelled.  Then a second batch on the same tag must reach fresh
 * receives intact (no cancelled receive swallows a message, nothing stale
 * is delivered).  A last part cancels receives while messages race them:
 * each receive is either cancelled or complete with the right data, and
 * every message is received exactly once.
 */
#include "rc_tm_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPOST   64
#define NSENT   24
#define MAXSIZE (24 * 1024)
#define TAG     11

static const size_t sizes[] = {8, 2048, 20000};

static uint64_t seed_of(int part, int k, int i)
{
    return ((uint64_t)part << 40) | ((uint64_t)k << 20) | (uint64_t)i;
}

int main(int argc, char **argv)
{
    MPI_Request reqs[NPOST];
    MPI_Status st;
    rt_counters_t sum;
    char *bufs[NPOST];
    int i, k, partner, sender, active, flag, count, cancelled, got, n, keep;
    size_t s;

    rt_init(&argc, &argv, argv[0], 2);
    partner = rt_rank ^ 1;
    active  = partner < rt_size;
    sender  = !(rt_rank & 1);
    for (i = 0; i < NPOST; ++i) {
        bufs[i] = malloc(MAXSIZE);
        RT_CHECK(bufs[i], "out of memory");
    }
    rt_prime_offload(MPI_COMM_WORLD);

    for (k = 0; k < 3; ++k) {
        s = sizes[k];
        /* Part 1: NSENT matched, the rest cancelled */
        if (active && !sender) {
            for (i = 0; i < NPOST; ++i) {
                RT_MPI(MPI_Irecv(bufs[i], MAXSIZE, MPI_BYTE, partner, TAG,
                                 MPI_COMM_WORLD, &reqs[i]));
            }
        }
        RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
        if (active && sender) {
            for (i = 0; i < NSENT; ++i) {
                rt_fill(bufs[0], s, seed_of(1, k, i));
                RT_MPI(MPI_Ssend(bufs[0], (int)s, MPI_BYTE, partner, TAG,
                                 MPI_COMM_WORLD));
            }
        }
        RT_MPI(MPI_Barrier(MPI_COMM_WORLD)); /* all NSENT matched */
        if (active && !sender) {
            for (i = 0; i < NPOST; ++i) {
                RT_MPI(MPI_Cancel(&reqs[i]));
            }
            for (i = 0; i < NPOST; ++i) {
                RT_MPI(MPI_Wait(&reqs[i], &st));
                RT_MPI(MPI_Test_cancelled(&st, &flag));
                if (i < NSENT) {
                    RT_CHECK(!flag, "size %zu: receive %d was matched before "
                             "the cancel but reports cancelled", s, i);
                    MPI_Get_count(&st, MPI_BYTE, &count);
                    RT_CHECK((size_t)count == s, "size %zu: receive %d got "
                             "%d bytes", s, i, count);
                    RT_VERIFY(bufs[i], s, seed_of(1, k, i), "size %zu "
                              "receive %d", s, i);
                } else {
                    RT_CHECK(flag, "size %zu: receive %d (no message for it) "
                             "was not cancelled", s, i);
                }
            }
        }
        /* Part 2: the same tag still works */
        RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
        if (active && sender) {
            for (i = 0; i < NSENT; ++i) {
                rt_fill(bufs[0], s, seed_of(2, k, i));
                RT_MPI(MPI_Send(bufs[0], (int)s, MPI_BYTE, partner, TAG,
                                MPI_COMM_WORLD));
            }
        } else if (active) {
            for (i = 0; i < NSENT; ++i) {
                RT_MPI(MPI_Recv(bufs[i], MAXSIZE, MPI_BYTE, partner, TAG,
                                MPI_COMM_WORLD, &st));
                MPI_Get_count(&st, MPI_BYTE, &count);
                RT_CHECK((size_t)count == s, "after cancel, size %zu: "
                         "message %d has %d bytes", s, i, count);
                RT_VERIFY(bufs[i], s, seed_of(2, k, i), "after cancel, size "
                          "%zu message %d (a stale or lost message?)", s, i);
            }
        }

        /* Part 3: cancels racing arriving messages */
        RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
        if (active && sender) {
            for (i = 0; i < NSENT; ++i) {
                rt_fill(bufs[0], s, seed_of(3, k, i));
                RT_MPI(MPI_Send(bufs[0], (int)s, MPI_BYTE, partner, TAG + 1,
                                MPI_COMM_WORLD));
            }
        } else if (active) {
            got = 0;
            while (got < NSENT) {
                /* keep (never more than the messages left, or the waits
                 * below would hang), then as many receives cancelled */
                keep = NSENT - got < 8 ? NSENT - got : 8;
                n    = keep + 8;
                for (i = 0; i < n; ++i) {
                    RT_MPI(MPI_Irecv(bufs[i], MAXSIZE, MPI_BYTE, partner,
                                     TAG + 1, MPI_COMM_WORLD, &reqs[i]));
                }
                for (i = n - 1; i >= keep; --i) {
                    RT_MPI(MPI_Cancel(&reqs[i])); /* the later ones */
                }
                for (i = 0; i < n; ++i) {
                    RT_MPI(MPI_Wait(&reqs[i], &st));
                    RT_MPI(MPI_Test_cancelled(&st, &cancelled));
                    if (cancelled) {
                        RT_CHECK(i >= keep, "race, size %zu: receive %d was "
                                 "never cancelled but reports cancelled", s, i);
                        continue;
                    }
                    RT_CHECK(got < NSENT, "size %zu: more messages received "
                             "than sent", s);
                    MPI_Get_count(&st, MPI_BYTE, &count);
                    RT_CHECK((size_t)count == s, "race, size %zu: message %d "
                             "has %d bytes", s, got, count);
                    RT_VERIFY(bufs[i], s, seed_of(3, k, got), "race, size %zu "
                              "message %d (lost, duplicated or reordered?)",
                              s, got);
                    ++got;
                }
            }
        }
        RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
    }

    rt_end(&sum);
    RT_CHECK(sum.c[RT_LIST_ADD] > 0, "no receive posted to the device");
    RT_CHECK(sum.c[RT_LIST_DEL] > 0, "no receive removed from the device "
             "(LIST_DEL = 0): cancels of receives >= 1 KiB never reached "
             "rc_tm");
    RT_CHECK(sum.c[RT_RX_EXP] > 0, "no message matched in the device");
    for (i = 0; i < NPOST; ++i) {
        free(bufs[i]);
    }
    return rt_finish();
}
