/* page.h: the HTML chat page served at GET / (page.c). */
#ifndef STRATA_SERVE_PAGE_H
#define STRATA_SERVE_PAGE_H

#include <stddef.h>

const char *serve_page(size_t *len);

#endif
