/* error.c: the error record (see error.h). */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>

int strata_err(strata_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

void strata_err_clear(strata_error *err)
{
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}

const char *strata_strerror(int code)
{
    switch (code) {
    case STRATA_OK: return "ok";
    case STRATA_E_IO: return "i/o error";
    case STRATA_E_FORMAT: return "format error";
    case STRATA_E_NOMEM: return "out of memory";
    case STRATA_E_UNSUPPORTED: return "unsupported";
    case STRATA_E_ARG: return "bad argument";
    case STRATA_E_NOTFOUND: return "not found";
    case STRATA_E_TYPE: return "wrong type";
    case STRATA_E_LIMIT: return "limit reached";
    case STRATA_E_DEVICE: return "device error";
    case STRATA_E_CANCELLED: return "cancelled";
    default: return "unknown error";
    }
}
