/* A JSON Lines reader for a schema known in advance: one pass over a block of lines, straight into the
 * buffers of Arrow arrays.
 *
 * ``Reader(spec)`` holds one builder per node of the schema. ``spec`` is ``(type, children)`` for the
 * whole line (a struct), where ``children`` is a tuple of ``(name, type, children)``; a list has one
 * child whose name is ignored. Types: 0 null, 1 bool, 2 int64, 3 double, 4 string, 5 list, 6 struct.
 *
 * ``reader.read(data, begin, end)`` parses the lines of ``data[begin:end]`` (cut at '\n'; blank lines are
 * skipped) and returns the arrays' buffers, a node at a time: ``(length, null_count, validity, values,
 * data, children)``, each buffer an object exporting the bytes it owns, or None. It returns None, having
 * built nothing that survives, as soon as the block holds anything it cannot vouch for: a line that is
 * not one JSON object, a key outside the schema or given twice in one object, a key with an escape, a
 * value of another type than its field's, an integer outside int64 or written with a fraction or an
 * exponent, a number that overflows a double or is written in 64 characters or more, a string with a
 * raw control character, an escape JSON does not define, a lone surrogate or bytes that are not UTF-8.
 * The caller then reads the file with a reader that either explains or accepts it.
 *
 * What it accepts it reads as pyarrow's JSON reader does with the same schema: a missing field and a
 * JSON null are null (the children of a null struct too), integers are exact, doubles correctly rounded
 * (``strtod_l`` in the C locale), strings unescaped. Recursion follows the schema, not the input, so a
 * deep line cannot exhaust the stack: it fails to match first. The parse runs without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static locale_t c_numbers; /* strtod_l reads numbers in the C locale, whatever the process's */

enum { T_NULL, T_BOOL, T_INT64, T_DOUBLE, T_STRING, T_LIST, T_STRUCT };
enum { OK = 0, CANNOT = -1, NO_MEMORY = -2 };
#define MAX_FIELDS 64 /* fields of one struct: a bit each in the "seen" mask */

/* A growable byte buffer; ``hint`` is the previous block's size, the next one's first capacity. */
typedef struct {
    uint8_t *p;
    int64_t len, cap, hint;
} grow_t;

static int reserve(grow_t *g, int64_t more) {
    if (g->len + more <= g->cap && g->p != NULL) return OK; /* even an empty buffer is one: no NULL */
    int64_t cap = g->cap ? 2 * g->cap : (g->hint + g->hint / 8 + 64);
    while (cap < g->len + more) cap *= 2;
    uint8_t *p = realloc(g->p, cap);
    if (p == NULL) return NO_MEMORY;
    g->p = p;
    g->cap = cap;
    return OK;
}

static inline int push_bit(grow_t *g, int64_t i, int bit) {
    if ((i & 7) == 0) {
        if (reserve(g, 1)) return NO_MEMORY;
        g->p[g->len++] = 0;
    }
    if (bit) g->p[i >> 3] |= (uint8_t)(1u << (i & 7));
    return OK;
}

static inline int push_bytes(grow_t *g, const void *src, int64_t n) {
    if (reserve(g, n)) return NO_MEMORY;
    memcpy(g->p + g->len, src, n);
    g->len += n;
    return OK;
}

static inline int push_i32(grow_t *g, int64_t v) {
    if (v > INT32_MAX) return CANNOT; /* a block larger than int32 offsets: the caller's blocks are not */
    int32_t x = (int32_t)v;
    return push_bytes(g, &x, sizeof x);
}

typedef struct node {
    int type, n_children;
    struct node *children;
    char *name;
    Py_ssize_t name_len;
    grow_t valid, values, data; /* values: bits, int64, double or int32 offsets */
    int64_t length, null_count;
} node_t;

typedef struct {
    const uint8_t *p, *end;
} cur_t;

static inline void skip_space(cur_t *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n')) c->p++;
}

static inline int literal(cur_t *c, const char *word, size_t n) {
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return CANNOT;
    c->p += n;
    return OK;
}

/* The end offset of a string or list node's current element (its offsets buffer holds length + 1). */
static inline int64_t child_end(const node_t *n) {
    return n->type == T_STRING ? n->data.len : n->children[0].length;
}

static int push_null(node_t *n) {
    int rc = push_bit(&n->valid, n->length, 0);
    if (rc) return rc;
    n->null_count++;
    switch (n->type) {
    case T_BOOL: rc = push_bit(&n->values, n->length, 0); break;
    case T_INT64:
    case T_DOUBLE: {
        int64_t zero = 0;
        rc = push_bytes(&n->values, &zero, 8);
        break;
    }
    case T_STRING:
    case T_LIST: rc = push_i32(&n->values, child_end(n)); break;
    case T_STRUCT:
        for (int i = 0; i < n->n_children && !rc; i++) rc = push_null(&n->children[i]);
        break;
    }
    n->length++;
    return rc;
}

static inline int push_valid(node_t *n) {
    int rc = push_bit(&n->valid, n->length, 1);
    n->length++;
    return rc;
}

static inline int hex(uint8_t b) {
    if ((uint8_t)(b - '0') < 10) return b - '0';
    if ((uint8_t)((b | 32) - 'a') < 6) return (b | 32) - 'a' + 10;
    return -1;
}

static int hex4(const uint8_t *p, const uint8_t *end, uint32_t *out) {
    if (end - p < 4) return CANNOT;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hex(p[i]);
        if (h < 0) return CANNOT;
        v = v << 4 | (uint32_t)h;
    }
    *out = v;
    return OK;
}

/* Whether s[0:n] is UTF-8: no overlong form, no surrogate, nothing past U+10FFFF. */
static int utf8(const uint8_t *s, int64_t n) {
    int64_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        int more;
        uint8_t lo = 0x80, hi = 0xBF;
        if (b >= 0xC2 && b <= 0xDF) more = 1;
        else if (b == 0xE0) more = 2, lo = 0xA0;
        else if (b == 0xED) more = 2, hi = 0x9F;
        else if (b >= 0xE1 && b <= 0xEF) more = 2;
        else if (b == 0xF0) more = 3, lo = 0x90;
        else if (b == 0xF4) more = 3, hi = 0x8F;
        else if (b >= 0xF1 && b <= 0xF3) more = 3;
        else return 0;
        if (n - i <= more || s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (int k = 2; k <= more; k++)
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        i += more + 1;
    }
    return 1;
}

/* The string at c->p (just past its opening quote), unescaped and appended to ``out``. */
static int read_string(cur_t *c, grow_t *out) {
    const uint8_t *s = c->p, *q = s;
    int escaped = 0, high = 0;
    for (; q < c->end; q++) {
        uint8_t b = *q;
        if (b == '"') break;
        if (b < 0x20) return CANNOT;
        if (b == '\\') {
            escaped = 1;
            q++;
        } else {
            high |= b >> 7;
        }
    }
    if (q >= c->end) return CANNOT;
    int64_t start = out->len;
    if (reserve(out, q - s)) return NO_MEMORY;
    if (!escaped) {
        memcpy(out->p + out->len, s, q - s);
        out->len += q - s;
    } else {
        uint8_t *w = out->p + out->len;
        for (const uint8_t *r = s; r < q;) {
            if (*r != '\\') {
                *w++ = *r++;
                continue;
            }
            r++;
            uint32_t cp;
            switch (*r++) {
            case '"': *w++ = '"'; continue;
            case '\\': *w++ = '\\'; continue;
            case '/': *w++ = '/'; continue;
            case 'b': *w++ = '\b'; continue;
            case 'f': *w++ = '\f'; continue;
            case 'n': *w++ = '\n'; continue;
            case 'r': *w++ = '\r'; continue;
            case 't': *w++ = '\t'; continue;
            case 'u':
                if (hex4(r, q, &cp)) return CANNOT;
                r += 4;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return CANNOT;
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    uint32_t low;
                    if (q - r < 6 || r[0] != '\\' || r[1] != 'u' || hex4(r + 2, q, &low) || low < 0xDC00 ||
                        low > 0xDFFF)
                        return CANNOT;
                    r += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                }
                if (cp < 0x80) {
                    *w++ = (uint8_t)cp;
                } else if (cp < 0x800) {
                    *w++ = (uint8_t)(0xC0 | cp >> 6);
                    *w++ = (uint8_t)(0x80 | (cp & 0x3F));
                } else if (cp < 0x10000) {
                    *w++ = (uint8_t)(0xE0 | cp >> 12);
                    *w++ = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
                    *w++ = (uint8_t)(0x80 | (cp & 0x3F));
                } else {
                    *w++ = (uint8_t)(0xF0 | cp >> 18);
                    *w++ = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
                    *w++ = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
                    *w++ = (uint8_t)(0x80 | (cp & 0x3F));
                }
                continue;
            default: return CANNOT;
            }
        }
        out->len = w - out->p;
    }
    if (high && !utf8(out->p + start, out->len - start)) return CANNOT;
    c->p = q + 1;
    return OK;
}

/* A JSON number at c->p: its token's end, and whether it has a fraction or an exponent. */
static int number_token(cur_t *c, const uint8_t **end, int *integral) {
    const uint8_t *p = c->p, *e = c->end;
    *integral = 1;
    if (p < e && *p == '-') p++;
    if (p >= e || (uint8_t)(*p - '0') > 9) return CANNOT;
    if (*p == '0') p++;
    else
        while (p < e && (uint8_t)(*p - '0') <= 9) p++;
    if (p < e && *p == '.') {
        *integral = 0;
        p++;
        if (p >= e || (uint8_t)(*p - '0') > 9) return CANNOT;
        while (p < e && (uint8_t)(*p - '0') <= 9) p++;
    }
    if (p < e && (*p | 32) == 'e') {
        *integral = 0;
        p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        if (p >= e || (uint8_t)(*p - '0') > 9) return CANNOT;
        while (p < e && (uint8_t)(*p - '0') <= 9) p++;
    }
    *end = p;
    return OK;
}

static int read_value(node_t *n, cur_t *c);

static int read_object(node_t *n, cur_t *c) {
    uint64_t seen = 0;
    int next = 0, rc;
    c->p++; /* '{' */
    skip_space(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
    } else {
        for (;;) {
            if (c->p >= c->end || *c->p != '"') return CANNOT;
            const uint8_t *key = ++c->p;
            while (c->p < c->end && *c->p != '"' && *c->p != '\\') c->p++;
            if (c->p >= c->end || *c->p != '"') return CANNOT;
            Py_ssize_t key_len = c->p - key;
            c->p++;
            int field = -1;
            for (int k = 0; k < n->n_children; k++) { /* fields mostly come in the schema's order */
                int i = (next + k) % n->n_children;
                node_t *child = &n->children[i];
                if (child->name_len == key_len && memcmp(child->name, key, key_len) == 0) {
                    field = i;
                    break;
                }
            }
            if (field < 0 || (seen >> field) & 1) return CANNOT;
            seen |= (uint64_t)1 << field;
            next = field + 1;
            skip_space(c);
            if (c->p >= c->end || *c->p != ':') return CANNOT;
            c->p++;
            if ((rc = read_value(&n->children[field], c))) return rc;
            skip_space(c);
            if (c->p < c->end && *c->p == ',') {
                c->p++;
                skip_space(c);
                continue;
            }
            if (c->p < c->end && *c->p == '}') {
                c->p++;
                break;
            }
            return CANNOT;
        }
    }
    for (int i = 0; i < n->n_children; i++)
        if (!((seen >> i) & 1) && (rc = push_null(&n->children[i]))) return rc;
    return push_valid(n);
}

static int read_value(node_t *n, cur_t *c) {
    int rc;
    skip_space(c);
    if (c->p >= c->end) return CANNOT;
    if (*c->p == 'n') {
        if (literal(c, "null", 4)) return CANNOT;
        return push_null(n);
    }
    switch (n->type) {
    case T_BOOL: {
        int bit = *c->p == 't';
        if (bit ? literal(c, "true", 4) : literal(c, "false", 5)) return CANNOT;
        if ((rc = push_bit(&n->values, n->length, bit))) return rc;
        return push_valid(n);
    }
    case T_INT64:
    case T_DOUBLE: {
        const uint8_t *end;
        int integral;
        if (number_token(c, &end, &integral)) return CANNOT;
        if (n->type == T_INT64) {
            if (!integral) return CANNOT;
            const uint8_t *p = c->p;
            int negative = *p == '-';
            uint64_t v = 0, limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
            for (p += negative; p < end; p++) {
                uint64_t d = *p - '0';
                if (v > (limit - d) / 10) return CANNOT;
                v = v * 10 + d;
            }
            int64_t x = negative ? (int64_t)(0 - v) : (int64_t)v;
            if ((rc = push_bytes(&n->values, &x, 8))) return rc;
        } else {
            char token[64];
            if (end - c->p >= (int64_t)sizeof token) return CANNOT;
            memcpy(token, c->p, end - c->p);
            token[end - c->p] = '\0';
            double x = strtod_l(token, NULL, c_numbers);
            if (!isfinite(x)) return CANNOT;
            if ((rc = push_bytes(&n->values, &x, 8))) return rc;
        }
        c->p = end;
        return push_valid(n);
    }
    case T_STRING:
        if (*c->p != '"') return CANNOT;
        c->p++;
        if ((rc = read_string(c, &n->data))) return rc;
        if ((rc = push_i32(&n->values, n->data.len))) return rc;
        return push_valid(n);
    case T_LIST: {
        if (*c->p != '[') return CANNOT;
        c->p++;
        skip_space(c);
        if (c->p < c->end && *c->p == ']') {
            c->p++;
        } else {
            for (;;) {
                if ((rc = read_value(&n->children[0], c))) return rc;
                skip_space(c);
                if (c->p < c->end && *c->p == ',') {
                    c->p++;
                    continue;
                }
                if (c->p < c->end && *c->p == ']') {
                    c->p++;
                    break;
                }
                return CANNOT;
            }
        }
        if ((rc = push_i32(&n->values, n->children[0].length))) return rc;
        return push_valid(n);
    }
    case T_STRUCT:
        if (*c->p != '{') return CANNOT;
        return read_object(n, c);
    default: /* T_NULL holds nothing but null */
        return CANNOT;
    }
}

/* -- the builders between blocks -------------------------------------------------------------------- */

/* The builder's bytes, taken out of it: the builder is empty again, its size kept as the next hint. */
static uint8_t *take(grow_t *g) {
    uint8_t *p = g->p;
    g->hint = g->len > g->hint ? g->len : g->hint;
    g->p = NULL;
    g->len = g->cap = 0;
    return p;
}

static void forget(grow_t *g) { free(take(g)); }

static int start_block(node_t *n) {
    forget(&n->valid);
    forget(&n->values);
    forget(&n->data);
    n->length = n->null_count = 0;
    if ((n->type == T_STRING || n->type == T_LIST) && push_i32(&n->values, 0)) return NO_MEMORY;
    for (int i = 0; i < n->n_children; i++)
        if (start_block(&n->children[i])) return NO_MEMORY;
    return OK;
}

static void free_node(node_t *n) {
    for (int i = 0; i < n->n_children; i++) free_node(&n->children[i]);
    free(n->children);
    free(n->name);
    free(n->valid.p);
    free(n->values.p);
    free(n->data.p);
}

/* A buffer handed to Python: it owns its bytes and exports them read-only. */
typedef struct {
    PyObject_HEAD uint8_t *p;
    Py_ssize_t len;
} owned_t;

static int owned_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    owned_t *o = (owned_t *)self;
    return PyBuffer_FillInfo(view, self, o->p, o->len, 1, flags);
}

static void owned_dealloc(PyObject *self) {
    free(((owned_t *)self)->p);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs owned_as_buffer = {owned_getbuffer, NULL};

static PyTypeObject owned_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ragspine_pipeline._jsonl.Buffer",
    .tp_basicsize = sizeof(owned_t),
    .tp_dealloc = owned_dealloc,
    .tp_as_buffer = &owned_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Bytes owned by the reader's output.",
};

/* The builder's bytes as a Buffer (shrunk to their size), the builder emptied; None for no bytes. */
static PyObject *hand_over(grow_t *g) {
    if (g->p == NULL) Py_RETURN_NONE;
    owned_t *o = PyObject_New(owned_t, &owned_type);
    if (o == NULL) return NULL;
    o->len = g->len;
    o->p = take(g);
    uint8_t *shrunk = o->len ? realloc(o->p, o->len) : NULL;
    if (shrunk != NULL) o->p = shrunk;
    return (PyObject *)o;
}

static PyObject *output(node_t *n) {
    PyObject *children = PyTuple_New(n->n_children);
    if (children == NULL) return NULL;
    for (int i = 0; i < n->n_children; i++) {
        PyObject *child = output(&n->children[i]);
        if (child == NULL) {
            Py_DECREF(children);
            return NULL;
        }
        PyTuple_SET_ITEM(children, i, child);
    }
    PyObject *valid = n->null_count ? hand_over(&n->valid) : (forget(&n->valid), Py_NewRef(Py_None));
    PyObject *values = valid ? hand_over(&n->values) : NULL;
    PyObject *data = values ? hand_over(&n->data) : NULL;
    if (data == NULL) {
        Py_XDECREF(valid);
        Py_XDECREF(values);
        Py_DECREF(children);
        return NULL;
    }
    return Py_BuildValue("(LLNNNN)", (long long)n->length, (long long)n->null_count, valid, values, data,
                         children);
}

/* -- the Reader type -------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD node_t root;
    int busy;
} reader_t;

static int build(node_t *n, int type, PyObject *children) {
    memset(n, 0, sizeof *n);
    n->type = type;
    if (type < T_NULL || type > T_STRUCT) {
        PyErr_SetString(PyExc_ValueError, "unknown type code");
        return -1;
    }
    if (!PyTuple_Check(children)) {
        PyErr_SetString(PyExc_TypeError, "children must be a tuple");
        return -1;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(children);
    if ((type == T_LIST && count != 1) || (type == T_STRUCT && count > MAX_FIELDS) ||
        (type != T_LIST && type != T_STRUCT && count != 0)) {
        PyErr_SetString(PyExc_ValueError, "a list has one child, a struct at most 64, others none");
        return -1;
    }
    n->children = calloc(count ? count : 1, sizeof(node_t));
    if (n->children == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        const char *name;
        Py_ssize_t name_len;
        int child_type;
        PyObject *grandchildren;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(children, i), "s#iO", &name, &name_len, &child_type,
                              &grandchildren))
            return -1;
        n->n_children = (int)i + 1; /* what is built so far is freed on failure */
        if (build(&n->children[i], child_type, grandchildren)) return -1;
        n->children[i].name = malloc(name_len ? name_len : 1);
        if (n->children[i].name == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(n->children[i].name, name, name_len);
        n->children[i].name_len = name_len;
    }
    n->n_children = (int)count;
    return 0;
}

static int reader_init(PyObject *self, PyObject *args, PyObject *kwds) {
    reader_t *r = (reader_t *)self;
    int type;
    PyObject *children;
    if (!PyArg_ParseTuple(args, "(iO)", &type, &children)) return -1;
    if (type != T_STRUCT) {
        PyErr_SetString(PyExc_ValueError, "a line is a struct");
        return -1;
    }
    free_node(&r->root);
    if (build(&r->root, type, children)) {
        free_node(&r->root);
        memset(&r->root, 0, sizeof r->root);
        return -1;
    }
    return 0;
}

static void reader_dealloc(PyObject *self) {
    free_node(&((reader_t *)self)->root);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *reader_read(PyObject *self, PyObject *args) {
    reader_t *r = (reader_t *)self;
    Py_buffer buf;
    long long begin, end;
    if (!PyArg_ParseTuple(args, "y*LL", &buf, &begin, &end)) return NULL;
    if (begin < 0 || end > buf.len || begin > end || end - begin > INT32_MAX) {
        PyBuffer_Release(&buf);
        return PyErr_Format(PyExc_ValueError, "read: bounds out of range");
    }
    if (r->busy) {
        PyBuffer_Release(&buf);
        return PyErr_Format(PyExc_RuntimeError, "read: this reader is already reading on another thread");
    }
    r->busy = 1;
    int rc = start_block(&r->root);
    const uint8_t *data = buf.buf;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t start = begin; start < end && !rc;) {
        const uint8_t *newline = memchr(data + start, '\n', end - start);
        int64_t stop = newline == NULL ? end : newline - data;
        cur_t c = {data + start, data + stop};
        skip_space(&c);
        if (c.p < c.end) { /* a blank line is skipped */
            if (*c.p != '{') rc = CANNOT;
            else if (!(rc = read_object(&r->root, &c))) {
                skip_space(&c);
                if (c.p != c.end) rc = CANNOT;
            }
        }
        start = stop + 1;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    PyObject *result = rc ? NULL : output(&r->root);
    if (rc || result == NULL) start_block(&r->root); /* drop what was built: nothing half-read survives */
    r->busy = 0;
    if (rc == NO_MEMORY) return PyErr_NoMemory();
    if (rc == CANNOT) Py_RETURN_NONE;
    return result;
}

static PyMethodDef reader_methods[] = {
    {"read", reader_read, METH_VARARGS,
     "read(data, begin, end): the buffers of the lines of data[begin:end], or None if it cannot vouch."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject reader_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ragspine_pipeline._jsonl.Reader",
    .tp_basicsize = sizeof(reader_t),
    .tp_dealloc = reader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Reader(spec): JSON Lines to Arrow buffers for one schema.",
    .tp_methods = reader_methods,
    .tp_init = reader_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jsonl", "JSON Lines to Arrow buffers, for a schema known in advance.", -1, NULL,
};

PyMODINIT_FUNC PyInit__jsonl(void) {
    if (c_numbers == (locale_t)0 && (c_numbers = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0)) == (locale_t)0)
        return PyErr_NoMemory();
    if (PyType_Ready(&owned_type) < 0 || PyType_Ready(&reader_type) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&reader_type);
    if (PyModule_AddObject(m, "Reader", (PyObject *)&reader_type) < 0) {
        Py_DECREF(&reader_type);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
