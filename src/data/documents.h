// Documents inside packed sequences (model.attn_mask_type block_causal): which document each
// token belongs to, and (model.rope_positions document) its position inside that document. The
// trainer and `ctitan eval` compute both here, so validation and eval see the same documents.
#ifndef CT_DOCUMENTS_H
#define CT_DOCUMENTS_H
#include <stdint.h>

// docs (seqs, T): each token's document in its sequence of tokens (seqs, T), counted from 0 per
// sequence; a new document begins after every eos (the eos itself ends its document).
void ct_documents_find(const int32_t *tokens, long seqs, long T, int32_t eos, int32_t *docs);

// pos (seqs, T): each token's distance from the first token of its document in its sequence
// (docs as ct_documents_find gives them; a document cut by the sequence's start begins at 0).
void ct_documents_positions(const int32_t *docs, long seqs, long T, int32_t *pos);
#endif
