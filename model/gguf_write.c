/* gguf_write.c: the GGUF v3 writer (format: doc/formats.md §1).
 *
 * Metadata values are kept already serialised (the bytes that follow the
 * value-type field in the file), so writing is a copy and replacing a key is
 * freeing one buffer.  Tensors are referenced, not copied, and placed the
 * way ggml's reader requires (§1.3): in the order they were added, each at
 * the next multiple of the alignment, each padded with zeros to it. */
#include "model/gguf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/quant.h"
#include "base/safe_write.h"

typedef struct wkv {
    char *key;
    uint32_t type;
    uint8_t *value;  /* serialised payload after the type field */
    size_t len;
} wkv;

typedef struct wtensor {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    const void *data;
    uint64_t nbytes;
} wtensor;

struct gguf_writer {
    uint32_t alignment;
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
};

static bool is_pow2(uint32_t a)
{
    return a && !(a & (a - 1));
}

gguf_writer *gguf_writer_new(uint32_t alignment)
{
    if (alignment == 0)
        alignment = GGUF_DEFAULT_ALIGNMENT;
    if (!is_pow2(alignment))
        return NULL;
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->alignment = alignment;
    /* A reader only learns a non-default alignment from this key (§1.2). */
    if (alignment != GGUF_DEFAULT_ALIGNMENT &&
        gguf_writer_set_u32(w, "general.alignment", alignment) != 0) {
        gguf_writer_free(w);
        return NULL;
    }
    return w;
}

void gguf_writer_free(gguf_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].value);
    }
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

/* ---- metadata --------------------------------------------------------- */

/* Keys must be what the reader accepts: non-empty printable ASCII. */
static bool key_ok(const char *key)
{
    if (!key || !*key || strlen(key) > 65535)
        return false;
    for (const char *p = key; *p; p++)
        if (*p < 0x20 || *p > 0x7e)
            return false;
    return true;
}

/* Store (key, type, value bytes), taking ownership of `value`. */
static int put_kv(gguf_writer *w, const char *key, uint32_t type, uint8_t *value, size_t len)
{
    if (!w || !key_ok(key)) {
        free(value);
        return STRATA_E_ARG;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) != 0)
            continue;
        free(w->kv[i].value);
        w->kv[i].type = type;
        w->kv[i].value = value;
        w->kv[i].len = len;
        return 0;
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *nk = realloc(w->kv, cap * sizeof *nk);
        if (!nk) {
            free(value);
            return STRATA_E_NOMEM;
        }
        w->kv = nk;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(value);
        return STRATA_E_NOMEM;
    }
    w->kv[w->n_kv++] = (wkv){k, type, value, len};
    return 0;
}

static int put_scalar(gguf_writer *w, const char *key, uint32_t type, const void *v)
{
    size_t sz = gguf_vtype_size(type);
    uint8_t *buf = malloc(sz);
    if (!buf)
        return STRATA_E_NOMEM;
    memcpy(buf, v, sz);
    return put_kv(w, key, type, buf, sz);
}

int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v)
{
    /* The writer's alignment and the key must agree (§1.4 item 7). */
    if (w && key && !strcmp(key, "general.alignment")) {
        if (!is_pow2(v))
            return STRATA_E_ARG;
        w->alignment = v;
    }
    return put_scalar(w, key, GGUF_U32, &v);
}

/* general.alignment must be u32 (§1.4 item 7): refuse any other type. */
static bool alignment_key(const char *key)
{
    return key && !strcmp(key, "general.alignment");
}

int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v)
{
    return alignment_key(key) ? STRATA_E_ARG : put_scalar(w, key, GGUF_I32, &v);
}

int gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v)
{
    return alignment_key(key) ? STRATA_E_ARG : put_scalar(w, key, GGUF_U64, &v);
}

int gguf_writer_set_f32(gguf_writer *w, const char *key, float v)
{
    return alignment_key(key) ? STRATA_E_ARG : put_scalar(w, key, GGUF_F32, &v);
}

int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    return alignment_key(key) ? STRATA_E_ARG : put_scalar(w, key, GGUF_BOOL, &b);
}

/* A GGUF string: u64 length, bytes (§1.1). */
static uint8_t *put_str_bytes(uint8_t *dst, const char *s, uint64_t len)
{
    memcpy(dst, &len, 8);
    memcpy(dst + 8, s, len);
    return dst + 8 + len;
}

static int set_str_len(gguf_writer *w, const char *key, const char *s, uint64_t len)
{
    if (!s || alignment_key(key))
        return STRATA_E_ARG;
    uint8_t *buf = malloc(8 + len);
    if (!buf)
        return STRATA_E_NOMEM;
    put_str_bytes(buf, s, len);
    return put_kv(w, key, GGUF_STRING, buf, 8 + len);
}

int gguf_writer_set_str(gguf_writer *w, const char *key, const char *s)
{
    return set_str_len(w, key, s, s ? strlen(s) : 0);
}

int gguf_writer_set_array(gguf_writer *w, const char *key, uint32_t elem_type,
                          const void *data, uint64_t n)
{
    size_t esz = gguf_vtype_size(elem_type);
    /* Strings go through set_str_array; nested arrays are refused (§1.4 item 5). */
    if (esz == 0 || (n && !data) || alignment_key(key) || n > (SIZE_MAX - 12) / esz)
        return STRATA_E_ARG;
    /* Bools are 0 or 1 (§1.2); the reader refuses anything else. */
    for (uint64_t i = 0; elem_type == GGUF_BOOL && i < n; i++)
        if (((const uint8_t *)data)[i] > 1)
            return STRATA_E_ARG;
    uint8_t *buf = malloc(12 + n * esz);
    if (!buf)
        return STRATA_E_NOMEM;
    memcpy(buf, &elem_type, 4);
    memcpy(buf + 4, &n, 8);
    if (n)
        memcpy(buf + 12, data, n * esz);
    return put_kv(w, key, GGUF_ARRAY, buf, 12 + n * esz);
}

/* Strings given as (pointer, length) pairs so copy_kv keeps NUL bytes. */
static int set_str_array_len(gguf_writer *w, const char *key, const gguf_str *items, uint64_t n)
{
    if ((n && !items) || alignment_key(key))
        return STRATA_E_ARG;
    size_t len = 12;
    for (uint64_t i = 0; i < n; i++)
        len += 8 + items[i].len;
    uint8_t *buf = malloc(len);
    if (!buf)
        return STRATA_E_NOMEM;
    uint32_t t = GGUF_STRING;
    memcpy(buf, &t, 4);
    memcpy(buf + 4, &n, 8);
    uint8_t *p = buf + 12;
    for (uint64_t i = 0; i < n; i++)
        p = put_str_bytes(p, items[i].p, items[i].len);
    return put_kv(w, key, GGUF_ARRAY, buf, len);
}

int gguf_writer_set_str_array(gguf_writer *w, const char *key, const char *const *strs,
                              uint64_t n)
{
    if (n && !strs)
        return STRATA_E_ARG;
    gguf_str *items = malloc((n ? n : 1) * sizeof *items);
    if (!items)
        return STRATA_E_NOMEM;
    int rc = 0;
    for (uint64_t i = 0; i < n && !rc; i++) {
        if (!strs[i])
            rc = STRATA_E_ARG;
        else
            items[i] = (gguf_str){strs[i], strlen(strs[i])};
    }
    if (!rc)
        rc = set_str_array_len(w, key, items, n);
    free(items);
    return rc;
}

int gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv)
{
    if (!kv)
        return STRATA_E_ARG;
    switch (kv->type) {
    case GGUF_STRING:
        return set_str_len(w, kv->key, kv->str.p, kv->str.len);
    case GGUF_ARRAY:
        if (kv->arr_type == GGUF_STRING)
            return set_str_array_len(w, kv->key, kv->strs, kv->n);
        return gguf_writer_set_array(w, kv->key, kv->arr_type, kv->data, kv->n);
    case GGUF_U32:
        if (alignment_key(kv->key)) {
            uint32_t a;
            memcpy(&a, kv->data, 4);
            return gguf_writer_set_u32(w, kv->key, a);
        }
        return put_scalar(w, kv->key, kv->type, kv->data);
    default:
        if (kv->type >= GGUF_VTYPE_COUNT || alignment_key(kv->key))
            return STRATA_E_ARG;
        return put_scalar(w, kv->key, kv->type, kv->data);
    }
}

/* ---- tensors ---------------------------------------------------------- */

int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type,
                           uint32_t n_dims, const int64_t *ne,
                           const void *data, uint64_t nbytes, strata_error *err)
{
    if (!w || !name || !*name || strlen(name) > GGUF_MAX_NAME)
        return strata_err(err, STRATA_E_ARG, "gguf writer: tensor name '%s' must be 1..%d bytes",
                          name ? name : "(null)", GGUF_MAX_NAME);
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return strata_err(err, STRATA_E_ARG, "gguf writer: tensor '%s' added twice", name);
    const type_traits *tt = type_traits_get((int)type);
    if (!tt || type > INT32_MAX)
        return strata_err(err, STRATA_E_ARG, "gguf writer: tensor '%s': type = %u (unknown)",
                          name, type);
    if (n_dims > GGUF_MAX_DIMS || (n_dims && !ne))
        return strata_err(err, STRATA_E_ARG, "gguf writer: tensor '%s': n_dims = %u (must be <= %d)",
                          name, n_dims, GGUF_MAX_DIMS);
    wtensor t = {NULL, type, n_dims, {1, 1, 1, 1}, data, nbytes};
    uint64_t need = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] <= 0)
            return strata_err(err, STRATA_E_ARG, "gguf writer: tensor '%s': ne[%u] = %" PRId64
                              " (must be > 0)", name, d, ne[d]);
        t.ne[d] = ne[d];
    }
    if (t.ne[0] % tt->blck)
        return strata_err(err, STRATA_E_ARG, "gguf writer: tensor '%s': ne[0] = %" PRId64
                          " is not a multiple of the %s block (%d)", name, t.ne[0], tt->name,
                          tt->blck);
    uint64_t f[4] = {(uint64_t)(t.ne[0] / tt->blck) * (uint64_t)tt->bytes, (uint64_t)t.ne[1],
                     (uint64_t)t.ne[2], (uint64_t)t.ne[3]};
    for (int i = 0; i < 4; i++) {
        if (need > UINT64_MAX / f[i])
            return strata_err(err, STRATA_E_ARG, "gguf writer: tensor '%s': size overflows", name);
        need *= f[i];
    }
    if (need != nbytes || (nbytes && !data))
        return strata_err(err, STRATA_E_ARG, "gguf writer: tensor '%s': nbytes = %" PRIu64
                          " but %s with this shape needs %" PRIu64, name, nbytes, tt->name, need);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 16;
        wtensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt)
            return strata_err(err, STRATA_E_NOMEM, "gguf writer: out of memory");
        w->t = nt;
        w->cap_t = cap;
    }
    if (!(t.name = strdup(name)))
        return strata_err(err, STRATA_E_NOMEM, "gguf writer: out of memory");
    w->t[w->n_t++] = t;
    return 0;
}

/* ---- writing ---------------------------------------------------------- */

static uint64_t pad_to(uint64_t x, uint64_t a)
{
    return (a - x % a) % a;
}

static bool put(FILE *f, const void *p, size_t n, uint64_t *pos)
{
    *pos += n;
    return n == 0 || fwrite(p, 1, n, f) == n;
}

static bool put_zeros(FILE *f, uint64_t n, uint64_t *pos)
{
    static const uint8_t zeros[256];
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        if (!put(f, zeros, k, pos))
            return false;
        n -= k;
    }
    return true;
}

static bool write_all(const gguf_writer *w, FILE *f)
{
    uint64_t pos = 0;
    uint32_t magic = 0x46554747u, version = 3;
    uint64_t n_t = w->n_t, n_kv = w->n_kv;
    bool ok = put(f, &magic, 4, &pos) && put(f, &version, 4, &pos) &&
              put(f, &n_t, 8, &pos) && put(f, &n_kv, 8, &pos);
    for (size_t i = 0; ok && i < w->n_kv; i++) {
        uint64_t klen = strlen(w->kv[i].key);
        ok = put(f, &klen, 8, &pos) && put(f, w->kv[i].key, klen, &pos) &&
             put(f, &w->kv[i].type, 4, &pos) && put(f, w->kv[i].value, w->kv[i].len, &pos);
    }
    uint64_t offset = 0;
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        uint64_t nlen = strlen(t->name);
        ok = put(f, &nlen, 8, &pos) && put(f, t->name, nlen, &pos) &&
             put(f, &t->n_dims, 4, &pos);
        for (uint32_t d = 0; ok && d < t->n_dims; d++)
            ok = put(f, &t->ne[d], 8, &pos);
        ok = ok && put(f, &t->type, 4, &pos) && put(f, &offset, 8, &pos);
        offset += t->nbytes + pad_to(t->nbytes, w->alignment);
    }
    ok = ok && put_zeros(f, pad_to(pos, w->alignment), &pos);
    for (size_t i = 0; ok && i < w->n_t; i++)
        ok = put(f, w->t[i].data, w->t[i].nbytes, &pos) &&
             put_zeros(f, pad_to(w->t[i].nbytes, w->alignment), &pos);
    return ok;
}

int gguf_writer_write(gguf_writer *w, const char *path, strata_error *err)
{
    if (!w || !path)
        return strata_err(err, STRATA_E_ARG, "gguf writer: no writer or path");
    /* base/safe_write: a unique temporary beside path, fsync, rename; never
     * over a device or anything else that is not a regular file. */
    safe_write sw;
    int rc = safe_write_open(&sw, path, err);
    if (rc)
        return rc;
    errno = 0;
    bool ok = write_all(w, sw.f);
    return safe_write_commit(&sw, ok, errno, err);
}
