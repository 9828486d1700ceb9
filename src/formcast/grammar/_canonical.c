/* utf8(value) -> bytes | None: the UTF-8 of the schema's canonical JSON text
 * (cache.canonical_json: no whitespace, keys in the schema's order, non-ASCII kept raw), or
 * None when the value holds anything but exact dicts, lists, strings, ints, finite floats,
 * booleans and None, or nests deeper than MAX_DEPTH. On None the caller runs the json module's
 * encoder, which gives the same text for everything handled here and the errors for the rest
 * (a set, NaN, a self-containing dict, a string with a lone surrogate...).
 *
 * Why: every compile hashes its schema. The json encoder spent ~16 us on a 700-byte schema
 * (a list of string chunks, a new quoted string per string, a join); this walks the values
 * once into one buffer, at about the speed of marshal.dumps. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define MAX_DEPTH 200

typedef struct {
    char *data;
    Py_ssize_t len, cap;
    char local[2048];
} Buf;

static int buf_grow(Buf *b, Py_ssize_t need) {
    Py_ssize_t cap = b->cap * 2;
    while (cap < b->len + need) cap *= 2;
    char *data = b->data == b->local ? PyMem_Malloc(cap) : PyMem_Realloc(b->data, cap);
    if (!data) {
        PyErr_NoMemory();
        return -1;
    }
    if (b->data == b->local) memcpy(data, b->local, b->len);
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const char *s, Py_ssize_t n) {
    if (b->len + n > b->cap && buf_grow(b, n) < 0) return -1;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    return 0;
}

static inline int buf_char(Buf *b, char c) {
    if (b->len + 1 > b->cap && buf_grow(b, 1) < 0) return -1;
    b->data[b->len++] = c;
    return 0;
}

/* 1: done; 0: not handled here (the caller falls back); -1: error set. */
static int put_str(Buf *b, PyObject *s) {
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (!u) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
        PyErr_Clear(); /* a lone surrogate: the fallback reports it as it always has */
        return 0;
    }
    /* Escapes as json.encoder.encode_basestring: the quote, the backslash and the control
     * characters; every other byte (non-ASCII included) is copied. */
    if (b->len + n + 2 > b->cap && buf_grow(b, n + 2) < 0) return -1;
    b->data[b->len++] = '"';
    Py_ssize_t start = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)u[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        if (buf_put(b, u + start, i - start) < 0) return -1;
        start = i + 1;
        char esc[8];
        const char *out = esc;
        Py_ssize_t len = 2;
        switch (c) {
        case '"': out = "\\\""; break;
        case '\\': out = "\\\\"; break;
        case '\n': out = "\\n"; break;
        case '\r': out = "\\r"; break;
        case '\t': out = "\\t"; break;
        case '\b': out = "\\b"; break;
        case '\f': out = "\\f"; break;
        default:
            snprintf(esc, sizeof esc, "\\u%04x", c);
            len = 6;
        }
        if (buf_put(b, out, len) < 0) return -1;
    }
    if (buf_put(b, u + start, n - start) < 0) return -1;
    return buf_char(b, '"') < 0 ? -1 : 1;
}

static int put_repr(Buf *b, PyObject *(*repr)(PyObject *), PyObject *v) {
    PyObject *text = repr(v);
    if (!text) return -1;
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(text, &n);
    int ok = u && buf_put(b, u, n) == 0;
    Py_DECREF(text);
    return ok ? 1 : -1;
}

static int put_value(Buf *b, PyObject *v, int depth) {
    if (v == Py_None) return buf_put(b, "null", 4) < 0 ? -1 : 1;
    if (v == Py_True) return buf_put(b, "true", 4) < 0 ? -1 : 1;
    if (v == Py_False) return buf_put(b, "false", 5) < 0 ? -1 : 1;
    PyTypeObject *type = Py_TYPE(v);
    if (type == &PyUnicode_Type) return put_str(b, v);
    if (type == &PyLong_Type) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow) return 0; /* past 64 bits: the json module (and its digit limit) */
        if (x == -1 && PyErr_Occurred()) return -1;
        char digits[24];
        int n = snprintf(digits, sizeof digits, "%lld", x);
        return buf_put(b, digits, n) < 0 ? -1 : 1;
    }
    if (type == &PyFloat_Type) {
        double x = PyFloat_AS_DOUBLE(v);
        if (x != x || x - x != 0.0) return 0; /* NaN or infinite: the fallback raises */
        return put_repr(b, PyFloat_Type.tp_repr, v);
    }
    if (depth >= MAX_DEPTH) return 0;
    if (type == &PyList_Type) {
        if (buf_char(b, '[') < 0) return -1;
        /* The list may change size only through code this does not run: read it by index. */
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); i++) {
            if (i && buf_char(b, ',') < 0) return -1;
            int got = put_value(b, PyList_GET_ITEM(v, i), depth + 1);
            if (got <= 0) return got;
        }
        return buf_char(b, ']') < 0 ? -1 : 1;
    }
    if (type == &PyDict_Type) {
        if (buf_char(b, '{') < 0) return -1;
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        int first = 1;
        while (PyDict_Next(v, &pos, &key, &value)) {
            if (Py_TYPE(key) != &PyUnicode_Type) return 0; /* json converts other keys */
            if (!first && buf_char(b, ',') < 0) return -1;
            first = 0;
            int got = put_str(b, key);
            if (got <= 0) return got;
            if (buf_char(b, ':') < 0) return -1;
            got = put_value(b, value, depth + 1);
            if (got <= 0) return got;
        }
        return buf_char(b, '}') < 0 ? -1 : 1;
    }
    return 0;
}

static PyObject *utf8(PyObject *self, PyObject *value) {
    (void)self;
    Buf b;
    b.data = b.local;
    b.len = 0;
    b.cap = (Py_ssize_t)sizeof b.local;
    int got = put_value(&b, value, 0);
    PyObject *out = NULL;
    if (got > 0) {
        out = PyBytes_FromStringAndSize(b.data, b.len);
    } else if (got == 0) {
        out = Py_None;
        Py_INCREF(out);
    }
    if (b.data != b.local) PyMem_Free(b.data);
    return out;
}

static PyMethodDef methods[] = {
    {"utf8", utf8, METH_O,
     "The UTF-8 of the value's canonical JSON text, or None where the json module decides."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_canonical",
                                    "Canonical JSON text of a schema, for its hash.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__canonical(void) { return PyModule_Create(&module); }
