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

/* MatMulNBits' 4-bit weights dequantized: B (N, blocks, block / 2) bytes holding two values
 * each (the low nibble first), scales (N, blocks) float32, zero points packed the same way
 * (N, ceil(blocks / 2)) or none (8); w (N, K) float32 = (q - zero point) * scale, as the
 * operator library computes it, in one pass instead of numpy's six over the whole matrix
 * (BERT-base's 85 million weights took 1.2 s at session creation). */
typedef struct {
    const uint8_t *b, *zp;
    const float *scales;
    float *w;
    idx blocks, block, k;
    idx n;      /* rows of W (packed: the lines of the GEMM's B) */
    int failed; /* packed: out of memory */
} Dequant4Call;

/* Row n of W into out (k floats). */
static inline __attribute__((always_inline)) void
dequantize4_row(const Dequant4Call *c, idx n, float *restrict out)
{
    const idx half = c->block / 2, zcols = (c->blocks + 1) / 2;
    for (idx j = 0; j < c->blocks; j++) {
        const float s = c->scales[n * c->blocks + j];
        int z = 8;
        if (c->zp) {
            const uint8_t byte = c->zp[n * zcols + j / 2];
            z = (j & 1) ? byte >> 4 : byte & 15;
        }
        const uint8_t *q = c->b + (n * c->blocks + j) * half;
        const idx base = j * c->block;
        if (base + c->block <= c->k) {
            for (idx i = 0; i < half; i++) {
                out[base + 2 * i] = (float)((q[i] & 15) - z) * s;
                out[base + 2 * i + 1] = (float)((q[i] >> 4) - z) * s;
            }
        } else {
            for (idx i = 0; base + 2 * i < c->k; i++) {
                out[base + 2 * i] = (float)((q[i] & 15) - z) * s;
                if (base + 2 * i + 1 < c->k) {
                    out[base + 2 * i + 1] = (float)((q[i] >> 4) - z) * s;
                }
            }
        }
    }
}

MULTIVERSION static void
dequantize4_rows(void *ctx, idx begin, idx end)
{
    const Dequant4Call *c = (const Dequant4Call *)ctx;
    for (idx n = begin; n < end; n++) {
        dequantize4_row(c, n, c->w + n * c->k);
    }
}

/* Panels [begin, end) of W^T in the GEMM's packed-B layout (gemm.c: per block of GEMM_KC
 * along k, per panel of GEMM_NR lines, [kc][GEMM_NR] floats, zero past the last line):
 * each row of W dequantized into a row of scratch, then spread into its panel's column,
 * so the weights are written once, already packed, instead of dequantized into an (N, K)
 * matrix that packing then reads and copies (a 4-bit BERT's 340 MB twice over). */
MULTIVERSION static void
dequantize4_panels(void *ctx, idx begin, idx end)
{
    Dequant4Call *c = (Dequant4Call *)ctx;
    const idx count = (c->n + GEMM_NR - 1) / GEMM_NR;
    float *row = (float *)malloc(sizeof(float) * (size_t)(c->k > 0 ? c->k : 1));
    if (row == NULL) {
        __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (idx p = begin; p < end; p++) {
        for (idx l = 0; l < GEMM_NR; l++) {
            const idx line = p * GEMM_NR + l;
            if (line < c->n) {
                dequantize4_row(c, line, row);
            } else {
                fill(row, c->k, 0.0f);
            }
            for (idx k0 = 0; k0 < c->k; k0 += GEMM_KC) {
                const idx kc = c->k - k0 < GEMM_KC ? c->k - k0 : GEMM_KC;
                float *d = c->w + k0 * count * GEMM_NR + p * kc * GEMM_NR + l;
                for (idx kk = 0; kk < kc; kk++) {
                    d[kk * GEMM_NR] = row[k0 + kk];
                }
            }
        }
    }
    free(row);
}

/* dequantize4(b, scales, zero_points or None, w, n, blocks, block, k[, packed]): w the
 * (N, K) matrix, or with packed its transpose in the GEMM's packed-B layout
 * (ceil(n / GEMM_NR) * GEMM_NR * k floats). */
PyObject *
py_dequantize4(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *bo, *so, *zo, *wo;
    Py_ssize_t n, blocks, block, k;
    int packed = 0;
    if (!PyArg_ParseTuple(args, "OOOOnnnn|p", &bo, &so, &zo, &wo, &n, &blocks, &block, &k, &packed)) {
        return NULL;
    }
    if (n < 0 || blocks < 0 || block < 2 || block % 2 || k < 0 || k > blocks * block) {
        PyErr_SetString(PyExc_ValueError, "dequantize4: bad dimensions");
        return NULL;
    }
    enum { B, S, Z, W, VIEWS };
    Py_buffer v[VIEWS];
    memset(v, 0, sizeof(v));
    if (get_bytes(bo, &v[B], 0, n * blocks * (block / 2), 1, "b") < 0 ||
        get_f32(so, &v[S], 0, n * blocks, "scales") < 0 ||
        (zo != Py_None && get_bytes(zo, &v[Z], 0, n * ((blocks + 1) / 2), 1, "zero points") < 0) ||
        get_f32(wo, &v[W], 1, packed ? (n + GEMM_NR - 1) / GEMM_NR * GEMM_NR * k : n * k, "w") < 0) {
        release_all(v, VIEWS);
        return NULL;
    }
    Dequant4Call call = {(const uint8_t *)v[B].buf, (const uint8_t *)v[Z].buf, (const float *)v[S].buf,
                         (float *)v[W].buf, blocks, block, k, n, 0};
    Py_BEGIN_ALLOW_THREADS
    if (packed) {
        parallel_for(dequantize4_panels, &call, (n + GEMM_NR - 1) / GEMM_NR,
                     1 + MIN_PARALLEL_FLOATS / (GEMM_NR * k + 1));
    } else {
        parallel_for(dequantize4_rows, &call, n, 1 + MIN_PARALLEL_FLOATS / (k + 1));
    }
    Py_END_ALLOW_THREADS
    release_all(v, VIEWS);
    if (call.failed) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

/* The integer products' dequantization (MatMulIntegerToFloat, DynamicQuantizeMatMul):
 * y = float32(acc) * scale + bias, the scale one value or one per column, the bias one per
 * column or none — numpy's three passes (convert, multiply, add: three temporaries of
 * the product's size) in one, the same float32 operations in the same order. */
typedef struct {
    const int32_t *acc;
    const float *scale, *bias;
    float *y;
    idx n, scale_per_column;
} AccCall;

MULTIVERSION static void
acc_rows(void *ctx, idx begin, idx end)
{
    const AccCall *c = (const AccCall *)ctx;
    for (idx r = begin; r < end; r++) {
        const int32_t *a = c->acc + r * c->n;
        float *y = c->y + r * c->n;
        if (c->scale_per_column) {
            for (idx j = 0; j < c->n; j++) {
                y[j] = (float)a[j] * c->scale[j];
            }
        } else {
            const float s = c->scale[0];
            for (idx j = 0; j < c->n; j++) {
                y[j] = (float)a[j] * s;
            }
        }
        if (c->bias) {
            for (idx j = 0; j < c->n; j++) {
                y[j] = y[j] + c->bias[j];
            }
        }
    }
}

/* accumulators_to_float(acc, scale, bias or None, y, rows, n) */
PyObject *
py_accumulators_to_float(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *ao, *so, *bo, *yo;
    Py_ssize_t rows, n;
    if (!PyArg_ParseTuple(args, "OOOOnn", &ao, &so, &bo, &yo, &rows, &n)) {
        return NULL;
    }
    if (rows < 0 || n < 1) {
        PyErr_SetString(PyExc_ValueError, "accumulators_to_float: bad dimensions");
        return NULL;
    }
    enum { A, S, B, Y, VIEWS };
    Py_buffer v[VIEWS];
    memset(v, 0, sizeof(v));
    if (get_bytes(ao, &v[A], 0, rows * n, 4, "acc") < 0 || get_f32(so, &v[S], 0, 1, "scale") < 0 ||
        get_optional_f32(bo, &v[B], n, "bias") < 0 || get_f32(yo, &v[Y], 1, rows * n, "y") < 0) {
        release_all(v, VIEWS);
        return NULL;
    }
    const idx scales = v[S].len / 4;
    if (scales != 1 && scales != n) {
        release_all(v, VIEWS);
        PyErr_SetString(PyExc_ValueError, "accumulators_to_float: one scale, or one per column");
        return NULL;
    }
    AccCall call = {(const int32_t *)v[A].buf, (const float *)v[S].buf, (const float *)v[B].buf,
                    (float *)v[Y].buf, n, scales == n && n > 1};
    Py_BEGIN_ALLOW_THREADS
    parallel_for(acc_rows, &call, rows, 1 + MIN_PARALLEL_FLOATS / n);
    Py_END_ALLOW_THREADS
    release_all(v, VIEWS);
    Py_RETURN_NONE;
}

/* com.microsoft QLinearAdd of two 8-bit tensors of one shape (a QDQ model's residual Add,
 * once fused): y = saturate(rint((a - za) * ra + (b - zb) * rb) + zc), ra = A_scale /
 * C_scale and rb likewise in float32, each product and the sum rounded to float32 as the
 * operator library (and MLAS) computes it — one pass instead of two dequantizations, an
 * Add and a quantization over float32 arrays. (-std=c99 keeps GCC from contracting the
 * products and the sum into fused multiply-adds, which would round differently.) */
typedef struct {
    const void *a, *b;
    void *y;
    float za, zb, ra, rb, zc, lo, hi;
    int is_signed;
} QAddCall;

MULTIVERSION static void
qlinear_add_range(void *ctx, idx begin, idx end)
{
    const QAddCall *c = (const QAddCall *)ctx;
    const float za = c->za, zb = c->zb, ra = c->ra, rb = c->rb, zc = c->zc, lo = c->lo, hi = c->hi;
    if (c->is_signed) {
        const int8_t *a = (const int8_t *)c->a, *b = (const int8_t *)c->b;
        int8_t *y = (int8_t *)c->y;
        for (idx i = begin; i < end; i++) {
            const float pa = ((float)a[i] - za) * ra, pb = ((float)b[i] - zb) * rb;
            float v = __builtin_rintf(pa + pb) + zc;
            v = v > lo ? v : lo;
            v = v < hi ? v : hi;
            y[i] = (int8_t)(int)v;
        }
    } else {
        const uint8_t *a = (const uint8_t *)c->a, *b = (const uint8_t *)c->b;
        uint8_t *y = (uint8_t *)c->y;
        for (idx i = begin; i < end; i++) {
            const float pa = ((float)a[i] - za) * ra, pb = ((float)b[i] - zb) * rb;
            float v = __builtin_rintf(pa + pb) + zc;
            v = v > lo ? v : lo;
            v = v < hi ? v : hi;
            y[i] = (uint8_t)(int)v;
        }
    }
}

/* qlinear_add(a, b, y, za, zb, ra, rb, zc, signed): a, b, y C-contiguous bytes of one size. */
PyObject *
py_qlinear_add(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *ao, *bo, *yo;
    int za, zb, zc, is_signed;
    float ra, rb;
    if (!PyArg_ParseTuple(args, "OOOiiffip", &ao, &bo, &yo, &za, &zb, &ra, &rb, &zc, &is_signed)) {
        return NULL;
    }
    enum { A, B, Y, VIEWS };
    Py_buffer v[VIEWS];
    memset(v, 0, sizeof(v));
    if (get_bytes(ao, &v[A], 0, 0, 1, "a") < 0 || get_bytes(bo, &v[B], 0, v[A].len, 1, "b") < 0 ||
        get_bytes(yo, &v[Y], 1, v[A].len, 1, "y") < 0) {
        release_all(v, VIEWS);
        return NULL;
    }
    QAddCall call = {v[A].buf, v[B].buf, v[Y].buf, (float)za, (float)zb, ra, rb, (float)zc,
                     is_signed ? -128.0f : 0.0f, is_signed ? 127.0f : 255.0f, is_signed};
    Py_BEGIN_ALLOW_THREADS
    parallel_for(qlinear_add_range, &call, v[A].len, 4 * MIN_PARALLEL_FLOATS);
    Py_END_ALLOW_THREADS
    release_all(v, VIEWS);
    Py_RETURN_NONE;
}
