/* bpe_spark.native._fastbpe: the optional compiled core of the exact BPE merge engine.
 *
 * The pure-Python engine in bpe_spark/training/trainer.py is the reference; this module does the same
 * work with flat arrays: every word in one symbol buffer (uint16 ids while they fit), merged in
 * place; pair counts in an open-addressing hash table keyed by (left, right); an index from
 * pairs to the words that hold them; and a lazily updated binary max-heap. Each merge touches
 * only the words holding its pair, and within a word only the neighbours of each merge position
 * (delta updates), so a long CJK pretoken costs a scan, not a full recount.
 *
 * Memory is what bounds the driver (the words of every distinct pretoken live here), so only
 * what the next merges need is kept: the heap holds the pairs above a falling floor (refill()),
 * only pairs near that floor have holder lists (index_holders()), dead pairs are recycled, and
 * the holder index is rebuilt from the words rather than left to fill with stale entries. Each
 * rebuild is a pass over the words with a hash probe at every position (it counts the lists and
 * notes their pairs in a trail, from which they are filled: a temporary int32 per position at
 * most), so when the caller says how many merges are left (plan()), the lists reach down to
 * what those merges can reach in fewer rebuilds, as far as the lists fit in a share of the
 * words' memory (fitting_floor()). The words a merge visits are all over the buffer, and a
 * probe is two cache misses (slot, pair): both are fetched ahead (PREFETCH_WORDS, index_pass())
 * so that the misses overlap.
 *
 * Decisions (which pair to merge, which id a merged token gets) stay in Python: `best()` names
 * the top pair, the caller allots the id through its SymbolTable, and `apply()` rewrites the
 * words. Tie-breaks: "hf" compares integer keys (smaller wins); "lexicographic" compares the
 * tokens' byte strings (greater wins; a prefix is smaller, as Python compares bytes).
 *
 * A length limit (limit(), TrainerConfig.max_token_length): each id's length, from Python, and a
 * pair whose two lengths sum past max_len is invisible: never queued in the heap, never named by
 * best(). Its count is kept as any other's (the rounds' journals need it), and it stays invisible
 * (an id's length never changes), so dropping its heap entries loses nothing.
 *
 * Errors: a failure while the state changes (an allocation in the middle of a merge, say) leaves
 * it inconsistent, so the engine is then marked broken and every later call raises RuntimeError
 * (break_engine()): never a half-merged engine that goes on giving merges.
 */
#include "_bpe_common.h"
#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#define HAVE_MMAP 1
#endif

/* --- engine --------------------------------------------------------------------------------- */

/* A pair's holders: the word indices that hold it; may hold stale or repeated entries (checked
 * on use). Up to INLINE_HOLDERS live in the Pair itself: most pairs a long run creates are held
 * by one or two words. Longer lists live in the engine's holder space (see holder_space()),
 * never freed one by one, as [n, capacity, entries...]. Where a pair's holders are is its mode,
 * kept apart in pair_state (a byte per pair) so that a Pair is 24 bytes. */
#define INLINE_HOLDERS 2
#define HS_MODE 7     /* pair_state & HS_MODE: 0..INLINE_HOLDERS inline holders, or: */
#define HS_LIST 3     /* a list in the holder space */
#define HS_UNLISTED 4 /* no list (see index_holders) */
#define HS_NEWBORN 5  /* created by the current merge: no list until it ends */
#define PS_GROWN 8    /* grown by the current merge (in the grown list) */
#define PS_FILL 16    /* created by the current merge and to be listed when it ends */
#define LIST_RATIO 4  /* the list floor is the heap floor / LIST_RATIO when set */
typedef struct {
    int64_t count;
    int32_t left, right;
    union {
        int32_t *list; /* HS_LIST */
        int32_t inline_[INLINE_HOLDERS];
    } holders;
} Pair;

typedef struct {
    int64_t count;
    int32_t pair;
} HeapEntry;

typedef struct {
    int32_t *data;
    size_t size; /* entries */
} HolderBlock;

/* Holder blocks come straight from the system (mmap) where it can: they go back whole when the
 * index is rebuilt, whatever the allocator would keep. */
static int32_t *block_alloc(size_t entries) {
    size_t bytes;
    if (size_mul_overflow(entries, sizeof(int32_t), &bytes) || allocation_fails()) return PyErr_NoMemory(), NULL;
#ifdef HAVE_MMAP
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return PyErr_NoMemory(), NULL;
    return (int32_t *)p;
#else
    int32_t *p = PyMem_RawMalloc(bytes);
    if (p == NULL) PyErr_NoMemory();
    return p;
#endif
}

static void block_free(HolderBlock *block) {
#ifdef HAVE_MMAP
    munmap(block->data, block->size * sizeof(int32_t));
#else
    PyMem_RawFree(block->data);
#endif
}

typedef struct {
    PyObject_HEAD
    int lexicographic;
    int32_t first_id;
    /* symbols, indexed by id - first_id */
    size_t n_ids, cap_ids;
    int64_t *int_key;    /* hf */
    int32_t *tok_len;    /* limit(): each id's length (n_len of them), max_len 0 = no limit */
    size_t n_len, cap_len;
    int64_t max_len;
    char **value;        /* lexicographic: the token's bytes */
    Py_ssize_t *value_len;
    /* words: word w is symbols[word_start[w]:word_start[w] + word_len[w]], merged in place; the
     * buffer holds uint16 ids while every id fits (most vocabularies: half the memory), int32 ids
     * once one does not (wide) */
    Py_ssize_t n_words;
    void *symbols;
    int wide;
    size_t n_symbols, cap_symbols; /* n_symbols: the end of the last word; merges leave gaps */
    size_t live_symbols;           /* the sum of word_len */
    int64_t *word_start;
    int32_t *word_len;
    int64_t *word_count;
    /* pairs: a dead pair (count 0, left -1) is on the free list, reused by the next new pair */
    Pair *pairs;
    size_t n_pairs, cap_pairs;
    int32_t *free_pairs;
    size_t n_free, cap_free;
    int32_t *slots; /* open addressing: -1 empty, else pair index */
    size_t n_slots; /* power of two */
    /* heap: every pair whose count is >= heap_floor has an entry (lazy: stale ones are skipped) */
    HeapEntry *heap;
    size_t n_heap, cap_heap;
    int64_t heap_floor;
    /* a byte per pair: where its holders are (HS_*), and marks of the current merge (PS_*) */
    uint8_t *pair_state;
    size_t cap_state;
    /* scratch: pairs grown by the current merge */
    int32_t *grown;
    size_t n_grown, cap_grown;
    /* holder space: blocks handed out front to back (holder_space()); the index rebuilds */
    HolderBlock *blocks;
    size_t n_blocks, cap_blocks, block_used;
    size_t holder_space;   /* entries in every block */
    size_t indexed_space;  /* holder_space right after the last index */
    int64_t list_floor;  /* pairs counted below it at the last index have no holder list */
    size_t n_indexes, n_scans;
    size_t scans_since;  /* scans since the last index (list_holders) */
    /* plan(): about how many merges the caller still means to make (0: unknown) and the lowest
     * count it would merge; the list floor need not go below what they can reach */
    int64_t planned, plan_lowest;
    /* the journal (journal()): while on, each merge's change of every pair count it touched,
     * summed, as int64 rows (step, left, right, delta) in the order of each pair's first change
     * (zeros left out), for the caller to take (take_journal()); step is the merge's place in
     * apply_all()'s list, 0 for apply(). While a merge runs, step_sum[p] sums pair p's changes
     * and step_mark[p] == journal_epoch says p is in step_touched; the epoch moves on after
     * each merge (no pair is recycled during one: refill() runs between merges). */
    int journal_on;
    int64_t journal_step;
    int lenient; /* lenient(): a count that would fall below one stops at one (a guess's engine) */
    int64_t *journal;
    size_t n_journal, cap_journal;
    int64_t *step_sum;
    uint32_t *step_mark;
    size_t cap_step;
    uint32_t journal_epoch;
    int32_t *step_touched;
    size_t n_touched, cap_touched;
    char broken[160]; /* why the engine can no longer be used (see break_engine()), or "" */
} Engine;

/* A failure in the middle of `doing` left the state inconsistent: the engine is marked broken
 * (the error raised now stays the one the caller gets) and refuses every later call. */
static void break_engine(Engine *e, const char *doing) {
    PyObject *type = PyErr_Occurred();
    if (type != NULL && PyErr_GivenExceptionMatches(type, PyExc_MemoryError)) {
        snprintf(e->broken, sizeof(e->broken), "ran out of memory in the middle of %s", doing);
    } else {
        const char *name = type != NULL ? ((PyTypeObject *)type)->tp_name : "error";
        snprintf(e->broken, sizeof(e->broken), "failed (%s) in the middle of %s", name, doing);
    }
}

static int check_usable(const Engine *e) {
    if (e->broken[0] == '\0') return 0;
    PyErr_Format(PyExc_RuntimeError,
                 "the merge engine %s and can no longer be used; start again with a new engine from the "
                 "words (after freeing memory, or with fewer words)", e->broken);
    return -1;
}

/* An internal invariant does not hold: a bug in this module, reported rather than followed by a
 * wild read. */
static int internal_error(const char *what, int32_t left, int32_t right) {
    PyErr_Format(PyExc_SystemError, "internal error in bpe_spark.native._fastbpe: %s (pair %d, %d); please report it",
                 what, (int)left, (int)right);
    return -1;
}

static inline size_t symbol_size(const Engine *e) { return e->wide ? sizeof(int32_t) : sizeof(uint16_t); }

static inline int32_t symbol_at(const Engine *e, size_t i) {
    return e->wide ? ((const int32_t *)e->symbols)[i] : (int32_t)((const uint16_t *)e->symbols)[i];
}

static inline void set_symbol(Engine *e, size_t i, int32_t id) {
    if (e->wide) {
        ((int32_t *)e->symbols)[i] = id;
    } else {
        ((uint16_t *)e->symbols)[i] = (uint16_t)id;
    }
}

static inline int holder_mode(const Engine *e, int32_t p) { return e->pair_state[p] & HS_MODE; }

static inline void set_holder_mode(Engine *e, int32_t p, int mode) {
    e->pair_state[p] = (uint8_t)((e->pair_state[p] & ~HS_MODE) | mode);
}

/* 1 when the pair keeps a holder list (inline or in the holder space). */
static inline int is_listed(const Engine *e, int32_t p) { return holder_mode(e, p) <= HS_LIST; }

static inline int32_t holder_count(const Engine *e, int32_t p) {
    int mode = holder_mode(e, p);
    return mode <= INLINE_HOLDERS ? mode : (mode == HS_LIST ? e->pairs[p].holders.list[0] : 0);
}

static inline int32_t *holder_entries(Engine *e, int32_t p) {
    return holder_mode(e, p) == HS_LIST ? e->pairs[p].holders.list + 2 : e->pairs[p].holders.inline_;
}

/* An empty list (its entries, if in the holder space, stay there until the next index). */
static inline void drop_holders(Engine *e, int32_t p) {
    set_holder_mode(e, p, 0);
    e->pairs[p].holders.list = NULL;
}

/* Room for n holder entries. Lists are carved front to back out of big blocks and never freed
 * one by one: a list that grows moves to fresh room and leaves its old place behind, as a merged
 * or dead pair leaves its list. The index is rebuilt from the words (index_holders) once stale
 * entries fill the space, and the blocks go back whole: no allocator fragmentation, and holder
 * memory stays within a bound of the words'. */
#define HOLDER_BLOCK ((size_t)1 << 18) /* entries: 1 MB */
#define REINDEX_PCT 150
static int32_t *holder_space(Engine *e, size_t n) {
    if (e->n_blocks == 0 || e->block_used + n > e->blocks[e->n_blocks - 1].size) {
        size_t size = n > HOLDER_BLOCK ? n : HOLDER_BLOCK;
        HolderBlock *blocks = grow_array(e->blocks, &e->cap_blocks, e->n_blocks, 1, sizeof(HolderBlock), 4);
        if (blocks == NULL) return NULL;
        e->blocks = blocks;
        int32_t *data = block_alloc(size);
        if (data == NULL) return NULL;
        e->blocks[e->n_blocks].data = data;
        e->blocks[e->n_blocks].size = size;
        e->n_blocks++;
        e->block_used = 0;
        e->holder_space += size;
    }
    int32_t *room = e->blocks[e->n_blocks - 1].data + e->block_used;
    e->block_used += n;
    return room;
}

static void free_holder_space(Engine *e) {
    for (size_t b = 0; b < e->n_blocks; b++) block_free(&e->blocks[b]);
    e->n_blocks = e->block_used = e->holder_space = 0;
}

/* The slot of pair (left, right): the one holding it, or the empty one where it would go. */
static inline size_t probe(const Engine *e, int32_t left, int32_t right) {
    size_t mask = e->n_slots - 1, i = (size_t)pair_hash(left, right) & mask;
    for (;;) {
        int32_t p = e->slots[i];
        if (p < 0 || (e->pairs[p].left == left && e->pairs[p].right == right)) return i;
        i = (i + 1) & mask;
    }
}

static int32_t find_pair(Engine *e, int32_t left, int32_t right) { return e->slots[probe(e, left, right)]; }

static int rehash(Engine *e, size_t n_slots) {
    if (n_slots == 0) return PyErr_NoMemory(), -1; /* a doubling overflowed */
    int32_t *slots = new_slots(n_slots);
    if (slots == NULL) return -1;
    for (size_t p = 0; p < e->n_pairs; p++) {
        if (e->pairs[p].left < 0) continue; /* dead, on the free list */
        slots[empty_slot(slots, n_slots, pair_hash(e->pairs[p].left, e->pairs[p].right))] = (int32_t)p;
    }
    PyMem_Free(e->slots);
    e->slots = slots;
    e->n_slots = n_slots;
    return 0;
}

/* The index of pair (left, right), created with count 0 when absent; -1 on memory error. */
static int32_t get_pair(Engine *e, int32_t left, int32_t right) {
    size_t i = probe(e, left, right);
    int32_t p = e->slots[i];
    if (p >= 0) return p;
    if (e->n_free > 0) {
        p = e->free_pairs[--e->n_free];
    } else {
        if (e->n_pairs >= INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "too many distinct pairs for the compiled engine");
            return -1;
        }
        Pair *pairs = grow_array(e->pairs, &e->cap_pairs, e->n_pairs, 1, sizeof(Pair), 4);
        if (pairs == NULL) return -1;
        e->pairs = pairs;
        p = (int32_t)e->n_pairs++;
    }
    if (e->cap_state < e->cap_pairs) {
        uint8_t *state = bpe_realloc_array(e->pair_state, e->cap_pairs, 1);
        if (state == NULL) return -1;
        memset(state + e->cap_state, 0, e->cap_pairs - e->cap_state);
        e->pair_state = state;
        e->cap_state = e->cap_pairs;
    }
    Pair *pair = &e->pairs[p];
    memset(pair, 0, sizeof(Pair));
    pair->left = left;
    pair->right = right;
    e->pair_state[p] = HS_NEWBORN;
    e->slots[i] = p;
    if ((uint64_t)(e->n_pairs - e->n_free) * 10 > (uint64_t)e->n_slots * 7) { /* a load of 0.7 at most */
        if (rehash(e, doubled(e->n_slots)) < 0) return -1;
    }
    return p;
}

static int add_holder(Engine *e, int32_t p, int32_t word) {
    Pair *pair = &e->pairs[p];
    int mode = holder_mode(e, p);
    if (mode < INLINE_HOLDERS) {
        if (mode > 0 && pair->holders.inline_[mode - 1] == word) return 0;
        pair->holders.inline_[mode] = word;
        set_holder_mode(e, p, mode + 1);
        return 0;
    }
    int32_t *list = mode == HS_LIST ? pair->holders.list : NULL;
    int32_t n = list ? list[0] : INLINE_HOLDERS, cap = list ? list[1] : INLINE_HOLDERS;
    const int32_t *entries = list ? list + 2 : pair->holders.inline_;
    if (n > 0 && entries[n - 1] == word) return 0;
    if (n == cap) { /* to fresh room; the old place stays behind until the next index */
        if (cap > INT32_MAX / 2 - 2) {
            PyErr_SetString(PyExc_OverflowError, "a pair is held by too many words for the compiled engine");
            return -1;
        }
        int32_t grown = cap + cap / 2 + 2;
        int32_t *room = holder_space(e, 2 + (size_t)grown);
        if (room == NULL) return -1;
        memcpy(room + 2, entries, (size_t)n * sizeof(int32_t));
        room[0] = n;
        room[1] = grown;
        pair->holders.list = list = room;
        set_holder_mode(e, p, HS_LIST);
    }
    list[2 + list[0]++] = word;
    return 0;
}

/* A hint that *address will be read soon (a cache miss started early overlaps others). */
#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(address) __builtin_prefetch(address)
#else
#define PREFETCH(address) ((void)(address))
#endif

/* index_holders()' pass probes the hash table for every pair of every word: a cache miss for
 * the slot, another for the pair, one after the other. They go in batches instead: the slots
 * of a batch are fetched ahead while it is gathered, then its pairs, and only then is the batch
 * worked through, in order (the same work as one probe at a time), so the misses overlap. */
#define PROBE_BATCH 32
typedef struct {
    int32_t word, left, right, pair;
    size_t slot; /* the home slot of (left, right) */
} Probe;

/* One batch of index_holders()' pass: count each listed pair's holders (inline_[0] notes the
 * last holder seen, plus one, inline_[1] the holders) and note the listed pairs in the trail:
 * -(w + 1) before the first of word w's, then the pair indices, in the words' order. */
typedef struct {
    int32_t *data;
    size_t n, last_word; /* last_word: the word of the last entry, plus one (0: none yet) */
} Trail;

static int index_batch(Engine *e, Probe *batch, int n, Trail *trail) {
    size_t mask = e->n_slots - 1;
    for (int k = 0; k < n; k++) {
        int32_t p = e->slots[batch[k].slot];
        if (p >= 0) {
            PREFETCH(&e->pairs[p]);
            PREFETCH(&e->pair_state[p]);
        }
    }
    for (int k = 0; k < n; k++) {
        size_t i = batch[k].slot;
        int32_t left = batch[k].left, right = batch[k].right, p;
        for (;;) {
            p = e->slots[i];
            if (p < 0) return internal_error("a word holds a pair the table lacks", left, right);
            if (e->pairs[p].left == left && e->pairs[p].right == right) break;
            i = (i + 1) & mask;
        }
        batch[k].pair = is_listed(e, p) ? p : -1;
    }
    for (int k = 0; k < n; k++) {
        int32_t p = batch[k].pair, w = batch[k].word;
        if (p < 0) continue;
        int32_t *seen = e->pairs[p].holders.inline_; /* [last holder + 1, holders] */
        if (seen[0] != w + 1) {
            seen[0] = w + 1;
            seen[1]++;
        }
        if (trail->last_word != (size_t)w + 1) {
            trail->data[trail->n++] = -(w + 1);
            trail->last_word = (size_t)w + 1;
        }
        trail->data[trail->n++] = p;
    }
    return 0;
}

/* index_holders()' pass over every pair of every counted word (see index_batch()). */
static int index_pass(Engine *e, Trail *trail) {
    Probe batch[PROBE_BATCH];
    int n = 0;
    size_t mask = e->n_slots - 1;
    for (Py_ssize_t w = 0; w < e->n_words; w++) {
        if (e->word_count[w] == 0) continue;
        size_t at = (size_t)e->word_start[w];
        for (int32_t j = 0; j + 1 < e->word_len[w]; j++) {
            Probe *probe = &batch[n++];
            probe->word = (int32_t)w;
            probe->left = symbol_at(e, at + j);
            probe->right = symbol_at(e, at + j + 1);
            probe->slot = (size_t)pair_hash(probe->left, probe->right) & mask;
            PREFETCH(&e->slots[probe->slot]);
            if (n == PROBE_BATCH) {
                if (index_batch(e, batch, n, trail) < 0) return -1;
                n = 0;
            }
        }
    }
    return n > 0 ? index_batch(e, batch, n, trail) : 0;
}

/* Fill the lists from the trail of index_pass(): no probe, and the pairs and lists a little
 * further on fetched ahead. */
#define TRAIL_AHEAD 16
static int fill_from_trail(Engine *e, const Trail *trail) {
    int32_t w = -1;
    for (size_t k = 0; k < trail->n; k++) {
        if (k + TRAIL_AHEAD < trail->n && trail->data[k + TRAIL_AHEAD] >= 0) {
            PREFETCH(&e->pairs[trail->data[k + TRAIL_AHEAD]]);
            PREFETCH(&e->pair_state[trail->data[k + TRAIL_AHEAD]]);
        }
        if (k + TRAIL_AHEAD / 2 < trail->n && trail->data[k + TRAIL_AHEAD / 2] >= 0) {
            int32_t ahead = trail->data[k + TRAIL_AHEAD / 2];
            if (holder_mode(e, ahead) == HS_LIST) PREFETCH(e->pairs[ahead].holders.list);
        }
        int32_t p = trail->data[k];
        if (p < 0) {
            w = -p - 1;
            continue;
        }
        if (is_listed(e, p) && add_holder(e, p, w) < 0) return -1;
    }
    return 0;
}

/* Counts on a log scale, COUNT_STEPS buckets per doubling: the histograms that choose a list
 * floor (fitting_floor(), planned_reach()). */
#define COUNT_STEPS 4
#define COUNT_BUCKETS (62 * COUNT_STEPS) /* count_bucket(INT64_MAX) + 1 */
static inline int floor_log2(uint64_t x) {
#if defined(__GNUC__) || defined(__clang__)
    return 63 - __builtin_clzll(x);
#else
    int b = 0;
    while (x >>= 1) b++;
    return b;
#endif
}

/* The bucket of count c (c >= 1); buckets rise with the count. */
static inline int count_bucket(int64_t c) {
    if (c < COUNT_STEPS) return (int)c;
    int b = floor_log2((uint64_t)c);
    return COUNT_STEPS * (b - 1) + (int)((c >> (b - 2)) & (COUNT_STEPS - 1));
}

/* The lowest count in bucket i. */
static inline int64_t bucket_floor(int i) {
    if (i < COUNT_STEPS) return i;
    return (int64_t)(COUNT_STEPS + i % COUNT_STEPS) << (i / COUNT_STEPS - 1);
}

/* The list floor of an index that may list down to lowest and must list down to highest (see
 * index_holders): the lowest floor in between whose lists fit in LIST_BUDGET_PCT% of the live
 * symbols, as many entries, each pair's holders counted (inline_[1]) for every pair at or above
 * lowest. Lists that hold more than the words' memory are not worth an index saved. */
#define LIST_BUDGET_PCT 75
static int64_t fitting_floor(Engine *e, int64_t lowest, int64_t highest) {
    size_t entries[COUNT_BUCKETS] = {0};
    for (size_t p = 0; p < e->n_pairs; p++) {
        int32_t need = e->pairs[p].holders.inline_[1];
        if (e->pairs[p].count >= lowest && e->pairs[p].count > 0 && is_listed(e, (int32_t)p) && need > INLINE_HOLDERS)
            entries[count_bucket(e->pairs[p].count)] += 2 + (size_t)need;
    }
    size_t budget = e->live_symbols / 100 * LIST_BUDGET_PCT, listed = 0;
    int64_t floor = highest;
    for (int i = COUNT_BUCKETS - 1; i >= 0; i--) {
        listed += entries[i];
        if (listed > budget) break;
        floor = bucket_floor(i);
        if (floor <= lowest) return lowest;
    }
    return floor < highest ? floor : highest;
}

/* (Re)build the holder lists from the words: exact sizes, no stale or repeated entries, in one
 * block. Only pairs whose count is at least the list floor get a list: a list is needed only to
 * merge its pair, and the heap floor (refill()) and the caller's plan (plan()) say which pairs
 * can be merged soon. The floor is highest, or lower, down to lowest, as far as the lists fit
 * (fitting_floor()): each index spared is a pass over the words. The others are UNLISTED:
 * most pairs, and, early in a run, most holder entries (the words of frequent byte pairs). A
 * pair created later is listed from the start when its count reaches the floor (every word that
 * gains it is added). Run when the heap floor falls below the list floor (unless the plan does
 * not reach below it), when stale entries (words that lost the pair to a merge next to it) fill
 * the holder space (see the end of apply_one()), and after SCAN_LIMIT scans (list_holders()).
 * One pass over the words (index_pass()) counts each listed pair's holders and notes them in a
 * trail; the lists are then sized, and filled from the trail (fill_from_trail()). */
static int index_holders(Engine *e, int64_t lowest, int64_t highest) {
    for (size_t p = 0; p < e->n_pairs; p++) {
        drop_holders(e, (int32_t)p);
        if (e->pairs[p].count < lowest) set_holder_mode(e, (int32_t)p, HS_UNLISTED);
    }
    free_holder_space(e);
    /* the trail: at most a pair per position and a mark per word; pages never written cost no
     * memory (mmap) */
    size_t positions = 0;
    for (Py_ssize_t w = 0; w < e->n_words; w++) {
        if (e->word_count[w] != 0 && e->word_len[w] > 1) positions += (size_t)e->word_len[w];
    }
    HolderBlock trail_block = {NULL, positions ? positions : 1};
    trail_block.data = block_alloc(trail_block.size);
    if (trail_block.data == NULL) return -1;
    Trail trail = {trail_block.data, 0, 0};
    if (index_pass(e, &trail) < 0) goto fail;
    int64_t list_floor = lowest < highest ? fitting_floor(e, lowest, highest) : lowest;
    e->list_floor = list_floor;
    size_t listed = 0;
    for (size_t p = 0; p < e->n_pairs; p++) {
        if (e->pairs[p].count < list_floor) set_holder_mode(e, (int32_t)p, HS_UNLISTED);
        int32_t need = e->pairs[p].holders.inline_[1];
        if (is_listed(e, (int32_t)p) && need > INLINE_HOLDERS) listed += 2 + (size_t)need;
    }
    int32_t *room = listed ? holder_space(e, listed) : NULL;
    if (listed && room == NULL) goto fail;
    for (size_t p = 0; p < e->n_pairs; p++) {
        Pair *pair = &e->pairs[p];
        int32_t need = pair->holders.inline_[1];
        pair->holders.list = NULL;
        if (is_listed(e, (int32_t)p) && need > INLINE_HOLDERS) {
            room[0] = 0;
            room[1] = need;
            pair->holders.list = room;
            set_holder_mode(e, (int32_t)p, HS_LIST);
            room += 2 + need;
        }
    }
    if (fill_from_trail(e, &trail) < 0) goto fail;
    block_free(&trail_block);
    e->indexed_space = e->holder_space;
    e->n_indexes++;
    e->scans_since = 0;
    return 0;
fail:
    block_free(&trail_block);
    return -1;
}

/* The list of an UNLISTED pair about to be merged, from a scan of every word. Rare: an unlisted
 * pair's count only falls, until a merge that reuses an existing token raises it, or the plan
 * (plan()) fell short. After SCAN_LIMIT scans since the last index, the next one is an index
 * instead, down to the pair's count / LIST_RATIO (a scan costs a fraction of an index). */
#define SCAN_LIMIT 4
static int list_holders(Engine *e, int32_t target) {
    if (e->scans_since >= SCAN_LIMIT) {
        int64_t floor = e->pairs[target].count / LIST_RATIO;
        if (floor > e->list_floor) floor = e->list_floor;
        if (floor < 2) floor = 0;
        return index_holders(e, floor, floor);
    }
    int32_t left = e->pairs[target].left, right = e->pairs[target].right;
    drop_holders(e, target);
    e->n_scans++;
    e->scans_since++;
    for (Py_ssize_t w = 0; w < e->n_words; w++) {
        if (e->word_count[w] == 0) continue;
        size_t at = (size_t)e->word_start[w];
        for (int32_t j = 0; j + 1 < e->word_len[w]; j++) {
            if (symbol_at(e, at + j) == left && symbol_at(e, at + j + 1) == right) {
                if (add_holder(e, target, (int32_t)w) < 0) return -1;
                break;
            }
        }
    }
    return 0;
}

/* Switch the symbol buffer to int32 ids (an id above 65535 is about to be written). */
static int widen(Engine *e) {
    size_t cap = e->cap_symbols ? e->cap_symbols : 1;
    int32_t *wide = bpe_alloc_array(cap, sizeof(int32_t));
    if (wide == NULL) return -1;
    for (size_t i = 0; i < e->n_symbols; i++) wide[i] = ((const uint16_t *)e->symbols)[i];
    PyMem_Free(e->symbols);
    e->symbols = wide;
    e->cap_symbols = cap;
    e->wide = 1;
    return 0;
}

/* Words shrink in place as merges take place: once the gaps hold a quarter of the buffer, move the
 * words together and give the rest of the buffer back (a few times a run: symbols only shrink). */
static void compact_words(Engine *e) {
    if (e->live_symbols * 4 > e->n_symbols * 3 || e->n_symbols < 4096) return;
    size_t at = 0, size = symbol_size(e);
    for (Py_ssize_t w = 0; w < e->n_words; w++) {
        size_t start = (size_t)e->word_start[w], len = (size_t)e->word_len[w];
        if (start != at) memmove((char *)e->symbols + at * size, (char *)e->symbols + start * size, len * size);
        e->word_start[w] = (int64_t)at;
        at += len;
    }
    e->n_symbols = at;
    /* subtle: no error when the allocator cannot shrink the block: the buffer stays as it was */
    void *fit = PyMem_Realloc(e->symbols, (at ? at : 1) * symbol_size(e));
    if (fit != NULL) {
        e->symbols = fit;
        e->cap_symbols = at ? at : 1;
    }
}

/* Tie-break order of two distinct symbols: <0 when a sorts first (wins the tie). */
static inline int cmp_symbol(const Engine *e, int32_t a, int32_t b) {
    if (a == b) return 0;
    size_t ia = (size_t)(a - e->first_id), ib = (size_t)(b - e->first_id);
    if (!e->lexicographic) {
        int64_t ka = e->int_key[ia], kb = e->int_key[ib];
        return ka < kb ? -1 : (ka > kb ? 1 : 0);
    }
    Py_ssize_t la = e->value_len[ia], lb = e->value_len[ib];
    int c = memcmp(e->value[ia], e->value[ib], (size_t)(la < lb ? la : lb));
    if (c == 0) c = la < lb ? -1 : (la > lb ? 1 : 0);
    return -c; /* the greater byte string wins */
}

/* 1 when heap entry a must come out before b. */
static inline int heap_before(const Engine *e, const HeapEntry *a, const HeapEntry *b) {
    if (a->count != b->count) return a->count > b->count;
    const Pair *pa = &e->pairs[a->pair], *pb = &e->pairs[b->pair];
    int c = cmp_symbol(e, pa->left, pb->left);
    if (c == 0) c = cmp_symbol(e, pa->right, pb->right);
    return c < 0;
}

/* 1 when pair p may be merged under the length limit (an id whose length is unknown counts as 0:
 * the caller gives every id's length before a pair holds it). */
static inline int visible(const Engine *e, int32_t p) {
    if (e->max_len == 0) return 1;
    size_t l = (size_t)(e->pairs[p].left - e->first_id), r = (size_t)(e->pairs[p].right - e->first_id);
    int64_t sum = (l < e->n_len ? e->tok_len[l] : 0) + (r < e->n_len ? e->tok_len[r] : 0);
    return sum <= e->max_len;
}

static int heap_push(Engine *e, int64_t count, int32_t pair) {
    if (!visible(e, pair)) return 0; /* never merged: no entry */
    HeapEntry *heap = grow_array(e->heap, &e->cap_heap, e->n_heap, 1, sizeof(HeapEntry), 4);
    if (heap == NULL) return -1;
    e->heap = heap;
    HeapEntry item = {count, pair};
    size_t i = e->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_before(e, &item, &heap[parent])) break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i] = item;
    return 0;
}

static void sift_down(Engine *e, size_t i) {
    HeapEntry *heap = e->heap;
    size_t n = e->n_heap;
    HeapEntry item = heap[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && heap_before(e, &heap[child + 1], &heap[child])) child++;
        if (!heap_before(e, &heap[child], &item)) break;
        heap[i] = heap[child];
        i = child;
    }
    heap[i] = item;
}

static void heap_pop(Engine *e) {
    e->n_heap--;
    if (e->n_heap > 0) {
        e->heap[0] = e->heap[e->n_heap];
        sift_down(e, 0);
    }
}

/* The count the planned merges can reach: that of the planned-th best pair now (bucket_floor()
 * of its bucket; 0 when fewer pairs are left). Merges take from the counts near theirs and make
 * new pairs, so the last planned merge's count is near it, not at it: a guess that only saves
 * work (a pair unlisted when merged is found by a scan). */
static int64_t planned_reach(Engine *e) {
    size_t pairs[COUNT_BUCKETS] = {0}, seen = 0;
    for (size_t p = 0; p < e->n_pairs; p++) {
        if (e->pairs[p].count > 0 && visible(e, (int32_t)p)) pairs[count_bucket(e->pairs[p].count)]++;
    }
    for (int i = COUNT_BUCKETS - 1; i >= 0; i--) {
        seen += pairs[i];
        if (seen >= (size_t)e->planned) return bucket_floor(i);
    }
    return 0;
}

/* The heap ran empty: every count is below heap_floor. Lower the floor to half the best count
 * left and queue every pair at or above it. The floor halves each time, so refills are few, and
 * the heap holds the pairs that can be merged soon, not every pair ever seen (most never are).
 * Also the moment to recycle dead pairs (count 0; their holders went with the count): no heap
 * entry names them now, so their slots can take new pairs, and the hash table is rebuilt from
 * the live ones. */
static int refill(Engine *e) {
    int64_t best = 0;
    size_t live = 0;
    e->n_free = 0;
    for (size_t p = 0; p < e->n_pairs; p++) {
        Pair *pair = &e->pairs[p];
        if (pair->count > 0) {
            live++;
            if (pair->count > best && visible(e, (int32_t)p)) best = pair->count;
            continue;
        }
        drop_holders(e, (int32_t)p);
        pair->left = pair->right = -1;
        int32_t *f = grow_array(e->free_pairs, &e->cap_free, e->n_free, 1, sizeof(int32_t), 4);
        if (f == NULL) return -1;
        e->free_pairs = f;
        e->free_pairs[e->n_free++] = (int32_t)p;
    }
    size_t n_slots = 1024;
    while ((uint64_t)n_slots * 7 < (uint64_t)live * 10) n_slots *= 2; /* live < 2^31: no overflow */
    if (rehash(e, n_slots) < 0) return -1;
    if (best == 0) {
        e->heap_floor = 1;
        return 0;
    }
    e->heap_floor = best - best / 2;
    if (e->heap_floor < e->list_floor) {
        /* List down to the heap floor / LIST_RATIO at least; with a plan, as memory allows, down
         * to half what the plan can reach (LIST_RATIO further while it cannot tell: the plan goes
         * past the pairs there are yet), and no index at all while the lists reach that. */
        int64_t list_floor = e->heap_floor / LIST_RATIO, lowest = list_floor;
        if (e->planned > 0) {
            int64_t reach = planned_reach(e); /* 0: too few pairs yet to tell */
            if (e->list_floor <= reach) goto queue;
            lowest = reach > 0 ? reach / 2 : list_floor / LIST_RATIO;
            if (lowest < e->plan_lowest) lowest = e->plan_lowest;
            if (lowest > list_floor) lowest = list_floor;
        }
        if (index_holders(e, lowest < 2 ? 0 : lowest, list_floor < 2 ? 0 : list_floor) < 0) return -1;
    }
queue:;
    size_t queued = 0;
    for (size_t p = 0; p < e->n_pairs; p++) queued += e->pairs[p].count >= e->heap_floor && visible(e, (int32_t)p);
    HeapEntry *heap = bpe_realloc_array(e->heap, queued + 16, sizeof(HeapEntry));
    if (heap == NULL) return -1;
    e->heap = heap;
    e->cap_heap = queued + 16;
    e->n_heap = 0;
    for (size_t p = 0; p < e->n_pairs; p++) {
        if (e->pairs[p].count >= e->heap_floor && visible(e, (int32_t)p)) {
            e->heap[e->n_heap].count = e->pairs[p].count;
            e->heap[e->n_heap].pair = (int32_t)p;
            e->n_heap++;
        }
    }
    for (size_t i = e->n_heap / 2; i-- > 0;) sift_down(e, i);
    return 0;
}

static int set_key(Engine *e, size_t index, PyObject *key) {
    if (!e->lexicographic) {
        long long k = PyLong_AsLongLong(key);
        if (k == -1 && PyErr_Occurred()) return -1;
        e->int_key[index] = (int64_t)k;
        return 0;
    }
    char *buffer;
    Py_ssize_t length;
    if (PyBytes_AsStringAndSize(key, &buffer, &length) < 0) return -1;
    char *copy = bpe_malloc(length ? (size_t)length : 1);
    if (copy == NULL) return -1;
    memcpy(copy, buffer, (size_t)length);
    e->value[index] = copy;
    e->value_len[index] = length;
    return 0;
}

static int append_symbol(Engine *e, PyObject *key) {
    if (e->n_ids + 1 > e->cap_ids) {
        size_t n = grown_capacity(e->cap_ids, e->n_ids + 1, 512);
        if (n == 0) return PyErr_NoMemory(), -1;
        if (e->lexicographic) {
            char **v = bpe_realloc_array(e->value, n, sizeof(char *));
            if (v == NULL) return -1;
            e->value = v;
            Py_ssize_t *l = bpe_realloc_array(e->value_len, n, sizeof(Py_ssize_t));
            if (l == NULL) return -1;
            e->value_len = l;
        } else {
            int64_t *k = bpe_realloc_array(e->int_key, n, sizeof(int64_t));
            if (k == NULL) return -1;
            e->int_key = k;
        }
        e->cap_ids = n;
    }
    if (e->lexicographic) {
        e->value[e->n_ids] = NULL;
        e->value_len[e->n_ids] = 0;
    }
    if (set_key(e, e->n_ids, key) < 0) return -1;
    e->n_ids++;
    return 0;
}

static int check_id(Engine *e, long long id) {
    if (id < e->first_id || id >= (long long)e->first_id + (long long)e->n_ids) {
        PyErr_Format(PyExc_ValueError, "symbol id %lld is outside the engine's table (%d..%lld)", id,
                     (int)e->first_id, (long long)e->first_id + (long long)e->n_ids - 1);
        return -1;
    }
    return 0;
}

static void Engine_dealloc(Engine *e) {
    PyMem_Free(e->symbols);
    PyMem_Free(e->word_start);
    PyMem_Free(e->word_len);
    PyMem_Free(e->word_count);
    PyMem_Free(e->pairs);
    free_holder_space(e);
    PyMem_Free(e->blocks);
    PyMem_Free(e->free_pairs);
    PyMem_Free(e->slots);
    PyMem_Free(e->heap);
    PyMem_Free(e->grown);
    PyMem_Free(e->pair_state);
    PyMem_Free(e->journal);
    PyMem_Free(e->step_sum);
    PyMem_Free(e->step_mark);
    PyMem_Free(e->step_touched);
    if (e->value != NULL) {
        for (size_t i = 0; i < e->n_ids; i++) PyMem_Free(e->value[i]);
    }
    PyMem_Free(e->value);
    PyMem_Free(e->value_len);
    PyMem_Free(e->int_key);
    PyMem_Free(e->tok_len);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

/* Room for word w's len symbols at the end of the symbol buffer (one buffer for every word:
 * no heap block per word); returns where word w starts, -1 on error. */
static Py_ssize_t word_slot(Engine *e, Py_ssize_t w, Py_ssize_t len) {
    if (len < 0 || len >= INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "word too long for the compiled engine (or bad offsets)");
        return -1;
    }
    /* subtle: an empty first word gets a buffer too (grow_array allocates one when there is none) */
    size_t size = symbol_size(e);
    void *symbols = grow_array(e->symbols, &e->cap_symbols, e->n_symbols, (size_t)len, size, 4);
    if (symbols == NULL) return -1;
    e->symbols = symbols;
    e->word_start[w] = (int64_t)e->n_symbols;
    e->word_len[w] = (int32_t)len;
    e->n_symbols += (size_t)len;
    e->live_symbols += (size_t)len;
    return (Py_ssize_t)e->word_start[w];
}

/* Copy word w's symbols into the engine: a sequence of ids, packed ids (int32, itemsize 4), or
 * (byte scheme, itemsize 1) the UTF-8 bytes themselves, which spares the caller a list of ints
 * per word. */
static int load_packed(Engine *e, Py_ssize_t w, const void *raw, Py_ssize_t itemsize, Py_ssize_t len,
                       long long max_id) {
    Py_ssize_t at = word_slot(e, w, len);
    if (at < 0) return -1;
    for (Py_ssize_t j = 0; j < len; j++) {
        long long id = itemsize == 1 ? (long long)((const unsigned char *)raw)[j] : (long long)((const int32_t *)raw)[j];
        if (id < e->first_id || id >= max_id) return check_id(e, id);
        set_symbol(e, (size_t)(at + j), (int32_t)id);
    }
    return 0;
}

static int load_word(Engine *e, Py_ssize_t w, PyObject *item, long long max_id) {
    if (PyBytes_Check(item)) {
        return load_packed(e, w, PyBytes_AS_STRING(item), 1, PyBytes_GET_SIZE(item), max_id);
    }
    PyObject *seq = PySequence_Fast(item, "each word must be a sequence of ids (or bytes)");
    if (seq == NULL) return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    Py_ssize_t at = word_slot(e, w, len);
    if (at < 0) goto fail;
    for (Py_ssize_t j = 0; j < len; j++) {
        long long id = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, j));
        if (id == -1 && PyErr_Occurred()) goto fail;
        if (id < e->first_id || id >= max_id) {
            check_id(e, id);
            goto fail;
        }
        set_symbol(e, (size_t)(at + j), (int32_t)id);
    }
    Py_DECREF(seq);
    return 0;
fail:
    Py_DECREF(seq);
    return -1;
}

/* Count the pairs and index their holders, on first use rather than in the constructor: the
 * caller can drop its copy of the words in between, and the peak holds one copy, not two.
 * Also the check that opens every method: -1 with an error set when the engine is not usable. */
static int ensure_indexed(Engine *e) {
    if (check_usable(e) < 0) return -1;
    if (e->word_start == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Engine is not initialized");
        return -1;
    }
    if (e->slots != NULL) return 0;
    /* subtle: sized for the distinct pairs (few: byte pairs), not for the occurrences; it grows */
    size_t n_slots = 1024;
    e->slots = new_slots(n_slots);
    if (e->slots == NULL) goto fail;
    e->n_slots = n_slots;
    for (Py_ssize_t w = 0; w < e->n_words; w++) {
        size_t at = (size_t)e->word_start[w];
        int64_t count = e->word_count[w];
        if (count == 0) continue;
        for (int32_t j = 0; j + 1 < e->word_len[w]; j++) {
            int32_t p = get_pair(e, symbol_at(e, at + j), symbol_at(e, at + j + 1));
            if (p < 0) goto fail;
            e->pairs[p].count += count;
        }
    }
    for (size_t p = 0; p < e->n_pairs; p++) set_holder_mode(e, (int32_t)p, HS_UNLISTED);
    e->heap_floor = e->list_floor = INT64_MAX; /* the first best() fills the heap and the lists */
    return 0;
fail:
    break_engine(e, "counting the pairs");
    return -1;
}

static int engine_build(Engine *e, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"words", "counts", "keys", "first_id", "lexicographic", NULL};
    PyObject *words_obj, *counts_obj, *keys_obj;
    int first_id, lexicographic;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOip", kwlist, &words_obj, &counts_obj, &keys_obj,
                                     &first_id, &lexicographic))
        return -1;
    if (first_id < 0) {
        PyErr_SetString(PyExc_ValueError, "first_id must be >= 0");
        return -1;
    }
    e->lexicographic = lexicographic;
    e->first_id = first_id;

    PyObject *keys = PySequence_Fast(keys_obj, "keys must be a sequence");
    if (keys == NULL) return -1;
    Py_ssize_t n_keys = PySequence_Fast_GET_SIZE(keys);
    for (Py_ssize_t i = 0; i < n_keys; i++) {
        if (append_symbol(e, PySequence_Fast_GET_ITEM(keys, i)) < 0) {
            Py_DECREF(keys);
            return -1;
        }
    }
    Py_DECREF(keys);
    e->wide = (long long)first_id + (long long)e->n_ids - 1 > UINT16_MAX;

    /* Words: a sequence (of id sequences or bytes), or packed words as Arrow lays out a binary or
     * a list<int32> column, (data, offsets): word w is data[offsets[w]:offsets[w + 1]], data
     * UTF-8 bytes (byte scheme; itemsize 1) or int32 ids (itemsize 4), offsets int32 or int64,
     * counted in items. Counts: a sequence of ints, or an int64 buffer. Buffers spare the caller
     * a Python object per word. */
    PyObject *words = NULL, *counts = NULL;
    Py_buffer data = {0}, offsets = {0}, counts_buf = {0};
    int packed = PyTuple_Check(words_obj) && PyTuple_GET_SIZE(words_obj) == 2 &&
                 PyObject_CheckBuffer(PyTuple_GET_ITEM(words_obj, 0));
    int counts_packed = PyObject_CheckBuffer(counts_obj) && !PyBytes_Check(counts_obj);
    Py_ssize_t n;
    if (packed) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(words_obj, 0), &data, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
            return -1;
        const char *f = data.format ? data.format : "B";
        if (*f == '<' || *f == '=' || *f == '@') f++;
        if (data.itemsize != 1 && !(data.itemsize == 4 && (strcmp(f, "i") == 0 || strcmp(f, "l") == 0))) {
            PyErr_SetString(PyExc_ValueError, "packed words: data must be bytes or int32 ids");
            goto fail;
        }
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(words_obj, 1), &offsets, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
            goto fail;
        if ((offsets.itemsize != 4 && offsets.itemsize != 8) || offsets.len < offsets.itemsize) {
            PyErr_SetString(PyExc_ValueError, "packed words: offsets must be int32 or int64, n + 1 of them");
            goto fail;
        }
        n = offsets.len / offsets.itemsize - 1;
    } else {
        words = PySequence_Fast(words_obj, "words must be a sequence");
        if (words == NULL) goto fail;
        n = PySequence_Fast_GET_SIZE(words);
    }
    if (counts_packed) {
        if (PyObject_GetBuffer(counts_obj, &counts_buf, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) goto fail;
        const char *f = counts_buf.format ? counts_buf.format : "B";
        if (*f == '<' || *f == '=' || *f == '@') f++;
        if (counts_buf.itemsize != 8 || (strcmp(f, "q") != 0 && strcmp(f, "l") != 0)) {
            PyErr_SetString(PyExc_ValueError, "counts given as a buffer must be int64");
            goto fail;
        }
        if (counts_buf.len / 8 != n) {
            PyErr_SetString(PyExc_ValueError, "words and counts differ in length");
            goto fail;
        }
    } else {
        counts = PySequence_Fast(counts_obj, "counts must be a sequence");
        if (counts == NULL) goto fail;
        if (PySequence_Fast_GET_SIZE(counts) != n) {
            PyErr_SetString(PyExc_ValueError, "words and counts differ in length");
            goto fail;
        }
    }
    if (n >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "too many words for the compiled engine");
        goto fail;
    }
    e->word_start = bpe_calloc_array((size_t)n + 1, sizeof(int64_t));
    e->word_len = e->word_start ? bpe_calloc_array((size_t)n + 1, sizeof(int32_t)) : NULL;
    e->word_count = e->word_len ? bpe_calloc_array((size_t)n + 1, sizeof(int64_t)) : NULL;
    if (e->word_count == NULL) goto fail;
    e->n_words = n;
    if (packed && n > 0) { /* the exact size up front */
        long long first = offsets.itemsize == 4 ? ((const int32_t *)offsets.buf)[0] : ((const int64_t *)offsets.buf)[0];
        long long last = offsets.itemsize == 4 ? ((const int32_t *)offsets.buf)[n] : ((const int64_t *)offsets.buf)[n];
        if (last > first && (unsigned long long)(last - first) <= (unsigned long long)(data.len / data.itemsize)) {
            e->symbols = bpe_alloc_array((size_t)(last - first), symbol_size(e));
            if (e->symbols == NULL) goto fail;
            e->cap_symbols = (size_t)(last - first);
        }
    }
    int64_t total_count = 0; /* sum of count * (len - 1): the bound of every pair count */
    long long max_id = (long long)first_id + (long long)e->n_ids;
    for (Py_ssize_t w = 0; w < n; w++) {
        if (packed) {
            long long lo, hi;
            if (offsets.itemsize == 4) {
                lo = ((const int32_t *)offsets.buf)[w];
                hi = ((const int32_t *)offsets.buf)[w + 1];
            } else {
                lo = ((const int64_t *)offsets.buf)[w];
                hi = ((const int64_t *)offsets.buf)[w + 1];
            }
            if (lo < 0 || hi < lo || hi > (long long)(data.len / data.itemsize)) {
                PyErr_Format(PyExc_ValueError, "packed words: offsets of word %zd are out of the data", w);
                goto fail;
            }
            if (load_packed(e, w, (const char *)data.buf + lo * data.itemsize, data.itemsize, (Py_ssize_t)(hi - lo),
                            max_id) < 0)
                goto fail;
        } else if (load_word(e, w, PySequence_Fast_GET_ITEM(words, w), max_id) < 0) {
            goto fail;
        }
        int32_t len_w = e->word_len[w];
        long long count = counts_packed ? (long long)((const int64_t *)counts_buf.buf)[w]
                                        : PyLong_AsLongLong(PySequence_Fast_GET_ITEM(counts, w));
        if (count == -1 && PyErr_Occurred()) goto fail;
        if (count < 0) {
            PyErr_Format(PyExc_ValueError, "word %zd has a negative count", w);
            goto fail;
        }
        e->word_count[w] = count;
        if (len_w > 1) {
            int64_t weight;
            if (count_mul_overflow((int64_t)count, (int64_t)(len_w - 1), &weight) ||
                count_add_overflow(total_count, weight, &total_count)) {
                PyErr_SetString(PyExc_OverflowError, "pair counts exceed 64 bits in the compiled engine");
                goto fail;
            }
        }
    }
    Py_XDECREF(words);
    Py_XDECREF(counts);
    if (data.obj) PyBuffer_Release(&data);
    if (offsets.obj) PyBuffer_Release(&offsets);
    if (counts_buf.obj) PyBuffer_Release(&counts_buf);
    if (e->cap_symbols > e->n_symbols && e->n_symbols > 0) { /* give back the growth slack (if it can) */
        void *fit = PyMem_Realloc(e->symbols, e->n_symbols * symbol_size(e));
        if (fit != NULL) {
            e->symbols = fit;
            e->cap_symbols = e->n_symbols;
        }
    }

    return 0;

fail:
    Py_XDECREF(words);
    Py_XDECREF(counts);
    if (data.obj) PyBuffer_Release(&data);
    if (offsets.obj) PyBuffer_Release(&offsets);
    if (counts_buf.obj) PyBuffer_Release(&counts_buf);
    return -1;
}

/* Engine(words, counts, keys, first_id, lexicographic) */
static int Engine_init(Engine *e, PyObject *args, PyObject *kwds) {
    if (e->n_ids > 0 || e->word_start != NULL || e->broken[0] != '\0') {
        PyErr_SetString(PyExc_RuntimeError, "Engine is already initialized");
        return -1;
    }
    if (engine_build(e, args, kwds) < 0) {
        break_engine(e, "its construction"); /* a half-built engine is never used */
        return -1;
    }
    return 0;
}

/* The top pair as (left, right, count), or None when no pair is left. */
static PyObject *Engine_best(Engine *e, PyObject *Py_UNUSED(ignored)) {
    if (ensure_indexed(e) < 0) return NULL;
    for (;;) {
        while (e->n_heap > 0) {
            HeapEntry top = e->heap[0];
            int64_t current = e->pairs[top.pair].count;
            if (!visible(e, top.pair)) { /* a limit set after it was queued */
                heap_pop(e);
                continue;
            }
            if (current == top.count) {
                return Py_BuildValue("(iiL)", e->pairs[top.pair].left, e->pairs[top.pair].right,
                                     (long long)current);
            }
            heap_pop(e);
            /* subtle: a count that fell gets its entry back at the new count (when still above
             * the floor); a count that grew was pushed afresh when it grew. */
            if (current >= e->heap_floor && current < top.count) {
                if (heap_push(e, current, top.pair) < 0) goto fail;
            }
        }
        if (refill(e) < 0) goto fail;
        if (e->n_heap == 0) Py_RETURN_NONE;
    }
fail:
    break_engine(e, "choosing the next pair");
    return NULL;
}

/* The journal: pair p changed by delta in the current merge (summed until journal_flush()). */
static int journal_change(Engine *e, int32_t p, int64_t delta) {
    if ((size_t)p >= e->cap_step) {
        size_t cap = e->cap_pairs > (size_t)p ? e->cap_pairs : (size_t)p + 1;
        int64_t *sums = bpe_realloc_array(e->step_sum, cap, sizeof(int64_t));
        if (sums == NULL) return -1;
        e->step_sum = sums;
        uint32_t *marks = bpe_realloc_array(e->step_mark, cap, sizeof(uint32_t));
        if (marks == NULL) return -1;
        memset(marks + e->cap_step, 0, (cap - e->cap_step) * sizeof(uint32_t));
        e->step_mark = marks;
        e->cap_step = cap;
    }
    if (e->step_mark[p] != e->journal_epoch) {
        int32_t *t = grow_array(e->step_touched, &e->cap_touched, e->n_touched, 1, sizeof(int32_t), 256);
        if (t == NULL) return -1;
        e->step_touched = t;
        t[e->n_touched++] = p;
        e->step_mark[p] = e->journal_epoch;
        e->step_sum[p] = 0;
    }
    e->step_sum[p] += delta;
    return 0;
}

/* The journal: the current merge's sums as rows, then a new epoch for the next merge. */
static int journal_flush(Engine *e) {
    int64_t *j = grow_array(e->journal, &e->cap_journal, e->n_journal, 4 * e->n_touched, sizeof(int64_t), 4);
    if (j == NULL) return -1;
    e->journal = j;
    for (size_t i = 0; i < e->n_touched; i++) {
        int32_t p = e->step_touched[i];
        if (e->step_sum[p] == 0) continue;
        j[e->n_journal++] = e->journal_step;
        j[e->n_journal++] = e->pairs[p].left;
        j[e->n_journal++] = e->pairs[p].right;
        j[e->n_journal++] = e->step_sum[p];
    }
    e->n_touched = 0;
    if (++e->journal_epoch == 0) { /* wrapped: no mark may look current */
        memset(e->step_mark, 0, e->cap_step * sizeof(uint32_t));
        e->journal_epoch = 1;
    }
    return 0;
}

/* Add delta to the count of pair (left, right), gained (delta > 0) or lost by word. A pair that
 * loses is one the word holds: it must be in the table, with at least the word's count. */
static inline int change(Engine *e, int32_t left, int32_t right, int64_t delta, int32_t word) {
    int32_t p = delta < 0 ? find_pair(e, left, right) : get_pair(e, left, right);
    if (p < 0) return delta < 0 ? internal_error("a merge takes from a pair the table lacks", left, right) : -1;
    Pair *pair = &e->pairs[p];
    pair->count += delta;
    if (pair->count < 0 && !e->lenient) return internal_error("a pair count fell below zero", left, right);
    if (pair->count < 1 && e->lenient && delta < 0) {
        /* see lenient(): a guessed count may have been low, and other words may still hold the
         * pair; at zero it would be recycled (refill()) under them */
        pair->count = 1;
    }
    if (e->journal_on && journal_change(e, p, delta) < 0) return -1;
    if (pair->count == 0 && holder_count(e, p) > 0) {
        /* no word holds the pair any more: every holder entry is stale */
        drop_holders(e, p);
    }
    if (delta > 0 && word >= 0) {
        if (is_listed(e, p) && add_holder(e, p, word) < 0) return -1;
        if (!(e->pair_state[p] & PS_GROWN)) {
            int32_t *g = grow_array(e->grown, &e->cap_grown, e->n_grown, 1, sizeof(int32_t), 4);
            if (g == NULL) return -1;
            e->grown = g;
            e->grown[e->n_grown++] = p;
            e->pair_state[p] |= PS_GROWN;
        }
    }
    return 0;
}

/* limit(max_len, lengths): the length limit (0: none) and the lengths of the ids that follow the
 * last one given (the first call gives them from first_id on). */
static PyObject *Engine_limit(Engine *e, PyObject *args) {
    long long max_len;
    PyObject *lengths_obj;
    if (check_usable(e) < 0 || !PyArg_ParseTuple(args, "LO", &max_len, &lengths_obj)) return NULL;
    if (max_len < 0) {
        PyErr_SetString(PyExc_ValueError, "limit: max_len must be >= 0");
        return NULL;
    }
    PyObject *lengths = PySequence_Fast(lengths_obj, "limit() takes a sequence of lengths");
    if (lengths == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(lengths);
    int32_t *room = grow_array(e->tok_len, &e->cap_len, e->n_len, (size_t)n, sizeof(int32_t), 256);
    if (room == NULL) {
        Py_DECREF(lengths);
        return NULL;
    }
    e->tok_len = room;
    for (Py_ssize_t i = 0; i < n; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(lengths, i));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(lengths);
            return NULL;
        }
        e->tok_len[e->n_len + (size_t)i] = (int32_t)v;
    }
    Py_DECREF(lengths);
    e->n_len += (size_t)n;
    e->max_len = (int64_t)max_len;
    return PyLong_FromSize_t(e->n_len);
}

/* extend(keys): the tie-break keys of the ids that follow the engine's last one. */
static PyObject *Engine_extend(Engine *e, PyObject *keys_obj) {
    if (check_usable(e) < 0) return NULL;
    PyObject *keys = PySequence_Fast(keys_obj, "extend() takes a sequence of keys");
    if (keys == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(keys); i++) {
        if (append_symbol(e, PySequence_Fast_GET_ITEM(keys, i)) < 0) {
            /* subtle: the keys before this one are in: the caller's ids would no longer line up */
            break_engine(e, "adding the keys of new tokens");
            Py_DECREF(keys);
            return NULL;
        }
    }
    Py_DECREF(keys);
    return PyLong_FromSize_t(e->n_ids);
}

/* Merge (left, right) -> new_id all through word w, updating the counts of the neighbouring
 * pairs (delta updates); one body per symbol width. */
#define DEFINE_MERGE_WORD(NAME, T)                                                                   \
    static int NAME(Engine *e, int32_t w, int32_t left, int32_t right, int32_t new_id) {             \
        T *symbols = (T *)e->symbols + e->word_start[w];                                             \
        int32_t len = e->word_len[w], out = 0, in = 0;                                               \
        int64_t count = e->word_count[w];                                                            \
        while (in < len) {                                                                           \
            if (in + 1 < len && symbols[in] == left && symbols[in + 1] == right) {                   \
                if (out > 0) {                                                                       \
                    int32_t prev = symbols[out - 1];                                                 \
                    if (change(e, prev, left, -count, -1) < 0 || change(e, prev, new_id, count, w) < 0) \
                        return -1;                                                                   \
                }                                                                                    \
                if (in + 2 < len) {                                                                  \
                    int32_t next = symbols[in + 2];                                                  \
                    if (change(e, right, next, -count, -1) < 0 || change(e, new_id, next, count, w) < 0) \
                        return -1;                                                                   \
                }                                                                                    \
                symbols[out++] = (T)new_id;                                                          \
                in += 2;                                                                             \
            } else {                                                                                 \
                symbols[out++] = symbols[in++];                                                      \
            }                                                                                        \
        }                                                                                            \
        e->live_symbols -= (size_t)(len - out);                                                      \
        e->word_len[w] = out;                                                                        \
        return 0;                                                                                    \
    }
DEFINE_MERGE_WORD(merge_word_narrow, uint16_t)
DEFINE_MERGE_WORD(merge_word_wide, int32_t)

/* Before word holders[h] of a merge: fetch ahead where the words PREFETCH_AHEAD on are and,
 * half as far on, their symbols (the holders are words all over the buffer: a cache miss each,
 * which would otherwise come one after the other). A macro: GCC drops a call to a function that
 * only prefetches (it has no effect that GCC sees). */
#define PREFETCH_AHEAD 16
#define PREFETCH_WORDS(e, holders, n_holders, h)                                                     \
    do {                                                                                             \
        if ((h) + PREFETCH_AHEAD < (n_holders)) {                                                    \
            int32_t ahead_ = (holders)[(h) + PREFETCH_AHEAD];                                        \
            PREFETCH(&(e)->word_start[ahead_]);                                                      \
            PREFETCH(&(e)->word_len[ahead_]);                                                        \
            PREFETCH(&(e)->word_count[ahead_]);                                                      \
        }                                                                                            \
        if ((h) + PREFETCH_AHEAD / 2 < (n_holders)) {                                                \
            int32_t ahead_ = (holders)[(h) + PREFETCH_AHEAD / 2];                                    \
            PREFETCH((const char *)(e)->symbols + (size_t)(e)->word_start[ahead_] * symbol_size(e)); \
        }                                                                                            \
    } while (0)

/* Add word w (just merged) to the list of pair (left, right), one of its pairs, if the merge
 * fills that list. */
static inline int fill_holder(Engine *e, int32_t left, int32_t right, int32_t w) {
    int32_t p = find_pair(e, left, right);
    if (p < 0) return internal_error("a merged word holds a pair the table lacks", left, right);
    return (e->pair_state[p] & PS_FILL) ? add_holder(e, p, w) : 0;
}

/* apply(left, right, new_id): merge (left, right) -> new_id in every word holding it. new_id is
 * an id the engine knows (extend() first for a new one). */
/* One merge (apply() and apply_all()): 0, or -1 with an error set (the engine broken when the
 * failure came after the state began to change). */
static int apply_one(Engine *e, int left, int right, int new_id) {
    if (check_id(e, left) < 0 || check_id(e, right) < 0 || check_id(e, new_id) < 0) return -1;
    if (new_id == left || new_id == right) {
        PyErr_SetString(PyExc_ValueError, "a merge cannot produce one of its own parts");
        return -1;
    }
    int32_t target = find_pair(e, left, right);
    if (target < 0) return 0;
    if (e->planned > 1) e->planned--;
    /* From here on the state changes: a failure breaks the engine. */
    if (!e->wide && new_id > UINT16_MAX && widen(e) < 0) goto fail;
    if (!is_listed(e, target) && list_holders(e, target) < 0) goto fail;
    /* Take the holder list: the merge removes the pair from every word, so the list empties. */
    int32_t n_holders = holder_count(e, target), few[INLINE_HOLDERS];
    int32_t *holders = holder_entries(e, target);
    if (holder_mode(e, target) != HS_LIST) holders = memcpy(few, holders, sizeof(few));
    drop_holders(e, target);

    /* subtle: a word listed twice is scanned twice; the second scan finds no pair left */
    for (int32_t h = 0; h < n_holders; h++) {
        int32_t w = holders[h];
        PREFETCH_WORDS(e, holders, n_holders, h);
        if ((e->wide ? merge_word_wide(e, w, left, right, new_id) : merge_word_narrow(e, w, left, right, new_id)) < 0)
            goto fail;
    }
    /* get_pair may have moved the pairs array: index afresh. */
    e->pairs[target].count = 0;
    /* The pairs this merge created have their highest counts now (later merges only take from
     * them, unless one reuses a token). Those at or above the list floor get their lists, from
     * the words just merged; the others stay unlisted, as the last index would have left them.
     * Early merges create many holder entries, mostly of pairs never merged. */
    int fill = 0;
    for (size_t g = 0; g < e->n_grown; g++) {
        int32_t p = e->grown[g];
        if (holder_mode(e, p) != HS_NEWBORN) continue;
        if (e->pairs[p].count >= e->list_floor) {
            e->pair_state[p] = PS_GROWN | PS_FILL; /* listed, empty */
            fill = 1;
        } else {
            set_holder_mode(e, p, HS_UNLISTED);
        }
    }
    for (int32_t h = 0; fill && h < n_holders; h++) {
        int32_t w = holders[h];
        PREFETCH_WORDS(e, holders, n_holders, h);
        size_t at = (size_t)e->word_start[w];
        int32_t len = e->word_len[w];
        for (int32_t j = 0; j < len; j++) {
            if (symbol_at(e, at + j) != new_id) continue;
            if (j > 0 && fill_holder(e, symbol_at(e, at + j - 1), new_id, w) < 0) goto fail;
            if (j + 1 < len && fill_holder(e, new_id, symbol_at(e, at + j + 1), w) < 0) goto fail;
        }
    }
    for (size_t g = 0; g < e->n_grown; g++) {
        int32_t p = e->grown[g];
        e->pair_state[p] &= HS_MODE;
        if (e->pairs[p].count >= e->heap_floor && heap_push(e, e->pairs[p].count, p) < 0) goto fail;
    }
    e->n_grown = 0;
    compact_words(e);
    /* Rebuild the index once stale entries fill it: its space is past REINDEX_PCT% of the live
     * symbols (at most that many entries are live) and has doubled since the last rebuild (so
     * that short lists, two header entries each, cannot make every merge rebuild it). */
    if (e->holder_space * 100 > REINDEX_PCT * e->live_symbols + 100 * HOLDER_BLOCK &&
        e->holder_space > 2 * e->indexed_space) {
        if (index_holders(e, e->list_floor, e->list_floor) < 0) goto fail;
    }
    if (e->journal_on && journal_flush(e) < 0) goto fail;
    return 0;

fail:
    break_engine(e, "a merge");
    return -1;
}

static PyObject *Engine_apply(Engine *e, PyObject *args) {
    int left, right, new_id;
    if (!PyArg_ParseTuple(args, "iii", &left, &right, &new_id)) return NULL;
    if (ensure_indexed(e) < 0) return NULL;
    e->journal_step = 0;
    if (apply_one(e, left, right, new_id) < 0) return NULL;
    Py_RETURN_NONE;
}

/* apply_all(merges): apply() for each (left, right, new_id) row of an int32 buffer, in order;
 * the journal names each change's row. */
static PyObject *Engine_apply_all(Engine *e, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (view.itemsize != 4 || view.len % 12 != 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "apply_all() takes int32 (left, right, new_id) rows");
        return NULL;
    }
    if (ensure_indexed(e) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const int32_t *rows = (const int32_t *)view.buf;
    Py_ssize_t n = view.len / 12;
    for (Py_ssize_t i = 0; i < n; i++) {
        e->journal_step = (int64_t)i;
        if (apply_one(e, rows[3 * i], rows[3 * i + 1], rows[3 * i + 2]) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    e->journal_step = 0;
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* words(): every word's current symbols, as lists of ids. */
static PyObject *Engine_words(Engine *e, PyObject *Py_UNUSED(ignored)) {
    if (check_usable(e) < 0) return NULL;
    PyObject *out = PyList_New(e->n_words);
    if (out == NULL) return NULL;
    for (Py_ssize_t w = 0; w < e->n_words; w++) {
        PyObject *word = PyList_New(e->word_len[w]);
        if (word == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        for (int32_t j = 0; j < e->word_len[w]; j++) {
            PyObject *id = PyLong_FromLong(symbol_at(e, (size_t)e->word_start[w] + (size_t)j));
            if (id == NULL) {
                Py_DECREF(word);
                Py_DECREF(out);
                return NULL;
            }
            PyList_SET_ITEM(word, j, id);
        }
        PyList_SET_ITEM(out, w, word);
    }
    return out;
}

/* pair_count(left, right): the current count of a pair (0 when absent). */
static PyObject *Engine_pair_count(Engine *e, PyObject *args) {
    int left, right;
    if (!PyArg_ParseTuple(args, "ii", &left, &right)) return NULL;
    if (ensure_indexed(e) < 0) return NULL;
    int32_t p = find_pair(e, left, right);
    return PyLong_FromLongLong(p < 0 ? 0 : (long long)e->pairs[p].count);
}

/* Add delta to the count of pair (left, right), held by no word: 0, or -1 with an error set. */
static int adjust_one(Engine *e, int left, int right, int64_t delta) {
    int32_t p = find_pair(e, left, right);
    int64_t current = p < 0 ? 0 : e->pairs[p].count;
    if (current + delta < (e->lenient && current > 0 ? 1 : 0)) {
        if (!e->lenient) {
            PyErr_Format(PyExc_ValueError, "adjust: the count of pair (%d, %d) would fall below zero", left, right);
            return -1;
        }
        delta = current > 0 ? 1 - current : 0;
    }
    if (delta == 0) return 0;
    if (p < 0) {
        p = get_pair(e, left, right);
        if (p < 0) goto fail;
        set_holder_mode(e, p, 0); /* listed, empty */
    }
    e->pairs[p].count += delta;
    if (delta > 0 && e->pairs[p].count >= e->heap_floor && heap_push(e, e->pairs[p].count, p) < 0) goto fail;
    return 0;
fail:
    break_engine(e, "adjusting a pair count");
    return -1;
}

/* adjust(left, right, delta): add delta to the pair's count without a word holding it (a count
 * kept for words the engine does not hold). The count must stay >= 0 (unless lenient(): then it
 * stops at 0); a pair first made here is listed (empty), so words that gain it later are added
 * to its list. */
static PyObject *Engine_adjust(Engine *e, PyObject *args) {
    int left, right;
    long long delta;
    if (!PyArg_ParseTuple(args, "iiL", &left, &right, &delta)) return NULL;
    if (ensure_indexed(e) < 0) return NULL;
    if (check_id(e, left) < 0 || check_id(e, right) < 0) return NULL;
    if (adjust_one(e, left, right, delta) < 0) return NULL;
    Py_RETURN_NONE;
}

/* adjust_many(pairs, deltas): adjust() for each int64 pair key (left << 32 | right) and int64
 * delta of two buffers. */
static PyObject *Engine_adjust_many(Engine *e, PyObject *args) {
    Py_buffer keys, deltas;
    if (!PyArg_ParseTuple(args, "y*y*", &keys, &deltas)) return NULL;
    PyObject *result = NULL;
    if (keys.len != deltas.len || keys.len % 8 != 0) {
        PyErr_SetString(PyExc_ValueError, "adjust_many() takes int64 pair keys and as many int64 deltas");
        goto done;
    }
    if (ensure_indexed(e) < 0) goto done;
    const int64_t *k = (const int64_t *)keys.buf, *d = (const int64_t *)deltas.buf;
    for (Py_ssize_t i = 0; i < keys.len / 8; i++) {
        int64_t left = k[i] >> 32, right = k[i] & 0xffffffffLL;
        if (check_id(e, left) < 0 || check_id(e, right) < 0 || adjust_one(e, (int)left, (int)right, d[i]) < 0)
            goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&keys);
    PyBuffer_Release(&deltas);
    return result;
}

/* lenient(on): a count that would fall below one stops at one instead of failing (an engine of
 * guesses, whose counts need not add up). Not zero: a pair at zero is recycled (refill()), and
 * a word may still hold it. */
static PyObject *set_flag(int *flag, PyObject *arg) {
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    *flag = on;
    Py_RETURN_NONE;
}

static PyObject *Engine_lenient(Engine *e, PyObject *arg) { return set_flag(&e->lenient, arg); }

/* index_all(): list the holders of every pair, for an engine that only replays merges (apply()
 * without best()): otherwise each merge of a pair not listed yet scans every word. */
static PyObject *Engine_index_all(Engine *e, PyObject *Py_UNUSED(ignored)) {
    if (ensure_indexed(e) < 0) return NULL;
    if (index_holders(e, 0, 0) < 0) {
        break_engine(e, "listing the holders");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* plan(merges, lowest): the caller means to make about `merges` more merges (0: unknown), none
 * of a pair counted below `lowest`; the engine lists holders for as many at once as memory
 * allows (refill()). Only a guess: the merges are the same whatever it says. */
static PyObject *Engine_plan(Engine *e, PyObject *args) {
    long long merges, lowest;
    if (check_usable(e) < 0 || !PyArg_ParseTuple(args, "LL", &merges, &lowest)) return NULL;
    e->planned = merges > 0 ? (int64_t)merges : 0;
    e->plan_lowest = lowest > 0 ? (int64_t)lowest : 0;
    Py_RETURN_NONE;
}

/* journal(on): start (True) or stop (False) recording the changes of pair counts by merges. */
static PyObject *Engine_journal(Engine *e, PyObject *arg) {
    if (e->journal_epoch == 0) e->journal_epoch = 1; /* marks start at 0: none is current */
    return set_flag(&e->journal_on, arg);
}

/* take_journal(): the changes recorded since the last call, as bytes of int64 rows
 * (step, left, right, delta), one per merge and pair it changed; the journal is emptied. */
static PyObject *Engine_take_journal(Engine *e, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = PyBytes_FromStringAndSize((const char *)e->journal, (Py_ssize_t)(e->n_journal * sizeof(int64_t)));
    if (out != NULL) e->n_journal = 0;
    return out;
}

/* packed(): every word's current symbols as (int32 ids bytes, int64 offsets bytes). */
static PyObject *Engine_packed(Engine *e, PyObject *Py_UNUSED(ignored)) {
    if (check_usable(e) < 0) return NULL;
    PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(e->live_symbols * sizeof(int32_t)));
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((size_t)(e->n_words + 1) * sizeof(int64_t)));
    if (data == NULL || offsets == NULL) {
        Py_XDECREF(data);
        Py_XDECREF(offsets);
        return NULL;
    }
    int32_t *ids = (int32_t *)PyBytes_AS_STRING(data);
    int64_t *at = (int64_t *)PyBytes_AS_STRING(offsets);
    size_t n = 0;
    for (Py_ssize_t w = 0; w < e->n_words; w++) {
        at[w] = (int64_t)n;
        for (int32_t j = 0; j < e->word_len[w]; j++) ids[n++] = symbol_at(e, (size_t)e->word_start[w] + (size_t)j);
    }
    at[e->n_words] = (int64_t)n;
    return Py_BuildValue("(NN)", data, offsets);
}

/* stats(): sizes of the engine's structures (for profiling memory). */
static PyObject *Engine_stats(Engine *e, PyObject *Py_UNUSED(ignored)) {
    if (check_usable(e) < 0) return NULL;
    size_t holders = 0, live_pairs = 0, symbols = 0;
    for (size_t p = 0; p < e->n_pairs; p++) {
        holders += (size_t)holder_count(e, (int32_t)p);
        live_pairs += e->pairs[p].count > 0;
    }
    for (Py_ssize_t w = 0; w < e->n_words; w++) symbols += (size_t)e->word_len[w];
    return Py_BuildValue("{s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n}", "words", (Py_ssize_t)e->n_words,
                         "symbols", (Py_ssize_t)symbols, "symbol_capacity", (Py_ssize_t)e->cap_symbols,
                         "symbol_bytes", (Py_ssize_t)symbol_size(e), "pairs", (Py_ssize_t)(e->n_pairs - e->n_free),
                         "live_pairs", (Py_ssize_t)live_pairs, "holders", (Py_ssize_t)holders,
                         "holder_space", (Py_ssize_t)e->holder_space, "indexes", (Py_ssize_t)e->n_indexes,
                         "scans", (Py_ssize_t)e->n_scans,
                         "heap", (Py_ssize_t)e->n_heap, "slots", (Py_ssize_t)e->n_slots);
}

static PyMethodDef Engine_methods[] = {
    {"stats", (PyCFunction)Engine_stats, METH_NOARGS, "Sizes of the engine's structures."},
    {"best", (PyCFunction)Engine_best, METH_NOARGS, "The top pair as (left, right, count), or None."},
    {"apply", (PyCFunction)Engine_apply, METH_VARARGS,
     "apply(left, right, new_id): merge the pair in every word holding it."},
    {"apply_all", (PyCFunction)Engine_apply_all, METH_O,
     "apply_all(merges): apply() each (left, right, new_id) row of an int32 buffer, in order."},
    {"extend", (PyCFunction)Engine_extend, METH_O,
     "extend(keys): add the tie-break keys of the next ids; returns the number of ids known."},
    {"limit", (PyCFunction)Engine_limit, METH_VARARGS,
     "limit(max_len, lengths): a length limit (0: none) and the lengths of the next ids; returns how many are known."},
    {"words", (PyCFunction)Engine_words, METH_NOARGS, "Every word's current symbol ids."},
    {"pair_count", (PyCFunction)Engine_pair_count, METH_VARARGS, "The current count of a pair."},
    {"adjust", (PyCFunction)Engine_adjust, METH_VARARGS,
     "adjust(left, right, delta): add delta to a pair's count, held by no word."},
    {"adjust_many", (PyCFunction)Engine_adjust_many, METH_VARARGS,
     "adjust_many(pairs, deltas): adjust() each int64 pair key (left << 32 | right) by its int64 delta."},
    {"lenient", (PyCFunction)Engine_lenient, METH_O, "lenient(on): counts stop at one instead of failing."},
    {"index_all", (PyCFunction)Engine_index_all, METH_NOARGS, "List every pair's holders (for replaying merges)."},
    {"plan", (PyCFunction)Engine_plan, METH_VARARGS,
     "plan(merges, lowest): about how many more merges the caller means to make, none counted below lowest."},
    {"journal", (PyCFunction)Engine_journal, METH_O, "journal(on): record the pair-count changes of merges."},
    {"take_journal", (PyCFunction)Engine_take_journal, METH_NOARGS,
     "The recorded changes as int64 (step, left, right, delta) rows in bytes, summed per merge and pair; "
     "empties the journal."},
    {"packed", (PyCFunction)Engine_packed, METH_NOARGS, "Every word's symbols as (int32 ids, int64 offsets) bytes."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bpe_spark.native._fastbpe.Engine",
    .tp_doc = "Engine(words, counts, keys, first_id, lexicographic): compiled exact BPE merge state.",
    .tp_basicsize = sizeof(Engine),
    .tp_itemsize = 0,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Engine_init,
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_methods = Engine_methods,
};

static PyMethodDef module_methods[] = {
    FAIL_ALLOCATIONS_METHOD,
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastbpe_module = {
    PyModuleDef_HEAD_INIT, "_fastbpe", "Compiled core of bpe_spark's merge engine.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__fastbpe(void) {
    if (PyType_Ready(&EngineType) < 0) return NULL;
    PyObject *m = PyModule_Create(&fastbpe_module);
    if (m == NULL) return NULL;
    /* bpe_spark/native/compiled.py checks this: a stale build (older source) is not used */
    if (PyModule_AddIntConstant(m, "API_VERSION", 10) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&EngineType);
    if (PyModule_AddObject(m, "Engine", (PyObject *)&EngineType) < 0) {
        Py_DECREF(&EngineType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
