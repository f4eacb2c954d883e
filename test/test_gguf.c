/* test_gguf.c: the GGUF reader on malformed files (model/gguf.c; suite
 * "gguf", case "malformed").
 *
 * A valid file is built byte by byte here (so each field's place is known),
 * one field is corrupted, and the test asserts the status and that the
 * message names the file, the field and the value; every truncation of a
 * valid file fails cleanly.  The writer's round trip, the cross-checks
 * against the Python `gguf` package and `strata-cli inspect` are suite
 * "gguf_write" (test_gguf_write.c); the byte buffer both use is in
 * test_gguf.h. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/quant.h"
#include "test_gguf.h"

/* ---- building files --------------------------------------------------- */

static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }

static void put_str(buf *b, const char *s)
{
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

static void put_kv_u32(buf *b, const char *key, uint32_t v)
{
    put_str(b, key);
    put_u32(b, GGUF_U32);
    put_u32(b, v);
}

static void put_kv_str(buf *b, const char *key, const char *s)
{
    put_str(b, key);
    put_u32(b, GGUF_STRING);
    put_str(b, s);
}

/* ---- the valid file the malformed cases start from -------------------- */

typedef struct tinfo {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;
    uint64_t offset;
} tinfo;

/* Everything a malformed test may change; defaults describe a valid v3
 * file with two KVs and two tensors (F32 8x2 at 0, Q8_0 64x2 at 64). */
typedef struct fspec {
    uint32_t magic, version;
    uint64_t n_tensors, n_kv;  /* as written in the header */
    buf extra_kv;              /* raw KV records appended after the defaults */
    uint64_t n_extra_kv;
    tinfo t[4];
    int nt;
    uint32_t align;
    uint64_t data_bytes;       /* bytes written after data_start */
} fspec;

static fspec spec_valid(void)
{
    fspec s = {0};
    s.magic = 0x46554747u;
    s.version = 3;
    s.t[0] = (tinfo){"a", 2, {8, 2}, GGML_TYPE_F32, 0};
    s.t[1] = (tinfo){"blk.0.attn_q.weight", 2, {64, 2}, GGML_TYPE_Q8_0, 64};
    s.nt = 2;
    s.align = 32;
    s.data_bytes = 64 + 160;
    s.n_kv = 2;
    s.n_tensors = 2;
    return s;
}

static void build(fspec *s, buf *b)
{
    memset(b, 0, sizeof *b);
    put_u32(b, s->magic);
    put_u32(b, s->version);
    put_u64(b, s->n_tensors);
    put_u64(b, s->n_kv + s->n_extra_kv);
    put_kv_str(b, "general.architecture", "llama");
    put_kv_u32(b, "llama.block_count", 1);
    put(b, s->extra_kv.p, s->extra_kv.len);
    for (int i = 0; i < s->nt; i++) {
        put_str(b, s->t[i].name);
        put_u32(b, s->t[i].n_dims);
        for (uint32_t d = 0; d < s->t[i].n_dims && d < 8; d++)
            put_u64(b, d < 4 ? s->t[i].ne[d] : 1);
        put_u32(b, s->t[i].type);
        put_u64(b, s->t[i].offset);
    }
    while (b->len % s->align)
        put(b, "", 1);
    uint64_t st = 0x1234;
    for (uint64_t i = 0; i < s->data_bytes; i++) {
        uint8_t v = (uint8_t)(test_rand_u64(&st) | 1);
        put(b, &v, 1);
    }
    free(s->extra_kv.p);
    s->extra_kv = (buf){0};
}

/* Parse b and expect failure `code` with every `want` string in the message. */
static void expect_fail(buf *b, int code, const char *want1, const char *want2)
{
    gguf *g = (gguf *)0x1;
    strata_error err = {0};
    int rc = gguf_open_mem(b->p, b->len, "x.gguf", &g, &err);
    ck_assert_msg(rc == code, "rc = %d (want %d), msg: %s", rc, code, err.msg);
    ck_assert_ptr_null(g);
    ck_assert_msg(strstr(err.msg, "x.gguf") != NULL, "no file name in: %s", err.msg);
    ck_assert_msg(!want1 || strstr(err.msg, want1), "'%s' not in: %s", want1, err.msg);
    ck_assert_msg(!want2 || strstr(err.msg, want2), "'%s' not in: %s", want2, err.msg);
    free(b->p);
}

static void expect_spec_fail(fspec *s, int code, const char *want1, const char *want2)
{
    buf b;
    build(s, &b);
    expect_fail(&b, code, want1, want2);
}

START_TEST(valid_base_file_parses)
{
    fspec s = spec_valid();
    buf b;
    build(&s, &b);
    gguf *g = NULL;
    strata_error err = {0};
    ck_assert_msg(gguf_open_mem(b.p, b.len, "x.gguf", &g, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(gguf_n_tensors(g), 2);
    ck_assert_uint_eq(gguf_n_kv(g), 2);
    ck_assert_uint_eq(gguf_data_offset(g) % 32, 0);
    const gguf_tensor *t = gguf_find_tensor(g, "blk.0.attn_q.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->nbytes, 136);
    ck_assert_ptr_eq(t->data, b.p + gguf_data_offset(g) + 64);
    gguf_close(g);
    gguf_close(NULL);
    free(b.p);
}
END_TEST

/* Every proper prefix of a valid file fails cleanly (no crash, an error). */
START_TEST(every_truncation_fails)
{
    fspec s = spec_valid();
    buf b;
    build(&s, &b);
    for (size_t n = 0; n < b.len - 1; n++) {
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, b.p, n);
        gguf *g = NULL;
        strata_error err = {0};
        int rc = gguf_open_mem(copy, n, "x.gguf", &g, &err);
        /* The last 224 - 200 bytes are padding after the last tensor. */
        if (n < b.len - 24)
            ck_assert_msg(rc == STRATA_E_FORMAT, "prefix %zu: rc %d", n, rc);
        if (rc)
            ck_assert_msg(strstr(err.msg, "x.gguf") && g == NULL, "prefix %zu: %s", n, err.msg);
        gguf_close(g);
        free(copy);
    }
    free(b.p);
}
END_TEST

/* ---- header ----------------------------------------------------------- */

START_TEST(bad_magic)
{
    fspec s = spec_valid();
    s.magic = 0x46554748u;
    expect_spec_fail(&s, STRATA_E_FORMAT, "magic = 0x46554748", NULL);
}
END_TEST

START_TEST(version_1_obsolete)
{
    fspec s = spec_valid();
    s.version = 1;
    expect_spec_fail(&s, STRATA_E_UNSUPPORTED, "version = 1", "obsolete");
}
END_TEST

START_TEST(version_4_unknown)
{
    fspec s = spec_valid();
    s.version = 4;
    expect_spec_fail(&s, STRATA_E_UNSUPPORTED, "version = 4", NULL);
}
END_TEST

START_TEST(version_0_invalid)
{
    fspec s = spec_valid();
    s.version = 0;
    expect_spec_fail(&s, STRATA_E_UNSUPPORTED, "version = 0 (supported: 2 and 3", NULL);
}
END_TEST

START_TEST(version_byte_swapped)
{
    fspec s = spec_valid();
    s.version = 0x03000000u;
    expect_spec_fail(&s, STRATA_E_UNSUPPORTED, "version = 0x03000000", "big-endian");
}
END_TEST

START_TEST(kv_count_too_large)
{
    fspec s = spec_valid();
    s.n_kv = 1ull << 62;
    expect_spec_fail(&s, STRATA_E_FORMAT, "kv_count = ", "cannot fit");
}
END_TEST

START_TEST(tensor_count_too_large)
{
    fspec s = spec_valid();
    s.n_tensors = UINT64_MAX;
    expect_spec_fail(&s, STRATA_E_FORMAT, "tensor_count = 18446744073709551615", NULL);
}
END_TEST

START_TEST(header_truncated)
{
    buf b = {0};
    put_u32(&b, 0x46554747u);
    put_u32(&b, 3);
    put_u32(&b, 0);
    expect_fail(&b, STRATA_E_FORMAT, "tensor_count", "truncated");
}
END_TEST

/* ---- metadata --------------------------------------------------------- */

START_TEST(key_length_past_end)
{
    fspec s = spec_valid();
    put_u64(&s.extra_kv, 1ull << 40);
    put(&s.extra_kv, "abc", 3);
    s.n_extra_kv = 1;
    expect_spec_fail(&s, STRATA_E_FORMAT, "kv[2]: key length = 1099511627776", "past the end");
}
END_TEST

START_TEST(key_empty)
{
    fspec s = spec_valid();
    put_str(&s.extra_kv, "");
    put_u32(&s.extra_kv, GGUF_U8);
    put(&s.extra_kv, "\1", 1);
    s.n_extra_kv = 1;
    expect_spec_fail(&s, STRATA_E_FORMAT, "kv[2]: key length = 0", NULL);
}
END_TEST

/* 20000 keys, one duplicated at the very end: found, named, and fast. */
START_TEST(many_keys_duplicate_last)
{
    fspec s = spec_valid();
    char key[32];
    for (int i = 0; i < 20000; i++) {
        snprintf(key, sizeof key, "k.%05d", i);
        put_kv_u32(&s.extra_kv, key, (uint32_t)i + 1);
    }
    put_kv_u32(&s.extra_kv, "k.00007", 1);
    s.n_extra_kv = 20001;
    expect_spec_fail(&s, STRATA_E_FORMAT, "key 'k.00007': duplicate key", "kv[20002]");
}
END_TEST

START_TEST(key_not_printable)
{
    fspec s = spec_valid();
    put_kv_u32(&s.extra_kv, "bad\nkey", 1);
    s.n_extra_kv = 1;
    expect_spec_fail(&s, STRATA_E_FORMAT, "kv[2]: key byte 3 = 0x0a", NULL);
}
END_TEST

START_TEST(key_duplicate)
{
    fspec s = spec_valid();
    put_kv_u32(&s.extra_kv, "llama.block_count", 2);
    s.n_extra_kv = 1;
    expect_spec_fail(&s, STRATA_E_FORMAT, "key 'llama.block_count': duplicate key", "kv[1]");
}
END_TEST

START_TEST(value_type_unknown)
{
    fspec s = spec_valid();
    put_str(&s.extra_kv, "x.y");
    put_u32(&s.extra_kv, 13);
    put_u32(&s.extra_kv, 0);
    s.n_extra_kv = 1;
    expect_spec_fail(&s, STRATA_E_FORMAT, "key 'x.y': value type = 13", NULL);
}
END_TEST

START_TEST(string_value_past_end)
{
    fspec s = spec_valid();
    put_str(&s.extra_kv, "x.s");
    put_u32(&s.extra_kv, GGUF_STRING);
    put_u64(&s.extra_kv, 1ull << 50);
    s.n_extra_kv = 1;
    expect_spec_fail(&s, STRATA_E_FORMAT, "key 'x.s': string value length = 1125899906842624",
                     NULL);
}
END_TEST

START_TEST(array_nested)
{
    fspec s = spec_valid();
    put_str(&s.extra_kv, "x.arr");
    put_u32(&s.extra_kv, GGUF_ARRAY);
    put_u32(&s.extra_kv, GGUF_ARRAY);
    put_u64(&s.extra_kv, 1);
    s.n_extra_kv = 1;
    expect_spec_fail(&s, STRATA_E_FORMAT, "key 'x.arr': array element type = 9", "nested");
}
END_TEST

START_TEST(array_elem_type_unknown)
{
    fspec s = spec_valid();
    put_str(&s.extra_kv, "x.arr");
    put_u32(&s.extra_kv, GGUF_ARRAY);
    put_u32(&s.extra_kv, 77);
    put_u64(&s.extra_kv, 1);
    s.n_extra_kv = 1;
    expect_spec_fail(&s, STRATA_E_FORMAT, "array element type = 77", NULL);
}
END_TEST

START_TEST(array_count_past_end)
{
    fspec s = spec_valid();
    put_str(&s.extra_kv, "x.arr");
    put_u32(&s.extra_kv, GGUF_ARRAY);
    put_u32(&s.extra_kv, GGUF_U64);
    put_u64(&s.extra_kv, 1ull << 61); /* x 8 bytes wraps to 0 if unchecked */
    s.n_extra_kv = 1;
    expect_spec_fail(&s, STRATA_E_FORMAT, "key 'x.arr': array length = 2305843009213693952",
                     "cannot fit");
}
END_TEST

START_TEST(string_array_count_past_end)
{
    fspec s = spec_valid();
    put_str(&s.extra_kv, "tokenizer.ggml.tokens");
    put_u32(&s.extra_kv, GGUF_ARRAY);
    put_u32(&s.extra_kv, GGUF_STRING);
    put_u64(&s.extra_kv, 1ull << 40);
    s.n_extra_kv = 1;
    expect_spec_fail(&s, STRATA_E_FORMAT, "array length = 1099511627776 of string", NULL);
}
END_TEST

START_TEST(string_array_element_past_end)
{
    fspec s = spec_valid();
    put_str(&s.extra_kv, "tokenizer.ggml.tokens");
    put_u32(&s.extra_kv, GGUF_ARRAY);
    put_u32(&s.extra_kv, GGUF_STRING);
    put_u64(&s.extra_kv, 2);
    put_str(&s.extra_kv, "ok");
    put_u64(&s.extra_kv, 1ull << 33);
    s.n_extra_kv = 1;
    expect_spec_fail(&s, STRATA_E_FORMAT, "array string length = 8589934592", NULL);
}
END_TEST

START_TEST(bool_not_0_or_1)
{
    fspec s = spec_valid();
    put_str(&s.extra_kv, "x.flag");
    put_u32(&s.extra_kv, GGUF_BOOL);
    put(&s.extra_kv, "\2", 1);
    s.n_extra_kv = 1;
    expect_spec_fail(&s, STRATA_E_FORMAT, "key 'x.flag': bool value[0] = 2", NULL);
}
END_TEST

START_TEST(alignment_wrong_type)
{
    fspec s = spec_valid();
    put_str(&s.extra_kv, "general.alignment");
    put_u32(&s.extra_kv, GGUF_U64);
    put_u64(&s.extra_kv, 32);
    s.n_extra_kv = 1;
    expect_spec_fail(&s, STRATA_E_FORMAT, "'general.alignment': type = u64", NULL);
}
END_TEST

START_TEST(alignment_zero)
{
    fspec s = spec_valid();
    put_kv_u32(&s.extra_kv, "general.alignment", 0);
    s.n_extra_kv = 1;
    expect_spec_fail(&s, STRATA_E_FORMAT, "'general.alignment' = 0", "power of two");
}
END_TEST

START_TEST(alignment_not_power_of_two)
{
    fspec s = spec_valid();
    put_kv_u32(&s.extra_kv, "general.alignment", 48);
    s.n_extra_kv = 1;
    expect_spec_fail(&s, STRATA_E_FORMAT, "'general.alignment' = 48", "power of two");
}
END_TEST

/* ---- tensor records --------------------------------------------------- */

START_TEST(n_dims_too_large)
{
    fspec s = spec_valid();
    s.t[1].n_dims = 5;
    expect_spec_fail(&s, STRATA_E_FORMAT, "tensor 'blk.0.attn_q.weight': n_dims = 5", NULL);
}
END_TEST

START_TEST(ne_zero)
{
    fspec s = spec_valid();
    s.t[1].ne[1] = 0;
    expect_spec_fail(&s, STRATA_E_FORMAT, "tensor 'blk.0.attn_q.weight': ne[1] = 0 (must be > 0)",
                     NULL);
}
END_TEST

START_TEST(ne_negative)
{
    fspec s = spec_valid();
    s.t[0].ne[0] = 1ull << 63;
    expect_spec_fail(&s, STRATA_E_FORMAT, "tensor 'a': ne[0] = 9223372036854775808", "negative");
}
END_TEST

START_TEST(ne_product_overflow)
{
    fspec s = spec_valid();
    s.t[0].n_dims = 3;
    s.t[0].ne[1] = 1ull << 30;
    s.t[0].ne[2] = 1ull << 31;
    expect_spec_fail(&s, STRATA_E_FORMAT, "tensor 'a': ne[2] = 2147483648", "overflow");
}
END_TEST

START_TEST(byte_size_overflow)
{
    /* 2^62 F32 elements fit in i64 but their 2^64 bytes do not fit in u64. */
    fspec s = spec_valid();
    s.t[0].ne[0] = 1ull << 31;
    s.t[0].ne[1] = 1ull << 31;
    expect_spec_fail(&s, STRATA_E_FORMAT, "tensor 'a': byte size overflows", NULL);
}
END_TEST

START_TEST(type_retired)
{
    fspec s = spec_valid();
    s.t[0].type = 4;
    expect_spec_fail(&s, STRATA_E_FORMAT, "tensor 'a': type = 4", "unknown");
}
END_TEST

START_TEST(type_past_table)
{
    fspec s = spec_valid();
    s.t[0].type = 0xFFFFFFFFu;
    expect_spec_fail(&s, STRATA_E_FORMAT, "tensor 'a': type = 4294967295", NULL);
}
END_TEST

START_TEST(ne0_not_block_multiple)
{
    fspec s = spec_valid();
    s.t[1].ne[0] = 48;
    expect_spec_fail(&s, STRATA_E_FORMAT, "ne[0] = 48 is not a multiple of the Q8_0 block (32)",
                     NULL);
}
END_TEST

START_TEST(name_too_long)
{
    fspec s = spec_valid();
    s.t[0].name = "a123456789012345678901234567890123456789012345678901234567890123";
    expect_spec_fail(&s, STRATA_E_FORMAT, "tensor[0]: name length = 64", "<= 63");
}
END_TEST

START_TEST(name_empty)
{
    fspec s = spec_valid();
    s.t[0].name = "";
    expect_spec_fail(&s, STRATA_E_FORMAT, "tensor[0]: name length = 0", NULL);
}
END_TEST

START_TEST(tensor_duplicate)
{
    fspec s = spec_valid();
    s.t[1].name = "a";
    expect_spec_fail(&s, STRATA_E_FORMAT, "tensor 'a': duplicate tensor name", NULL);
}
END_TEST

START_TEST(offset_unaligned)
{
    fspec s = spec_valid();
    s.t[1].offset = 72;
    expect_spec_fail(&s, STRATA_E_FORMAT, "offset = 72 is not a multiple of the alignment 32",
                     NULL);
}
END_TEST

START_TEST(tensors_overlap)
{
    fspec s = spec_valid();
    s.t[1].offset = 32; /* 'a' is 64 bytes at 0 */
    expect_spec_fail(&s, STRATA_E_FORMAT, "tensor 'a'", "overlaps tensor 'blk.0.attn_q.weight'");
}
END_TEST

START_TEST(data_past_eof)
{
    fspec s = spec_valid();
    s.data_bytes = 64 + 100;
    expect_spec_fail(&s, STRATA_E_FORMAT, "tensor 'blk.0.attn_q.weight'", "past the end");
}
END_TEST

START_TEST(offset_huge)
{
    fspec s = spec_valid();
    s.t[1].offset = UINT64_MAX - 31; /* data_start + offset wraps if unchecked */
    expect_spec_fail(&s, STRATA_E_FORMAT, "tensor 'blk.0.attn_q.weight'", "past the end");
}
END_TEST

/* §2.6: a Q2_0 tensor of 1024 x 4 needs 1152 bytes upstream (group 64) but
 * 1088 in the group-128 fork layout; a file giving it exactly 1088 is a
 * fork file.  The same file with 1152 bytes is fine. */
START_TEST(q2_0_group128_refused)
{
    fspec s = spec_valid();
    s.t[0] = (tinfo){"w", 2, {1024, 4}, GGML_TYPE_Q2_0, 0};
    s.nt = 1;
    s.n_tensors = 1;
    s.data_bytes = 1088;
    expect_spec_fail(&s, STRATA_E_UNSUPPORTED, "tensor 'w': type = 42 (Q2_0)", "group-128");
}
END_TEST

START_TEST(q2_0_group128_refused_not_last)
{
    fspec s = spec_valid();
    s.t[0] = (tinfo){"w", 2, {1024, 4}, GGML_TYPE_Q2_0, 0};
    s.t[1] = (tinfo){"b", 1, {8}, GGML_TYPE_F32, 1088};
    s.data_bytes = 1088 + 32;
    expect_spec_fail(&s, STRATA_E_UNSUPPORTED, "tensor 'w'", "group-128");
}
END_TEST

START_TEST(q2_0_upstream_accepted)
{
    fspec s = spec_valid();
    s.t[0] = (tinfo){"w", 2, {1024, 4}, GGML_TYPE_Q2_0, 0};
    s.t[1] = (tinfo){"b", 1, {8}, GGML_TYPE_F32, 1152};
    s.data_bytes = 1152 + 32;
    buf b;
    build(&s, &b);
    gguf *g = NULL;
    strata_error err = {0};
    ck_assert_msg(gguf_open_mem(b.p, b.len, "x.gguf", &g, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(gguf_find_tensor(g, "w")->nbytes, 1152);
    gguf_close(g);
    free(b.p);
}
END_TEST

START_TEST(open_missing_and_empty_file)
{
    gguf *g = NULL;
    strata_error err = {0};
    ck_assert_int_eq(gguf_open("/nonexistent/x.gguf", &g, &err), STRATA_E_NOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/x.gguf"));
    char path[256];
    snprintf(path, sizeof path, "%s/empty.gguf", test_tmpdir());
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(gguf_open(path, &g, &err), STRATA_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "empty"));
    ck_assert_ptr_null(g);
}
END_TEST

static Suite *gguf_suite(void)
{
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("malformed");
    tcase_add_test(tc, valid_base_file_parses);
    tcase_add_test(tc, every_truncation_fails);
    tcase_add_test(tc, bad_magic);
    tcase_add_test(tc, version_1_obsolete);
    tcase_add_test(tc, version_4_unknown);
    tcase_add_test(tc, version_0_invalid);
    tcase_add_test(tc, version_byte_swapped);
    tcase_add_test(tc, kv_count_too_large);
    tcase_add_test(tc, tensor_count_too_large);
    tcase_add_test(tc, header_truncated);
    tcase_add_test(tc, key_length_past_end);
    tcase_add_test(tc, key_empty);
    tcase_add_test(tc, many_keys_duplicate_last);
    tcase_add_test(tc, key_not_printable);
    tcase_add_test(tc, key_duplicate);
    tcase_add_test(tc, value_type_unknown);
    tcase_add_test(tc, string_value_past_end);
    tcase_add_test(tc, array_nested);
    tcase_add_test(tc, array_elem_type_unknown);
    tcase_add_test(tc, array_count_past_end);
    tcase_add_test(tc, string_array_count_past_end);
    tcase_add_test(tc, string_array_element_past_end);
    tcase_add_test(tc, bool_not_0_or_1);
    tcase_add_test(tc, alignment_wrong_type);
    tcase_add_test(tc, alignment_zero);
    tcase_add_test(tc, alignment_not_power_of_two);
    tcase_add_test(tc, n_dims_too_large);
    tcase_add_test(tc, ne_zero);
    tcase_add_test(tc, ne_negative);
    tcase_add_test(tc, ne_product_overflow);
    tcase_add_test(tc, byte_size_overflow);
    tcase_add_test(tc, type_retired);
    tcase_add_test(tc, type_past_table);
    tcase_add_test(tc, ne0_not_block_multiple);
    tcase_add_test(tc, name_too_long);
    tcase_add_test(tc, name_empty);
    tcase_add_test(tc, tensor_duplicate);
    tcase_add_test(tc, offset_unaligned);
    tcase_add_test(tc, tensors_overlap);
    tcase_add_test(tc, data_past_eof);
    tcase_add_test(tc, offset_huge);
    tcase_add_test(tc, q2_0_group128_refused);
    tcase_add_test(tc, q2_0_group128_refused_not_last);
    tcase_add_test(tc, q2_0_upstream_accepted);
    tcase_add_test(tc, open_missing_and_empty_file);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(gguf_suite)
