/* tokenizer.c: building a tokenizer from its description, the vocabulary
 * maps, encode (special tokens, then per-model algorithm), decode and the
 * streaming decoder.  The algorithms live in tokenizer_bpe.c,
 * tokenizer_spm.c and pretokenize.c; reading the GGUF keys in
 * tokenizer_gguf.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_impl.h"
#include "text/unicode_nfc.h"

/* ---- hash maps ------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_pair(uint64_t key)
{
    key ^= key >> 33; /* murmur3 finaliser: spreads ids over the table */
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return key;
}

/* Smallest power of two >= 2n, so probes stay short. */
static size_t table_size(size_t n)
{
    size_t s = 16;
    while (s < 2 * n)
        s *= 2;
    return s;
}

int32_t tok_strmap_get(const tokenizer *t, const char *s, size_t len)
{
    const tok_strmap *m = &t->vocab;
    for (size_t i = hash_bytes(s, len) & m->mask;; i = (i + 1) & m->mask) {
        int32_t id = m->slots[i];
        if (id < 0)
            return -1;
        if (t->text_len[id] == len && memcmp(t->text[id], s, len) == 0)
            return id;
    }
}

static void strmap_put(tokenizer *t, int32_t id)
{
    tok_strmap *m = &t->vocab;
    size_t i = hash_bytes(t->text[id], t->text_len[id]) & m->mask;
    for (;; i = (i + 1) & m->mask) {
        int32_t o = m->slots[i];
        if (o < 0)
            break;
        if (t->text_len[o] == t->text_len[id] &&
            memcmp(t->text[o], t->text[id], t->text_len[id]) == 0)
            return; /* duplicate text: the lower id wins */
    }
    m->slots[i] = id;
}

const tok_pair *tok_pairmap_get(const tok_pairmap *m, int32_t l, int32_t r)
{
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    for (size_t i = hash_pair(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->slots[i].key == key)
            return &m->slots[i];
        if (m->slots[i].key == UINT64_MAX)
            return NULL;
    }
}

static void pairmap_put(tok_pairmap *m, int32_t l, int32_t r, int32_t rank,
                        int32_t id)
{
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    size_t i = hash_pair(key) & m->mask;
    while (m->slots[i].key != UINT64_MAX) {
        if (m->slots[i].key == key)
            return; /* a repeated merge keeps its first (lowest) rank */
        i = (i + 1) & m->mask;
    }
    m->slots[i] = (tok_pair){key, rank, id};
}

/* ---- building ------------------------------------------------------- */

void tokenizer_desc_init(tokenizer_desc *d)
{
    memset(d, 0, sizeof *d);
    d->bos = d->eos = d->eot = d->eom = d->unk = d->pad = -1;
    d->add_bos = d->add_eos = d->add_space_prefix = -1;
}

static int parse_pre(const tokenizer_desc *d, enum tok_pre *pre, strata_error *err)
{
    static const struct { const char *name; enum tok_pre pre; } known[] = {
        {"default", TOK_PRE_GPT2},   {"gpt-2", TOK_PRE_GPT2},
        {"smollm", TOK_PRE_SMOLLM},  {"qwen2", TOK_PRE_QWEN2},
        {"deepseek-r1-qwen", TOK_PRE_QWEN2},
        {"llama-bpe", TOK_PRE_LLAMA3}, {"llama3", TOK_PRE_LLAMA3},
    };
    const char *name = d->pre ? d->pre : "default";
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(name, known[i].name) == 0) {
            *pre = known[i].pre;
            return 0;
        }
    /* llama.cpp falls back to a default split here; the ids would then
     * silently differ from the model's training, so strata refuses. */
    return strata_err(err, STRATA_E_UNSUPPORTED,
                      "%s: tokenizer.ggml.pre = '%s' is not supported "
                      "(supported: smollm, qwen2, deepseek-r1-qwen, llama-bpe, "
                      "gpt-2, default)", d->name, name);
}

static int check_id(const tokenizer_desc *d, const char *key, int64_t v,
                    int32_t *out, strata_error *err)
{
    if (v >= (int64_t)d->n_vocab)
        return strata_err(err, STRATA_E_FORMAT,
                          "%s: tokenizer.ggml.%s = %lld is outside the vocabulary "
                          "(%zu tokens)", d->name, key, (long long)v, d->n_vocab);
    *out = v < 0 ? -1 : (int32_t)v;
    return 0;
}

/* Decoded bytes of token id (see tokenizer_token_bytes); written to dst,
 * which has room for 4 * text_len bytes. */
static size_t token_decode_text(const tokenizer *t, int32_t id, char *dst)
{
    const char *s = t->text[id];
    size_t len = t->text_len[id], n = 0;
    enum token_type ty = t->type[id];
    if (ty != TOKEN_TYPE_NORMAL && ty != TOKEN_TYPE_BYTE) {
        memcpy(dst, s, len); /* control and user-defined text is literal */
        return len;
    }
    if (t->model == TOK_MODEL_SPM) {
        unsigned v;
        if (ty == TOKEN_TYPE_BYTE && len == 6 && sscanf(s, "<0x%2X>", &v) == 1) {
            dst[0] = (char)v;
            return 1;
        }
        for (size_t i = 0; i < len;) {
            if (i + 3 <= len && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
                dst[n++] = ' ';
                i += 3;
            } else {
                dst[n++] = s[i++];
            }
        }
        return n;
    }
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t l = utf8_next((const unsigned char *)s + i, len - i, &cp);
        int b = cp == UNICODE_INVALID ? -1 : bpe_cp_to_byte(cp);
        if (b >= 0) {
            dst[n++] = (char)b;
        } else { /* not a mapped byte: keep the text as it is */
            memcpy(dst + n, s + i, l);
            n += l;
        }
        i += l;
    }
    return n;
}

static int copy_vocab(tokenizer *t, const tokenizer_desc *d, strata_error *err)
{
    size_t total = 0;
    for (size_t i = 0; i < d->n_vocab; i++) {
        if (!d->tokens[i].p && d->tokens[i].len)
            return strata_err(err, STRATA_E_FORMAT, "%s: tokenizer.ggml.tokens[%zu] "
                              "has no text", d->name, i);
        total += d->tokens[i].len + 1;
    }
    char *arena = malloc(total ? total : 1);
    /* Decoded bytes never outnumber the text's: a symbol decodes to one
     * byte or to itself, ▁ and <0xNN> to one byte. */
    char *barena = malloc(total + 1);
    if (!arena || !barena) {
        free(arena);
        free(barena);
        return strata_err(err, STRATA_E_NOMEM, "%s: tokenizer: out of memory "
                          "for %zu tokens", d->name, d->n_vocab);
    }
    t->arena = arena;
    t->byte_arena = barena;
    char *p = arena, *b = barena;
    for (size_t i = 0; i < d->n_vocab; i++) {
        size_t len = d->tokens[i].len;
        memcpy(p, d->tokens[i].p, len);
        p[len] = '\0';
        t->text[i] = p;
        t->text_len[i] = (uint32_t)len;
        p += len + 1;
        int32_t ty = d->types ? d->types[i] : TOKEN_TYPE_NORMAL;
        if (ty < 0 || ty > TOKEN_TYPE_BYTE)
            return strata_err(err, STRATA_E_FORMAT, "%s: tokenizer.ggml.token_type[%zu]"
                              " = %d is not a token type (0..6)", d->name, i, ty);
        t->type[i] = (uint8_t)(ty == TOKEN_TYPE_UNDEFINED ? TOKEN_TYPE_NORMAL : ty);
        t->score[i] = d->scores ? d->scores[i] : 0.0f;
    }
    for (size_t i = 0; i < d->n_vocab; i++) {
        t->bytes[i] = b;
        t->bytes_len[i] = (uint32_t)token_decode_text(t, (int32_t)i, b);
        if (t->bytes_len[i] > t->max_bytes)
            t->max_bytes = t->bytes_len[i];
        b[t->bytes_len[i]] = '\0'; /* callers may print it as a string */
        b += t->bytes_len[i] + 1;
    }
    return 0;
}

static int build_merges(tokenizer *t, const tokenizer_desc *d, strata_error *err)
{
    t->merges.mask = table_size(d->n_merges) - 1;
    t->merges.slots = malloc((t->merges.mask + 1) * sizeof *t->merges.slots);
    if (!t->merges.slots)
        return strata_err(err, STRATA_E_NOMEM, "%s: tokenizer: out of memory", d->name);
    for (size_t i = 0; i <= t->merges.mask; i++)
        t->merges.slots[i].key = UINT64_MAX;
    char buf[512];
    for (size_t r = 0; r < d->n_merges; r++) {
        const char *m = d->merges[r].p;
        size_t len = d->merges[r].len;
        const char *sp = len > 1 ? memchr(m + 1, ' ', len - 1) : NULL;
        if (!sp)
            return strata_err(err, STRATA_E_FORMAT, "%s: tokenizer.ggml.merges[%zu] = "
                              "'%.*s' has no space separating two tokens", d->name, r,
                              (int)(len < 64 ? len : 64), m ? m : "");
        size_t ll = (size_t)(sp - m), rl = len - ll - 1;
        int32_t l = tok_strmap_get(t, m, ll), rr = tok_strmap_get(t, sp + 1, rl);
        if (ll + rl > sizeof buf)
            continue;
        memcpy(buf, m, ll);
        memcpy(buf + ll, sp + 1, rl);
        int32_t id = tok_strmap_get(t, buf, ll + rl);
        /* A merge whose parts or result are not tokens can never apply;
         * Hugging Face skips them the same way. */
        if (l >= 0 && rr >= 0 && id >= 0)
            pairmap_put(&t->merges, l, rr, (int32_t)r, id);
    }
    return 0;
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->text_len[x] != t->text_len[y])
        return t->text_len[x] > t->text_len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Stop tokens and the specials matched in text. */
static int build_lists(tokenizer *t)
{
    static const char *const end_markers[] = {
        "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>",
    };
    t->stop = malloc(16 * sizeof *t->stop);
    t->special = malloc((size_t)t->n_vocab * sizeof *t->special);
    if (!t->stop || !t->special)
        return STRATA_E_NOMEM;
    int32_t cand[16];
    size_t nc = 0;
    cand[nc++] = t->eos;
    cand[nc++] = t->eot;
    cand[nc++] = t->eom;
    for (size_t i = 0; i < sizeof end_markers / sizeof end_markers[0]; i++)
        cand[nc++] = tok_strmap_get(t, end_markers[i], strlen(end_markers[i]));
    for (size_t i = 0; i < nc; i++)
        if (cand[i] >= 0 && !tokenizer_is_stop(t, cand[i]))
            t->stop[t->n_stop++] = cand[i];
    for (int32_t i = 0; i < t->n_vocab; i++)
        if ((t->type[i] == TOKEN_TYPE_CONTROL || t->type[i] == TOKEN_TYPE_USER_DEFINED) &&
            t->text_len[i] > 0)
            t->special[t->n_special++] = i;
    qsort_r(t->special, t->n_special, sizeof *t->special, cmp_special, t);
    return 0;
}

static void byte_tokens(tokenizer *t)
{
    for (int b = 0; b < 256; b++) {
        char s[8];
        size_t n;
        if (t->model == TOK_MODEL_BPE)
            n = utf8_put(bpe_byte_to_cp((uint8_t)b), s);
        else
            n = (size_t)snprintf(s, sizeof s, "<0x%02X>", b);
        t->byte_id[b] = tok_strmap_get(t, s, n);
    }
}

int tokenizer_new(const tokenizer_desc *d, tokenizer **out, strata_error *err)
{
    *out = NULL;
    const char *name = d->name ? d->name : "tokenizer";
    tokenizer_desc dd = *d;
    dd.name = name;
    if (!d->model)
        return strata_err(err, STRATA_E_NOTFOUND, "%s: tokenizer.ggml.model is missing", name);
    if (d->n_vocab == 0 || d->n_vocab > INT32_MAX / 2 || !d->tokens)
        return strata_err(err, STRATA_E_FORMAT, "%s: tokenizer.ggml.tokens has %zu "
                          "entries", name, d->n_vocab);
    tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return strata_err(err, STRATA_E_NOMEM, "%s: tokenizer: out of memory", name);
    int rc = 0;
    bool spm = strcmp(d->model, "llama") == 0;
    if (!spm && strcmp(d->model, "gpt2") != 0) {
        rc = strata_err(err, STRATA_E_UNSUPPORTED, "%s: tokenizer.ggml.model = '%s' "
                        "is not supported (supported: gpt2, llama)", name, d->model);
        goto fail;
    }
    t->model = spm ? TOK_MODEL_SPM : TOK_MODEL_BPE;
    t->pre = TOK_PRE_NONE;
    if (!spm && (rc = parse_pre(&dd, &t->pre, err)))
        goto fail;
    if (!spm && d->n_merges > 0 && !d->merges) {
        rc = strata_err(err, STRATA_E_FORMAT, "%s: tokenizer.ggml.merges missing", name);
        goto fail;
    }
    t->n_vocab = (int32_t)d->n_vocab;
    t->text = calloc(d->n_vocab, sizeof *t->text);
    t->text_len = calloc(d->n_vocab, sizeof *t->text_len);
    t->type = calloc(d->n_vocab, 1);
    t->score = calloc(d->n_vocab, sizeof *t->score);
    t->bytes = calloc(d->n_vocab, sizeof *t->bytes);
    t->bytes_len = calloc(d->n_vocab, sizeof *t->bytes_len);
    t->vocab.mask = table_size(d->n_vocab) - 1;
    t->vocab.slots = malloc((t->vocab.mask + 1) * sizeof *t->vocab.slots);
    if (!t->text || !t->text_len || !t->type || !t->score || !t->bytes ||
        !t->bytes_len || !t->vocab.slots) {
        rc = strata_err(err, STRATA_E_NOMEM, "%s: tokenizer: out of memory", name);
        goto fail;
    }
    if ((rc = copy_vocab(t, &dd, err)))
        goto fail;
    memset(t->vocab.slots, 0xFF, (t->vocab.mask + 1) * sizeof *t->vocab.slots);
    for (int32_t i = 0; i < t->n_vocab; i++)
        strmap_put(t, i);
    if (!spm && (rc = build_merges(t, &dd, err)))
        goto fail;

    /* Defaults of doc/formats.md §5.1 where a key is absent. */
    int64_t bos = d->bos, eos = d->eos, unk = d->unk;
    if (bos < 0) bos = spm ? 1 : 11;
    if (eos < 0) eos = spm ? 2 : 11;
    if (unk < 0 && spm) unk = 0;
    if ((rc = check_id(&dd, "bos_token_id", bos, &t->bos, err)) ||
        (rc = check_id(&dd, "eos_token_id", eos, &t->eos, err)) ||
        (rc = check_id(&dd, "eot_token_id", d->eot, &t->eot, err)) ||
        (rc = check_id(&dd, "eom_token_id", d->eom, &t->eom, err)) ||
        (rc = check_id(&dd, "unknown_token_id", unk, &t->unk, err)) ||
        (rc = check_id(&dd, "padding_token_id", d->pad, &t->pad, err)))
        goto fail;
    t->add_bos = d->add_bos >= 0 ? d->add_bos : (spm || t->pre == TOK_PRE_LLAMA3);
    t->add_eos = d->add_eos >= 0 ? d->add_eos : false;
    t->add_space_prefix = spm && (d->add_space_prefix >= 0 ? d->add_space_prefix : true);
    /* The Hugging Face tokenizers of the qwen2 family (Qwen2, 2.5, 3 and the
     * DeepSeek-R1 distills of Qwen) declare an NFC normalizer; the others
     * strata reads have none (doc/tokenizer.md, "NFC"). */
    t->nfc = t->pre == TOK_PRE_QWEN2;
    byte_tokens(t);
    if (build_lists(t)) {
        rc = strata_err(err, STRATA_E_NOMEM, "%s: tokenizer: out of memory", name);
        goto fail;
    }
    *out = t;
    return 0;
fail:
    tokenizer_free(t);
    return rc;
}

void tokenizer_free(tokenizer *t)
{
    if (!t)
        return;
    free(t->arena);
    free(t->byte_arena);
    free(t->text);
    free(t->text_len);
    free(t->type);
    free(t->score);
    free(t->bytes);
    free(t->bytes_len);
    free(t->vocab.slots);
    free(t->merges.slots);
    free(t->stop);
    free(t->special);
    free(t);
}

/* ---- properties -------------------------------------------------------- */

size_t tokenizer_n_vocab(const tokenizer *t) { return (size_t)t->n_vocab; }
enum tok_model tokenizer_model(const tokenizer *t) { return t->model; }
enum tok_pre tokenizer_pre(const tokenizer *t) { return t->pre; }
bool tokenizer_nfc(const tokenizer *t) { return t->nfc; }
int32_t tokenizer_bos(const tokenizer *t) { return t->bos; }
int32_t tokenizer_eos(const tokenizer *t) { return t->eos; }
int32_t tokenizer_eot(const tokenizer *t) { return t->eot; }
bool tokenizer_add_bos(const tokenizer *t) { return t->add_bos && t->bos >= 0; }
bool tokenizer_add_eos(const tokenizer *t) { return t->add_eos && t->eos >= 0; }
size_t tokenizer_max_token_bytes(const tokenizer *t) { return t->max_bytes; }

size_t tokenizer_stop_tokens(const tokenizer *t, const int32_t **ids)
{
    *ids = t->stop;
    return t->n_stop;
}

bool tokenizer_is_stop(const tokenizer *t, int32_t id)
{
    for (size_t i = 0; i < t->n_stop; i++)
        if (t->stop[i] == id)
            return true;
    return false;
}

enum token_type tokenizer_token_type(const tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab ? (enum token_type)t->type[id] : TOKEN_TYPE_UNDEFINED;
}

const char *tokenizer_token_text(const tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab ? t->text[id] : NULL;
}

int32_t tokenizer_find(const tokenizer *t, const char *text, size_t len)
{
    return tok_strmap_get(t, text, len);
}

/* ---- encode ------------------------------------------------------------ */

void tok_ids_free(tok_ids *v)
{
    if (!v)
        return;
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

int tok_ids_push(tok_ids *v, int32_t id)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 64;
        int32_t *a = realloc(v->ids, cap * sizeof *a);
        if (!a)
            return STRATA_E_NOMEM;
        v->ids = a;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return 0;
}

typedef struct piece_ctx {
    const tokenizer *t;
    tok_ids *out;
} piece_ctx;

static int encode_piece(void *ctx, const char *piece, size_t len)
{
    piece_ctx *c = ctx;
    return bpe_encode_piece(c->t, piece, len, c->out);
}

/* Text with no special tokens in it. */
static int encode_plain(const tokenizer *t, const char *text, size_t len,
                        bool first, tok_ids *out)
{
    if (len == 0)
        return 0;
    if (t->model == TOK_MODEL_SPM)
        return spm_encode_segment(t, text, len, first, out);
    piece_ctx c = {t, out};
    char *norm = NULL;
    size_t norm_len = 0;
    int rc;
    /* Normalized per segment: Hugging Face matches special tokens in the raw
     * text (their `normalized` is false) and normalizes what lies between. */
    if (t->nfc && (rc = unicode_nfc(text, len, &norm, &norm_len)))
        return rc;
    if (norm)
        rc = pretokenize(t->pre, norm, norm_len, encode_piece, &c);
    else
        rc = pretokenize(t->pre, text, len, encode_piece, &c);
    free(norm);
    return rc;
}

/* The special token whose text starts text[0..len), longest first; -1. */
static int32_t match_special(const tokenizer *t, const char *text, size_t len,
                             bool parse_control)
{
    for (size_t k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k];
        size_t l = t->text_len[id];
        if (l <= len && t->text[id][0] == text[0] && memcmp(t->text[id], text, l) == 0 &&
            (parse_control || t->type[id] == TOKEN_TYPE_USER_DEFINED))
            return id;
    }
    return -1;
}

int tokenizer_encode(const tokenizer *t, const char *text, size_t len,
                     int flags, tok_ids *out, strata_error *err)
{
    int rc = 0;
    if (!text && len)
        return strata_err(err, STRATA_E_ARG, "tokenizer_encode: NULL text");
    if ((flags & TOK_ENCODE_ADD_BOS) && tokenizer_add_bos(t))
        rc = tok_ids_push(out, t->bos);
    size_t start = 0;
    for (size_t i = 0; i < len && !rc; i++) {
        int32_t id = t->n_special ? match_special(t, text + i, len - i,
                                                  flags & TOK_ENCODE_SPECIAL) : -1;
        if (id < 0)
            continue;
        rc = encode_plain(t, text + start, i - start, start == 0, out);
        if (!rc)
            rc = tok_ids_push(out, id);
        i += t->text_len[id] - 1;
        start = i + 1;
    }
    if (!rc)
        rc = encode_plain(t, text + start, len - start, start == 0, out);
    if (!rc && (flags & TOK_ENCODE_ADD_EOS) && tokenizer_add_eos(t))
        rc = tok_ids_push(out, t->eos);
    if (rc)
        return strata_err(err, rc, "tokenizer_encode: out of memory for %zu bytes", len);
    return 0;
}

/* ---- decode ------------------------------------------------------------ */

const char *tokenizer_token_bytes(const tokenizer *t, int32_t id, int flags,
                                  size_t *len)
{
    if (id < 0 || id >= t->n_vocab) {
        *len = 0;
        return NULL;
    }
    enum token_type ty = t->type[id];
    bool hidden = ty == TOKEN_TYPE_CONTROL || ty == TOKEN_TYPE_UNKNOWN ||
                  ty == TOKEN_TYPE_UNUSED;
    if (hidden && !(flags & TOK_DECODE_SPECIAL)) {
        *len = 0;
        return "";
    }
    *len = t->bytes_len[id];
    return t->bytes[id];
}

int tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n,
                     int flags, char **out, size_t *len, strata_error *err)
{
    size_t total = 0, l;
    *out = NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        if (!tokenizer_token_bytes(t, ids[i], flags, &l))
            return strata_err(err, STRATA_E_ARG, "tokenizer_decode: id %d at %zu is "
                              "outside the vocabulary (%d tokens)", ids[i], i, t->n_vocab);
        total += l;
    }
    char *s = malloc(total + 1);
    if (!s)
        return strata_err(err, STRATA_E_NOMEM, "tokenizer_decode: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *b = tokenizer_token_bytes(t, ids[i], flags, &l);
        memcpy(s + k, b, l);
        k += l;
    }
    s[k] = '\0';
    *out = s;
    *len = k;
    return 0;
}

/* ---- streaming decode -------------------------------------------------- */

struct tokdec {
    const tokenizer *t;
    int flags;
    unsigned char pend[4]; /* the start of a character not yet complete */
    size_t npend;
    unsigned char *in;     /* pend + the token's bytes */
    char *out;             /* 3 bytes out per byte in, at worst (U+FFFD) */
};

int tokdec_new(const tokenizer *t, int flags, tokdec **out, strata_error *err)
{
    tokdec *d = calloc(1, sizeof *d);
    size_t cap = t->max_bytes + 8;
    if (d) {
        d->in = malloc(cap);
        d->out = malloc(3 * cap + 1);
    }
    if (!d || !d->in || !d->out) {
        tokdec_free(d);
        *out = NULL;
        return strata_err(err, STRATA_E_NOMEM, "tokdec_new: out of memory");
    }
    d->t = t;
    d->flags = flags;
    *out = d;
    return 0;
}

void tokdec_free(tokdec *d)
{
    if (!d)
        return;
    free(d->in);
    free(d->out);
    free(d);
}

void tokdec_reset(tokdec *d) { d->npend = 0; }

static const char REPLACEMENT[] = "\xEF\xBF\xBD"; /* U+FFFD */

/* Could s[0..n) still become a valid character when more bytes come? */
static bool utf8_incomplete(const unsigned char *s, size_t n)
{
    size_t need = utf8_seq_len(s[0]);
    if (need <= n || need < 2)
        return false;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return false;
    return true;
}

const char *tokdec_push(tokdec *d, int32_t id, size_t *len, strata_error *err)
{
    size_t l;
    const char *b = tokenizer_token_bytes(d->t, id, d->flags, &l);
    if (!b) {
        *len = 0;
        strata_err(err, STRATA_E_ARG, "tokdec_push: id %d is outside the vocabulary "
                   "(%d tokens)", id, d->t->n_vocab);
        return NULL;
    }
    size_t n = d->npend;
    memcpy(d->in, d->pend, n);
    memcpy(d->in + n, b, l);
    n += l;
    size_t o = 0, i = 0;
    d->npend = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = utf8_next(d->in + i, n - i, &cp);
        if (cp != UNICODE_INVALID) {
            memcpy(d->out + o, d->in + i, k);
            o += k;
        } else if (utf8_incomplete(d->in + i, n - i)) {
            d->npend = n - i; /* keep the start for the next token */
            memcpy(d->pend, d->in + i, d->npend);
            break;
        } else {
            memcpy(d->out + o, REPLACEMENT, 3);
            o += 3;
        }
        i += k;
    }
    d->out[o] = '\0';
    *len = o;
    return d->out;
}

const char *tokdec_flush(tokdec *d, size_t *len)
{
    size_t o = 0;
    for (size_t i = 0; i < d->npend; i++, o += 3)
        memcpy(d->out + o, REPLACEMENT, 3);
    d->out[o] = '\0';
    d->npend = 0;
    *len = o;
    return d->out;
}
