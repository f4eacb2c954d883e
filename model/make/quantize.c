/* quantize.c: the requantizer behind `strata-cli quantize` (model/make/quantize.h).
 *
 * Walk the input's tensors in order; for each, choose the output type (the
 * mix), decode it to f32 a slab of rows at a time, encode the slab with the
 * output type's quantizer on several threads, and hand the bytes to the
 * GGUF writer, which writes everything at the end, atomically. */
#include "model/make/quantize.h"

#include <fnmatch.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model/gguf.h"
#include "model/quant.h"

/* f32 elements decoded at once: bounds the scratch buffer (16 MiB) whatever
 * the tensor's size (the demo model's embedding alone is 28M elements). */
#define QUANTIZE_SLAB (4 * 1024 * 1024)
#define QUANTIZE_MAX_THREADS 64

/* ---- the mix ------------------------------------------------------------- */

static int is_embedding_or_head(const char *name)
{
    return !strcmp(name, "token_embd.weight") || !strcmp(name, "output.weight");
}

static int type_fits(int type, int64_t ne0)
{
    const type_traits *t = type_traits_get(type);
    return t && t->quant && ne0 % t->blck == 0;
}

int quantize_choose_type(const quantize_params *p, const char *name,
                         uint32_t n_dims, const int64_t *ne, int *type,
                         int *fallback, strata_error *err)
{
    *fallback = 0;
    for (int i = 0; i < p->n_overrides; i++) {
        if (fnmatch(p->overrides[i].pattern, name, 0) != 0)
            continue;
        if (!type_fits(p->overrides[i].type, ne[0]))
            return strata_err(err, STRATA_E_UNSUPPORTED,
                              "tensor %s: --keep-type %s=%s: ne[0] = %lld is not a multiple of the %s block (%d)",
                              name, p->overrides[i].pattern, type_name(p->overrides[i].type),
                              (long long)ne[0], type_name(p->overrides[i].type),
                              type_traits_get(p->overrides[i].type)->blck);
        *type = p->overrides[i].type;
        return 0;
    }
    if (p->recipe) {
        if (p->embed_type >= 0 && n_dims >= 2 && is_embedding_or_head(name)) {
            *type = recipe_fallback(p->embed_type, ne[0]);
            *fallback = *type != p->embed_type;
            return 0;
        }
        int wanted;
        *type = recipe_type(p->recipe, name, n_dims, ne[0], &p->facts, &wanted);
        *fallback = *type >= 0 && *type != wanted;
        if (*type >= 0 && !type_fits(*type, ne[0]))
            return strata_err(err, STRATA_E_UNSUPPORTED, "tensor %s: recipe %s: strata cannot encode %s",
                              name, recipe_name(p->recipe), type_name(*type));
        return 0;
    }
    int want = p->type;
    if (n_dims < 2)
        want = GGML_TYPE_F32;
    else if (is_embedding_or_head(name))
        want = p->embed_type >= 0 ? p->embed_type : GGML_TYPE_Q8_0;
    if (type_fits(want, ne[0])) {
        *type = want;
        return 0;
    }
    /* §2.9: 256-element types do not divide 576-, 896- or 640-wide rows;
     * fall back to the smallest block that does, in quality order */
    static const int chain[] = {GGML_TYPE_Q2_0, GGML_TYPE_Q4_0, GGML_TYPE_Q8_0, GGML_TYPE_F16};
    const int low_bit = want == GGML_TYPE_IQ3_XXS || want == GGML_TYPE_Q2_0;
    /* the K/IQ types up to 4.5 bits a weight take Q4_0, as llama.cpp sends
     * Q2_K/Q3_K there (its IQ4_NL, Q5_0 for the IQ types and Q4_K have no
     * encoder in strata); Q5_K and Q6_K keep Q8_0 */
    const int k_low = want == GGML_TYPE_Q2_K || want == GGML_TYPE_Q3_K ||
                      want == GGML_TYPE_Q4_K || want == GGML_TYPE_IQ2_XXS ||
                      want == GGML_TYPE_IQ2_XS || want == 21 /* IQ3_S */ ||
                      want == 22 /* IQ2_S */ || want == 23 /* IQ4_XS */;
    for (size_t i = 0; i < sizeof chain / sizeof chain[0]; i++) {
        /* Q2_0 only stands in for a low-bit target, never for Q4_0/Q8_0 */
        if (chain[i] == GGML_TYPE_Q2_0 && !low_bit)
            continue;
        if (chain[i] == GGML_TYPE_Q4_0 && !k_low)
            continue;
        if (type_fits(chain[i], ne[0])) {
            *type = chain[i];
            *fallback = 1;
            return 0;
        }
    }
    return strata_err(err, STRATA_E_UNSUPPORTED,
                      "tensor %s: ne[0] = %lld fits no block size of %s or its fallbacks",
                      name, (long long)ne[0], type_name(want));
}

/* ---- row-parallel encoding --------------------------------------------- */

typedef struct rows_job {
    const type_traits *t;
    const float *src;
    uint8_t *dst;
    int64_t ne0, r0, r1;
    size_t row_bytes;
    const float *imatrix;
} rows_job;

static void *rows_run(void *arg)
{
    const rows_job *j = arg;
    for (int64_t r = j->r0; r < j->r1; r++)
        j->t->quant(j->src + r * j->ne0, j->dst + r * j->row_bytes, j->ne0,
                    j->imatrix);
    return NULL;
}

int quantize_rows(int type, const float *src, int64_t ne0, int64_t nrows,
                  void *dst, const float *imatrix, int n_threads,
                  strata_error *err)
{
    const type_traits *t = type_traits_get(type);
    if (!t || !t->quant)
        return strata_err(err, STRATA_E_UNSUPPORTED, "quantize: strata cannot encode type %s (id %d)",
                          type_name(type), type);
    if (ne0 <= 0 || ne0 % t->blck)
        return strata_err(err, STRATA_E_ARG, "quantize: row of %lld elements is not a multiple of the %s block (%d)",
                          (long long)ne0, t->name, t->blck);
    int nt = n_threads > 0 ? n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    nt = nt < 1 ? 1 : nt > QUANTIZE_MAX_THREADS ? QUANTIZE_MAX_THREADS : nt;
    if (nt > nrows)
        nt = nrows > 0 ? (int)nrows : 1;
    rows_job jobs[QUANTIZE_MAX_THREADS];
    pthread_t tid[QUANTIZE_MAX_THREADS];
    int started[QUANTIZE_MAX_THREADS] = {0};
    for (int k = 0; k < nt; k++)
        jobs[k] = (rows_job){t, src, dst, ne0, nrows * k / nt, nrows * (k + 1) / nt,
                             type_row_bytes(type, ne0), imatrix};
    for (int k = 1; k < nt; k++)
        started[k] = pthread_create(&tid[k], NULL, rows_run, &jobs[k]) == 0;
    rows_run(&jobs[0]);
    for (int k = 1; k < nt; k++) {
        if (started[k])
            pthread_join(tid[k], NULL);
        else
            rows_run(&jobs[k]); /* no thread: do it here, only slower */
    }
    return 0;
}

/* ---- one tensor ---------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Decode src (type st) and encode it as type dt into a new buffer *out. */
static int requantize_tensor(const quantize_params *p, const gguf_tensor *t,
                             int dt, float *slab, void **out, uint64_t *out_bytes,
                             strata_error *err)
{
    const type_traits *st = type_traits_get((int)t->type);
    if (!st || !st->dequant)
        return strata_err(err, STRATA_E_UNSUPPORTED,
                          "tensor %s: source type %s (id %u) cannot be decoded by strata",
                          t->name, type_name((int)t->type), t->type);
    const int64_t ne0 = t->ne[0];
    const int64_t nrows = t->ne[1] * t->ne[2] * t->ne[3];
    const size_t in_row = type_row_bytes((int)t->type, ne0);
    const size_t out_row = type_row_bytes(dt, ne0);
    const float *im = p->imatrix ? p->imatrix(p->imatrix_ctx, t->name, ne0, t->ne[2]) : NULL;
    /* an expert tensor's weights: one row of ne0 per expert (ne[2]) */
    const int64_t rows_per_matrix = t->ne[1];
    uint8_t *buf = malloc(out_row * (size_t)nrows);
    if (!buf)
        return strata_err(err, STRATA_E_NOMEM, "tensor %s: cannot allocate %zu bytes",
                          t->name, out_row * (size_t)nrows);
    int64_t slab_rows = QUANTIZE_SLAB / ne0;
    slab_rows = slab_rows < 1 ? 1 : slab_rows;
    for (int64_t r0 = 0; r0 < nrows; r0 += slab_rows) {
        const int64_t nr = nrows - r0 < slab_rows ? nrows - r0 : slab_rows;
        for (int64_t r = 0; r < nr; r++)
            st->dequant((const uint8_t *)t->data + (r0 + r) * in_row, slab + r * ne0, ne0);
        int rc = 0;
        if (im && t->ne[2] > 1) {
            /* rows of one expert at a time, each with its expert's weights */
            for (int64_t r = 0; r < nr && !rc;) {
                const int64_t e = (r0 + r) / rows_per_matrix;
                int64_t n_e = (e + 1) * rows_per_matrix - (r0 + r);
                n_e = n_e < nr - r ? n_e : nr - r;
                rc = quantize_rows(dt, slab + r * ne0, ne0, n_e, buf + (r0 + r) * out_row,
                                   im + e * ne0, p->n_threads, err);
                r += n_e;
            }
        } else {
            rc = quantize_rows(dt, slab, ne0, nr, buf + r0 * out_row, im, p->n_threads, err);
        }
        if (rc) {
            free(buf);
            return rc;
        }
    }
    *out = buf;
    *out_bytes = out_row * (size_t)nrows;
    return 0;
}

/* ---- the file -------------------------------------------------------------- */

/* ggml's llama_ftype for the mixes that have one (general.file_type is
 * informational, doc/formats.md §1.2); Q2_0 has none at the snapshot. */
static int file_type_of(int type)
{
    switch (type) {
    case GGML_TYPE_F32: return 0;
    case GGML_TYPE_F16: return 1;
    case GGML_TYPE_Q4_0: return 2;
    case GGML_TYPE_Q8_0: return 7;
    case GGML_TYPE_IQ3_XXS: return 23;
    /* a whole file in one K/IQ type: the nearest llama_ftype (the _S
     * variant for the K-quants, whose _M recipes promote some tensors) */
    case GGML_TYPE_Q2_K: return 10;
    case GGML_TYPE_Q3_K: return 11;
    case GGML_TYPE_Q4_K: return 14;
    case GGML_TYPE_Q5_K: return 16;
    case GGML_TYPE_Q6_K: return 18;
    case GGML_TYPE_IQ2_XXS: return 19;
    case GGML_TYPE_IQ2_XS: return 20;
    case 21 /* IQ3_S */: return 26;
    case 22 /* IQ2_S */: return 28;
    case 23 /* IQ4_XS */: return 30;
    case GGML_TYPE_BF16: return 32;
    default: return -1;
    }
}

static void note_fallback(quantize_summary *s, const char *name, int want, int got)
{
    size_t len = strlen(s->fallback);
    if (s->n_fallback == 1)
        snprintf(s->fallback, sizeof s->fallback, "%s->%s (ne[0] %% block != 0): %s",
                 type_name(want), type_name(got), name);
    else if (s->n_fallback <= 4 && len < sizeof s->fallback - 1)
        snprintf(s->fallback + len, sizeof s->fallback - len, ", %s", name);
    else if (s->n_fallback == 5 && len < sizeof s->fallback - 1)
        snprintf(s->fallback + len, sizeof s->fallback - len, ", ...");
}

int quantize_file(const char *in_path, const char *out_path,
                  const quantize_params *params, quantize_summary *s,
                  strata_error *err)
{
    memset(s, 0, sizeof *s);
    quantize_params q = *params;
    const quantize_params *p = &q;
    if (q.recipe)
        q.type = recipe_base_type(q.recipe);
    const type_traits *target = type_traits_get(p->type);
    if (!target || !target->quant)
        return strata_err(err, STRATA_E_UNSUPPORTED, "quantize: cannot produce type %s (id %d)",
                          type_name(p->type), p->type);
    gguf *g = NULL;
    int rc = gguf_open(in_path, &g, err);
    if (rc)
        return rc;
    if (q.recipe) {
        if ((rc = recipe_model_from_gguf(g, &q.facts, err))) {
            gguf_close(g);
            return rc;
        }
        q.facts.imatrix = q.imatrix != NULL;
    }
    const double t0 = now_s();
    const uint64_t nt = gguf_n_tensors(g);
    gguf_writer *w = gguf_writer_new(gguf_alignment(g));
    void **owned = calloc(nt ? nt : 1, sizeof *owned);
    float *slab = malloc(QUANTIZE_SLAB * sizeof *slab);
    if (!w || !owned || !slab) {
        rc = strata_err(err, STRATA_E_NOMEM, "%s: out of memory", in_path);
        goto done;
    }
    for (uint64_t i = 0; i < gguf_n_kv(g); i++) {
        const gguf_kv *kv = gguf_kv_at(g, i);
        if (!strcmp(kv->key, "general.file_type") ||
            !strcmp(kv->key, "general.quantization_version"))
            continue; /* rewritten below for the new mix */
        if ((rc = gguf_writer_copy_kv(w, kv)) != 0) {
            strata_err(err, rc, "%s: cannot copy key %s", in_path, kv->key);
            goto done;
        }
    }
    gguf_writer_set_u32(w, "general.quantization_version", 2);
    const int ftype = p->recipe ? recipe_file_type(p->recipe) : file_type_of(p->type);
    if (ftype >= 0)
        gguf_writer_set_u32(w, "general.file_type", (uint32_t)ftype);

    for (uint64_t i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        const double ti = now_s();
        int dt, fallback;
        if ((rc = quantize_choose_type(p, t->name, t->n_dims, t->ne, &dt, &fallback, err)))
            goto done;
        if (dt < 0)
            dt = (int)t->type; /* the recipe leaves it as it is */
        const void *data = t->data;
        uint64_t nbytes = t->nbytes;
        /* same type: keep the bytes, a decode/encode round would only add error */
        if (dt != (int)t->type) {
            rc = requantize_tensor(p, t, dt, slab, &owned[i], &nbytes, err);
            if (rc)
                goto done;
            data = owned[i];
        }
        if ((rc = gguf_writer_add_tensor(w, t->name, (uint32_t)dt, t->n_dims, t->ne,
                                         data, nbytes, err)))
            goto done;
        const uint64_t nel = (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        s->n_tensors++;
        s->n_params += nel;
        s->bytes_in += t->nbytes;
        s->bytes_out += nbytes;
        s->params_by_type[dt] += nel;
        s->tensors_by_type[dt]++;
        s->bytes_by_type[dt] += nbytes;
        if (dt != (int)t->type && p->imatrix && p->imatrix(p->imatrix_ctx, t->name, t->ne[0], t->ne[2]))
            s->n_weighted++;
        if (fallback) {
            int wanted = p->type;
            if (p->recipe)
                recipe_type(p->recipe, t->name, t->n_dims, t->ne[0], &p->facts, &wanted);
            s->n_fallback++;
            note_fallback(s, t->name, wanted, dt);
        }
        if (p->progress)
            fprintf(p->progress, "[%4llu/%llu] %-32s %-7s -> %-7s%s %10llu -> %10llu bytes  %6.2f s\n",
                    (unsigned long long)i + 1, (unsigned long long)nt, t->name,
                    type_name((int)t->type), type_name(dt), fallback ? "*" : " ",
                    (unsigned long long)t->nbytes, (unsigned long long)nbytes,
                    now_s() - ti);
    }
    rc = gguf_writer_write(w, out_path, err);
    s->seconds = now_s() - t0;
done:
    for (uint64_t i = 0; owned && i < nt; i++)
        free(owned[i]);
    free(owned);
    free(slab);
    gguf_writer_free(w);
    gguf_close(g);
    return rc;
}
