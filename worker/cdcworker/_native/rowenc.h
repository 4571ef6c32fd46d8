/* What rowenc.c and kafkaprod.c share inside the cdcworker._rowenc module. */
#ifndef CDCWORKER_ROWENC_H
#define CDCWORKER_ROWENC_H
#include <Python.h>

/* Program.encode(rowchange_bytes): (before, after, before_key, after_key), None, or NULL (error). */
PyObject *rowenc_program_encode(PyObject *program, PyObject *rowchange);
int rowenc_is_program(PyObject *obj);

/* `"` + base64 (url: the URL-safe alphabet) of s[0:n] + `"` at out, room for (n + 2) / 3 * 4 + 2. */
Py_ssize_t rowenc_b64(char *out, const unsigned char *s, Py_ssize_t n, int url);

/* tx_begin (txmeta.c): the per-transaction bytes of transaction metadata, or None. */
PyObject *txmeta_begin(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* Adds the Producer type (kafkaprod.c) to the module. */
int kafkaprod_add_types(PyObject *module);

#endif
