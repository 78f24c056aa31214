/* QuantizeLinear and DequantizeLinear with one scale and zero point (per tensor) between
 * float32 and 8-bit integers, each one pass. numpy takes five (divide, round, add, clip,
 * cast) for the first and three for the second, each over a freshly allocated array: in a
 * QDQ model, where every activation is quantized and dequantized again, that was more
 * time than the convolutions (onnxruntime's static QDQ MobileNetV2: 17 ms of 40).
 *
 * Quantize: y = saturate(round_half_even(x / scale) + zero_point), x / scale a true
 * division and NaN giving the lowest value, as onnxruntime's MLAS computes it.
 * Dequantize: y = (x - zero_point) * scale, the difference exact in float32. */

#include "native.h"

typedef struct {
    const void *x;
    void *y;
    float scale, zero_point, lo, hi;
    int is_signed;
} QuantCall;

MULTIVERSION static void
quantize_range(void *ctx, idx begin, idx end)
{
    const QuantCall *c = (const QuantCall *)ctx;
    const float *x = (const float *)c->x;
    const float lo = c->lo, hi = c->hi, zp = c->zero_point, s = c->scale;
    if (c->is_signed) {
        int8_t *y = (int8_t *)c->y;
        for (idx i = begin; i < end; i++) {
            float v = __builtin_rintf(x[i] / s) + zp;
            v = v > lo ? v : lo; /* NaN: lo */
            v = v < hi ? v : hi;
            y[i] = (int8_t)(int)v;
        }
    } else {
        uint8_t *y = (uint8_t *)c->y;
        for (idx i = begin; i < end; i++) {
            float v = __builtin_rintf(x[i] / s) + zp;
            v = v > lo ? v : lo;
            v = v < hi ? v : hi;
            y[i] = (uint8_t)(int)v;
        }
    }
}

MULTIVERSION static void
dequantize_range(void *ctx, idx begin, idx end)
{
    const QuantCall *c = (const QuantCall *)ctx;
    float *y = (float *)c->y;
    const float zp = c->zero_point, s = c->scale;
    if (c->is_signed) {
        const int8_t *x = (const int8_t *)c->x;
        for (idx i = begin; i < end; i++) {
            y[i] = ((float)x[i] - zp) * s;
        }
    } else {
        const uint8_t *x = (const uint8_t *)c->x;
        for (idx i = begin; i < end; i++) {
            y[i] = ((float)x[i] - zp) * s;
        }
    }
}

/* quantize8(x, y, scale, zero_point, signed, dequantize): x float32 -> y (u)int8, or with
 * `dequantize` x (u)int8 -> y float32; both C-contiguous with the same number of items. */
PyObject *
py_quantize8(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *yo;
    float scale;
    int zero_point, is_signed, dequantize;
    if (!PyArg_ParseTuple(args, "OOfipp", &xo, &yo, &scale, &zero_point, &is_signed, &dequantize)) {
        return NULL;
    }
    Py_buffer xv, yv;
    if (get_bytes(xo, &xv, 0, 0, 1, "x") < 0) {
        return NULL;
    }
    const idx n = xv.len / (dequantize ? 1 : 4);
    if (get_bytes(yo, &yv, 1, n, dequantize ? 4 : 1, "y") < 0) {
        release(&xv);
        return NULL;
    }
    QuantCall call = {xv.buf, yv.buf, scale, (float)zero_point, is_signed ? -128.0f : 0.0f,
                      is_signed ? 127.0f : 255.0f, is_signed};
    Py_BEGIN_ALLOW_THREADS
    parallel_for(dequantize ? dequantize_range : quantize_range, &call, n, 4 * MIN_PARALLEL_FLOATS);
    Py_END_ALLOW_THREADS
    release(&yv);
    release(&xv);
    Py_RETURN_NONE;
}
