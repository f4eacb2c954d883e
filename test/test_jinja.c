/* test_jinja.c: suite "jinja": the chat-template interpreter against
 * Python's jinja2 (test/scripts/jinja_oracle.py renders the real templates
 * of test/data/templates and a set of small construct templates; every
 * output must be equal byte for byte, and where jinja2 fails strata must
 * fail too), then each error and each limit by itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "test_jinja.h"

#include "model/gguf.h"
#include "text/jinja.h"

enum { NOW = 1700000000 }; /* the oracle's strftime_now clock */

/* ---- the oracle's records ------------------------------------------------ */
typedef struct rec_reader {
    const char *p, *end;
} rec_reader;

/* One "TAG LEN\n<bytes>\n" record; 0 at the end. */
static int next_rec(rec_reader *r, char *tag, const char **data, size_t *len)
{
    if (r->p >= r->end)
        return 0;
    char *nl = memchr(r->p, '\n', (size_t)(r->end - r->p));
    ck_assert_msg(nl != NULL, "oracle output: a record without a header line");
    *tag = r->p[0];
    *len = strtoul(r->p + 2, NULL, 10);
    *data = nl + 1;
    ck_assert_msg(*data + *len < r->end || (*data + *len == r->end - 1),
                  "oracle output: record '%c' runs past the end", *tag);
    r->p = *data + *len + 1;
    return 1;
}

static char *dup_n(const char *p, size_t n)
{
    char *s = malloc(n + 1);
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

/* Where two strings first differ, with a little context, escaped. */
static void show_diff(const char *want, size_t wn, const char *got, size_t gn, char *buf,
                      size_t cap)
{
    size_t i = 0;
    while (i < wn && i < gn && want[i] == got[i])
        i++;
    size_t from = i > 30 ? i - 30 : 0;
    char w[200], g[200];
    size_t a = 0, b = 0;
    for (size_t k = from; k < wn && k < from + 70 && a < sizeof w - 5; k++)
        a += (size_t)snprintf(w + a, sizeof w - a, want[k] == '\n' ? "\\n" : "%c", want[k]);
    for (size_t k = from; k < gn && k < from + 70 && b < sizeof g - 5; k++)
        b += (size_t)snprintf(g + b, sizeof g - b, got[k] == '\n' ? "\\n" : "%c", got[k]);
    snprintf(buf, cap, "first difference at byte %zu (want %zu bytes, got %zu)\n  want ...%s\n  got  ...%s",
             i, wn, gn, w, g);
}

START_TEST(matches_jinja2)
{
    if (!test_have_python("jinja2"))
        TEST_SKIP("python", "python3 without jinja2");
    char *out = NULL;
    int rc = test_runf(&out, "python3 %s/test/scripts/jinja_oracle.py %s/test/data/templates",
                       test_root(), test_root());
    ck_assert_msg(rc == 0 && out, "jinja_oracle.py failed (%d)", rc);
    /* test_run gives a NUL-terminated string; rendered text has no NUL. */
    rec_reader r = {out, out + strlen(out)};
    char tag;
    const char *data;
    size_t len;
    char *name = NULL, *src = NULL;
    size_t src_n = 0;
    jinja_msg msgs[16];
    char *owned[32];
    size_t nm = 0, no = 0;
    bool gen = false;
    int cases = 0, fails = 0, files = 0;
    char first_fail[1500] = "";
    while (next_rec(&r, &tag, &data, &len)) {
        switch (tag) {
        case 'N': free(name); name = dup_n(data, len); break;
        case 'S': free(src); src = dup_n(data, len); src_n = len; break;
        case 'G': gen = data[0] == '1'; break;
        case 'R':
            ck_assert_int_lt(nm, 16);
            owned[no++] = dup_n(data, len);
            msgs[nm].role = owned[no - 1];
            break;
        case 'C':
            owned[no++] = dup_n(data, len);
            msgs[nm++].content = owned[no - 1];
            break;
        case 'O': case 'X': {
            cases++;
            files += strchr(name, '#') && strstr(name, "#0") != NULL;
            jinja_template *t = NULL;
            strata_error err = {0};
            char *got = NULL;
            size_t got_n = 0;
            jinja_chat_ctx ctx = {msgs, nm, gen, "<|bos|>", "<|eos|>", NOW};
            int prc = jinja_parse(src, src_n, &t, &err);
            int rrc = prc ? prc : jinja_render_chat(t, &ctx, NULL, &got, &got_n, &err);
            char why[1200] = "";
            if (tag == 'O' && rrc)
                snprintf(why, sizeof why, "strata failed: %s", err.msg);
            else if (tag == 'X' && !rrc)
                snprintf(why, sizeof why, "jinja2 failed (%.*s) but strata rendered %zu bytes",
                         (int)(len > 200 ? 200 : len), data, got_n);
            else if (tag == 'O' && (got_n != len || memcmp(got, data, len) != 0))
                show_diff(data, len, got, got_n, why, sizeof why);
            if (why[0]) {
                fails++;
                fprintf(stderr, "jinja: %s: %s\n", name, why);
                if (!first_fail[0])
                    snprintf(first_fail, sizeof first_fail, "%s: %s", name, why);
            }
            free(got);
            jinja_free(t);
            break;
        }
        case '.':
            for (size_t k = 0; k < no; k++)
                free(owned[k]);
            nm = no = 0;
            break;
        default: ck_abort_msg("oracle output: unknown record '%c'", tag);
        }
    }
    free(name);
    free(src);
    free(out);
    fprintf(stderr, "jinja: %d cases (%d real templates), %d differ from jinja2\n", cases,
            files, fails);
    ck_assert_msg(cases > 100 && files >= 10, "too few oracle cases (%d, %d templates)", cases,
                  files);
    ck_assert_msg(fails == 0, "%d of %d renderings differ from jinja2; first: %s", fails, cases,
                  first_fail);
}
END_TEST

/* ---- errors and limits --------------------------------------------------- */
static int render_src(const char *src, const jinja_limits *lim, char **out, strata_error *err)
{
    jinja_template *t = NULL;
    jinja_msg m[] = {{"user", "Hi"}, {"assistant", "Hello"}};
    jinja_chat_ctx ctx = {m, 2, true, "<s>", "</s>", NOW};
    *out = NULL;
    int rc = jinja_parse(src, strlen(src), &t, err);
    if (!rc)
        rc = jinja_render_chat(t, &ctx, lim, out, NULL, err);
    jinja_free(t);
    return rc;
}

static void expect_error(const char *src, int code, const char *w1, const char *w2)
{
    char *out;
    strata_error err = {0};
    int rc = render_src(src, NULL, &out, &err);
    ck_assert_msg(rc == code, "%s: rc %d, want %d (%s)", src, rc, code, err.msg);
    ck_assert_ptr_null(out);
    ck_assert_msg(strstr(err.msg, w1) && (!w2 || strstr(err.msg, w2)),
                  "%s: message '%s' lacks '%s'/'%s'", src, err.msg, w1, w2 ? w2 : "");
}

START_TEST(errors_name_line_and_cause)
{
    expect_error("a\n{{ x | frobnicate }}", STRATA_E_UNSUPPORTED, "line 2", "unknown filter 'frobnicate'");
    expect_error("{{ x is shiny }}", STRATA_E_UNSUPPORTED, "line 1", "unknown test 'shiny'");
    expect_error("{% for m in messages %}\n\nx", STRATA_E_FORMAT, "never closed", "endfor");
    expect_error("{% if true %}x", STRATA_E_FORMAT, "'{% if %}' opened on line 1", NULL);
    expect_error("{% endif %}", STRATA_E_FORMAT, "unexpected '{% endif %}'", NULL);
    expect_error("x\n\n{{ 'a' ", STRATA_E_FORMAT, "line 3", "unclosed '{{'");
    expect_error("{# never closed", STRATA_E_FORMAT, "unclosed comment", NULL);
    expect_error("{{ 'abc }}", STRATA_E_FORMAT, "unterminated string", NULL);
    expect_error("{% include 'x.j2' %}", STRATA_E_UNSUPPORTED, "unsupported tag 'include'", NULL);
    expect_error("{% import 'x' as y %}", STRATA_E_UNSUPPORTED, "unsupported tag 'import'", NULL);
    expect_error("{% break %}", STRATA_E_FORMAT, "'break' outside a loop", NULL);
    expect_error("\n{{ raise_exception('bad role: ' ~ messages[0].role) }}", STRATA_E_ARG,
                 "line 2", "raise_exception: bad role: user");
    expect_error("{{ nothing.attr }}", STRATA_E_ARG, "line 1", "'attr' of an undefined");
    expect_error("{{ 'a' + 1 }}", STRATA_E_TYPE, "unsupported operand types for +: str and int", NULL);
    expect_error("{{ 1 // 0 }}", STRATA_E_ARG, "division or modulo by zero", NULL);
    expect_error("{{ open('/etc/passwd') }}", STRATA_E_UNSUPPORTED, "'open' is undefined", NULL);
    expect_error("{{ ''.__class__ }}x{{ messages.append(1) }}", STRATA_E_UNSUPPORTED,
                 "list has no method 'append'", NULL);
    expect_error("{% set x = 1 %}{% set x.y = 2 %}", STRATA_E_TYPE, "only on a namespace()", NULL);
    expect_error("{{ 9223372036854775807 + 1 }}", STRATA_E_UNSUPPORTED, "integer overflow", NULL);
    expect_error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", STRATA_E_ARG, "at most 1", NULL);
    expect_error("{{ (1 }}", STRATA_E_FORMAT, "line 1", NULL);
    expect_error("{{ 1 ) }}", STRATA_E_FORMAT, "unexpected ')'", NULL);
    expect_error("{% for %}", STRATA_E_FORMAT, "expected a name", NULL);
}
END_TEST

START_TEST(limits_stop_hostile_templates)
{
    jinja_limits lim = jinja_default_limits();
    char *out;
    strata_error err = {0};
    /* Output: a doubling string. */
    lim.max_output = 1000;
    ck_assert_int_eq(render_src("{% for i in range(100) %}{{ 'x' * 50 }}{% endfor %}", &lim, &out,
                                &err), STRATA_E_LIMIT);
    ck_assert_msg(strstr(err.msg, "output longer than 1000 bytes"), "%s", err.msg);
    /* Memory: strings built in a loop without printing them. */
    lim = jinja_default_limits();
    lim.max_memory = 1 << 20;
    ck_assert_int_eq(render_src("{% set ns = namespace(s='x') %}{% for i in range(40) %}"
                                "{% set ns.s = ns.s ~ ns.s %}{% endfor %}", &lim, &out, &err),
                     STRATA_E_LIMIT);
    ck_assert_msg(strstr(err.msg, "memory"), "%s", err.msg);
    ck_assert_int_eq(render_src("{{ 'ab' * 100000000 }}", &lim, &out, &err), STRATA_E_LIMIT);
    /* Steps: nested loops that would run 10^12 times. */
    lim = jinja_default_limits();
    lim.max_steps = 100000;
    ck_assert_int_eq(render_src("{% for a in range(1000000) %}{% for b in range(1000000) %}"
                                "{% endfor %}{% endfor %}", &lim, &out, &err), STRATA_E_LIMIT);
    ck_assert_msg(strstr(err.msg, "steps"), "%s", err.msg);
    /* Depth: a macro calling itself. */
    lim = jinja_default_limits();
    ck_assert_int_eq(render_src("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", &lim,
                                &out, &err), STRATA_E_LIMIT);
    ck_assert_msg(strstr(err.msg, "nested deeper than 64"), "%s", err.msg);
    /* Parse depth: 10000 nested nots and parentheses. */
    size_t n = 10000;
    char *deep = malloc(4 * n + 16); /* holds 2n parentheses too */
    strcpy(deep, "{{ ");
    for (size_t i = 0; i < n; i++)
        strcat(deep + 3 + 4 * i, "not ");
    strcat(deep, "1 }}");
    ck_assert_int_eq(render_src(deep, NULL, &out, &err), STRATA_E_LIMIT);
    ck_assert_msg(strstr(err.msg, "nested deeper"), "%s", err.msg);
    strcpy(deep, "{{ ");
    memset(deep + 3, '(', 2 * n);
    strcpy(deep + 3 + 2 * n, "1 }}");
    ck_assert_int_eq(render_src(deep, NULL, &out, &err), STRATA_E_LIMIT);
    ck_assert_msg(strstr(err.msg, "brackets nested too deep"), "%s", err.msg);
    free(deep);
    /* Work that would loop on a huge count: answered at once, or stopped. */
    ck_assert_int_eq(render_src("{{ (-1) ** 9223372036854775807 }}{{ 1 ** 9223372036854775807 }}"
                                "{{ '' * 1000000000000000000 }}{{ [] * 1000000000000000000 }}",
                                NULL, &out, &err), 0);
    ck_assert_str_eq(out, "-11[]");
    free(out);
    ck_assert_int_eq(render_src("{{ 2 ** 64 }}", NULL, &out, &err), STRATA_E_UNSUPPORTED);
    ck_assert_int_eq(render_src("{{ range(1000000000000) | length }}", NULL, &out, &err),
                     STRATA_E_LIMIT);
    ck_assert_int_eq(render_src("{% set s = 'b' * 4000000 %}{{ s.strip('c' * 4000000 ~ 'b') | length }}",
                                NULL, &out, &err), STRATA_E_LIMIT);
    /* Values nested without end: a list in a list 10000 times, a
     * namespace holding itself (jinja2 would recurse until Python stops
     * it). */
    ck_assert_int_eq(render_src("{% set ns = namespace(x=[]) %}{% for i in range(10000) %}"
                                "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x == ns.x }}", NULL, &out,
                                &err), STRATA_E_LIMIT);
    ck_assert_msg(strstr(err.msg, "nested deeper than 200"), "%s", err.msg);
    ck_assert_int_eq(render_src("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", NULL,
                                &out, &err), STRATA_E_LIMIT);
    ck_assert_int_eq(render_src("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns | tojson }}",
                                NULL, &out, &err), STRATA_E_LIMIT);
    /* Within the limits the same kinds of template render. */
    ck_assert_int_eq(render_src("{% macro f(n) %}{% if n < 10 %}{{ f(n + 1) }}{% else %}{{ n }}"
                                "{% endif %}{% endmacro %}{{ f(0) }}", NULL, &out, &err), 0);
    ck_assert_str_eq(out, "10");
    free(out);
}
END_TEST

/* What chat.c relies on: the demo model's template renders what the
 * built-in ChatML renderer does (test_chat checks that path end to end). */
START_TEST(smollm_template_renders)
{
    static const char tmpl[] =
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
        "Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
        "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|im_start|>assistant\n' }}{% endif %}";
    char *out;
    strata_error err = {0};
    ck_assert_int_eq(render_src(tmpl, NULL, &out, &err), 0);
    ck_assert_str_eq(out, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
                          "trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                          "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>assistant\n");
    free(out);
}
END_TEST

/* ---- the model's template through strata-cli ------------------------------
 * The tiny llama's GGUF carries a ChatML template; a copy gets another
 * template of the same byte length written over it (the GGUF string's
 * length prefix stays right), padded with a Jinja comment. */
static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "open %s", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    char *b = malloc(*n);
    ck_assert_int_eq(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

char *test_gguf_with_template(const char *model, const char *tmpl, const char *name)
{
    size_t n;
    char *buf = read_file(model, &n);
    gguf *g;
    gguf_str old;
    strata_error err = {0};
    ck_assert_msg(gguf_open(model, &g, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(gguf_get_str(g, "tokenizer.chat_template", &old, &err), 0);
    char *at = memmem(buf, n, old.p, old.len);
    ck_assert_ptr_nonnull(at);
    size_t len = strlen(tmpl);
    ck_assert_msg(len + 4 <= old.len, "template longer than the model's (%zu)", (size_t)old.len);
    memcpy(at, tmpl, len);
    memcpy(at + len, "{#", 2);
    memset(at + len + 2, ' ', old.len - len - 4);
    memcpy(at + old.len - 2, "#}", 2);
    gguf_close(g);
    char *path = malloc(4096);
    snprintf(path, 4096, "%s/%s.gguf", test_tmpdir(), name);
    FILE *f = fopen(path, "wb");
    ck_assert_int_eq(fwrite(buf, 1, n, f), n);
    fclose(f);
    free(buf);
    return path;
}

/* The prompt token count of `run --chat -p PROMPT` (its stats line), or -1
 * with the output in *out when it failed. */
static int prompt_tokens(const char *cli, const char *model, const char *prompt,
                         const char *extra, char **out)
{
    int rc = test_runf(out, "'%s' run --chat -m '%s' -p '%s' -n 2 --temp 0 --backend cpu %s 2>&1 "
                       "| tr -d '\\000'", cli, model, prompt, extra);
    const char *p = *out ? strstr(*out, "strata: prompt ") : NULL;
    if (rc || !p)
        return -1;
    return atoi(p + strlen("strata: prompt "));
}

START_TEST(cli_uses_model_template)
{
    const char *cli = test_cli();
    if (!cli)
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset; run via make test)");
    const char *model = test_tiny_llama("chat-cli-llama", 400, 11);
    char *out = NULL;
    int base = prompt_tokens(cli, model, "hi", "", &out);
    ck_assert_msg(base > 0, "run --chat on the tiny llama:\n%s", out);
    free(out);
    /* A template that ignores the messages: the same prompt for any text,
     * unlike the model's own. */
    char *fixed = test_gguf_with_template(model, "{{ 'one two three four five six seven' }}", "fixed");
    int a = prompt_tokens(cli, fixed, "hi", "", &out);
    ck_assert_msg(a > 0, "%s", out);
    free(out);
    int b = prompt_tokens(cli, fixed, "hi hi hi hi hi hi hi hi", "", &out);
    ck_assert_msg(b == a, "the model's template was not used: %d then %d tokens\n%s", a, b, out);
    free(out);
    int c = prompt_tokens(cli, model, "hi hi hi hi hi hi hi hi", "", &out);
    ck_assert_msg(c > base, "%d, %d", base, c);
    free(out);
    /* --chat-template NAME still overrides the model's template. */
    int d = prompt_tokens(cli, fixed, "hi", "--chat-template chatml", &out);
    ck_assert_msg(d == base, "--chat-template chatml: %d tokens, the built-in gives %d\n%s", d,
                  base, out);
    free(out);
    /* A template that fails: the error names the model file and the line. */
    char *bad = test_gguf_with_template(model, "{% if messages %}\n{{ raise_exception('no chat here') }}"
                              "{% endif %}", "raises");
    ck_assert_int_eq(prompt_tokens(cli, bad, "hi", "", &out), -1);
    ck_assert_msg(strstr(out, bad) && strstr(out, "line 2") &&
                  strstr(out, "raise_exception: no chat here"), "%s", out);
    free(out);
    /* One that does not parse: refused when the model opens, by name. */
    char *broken = test_gguf_with_template(model, "{% for m in messages %}", "broken");
    ck_assert_int_eq(prompt_tokens(cli, broken, "hi", "", &out), -1);
    ck_assert_msg(strstr(out, broken) && strstr(out, "never closed") &&
                  strstr(out, "--chat-template"), "%s", out);
    free(out);
    /* chat, two turns, with a Mistral-style template (no ChatML at all):
     * the follow-up continues after the answer's eos. */
    char *inst = test_gguf_with_template(model, "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}"
                               "[INST] {{ m.content }} [/INST]{% else %}{{ m.content }}"
                               "{{ eos_token }}{% endif %}{% endfor %}", "inst");
    int rc = test_runf(&out, "printf 'hello there\\nand again\\n/stats\\n' | '%s' chat -m '%s' "
                       "-n 4 --temp 0 --backend cpu 2>&1 | tr -d '\\000'", cli, inst);
    ck_assert_msg(rc == 0 && strstr(out, "reused") != NULL, "exit %d:\n%s", rc, out);
    free(out);
    free(fixed), free(bad), free(broken), free(inst);
}
END_TEST

static Suite *jinja_suite(void)
{
    Suite *s = suite_create("jinja");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, matches_jinja2);
    tcase_add_test(tc, errors_name_line_and_cause);
    tcase_add_test(tc, limits_stop_hostile_templates);
    tcase_add_test(tc, smollm_template_renders);
    tcase_add_test(tc, cli_uses_model_template);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(jinja_suite)
