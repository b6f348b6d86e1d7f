/*
 * The offload report: what an interface's counters say about tag-matching
 * offload, in words, with advice where offload did not pay.  Printed when
 * the interface closes (UCX_RC_TM_REPORT=y), and readable, with each
 * counter, through UCX's VFS while the process runs.  It reads counters the
 * data path keeps anyway: nothing here runs per message.
 *
 * rc_tm sees the messages that reach it tagged and the receives UCP gives
 * it, not the receives UCP keeps for itself nor why (below UCX_TM_THRESH, a
 * wildcard source, a non-contiguous buffer, a receive posted after its
 * message): the advice names those causes together where it cannot tell
 * them apart.
 */
#include "rc_tm_iface.h"

#include <ucp/api/ucp.h>
#include <ucs/debug/log_def.h>
#include <ucs/sys/string.h>
#include <ucs/vfs/base/vfs_obj.h>
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* UCP's tag-offload settings, as UCP reads them without an environment
 * prefix (its defaults, configuration files, UCX_* variables) */
typedef struct {
    size_t  tm_thresh;          /* UCX_TM_THRESH; SIZE_MAX: not known */
    char    tm_sw_rndv[16];     /* UCX_TM_SW_RNDV: n, y (1.18: try) */
    char    proto_enable[16];   /* UCX_PROTO_ENABLE */
} uct_rc_tm_ucp_settings_t;

/* What the counters add up to */
typedef struct {
    uint64_t c[UCT_RC_TM_STAT_LAST];
    uint64_t given;             /* receives rc_tm took */
    uint64_t refused;           /* ... and refused, both lists full */
    uint64_t dev_eager;         /* matched by the device */
    uint64_t dev_rndv;
    uint64_t dev_req;           /* UCP's rendezvous requests */
    uint64_t dev;
    uint64_t unexp;             /* arrived before any receive: UCP's */
    uint64_t sw_rndv;           /* UCP's software rendezvous, all */
    uint64_t arrived;           /* tagged messages */
} uct_rc_tm_report_t;


static void uct_rc_tm_report_sum(uct_rc_tm_iface_t *iface,
                                 uct_rc_tm_report_t *r)
{
    const uint64_t *c = r->c;

    uct_rc_tm_iface_counters(&iface->super.super, r->c, UCT_RC_TM_STAT_LAST);
    r->given     = c[UCT_RC_TM_STAT_POST_DEVICE] + c[UCT_RC_TM_STAT_POST_SW];
    /* Without a software list a full device list refuses (LIST_FULL) */
    r->refused   = (iface->config.sw_list_size == 0) ?
                   c[UCT_RC_TM_STAT_LIST_FULL] : c[UCT_RC_TM_STAT_SW_FULL];
    r->dev_eager = c[UCT_RC_TM_STAT_RX_EXP];
    r->dev_rndv  = c[UCT_RC_TM_STAT_RX_RNDV_EXP] +
                   c[UCT_RC_TM_STAT_RX_RNDV_INCOMPLETE];
    /* Read through the VFS while the interface runs, the second may be
     * newer than the first */
    r->dev_req   = c[UCT_RC_TM_STAT_RX_RNDV_REQ_EXP] -
                   ucs_min(c[UCT_RC_TM_STAT_RX_RNDV_REQ_EXP],
                           c[UCT_RC_TM_STAT_RX_SW_MATCH_RNDV_REQ]);
    r->dev       = r->dev_eager + r->dev_rndv + r->dev_req;
    r->unexp     = c[UCT_RC_TM_STAT_RX_EAGER_UNEXP] +
                   c[UCT_RC_TM_STAT_RX_RNDV_UNEXP] +
                   c[UCT_RC_TM_STAT_RX_RNDV_REQ_UNEXP];
    r->sw_rndv   = c[UCT_RC_TM_STAT_RX_RNDV_REQ_EXP] +
                   c[UCT_RC_TM_STAT_RX_RNDV_REQ_UNEXP];
    r->arrived   = r->dev + c[UCT_RC_TM_STAT_RX_SW_MATCH] + r->unexp;
}

/* The value of NAME=value in UCX's configuration print, or NULL */
static const char *uct_rc_tm_setting_value(const char *line, const char *name)
{
    size_t len = strlen(name);

    return (!strncmp(line, name, len) && (line[len] == '=')) ?
           line + len + 1 : NULL;
}

static void uct_rc_tm_setting_copy(char *dest, size_t max, const char *value)
{
    ucs_strncpy_zero(dest, value, max);
}

/* Read at report time only: UCP's values as printed by its public API */
static void uct_rc_tm_ucp_settings(uct_rc_tm_ucp_settings_t *s)
{
    ucp_config_t *config;
    char *text = NULL, *line, *save = NULL;
    const char *value;
    size_t size = 0;
    FILE *stream;

    s->tm_thresh       = SIZE_MAX;
    s->tm_sw_rndv[0]   = '\0';
    s->proto_enable[0] = '\0';
    if (ucp_config_read(NULL, NULL, &config) != UCS_OK) {
        return;
    }
    stream = open_memstream(&text, &size);
    if (stream != NULL) {
        ucp_config_print(config, stream, NULL, UCS_CONFIG_PRINT_CONFIG);
        fclose(stream);
    }
    ucp_config_release(config);

    for (line = (text != NULL) ? strtok_r(text, "\n", &save) : NULL;
         line != NULL; line = strtok_r(NULL, "\n", &save)) {
        if ((value = uct_rc_tm_setting_value(line, "UCX_TM_THRESH")) != NULL) {
            if (ucs_str_to_memunits(value, &s->tm_thresh) != UCS_OK) {
                s->tm_thresh = SIZE_MAX;
            }
        } else if ((value = uct_rc_tm_setting_value(line, "UCX_TM_SW_RNDV")) !=
                   NULL) {
            uct_rc_tm_setting_copy(s->tm_sw_rndv, sizeof(s->tm_sw_rndv), value);
        } else if ((value = uct_rc_tm_setting_value(line,
                                                    "UCX_PROTO_ENABLE")) !=
                   NULL) {
            uct_rc_tm_setting_copy(s->proto_enable, sizeof(s->proto_enable),
                                   value);
        }
    }
    free(text);
}

/* "1 KiB", "4 MiB", "100 B"; "?" when not known */
static const char *uct_rc_tm_size_str(size_t size, char *buf, size_t max)
{
    if (size == SIZE_MAX) {
        snprintf(buf, max, "?");
    } else if ((size >= UCS_MBYTE) && ((size % UCS_MBYTE) == 0)) {
        snprintf(buf, max, "%zu MiB", size / (size_t)UCS_MBYTE);
    } else if ((size >= UCS_KBYTE) && ((size % UCS_KBYTE) == 0)) {
        snprintf(buf, max, "%zu KiB", size / (size_t)UCS_KBYTE);
    } else {
        snprintf(buf, max, "%zu B", size);
    }
    return buf;
}

/* part of whole, in whole percent, rounded */
static unsigned uct_rc_tm_percent(uint64_t part, uint64_t whole)
{
    return (whole == 0) ? 0 :
           (unsigned)(((part * 100) + (whole / 2)) / whole);
}

static int uct_rc_tm_setting_is_yes(const char *value)
{
    return !strcasecmp(value, "y") || !strcasecmp(value, "yes") ||
           !strcasecmp(value, "on") || !strcmp(value, "1");
}


/* ----- advice ----- */

/* Receives kept in software because the device's list was full */
static unsigned uct_rc_tm_advise_list(uct_rc_tm_iface_t *iface,
                                      const uct_rc_tm_report_t *r,
                                      ucs_string_buffer_t *strb)
{
    unsigned list_size = iface->md->caps.tm.max_num_tags;
    uint64_t sw        = r->c[UCT_RC_TM_STAT_POST_SW];

    if (sw == 0) {
        return 0;
    }

    ucs_string_buffer_appendf(strb, "  advice: %u %% of receives stayed in "
                              "software because the device list (%u) was "
                              "full: ", uct_rc_tm_percent(sw, r->given),
                              list_size);
    if (iface->md->list_size_asked > list_size) {
        ucs_string_buffer_appendf(strb, "that is this device's most "
                                  "(UCX_RC_TM_LIST_SIZE=%u asked more); keep "
                                  "fewer receives posted at once\n",
                                  iface->md->list_size_asked);
    } else {
        ucs_string_buffer_appendf(strb, "raise UCX_RC_TM_LIST_SIZE (the "
                                  "software list held up to %u more)\n",
                                  iface->tm.sw_peak);
    }
    return 1;
}

/* Receives refused: the user (UCP) keeps them and matches them itself */
static unsigned uct_rc_tm_advise_refused(uct_rc_tm_iface_t *iface,
                                         const uct_rc_tm_report_t *r,
                                         ucs_string_buffer_t *strb)
{
    if (r->refused == 0) {
        return 0;
    }

    ucs_string_buffer_appendf(strb, "  advice: %" PRIu64 " receives were "
                              "refused, the device list (%u) and the software "
                              "list (%u) full, and matched by UCP: raise "
                              "UCX_RC_TM_TM_SW_LIST_SIZE\n", r->refused,
                              iface->md->caps.tm.max_num_tags,
                              iface->config.sw_list_size);
    return 1;
}

/* Most messages found no receive: UCP matched them */
static unsigned uct_rc_tm_advise_unexpected(const uct_rc_tm_report_t *r,
                                            const uct_rc_tm_ucp_settings_t *s,
                                            ucs_string_buffer_t *strb)
{
    char thresh[32];

    if ((r->unexp == 0) || ((2 * r->unexp) <= r->arrived)) {
        return 0;
    }

    uct_rc_tm_size_str(s->tm_thresh, thresh, sizeof(thresh));
    if (r->given == 0) {
        ucs_string_buffer_appendf(strb, "  advice: no receive reached rc_tm, "
                                  "UCP matched all %" PRIu64 " messages: "
                                  "messages below UCX_TM_THRESH (%s) are "
                                  "matched by UCP, not the device (UCP gives "
                                  "it only receives of UCX_TM_THRESH or more, "
                                  "contiguous, from a named source); lower "
                                  "UCX_TM_THRESH to offload smaller ones\n",
                                  r->unexp, thresh);
    } else {
        ucs_string_buffer_appendf(strb, "  advice: %u %% of messages found no "
                                  "receive in rc_tm and were matched by UCP: "
                                  "their receives were posted after them "
                                  "(post receives earlier) or kept by UCP (a "
                                  "wildcard source, a non-contiguous buffer, "
                                  "or for eager messages a receive below "
                                  "UCX_TM_THRESH (%s))\n",
                                  uct_rc_tm_percent(r->unexp, r->arrived),
                                  thresh);
    }
    return 1;
}

/* Rendezvous the device matched only the request of: advice where a
 * setting of UCP's chose it, a note (no advice) where UCP's cost model did */
static unsigned uct_rc_tm_advise_rndv(const uct_rc_tm_report_t *r,
                                      const uct_rc_tm_ucp_settings_t *s,
                                      ucs_string_buffer_t *strb)
{
    if ((r->sw_rndv == 0) || (r->sw_rndv <= r->dev_rndv)) {
        return 0;
    }

    if (uct_rc_tm_setting_is_yes(s->tm_sw_rndv)) {
        ucs_string_buffer_appendf(strb, "  advice: UCX_TM_SW_RNDV=%s sends "
                                  "every rendezvous as UCP's software "
                                  "rendezvous (the device matches its "
                                  "request, UCP moves the data): set it to n "
                                  "for the device to read the data itself\n",
                                  s->tm_sw_rndv);
    } else if (uct_rc_tm_setting_is_yes(s->proto_enable)) {
        ucs_string_buffer_appendf(strb, "  note: most rendezvous were UCP's "
                                  "software rendezvous (the device matched "
                                  "the request, UCP moved the data): with "
                                  "UCX_PROTO_ENABLE=%s UCP picks the "
                                  "device's rendezvous for fast-completion "
                                  "sends only, by its cost model\n",
                                  s->proto_enable);
        return 0;
    } else {
        ucs_string_buffer_appendf(strb, "  note: most rendezvous were UCP's "
                                  "software rendezvous (the device matched "
                                  "the request, UCP moved the data): UCP "
                                  "sends so what is not contiguous or is "
                                  "longer than UCX_RC_TM_TM_RNDV_MAX\n");
        return 0;
    }
    return 1;
}


/* ----- the text ----- */

static void uct_rc_tm_report_counts(uct_rc_tm_iface_t *iface,
                                    const uct_rc_tm_report_t *r,
                                    ucs_string_buffer_t *strb)
{
    const uint64_t *c = r->c;

    ucs_string_buffer_appendf(strb, "  messages: %" PRIu64 " tagged; the "
                              "device matched %" PRIu64 " (eager %" PRIu64
                              ", rendezvous %" PRIu64 ", UCP rendezvous "
                              "requests %" PRIu64 "), rc_tm's software list %"
                              PRIu64 "; %" PRIu64 " unexpected, matched by "
                              "UCP (eager %" PRIu64 ", rendezvous %" PRIu64
                              ", requests %" PRIu64 ")\n", r->arrived, r->dev, r->dev_eager,
                              r->dev_rndv, r->dev_req,
                              c[UCT_RC_TM_STAT_RX_SW_MATCH], r->unexp,
                              c[UCT_RC_TM_STAT_RX_EAGER_UNEXP],
                              c[UCT_RC_TM_STAT_RX_RNDV_UNEXP],
                              c[UCT_RC_TM_STAT_RX_RNDV_REQ_UNEXP]);
    ucs_string_buffer_appendf(strb, "  receives: %" PRIu64 " given to rc_tm: "
                              "%" PRIu64 " to the device, %" PRIu64 " to "
                              "software while its list was full (peak %u); %"
                              PRIu64 " moved to the device, %" PRIu64
                              " refused, %" PRIu64 " canceled\n", r->given,
                              c[UCT_RC_TM_STAT_POST_DEVICE],
                              c[UCT_RC_TM_STAT_POST_SW], iface->tm.sw_peak,
                              c[UCT_RC_TM_STAT_PROMOTE], r->refused,
                              c[UCT_RC_TM_STAT_CANCEL]);
    ucs_string_buffer_appendf(strb, "  rendezvous: %" PRIu64 " carried by "
                              "the device (%" PRIu64 " finished in software), "
                              "%" PRIu64 " matched in rc_tm's software list "
                              "and read by it, %" PRIu64 " as UCP's software "
                              "rendezvous, %" PRIu64 " unexpected (read by "
                              "UCP); %" PRIu64 " sent as the device's\n",
                              r->dev_rndv,
                              c[UCT_RC_TM_STAT_RX_RNDV_INCOMPLETE],
                              c[UCT_RC_TM_STAT_RX_SW_MATCH_RNDV], r->sw_rndv,
                              c[UCT_RC_TM_STAT_RX_RNDV_UNEXP],
                              c[UCT_RC_TM_STAT_TX_RNDV]);
}

static void uct_rc_tm_report_advice(uct_rc_tm_iface_t *iface,
                                    const uct_rc_tm_report_t *r,
                                    ucs_string_buffer_t *strb)
{
    uct_rc_tm_ucp_settings_t settings;
    unsigned count = 0;

    uct_rc_tm_ucp_settings(&settings);
    count += uct_rc_tm_advise_list(iface, r, strb);
    count += uct_rc_tm_advise_refused(iface, r, strb);
    count += uct_rc_tm_advise_unexpected(r, &settings, strb);
    count += uct_rc_tm_advise_rndv(r, &settings, strb);
    if (count == 0) {
        ucs_string_buffer_appendf(strb, "  advice: none, the device matched "
                                  "%u %% of the tagged messages\n",
                                  uct_rc_tm_percent(r->dev, r->arrived));
    }
}

void uct_rc_tm_report_text(uct_rc_tm_iface_t *iface, ucs_string_buffer_t *strb)
{
    char dev_name[UCT_RC_TM_NET_NAME_MAX];
    uct_rc_tm_report_t r;

    uct_rc_tm_dev_net_name(iface->dev->name, iface->dev->port_num, dev_name,
                           sizeof(dev_name));
    ucs_string_buffer_appendf(strb, "rc_tm offload report, %s (iface %p, "
                              "device list %u, software list %u):\n",
                              dev_name, iface,
                              iface->md->caps.tm.max_num_tags,
                              iface->config.sw_list_size);
    if (!iface->tm.enabled) {
        ucs_string_buffer_appendf(strb, "  tag offload off: the interface was "
                                  "opened without tag matching\n");
        return;
    }

    uct_rc_tm_report_sum(iface, &r);
    if ((r.arrived == 0) && (r.given == 0) &&
        (r.c[UCT_RC_TM_STAT_TX_RNDV] == 0)) {
        ucs_string_buffer_appendf(strb, "  no tagged message arrived and no "
                                  "receive was given: if this process "
                                  "received tagged messages, UCP carried them "
                                  "on another transport (it offloads tags to "
                                  "rc_tm only where rc_tm also carries the "
                                  "peer's active messages)\n");
        return;
    }

    uct_rc_tm_report_counts(iface, &r, strb);
    uct_rc_tm_report_advice(iface, &r, strb);
}

/* As UCX_PROTO_INFO prints: to UCX's log stream (UCX_LOG_FILE, stdout by
 * default) whatever the log level, each line with host and pid */
void uct_rc_tm_report_print(uct_rc_tm_iface_t *iface)
{
    ucs_string_buffer_t strb;
    char *line;

    ucs_string_buffer_init(&strb);
    uct_rc_tm_report_text(iface, &strb);
    ucs_string_buffer_for_each_token(line, &strb, "\n") {
        ucs_log_print_compact(line);
    }
    ucs_string_buffer_cleanup(&strb);
}


/* ----- UCX's VFS: uct/worker/<worker>/iface/<iface>/rc_tm/ ----- */

static void uct_rc_tm_vfs_show_counter(void *obj, ucs_string_buffer_t *strb,
                                       void *arg_ptr, uint64_t index)
{
    uint64_t counters[UCT_RC_TM_STAT_LAST];

    uct_rc_tm_iface_counters(obj, counters, UCT_RC_TM_STAT_LAST);
    ucs_string_buffer_appendf(strb, "%" PRIu64 "\n", counters[index]);
}

static void uct_rc_tm_vfs_show_sw_peak(void *obj, ucs_string_buffer_t *strb,
                                       void *arg_ptr, uint64_t arg_u64)
{
    ucs_string_buffer_appendf(strb, "%u\n",
                              ucs_derived_of(obj, uct_rc_tm_iface_t)->tm.sw_peak);
}

static void uct_rc_tm_vfs_show_report(void *obj, ucs_string_buffer_t *strb,
                                      void *arg_ptr, uint64_t arg_u64)
{
    uct_rc_tm_report_text(ucs_derived_of(obj, uct_rc_tm_iface_t), strb);
}

void uct_rc_tm_iface_vfs_populate(uct_rc_tm_iface_t *iface)
{
    char name[64];
    unsigned i, j;

    for (i = 0; i < UCT_RC_TM_STAT_LAST; ++i) {
        for (j = 0; (uct_rc_tm_stat_names[i][j] != '\0') &&
                    (j < sizeof(name) - 1); ++j) {
            name[j] = tolower((unsigned char)uct_rc_tm_stat_names[i][j]);
        }
        name[j] = '\0';
        ucs_vfs_obj_add_ro_file(iface, uct_rc_tm_vfs_show_counter, NULL, i,
                                "rc_tm/counters/%s", name);
    }
    ucs_vfs_obj_add_ro_file(iface, uct_rc_tm_vfs_show_sw_peak, NULL, 0,
                            "rc_tm/sw_list_peak");
    ucs_vfs_obj_add_ro_file(iface, uct_rc_tm_vfs_show_report, NULL, 0,
                            "rc_tm/report");
}
