// Ring attention (Liu et al. 2023) with head-tail chunks: rank r keeps its queries; at step s
// (0 .. cp-1) it holds the K|V block of rank src = r - s (mod cp), passes it on to r + 1 and
// receives the next from r - 1, the exchange posted before the attention of the block in hand.
//
// Work is decided per chunk pair (query chunk i of this rank, key chunk j of the block): global
// chunk indices gi, gj in position order; gj > gi is entirely in the future and skipped (no
// kernel call), gj < gi is fully visible, gj == gi is the causal diagonal (the kernel masks by
// positions). With head-tail this gives every rank 2 cp + 1 calls of (C, C), 2 cp chunk pairs
// of work; a contiguous split gives rank r only r + 1 calls.
//
// Forward: each call's (out, lse) merges into the chunk's running result through the
// log-sum-exp (the backend's attention_merge). Backward: the kernel recomputes probabilities from the FINAL out
// and lse, so each block's dQ, dK, dV contributions are exact on their own; dQ stays here, the
// dK|dV accumulator of block src travels with the blocks one step behind (rank r adds its part
// and sends it to r + 1, which holds block src next) and after the last step it is at the
// owner's previous rank, whose final send brings it home.
#include <stdbool.h>

#include "parallel/cp_internal.h"

// Lets MPI move a rendezvous message along while we compute (it progresses only inside calls).
static void progress(ct_comm_handle *a, ct_comm_handle *b) {
    if (a->group) ct_comm_test(a);
    if (b->group) ct_comm_test(b);
}

void ct_cp_ring_forward(ct_cp *cp, const ct_attention_args *a) {
    const ct_kernels *k = cp->k;
    ct_group *g = cp->group;
    const int P = g->size, r = g->rank, next = (r + 1) % P, prev = (r + P - 1) % P;
    const long B = a->B, C = cp->C, NH = cp->NH, NKV = cp->NKV, HS = cp->HS;
    const long kvn = B * cp->T_local * NKV * HS;  // floats of K (or V) in a block
    const long qchunk = B * C * NH * HS, kchunk = B * C * NKV * HS, lchunk = B * NH * C;

    ct_cp_pack(cp, cp->kv[0], a->k, a->ldk, B, NKV * HS);  // kv[0] (2, nch, B, C, NKV, HS)
    ct_cp_pack(cp, cp->kv[0] + kvn, a->v, a->ldv, B, NKV * HS);
    ct_cp_pack(cp, cp->qc, a->q, a->ldq, B, NH * HS);  // qc (nch, B, C, NH, HS)
    const bool docs = ct_cp_gather_docs(cp, a);          // every rank's ids, chunk-major
    bool has[2] = {false, false};  // chunk i has a result in oc / lc already
    int cur = 0;
    for (int s = 0; s < P; s++) {
        const int src = (r - s + P) % P;
        ct_comm_handle hr = {0}, hs = {0};
        if (s < P - 1) {  // the next block travels while this one is computed on
            hr = ct_comm_recv_start(g, cp->kv[cur ^ 1], (size_t)(2 * kvn), CT_F32, prev, CT_CP_TAG_KV);
            hs = ct_comm_send_start(g, cp->kv[cur], (size_t)(2 * kvn), CT_F32, next, CT_CP_TAG_KV);
        }
        const float *K = cp->kv[cur], *V = K + kvn;
        for (int i = 0; i < cp->nch; i++) {
            const long gi = ct_cp_chunk_index(cp, r, i);
            float *O = cp->oc + i * qchunk, *L = cp->lc + i * lchunk;  // (B, C, NH, HS), (B, NH, C)
            for (int j = 0; j < cp->nch; j++) {
                if (ct_cp_chunk_index(cp, src, j) > gi) {  // every key after every query
                    cp->counts.forward_skipped++;
                    continue;
                }
                // the chunk's first result goes straight in; later ones merge through lse
                float *o = has[i] ? cp->part_o : O, *l = has[i] ? cp->part_l : L;
                k->attention_forward(o, l, cp->qc + i * qchunk, NH * HS, K + j * kchunk, NKV * HS, V + j * kchunk,
                                     NKV * HS, ct_cp_chunk_pos(cp, r, i), ct_cp_chunk_pos(cp, src, j),
                                     docs ? ct_cp_chunk_docs(cp, r, i, B) : NULL,
                                     docs ? ct_cp_chunk_docs(cp, src, j, B) : NULL, B, C, C, NH, NKV, HS,
                                     a->scratch);
                cp->counts.forward_calls++;
                if (has[i]) cp->k->attention_merge(O, L, cp->part_o, cp->part_l, B, C, NH, HS);
                has[i] = true;
                progress(&hr, &hs);
            }
        }
        ct_comm_wait(&hr);
        ct_comm_wait(&hs);
        cur ^= 1;
    }
    ct_cp_unpack(cp, a->out, NH * HS, cp->oc, B, NH * HS, false);  // out (B, T_local, NH, HS)
    ct_cp_unpack_lse(cp, a->lse, cp->lc, B);                          // lse (B, NH, T_local)
}

void ct_cp_ring_backward(ct_cp *cp, const ct_attention_args *a, const float *dout, float *dq, float *dk, float *dv) {
    const ct_kernels *k = cp->k;
    ct_group *g = cp->group;
    const int P = g->size, r = g->rank, next = (r + 1) % P, prev = (r + P - 1) % P;
    const long B = a->B, C = cp->C, NH = cp->NH, NKV = cp->NKV, HS = cp->HS;
    const long kvn = B * cp->T_local * NKV * HS, blk = 2 * kvn;
    const long qchunk = B * C * NH * HS, kchunk = B * C * NKV * HS, lchunk = B * NH * C;

    ct_cp_pack(cp, cp->kv[0], a->k, a->ldk, B, NKV * HS);
    ct_cp_pack(cp, cp->kv[0] + kvn, a->v, a->ldv, B, NKV * HS);
    ct_cp_pack(cp, cp->qc, a->q, a->ldq, B, NH * HS);
    ct_cp_pack(cp, cp->oc, a->out, NH * HS, B, NH * HS);
    ct_cp_pack(cp, cp->doc, dout, NH * HS, B, NH * HS);
    ct_cp_pack_lse(cp, cp->lc, a->lse, B);
    const bool docs = ct_cp_gather_docs(cp, a);
    k->zero(cp->dqc, sizeof(float) * (size_t)(B * cp->T_local * NH * HS));

    ct_comm_handle hs_acc[2] = {{0}, {0}}, hr_acc = {0};
    int cur = 0;
    for (int s = 0; s < P; s++) {
        const int src = (r - s + P) % P;
        ct_comm_handle hr = {0}, hs = {0};
        if (s < P - 1) {
            hr = ct_comm_recv_start(g, cp->kv[cur ^ 1], (size_t)blk, CT_F32, prev, CT_CP_TAG_KV);
            hs = ct_comm_send_start(g, cp->kv[cur], (size_t)blk, CT_F32, next, CT_CP_TAG_KV);
        }
        // block src's accumulator so far: prev rank had this block last step (none at step 0:
        // this rank's own block starts here)
        if (s > 0) hr_acc = ct_comm_recv_start(g, cp->dkv_in, (size_t)blk, CT_F32, prev, CT_CP_TAG_DKV);
        float *acc = cp->dkv[s & 1];  // (2, nch, B, C, NKV, HS) this step's dK|dV of block src
        ct_comm_wait(&hs_acc[s & 1]);   // its send two steps ago has left
        k->zero(acc, sizeof(float) * (size_t)blk);

        const float *K = cp->kv[cur], *V = K + kvn;
        for (int i = 0; i < cp->nch; i++) {
            const long gi = ct_cp_chunk_index(cp, r, i);
            for (int j = 0; j < cp->nch; j++) {
                if (ct_cp_chunk_index(cp, src, j) > gi) {
                    cp->counts.backward_skipped++;
                    continue;
                }
                k->attention_backward(cp->dqc + i * qchunk, acc + j * kchunk, acc + kvn + j * kchunk,
                                      cp->doc + i * qchunk, cp->oc + i * qchunk, cp->lc + i * lchunk,
                                      cp->qc + i * qchunk, NH * HS, K + j * kchunk, NKV * HS, V + j * kchunk,
                                      NKV * HS, ct_cp_chunk_pos(cp, r, i), ct_cp_chunk_pos(cp, src, j),
                                      docs ? ct_cp_chunk_docs(cp, r, i, B) : NULL,
                                      docs ? ct_cp_chunk_docs(cp, src, j, B) : NULL, B, C, C, NH, NKV, HS,
                                      a->scratch);
                cp->counts.backward_calls++;
                progress(&hr, &hs);
                progress(&hr_acc, &hs_acc[(s & 1) ^ 1]);
            }
        }
        if (s > 0) {  // add what earlier ranks contributed, then pass the sum on
            ct_comm_wait(&hr_acc);
            k->add_inplace(acc, cp->dkv_in, blk);
        }
        hs_acc[s & 1] = ct_comm_send_start(g, acc, (size_t)blk, CT_F32, next, CT_CP_TAG_DKV);
        ct_comm_wait(&hr);
        ct_comm_wait(&hs);
        cur ^= 1;
    }
    // after the last step every block's accumulator is complete and one rank short of home
    hr_acc = ct_comm_recv_start(g, cp->dkv_in, (size_t)blk, CT_F32, prev, CT_CP_TAG_DKV);
    ct_cp_unpack(cp, dq, a->ldq, cp->dqc, B, NH * HS, true);  // while it travels
    ct_comm_wait(&hr_acc);
    ct_comm_wait(&hs_acc[0]);
    ct_comm_wait(&hs_acc[1]);
    ct_cp_unpack(cp, dk, a->ldk, cp->dkv_in, B, NKV * HS, true);
    ct_cp_unpack(cp, dv, a->ldv, cp->dkv_in + kvn, B, NKV * HS, true);
}
