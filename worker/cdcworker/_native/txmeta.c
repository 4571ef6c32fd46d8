/*
 * cdcworker._rowenc.tx_begin: the per-transaction bytes of transaction metadata in one call.
 *
 * TransactionMonitor.begin (cdcworker/txmeta/monitor.py) is the reference; this is its common
 * case, run once per Vitess transaction in the streaming loop: every GTID of the commit in the
 * single-host form (flavor/uuid:N or flavor/uuid:M-N), the same shards as the previous
 * transaction, each on the same host, and the `transaction` block in Debezium's full shape. It
 * returns the epoch and rank, the BEGIN/END key, the BEGIN value and the block cut at its two
 * counters. Anything else returns None and the Python path decides (recomputing the epoch map,
 * the general GTID parse, RemoveField shapes), so Python stays the single source of truth;
 * tests/test_txmeta_native.py holds the two paths equal.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>

#include "rowenc.h"

/* A GTID of the form `flavor/host:N` or `flavor/host:M-N` (rank.py's _SIMPLE_GTID: the flavor
 * without '/', the host without ',', ':' or '/', ASCII digits): the length of `flavor/host` and
 * the last number (a MySQL GNO: at most 2^63-1). 0 when the GTID has any other form. */
static int simple_gtid(PyObject *gtid, Py_ssize_t *host_len, long long *seq, const char **text) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(gtid, &n);
    if (!s) { PyErr_Clear(); return 0; }
    const char *slash = memchr(s, '/', (size_t)n);
    if (!slash) return 0;
    const char *p = slash + 1, *end = s + n, *colon = NULL;
    for (const char *q = p; q < end; q++) {
        if (*q == ':') { colon = q; break; }
        if (*q == ',' || *q == '/') return 0;
    }
    if (!colon || colon == p) return 0;
    const char *d = colon + 1, *num = d;
    while (d < end && *d >= '0' && *d <= '9') d++;
    if (d == num) return 0;
    if (d < end) { /* M-N */
        if (*d != '-') return 0;
        num = ++d;
        while (d < end && *d >= '0' && *d <= '9') d++;
        if (d == num || d != end) return 0;
    }
    if (end - num > 19) return 0;
    unsigned long long v = 0; /* 19 digits fit */
    for (const char *q = num; q < end; q++) v = v * 10 + (unsigned)(*q - '0');
    if (v > (unsigned long long)LLONG_MAX) return 0;
    *host_len = colon - s;
    *seq = (long long)v;
    *text = s;
    return 1;
}

/* The committing shard's epoch and rank when the epoch map stays as it is (EpochProvider._unchanged
 * and Vgtid.get + rank): 1 with *epoch and *rank set, 0 for "ask Python", -1 on an error. */
static int same_map(PyObject *prev, PyObject *cur, PyObject *shard, PyObject *epochs, PyObject **epoch,
                    long long *rank) {
    static PyObject *SHARD, *GTID;
    if (!SHARD && !(SHARD = PyUnicode_InternFromString("shard"))) return -1;
    if (!GTID && !(GTID = PyUnicode_InternFromString("gtid"))) return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(cur);
    if (PyTuple_GET_SIZE(prev) != n || PyDict_Size(epochs) != n) return 0;
    PyObject *mine = NULL; /* the committing shard's GTID (Vgtid.get: the first entry of the shard) */
    int ok = 1;
    for (Py_ssize_t i = 0; i < n && ok == 1; i++) {
        PyObject *old = PyTuple_GET_ITEM(prev, i), *new = PyTuple_GET_ITEM(cur, i);
        PyObject *ns = NULL, *os = NULL, *og = NULL, *ng = NULL;
        if (!(ns = PyObject_GetAttr(new, SHARD))) { ok = -1; goto next; }
        if (!PyUnicode_Check(ns)) { ok = 0; goto next; }
        if (!PyDict_GetItemWithError(epochs, ns)) { ok = PyErr_Occurred() ? -1 : 0; goto next; }
        if (!mine && PyUnicode_Compare(ns, shard) == 0 && !(mine = PyObject_GetAttr(new, GTID))) { ok = -1; goto next; }
        if (old == new) goto next; /* the stream's VGTIDs share the entries of shards that did not move */
        if (!(os = PyObject_GetAttr(old, SHARD)) || !(og = PyObject_GetAttr(old, GTID)) ||
            !(ng = PyObject_GetAttr(new, GTID))) { ok = -1; goto next; }
        if (!PyUnicode_Check(os) || !PyUnicode_Check(og) || !PyUnicode_Check(ng) || PyUnicode_Compare(os, ns) != 0) {
            ok = 0;
            goto next;
        }
        if (PyUnicode_Compare(og, ng) != 0) {
            Py_ssize_t ol, nl;
            long long unused;
            const char *ot, *nt;
            if (!simple_gtid(og, &ol, &unused, &ot) || !simple_gtid(ng, &nl, &unused, &nt) || ol != nl ||
                memcmp(ot, nt, (size_t)ol) != 0)
                ok = 0; /* another host, or a form only the general parse reads */
        }
    next:
        Py_XDECREF(ns);
        Py_XDECREF(os);
        Py_XDECREF(og);
        Py_XDECREF(ng);
    }
    if (ok != 1 || !mine) { /* no entry for the committing shard: Python raises EpochError */
        Py_XDECREF(mine);
        return ok == 1 ? 0 : ok;
    }
    Py_ssize_t hl;
    const char *t;
    int simple = PyUnicode_Check(mine) && simple_gtid(mine, &hl, rank, &t);
    Py_DECREF(mine);
    if (!simple) return 0;
    PyObject *e = PyDict_GetItemWithError(epochs, shard);
    if (!e) return PyErr_Occurred() ? -1 : 0;
    if (!PyLong_CheckExact(e)) return 0;
    Py_INCREF(e);
    *epoch = e;
    return 1;
}

/* Connect Decimal (scale 0) of a non-negative value as JsonConverter writes it: the base64 of
 * BigInteger.toByteArray (minimal big-endian two's complement) in quotes, or the number. */
static int rank_json(char *out, long long v, int numeric) {
    if (numeric) return rowenc_decimal(out, v);
    unsigned char raw[9];
    int nb = 1;
    while (nb < 9 && (v >> (8 * nb - 1)) != 0) nb++; /* room for the sign bit */
    for (int i = 0; i < nb; i++) raw[nb - 1 - i] = (unsigned char)(v >> (8 * i));
    return (int)rowenc_b64(out, raw, nb, 0);
}

static PyObject *concat(const char *const *parts, const Py_ssize_t *lens, int n) {
    Py_ssize_t total = 0;
    for (int i = 0; i < n; i++) total += lens[i];
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) return NULL;
    char *w = PyBytes_AS_STRING(out);
    for (int i = 0; i < n; i++) { memcpy(w, parts[i], (size_t)lens[i]); w += lens[i]; }
    return out;
}

/* tx_begin(shape, id_json, ts_ms, previous, current, shard, epochs)
 *   -> (epoch, rank, key, begin_value, head, tail) or None
 *
 * shape = (key_head, key_tail, begin_head, begin_close, head_label, numeric, emit): the monitor's
 * fixed byte pieces. previous/current are the ShardGtid tuples of the previous and this
 * transaction's VGTID and epochs the epoch map's dict, or all None without the ordered factory
 * (epoch and rank None, the block closes after its counters). begin_value is None when
 * `emit` is false (FilterTransactionTopicRecords). */
PyObject *txmeta_begin(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) { PyErr_SetString(PyExc_TypeError, "tx_begin takes 7 arguments"); return NULL; }
    PyObject *shape = args[0], *id = args[1], *prev = args[3], *cur = args[4], *shard = args[5], *epochs = args[6];
    /* The shape read directly (PyArg_ParseTuple's format parsing costs more than the rest). */
    if (!PyTuple_Check(shape) || PyTuple_GET_SIZE(shape) != 7) {
        PyErr_SetString(PyExc_TypeError, "shape: (key_head, key_tail, begin_head, begin_close, head_label, numeric, emit)");
        return NULL;
    }
    PyObject *key_head = PyTuple_GET_ITEM(shape, 0), *key_tail = PyTuple_GET_ITEM(shape, 1);
    PyObject *begin_head = PyTuple_GET_ITEM(shape, 2), *begin_close = PyTuple_GET_ITEM(shape, 3);
    PyObject *head_label = PyTuple_GET_ITEM(shape, 4);
    if (!PyBytes_Check(key_head) || !PyBytes_Check(key_tail) || !PyBytes_Check(begin_head) ||
        !PyBytes_Check(begin_close) || !PyBytes_Check(head_label)) {
        PyErr_SetString(PyExc_TypeError, "shape: its first five items are bytes");
        return NULL;
    }
    int numeric = PyObject_IsTrue(PyTuple_GET_ITEM(shape, 5)), emit = PyObject_IsTrue(PyTuple_GET_ITEM(shape, 6));
    if (numeric < 0 || emit < 0) return NULL;
    if (!PyBytes_Check(id)) { PyErr_SetString(PyExc_TypeError, "id_json must be bytes"); return NULL; }
    long long ts = PyLong_Check(args[2]) ? PyLong_AsLongLong(args[2]) : -1;
    if (!PyLong_Check(args[2]) || (ts == -1 && PyErr_Occurred())) { /* Python formats any other value */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *epoch = Py_None, *rank = Py_None;
    char tail[96];
    int tail_n;
    if (epochs != Py_None) {
        if (!PyTuple_Check(prev) || !PyTuple_Check(cur) || !PyUnicode_Check(shard) || !PyDict_Check(epochs))
            Py_RETURN_NONE; /* not the streaming loop's shapes: the Python path reads them */
        long long r;
        int found = same_map(prev, cur, shard, epochs, &epoch, &r);
        if (found < 0) return NULL;
        if (found == 0) Py_RETURN_NONE;
        long long e = PyLong_AsLongLong(epoch);
        if (e == -1 && PyErr_Occurred()) { /* an epoch beyond 64 bits: Python writes it */
            PyErr_Clear();
            Py_DECREF(epoch);
            Py_RETURN_NONE;
        }
        if (!(rank = PyLong_FromLongLong(r))) { Py_DECREF(epoch); return NULL; }
        static const char EPOCH[] = ",\"transaction_epoch\":", RANK[] = ",\"transaction_rank\":";
        char *w = tail; /* at most 21 + 20 + 20 + 20 (a rank: 20 digits, or 14 of base64) + 1 < 96 */
        memcpy(w, EPOCH, sizeof EPOCH - 1); w += sizeof EPOCH - 1;
        w += rowenc_decimal(w, e);
        memcpy(w, RANK, sizeof RANK - 1); w += sizeof RANK - 1;
        w += rank_json(w, r, numeric);
        *w++ = '}';
        tail_n = (int)(w - tail);
    } else {
        Py_INCREF(Py_None);
        Py_INCREF(Py_None);
        tail[0] = '}';
        tail_n = 1;
    }
    static const char ID[] = "{\"id\":", BEGIN_MID[] = ",\"event_count\":null,\"data_collections\":null,\"ts_ms\":";
    char tsb[24];
    int tsn = rowenc_decimal(tsb, ts);
    const char *kp[3] = {PyBytes_AS_STRING(key_head), PyBytes_AS_STRING(id), PyBytes_AS_STRING(key_tail)};
    Py_ssize_t kl[3] = {PyBytes_GET_SIZE(key_head), PyBytes_GET_SIZE(id), PyBytes_GET_SIZE(key_tail)};
    const char *hp[3] = {ID, PyBytes_AS_STRING(id), PyBytes_AS_STRING(head_label)};
    Py_ssize_t hl[3] = {sizeof ID - 1, PyBytes_GET_SIZE(id), PyBytes_GET_SIZE(head_label)};
    PyObject *key = concat(kp, kl, 3), *head = concat(hp, hl, 3);
    PyObject *tailo = PyBytes_FromStringAndSize(tail, tail_n), *begin = Py_None;
    if (emit && key && head && tailo) {
        const char *bp[5] = {PyBytes_AS_STRING(begin_head), PyBytes_AS_STRING(id), BEGIN_MID, tsb, PyBytes_AS_STRING(begin_close)};
        Py_ssize_t bl[5] = {PyBytes_GET_SIZE(begin_head), PyBytes_GET_SIZE(id), sizeof BEGIN_MID - 1, tsn, PyBytes_GET_SIZE(begin_close)};
        begin = concat(bp, bl, 5);
    } else {
        Py_INCREF(Py_None);
    }
    if (!key || !head || !tailo || !begin) {
        Py_XDECREF(key); Py_XDECREF(head); Py_XDECREF(tailo); Py_XDECREF(begin);
        Py_DECREF(epoch); Py_DECREF(rank);
        return NULL;
    }
    PyObject *out = PyTuple_New(6);
    if (!out) {
        Py_DECREF(key); Py_DECREF(head); Py_DECREF(tailo); Py_DECREF(begin); Py_DECREF(epoch); Py_DECREF(rank);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 0, epoch);
    PyTuple_SET_ITEM(out, 1, rank);
    PyTuple_SET_ITEM(out, 2, key);
    PyTuple_SET_ITEM(out, 3, begin);
    PyTuple_SET_ITEM(out, 4, head);
    PyTuple_SET_ITEM(out, 5, tailo);
    return out;
}
