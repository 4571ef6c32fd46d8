/* What rowenc.c and kafkaprod.c share inside the cdcworker._rowenc module. */
#ifndef CDCWORKER_ROWENC_H
#define CDCWORKER_ROWENC_H
#include <Python.h>

int rowenc_is_program(PyObject *obj);

/* A row change's images written by a Program without Python objects: before and after (NULL
 * when absent) and their key records (NULL without a key), pointing into the program's own
 * buffers, valid until its next call. */
typedef struct {
    const char *img[2], *key[2];
    Py_ssize_t img_n[2], key_n[2];
} RowImages;

/* rowchange: bytes (a serialized RowChange). 1: *out is filled; 0: use the Python path
 * (Program.encode decides, and raises what it raises); -1: error set, the same. */
int rowenc_program_images(PyObject *program, PyObject *rowchange, RowImages *out);

/* `"` + base64 (url: the URL-safe alphabet) of s[0:n] + `"` at out, room for (n + 2) / 3 * 4 + 2. */
Py_ssize_t rowenc_b64(char *out, const unsigned char *s, Py_ssize_t n, int url);

/* A counter in decimal at out (room for 20 bytes), as "%lld" writes it: snprintf's format
 * parsing costs more than the digits, and these are written per record or per transaction. */
static inline int rowenc_decimal(char *out, long long v) {
    char tmp[24];
    int n = 0, w = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do { tmp[n++] = (char)('0' + u % 10); u /= 10; } while (u);
    if (v < 0) out[w++] = '-';
    while (n) out[w++] = tmp[--n];
    return w;
}

/* tx_begin (txmeta.c): the per-transaction bytes of transaction metadata, or None. */
PyObject *txmeta_begin(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* Adds the Producer type (kafkaprod.c) to the module. */
int kafkaprod_add_types(PyObject *module);

#endif
