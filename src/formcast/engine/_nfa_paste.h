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

/* The edges of a state that has none of a kind: the empty tuple, shared by every such state
 * (borrowed reference; the interpreter keeps the empty tuple for its whole life). */
static inline PyObject *empty_edges(void) {
    static PyObject *empty = NULL;
    if (!empty) empty = PyTuple_New(0);
    return empty;
}

/* Add `item` (borrowed) to state x's edges in `lists` (the NFA's eps, byte_edges or
 * call_edges; x is in range). A list is the state's own and grows; a tuple is shared (the
 * empty one of a new state, the frozen edges that copies share) and is replaced by a list
 * of its items and `item`, never changed (nfa.add_edge). */
static inline int edges_add(PyObject *lists, Py_ssize_t x, PyObject *item) {
    PyObject *edges = PyList_GET_ITEM(lists, x);
    if (PyList_CheckExact(edges)) return PyList_Append(edges, item);
    if (!PyTuple_CheckExact(edges)) {
        PyErr_Format(PyExc_TypeError, "nfa: state %zd's edges are a list or a tuple", x);
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(edges);
    PyObject *list = PyList_New(n + 1);
    if (!list) return -1;
    for (Py_ssize_t j = 0; j < n; j++)
        PyList_SET_ITEM(list, j, Py_NewRef(PyTuple_GET_ITEM(edges, j)));
    PyList_SET_ITEM(list, n, Py_NewRef(item));
    untrack_acyclic(list); /* ints or edge tuples: a state gaining an edge while masks run */
    return PyList_SetItem(lists, x, list);
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

/* paste's copy of the NFA's own states [first, stop), read in place instead of from a
 * snapshot, replacing the NFA's last state (the copy's entry, allocated by the caller): the
 * containers of the range are frozen to tuples where they are (once: later copies of the
 * same range find them frozen), and each NFA list is extended by its slice [first, stop) in
 * one call; the copy's exit has no epsilon edges. A later edge of the original or of the
 * copy replaces the shared tuple of that one state (edges_add). (State by state, with a
 * freeze check, a set and an append each, this was ~100 ns a state: a schema pastes
 * thousands, its whitespace most of them.) 0, or -1 with a Python exception set. */
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
    return PyList_SetItem(eps, at + (exit_ - first), Py_NewRef(empty_edges()));
}

#endif
