/* One row times a constant matrix: y = act(a @ B + bias), a (k), B (k, n).
 *
 * Why not the GEMM (gemm.c) or the BLAS: a batch-1 MLP layer or linear model is one row,
 * where the tiled GEMM computes a whole MR-row tile (6.2 µs for 256 x 256, against
 * OpenBLAS's gemv at 3.4), and numpy's matmul adds its dispatch, a separate bias pass and
 * an activation pass (three calls of ~0.5 µs each on a tiny model's layer). Here one call
 * streams B once: B is held in panels of 64 columns, each [k][64] floats contiguous (zero
 * past the last column; onyxrt_cpu.native.one_row_product packs them), so a panel's four
 * accumulators run down k over one contiguous run of weights — 10-25% faster than rows
 * of B read a row length apart, once the weights no longer fit in L2 (an 8-layer
 * 256-wide MLP's 2 MiB: 2.8 against 3.1-3.6 µs a layer). The bias and the activation are
 * applied in registers. Each column is the sum over k in order, with fused multiply-adds,
 * as the GEMM's kernel computes it. */

#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif

#include "vec16.h"

#define GEMV_PANEL 64 /* columns per panel of B */
#define GEMV_VECTORS (GEMV_PANEL / 16) /* accumulators per panel */

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
    for (idx j0 = 0; j0 < n; j0 += GEMV_PANEL) {
        v16 acc[GEMV_VECTORS];
        for (int v = 0; v < GEMV_VECTORS; v++) {
            acc[v] = (v16){0};
        }
        const float *p = b + j0 * k; /* panel j0 / GEMV_PANEL: k rows of GEMV_PANEL floats */
        for (idx q = 0; q < k; q++, p += GEMV_PANEL) {
            const float s = a[q];
            for (int v = 0; v < GEMV_VECTORS; v++) {
                acc[v] += s * load16(p + 16 * v);
            }
        }
        if (j0 + GEMV_PANEL <= n) {
            for (int v = 0; v < GEMV_VECTORS; v++) {
                store16(y + j0 + 16 * v, finish_row16(acc[v], bias ? bias + j0 + 16 * v : NULL, act, p0, p1));
            }
        } else { /* the last panel's columns past n are zero weights: not stored */
            float tail[GEMV_PANEL];
            for (int v = 0; v < GEMV_VECTORS; v++) {
                store16(tail + 16 * v, acc[v]);
            }
            for (idx j = 0; j < n - j0; j++) {
                y[j0 + j] = activate1(bias ? tail[j] + bias[j0 + j] : tail[j], act, p0, p1);
            }
        }
    }
}

/* Floats of B (k x n) in panels. */
static idx
gemv_panel_floats(idx k, idx n)
{
    return (n + GEMV_PANEL - 1) / GEMV_PANEL * GEMV_PANEL * k;
}

enum { GEMV_A, GEMV_B, GEMV_Y, GEMV_BIAS, GEMV_VIEWS };

/* The buffers of a one-row product: a (k), b (k x n in panels), the written output y (n,
 * named `yname` in errors), bias (n) or None. 0, or -1 with an exception and nothing held. */
static int
get_gemv_views(PyObject *ao, PyObject *bo, PyObject *yo, PyObject *biaso, idx k, idx n,
               const char *yname, Py_buffer v[GEMV_VIEWS])
{
    memset(v, 0, sizeof(Py_buffer) * GEMV_VIEWS);
    if (get_f32(ao, &v[GEMV_A], 0, k, "a") < 0 || get_f32(bo, &v[GEMV_B], 0, gemv_panel_floats(k, n), "b") < 0 ||
        get_f32(yo, &v[GEMV_Y], 1, n, yname) < 0 || get_optional_f32(biaso, &v[GEMV_BIAS], n, "bias") < 0) {
        release_all(v, GEMV_VIEWS);
        return -1;
    }
    return 0;
}

/* gemv(a, b, y, k, n[, bias, act, p0, p1]): float32 a (k), b (k, n) in panels of 64
 * columns (gemv_panel_floats of them), y (n) written; bias (n) or None. */
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
    Py_buffer v[GEMV_VIEWS];
    if (get_gemv_views(ao, bo, yo, biaso, k, n, "y", v) < 0) {
        return NULL;
    }
    /* A layer of a batch-1 model: microseconds, not worth releasing the GIL for. */
    gemv_row((const float *)v[GEMV_A].buf, (const float *)v[GEMV_B].buf, (float *)v[GEMV_Y].buf, k, n,
             (const float *)v[GEMV_BIAS].buf, act, p0, p1);
    release_all(v, GEMV_VIEWS);
    Py_RETURN_NONE;
}

/* classify_row(a, b, scores, k, n, bias, post) -> class index: a linear classifier on one
 * row in one call: scores = a @ B + bias (gemv_row), the arg-max as onnxruntime scans it
 * (score > best, the first column the start: a NaN never wins, a NaN first column is never
 * beaten), then post-transform 0 (none) or 1 (softmax, onyxrt_softmax: what the Python
 * path's compiled softmax computes) in place. A one-sample LinearClassifier was ~4 us of
 * numpy and Python calls around the product. */
PyObject *
py_classify_row(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *ao, *bo, *so, *biaso;
    idx k, n;
    int post;
    if (!PyArg_ParseTuple(args, "OOOnnOi", &ao, &bo, &so, &k, &n, &biaso, &post)) {
        return NULL;
    }
    if (check_positive("k", k, 1) < 0 || check_positive("n", n, 1) < 0) {
        return NULL;
    }
    if (post != 0 && post != 1) {
        PyErr_SetString(PyExc_ValueError, "classify_row: post must be 0 (none) or 1 (softmax)");
        return NULL;
    }
    Py_buffer v[GEMV_VIEWS];
    if (get_gemv_views(ao, bo, so, biaso, k, n, "scores", v) < 0) {
        return NULL;
    }
    float *scores = (float *)v[GEMV_Y].buf;
    gemv_row((const float *)v[GEMV_A].buf, (const float *)v[GEMV_B].buf, scores, k, n,
             (const float *)v[GEMV_BIAS].buf, ACT_NONE, 0.0f, 0.0f);
    idx best = 0;
    for (idx j = 1; j < n; j++) {
        if (scores[j] > scores[best]) {
            best = j;
        }
    }
    if (post == 1) {
        onyxrt_softmax(scores, scores, 1, n);
    }
    release_all(v, GEMV_VIEWS);
    return PyLong_FromSsize_t(best);
}

