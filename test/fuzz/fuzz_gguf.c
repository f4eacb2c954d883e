/* fuzz_gguf.c: libFuzzer target for the GGUF reader (`make fuzz`).
 *
 * Every input must either open cleanly or fail with a message; nothing may
 * read outside the buffer (libFuzzer hands over an exact-size heap copy, so
 * AddressSanitizer sees a one-byte overrun).  On success the target touches
 * what a loader would: every key through the typed getters, every string of
 * every string array, the first and last byte of every tensor, and a lookup
 * of every tensor by name. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model/gguf.h"

static volatile uint8_t sink;

static void touch(const void *p, uint64_t n)
{
    if (n) {
        sink ^= ((const uint8_t *)p)[0];
        sink ^= ((const uint8_t *)p)[n - 1];
    }
}

static void touch_kv(const gguf *g, const gguf_kv *kv)
{
    strata_error err;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f;
    bool b;
    gguf_str s;
    uint32_t et;
    uint64_t n;
    const void *data;
    const gguf_str *strs;
    /* Each getter either succeeds or reports the type mismatch. */
    gguf_get_u32(g, kv->key, &u32, &err);
    gguf_get_i32(g, kv->key, &i32, &err);
    gguf_get_u64(g, kv->key, &u64, &err);
    gguf_get_f32(g, kv->key, &f, &err);
    gguf_get_bool(g, kv->key, &b, &err);
    if (gguf_get_str(g, kv->key, &s, &err) == 0)
        touch(s.p, s.len);
    if (gguf_get_array(g, kv->key, &et, &n, &data, &err) == 0 && et != GGUF_STRING)
        touch(data, n * gguf_vtype_size(et));
    if (gguf_get_str_array(g, kv->key, &strs, &n, &err) == 0)
        for (uint64_t i = 0; i < n; i++)
            touch(strs[i].p, strs[i].len);
    if (gguf_find_kv(g, kv->key) != kv)
        __builtin_trap(); /* keys are unique: lookup must find this record */
}

int LLVMFuzzerTestOneInput(const uint8_t *buf, size_t len)
{
    gguf *g = NULL;
    strata_error err;
    err.msg[0] = '\0';
    if (gguf_open_mem(buf, len, "fuzz.gguf", &g, &err) != 0) {
        if (g || err.msg[0] == '\0')
            __builtin_trap(); /* failure must leave no handle and say why */
        return 0;
    }
    for (uint64_t i = 0; i < gguf_n_kv(g); i++)
        touch_kv(g, gguf_kv_at(g, i));
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        touch(t->data, t->nbytes);
        if (gguf_find_tensor(g, t->name) != t)
            __builtin_trap();
    }
    gguf_close(g);
    return 0;
}
