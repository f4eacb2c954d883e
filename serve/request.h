/* request.h: a generation request as the OpenAI endpoints send it,
 * checked field by field (request.c); openai.c runs it. */
#ifndef STRATA_SERVE_REQUEST_H
#define STRATA_SERVE_REQUEST_H

#include "serve/serve_internal.h"

#define MAX_STOP 4

typedef struct gen {
    int chat;
    char *text;                 /* the prompt as text (chat: rendered) */
    size_t text_len;
    sampler_params sp;
    int max_tokens;
    char *stop[MAX_STOP];
    size_t stop_len[MAX_STOP];
    int n_stop;
    int stream, include_usage;
    int seed_set;               /* else the server's seed + the request's id */
} gen;

void gen_free(gen *g);

/* A request error: a 400 with this message, naming param (or none) and an
 * OpenAI error code (or none). */
typedef struct perr {
    char msg[512];
    const char *param, *code;
    char param_buf[64];
} perr;

/* Fill e; returns -1. */
int perr_set(perr *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Check the body of a chat (chat = 1) or completion request and fill g:
 * sampling (the server's defaults for what is left out), limits, stop
 * strings, streaming, and the prompt as text (chat: the messages rendered
 * with the model's chat format).  0, or -1 with e. */
int gen_parse(serve *s, const json *root, int chat, gen *g, perr *e);

#endif
