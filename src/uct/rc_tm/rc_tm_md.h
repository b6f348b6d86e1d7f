/*
 * rc_tm memory domain: one per tag-matching device.  Registration goes to the
 * device, so its keys are what the device checks on RDMA read/write.
 */
#ifndef UCT_RC_TM_MD_H_
#define UCT_RC_TM_MD_H_

#include <dev/tm_dev.h>
#include <uct/base/uct_md.h>

#define UCT_RC_TM_NAME           "rc_tm"
#define UCT_RC_TM_CONFIG_PREFIX  "RC_TM_"
/* Marks our packed rkeys, so a foreign rkey buffer is refused at unpack */
#define UCT_RC_TM_RKEY_MAGIC     0x4d54u  /* "TM" */

extern uct_component_t uct_rc_tm_component;

typedef struct uct_rc_tm_md_config {
    uct_md_config_t     super;
    unsigned            list_size;        /* device tag list entries */
    unsigned            max_list_ops;     /* outstanding list operations */
    unsigned            srq_depth;        /* untagged receive buffers */
    size_t              soft_packet_size; /* soft device: eager packet size */
} uct_rc_tm_md_config_t;

typedef struct uct_rc_tm_md {
    uct_md_t            super;
    tm_dev_t            *dev;
    tm_dev_caps_t       caps;
} uct_rc_tm_md_t;

/* What our rkey buffer holds */
typedef struct uct_rc_tm_packed_rkey {
    uint32_t            magic;
    uint32_t            rkey;
} UCS_S_PACKED uct_rc_tm_packed_rkey_t;

ucs_status_t uct_rc_tm_status_from_errno(int err);

#endif
