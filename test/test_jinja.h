/* test_jinja.h: what the jinja suite shares with the server's tests. */
#ifndef STRATA_TEST_JINJA_H
#define STRATA_TEST_JINJA_H

/* A copy of a GGUF (in the test's directory, as NAME.gguf; malloc'd path)
 * whose tokenizer.chat_template is replaced by tmpl, padded to the old
 * template's byte length with a Jinja comment (the string's length prefix
 * stays right).  tmpl must be at least 4 bytes shorter than the old one. */
char *test_gguf_with_template(const char *model, const char *tmpl, const char *name);

#endif
