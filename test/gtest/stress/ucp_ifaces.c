/*
 * The UCT interfaces a UCP worker opened on one transport.  UCP keeps them
 * to itself; a stress test reaches rc_tm's software device through them to
 * steer it (softnic_test_set_order).  Built against UCP's internal headers of the
 * installed version, as the module is.
 */
#include <ucp/core/ucp_context.h>
#include <ucp/core/ucp_worker.h>

#include <string.h>

unsigned rc_tm_test_worker_ifaces(ucp_worker_h worker, const char *tl_name,
                                  uct_iface_h *ifaces, unsigned max)
{
    ucp_context_h context = worker->context;
    ucp_worker_iface_t *wiface;
    unsigned i, count = 0;

    for (i = 0; (i < worker->num_ifaces) && (count < max); ++i) {
        wiface = worker->ifaces[i];
        if (!strcmp(context->tl_rscs[wiface->rsc_index].tl_rsc.tl_name,
                    tl_name)) {
            ifaces[count++] = wiface->iface;
        }
    }
    return count;
}
