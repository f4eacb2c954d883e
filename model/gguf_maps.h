/* gguf_maps.h: gguf_open's list of the files it has mapped, for
 * gguf_mapped_file_at (gguf.h): a SIGBUS handler asks it whether a faulting
 * address lies in a model file that was truncated under its mapping. */
#ifndef STRATA_GGUF_MAPS_H
#define STRATA_GGUF_MAPS_H

#include <stddef.h>

/* List a mapping (path must outlive it: gguf_close removes it first). */
void gguf_maps_add(const void *base, size_t size, const char *path);
void gguf_maps_remove(const void *base);

#endif
