// Documents in packed sequences (data/documents.h): ids from EOS and positions inside each
// document, against values written out by hand.
#include <string.h>

#include "data/documents.h"
#include "test.h"

enum { E = 9 };  // the EOS id of these sequences

static void ids_and_positions(void) {
    // two sequences of 8: the first cut inside a document at both ends, the second with EOS
    // first and last, and two EOS in a row (the second one a document of its own)
    const int32_t tok[16] = {5, 6, E, 7, E, 3, 3, 3, /**/ E, 4, 4, E, E, 1, 2, E};
    const int32_t want_docs[16] = {0, 0, 0, 1, 1, 2, 2, 2, /**/ 0, 1, 1, 1, 2, 3, 3, 3};
    const int32_t want_pos[16] = {0, 1, 2, 0, 1, 0, 1, 2, /**/ 0, 0, 1, 2, 0, 0, 1, 2};
    int32_t docs[16], pos[16];
    ct_documents_find(tok, 2, 8, E, docs);
    ct_documents_positions(docs, 2, 8, pos);
    for (int i = 0; i < 16; i++) {
        CHECK(docs[i] == want_docs[i], "token %d: document %d, expected %d", i, docs[i], want_docs[i]);
        CHECK(pos[i] == want_pos[i], "token %d: position %d, expected %d", i, pos[i], want_pos[i]);
    }
}

// Without any EOS every sequence is one document: positions 0..T-1, the sequence's own.
static void no_eos_is_one_document(void) {
    int32_t tok[3 * 5], docs[15], pos[15];
    for (int i = 0; i < 15; i++) tok[i] = i % 7;
    ct_documents_find(tok, 3, 5, E, docs);
    ct_documents_positions(docs, 3, 5, pos);
    for (int i = 0; i < 15; i++)
        CHECK(docs[i] == 0 && pos[i] == i % 5, "token %d: document %d position %d", i, docs[i], pos[i]);
}

int main(void) {
    CT_RUN(ids_and_positions);
    CT_RUN(no_eos_is_one_document);
    CT_TEST_EXIT();
}
