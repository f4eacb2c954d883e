/* conversation.c: a chat conversation as token ids (see conversation.h). */
#include "cli/conversation.h"

#include <string.h>

int conv_begin_turn(conversation *c, frontend *f, const char *system, const char *user,
                    strata_error *err)
{
    c->n_before = c->toks.n;
    int rc = c->toks.n == 0 ? frontend_chat_first_turn(f, system, user, &c->toks, err)
                            : frontend_chat_next_turn(f, user, &c->toks, err);
    if (rc)
        conv_drop_turn(c);
    return rc;
}

int conv_add_answer_token(conversation *c, int32_t tok, strata_error *err)
{
    if (tok_ids_push(&c->toks, tok))
        return strata_err(err, STRATA_E_NOMEM, "out of memory");
    return 0;
}

void conv_end_turn(conversation *c)
{
    c->n_before = c->toks.n;
    c->turns++;
}

void conv_drop_turn(conversation *c)
{
    c->toks.n = c->n_before;
}

void conv_reset(conversation *c)
{
    c->toks.n = 0;
    c->n_before = 0;
    c->turns = 0;
}

void conv_free(conversation *c)
{
    tok_ids_free(&c->toks);
    memset(c, 0, sizeof *c);
}
