/*
 * Deep receive queues through UCP: the receiver posts N receives with
 * distinct tags, then the sender sends N messages in reverse tag order, so
 * every message matches the receive posted last among those left.  Time per
 * message over rc_tm (matching in the device and rc_tm's software list)
 * against UCX's posix transport (UCP's own software matching), in the same
 * run, transports interleaved within each repetition.
 *
 *   ucp_deep_queue [-n 1024,16384,65536] [-s size] [-r reps] [-t rc_tm,posix]
 *
 * Two processes (fork); each opens its own UCP context with UCX_TLS set to
 * the transport under test.  rc_tm must be registered in the process: this
 * program links the module.
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

#define WARMUP_TAG   (1ull << 62)
#define MAX_ADDR     4096

typedef struct {
    ucp_context_h  context;
    ucp_worker_h   worker;
    ucp_ep_h       ep;
} peer_t;

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
        perror("ucp_deep_queue: read");
        exit(1);
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

/* The other process: the sender (child) in the receiver, the receiver
 * (parent) in the sender.  A request waits only while it lives. */
static pid_t other_pid;
static int   other_is_parent;

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

static void peer_close(peer_t *p, int fd)
{
    ucp_request_param_t param = {0};
    char token = 0;

    /* Every request of both sides completed before either closes */
    xwrite(fd, &token, 1);
    xread(fd, &token, 1);
    wait_req(p, ucp_ep_close_nbx(p->ep, &param));
    ucp_worker_destroy(p->worker);
    ucp_cleanup(p->context);
}

static void sender(const char *tls, int fd, size_t n, size_t size)
{
    ucp_request_param_t param = {0};
    char *buf                 = calloc(1, size);
    void **reqs               = calloc(n, sizeof(*reqs));
    char token;
    peer_t p;
    size_t i;

    peer_open(&p, tls, fd);
    /* UCP hands receives to the transport after its first unexpected
     * tagged message */
    wait_req(&p, ucp_tag_send_nbx(p.ep, buf, size, WARMUP_TAG, &param));
    xread(fd, &token, 1);             /* receives posted */
    for (i = 0; i < n; ++i) {
        reqs[i] = ucp_tag_send_nbx(p.ep, buf, size, n - 1 - i, &param);
    }
    for (i = 0; i < n; ++i) {
        wait_req(&p, reqs[i]);
    }
    peer_close(&p, fd);
    free(reqs);
    free(buf);
}

/* Seconds per message */
static double receiver(const char *tls, int fd, size_t n, size_t size)
{
    ucp_request_param_t param = {0};
    char *bufs                = malloc(n * size);
    void **reqs               = calloc(n, sizeof(*reqs));
    char token                = 0;
    double start, elapsed;
    peer_t p;
    size_t i;

    peer_open(&p, tls, fd);
    wait_req(&p, ucp_tag_recv_nbx(p.worker, bufs, size, WARMUP_TAG,
                                  UINT64_MAX, &param));
    for (i = 0; i < n; ++i) {
        reqs[i] = ucp_tag_recv_nbx(p.worker, bufs + i * size, size, i,
                                   UINT64_MAX, &param);
    }
    start = now_sec();
    xwrite(fd, &token, 1);
    for (i = 0; i < n; ++i) {
        wait_req(&p, reqs[i]);
    }
    elapsed = now_sec() - start;
    peer_close(&p, fd);
    free(reqs);
    free(bufs);
    return elapsed / n;
}

static double run(const char *tls, size_t n, size_t size)
{
    int fds[2], status;
    double result;
    pid_t pid;

    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
        perror("socketpair");
        exit(1);
    }

    other_pid = getpid();
    pid       = fork();
    if (pid == 0) {
        other_is_parent = 1;
        close(fds[0]);
        sender(tls, fds[1], n, size);
        _exit(0);
    }

    close(fds[1]);
    other_pid = pid;
    result    = receiver(tls, fds[0], n, size);
    close(fds[0]);
    if ((waitpid(pid, &status, 0) != pid) || !WIFEXITED(status) ||
        (WEXITSTATUS(status) != 0)) {
        fprintf(stderr, "ucp_deep_queue: sender failed\n");
        exit(1);
    }
    return result;
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

int main(int argc, char **argv)
{
    char ns_arg[256]  = "1024,16384,65536";
    char tls_arg[256] = "rc_tm,posix";
    char *ns[16], *tls[8];
    size_t size = 1024, reps = 5, nn, ntl, i, j, r;
    double *t;
    int c;

    while ((c = getopt(argc, argv, "n:s:r:t:")) != -1) {
        switch (c) {
        case 'n': snprintf(ns_arg, sizeof(ns_arg), "%s", optarg); break;
        case 's': size = strtoul(optarg, NULL, 0); break;
        case 'r': reps = strtoul(optarg, NULL, 0); break;
        case 't': snprintf(tls_arg, sizeof(tls_arg), "%s", optarg); break;
        default:
            fprintf(stderr, "usage: %s [-n list] [-s size] [-r reps] "
                    "[-t tls,...]\n", argv[0]);
            return 2;
        }
    }

    nn  = split(ns_arg, ns, 16);
    ntl = split(tls_arg, tls, 8);
    t   = calloc(nn * ntl * reps, sizeof(*t));

    for (r = 0; r < reps; ++r) {
        for (i = 0; i < nn; ++i) {
            for (j = 0; j < ntl; ++j) {
                fprintf(stderr, "\rrep %zu/%zu  N=%-6s %-6s", r + 1, reps,
                        ns[i], tls[j]);
                t[(i * ntl + j) * reps + r] = run(tls[j], strtoul(ns[i], NULL,
                                                                  0), size);
            }
        }
    }
    fprintf(stderr, "\n");

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
    free(t);
    return 0;
}
