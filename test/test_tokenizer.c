/* test_tokenizer.c: suite "tokenizer".
 *
 * - the Unicode helpers and the byte<->symbol map;
 * - the hand-written pre-tokenizers against the Python `regex` module
 *   (test/scripts/tok_check.py --pieces) for gpt2, smollm, qwen2, llama3;
 * - on the demo model: ids equal to a Hugging Face `tokenizers` BPE built from
 *   the same GGUF (tok_check.py) on every string of test/data/tok_corpus.txt,
 *   plain and with special tokens parsed; decode(encode(s)) == s; streaming
 *   decode never emits half a character; invalid UTF-8; encode speed;
 * - small hand-made BPE and SPM vocabularies (no file needed): merge order,
 *   byte fallback, errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

#include "model/gguf.h"
#include "text/tokenizer.h"
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

/* ---- helpers ------------------------------------------------------------ */

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

/* Is s[0..n) valid UTF-8 throughout? */
static int valid_utf8(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += utf8_next((const unsigned char *)s + i, n - i, &cp);
        if (cp == UNICODE_INVALID)
            return 0;
    }
    return 1;
}

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

/* ---- Unicode and the byte map ------------------------------------------- */

START_TEST(utf8_decode_rejects_invalid)
{
    uint32_t cp;
    ck_assert_uint_eq(utf8_next((const unsigned char *)"\xE2\x82\xAC", 3, &cp), 3);
    ck_assert_uint_eq(cp, 0x20AC);
    ck_assert_uint_eq(utf8_next((const unsigned char *)"\xF0\x9F\x98\x80", 4, &cp), 4);
    ck_assert_uint_eq(cp, 0x1F600);
    static const char *bad[] = {"\x80", "\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80",
                                "\xF4\x90\x80\x80", "\xE2\x82", "\xFF"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_uint_eq(utf8_next((const unsigned char *)bad[i], strlen(bad[i]), &cp), 1);
        ck_assert_uint_eq(cp, UNICODE_INVALID);
    }
    char buf[4];
    ck_assert_uint_eq(utf8_put(0x1F600, buf), 4);
    ck_assert_mem_eq(buf, "\xF0\x9F\x98\x80", 4);
}
END_TEST

START_TEST(unicode_classes)
{
    ck_assert(unicode_is_letter('a') && unicode_is_letter(0x00E9) && unicode_is_letter(0x65E5));
    ck_assert(!unicode_is_letter('1') && !unicode_is_letter(' ') && !unicode_is_letter(0x1F600));
    ck_assert(unicode_is_number('7') && unicode_is_number(0x0663) && unicode_is_number(0x00BD));
    ck_assert(unicode_is_space(' ') && unicode_is_space('\n') && unicode_is_space(0x3000) &&
              unicode_is_space(0x00A0));
    ck_assert(!unicode_is_space(0x200B) && !unicode_is_space(0x1C));
}
END_TEST

START_TEST(bpe_byte_map)
{
    ck_assert_uint_eq(bpe_byte_to_cp(' '), 0x120);
    ck_assert_uint_eq(bpe_byte_to_cp('\n'), 0x10A);
    ck_assert_uint_eq(bpe_byte_to_cp('\t'), 0x109);
    ck_assert_uint_eq(bpe_byte_to_cp('A'), 'A');
    ck_assert_uint_eq(bpe_byte_to_cp(0xAD), 0x143);
    for (int b = 0; b < 256; b++)
        ck_assert_int_eq(bpe_cp_to_byte(bpe_byte_to_cp((uint8_t)b)), b);
}
END_TEST

/* ---- pre-tokenizers against Python's regex module ------------------------ */

typedef struct collect {
    char buf[1 << 16];
    size_t n;
} collect;

static int collect_piece(void *ctx, const char *p, size_t len)
{
    collect *c = ctx;
    static const char hex[] = "0123456789abcdef";
    if (c->n)
        c->buf[c->n++] = ',';
    for (size_t i = 0; i < len; i++) {
        c->buf[c->n++] = hex[(uint8_t)p[i] >> 4];
        c->buf[c->n++] = hex[(uint8_t)p[i] & 15];
    }
    c->buf[c->n] = '\0';
    return 0;
}

static void check_rule(const char *rule, enum tok_pre pre)
{
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "python3 %s/test/scripts/tok_check.py --pieces %s "
             "%s/test/data/tok_corpus.txt", test_root(), rule, test_root());
    ck_assert_int_eq(test_run(cmd, &out), 0);
    size_t lines = 0, bad = 0;
    static char text[1 << 15];
    static collect c;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char *tab = strchr(line, '\t');
        ck_assert_ptr_nonnull(tab);
        size_t n = hex_decode(line, (size_t)(tab - line), text);
        c.n = 0;
        c.buf[0] = '\0';
        ck_assert_int_eq(pretokenize(pre, text, n, collect_piece, &c), 0);
        if (strcmp(c.buf, tab + 1) != 0 && bad++ < 5)
            fprintf(stderr, "%s: '%.*s'\n  regex:  %s\n  strata: %s\n", rule,
                    (int)n, text, tab + 1, c.buf);
        lines++;
    }
    free(out);
    ck_assert_uint_ge(lines, 300);
    ck_assert_msg(bad == 0, "%s: %zu of %zu strings split differently", rule, bad, lines);
}

START_TEST(pretokenizers_match_regex)
{
    if (!test_have_python("regex"))
        TEST_SKIP("python", "python3 module regex missing");
    check_rule("gpt2", TOK_PRE_GPT2);
    check_rule("smollm", TOK_PRE_SMOLLM);
    check_rule("qwen2", TOK_PRE_QWEN2);
    check_rule("llama3", TOK_PRE_LLAMA3);
}
END_TEST

/* ---- the demo model --------------------------------------------------- */

START_TEST(demo_properties)
{
    tokenizer *t = test_demo_tokenizer();
    if (!t)
        TEST_SKIP("model", "demo model missing (make model)");
    ck_assert_uint_eq(tokenizer_n_vocab(t), 49152);
    ck_assert_int_eq(tokenizer_pre(t), TOK_PRE_SMOLLM);
    ck_assert_int_eq(tokenizer_bos(t), 1);
    ck_assert_int_eq(tokenizer_eos(t), 2);
    ck_assert(!tokenizer_add_bos(t));
    ck_assert(tokenizer_is_stop(t, 2) && tokenizer_is_stop(t, 0) && !tokenizer_is_stop(t, 1));
    ck_assert_int_eq(tokenizer_find(t, "<|im_start|>", 12), 1);
    ck_assert_int_eq(tokenizer_token_type(t, 1), TOKEN_TYPE_CONTROL);
    ck_assert_str_eq(tokenizer_token_text(t, 2), "<|im_end|>");
    size_t len;
    ck_assert_str_eq(tokenizer_token_bytes(t, 2, 0, &len), "");
    ck_assert_str_eq(tokenizer_token_bytes(t, 2, TOK_DECODE_SPECIAL, &len), "<|im_end|>");
    tokenizer_free(t);
}
END_TEST

START_TEST(demo_matches_hf_tokenizers)
{
    const char *model = test_demo_model();
    if (!model)
        TEST_SKIP("model", "demo model missing (make model)");
    if (!test_have_python("gguf,tokenizers"))
        TEST_SKIP("python", "python3 modules gguf, tokenizers missing");
    tokenizer *t = test_demo_tokenizer();
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "python3 %s/test/scripts/tok_check.py %s %s/test/data/tok_corpus.txt",
             test_root(), model, test_root());
    ck_assert_int_eq(test_run(cmd, &out), 0);
    static char text[1 << 15];
    tok_ids want = {0}, want_sp = {0}, got = {0}, got_sp = {0};
    size_t lines = 0, bad = 0;
    strata_error err = {0};
    char *save = NULL;
    for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *f1 = strchr(line, '\t');
        char *f2 = f1 ? strchr(f1 + 1, '\t') : NULL;
        ck_assert_ptr_nonnull(f2);
        *f1 = *f2 = '\0';
        size_t n = hex_decode(line, strlen(line), text);
        parse_ids(f1 + 1, &want);
        parse_ids(f2 + 1, &want_sp);
        got.n = got_sp.n = 0;
        ck_assert_int_eq(tokenizer_encode(t, text, n, 0, &got, &err), 0);
        ck_assert_int_eq(tokenizer_encode(t, text, n, TOK_ENCODE_SPECIAL, &got_sp, &err), 0);
        int ok = ids_equal(&got, &want) && ids_equal(&got_sp, &want_sp);
        if (!ok && bad++ < 5) {
            fprintf(stderr, "tokenizer: '%.*s'\n", (int)n, text);
            print_ids("hf", &want), print_ids("strata", &got);
            print_ids("hf special", &want_sp), print_ids("strata special", &got_sp);
        }
        /* decode(encode(s)) == s, special tokens rendered as their text */
        char *dec;
        size_t dlen;
        ck_assert_int_eq(tokenizer_decode(t, got_sp.ids, got_sp.n, TOK_DECODE_SPECIAL,
                                          &dec, &dlen, &err), 0);
        ck_assert_msg(dlen == n && memcmp(dec, text, n) == 0, "round trip of '%.*s'",
                      (int)n, text);
        free(dec);
        lines++;
    }
    ck_assert_uint_ge(lines, 300);
    ck_assert_msg(bad == 0, "%zu of %zu corpus strings differ from HF tokenizers", bad, lines);
    tok_ids_free(&want), tok_ids_free(&want_sp), tok_ids_free(&got), tok_ids_free(&got_sp);
    free(out);
    tokenizer_free(t);
}
END_TEST

/* Feed ids one by one; every chunk must be whole UTF-8 and the chunks must
 * add up to the text. */
static void stream_check(const tokenizer *t, const char *s)
{
    tok_ids ids = {0};
    strata_error err = {0};
    tokdec *d = NULL;
    char acc[4096];
    size_t n = 0, len;
    ck_assert_int_eq(tokenizer_encode(t, s, strlen(s), 0, &ids, &err), 0);
    ck_assert_int_eq(tokdec_new(t, 0, &d, &err), 0);
    for (size_t i = 0; i < ids.n; i++) {
        const char *o = tokdec_push(d, ids.ids[i], &len, &err);
        ck_assert_ptr_nonnull(o);
        ck_assert_msg(valid_utf8(o, len), "half a character after token %zu of '%s'", i, s);
        memcpy(acc + n, o, len);
        n += len;
    }
    tokdec_flush(d, &len);
    ck_assert_uint_eq(len, 0);
    ck_assert_uint_eq(n, strlen(s));
    ck_assert_mem_eq(acc, s, n);
    tokdec_free(d);
    tok_ids_free(&ids);
}

START_TEST(demo_stream_decode)
{
    tokenizer *t = test_demo_tokenizer();
    if (!t)
        TEST_SKIP("model", "demo model missing (make model)");
    stream_check(t, "😀😃😄 👨‍👩‍👧‍👦 🇺🇸");
    stream_check(t, "我爱北京天安门，繁體中文測試");
    stream_check(t, "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 and ﬁ and e\xCC\x81");
    /* A lone continuation token: U+FFFD, then normal text again. */
    tokdec *d;
    strata_error err = {0};
    size_t len;
    ck_assert_int_eq(tokdec_new(t, 0, &d, &err), 0);
    int32_t lead = tokenizer_find(t, "\xC3\xB0", 2);     /* symbol of byte 0xF0 */
    int32_t cont = tokenizer_find(t, "\xC2\xA2", 2);     /* symbol of byte 0xA2 */
    ck_assert(lead >= 0 && cont >= 0);
    ck_assert_str_eq(tokdec_push(d, cont, &len, &err), "\xEF\xBF\xBD");
    ck_assert_str_eq(tokdec_push(d, lead, &len, &err), "");
    ck_assert_str_eq(tokdec_push(d, tokenizer_find(t, "a", 1), &len, &err), "\xEF\xBF\xBD" "a");
    ck_assert_str_eq(tokdec_push(d, lead, &len, &err), "");
    ck_assert_str_eq(tokdec_flush(d, &len), "\xEF\xBF\xBD");
    ck_assert_ptr_null(tokdec_push(d, 49152, &len, &err));
    ck_assert_int_eq(err.code, STRATA_E_ARG);
    tokdec_free(d);
    tokenizer_free(t);
}
END_TEST

START_TEST(demo_invalid_utf8)
{
    tokenizer *t = test_demo_tokenizer();
    if (!t)
        TEST_SKIP("model", "demo model missing (make model)");
    /* Every byte here has a byte token in the demo vocabulary.  0xFE and
     * 0xFF do not (they never occur in UTF-8): those encode to unk. */
    static const char s[] = "ok \xC3 cut \xE2\x82 \xED\xA0\x80 surrogate \x80x \xF0\x9F\x98";
    size_t n = sizeof s - 1, len;
    tok_ids ids = {0};
    strata_error err = {0};
    char *dec;
    ck_assert_int_eq(tokenizer_encode(t, s, n, 0, &ids, &err), 0);
    ck_assert_int_eq(tokenizer_decode(t, ids.ids, ids.n, 0, &dec, &len, &err), 0);
    ck_assert_uint_eq(len, n); /* bytes survive the round trip */
    ck_assert_mem_eq(dec, s, n);
    free(dec);
    ids.n = 0;
    ck_assert_int_eq(tokenizer_encode(t, "\xFF", 1, 0, &ids, &err), 0);
    ck_assert_uint_eq(ids.n, 1);
    ck_assert_int_eq(ids.ids[0], 0); /* unknown_token_id */
    tok_ids_free(&ids);
    tokenizer_free(t);
}
END_TEST

START_TEST(demo_encode_speed)
{
    tokenizer *t = test_demo_tokenizer();
    if (!t)
        TEST_SKIP("model", "demo model missing (make model)");
    static const char para[] =
        "The engine reads the GGUF file, builds the tokenizer and runs the layers. "
        "Numbers like 3.14159 and 2024-05-09, code like for (int i = 0; i < n; i++) "
        "{ sum += a[i]; }, CJK 日本語のテキスト and emoji 😀 all appear.\n\n";
    size_t plen = sizeof para - 1, n = 0;
    char *text = malloc(10 * 1024 + plen);
    while (n < 10 * 1024) {
        memcpy(text + n, para, plen);
        n += plen;
    }
    tok_ids ids = {0};
    strata_error err = {0};
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int reps = 20;
    for (int r = 0; r < reps; r++) {
        ids.n = 0;
        ck_assert_int_eq(tokenizer_encode(t, text, n, 0, &ids, &err), 0);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ms = ((b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6) / reps;
    fprintf(stderr, "tokenizer: encode %zu bytes -> %zu tokens in %.3f ms (%.1f MB/s)\n",
            n, ids.n, ms, n / ms / 1e3);
    ck_assert_msg(ms < 50.0, "encoding 10 KB took %.1f ms", ms);
    /* A pathological piece: one 64 KB run of a letter. */
    char *run = malloc(65536);
    memset(run, 'a', 65536);
    clock_gettime(CLOCK_MONOTONIC, &a);
    ids.n = 0;
    ck_assert_int_eq(tokenizer_encode(t, run, 65536, 0, &ids, &err), 0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    ms = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
    fprintf(stderr, "tokenizer: 64 KB of 'a' -> %zu tokens in %.3f ms\n", ids.n, ms);
    ck_assert_msg(ms < 1000.0, "64 KB run took %.1f ms", ms); /* loose: shared CI machines */
    free(run);
    free(text);
    tok_ids_free(&ids);
    tokenizer_free(t);
}
END_TEST

/* ---- hand-made vocabularies --------------------------------------------- */

static gguf_str S(const char *s) { return (gguf_str){s, strlen(s)}; }

/* A tiny byte-level BPE: all 256 byte symbols, then merged tokens. */
static int make_bpe(const char *pre, tokenizer **t, strata_error *err)
{
    static char bytes[256][4];
    static gguf_str toks[256 + 8];
    static int32_t types[256 + 8];
    for (int b = 0; b < 256; b++) {
        size_t n = utf8_put(bpe_byte_to_cp((uint8_t)b), bytes[b]);
        toks[b] = (gguf_str){bytes[b], n};
        types[b] = TOKEN_TYPE_NORMAL;
    }
    const char *extra[] = {"ab", "bc", "abc", "Ġa", "Ġab", "<eos>"};
    for (int i = 0; i < 6; i++) {
        toks[256 + i] = S(extra[i]);
        types[256 + i] = i == 5 ? TOKEN_TYPE_CONTROL : TOKEN_TYPE_NORMAL;
    }
    /* "b c" ranks before "a b": "abc" must become a + bc, never ab + c. */
    static gguf_str merges[4];
    merges[0] = S("b c");
    merges[1] = S("a b");
    merges[2] = S("Ġ a");
    merges[3] = S("Ġa b");
    tokenizer_desc d;
    tokenizer_desc_init(&d);
    d.name = "tiny-bpe";
    d.model = "gpt2";
    d.pre = pre;
    d.n_vocab = 262;
    d.tokens = toks;
    d.types = types;
    d.n_merges = 4;
    d.merges = merges;
    d.eos = 261;
    return tokenizer_new(&d, t, err);
}

START_TEST(tiny_bpe_merge_order)
{
    tokenizer *t;
    strata_error err = {0};
    ck_assert_msg(make_bpe("gpt-2", &t, &err) == 0, "%s", err.msg);
    tok_ids v = {0};
    ck_assert_int_eq(tokenizer_encode(t, "abc ab<eos>", 11, TOK_ENCODE_SPECIAL, &v, &err), 0);
    /* "abc" -> a + bc (b c ranks first); " ab" -> Ġ + ab (a b ranks before
     * Ġ a, so Ġa and Ġab are never reached); then <eos>. */
    int32_t want[] = {'a', 257, ' ', 256, 261};
    ck_assert_uint_eq(v.n, 5);
    ck_assert_mem_eq(v.ids, want, sizeof want);
    v.n = 0; /* without TOK_ENCODE_SPECIAL the marker is plain text */
    ck_assert_int_eq(tokenizer_encode(t, "<eos>", 5, 0, &v, &err), 0);
    ck_assert_uint_eq(v.n, 5);
    ck_assert(tokenizer_is_stop(t, 261));
    tok_ids_free(&v);
    tokenizer_free(t);
}
END_TEST

START_TEST(tiny_bpe_errors)
{
    tokenizer *t = (tokenizer *)1;
    strata_error err = {0};
    ck_assert_int_eq(make_bpe("no-such-pre", &t, &err), STRATA_E_UNSUPPORTED);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err.msg, "tokenizer.ggml.pre") && strstr(err.msg, "no-such-pre"),
                  "%s", err.msg);
    tokenizer_desc d;
    tokenizer_desc_init(&d);
    gguf_str one = S("x");
    d.name = "f.gguf";
    d.model = "rwkv";
    d.n_vocab = 1;
    d.tokens = &one;
    ck_assert_int_eq(tokenizer_new(&d, &t, &err), STRATA_E_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "rwkv") != NULL, "%s", err.msg);
    d.model = "llama";
    d.bos = 5;
    ck_assert_int_eq(tokenizer_new(&d, &t, &err), STRATA_E_FORMAT);
    ck_assert_msg(strstr(err.msg, "bos_token_id = 5") != NULL, "%s", err.msg);
    tokenizer_free(NULL);
    tokdec_free(NULL);
    tok_ids_free(NULL);
}
END_TEST

/* A tiny SentencePiece vocabulary with scores and byte tokens. */
START_TEST(tiny_spm)
{
    static char bytes[256][8];
    gguf_str toks[256 + 16];
    int32_t types[256 + 16];
    float scores[256 + 16];
    const char *words[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "h", "e", "l", "o",
                           "\xE2\x96\x81h", "ll", "\xE2\x96\x81he", "llo",
                           "\xE2\x96\x81hello", "w", "r", "d"};
    const float sc[] = {0, 0, 0, -1, -2, -2, -2, -2, -5, -3, -6, -4, -7, -2, -2, -2};
    size_t n = 0;
    for (; n < 16; n++) {
        toks[n] = S(words[n]);
        types[n] = n < 3 ? (n == 0 ? TOKEN_TYPE_UNKNOWN : TOKEN_TYPE_CONTROL) : TOKEN_TYPE_NORMAL;
        scores[n] = sc[n];
    }
    for (int b = 0; b < 256; b++, n++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        toks[n] = S(bytes[b]);
        types[n] = TOKEN_TYPE_BYTE;
        scores[n] = 0;
    }
    tokenizer_desc d;
    tokenizer_desc_init(&d);
    d.name = "tiny-spm";
    d.model = "llama";
    d.n_vocab = n;
    d.tokens = toks;
    d.types = types;
    d.scores = scores;
    d.add_space_prefix = 1;
    tokenizer *t;
    strata_error err = {0};
    ck_assert_msg(tokenizer_new(&d, &t, &err) == 0, "%s", err.msg);
    ck_assert(tokenizer_add_bos(t));
    tok_ids v = {0};
    ck_assert_int_eq(tokenizer_encode(t, "hello w\xC3\xA9", 9, TOK_ENCODE_ADD_BOS, &v, &err), 0);
    /* <s> ▁hello ▁ w <0xC3> <0xA9> */
    int32_t want[] = {1, 12, 3, 13, 16 + 0xC3, 16 + 0xA9};
    ck_assert_uint_eq(v.n, 6);
    ck_assert_mem_eq(v.ids, want, sizeof want);
    char *dec;
    size_t len;
    ck_assert_int_eq(tokenizer_decode(t, v.ids + 1, v.n - 1, 0, &dec, &len, &err), 0);
    ck_assert_str_eq(dec, " hello w\xC3\xA9");
    free(dec);
    tok_ids_free(&v);
    tokenizer_free(t);
}
END_TEST

static Suite *tokenizer_suite(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, utf8_decode_rejects_invalid);
    tcase_add_test(tc, unicode_classes);
    tcase_add_test(tc, bpe_byte_map);
    tcase_add_test(tc, pretokenizers_match_regex);
    tcase_add_test(tc, demo_properties);
    tcase_add_test(tc, demo_matches_hf_tokenizers);
    tcase_add_test(tc, demo_stream_decode);
    tcase_add_test(tc, demo_invalid_utf8);
    tcase_add_test(tc, demo_encode_speed);
    tcase_add_test(tc, tiny_bpe_merge_order);
    tcase_add_test(tc, tiny_bpe_errors);
    tcase_add_test(tc, tiny_spm);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(tokenizer_suite)
