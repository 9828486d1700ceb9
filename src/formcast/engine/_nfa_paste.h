/* Pasting copies of NFA states, shared by the determiniser module (paste, paste_range, for
 * the Python builder) and the C builder (_nfa_build: copies of inlined rules). The NFA is
 * three Python lists (eps, byte_edges, call_edges), one edge container a state, edges
 * relative to their source, so a copy can share the containers of what it copies. */
#ifndef FORMCAST_NFA_PASTE_H
#define FORMCAST_NFA_PASTE_H

#include <Python.h>

#include "_seq_items.h"

/* Take a container of ints, or of tuples of ints and names, out of the cyclic garbage
 * collector's lists: it can never be part of a reference cycle, and an automaton holds tens
 * of thousands of them (NFA edge lists, 256-entry DFA rows). Left tracked, every collection
 * of an older generation walks them all again (measured: 1-5 ms pauses inside cold masks). */
static void untrack_acyclic(PyObject *container) {
    if (container && PyObject_GC_IsTracked(container)) PyObject_GC_UnTrack(container);
}

/* Append to outs[k] (the NFA's eps, byte_edges and call_edges lists) fresh lists holding the
 * items of srcs[k] (a copy's first state or exit, which the builder may extend); the exit's
 * epsilon edges are left out (no_eps). */
static inline int paste_fresh(PyObject *outs[3], PyObject *srcs[3], int no_eps) {
    for (int k = 0; k < 3; k++) {
        Py_ssize_t m;
        PyObject **src;
        if (items_of(srcs[k], &src, &m, "pasted edges") < 0) return -1;
        if (k == 0 && no_eps) m = 0;
        PyObject *list = PyList_New(m);
        if (!list) return -1;
        for (Py_ssize_t j = 0; j < m; j++) {
            Py_INCREF(src[j]);
            PyList_SET_ITEM(list, j, src[j]);
        }
        untrack_acyclic(list);
        int bad = PyList_Append(outs[k], list);
        Py_DECREF(list);
        if (bad < 0) return -1;
    }
    return 0;
}

/* A tuple with the items of an edge container (itself when it is one already), untracked
 * with its edge tuples (an untracked tuple's items are untracked: untrack in _determinise.c
 * relies on it): the container copies share, which nothing may change any more. New
 * reference. */
static PyObject *frozen(PyObject *container) {
    PyObject *out;
    if (PyTuple_CheckExact(container)) {
        Py_INCREF(container);
        out = container;
    } else if (PyList_CheckExact(container)) {
        out = PyList_AsTuple(container);
    } else {
        PyErr_SetString(PyExc_TypeError, "paste: edges are lists or tuples");
        return NULL;
    }
    if (PyObject_GC_IsTracked(out)) {
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(out); j++)
            untrack_acyclic(PyTuple_GET_ITEM(out, j));
        PyObject_GC_UnTrack(out);
    }
    return out;
}

/* Drop the NFA's last state (a copy's entry, allocated by the caller): the copy's first
 * state takes its number. */
static int drop_entry(PyObject *eps, PyObject *byte_edges, PyObject *call_edges) {
    Py_ssize_t entry = PyList_GET_SIZE(eps) - 1;
    if (entry < 0 || PyList_GET_SIZE(byte_edges) != entry + 1 ||
        PyList_GET_SIZE(call_edges) != entry + 1) {
        PyErr_SetString(PyExc_ValueError, "paste: the NFA lists differ in length");
        return -1;
    }
    if (PyList_SetSlice(eps, entry, entry + 1, NULL) < 0 ||
        PyList_SetSlice(byte_edges, entry, entry + 1, NULL) < 0 ||
        PyList_SetSlice(call_edges, entry, entry + 1, NULL) < 0)
        return -1;
    return 0;
}

/* A fresh list with the items of `src` (none when `empty`), untracked: a copy's first state
 * or exit, which the builder may extend. New reference. */
static PyObject *fresh_edges(PyObject *src, int empty) {
    Py_ssize_t m;
    PyObject **items;
    if (items_of(src, &items, &m, "pasted edges") < 0) return NULL;
    if (empty) m = 0;
    PyObject *list = PyList_New(m);
    if (!list) return NULL;
    for (Py_ssize_t j = 0; j < m; j++) {
        Py_INCREF(items[j]);
        PyList_SET_ITEM(list, j, items[j]);
    }
    untrack_acyclic(list);
    return list;
}

/* paste's copy of the NFA's own states [first, stop), read in place instead of from a
 * snapshot, replacing the NFA's last state (the copy's entry, allocated by the caller): the
 * containers of every state but the first and the exit are frozen to tuples where they are
 * (once: later copies of the same range find them frozen), and each NFA list is extended by
 * its slice [first, stop) in one call; then the copy's first state and exit get lists of
 * their own, the exit's without epsilon edges. (State by state, with a freeze check, a set
 * and an append each, this was ~100 ns a state: a schema pastes thousands, its whitespace
 * most of them.) 0, or -1 with a Python exception set. */
static int paste_range_into(PyObject *eps, PyObject *byte_edges, PyObject *call_edges,
                            long first, long stop, long exit_) {
    if (drop_entry(eps, byte_edges, call_edges) < 0) return -1;
    if (first < 0 || stop <= first || stop > PyList_GET_SIZE(eps) || exit_ < first ||
        exit_ >= stop) {
        PyErr_SetString(PyExc_ValueError, "paste_range: range out of the NFA");
        return -1;
    }
    PyObject *outs[3] = {eps, byte_edges, call_edges};
    Py_ssize_t at = PyList_GET_SIZE(eps);
    for (int k = 0; k < 3; k++) {
        PyObject *out = outs[k];
        for (long x = first; x < stop; x++) {
            if (x == first || x == exit_) continue;
            PyObject *item = PyList_GET_ITEM(out, x);
            if (PyTuple_CheckExact(item) && !PyObject_GC_IsTracked(item)) continue;
            PyObject *shared = frozen(item);
            if (!shared || PyList_SetItem(out, x, shared) < 0) return -1;
        }
        PyObject *slice = PyList_GetSlice(out, first, stop);
        if (!slice) return -1;
        int bad = PyList_SetSlice(out, at, at, slice);
        Py_DECREF(slice);
        if (bad < 0) return -1;
    }
    long ends[2] = {first, exit_};
    for (int e = 0; e < (exit_ == first ? 1 : 2); e++) {
        long x = ends[e];
        for (int k = 0; k < 3; k++) {
            PyObject *fresh = fresh_edges(PyList_GET_ITEM(outs[k], x), k == 0 && x == exit_);
            if (!fresh || PyList_SetItem(outs[k], at + (x - first), fresh) < 0) return -1;
        }
    }
    return 0;
}

#endif
