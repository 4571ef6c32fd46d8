/*
 * cdcworker._rowenc: the native inner loop of the row encoder.
 *
 * A Program is compiled once per table (per FIELD event) from the Python converters of
 * cdcworker.events.types; Program.encode(rowchange_bytes) parses one serialized
 * binlogdata.RowChange (no Python object per column or per length) and writes the
 * before/after row images and key payloads as JSON, byte-identical to the pure-Python path
 * (orjson + jsonfmt.fix_escapes). Anything the C code does not handle natively, or any value
 * outside a native fast path (non-canonical text, zero dates, out-of-range numbers, invalid
 * UTF-8...), is converted by the column's Python converter and serialized by orjson, so the
 * Python semantics stay the single source of truth. Malformed input or a column count that
 * does not match returns None: the caller then takes the Python path, which raises the
 * proper error. OP_CONST writes a masked column's constant (for NULLs too) without calling Python;
 * OP_TEXT_TRUNC a truncated text column (Java's substring: UTF-16 code units, no half pair).
 *
 * scan(VStreamResponse bytes) walks the response's wire format for the streaming stage: a ROW
 * event comes back as its table, shard and the serialized RowChanges (straight into
 * Program.encode), every other event as its byte range for upb to parse; anything unusual (a
 * repeated sub-message protobuf would merge, invalid UTF-8, wrong wire types) is left to upb.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "rowenc.h"

enum {
    OP_DROP = 0,     /* column dropped (no converter): bytes skipped, no output */
    OP_PY,           /* Python converter + orjson for every value */
    OP_INT,          /* canonical integer text, at most 18 digits: copied verbatim */
    OP_TEXT,         /* UTF-8 text as a JSON string */
    OP_F32,          /* MySQL FLOAT: parsed, rounded to float, Java Double.toString */
    OP_F64,          /* MySQL DOUBLE */
    OP_B64,          /* standard base64 string */
    OP_B64URL,       /* URL-safe base64 string */
    OP_HEX,          /* lower-case hex string */
    OP_BOOL,         /* any(raw) */
    OP_DEC_B64,      /* unsigned integer as Connect Decimal bytes (scale 0), base64 */
    OP_ENUM,         /* 1-based index into labels, "" otherwise */
    OP_SET,          /* bit set over labels, joined by "," */
    OP_DATE,         /* YYYY-MM-DD: days since epoch */
    OP_DATETIME,     /* YYYY-MM-DD HH:MM:SS[.f]: microseconds since epoch floor-divided by div */
    OP_TIME_MICRO,   /* [-]H:MM:SS[.f]: microseconds */
    OP_TIME_CONNECT, /* TIME in [0, 24h]: milliseconds */
    OP_CONST,        /* any value, NULL too, becomes labels[0] (a masked column's JSON constant) */
    OP_TEXT_TRUNC,   /* OP_TEXT cut to at most div UTF-16 code units (column.truncate.to.N.chars) */
    OP_MAX
};

typedef struct {
    int op;
    PyObject *name;   /* bytes: JSON key including quotes and ':' */
    PyObject *conv;   /* Python converter (fallback), NULL for OP_DROP */
    long long div;    /* OP_DATETIME divisor; OP_TEXT_TRUNC length */
    PyObject *labels; /* tuple of bytes: escaped label bodies (no quotes), OP_ENUM / OP_SET */
} Col;

/* An output buffer: 2 KB inline, grown on the heap beyond that. */
typedef struct {
    char *p;
    Py_ssize_t len, cap;
    char inl[2048];
} Buf;

typedef struct {
    PyObject_HEAD
    Py_ssize_t ncols;
    Col *cols;
    Py_ssize_t nkeys;
    Py_ssize_t *keys; /* column indexes of the key, in key order */
    PyObject *key_prefix; /* bytes: '{"schema":...,"payload":' or b"" */
    PyObject *dumps;      /* orjson.dumps */
    PyObject *fix;        /* jsonfmt.fix_escapes */
    Buf scratch[2];       /* rowenc_program_images' before and after images, kept grown */
    int busy;             /* rowenc_program_images is writing scratch */
} Program;

/* --- output buffer ------------------------------------------------------------------- */

static void buf_init(Buf *b) { b->p = b->inl; b->len = 0; b->cap = (Py_ssize_t)sizeof(b->inl); }
static void buf_free(Buf *b) { if (b->p != b->inl) PyMem_Free(b->p); }

static int buf_grow(Buf *b, Py_ssize_t n) {
    Py_ssize_t cap = b->cap * 2;
    while (cap < b->len + n) cap *= 2;
    char *np;
    if (b->p == b->inl) {
        np = PyMem_Malloc((size_t)cap);
        if (np) memcpy(np, b->p, (size_t)b->len);
    } else {
        np = PyMem_Realloc(b->p, (size_t)cap);
    }
    if (!np) { PyErr_NoMemory(); return -1; }
    b->p = np;
    b->cap = cap;
    return 0;
}

static inline int buf_reserve(Buf *b, Py_ssize_t n) {
    return (b->len + n <= b->cap) ? 0 : buf_grow(b, n);
}

static inline int buf_put(Buf *b, const char *s, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->p + b->len, s, (size_t)n);
    b->len += n;
    return 0;
}

#define PUTS(b, lit) buf_put((b), (lit), (Py_ssize_t)(sizeof(lit) - 1))

/* v's decimal digits into out (at least 20 chars), most significant first; their count ("0": 1).
 * The one integer writer of the row path: snprintf cost more than the digits per DATETIME. */
static int u64_digits(char *out, uint64_t v) {
    char tmp[20];
    int n = 20;
    do { tmp[--n] = (char)('0' + v % 10); v /= 10; } while (v);
    memcpy(out, tmp + n, (size_t)(20 - n));
    return 20 - n;
}

static int buf_put_i64(Buf *b, long long v) {
    char tmp[24];
    int neg = v < 0;
    tmp[0] = '-';
    int n = u64_digits(tmp + neg, neg ? 0 - (uint64_t)v : (uint64_t)v);
    return buf_put(b, tmp, n + neg);
}

/* --- small parsers ------------------------------------------------------------------- */

static inline int isdig(char c) { return c >= '0' && c <= '9'; }

/* Canonical decimal integer (what int() and orjson round-trip to the same text):
 * "0", or optional '-' then [1-9][0-9]*; at most maxdig digits. */
static int canonical_int(const char *s, Py_ssize_t n, int maxdig, int allow_neg) {
    Py_ssize_t i = 0;
    if (n > 0 && s[0] == '-') {
        if (!allow_neg) return 0;
        i = 1;
    }
    Py_ssize_t nd = n - i;
    if (nd <= 0 || nd > maxdig) return 0;
    if (s[i] == '0') return nd == 1 && i == 0;
    for (; i < n; i++)
        if (!isdig(s[i])) return 0;
    return 1;
}

static unsigned long long parse_u(const char *s, Py_ssize_t n) {
    unsigned long long v = 0;
    for (Py_ssize_t i = 0; i < n; i++) v = v * 10 + (unsigned)(s[i] - '0');
    return v;
}

/* Non-negative canonical integer of at most 20 digits that fits 64 bits unsigned. */
static int parse_u64(const char *s, Py_ssize_t n, unsigned long long *out) {
    if (!canonical_int(s, n, 20, 0)) return 0;
    if (n == 20 && memcmp(s, "18446744073709551615", 20) > 0) return 0;
    *out = parse_u(s, n);
    return 1;
}

static int fixed_digits(const char *s, int n, int *out) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdig(s[i])) return 0;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 1;
}

static long long days_from_civil(long long y, int m, int d) {
    y -= m <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    long long yoe = y - era * 400;
    long long doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    long long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int days_in_month(int y, int m) {
    static const int dm[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0)) return 29;
    return dm[m - 1];
}

/* YYYY-MM-DD, a real date with year >= 1 (date.fromisoformat's domain). */
static int parse_date(const char *s, Py_ssize_t n, long long *days) {
    int y, m, d;
    if (n != 10 || s[4] != '-' || s[7] != '-') return 0;
    if (!fixed_digits(s, 4, &y) || !fixed_digits(s + 5, 2, &m) || !fixed_digits(s + 8, 2, &d)) return 0;
    if (y < 1 || m < 1 || m > 12 || d < 1 || d > days_in_month(y, m)) return 0;
    *days = days_from_civil(y, m, d);
    return 1;
}

/* Up to 6 fraction digits after '.', scaled to microseconds. */
static int parse_frac(const char *s, Py_ssize_t n, long long *us) {
    if (n < 1 || n > 6) return 0;
    long long v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!isdig(s[i])) return 0;
        v = v * 10 + (s[i] - '0');
    }
    for (Py_ssize_t i = n; i < 6; i++) v *= 10;
    *us = v;
    return 1;
}

/* YYYY-MM-DD HH:MM:SS[.f{1,6}] -> microseconds since the epoch. */
static int parse_datetime(const char *s, Py_ssize_t n, long long *out) {
    long long days, frac = 0;
    int hh, mm, ss;
    if (n < 19 || s[10] != ' ' || s[13] != ':' || s[16] != ':') return 0;
    if (!parse_date(s, 10, &days)) return 0;
    if (!fixed_digits(s + 11, 2, &hh) || !fixed_digits(s + 14, 2, &mm) || !fixed_digits(s + 17, 2, &ss)) return 0;
    if (hh > 23 || mm > 59 || ss > 59) return 0;
    if (n > 19) {
        if (s[19] != '.' || !parse_frac(s + 20, n - 20, &frac)) return 0;
    }
    *out = ((days * 86400LL + hh * 3600LL + mm * 60LL + ss) * 1000000LL) + frac;
    return 1;
}

/* [-]H{1,4}:M{1,2}:S{1,2}[.f{1,6}] -> microseconds, as types._parse_time_micros computes it. */
static int parse_time(const char *s, Py_ssize_t n, long long *out) {
    Py_ssize_t i = 0, st;
    int neg = 0;
    long long part[3], frac = 0;
    static const int maxd[3] = {4, 2, 2};
    if (n > 0 && s[0] == '-') { neg = 1; i = 1; }
    for (int k = 0; k < 3; k++) {
        st = i;
        long long v = 0;
        while (i < n && isdig(s[i])) { v = v * 10 + (s[i] - '0'); i++; }
        if (i == st || i - st > maxd[k]) return 0;
        part[k] = v;
        if (k < 2) {
            if (i >= n || s[i] != ':') return 0;
            i++;
        }
    }
    if (i < n) {
        if (s[i] != '.' || !parse_frac(s + i + 1, n - i - 1, &frac)) return 0;
    }
    long long us = (part[0] * 3600 + part[1] * 60 + part[2]) * 1000000LL + frac;
    *out = neg ? -us : us;
    return 1;
}

/* -?[0-9]+(.[0-9]+)?([eE][-+]?[0-9]+)?, short: the texts MySQL writes for FLOAT/DOUBLE. */
static int plain_float(const char *s, Py_ssize_t n) {
    Py_ssize_t i = 0, st;
    if (n == 0 || n > 40) return 0;
    if (s[0] == '-') i = 1;
    st = i;
    while (i < n && isdig(s[i])) i++;
    if (i == st) return 0;
    if (i < n && s[i] == '.') {
        st = ++i;
        while (i < n && isdig(s[i])) i++;
        if (i == st) return 0;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        st = i;
        while (i < n && isdig(s[i])) i++;
        if (i == st) return 0;
    }
    return i == n;
}

/* --- writers ------------------------------------------------------------------------- */

static const char HEXU[] = "0123456789ABCDEF";
static const char HEXL[] = "0123456789abcdef";

/* Strict UTF-8 (what bytes.decode("utf-8") accepts without replacement). */
static int valid_utf8(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n) return 0;
            unsigned char c1 = s[i + 1];
            if (c == 0xE0 && (c1 < 0xA0 || c1 > 0xBF)) return 0;
            if (c == 0xED && (c1 < 0x80 || c1 > 0x9F)) return 0;
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n) return 0;
            unsigned char c1 = s[i + 1];
            if (c == 0xF0 && (c1 < 0x90 || c1 > 0xBF)) return 0;
            if (c == 0xF4 && (c1 < 0x80 || c1 > 0x8F)) return 0;
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80) return 0;
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

/* Bytes of valid UTF-8 ``s`` that keep at most ``units`` UTF-16 code units of whole characters:
 * String.substring(0, units) as filters.columns._java_truncate cuts it (an astral character is
 * two units; one that would be split is dropped, as the Python path's "ignore" decode drops it). */
static Py_ssize_t utf16_prefix(const unsigned char *s, Py_ssize_t n, long long units) {
    Py_ssize_t i = 0;
    long long used = 0;
    while (i < n) {
        unsigned char c = s[i];
        int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        int u = len == 4 ? 2 : 1;
        if (used + u > units) break;
        used += u;
        i += len;
    }
    return i;
}

/* The body of a JSON string as orjson escapes it, with Jackson's upper-case \u00XX. */
static int put_escaped(Buf *b, const unsigned char *s, Py_ssize_t n) {
    if (buf_reserve(b, n * 6) < 0) return -1;
    char *o = b->p + b->len;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\') { *o++ = (char)c; continue; }
        *o++ = '\\';
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\b': *o++ = 'b'; break;
        case '\t': *o++ = 't'; break;
        case '\n': *o++ = 'n'; break;
        case '\f': *o++ = 'f'; break;
        case '\r': *o++ = 'r'; break;
        default:
            *o++ = 'u'; *o++ = '0'; *o++ = '0';
            *o++ = HEXU[c >> 4]; *o++ = HEXU[c & 15];
        }
    }
    b->len = o - b->p;
    return 0;
}

/* `"` + base64 of s[0:n] + `"` at out (room for (n + 2) / 3 * 4 + 2 bytes); returns the length. */
Py_ssize_t rowenc_b64(char *out, const unsigned char *s, Py_ssize_t n, int url) {
    static const char STD[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    static const char URL[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const char *t = url ? URL : STD;
    char *o = out;
    *o++ = '"';
    Py_ssize_t i = 0;
    for (; i + 2 < n; i += 3) {
        unsigned v = ((unsigned)s[i] << 16) | ((unsigned)s[i + 1] << 8) | s[i + 2];
        *o++ = t[v >> 18]; *o++ = t[(v >> 12) & 63]; *o++ = t[(v >> 6) & 63]; *o++ = t[v & 63];
    }
    if (n - i == 1) {
        unsigned v = (unsigned)s[i] << 16;
        *o++ = t[v >> 18]; *o++ = t[(v >> 12) & 63]; *o++ = '='; *o++ = '=';
    } else if (n - i == 2) {
        unsigned v = ((unsigned)s[i] << 16) | ((unsigned)s[i + 1] << 8);
        *o++ = t[v >> 18]; *o++ = t[(v >> 12) & 63]; *o++ = t[(v >> 6) & 63]; *o++ = '=';
    }
    *o++ = '"';
    return o - out;
}

static int put_b64(Buf *b, const unsigned char *s, Py_ssize_t n, int url) {
    if (buf_reserve(b, (n + 2) / 3 * 4 + 2) < 0) return -1;
    b->len += rowenc_b64(b->p + b->len, s, n, url);
    return 0;
}

/* Java's Double.toString of a finite nonzero double given its shortest digits (no leading or
 * trailing zeros) and point (the value is 0.digits x 10^point); plain inside [1e-3, 1e7). */
static int put_java_digits(Buf *b, int neg, const char *digits, int len, int point, int plain) {
    char out[64];
    int o = 0;
    if (neg) out[o++] = '-';
    if (plain) {
        if (point <= 0) {
            out[o++] = '0'; out[o++] = '.';
            for (int i = 0; i < -point; i++) out[o++] = '0';
            memcpy(out + o, digits, (size_t)len); o += len;
        } else if (point >= len) {
            memcpy(out + o, digits, (size_t)len); o += len;
            for (int i = 0; i < point - len; i++) out[o++] = '0';
            out[o++] = '.'; out[o++] = '0';
        } else {
            memcpy(out + o, digits, (size_t)point); o += point;
            out[o++] = '.';
            memcpy(out + o, digits + point, (size_t)(len - point)); o += len - point;
        }
    } else {
        out[o++] = digits[0];
        out[o++] = '.';
        if (len > 1) { memcpy(out + o, digits + 1, (size_t)(len - 1)); o += len - 1; }
        else out[o++] = '0';
        o += snprintf(out + o, sizeof(out) - (size_t)o, "E%d", point - 1);
    }
    return buf_put(b, out, o);
}

/* The significant digits of an unsigned decimal text, digits[.digits][e[+-]N], into digits (no
 * leading or trailing zeros; the first `cap` kept) and its point (the value is 0.digits x
 * 10^point). Returns how many there are (0: a zero). */
static int decimal_digits(const char *s, Py_ssize_t n, char *digits, int cap, int *point) {
    int pos = 0, ip = -1, lz = 0, len = 0, last = 0;
    Py_ssize_t i = 0;
    for (; i < n && s[i] != 'e' && s[i] != 'E'; i++) {
        if (s[i] == '.') { ip = pos; continue; }
        if (len == 0 && s[i] == '0') lz++;
        else {
            if (len < cap) digits[len] = s[i];
            if (s[i] != '0') last = len + 1;
            len++;
        }
        pos++;
    }
    int exp = 0, sign = 1;
    if (i < n) { /* clamped: a 40-character text may carry an exponent beyond int */
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) sign = s[i++] == '-' ? -1 : 1;
        for (; i < n && exp < 100000; i++) exp = exp * 10 + (s[i] - '0');
    }
    *point = (ip < 0 ? pos : ip) - lz + sign * exp;
    return last;
}

/* Java's Double.toString (JDK 19+ shortest digits), as jsonfmt.java_double; finite v only.
 * Inside [1e-3, 1e7) this is also what orjson writes for the float (tests prove it). */
static int put_java_double(Buf *b, double v) {
    if (v == 0.0) return signbit(v) ? PUTS(b, "-0.0") : PUTS(b, "0.0");
    double ax = fabs(v);
    char *r = PyOS_double_to_string(ax, 'r', 0, 0, NULL);
    if (!r) return -1;
    char digits[32];
    int point, len = decimal_digits(r, (Py_ssize_t)strlen(r), digits, (int)sizeof(digits), &point);
    PyMem_Free(r);
    return put_java_digits(b, v < 0, digits, len, point, ax >= 1e-3 && ax < 1e7);
}

/* DOUBLEs of 16 to 19 significant digits, decided exactly in 128-bit integers. A value that is
 * not round (a ratio, a measurement) has 16 or 17 shortest digits, which MySQL writes: those went
 * through strtod and repr, whose bignum arithmetic was ~6 % of the worker's CPU over the
 * benchmark's i/3 column. The text is D x 10^-e (D < 2^64, 0 <= e <= 19); a double is m x 2^k
 * with 2^52 <= m < 2^53. */

static const uint64_t POW10[20] = {
    1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL, 100000000ULL,
    1000000000ULL, 10000000000ULL, 100000000000ULL, 1000000000000ULL, 10000000000000ULL,
    100000000000000ULL, 1000000000000000ULL, 10000000000000000ULL, 100000000000000000ULL,
    1000000000000000000ULL, 10000000000000000000ULL,
};

typedef struct { uint64_t m; int k; } Dyadic;

static inline int bitlen64(uint64_t v) { return v ? 64 - __builtin_clzll(v) : 0; }

/* n / p for a quotient known to fit 64 bits: one divq on x86-64 (__udivti3 is a loop). */
static inline uint64_t div_128_64(unsigned __int128 n, uint64_t p, uint64_t *rem) {
#if defined(__x86_64__) && defined(__GNUC__)
    uint64_t q, hi = (uint64_t)(n >> 64), lo = (uint64_t)n;
    __asm__("divq %4" : "=a"(q), "=d"(*rem) : "a"(lo), "d"(hi), "rm"(p));
    return q;
#else
    *rem = (uint64_t)(n % p);
    return (uint64_t)(n / p);
#endif
}

/* The double nearest D x 10^-e (ties to even), as strtod reads it: D x 2^s / 10^e carries 55 or
 * 56 bits, the 53 kept are rounded on the rest and the remainder. 0 when D x 10^-e >= 2^52 or
 * so (s < 0; written with an exponent by Java, and rare in a plain text): not decided here. */
static int exact_read(uint64_t d, int e, Dyadic *out) {
    uint64_t p = POW10[e];
    int s = 55 + bitlen64(p) - bitlen64(d);
    if (d == 0 || s < 0) return 0;
    unsigned __int128 n = (unsigned __int128)d << s;
    uint64_t r, q = div_128_64(n, p, &r); /* under 2^56 */
    int rest = r != 0, shift = bitlen64(q) - 53; /* 2 or 3 */
    uint64_t m = q >> shift, low = q & ((1ULL << shift) - 1), half = 1ULL << (shift - 1);
    if (low > half || (low == half && (rest || (m & 1)))) {
        if (++m == 1ULL << 53) { m >>= 1; shift++; }
    }
    out->m = m;
    out->k = shift - s;
    return 1;
}

/* 1 when c x 10^-e reads as x, 0 when not, -1 when not decided here. */
static int reads_as(uint64_t c, int e, Dyadic x) {
    Dyadic y;
    if (e < 0 || !exact_read(c, e, &y)) return -1;
    return y.m == x.m && y.k == x.k;
}

/* The shortest digits of x (what repr gives: the fewest that read as x, of those the nearest)
 * from a text D x 10^-e of `len` digits that reads as x; 0 when not decided here. A shorter
 * text that reads as x exists exactly when D cut to one digit less, rounded down or up, does:
 * the texts that read as x form an interval around x, which holds D, so it holds whichever of
 * the two lies between D and a shorter one. Of the shortest length, the nearest to x is x
 * rounded there; it must read as x (at a power of two the interval is lopsided), and a tie
 * (x halfway, where repr takes the even digit) is left to repr. */
static int shortest_exact(uint64_t d, int e, int len, Dyadic x, uint64_t *digits, int *exp10) {
    int cut = 0;
    for (; cut + 1 < len; cut++) {
        uint64_t lo = d / POW10[cut + 1];
        int a = reads_as(lo, e - cut - 1, x), b = a == 1 ? 1 : reads_as(lo + 1, e - cut - 1, x);
        if (a < 0 || b < 0) return 0;
        if (!a && !b) break;
    }
    int el = e - cut; /* x rounded to 10^-el: m x 10^el / 2^-k */
    /* Not reached from put_double_text (D >= 10^15, e <= 19: -k <= ~70, el >= 0 checked above),
     * kept so the shifts and the 64-bit c below stay safe for any caller. */
    if (x.k >= 0 || el > 19 || -x.k > 120) return 0;
    int sh = -x.k;
    unsigned __int128 n = (unsigned __int128)x.m * POW10[el], unit = (unsigned __int128)1 << sh;
    uint64_t c = (uint64_t)(n >> sh);
    unsigned __int128 r = n & (unit - 1), half = unit >> 1;
    if (r == half) return 0;
    if (r > half) c++;
    /* c == d only when no digit was cut (D reads as x). The read-back never failed on ~12 M
     * fuzzed texts (within this range the lopsided powers of two, 2^-24, 2^-44, 2^89, do not
     * occur): a guard, like the trailing zero's. */
    if (c % 10 == 0 || (c != d && reads_as(c, el, x) != 1)) return 0;
    *digits = c;
    *exp10 = el;
    return 1;
}

/* A DOUBLE's text (`s`: what plain_float accepted) written without strtod and repr: MySQL's
 * [-]digits[.digits] (the copy phase) and Vitess's Go 'E' format of the binlog, 3.3333333333333336E+04
 * (the streaming phase). Up to 15 significant digits, its own digits are the double's shortest
 * ones: two decimals of at most 15 significant digits never read as the same normal double
 * (DBL_DIG), so no other text of that length or shorter reads as this one; the point is kept far
 * from overflow and from the subnormals, where that fails. 16 to 19 digits: shortest_exact.
 * Returns 1 written, 0 for the general path (more digits, a case not decided exactly), -1 error. */
static int put_double_text(Buf *b, const char *s, Py_ssize_t n) {
    char digits[24];
    int neg = s[0] == '-', point;
    int len = decimal_digits(s + neg, n - neg, digits, (int)sizeof(digits), &point);
    if (len > 19) return 0;
    if (len == 0) return (neg ? PUTS(b, "-0.0") : PUTS(b, "0.0")) < 0 ? -1 : 1; /* float("-0") is -0.0 */
    if (point > 308 || point < -300) return 0;
    if (len > 15) {
        int e = len - point;
        uint64_t d = 0, c;
        Dyadic x;
        for (int i = 0; i < len; i++) d = d * 10 + (uint64_t)(digits[i] - '0');
        if (e < 0 || e > 19 || !exact_read(d, e, &x) || !shortest_exact(d, e, len, x, &c, &e)) return 0;
        len = u64_digits(digits, c);
        point = len - e;
    }
    return put_java_digits(b, neg, digits, len, point, point >= -2 && point <= 7) < 0 ? -1 : 1;
}

/* --- one value ----------------------------------------------------------------------- */

/* orjson refusing a converted value (an integer beyond 64 bits) is not raised here: the Python
 * path converts whole rows first, serializes the key before asking the transaction hook and the
 * value after it, so when and whether it raises depends on that order. Such a row (never sent
 * by MySQL) is handed to the Python path, which raises exactly as it does without the extension. */
typedef struct {
    int unserializable;
} Deferred;

static void defer_error(Deferred *d) {
    PyErr_Clear();
    d->unserializable = 1;
}

/* The Python converter's value, serialized by orjson (+ fix_escapes), as the dict path does. */
static int put_py(Program *pg, Deferred *d, Buf *b, Col *c, const char *s, Py_ssize_t n) {
    PyObject *raw = PyBytes_FromStringAndSize(s, n);
    if (!raw) return -1;
    PyObject *v = PyObject_CallOneArg(c->conv, raw);
    Py_DECREF(raw);
    if (!v) return -1;
    if (v == Py_None) {
        Py_DECREF(v);
        return PUTS(b, "null");
    }
    PyObject *js = PyObject_CallOneArg(pg->dumps, v);
    Py_DECREF(v);
    if (!js) {
        defer_error(d);
        return PUTS(b, "null");
    }
    if (!PyBytes_Check(js)) {
        Py_DECREF(js);
        PyErr_SetString(PyExc_TypeError, "dumps() did not return bytes");
        return -1;
    }
    const char *jp = PyBytes_AS_STRING(js);
    Py_ssize_t jn = PyBytes_GET_SIZE(js);
    if (jn >= 4 && memmem(jp, (size_t)jn, "\\u00", 4) != NULL) {
        PyObject *fixed = PyObject_CallOneArg(pg->fix, js);
        Py_DECREF(js);
        if (!fixed) return -1;
        if (!PyBytes_Check(fixed)) {
            Py_DECREF(fixed);
            PyErr_SetString(PyExc_TypeError, "fix_escapes() did not return bytes");
            return -1;
        }
        js = fixed;
        jp = PyBytes_AS_STRING(js);
        jn = PyBytes_GET_SIZE(js);
    }
    int rc = buf_put(b, jp, jn);
    Py_DECREF(js);
    return rc;
}

static int put_label(Buf *b, PyObject *labels, Py_ssize_t i) {
    PyObject *l = PyTuple_GET_ITEM(labels, i);
    return buf_put(b, PyBytes_AS_STRING(l), PyBytes_GET_SIZE(l));
}

static int put_value(Program *pg, Deferred *d, Buf *b, Col *c, const char *s, Py_ssize_t n) {
    switch (c->op) {
    case OP_CONST:
        return put_label(b, c->labels, 0);
    case OP_INT:
        if (canonical_int(s, n, 18, 1)) return buf_put(b, s, n);
        break;
    case OP_TEXT:
    case OP_TEXT_TRUNC:
        if (valid_utf8((const unsigned char *)s, n)) {
            if (c->op == OP_TEXT_TRUNC) n = utf16_prefix((const unsigned char *)s, n, c->div);
            if (PUTS(b, "\"") < 0 || put_escaped(b, (const unsigned char *)s, n) < 0) return -1;
            return PUTS(b, "\"");
        }
        break;
    case OP_F32:
    case OP_F64:
        if (plain_float(s, n)) {
            if (c->op == OP_F64) {
                int r = put_double_text(b, s, n);
                if (r != 0) return r < 0 ? -1 : 0;
            }
            char tmp[48];
            memcpy(tmp, s, (size_t)n);
            tmp[n] = 0;
            char *end = NULL;
            double x = PyOS_string_to_double(tmp, &end, NULL);
            if (x == -1.0 && PyErr_Occurred()) { PyErr_Clear(); break; }
            if (end != tmp + n) break;
            if (c->op == OP_F32) {
                float f = (float)x;
                if (isinf(f) && !isinf(x)) break; /* struct.pack raises: let Python say so */
                x = (double)f;
            }
            if (!isfinite(x)) break;
            return put_java_double(b, x);
        }
        break;
    case OP_B64:
        return put_b64(b, (const unsigned char *)s, n, 0);
    case OP_B64URL:
        return put_b64(b, (const unsigned char *)s, n, 1);
    case OP_HEX: {
        if (buf_reserve(b, 2 * n + 2) < 0) return -1;
        char *o = b->p + b->len;
        *o++ = '"';
        for (Py_ssize_t i = 0; i < n; i++) {
            unsigned char x = (unsigned char)s[i];
            *o++ = HEXL[x >> 4];
            *o++ = HEXL[x & 15];
        }
        *o++ = '"';
        b->len = o - b->p;
        return 0;
    }
    case OP_BOOL:
        for (Py_ssize_t i = 0; i < n; i++)
            if (s[i]) return PUTS(b, "true");
        return PUTS(b, "false");
    case OP_DEC_B64: {
        unsigned long long u;
        if (parse_u64(s, n, &u)) {
            /* BigInteger.toByteArray: big-endian, minimal length with a sign bit. */
            int bits = 0;
            for (unsigned long long t = u; t; t >>= 1) bits++;
            int nb = (bits + 8) / 8;
            unsigned char tmp[9];
            for (int i = 0; i < nb; i++) tmp[nb - 1 - i] = i < 8 ? (unsigned char)(u >> (8 * i)) : 0;
            return put_b64(b, tmp, nb, 0);
        }
        break;
    }
    case OP_ENUM:
        if (canonical_int(s, n, 18, 1)) {
            long long k = (s[0] == '-') ? -1 : (long long)parse_u(s, n);
            Py_ssize_t nl = PyTuple_GET_SIZE(c->labels);
            if (PUTS(b, "\"") < 0) return -1;
            if (k >= 1 && k <= nl && put_label(b, c->labels, (Py_ssize_t)(k - 1)) < 0) return -1;
            return PUTS(b, "\"");
        }
        break;
    case OP_SET: {
        unsigned long long bits;
        if (parse_u64(s, n, &bits)) {
            Py_ssize_t nl = PyTuple_GET_SIZE(c->labels);
            int first = 1;
            if (PUTS(b, "\"") < 0) return -1;
            for (Py_ssize_t i = 0; bits && i < 64; i++, bits >>= 1) {
                if ((bits & 1) && i < nl) {
                    if (!first && PUTS(b, ",") < 0) return -1;
                    if (put_label(b, c->labels, i) < 0) return -1;
                    first = 0;
                }
            }
            return PUTS(b, "\"");
        }
        break;
    }
    case OP_DATE: {
        long long days;
        if (parse_date(s, n, &days)) return buf_put_i64(b, days);
        break;
    }
    case OP_DATETIME: {
        long long us;
        if (parse_datetime(s, n, &us)) {
            long long q = us / c->div;
            if (us % c->div != 0 && us < 0) q -= 1; /* Python's floor division */
            return buf_put_i64(b, q);
        }
        break;
    }
    case OP_TIME_MICRO: {
        long long us;
        if (parse_time(s, n, &us)) return buf_put_i64(b, us);
        break;
    }
    case OP_TIME_CONNECT: {
        long long us;
        if (parse_time(s, n, &us) && us >= 0 && us <= 86400000000LL) return buf_put_i64(b, us / 1000);
        break;
    }
    default:
        break;
    }
    return put_py(pg, d, b, c, s, n);
}

/* --- protobuf wire format ------------------------------------------------------------ */

static int rd_varint(const unsigned char **pp, const unsigned char *end, uint64_t *out) {
    const unsigned char *p = *pp;
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (p >= end) return 0;
        unsigned char c = *p++;
        v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) { *pp = p; *out = v; return 1; }
    }
    return 0;
}

/* A field's number and wire type; 0 on malformed input, and for tags protobuf refuses: field
 * number 0, or a tag beyond 32 bits (field numbers end at 2^29 - 1). */
static int rd_tag(const unsigned char **pp, const unsigned char *end, int *field, int *wt) {
    uint64_t tag;
    if (!rd_varint(pp, end, &tag) || tag > UINT32_MAX || (tag >> 3) == 0) return 0;
    *field = (int)(tag >> 3);
    *wt = (int)(tag & 7);
    return 1;
}

/* Skip a field of the given wire type; 0 on malformed input. */
static int skip_field(const unsigned char **pp, const unsigned char *end, int wt) {
    uint64_t v;
    switch (wt) {
    case 0: return rd_varint(pp, end, &v);
    case 1: if (end - *pp < 8) return 0; *pp += 8; return 1;
    case 2:
        if (!rd_varint(pp, end, &v) || v > (uint64_t)(end - *pp)) return 0;
        *pp += v;
        return 1;
    case 5: if (end - *pp < 4) return 0; *pp += 4; return 1;
    default: return 0;
    }
}

/* [p, end) is a well-formed message whose fields are all scalars or bytes (a Bitmap). */
static int wire_ok(const unsigned char *p, const unsigned char *end) {
    int field, wt;
    while (p < end)
        if (!rd_tag(&p, end, &field, &wt) || !skip_field(&p, end, wt)) return 0;
    return 1;
}

/* [p, end) is a well-formed query.Row: wire_ok, and packed lengths made of whole varints. */
static int row_wire_ok(const unsigned char *p, const unsigned char *end) {
    int field, wt;
    uint64_t v;
    while (p < end) {
        if (!rd_tag(&p, end, &field, &wt)) return 0;
        if (field == 1 && wt == 2) {
            if (!rd_varint(&p, end, &v) || v > (uint64_t)(end - p)) return 0;
            const unsigned char *q = p;
            p += v;
            while (q < p)
                if (!rd_varint(&q, p, &v)) return 0;
        } else if (!skip_field(&p, end, wt)) {
            return 0;
        }
    }
    return 1;
}

/* query.Row: lengths (sint64, packed or not) into lens[ncols] and the values slice.
 * Returns 1, or 0 for anything unexpected (the caller falls back to Python). */
static int parse_row(const unsigned char *p, const unsigned char *end, Py_ssize_t ncols, long long *lens,
                     const char **values, Py_ssize_t *nvalues) {
    Py_ssize_t nl = 0;
    *values = "";
    *nvalues = 0;
    while (p < end) {
        uint64_t v;
        int field, wt;
        if (!rd_tag(&p, end, &field, &wt)) return 0;
        if (field == 1 && wt == 2) {
            if (!rd_varint(&p, end, &v) || v > (uint64_t)(end - p)) return 0;
            const unsigned char *q = p, *qe = p + v;
            while (q < qe) {
                uint64_t z;
                if (!rd_varint(&q, qe, &z) || nl >= ncols) return 0;
                lens[nl++] = (long long)((z >> 1) ^ (~(z & 1) + 1));
            }
            p = qe;
        } else if (field == 1 && wt == 0) {
            uint64_t z;
            if (!rd_varint(&p, end, &z) || nl >= ncols) return 0;
            lens[nl++] = (long long)((z >> 1) ^ (~(z & 1) + 1));
        } else if (field == 2 && wt == 2) {
            if (!rd_varint(&p, end, &v) || v > (uint64_t)(end - p)) return 0;
            *values = (const char *)p;
            *nvalues = (Py_ssize_t)v;
            p += v;
        } else if (!skip_field(&p, end, wt)) {
            return 0;
        }
    }
    return nl == ncols;
}

/* One row image into b (emptied) and, if the table has a key, its key record after it: the image
 * is b->p[0:*img_len], the key b->p[*img_len:b->len]. Returns 1 done, 0 fall back to Python,
 * -1 error set. */
static int encode_image_into(Program *pg, Deferred *d, const unsigned char *p, const unsigned char *end, Buf *bp,
                             Py_ssize_t *img_len_out) {
    Py_ssize_t ncols = pg->ncols;
    long long lens_s[64];
    Py_ssize_t spans_s[128];
    long long *lens = lens_s;
    Py_ssize_t *spans = spans_s;
    const char *values;
    Py_ssize_t nvalues;
    int rc = -1;
    bp->len = 0;
    if (ncols > 64) {
        lens = PyMem_Malloc(sizeof(long long) * (size_t)ncols);
        spans = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (size_t)ncols);
        if (!lens || !spans) { PyErr_NoMemory(); goto done; }
    }
    if (!parse_row(p, end, ncols, lens, &values, &nvalues)) { rc = 0; goto done; }
    Py_ssize_t pos = 0;
    int first = 1;
    if (PUTS(bp, "{") < 0) goto done;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        Col *c = &pg->cols[i];
        long long l = lens[i];
        if (l > 0 && l > nvalues - pos) { rc = 0; goto done; } /* Python slices would truncate (no pos + l: it may overflow) */
        if (c->op == OP_DROP) {
            if (l > 0) pos += l;
            continue;
        }
        if (!first && PUTS(bp, ",") < 0) goto done;
        first = 0;
        if (buf_put(bp, PyBytes_AS_STRING(c->name), PyBytes_GET_SIZE(c->name)) < 0) goto done;
        spans[2 * i] = bp->len;
        if (l < 0) {
            /* NULL is null, but for a masked column: Debezium masks NULLs too */
            if ((c->op == OP_CONST ? put_label(bp, c->labels, 0) : PUTS(bp, "null")) < 0) goto done;
        } else {
            if (put_value(pg, d, bp, c, values + pos, (Py_ssize_t)l) < 0) goto done;
            pos += l;
        }
        spans[2 * i + 1] = bp->len;
    }
    if (PUTS(bp, "}") < 0) goto done;
    Py_ssize_t img_len = bp->len;
    if (pg->nkeys > 0) {
        /* The key record is written after the image in the same buffer, then split off. */
        Py_ssize_t kp = PyBytes_GET_SIZE(pg->key_prefix);
        if (buf_put(bp, PyBytes_AS_STRING(pg->key_prefix), kp) < 0 || PUTS(bp, "{") < 0) goto done;
        for (Py_ssize_t k = 0; k < pg->nkeys; k++) {
            Py_ssize_t i = pg->keys[k];
            Col *c = &pg->cols[i];
            if (k > 0 && PUTS(bp, ",") < 0) goto done;
            if (buf_put(bp, PyBytes_AS_STRING(c->name), PyBytes_GET_SIZE(c->name)) < 0) goto done;
            Py_ssize_t s0 = spans[2 * i], s1 = spans[2 * i + 1];
            if (buf_reserve(bp, s1 - s0) < 0) goto done;
            memcpy(bp->p + bp->len, bp->p + s0, (size_t)(s1 - s0));
            bp->len += s1 - s0;
        }
        if (PUTS(bp, "}") < 0) goto done;
        if (kp > 0 && PUTS(bp, "}") < 0) goto done;
    }
    *img_len_out = img_len;
    rc = 1;
done:
    if (lens != lens_s) PyMem_Free(lens);
    if (spans != spans_s) PyMem_Free(spans);
    return rc;
}

/* A RowChange's before (sub[0]) and after (sub[1]) Row messages, each to sube[i]; NULL when
 * absent. Returns 0 when the Python path must decide (malformed, or what upb would read
 * differently). */
static int split_rowchange(const unsigned char *p, const unsigned char *end, const unsigned char **sub,
                           const unsigned char **sube) {
    sub[0] = sub[1] = sube[0] = sube[1] = NULL;
    while (p < end) {
        uint64_t v;
        int field, wt;
        if (!rd_tag(&p, end, &field, &wt)) return 0;
        if ((field == 1 || field == 2) && wt == 2) {
            if (!rd_varint(&p, end, &v) || v > (uint64_t)(end - p) || sub[field - 1] != NULL) {
                return 0; /* malformed, or a repeated sub-message that protobuf would merge */
            }
            sub[field - 1] = p;
            sube[field - 1] = p + v;
            p += v;
        } else if ((field == 3 || field == 4) && wt == 2) {
            /* data_columns / json_partial_values: Bitmaps the encoder does not read, but upb parses
             * them, and refuses the whole RowChange for a malformed one: so must we. */
            if (!rd_varint(&p, end, &v) || v > (uint64_t)(end - p) || !wire_ok(p, p + v)) return 0;
            p += v;
        } else if (!skip_field(&p, end, wt)) {
            return 0;
        }
    }
    return 1;
}

/* A row change's images into the program's scratch buffers (see rowenc_program_images). */
static int program_images(Program *pg, const unsigned char *p, Py_ssize_t n, RowImages *out) {
    const unsigned char *sub[2], *sube[2];
    Deferred d = {0};
    if (pg->busy) return 0; /* a converter called back into it: the Python path, not a clobbered scratch */
    if (!split_rowchange(p, p + n, sub, sube)) return 0;
    pg->busy = 1;
    int rc = 1;
    for (int i = 0; i < 2 && rc == 1; i++) {
        out->img[i] = out->key[i] = NULL;
        out->img_n[i] = out->key_n[i] = 0;
        if (sub[i] == NULL) continue;
        Buf *b = &pg->scratch[i];
        Py_ssize_t len = 0;
        rc = encode_image_into(pg, &d, sub[i], sube[i], b, &len);
        if (rc < 0 && i == 0 && sub[1] != NULL && !row_wire_ok(sub[1], sube[1])) {
            /* A converter raised on the before image, but upb refuses the after image first (the
             * Python path parses the whole RowChange before converting): let it raise that. */
            PyErr_Clear();
            rc = 0;
        }
        if (rc != 1) break;
        out->img[i] = b->p;
        out->img_n[i] = len;
        if (pg->nkeys > 0) {
            out->key[i] = b->p + len;
            out->key_n[i] = b->len - len;
        }
    }
    pg->busy = 0;
    if (rc == 1 && d.unserializable) rc = 0;
    return rc;
}

static PyObject *maybe_bytes(const char *p, Py_ssize_t n) {
    return p ? PyBytes_FromStringAndSize(p, n) : Py_NewRef(Py_None);
}

/* Program.encode(rowchange: bytes) -> (before, after, before_key, after_key) | None */
static PyObject *Program_encode(Program *pg, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    RowImages im;
    int rc = program_images(pg, view.buf, view.len, &im);
    PyBuffer_Release(&view);
    if (rc < 0) return NULL;
    if (rc == 0) Py_RETURN_NONE;
    return Py_BuildValue("(NNNN)", maybe_bytes(im.img[0], im.img_n[0]), maybe_bytes(im.img[1], im.img_n[1]),
                         maybe_bytes(im.key[0], im.key_n[0]), maybe_bytes(im.key[1], im.key_n[1]));
}

/* --- construction -------------------------------------------------------------------- */

static void Program_dealloc(Program *pg) {
    if (pg->cols) {
        for (Py_ssize_t i = 0; i < pg->ncols; i++) {
            Py_XDECREF(pg->cols[i].name);
            Py_XDECREF(pg->cols[i].conv);
            Py_XDECREF(pg->cols[i].labels);
        }
        PyMem_Free(pg->cols);
    }
    PyMem_Free(pg->keys);
    buf_free(&pg->scratch[0]);
    buf_free(&pg->scratch[1]);
    Py_XDECREF(pg->key_prefix);
    Py_XDECREF(pg->dumps);
    Py_XDECREF(pg->fix);
    Py_TYPE(pg)->tp_free((PyObject *)pg);
}

/* Program(columns, keys, key_prefix, dumps, fix_escapes)
 *   columns: sequence of (op: int, name_json: bytes, conv: callable | None, div: int, labels: tuple[bytes])
 *   keys: sequence of column indexes (non-dropped) in key order */
static PyObject *Program_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *cols, *keys, *key_prefix, *dumps, *fix;
    static char *kwlist[] = {"columns", "keys", "key_prefix", "dumps", "fix_escapes", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOSOO", kwlist, &cols, &keys, &key_prefix, &dumps, &fix))
        return NULL;
    Program *pg = (Program *)type->tp_alloc(type, 0);
    if (!pg) return NULL;
    buf_init(&pg->scratch[0]);
    buf_init(&pg->scratch[1]);
    PyObject *cseq = PySequence_Fast(cols, "columns must be a sequence");
    PyObject *kseq = NULL;
    if (!cseq) goto fail;
    pg->ncols = PySequence_Fast_GET_SIZE(cseq);
    pg->cols = PyMem_Calloc((size_t)(pg->ncols ? pg->ncols : 1), sizeof(Col));
    if (!pg->cols) { PyErr_NoMemory(); goto fail; }
    for (Py_ssize_t i = 0; i < pg->ncols; i++) {
        Col *c = &pg->cols[i];
        int op;
        PyObject *name, *conv, *labels;
        long long div;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(cseq, i), "iSOLO!", &op, &name, &conv, &div, &PyTuple_Type,
                              &labels))
            goto fail;
        if (op < 0 || op >= OP_MAX) { PyErr_Format(PyExc_ValueError, "bad op %d", op); goto fail; }
        if (op != OP_DROP && !PyCallable_Check(conv)) {
            PyErr_SetString(PyExc_TypeError, "converter must be callable");
            goto fail;
        }
        if ((op == OP_DATETIME || op == OP_TEXT_TRUNC) && div <= 0) { PyErr_SetString(PyExc_ValueError, "div must be > 0"); goto fail; }
        if (op == OP_CONST && PyTuple_GET_SIZE(labels) != 1) {
            PyErr_SetString(PyExc_ValueError, "OP_CONST needs exactly one label");
            goto fail;
        }
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(labels); j++) {
            if (!PyBytes_Check(PyTuple_GET_ITEM(labels, j))) {
                PyErr_SetString(PyExc_TypeError, "labels must be bytes");
                goto fail;
            }
        }
        c->op = op;
        c->name = Py_NewRef(name);
        c->conv = op == OP_DROP ? NULL : Py_NewRef(conv);
        c->div = div;
        c->labels = Py_NewRef(labels);
    }
    kseq = PySequence_Fast(keys, "keys must be a sequence");
    if (!kseq) goto fail;
    pg->nkeys = PySequence_Fast_GET_SIZE(kseq);
    pg->keys = PyMem_Calloc((size_t)(pg->nkeys ? pg->nkeys : 1), sizeof(Py_ssize_t));
    if (!pg->keys) { PyErr_NoMemory(); goto fail; }
    for (Py_ssize_t k = 0; k < pg->nkeys; k++) {
        Py_ssize_t i = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(kseq, k), PyExc_OverflowError);
        if (i == -1 && PyErr_Occurred()) goto fail;
        if (i < 0 || i >= pg->ncols || pg->cols[i].op == OP_DROP) {
            PyErr_SetString(PyExc_ValueError, "key index out of range or dropped");
            goto fail;
        }
        pg->keys[k] = i;
    }
    pg->key_prefix = Py_NewRef(key_prefix);
    pg->dumps = Py_NewRef(dumps);
    pg->fix = Py_NewRef(fix);
    Py_DECREF(cseq);
    Py_DECREF(kseq);
    return (PyObject *)pg;
fail:
    Py_XDECREF(cseq);
    Py_XDECREF(kseq);
    Py_DECREF(pg);
    return NULL;
}

static PyMethodDef Program_methods[] = {
    {"encode", (PyCFunction)Program_encode, METH_O,
     "encode(rowchange_bytes) -> (before, after, before_key, after_key) or None (use the Python path)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ProgramType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdcworker._rowenc.Program",
    .tp_basicsize = sizeof(Program),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A compiled per-table column program (see cdcworker.events.native).",
    .tp_new = Program_new,
    .tp_dealloc = (destructor)Program_dealloc,
    .tp_methods = Program_methods,
};

/* --- VStreamResponse scanner ------------------------------------------------------------ */

#define VEVENT_BEGIN 2
#define VEVENT_COMMIT 3
#define VEVENT_ROW 12

/* A string field as str, or NULL with no error set when it is not valid UTF-8 (upb rejects it:
 * the caller then hands the event to Python, which raises the same way). */
static PyObject *utf8_or_null(const unsigned char *p, Py_ssize_t n) {
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
    if (!s) PyErr_Clear();
    return s;
}

/* VEvent's string fields (gtid, statement, dml, keyspace, shard, throttled_reason, event_gtid)
 * and its sub-messages other than row_event (field_event, vgtid, journal, last_p_k_event). */
static int vevent_string(int f) { return f == 3 || f == 4 || f == 9 || f == 22 || f == 23 || f == 25 || f == 28; }
static int vevent_message(int f) { return f == 6 || f == 7 || f == 8 || f == 21; }

/* One VEvent at [p, end): a ROW item (type, start, end, table_name, shard, is_internal, [RowChange
 * bytes]) when it is a well-formed ROW event, a BEGIN or COMMIT item (type, start, end,
 * timestamp, shard) when it is a well-formed BEGIN or COMMIT (what the stream reads of them: two
 * upb parses per transaction saved), else (type, start, end) for Python to parse.
 * Returns NULL with an error set on allocation failure, Py_None when the event is malformed. */
static PyObject *scan_event(const unsigned char *base, const unsigned char *p, const unsigned char *end) {
    const unsigned char *start = p, *re = NULL, *ree = NULL, *evshard = NULL;
    Py_ssize_t evshard_n = 0;
    long long type = 0, ts = 0;
    int generic = 0, row_events = 0;
    while (p < end) {
        uint64_t v;
        int field, wt;
        if (!rd_tag(&p, end, &field, &wt)) return Py_NewRef(Py_None);
        if (field == 1 || field == 2) {
            if (wt != 0) { generic = 1; if (!skip_field(&p, end, wt)) return Py_NewRef(Py_None); continue; }
            if (!rd_varint(&p, end, &v)) return Py_NewRef(Py_None);
            if (field == 1) type = (long long)(int32_t)(uint32_t)v;
            else ts = (long long)v; /* int64: two's complement, last one wins */
        } else if (wt == 2) {
            if (!rd_varint(&p, end, &v) || v > (uint64_t)(end - p)) return Py_NewRef(Py_None);
            if (field == 5) { re = p; ree = p + v; row_events++; }
            else if (field == 23) { evshard = p; evshard_n = (Py_ssize_t)v; }
            /* upb checks every string's UTF-8 and parses every sub-message of the event (and
             * refuses the whole event for one bad byte): such an event is left to upb. */
            if (vevent_message(field) || (vevent_string(field) && !valid_utf8(p, (Py_ssize_t)v))) generic = 1;
            p += v;
        } else if (!skip_field(&p, end, wt)) {
            return Py_NewRef(Py_None);
        }
    }
    Py_ssize_t s0 = start - base, s1 = end - base;
    if ((type == VEVENT_BEGIN || type == VEVENT_COMMIT) && !generic && row_events == 0) {
        PyObject *shard = utf8_or_null(evshard ? evshard : (const unsigned char *)"", evshard_n); /* valid: checked */
        if (shard) return Py_BuildValue("(LnnLN)", type, s0, s1, ts, shard);
    }
    if (type != VEVENT_ROW || generic || row_events != 1) return Py_BuildValue("(Lnn)", type, s0, s1);
    /* RowEvent: table_name 1, row_changes 2, shard 4, is_internal_table 6 (scalars: last wins) */
    const unsigned char *tn = (const unsigned char *)"", *sh = NULL;
    Py_ssize_t tn_n = 0, sh_n = 0;
    int internal = 0;
    PyObject *rcs = PyList_New(0);
    if (!rcs) return NULL;
    p = re;
    while (p < ree) {
        uint64_t v;
        int field, wt;
        if (!rd_tag(&p, ree, &field, &wt)) { generic = 1; break; }
        if ((field == 1 || field == 2 || field == 3 || field == 4) && wt == 2) {
            if (!rd_varint(&p, ree, &v) || v > (uint64_t)(ree - p)) { generic = 1; break; }
            if (field != 2 && !valid_utf8(p, (Py_ssize_t)v)) { generic = 1; break; } /* each one, as upb */
            if (field == 1) { tn = p; tn_n = (Py_ssize_t)v; }
            else if (field == 3) { /* keyspace: the item does not carry it */ }
            else if (field == 4) { sh = p; sh_n = (Py_ssize_t)v; }
            else {
                PyObject *b = PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)v);
                if (!b || PyList_Append(rcs, b) < 0) { Py_XDECREF(b); Py_DECREF(rcs); return NULL; }
                Py_DECREF(b);
            }
            p += v;
        } else if (field == 6 && wt == 0) {
            if (!rd_varint(&p, ree, &v)) { generic = 1; break; }
            internal = v != 0;
        } else if (field == 1 || field == 2 || field == 3 || field == 4 || field == 6 || !skip_field(&p, ree, wt)) {
            generic = 1; /* a wire type protobuf would reject or treat specially: let upb decide */
            break;
        }
    }
    if (generic) {
        Py_DECREF(rcs);
        return Py_BuildValue("(Lnn)", type, s0, s1);
    }
    if (sh_n == 0) { sh = evshard; sh_n = evshard_n; } /* RowEvent.shard or VEvent.shard */
    PyObject *table = utf8_or_null(tn, tn_n);
    PyObject *shard = table ? utf8_or_null(sh ? sh : (const unsigned char *)"", sh_n) : NULL;
    if (!table || !shard) {
        Py_XDECREF(table);
        Py_DECREF(rcs);
        return Py_BuildValue("(Lnn)", type, s0, s1);
    }
    return Py_BuildValue("(LnnNNON)", type, s0, s1, table, shard, internal ? Py_True : Py_False, rcs);
}

/* scan(VStreamResponse bytes) -> list of event items (see scan_event), or None when the response
 * is malformed (the caller parses it with upb, which raises the proper error). */
static PyObject *rowenc_scan(PyObject *mod, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *base = view.buf, *p = base, *end = base + view.len;
    PyObject *out = PyList_New(0);
    if (!out) goto done;
    while (p < end) {
        uint64_t v;
        int field, wt;
        if (!rd_tag(&p, end, &field, &wt)) goto malformed;
        if (field == 1 && wt == 2) {
            if (!rd_varint(&p, end, &v) || v > (uint64_t)(end - p)) goto malformed;
            PyObject *item = scan_event(base, p, p + v);
            if (!item) { Py_CLEAR(out); goto done; }
            if (item == Py_None) { Py_DECREF(item); goto malformed; }
            int rc = PyList_Append(out, item);
            Py_DECREF(item);
            if (rc < 0) { Py_CLEAR(out); goto done; }
            p += v;
        } else if (field == 1 || !skip_field(&p, end, wt)) {
            goto malformed;
        }
    }
    goto done;
malformed:
    Py_DECREF(out);
    out = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return out;
}

/* vgtid_entries(data, start, end, previous) -> (shard, entries, changed) or None
 *
 * The VGTID event at data[start:end) without upb: its VEvent.shard, its VGtid's ShardGtid
 * entries as serialized bytes (a tuple), and the indices of the entries whose bytes differ from
 * `previous` (the entries of the last call, a tuple). An entry equal to previous[i] is that very
 * object, so the caller re-reads only the changed entries: between two commits only the
 * committing shard's GTID moves, and over 64 shards reading all 64 per commit was the cost.
 * None when the event is anything else or unusual (a repeated vgtid that protobuf would merge,
 * another sub-message, a string that is not UTF-8, unknown VGtid fields): upb parses it. */
static PyObject *rowenc_vgtid_entries(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyTuple_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "vgtid_entries(data, start, end, previous: tuple)");
        return NULL;
    }
    Py_ssize_t s0 = PyLong_AsSsize_t(args[1]), s1 = PyLong_AsSsize_t(args[2]);
    if ((s0 == -1 || s1 == -1) && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = Py_None, *prev = args[3];
    if (s0 < 0 || s1 < s0 || s1 > view.len) goto unusual;
    const unsigned char *p = (const unsigned char *)view.buf + s0, *end = (const unsigned char *)view.buf + s1;
    const unsigned char *vg = NULL, *vge = NULL, *sh = (const unsigned char *)"";
    Py_ssize_t sh_n = 0;
    long long type = -1;
    while (p < end) {
        uint64_t v;
        int field, wt;
        if (!rd_tag(&p, end, &field, &wt)) goto unusual;
        if (field == 1) {
            if (wt != 0 || !rd_varint(&p, end, &v)) goto unusual;
            type = (long long)(int32_t)(uint32_t)v;
        } else if (wt == 2) {
            if (!rd_varint(&p, end, &v) || v > (uint64_t)(end - p)) goto unusual;
            if (field == 7) { /* vgtid */
                if (vg) goto unusual; /* protobuf would merge the two */
                vg = p; vge = p + v;
            } else if (vevent_message(field) || (vevent_string(field) && !valid_utf8(p, (Py_ssize_t)v))) {
                goto unusual;
            } else if (field == 23) {
                sh = p; sh_n = (Py_ssize_t)v;
            }
            p += v;
        } else if (!skip_field(&p, end, wt)) {
            goto unusual;
        }
    }
    if (type != 15 /* VGTID */ || !vg) goto unusual;
    /* VGtid: shard_gtids 1 (repeated ShardGtid); anything else goes to upb */
    Py_ssize_t n = 0, np = PyTuple_GET_SIZE(prev);
    for (const unsigned char *q = vg; q < vge; n++) {
        uint64_t v;
        int field, wt;
        if (!rd_tag(&q, vge, &field, &wt) || field != 1 || wt != 2) goto unusual;
        if (!rd_varint(&q, vge, &v) || v > (uint64_t)(vge - q)) goto unusual;
        q += v;
    }
    PyObject *entries = PyTuple_New(n), *changed = PyList_New(0);
    if (!entries || !changed) { Py_XDECREF(entries); Py_XDECREF(changed); out = NULL; goto done; }
    const unsigned char *q = vg;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t v = 0;
        int field, wt;
        rd_tag(&q, vge, &field, &wt); /* checked above */
        rd_varint(&q, vge, &v);
        PyObject *old = i < np ? PyTuple_GET_ITEM(prev, i) : NULL, *e;
        if (old && PyBytes_Check(old) && PyBytes_GET_SIZE(old) == (Py_ssize_t)v && memcmp(PyBytes_AS_STRING(old), q, (size_t)v) == 0) {
            e = Py_NewRef(old);
        } else {
            e = PyBytes_FromStringAndSize((const char *)q, (Py_ssize_t)v);
            PyObject *idx = e ? PyLong_FromSsize_t(i) : NULL;
            if (!idx || PyList_Append(changed, idx) < 0) {
                Py_XDECREF(idx); Py_XDECREF(e); Py_DECREF(entries); Py_DECREF(changed); out = NULL; goto done;
            }
            Py_DECREF(idx);
        }
        PyTuple_SET_ITEM(entries, i, e);
        q += v;
    }
    PyObject *shard = utf8_or_null(sh, sh_n); /* valid: checked above */
    if (!shard) { Py_DECREF(entries); Py_DECREF(changed); goto unusual; }
    out = Py_BuildValue("(NNN)", shard, entries, changed);
    goto done;
unusual:
    out = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return out;
}

int rowenc_program_images(PyObject *program, PyObject *rowchange, RowImages *out) {
    return program_images((Program *)program, (const unsigned char *)PyBytes_AS_STRING(rowchange),
                          PyBytes_GET_SIZE(rowchange), out);
}

int rowenc_is_program(PyObject *obj) { return PyObject_TypeCheck(obj, &ProgramType); }

/* put_double_text alone (tests prove it against jsonfmt.java_double and count how much of their
 * input it decides): Java's text, or None where it leaves the text to strtod and repr. */
static PyObject *rowenc_double_text(PyObject *self, PyObject *arg) {
    (void)self;
    char *s;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(arg, &s, &n) < 0) return NULL;
    if (!plain_float(s, n)) Py_RETURN_NONE;
    Buf b;
    buf_init(&b);
    int r = put_double_text(&b, s, n);
    PyObject *out = r < 0 ? NULL : r == 0 ? Py_NewRef(Py_None) : PyUnicode_FromStringAndSize(b.p, b.len);
    buf_free(&b);
    return out;
}

static PyMethodDef module_methods[] = {
    {"scan", (PyCFunction)rowenc_scan, METH_O,
     "scan(VStreamResponse bytes) -> [(type, start, end[, table, shard, is_internal, [RowChange bytes]])] or None"},
    {"vgtid_entries", (PyCFunction)(void (*)(void))rowenc_vgtid_entries, METH_FASTCALL,
     "vgtid_entries(data, start, end, previous) -> (shard, entries, changed) or None"},
    {"tx_begin", (PyCFunction)(void (*)(void))txmeta_begin, METH_FASTCALL,
     "tx_begin(shape, id_json, ts_ms, previous, current, shard, epochs) -> (epoch, rank, key, begin, head, tail) or None"},
    {"double_text", (PyCFunction)rowenc_double_text, METH_O,
     "double_text(DOUBLE text bytes) -> Java's Double.toString text, or None (left to strtod and repr)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef rowenc_module = {
    PyModuleDef_HEAD_INIT, "cdcworker._rowenc", "Native row encoder (see rowenc.c).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__rowenc(void) {
    if (PyType_Ready(&ProgramType) < 0) return NULL;
    PyObject *m = PyModule_Create(&rowenc_module);
    if (!m) return NULL;
    Py_INCREF(&ProgramType);
    if (PyModule_AddObject(m, "Program", (PyObject *)&ProgramType) < 0) {
        Py_DECREF(&ProgramType);
        Py_DECREF(m);
        return NULL;
    }
    if (kafkaprod_add_types(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#define OPC(n) PyModule_AddIntConstant(m, #n, n)
    if (OPC(OP_DROP) || OPC(OP_PY) || OPC(OP_INT) || OPC(OP_TEXT) || OPC(OP_F32) || OPC(OP_F64) || OPC(OP_B64) ||
        OPC(OP_B64URL) || OPC(OP_HEX) || OPC(OP_BOOL) || OPC(OP_DEC_B64) || OPC(OP_ENUM) || OPC(OP_SET) ||
        OPC(OP_DATE) || OPC(OP_DATETIME) || OPC(OP_TIME_MICRO) || OPC(OP_TIME_CONNECT) || OPC(OP_CONST) ||
        OPC(OP_TEXT_TRUNC)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
