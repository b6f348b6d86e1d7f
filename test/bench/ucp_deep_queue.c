/*
 * Deep receive queues through UCP: the receiver posts N receives with
 * distinct tags, then the sender sends N messages in reverse tag order, so
 * every message matches the receive posted last among those left.  Time per
 * message (from the sender's start to the last receive's completion) over
 * rc_tm (matching in the device and rc_tm's software list) against UCX's
 * shared-memory transports (UCP's own software matching): any UCX_TLS
 * setting, e.g. sm (UCX's default on one host) or posix, in the same run,
 * transports interleaved within each repetition.
 *
 *   ucp_deep_queue [-n 1024,16384,65536] [-s size] [-r reps] [-t rc_tm,posix]
 *                  [-R] [-w] [-T]
 *
 * It prints a table of medians with each transport's ratio to the last one;
 * -R prints every measurement instead, one line each:
 * "N,transport,repetition,ns per message" (perftest_compare.py reads them).
 *
 * Interleaved, each round starts on caches that other rounds filled (the
 * other transports' state, or what the machine did meanwhile), as a
 * receive queue does in an application that computes between exchanges.
 * -w measures each round right after an untimed one of the same transport
 * and depth instead: the cost with the transport's own state in cache.
 *
 * -T prints every round's timeline on stderr (the untimed ones too): when
 * the receiver's
 * first progress call returned, when the first, 10th percentile, median
 * and last receives completed (their callbacks stamp them, a clock read
 * each, so the round is slightly longer than without -T), and when the
 * sender had posted all its sends.
 *
 * The sender blocks outside UCX (a socket read) as soon as its sends
 * completed, with no flush: a send that completed must reach the
 * receiver without the sender's help (test/bench/deep_queue_burst.sh).
 *
 * Two processes: the sender is this program run again (fork, then exec),
 * so it starts with no state of the receiver's.  Each opens one UCP
 * context per transport (UCX_TLS set to it) and keeps it for the whole run,
 * as an application does, so the figures hold no start-up costs: one
 * untimed round per transport warms them, and the receive buffers are
 * allocated and touched once.  rc_tm must be registered in the process:
 * this program links the module.
 */
#include <ucp/api/ucp.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Set in the sender's environment: the socket to the receiver.  A child
 * that only forked would inherit the UCX libraries' state at the fork,
 * locks included; UCX 1.18's VFS thread, which its library starts when
 * loaded, holds UCM's memory-event lock while it maps its first memory, and
 * a child forked then hangs in its first registration cache. */
#define SENDER_FD_ENV "UCP_DEEP_QUEUE_SENDER_FD"

#define PRIME_TAG    (1ull << 62)
#define MAX_ADDR     4096
#define MAX_TLS      8
#define MAX_NS       16

typedef struct {
    ucp_context_h  context;
    ucp_worker_h   worker;
    ucp_ep_h       ep;
} peer_t;

/* What the receiver asks the sender to do */
typedef struct {
    int     tl;         /* index of the transport; -1: quit */
    size_t  n;
} command_t;

/* The other process: the sender (child) in the receiver, the receiver
 * (parent) in the sender.  A request waits only while it lives. */
static pid_t other_pid;
static int   other_is_parent;

/* -T: completion times of the round under way, seconds from its start */
static int         timeline;
static const char *tl_names[MAX_TLS];
static double *done_at;
static size_t  ndone;

static double now_sec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, ucs_status_t status)
{
    fprintf(stderr, "ucp_deep_queue: %s: %s\n", what,
            ucs_status_string(status));
    exit(1);
}

static void xwrite(int fd, const void *buf, size_t len)
{
    if (write(fd, buf, len) != (ssize_t)len) {
        perror("ucp_deep_queue: write");
        exit(1);
    }
}

static void xread(int fd, void *buf, size_t len)
{
    if (read(fd, buf, len) != (ssize_t)len) {
        fprintf(stderr, "ucp_deep_queue: the other process is gone\n");
        exit(1);
    }
}

static void check_other_alive(void)
{
    int status;

    if (other_is_parent ? (getppid() != other_pid) :
        (waitpid(other_pid, &status, WNOHANG) == other_pid)) {
        fprintf(stderr, "ucp_deep_queue: the other process exited\n");
        exit(1);
    }
}

static void wait_req(peer_t *p, void *req)
{
    unsigned spins = 0;

    if (UCS_PTR_IS_ERR(req)) {
        die("request", UCS_PTR_STATUS(req));
    } else if (req != NULL) {
        while (ucp_request_check_status(req) == UCS_INPROGRESS) {
            ucp_worker_progress(p->worker);
            if ((++spins % 100000) == 0) {
                check_other_alive();
            }
        }
        ucp_request_free(req);
    }
}

/* Opens UCP with the transport and connects to the peer over fd */
static void peer_open(peer_t *p, const char *tls, int fd)
{
    ucp_params_t params         = {0};
    ucp_worker_params_t wparams = {0};
    ucp_ep_params_t eparams     = {0};
    char remote[MAX_ADDR];
    ucp_address_t *addr;
    ucp_config_t *config;
    ucs_status_t status;
    size_t len;

    status = ucp_config_read(NULL, NULL, &config);
    if (status != UCS_OK) {
        die("ucp_config_read", status);
    }
    ucp_config_modify(config, "TLS", tls);
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_TAG;
    status = ucp_init(&params, config, &p->context);
    ucp_config_release(config);
    if (status != UCS_OK) {
        die("ucp_init", status);
    }

    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    status = ucp_worker_create(p->context, &wparams, &p->worker);
    if (status != UCS_OK) {
        die("ucp_worker_create", status);
    }

    status = ucp_worker_get_address(p->worker, &addr, &len);
    if ((status != UCS_OK) || (len > MAX_ADDR)) {
        die("ucp_worker_get_address", status);
    }
    xwrite(fd, &len, sizeof(len));
    xwrite(fd, addr, len);
    ucp_worker_release_address(p->worker, addr);
    xread(fd, &len, sizeof(len));
    xread(fd, remote, len);

    eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    eparams.address    = (ucp_address_t*)remote;
    status = ucp_ep_create(p->worker, &eparams, &p->ep);
    if (status != UCS_OK) {
        die("ucp_ep_create", status);
    }
}

static void peer_close(peer_t *p)
{
    ucp_request_param_t param = {0};

    wait_req(p, ucp_ep_close_nbx(p->ep, &param));
    ucp_worker_destroy(p->worker);
    ucp_cleanup(p->context);
}

/* Both sides at the same point, nothing of theirs in flight */
/* Blocks outside UCX until the other process is done: sends that
 * completed are delivered without our help (no flush first), as an MPI
 * program that synchronises through another channel relies on */
static void sync_with_other(int fd)
{
    char token = 0;

    xwrite(fd, &token, 1);
    xread(fd, &token, 1);
}

static void recv_stamp(void *req, ucs_status_t status,
                       const ucp_tag_recv_info_t *info, void *arg)
{
    (void)req;
    (void)status;
    (void)info;
    (void)arg;
    done_at[ndone++] = now_sec();
}

static void sender(peer_t *peers, int fd, size_t max_n, size_t size)
{
    ucp_request_param_t param = {0};
    char *buf                 = calloc(1, size);
    void **reqs               = calloc(max_n, sizeof(*reqs));
    command_t cmd;
    double start;
    char token;
    size_t i;

    for (;;) {
        xread(fd, &cmd, sizeof(cmd));
        if (cmd.tl < 0) {
            break;
        }
        xread(fd, &token, 1);             /* receives posted */
        start = now_sec();
        for (i = 0; i < cmd.n; ++i) {
            reqs[i] = ucp_tag_send_nbx(peers[cmd.tl].ep, buf, size,
                                       cmd.n - 1 - i, &param);
        }
        if (timeline) {
            fprintf(stderr, "timeline: sender posted %zu sends in %.1f us\n",
                    cmd.n, (now_sec() - start) * 1e6);
        }
        for (i = 0; i < cmd.n; ++i) {
            wait_req(&peers[cmd.tl], reqs[i]);
        }
        sync_with_other(fd);
    }
    free(reqs);
    free(buf);
}

/* One round: seconds per message */
static double receive_round(peer_t *p, int tl, int fd, char *bufs,
                            void **reqs, size_t n, size_t size)
{
    ucp_request_param_t param = {0};
    command_t cmd             = { .tl = tl, .n = n };
    char token                = 0;
    double start, elapsed, first_progress = 0;
    size_t i;

    xwrite(fd, &cmd, sizeof(cmd));
    if (timeline) {
        param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
        param.cb.recv      = recv_stamp;
        ndone              = 0;
    }
    for (i = 0; i < n; ++i) {
        reqs[i] = ucp_tag_recv_nbx(p->worker, bufs + i * size, size, i,
                                   UINT64_MAX, &param);
    }
    start = now_sec();
    xwrite(fd, &token, 1);
    if (timeline) {
        ucp_worker_progress(p->worker);
        first_progress = now_sec();
    }
    for (i = 0; i < n; ++i) {
        wait_req(p, reqs[i]);
    }
    elapsed = now_sec() - start;
    if (timeline) {
        fprintf(stderr, "timeline: receiver N=%zu %s: first progress "
                "%.1f us, completions first %.1f, 10%% %.1f, 50%% %.1f, last "
                "%.1f us\n", n, tl_names[tl], (first_progress - start) * 1e6,
                (done_at[0] - start) * 1e6, (done_at[n / 10] - start) * 1e6,
                (done_at[n / 2] - start) * 1e6, (done_at[n - 1] - start) * 1e6);
    }
    sync_with_other(fd);
    return elapsed / n;
}

/* UCP hands receives to the transport after its first unexpected tagged
 * message: one, in each context, before anything is measured */
static void prime(peer_t *p, int is_sender, size_t size)
{
    ucp_request_param_t param = {0};
    char *buf                 = calloc(1, size);

    if (is_sender) {
        wait_req(p, ucp_tag_send_nbx(p->ep, buf, size, PRIME_TAG, &param));
    } else {
        wait_req(p, ucp_tag_recv_nbx(p->worker, buf, size, PRIME_TAG,
                                     UINT64_MAX, &param));
    }
    free(buf);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

static size_t split(char *list, char **items, size_t max)
{
    size_t count = 0;
    char *save, *tok;

    for (tok = strtok_r(list, ",", &save); tok && (count < max);
         tok = strtok_r(NULL, ",", &save)) {
        items[count++] = tok;
    }
    return count;
}

static void print_raw(double *t, char **ns, size_t nn, char **tls,
                      size_t ntl, size_t reps)
{
    size_t i, j, r;

    for (i = 0; i < nn; ++i) {
        for (j = 0; j < ntl; ++j) {
            for (r = 0; r < reps; ++r) {
                printf("%s,%s,%zu,%.1f\n", ns[i], tls[j], r + 1,
                       t[(i * ntl + j) * reps + r] * 1e9);
            }
        }
    }
}

static void print_table(double *t, char **ns, size_t nn, char **tls,
                        size_t ntl, size_t reps, size_t size)
{
    size_t i, j;

    printf("deep receive queue, %zu-byte messages sent in reverse tag order; "
           "ns per message, median of %zu; ratio to %s in this run\n",
           size, reps, tls[ntl - 1]);
    printf("%-8s", "N");
    for (j = 0; j < ntl; ++j) {
        printf("%18s", tls[j]);
    }
    printf("\n");
    for (i = 0; i < nn; ++i) {
        double ref;
        printf("%-8s", ns[i]);
        for (j = 0; j < ntl; ++j) {
            qsort(&t[(i * ntl + j) * reps], reps, sizeof(double), cmp_double);
        }
        ref = t[(i * ntl + ntl - 1) * reps + reps / 2];
        for (j = 0; j < ntl; ++j) {
            double med = t[(i * ntl + j) * reps + reps / 2];
            char cell[32];
            if (j + 1 < ntl) {
                snprintf(cell, sizeof(cell), "%.0f (%.2fx)", med * 1e9,
                         med / ref);
            } else {
                snprintf(cell, sizeof(cell), "%.0f", med * 1e9);
            }
            printf("%18s", cell);
        }
        printf("\n");
    }
}

/* The sender's process: connect each transport, then send as told */
static void run_sender(char **tls, size_t ntl, int fd, size_t max_n,
                       size_t size)
{
    peer_t peers[MAX_TLS];
    size_t j;

    other_pid       = getppid();
    other_is_parent = 1;
    for (j = 0; j < ntl; ++j) {
        peer_open(&peers[j], tls[j], fd);
        prime(&peers[j], 1, size);
    }
    sender(peers, fd, max_n, size);
    for (j = 0; j < ntl; ++j) {
        peer_close(&peers[j]);
    }
}

int main(int argc, char **argv)
{
    char ns_arg[256]  = "1024,16384,65536", fd_arg[16];
    char tls_arg[256] = "rc_tm,posix";
    size_t size = 1024, reps = 5, max_n = 0, nn, ntl, n, i, j, r;
    command_t quit = { .tl = -1, .n = 0 };
    char *ns[MAX_NS], *tls[MAX_TLS];
    peer_t peers[MAX_TLS];
    int fds[2], c, status, raw = 0, warm = 0, tty = isatty(2);
    void **reqs;
    char *bufs;
    double *t;
    pid_t pid;

    while ((c = getopt(argc, argv, "n:s:r:t:RwT")) != -1) {
        switch (c) {
        case 'n': snprintf(ns_arg, sizeof(ns_arg), "%s", optarg); break;
        case 's': size = strtoul(optarg, NULL, 0); break;
        case 'r': reps = strtoul(optarg, NULL, 0); break;
        case 't': snprintf(tls_arg, sizeof(tls_arg), "%s", optarg); break;
        case 'R': raw = 1; break;
        case 'w': warm = 1; break;
        case 'T': timeline = 1; break;
        default:
            fprintf(stderr, "usage: %s [-n list] [-s size] [-r reps] "
                    "[-t tls,...] [-R] [-w] [-T]\n", argv[0]);
            return 2;
        }
    }

    nn  = split(ns_arg, ns, MAX_NS);
    ntl = split(tls_arg, tls, MAX_TLS);
    for (j = 0; j < ntl; ++j) {
        tl_names[j] = tls[j];
    }
    for (i = 0; i < nn; ++i) {
        if (strtoul(ns[i], NULL, 0) > max_n) {
            max_n = strtoul(ns[i], NULL, 0);
        }
    }
    if ((nn == 0) || (ntl == 0) || (reps == 0) || (size == 0)) {
        fprintf(stderr, "ucp_deep_queue: nothing to measure\n");
        return 2;
    }

    if (getenv(SENDER_FD_ENV) != NULL) {
        run_sender(tls, ntl, atoi(getenv(SENDER_FD_ENV)), max_n, size);
        return 0;
    }

    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
        perror("socketpair");
        return 1;
    }
    snprintf(fd_arg, sizeof(fd_arg), "%d", fds[1]);
    setenv(SENDER_FD_ENV, fd_arg, 1);
    pid = fork();
    if (pid == 0) {
        close(fds[0]);
        execv("/proc/self/exe", argv);
        perror("ucp_deep_queue: exec");
        _exit(127);
    }
    unsetenv(SENDER_FD_ENV);
    close(fds[1]);
    other_pid = pid;

    bufs    = malloc(max_n * size);
    reqs    = calloc(max_n, sizeof(*reqs));
    done_at = calloc(max_n, sizeof(*done_at));
    t       = calloc(nn * ntl * reps, sizeof(*t));
    if ((bufs == NULL) || (reqs == NULL) || (done_at == NULL) || (t == NULL)) {
        fprintf(stderr, "ucp_deep_queue: out of memory\n");
        return 1;
    }
    memset(bufs, 0, max_n * size);

    for (j = 0; j < ntl; ++j) {
        peer_open(&peers[j], tls[j], fds[0]);
        prime(&peers[j], 0, size);
    }
    for (j = 0; j < ntl; ++j) {
        receive_round(&peers[j], j, fds[0], bufs, reqs, max_n, size);
    }
    for (r = 0; r < reps; ++r) {
        for (i = 0; i < nn; ++i) {
            n = strtoul(ns[i], NULL, 0);
            for (j = 0; j < ntl; ++j) {
                /* one updating line on a terminal, a line each otherwise */
                fprintf(stderr, "%srep %zu/%zu  N=%-6s %-6s%s",
                        tty ? "\r" : "", r + 1, reps, ns[i], tls[j],
                        tty ? "" : "\n");
                if (warm) {
                    receive_round(&peers[j], j, fds[0], bufs, reqs, n, size);
                }
                t[(i * ntl + j) * reps + r] =
                        receive_round(&peers[j], j, fds[0], bufs, reqs, n,
                                      size);
            }
        }
    }
    if (tty) {
        fprintf(stderr, "\n");
    }

    xwrite(fds[0], &quit, sizeof(quit));
    for (j = 0; j < ntl; ++j) {
        peer_close(&peers[j]);
    }
    if ((waitpid(pid, &status, 0) != pid) || !WIFEXITED(status) ||
        (WEXITSTATUS(status) != 0)) {
        fprintf(stderr, "ucp_deep_queue: sender failed\n");
        return 1;
    }

    if (raw) {
        print_raw(t, ns, nn, tls, ntl, reps);
    } else {
        print_table(t, ns, nn, tls, ntl, reps, size);
    }
    free(t);
    free(done_at);
    free(reqs);
    free(bufs);
    return 0;
}
