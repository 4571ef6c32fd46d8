/*
 * cdcworker._rowenc.Producer: the worker's Kafka producer without a Python object per record.
 *
 * confluent-kafka's Producer costs the streaming stage most of its CPU per record: produce()
 * converts the header list and builds a callback state, and every delivery report builds a
 * Message and calls Python (tests/BENCHMARKS.md: ~8 us of ~20 us per row). This type drives the
 * same librdkafka that confluent-kafka bundles (resolved with dlopen/dlsym from the path Python
 * passes, so nothing is linked or vendored at build time) and keeps the sink's durability
 * bookkeeping in C:
 *
 *  - records are produced into numbered *segments* (the records between two commit points); a
 *    record's opaque is its segment number, and the delivery-report callback only counts
 *    (done, and failed records are queued with their error for Python to judge);
 *  - done_through() says up to which segment every record is settled, so the Python sink maps
 *    segment numbers to positions and never advances past a record Kafka did not acknowledge;
 *  - send_rows() is the hot loop of TablePlan.send_rows: it encodes each row with a column
 *    Program and produces the record, stopping at the first row that needs the Python path.
 *
 * Transactions (exactly-once) use the same handle. Errors become the exceptions confluent-kafka
 * raises (KafkaException(KafkaError(...))) through a factory Python passes in, so callers and
 * the failure-handling mode see one error model. The GIL is released around every call that can
 * block (poll, flush, transaction calls); the delivery callback takes it only for failed records.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "rowenc.h"

#include "rdkafka_abi.h"

/* --- the librdkafka functions, resolved from the library confluent-kafka loaded ------------ */

static struct {
    int loaded;
#define RK_FIELD(field, sym, ret, params) ret(*field) params;
    RK_FUNCTIONS(RK_FIELD)
#undef RK_FIELD
} K;

static int load_librdkafka(const char *path) {
    if (K.loaded) return 0;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        PyErr_Format(PyExc_ImportError, "cannot load librdkafka from %s: %s", path, dlerror());
        return -1;
    }
#define SYM(field, name)                                                                 \
    do {                                                                                 \
        *(void **)(&K.field) = dlsym(h, name);                                           \
        if (!K.field) {                                                                  \
            PyErr_Format(PyExc_ImportError, "librdkafka at %s lacks %s", path, name);    \
            return -1;                                                                   \
        }                                                                                \
    } while (0)
#define RK_LOAD(field, sym, ret, params) SYM(field, #sym);
    RK_FUNCTIONS(RK_LOAD)
#undef RK_LOAD
#undef SYM
    K.loaded = 1;
    return 0;
}

/* --- the Producer type ---------------------------------------------------------------------- */

/* --- record buffers ----------------------------------------------------------------------
 * send_rows' record values are cut from 1 MiB blocks instead of malloc'd one by one: librdkafka
 * takes them without MSG_F_FREE and the delivery report gives them back. glibc's malloc and free
 * of ~2 KB buffers (beyond its per-thread cache, freed in bursts by the delivery reports) were
 * ~12 % of the worker's CPU in a perf profile of the streaming benchmark. Records are
 * acknowledged about in the order they were made, so a block empties soon after it fills;
 * a few empty blocks are kept for reuse, the rest freed. */
#define BLOCK_BYTES ((size_t)1 << 20)
#define BLOCK_SPARES 4
#define BLOCK_MAX_VALUE (BLOCK_BYTES / 16) /* larger values: malloc and MSG_F_FREE, as before */
#define MSG_F_BLOCK (1 << 30)              /* produce(): the value is a block's, not librdkafka's flag */

/* --- header lists ---------------------------------------------------------------------------
 * Every record send_rows writes carries the same context headers (__debezium.context.*).
 * librdkafka owns a record's header list and frees it with the record, so a copy per record
 * cost six mallocs and frees (~6 % of the worker's CPU in perf). Instead the delivery report
 * detaches the list and keeps it here for a later record with the same headers: a Pool per
 * header template, replaced when send_rows is given other headers; a replaced pool is freed
 * when its last list comes back. */
#define POOL_SPARES 8192 /* lists kept for reuse (~0.5 KB each); more in flight are freed on return */

typedef struct Pool {
    struct Pool *next;   /* replaced pools with lists still out */
    rk_headers_t *proto; /* the template, copied when no spare is left */
    rk_headers_t **spare;
    int nspare;          /* up to POOL_SPARES */
    long live;           /* lists out with records */
} Pool;

typedef struct Block {
    struct Block *next; /* in the spare list */
    size_t used;
    long live;          /* values handed out and not yet given back */
} Block;

/* What precedes each value cut from a block: its block, and the pool of its header list. */
typedef struct {
    Block *block;
    Pool *pool;
} Cut;

typedef struct {
    pthread_mutex_t lock; /* delivery reports come on whichever thread polls */
    Block *cur, *spare;
    int nspare;
    Block **all;          /* every block allocated and not freed: they go with the producer */
    long nall, capall;
    Pool *pool;           /* the current header template's (NULL: none yet) */
    Pool *replaced;       /* replaced pools with lists still out */
} Blocks;

static void pool_free(Pool *p) {
    for (int i = 0; i < p->nspare; i++) K.headers_destroy(p->spare[i]);
    if (p->proto) K.headers_destroy(p->proto);
    free(p->spare);
    free(p);
}

static void block_retire(Blocks *a, Block *b) {
    /* lock held; b has no live value and is not the current block (values are cut only from
     * the current one: any other block in use is retired) */
    if (a->nspare < BLOCK_SPARES) {
        b->next = a->spare;
        a->spare = b;
        a->nspare++;
        return;
    }
    for (long i = 0; i < a->nall; i++)
        if (a->all[i] == b) { a->all[i] = a->all[--a->nall]; break; }
    free(b);
}

/* n bytes for a record value, or NULL (no memory). A value starts after its Cut. With a pool,
 * *hdrs is a header list of its template for the record (a spare, or NULL: copy pool->proto). */
static char *block_take(Blocks *a, size_t n, Pool *pool, rk_headers_t **hdrs) {
    size_t need = (sizeof(Cut) + n + 7) & ~(size_t)7;
    pthread_mutex_lock(&a->lock);
    Block *b = a->cur;
    if (b && b->live == 0) b->used = 0; /* everything cut from it came back: start it over */
    if (!b || b->used + need > BLOCK_BYTES) {
        if (b && b->live == 0) block_retire(a, b);
        if (a->spare) {
            b = a->spare;
            a->spare = b->next;
            a->nspare--;
        } else {
            if (a->nall == a->capall) {
                long cap = a->capall ? a->capall * 2 : 16;
                Block **all = realloc(a->all, (size_t)cap * sizeof(Block *));
                if (!all) { a->cur = NULL; pthread_mutex_unlock(&a->lock); return NULL; }
                a->all = all;
                a->capall = cap;
            }
            b = malloc(sizeof(Block) + BLOCK_BYTES);
            if (!b) { a->cur = NULL; pthread_mutex_unlock(&a->lock); return NULL; }
            a->all[a->nall++] = b;
        }
        b->used = 0;
        b->live = 0;
        a->cur = b;
    }
    char *p = (char *)(b + 1) + b->used;
    Cut cut = {b, pool};
    memcpy(p, &cut, sizeof(Cut));
    b->used += need;
    b->live++;
    if (pool) {
        pool->live++;
        *hdrs = pool->nspare ? pool->spare[--pool->nspare] : NULL;
    }
    pthread_mutex_unlock(&a->lock);
    return p + sizeof(Cut);
}

/* A value back from librdkafka (delivered, failed or never queued), with its record's header
 * list when it had one of a pool (detached from the record, or never handed over). */
static void block_give(Blocks *a, void *value, rk_headers_t *hdrs) {
    Cut cut;
    memcpy(&cut, (char *)value - sizeof(Cut), sizeof(Cut));
    Block *b = cut.block;
    Pool *p = cut.pool, *gone = NULL;
    pthread_mutex_lock(&a->lock);
    if (--b->live == 0 && b != a->cur) block_retire(a, b);
    if (p) {
        int current = p == a->pool; /* else replaced: its lists are freed as they come back */
        if (hdrs && current && p->nspare < POOL_SPARES) {
            p->spare[p->nspare++] = hdrs;
            hdrs = NULL;
        }
        if (--p->live == 0 && !current) { /* its last list: unlink and free it */
            for (Pool **q = &a->replaced; *q; q = &(*q)->next)
                if (*q == p) { *q = p->next; break; }
            gone = p;
        }
    }
    pthread_mutex_unlock(&a->lock);
    if (hdrs) K.headers_destroy(hdrs);
    if (gone) pool_free(gone);
}

/* Make `proto` (taken) the current template's list; NULL with no memory (proto destroyed). */
static Pool *pool_replace(Blocks *a, rk_headers_t *proto) {
    Pool *p = calloc(1, sizeof(Pool)), *old;
    rk_headers_t **spare = p ? malloc(POOL_SPARES * sizeof(rk_headers_t *)) : NULL;
    if (!spare) { free(p); K.headers_destroy(proto); return NULL; }
    p->proto = proto;
    p->spare = spare;
    pthread_mutex_lock(&a->lock);
    old = a->pool;
    a->pool = p;
    if (old && old->live) { old->next = a->replaced; a->replaced = old; old = NULL; }
    pthread_mutex_unlock(&a->lock);
    if (old) pool_free(old); /* no list out: nothing will come back to it */
    return p;
}

static void blocks_free(Blocks *a) {
    /* with the producer: librdkafka is gone (records it never reported freed their own header
     * lists), values it never reported go with their blocks */
    for (long i = 0; i < a->nall; i++) free(a->all[i]);
    free(a->all);
    a->all = NULL;
    a->nall = a->capall = 0;
    a->cur = a->spare = NULL;
    while (a->replaced) {
        Pool *p = a->replaced;
        a->replaced = p->next;
        pool_free(p);
    }
    if (a->pool) pool_free(a->pool);
    a->pool = NULL;
}

#define LOG_RING 32

typedef struct {
    int64_t produced, done;
    int sealed;
} Seg;

typedef struct {
    PyObject_HEAD
    rk_t *rk;
    PyObject *make_error; /* (code, reason, fatal, retriable, txn_requires_abort) -> exception */
    PyObject *errors;     /* list of (seq, code, reason, topic, partition, key, value) */
    Seg *segs;            /* segments base_seq .. base_seq + nsegs - 1; the last one is open */
    Py_ssize_t nsegs, cap, head; /* segs[head..nsegs) are unsettled */
    int64_t base_seq;
    int64_t records_sent, poll_every;
    int fatal_code;       /* set by the error callback on a fatal error */
    char fatal_reason[512];
    int access_code;      /* set by the error callback when the cluster refuses access */
    char access_reason[512];
    volatile int interrupted; /* interrupt(): a wait for room in the queue gives up */
    /* librdkafka's log lines, written by its threads (no GIL there), taken by take_logs(): the
     * worker logs them through the project's logger, rate-limited (kafkaerrors.ClientLog). */
    pthread_mutex_t log_lock;
    Blocks blocks;        /* send_rows' record values (block_take) and header lists */
    PyObject *hdr_src;    /* the headers blocks.pool was made from (a copy), GIL held */
    struct { int level; char fac[24]; char text[488]; } logs[LOG_RING];
    int nlogs;
    int64_t logs_dropped;
} Producer;

static Seg *open_seg(Producer *self) { return &self->segs[self->nsegs - 1]; }
static int64_t open_seq(Producer *self) { return self->base_seq + self->nsegs - 1; }

static int push_seg(Producer *self) {
    if (self->head > 0 && self->head >= self->nsegs / 2) { /* drop settled segments */
        memmove(self->segs, self->segs + self->head, (size_t)(self->nsegs - self->head) * sizeof(Seg));
        self->base_seq += self->head;
        self->nsegs -= self->head;
        self->head = 0;
    }
    if (self->nsegs == self->cap) {
        Py_ssize_t cap = self->cap ? self->cap * 2 : 64;
        Seg *s = PyMem_Realloc(self->segs, (size_t)cap * sizeof(Seg));
        if (!s) { PyErr_NoMemory(); return -1; }
        self->segs = s;
        self->cap = cap;
    }
    self->segs[self->nsegs++] = (Seg){0, 0, 0};
    return 0;
}

/* librdkafka's reason as str: undecodable bytes (a copy cut inside a UTF-8 sequence) replaced,
 * so reporting an error never raises UnicodeDecodeError instead. */
static PyObject *reason_text(const char *reason) {
    if (!reason) reason = "";
    return PyUnicode_DecodeUTF8(reason, (Py_ssize_t)strlen(reason), "replace");
}

/* Raise the exception the Python factory builds for (code, reason, flags). */
static void raise_kafka(Producer *self, int code, const char *reason, int fatal, int retriable, int abortable) {
    PyObject *text = reason_text(reason);
    if (!text) return;
    PyObject *exc = PyObject_CallFunction(self->make_error, "iNiii", code, text, fatal, retriable, abortable);
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
}

static void raise_error_obj(Producer *self, rk_error_t *err) {
    raise_kafka(self, K.error_code(err), K.error_string(err), K.error_is_fatal(err), K.error_is_retriable(err),
                K.error_txn_requires_abort(err));
    K.error_destroy(err);
}

static void report_failure(Producer *self, const rk_message_t *m, int64_t seq, Py_ssize_t i, int in_range);

/* A record's opaque: its segment number, shifted left, and 1 when its value is a block's. */
static void on_delivery(rk_t *rk, const rk_message_t *m, void *opaque) {
    Producer *self = opaque;
    int64_t raw = (int64_t)(intptr_t)m->_private, seq = raw >> 1;
    Py_ssize_t i = (Py_ssize_t)(seq - self->base_seq);
    int in_range = i >= 0 && i < self->nsegs;
    if (!m->err) {
        if (in_range) self->segs[i].done++;
    } else {
        report_failure(self, m, seq, i, in_range); /* copies the value first */
    }
    if (raw & 1) {
        rk_headers_t *h = NULL;
        Cut cut;
        memcpy(&cut, (char *)m->payload - sizeof(Cut), sizeof(Cut));
        /* librdkafka destroys the message after this callback: its header list is kept instead */
        if (cut.pool && K.message_detach_headers((RK_MESSAGE *)m, &h) != 0) h = NULL;
        block_give(&self->blocks, m->payload, h);
    }
}

static void report_failure(Producer *self, const rk_message_t *m, int64_t seq, Py_ssize_t i, int in_range) {
    /* A refused record: Python decides (failure-handling mode) before anything passes it. It
     * counts as settled only once its report is in the list Python reads: a report lost here
     * (no memory) leaves its segment unsettled, so no durable position ever passes it. */
    PyGILState_STATE g = PyGILState_Ensure();
    const char *topic = m->rkt ? K.topic_name(m->rkt) : "";
    PyObject *t = Py_BuildValue("(Lissiy#y#)", (long long)seq, m->err, K.err2str(m->err), topic, (int)m->partition,
                                (const char *)m->key, (Py_ssize_t)(m->key ? m->key_len : 0),
                                (const char *)m->payload, (Py_ssize_t)(m->payload ? m->len : 0));
    if (t && PyList_Append(self->errors, t) == 0) {
        if (in_range) self->segs[i].done++;
    } else {
        PyErr_WriteUnraisable((PyObject *)self);
    }
    Py_XDECREF(t);
    PyGILState_Release(g);
}

static void on_error(rk_t *rk, int err, const char *reason, void *opaque) {
    Producer *self = opaque;
    char buf[512];
    int code = K.fatal_error(rk, buf, sizeof(buf));
    if (code && !self->fatal_code) { /* the first fatal error stops the producer for good */
        self->fatal_code = code;
        snprintf(self->fatal_reason, sizeof(self->fatal_reason), "%s", buf);
    }
    /* A refused login or an untrusted certificate (RD_KAFKA_RESP_ERR__AUTHENTICATION, __SSL):
     * librdkafka retries it for ever, the sink stops on it (kafkaerrors.access_refusal). The
     * reason is written before the code that publishes it; the first one is kept. */
    if ((err == ERR_AUTHENTICATION || err == ERR_SSL) && !self->access_code) {
        snprintf(self->access_reason, sizeof(self->access_reason), "%s", reason ? reason : "");
        __atomic_store_n(&self->access_code, err, __ATOMIC_RELEASE);
    }
}

static void on_log(const rk_t *rk, int level, const char *fac, const char *text) {
    Producer *self = K.opaque(rk);
    if (!self) return;
    pthread_mutex_lock(&self->log_lock);
    if (self->nlogs < LOG_RING) {
        int i = self->nlogs++;
        self->logs[i].level = level;
        snprintf(self->logs[i].fac, sizeof(self->logs[i].fac), "%s", fac ? fac : "");
        snprintf(self->logs[i].text, sizeof(self->logs[i].text), "%s", text ? text : "");
    } else {
        self->logs_dropped++; /* a burst beyond the ring: counted, the rate limit would drop it anyway */
    }
    pthread_mutex_unlock(&self->log_lock);
}

static PyObject *Producer_take_logs(Producer *self, PyObject *unused) {
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    pthread_mutex_lock(&self->log_lock);
    int n = self->nlogs;
    int64_t dropped = self->logs_dropped;
    for (int i = 0; i < n; i++) {
        PyObject *item = Py_BuildValue("(iss)", self->logs[i].level, self->logs[i].fac, self->logs[i].text);
        if (!item || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            pthread_mutex_unlock(&self->log_lock);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(item);
    }
    self->nlogs = 0;
    self->logs_dropped = 0;
    pthread_mutex_unlock(&self->log_lock);
    return Py_BuildValue("(NL)", out, (long long)dropped);
}

static int Producer_init(Producer *self, PyObject *args, PyObject *kwds) {
    const char *libpath;
    PyObject *config, *make_error;
    static char *kwlist[] = {"library", "config", "make_error", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "sO!O", kwlist, &libpath, &PyDict_Type, &config, &make_error))
        return -1;
    if (self->rk) { PyErr_SetString(PyExc_RuntimeError, "Producer already initialised"); return -1; }
    if (load_librdkafka(libpath) < 0) return -1;
    pthread_mutex_init(&self->log_lock, NULL);
    pthread_mutex_init(&self->blocks.lock, NULL);
    self->make_error = Py_NewRef(make_error);
    self->errors = PyList_New(0);
    self->poll_every = 512;
    if (!self->errors || push_seg(self) < 0) return -1;
    self->base_seq = 1; /* segment numbers start at 1: an opaque of 0 never names a segment */
    rk_conf_t *conf = K.conf_new();
    char errstr[512];
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(config, &pos, &k, &v)) {
        PyObject *ks = PyObject_Str(k), *vs = NULL;
        if (PyBool_Check(v)) vs = PyUnicode_FromString(v == Py_True ? "true" : "false");
        else vs = PyObject_Str(v);
        if (!ks || !vs) { Py_XDECREF(ks); Py_XDECREF(vs); K.conf_destroy(conf); return -1; }
        const char *kc = PyUnicode_AsUTF8(ks), *vc = PyUnicode_AsUTF8(vs);
        int rc = kc && vc ? K.conf_set(conf, kc, vc, errstr, sizeof(errstr)) : -1;
        Py_DECREF(ks);
        Py_DECREF(vs);
        if (rc != 0) {
            if (!PyErr_Occurred()) raise_kafka(self, ERR_INVALID_ARG, errstr, 0, 0, 0);
            K.conf_destroy(conf);
            return -1;
        }
    }
    K.conf_set_dr_msg_cb(conf, on_delivery);
    K.conf_set_error_cb(conf, on_error);
    K.conf_set_log_cb(conf, on_log);
    K.conf_set_opaque(conf, self);
    self->rk = K.new_(RK_PRODUCER, conf, errstr, sizeof(errstr));
    if (!self->rk) {
        K.conf_destroy(conf);
        raise_kafka(self, ERR_INVALID_ARG, errstr, 0, 0, 0);
        return -1;
    }
    return 0;
}

static void Producer_dealloc(Producer *self) {
    if (self->rk) {
        rk_t *rk = self->rk;
        self->rk = NULL;
        Py_BEGIN_ALLOW_THREADS K.destroy(rk);
        Py_END_ALLOW_THREADS
    }
    pthread_mutex_destroy(&self->log_lock); /* librdkafka's threads are gone */
    blocks_free(&self->blocks);
    pthread_mutex_destroy(&self->blocks.lock);
    Py_XDECREF(self->make_error);
    Py_XDECREF(self->errors);
    Py_XDECREF(self->hdr_src);
    PyMem_Free(self->segs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int poll_nogil(Producer *self, int ms) {
    /* A non-blocking poll keeps the GIL: handing it over and back costs more than serving the
     * queued delivery reports (the callback needs the GIL only for a failed record). */
    if (ms == 0) return K.poll(self->rk, 0);
    int n;
    Py_BEGIN_ALLOW_THREADS n = K.poll(self->rk, ms);
    Py_END_ALLOW_THREADS
    return n;
}

/* Build librdkafka headers from a list of (str, bytes) pairs; NULL with no error for None. */
static int make_headers(PyObject *headers, rk_headers_t **out) {
    *out = NULL;
    if (headers == Py_None) return 0;
    if (!PyList_Check(headers) && !PyTuple_Check(headers)) {
        PyErr_SetString(PyExc_TypeError, "headers must be a list of (str, bytes) pairs");
        return -1;
    }
    PyObject *seq = PySequence_Fast(headers, "headers");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    rk_headers_t *h = K.headers_new((size_t)n);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, i);
        const char *name, *val = NULL;
        Py_ssize_t nlen, vlen = 0;
        PyObject *value;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !(name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &nlen))) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a header must be a (str, bytes) pair");
            goto fail;
        }
        value = PyTuple_GET_ITEM(pair, 1);
        if (value != Py_None) {
            if (!PyBytes_Check(value)) { PyErr_SetString(PyExc_TypeError, "header values must be bytes"); goto fail; }
            val = PyBytes_AS_STRING(value);
            vlen = PyBytes_GET_SIZE(value);
        }
        K.header_add(h, name, nlen, val, vlen); /* a None value: NULL, size 0 */
    }
    Py_DECREF(seq);
    *out = h;
    return 0;
fail:
    Py_DECREF(seq);
    K.headers_destroy(h);
    return -1;
}

/* The pool of header lists for `headers` (a list or tuple of (str, bytes) pairs; None: *out is
 * NULL): the current one while the same headers come (the encoder passes one list for all its
 * records: an element-wise identity check), else a new one that replaces it. */
static int headers_pool(Producer *self, PyObject *headers, Pool **out) {
    *out = NULL;
    if (headers == Py_None) return 0;
    if (self->hdr_src && Py_TYPE(self->hdr_src) == Py_TYPE(headers)) {
        int same = PyObject_RichCompareBool(self->hdr_src, headers, Py_EQ);
        if (same < 0) return -1;
        if (same) { *out = self->blocks.pool; return 0; }
    }
    rk_headers_t *proto;
    if (make_headers(headers, &proto) < 0) return -1;
    PyObject *src = PyList_Check(headers) ? PySequence_List(headers) : Py_NewRef(headers); /* (str, bytes) tuples in a tuple: it cannot change */
    if (!src) { K.headers_destroy(proto); return -1; }
    Pool *p = pool_replace(&self->blocks, proto);
    if (!p) { Py_DECREF(src); PyErr_NoMemory(); return -1; }
    Py_XSETREF(self->hdr_src, src);
    *out = p;
    return 0;
}

/* Produce one record into the open segment, waiting (GIL released) while librdkafka's queue is
 * full: that wait is the worker's back-pressure point. Takes ownership of hdrs; of payload only
 * with MSG_F_FREE or MSG_F_BLOCK (freed or given back here on failure). Returns 0, or -1 with an
 * exception set. */
static int produce(Producer *self, const char *topic, int32_t partition, const char *key, Py_ssize_t klen,
                   char *value, Py_ssize_t vlen, int flags, rk_headers_t *hdrs, int counted) {
    if (self->fatal_code) {
        raise_kafka(self, self->fatal_code, self->fatal_reason, 1, 0, 0);
        goto fail;
    }
    rk_vu_t vu[7];
    int n = 0;
    vu[n].vtype = VT_TOPIC; vu[n++].u.cstr = topic;
    vu[n].vtype = VT_PARTITION; vu[n++].u.i32 = partition;
    vu[n].vtype = VT_VALUE; vu[n].u.mem.ptr = value; vu[n++].u.mem.size = value ? (size_t)vlen : 0;
    vu[n].vtype = VT_KEY; vu[n].u.mem.ptr = (void *)key; vu[n++].u.mem.size = key ? (size_t)klen : 0;
    vu[n].vtype = VT_OPAQUE; vu[n++].u.ptr = (void *)(intptr_t)(open_seq(self) * 2 + ((flags & MSG_F_BLOCK) != 0));
    vu[n].vtype = VT_MSGFLAGS; vu[n++].u.i = flags & ~MSG_F_BLOCK;
    if (hdrs) { vu[n].vtype = VT_HEADERS; vu[n++].u.headers = hdrs; }
    int waited_after_stop = 0;
    for (;;) {
        rk_error_t *err = K.produceva(self->rk, vu, (size_t)n);
        if (!err) break;
        if (K.error_code(err) != ERR_QUEUE_FULL) {
            raise_error_obj(self, err);
            goto fail;
        }
        K.error_destroy(err);
        poll_nogil(self, 50);
        if (PyErr_CheckSignals() < 0) goto fail;
        /* The queue stays full while the cluster refuses the login or certificate (nothing is
         * delivered until message.timeout.ms expires the records): the sink stops on it now. */
        int access = __atomic_load_n(&self->access_code, __ATOMIC_ACQUIRE);
        if (access) {
            raise_kafka(self, access, self->access_reason, 0, 0, 0);
            goto fail;
        }
        /* A stop (SIGTERM's handler runs inside PyErr_CheckSignals, or another thread) must not
         * wait for a broker that may never come back: the record is not sent, nothing after it is.
         * The task's records (counted) at once; an exactly-once batch's offset record, written by
         * the stop's own commit, after 10 s more (a healthy broker frees room well before). */
        if (self->interrupted && (counted || ++waited_after_stop > 200)) {
            PyErr_SetString(PyExc_InterruptedError, "stopping: the task was asked to stop while Kafka's "
                            "local queue was full (the record was not sent; offsets stay behind it)");
            goto fail;
        }
    }
    open_seg(self)->produced++;
    if (counted && ++self->records_sent % self->poll_every == 0) K.poll(self->rk, 0);
    return 0;
fail:
    if (flags & MSG_F_BLOCK) {
        block_give(&self->blocks, value, hdrs); /* a pool's list goes back to it */
    } else {
        if (hdrs) K.headers_destroy(hdrs);
        if (flags & MSG_F_FREE) free(value);
    }
    return -1;
}

static int bytes_or_none(PyObject *o, const char **p, Py_ssize_t *n, const char *what) {
    if (o == Py_None) { *p = NULL; *n = 0; return 0; }
    if (!PyBytes_Check(o)) { PyErr_Format(PyExc_TypeError, "%s must be bytes or None", what); return -1; }
    *p = PyBytes_AS_STRING(o);
    *n = PyBytes_GET_SIZE(o);
    return 0;
}

static int send_one(Producer *self, const char *topic, int32_t partition, PyObject *key, PyObject *value,
                    PyObject *headers, int counted) {
    const char *k, *v;
    Py_ssize_t kn, vn;
    rk_headers_t *h;
    if (bytes_or_none(key, &k, &kn, "key") < 0 || bytes_or_none(value, &v, &vn, "value") < 0) return -1;
    if (make_headers(headers, &h) < 0) return -1;
    return produce(self, topic, partition, k, kn, (char *)v, vn, MSG_F_COPY, h, counted);
}

/* send(topic, key, value, headers[, partition]): one of the task's records into the open segment
 * (partitioned by the key unless a partition is given), counted in records_sent. */
static PyObject *Producer_send(Producer *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 && nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "send(topic, key, value, headers[, partition])");
        return NULL;
    }
    const char *topic = PyUnicode_AsUTF8(args[0]);
    long partition = nargs == 5 ? PyLong_AsLong(args[4]) : -1;
    if (!topic || (partition == -1 && PyErr_Occurred())) return NULL;
    if (send_one(self, topic, (int32_t)partition, args[1], args[2], args[3], 1) < 0) return NULL;
    Py_RETURN_NONE;
}

/* produce(topic, value=None, key=None, partition=-1, headers=None): confluent-kafka's call shape,
 * for code that writes through a producer object (the offset record of an exactly-once batch);
 * not one of the task's records (records_sent). */
static PyObject *Producer_produce(Producer *self, PyObject *args, PyObject *kwds) {
    const char *topic;
    PyObject *value = Py_None, *key = Py_None, *headers = Py_None;
    int partition = -1;
    static char *kwlist[] = {"topic", "value", "key", "partition", "headers", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "s|OOiO", kwlist, &topic, &value, &key, &partition, &headers))
        return NULL;
    if (send_one(self, topic, partition, key, value, headers, 0) < 0) return NULL;
    Py_RETURN_NONE;
}

/* The `transaction` block of send_rows: the envelope around it per op, the block template cut
 * at its counters, and the counters (see TransactionMonitor.native_blocks). */
typedef struct {
    PyObject *pre[2], *post[2]; /* [insert, update]: the tail before and after the block */
    PyObject *parts[3];         /* the template's bytes around up to two numbers */
    Py_ssize_t nparts;
    int kinds[2];               /* 1: total_order, 2: data_collection_order */
    long long total, order;     /* counters of the previous record */
} TxBlock;

static int parse_tx(PyObject *o, TxBlock *tx) {
    /* Read directly, not with PyArg_ParseTuple: its format parsing cost more than the rest of
     * this per-call setup (once per ROW event with transaction metadata). */
    static const char shape[] = "tx: (pre_i, post_i, pre_u, post_u, parts, kind1, kind2, total, order)";
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 9) { PyErr_SetString(PyExc_TypeError, shape); return -1; }
    PyObject *const *it = &PyTuple_GET_ITEM(o, 0), *parts = it[4];
    for (int k = 0; k < 4; k++)
        if (!PyBytes_Check(it[k])) { PyErr_SetString(PyExc_TypeError, shape); return -1; }
    if (!PyTuple_Check(parts)) { PyErr_SetString(PyExc_TypeError, shape); return -1; }
    tx->pre[0] = it[0]; tx->post[0] = it[1]; tx->pre[1] = it[2]; tx->post[1] = it[3];
    long k1 = PyLong_AsLong(it[5]), k2 = PyLong_AsLong(it[6]);
    tx->total = PyLong_AsLongLong(it[7]);
    tx->order = PyLong_AsLongLong(it[8]);
    if (PyErr_Occurred()) return -1;
    tx->kinds[0] = (int)k1;
    tx->kinds[1] = (int)k2;
    tx->nparts = PyTuple_GET_SIZE(parts);
    if (tx->nparts < 1 || tx->nparts > 3) { PyErr_SetString(PyExc_ValueError, "1 to 3 template parts"); return -1; }
    for (Py_ssize_t k = 0; k < tx->nparts; k++) {
        tx->parts[k] = PyTuple_GET_ITEM(parts, k);
        if (!PyBytes_Check(tx->parts[k])) { PyErr_SetString(PyExc_TypeError, "template parts are bytes"); return -1; }
    }
    return 0;
}

/* The loop of send_rows and send_rows_src from row i on: the index of the first row it did not
 * send, or -1 with an exception (no memory, an interrupt). ``tails``: the insert's and the
 * update's tail after the after-image (without tx), or NULL with tx. */
static Py_ssize_t send_loop(Producer *self, PyObject *program, const char *topic, PyObject *rcs, Py_ssize_t i,
                            PyObject *prefix, const char *const tails[2], const Py_ssize_t tails_n[2], TxBlock *tx,
                            Pool *pool) {
    int with_tx = tx != NULL;
    static const char AFTER[] = ",\"after\":";
    const Py_ssize_t after_n = (Py_ssize_t)sizeof(AFTER) - 1;
    Py_ssize_t n = PyList_GET_SIZE(rcs);
    for (; i < n; i++) {
        PyObject *rc = PyList_GET_ITEM(rcs, i);
        if (!PyBytes_Check(rc)) break;
        RowImages im; /* in the program's buffers: no bytes objects per row */
        int got = rowenc_program_images(program, rc, &im);
        if (got <= 0) { PyErr_Clear(); break; } /* the Python path raises it under the failure mode */
        int insert = im.img[0] == NULL;
        if (im.img[1] == NULL ||
            (!insert && (im.key_n[0] != im.key_n[1] || (im.key_n[0] && memcmp(im.key[0], im.key[1], (size_t)im.key_n[0])))))
            break; /* delete or key change: delete + tombstone + create, the Python path */
        const char *bp = insert ? "null" : im.img[0];
        Py_ssize_t bn = insert ? 4 : im.img_n[0];
        Py_ssize_t pn = PyBytes_GET_SIZE(prefix), an = im.img_n[1];
        /* the pieces after the after-image: a tail, or pre + block + post */
        const char *piece[7];
        Py_ssize_t piece_n[7], npieces = 0, rest = 0;
        char nums[2][24];
        if (!with_tx) {
            piece[npieces] = tails[insert ? 0 : 1];
            piece_n[npieces++] = tails_n[insert ? 0 : 1];
        } else {
            int op = insert ? 0 : 1;
            long long counters[3] = {0, tx->total + 1, tx->order + 1};
            piece[npieces] = PyBytes_AS_STRING(tx->pre[op]);
            piece_n[npieces++] = PyBytes_GET_SIZE(tx->pre[op]);
            for (Py_ssize_t k = 0; k < tx->nparts; k++) {
                piece[npieces] = PyBytes_AS_STRING(tx->parts[k]);
                piece_n[npieces++] = PyBytes_GET_SIZE(tx->parts[k]);
                if (k + 1 < tx->nparts) {
                    int len = rowenc_decimal(nums[k], counters[tx->kinds[k] == 2 ? 2 : 1]);
                    piece[npieces] = nums[k];
                    piece_n[npieces++] = len;
                }
            }
            piece[npieces] = PyBytes_AS_STRING(tx->post[op]);
            piece_n[npieces++] = PyBytes_GET_SIZE(tx->post[op]);
        }
        for (Py_ssize_t k = 0; k < npieces; k++) rest += piece_n[k];
        Py_ssize_t vn = pn + bn + after_n + an + rest;
        int owner = vn <= (Py_ssize_t)BLOCK_MAX_VALUE ? MSG_F_BLOCK : MSG_F_FREE;
        rk_headers_t *h = NULL;
        char *value = owner == MSG_F_BLOCK ? block_take(&self->blocks, (size_t)vn, pool, &h) : malloc((size_t)vn), *w = value;
        if (!value) { PyErr_NoMemory(); return -1; }
        if (!h && pool) h = K.headers_copy(pool->proto); /* no spare list, or a value of its own */
        memcpy(w, PyBytes_AS_STRING(prefix), (size_t)pn); w += pn;
        memcpy(w, bp, (size_t)bn); w += bn;
        memcpy(w, AFTER, (size_t)after_n); w += after_n;
        memcpy(w, im.img[1], (size_t)an); w += an;
        for (Py_ssize_t k = 0; k < npieces; k++) { memcpy(w, piece[k], (size_t)piece_n[k]); w += piece_n[k]; }
        int rc_ = produce(self, topic, -1, im.key[1], im.key_n[1], value, vn, owner, h, 1); /* owns value and h */
        if (rc_ < 0) {
            /* Nothing was queued for this row: the Python path produces it again and meets the
             * same error under the failure-handling mode. Interrupts and exits propagate. */
            if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
            PyErr_Clear();
            break;
        }
        if (with_tx) { tx->total++; tx->order++; }
    }
    return i;
}

/* send_rows(program, topic, rcs, start, prefix, tail_insert, tail_update, headers, tx=None) -> index
 *
 * Encodes and produces rcs[start:] (serialized RowChanges) while each row is an insert or an
 * update that keeps its key, the records TablePlan.send_rows writes from the native images as
 * prefix + before + ',"after":' + after + tail (with tx: + pre + block + post, the block's
 * counters moving by one per record). Returns the index of the first row it did not send
 * (len(rcs) when all were): the caller sends that one through the Python path and calls again
 * after it. Any error from the encoder or the producer also stops at that row, nothing of it
 * queued (the Python path meets it again under the failure-handling mode). */
static PyObject *Producer_send_rows(Producer *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8 && nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "send_rows(program, topic, rcs, start, prefix, tail_i, tail_u, headers, tx)");
        return NULL;
    }
    PyObject *program = args[0], *rcs = args[2], *prefix = args[4], *tails[2] = {args[5], args[6]};
    if (!rowenc_is_program(program)) { PyErr_SetString(PyExc_TypeError, "send_rows: not a Program"); return NULL; }
    const char *topic = PyUnicode_AsUTF8(args[1]);
    Py_ssize_t i = PyLong_AsSsize_t(args[3]);
    if (!topic || (i == -1 && PyErr_Occurred())) return NULL;
    if (i < 0) { PyErr_SetString(PyExc_ValueError, "send_rows: start must be >= 0"); return NULL; }
    if (!PyList_Check(rcs) || !PyBytes_Check(prefix) || !PyBytes_Check(tails[0]) || !PyBytes_Check(tails[1])) {
        PyErr_SetString(PyExc_TypeError, "send_rows: rcs must be a list, prefix and tails bytes");
        return NULL;
    }
    TxBlock tx = {0};
    int with_tx = nargs == 9 && args[8] != Py_None;
    if (with_tx && parse_tx(args[8], &tx) < 0) return NULL;
    Pool *pool;
    if (headers_pool(self, args[7], &pool) < 0) return NULL;
    const char *tail_p[2] = {PyBytes_AS_STRING(tails[0]), PyBytes_AS_STRING(tails[1])};
    const Py_ssize_t tail_n[2] = {PyBytes_GET_SIZE(tails[0]), PyBytes_GET_SIZE(tails[1])};
    i = send_loop(self, program, topic, rcs, i, prefix, tail_p, tail_n, with_tx ? &tx : NULL, pool);
    return i < 0 ? NULL : PyLong_FromSsize_t(i);
}

/* Appends s[0:n] at *w. */
static inline void put(char **w, const char *s, Py_ssize_t n) {
    memcpy(*w, s, (size_t)n);
    *w += n;
}

/* The envelope tail of send_rows_src: ,"source":<block>,"transaction":null,"op":"<op>","ts_ms":..,
 * "ts_us":..,"ts_ns":..}<close>, with the block's template parts (SourceContext.source_parts)
 * around the commit time in ms, us and ns and the VGTID's string body. Returns its length. */
static Py_ssize_t write_tail(char *out, PyObject *const parts[5], long long commit_s, const char *body, Py_ssize_t body_n,
                             const char *op, Py_ssize_t op_n, long long now_ns, const char *close, Py_ssize_t close_n) {
    static const char SRC[] = ",\"source\":", TXN[] = ",\"transaction\":null,\"op\":\"", MS[] = "\",\"ts_ms\":",
                      US[] = ",\"ts_us\":", NS[] = ",\"ts_ns\":";
    char *w = out;
    put(&w, SRC, sizeof(SRC) - 1);
    const long long src_times[3] = {commit_s * 1000, commit_s * 1000000, commit_s * 1000000000};
    for (int k = 0; k < 3; k++) {
        put(&w, PyBytes_AS_STRING(parts[k]), PyBytes_GET_SIZE(parts[k]));
        w += rowenc_decimal(w, src_times[k]);
    }
    put(&w, PyBytes_AS_STRING(parts[3]), PyBytes_GET_SIZE(parts[3]));
    put(&w, body, body_n);
    put(&w, PyBytes_AS_STRING(parts[4]), PyBytes_GET_SIZE(parts[4]));
    put(&w, TXN, sizeof(TXN) - 1);
    put(&w, op, op_n);
    put(&w, MS, sizeof(MS) - 1);
    w += rowenc_decimal(w, now_ns / 1000000);
    put(&w, US, sizeof(US) - 1);
    w += rowenc_decimal(w, now_ns / 1000);
    put(&w, NS, sizeof(NS) - 1);
    w += rowenc_decimal(w, now_ns);
    *w++ = '}';
    put(&w, close, close_n);
    return w - out;
}

/* send_rows_src(program, topic, rcs, start, prefix, headers, parts, body, commit_seconds, op, now_ns, close) -> index
 *
 * send_rows without transaction metadata, its two tails written here from the source block's
 * parts (a 5-tuple of bytes, SourceContext.source_parts), the VGTID's JSON string body, the
 * commit time in seconds, the insert's op ("c", "r") and the time of the batch: the bytes
 * TablePlan._tails builds in Python, which cost a streamed transaction more than its C calls. A
 * commit time or a batch time outside what the tails' three units hold in 64 bits returns
 * ``start``: the Python path writes those. */
static PyObject *Producer_send_rows_src(Producer *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char usage[] = "send_rows_src(program, topic, rcs, start, prefix, headers, parts, body, commit_seconds, op, now_ns, close)";
    if (nargs != 12) { PyErr_SetString(PyExc_TypeError, usage); return NULL; }
    PyObject *program = args[0], *rcs = args[2], *prefix = args[4], *parts = args[6], *body = args[7], *close = args[11];
    if (!rowenc_is_program(program) || !PyList_Check(rcs) || !PyBytes_Check(prefix) || !PyTuple_Check(parts) ||
        PyTuple_GET_SIZE(parts) != 5 || !PyBytes_Check(body) || !PyBytes_Check(close)) {
        PyErr_SetString(PyExc_TypeError, usage);
        return NULL;
    }
    PyObject *const *part = &PyTuple_GET_ITEM(parts, 0);
    Py_ssize_t fixed = 0;
    for (int k = 0; k < 5; k++) {
        if (!PyBytes_Check(part[k])) { PyErr_SetString(PyExc_TypeError, usage); return NULL; }
        fixed += PyBytes_GET_SIZE(part[k]);
    }
    Py_ssize_t op_n, i = PyLong_AsSsize_t(args[3]);
    if (i == -1 && PyErr_Occurred()) return NULL;
    if (i < 0) { PyErr_SetString(PyExc_ValueError, "send_rows_src: start must be >= 0"); return NULL; }
    const char *topic = PyUnicode_AsUTF8(args[1]);
    if (!topic) return NULL;
    const char *op = PyUnicode_AsUTF8AndSize(args[9], &op_n);
    if (!op) return NULL;
    int overflow = 0, overflow_ns = 0;
    long long commit_s = PyLong_AsLongLongAndOverflow(args[8], &overflow);
    if (commit_s == -1 && PyErr_Occurred()) return NULL;
    long long now_ns = PyLong_AsLongLongAndOverflow(args[10], &overflow_ns);
    if (now_ns == -1 && PyErr_Occurred()) return NULL;
    /* ns of the commit second in 64 bits, and a batch time Python's // and C's / both floor:
     * otherwise the Python path writes the tails */
    if (overflow || overflow_ns || commit_s > 9000000000LL || commit_s < -9000000000LL || now_ns < 0)
        return PyLong_FromSsize_t(i);
    Pool *pool;
    if (headers_pool(self, args[5], &pool) < 0) return NULL;
    /* fixed text ~100 bytes and 7 numbers of at most 20 characters each */
    Py_ssize_t cap = fixed + PyBytes_GET_SIZE(body) + op_n + PyBytes_GET_SIZE(close) + 256;
    char *buf = PyMem_Malloc((size_t)cap * 2);
    if (!buf) return PyErr_NoMemory();
    const char *tail_p[2] = {buf, buf + cap};
    Py_ssize_t tail_n[2];
    const char *body_p = PyBytes_AS_STRING(body), *close_p = PyBytes_AS_STRING(close);
    Py_ssize_t body_n = PyBytes_GET_SIZE(body), close_n = PyBytes_GET_SIZE(close);
    tail_n[0] = write_tail(buf, part, commit_s, body_p, body_n, op, op_n, now_ns, close_p, close_n);
    tail_n[1] = write_tail(buf + cap, part, commit_s, body_p, body_n, "u", 1, now_ns, close_p, close_n);
    i = send_loop(self, program, topic, rcs, i, prefix, tail_p, tail_n, NULL, pool);
    PyMem_Free(buf);
    return i < 0 ? NULL : PyLong_FromSsize_t(i);
}

/* seal() -> the number of the segment it closes; a new segment opens. */
static int seal_open(Producer *self, int64_t *seq) {
    *seq = open_seq(self);
    open_seg(self)->sealed = 1;
    return push_seg(self);
}

static PyObject *Producer_seal(Producer *self, PyObject *unused) {
    int64_t seq;
    if (seal_open(self, &seq) < 0) return NULL;
    return PyLong_FromLongLong((long long)seq);
}

/* done_through() -> the highest segment number up to which every segment is sealed and every
 * record in it settled (acknowledged or failed; failures are in take_errors()); 0 if none. */
static int64_t settled_through(Producer *self) {
    while (self->head < self->nsegs - 1) {
        Seg *s = &self->segs[self->head];
        if (!s->sealed || s->done < s->produced) break;
        self->head++;
    }
    return self->base_seq + self->head - 1;
}

static PyObject *Producer_done_through(Producer *self, PyObject *unused) {
    return PyLong_FromLongLong((long long)settled_through(self));
}

/* commit_point() -> (seq, through): seal(), a poll(0) that serves the delivery reports, and
 * done_through(), in one call per transaction (they were four Python-level calls). through is -1
 * when something needs the sink's judgement first (a failed record waiting in take_errors(), a
 * refused login, a fatal error): the sink then takes the slow path, which reads them all. */
static PyObject *Producer_commit_point(Producer *self, PyObject *unused) {
    int64_t seq;
    if (seal_open(self, &seq) < 0) return NULL;
    poll_nogil(self, 0);
    int64_t through = -1;
    if (PyList_GET_SIZE(self->errors) == 0 && !__atomic_load_n(&self->access_code, __ATOMIC_ACQUIRE) && !self->fatal_code)
        through = settled_through(self);
    return Py_BuildValue("(LL)", (long long)seq, (long long)through);
}

/* take_errors() -> failed records since the last call: (seq, code, reason, topic, partition, key, value)
 * in a list, or () when there are none. */
static PyObject *Producer_take_errors(Producer *self, PyObject *unused) {
    /* Called at every commit point: nothing failed is the rule, and costs no allocation. */
    if (PyList_GET_SIZE(self->errors) == 0) return PyTuple_New(0); /* the shared empty tuple */
    PyObject *out = self->errors, *fresh = PyList_New(0);
    if (!fresh) return NULL;
    self->errors = fresh;
    return out;
}

/* forget() -> settle every segment (exactly-once: a committed transaction made them all durable). */
static PyObject *Producer_forget(Producer *self, PyObject *unused) {
    for (Py_ssize_t i = self->head; i < self->nsegs; i++) self->segs[i].done = self->segs[i].produced;
    Py_RETURN_NONE;
}

static PyObject *Producer_poll(Producer *self, PyObject *arg) {
    double t = PyFloat_AsDouble(arg);
    if (t == -1.0 && PyErr_Occurred()) return NULL;
    return PyLong_FromLong(poll_nogil(self, t < 0 ? -1 : (int)(t * 1000)));
}

static PyObject *Producer_flush(Producer *self, PyObject *args) {
    double t = -1;
    if (!PyArg_ParseTuple(args, "|d", &t)) return NULL;
    int left;
    Py_BEGIN_ALLOW_THREADS K.flush(self->rk, t < 0 ? -1 : (int)(t * 1000));
    left = K.outq_len(self->rk);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(left);
}

static PyObject *Producer_interrupt(Producer *self, PyObject *unused) {
    self->interrupted = 1;
    Py_RETURN_NONE;
}

static PyObject *txn_result(Producer *self, rk_error_t *err) {
    if (err) { raise_error_obj(self, err); return NULL; }
    Py_RETURN_NONE;
}

/* A blocking transaction call with an optional timeout in seconds, the GIL released. */
static PyObject *timed_txn(Producer *self, PyObject *args, rk_error_t *(*call)(rk_t *, int)) {
    double t = -1;
    rk_error_t *err;
    if (!PyArg_ParseTuple(args, "|d", &t)) return NULL;
    Py_BEGIN_ALLOW_THREADS err = call(self->rk, t < 0 ? -1 : (int)(t * 1000));
    Py_END_ALLOW_THREADS
    return txn_result(self, err);
}

static PyObject *Producer_init_transactions(Producer *self, PyObject *args) {
    return timed_txn(self, args, K.init_transactions);
}

static PyObject *Producer_begin_transaction(Producer *self, PyObject *unused) {
    return txn_result(self, K.begin_transaction(self->rk));
}

static PyObject *Producer_commit_transaction(Producer *self, PyObject *args) {
    return timed_txn(self, args, K.commit_transaction);
}

static PyObject *Producer_abort_transaction(Producer *self, PyObject *args) {
    return timed_txn(self, args, K.abort_transaction);
}

/* fatal_error() -> (code, reason) of the producer's fatal error, or None. */
static PyObject *Producer_fatal_error(Producer *self, PyObject *unused) {
    if (!self->fatal_code) Py_RETURN_NONE;
    return Py_BuildValue("(iN)", self->fatal_code, reason_text(self->fatal_reason));
}

/* access_error() -> (code, reason) of the first refusal of access (login, TLS), or None. */
static PyObject *Producer_access_error(Producer *self, PyObject *unused) {
    int code = __atomic_load_n(&self->access_code, __ATOMIC_ACQUIRE);
    if (!code) Py_RETURN_NONE;
    return Py_BuildValue("(iN)", code, reason_text(self->access_reason));
}

static Py_ssize_t Producer_len(Producer *self) { return self->rk ? K.outq_len(self->rk) : 0; }

static PyObject *Producer_get_pending(Producer *self, void *unused) {
    int64_t n = 0;
    for (Py_ssize_t i = self->head; i < self->nsegs; i++) n += self->segs[i].produced - self->segs[i].done;
    return PyLong_FromLongLong((long long)n);
}

static PyObject *Producer_get_records_sent(Producer *self, void *unused) {
    return PyLong_FromLongLong((long long)self->records_sent);
}

static PyMethodDef Producer_methods[] = {
    {"send", (PyCFunction)(void (*)(void))Producer_send, METH_FASTCALL, "send(topic, key, value, headers)"},
    {"produce", (PyCFunction)(void (*)(void))Producer_produce, METH_VARARGS | METH_KEYWORDS,
     "produce(topic, value=None, key=None, partition=-1, headers=None)"},
    {"send_rows", (PyCFunction)(void (*)(void))Producer_send_rows, METH_FASTCALL,
     "send_rows(program, topic, rcs, start, prefix, tail_insert, tail_update, headers, tx=None) -> next index"},
    {"send_rows_src", (PyCFunction)(void (*)(void))Producer_send_rows_src, METH_FASTCALL,
     "send_rows_src(program, topic, rcs, start, prefix, headers, parts, body, commit_seconds, op, now_ns, close) -> next index"},
    {"seal", (PyCFunction)Producer_seal, METH_NOARGS, "seal() -> number of the closed segment"},
    {"done_through", (PyCFunction)Producer_done_through, METH_NOARGS, "highest fully settled segment number"},
    {"commit_point", (PyCFunction)Producer_commit_point, METH_NOARGS,
     "commit_point() -> (seq, through): seal(), poll(0), done_through(); through -1 when errors wait"},
    {"take_errors", (PyCFunction)Producer_take_errors, METH_NOARGS, "failed records since the last call"},
    {"forget", (PyCFunction)Producer_forget, METH_NOARGS, "settle every segment (a committed transaction)"},
    {"poll", (PyCFunction)Producer_poll, METH_O, "poll(timeout_seconds) -> events served"},
    {"flush", (PyCFunction)Producer_flush, METH_VARARGS, "flush([timeout_seconds]) -> records still queued"},
    {"interrupt", (PyCFunction)Producer_interrupt, METH_NOARGS,
     "a send waiting for room in the full queue raises InterruptedError (from now on)"},
    {"init_transactions", (PyCFunction)Producer_init_transactions, METH_VARARGS, NULL},
    {"begin_transaction", (PyCFunction)Producer_begin_transaction, METH_NOARGS, NULL},
    {"commit_transaction", (PyCFunction)Producer_commit_transaction, METH_VARARGS, NULL},
    {"abort_transaction", (PyCFunction)Producer_abort_transaction, METH_VARARGS, NULL},
    {"fatal_error", (PyCFunction)Producer_fatal_error, METH_NOARGS, "(code, reason) of a fatal error, or None"},
    {"take_logs", (PyCFunction)Producer_take_logs, METH_NOARGS,
     "([(syslog level, facility, text)...], lines dropped) logged by librdkafka since the last call"},
    {"access_error", (PyCFunction)Producer_access_error, METH_NOARGS,
     "(code, reason) of the first refused login or TLS handshake, or None"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Producer_getset[] = {
    {"pending", (getter)Producer_get_pending, NULL, "records produced and not yet settled", NULL},
    {"records_sent", (getter)Producer_get_records_sent, NULL, "records produced", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods Producer_seq = {.sq_length = (lenfunc)Producer_len};

static PyTypeObject ProducerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdcworker._rowenc.Producer",
    .tp_basicsize = sizeof(Producer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The worker's Kafka producer with segment bookkeeping in C (see kafkaprod.c).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Producer_init,
    .tp_dealloc = (destructor)Producer_dealloc,
    .tp_methods = Producer_methods,
    .tp_getset = Producer_getset,
    .tp_as_sequence = &Producer_seq,
};

int kafkaprod_add_types(PyObject *module) {
    if (PyType_Ready(&ProducerType) < 0) return -1;
    Py_INCREF(&ProducerType);
    if (PyModule_AddObject(module, "Producer", (PyObject *)&ProducerType) < 0) {
        Py_DECREF(&ProducerType);
        return -1;
    }
    return 0;
}
