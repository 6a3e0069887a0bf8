/* bpe_spark/native/_pretokenizer.h: the compiled pretokenizers of bpe_spark.native._fastenc, over UTF-8 bytes.
 *
 * - The character classes (\p{L}, \p{N}, \s, and o200k's two letter classes) come from the Python
 *   `regex` module at start-up (set_char_classes), so the hand-written presets split exactly as
 *   `regex.findall` does.
 * - next_pretoken(pattern, s, n, i): the end of the pretoken that starts at i, for each preset
 *   (gpt2, cl100k, o200k; single-digits and digits-rtl3, o200k with another digit rule; superbpe,
 *   SuperBPE's stage-2 split with the text between its matches); stream_next / stream_tail split
 *   one long text in pieces.
 * - The module functions set_char_classes, has_char_classes and the _pretoken_ends test hook.
 *
 * Included once, by _fastenc.c (after _bpe_common.h); everything here is static.
 */
#ifndef BPE_SPARK_PRETOKENIZER_H
#define BPE_SPARK_PRETOKENIZER_H


#define CLASS_L 1
#define CLASS_N 2
#define CLASS_S 4
#define CLASS_U 8  /* o200k's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] ("upper": marks too, which are not \p{L}) */
#define CLASS_W 16 /* o200k's [\p{Ll}\p{Lm}\p{Lo}\p{M}] ("lower"); Lm, Lo and M are in both */
#define MAX_CODE_POINT 0x110000

static uint8_t *char_class = NULL; /* one byte per code point, set once from Python */

/* single-digits and digits-rtl3 are o200k with another digit rule (o200k_scan's `digits`) */
enum {
    PATTERN_NONE = 0, PATTERN_GPT2 = 1, PATTERN_CL100K = 2, PATTERN_O200K = 3, PATTERN_SUPERBPE = 4,
    PATTERN_SINGLE_DIGITS = 5, PATTERN_DIGITS_RTL3 = 6
};
#define IS_O200K_FAMILY(p) ((p) == PATTERN_O200K || (p) == PATTERN_SINGLE_DIGITS || (p) == PATTERN_DIGITS_RTL3)

/* The pattern a preset name selects; -1 (with ValueError set) for a name we do not compile. */
static int pattern_from_name(const char *name) {
    if (strcmp(name, "gpt2") == 0) return PATTERN_GPT2;
    if (strcmp(name, "cl100k") == 0) return PATTERN_CL100K;
    if (strcmp(name, "o200k") == 0) return PATTERN_O200K;
    if (strcmp(name, "superbpe") == 0) return PATTERN_SUPERBPE;
    if (strcmp(name, "single-digits") == 0) return PATTERN_SINGLE_DIGITS;
    if (strcmp(name, "digits-rtl3") == 0) return PATTERN_DIGITS_RTL3;
    PyErr_Format(PyExc_ValueError, "no compiled pretokenizer for pattern '%s'", name);
    return -1;
}

/* --- UTF-8 and character classes ---------------------------------------------------------- */

/* Decode the code point at s[i] (i < n); returns its byte length. The bytes are valid UTF-8 (from
 * a str); should a sequence be cut short by the end of the buffer anyway, its first byte counts
 * alone, as a code point of no class: no read goes past s[n - 1]. */
static inline int decode(const uint8_t *s, size_t n, size_t i, uint32_t *cp) {
    uint8_t b = s[i];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    size_t left = n - i;
    if (b < 0xE0 && left >= 2) {
        *cp = ((uint32_t)(b & 0x1F) << 6) | (s[i + 1] & 0x3F);
        return 2;
    }
    if (b >= 0xE0 && b < 0xF0 && left >= 3) {
        *cp = ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
        return 3;
    }
    if (b >= 0xF0 && left >= 4) {
        *cp = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
              ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
        return 4;
    }
    *cp = MAX_CODE_POINT; /* cut short: no class */
    return 1;
}

static inline int class_at(const uint8_t *s, size_t n, size_t i, int *width) {
    uint32_t cp;
    *width = decode(s, n, i, &cp);
    return cp < MAX_CODE_POINT ? char_class[cp] : 0;
}

/* End of the run from i of code points whose class satisfies: (class & mask) == want. */
static inline size_t run_of(const uint8_t *s, size_t n, size_t i, int mask, int want) {
    while (i < n) {
        int w, c = class_at(s, n, i, &w);
        if ((c & mask) != want) break;
        i += (size_t)w;
    }
    return i;
}

#define IS_LETTER(c) (((c) & CLASS_L) != 0)
#define IS_NUMBER(c) (((c) & CLASS_N) != 0)
#define IS_SPACE(c) (((c) & CLASS_S) != 0)
#define IS_OTHER(c) (((c) & (CLASS_L | CLASS_N | CLASS_S)) == 0)
#define ALL_CLASSES (CLASS_L | CLASS_N | CLASS_S)

/* Start of the last code point before position k (k > 0). */
static inline size_t last_start(const uint8_t *s, size_t k) {
    size_t j = k - 1;
    while (j > 0 && (s[j] & 0xC0) == 0x80) j--;
    return j;
}

/* Whitespace at i: `\s+(?!\S)|\s+` (gpt2's last two alternatives). */
static inline size_t spaces_then_lookahead(const uint8_t *s, size_t n, size_t i) {
    size_t k = run_of(s, n, i, CLASS_S, CLASS_S);
    if (k == n) return k;
    size_t last = last_start(s, k);
    return last > i ? last : k; /* leave the last space to the next word, if it is not alone */
}

/* gpt2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t gpt2_next(const uint8_t *s, size_t n, size_t i) {
    uint8_t b = s[i];
    if (b == '\'' && i + 1 < n) {
        uint8_t a = s[i + 1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if (i + 2 < n) {
            uint8_t c = s[i + 2];
            if ((a == 'r' && c == 'e') || (a == 'v' && c == 'e') || (a == 'l' && c == 'l')) return i + 3;
        }
    }
    int w, cls;
    if (b == ' ' && i + 1 < n) {
        cls = class_at(s, n, i + 1, &w);
        if (IS_LETTER(cls)) return run_of(s, n, i + 1 + w, CLASS_L, CLASS_L);
        if (IS_NUMBER(cls)) return run_of(s, n, i + 1 + w, CLASS_N, CLASS_N);
        if (IS_OTHER(cls)) return run_of(s, n, i + 1 + w, ALL_CLASSES, 0);
    }
    cls = class_at(s, n, i, &w);
    if (IS_LETTER(cls)) return run_of(s, n, i + w, CLASS_L, CLASS_L);
    if (IS_NUMBER(cls)) return run_of(s, n, i + w, CLASS_N, CLASS_N);
    if (IS_OTHER(cls)) return run_of(s, n, i + w, ALL_CLASSES, 0);
    return spaces_then_lookahead(s, n, i);
}

/* (?i:x) for the ASCII letters of cl100k's contractions; 's' also folds from U+017F (long s). */
static inline int fold_is(const uint8_t *s, size_t n, size_t i, char lower, int *width) {
    if (i >= n) return 0;
    uint8_t b = s[i];
    if (b == (uint8_t)lower || b == (uint8_t)(lower - 32)) {
        *width = 1;
        return 1;
    }
    if (lower == 's' && b == 0xC5 && i + 1 < n && s[i + 1] == 0xBF) {
        *width = 2;
        return 1;
    }
    return 0;
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d) at r (cl100k's and o200k's contractions): the end of the one that
 * matches there, or r. None is a prefix of another, so the first that matches is the only one. */
static inline size_t contraction_end(const uint8_t *s, size_t n, size_t r) {
    int w, w2;
    if (r >= n || s[r] != '\'') return r;
    if (fold_is(s, n, r + 1, 's', &w) || fold_is(s, n, r + 1, 'd', &w) || fold_is(s, n, r + 1, 'm', &w) ||
        fold_is(s, n, r + 1, 't', &w))
        return r + 1 + w;
    if ((fold_is(s, n, r + 1, 'l', &w) && fold_is(s, n, r + 1 + w, 'l', &w2)) ||
        (fold_is(s, n, r + 1, 'v', &w) && fold_is(s, n, r + 1 + w, 'e', &w2)) ||
        (fold_is(s, n, r + 1, 'r', &w) && fold_is(s, n, r + 1 + w, 'e', &w2)))
        return r + 1 + w + w2;
    return r;
}

/* \p{N}{1,3} (cl100k's, possessive, and o200k's, which nothing after it makes give back), the first
 * digit read: the end of at most two more from j. */
static inline size_t digits_end(const uint8_t *s, size_t n, size_t j) {
    for (int taken = 1; taken < 3 && j < n; taken++) {
        int wj, cj = class_at(s, n, j, &wj);
        if (!IS_NUMBER(cj)) break;
        j += wj;
    }
    return j;
}

static inline size_t newlines_run(const uint8_t *s, size_t n, size_t i) {
    while (i < n && (s[i] == '\r' || s[i] == '\n')) i++;
    return i;
}

/* cl100k: '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+
 *         |\s++$|\s*[\r\n]|\s+(?!\S)|\s */
static size_t cl100k_next(const uint8_t *s, size_t n, size_t i) {
    uint8_t b = s[i];
    int w, cls;
    size_t c = contraction_end(s, n, i);
    if (c > i) return c;
    cls = class_at(s, n, i, &w);
    /* [^\r\n\p{L}\p{N}]?+\p{L}++ */
    if (IS_LETTER(cls)) return run_of(s, n, i + w, CLASS_L, CLASS_L);
    if (!IS_NUMBER(cls) && b != '\r' && b != '\n' && i + w < n) {
        int w_next, next = class_at(s, n, i + w, &w_next);
        if (IS_LETTER(next)) return run_of(s, n, i + w + w_next, CLASS_L, CLASS_L);
    }
    /* \p{N}{1,3}+ */
    if (IS_NUMBER(cls)) return digits_end(s, n, i + w);
    /*  ?[^\s\p{L}\p{N}]++[\r\n]*+ */
    if (b == ' ' && i + 1 < n) {
        int wn, next = class_at(s, n, i + 1, &wn);
        if (IS_OTHER(next)) return newlines_run(s, n, run_of(s, n, i + 1 + wn, ALL_CLASSES, 0));
    }
    if (IS_OTHER(cls)) return newlines_run(s, n, run_of(s, n, i + w, ALL_CLASSES, 0));
    /* whitespace: \s++$ | \s*[\r\n] | \s+(?!\S) | \s */
    size_t k = run_of(s, n, i, CLASS_S, CLASS_S);
    if (k == n) return k;
    for (size_t j = k; j > i; j--) {
        if (s[j - 1] == '\r' || s[j - 1] == '\n') return j;
    }
    size_t last = last_start(s, k);
    if (last > i) return last;
    return i + w;
}

/* o200k, tiktoken's o200k_base, seven alternatives tried in order (the first that matches wins):
 *   A1 [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
 *   A2 [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
 *   A3 \p{N}{1,3}   A4  ?[^\s\p{L}\p{N}]+[\r\n/]*   A5 \s*[\r\n]+   A6 \s+(?!\S)   A7 \s+
 * single-digits and digits-rtl3 are this pattern with A3 replaced (o200k_scan's `pattern`):
 * \p{N} and \p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N})) (rtl3_end).
 *
 * subtle: unlike cl100k nothing is possessive, so each alternative's backtracking is spelled out.
 * Call U the first letter class (CLASS_U) and W the second (CLASS_W); Lm, Lo and M are in both
 * ("both"), Lu and Lt only in U, Ll only in W. Marks (M) are no \p{L}: a mark may be A1/A2's
 * prefix and is part of A4's [^\s\p{L}\p{N}]. At a start p (after the prefix, or without it):
 * - A1: U* takes the whole U run p..q greedily. If the code point at q is in W (hence Ll, as it
 *   is not in U), W+ takes the W run from q and the match succeeds (the contraction is optional,
 *   so no later backtracking). Otherwise U* gives back one code point at a time, and W+ matches
 *   at the first, from the right, that is in W as well: the last "both" of the run, whose W run
 *   is that code point alone (the next one is in U only, or ends the U run and is not in W). So
 *   A1 ends after the run's last "both" code point (before a tail of Lu/Lt), or fails if it has
 *   none. Then the contraction, if one follows.
 * - A2 (tried only when A1 failed at both starts): U+ takes the U run p..q (it must not be
 *   empty); W* takes the W run from q, and the contraction.
 * The prefix is optional and greedy: with it first (p = the next code point), then without
 * (p = i, which matches only if s[i] is a mark); A1 at both starts before A2 at both.
 * - A5: \s* takes the whole whitespace run i..k and gives back until [\r\n]+ matches: at the
 *   last \r or \n of the run, which it takes alone (it is the last): the run up to its last line
 *   break. A6 (no line break in the run): the run, less its last code point unless the run ends
 *   the text; A7: a run of one code point.
 *
 * *far is where the furthest run read stopped (see STREAM_MARGIN): A1 may end well before the end
 * of the U run it read (at its last "both"), A5 before the end of the whitespace run, and
 * digits-rtl3's first group before the end of its digit run. */

/* The U run from p: its end, the end of its last code point also in W (p if none), and the class
 * and width of the code point that ends it (class 0 at the end of the buffer). */
typedef struct {
    size_t end, both;
    int next, next_width;
} UpperRun;

static inline UpperRun upper_run(const uint8_t *s, size_t n, size_t p) {
    UpperRun run = {p, p, 0, 0};
    while (p < n) {
        int w, c = class_at(s, n, p, &w);
        if (!(c & CLASS_U)) {
            run.next = c;
            run.next_width = w;
            break;
        }
        p += (size_t)w;
        if (c & CLASS_W) run.both = p;
    }
    run.end = p;
    return run;
}

/* A1 at p, given its U run: the end of its match (before the contraction), or 0 if it fails. */
static inline size_t o200k_first(const uint8_t *s, size_t n, size_t p, UpperRun run, size_t *far) {
    if (run.next & CLASS_W) {
        size_t r = run_of(s, n, run.end + (size_t)run.next_width, CLASS_W, CLASS_W);
        if (r > *far) *far = r;
        return r;
    }
    return run.both > p ? run.both : 0;
}

/* digits-rtl3's A3 \p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N})) at the digit at i (of width w): the first
 * ((L - 1) % 3) + 1 digits of the run of L digits from i (the only count of 1 to 3 that leaves a
 * multiple of three), so the run splits in threes counted from its end. subtle: only A3 ends a
 * pretoken with a digit, so when the code point before i is a digit the rest of its run already
 * is a multiple of three: three digits, read without the whole run (a run stays linear). */
static inline size_t rtl3_end(const uint8_t *s, size_t n, size_t i, int w, size_t *far) {
    if (i > 0) {
        int wp, prev = class_at(s, n, last_start(s, i), &wp);
        if (IS_NUMBER(prev)) return digits_end(s, n, i + (size_t)w);
    }
    size_t ends[3] = {i + (size_t)w, 0, 0}, k = ends[0], length = 1; /* ends of its first 3 digits */
    while (k < n) {
        int wk, ck = class_at(s, n, k, &wk);
        if (!IS_NUMBER(ck)) break;
        k += (size_t)wk;
        if (length < 3) ends[length] = k;
        length++;
    }
    *far = k;
    return ends[(length - 1) % 3];
}

static size_t o200k_scan(const uint8_t *s, size_t n, size_t i, size_t *far, int pattern) {
    uint8_t b = s[i];
    int w, cls = class_at(s, n, i, &w);
    size_t end;
    *far = i;
    /* A1 / A2: the letters (the prefix: anything but \r, \n, \p{L}, \p{N}) */
    if (cls & (CLASS_U | CLASS_W | CLASS_L)) {
        /* no prefix: a letter (every \p{L} is in U or W) or a mark */
        UpperRun run = upper_run(s, n, i);
        if (run.end > *far) *far = run.end;
        if (!(cls & CLASS_L)) { /* a mark may be the prefix too, and is tried so first */
            size_t p1 = i + (size_t)w;
            if ((end = o200k_first(s, n, p1, upper_run(s, n, p1), far)) != 0) return contraction_end(s, n, end);
        }
        /* A1 without the prefix always matches at a mark (itself a "both"), so A2 is for letters */
        if ((end = o200k_first(s, n, i, run, far)) != 0) return contraction_end(s, n, end);
        return contraction_end(s, n, run_of(s, n, run.end, CLASS_W, CLASS_W));
    }
    if (!(cls & CLASS_N) && b != '\r' && b != '\n') {
        size_t p1 = i + (size_t)w;
        UpperRun run = upper_run(s, n, p1);
        if (run.end > *far) *far = run.end;
        if ((end = o200k_first(s, n, p1, run, far)) != 0) return contraction_end(s, n, end);
        /* A1 without the prefix fails: s[i] is no letter nor mark */
        if (run.end > p1) return contraction_end(s, n, run_of(s, n, run.end, CLASS_W, CLASS_W));
    }
    /* A3 \p{N}{1,3} (single-digits: \p{N}; digits-rtl3: rtl3_end) */
    if (IS_NUMBER(cls)) {
        if (pattern == PATTERN_SINGLE_DIGITS) return i + (size_t)w;
        if (pattern == PATTERN_DIGITS_RTL3) return rtl3_end(s, n, i, w, far);
        return digits_end(s, n, i + w);
    }
    /* A4  ?[^\s\p{L}\p{N}]+[\r\n/]* ('/' is in the first class too, so only a line break stops
     * the run before a '/' that [\r\n/]* takes) */
    size_t from = 0;
    if (b == ' ' && i + 1 < n) {
        int wn, next = class_at(s, n, i + 1, &wn);
        if (IS_OTHER(next)) from = i + 1 + wn;
    }
    if (from == 0 && IS_OTHER(cls)) from = i + w;
    if (from != 0) {
        size_t j = run_of(s, n, from, ALL_CLASSES, 0);
        while (j < n && (s[j] == '\r' || s[j] == '\n' || s[j] == '/')) j++;
        return j;
    }
    /* whitespace: A5 \s*[\r\n]+ | A6 \s+(?!\S) | A7 \s+ */
    size_t k = run_of(s, n, i, CLASS_S, CLASS_S);
    *far = k;
    for (size_t j = k; j > i; j--) {
        if (s[j - 1] == '\r' || s[j - 1] == '\n') return j;
    }
    if (k == n) return k;
    size_t last = last_start(s, k);
    return last > i ? last : k;
}

/* superbpe: SuperBPE's stage-2 split S = \p{N}{1,3}| ?[^\s\p{L}\p{N}]{2,}[\r\n/]*| +(?!\S) as
 * tokenizers' Split "Isolated" applies it (patterns.py's _isolated, S|(?:(?!S)[\s\S])+): at i the
 * match of S, else the gap: the text from i to the next position where S matches, or the end.
 * Words, single spaces, line breaks and lone punctuation all run together in a gap, which may be
 * as long as the text (streaming carries it whole: STREAM_MARGIN).
 * superbpe_match, S at i, alternatives in order (none overlaps the next):
 * - \p{N}{1,3}: digits_end.
 * -  ?[^\s\p{L}\p{N}]{2,}[\r\n/]*: the optional space is greedy, and without it a space is no
 *   [^\s...]; then two "other" code points at least, the whole run of them (nothing after it can
 *   fail, so no backtracking) and the bytes \r \n / after it.
 * -  +(?!\S): the run of k spaces from i, whole if whitespace or the end follows, else its first
 *   k - 1 (the last space is followed by \S): no match for one space before \S. */

/* The end of S's match at i, or i when S does not match there. */
static inline size_t superbpe_match(const uint8_t *s, size_t n, size_t i) {
    uint8_t b = s[i];
    int w, cls = class_at(s, n, i, &w);
    if (IS_NUMBER(cls)) return digits_end(s, n, i + (size_t)w);
    size_t from = b == ' ' ? i + 1 : i;
    if (from < n) {
        int w1, c1 = class_at(s, n, from, &w1);
        if (IS_OTHER(c1) && from + (size_t)w1 < n) {
            int w2, c2 = class_at(s, n, from + (size_t)w1, &w2);
            if (IS_OTHER(c2)) {
                size_t j = run_of(s, n, from + (size_t)w1 + (size_t)w2, ALL_CLASSES, 0);
                while (j < n && (s[j] == '\r' || s[j] == '\n' || s[j] == '/')) j++;
                return j;
            }
        }
    }
    if (b != ' ') return i;
    size_t k = i + 1;
    while (k < n && s[k] == ' ') k++;
    if (k == n) return k;
    int wk, ck = class_at(s, n, k, &wk);
    return IS_SPACE(ck) ? k : k - 1;
}

static size_t superbpe_next(const uint8_t *s, size_t n, size_t i) {
    size_t end = superbpe_match(s, n, i);
    if (end > i) return end;
    int w;
    class_at(s, n, i, &w);
    size_t j = i + (size_t)w;
    while (j < n) {
        uint8_t b = s[j];
        int c = b < 0x80 ? (w = 1, char_class[b]) : class_at(s, n, j, &w);
        /* a letter, or whitespace other than ' ', starts no match; nor does a space before an
         * ASCII letter, which starts none either (the common cases, decided here) */
        if (b == ' ' && j + 1 < n && s[j + 1] < 0x80 && (char_class[s[j + 1]] & CLASS_L)) {
            j += 2;
            continue;
        }
        if (b != ' ' && (c & (CLASS_L | CLASS_S))) {
            j += (size_t)w;
            continue;
        }
        if (superbpe_match(s, n, j) > j) break;
        j += (size_t)w;
    }
    return j;
}

static inline size_t next_pretoken(int pattern, const uint8_t *s, size_t n, size_t i) {
    size_t far;
    if (pattern == PATTERN_GPT2) return gpt2_next(s, n, i);
    if (pattern == PATTERN_CL100K) return cl100k_next(s, n, i);
    if (pattern == PATTERN_SUPERBPE) return superbpe_next(s, n, i);
    return o200k_scan(s, n, i, &far, pattern);
}

/* --- streaming one long text in pieces ------------------------------------------------------ */

/* A text too long to hold whole (a 100 MB line) is split, counted or encoded in pieces: each call
 * gets the unfinished tail of the last piece followed by the next piece, and handles only the
 * pretokens that no text appended later can change; the rest is the tail for the next call.
 *
 * subtle: why STREAM_MARGIN bytes suffice (gpt2 and cl100k, as next_pretoken scans them). A
 * piece always ends at a character boundary (it is the UTF-8 of a str). The pretoken found at i
 * depends on the bytes from i up to the first code point that ends its run (read whole, since it
 * lies inside the buffer), on at most two code points after i (the contractions, cl100k's
 * optional prefix) and on whether a run reaches the end of the buffer (`\s+(?!\S)`, `\s++$`,
 * runs cut by the end). Each of those either makes the pretoken end at n, or within 8 bytes
 * (two code points) of what it read; so a pretoken that ends at least STREAM_MARGIN bytes before
 * n was read from bytes that the whole text has too, and is the whole text's pretoken.
 * o200k backtracks instead: its pretoken may end far before the end of a run it read (A1 ends at
 * the last Lm/Lo/M of a run of Lu/Lt/Lm/Lo/M, whose end decides whether an Ll follows; A5 at the
 * last line break of a whitespace run, whose end decides whether another follows). So o200k_scan
 * also gives *far, where the furthest run it read stopped (n when one was cut by the end), and
 * the margin is counted from there: every other read lies within two code points of the
 * pretoken's end or of *far, as for gpt2 and cl100k. The same for single-digits and digits-rtl3
 * (whose first group of a digit run depends on the run's end: *far).
 * superbpe needs no *far: a match reads at most one code point past its end (a space run it
 * gives back one space of), and a gap ends at the first match start q, decided by at most three
 * code points from q (a space and two others) or two spaces, so within 9 bytes of the end. A
 * gap may be as long as the text: the stream then returns the whole buffer as the tail each
 * time, and the caller waits for as much text again before the next call (long_documents.py),
 * so that rescanning it stays linear in all.
 * tests/bpe/test_long_documents.py checks it against the whole text at every cut. */
#define STREAM_MARGIN 16

/* The end of the pretoken at i if the stream may take it now; 0 if it must wait for more text. */
static inline size_t stream_next(int pattern, const uint8_t *s, size_t n, size_t i, int final) {
    size_t far = 0, end = IS_O200K_FAMILY(pattern) ? o200k_scan(s, n, i, &far, pattern) : next_pretoken(pattern, s, n, i);
    if (far < end) far = end;
    return (final || far + STREAM_MARGIN <= n) ? end : 0;
}

/* The unfinished tail s[i:n) as a str (what the caller prepends to the next piece). */
static PyObject *stream_tail(const uint8_t *s, size_t n, size_t i) {
    return PyUnicode_DecodeUTF8((const char *)s + i, (Py_ssize_t)(n - i), "surrogatepass");
}

/* --- module functions: the classes, and a test hook ------------------------------------------ */

static int check_classes(void) {
    if (char_class == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "call set_char_classes() before splitting text");
        return -1;
    }
    return 0;
}


/* set_char_classes(ranges): [(first, end, bits), ...] with bits 1 = \p{L}, 2 = \p{N}, 4 = \s,
 * 8 = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], 16 = [\p{Ll}\p{Lm}\p{Lo}\p{M}] (o200k's). */
static PyObject *set_char_classes(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "set_char_classes() takes a sequence of (first, end, bits)");
    if (seq == NULL) return NULL;
    uint8_t *table = allocation_fails() ? NULL : PyMem_RawCalloc(MAX_CODE_POINT, 1);
    if (table == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t r = 0; r < PySequence_Fast_GET_SIZE(seq); r++) {
        long first, end, bits;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, r), "lll", &first, &end, &bits)) goto fail;
        if (first < 0 || end > MAX_CODE_POINT || first > end || bits < 0 || bits > 255) {
            PyErr_SetString(PyExc_ValueError, "a class range is outside the code points");
            goto fail;
        }
        for (long cp = first; cp < end; cp++) table[cp] |= (uint8_t)bits;
    }
    Py_DECREF(seq);
    uint8_t *old = char_class;
    char_class = table;
    PyMem_RawFree(old);
    Py_RETURN_NONE;
fail:
    Py_DECREF(seq);
    PyMem_RawFree(table);
    return NULL;
}

static PyObject *has_char_classes(PyObject *self, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(char_class != NULL);
}

/* _pretoken_ends(pattern, data): where each pretoken of the raw bytes data ends. A test hook for
 * the decoder's bounds: data need not be valid UTF-8, and it is read from a copy of exactly its
 * size, so that a read past its end shows under AddressSanitizer. */
static PyObject *pretoken_ends(PyObject *Py_UNUSED(module), PyObject *args) {
    const char *name, *data;
    Py_ssize_t length;
    if (!PyArg_ParseTuple(args, "sy#", &name, &data, &length)) return NULL;
    int pattern = pattern_from_name(name);
    if (pattern < 0) return NULL;
    if (check_classes() < 0) return NULL;
    uint8_t *copy = bpe_malloc(length ? (size_t)length : 1);
    if (copy == NULL) return NULL;
    memcpy(copy, data, (size_t)length);
    PyObject *ends = PyList_New(0);
    size_t n = (size_t)length, i = 0;
    while (ends != NULL && i < n) {
        i = next_pretoken(pattern, copy, n, i);
        PyObject *end = PyLong_FromSize_t(i);
        if (end == NULL || PyList_Append(ends, end) < 0) Py_CLEAR(ends);
        Py_XDECREF(end);
    }
    PyMem_Free(copy);
    return ends;
}

#endif /* BPE_SPARK_PRETOKENIZER_H */
