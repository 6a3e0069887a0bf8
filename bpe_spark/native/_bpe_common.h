/* bpe_spark/native/_bpe_common.h: what the two C extensions (_fastbpe.c, _fastenc.c) share. Each one
 * includes it and gets its own static copy of everything here.
 *
 * - Allocation: every allocation goes through bpe_malloc / bpe_realloc_array / ..., which set
 *   MemoryError when they fail, and which a test can make fail on purpose
 *   (_fail_allocations_after): the error paths are proven, not assumed.
 * - Growth: capacities double, and every size computation is checked: a size that does not fit
 *   a size_t raises MemoryError, never allocates a wrapped, too small block.
 * - Hashing: mix64 (a 64-bit finalizer), pair_hash for (left, right) id pairs, hash_bytes for
 *   byte strings.
 * - Tables: slot arrays (open addressing over int32 entry numbers, -1 empty, a power-of-two
 *   number of slots) and BytesTable, a map from byte strings (kept in one arena) to fixed-size
 *   entries: the encoder's pretoken cache and the pretoken counter.
 */
#ifndef BPE_SPARK_COMMON_H
#define BPE_SPARK_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* --- overflow-checked arithmetic ------------------------------------------------------------ */

static inline int size_mul_overflow(size_t a, size_t b, size_t *out) {
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_mul_overflow(a, b, out);
#else
    if (a != 0 && b > SIZE_MAX / a) return 1;
    *out = a * b;
    return 0;
#endif
}

static inline int size_add_overflow(size_t a, size_t b, size_t *out) {
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_add_overflow(a, b, out);
#else
    if (b > SIZE_MAX - a) return 1;
    *out = a + b;
    return 0;
#endif
}

/* For counts: the operands are never negative. */
static inline int count_mul_overflow(int64_t a, int64_t b, int64_t *out) {
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_mul_overflow(a, b, out);
#else
    if (a != 0 && b > INT64_MAX / a) return 1;
    *out = a * b;
    return 0;
#endif
}

static inline int count_add_overflow(int64_t a, int64_t b, int64_t *out) {
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_add_overflow(a, b, out);
#else
    if (b > INT64_MAX - a) return 1;
    *out = a + b;
    return 0;
#endif
}

/* --- allocation ------------------------------------------------------------------------------ */

/* The test hook: how many allocations succeed before one fails (then it is disarmed); -1 when
 * none is to fail. One compare per allocation. */
static Py_ssize_t allocations_before_failure = -1;

static inline int allocation_fails(void) {
    if (allocations_before_failure < 0) return 0;
    return allocations_before_failure-- == 0;
}

/* _fail_allocations_after(n): the allocation after the next n fails (n = -1: none does). Returns
 * what was armed before: -1 when no failure was pending (it happened, or none was armed). */
static PyObject *fail_allocations_after(PyObject *Py_UNUSED(module), PyObject *arg) {
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t pending = allocations_before_failure;
    allocations_before_failure = n < 0 ? -1 : n;
    return PyLong_FromSsize_t(pending);
}

#define FAIL_ALLOCATIONS_METHOD                                                                      \
    {"_fail_allocations_after", (PyCFunction)fail_allocations_after, METH_O,                         \
     "Test hook: the allocation after the next n fails (-1: none); returns the pending count."}

/* Allocations: NULL with MemoryError set on failure. */
static inline void *bpe_malloc(size_t bytes) {
    void *p = allocation_fails() ? NULL : PyMem_Malloc(bytes);
    return p == NULL ? (void *)PyErr_NoMemory() : p;
}

static inline void *bpe_alloc_array(size_t n, size_t item) {
    size_t bytes;
    if (size_mul_overflow(n, item, &bytes)) return (void *)PyErr_NoMemory();
    return bpe_malloc(bytes);
}

static inline void *bpe_calloc_array(size_t n, size_t item) {
    void *p = allocation_fails() ? NULL : PyMem_Calloc(n, item); /* PyMem_Calloc checks n * item */
    return p == NULL ? (void *)PyErr_NoMemory() : p;
}

/* ptr resized to n items; on failure ptr is left as it was (still the caller's). */
static inline void *bpe_realloc_array(void *ptr, size_t n, size_t item) {
    size_t bytes;
    if (size_mul_overflow(n, item, &bytes)) return (void *)PyErr_NoMemory();
    void *p = allocation_fails() ? NULL : PyMem_Realloc(ptr, bytes);
    return p == NULL ? (void *)PyErr_NoMemory() : p;
}

/* The capacity for need items: cap (or first, when cap is 0) doubled until it holds them, so a
 * power of two stays one; 0 when that would overflow. */
static inline size_t grown_capacity(size_t cap, size_t need, size_t first) {
    size_t n = cap ? cap : first;
    while (n < need) {
        if (n > SIZE_MAX / 2) return 0;
        n *= 2;
    }
    return n;
}

/* ptr with room for used + extra items of item bytes: grown (doubling, from first items when
 * empty) when needed, and allocated when ptr is NULL even if nothing is needed. NULL with
 * MemoryError set when it cannot; ptr is then as it was. */
static inline void *grow_array(void *ptr, size_t *cap, size_t used, size_t extra, size_t item, size_t first) {
    size_t need;
    if (size_add_overflow(used, extra, &need)) return (void *)PyErr_NoMemory();
    if (need <= *cap && ptr != NULL) return ptr;
    size_t n = grown_capacity(*cap, need, first);
    if (n == 0) return (void *)PyErr_NoMemory();
    void *p = bpe_realloc_array(ptr, n, item);
    if (p != NULL) *cap = n;
    return p;
}

/* --- hashing ---------------------------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* (left, right) as one 64-bit key, and its hash. */
static inline uint64_t pair_key(int32_t left, int32_t right) {
    return ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
}

static inline uint64_t pair_hash(int32_t left, int32_t right) { return mix64(pair_key(left, right)); }

static inline uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t k;
        memcpy(&k, p, 8);
        h = mix64(h ^ k) + 0x632be59bd9b4e019ULL;
        p += 8;
        n -= 8;
    }
    uint64_t k = 0;
    if (n > 0) memcpy(&k, p, n);
    return mix64(h ^ k ^ ((uint64_t)n << 56));
}

/* --- slot arrays ------------------------------------------------------------------------------ */

/* n_slots empty slots (-1); NULL with MemoryError set. */
static inline int32_t *new_slots(size_t n_slots) {
    int32_t *slots = bpe_alloc_array(n_slots, sizeof(int32_t));
    if (slots != NULL) memset(slots, 0xff, n_slots * sizeof(int32_t));
    return slots;
}

/* The first empty slot from hash on (linear probing; the slots are never all taken). */
static inline size_t empty_slot(const int32_t *slots, size_t n_slots, uint64_t hash) {
    size_t mask = n_slots - 1, i = (size_t)hash & mask;
    while (slots[i] >= 0) i = (i + 1) & mask;
    return i;
}

/* 2 * n, or 0 when that overflows. */
static inline size_t doubled(size_t n) {
    size_t twice;
    return size_mul_overflow(n, 2, &twice) ? 0 : twice;
}

/* --- a table of byte strings ------------------------------------------------------------------ */

/* The head of every BytesTable entry: the key is arena[key_offset:key_offset + key_length]. */
typedef struct {
    uint64_t hash;
    size_t key_offset, key_length;
} BytesKey;

/* Entries of entry_size bytes (a BytesKey, then the user's fields) in first-added order; slots
 * at a load of 1/2 at most. Zero-initialized but for entry_size and min_slots. */
typedef struct {
    char *entries;
    size_t entry_size, n_entries, entries_cap;
    int32_t *slots; /* -1 empty, else an entry number */
    size_t n_slots, min_slots;
    uint8_t *arena;
    size_t arena_used, arena_cap;
} BytesTable;

static inline BytesKey *bytes_entry(const BytesTable *t, size_t x) {
    return (BytesKey *)(t->entries + x * t->entry_size);
}

/* The entry of key p[0:len] (its hash_bytes h), or NULL when absent. */
static inline BytesKey *bytes_find(const BytesTable *t, const uint8_t *p, size_t len, uint64_t h) {
    if (t->n_slots == 0) return NULL;
    size_t mask = t->n_slots - 1, i = (size_t)h & mask;
    for (;;) {
        int32_t x = t->slots[i];
        if (x < 0) return NULL;
        BytesKey *key = bytes_entry(t, (size_t)x);
        if (key->hash == h && key->key_length == len && memcmp(t->arena + key->key_offset, p, len) == 0) {
            return key;
        }
        i = (i + 1) & mask;
    }
}

static inline int bytes_rehash(BytesTable *t) {
    size_t n_slots = t->n_slots ? doubled(t->n_slots) : t->min_slots;
    if (n_slots == 0) return PyErr_NoMemory(), -1;
    int32_t *slots = new_slots(n_slots);
    if (slots == NULL) return -1;
    for (size_t x = 0; x < t->n_entries; x++) {
        slots[empty_slot(slots, n_slots, bytes_entry(t, x)->hash)] = (int32_t)x;
    }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->n_slots = n_slots;
    return 0;
}

/* A new entry for key p[0:len] (hash h, not in the table yet), its other fields zero; NULL with
 * an error set when it cannot be added, and the table then holds what it held. */
static inline BytesKey *bytes_add(BytesTable *t, const uint8_t *p, size_t len, uint64_t h) {
    if (t->n_entries >= INT32_MAX - 1) {
        PyErr_SetString(PyExc_OverflowError, "too many distinct keys for one table");
        return NULL;
    }
    if ((t->n_entries + 1) * 2 > t->n_slots && bytes_rehash(t) < 0) return NULL;
    uint8_t *arena = grow_array(t->arena, &t->arena_cap, t->arena_used, len, 1, (size_t)1 << 16);
    if (arena == NULL) return NULL;
    t->arena = arena;
    char *entries = grow_array(t->entries, &t->entries_cap, t->n_entries, 1, t->entry_size, 4096);
    if (entries == NULL) return NULL;
    t->entries = entries;
    BytesKey *key = bytes_entry(t, t->n_entries);
    memset(key, 0, t->entry_size);
    key->hash = h;
    key->key_offset = t->arena_used;
    key->key_length = len;
    if (len > 0) memcpy(t->arena + t->arena_used, p, len);
    t->arena_used += len;
    t->slots[empty_slot(t->slots, t->n_slots, h)] = (int32_t)t->n_entries++;
    return key;
}

/* Forget every entry; the memory is kept for the next ones. */
static inline void bytes_clear(BytesTable *t) {
    t->n_entries = 0;
    t->arena_used = 0;
    if (t->slots) memset(t->slots, 0xff, t->n_slots * sizeof(int32_t));
}

static inline void bytes_free(BytesTable *t) {
    PyMem_Free(t->entries);
    PyMem_Free(t->slots);
    PyMem_Free(t->arena);
    t->entries = NULL;
    t->slots = NULL;
    t->arena = NULL;
    t->n_entries = t->entries_cap = t->n_slots = t->arena_used = t->arena_cap = 0;
}

#endif /* BPE_SPARK_COMMON_H */
