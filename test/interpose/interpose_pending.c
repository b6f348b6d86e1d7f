/*
 * Until the software NIC has completion channels (softnic_create_cq and
 * the channel verbs): CQs without a channel through ibv_create_cq_ex,
 * channels not supported.  Removed when those land.
 */
#include "interpose.h"

struct ibv_comp_channel *softnic_create_comp_channel(struct ibv_context *c)
{
    return ivp_null_eopnotsupp();
}

int softnic_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    return EOPNOTSUPP;
}

struct ibv_cq *softnic_create_cq(struct ibv_context *context, int cqe,
                                 void *cq_context,
                                 struct ibv_comp_channel *channel,
                                 int comp_vector)
{
    struct ibv_cq_init_attr_ex attr = {
        .cqe         = (uint32_t)cqe,
        .cq_context  = cq_context,
        .comp_vector = (uint32_t)comp_vector,
    };
    struct ibv_cq_ex *cq;

    if (channel != NULL) {
        return ivp_null_eopnotsupp();
    }
    cq = ibv_create_cq_ex(context, &attr);
    return (cq == NULL) ? NULL : ibv_cq_ex_to_cq(cq);
}

int softnic_resize_cq(struct ibv_cq *cq, int cqe)
{
    return EOPNOTSUPP;
}

int softnic_get_cq_event(struct ibv_comp_channel *channel,
                         struct ibv_cq **cq, void **cq_context)
{
    return ivp_minus1_eopnotsupp();
}

void softnic_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
}
