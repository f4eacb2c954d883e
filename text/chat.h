/* chat.h: chat formats (doc/formats.md §5.5, doc/chat-templates.md).
 *
 * A model's own tokenizer.chat_template is run by the Jinja interpreter
 * (text/jinja.h) with its bos/eos token texts.  `--chat-template NAME`
 * (chatml, llama3, gemma) overrides it with a built-in format, and a file
 * without a template needs one.  The template is also recognised by
 * substring, as llama.cpp does ("<|im_start|>" ChatML, "<|start_header_id|>"
 * Llama-3, "<start_of_turn>" Gemma), for its end-of-turn marker.
 * Rendering produces the text to tokenize with TOK_ENCODE_SPECIAL; encode
 * it with TOK_ENCODE_ADD_BOS so BOS appears exactly once, where the model
 * wants it (Gemma and Llama-3 set add_bos; SmolLM2 and Qwen do not): the
 * built-in formats never write BOS, and a model template's leading
 * bos_token is dropped when the tokenizer adds BOS itself. */
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

struct jinja_template;

typedef struct chat_template {
    enum chat_format format;  /* recognised or chosen; NONE for an unknown template */
    /* The model's template when it is the one used (no override), else
     * NULL; then bos/eos are its token texts (NULL: undefined), eot the
     * text the template writes right after an answer that the stop token
     * stands for, and source names the model file for errors. */
    struct jinja_template *jinja;
    char *bos, *eos, *eot, *source;
    /* The template writes bos_token and the tokenizer adds BOS too: the
     * rendered text's leading bos is dropped so BOS appears once. */
    bool strip_bos;
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
 * template text tmpl (may be NULL), which is parsed as Jinja (with bos and
 * eos undefined; chat_template_from_gguf sets them).  A template that does
 * not parse is an error naming its line.  The default system text (used by
 * the built-in ChatML renderer only) is taken from tmpl when the format is
 * ChatML and tmpl holds a literal system turn. */
int chat_template_init(chat_template *t, const char *tmpl, const char *override_name,
                       strata_error *err);
/* Same, reading tokenizer.chat_template and the bos/eos token texts from a
 * GGUF file; errors name the file.  A file without the key whose
 * general.architecture starts with "gemma" gets the Gemma format (Gemma's
 * pre-trained files have no template). */
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
 * "\n<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n".
 * With a model template: what it writes after an answer (less the end
 * marker) up to the next generation, from rendering a probe conversation
 * (user, assistant, this user message). */
int chat_render_next_turn(const chat_template *t, const char *user, char **out,
                          strata_error *err);

/* The end-of-turn marker text ("<|im_end|>", "<|eot_id|>", "<end_of_turn>";
 * with a model template, what it writes after an answer when that is the
 * format's marker or the eos token, else ""). */
const char *chat_end_of_turn(const chat_template *t);

#endif
