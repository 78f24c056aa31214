/* Integer GEMM of uint8 rows by int8 columns into int32, with AVX-512 VNNI (VPDPBUSD:
 * four u8 x s8 products summed into each int32 lane, no saturation) — what MatMulInteger,
 * DynamicQuantizeMatMul and friends need for dynamically quantized transformers, and
 * what numpy has no routine for.
 *
 * B is packed ahead (python side, once per constant): K padded to a multiple of 4 and N to
 * a multiple of 64, laid out as [N / 16][K / 4][16 columns][4 k], so one 64-byte load holds
 * four k of sixteen columns. A register tile is 6 rows x 64 columns (24 accumulators); each
 * step broadcasts four bytes of a row of A and multiplies them into four column blocks.
 * The sums are raw: the caller subtracts the zero points' terms. Exact for K < 2**16
 * (|sum| < 2**31). */

#include <stdint.h>

#include "native.h"
#include "qrequant.h"

#if defined(__SSE2__)
#include <emmintrin.h>
/* Four rows of sixteen bytes interleaved into the packed layout of qgemm.c: out[4 j + r] =
 * row r's byte j (64 bytes). */
static inline void
interleave_4x16(const int8_t *r0, const int8_t *r1, const int8_t *r2, const int8_t *r3, int8_t *out)
{
    const __m128i v0 = _mm_loadu_si128((const __m128i *)r0), v1 = _mm_loadu_si128((const __m128i *)r1);
    const __m128i v2 = _mm_loadu_si128((const __m128i *)r2), v3 = _mm_loadu_si128((const __m128i *)r3);
    const __m128i lo01 = _mm_unpacklo_epi8(v0, v1), hi01 = _mm_unpackhi_epi8(v0, v1);
    const __m128i lo23 = _mm_unpacklo_epi8(v2, v3), hi23 = _mm_unpackhi_epi8(v2, v3);
    _mm_storeu_si128((__m128i *)out, _mm_unpacklo_epi16(lo01, lo23));
    _mm_storeu_si128((__m128i *)(out + 16), _mm_unpackhi_epi16(lo01, lo23));
    _mm_storeu_si128((__m128i *)(out + 32), _mm_unpacklo_epi16(hi01, hi23));
    _mm_storeu_si128((__m128i *)(out + 48), _mm_unpackhi_epi16(hi01, hi23));
}
#endif

#define Q_MR 6
#define Q_NB 4 /* column blocks of 16 per tile: 64 columns */

int
qgemm_supported(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

typedef struct {
    const uint8_t *a;
    idx lda;
    const int8_t *bp;
    idx m, n, k, k4, col_tiles;
    int32_t *c;
    const QgemmRequant *rq; /* NULL: store the raw int32 sums in c (or, with fq, floats) */
    const QgemmFloat *fq;
} QgemmCall;

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* Four bytes of row `row` of A at k = 4 * k4, zero past K. */
static inline int32_t
a_word(const uint8_t *row, idx k4, idx k)
{
    int32_t w = 0;
    const idx at = 4 * k4;
    memcpy(&w, row + at, (size_t)(k - at >= 4 ? 4 : k - at));
    return w;
}

/* One tile: rows [m0, m0 + Q_MR) x columns of tile `tile` (Q_NB blocks of 16). Q_MR x Q_NB
 * = 24 accumulators + Q_NB B vectors + one broadcast of A: 29 of the 32 registers. Each
 * k4 step loads Q_NB vectors of B and broadcasts Q_MR words of A for 24 VPDPBUSD. The
 * accumulators are named variables, not an array: GCC kept an array of them on the stack,
 * storing every one after each multiply-add (4x slower). */
#define QROW(r)                                                                            \
    do {                                                                                   \
        const __m512i av = _mm512_set1_epi32(WORD(r));                                     \
        c##r##0 = _mm512_dpbusd_epi32(c##r##0, av, b0);                                    \
        c##r##1 = _mm512_dpbusd_epi32(c##r##1, av, b1);                                    \
        c##r##2 = _mm512_dpbusd_epi32(c##r##2, av, b2);                                    \
        c##r##3 = _mm512_dpbusd_epi32(c##r##3, av, b3);                                    \
    } while (0)

static inline int32_t
a_full_word(const uint8_t *row, idx k4)
{
    int32_t w;
    memcpy(&w, row + 4 * k4, 4);
    return w;
}

AVX512_VNNI static void
qgemm_tile(const QgemmCall *c, idx m0, idx tile)
{
    const idx rows = c->m - m0 < Q_MR ? c->m - m0 : Q_MR;
    /* rows past M repeat the last one; never stored */
    const uint8_t *a0 = c->a + (m0 + 0) * c->lda;
    const uint8_t *a1 = c->a + (m0 + (1 < rows ? 1 : rows - 1)) * c->lda;
    const uint8_t *a2 = c->a + (m0 + (2 < rows ? 2 : rows - 1)) * c->lda;
    const uint8_t *a3 = c->a + (m0 + (3 < rows ? 3 : rows - 1)) * c->lda;
    const uint8_t *a4 = c->a + (m0 + (4 < rows ? 4 : rows - 1)) * c->lda;
    const uint8_t *a5 = c->a + (m0 + (5 < rows ? 5 : rows - 1)) * c->lda;
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c02 = c00, c03 = c00;
    __m512i c10 = c00, c11 = c00, c12 = c00, c13 = c00;
    __m512i c20 = c00, c21 = c00, c22 = c00, c23 = c00;
    __m512i c30 = c00, c31 = c00, c32 = c00, c33 = c00;
    __m512i c40 = c00, c41 = c00, c42 = c00, c43 = c00;
    __m512i c50 = c00, c51 = c00, c52 = c00, c53 = c00;
    const int8_t *b = c->bp + tile * Q_NB * c->k4 * 64;
    const idx stride = c->k4 * 64; /* bytes between the tile's column blocks */
    const idx full = c->k / 4;     /* k4 steps whose four bytes all lie within K */
    for (idx k4 = 0; k4 < c->k4; k4++) {
        const int8_t *bk = b + k4 * 64;
        const __m512i b0 = _mm512_loadu_si512((const void *)bk);
        const __m512i b1 = _mm512_loadu_si512((const void *)(bk + stride));
        const __m512i b2 = _mm512_loadu_si512((const void *)(bk + 2 * stride));
        const __m512i b3 = _mm512_loadu_si512((const void *)(bk + 3 * stride));
        if (k4 < full) {
#define WORD(r) a_full_word(a##r, k4)
            QROW(0); QROW(1); QROW(2); QROW(3); QROW(4); QROW(5);
#undef WORD
        } else { /* the last, partial group of four k */
#define WORD(r) a_word(a##r, k4, c->k)
            QROW(0); QROW(1); QROW(2); QROW(3); QROW(4); QROW(5);
#undef WORD
        }
    }
    const __m512i acc[Q_MR][Q_NB] = {{c00, c01, c02, c03}, {c10, c11, c12, c13},
                                     {c20, c21, c22, c23}, {c30, c31, c32, c33},
                                     {c40, c41, c42, c43}, {c50, c51, c52, c53}};
    const QgemmRequant *rq = c->rq;
    const QgemmFloat *fq = c->fq;
    for (idx r = 0; r < rows; r++) {
        const idx row = m0 + r;
        Requant requant;
        __m512i add = _mm512_setzero_si512(), za = add;
        if (rq != NULL) {
            requant = (Requant){rq->row_scale[row], rq->ys, rq->zy, rq->lo, rq->hi};
            add = _mm512_set1_epi32(rq->row_add[row]);
            za = _mm512_set1_epi32(rq->row_za[row]);
        }
        for (int j = 0; j < Q_NB; j++) {
            const idx col = tile * Q_NB * 16 + j * 16;
            if (col >= c->n) {
                break;
            }
            const idx left = c->n - col;
            const __mmask16 mask = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
            if (fq != NULL) { /* the float epilogue, likewise in registers */
                __m512i t = _mm512_sub_epi32(acc[r][j], _mm512_maskz_loadu_epi32(mask, fq->col_sub + col));
                if (fq->row_sum != NULL) {
                    t = _mm512_sub_epi32(t, _mm512_mullo_epi32(_mm512_set1_epi32(fq->row_sum[row]),
                                                               _mm512_maskz_loadu_epi32(mask, fq->col_zb + col)));
                }
                const __m512 s = fq->scale_per_col ? _mm512_maskz_loadu_ps(mask, fq->scale + col)
                                                   : _mm512_set1_ps(fq->scale[0]);
                __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(t), s);
                if (fq->bias != NULL) {
                    f = _mm512_add_ps(f, _mm512_maskz_loadu_ps(mask, fq->bias + col));
                }
                _mm512_mask_storeu_ps(fq->y + row * fq->ldy + col, mask, f);
                continue;
            }
            if (rq == NULL) {
                _mm512_mask_storeu_epi32(c->c + row * c->n + col, mask, acc[r][j]);
                continue;
            }
            /* the epilogue, while the sums are in registers (no int32 round trip) */
            __m512i t = _mm512_add_epi32(acc[r][j], add);
            t = _mm512_sub_epi32(t, _mm512_mullo_epi32(za, _mm512_maskz_loadu_epi32(mask, rq->colsum + col)));
            if (rq->y32 != NULL) {
                _mm512_mask_storeu_epi32(rq->y32 + row * rq->ldy + col, mask, t);
                continue;
            }
            _mm512_mask_cvtepi32_storeu_epi8(rq->y + row * rq->ldy + col, mask, requant16(t, &requant));
        }
    }
}
#undef QROW

/* Tiles [begin, end): consecutive tiles share a column tile (its panel of B, Q_NB * 16
 * columns by K, stays in cache) and walk down the rows of A. */
static void
qgemm_range(void *ctx, idx begin, idx end)
{
    const QgemmCall *c = (const QgemmCall *)ctx;
    const idx row_tiles = (c->m + Q_MR - 1) / Q_MR;
    for (idx i = begin; i < end; i++) {
        qgemm_tile(c, (i % row_tiles) * Q_MR, i / row_tiles);
    }
}
#endif

/* The tiles of one product over the pool, with the epilogue rq or fq (or neither). */
static void
qgemm_dispatch(const uint8_t *a, idx lda, const int8_t *bp, idx m, idx n, idx k, int32_t *c,
               const QgemmRequant *rq, const QgemmFloat *fq)
{
#if defined(__x86_64__) && defined(__GNUC__)
    const idx k4 = (k + 3) / 4, col_tiles = (n + 63) / 64;
    QgemmCall call = {a, lda, bp, m, n, k, k4, col_tiles, c, rq, fq};
    const idx tiles = ((m + Q_MR - 1) / Q_MR) * col_tiles;
    /* A tile is Q_MR * 64 * K multiply-adds: hand out a few per thread at least. */
    parallel_for(qgemm_range, &call, tiles, 1 + (1 << 20) / (Q_MR * 64 * (k + 1)));
#else
    (void)a, (void)lda, (void)bp, (void)m, (void)n, (void)k, (void)c, (void)rq, (void)fq;
#endif
}

void
qgemm_run(const uint8_t *a, idx lda, const int8_t *bp, idx m, idx n, idx k, int32_t *c,
          const QgemmRequant *rq)
{
    qgemm_dispatch(a, lda, bp, m, n, k, c, rq, NULL);
}

void
qgemm_run_float(const uint8_t *a, idx lda, const int8_t *bp, idx m, idx n, idx k, const QgemmFloat *fq)
{
    qgemm_dispatch(a, lda, bp, m, n, k, NULL, NULL, fq);
}

/* qgemm_float(a, packed_b, col_sub, row_sum or None, col_zb or None, scale, bias or None,
 * y, m, n, k): y (float32, m x n) = float32(a @ b - zero point terms) * scale + bias. */
PyObject *
py_qgemm_float(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *ao, *bo, *cso, *rso, *zbo, *so, *biaso, *yo;
    Py_ssize_t m, n, k;
    if (!PyArg_ParseTuple(args, "OOOOOOOOnnn", &ao, &bo, &cso, &rso, &zbo, &so, &biaso, &yo, &m, &n, &k)) {
        return NULL;
    }
    if (!qgemm_supported()) {
        PyErr_SetString(PyExc_RuntimeError, "qgemm_float needs AVX-512 VNNI");
        return NULL;
    }
    if (m < 0 || n < 1 || k < 0 || k >= (1 << 16)) {
        PyErr_SetString(PyExc_ValueError, "qgemm_float: dimensions out of range");
        return NULL;
    }
    const idx k4 = (k + 3) / 4, col_tiles = (n + 63) / 64;
    enum { A, B, CS, RS, ZB, S, BI, Y, VIEWS };
    Py_buffer v[VIEWS];
    memset(v, 0, sizeof(v));
    const int with_rows = rso != Py_None;
    if (get_bytes(ao, &v[A], 0, m * k, 1, "a") < 0 ||
        get_bytes(bo, &v[B], 0, col_tiles * Q_NB * k4 * 64, 1, "packed b") < 0 ||
        get_bytes(cso, &v[CS], 0, n, 4, "col_sub") < 0 ||
        (with_rows && (get_bytes(rso, &v[RS], 0, m, 4, "row_sum") < 0 || get_bytes(zbo, &v[ZB], 0, n, 4, "col_zb") < 0)) ||
        get_f32(so, &v[S], 0, 1, "scale") < 0 || get_optional_f32(biaso, &v[BI], n, "bias") < 0 ||
        get_f32(yo, &v[Y], 1, m * n, "y") < 0) {
        release_all(v, VIEWS);
        return NULL;
    }
    const idx scales = v[S].len / 4;
    if (scales != 1 && scales != n) {
        release_all(v, VIEWS);
        PyErr_SetString(PyExc_ValueError, "qgemm_float: one scale, or one per column");
        return NULL;
    }
    QgemmFloat fq = {(const int32_t *)v[CS].buf, with_rows ? (const int32_t *)v[RS].buf : NULL,
                     with_rows ? (const int32_t *)v[ZB].buf : NULL, (const float *)v[S].buf,
                     (const float *)v[BI].buf, scales == n && n > 1, (float *)v[Y].buf, n};
    Py_BEGIN_ALLOW_THREADS
    qgemm_run_float((const uint8_t *)v[A].buf, k, (const int8_t *)v[B].buf, m, n, k, &fq);
    Py_END_ALLOW_THREADS
    release_all(v, VIEWS);
    Py_RETURN_NONE;
}

PyObject *
py_qgemm_u8s8(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *ao, *bo, *co;
    Py_ssize_t m, n, k;
    if (!PyArg_ParseTuple(args, "OOOnnn", &ao, &bo, &co, &m, &n, &k)) {
        return NULL;
    }
    if (!qgemm_supported()) {
        PyErr_SetString(PyExc_RuntimeError, "qgemm_u8s8 needs AVX-512 VNNI");
        return NULL;
    }
    if (m < 0 || n < 0 || k < 0 || k >= (1 << 16)) {
        PyErr_SetString(PyExc_ValueError, "qgemm_u8s8: dimensions out of range");
        return NULL;
    }
    const idx k4 = (k + 3) / 4, col_tiles = (n + 63) / 64;
    enum { A, B, C, VIEWS };
    Py_buffer views[VIEWS];
    memset(views, 0, sizeof(views));
    if (get_bytes(ao, &views[A], 0, m * k, 1, "a") < 0 ||
        get_bytes(bo, &views[B], 0, col_tiles * Q_NB * k4 * 64, 1, "packed b") < 0 ||
        get_bytes(co, &views[C], 1, m * n, 4, "out") < 0) {
        release_all(views, VIEWS);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    qgemm_run((const uint8_t *)views[A].buf, k, (const int8_t *)views[B].buf, m, n, k,
              (int32_t *)views[C].buf, NULL);
    Py_END_ALLOW_THREADS
    release_all(views, VIEWS);
    Py_RETURN_NONE;
}

/* B (K x N int8, row-major) into the packed layout above, zero-padded, and its column sums:
 * once per constant at session creation. numpy's transpose for it moved one byte at a time
 * (~1 ns each: ~90 ms for BERT-base's weights) and summed the columns in another pass. */
PyObject *
py_qgemm_pack(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *bo, *po, *so;
    Py_ssize_t k, n;
    if (!PyArg_ParseTuple(args, "OOOnn", &bo, &po, &so, &k, &n)) {
        return NULL;
    }
    if (k < 0 || n < 0 || k >= (1 << 16)) {
        PyErr_SetString(PyExc_ValueError, "qgemm_pack: dimensions out of range");
        return NULL;
    }
    const idx k4 = (k + 3) / 4, blocks = ((n + 63) / 64) * Q_NB;
    enum { B, P, S, VIEWS };
    Py_buffer views[VIEWS];
    memset(views, 0, sizeof(views));
    if (get_bytes(bo, &views[B], 0, k * n, 1, "b") < 0 ||
        get_bytes(po, &views[P], 1, blocks * k4 * 64, 1, "packed") < 0 ||
        get_bytes(so, &views[S], 1, n, 4, "column sums") < 0) {
        release_all(views, VIEWS);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    const int8_t *b = (const int8_t *)views[B].buf;
    int8_t *packed = (int8_t *)views[P].buf;
    int32_t *sums = (int32_t *)views[S].buf;
    /* Written in order, 64 bytes at a time: block `blk`, group `g` interleaves sixteen
     * columns of four rows of B (element (k, j) at lane k % 4 of column j % 16). */
    for (idx blk = 0; blk < blocks; blk++) {
        const idx j0 = blk * 16, cols = n - j0 >= 16 ? 16 : (n > j0 ? n - j0 : 0);
        for (idx g = 0; g < k4; g++) {
            int8_t *out = packed + (blk * k4 + g) * 64;
#if defined(__SSE2__)
            if (cols == 16 && 4 * g + 4 <= k) { /* a whole group: a 4 x 16 byte transpose */
                const int8_t *src = b + 4 * g * n + j0;
                interleave_4x16(src, src + n, src + 2 * n, src + 3 * n, out);
                continue;
            }
#endif
            memset(out, 0, 64);
            for (idx lane = 0; lane < 4 && 4 * g + lane < k; lane++) {
                const int8_t *src = b + (4 * g + lane) * n + j0;
                for (idx col = 0; col < cols; col++) {
                    out[col * 4 + lane] = src[col];
                }
            }
        }
    }
    memset(sums, 0, (size_t)n * sizeof(int32_t));
    for (idx kk = 0; kk < k; kk++) {
        const int8_t *row = b + kk * n;
        for (idx j = 0; j < n; j++) {
            sums[j] += row[j];
        }
    }
    Py_END_ALLOW_THREADS
    release_all(views, VIEWS);
    Py_RETURN_NONE;
}

PyObject *
py_qgemm_supported(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
    return PyBool_FromLong(qgemm_supported());
}
