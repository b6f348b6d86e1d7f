/*
 * Messages longer than the posted buffer: with MPI_ERRORS_RETURN the
 * receive returns an error of class MPI_ERR_TRUNCATE, for short eager,
 * eager >= 1 KiB (posted to the device, which truncates) and rendezvous
 * sizes, with the receive posted before the message (matched in the
 * device) and after it (unexpected).  After each truncated message, a
 * correct message on the same tag and one on another tag must arrive
 * intact (the truncation harms no later traffic), and the bytes past the
 * receive buffer must be untouched.
 *
 * Pairs (0,1)...: the even rank sends, the odd one receives.
 */
#include "rc_tm_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64

static const struct { size_t msg, buf; } cases[] = {
    {100, 50},          /* short eager */
    {4000, 2000},       /* eager, posted to the device */
    {8000, 1024},
    {9000, 8000},       /* rendezvous into an eager-sized buffer */
    {100000, 30000},    /* rendezvous */
    {1 << 20, 4096},
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

static void check_truncated(int rc, MPI_Status *st, const char *what,
                            size_t msg, size_t bufsize)
{
    int cls = MPI_SUCCESS;

    if (rc == MPI_ERR_IN_STATUS) {
        rc = st->MPI_ERROR;
    }
    RT_CHECK(rc != MPI_SUCCESS, "%s: a %zu-byte message into a %zu-byte "
             "buffer returned success", what, msg, bufsize);
    MPI_Error_class(rc, &cls);
    RT_CHECK(cls == MPI_ERR_TRUNCATE, "%s: a %zu-byte message into a %zu-byte "
             "buffer returned error class %d, expected MPI_ERR_TRUNCATE (%d)",
             what, msg, bufsize, cls, MPI_ERR_TRUNCATE);
}

static void check_guard(const char *buf, size_t bufsize, const char *what)
{
    size_t i;

    for (i = 0; i < GUARD; ++i) {
        RT_CHECK((unsigned char)buf[bufsize + i] == 0xA5, "%s: truncated "
                 "receive wrote past its %zu-byte buffer (byte %zu)", what,
                 bufsize, bufsize + i);
    }
}

int main(int argc, char **argv)
{
    size_t maxmsg = 1 << 20, msg, bsz;
    MPI_Request req;
    MPI_Status st;
    rt_counters_t sum;
    char *sbuf, *rbuf, what[64];
    int partner, sender, active, k, mode, rc, count;
    uint64_t seed;

    rt_init(&argc, &argv, argv[0], 2);
    partner = rt_rank ^ 1;
    active  = partner < rt_size;
    sender  = !(rt_rank & 1);
    sbuf    = malloc(maxmsg);
    rbuf    = malloc(maxmsg + GUARD);
    RT_CHECK(sbuf && rbuf, "out of memory");
    rt_prime_offload(MPI_COMM_WORLD);

    for (k = 0; k < (int)NCASES; ++k) {
        for (mode = 0; mode < 2; ++mode) {
            msg  = cases[k].msg;
            bsz  = cases[k].buf;
            seed = ((uint64_t)k << 16) | ((uint64_t)mode << 8);
            snprintf(what, sizeof(what), "%s, message %zu, buffer %zu",
                     mode ? "unexpected" : "posted first", msg, bsz);

            /* the truncated message (tag 1), then a right one on tag 1 and
             * one on tag 2 */
            if (active && !sender) {
                memset(rbuf, 0xA5, bsz + GUARD);
                if (mode == 0) {
                    RT_MPI(MPI_Irecv(rbuf, (int)bsz, MPI_BYTE, partner, 1,
                                     MPI_COMM_WORLD, &req));
                }
            }
            RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
            if (active && sender) {
                rt_fill(sbuf, msg, seed | 1);
                RT_MPI(MPI_Send(sbuf, (int)msg, MPI_BYTE, partner, 1,
                                MPI_COMM_WORLD));
                rt_fill(sbuf, bsz, seed | 2);
                RT_MPI(MPI_Send(sbuf, (int)bsz, MPI_BYTE, partner, 1,
                                MPI_COMM_WORLD));
                rt_fill(sbuf, msg, seed | 3);
                RT_MPI(MPI_Send(sbuf, (int)msg, MPI_BYTE, partner, 2,
                                MPI_COMM_WORLD));
            } else if (active) {
                if (mode == 0) {
                    rc = MPI_Wait(&req, &st);
                } else {
                    /* let the message arrive first (eager) or its
                     * rendezvous request (the sender blocks until this
                     * receive) */
                    int flag = 0;
                    do {
                        RT_MPI(MPI_Iprobe(partner, 1, MPI_COMM_WORLD, &flag,
                                          MPI_STATUS_IGNORE));
                    } while (!flag);
                    rc = MPI_Recv(rbuf, (int)bsz, MPI_BYTE, partner, 1,
                                  MPI_COMM_WORLD, &st);
                }
                check_truncated(rc, &st, what, msg, bsz);
                check_guard(rbuf, bsz, what);

                memset(rbuf, 0xA5, bsz + GUARD);
                RT_MPI(MPI_Recv(rbuf, (int)bsz, MPI_BYTE, partner, 1,
                                MPI_COMM_WORLD, &st));
                MPI_Get_count(&st, MPI_BYTE, &count);
                RT_CHECK((size_t)count == bsz, "%s: the next message on the "
                         "same tag has %d bytes, expected %zu", what, count,
                         bsz);
                RT_VERIFY(rbuf, bsz, seed | 2, "%s: next message on the same "
                          "tag", what);
                check_guard(rbuf, bsz, what);

                RT_MPI(MPI_Recv(rbuf, (int)maxmsg, MPI_BYTE, partner, 2,
                                MPI_COMM_WORLD, &st));
                MPI_Get_count(&st, MPI_BYTE, &count);
                RT_CHECK((size_t)count == msg, "%s: the message on another "
                         "tag has %d bytes, expected %zu", what, count, msg);
                RT_VERIFY(rbuf, msg, seed | 3, "%s: message on another tag",
                          what);
            }
        }
    }

    rt_end(&sum);
    RT_CHECK(sum.c[RT_RX_EXP] > 0, "no message matched in the device");
    RT_CHECK(sum.c[RT_RX_EAGER_UNEXP] > 0 && rt_rndv_unexpected(&sum) > 0,
             "no unexpected eager or rendezvous message through rc_tm");
    free(sbuf);
    free(rbuf);
    return rt_finish();
}
