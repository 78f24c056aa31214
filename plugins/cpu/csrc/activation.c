/* GELU (erf and tanh forms); Softmax is in softmax.c. */

#include "native.h"


MULTIVERSION void
onyxrt_gelu_erf(const float *x, float *y, idx n, const float *coeffs, float clamp,
                float t_scale, float scale)
{
    /* y = x * (0.5 + 0.5 * erf(x / sqrt 2)), erf(u) = u * q(2 u^2 / clamp^2 - 1) with |u|
     * clamped and t_scale = 2 / clamp^2: the polynomial and operations of erf_float32.
     * The polynomial runs in registers, its loop unrolled so that the loop over the
     * elements vectorizes (one pass over x; a loop per coefficient over a block of
     * temporaries, as before, streamed them through L1 eighteen times: 2x slower). */
    float c[ERF_COEFFS];
    for (int k = 0; k < ERF_COEFFS; k++) {
        c[k] = coeffs[k];
    }
    for (idx i = 0; i < n; i++) {
        const float xi = x[i];
        float u = fabsf(xi * scale);
        const float a = u < clamp ? u : clamp; /* NaN -> clamp; the final * x gives NaN */
        const float t = a * a * t_scale - 1.0f;
        float acc = c[ERF_COEFFS - 1];
#pragma GCC unroll 32
        for (int k = ERF_COEFFS - 2; k >= 0; k--) {
            acc = acc * t + c[k];
        }
        const float e = copysignf(acc * a, xi);
        y[i] = (e * 0.5f + 0.5f) * xi;
    }
}

/* erf_float32 itself: erf(x) = x-signed |x| q(2 |x|^2 / clamp^2 - 1), |x| clamped (NaN
 * stays NaN, as under np.minimum), every operation erf_float32's in its order, so the
 * same bits; its numpy form makes ~40 calls, which a small tensor pays in full. */
MULTIVERSION static void
onyxrt_erf32(const float *x, float *y, idx n, const float *coeffs, float clamp, float t_scale)
{
    float c[ERF_COEFFS];
    for (int k = 0; k < ERF_COEFFS; k++) {
        c[k] = coeffs[k];
    }
    for (idx i = 0; i < n; i++) {
        const float xi = x[i];
        const float u = fabsf(xi);
        const float a = u > clamp ? clamp : u; /* NaN stays NaN */
        const float t = a * a * t_scale - 1.0f;
        float acc = c[ERF_COEFFS - 1];
#pragma GCC unroll 32
        for (int k = ERF_COEFFS - 2; k >= 0; k--) {
            acc = acc * t + c[k];
        }
        y[i] = copysignf(acc * a, xi);
    }
}

typedef struct {
    const float *x;
    float *y;
    const float *coeffs;
    float clamp, t_scale, scale;
} GeluErf;

static void
gelu_erf_range(void *ctx, idx begin, idx end)
{
    const GeluErf *c = (const GeluErf *)ctx;
    onyxrt_gelu_erf(c->x + begin, c->y + begin, end - begin, c->coeffs, c->clamp, c->t_scale,
                    c->scale);
}

static void
erf32_range(void *ctx, idx begin, idx end)
{
    const GeluErf *c = (const GeluErf *)ctx;
    onyxrt_erf32(c->x + begin, c->y + begin, end - begin, c->coeffs, c->clamp, c->t_scale);
}

/* views[0] = x (float32, read), views[1] = out (float32, as many, written); n their
 * length. -1 with the error set (and the views released) when they do not qualify. */
static int
x_and_out(PyObject *xo, PyObject *yo, Py_buffer views[2], idx *n)
{
    memset(views, 0, 2 * sizeof(Py_buffer));
    if (get_f32(xo, &views[0], 0, 0, "x") < 0) {
        release_all(views, 2);
        return -1;
    }
    *n = views[0].len / 4;
    if (get_f32(yo, &views[1], 1, *n, "out") < 0) {
        release_all(views, 2);
        return -1;
    }
    return 0;
}

/* The polynomial over x into out: GELU, or (erf_only) erf itself. */
static PyObject *
run_erf_polynomial(PyObject *xo, PyObject *yo, PyObject *co, float clamp, float t_scale, float scale,
                   int erf_only)
{
    enum { X, Y, C, VIEWS };
    Py_buffer views[VIEWS];
    idx n;
    memset(views, 0, sizeof(views));
    if (x_and_out(xo, yo, views, &n) < 0) {
        return NULL;
    }
    if (get_f32(co, &views[C], 0, ERF_COEFFS, "coefficients") < 0) {
        release_all(views, VIEWS);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    GeluErf call = {(const float *)views[X].buf, (float *)views[Y].buf,
                    (const float *)views[C].buf, clamp, t_scale, scale};
    parallel_for(erf_only ? erf32_range : gelu_erf_range, &call, n, MIN_PARALLEL_FLOATS);
    Py_END_ALLOW_THREADS
    release_all(views, VIEWS);
    Py_RETURN_NONE;
}

PyObject *
py_gelu_erf(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *yo, *co;
    float clamp, t_scale, scale;
    if (!PyArg_ParseTuple(args, "OOOfff", &xo, &yo, &co, &clamp, &t_scale, &scale)) {
        return NULL;
    }
    return run_erf_polynomial(xo, yo, co, clamp, t_scale, scale, 0);
}

PyObject *
py_erf32(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *yo, *co;
    float clamp, t_scale;
    if (!PyArg_ParseTuple(args, "OOOff", &xo, &yo, &co, &clamp, &t_scale)) {
        return NULL;
    }
    return run_erf_polynomial(xo, yo, co, clamp, t_scale, 0.0f, 1);
}

MULTIVERSION void
onyxrt_gelu_tanh(const float *x, float *y, idx n)
{
    /* 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3); the sigmoid
     * from e = exp(-2|u|) <= 1 on either side, so nothing overflows. */
    for (idx i = 0; i < n; i++) {
        const float v = x[i];
        const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        const float e = exp_nonpositive(-2.0f * fabsf(u));
        const float s = (u >= 0.0f ? 1.0f : e) / (1.0f + e);
        y[i] = v * s;
    }
}


static void
gelu_tanh_range(void *ctx, idx begin, idx end)
{
    const RowsCall *c = (const RowsCall *)ctx;
    onyxrt_gelu_tanh(c->x + begin, c->y + begin, end - begin);
}

PyObject *
elementwise_f32(PyObject *xo, PyObject *yo, void (*range)(void *, idx, idx), idx n_arg)
{
    enum { X, Y, VIEWS };
    Py_buffer views[VIEWS];
    idx n;
    if (x_and_out(xo, yo, views, &n) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    RowsCall call = {(const float *)views[X].buf, (float *)views[Y].buf, n_arg};
    parallel_for(range, &call, n, MIN_PARALLEL_FLOATS);
    Py_END_ALLOW_THREADS
    release_all(views, VIEWS);
    Py_RETURN_NONE;
}

PyObject *
py_gelu_tanh(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *yo;
    if (!PyArg_ParseTuple(args, "OO", &xo, &yo)) {
        return NULL;
    }
    return elementwise_f32(xo, yo, gelu_tanh_range, 1);
}

/* ------------------------------------------------------- elementwise activations */

/* The operator library's formulas for LeakyRelu, HardSigmoid, HardSwish and
 * ThresholdedRelu on float32, each in one pass instead of numpy's three to five (each
 * with a temporary): the same operations in the same order (x * a + b, then the clamp;
 * NaN passes through as under numpy's maximum/minimum), p0 = alpha, p1 = beta. */
enum { UNARY_LEAKY = 0, UNARY_HARD_SIGMOID = 1, UNARY_HARD_SWISH = 2, UNARY_THRESHOLDED = 3, UNARY_CLIP = 4 };

typedef struct {
    const float *x;
    float *y;
    int kind;
    float p0, p1;
} UnaryCall;

MULTIVERSION static void
unary_range(void *ctx, idx begin, idx end)
{
    const UnaryCall *c = (const UnaryCall *)ctx;
    const float *x = c->x;
    float *y = c->y;
    const float a = c->p0, b = c->p1, sixth = (float)(1.0 / 6.0);
    switch (c->kind) {
    case UNARY_LEAKY:
        for (idx i = begin; i < end; i++) {
            y[i] = x[i] < 0.0f ? x[i] * a : x[i];
        }
        break;
    case UNARY_HARD_SIGMOID:
        for (idx i = begin; i < end; i++) {
            const float v = x[i] * a + b;
            const float lo = v < 0.0f ? 0.0f : v;
            y[i] = lo > 1.0f ? 1.0f : lo;
        }
        break;
    case UNARY_HARD_SWISH:
        for (idx i = begin; i < end; i++) {
            const float v = x[i] * sixth + 0.5f;
            const float lo = v < 0.0f ? 0.0f : v;
            y[i] = x[i] * (lo > 1.0f ? 1.0f : lo);
        }
        break;
    case UNARY_CLIP:
        /* numpy's maximum(x, a) then minimum(., b): NaN passes, a > b gives b. Relu is
         * the clip to [0, inf). (numpy's maximum against a scalar runs ~3.5x slower than
         * this on a large array: [1, 96, 112, 112] 389 against ~110 us.) */
        for (idx i = begin; i < end; i++) {
            const float v = x[i] < a ? a : x[i];
            y[i] = v > b ? b : v;
        }
        break;
    default: /* UNARY_THRESHOLDED */
        for (idx i = begin; i < end; i++) {
            y[i] = x[i] > a ? x[i] : 0.0f;
        }
        break;
    }
}

/* unary_activation(x, out, kind, p0, p1): out = the activation `kind` (UNARY_*) of x,
 * float32 arrays of one size. */
PyObject *
py_unary_activation(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *yo;
    int kind;
    float p0, p1;
    if (!PyArg_ParseTuple(args, "OOiff", &xo, &yo, &kind, &p0, &p1)) {
        return NULL;
    }
    if (kind < UNARY_LEAKY || kind > UNARY_CLIP) {
        PyErr_Format(PyExc_ValueError, "unary_activation: unknown kind %d", kind);
        return NULL;
    }
    enum { X, Y, VIEWS };
    Py_buffer views[VIEWS];
    idx n;
    if (x_and_out(xo, yo, views, &n) < 0) {
        return NULL;
    }
    UnaryCall call = {(const float *)views[X].buf, (float *)views[Y].buf, kind, p0, p1};
    if (n < MIN_PARALLEL_FLOATS) {
        unary_range(&call, 0, n); /* a few values: no thread hand-off, GIL kept */
    } else {
        Py_BEGIN_ALLOW_THREADS
        parallel_for(unary_range, &call, n, MIN_PARALLEL_FLOATS);
        Py_END_ALLOW_THREADS
    }
    release_all(views, VIEWS);
    Py_RETURN_NONE;
}
