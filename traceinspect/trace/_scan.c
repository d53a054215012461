/* Columnar scanner for the events array of a Kineto trace: one pass over the JSON bytes, no Python
 * object per event.
 *
 * scan(buffer) takes a JSON array of event objects (bytes, bytearray or memoryview) and returns
 * (n_events, end_offset, columns, strings, raws, deferred), where `columns` maps a column name to
 * a fixed-width array exported through the buffer protocol (numpy.frombuffer reads it without a
 * copy), `strings` lists the distinct raw string spans (still JSON-escaped) that the string-id
 * columns index, and `raws` the distinct raw JSON values of args["Input Dims"] / args["Input type"]
 * that dims_idx / type_idx index (-1: absent).
 *
 * It reads exactly the fields that traceinspect.trace.load.Event / Args declare (Args: trace/fields.py;
 * tests/test_fields.py checks the enum, COL_NAMES and parse_args key table below against it), with the same
 * type rules as the typed msgspec decoder: a repeated key keeps its last value, every string (read or
 * skipped) has its escapes checked as msgspec checks them (the escape letters, four hex digits, UTF-16
 * surrogates in pairs), integers cover the whole int64 range, and `present` (a uint32 bit per int64
 * column) says which optional ints were given, so no value doubles as "absent". An event it is not sure about (an escaped key, a field
 * of an unexpected type, a number that does not fit) gets a placeholder row and is listed in
 * `deferred` as (row, raw bytes) for the caller to decode with the exact Python path; malformed
 * JSON or a truncated buffer makes it return None, and the caller decodes the whole buffer in
 * Python, which reports the problem. It never guesses, so both paths give identical tables
 * (tests/test_native_scan.py holds them to that).
 * The byte loop runs without the GIL and touches no Python object.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define NONE_I64 INT64_MIN   /* the value an absent int holds; absence itself is a bit in `present` */
/* The documented nesting limit of a trace (load.MAX_NESTING, docs/tables.md): containers nested
 * deeper than this anywhere in the document make it unreadable. The scanner never decides that
 * itself: it defers (returns None) as soon as a value it skips could reach that depth, and the Python
 * path, which measures the depth exactly, reports it. A skipped container at skip depth 1 sits at
 * document depth 5 at most (document object, events array, event, args, value), hence the margin. */
#define MAX_NESTING 128
#define MAX_SKIP_DEPTH (MAX_NESTING - 4)

typedef struct {
    char *p;
    size_t n, cap, item;
} vec;

static int vgrow(vec *v) {
    size_t cap = v->cap ? v->cap * 2 : 4096;
    char *q = (char *)realloc(v->p, cap * v->item);
    if (!q) return -1;
    v->p = q;
    v->cap = cap;
    return 0;
}

#define VPUSH(v, T, x) do { if ((v)->n == (v)->cap && vgrow(v)) return -2; ((T *)(v)->p)[(v)->n++] = (x); } while (0)

/* ---- string interning: raw spans of the buffer -> dense ids ---- */
typedef struct {
    int64_t off;
    int32_t len;
    int32_t id;   /* -1: empty slot */
    uint64_t hash;
} slot;

typedef struct {
    slot *slots;
    size_t cap, count;
    vec spans;    /* int64 pairs (offset, length), in id order */
} interner;

static uint64_t hash_bytes(const unsigned char *s, size_t n) {
    /* eight bytes a step, multiply-xorshift mixing (the table index uses the low bits) */
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 29;
    return h;
}

static int intern_init(interner *t) {
    t->cap = 1024;
    t->count = 0;
    t->slots = (slot *)malloc(t->cap * sizeof(slot));
    if (!t->slots) return -1;
    for (size_t i = 0; i < t->cap; i++) t->slots[i].id = -1;
    t->spans.p = NULL;
    t->spans.n = t->spans.cap = 0;
    t->spans.item = sizeof(int64_t);
    return 0;
}

static void intern_free(interner *t) {
    free(t->slots);
    free(t->spans.p);
}

static int intern_rehash(interner *t) {
    size_t cap = t->cap * 2;
    slot *s = (slot *)malloc(cap * sizeof(slot));
    if (!s) return -1;
    for (size_t i = 0; i < cap; i++) s[i].id = -1;
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slots[i].id < 0) continue;
        size_t j = t->slots[i].hash & (cap - 1);
        while (s[j].id >= 0) j = (j + 1) & (cap - 1);
        s[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = s;
    t->cap = cap;
    return 0;
}

/* id of the span [off, off+len) of base; -2 on allocation failure */
static int32_t intern(interner *t, const unsigned char *base, int64_t off, int32_t len) {
    const unsigned char *s = base + off;
    uint64_t h = hash_bytes(s, (size_t)len);
    size_t j = h & (t->cap - 1);
    while (t->slots[j].id >= 0) {
        slot *sl = &t->slots[j];
        if (sl->hash == h && sl->len == len && memcmp(base + sl->off, s, (size_t)len) == 0) return sl->id;
        j = (j + 1) & (t->cap - 1);
    }
    if (t->count >= INT32_MAX - 1) return -2;
    int32_t id = (int32_t)t->count;
    t->slots[j].off = off;
    t->slots[j].len = len;
    t->slots[j].id = id;
    t->slots[j].hash = h;
    t->count++;
    vec *v = &t->spans;
    if (v->n + 2 > v->cap && vgrow(v)) return -2;
    ((int64_t *)v->p)[v->n++] = off;
    ((int64_t *)v->p)[v->n++] = len;
    if (t->count * 2 > t->cap && intern_rehash(t)) return -2;
    return id;
}

/* ---- columns ---- */
enum {
    C_PH, C_HAS_ARGS,                                            /* uint8 */
    C_CAT, C_NAME, C_PID_S, C_TID_S, C_ID_S,                     /* int32 string ids, -1 none */
    C_COLL, C_DTYPE, C_ANAME,
    C_PID, C_TID, C_ID,                                          /* int64 */
    C_CORR, C_EXT, C_EXT_OLD, C_DEVICE, C_STREAM, C_CBID, C_CID,
    C_IN_NEL, C_OUT_NEL, C_GROUP, C_DEVTYPE, C_DEVID, C_WAIT_STREAM, C_WAIT_REC, C_GRID, C_BLOCK,
    C_DIMS_OFF, C_DIMS_LEN, C_TYPE_OFF, C_TYPE_LEN,
    C_TS, C_DUR, C_NBYTES, C_MEMB, C_TALLOC, C_TRES, C_FLOPS,    /* float64, NaN none */
    N_COLS
};

static const char *COL_NAMES[N_COLS] = {
    "ph", "has_args",
    "cat_idx", "name_idx", "pid_str", "tid_str", "id_str",
    "collective_idx", "dtype_idx", "arg_name_idx",
    "pid", "tid", "id",
    "correlation", "external_id", "external_id_old", "device", "stream", "cbid", "cid",
    "in_msg_nelems", "out_msg_nelems", "group_size", "device_type", "device_id", "wait_on_stream",
    "wait_on_record", "grid", "block",
    "dims_off", "dims_len", "type_off", "type_len",
    "ts", "dur", "nbytes", "mem_bytes", "total_allocated", "total_reserved", "flops",
};

static size_t col_item(int c) {
    if (c <= C_HAS_ARGS) return 1;
    if (c <= C_ANAME) return 4;
    return 8;
}

/* one event's values before they are pushed */
typedef struct {
    uint8_t ph, has_args;
    int32_t s[8];     /* C_CAT .. C_ANAME */
    int64_t i[23];    /* C_PID .. C_TYPE_LEN */
    double f[7];      /* C_TS .. C_FLOPS */
    int64_t old_off, old_len;  /* args["Input dims"], the old spelling */
    uint32_t present;          /* bit I(c): int64 column c was given a value (not absent, not null) */
    int seen_args;
} row;

#define S(c) ((c) - C_CAT)
#define I(c) ((c) - C_PID)
#define F(c) ((c) - C_TS)
/* the row buffers cover their enum ranges exactly (a column added to the enum must grow them) */
_Static_assert(sizeof(((row *)0)->s) / sizeof(int32_t) == C_ANAME - C_CAT + 1, "row.s: C_CAT .. C_ANAME");
_Static_assert(sizeof(((row *)0)->i) / sizeof(int64_t) == C_TYPE_LEN - C_PID + 1, "row.i: C_PID .. C_TYPE_LEN");
_Static_assert(sizeof(((row *)0)->f) / sizeof(double) == N_COLS - C_TS, "row.f: C_TS .. the last column");

/* numbers that need a correctly rounded slow conversion after the GIL is back */
typedef struct {
    int64_t off;
    int32_t len;
    int32_t col;
    int64_t row;
} slow_num;

typedef struct {
    const unsigned char *base, *p, *end;
    interner strs;
    interner raws;     /* distinct raw values of Input Dims / Input type */
    vec dims_ids, type_ids;  /* int32 per event, -1 none */
    vec present;             /* uint32 per event: row.present */
    vec cols[N_COLS];
    vec slow;
    vec deferred;  /* int64 triples (row, offset, length) */
    int64_t n;
    int depth;
} scanner;

/* ---- lexing ---- */
static inline void ws(scanner *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t')) s->p++;
}

/* first byte at or after q that ends a plain run inside a string: '"', '\\' or a control character */
static inline const unsigned char *string_special(const unsigned char *q, const unsigned char *end) {
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\'), ctl = _mm_set1_epi8(0x1F);
    while (end - q >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)q);
        __m128i m = _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bs));
        m = _mm_or_si128(m, _mm_cmpeq_epi8(_mm_min_epu8(v, ctl), v));
        int mask = _mm_movemask_epi8(m);
        if (mask) return q + __builtin_ctz((unsigned)mask);
        q += 16;
    }
#endif
    while (q < end && *q != '"' && *q != '\\' && *q >= 0x20) q++;
    return q;
}

static int hex4(const unsigned char *q, const unsigned char *end, unsigned *cp) {
    if (end - q < 4) return -1;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned char c = q[k];
        unsigned d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return -1;
        v = v * 16 + d;
    }
    *cp = v;
    return 0;
}

/* the escape at q (on the backslash): its length, or -1 where msgspec rejects it (an unknown escape
 * letter, fewer than four hex digits, a UTF-16 surrogate that is not part of a high-low pair) */
static int escape_len(const unsigned char *q, const unsigned char *end) {
    if (end - q < 2) return -1;
    switch (q[1]) {
    case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
        return 2;
    case 'u': {
        unsigned cp, lo;
        if (hex4(q + 2, end, &cp)) return -1;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return -1;          /* a low surrogate first */
        if (cp < 0xD800 || cp > 0xDBFF) return 6;
        if (end - q < 12 || q[6] != '\\' || q[7] != 'u' || hex4(q + 8, end, &lo) || lo < 0xDC00 || lo > 0xDFFF)
            return -1;                                         /* a high surrogate without its low half */
        return 12;
    }
    default:
        return -1;
    }
}

/* a string at s->p (on the opening quote); sets the span of its raw contents; *esc if it holds a
 * backslash. Rejects raw control characters and invalid escapes, as msgspec does (also in strings it
 * skips). UTF-8 is checked where the string is decoded (tables._strings), as msgspec checks it only in
 * the strings it decodes. */
static int lex_string(scanner *s, int64_t *off, int32_t *len, int *esc) {
    const unsigned char *q = s->p + 1;
    int e = 0;
    for (;;) {
        q = string_special(q, s->end);
        if (q >= s->end) break;
        unsigned char c = *q;
        if (c == '"') {
            int64_t n = q - (s->p + 1);
            if (n > INT32_MAX) return -1;
            *off = (s->p + 1) - s->base;
            *len = (int32_t)n;
            if (esc) *esc = e;
            s->p = q + 1;
            return 0;
        }
        if (c == '\\') {
            int n = escape_len(q, s->end);
            if (n < 0) return -1;
            e = 1;
            q += n;
            continue;
        }
        return -1;  /* a raw control character */
    }
    return -1;
}

/* ---- the shape shared by arrays and objects ---- */

/* s->p on `open`: consumes it and the whitespace after. 0: the container is empty (its closing
 * bracket consumed too); 1: an element follows; -1: `open` is not there */
static int open_container(scanner *s, unsigned char open, unsigned char close) {
    if (s->p >= s->end || *s->p != open) return -1;
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return 0;
    }
    return 1;
}

/* after an element: 1 when a ',' (consumed) announces another, 0 at `close` (consumed), else -1 */
static int next_element(scanner *s, unsigned char close) {
    ws(s);
    if (s->p >= s->end) return -1;
    if (*s->p == ',') {
        s->p++;
        ws(s);
        return 1;
    }
    if (*s->p == close) {
        s->p++;
        return 0;
    }
    return -1;
}

/* an object member's key (its raw span at *k, *kl; *esc when it holds an escape) and the ':' after
 * it; s->p is left on the value */
static int member_key(scanner *s, const unsigned char **k, int32_t *kl, int *esc) {
    int64_t ko;
    if (s->p >= s->end || *s->p != '"' || lex_string(s, &ko, kl, esc)) return -1;
    *k = s->base + ko;
    ws(s);
    if (s->p >= s->end || *s->p != ':') return -1;
    s->p++;
    ws(s);
    return s->p < s->end ? 0 : -1;
}

static int skip_value(scanner *s);

static int skip_container(scanner *s, unsigned char open, unsigned char close) {
    if (++s->depth > MAX_SKIP_DEPTH) return -1;
    int more = open_container(s, open, close);
    while (more == 1) {
        const unsigned char *k; int32_t kl; int esc;
        if (close == '}' && member_key(s, &k, &kl, &esc)) return -1;
        if (skip_value(s)) return -1;
        more = next_element(s, close);
    }
    if (more < 0) return -1;
    s->depth--;
    return 0;
}

/* number syntax per RFC 8259; *is_int when it has no fraction or exponent */
static int lex_number(scanner *s, int *is_int) {
    const unsigned char *q = s->p;
    if (q < s->end && *q == '-') q++;
    if (q >= s->end) return -1;
    if (*q == '0') q++;
    else if (*q >= '1' && *q <= '9') { while (q < s->end && *q >= '0' && *q <= '9') q++; }
    else return -1;
    int integral = 1;
    if (q < s->end && *q == '.') {
        integral = 0;
        q++;
        if (q >= s->end || *q < '0' || *q > '9') return -1;
        while (q < s->end && *q >= '0' && *q <= '9') q++;
    }
    if (q < s->end && (*q == 'e' || *q == 'E')) {
        integral = 0;
        q++;
        if (q < s->end && (*q == '+' || *q == '-')) q++;
        if (q >= s->end || *q < '0' || *q > '9') return -1;
        while (q < s->end && *q >= '0' && *q <= '9') q++;
    }
    if (q >= s->end) return -1;  /* a value is always followed by , ] or } in an array of events */
    *is_int = integral;
    s->p = q;
    return 0;
}

static int skip_literal(scanner *s, const char *lit, size_t n) {
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, lit, n) != 0) return -1;
    s->p += n;
    return 0;
}

static int skip_value(scanner *s) {
    if (s->p >= s->end) return -1;
    int64_t o; int32_t l; int isi;
    switch (*s->p) {
    case '"': return lex_string(s, &o, &l, NULL);
    case '{': return skip_container(s, '{', '}');
    case '[': return skip_container(s, '[', ']');
    case 't': return skip_literal(s, "true", 4);
    case 'f': return skip_literal(s, "false", 5);
    case 'n': return skip_literal(s, "null", 4);
    default: return lex_number(s, &isi);
    }
}

static int is_null(scanner *s) {
    if (s->end - s->p >= 4 && memcmp(s->p, "null", 4) == 0) {
        s->p += 4;
        return 1;
    }
    return 0;
}

/* a JSON integer that fits int64 (the whole range, INT64_MIN included: absence is a bit) */
static int parse_int(scanner *s, int64_t *out) {
    const unsigned char *start = s->p;
    int isi;
    if (lex_number(s, &isi) || !isi) return -1;
    const unsigned char *q = start;
    int neg = 0;
    if (*q == '-') { neg = 1; q++; }
    uint64_t v = 0;
    for (; q < s->p; q++) {
        unsigned d = *q - '0';
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1) return -1;
        *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
    } else {
        if (v > (uint64_t)INT64_MAX) return -1;
        *out = (int64_t)v;
    }
    return 0;
}

static const double POW10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A key given twice keeps its last value (as msgspec does): a slow number queued for the same column
 * and row by an earlier occurrence is only checked (msgspec validates every occurrence: 1e400 is out
 * of range even where a later value replaces it), never stored, or the conversion after the scan would
 * overwrite the later value. The current event's queued numbers are the last entries of s->slow. */
static void forget_slow(scanner *s, int col, int64_t rowi) {
    slow_num *q = (slow_num *)s->slow.p;
    for (size_t k = s->slow.n; k > 0 && q[k - 1].row == rowi; k--)
        if (q[k - 1].col == col) q[k - 1].col = -1;
}

/* any JSON number as a double, correctly rounded: the exact fast path when the decimal mantissa
 * and exponent allow it (Clinger), else queued for PyOS_string_to_double once the GIL is back */
static int parse_float(scanner *s, double *out, int col, int64_t rowi) {
    const unsigned char *start = s->p;
    int isi;
    if (lex_number(s, &isi)) return -1;
    forget_slow(s, col, rowi);
    const unsigned char *q = start, *e = s->p;
    int neg = 0;
    if (*q == '-') { neg = 1; q++; }
    uint64_t m = 0;
    /* exp10 is bounded: a token of billions of fraction digits must not overflow it (UBSan) */
    int digits = 0, ok = 1;
    int64_t exp10 = 0;
    for (; q < e && *q >= '0' && *q <= '9'; q++) {
        if (m || *q != '0') digits++;
        if (digits > 19) { ok = 0; break; }
        m = m * 10 + (uint64_t)(*q - '0');
    }
    if (ok && q < e && *q == '.') {
        q++;
        for (; q < e && *q >= '0' && *q <= '9'; q++) {
            if (m || *q != '0') digits++;
            if (digits > 19) { ok = 0; break; }
            m = m * 10 + (uint64_t)(*q - '0');
            if (--exp10 < -100000) { ok = 0; break; }
        }
    }
    if (ok && q < e && (*q == 'e' || *q == 'E')) {
        q++;
        int eneg = 0, ev = 0;
        if (*q == '+' || *q == '-') { eneg = *q == '-'; q++; }
        for (; q < e; q++) {
            if (ev > 100000) { ok = 0; break; }
            ev = ev * 10 + (*q - '0');
        }
        exp10 += eneg ? -ev : ev;
    }
    if (ok && m <= (1ULL << 53) && exp10 >= -22 && exp10 <= 22) {
        double d = (double)m;
        d = exp10 < 0 ? d / POW10[-exp10] : d * POW10[exp10];
        *out = neg ? -d : d;
        return 0;
    }
    if (e - start > 400) return -1;
    slow_num sn = {start - s->base, (int32_t)(e - start), col, rowi};
    VPUSH(&s->slow, slow_num, sn);
    *out = 0.0;
    return 0;
}

/* product of a list of integers (grid / block dims); anything else is "not sure" */
static int parse_dims_product(scanner *s, int64_t *out) {
    int more = open_container(s, '[', ']');
    if (more != 1) return -1;  /* not a list, or empty: leave it to the Python path */
    int64_t prod = 1;
    while (more == 1) {
        int64_t v;
        if (parse_int(s, &v)) return -1;
        if (v < 0 || (v && prod > INT64_MAX / v)) return -1;
        prod *= v;
        more = next_element(s, ']');
    }
    if (more < 0) return -1;
    *out = prod;
    return 0;
}

/* k[0:n] == lit, with the literal's length known at compile time */
#define key_is(k, n, lit) ((size_t)(n) == sizeof(lit) - 1 && memcmp((k), (lit), sizeof(lit) - 1) == 0)

/* an optional string field: string -> interned id, null -> -1 */
static int opt_string(scanner *s, int32_t *out) {
    if (is_null(s)) { *out = -1; return 0; }
    if (s->p >= s->end || *s->p != '"') return -1;
    int64_t o; int32_t l;
    if (lex_string(s, &o, &l, NULL)) return -1;
    int32_t id = intern(&s->strs, s->base, o, l);
    if (id < 0) return -2;
    *out = id;
    return 0;
}

/* an optional int field of column c: its value and presence bit (null clears both: last wins) */
static int opt_int(scanner *s, row *r, int c) {
    uint32_t bit = 1u << I(c);
    if (is_null(s)) {
        r->i[I(c)] = NONE_I64;
        r->present &= ~bit;
        return 0;
    }
    if (parse_int(s, &r->i[I(c)])) return -1;
    r->present |= bit;
    return 0;
}

static int opt_float(scanner *s, double *out, int col, int64_t rowi) {
    if (is_null(s)) { forget_slow(s, col, rowi); *out = NAN; return 0; }
    return parse_float(s, out, col, rowi);
}

static int raw_span(scanner *s, int64_t *off, int64_t *len) {
    const unsigned char *st = s->p;
    if (skip_value(s)) return -1;
    *off = st - s->base;
    *len = s->p - st;
    return 0;
}

static int parse_args(scanner *s, row *r) {
    if (is_null(s)) return 0;
    int more = open_container(s, '{', '}');
    if (more < 0) return -1;
    r->has_args = 1;
    while (more == 1) {
        const unsigned char *k; int32_t kl; int esc;
        if (member_key(s, &k, &kl, &esc) || esc) return -1;
        int rc = 0;
        if (key_is(k, kl, "correlation")) rc = opt_int(s, r, C_CORR);
        else if (key_is(k, kl, "External id")) rc = opt_int(s, r, C_EXT);
        else if (key_is(k, kl, "external id")) rc = opt_int(s, r, C_EXT_OLD);
        else if (key_is(k, kl, "device")) rc = opt_int(s, r, C_DEVICE);
        else if (key_is(k, kl, "stream")) rc = opt_int(s, r, C_STREAM);
        else if (key_is(k, kl, "cbid")) rc = opt_int(s, r, C_CBID);
        else if (key_is(k, kl, "cid")) rc = opt_int(s, r, C_CID);
        else if (key_is(k, kl, "bytes")) rc = opt_float(s, &r->f[F(C_NBYTES)], C_NBYTES, s->n);
        else if (key_is(k, kl, "grid")) {
            if (is_null(s)) r->i[I(C_GRID)] = 0;
            else rc = parse_dims_product(s, &r->i[I(C_GRID)]);
        } else if (key_is(k, kl, "block")) {
            if (is_null(s)) r->i[I(C_BLOCK)] = 0;
            else rc = parse_dims_product(s, &r->i[I(C_BLOCK)]);
        }
        else if (key_is(k, kl, "Collective name")) rc = opt_string(s, &r->s[S(C_COLL)]);
        else if (key_is(k, kl, "In msg nelems")) rc = opt_int(s, r, C_IN_NEL);
        else if (key_is(k, kl, "Out msg nelems")) rc = opt_int(s, r, C_OUT_NEL);
        else if (key_is(k, kl, "Group size")) rc = opt_int(s, r, C_GROUP);
        else if (key_is(k, kl, "dtype")) rc = opt_string(s, &r->s[S(C_DTYPE)]);
        else if (key_is(k, kl, "Input Dims")) rc = raw_span(s, &r->i[I(C_DIMS_OFF)], &r->i[I(C_DIMS_LEN)]);
        else if (key_is(k, kl, "Input dims")) rc = raw_span(s, &r->old_off, &r->old_len);
        else if (key_is(k, kl, "Input type")) rc = raw_span(s, &r->i[I(C_TYPE_OFF)], &r->i[I(C_TYPE_LEN)]);
        else if (key_is(k, kl, "name")) rc = opt_string(s, &r->s[S(C_ANAME)]);
        else if (key_is(k, kl, "Bytes")) rc = opt_float(s, &r->f[F(C_MEMB)], C_MEMB, s->n);
        else if (key_is(k, kl, "Total Allocated")) rc = opt_float(s, &r->f[F(C_TALLOC)], C_TALLOC, s->n);
        else if (key_is(k, kl, "Total Reserved")) rc = opt_float(s, &r->f[F(C_TRES)], C_TRES, s->n);
        else if (key_is(k, kl, "Device Type")) rc = opt_int(s, r, C_DEVTYPE);
        else if (key_is(k, kl, "Device Id")) rc = opt_int(s, r, C_DEVID);
        else if (key_is(k, kl, "wait_on_stream")) rc = opt_int(s, r, C_WAIT_STREAM);
        else if (key_is(k, kl, "wait_on_cuda_event_record_corr_id")) rc = opt_int(s, r, C_WAIT_REC);
        else if (key_is(k, kl, "flops")) rc = opt_float(s, &r->f[F(C_FLOPS)], C_FLOPS, s->n);
        else rc = skip_value(s);
        if (rc) return rc;
        more = next_element(s, '}');
    }
    return more;
}

/* pid / tid / id (column c, string ids in string column sc): an int, or a string (interned; the
 * caller maps it like _tid); null only where nullable (id). Sets c's presence bit. */
static int int_or_str(scanner *s, row *r, int c, int sc, int nullable) {
    int64_t *iv = &r->i[I(c)];
    int32_t *sv = &r->s[S(sc)];
    uint32_t bit = 1u << I(c);
    if (nullable && is_null(s)) { *iv = NONE_I64; *sv = -1; r->present &= ~bit; return 0; }
    r->present |= bit;
    if (s->p < s->end && *s->p == '"') {
        *iv = 0;
        return opt_string(s, sv);
    }
    *sv = -1;
    return parse_int(s, iv);
}

static void init_row_slow(row *rp) {
    row r;
    r.ph = 0;
    r.has_args = 0;
    for (int c = 0; c < 8; c++) r.s[c] = -1;
    for (int c = 0; c < 20; c++) r.i[c] = NONE_I64;
    r.i[I(C_PID)] = 0;
    r.i[I(C_TID)] = 0;
    r.i[I(C_GRID)] = 0;
    r.i[I(C_BLOCK)] = 0;
    r.i[I(C_DIMS_OFF)] = r.i[I(C_DIMS_LEN)] = r.i[I(C_TYPE_OFF)] = r.i[I(C_TYPE_LEN)] = -1;
    for (size_t c = 0; c < sizeof r.f / sizeof r.f[0]; c++) r.f[c] = NAN;
    r.f[F(C_TS)] = 0.0;
    r.old_off = r.old_len = -1;
    r.present = (1u << I(C_PID)) | (1u << I(C_TID));   /* default 0, never absent */
    r.seen_args = 0;
    *rp = r;
}

static row ROW_TEMPLATE;

static inline void init_row(row *rp) {
    *rp = ROW_TEMPLATE;
}

static int push_row(scanner *s, const row *rp) {
    VPUSH(&s->cols[C_PH], uint8_t, rp->ph);
    VPUSH(&s->cols[C_HAS_ARGS], uint8_t, rp->has_args);
    for (int c = C_CAT; c <= C_ANAME; c++) VPUSH(&s->cols[c], int32_t, rp->s[S(c)]);
    for (int c = C_PID; c <= C_BLOCK; c++) VPUSH(&s->cols[c], int64_t, rp->i[I(c)]);
    for (int c = C_TS; c <= C_FLOPS; c++) VPUSH(&s->cols[c], double, rp->f[F(c)]);
    /* shapes repeat every step: one id per distinct raw value instead of one bytes object per event */
    int32_t d = -1, t = -1;
    if (rp->i[I(C_DIMS_LEN)] >= 0) {
        if (rp->i[I(C_DIMS_LEN)] > INT32_MAX) return -1;
        d = intern(&s->raws, s->base, rp->i[I(C_DIMS_OFF)], (int32_t)rp->i[I(C_DIMS_LEN)]);
        if (d < 0) return -2;
    }
    if (rp->i[I(C_TYPE_LEN)] >= 0) {
        if (rp->i[I(C_TYPE_LEN)] > INT32_MAX) return -1;
        t = intern(&s->raws, s->base, rp->i[I(C_TYPE_OFF)], (int32_t)rp->i[I(C_TYPE_LEN)]);
        if (t < 0) return -2;
    }
    VPUSH(&s->dims_ids, int32_t, d);
    VPUSH(&s->type_ids, int32_t, t);
    VPUSH(&s->present, uint32_t, rp->present);
    s->n++;
    return 0;
}

static int parse_event(scanner *s) {
    row r;
    init_row(&r);
    int more = open_container(s, '{', '}');
    while (more == 1) {
        const unsigned char *k; int32_t kl; int esc;
        if (member_key(s, &k, &kl, &esc) || esc) return -1;
        int rc = 0;
        if (key_is(k, kl, "ph")) {
            int64_t o; int32_t l; int e;
            if (*s->p != '"' || lex_string(s, &o, &l, &e) || e) return -1;
            /* a non-ASCII phase is rare and its UTF-8 must be checked: the Python path decides */
            for (int32_t k = 0; k < l; k++) if (s->base[o + k] >= 0x80) return -1;
            r.ph = l == 1 ? s->base[o] : (l == 0 ? 0 : 1);
        } else if (key_is(k, kl, "cat") || key_is(k, kl, "name")) {
            int32_t *dst = kl == 3 ? &r.s[S(C_CAT)] : &r.s[S(C_NAME)];
            if (*s->p != '"') return -1;
            rc = opt_string(s, dst);
        } else if (key_is(k, kl, "pid")) rc = int_or_str(s, &r, C_PID, C_PID_S, 0);
        else if (key_is(k, kl, "tid")) rc = int_or_str(s, &r, C_TID, C_TID_S, 0);
        else if (key_is(k, kl, "id")) rc = int_or_str(s, &r, C_ID, C_ID_S, 1);
        else if (key_is(k, kl, "ts")) {
            if (is_null(s)) return -1;
            rc = parse_float(s, &r.f[F(C_TS)], C_TS, s->n);
        } else if (key_is(k, kl, "dur")) rc = opt_float(s, &r.f[F(C_DUR)], C_DUR, s->n);
        else if (key_is(k, kl, "args")) {
            if (r.seen_args++) return -1;  /* a repeated "args": leave it to the Python path */
            rc = parse_args(s, &r);
        } else rc = skip_value(s);
        if (rc) return rc;
        more = next_element(s, '}');
    }
    if (more < 0) return -1;
    /* Input Dims wins; the old spelling counts only where it is absent (Args in load.py) */
    if (r.i[I(C_DIMS_LEN)] < 0 && r.old_len >= 0) {
        r.i[I(C_DIMS_OFF)] = r.old_off;
        r.i[I(C_DIMS_LEN)] = r.old_len;
    }
    return push_row(s, &r);
}

/* An event the scanner is not sure about (a field of an unexpected type, an escaped key, ...):
 * a placeholder row, and its span for the caller's exact Python decode. Malformed JSON is not
 * deferred: the whole buffer goes back to the Python path, which reports it. */
static int defer_event(scanner *s, const unsigned char *start, size_t slow_mark) {
    s->p = start;
    s->depth = 0;
    s->slow.n = slow_mark;   /* numbers queued by the abandoned parse */
    if (skip_value(s)) return -1;
    row r;
    init_row(&r);
    int64_t span[3] = {s->n, start - s->base, s->p - start};
    for (int k = 0; k < 3; k++) VPUSH(&s->deferred, int64_t, span[k]);
    return push_row(s, &r);
}

/* the array at s->p: '[' event (',' event)* ']' */
static int scan_array(scanner *s) {
    ws(s);
    int more = open_container(s, '[', ']');
    while (more == 1) {
        const unsigned char *start = s->p;
        size_t slow_mark = s->slow.n;
        int rc = parse_event(s);
        if (rc == -1) rc = defer_event(s, start, slow_mark);
        if (rc) return rc;
        more = next_element(s, ']');
    }
    return more < 0 ? -1 : 0;
}

/* ---- a column handed to Python without a copy: owns the malloc'd array, exports it as bytes ---- */
typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t len;
} Column;

static void column_dealloc(Column *c) {
    free(c->data);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static int column_getbuffer(Column *c, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)c, c->data ? c->data : (char *)"", c->len, 1, flags);
}

static PyBufferProcs COLUMN_BUFFER = {(getbufferproc)column_getbuffer, NULL};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceinspect.trace._scan.Column",
    .tp_basicsize = sizeof(Column),
    .tp_dealloc = (destructor)column_dealloc,
    .tp_as_buffer = &COLUMN_BUFFER,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A read-only column of the scan (buffer protocol); numpy.frombuffer reads it in place.",
};

/* takes the vector's memory */
static PyObject *column_from(vec *v) {
    Column *c = PyObject_New(Column, &ColumnType);
    if (!c) return NULL;
    c->data = v->p;
    c->len = (Py_ssize_t)(v->n * v->item);
    v->p = NULL;
    v->n = v->cap = 0;
    return (PyObject *)c;
}

/* the interned spans as a list of bytes, in id order */
static PyObject *span_list(const unsigned char *base, interner *t) {
    PyObject *out = PyList_New((Py_ssize_t)t->count);
    if (!out) return NULL;
    const int64_t *sp = (const int64_t *)t->spans.p;
    for (size_t k = 0; k < t->count; k++) {
        PyObject *b = PyBytes_FromStringAndSize((const char *)base + sp[2 * k], (Py_ssize_t)sp[2 * k + 1]);
        if (!b) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, (Py_ssize_t)k, b);
    }
    return out;
}

static PyObject *scan(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    scanner s;
    memset(&s, 0, sizeof s);
    s.base = (const unsigned char *)view.buf;
    s.p = s.base;
    s.end = s.base + view.len;
    PyObject *result = NULL;
    int rc = 0;
    if (intern_init(&s.strs) || intern_init(&s.raws)) {
        intern_free(&s.strs);
        intern_free(&s.raws);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    /* room for one event per 128 bytes up front: no copying regrowth on real traces (events are
     * hundreds of bytes), and pages that stay unused are never touched */
    size_t guess = (size_t)view.len / 128 + 64;
    s.dims_ids.item = s.type_ids.item = sizeof(int32_t);
    s.present.item = sizeof(uint32_t);
    for (int c = 0; c < N_COLS; c++) {
        s.cols[c].item = col_item(c);
        if (c >= C_DIMS_OFF && c <= C_TYPE_LEN) continue;  /* never pushed: see push_row */
        s.cols[c].p = (char *)malloc(guess * s.cols[c].item);
        s.cols[c].cap = guess;
        if (!s.cols[c].p) {  /* no room for the guess: start small and grow */
            s.cols[c].p = (char *)malloc(4096 * s.cols[c].item);
            s.cols[c].cap = 4096;
        }
        if (!s.cols[c].p) { rc = -2; break; }
    }
    s.slow.item = sizeof(slow_num);
    s.deferred.item = sizeof(int64_t);

    if (rc == 0) {
        Py_BEGIN_ALLOW_THREADS
        rc = scan_array(&s);
        Py_END_ALLOW_THREADS
    }

    if (rc == -2) {
        PyErr_NoMemory();
        goto done;
    }
    if (rc) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    /* correctly rounded conversion of the numbers the fast path left */
    for (size_t k = 0; k < s.slow.n; k++) {
        slow_num *sn = &((slow_num *)s.slow.p)[k];
        char buf[512];
        memcpy(buf, s.base + sn->off, (size_t)sn->len);
        buf[sn->len] = 0;
        char *endp = NULL;
        double d = PyOS_string_to_double(buf, &endp, NULL);
        /* out of range (1e400) is a decode error for msgspec: the Python path reports it */
        if ((d == -1.0 && PyErr_Occurred()) || endp != buf + sn->len || !isfinite(d)) {
            PyErr_Clear();
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
        if (sn->col >= 0) ((double *)s.cols[sn->col].p)[sn->row] = d;   /* < 0: replaced by a later key */
    }
    {
        PyObject *cols = PyDict_New();
        if (!cols) goto done;
        for (int c = 0; c < N_COLS; c++) {
            if (c == C_DIMS_OFF || c == C_DIMS_LEN || c == C_TYPE_OFF || c == C_TYPE_LEN) continue;
            PyObject *b = column_from(&s.cols[c]);
            if (!b || PyDict_SetItemString(cols, COL_NAMES[c], b)) { Py_XDECREF(b); Py_DECREF(cols); goto done; }
            Py_DECREF(b);
        }
        PyObject *ids[3] = {column_from(&s.dims_ids), column_from(&s.type_ids), column_from(&s.present)};
        if (!ids[0] || !ids[1] || !ids[2] || PyDict_SetItemString(cols, "dims_idx", ids[0]) ||
            PyDict_SetItemString(cols, "type_idx", ids[1]) || PyDict_SetItemString(cols, "present", ids[2])) {
            Py_XDECREF(ids[0]); Py_XDECREF(ids[1]); Py_XDECREF(ids[2]); Py_DECREF(cols); goto done;
        }
        Py_DECREF(ids[0]);
        Py_DECREF(ids[1]);
        Py_DECREF(ids[2]);
        PyObject *strs = span_list(s.base, &s.strs);
        if (!strs) { Py_DECREF(cols); goto done; }
        PyObject *raws = span_list(s.base, &s.raws);
        if (!raws) { Py_DECREF(cols); Py_DECREF(strs); goto done; }
        size_t nd = s.deferred.n / 3;
        PyObject *deferred = PyList_New((Py_ssize_t)nd);
        const int64_t *dp = (const int64_t *)s.deferred.p;
        for (size_t k = 0; deferred && k < nd; k++) {
            PyObject *t = Py_BuildValue("(Ly#)", (long long)dp[3 * k], (const char *)s.base + dp[3 * k + 1],
                                        (Py_ssize_t)dp[3 * k + 2]);
            if (!t) { Py_CLEAR(deferred); break; }
            PyList_SET_ITEM(deferred, (Py_ssize_t)k, t);
        }
        if (!deferred) { Py_DECREF(raws); Py_DECREF(cols); Py_DECREF(strs); goto done; }
        result = Py_BuildValue("(LnNNNN)", (long long)s.n, (Py_ssize_t)(s.p - s.base), cols, strs, raws, deferred);
    }
done:
    for (int c = 0; c < N_COLS; c++) free(s.cols[c].p);
    free(s.slow.p);
    free(s.deferred.p);
    free(s.dims_ids.p);
    free(s.type_ids.p);
    free(s.present.p);
    intern_free(&s.strs);
    intern_free(&s.raws);
    PyBuffer_Release(&view);
    return result;
}

/* --- replay: the what-if replay loop (traceinspect/whatif/replay.py holds the Python twin and the model) ---
 *
 * replay(kinds, idxs, h_prev, h_gap, h_xprev, h_xgap, h_own, h_wait, h_resid,
 *        g_launch, g_prev, g_xprev, g_slack, g_dur, g_lat, hs, he, gs, ge, hb, heb, gb) -> None
 *
 * Every argument is a C-contiguous buffer: kinds int8 (0 wait end, 1 host start, 2 GPU op), the edge
 * arrays and idxs int64 (-1 or any negative: none), the rest float64, the bind codes int64. hs/he/gs/ge
 * come in holding the measured times and hb/heb/gb the default binds; they are overwritten in place.
 * Lengths and every index are checked before the loop (ValueError, nothing written); the loop itself runs
 * without the GIL. Same arithmetic, same comparisons and same order as the Python loop, so the doubles
 * are identical (tests/test_replay_native.py). */
enum { RB_FIXED, RB_THREAD, RB_XTHREAD, RB_LAUNCH, RB_STREAM, RB_XSTREAM, RB_WAIT, RB_OWN };

static int idx_ok(const int64_t *a, Py_ssize_t n, Py_ssize_t bound) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (a[i] >= (int64_t)bound) return 0;
    return 1;
}

static PyObject *replay(PyObject *self, PyObject *args) {
    (void)self;
    enum { N_IN = 15, N_OUT = 7 };
    Py_buffer b[N_IN + N_OUT];
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*y*y*y*y*y*y*w*w*w*w*w*w*w*:replay",
                          &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6], &b[7], &b[8], &b[9], &b[10], &b[11],
                          &b[12], &b[13], &b[14], &b[15], &b[16], &b[17], &b[18], &b[19], &b[20], &b[21]))
        return NULL;   /* PyArg_ParseTuple releases what it took when it fails */
    PyObject *result = NULL;
    const char *bad = NULL;
    for (int k = 1; k < N_IN + N_OUT && !bad; k++)
        if (b[k].len % 8 || ((uintptr_t)b[k].buf) % 8) bad = "every array but kinds must hold aligned 8-byte items";
    Py_ssize_t m = b[0].len, n_h = b[15].len / 8, n_g = b[17].len / 8;
    if (!bad && b[1].len / 8 != m) bad = "kinds and idxs differ in length";
    /* h_prev h_gap h_xprev h_xgap h_own h_wait h_resid, hs he hb heb: n_h; g_*, gs ge gb: n_g */
    static const int H_ARGS[] = {2, 3, 4, 5, 6, 7, 8, 15, 16, 19, 20}, G_ARGS[] = {9, 10, 11, 12, 13, 14, 17, 18, 21};
    for (size_t k = 0; !bad && k < sizeof H_ARGS / sizeof *H_ARGS; k++)
        if (b[H_ARGS[k]].len / 8 != n_h) bad = "host arrays differ in length";
    for (size_t k = 0; !bad && k < sizeof G_ARGS / sizeof *G_ARGS; k++)
        if (b[G_ARGS[k]].len / 8 != n_g) bad = "GPU arrays differ in length";
    if (bad) {
        PyErr_Format(PyExc_ValueError, "replay: %s", bad);
        goto done;
    }
    {
        const int8_t *kinds = (const int8_t *)b[0].buf;
        const int64_t *idxs = (const int64_t *)b[1].buf;
        const int64_t *h_prev = (const int64_t *)b[2].buf, *h_x = (const int64_t *)b[4].buf;
        const int64_t *h_wait = (const int64_t *)b[7].buf;
        const double *h_gap = (const double *)b[3].buf, *h_xgap = (const double *)b[5].buf;
        const double *h_own = (const double *)b[6].buf, *h_res = (const double *)b[8].buf;
        const int64_t *g_l = (const int64_t *)b[9].buf, *g_p = (const int64_t *)b[10].buf;
        const int64_t *g_x = (const int64_t *)b[11].buf;
        const double *g_sl = (const double *)b[12].buf, *g_d = (const double *)b[13].buf;
        const double *g_lat = (const double *)b[14].buf;
        double *hs = (double *)b[15].buf, *he = (double *)b[16].buf, *gs = (double *)b[17].buf;
        double *ge = (double *)b[18].buf;
        int64_t *hb = (int64_t *)b[19].buf, *heb = (int64_t *)b[20].buf, *gb = (int64_t *)b[21].buf;
        int ok = 1;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t j = 0; ok && j < m; j++) {
            int64_t i = idxs[j];
            int8_t k = kinds[j];
            if (i < 0 || (k == 2 ? i >= (int64_t)n_g : i >= (int64_t)n_h) || k < 0 || k > 2) ok = 0;
        }
        ok = ok && idx_ok(h_prev, n_h, n_h) && idx_ok(h_x, n_h, n_h) && idx_ok(h_wait, n_h, n_g)
             && idx_ok(g_l, n_g, n_h) && idx_ok(g_p, n_g, n_g) && idx_ok(g_x, n_g, n_g);
        for (Py_ssize_t j = 0; ok && j < m; j++) {
            int64_t i = idxs[j];
            if (kinds[j] == 1) {
                int64_t p = h_prev[i], x = h_x[i];
                double t;
                int64_t bd;
                if (p >= 0) { t = he[p] + h_gap[i]; bd = RB_THREAD; }
                else if (x >= 0) { t = he[x] + h_xgap[i]; bd = RB_XTHREAD; } /* a thread's first call */
                else { t = hs[i]; bd = RB_FIXED; }
                if (x >= 0 && bd != RB_XTHREAD) {
                    double tx = he[x] + h_xgap[i];
                    if (tx > t) { t = tx; bd = RB_XTHREAD; }
                }
                hs[i] = t;
                hb[i] = bd;
                he[i] = t + h_own[i];
            } else if (kinds[j] == 2) {
                double t = gs[i];
                int64_t bd = RB_FIXED, lch = g_l[i], p = g_p[i], x = g_x[i];
                int anchored = 0;
                if (lch >= 0) { t = hs[lch] + g_lat[i]; bd = RB_LAUNCH; anchored = 1; }
                if (p >= 0 && (!anchored || ge[p] > t)) { t = ge[p]; bd = RB_STREAM; anchored = 1; }
                if (x >= 0 && (!anchored || ge[x] > t)) { t = ge[x]; bd = RB_XSTREAM; }
                t += g_sl[i];
                gs[i] = t;
                ge[i] = t + g_d[i];
                gb[i] = bd;
            } else {
                int64_t o = h_wait[i];
                if (o >= 0) {
                    double t = ge[o] + h_res[i];
                    if (t > he[i]) { he[i] = t; heb[i] = RB_WAIT; }
                }
            }
        }
        Py_END_ALLOW_THREADS
        if (!ok) {
            PyErr_SetString(PyExc_ValueError, "replay: a node index is out of range (a malformed graph)");
            goto done;
        }
    }
    result = Py_None;
    Py_INCREF(result);
done:
    for (int k = 0; k < N_IN + N_OUT; k++)
        if (b[k].obj) PyBuffer_Release(&b[k]);
    return result;
}

static PyMethodDef METHODS[] = {
    {"replay", replay, METH_VARARGS,
     "replay(kinds, idxs, h_prev, h_gap, h_xprev, h_xgap, h_own, h_wait, h_resid, g_launch, g_prev, g_xprev, "
     "g_slack, g_dur, g_lat, hs, he, gs, ge, hb, heb, gb) -> None: the what-if replay loop, in place (see above)."},
    {"scan", scan, METH_O,
     "scan(buffer) -> (n_events, end_offset, columns, strings, raws, deferred) or None when the buffer "
     "needs the pure-Python decoder."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void) {
    if (PyType_Ready(&ColumnType) < 0) return NULL;
    init_row_slow(&ROW_TEMPLATE);
    PyObject *m = PyModule_Create(&MODULE);
    if (m && PyModule_AddIntConstant(m, "MAX_NESTING", MAX_NESTING)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
