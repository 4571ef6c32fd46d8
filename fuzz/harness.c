/*
 * libFuzzer target for the native VStream scanner and row encoder (worker/cdcworker/_native).
 *
 * The extension's sources are compiled into this binary with AddressSanitizer, UBSan and
 * libFuzzer's coverage, and registered as cdcworker._rowenc before the embedded interpreter
 * imports anything, so every call the oracle makes runs the instrumented C code. Each input is
 * handed to fuzz/oracle.py's check() as an `Exact` buffer: a buffer object over a heap block of
 * exactly the input's size (a bytes object has a NUL after its data, which would hide a one-byte
 * over-read from ASan). The oracle compares the native results with protobuf's own parser and the
 * pure-Python encoder; any Python exception it raises is a finding, reported as a crash (abort).
 *
 * PYTHONMALLOC=malloc (set before the interpreter starts) sends PyMem_Malloc to malloc, so the
 * encoder's heap buffers are ASan-checked too. FUZZ_SITEDIR names the venv's site-packages and
 * PYTHONPATH holds fuzz/ (fuzz/run.py sets both).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

PyMODINIT_FUNC PyInit__rowenc(void);

/* --- Exact: a read-only buffer over a malloc'd block of exactly n bytes ------------------- */

typedef struct {
    PyObject_HEAD
    unsigned char *data;
    Py_ssize_t size;
} Exact;

static int Exact_getbuffer(Exact *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->size, 1, flags);
}

static void Exact_dealloc(Exact *self) {
    free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs Exact_as_buffer = {.bf_getbuffer = (getbufferproc)Exact_getbuffer};

static PyTypeObject ExactType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fuzzmem.Exact",
    .tp_basicsize = sizeof(Exact),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Exact(bytes-like): a buffer over a heap block of exactly that many bytes",
    .tp_dealloc = (destructor)Exact_dealloc,
    .tp_as_buffer = &Exact_as_buffer,
};

static PyObject *exact_from(const uint8_t *p, size_t n) {
    Exact *e = PyObject_New(Exact, &ExactType);
    if (!e) return NULL;
    e->data = malloc(n ? n : 1); /* malloc(0) may return NULL; a 1-byte block still traps reads at [0] */
    if (!e->data) { Py_DECREF(e); return PyErr_NoMemory(); }
    if (n) memcpy(e->data, p, n);
    e->size = (Py_ssize_t)n;
    return (PyObject *)e;
}

/* fuzzmem.exact(bytes-like) -> Exact */
static PyObject *fuzzmem_exact(PyObject *mod, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = exact_from(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef fuzzmem_methods[] = {
    {"exact", fuzzmem_exact, METH_O, "exact(bytes) -> a buffer of exactly len(bytes) heap bytes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fuzzmem_module = {PyModuleDef_HEAD_INIT, "fuzzmem", NULL, -1, fuzzmem_methods};

static PyObject *init_fuzzmem(void) {
    if (PyType_Ready(&ExactType) < 0) return NULL;
    PyObject *m = PyModule_Create(&fuzzmem_module);
    if (m && PyModule_AddObjectRef(m, "Exact", (PyObject *)&ExactType) < 0) Py_CLEAR(m);
    return m;
}

/* --- the interpreter ------------------------------------------------------------------------- */

static PyObject *check; /* oracle.check(Exact) */

static void die(const char *what) {
    fprintf(stderr, "fuzz harness: %s\n", what);
    if (PyErr_Occurred()) PyErr_Print();
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    setenv("PYTHONMALLOC", "malloc", 1);
    if (PyImport_AppendInittab("fuzzmem", init_fuzzmem) < 0) die("cannot register fuzzmem");
    Py_InitializeEx(0);
    /* The venv's packages (.pth files included: the project is an editable install) instead of
     * the base interpreter's site-packages, as the venv's python sees them. */
    if (!getenv("FUZZ_SITEDIR")) die("FUZZ_SITEDIR (the venv's site-packages) is not set: run it through fuzz/run.py");
    if (PyRun_SimpleString("import os, site, sys\n"
                           "base = [p for p in sys.path if 'site-packages' in p]\n"
                           "site.addsitedir(os.environ['FUZZ_SITEDIR'])\n"
                           "sys.path[:] = [p for p in sys.path if p not in base]\n") < 0)
        die("cannot add the venv's site-packages");
    /* The instrumented extension under its package name: imported before cdcworker.events.native
     * looks for it, so the .so built by `make native` (if any) is never loaded. */
    PyObject *pkg = PyImport_ImportModule("cdcworker");
    if (!pkg) die("cannot import cdcworker (is PYTHONPATH the venv's sys.path?)");
    PyObject *mod = PyInit__rowenc();
    if (!mod) die("cannot initialise the instrumented _rowenc");
    PyObject *modules = PyImport_GetModuleDict();
    if (PyDict_SetItemString(modules, "cdcworker._rowenc", mod) < 0 ||
        PyObject_SetAttrString(pkg, "_rowenc", mod) < 0)
        die("cannot register cdcworker._rowenc");
    Py_DECREF(mod);
    Py_DECREF(pkg);
    PyObject *oracle = PyImport_ImportModule("oracle");
    if (!oracle) die("cannot import fuzz/oracle.py");
    check = PyObject_GetAttrString(oracle, "check");
    Py_DECREF(oracle);
    if (!check) die("oracle.check missing");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    PyObject *buf = exact_from(data, size);
    if (!buf) die("out of memory");
    PyObject *r = PyObject_CallOneArg(check, buf);
    Py_DECREF(buf);
    if (!r) die("the oracle found a difference (traceback above)");
    Py_DECREF(r);
    return 0;
}
