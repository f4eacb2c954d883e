/* cmd_chat.c: strata-cli chat — an interactive conversation in the model's
 * chat format, on the scheduler (sched/scheduler.h).
 *
 * Each turn submits the whole conversation as token ids (conversation.h:
 * the previous turns' prompt and answer ids, then the new user turn) and
 * streams the answer as it comes.  The conversation cache is on by default
 * here: a finished turn's KV is parked in host memory, and the next turn,
 * whose tokens extend it, restores it instead of re-reading the history
 * (/stats shows restored vs read).  Works on a terminal and on a pipe. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/conversation.h"
#include "sched/scheduler.h"
#include "cli/frontend.h"
#include "cli/options.h"
#include "cli/signals.h"
#include "kernels/ops.h"

/* The conversation cache for chat unless --conversation-cache-mib says
 * otherwise (0 turns it off).  One conversation at a time needs little: on
 * the demo model (30 layers, 3 KV heads of 64, k8v4) a token's K/V is about
 * 9 KiB, so 256 MiB holds a 28K-token conversation; on a 40-layer model with
 * 8 KV heads of 128 (about 65 KiB a token) it holds 4K tokens, and a longer
 * one is not parked (the next turn re-reads, slower but the same). */
#define CHAT_CACHE_MIB 256

#define CHAT_USES                                                                \
    (CLI_USE_MODEL | CLI_USE_CTX | CLI_USE_ENGINE | CLI_USE_VERBOSE | CLI_USE_SLOTS |     \
     CLI_USE_GROUPS | CLI_USE_SAMPLING | CLI_USE_PREDICT | CLI_USE_CHAT | CLI_USE_CACHE | \
     CLI_USE_SAVE)

/* The chat commands: /help prints only these (the options are for the
 * command line, and 50 lines of them would scroll these away). */
static void chat_commands(FILE *f)
{
    fprintf(f, "  /reset        forget the conversation (the system prompt stays)\n"
               "  /system TEXT  set the system prompt (starts a new conversation);\n"
               "                /system alone clears it\n"
               "  /stats        rates, prompt tokens read vs restored, context use, budgets\n"
               "  /help         this list\n"
               "  /quit         leave (Ctrl-D too); Ctrl-C stops the current answer (what it\n"
               "                said so far stays in the conversation)\n");
}

static void usage(FILE *f)
{
    fprintf(f, "usage: strata-cli chat [-m MODEL] [options]\n\n"
               "Interactive chat; with no -m, the demo model (`make model`).  On the demo\n"
               "model the defaults are --kv f16 --temp 0 (its 135M parameters lose the thread\n"
               "with a quantized K and V, and when sampling); other models get k8v4 and 0.8.\n"
               "Commands:\n");
    chat_commands(f);
    fprintf(f, "\n"
               "Each turn sends the whole conversation to the scheduler; a follow-up turn\n"
               "restores the previous turns from the conversation cache instead of\n"
               "re-reading them (--conversation-cache-mib, default %d for chat; 0: off,\n"
               "every turn re-reads the conversation).\n\n"
               "  --resume                with --conversation-save DIR: go on with the newest\n"
               "                          conversation saved there (the one a chat over DIR\n"
               "                          left last); its first follow-up restores it and\n"
               "                          reads only the new message\n\n", CHAT_CACHE_MIB);
    cli_opts_help(f, CHAT_USES);
}

static void on_sigint(int sig)
{
    (void)sig;
    frontend_interrupted = 1;
}

/* Read one line (without its newline) into a growing buffer; *len is its
 * length in bytes, which differs from strlen when it holds a NUL byte.
 * Returns 1 on a line, 0 on EOF, -1 when interrupted at the prompt. */
static int read_line(char **buf, size_t *cap, size_t *len)
{
    size_t n = 0;
    for (;;) {
        if (n + 2 > *cap) {
            size_t nc = *cap ? *cap * 2 : 1024;
            char *nb = realloc(*buf, nc);
            if (!nb)
                return 0;
            *buf = nb;
            *cap = nc;
        }
        errno = 0;
        int c = fgetc(stdin);
        if (c == EOF) {
            if (errno == EINTR) {
                clearerr(stdin);
                return -1;
            }
            (*buf)[n] = '\0';
            *len = n;
            return n > 0 ? 1 : 0;
        }
        if (c == '\n')
            break;
        (*buf)[n++] = (char)c;
    }
    (*buf)[n] = '\0';
    *len = n;
    return 1;
}

typedef struct chat_state {
    frontend fe;
    strata_sched *sched;
    conversation conv;
    const char *system;
    char *system_buf;
    size_t cache_mib;
    uint64_t answers;   /* answers this session: turn k samples with seed + k */
    sched_result last;  /* of the last answer */
    int last_ctx;       /* conversation tokens after it (one more than the
                         * context holds when it ended by length: the last
                         * token was sampled, not fed) */
    int have_last;
    tok_ids saved;      /* --resume: the newest image loaded at start */
} chat_state;

static void print_cache_stats(chat_state *c)
{
    sched_cache_stats st;
    sched_get_cache_stats(c->sched, &st);
    if (!st.on) {
        printf("conversation cache: off (--conversation-cache-mib 0): every turn re-reads "
               "the conversation\n");
        return;
    }
    if (st.cache.bytes_max == 0) {
        /* the budget is taken at the first capture: "0 of 0 MiB" said
         * neither what is kept nor what may be */
        printf("conversation cache: empty; budget %zu MiB, set aside when the first "
               "conversation is parked\n", c->cache_mib);
        return;
    }
    /* Up to date with the last answer: the scheduler publishes its counters
     * before it reports a request as finished.  A finished turn stays in
     * its slot (resident reuse) and is captured only when the slot gives it
     * up (to another conversation, as after /reset with one slot, or for
     * KV pages): it is counted with the turn that made it go. */
    printf("conversation cache: %.2f of %.0f MiB, %d of %d images; %llu captures "
           "(%llu K/V reused, %llu failed), %llu restores (%llu tokens), %llu evictions\n",
           (double)st.cache.bytes_used / 1048576.0, (double)st.cache.bytes_max / 1048576.0,
           st.cache.images, st.cache.images_max, (unsigned long long)st.captures,
           (unsigned long long)st.park.captures[PARK_CAPTURE_REUSED],
           (unsigned long long)st.capture_failures, (unsigned long long)st.restores,
           (unsigned long long)st.restored_tokens, (unsigned long long)st.cache.evictions);
    const persist_stats *ps = &st.park.persist;
    if (ps->saved || ps->loaded || ps->skipped || ps->save_failures)
        printf("conversation save: %llu loaded at start (%llu files skipped), %llu saved "
               "(%llu failed, %llu not queued), %llu files removed\n",
               (unsigned long long)ps->loaded, (unsigned long long)ps->skipped,
               (unsigned long long)ps->saved, (unsigned long long)ps->save_failures,
               (unsigned long long)ps->save_dropped, (unsigned long long)ps->removed);
}

/* The last answer's numbers, all from its sched_result. */
static void print_stats(chat_state *c)
{
    char d[1024];
    strata_describe(c->fe.e, d, sizeof d);
    printf("%s\n", d);
    int n_ctx = strata_n_ctx(c->fe.e);
    if (!c->have_last) {
        printf("no answer yet; context %d/%d\n", (int)c->conv.toks.n, n_ctx);
    } else {
        const sched_result *r = &c->last;
        int n_reused = r->n_resident + r->n_restored, n_read = r->n_prompt - n_reused;
        /* The reading ends at the first sample: the first token's time, or,
         * when no token came (a stop token sampled first: an empty answer),
         * the answer's end (t_first is 0 then).  Either holds the queue
         * wait, the restore and the reading. */
        double t_sampled = r->n_gen > 0 ? r->t_first : r->t_done;
        double t_read = t_sampled - r->t_admit - r->t_restore;
        if (t_read < 0)
            t_read = 0;
        char first[64];
        if (r->n_gen > 0)
            snprintf(first, sizeof first, "first token after %.3f s", r->t_first);
        else
            snprintf(first, sizeof first, "no token (ended after %.3f s)", r->t_done);
        double gbs = r->decode_tps * (double)strata_model(c->fe.e)->weight_bytes / 1e9;
        printf("strata: prompt %d tok: %d reused (%d kept in the slot, %d restored in %.4f s), "
               "%d read (%.2f s, %.1f tok/s); "
               "%s; decode %d tok (%.1f tok/s, %.2f GB/s of weights); "
               "context %d/%d; finish %s; load %.2f s%s\n",
               r->n_prompt, n_reused, r->n_resident, r->n_restored, r->t_restore, n_read, t_read,
               t_read > 0 ? n_read / t_read : 0.0, first, r->n_gen, r->decode_tps, gbs,
               c->last_ctx < n_ctx ? c->last_ctx : n_ctx, n_ctx, sched_finish_name(r->finish),
               c->fe.t_load,
               r->finish == SCHED_FINISH_CANCELLED ? " [interrupted]" : "");
    }
    print_cache_stats(c);
}

static void new_conversation(chat_state *c)
{
    conv_reset(&c->conv);
}

/* Returns 1 to quit. */
static int command(chat_state *c, const char *line)
{
    if (!strcmp(line, "/quit") || !strcmp(line, "/exit"))
        return 1;
    if (!strcmp(line, "/reset")) {
        new_conversation(c);
        printf("(conversation reset)\n");
    } else if (!strncmp(line, "/system", 7) && (line[7] == ' ' || !line[7])) {
        free(c->system_buf);
        c->system_buf = line[7] ? strdup(line + 8) : NULL;
        c->system = c->system_buf;
        new_conversation(c);
        printf("(system prompt %s; conversation reset)\n", c->system ? "set" : "cleared");
    } else if (!strcmp(line, "/stats")) {
        print_stats(c);
    } else if (!strcmp(line, "/help")) {
        chat_commands(stdout);
        printf("(the command line's options: strata-cli chat --help)\n");
    } else {
        printf("unknown command %s (/help lists them)\n", line);
    }
    fflush(stdout);
    return 0;
}

/* Stream the answer of h to stdout and into the conversation; Ctrl-C
 * cancels it.  Queue mode, not a callback: the tokens come to this thread,
 * which owns stdout, the decoder and the conversation, and which polls the
 * Ctrl-C flag between waits of at most 50 ms (the signal handler can only
 * set a flag: sched_cancel takes a lock).  Tokens already generated when the
 * cancel takes effect are still read and printed: they are part of what was
 * produced, and of the history. */
static void stream_answer(chat_state *c, sched_handle *h, sched_result *res)
{
    strata_error err = {0};
    int cancelled = 0, oom = 0;
    frontend_stream_begin(&c->fe);
    for (;;) {
        if (frontend_interrupted && !cancelled) {
            sched_cancel(h);
            cancelled = 1;
        }
        int32_t tok = -1;
        int r = sched_next(h, &tok, 0.05);
        if (r == 0)
            break;
        if (r == SCHED_TIMEOUT)
            continue;
        frontend_stream_token(&c->fe, tok);
        if (!oom && conv_add_answer_token(&c->conv, tok, &err)) {
            oom = 1;
            sched_cancel(h);
        }
    }
    frontend_stream_end(&c->fe);
    sched_wait(h, res);
    if (oom) {
        res->finish = SCHED_FINISH_ERROR;
        res->err = err;
    }
}

/* What to do about a turn that does not fit the context.  /reset helps
 * only when earlier turns are in the way: it keeps the system prompt, so
 * when that alone fills the context it must be shortened. */
static void limit_hint(chat_state *c)
{
    int n_ctx = strata_n_ctx(c->fe.e);
    if (c->conv.toks.n > 0) {
        fprintf(stderr, "(use /reset to start over)\n");
        return;
    }
    tok_ids sys = {0};
    strata_error err = {0};
    int n_sys = -1;
    if (c->system && !frontend_chat_first_turn(&c->fe, c->system, "", &sys, &err))
        n_sys = (int)sys.n;
    tok_ids_free(&sys);
    if (n_sys >= n_ctx)
        fprintf(stderr, "(the system prompt alone takes %d tokens of the %d-token context, and "
                        "/reset keeps it: shorten it with /system TEXT, clear it with /system, "
                        "or raise -c)\n", n_sys, n_ctx);
    else
        fprintf(stderr, "(this message does not fit the %d-token context even as a new "
                        "conversation: shorten it%s, or raise -c)\n", n_ctx,
                c->system ? " or the system prompt (/system TEXT)" : "");
}

static void turn(chat_state *c, const char *line)
{
    strata_error err = {0};
    int rc = conv_begin_turn(&c->conv, &c->fe, c->system, line, &err);
    sched_request r = sched_request_default();
    r.tokens = c->conv.toks.ids;
    r.n_tokens = (int)c->conv.toks.n;
    r.sampling = c->fe.o->sp;
    r.sampling.seed += c->answers;
    r.max_tokens = c->fe.o->n_predict;
    sched_handle *h = NULL;
    frontend_interrupted = 0;
    if (!rc)
        rc = sched_submit(c->sched, &r, &h, &err);
    if (rc) {
        conv_drop_turn(&c->conv);
        fprintf(stderr, "strata-cli chat: %s\n", err.msg);
        if (rc == STRATA_E_LIMIT)
            limit_hint(c);
        return;
    }
    sched_result res;
    stream_answer(c, h, &res);
    sched_handle_free(h);
    if (res.finish == SCHED_FINISH_ERROR) {
        /* The history stays as it was before this turn. */
        conv_drop_turn(&c->conv);
        fprintf(stderr, "strata-cli chat: %s\n", res.err.msg);
        return;
    }
    /* stop, length or cancelled: the answer, whole or not, is history */
    conv_end_turn(&c->conv);
    c->answers++;
    c->last = res;
    c->last_ctx = (int)c->conv.toks.n;
    c->have_last = 1;
    if (res.finish == SCHED_FINISH_CANCELLED)
        fprintf(stderr, "(answer stopped)\n");
    else if (res.finish == SCHED_FINISH_LENGTH &&
             (c->fe.o->n_predict <= 0 || res.n_gen < c->fe.o->n_predict))
        fprintf(stderr, "strata-cli chat: context full (%d tokens; raise -c)\n"
                        "(use /reset to start over)\n", strata_n_ctx(c->fe.e));
}

/* Open the engine and start the scheduler on it, with SIGINT blocked: the
 * threads started meanwhile (the scheduler's, its kernel workers) inherit
 * the mask, so a Ctrl-C always reaches the main thread, where it interrupts
 * the read at the prompt or cancels the answer.  A Ctrl-C while loading
 * stays pending; the load polls for it between tensors and stops (exit 130,
 * frontend.c). */
/* Each image the save directory loads at start (oldest first, within
 * sched_new): the last one is the newest, the conversation to resume.
 * Its pending token (the last of an answer cut by -n, never read) ends the
 * history as it ended the chat that saved it. */
static void on_load(const int32_t *tokens, int n, int32_t pending, void *user)
{
    chat_state *c = user;
    c->saved.n = 0;
    for (int i = 0; i <= n; i++)
        if ((i < n || pending >= 0) && tok_ids_push(&c->saved, i < n ? tokens[i] : pending)) {
            c->saved.n = 0;   /* out of memory: nothing to resume */
            return;
        }
}

/* --resume: the saved conversation becomes this one's history.  Its tokens
 * are what the model read (the image), and the pending token if the last
 * answer was cut by -n, so the next turn's prompt begins with them and
 * restores all the image holds, as the chat that saved it would have; the
 * end-of-turn marker of its last answer is added by that turn, as after any
 * answer. */
static void resume(chat_state *c, const char *dir, int tty)
{
    if (!c->saved.n) {
        fprintf(stderr, "strata-cli chat: --resume: no saved conversation loaded from %s; "
                        "starting a new one\n", dir);
        return;
    }
    conv_reset(&c->conv);
    for (size_t i = 0; i < c->saved.n; i++)
        if (tok_ids_push(&c->conv.toks, c->saved.ids[i])) {
            conv_reset(&c->conv);
            fprintf(stderr, "strata-cli chat: --resume: out of memory; starting a new "
                            "conversation\n");
            return;
        }
    c->conv.n_before = c->conv.toks.n;
    c->conv.turns = 1;
    fprintf(stderr, "(resumed a conversation of %zu tokens saved in %s)\n", c->saved.n, dir);
    if (tty) {
        /* the history as the model read it, markup included */
        char *text = NULL;
        size_t len = 0;
        strata_error err = {0};
        if (!tokenizer_decode(strata_tokenizer(c->fe.e), c->saved.ids, c->saved.n,
                              TOK_DECODE_SPECIAL, &text, &len, &err))
            fprintf(stderr, "%.*s\n", (int)len, text);
        free(text);
    }
}

static int chat_open(chat_state *c, cli_opts *o, strata_error *err)
{
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    int rc = frontend_open_flags(&c->fe, o, FRONTEND_NO_SEQ, err);
    if (!rc) {
        sched_params sp = sched_params_default();
        sp.chat_template = o->chat_template;
        cli_opts_sched_cache(o, &sp);
        sp.on_load = on_load;
        sp.load_user = c;
        c->sched = sched_new(c->fe.e, &sp, err);
        if (!c->sched) {
            rc = err->code ? err->code : STRATA_E_NOMEM;
            frontend_close(&c->fe);
        }
    }
    c->cache_mib = o->conv_cache_mib;
    if (rc == STRATA_E_CANCELLED) {
        /* the Ctrl-C that stopped the load is still pending: take it, so
         * unblocking does not deliver it a second time */
        struct timespec zero = {0, 0};
        sigtimedwait(&block, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

int cmd_chat(int argc, char **argv)
{
    cli_opts o;
    cli_opts_init(&o);
    o.uses = CHAT_USES;
    o.cmd = "chat";
    o.conv_cache_mib = CHAT_CACHE_MIB; /* before parsing: the user's value wins, 0 too */
    /* --resume is chat's own: taken out before the shared options */
    int want_resume = 0, n_args = 0;
    char **args = malloc((size_t)(argc + 1) * sizeof *args);
    if (!args)
        return 1;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && !strcmp(argv[i], "--resume"))
            want_resume = 1;
        else
            args[n_args++] = argv[i];
    }
    args[n_args] = NULL;
    int st = cli_opts_parse_all(&o, "chat", n_args, args, usage);
    free(args);
    if (st >= 0)
        return st;
    if (want_resume && !o.conv_save_dir) {
        fprintf(stderr, "strata-cli chat: --resume goes on with a conversation saved by "
                        "--conversation-save DIR; give the DIR\n");
        return 2;
    }
    if (o.n_predict == 0) {
        /* the scheduler reads max_tokens <= 0 as "no limit": say so rather
         * than answer without one */
        fprintf(stderr, "strata-cli chat: -n 0 would answer nothing; -n -1 (the default) means "
                        "no limit\n");
        return 2;
    }
    if (cli_opts_default_model(&o, "chat"))
        return 1;
    cli_opts_demo_defaults(&o);
    o.chat = 1;
    chat_state c;
    memset(&c, 0, sizeof c);
    c.system = o.system;
    strata_error err = {0};
    /* No SA_RESTART: Ctrl-C at the prompt interrupts the read.  Installed
     * before the load, so a Ctrl-C just after it sets the flag rather than
     * killing the program. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    if (chat_open(&c, &o, &err)) {
        fprintf(stderr, "strata-cli chat: %s\n", err.msg);
        return err.code == STRATA_E_CANCELLED ? CLI_EXIT_INTERRUPTED : 1;
    }
    int tty = isatty(0);
    if (tty)
        fprintf(stderr, "strata chat (%s, %s, KV %s, temp %g, conversation cache %zu MiB). /help "
                        "for commands, Ctrl-C stops an answer, Ctrl-D or /quit leaves.\n",
                strata_model(c.fe.e)->arch_name,
                strata_backend(c.fe.e) == STRATA_BACKEND_CUDA ? "cuda" : "cpu",
                strata_kv_name(strata_kv_type(c.fe.e)), (double)o.sp.temp, c.cache_mib);
    if (want_resume)
        resume(&c, o.conv_save_dir, tty);
    tok_ids_free(&c.saved);
    char *line = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (tty) {
            printf("> ");
            fflush(stdout);
        }
        frontend_interrupted = 0;
        int r = read_line(&line, &cap, &len);
        if (r < 0) {
            printf("\n(Ctrl-D or /quit to leave)\n");
            continue;
        }
        if (r == 0)
            break;
        if (strlen(line) != len) {
            /* The text goes on as a C string: a NUL would end the line
             * there, silently.  Say so rather than send half of it. */
            fprintf(stderr, "strata-cli chat: the line holds a NUL byte (at byte %zu of %zu); "
                            "nothing sent\n", strlen(line) + 1, len);
            continue;
        }
        if (!line[0])
            continue;
        if (line[0] == '/') {
            if (command(&c, line))
                break;
            continue;
        }
        turn(&c, line);
    }
    if (tty)
        printf("\n");
    free(line);
    free(c.system_buf);
    conv_free(&c.conv);
    sched_free(c.sched);
    frontend_close(&c.fe);
    return 0;
}
