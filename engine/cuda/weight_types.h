/* weight_types.h: which weight types the CUDA backend reads natively, and
 * the note the load prints about the tensors it converts instead.
 *
 * Plain C, built with or without CUDA, so `inspect` can say what a card
 * would do with a file on a machine without one.  The native list mirrors
 * the layout table of kernels/cuda/wtile.cuh (wt::geo); the GPU suite
 * cuda_matvec checks that the two agree for every type id. */
#ifndef STRATA_WEIGHT_TYPES_H
#define STRATA_WEIGHT_TYPES_H

#include <stdint.h>
#include <stdio.h>

#include "model/quant.h"

/* 1 if the CUDA kernels read `type` as it is in the file; 0 if the upload
 * converts it to F16 (or, for a type strata cannot decode, refuses it). */
int cuda_type_native(int type);

/* 1 if `type` is one the card reads as block tiles (kernels/cuda/wblocks.cuh:
 * Q4_1 Q5_0 Q5_1 IQ4_NL, the K-quants, IQ2_XXS IQ2_XS IQ2_S IQ3_S IQ4_XS). */
int cuda_type_block_tile(int type);
/* 1 if matrices of these types and rows (one width, n parts, stacked in
 * this order) form a mixed stack on the card (cuda_matmul_mix): 2..4
 * parts, not all of one type (that is a plain stack), every type a block
 * tile, every part but the last a whole number of 16-row tiles.  The card's
 * own check (cuda_mix_supported) adds only its shared-memory limit; the
 * suite cuda_types holds the two against each other. */
int cuda_mix_candidate(const int *types, const int64_t *rows, int n);

/* Conversions at upload, per source type: how many tensors, their bytes in
 * the file and on the card, and the first few names. */
#define UPLOAD_NOTE_NAMES 4
typedef struct upload_note {
    int count[GGML_TYPE_COUNT];
    uint64_t file_bytes[GGML_TYPE_COUNT], card_bytes[GGML_TYPE_COUNT];
    char names[GGML_TYPE_COUNT][UPLOAD_NOTE_NAMES][64];    /* cut at 63 bytes */
} upload_note;

/* Record that tensor `name` of type `from` (file_bytes in the file) went to
 * the card as F16 in card_bytes. */
void upload_note_add(upload_note *n, const char *name, int from, uint64_t file_bytes,
                     uint64_t card_bytes);
/* Total tensors recorded. */
int upload_note_count(const upload_note *n);
/* One line per source type, e.g.
 *   strata: 96 Q4_K tensors converted to F16 at upload (no Q4_K kernel on the
 *   card): 1296.0 MiB in the file -> 4608.0 MiB on the card (+3312.0 MiB):
 *   blk.0.attn_q.weight, blk.0.attn_k.weight, blk.0.attn_v.weight, ...
 * Nothing when none was converted. */
void upload_note_print(const upload_note *n, FILE *f);

#endif
