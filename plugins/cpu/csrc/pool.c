/* 2-D max pooling on phase planes. */

#include "native.h"

MULTIVERSION void
onyxrt_max_taps(const float *buf, const idx *offsets, idx taps, float *out, idx span)
{
    /* out = max over the taps' runs, NaN-propagating as numpy's maximum. */
    float *restrict o = out;
    const float *restrict first = buf + offsets[0];
    for (idx i = 0; i < span; i++) {
        o[i] = first[i];
    }
    for (idx t = 1; t < taps; t++) {
        const float *restrict src = buf + offsets[t];
        for (idx i = 0; i < span; i++) {
            const float v = src[i];
            o[i] = (v > o[i] || v != v) ? v : o[i];
        }
    }
}

/* Returns -1 when the work buffers cannot be allocated. */
static int
onyxrt_maxpool(const float *x, float *y, const Geometry *g)
{
    const idx taps = g->kh * g->kw;
    const PhaseLayout p = phase_layout(g);
    float *buf = (float *)malloc(sizeof(float) * (size_t)(p.phases * p.plane + p.span));
    idx *offsets = (idx *)malloc(sizeof(idx) * (size_t)taps);
    if (buf == NULL || offsets == NULL) {
        free(buf);
        free(offsets);
        return -1;
    }
    float *wide = buf + p.phases * p.plane;
    for (idx ky = 0; ky < g->kh; ky++) {
        for (idx kx = 0; kx < g->kw; kx++) {
            offsets[ky * g->kw + kx] = tap_offset(g, &p, ky, kx);
        }
    }
    for (idx plane = 0; plane < g->n * g->c; plane++) {
        fill_phases(x + plane * g->h * g->w, g, &p, buf, -INFINITY);
        float *yo = y + plane * g->oh * g->ow;
        float *dst = p.wq == g->ow ? yo : wide;
        onyxrt_max_taps(buf, offsets, taps, dst, p.span);
        if (dst == wide) {
            for (idx oy = 0; oy < g->oh; oy++) {
                memcpy(yo + oy * g->ow, wide + oy * p.wq, sizeof(float) * (size_t)g->ow);
            }
        }
    }
    free(buf);
    free(offsets);
    return 0;
}

PyObject *
py_maxpool(PyObject *self, PyObject *args)
{
    PyObject *xo, *yo, *geo;
    if (!PyArg_ParseTuple(args, "OOO", &xo, &yo, &geo)) {
        return NULL;
    }
    Geometry g;
    if (parse_geometry(geo, &g) < 0) {
        return NULL;
    }
    Py_buffer x, y;
    if (get_f32(xo, &x, 0, g.n * g.c * g.h * g.w, "x") < 0) {
        return NULL;
    }
    if (get_f32(yo, &y, 1, g.n * g.c * g.oh * g.ow, "y") < 0) {
        release(&x);
        return NULL;
    }
    int rc = 0;
    if (g.n > 0 && g.oh > 0 && g.ow > 0) {
        Py_BEGIN_ALLOW_THREADS
        rc = onyxrt_maxpool((const float *)x.buf, (float *)y.buf, &g);
        Py_END_ALLOW_THREADS
    }
    release(&x);
    release(&y);
    if (rc < 0) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}
