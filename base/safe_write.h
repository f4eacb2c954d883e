/* safe_write.h: replace a file so that a reader sees the old contents or the
 * new ones, never a mix, and so that nothing but a regular file is ever
 * replaced.
 *
 * The data goes to a temporary file with a fresh random name, created with
 * O_EXCL in the destination's own directory (a rename across file systems
 * would fail, and two writers to one destination each get their own
 * temporary); it is fsynced, then renamed over the destination.
 *
 * The destination must be a regular file or not exist.  A symbolic link is
 * written through: the file it finally points at is replaced and the link
 * stays.  A link to nothing, a device, a FIFO, a socket or a directory is
 * refused before anything is written, and checked again just before the
 * rename.  Every message names the destination as the caller gave it. */
#ifndef STRATA_SAFE_WRITE_H
#define STRATA_SAFE_WRITE_H

#include <stdio.h>

#include "base/error.h"

typedef struct safe_write {
    FILE *f;          /* write the new contents here */
    const char *name; /* the destination as given (for messages) */
    char *dest;       /* the file that will be replaced (links resolved) */
    char *tmp;        /* the temporary file */
} safe_write;

/* Check the destination and create the temporary.  On failure nothing is
 * left behind and *sw is cleared. */
int safe_write_open(safe_write *sw, const char *path, strata_error *err);
/* Flush, fsync, close, rename over the destination and fsync its directory.
 * `ok` false (the caller's writes failed) makes it abort instead; errno_hint
 * is the caller's errno for the message then.  Either way *sw is released. */
int safe_write_commit(safe_write *sw, int ok, int errno_hint, strata_error *err);
/* Drop the temporary (no-op on a cleared record). */
void safe_write_abort(safe_write *sw);

#endif
