// The encoding pipeline of `ctitan data prepare` (see prepare_workers.h).
#include "data/prepare_workers.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"

enum { SLOT_FREE, SLOT_FILLED, SLOT_ENCODING, SLOT_ENCODED };

typedef struct {
    size_t off, len;  // into text: bytes of a text document, or of a token document's int32 ids
    int file;         // index into files
    int is_ids;
} doc_ref;

typedef struct {
    int state;
    uint64_t seq;          // this chunk's place in the stream
    uint64_t first_doc;    // index of its first document over the corpus (for messages)
    char *text;            // (text_cap,) the documents' bytes, back to back (ids 4-aligned)
    size_t text_len, text_cap;
    doc_ref *docs;         // (docs_cap,)
    int n_docs, docs_cap;
    int32_t *ids;          // (ids_cap,) every document's ids, back to back
    long n_ids, ids_cap;
    long *doc_end;         // (docs_cap,) end of document i in ids
    uint64_t bytes_done;   // input bytes read when the chunk was complete
    int failed;            // encoding failed: err says why
    char err[1024];
} chunk;

typedef struct {
    const ct_prep_pipeline *p;
    chunk *ring;
    int n_ring;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t next_fill, next_encode, next_write;  // chunk sequence numbers
    int reader_done;     // no chunk after next_fill - 1 will come
    int reader_failed;   // ... because reading failed at that point: reader_err says why
    char reader_err[1024];
    int stop;            // an error was reported: every thread leaves
    char err[1024];      // the error reported (the first in document order)
    int failed;
} pipeline;

static chunk *slot_of(pipeline *pl, uint64_t seq) { return &pl->ring[seq % (uint64_t)pl->n_ring]; }

static void grow(void **buf, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return;
    size_t c = need + need / 2 + 64;
    void *nb = realloc(*buf, c * elem);
    if (!nb) ct_fatal("data prepare", "out of memory");
    *buf = nb;
    *cap = c;
}

// ---- encoders --------------------------------------------------------------------------------

static int encode_chunk(const ct_prep_pipeline *p, chunk *c) {
    c->n_ids = 0;
    for (int i = 0; i < c->n_docs; i++) {
        const doc_ref *d = &c->docs[i];
        long start = c->n_ids;
        if (!d->is_ids) {
            long got = ct_tokenizer_encode_doc(p->tok, c->text + d->off, (long)d->len, p->add_bos, 0, &c->ids, &c->n_ids,
                                               &c->ids_cap);
            if (got < 0) {
                snprintf(c->err, sizeof c->err, "%s: cannot encode document %llu: %s", p->files[d->file],
                         (unsigned long long)(c->first_doc + (uint64_t)i), ct_last_error());
                return 1;
            }
            c->n_ids = got;
        } else {
            size_t n = d->len / sizeof(int32_t), cap = (size_t)c->ids_cap;
            grow((void **)&c->ids, &cap, (size_t)c->n_ids + n + 1, sizeof(int32_t));
            c->ids_cap = (long)cap;
            memcpy(c->ids + c->n_ids, c->text + d->off, d->len);
            c->n_ids += (long)n;
        }
        // EOS after each document; a pre-tokenised one that ends with it already (as Megatron's
        // preprocessing writes with --append-eod) keeps the one it has.
        if (!d->is_ids || c->n_ids == start || c->ids[c->n_ids - 1] != p->eos) {
            size_t cap = (size_t)c->ids_cap;
            grow((void **)&c->ids, &cap, (size_t)c->n_ids + 1, sizeof(int32_t));
            c->ids_cap = (long)cap;
            c->ids[c->n_ids++] = p->eos;
        }
        c->doc_end[i] = c->n_ids;
    }
    return 0;
}

static void *encoder_main(void *arg) {
    pipeline *pl = arg;
    pthread_mutex_lock(&pl->mu);
    for (;;) {
        chunk *c = slot_of(pl, pl->next_encode);
        while (!pl->stop && !(c->state == SLOT_FILLED && c->seq == pl->next_encode) &&
               !(pl->reader_done && pl->next_encode >= pl->next_fill)) {
            pthread_cond_wait(&pl->cv, &pl->mu);
            c = slot_of(pl, pl->next_encode);
        }
        if (pl->stop || (pl->reader_done && pl->next_encode >= pl->next_fill)) break;
        c->state = SLOT_ENCODING;
        pl->next_encode++;
        pthread_mutex_unlock(&pl->mu);
        c->failed = encode_chunk(pl->p, c);
        pthread_mutex_lock(&pl->mu);
        c->state = SLOT_ENCODED;
        pthread_cond_broadcast(&pl->cv);
    }
    pthread_mutex_unlock(&pl->mu);
    return NULL;
}

// ---- writer ----------------------------------------------------------------------------------

static void report(pipeline *pl, const char *msg) {  // with mu held
    if (!pl->failed) snprintf(pl->err, sizeof pl->err, "%s", msg);
    pl->failed = 1;
    pl->stop = 1;
    pthread_cond_broadcast(&pl->cv);
}

// A chunk's buffers go back to the usual size after an outsized document passed through.
static void shrink(chunk *c, size_t chunk_bytes) {
    if (c->text_cap > 4 * chunk_bytes) {
        free(c->text);
        c->text = NULL;
        c->text_cap = 0;
    }
    if ((size_t)c->ids_cap > 2 * chunk_bytes) {
        free(c->ids);
        c->ids = NULL;
        c->ids_cap = 0;
    }
}

static void *writer_main(void *arg) {
    pipeline *pl = arg;
    const ct_prep_pipeline *p = pl->p;
    size_t chunk_bytes = p->chunk_bytes ? p->chunk_bytes : CT_PREP_CHUNK_BYTES;
    pthread_mutex_lock(&pl->mu);
    for (;;) {
        chunk *c = slot_of(pl, pl->next_write);
        while (!pl->stop && !(c->state == SLOT_ENCODED && c->seq == pl->next_write) &&
               !(pl->reader_done && pl->next_write >= pl->next_fill))
            pthread_cond_wait(&pl->cv, &pl->mu);
        if (pl->stop) break;
        if (pl->reader_done && pl->next_write >= pl->next_fill) {
            // Every document before the reader's stop is written: its error (if any) is next.
            if (pl->reader_failed) report(pl, pl->reader_err);
            break;
        }
        pthread_mutex_unlock(&pl->mu);
        int bad = 0;
        char why[1024];
        if (c->failed) {
            bad = 1;
            snprintf(why, sizeof why, "%s", c->err);
        }
        for (int i = 0; i < c->n_docs && !bad; i++) {
            long start = i ? c->doc_end[i - 1] : 0;
            if (p->emit(p->ctx, c->ids + start, (uint64_t)(c->doc_end[i] - start))) {
                bad = 1;
                snprintf(why, sizeof why, "%s", ct_last_error());
            }
        }
        if (!bad && p->on_progress && c->n_docs)
            p->on_progress(p->ctx, c->bytes_done, p->files[c->docs[c->n_docs - 1].file]);
        shrink(c, chunk_bytes);
        pthread_mutex_lock(&pl->mu);
        if (bad) {
            report(pl, why);
            break;
        }
        c->state = SLOT_FREE;
        pl->next_write++;
        pthread_cond_broadcast(&pl->cv);
    }
    pthread_mutex_unlock(&pl->mu);
    return NULL;
}

// ---- reader (the calling thread) -------------------------------------------------------------

// The chunk being filled: waits for its slot to be free. NULL when the run stopped.
static chunk *take_slot(pipeline *pl, uint64_t first_doc) {
    pthread_mutex_lock(&pl->mu);
    chunk *c = slot_of(pl, pl->next_fill);
    while (!pl->stop && c->state != SLOT_FREE) pthread_cond_wait(&pl->cv, &pl->mu);
    int stop = pl->stop;
    pthread_mutex_unlock(&pl->mu);
    if (stop) return NULL;
    c->seq = pl->next_fill;
    c->first_doc = first_doc;
    c->text_len = 0;
    c->n_docs = 0;
    c->failed = 0;
    return c;
}

static void publish(pipeline *pl, chunk *c, uint64_t bytes_done) {
    c->bytes_done = bytes_done;
    pthread_mutex_lock(&pl->mu);
    c->state = SLOT_FILLED;
    pl->next_fill++;
    pthread_cond_broadcast(&pl->cv);
    pthread_mutex_unlock(&pl->mu);
}

static void add_doc(chunk *c, const ct_corpus_doc *d, int file) {
    int is_ids = d->text == NULL;
    size_t bytes = is_ids ? d->n_ids * sizeof(int32_t) : d->len;
    size_t off = (c->text_len + 3) & ~(size_t)3;  // ids stay 4-aligned
    grow((void **)&c->text, &c->text_cap, off + bytes, 1);
    memcpy(c->text + off, is_ids ? (const void *)d->ids : (const void *)d->text, bytes);
    c->text_len = off + bytes;
    if (c->n_docs == c->docs_cap) {
        size_t cap = (size_t)c->docs_cap, cap2 = cap;
        grow((void **)&c->docs, &cap, cap + 1, sizeof(doc_ref));
        grow((void **)&c->doc_end, &cap2, cap2 + 1, sizeof(long));
        c->docs_cap = (int)(cap < cap2 ? cap : cap2);
    }
    c->docs[c->n_docs++] = (doc_ref){.off = off, .len = bytes, .file = file, .is_ids = is_ids};
}

// Reads every file into chunks. Returns when done, stopped, or at a read error (recorded for the
// writer to report in its turn).
static void read_all(pipeline *pl) {
    const ct_prep_pipeline *p = pl->p;
    size_t chunk_bytes = p->chunk_bytes ? p->chunk_bytes : CT_PREP_CHUNK_BYTES;
    uint64_t base = 0, n_docs = 0;
    chunk *c = NULL;
    int failed = 0;
    for (int f = 0; f < p->n_files && !failed; f++) {
        ct_corpus *cr = ct_corpus_open(p->files[f], p->corpus);
        if (!cr) {
            failed = 1;
            break;
        }
        struct stat sb;
        uint64_t size = stat(p->files[f], &sb) == 0 ? (uint64_t)sb.st_size : 0;
        if (p->on_file) p->on_file(p->ctx, cr, size);
        ct_corpus_doc doc;
        int rc;
        while ((rc = ct_corpus_next(cr, &doc)) > 0) {
            size_t bytes = doc.text ? doc.len : doc.n_ids * sizeof(int32_t);
            // A document that does not fit the chunk starts the next (alone, when it is large).
            if (c && c->n_docs && c->text_len + bytes > chunk_bytes) {
                uint64_t at = ct_corpus_position(cr);
                publish(pl, c, base + (at < size ? at : size));
                c = NULL;
            }
            if (!c && !(c = take_slot(pl, n_docs))) break;
            add_doc(c, &doc, f);
            n_docs++;
        }
        if (rc < 0) failed = 1;
        ct_corpus_close(cr);
        base += size;
        if (!c && rc > 0) break;  // stopped by the writer
    }
    if (c && c->n_docs && !failed) publish(pl, c, base);
    // (a partly filled chunk before a read error is dropped: the run fails anyway)
    pthread_mutex_lock(&pl->mu);
    pl->reader_done = 1;
    if (failed) {
        pl->reader_failed = 1;
        snprintf(pl->reader_err, sizeof pl->reader_err, "%s", ct_last_error());
    }
    pthread_cond_broadcast(&pl->cv);
    pthread_mutex_unlock(&pl->mu);
}

ct_status ct_prep_run(const ct_prep_pipeline *p) {
    int threads = p->threads < 1 ? 1 : p->threads;
    pipeline pl = {.p = p, .n_ring = CT_PREP_RING(threads)};
    pl.ring = ct_xcalloc((size_t)pl.n_ring, sizeof(chunk));
    pthread_mutex_init(&pl.mu, NULL);
    pthread_cond_init(&pl.cv, NULL);
    pthread_t *enc = ct_xcalloc((size_t)threads, sizeof(pthread_t)), wr;
    int started = 0;
    for (; started < threads; started++)
        if (pthread_create(&enc[started], NULL, encoder_main, &pl) != 0) break;
    int writer_ok = started > 0 && pthread_create(&wr, NULL, writer_main, &pl) == 0;
    if (writer_ok) read_all(&pl);
    else {
        pthread_mutex_lock(&pl.mu);
        report(&pl, "cannot start threads (--threads): the system refused");
        pthread_mutex_unlock(&pl.mu);
    }
    if (writer_ok) pthread_join(wr, NULL);
    pthread_mutex_lock(&pl.mu);
    pl.stop = 1;  // the writer is done: nothing more will be encoded
    pthread_cond_broadcast(&pl.cv);
    pthread_mutex_unlock(&pl.mu);
    for (int i = 0; i < started; i++) pthread_join(enc[i], NULL);
    for (int i = 0; i < pl.n_ring; i++) {
        free(pl.ring[i].text);
        free(pl.ring[i].docs);
        free(pl.ring[i].ids);
        free(pl.ring[i].doc_end);
    }
    free(pl.ring);
    free(enc);
    pthread_mutex_destroy(&pl.mu);
    pthread_cond_destroy(&pl.cv);
    if (pl.failed) return ct_set_error("%s", pl.err);
    return CT_OK;
}

int ct_prep_default_threads(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    return 1;
}
