/* The token-trie walk of a cold mask, in C.
 *
 * The engine decides *which* automaton states exist and fills their byte rows; this module
 * walks the vocabulary's trie through them, depth first, in the order its nodes are stored.
 * States it meets unfilled are built on the spot by the C determiniser (through its capsule):
 * one-frame states from the Core alone, others from the DenseStates context too. Where it
 * cannot (no context, a table that must grow, a state Python refuses) it stops and hands back
 * the (node, state) pairs, which the caller fills and passes in again, until nothing is
 * pending. The per-node work is what the numpy walk in
 * mask_cache.classify_tokens does one level at a time:
 *
 *   - a child whose byte the state refuses prunes every token below it; if the base frame
 *     could end somewhere on the way ("flag"), those tokens need the context instead;
 *   - tokens ending at a child that is still alive are allowed;
 *   - a child on the slice chain whose tokens are all slice bytes and short enough is allowed
 *     as a block without walking it (slice_chain finds the slice and its chain).
 *
 * Arrays arrive through the buffer protocol; item sizes and bounds are checked here, an id out
 * of range raises IndexError instead of reading past an array.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_determinise_api.h"

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

/* Append a (node, state, flag) triple to a growable array; 0 when out of memory. */
static int push3(int64_t **buf, Py_ssize_t *cap, Py_ssize_t *n, int64_t a, int64_t b, int64_t c) {
    if (*n == *cap) {
        Py_ssize_t grown = *cap * 2;
        int64_t *more = realloc(*buf, sizeof(int64_t) * 3 * (size_t)grown);
        if (!more) return 0;
        *buf = more;
        *cap = grown;
    }
    (*buf)[3 * *n] = a;
    (*buf)[3 * *n + 1] = b;
    (*buf)[3 * *n + 2] = c;
    (*n)++;
    return 1;
}

/* Whether the sorted array holds a value in [lo, hi). */
static int any_between(const int64_t *sorted, Py_ssize_t n, int64_t lo, int64_t hi) {
    Py_ssize_t a = 0, b = n;
    while (a < b) {
        Py_ssize_t mid = a + (b - a) / 2;
        if (sorted[mid] < lo) a = mid + 1;
        else b = mid;
    }
    return a < n && sorted[a] < hi;
}

#define N_BUFS 13

/* One trie node in depth-first (pre)order, 16 bytes (FlatTrie.nodes): a node's subtree is the
 * nodes after it up to ``subtree_end``, so the walk reads the array front to back and skips a
 * refused subtree by jumping ahead. Read in memory order, the trie streams through the cache
 * instead of missing on every child's children (the breadth-first layout did). */
typedef struct {
    int32_t subtree_end, row_lo, row_hi;
    uint16_t depth;
    uint8_t byte, end_count;
} Node;

/* The determiniser's C entry points (NULL until a walk is given a Core). */
static const FormcastDeterminiseAPI *determinise_api = NULL;

/* Whether state s has its row, building it on the spot when a Core is given: a one-frame
 * state (even id) through the determiniser, any other state too when the DenseStates context
 * `ctx` is given (its closure and row, through fill_general). 1 yes, 0 no (the caller fills
 * it in Python: the table must grow first, or the state is refused there with its error), -1
 * with an exception. Needs the GIL. */
static int ensure_row(PyObject *core, PyObject *ctx, int64_t s, int32_t *table,
                      Py_ssize_t n_states, uint8_t *filled, uint8_t *finishes) {
    if (filled[s]) return 1;
    if (core == Py_None) return 0;
    if (s % 2 == 0) {
        if (determinise_api->fill_plain(core, (long)s, table, n_states, filled, finishes) < 0)
            return -1;
        if (filled[s]) return 1;
    }
    if (ctx == Py_None) return 0;
    if (determinise_api->fill_general(core, (long)s, ctx, table, n_states, filled, finishes) < 0)
        return -1;
    return filled[s] ? 1 : 0;
}

/* Import the determiniser's capsule once (when a walk is first given a Core). */
static int load_determinise_api(void) {
    if (determinise_api) return 0;
    determinise_api = PyCapsule_Import(FORMCAST_DETERMINISE_CAPSULE, 0);
    return determinise_api ? 0 : -1;
}


/* ---------------------------------------------------------------- pushed frames
 *
 * A token that enters a rule call mid-token (`{"` from a value's start) leads to a parser
 * state of several frames, one per context the call is made in: (26, 12), (26, 13), ...
 * for every position of the value inside an array, and again inside an object. Building each
 * of those (closure and row, Python objects handled from C) was most of a JSON grammar's
 * slow first masks. While the called frame goes on, though, its row is that of its top
 * alone, which every context shares. So the walk keeps the frames below the top apart (the
 * `outer` frames of a depth) and goes on in the one-frame state of the top; where that frame
 * could end, or a state must be handed to Python, it puts the frames back (`materialize`)
 * and goes on in the full state. The tokens allowed are the same. */

/* If parser state s (odd: several frames, numbered in ctx) is one stack of two frames or
 * more, append the frames below its top to outer[*n_outer..] (room: cap) and return the top
 * DFA state; -1 otherwise (no error set). */
static long long split_top(PyObject *ctx, int64_t s, int64_t *outer, int32_t *n_outer,
                           int32_t cap) {
    PyObject *others = PyTuple_GET_ITEM(ctx, 1);
    Py_ssize_t at = (Py_ssize_t)(s >> 1);
    if (!(s & 1) || !PyList_Check(others) || at >= PyList_GET_SIZE(others)) return -1;
    PyObject *state = PyList_GET_ITEM(others, at);
    if (!PyFrozenSet_Check(state) || PySet_GET_SIZE(state) != 1) return -1;
    Py_ssize_t pos = 0;
    PyObject *stack;
    Py_hash_t hash;
    if (!_PySet_NextEntry(state, &pos, &stack, &hash) || !PyTuple_Check(stack)) return -1;
    Py_ssize_t len = PyTuple_GET_SIZE(stack);
    int32_t base = *n_outer;
    if (len < 2 || base + (len - 1) > cap) return -1;
    for (Py_ssize_t k = 0; k + 1 < len; k++) { /* written past n_outer: scratch until kept */
        long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(stack, k));
        if (v < 0) {
            PyErr_Clear();
            return -1;
        }
        outer[base + k] = v;
    }
    long long top = PyLong_AsLongLong(PyTuple_GET_ITEM(stack, len - 1));
    if (top < 0) {
        PyErr_Clear();
        return -1;
    }
    *n_outer = base + (int32_t)(len - 1);
    return top;
}

/* The parser state of the frames outer[:n_outer] below each stack of state s, numbered in
 * ctx (added to its numbering when new; its row is left unfilled). -1 with an exception. */
static int64_t materialize(PyObject *ctx, const int64_t *outer, int32_t n_outer, int64_t s) {
    PyObject *ids = PyTuple_GET_ITEM(ctx, 0), *others = PyTuple_GET_ITEM(ctx, 1);
    if (!PyDict_Check(ids) || !PyList_Check(others)) {
        PyErr_SetString(PyExc_TypeError, "trie walk: bad parser-state context");
        return -1;
    }
    PyObject *stacks;
    if (s & 1) {
        Py_ssize_t at = (Py_ssize_t)(s >> 1);
        if (at >= PyList_GET_SIZE(others)) {
            PyErr_SetString(PyExc_IndexError, "trie walk: unknown parser state");
            return -1;
        }
        stacks = PyList_GET_ITEM(others, at);
        Py_INCREF(stacks);
    } else {
        PyObject *stack = Py_BuildValue("(L)", (long long)(s >> 1));
        stacks = stack ? PyTuple_Pack(1, stack) : NULL;
        Py_XDECREF(stack);
        if (!stacks) return -1;
    }
    PyObject *members = PyList_New(0), *it = members ? PyObject_GetIter(stacks) : NULL;
    Py_DECREF(stacks);
    if (!it) {
        Py_XDECREF(members);
        return -1;
    }
    PyObject *stack;
    int bad = 0;
    while (!bad && (stack = PyIter_Next(it))) {
        Py_ssize_t len = PyTuple_Check(stack) ? PyTuple_GET_SIZE(stack) : -1;
        PyObject *full = len >= 0 ? PyTuple_New(n_outer + len) : NULL;
        if (!full) bad = 1;
        for (int32_t k = 0; !bad && k < n_outer; k++) {
            PyObject *x = PyLong_FromLongLong(outer[k]);
            if (!x) bad = 1;
            else PyTuple_SET_ITEM(full, k, x);
        }
        for (Py_ssize_t k = 0; !bad && k < len; k++) {
            PyObject *x = PyTuple_GET_ITEM(stack, k);
            Py_INCREF(x);
            PyTuple_SET_ITEM(full, n_outer + k, x);
        }
        if (!bad && PyList_Append(members, full) < 0) bad = 1;
        Py_XDECREF(full);
        Py_DECREF(stack);
    }
    Py_DECREF(it);
    if (bad || PyErr_Occurred()) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "trie walk: stacks are tuples");
        Py_DECREF(members);
        return -1;
    }
    PyObject *kernel = PyFrozenSet_New(members);
    Py_DECREF(members);
    if (!kernel) return -1;
    long sid = determinise_api->number_state(ids, others, kernel);
    Py_DECREF(kernel);
    return sid;
}

/* One walk's arrays, as raw pointers (the caller holds their buffers). */
typedef struct {
    int32_t *table;
    uint8_t *filled, *finishes;
    Py_ssize_t n_states;
    const Node *nodes;
    const uint64_t *subtree; /* 4 words a node: bytes used below it */
    const int32_t *ids;      /* token id of each row */
    const int32_t *maxlen;   /* longest token below each node, in bytes */
    Py_ssize_t n_nodes, n_rows;
    const int64_t *chain;
    Py_ssize_t chain_len;
    const uint64_t *outside; /* 4 words: bytes not in the slice */
    int use_slice;
    const int64_t *pending_in;
    Py_ssize_t n_in;
    /* Allowed token ids as bits, bit t % 8 of byte t / 8 (numpy's little bit order, so the
     * bytes read as int32 words are the bitmask layout): 8 times less fresh memory to fault
     * in and write than a bool per token, in every cold mask. */
    uint8_t *allowed;
    Py_ssize_t n_ids;
    /* Sorted token rows the walk is limited to (empty: all): a subtree is skipped when none
     * of them lies in it. */
    const int64_t *only;
    Py_ssize_t n_only;
    /* Bytes that can follow the base frame's end in some context: a token that passes a point
     * where the frame could end goes on in the context only with one of them next. */
    const uint8_t *follow;
    PyObject *core, *ctx;
    /* Set when the slice's tokens are already in `allowed` (see slice_tokens): 4 words, the
     * bytes a token may start with to be one of them; NULL otherwise. A block of such tokens
     * is then skipped without marking each of them again. */
    const uint64_t *premarked_first;
    int32_t premarked_reach;
    /* Set (walk's `fold` argument) when the chain's -1 entries stand for a counted repetition
     * whose copies behave alike for every token shorter than the chain (see
     * mask_cache._native_slice_chain): a path still on such a part of the chain stays in the
     * chain's last built state instead of stepping into the next copy, so the states of one
     * copy serve every depth. The caller walks the tokens as long as the chain again. */
    int fold;
} Walk;

static PyObject *run_walk(const Walk *w);

static PyObject *walk(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[N_BUFS];
    PyObject *core = Py_None, *ctx = Py_None;
    int fold = 0;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOO|OOp", &objs[0], &objs[1], &objs[2], &objs[3],
                          &objs[4], &objs[5], &objs[6], &objs[7], &objs[8], &objs[9], &objs[10],
                          &objs[11], &objs[12], &core, &ctx, &fold))
        return NULL;
    /* With a determiniser Core, states met unfilled are built here, in C (see ensure_row). */
    int fill_inline = core != Py_None;
    if (fill_inline && load_determinise_api() < 0) return NULL;
    static const char *names[N_BUFS] = {
        "table", "filled", "finishes", "nodes", "subtree_bytes", "ids", "chain", "outside_bytes",
        "pending_in", "allowed", "only_rows", "follow", "maxlen"};
    static const Py_ssize_t sizes[N_BUFS] = {4, 1, 1, 1, 8, 4, 8, 8, 8, 1, 8, 1, 4};
    Buf bufs[N_BUFS];
    memset(bufs, 0, sizeof(bufs));
    for (int i = 0; i < N_BUFS; i++) {
        if (get_buf(objs[i], &bufs[i], i == 9 || (fill_inline && i <= 2), sizes[i], names[i]) < 0) {
            release(bufs, N_BUFS);
            return NULL;
        }
    }
    Walk w = {
        .table = bufs[0].b.buf, .filled = bufs[1].b.buf, .finishes = bufs[2].b.buf,
        .n_states = bufs[1].b.len, .nodes = bufs[3].b.buf, .subtree = bufs[4].b.buf,
        .ids = bufs[5].b.buf, .maxlen = bufs[12].b.buf,
        .n_nodes = bufs[3].b.len / (Py_ssize_t)sizeof(Node), .n_rows = bufs[5].b.len / 4,
        .chain = bufs[6].b.buf, .chain_len = bufs[6].b.len / 8, .outside = bufs[7].b.buf,
        .use_slice = bufs[6].b.len > 0 && bufs[7].b.len == 32,
        .pending_in = bufs[8].b.buf, .n_in = bufs[8].b.len / 8 / 3,
        .allowed = bufs[9].b.buf, .n_ids = 8 * bufs[9].b.len,
        .only = bufs[10].b.buf, .n_only = bufs[10].b.len / 8, .follow = bufs[11].b.buf,
        .core = core, .ctx = ctx, .fold = fold};
    if (bufs[3].b.len % (Py_ssize_t)sizeof(Node) || bufs[4].b.len != 32 * w.n_nodes ||
        bufs[12].b.len != 4 * w.n_nodes || bufs[0].b.len < 4 * 256 * w.n_states ||
        bufs[11].b.len != 256 || bufs[2].b.len < w.n_states) {
        release(bufs, N_BUFS);
        PyErr_SetString(PyExc_ValueError, "trie walk: array sizes do not match");
        return NULL;
    }
    PyObject *result = run_walk(&w);
    release(bufs, N_BUFS);
    return result;
}

static int cmp_int64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The walk itself: (pending triples, the trie rows of tokens needing the context, sorted,
 * deepest byte), or NULL with an exception. */
static PyObject *run_walk(const Walk *w) {
    int32_t *table = w->table;
    uint8_t *filled = w->filled, *finishes = w->finishes;
    const Node *nodes = w->nodes;
    const uint64_t *subtree = w->subtree;
    const int32_t *ids = w->ids, *maxlen = w->maxlen;
    const int64_t *chain = w->chain, *pending_in = w->pending_in, *only = w->only;
    const uint64_t *outside = w->outside;
    uint8_t *allowed = w->allowed;
    const uint8_t *follow = w->follow;
    Py_ssize_t n_states = w->n_states, n_nodes = w->n_nodes, n_rows = w->n_rows,
               n_ids = w->n_ids, chain_len = w->chain_len, n_in = w->n_in, n_only = w->n_only;
    int use_slice = w->use_slice;
    PyObject *core = w->core, *ctx = w->ctx;
    int fill_inline = core != Py_None;
    /* The deepest node is the longest token (the root's maxlen); one state per depth. */
    int32_t max_depth = n_nodes > 0 ? maxlen[0] : 0;
    if (max_depth < 0 || max_depth > 65535) {
        PyErr_SetString(PyExc_ValueError, "trie walk: bad trie depth");
        return NULL;
    }
    int64_t *st_state = calloc((size_t)max_depth + 1, sizeof(int64_t));
    int64_t *st_flag = calloc((size_t)max_depth + 1, sizeof(int64_t));
    uint8_t *st_ends = calloc((size_t)max_depth + 1, 1);
    /* st_in[d]: the path to depth d is a prefix of a premarked slice token */
    uint8_t *st_in = calloc((size_t)max_depth + 1, 1);
    /* st_olen[d]: how many frames of `outer` lie below st_state[d] (see split_top) */
    int32_t *st_olen = calloc((size_t)max_depth + 1, sizeof(int32_t));
    int32_t outer_cap = 8 * (max_depth + 1) + 64;
    int64_t *outer = malloc(sizeof(int64_t) * (size_t)outer_cap);
    int split = fill_inline && PyTuple_Check(ctx) && PyTuple_GET_SIZE(ctx) >= 2;
    const uint64_t *premarked_first = w->premarked_first;
    Py_ssize_t pending_cap = 64, n_pending = 0;
    int64_t *pending = malloc(sizeof(int64_t) * 3 * (size_t)pending_cap);
    /* Tokens needing the context are few: collected as trie rows, not marked in an array
     * (rows, not ids: the exact walk that decides them goes by rows, and turning ids back
     * into rows took numpy 15-20 us in a cold several-frame mask). */
    Py_ssize_t needs_cap = 64, n_needs = 0;
    int64_t *needs = malloc(sizeof(int64_t) * (size_t)needs_cap);
    if (!st_state || !st_flag || !st_ends || !st_in || !st_olen || !outer || !pending || !needs) {
        free(st_state);
        free(st_flag);
        free(st_ends);
        free(st_in);
        free(st_olen);
        free(outer);
        free(pending);
        free(needs);
        return PyErr_NoMemory();
    }
    int bad = 0;
    /* The state a folded path stays in: the last built entry before the chain's -1 part. */
    int64_t fold_state = -1;
    if (w->fold && use_slice)
        for (Py_ssize_t j = 1; j < chain_len; j++)
            if (chain[j] < 0) {
                fold_state = chain[j - 1];
                break;
            }
    int32_t reached = 0; /* deepest byte the verdicts depended on */
    if (premarked_first) reached = w->premarked_reach;
#define CHECK_ROW(r)                                                     \
    if (r < 0 || r >= n_rows || ids[r] < 0 || ids[r] >= n_ids) {         \
        bad = 1;                                                         \
        break;                                                           \
    }
#define ALLOW(lo, hi)                                                    \
    for (int32_t r = (lo); r < (hi); r++) {                             \
        CHECK_ROW(r)                                                     \
        allowed[ids[r] >> 3] |= (uint8_t)(1u << (ids[r] & 7));           \
    }
#define NEED(lo, hi)                                                     \
    for (int32_t r = (lo); r < (hi); r++) {                             \
        CHECK_ROW(r)                                                     \
        if (n_needs == needs_cap) {                                      \
            int64_t *more = realloc(needs, sizeof(int64_t) * 2 * (size_t)needs_cap); \
            if (!more) { bad = 2; break; }                               \
            needs = more;                                                \
            needs_cap *= 2;                                              \
        }                                                                \
        needs[n_needs++] = r;                                            \
    }
/* Build state s's row on the spot when a Core is given (see ensure_row). */
#define FILL_INLINE(s)                                                   \
    if (!filled[s] && fill_inline) {                                     \
        Py_BLOCK_THREADS                                                 \
        int got = ensure_row(core, ctx, (s), table, n_states, filled, finishes); \
        Py_UNBLOCK_THREADS                                               \
        if (got < 0) { bad = 3; break; }                                 \
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t item = 0; item < n_in && !bad; item++) {
        int64_t g = pending_in[3 * item], s = pending_in[3 * item + 1];
        int64_t flag = pending_in[3 * item + 2];
        if (g < 0 || g >= n_nodes || s < 0 || s >= n_states) { bad = 1; break; }
        FILL_INLINE(s)
        if (!filled[s]) {
            if (!push3(&pending, &pending_cap, &n_pending, g, s, flag)) { bad = 2; break; }
            continue;
        }
        int32_t d0 = nodes[g].depth, end = nodes[g].subtree_end;
        if (d0 > max_depth || end <= g || end > n_nodes) { bad = 1; break; }
        st_state[d0] = s;
        st_flag[d0] = flag;
        st_ends[d0] = d0 > 0 && finishes[s];
        st_in[d0] = premarked_first && d0 == 0;
        st_olen[d0] = 0;
        if (g + 1 < end && d0 + 1 > reached) reached = d0 + 1;
        int32_t i = (int32_t)g + 1;
        while (i < end) {
            const Node *node = nodes + i;
            int32_t d = node->depth, next = node->subtree_end;
            /* bit 0 of a flag: the base frame could end on the way, with a byte that can follow
             * it next; bit 1: the path left the slice (a byte outside it), so the chain no
             * longer vouches for what follows. */
            if (d < 1 || d > max_depth || next <= i || next > end) { bad = 1; break; }
            if (n_only && !any_between(only, n_only, node->row_lo, node->row_hi)) {
                i = next;
                continue;
            }
            int byte = node->byte;
            int64_t child_flag = st_flag[d - 1] | (st_ends[d - 1] && follow[byte]);
            int32_t ns = table[256 * st_state[d - 1] + byte];
            if (ns < 0) {
                if (child_flag & 1) NEED(node->row_lo, node->row_hi)
                if (bad) break;
                i = next;
                continue;
            }
            int out_of_slice = use_slice && (outside[byte >> 6] >> (byte & 63)) & 1;
            /* Whether the tokens here are premarked: the path's first byte starts one and
             * every byte after it is a slice byte. */
            int in_premarked = premarked_first && st_in[d - 1] && st_olen[d - 1] == 0 &&
                               (d == 1 ? (premarked_first[byte >> 6] >> (byte & 63)) & 1
                                       : !out_of_slice);
            if (!in_premarked) ALLOW(node->row_lo, node->row_lo + node->end_count)
            if (bad) break;
            if (out_of_slice) child_flag |= 2;
            /* On the chain: its state says so, or (for a chain known to repeat, whose later
             * entries are -1) every byte so far was a slice byte. */
            int on_chain = use_slice && d < chain_len && st_olen[d - 1] == 0 &&
                           (chain[d] >= 0 ? ns == chain[d] : !(child_flag & 2));
            if (on_chain && fold_state >= 0 && chain[d] < 0) ns = (int32_t)fold_state;
            if (on_chain && maxlen[i] < chain_len) {
                const uint64_t *below = subtree + 4 * (size_t)i;
                if (!((below[0] & outside[0]) | (below[1] & outside[1]) |
                      (below[2] & outside[2]) | (below[3] & outside[3]))) {
                    if (maxlen[i] > reached) reached = maxlen[i];
                    if (!in_premarked) ALLOW(node->row_lo, node->row_hi)
                    if (bad) break;
                    i = next;
                    continue;
                }
            }
            if (next > i + 1) { /* it has children: walk them in state ns */
                if (ns >= n_states || d >= max_depth) { bad = 1; break; }
                int64_t s = ns;
                int32_t olen = st_olen[d - 1];
                if (split && (s & 1) && !filled[s]) {
                    /* a call entered mid-token: go on in its top's one-frame state */
                    int32_t grown = olen;
                    int got = 0;
                    Py_BLOCK_THREADS
                    long long top = split_top(ctx, s, outer, &grown, outer_cap);
                    if (top >= 0 && 2 * top < n_states)
                        got = ensure_row(core, ctx, 2 * top, table, n_states, filled, finishes);
                    Py_UNBLOCK_THREADS
                    if (got < 0) { bad = 3; break; }
                    if (got == 1) {
                        s = 2 * top;
                        olen = grown;
                    }
                }
                FILL_INLINE(s)
                if (olen > 0 && (!filled[s] || finishes[s])) {
                    /* The called frame could end here (the frames below decide what may
                     * follow), or Python must fill the state: the whole state again. */
                    Py_BLOCK_THREADS
                    s = materialize(ctx, outer, olen, s);
                    Py_UNBLOCK_THREADS
                    if (s < 0) { bad = 3; break; }
                    olen = 0;
                    if (s < n_states) FILL_INLINE(s)
                }
                if (s >= n_states || !filled[s]) {
                    if (!push3(&pending, &pending_cap, &n_pending, i, s, child_flag)) {
                        bad = 2;
                        break;
                    }
                    i = next;
                    continue;
                }
                if (d + 1 > reached) reached = d + 1;
                st_state[d] = s;
                st_olen[d] = olen;
                st_flag[d] = child_flag;
                st_ends[d] = olen == 0 && finishes[s];
                st_in[d] = (uint8_t)(in_premarked && olen == 0);
            }
            i++;
        }
    }
    Py_END_ALLOW_THREADS
#undef ALLOW
#undef NEED
#undef CHECK_ROW
#undef FILL_INLINE
    free(st_state);
    free(st_flag);
    free(st_ends);
    free(st_in);
    free(st_olen);
    free(outer);
    if (bad) {
        free(pending);
        free(needs);
        if (bad == 2) return PyErr_NoMemory();
        if (bad == 3) return NULL; /* raised while building a state */
        PyErr_SetString(PyExc_IndexError, "trie walk: node, row or state id out of range");
        return NULL;
    }
    /* A depth-first walk meets rows in order; a walk resumed from pending nodes may not. */
    int sorted_rows = 1;
    for (Py_ssize_t i = 1; i < n_needs && sorted_rows; i++) sorted_rows = needs[i - 1] < needs[i];
    if (!sorted_rows && n_needs > 1) {
        qsort(needs, (size_t)n_needs, sizeof(int64_t), cmp_int64);
        Py_ssize_t kept = 1;
        for (Py_ssize_t i = 1; i < n_needs; i++)
            if (needs[i] != needs[kept - 1]) needs[kept++] = needs[i];
        n_needs = kept;
    }
    PyObject *result = Py_BuildValue("y#y#i", (const char *)pending,
                                     (Py_ssize_t)(sizeof(int64_t) * 3 * n_pending),
                                     (const char *)needs, (Py_ssize_t)(sizeof(int64_t) * n_needs),
                                     (int)reached);
    free(pending);
    free(needs);
    return result;
}

/* The most common target of a row (the smallest id among equals, as np.unique would pick),
 * or -1; its count in *count. Counted over the distinct targets seen (a row has few). */
static int32_t most_common(const int32_t *row, int *count) {
    int32_t seen[256];
    int counts[256];
    int n_seen = 0;
    for (int b = 0; b < 256; b++) {
        int32_t t = row[b];
        if (t < 0) continue;
        int k = 0;
        while (k < n_seen && seen[k] != t) k++;
        if (k == n_seen) {
            seen[n_seen] = t;
            counts[n_seen++] = 0;
        }
        counts[k]++;
    }
    int32_t best = -1;
    *count = 0;
    for (int k = 0; k < n_seen; k++) {
        if (counts[k] > *count || (counts[k] == *count && seen[k] < best)) {
            best = seen[k];
            *count = counts[k];
        }
    }
    return best;
}

typedef struct {
    int32_t *table;
    uint8_t *filled, *finishes;
    Py_ssize_t n_states;
    PyObject *core, *ctx;
} Rows;

/* The chain from state `from` (row filled) along the slice bytes, `succ` being where they
 * lead: chain[0] = from, then each state reached, up to limit + 1 states, a loop repeated to
 * the limit. Returns the length; *missing set to a state whose row Python must fill first;
 * -1 with an exception. */
static long long run_chain(Rows *r, int64_t from, int64_t succ, const uint8_t *slice,
                           long long limit, int64_t *chain, long long *missing) {
    long long length = 0;
    chain[length++] = from;
    while (length <= limit) {
        long long loop_at = -1;
        for (long long i = 0; i < length; i++)
            if (chain[i] == succ) { loop_at = i; break; }
        if (loop_at >= 0) {
            long long period = length - loop_at;
            while (length <= limit) {
                chain[length] = chain[loop_at + (length - loop_at) % period];
                length++;
            }
            break;
        }
        if (succ < 0 || succ >= r->n_states) {
            PyErr_SetString(PyExc_IndexError, "slice_chain: state id out of range");
            return -1;
        }
        chain[length++] = succ;
        int got = ensure_row(r->core, r->ctx, succ, r->table, r->n_states, r->filled, r->finishes);
        if (got < 0) return -1;
        if (!got) { *missing = succ; break; }
        const int32_t *next_row = r->table + 256 * succ;
        int32_t following = -2;
        int uniform = 1;
        for (int b = 0; b < 256 && uniform; b++) {
            if (!slice[b]) continue;
            if (following == -2) following = next_row[b];
            else if (next_row[b] != following) uniform = 0;
        }
        if (following < 0 || !uniform) break;
        succ = following;
    }
    return length;
}

/* The bytes leading from chain[1] to chain[2], when each of them also leads from every later
 * state of the chain to the next (then the slice is that set: the walk takes a token's first
 * byte itself, and from the first chain state on the slice is often wider than at the base:
 * after "(" in an arithmetic grammar the base's slice is the letters that start no function
 * name, the next state's every identifier byte). 0: keep the slice as it is. */
static int wider_slice(const Rows *r, const int64_t *chain, long long length, uint8_t *wider) {
    if (length < 3) return 0;
    const int32_t *first = r->table + 256 * chain[1];
    for (int b = 0; b < 256; b++) wider[b] = first[b] == chain[2];
    for (long long i = 2; i + 1 < length; i++) {
        /* A looping chain repeats its pairs: a pair checked already needs no second look. */
        if (chain[i] == chain[i - 1] && chain[i + 1] == chain[i]) continue;
        const int32_t *row = r->table + 256 * chain[i];
        for (int b = 0; b < 256; b++)
            if (wider[b] && row[b] != chain[i + 1]) return 0;
    }
    return 1;
}

/* slice_chain(table, filled, finishes, base, horizon, limit, min_bytes, chain_out,
 *             outside_out[, core]) -> (length, missing, mode)
 *
 * The slice of `base`: the byte set all leading to its most common successor, when at least
 * min_bytes; and the chain of states those bytes lead through, in chain_out[:length] (at most
 * limit + 1 states; limit <= horizon). mode 1: that. mode 2: `base` has no slice, the chain
 * starts one byte late, at base's most common successor, whose slice it follows (up to
 * horizon + 1 states, chain_out[0] = base): after "(" in an arithmetic grammar the first
 * letter splits into function names and identifiers, but from there on every identifier byte
 * leads to the next identifier state. mode 0, length 0: no slice. When the whole mode-1 chain
 * is asked for (limit == horizon), the slice may be widened (wider_slice). outside_out (4
 * uint64) receives the bytes outside the slice as bits. missing >= 0: a state whose row is not
 * filled (with a Core, only states of several stacks, and with a context only states Python
 * must grow the table for or refuse); fill it and call again. */
/* The slice chain of `base` (see slice_chain below) into chain/outside: *length, *missing
 * and *mode as slice_chain returns them. 0, or -1 with an exception. */
static int run_slice_chain(Rows *r, long long base, long long horizon, long long limit,
                           long long min_bytes, int64_t *chain, uint64_t *outside,
                           long long *length_out, long long *missing_out, int *mode_out) {
    PyObject *core = r->core, *ctx = r->ctx;
    long long length = 0, missing = -1;
    int mode = 0, got = ensure_row(core, ctx, base, r->table, r->n_states, r->filled, r->finishes);
    uint8_t slice[256];
    if (got < 0) return -1;
    if (!got) {
        missing = base;
        goto done;
    }
    int count;
    const int32_t *row = r->table + 256 * base;
    int32_t best = most_common(row, &count);
    if (best >= 0 && count >= min_bytes) {
        mode = 1;
        for (int b = 0; b < 256; b++) slice[b] = row[b] == best;
        length = run_chain(r, base, best, slice, limit, chain, &missing);
        uint8_t wider[256];
        if (length >= 0 && missing < 0 && limit == horizon && wider_slice(r, chain, length, wider))
            memcpy(slice, wider, sizeof(slice));
    } else if (best >= 0 && horizon >= 2) {
        if (best >= r->n_states) {
            PyErr_SetString(PyExc_IndexError, "slice_chain: state id out of range");
            return -1;
        }
        got = ensure_row(core, ctx, best, r->table, r->n_states, r->filled, r->finishes);
        if (got < 0) return -1;
        if (!got) {
            missing = best;
            goto done;
        }
        const int32_t *next_row = r->table + 256 * best;
        int32_t succ = most_common(next_row, &count);
        if (succ >= 0 && count >= min_bytes) {
            mode = 2;
            for (int b = 0; b < 256; b++) slice[b] = next_row[b] == succ;
            chain[0] = base;
            length = run_chain(r, best, succ, slice, horizon - 1, chain + 1, &missing);
            if (length > 0) length++;
        }
    }
    if (length < 0) return -1;
    if (missing >= 0 || length == 0) {
        length = 0;
        mode = 0;
    } else {
        memset(outside, 0, 32);
        for (int b = 0; b < 256; b++)
            if (!slice[b]) outside[b >> 6] |= (uint64_t)1 << (b & 63);
    }
done:
    *length_out = length;
    *missing_out = missing;
    *mode_out = mode;
    return 0;
}

/* Python: slice_chain(...), documented above run_slice_chain. */
static PyObject *slice_chain(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[5];
    PyObject *core = Py_None, *ctx = Py_None;
    long long base, horizon, limit, min_bytes;
    if (!PyArg_ParseTuple(args, "OOOLLLLOO|OO", &objs[0], &objs[1], &objs[2], &base, &horizon,
                          &limit, &min_bytes, &objs[3], &objs[4], &core, &ctx))
        return NULL;
    int fill_inline = core != Py_None;
    if (fill_inline && load_determinise_api() < 0) return NULL;
    static const char *names[5] = {"table", "filled", "finishes", "chain_out", "outside_out"};
    static const Py_ssize_t sizes[5] = {4, 1, 1, 8, 8};
    Buf bufs[5];
    memset(bufs, 0, sizeof(bufs));
    for (int i = 0; i < 5; i++) {
        if (get_buf(objs[i], &bufs[i], i >= 3 || fill_inline, sizes[i], names[i]) < 0) {
            release(bufs, 5);
            return NULL;
        }
    }
    Rows r = {bufs[0].b.buf, bufs[1].b.buf, bufs[2].b.buf, bufs[1].b.len, core, ctx};
    int64_t *chain = bufs[3].b.buf;
    uint64_t *outside = bufs[4].b.buf;
    if (base < 0 || base >= r.n_states || bufs[2].b.len != r.n_states || bufs[4].b.len != 32 ||
        limit < 0 || limit > horizon || bufs[3].b.len / 8 < horizon + 1 ||
        bufs[0].b.len < 4 * 256 * r.n_states) {
        release(bufs, 5);
        PyErr_SetString(PyExc_ValueError, "slice_chain: bad base state, limit or array sizes");
        return NULL;
    }
    long long length = 0, missing = -1;
    int mode = 0;
    if (run_slice_chain(&r, base, horizon, limit, min_bytes, chain, outside, &length, &missing,
                        &mode) < 0) {
        release(bufs, 5);
        return NULL;
    }
    release(bufs, 5);
    return Py_BuildValue("LLi", length, missing, mode);
}

/* The tokens whose first byte is in `first` and whose every later byte is outside
 * `outside`, as bits (bit t % 8 of byte t / 8, `n_bytes` bytes): the tokens a whole slice
 * chain admits. *reach: the longest of them. 0, or -1 with an exception. */
static int slice_tokens(const Node *nodes, Py_ssize_t n_nodes, const uint64_t *subtree,
                        const int32_t *ids, Py_ssize_t n_rows, const int32_t *maxlen,
                        const uint64_t *first, const uint64_t *outside, uint8_t *bits,
                        Py_ssize_t n_bytes, int32_t *reach) {
    int32_t max_depth = n_nodes > 0 ? maxlen[0] : 0;
    uint8_t *ok = calloc((size_t)max_depth + 1, 1);
    if (!ok) {
        PyErr_NoMemory();
        return -1;
    }
    ok[0] = 1;
    *reach = 0;
    int bad = 0;
    Py_ssize_t i = 1;
    while (i < n_nodes && !bad) {
        const Node *node = nodes + i;
        int32_t d = node->depth, byte = node->byte;
        Py_ssize_t next = node->subtree_end;
        if (d < 1 || d > max_depth || next <= i || next > n_nodes) { bad = 1; break; }
        int good = ok[d - 1] && (d == 1 ? (first[byte >> 6] >> (byte & 63)) & 1
                                        : !((outside[byte >> 6] >> (byte & 63)) & 1));
        if (!good) {
            i = next;
            continue;
        }
        const uint64_t *below = subtree + 4 * (size_t)i;
        int block = !((below[0] & outside[0]) | (below[1] & outside[1]) |
                      (below[2] & outside[2]) | (below[3] & outside[3]));
        int32_t hi = block ? node->row_hi : node->row_lo + node->end_count;
        if (node->row_lo < 0 || hi > n_rows) { bad = 1; break; }
        for (int32_t r = node->row_lo; r < hi; r++) {
            int32_t t = ids[r];
            if (t < 0 || t >= 8 * n_bytes) { bad = 1; break; }
            bits[t >> 3] |= (uint8_t)(1u << (t & 7));
        }
        if (block) {
            if (maxlen[i] > *reach) *reach = maxlen[i];
            i = next;
            continue;
        }
        if (node->end_count && d > *reach) *reach = d;
        ok[d] = 1;
        i++;
    }
    free(ok);
    if (bad) {
        PyErr_SetString(PyExc_IndexError, "slice_tokens: node, row or token id out of range");
        return -1;
    }
    return 0;
}

/* Mark the tokens a whole slice chain admits from `base` in `allowed`, from the memo `slices`
 * (bytes of the first-byte set and the outside set -> (bits, reach)), computed on a miss:
 * they depend on the vocabulary and the two byte sets only, so every grammar and state with
 * the same slice (a JSON string's characters) shares them, and the walk skips them. The
 * first-byte set is what leads from `base` to the chain's second state. 1 done (first_out and
 * *reach set), 0 not applicable, -1 with an exception. */
#define SLICE_MEMO_LIMIT 64 /* slices remembered per vocabulary (a few KB each) */

static int premark_slice(PyObject *slices, const int32_t *base_row, int64_t second,
                         const uint64_t *outside, const Node *nodes, Py_ssize_t n_nodes,
                         const uint64_t *subtree, const int32_t *ids, Py_ssize_t n_rows,
                         const int32_t *maxlen, uint8_t *allowed, Py_ssize_t n_bytes,
                         uint64_t *first_out, int32_t *reach) {
    if (slices == Py_None || !PyDict_Check(slices)) return 0;
    uint64_t key[8];
    memset(key, 0, sizeof(key));
    for (int b = 0; b < 256; b++)
        if (base_row[b] == second) key[b >> 6] |= (uint64_t)1 << (b & 63);
    memcpy(key + 4, outside, 32);
    PyObject *key_obj = PyBytes_FromStringAndSize((const char *)key, sizeof(key));
    if (!key_obj) return -1;
    PyObject *got = PyDict_GetItemWithError(slices, key_obj); /* borrowed */
    if (!got && PyErr_Occurred()) {
        Py_DECREF(key_obj);
        return -1;
    }
    if (!got) {
        PyObject *bits = PyBytes_FromStringAndSize(NULL, n_bytes);
        if (!bits) {
            Py_DECREF(key_obj);
            return -1;
        }
        memset(PyBytes_AS_STRING(bits), 0, (size_t)n_bytes);
        int32_t r = 0;
        if (slice_tokens(nodes, n_nodes, subtree, ids, n_rows, maxlen, key, outside,
                         (uint8_t *)PyBytes_AS_STRING(bits), n_bytes, &r) < 0) {
            Py_DECREF(bits);
            Py_DECREF(key_obj);
            return -1;
        }
        got = Py_BuildValue("(Ni)", bits, (int)r);
        if (got && PyDict_GET_SIZE(slices) >= SLICE_MEMO_LIMIT) PyDict_Clear(slices);
        if (!got || PyDict_SetItem(slices, key_obj, got) < 0) {
            Py_XDECREF(got);
            Py_DECREF(key_obj);
            return -1;
        }
        Py_DECREF(got); /* the dict holds it */
    }
    Py_DECREF(key_obj);
    PyObject *bits = PyTuple_GET_ITEM(got, 0);
    if (!PyBytes_Check(bits) || PyBytes_GET_SIZE(bits) != n_bytes) {
        PyErr_SetString(PyExc_ValueError, "slice_tokens: memo for another vocabulary size");
        return -1;
    }
    const uint8_t *src = (const uint8_t *)PyBytes_AS_STRING(bits);
    for (Py_ssize_t k = 0; k < n_bytes; k++) allowed[k] |= src[k];
    *reach = (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(got, 1));
    memcpy(first_out, key, 32);
    return 1;
}

/* cold_walk(table, filled, finishes, nodes, subtree_bytes, ids, maxlen, allowed, follow, base,
 *           horizon, min_bytes, core, context[, limit]) -> (pending, needs, reached) or None
 *
 * A cold mask's whole walk from one state in one call: the slice chain of `base` and then the
 * walk from the trie's root, with the Core and the DenseStates context building every state
 * met. This is slice_chain followed by walk without the Python between them: their arrays,
 * calls and buffer handling were a third of a small grammar's cold mask. With a `limit` below
 * the horizon (an automaton with lazily copied repetitions, whose chains Python shortens when
 * they repeat, see mask_cache._native_slice_chain), a slice chain that goes on past `limit`
 * states is left to Python, unless it loops on one state (then Python takes it whole too). None: the slice chain met a state Python has to fill first, or
 * went past the limit; take the general path. */
static PyObject *cold_walk(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[9];
    PyObject *core, *ctx;
    PyObject *slices = Py_None;
    long long base, horizon, min_bytes, limit = -1;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOLLLOO|LO", &objs[0], &objs[1], &objs[2], &objs[3],
                          &objs[4], &objs[5], &objs[6], &objs[7], &objs[8], &base, &horizon,
                          &min_bytes, &core, &ctx, &limit, &slices))
        return NULL;
    if (limit < 0 || limit > horizon) limit = horizon;
    if (core == Py_None) {
        PyErr_SetString(PyExc_TypeError, "cold_walk: needs the determiniser's Core");
        return NULL;
    }
    if (load_determinise_api() < 0) return NULL;
    static const char *names[9] = {"table", "filled", "finishes", "nodes", "subtree_bytes",
                                   "ids", "maxlen", "allowed", "follow"};
    static const Py_ssize_t sizes[9] = {4, 1, 1, 1, 8, 4, 4, 1, 1};
    Buf bufs[9];
    memset(bufs, 0, sizeof(bufs));
    for (int i = 0; i < 9; i++) {
        if (get_buf(objs[i], &bufs[i], i <= 2 || i == 7, sizes[i], names[i]) < 0) {
            release(bufs, 9);
            return NULL;
        }
    }
    Py_ssize_t n_states = bufs[1].b.len;
    Py_ssize_t n_nodes = bufs[3].b.len / (Py_ssize_t)sizeof(Node);
    if (bufs[3].b.len % (Py_ssize_t)sizeof(Node) || bufs[4].b.len != 32 * n_nodes ||
        bufs[6].b.len != 4 * n_nodes || bufs[0].b.len < 4 * 256 * n_states ||
        bufs[2].b.len != n_states || bufs[8].b.len != 256 || base < 0 || base >= n_states ||
        horizon < 0 || horizon > 65535) {
        release(bufs, 9);
        PyErr_SetString(PyExc_ValueError, "cold_walk: bad base state, horizon or array sizes");
        return NULL;
    }
    int64_t *chain = malloc(sizeof(int64_t) * (size_t)(horizon + 1));
    if (!chain) {
        release(bufs, 9);
        return PyErr_NoMemory();
    }
    uint64_t outside[4];
    Rows r = {bufs[0].b.buf, bufs[1].b.buf, bufs[2].b.buf, n_states, core, ctx};
    long long length = 0, missing = -1;
    int mode = 0;
    PyObject *result = NULL;
    if (run_slice_chain(&r, base, horizon, limit, min_bytes, chain, outside, &length,
                        &missing, &mode) < 0)
        goto done;
    if (missing < 0 && limit < horizon && mode == 1 && length == limit + 1 && limit >= 2 &&
        chain[2] == chain[1]) {
        /* The chain loops on one state (an unbounded string's characters): no copies to
         * tell apart, and Python would take the whole chain, so take it here. */
        if (run_slice_chain(&r, base, horizon, horizon, min_bytes, chain, outside, &length,
                            &missing, &mode) < 0)
            goto done;
        limit = horizon;
    }
    if (missing >= 0 || (limit < horizon && mode == 1 && length == limit + 1)) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    int64_t start[3] = {0, base, 0};
    /* A chain longer than every token that starts at the base (mode 1) admits a fixed set of
     * tokens: premarked from the memo, the walk only visits the others. */
    uint64_t first[4];
    int32_t premarked_reach = 0;
    int premarked = 0;
    if (mode == 1 && n_nodes > 0 && length > ((const int32_t *)bufs[6].b.buf)[0] && length >= 2) {
        premarked = premark_slice(slices, (const int32_t *)bufs[0].b.buf + 256 * base, chain[1],
                                  outside, bufs[3].b.buf, n_nodes, bufs[4].b.buf, bufs[5].b.buf,
                                  bufs[5].b.len / 4, bufs[6].b.buf, bufs[7].b.buf,
                                  bufs[7].b.len, first, &premarked_reach);
        if (premarked < 0) goto done;
    }
    Walk w = {
        .table = bufs[0].b.buf, .filled = bufs[1].b.buf, .finishes = bufs[2].b.buf,
        .n_states = n_states, .nodes = bufs[3].b.buf, .subtree = bufs[4].b.buf,
        .ids = bufs[5].b.buf, .maxlen = bufs[6].b.buf, .n_nodes = n_nodes,
        .n_rows = bufs[5].b.len / 4, .chain = chain, .chain_len = length, .outside = outside,
        .use_slice = length > 0, .pending_in = start, .n_in = 1, .allowed = bufs[7].b.buf,
        .n_ids = 8 * bufs[7].b.len, .only = NULL, .n_only = 0, .follow = bufs[8].b.buf,
        .core = core, .ctx = ctx, .premarked_first = premarked ? first : NULL,
        .premarked_reach = premarked_reach};
    result = run_walk(&w);
done:
    free(chain);
    release(bufs, 9);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS,
     "walk(table, filled, finishes, nodes, subtree_bytes, ids, chain, outside_bytes, pending_in, "
     "allowed, only_rows, follow, maxlen[, core[, context[, fold]]]) -> (bytes "
     "of int64 (node, state, flag) triples that stopped at unfilled rows, bytes of the int64 "
     "trie rows (sorted) of tokens that need the context, deepest byte looked at); allowed token ids get their bit "
     "set in allowed (bit t % 8 of byte t // 8); with a determiniser Core, one-frame states are "
     "built on the way, and with the DenseStates context every other state too"},
    {"cold_walk", cold_walk, METH_VARARGS,
     "cold_walk(table, filled, finishes, nodes, subtree_bytes, ids, maxlen, allowed, follow, "
     "base, horizon, min_bytes, core, context[, limit]) -> (pending, needs, reached), or None "
     "when the slice chain needs Python first: slice_chain then walk from the root, in one call"},
    {"slice_chain", slice_chain, METH_VARARGS,
     "slice_chain(table, filled, finishes, base, horizon, limit, min_bytes, chain_out, "
     "outside_out[, core[, context]]) -> (length, missing state or -1, mode)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_trie_walk",
                                    "Depth-first token-trie walk for cold masks.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__trie_walk(void) { return PyModule_Create(&module); }
