/* Row-wise string kernels Arrow has no compute function for, read straight from Arrow buffers.
 *
 * ``contains``: is needle i a byte substring of its own haystack string?
 * ``member``:   is needle i equal to some item of its own haystack list (the first ``limit`` items)?
 * ``phrases``:  the phrases of ASCII texts: the runs of letters, digits, hyphens and whitespace, each
 *               from its first letter or digit to its last byte that is not whitespace, long enough.
 * ``lines``:    vets the lines of a file's bytes for pyarrow's JSON reader (see inputs.arrow_safe).
 * ``codes``:    the code of every key of a chunked string column among distinct values numbered from
 *               a first set of distinct strings (the golden set's ids: string i is code i).
 *
 * Needles are one contiguous Arrow string array (int32 offsets). Haystacks are the chunks of a chunked
 * column, described by a table of buffer addresses (one row per chunk, see rowwise.py), and each needle
 * names its haystack by (chunk, row within the chunk); a negative row has no haystack. The caller keeps
 * every array alive while the kernel runs and guarantees the addresses and rows are in range: these
 * functions check nothing they are told.
 *
 * On valid UTF-8 a byte substring is exactly a code-point substring (no character's encoding starts
 * inside another's), so ``contains`` answers Python's ``needle in haystack``. Nulls are decided by the
 * caller (rows of -1), except null items inside a haystack list, which equal nothing. Every kernel runs
 * without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline int valid_bit(const uint8_t *bitmap, int64_t i) {
    return bitmap == NULL || (bitmap[i >> 3] >> (i & 7)) & 1;
}

/* Is the needle in the haystack? In a short haystack the first byte's candidates are tried one by one
 * (glibc's memmem pays a set-up per call that costs more than a claim's whole scan); in a long one,
 * memmem's linear-time search (a hostile claim cannot make this quadratic). */
static inline int find(const char *hay, int64_t hay_len, const char *needle, int64_t needle_len) {
    if (needle_len == 0) return 1;
    if (needle_len > hay_len) return 0;
    if (hay_len > 64) return memmem(hay, hay_len, needle, needle_len) != NULL;
    const char *last = hay + (hay_len - needle_len);
    for (const char *p = hay; p <= last; p++) {
        p = memchr(p, needle[0], last - p + 1);
        if (p == NULL) return 0;
        if (memcmp(p + 1, needle + 1, needle_len - 1) == 0) return 1;
    }
    return 0;
}

/* One call of a per-needle kernel: needle i (string i of one contiguous Arrow array) and its haystack,
 * row ``row[i]`` (negative: none) of chunk ``chunk[i]`` in the table of chunk addresses. */
typedef struct {
    Py_buffer chunks, chunk, row, out;
    const int32_t *needle_offsets;
    const char *needle_data;
    int64_t needle_base, limit;
    const int64_t *table, *chunk_of, *row_of;
    uint8_t *found;
    Py_ssize_t n;
} needles_t;

/* Parse (needle offsets, needle data, needle base, chunks, chunk, row[, limit], out); 0 or -1 with an
 * exception set (the buffers then released). ``out`` holds one byte per needle. */
static int needles_open(PyObject *args, int with_limit, needles_t *t) {
    long long offsets, data, base, limit = 0;
    int parsed = with_limit ? PyArg_ParseTuple(args, "LLLy*y*y*Lw*", &offsets, &data, &base, &t->chunks,
                                               &t->chunk, &t->row, &limit, &t->out)
                            : PyArg_ParseTuple(args, "LLLy*y*y*w*", &offsets, &data, &base, &t->chunks,
                                               &t->chunk, &t->row, &t->out);
    if (!parsed) return -1;
    t->n = t->out.len;
    if (t->chunk.len < t->n * (Py_ssize_t)sizeof(int64_t) || t->row.len < t->n * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "chunk and row need an int64 value per needle");
        PyBuffer_Release(&t->chunks);
        PyBuffer_Release(&t->chunk);
        PyBuffer_Release(&t->row);
        PyBuffer_Release(&t->out);
        return -1;
    }
    t->needle_offsets = (const int32_t *)(intptr_t)offsets;
    t->needle_data = (const char *)(intptr_t)data;
    t->needle_base = base;
    t->limit = limit;
    t->table = t->chunks.buf;
    t->chunk_of = t->chunk.buf;
    t->row_of = t->row.buf;
    t->found = t->out.buf;
    return 0;
}

static PyObject *needles_close(needles_t *t) {
    PyBuffer_Release(&t->chunks);
    PyBuffer_Release(&t->chunk);
    PyBuffer_Release(&t->row);
    PyBuffer_Release(&t->out);
    Py_RETURN_NONE;
}

static inline const char *needle_at(const needles_t *t, Py_ssize_t i, int64_t *len) {
    int64_t start = t->needle_offsets[t->needle_base + i];
    *len = t->needle_offsets[t->needle_base + i + 1] - start;
    return t->needle_data + start;
}

static PyObject *contains(PyObject *self, PyObject *args) {
    needles_t t;
    if (needles_open(args, 0, &t) < 0) return NULL;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < t.n; i++) {
        int64_t r = t.row_of[i], needle_len;
        t.found[i] = 0;
        if (r < 0) continue;
        const int64_t *c = t.table + 4 * t.chunk_of[i]; /* offsets, data, base, validity */
        const int32_t *hay_offsets = (const int32_t *)(intptr_t)c[0];
        const char *hay_data = (const char *)(intptr_t)c[1];
        int64_t at = c[2] + r;
        int64_t hay_start = hay_offsets[at], hay_len = hay_offsets[at + 1] - hay_start;
        const char *needle = needle_at(&t, i, &needle_len);
        t.found[i] = find(hay_data + hay_start, hay_len, needle, needle_len);
    }
    Py_END_ALLOW_THREADS
    return needles_close(&t);
}

static PyObject *member(PyObject *self, PyObject *args) {
    needles_t t;
    if (needles_open(args, 1, &t) < 0) return NULL;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < t.n; i++) {
        int64_t r = t.row_of[i], needle_len;
        t.found[i] = 0;
        if (r < 0) continue;
        /* list offsets, list base, item offsets, item data, item base, item validity */
        const int64_t *c = t.table + 6 * t.chunk_of[i];
        const int32_t *list_offsets = (const int32_t *)(intptr_t)c[0];
        const int32_t *item_offsets = (const int32_t *)(intptr_t)c[2];
        const char *item_data = (const char *)(intptr_t)c[3];
        const uint8_t *item_valid = (const uint8_t *)(intptr_t)c[5];
        int64_t first = list_offsets[c[1] + r], end = list_offsets[c[1] + r + 1];
        if (end - first > t.limit) end = first + t.limit;
        const char *needle = needle_at(&t, i, &needle_len);
        for (int64_t j = c[4] + first; j < c[4] + end; j++) {
            int64_t item_start = item_offsets[j];
            if (item_offsets[j + 1] - item_start == needle_len && valid_bit(item_valid, j) &&
                memcmp(item_data + item_start, needle, needle_len) == 0) {
                t.found[i] = 1;
                break;
            }
        }
    }
    Py_END_ALLOW_THREADS
    return needles_close(&t);
}

static inline int is_alnum(uint8_t c) { return (uint8_t)(c - '0') < 10 || (uint8_t)((c | 32) - 'a') < 26; }
static inline int is_space(uint8_t c) { return c == ' ' || (uint8_t)(c - '\t') < 5; } /* \t \n \v \f \r */
static inline int in_phrase(uint8_t c) { return is_alnum(c) || c == '-' || is_space(c); }

/* phrases(offsets, data, base, n, min_len, out offsets, out data, out rows): the phrases of n ASCII
 * strings, written back to back; returns how many. The caller sizes the outputs for the most there can
 * be: every phrase is followed by a byte outside it or ends its string. */
static PyObject *phrases(PyObject *self, PyObject *args) {
    long long t_offsets, t_data, t_base, n, min_len;
    Py_buffer out_offsets, out_data, out_rows;
    if (!PyArg_ParseTuple(args, "LLLLLw*w*w*", &t_offsets, &t_data, &t_base, &n, &min_len, &out_offsets,
                          &out_data, &out_rows))
        return NULL;
    const int32_t *offsets = (const int32_t *)(intptr_t)t_offsets;
    const uint8_t *data = (const uint8_t *)(intptr_t)t_data;
    int32_t *starts = out_offsets.buf;
    uint8_t *bytes = out_data.buf;
    int64_t *rows = out_rows.buf, count = 0, written = 0;
    Py_BEGIN_ALLOW_THREADS
    starts[0] = 0;
    for (int64_t row = 0; row < n; row++) {
        int64_t i = offsets[t_base + row], end = offsets[t_base + row + 1];
        while (i < end) {
            while (i < end && !in_phrase(data[i])) i++;
            int64_t first = -1, last = -1; /* first letter or digit, last byte not whitespace */
            for (; i < end && in_phrase(data[i]); i++) {
                if (first < 0 && is_alnum(data[i])) first = i;
                if (first >= 0 && !is_space(data[i])) last = i;
            }
            if (first >= 0 && last + 1 - first >= min_len) {
                memcpy(bytes + written, data + first, last + 1 - first);
                written += last + 1 - first;
                rows[count++] = row;
                starts[count] = (int32_t)written;
            }
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out_offsets);
    PyBuffer_Release(&out_data);
    PyBuffer_Release(&out_rows);
    return PyLong_FromLongLong(count);
}

/* FNV-1a: short ids hash well and fast enough; the table is twice the distinct strings at most. */
static inline uint64_t hash_bytes(const char *p, int64_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (int64_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 1099511628211ULL;
    return h ^ (h >> 29);
}

typedef struct {
    const char *data;
    int64_t len;
} slice_t;

/* codes(first offsets, first data, first base, n_first, chunks, chunk lengths, out): out[i] is the code
 * of key i (keys in chunk order): j < n_first where it equals first string j, else n_first + the rank of
 * its first occurrence among the keys in no first string; -1 for a null key. The first strings are
 * distinct (the caller checks), and there are fewer than 2^31 strings in all (the slots are int32). */
static PyObject *codes(PyObject *self, PyObject *args) {
    long long f_offsets, f_data, f_base, n_first;
    Py_buffer chunks, lengths, out;
    if (!PyArg_ParseTuple(args, "LLLLy*y*w*", &f_offsets, &f_data, &f_base, &n_first, &chunks, &lengths, &out))
        return NULL;
    Py_ssize_t n_chunks = lengths.len / (Py_ssize_t)sizeof(int64_t), n = out.len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *table = chunks.buf, *length = lengths.buf;
    int64_t *code = out.buf;
    uint64_t capacity = 16;
    while (capacity < 2 * (uint64_t)(n_first + n)) capacity <<= 1;
    int32_t *slots = malloc(capacity * sizeof(int32_t));
    /* Only the strings that are not first strings are kept here; a first string is read where it is. */
    int64_t n_extra = 0, extra_capacity = 1024;
    slice_t *extra = malloc(extra_capacity * sizeof(slice_t));
    int too_many = n_first + n >= INT32_MAX, failed = too_many || slots == NULL || extra == NULL;
    const int32_t *first_offsets = (const int32_t *)(intptr_t)f_offsets;
    const char *first_data = (const char *)(intptr_t)f_data;
    Py_BEGIN_ALLOW_THREADS
    if (!failed) memset(slots, 0xff, capacity * sizeof(int32_t)); /* -1: empty */
    int64_t row = 0;
    for (int64_t c = -1; c < n_chunks && !failed; c++) {
        /* chunk -1 is the first strings, then every chunk of keys: (offsets, data, base, validity) */
        const int32_t *offsets = c < 0 ? first_offsets : (const int32_t *)(intptr_t)table[4 * c];
        const char *data = c < 0 ? first_data : (const char *)(intptr_t)table[4 * c + 1];
        int64_t base = c < 0 ? f_base : table[4 * c + 2];
        const uint8_t *valid = c < 0 ? NULL : (const uint8_t *)(intptr_t)table[4 * c + 3];
        int64_t len = c < 0 ? n_first : length[c];
        for (int64_t i = 0; i < len && !failed; i++) {
            if (!valid_bit(valid, base + i)) {
                code[row++] = -1;
                continue;
            }
            const char *p = data + offsets[base + i];
            int64_t l = offsets[base + i + 1] - offsets[base + i];
            uint64_t at = hash_bytes(p, l) & (capacity - 1);
            int64_t found = -1;
            for (; slots[at] >= 0; at = (at + 1) & (capacity - 1)) {
                int64_t k = slots[at];
                const char *v = k < n_first ? first_data + first_offsets[f_base + k] : extra[k - n_first].data;
                int64_t v_len = k < n_first ? first_offsets[f_base + k + 1] - first_offsets[f_base + k]
                                            : extra[k - n_first].len;
                if (v_len == l && memcmp(v, p, l) == 0) {
                    found = k;
                    break;
                }
            }
            if (found < 0) {
                found = n_first + n_extra;
                if (c < 0) {
                    found = i;
                } else {
                    if (n_extra == extra_capacity) {
                        slice_t *grown = realloc(extra, 2 * extra_capacity * sizeof(slice_t));
                        if (grown == NULL) {
                            failed = 1;
                            break;
                        }
                        extra = grown;
                        extra_capacity *= 2;
                    }
                    extra[n_extra].data = p;
                    extra[n_extra++].len = l;
                }
                slots[at] = (int32_t)found;
            }
            if (c >= 0) code[row++] = found;
        }
    }
    Py_END_ALLOW_THREADS
    free(slots);
    free(extra);
    PyBuffer_Release(&chunks);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&out);
    if (too_many) return PyErr_Format(PyExc_ValueError, "more than 2^31 - 1 strings to number");
    if (failed) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* lines(data, begin, end, max_len, deep_len, out starts, out ends): the lines of data[begin:end] (cut at
 * '\n'): -1 when one is longer than max_len, or is not blank and does not start with '{' once ASCII
 * whitespace is skipped; else the number of lines at least deep_len long, whose bounds are written out
 * (the caller sizes the outputs for (end - begin) / deep_len + 1 of them). */
static PyObject *lines(PyObject *self, PyObject *args) {
    Py_buffer buf, out_starts, out_ends;
    long long begin, end, max_len, deep_len;
    if (!PyArg_ParseTuple(args, "y*LLLLw*w*", &buf, &begin, &end, &max_len, &deep_len, &out_starts, &out_ends))
        return NULL;
    if (begin < 0 || end > buf.len || begin > end || deep_len < 1) {
        PyBuffer_Release(&buf);
        PyBuffer_Release(&out_starts);
        PyBuffer_Release(&out_ends);
        return PyErr_Format(PyExc_ValueError, "lines: bounds out of range");
    }
    const char *data = buf.buf;
    int64_t *starts = out_starts.buf, *ends = out_ends.buf, deep = 0, unsafe = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t start = begin; start <= end && !unsafe;) {
        const char *newline = memchr(data + start, '\n', end - start);
        int64_t stop = newline == NULL ? end : newline - data;
        if (stop - start > max_len) {
            unsafe = 1;
            break;
        }
        int64_t i = start;
        while (i < stop && is_space((uint8_t)data[i])) i++;
        if (i < stop && data[i] != '{') unsafe = 1;
        if (stop - start >= deep_len) {
            starts[deep] = start;
            ends[deep++] = stop;
        }
        start = stop + 1;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    PyBuffer_Release(&out_starts);
    PyBuffer_Release(&out_ends);
    return PyLong_FromLongLong(unsafe ? -1 : deep);
}

static PyMethodDef methods[] = {
    {"contains", contains, METH_VARARGS, "Per needle: is it a byte substring of its haystack string?"},
    {"codes", codes, METH_VARARGS, "Codes of chunked string keys among first distinct strings and themselves."},
    {"phrases", phrases, METH_VARARGS, "The phrases of ASCII strings, back to back, and the row of each."},
    {"lines", lines, METH_VARARGS, "Vet the lines of file bytes for the JSON reader."},
    {"member", member, METH_VARARGS, "Per needle: is it an item of the first `limit` of its haystack list?"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels", "String kernels over Arrow buffers and file bytes.", -1, methods,
};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
