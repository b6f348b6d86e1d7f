/*
 * Tag-matching wire headers as a peer writes them (TMH, RVH, big endian),
 * for tests that send raw bytes to a device.
 */
#ifndef RC_TM_TEST_TM_WIRE_MSG_H_
#define RC_TM_TEST_TM_WIRE_MSG_H_

#include <infiniband/tm_types.h>

#include <endian.h>
#include <stdint.h>
#include <string.h>
#include <string>

namespace rc_tm_test {

inline std::string tm_msg(uint8_t opcode, uint64_t tag, uint32_t app_ctx,
                          const std::string &payload)
{
    struct ibv_tmh tmh;

    memset(&tmh, 0, sizeof(tmh));
    tmh.opcode  = opcode;
    tmh.app_ctx = htobe32(app_ctx);
    tmh.tag     = htobe64(tag);
    return std::string((const char*)&tmh, sizeof(tmh)) + payload;
}

inline std::string rvh(uint64_t va, uint32_t rkey, uint32_t len)
{
    struct ibv_rvh h;

    h.va   = htobe64(va);
    h.rkey = htobe32(rkey);
    h.len  = htobe32(len);
    return std::string((const char*)&h, sizeof(h));
}

} // namespace rc_tm_test

#endif
