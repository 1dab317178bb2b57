// Context parallel attention: layout (positions, sequence-length check), planning, the op table
// entry, the analytic byte counts, and the pieces both rotate methods share (chunk-major
// packing). The methods themselves: cp_ring.c, cp_allgather.c.
#include "parallel/context_parallel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/memory.h"
#include "parallel/cp_internal.h"

// ------------------------------------------------------------------ layout

void ct_cp_positions(ct_cp_balance balance, int cp_rank, int cp_size, long T, int32_t *pos) {
    if (balance == CT_CP_CONTIGUOUS) {
        const long n = T / cp_size;
        for (long i = 0; i < n; i++) pos[i] = (int32_t)(cp_rank * n + i);
        return;
    }
    const long C = T / (2L * cp_size);  // head chunk r, then tail chunk 2cp-1-r
    for (long i = 0; i < C; i++) {
        pos[i] = (int32_t)(cp_rank * C + i);
        pos[C + i] = (int32_t)((2L * cp_size - 1 - cp_rank) * C + i);
    }
}

ct_status ct_cp_check_seq_len(ct_cp_balance balance, int cp_size, long T) {
    if (cp_size < 1) return ct_set_error("context_extension_degree %d must be at least 1", cp_size);
    if (T <= 0) return ct_set_error("training.seq_len %ld must be at least 1", T);
    // One cp rank holds the whole sequence and balances nothing: any length splits into one piece.
    if (cp_size == 1) return CT_OK;
    if (balance == CT_CP_HEADTAIL) {
        const long n = 2L * cp_size;
        if (T % n != 0)
            return ct_set_error("training.seq_len %ld does not split into 2 x context_extension_degree %d = %ld "
                                "equal chunks (head-tail balancing); use a multiple of %ld",
                                T, cp_size, n, n);
    } else if (T % cp_size != 0) {
        return ct_set_error("training.seq_len %ld does not split into context_extension_degree %d equal pieces "
                            "(no load balancing); use a multiple of %d",
                            T, cp_size, cp_size);
    }
    return CT_OK;
}

// ------------------------------------------------------------------ chunk-major packing

void ct_cp_pack_elems(const ct_cp *cp, void *dst, const void *src, long ld, long B, long width, size_t esize) {
    const ct_kernels *k = cp->k;
    const size_t row = (size_t)width * esize;
    for (int c = 0; c < cp->nch; c++)
        for (long b = 0; b < B; b++) {
            char *d = (char *)dst + ((long)c * B + b) * cp->C * (long)row;                      // (C, width)
            const char *s = (const char *)src + (b * cp->T_local + (long)c * cp->C) * ld * (long)esize;  // stride ld
            if (ld == width) {
                k->copy(d, s, row * (size_t)cp->C);
                continue;
            }
            k->copy_2d(d, row, s, (size_t)ld * esize, row, cp->C);
        }
}

void ct_cp_pack(const ct_cp *cp, float *dst, const float *src, long ld, long B, long width) {
    ct_cp_pack_elems(cp, dst, src, ld, B, width, sizeof(float));
}

void ct_cp_unpack(const ct_cp *cp, float *dst, long ld, const float *src, long B, long width, bool add) {
    const ct_kernels *k = cp->k;
    const size_t row = (size_t)width * sizeof(float);
    for (int c = 0; c < cp->nch; c++)
        for (long b = 0; b < B; b++) {
            const float *s = src + ((long)c * B + b) * cp->C * width;   // (C, width)
            float *d = dst + (b * cp->T_local + (long)c * cp->C) * ld;  // (C, width), stride ld
            if (ld == width) {
                if (add)
                    k->add_inplace(d, s, cp->C * width);
                else
                    k->copy(d, s, row * (size_t)cp->C);
                continue;
            }
            for (long t = 0; t < cp->C; t++) {
                if (add)
                    k->add_inplace(d + t * ld, s + t * width, width);
                else
                    k->copy(d + t * ld, s + t * width, row);
            }
        }
}

void ct_cp_pack_lse(const ct_cp *cp, float *dst, const float *src, long B) {
    const size_t run = (size_t)cp->C * sizeof(float);
    for (int c = 0; c < cp->nch; c++)
        for (long b = 0; b < B; b++)
            for (long h = 0; h < cp->NH; h++)
                cp->k->copy(dst + (((long)c * B + b) * cp->NH + h) * cp->C,
                            src + (b * cp->NH + h) * cp->T_local + (long)c * cp->C, run);
}

void ct_cp_unpack_lse(const ct_cp *cp, float *dst, const float *src, long B) {
    const size_t run = (size_t)cp->C * sizeof(float);
    for (int c = 0; c < cp->nch; c++)
        for (long b = 0; b < B; b++)
            for (long h = 0; h < cp->NH; h++)
                cp->k->copy(dst + (b * cp->NH + h) * cp->T_local + (long)c * cp->C,
                            src + (((long)c * B + b) * cp->NH + h) * cp->C, run);
}

bool ct_cp_gather_docs(ct_cp *cp, const ct_attention_args *a) {
    if (!a->q_doc) return false;
    const ct_kernels *k = cp->k;
    const long B = a->B, Tl = cp->T_local, C = cp->C;
    const int P = cp->group->size;
    const size_t run = sizeof(int32_t) * (size_t)C;
    int32_t *mine = cp->doc_all + (long)cp->group->rank * B * Tl;  // in place: this rank's slot
    k->copy(mine, a->q_doc, sizeof(int32_t) * (size_t)(B * Tl));
    ct_comm_all_gather(cp->group, mine, cp->doc_all, (size_t)(B * Tl), CT_I32);
    for (int s = 0; s < P; s++)
        for (int c = 0; c < cp->nch; c++)
            for (long b = 0; b < B; b++) {
                const int32_t *src = cp->doc_all + ((long)s * B + b) * Tl + (long)c * C;  // (C)
                int32_t *dst = cp->rotate == CT_CP_RING ? cp->doc_keys + (((long)s * cp->nch + c) * B + b) * C
                                                        : cp->doc_keys + b * cp->T + ct_cp_chunk_index(cp, s, c) * C;
                k->copy(dst, src, run);
            }
    return true;
}

// ------------------------------------------------------------------ planning

// A buffer on the backend's device, or (sizing) only its bytes counted.
static float *alloc_f(const ct_cp *cp, ct_mem_sizing *sizing, ct_mem_category cat, long n) {
    if (sizing) return ct_mem_sizing_add(sizing, cat, (size_t)n * sizeof(float));
    ct_device dev = {cp->k->device, 0};
    return ct_mem_alloc_on(dev, cat, (size_t)n * sizeof(float));
}

ct_status ct_cp_init(ct_cp *cp, const ct_kernels *k, ct_group *cp_group, ct_cp_rotate rotate, ct_cp_balance balance,
                     long B, long T_global, long NH, long NKV, long HS) {
    return ct_cp_init_sizing(cp, k, cp_group, rotate, balance, B, T_global, NH, NKV, HS, NULL);
}

ct_status ct_cp_init_sizing(ct_cp *cp, const ct_kernels *k, ct_group *cp_group, ct_cp_rotate rotate,
                            ct_cp_balance balance, long B, long T_global, long NH, long NKV, long HS,
                            ct_mem_sizing *sizing) {
    memset(cp, 0, sizeof *cp);
    const int P = cp_group->size;
    if (ct_cp_check_seq_len(balance, P, T_global) != CT_OK) return CT_ERR;
    if (B < 1 || NH < 1 || NKV < 1 || HS < 1 || NH % NKV != 0)
        return ct_set_error("context parallel: B %ld, NH %ld, NKV %ld, HS %ld (NH must be a multiple of NKV)", B, NH,
                            NKV, HS);
    if (rotate != CT_CP_RING && rotate != CT_CP_ALLGATHER)
        return ct_set_error("context parallel: unknown rotate method %d", (int)rotate);
    *cp = (ct_cp){.k = k, .group = cp_group, .rotate = rotate, .balance = balance, .B = B, .T = T_global,
                  .T_local = T_global / P, .NH = NH, .NKV = NKV, .HS = HS,
                  .nch = balance == CT_CP_HEADTAIL ? 2 : 1};
    cp->C = cp->T_local / cp->nch;
    if (P == 1) return CT_OK;  // the local attention stays: nothing to plan

    if (sizing) {
        ct_mem_sizing_add(sizing, CT_MEM_OTHER, sizeof(int32_t) * (size_t)T_global);  // cp->pos below
    } else {
        int32_t *pos = ct_xmalloc(sizeof(int32_t) * (size_t)T_global);  // (cp, T_local) host
        for (int r = 0; r < P; r++) ct_cp_positions(balance, r, P, T_global, pos + r * cp->T_local);
        cp->pos = ct_mem_alloc_on((ct_device){k->device, 0}, CT_MEM_OTHER, sizeof(int32_t) * (size_t)T_global);
        k->copy_from_host(cp->pos, pos, sizeof(int32_t) * (size_t)T_global);
        free(pos);
    }
    // document ids: (cp, B, T_local) gathered, and the keys' layout of the same size
    const size_t ids = sizeof(int32_t) * (size_t)(B * T_global);
    cp->doc_all = sizing ? ct_mem_sizing_add(sizing, CT_MEM_OTHER, ids)
                         : ct_mem_alloc_on((ct_device){k->device, 0}, CT_MEM_OTHER, ids);
    cp->doc_keys = sizing ? ct_mem_sizing_add(sizing, CT_MEM_OTHER, ids)
                          : ct_mem_alloc_on((ct_device){k->device, 0}, CT_MEM_OTHER, ids);

    const long blk = 2 * B * cp->T_local * NKV * HS;  // one packed K|V block
    const long qrows = B * cp->T_local * NH * HS;     // this rank's q / out rows
    if (rotate == CT_CP_RING) {
        for (int i = 0; i < 2; i++) {
            cp->kv[i] = alloc_f(cp, sizing, CT_MEM_COMM, blk);
            cp->dkv[i] = alloc_f(cp, sizing, CT_MEM_COMM, blk);
        }
        cp->dkv_in = alloc_f(cp, sizing, CT_MEM_COMM, blk);
        cp->qc = alloc_f(cp, sizing, CT_MEM_ACTIVATIONS, qrows);
        cp->oc = alloc_f(cp, sizing, CT_MEM_ACTIVATIONS, qrows);
        cp->doc = alloc_f(cp, sizing, CT_MEM_ACTIVATIONS, qrows);
        cp->dqc = alloc_f(cp, sizing, CT_MEM_ACTIVATIONS, qrows);
        cp->lc = alloc_f(cp, sizing, CT_MEM_ACTIVATIONS, B * NH * cp->T_local);
        cp->part_o = alloc_f(cp, sizing, CT_MEM_ACTIVATIONS, B * cp->C * NH * HS);
        cp->part_l = alloc_f(cp, sizing, CT_MEM_ACTIVATIONS, B * NH * cp->C);
    } else {
        const long full = B * T_global * NKV * HS;
        cp->kv_send = alloc_f(cp, sizing, CT_MEM_COMM, blk);
        cp->kv_all = alloc_f(cp, sizing, CT_MEM_COMM, blk * P);
        cp->kfull = alloc_f(cp, sizing, CT_MEM_ACTIVATIONS, full);
        cp->vfull = alloc_f(cp, sizing, CT_MEM_ACTIVATIONS, full);
        cp->dkfull = alloc_f(cp, sizing, CT_MEM_ACTIVATIONS, full);
        cp->dvfull = alloc_f(cp, sizing, CT_MEM_ACTIVATIONS, full);
    }
    return CT_OK;
}

void ct_cp_free(ct_cp *cp) {
    float *bufs[] = {cp->kv[0], cp->kv[1], cp->dkv[0], cp->dkv[1], cp->dkv_in, cp->qc, cp->oc, cp->doc,
                     cp->dqc, cp->lc, cp->part_o, cp->part_l, cp->kv_send, cp->kv_all, cp->kfull, cp->vfull,
                     cp->dkfull, cp->dvfull};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ct_mem_free(bufs[i]);
    ct_mem_free(cp->pos);
    ct_mem_free(cp->doc_all);
    ct_mem_free(cp->doc_keys);
    memset(cp, 0, sizeof *cp);
}

long ct_cp_scratch_floats(const ct_cp *cp) {
    // ring: kernel calls on (C, C) chunk pairs; allgather: (T_local, T) in one call
    if (cp->rotate == CT_CP_RING) return cp->k->attention_scratch_floats(cp->C, cp->C, cp->HS);
    return cp->k->attention_scratch_floats(cp->T_local, cp->T, cp->HS);
}

double ct_cp_expected_bytes(const ct_cp *cp, bool backward, bool bf16) {
    const double P = cp->group->size;
    if (P <= 1) return 0;
    const double S = 2.0 * cp->B * cp->T_local * cp->NKV * cp->HS * sizeof(float);
    if (cp->rotate == CT_CP_RING) {
        double fwd = 2 * (P - 1) * S;  // each of cp-1 blocks sent and received
        return backward ? fwd + 2 * (P - 1) * S + 2 * P * S : fwd;
    }
    double gather = (P - 1) * S * (bf16 ? 0.5 : 1.0);
    return backward ? 2 * gather + (P - 1) * S : gather;
}

// ------------------------------------------------------------------ the op

static void check_args(const ct_cp *cp, const ct_attention_args *a) {
    if (a->Tq != cp->T_local || a->Tk != cp->T_local || a->B < 1 || a->B > cp->B || a->NH != cp->NH ||
        a->NKV != cp->NKV || a->HS != cp->HS)
        ct_fatal("context parallel", "attention call (B %ld, Tq %ld, Tk %ld, NH %ld, NKV %ld, HS %ld) does not match "
                 "the plan (B <= %ld, T_local %ld, NH %ld, NKV %ld, HS %ld)",
                 a->B, a->Tq, a->Tk, a->NH, a->NKV, a->HS, cp->B, cp->T_local, cp->NH, cp->NKV, cp->HS);
}

static void op_forward(void *ctx, const ct_attention_args *a) {
    ct_cp *cp = ctx;
    check_args(cp, a);
    if (cp->rotate == CT_CP_RING)
        ct_cp_ring_forward(cp, a);
    else
        ct_cp_allgather_forward(cp, a);
}

static void op_backward(void *ctx, const ct_attention_args *a, const float *dout, float *dq, float *dk, float *dv) {
    ct_cp *cp = ctx;
    check_args(cp, a);
    if (cp->rotate == CT_CP_RING)
        ct_cp_ring_backward(cp, a, dout, dq, dk, dv);
    else
        ct_cp_allgather_backward(cp, a, dout, dq, dk, dv);
}

static void op_forward_bf16(void *ctx, const ct_attention_args *a) {
    ct_cp *cp = ctx;
    check_args(cp, a);
    ct_cp_allgather_forward_bf16(cp, a);
}

static void op_backward_bf16(void *ctx, const ct_attention_args *a, const float *dout, float *dq, float *dk,
                             float *dv) {
    ct_cp *cp = ctx;
    check_args(cp, a);
    ct_cp_allgather_backward_bf16(cp, a, dout, dq, dk, dv);
}

static long op_scratch(void *ctx, long Tq, long Tk, long HS) { return ct_cp_scratch_floats(ctx); }

void ct_cp_apply(ct_cp *cp, ct_stage_ops *ops) {
    if (cp->group->size == 1) return;
    // bf16 calls where the backend has the bf16 attention and the method is the all-gather: the
    // ring merges partial results, which a bf16 output would round before the merge
    bool bf16 = cp->rotate == CT_CP_ALLGATHER && cp->k->attention_forward_bf16 && cp->k->attention_backward_bf16;
    ops->attention = (ct_attention_ops){.ctx = cp, .forward = op_forward, .backward = op_backward,
                                        .forward_bf16 = bf16 ? op_forward_bf16 : NULL,
                                        .backward_bf16 = bf16 ? op_backward_bf16 : NULL,
                                        .scratch_floats = op_scratch};
}
