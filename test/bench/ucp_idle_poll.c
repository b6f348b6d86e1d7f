/*
 * What an empty ucp_worker_progress() costs: two workers of one process,
 * wired up by one tagged message, then progress calls on the receiver with
 * nothing outstanding.  Counted, not timed (docs/one-host.md):
 *
 *   UCX_TLS=rc_tm ./libtool --mode=execute valgrind --tool=callgrind \
 *       --toggle-collect=poll_empty test/bench/ucp_idle_poll 100000
 *
 * counts only the measured calls: the program total over 100000 is one
 * call's instructions.  UCX_TLS=sm gives UCX's own.
 */
#include <ucp/api/ucp.h>

#include <stdio.h>
#include <stdlib.h>

#define WARMUP_POLLS 100000

/* The measured calls, in a function of their own for --toggle-collect */
static void __attribute__((noinline)) poll_empty(ucp_worker_h worker,
                                                 long polls)
{
    long i;

    for (i = 0; i < polls; ++i) {
        ucp_worker_progress(worker);
    }
}

static int request_done(void *request)
{
    return !UCS_PTR_IS_PTR(request) ||
           (ucp_request_check_status(request) != UCS_INPROGRESS);
}

static void request_release(void *request)
{
    if (UCS_PTR_IS_PTR(request)) {
        ucp_request_free(request);
    }
}

/* One message from sender to receiver: both ends are wired up after it */
static int wire_up(ucp_worker_h sender, ucp_ep_h ep, ucp_worker_h receiver)
{
    ucp_request_param_t param = {0};
    char buf[8]               = {0};
    void *recv, *send;
    int ok;

    recv = ucp_tag_recv_nbx(receiver, buf, sizeof(buf), 1, ~0ull, &param);
    send = ucp_tag_send_nbx(ep, buf, sizeof(buf), 1, &param);
    while (!request_done(recv) || !request_done(send)) {
        ucp_worker_progress(sender);
        ucp_worker_progress(receiver);
    }
    ok = !UCS_PTR_IS_ERR(recv) && !UCS_PTR_IS_ERR(send) &&
         (!UCS_PTR_IS_PTR(recv) ||
          (ucp_request_check_status(recv) == UCS_OK));
    request_release(recv);
    request_release(send);
    return ok;
}

int main(int argc, char **argv)
{
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES,
        .features   = UCP_FEATURE_TAG
    };
    ucp_worker_params_t worker_params = {0};
    ucp_request_param_t close_param   = {0};
    ucp_ep_params_t ep_params;
    ucp_worker_h worker[2];
    ucp_address_t *address;
    size_t address_len;
    ucp_context_h context;
    ucp_config_t *config;
    long polls, i;
    void *close;
    ucp_ep_h ep;

    polls = (argc > 1) ? atol(argv[1]) : 0;
    if (polls <= 0) {
        fprintf(stderr, "usage: %s POLLS\n", argv[0]);
        return 2;
    }

    if ((ucp_config_read(NULL, NULL, &config) != UCS_OK) ||
        (ucp_init(&params, config, &context) != UCS_OK)) {
        fprintf(stderr, "ucp_init failed\n");
        return 1;
    }
    ucp_config_release(config);
    for (i = 0; i < 2; ++i) {
        if (ucp_worker_create(context, &worker_params, &worker[i]) != UCS_OK) {
            fprintf(stderr, "ucp_worker_create failed\n");
            return 1;
        }
    }

    if (ucp_worker_get_address(worker[1], &address, &address_len) != UCS_OK) {
        fprintf(stderr, "ucp_worker_get_address failed\n");
        return 1;
    }
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address    = address;
    if ((ucp_ep_create(worker[0], &ep_params, &ep) != UCS_OK) ||
        !wire_up(worker[0], ep, worker[1])) {
        fprintf(stderr, "wireup failed\n");
        return 1;
    }
    ucp_worker_release_address(worker[1], address);

    for (i = 0; i < WARMUP_POLLS; ++i) {
        ucp_worker_progress(worker[1]);
    }
    poll_empty(worker[1], polls);
    printf("%ld empty progress calls\n", polls);

    close_param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    close_param.flags        = UCP_EP_CLOSE_FLAG_FORCE;
    close = ucp_ep_close_nbx(ep, &close_param);
    while (!request_done(close)) {
        ucp_worker_progress(worker[0]);
        ucp_worker_progress(worker[1]);
    }
    request_release(close);
    for (i = 0; i < 2; ++i) {
        ucp_worker_destroy(worker[i]);
    }
    ucp_cleanup(context);
    return 0;
}
