/* frontend.h: what `run` and `chat` share: an engine (with one
 * conversation for `run`; `chat` hands the engine to the scheduler), a
 * sampler, a streaming decoder that never prints half a character, the chat
 * format, and the stats line. */
#ifndef STRATA_CLI_FRONTEND_H
#define STRATA_CLI_FRONTEND_H

#include <signal.h>
#include <stdio.h>

#include "engine/generate.h"
#include "text/chat.h"
#include "text/tokenizer.h"
#include "cli/options.h"

typedef struct frontend {
    cli_opts *o;
    strata_engine *e;
    strata_seq *seq;     /* NULL with FRONTEND_NO_SEQ */
    sampler smp;
    tokdec *dec;
    chat_template fmt;
    int turns;           /* answers given in this conversation */
    double t_load;
    FILE *out;           /* where the answer streams (stdout) */
} frontend;

extern volatile sig_atomic_t frontend_interrupted;

/* Open the engine (and a sequence).  Ctrl-C during the load stops it at the
 * next tensor: STRATA_E_CANCELLED, which the commands turn into exit 130. */
int frontend_open(frontend *f, cli_opts *o, strata_error *err);
/* frontend_open flags */
#define FRONTEND_NO_SEQ 1   /* no strata_seq: the engine goes to a scheduler,
                               which makes its own for its slots */
int frontend_open_flags(frontend *f, cli_opts *o, int flags, strata_error *err);
void frontend_close(frontend *f);
/* Plain prompt text (bos added if the model asks for it). */
int frontend_encode_prompt(frontend *f, const char *text, tok_ids *ids, strata_error *err);
/* The first user turn of a conversation in the chat format (system prompt
 * if given, else the template's default), ending with the assistant header. */
int frontend_chat_first_turn(frontend *f, const char *system, const char *user, tok_ids *ids,
                             strata_error *err);
/* A later turn, appended to ids: the end-of-turn marker that closes the
 * previous answer (its stop token was sampled, never fed), then the new user
 * turn and the assistant header.  Appended to the tokens of the
 * conversation so far, this gives exactly the tokens a first-turn rendering
 * followed by the generated answers would have in the KV cache. */
int frontend_chat_next_turn(frontend *f, const char *user, tok_ids *ids, strata_error *err);
/* Streaming to f->out: begin an answer, print one generated token (only
 * the complete characters so far), end it (pending bytes and a newline). */
void frontend_stream_begin(frontend *f);
void frontend_stream_token(frontend *f, int32_t tok);
void frontend_stream_end(frontend *f);
/* Feed ids, stream the answer to f->out. */
int frontend_answer(frontend *f, const int32_t *ids, int n, int max_new, gen_stats *st,
                    strata_error *err);
void frontend_print_stats(const frontend *f, const gen_stats *st, FILE *to);

#endif
