/*
 * 16-float vectors through GCC/Clang vector extensions, for the register-tiled kernels
 * (gemm.c, nchwc.c): the types, a select, and the epilogue's activations on a vector.
 * On AVX-512 a v16 is one register; with AVX2 the compiler splits it in two.
 */
#ifndef ONYXRT_VEC16_H
#define ONYXRT_VEC16_H

#include "native.h"

typedef float v16 __attribute__((vector_size(64), aligned(4)));
typedef int32_t i16v __attribute__((vector_size(64)));
#if defined(__GNUC__) && !defined(__clang__)
/* The helpers pass vectors by value; they are always inlined into the kernels' clones,
 * so no call with the baseline ABI is ever made. */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

/* mask ? a : b for float vectors, through their bits (C has no vector ?:). */
static inline __attribute__((always_inline)) v16
select16(i16v mask, v16 a, v16 b)
{
    return (v16)((mask & (i16v)a) | (~mask & (i16v)b));
}

/* The activation `act` (ACT_*) on a vector, as onyxrt_epilogue computes it. */
static inline __attribute__((always_inline)) v16
activate16(v16 v, int act, float p0, float p1)
{
    const v16 zero = {0};
    switch (act) {
    case ACT_RELU: /* (v < 0) ? 0 : v: NaN stays NaN */
        return select16(v < zero, zero, v);
    case ACT_CLIP: {
        const v16 lo = zero + p0, hi = zero + p1;
        v = select16(v < lo, lo, v);
        return select16(v > hi, hi, v);
    }
    case ACT_LEAKY:
        return select16(v < zero, v * p0, v);
    default:
        return v;
    }
}

#endif /* ONYXRT_VEC16_H */
