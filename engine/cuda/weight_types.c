/* weight_types.c: the CUDA backend's native weight types and the note about
 * conversions at upload (see weight_types.h). */
#include "engine/cuda/weight_types.h"

#include <string.h>

int cuda_type_native(int type)
{
    switch (type) {
    case GGML_TYPE_F32:
    case GGML_TYPE_F16:
    case GGML_TYPE_BF16:
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q2_0:
    case GGML_TYPE_IQ3_XXS:
        return 1;
    default:
        return cuda_type_block_tile(type); /* read from their ggml blocks (kernels/cuda/wblocks.cuh) */
    }
}

int cuda_type_block_tile(int type)
{
    switch (type) {
    case GGML_TYPE_Q4_1:
    case GGML_TYPE_Q5_0:
    case GGML_TYPE_Q5_1:
    case GGML_TYPE_IQ4_NL:
    case GGML_TYPE_Q2_K:
    case GGML_TYPE_Q3_K:
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K:
    case GGML_TYPE_Q6_K:
    case GGML_TYPE_IQ2_XXS:
    case GGML_TYPE_IQ2_XS:
    case GGML_TYPE_IQ2_S:
    case GGML_TYPE_IQ3_S:
    case GGML_TYPE_IQ4_XS:
        return 1;
    default:
        return 0;
    }
}

int cuda_mix_candidate(const int *types, const int64_t *rows, int n)
{
    if (!types || !rows || n < 2 || n > 4)
        return 0;
    int same = 1;
    for (int i = 0; i < n; i++) {
        if (!cuda_type_block_tile(types[i]) || rows[i] < 1 || (i + 1 < n && rows[i] % 16))
            return 0;
        same &= types[i] == types[0];
    }
    return !same;
}

void upload_note_add(upload_note *n, const char *name, int from, uint64_t file_bytes,
                     uint64_t card_bytes)
{
    if (from < 0 || from >= GGML_TYPE_COUNT)
        return;
    if (n->count[from] < UPLOAD_NOTE_NAMES)
        snprintf(n->names[from][n->count[from]], sizeof n->names[from][0], "%s",
                 name ? name : "?");
    n->count[from]++;
    n->file_bytes[from] += file_bytes;
    n->card_bytes[from] += card_bytes;
}

int upload_note_count(const upload_note *n)
{
    int total = 0;
    for (int t = 0; t < GGML_TYPE_COUNT; t++)
        total += n->count[t];
    return total;
}

void upload_note_print(const upload_note *n, FILE *f)
{
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        if (!n->count[t])
            continue;
        const char *tn = type_name(t);
        const double mf = n->file_bytes[t] / 1048576.0, mc = n->card_bytes[t] / 1048576.0;
        fprintf(f, "strata: %d %s tensor%s converted to F16 at upload (no %s kernel on the card): "
                   "%.1f MiB in the file -> %.1f MiB on the card (%+.1f MiB):",
                n->count[t], tn, n->count[t] == 1 ? "" : "s", tn, mf, mc, mc - mf);
        const int shown = n->count[t] < UPLOAD_NOTE_NAMES ? n->count[t] : UPLOAD_NOTE_NAMES;
        for (int i = 0; i < shown; i++)
            fprintf(f, "%s %s", i ? "," : "", n->names[t][i]);
        fprintf(f, "%s\n", n->count[t] > shown ? ", ..." : "");
    }
}
