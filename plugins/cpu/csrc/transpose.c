/*
 * transpose.c: a 2-D float32 matrix transposed into another (the constant right operand
 * of a Gemm with transB, laid out once as (K, N) for BLAS).
 *
 * numpy copies a transposed view element by element, one strided load per float: ~1.8
 * ms for a 1000x1280 classifier, a tenth of a small model's whole session creation. Here
 * four source rows are read four floats at a time and each 4x4 block transposed in
 * registers (SSE, part of every x86-64): ~0.3 ms. A plain loop does the edges, and
 * everything where SSE is missing.
 */
#include "native.h"

#ifdef __SSE2__
#include <xmmintrin.h>
#endif

/* dst[j][i] = src[i][j] over rows [i0, i1) and columns [j0, j1). */
static void
transpose_plain(const float *restrict src, idx rows, idx cols, float *restrict dst, idx i0,
                idx i1, idx j0, idx j1)
{
    for (idx i = i0; i < i1; i++) {
        for (idx j = j0; j < j1; j++) {
            dst[j * rows + i] = src[i * cols + j];
        }
    }
}

static void
transpose_all(const float *restrict src, idx rows, idx cols, float *restrict dst)
{
    idx i0 = 0;
#ifdef __SSE2__
    idx cols4 = cols / 4 * 4;
    for (; i0 + 4 <= rows; i0 += 4) {
        const float *s = src + i0 * cols;
        for (idx j = 0; j < cols4; j += 4) {
            __m128 r0 = _mm_loadu_ps(s + j);
            __m128 r1 = _mm_loadu_ps(s + cols + j);
            __m128 r2 = _mm_loadu_ps(s + 2 * cols + j);
            __m128 r3 = _mm_loadu_ps(s + 3 * cols + j);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            _mm_storeu_ps(dst + j * rows + i0, r0);
            _mm_storeu_ps(dst + (j + 1) * rows + i0, r1);
            _mm_storeu_ps(dst + (j + 2) * rows + i0, r2);
            _mm_storeu_ps(dst + (j + 3) * rows + i0, r3);
        }
        transpose_plain(src, rows, cols, dst, i0, i0 + 4, cols4, cols);
    }
#endif
    transpose_plain(src, rows, cols, dst, i0, rows, 0, cols);
}

PyObject *
py_transpose(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *so, *dso;
    idx rows, cols;
    if (!PyArg_ParseTuple(args, "OnnO", &so, &rows, &cols, &dso)) {
        return NULL;
    }
    if (check_positive("rows", rows, 0) < 0 || check_positive("cols", cols, 0) < 0) {
        return NULL;
    }
    if (cols > 0 && rows > PY_SSIZE_T_MAX / cols) {
        PyErr_SetString(PyExc_ValueError, "rows * cols overflows");
        return NULL;
    }
    Py_buffer views[2];
    memset(views, 0, sizeof(views));
    if (get_f32(so, &views[0], 0, rows * cols, "source") < 0 ||
        get_f32(dso, &views[1], 1, rows * cols, "destination") < 0) {
        release_all(views, 2);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    transpose_all((const float *)views[0].buf, rows, cols, (float *)views[1].buf);
    Py_END_ALLOW_THREADS
    release_all(views, 2);
    Py_RETURN_NONE;
}
