/* im2col: the column matrix of a 2-D convolution, for a GEMM. */

#include "native.h"

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
                            fill(dst, ow, 0.0f);
                            continue;
                        }
                        const float *restrict src = xi + iy * w + off;
                        float *restrict out = dst;
                        /* Plain loops (fill), not memset/memcpy: rows are often 7-28
                         * floats, where a library call costs more than the copy. */
                        fill(out, lo, 0.0f);
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
                        fill(out + hi, ow - hi, 0.0f);
                    }
                }
            }
        }
    }
}

typedef struct {
    const float *x;
    float *cols;
    const Geometry *g;
    idx r0, rows;
} Im2col;

/* Input channels [begin, end). */
static void
im2col_channels(void *ctx, idx begin, idx end)
{
    const Im2col *c = (const Im2col *)ctx;
    onyxrt_im2col(c->x, c->cols, c->g, c->r0, c->rows, begin, end);
}

PyObject *
py_im2col(PyObject *self, PyObject *args)
{
    (void)self;
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
    enum { X, COLS, VIEWS };
    Py_buffer views[VIEWS];
    memset(views, 0, sizeof(views));
    if (get_f32(xo, &views[X], 0, g.n * g.c * g.h * g.w, "x") < 0 ||
        get_f32(co, &views[COLS], 1, g.c * g.kh * g.kw * g.n * rows * g.ow, "cols") < 0) {
        release_all(views, VIEWS);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    Im2col c = {(const float *)views[X].buf, (float *)views[COLS].buf, &g, r0, rows};
    const idx channel_floats = g.kh * g.kw * g.n * rows * g.ow;
    parallel_for(im2col_channels, &c, g.c, 1 + MIN_PARALLEL_FLOATS / (channel_floats + 1));
    Py_END_ALLOW_THREADS
    release_all(views, VIEWS);
    Py_RETURN_NONE;
}
