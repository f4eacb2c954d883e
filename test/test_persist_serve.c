/* test_persist_serve.c: server restarts with --conversation-save (suite
 * persist_serve).  `strata-cli serve` processes over one directory: a later
 * one finds an earlier one's conversation when a client resends its
 * history as text, because the server rebuilds its index from text to ids
 * from the images it loads (convindex_add_ids), so the follow-up restores
 * the whole history and reads only its new tokens; its answers are those of
 * a server that never restarted.  A kill -9 loses only what was not yet
 * written whole.  The rest of the saving is suite persist (test_persist.c). */
#include "testutil.h"
#include "test_server.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "model/gguf.h"
#include "serve/convindex.h"
#include "serve/json.h"
#include "text/tokenizer.h"

/* `strata-cli serve -m MODEL --port 0 ARGS` (one thread, one slot, greedy)
 * with its output in dir, waiting for its URL. */
static void srv_start(test_server *sv, const char *cli, const char *model, const char *dir,
                      const char *args)
{
    char all[1024];
    snprintf(all, sizeof all, "-t 1 --batch 1 --temp 0 %s", args);
    test_server_start(sv, cli, model, dir, all);
}

/* A value of the server's /metrics: the line that begins with name (labels
 * included) and a space. */
static double srv_metric(const test_server *sv, const char *name)
{
    char *out = NULL;
    int rc = test_runf(&out, "curl -s -m 30 http://127.0.0.1:%d/metrics", sv->port);
    ck_assert_msg(rc == 0 && out, "curl /metrics failed (%d)", rc);
    size_t l = strlen(name);
    double v = -1;
    for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, name, l) && p[l] == ' ') {
            v = atof(p + l + 1);
            break;
        }
    ck_assert_msg(v >= 0, "no %s in /metrics:\n%s", name, out);
    free(out);
    return v;
}

#define MAX_MSG 16

/* A conversation as a client holds it: messages and the answers' usage. */
typedef struct convo {
    int n;
    const char *role[MAX_MSG];
    char *content[MAX_MSG];
    size_t len[MAX_MSG];
} convo;

typedef struct answer {
    char *text;
    size_t len;
    int prompt, cached, completion;
    char finish[16];
} answer;

static void convo_add(convo *c, const char *role, const char *text, size_t len)
{
    ck_assert_int_lt(c->n, MAX_MSG);
    c->role[c->n] = role;
    c->content[c->n] = malloc(len + 1);
    memcpy(c->content[c->n], text, len);
    c->content[c->n][len] = '\0';
    c->len[c->n++] = len;
}

static void convo_free(convo *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->content[i]);
    c->n = 0;
}

/* POST the conversation to /v1/chat/completions (greedy, at most max_tokens):
 * the answer, not added to c. */
static answer ask(const test_server *sv, const char *dir, const convo *c, int max_tokens)
{
    jbuf b = {0};
    jbuf_printf(&b, "{\"max_tokens\":%d,\"temperature\":0,\"messages\":[", max_tokens);
    for (int i = 0; i < c->n; i++) {
        jbuf_printf(&b, "%s{\"role\":\"%s\",\"content\":", i ? "," : "", c->role[i]);
        jbuf_str(&b, c->content[i], c->len[i]);
        jbuf_puts(&b, "}");
    }
    jbuf_puts(&b, "]}");
    ck_assert(!b.oom);
    char body[700];
    snprintf(body, sizeof body, "%s/body.json", dir);
    FILE *f = fopen(body, "wb");
    ck_assert_ptr_nonnull(f);
    fwrite(b.p, 1, b.len, f);
    fclose(f);
    jbuf_free(&b);
    char *out = NULL;
    int rc = test_runf(&out, "curl -s -m 120 -H 'Content-Type: application/json' -d @'%s' "
                             "http://127.0.0.1:%d/v1/chat/completions", body, sv->port);
    ck_assert_msg(rc == 0 && out, "curl failed (%d)", rc);
    json *v = NULL;
    strata_error err = {0};
    ck_assert_msg(json_parse(out, strlen(out), &v, &err) == 0, "%s: %s", err.msg, out);
    const json *ch = json_get(v, "choices"), *u = json_get(v, "usage");
    ck_assert_msg(ch && ch->n == 1 && u, "no choices/usage: %s", out);
    const json *t = json_get(json_get(ch->items[0], "message"), "content");
    const json *fr = json_get(ch->items[0], "finish_reason");
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_nonnull(fr);
    answer a = {0};
    a.text = malloc(t->len + 1);
    memcpy(a.text, t->str, t->len + 1);
    a.len = t->len;
    snprintf(a.finish, sizeof a.finish, "%s", fr->str);
    a.cached = (int)json_get(json_get(u, "prompt_tokens_details"), "cached_tokens")->num;
    a.prompt = (int)json_get(u, "prompt_tokens")->num;
    a.completion = (int)json_get(u, "completion_tokens")->num;
    json_free(v);
    free(out);
    return a;
}

/* The tokens a conversation's image holds after answer a: its prompt and
 * answer, less the answer's last token when the answer ended by a limit
 * (that token was sampled, never read, so it is in no K/V; the image keeps
 * its id as the pending token, and the next turn reads it).  An answer
 * that ended by a stop token holds all its tokens: the stop token is not
 * part of the text. */
static int image_tokens(const answer *a)
{
    return a->prompt + a->completion - (strcmp(a->finish, "stop") != 0);
}

static int same_answer(const answer *a, const answer *b)
{
    return a->len == b->len && !memcmp(a->text, b->text, a->len);
}

static int count_saved(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        n += l > 4 && !strcmp(de->d_name + l - 4, ".skv");
    }
    if (d)
        closedir(d);
    return n;
}

/* "N conversations loaded from DIR, M of them found by text" in a log. */
static void loaded_line(const test_server *sv, int *loaded, int *indexed)
{
    char *l = test_slurp(sv->log, NULL);
    const char *p = l ? strstr(l, "strata serve: ") : NULL;
    *loaded = *indexed = -1;
    while (p && sscanf(p, "strata serve: %d conversations loaded from %*s %d of them", loaded,
                       indexed) != 2)
        p = strstr(p + 1, "strata serve: ");
    ck_assert_msg(*loaded >= 0 && *indexed >= 0, "no load line in:\n%s", l ? l : "");
    free(l);
}

static int log_has(const test_server *sv, const char *s)
{
    char *l = test_slurp(sv->log, NULL);
    int has = l && strstr(l, s);
    free(l);
    return has;
}

/* ---- the index rebuilt from ids ------------------------------------------ */

static void encode(const tokenizer *t, const char *s, int flags, tok_ids *out)
{
    strata_error err = {0};
    ck_assert_msg(tokenizer_encode(t, s, strlen(s), flags, out, &err) == 0, "%s", err.msg);
}

/* What a restarted server knows of a conversation is its ids; the entry
 * rebuilt from them must give those ids back for the text a client
 * resends, also where they are not the text's own encoding, and only for
 * the kind of request whose encoding reads the control tokens the same. */
START_TEST(persist_serve_index_from_ids)
{
    tokenizer *t = test_demo_tokenizer();
    if (!t)
        TEST_SKIP("model", "demo model not found (STRATA_MODEL or ~/.cache/strata)");
    const char *prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                         "<|im_start|>assistant\n";
    const char *reply = "The capital of France is Paris.";
    const char *next = "<|im_end|>\n<|im_start|>user\nAnd of Germany?<|im_end|>\n";
    /* the answer as the model might have written it: " Paris" as " Par" +
     * "is", not the one token encoding gives */
    tok_ids ids = {0}, canon = {0}, got = {0};
    int skip = 0;
    if (tokenizer_add_bos(t) && tokenizer_bos(t) >= 0)
        skip = tok_ids_push(&ids, tokenizer_bos(t)) == 0;
    encode(t, prompt, TOK_ENCODE_SPECIAL, &ids);
    encode(t, "The capital of France is", 0, &ids);
    encode(t, " Par", 0, &ids);
    encode(t, "is.", 0, &ids);
    char text[512], full[1024];
    snprintf(text, sizeof text, "%s%s", prompt, reply);
    snprintf(full, sizeof full, "%s%s", text, next);
    encode(t, text, TOK_ENCODE_SPECIAL | TOK_ENCODE_ADD_BOS, &canon);
    ck_assert_msg(canon.n != ids.n || memcmp(canon.ids, ids.ids, ids.n * 4),
                  "the split answer is the canonical encoding: the test shows nothing");

    convindex *x = convindex_new(16, 1 << 20);
    ck_assert_ptr_nonnull(x);
    ck_assert_int_eq(convindex_add_ids(x, t, ids.ids, ids.n, -1), 1); /* chat only */
    ck_assert_int_eq(convindex_find(x, 1, full, strlen(full), &got), strlen(text));
    ck_assert_int_eq(got.n, ids.n);
    ck_assert(!memcmp(got.ids, ids.ids, ids.n * sizeof *ids.ids));
    got.n = 0;
    /* a plain completion reads "<|im_start|>" as text: not these ids */
    ck_assert_int_eq(convindex_find(x, 0, full, strlen(full), &got), 0);

    /* plain text that spells a control token: a plain entry only (a chat
     * request would read it as the control token) */
    tok_ids lit = {0};
    if (skip)
        tok_ids_push(&lit, tokenizer_bos(t));
    encode(t, "say <|im_start|> twice", 0, &lit);
    ck_assert_int_eq(convindex_add_ids(x, t, lit.ids, lit.n, -1), 1);
    ck_assert_int_eq(convindex_find(x, 1, "say <|im_start|> twice more", 27, &got), 0);
    ck_assert_int_eq(convindex_find(x, 0, "say <|im_start|> twice more", 27, &got), 22);
    ck_assert_int_eq(got.n, lit.n);

    /* an answer cut inside a character: the client got U+FFFD for it */
    tok_ids cut = {0};
    if (skip)
        tok_ids_push(&cut, tokenizer_bos(t));
    encode(t, "caf\xC3", 0, &cut);
    ck_assert_int_eq(convindex_add_ids(x, t, cut.ids, cut.n, -1), 2);
    got.n = 0;
    ck_assert_int_eq(convindex_find(x, 1, "caf\xEF\xBF\xBD and", 10, &got), 6);
    ck_assert_int_eq(got.n, cut.n);
    ck_assert(!memcmp(got.ids, cut.ids, cut.n * sizeof *cut.ids));

    /* ids that are not this tokenizer's: nothing */
    int32_t bad[] = {1, -5, 2};
    ck_assert_int_eq(convindex_add_ids(x, t, bad, 3, -1), 0);
    tok_ids_free(&ids);
    tok_ids_free(&canon);
    tok_ids_free(&got);
    tok_ids_free(&lit);
    tok_ids_free(&cut);
    convindex_free(x);
    tokenizer_free(t);
}
END_TEST

/* The ids a server gives a request's text: the longest entry of the index
 * it begins with, then the rest encoded (serve/openai.c's prompt_ids). */
static void read_ids(convindex *x, const tokenizer *t, const char *text, tok_ids *out)
{
    size_t n = strlen(text), m = convindex_find(x, 1, text, n, out);
    strata_error err = {0};
    ck_assert_msg(tokenizer_encode(t, text + m, n - m,
                                   TOK_ENCODE_SPECIAL | (m ? 0 : TOK_ENCODE_ADD_BOS), out,
                                   &err) == 0, "%s", err.msg);
}

/* An answer cut by max_tokens inside a character: its last two tokens are
 * the first two bytes of "\u20ac" (E2 82 AC), and the last was sampled and
 * sent but never fed, so the saved image lacks it.  The server that gave
 * the answer remembered the text it sent (each pending byte as U+FFFD) with
 * every id; the restarted one rebuilds its entry from the image's ids and
 * its pending token, and must read the resent history as the same ids.
 * Without the pending token its entry's text ends one U+FFFD short, and
 * that U+FFFD is encoded afresh: other ids, and more of them. */
START_TEST(persist_serve_index_cut_answer)
{
    tokenizer *t = test_demo_tokenizer();
    if (!t)
        TEST_SKIP("model", "demo model not found (STRATA_MODEL or ~/.cache/strata)");
    const char *prompt = "<|im_start|>user\nPrice?<|im_end|>\n<|im_start|>assistant\n";
    const char *next = "<|im_end|>\n<|im_start|>user\nAnd more<|im_end|>\n"
                       "<|im_start|>assistant\n";
    tok_ids ids = {0}, b1 = {0}, b2 = {0};
    if (tokenizer_add_bos(t) && tokenizer_bos(t) >= 0)
        tok_ids_push(&ids, tokenizer_bos(t));
    encode(t, prompt, TOK_ENCODE_SPECIAL, &ids);
    size_t n_prompt = ids.n;
    encode(t, "It costs 5", 0, &ids);
    encode(t, "\xE2", 0, &b1);
    encode(t, "\x82", 0, &b2);
    ck_assert_int_eq(b1.n, 1);
    ck_assert_int_eq(b2.n, 1);
    tok_ids_push(&ids, b1.ids[0]);
    tok_ids_push(&ids, b2.ids[0]);   /* the pending token */

    /* the live server's entry: the prompt's text, the answer as streamed */
    tokdec *d = NULL;
    strata_error err = {0};
    ck_assert_int_eq(tokdec_new(t, 0, &d, &err), 0);
    char live[512];
    size_t at = (size_t)snprintf(live, sizeof live, "%s", prompt), l = 0;
    for (size_t i = n_prompt; i <= ids.n; i++) {
        const char *p = i < ids.n ? tokdec_push(d, ids.ids[i], &l, &err) : tokdec_flush(d, &l);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_lt(at + l, sizeof live);
        memcpy(live + at, p, l);
        at += l;
    }
    live[at] = '\0';
    tokdec_free(d);
    ck_assert_msg(strstr(live, "5\xEF\xBF\xBD\xEF\xBF\xBD"), "the answer is not cut: %s", live);
    convindex *xl = convindex_new(16, 1 << 20), *xr = convindex_new(16, 1 << 20);
    ck_assert_int_eq(convindex_add(xl, 1, live, at, ids.ids, ids.n), 0);
    /* the restarted server's: the image's ids and its pending token */
    ck_assert_int_eq(convindex_add_ids(xr, t, ids.ids, ids.n - 1, ids.ids[ids.n - 1]), 1);

    char full[1024];
    snprintf(full, sizeof full, "%s%s", live, next);
    tok_ids rl = {0}, rr = {0};
    read_ids(xl, t, full, &rl);
    read_ids(xr, t, full, &rr);
    size_t same = 0;
    while (same < rl.n && same < rr.n && rl.ids[same] == rr.ids[same])
        same++;
    ck_assert_msg(rl.n == rr.n && same == rl.n, "turn 2: %zu ids on the server that gave the "
                  "answer, %zu after the restart, the same up to %zu (the image holds %zu)",
                  rl.n, rr.n, same, ids.n - 1);
    ck_assert_uint_gt(rl.n, ids.n);
    ck_assert(!memcmp(rl.ids, ids.ids, ids.n * sizeof *ids.ids));
    tok_ids_free(&ids);
    tok_ids_free(&b1);
    tok_ids_free(&b2);
    tok_ids_free(&rl);
    tok_ids_free(&rr);
    convindex_free(xl);
    convindex_free(xr);
    tokenizer_free(t);
}
END_TEST

/* The tiny generated model: one turn, a restart, the history resent.  Its
 * noise answer is not its text's own encoding (a fresh server encodes the
 * history into other ids), so only the rebuilt index gives the restarted
 * server the ids its image holds: then turn 1's whole image is restored,
 * and turn 2 is what a server that never stopped answers.  With the k8v4r2
 * cache the 12-token answer ends, at its limit, in byte tokens cut inside a
 * character: only the image's pending token makes the restarted server
 * read turn 2 as the same 51 ids (53 without it). */
START_TEST(persist_serve_restart)
{
    const char *cli = test_cli();
    if (!cli)
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset; run via make test)");
    if (system("command -v curl >/dev/null 2>&1"))
        TEST_SKIP("tool", "curl not installed");
    const char *model = test_server_model();
    const char *dir = test_tmpdir();
    char save[600], args[700];
    snprintf(save, sizeof save, "%s/save", dir);
    snprintf(args, sizeof args, "--conversation-save '%s'", save);
    const int max_tokens = 12;
    convo c = {0};
    convo_add(&c, "user", "hello", 5);

    test_server sv;
    srv_start(&sv, cli, model, dir, args);
    answer a1 = ask(&sv, dir, &c, max_tokens);
    ck_assert_int_eq(a1.cached, 0);
    ck_assert_int_eq(test_server_stop(&sv), 0);
    ck_assert_int_eq(count_saved(save), 1);

    /* the restarted server: the client resends its history as text */
    convo_add(&c, "assistant", a1.text, a1.len);
    convo_add(&c, "user", "and more", 8);
    srv_start(&sv, cli, model, dir, args);
    int loaded, indexed;
    loaded_line(&sv, &loaded, &indexed);
    ck_assert_int_eq(loaded, 1);
    ck_assert_int_eq(indexed, 1);
    ck_assert_int_ge((int)srv_metric(&sv, "strata_conversation_index_entries"), 1);
    answer a2 = ask(&sv, dir, &c, max_tokens);
    ck_assert_int_eq((int)srv_metric(&sv, "strata_cached_tokens_total{source=\"conversation_cache\"}"),
                     a2.cached);
    ck_assert_int_eq(test_server_stop(&sv), 0);
    ck_assert_msg(a2.cached == image_tokens(&a1) && a2.cached < a2.prompt,
                  "turn 2 of %d tokens: %d cached, want turn 1's %d (prompt %d, answer %d, %s)",
                  a2.prompt, a2.cached, image_tokens(&a1), a1.prompt, a1.completion, a1.finish);
    /* a server that never stopped (and saves nothing) answers the same */
    convo one = {0};
    convo_add(&one, "user", "hello", 5);
    srv_start(&sv, cli, model, dir, "");
    answer r1 = ask(&sv, dir, &one, max_tokens);
    answer r2 = ask(&sv, dir, &c, max_tokens);
    ck_assert_int_eq(test_server_stop(&sv), 0);
    ck_assert(same_answer(&r1, &a1));
    ck_assert_int_eq(r2.prompt, a2.prompt);
    ck_assert_int_eq(r2.cached, a2.cached);
    ck_assert(same_answer(&r2, &a2));
    /* the premise: the history's own encoding is other ids (what a restart
     * without the index would have had to restore from) */
    srv_start(&sv, cli, model, dir, "");
    answer fresh = ask(&sv, dir, &c, max_tokens);
    ck_assert_int_eq(test_server_stop(&sv), 0);
    ck_assert_msg(fresh.prompt != a2.prompt, "the answer's ids are its text's own encoding (%d "
                  "tokens either way): the test shows nothing; pick another first message",
                  fresh.prompt);
    fprintf(stderr, "persist_serve_restart: turn 2 of %d tokens, %d restored after the restart "
            "(the text's own encoding: %d tokens)\n", a2.prompt, a2.cached, fresh.prompt);
    free(a1.text);
    free(a2.text);
    free(r1.text);
    free(r2.text);
    free(fresh.text);
    convo_free(&c);
    convo_free(&one);
}
END_TEST

/* The demo model, one conversation of four turns over three server
 * processes: turns 1-2, a clean stop; turn 3 (restored whole), then another
 * conversation pushes it out of the one slot (so it is saved) and the
 * server is killed (-9) at once; turn 4 on a third server restores what was
 * written whole.  Every answer equals a server that never stopped, and the
 * last equals a fresh server given the whole history. */
START_TEST(persist_serve_demo_restarts)
{
    const char *cli = test_cli();
    if (!cli)
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset; run via make test)");
    if (system("command -v curl >/dev/null 2>&1"))
        TEST_SKIP("tool", "curl not installed");
    const char *model = test_demo_model();
    if (!model)
        TEST_SKIP("model", "demo model not found (STRATA_MODEL or ~/.cache/strata)");
    const char *dir = test_tmpdir();
    char save[600], args[700];
    snprintf(save, sizeof save, "%s/save", dir);
    snprintf(args, sizeof args, "--conversation-save '%s'", save);
    const char *q[4] = {"What is the capital of France?", "And of Germany?", "And of Italy?",
                        "And of Spain?"};
    const int max_tokens = 24;
    answer a[4];
    convo c = {0};
    test_server sv;

    /* turns 1 and 2, then a clean stop */
    srv_start(&sv, cli, model, dir, args);
    for (int t = 0; t < 2; t++) {
        convo_add(&c, "user", q[t], strlen(q[t]));
        a[t] = ask(&sv, dir, &c, max_tokens);
        convo_add(&c, "assistant", a[t].text, a[t].len);
    }
    ck_assert_int_eq(test_server_stop(&sv), 0);
    ck_assert_int_eq(count_saved(save), 1);

    /* turn 3 after the restart: the whole history restored */
    srv_start(&sv, cli, model, dir, args);
    int loaded, indexed;
    loaded_line(&sv, &loaded, &indexed);
    ck_assert_int_eq(loaded, 1);
    ck_assert_int_eq(indexed, 1);
    convo_add(&c, "user", q[2], strlen(q[2]));
    a[2] = ask(&sv, dir, &c, max_tokens);
    convo_add(&c, "assistant", a[2].text, a[2].len);
    ck_assert_msg(a[2].cached == image_tokens(&a[1]), "turn 3 of %d tokens: %d cached, want "
                  "turn 2's %d", a[2].prompt, a[2].cached, image_tokens(&a[1]));
    ck_assert_int_eq((int)srv_metric(&sv, "strata_cached_tokens_total{source=\"conversation_cache\"}"),
                     a[2].cached);
    /* another conversation takes the one slot: turn 3's is captured and
     * queued for the writer; kill -9 right after its answer */
    convo other = {0};
    convo_add(&other, "user", "Name a color.", 13);
    answer o = ask(&sv, dir, &other, 8);
    ck_assert_int_eq(test_server_stop_sig(&sv, SIGKILL), -SIGKILL);
    int files = count_saved(save);
    ck_assert_int_ge(files, 1);

    /* turn 4 on a third server: every whole file loads, none is refused;
     * the restore covers at least turn 2 (its file goes only once turn 3's
     * is written and read back) */
    srv_start(&sv, cli, model, dir, args);
    loaded_line(&sv, &loaded, &indexed);
    ck_assert_int_eq(loaded, files);
    ck_assert_msg(!log_has(&sv, "skipped"), "a file was refused after the kill");
    convo_add(&c, "user", q[3], strlen(q[3]));
    a[3] = ask(&sv, dir, &c, max_tokens);
    ck_assert_int_eq(test_server_stop(&sv), 0);
    int turn3 = a[3].cached >= image_tokens(&a[2]);
    ck_assert_msg(a[3].cached == image_tokens(&a[2]) || a[3].cached == image_tokens(&a[1]),
                  "turn 4 of %d tokens: %d cached, want turn 3's %d or turn 2's %d", a[3].prompt,
                  a[3].cached, image_tokens(&a[2]), image_tokens(&a[1]));

    /* a server that never stopped (and saves nothing) answers the same */
    srv_start(&sv, cli, model, dir, "");
    convo ref = {0};
    for (int t = 0; t < 4; t++) {
        convo_add(&ref, "user", q[t], strlen(q[t]));
        answer r = ask(&sv, dir, &ref, max_tokens);
        ck_assert_msg(same_answer(&r, &a[t]), "turn %d: '%s' after restarts, '%s' without",
                      t + 1, a[t].text, r.text);
        ck_assert_int_eq(r.prompt, a[t].prompt);
        convo_add(&ref, "assistant", r.text, r.len);
        free(r.text);
    }
    answer ro = ask(&sv, dir, &other, 8);
    ck_assert(same_answer(&ro, &o));
    ck_assert_int_eq(test_server_stop(&sv), 0);
    /* and so does a fresh one given the whole history at once */
    srv_start(&sv, cli, model, dir, "");
    answer fresh = ask(&sv, dir, &c, max_tokens);
    ck_assert_int_eq(test_server_stop(&sv), 0);
    ck_assert_int_eq(fresh.cached, 0);
    ck_assert_int_eq(fresh.prompt, a[3].prompt);
    ck_assert(same_answer(&fresh, &a[3]));
    fprintf(stderr, "persist_serve_demo_restarts: turn 3 of %d tokens, %d restored; after the "
            "kill -9 %d file(s), turn 4 of %d tokens, %d restored (turn %d's image)\n",
            a[2].prompt, a[2].cached, files, a[3].prompt, a[3].cached, turn3 ? 3 : 2);
    for (int t = 0; t < 4; t++)
        free(a[t].text);
    free(o.text);
    free(ro.text);
    free(fresh.text);
    convo_free(&c);
    convo_free(&other);
    convo_free(&ref);
}
END_TEST

static Suite *persist_serve_suite(void)
{
    Suite *s = suite_create("persist_serve");
    TCase *tc = tcase_create("persist_serve");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, persist_serve_index_from_ids);
    tcase_add_test(tc, persist_serve_index_cut_answer);
    tcase_add_test(tc, persist_serve_restart);
    tcase_add_test(tc, persist_serve_demo_restarts);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(persist_serve_suite)
