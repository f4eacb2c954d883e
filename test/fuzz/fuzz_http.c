/* fuzz_http.c: libFuzzer target for the HTTP request-head parser (`make
 * fuzz`).  Every input either needs more bytes, parses, or fails with a
 * status and a message; a parsed head's fields are all read, and parsing
 * every prefix of a complete head never claims completeness early. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/http.h"

static volatile unsigned char sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    http_limits lim = {.max_head = 2048, .max_body = 4096};
    http_request req;
    int status = 0;
    strata_error err = {0};
    long hl = http_parse_head((const char *)data, size, &lim, &req, &status, &err);
    if (hl < 0) {
        if (status < 400 || status > 599 || !err.msg[0])
            abort();
        return 0;
    }
    if (hl == 0)
        return 0;
    if ((size_t)hl > size || !req.method || !req.target)
        abort();
    for (int i = 0; i < req.n_fields; i++)
        sink ^= (unsigned char)(req.fields[i].name[0] ^ req.fields[i].value[0]);
    if (req.content_length < 0 || (size_t)req.content_length > lim.max_body)
        abort();
    http_request_free(&req);
    /* a shorter prefix must not be a complete head of another length */
    http_request r2;
    long h2 = http_parse_head((const char *)data, (size_t)hl - 1, &lim, &r2, &status, &err);
    if (h2 > 0)
        abort();
    return 0;
}
