/*
 * onyxrt_cpu._native: the CPU provider's compiled inner loops (float32).
 *
 * numpy runs these operations as several whole-array passes with short inner loops
 * (a 3x3 depthwise convolution is ~19 passes over 7-element rows at 7x7); here each is
 * one pass whose inner loop the compiler vectorizes. Only what numpy does badly lives
 * here: everything else, and every other dtype, stays in numpy. The module is optional:
 * onyxrt_cpu.native falls back to the numpy kernels when it was not built.
 *
 * Interface rules (checked by onyxrt_cpu.native before calling, and again here so that
 * no call can read or write out of bounds): every array is a C-contiguous float32
 * buffer, dimensions are passed as integers, and the GIL is released while computing.
 * Built with function multiversioning on x86-64 Linux (AVX-512 / AVX2 / baseline picked
 * at load time), so a wheel built here runs on any x86-64 machine.
 *
 * Everything runs on the calling thread. Splitting these loops over threads was measured
 * and lost: after each GEMM, OpenBLAS's worker threads keep spinning for a while, and a
 * thread of ours then shares a core with one of them (ResNet-50's conv epilogues went
 * from 2 to 16 ms per run on 2 cores).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(ONYXRT_NO_CLONES)
#define MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MULTIVERSION
#endif

typedef Py_ssize_t idx;

/* ------------------------------------------------------------------ buffers */

/* A float32 view of `obj`; `need` is the minimum number of floats it must hold. */
static int
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

/* Like get_f32, for an optional argument: None leaves view->buf NULL. */
static int
get_optional_f32(PyObject *obj, Py_buffer *view, idx need, const char *name)
{
    if (obj == Py_None) {
        memset(view, 0, sizeof(*view));
        return 0;
    }
    return get_f32(obj, view, 0, need, name);
}

static void
release(Py_buffer *view)
{
    if (view->buf != NULL || view->obj != NULL) {
        PyBuffer_Release(view);
    }
}

static int
check_positive(const char *what, idx value, idx minimum)
{
    if (value < minimum) {
        PyErr_Format(PyExc_ValueError, "%s must be >= %zd, got %zd", what, minimum, value);
        return -1;
    }
    return 0;
}

/* [lo, hi): the outputs o in [0, n_out) whose input o * stride + offset lies in [0, size). */
static void
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

/* ------------------------------------------------------------------ GELU (erf) */

/* Degree of the erf polynomial in onyxrt_cpu.kernels._special (erf_float32). */
#define ERF_COEFFS 19
#define GELU_BLOCK 512

MULTIVERSION void
onyxrt_gelu_erf(const float *x, float *y, idx n, const float *coeffs, float clamp,
                float t_scale, float scale)
{
    /* y = x * (0.5 + 0.5 * erf(x / sqrt 2)), erf(u) = u * q(2 u^2 / clamp^2 - 1) with |u|
     * clamped and t_scale = 2 / clamp^2: the polynomial and operations of erf_float32. Blocks keep the
     * temporaries in L1 and give the compiler simple loops to vectorize. */
    float a[GELU_BLOCK], t[GELU_BLOCK], acc[GELU_BLOCK];
    for (idx start = 0; start < n; start += GELU_BLOCK) {
        idx m = n - start < GELU_BLOCK ? n - start : GELU_BLOCK;
        const float *xs = x + start;
        for (idx i = 0; i < m; i++) {
            float u = fabsf(xs[i] * scale);
            a[i] = u < clamp ? u : clamp; /* NaN -> clamp; the final * x gives NaN */
            float tt = a[i] * a[i];
            t[i] = tt * t_scale - 1.0f;
            acc[i] = coeffs[ERF_COEFFS - 1];
        }
        for (int k = ERF_COEFFS - 2; k >= 0; k--) {
            const float c = coeffs[k];
            for (idx i = 0; i < m; i++) {
                acc[i] = acc[i] * t[i] + c;
            }
        }
        float *ys = y + start;
        for (idx i = 0; i < m; i++) {
            float e = copysignf(acc[i] * a[i], xs[i]);
            ys[i] = (e * 0.5f + 0.5f) * xs[i];
        }
    }
}

static PyObject *
py_gelu_erf(PyObject *self, PyObject *args)
{
    PyObject *xo, *yo, *co;
    float clamp, t_scale, scale;
    if (!PyArg_ParseTuple(args, "OOOfff", &xo, &yo, &co, &clamp, &t_scale, &scale)) {
        return NULL;
    }
    Py_buffer x, y, c;
    if (get_f32(xo, &x, 0, 0, "x") < 0) {
        return NULL;
    }
    idx n = x.len / 4;
    if (get_f32(yo, &y, 1, n, "out") < 0) {
        release(&x);
        return NULL;
    }
    if (get_f32(co, &c, 0, ERF_COEFFS, "coefficients") < 0) {
        release(&x);
        release(&y);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    onyxrt_gelu_erf((const float *)x.buf, (float *)y.buf, n, (const float *)c.buf, clamp,
                    t_scale, scale);
    Py_END_ALLOW_THREADS
    release(&x);
    release(&y);
    release(&c);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ conv epilogue */

enum { ACT_NONE = 0, ACT_RELU = 1, ACT_CLIP = 2, ACT_LEAKY = 3 };

MULTIVERSION void
onyxrt_epilogue(float *y, idx r_begin, idx r_end, idx channels, idx length, const float *bias,
                const float *z, int act, float p0, float p1)
{
    /* y[r, :] = act(y[r, :] + bias[r % channels] + z[r, :]) in one pass, rows [r_begin, r_end). */
    for (idx r = r_begin; r < r_end; r++) {
        float *yr = y + r * length;
        const float b = bias ? bias[r % channels] : 0.0f;
        if (z) {
            const float *zr = z + r * length;
            for (idx i = 0; i < length; i++) {
                yr[i] = yr[i] + b + zr[i];
            }
        } else if (bias) {
            for (idx i = 0; i < length; i++) {
                yr[i] += b;
            }
        }
        switch (act) {
        case ACT_RELU:
            for (idx i = 0; i < length; i++) {
                /* max(y, 0) as numpy's maximum: NaN stays NaN */
                yr[i] = (yr[i] < 0.0f) ? 0.0f : yr[i];
            }
            break;
        case ACT_CLIP:
            for (idx i = 0; i < length; i++) {
                float v = (yr[i] < p0) ? p0 : yr[i];
                yr[i] = (v > p1) ? p1 : v;
            }
            break;
        case ACT_LEAKY:
            for (idx i = 0; i < length; i++) {
                float v = yr[i];
                yr[i] = (v < 0.0f) ? v * p0 : v;
            }
            break;
        default:
            break;
        }
    }
}

static PyObject *
py_epilogue(PyObject *self, PyObject *args)
{
    PyObject *yo, *bo, *zo;
    idx channels, length;
    int act;
    float p0, p1;
    if (!PyArg_ParseTuple(args, "OnnOOiff", &yo, &channels, &length, &bo, &zo, &act, &p0, &p1)) {
        return NULL;
    }
    if (check_positive("channels", channels, 1) < 0 || check_positive("length", length, 0) < 0) {
        return NULL;
    }
    if (act < ACT_NONE || act > ACT_LEAKY) {
        PyErr_Format(PyExc_ValueError, "unknown activation code %d", act);
        return NULL;
    }
    Py_buffer y, b, z;
    if (get_f32(yo, &y, 1, 0, "y") < 0) {
        return NULL;
    }
    idx n = y.len / 4;
    idx rows = length ? n / length : 0;
    if (rows * length != n || rows % channels != 0) {
        release(&y);
        PyErr_Format(PyExc_ValueError, "y holds %zd floats: not a whole number of %zd x %zd images",
                     n, channels, length);
        return NULL;
    }
    if (get_optional_f32(bo, &b, channels, "bias") < 0) {
        release(&y);
        return NULL;
    }
    if (get_optional_f32(zo, &z, n, "z") < 0) {
        release(&y);
        release(&b);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    onyxrt_epilogue((float *)y.buf, 0, rows, channels, length, (const float *)b.buf,
                    (const float *)z.buf, act, p0, p1);
    Py_END_ALLOW_THREADS
    release(&y);
    release(&b);
    release(&z);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ 2-D geometry */

typedef struct {
    idx n, c, h, w;       /* input (N, C, H, W) */
    idx kh, kw;           /* kernel */
    idx oh, ow;           /* output */
    idx sh, sw, ph, pw, dh, dw; /* strides, leading pads, dilations */
} Geometry;

static int
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

/* ------------------------------------------------------------------ depthwise conv */

/* Depthwise convolution works on "phase planes": along an axis with stride s, output o
 * and tap k read input o*s + k*d - pad = (o + q)*s + b - pad with q = k*d / s and
 * b = k*d % s, so phase plane b (every s-th padded input position, starting at b) holds
 * what tap k reads for all outputs at offset q. With the phase planes of one input
 * channel laid out flat, row width wq, every tap reads one contiguous run of the same
 * length as the outputs: a 3x3 stride-2 kernel is nine unit-stride multiply-adds, and a
 * 7x7 output is one loop over 7 rows at once rather than seven loops of 7. Outputs are
 * computed on rows of width wq (wq - ow columns of them unused) and then compacted. */

typedef struct {
    idx hq, wq;       /* phase plane extent */
    idx plane;        /* floats per phase plane, with slack for the last row's overrun */
    idx phases;       /* sh * sw */
    idx span;         /* outputs computed per plane: oh * wq */
} PhaseLayout;

static PhaseLayout
phase_layout(const Geometry *g)
{
    PhaseLayout p;
    const idx qy = (g->kh - 1) * g->dh / g->sh;
    const idx qx = (g->kw - 1) * g->dw / g->sw;
    p.hq = g->oh + qy;
    p.wq = g->ow + qx;
    p.plane = p.hq * p.wq + qx;
    p.phases = g->sh * g->sw;
    p.span = g->oh * p.wq;
    return p;
}

static inline void
fill(float *dst, idx n, float value)
{
    for (idx i = 0; i < n; i++) {
        dst[i] = value;
    }
}

/* The phase planes of the input plane x (h, w) into buf (phases * plane floats), `pad`
 * where they fall outside x. */
MULTIVERSION void
fill_phases(const float *x, const Geometry *g, const PhaseLayout *p, float *buf, float pad)
{
    /* Locals, not g->...: stores through dst would otherwise force reloads (Python builds
     * extensions with -fno-strict-aliasing). */
    const idx h = g->h, w = g->w, sh = g->sh, sw = g->sw, ph = g->ph, pw = g->pw;
    const idx hq = p->hq, wq = p->wq, plane_floats = p->plane;
    for (idx by = 0; by < sh; by++) {
        for (idx bx = 0; bx < sw; bx++) {
            float *plane = buf + (by * sw + bx) * plane_floats;
            idx lo, hi;
            valid_range(wq, sw, bx - pw, w, &lo, &hi);
            for (idx r = 0; r < hq; r++) {
                float *restrict dst = plane + r * wq;
                const idx iy = r * sh + by - ph;
                if (iy < 0 || iy >= h || hi <= lo) {
                    fill(dst, wq, pad);
                    continue;
                }
                const float *restrict src = x + iy * w + bx - pw;
                fill(dst, lo, pad);
                if (sw == 1) {
                    memcpy(dst + lo, src + lo, sizeof(float) * (size_t)(hi - lo));
                } else if (sw == 2) {
                    for (idx c = lo; c < hi; c++) {
                        dst[c] = src[2 * c];
                    }
                } else {
                    for (idx c = lo; c < hi; c++) {
                        dst[c] = src[c * sw];
                    }
                }
                fill(dst + hi, wq - hi, pad);
            }
            fill(plane + hq * wq, plane_floats - hq * wq, pad);
        }
    }
}

/* Where tap (ky, kx) starts reading, relative to the phase buffer. */
static idx
tap_offset(const Geometry *g, const PhaseLayout *p, idx ky, idx kx)
{
    const idx ry = ky * g->dh, rx = kx * g->dw;
    const idx phase = (ry % g->sh) * g->sw + rx % g->sw;
    return phase * p->plane + (ry / g->sh) * p->wq + rx / g->sw;
}

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

static PyObject *
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

/* ------------------------------------------------------------------ max pooling */

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

static PyObject *
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

/* ------------------------------------------------------------------ im2col */

MULTIVERSION void
onyxrt_im2col(const float *x, float *cols, const Geometry *g, idx r0, idx rows, idx c_begin,
              idx c_end)
{
    /* cols (C, KH*KW, N, rows, OW) from x (N, C, H, W): output rows [r0, r0 + rows),
     * zeros where a tap falls in the padding. (Locals rather than g->...: see
     * fill_phases.) */
    const idx n = g->n, c_in = g->c, h = g->h, w = g->w, kh = g->kh, kw = g->kw;
    const idx ow = g->ow, sh = g->sh, sw = g->sw, ph = g->ph, pw = g->pw;
    const idx dh = g->dh, dw = g->dw, taps = kh * kw;
    for (idx c = c_begin; c < c_end; c++) {
        for (idx ky = 0; ky < kh; ky++) {
            for (idx kx = 0; kx < kw; kx++) {
                const idx t = ky * kw + kx;
                const idx off = kx * dw - pw;
                idx lo, hi;
                valid_range(ow, sw, off, w, &lo, &hi);
                for (idx b = 0; b < n; b++) {
                    const float *xi = x + (b * c_in + c) * h * w;
                    float *dst = cols + (((c * taps + t) * n + b) * rows) * ow;
                    for (idx r = 0; r < rows; r++, dst += ow) {
                        const idx iy = (r0 + r) * sh + ky * dh - ph;
                        if (iy < 0 || iy >= h || hi <= lo) {
                            memset(dst, 0, sizeof(float) * (size_t)ow);
                            continue;
                        }
                        const float *restrict src = xi + iy * w + off;
                        float *restrict out = dst;
                        /* Plain loops, not memset/memcpy: rows are often 7-28 floats,
                         * where a library call costs more than the copy. */
                        for (idx ox = 0; ox < lo; ox++) {
                            out[ox] = 0.0f;
                        }
                        if (sw == 1) {
                            for (idx ox = lo; ox < hi; ox++) {
                                out[ox] = src[ox];
                            }
                        } else if (sw == 2) {
                            for (idx ox = lo; ox < hi; ox++) {
                                out[ox] = src[2 * ox];
                            }
                        } else {
                            for (idx ox = lo; ox < hi; ox++) {
                                out[ox] = src[ox * sw];
                            }
                        }
                        for (idx ox = hi; ox < ow; ox++) {
                            out[ox] = 0.0f;
                        }
                    }
                }
            }
        }
    }
}

static PyObject *
py_im2col(PyObject *self, PyObject *args)
{
    PyObject *xo, *co, *geo;
    idx r0, rows;
    if (!PyArg_ParseTuple(args, "OOOnn", &xo, &co, &geo, &r0, &rows)) {
        return NULL;
    }
    Geometry g;
    if (parse_geometry(geo, &g) < 0 || check_positive("first row", r0, 0) < 0 ||
        check_positive("rows", rows, 0) < 0) {
        return NULL;
    }
    if (r0 + rows > g.oh) {
        PyErr_Format(PyExc_ValueError, "rows [%zd, %zd) exceed the output height %zd", r0,
                     r0 + rows, g.oh);
        return NULL;
    }
    Py_buffer x, cols;
    if (get_f32(xo, &x, 0, g.n * g.c * g.h * g.w, "x") < 0) {
        return NULL;
    }
    if (get_f32(co, &cols, 1, g.c * g.kh * g.kw * g.n * rows * g.ow, "cols") < 0) {
        release(&x);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    onyxrt_im2col((const float *)x.buf, (float *)cols.buf, &g, r0, rows, 0, g.c);
    Py_END_ALLOW_THREADS
    release(&x);
    release(&cols);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ Winograd F(2x2, 3x3) */

/* A 3x3 stride-1 convolution as Winograd's F(2x2, 3x3): each 2x2 output tile is
 * A^T [(G g G^T) . (B^T d B)] A for the tile's 4x4 input patch d, so the products become
 * 16 GEMMs (one per position of the 4x4 transform) of (M, C) x (C, tiles): 2.25x fewer
 * multiplications than im2col's (M, 9C) x (9C, positions). The filters are transformed
 * once in Python (G g G^T); here are the input transform (into V, (16, C, tiles)) and
 * the output transform (from the GEMMs' (16, M, tiles) into y, with bias, residual and
 * activation applied on the way out). Tiles of all images are numbered together:
 * tile = (n * TH + ty) * TW + tx. */

static int
winograd_geometry_ok(const Geometry *g)
{
    return g->kh == 3 && g->kw == 3 && g->sh == 1 && g->sw == 1 && g->dh == 1 && g->dw == 1;
}

/* The transforms' vector steps, as functions so that `restrict` on their parameters
 * tells the compiler the runs do not overlap (on local pointers it is ignored). */
static inline void
wg_rows(const float *restrict e, const float *restrict o, float *restrict h0,
        float *restrict h1, float *restrict h2, float *restrict h3, idx n)
{
    for (idx t = 0; t < n; t++) { /* d B along a row: columns E[t], O[t], E[t+1], O[t+1] */
        h0[t] = e[t] - e[t + 1];
        h1[t] = o[t] + e[t + 1];
        h2[t] = e[t + 1] - o[t];
        h3[t] = o[t] - o[t + 1];
    }
}

static inline void
wg_columns(const float *restrict r0, const float *restrict r1, const float *restrict r2,
           const float *restrict r3, float *restrict v0, float *restrict v1, float *restrict v2,
           float *restrict v3, idx n)
{
    for (idx t = 0; t < n; t++) { /* B^T (d B) down the four rows */
        v0[t] = r0[t] - r2[t];
        v1[t] = r1[t] + r2[t];
        v2[t] = r2[t] - r1[t];
        v3[t] = r1[t] - r3[t];
    }
}

static inline void
wg_out_rows(const float *restrict a0, const float *restrict a1, const float *restrict a2,
            const float *restrict a3, float *restrict s0, float *restrict s1, idx n)
{
    for (idx t = 0; t < n; t++) { /* A^T m */
        s0[t] = a0[t] + a1[t] + a2[t];
        s1[t] = a1[t] - a2[t] - a3[t];
    }
}

static inline void
wg_out_columns(const float *restrict c0, const float *restrict c1, const float *restrict c2,
               const float *restrict c3, float *restrict left, float *restrict right, float b,
               idx n)
{
    for (idx t = 0; t < n; t++) { /* (A^T m) A, plus the bias */
        left[t] = c0[t] + c1[t] + c2[t] + b;
        right[t] = c1[t] - c2[t] - c3[t] + b;
    }
}

static inline void
interleave_row(const float *restrict left, const float *restrict right, float *restrict y,
               idx pairs)
{
    for (idx t = 0; t < pairs; t++) {
        y[2 * t] = left[t];
        y[2 * t + 1] = right[t];
    }
}

/* Input transform of images' channels [c_begin, c_end): the padded plane is split into
 * even and odd columns (fill_phases, stride 2 across), so the four columns a tile reads
 * are the contiguous runs E[tx], O[tx], E[tx + 1], O[tx + 1] and everything vectorizes
 * over tx. */
MULTIVERSION void
onyxrt_winograd_input(const float *x, float *v, const Geometry *g, idx th, idx tw, float *buf)
{
    const idx tiles = g->n * th * tw;
    Geometry split = *g;
    split.sh = 1;
    split.sw = 2;
    PhaseLayout p;
    p.hq = 2 * th + 2;
    p.wq = tw + 1;
    p.plane = p.hq * p.wq;
    p.phases = 2;
    p.span = 0;
    float *h = buf + 2 * p.plane; /* 4 rows x 4 columns x tw */
    for (idx n = 0; n < g->n; n++) {
        for (idx c = 0; c < g->c; c++) {
            fill_phases(x + (n * g->c + c) * g->h * g->w, &split, &p, buf, 0.0f);
            const float *even = buf, *odd = buf + p.plane;
            for (idx ty = 0; ty < th; ty++) {
                for (int r = 0; r < 4; r++) {
                    const float *e = even + (2 * ty + r) * p.wq;
                    const float *o = odd + (2 * ty + r) * p.wq;
                    float *hr = h + r * 4 * tw;
                    wg_rows(e, o, hr, hr + tw, hr + 2 * tw, hr + 3 * tw, tw);
                }
                const idx base = (n * th + ty) * tw;
                for (int b = 0; b < 4; b++) {
                    float *vb = v + (b * g->c + c) * tiles + base;
                    const idx step = 4 * g->c * tiles; /* from V[a][b] to V[a + 1][b] */
                    wg_columns(h + b * tw, h + (4 + b) * tw, h + (8 + b) * tw, h + (12 + b) * tw,
                               vb, vb + step, vb + 2 * step, vb + 3 * step, tw);
                }
            }
        }
    }
}

/* Output transform of the GEMMs' products mt (16, M, tiles) into y (N, M, OH, OW), plus
 * bias, residual z (y's shape) and activation. */
MULTIVERSION void
onyxrt_winograd_output(const float *mt, float *y, const Geometry *g, idx m_out, idx th, idx tw,
                       const float *bias, const float *z, int act, float p0, float p1,
                       float *buf)
{
    const idx tiles = g->n * th * tw;
    const idx plane = m_out * tiles;
    float *s = buf;            /* 2 rows x 4 columns x tw */
    float *out = buf + 8 * tw; /* 2 x 2 x tw */
    for (idx n = 0; n < g->n; n++) {
        for (idx m = 0; m < m_out; m++) {
            const float b = bias ? bias[m] : 0.0f;
            float *ym = y + (n * m_out + m) * g->oh * g->ow;
            const float *zm = z ? z + (n * m_out + m) * g->oh * g->ow : NULL;
            for (idx ty = 0; ty < th; ty++) {
                const float *src = mt + m * tiles + (n * th + ty) * tw;
                for (int col = 0; col < 4; col++) {
                    const float *a = src + col * plane; /* products[a * 4 + col], a = 0 */
                    wg_out_rows(a, a + 4 * plane, a + 8 * plane, a + 12 * plane, s + col * tw,
                                s + (4 + col) * tw, tw);
                }
                for (int i = 0; i < 2; i++) {
                    const float *si = s + 4 * i * tw;
                    wg_out_columns(si, si + tw, si + 2 * tw, si + 3 * tw, out + 2 * i * tw,
                                   out + (2 * i + 1) * tw, b, tw);
                }
                for (int i = 0; i < 2; i++) {
                    const idx oy = 2 * ty + i;
                    if (oy >= g->oh) {
                        break;
                    }
                    float *yr = ym + oy * g->ow;
                    const float *left = out + (2 * i) * tw, *right = out + (2 * i + 1) * tw;
                    const idx pairs = g->ow / 2;
                    interleave_row(left, right, yr, pairs);
                    if (g->ow % 2) {
                        yr[g->ow - 1] = left[pairs];
                    }
                    if (zm || act != ACT_NONE) {
                        onyxrt_epilogue(yr, 0, 1, 1, g->ow, NULL, zm ? zm + oy * g->ow : NULL, act,
                                        p0, p1);
                    }
                }
            }
        }
    }
}

static PyObject *
py_winograd_input(PyObject *self, PyObject *args)
{
    PyObject *xo, *vo, *geo;
    if (!PyArg_ParseTuple(args, "OOO", &xo, &vo, &geo)) {
        return NULL;
    }
    Geometry g;
    if (parse_geometry(geo, &g) < 0) {
        return NULL;
    }
    if (!winograd_geometry_ok(&g)) {
        PyErr_SetString(PyExc_ValueError, "Winograd F(2x2, 3x3) needs a 3x3 kernel, stride 1, dilation 1");
        return NULL;
    }
    const idx th = (g.oh + 1) / 2, tw = (g.ow + 1) / 2;
    Py_buffer x, v;
    if (get_f32(xo, &x, 0, g.n * g.c * g.h * g.w, "x") < 0) {
        return NULL;
    }
    if (get_f32(vo, &v, 1, 16 * g.c * g.n * th * tw, "v") < 0) {
        release(&x);
        return NULL;
    }
    float *buf = (float *)malloc(sizeof(float) * (size_t)(2 * (2 * th + 2) * (tw + 1) + 16 * tw + 16));
    if (buf == NULL) {
        release(&x);
        release(&v);
        return PyErr_NoMemory();
    }
    if (th > 0 && tw > 0) {
        Py_BEGIN_ALLOW_THREADS
        onyxrt_winograd_input((const float *)x.buf, (float *)v.buf, &g, th, tw, buf);
        Py_END_ALLOW_THREADS
    }
    free(buf);
    release(&x);
    release(&v);
    Py_RETURN_NONE;
}

static PyObject *
py_winograd_output(PyObject *self, PyObject *args)
{
    PyObject *mo, *yo, *geo, *bo, *zo;
    idx m_out;
    int act;
    float p0, p1;
    if (!PyArg_ParseTuple(args, "OOOnOOiff", &mo, &yo, &geo, &m_out, &bo, &zo, &act, &p0, &p1)) {
        return NULL;
    }
    Geometry g;
    if (parse_geometry(geo, &g) < 0 || check_positive("output channels", m_out, 1) < 0) {
        return NULL;
    }
    if (!winograd_geometry_ok(&g)) {
        PyErr_SetString(PyExc_ValueError, "Winograd F(2x2, 3x3) needs a 3x3 kernel, stride 1, dilation 1");
        return NULL;
    }
    if (act < ACT_NONE || act > ACT_LEAKY) {
        PyErr_Format(PyExc_ValueError, "unknown activation code %d", act);
        return NULL;
    }
    const idx th = (g.oh + 1) / 2, tw = (g.ow + 1) / 2;
    const idx y_floats = g.n * m_out * g.oh * g.ow;
    Py_buffer mt, y, b, z;
    if (get_f32(mo, &mt, 0, 16 * m_out * g.n * th * tw, "products") < 0) {
        return NULL;
    }
    if (get_f32(yo, &y, 1, y_floats, "y") < 0) {
        release(&mt);
        return NULL;
    }
    if (get_optional_f32(bo, &b, m_out, "bias") < 0 || get_optional_f32(zo, &z, y_floats, "z") < 0) {
        release(&mt);
        release(&y);
        release(&b);
        return NULL;
    }
    float *buf = (float *)malloc(sizeof(float) * (size_t)(12 * tw + 16));
    if (buf == NULL) {
        release(&mt);
        release(&y);
        release(&b);
        release(&z);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    onyxrt_winograd_output((const float *)mt.buf, (float *)y.buf, &g, m_out, th, tw,
                           (const float *)b.buf, (const float *)z.buf, act, p0, p1, buf);
    Py_END_ALLOW_THREADS
    free(buf);
    release(&mt);
    release(&y);
    release(&b);
    release(&z);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ softmax, layernorm */

/* exp for softmax's x - max <= 0: 2^n * e^r, n = round(x / ln 2), |r| <= ln 2 / 2, e^r
 * by its degree-6 Taylor polynomial (relative error < 2e-7 there). Inputs below
 * EXP_UNDERFLOW give 0 (numpy would give a subnormal, far below any sum's rounding);
 * NaN stays NaN. Written without branches on values so the loop vectorizes. */
#define EXP_UNDERFLOW (-87.0f)

static inline float
exp_nonpositive(float x)
{
    const float xc = x < EXP_UNDERFLOW ? EXP_UNDERFLOW : (x > 0.0f ? 0.0f : x);
    const float n = rintf(xc * 1.44269504088896341f);
    const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f; /* ln 2 split in two */
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23; /* 2^n as a float's bit pattern */
    float two_n;
    memcpy(&two_n, &bits, sizeof(two_n));
    float e = p * two_n;
    e = x < EXP_UNDERFLOW ? 0.0f : e;
    return x != x ? x : e;
}

/* Sum of a row with 16 running partial sums (vectorizes; about as accurate as numpy's
 * pairwise float32 sum for rows of a few thousand). */
static inline float
row_sum(const float *x, idx n)
{
    float part[16] = {0};
    idx i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int j = 0; j < 16; j++) {
            part[j] += x[i + j];
        }
    }
    float total = 0.0f;
    for (int j = 0; j < 16; j++) {
        total += part[j];
    }
    for (; i < n; i++) {
        total += x[i];
    }
    return total;
}

/* Largest element of a row, with 16 running maxima (vectorizes). A NaN is skipped here
 * but still makes its row NaN: x - max is NaN there, and so is the row's sum. */
static inline float
row_max(const float *x, idx n)
{
    float part[16];
    for (int j = 0; j < 16; j++) {
        part[j] = -INFINITY;
    }
    idx i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int j = 0; j < 16; j++) {
            part[j] = x[i + j] > part[j] ? x[i + j] : part[j];
        }
    }
    float m = -INFINITY;
    for (int j = 0; j < 16; j++) {
        m = part[j] > m ? part[j] : m;
    }
    for (; i < n; i++) {
        m = x[i] > m ? x[i] : m;
    }
    return m;
}

MULTIVERSION void
onyxrt_softmax(const float *x, float *y, idx rows, idx n)
{
    for (idx r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        float m = row_max(xr, n);
        for (idx i = 0; i < n; i++) {
            yr[i] = exp_nonpositive(xr[i] - m);
        }
        const float inv = 1.0f / row_sum(yr, n);
        for (idx i = 0; i < n; i++) {
            yr[i] *= inv;
        }
    }
}

MULTIVERSION void
onyxrt_layernorm(const float *x, float *y, idx rows, idx n, const float *scale,
                 const float *bias, float epsilon, float *mean_out, float *inv_std_out)
{
    for (idx r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        const float mean = row_sum(xr, n) / (float)n;
        for (idx i = 0; i < n; i++) {
            yr[i] = xr[i] - mean;
        }
        float part[16] = {0};
        idx i = 0;
        for (; i + 16 <= n; i += 16) {
            for (int j = 0; j < 16; j++) {
                part[j] += yr[i + j] * yr[i + j];
            }
        }
        float sq = 0.0f;
        for (int j = 0; j < 16; j++) {
            sq += part[j];
        }
        for (; i < n; i++) {
            sq += yr[i] * yr[i];
        }
        const float inv_std = 1.0f / sqrtf(sq / (float)n + epsilon);
        if (bias) {
            for (idx k = 0; k < n; k++) {
                yr[k] = yr[k] * inv_std * scale[k] + bias[k];
            }
        } else {
            for (idx k = 0; k < n; k++) {
                yr[k] = yr[k] * inv_std * scale[k];
            }
        }
        if (mean_out) {
            mean_out[r] = mean;
        }
        if (inv_std_out) {
            inv_std_out[r] = inv_std;
        }
    }
}

static PyObject *
py_softmax(PyObject *self, PyObject *args)
{
    PyObject *xo, *yo;
    idx n;
    if (!PyArg_ParseTuple(args, "OOn", &xo, &yo, &n)) {
        return NULL;
    }
    if (check_positive("row length", n, 1) < 0) {
        return NULL;
    }
    Py_buffer x, y;
    if (get_f32(xo, &x, 0, 0, "x") < 0) {
        return NULL;
    }
    const idx total = x.len / 4;
    if (total % n != 0) {
        release(&x);
        PyErr_Format(PyExc_ValueError, "x holds %zd floats: not whole rows of %zd", total, n);
        return NULL;
    }
    if (get_f32(yo, &y, 1, total, "out") < 0) {
        release(&x);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    onyxrt_softmax((const float *)x.buf, (float *)y.buf, total / n, n);
    Py_END_ALLOW_THREADS
    release(&x);
    release(&y);
    Py_RETURN_NONE;
}

static PyObject *
py_layernorm(PyObject *self, PyObject *args)
{
    PyObject *xo, *yo, *so, *bo, *mo, *io;
    idx n;
    float epsilon;
    if (!PyArg_ParseTuple(args, "OOnOOfOO", &xo, &yo, &n, &so, &bo, &epsilon, &mo, &io)) {
        return NULL;
    }
    if (check_positive("row length", n, 1) < 0) {
        return NULL;
    }
    Py_buffer x, y, sc, b, mean, inv;
    memset(&mean, 0, sizeof(mean));
    memset(&inv, 0, sizeof(inv));
    if (get_f32(xo, &x, 0, 0, "x") < 0) {
        return NULL;
    }
    const idx total = x.len / 4;
    const idx rows = total / n;
    if (rows * n != total) {
        release(&x);
        PyErr_Format(PyExc_ValueError, "x holds %zd floats: not whole rows of %zd", total, n);
        return NULL;
    }
    if (get_f32(yo, &y, 1, total, "out") < 0) {
        release(&x);
        return NULL;
    }
    if (get_f32(so, &sc, 0, n, "scale") < 0) {
        release(&x);
        release(&y);
        return NULL;
    }
    if (get_optional_f32(bo, &b, n, "bias") < 0 ||
        (mo != Py_None && get_f32(mo, &mean, 1, rows, "mean") < 0) ||
        (io != Py_None && get_f32(io, &inv, 1, rows, "inv_std_dev") < 0)) {
        release(&x);
        release(&y);
        release(&sc);
        release(&b);
        release(&mean);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    onyxrt_layernorm((const float *)x.buf, (float *)y.buf, rows, n, (const float *)sc.buf,
                     (const float *)b.buf, epsilon, (float *)mean.buf, (float *)inv.buf);
    Py_END_ALLOW_THREADS
    release(&x);
    release(&y);
    release(&sc);
    release(&b);
    release(&mean);
    release(&inv);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ GELU (tanh) */

MULTIVERSION void
onyxrt_gelu_tanh(const float *x, float *y, idx n)
{
    /* 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3); the sigmoid
     * from e = exp(-2|u|) <= 1 on either side, so nothing overflows. */
    for (idx i = 0; i < n; i++) {
        const float v = x[i];
        const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        const float e = exp_nonpositive(-2.0f * fabsf(u));
        const float s = (u >= 0.0f ? 1.0f : e) / (1.0f + e);
        y[i] = v * s;
    }
}

static PyObject *
py_gelu_tanh(PyObject *self, PyObject *args)
{
    PyObject *xo, *yo;
    if (!PyArg_ParseTuple(args, "OO", &xo, &yo)) {
        return NULL;
    }
    Py_buffer x, y;
    if (get_f32(xo, &x, 0, 0, "x") < 0) {
        return NULL;
    }
    const idx n = x.len / 4;
    if (get_f32(yo, &y, 1, n, "out") < 0) {
        release(&x);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    onyxrt_gelu_tanh((const float *)x.buf, (float *)y.buf, n);
    Py_END_ALLOW_THREADS
    release(&x);
    release(&y);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"gelu_erf", py_gelu_erf, METH_VARARGS,
     "gelu_erf(x, out, coefficients, clamp, t_scale, scale): out = x * (0.5 + 0.5 erf(x * scale))."},
    {"gelu_tanh", py_gelu_tanh, METH_VARARGS,
     "gelu_tanh(x, out): out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."},
    {"epilogue", py_epilogue, METH_VARARGS,
     "epilogue(y, channels, length, bias, z, act, p0, p1): y = act(y + bias + z) in place."},
    {"depthwise", py_depthwise, METH_VARARGS,
     "depthwise(x, w, y, geometry, m_per_g[, bias, z, act, p0, p1]): 2-D depthwise "
     "convolution into y, each output plane finished by the epilogue as it is made."},
    {"winograd_input", py_winograd_input, METH_VARARGS,
     "winograd_input(x, v, geometry): F(2x2, 3x3) input transform into v (16, C, tiles)."},
    {"winograd_output", py_winograd_output, METH_VARARGS,
     "winograd_output(products, y, geometry, M, bias, z, act, p0, p1): output transform "
     "of (16, M, tiles) into y with bias, residual and activation."},
    {"softmax", py_softmax, METH_VARARGS,
     "softmax(x, out, n): softmax over each contiguous row of n floats."},
    {"layernorm", py_layernorm, METH_VARARGS,
     "layernorm(x, out, n, scale, bias, epsilon, mean, inv_std_dev): per row of n floats."},
    {"maxpool", py_maxpool, METH_VARARGS,
     "maxpool(x, y, geometry): 2-D max pooling of x (N, C, H, W) into y, -inf padding."},
    {"im2col", py_im2col, METH_VARARGS,
     "im2col(x, cols, geometry, r0, rows): 2-D column matrix of output rows [r0, r0+rows)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native",
    "onyxrt's CPU provider: compiled float32 inner loops (see onyxrt_cpu.native).", -1, methods,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "ACT_NONE", ACT_NONE) < 0 ||
        PyModule_AddIntConstant(m, "ACT_RELU", ACT_RELU) < 0 ||
        PyModule_AddIntConstant(m, "ACT_CLIP", ACT_CLIP) < 0 ||
        PyModule_AddIntConstant(m, "ACT_LEAKY", ACT_LEAKY) < 0 ||
        PyModule_AddIntConstant(m, "ERF_COEFFS", ERF_COEFFS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
