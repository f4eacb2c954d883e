/* test_gguf_write.c: the GGUF writer (model/gguf_write.c) and what checks
 * files from outside (suite "gguf_write").
 *
 * - case "roundtrip": every value type, string arrays, tensors of several
 *   types, through the writer and back through the reader; a copy made
 *   record by record is byte-identical; bad records and paths are refused;
 * - case "crosscheck": strata's view of the demo model and of the writer's
 *   output compared line by line with the Python `gguf` package's
 *   (test/scripts/gguf_dump.py --tsv), and `strata-cli inspect` on a good
 *   and a bad file.
 *
 * The reader on malformed files is suite "gguf" (test_gguf.c). */
#include "testutil.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/quant.h"
#include "test_gguf.h"

/* ---- writer round trip ------------------------------------------------ */

/* One scalar record of any type, through copy_kv (the typed setters cover
 * only the common widths). */
static void set_raw(gguf_writer *w, const char *key, uint32_t type, const void *v)
{
    gguf_kv kv = {.key = key, .type = type, .n = 1, .data = v};
    ck_assert_int_eq(gguf_writer_copy_kv(w, &kv), 0);
}

typedef struct tdata {
    const char *name;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[4];
    uint8_t *data;
    uint64_t nbytes;
} tdata;

static tdata tensors_rt[] = {
    {"token_embd.weight", GGML_TYPE_Q4_1, 2, {64, 3, 1, 1}, NULL, 0},
    {"blk.0.attn_norm.weight", GGML_TYPE_F32, 1, {7, 1, 1, 1}, NULL, 0},
    {"blk.0.ffn_up.weight", GGML_TYPE_Q8_0, 2, {96, 5, 1, 1}, NULL, 0},
    {"blk.0.ffn_down.weight", GGML_TYPE_Q4_K, 2, {256, 2, 1, 1}, NULL, 0},
    {"blk.0.attn_k.weight", GGML_TYPE_F16, 3, {6, 2, 3, 1}, NULL, 0},
    {"blk.0.attn_v.weight", GGML_TYPE_IQ3_XXS, 2, {256, 3, 1, 1}, NULL, 0},
    {"blk.0.attn_q.weight", GGML_TYPE_BF16, 4, {2, 3, 2, 2}, NULL, 0},
};
#define N_RT (sizeof tensors_rt / sizeof tensors_rt[0])

static const char *const rt_strs[] = {"hello", "", "wörld ✓", "<|im_start|>", "a\tb"};
static const int32_t rt_i32[] = {-5, 0, 7, INT32_MIN, INT32_MAX};
static const float rt_f32[] = {1.5f, -0.0f, 3.25e-7f};
static const uint8_t rt_bool[] = {1, 0, 1};

/* Write a file with every value type and N_RT tensors; return its path. */
static const char *write_roundtrip_file(uint32_t alignment)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/rt%u.gguf", test_tmpdir(), alignment);
    gguf_writer *w = gguf_writer_new(alignment);
    ck_assert_ptr_nonnull(w);
    uint8_t u8 = 200; int8_t i8 = -100; uint16_t u16 = 60000; int16_t i16 = -30000;
    int64_t i64 = -((int64_t)1 << 40); double f64 = 2.718281828459045;
    set_raw(w, "t.u8", GGUF_U8, &u8);
    set_raw(w, "t.i8", GGUF_I8, &i8);
    set_raw(w, "t.u16", GGUF_U16, &u16);
    set_raw(w, "t.i16", GGUF_I16, &i16);
    ck_assert_int_eq(gguf_writer_set_u32(w, "t.u32", 4000000000u), 0);
    ck_assert_int_eq(gguf_writer_set_i32(w, "t.i32", -123456), 0);
    ck_assert_int_eq(gguf_writer_set_f32(w, "t.f32", 0.1f), 0);
    ck_assert_int_eq(gguf_writer_set_bool(w, "t.bool", true), 0);
    ck_assert_int_eq(gguf_writer_set_str(w, "general.architecture", "llama"), 0);
    ck_assert_int_eq(gguf_writer_set_u64(w, "t.u64", UINT64_MAX - 1), 0);
    set_raw(w, "t.i64", GGUF_I64, &i64);
    set_raw(w, "t.f64", GGUF_F64, &f64);
    ck_assert_int_eq(gguf_writer_set_array(w, "t.arr_i32", GGUF_I32, rt_i32, 5), 0);
    ck_assert_int_eq(gguf_writer_set_array(w, "t.arr_f32", GGUF_F32, rt_f32, 3), 0);
    ck_assert_int_eq(gguf_writer_set_array(w, "t.arr_bool", GGUF_BOOL, rt_bool, 3), 0);
    ck_assert_int_eq(gguf_writer_set_array(w, "t.arr_empty", GGUF_U8, NULL, 0), 0);
    ck_assert_int_eq(gguf_writer_set_str_array(w, "t.strs", rt_strs, 5), 0);
    /* Setting a key twice replaces it. */
    ck_assert_int_eq(gguf_writer_set_str(w, "t.replaced", "old"), 0);
    ck_assert_int_eq(gguf_writer_set_str(w, "t.replaced", "new"), 0);
    /* Nested arrays and bad keys are refused. */
    ck_assert_int_eq(gguf_writer_set_array(w, "t.bad", GGUF_ARRAY, rt_i32, 1), STRATA_E_ARG);
    ck_assert_int_eq(gguf_writer_set_u32(w, "", 1), STRATA_E_ARG);

    uint64_t seed = 42;
    strata_error err = {0};
    for (size_t i = 0; i < N_RT; i++) {
        tdata *t = &tensors_rt[i];
        int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        t->nbytes = type_row_bytes((int)t->type, t->ne[0]) * (uint64_t)rows;
        free(t->data);
        t->data = malloc(t->nbytes);
        for (uint64_t j = 0; j < t->nbytes; j++)
            t->data[j] = (uint8_t)(test_rand_u64(&seed) | 1);
        ck_assert_msg(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data,
                                             t->nbytes, &err) == 0, "%s", err.msg);
    }
    /* Wrong size, duplicate name, bad block multiple are refused. */
    ck_assert_int_eq(gguf_writer_add_tensor(w, "x", GGML_TYPE_F32, 1, (int64_t[]){4},
                                            tensors_rt[0].data, 15, &err), STRATA_E_ARG);
    ck_assert_int_eq(gguf_writer_add_tensor(w, tensors_rt[0].name, GGML_TYPE_F32, 1,
                                            (int64_t[]){4}, tensors_rt[0].data, 16, &err),
                     STRATA_E_ARG);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "y", GGML_TYPE_Q8_0, 1, (int64_t[]){40},
                                            tensors_rt[0].data, 34, &err), STRATA_E_ARG);
    ck_assert_msg(gguf_writer_write(w, path, &err) == 0, "%s", err.msg);
    gguf_writer_free(w);
    gguf_writer_free(NULL);
    return path;
}

static void check_roundtrip(const char *path, uint32_t alignment)
{
    gguf *g = NULL;
    strata_error err = {0};
    ck_assert_msg(gguf_open(path, &g, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(gguf_version(g), 3);
    ck_assert_uint_eq(gguf_alignment(g), alignment);
    ck_assert_uint_eq(gguf_data_offset(g) % alignment, 0);

    const gguf_kv *kv = gguf_find_kv(g, "t.u8");
    ck_assert_uint_eq(kv->type, GGUF_U8);
    ck_assert_uint_eq(kv->data[0], 200);
    kv = gguf_find_kv(g, "t.i8");
    ck_assert_int_eq((int8_t)kv->data[0], -100);
    uint16_t u16; int16_t i16; int64_t i64; double f64;
    memcpy(&u16, gguf_find_kv(g, "t.u16")->data, 2);
    memcpy(&i16, gguf_find_kv(g, "t.i16")->data, 2);
    memcpy(&i64, gguf_find_kv(g, "t.i64")->data, 8);
    memcpy(&f64, gguf_find_kv(g, "t.f64")->data, 8);
    ck_assert_uint_eq(u16, 60000);
    ck_assert_int_eq(i16, -30000);
    ck_assert_int_eq(i64, -((int64_t)1 << 40));
    ck_assert(f64 == 2.718281828459045);

    uint32_t u32; int32_t i32; uint64_t u64; float f32; bool b; gguf_str s;
    ck_assert_int_eq(gguf_get_u32(g, "t.u32", &u32, &err), 0);
    ck_assert_uint_eq(u32, 4000000000u);
    ck_assert_int_eq(gguf_get_i32(g, "t.i32", &i32, &err), 0);
    ck_assert_int_eq(i32, -123456);
    ck_assert_int_eq(gguf_get_u64(g, "t.u64", &u64, &err), 0);
    ck_assert(u64 == UINT64_MAX - 1);
    ck_assert_int_eq(gguf_get_f32(g, "t.f32", &f32, &err), 0);
    ck_assert(f32 == 0.1f);
    ck_assert_int_eq(gguf_get_f32(g, "t.f64", &f32, &err), 0); /* F64 accepted */
    ck_assert(f32 == (float)2.718281828459045);
    ck_assert_int_eq(gguf_get_bool(g, "t.bool", &b, &err), 0);
    ck_assert(b);
    ck_assert_int_eq(gguf_get_str(g, "general.architecture", &s, &err), 0);
    ck_assert(s.len == 5 && !memcmp(s.p, "llama", 5));
    ck_assert_int_eq(gguf_get_str(g, "t.replaced", &s, &err), 0);
    ck_assert(s.len == 3 && !memcmp(s.p, "new", 3));
    /* Integer getters widen and range-check. */
    ck_assert_int_eq(gguf_get_u32(g, "t.u8", &u32, &err), 0);
    ck_assert_uint_eq(u32, 200);
    ck_assert_int_eq(gguf_get_i32(g, "t.i16", &i32, &err), 0);
    ck_assert_int_eq(i32, -30000);
    ck_assert_int_eq(gguf_get_u32(g, "t.i8", &u32, &err), STRATA_E_TYPE);
    ck_assert_ptr_nonnull(strstr(err.msg, "t.i8' = -100"));
    ck_assert_int_eq(gguf_get_i32(g, "t.u32", &i32, &err), STRATA_E_TYPE);
    ck_assert_int_eq(gguf_get_u32(g, "general.architecture", &u32, &err), STRATA_E_TYPE);
    ck_assert_msg(strstr(err.msg, "'general.architecture': type = string (expected u32)"),
                  "%s", err.msg);
    ck_assert_int_eq(gguf_get_u32(g, "no.such.key", &u32, &err), STRATA_E_NOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "no.such.key"));

    uint32_t et; uint64_t n; const void *data;
    ck_assert_int_eq(gguf_get_array(g, "t.arr_i32", &et, &n, &data, &err), 0);
    ck_assert(et == GGUF_I32 && n == 5 && !memcmp(data, rt_i32, sizeof rt_i32));
    ck_assert_int_eq(gguf_get_array(g, "t.arr_f32", &et, &n, &data, &err), 0);
    ck_assert(et == GGUF_F32 && n == 3 && !memcmp(data, rt_f32, sizeof rt_f32));
    ck_assert_int_eq(gguf_get_array(g, "t.arr_bool", &et, &n, &data, &err), 0);
    ck_assert(et == GGUF_BOOL && n == 3 && !memcmp(data, rt_bool, 3));
    ck_assert_int_eq(gguf_get_array(g, "t.arr_empty", &et, &n, &data, &err), 0);
    ck_assert(et == GGUF_U8 && n == 0);
    const gguf_str *items;
    ck_assert_int_eq(gguf_get_str_array(g, "t.strs", &items, &n, &err), 0);
    ck_assert_uint_eq(n, 5);
    for (int i = 0; i < 5; i++)
        ck_assert(items[i].len == strlen(rt_strs[i]) &&
                  !memcmp(items[i].p, rt_strs[i], items[i].len));
    ck_assert_int_eq(gguf_get_str_array(g, "t.arr_i32", &items, &n, &err), STRATA_E_TYPE);

    ck_assert_uint_eq(gguf_n_tensors(g), N_RT);
    for (size_t i = 0; i < N_RT; i++) {
        const tdata *t = &tensors_rt[i];
        const gguf_tensor *r = gguf_tensor_at(g, i);
        ck_assert_str_eq(r->name, t->name);
        ck_assert_ptr_eq(gguf_find_tensor(g, t->name), r);
        ck_assert_uint_eq(r->type, t->type);
        ck_assert_uint_eq(r->n_dims, t->n_dims);
        for (int d = 0; d < 4; d++)
            ck_assert_int_eq(r->ne[d], t->ne[d]);
        ck_assert_uint_eq(r->nbytes, t->nbytes);
        ck_assert_uint_eq(r->offset % alignment, 0);
        ck_assert(!memcmp(r->data, t->data, t->nbytes));
    }
    ck_assert_ptr_null(gguf_find_tensor(g, "nope"));
    ck_assert_ptr_null(gguf_tensor_at(g, N_RT));
    gguf_close(g);
}

START_TEST(writer_roundtrip_default_alignment)
{
    const char *path = write_roundtrip_file(0);
    check_roundtrip(path, 32);
}
END_TEST

START_TEST(writer_roundtrip_alignment_64)
{
    const char *path = write_roundtrip_file(64);
    check_roundtrip(path, 64);
}
END_TEST

START_TEST(writer_copy_kv_roundtrip)
{
    /* Re-write a file by copying every record: the bytes must be identical. */
    const char *src = write_roundtrip_file(0);
    gguf *g = NULL;
    strata_error err = {0};
    ck_assert_msg(gguf_open(src, &g, &err) == 0, "%s", err.msg);
    gguf_writer *w = gguf_writer_new(gguf_alignment(g));
    for (uint64_t i = 0; i < gguf_n_kv(g); i++)
        ck_assert_int_eq(gguf_writer_copy_kv(w, gguf_kv_at(g, i)), 0);
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        ck_assert_int_eq(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data,
                                                t->nbytes, &err), 0);
    }
    char dst[300];
    snprintf(dst, sizeof dst, "%s.copy", src);
    ck_assert_msg(gguf_writer_write(w, dst, &err) == 0, "%s", err.msg);
    gguf_writer_free(w);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", src, dst);
    ck_assert_int_eq(test_run(cmd, NULL), 0);
    gguf_close(g);
}
END_TEST

START_TEST(writer_fails_cleanly)
{
    gguf_writer *w = gguf_writer_new(0);
    strata_error err = {0};
    ck_assert_int_eq(gguf_writer_write(w, "/nonexistent/dir/out.gguf", &err), STRATA_E_IO);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/dir/out.gguf"));
    gguf_writer_free(w);
    ck_assert_ptr_null(gguf_writer_new(48));
}
END_TEST

/* ---- cross-check with the Python gguf package ------------------------- */

static const char *const py_vtype[GGUF_VTYPE_COUNT] = {
    "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
    "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64",
};

static uint64_t fnv(const uint8_t *p, uint64_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* The scalar value as gguf_dump.py --tsv prints it. */
static void tsv_scalar(const gguf_kv *kv, char *out, size_t cap)
{
    const uint8_t *d = kv->data;
    uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
    uint64_t u64; int64_t i64;
    switch (kv->type) {
    case GGUF_U8: case GGUF_BOOL: memcpy(&u8, d, 1); snprintf(out, cap, "%u", u8); break;
    case GGUF_I8: memcpy(&i8, d, 1); snprintf(out, cap, "%d", i8); break;
    case GGUF_U16: memcpy(&u16, d, 2); snprintf(out, cap, "%u", u16); break;
    case GGUF_I16: memcpy(&i16, d, 2); snprintf(out, cap, "%d", i16); break;
    case GGUF_U32: memcpy(&u32, d, 4); snprintf(out, cap, "%u", u32); break;
    case GGUF_I32: memcpy(&i32, d, 4); snprintf(out, cap, "%d", i32); break;
    case GGUF_F32: memcpy(&u32, d, 4); snprintf(out, cap, "%08x", u32); break;
    case GGUF_U64: memcpy(&u64, d, 8); snprintf(out, cap, "%" PRIu64, u64); break;
    case GGUF_I64: memcpy(&i64, d, 8); snprintf(out, cap, "%" PRId64, i64); break;
    case GGUF_F64: memcpy(&u64, d, 8); snprintf(out, cap, "%016" PRIx64, u64); break;
    default: snprintf(out, cap, "?");
    }
}

/* strata's view of g in gguf_dump.py's --tsv format.  The FNV of an array
 * is over its raw payload: numbers are stored little-endian and strings as
 * u64 length + bytes, exactly what the script re-encodes. */
static void bprintf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(buf *b, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    ck_assert(n >= 0 && (size_t)n < sizeof line);
    put(b, line, (size_t)n);
}

static char *tsv_dump(const gguf *g)
{
    buf b = {0};
    char val[128];
    bprintf(&b, "header\tversion\t%u\n", gguf_version(g));
    bprintf(&b, "header\talignment\t%u\n", gguf_alignment(g));
    bprintf(&b, "header\tdata_offset\t%" PRIu64 "\n", gguf_data_offset(g));
    bprintf(&b, "header\tn_kv\t%" PRIu64 "\n", gguf_n_kv(g));
    bprintf(&b, "header\tn_tensors\t%" PRIu64 "\n", gguf_n_tensors(g));
    for (uint64_t i = 0; i < gguf_n_kv(g); i++) {
        const gguf_kv *kv = gguf_kv_at(g, i);
        if (kv->type == GGUF_STRING) {
            snprintf(val, sizeof val, "%" PRIu64 ":%016" PRIx64, kv->str.len,
                     fnv((const uint8_t *)kv->str.p, kv->str.len));
        } else if (kv->type == GGUF_ARRAY) {
            uint64_t bytes = kv->n * gguf_vtype_size(kv->arr_type);
            if (kv->arr_type == GGUF_STRING)
                bytes = kv->n ? (uint64_t)((const uint8_t *)kv->strs[kv->n - 1].p +
                                           kv->strs[kv->n - 1].len - kv->data) : 0;
            snprintf(val, sizeof val, "%s:%" PRIu64 ":%016" PRIx64, py_vtype[kv->arr_type],
                     kv->n, fnv(kv->data, bytes));
        } else {
            tsv_scalar(kv, val, sizeof val);
        }
        bprintf(&b, "kv\t%s\t%s\t%s\n", kv->key, py_vtype[kv->type], val);
    }
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        char shape[128] = "";
        for (uint32_t d = 0; d < t->n_dims; d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%" PRId64,
                     d ? "," : "", t->ne[d]);
        bprintf(&b, "tensor\t%s\t%u\t%s\t%" PRIu64 "\t%" PRIu64 "\n", t->name, t->type, shape,
                t->offset, t->nbytes);
    }
    put(&b, "", 1);
    return (char *)b.p;
}

/* Compare strata's dump of path with the Python package's, line by line. */
static void cross_check(const char *path)
{
    gguf *g = NULL;
    strata_error err = {0};
    ck_assert_msg(gguf_open(path, &g, &err) == 0, "%s", err.msg);
    char *ours = tsv_dump(g);
    gguf_close(g);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "python3 '%s/test/scripts/gguf_dump.py' '%s' --tsv", test_root(),
             path);
    char *theirs = NULL;
    int rc = test_run(cmd, &theirs);
    ck_assert_msg(rc == 0, "gguf_dump.py failed (%d) on %s", rc, path);
    const char *a = ours, *b = theirs;
    for (int line = 1; *a || *b; line++) {
        size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
        ck_assert_msg(la == lb && !memcmp(a, b, la), "line %d differs:\n strata: %.*s\n python: %.*s",
                      line, (int)(la > 300 ? 300 : la), a, (int)(lb > 300 ? 300 : lb), b);
        a += la + (a[la] ? 1 : 0);
        b += lb + (b[lb] ? 1 : 0);
    }
    free(ours);
    free(theirs);
}

START_TEST(demo_model_matches_python_gguf)
{
    const char *model = test_demo_model();
    if (!model)
        TEST_SKIP("model", "demo model not found (run `make model`)");
    if (!test_have_python("gguf, numpy"))
        TEST_SKIP("python", "python3 with the gguf package not available");
    cross_check(model);
    /* And what the model loader will ask for. */
    gguf *g = NULL;
    strata_error err = {0};
    ck_assert_msg(gguf_open(model, &g, &err) == 0, "%s", err.msg);
    uint32_t v;
    ck_assert_int_eq(gguf_get_u32(g, "llama.block_count", &v, &err), 0);
    ck_assert_uint_eq(v, 30);
    ck_assert_int_eq(gguf_get_u32(g, "llama.embedding_length", &v, &err), 0);
    ck_assert_uint_eq(v, 576);
    const gguf_tensor *t = gguf_find_tensor(g, "blk.29.ffn_down.weight");
    ck_assert_ptr_nonnull(t);
    gguf_close(g);
}
END_TEST

START_TEST(writer_output_matches_python_gguf)
{
    if (!test_have_python("gguf, numpy"))
        TEST_SKIP("python", "python3 with the gguf package not available");
    cross_check(write_roundtrip_file(0));
    cross_check(write_roundtrip_file(64));
}
END_TEST

/* ---- strata-cli inspect ----------------------------------------------- */

START_TEST(inspect_good_and_bad_file)
{
    const char *cli = test_cli();
    if (!cli)
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset; run via make test)");
    const char *path = write_roundtrip_file(0);
    char cmd[1024];
    char *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' inspect '%s'", cli, path);
    ck_assert_int_eq(test_run(cmd, &out), 0);
    ck_assert_msg(strstr(out, "blk.0.ffn_down.weight") && strstr(out, "Q4_K") &&
                  strstr(out, "t.strs") && strstr(out, "general.architecture"), "%s", out);
    free(out);

    snprintf(cmd, sizeof cmd, "'%s' inspect --json '%s'", cli, path);
    ck_assert_int_eq(test_run(cmd, &out), 0);
    ck_assert_msg(out[0] == '{' && strstr(out, "\"tensors\"") &&
                  strstr(out, "\"name\": \"blk.0.attn_v.weight\""), "%s", out);
    free(out);
    if (test_have_python("json")) {
        snprintf(cmd, sizeof cmd, "'%s' inspect --json '%s' | python3 -c 'import json,sys; "
                 "d=json.load(sys.stdin); assert len(d[\"tensors\"])==%d'", cli, path, (int)N_RT);
        ck_assert_int_eq(test_run(cmd, NULL), 0);
    }

    /* A bad file: one line on stderr naming the problem, exit 1. */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/bad.gguf", test_tmpdir());
    FILE *f = fopen(bad, "wb");
    fwrite("GGUF\3\0\0\0\1\0", 1, 10, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' inspect '%s' 2>&1 >/dev/null", cli, bad);
    ck_assert_int_eq(test_run(cmd, &out), 1);
    ck_assert_msg(!strncmp(out, "strata-cli inspect: ", 20) && strstr(out, "tensor_count") &&
                  strchr(out, '\n') == out + strlen(out) - 1, "%s", out);
    free(out);

    snprintf(cmd, sizeof cmd, "'%s' inspect 2>/dev/null", cli);
    ck_assert_int_eq(test_run(cmd, NULL), 2);
    snprintf(cmd, sizeof cmd, "'%s' inspect --bogus x 2>/dev/null", cli);
    ck_assert_int_eq(test_run(cmd, NULL), 2);
    snprintf(cmd, sizeof cmd, "'%s' inspect --help", cli);
    ck_assert_int_eq(test_run(cmd, &out), 0);
    ck_assert_ptr_nonnull(strstr(out, "usage: strata-cli inspect"));
    free(out);
}
END_TEST

START_TEST(inspect_demo_model)
{
    const char *cli = test_cli();
    const char *model = test_demo_model();
    if (!cli)
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset; run via make test)");
    if (!model)
        TEST_SKIP("model", "demo model not found (run `make model`)");
    char cmd[1024];
    char *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' inspect '%s'", cli, model);
    ck_assert_int_eq(test_run(cmd, &out), 0);
    ck_assert_msg(strstr(out, "tokenizer.ggml.tokens") && strstr(out, "49152") &&
                  strstr(out, "Q4_1"), "%.2000s", out);
    free(out);
}
END_TEST

static Suite *gguf_write_suite(void)
{
    Suite *s = suite_create("gguf_write");
    TCase *rt = tcase_create("roundtrip");
    tcase_add_test(rt, writer_roundtrip_default_alignment);
    tcase_add_test(rt, writer_roundtrip_alignment_64);
    tcase_add_test(rt, writer_copy_kv_roundtrip);
    tcase_add_test(rt, writer_fails_cleanly);
    suite_add_tcase(s, rt);

    TCase *x = tcase_create("crosscheck");
    tcase_add_test(x, demo_model_matches_python_gguf);
    tcase_add_test(x, writer_output_matches_python_gguf);
    tcase_add_test(x, inspect_good_and_bad_file);
    tcase_add_test(x, inspect_demo_model);
    suite_add_tcase(s, x);
    return s;
}
TEST_SUITE(gguf_write_suite)
