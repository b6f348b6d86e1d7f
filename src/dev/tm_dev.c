/*
 * Device layer: logging, for the verbs backend and the software NIC under
 * it (which logs through the same hook).
 */
#include "tm_dev.h"

#include <softnic/softnic.h>

#include <stdio.h>

static tm_dev_log_func_t tm_dev_log_func;

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

/* The software NIC's messages, prefixed with what they come from */
static void tm_dev_softnic_log(softnic_log_level_t level, const char *fmt,
                               va_list ap)
{
    static const tm_dev_log_level_t levels[] = {
        [SOFTNIC_LOG_ERROR] = TM_DEV_LOG_ERROR,
        [SOFTNIC_LOG_WARN]  = TM_DEV_LOG_WARN,
        [SOFTNIC_LOG_DEBUG] = TM_DEV_LOG_DEBUG
    };
    char msg[512];

    vsnprintf(msg, sizeof(msg), fmt, ap);
    tm_dev_log(levels[level], "softnic", 0, "softnic: %s", msg);
}

void tm_dev_set_log_func(tm_dev_log_func_t func)
{
    tm_dev_log_func = func;
    softnic_set_log((func != NULL) ? tm_dev_softnic_log : NULL);
}
