/* Lazy determinisation of the grammar's NFA, in C: the state building of a cold mask.
 *
 * engine/determinise.py holds the same algorithm in Python (the fallback, and the reference a
 * differential test compares this module with). Both number DFA states in the same order, so
 * an automaton built by either is the same table.
 *
 * The NFA stays in the Python lists the builder made (eps, byte_edges, call_edges, live, and
 * lazy_exits for repetition copies pasted on demand); this module reads them in place, because
 * pasting a copy grows them while a closure is being computed. What it keeps itself:
 *   - per NFA state, its epsilon closure and the "important" part of it (states with a byte
 *     or call edge, or the rule's end), as sorted int arrays;
 *   - every DFA state's (rule, sorted NFA set), interned in an open-addressing hash table.
 * What it writes back is what the rest of the engine reads: the Automaton's per-state lists
 * calls, accepting_list and has_bytes when a state is built. A built state's row is kept here
 * as segments (lo, hi excl., target) and distinct targets, in two int pools; the Python lists
 * trans_rows, row_segments and row_targets get an entry only when Python asks for it
 * (Core.row, Core.segments, Core.targets): the C walk and the parser closures read the pools,
 * and a 256-entry list per state was a third of a state's cost, in allocation and page faults.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_seq_items.h"
#include "_nfa_paste.h"

#include "_determinise_api.h"

/* A memoised set: v NULL means not computed yet (so zeroed memory is a fresh table); a
 * computed empty set points at no_items. */
typedef struct {
    int32_t *v;
    Py_ssize_t n;
} IntSet;

static int32_t no_items[1];

typedef struct {
    int32_t *v;
    Py_ssize_t n, cap;
} IntVec;

static int vec_push(IntVec *vec, int32_t x) {
    if (vec->n == vec->cap) {
        Py_ssize_t cap = vec->cap ? vec->cap * 2 : 32;
        int32_t *more = realloc(vec->v, sizeof(int32_t) * (size_t)cap);
        if (!more) {
            PyErr_NoMemory();
            return -1;
        }
        vec->v = more;
        vec->cap = cap;
    }
    vec->v[vec->n++] = x;
    return 0;
}

static int cmp_int32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

typedef struct {
    int32_t lo, hi, t;
} Edge;

/* Vectors a state build needs, kept by the Core between builds: a build used to allocate
 * and free seven of them (a quarter of its time went to malloc and free). */
enum { SC_SET, SC_TARGETS, SC_SEGS, SC_SCRATCH, SC_COVER, SC_NEXT, SC_N };
typedef struct {
    IntVec vec[SC_N];
    Edge *edges;
    Py_ssize_t edge_cap;
    int busy; /* taken by a build (a nested one, if any, makes its own) */
} Scratch;

static void scratch_free(Scratch *sc) {
    for (int k = 0; k < SC_N; k++) free(sc->vec[k].v);
    free(sc->edges);
    memset(sc, 0, sizeof(*sc));
}

typedef struct {
    PyObject_HEAD
    /* the NFA, read in place */
    PyObject *eps, *byte_edges, *call_edges, *live, *lazy_exits, *call_rule;
    /* the Automaton's per-state lists, appended to when a state is interned */
    PyObject *trans_rows, *row_targets, *row_segments, *calls, *accepting, *has_bytes;
    int32_t *ends;
    Py_ssize_t n_rules;
    /* per NFA state */
    IntSet *closure, *important;
    uint32_t *mark;
    uint32_t gen;
    Py_ssize_t nfa_cap;
    /* DFA states */
    int32_t *st_rule;
    Py_ssize_t *st_off, *st_len;
    uint64_t *st_hash;
    Py_ssize_t n_states, st_cap;
    int32_t *pool;
    Py_ssize_t pool_n, pool_cap;
    int32_t *slots; /* hash table of state ids, -1 empty */
    Py_ssize_t n_slots;
    /* built rows: per DFA state, where its segments (triples) and targets start in the pools
     * and how many there are (seg_n -1: not built yet) */
    Py_ssize_t *seg_off, *tgt_off;
    int32_t *seg_n, *tgt_n;
    IntVec segpool, tgtpool;
    Scratch scratch;
    IntVec closure_stack; /* closure_of's work list, kept between closures */
    int closure_busy;
    /* lazy_mark[x]: x is a key of lazy_exits (keys read so far: lazy_pos and lazy_seen, the
     * dict's PyDict_Next position and size then; the dict only ever gains keys) */
    uint8_t *lazy_mark;
    Py_ssize_t lazy_mark_cap, lazy_pos, lazy_seen;
} Core;

/* The Core's scratch vectors, emptied, or `local` (zeroed) when a build already holds them. */
static Scratch *scratch_take(Core *c, Scratch *local) {
    Scratch *sc = local;
    if (!c->scratch.busy) {
        sc = &c->scratch;
        sc->busy = 1;
    }
    for (int k = 0; k < SC_N; k++) sc->vec[k].n = 0;
    return sc;
}

/* Give back what scratch_take gave: the Core's keep their memory, a local one is freed. */
static void scratch_give(Scratch *sc, Scratch *local) {
    if (sc == local) scratch_free(local);
    else sc->busy = 0;
}

static void free_sets(IntSet *sets, Py_ssize_t n) {
    if (!sets) return;
    for (Py_ssize_t i = 0; i < n; i++)
        if (sets[i].v != no_items) free(sets[i].v);
    free(sets);
}

static void core_dealloc(Core *c) {
    Py_XDECREF(c->eps);
    Py_XDECREF(c->byte_edges);
    Py_XDECREF(c->call_edges);
    Py_XDECREF(c->live);
    Py_XDECREF(c->lazy_exits);
    Py_XDECREF(c->call_rule);
    Py_XDECREF(c->trans_rows);
    Py_XDECREF(c->row_targets);
    Py_XDECREF(c->row_segments);
    Py_XDECREF(c->calls);
    Py_XDECREF(c->accepting);
    Py_XDECREF(c->has_bytes);
    free(c->ends);
    free_sets(c->closure, c->nfa_cap);
    free_sets(c->important, c->nfa_cap);
    free(c->mark);
    free(c->st_rule);
    free(c->st_off);
    free(c->st_len);
    free(c->st_hash);
    free(c->pool);
    free(c->slots);
    free(c->seg_off);
    free(c->tgt_off);
    free(c->seg_n);
    free(c->tgt_n);
    free(c->segpool.v);
    free(c->tgtpool.v);
    scratch_free(&c->scratch);
    free(c->closure_stack.v);
    free(c->lazy_mark);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

/* The NFA list entry of state x (borrowed), or NULL with IndexError. */
static PyObject *nfa_item(PyObject *list, Py_ssize_t x) {
    if (x < 0 || x >= PyList_GET_SIZE(list)) {
        PyErr_Format(PyExc_IndexError, "determinise: NFA state %zd out of range", x);
        return NULL;
    }
    return PyList_GET_ITEM(list, x);
}

static int as_int32(PyObject *obj, int32_t *out) {
    long v = PyLong_AsLong(obj);
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = (int32_t)v;
    return 0;
}

/* Grow the per-NFA-state arrays to cover the NFA's current size. */
static int fit_nfa(Core *c) {
    Py_ssize_t need = PyList_GET_SIZE(c->eps);
    if (need <= c->nfa_cap) return 0;
    /* From 256 up: calloc zeroes what it hands out from the heap, and a first size of 1024
     * zeroed 37 KB even for the tree schema's 291-state NFA (2.4% of its back end). */
    Py_ssize_t cap = c->nfa_cap ? c->nfa_cap : 256;
    while (cap < need) cap *= 2;
    if (!c->nfa_cap) {
        /* Zeroed by calloc: for a schema's NFA these arrays are hundreds of KB, fresh pages
         * that writing "not computed" into every entry used to fault in (~100 us a compile);
         * untouched, a page is faulted in only when a state on it is first closed. */
        c->closure = calloc((size_t)cap, sizeof(IntSet));
        c->important = calloc((size_t)cap, sizeof(IntSet));
        c->mark = calloc((size_t)cap, sizeof(uint32_t));
        if (!c->closure || !c->important || !c->mark) return PyErr_NoMemory(), -1;
        c->nfa_cap = cap;
        return 0;
    }
    IntSet *clo = realloc(c->closure, sizeof(IntSet) * (size_t)cap);
    if (!clo) return PyErr_NoMemory(), -1;
    c->closure = clo;
    IntSet *imp = realloc(c->important, sizeof(IntSet) * (size_t)cap);
    if (!imp) return PyErr_NoMemory(), -1;
    c->important = imp;
    uint32_t *mark = realloc(c->mark, sizeof(uint32_t) * (size_t)cap);
    if (!mark) return PyErr_NoMemory(), -1;
    c->mark = mark;
    size_t more = (size_t)(cap - c->nfa_cap);
    memset(c->closure + c->nfa_cap, 0, sizeof(IntSet) * more);
    memset(c->important + c->nfa_cap, 0, sizeof(IntSet) * more);
    memset(c->mark + c->nfa_cap, 0, sizeof(uint32_t) * more);
    c->nfa_cap = cap;
    return 0;
}

/* A fresh marking generation (marks of older generations read as unmarked). */
static void next_gen(Core *c) {
    if (++c->gen == 0) {
        memset(c->mark, 0, sizeof(uint32_t) * (size_t)c->nfa_cap);
        c->gen = 1;
    }
}

static int is_live(Core *c, Py_ssize_t y, int *out) {
    PyObject *flag = nfa_item(c->live, y);
    if (!flag) return -1;
    *out = PyObject_IsTrue(flag);
    return *out < 0 ? -1 : 0;
}

/* States a lazily copied repetition continues with after exit state x (new reference, a
 * list), or Py_None when x is no such exit. Pasting a copy grows the NFA lists. */
/* Mark the keys lazy_exits gained since the last call (a dict that only gains keys keeps
 * their order and positions, so reading goes on from where it stopped; if it ever had
 * fewer keys than seen, it is read again from the start). */
static int sync_lazy_marks(Core *c) {
    Py_ssize_t size = PyDict_GET_SIZE(c->lazy_exits);
    if (size == c->lazy_seen) return 0;
    if (size < c->lazy_seen) {
        c->lazy_pos = 0;
        if (c->lazy_mark) memset(c->lazy_mark, 0, (size_t)c->lazy_mark_cap);
    }
    PyObject *key, *value;
    while (PyDict_Next(c->lazy_exits, &c->lazy_pos, &key, &value)) {
        long x = PyLong_AsLong(key);
        if (x == -1 && PyErr_Occurred()) return -1;
        if (x < 0) continue;
        if (x >= c->lazy_mark_cap) {
            Py_ssize_t cap = c->lazy_mark_cap ? c->lazy_mark_cap : 1024;
            while (cap <= x) cap *= 2;
            uint8_t *more = realloc(c->lazy_mark, (size_t)cap);
            if (!more) return PyErr_NoMemory(), -1;
            memset(more + c->lazy_mark_cap, 0, (size_t)(cap - c->lazy_mark_cap));
            c->lazy_mark = more;
            c->lazy_mark_cap = cap;
        }
        c->lazy_mark[x] = 1;
    }
    c->lazy_seen = size;
    return 0;
}

static PyObject *lazy_successors(Core *c, int32_t x) {
    if (PyDict_GET_SIZE(c->lazy_exits) == 0) Py_RETURN_NONE;
    /* Most states are no exit: a mark spares making an int and looking it up. */
    if (sync_lazy_marks(c) < 0) return NULL;
    if (x < 0 || x >= c->lazy_mark_cap || !c->lazy_mark[x]) Py_RETURN_NONE;
    PyObject *key = PyLong_FromLong(x);
    if (!key) return NULL;
    PyObject *entry = PyDict_GetItemWithError(c->lazy_exits, key);
    Py_DECREF(key);
    if (!entry) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
        PyErr_SetString(PyExc_TypeError, "determinise: lazy_exits values are (record, done)");
        return NULL;
    }
    return PyObject_CallMethod(PyTuple_GET_ITEM(entry, 0), "successors", "O",
                               PyTuple_GET_ITEM(entry, 1));
}

/* Epsilon closure of NFA state s through live states (memoised; the result stays valid when
 * the per-state arrays move, since each set is its own allocation). */
static int closure_of(Core *c, int32_t s, IntSet *out) {
    if (fit_nfa(c) < 0) return -1;
    if (s < 0 || s >= c->nfa_cap) {
        PyErr_Format(PyExc_IndexError, "determinise: NFA state %d out of range", s);
        return -1;
    }
    if (c->closure[s].v) {
        *out = c->closure[s];
        return 0;
    }
    IntVec seen = {0}, local = {0}, *stack = &local;
    if (!c->closure_busy) { /* a nested closure (none known) makes its own */
        stack = &c->closure_stack;
        stack->n = 0;
        c->closure_busy = 1;
    }
    next_gen(c);
    uint32_t gen = c->gen;
    c->mark[s] = gen;
    if (vec_push(&seen, s) < 0 || vec_push(stack, s) < 0) goto fail;
    while (stack->n) {
        int32_t x = stack->v[--stack->n];
        PyObject *eps = nfa_item(c->eps, x);
        if (!eps) goto fail;
        PyObject *more = lazy_successors(c, x);
        if (!more) goto fail;
        if (fit_nfa(c) < 0) {
            Py_DECREF(more);
            goto fail;
        }
        /* fit_nfa may have reset marks only by growing; the generation is unchanged. */
        for (int part = 0; part < 2; part++) {
            PyObject *seq = part == 0 ? eps : more;
            if (seq == Py_None) continue;
            Py_ssize_t n;
            PyObject **items;
            if (items_of(seq, &items, &n, "epsilon edges") < 0) {
                Py_DECREF(more);
                goto fail;
            }
            for (Py_ssize_t i = 0; i < n; i++) {
                int32_t y;
                int alive;
                if (as_int32(items[i], &y) < 0) {
                    Py_DECREF(more);
                    goto fail;
                }
                if (part == 0) y += x; /* epsilon edges are relative, successors not */
                if (is_live(c, y, &alive) < 0) {
                    Py_DECREF(more);
                    goto fail;
                }
                if (!alive || c->mark[y] == gen) continue;
                IntSet known = c->closure[y];
                if (known.v) { /* already closed: take it whole */
                    for (Py_ssize_t k = 0; k < known.n; k++) {
                        int32_t z = known.v[k];
                        if (c->mark[z] != gen) {
                            c->mark[z] = gen;
                            if (vec_push(&seen, z) < 0) {
                                Py_DECREF(more);
                                goto fail;
                            }
                        }
                    }
                } else {
                    c->mark[y] = gen;
                    if (vec_push(&seen, y) < 0 || vec_push(stack, y) < 0) {
                        Py_DECREF(more);
                        goto fail;
                    }
                }
            }
        }
        Py_DECREF(more);
    }
    if (stack == &local) free(local.v);
    else c->closure_busy = 0;
    qsort(seen.v, (size_t)seen.n, sizeof(int32_t), cmp_int32);
    c->closure[s].v = seen.v;
    c->closure[s].n = seen.n;
    *out = c->closure[s];
    return 0;
fail:
    free(seen.v);
    if (stack == &local) free(local.v);
    else c->closure_busy = 0;
    return -1;
}

/* Whether NFA state x matters to a DFA state: it has a byte or call edge, or ends the rule. */
static int is_important(Core *c, int32_t x, int32_t end) {
    if (x == end) return 1;
    PyObject *be = nfa_item(c->byte_edges, x);
    if (!be) return -1;
    Py_ssize_t n;
    PyObject **items;
    if (items_of(be, &items, &n, "byte edges") < 0) return -1;
    if (n) return 1;
    PyObject *ce = nfa_item(c->call_edges, x);
    if (!ce) return -1;
    if (items_of(ce, &items, &n, "call edges") < 0) return -1;
    return n > 0;
}

/* The important part of a sorted set, into out (sorted). */
static int important_part(Core *c, const int32_t *v, Py_ssize_t n, int32_t end, IntVec *out) {
    for (Py_ssize_t i = 0; i < n; i++) {
        int keep = is_important(c, v[i], end);
        if (keep < 0) return -1;
        if (keep && vec_push(out, v[i]) < 0) return -1;
    }
    return 0;
}

/* Important part of t's closure (memoised per t: a closure stays inside one rule, so end is
 * always the same for t). */
static int important_closure(Core *c, int32_t t, int32_t end, IntSet *out) {
    IntSet clo;
    if (closure_of(c, t, &clo) < 0) return -1;
    if (c->important[t].v) {
        *out = c->important[t];
        return 0;
    }
    IntVec kept = {0};
    if (important_part(c, clo.v, clo.n, end, &kept) < 0) {
        free(kept.v);
        return -1;
    }
    c->important[t].v = kept.v ? kept.v : no_items;
    c->important[t].n = kept.n;
    *out = c->important[t];
    return 0;
}

static uint64_t hash_set(int32_t rule, const int32_t *v, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)(uint32_t)rule;
    for (Py_ssize_t i = 0; i < n; i++) {
        h ^= (uint64_t)(uint32_t)v[i];
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 29;
    }
    return h ^ (uint64_t)n;
}

static int rehash(Core *c, Py_ssize_t n_slots) {
    int32_t *slots = malloc(sizeof(int32_t) * (size_t)n_slots);
    if (!slots) return PyErr_NoMemory(), -1;
    for (Py_ssize_t i = 0; i < n_slots; i++) slots[i] = -1;
    for (Py_ssize_t q = 0; q < c->n_states; q++) {
        Py_ssize_t at = (Py_ssize_t)(c->st_hash[q] & (uint64_t)(n_slots - 1));
        while (slots[at] >= 0) at = (at + 1) & (n_slots - 1);
        slots[at] = (int32_t)q;
    }
    free(c->slots);
    c->slots = slots;
    c->n_slots = n_slots;
    return 0;
}

static int append_none(PyObject *list) { return PyList_Append(list, Py_None); }

/* The id of DFA state (rule, v) (sorted, distinct), made if new. */
static int32_t intern(Core *c, int32_t rule, const int32_t *v, Py_ssize_t n) {
    uint64_t h = hash_set(rule, v, n);
    Py_ssize_t at = (Py_ssize_t)(h & (uint64_t)(c->n_slots - 1));
    for (; c->slots[at] >= 0; at = (at + 1) & (c->n_slots - 1)) {
        int32_t q = c->slots[at];
        if (c->st_hash[q] == h && c->st_rule[q] == rule && c->st_len[q] == n &&
            memcmp(c->pool + c->st_off[q], v, sizeof(int32_t) * (size_t)n) == 0)
            return q;
    }
    if (c->n_states >= INT32_MAX - 1) {
        PyErr_SetString(PyExc_OverflowError, "determinise: too many DFA states");
        return -1;
    }
    if (c->n_states == c->st_cap) {
        Py_ssize_t cap = c->st_cap * 2;
        /* Each per-state array grows in turn; one that fails leaves the others larger, and
         * st_cap unchanged, which is consistent. */
#define GROW(field)                                                             \
    do {                                                                        \
        void *more = realloc(c->field, sizeof(*c->field) * (size_t)cap);       \
        if (!more) return PyErr_NoMemory(), -1;                                 \
        c->field = more;                                                        \
    } while (0)
        GROW(st_rule);
        GROW(st_off);
        GROW(st_len);
        GROW(st_hash);
        GROW(seg_off);
        GROW(tgt_off);
        GROW(seg_n);
        GROW(tgt_n);
#undef GROW
        c->st_cap = cap;
    }
    if (c->pool_n + n > c->pool_cap) {
        Py_ssize_t cap = c->pool_cap * 2;
        while (cap < c->pool_n + n) cap *= 2;
        int32_t *pool = realloc(c->pool, sizeof(int32_t) * (size_t)cap);
        if (!pool) return PyErr_NoMemory(), -1;
        c->pool = pool;
        c->pool_cap = cap;
    }
    int accepting = 0;
    int32_t end = c->ends[rule];
    Py_ssize_t a = 0, b = n; /* binary search for the rule's end */
    while (a < b) {
        Py_ssize_t mid = a + (b - a) / 2;
        if (v[mid] < end) a = mid + 1;
        else b = mid;
    }
    accepting = a < n && v[a] == end;
    if (append_none(c->trans_rows) < 0 || append_none(c->row_targets) < 0 ||
        append_none(c->row_segments) < 0 || append_none(c->calls) < 0 ||
        PyList_Append(c->accepting, accepting ? Py_True : Py_False) < 0 ||
        PyList_Append(c->has_bytes, Py_False) < 0)
        return -1;
    int32_t q = (int32_t)c->n_states++;
    memcpy(c->pool + c->pool_n, v, sizeof(int32_t) * (size_t)n);
    c->st_rule[q] = rule;
    c->st_off[q] = c->pool_n;
    c->st_len[q] = n;
    c->st_hash[q] = h;
    c->seg_n[q] = -1; /* not built */
    c->tgt_n[q] = 0;
    c->seg_off[q] = c->tgt_off[q] = 0;
    c->pool_n += n;
    c->slots[at] = q;
    if (2 * c->n_states > c->n_slots && rehash(c, c->n_slots * 2) < 0) return -1;
    return q;
}

/* Sorted union of sets, into out (uses the marks). */
static int union_into(Core *c, IntVec *out) {
    next_gen(c);
    Py_ssize_t w = 0;
    for (Py_ssize_t i = 0; i < out->n; i++) {
        int32_t x = out->v[i];
        if (c->mark[x] != c->gen) {
            c->mark[x] = c->gen;
            out->v[w++] = x;
        }
    }
    out->n = w;
    qsort(out->v, (size_t)w, sizeof(int32_t), cmp_int32);
    return 0;
}

static int core_init(Core *c, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"eps", "byte_edges", "call_edges", "live", "lazy_exits", "call_rule",
                         "ends", "trans_rows", "row_targets", "row_segments", "calls",
                         "accepting", "has_bytes", NULL};
    PyObject *o[13], *ends;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O!O!O!O!OO!O!O!O!O!O!", kw, &PyList_Type,
                                     &o[0], &PyList_Type, &o[1], &PyList_Type, &o[2],
                                     &PyList_Type, &o[3], &PyDict_Type, &o[4], &PyDict_Type,
                                     &o[5], &ends, &PyList_Type, &o[7], &PyList_Type, &o[8],
                                     &PyList_Type, &o[9], &PyList_Type, &o[10], &PyList_Type,
                                     &o[11], &PyList_Type, &o[12]))
        return -1;
    if (c->slots) {
        PyErr_SetString(PyExc_RuntimeError, "determinise: Core is initialised once");
        return -1;
    }
    PyObject **fields[12] = {&c->eps, &c->byte_edges, &c->call_edges, &c->live, &c->lazy_exits,
                             &c->call_rule, &c->trans_rows, &c->row_targets, &c->row_segments,
                             &c->calls, &c->accepting, &c->has_bytes};
    int src[12] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12};
    for (int i = 0; i < 12; i++) {
        Py_INCREF(o[src[i]]);
        *fields[i] = o[src[i]];
    }
    Py_ssize_t n;
    PyObject **items;
    if (items_of(ends, &items, &n, "ends") < 0) return -1;
    c->ends = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!c->ends) return PyErr_NoMemory(), -1;
    for (Py_ssize_t i = 0; i < n; i++)
        if (as_int32(items[i], &c->ends[i]) < 0) return -1;
    c->n_rules = n;
    c->st_cap = 256;
    c->st_rule = malloc(sizeof(int32_t) * 256);
    c->st_off = malloc(sizeof(Py_ssize_t) * 256);
    c->st_len = malloc(sizeof(Py_ssize_t) * 256);
    c->st_hash = malloc(sizeof(uint64_t) * 256);
    c->seg_off = malloc(sizeof(Py_ssize_t) * 256);
    c->tgt_off = malloc(sizeof(Py_ssize_t) * 256);
    c->seg_n = malloc(sizeof(int32_t) * 256);
    c->tgt_n = malloc(sizeof(int32_t) * 256);
    c->pool_cap = 4096;
    c->pool = malloc(sizeof(int32_t) * 4096);
    if (!c->st_rule || !c->st_off || !c->st_len || !c->st_hash || !c->pool || !c->seg_off ||
        !c->tgt_off || !c->seg_n || !c->tgt_n)
        return PyErr_NoMemory(), -1;
    if (rehash(c, 1024) < 0) return -1;
    return fit_nfa(c);
}

static int check_rule(Core *c, long rule) {
    if (rule < 0 || rule >= c->n_rules) {
        PyErr_Format(PyExc_IndexError, "determinise: rule %ld out of range", rule);
        return -1;
    }
    return 0;
}

static PyObject *core_intern_start(Core *c, PyObject *args) {
    long rule, start;
    int alive;
    if (!PyArg_ParseTuple(args, "ll", &rule, &start) || check_rule(c, rule) < 0) return NULL;
    if (is_live(c, start, &alive) < 0) return NULL;
    IntVec kept = {0};
    if (alive) {
        IntSet clo;
        if (closure_of(c, (int32_t)start, &clo) < 0 ||
            important_part(c, clo.v, clo.n, c->ends[rule], &kept) < 0) {
            free(kept.v);
            return NULL;
        }
    }
    int32_t q = intern(c, (int32_t)rule, kept.v, kept.n);
    free(kept.v);
    return q < 0 ? NULL : PyLong_FromLong(q);
}

/* Collect the live byte edges of the NFA states in v, into sc's edge buffer. */
static int gather_edges(Core *c, const int32_t *v, Py_ssize_t n, Scratch *sc,
                        Py_ssize_t *count) {
    Py_ssize_t cap = sc->edge_cap, k = 0;
    Edge *edges = sc->edges;
    if (cap < 16) {
        cap = 16;
        edges = realloc(edges, sizeof(Edge) * (size_t)cap);
        if (!edges) return PyErr_NoMemory(), -1;
        sc->edges = edges;
        sc->edge_cap = cap;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *be = nfa_item(c->byte_edges, v[i]);
        Py_ssize_t m;
        PyObject **items;
        if (!be || items_of(be, &items, &m, "byte edges") < 0) goto fail;
        for (Py_ssize_t j = 0; j < m; j++) {
            PyObject *e = items[j];
            if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 3) {
                PyErr_SetString(PyExc_TypeError, "determinise: byte edges are (lo, hi, target)");
                goto fail;
            }
            Edge edge;
            int alive;
            if (as_int32(PyTuple_GET_ITEM(e, 0), &edge.lo) < 0 ||
                as_int32(PyTuple_GET_ITEM(e, 1), &edge.hi) < 0 ||
                as_int32(PyTuple_GET_ITEM(e, 2), &edge.t) < 0)
                goto fail;
            edge.t += v[i]; /* relative to its source */
            if (is_live(c, edge.t, &alive) < 0) goto fail;
            if (!alive) continue;
            if (edge.lo < 0 || edge.hi > 255 || edge.lo > edge.hi) {
                PyErr_SetString(PyExc_ValueError, "determinise: byte edge outside 0..255");
                goto fail;
            }
            if (k == cap) {
                cap *= 2;
                Edge *more = realloc(edges, sizeof(Edge) * (size_t)cap);
                if (!more) {
                    PyErr_NoMemory();
                    goto fail;
                }
                edges = sc->edges = more;
                sc->edge_cap = cap;
            }
            edges[k++] = edge;
        }
    }
    *count = k;
    return 0;
fail:
    return -1;
}

typedef struct {
    Py_ssize_t off, n; /* a covering target set in the row's scratch pool */
    int32_t target;
} Cover;

/* Build the byte row of DFA state q as its distinct targets and segments. */
static int build_row(Core *c, int32_t rule, const int32_t *v, Py_ssize_t n, Scratch *sc,
                     int *has_bytes) {
    Py_ssize_t n_edges = 0;
    if (gather_edges(c, v, n, sc, &n_edges) < 0) return -1;
    const Edge *edges = sc->edges;
    IntVec *targets = &sc->vec[SC_TARGETS], *segs = &sc->vec[SC_SEGS];
    *has_bytes = n_edges > 0;
    if (!n_edges) return 0;
    int32_t end = c->ends[rule];
    /* The bounds of the edges' ranges, sorted: a state has a few edges, and scanning all
     * 257 positions for them was a quarter of building it. */
    unsigned char bound[257] = {0};
    int points[257], n_points = 0;
    for (Py_ssize_t i = 0; i < n_edges; i++) {
        int ends[2] = {edges[i].lo, edges[i].hi + 1};
        for (int e = 0; e < 2; e++) {
            if (bound[ends[e]]) continue;
            bound[ends[e]] = 1;
            int k = n_points++;
            while (k > 0 && points[k - 1] > ends[e]) {
                points[k] = points[k - 1];
                k--;
            }
            points[k] = ends[e];
        }
    }
    IntVec *scratch = &sc->vec[SC_SCRATCH], *cover = &sc->vec[SC_COVER], *next = &sc->vec[SC_NEXT];
    scratch->n = 0;
    Cover covers[257];
    int n_covers = 0, rc = -1;
    int a = -1;
    for (int pi = 0; pi < n_points; pi++) {
        int p = points[pi];
        if (a >= 0) {
            int b = p; /* piece [a, b): the covering edges are constant on it */
            cover->n = 0;
            for (Py_ssize_t i = 0; i < n_edges; i++)
                if (edges[i].lo <= a && a <= edges[i].hi && vec_push(cover, edges[i].t) < 0)
                    goto done;
            if (cover->n) {
                if (union_into(c, cover) < 0) goto done;
                int32_t target = -1;
                for (int k = 0; k < n_covers && target < 0; k++)
                    if (covers[k].n == cover->n &&
                        memcmp(scratch->v + covers[k].off, cover->v,
                               sizeof(int32_t) * (size_t)cover->n) == 0)
                        target = covers[k].target;
                if (target < 0) {
                    next->n = 0;
                    for (Py_ssize_t i = 0; i < cover->n; i++) {
                        IntSet imp;
                        if (important_closure(c, cover->v[i], end, &imp) < 0) goto done;
                        for (Py_ssize_t k = 0; k < imp.n; k++)
                            if (vec_push(next, imp.v[k]) < 0) goto done;
                    }
                    if (cover->n > 1 && union_into(c, next) < 0) goto done;
                    target = intern(c, rule, next->v, next->n);
                    if (target < 0) goto done;
                    int seen = 0;
                    for (Py_ssize_t k = 0; k < targets->n && !seen; k++)
                        seen = targets->v[k] == target;
                    if (!seen && vec_push(targets, target) < 0) goto done;
                    covers[n_covers].off = scratch->n;
                    covers[n_covers].n = cover->n;
                    covers[n_covers].target = target;
                    n_covers++;
                    for (Py_ssize_t i = 0; i < cover->n; i++)
                        if (vec_push(scratch, cover->v[i]) < 0) goto done;
                }
                if (segs->n && segs->v[segs->n - 2] == a && segs->v[segs->n - 1] == target) {
                    segs->v[segs->n - 2] = b;
                } else if (vec_push(segs, a) < 0 || vec_push(segs, b) < 0 ||
                           vec_push(segs, target) < 0) {
                    goto done;
                }
            }
        }
        a = p;
    }
    rc = 0;
done:
    return rc;
}

/* Call edges of the NFA states in v: a tuple of (called rule, return state), by rule. */
static PyObject *build_calls(Core *c, int32_t rule, const int32_t *v, Py_ssize_t n) {
    IntVec pairs = {0}; /* (called rule, target) */
    IntVec set = {0}, kept = {0};
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ce = nfa_item(c->call_edges, v[i]);
        Py_ssize_t m;
        PyObject **items;
        if (!ce || items_of(ce, &items, &m, "call edges") < 0) goto done;
        for (Py_ssize_t j = 0; j < m; j++) {
            PyObject *e = items[j];
            if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 2) {
                PyErr_SetString(PyExc_TypeError, "determinise: call edges are (name, target)");
                goto done;
            }
            int32_t t, called;
            int alive;
            if (as_int32(PyTuple_GET_ITEM(e, 1), &t) < 0) goto done;
            t += v[i]; /* relative to its source */
            if (is_live(c, t, &alive) < 0) goto done;
            if (!alive) continue;
            PyObject *ri = PyDict_GetItemWithError(c->call_rule, PyTuple_GET_ITEM(e, 0));
            if (!ri) {
                if (PyErr_Occurred()) goto done;
                continue; /* a rule that matches nothing */
            }
            if (as_int32(ri, &called) < 0) goto done;
            if (vec_push(&pairs, called) < 0 || vec_push(&pairs, t) < 0) goto done;
            /* Closed here, in edge order: a closure may paste repetition copies, which
             * number NFA states in the order the reference determiniser meets them. */
            IntSet clo;
            if (closure_of(c, t, &clo) < 0) goto done;
        }
    }
    /* Rules in ascending order, each once: the order the Python reference interns in. */
    IntVec rules = {0};
    for (Py_ssize_t i = 0; i < pairs.n; i += 2)
        if (vec_push(&rules, pairs.v[i]) < 0) {
            free(rules.v);
            goto done;
        }
    if (rules.n) union_into(c, &rules);
    result = PyTuple_New(rules.n);
    if (!result) {
        free(rules.v);
        goto done;
    }
    for (Py_ssize_t r = 0; r < rules.n; r++) {
        set.n = 0;
        for (Py_ssize_t i = 0; i < pairs.n; i += 2) {
            if (pairs.v[i] != rules.v[r]) continue;
            IntSet clo;
            if (closure_of(c, pairs.v[i + 1], &clo) < 0) goto fail_rules;
            for (Py_ssize_t k = 0; k < clo.n; k++)
                if (vec_push(&set, clo.v[k]) < 0) goto fail_rules;
        }
        union_into(c, &set);
        kept.n = 0;
        if (important_part(c, set.v, set.n, c->ends[rule], &kept) < 0) goto fail_rules;
        int32_t q = intern(c, rule, kept.v, kept.n);
        if (q < 0) goto fail_rules;
        PyObject *pair = Py_BuildValue("(ii)", rules.v[r], q);
        if (!pair) goto fail_rules;
        untrack_acyclic(pair);
        PyTuple_SET_ITEM(result, r, pair);
    }
    free(rules.v);
    goto done;
fail_rules:
    free(rules.v);
    Py_CLEAR(result);
done:
    free(pairs.v);
    free(set.v);
    free(kept.v);
    return result;
}

static PyObject *int_list(const int32_t *v, Py_ssize_t n) {
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLong(v[i]);
        if (!x) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, x);
    }
    return list;
}

/* Whether DFA state q is built (its row is in the pools). */
static int is_built(Core *c, long q) { return c->seg_n[q] >= 0; }

/* Build DFA state q: its row into the pools, its calls and has_bytes into the Automaton's
 * lists (0, or -1 with an exception). */
static int ensure_state(Core *c, long q) {
    if (q < 0 || q >= c->n_states) {
        PyErr_Format(PyExc_IndexError, "determinise: DFA state %ld out of range", q);
        return -1;
    }
    if (is_built(c, q)) return 0;
    int32_t rule = c->st_rule[q];
    Py_ssize_t n = c->st_len[q];
    Scratch local = {0}, *sc = scratch_take(c, &local);
    IntVec *set = &sc->vec[SC_SET], *targets = &sc->vec[SC_TARGETS], *segs = &sc->vec[SC_SEGS];
    int has_bytes = 0;
    PyObject *calls = NULL;
    int result = -1;
    /* a copy: interning new states may move the pool */
    for (Py_ssize_t i = 0; i < n; i++)
        if (vec_push(set, c->pool[c->st_off[q] + i]) < 0) goto done;
    const int32_t *v = set->v;
    if (build_row(c, rule, v, n, sc, &has_bytes) < 0) goto done;
    calls = build_calls(c, rule, v, n);
    if (!calls) goto done;
    Py_ssize_t seg_at = c->segpool.n, tgt_at = c->tgtpool.n;
    for (Py_ssize_t i = 0; i < segs->n; i++)
        if (vec_push(&c->segpool, segs->v[i]) < 0) goto done;
    for (Py_ssize_t i = 0; i < targets->n; i++)
        if (vec_push(&c->tgtpool, targets->v[i]) < 0) goto done;
    if (PyList_SetItem(c->calls, q, calls) < 0) {
        calls = NULL;
        goto done;
    }
    calls = NULL;
    Py_INCREF(has_bytes ? Py_True : Py_False);
    if (PyList_SetItem(c->has_bytes, q, has_bytes ? Py_True : Py_False) < 0) goto done;
    /* last: a row in the pools marks the state as built */
    c->seg_off[q] = seg_at;
    c->tgt_off[q] = tgt_at;
    c->tgt_n[q] = (int32_t)targets->n;
    c->seg_n[q] = (int32_t)(segs->n / 3);
    result = 0;
done:
    scratch_give(sc, &local);
    Py_XDECREF(calls);
    return result;
}

/* The segments of built state q: *out points at seg_n triples (lo, hi excl., target). */
static int32_t built_segments(Core *c, long q, const int32_t **out) {
    *out = c->segpool.v + c->seg_off[q];
    return c->seg_n[q];
}

/* The state number q of a Python call, checked and built (-1 with an exception). */
static int built_arg(Core *c, PyObject *args, long *q) {
    if (!PyArg_ParseTuple(args, "l", q) || ensure_state(c, *q) < 0) return -1;
    return 0;
}

/* Python lists of built state q's row, made from the pools (new references). */
static PyObject *row_list(Core *c, long q) {
    int32_t row[256];
    for (int b = 0; b < 256; b++) row[b] = -1;
    const int32_t *segs;
    int32_t n = built_segments(c, q, &segs);
    for (int32_t i = 0; i < n; i++)
        for (int32_t b = segs[3 * i]; b < segs[3 * i + 1]; b++) row[b] = segs[3 * i + 2];
    PyObject *list = PyList_New(256);
    if (!list) return NULL;
    PyObject *cell = NULL;
    int32_t cell_value = 0;
    for (int b = 0; b < 256; b++) { /* one int object per run of equal targets */
        if (!cell || row[b] != cell_value) {
            cell = PyLong_FromLong(row[b]);
            if (!cell) {
                Py_DECREF(list);
                return NULL;
            }
            cell_value = row[b];
        } else {
            Py_INCREF(cell);
        }
        PyList_SET_ITEM(list, b, cell);
    }
    return list;
}

static PyObject *segment_list(Core *c, long q) {
    const int32_t *segs;
    int32_t n = built_segments(c, q, &segs);
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (int32_t i = 0; i < n; i++) {
        PyObject *seg = Py_BuildValue("(iii)", segs[3 * i], segs[3 * i + 1], segs[3 * i + 2]);
        if (!seg) {
            Py_DECREF(list);
            return NULL;
        }
        untrack_acyclic(seg);
        PyList_SET_ITEM(list, i, seg);
    }
    return list;
}

static PyObject *target_list(Core *c, long q) {
    return int_list(c->tgtpool.v + c->tgt_off[q], c->tgt_n[q]);
}

/* The Python list `make` gives for state q (the args' one number), built if need be and kept
 * in store[q] (one of the Automaton's trans_rows, row_segments, row_targets): made once, on
 * the first request. */
static PyObject *kept_list(Core *c, PyObject *args, PyObject *store,
                           PyObject *(*make)(Core *, long)) {
    long q;
    if (built_arg(c, args, &q) < 0) return NULL;
    PyObject *got = PyList_GET_ITEM(store, q);
    if (got != Py_None) {
        Py_INCREF(got);
        return got;
    }
    PyObject *list = make(c, q);
    if (!list) return NULL;
    untrack_acyclic(list);
    Py_INCREF(list);
    if (PyList_SetItem(store, q, list) < 0) {
        Py_DECREF(list);
        return NULL;
    }
    return list;
}

/* Python: row(q) -> list of 256 targets (-1: refused); segments(q) -> list of (lo, hi excl.,
 * target); targets(q) -> q's distinct successors. Each builds q if needed. */
static PyObject *core_row(Core *c, PyObject *args) {
    return kept_list(c, args, c->trans_rows, row_list);
}

static PyObject *core_segments(Core *c, PyObject *args) {
    return kept_list(c, args, c->row_segments, segment_list);
}

static PyObject *core_targets(Core *c, PyObject *args) {
    return kept_list(c, args, c->row_targets, target_list);
}

/* Python: ensure(q). */
/* Whether DFA state q may end its rule (its NFA set holds the rule's end). */
static int state_accepting(Core *c, long q) {
    const int32_t *v = c->pool + c->st_off[q];
    Py_ssize_t a = 0, b = c->st_len[q];
    int32_t end = c->ends[c->st_rule[q]];
    while (a < b) {
        Py_ssize_t mid = a + (b - a) / 2;
        if (v[mid] < end) a = mid + 1;
        else b = mid;
    }
    return a < c->st_len[q] && v[a] == end;
}

/* Whether some NFA state of DFA state q has a call edge (1), not (0), or -1 on error. */
static int state_calls(Core *c, long q) {
    for (Py_ssize_t i = 0; i < c->st_len[q]; i++) {
        PyObject *ce = nfa_item(c->call_edges, c->pool[c->st_off[q] + i]);
        Py_ssize_t m;
        PyObject **items;
        if (!ce || items_of(ce, &items, &m, "call edges") < 0) return -1;
        if (m) return 1;
    }
    return 0;
}

/* The state after byte `byte` from DFA state q (-1: refused; -2 with an exception), without
 * building q's whole row when it is not built: the same target set build_row would make for
 * that byte, interned alone. A long token walked through a counted repetition (80 spaces
 * in a maxLength string) then makes one state a byte, not the nine of each position's row. */
static int32_t step_state(Core *c, long q, int byte) {
    if (is_built(c, q)) {
        const int32_t *seg;
        int32_t n_seg = built_segments(c, q, &seg);
        for (int32_t k = 0; k < n_seg; k++)
            if (seg[3 * k] <= byte && byte < seg[3 * k + 1]) return seg[3 * k + 2];
        return -1;
    }
    Scratch local = {0}, *sc = scratch_take(c, &local);
    IntVec *set = &sc->vec[SC_SET], *cover = &sc->vec[SC_COVER], *next = &sc->vec[SC_NEXT];
    int32_t rule = c->st_rule[q], result = -2;
    Py_ssize_t n = c->st_len[q], n_edges = 0;
    for (Py_ssize_t i = 0; i < n; i++) /* a copy: interning may move the pool */
        if (vec_push(set, c->pool[c->st_off[q] + i]) < 0) goto done;
    if (gather_edges(c, set->v, n, sc, &n_edges) < 0) goto done;
    for (Py_ssize_t i = 0; i < n_edges; i++)
        if (sc->edges[i].lo <= byte && byte <= sc->edges[i].hi &&
            vec_push(cover, sc->edges[i].t) < 0)
            goto done;
    if (!cover->n) {
        result = -1;
        goto done;
    }
    if (union_into(c, cover) < 0) goto done;
    for (Py_ssize_t i = 0; i < cover->n; i++) {
        IntSet imp;
        if (important_closure(c, cover->v[i], c->ends[rule], &imp) < 0) goto done;
        for (Py_ssize_t k = 0; k < imp.n; k++)
            if (vec_push(next, imp.v[k]) < 0) goto done;
    }
    if (cover->n > 1 && union_into(c, next) < 0) goto done;
    result = intern(c, rule, next->v, next->n);
    if (result < 0) result = -2;
done:
    scratch_give(sc, &local);
    return result;
}

/* walk_bytes(q, data, follow) -> 1 when every byte of data goes on from DFA state q within
 * its rule's frame, 0 when a byte is refused first, -1 when the frame alone cannot tell (a
 * state on the way calls a rule, or could end its rule with a byte of follow, 256 flags,
 * next): the trie walk decides those. States are made byte by byte (step_state). */
static PyObject *core_walk_bytes(Core *c, PyObject *args) {
    long q;
    Py_buffer data, follow;
    if (!PyArg_ParseTuple(args, "ly*y*", &q, &data, &follow)) return NULL;
    long verdict = 1;
    if (follow.len != 256) {
        PyErr_SetString(PyExc_ValueError, "walk_bytes: follow holds 256 flags");
        verdict = -2;
        goto done;
    }
    const unsigned char *bytes = data.buf, *after = follow.buf;
    for (Py_ssize_t i = 0; i < data.len; i++) {
        if (q < 0 || q >= c->n_states) {
            PyErr_Format(PyExc_IndexError, "walk_bytes: DFA state %ld out of range", q);
            verdict = -2;
            goto done;
        }
        int calls = state_calls(c, q);
        if (calls < 0) {
            verdict = -2;
            goto done;
        }
        if (calls || (i > 0 && after[bytes[i]] && state_accepting(c, q))) {
            verdict = -1;
            goto done;
        }
        int32_t t = step_state(c, q, bytes[i]);
        if (t == -2) {
            verdict = -2;
            goto done;
        }
        if (t < 0) {
            verdict = 0;
            goto done;
        }
        q = t;
    }
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&follow);
    return verdict == -2 ? NULL : PyLong_FromLong(verdict);
}

static PyObject *core_ensure(Core *c, PyObject *args) {
    long q;
    if (!PyArg_ParseTuple(args, "l", &q) || ensure_state(c, q) < 0) return NULL;
    Py_RETURN_NONE;
}

/* Row sid of the parser-state table (rows x 256 int32, flags per row) for the one-frame state
 * of built DFA state q, each target t written as parser state 2t: 1 when written, 0 when q
 * calls a rule (its closure is more than one stack) or a target lies past the table, -1 with
 * an exception. */
static int write_plain(Core *c, long q, int32_t *table, Py_ssize_t rows, uint8_t *filled,
                       uint8_t *finishes, long sid) {
    if (q < 0 || q >= c->n_states || !is_built(c, q)) {
        PyErr_Format(PyExc_ValueError, "determinise: DFA state %ld is not built", q);
        return -1;
    }
    if (sid < 0 || sid >= rows) {
        PyErr_SetString(PyExc_IndexError, "write_plain_row: row out of range");
        return -1;
    }
    PyObject *calls = PyList_GET_ITEM(c->calls, q);
    if (!PyTuple_Check(calls) || PyTuple_GET_SIZE(calls) > 0) return 0;
    const int32_t *segs;
    int32_t n_segs = built_segments(c, q, &segs);
    int32_t row[256];
    for (int b = 0; b < 256; b++) row[b] = -1;
    for (int32_t i = 0; i < n_segs; i++) {
        int32_t lo = segs[3 * i], hi = segs[3 * i + 1], t = segs[3 * i + 2];
        if (2 * (Py_ssize_t)t >= rows) return 0;
        for (int32_t b = lo; b < hi; b++) row[b] = 2 * t;
    }
    memcpy(table + 256 * sid, row, sizeof(row));
    finishes[sid] = PyList_GET_ITEM(c->accepting, q) == Py_True;
    filled[sid] = 1;
    return 1;
}

/* The parser-state table (int32, rows x 256) and its per-row flags (finishes may be NULL),
 * held as writable buffers for one call. */
typedef struct {
    Py_buffer b[3];
    int held;
    Py_ssize_t rows;
} TableBufs;

static void release_table(TableBufs *t) {
    for (int i = 0; i < t->held; i++) PyBuffer_Release(&t->b[i]);
    t->held = 0;
}

/* 0, or -1 with an exception (nothing left held). */
static int hold_table(PyObject *table, PyObject *filled, PyObject *finishes, TableBufs *t,
                      const char *who) {
    PyObject *objs[3] = {table, filled, finishes};
    int n = finishes ? 3 : 2;
    t->held = 0;
    for (; t->held < n; t->held++) {
        if (PyObject_GetBuffer(objs[t->held], &t->b[t->held],
                               PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
            release_table(t);
            return -1;
        }
        if (t->b[t->held].itemsize != (t->held ? 1 : 4)) {
            t->held++;
            release_table(t);
            PyErr_Format(PyExc_TypeError, "%s: int32 table, bool flags", who);
            return -1;
        }
    }
    t->rows = t->b[0].len / (4 * 256);
    for (int i = 1; i < n; i++)
        if (t->b[i].len < t->rows) {
            release_table(t);
            PyErr_Format(PyExc_ValueError, "%s: flags shorter than the table", who);
            return -1;
        }
    return 0;
}

/* Python: write_plain_row(q, table, filled, finishes, sid) -> bool (see write_plain). */
static PyObject *core_write_plain_row(Core *c, PyObject *args) {
    long q, sid;
    PyObject *objs[3];
    if (!PyArg_ParseTuple(args, "lOOOl", &q, &objs[0], &objs[1], &objs[2], &sid)) return NULL;
    TableBufs t;
    if (hold_table(objs[0], objs[1], objs[2], &t, "write_plain_row") < 0) return NULL;
    int got = write_plain(c, q, t.b[0].buf, t.rows, t.b[1].buf, t.b[2].buf, sid);
    release_table(&t);
    if (got < 0) return NULL;
    return PyBool_FromLong(got);
}

/* Row sid of the parser-state table (table_rows x 256, flags in filled) for a state whose closed stacks are `stacks` (tuples of DFA ids, every top built): byte
 * b leads to the kernel {below + (trans[top][b],)} over its stacks. The tops' rows are constant
 * between their segment bounds, so it costs one column per piece and one kernel per distinct
 * column. A kernel that is one one-frame stack (t,) is state 2t; any other is looked up in
 * `ids` (frozenset -> odd id) or numbered 2 * len(others) + 1 and appended to `others`. The
 * caller leaves room in the table for every state this can number. 0, or -1 with an
 * exception set. */
/* The number of parser state `kernel` (several frames or stacks) in a DenseStates' numbering:
 * ids maps a state to its odd number, others lists the states in number order. Numbered when
 * new. -1 with an exception. */
static long number_state(PyObject *ids, PyObject *others, PyObject *kernel) {
    PyObject *known = PyDict_GetItemWithError(ids, kernel);
    if (known) return PyLong_AsLong(known);
    if (PyErr_Occurred()) return -1;
    long sid = 2 * (long)PyList_GET_SIZE(others) + 1;
    PyObject *id = PyLong_FromLong(sid);
    if (!id || PyDict_SetItem(ids, kernel, id) < 0 || PyList_Append(others, kernel) < 0)
        sid = -1;
    Py_XDECREF(id);
    return sid;
}

static int fill_row_raw(Core *c, PyObject *stacks, long sid, int32_t *table,
                        Py_ssize_t table_rows, uint8_t *filled, PyObject *ids, PyObject *others) {
    Py_ssize_t n = PyList_GET_SIZE(stacks);
    int32_t *rows = malloc(sizeof(int32_t) * 256 * (size_t)(n ? n : 1));
    int32_t *columns = malloc(sizeof(int32_t) * 257 * (size_t)(n ? n : 1));
    if (!rows || !columns) {
        free(rows);
        free(columns);
        PyErr_NoMemory();
        return -1;
    }
    int result = -1;
    unsigned char bound[257] = {0};
    bound[0] = bound[256] = 1;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *st = PyList_GET_ITEM(stacks, k);
        if (!PyTuple_Check(st) || PyTuple_GET_SIZE(st) == 0) {
            PyErr_SetString(PyExc_TypeError, "fill_row: stacks are non-empty tuples");
            goto done;
        }
        int32_t top;
        if (as_int32(PyTuple_GET_ITEM(st, PyTuple_GET_SIZE(st) - 1), &top) < 0) goto done;
        if (top < 0 || top >= c->n_states || !is_built(c, top)) {
            PyErr_Format(PyExc_ValueError, "fill_row: DFA state %d is not built", top);
            goto done;
        }
        int32_t *row = rows + 256 * k;
        for (int b = 0; b < 256; b++) row[b] = -1;
        const int32_t *segs;
        int32_t n_segs = built_segments(c, top, &segs);
        for (int32_t i = 0; i < n_segs; i++) {
            int32_t lo = segs[3 * i], hi = segs[3 * i + 1], t = segs[3 * i + 2];
            bound[lo] = bound[hi] = 1;
            for (int32_t b = lo; b < hi; b++) row[b] = t;
        }
    }
    if (sid < 0 || sid >= table_rows) {
        PyErr_SetString(PyExc_IndexError, "fill_row: row out of range");
        goto done;
    }
    int32_t out[256], numbered[257];
    int n_columns = 0;
    int a = 0;
    for (int p = 1; p <= 256; p++) {
        if (!bound[p]) continue;
        int32_t *column = columns + (size_t)n_columns * (size_t)n;
        int any = 0;
        for (Py_ssize_t k = 0; k < n; k++) {
            column[k] = rows[256 * k + a];
            any |= column[k] >= 0;
        }
        int32_t got = -1;
        if (any) {
            int found = -1;
            for (int j = 0; j < n_columns && found < 0; j++)
                if (!memcmp(columns + (size_t)j * (size_t)n, column, sizeof(int32_t) * (size_t)n))
                    found = j;
            if (found >= 0) {
                got = numbered[found];
            } else {
                /* the kernel of this column */
                /* One one-frame stack (t,), however many stacks lead there, is state 2t. */
                int one_frame = 1;
                int32_t first_target = -1;
                for (Py_ssize_t k = 0; k < n && one_frame; k++) {
                    if (column[k] < 0) continue;
                    if (PyTuple_GET_SIZE(PyList_GET_ITEM(stacks, k)) != 1 ||
                        (first_target >= 0 && column[k] != first_target))
                        one_frame = 0;
                    first_target = column[k];
                }
                if (one_frame) {
                    got = 2 * first_target;
                } else {
                    PyObject *members = PyList_New(0);
                    if (!members) goto done;
                    for (Py_ssize_t k = 0; k < n && members; k++) {
                        if (column[k] < 0) continue;
                        PyObject *st = PyList_GET_ITEM(stacks, k);
                        Py_ssize_t len = PyTuple_GET_SIZE(st);
                        PyObject *moved = PyTuple_New(len);
                        PyObject *target = moved ? PyLong_FromLong(column[k]) : NULL;
                        if (!target) {
                            Py_XDECREF(moved);
                            Py_CLEAR(members);
                            break;
                        }
                        for (Py_ssize_t i = 0; i + 1 < len; i++) {
                            PyObject *x = PyTuple_GET_ITEM(st, i);
                            Py_INCREF(x);
                            PyTuple_SET_ITEM(moved, i, x);
                        }
                        PyTuple_SET_ITEM(moved, len - 1, target);
                        if (PyList_Append(members, moved) < 0) Py_CLEAR(members);
                        Py_DECREF(moved);
                    }
                    if (!members) goto done;
                    PyObject *kernel = PyFrozenSet_New(members);
                    Py_DECREF(members);
                    if (!kernel) goto done;
                    long v = number_state(ids, others, kernel);
                    Py_DECREF(kernel);
                    if (v < 0) goto done;
                    got = (int32_t)v;
                }
                if (got >= table_rows) {
                    PyErr_SetString(PyExc_IndexError, "fill_row: no room for a new state");
                    goto done;
                }
                numbered[n_columns++] = got;
            }
        }
        for (int b = a; b < p; b++) out[b] = got;
        a = p;
    }
    memcpy(table + 256 * sid, out, sizeof(out));
    filled[sid] = 1;
    result = 0;
done:
    free(rows);
    free(columns);
    return result;
}

/* Python: fill_row(stacks, sid, table, filled, ids, others) -> None (fill_row_raw). */
static PyObject *core_fill_row(Core *c, PyObject *args) {
    PyObject *stacks, *table_obj, *filled_obj, *ids, *others;
    long sid;
    if (!PyArg_ParseTuple(args, "O!lOOO!O!", &PyList_Type, &stacks, &sid, &table_obj,
                          &filled_obj, &PyDict_Type, &ids, &PyList_Type, &others))
        return NULL;
    TableBufs t;
    if (hold_table(table_obj, filled_obj, NULL, &t, "fill_row") < 0) return NULL;
    int got = fill_row_raw(c, stacks, sid, t.b[0].buf, t.rows, t.b[1].buf, ids, others);
    release_table(&t);
    if (got < 0) return NULL;
    Py_RETURN_NONE;
}

#include "_parser_closure.h" /* Core.fill_state: closures of several-stack parser states */

static PyTypeObject CoreType;

/* For the C trie walk (through the capsule below): build the DFA state behind one-frame
 * parser state sid = 2q and write its row, without going back to Python. */
static int fill_plain(PyObject *core, long sid, int32_t *table, Py_ssize_t rows, uint8_t *filled,
                      uint8_t *finishes) {
    if (!PyObject_TypeCheck(core, &CoreType)) {
        PyErr_SetString(PyExc_TypeError, "fill_plain: not a determiniser Core");
        return -1;
    }
    Core *c = (Core *)core;
    long q = sid / 2;
    if (sid % 2 || q >= c->n_states) return 0;
    if (ensure_state(c, q) < 0) return -1;
    return write_plain(c, q, table, rows, filled, finishes, sid);
}

/* For the C trie walk: fill_state_raw for parser state sid of a DenseStates whose context is
 * `ctx` = (ids, others, rule_start, closure_memo, top_memo, max_depth, max_stacks,
 * memo_limit): the state is others[sid // 2] for an odd sid, the one-frame stack (sid / 2,)
 * for an even one. 1: filled; 0: left to Python (to grow the table, or to refuse the state
 * with its error); -1: an exception is set. */
static int fill_general(PyObject *core, long sid, PyObject *ctx, int32_t *table,
                        Py_ssize_t rows, uint8_t *filled, uint8_t *finishes);

/* The parser state entered by the calls of DFA state q alone, numbered in ids/others: its
 * kernel holds (ret, start of rule) for each call (start of rule alone for a tail call),
 * memoised per calls tuple in call_rows. -1 with an exception. */
static long calls_state(Core *c, Closer *k, long q, PyObject *ids, PyObject *others,
                        PyObject *call_rows) {
    PyObject *calls = PyList_GET_ITEM(c->calls, q);
    PyObject *got = PyDict_GetItemWithError(call_rows, calls);
    if (got) return PyLong_AsLong(got);
    if (PyErr_Occurred()) return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(calls);
    PyObject *members = PyList_New(0);
    if (!members) return -1;
    long one_frame = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(calls, i);
        long rule = PyLong_AsLong(PyTuple_GET_ITEM(pair, 0));
        long ret = PyLong_AsLong(PyTuple_GET_ITEM(pair, 1));
        if (PyErr_Occurred() || rule < 0 || rule >= PyList_GET_SIZE(k->rule_start)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "fill_state: rule out of range");
            Py_DECREF(members);
            return -1;
        }
        long rs = PyLong_AsLong(PyList_GET_ITEM(k->rule_start, rule));
        int tail = rs == -1 && PyErr_Occurred() ? -1 : only_ends(c, ret);
        PyObject *stack = tail < 0 ? NULL : tail ? Py_BuildValue("(l)", rs)
                                                 : Py_BuildValue("(ll)", ret, rs);
        if (!stack || PyList_Append(members, stack) < 0) {
            Py_XDECREF(stack);
            Py_DECREF(members);
            return -1;
        }
        Py_DECREF(stack);
        if (tail) one_frame = rs;
    }
    long sid;
    PyObject *kernel = PyFrozenSet_New(members);
    Py_DECREF(members);
    if (!kernel) return -1;
    if (PySet_GET_SIZE(kernel) == 1 && one_frame >= 0)
        sid = 2 * one_frame; /* a single one-frame stack is numbered 2q, as in DenseStates */
    else
        sid = number_state(ids, others, kernel);
    Py_DECREF(kernel);
    if (sid < 0) return -1;
    PyObject *id = PyLong_FromLong(sid);
    if (!id || PyDict_SetItem(call_rows, calls, id) < 0) {
        Py_XDECREF(id);
        return -1;
    }
    Py_DECREF(id);
    return sid;
}

/* The row of the one-frame state sid = 2q whose DFA state calls rules, without its closure:
 * the row of its calls' state (calls_state, built once for every DFA state with the same
 * calls, such as each position of JSON's bounded whitespace before a value) with q's own
 * byte moves laid over it. 1 filled, 0 not this way (a byte both moves q and enters a call:
 * the caller builds the whole closure), 2 the table must grow, -1 with an exception. */
static int fill_by_calls(Core *c, Closer *k, long sid, PyObject *ctx, int32_t *table,
                         Py_ssize_t rows, uint8_t *filled, uint8_t *finishes, PyObject *ids,
                         PyObject *others, PyObject *call_rows) {
    long q = sid / 2;
    if (ensure_state(c, q) < 0) return -1;
    PyObject *calls = PyList_GET_ITEM(c->calls, q);
    if (!PyTuple_Check(calls) || PyTuple_GET_SIZE(calls) == 0) return 0;
    long ks = calls_state(c, k, q, ids, others, call_rows);
    if (ks < 0) return -1;
    if (ks >= rows || 2 * (Py_ssize_t)c->n_states + 2 > rows) return 2;
    if (!filled[ks]) {
        int got = ks % 2 == 0 ? fill_plain((PyObject *)c, ks, table, rows, filled, finishes) : 0;
        if (got < 0) return -1;
        if (!filled[ks] && fill_general((PyObject *)c, ks, ctx, table, rows, filled, finishes) < 0)
            return -1;
        if (!filled[ks]) return 2;
    }
    int32_t row[256];
    memcpy(row, table + 256 * ks, sizeof(row));
    const int32_t *segs;
    int32_t n_segs = built_segments(c, q, &segs);
    for (int32_t i = 0; i < n_segs; i++) {
        int32_t lo = segs[3 * i], hi = segs[3 * i + 1], t = segs[3 * i + 2];
        if (2 * (Py_ssize_t)t >= rows) return 2;
        for (int32_t b = lo; b < hi; b++) {
            if (row[b] >= 0) return 0;
            row[b] = 2 * t;
        }
    }
    memcpy(table + 256 * sid, row, sizeof(row));
    finishes[sid] = (uint8_t)(flag_of(c->accepting, q) || finishes[ks]);
    filled[sid] = 1;
    return 1;
}

/* For the C trie walk: fill_state_raw for parser state sid of a DenseStates whose context is
 * `ctx` = (ids, others, rule_start, closure_memo, top_memo, max_depth, max_stacks,
 * memo_limit, call_rows): the state is others[sid // 2] for an odd sid, the one-frame stack
 * (sid / 2,) for an even one (first tried by fill_by_calls). 1: filled; 0: left to Python (to
 * grow the table, or to refuse the state with its error); -1: an exception is set. */
static int fill_general(PyObject *core, long sid, PyObject *ctx, int32_t *table,
                        Py_ssize_t rows, uint8_t *filled, uint8_t *finishes) {
    if (!PyObject_TypeCheck(core, &CoreType)) {
        PyErr_SetString(PyExc_TypeError, "fill_general: not a determiniser Core");
        return -1;
    }
    PyObject *ids, *others, *call_rows;
    Closer k;
    if (!PyTuple_Check(ctx) ||
        !PyArg_ParseTuple(ctx, "O!O!O!O!O!nnnO!", &PyDict_Type, &ids, &PyList_Type, &others,
                          &PyList_Type, &k.rule_start, &PyDict_Type, &k.closure_memo,
                          &PyDict_Type, &k.top_memo, &k.max_depth, &k.max_stacks, &k.memo_limit,
                          &PyDict_Type, &call_rows)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "fill_general: the context is a tuple");
        return -1;
    }
    PyObject *state;
    if (sid % 2) {
        Py_ssize_t at = sid / 2;
        if (at >= PyList_GET_SIZE(others)) {
            PyErr_SetString(PyExc_IndexError, "fill_general: unknown parser state");
            return -1;
        }
        state = PyList_GET_ITEM(others, at);
        if (!PyFrozenSet_Check(state)) {
            PyErr_SetString(PyExc_TypeError, "fill_general: parser states are frozensets");
            return -1;
        }
        Py_INCREF(state);
    } else {
        if (sid / 2 >= ((Core *)core)->n_states) {
            PyErr_SetString(PyExc_IndexError, "fill_general: unknown DFA state");
            return -1;
        }
        int quick = fill_by_calls((Core *)core, &k, sid, ctx, table, rows, filled, finishes,
                                  ids, others, call_rows);
        if (quick < 0) return -1;
        if (quick == 1) return 1;
        if (quick == 2) return 0;
        PyObject *stack = Py_BuildValue("(l)", sid / 2);
        PyObject *one = stack ? PyTuple_Pack(1, stack) : NULL;
        Py_XDECREF(stack);
        state = one ? PyFrozenSet_New(one) : NULL;
        Py_XDECREF(one);
        if (!state) return -1;
    }
    int got = fill_state_raw((Core *)core, &k, sid, state, table, rows, filled, finishes, ids,
                             others);
    Py_DECREF(state);
    return got < 0 ? -1 : got == 1;
}

static FormcastDeterminiseAPI api = {fill_plain, fill_general, number_state};

static PyObject *core_state(Core *c, PyObject *args) {
    long q;
    if (!PyArg_ParseTuple(args, "l", &q)) return NULL;
    if (q < 0 || q >= c->n_states) {
        PyErr_Format(PyExc_IndexError, "determinise: DFA state %ld out of range", q);
        return NULL;
    }
    PyObject *members = int_list(c->pool + c->st_off[q], c->st_len[q]);
    if (!members) return NULL;
    PyObject *set = PyFrozenSet_New(members);
    Py_DECREF(members);
    if (!set) return NULL;
    return Py_BuildValue("(iN)", c->st_rule[q], set);
}

static PyObject *core_rule(Core *c, PyObject *args) {
    long q;
    if (!PyArg_ParseTuple(args, "l", &q)) return NULL;
    if (q < 0 || q >= c->n_states) {
        PyErr_Format(PyExc_IndexError, "determinise: DFA state %ld out of range", q);
        return NULL;
    }
    return PyLong_FromLong(c->st_rule[q]);
}

static PyObject *core_n_states(Core *c, void *closure) {
    (void)closure;
    return PyLong_FromSsize_t(c->n_states);
}

/* paste(eps, byte_edges, call_edges, edges, exit_offset): append a copy of snapshotted NFA
 * states, replacing the last state (the copy's entry, allocated by the caller). `edges` holds
 * one (eps, byte edges, call edges) triple of frozen containers a state; edges are relative,
 * so the copy shares them (a later edge replaces the shared tuple of its one state), but for
 * the epsilon edges of its exit (edges[exit_offset]): it has none. */
/* Append copies of snapshotted states (edges: a list of (eps, byte edges, call edges)) to
 * the NFA lists outs, sharing the snapshot's containers; the exit has no epsilon edges. */
static int append_copy(PyObject *outs[3], PyObject *edges, long exit_offset) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(edges); i++) {
        PyObject *item = PyList_GET_ITEM(edges, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
            PyErr_SetString(PyExc_TypeError, "paste: edges are (eps, byte edges, call edges)");
            return -1;
        }
        PyObject *srcs[3] = {PyTuple_GET_ITEM(item, 0), PyTuple_GET_ITEM(item, 1),
                             PyTuple_GET_ITEM(item, 2)};
        if (i == exit_offset) srcs[0] = empty_edges();
        for (int k = 0; k < 3; k++)
            if (PyList_Append(outs[k], srcs[k]) < 0) return -1;
    }
    return 0;
}

/* paste_copy(eps, byte_edges, call_edges, edges, exit_offset, owner, value, live_list, live)
 * -> entry: LazyRepeat._entry's copy in one call. The copy's states are appended from entry
 * (the NFA's size), `owner` (CopyOwners' list) gets `value` for each of them, and live_list
 * (unless None) the snapshot's liveness `live`. In Python this was ~2.8 us a copy, a third of
 * the first mask inside a maxLength: 80 string, whose long tokens pass 77 copies. */
static PyObject *paste_copy(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *eps, *byte_edges, *call_edges, *edges, *owner, *value, *live_list, *live;
    long exit_offset;
    if (!PyArg_ParseTuple(args, "O!O!O!O!lO!OOO", &PyList_Type, &eps, &PyList_Type, &byte_edges,
                          &PyList_Type, &call_edges, &PyList_Type, &edges, &exit_offset,
                          &PyList_Type, &owner, &value, &live_list, &live))
        return NULL;
    Py_ssize_t entry = PyList_GET_SIZE(eps), n = PyList_GET_SIZE(edges);
    if (PyList_GET_SIZE(byte_edges) != entry || PyList_GET_SIZE(call_edges) != entry) {
        PyErr_SetString(PyExc_ValueError, "paste_copy: the NFA lists differ in length");
        return NULL;
    }
    if (PyList_GET_SIZE(owner) > entry) {
        PyErr_SetString(PyExc_ValueError, "paste_copy: states past the NFA have owners");
        return NULL;
    }
    PyObject *outs[3] = {eps, byte_edges, call_edges};
    if (append_copy(outs, edges, exit_offset) < 0) return NULL;
    while (PyList_GET_SIZE(owner) < entry)
        if (PyList_Append(owner, Py_None) < 0) return NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        if (PyList_Append(owner, value) < 0) return NULL;
    if (live_list != Py_None) {
        if (!PyList_Check(live_list)) {
            PyErr_SetString(PyExc_TypeError, "paste_copy: live_list is a list or None");
            return NULL;
        }
        PyObject *more = PySequence_InPlaceConcat(live_list, live);
        if (!more) return NULL;
        Py_DECREF(more);
    }
    return PyLong_FromSsize_t(entry);
}

static PyObject *paste(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *eps, *byte_edges, *call_edges, *edges;
    long exit_offset;
    if (!PyArg_ParseTuple(args, "O!O!O!O!l", &PyList_Type, &eps, &PyList_Type, &byte_edges,
                          &PyList_Type, &call_edges, &PyList_Type, &edges, &exit_offset))
        return NULL;
    if (drop_entry(eps, byte_edges, call_edges) < 0) return NULL;
    PyObject *outs[3] = {eps, byte_edges, call_edges};
    if (append_copy(outs, edges, exit_offset) < 0) return NULL;
    Py_RETURN_NONE;
}

/* paste_range(eps, byte_edges, call_edges, first, stop, exit): paste_range_into (see
 * _nfa_paste.h) for the Python builder. */
static PyObject *paste_range(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *eps, *byte_edges, *call_edges;
    long first, stop, exit_;
    if (!PyArg_ParseTuple(args, "O!O!O!lll", &PyList_Type, &eps, &PyList_Type, &byte_edges,
                          &PyList_Type, &call_edges, &first, &stop, &exit_))
        return NULL;
    if (paste_range_into(eps, byte_edges, call_edges, first, stop, exit_) < 0) return NULL;
    Py_RETURN_NONE;
}

/* untrack_acyclic a container, and the lists and tuples it holds down to `depth` levels (an
 * NFA state's edges: a list or tuple of edge tuples; a snapshot: a triple of those). */
static void untrack_deep(PyObject *obj, int depth) {
    if (PyTuple_CheckExact(obj)) {
        /* An untracked tuple has untracked (or atomic) items: CPython untracks a tuple only
         * then, and so does every untracking here (see frozen in _nfa_paste.h). Shared
         * frozen edge containers are met thousands of times; this skips their items. */
        if (!PyObject_GC_IsTracked(obj)) return;
    } else if (!PyList_CheckExact(obj)) {
        return;
    }
    untrack_acyclic(obj);
    if (depth == 0) return;
    Py_ssize_t n;
    PyObject **items;
    if (items_of(obj, &items, &n, "edges") < 0) return;
    for (Py_ssize_t j = 0; j < n; j++) untrack_deep(items[j], depth - 1);
}

/* untrack(depth, lists...): untrack_acyclic every list or tuple held by each list argument,
 * and the containers below it down to `depth` levels: 0 for the NFA's epsilon lists (they
 * hold ints), 1 for its byte and call edge lists (with their edge tuples), 2 for snapshot
 * triples (a repetition's). The caller vouches that none of them holds a container that
 * could lead back to it. Left tracked, the first collection after a compile walks every
 * one of them (tens of thousands in a schema's NFA); walking deeper than the containers go
 * was half the walk's time. */
static PyObject *untrack(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t n_args = PyTuple_GET_SIZE(args);
    long depth = n_args ? PyLong_AsLong(PyTuple_GET_ITEM(args, 0)) : -1;
    if (depth < 0 || depth > 2) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "untrack: the first argument is a depth, 0-2");
        return NULL;
    }
    for (Py_ssize_t a = 1; a < n_args; a++) {
        PyObject *outer = PyTuple_GET_ITEM(args, a);
        if (!PyList_Check(outer)) {
            PyErr_SetString(PyExc_TypeError, "untrack: arguments are lists");
            return NULL;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(outer); i++)
            untrack_deep(PyList_GET_ITEM(outer, i), (int)depth);
    }
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"untrack", untrack, METH_VARARGS,
     "untrack(depth, lists...): take the lists or tuples each list holds, down to depth "
     "levels, out of the cyclic collector"},
    {"paste_copy", paste_copy, METH_VARARGS,
     "paste_copy(eps, byte_edges, call_edges, edges, exit_offset, owner, value, live_list, "
     "live) -> entry: append a lazy repetition's next copy and register it (see the C)"},
    {"paste", paste, METH_VARARGS,
     "paste(eps, byte_edges, call_edges, edges, exit_offset): append a copy of NFA states, "
     "sharing their (relative) edge containers"},
    {"paste_range", paste_range, METH_VARARGS,
     "paste_range(eps, byte_edges, call_edges, first, stop, exit): paste the NFA's own "
     "states [first, stop), without the epsilon edges of exit"},
    {NULL, NULL, 0, NULL}};

static PyMethodDef core_methods[] = {
    {"intern_start", (PyCFunction)core_intern_start, METH_VARARGS,
     "intern_start(rule, start) -> id of the DFA state at the start of a rule"},
    {"ensure", (PyCFunction)core_ensure, METH_VARARGS,
     "ensure(q): build state q's transitions (a no-op when built)"},
    {"walk_bytes", (PyCFunction)core_walk_bytes, METH_VARARGS,
     "walk_bytes(q, data, follow) -> 1 data goes on within q's frame, 0 refused, -1 the "
     "frame alone cannot tell (see the C)"},
    {"row", (PyCFunction)core_row, METH_VARARGS,
     "row(q) -> q's 256 targets (-1: refused), building q; kept in trans_rows[q]"},
    {"segments", (PyCFunction)core_segments, METH_VARARGS,
     "segments(q) -> q's row as [(lo, hi excl., target)]; kept in row_segments[q]"},
    {"targets", (PyCFunction)core_targets, METH_VARARGS,
     "targets(q) -> q's distinct successors; kept in row_targets[q]"},
    {"write_plain_row", (PyCFunction)core_write_plain_row, METH_VARARGS,
     "write_plain_row(q, table, filled, finishes, sid) -> bool"},
    {"fill_state", (PyCFunction)core_fill_state, METH_VARARGS,
     "fill_state(sid, state, table, filled, finishes, ids, others, rule_start, closure_memo, "
     "top_memo, max_depth, max_stacks, memo_limit) -> 1 filled, 2 grow the table, 0 refused"},
    {"fill_row", (PyCFunction)core_fill_row, METH_VARARGS,
     "fill_row(stacks, sid, table, filled, ids, others): a parser state's row (see the C)"},
    {"rule", (PyCFunction)core_rule, METH_VARARGS, "rule(q) -> index of q's rule"},
    {"state", (PyCFunction)core_state, METH_VARARGS,
     "state(q) -> (rule index, frozenset of NFA states)"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef core_getset[] = {
    {"n_states", (getter)core_n_states, NULL, "DFA states made so far", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "formcast.engine._determinise.Core",
    .tp_basicsize = sizeof(Core),
    .tp_dealloc = (destructor)core_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Lazy determinisation of a grammar's NFA (see engine/determinise.py).",
    .tp_methods = core_methods,
    .tp_getset = core_getset,
    .tp_init = (initproc)core_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_determinise",
                                    "Lazy NFA determinisation for cold masks.", -1,
                                    module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__determinise(void) {
    if (PyType_Ready(&CoreType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    PyObject *capsule = PyCapsule_New(&api, FORMCAST_DETERMINISE_CAPSULE, NULL);
    if (!capsule || PyModule_AddObject(m, "_api", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(m, "Core", (PyObject *)&CoreType) < 0) {
        Py_DECREF(&CoreType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
