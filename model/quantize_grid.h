/* quantize_grid.h: the grid search the IQ quantizers share
 * (model/quantize_iq2.c: IQ2_XXS, IQ2_XS, IQ2_S; model/quantize_iq3s.c:
 * IQ3_S; the sign step also model/quant_iq3xxs.c; definitions in
 * quantize_grid.c).  Internal to model/.
 *
 * These types code a group of magnitudes (8 elements in IQ2, 4 in IQ3_S)
 * as one point of a fixed grid.  The search works in "odd units": level L
 * stands for 2L+1.  For a trial inverse scale each element's level is
 * rounded; the levels of a group make a pattern code (bits per element);
 * when that pattern is not a grid point the group takes the best, under
 * the element weights, of the pattern's nearest grid points, listed once
 * at start-up.  As in quantize_search.h every sum runs in index order and
 * the first candidate wins ties, so the codes come out as ggml's. */
#ifndef STRATA_QUANTIZE_GRID_H
#define STRATA_QUANTIZE_GRID_H

#include <stdint.h>

#define QGRID_MAX_POINTS 1024
#define QGRID_MAX_GROUP 8

typedef struct qgrid {
    int ngrid;       /* grid points, <= QGRID_MAX_POINTS */
    int gsize;       /* elements per group, <= QGRID_MAX_GROUP */
    int bits;        /* bits of one element's level in a pattern code */
    int maxlev;      /* levels 0..maxlev */
    int nwant;       /* neighbour lists: points at this many (<= 3) smallest
                      * distinct distances */
    uint8_t lev[QGRID_MAX_POINTS][QGRID_MAX_GROUP]; /* levels of each point */
    int32_t *map;    /* per pattern code: the grid index, or -(offset into
                      * nb) - 1; INT32_MIN for a code with a level above
                      * maxlev (never produced) */
    uint16_t *nb;    /* per off-grid code: the count, then the grid indices
                      * by (distance, index) */
    int ok;          /* built; 0 after a failed allocation or a bad grid */
} qgrid;

/* Fill t from the shape fields (set by the caller) and lev: ngrid x gsize
 * levels in 0..maxlev, or a negative level for a grid that is not of the
 * expected kind (t->ok stays 0).  Called once (pthread_once). */
void qgrid_init(qgrid *t, const int *lev);

/* Levels of one group at inverse scale id: rounded nearest_int(0.5*(id*t -
 * 1)) clamped to 0..maxlev, and when the pattern is off the grid, the
 * neighbour minimising sum u*(s*q - t)^2 (first wins).  Writes the final
 * levels to L, returns the grid index; *on_grid says whether the rounded
 * pattern was a grid point. */
int qgrid_group(const qgrid *t, const float *tv, const float *u, float id, float s, int8_t *L,
                int *on_grid);

/* The trial-scale search over ngroups consecutive groups (n = ngroups *
 * gsize <= 32 elements): for is = lo..hi the inverse scale
 * id = (base + is*step)/amax, every group snapped at id (qgrid_group with
 * s = 1/id), scored by the least-squares gain (sum w t q)^2 / sum w q^2;
 * the best trial's levels go to L and its on-grid flags to on, and its
 * scale sum w t q / sum w q^2 is returned.  Without an accepted trial L,
 * on and `scale` are left as the caller set them. */
float qgrid_trials(const qgrid *t, int ngroups, const float *tv, const float *u, const float *w,
                   float base, float step, int lo, int hi, float amax, float scale, int8_t *L,
                   int *on);

/* The refinement after qgrid_trials: when scale > 0 and a group was off
 * the grid, snap again at 1/scale every group (all) or the off-grid ones
 * (!all) and refit the scale; returns it (unchanged otherwise). */
float qgrid_refit(const qgrid *t, int ngroups, const float *tv, const float *u, const float *w,
                  const int *on, int all, float scale, int8_t *L);

/* The grid index of a group's levels L (a grid point; 0 if not). */
int qgrid_index(const qgrid *t, const int8_t *L);

/* Weighted least-squares pieces of levels L over n elements:
 * sum w*t*q and sum w*q*q with q = 2L+1, in index order. */
void qgrid_sums(int n, const float *w, const float *tv, const int8_t *L, float *sumqx,
                float *sumq2);

/* Targets |x| and sign masks (bit i: element i negative) of n/8 8-groups.
 * With `parity` (IQ2_XXS, IQ2_XS, IQ3_XXS: the 8th sign is implied by even
 * parity) an odd count of negatives flips the element with the smallest
 * w*x^2, whose target becomes -|x|, and the mask keeps 7 bits. */
void qgrid_signs(int n, const float *x, const float *w, int parity, float *tv, uint8_t *signs);

#endif
