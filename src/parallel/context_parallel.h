// Context parallel attention: every sequence of T tokens is split over the cp group, each rank
// holding T / cp tokens (its queries, keys and values), and causal attention over the whole
// sequence is computed by moving keys and values, never queries.
//
// Load balancing. With causal attention a contiguous split gives rank r (r + 1) / cp of the
// keys to look at, so the last rank works cp times as long as the first. Head-tail ("zigzag")
// cuts the sequence into 2 cp chunks and gives rank r chunks r and 2 cp - 1 - r: every rank then
// does the same work (2 cp chunk-pairs' worth). ct_cp_positions says which global positions a
// rank holds; the data split, RoPE and the loss follow the same positions.
//
// Rotate methods (parallelism.context_parallel_rotate_method):
//   ring       K/V blocks travel around the ring (cp - 1 steps), each step's exchange posted
//              before the attention of the block in hand; partial outputs merge through their
//              log-sum-exp. Chunk pairs entirely in the future are skipped (no kernel call).
//              Backward sends the blocks around again, and their dK/dV accumulators follow
//              them one step behind and arrive home after cp sends.
//   allgather  one all-gather of K/V, local queries against the whole sequence in one kernel
//              call; backward gathers again and reduce-scatters dK/dV to their owners.
// Only the kv heads travel (GQA); every buffer is planned in ct_cp_init, the step allocates
// nothing.
// Every buffer is on the backend's device: packing goes through its copies, the ring's merge of
// partial results through its attention_merge.
#ifndef CT_CONTEXT_PARALLEL_H
#define CT_CONTEXT_PARALLEL_H
#include <stdbool.h>
#include <stdint.h>

#include "comm/comm.h"
#include "core/mem_sizing.h"
#include "core/error.h"
#include "kernels/backend.h"
#include "model/stage_ops.h"

typedef enum { CT_CP_ALLGATHER = 0, CT_CP_RING } ct_cp_rotate;        // parallelism.context_parallel_rotate_method
typedef enum { CT_CP_HEADTAIL = 0, CT_CP_CONTIGUOUS } ct_cp_balance;  // load balancer: headtail | none

// Global positions of the T / cp tokens cp rank r holds of a sequence of length T: headtail:
// chunks r and 2cp-1-r of 2cp equal chunks (in that order); contiguous: the r-th of cp equal
// pieces. pos has T/cp entries (host memory).
void ct_cp_positions(ct_cp_balance balance, int cp_rank, int cp_size, long T, int32_t *pos);
// The sequence lengths a layout can split: CT_OK, or CT_ERR + one line ("training.seq_len 100
// does not split into 2 x context_extension_degree 4 = 8 equal chunks (head-tail balancing); use
// a multiple of 8"). At cp 1 every positive length is accepted: nothing is split.
ct_status ct_cp_check_seq_len(ct_cp_balance balance, int cp_size, long T);

// Work counters since init: chunk-pair kernel calls made and skipped
// because every key of the pair lies in the future of every query (ring); the all-gather makes
// one call per forward / backward and skips nothing (the kernel skips future tiles itself).
typedef struct {
    long forward_calls, forward_skipped;
    long backward_calls, backward_skipped;
} ct_cp_counts;

typedef struct {
    const ct_kernels *k;
    ct_group *group;            // the cp group (size 1: nothing to do)
    ct_cp_rotate rotate;
    ct_cp_balance balance;
    long B, T, T_local, NH, NKV, HS;  // planned: B sequences of T tokens, T_local = T / cp here
    int nch;                    // chunks per rank: 2 (head-tail) or 1 (contiguous)
    long C;                     // tokens per chunk = T / (nch · cp)
    int32_t *pos;               // (cp, T_local) every rank's global positions, device memory
    // document ids (block_causal), device memory: every rank's as gathered, and the keys' in the
    // rotate method's layout (cp_internal.h: ct_cp_gather_docs)
    int32_t *doc_all;           // (cp, B, T_local)
    int32_t *doc_keys;          // allgather (B, T) in position order; ring (cp, nch, B, C)
    // ring (chunk-major layouts: a chunk of every sequence is one contiguous (B, C, ...) tensor,
    // so a kernel call on one chunk pair needs no strides the kernel does not have)
    float *kv[2];               // (2: K|V, nch, B, C, NKV, HS) the block in hand / the one arriving
    float *dkv[2];              // same layout: this step's dK|dV accumulator (double buffered)
    float *dkv_in;              // same layout: the accumulator arriving from the previous rank
    float *qc, *oc, *doc, *dqc; // (nch, B, C, NH, HS) q, out, dout, dq of this rank's chunks
    float *lc;                  // (nch, B, NH, C) lse of this rank's chunks
    float *part_o, *part_l;     // (B, C, NH, HS), (B, NH, C) one call's partial result
    // allgather
    float *kv_send;             // (2: K|V, nch, B, C, NKV, HS) this rank's packed block; dK|dV too
    float *kv_all;              // (cp, 2, nch, B, C, NKV, HS) as the all-gather delivers it
    float *kfull, *vfull;       // (B, T, NKV, HS) in global position order (k_pos = 0..T-1)
                                // (kv_all, kfull, vfull hold bf16 in their first halves in the
                                // bf16 calls: cp_allgather.c)
    float *dkfull, *dvfull;     // (B, T, NKV, HS) gradients of the whole sequence's K, V
    ct_cp_counts counts;
} ct_cp;

// Plans buffers for micro-batches of B sequences, T_global tokens (this rank holds T_global/cp),
// NH query heads and NKV kv heads of size HS on this rank (already divided by tp). Refuses (one
// line) a sequence length the layout cannot split, NH not a multiple of NKV, a non-host backend.
ct_status ct_cp_init(ct_cp *cp, const ct_kernels *k, ct_group *cp_group, ct_cp_rotate rotate, ct_cp_balance balance,
                     long B, long T_global, long NH, long NKV, long HS);
// The same planning without buffers: what ct_cp_init would allocate is added to `sizing`
// (core/mem_sizing.h); the group needs only its size. Such a ct_cp can size scratch
// (ct_cp_scratch_floats, ct_cp_apply's scratch_floats) and be freed, never run.
ct_status ct_cp_init_sizing(ct_cp *cp, const ct_kernels *k, ct_group *cp_group, ct_cp_rotate rotate,
                            ct_cp_balance balance, long B, long T_global, long NH, long NKV, long HS,
                            ct_mem_sizing *sizing);
void ct_cp_free(ct_cp *cp);
// Replaces ops->attention with context-parallel attention over cp_group (a group of one leaves
// the table as it is). In the op: Tq == Tk == T_global / cp, B <= the planned B, the heads as
// planned; q_pos / k_pos are ignored in favour of ct_cp_positions' (which the caller must use
// for RoPE and the data split); q, k, v may sit in one fused qkv buffer (any strides). With
// document ids (q_doc = k_doc, (B, T_local) this rank's) every rank's are gathered with the
// positions, one small all-gather per call, and the kernels mask by them (k_doc is ignored).
void ct_cp_apply(ct_cp *cp, ct_stage_ops *ops);

// Bytes one forward (backward false) or one forward + one backward (true) of the planned B
// adds to ct_comm_stats_total_bytes(cp_group) on this rank. With S = 2 B T_local NKV HS · 4 (one
// packed K|V block):
//   ring       forward (cp-1) S sent + (cp-1) S received; backward the same for K|V plus cp S
//              sent + cp S received for dK|dV. (comm.h counts a send AND its receive.)
//   allgather  forward (cp-1) S (all-gather); backward (cp-1) S all-gather + (cp-1) S
//              reduce-scatter. bf16: the calls on bf16 q, k, v (the op's forward_bf16 /
//              backward_bf16) gather K|V in bf16, S / 2; dK|dV are reduced in fp32 as ever.
double ct_cp_expected_bytes(const ct_cp *cp, bool backward, bool bf16);
// Floats of scratch one op call needs (what ops->attention.scratch_floats returns).
long ct_cp_scratch_floats(const ct_cp *cp);
#endif
