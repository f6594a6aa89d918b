/*
 * The commitlog scanner's per-record loops in C: following TOTALSIZE, copying header rows (both
 * in one pass with the body CRCs, walk_gather), the CRCs of many slices of one buffer (zlib's
 * CRC-32 for BODYCRC and the property CRC, CRC-32C for the export's record checksum), the index
 * keys and tag hashes of many records, spans numbered by content; and rmqinspect's one
 * CRC-32 of a single buffer (rmqinspect/format/crc.py). Python pays ~0.3 us per record for each loop; a scan at the
 * speed of the data cannot. rmqinspect/format/speedups.py holds the pure-Python twins (the
 * fallback when this module is not built) and tests check that both agree.
 *
 * CRC-32 uses carry-less multiplication folding (PCLMULQDQ, Gopal et al., "Fast CRC
 * Computation for Generic Polynomials Using PCLMULQDQ Instruction", Intel 2009, as in
 * zlib-ng and Chromium's zlib) when the CPU has it; CRC-32C uses the SSE4.2 crc32
 * instruction; both fall back to slicing-by-8 tables. The message JSON writer validates UTF-8
 * with SSSE3 where the CPU has it (a lead-byte table otherwise) and escapes, copies and writes
 * hex 16 bytes at a time with SSE2 (8 in a 64-bit word without it). RMQINSPECT_SCALAR=1 in the
 * environment at import turns every one of these off: the tests run the portable paths too.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86 1
#include <immintrin.h>
#endif

/* --- tables ------------------------------------------------------------------------------ */

static uint32_t crc32_table[8][256];  /* zlib's reflected 0xEDB88320 */
static uint32_t crc32c_table[8][256]; /* Castagnoli, reflected 0x82F63B78 */

static void make_tables(uint32_t t[8][256], uint32_t poly)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? poly ^ (c >> 1) : c >> 1;
        t[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = t[0][n];
        for (int k = 1; k < 8; k++) {
            c = t[0][c & 0xff] ^ (c >> 8);
            t[k][n] = c;
        }
    }
}

/* Slicing-by-8 on the pre- and post-inverted register value ``c``. */
static uint32_t crc_slice8(uint32_t t[8][256], uint32_t c, const uint8_t *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        c = t[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8); /* little-endian hosts only: PyInit__speedups refuses others */
        w ^= c;
        c = t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^ t[5][(w >> 16) & 0xff] ^
            t[4][(w >> 24) & 0xff] ^ t[3][(w >> 32) & 0xff] ^ t[2][(w >> 40) & 0xff] ^
            t[1][(w >> 48) & 0xff] ^ t[0][(w >> 56) & 0xff];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = t[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

/* --- CRC-32 with PCLMULQDQ ------------------------------------------------------------------ */

#ifdef HAVE_X86
/* ``len`` >= 64 and a multiple of 16; ``crc`` is the inverted register, and so is the result. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t
crc32_clmul(const uint8_t *buf, size_t len, uint32_t crc)
{
    static const uint64_t k1k2[2] __attribute__((aligned(16))) = {0x0154442bd4, 0x01c6e41596};
    static const uint64_t k3k4[2] __attribute__((aligned(16))) = {0x01751997d0, 0x00ccaa009e};
    static const uint64_t k5k0[2] __attribute__((aligned(16))) = {0x0163cd6124, 0x0000000000};
    static const uint64_t poly[2] __attribute__((aligned(16))) = {0x01db710641, 0x01f7011641};
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;

    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = _mm_load_si128((const __m128i *)k1k2);
    buf += 64;
    len -= 64;
    while (len >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
        y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
        buf += 64;
        len -= 64;
    }
    /* Fold the four lanes into one. */
    x0 = _mm_load_si128((const __m128i *)k3k4);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }
    /* 128 bits to 64, then Barrett reduction to 32. */
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_loadl_epi64((const __m128i *)k5k0);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_load_si128((const __m128i *)poly);
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t c, const uint8_t *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8(c, *p++);
        n--;
    }
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = _mm_crc32_u64(c64, w);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--)
        c = _mm_crc32_u8(c, *p++);
    return c;
}
#endif

static int have_clmul = 0;
static int have_sse42 = 0;
static int have_ssse3 = 0;

static uint32_t crc32_of(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
#ifdef HAVE_X86
    if (have_clmul && n >= 64) {
        size_t chunk = n & ~(size_t)15;
        c = crc32_clmul(p, chunk, c);
        p += chunk;
        n -= chunk;
    }
#endif
    return ~crc_slice8(crc32_table, c, p, n);
}

static uint32_t crc32c_of(const uint8_t *p, size_t n)
{
#ifdef HAVE_X86
    if (have_sse42)
        return ~crc32c_hw(0xffffffffu, p, n);
#endif
    return ~crc_slice8(crc32c_table, 0xffffffffu, p, n);
}

/* --- helpers ------------------------------------------------------------------------------- */

static int32_t be32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     (uint32_t)p[3]);
}

/* a + b wrapped to 64 bits, as numpy adds (py_gather's arithmetic): positions come from
 * callers and lying fields, and a signed overflow would be undefined. */
static inline int64_t wadd(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a + (uint64_t)b);
}

/* A writable buffer of int64 items with at least ``n`` of them. The count is compared, not
 * ``n * 8`` with the length: a caller's n near 2**61 would wrap that product to a small one. */
static int get_i64_out(PyObject *obj, Py_buffer *view, Py_ssize_t n, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (n < 0 || n > view->len / (Py_ssize_t)sizeof(int64_t)) {
        PyErr_Format(PyExc_ValueError, "%s holds fewer than %zd int64 items", what, n);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* How many (start, length) pairs two int64 buffers of one size hold, every slice with a positive
 * length lying inside a buffer of len bytes; -1 with ValueError set otherwise. */
static Py_ssize_t slice_pairs(const Py_buffer *starts, const Py_buffer *lengths, Py_ssize_t len)
{
    if (lengths->len != starts->len || starts->len % (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "starts and lengths must be int64 arrays of one length");
        return -1;
    }
    Py_ssize_t n = starts->len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *s = starts->buf, *l = lengths->buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (l[i] > 0 && (s[i] < 0 || l[i] > (int64_t)len - s[i])) {
            PyErr_Format(PyExc_ValueError, "slice %zd [%lld, +%lld) is outside the buffer", i,
                         (long long)s[i], (long long)l[i]);
            return -1;
        }
    }
    return n;
}

/* --- walk ---------------------------------------------------------------------------------- */

PyDoc_STRVAR(walk_doc,
             "walk(buf, pos, max_records, min_size, magics, positions, sizes) -> (count, end)\n\n"
             "Follow TOTALSIZE from pos while a record's size is at least min_size, lies inside\n"
             "buf and its magic is one of magics (a tuple of ints); write the starts and sizes\n"
             "of at most max_records records into the int64 buffers positions and sizes.");

static PyObject *speedups_walk(PyObject *self, PyObject *args)
{
    Py_buffer buf, pos_out, size_out;
    Py_ssize_t pos, max_records;
    long min_size;
    PyObject *magics, *positions, *sizes;
    int32_t allowed[4];
    Py_ssize_t n_allowed;

    if (!PyArg_ParseTuple(args, "y*nnlO!OO", &buf, &pos, &max_records, &min_size, &PyTuple_Type,
                          &magics, &positions, &sizes))
        return NULL;
    n_allowed = PyTuple_GET_SIZE(magics);
    if (n_allowed > 4 || max_records < 0 || pos < 0 || min_size < 8) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "bad walk arguments");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n_allowed; i++) {
        long m = PyLong_AsLong(PyTuple_GET_ITEM(magics, i));
        if (m == -1 && PyErr_Occurred()) {
            PyBuffer_Release(&buf);
            return NULL;
        }
        allowed[i] = (int32_t)m;
    }
    if (get_i64_out(positions, &pos_out, max_records, "positions") < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    if (get_i64_out(sizes, &size_out, max_records, "sizes") < 0) {
        PyBuffer_Release(&pos_out);
        PyBuffer_Release(&buf);
        return NULL;
    }
    const uint8_t *data = buf.buf;
    Py_ssize_t limit = buf.len, at = pos, count = 0;
    int64_t *po = pos_out.buf, *so = size_out.buf;
    Py_BEGIN_ALLOW_THREADS
    while (count < max_records && at <= limit - 8) { /* at + 8 could pass PY_SSIZE_T_MAX */
        int32_t size = be32(data + at);
        if (size < min_size || size > limit - at)
            break;
        int32_t magic = be32(data + at + 4);
        int ok = 0;
        for (Py_ssize_t i = 0; i < n_allowed; i++)
            ok |= magic == allowed[i];
        if (!ok)
            break;
        po[count] = at;
        so[count] = size;
        count++;
        at += size;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&size_out);
    PyBuffer_Release(&pos_out);
    PyBuffer_Release(&buf);
    return Py_BuildValue("nn", count, at);
}

/* --- bytes in chunks ------------------------------------------------------------------------- */

/* The JSON writer's inner loops look at a chunk of bytes at once: 16 with SSE2 (every x86_64
 * CPU), else 8 in a 64-bit word (what other hosts run, and x86_64 under RMQINSPECT_SCALAR=1).
 * The *_ascii and *_clean functions give how many leading bytes of the chunk at p are ASCII,
 * and need no JSON escape (below 0x20, '"', '\\'); the chunk's width when all do. */
typedef size_t (*chunk_fn)(const uint8_t *);

/* mask has 0x80 set in the marked bytes (the host is little-endian: see PyInit__speedups) */
static inline size_t word_first_marked(uint64_t mask)
{
    size_t k = 0;
    if (!mask)
        return 8;
    while (!(mask & 0x80))
        mask >>= 8, k++;
    return k;
}
static inline size_t word_ascii(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return word_first_marked(w & 0x8080808080808080ull);
}
/* exact for "is any byte marked"; above the first marked byte a borrow may mark more */
static inline size_t word_clean(const uint8_t *p)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t w;
    memcpy(&w, p, 8);
    uint64_t quote = w ^ (ones * '"'), slash = w ^ (ones * '\\');
    return word_first_marked(((w - ones * 0x20) & ~w & highs) | ((quote - ones) & ~quote & highs) |
                             ((slash - ones) & ~slash & highs));
}

#ifdef __SSE2__
#include <emmintrin.h>
static inline size_t sse2_first_marked(unsigned mask)
{
    return mask ? (size_t)__builtin_ctz(mask) : 16;
}
static inline size_t sse2_ascii(const uint8_t *p)
{
    return sse2_first_marked((unsigned)_mm_movemask_epi8(_mm_loadu_si128((const __m128i *)p)));
}
static inline size_t sse2_clean(const uint8_t *p)
{
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i control = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
    __m128i quote = _mm_cmpeq_epi8(v, _mm_set1_epi8('"'));
    __m128i slash = _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'));
    return sse2_first_marked(
        (unsigned)_mm_movemask_epi8(_mm_or_si128(control, _mm_or_si128(quote, slash))));
}
#endif

/* Whether the SSE2 chunks (and the SSE2 hex loop) are in use: where compiled with SSE2, unless
 * RMQINSPECT_SCALAR=1 forced the scalar paths (see PyInit__speedups). */
static int have_sse2 = 0;

/* --- UTF-8 ------------------------------------------------------------------------------------ */

/* Strict UTF-8 as Python's decoder accepts it (no overlong forms, no surrogates, at most
 * U+10FFFF), by lead byte: the sequence's length (0: not a lead byte) and the range of its
 * second byte, which carries every one of those rules (Unicode 15, table 3-7). */
static uint8_t utf8_length[256], utf8_low[256], utf8_high[256];

static void make_utf8_tables(void)
{
    for (int b = 0xC2; b <= 0xF4; b++) {
        utf8_length[b] = b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        utf8_low[b] = b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80;
        utf8_high[b] = b == 0xED ? 0x9F : b == 0xF4 ? 0x8F : 0xBF;
    }
}

#if defined(HAVE_X86) && defined(__SSE2__)
/* The validation of J. Keiser and D. Lemire, "Validating UTF-8 in less than one instruction per
 * byte" (Software: Practice and Experience, 2021; simdjson's and simdutf's "lookup" algorithm),
 * 16 bytes at a time: three table lookups on the nibbles of each byte and of the byte before
 * it flag every two-byte pattern that strict UTF-8 forbids (the error classes named below);
 * the third and fourth bytes of longer sequences are checked by whether the byte two or three
 * back is a three- or four-byte lead. A block of zeros after the data catches a sequence cut
 * at the end. */
#define TOO_SHORT (1 << 0)  /* a lead byte or ASCII, then a lead byte or ASCII */
#define TOO_LONG (1 << 1)   /* ASCII, then a continuation byte */
#define OVERLONG_3 (1 << 2) /* E0 80..9F */
#define TOO_LARGE (1 << 3)  /* F4 90..BF, F5..FF */
#define SURROGATE (1 << 4)  /* ED A0..BF */
#define OVERLONG_2 (1 << 5) /* C0..C1 */
#define TOO_LARGE_1000 (1 << 6)
#define OVERLONG_4 (1 << 6) /* F0 80..8F */
#define TWO_CONTS (1 << 7)  /* a continuation byte, then another: left to the length check */
#define CARRY (TOO_SHORT | TOO_LONG | TWO_CONTS)

__attribute__((target("ssse3"))) static int valid_utf8_ssse3(const uint8_t *p, size_t n)
{
    const __m128i byte_1_high = _mm_setr_epi8(
        TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TWO_CONTS,
        TWO_CONTS, TWO_CONTS, TWO_CONTS, TOO_SHORT | OVERLONG_2, TOO_SHORT,
        TOO_SHORT | OVERLONG_3 | SURROGATE, TOO_SHORT | TOO_LARGE | TOO_LARGE_1000 | OVERLONG_4);
    const __m128i byte_1_low = _mm_setr_epi8(
        CARRY | OVERLONG_3 | OVERLONG_2 | OVERLONG_4, CARRY | OVERLONG_2, CARRY, CARRY,
        CARRY | TOO_LARGE, CARRY | TOO_LARGE | TOO_LARGE_1000, CARRY | TOO_LARGE | TOO_LARGE_1000,
        CARRY | TOO_LARGE | TOO_LARGE_1000, CARRY | TOO_LARGE | TOO_LARGE_1000,
        CARRY | TOO_LARGE | TOO_LARGE_1000, CARRY | TOO_LARGE | TOO_LARGE_1000,
        CARRY | TOO_LARGE | TOO_LARGE_1000, CARRY | TOO_LARGE | TOO_LARGE_1000,
        CARRY | TOO_LARGE | TOO_LARGE_1000 | SURROGATE, CARRY | TOO_LARGE | TOO_LARGE_1000,
        CARRY | TOO_LARGE | TOO_LARGE_1000);
    const __m128i byte_2_high = _mm_setr_epi8(
        TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT,
        TOO_LONG | OVERLONG_2 | TWO_CONTS | OVERLONG_3 | TOO_LARGE_1000 | OVERLONG_4,
        TOO_LONG | OVERLONG_2 | TWO_CONTS | OVERLONG_3 | TOO_LARGE,
        TOO_LONG | OVERLONG_2 | TWO_CONTS | SURROGATE | TOO_LARGE,
        TOO_LONG | OVERLONG_2 | TWO_CONTS | SURROGATE | TOO_LARGE, TOO_SHORT, TOO_SHORT, TOO_SHORT,
        TOO_SHORT);
    /* the last bytes of a block that start a sequence the block does not finish */
    const __m128i incomplete_above = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                                   -1, (char)0xef, (char)0xdf, (char)0xbf);
    const __m128i low4 = _mm_set1_epi8(0x0f), zero = _mm_setzero_si128();
    __m128i prev = zero, prev_incomplete = zero, error = zero;
    uint8_t tail[16];
    for (size_t i = 0;; i += 16) {
        __m128i input;
        int last = i + 16 > n;
        if (!last) {
            input = _mm_loadu_si128((const __m128i *)(p + i));
        } else {
            memset(tail, 0, sizeof(tail));
            memcpy(tail, p + i, n - i);
            input = _mm_loadu_si128((const __m128i *)tail);
        }
        if (!_mm_movemask_epi8(input)) {
            error = _mm_or_si128(error, prev_incomplete);
        } else {
            __m128i prev1 = _mm_alignr_epi8(input, prev, 15);
            __m128i special = _mm_and_si128(
                _mm_and_si128(
                    _mm_shuffle_epi8(byte_1_high, _mm_and_si128(_mm_srli_epi16(prev1, 4), low4)),
                    _mm_shuffle_epi8(byte_1_low, _mm_and_si128(prev1, low4))),
                _mm_shuffle_epi8(byte_2_high, _mm_and_si128(_mm_srli_epi16(input, 4), low4)));
            __m128i prev2 = _mm_alignr_epi8(input, prev, 14);
            __m128i prev3 = _mm_alignr_epi8(input, prev, 13);
            __m128i must_be_continuation =
                _mm_and_si128(_mm_or_si128(_mm_subs_epu8(prev2, _mm_set1_epi8(0xe0 - 0x80)),
                                           _mm_subs_epu8(prev3, _mm_set1_epi8(0xf0 - 0x80))),
                              _mm_set1_epi8((char)0x80));
            error = _mm_or_si128(error, _mm_xor_si128(must_be_continuation, special));
            prev_incomplete = _mm_subs_epu8(input, incomplete_above);
        }
        if (_mm_movemask_epi8(_mm_cmpeq_epi8(error, zero)) != 0xffff)
            return 0;
        if (last)
            return 1;
        prev = input;
    }
}
#undef TOO_SHORT
#undef TOO_LONG
#undef OVERLONG_3
#undef TOO_LARGE
#undef SURROGATE
#undef OVERLONG_2
#undef TOO_LARGE_1000
#undef OVERLONG_4
#undef TWO_CONTS
#undef CARRY
#endif

/* the scalar loop, for chunks of ``chunk`` bytes read by ``ascii`` (inlined for each width) */
static inline __attribute__((always_inline)) int
valid_utf8_by(const uint8_t *p, size_t n, const size_t chunk, const chunk_fn ascii)
{
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) { /* ASCII a chunk at a time */
            while (i + chunk <= n) {
                size_t k = ascii(p + i);
                i += k;
                if (k < chunk)
                    break;
            }
            while (i < n && p[i] < 0x80)
                i++;
            continue;
        }
        /* then one sequence after another while they last (text like CJK holds no ASCII) */
        while (i < n && p[i] >= 0x80) {
            uint8_t b = p[i];
            size_t len = utf8_length[b];
            if (!len || n - i < len || p[i + 1] < utf8_low[b] || p[i + 1] > utf8_high[b])
                return 0;
            for (size_t k = 2; k < len; k++)
                if ((p[i + k] & 0xC0) != 0x80)
                    return 0;
            i += len;
        }
    }
    return 1;
}

static int valid_utf8(const uint8_t *p, size_t n)
{
#if defined(HAVE_X86) && defined(__SSE2__)
    /* Below a block the scalar loop wins: names and values of properties are mostly short. */
    if (have_ssse3 && n >= 16)
        return valid_utf8_ssse3(p, n);
#endif
#ifdef __SSE2__
    if (have_sse2)
        return valid_utf8_by(p, n, 16, sse2_ascii);
#endif
    return valid_utf8_by(p, n, 8, word_ascii);
}

/* Grow-on-demand int64 output columns. */
static PyObject *as_bytes(const int64_t *v, Py_ssize_t n)
{
    return PyBytes_FromStringAndSize((const char *)v, n * (Py_ssize_t)sizeof(int64_t));
}

/* --- message JSON ---------------------------------------------------------------------------- */

/* The columns message_json reads, in the order of MESSAGE_FIELDS (RecordColumns' names). */
enum {
    F_POSITION, F_SIZE, F_MAGIC, F_BODY_CRC, F_QUEUE_ID, F_FLAG, F_QUEUE_OFFSET,
    F_PHYSICAL_OFFSET, F_SYS_FLAG, F_BORN_TIMESTAMP, F_BORN_HOST_AT, F_BORN_PORT,
    F_STORE_TIMESTAMP, F_STORE_HOST_AT, F_STORE_PORT, F_RECONSUME_TIMES,
    F_PREPARED_TRANSACTION_OFFSET, F_BODY_AT, F_BODY_LENGTH, F_TOPIC_AT, F_TOPIC_LENGTH,
    F_PROPERTIES_AT, F_PROPERTIES_LENGTH, F_COUNT
};
static const char *const field_names[F_COUNT] = {
    "positions", "store_size", "magic", "body_crc", "queue_id", "flag", "queue_offset",
    "physical_offset_field", "sys_flag", "born_timestamp", "born_host_at", "born_port",
    "store_timestamp", "store_host_at", "store_port", "reconsume_times",
    "prepared_transaction_offset", "body_at", "body_length", "topic_at", "topic_length",
    "properties_at", "properties_length",
};

/* The output: the caller's bytearray, grown here when a batch needs more and never shrunk, so
 * batch after batch writes into memory that is already mapped (fresh pages would cost a page
 * fault and a clearing each, about as much as the JSON itself). */
typedef struct {
    PyObject *array;
    char *data;
    size_t len, cap;
} out_buf;

/* Room for ``more`` bytes; -1 with an exception set (MemoryError, or BufferError while a view
 * of the bytearray is alive). */
static int out_grow(out_buf *o, size_t more)
{
    if (more > (size_t)PY_SSIZE_T_MAX - o->len) { /* no bytearray holds that much */
        PyErr_NoMemory();
        return -1;
    }
    size_t need = o->len + more, cap = o->cap ? o->cap : 1 << 16;
    while (cap < need)
        cap *= 2; /* cap < need <= PY_SSIZE_T_MAX: no wrap */
    if (cap > (size_t)PY_SSIZE_T_MAX)
        cap = need;
    if (PyByteArray_Resize(o->array, (Py_ssize_t)cap) < 0)
        return -1;
    o->data = PyByteArray_AS_STRING(o->array);
    o->cap = cap;
    return 0;
}

/* inline: every value of every row asks (the growing is out of line) */
static inline int out_reserve(out_buf *o, size_t more)
{
    return more <= o->cap - o->len ? 0 : out_grow(o, more); /* len <= cap: no wrap */
}

/* Room for ``count`` items of at most ``width`` bytes and ``extra`` bytes more, the product
 * checked first: the count is a slice's length, and a long enough one would wrap it. */
static int out_reserve_items(out_buf *o, size_t count, size_t width, size_t extra)
{
    if (count > ((size_t)PY_SSIZE_T_MAX - extra) / width) {
        PyErr_NoMemory();
        return -1;
    }
    return out_reserve(o, count * width + extra);
}

#define PUT(o, s, n)                                                                               \
    do {                                                                                           \
        if (out_reserve((o), (n)) < 0)                                                             \
            goto done;                                                                             \
        memcpy((o)->data + (o)->len, (s), (n));                                                    \
        (o)->len += (n);                                                                           \
    } while (0)
#define PUTS(o, lit) PUT(o, lit, sizeof(lit) - 1)

/* Two characters per table entry: the decimal digits of 0..99, and the hex digits of a byte
 * (lower and upper case): half the divisions and lookups of a digit at a time. */
static char digit_pairs[100][2], hex_lower[256][2], hex_upper[256][2];

static void make_digit_tables(void)
{
    static const char lower[] = "0123456789abcdef", upper[] = "0123456789ABCDEF";
    for (int k = 0; k < 100; k++) {
        digit_pairs[k][0] = (char)('0' + k / 10);
        digit_pairs[k][1] = (char)('0' + k % 10);
    }
    for (int b = 0; b < 256; b++) {
        hex_lower[b][0] = lower[b >> 4];
        hex_lower[b][1] = lower[b & 15];
        hex_upper[b][0] = upper[b >> 4];
        hex_upper[b][1] = upper[b & 15];
    }
}

/* The decimal text of v at d; writes up to INT_WRITE bytes (the digits are copied as one
 * fixed-size block: no memcpy call), returns the end of the text. */
#define INT_WRITE 21
static char *write_int(char *d, long long v)
{
    char tmp[2 * INT_WRITE];
    char *end = tmp + INT_WRITE, *t = end;
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    while (u >= 100) {
        t -= 2;
        memcpy(t, digit_pairs[u % 100], 2);
        u /= 100;
    }
    if (u >= 10) {
        t -= 2;
        memcpy(t, digit_pairs[u], 2);
    } else {
        *--t = (char)('0' + u);
    }
    if (v < 0)
        *--t = '-';
    memcpy(d, t, INT_WRITE);
    return d + (end - t);
}

static int put_int(out_buf *o, long long v)
{
    if (out_reserve(o, INT_WRITE) < 0)
        return -1;
    o->len = (size_t)(write_int(o->data + o->len, v) - o->data);
    return 0;
}

/* A JSON string of the valid UTF-8 bytes p[0..n), escaped as json.dumps(ensure_ascii=False) and
 * orjson do. The bytes that need no escape are copied a chunk at a time: the whole chunk is
 * stored, then the output moves on by its clean prefix (the reserve covers it). Chunks are read
 * while ``readable`` bytes from p allow (the rest of the record's buffer), past n: a short
 * string, such as a property, takes one chunk, not a loop byte by byte. Inlined for each chunk
 * width (``clean`` reads ``chunk`` bytes). */
static inline __attribute__((always_inline)) int put_str_by(out_buf *o, const uint8_t *p,
                                                            size_t n, size_t readable,
                                                            const size_t chunk,
                                                            const chunk_fn clean)
{
    static const char hex[] = "0123456789abcdef";
    if (out_reserve_items(o, n, 6, 2 + chunk) < 0)
        return -1;
    char *d = o->data + o->len;
    *d++ = '"';
    size_t i = 0;
    while (i < n) {
        uint8_t c;
        if (i + chunk <= readable) {
            size_t k = clean(p + i);
            memcpy(d, p + i, chunk);
            if (k >= n - i) { /* clean to the end of the string */
                d += n - i;
                break;
            }
            d += k;
            i += k;
            if (k == chunk)
                continue;
            c = p[i];
        } else if ((c = p[i]) >= 0x20 && c != '"' && c != '\\') {
            *d++ = (char)c;
            i++;
            continue;
        }
        i++;
        *d++ = '\\';
        switch (c) {
        case '"': *d++ = '"'; break;
        case '\\': *d++ = '\\'; break;
        case '\b': *d++ = 'b'; break;
        case '\t': *d++ = 't'; break;
        case '\n': *d++ = 'n'; break;
        case '\f': *d++ = 'f'; break;
        case '\r': *d++ = 'r'; break;
        default:
            *d++ = 'u';
            *d++ = '0';
            *d++ = '0';
            *d++ = hex[c >> 4];
            *d++ = hex[c & 15];
        }
    }
    *d++ = '"';
    o->len = (size_t)(d - o->data);
    return 0;
}

static int put_str(out_buf *o, const uint8_t *p, size_t n, size_t readable)
{
#ifdef __SSE2__
    if (have_sse2)
        return put_str_by(o, p, n, readable, 16, sse2_clean);
#endif
    return put_str_by(o, p, n, readable, 8, word_clean);
}

/* The "YYYY-MM-DDTHH:MM:SS" of the last second written: the messages of a batch are stored
 * within a few seconds, so most times only write their milliseconds. */
typedef struct {
    long long secs;
    char text[19];
} time_cache;

#define MIN_TIME_MS -62167219200000LL /* 0000-01-01T00:00:00.000Z */
#define MAX_TIME_MS 253402300799999LL /* 9999-12-31T23:59:59.999Z */

/* ISO 8601 UTC with milliseconds, as render.values.iso_ms writes it (null outside its range,
 * which holds only four-digit years). */
static int put_time(out_buf *o, long long ms, long long min_ms, long long max_ms, time_cache *c)
{
    if (out_reserve(o, 32) < 0)
        return -1;
    if (ms < min_ms || ms > max_ms) {
        memcpy(o->data + o->len, "null", 4);
        o->len += 4;
        return 0;
    }
    long long secs = ms >= 0 ? ms / 1000 : -((-ms + 999) / 1000);
    int milli = (int)(ms - secs * 1000);
    if (secs != c->secs) {
        long long days = secs >= 0 ? secs / 86400 : -((-secs + 86399) / 86400);
        int rem = (int)(secs - days * 86400);
        /* civil_from_days (H. Hinnant) */
        long long z = days + 719468;
        long long era = (z >= 0 ? z : z - 146096) / 146097;
        long long doe = z - era * 146097;
        long long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
        long long y = yoe + era * 400;
        long long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        long long mp = (5 * doy + 2) / 153;
        long long d = doy - (153 * mp + 2) / 5 + 1;
        long long m = mp < 10 ? mp + 3 : mp - 9;
        y += m <= 2;
        int parts[6] = {(int)y, (int)m, (int)d, rem / 3600, rem / 60 % 60, rem % 60};
        static const char seps[5] = {'-', '-', 'T', ':', ':'};
        char *w = c->text;
        memcpy(w, digit_pairs[parts[0] / 100], 2);
        memcpy(w + 2, digit_pairs[parts[0] % 100], 2);
        w += 4;
        for (int k = 1; k < 6; k++) {
            *w++ = seps[k - 1];
            memcpy(w, digit_pairs[parts[k]], 2);
            w += 2;
        }
        c->secs = secs;
    }
    char *w = o->data + o->len;
    *w++ = '"';
    memcpy(w, c->text, sizeof(c->text));
    w += sizeof(c->text);
    *w++ = '.';
    *w++ = (char)('0' + milli / 100);
    memcpy(w, digit_pairs[milli % 100], 2);
    w += 2;
    *w++ = 'Z';
    *w++ = '"';
    o->len = (size_t)(w - o->data);
    return 0;
}

/* An IPv4-mapped IPv6 address, which Python versions write differently: left to the caller. */
static int v4_mapped(const uint8_t *ip)
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(ip, prefix, 12) == 0;
}

/* str(HostAddress): "a.b.c.d:port", or "[v6]:port" with the v6 text of ipaddress (lower-case
 * groups without leading zeros, the first longest run of two or more zero groups as "::"). */
static int put_host(out_buf *o, const uint8_t *ip, int v6, long long port)
{
    static const char hex[] = "0123456789abcdef";
    /* at most '"[' + 39 + ']:' before the port, and the quote after it */
    if (out_reserve(o, 44 + INT_WRITE) < 0)
        return -1;
    char *d = o->data + o->len;
    *d++ = '"';
    if (!v6) {
        for (int k = 0; k < 4; k++) {
            d = write_int(d, ip[k]);
            *d++ = k < 3 ? '.' : ':';
        }
    } else {
        int groups[8], best = -1, best_len = 0, run = -1, run_len = 0;
        for (int k = 0; k < 8; k++) {
            groups[k] = (ip[2 * k] << 8) | ip[2 * k + 1];
            if (groups[k] == 0) {
                if (run < 0)
                    run = k;
                if (++run_len > best_len) {
                    best_len = run_len;
                    best = run;
                }
            } else {
                run = -1;
                run_len = 0;
            }
        }
        if (best_len < 2)
            best = -1;
        *d++ = '[';
        for (int k = 0; k < 8; k++) {
            if (k == best) {
                *d++ = ':';
                if (k == 0)
                    *d++ = ':';
                k += best_len - 1;
                continue;
            }
            int started = 0;
            for (int shift = 12; shift >= 0; shift -= 4) {
                int nib = (groups[k] >> shift) & 15;
                if (nib || started || shift == 0) {
                    *d++ = hex[nib];
                    started = 1;
                }
            }
            if (k < 7)
                *d++ = ':';
        }
        *d++ = ']';
        *d++ = ':';
    }
    d = write_int(d, port);
    *d++ = '"';
    o->len = (size_t)(d - o->data);
    return 0;
}

typedef struct {
    const uint8_t *name, *value;
    size_t name_len, value_len;
} prop_entry;

#define MAX_PROPS 256

static int name_cmp(const prop_entry *a, const prop_entry *b)
{
    size_t n = a->name_len < b->name_len ? a->name_len : b->name_len;
    int c = memcmp(a->name, b->name, n);
    return c ? c : (a->name_len > b->name_len) - (a->name_len < b->name_len);
}

/* parse_properties: entries split on 0x02, the name before the entry's first 0x01; entries
 * with an empty name or value dropped; a later duplicate wins. Sorted by name (as dict(sorted())
 * orders str keys: by code point, which is byte order for valid UTF-8). Returns the count, or -1
 * for more than MAX_PROPS entries. */
static int parse_props(const uint8_t *p, size_t n, prop_entry *out)
{
    int count = 0;
    size_t i = 0;
    while (i < n) {
        const uint8_t *entry = p + i;
        const uint8_t *stop = memchr(entry, 0x02, n - i);
        size_t len = stop ? (size_t)(stop - entry) : n - i;
        const uint8_t *sep = memchr(entry, 0x01, len);
        if (sep && sep > entry && (size_t)(sep - entry) + 1 < len) {
            if (count == MAX_PROPS)
                return -1;
            prop_entry e = {entry, sep + 1, (size_t)(sep - entry), len - (size_t)(sep - entry) - 1};
            /* Insertion keeps entries sorted; an equal name is replaced (the later one wins). */
            int k = count;
            while (k > 0 && name_cmp(&out[k - 1], &e) > 0)
                k--;
            if (k > 0 && name_cmp(&out[k - 1], &e) == 0) {
                out[k - 1] = e;
            } else {
                memmove(out + k + 1, out + k, (size_t)(count - k) * sizeof(prop_entry));
                out[k] = e;
                count++;
            }
        }
        i += len + 1;
    }
    return count;
}

static const prop_entry *find_prop(const prop_entry *e, int n, const char *name)
{
    size_t len = strlen(name);
    for (int i = 0; i < n; i++)
        if (e[i].name_len == len && memcmp(e[i].name, name, len) == 0)
            return &e[i];
    return NULL;
}

/* base64 of p[0..n) in quotes: six bytes at a time through one 8-byte big-endian load, as four
 * 12-bit lookups of two characters each. */
static char b64_pairs[4096][2];
static const char b64_digits[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static inline uint64_t load_be64(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_bswap64(w); /* the host is little-endian: see PyInit__speedups */
#else
    uint64_t r = 0;
    for (int k = 0; k < 8; k++)
        r = (r << 8) | p[k];
    return r;
#endif
}

static void make_b64_table(void)
{
    for (int k = 0; k < 4096; k++) {
        b64_pairs[k][0] = b64_digits[k >> 6];
        b64_pairs[k][1] = b64_digits[k & 63];
    }
}

#if defined(HAVE_X86) && defined(__SSE2__)
/* base64 of 12 bytes at p (16 readable) into 16 characters at d, after W. Mula and D. Lemire,
 * "Faster Base64 Encoding and Decoding Using AVX2 Instructions" (ACM TWEB, 2018), with SSSE3:
 * the bytes spread so each 32-bit lane holds three, the four 6-bit indices cut out with two
 * multiplications, and each index moved to its character by an offset looked up by range. */
__attribute__((target("ssse3"))) static void base64_12(const uint8_t *p, char *d)
{
    __m128i in = _mm_loadu_si128((const __m128i *)p);
    in = _mm_shuffle_epi8(in, _mm_set_epi8(10, 11, 9, 10, 7, 8, 6, 7, 4, 5, 3, 4, 1, 2, 0, 1));
    __m128i hi = _mm_mulhi_epu16(_mm_and_si128(in, _mm_set1_epi32(0x0fc0fc00)),
                                 _mm_set1_epi32(0x04000040));
    __m128i lo = _mm_mullo_epi16(_mm_and_si128(in, _mm_set1_epi32(0x003f03f0)),
                                 _mm_set1_epi32(0x01000010));
    __m128i index = _mm_or_si128(hi, lo);
    /* 0..25 -> 13 ('A' + index), 26..51 -> 0 ('a' - 26), 52..61 -> 1..10 ('0' - 52), 62 -> 11,
     * 63 -> 12 */
    __m128i range = _mm_subs_epu8(index, _mm_set1_epi8(51));
    range = _mm_or_si128(range, _mm_and_si128(_mm_cmpgt_epi8(_mm_set1_epi8(26), index),
                                              _mm_set1_epi8(13)));
    const __m128i offsets = _mm_setr_epi8('a' - 26, '0' - 52, '0' - 52, '0' - 52, '0' - 52,
                                          '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52,
                                          '0' - 52, '+' - 62, '/' - 63, 'A', 0, 0);
    _mm_storeu_si128((__m128i *)d, _mm_add_epi8(index, _mm_shuffle_epi8(offsets, range)));
}
#endif

static int put_base64(out_buf *o, const uint8_t *p, size_t n)
{
    if (out_reserve_items(o, n / 3 + 1, 4, 2) < 0) /* (n + 2) / 3 quads, and the quotes */
        return -1;
    char *d = o->data + o->len;
    *d++ = '"';
    size_t i = 0;
#if defined(HAVE_X86) && defined(__SSE2__)
    if (have_ssse3) {
        for (; i + 16 <= n; i += 12) {
            base64_12(p + i, d);
            d += 16;
        }
    }
#endif
    for (; i + 8 <= n; i += 6) {
        uint64_t w = load_be64(p + i) >> 16; /* the six bytes of this step */
        memcpy(d, b64_pairs[(w >> 36) & 0xfff], 2);
        memcpy(d + 2, b64_pairs[(w >> 24) & 0xfff], 2);
        memcpy(d + 4, b64_pairs[(w >> 12) & 0xfff], 2);
        memcpy(d + 6, b64_pairs[w & 0xfff], 2);
        d += 8;
    }
    for (; i + 3 <= n; i += 3) {
        uint32_t v = ((uint32_t)p[i] << 16) | ((uint32_t)p[i + 1] << 8) | p[i + 2];
        memcpy(d, b64_pairs[v >> 12], 2);
        memcpy(d + 2, b64_pairs[v & 0xfff], 2);
        d += 4;
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        *d++ = b64_digits[v >> 18];
        *d++ = b64_digits[(v >> 12) & 63];
        *d++ = '=';
        *d++ = '=';
    } else if (n - i == 2) {
        uint32_t v = ((uint32_t)p[i] << 16) | ((uint32_t)p[i + 1] << 8);
        *d++ = b64_digits[v >> 18];
        *d++ = b64_digits[(v >> 12) & 63];
        *d++ = b64_digits[(v >> 6) & 63];
        *d++ = '=';
    }
    *d++ = '"';
    o->len = (size_t)(d - o->data);
    return 0;
}

/* hex of p[0..n), two characters per byte from a table; lower-case bytes 16 at a time with
 * SSE2 (nibbles spread to bytes, '0' added, and 'a' - '0' - 10 more above 9). */
static int put_hex(out_buf *o, const uint8_t *p, size_t n, const char (*digits)[2])
{
    if (out_reserve_items(o, n, 2, 0) < 0)
        return -1;
    char *d = o->data + o->len;
    size_t i = 0;
#ifdef __SSE2__
    if (have_sse2 && digits == hex_lower) {
        const __m128i low4 = _mm_set1_epi8(0x0f), nine = _mm_set1_epi8(9);
        const __m128i zero = _mm_set1_epi8('0'), gap = _mm_set1_epi8('a' - '0' - 10);
        for (; i + 16 <= n; i += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
            __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), low4), lo = _mm_and_si128(v, low4);
            __m128i a = _mm_unpacklo_epi8(hi, lo), b = _mm_unpackhi_epi8(hi, lo);
            a = _mm_add_epi8(_mm_add_epi8(a, zero), _mm_and_si128(_mm_cmpgt_epi8(a, nine), gap));
            b = _mm_add_epi8(_mm_add_epi8(b, zero), _mm_and_si128(_mm_cmpgt_epi8(b, nine), gap));
            _mm_storeu_si128((__m128i *)d, a);
            _mm_storeu_si128((__m128i *)(d + 16), b);
            d += 32;
        }
    }
#endif
    for (; i < n; i++) {
        memcpy(d, digits[p[i]], 2);
        d += 2;
    }
    o->len = (size_t)(d - o->data);
    return 0;
}

static void be_put(uint8_t *d, unsigned long long v, int width)
{
    for (int k = width - 1; k >= 0; k--) {
        d[k] = (uint8_t)(v & 0xff);
        v >>= 8;
    }
}

/* The values message_json can write, by the JSON key format.message_json.message_json gives them
 * (exported as VALUE_KEYS): the caller hands the keys and their order, taken from that
 * definition, and this code only knows how to compute each value from the columns. */
enum {
    V_PHYSICAL_OFFSET, V_STORE_SIZE, V_VERSION, V_TOPIC, V_QUEUE_ID, V_QUEUE_OFFSET, V_SYS_FLAG,
    V_TRANSACTION, V_FLAG, V_BODY_CRC, V_BODY_CRC_OK, V_PROP_CRC, V_PROP_CRC_OK,
    V_BORN_TIMESTAMP, V_BORN_TIME, V_BORN_HOST, V_STORE_TIMESTAMP, V_STORE_TIME, V_STORE_HOST,
    V_RECONSUME_TIMES, V_PREPARED_TRANSACTION_OFFSET, V_PROPERTIES, V_TAGS, V_KEYS, V_UNIQ_KEY,
    V_MSG_ID, V_BODY_LENGTH, V_COMPRESSION, V_BODY_ENCODING, V_BODY, V_PHYSICAL_OFFSET_FIELD,
    V_COUNT
};
static const char *const value_keys[V_COUNT] = {
    "physical_offset", "store_size", "version", "topic", "queue_id", "queue_offset", "sys_flag",
    "transaction", "flag", "body_crc", "body_crc_ok", "prop_crc", "prop_crc_ok",
    "born_timestamp", "born_time", "born_host", "store_timestamp", "store_time", "store_host",
    "reconsume_times", "prepared_transaction_offset", "properties", "tags", "keys", "uniq_key",
    "msg_id", "body_length", "compression", "body_encoding", "body", "physical_offset_field",
};

#define MAX_KEYS 64
#define PREFIX_PAD 32

PyDoc_STRVAR(message_json_doc,
             "message_json(buf, file_start, fields, keys, body_mode, settings, transactions, sep,\n"
             "             out) -> (length, ends, fallback)\n\n"
             "The JSON objects of the records whose columns are the rows of the int64 array\n"
             "fields (MESSAGE_FIELDS order), as compact JSON text, each followed by sep, written\n"
             "to the start of the bytearray out (grown when too short, never shrunk; its first\n"
             "length bytes are the text): row i is text[ends[i-1]:ends[i]] (ends is int64\n"
             "bytes). keys: (prefix, value) pairs in\n"
             "output order: the bytes written before the value (the JSON key with its '{' or\n"
             "',' and ':'), and the value's index in VALUE_KEYS; physical_offset_field, key\n"
             "and value, is written only where the PHYSICALOFFSET field is not the position.\n"
             "Rows this code does not write (listed in fallback, empty in text) are the\n"
             "caller's: IPv4-mapped IPv6 hosts, invalid UTF-8 in the topic or properties, a\n"
             "__CRC32# property, compression, more than 256 properties. body_mode: 0\n"
             "text, 1 hex, 2 base64, 3 none. settings: (magic_v2, born_v6_flag, store_v6_flag,\n"
             "compressed_flag, transaction_mask, min_iso_ms, max_iso_ms); transactions: names by\n"
             "sys_flag & mask.");

static PyObject *speedups_message_json(PyObject *self, PyObject *args)
{
    Py_buffer buf, fields;
    long long file_start;
    int body_mode;
    long long magic_v2, born_v6, store_v6, compressed, tx_mask, min_ms, max_ms;
    PyObject *keys, *transactions, *out, *result = NULL;
    Py_buffer sep;
    out_buf o = {0};
    int64_t *ends = NULL, *fallback = NULL;
    prop_entry *props = NULL;
    /* each key's prefix, padded: a short one (all of message_json's) is copied as one
     * fixed-size block, with no call to memcpy */
    char prefix[MAX_KEYS][PREFIX_PAD];
    size_t prefix_len[MAX_KEYS];
    const char *long_prefix[MAX_KEYS];
    int value[MAX_KEYS];
    if (!PyArg_ParseTuple(args, "y*Ly*O!i(LLLLLLL)O!y*O!", &buf, &file_start, &fields,
                          &PyTuple_Type, &keys, &body_mode, &magic_v2, &born_v6, &store_v6,
                          &compressed, &tx_mask, &min_ms, &max_ms, &PyTuple_Type, &transactions,
                          &sep, &PyByteArray_Type, &out))
        return NULL;
    o.array = out;
    o.data = PyByteArray_AS_STRING(out);
    o.cap = (size_t)PyByteArray_GET_SIZE(out);
    Py_ssize_t n = fields.len / (Py_ssize_t)(F_COUNT * sizeof(int64_t));
    Py_ssize_t n_keys = PyTuple_GET_SIZE(keys);
    if (fields.len != n * (Py_ssize_t)(F_COUNT * sizeof(int64_t)) || tx_mask < 0 ||
        PyTuple_GET_SIZE(transactions) <= tx_mask || body_mode < 0 || body_mode > 3 ||
        n_keys > MAX_KEYS) {
        PyErr_SetString(PyExc_ValueError, "bad message_json arguments");
        goto done;
    }
    if (min_ms < MIN_TIME_MS || max_ms > MAX_TIME_MS) { /* put_time writes four-digit years */
        PyErr_SetString(PyExc_ValueError, "bad message_json time range");
        goto done;
    }
    for (Py_ssize_t t = 0; t <= tx_mask; t++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(transactions, t))) {
            PyErr_SetString(PyExc_TypeError, "transaction names must be bytes");
            goto done;
        }
    }
    for (Py_ssize_t k = 0; k < n_keys; k++) {
        PyObject *pair = PyTuple_GET_ITEM(keys, k);
        long v;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !PyBytes_Check(PyTuple_GET_ITEM(pair, 0)) ||
            (v = PyLong_AsLong(PyTuple_GET_ITEM(pair, 1))) < 0 || v >= V_COUNT) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "keys: (bytes prefix, value index) pairs");
            goto done;
        }
        long_prefix[k] = PyBytes_AS_STRING(PyTuple_GET_ITEM(pair, 0));
        prefix_len[k] = (size_t)PyBytes_GET_SIZE(PyTuple_GET_ITEM(pair, 0));
        memset(prefix[k], 0, PREFIX_PAD);
        if (prefix_len[k] < PREFIX_PAD)
            memcpy(prefix[k], long_prefix[k], prefix_len[k]);
        value[k] = (int)v;
    }
    ends = PyMem_Malloc((n ? n : 1) * sizeof(int64_t));
    fallback = PyMem_Malloc((n ? n : 1) * sizeof(int64_t));
    props = PyMem_Malloc(MAX_PROPS * sizeof(prop_entry));
    if (!ends || !fallback || !props)
        goto nomem;
    Py_ssize_t n_fallback = 0;
    const uint8_t *data = buf.buf;
    /* what put_str may read from p on: the rest of the buffer */
#define readable(p) ((size_t)(data + buf.len - (p)))
    time_cache born_time = {LLONG_MIN, {0}}, store_time = {LLONG_MIN, {0}};
    const int64_t *all = fields.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t *f = all + i * F_COUNT;
        long long position = wadd(file_start, f[F_POSITION]);
        /* Every slice must lie in the buffer (the scanner's well-formed records do). */
        int bv6 = (f[F_SYS_FLAG] & born_v6) != 0, sv6 = (f[F_SYS_FLAG] & store_v6) != 0;
        int64_t slices[5][2] = {{f[F_TOPIC_AT], f[F_TOPIC_LENGTH]},
                                {f[F_PROPERTIES_AT], f[F_PROPERTIES_LENGTH]},
                                {f[F_BODY_AT], f[F_BODY_LENGTH]},
                                {f[F_BORN_HOST_AT], bv6 ? 16 : 4},
                                {f[F_STORE_HOST_AT], sv6 ? 16 : 4}};
        int ok = f[F_BODY_LENGTH] >= 0 && f[F_TOPIC_LENGTH] >= 0;
        for (int k = 0; k < 5 && ok; k++)
            ok = slices[k][1] <= 0 ||
                 (slices[k][0] >= 0 && slices[k][1] <= (int64_t)buf.len - slices[k][0]);
        if (ok)
            ok = !(f[F_SYS_FLAG] & compressed) && !(bv6 && v4_mapped(data + f[F_BORN_HOST_AT])) &&
                 !(sv6 && v4_mapped(data + f[F_STORE_HOST_AT]));
        const uint8_t *topic = data + (ok ? f[F_TOPIC_AT] : 0);
        const uint8_t *praw = data + (ok ? f[F_PROPERTIES_AT] : 0);
        size_t plen = f[F_PROPERTIES_LENGTH] > 0 ? (size_t)f[F_PROPERTIES_LENGTH] : 0;
        int np = 0;
        if (ok)
            ok = valid_utf8(topic, (size_t)f[F_TOPIC_LENGTH]) && valid_utf8(praw, plen);
        if (ok) {
            np = parse_props(praw, plen, props);
            ok = np >= 0 && !find_prop(props, np, "__CRC32#");
        }
        if (!ok) {
            fallback[n_fallback++] = i;
            ends[i] = (int64_t)o.len;
            continue;
        }
        const uint8_t *body = data + (f[F_BODY_LENGTH] > 0 ? f[F_BODY_AT] : 0);
        size_t blen = (size_t)f[F_BODY_LENGTH];
        /* text falls back to base64 for bytes that are not UTF-8 */
        int mode = body_mode == 0 && !valid_utf8(body, blen) ? 2 : body_mode;
        const uint8_t *bh = data + f[F_BORN_HOST_AT], *sh = data + f[F_STORE_HOST_AT];
        for (Py_ssize_t k = 0; k < n_keys; k++) {
            /* the one optional key: a PHYSICALOFFSET field that disagrees with where the
             * record sits (copies of a record, a record moved by hand) */
            if (value[k] == V_PHYSICAL_OFFSET_FIELD && f[F_PHYSICAL_OFFSET] == position)
                continue;
            if (prefix_len[k] < PREFIX_PAD) {
                if (out_reserve(&o, PREFIX_PAD) < 0)
                    goto done;
                memcpy(o.data + o.len, prefix[k], PREFIX_PAD);
                o.len += prefix_len[k];
            } else {
                PUT(&o, long_prefix[k], prefix_len[k]);
            }
            int rc = 0;
            switch (value[k]) {
            case V_PHYSICAL_OFFSET: rc = put_int(&o, position); break;
            case V_STORE_SIZE: rc = put_int(&o, f[F_SIZE]); break;
            case V_VERSION:
                if (f[F_MAGIC] == magic_v2)
                    PUTS(&o, "\"v2\"");
                else
                    PUTS(&o, "\"v1\"");
                break;
            case V_TOPIC:
                rc = put_str(&o, topic, (size_t)f[F_TOPIC_LENGTH], readable(topic));
                break;
            case V_QUEUE_ID: rc = put_int(&o, f[F_QUEUE_ID]); break;
            case V_QUEUE_OFFSET: rc = put_int(&o, f[F_QUEUE_OFFSET]); break;
            case V_SYS_FLAG: rc = put_int(&o, f[F_SYS_FLAG]); break;
            case V_TRANSACTION: {
                PyObject *tx = PyTuple_GET_ITEM(transactions, f[F_SYS_FLAG] & tx_mask);
                rc = put_str(&o, (const uint8_t *)PyBytes_AS_STRING(tx),
                             (size_t)PyBytes_GET_SIZE(tx), (size_t)PyBytes_GET_SIZE(tx));
                break;
            }
            case V_FLAG: rc = put_int(&o, f[F_FLAG]); break;
            case V_BODY_CRC: rc = put_int(&o, f[F_BODY_CRC]); break;
            case V_BODY_CRC_OK: {
                int64_t crc = blen ? (int64_t)(crc32_of(body, blen) & 0x7fffffffu) : 0;
                if (crc == f[F_BODY_CRC])
                    PUTS(&o, "true");
                else
                    PUTS(&o, "false");
                break;
            }
            case V_PROP_CRC: /* rows with a __CRC32# property are the caller's */
            case V_PROP_CRC_OK:
            case V_COMPRESSION: /* so are compressed rows */
                PUTS(&o, "null");
                break;
            case V_BORN_TIMESTAMP: rc = put_int(&o, f[F_BORN_TIMESTAMP]); break;
            case V_BORN_TIME:
                rc = put_time(&o, f[F_BORN_TIMESTAMP], min_ms, max_ms, &born_time);
                break;
            case V_BORN_HOST: rc = put_host(&o, bh, bv6, f[F_BORN_PORT]); break;
            case V_STORE_TIMESTAMP: rc = put_int(&o, f[F_STORE_TIMESTAMP]); break;
            case V_STORE_TIME:
                rc = put_time(&o, f[F_STORE_TIMESTAMP], min_ms, max_ms, &store_time);
                break;
            case V_STORE_HOST: rc = put_host(&o, sh, sv6, f[F_STORE_PORT]); break;
            case V_RECONSUME_TIMES: rc = put_int(&o, f[F_RECONSUME_TIMES]); break;
            case V_PREPARED_TRANSACTION_OFFSET:
                rc = put_int(&o, f[F_PREPARED_TRANSACTION_OFFSET]);
                break;
            case V_PROPERTIES:
                PUTS(&o, "{");
                for (int p = 0; p < np && rc == 0; p++) {
                    if (p)
                        PUTS(&o, ",");
                    rc = put_str(&o, props[p].name, props[p].name_len, readable(props[p].name));
                    PUTS(&o, ":");
                    if (rc == 0)
                        rc = put_str(&o, props[p].value, props[p].value_len,
                                     readable(props[p].value));
                }
                PUTS(&o, "}");
                break;
            case V_TAGS:
            case V_UNIQ_KEY: {
                const prop_entry *e = find_prop(props, np, value[k] == V_TAGS ? "TAGS" : "UNIQ_KEY");
                if (e)
                    rc = put_str(&o, e->value, e->value_len, readable(e->value));
                else
                    PUTS(&o, "null");
                break;
            }
            case V_KEYS: {
                PUTS(&o, "[");
                const prop_entry *e = find_prop(props, np, "KEYS");
                int first = 1;
                for (size_t j = 0; e && j < e->value_len && rc == 0;) {
                    const uint8_t *piece = e->value + j;
                    const uint8_t *space = memchr(piece, ' ', e->value_len - j);
                    size_t len = space ? (size_t)(space - piece) : e->value_len - j;
                    if (len) {
                        if (!first)
                            PUTS(&o, ",");
                        rc = put_str(&o, piece, len, readable(piece));
                        first = 0;
                    }
                    j += len + 1;
                }
                PUTS(&o, "]");
                break;
            }
            case V_MSG_ID: {
                uint8_t id[28];
                int ip_len = sv6 ? 16 : 4;
                memcpy(id, sh, (size_t)ip_len);
                be_put(id + ip_len, (unsigned long long)f[F_STORE_PORT], 4);
                be_put(id + ip_len + 4, (unsigned long long)f[F_PHYSICAL_OFFSET], 8);
                PUTS(&o, "\"");
                rc = put_hex(&o, id, (size_t)ip_len + 12, hex_upper);
                PUTS(&o, "\"");
                break;
            }
            case V_BODY_LENGTH: rc = put_int(&o, f[F_BODY_LENGTH]); break;
            case V_PHYSICAL_OFFSET_FIELD: rc = put_int(&o, f[F_PHYSICAL_OFFSET]); break;
            case V_BODY_ENCODING: {
                static const char *const names[4] = {"\"text\"", "\"hex\"", "\"base64\"",
                                                     "\"none\""};
                PUT(&o, names[mode], strlen(names[mode]));
                break;
            }
            case V_BODY:
                if (mode == 0) {
                    rc = put_str(&o, body, blen, readable(body));
                } else if (mode == 1) {
                    PUTS(&o, "\"");
                    rc = put_hex(&o, body, blen, hex_lower);
                    PUTS(&o, "\"");
                } else if (mode == 2) {
                    rc = put_base64(&o, body, blen);
                } else {
                    PUTS(&o, "null");
                }
                break;
            }
            if (rc < 0)
                goto done;
        }
        PUTS(&o, "}");
        PUT(&o, sep.buf, (size_t)sep.len);
        ends[i] = (int64_t)o.len;
    }
#undef readable
    result = Py_BuildValue("(nNN)", (Py_ssize_t)o.len, as_bytes(ends, n),
                           as_bytes(fallback, n_fallback));
    goto done;
nomem:
    PyErr_NoMemory();
done:
    PyMem_Free(ends);
    PyMem_Free(fallback);
    PyMem_Free(props);
    PyBuffer_Release(&sep);
    PyBuffer_Release(&fields);
    PyBuffer_Release(&buf);
    return result;
}

/* --- CRCs of many slices ------------------------------------------------------------------- */

typedef uint32_t (*crc_fn)(const uint8_t *, size_t);

static PyObject *crc_many(PyObject *args, crc_fn fn)
{
    Py_buffer buf, starts, lengths, out;
    PyObject *out_obj;
    if (!PyArg_ParseTuple(args, "y*y*y*O", &buf, &starts, &lengths, &out_obj))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = slice_pairs(&starts, &lengths, buf.len);
    if (n < 0 || get_i64_out(out_obj, &out, n, "out") < 0)
        goto done;
    const int64_t *s = starts.buf, *l = lengths.buf;
    int64_t *o = out.buf;
    const uint8_t *data = buf.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        o[i] = l[i] > 0 ? (int64_t)fn(data + s[i], (size_t)l[i]) : 0;
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out);
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&buf);
    return result;
}

PyDoc_STRVAR(crc32_doc, "crc32(data) -> int\n\n"
                        "zlib's CRC-32 of a bytes-like object (rmqinspect.format.crc.crc32).");

static PyObject *speedups_crc32(PyObject *self, PyObject *arg)
{
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc;
    if (data.len >= 1 << 16) { /* long enough to let other threads run meanwhile */
        Py_BEGIN_ALLOW_THREADS
        crc = crc32_of(data.buf, (size_t)data.len);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc32_of(data.buf, (size_t)data.len);
    }
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

PyDoc_STRVAR(crc32_many_doc,
             "crc32_many(buf, starts, lengths, out)\n\n"
             "zlib's CRC-32 of buf[start:start + length] for each pair of the int64 arrays\n"
             "starts and lengths, into the int64 buffer out (0 for a length <= 0).");

static PyObject *speedups_crc32_many(PyObject *self, PyObject *args)
{
    return crc_many(args, crc32_of);
}

PyDoc_STRVAR(crc32c_many_doc, "crc32c_many(buf, starts, lengths, out)\n\n"
                              "As crc32_many, with CRC-32C (Castagnoli).");

static PyObject *speedups_crc32c_many(PyObject *self, PyObject *args)
{
    return crc_many(args, crc32c_of);
}

/* --- message fields of many records ---------------------------------------------------------- */

/* The big-endian signed integer of w (1, 2, 4 or 8) bytes at off; bytes outside [0, n) read as
 * zeros (a record near the buffer's end, or one whose TOTALSIZE lies). */
static int64_t read_be(const uint8_t *d, Py_ssize_t n, int64_t off, int w)
{
    uint64_t v = 0;
    if (off >= 0 && off <= (int64_t)n - w) {
        for (int k = 0; k < w; k++)
            v = (v << 8) | d[off + k];
    } else {
        /* unsigned: a negative or wrapped offset is a huge one, outside [0, n) like it */
        for (int k = 0; k < w; k++) {
            uint64_t at = (uint64_t)off + (uint64_t)k;
            v = (v << 8) | (at < (uint64_t)n ? d[at] : 0);
        }
    }
    int shift = 64 - 8 * w;
    return (int64_t)(v << shift) >> shift;
}

enum {
    L_TOTALSIZE, L_MAGIC, L_BODYCRC, L_QUEUEID, L_FLAG, L_QUEUEOFFSET, L_PHYSICALOFFSET,
    L_SYSFLAG, L_BORNTIMESTAMP, L_BORNHOST, L_IPV4_HOST, L_IPV6_HOST, L_BORN_V6_FLAG,
    L_STORE_V6_FLAG, L_STORETIMESTAMP_SIZE, L_RECONSUME_REL, L_PREPARED_REL, L_BODYLENGTH_REL,
    L_MID_SIZE, L_MAGIC_V2, L_COUNT
};

enum {
    C_SIZES, C_MAGIC, C_BODY_CRC, C_QUEUE_ID, C_FLAG, C_QUEUE_OFFSET, C_PHYSICAL_OFFSET,
    C_SYS_FLAG, C_BORN_TIMESTAMP, C_BORN_HOST_AT, C_BORN_PORT, C_STORE_TIMESTAMP,
    C_STORE_HOST_AT, C_STORE_PORT, C_RECONSUME_TIMES, C_PREPARED, C_BODY_AT, C_BODY_LENGTH,
    C_TOPIC_AT, C_TOPIC_LENGTH, C_PROPERTIES_AT, C_PROPERTIES_LENGTH, C_WELL_FORMED, C_COUNT
};
/* gather's rows by RecordColumns' names (exported as GATHER_COLUMNS): rmqinspect.format.columns
 * fills its columns by these names and refuses to import a build whose names are not its own. */
static const char *const gather_names[C_COUNT] = {
    "store_size", "magic", "body_crc", "queue_id", "flag", "queue_offset", "physical_offset_field",
    "sys_flag", "born_timestamp", "born_host_at", "born_port", "store_timestamp",
    "store_host_at", "store_port", "reconsume_times", "prepared_transaction_offset", "body_at",
    "body_length", "topic_at", "topic_length", "properties_at", "properties_length",
    "well_formed",
};

/* Every field of the record at p into column row i of o (rows of stride items); returns whether
 * the record is well formed. */
static inline __attribute__((always_inline)) int
gather_record(const uint8_t *d, Py_ssize_t L, int64_t p, const int64_t *lay, int64_t *o,
              Py_ssize_t n, Py_ssize_t i)
{
    int64_t size = read_be(d, L, wadd(p, lay[L_TOTALSIZE]), 4);
    int64_t magic = read_be(d, L, wadd(p, lay[L_MAGIC]), 4);
    int64_t sys_flag = read_be(d, L, wadd(p, lay[L_SYSFLAG]), 4);
    int64_t ends = wadd(p, size);
    int64_t born_size = (sys_flag & lay[L_BORN_V6_FLAG]) ? lay[L_IPV6_HOST] : lay[L_IPV4_HOST];
    int64_t store_size =
        (sys_flag & lay[L_STORE_V6_FLAG]) ? lay[L_IPV6_HOST] : lay[L_IPV4_HOST];
    int64_t born_host_at = wadd(p, lay[L_BORNHOST]);
    int64_t store_host_at = wadd(wadd(born_host_at, born_size), lay[L_STORETIMESTAMP_SIZE]);
    int64_t mid_at = wadd(store_host_at, store_size);
    int64_t body_at = wadd(mid_at, lay[L_MID_SIZE]);
    int ok = body_at <= ends;
    int64_t body_length = ok ? read_be(d, L, wadd(mid_at, lay[L_BODYLENGTH_REL]), 4) : 0;
    int64_t topic_length_at = wadd(body_at, body_length > 0 ? body_length : 0);
    int v2 = magic == lay[L_MAGIC_V2];
    int tls = v2 ? 2 : 1;
    int64_t topic_at = wadd(topic_length_at, tls);
    ok = ok && topic_at <= ends;
    int64_t topic_length = ok ? read_be(d, L, topic_length_at, tls) : 0;
    ok = ok && topic_length >= 0;
    int64_t properties_length_at = wadd(topic_at, topic_length > 0 ? topic_length : 0);
    int64_t properties_at = wadd(properties_length_at, 2);
    ok = ok && properties_at <= ends;
    int64_t properties_length = ok ? read_be(d, L, properties_length_at, 2) : 0;
    ok = ok && wadd(properties_at, properties_length > 0 ? properties_length : 0) == ends;
    o[C_SIZES * n + i] = size;
    o[C_MAGIC * n + i] = magic;
    o[C_BODY_CRC * n + i] = read_be(d, L, wadd(p, lay[L_BODYCRC]), 4);
    o[C_QUEUE_ID * n + i] = read_be(d, L, wadd(p, lay[L_QUEUEID]), 4);
    o[C_FLAG * n + i] = read_be(d, L, wadd(p, lay[L_FLAG]), 4);
    o[C_QUEUE_OFFSET * n + i] = read_be(d, L, wadd(p, lay[L_QUEUEOFFSET]), 8);
    o[C_PHYSICAL_OFFSET * n + i] = read_be(d, L, wadd(p, lay[L_PHYSICALOFFSET]), 8);
    o[C_SYS_FLAG * n + i] = sys_flag;
    o[C_BORN_TIMESTAMP * n + i] = read_be(d, L, wadd(p, lay[L_BORNTIMESTAMP]), 8);
    o[C_BORN_HOST_AT * n + i] = born_host_at;
    o[C_BORN_PORT * n + i] = read_be(d, L, wadd(born_host_at, born_size - 4), 4);
    o[C_STORE_TIMESTAMP * n + i] = read_be(d, L, wadd(born_host_at, born_size), 8);
    o[C_STORE_HOST_AT * n + i] = store_host_at;
    o[C_STORE_PORT * n + i] = ok ? read_be(d, L, wadd(store_host_at, store_size - 4), 4) : 0;
    o[C_RECONSUME_TIMES * n + i] =
        ok ? read_be(d, L, wadd(mid_at, lay[L_RECONSUME_REL]), 4) : 0;
    o[C_PREPARED * n + i] = ok ? read_be(d, L, wadd(mid_at, lay[L_PREPARED_REL]), 8) : 0;
    o[C_BODY_AT * n + i] = body_at;
    o[C_BODY_LENGTH * n + i] = body_length;
    o[C_TOPIC_AT * n + i] = topic_at;
    o[C_TOPIC_LENGTH * n + i] = topic_length;
    o[C_PROPERTIES_AT * n + i] = properties_at;
    o[C_PROPERTIES_LENGTH * n + i] = properties_length;
    o[C_WELL_FORMED * n + i] = ok;
    return ok;
}

/* The layout tuple's constants into lay; -1 with an exception set when one is not an int32 (they
 * are offsets, sizes, flags and a magic). */
static int parse_layout(PyObject *layout_obj, int64_t *lay)
{
    for (int k = 0; k < L_COUNT; k++) {
        lay[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(layout_obj, k));
        if (lay[k] == -1 && PyErr_Occurred())
            return -1;
        if (lay[k] < INT32_MIN || lay[k] > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "bad gather arguments");
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(gather_doc,
             "gather(buf, positions, layout, out)\n\n"
             "Every field of the message records at the int64 positions, into out: an int64\n"
             "buffer of len(GATHER_COLUMNS) rows of len(positions) items, the columns named\n"
             "there (well_formed: 1 where the record is well formed). layout is the record layout's\n"
             "20 constants (see rmqinspect.format.columns); bytes outside buf read as zeros.");

static PyObject *speedups_gather(PyObject *self, PyObject *args)
{
    Py_buffer buf, positions, out;
    PyObject *layout_obj;
    int64_t lay[L_COUNT];
    if (!PyArg_ParseTuple(args, "y*y*O!w*", &buf, &positions, &PyTuple_Type, &layout_obj, &out))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = positions.len / (Py_ssize_t)sizeof(int64_t);
    if (positions.len % (Py_ssize_t)sizeof(int64_t) || PyTuple_GET_SIZE(layout_obj) != L_COUNT ||
        n > out.len / (Py_ssize_t)(C_COUNT * sizeof(int64_t))) {
        PyErr_SetString(PyExc_ValueError, "bad gather arguments");
        goto done;
    }
    if (parse_layout(layout_obj, lay) < 0)
        goto done;
    const uint8_t *d = buf.buf;
    Py_ssize_t L = buf.len;
    const int64_t *pos = positions.buf;
    int64_t *o = out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t p = pos[i];
        /* Records lie a cache miss apart: ask for a later record's header lines now, and for
         * the line of the topic of a nearer one, whose header was asked for four records ago
         * (its body length says where the topic is). */
        if (i + 8 < n && pos[i + 8] >= 0 && pos[i + 8] <= (int64_t)L - 128) {
            __builtin_prefetch(d + pos[i + 8]);
            __builtin_prefetch(d + pos[i + 8] + 64);
        }
        if (i + 4 < n && pos[i + 4] >= 0 && pos[i + 4] <= (int64_t)L - 128) {
            int64_t q = pos[i + 4];
            int64_t flag = read_be(d, L, wadd(q, lay[L_SYSFLAG]), 4);
            int64_t hosts = ((flag & lay[L_BORN_V6_FLAG]) ? lay[L_IPV6_HOST] : lay[L_IPV4_HOST]) +
                            ((flag & lay[L_STORE_V6_FLAG]) ? lay[L_IPV6_HOST] : lay[L_IPV4_HOST]);
            int64_t mid = wadd(wadd(q, lay[L_BORNHOST]), hosts + lay[L_STORETIMESTAMP_SIZE]);
            int64_t body = read_be(d, L, wadd(mid, lay[L_BODYLENGTH_REL]), 4);
            int64_t topic = wadd(wadd(mid, lay[L_MID_SIZE]), body > 0 ? body : 0);
            if (topic >= 0 && topic < (int64_t)L)
                __builtin_prefetch(d + topic);
        }
        gather_record(d, L, p, lay, o, n, i);
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&positions);
    PyBuffer_Release(&buf);
    return result;
}

PyDoc_STRVAR(walk_gather_doc,
             "walk_gather(buf, pos, max_records, min_size, magics, layout, with_crc, positions,\n"
             "            out, crcs) -> (count, end)\n\n"
             "walk and gather in one pass over the bytes: follow TOTALSIZE from pos as walk does\n"
             "(the starts into the int64 buffer positions), and write each record's fields as\n"
             "gather does into out, len(GATHER_COLUMNS) rows of max_records items; with with_crc\n"
             "also the CRC-32 of each well-formed record's body (0 for none) into crcs.");

static PyObject *speedups_walk_gather(PyObject *self, PyObject *args)
{
    Py_buffer buf, pos_out, out, crc_out;
    Py_ssize_t pos, max_records;
    long min_size;
    int with_crc;
    PyObject *magics, *layout_obj, *positions, *crcs;
    int32_t allowed[4];
    int64_t lay[L_COUNT];
    if (!PyArg_ParseTuple(args, "y*nnlO!O!pOw*O", &buf, &pos, &max_records, &min_size,
                          &PyTuple_Type, &magics, &PyTuple_Type, &layout_obj, &with_crc,
                          &positions, &out, &crcs))
        return NULL;
    PyObject *result = NULL;
    int got = 0;
    Py_ssize_t n_allowed = PyTuple_GET_SIZE(magics);
    if (n_allowed > 4 || max_records < 0 || pos < 0 || min_size < 8 ||
        PyTuple_GET_SIZE(layout_obj) != L_COUNT ||
        max_records > out.len / (Py_ssize_t)(C_COUNT * sizeof(int64_t))) {
        PyErr_SetString(PyExc_ValueError, "bad walk_gather arguments");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n_allowed; i++) {
        long m = PyLong_AsLong(PyTuple_GET_ITEM(magics, i));
        if (m == -1 && PyErr_Occurred())
            goto done;
        allowed[i] = (int32_t)m;
    }
    if (parse_layout(layout_obj, lay) < 0)
        goto done;
    if (get_i64_out(positions, &pos_out, max_records, "positions") < 0)
        goto done;
    got = 1;
    if (get_i64_out(crcs, &crc_out, max_records, "crcs") < 0)
        goto done;
    got = 2;
    const uint8_t *d = buf.buf;
    Py_ssize_t L = buf.len, at = pos, count = 0;
    int64_t *po = pos_out.buf, *o = out.buf, *co = crc_out.buf;
    Py_BEGIN_ALLOW_THREADS
    while (count < max_records && at <= L - 8) { /* at + 8 could pass PY_SSIZE_T_MAX */
        int32_t size = be32(d + at);
        if (size < min_size || size > L - at)
            break;
        int32_t magic = be32(d + at + 4);
        int ok = 0;
        for (Py_ssize_t i = 0; i < n_allowed; i++)
            ok |= magic == allowed[i];
        if (!ok)
            break;
        po[count] = at;
        /* A well-formed record's body lies inside it, so inside buf. */
        int formed = gather_record(d, L, at, lay, o, max_records, count);
        if (with_crc) {
            int64_t body_length = o[C_BODY_LENGTH * max_records + count];
            co[count] = formed && body_length > 0
                            ? crc32_of(d + o[C_BODY_AT * max_records + count], (size_t)body_length)
                            : 0;
        }
        count++;
        at += size;
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("nn", count, at);
done:
    if (got > 1)
        PyBuffer_Release(&crc_out);
    if (got > 0)
        PyBuffer_Release(&pos_out);
    PyBuffer_Release(&out);
    PyBuffer_Release(&buf);
    return result;
}

/* --- Arrow binary views ------------------------------------------------------------------- */

PyDoc_STRVAR(binary_views_doc,
             "binary_views(buf, starts, lengths, out)\n\n"
             "The 16-byte Arrow binary view of buf[start:start + max(length, 0)] for each pair\n"
             "of the int64 arrays starts and lengths, into out (16 bytes per pair): values of\n"
             "at most 12 bytes inline, longer ones as their 4-byte prefix and their offset in\n"
             "buf (data buffer 0). buf must be shorter than 2 GiB.");

static PyObject *speedups_binary_views(PyObject *self, PyObject *args)
{
    Py_buffer buf, starts, lengths, out;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &buf, &starts, &lengths, &out))
        return NULL;
    PyObject *result = NULL;
    const int64_t *s = starts.buf, *l = lengths.buf;
    Py_ssize_t n = slice_pairs(&starts, &lengths, buf.len);
    if (n < 0)
        goto done;
    if (n > out.len / 16 || buf.len > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "bad binary_views arguments");
        goto done;
    }
    const uint8_t *data = buf.buf;
    uint8_t *o = out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++, o += 16) {
        int32_t len = l[i] > 0 ? (int32_t)l[i] : 0;
        memset(o, 0, 16);
        memcpy(o, &len, 4);
        if (len <= 12) {
            if (len)
                memcpy(o + 4, data + s[i], (size_t)len);
        } else {
            int32_t at = (int32_t)s[i];
            memcpy(o + 4, data + s[i], 4);
            memcpy(o + 12, &at, 4);
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&buf);
    return result;
}

/* --- properties of many records ------------------------------------------------------------ */

#define MAX_ROW_ENTRIES 64

PyDoc_STRVAR(property_entries_doc,
             "property_entries(buf, starts, lengths, rows, name_at, name_len, value_at,\n"
             "                 value_len) -> (count, declined)\n\n"
             "parse_properties of buf[start:start + length] for each pair of the int64 arrays\n"
             "starts and lengths, as entries in order of appearance (the later of two equal\n"
             "names kept, in its place) written to the int64 buffers: the row of each entry\n"
             "and the positions and lengths of its name and value in buf. Each buffer must hold\n"
             "sum(length // 3) items (an entry takes at least 3 bytes). declined is the first row\n"
             "not parsed (-1 for none): a name or value that is not UTF-8, or more than 64\n"
             "entries; count is the entries of the rows before it.");

static PyObject *speedups_property_entries(PyObject *self, PyObject *args)
{
    Py_buffer buf, starts, lengths, out[5];
    PyObject *out_obj[5];
    if (!PyArg_ParseTuple(args, "y*y*y*OOOOO", &buf, &starts, &lengths, &out_obj[0], &out_obj[1],
                          &out_obj[2], &out_obj[3], &out_obj[4]))
        return NULL;
    Py_ssize_t capacity = 0, got = 0;
    PyObject *result = NULL;
    const int64_t *s = starts.buf, *l = lengths.buf;
    Py_ssize_t n = slice_pairs(&starts, &lengths, buf.len);
    if (n < 0)
        goto done;
    /* l[i] <= buf.len, but many of them can add up past PY_SSIZE_T_MAX: the sum saturates
     * there (no buffer is that long, so get_i64_out refuses it) instead of wrapping. */
    for (Py_ssize_t i = 0; i < n; i++)
        if (l[i] > 0)
            capacity = (Py_ssize_t)(l[i] / 3) > PY_SSIZE_T_MAX - capacity
                           ? PY_SSIZE_T_MAX
                           : capacity + (Py_ssize_t)(l[i] / 3);
    for (; got < 5; got++)
        if (get_i64_out(out_obj[got], &out[got], capacity, "entry columns") < 0)
            goto done;
    int64_t *rows = out[0].buf, *name_at = out[1].buf, *name_len = out[2].buf;
    int64_t *value_at = out[3].buf, *value_len = out[4].buf;
    const uint8_t *data = buf.buf;
    Py_ssize_t count = 0, declined = -1;
    prop_entry e[MAX_ROW_ENTRIES];
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < n && declined < 0; r++) {
        const uint8_t *p = data + (l[r] > 0 ? s[r] : 0);
        size_t len = l[r] > 0 ? (size_t)l[r] : 0, i = 0;
        int k = 0;
        while (i < len && declined < 0) {
            const uint8_t *entry = p + i;
            const uint8_t *stop = memchr(entry, 0x02, len - i);
            size_t m = stop ? (size_t)(stop - entry) : len - i;
            const uint8_t *sep = memchr(entry, 0x01, m);
            if (sep && sep > entry && (size_t)(sep - entry) + 1 < m) {
                prop_entry x = {entry, sep + 1, (size_t)(sep - entry), m - (size_t)(sep - entry) - 1};
                if (k == MAX_ROW_ENTRIES || !valid_utf8(x.name, x.name_len) ||
                    !valid_utf8(x.value, x.value_len))
                    declined = r;
                else
                    e[k++] = x;
            }
            i += m + 1;
        }
        if (declined >= 0)
            break;
        for (int a = 0; a < k; a++) {
            int later = 0;
            for (int b = a + 1; b < k && !later; b++)
                later = name_cmp(&e[a], &e[b]) == 0;
            if (later)
                continue;
            rows[count] = r;
            name_at[count] = e[a].name - data;
            name_len[count] = (int64_t)e[a].name_len;
            value_at[count] = e[a].value - data;
            value_len[count] = (int64_t)e[a].value_len;
            count++;
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("nn", count, declined);
done:
    while (got > 0)
        PyBuffer_Release(&out[--got]);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&buf);
    return result;
}

static PyObject *speedups_features(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("{s:O,s:O,s:O,s:O}", "pclmul", have_clmul ? Py_True : Py_False,
                         "sse4_2", have_sse42 ? Py_True : Py_False, "ssse3",
                         have_ssse3 ? Py_True : Py_False, "sse2", have_sse2 ? Py_True : Py_False);
}

/* --- index keys of many records --------------------------------------------------------------- */

/* Java's String.hashCode continued from h over the UTF-16 code units of the UTF-8 text p[0..n):
 * a character beyond the BMP is two units (its surrogates). 0 when the text is not strict UTF-8
 * (Python's decoder then replaces bytes, which the caller does), else 1. */
static int java_hash_utf8(uint32_t *h, const uint8_t *p, size_t n)
{
    uint32_t v = *h;
    size_t i = 0;
    while (i < n) {
        uint8_t b = p[i];
        /* ASCII four bytes at a time: h * 31^4 + ..., products that do not wait on each other */
        if (i + 4 <= n && !((p[i] | p[i + 1] | p[i + 2] | p[i + 3]) & 0x80)) {
            v = v * 923521u + p[i] * 29791u + p[i + 1] * 961u + p[i + 2] * 31u + p[i + 3];
            i += 4;
            continue;
        }
        if (b < 0x80) {
            v = 31u * v + b;
            i++;
            continue;
        }
        size_t len = utf8_length[b];
        if (!len || n - i < len || p[i + 1] < utf8_low[b] || p[i + 1] > utf8_high[b])
            return 0;
        uint32_t cp = b & (0x7Fu >> len);
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (p[i + k] & 0x3Fu);
        }
        if (cp >= 0x10000) {
            v = 31u * v + (0xD800u + ((cp - 0x10000u) >> 10));
            v = 31u * v + (0xDC00u + (cp & 0x3FFu));
        } else {
            v = 31u * v + cp;
        }
        i += len;
    }
    *h = v;
    return 1;
}

/* The values of the last UNIQ_KEY and KEYS entries with a non-empty value in the properties
 * p[0..n), as parse_properties splits them (NULL for none), in one pass over the entries. */
static void key_properties(const uint8_t *p, size_t n, const uint8_t **uniq, size_t *uniq_len,
                           const uint8_t **keys, size_t *keys_len)
{
    size_t i = 0;
    *uniq = *keys = NULL;
    while (i < n) {
        const uint8_t *entry = p + i;
        const uint8_t *stop = memchr(entry, 0x02, n - i);
        size_t m = stop ? (size_t)(stop - entry) : n - i;
        if (m > 9 && memcmp(entry, "UNIQ_KEY\x01", 9) == 0) {
            *uniq = entry + 9;
            *uniq_len = m - 9;
        } else if (m > 5 && memcmp(entry, "KEYS\x01", 5) == 0) {
            *keys = entry + 5;
            *keys_len = m - 5;
        }
        i += m + 1;
    }
}

/* The masked index hash of one key (IndexFile.indexKeyHashMethod: abs of hashCode, 0 for
 * Integer.MIN_VALUE) after the topic's prefix hash; -1 where the key is not strict UTF-8. */
static int64_t index_hash(uint32_t prefix, int prefix_ok, const uint8_t *p, size_t n)
{
    uint32_t h = prefix;
    if (!prefix_ok || !java_hash_utf8(&h, p, n))
        return -1;
    int32_t s = (int32_t)h;
    return s == INT32_MIN ? 0 : (s < 0 ? -(int64_t)s : s);
}

/* span_fingerprints' polynomial of one key's bytes (modulo 2^64), four bytes a step */
#define FP_M 0x100000001B3ull
static int64_t fingerprint(const uint8_t *p, size_t n)
{
    const uint64_t m2 = FP_M * FP_M, m3 = m2 * FP_M, m4 = m3 * FP_M;
    uint64_t v = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        v = v * m4 + p[i] * m3 + p[i + 1] * m2 + p[i + 2] * FP_M + p[i + 3];
    for (; i < n; i++)
        v = v * FP_M + p[i];
    return (int64_t)(v ^ (uint64_t)n);
}
#undef FP_M

PyDoc_STRVAR(index_keys_doc,
             "index_keys(buf, topic_at, topic_len, props_at, props_len, separator, owners,\n"
             "           starts, lengths, hashes, prints) -> (count, rows)\n\n"
             "The keys IndexService.buildIndex puts for each record (its topic and properties\n"
             "the slices of buf given by the int64 arrays), in order: the last non-empty\n"
             "UNIQ_KEY, then the last non-empty KEYS split on the byte separator, empty parts\n"
             "dropped. Written to the int64 buffers (of one length): each key's record,\n"
             "position and length in buf, the index hash of topic#key (-1 where the topic or\n"
             "key is not strict UTF-8: Python's decoder replaces bytes there) and a 64-bit\n"
             "fingerprint of the key's bytes. Stops before a record whose keys might not fit\n"
             "(2 + props_len // 2 items): rows is how many records were done.");

static PyObject *speedups_index_keys(PyObject *self, PyObject *args)
{
    Py_buffer buf, topic_at, topic_len, props_at, props_len, out[5];
    PyObject *out_obj[5];
    int separator;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*iOOOOO", &buf, &topic_at, &topic_len, &props_at,
                          &props_len, &separator, &out_obj[0], &out_obj[1], &out_obj[2],
                          &out_obj[3], &out_obj[4]))
        return NULL;
    Py_ssize_t capacity = 0, got = 0;
    PyObject *result = NULL;
    Py_ssize_t n = slice_pairs(&topic_at, &topic_len, buf.len);
    if (n < 0 || slice_pairs(&props_at, &props_len, buf.len) < 0)
        goto done;
    if (props_at.len != topic_at.len || separator < 0 || separator > 255) {
        PyErr_SetString(PyExc_ValueError, "bad index_keys arguments");
        goto done;
    }
    const int64_t *ta = topic_at.buf, *tl = topic_len.buf, *pa = props_at.buf, *pl = props_len.buf;
    for (; got < 5; got++) {
        if (PyObject_GetBuffer(out_obj[got], &out[got], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        if (got && out[got].len != out[0].len) {
            PyErr_SetString(PyExc_ValueError, "the key columns differ in length");
            got++;
            goto done;
        }
    }
    capacity = out[0].len / (Py_ssize_t)sizeof(int64_t);
    int64_t *owners = out[0].buf, *starts = out[1].buf, *lengths = out[2].buf;
    int64_t *hashes = out[3].buf, *prints = out[4].buf;
    const uint8_t *data = buf.buf;
    Py_ssize_t count = 0, r = 0;
    Py_BEGIN_ALLOW_THREADS
    for (; r < n; r++) {
        size_t plen = pl[r] > 0 ? (size_t)pl[r] : 0, tlen = tl[r] > 0 ? (size_t)tl[r] : 0;
        if (!plen)
            continue;
        /* at most one UNIQ_KEY and (value length + 1) / 2 KEYS parts */
        if ((size_t)(capacity - count) < 2 + plen / 2)
            break;
        /* Properties lie a record apart, after its body: ask for a later record's now. */
        if (r + 4 < n && pl[r + 4] > 0) {
            __builtin_prefetch(data + pa[r + 4]);
            __builtin_prefetch(data + pa[r + 4] + pl[r + 4] - 1);
        }
        const uint8_t *p = data + pa[r];
        size_t uniq_len = 0, keys_len = 0;
        const uint8_t *uniq, *keys;
        key_properties(p, plen, &uniq, &uniq_len, &keys, &keys_len);
        if (!uniq && !keys)
            continue;
        uint32_t prefix = 0;
        int prefix_ok = java_hash_utf8(&prefix, data + (tlen ? ta[r] : 0), tlen);
        prefix = 31u * prefix + '#';
        if (uniq) {
            owners[count] = r;
            starts[count] = uniq - data;
            lengths[count] = (int64_t)uniq_len;
            hashes[count] = index_hash(prefix, prefix_ok, uniq, uniq_len);
            prints[count] = fingerprint(uniq, uniq_len);
            count++;
        }
        size_t i = 0;
        while (keys && i < keys_len) {
            const uint8_t *part = keys + i;
            const uint8_t *stop = memchr(part, separator, keys_len - i);
            size_t m = stop ? (size_t)(stop - part) : keys_len - i;
            if (m) {
                owners[count] = r;
                starts[count] = part - data;
                lengths[count] = (int64_t)m;
                hashes[count] = index_hash(prefix, prefix_ok, part, m);
                prints[count] = fingerprint(part, m);
                count++;
            }
            i += m + 1;
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("nn", count, r);
done:
    while (got > 0)
        PyBuffer_Release(&out[--got]);
    PyBuffer_Release(&props_len);
    PyBuffer_Release(&props_at);
    PyBuffer_Release(&topic_len);
    PyBuffer_Release(&topic_at);
    PyBuffer_Release(&buf);
    return result;
}

PyDoc_STRVAR(property_hashes_doc,
             "property_hashes(buf, props_at, props_len, name, at, length, hashes)\n\n"
             "For each record's properties (the slices of buf given by the int64 arrays), the\n"
             "value of the last entry called name with a non-empty value, as parse_properties\n"
             "keeps it: its position and length in buf ((-1, 0) for none) and Java's\n"
             "String.hashCode of it (0 for none; 2**32 where it is not strict UTF-8: Python's\n"
             "decoder replaces bytes there), into the int64 buffers of len(props_at) items.");

static PyObject *speedups_property_hashes(PyObject *self, PyObject *args)
{
    Py_buffer buf, props_at, props_len, name, out[3];
    PyObject *out_obj[3];
    if (!PyArg_ParseTuple(args, "y*y*y*y*OOO", &buf, &props_at, &props_len, &name, &out_obj[0],
                          &out_obj[1], &out_obj[2]))
        return NULL;
    Py_ssize_t got = 0;
    PyObject *result = NULL;
    Py_ssize_t n = slice_pairs(&props_at, &props_len, buf.len);
    if (n < 0)
        goto done;
    /* the name and its 0x01, which the name must not hold (nor 0x02) to find whole entries */
    uint8_t needle[64];
    if (name.len < 1 || name.len >= (Py_ssize_t)sizeof(needle) ||
        memchr(name.buf, 0x01, (size_t)name.len) || memchr(name.buf, 0x02, (size_t)name.len)) {
        PyErr_SetString(PyExc_ValueError, "bad property name");
        goto done;
    }
    size_t nl = (size_t)name.len + 1;
    memcpy(needle, name.buf, nl - 1);
    needle[nl - 1] = 0x01;
    for (; got < 3; got++)
        if (get_i64_out(out_obj[got], &out[got], n, "value columns") < 0)
            goto done;
    int64_t *at = out[0].buf, *length = out[1].buf, *hashes = out[2].buf;
    const int64_t *pa = props_at.buf, *pl = props_len.buf;
    const uint8_t *data = buf.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < n; r++) {
        at[r] = -1;
        length[r] = 0;
        hashes[r] = 0;
        size_t plen = pl[r] > 0 ? (size_t)pl[r] : 0, i = 0;
        const uint8_t *p = data + (plen ? pa[r] : 0);
        if (r + 4 < n && pl[r + 4] > 0)
            __builtin_prefetch(data + pa[r + 4]);
        const uint8_t *value = NULL;
        size_t value_len = 0;
        while (i < plen) {
            const uint8_t *entry = p + i;
            const uint8_t *stop = memchr(entry, 0x02, plen - i);
            size_t m = stop ? (size_t)(stop - entry) : plen - i;
            if (m > nl && memcmp(entry, needle, nl) == 0) {
                value = entry + nl;
                value_len = m - nl;
            }
            i += m + 1;
        }
        if (value) {
            uint32_t h = 0;
            at[r] = value - data;
            length[r] = (int64_t)value_len;
            hashes[r] = java_hash_utf8(&h, value, value_len) ? (int64_t)(int32_t)h : (1LL << 32);
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    while (got > 0)
        PyBuffer_Release(&out[--got]);
    PyBuffer_Release(&name);
    PyBuffer_Release(&props_len);
    PyBuffer_Release(&props_at);
    PyBuffer_Release(&buf);
    return result;
}

/* --- spans grouped by content ---------------------------------------------------------------- */

/* The 8 bytes at off as rmqinspect.format.npbytes.windows reads them: from the nearest position
 * where 8 bytes fit (zeros after a buffer shorter than 8), big-endian. */
static uint64_t window_be64(const uint8_t *d, Py_ssize_t L, int64_t off)
{
    uint8_t w[8] = {0};
    if (L < 8) {
        memcpy(w, d, (size_t)L);
    } else {
        int64_t at = off < 0 ? 0 : (off > (int64_t)L - 8 ? (int64_t)L - 8 : off);
        memcpy(w, d + at, 8);
    }
    uint64_t v = 0;
    for (int k = 0; k < 8; k++)
        v = (v << 8) | w[k];
    return v;
}

typedef struct {
    uint64_t key;  /* span_ids' grouping key of the span that ranks the value */
    int64_t row;   /* that span's row (the least (key, row) of the value's spans) */
    int64_t first; /* the value's first row */
    int64_t id;    /* the value's number by first row */
} span_value;

static int value_order(const void *a, const void *b)
{
    const span_value *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

PyDoc_STRVAR(span_ids_doc,
             "span_ids(buf, at, length, ids, firsts) -> count\n\n"
             "rmqinspect.format.npbytes.span_ids in one pass: each span buf[a:a + n] (every one\n"
             "inside buf) as the id of its distinct value, ids numbered as span_ids numbers them\n"
             "(by its grouping key of the value's spans, then by row), into the int64 buffer ids;\n"
             "firsts (as long as ids) gets each id's first row. count: the distinct values.");

static PyObject *speedups_span_ids(PyObject *self, PyObject *args)
{
    Py_buffer buf, at_buf, len_buf, ids_out, firsts_out;
    PyObject *ids_obj, *firsts_obj;
    if (!PyArg_ParseTuple(args, "y*y*y*OO", &buf, &at_buf, &len_buf, &ids_obj, &firsts_obj))
        return NULL;
    PyObject *result = NULL;
    int got = 0;
    int64_t *table = NULL;
    span_value *values = NULL;
    int64_t *rank = NULL;
    Py_ssize_t n = slice_pairs(&at_buf, &len_buf, buf.len);
    if (n < 0)
        goto done;
    const int64_t *at = at_buf.buf, *len = len_buf.buf;
    for (Py_ssize_t i = 0; i < n; i++)
        if (len[i] < 0 || at[i] < 0 || at[i] > buf.len) {
            PyErr_SetString(PyExc_ValueError, "a span lies outside the buffer");
            goto done;
        }
    if (get_i64_out(ids_obj, &ids_out, n, "ids") < 0)
        goto done;
    got = 1;
    if (get_i64_out(firsts_obj, &firsts_out, n, "firsts") < 0)
        goto done;
    got = 2;
    size_t cap = 16;
    while (cap < 2 * (size_t)n)
        cap *= 2;
    table = PyMem_Malloc(cap * sizeof(int64_t));
    values = PyMem_Malloc(((size_t)n + 1) * sizeof(span_value));
    rank = PyMem_Malloc(((size_t)n + 1) * sizeof(int64_t));
    if (!table || !values || !rank) {
        PyErr_NoMemory();
        goto done;
    }
    const uint8_t *d = buf.buf;
    Py_ssize_t L = buf.len, count = 0;
    int64_t *ids = ids_out.buf, *firsts = firsts_out.buf;
    Py_BEGIN_ALLOW_THREADS
    memset(table, 0xff, cap * sizeof(int64_t));
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *p = d + at[i];
        size_t m = (size_t)len[i];
        /* span_ids' key: the first 8 bytes (those inside the span), the last 8, the length */
        uint64_t every = ~(uint64_t)0;
        uint64_t mask = m >= 8 ? every : ~(every >> (8 * m));
        uint64_t head = window_be64(d, L, at[i]) & mask;
        uint64_t tail = m >= 8 ? window_be64(d, L, at[i] + (int64_t)m - 8) : 0;
        uint64_t key = (head * 0x9E3779B97F4A7C15ull) ^ tail ^ ((uint64_t)m << 48);
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t k = 0; k < m; k++)
            h = (h ^ p[k]) * 0x100000001b3ull;
        size_t slot = (size_t)(h ^ (h >> 29)) & (cap - 1);
        for (;;) {
            int64_t v = table[slot];
            if (v < 0) {
                table[slot] = count;
                values[count] = (span_value){key, i, i, count};
                ids[i] = count++;
                break;
            }
            int64_t f = values[v].first;
            if ((size_t)len[f] == m && memcmp(d + at[f], p, m) == 0) {
                if (key < values[v].key) { /* rows ascend: a tie keeps the earlier one */
                    values[v].key = key;
                    values[v].row = i;
                }
                ids[i] = v;
                break;
            }
            slot = (slot + 1) & (cap - 1);
        }
    }
    /* span_ids numbers values group by group in key order, a group's spans in row order */
    qsort(values, (size_t)count, sizeof(span_value), value_order);
    for (Py_ssize_t v = 0; v < count; v++) {
        rank[values[v].id] = v;
        firsts[v] = values[v].first;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        ids[i] = rank[ids[i]];
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(count);
done:
    PyMem_Free(rank);
    PyMem_Free(values);
    PyMem_Free(table);
    if (got > 1)
        PyBuffer_Release(&firsts_out);
    if (got > 0)
        PyBuffer_Release(&ids_out);
    PyBuffer_Release(&len_buf);
    PyBuffer_Release(&at_buf);
    PyBuffer_Release(&buf);
    return result;
}

/* --- linked entries ------------------------------------------------------------------------ */

PyDoc_STRVAR(follow_links_doc,
             "follow_links(buf, base, stride, link_at, head, limit) -> (numbers, next)\n\n"
             "The entries of a chain of links, each entry n at base + n * stride with its link\n"
             "(a big-endian int32, the number of the next entry) link_at bytes into it: from\n"
             "head, while the number is in [1, limit) and not met before. numbers: int64 bytes\n"
             "of the entries in walk order; next: the number that ended the walk (out of range,\n"
             "or the first met twice). Every entry below limit must lie in buf.");

static PyObject *speedups_follow_links(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t base, stride, link_at, limit;
    long long head;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*nnnLn", &buf, &base, &stride, &link_at, &head, &limit))
        return NULL;
    if (base < 0 || stride < 4 || link_at < 0 || link_at > stride - 4 || limit < 0 ||
        (limit > 0 && (limit > (PY_SSIZE_T_MAX - base) / stride ||
                       base + limit * stride > buf.len))) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "bad follow_links arguments");
        return NULL;
    }
    /* one bit per entry number: each entry is read once, a cycle ends at its first repeat */
    uint8_t *seen = PyMem_Calloc((size_t)limit / 8 + 1, 1);
    size_t cap = 1024, n = 0;
    int64_t *out = PyMem_Malloc(cap * sizeof(int64_t));
    if (!seen || !out) {
        PyErr_NoMemory();
        goto done;
    }
    const uint8_t *data = buf.buf;
    long long at = head;
    while (at > 0 && at < limit && !(seen[at >> 3] & (1u << (at & 7)))) {
        seen[at >> 3] |= (uint8_t)(1u << (at & 7));
        if (n == cap) {
            int64_t *grown = PyMem_Realloc(out, 2 * cap * sizeof(int64_t));
            if (!grown) {
                PyErr_NoMemory();
                goto done;
            }
            out = grown;
            cap *= 2;
        }
        out[n++] = at;
        at = (int32_t)be32(data + base + at * stride + link_at);
    }
    result = Py_BuildValue("(NL)", as_bytes(out, (Py_ssize_t)n), at);
done:
    PyMem_Free(seen);
    PyMem_Free(out);
    PyBuffer_Release(&buf);
    return result;
}

static PyMethodDef methods[] = {
    {"follow_links", speedups_follow_links, METH_VARARGS, follow_links_doc},
    {"walk", speedups_walk, METH_VARARGS, walk_doc},
    {"message_json", speedups_message_json, METH_VARARGS, message_json_doc},
    {"crc32", speedups_crc32, METH_O, crc32_doc},
    {"crc32_many", speedups_crc32_many, METH_VARARGS, crc32_many_doc},
    {"crc32c_many", speedups_crc32c_many, METH_VARARGS, crc32c_many_doc},
    {"gather", speedups_gather, METH_VARARGS, gather_doc},
    {"walk_gather", speedups_walk_gather, METH_VARARGS, walk_gather_doc},
    {"binary_views", speedups_binary_views, METH_VARARGS, binary_views_doc},
    {"property_entries", speedups_property_entries, METH_VARARGS, property_entries_doc},
    {"index_keys", speedups_index_keys, METH_VARARGS, index_keys_doc},
    {"span_ids", speedups_span_ids, METH_VARARGS, span_ids_doc},
    {"property_hashes", speedups_property_hashes, METH_VARARGS, property_hashes_doc},
    {"features", speedups_features, METH_NOARGS, "The CPU features in use."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "The scanner's per-record loops in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    uint16_t probe = 1;
    if (*(uint8_t *)&probe != 1) {
        PyErr_SetString(PyExc_ImportError, "_speedups supports little-endian hosts only");
        return NULL;
    }
    make_tables(crc32_table, 0xEDB88320u);
    make_tables(crc32c_table, 0x82F63B78u);
    make_utf8_tables();
    make_digit_tables();
    make_b64_table();
    /* RMQINSPECT_SCALAR=1: the portable loops only (slicing-by-8 CRCs, the lead-byte UTF-8
     * table, 8-byte words), the paths a host without these instructions runs, so that tests on
     * an x86_64 machine run them too. */
    const char *scalar = getenv("RMQINSPECT_SCALAR");
    int forced_scalar = scalar && strcmp(scalar, "1") == 0;
#ifdef HAVE_X86
    if (!forced_scalar) {
        __builtin_cpu_init();
        have_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
        have_sse42 = __builtin_cpu_supports("sse4.2");
        have_ssse3 = __builtin_cpu_supports("ssse3");
    }
#endif
#ifdef __SSE2__
    have_sse2 = !forced_scalar;
#endif
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    const char *const *lists[3] = {field_names, value_keys, gather_names};
    const int sizes[3] = {F_COUNT, V_COUNT, C_COUNT};
    const char *attrs[3] = {"MESSAGE_FIELDS", "VALUE_KEYS", "GATHER_COLUMNS"};
    for (int l = 0; l < 3; l++) {
        PyObject *names = PyTuple_New(sizes[l]);
        if (!names) {
            Py_DECREF(m);
            return NULL;
        }
        for (int k = 0; k < sizes[l]; k++)
            PyTuple_SET_ITEM(names, k, PyUnicode_FromString(lists[l][k]));
        if (PyModule_AddObject(m, attrs[l], names) < 0) {
            Py_DECREF(names);
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
