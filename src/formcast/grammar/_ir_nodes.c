/* The IR's expression nodes as C types: the same classes, fields, equality, hashes, reprs and
 * pickles as the frozen dataclasses of ir_nodes.py, which stay the reference and the fallback.
 *
 * Why: a schema compile builds about a thousand nodes and hashes hundreds. As dataclasses,
 * every construction ran a Python __init__ (a frame and two slot-descriptor calls) and every
 * first hash a Python __hash__; under callgrind the two were about a quarter of the front
 * end's instructions. Here a node is built by one vectorcall and hashed in C, and nodes are
 * not tracked by the cyclic collector: a node holds only values built before it (tuples of
 * nodes, bytes, ints, strings), so it cannot be part of a cycle.
 *
 * ir_nodes.py binds this module's Expr as its base class, calls make_types(codepoints,
 * FrozenInstanceError) once and binds the returned classes under the dataclasses' names. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

enum { LITERAL, BYTE_SET, CHAR_SET, SEQ, CHOICE, REPEAT, REF, KINDS };

/* Every node: up to three fields, the kept hash (-1 until first computed), and for a CharSet
 * its kept code point ranges in `extra`. */
typedef struct {
    PyObject_HEAD
    PyObject *f[3];
    PyObject *extra;
    Py_hash_t hash;
    int kind;
} Node;

typedef struct {
    const char *name;
    int n_fields;
    const char *fields[3];
} KindInfo;

static const KindInfo kinds[KINDS] = {
    {"Literal", 1, {"data"}},
    {"ByteSet", 1, {"ranges"}},
    {"CharSet", 2, {"ranges", "negated"}},
    {"Seq", 1, {"items"}},
    {"Choice", 1, {"items"}},
    {"Repeat", 3, {"item", "min", "max"}},
    {"Ref", 1, {"name"}},
};

static PyTypeObject *types[KINDS];
static PyObject *field_names[KINDS][3]; /* interned */
static PyObject *codepoints_fn;          /* (ranges, negated) -> code point ranges */
static PyObject *frozen_error;           /* dataclasses.FrozenInstanceError */
static PyObject *zero;

static int kind_of_type(PyTypeObject *type) {
    for (int k = 0; k < KINDS; k++)
        if (types[k] == type) return k;
    return -1;
}

/* The default of field i of kind k, or NULL when the field is required (borrowed). */
static PyObject *default_of(int k, int i) {
    if (k == CHAR_SET && i == 1) return Py_False;
    if (k == REPEAT && i == 1) return zero;
    if (k == REPEAT && i == 2) return Py_None;
    return NULL;
}

static PyObject *new_node(int k, PyObject *const *values) {
    Node *node = PyObject_Malloc(sizeof(Node));
    if (!node) return PyErr_NoMemory();
    PyObject_Init((PyObject *)node, types[k]);
    for (int i = 0; i < 3; i++) {
        node->f[i] = i < kinds[k].n_fields ? values[i] : NULL;
        Py_XINCREF(node->f[i]);
    }
    node->extra = NULL;
    node->hash = -1;
    node->kind = k;
    return (PyObject *)node;
}

/* The constructor, as the dataclass's __init__ takes its arguments: fields by position or
 * by name, defaults for the trailing ones. */
static PyObject *node_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames) {
    int k = kind_of_type((PyTypeObject *)type);
    if (k < 0) {
        PyErr_SetString(PyExc_TypeError, "not an IR node class");
        return NULL;
    }
    const KindInfo *info = &kinds[k];
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs > info->n_fields) {
        PyErr_Format(PyExc_TypeError, "%s.__init__() takes %d positional argument%s but %zd "
                     "were given", info->name, info->n_fields + 1,
                     info->n_fields ? "s" : "", nargs + 1);
        return NULL;
    }
    PyObject *values[3] = {NULL, NULL, NULL};
    for (Py_ssize_t i = 0; i < nargs; i++) values[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t j = 0; j < nkw; j++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, j);
        int at = -1;
        for (int i = 0; i < info->n_fields && at < 0; i++)
            if (key == field_names[k][i]) at = i;
        for (int i = 0; i < info->n_fields && at < 0; i++) {
            int same = PyUnicode_Compare(key, field_names[k][i]) == 0;
            if (PyErr_Occurred()) return NULL;
            if (same) at = i;
        }
        if (at < 0) {
            PyErr_Format(PyExc_TypeError, "%s.__init__() got an unexpected keyword argument "
                         "'%U'", info->name, key);
            return NULL;
        }
        if (values[at]) {
            PyErr_Format(PyExc_TypeError, "%s.__init__() got multiple values for argument "
                         "'%U'", info->name, key);
            return NULL;
        }
        values[at] = args[nargs + j];
    }
    for (int i = 0; i < info->n_fields; i++) {
        if (values[i]) continue;
        values[i] = default_of(k, i);
        if (!values[i]) {
            PyErr_Format(PyExc_TypeError, "%s.__init__() missing 1 required positional "
                         "argument: '%U'", info->name, field_names[k][i]);
            return NULL;
        }
    }
    return new_node(k, values);
}

static PyObject *node_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    Py_ssize_t nargs = PyTuple_GET_SIZE(args), nkw = kwargs ? PyDict_GET_SIZE(kwargs) : 0;
    PyObject *stack[6];
    if (nargs + nkw > 6) {
        PyErr_SetString(PyExc_TypeError, "too many arguments for an IR node");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) stack[i] = PyTuple_GET_ITEM(args, i);
    PyObject *kwnames = NULL;
    if (nkw) {
        kwnames = PyTuple_New(nkw);
        if (!kwnames) return NULL;
        Py_ssize_t pos = 0, j = 0;
        PyObject *key, *value;
        while (PyDict_Next(kwargs, &pos, &key, &value)) {
            Py_INCREF(key);
            PyTuple_SET_ITEM(kwnames, j, key);
            stack[nargs + j] = value;
            j++;
        }
    }
    PyObject *out = node_vectorcall((PyObject *)type, stack, (size_t)nargs, kwnames);
    Py_XDECREF(kwnames);
    return out;
}

static void node_dealloc(PyObject *self) {
    Node *node = (Node *)self;
    PyTypeObject *type = Py_TYPE(self);
    for (int i = 0; i < 3; i++) Py_XDECREF(node->f[i]);
    Py_XDECREF(node->extra);
    PyObject_Free(self);
    Py_DECREF(type);
}

/* The dataclass's hash: of the data (Literal), the name (Ref), the items (Seq, Choice), else
 * of the tuple of the compared fields. Kept on the node: nodes are deep trees, hashed again
 * and again as dict and set keys while a schema compiles. */
static Py_hash_t node_hash(PyObject *self) {
    Node *node = (Node *)self;
    if (node->hash != -1) return node->hash;
    Py_hash_t h;
    int k = node->kind;
    if (k == LITERAL || k == REF || k == SEQ || k == CHOICE) {
        h = PyObject_Hash(node->f[0]);
    } else {
        PyObject *t = PyTuple_New(kinds[k].n_fields);
        if (!t) return -1;
        for (int i = 0; i < kinds[k].n_fields; i++) {
            Py_INCREF(node->f[i]);
            PyTuple_SET_ITEM(t, i, node->f[i]);
        }
        h = PyObject_Hash(t);
        Py_DECREF(t);
    }
    if (h != -1) node->hash = h;
    return h;
}

static PyObject *node_richcompare(PyObject *self, PyObject *other, int op) {
    if ((op != Py_EQ && op != Py_NE) || Py_TYPE(other) != Py_TYPE(self))
        Py_RETURN_NOTIMPLEMENTED;
    Node *a = (Node *)self, *b = (Node *)other;
    int same = 1;
    if (a != b) {
        if (a->hash != -1 && b->hash != -1 && a->hash != b->hash) {
            same = 0;
        } else {
            for (int i = 0; i < kinds[a->kind].n_fields && same; i++) {
                same = PyObject_RichCompareBool(a->f[i], b->f[i], Py_EQ);
                if (same < 0) return NULL;
            }
        }
    }
    return PyBool_FromLong(op == Py_EQ ? same : !same);
}

static PyObject *node_repr(PyObject *self) {
    Node *node = (Node *)self;
    const KindInfo *info = &kinds[node->kind];
    switch (info->n_fields) {
    case 1:
        return PyUnicode_FromFormat("%s(%s=%R)", info->name, info->fields[0], node->f[0]);
    case 2:
        return PyUnicode_FromFormat("%s(%s=%R, %s=%R)", info->name, info->fields[0],
                                    node->f[0], info->fields[1], node->f[1]);
    default:
        return PyUnicode_FromFormat("%s(%s=%R, %s=%R, %s=%R)", info->name, info->fields[0],
                                    node->f[0], info->fields[1], node->f[1], info->fields[2],
                                    node->f[2]);
    }
}

static int node_setattro(PyObject *self, PyObject *name, PyObject *value) {
    (void)self;
    (void)value;
    PyErr_Format(frozen_error, "cannot assign to field '%U'", name);
    return -1;
}

/* Pickled as its class and fields: not the kept hash (str hashes differ between processes)
 * and not the kept code points. */
static PyObject *node_reduce(PyObject *self, PyObject *unused) {
    (void)unused;
    Node *node = (Node *)self;
    PyObject *args = PyTuple_New(kinds[node->kind].n_fields);
    if (!args) return NULL;
    for (int i = 0; i < kinds[node->kind].n_fields; i++) {
        Py_INCREF(node->f[i]);
        PyTuple_SET_ITEM(args, i, node->f[i]);
    }
    return Py_BuildValue("(ON)", (PyObject *)Py_TYPE(self), args);
}

/* CharSet.codepoint_ranges(): the matched code points as sorted, merged, surrogate-free
 * ranges, computed by ir_nodes' Python function once and kept. */
static PyObject *char_set_codepoint_ranges(PyObject *self, PyObject *unused) {
    (void)unused;
    Node *node = (Node *)self;
    if (!node->extra) {
        PyObject *got = PyObject_CallFunctionObjArgs(codepoints_fn, node->f[0], node->f[1],
                                                     NULL);
        if (!got) return NULL;
        node->extra = got;
    }
    Py_INCREF(node->extra);
    return node->extra;
}

static PyObject *get_hash(PyObject *self, void *closure) {
    (void)closure;
    Py_hash_t h = ((Node *)self)->hash;
    if (h == -1) Py_RETURN_NONE;
    return PyLong_FromSsize_t(h);
}

static PyObject *get_codepoints(PyObject *self, void *closure) {
    (void)closure;
    PyObject *got = ((Node *)self)->extra;
    if (!got) Py_RETURN_NONE;
    Py_INCREF(got);
    return got;
}

static PyMethodDef node_methods[] = {
    {"__reduce__", node_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef char_set_methods[] = {
    {"__reduce__", node_reduce, METH_NOARGS, NULL},
    {"codepoint_ranges", char_set_codepoint_ranges, METH_NOARGS,
     "The matched code points as sorted, merged, surrogate-free inclusive ranges (kept)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef hash_getset[] = {
    {"_hash", get_hash, NULL, "the kept hash, or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyGetSetDef codepoints_getset[] = {
    {"_codepoints", get_codepoints, NULL, "the kept code point ranges, or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject *make_type(int k, PyObject *base) {
    static PyMemberDef members[KINDS][4];
    static char names[KINDS][64];
    const KindInfo *info = &kinds[k];
    for (int i = 0; i < info->n_fields; i++) {
        members[k][i] = (PyMemberDef){(char *)info->fields[i], T_OBJECT_EX,
                                      offsetof(Node, f) + i * sizeof(PyObject *), READONLY,
                                      NULL};
    }
    members[k][info->n_fields] = (PyMemberDef){NULL, 0, 0, 0, NULL};
    snprintf(names[k], sizeof names[k], "formcast.grammar.ir_nodes.%s", info->name);
    PyType_Slot slots[] = {
        {Py_tp_new, node_new},
        {Py_tp_dealloc, node_dealloc},
        {Py_tp_hash, node_hash},
        {Py_tp_richcompare, node_richcompare},
        {Py_tp_repr, node_repr},
        {Py_tp_setattro, node_setattro},
        {Py_tp_members, members[k]},
        {Py_tp_methods, k == CHAR_SET ? char_set_methods : node_methods},
        {Py_tp_getset, k == CHAR_SET ? codepoints_getset : hash_getset},
        {0, NULL},
    };
    PyType_Spec spec = {names[k], sizeof(Node), 0, Py_TPFLAGS_DEFAULT, slots};
    PyObject *bases = PyTuple_Pack(1, base);
    if (!bases) return NULL;
    PyTypeObject *type = (PyTypeObject *)PyType_FromSpecWithBases(&spec, bases);
    Py_DECREF(bases);
    if (!type) return NULL;
    type->tp_vectorcall = node_vectorcall;
    PyObject *match_args = PyTuple_New(info->n_fields);
    if (!match_args) goto fail;
    for (int i = 0; i < info->n_fields; i++) {
        Py_INCREF(field_names[k][i]);
        PyTuple_SET_ITEM(match_args, i, field_names[k][i]);
    }
    PyObject *qualname = PyUnicode_FromString(info->name);
    int bad = !qualname || PyObject_SetAttrString((PyObject *)type, "__match_args__",
                                                  match_args) < 0 ||
              PyObject_SetAttrString((PyObject *)type, "__qualname__", qualname) < 0;
    Py_DECREF(match_args);
    Py_XDECREF(qualname);
    if (bad) goto fail;
    return type;
fail:
    Py_DECREF(type);
    return NULL;
}

/* The base class of the nodes (ir_nodes binds it as Expr): no fields and, unlike a Python
 * class, no cyclic-collector support for its subclasses to inherit. */
static PyTypeObject ExprType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "formcast.grammar.ir_nodes.Expr",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Base class of grammar expressions.",
    .tp_new = PyType_GenericNew,
};

/* make_types(codepoints, frozen_error) -> (Literal, ByteSet, CharSet, Seq, Choice, Repeat,
 * Ref): the node classes, subclasses of Expr, made on the first call. */
static PyObject *make_types(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *base = (PyObject *)&ExprType, *fn, *error;
    if (!PyArg_ParseTuple(args, "OO", &fn, &error)) return NULL;
    if (!types[0]) {
        Py_INCREF(fn);
        Py_XSETREF(codepoints_fn, fn);
        Py_INCREF(error);
        Py_XSETREF(frozen_error, error);
        for (int k = 0; k < KINDS; k++) {
            for (int i = 0; i < kinds[k].n_fields; i++) {
                field_names[k][i] = PyUnicode_InternFromString(kinds[k].fields[i]);
                if (!field_names[k][i]) return NULL;
            }
        }
        for (int k = 0; k < KINDS; k++) {
            types[k] = make_type(k, base);
            if (!types[k]) {
                for (int j = 0; j < k; j++) Py_CLEAR(types[j]);
                return NULL;
            }
        }
    }
    PyObject *out = PyTuple_New(KINDS);
    if (!out) return NULL;
    for (int k = 0; k < KINDS; k++) {
        Py_INCREF(types[k]);
        PyTuple_SET_ITEM(out, k, (PyObject *)types[k]);
    }
    return out;
}

static PyMethodDef module_methods[] = {
    {"make_types", make_types, METH_VARARGS,
     "make_types(expr, codepoints, frozen_error): the IR node classes as C types."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ir_nodes",
                                    "The IR's expression nodes as C types (see ir_nodes.py).",
                                    -1, module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__ir_nodes(void) {
    zero = PyLong_FromLong(0);
    if (!zero || PyType_Ready(&ExprType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&ExprType);
    if (PyModule_AddObject(m, "Expr", (PyObject *)&ExprType) < 0) {
        Py_DECREF(&ExprType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
