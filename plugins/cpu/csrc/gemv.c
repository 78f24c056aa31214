/* One row times a constant matrix: y = act(a @ B + bias), a (k), B (k, n) row-major.
 *
 * Why not the GEMM (gemm.c) or the BLAS: a batch-1 MLP layer or linear model is one row,
 * where the tiled GEMM computes a whole MR-row tile (6.2 µs for 256 x 256, against
 * OpenBLAS's gemv at 3.4), and numpy's matmul adds its dispatch, a separate bias pass and
 * an activation pass (three calls of ~0.5 µs each on a tiny model's layer). Here one call
 * streams B once: for each block of 128 columns, eight accumulators (enough independent
 * fused multiply-adds to hide their latency) run down k, then the bias and the activation
 * are applied in registers. Each column is the sum over k in order, with fused
 * multiply-adds, as the GEMM's kernel computes it. */

#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif

#include "vec16.h"

#define GEMV_VECTORS 8 /* accumulators per block of columns: 128 columns */

static inline __attribute__((always_inline)) v16
load16(const float *p)
{
    return *(const v16 *)p; /* v16 is 4-byte aligned: any float address */
}

static inline __attribute__((always_inline)) void
store16(float *p, v16 v)
{
    *(v16 *)p = v;
}

static inline __attribute__((always_inline)) v16
finish_row16(v16 v, const float *bias, int act, float p0, float p1)
{
    if (bias) {
        v += load16(bias);
    }
    return activate16(v, act, p0, p1);
}

static float
activate1(float v, int act, float p0, float p1)
{
    switch (act) {
    case ACT_RELU:
        return v < 0.0f ? 0.0f : v;
    case ACT_CLIP:
        v = v < p0 ? p0 : v;
        return v > p1 ? p1 : v;
    case ACT_LEAKY:
        return v < 0.0f ? v * p0 : v;
    default:
        return v;
    }
}

MULTIVERSION static void
gemv_row(const float *restrict a, const float *restrict b, float *restrict y, idx k, idx n,
         const float *restrict bias, int act, float p0, float p1)
{
    idx j = 0;
    for (; j + 16 * GEMV_VECTORS <= n; j += 16 * GEMV_VECTORS) {
        v16 acc[GEMV_VECTORS];
        for (int v = 0; v < GEMV_VECTORS; v++) {
            acc[v] = (v16){0};
        }
        const float *col = b + j;
        for (idx p = 0; p < k; p++) {
            const float s = a[p];
            for (int v = 0; v < GEMV_VECTORS; v++) {
                acc[v] += s * load16(col + 16 * v);
            }
            col += n;
        }
        for (int v = 0; v < GEMV_VECTORS; v++) {
            store16(y + j + 16 * v, finish_row16(acc[v], bias ? bias + j + 16 * v : NULL, act, p0, p1));
        }
    }
    for (; j + 16 <= n; j += 16) {
        v16 acc = {0};
        const float *col = b + j;
        for (idx p = 0; p < k; p++) {
            acc += a[p] * load16(col);
            col += n;
        }
        store16(y + j, finish_row16(acc, bias ? bias + j : NULL, act, p0, p1));
    }
    for (; j < n; j++) {
        float acc = 0.0f;
        for (idx p = 0; p < k; p++) {
            acc += a[p] * b[p * n + j];
        }
        y[j] = activate1(bias ? acc + bias[j] : acc, act, p0, p1);
    }
}

/* gemv(a, b, y, k, n[, bias, act, p0, p1]): float32 a (k), b (k, n) C-contiguous, y (n)
 * written; bias (n) or None. */
PyObject *
py_gemv(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *ao, *bo, *yo, *biaso = Py_None;
    idx k, n;
    int act = ACT_NONE;
    float p0 = 0.0f, p1 = 0.0f;
    if (!PyArg_ParseTuple(args, "OOOnn|Oiff", &ao, &bo, &yo, &k, &n, &biaso, &act, &p0, &p1)) {
        return NULL;
    }
    if (check_activation(act) < 0 || check_positive("k", k, 1) < 0 || check_positive("n", n, 1) < 0) {
        return NULL;
    }
    enum { A, B, Y, BIAS, VIEWS };
    Py_buffer v[VIEWS];
    memset(v, 0, sizeof(v));
    if (get_f32(ao, &v[A], 0, k, "a") < 0 || get_f32(bo, &v[B], 0, k * n, "b") < 0 ||
        get_f32(yo, &v[Y], 1, n, "y") < 0 || get_optional_f32(biaso, &v[BIAS], n, "bias") < 0) {
        release_all(v, VIEWS);
        return NULL;
    }
    /* A layer of a batch-1 model: microseconds, not worth releasing the GIL for. */
    gemv_row((const float *)v[A].buf, (const float *)v[B].buf, (float *)v[Y].buf, k, n,
             (const float *)v[BIAS].buf, act, p0, p1);
    release_all(v, VIEWS);
    Py_RETURN_NONE;
}
