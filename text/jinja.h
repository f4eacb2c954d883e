/* jinja.h: a small interpreter for the Jinja subset that chat templates use
 * (doc/chat-templates.md lists what is supported and what is refused).
 *
 * A template is parsed once (jinja_parse) and rendered any number of times
 * with a chat context: `messages` (each a mapping with `role` and
 * `content`), `add_generation_prompt`, `bos_token` and `eos_token`.  The
 * rendering matches Python's jinja2 with the settings Hugging Face uses
 * (trim_blocks, lstrip_blocks, loop controls, its `tojson`), byte for
 * byte.  Nothing in a template can reach the host: there is no file, import
 * or attribute access beyond the values given, and every render runs under
 * limits (output, memory, steps, depth), so a hostile template ends with an
 * error instead of hanging.  Errors name the template line. */
#ifndef STRATA_JINJA_H
#define STRATA_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct jinja_template jinja_template;

typedef struct jinja_msg {
    const char *role;
    const char *content;
} jinja_msg;

typedef struct jinja_limits {
    size_t max_output;  /* bytes of rendered text */
    size_t max_memory;  /* bytes of values a render may allocate */
    uint64_t max_steps; /* statements, expressions and loop turns evaluated */
    int max_depth;      /* nesting of macro calls and of the parse */
} jinja_limits;

/* 16 MiB output, 256 MiB memory, 20M steps, depth 64. */
jinja_limits jinja_default_limits(void);

typedef struct jinja_chat_ctx {
    const jinja_msg *messages;
    size_t n_messages;
    bool add_generation_prompt;
    const char *bos_token; /* NULL: undefined */
    const char *eos_token;
    int64_t now;           /* seconds since 1970 for strftime_now; 0: the clock */
} jinja_chat_ctx;

/* Parse template text (len bytes, need not be NUL-terminated). */
int jinja_parse(const char *src, size_t len, jinja_template **out, strata_error *err);
void jinja_free(jinja_template *t); /* accepts NULL */

/* Render into a malloc'd NUL-terminated string (its length in *out_len when
 * out_len is not NULL).  lim NULL: jinja_default_limits(). */
int jinja_render_chat(const jinja_template *t, const jinja_chat_ctx *ctx,
                      const jinja_limits *lim, char **out, size_t *out_len,
                      strata_error *err);

#endif
