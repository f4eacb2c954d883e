/* mkmodel_vocab.c: the small, real byte-level BPE vocabulary of mkmodel's
 * models (format: doc/formats.md §5.1, §5.2).
 *
 * A generated model is only useful to the tokenizer, the chat front end and
 * the tests if its vocabulary behaves like a real one: every byte has a
 * token, merges have ranks, special tokens are control tokens.  So we learn
 * a few hundred merges with a textbook BPE (count adjacent pairs, merge the
 * most frequent, repeat) on a built-in English text, deterministically (ties
 * go to the smallest pair of ids).  When the caller asks for more tokens than
 * the text can teach, the rest are merges of existing token pairs in a fixed
 * order: valid BPE entries, rarely triggered by real text, which lets
 * benchmarks use the vocabulary sizes of real models (128256, 151936). */
#include "model/make/mkmodel.h"

#include <stdlib.h>
#include <string.h>

/* Plain prose, no digits and no apostrophes, so that any of the gpt-2,
 * smollm and qwen2 pre-tokenizers cuts it into the same words the learner
 * saw (a merge is valid either way; this just makes them useful). */
static const char corpus[] =
    "The river begins as a thin stream high in the hills, where snow melts in the "
    "spring and the water runs cold and clear over the stones. Farther down, other "
    "streams join it, and by the time it reaches the valley it is wide enough for "
    "small boats. People have lived along its banks for a very long time. They "
    "fished in the morning, worked the fields in the afternoon, and in the evening "
    "they sat by the water and told stories about the people who had come before "
    "them.\n"
    "In the town at the bend of the river there is a market every week. Farmers "
    "bring bread, cheese, apples and honey; a woman sells warm soup from a large "
    "pot; children run between the tables and the older people talk about the "
    "weather, the prices and the news from the city. When the sun goes down the "
    "market closes, the tables are folded, and the square is quiet again until "
    "the next week.\n"
    "A computer reads a program one instruction at a time. Each instruction is "
    "simple: it moves a number from one place to another, adds two numbers, or "
    "compares them and decides what to do next. The power of the machine comes "
    "from doing these simple things very quickly and without mistakes. A model "
    "of language is a long list of numbers and a short program that uses them to "
    "guess the next word of a sentence, then the next one, and so on.\n"
    "Learning to cook is mostly learning to pay attention. You watch the color of "
    "the onions, you listen to the sound of the oil, you taste the sauce and add "
    "a little salt. The recipe tells you what to do, but the food tells you when "
    "to do it. After a while the hands remember what the head has forgotten, and "
    "the kitchen becomes a place to think about other things.\n"
    "The old library has tall windows and long wooden tables. Students come in "
    "the morning and stay until the evening, reading, writing and sometimes "
    "sleeping with their heads on their books. The librarian knows where every "
    "book is kept and which ones are never returned. She says that a good "
    "question is worth more than a quick answer, and that the best answers often "
    "lead to better questions.\n"
    "User: What is the weather like today?\n"
    "Assistant: It is sunny and warm, with a light wind from the west. It should "
    "stay dry until the evening, when a few clouds may come in from the sea.\n"
    "User: Can you tell me a short story about a cat?\n"
    "Assistant: Once upon a time a small gray cat lived in a house near the "
    "harbor. Every morning she walked along the wall to watch the boats come "
    "back, and every morning one of the fishermen gave her a small fish. She "
    "never learned his name, but she always knew which boat was his.\n";

static const char *const special_text[3] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

/* GPT-2 byte -> code point (§5.2 step 3): printable bytes map to themselves,
 * the other 68 in increasing order to U+0100.. */
static unsigned byte_to_cp(unsigned b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))
        return b;
    unsigned k = 0;
    for (unsigned c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE)))
            k++;
    return 0x100 + k;
}

static char *byte_token(unsigned b)
{
    unsigned cp = byte_to_cp(b);
    char *s = malloc(3);
    if (!s)
        return NULL;
    if (cp < 0x80) {
        s[0] = (char)cp;
        s[1] = 0;
    } else { /* cp < 0x800: two UTF-8 bytes */
        s[0] = (char)(0xC0 | (cp >> 6));
        s[1] = (char)(0x80 | (cp & 0x3F));
        s[2] = 0;
    }
    return s;
}

static char *concat(const char *a, const char *b, char sep)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 2);
    if (!s)
        return NULL;
    memcpy(s, a, la);
    size_t o = la;
    if (sep)
        s[o++] = sep;
    memcpy(s + o, b, lb + 1);
    return s;
}

/* ---- a set of strings (open addressing, FNV-1a) ------------------------ */

typedef struct strset {
    const char **slot;
    size_t cap; /* power of two */
} strset;

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Returns 1 if added, 0 if already present. */
static int strset_add(strset *set, const char *s)
{
    size_t i = fnv1a(s) & (set->cap - 1);
    while (set->slot[i]) {
        if (!strcmp(set->slot[i], s))
            return 0;
        i = (i + 1) & (set->cap - 1);
    }
    set->slot[i] = s;
    return 1;
}

static int strset_has(const strset *set, const char *s)
{
    size_t i = fnv1a(s) & (set->cap - 1);
    while (set->slot[i]) {
        if (!strcmp(set->slot[i], s))
            return 1;
        i = (i + 1) & (set->cap - 1);
    }
    return 0;
}

/* ---- the learner ------------------------------------------------------- */

/* The corpus cut into words (an optional leading space plus a run of
 * letters, or of other non-space characters, or one whitespace character),
 * each a sequence of token ids; merges never cross a word boundary. */
typedef struct words {
    int *sym;    /* all words' symbols back to back, -1 after each word */
    size_t n;
} words;

static int is_letter(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int words_split(words *w, int byte_base)
{
    size_t len = sizeof corpus - 1;
    w->sym = malloc((2 * len + 1) * sizeof *w->sym);
    if (!w->sym)
        return STRATA_E_NOMEM;
    w->n = 0;
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        if (corpus[j] == ' ' && j + 1 < len && corpus[j + 1] != ' ' && corpus[j + 1] != '\n')
            j++;
        unsigned char c = (unsigned char)corpus[j];
        size_t k = j + 1;
        if (is_letter(c))
            while (k < len && is_letter((unsigned char)corpus[k]))
                k++;
        else if (c != ' ' && c != '\n')
            while (k < len && !is_letter((unsigned char)corpus[k]) && corpus[k] != ' ' &&
                   corpus[k] != '\n')
                k++;
        for (size_t t = i; t < k; t++)
            w->sym[w->n++] = byte_base + (unsigned char)corpus[t];
        w->sym[w->n++] = -1;
        i = k;
    }
    return 0;
}

/* One learning step: the most frequent adjacent pair (ties: smallest ids).
 * Returns its count, 0 if there is no pair. */
static int best_pair(const words *w, int n_tok, int *counts, int *ba, int *bb)
{
    /* n_tok stays small while learning (<= 3 + 256 + MAX_LEARNED), so a
     * dense n_tok x n_tok table is simplest; it is zero on entry and is
     * zeroed again below by visiting the same pairs (cheaper than memset). */
    int best = 0;
    for (size_t i = 0; i + 1 < w->n; i++) {
        int a = w->sym[i], b = w->sym[i + 1];
        if (a < 0 || b < 0)
            continue;
        int c = ++counts[(size_t)a * n_tok + b];
        if (c > best || (c == best && (a < *ba || (a == *ba && b < *bb)))) {
            best = c;
            *ba = a;
            *bb = b;
        }
    }
    for (size_t i = 0; i + 1 < w->n; i++)
        if (w->sym[i] >= 0 && w->sym[i + 1] >= 0)
            counts[(size_t)w->sym[i] * n_tok + w->sym[i + 1]] = 0;
    return best;
}

static void merge_pair(words *w, int a, int b, int id)
{
    size_t o = 0;
    for (size_t i = 0; i < w->n; i++) {
        if (i + 1 < w->n && w->sym[i] == a && w->sym[i + 1] == b) {
            w->sym[o++] = id;
            i++;
        } else {
            w->sym[o++] = w->sym[i];
        }
    }
    w->n = o;
}

/* The learner stops here even if the text could teach more: it keeps the
 * dense pair table small (1024^2 ints) and the vocabulary "small". */
#define MAX_LEARNED 765

void mkmodel_vocab_free(mkmodel_vocab *v)
{
    if (!v)
        return;
    for (uint64_t i = 0; i < v->n; i++)
        free(v->tokens[i]);
    for (uint64_t i = 0; i < v->n_merges; i++)
        free(v->merges[i]);
    free(v->tokens);
    free(v->types);
    free(v->merges);
    memset(v, 0, sizeof *v);
}

static int add_merge(mkmodel_vocab *v, strset *set, int a, int b)
{
    char *tok = concat(v->tokens[a], v->tokens[b], 0);
    char *mg = concat(v->tokens[a], v->tokens[b], ' ');
    if (!tok || !mg) {
        free(tok);
        free(mg);
        return STRATA_E_NOMEM;
    }
    v->tokens[v->n] = tok;
    v->types[v->n] = 1;
    v->n++;
    v->merges[v->n_merges++] = mg;
    strset_add(set, tok);
    return 0;
}

int mkmodel_vocab_build(int n_vocab, mkmodel_vocab *v, strata_error *err)
{
    memset(v, 0, sizeof *v);
    if (n_vocab < MKMODEL_MIN_VOCAB || n_vocab > MKMODEL_MAX_VOCAB)
        return strata_err(err, STRATA_E_ARG,
                          "mkmodel: vocabulary size %d outside %d..%d (3 special + 256 byte tokens "
                          "is the minimum)", n_vocab, MKMODEL_MIN_VOCAB, MKMODEL_MAX_VOCAB);
    const int byte_base = 3;
    int rc = STRATA_E_NOMEM;
    words w = {0};
    int *counts = NULL;
    strset set = {0};
    v->tokens = calloc((size_t)n_vocab, sizeof *v->tokens);
    v->types = calloc((size_t)n_vocab, sizeof *v->types);
    v->merges = calloc((size_t)n_vocab, sizeof *v->merges);
    for (set.cap = 1024; set.cap < 2 * (size_t)n_vocab; set.cap *= 2)
        ;
    set.slot = calloc(set.cap, sizeof *set.slot);
    if (!v->tokens || !v->types || !v->merges || !set.slot)
        goto fail;

    for (int i = 0; i < 3; i++) {
        if (!(v->tokens[v->n] = strdup(special_text[i])))
            goto fail;
        v->types[v->n++] = 3; /* control */
    }
    for (unsigned b = 0; b < 256; b++) {
        if (!(v->tokens[v->n] = byte_token(b)))
            goto fail;
        strset_add(&set, v->tokens[v->n]);
        v->types[v->n++] = 1;
    }

    /* Learn from the text. */
    if (words_split(&w, byte_base))
        goto fail;
    int max_tok = byte_base + 256 + MAX_LEARNED;
    counts = calloc((size_t)max_tok * max_tok, sizeof *counts);
    if (!counts)
        goto fail;
    while ((int)v->n < n_vocab && (int)v->n < max_tok) {
        int a = 0, b = 0;
        if (best_pair(&w, (int)v->n, counts, &a, &b) < 2)
            break;
        int id = (int)v->n;
        if ((rc = add_merge(v, &set, a, b)))
            goto fail;
        rc = STRATA_E_NOMEM;
        merge_pair(&w, a, b, id);
    }
    v->n_learned = v->n_merges;

    /* Pad: pairs (a, b) of non-special tokens, left-major in id order, b
     * among the tokens that existed before padding, a also among the padding
     * tokens themselves (so there is no upper limit), skipping
     * concatenations that already are tokens. */
    int base_n = (int)v->n;
    for (int a = byte_base; a < (int)v->n && (int)v->n < n_vocab; a++) {
        for (int b = byte_base; b < base_n && (int)v->n < n_vocab; b++) {
            char *tok = concat(v->tokens[a], v->tokens[b], 0);
            if (!tok)
                goto fail;
            int dup = strset_has(&set, tok);
            free(tok);
            if (dup)
                continue;
            if ((rc = add_merge(v, &set, a, b)))
                goto fail;
            rc = STRATA_E_NOMEM;
        }
    }
    if ((int)v->n < n_vocab) { /* cannot happen below MKMODEL_MAX_VOCAB */
        rc = strata_err(err, STRATA_E_ARG, "mkmodel: cannot build %d distinct tokens", n_vocab);
        goto fail_noerr;
    }
    free(w.sym);
    free(counts);
    free(set.slot);
    return 0;

fail:
    rc = strata_err(err, STRATA_E_NOMEM, "mkmodel: out of memory building the vocabulary");
fail_noerr:
    free(w.sym);
    free(counts);
    free(set.slot);
    mkmodel_vocab_free(v);
    return rc;
}
