// Shared pieces of context parallel attention (context_parallel.c, cp_ring.c, cp_allgather.c):
// chunk bookkeeping, packing between the model's strided layout and chunk-major buffers, and
// the log-sum-exp merge. Not for use outside src/parallel/ (and its test).
#ifndef CT_CP_INTERNAL_H
#define CT_CP_INTERNAL_H
#include "parallel/context_parallel.h"

// Message tags on the cp group: K|V blocks and dK|dV accumulators never match each other.
enum { CT_CP_TAG_KV = 0x4350, CT_CP_TAG_DKV = 0x4351 };

// Global chunk index (0 .. nch·cp - 1, in position order) of chunk c of `rank`'s tokens.
static inline long ct_cp_chunk_index(const ct_cp *cp, int rank, int c) {
    return cp->nch == 1 ? rank : (c == 0 ? rank : 2L * cp->group->size - 1 - rank);
}
// Positions (C) of chunk c of `rank`'s tokens (device memory).
static inline const int32_t *ct_cp_chunk_pos(const ct_cp *cp, int rank, int c) {
    return cp->pos + (long)rank * cp->T_local + (long)c * cp->C;
}

// Document ids of keys (context parallel with model.attn_mask_type block_causal): the ids of
// every rank's tokens gathered from a->q_doc (B, T_local, this rank's), laid out for the rotate
// method: allgather cp->doc_keys (B, T) in position order; ring (cp, nch, B, C) chunk-major
// (ct_cp_chunk_docs). False (nothing done) without ids.
bool ct_cp_gather_docs(ct_cp *cp, const ct_attention_args *a);
// Ids (B, C) of chunk c of `rank`'s tokens after ct_cp_gather_docs (ring), B the call's.
static inline const int32_t *ct_cp_chunk_docs(const ct_cp *cp, int rank, int c, long B) {
    return cp->doc_keys + ((long)rank * cp->nch + c) * B * cp->C;
}

// Strided token rows -> chunk-major: src (B, T_local, width) with token stride ld ->
// dst (nch, B, C, width) contiguous. Through the backend's copy (rows of `width` floats).
void ct_cp_pack(const ct_cp *cp, float *dst, const float *src, long ld, long B, long width);
// The same for elements of esize bytes (bf16 rows: 2), ld and width in elements.
void ct_cp_pack_elems(const ct_cp *cp, void *dst, const void *src, long ld, long B, long width, size_t esize);
// The inverse: dst (B, T_local, width) with token stride ld = src (nch, B, C, width), or += when add.
void ct_cp_unpack(const ct_cp *cp, float *dst, long ld, const float *src, long B, long width, bool add);
// The same two for lse rows: (B, NH, T_local) <-> (nch, B, NH, C).
void ct_cp_pack_lse(const ct_cp *cp, float *dst, const float *src, long B);
void ct_cp_unpack_lse(const ct_cp *cp, float *dst, const float *src, long B);

void ct_cp_ring_forward(ct_cp *cp, const ct_attention_args *a);
void ct_cp_ring_backward(ct_cp *cp, const ct_attention_args *a, const float *dout, float *dq, float *dk, float *dv);
void ct_cp_allgather_forward(ct_cp *cp, const ct_attention_args *a);
void ct_cp_allgather_backward(ct_cp *cp, const ct_attention_args *a, const float *dout, float *dq, float *dk,
                              float *dv);
// The same on the args' bf16 q16, k16, v16 and out16 (K|V gathered in bf16).
void ct_cp_allgather_forward_bf16(ct_cp *cp, const ct_attention_args *a);
void ct_cp_allgather_backward_bf16(ct_cp *cp, const ct_attention_args *a, const float *dout, float *dq, float *dk,
                                   float *dv);
#endif
