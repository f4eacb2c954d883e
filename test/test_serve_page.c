/* test_serve_page.c: suite "serve_page": the chat page `strata-cli serve`
 * serves at / (serve/page.c), in a real browser.
 *
 * The server runs the demo model greedily on a free port; headless Chromium,
 * driven over the DevTools protocol by test/scripts/page_check.py, loads the
 * page, types two messages and presses Enter.  Checked: each answer appears
 * in the page while it streams (texts that grow by prefixes, not one text at
 * the end), the first equals the server's own non-streamed answer to the
 * same message, the second turn finds the first in the server's cache (the
 * page resends the history as text), and a screenshot of the page is a PNG
 * of the window's size.  STRATA_PAGE_SHOT=FILE keeps a copy of the
 * screenshot (the test's directory is removed when it passes).
 *
 * Skips (class `tool`) only where chromium or curl is absent; .ci/run
 * installs both and requires the class. */
#include "testutil.h"
#include "test_server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "serve/json.h"

static const char *const MSG1 = "What is the capital of France?";
static const char *const MSG2 = "And of Germany?";

static int have(const char *prog)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", prog);
    return system(cmd) == 0;
}

/* "P prompt tokens (C cached), G generated": C, or -1. */
static long cached_of(const char *note)
{
    const char *p = strchr(note, '(');
    return p ? strtol(p + 1, NULL, 10) : -1;
}

/* The PNG's width and height from its IHDR chunk; 0 if not a PNG. */
static int png_size(const unsigned char *b, size_t n, unsigned *w, unsigned *h)
{
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    if (n < 24 || memcmp(b, sig, 8) || memcmp(b + 12, "IHDR", 4))
        return 0;
    *w = (unsigned)b[16] << 24 | (unsigned)b[17] << 16 | (unsigned)b[18] << 8 | b[19];
    *h = (unsigned)b[20] << 24 | (unsigned)b[21] << 16 | (unsigned)b[22] << 8 | b[23];
    return 1;
}

START_TEST(page_streams_in_chromium)
{
    const char *cli = test_cli();
    if (!cli)
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset)");
    const char *model = test_demo_model();
    if (!model)
        TEST_SKIP("model", "demo model missing (make model)");
    if (!have("chromium") && !have("chromium-browser") && !have("google-chrome"))
        TEST_SKIP("tool", "chromium not installed (apt-get install chromium)");
    if (!have("curl"))
        TEST_SKIP("tool", "curl not installed");
    const char *dir = test_tmpdir();
    test_server sv;
    test_server_start(&sv, cli, model, dir, "-t 2 --quiet --temp 0 --kv f16 -n 24");
    const int port = sv.port;

    char *out = NULL, shot[600];
    snprintf(shot, sizeof shot, "%s/page.png", dir);
    int rc = test_runf(&out, "python3 '%s/test/scripts/page_check.py' http://127.0.0.1:%d/ "
                       "'%s' '%s' '%s' 2>&1", test_root(), port, shot, MSG1, MSG2);
    ck_assert_msg(rc == 0, "page_check.py failed (%d): %s", rc, out ? out : "");
    json *v = NULL;
    strata_error err = {0};
    ck_assert_msg(json_parse(out, strlen(out), &v, &err) == 0, "%s: %s", err.msg, out);
    const json *turns = json_get(v, "turns");
    ck_assert_msg(turns && turns->type == JSON_ARRAY && turns->n == 2, "%s", out);
    for (size_t i = 0; i < 2; i++) {
        const json *t = turns->items[i];
        const json *a = json_get(t, "answer"), *p = json_get(t, "partials");
        const json *note = json_get(t, "note");
        ck_assert_msg(a && a->len > 0 && note, "turn %zu: %s", i, out);
        /* every text the answer element held (a MutationObserver's record):
         * a page that showed only the finished answer would have none before */
        ck_assert_msg(p && p->num >= 2, "turn %zu did not stream (%g partial texts): %s", i,
                      p ? p->num : -1.0, out);
        long cached = cached_of(note->str);
        if (i == 1)
            ck_assert_msg(cached > 0, "the second turn found nothing cached: %s", note->str);
        const json *polled = json_get(t, "polled");
        fprintf(stderr, "serve_page: turn %zu: %g partial texts (%g seen by polling), '%s'; "
                "answer '%s'\n", i + 1, p->num, polled ? polled->num : -1.0, note->str, a->str);
    }

    /* the page's first answer is the server's own, asked without a browser */
    char *whole = NULL;
    rc = test_runf(&whole, "curl -s -m 120 http://127.0.0.1:%d/v1/chat/completions "
                   "-H 'Content-Type: application/json' -d '{\"messages\":[{\"role\":\"user\","
                   "\"content\":\"%s\"}]}'", port, MSG1);
    ck_assert_int_eq(rc, 0);
    json *w = NULL;
    ck_assert_msg(json_parse(whole, strlen(whole), &w, &err) == 0, "%s: %s", err.msg, whole);
    const json *choices = json_get(w, "choices");
    ck_assert_msg(choices && choices->n == 1, "%s", whole);
    const json *content = json_get(json_get(choices->items[0], "message"), "content");
    const json *a1 = json_get(turns->items[0], "answer");
    ck_assert_msg(content && content->len == a1->len && !memcmp(content->str, a1->str, a1->len),
                  "the page showed '%s', the API answers '%s'", a1->str,
                  content ? content->str : "(none)");

    size_t n = 0;
    unsigned wpx = 0, hpx = 0;
    unsigned char *png = (unsigned char *)test_slurp(shot, &n);
    ck_assert_msg(png && png_size(png, n, &wpx, &hpx), "no PNG screenshot at %s", shot);
    ck_assert_msg(wpx == 900 && hpx == 700 && n > 5000, "screenshot %ux%u, %zu bytes", wpx, hpx,
                  n);
    const char *keep = getenv("STRATA_PAGE_SHOT");
    if (keep && *keep) {
        FILE *f = fopen(keep, "wb");
        ck_assert_msg(f && fwrite(png, 1, n, f) == n && fclose(f) == 0, "cannot write %s",
                      keep);
        fprintf(stderr, "serve_page: screenshot %ux%u kept at %s\n", wpx, hpx, keep);
    }
    free(png);
    json_free(w);
    free(whole);
    json_free(v);
    free(out);
    ck_assert_int_eq(test_server_stop(&sv), 0);
}
END_TEST

static Suite *serve_page_suite(void)
{
    Suite *s = suite_create("serve_page");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, page_streams_in_chromium);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(serve_page_suite)
