/* The items of a list or tuple, borrowed: the engine's C modules read the NFA's Python
 * containers (edge lists, or the tuples that copies share) this way. */
#ifndef FORMCAST_SEQ_ITEMS_H
#define FORMCAST_SEQ_ITEMS_H

#include <Python.h>

static inline int items_of(PyObject *seq, PyObject ***items, Py_ssize_t *n, const char *what) {
    if (PyList_Check(seq)) {
        *n = PyList_GET_SIZE(seq);
        *items = ((PyListObject *)seq)->ob_item;
        return 0;
    }
    if (PyTuple_Check(seq)) {
        *n = PyTuple_GET_SIZE(seq);
        *items = ((PyTupleObject *)seq)->ob_item;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "%s must be a list or tuple", what);
    return -1;
}

#endif
