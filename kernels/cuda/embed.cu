/* embed.cu: embedding rows, out[i][0..cols) = row tokens[i] of a table in
 * the device layout (wtile.cuh), as f32, bit-identical to cpu_embed.
 *
 * Tiny work (a few KiB per token), so plainness wins: one block per token,
 * one thread per element, each element found in its tile by the layout
 * rules and scaled with the exact float expression of the CPU decoder
 * (model/quant*.c): e.g. IQ3_XXS ((d * (0.5 + ls)) * 0.5) * mag * sign. */
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/wtile.cuh"

using namespace wt;

__device__ __forceinline__ uint32_t rd32(const uint8_t *p) { return *(const uint32_t *)p; }
__device__ __forceinline__ float rdh(const uint8_t *p) { return h2f(*(const uint16_t *)p); }

/* Element kk (0..KT-1) of row (g + 8h) of a tile. */
template <int TYPE> __device__ float embed_elem(const uint8_t *tile, int g, int h, int kk);

template <> __device__ float embed_elem<GGML_TYPE_IQ3_XXS>(const uint8_t *tile, int g, int h, int kk)
{
    const int sb = kk >> 5, t = (kk >> 3) & 3, k8 = kk & 7, lane = 4 * g + t;
    const int idx = tile[32 * lane + 16 * h + 4 * (sb >> 1) + 2 * (sb & 1) + (k8 >> 2)];
    const uint32_t mag = (c_iq3_grid[idx] >> (8 * (k8 & 3))) & 0xffu;
    const uint32_t field = (rd32(tile + 1024 + 16 * lane + 4 * (2 * h + (sb >> 2))) >> (7 * (sb & 3))) & 127u;
    const uint32_t sg = field | ((__popc(field) & 1u) << 7);
    /* sub-block sb's scale sits with lane 4g + sb/2, word (h, sb & 1) */
    const uint32_t ls = rd32(tile + 1024 + 16 * (4 * g + (sb >> 1)) + 4 * (2 * h + (sb & 1))) >> 28;
    const float d = rdh(tile + 1536 + 4 * g + 2 * h);
    const float db = __fmul_rn(__fmul_rn(d, __fadd_rn(0.5f, (float)ls)), 0.5f);
    return __fmul_rn(__fmul_rn(db, (float)mag), (sg >> k8) & 1 ? -1.f : 1.f);
}

template <> __device__ float embed_elem<GGML_TYPE_Q2_0>(const uint8_t *tile, int g, int h, int kk)
{
    const int b = kk >> 6, e = kk & 63, chunk = e >> 5, t = (e >> 3) & 3, i8 = e & 7;
    const uint8_t byte = tile[16 * (4 * g + t) + 4 * (2 * b + h) + (i8 & 3)];
    const int c = (byte >> (4 * chunk + 2 * (i8 >> 2))) & 3;
    return __fmul_rn((float)(c - 1), rdh(tile + 512 + 8 * g + 2 * (2 * b + h)));
}

template <> __device__ float embed_elem<GGML_TYPE_Q4_0>(const uint8_t *tile, int g, int h, int kk)
{
    const int b = kk >> 5, e = kk & 31, t = e >> 3, i8 = e & 7;
    const uint8_t byte = tile[16 * (4 * g + t) + 4 * (2 * b + h) + (i8 & 3)];
    const int q = (i8 < 4 ? byte & 15 : byte >> 4) - 8;
    return __fmul_rn((float)q, rdh(tile + 512 + 8 * g + 2 * (2 * b + h)));
}

template <> __device__ float embed_elem<GGML_TYPE_Q8_0>(const uint8_t *tile, int g, int h, int kk)
{
    const int t = kk >> 3, i8 = kk & 7;
    const int8_t q = (int8_t)tile[16 * (4 * g + t) + 4 * (2 * (i8 >> 2) + h) + (i8 & 3)];
    return __fmul_rn((float)q, rdh(tile + 512 + 4 * g + 2 * h));
}

template <int TYPE>
__global__ void __launch_bounds__(256) embed_kernel(const uint8_t *table, int rows, int cols, int ntk,
                                                    const int32_t *tokens, float *out)
{
    const int id = __ldg(tokens + blockIdx.x);
    float *o = out + (size_t)blockIdx.x * cols;
    if (id < 0 || id >= rows) {
        for (int e = threadIdx.x; e < cols; e += blockDim.x)
            o[e] = __int_as_float(0x7fc00000);
        return;
    }
    if (TYPE == GGML_TYPE_F32 || TYPE == GGML_TYPE_F16 || TYPE == GGML_TYPE_BF16) {
        for (int e = threadIdx.x; e < cols; e += blockDim.x)
            o[e] = TYPE == GGML_TYPE_F32  ? __ldg((const float *)table + (size_t)id * cols + e)
                   : TYPE == GGML_TYPE_F16 ? h2f(__ldg((const unsigned short *)table + (size_t)id * cols + e))
                                           : __uint_as_float((uint32_t)__ldg((const unsigned short *)table +
                                                                             (size_t)id * cols + e)
                                                             << 16);
        return;
    }
    constexpr Geo gm = geo(TYPE);
    const int R = id >> 4, g = id & 7, h = (id >> 3) & 1;
    for (int e = threadIdx.x; e < cols; e += blockDim.x) {
        const int T = e / gm.kt;
        o[e] = embed_elem<TYPE>(table + ((size_t)R * ntk + T) * gm.tile, g, h, e - T * gm.kt);
    }
}

/* F32/F16/BF16 never reach embed_elem; give the templates a body to instantiate */
template <> __device__ float embed_elem<GGML_TYPE_F32>(const uint8_t *, int, int, int) { return 0.f; }
template <> __device__ float embed_elem<GGML_TYPE_F16>(const uint8_t *, int, int, int) { return 0.f; }
template <> __device__ float embed_elem<GGML_TYPE_BF16>(const uint8_t *, int, int, int) { return 0.f; }

/* Block tiles (wblocks.cuh): one thread per 8 elements, the row chunk's
 * decoder, which is the CPU decoder's float expression. */
template <int TYPE>
__global__ void __launch_bounds__(256) embed_blk_kernel(const uint8_t *table, int rows, int cols, int ntk,
                                                        const int32_t *tokens, float *out)
{
    constexpr int RB = wb::rb(TYPE);
    const int id = __ldg(tokens + blockIdx.x);
    float *o = out + (size_t)blockIdx.x * cols;
    if (id < 0 || id >= rows) {
        for (int e = threadIdx.x; e < cols; e += blockDim.x)
            o[e] = __int_as_float(0x7fc00000);
        return;
    }
    for (int e = 8 * threadIdx.x; e < cols; e += 8 * blockDim.x) {
        const int T = e >> 8;
        float v[8];
        wb::dec8<TYPE>(table + (((size_t)(id >> 4) * ntk + T) * 16 + (id & 15)) * RB, e & 255, v);
#pragma unroll
        for (int i = 0; i < 8; i++)
            o[e + i] = v[i];
    }
}

extern "C" int cuda_embed(int type, const void *table, int64_t rows, int64_t cols, const int32_t *tokens, int n_tok,
                          float *out, cudaStream_t stream, strata_error *err)
{
    if (!table || !tokens || !out || n_tok < 0)
        return strata_err(err, STRATA_E_ARG, "cuda_embed: bad arguments");
    if (!cuda_weight_bytes(type, rows, cols))
        return strata_err(err, STRATA_E_UNSUPPORTED, "cuda_embed: %s %lld x %lld not supported", type_name(type),
                          (long long)rows, (long long)cols);
    if (n_tok == 0)
        return 0;
    const int ntk = (int)((cols + geo(type).kt - 1) / geo(type).kt);
    const uint8_t *t = (const uint8_t *)table;
    switch (type) {
    case GGML_TYPE_IQ3_XXS: embed_kernel<GGML_TYPE_IQ3_XXS><<<n_tok, 256, 0, stream>>>(t, (int)rows, (int)cols, ntk, tokens, out); break;
    case GGML_TYPE_Q2_0: embed_kernel<GGML_TYPE_Q2_0><<<n_tok, 256, 0, stream>>>(t, (int)rows, (int)cols, ntk, tokens, out); break;
    case GGML_TYPE_Q4_0: embed_kernel<GGML_TYPE_Q4_0><<<n_tok, 256, 0, stream>>>(t, (int)rows, (int)cols, ntk, tokens, out); break;
    case GGML_TYPE_Q8_0: embed_kernel<GGML_TYPE_Q8_0><<<n_tok, 256, 0, stream>>>(t, (int)rows, (int)cols, ntk, tokens, out); break;
    case GGML_TYPE_F16: embed_kernel<GGML_TYPE_F16><<<n_tok, 256, 0, stream>>>(t, (int)rows, (int)cols, ntk, tokens, out); break;
    case GGML_TYPE_F32: embed_kernel<GGML_TYPE_F32><<<n_tok, 256, 0, stream>>>(t, (int)rows, (int)cols, ntk, tokens, out); break;
    case GGML_TYPE_BF16: embed_kernel<GGML_TYPE_BF16><<<n_tok, 256, 0, stream>>>(t, (int)rows, (int)cols, ntk, tokens, out); break;
#define EMBED_CASE(T)                                                                                    \
    case T: embed_blk_kernel<T><<<n_tok, 256, 0, stream>>>(t, (int)rows, (int)cols, ntk, tokens, out); break;
        WB_FOR_EACH(EMBED_CASE)
#undef EMBED_CASE
    default: return strata_err(err, STRATA_E_UNSUPPORTED, "cuda_embed: type %s", type_name(type));
    }
    CUDA_CHECK_LAUNCH(err, "embed_kernel");
    return 0;
}
