/* The NFA builder's inner loops in C (nfa._Builder, whose Python code is the fallback and
 * the reference: both build the same NFA, state for state, which tests compare).
 *
 *   build(builder, limits, expr, start, end, path): the builder's _build for literals,
 *     byte and character sets, sequences, choices, repetitions built as copies or byte chains
 *     and a rule's first and further uses when inlined, recursing in C; the rest (lazily
 *     copied repetitions, rule calls, a rule too large to inline, separated lists) goes
 *     back to builder._build_py. A schema's NFA has hundreds of such nodes, each
 *     a few Python calls and a new state or two.
 *   literal_trie: the byte trie of an enum's literals.
 *   compact: the subset construction of a lazily repeated item.
 *   follow_sets: what can follow each call rule (engine.follow), for a grammar's first mask.
 *
 * The NFA is the builder's three Python lists (eps, byte_edges, call_edges: one container a
 * state, edges relative to their source), appended to in place.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>

#include "_seq_items.h"
#include "_nfa_paste.h"

/* A growable stack of state numbers (a trie path). */
typedef struct {
    Py_ssize_t *v;
    Py_ssize_t n, cap;
} Path;

static int path_push(Path *p, Py_ssize_t x) {
    if (p->n == p->cap) {
        Py_ssize_t cap = p->cap ? p->cap * 2 : 32;
        Py_ssize_t *more = realloc(p->v, sizeof(Py_ssize_t) * (size_t)cap);
        if (!more) {
            PyErr_NoMemory();
            return -1;
        }
        p->v = more;
        p->cap = cap;
    }
    p->v[p->n++] = x;
    return 0;
}

/* The byte edge (lo, hi, offset), with lo and hi as given (new reference). Built by hand:
 * Py_BuildValue's format parsing was a tenth of a schema's NFA build. */
static PyObject *edge_of(PyObject *lo, PyObject *hi, Py_ssize_t offset) {
    PyObject *off = PyLong_FromSsize_t(offset);
    if (!off) return NULL;
    PyObject *edge = PyTuple_New(3);
    if (!edge) {
        Py_DECREF(off);
        return NULL;
    }
    Py_INCREF(lo);
    Py_INCREF(hi);
    PyTuple_SET_ITEM(edge, 0, lo);
    PyTuple_SET_ITEM(edge, 1, hi);
    PyTuple_SET_ITEM(edge, 2, off);
    return edge;
}

/* The pair (a, b) from C numbers (new reference), by hand as edge_of. */
static PyObject *pair_ll(long a, long b) {
    PyObject *x = PyLong_FromLong(a), *y = x ? PyLong_FromLong(b) : NULL;
    PyObject *pair = y ? PyTuple_New(2) : NULL;
    if (!pair) {
        Py_XDECREF(x);
        Py_XDECREF(y);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, x);
    PyTuple_SET_ITEM(pair, 1, y);
    return pair;
}

/* The byte edge (lo, hi, offset) from C numbers (new reference). */
static PyObject *edge_ll(long lo, long hi, Py_ssize_t offset) {
    PyObject *a = PyLong_FromLong(lo), *b = a ? PyLong_FromLong(hi) : NULL;
    PyObject *edge = b ? edge_of(a, b, offset) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return edge;
}

/* The two items of a pair (borrowed): a tuple read in place, anything else through
 * PyArg_ParseTuple (which names what is wrong). 0, or -1 with an exception set. */
static int pair_items(PyObject *pair, PyObject **a, PyObject **b) {
    if (PyTuple_CheckExact(pair) && PyTuple_GET_SIZE(pair) == 2) {
        *a = PyTuple_GET_ITEM(pair, 0);
        *b = PyTuple_GET_ITEM(pair, 1);
        return 0;
    }
    return PyArg_ParseTuple(pair, "OO", a, b) ? 0 : -1;
}

/* Set once by setup(): the IR classes, the shared edge containers, the size error. */
static struct {
    PyObject *literal, *byte_set, *char_set, *seq, *choice, *repeat, *ref;
    PyObject *step_one; /* list: step_one[b] == ((b, b, 1),) */
    PyObject *no_edges; /* () */
    PyObject *too_large; /* callable returning the exception for an NFA past its bound */
} ir;

static PyObject *s_items, *s_data, *s_ranges, *s_item, *s_min, *s_max, *s_build_py,
    *s_may_die, *s_nfa, *s_eps, *s_byte_edges, *s_call_edges, *s_name, *s_inlined,
    *s_call_rules, *s_copy_range, *s_build_lazy_repeat, *s_negated,
    *s_inline_size, *s_lazy_exits, *s_first, *s_utf8_ids, *s_stubs, *s_lazy_copies,
    *s_stub_block, *s_size, *s_exit_offset, *s_size_memo, *s_rules, *s_lazy_copy_type;

/* The IR classes' fields as slots: (class, interned name, offset of the slot in the object),
 * found by setup() from the classes' member descriptors (a dataclass with slots and a C type
 * both have them). node_attr reads a slot in place, where PyObject_GetAttr went through the
 * type's attribute lookup and the descriptor: a few percent of a schema's NFA build. */
#define MAX_FIELDS 16
static struct {
    PyObject *type, *name;
    Py_ssize_t offset;
} fields[MAX_FIELDS];
static int n_fields;

static void find_field(PyObject *type, PyObject *name) {
    if (n_fields >= MAX_FIELDS) return;
    PyObject *descr = PyDict_GetItemWithError(((PyTypeObject *)type)->tp_dict, name);
    if (!descr || Py_TYPE(descr) != &PyMemberDescr_Type) {
        PyErr_Clear();
        return;
    }
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != T_OBJECT_EX && member->type != T_OBJECT) return;
    fields[n_fields].type = type;
    fields[n_fields].name = name;
    fields[n_fields].offset = member->offset;
    n_fields++;
}

/* e.name (new reference): in place when the class's slot is known, else the lookup. */
static PyObject *node_attr(PyObject *e, PyObject *name) {
    PyObject *type = (PyObject *)Py_TYPE(e);
    for (int i = 0; i < n_fields; i++) {
        if (fields[i].type == type && fields[i].name == name) {
            PyObject *value = *(PyObject **)((char *)e + fields[i].offset);
            if (!value) break; /* unset: let the lookup raise */
            Py_INCREF(value);
            return value;
        }
    }
    return PyObject_GetAttr(e, name);
}

/* compact(eps, byte_edges, first, stop, exit): the subset construction of the byte-only NFA
 * fragment [first, stop) (a lazily repeated item, see nfa._Builder._compact_fragment), when
 * its DFA has fewer states than the fragment; None otherwise, or when an edge leaves the
 * fragment. Returns (rows, exits): rows[k] lists DFA state k's edges as (lo, hi, target - k),
 * exits[k] whether state k holds `exit`. States are numbered in the order the Python version
 * meets them (breadth first, targets by ascending byte), so both build the same NFA. At most
 * 256 fragment states: a state set is four 64-bit words. */
#define COMPACT_WORDS 4
typedef struct {
    uint64_t w[COMPACT_WORDS];
} FragSet;

/* Sets are compared and merged over their first `nw` words only: a fragment of n states
 * uses ceil(n / 64) of them (one for a JSON string character), the rest stay zero. */
static int fragset_empty(const FragSet *s, int nw) {
    uint64_t any = 0;
    for (int w = 0; w < nw; w++) any |= s->w[w];
    return !any;
}

static int fragset_eq(const FragSet *a, const FragSet *b, int nw) {
    for (int w = 0; w < nw; w++)
        if (a->w[w] != b->w[w]) return 0;
    return 1;
}

/* The fragment's epsilon closures; 0, or 1 when an edge leaves the fragment, -1 on error. */
static int fragment_closures(PyObject *eps, Py_ssize_t first, Py_ssize_t n, FragSet *clo) {
    int32_t stack[64 * COMPACT_WORDS];
    for (Py_ssize_t x = 0; x < n; x++) {
        FragSet *seen = &clo[x];
        memset(seen, 0, sizeof(*seen));
        seen->w[x >> 6] |= (uint64_t)1 << (x & 63);
        Py_ssize_t top = 0;
        stack[top++] = (int32_t)x;
        while (top) {
            int32_t y = stack[--top];
            PyObject **items;
            Py_ssize_t k;
            if (items_of(PyList_GET_ITEM(eps, first + y), &items, &k, "eps") < 0) return -1;
            for (Py_ssize_t j = 0; j < k; j++) {
                long d = PyLong_AsLong(items[j]);
                if (d == -1 && PyErr_Occurred()) return -1;
                long z = y + d;
                if (z < 0 || z >= n) return 1;
                if (seen->w[z >> 6] & ((uint64_t)1 << (z & 63))) continue;
                seen->w[z >> 6] |= (uint64_t)1 << (z & 63);
                stack[top++] = (int32_t)z;
            }
        }
    }
    return 0;
}

/* The fragment's byte edges read once into C (they are met again for every DFA state),
 * with the bytes cut into classes: maximal runs no edge boundary splits, so that every
 * byte of a class moves alike and a DFA state's moves are computed per class, not per byte
 * (a JSON string character: ~20 classes for 256 bytes). Edge k of NFA state x is
 * start[x] <= k < start[x + 1]; its classes are lo_cls[k]..hi_cls[k], its target `to[k]`
 * (-1: it leaves the fragment). */
typedef struct {
    Py_ssize_t *start;
    int16_t *lo_cls, *hi_cls;
    int32_t *to;
    int16_t cls_lo[257]; /* first byte of each class; cls_lo[n_cls] = 256 */
    int n_cls;
} FragEdges;

static void frag_edges_free(FragEdges *f) {
    free(f->start);
    free(f->lo_cls);
    free(f->hi_cls);
    free(f->to);
}

static int frag_edges_read(PyObject *byte_edges, Py_ssize_t first, Py_ssize_t n,
                           FragEdges *f) {
    Py_ssize_t total = 0, cap = 0;
    long *lo = NULL, *hi = NULL;
    f->start = malloc(sizeof(Py_ssize_t) * (size_t)(n + 1));
    if (!f->start) goto nomem;
    unsigned char cut[257] = {0}; /* cut[b]: a class begins at byte b */
    cut[0] = cut[256] = 1;
    for (Py_ssize_t x = 0; x < n; x++) {
        f->start[x] = total;
        PyObject **edges;
        Py_ssize_t k;
        if (items_of(PyList_GET_ITEM(byte_edges, first + x), &edges, &k, "byte edges") < 0)
            goto fail;
        if (total + k > cap) {
            cap = 2 * (total + k) + 16;
            long *nlo = realloc(lo, sizeof(long) * (size_t)cap);
            if (nlo) lo = nlo;
            long *nhi = nlo ? realloc(hi, sizeof(long) * (size_t)cap) : NULL;
            if (nhi) hi = nhi;
            int32_t *nto = nhi ? realloc(f->to, sizeof(int32_t) * (size_t)cap) : NULL;
            if (!nto) goto nomem;
            f->to = nto;
        }
        for (Py_ssize_t j = 0; j < k; j++) {
            PyObject *e = edges[j];
            if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 3) {
                PyErr_SetString(PyExc_TypeError, "compact: byte edges are (lo, hi, offset)");
                goto fail;
            }
            long a = PyLong_AsLong(PyTuple_GET_ITEM(e, 0));
            long b = PyLong_AsLong(PyTuple_GET_ITEM(e, 1));
            long d = PyLong_AsLong(PyTuple_GET_ITEM(e, 2));
            if (PyErr_Occurred()) goto fail;
            long y = x + d;
            if (a < 0) a = 0;
            if (b > 255) b = 255;
            lo[total] = a;
            hi[total] = b;
            f->to[total] = (y < 0 || y >= n) ? -1 : (int32_t)y;
            if (a <= b) {
                cut[a] = 1;
                cut[b + 1] = 1;
            }
            total++;
        }
    }
    f->start[n] = total;
    int16_t cls_of[256];
    f->n_cls = 0;
    for (int b = 0; b < 256; b++) {
        if (cut[b]) f->cls_lo[f->n_cls++] = (int16_t)b;
        cls_of[b] = (int16_t)(f->n_cls - 1);
    }
    f->cls_lo[f->n_cls] = 256;
    f->lo_cls = malloc(sizeof(int16_t) * (size_t)(total + 1));
    f->hi_cls = malloc(sizeof(int16_t) * (size_t)(total + 1));
    if (!f->lo_cls || !f->hi_cls) goto nomem;
    for (Py_ssize_t k = 0; k < total; k++) {
        if (lo[k] > hi[k]) { /* an empty range moves nothing */
            f->lo_cls[k] = 1;
            f->hi_cls[k] = 0;
        } else {
            f->lo_cls[k] = cls_of[lo[k]];
            f->hi_cls[k] = cls_of[hi[k]];
        }
    }
    free(lo);
    free(hi);
    return 0;
nomem:
    PyErr_NoMemory();
fail:
    free(lo);
    free(hi);
    return -1;
}

/* The moves of DFA state `set` per byte class: moves[c] = union of the closures the bytes
 * of class c reach. 0, 1 when an edge leaves the fragment. */
static int fragment_moves(const FragEdges *f, Py_ssize_t n, int nw, const FragSet *clo,
                          const FragSet *set, FragSet *moves) {
    memset(moves, 0, sizeof(FragSet) * (size_t)f->n_cls);
    for (Py_ssize_t x = 0; x < n; x++) {
        if (!(set->w[x >> 6] & ((uint64_t)1 << (x & 63)))) continue;
        for (Py_ssize_t k = f->start[x]; k < f->start[x + 1]; k++) {
            if (f->to[k] < 0) return 1;
            const FragSet *to = &clo[f->to[k]];
            for (int c = f->lo_cls[k]; c <= f->hi_cls[k]; c++)
                for (int w = 0; w < nw; w++) moves[c].w[w] |= to->w[w];
        }
    }
    return 0;
}

/* The DFA state `set` is, interned among `*count` (appended when new); -1 when the DFA
 * would reach `cap` states. */
static Py_ssize_t fragment_intern(FragSet *states, Py_ssize_t *count, Py_ssize_t cap,
                                  int nw, const FragSet *set) {
    for (Py_ssize_t i = 0; i < *count; i++)
        if (fragset_eq(&states[i], set, nw)) return i;
    if (*count + 1 >= cap) return -1;
    states[*count] = *set;
    return (*count)++;
}

static PyObject *list_of_offset(Py_ssize_t offset);
static int raise_too_large(void);

/* Rows by class give the same edges as rows by byte: bytes of a class move alike, so a
 * maximal run of classes with equal moves is a maximal run of bytes with equal moves.
 * Returns the rows (a new list: row k lists DFA state k's edges as (lo, hi, target - k)),
 * with *count their number and exits[k] whether state k holds the exit; Py_None (new
 * reference) when the DFA is not smaller or an edge leaves the fragment; NULL on error. */
static PyObject *compact_rows(const FragEdges *f, Py_ssize_t n, int nw, Py_ssize_t exit_at,
                              const FragSet *clo, FragSet *states, FragSet *moves,
                              char *exits, Py_ssize_t *count_out) {
    PyObject *rows = PyList_New(0);
    if (!rows) return NULL;
    Py_ssize_t count = 1;
    states[0] = clo[0];
    for (Py_ssize_t i = 0; i < count; i++) {
        if (fragment_moves(f, n, nw, clo, &states[i], moves) > 0) goto not_smaller;
        PyObject *row = PyList_New(0);
        if (!row) goto fail;
        for (int c = 0; c < f->n_cls;) {
            if (fragset_empty(&moves[c], nw)) {
                c++;
                continue;
            }
            int e = c;
            while (e + 1 < f->n_cls && fragset_eq(&moves[e + 1], &moves[c], nw)) e++;
            Py_ssize_t t = fragment_intern(states, &count, n, nw, &moves[c]);
            if (t < 0) {
                Py_DECREF(row);
                goto not_smaller;
            }
            PyObject *edge = edge_ll(f->cls_lo[c], f->cls_lo[e + 1] - 1, t - i);
            if (!edge || PyList_Append(row, edge) < 0) {
                Py_XDECREF(edge);
                Py_DECREF(row);
                goto fail;
            }
            Py_DECREF(edge);
            c = e + 1;
        }
        int bad = PyList_Append(rows, row);
        Py_DECREF(row);
        if (bad < 0) goto fail;
        exits[i] = (states[i].w[exit_at >> 6] >> (exit_at & 63)) & 1;
    }
    *count_out = count;
    return rows;
not_smaller:
    Py_DECREF(rows);
    Py_RETURN_NONE;
fail:
    Py_DECREF(rows);
    return NULL;
}

/* Replace the NFA's states [first, len) by the rows of their DFA: the rows keep `first`,
 * a state holding the old exit gets an epsilon edge to a new exit, the last state. */
static int splice_rows(PyObject *eps, PyObject *byte_edges, PyObject *call_edges,
                       Py_ssize_t first, Py_ssize_t stop, PyObject *rows, const char *exits,
                       Py_ssize_t n) {
    PyObject *eps_rows = PyList_New(n + 1), *call_rows = PyList_New(n + 1);
    int bad = !eps_rows || !call_rows;
    for (Py_ssize_t k = 0; !bad && k <= n; k++) {
        PyObject *to_exit = (k < n && exits[k]) ? list_of_offset(n - k)
                                                : Py_NewRef(empty_edges());
        PyObject *no_calls = Py_NewRef(empty_edges());
        if (!to_exit || !no_calls) {
            Py_XDECREF(to_exit);
            Py_XDECREF(no_calls);
            bad = 1;
            break;
        }
        PyList_SET_ITEM(eps_rows, k, to_exit);
        PyList_SET_ITEM(call_rows, k, no_calls);
    }
    PyObject *exit_row = bad ? NULL : Py_NewRef(empty_edges());
    bad = bad || !exit_row || PyList_Append(rows, exit_row) < 0;
    Py_XDECREF(exit_row);
    bad = bad || PyList_SetSlice(eps, first, stop, eps_rows) < 0 ||
          PyList_SetSlice(byte_edges, first, stop, rows) < 0 ||
          PyList_SetSlice(call_edges, first, stop, call_rows) < 0;
    Py_XDECREF(eps_rows);
    Py_XDECREF(call_rows);
    return bad ? -1 : 0;
}

/* compact_in_place(eps, byte_edges, call_edges, first, exit, max_states) -> new exit | None:
 * the subset construction of the byte-only NFA fragment [first, len(eps)) (a lazily
 * repeated item, see nfa._Builder._compact_fragment), put in place of the fragment when
 * its DFA has fewer states; None (the NFA untouched) otherwise, or when a state of the
 * fragment calls a rule or an edge leaves it. States are numbered in the order the Python
 * version meets them (breadth first, targets by ascending byte), so both build the same
 * NFA. At most 64 * COMPACT_WORDS fragment states. */
static PyObject *compact_in_place(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *eps, *byte_edges, *call_edges;
    Py_ssize_t first, exit_, max_states;
    if (!PyArg_ParseTuple(args, "O!O!O!nnn", &PyList_Type, &eps, &PyList_Type, &byte_edges,
                          &PyList_Type, &call_edges, &first, &exit_, &max_states))
        return NULL;
    Py_ssize_t stop = PyList_GET_SIZE(eps);
    Py_ssize_t n = stop - first;
    if (first < 0 || n <= 1 || n > 64 * COMPACT_WORDS || exit_ < first || exit_ >= stop ||
        stop != PyList_GET_SIZE(byte_edges) || stop != PyList_GET_SIZE(call_edges))
        Py_RETURN_NONE;
    for (Py_ssize_t x = first; x < stop; x++) {
        PyObject *calls = PyList_GET_ITEM(call_edges, x);
        Py_ssize_t k = PyObject_Length(calls);
        if (k < 0) return NULL;
        if (k) Py_RETURN_NONE;
    }
    int nw = (int)((n + 63) / 64);
    FragSet *clo = calloc((size_t)n, sizeof(FragSet));
    FragSet *states = calloc((size_t)n, sizeof(FragSet));
    FragSet *moves = malloc(sizeof(FragSet) * 256);
    char *exits = malloc((size_t)n);
    FragEdges edges = {0};
    PyObject *out = NULL;
    if (!clo || !states || !moves || !exits) {
        PyErr_NoMemory();
    } else {
        int got = fragment_closures(eps, first, n, clo);
        PyObject *rows = NULL;
        Py_ssize_t count = 0;
        if (got == 0 && frag_edges_read(byte_edges, first, n, &edges) == 0)
            rows = compact_rows(&edges, n, nw, exit_ - first, clo, states, moves, exits,
                                &count);
        if (got > 0 || rows == Py_None) {
            Py_XDECREF(rows);
            Py_INCREF(Py_None);
            out = Py_None;
        } else if (rows) {
            if (first + count + 1 > max_states)
                raise_too_large();
            else if (splice_rows(eps, byte_edges, call_edges, first, stop, rows, exits,
                                 count) == 0)
                out = PyLong_FromSsize_t(first + count);
            Py_DECREF(rows);
        }
    }
    frag_edges_free(&edges);
    free(clo);
    free(states);
    free(moves);
    free(exits);
    return out;
}

/* Add the edge tuple (lo, hi, offset) to state x's byte edges in `byte_edges`. */
static int append_byte_edge(PyObject *byte_edges, Py_ssize_t x, long lo, long hi,
                            Py_ssize_t offset) {
    PyObject *edge = edge_ll(lo, hi, offset);
    if (!edge) return -1;
    int bad = edges_add(byte_edges, x, edge);
    Py_DECREF(edge);
    return bad;
}

/* [offset]: a state's epsilon edges (new reference). Built by hand, as edge_of. */
static PyObject *list_of_offset(Py_ssize_t offset) {
    PyObject *off = PyLong_FromSsize_t(offset), *list = off ? PyList_New(1) : NULL;
    if (!list) {
        Py_XDECREF(off);
        return NULL;
    }
    PyList_SET_ITEM(list, 0, off);
    return list;
}

/* [(c, c, 1)]: a trie node's byte edges, a list (a later literal may branch off it) holding
 * the shared edge of step_one when setup() gave it (new reference). */
static PyObject *list_of_step(unsigned char c) {
    PyObject *edge;
    if (ir.step_one) {
        edge = PyTuple_GET_ITEM(PyList_GET_ITEM(ir.step_one, c), 0);
        Py_INCREF(edge);
    } else {
        edge = edge_ll(c, c, 1);
    }
    PyObject *list = edge ? PyList_New(1) : NULL;
    if (!list) {
        Py_XDECREF(edge);
        return NULL;
    }
    PyList_SET_ITEM(list, 0, edge);
    return list;
}

/* A new NFA state with these containers (new references, stolen). */
static int append_state(PyObject *eps, PyObject *byte_edges, PyObject *call_edges,
                        PyObject *e, PyObject *b, PyObject *c) {
    int bad = !e || !b || PyList_Append(eps, e) < 0 || PyList_Append(byte_edges, b) < 0 ||
              PyList_Append(call_edges, c) < 0;
    Py_XDECREF(e);
    Py_XDECREF(b);
    Py_XDECREF(c);
    return bad ? -1 : 0;
}

/* literal_trie(eps, byte_edges, call_edges, literals, start, end, no_edges): the byte trie of
 * `literals` (bytes, sorted, distinct) from `start` to `end`, as nfa._Builder's Python
 * version builds it, node for node: in sorted order a literal shares exactly its common
 * prefix with the one before, so each adds one fresh chain of states hanging off the previous
 * literal's path and ends on its last state. Inner states share `no_edges` (an empty tuple)
 * for their epsilon and call edges. */
static PyObject *trie_into(PyObject *eps, PyObject *byte_edges, PyObject *call_edges,
                           PyObject *literals, Py_ssize_t start, Py_ssize_t end,
                           PyObject *no_edges) {
    if (start < 0 || start >= PyList_GET_SIZE(byte_edges) || start >= PyList_GET_SIZE(eps)) {
        PyErr_SetString(PyExc_ValueError, "literal_trie: start is not an NFA state");
        return NULL;
    }
    Path path = {NULL, 0, 0};
    if (path_push(&path, start) < 0) return NULL;
    const unsigned char *prev = NULL;
    Py_ssize_t prev_len = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(literals); i++) {
        PyObject *lit = PyList_GET_ITEM(literals, i);
        if (!PyBytes_Check(lit)) {
            PyErr_SetString(PyExc_TypeError, "literal_trie: literals are bytes");
            goto fail;
        }
        const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(lit);
        Py_ssize_t n = PyBytes_GET_SIZE(lit);
        if (n == 0) {
            PyObject *offset = PyLong_FromSsize_t(end - start);
            int has = offset ? PySequence_Contains(PyList_GET_ITEM(eps, start), offset) : -1;
            int bad = has < 0 || (!has && edges_add(eps, start, offset) < 0);
            Py_XDECREF(offset);
            if (bad) goto fail;
            continue;
        }
        Py_ssize_t k = 0, limit = prev_len < n ? prev_len : n;
        while (k < limit && prev[k] == data[k]) k++;
        path.n = k + 1;
        Py_ssize_t node = path.v[k], first = PyList_GET_SIZE(eps);
        if (append_byte_edge(byte_edges, node, data[k], data[k], first - node) < 0)
            goto fail;
        for (Py_ssize_t j = k; j < n; j++) {
            Py_ssize_t x = first + (j - k);
            PyObject *e, *b;
            if (j == n - 1) {
                e = list_of_offset(end - x);
                b = Py_NewRef(empty_edges());
            } else {
                Py_INCREF(no_edges);
                e = no_edges;
                b = list_of_step(data[j + 1]);
            }
            Py_INCREF(no_edges);
            if (append_state(eps, byte_edges, call_edges, e, b, no_edges) < 0 ||
                path_push(&path, x) < 0)
                goto fail;
        }
        prev = data;
        prev_len = n;
    }
    free(path.v);
    Py_RETURN_NONE;
fail:
    free(path.v);
    return NULL;
}


static PyObject *literal_trie(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *eps, *byte_edges, *call_edges, *literals, *no_edges;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "O!O!O!O!nnO!", &PyList_Type, &eps, &PyList_Type, &byte_edges,
                          &PyList_Type, &call_edges, &PyList_Type, &literals, &start, &end,
                          &PyTuple_Type, &no_edges))
        return NULL;
    return trie_into(eps, byte_edges, call_edges, literals, start, end, no_edges);
}


/* ------------------------------------------------------------------ repetition records */

/* add_edge(containers, x, edge): nfa.add_edge, the new list untracked (edges_add). */
static PyObject *add_edge_py(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "add_edge(containers: list, x, edge)");
        return NULL;
    }
    Py_ssize_t x = PyLong_AsSsize_t(args[1]);
    if (x == -1 && PyErr_Occurred()) return NULL;
    if (x < 0 || x >= PyList_GET_SIZE(args[0])) {
        PyErr_SetString(PyExc_IndexError, "add_edge: no such state");
        return NULL;
    }
    if (edges_add(args[0], x, args[2]) < 0) return NULL;
    Py_RETURN_NONE;
}

/* frozen_range(eps, byte_edges, call_edges, first, stop, exit): nfa._frozen_range, with the
 * containers untracked (frozen): pasted copies share them, and a state that gains an edge
 * later leaves its tuple to the snapshot alone, out of reach of the determiniser's untrack
 * pass over the NFA. */
static PyObject *frozen_range(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *lists[3];
    Py_ssize_t first, stop, exit_;
    if (!PyArg_ParseTuple(args, "O!O!O!nnn", &PyList_Type, &lists[0], &PyList_Type, &lists[1],
                          &PyList_Type, &lists[2], &first, &stop, &exit_))
        return NULL;
    for (int k = 0; k < 3; k++)
        if (first < 0 || stop < first || stop > PyList_GET_SIZE(lists[k])) {
            PyErr_SetString(PyExc_ValueError, "frozen_range: range out of the NFA");
            return NULL;
        }
    PyObject *out = PyList_New(stop - first);
    if (!out) return NULL;
    for (Py_ssize_t x = first; x < stop; x++) {
        PyObject *parts[3];
        for (int k = 0; k < 3; k++) {
            PyObject *shared = frozen(PyList_GET_ITEM(lists[k], x));
            if (!shared) {
                for (int j = 0; j < k; j++) Py_DECREF(parts[j]);
                Py_DECREF(out);
                return NULL;
            }
            PyList_SetItem(lists[k], x, Py_NewRef(shared)); /* frozen in place */
            if (k == 0 && x == exit_) {
                Py_DECREF(shared);
                shared = Py_NewRef(empty_edges());
            }
            parts[k] = shared;
        }
        PyObject *triple = PyTuple_Pack(3, parts[0], parts[1], parts[2]);
        for (int k = 0; k < 3; k++) Py_DECREF(parts[k]);
        if (!triple) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, x - first, triple);
    }
    return out;
}

typedef struct {
    long long cost;
    Py_ssize_t x;
} HeapItem;

static void heap_push(HeapItem *heap, Py_ssize_t *n, HeapItem item) {
    Py_ssize_t i = (*n)++;
    while (i > 0) {
        Py_ssize_t parent = (i - 1) / 2;
        if (heap[parent].cost <= item.cost) break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i] = item;
}

static HeapItem heap_pop(HeapItem *heap, Py_ssize_t *n) {
    HeapItem top = heap[0], last = heap[--(*n)];
    Py_ssize_t i = 0;
    for (;;) {
        Py_ssize_t child = 2 * i + 1;
        if (child >= *n) break;
        if (child + 1 < *n && heap[child + 1].cost < heap[child].cost) child++;
        if (heap[child].cost >= last.cost) break;
        heap[i] = heap[child];
        i = child;
    }
    if (*n > 0) heap[i] = last;
    return top;
}

/* Relax the edges in `container` (ints, or tuples whose last item is the offset) of state x. */
static int relax(PyObject *container, int tuples, Py_ssize_t x, long long cost, long long step,
                 Py_ssize_t first, Py_ssize_t n, long long *best, HeapItem *heap,
                 Py_ssize_t *size, Py_ssize_t cap) {
    PyObject **items;
    Py_ssize_t k;
    if (items_of(container, &items, &k, "edges") < 0) return -1;
    for (Py_ssize_t j = 0; j < k; j++) {
        PyObject *d_obj = items[j];
        if (tuples) {
            if (!PyTuple_Check(d_obj) || PyTuple_GET_SIZE(d_obj) < 2) {
                PyErr_SetString(PyExc_TypeError, "min_bytes: edges are tuples");
                return -1;
            }
            d_obj = PyTuple_GET_ITEM(d_obj, PyTuple_GET_SIZE(d_obj) - 1);
        }
        Py_ssize_t d = PyLong_AsSsize_t(d_obj);
        if (d == -1 && PyErr_Occurred()) return -1;
        Py_ssize_t y = x + d - first;
        if (y < 0 || y >= n || cost + step >= best[y]) continue;
        if (*size >= cap) {
            PyErr_SetString(PyExc_RuntimeError, "min_bytes: heap overflow");
            return -1;
        }
        best[y] = cost + step;
        heap_push(heap, size, (HeapItem){cost + step, y});
    }
    return 0;
}

/* min_bytes(edges, first, exit_offset, inner): LazyRepeat._item_min_bytes, the fewest bytes
 * from the first copy's first state to its exit. `edges` is the copy's (eps, byte edges,
 * call edges) snapshot, `inner` lists (state, end, cost) for the exits of inner repetitions
 * (their remaining copies). 0 when the exit is not reached. */
static PyObject *min_bytes(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *edges, *inner;
    Py_ssize_t first, exit_offset;
    if (!PyArg_ParseTuple(args, "O!nnO!", &PyList_Type, &edges, &first, &exit_offset,
                          &PyList_Type, &inner))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(edges), n_inner = PyList_GET_SIZE(inner);
    if (n == 0) return PyLong_FromLong(0);
    /* every state is pushed at most once per improvement: bound the heap by the edges */
    Py_ssize_t cap = 1 + n_inner;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyList_GET_ITEM(edges, i);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3) {
            PyErr_SetString(PyExc_TypeError, "min_bytes: edges are (eps, bytes, calls)");
            return NULL;
        }
        for (int k = 0; k < 3; k++) cap += PyObject_Length(PyTuple_GET_ITEM(t, k));
        if (PyErr_Occurred()) return NULL;
    }
    long long *best = malloc(sizeof(long long) * (size_t)n);
    HeapItem *heap = malloc(sizeof(HeapItem) * (size_t)cap);
    PyObject *out = NULL;
    if (!best || !heap) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) best[i] = LLONG_MAX;
    Py_ssize_t size = 0;
    long long answer = 0;
    best[0] = 0;
    heap_push(heap, &size, (HeapItem){0, 0});
    while (size) {
        HeapItem top = heap_pop(heap, &size);
        if (top.x == exit_offset) {
            answer = top.cost;
            break;
        }
        if (top.cost > best[top.x]) continue;
        PyObject *t = PyList_GET_ITEM(edges, top.x);
        Py_ssize_t x = first + top.x;
        if (relax(PyTuple_GET_ITEM(t, 0), 0, x, top.cost, 0, first, n, best, heap, &size, cap) ||
            relax(PyTuple_GET_ITEM(t, 1), 1, x, top.cost, 1, first, n, best, heap, &size, cap) ||
            relax(PyTuple_GET_ITEM(t, 2), 1, x, top.cost, 0, first, n, best, heap, &size, cap))
            goto done;
        for (Py_ssize_t i = 0; i < n_inner; i++) {
            Py_ssize_t at, to;
            long long more;
            if (!PyArg_ParseTuple(PyList_GET_ITEM(inner, i), "nnL", &at, &to, &more)) goto done;
            if (at != x) continue;
            Py_ssize_t y = to - first;
            if (y < 0 || y >= n || top.cost + more >= best[y]) continue;
            if (size >= cap) {
                PyErr_SetString(PyExc_RuntimeError, "min_bytes: heap overflow");
                goto done;
            }
            best[y] = top.cost + more;
            heap_push(heap, &size, (HeapItem){top.cost + more, y});
        }
    }
    out = PyLong_FromLongLong(answer);
done:
    free(best);
    free(heap);
    return out;
}



/* ------------------------------------------------------------------ UTF-8 */

#define MAX_CODEPOINT 0x10FFFF

typedef struct {
    long lo, hi;
} Span;

static int cmp_span(const void *a, const void *b) {
    const Span *x = a, *y = b;
    if (x->lo != y->lo) return (x->lo > y->lo) - (x->lo < y->lo);
    return (x->hi > y->hi) - (x->hi < y->hi);
}

/* Sort and merge overlapping or adjacent spans in place (ir.merge_ranges); the new count. */
static Py_ssize_t merge_spans(Span *v, Py_ssize_t n) {
    if (n == 0) return 0;
    qsort(v, (size_t)n, sizeof(Span), cmp_span);
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 1; i < n; i++) {
        if (v[i].lo <= v[k].hi + 1) {
            if (v[i].hi > v[k].hi) v[k].hi = v[i].hi;
        } else {
            v[++k] = v[i];
        }
    }
    return k + 1;
}

static int utf8_encode(long cp, unsigned char *out) {
    if (cp <= 0x7F) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp <= 0x7FF) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp <= 0xFFFF) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ir._split_same_length: append the byte-range paths of [lo, hi] (same UTF-8 length). */
static int split_same_length(long lo, long hi, PyObject *out) {
    if (lo <= 0x7F) {
        PyObject *step = pair_ll(lo, hi), *path = step ? PyList_New(1) : NULL;
        if (!path) {
            Py_XDECREF(step);
            return -1;
        }
        PyList_SET_ITEM(path, 0, step);
        int bad = PyList_Append(out, path) < 0;
        Py_DECREF(path);
        return bad ? -1 : 0;
    }
    int n = hi <= 0x7FF ? 2 : hi <= 0xFFFF ? 3 : 4;
    for (int i = 1; i < n; i++) {
        long mask = (1L << (6 * i)) - 1;
        if ((lo & ~mask) != (hi & ~mask)) {
            if ((lo & mask) != 0) {
                if (split_same_length(lo, lo | mask, out) < 0) return -1;
                return split_same_length((lo | mask) + 1, hi, out);
            }
            if ((hi & mask) != mask) {
                if (split_same_length(lo, (hi & ~mask) - 1, out) < 0) return -1;
                return split_same_length(hi & ~mask, hi, out);
            }
        }
    }
    unsigned char a[4], b[4];
    int k = utf8_encode(lo, a);
    utf8_encode(hi, b);
    PyObject *path = PyList_New(k);
    if (!path) return -1;
    for (int j = 0; j < k; j++) {
        PyObject *step = pair_ll(a[j], b[j]);
        if (!step) {
            Py_DECREF(path);
            return -1;
        }
        PyList_SET_ITEM(path, j, step);
    }
    int bad = PyList_Append(out, path) < 0;
    Py_DECREF(path);
    return bad ? -1 : 0;
}

/* The code points of CharSet(ranges, negated), as CharSet.codepoint_ranges gives them
 * (sorted, merged, surrogates removed): their number, with *out (to free) holding them; -1
 * on error. */
static Py_ssize_t codepoint_spans(PyObject *ranges, int negated, Span **out) {
    PyObject **items;
    Py_ssize_t n;
    *out = NULL;
    if (items_of(ranges, &items, &n, "a character set's ranges") < 0) return -1;
    /* complement and surrogate split at most double the spans, plus two */
    Span *v = malloc(sizeof(Span) * (size_t)(2 * n + 4));
    Span *w = malloc(sizeof(Span) * (size_t)(2 * n + 4));
    if (!v || !w) {
        free(v);
        free(w);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *lo, *hi;
        if (pair_items(items[i], &lo, &hi) == 0) {
            v[i].lo = PyLong_AsLong(lo);
            v[i].hi = PyLong_AsLong(hi);
        }
        if (PyErr_Occurred()) {
            free(v);
            free(w);
            return -1;
        }
    }
    Py_ssize_t m = merge_spans(v, n);
    if (negated) { /* ir.complement_ranges over [0, MAX_CODEPOINT] */
        Py_ssize_t k = 0;
        long cur = 0;
        for (Py_ssize_t i = 0; i < m; i++) {
            if (v[i].hi < cur) continue;
            if (v[i].lo > MAX_CODEPOINT) break;
            if (v[i].lo > cur) w[k++] = (Span){cur, v[i].lo - 1};
            if (v[i].hi + 1 > cur) cur = v[i].hi + 1;
        }
        if (cur <= MAX_CODEPOINT) w[k++] = (Span){cur, MAX_CODEPOINT};
        memcpy(v, w, sizeof(Span) * (size_t)k);
        m = k;
    }
    /* ir.subtract_ranges(..., surrogates): keep the parts in [0, D7FF] and [E000, 10FFFF] */
    static const Span keep[2] = {{0, 0xD7FF}, {0xE000, MAX_CODEPOINT}};
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < m; i++)
        for (int j = 0; j < 2; j++) {
            long lo = v[i].lo > keep[j].lo ? v[i].lo : keep[j].lo;
            long hi = v[i].hi < keep[j].hi ? v[i].hi : keep[j].hi;
            if (lo <= hi) w[k++] = (Span){lo, hi};
        }
    free(v);
    *out = w;
    return merge_spans(w, k);
}

/* The UTF-8 byte-range paths of a character set (new list): what
 * [seq for lo, hi in CharSet(ranges, negated).codepoint_ranges()
 *      for seq in ir.utf8_byte_sequences(lo, hi)] gives. */
static PyObject *utf8_paths_list(PyObject *ranges, int negated) {
    Span *w;
    Py_ssize_t k = codepoint_spans(ranges, negated, &w);
    if (k < 0) return NULL;
    PyObject *out;
    static const Span bounds[4] = {{0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xFFFF},
                                   {0x10000, MAX_CODEPOINT}};
    out = PyList_New(0);
    for (Py_ssize_t i = 0; out && i < k; i++)
        for (int j = 0; j < 4; j++) {
            long lo = w[i].lo > bounds[j].lo ? w[i].lo : bounds[j].lo;
            long hi = w[i].hi < bounds[j].hi ? w[i].hi : bounds[j].hi;
            if (lo <= hi && split_same_length(lo, hi, out) < 0) {
                Py_CLEAR(out);
                break;
            }
        }
    free(w);
    return out;
}

/* utf8_paths(ranges, negated) -> utf8_paths_list for Python. */
static PyObject *utf8_paths_of(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ranges;
    int negated;
    if (!PyArg_ParseTuple(args, "Op", &ranges, &negated)) return NULL;
    return utf8_paths_list(ranges, negated);
}

/* ------------------------------------------------------------------ grammar scans */

/* Append the names of the rules `e` refers to (with repeats) to `out`. */
static int collect_refs(PyObject *e, PyObject *out) {
    PyTypeObject *type = Py_TYPE(e);
    if (type == (PyTypeObject *)ir.ref) {
        PyObject *name = node_attr(e, s_name);
        int bad = !name || PyList_Append(out, name) < 0;
        Py_XDECREF(name);
        return bad ? -1 : 0;
    }
    PyObject *sub;
    if (type == (PyTypeObject *)ir.seq || type == (PyTypeObject *)ir.choice)
        sub = node_attr(e, s_items);
    else if (type == (PyTypeObject *)ir.repeat)
        sub = node_attr(e, s_item);
    else
        return 0;
    if (!sub) return -1;
    int rc = 0;
    if (Py_EnterRecursiveCall(" while scanning the grammar")) {
        rc = -1;
    } else if (type == (PyTypeObject *)ir.repeat) {
        rc = collect_refs(sub, out);
        Py_LeaveRecursiveCall();
    } else {
        PyObject **items;
        Py_ssize_t n;
        rc = items_of(sub, &items, &n, "an expression's items");
        for (Py_ssize_t i = 0; rc == 0 && i < n; i++) rc = collect_refs(items[i], out);
        Py_LeaveRecursiveCall();
    }
    Py_DECREF(sub);
    return rc;
}

/* ref_names(expr) -> the names of the rules expr refers to, each as often as it does */
static PyObject *ref_names(PyObject *self, PyObject *e) {
    (void)self;
    PyObject *out = PyList_New(0);
    if (out && collect_refs(e, out) < 0) Py_CLEAR(out);
    return out;
}

/* Whether `e` derives a string, given the rules known to (nfa._rules_productive). 1, 0 or
 * -1 on error. */
static int derives_string(PyObject *e, PyObject *productive) {
    PyTypeObject *type = Py_TYPE(e);
    if (type == (PyTypeObject *)ir.literal) return 1;
    if (type == (PyTypeObject *)ir.ref) {
        PyObject *name = node_attr(e, s_name);
        if (!name) return -1;
        int got = PySet_Contains(productive, name);
        Py_DECREF(name);
        return got;
    }
    if (type == (PyTypeObject *)ir.byte_set || type == (PyTypeObject *)ir.char_set) {
        PyObject *ranges = node_attr(e, s_ranges);
        if (!ranges) return -1;
        int got;
        if (type == (PyTypeObject *)ir.byte_set) {
            got = PyObject_IsTrue(ranges);
        } else { /* a character set matches something unless only surrogates are left */
            PyObject *negated = node_attr(e, s_negated);
            int neg = negated ? PyObject_IsTrue(negated) : -1;
            Py_XDECREF(negated);
            Span *spans = NULL;
            Py_ssize_t k = neg < 0 ? -1 : codepoint_spans(ranges, neg, &spans);
            free(spans);
            got = k < 0 ? -1 : k > 0;
        }
        Py_DECREF(ranges);
        return got;
    }
    if (type == (PyTypeObject *)ir.repeat) {
        PyObject *min = node_attr(e, s_min);
        if (!min) return -1;
        int zero = PyObject_Not(min);
        Py_DECREF(min);
        if (zero) return zero;
        PyObject *item = node_attr(e, s_item);
        if (!item) return -1;
        int got = -1;
        if (!Py_EnterRecursiveCall(" while scanning the grammar")) {
            got = derives_string(item, productive);
            Py_LeaveRecursiveCall();
        }
        Py_DECREF(item);
        return got;
    }
    int all = type == (PyTypeObject *)ir.seq;
    if (!all && type != (PyTypeObject *)ir.choice) return 0;
    PyObject *sub = node_attr(e, s_items);
    if (!sub) return -1;
    PyObject **items;
    Py_ssize_t n;
    int got = items_of(sub, &items, &n, "an expression's items");
    if (got == 0 && Py_EnterRecursiveCall(" while scanning the grammar")) got = -1;
    if (got == 0) {
        got = all; /* an empty sequence derives "", an empty choice nothing */
        for (Py_ssize_t i = 0; i < n; i++) {
            int one = derives_string(items[i], productive);
            if (one < 0 || one != all) {
                got = one;
                break;
            }
        }
        Py_LeaveRecursiveCall();
    }
    Py_DECREF(sub);
    return got;
}

/* derives(expr, productive) -> whether expr derives a string (rules: those in productive) */
static PyObject *derives(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *e, *productive;
    if (!PyArg_ParseTuple(args, "OO!", &e, &PySet_Type, &productive)) return NULL;
    int got = derives_string(e, productive);
    return got < 0 ? NULL : PyBool_FromLong(got);
}

/* Saturating: sizes are only compared with the inlining limits. */
#define SIZE_CAP ((long long)1 << 60)

static long long size_add(long long a, long long b) {
    return a > SIZE_CAP - b ? SIZE_CAP : a + b;
}

static long long size_mul(long long a, long long b) {
    return b != 0 && a > SIZE_CAP / b ? SIZE_CAP : a * b;
}

/* `path` with `name` appended (new reference). */
static PyObject *path_with(PyObject *path, PyObject *name) {
    if (!PyTuple_Check(path)) {
        PyErr_SetString(PyExc_TypeError, "nfa build: the path is a tuple");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(path);
    PyObject *out = PyTuple_New(n + 1);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyTuple_GET_ITEM(path, i);
        Py_INCREF(x);
        PyTuple_SET_ITEM(out, i, x);
    }
    Py_INCREF(name);
    PyTuple_SET_ITEM(out, n, name);
    return out;
}

static long long expr_size_of(PyObject *builder, long long lazy_min, PyObject *e,
                              PyObject *path);

/* _Builder._inline_size(name, path): memoised by name in builder._size_memo, else the size of
 * the rule's body under path + (name,). -1 with an exception. */
static long long inline_size_of(PyObject *builder, long long lazy_min, PyObject *name,
                                PyObject *path) {
    PyObject *memo = PyObject_GetAttr(builder, s_size_memo);
    if (!memo) return -1;
    long long out = -1;
    PyObject *got = PyDict_Check(memo) ? PyDict_GetItemWithError(memo, name) : NULL;
    if (got) {
        out = PyLong_AsLongLong(got);
        if (out == -1 && PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear(); /* a Python int past long long: as large as it gets */
            out = SIZE_CAP;
        }
    } else if (!PyErr_Occurred()) {
        PyObject *rules = PyDict_Check(memo) ? PyObject_GetAttr(builder, s_rules) : NULL;
        PyObject *body = rules ? PyObject_GetItem(rules, name) : NULL;
        PyObject *inner = body ? path_with(path, name) : NULL;
        if (!PyDict_Check(memo))
            PyErr_SetString(PyExc_TypeError, "nfa build: _size_memo is a dict");
        if (inner) out = expr_size_of(builder, lazy_min, body, inner);
        if (out >= 0) {
            PyObject *value = PyLong_FromLongLong(out);
            if (!value || PyDict_SetItem(memo, name, value) < 0) out = -1;
            Py_XDECREF(value);
        }
        Py_XDECREF(rules);
        Py_XDECREF(body);
        Py_XDECREF(inner);
    }
    Py_DECREF(memo);
    return out;
}

/* _Builder._expr_size; rule references go to builder._inline_size. -1 on error. */
static long long expr_size_of(PyObject *builder, long long lazy_min, PyObject *e,
                              PyObject *path) {
    PyTypeObject *type = Py_TYPE(e);
    if (type == (PyTypeObject *)ir.literal) {
        PyObject *data = node_attr(e, s_data);
        if (!data) return -1;
        Py_ssize_t n = PyObject_Length(data);
        Py_DECREF(data);
        return n < 0 ? -1 : n + 1;
    }
    if (type == (PyTypeObject *)ir.byte_set || type == (PyTypeObject *)ir.char_set) return 4;
    if (Py_EnterRecursiveCall(" while sizing the grammar")) return -1;
    long long out = -1;
    if (type == (PyTypeObject *)ir.seq || type == (PyTypeObject *)ir.choice) {
        PyObject *sub = node_attr(e, s_items);
        PyObject **items;
        Py_ssize_t n;
        if (sub && items_of(sub, &items, &n, "an expression's items") == 0) {
            out = 2;
            for (Py_ssize_t i = 0; i < n; i++) {
                long long one = expr_size_of(builder, lazy_min, items[i], path);
                if (one < 0) {
                    out = -1;
                    break;
                }
                out = size_add(out, one);
            }
        }
        Py_XDECREF(sub);
    } else if (type == (PyTypeObject *)ir.repeat) {
        PyObject *item = node_attr(e, s_item), *min_obj = NULL, *max_obj = NULL;
        if (item) min_obj = node_attr(e, s_min);
        if (min_obj) max_obj = node_attr(e, s_max);
        if (max_obj) {
            long long min = PyLong_AsLongLong(min_obj);
            long long max = max_obj == Py_None ? -1 : PyLong_AsLongLong(max_obj);
            if (!PyErr_Occurred()) {
                long long copies = max < 0 ? (min > 1 ? min : 1) : max;
                if (max >= 0 && max >= lazy_min) copies = 2; /* the first copy, and one later */
                long long one = expr_size_of(builder, lazy_min, item, path);
                if (one >= 0) out = size_add(2, size_mul(copies, one));
            }
        }
        Py_XDECREF(item);
        Py_XDECREF(min_obj);
        Py_XDECREF(max_obj);
    } else if (type == (PyTypeObject *)ir.ref) {
        PyObject *name = node_attr(e, s_name), *call_rules = NULL, *got = NULL;
        if (name) call_rules = PyObject_GetAttr(builder, s_call_rules);
        int known = call_rules ? PySet_Contains(call_rules, name) : -1;
        if (known == 0) known = PySequence_Contains(path, name);
        if (known > 0) {
            out = 2;
        } else if (known == 0) {
            out = inline_size_of(builder, lazy_min, name, path);
        }
        Py_XDECREF(name);
        Py_XDECREF(call_rules);
        Py_XDECREF(got);
    } else { /* not an IR node this knows: the Python method says what is wrong */
        PyObject *method = PyObject_GetAttrString((PyObject *)Py_TYPE(builder), "_expr_size");
        PyObject *got = method ? PyObject_CallFunctionObjArgs(method, builder, e, path, NULL)
                               : NULL;
        if (got) out = PyLong_AsLongLong(got);
        Py_XDECREF(method);
        Py_XDECREF(got);
    }
    Py_LeaveRecursiveCall();
    return out;
}

/* expr_size(builder, lazy_repeat_min, expr, path) */
static PyObject *expr_size(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *builder, *e, *path;
    long long lazy_min;
    if (!PyArg_ParseTuple(args, "OLOO", &builder, &lazy_min, &e, &path)) return NULL;
    long long got = expr_size_of(builder, lazy_min, e, path);
    return got < 0 ? NULL : PyLong_FromLongLong(got);
}

/* ------------------------------------------------------------------ build */

typedef struct {
    PyObject *builder, *path, *eps, *bytes, *calls;
    PyObject *utf8_ids; /* builder._utf8_ids: id(char set) -> (char set, its UTF-8 paths) */
    Py_ssize_t max_states, byte_chain_max, lazy_repeat_min; /* nfa.py's limits */
    Py_ssize_t inline_limit, lazy_copy_min; /* INLINE_LIMIT, LAZY_COPY_MIN */
    PyObject *lazy_exits; /* nfa.lazy_exits: while empty, copies are pasted here */
    PyObject *stubs, *lazy_copies; /* nfa.stubs, nfa.lazy_copies (see nfa.LazyCopy) */
    int stub_block; /* builder._stub_block: inside a lazily repeated item, no stubs */
} Build;

static int raise_too_large(void) {
    PyObject *exc = PyObject_CallNoArgs(ir.too_large);
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return -1;
}

static Py_ssize_t build_new_state(Build *b) {
    Py_ssize_t x = PyList_GET_SIZE(b->eps);
    if (x >= b->max_states) return raise_too_large();
    /* No edges yet: the shared empty tuple (nfa.NFA.new_state; add_edge gives the state a
     * list of its own on its first edge). */
    PyObject *none = empty_edges();
    if (PyList_Append(b->eps, none) < 0 || PyList_Append(b->bytes, none) < 0 ||
        PyList_Append(b->calls, none) < 0)
        return -1;
    return x;
}

/* Append `item` (new reference, stolen) to the edges of state x in `lists`. */
static int add_edge(PyObject *lists, Py_ssize_t x, PyObject *item) {
    if (!item) return -1;
    int bad = edges_add(lists, x, item);
    Py_DECREF(item);
    return bad;
}

static int add_eps(Build *b, Py_ssize_t x, Py_ssize_t to) {
    return add_edge(b->eps, x, PyLong_FromSsize_t(to - x));
}

static int set_may_die(Build *b) {
    return PyObject_SetAttr(b->builder, s_may_die, Py_True);
}

static int build_node(Build *b, PyObject *e, Py_ssize_t start, Py_ssize_t end);

/* _Builder._build_literal */
static int build_literal(Build *b, PyObject *e, Py_ssize_t start, Py_ssize_t end) {
    PyObject *data = node_attr(e, s_data);
    if (!data) return -1;
    int rc = -1;
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "nfa build: a literal's data is bytes");
        goto done;
    }
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    if (n <= 1) {
        rc = n ? add_edge(b->bytes, start, edge_ll(d[0], d[0], end - start))
               : add_eps(b, start, end);
        goto done;
    }
    Py_ssize_t first = PyList_GET_SIZE(b->eps);
    if (first + n > b->max_states) {
        raise_too_large();
        goto done;
    }
    Py_ssize_t last = first + n - 2;
    if (add_edge(b->bytes, start, edge_ll(d[0], d[0], first - start)) < 0)
        goto done;
    for (Py_ssize_t i = 1; i < n; i++) {
        PyObject *step;
        if (i < n - 1) {
            step = PyList_GET_ITEM(ir.step_one, d[i]);
            Py_INCREF(step);
        } else {
            PyObject *edge = edge_ll(d[i], d[i], end - last);
            step = edge ? PyList_New(1) : NULL;
            if (!step) {
                Py_XDECREF(edge);
                goto done;
            }
            PyList_SET_ITEM(step, 0, edge);
        }
        int bad = PyList_Append(b->eps, ir.no_edges) < 0 ||
                  PyList_Append(b->calls, ir.no_edges) < 0 || PyList_Append(b->bytes, step) < 0;
        Py_DECREF(step);
        if (bad) goto done;
    }
    rc = 0;
done:
    Py_DECREF(data);
    return rc;
}

/* The ByteSet branch of _Builder._build */
static int build_byte_set(Build *b, PyObject *e, Py_ssize_t start, Py_ssize_t end) {
    PyObject *ranges = node_attr(e, s_ranges);
    if (!ranges) return -1;
    PyObject **items;
    Py_ssize_t n;
    int rc = items_of(ranges, &items, &n, "a byte set's ranges");
    if (rc == 0 && n == 0) rc = set_may_die(b);
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        PyObject *lo, *hi;
        if (pair_items(items[i], &lo, &hi) < 0) {
            rc = -1;
            break;
        }
        rc = add_edge(b->bytes, start, edge_of(lo, hi, end - start));
    }
    Py_DECREF(ranges);
    return rc;
}

/* nfa._separated_loop: 1 when items[at] is ``(S X)*`` (min 0, no max, a Seq item) with X
 * the k items right before it, longest X first (the shape of every JSON list), with *at_out,
 * *k_out and *body_out (a new reference to the repeated Seq's items) set; 0 otherwise;
 * -1 with an exception. */
static int separated_loop(PyObject **items, Py_ssize_t n, Py_ssize_t *at_out,
                          Py_ssize_t *k_out, PyObject **body_out) {
    int found = 0;
    for (Py_ssize_t at = 1; at < n && !found; at++) {
        if (Py_TYPE(items[at]) != (PyTypeObject *)ir.repeat) continue;
        PyObject *item = node_attr(items[at], s_item), *min_obj = NULL, *max_obj = NULL;
        PyObject *body_obj = NULL;
        int rc = -1;
        if (!item) return -1;
        if (Py_TYPE(item) != (PyTypeObject *)ir.seq) {
            rc = 0;
            goto next;
        }
        min_obj = node_attr(items[at], s_min);
        max_obj = min_obj ? node_attr(items[at], s_max) : NULL;
        if (!max_obj) goto next;
        PyObject *zero_int = PyLong_FromLong(0);
        int zero = zero_int ? PyObject_RichCompareBool(min_obj, zero_int, Py_EQ) : -1;
        Py_XDECREF(zero_int);
        if (zero < 0) goto next;
        if (!zero || max_obj != Py_None) {
            rc = 0;
            goto next;
        }
        body_obj = node_attr(item, s_items);
        PyObject **body;
        Py_ssize_t m;
        if (!body_obj || items_of(body_obj, &body, &m, "a repeated sequence's items") < 0)
            goto next;
        rc = 0;
        for (Py_ssize_t k = (at < m - 1 ? at : m - 1); k > 0 && !found; k--) {
            int same = 1;
            for (Py_ssize_t j = 0; j < k && same; j++) {
                same = PyObject_RichCompareBool(body[m - k + j], items[at - k + j], Py_EQ);
                if (same < 0) {
                    rc = -1;
                    goto next;
                }
            }
            if (same) {
                found = 1;
                *at_out = at;
                *k_out = k;
                *body_out = Py_NewRef(body_obj);
            }
        }
    next:
        Py_DECREF(item);
        Py_XDECREF(min_obj);
        Py_XDECREF(max_obj);
        Py_XDECREF(body_obj);
        if (rc < 0) return -1;
    }
    return found;
}

/* _Builder._build_separated: ``items`` whose items[at] is ``(S X)*`` and X the k items before
 * it (separated_loop), as one copy of X with S (``body``'s first m - k items) leading back to
 * its start: a JSON list's first element and the later ones share their states. */
static int build_chain(Build *b, PyObject **items, Py_ssize_t n, Py_ssize_t start,
                       Py_ssize_t end);

static int build_separated(Build *b, PyObject **items, Py_ssize_t n, Py_ssize_t at,
                           Py_ssize_t k, PyObject **body, Py_ssize_t m, Py_ssize_t start,
                           Py_ssize_t end) {
    Py_ssize_t head = build_new_state(b);
    if (head < 0 || build_chain(b, items, at - k, start, head) < 0) return -1;
    Py_ssize_t x_start = build_new_state(b);
    Py_ssize_t x_end = x_start < 0 ? -1 : build_new_state(b);
    if (x_end < 0 || add_eps(b, head, x_start) < 0) return -1;
    if (build_chain(b, items + at - k, k, x_start, x_end) < 0 ||
        build_chain(b, body, m - k, x_end, x_start) < 0)
        return -1;
    return build_chain(b, items + at + 1, n - at - 1, x_end, end);
}

/* _Builder._build_chain */
static int build_chain(Build *b, PyObject **items, Py_ssize_t n, Py_ssize_t start,
                       Py_ssize_t end) {
    if (n == 0) return add_eps(b, start, end);
    Py_ssize_t cur = start;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t next = i == n - 1 ? end : build_new_state(b);
        if (next < 0 || build_node(b, items[i], cur, next) < 0) return -1;
        cur = next;
    }
    return 0;
}

static int build_trie(Build *b, PyObject *literals, Py_ssize_t start, Py_ssize_t end);

/* The Choice branch of _Builder._build */
static int build_choice(Build *b, PyObject **items, Py_ssize_t n, Py_ssize_t start,
                        Py_ssize_t end) {
    if (n == 0 && set_may_die(b) < 0) return -1;
    Py_ssize_t literals = 0;
    for (Py_ssize_t i = 0; i < n; i++) literals += Py_TYPE(items[i]) == (PyTypeObject *)ir.literal;
    if (literals > 1) {
        PyObject *set = PySet_New(NULL);
        if (!set) return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (Py_TYPE(items[i]) != (PyTypeObject *)ir.literal) continue;
            PyObject *data = node_attr(items[i], s_data);
            int bad = !data || PySet_Add(set, data) < 0;
            Py_XDECREF(data);
            if (bad) {
                Py_DECREF(set);
                return -1;
            }
        }
        PyObject *sorted = PySequence_List(set);
        Py_DECREF(set);
        int bad = !sorted || PyList_Sort(sorted) < 0 || build_trie(b, sorted, start, end) < 0;
        Py_XDECREF(sorted);
        if (bad) return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (literals > 1 && Py_TYPE(items[i]) == (PyTypeObject *)ir.literal) continue;
        Py_ssize_t s = build_new_state(b);
        if (s < 0 || add_eps(b, start, s) < 0 || build_node(b, items[i], s, end) < 0) return -1;
    }
    return 0;
}

static Py_ssize_t copy_range(Build *b, PyObject *first, PyObject *stop, PyObject *old_exit,
                             Py_ssize_t entry);

/* Register state `stub` as standing for a lazy copy of `record` going on to `end`
 * (nfa.stubs gets it, nfa.lazy_copies what it stands for). */
static int register_stub(Build *b, Py_ssize_t stub, PyObject *record, Py_ssize_t end) {
    PyObject *key = PyLong_FromSsize_t(stub);
    PyObject *to = key ? PyLong_FromSsize_t(end) : NULL;
    PyObject *value = to ? PyTuple_Pack(2, record, to) : NULL;
    int bad = !value || PyList_Append(b->stubs, key) < 0 ||
              PyDict_SetItem(b->lazy_copies, key, value) < 0;
    Py_XDECREF(key);
    Py_XDECREF(to);
    Py_XDECREF(value);
    return bad ? -1 : 0;
}

/* _Builder._add_stub: a stub state after `start`, standing for a lazy copy of `record`
 * going on to `end`. */
static int add_stub(Build *b, Py_ssize_t start, PyObject *record, Py_ssize_t end) {
    Py_ssize_t stub = build_new_state(b);
    if (stub < 0 || add_eps(b, start, stub) < 0) return -1;
    return register_stub(b, stub, record, end);
}

static Py_ssize_t copy_range(Build *b, PyObject *first, PyObject *stop, PyObject *old_exit,
                             Py_ssize_t entry);

/* Inside a lazily repeated item (pasted later from a snapshot, which keeps no stubs), a
 * copied stub leads to a copy of its fragment pasted now. */
static int expand_stub(Build *b, Py_ssize_t stub, PyObject *record, Py_ssize_t end) {
    PyObject *first = PyObject_GetAttr(record, s_first);
    PyObject *size = first ? PyObject_GetAttr(record, s_size) : NULL;
    PyObject *offset = size ? PyObject_GetAttr(record, s_exit_offset) : NULL;
    PyObject *stop = NULL, *old_exit = NULL;
    int rc = -1;
    if (!offset) goto done;
    stop = PyNumber_Add(first, size);
    old_exit = stop ? PyNumber_Add(first, offset) : NULL;
    if (!old_exit) goto done;
    Py_ssize_t entry = build_new_state(b);
    if (entry < 0) goto done;
    PyObject *to_entry = PyList_New(1);
    PyObject *step = to_entry ? PyLong_FromSsize_t(entry - stub) : NULL;
    if (!step) {
        Py_XDECREF(to_entry);
        goto done;
    }
    PyList_SET_ITEM(to_entry, 0, step);
    if (PyList_SetItem(b->eps, stub, to_entry) < 0) goto done;
    Py_ssize_t exit_ = copy_range(b, first, stop, old_exit, entry);
    if (exit_ < 0) goto done;
    rc = add_eps(b, exit_, end);
done:
    Py_XDECREF(first);
    Py_XDECREF(size);
    Py_XDECREF(offset);
    Py_XDECREF(stop);
    Py_XDECREF(old_exit);
    return rc;
}

/* _Builder._clone_stubs: the stubs inside [first, stop), registered again `delta` states
 * on for a copy (nfa.stubs is ascending: a binary search finds the first). */
static int clone_stubs(Build *b, Py_ssize_t first, Py_ssize_t stop, Py_ssize_t delta) {
    Py_ssize_t n = PyList_GET_SIZE(b->stubs), lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        Py_ssize_t x = PyLong_AsSsize_t(PyList_GET_ITEM(b->stubs, mid));
        if (x == -1 && PyErr_Occurred()) return -1;
        if (x < first) lo = mid + 1; else hi = mid;
    }
    for (Py_ssize_t i = lo; i < n; i++) {
        PyObject *key = PyList_GET_ITEM(b->stubs, i);
        Py_ssize_t x = PyLong_AsSsize_t(key);
        if (x == -1 && PyErr_Occurred()) return -1;
        if (x >= stop) break;
        PyObject *value = PyDict_GetItemWithError(b->lazy_copies, key);
        if (!value) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_KeyError, "nfa build: a stub without its lazy copy");
            return -1;
        }
        if (!PyTuple_CheckExact(value) || PyTuple_GET_SIZE(value) != 2) {
            PyErr_SetString(PyExc_TypeError, "nfa build: lazy copies hold (record, end)");
            return -1;
        }
        Py_ssize_t end = PyLong_AsSsize_t(PyTuple_GET_ITEM(value, 1));
        if (end == -1 && PyErr_Occurred()) return -1;
        PyObject *record = PyTuple_GET_ITEM(value, 0);
        if (!b->stub_block) {
            if (register_stub(b, x + delta, record, end + delta) < 0) return -1;
            continue;
        }
        if (expand_stub(b, x + delta, record, end + delta) < 0) return -1;
    }
    return 0;
}

static int build_ref_first(Build *b, PyObject *name, PyObject *inlined, Py_ssize_t start,
                           Py_ssize_t end);

/* A rule reference inlined as _Builder._build_ref does it: a further use is a copy of the
 * rule's first fragment (builder._copy_range) between a new entry state and `end`, or a
 * stub; a first use goes to build_ref_first. 1 when done, 0 when the reference needs
 * _build_ref's decisions (rule calls, recursion, a rule too large to inline), -1 on error. */
static int build_ref(Build *b, PyObject *e, Py_ssize_t start, Py_ssize_t end) {
    PyObject *name = node_attr(e, s_name), *inlined = NULL, *call_rules = NULL;
    PyObject *built;
    int rc = -1;
    if (!name) return -1;
    inlined = PyObject_GetAttr(b->builder, s_inlined);
    call_rules = inlined ? PyObject_GetAttr(b->builder, s_call_rules) : NULL;
    if (!call_rules) goto done;
    if (!PyDict_Check(inlined) || !PyAnySet_Check(call_rules)) {
        PyErr_SetString(PyExc_TypeError, "nfa build: _inlined is a dict, call_rules a set");
        goto done;
    }
    int called = PySet_Contains(call_rules, name);
    int recursive = called ? called : PySequence_Contains(b->path, name);
    if (recursive) {
        rc = recursive < 0 ? -1 : 0;
        goto done;
    }
    built = PyDict_GetItemWithError(inlined, name);
    if (!built) {
        if (PyErr_Occurred()) goto done;
        if (Py_EnterRecursiveCall(" while building the NFA")) goto done;
        rc = build_ref_first(b, name, inlined, start, end);
        Py_LeaveRecursiveCall();
        goto done;
    }
    if (!PyTuple_CheckExact(built) || PyTuple_GET_SIZE(built) < 3 ||
        PyTuple_GET_SIZE(built) > 4) {
        PyErr_SetString(PyExc_TypeError, "nfa build: _inlined holds (first, exit, stop[, copy])");
        goto done;
    }
    if (PyTuple_GET_SIZE(built) == 4 && !b->stub_block) {
        rc = add_stub(b, start, PyTuple_GET_ITEM(built, 3), end) < 0 ? -1 : 1;
        goto done;
    }
    PyObject *first = PyTuple_GET_ITEM(built, 0), *old_exit = PyTuple_GET_ITEM(built, 1),
             *stop = PyTuple_GET_ITEM(built, 2);
    Py_ssize_t entry = build_new_state(b);
    if (entry < 0 || add_eps(b, start, entry) < 0) goto done;
    Py_ssize_t exit_ = copy_range(b, first, stop, old_exit, entry);
    if (exit_ < 0) goto done;
    rc = add_eps(b, exit_, end) < 0 ? -1 : 1;
done:
    Py_DECREF(name);
    Py_XDECREF(inlined);
    Py_XDECREF(call_rules);
    return rc;
}


/* _Builder._plain_fragment: whether [first, stop) may be copied lazily (big enough, no
 * call edges, no lazy repetition exits inside); -1 with an exception. */
static int plain_fragment(Build *b, Py_ssize_t first, Py_ssize_t stop) {
    if (stop - first < b->lazy_copy_min) return 0;
    for (Py_ssize_t x = first; x < stop; x++) {
        int some = PyObject_IsTrue(PyList_GET_ITEM(b->calls, x));
        if (some) return some < 0 ? -1 : 0;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(b->lazy_exits, &pos, &key, &value)) {
        Py_ssize_t x = PyLong_AsSsize_t(key);
        if (x == -1 && PyErr_Occurred()) return -1;
        if (first <= x && x < stop) return 0;
    }
    return 1;
}

/* _Builder._stubs_in: [(stub - first, its record, its continuation - first)] for the stubs
 * in [first, stop) (nfa.stubs is sorted). New reference. */
static PyObject *stubs_in(Build *b, Py_ssize_t first, Py_ssize_t stop) {
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(b->stubs);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyList_GET_ITEM(b->stubs, i);
        Py_ssize_t x = PyLong_AsSsize_t(key);
        if (x == -1 && PyErr_Occurred()) goto fail;
        if (x < first) continue;
        if (x >= stop) break;
        PyObject *pair = PyDict_GetItemWithError(b->lazy_copies, key);
        if (!pair) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "nfa build: a stub without its copy");
            goto fail;
        }
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "nfa build: lazy_copies holds (record, end)");
            goto fail;
        }
        Py_ssize_t to = PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, 1));
        if (to == -1 && PyErr_Occurred()) goto fail;
        PyObject *item = Py_BuildValue("(nOn)", x - first, PyTuple_GET_ITEM(pair, 0), to - first);
        if (!item || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            goto fail;
        }
        Py_DECREF(item);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* The first use of a rule to inline (build_ref has checked it is no call and not
 * recursive), as _Builder._build_ref does it when its size (memoised as _inline_size does)
 * is within INLINE_LIMIT: the rule's fragment is built here between a new entry and exit
 * state and remembered in builder._inlined (`inlined`), with a LazyCopy record when later
 * uses may be pasted lazily. 1 done, 0 left to _build_ref (Python), -1 with an exception.
 * Going back to Python for every first use cost a Python call and a new C entry per rule. */
static int build_ref_first(Build *b, PyObject *name, PyObject *inlined, Py_ssize_t start,
                           Py_ssize_t end) {
    PyObject *rules = NULL, *body = NULL, *path = NULL, *saved_path = b->path, *record = NULL;
    int rc = -1;
    rules = PyObject_GetAttr(b->builder, s_rules);
    body = rules ? PyObject_GetItem(rules, name) : NULL;
    path = body ? path_with(b->path, name) : NULL;
    if (!path) goto done;
    long long n_size = inline_size_of(b->builder, b->lazy_repeat_min, name, b->path);
    if (n_size < 0) goto done;
    if (n_size > b->inline_limit) { /* _build_ref decides whether it becomes a call */
        rc = 0;
        goto done;
    }
    Py_ssize_t entry = build_new_state(b);
    if (entry < 0 || add_eps(b, start, entry) < 0) goto done;
    Py_ssize_t exit_ = build_new_state(b);
    if (exit_ < 0) goto done;
    PyObject *flag = PyObject_GetAttr(b->builder, s_may_die);
    int dying = flag ? PyObject_IsTrue(flag) : -1;
    Py_XDECREF(flag);
    if (dying < 0) goto done;
    b->path = path;
    int built = build_node(b, body, entry, exit_);
    b->path = saved_path;
    if (built < 0) goto done;
    Py_ssize_t stop = PyList_GET_SIZE(b->eps);
    flag = PyObject_GetAttr(b->builder, s_may_die);
    int dies = flag ? PyObject_IsTrue(flag) : -1;
    Py_XDECREF(flag);
    if (dies < 0) goto done;
    int plain = 0;
    if (!b->stub_block && !(dies && !dying)) {
        plain = plain_fragment(b, entry, stop);
        if (plain < 0) goto done;
    }
    PyObject *value;
    if (plain) {
        PyObject *type = PyObject_GetAttr(b->builder, s_lazy_copy_type);
        PyObject *nfa = type ? PyObject_GetAttr(b->builder, s_nfa) : NULL;
        PyObject *stubs = nfa ? stubs_in(b, entry, stop) : NULL;
        if (stubs)
            record = PyObject_CallFunction(type, "OnnnO", nfa, entry, exit_, stop, stubs);
        Py_XDECREF(type);
        Py_XDECREF(nfa);
        Py_XDECREF(stubs);
        if (!record) goto done;
        PyObject *records = PyObject_GetAttr(b->builder, s_lazy_copies);
        int bad = !records || PyList_Append(records, record) < 0;
        Py_XDECREF(records);
        if (bad) goto done;
        value = Py_BuildValue("(nnnO)", entry, exit_, stop, record);
    } else {
        value = Py_BuildValue("(nnn)", entry, exit_, stop);
    }
    if (!value) goto done;
    int bad = PyDict_SetItem(inlined, name, value) < 0;
    Py_DECREF(value);
    if (bad || add_eps(b, exit_, end) < 0) goto done;
    rc = 1;
done:
    b->path = saved_path;
    Py_XDECREF(rules);
    Py_XDECREF(body);
    Py_XDECREF(path);
    Py_XDECREF(record);
    return rc;
}

/* builder._utf8_paths(e): a character set's UTF-8 byte-range paths (new reference),
 * remembered by the set's identity: a schema's NFA meets the same few sets hundreds of
 * times. The entry holds the set, so its id is never reused while the builder lives. */
static PyObject *utf8_paths(Build *b, PyObject *e) {
    PyObject *key = PyLong_FromVoidPtr(e);
    if (!key) return NULL;
    PyObject *hit = PyDict_GetItemWithError(b->utf8_ids, key);
    if (hit && PyTuple_CheckExact(hit) && PyTuple_GET_SIZE(hit) == 2 &&
        PyTuple_GET_ITEM(hit, 0) == e) {
        Py_DECREF(key);
        return Py_NewRef(PyTuple_GET_ITEM(hit, 1));
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    }
    /* Computed here rather than by builder._utf8_paths: the Python method's call, and its
     * memo keyed by the set's value, cost more than the paths of the few distinct sets. */
    PyObject *ranges = node_attr(e, s_ranges);
    PyObject *negated_obj = ranges ? node_attr(e, s_negated) : NULL;
    int negated = negated_obj ? PyObject_IsTrue(negated_obj) : -1;
    PyObject *paths = negated < 0 ? NULL : utf8_paths_list(ranges, negated);
    Py_XDECREF(ranges);
    Py_XDECREF(negated_obj);
    PyObject *entry = paths ? PyTuple_Pack(2, e, paths) : NULL;
    if (!entry || PyDict_SetItem(b->utf8_ids, key, entry) < 0) Py_CLEAR(paths);
    Py_XDECREF(entry);
    Py_DECREF(key);
    return paths;
}

/* The CharSet branch of _Builder._build: paths that end alike share their last states. */
static int build_char_set(Build *b, PyObject *e, Py_ssize_t start, Py_ssize_t end) {
    PyObject *paths = utf8_paths(b, e);
    if (!paths) return -1;
    int rc = PyList_GET_SIZE(paths) ? 0 : set_may_die(b);
    PyObject *tails = PyDict_New(); /* the rest of a path (tuple of ranges) -> its state */
    if (!tails) rc = -1;
    for (Py_ssize_t p = 0; rc == 0 && p < PyList_GET_SIZE(paths); p++) {
        PyObject **steps;
        Py_ssize_t n;
        if (items_of(PyList_GET_ITEM(paths, p), &steps, &n, "a UTF-8 path") < 0) {
            rc = -1;
            break;
        }
        Py_ssize_t cur = start;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *lo, *hi;
            if (pair_items(steps[i], &lo, &hi) < 0) {
                rc = -1;
                break;
            }
            if (i == n - 1) {
                rc = add_edge(b->bytes, cur, edge_of(lo, hi, end - cur));
                break;
            }
            PyObject *rest = PyTuple_New(n - i - 1);
            if (!rest) {
                rc = -1;
                break;
            }
            for (Py_ssize_t j = i + 1; j < n; j++) {
                Py_INCREF(steps[j]);
                PyTuple_SET_ITEM(rest, j - i - 1, steps[j]);
            }
            PyObject *known = PyDict_GetItemWithError(tails, rest);
            if (known || PyErr_Occurred()) {
                Py_ssize_t next = known ? PyLong_AsSsize_t(known) : -1;
                Py_DECREF(rest);
                rc = next < 0 ? -1
                              : add_edge(b->bytes, cur, edge_of(lo, hi, next - cur));
                break; /* the rest of this path is built already */
            }
            Py_ssize_t next = build_new_state(b);
            PyObject *at = next < 0 ? NULL : PyLong_FromSsize_t(next);
            int bad = !at || PyDict_SetItem(tails, rest, at) < 0;
            Py_XDECREF(at);
            Py_DECREF(rest);
            if (bad || add_edge(b->bytes, cur, edge_of(lo, hi, next - cur)) < 0) {
                rc = -1;
                break;
            }
            cur = next;
        }
    }
    Py_XDECREF(tails);
    Py_DECREF(paths);
    return rc;
}

/* _Builder._single_byte_ranges: the (lo, hi) ranges of an item that is one byte, as a new
 * list; Py_None (new reference) when it is not one byte. */
static PyObject *single_byte_ranges(Build *b, PyObject *item) {
    PyTypeObject *type = Py_TYPE(item);
    if (type == (PyTypeObject *)ir.byte_set) {
        PyObject *ranges = node_attr(item, s_ranges);
        if (!ranges) return NULL;
        PyObject *out = PyObject_IsTrue(ranges) ? PySequence_List(ranges) : Py_NewRef(Py_None);
        Py_DECREF(ranges);
        return out;
    }
    if (type != (PyTypeObject *)ir.char_set) return Py_NewRef(Py_None);
    PyObject *paths = utf8_paths(b, item);
    if (!paths) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(paths);
    PyObject *out = n ? PyList_New(n) : Py_NewRef(Py_None);
    for (Py_ssize_t i = 0; out && out != Py_None && i < n; i++) {
        PyObject **steps;
        Py_ssize_t k;
        if (items_of(PyList_GET_ITEM(paths, i), &steps, &k, "a UTF-8 path") < 0) {
            Py_CLEAR(out);
            break;
        }
        if (k != 1) {
            Py_DECREF(out);
            out = Py_NewRef(Py_None);
            break;
        }
        Py_INCREF(steps[0]);
        PyList_SET_ITEM(out, i, steps[0]);
    }
    Py_DECREF(paths);
    return out;
}

/* _Builder._build_byte_chain: [set]{low,high} as `high` byte steps, each past `low` free to
 * leave. */
static int build_byte_chain(Build *b, PyObject *ranges, Py_ssize_t low, Py_ssize_t high,
                            Py_ssize_t start, Py_ssize_t end) {
    Py_ssize_t cur = start;
    for (Py_ssize_t i = 0; i < high; i++) {
        if (i >= low && add_eps(b, cur, end) < 0) return -1;
        Py_ssize_t next = i == high - 1 ? end : build_new_state(b);
        if (next < 0) return -1;
        for (Py_ssize_t r = 0; r < PyList_GET_SIZE(ranges); r++) {
            PyObject *lo, *hi;
            if (pair_items(PyList_GET_ITEM(ranges, r), &lo, &hi) < 0 ||
                add_edge(b->bytes, cur, edge_of(lo, hi, next - cur)) < 0)
                return -1;
        }
        cur = next;
    }
    return high == 0 ? add_eps(b, start, end) : 0;
}

/* Whether a lazy repetition lies inside the NFA states [first, stop) (nfa._Builder.
 * _lazy_inside is not empty): 1 or 0, -1 with a Python exception set. */
static int lazy_inside(Build *b, Py_ssize_t first, Py_ssize_t stop) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(b->lazy_exits, &pos, &key, &value)) {
        Py_ssize_t x = PyLong_AsSsize_t(key);
        if (x == -1 && PyErr_Occurred()) return -1;
        if (x < first || x >= stop) continue;
        if (!PyTuple_Check(value) || PyTuple_GET_SIZE(value) != 2) {
            PyErr_SetString(PyExc_TypeError, "nfa build: lazy exits hold (record, copies)");
            return -1;
        }
        PyObject *rec_first = PyObject_GetAttr(PyTuple_GET_ITEM(value, 0), s_first);
        if (!rec_first) return -1;
        Py_ssize_t f = PyLong_AsSsize_t(rec_first);
        Py_DECREF(rec_first);
        if (f == -1 && PyErr_Occurred()) return -1;
        if (first <= f && f < stop) return 1;
    }
    return 0;
}

/* builder._copy_range(first, stop, exit, entry): the exit of the copy, or -1. Pasted here
 * unless a lazy repetition lies inside the range (then _copy_range registers its copy too);
 * a copy from Python cost a few microseconds, and a schema makes hundreds. */
static Py_ssize_t copy_range(Build *b, PyObject *first, PyObject *stop, PyObject *old_exit,
                             Py_ssize_t entry) {
    Py_ssize_t f = PyLong_AsSsize_t(first), t = PyLong_AsSsize_t(stop);
    if (PyErr_Occurred()) return -1;
    int lazy = PyDict_GET_SIZE(b->lazy_exits) ? lazy_inside(b, f, t) : 0;
    if (lazy < 0) return -1;
    if (!lazy) {
        Py_ssize_t x = PyLong_AsSsize_t(old_exit);
        if (x == -1 && PyErr_Occurred()) return -1;
        Py_ssize_t size = PyList_GET_SIZE(b->eps);
        if (entry != size - 1) {
            PyErr_SetString(PyExc_AssertionError,
                            "a fragment is pasted right after its entry state");
            return -1;
        }
        if (size + t - f > b->max_states) return raise_too_large();
        if (f < 0 || t < f || x < f || x >= t) {
            PyErr_SetString(PyExc_ValueError, "nfa build: a copied range is out of the NFA");
            return -1;
        }
        if (paste_range_into(b->eps, b->bytes, b->calls, (long)f, (long)t, (long)x) < 0)
            return -1;
        if (PyList_GET_SIZE(b->stubs) && clone_stubs(b, f, t, entry - f) < 0) return -1;
        return x + (entry - f);
    }
    PyObject *entry_obj = PyLong_FromSsize_t(entry);
    if (!entry_obj) return -1;
    PyObject *exit_obj = PyObject_CallMethodObjArgs(b->builder, s_copy_range, first, stop,
                                                    old_exit, entry_obj, NULL);
    Py_DECREF(entry_obj);
    if (!exit_obj) return -1;
    Py_ssize_t exit_ = PyLong_AsSsize_t(exit_obj);
    Py_DECREF(exit_obj);
    if (exit_ == -1 && PyErr_Occurred()) return -1;
    if (exit_ < 0 || exit_ >= PyList_GET_SIZE(b->eps)) {
        PyErr_SetString(PyExc_ValueError, "nfa build: a copy's exit is out of the NFA");
        return -1;
    }
    return exit_;
}

/* The copies of _Builder._build_repeat: the first built, the others pasted from it. */
static int build_copies(Build *b, PyObject *item, Py_ssize_t min, Py_ssize_t max,
                        Py_ssize_t start, Py_ssize_t end) {
    Py_ssize_t copies = min + (max < 0 ? 1 : max - min);
    PyObject *t_first = NULL, *t_exit = NULL, *t_stop = NULL;
    Py_ssize_t cur = start;
    int rc = -1;
    for (Py_ssize_t i = 0; i < copies; i++) {
        int optional = i >= min;
        if (optional && max >= 0 && add_eps(b, cur, end) < 0) goto done;
        Py_ssize_t entry = build_new_state(b), exit_;
        if (entry < 0 || add_eps(b, cur, entry) < 0) goto done;
        if (!t_first) {
            exit_ = build_new_state(b);
            if (exit_ < 0 || build_node(b, item, entry, exit_) < 0) goto done;
            t_first = PyLong_FromSsize_t(entry);
            t_exit = PyLong_FromSsize_t(exit_);
            t_stop = PyLong_FromSsize_t(PyList_GET_SIZE(b->eps));
            if (!t_first || !t_exit || !t_stop) goto done;
        } else {
            exit_ = copy_range(b, t_first, t_stop, t_exit, entry);
            if (exit_ < 0) goto done;
        }
        if (optional && max < 0) { /* item* loops on its single optional copy */
            rc = add_eps(b, exit_, entry) < 0 || add_eps(b, entry, end) < 0 ? -1 : 0;
            goto done;
        }
        cur = exit_;
    }
    rc = add_eps(b, cur, end);
done:
    Py_XDECREF(t_first);
    Py_XDECREF(t_exit);
    Py_XDECREF(t_stop);
    return rc;
}

/* _Builder._build_repeat; lazily copied repetitions go to builder._build_lazy_repeat. */
static int build_repeat(Build *b, PyObject *e, Py_ssize_t start, Py_ssize_t end) {
    PyObject *item = node_attr(e, s_item), *min_obj = NULL, *max_obj = NULL;
    PyObject *ranges = NULL;
    int rc = -1;
    if (!item) return -1;
    min_obj = node_attr(e, s_min);
    max_obj = min_obj ? node_attr(e, s_max) : NULL;
    if (!max_obj) goto done;
    Py_ssize_t min = PyLong_AsSsize_t(min_obj);
    Py_ssize_t max = max_obj == Py_None ? -1 : PyLong_AsSsize_t(max_obj);
    if (PyErr_Occurred()) goto done;
    ranges = single_byte_ranges(b, item);
    if (!ranges) goto done;
    if (ranges != Py_None && max >= 0 && max <= b->byte_chain_max) {
        rc = build_byte_chain(b, ranges, min, max, start, end);
    } else if (max >= 0 && max >= b->lazy_repeat_min) {
        PyObject *from = PyLong_FromSsize_t(start), *to = PyLong_FromSsize_t(end), *out = NULL;
        if (from && to)
            out = PyObject_CallMethodObjArgs(b->builder, s_build_lazy_repeat, e, from, to,
                                             b->path, NULL);
        Py_XDECREF(from);
        Py_XDECREF(to);
        rc = out ? 0 : -1;
        Py_XDECREF(out);
    } else {
        rc = build_copies(b, item, min, max, start, end);
    }
done:
    Py_DECREF(item);
    Py_XDECREF(min_obj);
    Py_XDECREF(max_obj);
    Py_XDECREF(ranges);
    return rc;
}

static int build_in_python(Build *b, PyObject *e, Py_ssize_t start, Py_ssize_t end) {
    PyObject *from = PyLong_FromSsize_t(start), *to = PyLong_FromSsize_t(end), *out = NULL;
    if (from && to)
        out = PyObject_CallMethodObjArgs(b->builder, s_build_py, e, from, to, b->path, NULL);
    Py_XDECREF(from);
    Py_XDECREF(to);
    Py_XDECREF(out);
    return out ? 0 : -1;
}

static int build_node(Build *b, PyObject *e, Py_ssize_t start, Py_ssize_t end) {
    PyTypeObject *type = Py_TYPE(e);
    if (type == (PyTypeObject *)ir.literal) return build_literal(b, e, start, end);
    if (type == (PyTypeObject *)ir.byte_set) return build_byte_set(b, e, start, end);
    if (type == (PyTypeObject *)ir.char_set) return build_char_set(b, e, start, end);
    if (type == (PyTypeObject *)ir.repeat) {
        if (Py_EnterRecursiveCall(" while building the NFA")) return -1;
        int rc = build_repeat(b, e, start, end);
        Py_LeaveRecursiveCall();
        return rc;
    }
    if (type == (PyTypeObject *)ir.ref) {
        int done = build_ref(b, e, start, end);
        if (done) return done < 0 ? -1 : 0;
    }
    if (type != (PyTypeObject *)ir.seq && type != (PyTypeObject *)ir.choice)
        return build_in_python(b, e, start, end);
    PyObject *items_obj = node_attr(e, s_items);
    if (!items_obj) return -1;
    PyObject **items;
    Py_ssize_t n;
    int rc = items_of(items_obj, &items, &n, "an expression's items");
    if (rc == 0 && Py_EnterRecursiveCall(" while building the NFA") == 0) {
        if (type == (PyTypeObject *)ir.choice) {
            rc = build_choice(b, items, n, start, end);
        } else {
            Py_ssize_t at = 0, k = 0;
            PyObject *body_obj = NULL;
            int loop = n ? separated_loop(items, n, &at, &k, &body_obj) : 0;
            if (loop > 0) {
                PyObject **body;
                Py_ssize_t m;
                rc = items_of(body_obj, &body, &m, "a repeated sequence's items");
                if (rc == 0) rc = build_separated(b, items, n, at, k, body, m, start, end);
                Py_DECREF(body_obj);
            } else {
                rc = loop < 0 ? -1 : build_chain(b, items, n, start, end);
            }
        }
        Py_LeaveRecursiveCall();
    } else {
        rc = -1;
    }
    Py_DECREF(items_obj);
    return rc;
}

/* build(builder, (max_states, byte_chain_max, lazy_repeat_min), expr, start, end, path) */
static PyObject *build(PyObject *self, PyObject *args) {
    (void)self;
    Build b = {NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL, 0};
    PyObject *e;
    Py_ssize_t start, end;
    if (!ir.literal) {
        PyErr_SetString(PyExc_RuntimeError, "nfa build: setup() was not called");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O(nnnnn)OnnO", &b.builder, &b.max_states, &b.byte_chain_max,
                          &b.lazy_repeat_min, &b.inline_limit, &b.lazy_copy_min, &e, &start,
                          &end, &b.path))
        return NULL;
    b.utf8_ids = PyObject_GetAttr(b.builder, s_utf8_ids);
    if (b.utf8_ids && !PyDict_CheckExact(b.utf8_ids)) {
        PyErr_SetString(PyExc_TypeError, "nfa build: builder._utf8_ids is a dict");
        Py_CLEAR(b.utf8_ids);
    }
    PyObject *nfa = b.utf8_ids ? PyObject_GetAttr(b.builder, s_nfa) : NULL;
    if (!nfa) {
        Py_XDECREF(b.utf8_ids);
        return NULL;
    }
    b.eps = PyObject_GetAttr(nfa, s_eps);
    b.bytes = PyObject_GetAttr(nfa, s_byte_edges);
    b.calls = PyObject_GetAttr(nfa, s_call_edges);
    b.lazy_exits = PyObject_GetAttr(nfa, s_lazy_exits);
    b.stubs = PyObject_GetAttr(nfa, s_stubs);
    b.lazy_copies = PyObject_GetAttr(nfa, s_lazy_copies);
    Py_DECREF(nfa);
    PyObject *block = PyObject_GetAttr(b.builder, s_stub_block);
    if (block) {
        b.stub_block = PyObject_IsTrue(block);
        Py_DECREF(block);
    }
    PyObject *out = NULL;
    if (block && b.stub_block >= 0 && b.eps && b.bytes && b.calls && b.lazy_exits && b.stubs &&
        b.lazy_copies) {
        if (!PyList_Check(b.eps) || !PyList_Check(b.bytes) || !PyList_Check(b.calls) ||
            !PyDict_Check(b.lazy_exits) || !PyList_Check(b.stubs) ||
            !PyDict_Check(b.lazy_copies)) {
            PyErr_SetString(PyExc_TypeError,
                            "nfa build: the NFA's edges and stubs are lists, its lazy exits "
                            "and copies dicts");
        } else {
            Py_ssize_t size = PyList_GET_SIZE(b.eps);
            if (start < 0 || end < 0 || start >= size || end >= size ||
                PyList_GET_SIZE(b.bytes) != size || PyList_GET_SIZE(b.calls) != size) {
                PyErr_SetString(PyExc_ValueError, "nfa build: states out of the NFA");
            } else if (build_node(&b, e, start, end) == 0) {
                Py_INCREF(Py_None);
                out = Py_None;
            }
        }
    }
    Py_XDECREF(b.eps);
    Py_XDECREF(b.bytes);
    Py_XDECREF(b.calls);
    Py_XDECREF(b.lazy_exits);
    Py_XDECREF(b.stubs);
    Py_XDECREF(b.lazy_copies);
    Py_DECREF(b.utf8_ids);
    return out;
}

/* setup(literal, byte_set, char_set, seq, choice, repeat, ref, step_one, no_edges,
 *       too_large) */
static PyObject *setup(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[10];
    if (!PyArg_ParseTuple(args, "OOOOOOOO!O!O", &objs[0], &objs[1], &objs[2], &objs[3],
                          &objs[4], &objs[5], &objs[6], &PyList_Type, &objs[7], &PyTuple_Type,
                          &objs[8], &objs[9]))
        return NULL;
    if (PyList_GET_SIZE(objs[7]) != 256) {
        PyErr_SetString(PyExc_ValueError, "nfa build: step_one has one entry a byte value");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < 256; i++) {
        PyObject *step = PyList_GET_ITEM(objs[7], i);
        if (!PyTuple_Check(step) || PyTuple_GET_SIZE(step) != 1 ||
            !PyTuple_Check(PyTuple_GET_ITEM(step, 0))) {
            PyErr_SetString(PyExc_ValueError, "nfa build: step_one[b] is ((b, b, 1),)");
            return NULL;
        }
    }
    PyObject **slots[10] = {&ir.literal, &ir.byte_set, &ir.char_set, &ir.seq, &ir.choice,
                            &ir.repeat, &ir.ref, &ir.step_one, &ir.no_edges, &ir.too_large};
    for (int i = 0; i < 10; i++) {
        Py_INCREF(objs[i]);
        Py_XSETREF(*slots[i], objs[i]);
    }
    n_fields = 0; /* the classes are held by ir above, so their slots stay put */
    for (int i = 0; i < 7; i++) {
        if (!PyType_Check(objs[i])) continue;
        PyObject *names[3] = {s_items, s_data, s_ranges};
        PyObject *repeat_names[3] = {s_item, s_min, s_max};
        PyObject *char_names[2] = {s_ranges, s_negated};
        PyObject **these = i == 5 ? repeat_names : i == 2 ? char_names : names;
        int count = i == 5 ? 3 : i == 2 ? 2 : 3;
        if (i == 6) {
            these = &s_name;
            count = 1;
        }
        for (int j = 0; j < count; j++) find_field(objs[i], these[j]);
    }
    Py_RETURN_NONE;
}


static int build_trie(Build *b, PyObject *literals, Py_ssize_t start, Py_ssize_t end) {
    PyObject *out = trie_into(b->eps, b->bytes, b->calls, literals, start, end, ir.no_edges);
    Py_XDECREF(out);
    return out ? 0 : -1;
}

/* ---------------------------------------------------------------------------- follow sets
 *
 * follow_sets(eps, byte_edges, call_edges, live, starts, ends, index, lazy) -> bytes: FOLLOW
 * of each call rule as 32 bytes of bits (engine.follow.follow_bytes, whose Python code is
 * the reference; see there for what the sets mean). starts[r] is rule r's start state, ends
 * maps a rule's end state to r, index a rule name to r, lazy a lazy repetition's exit state
 * to the (first copy's entry, repetition's end) it may go on to. It runs inside a grammar's
 * first mask: in Python it was 50-90 us of a recursive grammar's first step. */

typedef struct {
    uint64_t w[4];
} Bits256;

static inline void bits_or(Bits256 *a, const Bits256 *b) {
    for (int i = 0; i < 4; i++) a->w[i] |= b->w[i];
}

static inline int bits_new(const Bits256 *a, const Bits256 *b) { /* b has a bit a lacks */
    for (int i = 0; i < 4; i++)
        if (b->w[i] & ~a->w[i]) return 1;
    return 0;
}

static inline void bits_range(Bits256 *a, long lo, long hi) {
    for (long b = lo; b <= hi; b++) a->w[b >> 6] |= (uint64_t)1 << (b & 63);
}

typedef struct {
    PyObject **eps, **byte_edges, **call_edges; /* the NFA lists' items (borrowed) */
    Py_ssize_t n_states, n_rules;
    char *live;
    Py_ssize_t *starts;
    Py_ssize_t *end_rule; /* state -> rule whose end it is, or -1 */
    Py_ssize_t *lazy_first, *lazy_end; /* state -> where a lazy exit goes on, or -1 */
    PyObject *index; /* dict: rule name -> rule number */
    Bits256 *first;
    char *nullable;
    uint32_t *stamp;
    uint32_t round;
    Py_ssize_t *work;
    char *ended; /* rules whose end a reach() met */
    Py_ssize_t *ended_list;
    Py_ssize_t n_ended;
} Follow;

static int follow_push(Follow *f, Py_ssize_t y, Py_ssize_t *top) {
    if (y < 0 || y >= f->n_states) {
        PyErr_Format(PyExc_IndexError, "follow_sets: NFA state %zd out of range", y);
        return -1;
    }
    if (f->stamp[y] != f->round && f->live[y]) {
        f->stamp[y] = f->round;
        f->work[(*top)++] = y;
    }
    return 0;
}

/* Bytes that can come first from s without leaving its rule (into *out), and the rules
 * whose end is reached without a byte (f->ended_list). */
static int follow_reach(Follow *f, Py_ssize_t s, Bits256 *out) {
    memset(out, 0, sizeof *out);
    for (Py_ssize_t i = 0; i < f->n_ended; i++) f->ended[f->ended_list[i]] = 0;
    f->n_ended = 0;
    if (++f->round == 0) { /* wrapped: forget every stamp */
        memset(f->stamp, 0, sizeof(uint32_t) * (size_t)f->n_states);
        f->round = 1;
    }
    Py_ssize_t top = 0;
    f->stamp[s] = f->round;
    f->work[top++] = s;
    while (top) {
        Py_ssize_t x = f->work[--top];
        Py_ssize_t r = f->end_rule[x];
        if (r >= 0 && !f->ended[r]) {
            f->ended[r] = 1;
            f->ended_list[f->n_ended++] = r;
        }
        PyObject **items;
        Py_ssize_t n;
        if (items_of(f->eps[x], &items, &n, "eps[x]") < 0) return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t d = PyLong_AsSsize_t(items[i]);
            if (d == -1 && PyErr_Occurred()) return -1;
            if (follow_push(f, x + d, &top) < 0) return -1;
        }
        if (f->lazy_first[x] >= 0) { /* any copy starts like the first; or the repeat ends */
            if (follow_push(f, f->lazy_first[x], &top) < 0) return -1;
            if (follow_push(f, f->lazy_end[x], &top) < 0) return -1;
        }
        if (items_of(f->byte_edges[x], &items, &n, "byte_edges[x]") < 0) return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            long lo, hi;
            Py_ssize_t d;
            if (!PyArg_ParseTuple(items[i], "lln", &lo, &hi, &d)) return -1;
            Py_ssize_t y = x + d;
            if (y < 0 || y >= f->n_states || lo < 0 || hi > 255) {
                PyErr_SetString(PyExc_ValueError, "follow_sets: bad byte edge");
                return -1;
            }
            if (f->live[y]) bits_range(out, lo, hi);
        }
        if (items_of(f->call_edges[x], &items, &n, "call_edges[x]") < 0) return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *name;
            Py_ssize_t d;
            if (!PyArg_ParseTuple(items[i], "On", &name, &d)) return -1;
            Py_ssize_t t = x + d;
            if (t < 0 || t >= f->n_states) {
                PyErr_SetString(PyExc_ValueError, "follow_sets: bad call edge");
                return -1;
            }
            PyObject *got = PyDict_GetItemWithError(f->index, name);
            if (!got) {
                if (PyErr_Occurred()) return -1;
                continue;
            }
            Py_ssize_t callee = PyLong_AsSsize_t(got);
            if (callee == -1 && PyErr_Occurred()) return -1;
            if (!f->live[t] || !f->live[f->starts[callee]]) continue;
            bits_or(out, &f->first[callee]);
            if (f->nullable[callee] && follow_push(f, t, &top) < 0) return -1;
        }
    }
    return 0;
}

/* A Python sequence of ints into a new C array (n entries, each in [0, bound)). */
static Py_ssize_t *index_array(PyObject *seq, Py_ssize_t n, Py_ssize_t bound, const char *what) {
    PyObject **items;
    Py_ssize_t m;
    if (items_of(seq, &items, &m, what) < 0) return NULL;
    if (m != n) {
        PyErr_Format(PyExc_ValueError, "%s: %zd entries, expected %zd", what, m, n);
        return NULL;
    }
    Py_ssize_t *out = malloc(sizeof(Py_ssize_t) * (size_t)(n ? n : 1));
    if (!out) return (Py_ssize_t *)PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyLong_AsSsize_t(items[i]);
        if ((out[i] == -1 && PyErr_Occurred()) || out[i] < 0 || out[i] >= bound) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s: out of range", what);
            free(out);
            return NULL;
        }
    }
    return out;
}

/* Fill state -> value arrays (preset to -1) from a dict of state -> int or (int, int). */
static int state_map(PyObject *dict, Py_ssize_t n_states, Py_ssize_t bound, Py_ssize_t *a,
                     Py_ssize_t *b) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        Py_ssize_t x = PyLong_AsSsize_t(key);
        if (x == -1 && PyErr_Occurred()) return -1;
        Py_ssize_t u, v = 0;
        if (b) {
            if (!PyArg_ParseTuple(value, "nn", &u, &v)) return -1;
        } else {
            u = PyLong_AsSsize_t(value);
            if (u == -1 && PyErr_Occurred()) return -1;
        }
        if (x < 0 || x >= n_states || u < 0 || u >= bound || (b && (v < 0 || v >= bound))) {
            PyErr_SetString(PyExc_ValueError, "follow_sets: state map out of range");
            return -1;
        }
        a[x] = u;
        if (b) b[x] = v;
    }
    return 0;
}

static PyObject *follow_sets(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *eps, *byte_edges, *call_edges, *live_list, *starts_list, *ends, *index, *lazy;
    if (!PyArg_ParseTuple(args, "O!O!O!O!OO!O!O!", &PyList_Type, &eps, &PyList_Type,
                          &byte_edges, &PyList_Type, &call_edges, &PyList_Type, &live_list,
                          &starts_list, &PyDict_Type, &ends, &PyDict_Type, &index,
                          &PyDict_Type, &lazy))
        return NULL;
    Follow f;
    memset(&f, 0, sizeof f);
    PyObject *result = NULL;
    f.n_states = PyList_GET_SIZE(eps);
    if (PyList_GET_SIZE(byte_edges) != f.n_states || PyList_GET_SIZE(call_edges) != f.n_states ||
        PyList_GET_SIZE(live_list) != f.n_states) {
        PyErr_SetString(PyExc_ValueError, "follow_sets: NFA lists of different lengths");
        return NULL;
    }
    f.n_rules = PySequence_Size(starts_list);
    if (f.n_rules < 0) return NULL;
    f.eps = ((PyListObject *)eps)->ob_item;
    f.byte_edges = ((PyListObject *)byte_edges)->ob_item;
    f.call_edges = ((PyListObject *)call_edges)->ob_item;
    f.index = index;
    size_t ns = (size_t)(f.n_states ? f.n_states : 1), nr = (size_t)(f.n_rules ? f.n_rules : 1);
    f.live = malloc(ns);
    f.end_rule = malloc(sizeof(Py_ssize_t) * ns);
    f.lazy_first = malloc(sizeof(Py_ssize_t) * ns);
    f.lazy_end = malloc(sizeof(Py_ssize_t) * ns);
    f.stamp = calloc(ns, sizeof(uint32_t));
    f.work = malloc(sizeof(Py_ssize_t) * ns);
    f.first = calloc(nr, sizeof(Bits256));
    f.nullable = calloc(nr, 1);
    f.ended = calloc(nr, 1);
    f.ended_list = malloc(sizeof(Py_ssize_t) * nr);
    Bits256 *follow = calloc(nr, sizeof(Bits256));
    /* (callee, ended rule) pairs: FOLLOW(callee) takes in FOLLOW(ended) */
    Py_ssize_t *inherit = NULL, n_inherit = 0, cap_inherit = 0;
    if (!f.live || !f.end_rule || !f.lazy_first || !f.lazy_end || !f.stamp || !f.work ||
        !f.first || !f.nullable || !f.ended || !f.ended_list || !follow) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t x = 0; x < f.n_states; x++) {
        int t = PyObject_IsTrue(PyList_GET_ITEM(live_list, x));
        if (t < 0) goto done;
        f.live[x] = (char)t;
        f.end_rule[x] = f.lazy_first[x] = f.lazy_end[x] = -1;
    }
    f.starts = index_array(starts_list, f.n_rules, f.n_states, "starts");
    if (!f.starts) goto done;
    if (state_map(ends, f.n_states, f.n_rules, f.end_rule, NULL) < 0) goto done;
    if (state_map(lazy, f.n_states, f.n_states, f.lazy_first, f.lazy_end) < 0) goto done;

    /* FIRST and nullability of each rule, to a fixpoint (rules call each other). */
    Bits256 got;
    for (int changed = 1; changed;) {
        changed = 0;
        for (Py_ssize_t r = 0; r < f.n_rules; r++) {
            if (!f.live[f.starts[r]]) continue;
            if (follow_reach(&f, f.starts[r], &got) < 0) goto done;
            char is_nullable = f.ended[r];
            if (bits_new(&f.first[r], &got) || is_nullable != f.nullable[r]) {
                bits_or(&f.first[r], &got);
                f.nullable[r] = f.nullable[r] || is_nullable;
                changed = 1;
            }
        }
    }
    /* Every call site: what follows the call in its rule, and whose FOLLOW it inherits. */
    for (Py_ssize_t x = 0; x < f.n_states; x++) {
        if (!f.live[x]) continue;
        PyObject **items;
        Py_ssize_t n;
        if (items_of(f.call_edges[x], &items, &n, "call_edges[x]") < 0) goto done;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *name;
            Py_ssize_t d;
            if (!PyArg_ParseTuple(items[i], "On", &name, &d)) goto done;
            Py_ssize_t t = x + d;
            if (t < 0 || t >= f.n_states) {
                PyErr_SetString(PyExc_ValueError, "follow_sets: bad call edge");
                goto done;
            }
            PyObject *callee_obj = PyDict_GetItemWithError(index, name);
            if (!callee_obj) {
                if (PyErr_Occurred()) goto done;
                continue;
            }
            Py_ssize_t callee = PyLong_AsSsize_t(callee_obj);
            if (callee == -1 && PyErr_Occurred()) goto done;
            if (!f.live[t]) continue;
            if (follow_reach(&f, t, &got) < 0) goto done;
            bits_or(&follow[callee], &got);
            for (Py_ssize_t k = 0; k < f.n_ended; k++) {
                if (n_inherit + 2 > cap_inherit) {
                    Py_ssize_t cap = cap_inherit ? cap_inherit * 2 : 64;
                    Py_ssize_t *more = realloc(inherit, sizeof(Py_ssize_t) * (size_t)cap);
                    if (!more) {
                        PyErr_NoMemory();
                        goto done;
                    }
                    inherit = more;
                    cap_inherit = cap;
                }
                inherit[n_inherit++] = callee;
                inherit[n_inherit++] = f.ended_list[k];
            }
        }
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (Py_ssize_t i = 0; i < n_inherit; i += 2) {
            Bits256 *to = &follow[inherit[i]], *from = &follow[inherit[i + 1]];
            if (bits_new(to, from)) {
                bits_or(to, from);
                changed = 1;
            }
        }
    }
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(32 * (size_t)f.n_rules));
    if (result) {
        unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
        for (Py_ssize_t r = 0; r < f.n_rules; r++)
            for (int b = 0; b < 32; b++)
                out[32 * r + b] = (unsigned char)(follow[r].w[b >> 3] >> (8 * (b & 7)));
    }
done:
    free(f.live);
    free(f.end_rule);
    free(f.lazy_first);
    free(f.lazy_end);
    free(f.stamp);
    free(f.work);
    free(f.first);
    free(f.nullable);
    free(f.ended);
    free(f.ended_list);
    free(f.starts);
    free(follow);
    free(inherit);
    return result;
}

/* ------------------------------------------------------------------ the rule graph */

/* rule_refs(rules) -> {name: [names it refers to, with repeats]} (nfa._rule_refs). */
static PyObject *rule_refs(PyObject *self, PyObject *rules) {
    (void)self;
    PyObject *items = PyMapping_Items(rules);
    if (!items) return NULL;
    PyObject *out = PyDict_New();
    Py_ssize_t n = PyList_GET_SIZE(items);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(items, i), *name, *body;
        PyObject *names = pair_items(pair, &name, &body) < 0 ? NULL : PyList_New(0);
        if (!names || collect_refs(body, names) < 0 || PyDict_SetItem(out, name, names) < 0)
            Py_CLEAR(out);
        Py_XDECREF(names);
    }
    Py_DECREF(items);
    return out;
}

/* A rule graph over indexes: each node's distinct successors, and its callers. */
typedef struct {
    Py_ssize_t n;
    Py_ssize_t *out_at, *out; /* successors of i: out[out_at[i] .. out_at[i + 1]) */
    Py_ssize_t *in_at, *in;   /* callers, the same way */
} RuleGraph;

/* Mark in `kept` the nodes among `alive` from which a cycle of alive nodes can be reached:
 * the others are peeled off from the sinks up (nfa._on_cycles_or_before). Returns how many
 * are kept. `work` holds 2n. */
static Py_ssize_t on_cycles_or_before(const RuleGraph *g, const char *alive, char *kept,
                                      Py_ssize_t *work) {
    Py_ssize_t n = g->n, *degree = work, *sinks = work + n, top = 0, left = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        kept[i] = alive[i];
        if (!alive[i]) continue;
        left++;
        degree[i] = 0;
        for (Py_ssize_t k = g->out_at[i]; k < g->out_at[i + 1]; k++) degree[i] += alive[g->out[k]];
        if (!degree[i]) sinks[top++] = i;
    }
    while (top) {
        Py_ssize_t x = sinks[--top];
        kept[x] = 0;
        left--;
        for (Py_ssize_t k = g->in_at[x]; k < g->in_at[x + 1]; k++) {
            Py_ssize_t c = g->in[k];
            if (alive[c] && --degree[c] == 0) sinks[top++] = c;
        }
    }
    return left;
}

/* Strongly connected components of the `kept` nodes (Tarjan, iterative). Each component
 * with a cycle gets the member cut_member picks appended to `cuts`. `work` holds 6n. */
static int cut_cycles(const RuleGraph *g, const char *kept, PyObject **names, Py_ssize_t *work,
                      Py_ssize_t *cuts, Py_ssize_t *n_cuts) {
    Py_ssize_t n = g->n, *index = work, *low = work + n, *stack = work + 2 * n,
               *frames = work + 3 * n, *next_edge = work + 4 * n, *member = work + 5 * n;
    Py_ssize_t counter = 0, top = 0;
    for (Py_ssize_t i = 0; i < n; i++) index[i] = -1, member[i] = 0;
    for (Py_ssize_t root = 0; root < n; root++) {
        if (!kept[root] || index[root] >= 0) continue;
        Py_ssize_t depth = 0;
        frames[depth++] = root;
        index[root] = low[root] = counter++;
        next_edge[root] = g->out_at[root];
        stack[top++] = root;
        member[root] = 1; /* on the stack */
        while (depth) {
            Py_ssize_t x = frames[depth - 1];
            if (next_edge[x] < g->out_at[x + 1]) {
                Py_ssize_t y = g->out[next_edge[x]++];
                if (!kept[y]) continue;
                if (index[y] < 0) {
                    index[y] = low[y] = counter++;
                    next_edge[y] = g->out_at[y];
                    stack[top++] = y;
                    member[y] = 1;
                    frames[depth++] = y;
                } else if (member[y] == 1 && index[y] < low[x]) {
                    low[x] = index[y];
                }
                continue;
            }
            depth--;
            if (depth && low[x] < low[frames[depth - 1]]) low[frames[depth - 1]] = low[x];
            if (low[x] != index[x]) continue;
            /* x roots a component: stack[from .. top) */
            Py_ssize_t from = top;
            do from--; while (stack[from] != x);
            int self_loop = 0;
            for (Py_ssize_t k = g->out_at[x]; k < g->out_at[x + 1]; k++) self_loop |= g->out[k] == x;
            for (Py_ssize_t k = from; k < top; k++) member[stack[k]] = 2; /* in this one */
            if (top - from > 1 || self_loop) {
                /* Cut the member referenced most often from inside its cycle; ties go to
                 * the smallest name (max over the sorted members). */
                Py_ssize_t best = -1, best_count = -1;
                for (Py_ssize_t k = from; k < top; k++) {
                    Py_ssize_t v = stack[k], count = 0;
                    for (Py_ssize_t j = g->in_at[v]; j < g->in_at[v + 1]; j++)
                        count += member[g->in[j]] == 2;
                    int better = count > best_count;
                    if (!better && count == best_count) {
                        int cmp = PyUnicode_Compare(names[v], names[best]);
                        if (cmp == -1 && PyErr_Occurred()) return -1;
                        better = cmp < 0;
                    }
                    if (better) best = v, best_count = count;
                }
                cuts[(*n_cuts)++] = best;
            }
            for (Py_ssize_t k = from; k < top; k++) member[stack[k]] = 0;
            top = from;
        }
    }
    return 0;
}

/* call_rules(refs, start) -> (acyclic, calls) | None: the rules kept as calls so that the
 * rest of the reference graph has no cycle (nfa._call_rules_of), and whether the graph had
 * none to begin with. refs is _rule_refs's dict. None when a reference names no rule (the
 * Python path then names it in its error). */
static PyObject *call_rules(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *refs, *start;
    if (!PyArg_ParseTuple(args, "O!U", &PyDict_Type, &refs, &start)) return NULL;
    Py_ssize_t n = PyDict_GET_SIZE(refs), total = 0, pos = 0, i = 0;
    PyObject *key, *value, *result = NULL, *calls = NULL;
    while (PyDict_Next(refs, &pos, &key, &value)) {
        if (!PyList_Check(value)) {
            PyErr_SetString(PyExc_TypeError, "call_rules: references must be lists");
            return NULL;
        }
        total += PyList_GET_SIZE(value);
    }
    /* names, out_at, out, in_at, in, stamp, alive, kept, cuts, work (6n) */
    Py_ssize_t words = n + (n + 1) + total + (n + 2) + total + n + n + 6 * n + 1;
    Py_ssize_t *block = malloc(sizeof(Py_ssize_t) * (size_t)words + 2 * (size_t)n + 2);
    PyObject *index = PyDict_New();
    if (!block || !index) {
        if (!block) PyErr_NoMemory();
        goto done;
    }
    PyObject **names = (PyObject **)block;
    RuleGraph g = {n, block + n, block + 2 * n + 1, NULL, NULL};
    g.in_at = g.out + total;
    g.in = g.in_at + n + 2;
    Py_ssize_t *stamp = g.in + total, *cuts = stamp + n, *work = cuts + n;
    char *alive = (char *)(work + 6 * n + 1), *kept = alive + n + 1;
    pos = 0;
    while (PyDict_Next(refs, &pos, &key, &value)) {
        PyObject *at = PyLong_FromSsize_t(i);
        int bad = !at || PyDict_SetItem(index, key, at) < 0;
        Py_XDECREF(at);
        if (bad) goto done;
        names[i] = key;
        stamp[i++] = -1;
    }
    /* distinct successors; callers counted into in_at[j + 2], then prefix sums */
    Py_ssize_t edges = 0;
    for (Py_ssize_t j = 0; j < n + 2; j++) g.in_at[j] = 0;
    for (i = 0; i < n; i++) {
        g.out_at[i] = edges;
        PyObject *targets = PyDict_GetItemWithError(refs, names[i]);
        for (Py_ssize_t k = 0; targets && k < PyList_GET_SIZE(targets); k++) {
            PyObject *at = PyDict_GetItemWithError(index, PyList_GET_ITEM(targets, k));
            if (!at) {
                if (!PyErr_Occurred()) result = Py_NewRef(Py_None); /* undefined */
                goto done;
            }
            Py_ssize_t j = PyLong_AsSsize_t(at);
            if (stamp[j] == i) continue;
            stamp[j] = i;
            g.out[edges++] = j;
            g.in_at[j + 2]++;
        }
        if (!targets) goto done;
    }
    g.out_at[n] = edges;
    for (Py_ssize_t j = 2; j < n + 2; j++) g.in_at[j] += g.in_at[j - 1];
    for (i = 0; i < n; i++)
        for (Py_ssize_t k = g.out_at[i]; k < g.out_at[i + 1]; k++)
            g.in[g.in_at[g.out[k] + 1]++] = i;
    /* in_at[j] .. in_at[j + 1] now spans j's callers */
    for (i = 0; i < n; i++) alive[i] = 1;
    int acyclic = on_cycles_or_before(&g, alive, kept, work) == 0;
    PyObject *start_at = PyDict_GetItemWithError(index, start);
    if (!start_at && PyErr_Occurred()) goto done;
    if (start_at) alive[PyLong_AsSsize_t(start_at)] = 0;
    calls = PySet_New(NULL);
    if (!calls || PySet_Add(calls, start) < 0) goto done;
    while (!acyclic && on_cycles_or_before(&g, alive, kept, work) > 0) {
        Py_ssize_t n_cuts = 0;
        if (cut_cycles(&g, kept, names, work, cuts, &n_cuts) < 0) goto done;
        if (!n_cuts) break; /* cannot happen: kept nodes reach a cycle */
        for (Py_ssize_t k = 0; k < n_cuts; k++) {
            alive[cuts[k]] = 0;
            if (PySet_Add(calls, names[cuts[k]]) < 0) goto done;
        }
    }
    result = Py_BuildValue("(OO)", acyclic ? Py_True : Py_False, calls);
done:
    Py_XDECREF(calls);
    Py_XDECREF(index);
    free(block);
    return result;
}

/* rules_productive(rules, names) -> whether every rule in names derives a string (the
 * fixpoint of nfa._rules_productive over derives). */
static PyObject *rules_productive(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *rules, *names;
    if (!PyArg_ParseTuple(args, "OO!", &rules, &PySet_Type, &names)) return NULL;
    PyObject *items = PyMapping_Items(rules);
    PyObject *productive = items ? PySet_New(NULL) : NULL;
    PyObject *result = NULL;
    int changed = productive != NULL;
    while (changed) {
        changed = 0;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
            PyObject *name, *body;
            if (pair_items(PyList_GET_ITEM(items, i), &name, &body) < 0) goto done;
            int known = PySet_Contains(productive, name);
            int got = known ? known : derives_string(body, productive);
            if (got < 0) goto done;
            if (!known && got) {
                if (PySet_Add(productive, name) < 0) goto done;
                changed = 1;
            }
        }
    }
    if (productive) result = PyObject_RichCompare(names, productive, Py_LE);
done:
    Py_XDECREF(productive);
    Py_XDECREF(items);
    return result;
}

static PyMethodDef methods[] = {
    {"add_edge", (PyCFunction)(void (*)(void))add_edge_py, METH_FASTCALL,
     "add_edge(containers, x, edge): add an edge to state x (a shared tuple is replaced by "
     "an untracked list)"},
    {"setup", setup, METH_VARARGS,
     "setup(literal, byte_set, char_set, seq, choice, repeat, ref, step_one, no_edges, "
     "too_large): "
     "the IR classes and shared containers build() uses"},
    {"build", build, METH_VARARGS,
     "build(builder, limits, expr, start, end, path): _Builder._build in C for its plain "
     "nodes; the others go to builder._build_py"},
    {"literal_trie", literal_trie, METH_VARARGS,
     "literal_trie(eps, byte_edges, call_edges, literals, start, end, no_edges): append the "
     "byte trie of sorted distinct literals from start to end"},
    {"frozen_range", frozen_range, METH_VARARGS,
     "frozen_range(eps, byte_edges, call_edges, first, stop, exit): nfa._frozen_range"},
    {"min_bytes", min_bytes, METH_VARARGS,
     "min_bytes(edges, first, exit_offset, inner) -> the fewest bytes across one copy"},
    {"ref_names", ref_names, METH_O,
     "ref_names(expr) -> the names of the rules expr refers to, with repeats"},
    {"rule_refs", rule_refs, METH_O,
     "rule_refs(rules) -> {name: the names of the rules its body refers to, with repeats}"},
    {"call_rules", call_rules, METH_VARARGS,
     "call_rules(refs, start) -> (acyclic, calls) | None: the rules kept as calls so that "
     "no other rule reaches itself (None: a reference to no rule)"},
    {"rules_productive", rules_productive, METH_VARARGS,
     "rules_productive(rules, names) -> whether every rule in names derives a string"},
    {"derives", derives, METH_VARARGS,
     "derives(expr, productive) -> whether expr derives a string, given the productive rules"},
    {"expr_size", expr_size, METH_VARARGS,
     "expr_size(builder, lazy_repeat_min, expr, path) -> _Builder._expr_size"},
    {"utf8_paths", utf8_paths_of, METH_VARARGS,
     "utf8_paths(ranges, negated) -> a character set's UTF-8 byte-range paths"},
    {"compact_in_place", compact_in_place, METH_VARARGS,
     "compact_in_place(eps, byte_edges, call_edges, first, exit, max_states) -> new exit | "
     "None: a byte-only fragment replaced by its subset construction, when smaller"},
    {"follow_sets", follow_sets, METH_VARARGS,
     "follow_sets(eps, byte_edges, call_edges, live, starts, ends, index, lazy) -> bytes: "
     "engine.follow.follow_bytes in C, 32 bytes of bits a call rule"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_nfa_build",
                                    "The NFA builder's inner loops in C.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__nfa_build(void) {
    PyObject **names[] = {&s_items, &s_data, &s_ranges, &s_item, &s_min, &s_max, &s_build_py,
                          &s_may_die, &s_nfa, &s_eps, &s_byte_edges, &s_call_edges, &s_name,
                          &s_inlined, &s_call_rules, &s_copy_range,
                          &s_build_lazy_repeat, &s_negated, &s_inline_size, &s_lazy_exits,
                          &s_first, &s_utf8_ids, &s_stubs, &s_lazy_copies, &s_stub_block,
                          &s_size, &s_exit_offset, &s_size_memo, &s_rules, &s_lazy_copy_type};
    const char *texts[] = {"items", "data", "ranges", "item", "min", "max", "_build_py",
                           "may_die", "nfa", "eps", "byte_edges", "call_edges", "name",
                           "_inlined", "call_rules", "_copy_range",
                           "_build_lazy_repeat", "negated", "_inline_size", "lazy_exits",
                           "first", "_utf8_ids", "stubs", "lazy_copies", "_stub_block",
                           "size", "exit_offset", "_size_memo", "rules", "_lazy_copy_type"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        *names[i] = PyUnicode_InternFromString(texts[i]);
        if (!*names[i]) return NULL;
    }
    return PyModule_Create(&module);
}
