/* test_nfc.c: suite "nfc": Unicode NFC (text/unicode_nfc.c) and the
 * tokenizers that apply it.
 *
 * - NFC equal to Python's unicodedata.normalize('NFC') (test/scripts/
 *   nfc_check.py) on every character the tables touch, alone and
 *   decomposed, hand-picked cases (mark order, blocking, exclusions,
 *   singletons, Hangul from jamo) and 4000 random strings;
 * - fixed cases that need no Python: stray bytes, the fast path, the tables;
 * - a qwen2 tokenizer (a mkmodel file) equal to a Hugging Face `tokenizers`
 *   one with Qwen's NFC normalizer (test/scripts/tok_check.py) on decomposed
 *   text; the same strings without NFC must differ (so the test can fail);
 * - speed, printed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

#include "model/gguf.h"
#include "text/tokenizer.h"
#include "text/tokenizer_impl.h"
#include "text/unicode_nfc.h"

static size_t hex_decode(const char *h, size_t n, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i + 1 < n; i += 2) {
        unsigned v;
        sscanf(h + i, "%2x", &v);
        out[k++] = (char)v;
    }
    return k;
}

static void print_hex(const char *what, const char *s, size_t n)
{
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %02X", (unsigned char)s[i]);
    fprintf(stderr, "\n");
}

/* NFC of s must be want (strings of the given lengths); 1 if so. */
static int nfc_is(const char *s, size_t n, const char *want, size_t wn)
{
    char *o = NULL;
    size_t on = 0;
    ck_assert_int_eq(unicode_nfc(s, n, &o, &on), 0);
    const char *got = o ? o : s;
    size_t gn = o ? on : n;
    /* NULL means "already NFC"; a copy must then differ from the input */
    int ok = gn == wn && memcmp(got, want, wn) == 0 &&
             (!o || on != n || memcmp(o, s, n) != 0) && (!o || o[on] == '\0');
    if (!ok) {
        print_hex("input ", s, n);
        print_hex("python", want, wn);
        print_hex("strata", got, gn);
    }
    free(o);
    return ok;
}

START_TEST(nfc_matches_python)
{
    if (!test_have_python("unicodedata"))
        TEST_SKIP("python", "python3 missing");
    char *out = NULL;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "python3 %s/test/scripts/nfc_check.py --unicode %s", test_root(),
             unicode_nfc_version);
    ck_assert_int_eq(test_run(cmd, &out), 0);
    /* the oracle must be the version the tables were made from: CI's python3
     * is; another one differs on the characters added in between */
    char pyver[32];
    if (sscanf(out, "unicode-version %31s", pyver) == 1) {
        static char why[128];
        snprintf(why, sizeof why, "python3's unicodedata is Unicode %s, the tables %s", pyver,
                 unicode_nfc_version);
        free(out);
        TEST_SKIP("python", why);
    }
    static char in[4096], want[4096];
    size_t lines = 0, bad = 0, changed = 0;
    char *save = NULL;
    for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *tab = strchr(line, '\t');
        ck_assert_ptr_nonnull(tab);
        ck_assert_uint_lt(strlen(line), 2 * sizeof in);
        size_t n = hex_decode(line, (size_t)(tab - line), in);
        size_t wn = hex_decode(tab + 1, strlen(tab + 1), want);
        changed += wn != n || memcmp(in, want, n) != 0;
        if (!nfc_is(in, n, want, wn) && bad++ >= 5)
            break;
        lines++;
    }
    free(out);
    fprintf(stderr, "nfc: %zu strings equal to Python's NFC (%zu changed by it)\n", lines,
            changed);
    ck_assert_msg(bad == 0, "%zu strings differ from Python's NFC (first ones above)", bad);
    ck_assert_uint_ge(lines, 30000);
    ck_assert_uint_ge(changed, 10000);
}
END_TEST

#define IS(in, want) ck_assert(nfc_is(in, sizeof in - 1, want, sizeof want - 1))

START_TEST(nfc_fixed_cases)
{
    IS("", "");
    IS("plain ASCII stays", "plain ASCII stays");
    IS("Caf\xC3\xA9", "Caf\xC3\xA9");                        /* NFC already */
    IS("Cafe\xCC\x81", "Caf\xC3\xA9");                       /* e + U+0301 */
    IS("a\xCC\x81\xCC\xA3", "\xE1\xBA\xA1\xCC\x81");         /* ordered, then Ạ + ́ */
    IS("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81"); /* jamo -> 각 */
    IS("\xEA\xB0\x80\xE1\x86\xA8", "\xEA\xB0\x81");           /* 가 + T -> 각 */
    IS("\xE0\xA5\x98", "\xE0\xA4\x95\xE0\xA4\xBC");          /* U+0958: excluded */
    IS("\xE2\x84\xAB", "\xC3\x85");                          /* U+212B -> Å */
    /* Stray bytes pass through and block composition across them. */
    IS("e\xFF\xCC\x81", "e\xFF\xCC\x81");
    IS("e\xCC\x81\xFF", "\xC3\xA9\xFF");
    IS("e\xCC", "e\xCC");                                    /* truncated */
    IS("\xCC\x81\x80" "e\xCC\x81", "\xCC\x81\x80\xC3\xA9");
    ck_assert_int_eq(unicode_ccc_of(0x0301), 230);
    ck_assert_int_eq(unicode_ccc_of(0x0323), 220);
    ck_assert_int_eq(unicode_ccc_of('a'), 0);
    ck_assert_uint_eq(unicode_compose_pair('A', 0x030A), 0x00C5);
    ck_assert_uint_eq(unicode_compose_pair(0x1100, 0x1161), 0xAC00);
    ck_assert_uint_eq(unicode_compose_pair(0xAC00, 0x11A8), 0xAC01);
    ck_assert_uint_eq(unicode_compose_pair(0xAC01, 0x11A8), 0);     /* LVT + T */
    ck_assert_uint_eq(unicode_compose_pair(0xAC00, 0x11A7), 0);     /* T base */
    ck_assert_uint_eq(unicode_compose_pair(0x0915, 0x093C), 0);     /* excluded */
}
END_TEST

/* ---- the tokenizer ------------------------------------------------------ */

static void parse_ids(char *s, tok_ids *v)
{
    v->n = 0;
    for (char *tok = strtok(s, " "); tok; tok = strtok(NULL, " "))
        ck_assert_int_eq(tok_ids_push(v, (int32_t)atoi(tok)), 0);
}

static int ids_equal(const tok_ids *a, const tok_ids *b)
{
    return a->n == b->n && memcmp(a->ids, b->ids, a->n * sizeof *a->ids) == 0;
}

static void print_ids(const char *what, const tok_ids *v)
{
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < v->n; i++)
        fprintf(stderr, " %d", v->ids[i]);
    fprintf(stderr, "\n");
}

/* Compare strata with tok_check.py on one corpus; *differ counts strings
 * whose ids change when the tokenizer skips NFC. */
static void compare_corpus(tokenizer *t, const char *model, const char *flag,
                           const char *corpus, size_t min_lines, size_t *differ)
{
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "python3 %s/test/scripts/tok_check.py %s %s %s/test/data/%s",
             test_root(), flag, model, test_root(), corpus);
    ck_assert_int_eq(test_run(cmd, &out), 0);
    static char text[1 << 15];
    tok_ids want = {0}, want_sp = {0}, got = {0}, got_sp = {0}, raw = {0};
    size_t lines = 0, bad = 0;
    strata_error err = {0};
    char *save = NULL;
    for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *f1 = strchr(line, '\t');
        char *f2 = f1 ? strchr(f1 + 1, '\t') : NULL;
        ck_assert_ptr_nonnull(f2);
        *f1 = *f2 = '\0';
        ck_assert_uint_lt(strlen(line), 2 * sizeof text);
        size_t n = hex_decode(line, strlen(line), text);
        parse_ids(f1 + 1, &want);
        parse_ids(f2 + 1, &want_sp);
        got.n = got_sp.n = raw.n = 0;
        ck_assert_int_eq(tokenizer_encode(t, text, n, 0, &got, &err), 0);
        ck_assert_int_eq(tokenizer_encode(t, text, n, TOK_ENCODE_SPECIAL, &got_sp, &err), 0);
        t->nfc = false; /* what strata did before: the oracle must see it */
        ck_assert_int_eq(tokenizer_encode(t, text, n, 0, &raw, &err), 0);
        t->nfc = true;
        *differ += !ids_equal(&raw, &want);
        if (!(ids_equal(&got, &want) && ids_equal(&got_sp, &want_sp)) && bad++ < 5) {
            fprintf(stderr, "%s: '%.*s'\n", corpus, (int)n, text);
            print_ids("hf", &want), print_ids("strata", &got);
            print_ids("hf special", &want_sp), print_ids("strata special", &got_sp);
        }
        lines++;
    }
    fprintf(stderr, "nfc: %s%s%s: %zu strings, %zu equal to HF tokenizers\n", corpus,
            *flag ? " " : "", flag, lines, lines - bad);
    ck_assert_uint_ge(lines, min_lines);
    ck_assert_msg(bad == 0, "%s: %zu of %zu strings differ from HF tokenizers", corpus, bad,
                  lines);
    tok_ids_free(&want), tok_ids_free(&want_sp), tok_ids_free(&got), tok_ids_free(&got_sp);
    tok_ids_free(&raw);
    free(out);
}

START_TEST(qwen2_nfc_matches_hf_tokenizers)
{
    if (!test_cli())
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset)");
    if (!test_have_python("gguf,tokenizers,regex"))
        TEST_SKIP("python", "python3 modules gguf, tokenizers, regex missing");
    const char *model = test_mkmodel("--arch qwen2 --layers 1 --dim 64 --heads 2 --ff 128 "
                                     "--vocab 2048 --type f32 --seed 11");
    gguf *g = NULL;
    tokenizer *t = NULL;
    strata_error err = {0};
    ck_assert_msg(gguf_open(model, &g, &err) == 0, "%s", err.msg);
    ck_assert_msg(tokenizer_from_gguf(g, &t, &err) == 0, "%s", err.msg);
    gguf_close(g);
    ck_assert_int_eq(tokenizer_pre(t), TOK_PRE_QWEN2);
    ck_assert(tokenizer_nfc(t));
    size_t differ = 0;
    compare_corpus(t, model, "--nfd", "tok_corpus.txt", 300, &differ);
    compare_corpus(t, model, "", "nfc_corpus.txt", 20, &differ);
    fprintf(stderr, "nfc: %zu strings tokenize differently without NFC\n", differ);
    ck_assert_uint_ge(differ, 40);
    tokenizer_free(t);
}
END_TEST

/* Only the qwen2 family normalizes (doc/tokenizer.md, "NFC"). */
START_TEST(nfc_only_for_qwen2)
{
    static const struct { const char *pre; bool nfc; } cases[] = {
        {"qwen2", true}, {"deepseek-r1-qwen", true}, {"smollm", false},
        {"llama-bpe", false}, {"llama3", false}, {"gpt-2", false}, {NULL, false},
    };
    gguf_str toks[259];
    char bytes[256][8];
    for (int b = 0; b < 256; b++) {
        size_t n = utf8_put(bpe_byte_to_cp((uint8_t)b), bytes[b]);
        toks[b] = (gguf_str){.p = bytes[b], .len = n};
    }
    toks[256] = (gguf_str){.p = "<a>", .len = 3};
    toks[257] = (gguf_str){.p = "<b>", .len = 3};
    toks[258] = (gguf_str){.p = "<c>", .len = 3};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tokenizer_desc d;
        tokenizer_desc_init(&d);
        d.model = "gpt2";
        d.pre = cases[i].pre;
        d.n_vocab = 259;
        d.tokens = toks;
        tokenizer *t = NULL;
        strata_error err = {0};
        ck_assert_msg(tokenizer_new(&d, &t, &err) == 0, "%s", err.msg);
        ck_assert_msg(tokenizer_nfc(t) == cases[i].nfc, "pre %s", cases[i].pre);
        /* e + U+0301: one byte token per byte, so NFC shows in the count */
        tok_ids ids = {0};
        ck_assert_int_eq(tokenizer_encode(t, "e\xCC\x81", 3, 0, &ids, &err), 0);
        ck_assert_uint_eq(ids.n, cases[i].nfc ? 2 : 3);
        tok_ids_free(&ids);
        tokenizer_free(t);
    }
}
END_TEST

/* ---- speed ------------------------------------------------------------- */

static double mb_per_s(const char *unit, size_t reps)
{
    size_t ul = strlen(unit), n = ul * reps;
    char *s = malloc(n);
    ck_assert_ptr_nonnull(s);
    for (size_t i = 0; i < reps; i++)
        memcpy(s + i * ul, unit, ul);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    char *o = NULL;
    size_t on;
    ck_assert_int_eq(unicode_nfc(s, n, &o, &on), 0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    free(o);
    free(s);
    double t = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    return (double)n / 1048576.0 / (t > 0 ? t : 1e-9);
}

START_TEST(nfc_speed)
{
    double ascii = mb_per_s("The quick brown fox jumps over the lazy dog. ", 1 << 16);
    double mixed = mb_per_s("Gr\xC3\xBC\xC3\x9F" "e \xE4\xB8\xAD\xE6\x96\x87 "
                            "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 e\xCC\x81 ", 1 << 16);
    fprintf(stderr, "nfc: %.0f MB/s on ASCII (fast path), %.1f MB/s on German, Chinese, "
            "Korean and a decomposed e\n", ascii, mixed);
    /* linear: 1.8 MiB within seconds even under a sanitizer on a loaded box
     * (a quadratic walk would take hours) */
    ck_assert(mixed > 0.25);
}
END_TEST

static Suite *nfc_suite(void)
{
    Suite *s = suite_create("nfc");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, nfc_matches_python);
    tcase_add_test(tc, nfc_fixed_cases);
    tcase_add_test(tc, qwen2_nfc_matches_hf_tokenizers);
    tcase_add_test(tc, nfc_only_for_qwen2);
    tcase_add_test(tc, nfc_speed);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(nfc_suite)
