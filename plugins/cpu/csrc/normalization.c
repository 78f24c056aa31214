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
    PyObject *xo, *yo, *so, *bo, *mo, *io;
    idx n;
    float epsilon;
    if (!PyArg_ParseTuple(args, "OOnOOfOO", &xo, &yo, &n, &so, &bo, &epsilon, &mo, &io)) {
        return NULL;
    }
    if (check_positive("row length", n, 1) < 0) {
        return NULL;
    }
    Py_buffer x, y, sc, b, mean, inv;
    memset(&mean, 0, sizeof(mean));
    memset(&inv, 0, sizeof(inv));
    if (get_f32(xo, &x, 0, 0, "x") < 0) {
        return NULL;
    }
    const idx total = x.len / 4;
    const idx rows = total / n;
    if (rows * n != total) {
        release(&x);
        PyErr_Format(PyExc_ValueError, "x holds %zd floats: not whole rows of %zd", total, n);
        return NULL;
    }
    if (get_f32(yo, &y, 1, total, "out") < 0) {
        release(&x);
        return NULL;
    }
    if (get_f32(so, &sc, 0, n, "scale") < 0) {
        release(&x);
        release(&y);
        return NULL;
    }
    if (get_optional_f32(bo, &b, n, "bias") < 0 ||
        (mo != Py_None && get_f32(mo, &mean, 1, rows, "mean") < 0) ||
        (io != Py_None && get_f32(io, &inv, 1, rows, "inv_std_dev") < 0)) {
        release(&x);
        release(&y);
        release(&sc);
        release(&b);
        release(&mean);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    LayerNorm call = {(const float *)x.buf, (float *)y.buf, n, (const float *)sc.buf,
                      (const float *)b.buf, epsilon, (float *)mean.buf, (float *)inv.buf};
    parallel_for(layernorm_rows, &call, rows, 1 + MIN_PARALLEL_FLOATS / n);
    Py_END_ALLOW_THREADS
    release(&x);
    release(&y);
    release(&sc);
    release(&b);
    release(&mean);
    release(&inv);
    Py_RETURN_NONE;
}
