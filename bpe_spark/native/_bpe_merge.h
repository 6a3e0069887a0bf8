/* bpe_spark/native/_bpe_merge.h: the BPE engine of the compiled encoder (_fastenc.c): the merge table
 * (left, right) -> (rank, new_id) and the BPE of one pretoken, lowest rank first, leftmost on
 * ties (bpe_merge's rule in bpe_spark/bpe/words.py, the specification).
 *
 * Both merge rules run here: "pairs" (the table holds the merges in rank order) and tiktoken's
 * "ranks" (the table holds every split of every token into two tokens, with the token's rank:
 * merging the adjacent pair of lowest rank is then exactly merging the pair whose concatenation
 * has the lowest rank).
 *
 * Short pretokens (<= 64 symbols) rescan an array of pair ranks. Long ones run a bucket queue
 * by rank over a linked list: one bucket per rank, taken in increasing rank, its positions in
 * increasing order (leftmost first); a merge of a well-formed model only makes pairs of higher
 * rank than its own, which go to their bucket; a pair of a rank not above the current one (a
 * model that is not well formed) goes to a binary heap, and the smaller of the heap's top and
 * the bucket's next wins, so the order is exact either way. A bucket whose positions came out
 * of order is radix sorted when taken. From SORTED_FIRST symbols the first pairs are counting
 * sorted by rank instead of listed (read in order, their nodes prefetched: a list of one rank
 * chased through a pretoken of a million symbols missed the processor's caches at every step).
 * For a well-formed model the time is linear in the length (plus one pass over a bitmap of the
 * ranks, two for the sorted first pairs; the heap's pairs add their log), with no allocation
 * once a pretoken starts. tests/native/test_compiled_ranks.py proves it equal to bpe_merge.
 */
#ifndef BPE_SPARK_MERGE_H
#define BPE_SPARK_MERGE_H

#include "_bpe_common.h"

#define EMPTY_KEY 0xffffffffffffffffULL
#define NO_RANK INT32_MAX
#define SHORT_PRETOKEN 64
#define MAX_BUCKETS ((size_t)1 << 24) /* ranks above this: the heap alone */
#define SORTED_FIRST 2048 /* from this many symbols, the first pairs are counting sorted by rank */
#define PREFETCH_AHEAD 8

typedef struct {
    int32_t rank, position;
} HeapItem;

/* A slot of the merge table: one cache line holds four. */
typedef struct {
    uint64_t key;
    int32_t rank, new_id;
} MergeSlot;

/* A symbol of a long pretoken in its linked list (next = -1: merged into its left neighbour). */
typedef struct {
    int32_t id, next, prev;
} Node;

/* A position in a bucket's list. */
typedef struct {
    int32_t position, next;
} Entry;

typedef struct {
    /* merge table: (left, right) -> (rank, new_id); key EMPTY_KEY marks an empty slot */
    MergeSlot *table;
    size_t slots, used;
    int32_t max_rank;
    /* scratch for one pretoken */
    int32_t *work, *rank_of;
    size_t work_cap;
    /* the bucket queue: head / tail entry of each rank (-1: empty), a bit per non-empty rank
     * and per rank whose entries came out of order; entries (position, next entry) */
    int32_t *head, *tail;
    uint64_t *nonempty, *unsorted;
    size_t n_buckets;
    Entry *entries;
    int32_t *batch, *sort_tmp;
    /* a very long pretoken's first pairs, counting sorted by rank (their positions in increasing
     * order within a rank), and per rank the end of its run there (0 when not in use) */
    int32_t *first, *first_end;
    Node *nodes;
    HeapItem *heap;
    size_t entry_cap, node_cap;
} MergeEngine;

static void engine_free(MergeEngine *m) {
    void *arrays[] = {m->table,    m->work,     m->rank_of,  m->head,  m->tail,  m->nonempty, m->unsorted,
                      m->entries,  m->sort_tmp, m->batch,    m->first, m->first_end, m->nodes,  m->heap};
    for (size_t k = 0; k < sizeof(arrays) / sizeof(arrays[0]); k++) PyMem_Free(arrays[k]);
    memset(m, 0, sizeof(*m));
}

/* An empty table with room for `count` pairs; -1 with MemoryError set. */
static int engine_table(MergeEngine *m, size_t count) {
    size_t slots = grown_capacity(0, count * 2 + 2, 16);
    if (slots == 0) return PyErr_NoMemory(), -1;
    m->table = bpe_alloc_array(slots, sizeof(MergeSlot));
    if (m->table == NULL) return -1;
    for (size_t i = 0; i < slots; i++) m->table[i].key = EMPTY_KEY;
    m->slots = slots;
    m->max_rank = -1;
    return 0;
}

/* Add a pair (the table has room: engine_table's count); a repeated pair keeps its first entry. */
static void engine_put(MergeEngine *m, int32_t left, int32_t right, int32_t rank, int32_t new_id) {
    uint64_t k = pair_key(left, right);
    size_t mask = m->slots - 1, i = (size_t)mix64(k) & mask;
    while (m->table[i].key != EMPTY_KEY && m->table[i].key != k) i = (i + 1) & mask;
    if (m->table[i].key == k) return;
    m->table[i] = (MergeSlot){k, rank, new_id};
    m->used++;
    if (rank > m->max_rank) m->max_rank = rank;
}

static inline int32_t lookup_merge(const MergeEngine *m, int32_t left, int32_t right, int32_t *new_id) {
    uint64_t k = pair_key(left, right);
    size_t mask = m->slots - 1, i = (size_t)mix64(k) & mask;
    for (;;) {
        const MergeSlot *slot = m->table + i;
        if (slot->key == k) {
            *new_id = slot->new_id;
            return slot->rank;
        }
        uint64_t key = slot->key;
        if (key == EMPTY_KEY) return NO_RANK;
        i = (i + 1) & mask;
    }
}

/* Room for n symbols in the scratch arrays (and, for a long pretoken, the queue's); -1 with
 * MemoryError set. */
static int reserve_work(MergeEngine *m, size_t n) {
    if (n > m->work_cap) {
        size_t cap = grown_capacity(m->work_cap, n, 64);
        if (cap == 0) return PyErr_NoMemory(), -1;
        int32_t **arrays[] = {&m->work, &m->rank_of};
        for (int k = 0; k < 2; k++) {
            int32_t *a = bpe_realloc_array(*arrays[k], cap, sizeof(int32_t));
            if (a == NULL) return -1; /* the ones already grown are only bigger */
            *arrays[k] = a;
        }
        m->work_cap = cap;
    }
    if (n <= SHORT_PRETOKEN) return 0;
    /* a long pretoken: n - 1 first pairs and at most two new ones per merge */
    size_t entries;
    if (size_mul_overflow(n, 3, &entries)) return PyErr_NoMemory(), -1;
    if (entries > m->entry_cap) {
        size_t cap = grown_capacity(m->entry_cap, entries, 1024);
        if (cap == 0) return PyErr_NoMemory(), -1;
        Entry *list = bpe_realloc_array(m->entries, cap, sizeof(Entry));
        if (list == NULL) return -1;
        m->entries = list;
        int32_t *batch = bpe_realloc_array(m->batch, cap, sizeof(int32_t));
        if (batch == NULL) return -1;
        m->batch = batch;
        int32_t *tmp = bpe_realloc_array(m->sort_tmp, cap, sizeof(int32_t));
        if (tmp == NULL) return -1;
        m->sort_tmp = tmp;
        HeapItem *heap = bpe_realloc_array(m->heap, cap, sizeof(HeapItem));
        if (heap == NULL) return -1;
        m->heap = heap;
        m->entry_cap = cap;
    }
    if (n > m->node_cap) {
        size_t cap = grown_capacity(m->node_cap, n, 1024);
        Node *nodes = cap ? bpe_realloc_array(m->nodes, cap, sizeof(Node)) : NULL;
        if (nodes == NULL) return cap ? -1 : (PyErr_NoMemory(), -1);
        m->nodes = nodes;
        int32_t *first = bpe_realloc_array(m->first, cap, sizeof(int32_t));
        if (first == NULL) return -1;
        m->first = first;
        m->node_cap = cap;
    }
    if (m->head == NULL && m->max_rank >= 0 && (size_t)m->max_rank < MAX_BUCKETS) {
        size_t n_buckets = (size_t)m->max_rank + 1, words = (n_buckets + 63) / 64;
        m->head = bpe_alloc_array(n_buckets, sizeof(int32_t));
        m->tail = m->head ? bpe_alloc_array(n_buckets, sizeof(int32_t)) : NULL;
        m->nonempty = m->tail ? bpe_calloc_array(words, sizeof(uint64_t)) : NULL;
        m->unsorted = m->nonempty ? bpe_calloc_array(words, sizeof(uint64_t)) : NULL;
        m->first_end = m->unsorted ? bpe_calloc_array(n_buckets, sizeof(int32_t)) : NULL;
        if (m->first_end == NULL) {
            PyMem_Free(m->head);
            PyMem_Free(m->tail);
            PyMem_Free(m->nonempty);
            PyMem_Free(m->unsorted);
            m->head = m->tail = NULL;
            m->nonempty = m->unsorted = NULL;
            return -1;
        }
        memset(m->head, 0xff, n_buckets * sizeof(int32_t));
        memset(m->tail, 0xff, n_buckets * sizeof(int32_t));
        m->n_buckets = n_buckets;
    }
    return 0;
}

static inline int item_less(HeapItem a, HeapItem b) {
    return a.rank < b.rank || (a.rank == b.rank && a.position < b.position);
}

static void heap_push(HeapItem *heap, size_t *n, HeapItem item) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!item_less(item, heap[parent])) break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i] = item;
}

static HeapItem heap_pop(HeapItem *heap, size_t *n) {
    HeapItem top = heap[0], item = heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= *n) break;
        if (child + 1 < *n && item_less(heap[child + 1], heap[child])) child++;
        if (!item_less(heap[child], item)) break;
        heap[i] = heap[child];
        i = child;
    }
    if (*n > 0) heap[i] = item;
    return top;
}

/* The queue of one long pretoken's pairs: the current rank's positions in increasing order
 * (its bucket's list from entry `walk`, or when that list came out of order, sorted into
 * batch[at..batch_n); and for a very long pretoken its first pairs of that rank,
 * first[first_at..first_stop)), the buckets of higher ranks, and the heap of the rest. */
typedef struct {
    int32_t cursor, walk;
    size_t n_entries, batch_n, at, heap_n;
    size_t first_at, first_stop;
} Queue;

static inline void queue_push(MergeEngine *m, Queue *q, int32_t rank, int32_t position) {
    if (rank > q->cursor && (size_t)rank < m->n_buckets) {
        int32_t x = (int32_t)q->n_entries++, t = m->tail[rank];
        m->entries[x] = (Entry){position, -1};
        if (t < 0) {
            m->head[rank] = x;
            m->nonempty[rank >> 6] |= (uint64_t)1 << (rank & 63);
        } else {
            m->entries[t].next = x;
            if (m->entries[t].position > position) m->unsorted[rank >> 6] |= (uint64_t)1 << (rank & 63);
        }
        m->tail[rank] = x;
    } else {
        heap_push(m->heap, &q->heap_n, (HeapItem){rank, position});
    }
}

/* Sort positions (>= 0) in increasing order: insertion sort when few, else a radix sort by
 * bytes (linear), through tmp. */
static void sort_positions(int32_t *a, int32_t *tmp, size_t n) {
    if (n <= 32) {
        for (size_t i = 1; i < n; i++) {
            int32_t x = a[i];
            size_t j = i;
            while (j > 0 && a[j - 1] > x) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = x;
        }
        return;
    }
    uint32_t top = 0;
    for (size_t i = 0; i < n; i++) top |= (uint32_t)a[i];
    int32_t *from = a, *to = tmp;
    for (int shift = 0; shift < 32 && (top >> shift) != 0; shift += 8) {
        size_t count[257] = {0};
        for (size_t i = 0; i < n; i++) count[(((uint32_t)from[i] >> shift) & 255) + 1]++;
        for (int d = 0; d < 256; d++) count[d + 1] += count[d];
        for (size_t i = 0; i < n; i++) to[count[((uint32_t)from[i] >> shift) & 255]++] = from[i];
        int32_t *swap = from;
        from = to;
        to = swap;
    }
    if (from != a) memcpy(a, from, n * sizeof(int32_t));
}

/* Make the next non-empty bucket (above the cursor) the current one; 0 when there is none. */
static int queue_next_bucket(MergeEngine *m, Queue *q) {
    size_t from = (size_t)(q->cursor + 1), words = (m->n_buckets + 63) / 64;
    if (from >= m->n_buckets) return 0;
    size_t w = from >> 6;
    uint64_t bits = m->nonempty[w] & (~(uint64_t)0 << (from & 63));
    while (bits == 0) {
        if (++w >= words) return 0;
        bits = m->nonempty[w];
    }
    int32_t rank = (int32_t)(w * 64 + (size_t)__builtin_ctzll(bits));
    uint64_t bit = (uint64_t)1 << (rank & 63);
    q->walk = m->head[rank];
    q->batch_n = q->at = 0;
    if (m->first_end[rank] != 0) { /* the rank's first pairs: runs in rank order, so from the last one's end */
        q->first_at = q->first_stop;
        q->first_stop = (size_t)m->first_end[rank];
        m->first_end[rank] = 0;
    } else {
        q->first_at = q->first_stop;
    }
    if (m->unsorted[w] & bit) {
        size_t n = 0;
        for (int32_t x = q->walk; x >= 0; x = m->entries[x].next) m->batch[n++] = m->entries[x].position;
        sort_positions(m->batch, m->sort_tmp, n);
        q->walk = -1;
        q->batch_n = n;
    }
    m->nonempty[w] &= ~bit;
    m->unsorted[w] &= ~bit;
    m->head[rank] = m->tail[rank] = -1;
    q->cursor = rank;
    return 1;
}

/* The next pair to try, lowest (rank, position) first; 0 when the queue is empty. */
static inline int queue_pop(MergeEngine *m, Queue *q, HeapItem *item) {
    for (;;) {
        int32_t position = -1, first = -1;
        if (q->walk >= 0) position = m->entries[q->walk].position;
        else if (q->at < q->batch_n) position = m->batch[q->at];
        if (q->first_at < q->first_stop) {
            first = m->first[q->first_at];
            /* the symbols a few pairs on: their nodes are read soon, and lie far apart */
            if (q->first_at + PREFETCH_AHEAD < q->first_stop)
                __builtin_prefetch(m->nodes + m->first[q->first_at + PREFETCH_AHEAD], 1);
        }
        int from_first = first >= 0 && (position < 0 || first <= position);
        if (from_first) position = first;
        if (q->heap_n > 0 && (position < 0 || item_less(m->heap[0], (HeapItem){q->cursor, position}))) {
            *item = heap_pop(m->heap, &q->heap_n);
            return 1;
        }
        if (position >= 0) {
            if (from_first) q->first_at++;
            else if (q->walk >= 0) q->walk = m->entries[q->walk].next;
            else q->at++;
            *item = (HeapItem){q->cursor, position};
            return 1;
        }
        if (!queue_next_bucket(m, q)) return 0;
    }
}

/* The first pairs of a very long pretoken (their ranks in rank_of[0..n-1)) counting sorted by
 * rank into first[], each rank's run in increasing position, its end in first_end[rank] and its
 * bucket marked non-empty: read in order later (prefetched), not chased through a list. Pairs
 * of no rank, or past the buckets, are not there (the latter go to the heap). */
static void sort_first_pairs(MergeEngine *m, Queue *q, size_t n) {
    const int32_t *rank = m->rank_of;
    int32_t *end = m->first_end;
    for (size_t i = 0; i + 1 < n; i++) {
        int32_t r = rank[i];
        if (r == NO_RANK) continue;
        if ((size_t)r < m->n_buckets) {
            if (end[r]++ == 0) m->nonempty[r >> 6] |= (uint64_t)1 << (r & 63);
        } else {
            heap_push(m->heap, &q->heap_n, (HeapItem){r, (int32_t)i});
        }
    }
    /* each rank's run starts where the previous rank's ends: first_end holds its start for now */
    size_t at = 0, words = (m->n_buckets + 63) / 64;
    for (size_t w = 0; w < words; w++) {
        for (uint64_t bits = m->nonempty[w]; bits != 0; bits &= bits - 1) {
            size_t r = w * 64 + (size_t)__builtin_ctzll(bits);
            int32_t count = end[r];
            end[r] = (int32_t)at;
            at += (size_t)count;
        }
    }
    for (size_t i = 0; i + 1 < n; i++) {
        int32_t r = rank[i];
        if (r != NO_RANK && (size_t)r < m->n_buckets) m->first[end[r]++] = (int32_t)i;
    }
}

/* BPE over m->work[0..n) (room reserved by reserve_work): merge the lowest-rank adjacent pair,
 * leftmost first, until none has a rank. Returns the new length (the symbols are compacted in
 * m->work). */
static size_t bpe_in_place(MergeEngine *m, size_t n) {
    int32_t *v = m->work, new_id = -1;
    if (n < 2) return n;
    if (n <= SHORT_PRETOKEN) {
        /* short: keep the rank of each adjacent pair and rescan for the minimum */
        int32_t *rank = m->rank_of;
        for (size_t i = 0; i + 1 < n; i++) rank[i] = lookup_merge(m, v[i], v[i + 1], &new_id);
        for (;;) {
            size_t best = 0;
            int32_t best_rank = NO_RANK;
            for (size_t i = 0; i + 1 < n; i++) {
                if (rank[i] < best_rank) {
                    best_rank = rank[i];
                    best = i;
                }
            }
            if (best_rank == NO_RANK) break;
            lookup_merge(m, v[best], v[best + 1], &new_id);
            v[best] = new_id;
            memmove(v + best + 1, v + best + 2, (n - best - 2) * sizeof(int32_t));
            if (best + 3 <= n) memmove(rank + best + 1, rank + best + 2, (n - best - 3) * sizeof(int32_t));
            n--;
            if (best > 0) rank[best - 1] = lookup_merge(m, v[best - 1], v[best], &new_id);
            if (best + 1 < n) rank[best] = lookup_merge(m, v[best], v[best + 1], &new_id);
        }
        return n;
    }
    /* long (a run of CJK text, of spaces, of one letter): the queue over a linked list */
    Node *node = m->nodes;
    int32_t end = (int32_t)n, unused;
    Queue q = {-1, -1, 0, 0, 0, 0, 0, 0};
    for (size_t i = 0; i < n; i++) node[i] = (Node){v[i], (int32_t)i + 1, (int32_t)i - 1};
    if (n >= SORTED_FIRST && m->n_buckets > 0) {
        for (size_t i = 0; i + 1 < n; i++) m->rank_of[i] = lookup_merge(m, v[i], v[i + 1], &unused);
        sort_first_pairs(m, &q, n);
    } else {
        for (size_t i = 0; i + 1 < n; i++) {
            int32_t r = lookup_merge(m, v[i], v[i + 1], &unused);
            if (r != NO_RANK) queue_push(m, &q, r, (int32_t)i);
        }
    }
    HeapItem top;
    while (queue_pop(m, &q, &top)) {
        int32_t i = top.position, j = node[i].next;
        if (j < 0 || j >= end) continue;
        /* stale when the pair at i changed since the push: its rank then differs */
        if (lookup_merge(m, node[i].id, node[j].id, &new_id) != top.rank) continue;
        node[i].id = new_id;
        int32_t k = node[j].next, p = node[i].prev;
        node[j].next = -1;
        node[i].next = k;
        if (k < end) node[k].prev = i;
        if (p >= 0) {
            int32_t r = lookup_merge(m, node[p].id, new_id, &unused);
            if (r != NO_RANK) queue_push(m, &q, r, p);
        }
        if (k < end) {
            int32_t r = lookup_merge(m, new_id, node[k].id, &unused);
            if (r != NO_RANK) queue_push(m, &q, r, i);
        }
    }
    size_t out = 0;
    for (int32_t i = 0; i < end; i = node[i].next) v[out++] = node[i].id;
    return out;
}

#endif /* BPE_SPARK_MERGE_H */
