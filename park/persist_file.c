/* persist_file.c: one parked conversation as one file (see persist.h, and
 * doc/convcache.md, "Conversations on disk", for the format).
 *
 * Layout, all integers little-endian:
 *   header (PERSIST_HEADER bytes): magic, version, header size, the model's
 *     identity hash, KV type, page size, layers, KV heads, the row bytes of
 *     the four KV buffers, tokens, position, data bytes, time of saving,
 *     and (version 2) the pending token: sampled after the tokens, never
 *     fed (convcache_image_pending), 0xffffffff for none;
 *   tokens: n int32;
 *   data: for each layer of the model in order, that layer's bytes of ONE
 *     span [0, n) in the image layout of park/park.h (for each buffer, for
 *     each page, [head][tokens of the page][row]): n x T bytes per layer,
 *     T = heads x the row bytes of the four buffers;
 *   checksum: u64, XXH64 chained over the header, the tokens and each
 *     layer's bytes (each piece hashed with the previous piece's hash as its
 *     seed, so the layers can be hashed as they stream).
 *
 * Why one span and layer order: an image in the cache is a list of spans
 * (one per turn) cut into stages by the layer split.  Concatenating the
 * stages' parts of a single span [0, n) gives exactly the layer-ordered
 * layout above, so the file is the same whatever the split was, and
 * loading is a fresh capture whose part for a stage is a run of the file's
 * layers, read straight into place.  Writing gathers each layer from the
 * spans into one buffer of n x T bytes (tens of MiB at 100K tokens). */
#include "park/persist.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/safe_write.h"
#include "cache/xxh64.h"
#include "engine/engine_internal.h"
#include "kernels/ops.h"
#include "model/model.h"

#define PERSIST_MAGIC "STRKVIMG"
#define PERSIST_VERSION 2u      /* 2: the pending token at offset 80 */
#define PERSIST_VERSION_MIN 1u  /* 1: no pending token (read as none) */
#define PERSIST_NO_PENDING 0xffffffffu
#define PERSIST_HEADER 96u
#define PERSIST_SEED 0x5354524b56494d47ull /* "STRKVIMG" */

/* ---- little-endian fields ------------------------------------------------ */

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* ---- identity ------------------------------------------------------------ */

static uint64_t hash_u64(uint64_t v, uint64_t h)
{
    uint8_t b[8];
    put64(b, v);
    return xxh64(b, 8, h);
}

/* Every metadata record (key, types, value) and every tensor record (name,
 * shape, type, offset, size), plus the first and last 256 bytes of each
 * tensor's data: two fine-tunes of one architecture share the tables but
 * not the weights, and those bytes tell them apart at the cost of a few
 * pages read. */
static uint64_t model_hash(const gguf *g)
{
    uint64_t h = PERSIST_SEED;
    h = hash_u64(gguf_n_kv(g), h);
    for (uint64_t i = 0; i < gguf_n_kv(g); i++) {
        const gguf_kv *kv = gguf_kv_at(g, i);
        h = xxh64(kv->key, strlen(kv->key), h);
        h = hash_u64(((uint64_t)kv->type << 32) | kv->arr_type, h);
        h = hash_u64(kv->n, h);
        if (kv->type == GGUF_STRING)
            h = xxh64(kv->str.p, (size_t)kv->str.len, h);
        else if (kv->type == GGUF_ARRAY && kv->arr_type == GGUF_STRING)
            for (uint64_t j = 0; j < kv->n; j++)
                h = xxh64(kv->strs[j].p, (size_t)kv->strs[j].len, h);
        else if (kv->type == GGUF_ARRAY)
            h = xxh64(kv->data, (size_t)kv->n * gguf_vtype_size(kv->arr_type), h);
        else
            h = xxh64(kv->data, gguf_vtype_size(kv->type), h);
    }
    h = hash_u64(gguf_n_tensors(g), h);
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        h = xxh64(t->name, strlen(t->name), h);
        h = hash_u64(((uint64_t)t->n_dims << 32) | t->type, h);
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            h = hash_u64((uint64_t)t->ne[d], h);
        h = hash_u64(t->offset, h);
        h = hash_u64(t->nbytes, h);
        size_t k = t->nbytes < 256 ? (size_t)t->nbytes : 256;
        h = xxh64(t->data, k, h);
        h = xxh64((const uint8_t *)t->data + t->nbytes - k, k, h);
    }
    return h;
}

int persist_identity(const strata_engine *e, persist_id *id, strata_error *err)
{
    memset(id, 0, sizeof *id);
    if (e->n_stages > (int)(sizeof id->stage_layers / sizeof id->stage_layers[0]))
        return strata_err(err, STRATA_E_UNSUPPORTED, "conversation save: %d stages (at most 64)",
                          e->n_stages);
    id->model = model_hash(e->m->g);
    id->kv_type = (uint32_t)e->p.kv_type;
    id->kv_page = KV_PAGE;
    id->n_ctx = (uint32_t)e->n_ctx;
    id->n_vocab = (uint32_t)e->m->hp.n_vocab;
    id->n_stages = e->n_stages;
    const kv_pool *p0 = e->stages[0].kv;
    id->n_kv_head = (uint32_t)p0->n_kv_head;
    for (int b = 0; b < 4; b++)
        id->row_bytes[b] =
            (uint32_t)(kv_page_buf_bytes(p0, b) / ((size_t)p0->n_kv_head * KV_PAGE));
    for (int s = 0; s < e->n_stages; s++) {
        const kv_pool *p = e->stages[s].kv;
        /* every layer must have the same shape, or the file's layer blocks
         * could not be cut at any split */
        for (int b = 0; b < 4; b++)
            if (p->n_kv_head != p0->n_kv_head ||
                kv_page_buf_bytes(p, b) != kv_page_buf_bytes(p0, b))
                return strata_err(err, STRATA_E_UNSUPPORTED, "conversation save: stage %d's KV "
                                  "rows differ from stage 0's (layers of different shapes)", s);
        id->stage_layers[s] = p->n_layer;
        id->n_layer += (uint32_t)p->n_layer;
    }
    return 0;
}

/* Bytes of one token of one layer (all heads and buffers). */
static size_t layer_token_bytes(const persist_id *id)
{
    size_t s = 0;
    for (int b = 0; b < 4; b++)
        s += id->row_bytes[b];
    return s * id->n_kv_head;
}

void persist_file_name(const int32_t *tokens, int n, char *buf, size_t cap)
{
    uint8_t *le = malloc((size_t)n * 4 + 1);
    uint64_t h;
    if (le) {
        for (int i = 0; i < n; i++)
            put32(le + 4 * (size_t)i, (uint32_t)tokens[i]);
        h = xxh64(le, (size_t)n * 4, PERSIST_SEED);
        free(le);
    } else {
        h = xxh64(tokens, (size_t)n * 4, PERSIST_SEED); /* same on little-endian hosts */
    }
    snprintf(buf, cap, "%016llx%s", (unsigned long long)h, PERSIST_SUFFIX);
}

/* ---- writing ------------------------------------------------------------- */

static void header_fill(uint8_t *hd, const persist_id *id, int n, int32_t pos, int32_t pending)
{
    memset(hd, 0, PERSIST_HEADER);
    memcpy(hd, PERSIST_MAGIC, 8);
    put32(hd + 8, PERSIST_VERSION);
    put32(hd + 12, PERSIST_HEADER);
    put64(hd + 16, id->model);
    put32(hd + 24, id->kv_type);
    put32(hd + 28, id->kv_page);
    put32(hd + 32, id->n_layer);
    put32(hd + 36, id->n_kv_head);
    for (int b = 0; b < 4; b++)
        put32(hd + 40 + 4 * b, id->row_bytes[b]);
    put32(hd + 56, (uint32_t)n);
    put32(hd + 60, (uint32_t)pos);
    put64(hd + 64, (uint64_t)n * id->n_layer * layer_token_bytes(id));
    put64(hd + 72, (uint64_t)time(NULL));
    put32(hd + 80, pending < 0 ? PERSIST_NO_PENDING : (uint32_t)pending);
}

/* Gather local layer l of a stage, over all of img's spans, into the
 * one-span layout of n tokens (see the top of the file). */
static int gather_layer(const persist_id *id, const convcache_image *img, int stage, int l,
                        int n, uint8_t *out, strata_error *err)
{
    size_t H = id->n_kv_head, S = 0;
    for (int b = 0; b < 4; b++)
        S += id->row_bytes[b];
    int n_spans = convcache_image_n_spans(img);
    size_t pre = 0;   /* row bytes of the buffers before b */
    for (int b = 0; b < 4; b++) {
        size_t rb = id->row_bytes[b];
        if (!rb)
            continue;
        uint8_t *blk = out + (size_t)n * H * pre;
        for (int32_t pk0 = 0; pk0 < n; pk0 += KV_PAGE) {
            int32_t pk1 = pk0 + KV_PAGE < n ? pk0 + KV_PAGE : n;
            uint8_t *pg = blk + (size_t)pk0 * H * rb;
            for (int i = 0; i < n_spans; i++) {
                convcache_span sp;
                int rc = convcache_image_span(img, stage, i, &sp, err);
                if (rc)
                    return rc;
                int32_t x0 = sp.t0 > pk0 ? sp.t0 : pk0, x1 = sp.t1 < pk1 ? sp.t1 : pk1;
                if (x0 >= x1)
                    continue;
                /* the span stores the page's tokens [s0, s1) per head */
                int32_t s0 = sp.t0 > pk0 ? sp.t0 : pk0;
                int32_t s1 = sp.t1 < pk0 + KV_PAGE ? sp.t1 : pk0 + KV_PAGE;
                size_t m = (size_t)(sp.t1 - sp.t0);
                const uint8_t *src = (const uint8_t *)sp.data + m * H * ((size_t)l * S + pre) +
                                     (size_t)(s0 - sp.t0) * H * rb;
                for (size_t h = 0; h < H; h++)
                    memcpy(pg + h * (size_t)(pk1 - pk0) * rb + (size_t)(x0 - pk0) * rb,
                           src + h * (size_t)(s1 - s0) * rb + (size_t)(x0 - s0) * rb,
                           (size_t)(x1 - x0) * rb);
            }
        }
        pre += rb;
    }
    return 0;
}

int persist_write_file(const persist_id *id, const convcache_image *img, const char *path,
                       uint64_t *bytes, strata_error *err)
{
    int n;
    const int32_t *tokens = convcache_image_tokens(img, &n);
    size_t lb = (size_t)n * layer_token_bytes(id);
    uint8_t hd[PERSIST_HEADER];
    header_fill(hd, id, n, convcache_image_pos(img), convcache_image_pending(img));
    uint8_t *buf = malloc(lb > (size_t)n * 4 ? lb : (size_t)n * 4);
    if (!buf)
        return strata_err(err, STRATA_E_NOMEM, "%s: out of memory for %zu bytes of a layer", path,
                          lb);
    safe_write sw;
    int rc = safe_write_open(&sw, path, err);
    if (rc) {
        free(buf);
        return rc;
    }
    int ok = fwrite(hd, PERSIST_HEADER, 1, sw.f) == 1;
    uint64_t h = xxh64(hd, PERSIST_HEADER, PERSIST_SEED);
    for (int i = 0; i < n; i++)
        put32(buf + 4 * (size_t)i, (uint32_t)tokens[i]);
    ok = ok && fwrite(buf, 4, (size_t)n, sw.f) == (size_t)n;
    h = xxh64(buf, (size_t)n * 4, h);
    for (int s = 0; s < id->n_stages && ok && !rc; s++)
        for (int l = 0; l < id->stage_layers[s] && ok && !rc; l++) {
            rc = gather_layer(id, img, s, l, n, buf, err);
            if (!rc) {
                ok = fwrite(buf, 1, lb, sw.f) == lb;
                h = xxh64(buf, lb, h);
            }
        }
    uint8_t tail[8];
    put64(tail, h);
    ok = ok && !rc && fwrite(tail, 8, 1, sw.f) == 1;
    int e = errno;
    free(buf);
    if (rc) {
        safe_write_abort(&sw);
        return rc;
    }
    rc = safe_write_commit(&sw, ok, e, err);
    if (!rc && bytes)
        *bytes = PERSIST_HEADER + (uint64_t)n * 4 + (uint64_t)lb * id->n_layer + 8;
    return rc;
}

/* ---- reading ------------------------------------------------------------- */

typedef struct file_hdr {
    int n;
    int32_t pos;
    int32_t pending;       /* -1: none (and every version 1 file) */
    uint64_t data_bytes;
    uint8_t raw[PERSIST_HEADER];
} file_hdr;

static int read_header(const persist_id *id, const char *path, FILE *f, file_hdr *fh,
                       uint64_t *file_bytes, strata_error *err)
{
    struct stat st;
    if (fstat(fileno(f), &st) != 0)
        return strata_err(err, STRATA_E_IO, "%s: %s", path, strerror(errno));
    if ((uint64_t)st.st_size < PERSIST_HEADER + 8 || fread(fh->raw, PERSIST_HEADER, 1, f) != 1)
        return strata_err(err, STRATA_E_FORMAT, "%s: %lld bytes, shorter than a header (torn "
                          "write?)", path, (long long)st.st_size);
    const uint8_t *hd = fh->raw;
    if (memcmp(hd, PERSIST_MAGIC, 8) != 0)
        return strata_err(err, STRATA_E_FORMAT, "%s: not a saved conversation (magic)", path);
    uint32_t version = get32(hd + 8);
    if (version < PERSIST_VERSION_MIN || version > PERSIST_VERSION ||
        get32(hd + 12) != PERSIST_HEADER)
        return strata_err(err, STRATA_E_FORMAT, "%s: format version %u (header %u bytes); this "
                          "build reads versions %u to %u", path, version, get32(hd + 12),
                          PERSIST_VERSION_MIN, PERSIST_VERSION);
    if (get64(hd + 16) != id->model)
        return strata_err(err, STRATA_E_FORMAT, "%s: saved by another model (identity %016llx, "
                          "this model's %016llx)", path, (unsigned long long)get64(hd + 16),
                          (unsigned long long)id->model);
    if (get32(hd + 24) != id->kv_type)
        return strata_err(err, STRATA_E_FORMAT, "%s: KV type %s, the engine's is %s", path,
                          strata_kv_name((int)get32(hd + 24)), strata_kv_name((int)id->kv_type));
    int shape = get32(hd + 28) == id->kv_page && get32(hd + 32) == id->n_layer &&
                get32(hd + 36) == id->n_kv_head;
    for (int b = 0; b < 4; b++)
        shape = shape && get32(hd + 40 + 4 * b) == id->row_bytes[b];
    if (!shape)
        return strata_err(err, STRATA_E_FORMAT, "%s: KV shape differs (page %u, %u layers, %u "
                          "KV heads; the engine's: %u, %u, %u)", path, get32(hd + 28),
                          get32(hd + 32), get32(hd + 36), id->kv_page, id->n_layer, id->n_kv_head);
    fh->n = (int)get32(hd + 56);
    fh->pos = (int32_t)get32(hd + 60);
    fh->data_bytes = get64(hd + 64);
    if (get32(hd + 56) == 0 || get32(hd + 56) > (1u << 30) || fh->pos != fh->n ||
        fh->data_bytes != (uint64_t)fh->n * id->n_layer * layer_token_bytes(id))
        return strata_err(err, STRATA_E_FORMAT, "%s: %u tokens, position %d, %llu data bytes do "
                          "not agree", path, get32(hd + 56), fh->pos,
                          (unsigned long long)fh->data_bytes);
    uint64_t want = PERSIST_HEADER + (uint64_t)fh->n * 4 + fh->data_bytes + 8;
    if ((uint64_t)st.st_size != want)
        return strata_err(err, STRATA_E_FORMAT, "%s: %lld bytes, the header says %llu (torn "
                          "write?)", path, (long long)st.st_size, (unsigned long long)want);
    /* Version 1 wrote zeros at offset 80: it knew no pending token, and
     * id 0 would be a real one. */
    uint32_t pending = version >= 2 ? get32(hd + 80) : PERSIST_NO_PENDING;
    if (pending != PERSIST_NO_PENDING && pending >= id->n_vocab)
        return strata_err(err, STRATA_E_FORMAT, "%s: field pending token (offset 80) is %u, "
                          "outside the vocabulary of %u (0xffffffff: none)", path, pending,
                          id->n_vocab);
    fh->pending = pending == PERSIST_NO_PENDING ? -1 : (int32_t)pending;
    if ((uint32_t)fh->n > id->n_ctx)
        return strata_err(err, STRATA_E_LIMIT, "%s: %d tokens, longer than the context of %u",
                          path, fh->n, id->n_ctx);
    if (file_bytes)
        *file_bytes = want;
    return 0;
}

int persist_check_header(const persist_id *id, const char *path, int *n, uint64_t *file_bytes,
                         strata_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return strata_err(err, STRATA_E_IO, "%s: %s", path, strerror(errno));
    file_hdr fh = {0};
    int rc = read_header(id, path, f, &fh, file_bytes, err);
    fclose(f);
    if (!rc && n)
        *n = fh.n;
    return rc;
}

/* Read the tokens (checked against the vocabulary) after the header. */
static int read_tokens(const persist_id *id, const char *path, FILE *f, const file_hdr *fh,
                       int32_t *tokens, uint64_t *h, strata_error *err)
{
    uint8_t *le = (uint8_t *)tokens;   /* read in place, then decode */
    if (fread(le, 4, (size_t)fh->n, f) != (size_t)fh->n)
        return strata_err(err, STRATA_E_IO, "%s: short read of the tokens", path);
    *h = xxh64(le, (size_t)fh->n * 4, *h);
    for (int i = 0; i < fh->n; i++) {
        uint32_t t = get32(le + 4 * (size_t)i);
        if (t >= id->n_vocab)
            return strata_err(err, STRATA_E_FORMAT, "%s: token %d is id %u, outside the "
                              "vocabulary of %u", path, i, t, id->n_vocab);
        tokens[i] = (int32_t)t;
    }
    return 0;
}

static int check_sum(const char *path, FILE *f, uint64_t h, strata_error *err)
{
    uint8_t tail[8];
    if (fread(tail, 8, 1, f) != 1)
        return strata_err(err, STRATA_E_IO, "%s: short read of the checksum", path);
    if (get64(tail) != h)
        return strata_err(err, STRATA_E_FORMAT, "%s: checksum mismatch (stored %016llx, computed "
                          "%016llx): torn or corrupt", path, (unsigned long long)get64(tail),
                          (unsigned long long)h);
    return 0;
}

/* k8v4r2 files: every V scale of a layer just read (buffer 3 of its
 * one-span layout) must be one the store writes (kv_nl_scale_ok: 7
 * significant bits, |d| <= 56.5), because the card's attention decodes V
 * only the way such scales allow.  Files saved before the store rounded
 * and clamped the scale fail here, and are skipped like any other bad
 * file: the conversation is read again from its text. */
static int check_v_scales(const persist_id *id, const char *path, const uint8_t *layer, int n,
                          int l, strata_error *err)
{
    if (id->kv_type != STRATA_KV_K8V4R2)
        return 0;
    size_t H = id->n_kv_head;
    const uint8_t *vd = layer + (size_t)n * H * (id->row_bytes[0] + id->row_bytes[1] +
                                                id->row_bytes[2]);
    size_t count = (size_t)n * H * id->row_bytes[3] / 2;
    for (size_t i = 0; i < count; i++) {
        uint16_t h = (uint16_t)(vd[2 * i] | vd[2 * i + 1] << 8);
        if (!kv_nl_scale_ok(h))
            return strata_err(err, STRATA_E_FORMAT, "%s: layer %d: V scale %zu is 0x%04x, not "
                              "one this build stores (7 significant bits, at most 56.5: "
                              "saved by an older strata?)", path, l, i, h);
    }
    return 0;
}

int persist_load_file(const persist_id *id, convcache *c, const char *path,
                      convcache_image **img, strata_error *err)
{
    if (img)
        *img = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return strata_err(err, STRATA_E_IO, "%s: %s", path, strerror(errno));
    file_hdr fh = {0};
    int32_t *tokens = NULL;
    convcache_capture *cap = NULL;
    int rc = read_header(id, path, f, &fh, NULL, err);
    if (!rc) {
        tokens = malloc((size_t)fh.n * 4);
        if (!tokens)
            rc = strata_err(err, STRATA_E_NOMEM, "%s: out of memory for %d tokens", path, fh.n);
    }
    uint64_t h = xxh64(fh.raw, PERSIST_HEADER, PERSIST_SEED);
    if (!rc)
        rc = read_tokens(id, path, f, &fh, tokens, &h, err);
    if (!rc) {
        convcache_image *have = NULL;
        if (convcache_find(c, tokens, fh.n, &have) == fh.n) {
            /* already cached (the same conversation saved twice) */
            fclose(f);
            free(tokens);
            if (img)
                *img = have;
            return 0;
        }
    }
    size_t lb = (size_t)fh.n * layer_token_bytes(id);
    if (!rc) {
        size_t bytes[64];
        for (int s = 0; s < id->n_stages; s++)
            bytes[s] = lb * (size_t)id->stage_layers[s];
        rc = convcache_begin(c, tokens, fh.n, fh.pos, NULL, bytes, &cap, err);
        if (!rc)
            convcache_capture_set_pending(cap, fh.pending);
    }
    /* each layer straight into its place in its stage's part */
    for (int s = 0; s < id->n_stages && !rc; s++) {
        uint8_t *part = convcache_capture_part(cap, s);
        for (int l = 0; l < id->stage_layers[s] && !rc; l++) {
            uint8_t *dst = part + (size_t)l * lb;
            if (fread(dst, 1, lb, f) != lb)
                rc = strata_err(err, STRATA_E_IO, "%s: short read in layer %d of stage %d", path,
                                l, s);
            else
                h = xxh64(dst, lb, h);
        }
    }
    if (!rc)
        rc = check_sum(path, f, h, err);
    for (int s = 0, l0 = 0; s < id->n_stages && !rc; l0 += id->stage_layers[s++])
        for (int l = 0; l < id->stage_layers[s] && !rc; l++)
            rc = check_v_scales(id, path, convcache_capture_part(cap, s) + (size_t)l * lb, fh.n,
                                l0 + l, err);
    fclose(f);
    free(tokens);   /* begin copied them */
    if (rc) {
        convcache_abort(c, cap);
        return rc;
    }
    return convcache_commit(c, cap, img, err);
}

int persist_verify_file(const persist_id *id, const char *path, strata_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return strata_err(err, STRATA_E_IO, "%s: %s", path, strerror(errno));
    file_hdr fh = {0};
    int rc = read_header(id, path, f, &fh, NULL, err);
    size_t lb = rc ? 0 : (size_t)fh.n * layer_token_bytes(id);
    uint8_t *buf = rc ? NULL : malloc(lb > (size_t)fh.n * 4 ? lb : (size_t)fh.n * 4);
    if (!rc && !buf)
        rc = strata_err(err, STRATA_E_NOMEM, "%s: out of memory", path);
    uint64_t h = xxh64(fh.raw, PERSIST_HEADER, PERSIST_SEED);
    if (!rc)
        rc = read_tokens(id, path, f, &fh, (int32_t *)buf, &h, err);
    for (uint32_t l = 0; l < id->n_layer && !rc; l++) {
        if (fread(buf, 1, lb, f) != lb)
            rc = strata_err(err, STRATA_E_IO, "%s: short read in layer %u", path, l);
        else
            h = xxh64(buf, lb, h);
        if (!rc)
            rc = check_v_scales(id, path, buf, fh.n, (int)l, err);
    }
    if (!rc)
        rc = check_sum(path, f, h, err);
    free(buf);
    fclose(f);
    return rc;
}
