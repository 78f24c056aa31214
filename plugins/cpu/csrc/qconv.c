/* QLinearConv in integers: what a QDQ model's convolutions become (onnxruntime's QDQ
 * transformer turns DequantizeLinear -> Conv -> QuantizeLinear into QLinearConv; so does
 * onyxrt's fuse_qdq_conv), computed with the int8 GEMM of qgemm.c instead of in float.
 *
 * Per image and group, the weights are the GEMM's left operand A (M x K, K = C/group * kh *
 * kw, uint8: int8 weights stored + 128) and the image's im2col columns its right operand B
 * (K x OH*OW), written straight into qgemm.c's packed layout as int8 (uint8 activations
 * - 128) — so the output comes out in NCHW, one row per output channel, with no transposes.
 * Padding is x's zero point. With a and b the stored bytes and za, zb their zero points
 * (moved by the same 128), the exact accumulator is
 *
 *     sum_k (a - za)(b - zb) = raw - zb * rowsum(a) - za * colsum(b) + K * za * zb
 *
 * (raw from the GEMM, colsum(b) per output pixel from the packing). It is requantized as
 * the reference kernel does (onyxrt_ops.quantization.QLinearConv, and QuantizeLinear after
 * a float convolution): real = float32(double(acc + bias) * double(x_scale * w_scale)),
 * q = round-half-even(real / y_scale) + y_zero_point, saturated — bit-identical to it.
 *
 * Depthwise convolutions (one input channel per group) have K = kh * kw per channel: no
 * GEMM; each channel's plane is widened to float32 x - zero point on its phase planes and
 * every tap is a contiguous multiply-add over all outputs (exact: the sums stay below
 * 2**24), requantized from the registers (qconv_depthwise).
 *
 * With `int32_out` both write the exact sums as int32 instead (ConvInteger: no bias, no
 * requantization).
 *
 * Only built for x86-64 with GCC or clang; the Python side calls these only where
 * qgemm_supported() (AVX-512 VNNI). */

#include <stdint.h>

#include "native.h"
#include "qrequant.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* ---- the im2col columns, packed ---------------------------------------------------- */

/* Output positions [lo, hi) of a row of `n` whose input column iw0 + t * s lies in [0, w). */
static void
valid_columns(idx n, idx iw0, idx s, idx w, idx *lo, idx *hi)
{
    idx l = iw0 >= 0 ? 0 : (-iw0 + s - 1) / s;
    idx h = w - iw0 <= 0 ? 0 : (w - iw0 + s - 1) / s;
    *lo = l < n ? l : n;
    *hi = h < n ? (h > *lo ? h : *lo) : n;
}

typedef struct {
    const uint8_t *x; /* one group of one image */
    Geometry g;
    uint8_t flip, pad;
    uint8_t *col; /* [K][OH * OW] */
} Im2colCall;

/* Rows [begin, end) of the im2col matrix (row k: channel k / (kh kw), tap (i, j)), each
 * output row one run of copies between its padded ends: the convolutions with strides (or
 * kernels wider than SHIFT_MAX_TAPS), which the shifted packing does not read in place. */
static void
im2col_rows(void *ctx, idx begin, idx end)
{
    const Im2colCall *c = (const Im2colCall *)ctx;
    /* locals, not reads through c: the byte stores below may alias anything, and would
     * force a reload of every field per byte (and no vectorization) */
    const Geometry g = c->g;
    const uint8_t flip = c->flip, pad = c->pad;
    const idx taps = g.kh * g.kw;
    for (idx k = begin; k < end; k++) {
        const idx ch = k / taps, i = (k / g.kw) % g.kh, j = k % g.kw;
        const uint8_t *plane = c->x + ch * g.h * g.w;
        uint8_t *col = c->col + k * g.oh * g.ow;
        const idx iw0 = j * g.dw - g.pw, ih0 = i * g.dh - g.ph;
        idx lo, hi, top, bottom; /* valid columns of a row; output rows that read the plane */
        valid_columns(g.ow, iw0, g.sw, g.w, &lo, &hi);
        valid_columns(g.oh, ih0, g.sh, g.h, &top, &bottom);
        memset(col, pad, (size_t)(top * g.ow));
        memset(col + bottom * g.ow, pad, (size_t)((g.oh - bottom) * g.ow));
        for (idx oh = top; oh < bottom; oh++) {
            uint8_t *out = col + oh * g.ow;
            const uint8_t *row = plane + (oh * g.sh + ih0) * g.w + iw0;
            for (idx t = 0; t < lo; t++) {
                out[t] = pad;
            }
            if (g.sw == 1) {
                for (idx t = lo; t < hi; t++) {
                    out[t] = (uint8_t)(row[t] ^ flip);
                }
            } else {
                for (idx t = lo; t < hi; t++) {
                    out[t] = (uint8_t)(row[t * g.sw] ^ flip);
                }
            }
            for (idx t = hi; t < g.ow; t++) {
                out[t] = pad;
            }
        }
    }
}

/* The longest kernel side the shifted packing handles (its per-quad masks live on the
 * stack); longer ones take the im2col matrix. */
#define SHIFT_MAX_TAPS 16

typedef struct {
    /* Row k of the im2col matrix is b + koff[k] read at the output pixels: the matrix
     * itself (koff[k] = k * pixels), or, for unit strides where the output rows are as
     * wide as the input's (`shifted`), the image at a flat offset, valid where the tap
     * (ki[k], kj[k]) lands inside the image (elsewhere the padding byte). */
    const uint8_t *b;
    const idx *koff;
    const uint8_t *ki, *kj;
    int shifted;
    Geometry g;
    idx k, k4, pixels;
    uint8_t flip;     /* 0x80 where b holds uint8 x as stored, else 0 */
    uint8_t pad;      /* the padding byte, as stored in the packed matrix */
    int8_t *packed;   /* [blocks][k4][16 pixels][4 k] */
    int32_t *colsum;  /* [blocks * 16] */
} PackCall;

/* For the 64 pixels from p0 (count of them real): which lie where tap row i (column j)
 * reads inside the image. */
static void
tap_masks(const Geometry *g, idx p0, idx count, __mmask64 *rows, __mmask64 *cols)
{
    for (idx i = 0; i < g->kh; i++) {
        rows[i] = 0;
    }
    for (idx j = 0; j < g->kw; j++) {
        cols[j] = 0;
    }
    idx oh = p0 / g->ow, ow = p0 % g->ow;
    for (idx t = 0; t < count; t++) {
        const __mmask64 bit = (__mmask64)1 << t;
        for (idx i = 0; i < g->kh; i++) {
            const idx ih = oh + i * g->dh - g->ph;
            rows[i] |= (ih >= 0 && ih < g->h) ? bit : 0;
        }
        for (idx j = 0; j < g->kw; j++) {
            const idx iw = ow + j * g->dw - g->pw;
            cols[j] |= (iw >= 0 && iw < g->w) ? bit : 0;
        }
        if (++ow == g->ow) {
            ow = 0;
            oh++;
        }
    }
}

/* Quads [begin, end) of four blocks (64 pixels) into qgemm.c's packed layout, with each
 * pixel's sum over K (ones (u8) x packed (s8) by VPDPBUSD: one instruction per four k).
 * Per four k: four 64-byte row loads (masked: lanes outside the image or past the last
 * pixel take the padding byte), byte and word interleaves within each 128-bit lane (lane
 * L then holds block L's group in four quarters spread over four registers) and a 4 x 4
 * transpose of the lanes. */
AVX512_VNNI static void
pack_range(void *ctx, idx begin, idx end)
{
    const PackCall *c = (const PackCall *)ctx;
    const __m512i ones = _mm512_set1_epi8(1), flip = _mm512_set1_epi8((char)c->flip);
    /* loaded under the masks, then flipped with the rest: the padding byte comes out */
    const __m512i fill = _mm512_set1_epi8((char)(c->pad ^ c->flip));
    const idx block_bytes = c->k4 * 64;
    __mmask64 rows[SHIFT_MAX_TAPS], cols[SHIFT_MAX_TAPS];
    for (idx quad = begin; quad < end; quad++) {
        const idx p0 = quad * 64;
        const idx count = p0 >= c->pixels ? 0 : (c->pixels - p0 < 64 ? c->pixels - p0 : 64);
        const __mmask64 mask = count >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << count) - 1);
        if (c->shifted) {
            tap_masks(&c->g, p0, count, rows, cols);
        }
        int8_t *out = c->packed + quad * 4 * block_bytes;
        __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
        for (idx g4 = 0; g4 < c->k4; g4++) {
            __m512i v[4];
            for (int lane = 0; lane < 4; lane++) {
                const idx k = 4 * g4 + lane;
                if (k >= c->k) {
                    v[lane] = _mm512_setzero_si512();
                    continue;
                }
                const __mmask64 valid = c->shifted ? rows[c->ki[k]] & cols[c->kj[k]] : mask;
                /* masked-off lanes do not fault: the shifted address may lie outside x */
                const uint8_t *src = c->b + c->koff[k] + p0;
                v[lane] = _mm512_xor_si512(_mm512_mask_loadu_epi8(fill, valid, src), flip);
            }
            const __m512i lo01 = _mm512_unpacklo_epi8(v[0], v[1]), hi01 = _mm512_unpackhi_epi8(v[0], v[1]);
            const __m512i lo23 = _mm512_unpacklo_epi8(v[2], v[3]), hi23 = _mm512_unpackhi_epi8(v[2], v[3]);
            const __m512i r0 = _mm512_unpacklo_epi16(lo01, lo23), r1 = _mm512_unpackhi_epi16(lo01, lo23);
            const __m512i r2 = _mm512_unpacklo_epi16(hi01, hi23), r3 = _mm512_unpackhi_epi16(hi01, hi23);
            const __m512i t0 = _mm512_shuffle_i64x2(r0, r1, 0x44), t1 = _mm512_shuffle_i64x2(r0, r1, 0xEE);
            const __m512i t2 = _mm512_shuffle_i64x2(r2, r3, 0x44), t3 = _mm512_shuffle_i64x2(r2, r3, 0xEE);
            const __m512i b0 = _mm512_shuffle_i64x2(t0, t2, 0x88), b1 = _mm512_shuffle_i64x2(t0, t2, 0xDD);
            const __m512i b2 = _mm512_shuffle_i64x2(t1, t3, 0x88), b3 = _mm512_shuffle_i64x2(t1, t3, 0xDD);
            int8_t *at = out + g4 * 64;
            _mm512_storeu_si512((void *)at, b0);
            _mm512_storeu_si512((void *)(at + block_bytes), b1);
            _mm512_storeu_si512((void *)(at + 2 * block_bytes), b2);
            _mm512_storeu_si512((void *)(at + 3 * block_bytes), b3);
            s0 = _mm512_dpbusd_epi32(s0, ones, b0);
            s1 = _mm512_dpbusd_epi32(s1, ones, b1);
            s2 = _mm512_dpbusd_epi32(s2, ones, b2);
            s3 = _mm512_dpbusd_epi32(s3, ones, b3);
        }
        int32_t *sums = c->colsum + quad * 64;
        _mm512_storeu_si512((void *)sums, s0);
        _mm512_storeu_si512((void *)(sums + 16), s1);
        _mm512_storeu_si512((void *)(sums + 32), s2);
        _mm512_storeu_si512((void *)(sums + 48), s3);
    }
}

/* ---- the whole convolution ------------------------------------------------------------ */

#endif

static int
parse_requant(double ys, int zy, int lo, int hi, void *out)
{
#if defined(__x86_64__) && defined(__GNUC__)
    Requant *r = (Requant *)out;
    if (!(ys > 0.0) || !isfinite(ys) || lo > hi) {
        PyErr_SetString(PyExc_ValueError, "qconv: y_scale must be positive and finite");
        return -1;
    }
    r->ys = (float)ys;
    r->zy = zy;
    r->lo = lo;
    r->hi = hi;
    return 0;
#else
    (void)ys, (void)zy, (void)lo, (void)hi, (void)out;
    PyErr_SetString(PyExc_RuntimeError, "qconv needs x86-64");
    return -1;
#endif
}

PyObject *
py_qconv(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *ao, *rso, *zao, *bo, *sco, *yo, *geo;
    Py_ssize_t m, group;
    int flip, zb, zy, lo, hi, int32_out = 0;
    double ys;
    if (!PyArg_ParseTuple(args, "OOOOOOOOnniidiii|p", &xo, &ao, &rso, &zao, &bo, &sco, &yo, &geo, &m,
                          &group, &flip, &zb, &ys, &zy, &lo, &hi, &int32_out)) {
        return NULL;
    }
    Geometry g;
    if (parse_geometry(geo, &g) < 0) {
        return NULL;
    }
    if (!qgemm_supported()) {
        PyErr_SetString(PyExc_RuntimeError, "qconv needs AVX-512 VNNI");
        return NULL;
    }
    if (group < 1 || g.c % group || m % group || m < 1) {
        PyErr_SetString(PyExc_ValueError, "qconv: channels not divisible by group");
        return NULL;
    }
    const idx cg = g.c / group, mg = m / group, k = cg * g.kh * g.kw, pixels = g.oh * g.ow;
    if (k >= (1 << 16)) {
        PyErr_SetString(PyExc_ValueError, "qconv: K too large for the int8 GEMM");
        return NULL;
    }
#if defined(__x86_64__) && defined(__GNUC__)
    Requant rqp;
    if (parse_requant(ys, zy, lo, hi, &rqp) < 0) {
        return NULL;
    }
    enum { X, A, RS, ZA, B, SC, Y, VIEWS };
    Py_buffer v[VIEWS];
    memset(v, 0, sizeof(v));
    if (get_bytes(xo, &v[X], 0, g.n * g.c * g.h * g.w, 1, "x") < 0 ||
        get_bytes(ao, &v[A], 0, m * k, 1, "a") < 0 || get_bytes(rso, &v[RS], 0, m, 4, "rowsum_a") < 0 ||
        get_bytes(zao, &v[ZA], 0, m, 4, "zp_a") < 0 || get_bytes(bo, &v[B], 0, m, 4, "bias") < 0 ||
        get_bytes(sco, &v[SC], 0, m, 8, "scale") < 0 ||
        get_bytes(yo, &v[Y], 1, g.n * m * pixels, int32_out ? 4 : 1, "y") < 0) {
        release_all(v, VIEWS);
        return NULL;
    }
    const idx k4 = (k + 3) / 4, blocks = ((pixels + 63) / 64) * 4;
    /* unit strides with output rows as wide as the input's: each row of the im2col matrix
     * is the image at a flat offset (a 1x1 convolution: the image itself), read in place */
    const int shifted = g.sh == 1 && g.sw == 1 && g.ow == g.w && g.kh <= SHIFT_MAX_TAPS && g.kw <= SHIFT_MAX_TAPS;
    int8_t *packed = (int8_t *)malloc((size_t)(blocks * k4 * 64 + 64));
    int32_t *colsum = (int32_t *)malloc((size_t)(blocks * 16) * sizeof(int32_t));
    int32_t *row_add = (int32_t *)malloc((size_t)m * sizeof(int32_t));
    idx *koff = (idx *)malloc((size_t)k * sizeof(idx));
    uint8_t *ki = (uint8_t *)malloc((size_t)(2 * k));
    uint8_t *col = shifted ? NULL : (uint8_t *)malloc((size_t)(k * pixels + 16));
    if (packed == NULL || colsum == NULL || row_add == NULL || koff == NULL || ki == NULL ||
        (!shifted && col == NULL)) {
        free(packed), free(colsum), free(row_add), free(koff), free(ki), free(col);
        release_all(v, VIEWS);
        return PyErr_NoMemory();
    }
    const uint8_t flip_byte = (uint8_t)(flip ? 0x80 : 0);
    const int32_t *rowsum_a = (const int32_t *)v[RS].buf, *za = (const int32_t *)v[ZA].buf,
                  *bias = (const int32_t *)v[B].buf;
    Py_BEGIN_ALLOW_THREADS
    /* each row's constant terms: bias - zb * rowsum(a) + K * za * zb, modulo 2**32 like the
     * vector sums (the exact accumulator fits: K is bounded by the caller) */
    for (idx row = 0; row < m; row++) {
        row_add[row] = (int32_t)(uint32_t)((int64_t)bias[row] - (int64_t)zb * rowsum_a[row] +
                                           (int64_t)k * za[row] * zb);
    }
    const idx taps = g.kh * g.kw;
    for (idx kk = 0; kk < k; kk++) {
        const idx ch = kk / taps, i = (kk / g.kw) % g.kh, j = kk % g.kw;
        koff[kk] = shifted ? ch * g.h * g.w + (i * g.dh - g.ph) * g.w + (j * g.dw - g.pw) : kk * pixels;
        ki[kk] = (uint8_t)(shifted ? i : 0);
        ki[k + kk] = (uint8_t)(shifted ? j : 0);
    }
    for (idx n = 0; n < g.n; n++) {
        for (idx gi = 0; gi < group; gi++) {
            const uint8_t *x = (const uint8_t *)v[X].buf + (n * g.c + gi * cg) * g.h * g.w;
            PackCall pc = {x, koff, ki, ki + k, shifted, g, k, k4, pixels, flip_byte, (uint8_t)(int8_t)zb,
                           packed, colsum};
            if (!shifted) {
                Im2colCall ic = {x, g, flip_byte, (uint8_t)(int8_t)zb, col};
                ic.g.c = cg;
                parallel_for(im2col_rows, &ic, k, 1 + MIN_PARALLEL_FLOATS / (pixels + 1));
                pc.b = col;
                pc.flip = 0;
            }
            parallel_for(pack_range, &pc, blocks / 4, 1 + (1 << 16) / (k4 * 256));
            const idx y0 = (n * m + gi * mg) * pixels;
            const QgemmRequant rq = {row_add + gi * mg, za + gi * mg, colsum, (const double *)v[SC].buf + gi * mg,
                                     rqp.ys, rqp.zy, rqp.lo, rqp.hi,
                                     int32_out ? NULL : (uint8_t *)v[Y].buf + y0, pixels,
                                     int32_out ? (int32_t *)v[Y].buf + y0 : NULL};
            qgemm_run((const uint8_t *)v[A].buf + gi * mg * k, k, packed, mg, pixels, k, NULL, &rq);
        }
    }
    Py_END_ALLOW_THREADS
    free(packed), free(colsum), free(row_add), free(koff), free(ki), free(col);
    release_all(v, VIEWS);
    Py_RETURN_NONE;
#else
    PyErr_SetString(PyExc_RuntimeError, "qconv needs x86-64");
    return NULL;
#endif
}

/* ---- depthwise ------------------------------------------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
typedef struct {
    const uint8_t *x;
    const int16_t *w; /* [C][kh * kw], zero point subtracted */
    const int32_t *bias;
    const double *rs;
    Geometry g;       /* g.c: the channels */
    uint8_t flip;
    int32_t zx;       /* x's zero point as stored after the flip */
    Requant r;
    uint8_t *y;
    int32_t *y32;     /* instead of y: the exact sums (+ bias) as int32 (ConvInteger) */
    volatile int failed; /* a worker could not get its scratch */
} DepthwiseCall;

/* n bytes of x as float32 (x ^ flip as int8) - zx at out. */
AVX512_REQUANT static inline void
widen(const uint8_t *x, idx n, __m128i vflip, __m512i vzx, float *out)
{
    for (idx i = 0; i < n; i += 16) {
        const idx left = n - i;
        const __mmask16 mask = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        const __m128i bytes = _mm_xor_si128(_mm_maskz_loadu_epi8(mask, x + i), vflip);
        const __m512i v = _mm512_sub_epi32(_mm512_cvtepi8_epi32(bytes), vzx);
        _mm512_mask_storeu_ps(out + i, mask, _mm512_cvtepi32_ps(v));
    }
}

/* The phase planes of a stride-2 (undilated) input plane x (h, w) of bytes, straight from
 * the bytes: what widen() into a float plane and fill_phases() give, in one pass. Each
 * phase row gathers every other byte of its input row (a 32-byte load narrowed by
 * vpmovwb), widens it to float32 x - zero point, and zero-fills outside the image. */
AVX512_REQUANT static void
widen_phases2(const uint8_t *x, const Geometry *g, const PhaseLayout *p, float *buf, __m128i vflip,
              __m512i vzx)
{
    const idx h = g->h, w = g->w, ph = g->ph, pw = g->pw, hq = p->hq, wq = p->wq;
    for (idx by = 0; by < 2; by++) {
        for (idx bx = 0; bx < 2; bx++) {
            float *plane = buf + (by * 2 + bx) * p->plane;
            /* columns c whose input column 2 c + bx - pw lies in [0, w) */
            const idx first = bx - pw;
            idx lo = first >= 0 ? 0 : (-first + 1) / 2;
            idx hi = first >= w ? 0 : (w - first + 1) / 2;
            if (hi > wq) {
                hi = wq;
            }
            if (lo > hi) {
                lo = hi;
            }
            for (idx r = 0; r < hq; r++) {
                float *dst = plane + r * wq;
                const idx iy = 2 * r + by - ph;
                if (iy < 0 || iy >= h || hi <= lo) {
                    memset(dst, 0, (size_t)wq * sizeof(float));
                    continue;
                }
                memset(dst, 0, (size_t)lo * sizeof(float));
                const uint8_t *src = x + iy * w + 2 * lo + first;
                for (idx c = lo; c < hi; c += 16) {
                    const idx n = hi - c < 16 ? hi - c : 16;
                    const idx bytes = 2 * n - 1; /* the last one read is the n-th even byte */
                    const __mmask32 load = bytes >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << bytes) - 1);
                    const __m256i pairs = _mm256_maskz_loadu_epi8(load, src + 2 * (c - lo));
                    const __m128i even = _mm_xor_si128(_mm256_cvtepi16_epi8(pairs), vflip);
                    const __m512i v = _mm512_sub_epi32(_mm512_cvtepi8_epi32(even), vzx);
                    const __mmask16 store = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
                    _mm512_mask_storeu_ps(dst + c, store, _mm512_cvtepi32_ps(v));
                }
                memset(dst + hi, 0, (size_t)(wq - hi) * sizeof(float));
            }
            memset(plane + hq * wq, 0, (size_t)(p->plane - hq * wq) * sizeof(float));
        }
    }
}

/* Channels [begin, end) of all images (item = n * C + c). Each input plane is widened to
 * float32 x - zero point (exact) and laid out in its phase planes (phases.c, padded with
 * zeros), where every tap reads one contiguous run over all output rows at once (on rows
 * of the phase width, whose few extra columns are dropped): a 14 x 14 or 7 x 7 plane is a
 * handful of vectors per tap rather than a partly masked vector per row. The products and
 * their sums are integers below 2**24 (the caller bounds kh * kw), so float32
 * multiply-adds compute them exactly; four vectors are summed at once. */
AVX512_REQUANT static void
depthwise_range(void *ctx, idx begin, idx end)
{
    DepthwiseCall *c = (DepthwiseCall *)ctx;
    const Geometry *g = &c->g;
    const idx taps = g->kh * g->kw, hw = g->h * g->w;
    PhaseWork work;
    if (phase_work_open(&work, g) < 0) {
        c->failed = 1;
        return;
    }
    const PhaseLayout *p = &work.p;
    /* Unit strides: one phase plane, the image at rows ph.., columns pw.. of it; its
     * padding is the same for every channel, so it is zeroed once and only the image's
     * positions are written per channel (no intermediate plane). */
    const int unit = g->sh == 1 && g->sw == 1;
    const int two = g->sh == 2 && g->sw == 2 && g->dh == 1 && g->dw == 1;
    float *plane = unit || two ? NULL : (float *)malloc((size_t)(hw + 16) * sizeof(float));
    uint8_t *wide = (uint8_t *)malloc((size_t)(p->span + 64) * (c->y32 ? sizeof(int32_t) : 1));
    if ((!unit && !two && plane == NULL) || wide == NULL) {
        free(plane), free(wide);
        phase_work_close(&work);
        c->failed = 1;
        return;
    }
    const __m512i vzx = _mm512_set1_epi32(c->zx);
    const __m128i vflip = _mm_set1_epi8((char)c->flip);
    const idx row_lo = g->ph < 0 ? -g->ph : 0, row_hi = g->h < p->hq - g->ph ? g->h : p->hq - g->ph;
    const idx col_lo = g->pw < 0 ? -g->pw : 0, col_hi = g->w < p->wq - g->pw ? g->w : p->wq - g->pw;
    if (unit) {
        memset(work.buf, 0, (size_t)p->plane * sizeof(float));
    }
    for (idx item = begin; item < end; item++) {
        const idx ch = item % g->c;
        const uint8_t *x = c->x + item * hw;
        if (unit) {
            for (idx iy = row_lo; iy < row_hi; iy++) {
                widen(x + iy * g->w + col_lo, col_hi - col_lo, vflip, vzx,
                      work.buf + (iy + g->ph) * p->wq + col_lo + g->pw);
            }
        } else if (two) {
            widen_phases2(x, g, p, work.buf, vflip, vzx);
        } else {
            widen(x, hw, vflip, vzx, plane);
            fill_phases(plane, g, p, work.buf, 0.0f);
        }
        const int16_t *w = c->w + ch * taps;
        Requant r = c->r;
        r.rs = c->rs[ch];
        const __m512i bias = _mm512_set1_epi32(c->bias[ch]);
        for (idx e = 0; e < p->span; e += 64) {
            __mmask16 m[4];
            for (int q = 0; q < 4; q++) {
                const idx left = p->span - e - 16 * q;
                m[q] = left >= 16 ? (__mmask16)0xFFFF : (left <= 0 ? 0 : (__mmask16)((1u << left) - 1));
            }
            __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
            for (idx t = 0; t < taps; t++) {
                const __m512 wv = _mm512_set1_ps((float)w[t]);
                const float *src = work.buf + work.offsets[t] + e;
                s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m[0], src), wv, s0);
                s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m[1], src + 16), wv, s1);
                s2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m[2], src + 32), wv, s2);
                s3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m[3], src + 48), wv, s3);
            }
            /* requantized from the registers (a reload of stored sums would stall on
             * store forwarding) */
            const __m512 sums[4] = {s0, s1, s2, s3};
            for (int q = 0; q < 4 && m[q]; q++) {
                const __m512i t = _mm512_add_epi32(_mm512_cvtps_epi32(sums[q]), bias);
                if (c->y32) {
                    _mm512_mask_storeu_epi32((int32_t *)wide + e + 16 * q, m[q], t);
                } else {
                    _mm512_mask_cvtepi32_storeu_epi8(wide + e + 16 * q, m[q], requant16(t, &r));
                }
            }
        }
        /* the phase-width rows' first ow values, bytes or int32 */
        const size_t size = c->y32 ? sizeof(int32_t) : 1;
        uint8_t *out = c->y32 ? (uint8_t *)(c->y32 + item * g->oh * g->ow) : c->y + item * g->oh * g->ow;
        if (p->wq == g->ow) {
            memcpy(out, wide, (size_t)(g->oh * g->ow) * size);
        } else {
            for (idx row = 0; row < g->oh; row++) {
                memcpy(out + row * g->ow * size, wide + row * p->wq * size, (size_t)g->ow * size);
            }
        }
    }
    free(plane), free(wide);
    phase_work_close(&work);
}
#endif

PyObject *
py_qconv_depthwise(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *wo, *bo, *sco, *yo, *geo;
    int flip, zx, zy, lo, hi, int32_out = 0;
    double ys;
    if (!PyArg_ParseTuple(args, "OOOOOOiidiii|p", &xo, &wo, &bo, &sco, &yo, &geo, &flip, &zx, &ys, &zy,
                          &lo, &hi, &int32_out)) {
        return NULL;
    }
    Geometry g;
    if (parse_geometry(geo, &g) < 0) {
        return NULL;
    }
#if defined(__x86_64__) && defined(__GNUC__)
    if (!qgemm_supported()) {
        PyErr_SetString(PyExc_RuntimeError, "qconv_depthwise needs AVX-512");
        return NULL;
    }
    Requant rq;
    if (parse_requant(ys, zy, lo, hi, &rq) < 0) {
        return NULL;
    }
    enum { X, W, B, SC, Y, VIEWS };
    Py_buffer v[VIEWS];
    memset(v, 0, sizeof(v));
    if (get_bytes(xo, &v[X], 0, g.n * g.c * g.h * g.w, 1, "x") < 0 ||
        get_bytes(wo, &v[W], 0, g.c * g.kh * g.kw, 2, "w") < 0 || get_bytes(bo, &v[B], 0, g.c, 4, "bias") < 0 ||
        get_bytes(sco, &v[SC], 0, g.c, 8, "scale") < 0 ||
        get_bytes(yo, &v[Y], 1, g.n * g.c * g.oh * g.ow, int32_out ? 4 : 1, "y") < 0) {
        release_all(v, VIEWS);
        return NULL;
    }
    int failed;
    Py_BEGIN_ALLOW_THREADS
    DepthwiseCall dc = {(const uint8_t *)v[X].buf, (const int16_t *)v[W].buf, (const int32_t *)v[B].buf,
                        (const double *)v[SC].buf, g, (uint8_t)(flip ? 0x80 : 0), zx, rq,
                        int32_out ? NULL : (uint8_t *)v[Y].buf, int32_out ? (int32_t *)v[Y].buf : NULL, 0};
    parallel_for(depthwise_range, &dc, g.n * g.c, 1 + MIN_PARALLEL_FLOATS / (g.oh * g.ow * g.kh * g.kw + 1));
    failed = dc.failed;
    Py_END_ALLOW_THREADS
    release_all(v, VIEWS);
    if (failed) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
#else
    PyErr_SetString(PyExc_RuntimeError, "qconv_depthwise needs x86-64");
    return NULL;
#endif
}
