/* chat.c: the three chat formats as data (one row each) and the renderers
 * (see chat.h).  Each format is a turn shape
 *     turn_open + role + role_close + content + turn_end + after_end
 * plus its rules: whether content is trimmed (the Llama-3 and Gemma
 * templates apply `| trim`), how the assistant role is spelled, and whether
 * a system role exists (Gemma folds it into the first turn). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "text/jinja.h"

typedef struct chat_shape {
    const char *name;        /* --chat-template name */
    const char *marker;      /* substring that identifies the template */
    const char *turn_open;
    const char *role_close;
    const char *turn_end;    /* the end-of-turn token text */
    const char *after_end;   /* text after it, not fed with the answer */
    const char *assistant;   /* how the assistant role is written */
    bool trim;
    bool has_system;
} chat_shape;

static const chat_shape SHAPES[] = {
    [CHAT_FORMAT_CHATML] = {"chatml", "<|im_start|>", "<|im_start|>", "\n",
                            "<|im_end|>", "\n", "assistant", false, true},
    [CHAT_FORMAT_LLAMA3] = {"llama3", "<|start_header_id|>", "<|start_header_id|>",
                            "<|end_header_id|>\n\n", "<|eot_id|>", "", "assistant",
                            true, true},
    [CHAT_FORMAT_GEMMA] = {"gemma", "<start_of_turn>", "<start_of_turn>", "\n",
                           "<end_of_turn>", "\n", "model", true, false},
};
#define N_SHAPES (sizeof SHAPES / sizeof SHAPES[0])

static const char NAMES[] = "chatml, llama3, gemma";

const char *chat_format_name(enum chat_format f)
{
    return f > CHAT_FORMAT_NONE && (size_t)f < N_SHAPES ? SHAPES[f].name : "none";
}

int chat_format_from_name(const char *name, enum chat_format *out, strata_error *err)
{
    for (size_t f = 1; f < N_SHAPES; f++)
        if (name && strcmp(name, SHAPES[f].name) == 0) {
            *out = (enum chat_format)f;
            return 0;
        }
    return strata_err(err, STRATA_E_ARG, "--chat-template %s: unknown chat format "
                      "(known: %s)", name ? name : "(null)", NAMES);
}

int chat_format_from_template(const char *tmpl, enum chat_format *out, strata_error *err)
{
    *out = CHAT_FORMAT_NONE;
    if (!tmpl)
        return strata_err(err, STRATA_E_UNSUPPORTED, "the model has no "
                          "tokenizer.chat_template; choose a format with "
                          "--chat-template NAME (%s)", NAMES);
    for (size_t f = 1; f < N_SHAPES; f++)
        if (strstr(tmpl, SHAPES[f].marker)) {
            *out = (enum chat_format)f;
            return 0;
        }
    return strata_err(err, STRATA_E_UNSUPPORTED, "tokenizer.chat_template is not a "
                      "format strata recognises (it starts '%.40s'); choose one with "
                      "--chat-template NAME (%s)", tmpl, NAMES);
}

/* A literal system turn in a ChatML template: "<|im_start|>system" then a
 * newline (real, or the two characters \n inside a Jinja string), then text
 * with no Jinja or quotes in it, then "<|im_end|>".  Branches that splice
 * the caller's system message in contain '{' and are skipped. */
static char *find_default_system(const char *tmpl)
{
    static const char open[] = "<|im_start|>system";
    for (const char *p = strstr(tmpl, open); p; p = strstr(p + 1, open)) {
        const char *s = p + sizeof open - 1;
        if (*s == '\n')
            s += 1;
        else if (s[0] == '\\' && s[1] == 'n')
            s += 2;
        else
            continue;
        const char *e = strstr(s, "<|im_end|>");
        if (!e || e == s)
            continue;
        size_t n = (size_t)(e - s);
        if (memchr(s, '{', n) || memchr(s, '}', n) || memchr(s, '\'', n) ||
            memchr(s, '"', n) || memchr(s, '\\', n))
            continue;
        char *r = malloc(n + 1);
        if (r) {
            memcpy(r, s, n);
            r[n] = '\0';
        }
        return r;
    }
    return NULL;
}

static char *dup_str(const char *s, size_t n)
{
    char *r = malloc(n + 1);
    if (r) {
        memcpy(r, s, n);
        r[n] = '\0';
    }
    return r;
}

/* The probe conversation's texts: unlikely in any template's own text. */
static const char PROBE_USER[] = "strata-probe-user-1";
static const char PROBE_ANSWER[] = "strata-probe-answer-2";

/* Render (user PROBE_USER, assistant PROBE_ANSWER, user `user`) with the
 * generation prompt, and point *after at what follows the answer. */
static int probe_after_answer(const chat_template *t, const char *user, char **text,
                              const char **after, strata_error *err)
{
    chat_msg m[] = {{"user", PROBE_USER}, {"assistant", PROBE_ANSWER}, {"user", user}};
    int rc = chat_render(t, m, 3, true, text, err);
    if (rc)
        return rc;
    const char *u = strstr(*text, PROBE_USER);
    const char *a = u ? strstr(u, PROBE_ANSWER) : NULL;
    if (!a) {
        free(*text);
        *text = NULL;
        return strata_err(err, STRATA_E_UNSUPPORTED, "%s: the chat template does not write "
                          "the conversation's messages in order; a chat cannot continue "
                          "turn by turn (choose a format with --chat-template NAME: %s)",
                          t->source ? t->source : "chat template", NAMES);
    }
    *after = a + sizeof PROBE_ANSWER - 1;
    return 0;
}

/* The end-of-turn text of a model template: what it writes right after an
 * answer, when that is the recognised format's marker or the eos token. */
static int find_eot(chat_template *t)
{
    free(t->eot);
    t->eot = NULL;
    char *text = NULL;
    const char *after = NULL;
    const char *want = t->format != CHAT_FORMAT_NONE ? SHAPES[t->format].turn_end : NULL;
    if (probe_after_answer(t, "strata-probe-user-3", &text, &after, NULL) == 0) {
        if (want && strncmp(after, want, strlen(want)) == 0)
            t->eot = dup_str(want, strlen(want));
        else if (t->eos && *t->eos && strncmp(after, t->eos, strlen(t->eos)) == 0)
            t->eot = dup_str(t->eos, strlen(t->eos));
    }
    free(text);
    if (!t->eot)
        t->eot = dup_str("", 0);
    return t->eot ? 0 : STRATA_E_NOMEM;
}

int chat_template_init(chat_template *t, const char *tmpl, const char *override_name,
                       strata_error *err)
{
    memset(t, 0, sizeof *t);
    int rc = override_name ? chat_format_from_name(override_name, &t->format, err)
                           : tmpl ? 0 : chat_format_from_template(tmpl, &t->format, err);
    if (rc)
        return rc;
    if (!override_name) { /* the model's own template */
        if (chat_format_from_template(tmpl, &t->format, NULL))
            t->format = CHAT_FORMAT_NONE;
        rc = jinja_parse(tmpl, strlen(tmpl), &t->jinja, err);
        if (!rc && find_eot(t))
            rc = strata_err(err, STRATA_E_NOMEM, "chat: out of memory");
        if (rc) {
            chat_template_free(t);
            return rc;
        }
    }
    if (t->format == CHAT_FORMAT_CHATML && tmpl && strstr(tmpl, SHAPES[t->format].marker))
        t->default_system = find_default_system(tmpl);
    return 0;
}

/* The text of token tokenizer.ggml.<which>_token_id, or NULL. */
static int token_text(const gguf *g, const char *which, char **out, strata_error *err)
{
    char key[64];
    uint32_t id;
    const gguf_str *toks;
    uint64_t n;
    *out = NULL;
    snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", which);
    int rc = gguf_get_u32(g, key, &id, err);
    if (rc == STRATA_E_NOTFOUND)
        return 0;
    if (!rc)
        rc = gguf_get_str_array(g, "tokenizer.ggml.tokens", &toks, &n, err);
    if (rc == STRATA_E_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    if (id >= n)
        return 0; /* the tokenizer reports a bad id; the template sees none */
    *out = dup_str(toks[id].p, toks[id].len);
    return *out ? 0 : strata_err(err, STRATA_E_NOMEM, "out of memory");
}

/* Whether the tokenizer prepends BOS: tokenizer.ggml.add_bos_token, or
 * when absent the tokenizer's default (text/tokenizer.c): SentencePiece
 * vocabularies and the Llama-3 pre-tokenizer do. */
static bool gguf_adds_bos(const gguf *g)
{
    bool b;
    gguf_str s;
    if (gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b, NULL) == 0)
        return b;
    if (gguf_get_str(g, "tokenizer.ggml.model", &s, NULL) == 0 && s.len == 5 &&
        memcmp(s.p, "llama", 5) == 0)
        return true;
    return gguf_get_str(g, "tokenizer.ggml.pre", &s, NULL) == 0 &&
           ((s.len == 9 && memcmp(s.p, "llama-bpe", 9) == 0) ||
            (s.len == 6 && memcmp(s.p, "llama3", 6) == 0));
}

int chat_template_from_gguf(chat_template *t, const gguf *g, const char *override_name,
                            strata_error *err)
{
    gguf_str s;
    char *tmpl = NULL;
    int rc = gguf_get_str(g, "tokenizer.chat_template", &s, err);
    if (rc && rc != STRATA_E_NOTFOUND)
        return rc;
    if (rc == 0) {
        tmpl = malloc(s.len + 1);
        if (!tmpl)
            return strata_err(err, STRATA_E_NOMEM, "%s: out of memory for "
                              "tokenizer.chat_template", gguf_path(g));
        memcpy(tmpl, s.p, s.len);
        tmpl[s.len] = '\0';
    }
    /* Gemma's base (pre-trained) files carry no template, but their
     * vocabulary has the turn tokens and the instruction-tuned siblings use
     * exactly the Gemma format: take it rather than refuse the file. */
    gguf_str arch;
    if (!tmpl && !override_name && gguf_get_str(g, "general.architecture", &arch, NULL) == 0 &&
        arch.len >= 5 && !memcmp(arch.p, "gemma", 5))
        override_name = SHAPES[CHAT_FORMAT_GEMMA].name;
    rc = chat_template_init(t, tmpl, override_name, err);
    if (!rc && t->jinja) {
        t->source = dup_str(gguf_path(g), strlen(gguf_path(g)));
        if (!t->source)
            rc = strata_err(err, STRATA_E_NOMEM, "out of memory");
        if (!rc)
            rc = token_text(g, "bos", &t->bos, err);
        if (!rc)
            rc = token_text(g, "eos", &t->eos, err);
        if (!rc && find_eot(t))
            rc = strata_err(err, STRATA_E_NOMEM, "chat: out of memory");
        if (rc)
            chat_template_free(t);
        else
            t->strip_bos = t->bos && strstr(tmpl, "bos_token") && gguf_adds_bos(g);
    }
    if (rc && !override_name && err && !strstr(err->msg, gguf_path(g))) {
        /* name the file; copy: msg is the source */
        char why[sizeof err->msg];
        memcpy(why, err->msg, sizeof why);
        if (tmpl)
            strata_err(err, rc, "%s: tokenizer.chat_template: %s (a built-in format can "
                       "stand in: --chat-template NAME, one of %s)", gguf_path(g), why, NAMES);
        else
            strata_err(err, rc, "%s: %s", gguf_path(g), why);
    }
    free(tmpl);
    return rc;
}

void chat_template_free(chat_template *t)
{
    if (!t)
        return;
    free(t->default_system);
    jinja_free(t->jinja);
    free(t->bos);
    free(t->eos);
    free(t->eot);
    free(t->source);
    memset(t, 0, sizeof *t);
}

const char *chat_end_of_turn(const chat_template *t)
{
    if (t->jinja)
        return t->eot ? t->eot : "";
    return t->format > CHAT_FORMAT_NONE && (size_t)t->format < N_SHAPES
               ? SHAPES[t->format].turn_end : "";
}

/* ---- rendering ---------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int failed;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* Jinja's trim: leading and trailing whitespace. */
static void sb_trimmed(sbuf *b, const char *s)
{
    const char *e = s + strlen(s);
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
        e--;
    sb_add(b, s, (size_t)(e - s));
}

/* One whole turn; prefix (may be NULL) goes before the content, untrimmed. */
static void turn(sbuf *b, const chat_shape *f, const char *role, const char *prefix,
                 const char *content)
{
    sb_str(b, f->turn_open);
    sb_str(b, strcmp(role, "assistant") == 0 ? f->assistant : role);
    sb_str(b, f->role_close);
    if (prefix)
        sb_str(b, prefix);
    if (f->trim)
        sb_trimmed(b, content);
    else
        sb_str(b, content);
    sb_str(b, f->turn_end);
    sb_str(b, f->after_end);
}

static void generation_prompt(sbuf *b, const chat_shape *f)
{
    sb_str(b, f->turn_open);
    sb_str(b, f->assistant);
    sb_str(b, f->role_close);
}

static int finish(sbuf *b, char **out, strata_error *err)
{
    if (b->failed || !b->p) {
        free(b->p);
        *out = NULL;
        if (b->failed)
            return strata_err(err, STRATA_E_NOMEM, "chat: out of memory rendering");
        *out = calloc(1, 1);
        return *out ? 0 : strata_err(err, STRATA_E_NOMEM, "chat: out of memory");
    }
    *out = b->p;
    return 0;
}

static int check_format(const chat_template *t, strata_error *err)
{
    if (t->jinja)
        return 0;
    if (t->format <= CHAT_FORMAT_NONE || (size_t)t->format >= N_SHAPES)
        return strata_err(err, STRATA_E_ARG, "chat: no chat format chosen (%d)",
                          (int)t->format);
    return 0;
}

/* The model's template over msgs; a leading bos_token is dropped (see
 * chat.h), and a failure names the model file. */
static int render_jinja(const chat_template *t, const chat_msg *msgs, size_t n, bool gen,
                        char **out, strata_error *err)
{
    jinja_msg *m = malloc((n ? n : 1) * sizeof *m);
    if (!m)
        return strata_err(err, STRATA_E_NOMEM, "chat: out of memory");
    for (size_t i = 0; i < n; i++)
        m[i] = (jinja_msg){msgs[i].role, msgs[i].content};
    jinja_chat_ctx ctx = {m, n, gen, t->bos, t->eos, 0};
    size_t len = 0;
    strata_error jerr = {0};
    int rc = jinja_render_chat(t->jinja, &ctx, NULL, out, &len, &jerr);
    free(m);
    if (rc)
        return strata_err(err, rc, "%s: %s", t->source ? t->source : "chat", jerr.msg);
    size_t nb = t->bos && t->strip_bos ? strlen(t->bos) : 0;
    if (nb && len >= nb && memcmp(*out, t->bos, nb) == 0)
        memmove(*out, *out + nb, len - nb + 1);
    return 0;
}

int chat_render(const chat_template *t, const chat_msg *msgs, size_t n,
                bool add_generation_prompt, char **out, strata_error *err)
{
    int rc = check_format(t, err);
    *out = NULL;
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return strata_err(err, STRATA_E_ARG, "chat: message %zu has no %s", i,
                              msgs[i].role ? "content" : "role");
    if (t->jinja)
        return render_jinja(t, msgs, n, add_generation_prompt, out, err);
    const chat_shape *f = &SHAPES[t->format];
    sbuf b = {0};
    size_t i = 0;
    bool has_sys = n > 0 && strcmp(msgs[0].role, "system") == 0;
    if (f->has_system) {
        if (!has_sys && t->default_system)
            turn(&b, f, "system", NULL, t->default_system);
    } else if (has_sys) {
        /* Gemma: the system text and a blank line open the next turn. */
        sbuf pre = {0};
        sb_str(&pre, msgs[0].content);
        sb_str(&pre, "\n\n");
        if (n > 1)
            turn(&b, f, msgs[1].role, pre.p, msgs[1].content);
        else
            turn(&b, f, "user", NULL, msgs[0].content);
        b.failed |= pre.failed;
        free(pre.p);
        i = n > 1 ? 2 : 1;
    }
    for (; i < n; i++)
        turn(&b, f, msgs[i].role, NULL, msgs[i].content);
    if (add_generation_prompt)
        generation_prompt(&b, f);
    return finish(&b, out, err);
}

int chat_render_next_turn(const chat_template *t, const char *user, char **out,
                          strata_error *err)
{
    int rc = check_format(t, err);
    *out = NULL;
    if (rc)
        return rc;
    if (!user)
        return strata_err(err, STRATA_E_ARG, "chat: next turn has no content");
    if (t->jinja) {
        char *text = NULL;
        const char *after = NULL;
        rc = probe_after_answer(t, user, &text, &after, err);
        if (rc)
            return rc;
        size_t ne = t->eot ? strlen(t->eot) : 0;
        if (ne && strncmp(after, t->eot, ne) == 0)
            after += ne;
        *out = dup_str(after, strlen(after));
        free(text);
        return *out ? 0 : strata_err(err, STRATA_E_NOMEM, "chat: out of memory");
    }
    const chat_shape *f = &SHAPES[t->format];
    sbuf b = {0};
    sb_str(&b, f->after_end); /* what followed the end token, never fed */
    turn(&b, f, "user", NULL, user);
    generation_prompt(&b, f);
    return finish(&b, out, err);
}
