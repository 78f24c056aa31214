/* Requantization of int32 accumulators into 8-bit outputs, shared by the int8 GEMM's
 * epilogue (qgemm.c) and the quantized convolutions (qconv.c). The steps are those of the
 * reference kernels (onyxrt_ops.quantization: QLinearConv, QLinearMatMul), so results are
 * bit-identical to them:
 *
 *     y = clamp(rint(float(double(t) * scale) / y_scale) + y_zero_point, lo, hi)
 *
 * with `scale` the float32 product x_scale * w_scale widened to double, the division in
 * float32 and rint rounding half to even. x86-64 with AVX-512 (F, BW, DQ, VL) only: the
 * callers run where the CPU has AVX-512 VNNI, which implies them. */
#ifndef ONYXRT_QREQUANT_H
#define ONYXRT_QREQUANT_H

#include "native.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX512_REQUANT __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
#define AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

/* One row's parameters: its scale, and y's. */
typedef struct {
    double rs;
    float ys;
    int32_t zy, lo, hi;
} Requant;

/* Sixteen accumulators t requantized to int32 values in [lo, hi]. */
AVX512_REQUANT static inline __m512i
requant16(__m512i t, const Requant *r)
{
    __m512 f;
    /* |t| < 2**24 (nearly always): t is exact in float32 and the float32 product of t and
     * the scale (a float32 value) is the double product rounded once — the same value */
    const __m512i limit = _mm512_set1_epi32(1 << 24);
    if (_mm512_cmpge_epu32_mask(_mm512_abs_epi32(t), limit) == 0) {
        f = _mm512_mul_ps(_mm512_cvtepi32_ps(t), _mm512_set1_ps((float)r->rs));
    } else {
        const __m512d vrs = _mm512_set1_pd(r->rs);
        const __m512d dlo = _mm512_mul_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(t)), vrs);
        const __m512d dhi = _mm512_mul_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(t, 1)), vrs);
        f = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(dlo)), _mm512_cvtpd_ps(dhi), 1);
    }
    f = _mm512_roundscale_ps(_mm512_div_ps(f, _mm512_set1_ps(r->ys)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* |q| beyond 2**30 saturates either way; the clamp keeps the conversion exact */
    f = _mm512_min_ps(_mm512_max_ps(f, _mm512_set1_ps(-1073741824.0f)), _mm512_set1_ps(1073741824.0f));
    const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(f), _mm512_set1_epi32(r->zy));
    return _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(r->lo)), _mm512_set1_epi32(r->hi));
}

#endif

/* The int8 GEMM's requantizing epilogue (qgemm_run with one): row i of the product,
 * t = raw + row_add[i] - row_za[i] * colsum[column], is requantized with row_scale[i] and
 * stored as bytes at y + i * ldy, instead of the int32 sums — or, with y32 set (ConvInteger),
 * t itself, the exact sum of centered products, stored as int32 at y32 + i * ldy. */
typedef struct QgemmRequant {
    const int32_t *row_add, *row_za, *colsum;
    const double *row_scale;
    float ys;
    int32_t zy, lo, hi;
    uint8_t *y;
    idx ldy;
    int32_t *y32;
} QgemmRequant;

/* The int8 GEMM's float epilogue (MatMulIntegerToFloat, DynamicQuantizeMatMul): column j
 * of row i, t = raw - col_sub[j] - row_sum[i] * col_zb[j] (the zero points' terms, modulo
 * 2**32 like the sums; row_sum NULL when B's zero points are all 0), is stored as
 * float32(t) * scale[j] (scale[0] when !scale_per_col) + bias[j] (bias may be NULL) at
 * y + i * ldy + j: the float steps of MLAS's output processor and of the library. */
typedef struct QgemmFloat {
    const int32_t *col_sub, *row_sum, *col_zb;
    const float *scale, *bias;
    int scale_per_col;
    float *y;
    idx ldy;
} QgemmFloat;


#endif
