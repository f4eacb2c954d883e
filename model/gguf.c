/* gguf.c: the GGUF reader (format: doc/formats.md §1; the writer is in
 * gguf_write.c).
 *
 * The file is parsed in one pass through a bounds-checked cursor, then the
 * tensor records are checked against each other and against the file size.
 * The rules, in the order they are applied, are listed in doc/gguf.md; each
 * check below cites the doc/formats.md §1.4 checklist item it implements.
 *
 * Nothing is preallocated from a count read from the file before that count
 * has been bounded by the bytes left (a hostile header says 2^63). */
#include "model/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/gguf_maps.h"
#include "model/quant.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "strata reads GGUF fields with memcpy and assumes a little-endian host"
#endif

#define GGUF_MAGIC 0x46554747u   /* "GGUF" read as a LE u32 (§1.1) */
#define MIN_KV_BYTES 14u         /* key len (8) + 1 key byte + type (4) + 1 byte value */
#define MIN_TENSOR_BYTES 24u     /* name len (8) + n_dims (4) + type (4) + offset (8) */
#define MAX_KEY_LEN 65535u       /* spec limit for keys (§1.2) */

/* A name and its record's index. */
typedef struct name_ref {
    const char *name;
    uint64_t i;
} name_ref;

/* Names -> record index: the names sorted, searched by bisection; adjacent
 * equal names after sorting are the duplicates.  Sorting rather than
 * hashing: a hostile file cannot make every name collide, so open stays
 * O(n log n) in the record count (up to file size / 14). */
typedef struct name_index {
    char **names;     /* owned NUL-terminated copies, by record index */
    name_ref *sorted; /* filled by index_sort */
} name_index;

struct gguf {
    char *path;             /* file name used in every message */
    const uint8_t *base;    /* the whole file */
    uint64_t size;
    void *map;              /* non-NULL when gguf_open mmapped the file */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    uint64_t n_kv;
    gguf_kv *kv;
    name_index kv_names;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    name_index tensor_names;
};

/* ---- value types ---------------------------------------------------- */

static const char *const vtype_names[GGUF_VTYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array",
    "u64", "i64", "f64",
};
static const size_t vtype_sizes[GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *gguf_vtype_name(uint32_t t)
{
    return t < GGUF_VTYPE_COUNT ? vtype_names[t] : "?";
}

size_t gguf_vtype_size(uint32_t t)
{
    return t < GGUF_VTYPE_COUNT ? vtype_sizes[t] : 0;
}

/* ---- name index ------------------------------------------------------ */

static int index_init(name_index *ix, uint64_t n)
{
    ix->names = calloc(n ? n : 1, sizeof *ix->names);
    ix->sorted = calloc(n ? n : 1, sizeof *ix->sorted);
    return ix->names && ix->sorted ? 0 : STRATA_E_NOMEM;
}

static void index_free(name_index *ix, uint64_t n)
{
    if (ix->names)
        for (uint64_t i = 0; i < n; i++)
            free(ix->names[i]);
    free(ix->names);
    free(ix->sorted);
}

static int by_name(const void *a, const void *b)
{
    const name_ref *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c || x->i == y->i)
        return c;
    return x->i < y->i ? -1 : 1;
}

static int name_only(const void *a, const void *b)
{
    return strcmp(((const name_ref *)a)->name, ((const name_ref *)b)->name);
}

/* Sort the n names; if two are equal, return 1 with their indices (the
 * lowest such pair in sorted order) in *first, *second. */
static int index_sort(name_index *ix, uint64_t n, uint64_t *first, uint64_t *second)
{
    for (uint64_t i = 0; i < n; i++)
        ix->sorted[i] = (name_ref){ix->names[i], i};
    qsort(ix->sorted, n, sizeof *ix->sorted, by_name);
    for (uint64_t k = 1; k < n; k++) {
        if (!strcmp(ix->sorted[k - 1].name, ix->sorted[k].name)) {
            *first = ix->sorted[k - 1].i;
            *second = ix->sorted[k].i;
            return 1;
        }
    }
    return 0;
}

/* Index of `name` among n sorted names, or -1. */
static int64_t index_find(const name_index *ix, uint64_t n, const char *name)
{
    name_ref key = {name, 0};
    const name_ref *r = n ? bsearch(&key, ix->sorted, n, sizeof key, name_only) : NULL;
    return r ? (int64_t)r->i : -1;
}

/* ---- bounds-checked cursor (§1.4 item 1) ------------------------------ */

typedef struct cursor {
    const uint8_t *p;
    uint64_t size;
    uint64_t pos;
    const char *file;
    strata_error *err;
} cursor;

static uint64_t cur_left(const cursor *c)
{
    return c->size - c->pos;
}

static int cur_need(cursor *c, uint64_t n, const char *ctx, const char *field)
{
    if (n <= cur_left(c))
        return 0;
    return strata_err(c->err, STRATA_E_FORMAT,
                      "%s: %s%s%s at offset %" PRIu64 " needs %" PRIu64
                      " bytes, only %" PRIu64 " left (truncated file)",
                      c->file, ctx, *ctx ? ": " : "", field, c->pos, n, cur_left(c));
}

static int cur_u32(cursor *c, uint32_t *v, const char *ctx, const char *field)
{
    int rc = cur_need(c, 4, ctx, field);
    if (rc)
        return rc;
    memcpy(v, c->p + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int cur_u64(cursor *c, uint64_t *v, const char *ctx, const char *field)
{
    int rc = cur_need(c, 8, ctx, field);
    if (rc)
        return rc;
    memcpy(v, c->p + c->pos, 8);
    c->pos += 8;
    return 0;
}

/* A string: u64 length, then that many bytes (§1.1); length <= bytes left
 * (§1.4 item 3) and <= max. */
static int cur_str(cursor *c, gguf_str *s, uint64_t max, const char *ctx, const char *field)
{
    uint64_t len;
    int rc = cur_u64(c, &len, ctx, field);
    if (rc)
        return rc;
    if (len > cur_left(c))
        return strata_err(c->err, STRATA_E_FORMAT,
                          "%s: %s%s%s length = %" PRIu64 " at offset %" PRIu64
                          " runs past the end of the file (%" PRIu64 " bytes left)",
                          c->file, ctx, *ctx ? ": " : "", field, len, c->pos - 8, cur_left(c));
    if (len > max)
        return strata_err(c->err, STRATA_E_FORMAT,
                          "%s: %s%s%s length = %" PRIu64 " (must be <= %" PRIu64 ")",
                          c->file, ctx, *ctx ? ": " : "", field, len, max);
    s->p = (const char *)(c->p + c->pos);
    s->len = len;
    c->pos += len;
    return 0;
}

/* ---- metadata --------------------------------------------------------- */

/* BOOL payloads are 0 or 1 only (§1.2: the spec's rule, stricter than ggml). */
static int check_bools(cursor *c, const uint8_t *p, uint64_t n, const char *ctx)
{
    for (uint64_t i = 0; i < n; i++)
        if (p[i] > 1)
            return strata_err(c->err, STRATA_E_FORMAT,
                              "%s: %s: bool value[%" PRIu64 "] = %u (must be 0 or 1)",
                              c->file, ctx, i, p[i]);
    return 0;
}

static int read_array(cursor *c, gguf_kv *kv, const char *ctx)
{
    int rc = cur_u32(c, &kv->arr_type, ctx, "array element type");
    if (rc)
        return rc;
    /* §1.4 item 5: element type in [0,12] and not ARRAY (nested arrays:
     * ggml rejects them and no model uses them). */
    if (kv->arr_type >= GGUF_VTYPE_COUNT || kv->arr_type == GGUF_ARRAY)
        return strata_err(c->err, STRATA_E_FORMAT,
                          "%s: %s: array element type = %u (%s)", c->file, ctx, kv->arr_type,
                          kv->arr_type == GGUF_ARRAY ? "nested arrays are not supported"
                                                     : "unknown value type, must be 0..12");
    if ((rc = cur_u64(c, &kv->n, ctx, "array length")))
        return rc;
    /* §1.4 item 4: count <= bytes left / element size, without overflow; a
     * string element is at least its 8-byte length. */
    uint64_t esz = kv->arr_type == GGUF_STRING ? 8 : gguf_vtype_size(kv->arr_type);
    if (kv->n > cur_left(c) / esz)
        return strata_err(c->err, STRATA_E_FORMAT,
                          "%s: %s: array length = %" PRIu64 " of %s cannot fit in the %" PRIu64
                          " bytes left", c->file, ctx, kv->n, gguf_vtype_name(kv->arr_type),
                          cur_left(c));
    kv->data = c->p + c->pos;
    if (kv->arr_type != GGUF_STRING) {
        c->pos += kv->n * esz;
        return kv->arr_type == GGUF_BOOL ? check_bools(c, kv->data, kv->n, ctx) : 0;
    }
    gguf_str *strs = calloc(kv->n ? kv->n : 1, sizeof *strs);
    if (!strs)
        return strata_err(c->err, STRATA_E_NOMEM, "%s: %s: out of memory for %" PRIu64
                          " strings", c->file, ctx, kv->n);
    kv->strs = strs;
    for (uint64_t i = 0; i < kv->n; i++)
        if ((rc = cur_str(c, &strs[i], UINT64_MAX, ctx, "array string")))
            return rc;
    return 0;
}

static int read_value(cursor *c, gguf_kv *kv, const char *ctx)
{
    /* §1.4 item 5: value type in [0,12]. */
    if (kv->type >= GGUF_VTYPE_COUNT)
        return strata_err(c->err, STRATA_E_FORMAT,
                          "%s: %s: value type = %u (unknown value type, must be 0..12)",
                          c->file, ctx, kv->type);
    kv->n = 1;
    if (kv->type == GGUF_ARRAY)
        return read_array(c, kv, ctx);
    if (kv->type == GGUF_STRING) {
        int rc = cur_str(c, &kv->str, UINT64_MAX, ctx, "string value");
        kv->data = (const uint8_t *)kv->str.p;
        return rc;
    }
    size_t sz = gguf_vtype_size(kv->type);
    int rc = cur_need(c, sz, ctx, "value");
    if (rc)
        return rc;
    kv->data = c->p + c->pos;
    c->pos += sz;
    return kv->type == GGUF_BOOL ? check_bools(c, kv->data, 1, ctx) : 0;
}

/* Keys: non-empty printable ASCII of at most 65535 bytes (§1.2). */
static int check_key(cursor *c, const gguf_str *k, uint64_t i)
{
    if (k->len == 0)
        return strata_err(c->err, STRATA_E_FORMAT, "%s: kv[%" PRIu64 "]: key length = 0 "
                          "(keys must not be empty)", c->file, i);
    for (uint64_t j = 0; j < k->len; j++) {
        uint8_t ch = (uint8_t)k->p[j];
        if (ch < 0x20 || ch > 0x7e)
            return strata_err(c->err, STRATA_E_FORMAT,
                              "%s: kv[%" PRIu64 "]: key byte %" PRIu64 " = 0x%02x "
                              "(keys must be printable ASCII)", c->file, i, j, ch);
    }
    return 0;
}

static int read_kvs(gguf *g, cursor *c)
{
    int rc = index_init(&g->kv_names, g->n_kv);
    g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
    if (rc || !g->kv)
        return strata_err(c->err, STRATA_E_NOMEM, "%s: out of memory for %" PRIu64 " keys",
                          c->file, g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        char ctx[96];
        snprintf(ctx, sizeof ctx, "kv[%" PRIu64 "]", i);
        gguf_str k;
        if ((rc = cur_str(c, &k, MAX_KEY_LEN, ctx, "key")) || (rc = check_key(c, &k, i)))
            return rc;
        char *key = strndup(k.p, k.len);
        if (!key)
            return strata_err(c->err, STRATA_E_NOMEM, "%s: out of memory", c->file);
        g->kv_names.names[i] = key;
        g->kv[i].key = key;
        snprintf(ctx, sizeof ctx, "key '%.64s'%s", key, k.len > 64 ? "..." : "");
        if ((rc = cur_u32(c, &g->kv[i].type, ctx, "value type")) ||
            (rc = read_value(c, &g->kv[i], ctx)))
            return rc;
    }
    /* §1.4 item 6: a duplicate key makes lookups ambiguous. */
    uint64_t a, b;
    if (index_sort(&g->kv_names, g->n_kv, &a, &b))
        return strata_err(c->err, STRATA_E_FORMAT,
                          "%s: key '%.64s': duplicate key (kv[%" PRIu64 "] and kv[%" PRIu64 "])",
                          c->file, g->kv[a].key, a, b);
    return 0;
}

/* §1.4 item 7: general.alignment, if present, is a UINT32 power of two. */
static int read_alignment(gguf *g, strata_error *err)
{
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find_kv(g, "general.alignment");
    if (!kv)
        return 0;
    if (kv->type != GGUF_U32)
        return strata_err(err, STRATA_E_FORMAT,
                          "%s: key 'general.alignment': type = %s (must be u32)", g->path,
                          gguf_vtype_name(kv->type));
    uint32_t a;
    memcpy(&a, kv->data, 4);
    if (a == 0 || (a & (a - 1)))
        return strata_err(err, STRATA_E_FORMAT,
                          "%s: key 'general.alignment' = %u (must be a non-zero power of two)",
                          g->path, a);
    g->alignment = a;
    return 0;
}

/* ---- tensor records --------------------------------------------------- */

/* Shape checks (§1.4 items 9, 10): n_dims <= 4, every ne in (0, 2^63), and
 * the element count fits in an i64. */
static int read_shape(cursor *c, gguf_tensor *t, const char *ctx)
{
    int rc = cur_u32(c, &t->n_dims, ctx, "n_dims");
    if (rc)
        return rc;
    if (t->n_dims > GGUF_MAX_DIMS)
        return strata_err(c->err, STRATA_E_FORMAT, "%s: %s: n_dims = %u (must be <= %d)",
                          c->file, ctx, t->n_dims, GGUF_MAX_DIMS);
    int64_t count = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        char field[8];
        snprintf(field, sizeof field, "ne[%u]", d);
        if (d < t->n_dims && (rc = cur_u64(c, &ne, ctx, field)))
            return rc;
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return strata_err(c->err, STRATA_E_FORMAT, "%s: %s: %s = %" PRIu64 "%s (must be > 0)",
                              c->file, ctx, field, ne, ne ? " (negative as i64)" : "");
        if ((uint64_t)count > (uint64_t)INT64_MAX / ne)
            return strata_err(c->err, STRATA_E_FORMAT,
                              "%s: %s: %s = %" PRIu64 " makes the element count overflow i64",
                              c->file, ctx, field, ne);
        count *= (int64_t)ne;
        t->ne[d] = (int64_t)ne;
    }
    return 0;
}

/* Type and byte size (§1.4 items 11, 12): a known id, ne[0] a multiple of
 * the block, size computed with checked multiplication. */
static int tensor_size(cursor *c, gguf_tensor *t, const char *ctx)
{
    const type_traits *tt = type_traits_get((int)t->type);
    if (!tt || t->type > INT32_MAX)
        return strata_err(c->err, STRATA_E_FORMAT,
                          "%s: %s: type = %u (unknown or retired ggml type id)",
                          c->file, ctx, t->type);
    if (t->ne[0] % tt->blck)
        return strata_err(c->err, STRATA_E_FORMAT,
                          "%s: %s: ne[0] = %" PRId64 " is not a multiple of the %s block (%d)",
                          c->file, ctx, t->ne[0], tt->name, tt->blck);
    uint64_t bytes = (uint64_t)(t->ne[0] / tt->blck);
    uint64_t factors[4] = {(uint64_t)tt->bytes, (uint64_t)t->ne[1], (uint64_t)t->ne[2],
                           (uint64_t)t->ne[3]};
    for (int i = 0; i < 4; i++) {
        if (bytes > UINT64_MAX / factors[i])
            return strata_err(c->err, STRATA_E_FORMAT,
                              "%s: %s: byte size overflows (%s, ne = %" PRId64 " x %" PRId64
                              " x %" PRId64 " x %" PRId64 ")", c->file, ctx, tt->name,
                              t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
        bytes *= factors[i];
    }
    t->nbytes = bytes;
    return 0;
}

static int read_tensor(gguf *g, cursor *c, uint64_t i)
{
    gguf_tensor *t = &g->tensors[i];
    char ctx[96];
    snprintf(ctx, sizeof ctx, "tensor[%" PRIu64 "]", i);
    gguf_str s;
    int rc = cur_str(c, &s, GGUF_MAX_NAME, ctx, "name");
    if (rc)
        return rc;
    /* Names are looked up as C strings: empty or NUL-containing names
     * could not be found (ggml's limit is 63 bytes, §1.3). */
    if (s.len == 0 || memchr(s.p, 0, s.len))
        return strata_err(c->err, STRATA_E_FORMAT, "%s: %s: name %s", c->file, ctx,
                          s.len ? "contains a NUL byte" : "length = 0 (must not be empty)");
    char *name = strndup(s.p, s.len);
    if (!name)
        return strata_err(c->err, STRATA_E_NOMEM, "%s: out of memory", c->file);
    g->tensor_names.names[i] = name;
    t->name = name;
    snprintf(ctx, sizeof ctx, "tensor '%s'", name);
    if ((rc = read_shape(c, t, ctx)) || (rc = cur_u32(c, &t->type, ctx, "type")) ||
        (rc = tensor_size(c, t, ctx)) || (rc = cur_u64(c, &t->offset, ctx, "offset")))
        return rc;
    /* §1.4 item 13: offsets are multiples of the alignment. */
    if (t->offset % g->alignment)
        return strata_err(c->err, STRATA_E_FORMAT,
                          "%s: %s: offset = %" PRIu64 " is not a multiple of the alignment %u",
                          c->file, ctx, t->offset, g->alignment);
    return 0;
}

/* ---- data placement (§1.3, §1.4 items 13, 14) -------------------------- */

/* A tensor's place in the data section, for sorting by offset (a pair, so
 * the comparison needs no global context and parsing stays thread-safe). */
typedef struct placed {
    uint64_t offset;
    uint64_t i;
} placed;

static int by_offset(const void *a, const void *b)
{
    const placed *x = a, *y = b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->i < y->i ? -1 : 1;
}

static uint64_t align_up(uint64_t x, uint64_t a)
{
    return x + (a - x % a) % a;
}

/* §2.6: id 42 is also used by forks for a group-128 layout (34 bytes per
 * 128 elements) that nothing in the record distinguishes.  `space` is the
 * room the file gives the tensor; if only the g128 size explains it, refuse
 * rather than decode garbage.  When both sizes explain it (small tensors,
 * where the two differ by less than the padding) it is read as upstream. */
static int check_q2_0(const gguf *g, const gguf_tensor *t, uint64_t space, bool last,
                      strata_error *err)
{
    uint64_t n = t->nbytes / 18 * 64;
    if (n % 128)
        return 0;
    uint64_t g128 = n / 128 * 34;
    bool fits_up = t->nbytes <= space && (last ? space - t->nbytes < g->alignment
                                                : align_up(t->nbytes, g->alignment) == space);
    bool fits_g128 = g128 <= space && (last ? space - g128 < g->alignment
                                            : align_up(g128, g->alignment) == space);
    if (fits_g128 && !fits_up)
        return strata_err(err, STRATA_E_UNSUPPORTED,
                          "%s: tensor '%s': type = 42 (Q2_0) with %" PRIu64 " bytes of room for %"
                          PRIu64 " elements: Q2_0 group-128 (fork) layout not supported "
                          "(upstream Q2_0 needs %" PRIu64 " bytes)",
                          g->path, t->name, space, n, t->nbytes);
    return 0;
}

/* Sorted by offset, every tensor must end before the next one starts and
 * the last before EOF; that is non-overlap and bounds in one sweep. */
static int check_placement(gguf *g, strata_error *err)
{
    if (g->n_tensors == 0)
        return 0;
    placed *order = malloc(g->n_tensors * sizeof *order);
    if (!order)
        return strata_err(err, STRATA_E_NOMEM, "%s: out of memory", g->path);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        order[i] = (placed){g->tensors[i].offset, i};
    qsort(order, g->n_tensors, sizeof *order, by_offset);
    uint64_t file_room = g->size > g->data_offset ? g->size - g->data_offset : 0;
    int rc = 0;
    for (uint64_t k = 0; k < g->n_tensors && !rc; k++) {
        gguf_tensor *t = &g->tensors[order[k].i];
        bool last = k + 1 == g->n_tensors;
        uint64_t end = last ? file_room : order[k + 1].offset;
        uint64_t space = t->offset <= end ? end - t->offset : 0;
        if (t->type == GGML_TYPE_Q2_0 && (rc = check_q2_0(g, t, space, last, err)))
            break;
        if (t->nbytes <= space)
            continue;
        if (last)
            rc = strata_err(err, STRATA_E_FORMAT,
                            "%s: tensor '%s': data at offset %" PRIu64 " + %" PRIu64
                            " bytes ends past the end of the file (data section starts at %"
                            PRIu64 ", file size %" PRIu64 ")", g->path, t->name, t->offset,
                            t->nbytes, g->data_offset, g->size);
        else
            rc = strata_err(err, STRATA_E_FORMAT,
                            "%s: tensor '%s': data at offset %" PRIu64 " + %" PRIu64
                            " bytes overlaps tensor '%s' at offset %" PRIu64, g->path, t->name,
                            t->offset, t->nbytes, g->tensors[order[k + 1].i].name, end);
    }
    free(order);
    if (rc)
        return rc;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        g->tensors[i].data = g->base + g->data_offset + g->tensors[i].offset;
    return 0;
}

/* ---- header and the whole parse -------------------------------------- */

static int read_header(gguf *g, cursor *c)
{
    uint32_t magic;
    int rc = cur_u32(c, &magic, "", "magic");
    if (rc)
        return rc;
    if (magic != GGUF_MAGIC)
        return strata_err(c->err, STRATA_E_FORMAT,
                          "%s: magic = 0x%08x (expected 0x%08x, \"GGUF\"): not a GGUF file",
                          c->file, magic, GGUF_MAGIC);
    if ((rc = cur_u32(c, &g->version, "", "version")))
        return rc;
    /* §1.4 item 8: a byte-swapped (big-endian) file reads as v << 24. */
    if (g->version != 0 && (g->version & 0xFFFF) == 0)
        return strata_err(c->err, STRATA_E_UNSUPPORTED,
                          "%s: version = 0x%08x (a byte-swapped, big-endian GGUF; only "
                          "little-endian files are supported)", c->file, g->version);
    if (g->version != 2 && g->version != 3)
        return strata_err(c->err, STRATA_E_UNSUPPORTED,
                          "%s: version = %u (supported: 2 and 3%s)", c->file, g->version,
                          g->version == 1 ? "; version 1 is obsolete" : "");
    if ((rc = cur_u64(c, &g->n_tensors, "", "tensor_count")) ||
        (rc = cur_u64(c, &g->n_kv, "", "kv_count")))
        return rc;
    /* §1.4 item 2: counts bounded by the bytes left and the minimum record
     * sizes, before anything is allocated from them. */
    uint64_t left = cur_left(c);
    if (g->n_kv > left / MIN_KV_BYTES)
        return strata_err(c->err, STRATA_E_FORMAT,
                          "%s: kv_count = %" PRIu64 " cannot fit in the %" PRIu64
                          " bytes after the header", c->file, g->n_kv, left);
    left -= g->n_kv * MIN_KV_BYTES;
    if (g->n_tensors > left / MIN_TENSOR_BYTES)
        return strata_err(c->err, STRATA_E_FORMAT,
                          "%s: tensor_count = %" PRIu64 " cannot fit in the %" PRIu64
                          " bytes after the header and metadata", c->file, g->n_tensors, left);
    return 0;
}

static int parse(gguf *g, strata_error *err)
{
    cursor c = {g->base, g->size, 0, g->path, err};
    int rc;
    if ((rc = read_header(g, &c)) || (rc = read_kvs(g, &c)) || (rc = read_alignment(g, err)))
        return rc;
    if ((rc = index_init(&g->tensor_names, g->n_tensors)))
        return strata_err(err, rc, "%s: out of memory", g->path);
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    if (!g->tensors)
        return strata_err(err, STRATA_E_NOMEM, "%s: out of memory", g->path);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if ((rc = read_tensor(g, &c, i)))
            return rc;
    uint64_t a, b; /* §1.4 item 6: the loader finds tensors by name */
    if (index_sort(&g->tensor_names, g->n_tensors, &a, &b))
        return strata_err(err, STRATA_E_FORMAT,
                          "%s: tensor '%s': duplicate tensor name (tensor[%" PRIu64
                          "] and tensor[%" PRIu64 "])", g->path, g->tensors[a].name, a, b);
    g->data_offset = align_up(c.pos, g->alignment);
    return check_placement(g, err);
}

static gguf *gguf_alloc(const char *name)
{
    gguf *g = calloc(1, sizeof *g);
    if (g && !(g->path = strdup(name ? name : "<memory>"))) {
        free(g);
        g = NULL;
    }
    return g;
}

int gguf_open_mem(const void *buf, size_t len, const char *name, gguf **out,
                  strata_error *err)
{
    *out = NULL;
    gguf *g = gguf_alloc(name);
    if (!g)
        return strata_err(err, STRATA_E_NOMEM, "%s: out of memory", name ? name : "<memory>");
    g->base = buf;
    g->size = len;
    int rc = parse(g, err);
    if (rc) {
        gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

static const char *file_kind(mode_t m)
{
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

int gguf_open(const char *path, gguf **out, strata_error *err)
{
    *out = NULL;
    /* O_NONBLOCK: a FIFO (or a tty) given as the model would block open()
     * until a writer appears; opened this way it is refused below instead.
     * On a regular file the flag changes nothing (mmap only). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return strata_err(err, errno == ENOENT ? STRATA_E_NOTFOUND : STRATA_E_IO,
                          "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return strata_err(err, STRATA_E_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return strata_err(err, STRATA_E_IO, "%s: is %s, not a regular file (a model must be "
                          "a GGUF file on disk)", path, file_kind(st.st_mode));
    }
    if (st.st_size == 0) {
        close(fd);
        return strata_err(err, STRATA_E_FORMAT, "%s: file size = 0 (empty file)", path);
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED)
        return strata_err(err, STRATA_E_IO, "%s: mmap of %lld bytes failed: %s", path,
                          (long long)st.st_size, strerror(e));
    gguf *g = gguf_alloc(path);
    if (!g) {
        munmap(map, (size_t)st.st_size);
        return strata_err(err, STRATA_E_NOMEM, "%s: out of memory", path);
    }
    g->map = map;
    g->base = map;
    g->size = (uint64_t)st.st_size;
    gguf_maps_add(map, (size_t)st.st_size, g->path);
    int rc = parse(g, err);
    if (rc) {
        gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

void gguf_close(gguf *g)
{
    if (!g)
        return;
    for (uint64_t i = 0; g->kv && i < g->n_kv; i++)
        free((void *)g->kv[i].strs);
    index_free(&g->kv_names, g->kv ? g->n_kv : 0);
    index_free(&g->tensor_names, g->tensors ? g->n_tensors : 0);
    free(g->kv);
    free(g->tensors);
    if (g->map) {
        gguf_maps_remove(g->map);
        munmap(g->map, (size_t)g->size);
    }
    free(g->path);
    free(g);
}

/* ---- accessors -------------------------------------------------------- */

const char *gguf_path(const gguf *g) { return g->path; }
uint32_t gguf_version(const gguf *g) { return g->version; }
uint32_t gguf_alignment(const gguf *g) { return g->alignment; }
uint64_t gguf_data_offset(const gguf *g) { return g->data_offset; }
uint64_t gguf_file_size(const gguf *g) { return g->size; }
uint64_t gguf_n_kv(const gguf *g) { return g->n_kv; }
uint64_t gguf_n_tensors(const gguf *g) { return g->n_tensors; }

const gguf_kv *gguf_kv_at(const gguf *g, uint64_t i)
{
    return i < g->n_kv ? &g->kv[i] : NULL;
}

const gguf_tensor *gguf_tensor_at(const gguf *g, uint64_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const gguf_kv *gguf_find_kv(const gguf *g, const char *key)
{
    int64_t i = index_find(&g->kv_names, g->n_kv, key);
    return i >= 0 ? &g->kv[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf *g, const char *name)
{
    int64_t i = index_find(&g->tensor_names, g->n_tensors, name);
    return i >= 0 ? &g->tensors[i] : NULL;
}

/* ---- typed getters ---------------------------------------------------- */

static const gguf_kv *get_kv(const gguf *g, const char *key, strata_error *err, int *rc)
{
    const gguf_kv *kv = gguf_find_kv(g, key);
    *rc = kv ? 0 : strata_err(err, STRATA_E_NOTFOUND, "%s: key '%s' not found", g->path, key);
    return kv;
}

static int wrong_type(const gguf *g, const gguf_kv *kv, const char *want, strata_error *err)
{
    return strata_err(err, STRATA_E_TYPE, "%s: key '%s': type = %s%s%s (expected %s)",
                      g->path, kv->key, gguf_vtype_name(kv->type),
                      kv->type == GGUF_ARRAY ? " of " : "",
                      kv->type == GGUF_ARRAY ? gguf_vtype_name(kv->arr_type) : "", want);
}

/* An integer value of any width as sign + two's-complement bits. */
static bool kv_int(const gguf_kv *kv, bool *neg, uint64_t *u)
{
    uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32; int64_t i64;
    int64_t s = 0;
    *neg = false;
    switch (kv->type) {
    case GGUF_U8: memcpy(&u8, kv->data, 1); *u = u8; return true;
    case GGUF_U16: memcpy(&u16, kv->data, 2); *u = u16; return true;
    case GGUF_U32: memcpy(&u32, kv->data, 4); *u = u32; return true;
    case GGUF_U64: memcpy(u, kv->data, 8); return true;
    case GGUF_I8: memcpy(&i8, kv->data, 1); s = i8; break;
    case GGUF_I16: memcpy(&i16, kv->data, 2); s = i16; break;
    case GGUF_I32: memcpy(&i32, kv->data, 4); s = i32; break;
    case GGUF_I64: memcpy(&i64, kv->data, 8); s = i64; break;
    default: return false;
    }
    *neg = s < 0;
    *u = (uint64_t)s;
    return true;
}

/* Fetch an integer key and check it lies in [lo, hi]. */
static int get_int(const gguf *g, const char *key, int64_t lo, uint64_t hi, const char *want,
                   bool *neg, uint64_t *u, strata_error *err)
{
    int rc;
    const gguf_kv *kv = get_kv(g, key, err, &rc);
    if (!kv)
        return rc;
    if (!kv_int(kv, neg, u))
        return wrong_type(g, kv, want, err);
    bool ok = *neg ? (lo < 0 && (int64_t)*u >= lo) : *u <= hi;
    if (!ok) {
        if (*neg)
            return strata_err(err, STRATA_E_TYPE, "%s: key '%s' = %" PRId64 " (out of range for %s)",
                              g->path, key, (int64_t)*u, want);
        return strata_err(err, STRATA_E_TYPE, "%s: key '%s' = %" PRIu64 " (out of range for %s)",
                          g->path, key, *u, want);
    }
    return 0;
}

int gguf_get_u32(const gguf *g, const char *key, uint32_t *v, strata_error *err)
{
    bool neg;
    uint64_t u;
    int rc = get_int(g, key, 0, UINT32_MAX, "u32", &neg, &u, err);
    if (!rc)
        *v = (uint32_t)u;
    return rc;
}

int gguf_get_i32(const gguf *g, const char *key, int32_t *v, strata_error *err)
{
    bool neg;
    uint64_t u;
    int rc = get_int(g, key, INT32_MIN, INT32_MAX, "i32", &neg, &u, err);
    if (!rc)
        *v = (int32_t)(int64_t)u;
    return rc;
}

int gguf_get_u64(const gguf *g, const char *key, uint64_t *v, strata_error *err)
{
    bool neg;
    uint64_t u;
    int rc = get_int(g, key, 0, UINT64_MAX, "u64", &neg, &u, err);
    if (!rc)
        *v = u;
    return rc;
}

int gguf_get_f32(const gguf *g, const char *key, float *v, strata_error *err)
{
    int rc;
    const gguf_kv *kv = get_kv(g, key, err, &rc);
    if (!kv)
        return rc;
    if (kv->type == GGUF_F32) {
        memcpy(v, kv->data, 4);
    } else if (kv->type == GGUF_F64) {
        double d;
        memcpy(&d, kv->data, 8);
        *v = (float)d;
    } else {
        return wrong_type(g, kv, "f32", err);
    }
    return 0;
}

int gguf_get_bool(const gguf *g, const char *key, bool *v, strata_error *err)
{
    int rc;
    const gguf_kv *kv = get_kv(g, key, err, &rc);
    if (!kv)
        return rc;
    if (kv->type != GGUF_BOOL)
        return wrong_type(g, kv, "bool", err);
    *v = kv->data[0] != 0;
    return 0;
}

int gguf_get_str(const gguf *g, const char *key, gguf_str *v, strata_error *err)
{
    int rc;
    const gguf_kv *kv = get_kv(g, key, err, &rc);
    if (!kv)
        return rc;
    if (kv->type != GGUF_STRING)
        return wrong_type(g, kv, "string", err);
    *v = kv->str;
    return 0;
}

int gguf_get_array(const gguf *g, const char *key, uint32_t *elem_type, uint64_t *n,
                   const void **data, strata_error *err)
{
    int rc;
    const gguf_kv *kv = get_kv(g, key, err, &rc);
    if (!kv)
        return rc;
    if (kv->type != GGUF_ARRAY)
        return wrong_type(g, kv, "array", err);
    *elem_type = kv->arr_type;
    *n = kv->n;
    *data = kv->data;
    return 0;
}

int gguf_get_str_array(const gguf *g, const char *key, const gguf_str **items, uint64_t *n,
                       strata_error *err)
{
    int rc;
    const gguf_kv *kv = get_kv(g, key, err, &rc);
    if (!kv)
        return rc;
    if (kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING)
        return wrong_type(g, kv, "array of string", err);
    *items = kv->strs;
    *n = kv->n;
    return 0;
}
