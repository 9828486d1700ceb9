/* Parser closures for _determinise.c, which includes this file where Core and its helpers
 * (ensure_state, write_plain, core_fill_row) are defined: one translation unit, kept in its
 * own file because it is its own job. Not a public header.
 */
#ifndef FORMCAST_PARSER_CLOSURE_H
#define FORMCAST_PARSER_CLOSURE_H

/* ---------------------------------------------------------------- parser closures
 *
 * Parser._top_closure, Parser.close_stack and DenseStates.ensure_rows for a state of several
 * stacks, in C: the same values in the same Python memo dicts (the parser's), so the Python
 * code that reads them elsewhere (stepping, acceptance) sees one closure either way. Stacks
 * are tuples of DFA ids, closures tuples of stacks in sorted order. */

typedef struct {
    PyObject *rule_start, *closure_memo, *top_memo;
    Py_ssize_t max_depth, max_stacks, memo_limit;
} Closer;

/* Set when a closure outgrows max_stacks: the caller leaves the state to Python, which
 * raises the error that names the rules. */
static PyObject TOO_MANY_STACKS_OBJ;
#define TOO_MANY_STACKS (&TOO_MANY_STACKS_OBJ)

static int flag_of(PyObject *list, long q) { return PyList_GET_ITEM(list, q) == Py_True; }

/* Whether built state q can only end its rule (accepting, no bytes, no calls); -1 error. */
static int only_ends(Core *c, long q) {
    if (ensure_state(c, q) < 0) return -1;
    PyObject *calls = PyList_GET_ITEM(c->calls, q);
    return flag_of(c->accepting, q) && !flag_of(c->has_bytes, q) && PyTuple_Check(calls) &&
           PyTuple_GET_SIZE(calls) == 0;
}

/* A tuple: `below` followed by the given ids. */
static PyObject *extended(PyObject *below, long a, long b, int two) {
    Py_ssize_t n = PyTuple_GET_SIZE(below);
    PyObject *out = PyTuple_New(n + 1 + two);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyTuple_GET_ITEM(below, i);
        Py_INCREF(x);
        PyTuple_SET_ITEM(out, i, x);
    }
    PyObject *xa = PyLong_FromLong(a), *xb = two ? PyLong_FromLong(b) : NULL;
    if (!xa || (two && !xb)) {
        Py_XDECREF(xa);
        Py_XDECREF(xb);
        Py_DECREF(out);
        return NULL;
    }
    PyTuple_SET_ITEM(out, n, xa);
    if (two) PyTuple_SET_ITEM(out, n + 1, xb);
    return out;
}

/* Add `st` to `seen` and `work` unless seen already (0, or -1 on error). */
static int visit(PyObject *seen, PyObject *work, PyObject *st) {
    int has = PySet_Contains(seen, st);
    if (has < 0) return -1;
    if (has) return 0;
    if (PySet_Add(seen, st) < 0 || PyList_Append(work, st) < 0) return -1;
    return 0;
}

static PyObject *sorted_tuple(PyObject *iterable) {
    PyObject *list = PySequence_List(iterable);
    if (!list) return NULL;
    if (PyList_Sort(list) < 0) {
        Py_DECREF(list);
        return NULL;
    }
    PyObject *out = PyList_AsTuple(list);
    Py_DECREF(list);
    return out;
}

/* Parser._top_closure(q): (sorted stacks relative to q's frame, whether the frame can finish
 * without a byte), memoised in top_memo. New reference. */
static PyObject *top_closure(Core *c, Closer *k, long q) {
    PyObject *key = PyLong_FromLong(q);
    if (!key) return NULL;
    PyObject *got = PyDict_GetItemWithError(k->top_memo, key);
    if (got || PyErr_Occurred()) {
        Py_XINCREF(got);
        Py_DECREF(key);
        return got;
    }
    PyObject *out = PyList_New(0), *seen = PySet_New(NULL), *work = PyList_New(0);
    PyObject *start = PyTuple_Pack(1, key), *result = NULL;
    int finishes = 0;
    if (!out || !seen || !work || !start || visit(seen, work, start) < 0) goto done;
    while (PyList_GET_SIZE(work) > 0) {
        Py_ssize_t last = PyList_GET_SIZE(work) - 1;
        PyObject *st = PyList_GET_ITEM(work, last);
        Py_INCREF(st);
        if (PyList_SetSlice(work, last, last + 1, NULL) < 0) {
            Py_DECREF(st);
            goto done;
        }
        Py_ssize_t len = PyTuple_GET_SIZE(st);
        long top = PyLong_AsLong(PyTuple_GET_ITEM(st, len - 1));
        int bad = (top == -1 && PyErr_Occurred()) || ensure_state(c, top) < 0;
        if (!bad && len == 1 && flag_of(c->accepting, top)) {
            finishes = 1;
            bad = PyList_Append(out, st) < 0;
        } else if (!bad && flag_of(c->has_bytes, top)) {
            bad = PyList_Append(out, st) < 0;
        }
        PyObject *below = bad ? NULL : PyTuple_GetSlice(st, 0, len - 1);
        bad = bad || !below;
        if (!bad && len < k->max_depth) {
            PyObject *calls = PyList_GET_ITEM(c->calls, top);
            for (Py_ssize_t i = 0; !bad && i < PyTuple_GET_SIZE(calls); i++) {
                PyObject *pair = PyTuple_GET_ITEM(calls, i);
                long rule = PyLong_AsLong(PyTuple_GET_ITEM(pair, 0));
                long ret = PyLong_AsLong(PyTuple_GET_ITEM(pair, 1));
                if (PyErr_Occurred() || rule < 0 || rule >= PyList_GET_SIZE(k->rule_start)) {
                    if (!PyErr_Occurred())
                        PyErr_SetString(PyExc_IndexError, "fill_state: rule out of range");
                    bad = 1;
                    break;
                }
                long rs = PyLong_AsLong(PyList_GET_ITEM(k->rule_start, rule));
                int tail = rs == -1 && PyErr_Occurred() ? -1 : only_ends(c, ret);
                if (tail < 0) {
                    bad = 1;
                    break;
                }
                /* A tail call: the frame would only return and end (see Parser). */
                PyObject *nxt = tail ? extended(below, rs, 0, 0) : extended(below, ret, rs, 1);
                bad = !nxt || visit(seen, work, nxt) < 0;
                Py_XDECREF(nxt);
            }
        }
        if (!bad && len > 1 && flag_of(c->accepting, top)) bad = visit(seen, work, below) < 0;
        Py_XDECREF(below);
        Py_DECREF(st);
        if (bad) goto done;
    }
    PyObject *stacks = sorted_tuple(out);
    if (!stacks) goto done;
    result = Py_BuildValue("(NO)", stacks, finishes ? Py_True : Py_False);
    if (result && PyDict_SetItem(k->top_memo, key, result) < 0) Py_CLEAR(result);
done:
    Py_DECREF(key);
    Py_XDECREF(out);
    Py_XDECREF(seen);
    Py_XDECREF(work);
    Py_XDECREF(start);
    return result;
}

/* Parser.close_stack(stack), memoised in closure_memo. New reference, or TOO_MANY_STACKS
 * (borrowed) when the closure outgrows max_stacks. */
static PyObject *close_stack(Core *c, Closer *k, PyObject *stack) {
    PyObject *got = PyDict_GetItemWithError(k->closure_memo, stack);
    if (got || PyErr_Occurred()) {
        Py_XINCREF(got);
        return got;
    }
    Py_ssize_t len = PyTuple_GET_SIZE(stack);
    long top = PyLong_AsLong(PyTuple_GET_ITEM(stack, len - 1));
    if (top == -1 && PyErr_Occurred()) return NULL;
    PyObject *tc = top_closure(c, k, top);
    if (!tc) return NULL;
    PyObject *suffixes = PyTuple_GET_ITEM(tc, 0);
    int finishes = PyTuple_GET_ITEM(tc, 1) == Py_True;
    PyObject *out = PySet_New(len > 1 ? NULL : suffixes), *result = NULL;
    if (!out) goto done;
    if (len > 1) {
        PyObject *below = PyTuple_GetSlice(stack, 0, len - 1);
        if (!below) goto done;
        int bad = 0;
        for (Py_ssize_t i = 0; !bad && i < PyTuple_GET_SIZE(suffixes); i++) {
            PyObject *s = PyTuple_GET_ITEM(suffixes, i);
            long s_top = PyLong_AsLong(PyTuple_GET_ITEM(s, PyTuple_GET_SIZE(s) - 1));
            if (s_top == -1 && PyErr_Occurred()) {
                bad = 1;
                break;
            }
            if (!flag_of(c->has_bytes, s_top)) continue;
            PyObject *joined = PySequence_Concat(below, s);
            bad = !joined || PySet_Add(out, joined) < 0;
            Py_XDECREF(joined);
        }
        if (!bad && finishes) {
            PyObject *rest = close_stack(c, k, below);
            if (!rest) {
                bad = 1;
            } else if (rest == TOO_MANY_STACKS) {
                Py_DECREF(below);
                result = TOO_MANY_STACKS;
                goto done;
            } else {
                for (Py_ssize_t i = 0; !bad && i < PyTuple_GET_SIZE(rest); i++)
                    bad = PySet_Add(out, PyTuple_GET_ITEM(rest, i)) < 0;
                Py_DECREF(rest);
            }
        }
        Py_DECREF(below);
        if (bad) goto done;
    }
    if (PySet_GET_SIZE(out) > k->max_stacks) {
        result = TOO_MANY_STACKS;
        goto done;
    }
    result = sorted_tuple(out);
    if (!result) goto done;
    if (PyDict_GET_SIZE(k->closure_memo) > k->memo_limit) PyDict_Clear(k->closure_memo);
    if (PyDict_SetItem(k->closure_memo, stack, result) < 0) Py_CLEAR(result);
done:
    Py_DECREF(tc);
    Py_XDECREF(out);
    return result;
}


/* DenseStates.ensure_rows for parser state `state` (a frozenset of stacks) numbered sid: its
 * closed stacks, then its row (a plain DFA row when the closure is one one-frame stack, else
 * fill_row_raw) and its finish flag. 1: filled. 2: the table is too small for the states the
 * closure built or the row may number; grow it and call again (closures are memoised). 0: the
 * closure has more than max_stacks stacks; Python refuses the state with the error. -1: an
 * exception is set. */
static int fill_state_raw(Core *c, Closer *k, long sid, PyObject *state, int32_t *table,
                          Py_ssize_t rows, uint8_t *filled, uint8_t *finishes, PyObject *ids,
                          PyObject *others) {
    PyObject *stacks = PyList_New(0), *it = PyObject_GetIter(state), *kernel;
    int result = -1;
    if (!stacks || !it) goto done;
    while ((kernel = PyIter_Next(it))) {
        if (!PyTuple_Check(kernel) || PyTuple_GET_SIZE(kernel) == 0) {
            Py_DECREF(kernel);
            PyErr_SetString(PyExc_TypeError, "fill_state: stacks are non-empty tuples");
            goto done;
        }
        PyObject *closed = close_stack(c, k, kernel);
        Py_DECREF(kernel);
        if (!closed) goto done;
        if (closed == TOO_MANY_STACKS) {
            result = 0;
            goto done;
        }
        Py_ssize_t at = PyList_GET_SIZE(stacks);
        int bad = PyList_SetSlice(stacks, at, at, closed) < 0;
        Py_DECREF(closed);
        if (bad) goto done;
    }
    if (PyErr_Occurred()) goto done;
    Py_ssize_t n = PyList_GET_SIZE(stacks);
    if (n > k->max_stacks) {
        result = 0;
        goto done;
    }
    if (sid < 0 || sid >= rows) {
        PyErr_SetString(PyExc_IndexError, "fill_state: row out of range");
        goto done;
    }
    if (2 * (Py_ssize_t)c->n_states + 2 > rows || 2 * (PyList_GET_SIZE(others) + 257) + 2 > rows) {
        result = 2;
        goto done;
    }
    if (n == 1 && PyTuple_GET_SIZE(PyList_GET_ITEM(stacks, 0)) == 1) {
        long q = PyLong_AsLong(PyTuple_GET_ITEM(PyList_GET_ITEM(stacks, 0), 0));
        if (q == -1 && PyErr_Occurred()) goto done;
        int got = write_plain(c, q, table, rows, filled, finishes, sid);
        if (got < 0) goto done;
        if (got) {
            result = 1;
            goto done;
        }
    }
    int can_finish = 0;
    for (Py_ssize_t i = 0; i < n && !can_finish; i++) {
        PyObject *st = PyList_GET_ITEM(stacks, i);
        if (PyTuple_GET_SIZE(st) != 1) continue;
        long top = PyLong_AsLong(PyTuple_GET_ITEM(st, 0));
        if (top == -1 && PyErr_Occurred()) goto done;
        can_finish = flag_of(c->accepting, top);
    }
    finishes[sid] = (uint8_t)can_finish;
    if (n == 0) {
        for (int b = 0; b < 256; b++) table[256 * sid + b] = -1;
        filled[sid] = 1;
        result = 1;
        goto done;
    }
    if (fill_row_raw(c, stacks, sid, table, rows, filled, ids, others) < 0) goto done;
    result = 1;
done:
    Py_XDECREF(stacks);
    Py_XDECREF(it);
    return result;
}

/* Python: fill_state(sid, state, table, filled, finishes, ids, others, rule_start,
 * closure_memo, top_memo, max_depth, max_stacks, memo_limit) -> 0, 1 or 2 (fill_state_raw). */
static PyObject *core_fill_state(Core *c, PyObject *args) {
    long sid;
    PyObject *state, *table_obj, *filled_obj, *finishes_obj, *ids, *others;
    Closer k;
    if (!PyArg_ParseTuple(args, "lO!OOOO!O!O!O!O!nnn", &sid, &PyFrozenSet_Type, &state,
                          &table_obj, &filled_obj, &finishes_obj, &PyDict_Type, &ids,
                          &PyList_Type, &others, &PyList_Type, &k.rule_start, &PyDict_Type,
                          &k.closure_memo, &PyDict_Type, &k.top_memo, &k.max_depth,
                          &k.max_stacks, &k.memo_limit))
        return NULL;
    TableBufs t;
    if (hold_table(table_obj, filled_obj, finishes_obj, &t, "fill_state") < 0) return NULL;
    int got = fill_state_raw(c, &k, sid, state, t.b[0].buf, t.rows, t.b[1].buf, t.b[2].buf, ids,
                             others);
    release_table(&t);
    if (got < 0) return NULL;
    return PyLong_FromLong(got);
}

#endif
