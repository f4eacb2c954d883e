/* convindex.h: find a conversation's tokens by its text.
 *
 * An OpenAI client sends the whole conversation as text every turn.  The
 * scheduler reuses K/V (a conversation resident in a slot, or parked in
 * the conversation cache) only for a request whose token ids begin with
 * exactly the ids that conversation holds, and those are the ids the model
 * read and wrote, which encoding the text again need not give back (a
 * sampled answer's ids need not be the canonical encoding of its text).
 *
 * So the server remembers, for each answer it gave, the text of the prompt
 * and answer together and the ids behind it.  A new request whose text
 * begins with such a text takes those ids and encodes only the rest: its
 * ids then extend the conversation in the slot or the cache, which is
 * found by content, whichever client sends it.  Entries are kept LRU
 * within a count and a byte budget.  Thread-safe. */
#ifndef STRATA_SERVE_CONVINDEX_H
#define STRATA_SERVE_CONVINDEX_H

#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer.h"

typedef struct convindex convindex;

convindex *convindex_new(int max_entries, size_t max_bytes);
void convindex_free(convindex *x);
/* The longest remembered text of this kind (chat or plain completion)
 * that is a prefix of text[0..n): its ids are appended to out and its
 * length returned; 0 when none is. */
size_t convindex_find(convindex *x, int kind, const char *text, size_t n, tok_ids *out);
/* Remember text[0..n) -> ids[0..n_ids).  0, or -1 out of memory (nothing
 * is lost but a later reuse). */
int convindex_add(convindex *x, int kind, const char *text, size_t n, const int32_t *ids,
                  size_t n_ids);
int convindex_entries(convindex *x);

/* Remember a conversation known only by its ids (an image loaded from the
 * save directory at start, whose text was not saved): ids[0..n_ids), the
 * ones the model read, then `pending` unless it is -1: the image's token
 * sampled and sent but never read (the last of an answer ended by its
 * length).  Its text is what those ids decode to as the server streams an
 * answer (bytes that make no UTF-8 character become U+FFFD, as the client
 * got them; control tokens as their text; a leading BOS the tokenizer adds
 * is not text): with the pending token, the text and ids the entry of the
 * server that gave the answer had, so a resent history reads as the same
 * ids after a restart as before (without it, the last token's text would
 * be encoded afresh, and a byte token cut inside a character encodes to
 * other ids).  Added for each kind (chat: control tokens read from the
 * text; plain: none) whose encoding of that text has the same control and
 * user-defined tokens as the ids, in the same order, so the ids mean what
 * the text would.  Returns how many entries were added (0, 1 or 2). */
int convindex_add_ids(convindex *x, const tokenizer *t, const int32_t *ids, size_t n_ids,
                      int32_t pending);

#endif
