/* chat.h: chat formats (doc/formats.md §5.5) without a Jinja engine.
 *
 * The GGUF's tokenizer.chat_template is recognised by substring, as
 * llama.cpp does: "<|im_start|>" is ChatML (SmolLM2, Qwen), "<|start_header_id|>"
 * Llama-3, "<start_of_turn>" Gemma.  `--chat-template NAME` (chatml, llama3,
 * gemma) overrides it.  Rendering produces the text to tokenize with
 * TOK_ENCODE_SPECIAL; it never contains the BOS token: encode with
 * TOK_ENCODE_ADD_BOS so BOS appears exactly once, where the model wants it
 * (Gemma and Llama-3 set add_bos; SmolLM2 and Qwen do not). */
#ifndef STRATA_CHAT_H
#define STRATA_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "model/gguf.h"

enum chat_format {
    CHAT_FORMAT_NONE = 0,
    CHAT_FORMAT_CHATML,
    CHAT_FORMAT_LLAMA3,
    CHAT_FORMAT_GEMMA,
};

typedef struct chat_msg {
    const char *role;    /* "system", "user", "assistant" (others pass through) */
    const char *content;
} chat_msg;

typedef struct chat_template {
    enum chat_format format;
    /* Text of the system turn the template inserts when the conversation
     * does not start with one (SmolLM2: "You are a helpful AI assistant
     * named SmolLM, trained by Hugging Face"), or NULL.  malloc'd. */
    char *default_system;
} chat_template;

/* "chatml", "llama3", "gemma" -> format; anything else: STRATA_E_ARG with
 * the list of names. */
int chat_format_from_name(const char *name, enum chat_format *out, strata_error *err);
/* Recognise a Jinja template by substring; an unknown (or NULL) template is
 * STRATA_E_UNSUPPORTED with a message that says to use --chat-template. */
int chat_format_from_template(const char *tmpl, enum chat_format *out, strata_error *err);
const char *chat_format_name(enum chat_format f);

/* The template for a model: override_name (may be NULL) wins over the
 * template text tmpl (may be NULL).  The default system text is taken from
 * tmpl when the format is ChatML and tmpl holds a literal system turn. */
int chat_template_init(chat_template *t, const char *tmpl, const char *override_name,
                       strata_error *err);
/* Same, reading tokenizer.chat_template from a GGUF file.  A file without
 * the key whose general.architecture starts with "gemma" gets the Gemma
 * format (Gemma's pre-trained files have no template). */
int chat_template_from_gguf(chat_template *t, const gguf *g, const char *override_name,
                            strata_error *err);
void chat_template_free(chat_template *t); /* accepts NULL */

/* Render a whole conversation (plus the assistant's generation prompt when
 * add_generation_prompt) into a malloc'd NUL-terminated string. */
int chat_render(const chat_template *t, const chat_msg *msgs, size_t n,
                bool add_generation_prompt, char **out, strata_error *err);

/* The text that continues a conversation whose last assistant answer ended
 * with the end-of-turn token (already fed to the model): what lies between
 * that token and the next generation, for one new user message.  Lets a
 * chat keep its KV cache between turns.  ChatML:
 * "\n<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n". */
int chat_render_next_turn(const chat_template *t, const char *user, char **out,
                          strata_error *err);

/* The end-of-turn marker text ("<|im_end|>", "<|eot_id|>", "<end_of_turn>"). */
const char *chat_end_of_turn(const chat_template *t);

#endif
