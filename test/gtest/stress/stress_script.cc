/*
 * The traffic scripts: what each flow sends and what its receiver posts,
 * drawn from the seed so that both processes know them, and the payload
 * patterns that tell a message's bytes.
 */
#include "stress_int.h"

namespace rc_tm_test {
namespace stress {

uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x  = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x  = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t script_hash(uint64_t seed, uint64_t salt, unsigned flow, uint64_t i)
{
    return mix(mix(mix(seed ^ salt) + flow) + i);
}

double now_sec()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

uint64_t make_tag(unsigned flow, unsigned value)
{
    return TAG_MARKER | ((uint64_t)flow << FLOW_SHIFT) | value;
}


message script_message(uint64_t seed, unsigned flow, uint64_t seq)
{
    uint64_t h = script_hash(seed, MSG_SALT, flow, seq);
    unsigned r = h % 100, cls = 0, acc = 0;
    message m;

    for (cls = 0; cls < 3; ++cls) {
        acc += CLASSES[cls].weight;
        if (r < acc) {
            break;
        }
    }
    m.value = (cls << 2) | ((h >> 8) & 3);
    m.size  = CLASSES[cls].min +
              (h >> 16) % (CLASSES[cls].max - CLASSES[cls].min + 1);
    m.key   = mix(h);
    return m;
}


recv_plan script_recv(uint64_t seed, unsigned flow, uint64_t i,
                      unsigned cancel_permille)
{
    uint64_t h = script_hash(seed, RECV_SALT, flow, i);
    unsigned r = h % 100, acc = 0;
    recv_plan p;

    p.ignore = ANY_VALUE;
    for (const ignore_choice &c : IGNORES) {
        acc += c.weight;
        if (r < acc) {
            p.ignore = c.ignore;
            break;
        }
    }
    p.cancel       = ((h >> 8) % 1000) < cancel_permille;
    p.cancel_delay = (h >> 20) % 256;
    p.small        = ((h >> 28) % 100) < SMALL_PERCENT;
    return p;
}

size_t recv_buffer_size(unsigned value, unsigned ignore, bool small)
{
    size_t size = 0;

    for (unsigned cls = 0; cls < 4; ++cls) {
        if ((((value >> 2) ^ cls) & ~(ignore >> 2) & 3) == 0) {
            size = std::max(size, CLASSES[cls].recv_buf);
        }
    }
    if (small && (ignore == 0) && ((value >> 2) == 0)) {
        size = SMALL_RECV;
    }
    return size;
}

uint64_t lcg(uint64_t x)
{
    return x * 6364136223846793005ull + 1442695040888963407ull;
}

void fill_payload(char *p, size_t len, unsigned flow, uint32_t seq,
                  uint64_t key)
{
    uint32_t header[2] = {flow, seq};
    size_t off;

    memcpy(p, header, HEADER);
    for (off = HEADER; off + 8 <= len; off += 8) {
        key = lcg(key);
        memcpy(p + off, &key, 8);
    }
    if (off < len) {
        key = lcg(key);
        memcpy(p + off, &key, len - off);
    }
}

bool payload_intact(const char *p, size_t len, uint64_t key)
{
    size_t off;

    for (off = HEADER; off + 8 <= len; off += 8) {
        key = lcg(key);
        if (memcmp(p + off, &key, 8) != 0) {
            return false;
        }
    }
    if (off < len) {
        key = lcg(key);
        return memcmp(p + off, &key, len - off) == 0;
    }
    return true;
}

bool all_bytes(const char *p, size_t len, uint8_t byte)
{
    for (size_t i = 0; i < len; ++i) {
        if ((uint8_t)p[i] != byte) {
            return false;
        }
    }
    return true;
}

} // namespace stress
} // namespace rc_tm_test
