/* Softmax and LogSoftmax over contiguous rows (the CPU provider's Softmax and LogSoftmax,
 * and the ML operators' SOFTMAX).
 *
 * Floating-point contraction is on in this file only: the exponential's polynomial is
 * built on fused multiply-adds (as MLAS's is). A row: its max, exp(x - max) 16 lanes at a
 * time, the sum, one multiply by its inverse. Rows are split over the thread pool. */

#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif

#include "vec16.h"

/* exp(x) of x <= 0 (or NaN) on 16 lanes: exp_nonpositive's reduction and polynomial,
 * evaluated with fused multiply-adds, rint as the add-and-subtract of 1.5 * 2^23 (which
 * rounds to nearest even alike for |x| < 2^22), x > 0 not clamped (a softmax's x - max
 * never is) and NaN carried through by the arithmetic itself. The loop is bound by its
 * vector operations (Zen 4 runs a 512-bit one on its two 256-bit halves): these cut
 * ViT's [2364, 197] rows from 0.49 to ~0.3 ns a value on one thread. Below
 * EXP_UNDERFLOW: exactly 0 (masked keys). */
static inline __attribute__((always_inline)) v16
exp16_nonpositive(v16 x)
{
    const v16 zero = {0}, under = zero + EXP_UNDERFLOW, magic = zero + 12582912.0f;
    const v16 xc = select16(x < under, under, x);
    const v16 n = (xc * 1.44269504088896341f + magic) - magic;
    const v16 r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
    v16 p = zero + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const i16v bits = (__builtin_convertvector(n, i16v) + 127) << 23;
    v16 e = p * (v16)bits;
    return select16(x < under, zero, e);
}

MULTIVERSION void
onyxrt_softmax(const float *x, float *y, idx rows, idx n)
{
    for (idx r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        float m = row_max(xr, n);
        /* 16 at a time, the row's last < 16 through one padded vector. */
        idx i = 0;
        for (; i + 16 <= n; i += 16) {
            *(v16 *)(yr + i) = exp16_nonpositive(*(const v16 *)(xr + i) - m);
        }
        if (i < n) {
            float tail[16] = {0};
            for (idx j = 0; j < n - i; j++) {
                tail[j] = xr[i + j];
            }
            const v16 e = exp16_nonpositive(*(const v16 *)tail - m);
            for (idx j = 0; j < n - i; j++) {
                yr[i + j] = e[j];
            }
        }
        const float inv = 1.0f / row_sum(yr, n);
        for (idx i = 0; i < n; i++) {
            yr[i] *= inv;
        }
    }
}

static void
softmax_rows(void *ctx, idx begin, idx end)
{
    const RowsCall *c = (const RowsCall *)ctx;
    onyxrt_softmax(c->x + begin * c->n, c->y + begin * c->n, end - begin, c->n);
}

/* (x, out, n) from Python: `range` over out's rows of n floats, split over the pool. */
static PyObject *
rows_call(PyObject *args, void (*range)(void *, idx, idx))
{
    PyObject *xo, *yo;
    idx n;
    if (!PyArg_ParseTuple(args, "OOn", &xo, &yo, &n)) {
        return NULL;
    }
    enum { X, Y, VIEWS };
    Py_buffer views[VIEWS];
    memset(views, 0, sizeof(views));
    const idx rows = get_rows_f32(xo, yo, n, &views[X], &views[Y]);
    if (rows < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    RowsCall call = {(const float *)views[X].buf, (float *)views[Y].buf, n};
    parallel_for(range, &call, rows, 1 + MIN_PARALLEL_FLOATS / n);
    Py_END_ALLOW_THREADS
    release_all(views, VIEWS);
    Py_RETURN_NONE;
}

PyObject *
py_softmax(PyObject *self, PyObject *args)
{
    (void)self;
    return rows_call(args, softmax_rows);
}

/* y = x - max - log(sum(exp(x - max))) per row, as the library computes it (the sum in
 * float32 lanes, the log of it once per row). */
MULTIVERSION void
onyxrt_log_softmax(const float *x, float *y, idx rows, idx n)
{
    for (idx r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        const float m = row_max(xr, n);
        v16 sum = {0};
        idx i = 0;
        for (; i + 16 <= n; i += 16) {
            sum += exp16_nonpositive(*(const v16 *)(xr + i) - m);
        }
        if (i < n) {
            float tail[16];
            for (idx j = 0; j < 16; j++) {
                tail[j] = i + j < n ? xr[i + j] - m : -INFINITY;
            }
            sum += exp16_nonpositive(*(const v16 *)tail);
        }
        float total = 0.0f;
        for (int j = 0; j < 16; j++) {
            total += sum[j];
        }
        const float shift = m + logf(total);
        for (idx j = 0; j < n; j++) {
            yr[j] = xr[j] - shift;
        }
    }
}

static void
log_softmax_rows(void *ctx, idx begin, idx end)
{
    const RowsCall *c = (const RowsCall *)ctx;
    onyxrt_log_softmax(c->x + begin * c->n, c->y + begin * c->n, end - begin, c->n);
}

PyObject *
py_log_softmax(PyObject *self, PyObject *args)
{
    (void)self;
    return rows_call(args, log_softmax_rows);
}
