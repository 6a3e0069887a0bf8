/* bpe_spark.native._fastenc: the optional compiled encoder (pretokenize + cached BPE), for the byte
 * scheme's hot path. bpe_spark/encoding/tokenizer.py keeps the pure-Python encoder as the reference and
 * the fallback; tests/encoding/test_encoder_equivalence.py proves both give the same pretokens and ids.
 *
 * - Pretokenization of the compiled presets is hand-written over UTF-8 bytes (_pretokenizer.h),
 *   so it splits exactly as `regex.findall` does with the same Unicode data.
 * - BPE (_bpe_merge.h) merges the adjacent pair of lowest rank, leftmost first (bpe_merge's
 *   rule), for both merge rules: "pairs" (the merges in rank order) and tiktoken's "ranks" (a
 *   pretoken that is a token is that id, then the pair whose concatenation ranks lowest).
 * - Pretokens come from the compiled presets, or as str from Python (a custom pattern split by
 *   `regex`: encode_pretokens / encode_split).
 * - A cache (_pretoken_cache.h) maps each distinct pretoken (its UTF-8 bytes) to its ids; it
 *   starts over when full, one text adds at most TEXT_NEW_ENTRIES to it, and encode_piece can
 *   stop its growth for one long document (cache_cap). Pretokens of one or two bytes skip it
 *   (computing is cheaper). With the whole-pretoken rule the tokens are a second such table,
 *   looked up first. A text's pretokens are looked up in groups (GROUP), their slots asked for
 *   first. Lists of ids share one int object per id (id_objects).
 * - PretokenCounter counts the pretokens of texts with the same pretokenizer.
 * - jsonl_texts (_jsonl_scan.h) finds the text field of JSON Lines records.
 *
 * Text comes in as str, so its UTF-8 is well formed; the decoder still never reads past the end
 * of its buffer (a cut-short sequence counts as one byte of no class). Lone surrogates, which
 * a str may hold, are split and counted as the regex does (their "surrogatepass" bytes); the
 * encoder refuses them with UnicodeEncodeError, as the Python encoder does.
 */
#include "_bpe_common.h"
#include "_pretokenizer.h"
#include "_bpe_merge.h"
#include "_pretoken_cache.h"
#include "_jsonl_scan.h"

/* --- the encoder ---------------------------------------------------------------------------- */

/* A token of the vocabulary (its bytes) and its id, for the whole-pretoken lookup. */
typedef struct {
    BytesKey key;
    int32_t id;
} VocabEntry;

typedef struct {
    PyObject_HEAD
    int initialized;
    int pattern;
    int has_bytes;
    int ranks; /* tiktoken's rule: the merge table holds every split of every token */
    int whole; /* a pretoken that is a token (in vocab) is that id: tiktoken, ignore_merges */
    int chars; /* the first symbols are the pretoken's characters, looked up in vocab */
    int32_t byte_ids[256];
    MergeEngine bpe;
    /* vocab: the tokens' bytes -> id, while the encoder is made (the merge table of the rank
     * rule, the tokens), and kept for chars (a pretoken's characters are looked up in it) */
    BytesTable vocab;
    /* the pretoken cache (_pretoken_cache.h), at most cache_limit entries */
    PretokenCache cache;
    /* with whole: every token of vocab, its bytes -> its id, in a table laid out as the cache */
    PretokenCache tokens;
    size_t cache_limit;
    /* while encode_piece runs with a cache_cap: no new entry once the cache holds this many */
    size_t insert_limit;
    /* the int objects of ids 0..n_id_objects - 1, made on first use (NULL until then): a list
     * of ids holds references to them instead of a new int per id */
    PyObject **id_objects;
    size_t n_id_objects;
    /* the output of encode() between calls (its memory kept) */
    int32_t *line_ids;
    size_t line_cap;
} Encoder;

static int check_initialized(const Encoder *e) {
    if (e->initialized) return 0;
    PyErr_SetString(PyExc_RuntimeError, "Encoder is not initialized");
    return -1;
}

/* --- the pretoken cache ----------------------------------------------------------------------- */


/* Whether the ids of a pretoken of len bytes come from the cache: one byte is its id, two bytes
 * at most one merge, cheaper than the cache (but with ignore_merges two bytes may be a token
 * that no merge makes). */
static inline int uses_cache(const Encoder *e, size_t len) {
    if (len == 0) return 0;
    return !e->has_bytes || len > 2 || (len == 2 && e->whole && !e->ranks);
}

/* The ids of a pretoken that uses no cache (uses_cache is false). */
static const int32_t *short_pretoken_ids(Encoder *e, const uint8_t *p, size_t len, size_t *count) {
    if (len == 1) {
        *count = 1;
        return e->byte_ids + p[0];
    }
    if (len == 2 && e->has_bytes && (!e->whole || e->ranks)) {
        MergeEngine *m = &e->bpe;
        if (reserve_work(m, 2) < 0) return NULL;
        int32_t new_id;
        if (lookup_merge(m, e->byte_ids[p[0]], e->byte_ids[p[1]], &new_id) != NO_RANK) {
            m->work[0] = new_id;
            *count = 1;
        } else {
            m->work[0] = e->byte_ids[p[0]];
            m->work[1] = e->byte_ids[p[1]];
            *count = 2;
        }
        return m->work;
    }
    *count = 0; /* no pretoken has 0 bytes */
    return e->byte_ids;
}

/* The ids of one pretoken (its UTF-8 bytes, its key), from the cache or by BPE; NULL with an
 * error set. A failure leaves the cache as it was. */
static const int32_t *cached_pretoken_ids(Encoder *e, const uint8_t *p, size_t len, const CacheKey *keyp,
                                          size_t *count) {
    const CacheKey key = *keyp;
    const int32_t *hit;
    /* a pretoken that is a token is that id (whole): the tokens are a cache that never starts
     * over, looked up first (most pretokens of a text are tokens) */
    if (e->whole && (hit = cache_find(&e->tokens, &key, p, len, count)) != NULL) return hit;
    if ((hit = cache_find(&e->cache, &key, p, len, count)) != NULL) return hit;
    /* a miss: BPE, then remember it (starting over when the cache is full) */
    MergeEngine *m = &e->bpe;
    size_t n = 0;
    if (reserve_work(m, len) < 0) return NULL;
    if (e->chars) {
        for (size_t j = 0; j < len;) {
            size_t width = p[j] < 0x80 ? 1 : p[j] < 0xe0 ? 2 : p[j] < 0xf0 ? 3 : 4;
            if (width > len - j) width = len - j;
            const VocabEntry *symbol = (const VocabEntry *)bytes_find(&e->vocab, p + j, width, hash_bytes(p + j, width));
            if (symbol == NULL) {
                /* the caller's pure-Python path knows unk_token and byte_fallback */
                PyErr_SetString(PyExc_LookupError, "a character of the pretoken is not in the vocabulary");
                return NULL;
            }
            m->work[n++] = symbol->id;
            j += width;
        }
        n = bpe_in_place(m, n);
    } else {
        for (size_t j = 0; j < len; j++) m->work[j] = e->byte_ids[p[j]];
        n = bpe_in_place(m, len);
    }
    *count = n;
    if (!cache_fits(len, n)) return m->work; /* too long to cache */
    if (e->cache.n_entries >= e->insert_limit) return m->work; /* capped: a memo, not remembered */
    if (e->cache.n_entries >= e->cache_limit || !cache_room(&e->cache, len, n)) cache_clear(&e->cache);
    return cache_add(&e->cache, &key, p, len, m->work, n);
}

static const int32_t *pretoken_ids(Encoder *e, const uint8_t *p, size_t len, size_t *count) {
    if (!uses_cache(e, len)) return short_pretoken_ids(e, p, len, count);
    CacheKey key;
    cache_key(&key, p, len);
    return cached_pretoken_ids(e, p, len, &key, count);
}

/* --- growable int32 output ------------------------------------------------------------------- */

/* The ids in data[0:n), room for cap; data is the memory of the bytes object `bytes` when that
 * is not NULL (encode_many's result, written in place and cut to size at the end: no copy),
 * else a PyMem block. */
typedef struct {
    int32_t *data;
    size_t n, cap;
    PyObject *bytes;
} IdBuffer;

static int ids_grow(IdBuffer *b, size_t count) {
    if (b->bytes == NULL) {
        int32_t *d = grow_array(b->data, &b->cap, b->n, count, sizeof(int32_t), 1024);
        if (d == NULL) return -1;
        b->data = d;
        return 0;
    }
    size_t need, cap;
    if (size_add_overflow(b->n, count, &need) || (cap = grown_capacity(b->cap, need, 1024)) == 0 ||
        cap > (size_t)PY_SSIZE_T_MAX / sizeof(int32_t))
        return PyErr_NoMemory(), -1;
    if (_PyBytes_Resize(&b->bytes, (Py_ssize_t)(cap * sizeof(int32_t))) < 0) return -1; /* b->bytes is NULL */
    b->data = (int32_t *)PyBytes_AS_STRING(b->bytes);
    b->cap = cap;
    return 0;
}

static inline int ids_append(IdBuffer *b, const int32_t *ids, size_t count) {
    if ((b->cap - b->n < count || b->data == NULL) && ids_grow(b, count) < 0) return -1;
    if (count == 1) b->data[b->n] = ids[0];
    else memcpy(b->data + b->n, ids, count * sizeof(int32_t));
    b->n += count;
    return 0;
}

/* The UTF-8 of a str that is split or counted, not encoded: lone surrogates (which the strict
 * codec refuses) as "surrogatepass" writes them, so that they are split and counted as the
 * regex does. *holder keeps those bytes alive (Py_XDECREF it after use); NULL on error. */
static const uint8_t *text_bytes(PyObject *text, size_t *n, PyObject **holder) {
    Py_ssize_t length;
    *holder = NULL;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &length);
    if (utf8 == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return NULL;
        PyErr_Clear();
        *holder = PyUnicode_AsEncodedString(text, "utf-8", "surrogatepass");
        if (*holder == NULL) return NULL;
        utf8 = PyBytes_AS_STRING(*holder);
        length = PyBytes_GET_SIZE(*holder);
    }
    *n = (size_t)length;
    return (const uint8_t *)utf8;
}

/* Encode one text (already normalized) into out. */
#define TEXT_NEW_ENTRIES ((size_t)1 << 14)
#define GROUP 16

static int encode_utf8(Encoder *e, const uint8_t *s, size_t n, IdBuffer *out);

static int encode_text(Encoder *e, PyObject *text, IdBuffer *out) {
    Py_ssize_t length;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &length); /* raises for lone surrogates */
    if (utf8 == NULL) return -1;
    return encode_utf8(e, (const uint8_t *)utf8, (size_t)length, out);
}

/* Append the ids of the text s[0:n) (valid UTF-8) to out. */
static int encode_utf8(Encoder *e, const uint8_t *s, size_t n, IdBuffer *out) {
    size_t i = 0, saved = e->insert_limit;
    /* one text adds at most TEXT_NEW_ENTRIES pretokens: a giant document of distinct pretokens
     * does not grow the cache out of the processor's caches (a miss costs what BPE costs) */
    if (e->cache.n_entries + TEXT_NEW_ENTRIES < saved) e->insert_limit = e->cache.n_entries + TEXT_NEW_ENTRIES;
    int status = 0;
    /* in groups: split GROUP pretokens and ask for their table slots, then look them up, so
     * that the slots not in the processor's caches are fetched together, not one by one */
    size_t starts[GROUP + 1];
    CacheKey keys[GROUP];
    while (i < n && status == 0) {
        size_t k = 0;
        for (; k < GROUP && i < n; k++) {
            size_t end = next_pretoken(e->pattern, s, n, i);
            starts[k] = i;
            if (uses_cache(e, end - i)) {
                cache_key(keys + k, s + i, end - i);
                if (e->whole) prefetch_slot(&e->tokens, keys[k].hash);
                prefetch_slot(&e->cache, keys[k].hash);
            }
            i = end;
        }
        starts[k] = i;
        for (size_t j = 0; j < k; j++) {
            size_t len = starts[j + 1] - starts[j], count;
            const uint8_t *p = s + starts[j];
            const int32_t *ids = uses_cache(e, len) ? cached_pretoken_ids(e, p, len, keys + j, &count)
                                                    : short_pretoken_ids(e, p, len, &count);
            if (ids == NULL || ids_append(out, ids, count) < 0) {
                status = -1;
                break;
            }
        }
    }
    e->insert_limit = saved;
    return status;
}

/* The int object of an id (a new reference): from the encoder's table for the ids it can make
 * (made once, then shared), a new one for any other (ids given to bpe(), ids past the table). */
static inline PyObject *id_object(Encoder *e, int32_t id) {
    if ((uint32_t)id >= e->n_id_objects) return PyLong_FromLong(id);
    PyObject *object = e->id_objects[id];
    if (object == NULL) {
        object = PyLong_FromLong(id);
        if (object == NULL) return NULL;
        e->id_objects[id] = object;
    }
    Py_INCREF(object);
    return object;
}

static PyObject *ids_to_list(Encoder *e, const int32_t *ids, size_t n) {
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (list == NULL) return NULL;
    for (size_t j = 0; j < n; j++) {
        PyObject *id = id_object(e, ids[j]);
        if (id == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)j, id);
    }
    return list;
}

/* The table of id objects for ids 0..max_id (at most ID_OBJECTS ids: past them each id gets a
 * new int); -1 with MemoryError set. */
#define ID_OBJECTS ((size_t)1 << 22)

static int new_id_objects(Encoder *e, int64_t max_id) {
    size_t n = max_id < 0 ? 0 : (size_t)max_id + 1;
    if (n > ID_OBJECTS) n = ID_OBJECTS;
    e->id_objects = n ? bpe_calloc_array(n, sizeof(PyObject *)) : NULL;
    if (n && e->id_objects == NULL) return -1;
    e->n_id_objects = n;
    return 0;
}

static void free_id_objects(Encoder *e) {
    for (size_t x = 0; x < e->n_id_objects; x++) Py_XDECREF(e->id_objects[x]);
    PyMem_Free(e->id_objects);
    e->id_objects = NULL;
    e->n_id_objects = 0;
}

static int check_pattern(Encoder *e) {
    if (check_initialized(e) < 0) return -1;
    if (e->pattern == PATTERN_NONE) {
        PyErr_SetString(PyExc_ValueError, "this encoder has no compiled pretokenizer (pattern=None)");
        return -1;
    }
    if (!e->has_bytes) {
        PyErr_SetString(PyExc_ValueError, "this encoder has no byte ids (not a byte-scheme model)");
        return -1;
    }
    return check_classes();
}

/* --- methods --------------------------------------------------------------------------------- */

static void Encoder_dealloc(Encoder *e) {
    engine_free(&e->bpe);
    bytes_free(&e->vocab);
    cache_free(&e->cache);
    cache_free(&e->tokens);
    free_id_objects(e);
    PyMem_Free(e->line_ids);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

/* The 256 ids of the single bytes, into e->byte_ids; -1 with an error set. */
static int read_byte_ids(Encoder *e, PyObject *byte_ids) {
    PyObject *seq = PySequence_Fast(byte_ids, "byte_ids must be a sequence of 256 ids");
    if (seq == NULL) return -1;
    if (PySequence_Fast_GET_SIZE(seq) != 256) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "byte_ids must hold 256 ids");
        return -1;
    }
    for (int b = 0; b < 256; b++) {
        long id = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, b));
        if ((id == -1 && PyErr_Occurred()) || id < 0 || id > INT32_MAX - 1) {
            Py_DECREF(seq);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "byte ids must be ids >= 0");
            return -1;
        }
        e->byte_ids[b] = (int32_t)id;
    }
    Py_DECREF(seq);
    e->has_bytes = 1;
    return 0;
}

/* vocab: (token bytes, id) pairs, into e->vocab; the first id of a repeated token wins. */
static int read_vocab(Encoder *e, PyObject *vocab_obj) {
    PyObject *vocab = PySequence_Fast(vocab_obj, "vocab must be a sequence of (bytes, id)");
    if (vocab == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(vocab);
    for (Py_ssize_t x = 0; x < n; x++) {
        const char *data;
        Py_ssize_t len;
        int id;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(vocab, x), "y#i", &data, &len, &id)) goto fail;
        if (id < 0 || id == INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "vocab entry %zd has id %d", x, id);
            goto fail;
        }
        uint64_t h = hash_bytes((const uint8_t *)data, (size_t)len);
        if (bytes_find(&e->vocab, (const uint8_t *)data, (size_t)len, h) != NULL) continue;
        VocabEntry *entry = (VocabEntry *)bytes_add(&e->vocab, (const uint8_t *)data, (size_t)len, h);
        if (entry == NULL) goto fail;
        entry->id = (int32_t)id;
    }
    Py_DECREF(vocab);
    return 0;
fail:
    Py_DECREF(vocab);
    return -1;
}

static const VocabEntry *vocab_find(const Encoder *e, const uint8_t *p, size_t len) {
    return (const VocabEntry *)bytes_find(&e->vocab, p, len, hash_bytes(p, len));
}

/* tiktoken's rule as a merge table: every split of every token into two tokens is a pair whose
 * rank and new id are the token's id (its rank). */
static int rank_merges(Encoder *e) {
    size_t count = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && engine_table(&e->bpe, count) < 0) return -1;
        for (size_t x = 0; x < e->vocab.n_entries; x++) {
            const VocabEntry *token = (const VocabEntry *)bytes_entry(&e->vocab, x);
            const uint8_t *p = e->vocab.arena + token->key.key_offset;
            size_t len = token->key.key_length;
            for (size_t cut = 1; cut < len; cut++) {
                const VocabEntry *left = vocab_find(e, p, cut), *right = left ? vocab_find(e, p + cut, len - cut) : NULL;
                if (right == NULL) continue;
                if (pass == 0) count++;
                else engine_put(&e->bpe, left->id, right->id, token->id, token->id);
            }
        }
    }
    return 0;
}

/* merges: (left, right, new_id) in rank order, into the table; the first rank of a repeated
 * pair wins. */
static int pair_merges(Encoder *e, PyObject *merges_obj) {
    PyObject *merges = PySequence_Fast(merges_obj, "merges must be a sequence of (left, right, new_id)");
    if (merges == NULL) return -1;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(merges);
    if (m >= INT32_MAX || engine_table(&e->bpe, (size_t)m) < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_OverflowError, "too many merges");
        Py_DECREF(merges);
        return -1;
    }
    for (Py_ssize_t r = 0; r < m; r++) {
        int left, right, new_id;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(merges, r), "iii", &left, &right, &new_id)) {
            Py_DECREF(merges);
            return -1;
        }
        if (left < 0 || right < 0 || new_id < 0) {
            Py_DECREF(merges);
            PyErr_Format(PyExc_ValueError, "merge %zd has a negative id", r);
            return -1;
        }
        engine_put(&e->bpe, left, right, (int32_t)r, new_id);
    }
    Py_DECREF(merges);
    return 0;
}

/* Every token of vocab into e->tokens (the whole-pretoken lookup); -1 with an error set. */
static int fill_tokens(Encoder *e) {
    for (size_t x = 0; x < e->vocab.n_entries; x++) {
        const VocabEntry *token = (const VocabEntry *)bytes_entry(&e->vocab, x);
        const uint8_t *p = e->vocab.arena + token->key.key_offset;
        size_t len = token->key.key_length, count;
        if (len == 0 || len > UINT32_MAX) continue; /* no pretoken is empty */
        /* the vocabulary is held whole: only the arena's 32-bit offsets bound it, not the cache's budget */
        if (e->tokens.keys_used + len > UINT32_MAX) return PyErr_NoMemory(), -1;
        CacheKey key;
        cache_key(&key, p, len);
        if (cache_find(&e->tokens, &key, p, len, &count) == NULL && cache_add(&e->tokens, &key, p, len, &token->id, 1) == NULL)
            return -1;
    }
    return 0;
}

/* The largest id the encoder can give: a byte's, a token's, a merge's new id (-1 if none). */
static int64_t largest_id(const Encoder *e) {
    int64_t top = -1;
    for (int b = 0; e->has_bytes && b < 256; b++) top = e->byte_ids[b] > top ? e->byte_ids[b] : top;
    for (size_t x = 0; x < e->vocab.n_entries; x++) {
        int32_t id = ((const VocabEntry *)bytes_entry(&e->vocab, x))->id;
        top = id > top ? id : top;
    }
    for (size_t i = 0; i < e->bpe.slots; i++) {
        if (e->bpe.table[i].key != EMPTY_KEY && e->bpe.table[i].new_id > top) top = e->bpe.table[i].new_id;
    }
    return top;
}

/* Encoder(merges, byte_ids=None, pattern=None, cache_limit=1000000, vocab=None, ranks=False,
 *         whole=False, chars=False)
 * merges: (left, right, new_id) in rank order. vocab: (token bytes, id) pairs. whole: a pretoken
 * that is a token encodes as that id (ignore_merges). ranks: tiktoken's rule (whole, and the
 * merge table built from vocab; merges must then be empty). chars: the first symbols are the
 * characters of a pretoken, looked up in vocab (a tokenizer.json model on string tokens); a
 * character not in it raises LookupError. */
static int Encoder_init(Encoder *e, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"merges", "byte_ids", "pattern", "cache_limit", "vocab", "ranks", "whole", "chars", NULL};
    PyObject *merges_obj, *byte_ids = Py_None, *pattern = Py_None, *vocab = Py_None;
    Py_ssize_t cache_limit = 1000000;
    int ranks = 0, whole = 0, chars = 0;
    if (e->initialized) {
        PyErr_SetString(PyExc_RuntimeError, "Encoder is already initialized");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OOnOppp", kwlist, &merges_obj, &byte_ids, &pattern,
                                     &cache_limit, &vocab, &ranks, &whole, &chars))
        return -1;
    engine_free(&e->bpe);
    bytes_free(&e->vocab);
    cache_free(&e->tokens);
    free_id_objects(e);
    e->cache_limit = cache_limit < 1 ? 1 : (cache_limit > INT32_MAX - 2 ? INT32_MAX - 2 : (size_t)cache_limit);
    e->insert_limit = SIZE_MAX;
    e->cache.min_slots = 4096;
    e->tokens.min_slots = 4096;
    e->vocab.entry_size = sizeof(VocabEntry);
    e->vocab.min_slots = 4096;
    if (pattern == Py_None) {
        e->pattern = PATTERN_NONE;
    } else {
        const char *name = PyUnicode_AsUTF8(pattern);
        if (name == NULL) return -1;
        e->pattern = pattern_from_name(name);
        if (e->pattern < 0) return -1;
    }
    if (byte_ids != Py_None && read_byte_ids(e, byte_ids) < 0) return -1;
    if (vocab != Py_None && read_vocab(e, vocab) < 0) return -1;
    if ((whole || chars) && vocab == Py_None) {
        PyErr_SetString(PyExc_ValueError, "whole= and chars= need vocab=");
        return -1;
    }
    if (chars && byte_ids != Py_None) {
        PyErr_SetString(PyExc_ValueError, "chars=True and byte_ids are two ways to start; give one");
        return -1;
    }
    e->whole = whole || ranks;
    e->chars = chars;
    if (ranks) {
        Py_ssize_t m = PyObject_Length(merges_obj);
        if (m != 0 || vocab == Py_None) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "ranks=True takes its merges from vocab= (merges=())");
            return -1;
        }
        if (rank_merges(e) < 0) return -1;
        e->ranks = 1;
    } else if (pair_merges(e, merges_obj) < 0) {
        return -1;
    }
    if (e->whole && fill_tokens(e) < 0) return -1;
    if (new_id_objects(e, largest_id(e)) < 0) return -1;
    if (!e->chars) bytes_free(&e->vocab); /* built into the merge table and the tokens: no longer read */
    e->initialized = 1;
    return 0;
}

static PyObject *Encoder_bpe(Encoder *e, PyObject *arg) {
    if (check_initialized(e) < 0) return NULL;
    PyObject *seq = PySequence_Fast(arg, "bpe() takes a sequence of ids");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (reserve_work(&e->bpe, (size_t)n + 1) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long id = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (id == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return NULL;
        }
        if (id < INT32_MIN || id > INT32_MAX) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_OverflowError, "id out of int32 range");
            return NULL;
        }
        e->bpe.work[i] = (int32_t)id;
    }
    Py_DECREF(seq);
    return ids_to_list(e, e->bpe.work, bpe_in_place(&e->bpe, (size_t)n));
}

static PyObject *Encoder_split(Encoder *e, PyObject *text) {
    if (e->pattern == PATTERN_NONE) return check_pattern(e), NULL;
    if (check_classes() < 0) return NULL;
    PyObject *holder;
    size_t n, i = 0;
    const uint8_t *s = text_bytes(text, &n, &holder);
    if (s == NULL) return NULL;
    PyObject *out = PyList_New(0);
    while (out != NULL && i < n) {
        size_t end = next_pretoken(e->pattern, s, n, i);
        PyObject *piece = PyUnicode_DecodeUTF8((const char *)s + i, (Py_ssize_t)(end - i), "surrogatepass");
        if (piece == NULL || PyList_Append(out, piece) < 0) Py_CLEAR(out);
        Py_XDECREF(piece);
        i = end;
    }
    Py_XDECREF(holder);
    return out;
}

/* encode() and encode_pretokens() write into the encoder's kept buffer (no allocation per call),
 * taken out of the encoder while in use: a call made meanwhile (a finalizer run by the garbage
 * collector while the list is built) gets a buffer of its own. A buffer grown past LINE_KEEP ids
 * is not kept. */
#define LINE_KEEP ((size_t)1 << 16)

static IdBuffer take_line_buffer(Encoder *e) {
    IdBuffer out = {e->line_ids, 0, e->line_cap, NULL};
    e->line_ids = NULL;
    e->line_cap = 0;
    return out;
}

/* The ids of out as a list (status 0), or NULL (status -1, an error set); gives the buffer back. */
static PyObject *finish_list(Encoder *e, int status, IdBuffer *out) {
    PyObject *list = status < 0 ? NULL : ids_to_list(e, out->data, out->n);
    if (e->line_ids == NULL && out->cap <= LINE_KEEP) {
        e->line_ids = out->data;
        e->line_cap = out->cap;
    } else {
        PyMem_Free(out->data);
    }
    return list;
}

static PyObject *Encoder_encode(Encoder *e, PyObject *text) {
    if (check_pattern(e) < 0) return NULL;
    IdBuffer out = take_line_buffer(e);
    return finish_list(e, encode_text(e, text, &out), &out);
}

/* The ids of every text one after the other and each text's count: (ids: bytes of int32,
 * lengths: bytes of int64). A text is a str, or with presplit its pretokens (a sequence of str);
 * None gives length 0 (the caller marks it null). */
static int encode_pretoken_list(Encoder *e, PyObject *pretokens_obj, IdBuffer *out);

/* The flat result's buffers: *lengths for m texts, and out's ids with room for about guess of
 * them (the bytes object returned, cut to size by flat_result). 0, or -1 with an error set. */
static int flat_start(Py_ssize_t m, size_t guess, PyObject **lengths, IdBuffer *out) {
    *lengths = PyBytes_FromStringAndSize(NULL, m * (Py_ssize_t)sizeof(int64_t));
    if (*lengths == NULL) return -1;
    if (guess > (size_t)PY_SSIZE_T_MAX / sizeof(int32_t)) guess = 1024;
    out->bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(guess * sizeof(int32_t)));
    if (out->bytes == NULL) return -1;
    out->data = (int32_t *)PyBytes_AS_STRING(out->bytes);
    out->cap = guess;
    return 0;
}

/* (ids, lengths), the ids cut to their count; takes both references (NULL with an error set). */
static PyObject *flat_result(IdBuffer *out, PyObject *lengths) {
    PyObject *ids = out->bytes, *result = NULL;
    out->bytes = NULL;
    if (_PyBytes_Resize(&ids, (Py_ssize_t)(out->n * sizeof(int32_t))) == 0) {
        result = PyTuple_Pack(2, ids, lengths);
        Py_DECREF(ids);
    }
    Py_DECREF(lengths);
    return result;
}

static PyObject *encode_each(Encoder *e, PyObject *texts_obj, int presplit) {
    PyObject *texts = PySequence_Fast(texts_obj, "takes a sequence of texts");
    if (texts == NULL) return NULL;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(texts);
    PyObject *lengths = NULL;
    IdBuffer out = {NULL, 0, 0, NULL};
    /* room for about as many ids as a text of that many code points gives (more are made room
     * for as they come), in the bytes object returned */
    size_t guess = 1024;
    for (Py_ssize_t t = 0; t < m && !presplit; t++) {
        PyObject *text = PySequence_Fast_GET_ITEM(texts, t);
        if (PyUnicode_Check(text)) guess += (size_t)PyUnicode_GET_LENGTH(text) / 3;
    }
    if (flat_start(m, guess, &lengths, &out) < 0) goto fail;
    int64_t *length_of = (int64_t *)PyBytes_AS_STRING(lengths);
    for (Py_ssize_t t = 0; t < m; t++) {
        PyObject *text = PySequence_Fast_GET_ITEM(texts, t);
        size_t before = out.n;
        if (text != Py_None) {
            if (presplit) {
                if (encode_pretoken_list(e, text, &out) < 0) goto fail;
            } else if (!PyUnicode_Check(text)) {
                PyErr_Format(PyExc_TypeError, "text %zd is %.100s, not str", t, Py_TYPE(text)->tp_name);
                goto fail;
            } else if (encode_text(e, text, &out) < 0) {
                goto fail;
            }
        }
        length_of[t] = (int64_t)(out.n - before);
    }
    Py_DECREF(texts);
    return flat_result(&out, lengths);
fail:
    Py_DECREF(texts);
    Py_XDECREF(lengths);
    Py_XDECREF(out.bytes);
    return NULL;
}

/* encode_many(texts) -> (ids: bytes of int32, lengths: bytes of int64), one length per text. */
static PyObject *Encoder_encode_many(Encoder *e, PyObject *texts) {
    return check_pattern(e) < 0 ? NULL : encode_each(e, texts, 0);
}

/* encode_utf8(data, offsets) -> (ids: bytes of int32, lengths: bytes of int64): the texts
 * data[offsets[t]:offsets[t + 1]], data any bytes-like object of valid UTF-8 (an Arrow string
 * column's data buffer: the caller checks it), offsets a bytes-like object of n + 1 int64
 * positions in it, non-decreasing. No str is made for a text. */
static int64_t *text_offsets(const Py_buffer *data, const Py_buffer *offsets, Py_ssize_t *m) {
    if (offsets->len % (Py_ssize_t)sizeof(int64_t) != 0 || offsets->len < (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "offsets must hold n + 1 int64 positions");
        return NULL;
    }
    *m = offsets->len / (Py_ssize_t)sizeof(int64_t) - 1;
    int64_t *at = (int64_t *)PyMem_Malloc((size_t)(*m + 1) * sizeof(int64_t));
    if (at == NULL) return PyErr_NoMemory(), NULL;
    memcpy(at, offsets->buf, (size_t)(*m + 1) * sizeof(int64_t)); /* the buffer may be unaligned */
    for (Py_ssize_t t = 0; t < *m; t++) {
        if (at[t] < 0 || at[t + 1] < at[t] || at[t + 1] > (int64_t)data->len) {
            PyErr_Format(PyExc_ValueError, "offsets %zd..%zd are outside the %zd bytes of data", t, t + 1, data->len);
            PyMem_Free(at);
            return NULL;
        }
    }
    return at;
}

static PyObject *Encoder_encode_utf8(Encoder *e, PyObject *args) {
    Py_buffer data, offsets;
    if (!PyArg_ParseTuple(args, "y*y*", &data, &offsets)) return NULL;
    PyObject *result = NULL, *lengths = NULL;
    IdBuffer out = {NULL, 0, 0, NULL};
    Py_ssize_t m;
    int64_t *at = check_pattern(e) < 0 ? NULL : text_offsets(&data, &offsets, &m);
    if (at == NULL) goto done;
    /* room for about as many ids as a quarter of the bytes (more are made room for as they come) */
    if (flat_start(m, 1024 + (size_t)(at[m] - at[0]) / 4, &lengths, &out) < 0) goto done;
    int64_t *length_of = (int64_t *)PyBytes_AS_STRING(lengths);
    const uint8_t *bytes = (const uint8_t *)data.buf;
    for (Py_ssize_t t = 0; t < m; t++) {
        size_t before = out.n;
        if (at[t + 1] > at[t] && encode_utf8(e, bytes + at[t], (size_t)(at[t + 1] - at[t]), &out) < 0) goto done;
        length_of[t] = (int64_t)(out.n - before);
    }
    result = flat_result(&out, lengths);
    lengths = NULL;
done:
    PyMem_Free(at);
    Py_XDECREF(lengths);
    Py_XDECREF(out.bytes);
    PyBuffer_Release(&data);
    PyBuffer_Release(&offsets);
    return result;
}

/* Append the ids of a sequence of pretokens (str, split in Python: a custom pattern) to out. */
static int encode_pretoken_list(Encoder *e, PyObject *pretokens_obj, IdBuffer *out) {
    PyObject *pretokens = PySequence_Fast(pretokens_obj, "pretokens must be a sequence of str");
    if (pretokens == NULL) return -1;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(pretokens);
    size_t saved = e->insert_limit;
    if (e->cache.n_entries + TEXT_NEW_ENTRIES < saved) e->insert_limit = e->cache.n_entries + TEXT_NEW_ENTRIES;
    int status = 0;
    for (Py_ssize_t x = 0; x < m && status == 0; x++) {
        PyObject *piece = PySequence_Fast_GET_ITEM(pretokens, x);
        Py_ssize_t length;
        const char *utf8 = PyUnicode_Check(piece) ? PyUnicode_AsUTF8AndSize(piece, &length) : NULL;
        if (utf8 == NULL) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "pretoken %zd is not str", x);
            status = -1;
            break;
        }
        size_t count;
        const int32_t *ids = length ? pretoken_ids(e, (const uint8_t *)utf8, (size_t)length, &count) : NULL;
        if (length && (ids == NULL || ids_append(out, ids, count) < 0)) status = -1;
    }
    e->insert_limit = saved;
    Py_DECREF(pretokens);
    return status;
}

static int check_bytes(const Encoder *e) {
    if (check_initialized(e) < 0) return -1;
    if (e->has_bytes || e->chars) return 0;
    PyErr_SetString(PyExc_ValueError, "this encoder has neither byte ids nor chars=True");
    return -1;
}

/* encode_pretokens(pretokens) -> ids: the ids of pretokens split in Python (cached). */
static PyObject *Encoder_encode_pretokens(Encoder *e, PyObject *pretokens) {
    if (check_bytes(e) < 0) return NULL;
    IdBuffer out = take_line_buffer(e);
    return finish_list(e, encode_pretoken_list(e, pretokens, &out), &out);
}

/* encode_split(texts) -> (ids: bytes of int32, lengths: bytes of int64): each text given as its
 * pretokens (a sequence of str) or None (length 0). */
static PyObject *Encoder_encode_split(Encoder *e, PyObject *texts) {
    return check_bytes(e) < 0 ? NULL : encode_each(e, texts, 1);
}

/* The ids of the pretokens of s[0:n) that no following text can change (all when final),
 * appended to the bytearray out; returns where the rest starts, or (size_t)-1 with an error set. */
static size_t encode_stream(Encoder *e, const uint8_t *s, size_t n, int final, PyObject *out) {
    size_t i = 0, end;
    while (i < n && (end = stream_next(e->pattern, s, n, i, final)) != 0) {
        size_t count;
        const int32_t *ids = pretoken_ids(e, s + i, end - i, &count);
        if (ids == NULL) return (size_t)-1;
        Py_ssize_t used = PyByteArray_GET_SIZE(out), add = (Py_ssize_t)(count * sizeof(int32_t));
        if (add > PY_SSIZE_T_MAX - used) return PyErr_NoMemory(), (size_t)-1;
        /* bytearray grows by a fraction of its size, so appending stays linear */
        if (PyByteArray_Resize(out, used + add) < 0) return (size_t)-1;
        memcpy(PyByteArray_AS_STRING(out) + used, ids, (size_t)add);
        i = end;
    }
    return i;
}

/* encode_piece(text, final, out, cache_cap=-1) -> tail: encode the pretokens of text that no
 * following text can change (all of them when final), appending their int32 ids to the bytearray
 * out; returns the rest of text, to be prepended to the next piece. With cache_cap >= 0 this call
 * adds no pretoken to the cache once it holds cache_cap entries (the ids are the same: the cache
 * only remembers them), which bounds the cache of one long document. Raises for lone surrogates,
 * as encode() does. */
static PyObject *Encoder_encode_piece(Encoder *e, PyObject *args) {
    PyObject *text, *out;
    int final;
    Py_ssize_t cache_cap = -1;
    if (!PyArg_ParseTuple(args, "UpY|n", &text, &final, &out, &cache_cap)) return NULL;
    if (check_pattern(e) < 0) return NULL;
    Py_ssize_t length;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &length);
    if (utf8 == NULL) return NULL;
    e->insert_limit = cache_cap < 0 ? SIZE_MAX : (size_t)cache_cap;
    size_t i = encode_stream(e, (const uint8_t *)utf8, (size_t)length, final, out);
    e->insert_limit = SIZE_MAX;
    if (i == (size_t)-1) return NULL;
    return stream_tail((const uint8_t *)utf8, (size_t)length, i);
}

static PyObject *Encoder_cache_size(Encoder *e, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromSize_t(e->cache.n_entries);
}

static PyObject *Encoder_clear_cache(Encoder *e, PyObject *Py_UNUSED(ignored)) {
    cache_clear(&e->cache);
    Py_RETURN_NONE;
}

static PyMethodDef Encoder_methods[] = {
    {"bpe", (PyCFunction)Encoder_bpe, METH_O, "bpe(ids) -> ids: merge by rank, lowest first, leftmost on ties."},
    {"split", (PyCFunction)Encoder_split, METH_O, "The pretokens of a text, as regex.findall gives them."},
    {"encode", (PyCFunction)Encoder_encode, METH_O, "The ids of a (normalized) text, special tokens ignored."},
    {"encode_many", (PyCFunction)Encoder_encode_many, METH_O,
     "encode_many(texts) -> (int32 ids as bytes, int64 lengths as bytes)."},
    {"encode_utf8", (PyCFunction)Encoder_encode_utf8, METH_VARARGS,
     "encode_utf8(data, offsets: int64 bytes) -> (int32 ids as bytes, int64 lengths as bytes): texts of valid UTF-8 in one buffer."},
    {"encode_piece", (PyCFunction)Encoder_encode_piece, METH_VARARGS,
     "encode_piece(text, final, out: bytearray, cache_cap=-1) -> tail: one piece of a long text (see STREAM_MARGIN)."},
    {"encode_pretokens", (PyCFunction)Encoder_encode_pretokens, METH_O,
     "encode_pretokens(pretokens) -> ids: pretokens split in Python (a custom pattern), BPE and cache here."},
    {"encode_split", (PyCFunction)Encoder_encode_split, METH_O,
     "encode_split(texts as pretoken lists or None) -> (int32 ids as bytes, int64 lengths as bytes)."},
    {"cache_size", (PyCFunction)Encoder_cache_size, METH_NOARGS, "The number of cached pretokens."},
    {"clear_cache", (PyCFunction)Encoder_clear_cache, METH_NOARGS, "Forget the cached pretokens (for timing)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EncoderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bpe_spark.native._fastenc.Encoder",
    .tp_doc = "Encoder(merges, byte_ids=None, pattern=None, cache_limit=1000000, vocab=None, ranks=False): compiled BPE encoder.",
    .tp_basicsize = sizeof(Encoder),
    .tp_itemsize = 0,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Encoder_init,
    .tp_dealloc = (destructor)Encoder_dealloc,
    .tp_methods = Encoder_methods,
};


/* --- the pretoken counter ------------------------------------------------------------------- */

typedef struct {
    BytesKey key;
    int64_t count;
} CountEntry;

typedef struct {
    PyObject_HEAD
    int pattern;
    int broken;          /* an add() failed half way: the counts are partial until clear() */
    BytesTable counts;   /* CountEntry entries, in first-seen order */
} PretokenCounter;

static int PretokenCounter_init(PretokenCounter *c, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"pattern", NULL};
    const char *name;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "s", kwlist, &name)) return -1;
    c->pattern = pattern_from_name(name);
    if (c->pattern < 0) return -1;
    c->counts.entry_size = sizeof(CountEntry);
    c->counts.min_slots = (size_t)1 << 14;
    return check_classes();
}

static void PretokenCounter_dealloc(PretokenCounter *c) {
    bytes_free(&c->counts);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static int check_counter(const PretokenCounter *c) {
    if (c->pattern == PATTERN_NONE) {
        PyErr_SetString(PyExc_RuntimeError, "PretokenCounter is not initialized");
        return -1;
    }
    if (c->broken) {
        PyErr_SetString(PyExc_RuntimeError,
                        "this PretokenCounter failed in the middle of add() and holds part of that batch's "
                        "counts; clear() it and count the batch again");
        return -1;
    }
    return 0;
}

static int count_pretoken(PretokenCounter *c, const uint8_t *p, size_t len) {
    uint64_t h = hash_bytes(p, len);
    CountEntry *entry = (CountEntry *)bytes_find(&c->counts, p, len, h);
    if (entry == NULL) {
        if (c->counts.n_entries >= INT32_MAX - 2) {
            PyErr_SetString(PyExc_OverflowError, "too many distinct pretokens for one counter; flush it sooner");
            return -1;
        }
        entry = (CountEntry *)bytes_add(&c->counts, p, len, h);
        if (entry == NULL) return -1;
    }
    entry->count++;
    return 0;
}

static int count_text(PretokenCounter *c, PyObject *text) {
    PyObject *holder;
    size_t n, i = 0;
    const uint8_t *s = text_bytes(text, &n, &holder);
    if (s == NULL) return -1;
    while (i < n) {
        size_t end = next_pretoken(c->pattern, s, n, i);
        if (count_pretoken(c, s + i, end - i) < 0) {
            Py_XDECREF(holder);
            return -1;
        }
        i = end;
    }
    Py_XDECREF(holder);
    return 0;
}

/* add(texts): count the pretokens of every text (None and "" are skipped). */
static PyObject *PretokenCounter_add(PretokenCounter *c, PyObject *texts_obj) {
    if (check_counter(c) < 0) return NULL;
    PyObject *texts = PySequence_Fast(texts_obj, "add() takes a sequence of str");
    if (texts == NULL) return NULL;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(texts);
    for (Py_ssize_t t = 0; t < m; t++) {
        PyObject *text = PySequence_Fast_GET_ITEM(texts, t);
        if (text == Py_None) continue;
        if (!PyUnicode_Check(text)) {
            PyErr_Format(PyExc_TypeError, "text %zd is %.100s, not str", t, Py_TYPE(text)->tp_name);
            c->broken = t > 0;
            Py_DECREF(texts);
            return NULL;
        }
        if (count_text(c, text) < 0) {
            c->broken = 1;
            Py_DECREF(texts);
            return NULL;
        }
    }
    Py_DECREF(texts);
    Py_RETURN_NONE;
}

/* add_utf8(data, offsets): count the pretokens of the texts data[offsets[t]:offsets[t + 1]], as
 * add() counts them; data a bytes-like object of valid UTF-8 (the caller checks it), offsets n + 1
 * int64 positions in it (see Encoder.encode_utf8). */
static PyObject *PretokenCounter_add_utf8(PretokenCounter *c, PyObject *args) {
    Py_buffer data, offsets;
    if (!PyArg_ParseTuple(args, "y*y*", &data, &offsets)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t m;
    int64_t *at = check_counter(c) < 0 ? NULL : text_offsets(&data, &offsets, &m);
    if (at != NULL) {
        const uint8_t *s = (const uint8_t *)data.buf;
        int status = 0;
        for (Py_ssize_t t = 0; t < m && status == 0; t++) {
            const uint8_t *text = s + at[t];
            size_t n = (size_t)(at[t + 1] - at[t]), i = 0;
            while (i < n) {
                size_t end = next_pretoken(c->pattern, text, n, i);
                if (count_pretoken(c, text + i, end - i) < 0) {
                    c->broken = 1;
                    status = -1;
                    break;
                }
                i = end;
            }
        }
        PyMem_Free(at);
        if (status == 0) {
            Py_INCREF(Py_None);
            result = Py_None;
        }
    }
    PyBuffer_Release(&data);
    PyBuffer_Release(&offsets);
    return result;
}

/* add_piece(text, final) -> tail: count the pretokens of text that no following text can change
 * (all of them when final); returns the rest of text, to be prepended to the next piece. */
static PyObject *PretokenCounter_add_piece(PretokenCounter *c, PyObject *args) {
    PyObject *text;
    int final;
    if (!PyArg_ParseTuple(args, "Up", &text, &final)) return NULL;
    if (check_counter(c) < 0) return NULL;
    PyObject *holder;
    size_t n, i = 0, end;
    const uint8_t *s = text_bytes(text, &n, &holder);
    if (s == NULL) return NULL;
    while (i < n && (end = stream_next(c->pattern, s, n, i, final)) != 0) {
        if (count_pretoken(c, s + i, end - i) < 0) {
            c->broken = i > 0;
            Py_XDECREF(holder);
            return NULL;
        }
        i = end;
    }
    PyObject *tail = stream_tail(s, n, i);
    Py_XDECREF(holder);
    return tail;
}

/* items() -> (pretokens: list[str], counts: list[int]), in first-seen order. */
static PyObject *PretokenCounter_items(PretokenCounter *c, PyObject *Py_UNUSED(ignored)) {
    if (check_counter(c) < 0) return NULL;
    size_t n = c->counts.n_entries;
    PyObject *keys = PyList_New((Py_ssize_t)n);
    PyObject *counts = PyList_New((Py_ssize_t)n);
    if (keys == NULL || counts == NULL) goto fail;
    for (size_t x = 0; x < n; x++) {
        const CountEntry *entry = (const CountEntry *)bytes_entry(&c->counts, x);
        PyObject *key = PyUnicode_DecodeUTF8((const char *)c->counts.arena + entry->key.key_offset,
                                             (Py_ssize_t)entry->key.key_length, "surrogatepass");
        if (key == NULL) goto fail;
        PyList_SET_ITEM(keys, (Py_ssize_t)x, key);
        PyObject *count = PyLong_FromLongLong(entry->count);
        if (count == NULL) goto fail;
        PyList_SET_ITEM(counts, (Py_ssize_t)x, count);
    }
    PyObject *result = PyTuple_Pack(2, keys, counts);
    Py_DECREF(keys);
    Py_DECREF(counts);
    return result;
fail:
    Py_XDECREF(keys);
    Py_XDECREF(counts);
    return NULL;
}

/* The entries order[0..n) as the buffers of an Arrow string array (int32 offsets, UTF-8 data) and
 * an int64 array: (offsets, data, counts), no Python object per pretoken. */
static PyObject *count_buffers(const PretokenCounter *c, const int32_t *order, size_t n) {
    size_t total = 0;
    for (size_t x = 0; x < n; x++) total += ((const CountEntry *)bytes_entry(&c->counts, (size_t)order[x]))->key.key_length;
    if (total > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "the pretokens hold more than 2 GiB; flush the counter sooner");
        return NULL;
    }
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((n + 1) * sizeof(int32_t)));
    PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    PyObject *counts = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(int64_t)));
    if (offsets == NULL || data == NULL || counts == NULL) {
        Py_XDECREF(offsets);
        Py_XDECREF(data);
        Py_XDECREF(counts);
        return NULL;
    }
    int32_t *offset_of = (int32_t *)PyBytes_AS_STRING(offsets);
    int64_t *count_of = (int64_t *)PyBytes_AS_STRING(counts);
    char *out = PyBytes_AS_STRING(data);
    size_t at = 0;
    for (size_t x = 0; x < n; x++) {
        const CountEntry *entry = (const CountEntry *)bytes_entry(&c->counts, (size_t)order[x]);
        offset_of[x] = (int32_t)at;
        memcpy(out + at, c->counts.arena + entry->key.key_offset, entry->key.key_length);
        at += entry->key.key_length;
        count_of[x] = entry->count;
    }
    offset_of[n] = (int32_t)at;
    PyObject *result = PyTuple_Pack(3, offsets, data, counts);
    Py_DECREF(offsets);
    Py_DECREF(data);
    Py_DECREF(counts);
    return result;
}

/* Entry numbers ordered by (hash, bytes): a hashed entry, for the radix sort. */
typedef struct {
    uint64_t hash;
    int32_t entry;
} HashedEntry;

/* 1 when entry a's bytes sort before entry b's (memcmp order, a prefix first). */
static int bytes_before(const BytesTable *t, int32_t a, int32_t b) {
    const BytesKey *ka = bytes_entry(t, (size_t)a), *kb = bytes_entry(t, (size_t)b);
    size_t la = ka->key_length, lb = kb->key_length;
    int c = memcmp(t->arena + ka->key_offset, t->arena + kb->key_offset, la < lb ? la : lb);
    return c != 0 ? c < 0 : la < lb;
}

/* The n entries of t in order of their hash, then (for the rare equal hashes) of their bytes:
 * an order that depends only on the keys, not on when they were counted. A radix sort (eight
 * passes of a byte); -1 with MemoryError set. */
static int order_by_hash(const BytesTable *t, int32_t *order, size_t n) {
    HashedEntry *a = bpe_alloc_array(n ? n : 1, sizeof(HashedEntry));
    HashedEntry *b = a ? bpe_alloc_array(n ? n : 1, sizeof(HashedEntry)) : NULL;
    if (b == NULL) {
        PyMem_Free(a);
        return -1;
    }
    for (size_t x = 0; x < n; x++) a[x] = (HashedEntry){bytes_entry(t, x)->hash, (int32_t)x};
    for (int shift = 0; shift < 64; shift += 8) {
        size_t count[257] = {0};
        for (size_t x = 0; x < n; x++) count[((a[x].hash >> shift) & 255) + 1]++;
        for (int d = 0; d < 256; d++) count[d + 1] += count[d];
        for (size_t x = 0; x < n; x++) b[count[(a[x].hash >> shift) & 255]++] = a[x];
        HashedEntry *swap = a;
        a = b;
        b = swap;
    }
    for (size_t x = 0; x < n; x++) { /* equal hashes: insertion sort by bytes (runs of one or two) */
        size_t y = x;
        HashedEntry item = a[x];
        while (y > 0 && a[y - 1].hash == item.hash && bytes_before(t, item.entry, a[y - 1].entry)) {
            a[y] = a[y - 1];
            y--;
        }
        a[y] = item;
    }
    for (size_t x = 0; x < n; x++) order[x] = a[x].entry;
    PyMem_Free(a);
    PyMem_Free(b);
    return 0;
}

/* buffers(sort=False) -> (offsets, data, counts): the items as Arrow buffers (count_buffers),
 * first seen first, or with sort in order_by_hash's order (the same buffers whatever order the
 * pretokens were counted in). */
static PyObject *PretokenCounter_buffers(PretokenCounter *c, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"sort", NULL};
    int sort = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p", kwlist, &sort)) return NULL;
    if (check_counter(c) < 0) return NULL;
    size_t n = c->counts.n_entries;
    int32_t *order = bpe_alloc_array(n ? n : 1, sizeof(int32_t));
    if (order == NULL) return NULL;
    for (size_t x = 0; x < n; x++) order[x] = (int32_t)x;
    if (sort && n > 1 && order_by_hash(&c->counts, order, n) < 0) {
        PyMem_Free(order);
        return NULL;
    }
    PyObject *result = count_buffers(c, order, n);
    PyMem_Free(order);
    return result;
}

/* The bucket of n_buckets a pretoken goes to: from the high bits of its hash (hash_bytes has no
 * seed, so every process puts a pretoken in the same bucket). */
static inline size_t bucket_of(uint64_t hash, size_t n_buckets) { return (size_t)((hash >> 32) % n_buckets); }

/* bucket_buffers(n_buckets) -> [(offsets, data, counts), ...]: the items split by bucket_of, each
 * bucket's as buffers() gives them (first seen first within a bucket). */
static PyObject *PretokenCounter_bucket_buffers(PretokenCounter *c, PyObject *arg) {
    Py_ssize_t n_buckets = PyLong_AsSsize_t(arg);
    if (n_buckets == -1 && PyErr_Occurred()) return NULL;
    if (n_buckets < 1 || n_buckets > (1 << 20)) {
        PyErr_SetString(PyExc_ValueError, "bucket_buffers() takes 1 to 2**20 buckets");
        return NULL;
    }
    if (check_counter(c) < 0) return NULL;
    size_t n = c->counts.n_entries, buckets = (size_t)n_buckets;
    int32_t *order = bpe_alloc_array(n ? n : 1, sizeof(int32_t));
    size_t *start = order ? bpe_calloc_array(buckets + 1, sizeof(size_t)) : NULL;
    PyObject *result = start ? PyList_New(n_buckets) : NULL;
    if (result == NULL) goto done;
    for (size_t x = 0; x < n; x++) start[bucket_of(bytes_entry(&c->counts, x)->hash, buckets) + 1]++;
    for (size_t b = 0; b < buckets; b++) start[b + 1] += start[b];
    for (size_t x = 0; x < n; x++) order[start[bucket_of(bytes_entry(&c->counts, x)->hash, buckets)]++] = (int32_t)x;
    /* start[b] is now bucket b's end */
    for (size_t b = 0, from = 0; b < buckets; from = start[b], b++) {
        PyObject *item = count_buffers(c, order + from, start[b] - from);
        if (item == NULL) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, (Py_ssize_t)b, item);
    }
done:
    PyMem_Free(order);
    PyMem_Free(start);
    return result;
}

/* add_counts(offsets, data, counts): add counted pretokens, buffers as buffers() gives them
 * (int32 offsets, n + 1 of them, into UTF-8 data; int64 counts, n of them): the sum of two
 * counters, or of many partial counts of one corpus. */
static PyObject *PretokenCounter_add_counts(PretokenCounter *c, PyObject *args) {
    Py_buffer offsets, data, counts;
    if (!PyArg_ParseTuple(args, "y*y*y*", &offsets, &data, &counts)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = counts.len / (Py_ssize_t)sizeof(int64_t);
    if (check_counter(c) < 0) goto done;
    if (counts.len % (Py_ssize_t)sizeof(int64_t) != 0 || offsets.len != (n + 1) * (Py_ssize_t)sizeof(int32_t)) {
        PyErr_SetString(PyExc_ValueError, "add_counts() takes n + 1 int32 offsets and n int64 counts");
        goto done;
    }
    const uint8_t *bytes = (const uint8_t *)data.buf;
    for (Py_ssize_t x = 0; x < n; x++) {
        int32_t lo, hi;
        int64_t count;
        memcpy(&lo, (const char *)offsets.buf + x * 4, 4); /* the buffers may be unaligned */
        memcpy(&hi, (const char *)offsets.buf + (x + 1) * 4, 4);
        memcpy(&count, (const char *)counts.buf + x * 8, 8);
        if (lo < 0 || hi < lo || hi > data.len || count < 0) {
            PyErr_Format(PyExc_ValueError, "add_counts(): entry %zd has offsets %d..%d into %zd bytes and count %lld",
                         x, lo, hi, data.len, (long long)count);
            c->broken = x > 0;
            goto done;
        }
        uint64_t h = hash_bytes(bytes + lo, (size_t)(hi - lo));
        CountEntry *entry = (CountEntry *)bytes_find(&c->counts, bytes + lo, (size_t)(hi - lo), h);
        if (entry == NULL) {
            entry = (CountEntry *)bytes_add(&c->counts, bytes + lo, (size_t)(hi - lo), h);
            if (entry == NULL) {
                c->broken = x > 0;
                goto done;
            }
        }
        if (count_add_overflow(entry->count, count, &entry->count)) {
            PyErr_SetString(PyExc_OverflowError, "a pretoken's count exceeds 64 bits");
            c->broken = 1;
            goto done;
        }
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&data);
    PyBuffer_Release(&counts);
    return result;
}

static PyObject *PretokenCounter_clear(PretokenCounter *c, PyObject *Py_UNUSED(ignored)) {
    bytes_clear(&c->counts);
    c->broken = 0;
    Py_RETURN_NONE;
}

static Py_ssize_t PretokenCounter_len(PretokenCounter *c) {
    return check_counter(c) < 0 ? -1 : (Py_ssize_t)c->counts.n_entries;
}

static PyMethodDef PretokenCounter_methods[] = {
    {"add", (PyCFunction)PretokenCounter_add, METH_O, "add(texts): count the pretokens of each text."},
    {"add_utf8", (PyCFunction)PretokenCounter_add_utf8, METH_VARARGS,
     "add_utf8(data, offsets: int64 bytes): count the pretokens of texts of valid UTF-8 in one buffer."},
    {"add_piece", (PyCFunction)PretokenCounter_add_piece, METH_VARARGS,
     "add_piece(text, final) -> tail: one piece of a long text (see STREAM_MARGIN)."},
    {"items", (PyCFunction)PretokenCounter_items, METH_NOARGS,
     "items() -> (pretokens, counts): the distinct pretokens and their counts, first seen first."},
    {"buffers", (PyCFunction)(void (*)(void))PretokenCounter_buffers, METH_VARARGS | METH_KEYWORDS,
     "buffers(sort=False) -> (int32 offsets, UTF-8 data, int64 counts): the items as Arrow buffers, "
     "first seen first or sorted by their hash (an order of the keys alone)."},
    {"bucket_buffers", (PyCFunction)PretokenCounter_bucket_buffers, METH_O,
     "bucket_buffers(n) -> [(offsets, data, counts)] * n: the items split into n buckets by their hash."},
    {"add_counts", (PyCFunction)PretokenCounter_add_counts, METH_VARARGS,
     "add_counts(offsets, data, counts): add counted pretokens, in buffers() form."},
    {"clear", (PyCFunction)PretokenCounter_clear, METH_NOARGS, "Forget every count."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods PretokenCounter_as_sequence = {
    .sq_length = (lenfunc)PretokenCounter_len,
};

static PyTypeObject PretokenCounterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bpe_spark.native._fastenc.PretokenCounter",
    .tp_doc = "PretokenCounter(pattern): counts the pretokens of texts (a compiled preset), in C.",
    .tp_basicsize = sizeof(PretokenCounter),
    .tp_itemsize = 0,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)PretokenCounter_init,
    .tp_dealloc = (destructor)PretokenCounter_dealloc,
    .tp_methods = PretokenCounter_methods,
    .tp_as_sequence = &PretokenCounter_as_sequence,
};

static PyMethodDef module_methods[] = {
    {"set_char_classes", (PyCFunction)set_char_classes, METH_O,
     "set_char_classes(ranges): the \\p{L} / \\p{N} / \\s code points, as the regex module has them."},
    {"has_char_classes", (PyCFunction)has_char_classes, METH_NOARGS, "True once set_char_classes ran."},
    {"_pretoken_ends", (PyCFunction)pretoken_ends, METH_VARARGS,
     "Test hook: _pretoken_ends(pattern, data: bytes) -> the end offset of each pretoken."},
    JSONL_TEXTS_METHOD,
    FAIL_ALLOCATIONS_METHOD,
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastenc_module = {
    PyModuleDef_HEAD_INIT, "_fastenc", "Compiled pretokenizer and BPE encoder of bpe_spark.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__fastenc(void) {
    if (PyType_Ready(&EncoderType) < 0 || PyType_Ready(&PretokenCounterType) < 0) return NULL;
    PyObject *m = PyModule_Create(&fastenc_module);
    if (m == NULL) return NULL;
    /* bpe_spark/native/compiled.py checks this: a stale build (older source) is not used */
    if (PyModule_AddIntConstant(m, "API_VERSION", 8) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&EncoderType);
    if (PyModule_AddObject(m, "Encoder", (PyObject *)&EncoderType) < 0) {
        Py_DECREF(&EncoderType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&PretokenCounterType);
    if (PyModule_AddObject(m, "PretokenCounter", (PyObject *)&PretokenCounterType) < 0) {
        Py_DECREF(&PretokenCounterType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
