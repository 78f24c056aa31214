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

/* ---- global average ---------------------------------------------------------------- */

/* GlobalAveragePool of float32 NCHW: each (image, channel) plane of `plane` contiguous
 * values to its mean. numpy's mean over the last two axes walks such short rows (a 7 x 7
 * plane) one reduction at a time: 1280 planes of 49 took 33 µs, this 2-3. The sum runs in
 * double over eight partial sums (no worse than numpy's pairwise float32 sum for any plane
 * size), then one division and one rounding to float32. */
typedef struct {
    const float *x;
    float *y;
    idx plane;
} GlobalAverage;

static void
global_average_rows(void *ctx, idx begin, idx end)
{
    const GlobalAverage *g = (const GlobalAverage *)ctx;
    const idx plane = g->plane;
    for (idx r = begin; r < end; r++) {
        const float *restrict row = g->x + r * plane;
        double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        idx i = 0;
        for (; i + 8 <= plane; i += 8) {
            for (int l = 0; l < 8; l++) {
                part[l] += (double)row[i + l];
            }
        }
        for (; i < plane; i++) {
            part[0] += (double)row[i];
        }
        const double sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
        g->y[r] = (float)(sum / (double)plane);
    }
}

PyObject *
py_global_average(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *yo;
    idx rows, plane;
    if (!PyArg_ParseTuple(args, "OOnn", &xo, &yo, &rows, &plane)) {
        return NULL;
    }
    if (check_positive("rows", rows, 0) < 0 || check_positive("plane", plane, 1) < 0) {
        return NULL;
    }
    enum { X, Y, VIEWS };
    Py_buffer views[VIEWS];
    memset(views, 0, sizeof(views));
    if (get_f32(xo, &views[X], 0, rows * plane, "x") < 0 || get_f32(yo, &views[Y], 1, rows, "y") < 0) {
        release_all(views, VIEWS);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    GlobalAverage g = {(const float *)views[X].buf, (float *)views[Y].buf, plane};
    parallel_for(global_average_rows, &g, rows, 1 + 4 * MIN_PARALLEL_FLOATS / plane);
    Py_END_ALLOW_THREADS
    release_all(views, VIEWS);
    Py_RETURN_NONE;
}
