/* fuzz_jinja.c: libFuzzer target for the chat-template interpreter
 * (`make fuzz`): the input is a template, as an untrusted GGUF would carry.
 *
 * Every input either parses or fails with a message; what parses is
 * rendered over a short conversation under small limits, and either
 * renders (NUL-terminated, the length it reports) or fails with a message.
 * The sanitizers catch the rest; the limits keep each run short. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    jinja_template *t = NULL;
    strata_error err = {0};
    if (jinja_parse((const char *)data, size, &t, &err)) {
        if (!err.msg[0] || t)
            abort(); /* a failure must say why, and leave nothing */
        return 0;
    }
    static const jinja_msg msgs[] = {
        {"system", "Be brief."}, {"user", "Hi \xc3\xa9"}, {"assistant", "<think>x</think>Yo"},
        {"user", "again"}};
    jinja_limits lim = {64 << 10, 16 << 20, 200000, 16};
    for (int gen = 0; gen < 2; gen++) {
        jinja_chat_ctx ctx = {msgs, gen ? 4 : 2, gen, "<s>", "</s>", 1700000000};
        char *out = NULL;
        size_t n = 0;
        memset(&err, 0, sizeof err);
        if (jinja_render_chat(t, &ctx, &lim, &out, &n, &err)) {
            if (!err.msg[0] || out)
                abort();
            continue;
        }
        if (!out || strlen(out) > n || n > lim.max_output)
            abort();
        free(out);
    }
    jinja_free(t);
    return 0;
}
