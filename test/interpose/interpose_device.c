/*
 * Interposer: the device list, devices and contexts (open, close, queries,
 * asynchronous events), and fork support.
 *
 * The device list is the real libibverbs' list followed by the software
 * NIC's device.  Each list the interposer returns is recorded, so that
 * ibv_free_device_list gives the real part back to libibverbs and frees
 * the rest; a list it does not know goes to the real function unchanged.
 */
#include "interpose.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One list handed out: the real part and the array the caller holds */
typedef struct ivp_dev_list {
    struct ivp_dev_list *next;
    struct ibv_device  **real;   /* the real libibverbs' list, or NULL */
    struct ibv_device   *devs[]; /* real devices, soft ones, NULL */
} ivp_dev_list_t;

static pthread_mutex_t ivp_lists_lock = PTHREAD_MUTEX_INITIALIZER;
static ivp_dev_list_t *ivp_lists;

void *ivp_real_sym(const char *name, const char *version)
{
    void *sym = dlvsym(RTLD_NEXT, name, version);

    if (sym == NULL) {
        fprintf(stderr, "softnic_verbs: the real libibverbs has no %s@%s: "
                "%s\n", name, version, dlerror());
        abort();
    }
    return sym;
}

int ivp_soft_device(struct ibv_device *device)
{
    struct ibv_device **soft = softnic_get_device_list(NULL);

    for (; *soft != NULL; soft++) {
        if (*soft == device) {
            return 1;
        }
    }
    return 0;
}


/* ---- the device list ---- */

IVP_EXPORT struct ibv_device **(ibv_get_device_list)(int *num_devices)
{
    struct ibv_device **real, **soft;
    int num_real = 0, num_soft = 0, i;
    ivp_dev_list_t *list;

    /* No RDMA kernel support: the real list fails (ENOSYS), the software
     * NIC is still there */
    real = IVP_REAL(ibv_get_device_list, IVP_V1_1)(&num_real);
    if (real == NULL) {
        num_real = 0;
    }
    soft = softnic_get_device_list(&num_soft);

    list = malloc(sizeof(*list) +
                  (num_real + num_soft + 1) * sizeof(list->devs[0]));
    if (list == NULL) {
        if (real != NULL) {
            IVP_REAL(ibv_free_device_list, IVP_V1_1)(real);
        }
        errno = ENOMEM;
        return NULL;
    }
    list->real = real;
    for (i = 0; i < num_real; i++) {
        list->devs[i] = real[i];
    }
    for (i = 0; i < num_soft; i++) {
        list->devs[num_real + i] = soft[i];
    }
    list->devs[num_real + num_soft] = NULL;

    pthread_mutex_lock(&ivp_lists_lock);
    list->next = ivp_lists;
    ivp_lists  = list;
    pthread_mutex_unlock(&ivp_lists_lock);

    if (num_devices != NULL) {
        *num_devices = num_real + num_soft;
    }
    return list->devs;
}

/* Removes and returns the recorded list whose array is devs, or NULL */
static ivp_dev_list_t *ivp_list_take(struct ibv_device **devs)
{
    ivp_dev_list_t **p, *found = NULL;

    pthread_mutex_lock(&ivp_lists_lock);
    for (p = &ivp_lists; *p != NULL; p = &(*p)->next) {
        if ((*p)->devs == devs) {
            found = *p;
            *p    = found->next;
            break;
        }
    }
    pthread_mutex_unlock(&ivp_lists_lock);
    return found;
}

IVP_EXPORT void (ibv_free_device_list)(struct ibv_device **devs)
{
    ivp_dev_list_t *list = ivp_list_take(devs);

    if (list == NULL) {
        IVP_REAL(ibv_free_device_list, IVP_V1_1)(devs);
        return;
    }
    if (list->real != NULL) {
        IVP_REAL(ibv_free_device_list, IVP_V1_1)(list->real);
    }
    free(list);
}

IVP_EXPORT const char *(ibv_get_device_name)(struct ibv_device *device)
{
    if (ivp_soft_device(device)) {
        return softnic_get_device_name(device);
    }
    return IVP_REAL(ibv_get_device_name, IVP_V1_1)(device);
}

/* The node GUID, as the device's context reports it */
IVP_EXPORT __be64 (ibv_get_device_guid)(struct ibv_device *device)
{
    struct ibv_device_attr_ex attr;
    struct ibv_context *context;
    __be64 guid = 0;

    if (!ivp_soft_device(device)) {
        return IVP_REAL(ibv_get_device_guid, IVP_V1_1)(device);
    }
    context = softnic_open_device(device);
    if (context == NULL) {
        return 0;
    }
    if (ibv_query_device_ex(context, NULL, &attr) == 0) {
        guid = attr.orig_attr.node_guid;
    }
    softnic_close_device(context);
    return guid;
}

/* The kernel's index of the device: the software NIC has none, which the
 * man page's -1 says */
IVP_EXPORT int (ibv_get_device_index)(struct ibv_device *device)
{
    if (ivp_soft_device(device)) {
        return -1;
    }
    return IVP_REAL(ibv_get_device_index, "IBVERBS_1.9")(device);
}


/* ---- open / close ---- */

/* SOFTNIC_PROGRESS: "thread" (default) or "inline".  Programs block in
 * polls of one CQ at a time, so the device's work runs on its engine
 * thread unless told otherwise. */
static int ivp_progress_from_env(uint32_t *progress)
{
    const char *env = getenv("SOFTNIC_PROGRESS");

    if ((env == NULL) || (*env == '\0') || !strcmp(env, "thread")) {
        *progress = SOFTNIC_PROGRESS_THREAD;
    } else if (!strcmp(env, "inline")) {
        *progress = SOFTNIC_PROGRESS_INLINE;
    } else {
        fprintf(stderr, "softnic_verbs: SOFTNIC_PROGRESS=%s: use thread or "
                "inline\n", env);
        return EINVAL;
    }
    return 0;
}

IVP_EXPORT struct ibv_context *(ibv_open_device)(struct ibv_device *device)
{
    struct softnic_dv_attr attr = {0};
    struct ibv_context *context;
    int ret;

    if (!ivp_soft_device(device)) {
        return IVP_REAL(ibv_open_device, IVP_V1_1)(device);
    }
    ret = ivp_progress_from_env(&attr.progress);
    if (ret != 0) {
        errno = ret;
        return NULL;
    }
    context = softnic_open_device(device);
    if (context == NULL) {
        return NULL;
    }
    ret = softnic_dv_set_attr(context, &attr);  /* before any CQ */
    if (ret != 0) {
        softnic_close_device(context);
        errno = ret;
        return NULL;
    }
    return context;
}

IVP_EXPORT int (ibv_close_device)(struct ibv_context *context)
{
    if (ivp_soft(context)) {
        return softnic_close_device(context);
    }
    return IVP_REAL(ibv_close_device, IVP_V1_1)(context);
}


/* ---- queries ---- */

IVP_EXPORT int (ibv_query_device)(struct ibv_context *context,
                                  struct ibv_device_attr *device_attr)
{
    if (ivp_soft(context)) {
        return softnic_query_device(context, device_attr);
    }
    return IVP_REAL(ibv_query_device, IVP_V1_1)(context, device_attr);
}

/* The exported function, which callers of older headers reach (the inline
 * ibv_query_port goes to the context's query_port) */
IVP_EXPORT int (ibv_query_port)(struct ibv_context *context, uint8_t port_num,
                                struct _compat_ibv_port_attr *port_attr)
{
    if (ivp_soft(context)) {
        return softnic_query_port(context, port_num,
                                  (struct ibv_port_attr *)port_attr);
    }
    return IVP_REAL(ibv_query_port, IVP_V1_1)(context, port_num, port_attr);
}

IVP_EXPORT int (ibv_query_gid)(struct ibv_context *context, uint8_t port_num,
                               int index, union ibv_gid *gid)
{
    if (ivp_soft(context)) {
        return softnic_query_gid(context, port_num, index, gid);
    }
    return IVP_REAL(ibv_query_gid, IVP_V1_1)(context, port_num, index, gid);
}

IVP_EXPORT int (_ibv_query_gid_ex)(struct ibv_context *context,
                                   uint32_t port_num, uint32_t gid_index,
                                   struct ibv_gid_entry *entry,
                                   uint32_t flags, size_t entry_size)
{
    if (ivp_soft(context)) {
        return softnic_query_gid_ex(context, port_num, gid_index, entry,
                                    flags, entry_size);
    }
    return IVP_REAL(_ibv_query_gid_ex, "IBVERBS_1.11")(context, port_num,
                                                       gid_index, entry,
                                                       flags, entry_size);
}

/* Every valid GID of every port: port 1's, from index 0 until the first
 * index that is not one; the number of entries, or a negative errno */
IVP_EXPORT ssize_t (_ibv_query_gid_table)(struct ibv_context *context,
                                          struct ibv_gid_entry *entries,
                                          size_t max_entries, uint32_t flags,
                                          size_t entry_size)
{
    struct ibv_gid_entry entry;
    size_t n = 0;

    if (!ivp_soft(context)) {
        return IVP_REAL(_ibv_query_gid_table, "IBVERBS_1.11")(
                context, entries, max_entries, flags, entry_size);
    }
    if (flags != 0) {
        return -EINVAL;
    }
    if (entry_size < sizeof(entry)) {
        return -EINVAL;
    }
    while (softnic_query_gid_ex(context, 1, (uint32_t)n, &entry, 0,
                                sizeof(entry)) == 0) {
        if (n == max_entries) {
            return -EINVAL;    /* the table is larger than the array */
        }
        memcpy((char *)entries + n * entry_size, &entry, sizeof(entry));
        n++;
    }
    return (ssize_t)n;
}

IVP_EXPORT int (ibv_query_pkey)(struct ibv_context *context, uint8_t port_num,
                                int index, __be16 *pkey)
{
    if (ivp_soft(context)) {
        return softnic_query_pkey(context, port_num, index, pkey);
    }
    return IVP_REAL(ibv_query_pkey, IVP_V1_1)(context, port_num, index, pkey);
}

/* The index of pkey in the port's table: the first index whose key it is,
 * or the query's error at the end of the table, as libibverbs */
IVP_EXPORT int (ibv_get_pkey_index)(struct ibv_context *context,
                                    uint8_t port_num, __be16 pkey)
{
    __be16 entry;
    int index, ret;

    if (!ivp_soft(context)) {
        return IVP_REAL(ibv_get_pkey_index, "IBVERBS_1.5")(context, port_num,
                                                           pkey);
    }
    for (index = 0;; index++) {
        ret = softnic_query_pkey(context, port_num, index, &entry);
        if (ret < 0) {
            return ret;
        }
        if (entry == pkey) {
            return index;
        }
    }
}


/* libibverbs' private ibv_query_gid_type (its driver.h), which rdma-core's
 * own programs call (ibv_devinfo -v) */
enum ibv_gid_type_sysfs {
    IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
    IBV_GID_TYPE_SYSFS_ROCE_V2
};

IVP_EXPORT int ibv_query_gid_type(struct ibv_context *context,
                                  uint8_t port_num, unsigned int index,
                                  enum ibv_gid_type_sysfs *type);

/* The sysfs type of a GID: InfiniBand and RoCE v1 read the same; -1 for
 * a GID that is not there, as libibverbs */
IVP_EXPORT int ibv_query_gid_type(struct ibv_context *context,
                                  uint8_t port_num, unsigned int index,
                                  enum ibv_gid_type_sysfs *type)
{
    struct ibv_gid_entry entry;

    if (!ivp_soft(context)) {
        return IVP_REAL(ibv_query_gid_type, IVP_PRIVATE)(context, port_num,
                                                         index, type);
    }
    if (softnic_query_gid_ex(context, port_num, index, &entry, 0,
                             sizeof(entry)) != 0) {
        return -1;
    }
    *type = (entry.gid_type == IBV_GID_TYPE_ROCE_V2) ?
            IBV_GID_TYPE_SYSFS_ROCE_V2 : IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
    return 0;
}


/* ---- asynchronous events ---- */

IVP_EXPORT int (ibv_get_async_event)(struct ibv_context *context,
                                     struct ibv_async_event *event)
{
    if (ivp_soft(context)) {
        return softnic_get_async_event(context, event);
    }
    return IVP_REAL(ibv_get_async_event, IVP_V1_1)(context, event);
}

/* The context of the object an event names, or NULL for a port or device
 * event (which nothing acknowledges) */
static struct ibv_context *ivp_event_context(struct ibv_async_event *event)
{
    switch (event->event_type) {
    case IBV_EVENT_CQ_ERR:
        return event->element.cq->context;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        return event->element.qp->context;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
        return event->element.srq->context;
    case IBV_EVENT_WQ_FATAL:
        return event->element.wq->context;
    default:
        return NULL;
    }
}

IVP_EXPORT void (ibv_ack_async_event)(struct ibv_async_event *event)
{
    struct ibv_context *context = ivp_event_context(event);

    if ((context != NULL) && ivp_soft(context)) {
        softnic_ack_async_event(event);
        return;
    }
    IVP_REAL(ibv_ack_async_event, IVP_V1_1)(event);
}


/* ---- fork support: both libraries' ---- */

IVP_EXPORT int (ibv_fork_init)(void)
{
    int ret = IVP_REAL(ibv_fork_init, IVP_V1_1)();

    if (ret != 0) {
        return ret;
    }
    return softnic_fork_init();
}

/* libibverbs' answer, unless it is "disabled" and the software NIC's is
 * not (a process that asked libibverbs' ibv_fork_init gets both) */
IVP_EXPORT enum ibv_fork_status (ibv_is_fork_initialized)(void)
{
    enum ibv_fork_status real = IVP_REAL(ibv_is_fork_initialized,
                                         "IBVERBS_1.13")();

    if (real == IBV_FORK_DISABLED) {
        return softnic_is_fork_initialized();
    }
    return real;
}
