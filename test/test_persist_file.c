/* test_persist_file.c: the saved conversation's file format (suite
 * persist_file; park/persist_file.c, doc/convcache.md "The file"): fields
 * that a version added, read back from files of every version this build
 * reads, and bad values refused naming the file, the field and the value.
 * The rest of the saving is suite persist (test_persist.c). */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/convcache.h"
#include "cache/xxh64.h"
#include "engine/engine_internal.h"
#include "park/park.h"
#include "park/persist.h"
#include "test_persist.h"

/* The file's checksum recomputed after a header edit (persist_file.c:
 * XXH64 chained over the header, the tokens and each layer). */
static void rechecksum(uint8_t *b, size_t bytes, int n, int n_layer)
{
    uint64_t h = xxh64(b, 96, 0x5354524b56494d47ull);   /* "STRKVIMG" */
    h = xxh64(b + 96, (size_t)n * 4, h);
    size_t lb = (bytes - 96 - (size_t)n * 4 - 8) / (size_t)n_layer;
    for (int l = 0; l < n_layer; l++)
        h = xxh64(b + 96 + (size_t)n * 4 + (size_t)l * lb, lb, h);
    for (int i = 0; i < 8; i++)
        b[bytes - 8 + i] = (uint8_t)(h >> (8 * i));
}

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void on_load_pending(const int32_t *tokens, int n, int32_t pending, void *user)
{
    (void)tokens;
    (void)n;
    *(int32_t *)user = pending;
}

/* One conversation of n random tokens read by an engine with KV type kv,
 * parked with a pending token and saved as DIR/name; its bytes in orig. */
typedef struct saved {
    strata_engine *e;
    int32_t *t;
    strata_park *pk;
    strata_seq *s;
    convcache_image *img;
    persist_id id;
    const char *dir;  /* test_tmpdir(): a fresh directory per call */
    char *path;
    uint64_t bytes;
    uint8_t *orig;
} saved;

static void saved_make(saved *v, int kv, int n, uint64_t seed, int32_t pending, const char *name)
{
    strata_error err = {0};
    v->e = open_engine(model_a(), NULL, kv);
    v->t = random_tokens(n, seed);
    v->pk = park_new(v->e, 64, 16, &err);
    ck_assert_msg(v->pk != NULL, "park_new: %s", err.msg);
    v->s = strata_seq_new(v->e, &err);
    ck_assert_msg(strata_seq_feed(v->s, v->t, n, NULL, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(park_capture(v->pk, v->s, pending, 0, NULL, &err) == 0, "%s", err.msg);
    v->img = NULL;
    ck_assert_int_eq(convcache_find(park_cache(v->pk), v->t, n, &v->img), n);
    ck_assert_int_eq(persist_identity(v->e, &v->id, &err), 0);
    v->dir = test_tmpdir();
    v->path = path_in(v->dir, name);
    v->bytes = 0;
    ck_assert_int_eq(persist_write_file(&v->id, v->img, v->path, &v->bytes, &err), 0);
    FILE *f = fopen(v->path, "rb");
    v->orig = malloc(v->bytes);
    ck_assert_int_eq(fread(v->orig, 1, v->bytes, f), v->bytes);
    fclose(f);
}

static void saved_free(saved *v)
{
    free(v->orig);
    free(v->path);
    free(v->t);
    strata_seq_free(v->s);
    park_free(v->pk);
    strata_close(v->e);
}

/* Write len bytes of b over the saved file. */
static void overwrite(const char *path, const uint8_t *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_int_eq(fwrite(b, 1, len, f), len);
    fclose(f);
}

/* The pending token (sampled after the image's tokens, never fed: the last
 * token of an answer cut by its length) goes to the file and back, to the
 * image and to on_load; a version 1 file (none saved) loads without one; a
 * value outside the vocabulary or an unknown version is refused by name. */
START_TEST(persist_pending_token_saved)
{
    saved v;
    saved_make(&v, STRATA_KV_DEFAULT, 100, 51, 123, "00000000000000cc" PERSIST_SUFFIX);
    strata_engine *e = v.e;
    strata_error err = {0};
    ck_assert_int_eq(convcache_image_pending(v.img), 123);

    convcache *c = plain_cache(e->n_stages);
    convcache_image *back = NULL;
    ck_assert_msg(persist_load_file(&v.id, c, v.path, &back, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(convcache_image_pending(back), 123);
    convcache_free(c);
    int32_t got = -7;
    persist_params pp = {.dir = v.dir, .on_load = on_load_pending, .load_user = &got};
    c = plain_cache(e->n_stages);
    persist *ps = persist_new(e, c, &pp, &err);
    ck_assert_msg(ps != NULL, "%s", err.msg);
    ck_assert_int_eq(got, 123);
    persist_free(ps);
    convcache_free(c);

    uint8_t *b = malloc(v.bytes);
    struct {
        uint32_t version, pending;
        int rc;
        const char *says;
    } cases[] = {
        {1, 0, 0, NULL},                  /* version 1: zeros there, no pending token */
        {2, 0xffffffffu, 0, NULL},        /* none */
        {2, N_VOCAB, STRATA_E_FORMAT, "field pending token (offset 80) is 400"},
        {3, 123, STRATA_E_FORMAT, "format version 3"},
    };
    for (int k = 0; k < 4; k++) {
        memcpy(b, v.orig, v.bytes);
        put_le32(b + 8, cases[k].version);
        put_le32(b + 80, cases[k].pending);
        rechecksum(b, v.bytes, 100, (int)v.id.n_layer);
        overwrite(v.path, b, v.bytes);
        c = plain_cache(e->n_stages);
        back = NULL;
        strata_err_clear(&err);
        int rc = persist_load_file(&v.id, c, v.path, &back, &err);
        ck_assert_msg(rc == cases[k].rc, "case %d: rc %d: %s", k, rc, err.msg);
        if (rc)
            ck_assert_msg(strstr(err.msg, v.path) && strstr(err.msg, cases[k].says),
                          "case %d: %s", k, err.msg);
        else
            ck_assert_int_eq(convcache_image_pending(back), -1);
        convcache_free(c);
    }
    free(b);
    saved_free(&v);
}
END_TEST

/* A k8v4r2 file whose V scales are not ones the store writes (more than 7
 * significant bits, as files saved before the store rounded them have; or
 * above 56.5) is refused by name, by the load and by the check; the same
 * file untouched loads.  The card's attention decodes V one way only, which
 * such scales would make inexact. */
START_TEST(persist_v_scales_checked)
{
    saved v;
    saved_make(&v, STRATA_KV_K8V4R2, 80, 53, -1, "00000000000000dd" PERSIST_SUFFIX);
    strata_error err = {0};
    uint8_t *b = malloc(v.bytes);
    /* layer 1's V scales: after its K codes, K scales and V codes */
    size_t H = v.id.n_kv_head, n = 80;
    const uint32_t *rb = v.id.row_bytes;
    size_t lb = n * H * (rb[0] + rb[1] + rb[2] + rb[3]);
    size_t vd = 96 + n * 4 + lb + n * H * (rb[0] + rb[1] + rb[2]) + 2 * 37;
    struct {
        uint16_t set;  /* bits or'ed into the scale's magnitude */
        int rc;
    } cases[] = {{0, 0}, {0x0005, STRATA_E_FORMAT}, {0x5320, STRATA_E_FORMAT}};
    for (int k = 0; k < 3; k++) {
        memcpy(b, v.orig, v.bytes);
        b[vd] |= (uint8_t)cases[k].set;
        b[vd + 1] |= (uint8_t)(cases[k].set >> 8);
        rechecksum(b, v.bytes, 80, (int)v.id.n_layer);
        overwrite(v.path, b, v.bytes);
        convcache *c = plain_cache(v.e->n_stages);
        strata_err_clear(&err);
        int rc = persist_load_file(&v.id, c, v.path, NULL, &err);
        ck_assert_msg(rc == cases[k].rc, "case %d: rc %d: %s", k, rc, err.msg);
        if (rc) {
            ck_assert_msg(strstr(err.msg, v.path) && strstr(err.msg, "layer 1: V scale 37 is 0x"),
                          "case %d: %s", k, err.msg);
            convcache_stats st;
            convcache_get_stats(c, &st);
            ck_assert_int_eq(st.images, 0);
        }
        strata_err_clear(&err);
        ck_assert_int_eq(persist_verify_file(&v.id, v.path, &err), cases[k].rc);
        convcache_free(c);
    }
    free(b);
    saved_free(&v);
}
END_TEST

static Suite *persist_file_suite(void)
{
    Suite *s = suite_create("persist_file");
    TCase *tc = tcase_create("persist_file");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, persist_pending_token_saved);
    tcase_add_test(tc, persist_v_scales_checked);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(persist_file_suite)
