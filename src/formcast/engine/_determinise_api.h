/* What _determinise exports to the C trie walk, through a capsule (module attribute "_api"). */
#ifndef FORMCAST_DETERMINISE_API_H
#define FORMCAST_DETERMINISE_API_H

#include <Python.h>
#include <stdint.h>

#define FORMCAST_DETERMINISE_CAPSULE "formcast.engine._determinise._api"

typedef struct {
    /* Build the automaton state behind one-frame parser state sid (= 2q) of core and write its
     * row into table (rows x 256) and its flags: 1 written, 0 left for Python (not one-frame,
     * or a target past the table), -1 with a Python exception set. Needs the GIL. */
    int (*fill_plain)(PyObject *core, long sid, int32_t *table, Py_ssize_t rows,
                      uint8_t *filled, uint8_t *finishes);
    /* Build any parser state sid of a DenseStates (its closure, its row, its finish flag),
     * given the DenseStates' context tuple (DenseStates.native_context): 1 written, 0 left for
     * Python (the table needs to grow, or the state is refused), -1 with a Python exception
     * set. Needs the GIL. */
    int (*fill_general)(PyObject *core, long sid, PyObject *ctx, int32_t *table,
                        Py_ssize_t rows, uint8_t *filled, uint8_t *finishes);
    /* The number of parser state `kernel` (a frozenset of stacks of several frames, or of
     * several stacks) in a DenseStates' numbering (its ids dict and others list), numbering
     * it when new: -1 with a Python exception set. Needs the GIL. */
    long (*number_state)(PyObject *ids, PyObject *others, PyObject *kernel);
} FormcastDeterminiseAPI;

#endif
