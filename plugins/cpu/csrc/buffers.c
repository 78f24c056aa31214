/* Argument checks shared by every entry point: float32 buffer views of the right size,
 * positive dimensions, window geometries. */

#include "native.h"

/* A float32 view of `obj`; `need` is the minimum number of floats it must hold. */
int
get_f32(PyObject *obj, Py_buffer *view, int writable, idx need, const char *name)
{
    memset(view, 0, sizeof(*view)); /* so that release() is safe whatever fails below */
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a %sC-contiguous float32 array", name,
                     writable ? "writable " : "");
        return -1;
    }
    const char *f = view->format ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') {
        f++;
    }
    if (view->itemsize != 4 || strcmp(f, "f") != 0) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s must be float32", name);
        return -1;
    }
    if (need < 0 || view->len / 4 < need) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s holds %zd floats, %zd needed", name,
                     view->len / 4, need);
        return -1;
    }
    return 0;
}

/* A float32 matrix of `rows` x `cols` whose rows may be further apart than
 * `cols` (a column slice of a wider array): contiguous along each row, row stride
 * *ld floats (set here). */
int
get_f32_rows(PyObject *obj, Py_buffer *view, idx rows, idx cols, idx *ld, int writable,
             const char *name)
{
    memset(view, 0, sizeof(*view));
    if (PyObject_GetBuffer(obj, view, writable ? PyBUF_RECORDS : PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a %sfloat32 array", name,
                     writable ? "writable " : "");
        return -1;
    }
    const char *f = view->format ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') {
        f++;
    }
    if (view->itemsize != 4 || strcmp(f, "f") != 0 || view->ndim != 2) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s must be a 2-D float32 array", name);
        return -1;
    }
    if (view->shape[0] != rows || view->shape[1] != cols) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s is %zd x %zd, %zd x %zd needed", name, view->shape[0],
                     view->shape[1], rows, cols);
        return -1;
    }
    if ((cols > 1 && view->strides[1] != 4) || view->strides[0] < 0 || view->strides[0] % 4 ||
        (rows > 1 && view->strides[0] / 4 < cols)) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s's rows must be contiguous and must not overlap", name);
        return -1;
    }
    *ld = rows > 1 ? view->strides[0] / 4 : cols;
    return 0;
}

/* Like get_f32, for an optional argument: None leaves view->buf NULL. */
int
get_optional_f32(PyObject *obj, Py_buffer *view, idx need, const char *name)
{
    if (obj == Py_None) {
        memset(view, 0, sizeof(*view));
        return 0;
    }
    return get_f32(obj, view, 0, need, name);
}

idx
get_rows_f32(PyObject *xo, PyObject *yo, idx n, Py_buffer *x, Py_buffer *y)
{
    if (check_positive("row length", n, 1) < 0 || get_f32(xo, x, 0, 0, "x") < 0) {
        return -1;
    }
    const idx total = x->len / 4;
    if (total % n != 0) {
        release(x);
        PyErr_Format(PyExc_ValueError, "x holds %zd floats: not whole rows of %zd", total, n);
        return -1;
    }
    if (get_f32(yo, y, 1, total, "out") < 0) {
        release(x);
        return -1;
    }
    return total / n;
}

void
release(Py_buffer *view)
{
    if (view->buf != NULL || view->obj != NULL) {
        PyBuffer_Release(view);
    }
}

void
release_all(Py_buffer *views, int count)
{
    for (int i = 0; i < count; i++) {
        release(&views[i]);
    }
}

int
check_activation(int act)
{
    if (act < ACT_NONE || act > ACT_LEAKY) {
        PyErr_Format(PyExc_ValueError, "unknown activation code %d", act);
        return -1;
    }
    return 0;
}

int
check_positive(const char *what, idx value, idx minimum)
{
    if (value < minimum) {
        PyErr_Format(PyExc_ValueError, "%s must be >= %zd, got %zd", what, minimum, value);
        return -1;
    }
    return 0;
}

/* [lo, hi): the outputs o in [0, n_out) whose input o * stride + offset lies in [0, size). */
void
valid_range(idx n_out, idx stride, idx offset, idx size, idx *lo, idx *hi)
{
    idx l = 0;
    if (offset < 0) {
        l = (-offset + stride - 1) / stride;
    }
    idx h = 0;
    if (size - 1 - offset >= 0) {
        h = (size - 1 - offset) / stride + 1;
    }
    if (h > n_out) {
        h = n_out;
    }
    if (l > h) {
        l = h;
    }
    *lo = l;
    *hi = h;
}

int
parse_geometry(PyObject *tuple, Geometry *g)
{
    if (!PyArg_ParseTuple(tuple, "nnnnnnnnnnnnnn", &g->n, &g->c, &g->h, &g->w, &g->kh, &g->kw,
                          &g->oh, &g->ow, &g->sh, &g->sw, &g->ph, &g->pw, &g->dh, &g->dw)) {
        return -1;
    }
    if (check_positive("N", g->n, 0) < 0 || check_positive("C", g->c, 1) < 0 ||
        check_positive("H", g->h, 0) < 0 || check_positive("W", g->w, 0) < 0 ||
        check_positive("kernel height", g->kh, 1) < 0 || check_positive("kernel width", g->kw, 1) < 0 ||
        check_positive("output height", g->oh, 0) < 0 || check_positive("output width", g->ow, 0) < 0 ||
        check_positive("stride", g->sh, 1) < 0 || check_positive("stride", g->sw, 1) < 0 ||
        check_positive("dilation", g->dh, 1) < 0 || check_positive("dilation", g->dw, 1) < 0) {
        return -1;
    }
    return 0;
}

/* A C-contiguous view of `obj` holding at least `need` items of `itemsize` bytes (any
 * element type: the caller knows it). */
int
get_bytes(PyObject *obj, Py_buffer *view, int writable, idx need, idx itemsize, const char *name)
{
    memset(view, 0, sizeof(*view));
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a %sC-contiguous array", name, writable ? "writable " : "");
        return -1;
    }
    if (view->len < need * itemsize) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, %zd needed", name, view->len, need * itemsize);
        return -1;
    }
    return 0;
}
