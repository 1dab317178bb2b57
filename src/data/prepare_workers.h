// The encoding pipeline of `ctitan data prepare`: documents read in file order by the calling
// thread, encoded by `threads` worker threads, handed back in file order to one writer thread.
//
//   reader (caller) --chunks of documents--> encoders (threads) --ids, in chunk order--> writer
//
// Documents are gathered into chunks of about chunk_bytes of text (a chunk spans files, a large
// file fills many: a big JSONL or fortune file is encoded by every thread at once); a document
// is never cut, so each is encoded exactly as alone, and the writer sees the documents in file
// order whatever the thread count: the shards are the same bytes for 1 thread or 64.
//
// Memory is bounded by the ring of chunks, not by the input: CT_PREP_RING(threads) chunks, each
// holding about chunk_bytes of text and its ids (4 bytes a token, at most one token a byte
// plus BOS / EOS), so about 5 x chunk_bytes x ring; a document larger than chunk_bytes has a
// chunk to itself, grown to it and shrunk back once written.
//
// Errors: the first one in document order wins, whichever thread meets it (a reader error at a
// file waits until the documents before it are written, an encoder error until its chunk's turn),
// so the message is the same for every thread count; it stops every thread and comes back as the
// caller's ct_last_error.
#ifndef CT_PREPARE_WORKERS_H
#define CT_PREPARE_WORKERS_H
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "data/corpus.h"
#include "data/tokenizer.h"

#define CT_PREP_CHUNK_BYTES (1u << 20)
#define CT_PREP_RING(threads) (2 * (threads) + 2)

typedef struct {
    char *const *files;
    int n_files;
    const ct_corpus_opts *corpus;
    const ct_tokenizer *tok;
    int add_bos;     // BOS before each text document
    int32_t eos;     // after each document (a token document that ends with it keeps its own)
    int threads;     // encoder threads, >= 1
    size_t chunk_bytes;  // 0: CT_PREP_CHUNK_BYTES
    void *ctx;
    // Reader thread, once per file as it is opened (its format, for the counts).
    void (*on_file)(void *ctx, const ct_corpus *cr, uint64_t size);
    // Writer thread, once per document in file order: its ids, BOS / EOS included. Non-zero
    // (with ct_last_error set) stops the run.
    int (*emit)(void *ctx, const int32_t *ids, uint64_t n);
    // Writer thread, after each chunk: input bytes read up to the chunk's end, its last file.
    void (*on_progress)(void *ctx, uint64_t bytes_done, const char *file);
} ct_prep_pipeline;

ct_status ct_prep_run(const ct_prep_pipeline *p);

// The CPUs this process may run on (its affinity mask), at least 1.
int ct_prep_default_threads(void);
#endif
