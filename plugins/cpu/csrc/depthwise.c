/* Depthwise convolution (one input channel per group) on phase planes. */

#include "native.h"

MULTIVERSION void
onyxrt_depthwise_taps9(const float *buf, const idx *offsets, const float *wk, float *wide,
                       idx span)
{
    const float *restrict s0 = buf + offsets[0], *restrict s1 = buf + offsets[1];
    const float *restrict s2 = buf + offsets[2], *restrict s3 = buf + offsets[3];
    const float *restrict s4 = buf + offsets[4], *restrict s5 = buf + offsets[5];
    const float *restrict s6 = buf + offsets[6], *restrict s7 = buf + offsets[7];
    const float *restrict s8 = buf + offsets[8];
    float *restrict out = wide;
    const float w0 = wk[0], w1 = wk[1], w2 = wk[2], w3 = wk[3], w4 = wk[4];
    const float w5 = wk[5], w6 = wk[6], w7 = wk[7], w8 = wk[8];
    for (idx i = 0; i < span; i++) {
        float acc = w0 * s0[i];
        acc += w1 * s1[i];
        acc += w2 * s2[i];
        acc += w3 * s3[i];
        acc += w4 * s4[i];
        acc += w5 * s5[i];
        acc += w6 * s6[i];
        acc += w7 * s7[i];
        acc += w8 * s8[i];
        out[i] = acc;
    }
}

MULTIVERSION void
onyxrt_depthwise_taps(const float *buf, const idx *offsets, idx taps, const float *wk,
                      float *wide, idx span)
{
    float *restrict out = wide;
    for (idx i = 0; i < span; i++) {
        out[i] = 0.0f;
    }
    for (idx t = 0; t < taps; t++) {
        const float *restrict src = buf + offsets[t];
        const float wv = wk[t];
        for (idx i = 0; i < span; i++) {
            out[i] += wv * src[i];
        }
    }
}

/* One depthwise call: y = depthwise(x, w), with the epilogue (bias per output channel,
 * residual z, activation) applied to each output plane while it is in cache. */
typedef struct {
    const float *x, *w, *bias, *z;
    float *y;
    const Geometry *g;
    idx m_per_g;
    int act;
    float p0, p1;
    int failed; /* a piece could not allocate its work buffers */
} Depthwise;

/* Input planes [begin, end). */
static void
depthwise_planes(void *ctx, idx begin, idx end)
{
    const Depthwise *d = (const Depthwise *)ctx;
    const Geometry *g = d->g;
    const idx taps = g->kh * g->kw;
    PhaseWork work;
    if (phase_work_open(&work, g) < 0) {
        __atomic_store_n(&((Depthwise *)ctx)->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (idx plane = begin; plane < end; plane++) {
        const idx n = plane / g->c, ic = plane % g->c;
        fill_phases(d->x + plane * g->h * g->w, g, &work.p, work.buf, 0.0f);
        for (idx j = 0; j < d->m_per_g; j++) {
            const idx oc = ic * d->m_per_g + j;
            float *yo = d->y + (n * g->c * d->m_per_g + oc) * g->oh * g->ow;
            float *target = phase_work_target(&work, yo, g);
            if (taps == 9) {
                onyxrt_depthwise_taps9(work.buf, work.offsets, d->w + oc * taps, target,
                                       work.p.span);
            } else {
                onyxrt_depthwise_taps(work.buf, work.offsets, taps, d->w + oc * taps, target,
                                      work.p.span);
            }
            phase_work_store(&work, target, yo, g);
            if (d->bias || d->z || d->act != ACT_NONE) {
                onyxrt_epilogue(yo, 0, 1, 1, g->oh * g->ow, d->bias ? d->bias + oc : NULL,
                                d->z ? d->z + (yo - d->y) : NULL, d->act, d->p0, d->p1);
            }
        }
    }
    phase_work_close(&work);
}

/* Split by input planes; -1 when work buffers cannot be allocated. */
static int
onyxrt_depthwise(Depthwise *d)
{
    const Geometry *g = d->g;
    const idx plane_work = g->oh * g->ow * g->kh * g->kw * d->m_per_g;
    parallel_for(depthwise_planes, d, g->n * g->c, 1 + MIN_PARALLEL_FLOATS / (plane_work + 1));
    return d->failed ? -1 : 0;
}

PyObject *
py_depthwise(PyObject *self, PyObject *args)
{
    PyObject *xo, *wo, *yo, *geo, *bo = Py_None, *zo = Py_None;
    idx m_per_g;
    int act = ACT_NONE;
    float p0 = 0.0f, p1 = 0.0f;
    if (!PyArg_ParseTuple(args, "OOOOn|OOiff", &xo, &wo, &yo, &geo, &m_per_g, &bo, &zo, &act, &p0,
                          &p1)) {
        return NULL;
    }
    if (act < ACT_NONE || act > ACT_LEAKY) {
        PyErr_Format(PyExc_ValueError, "unknown activation code %d", act);
        return NULL;
    }
    Geometry g;
    if (parse_geometry(geo, &g) < 0 || check_positive("outputs per group", m_per_g, 1) < 0) {
        return NULL;
    }
    Py_buffer x, w, y;
    if (get_f32(xo, &x, 0, g.n * g.c * g.h * g.w, "x") < 0) {
        return NULL;
    }
    if (get_f32(wo, &w, 0, g.c * m_per_g * g.kh * g.kw, "w") < 0) {
        release(&x);
        return NULL;
    }
    const idx y_floats = g.n * g.c * m_per_g * g.oh * g.ow;
    if (get_f32(yo, &y, 1, y_floats, "y") < 0) {
        release(&x);
        release(&w);
        return NULL;
    }
    Py_buffer b, z;
    if (get_optional_f32(bo, &b, g.c * m_per_g, "bias") < 0 ||
        get_optional_f32(zo, &z, y_floats, "z") < 0) {
        release(&x);
        release(&w);
        release(&y);
        release(&b);
        return NULL;
    }
    int rc = 0;
    if (g.n > 0 && g.oh > 0 && g.ow > 0) {
        Py_BEGIN_ALLOW_THREADS
        Depthwise d = {(const float *)x.buf, (const float *)w.buf, (const float *)b.buf,
                       (const float *)z.buf, (float *)y.buf, &g, m_per_g, act, p0, p1, 0};
        rc = onyxrt_depthwise(&d);
        Py_END_ALLOW_THREADS
    }
    release(&x);
    release(&w);
    release(&y);
    release(&b);
    release(&z);
    if (rc < 0) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}
