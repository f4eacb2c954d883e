/* conversation.h: a chat conversation kept as token ids, exactly the ones
 * the model read and wrote.
 *
 * Why tokens and not messages: the conversation cache (and a slot that
 * keeps its KV) recognises a follow-up only when its prompt begins with the
 * previous turn's tokens, byte for byte.  Rendering the history as text and
 * encoding it again gives those tokens back only when every answer's ids
 * are the canonical encoding of their text, which a sampled answer (or a
 * greedy one that ends inside a character, or begins with a newline that
 * merges with the one before it) need not be.  Keeping the ids makes turn
 * k+1's prompt = turn k's prompt + turn k's answer ids + the end-of-turn
 * marker + the new user turn, so the parked image of turn k is always a
 * prefix of it. */
#ifndef STRATA_CLI_CONVERSATION_H
#define STRATA_CLI_CONVERSATION_H

#include "cli/frontend.h"

typedef struct conversation {
    /* Every turn's prompt tokens and answer tokens so far.  The last
     * answer's end-of-turn marker is not here: its stop token was sampled
     * and never fed, so the next turn adds the marker (also after an answer
     * that was stopped by Ctrl-C or a limit). */
    tok_ids toks;
    int turns;          /* answers in this conversation */
    size_t n_before;    /* tokens before the turn in progress */
} conversation;

/* Append a user turn: the first one rendered with the system prompt (NULL:
 * the template's default), a later one after the previous answer's
 * end-of-turn marker; both end with the assistant header.  c->toks is then
 * the prompt to submit. */
int conv_begin_turn(conversation *c, frontend *f, const char *system, const char *user,
                    strata_error *err);
/* One token of the answer to the turn in progress. */
int conv_add_answer_token(conversation *c, int32_t tok, strata_error *err);
/* The answer is complete (or stopped): it belongs to the history. */
void conv_end_turn(conversation *c);
/* Forget the turn in progress (a refused or failed request). */
void conv_drop_turn(conversation *c);
/* Forget everything: the next turn starts a new conversation. */
void conv_reset(conversation *c);
void conv_free(conversation *c);

#endif
