/*
 * Registration of component, memory domain and transport "rc_tm" when the
 * module is loaded (LD_PRELOAD, or linked in).
 *
 * The module is compiled against UCX's internal headers, whose ABI changes
 * between releases, so it registers only into the UCX version it was built
 * for.  Into any other UCX it registers nothing and says so once.  That path
 * must not touch UCX internals (not even ucs_error, whose globals may have
 * another layout there): it uses only the public ucp_get_version() and stdio.
 */
#include "rc_tm_iface.h"

#include <ucp/api/ucp.h>
#include <stdio.h>

static int uct_rc_tm_registered;

static void uct_rc_tm_dev_log(tm_dev_log_level_t level, const char *file,
                              int line, const char *fmt, va_list ap)
{
    static const ucs_log_level_t ucs_level[] = {
        [TM_DEV_LOG_ERROR] = UCS_LOG_LEVEL_ERROR,
        [TM_DEV_LOG_WARN]  = UCS_LOG_LEVEL_WARN,
        [TM_DEV_LOG_DEBUG] = UCS_LOG_LEVEL_DEBUG
    };

    char msg[256];

    /* ucs_log_dispatch() is variadic: it cannot take our va_list */
    if (ucs_log_is_enabled(ucs_level[level])) {
        vsnprintf(msg, sizeof(msg), fmt, ap);
        ucs_log_dispatch(file, line, "", ucs_level[level],
                         &ucs_global_opts.log_component, "%s", msg);
    }
}

/* Nonzero when the running UCX is the one this module was built against */
int uct_rc_tm_ucx_version_matches(unsigned major, unsigned minor,
                                  unsigned release)
{
    return (major == RC_TM_UCX_MAJOR) && (minor == RC_TM_UCX_MINOR) &&
           (release == RC_TM_UCX_PATCH);
}

static void UCS_F_CTOR uct_rc_tm_init(void)
{
    unsigned major, minor, release;

    ucp_get_version(&major, &minor, &release);
    if (!uct_rc_tm_ucx_version_matches(major, minor, release)) {
        fprintf(stderr,
                "[rc_tm] UCX ERROR libuct_rc_tm was built for UCX %d.%d.%d, "
                "but this process runs UCX %u.%u.%u: transport rc_tm is not "
                "registered. Rebuild rc_tm against UCX %u.%u.%u.\n",
                RC_TM_UCX_MAJOR, RC_TM_UCX_MINOR, RC_TM_UCX_PATCH, major,
                minor, release, major, minor, release);
        return;
    }

    tm_dev_set_log_func(uct_rc_tm_dev_log);
    uct_component_register(&uct_rc_tm_component);
    uct_tl_register(&uct_rc_tm_component, &uct_rc_tm_tl);
    uct_rc_tm_registered = 1;
}

static void UCS_F_DTOR uct_rc_tm_cleanup(void)
{
    if (!uct_rc_tm_registered) {
        return;
    }

    uct_tl_unregister(&uct_rc_tm_tl);
    uct_component_unregister(&uct_rc_tm_component);
    tm_dev_set_log_func(NULL);
    uct_rc_tm_registered = 0;
}
