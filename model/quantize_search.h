/* quantize_search.h: the scale searches the K- and IQ-quantizers share
 * (model/quantize_k.c, quantize_iq2.c; definitions in quantize_search.c).
 *
 * Internal to model/.  Each is ggml's search restated so that the floats,
 * and therefore the chosen codes, come out the same: every sum runs in
 * index order, a*b*c is (a*b)*c, comparisons are strict and the first
 * candidate wins ties.  doc/quant.md ("Quantizers") says what each one
 * optimises. */
#ifndef STRATA_QUANTIZE_SEARCH_H
#define STRATA_QUANTIZE_SEARCH_H

#include <stdint.h>

/* Codes 0..nmax with a scale and a non-negative min, x ~ scale*c - min,
 * minimising sum w*|e| (mad) or sum w*e^2.  The starting fit maps
 * [min(x,0), max x] onto 0..nmax; then nstep+1 stretched inverse scales
 * (nmax + rmin + k*rdelta)/(max - min) are each refitted by weighted least
 * squares (min clamped to <= 0).  Returns the scale, *the_min = -min. */
float qs_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L,
                   float *the_min, float rmin, float rdelta, int nstep, int mad);

/* Codes 0..nmax of mostly non-negative values with one positive scale
 * (used for the scales of scales).  Nine inverse scales around nmax/max,
 * then up to five passes of moving single codes while that raises
 * (sum w x l)^2 / sum w l^2.  L is bytes: a negative rounded value wraps
 * (-1 -> 255), as in ggml, and later steps read the wrapped value.
 * Returns sum w x l / sum w l^2 (0 when all x <= 1e-15). */
float qs_positive(int n, int nmax, const float *x, uint8_t *L, const float *w);

/* Signed codes -nmax..nmax-1, stored as L = code + nmax, one scale of
 * either sign: the value of largest magnitude maps to -nmax, then 18 more
 * inverse scales -(nmax + 0.1k)/vmax are tried, the best
 * (sum w x l)^2 / sum w l^2 wins.  Returns the least-squares scale. */
float qs_signed(int n, int nmax, const float *x, int8_t *L, const float *w);

/* Q3_K's unweighted variant: start as qs_signed's first candidate with
 * w = x^2, then up to five passes of moving single codes.  L = code + nmax. */
float qs_signed_refine(int n, int nmax, const float *x, int8_t *L);

/* Index of the nearest entry of an ascending 16-entry table; a value
 * exactly between two entries goes to the upper one. */
int qs_nearest16(const int8_t *table, float v);

#endif
