/* fuzz_json.c: libFuzzer target for the JSON parser and writer (`make fuzz`).
 *
 * Every input either parses or fails with a message.  What parses is
 * written back, and the written text must parse again to a tree that
 * writes the same text (the writer's output is always valid JSON, and
 * writing is a fixed point after one round). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json *v = NULL;
    strata_error err = {0};
    if (json_parse((const char *)data, size, &v, &err)) {
        if (!err.msg[0])
            abort(); /* a failure must say why */
        return 0;
    }
    jbuf a = {0}, b = {0};
    jbuf_json(&a, v);
    json *w = NULL;
    if (!a.oom) {
        if (json_parse(a.p, a.len, &w, &err))
            abort(); /* the writer wrote something the parser refuses */
        jbuf_json(&b, w);
        if (!b.oom && (a.len != b.len || memcmp(a.p, b.p, a.len)))
            abort();
    }
    json_free(w);
    json_free(v);
    jbuf_free(&a);
    jbuf_free(&b);
    return 0;
}
