/*
 * The commitlog scanner's per-record loops in C: following TOTALSIZE, copying header rows, the
 * CRCs of many slices of one buffer (zlib's CRC-32 for BODYCRC and the property CRC, CRC-32C
 * for the export's record checksum) and the index keys of many records. Python pays ~0.3 us per record for each loop; a scan at the
 * speed of the data cannot. rmqinspect/format/speedups.py holds the pure-Python twins (the
 * fallback when this module is not built) and tests check that both agree.
 *
 * CRC-32 uses carry-less multiplication folding (PCLMULQDQ, Gopal et al., "Fast CRC
 * Computation for Generic Polynomials Using PCLMULQDQ Instruction", Intel 2009, as in
 * zlib-ng and Chromium's zlib) when the CPU has it; CRC-32C uses the SSE4.2 crc32
 * instruction; both fall back to slicing-by-8 tables.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
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

/* A writable buffer of int64 items with at least ``n`` of them. */
static int get_i64_out(PyObject *obj, Py_buffer *view, Py_ssize_t n, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->len < n * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_Format(PyExc_ValueError, "%s holds fewer than %zd int64 items", what, n);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
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
    while (count < max_records && at + 8 <= limit) {
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

/* --- rows at many positions ---------------------------------------------------------------- */

PyDoc_STRVAR(rows_doc,
             "rows(buf, positions, width, out)\n\n"
             "Copy the width bytes at each position of the int64 array positions into row i of\n"
             "the uint8 buffer out (len(positions) * width bytes); a position outside buf reads\n"
             "at the nearest position where width bytes fit (len(buf) >= width).");

static PyObject *speedups_rows(PyObject *self, PyObject *args)
{
    Py_buffer buf, positions, out;
    Py_ssize_t width;
    PyObject *out_obj, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*nO", &buf, &positions, &width, &out_obj))
        return NULL;
    Py_ssize_t n = positions.len / (Py_ssize_t)sizeof(int64_t);
    if (width <= 0 || width > buf.len) {
        PyErr_SetString(PyExc_ValueError, "width must be in 1..len(buf)");
        goto done;
    }
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        goto done;
    if (out.len < n * width) {
        PyErr_SetString(PyExc_ValueError, "out is too small");
        PyBuffer_Release(&out);
        goto done;
    }
    const uint8_t *data = buf.buf;
    const int64_t *p = positions.buf;
    uint8_t *o = out.buf;
    int64_t last = (int64_t)(buf.len - width);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t at = p[i] < 0 ? 0 : (p[i] > last ? last : p[i]);
        memcpy(o + i * width, data + at, (size_t)width);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out);
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&positions);
    PyBuffer_Release(&buf);
    return result;
}

/* --- index keys ------------------------------------------------------------------------------ */

/* The value of the last entry named ``name`` with a non-empty value, in properties p[0:n]
 * (entries split on 0x02, the name ends at the entry's first 0x01); NULL when there is none. */
static const uint8_t *property_value(const uint8_t *p, size_t n, const char *name, size_t name_len,
                                     size_t *value_len)
{
    const uint8_t *found = NULL;
    size_t i = 0;
    while (i < n) {
        const uint8_t *entry = p + i;
        const uint8_t *stop = memchr(entry, 0x02, n - i);
        size_t len = stop ? (size_t)(stop - entry) : n - i;
        if (len > name_len && memcmp(entry, name, name_len) == 0 && entry[name_len] == 0x01 &&
            len > name_len + 1) {
            found = entry + name_len + 1;
            *value_len = len - name_len - 1;
        }
        i += len + 1;
    }
    return found;
}

/* The next code point of strict UTF-8 at p[*i..n) (what Python's decoder accepts: no overlong
 * forms, no surrogates, at most U+10FFFF); -1 for anything else. */
static int32_t next_code_point(const uint8_t *p, size_t n, size_t *i)
{
    uint8_t b = p[*i];
    int32_t c;
    size_t extra;
    if (b < 0x80) {
        (*i)++;
        return b;
    }
    if (b >= 0xC2 && b <= 0xDF) {
        c = b & 0x1F;
        extra = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
        c = b & 0x0F;
        extra = 2;
    } else if (b >= 0xF0 && b <= 0xF4) {
        c = b & 0x07;
        extra = 3;
    } else {
        return -1;
    }
    for (size_t k = 1; k <= extra; k++) {
        if (*i + k >= n || (p[*i + k] & 0xC0) != 0x80)
            return -1;
        c = (c << 6) | (p[*i + k] & 0x3F);
    }
    if ((extra == 2 && (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF))) ||
        (extra == 3 && (c < 0x10000 || c > 0x10FFFF)))
        return -1;
    *i += extra + 1;
    return c;
}

static int valid_utf8(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n)
        if (next_code_point(p, n, &i) < 0)
            return 0;
    return 1;
}

/* Grow-on-demand int64 output columns. */
typedef struct {
    int64_t *owner, *hash, *units;
    Py_ssize_t len, cap;
} key_list;

static int key_push(key_list *k, int64_t owner, const uint8_t *p, size_t n)
{
    if (k->len == k->cap) {
        Py_ssize_t cap = k->cap ? 2 * k->cap : 1024;
        int64_t *o = PyMem_Realloc(k->owner, cap * sizeof(int64_t));
        if (!o)
            return -1;
        k->owner = o;
        int64_t *h = PyMem_Realloc(k->hash, cap * sizeof(int64_t));
        if (!h)
            return -1;
        k->hash = h;
        int64_t *u = PyMem_Realloc(k->units, cap * sizeof(int64_t));
        if (!u)
            return -1;
        k->units = u;
        k->cap = cap;
    }
    /* String.hashCode over UTF-16 units (p is valid UTF-8). */
    uint32_t h = 0;
    int64_t units = 0;
    size_t i = 0;
    while (i < n) {
        int32_t c = next_code_point(p, n, &i);
        if (c >= 0x10000) {
            c -= 0x10000;
            h = h * 31u + (uint32_t)(0xD800 + (c >> 10));
            h = h * 31u + (uint32_t)(0xDC00 + (c & 0x3FF));
            units += 2;
        } else {
            h = h * 31u + (uint32_t)c;
            units++;
        }
    }
    k->owner[k->len] = owner;
    k->hash[k->len] = h;
    k->units[k->len] = units;
    k->len++;
    return 0;
}

static PyObject *as_bytes(const int64_t *v, Py_ssize_t n)
{
    return PyBytes_FromStringAndSize((const char *)v, n * (Py_ssize_t)sizeof(int64_t));
}

PyDoc_STRVAR(index_keys_doc,
             "index_keys(buf, properties_at, properties_length) -> (owner, hash, units, fallback)\n"
             "\n"
             "The keys IndexService.buildIndex puts for each record (its UNIQ_KEY, then each\n"
             "non-empty space-separated KEYS element), from the properties at each position:\n"
             "int64 columns (as bytes) of the record index, String.hashCode of the key (as an\n"
             "unsigned 32-bit value) and its length in UTF-16 units. Records whose UNIQ_KEY or\n"
             "KEYS is not valid UTF-8 are not decoded here: their indices are in fallback.");

static PyObject *speedups_index_keys(PyObject *self, PyObject *args)
{
    Py_buffer buf, at, length;
    PyObject *result = NULL;
    key_list keys = {0};
    if (!PyArg_ParseTuple(args, "y*y*y*", &buf, &at, &length))
        return NULL;
    Py_ssize_t n = at.len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *a = at.buf, *l = length.buf;
    if (length.len != at.len) {
        PyErr_SetString(PyExc_ValueError, "properties_at and properties_length differ in length");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (l[i] > 0 && (a[i] < 0 || l[i] > (int64_t)buf.len - a[i])) {
            PyErr_Format(PyExc_ValueError, "properties of record %zd are outside the buffer", i);
            goto done;
        }
    }
    int64_t *fallback = PyMem_Malloc((n ? n : 1) * sizeof(int64_t));
    if (!fallback) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t n_fallback = 0;
    const uint8_t *data = buf.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (l[i] <= 0)
            continue;
        const uint8_t *p = data + a[i];
        size_t uniq_len = 0, keys_len = 0;
        const uint8_t *uniq = property_value(p, (size_t)l[i], "UNIQ_KEY", 8, &uniq_len);
        const uint8_t *kv = property_value(p, (size_t)l[i], "KEYS", 4, &keys_len);
        if ((uniq && !valid_utf8(uniq, uniq_len)) || (kv && !valid_utf8(kv, keys_len))) {
            fallback[n_fallback++] = i;
            continue;
        }
        if (uniq && key_push(&keys, i, uniq, uniq_len) < 0)
            goto nomem;
        size_t j = 0;
        while (kv && j < keys_len) {
            const uint8_t *piece = kv + j;
            const uint8_t *space = memchr(piece, ' ', keys_len - j);
            size_t plen = space ? (size_t)(space - piece) : keys_len - j;
            if (plen && key_push(&keys, i, piece, plen) < 0)
                goto nomem;
            j += plen + 1;
        }
    }
    result = Py_BuildValue("(NNNN)", as_bytes(keys.owner, keys.len), as_bytes(keys.hash, keys.len),
                           as_bytes(keys.units, keys.len), as_bytes(fallback, n_fallback));
    PyMem_Free(fallback);
    goto done;
nomem:
    PyMem_Free(fallback);
    PyErr_NoMemory();
done:
    PyMem_Free(keys.owner);
    PyMem_Free(keys.hash);
    PyMem_Free(keys.units);
    PyBuffer_Release(&length);
    PyBuffer_Release(&at);
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
    Py_ssize_t n = starts.len / (Py_ssize_t)sizeof(int64_t);
    PyObject *result = NULL;
    if (lengths.len != starts.len || starts.len % (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "starts and lengths must be int64 arrays of one length");
        goto done;
    }
    if (get_i64_out(out_obj, &out, n, "out") < 0)
        goto done;
    const int64_t *s = starts.buf, *l = lengths.buf;
    int64_t *o = out.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (l[i] > 0 && (s[i] < 0 || l[i] > (int64_t)buf.len - s[i])) {
            PyErr_Format(PyExc_ValueError, "slice %zd [%lld, +%lld) is outside the buffer", i,
                         (long long)s[i], (long long)l[i]);
            PyBuffer_Release(&out);
            goto done;
        }
    }
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

static PyObject *speedups_features(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("{s:O,s:O}", "pclmul", have_clmul ? Py_True : Py_False, "sse4_2",
                         have_sse42 ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"walk", speedups_walk, METH_VARARGS, walk_doc},
    {"rows", speedups_rows, METH_VARARGS, rows_doc},
    {"index_keys", speedups_index_keys, METH_VARARGS, index_keys_doc},
    {"crc32_many", speedups_crc32_many, METH_VARARGS, crc32_many_doc},
    {"crc32c_many", speedups_crc32c_many, METH_VARARGS, crc32c_many_doc},
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
#ifdef HAVE_X86
    __builtin_cpu_init();
    have_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
    return PyModule_Create(&module);
}
