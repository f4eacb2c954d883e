/* error.h: status codes and the error message every library call can fill.
 *
 * Library functions return 0 or a negative STRATA_E_* code and, when given a
 * non-NULL strata_error, write one line of context into it: the file, the
 * field or tensor, and the offending value.  The library never exits. */
#ifndef STRATA_ERROR_H
#define STRATA_ERROR_H

#include <stddef.h>

enum {
    STRATA_OK = 0,
    STRATA_E_IO = -1,          /* open/read/write/mmap failed */
    STRATA_E_FORMAT = -2,      /* malformed input file or data */
    STRATA_E_NOMEM = -3,       /* host allocation failed */
    STRATA_E_UNSUPPORTED = -4, /* valid input that strata does not handle */
    STRATA_E_ARG = -5,         /* bad argument from the caller */
    STRATA_E_NOTFOUND = -6,    /* key / tensor / file not present */
    STRATA_E_TYPE = -7,        /* value present with the wrong type */
    STRATA_E_LIMIT = -8,       /* a budget (context, cache, memory) is exhausted */
    STRATA_E_DEVICE = -9,      /* CUDA runtime / device error */
    STRATA_E_CANCELLED = -10,  /* stopped on request */
};

typedef struct strata_error {
    int code;
    char msg[512];
} strata_error;

/* Format into err (if non-NULL), set err->code = code, and return code, so a
 * caller can write `return strata_err(err, STRATA_E_FORMAT, "...", ...);`. */
int strata_err(strata_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Clear an error record. */
void strata_err_clear(strata_error *err);

/* A short name for a status code ("format error", ...). */
const char *strata_strerror(int code);

#endif
