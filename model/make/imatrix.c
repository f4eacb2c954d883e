/* imatrix.c: the importance-matrix collector and file (model/make/imatrix.h). */
#include "model/make/imatrix.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/quant.h"

#define IM_SLOTS 4096 /* open-addressing table: far more than any model's weights */

typedef struct im_entry {
    char name[GGUF_MAX_NAME + 1];
    int64_t cols;
    int n_mat;
    double *sum;      /* n_mat * cols sums of squares (collector) */
    uint64_t *count;  /* n_mat rows seen */
    float *mean;      /* n_mat * cols means: computed (collector) or mapped (file) */
    const float *counts_f; /* file: n_mat row counts */
} im_entry;

struct imatrix {
    pthread_mutex_t lock;
    im_entry *e;
    int n, cap;
    int slot[IM_SLOTS]; /* entry index + 1, 0 empty */
    int status;
    char msg[256];
    gguf *file;         /* a loaded file (its mapping holds the means) */
};

imatrix *imatrix_new(void)
{
    imatrix *im = calloc(1, sizeof *im);
    if (im)
        pthread_mutex_init(&im->lock, NULL);
    return im;
}

void imatrix_free(imatrix *im)
{
    if (!im)
        return;
    for (int i = 0; i < im->n; i++) {
        free(im->e[i].sum);
        free(im->e[i].count);
        if (!im->file)
            free(im->e[i].mean);
    }
    free(im->e);
    gguf_close(im->file);
    pthread_mutex_destroy(&im->lock);
    free(im);
}

static uint32_t hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static im_entry *find(const imatrix *im, const char *name)
{
    for (uint32_t h = hash(name) % IM_SLOTS;; h = (h + 1) % IM_SLOTS) {
        if (!im->slot[h])
            return NULL;
        if (!strcmp(im->e[im->slot[h] - 1].name, name))
            return &im->e[im->slot[h] - 1];
    }
}

/* A new entry (zeroed), or NULL when out of room or memory. */
static im_entry *add_entry(imatrix *im, const char *name)
{
    if (im->n >= IM_SLOTS / 2 || strlen(name) > GGUF_MAX_NAME)
        return NULL;
    if (im->n == im->cap) {
        int cap = im->cap ? 2 * im->cap : 256;
        im_entry *e = realloc(im->e, (size_t)cap * sizeof *e);
        if (!e)
            return NULL;
        im->e = e;
        im->cap = cap;
    }
    im_entry *e = &im->e[im->n++];
    memset(e, 0, sizeof *e);
    strcpy(e->name, name);
    uint32_t h = hash(name) % IM_SLOTS;
    while (im->slot[h])
        h = (h + 1) % IM_SLOTS;
    im->slot[h] = im->n;
    return e;
}

static int fail(imatrix *im, int code, const char *what, const char *name)
{
    if (!im->status) {
        im->status = code;
        snprintf(im->msg, sizeof im->msg, "imatrix: weight %s: %s", name, what);
    }
    return code;
}

int imatrix_add(imatrix *im, const char *name, int expert, int n_mat, const float *x, int n,
                int64_t cols)
{
    if (n_mat < 1)
        n_mat = 1;
    const int mat = expert < 0 ? 0 : expert;
    pthread_mutex_lock(&im->lock);
    int rc = 0;
    im_entry *e = find(im, name);
    if (!e) {
        e = add_entry(im, name);
        if (e) {
            e->cols = cols;
            e->n_mat = n_mat;
            e->sum = calloc((size_t)n_mat * (size_t)cols, sizeof *e->sum);
            e->count = calloc((size_t)n_mat, sizeof *e->count);
        }
        if (!e || !e->sum || !e->count) {
            rc = fail(im, STRATA_E_NOMEM, "out of memory", name);
            goto out;
        }
    }
    if (e->cols != cols || e->n_mat != n_mat || mat >= n_mat) {
        rc = fail(im, STRATA_E_ARG, "its input changed shape", name);
        goto out;
    }
    double *s = e->sum + (size_t)mat * (size_t)cols;
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * (size_t)cols;
        for (int64_t j = 0; j < cols; j++)
            s[j] += (double)xr[j] * xr[j];
    }
    e->count[mat] += (uint64_t)n;
out:
    pthread_mutex_unlock(&im->lock);
    return rc;
}

int imatrix_status(const imatrix *im, strata_error *err)
{
    if (im->status)
        strata_err(err, im->status, "%s", im->msg);
    return im->status;
}

int imatrix_count(const imatrix *im)
{
    return im->n;
}

/* The means of a collector's entry: sum / rows; a matrix no row reached
 * (an expert the router never chose) gets 1 everywhere, "no preference",
 * so its quantization is the plain one rather than all-zero weights. */
static const float *entry_mean(im_entry *e)
{
    if (e->mean)
        return e->mean;
    e->mean = malloc((size_t)e->n_mat * (size_t)e->cols * sizeof *e->mean);
    if (!e->mean)
        return NULL;
    for (int m = 0; m < e->n_mat; m++)
        for (int64_t j = 0; j < e->cols; j++) {
            const size_t k = (size_t)m * (size_t)e->cols + (size_t)j;
            e->mean[k] = e->count[m] ? (float)(e->sum[k] / (double)e->count[m]) : 1.0f;
        }
    return e->mean;
}

int imatrix_write(const imatrix *im, const char *path, const char *dataset, int n_chunks,
                  int chunk_size, strata_error *err)
{
    gguf_writer *w = gguf_writer_new(0);
    float **counts = calloc((size_t)(im->n ? im->n : 1), sizeof *counts);
    int rc = 0, written = 0;
    if (!w || !counts) {
        rc = strata_err(err, STRATA_E_NOMEM, "imatrix %s: out of memory", path);
        goto done;
    }
    gguf_writer_set_str(w, "general.type", "imatrix");
    gguf_writer_set_str(w, "imatrix.datasets", dataset ? dataset : "");
    gguf_writer_set_u32(w, "imatrix.chunk_count", (uint32_t)n_chunks);
    gguf_writer_set_u32(w, "imatrix.chunk_size", (uint32_t)chunk_size);
    for (int i = 0; i < im->n; i++) {
        im_entry *e = &im->e[i];
        if (strncmp(e->name, "blk.", 4) != 0)
            continue; /* the embedding and head: not recorded (llama.cpp's default) */
        const float *mean = entry_mean(e);
        counts[i] = malloc((size_t)e->n_mat * sizeof(float));
        if (!mean || !counts[i]) {
            rc = strata_err(err, STRATA_E_NOMEM, "imatrix %s: out of memory", path);
            goto done;
        }
        for (int m = 0; m < e->n_mat; m++)
            counts[i][m] = (float)e->count[m];
        char cname[GGUF_MAX_NAME + 16];
        snprintf(cname, sizeof cname, "%s.counts", e->name);
        if (strlen(cname) > GGUF_MAX_NAME) {
            rc = strata_err(err, STRATA_E_ARG, "imatrix %s: name %s is too long", path, cname);
            goto done;
        }
        const int64_t ne[2] = {e->cols, e->n_mat}, nc[1] = {e->n_mat};
        if ((rc = gguf_writer_add_tensor(w, e->name, GGML_TYPE_F32, e->n_mat > 1 ? 2 : 1, ne,
                                         mean, (uint64_t)e->n_mat * e->cols * 4, err)) ||
            (rc = gguf_writer_add_tensor(w, cname, GGML_TYPE_F32, 1, nc, counts[i],
                                         (uint64_t)e->n_mat * 4, err)))
            goto done;
        written++;
    }
    if (!written) {
        rc = strata_err(err, STRATA_E_ARG, "imatrix %s: no blk.* weight saw any input", path);
        goto done;
    }
    rc = gguf_writer_write(w, path, err);
done:
    for (int i = 0; counts && i < im->n; i++)
        free(counts[i]);
    free(counts);
    gguf_writer_free(w);
    return rc;
}

int imatrix_load(const char *path, imatrix **out, strata_error *err)
{
    *out = NULL;
    imatrix *im = imatrix_new();
    if (!im)
        return strata_err(err, STRATA_E_NOMEM, "imatrix %s: out of memory", path);
    int rc = gguf_open(path, &im->file, err);
    if (rc) {
        imatrix_free(im);
        return rc;
    }
    gguf_str type;
    if (gguf_get_str(im->file, "general.type", &type, NULL) ||
        type.len != 7 || memcmp(type.p, "imatrix", 7)) {
        imatrix_free(im);
        return strata_err(err, STRATA_E_FORMAT, "%s: not an imatrix file (general.type is not "
                          "\"imatrix\")", path);
    }
    for (uint64_t i = 0; i < gguf_n_tensors(im->file); i++) {
        const gguf_tensor *t = gguf_tensor_at(im->file, i);
        const size_t len = strlen(t->name);
        if (len > 7 && !strcmp(t->name + len - 7, ".counts"))
            continue;
        if (t->type != GGML_TYPE_F32 || t->n_dims > 2) {
            imatrix_free(im);
            return strata_err(err, STRATA_E_FORMAT, "%s: tensor %s is not an F32 matrix of means",
                              path, t->name);
        }
        im_entry *e = add_entry(im, t->name);
        if (!e) {
            imatrix_free(im);
            return strata_err(err, STRATA_E_NOMEM, "%s: too many tensors", path);
        }
        e->cols = t->ne[0];
        e->n_mat = (int)t->ne[1];
        e->mean = (float *)t->data; /* aligned: GGUF data is 32-byte aligned */
    }
    *out = im;
    return 0;
}

const float *imatrix_values(const imatrix *im, const char *tensor, int64_t *cols, int *n_mat)
{
    im_entry *e = find(im, tensor);
    if (!e)
        return NULL;
    *cols = e->cols;
    *n_mat = e->n_mat;
    return im->file ? e->mean : entry_mean(e);
}

const float *imatrix_lookup(void *ctx, const char *tensor, int64_t ne0, int64_t n_mat)
{
    int64_t cols;
    int nm;
    const float *v = imatrix_values(ctx, tensor, &cols, &nm);
    return v && cols == ne0 && nm == n_mat ? v : NULL;
}
