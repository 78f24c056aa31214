/* Sigmoid and Tanh as onnxruntime's CPU provider computes them: MLAS's rational
 * approximations in float32, every multiply-add fused (fmaf, what MLAS's FMA kernels
 * issue), so that results are bit-identical to onnxruntime's — quantized models, which
 * turn a last-bit difference into a whole quantization step now and then, then agree with
 * it exactly. The constants are MLAS's (onnxruntime/core/mlas/lib/logistic.cpp, tanh.cpp). */

#include <math.h>

#include "native.h"

/* MLAS's max/min: the second operand when either is NaN, so NaN propagates (and, unlike
 * fmaxf/fminf, the loops vectorize). */
#define CLAMP(v, lo, hi) ((v) < (lo) ? (lo) : ((v) > (hi) ? (hi) : (v)))

MULTIVERSION void
onyxrt_logistic(const float *x, float *y, idx n)
{
    for (idx i = 0; i < n; i++) {
        const float v = CLAMP(x[i], -18.0f, 18.0f);
        const float v2 = v * v;
        float p = fmaf(v2, 4.37031012579801e-11f, 1.15627324459942e-07f);
        p = fmaf(p, v2, 6.08574864600143e-05f);
        p = fmaf(p, v2, 8.51377133304701e-03f);
        p = fmaf(p, v2, 2.48287947061529e-01f);
        p = p * v;
        float q = fmaf(v2, 6.10247389755681e-13f, 5.76102136993427e-09f);
        q = fmaf(q, v2, 6.29106785017040e-06f);
        q = fmaf(q, v2, 1.70198817374094e-03f);
        q = fmaf(q, v2, 1.16817656904453e-01f);
        q = fmaf(q, v2, 9.93151921023180e-01f);
        /* Clamped below only, as MLAS: 0 for large negative x, but 1.0000001 near 17.8. */
        const float r = p / q + 0.5f;
        y[i] = r < 0.0f ? 0.0f : r;
    }
}

MULTIVERSION void
onyxrt_tanh(const float *x, float *y, idx n)
{
    /* No clamp of the result: onnxruntime's tanh reaches 1.0000001 near |x| = 9. */
    for (idx i = 0; i < n; i++) {
        const float v = CLAMP(x[i], -9.0f, 9.0f);
        const float v2 = v * v;
        float p = fmaf(v2, -2.76076847742355e-16f, 2.00018790482477e-13f);
        p = fmaf(p, v2, -8.60467152213735e-11f);
        p = fmaf(p, v2, 5.12229709037114e-08f);
        p = fmaf(p, v2, 1.48572235717979e-05f);
        p = fmaf(p, v2, 6.37261928875436e-04f);
        p = fmaf(p, v2, 4.89352455891786e-03f);
        p = p * v;
        float q = fmaf(v2, 1.19825839466702e-06f, 1.18534705686654e-04f);
        q = fmaf(q, v2, 2.26843463243900e-03f);
        q = fmaf(q, v2, 4.89352518554385e-03f);
        y[i] = p / q;
    }
}

static void
unary_range(void *ctx, idx begin, idx end)
{
    const RowsCall *c = (const RowsCall *)ctx;  /* n: 1 for tanh, 0 for the sigmoid */
    (c->n ? onyxrt_tanh : onyxrt_logistic)(c->x + begin, c->y + begin, end - begin);
}

PyObject *
py_logistic_tanh(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *yo;
    int tanh_;
    if (!PyArg_ParseTuple(args, "OOp", &xo, &yo, &tanh_)) {
        return NULL;
    }
    return elementwise_f32(xo, yo, unary_range, tanh_ ? 1 : 0);
}
