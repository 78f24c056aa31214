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

/* The epilogue on output plane yo (channel oc) while it is in cache. */
static void
finish_plane(const Depthwise *d, idx oc, float *yo)
{
    if (d->bias || d->z || d->act != ACT_NONE) {
        onyxrt_epilogue(yo, 0, 1, 1, d->g->oh * d->g->ow, d->bias ? d->bias + oc : NULL,
                        d->z ? d->z + (yo - d->y) : NULL, d->act, d->p0, d->p1);
    }
}

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
            finish_plane(d, oc, yo);
        }
    }
    phase_work_close(&work);
}

/* Small planes, 16 channels at a time ("lanes"): on a 7x7 or 14x14 plane the phase-plane
 * loops above are mostly setup (a dozen short rows to copy, pad and compact per plane),
 * so instead the 16 channels' padded inputs are interleaved (position-major, 16 floats per
 * position) and every output position is one 16-wide multiply-add per tap, with no
 * wasted lane, then spread back into the 16 output planes. The taps are summed in the
 * same order as onyxrt_depthwise_taps, so the results are the same bits. */
#define LANES 16
/* Where lanes win here (measured per MobileNetV2 layer against the phase planes): output
 * planes of up to 64 positions (7x7: 2.2x faster), or 256 with a stride (14x14 from
 * 28x28: 1.3x; 7x7 from 14x14: 2x). Stride-1 14x14 planes were 10-20% slower: their rows
 * already vectorize, and interleaving costs a pass each way. */
#define LANE_PLANE 64
#define LANE_PLANE_STRIDED 256

typedef float v16l __attribute__((vector_size(64), aligned(4)));

/* The 16 output planes' values at every position of `out` (oh * ow positions x 16). */
MULTIVERSION static void
depthwise_lanes_taps(const float *in, idx wp, const idx *offsets, idx taps, const float *wt,
                     const Geometry *g, float *out)
{
    for (idx oy = 0; oy < g->oh; oy++) {
        for (idx ox = 0; ox < g->ow; ox++) {
            const float *base = in + (oy * g->sh * wp + ox * g->sw) * LANES;
            v16l acc = *(const v16l *)wt * *(const v16l *)(base + offsets[0]);
            for (idx t = 1; t < taps; t++) {
                acc += *(const v16l *)(wt + t * LANES) * *(const v16l *)(base + offsets[t]);
            }
            *(v16l *)(out + (oy * g->ow + ox) * LANES) = acc;
        }
    }
}

/* Groups [begin, end) of 16 channels (group = image * channels / 16 + channel / 16). */
static void
depthwise_lane_groups(void *ctx, idx begin, idx end)
{
    const Depthwise *d = (const Depthwise *)ctx;
    const Geometry *g = d->g;
    const idx taps = g->kh * g->kw, positions = g->oh * g->ow, plane = g->h * g->w;
    /* the padded input box the outputs read */
    const idx hp = (g->oh - 1) * g->sh + (g->kh - 1) * g->dh + 1;
    const idx wp = (g->ow - 1) * g->sw + (g->kw - 1) * g->dw + 1;
    float *in = (float *)malloc(sizeof(float) * (size_t)(hp * wp * LANES));
    float *out = (float *)malloc(sizeof(float) * (size_t)(positions * LANES));
    float *wt = (float *)malloc(sizeof(float) * (size_t)(taps * LANES));
    idx *offsets = (idx *)malloc(sizeof(idx) * (size_t)taps);
    if (in == NULL || out == NULL || wt == NULL || offsets == NULL) {
        __atomic_store_n(&((Depthwise *)ctx)->failed, 1, __ATOMIC_RELAXED);
        free(in);
        free(out);
        free(wt);
        free(offsets);
        return;
    }
    for (idx ky = 0; ky < g->kh; ky++) {
        for (idx kx = 0; kx < g->kw; kx++) {
            offsets[ky * g->kw + kx] = (ky * g->dh * wp + kx * g->dw) * LANES;
        }
    }
    const idx groups_per_image = g->c / LANES;
    for (idx group = begin; group < end; group++) {
        const idx n = group / groups_per_image, c0 = (group % groups_per_image) * LANES;
        const float *x = d->x + (n * g->c + c0) * plane;
        for (idx r = 0; r < hp; r++) {
            const idx iy = r - g->ph;
            for (idx q = 0; q < wp; q++) {
                const idx ix = q - g->pw;
                float *dst = in + (r * wp + q) * LANES;
                if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) {
                    fill(dst, LANES, 0.0f);
                } else {
                    const float *src = x + iy * g->w + ix;
                    for (idx j = 0; j < LANES; j++) {
                        dst[j] = src[j * plane];
                    }
                }
            }
        }
        for (idx t = 0; t < taps; t++) {
            for (idx j = 0; j < LANES; j++) {
                wt[t * LANES + j] = d->w[(c0 + j) * taps + t];
            }
        }
        depthwise_lanes_taps(in, wp, offsets, taps, wt, g, out);
        for (idx j = 0; j < LANES; j++) {
            const idx oc = c0 + j;
            float *yo = d->y + (n * g->c + oc) * positions;
            for (idx p = 0; p < positions; p++) {
                yo[p] = out[p * LANES + j];
            }
            finish_plane(d, oc, yo);
        }
    }
    free(in);
    free(out);
    free(wt);
    free(offsets);
}

/* Split by input planes (or groups of 16 of them on small planes); -1 when work buffers
 * cannot be allocated. */
static int
onyxrt_depthwise(Depthwise *d)
{
    const Geometry *g = d->g;
    const idx plane_work = g->oh * g->ow * g->kh * g->kw * d->m_per_g;
    const idx positions = g->oh * g->ow;
    const int strided = g->sh > 1 || g->sw > 1;
    if (d->m_per_g == 1 && g->c % LANES == 0 &&
        (positions <= LANE_PLANE || (strided && positions <= LANE_PLANE_STRIDED))) {
        parallel_for(depthwise_lane_groups, d, g->n * g->c / LANES,
                     1 + MIN_PARALLEL_FLOATS / (plane_work * LANES + 1));
    } else {
        parallel_for(depthwise_planes, d, g->n * g->c,
                     1 + MIN_PARALLEL_FLOATS / (plane_work + 1));
    }
    return d->failed ? -1 : 0;
}

PyObject *
py_depthwise(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *wo, *yo, *geo, *bo = Py_None, *zo = Py_None;
    idx m_per_g;
    int act = ACT_NONE;
    float p0 = 0.0f, p1 = 0.0f;
    if (!PyArg_ParseTuple(args, "OOOOn|OOiff", &xo, &wo, &yo, &geo, &m_per_g, &bo, &zo, &act, &p0,
                          &p1)) {
        return NULL;
    }
    if (check_activation(act) < 0) {
        return NULL;
    }
    Geometry g;
    if (parse_geometry(geo, &g) < 0 || check_positive("outputs per group", m_per_g, 1) < 0) {
        return NULL;
    }
    const idx y_floats = g.n * g.c * m_per_g * g.oh * g.ow;
    enum { X, W, Y, B, Z, VIEWS };
    Py_buffer views[VIEWS];
    memset(views, 0, sizeof(views));
    if (get_f32(xo, &views[X], 0, g.n * g.c * g.h * g.w, "x") < 0 ||
        get_f32(wo, &views[W], 0, g.c * m_per_g * g.kh * g.kw, "w") < 0 ||
        get_f32(yo, &views[Y], 1, y_floats, "y") < 0 ||
        get_optional_f32(bo, &views[B], g.c * m_per_g, "bias") < 0 ||
        get_optional_f32(zo, &views[Z], y_floats, "z") < 0) {
        release_all(views, VIEWS);
        return NULL;
    }
    int rc = 0;
    if (g.n > 0 && g.oh > 0 && g.ow > 0) {
        Py_BEGIN_ALLOW_THREADS
        Depthwise d = {(const float *)views[X].buf, (const float *)views[W].buf,
                       (const float *)views[B].buf, (const float *)views[Z].buf,
                       (float *)views[Y].buf, &g, m_per_g, act, p0, p1, 0};
        rc = onyxrt_depthwise(&d);
        Py_END_ALLOW_THREADS
    }
    release_all(views, VIEWS);
    if (rc < 0) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}
