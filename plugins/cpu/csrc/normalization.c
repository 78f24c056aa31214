/* LayerNormalization over rows. */

#include "native.h"

MULTIVERSION void
onyxrt_layernorm(const float *x, float *y, idx rows, idx n, const float *scale,
                 const float *bias, float epsilon, float *mean_out, float *inv_std_out)
{
    for (idx r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        const float mean = row_sum(xr, n) / (float)n;
        for (idx i = 0; i < n; i++) {
            yr[i] = xr[i] - mean;
        }
        float part[16] = {0};
        idx i = 0;
        for (; i + 16 <= n; i += 16) {
            for (int j = 0; j < 16; j++) {
                part[j] += yr[i + j] * yr[i + j];
            }
        }
        float sq = 0.0f;
        for (int j = 0; j < 16; j++) {
            sq += part[j];
        }
        for (; i < n; i++) {
            sq += yr[i] * yr[i];
        }
        const float inv_std = 1.0f / sqrtf(sq / (float)n + epsilon);
        if (bias) {
            for (idx k = 0; k < n; k++) {
                yr[k] = yr[k] * inv_std * scale[k] + bias[k];
            }
        } else {
            for (idx k = 0; k < n; k++) {
                yr[k] = yr[k] * inv_std * scale[k];
            }
        }
        if (mean_out) {
            mean_out[r] = mean;
        }
        if (inv_std_out) {
            inv_std_out[r] = inv_std;
        }
    }
}

typedef struct {
    const float *x;
    float *y;
    idx n;
    const float *scale, *bias;
    float epsilon;
    float *mean, *inv_std;
} LayerNorm;

static void
layernorm_rows(void *ctx, idx begin, idx end)
{
    const LayerNorm *c = (const LayerNorm *)ctx;
    onyxrt_layernorm(c->x + begin * c->n, c->y + begin * c->n, end - begin, c->n, c->scale,
                     c->bias, c->epsilon, c->mean ? c->mean + begin : NULL,
                     c->inv_std ? c->inv_std + begin : NULL);
}

PyObject *
py_layernorm(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *yo, *so, *bo, *mo, *io;
    idx n;
    float epsilon;
    if (!PyArg_ParseTuple(args, "OOnOOfOO", &xo, &yo, &n, &so, &bo, &epsilon, &mo, &io)) {
        return NULL;
    }
    /* mean and inv_std_dev stay zeroed (NULL buffers) when not asked for */
    enum { X, Y, SCALE, B, MEAN, INV, VIEWS };
    Py_buffer views[VIEWS];
    memset(views, 0, sizeof(views));
    const idx rows = get_rows_f32(xo, yo, n, &views[X], &views[Y]);
    if (rows < 0) {
        return NULL;
    }
    if (get_f32(so, &views[SCALE], 0, n, "scale") < 0 ||
        get_optional_f32(bo, &views[B], n, "bias") < 0 ||
        (mo != Py_None && get_f32(mo, &views[MEAN], 1, rows, "mean") < 0) ||
        (io != Py_None && get_f32(io, &views[INV], 1, rows, "inv_std_dev") < 0)) {
        release_all(views, VIEWS);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    LayerNorm call = {(const float *)views[X].buf, (float *)views[Y].buf, n,
                      (const float *)views[SCALE].buf, (const float *)views[B].buf, epsilon,
                      (float *)views[MEAN].buf, (float *)views[INV].buf};
    parallel_for(layernorm_rows, &call, rows, 1 + MIN_PARALLEL_FLOATS / n);
    Py_END_ALLOW_THREADS
    release_all(views, VIEWS);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------ ai.onnx.ml Normalizer */

/* Each row of n floats divided by its maximum (norm 0; NaN skipped, as onnxruntime's
 * running std::max and numpy's fmax), its L1 norm (1) or its L2 norm (2); a zero divisor
 * leaves the row as it is. Sums are taken in order (short rows: a classifier's scores). */
static void
normalize_row(const float *x, float *y, idx n, int norm)
{
    float div;
    if (norm == 0) {
        div = x[0];
        for (idx j = 1; j < n; j++) {
            div = isnan(div) || x[j] > div ? (isnan(x[j]) ? div : x[j]) : div;
        }
    } else {
        float sum = 0.0f;
        for (idx j = 0; j < n; j++) {
            sum += norm == 1 ? fabsf(x[j]) : x[j] * x[j];
        }
        div = norm == 1 ? sum : sqrtf(sum);
    }
    if (div == 0.0f) {
        div = 1.0f;
    }
    for (idx j = 0; j < n; j++) {
        y[j] = x[j] / div;
    }
}

/* normalize_rows(x, y, n, norm): see normalize_row; x and y hold whole rows of n floats. */
PyObject *
py_normalize_rows(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *yo;
    idx n;
    int norm;
    if (!PyArg_ParseTuple(args, "OOni", &xo, &yo, &n, &norm)) {
        return NULL;
    }
    if (norm < 0 || norm > 2) {
        PyErr_Format(PyExc_ValueError, "norm must be 0 (MAX), 1 (L1) or 2 (L2), got %d", norm);
        return NULL;
    }
    enum { X, Y, VIEWS };
    Py_buffer views[VIEWS];
    memset(views, 0, sizeof(views));
    const idx rows = get_rows_f32(xo, yo, n, &views[X], &views[Y]);
    if (rows < 0) {
        return NULL;
    }
    const float *x = (const float *)views[X].buf;
    float *y = (float *)views[Y].buf;
    for (idx r = 0; r < rows; r++) { /* a service's few rows: not worth the pool */
        normalize_row(x + r * n, y + r * n, n, norm);
    }
    release_all(views, VIEWS);
    Py_RETURN_NONE;
}
