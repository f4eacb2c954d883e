/* frontend.c: the engine, one conversation, and streaming output for `run`
 * and `chat` (see frontend.h). */
#include "cli/frontend.h"

#include <stdlib.h>
#include <string.h>

#include "cli/signals.h"

volatile sig_atomic_t frontend_interrupted;

static void on_load_sigint(int sig)
{
    (void)sig;
    frontend_interrupted = 1;
}

/* strata_params.load_cancel: Ctrl-C stops a load between tensors.
 * on_load_sigint sets the flag; chat loads with SIGINT blocked (its threads
 * must inherit the mask), so a pending SIGINT counts too.  The first call is
 * where the test hook pauses (cli/signals.h): the model is mapped, no weight
 * has been read. */
static int load_cancelled(void *user)
{
    static int paused;
    (void)user;
    if (!paused) {
        paused = 1;
        cli_test_pause_in_load();
    }
    sigset_t pend;
    sigemptyset(&pend);
    return frontend_interrupted || (sigpending(&pend) == 0 && sigismember(&pend, SIGINT) == 1);
}

int frontend_open(frontend *f, cli_opts *o, strata_error *err)
{
    return frontend_open_flags(f, o, 0, err);
}

int frontend_open_flags(frontend *f, cli_opts *o, int flags, strata_error *err)
{
    memset(f, 0, sizeof *f);
    f->o = o;
    f->out = stdout;
    if (!o->ep.quiet) {
        o->ep.progress = cli_progress;
        o->ep.progress_user = NULL;
    }
    o->ep.load_cancel = load_cancelled;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_load_sigint;
    sigemptyset(&sa.sa_mask);
    frontend_interrupted = 0;
    sigaction(SIGINT, &sa, &old);
    double t0 = strata_now();
    int rc = strata_open(&o->ep, &f->e, err);
    f->t_load = strata_now() - t0;
    sigaction(SIGINT, &old, NULL);
    frontend_interrupted = 0;
    if (!rc)
        cli_opts_warn_opened(o, o->cmd, f->e);
    if (!rc && !(flags & FRONTEND_NO_SEQ)) {
        f->seq = strata_seq_new(f->e, err);
        if (!f->seq)
            rc = err->code;
    }
    if (!rc)
        rc = tokdec_new(strata_tokenizer(f->e), 0, &f->dec, err);
    if (!rc && (o->chat || o->chat_template))
        rc = chat_template_from_gguf(&f->fmt, strata_model(f->e)->g, o->chat_template, err);
    sampler_init(&f->smp, &o->sp);
    if (!rc && o->verbose) {
        char d[1024];
        strata_describe(f->e, d, sizeof d);
        fprintf(stderr, "strata: %s\n", d);
    }
    if (rc)
        frontend_close(f);
    return rc;
}

void frontend_close(frontend *f)
{
    strata_seq_free(f->seq);
    tokdec_free(f->dec);
    chat_template_free(&f->fmt);
    sampler_free(&f->smp);
    strata_close(f->e);
    memset(f, 0, sizeof *f);
}

static int encode(frontend *f, const char *text, int flags, tok_ids *ids, strata_error *err)
{
    return tokenizer_encode(strata_tokenizer(f->e), text, strlen(text), flags, ids, err);
}

int frontend_encode_prompt(frontend *f, const char *text, tok_ids *ids, strata_error *err)
{
    return encode(f, text, TOK_ENCODE_ADD_BOS, ids, err);
}

int frontend_chat_first_turn(frontend *f, const char *system, const char *user, tok_ids *ids,
                             strata_error *err)
{
    chat_msg msgs[2];
    size_t n = 0;
    if (system)
        msgs[n++] = (chat_msg){"system", system};
    msgs[n++] = (chat_msg){"user", user};
    char *text = NULL;
    int rc = chat_render(&f->fmt, msgs, n, true, &text, err);
    /* The markup's control tokens are parsed; the user's text is inside it,
     * which is how llama.cpp and HF apply templates too. */
    if (!rc)
        rc = encode(f, text, TOK_ENCODE_SPECIAL | TOK_ENCODE_ADD_BOS, ids, err);
    free(text);
    return rc;
}

int frontend_chat_next_turn(frontend *f, const char *user, tok_ids *ids, strata_error *err)
{
    /* The last answer's stop token was sampled but not fed: close the turn
     * with the format's end marker (also after an interrupted answer), then
     * the new turn. */
    int rc = encode(f, chat_end_of_turn(&f->fmt), TOK_ENCODE_SPECIAL, ids, err);
    char *text = NULL;
    if (!rc)
        rc = chat_render_next_turn(&f->fmt, user, &text, err);
    if (!rc)
        rc = encode(f, text, TOK_ENCODE_SPECIAL, ids, err);
    free(text);
    return rc;
}

void frontend_stream_begin(frontend *f)
{
    tokdec_reset(f->dec);
}

void frontend_stream_token(frontend *f, int32_t tok)
{
    size_t len = 0;
    const char *s = tokdec_push(f->dec, tok, &len, NULL);
    if (s && len) {
        fwrite(s, 1, len, f->out);
        fflush(f->out);
    }
}

void frontend_stream_end(frontend *f)
{
    size_t len = 0;
    const char *tail = tokdec_flush(f->dec, &len);
    if (tail && len)
        fwrite(tail, 1, len, f->out);
    fputc('\n', f->out);
    fflush(f->out);
}

static int stream_token(int32_t tok, void *user)
{
    frontend_stream_token(user, tok);
    return 0;
}

int frontend_answer(frontend *f, const int32_t *ids, int n, int max_new, gen_stats *st,
                    strata_error *err)
{
    frontend_stream_begin(f);
    frontend_interrupted = 0;
    int rc = strata_generate(f->seq, ids, n, &f->smp, max_new, stream_token, f,
                             &frontend_interrupted, st, err);
    frontend_stream_end(f);
    f->turns++;
    return rc;
}

void frontend_print_stats(const frontend *f, const gen_stats *st, FILE *to)
{
    const model *m = strata_model(f->e);
    double pr = st->t_prompt > 0 ? st->n_prompt / st->t_prompt : 0;
    double dr = st->t_gen > 0 ? st->n_gen / st->t_gen : 0;
    /* Decode reads every weight once per token: the bytes behind the rate. */
    double gbs = dr * (double)m->weight_bytes / 1e9;
    fprintf(to, "strata: prompt %d tok in %.2f s (%.1f tok/s), decode %d tok in %.2f s "
                "(%.1f tok/s, %.2f GB/s of weights), context %d/%d, load %.2f s%s\n",
            st->n_prompt, st->t_prompt, pr, st->n_gen, st->t_gen, dr, gbs,
            strata_seq_len(f->seq), strata_n_ctx(f->e), f->t_load,
            st->cancelled ? " [interrupted]" : st->context_full ? " [context full: raise -c]" : "");
}
