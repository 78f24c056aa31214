/* The convolution epilogue: bias + residual + activation in one pass. */

#include "native.h"

MULTIVERSION void
onyxrt_epilogue(float *y, idx r_begin, idx r_end, idx channels, idx length, const float *bias,
                const float *z, int act, float p0, float p1)
{
    /* y[r, :] = act(y[r, :] + bias[r % channels] + z[r, :]) in one pass, rows [r_begin, r_end). */
    for (idx r = r_begin; r < r_end; r++) {
        float *yr = y + r * length;
        const float b = bias ? bias[r % channels] : 0.0f;
        if (z) {
            const float *zr = z + r * length;
            for (idx i = 0; i < length; i++) {
                yr[i] = yr[i] + b + zr[i];
            }
        } else if (bias) {
            for (idx i = 0; i < length; i++) {
                yr[i] += b;
            }
        }
        switch (act) {
        case ACT_RELU:
            for (idx i = 0; i < length; i++) {
                /* max(y, 0) as numpy's maximum: NaN stays NaN */
                yr[i] = (yr[i] < 0.0f) ? 0.0f : yr[i];
            }
            break;
        case ACT_CLIP:
            for (idx i = 0; i < length; i++) {
                float v = (yr[i] < p0) ? p0 : yr[i];
                yr[i] = (v > p1) ? p1 : v;
            }
            break;
        case ACT_LEAKY:
            for (idx i = 0; i < length; i++) {
                float v = yr[i];
                yr[i] = (v < 0.0f) ? v * p0 : v;
            }
            break;
        default:
            break;
        }
    }
}

typedef struct {
    float *y;
    idx channels, length;
    const float *bias, *z;
    int act;
    float p0, p1;
} Epilogue;

static void
epilogue_rows(void *ctx, idx begin, idx end)
{
    const Epilogue *e = (const Epilogue *)ctx;
    onyxrt_epilogue(e->y, begin, end, e->channels, e->length, e->bias, e->z, e->act, e->p0, e->p1);
}

PyObject *
py_epilogue(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *yo, *bo, *zo;
    idx channels, length;
    int act;
    float p0, p1;
    if (!PyArg_ParseTuple(args, "OnnOOiff", &yo, &channels, &length, &bo, &zo, &act, &p0, &p1)) {
        return NULL;
    }
    if (check_positive("channels", channels, 1) < 0 || check_positive("length", length, 0) < 0) {
        return NULL;
    }
    if (check_activation(act) < 0) {
        return NULL;
    }
    enum { Y, B, Z, VIEWS };
    Py_buffer views[VIEWS];
    memset(views, 0, sizeof(views));
    if (get_f32(yo, &views[Y], 1, 0, "y") < 0) {
        release_all(views, VIEWS);
        return NULL;
    }
    idx n = views[Y].len / 4;
    idx rows = length ? n / length : 0;
    if (rows * length != n || rows % channels != 0) {
        release_all(views, VIEWS);
        PyErr_Format(PyExc_ValueError, "y holds %zd floats: not a whole number of %zd x %zd images",
                     n, channels, length);
        return NULL;
    }
    if (get_optional_f32(bo, &views[B], channels, "bias") < 0 ||
        get_optional_f32(zo, &views[Z], n, "z") < 0) {
        release_all(views, VIEWS);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    Epilogue e = {(float *)views[Y].buf, channels, length, (const float *)views[B].buf,
                  (const float *)views[Z].buf, act, p0, p1};
    parallel_for(epilogue_rows, &e, rows, 1 + MIN_PARALLEL_FLOATS / (length + 1));
    Py_END_ALLOW_THREADS
    release_all(views, VIEWS);
    Py_RETURN_NONE;
}
