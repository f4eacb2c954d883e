/* persist.h: parked conversations that survive a restart.
 *
 * With a directory (--conversation-save DIR), every image the conversation
 * cache commits is also written to DIR as one file, and the files there are
 * loaded back into the cache when the next process starts, so a follow-up
 * after a restart finds its conversation by content and reads only its new
 * tokens.  File format, identity and lifecycle: doc/convcache.md,
 * "Conversations on disk".
 *
 * Two layers:
 *   - the file (persist_file.c): one image as a file, written crash-safely
 *     (temporary, fsync, rename: base/safe_write.h) with a checksum over all
 *     of it and the model's identity; read back only when every check holds.
 *     The bytes are written in an order that does not depend on the layer
 *     split (layer after layer, one span over all tokens), so a file saved by
 *     a two-stage engine loads into a one-stage engine and back;
 *   - the directory (persist.c): loading at start (newest files first, as
 *     many as the cache holds), a writer thread that saves committed images
 *     off the decode path through a bounded queue, the size cap (oldest files
 *     first) and the age limit.
 *
 * Threading: persist_new, persist_enqueue, persist_reap, persist_flush and
 * persist_free are called by the cache's orchestration thread (the thread
 * that drives the engine); the writer thread only reads pinned images. */
#ifndef STRATA_PERSIST_H
#define STRATA_PERSIST_H

#include <stddef.h>
#include <stdint.h>

#include "cache/convcache.h"
#include "engine/strata.h"

#define PERSIST_SUFFIX ".skv"   /* a saved image: 16 hex digits + this */
/* A file's bytes besides its tokens and K/V: the header and the checksum. */
#define PERSIST_FILE_OVERHEAD (96u + 8u)

/* What makes a file's K/V bytes meaningful to an engine: a file is loaded
 * only when all of these equal the engine's.  The layer split is not among
 * them (the file's layout does not depend on it); the stage counts only
 * say where to cut the layers on load. */
typedef struct persist_id {
    uint64_t model;        /* hash of the GGUF's metadata and tensor table
                              (and the first and last bytes of each tensor) */
    uint32_t kv_type;      /* enum strata_kv_type */
    uint32_t kv_page;      /* tokens per KV page (the span layout's unit) */
    uint32_t n_layer, n_kv_head;
    uint32_t row_bytes[4]; /* per token and head, of each KV buffer */
    uint32_t n_ctx;        /* longest image the engine can restore (not
                              written: a longer file is skipped) */
    uint32_t n_vocab;      /* token ids must be below it */
    int n_stages;
    int stage_layers[64];  /* layers of each stage, in order */
} persist_id;

typedef struct persist_params {
    const char *dir;       /* where the images go; must exist or be creatable */
    size_t max_mib;        /* size cap of the directory's images; 0: none */
    int max_days;          /* files older than this are removed; 0: never */
    size_t min_free_mib;   /* loading stops while MemAvailable is under it */
    /* Called (may be NULL) on persist_new's thread for each image loaded at
     * start, oldest first, with its tokens (valid during the call only) and
     * its pending token (sampled after them, never fed: the last token of
     * an answer ended by its length; -1: none): a front end that finds
     * conversations by text rebuilds its index from them, the pending token
     * included, as its client holds it (serve/convindex.h). */
    void (*on_load)(const int32_t *tokens, int n, int32_t pending, void *user);
    void *load_user;
} persist_params;

typedef struct persist_stats {
    uint64_t saved;        /* images written */
    uint64_t save_failures;/* writes that failed (full disk, ...): warned */
    uint64_t save_dropped; /* not queued: the writer was behind */
    uint64_t loaded;       /* images loaded at start */
    uint64_t skipped;      /* files refused at start (warned, never loaded) */
    uint64_t removed;      /* files removed by the cap, the age limit or a
                              newer image of the same conversation */
    uint64_t bytes_written;
    /* The writer's time for the images it saved (gather, write, fsync,
     * rename, and the read-back and removal of the file each replaces):
     * the cost of saving, off the decode path; bench --workload prints it
     * per 100K tokens. */
    uint64_t tokens_saved;
    double save_seconds;
    double save_ms100k_max;   /* the slowest image, ms per 100K tokens */
} persist_stats;

/* The engine's identity (hashing the model's header: a few ms). */
int persist_identity(const strata_engine *e, persist_id *id, strata_error *err);

/* File name of an image of tokens[0..n): 16 hex digits of their hash and
 * PERSIST_SUFFIX, into buf (at least 24 bytes). */
void persist_file_name(const int32_t *tokens, int n, char *buf, size_t cap);

/* Write img to path crash-safely: a reader sees the old file or the new one.
 * *bytes (may be NULL) receives the file's size. */
int persist_write_file(const persist_id *id, const convcache_image *img, const char *path,
                       uint64_t *bytes, strata_error *err);

/* Check path's header against id and its size; the tokens count into *n
 * (may be NULL).  STRATA_E_FORMAT (torn, not ours, another model or KV type
 * or shape), STRATA_E_IO, STRATA_E_LIMIT (longer than the context). */
int persist_check_header(const persist_id *id, const char *path, int *n, uint64_t *file_bytes,
                         strata_error *err);

/* Load path into c as a committed image (fresh capture, checksum verified
 * before commit; any failure leaves nothing in c).  *img (may be NULL)
 * receives it.  An image of the same tokens already in c: 0, nothing read. */
int persist_load_file(const persist_id *id, convcache *c, const char *path,
                      convcache_image **img, strata_error *err);

/* Read path through, checking everything (header, size, identity,
 * checksum), without keeping it: the writer's read-back before it removes
 * the file a new one replaces, and the tests. */
int persist_verify_file(const persist_id *id, const char *path, strata_error *err);

/* Remove the directory's image files older than max_days (0: none), then
 * the oldest until they take at most max_mib (0: no cap); stale temporaries
 * of interrupted saves go too.  Returns how many files it removed. */
int persist_enforce(const char *dir, size_t max_mib, int max_days);

/* ---- the directory, behind a cache --------------------------------------- */

typedef struct persist persist;

/* Check (or make) the directory, enforce the cap and age, load what fits
 * into c (newest first; a refused file is named on stderr with why), and
 * start the writer thread.  NULL with err when the directory cannot be
 * used or the engine's shape cannot be saved. */
persist *persist_new(strata_engine *e, convcache *c, const persist_params *pp,
                     strata_error *err);
/* Write every queued image, stop the writer, unpin.  NULL ok. */
void persist_free(persist *ps);
/* Queue a committed image for saving (pins it until written); prefix_n > 0:
 * the image extends the cached image of tokens[0..prefix_n), whose file is
 * removed once the new one is written and read back.  Full queue: dropped
 * (counted, warned once). */
void persist_enqueue(persist *ps, convcache_image *img, int prefix_n);
/* Unpin the images the writer is done with. */
void persist_reap(persist *ps);
/* Wait until the queue is empty, then reap (tests, shutdown). */
void persist_flush(persist *ps);
void persist_get_stats(persist *ps, persist_stats *st);

#endif
