/* strata.h: the engine's public API.
 *
 * An engine holds a model placed on its stages (a stage = a contiguous range
 * of layers on one device), each stage's resident KV pool, and the
 * tokenizer.  A sequence (strata_seq) is one conversation's state: its token
 * history and its KV pages on every stage.
 *
 *   strata_open()           load, place, allocate
 *   strata_seq_new()        a new empty conversation
 *   strata_seq_feed()       read tokens (prefill in chunks); logits of the last
 *   strata_decode_batch()   one token for each of several sequences at once
 *   strata_close()
 *
 * Thread-safety: one thread drives an engine (the scheduler in
 * sched/scheduler.h offers a thread-safe request API on top). */
#ifndef STRATA_H
#define STRATA_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/model.h"

enum strata_backend { STRATA_BACKEND_AUTO = 0, STRATA_BACKEND_CPU = 1, STRATA_BACKEND_CUDA = 2 };

/* The largest sizes strata_open accepts (STRATA_E_ARG beyond them, with the
 * option named): far above any real use, low enough that every product of
 * them the engine forms (slots x pages, rows x widths) fits in 64 bits and
 * every count that is kept in an int stays below INT_MAX. */
#define STRATA_MAX_CTX (1 << 24)   /* tokens per sequence (-c) */
#define STRATA_MAX_SLOTS (1 << 16) /* --batch */
#define STRATA_MAX_CHUNK (1 << 16) /* --chunk */
/* What the KV cache stores per token and kv head (doc/engine.md, "The KV
 * cache"; measured quality in doc/perplexity.md).
 *   K8V4R2 k8v4's bytes (K 34 B, V 18 B per 32 values) of the rotated head
 *          vectors, with K minus the layer's rotated K bias (a fixed shift
 *          the softmax does not see) and V's 4-bit codes into the IQ4_NL
 *          levels with a searched scale; needs head_dim a power of two
 *          (32..512)
 *   K8V4R  K as Q8_0 and V as Q4_0 blocks of 32 after a fixed orthogonal
 *          rotation of each head vector (a signed Walsh-Hadamard transform);
 *          needs head_dim a power of two (32..512)
 *   K8V4   the same blocks without the rotation
 *   F16    K and V in fp16 (3.6x the bytes of k8v4)
 * DEFAULT (what strata_params_default sets) resolves at strata_open to
 * K8V4R2 where the head dim is a power of two in 32..512, else to K8V4
 * (doc/engine.md, "The KV cache"); strata_kv_type() says what was
 * chosen.  The values are stored in saved conversations:
 * never renumber them. */
enum strata_kv_type {
    STRATA_KV_K8V4 = 0,   /* the values of the kernels' KV_K8V4 and KV_F16 (code */
    STRATA_KV_F16 = 1,    /* that set those here before this enum existed keeps its meaning) */
    STRATA_KV_K8V4R = 2,
    STRATA_KV_DEFAULT = 3,
    STRATA_KV_K8V4R2 = 4,
};
/* "k8v4r2", "k8v4r", "k8v4", "f16" ("default" for DEFAULT; NULL for no type). */
const char *strata_kv_name(int kv_type);
/* The enum value of a name above, or -1. */
int strata_kv_parse(const char *name);

typedef struct strata_params {
    const char *model_path;
    int backend;            /* enum strata_backend */
    int n_ctx;              /* per-sequence context limit; 0: min(model's, 4096) */
    int kv_type;            /* enum strata_kv_type; default STRATA_KV_DEFAULT */
    int n_slots;            /* sequences that may be resident at once (>= 1) */
    int batch_groups;       /* --batch-groups: with a layer split, a decode step's rows
                             * flow through the stages as a pipeline of this many
                             * groups (doc/engine.md, "Batch groups"); must divide
                             * n_slots; 0 or 1: off */
    int kv_resident;        /* tokens per stage pool; 0: n_ctx * n_slots */
    int n_chunk;            /* prefill chunk (tokens); 0: 256 */
    int n_threads;          /* CPU threads; 0: all cores */
    const char *layer_split; /* "13,26" or "auto" or NULL (one stage) */
    const char *devices;    /* "0,1" stage -> CUDA device, or NULL (all 0) */
    int quiet;              /* 1: no progress/info lines on stderr */
    /* called while weights load: done/total bytes */
    void (*progress)(uint64_t done, uint64_t total, void *user);
    void *progress_user;
    /* polled before each tensor (CPU) or layer (CUDA) while weights load:
     * nonzero stops the load, and strata_open returns STRATA_E_CANCELLED
     * (the CLI's Ctrl-C); NULL: never */
    int (*load_cancel)(void *user);
    void *load_cancel_user;
    /* CPU backend only (strata_open refuses it with a card): called before
     * each weight product of a layer with the product's n input rows of
     * `cols` floats and the weight's tensor name; `expert` is the expert's
     * index in a stacked MoE weight of n_mat, -1 otherwise.  `strata-cli
     * imatrix` collects its importance matrix here.  NULL: off (one
     * untaken branch per product). */
    void (*matmul_tap)(void *user, const char *weight, int expert, int n_mat,
                       const float *x, int n, int64_t cols);
    void *matmul_tap_user;
} strata_params;

/* Defaults for every field (model_path NULL). */
strata_params strata_params_default(void);

typedef struct strata_engine strata_engine;
typedef struct strata_seq strata_seq;

int strata_open(const strata_params *p, strata_engine **out, strata_error *err);
void strata_close(strata_engine *e);

const model *strata_model(const strata_engine *e);
struct tokenizer *strata_tokenizer(const strata_engine *e);
int strata_n_ctx(const strata_engine *e);
int strata_n_vocab(const strata_engine *e);
int strata_backend(const strata_engine *e);   /* the backend actually used */
/* 1 if --backend auto would choose the CUDA backend here (a usable card and
 * a CUDA build); else 0 and *why (may be NULL) says why. */
int strata_cuda_available(const char **why);
int strata_kv_type(const strata_engine *e);   /* the KV type actually used (never DEFAULT) */
int strata_n_stages(const strata_engine *e);
int strata_n_slots(const strata_engine *e);   /* sequences that may decode together */
int strata_n_chunk(const strata_engine *e);   /* prompt tokens per forward call */
/* Groups a decode step's rows are pipelined in: 1 when off or with one stage. */
int strata_batch_groups(const strata_engine *e);
/* One line describing placement, memory and KV budgets (for logs, /stats). */
void strata_describe(const strata_engine *e, char *buf, size_t cap);

strata_seq *strata_seq_new(strata_engine *e, strata_error *err);
void strata_seq_free(strata_seq *s);
/* Forget the history and return the KV pages. */
void strata_seq_reset(strata_seq *s);
/* Keep the first n tokens (drop the rest of the history and KV). */
void strata_seq_truncate(strata_seq *s, int n);
int strata_seq_len(const strata_seq *s);
const int32_t *strata_seq_tokens(const strata_seq *s);

/* Append n tokens to the sequence, running them through the model in chunks.
 * If logits is non-NULL it receives the n_vocab logits after the last token;
 * if all_logits is non-NULL it receives n x n_vocab (perplexity). */
int strata_seq_feed(strata_seq *s, const int32_t *tokens, int n, float *logits,
                    float *all_logits, strata_error *err);

/* One decode step for n sequences: token[i] is appended to seqs[i] and
 * logits (n x n_vocab) receive their next-token logits.  The rows share one
 * read of the weights; each row's arithmetic is the same as alone. */
int strata_decode_batch(strata_seq **seqs, const int32_t *tokens, int n, float *logits,
                        strata_error *err);
/* A decode step that also picks each sequence's next token with its
 * sampler (engine/sample.h): tokens[i] is appended to seqs[i] and next[i]
 * receives the sampled id.  On the CUDA backend the choice is made on the
 * card and only the ids cross to the host (the repetition penalty, or top-k
 * off / above 256, fall back to host sampling of copied logits). */
struct sampler;
int strata_decode_batch_sample(strata_seq **seqs, const int32_t *tokens, int n,
                               struct sampler **smp, int32_t *next, strata_error *err);

/* strata_decode_batch for one sequence: how generated tokens are read, so a
 * conversation decodes with the same kernels alone and in a batch. */
int strata_seq_decode(strata_seq *s, int32_t token, float *logits, strata_error *err);

#endif
