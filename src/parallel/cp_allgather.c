// All-gather context parallel attention (TorchTitan's default rotate method): one all-gather of
// every rank's packed K|V block, rearranged into the whole sequence in position order, and this
// rank's queries attend to it in ONE kernel call (k_pos = 0..T-1, q_pos = this rank's
// positions): no partial results, no merge; the kernel skips the key tiles in the future of a
// query tile itself. Backward gathers again (keeping every layer's gathered K/V until its
// backward would cost cp times the K/V memory that context parallel exists to save), runs the
// kernel's backward against the whole sequence, and reduce-scatters dK|dV to their owners. Under
// bf16 (the op's bf16 calls) K|V are gathered in bf16, half the bytes, and the bf16 kernel runs;
// dK|dV stay fp32.
#include "parallel/cp_internal.h"

// Gathered blocks (cp, 2: K|V, nch, B, C, NKV, HS) <-> whole-sequence K, V (B, T, NKV, HS) in
// position order, elements of esize bytes (fp32, or bf16 in the bf16 calls); to_full false goes
// back (for the reduce-scatter of the gradients).
static void rearrange(ct_cp *cp, void *all, void *kf, void *vf, long B, size_t esize, bool to_full) {
    const long W = cp->NKV * cp->HS, C = cp->C, kvn = B * cp->T_local * W;
    const size_t run = esize * (size_t)(C * W);
    char *a = all, *k = kf, *v = vf;
    for (int s = 0; s < cp->group->size; s++)
        for (int c = 0; c < cp->nch; c++)
            for (long b = 0; b < B; b++) {
                char *blk = a + esize * (size_t)(2 * kvn * s + ((long)c * B + b) * C * W);  // (C, W) of K; V at + kvn
                const size_t at = esize * (size_t)((b * cp->T + ct_cp_chunk_index(cp, s, c) * C) * W);  // in (B, T, W)
                char *blk_v = blk + esize * (size_t)kvn;
                if (to_full) {
                    cp->k->copy(k + at, blk, run);
                    cp->k->copy(v + at, blk_v, run);
                } else {
                    cp->k->copy(blk, k + at, run);
                    cp->k->copy(blk_v, v + at, run);
                }
            }
}

// kfull, vfull = the whole sequence's K, V for these B sequences, from k, v (the args' fp32
// tensors, or in the bf16 calls their bf16 ones: esize 2, into the buffers' first halves).
static void gather_kv(ct_cp *cp, const void *k, long ldk, const void *v, long ldv, long B, size_t esize) {
    const long W = cp->NKV * cp->HS, kvn = B * cp->T_local * W;
    char *all = (char *)cp->kv_all, *mine = all + esize * (size_t)(2 * kvn * cp->group->rank);  // this rank's slot
    ct_cp_pack_elems(cp, mine, k, ldk, B, W, esize);
    ct_cp_pack_elems(cp, mine + esize * (size_t)kvn, v, ldv, B, W, esize);
    ct_comm_all_gather(cp->group, mine, all, (size_t)(2 * kvn), esize == 2 ? CT_BF16 : CT_F32);
    rearrange(cp, all, cp->kfull, cp->vfull, B, esize, true);
}

// dK, dV of the whole sequence (dkfull, dvfull) back to their owners, added into dk, dv.
static void scatter_dkv(ct_cp *cp, const ct_attention_args *a, float *dk, float *dv) {
    const long B = a->B, W = cp->NKV * cp->HS, kvn = B * cp->T_local * W;
    rearrange(cp, cp->kv_all, cp->dkfull, cp->dvfull, B, sizeof(float), false);  // (cp, 2, nch, B, C, W)
    ct_comm_reduce_scatter(cp->group, cp->kv_all, cp->kv_send, (size_t)(2 * kvn), CT_F32, CT_COMM_SUM);
    ct_cp_unpack(cp, dk, a->ldk, cp->kv_send, B, W, true);
    ct_cp_unpack(cp, dv, a->ldv, cp->kv_send + kvn, B, W, true);
}

void ct_cp_allgather_forward(ct_cp *cp, const ct_attention_args *a) {
    gather_kv(cp, a->k, a->ldk, a->v, a->ldv, a->B, sizeof(float));
    const bool docs = ct_cp_gather_docs(cp, a);  // keys' ids in position order, like kfull
    const long W = cp->NKV * cp->HS;
    cp->k->attention_forward(a->out, a->lse, a->q, a->ldq, cp->kfull, W, cp->vfull, W,
                             ct_cp_chunk_pos(cp, cp->group->rank, 0), NULL, docs ? a->q_doc : NULL,
                             docs ? cp->doc_keys : NULL, a->B, cp->T_local, cp->T, cp->NH, cp->NKV, cp->HS,
                             a->scratch);
    cp->counts.forward_calls++;
}

void ct_cp_allgather_backward(ct_cp *cp, const ct_attention_args *a, const float *dout, float *dq, float *dk,
                              float *dv) {
    gather_kv(cp, a->k, a->ldk, a->v, a->ldv, a->B, sizeof(float));
    const bool docs = ct_cp_gather_docs(cp, a);
    const long B = a->B, W = cp->NKV * cp->HS;
    const size_t full = sizeof(float) * (size_t)(B * cp->T * W);
    cp->k->zero(cp->dkfull, full);
    cp->k->zero(cp->dvfull, full);
    // dq accumulates in place; dK, dV of the whole sequence (B, T, NKV, HS)
    cp->k->attention_backward(dq, cp->dkfull, cp->dvfull, dout, a->out, a->lse, a->q, a->ldq, cp->kfull, W,
                              cp->vfull, W, ct_cp_chunk_pos(cp, cp->group->rank, 0), NULL, docs ? a->q_doc : NULL,
                              docs ? cp->doc_keys : NULL, B, cp->T_local, cp->T, cp->NH, cp->NKV, cp->HS,
                              a->scratch);
    cp->counts.backward_calls++;
    scatter_dkv(cp, a, dk, dv);
}

void ct_cp_allgather_forward_bf16(ct_cp *cp, const ct_attention_args *a) {
    gather_kv(cp, a->k16, a->ldk, a->v16, a->ldv, a->B, sizeof(uint16_t));
    const bool docs = ct_cp_gather_docs(cp, a);
    const long W = cp->NKV * cp->HS;
    cp->k->attention_forward_bf16(a->out16, a->lse, a->q16, a->ldq, (const uint16_t *)cp->kfull, W,
                                  (const uint16_t *)cp->vfull, W, ct_cp_chunk_pos(cp, cp->group->rank, 0), NULL,
                                  docs ? a->q_doc : NULL, docs ? cp->doc_keys : NULL, a->B, cp->T_local, cp->T, cp->NH,
                                  cp->NKV, cp->HS, a->scratch);
    cp->counts.forward_calls++;
}

void ct_cp_allgather_backward_bf16(ct_cp *cp, const ct_attention_args *a, const float *dout, float *dq, float *dk,
                                   float *dv) {
    gather_kv(cp, a->k16, a->ldk, a->v16, a->ldv, a->B, sizeof(uint16_t));
    const bool docs = ct_cp_gather_docs(cp, a);
    const long B = a->B, W = cp->NKV * cp->HS;
    const size_t full = sizeof(float) * (size_t)(B * cp->T * W);
    cp->k->zero(cp->dkfull, full);
    cp->k->zero(cp->dvfull, full);
    cp->k->attention_backward_bf16(dq, cp->dkfull, cp->dvfull, dout, a->out16, a->lse, a->q16, a->ldq,
                                   (const uint16_t *)cp->kfull, W, (const uint16_t *)cp->vfull, W,
                                   ct_cp_chunk_pos(cp, cp->group->rank, 0), NULL, docs ? a->q_doc : NULL,
                                   docs ? cp->doc_keys : NULL, B, cp->T_local, cp->T, cp->NH, cp->NKV, cp->HS,
                                   a->scratch);
    cp->counts.backward_calls++;
    scatter_dkv(cp, a, dk, dv);
}
