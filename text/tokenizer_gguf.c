/* tokenizer_gguf.c: read the tokenizer.ggml.* keys (doc/formats.md §5.1) into a
 * tokenizer_desc and build the tokenizer from it. */
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

/* A string key as a NUL-terminated copy in buf; absent -> NULL. */
static int get_name(const gguf *g, const char *key, char *buf, size_t cap,
                    const char **out, strata_error *err)
{
    gguf_str s;
    int rc = gguf_get_str(g, key, &s, err);
    *out = NULL;
    if (rc == STRATA_E_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    if (s.len >= cap)
        return strata_err(err, STRATA_E_FORMAT, "%s: %s is %llu bytes long",
                          gguf_path(g), key, (unsigned long long)s.len);
    memcpy(buf, s.p, s.len);
    buf[s.len] = '\0';
    *out = buf;
    return 0;
}

static int get_opt_id(const gguf *g, const char *key, int64_t *v, strata_error *err)
{
    uint32_t x;
    int rc = gguf_get_u32(g, key, &x, err);
    if (rc == STRATA_E_NOTFOUND)
        return 0;
    if (!rc)
        *v = x;
    return rc;
}

static int get_opt_bool(const gguf *g, const char *key, int *v, strata_error *err)
{
    bool b;
    int rc = gguf_get_bool(g, key, &b, err);
    if (rc == STRATA_E_NOTFOUND)
        return 0;
    if (!rc)
        *v = b;
    return rc;
}

/* An optional numeric array of n_vocab 4-byte elements, copied out of the
 * mapping (metadata has no alignment guarantee). */
static int get_vocab_array(const gguf *g, const char *key, uint32_t want1,
                           uint32_t want2, size_t n_vocab, void **out,
                           strata_error *err)
{
    uint32_t type;
    uint64_t n;
    const void *data;
    *out = NULL;
    int rc = gguf_get_array(g, key, &type, &n, &data, err);
    if (rc == STRATA_E_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    if (type != want1 && type != want2)
        return strata_err(err, STRATA_E_TYPE, "%s: %s has elements of type %s, "
                          "expected %s", gguf_path(g), key, gguf_vtype_name(type),
                          gguf_vtype_name(want1));
    if (n != n_vocab)
        return strata_err(err, STRATA_E_FORMAT, "%s: %s has %llu entries, the "
                          "vocabulary %zu", gguf_path(g), key,
                          (unsigned long long)n, n_vocab);
    *out = malloc(n_vocab * 4 + 1);
    if (!*out)
        return strata_err(err, STRATA_E_NOMEM, "%s: out of memory for %s",
                          gguf_path(g), key);
    memcpy(*out, data, n_vocab * 4);
    return 0;
}

int tokenizer_from_gguf(const gguf *g, tokenizer **out, strata_error *err)
{
    tokenizer_desc d;
    char model[64], pre[128];
    uint64_t n = 0, n_merges = 0;
    void *types = NULL, *scores = NULL;
    int rc;
    *out = NULL;
    tokenizer_desc_init(&d);
    d.name = gguf_path(g);
    if ((rc = get_name(g, "tokenizer.ggml.model", model, sizeof model, &d.model, err)))
        return rc;
    if (!d.model)
        return strata_err(err, STRATA_E_NOTFOUND, "%s: tokenizer.ggml.model is missing "
                          "(the file has no tokenizer)", d.name);
    if ((rc = get_name(g, "tokenizer.ggml.pre", pre, sizeof pre, &d.pre, err)) ||
        (rc = gguf_get_str_array(g, "tokenizer.ggml.tokens", &d.tokens, &n, err)))
        return rc;
    d.n_vocab = (size_t)n;
    rc = gguf_get_str_array(g, "tokenizer.ggml.merges", &d.merges, &n_merges, err);
    if (rc && rc != STRATA_E_NOTFOUND)
        return rc;
    if (rc == STRATA_E_NOTFOUND && strcmp(d.model, "gpt2") == 0)
        return strata_err(err, STRATA_E_NOTFOUND, "%s: tokenizer.ggml.merges is "
                          "missing for a gpt2 (BPE) tokenizer", d.name);
    d.n_merges = (size_t)n_merges;
    if ((rc = get_opt_id(g, "tokenizer.ggml.bos_token_id", &d.bos, err)) ||
        (rc = get_opt_id(g, "tokenizer.ggml.eos_token_id", &d.eos, err)) ||
        (rc = get_opt_id(g, "tokenizer.ggml.eot_token_id", &d.eot, err)) ||
        (rc = get_opt_id(g, "tokenizer.ggml.eom_token_id", &d.eom, err)) ||
        (rc = get_opt_id(g, "tokenizer.ggml.unknown_token_id", &d.unk, err)) ||
        (rc = get_opt_id(g, "tokenizer.ggml.padding_token_id", &d.pad, err)) ||
        (rc = get_opt_bool(g, "tokenizer.ggml.add_bos_token", &d.add_bos, err)) ||
        (rc = get_opt_bool(g, "tokenizer.ggml.add_eos_token", &d.add_eos, err)) ||
        (rc = get_opt_bool(g, "tokenizer.ggml.add_space_prefix", &d.add_space_prefix, err)))
        return rc;
    if ((rc = get_vocab_array(g, "tokenizer.ggml.token_type", GGUF_I32, GGUF_U32,
                              d.n_vocab, &types, err)) ||
        (rc = get_vocab_array(g, "tokenizer.ggml.scores", GGUF_F32, GGUF_F32,
                              d.n_vocab, &scores, err)))
        goto done;
    d.types = types;
    d.scores = scores;
    rc = tokenizer_new(&d, out, err);
done:
    free(types);
    free(scores);
    return rc;
}
