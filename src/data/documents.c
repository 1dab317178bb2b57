#include "data/documents.h"

void ct_documents_find(const int32_t *tokens, long seqs, long T, int32_t eos, int32_t *docs) {
    for (long b = 0; b < seqs; b++) {
        const int32_t *in = tokens + b * T;  // (T)
        int32_t *d = docs + b * T, id = 0;   // (T)
        for (long j = 0; j < T; j++) {
            d[j] = id;
            id += in[j] == eos;
        }
    }
}

void ct_documents_positions(const int32_t *docs, long seqs, long T, int32_t *pos) {
    for (long b = 0; b < seqs; b++) {
        const int32_t *d = docs + b * T;  // (T)
        int32_t *p = pos + b * T, start = 0;
        for (long j = 0; j < T; j++) {
            if (j > 0 && d[j] != d[j - 1]) start = (int32_t)j;
            p[j] = (int32_t)j - start;
        }
    }
}
