/*
 * rc_tm's settings, read from the module's own configuration tables (what
 * `ucx_info -c` prints from), one per line for contrib/guide-settings.py:
 *
 *   own<TAB>UCX_RC_TM_NAME<TAB>default<TAB>description   rc_tm's
 *   ucx<TAB>UCX_RC_TM_NAME<TAB>default<TAB>description   UCX's, under rc_tm's
 *                                                        prefix
 *
 * UCX's are the entries of UCX's own tables that rc_tm's embed (the md's
 * and the interface's base tables, the registration cache's) and those
 * stored in UCX's own structures (the buffer pools' settings, which
 * UCT_IFACE_MPOOL_CONFIG_FIELDS adds): they differ between UCX versions.
 */
#include <uct/rc_tm/rc_tm_iface.h>

#include <ucs/config/parser.h>
#include <stdio.h>
#include <string.h>

/* Whether offset lies in one of the interface's pool settings (UCX's) */
static int rc_tm_settings_in_mpool(size_t offset)
{
    static const size_t pools[] = {
        ucs_offsetof(uct_rc_tm_iface_config_t, rx_mpool),
        ucs_offsetof(uct_rc_tm_iface_config_t, tx_mpool)
    };
    unsigned i;

    for (i = 0; i < sizeof(pools) / sizeof(pools[0]); ++i) {
        if ((offset >= pools[i]) &&
            (offset < pools[i] + sizeof(uct_iface_mpool_config_t))) {
            return 1;
        }
    }
    return 0;
}

/* The description on one line, without tabs */
static void rc_tm_settings_print_doc(const char *doc)
{
    int space = 0;

    for (; (doc != NULL) && (*doc != '\0'); ++doc) {
        if ((*doc == '\n') || (*doc == '\t') || (*doc == ' ')) {
            space = 1;
            continue;
        }
        if (space) {
            putchar(' ');
            space = 0;
        }
        putchar(*doc);
    }
}

static void rc_tm_settings_print(const ucs_config_field_t *table,
                                 const char *prefix, int ucx, int is_iface)
{
    const ucs_config_field_t *field;
    char sub_prefix[128];

    for (field = table; field->name != NULL; ++field) {
        if (field->offset == UCS_CONFIG_DEPRECATED_FIELD_OFFSET) {
            continue;
        }
        if (field->parser.read == ucs_config_sscanf_table) {
            snprintf(sub_prefix, sizeof(sub_prefix), "%s%s", prefix,
                     field->name);
            rc_tm_settings_print(field->parser.arg, sub_prefix, 1, 0);
            continue;
        }
        printf("%s\tUCX_%s%s\t%s\t",
               (ucx || (is_iface && rc_tm_settings_in_mpool(field->offset))) ?
               "ucx" : "own", prefix, field->name,
               (field->dfl_value != NULL) ? field->dfl_value : "");
        rc_tm_settings_print_doc(field->doc);
        putchar('\n');
    }
}

int main(void)
{
    rc_tm_settings_print(uct_rc_tm_component.md_config.table,
                         uct_rc_tm_component.md_config.prefix, 0, 0);
    rc_tm_settings_print(uct_rc_tm_tl.config.table,
                         uct_rc_tm_tl.config.prefix, 0, 1);
    return 0;
}
