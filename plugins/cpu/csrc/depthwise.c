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

typedef struct {
    const float *x, *w;
    float *y;
    const Geometry *g;
    idx m_per_g;
    const float *bias, *z; /* epilogue, applied to each plane while it is in cache */
    int act;
    float p0, p1;
    int failed; /* set when the work buffers could not be allocated */
} DepthwiseArgs;

/* Input planes [begin, end) of the N * C. */
static void
depthwise_planes(DepthwiseArgs *a, idx begin, idx end)
{
    const Geometry *g = a->g;
    const idx taps = g->kh * g->kw;
    const idx m_per_g = a->m_per_g;
    const PhaseLayout p = phase_layout(g);
    float *buf = (float *)malloc(sizeof(float) * (size_t)(p.phases * p.plane + p.span));
    idx *offsets = (idx *)malloc(sizeof(idx) * (size_t)taps);
    if (buf == NULL || offsets == NULL) {
        free(buf);
        free(offsets);
        a->failed = 1;
        return;
    }
    float *wide = buf + p.phases * p.plane;
    for (idx ky = 0; ky < g->kh; ky++) {
        for (idx kx = 0; kx < g->kw; kx++) {
            offsets[ky * g->kw + kx] = tap_offset(g, &p, ky, kx);
        }
    }
    for (idx plane = begin; plane < end; plane++) {
        const idx n = plane / g->c, ic = plane % g->c;
        fill_phases(a->x + plane * g->h * g->w, g, &p, buf, 0.0f);
        for (idx j = 0; j < m_per_g; j++) {
            const idx oc = ic * m_per_g + j;
            float *yo = a->y + (n * g->c * m_per_g + oc) * g->oh * g->ow;
            /* Straight into y when rows need no compaction. */
            float *dst = p.wq == g->ow ? yo : wide;
            if (taps == 9) {
                onyxrt_depthwise_taps9(buf, offsets, a->w + oc * taps, dst, p.span);
            } else {
                onyxrt_depthwise_taps(buf, offsets, taps, a->w + oc * taps, dst, p.span);
            }
            if (dst == wide) {
                for (idx oy = 0; oy < g->oh; oy++) {
                    memcpy(yo + oy * g->ow, wide + oy * p.wq, sizeof(float) * (size_t)g->ow);
                }
            }
            if (a->bias || a->z || a->act != ACT_NONE) {
                const idx area = g->oh * g->ow;
                onyxrt_epilogue(yo, 0, 1, 1, area, a->bias ? a->bias + oc : NULL,
                                a->z ? a->z + (yo - a->y) : NULL, a->act, a->p0, a->p1);
            }
        }
    }
    free(buf);
    free(offsets);
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
    if (get_f32(yo, &y, 1, g.n * g.c * m_per_g * g.oh * g.ow, "y") < 0) {
        release(&x);
        release(&w);
        return NULL;
    }
    Py_buffer b, z;
    const idx y_floats = g.n * g.c * m_per_g * g.oh * g.ow;
    if (get_optional_f32(bo, &b, g.c * m_per_g, "bias") < 0 ||
        get_optional_f32(zo, &z, y_floats, "z") < 0) {
        release(&x);
        release(&w);
        release(&y);
        release(&b);
        return NULL;
    }
    DepthwiseArgs a = {(const float *)x.buf, (const float *)w.buf, (float *)y.buf, &g, m_per_g,
                       (const float *)b.buf, (const float *)z.buf, act, p0, p1, 0};
    if (g.oh > 0 && g.ow > 0) {
        Py_BEGIN_ALLOW_THREADS
        depthwise_planes(&a, 0, g.n * g.c);
        Py_END_ALLOW_THREADS
    }
    release(&x);
    release(&w);
    release(&y);
    release(&b);
    release(&z);
    if (a.failed) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}
