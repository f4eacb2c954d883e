/* xxh64.h: XXH64, a fast 64-bit non-cryptographic hash (Yann Collet's
 * xxHash, 64-bit variant, as specified in xxhash's doc/xxhash_spec.md).
 *
 * Why this one: the conversation cache checksums every image part, which
 * can be gigabytes; byte-at-a-time FNV-1a runs at about 1 GB/s, XXH64's four
 * independent 64-bit lanes run near memory speed.  It detects accidental
 * corruption (a torn or overwritten part), not tampering. */
#ifndef STRATA_XXH64_H
#define STRATA_XXH64_H

#include <stddef.h>
#include <stdint.h>

uint64_t xxh64(const void *data, size_t len, uint64_t seed);

#endif
