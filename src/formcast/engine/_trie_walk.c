/* The token-trie walk of a cold mask, in C.
 *
 * The Python engine decides *which* automaton states exist and fills their byte rows; this
 * module only walks the vocabulary's trie through rows that are already filled, depth first,
 * and hands back the (node, state) pairs that stopped at a row not filled yet. The caller fills
 * those rows and calls again with them, until nothing is pending. The per-node work is what
 * the numpy walk in mask_cache.classify_tokens does one level at a time:
 *
 *   - a child whose byte the state refuses prunes every token below it; if the base frame
 *     could end somewhere on the way ("flag"), those tokens need the context instead;
 *   - tokens ending at a child that is still alive are allowed;
 *   - a child on the slice chain whose tokens are all slice bytes and short enough is allowed
 *     as a block without walking it.
 *
 * Arrays arrive through the buffer protocol; mask_cache checks their dtypes and sizes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    Py_buffer b;
    int held;
} Buf;

static int get_buf(PyObject *obj, Buf *out, int writable, Py_ssize_t itemsize, const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &out->b, flags) < 0) return -1;
    out->held = 1;
    if (out->b.itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: expected items of %zd bytes, got %zd", name, itemsize,
                     out->b.itemsize);
        return -1;
    }
    return 0;
}

static void release(Buf *bufs, int n) {
    for (int i = 0; i < n; i++)
        if (bufs[i].held) PyBuffer_Release(&bufs[i].b);
}

#define N_BUFS 15

static PyObject *walk(PyObject *self, PyObject *args) {
    PyObject *objs[N_BUFS];
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3],
                          &objs[4], &objs[5], &objs[6], &objs[7], &objs[8], &objs[9], &objs[10],
                          &objs[11], &objs[12], &objs[13], &objs[14]))
        return NULL;
    static const char *names[N_BUFS] = {
        "table", "filled", "finishes", "first_child", "end_child", "byte", "row_lo", "row_hi",
        "end_count", "maxlen", "depth", "chain", "outside", "pending_in", "out"};
    static const Py_ssize_t sizes[N_BUFS] = {4, 1, 1, 4, 4, 1, 4, 4, 4, 4, 4, 8, 8, 8, 1};
    Buf bufs[N_BUFS];
    memset(bufs, 0, sizeof(bufs));
    for (int i = 0; i < N_BUFS; i++) {
        if (get_buf(objs[i], &bufs[i], i == 14, sizes[i], names[i]) < 0) {
            release(bufs, N_BUFS);
            return NULL;
        }
    }
    const int32_t *table = bufs[0].b.buf;
    const uint8_t *filled = bufs[1].b.buf;
    const uint8_t *finishes = bufs[2].b.buf;
    const int32_t *first_child = bufs[3].b.buf;
    const int32_t *end_child = bufs[4].b.buf;
    const uint8_t *byte = bufs[5].b.buf;
    const int32_t *row_lo = bufs[6].b.buf;
    const int32_t *row_hi = bufs[7].b.buf;
    const int32_t *end_count = bufs[8].b.buf;
    const int32_t *maxlen = bufs[9].b.buf;
    const int32_t *depth_of = bufs[10].b.buf;
    const int64_t *chain = bufs[11].b.buf;
    const int64_t *outside = bufs[12].b.buf;
    const int64_t *pending_in = bufs[13].b.buf;
    uint8_t *out = bufs[14].b.buf; /* per token row: 1 allowed, 2 needs the context */
    Py_ssize_t n_states = bufs[1].b.len;
    Py_ssize_t n_nodes = bufs[3].b.len / 4;
    Py_ssize_t n_rows = bufs[14].b.len;
    Py_ssize_t chain_len = bufs[11].b.len / 8;
    int use_slice = chain_len > 0 && bufs[12].b.len / 8 == n_rows + 1;
    Py_ssize_t n_in = bufs[13].b.len / 8 / 3;

    /* Every node is on the stack at most once and pending at most once. */
    int64_t *stack = malloc(sizeof(int64_t) * 3 * (size_t)(n_nodes + n_in + 1));
    int64_t *pending = malloc(sizeof(int64_t) * 3 * (size_t)(n_nodes + 1));
    if (!stack || !pending) {
        free(stack);
        free(pending);
        release(bufs, N_BUFS);
        return PyErr_NoMemory();
    }
    Py_ssize_t top = 0, n_pending = 0;
    for (Py_ssize_t i = 0; i < n_in; i++) {
        stack[3 * top] = pending_in[3 * i];
        stack[3 * top + 1] = pending_in[3 * i + 1];
        stack[3 * top + 2] = pending_in[3 * i + 2];
        top++;
    }
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    while (top > 0) {
        top--;
        int64_t g = stack[3 * top], s = stack[3 * top + 1], flag = stack[3 * top + 2];
        if (g < 0 || g >= n_nodes || s < 0 || s >= n_states) { bad = 1; break; }
        if (!filled[s]) {
            pending[3 * n_pending] = g;
            pending[3 * n_pending + 1] = s;
            pending[3 * n_pending + 2] = flag;
            n_pending++;
            continue;
        }
        int32_t d = depth_of[g];
        if (d > 0 && finishes[s]) flag = 1;
        const int32_t *row = table + 256 * s;
        for (int32_t c = first_child[g]; c < end_child[g]; c++) {
            int32_t ns = row[byte[c]];
            if (ns < 0) {
                if (flag)
                    for (int32_t r = row_lo[c]; r < row_hi[c]; r++) out[r] = 2;
                continue;
            }
            for (int32_t r = row_lo[c]; r < row_lo[c] + end_count[c]; r++) out[r] = 1;
            if (use_slice && d + 1 < chain_len && ns == chain[d + 1] &&
                outside[row_hi[c]] == outside[row_lo[c]] && maxlen[c] < chain_len) {
                for (int32_t r = row_lo[c]; r < row_hi[c]; r++) out[r] = 1;
                continue;
            }
            if (first_child[c] < end_child[c]) {
                stack[3 * top] = c;
                stack[3 * top + 1] = ns;
                stack[3 * top + 2] = flag;
                top++;
            }
        }
    }
    Py_END_ALLOW_THREADS
    free(stack);
    release(bufs, N_BUFS);
    if (bad) {
        free(pending);
        PyErr_SetString(PyExc_IndexError, "trie walk: node or state id out of range");
        return NULL;
    }
    PyObject *result = PyBytes_FromStringAndSize((const char *)pending,
                                                 (Py_ssize_t)(sizeof(int64_t) * 3 * n_pending));
    free(pending);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS,
     "walk(table, filled, finishes, first_child, end_child, byte, row_lo, row_hi, end_count, "
     "maxlen, depth, chain, outside, pending_in, out) -> bytes of int64 (node, state, flag) "
     "triples that stopped at unfilled rows"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_trie_walk",
                                    "Depth-first token-trie walk for cold masks.", -1, methods};

PyMODINIT_FUNC PyInit__trie_walk(void) { return PyModule_Create(&module); }
