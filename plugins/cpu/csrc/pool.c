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

typedef struct {
    const float *x;
    float *y;
    const Geometry *g;
    int failed; /* a piece could not allocate its work buffers */
} MaxPool;

/* Planes [begin, end). */
static void
maxpool_planes(void *ctx, idx begin, idx end)
{
    MaxPool *m = (MaxPool *)ctx;
    const Geometry *g = m->g;
    PhaseWork work;
    if (phase_work_open(&work, g) < 0) {
        __atomic_store_n(&m->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (idx plane = begin; plane < end; plane++) {
        fill_phases(m->x + plane * g->h * g->w, g, &work.p, work.buf, -INFINITY);
        float *yo = m->y + plane * g->oh * g->ow;
        float *target = phase_work_target(&work, yo, g);
        onyxrt_max_taps(work.buf, work.offsets, g->kh * g->kw, target, work.p.span);
        phase_work_store(&work, target, yo, g);
    }
    phase_work_close(&work);
}

/* Returns -1 when the work buffers cannot be allocated. */
static int
onyxrt_maxpool(const float *x, float *y, const Geometry *g)
{
    MaxPool m = {x, y, g, 0};
    const idx plane_work = g->oh * g->ow * g->kh * g->kw;
    parallel_for(maxpool_planes, &m, g->n * g->c, 1 + MIN_PARALLEL_FLOATS / (plane_work + 1));
    return m.failed ? -1 : 0;
}

PyObject *
py_maxpool(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *yo, *geo;
    if (!PyArg_ParseTuple(args, "OOO", &xo, &yo, &geo)) {
        return NULL;
    }
    Geometry g;
    if (parse_geometry(geo, &g) < 0) {
        return NULL;
    }
    enum { X, Y, VIEWS };
    Py_buffer views[VIEWS];
    memset(views, 0, sizeof(views));
    if (get_f32(xo, &views[X], 0, g.n * g.c * g.h * g.w, "x") < 0 ||
        get_f32(yo, &views[Y], 1, g.n * g.c * g.oh * g.ow, "y") < 0) {
        release_all(views, VIEWS);
        return NULL;
    }
    int rc = 0;
    if (g.n > 0 && g.oh > 0 && g.ow > 0) {
        Py_BEGIN_ALLOW_THREADS
        rc = onyxrt_maxpool((const float *)views[X].buf, (float *)views[Y].buf, &g);
        Py_END_ALLOW_THREADS
    }
    release_all(views, VIEWS);
    if (rc < 0) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}
