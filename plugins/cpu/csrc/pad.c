/*
 * pad.c: Pad of a C-contiguous tensor into a new one, any element size, modes constant,
 * reflect, edge and wrap, pads >= 0 (the library crops negative pads before).
 *
 * The output is written row by row (rows along the last axis): each output row either
 * lies in a constant band of an outer axis (filled with the value) or copies one source
 * row, found through each outer axis's index map; within the row, the source's middle is
 * one memcpy and each side's pad element is mapped the same way. numpy's version (an empty
 * output, the middle assigned, each side of each axis a flipped view assigned) cost a
 * log-mel front end's reflect pad of 16000 samples ~25 us in Python and numpy calls.
 */
#include "native.h"

enum { PAD_CONSTANT = 0, PAD_REFLECT = 1, PAD_EDGE = 2, PAD_WRAP = 3 };

#define PAD_MAX_RANK 16

/* The source index along an axis of `d` elements for output index `o` shifted by the
 * pad before it (`i` = o - begin), or -1 for the constant. The caller keeps reflect's
 * pads below d and every mode's axis non-empty. */
static inline idx
source_index(idx i, idx d, int mode)
{
    if (i >= 0 && i < d) {
        return i;
    }
    switch (mode) {
    case PAD_REFLECT:
        return i < 0 ? -i : 2 * (d - 1) - i;
    case PAD_EDGE:
        return i < 0 ? 0 : d - 1;
    case PAD_WRAP:
        return ((i % d) + d) % d;
    default:
        return -1;
    }
}

static inline void
copy_element(char *dst, const char *src, idx size)
{
    switch (size) {
    case 1: *dst = *src; break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    case 8: memcpy(dst, src, 8); break;
    default: memcpy(dst, src, (size_t)size); break;
    }
}

static void
fill_elements(char *dst, idx count, const char *value, idx size)
{
    for (idx j = 0; j < count; j++) {
        copy_element(dst + j * size, value, size);
    }
}

/* y (out_shape) = pad(x (in_shape)); rank >= 1, shapes and begins consistent. */
static void
pad_rows(const char *x, char *y, int rank, const idx *in_shape, const idx *out_shape,
         const idx *begins, int mode, const char *value, idx size)
{
    const idx d = in_shape[rank - 1], w = out_shape[rank - 1], b = begins[rank - 1];
    const idx e = w - d - b;
    idx rows = 1;
    for (int a = 0; a < rank - 1; a++) {
        rows *= out_shape[a];
    }
    idx in_strides[PAD_MAX_RANK], out_index[PAD_MAX_RANK] = {0};
    idx stride = d;
    for (int a = rank - 2; a >= 0; a--) {
        in_strides[a] = stride;
        stride *= in_shape[a];
    }
    for (idx r = 0; r < rows; r++) {
        char *out = y + r * w * size;
        idx src_row = 0;
        int constant = 0;
        for (int a = 0; a < rank - 1; a++) {
            const idx s = source_index(out_index[a] - begins[a], in_shape[a], mode);
            if (s < 0) {
                constant = 1;
                break;
            }
            src_row += s * in_strides[a];
        }
        if (constant) {
            fill_elements(out, w, value, size);
        } else {
            const char *in = x + src_row * size; /* src_row: an element offset */
            for (idx j = 0; j < b; j++) {
                const idx s = source_index(j - b, d, mode);
                if (s < 0) {
                    copy_element(out + j * size, value, size);
                } else {
                    copy_element(out + j * size, in + s * size, size);
                }
            }
            memcpy(out + b * size, in, (size_t)(d * size));
            for (idx j = 0; j < e; j++) {
                const idx s = source_index(d + j, d, mode);
                if (s < 0) {
                    copy_element(out + (b + d + j) * size, value, size);
                } else {
                    copy_element(out + (b + d + j) * size, in + s * size, size);
                }
            }
        }
        for (int a = rank - 2; a >= 0; a--) { /* the next row's outer index */
            if (++out_index[a] < out_shape[a]) {
                break;
            }
            out_index[a] = 0;
        }
    }
}

/* pad(x, y, begins, mode, value): x and y C-contiguous arrays of one element size, y's
 * shape x's plus the pads, begins one int per axis (>= 0), mode PAD_*, value a bytes-like
 * element for the constant mode. Reflect needs every pad below its axis's size, reflect
 * and edge and wrap a non-empty axis wherever they pad (the caller checks). */
PyObject *
py_pad(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *yo, *bo;
    int mode;
    Py_buffer value;
    if (!PyArg_ParseTuple(args, "OOOiy*", &xo, &yo, &bo, &mode, &value)) {
        return NULL;
    }
    Py_buffer x, y;
    memset(&x, 0, sizeof(x));
    memset(&y, 0, sizeof(y));
    PyObject *result = NULL;
    idx begins[PAD_MAX_RANK];
    if (PyObject_GetBuffer(xo, &x, PyBUF_C_CONTIGUOUS | PyBUF_STRIDES | PyBUF_FORMAT) < 0 ||
        PyObject_GetBuffer(yo, &y, PyBUF_C_CONTIGUOUS | PyBUF_STRIDES | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        goto done;
    }
    const int rank = x.ndim;
    if (rank < 1 || rank > PAD_MAX_RANK || y.ndim != rank || x.itemsize != y.itemsize ||
        value.len != x.itemsize || mode < PAD_CONSTANT || mode > PAD_WRAP ||
        !PySequence_Check(bo) || PySequence_Size(bo) != rank) {
        PyErr_SetString(PyExc_ValueError, "pad: mismatched arrays, begins, value or mode");
        goto done;
    }
    for (int a = 0; a < rank; a++) {
        PyObject *item = PySequence_GetItem(bo, a);
        begins[a] = item ? PyLong_AsSsize_t(item) : -1;
        Py_XDECREF(item);
        const idx d = x.shape[a], pad_total = y.shape[a] - d;
        if (PyErr_Occurred() || begins[a] < 0 || pad_total < begins[a] ||
            (mode != PAD_CONSTANT && pad_total > 0 && d == 0) ||
            (mode == PAD_REFLECT && (begins[a] >= d || pad_total - begins[a] >= d) && pad_total > 0)) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_ValueError, "pad: pads do not fit the input for this mode");
            }
            goto done;
        }
    }
    if (y.len > 0) {
        Py_BEGIN_ALLOW_THREADS
        if (x.len == 0) { /* constant mode over an empty input: all value */
            fill_elements((char *)y.buf, y.len / y.itemsize, (const char *)value.buf, y.itemsize);
        } else {
            pad_rows((const char *)x.buf, (char *)y.buf, rank, x.shape, y.shape, begins, mode,
                     (const char *)value.buf, x.itemsize);
        }
        Py_END_ALLOW_THREADS
    }
    result = Py_None;
    Py_INCREF(result);
done:
    if (x.obj) {
        PyBuffer_Release(&x);
    }
    if (y.obj) {
        PyBuffer_Release(&y);
    }
    PyBuffer_Release(&value);
    return result;
}
