/* bpe_spark/native/_pretoken_cache.h: the compiled encoder's pretoken cache (_fastenc.c): the UTF-8
 * bytes of a pretoken -> its ids.
 *
 * Laid out for a hit in one cache line: open addressing (linear probing) over 32-byte slots
 * that hold a short key itself (up to 16 bytes, zero padded: most pretokens) and up to two ids
 * (most pretokens are one token), so a hit on a short pretoken reads one slot and nothing else.
 * A longer key lives in an arena (the slot keeps its offset and hash), as do the ids of a
 * pretoken of three ids or more. Slots are at a load of 1/2 at most, aligned to 32 bytes.
 *
 * The arenas have budgets (CACHE_KEY_BYTES, CACHE_IDS): the cache starts over when an entry
 * would pass one, as when it reaches its entry limit.
 *
 * The cache only remembers: a miss is computed by the caller and added; the ids are the same
 * with or without it (tests/encoding/test_encoder_equivalence.py, tests/native/test_compiled_ranks.py).
 */
#ifndef BPE_SPARK_PRETOKEN_CACHE_H
#define BPE_SPARK_PRETOKEN_CACHE_H

#include "_bpe_common.h"

#define SHORT_KEY 16   /* keys of at most this many bytes live in their slot */
#define INLINE_IDS 2   /* pretokens of at most this many ids keep them in their slot */
#define SLOT_ALIGN 32

typedef struct {
    /* a short key: its bytes, zero padded; a long one: k0 = its offset in keys, k1 = its hash */
    uint64_t k0, k1;
    uint32_t length; /* of the key, in bytes; 0: an empty slot */
    uint32_t count;  /* of its ids */
    union {
        int32_t ids[INLINE_IDS]; /* count <= INLINE_IDS */
        uint32_t offset;         /* else: ids[offset:offset + count] */
    } v;
} CacheSlot;

typedef struct {
    char *raw; /* the allocation of slots (aligned inside it) */
    CacheSlot *slots;
    size_t n_slots, n_entries, min_slots;
    uint8_t *keys; /* the bytes of the long keys */
    size_t keys_used, keys_cap;
    int32_t *ids; /* the ids of pretokens of more than INLINE_IDS ids */
    size_t ids_used, ids_cap;
} PretokenCache;

/* A key read once, for a lookup and then an insert. */
typedef struct {
    uint64_t k0, k1, hash;
} CacheKey;

/* p[0:len) (1 <= len <= 16) as two little-endian words, zero padded, without reading a byte
 * outside it: overlapping loads of the first and the last bytes. */
static inline void short_words(const uint8_t *p, size_t len, uint64_t *k0, uint64_t *k1) {
    uint64_t a = 0, b = 0;
    if (len >= 8) {
        memcpy(&a, p, 8);
        if (len > 8) {
            memcpy(&b, p + len - 8, 8);
            b >>= 8 * (16 - len);
        }
    } else if (len >= 4) {
        uint32_t x, y;
        memcpy(&x, p, 4);
        memcpy(&y, p + len - 4, 4);
        a = (uint64_t)x | ((uint64_t)(y >> (8 * (8 - len))) << 32);
    } else {
        a = (uint64_t)p[0] | ((uint64_t)p[len / 2] << (8 * (len / 2))) | ((uint64_t)p[len - 1] << (8 * (len - 1)));
    }
    *k0 = a;
    *k1 = b;
}

static inline uint64_t short_hash(uint64_t k0, uint64_t k1, size_t len) {
    return mix64(k0 ^ ((uint64_t)len << 58)) ^ mix64(k1 + 0x9e3779b97f4a7c15ULL);
}

static inline void cache_key(CacheKey *key, const uint8_t *p, size_t len) {
    if (len <= SHORT_KEY) {
        short_words(p, len, &key->k0, &key->k1);
        key->hash = short_hash(key->k0, key->k1, len);
    } else {
        key->k0 = 0;
        key->hash = key->k1 = hash_bytes(p, len);
    }
}

static inline uint64_t slot_hash(const CacheSlot *slot) {
    return slot->length <= SHORT_KEY ? short_hash(slot->k0, slot->k1, slot->length) : slot->k1;
}

static inline const int32_t *slot_ids(const PretokenCache *c, const CacheSlot *slot) {
    return slot->count <= INLINE_IDS ? slot->v.ids : c->ids + slot->v.offset;
}

/* The ids of key p[0:len) (len >= 1) and their count, or NULL when it is not cached. The
 * pointer holds until the next cache_add or cache_clear. */
static inline const int32_t *cache_find(const PretokenCache *c, const CacheKey *key, const uint8_t *p, size_t len,
                                        size_t *count) {
    if (c->n_slots == 0) return NULL;
    size_t mask = c->n_slots - 1, i = (size_t)key->hash & mask;
    for (;;) {
        const CacheSlot *slot = c->slots + i;
        if (slot->length == 0) return NULL;
        if (slot->length == len && slot->k1 == key->k1 &&
            (len <= SHORT_KEY ? slot->k0 == key->k0 : memcmp(c->keys + slot->k0, p, len) == 0)) {
            *count = slot->count;
            return slot_ids(c, slot);
        }
        i = (i + 1) & mask;
    }
}

/* Ask for the slot a lookup of this hash starts from (a hint: the table may change before). */
static inline void prefetch_slot(const PretokenCache *c, uint64_t hash) {
    if (c->n_slots) __builtin_prefetch(c->slots + ((size_t)hash & (c->n_slots - 1)));
}

static inline CacheSlot *cache_empty_slot(CacheSlot *slots, size_t n_slots, uint64_t hash) {
    size_t mask = n_slots - 1, i = (size_t)hash & mask;
    while (slots[i].length != 0) i = (i + 1) & mask;
    return slots + i;
}

/* n_slots empty slots, aligned; -1 with MemoryError set. */
static int cache_new_slots(size_t n_slots, char **raw, CacheSlot **slots) {
    size_t bytes;
    if (size_mul_overflow(n_slots, sizeof(CacheSlot), &bytes) || size_add_overflow(bytes, SLOT_ALIGN, &bytes)) {
        PyErr_NoMemory();
        return -1;
    }
    *raw = bpe_malloc(bytes);
    if (*raw == NULL) return -1;
    uintptr_t at = ((uintptr_t)*raw + SLOT_ALIGN - 1) & ~(uintptr_t)(SLOT_ALIGN - 1);
    *slots = (CacheSlot *)at;
    memset(*slots, 0, n_slots * sizeof(CacheSlot));
    return 0;
}

static int cache_rehash(PretokenCache *c) {
    size_t n_slots = c->n_slots ? doubled(c->n_slots) : c->min_slots;
    char *raw;
    CacheSlot *slots;
    if (n_slots == 0) return PyErr_NoMemory(), -1;
    if (cache_new_slots(n_slots, &raw, &slots) < 0) return -1;
    for (size_t x = 0; x < c->n_slots; x++) {
        const CacheSlot *slot = c->slots + x;
        if (slot->length != 0) *cache_empty_slot(slots, n_slots, slot_hash(slot)) = *slot;
    }
    PyMem_Free(c->raw);
    c->raw = raw;
    c->slots = slots;
    c->n_slots = n_slots;
    return 0;
}

/* Remember key p[0:len) (not cached yet) -> ids[0:count) (count <= UINT32_MAX); returns its
 * cached ids, or NULL with an error set (the cache then holds what it held). The caller keeps
 * the arenas' offsets in range (cache_room). */
static const int32_t *cache_add(PretokenCache *c, const CacheKey *key, const uint8_t *p, size_t len,
                                const int32_t *ids, size_t count) {
    if ((c->n_entries + 1) * 2 > c->n_slots && cache_rehash(c) < 0) return NULL;
    if (len > SHORT_KEY) {
        uint8_t *keys = grow_array(c->keys, &c->keys_cap, c->keys_used, len, 1, (size_t)1 << 16);
        if (keys == NULL) return NULL;
        c->keys = keys;
    }
    if (count > INLINE_IDS) {
        int32_t *arena = grow_array(c->ids, &c->ids_cap, c->ids_used, count, sizeof(int32_t), (size_t)1 << 14);
        if (arena == NULL) return NULL;
        c->ids = arena;
    }
    CacheSlot *slot = cache_empty_slot(c->slots, c->n_slots, key->hash);
    slot->length = (uint32_t)len;
    slot->count = (uint32_t)count;
    slot->k1 = key->k1;
    if (len <= SHORT_KEY) {
        slot->k0 = key->k0;
    } else {
        slot->k0 = c->keys_used;
        memcpy(c->keys + c->keys_used, p, len);
        c->keys_used += len;
    }
    if (count <= INLINE_IDS) {
        memcpy(slot->v.ids, ids, count * sizeof(int32_t));
    } else {
        slot->v.offset = (uint32_t)c->ids_used;
        memcpy(c->ids + c->ids_used, ids, count * sizeof(int32_t));
        c->ids_used += count;
    }
    c->n_entries++;
    return slot_ids(c, slot);
}

/* The arenas' budgets (well within their 32-bit offsets): 64 MB of long keys and 16 Mi ids of
 * pretokens of three ids or more. Long pretokens (a superbpe gap may span sentences) would
 * otherwise grow the arenas to gigabytes before the entry limit starts the cache over. */
#define CACHE_KEY_BYTES ((size_t)1 << 26)
#define CACHE_IDS ((size_t)1 << 24)

/* Whether a pretoken of len bytes and count ids may be cached at all (it fits an empty cache). */
static inline int cache_fits(size_t len, size_t count) {
    return len <= CACHE_KEY_BYTES && count <= CACHE_IDS;
}

/* Whether an entry of key length len and count ids still fits the arenas' budgets. */
static inline int cache_room(const PretokenCache *c, size_t len, size_t count) {
    return c->ids_used + count <= CACHE_IDS && c->keys_used + len <= CACHE_KEY_BYTES;
}

/* Forget every entry; the memory is kept for the next ones. */
static void cache_clear(PretokenCache *c) {
    if (c->slots) memset(c->slots, 0, c->n_slots * sizeof(CacheSlot));
    c->n_entries = c->keys_used = c->ids_used = 0;
}

static void cache_free(PretokenCache *c) {
    PyMem_Free(c->raw);
    PyMem_Free(c->keys);
    PyMem_Free(c->ids);
    size_t min_slots = c->min_slots;
    memset(c, 0, sizeof(*c));
    c->min_slots = min_slots;
}

#endif /* BPE_SPARK_PRETOKEN_CACHE_H */
