/* xxh64.c: XXH64 (see xxh64.h).  Reads are done with memcpy so any
 * alignment works; the result is the little-endian XXH64 value. */
#include "cache/xxh64.h"

#include <string.h>

static const uint64_t P1 = 0x9E3779B185EBCA87ull;
static const uint64_t P2 = 0xC2B2AE3D27D4EB4Full;
static const uint64_t P3 = 0x165667B19E3779F9ull;
static const uint64_t P4 = 0x85EBCA77C2B2AE63ull;
static const uint64_t P5 = 0x27D4EB2F165667C5ull;

static uint64_t rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static uint64_t read64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint32_t read32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t lane_round(uint64_t acc, uint64_t input)
{
    acc += input * P2;
    acc = rotl(acc, 31);
    return acc * P1;
}

static uint64_t merge_round(uint64_t acc, uint64_t lane)
{
    acc ^= lane_round(0, lane);
    return acc * P1 + P4;
}

uint64_t xxh64(const void *data, size_t len, uint64_t seed)
{
    /* No arithmetic on a NULL pointer, even with len 0 (it is undefined). */
    static const unsigned char empty[1];
    const unsigned char *p = len ? data : empty;
    const unsigned char *end = p + len;
    uint64_t h;

    if (len >= 32) {
        /* Four lanes over 32-byte stripes: independent multiplies keep the
         * CPU's pipelines full. */
        uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
        const unsigned char *limit = end - 32;
        do {
            v1 = lane_round(v1, read64(p));
            v2 = lane_round(v2, read64(p + 8));
            v3 = lane_round(v3, read64(p + 16));
            v4 = lane_round(v4, read64(p + 24));
            p += 32;
        } while (p <= limit);
        h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
        h = merge_round(h, v1);
        h = merge_round(h, v2);
        h = merge_round(h, v3);
        h = merge_round(h, v4);
    } else {
        h = seed + P5;
    }
    h += (uint64_t)len;

    while (end - p >= 8) {
        h ^= lane_round(0, read64(p));
        h = rotl(h, 27) * P1 + P4;
        p += 8;
    }
    if (end - p >= 4) {
        h ^= (uint64_t)read32(p) * P1;
        h = rotl(h, 23) * P2 + P3;
        p += 4;
    }
    while (p < end) {
        h ^= (uint64_t)(*p) * P5;
        h = rotl(h, 11) * P1;
        p++;
    }

    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}
