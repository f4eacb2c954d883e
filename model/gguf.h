/* gguf.h: strata's own GGUF reader and writer (format: doc/formats.md §1).
 *
 * Reader: the file is mmapped read-only; keys, strings and tensor data are
 * pointers into the mapping (nothing is copied that need not be).  Every
 * header field, count, string, array and tensor record is validated against
 * the file size before use; any failure is an error that names the file, the
 * field and the value.
 *
 * Writer: collects metadata and tensors, then writes a GGUF v3 file with the
 * alignment honoured, atomically (base/safe_write.h). */
#ifndef STRATA_GGUF_H
#define STRATA_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* Metadata value types (doc/formats.md §1.2). */
enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4,
    GGUF_I32 = 5, GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8,
    GGUF_ARRAY = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12,
    GGUF_VTYPE_COUNT = 13,
};

#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 63 /* tensor name bytes, as ggml requires */

/* A string inside the mapping: not NUL-terminated. */
typedef struct gguf_str {
    const char *p;
    uint64_t len;
} gguf_str;

/* One metadata record. */
typedef struct gguf_kv {
    const char *key;        /* NUL-terminated copy owned by the reader */
    uint32_t type;          /* enum gguf_vtype */
    uint32_t arr_type;      /* element type when type == GGUF_ARRAY */
    uint64_t n;             /* element count for arrays, 1 otherwise */
    const uint8_t *data;    /* raw little-endian payload in the mapping;
                               for STRING: the bytes (len in str.len) */
    gguf_str str;           /* for type == GGUF_STRING */
    const gguf_str *strs;   /* for arrays of strings: n entries (owned) */
} gguf_kv;

/* One tensor record. */
typedef struct gguf_tensor {
    const char *name;       /* NUL-terminated copy owned by the reader */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* missing dims are 1; ne[0] is contiguous */
    uint32_t type;          /* ggml type id (model/quant.h) */
    uint64_t offset;        /* relative to the data section */
    uint64_t nbytes;        /* exact byte size from the type's block layout */
    const void *data;       /* pointer into the mapping */
} gguf_tensor;

typedef struct gguf gguf;

/* Open and validate a file.  On failure *out is NULL and err says why. */
int gguf_open(const char *path, gguf **out, strata_error *err);
/* Parse a buffer the caller keeps alive (used by the fuzz target and tests);
 * `name` is used in error messages in place of a path. */
int gguf_open_mem(const void *buf, size_t len, const char *name, gguf **out,
                  strata_error *err);
void gguf_close(gguf *g);
/* The path of the file gguf_open mapped at addr, or NULL when addr lies in
 * no open file's mapping.  Async-signal-safe (lock-free reads): for a
 * SIGBUS handler, which gets this when a mapped file was truncated while in
 * use (the CLI's reports it; doc/engine.md, "Loading"). */
const char *gguf_mapped_file_at(const void *addr);

const char *gguf_path(const gguf *g);
uint32_t gguf_version(const gguf *g);
uint32_t gguf_alignment(const gguf *g);
uint64_t gguf_data_offset(const gguf *g);   /* start of the data section */
uint64_t gguf_file_size(const gguf *g);

uint64_t gguf_n_kv(const gguf *g);
const gguf_kv *gguf_kv_at(const gguf *g, uint64_t i);
const gguf_kv *gguf_find_kv(const gguf *g, const char *key); /* NULL if absent */

uint64_t gguf_n_tensors(const gguf *g);
const gguf_tensor *gguf_tensor_at(const gguf *g, uint64_t i);
const gguf_tensor *gguf_find_tensor(const gguf *g, const char *name);

/* Typed getters.  Absent key: STRATA_E_NOTFOUND.  Wrong type: STRATA_E_TYPE
 * with the key, the expected and the actual type in err.  Integer getters
 * accept any integer type whose value fits (range-checked); float getters
 * accept F32 and F64. */
int gguf_get_u32(const gguf *g, const char *key, uint32_t *v, strata_error *err);
int gguf_get_i32(const gguf *g, const char *key, int32_t *v, strata_error *err);
int gguf_get_u64(const gguf *g, const char *key, uint64_t *v, strata_error *err);
int gguf_get_f32(const gguf *g, const char *key, float *v, strata_error *err);
int gguf_get_bool(const gguf *g, const char *key, bool *v, strata_error *err);
int gguf_get_str(const gguf *g, const char *key, gguf_str *v, strata_error *err);
/* Arrays: element type and count; data points at the raw elements (for
 * string arrays use gguf_get_str_array). */
int gguf_get_array(const gguf *g, const char *key, uint32_t *elem_type,
                   uint64_t *n, const void **data, strata_error *err);
int gguf_get_str_array(const gguf *g, const char *key, const gguf_str **items,
                       uint64_t *n, strata_error *err);

const char *gguf_vtype_name(uint32_t t);
size_t gguf_vtype_size(uint32_t t); /* 0 for STRING and ARRAY */

/* ---- writer ---------------------------------------------------------- */

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(uint32_t alignment); /* 0 = default 32 */
void gguf_writer_free(gguf_writer *w);

/* Setting a key twice replaces the value.  Strings and arrays are copied. */
int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
int gguf_writer_set_str(gguf_writer *w, const char *key, const char *s);
int gguf_writer_set_array(gguf_writer *w, const char *key, uint32_t elem_type,
                          const void *data, uint64_t n);
int gguf_writer_set_str_array(gguf_writer *w, const char *key,
                              const char *const *strs, uint64_t n);
/* Copy one record (any type) from a reader, e.g. when requantizing. */
int gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv);

/* Add a tensor; `data` (nbytes long, which must equal the size the type and
 * shape imply) is referenced, not copied: keep it alive until write. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type,
                           uint32_t n_dims, const int64_t *ne,
                           const void *data, uint64_t nbytes, strata_error *err);

/* Write to a unique temporary beside path, fsync, rename over path
 * (base/safe_write.h: path must be a regular file or new; a symbolic link
 * is written through).  On failure nothing is left and path is untouched. */
int gguf_writer_write(gguf_writer *w, const char *path, strata_error *err);

#endif
