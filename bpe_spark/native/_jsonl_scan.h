/* _jsonl_scan.h: the text field of JSON Lines records, scanned in C (included by _fastenc.c).
 *
 * jsonl_texts(data, starts, ends, key) reads line i = data[starts[i]:ends[i]] (or data's lines,
 * cut at each newline) and answers, per line, one of: JL_TEXT (the line is one JSON object
 * whose last `key` field is a string: its value, unescaped to UTF-8, is written out), JL_NULL
 * (that field is JSON null), JL_BLANK (only JSON whitespace) or JL_UNSURE. It answers the first
 * three only where `json.loads` of the line (bpe_spark/spark/read/jsonl.py, parse_record) gives the
 * same: the grammar accepted is a subset of Python's, strictly RFC 8259. Everything else is
 * JL_UNSURE, and Python decides that line: invalid UTF-8, lone surrogate escapes, control
 * characters in strings, NaN and Infinity, escaped keys longer than JL_MAX_ESCAPED_KEY bytes,
 * integers of more than JL_MAX_INT_DIGITS digits, nesting deeper than JL_MAX_DEPTH, a BOM,
 * other Unicode whitespace, a missing text field or one of another type, anything after the
 * object. Python's dict keeps a repeated key's last value; so does this.
 *
 * An unescaped string is never longer than its JSON form, so the output buffer is sized once.
 */
#ifndef BPE_JSONL_SCAN_H
#define BPE_JSONL_SCAN_H

enum { JL_TEXT = 0, JL_NULL = 1, JL_BLANK = 2, JL_UNSURE = 3 };
#define JL_MAX_DEPTH 64
#define JL_MAX_INT_DIGITS 4000
#define JL_MAX_ESCAPED_KEY 1024

typedef struct {
    const uint8_t *p, *end;
    uint8_t *out; /* where an unescaped text is written; NULL: validate only */
} JlCursor;

static inline void jl_ws(JlCursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n')) c->p++;
}

static inline int jl_cont(uint8_t b) { return (b & 0xC0) == 0x80; }

/* The length of the well-formed UTF-8 sequence at p (lead byte >= 0x80), or 0 (as Python's
 * decoder: no overlong forms, no surrogates, nothing past U+10FFFF). */
static size_t jl_utf8(const uint8_t *p, const uint8_t *end) {
    size_t left = (size_t)(end - p);
    uint8_t b = p[0];
    if (b >= 0xC2 && b <= 0xDF) return left >= 2 && jl_cont(p[1]) ? 2 : 0;
    if (b >= 0xE0 && b <= 0xEF) {
        if (left < 3 || !jl_cont(p[1]) || !jl_cont(p[2])) return 0;
        if (b == 0xE0 && p[1] < 0xA0) return 0;
        if (b == 0xED && p[1] > 0x9F) return 0;
        return 3;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (left < 4 || !jl_cont(p[1]) || !jl_cont(p[2]) || !jl_cont(p[3])) return 0;
        if (b == 0xF0 && p[1] < 0x90) return 0;
        if (b == 0xF4 && p[1] > 0x8F) return 0;
        return 4;
    }
    return 0;
}

static int jl_hex4(const uint8_t *p, const uint8_t *end, uint32_t *value) {
    if (end - p < 4) return -1;
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        uint8_t h = p[k];
        v <<= 4;
        if (h >= '0' && h <= '9') v |= (uint32_t)(h - '0');
        else if (h >= 'a' && h <= 'f') v |= (uint32_t)(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F') v |= (uint32_t)(h - 'A' + 10);
        else return -1;
    }
    *value = v;
    return 0;
}

static uint8_t *jl_put_utf8(uint8_t *o, uint32_t cp) {
    if (cp < 0x80) {
        *o++ = (uint8_t)cp;
    } else if (cp < 0x800) {
        *o++ = (uint8_t)(0xC0 | (cp >> 6));
        *o++ = (uint8_t)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (uint8_t)(0xE0 | (cp >> 12));
        *o++ = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (uint8_t)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (uint8_t)(0xF0 | (cp >> 18));
        *o++ = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (uint8_t)(0x80 | (cp & 0x3F));
    }
    return o;
}

#define JL_ONES 0x0101010101010101ULL
#define JL_HIGH 0x8080808080808080ULL
#define JL_ZERO_BYTE(v) (((v) - JL_ONES) & ~(v) & JL_HIGH)

/* Whether any of the 8 bytes at p ends a plain run of a string: a quote, a backslash, a control
 * character or a byte of a multi-byte sequence (the byte loop then finds which). */
static inline int jl_special8(const uint8_t *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return ((w & JL_HIGH) | ((w - JL_ONES * 0x20) & ~w & JL_HIGH) | JL_ZERO_BYTE(w ^ (JL_ONES * '"')) |
            JL_ZERO_BYTE(w ^ (JL_ONES * '\\'))) != 0;
}

/* A string at c->p (its opening quote); its value goes to c->out when that is set. *escaped
 * tells whether it held a backslash. 0, or -1: not one this scanner is sure of. */
static int jl_string(JlCursor *c, int *escaped) {
    const uint8_t *p = c->p + 1, *end = c->end;
    uint8_t *o = c->out;
    *escaped = 0;
    while (p < end) {
        const uint8_t *run = p;
        while (end - p >= 8 && !jl_special8(p)) p += 8;
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') p++;
        if (o != NULL && p > run) {
            memcpy(o, run, (size_t)(p - run));
            o += p - run;
        }
        if (p == end) return -1;
        uint8_t b = *p;
        if (b == '"') {
            c->p = p + 1;
            if (o != NULL) c->out = o;
            return 0;
        }
        if (b < 0x20) return -1; /* Python's strict mode refuses control characters */
        if (b >= 0x80) {
            size_t n = jl_utf8(p, end);
            if (n == 0) return -1;
            if (o != NULL) {
                memcpy(o, p, n);
                o += n;
            }
            p += n;
            continue;
        }
        /* a backslash */
        *escaped = 1;
        if (end - p < 2) return -1;
        uint8_t e = p[1];
        uint8_t plain = 0;
        switch (e) {
        case '"': plain = '"'; break;
        case '\\': plain = '\\'; break;
        case '/': plain = '/'; break;
        case 'b': plain = '\b'; break;
        case 'f': plain = '\f'; break;
        case 'n': plain = '\n'; break;
        case 'r': plain = '\r'; break;
        case 't': plain = '\t'; break;
        case 'u': break;
        default: return -1;
        }
        if (e != 'u') {
            if (o != NULL) *o++ = plain;
            p += 2;
            continue;
        }
        uint32_t cp, low;
        if (jl_hex4(p + 2, end, &cp) < 0) return -1;
        p += 6;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return -1; /* a lone low surrogate */
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || jl_hex4(p + 2, end, &low) < 0) return -1;
            if (low < 0xDC00 || low > 0xDFFF) return -1; /* a lone high surrogate */
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            p += 6;
        }
        if (o != NULL) o = jl_put_utf8(o, cp);
    }
    return -1;
}

static int jl_number(JlCursor *c) {
    const uint8_t *p = c->p, *end = c->end;
    if (p < end && *p == '-') p++;
    if (p < end && *p == '0') {
        p++;
    } else if (p < end && *p >= '1' && *p <= '9') {
        const uint8_t *digits = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p - digits > JL_MAX_INT_DIGITS) return -1; /* Python's int() has a digit limit */
    } else {
        return -1;
    }
    if (p < end && *p == '.') {
        p++;
        if (p == end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p == end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    c->p = p;
    return 0;
}

static int jl_literal(JlCursor *c, const char *word, size_t n) {
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return -1;
    c->p += n;
    return 0;
}

static int jl_value(JlCursor *c, int depth);

/* An array or an object at c->p, validated and skipped. */
static int jl_container(JlCursor *c, int depth) {
    int object = *c->p == '{', escaped;
    uint8_t close = object ? '}' : ']';
    if (depth >= JL_MAX_DEPTH) return -1;
    c->p++;
    jl_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return 0;
    }
    for (;;) {
        if (object) {
            if (c->p == c->end || *c->p != '"' || jl_string(c, &escaped) < 0) return -1;
            jl_ws(c);
            if (c->p == c->end || *c->p != ':') return -1;
            c->p++;
            jl_ws(c);
        }
        if (jl_value(c, depth + 1) < 0) return -1;
        jl_ws(c);
        if (c->p == c->end) return -1;
        if (*c->p == close) {
            c->p++;
            return 0;
        }
        if (*c->p != ',') return -1;
        c->p++;
        jl_ws(c);
    }
}

static int jl_value(JlCursor *c, int depth) {
    if (c->p == c->end) return -1;
    int escaped;
    switch (*c->p) {
    case '"': return jl_string(c, &escaped);
    case '{': case '[': return jl_container(c, depth);
    case 't': return jl_literal(c, "true", 4);
    case 'f': return jl_literal(c, "false", 5);
    case 'n': return jl_literal(c, "null", 4);
    default: return jl_number(c);
    }
}

/* One line: its answer; a JL_TEXT's value is written from *out on (advanced past it). */
static int jl_line(const uint8_t *p, const uint8_t *end, const uint8_t *key, size_t key_len, uint8_t **out) {
    JlCursor c = {p, end, NULL};
    jl_ws(&c);
    if (c.p == c.end) return JL_BLANK;
    if (*c.p != '{') return JL_UNSURE;
    c.p++;
    jl_ws(&c);
    int found = JL_UNSURE, escaped;
    uint8_t scratch[JL_MAX_ESCAPED_KEY];
    uint8_t *start = *out, *stop = *out;
    if (c.p < c.end && *c.p == '}') return JL_UNSURE; /* {}: no text field */
    for (;;) {
        if (c.p == c.end || *c.p != '"') return JL_UNSURE;
        const uint8_t *name = c.p + 1;
        if (jl_string(&c, &escaped) < 0) return JL_UNSURE;
        size_t name_len = (size_t)(c.p - 1 - name);
        if (escaped) { /* compared unescaped (json.dumps escapes non-ASCII keys by default) */
            if (name_len > JL_MAX_ESCAPED_KEY) return JL_UNSURE;
            JlCursor again = {name - 1, c.p, scratch};
            jl_string(&again, &escaped);
            name = scratch;
            name_len = (size_t)(again.out - scratch);
        }
        int mine = name_len == key_len && memcmp(name, key, key_len) == 0;
        jl_ws(&c);
        if (c.p == c.end || *c.p != ':') return JL_UNSURE;
        c.p++;
        jl_ws(&c);
        if (mine && c.p < c.end && *c.p == '"') {
            c.out = start; /* a repeated key: its last value counts */
            if (jl_string(&c, &escaped) < 0) return JL_UNSURE;
            stop = c.out;
            c.out = NULL;
            found = JL_TEXT;
        } else if (mine && jl_literal(&c, "null", 4) == 0) {
            stop = start;
            found = JL_NULL;
        } else {
            if (jl_value(&c, 1) < 0) return JL_UNSURE;
            if (mine) found = JL_UNSURE; /* a number, boolean, array or object: a bad record */
        }
        jl_ws(&c);
        if (c.p == c.end) return JL_UNSURE;
        if (*c.p == '}') break;
        if (*c.p != ',') return JL_UNSURE;
        c.p++;
        jl_ws(&c);
    }
    c.p++;
    jl_ws(&c);
    if (c.p != c.end) return JL_UNSURE; /* "Extra data" for json.loads */
    if (found == JL_TEXT) *out = stop;
    return found;
}

/* jsonl_texts(data, starts: int64 buffer | None, ends: int64 buffer | None, key: bytes)
 *   -> (answers: uint8 per line, offsets: int32 per line + 1, texts: bytes)
 * Without starts and ends, the lines are data's, each ending with a newline (not part of it;
 * bytes after the last newline are no line). */
static PyObject *jsonl_texts(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data, key, starts = {0}, ends = {0};
    PyObject *starts_obj, *ends_obj;
    if (!PyArg_ParseTuple(args, "y*OOy*", &data, &starts_obj, &ends_obj, &key)) return NULL;
    PyObject *answers = NULL, *offsets = NULL, *texts = NULL, *result = NULL;
    const uint8_t *bytes = (const uint8_t *)data.buf;
    int given = starts_obj != Py_None;
    if (given != (ends_obj != Py_None)) {
        PyErr_SetString(PyExc_ValueError, "give both starts and ends, or neither");
        goto done;
    }
    if (given && (PyObject_GetBuffer(starts_obj, &starts, PyBUF_SIMPLE) < 0 ||
                  PyObject_GetBuffer(ends_obj, &ends, PyBUF_SIMPLE) < 0)) goto done;
    Py_ssize_t n = 0, total = 0;
    const int64_t *lo = (const int64_t *)starts.buf, *hi = (const int64_t *)ends.buf;
    if (given) {
        n = starts.len / (Py_ssize_t)sizeof(int64_t);
        if (starts.len % (Py_ssize_t)sizeof(int64_t) || ends.len != starts.len) {
            PyErr_SetString(PyExc_ValueError, "starts and ends must be int64 buffers of one length");
            goto done;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (lo[i] < 0 || lo[i] > hi[i] || hi[i] > data.len) {
                PyErr_Format(PyExc_ValueError, "line %zd [%lld, %lld) is outside the data", i, (long long)lo[i],
                             (long long)hi[i]);
                goto done;
            }
            total += (Py_ssize_t)(hi[i] - lo[i]);
        }
    } else {
        for (const uint8_t *p = bytes, *stop = bytes + data.len; (p = memchr(p, '\n', (size_t)(stop - p))) != NULL; p++) n++;
        total = data.len;
    }
    if (total > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "the lines hold more than 2 GiB");
        goto done;
    }
    answers = PyBytes_FromStringAndSize(NULL, n);
    offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * (Py_ssize_t)sizeof(int32_t));
    texts = PyBytes_FromStringAndSize(NULL, total);
    if (answers == NULL || offsets == NULL || texts == NULL) goto done;
    uint8_t *answer = (uint8_t *)PyBytes_AS_STRING(answers), *base = (uint8_t *)PyBytes_AS_STRING(texts);
    int32_t *offset = (int32_t *)PyBytes_AS_STRING(offsets);
    uint8_t *out = base;
    offset[0] = 0;
    Py_BEGIN_ALLOW_THREADS
    const uint8_t *line = bytes, *stop = bytes + data.len;
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *a, *b;
        if (given) {
            a = bytes + lo[i];
            b = bytes + hi[i];
        } else {
            a = line;
            b = memchr(line, '\n', (size_t)(stop - line));
            line = b + 1;
        }
        answer[i] = (uint8_t)jl_line(a, b, (const uint8_t *)key.buf, (size_t)key.len, &out);
        offset[i + 1] = (int32_t)(out - base);
    }
    Py_END_ALLOW_THREADS
    if (_PyBytes_Resize(&texts, out - base) < 0) goto done;
    result = PyTuple_Pack(3, answers, offsets, texts);
done:
    Py_XDECREF(answers);
    Py_XDECREF(offsets);
    Py_XDECREF(texts);
    PyBuffer_Release(&data);
    if (starts.obj != NULL) PyBuffer_Release(&starts);
    if (ends.obj != NULL) PyBuffer_Release(&ends);
    PyBuffer_Release(&key);
    return result;
}

#define JSONL_TEXTS_METHOD                                                                          \
    {"jsonl_texts", (PyCFunction)jsonl_texts, METH_VARARGS,                                         \
     "jsonl_texts(data, starts, ends, key) -> (answers: uint8 per line, int32 offsets, texts): "    \
     "the text field of JSON Lines records (0 text, 1 null, 2 blank, 3 unsure: Python decides)."}

#endif
