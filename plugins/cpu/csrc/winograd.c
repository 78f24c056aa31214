/* Winograd F(2x2, 3x3): the input and output transforms. */

#include "native.h"

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
onyxrt_winograd_input(const float *x, float *v, const Geometry *g, idx th, idx tw, float *buf,
                      idx plane_begin, idx plane_end)
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
    /* input planes (n, c) in [plane_begin, plane_end) */
    for (idx plane = plane_begin; plane < plane_end; plane++) {
        const idx n = plane / g->c, c = plane % g->c;
        fill_phases(x + plane * g->h * g->w, &split, &p, buf, 0.0f);
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

/* Output transform of the GEMMs' products mt (16, M, tiles) into y (N, M, OH, OW), plus
 * bias, residual z (y's shape) and activation. */
MULTIVERSION void
onyxrt_winograd_output(const float *mt, float *y, const Geometry *g, idx m_out, idx th, idx tw,
                       const float *bias, const float *z, int act, float p0, float p1,
                       float *buf, idx plane_begin, idx plane_end)
{
    const idx tiles = g->n * th * tw;
    const idx plane = m_out * tiles;
    float *s = buf;            /* 2 rows x 4 columns x tw */
    float *out = buf + 8 * tw; /* 2 x 2 x tw */
    /* output planes (n, m) in [plane_begin, plane_end) */
    for (idx nm = plane_begin; nm < plane_end; nm++) {
        const idx n = nm / m_out, m = nm % m_out;
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

/* One transform call split over planes; each piece allocates its own row buffer. */
typedef struct {
    const float *src;
    float *dst;
    const Geometry *g;
    idx th, tw, m_out;
    const float *bias, *z;
    int act;
    float p0, p1;
    int failed;
} Transform;

static void
input_planes(void *ctx, idx begin, idx end)
{
    Transform *t = (Transform *)ctx;
    float *buf = (float *)malloc(sizeof(float) * (size_t)(2 * (2 * t->th + 2) * (t->tw + 1) + 16 * t->tw + 16));
    if (buf == NULL) {
        __atomic_store_n(&t->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    onyxrt_winograd_input(t->src, t->dst, t->g, t->th, t->tw, buf, begin, end);
    free(buf);
}

static void
output_planes(void *ctx, idx begin, idx end)
{
    Transform *t = (Transform *)ctx;
    float *buf = (float *)malloc(sizeof(float) * (size_t)(12 * t->tw + 16));
    if (buf == NULL) {
        __atomic_store_n(&t->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    onyxrt_winograd_output(t->src, t->dst, t->g, t->m_out, t->th, t->tw, t->bias, t->z, t->act,
                           t->p0, t->p1, buf, begin, end);
    free(buf);
}

PyObject *
py_winograd_input(PyObject *self, PyObject *args)
{
    (void)self;
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
    enum { X, V, VIEWS };
    Py_buffer views[VIEWS];
    memset(views, 0, sizeof(views));
    if (get_f32(xo, &views[X], 0, g.n * g.c * g.h * g.w, "x") < 0 ||
        get_f32(vo, &views[V], 1, 16 * g.c * g.n * th * tw, "v") < 0) {
        release_all(views, VIEWS);
        return NULL;
    }
    Transform t = {(const float *)views[X].buf, (float *)views[V].buf, &g, th, tw, 0, NULL, NULL,
                   ACT_NONE, 0, 0, 0};
    if (th > 0 && tw > 0) {
        Py_BEGIN_ALLOW_THREADS
        parallel_for(input_planes, &t, g.n * g.c, 1 + MIN_PARALLEL_FLOATS / (16 * th * tw));
        Py_END_ALLOW_THREADS
    }
    release_all(views, VIEWS);
    if (t.failed) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

PyObject *
py_winograd_output(PyObject *self, PyObject *args)
{
    (void)self;
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
    if (check_activation(act) < 0) {
        return NULL;
    }
    const idx th = (g.oh + 1) / 2, tw = (g.ow + 1) / 2;
    const idx y_floats = g.n * m_out * g.oh * g.ow;
    enum { M, Y, B, Z, VIEWS };
    Py_buffer views[VIEWS];
    memset(views, 0, sizeof(views));
    if (get_f32(mo, &views[M], 0, 16 * m_out * g.n * th * tw, "products") < 0 ||
        get_f32(yo, &views[Y], 1, y_floats, "y") < 0 ||
        get_optional_f32(bo, &views[B], m_out, "bias") < 0 ||
        get_optional_f32(zo, &views[Z], y_floats, "z") < 0) {
        release_all(views, VIEWS);
        return NULL;
    }
    Transform t = {(const float *)views[M].buf, (float *)views[Y].buf, &g, th, tw, m_out,
                   (const float *)views[B].buf, (const float *)views[Z].buf, act, p0, p1, 0};
    if (th > 0 && tw > 0) {
        Py_BEGIN_ALLOW_THREADS
        parallel_for(output_planes, &t, g.n * m_out, 1 + MIN_PARALLEL_FLOATS / (16 * th * tw));
        Py_END_ALLOW_THREADS
    }
    release_all(views, VIEWS);
    if (t.failed) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}
