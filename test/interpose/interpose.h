/*
 * A test-only interposer (LD_PRELOAD) that lets unmodified programs linked
 * against libibverbs use the software NIC: it defines libibverbs' exported
 * functions under their own symbol versions (softnic_verbs.map), sends the
 * software NIC's device and objects to softnic_<verb>, and everything else
 * to the real libibverbs (dlvsym(RTLD_NEXT, name, version)).
 *
 * It is no part of the product: the transport calls softnic_* itself.
 */
#ifndef INTERPOSE_H_
#define INTERPOSE_H_

#include "softnic/softnic.h"

#include <errno.h>
#include <stddef.h>

#define IVP_EXPORT __attribute__((visibility("default")))

/* The version node of libibverbs' current functions, and of the 1.0 ABI */
#define IVP_V1_0  "IBVERBS_1.0"
#define IVP_V1_1  "IBVERBS_1.1"
/* libibverbs' private node (IBVERBS_PABI_VERSION 34 in rdma-core 44 to 56;
 * check-coverage.sh fails the build where it differs) */
#define IVP_PRIVATE "IBVERBS_PRIVATE_34"

/* The real libibverbs' function name@version; never NULL (a program cannot
 * have linked against a function its libibverbs lacks: when that happens
 * anyway, a message names it and the process aborts) */
void *ivp_real_sym(const char *name, const char *version);

/* The real function, looked up once per call site */
#define IVP_REAL(_name, _version) \
    ({ \
        static __typeof__(&(_name)) _ivp_fn; \
        __typeof__(&(_name)) _ivp_f = __atomic_load_n(&_ivp_fn, \
                                                      __ATOMIC_ACQUIRE); \
        if (_ivp_f == NULL) { \
            _ivp_f = (__typeof__(&(_name)))ivp_real_sym(#_name, _version); \
            __atomic_store_n(&_ivp_fn, _ivp_f, __ATOMIC_RELEASE); \
        } \
        _ivp_f; \
    })

/* Whether an object belongs to the software NIC: every verbs object names
 * its context */
static inline int ivp_soft(struct ibv_context *context)
{
    return softnic_dv_is_softnic(context);
}

int ivp_soft_device(struct ibv_device *device);

/* What a soft object's unsupported verb returns: NULL / -1 / an errno */
static inline void *ivp_null_eopnotsupp(void)
{
    errno = EOPNOTSUPP;
    return NULL;
}

static inline int ivp_minus1_eopnotsupp(void)
{
    errno = EOPNOTSUPP;
    return -1;
}

#endif
