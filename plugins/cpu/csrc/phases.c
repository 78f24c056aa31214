/* Phase planes: how strided, dilated windows become unit-stride runs. */

#include "native.h"

/* Strided windows work on "phase planes": along an axis with stride s, output o
 * and tap k read input o*s + k*d - pad = (o + q)*s + b - pad with q = k*d / s and
 * b = k*d % s, so phase plane b (every s-th padded input position, starting at b) holds
 * what tap k reads for all outputs at offset q. With the phase planes of one input
 * channel laid out flat, row width wq, every tap reads one contiguous run of the same
 * length as the outputs: a 3x3 stride-2 kernel is nine unit-stride multiply-adds, and a
 * 7x7 output is one loop over 7 rows at once rather than seven loops of 7. Outputs are
 * computed on rows of width wq (wq - ow columns of them unused) and then compacted. */

PhaseLayout
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

/* dst[i] = src[2 i] for i in [0, n), reading no further than src[2 (n - 1)]: 16 at a time
 * by a two-vector shuffle (one vpermt2ps with AVX-512) while at least one element is
 * left for the scalar tail, which keeps the vector loads inside that bound. */
static inline void
even_elements(const float *src, float *dst, idx n)
{
    typedef float v16u __attribute__((vector_size(64), aligned(4)));
    typedef int32_t i16 __attribute__((vector_size(64)));
    const i16 even = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    idx i = 0;
    for (; i + 16 < n; i += 16) {
        const v16u a = *(const v16u *)(src + 2 * i), b = *(const v16u *)(src + 2 * i + 16);
        *(v16u *)(dst + i) = __builtin_shuffle(a, b, even);
    }
    for (; i < n; i++) {
        dst[i] = src[2 * i];
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
                    even_elements(src + 2 * lo, dst + lo, hi - lo);
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
idx
tap_offset(const Geometry *g, const PhaseLayout *p, idx ky, idx kx)
{
    const idx ry = ky * g->dh, rx = kx * g->dw;
    const idx phase = (ry % g->sh) * g->sw + rx % g->sw;
    return phase * p->plane + (ry / g->sh) * p->wq + rx / g->sw;
}

/* Allocates the work buffers for g's windows; -1 when they cannot be allocated. */
int
phase_work_open(PhaseWork *w, const Geometry *g)
{
    const idx taps = g->kh * g->kw;
    w->p = phase_layout(g);
    w->buf = (float *)malloc(sizeof(float) * (size_t)(w->p.phases * w->p.plane + w->p.span));
    w->offsets = (idx *)malloc(sizeof(idx) * (size_t)taps);
    if (w->buf == NULL || w->offsets == NULL) {
        phase_work_close(w);
        return -1;
    }
    w->wide = w->buf + w->p.phases * w->p.plane;
    for (idx ky = 0; ky < g->kh; ky++) {
        for (idx kx = 0; kx < g->kw; kx++) {
            w->offsets[ky * g->kw + kx] = tap_offset(g, &w->p, ky, kx);
        }
    }
    return 0;
}

void
phase_work_close(PhaseWork *w)
{
    free(w->buf);
    free(w->offsets);
    w->buf = NULL;
    w->offsets = NULL;
}

/* Where an output plane yo is computed: straight into yo when its rows need no
 * compaction (wq == ow), else into the wide rows. */
float *
phase_work_target(const PhaseWork *w, float *yo, const Geometry *g)
{
    return w->p.wq == g->ow ? yo : w->wide;
}

/* Moves a plane computed into `target` (from phase_work_target) into yo. */
void
phase_work_store(const PhaseWork *w, const float *target, float *yo, const Geometry *g)
{
    if (target == yo) {
        return;
    }
    for (idx oy = 0; oy < g->oh; oy++) {
        memcpy(yo + oy * g->ow, target + oy * w->p.wq, sizeof(float) * (size_t)g->ow);
    }
}
