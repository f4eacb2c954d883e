/* iq_grids.c: the grids of IQ2_XXS, IQ2_XS, IQ2_S and IQ3_S (doc/quant.md).
 *
 * Each .inc is ggml's table printed entry by entry.  The IQ2 grids hold
 * eight magnitudes per entry (each 8, 25 or 43), IQ3_S's four (odd, 1..15);
 * entries are sorted by their level code, which test/test_quant.c checks. */
#include "model/quant.h"

const uint64_t iq2xxs_grid[256] = {
#include "model/iq2xxs_grid.inc"
};

const uint64_t iq2xs_grid[512] = {
#include "model/iq2xs_grid.inc"
};

const uint64_t iq2s_grid[1024] = {
#include "model/iq2s_grid.inc"
};

const uint32_t iq3s_grid[512] = {
#include "model/iq3s_grid.inc"
};
