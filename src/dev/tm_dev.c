/*
 * Device registry: every built backend, TM-capable NICs first, so that the
 * software device is what remains where no TM NIC exists.
 */
#include "tm_dev.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static tm_dev_log_func_t tm_dev_log_func;

void tm_dev_set_log_func(tm_dev_log_func_t func)
{
    tm_dev_log_func = func;
}

void tm_dev_log(tm_dev_log_level_t level, const char *file, int line,
                const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    if (tm_dev_log_func != NULL) {
        tm_dev_log_func(level, file, line, fmt, ap);
    } else if (level == TM_DEV_LOG_ERROR) {
        fprintf(stderr, "rc_tm device: ");
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    }
    va_end(ap);
}

static const tm_dev_ops_t *const tm_dev_backends[] = {
#ifdef HAVE_TM_DEV_VERBS
    &tm_dev_verbs_ops,
#endif
    &tm_dev_soft_ops,
};

unsigned tm_dev_list(tm_dev_info_t *info, unsigned max)
{
    unsigned count = 0;
    size_t i;

    for (i = 0; i < sizeof(tm_dev_backends) / sizeof(tm_dev_backends[0]); ++i) {
        tm_dev_backends[i]->list(info, max, &count);
    }
    return count;
}

int tm_dev_find(const char *name, tm_dev_info_t *info)
{
    tm_dev_info_t list[16];
    unsigned count, i;

    count = tm_dev_list(list, sizeof(list) / sizeof(list[0]));
    for (i = 0; i < count; ++i) {
        if (!strcmp(list[i].name, name)) {
            *info = list[i];
            return 0;
        }
    }
    return ENODEV;
}
