#include "model/moe_layer.h"

#include <stdlib.h>
#include <string.h>

#include "core/mathutil.h"
#include "core/memory.h"

static int ep_size(const ct_moe_layer_spec *s) { return s->ep.size > 1 ? s->ep.size : 1; }

void ct_moe_load_stats(const int64_t *counts, long E, double *min, double *max, double *imbalance) {
    double lo = (double)counts[0], hi = lo, sum = 0;
    for (long e = 0; e < E; e++) {
        double c = (double)counts[e];
        lo = c < lo ? c : lo, hi = c > hi ? c : hi, sum += c;
    }
    *min = lo, *max = hi;
    *imbalance = sum > 0 ? hi / (sum / (double)E) : 1.0;
}

ct_status ct_moe_layer_init(ct_moe_layer *l, const ct_moe_layer_spec *spec) {
    memset(l, 0, sizeof *l);
    if (spec->C <= 0 || spec->F <= 0 || spec->E <= 0 || spec->N <= 0)
        return ct_set_error("moe: dim %ld, expert hidden %ld, experts %ld, tokens %ld: each must be positive", spec->C,
                            spec->F, spec->E, spec->N);
    if (spec->E > 1024) return ct_set_error("moe: %ld experts: at most 1024", spec->E);
    if (spec->aux_coef < 0 || spec->aux_group < 0 || (spec->aux_group > 0 && spec->N % spec->aux_group))
        return ct_set_error("moe: load-balancing loss coefficient %g over groups of %ld tokens: expected a coefficient "
                            ">= 0 and groups that divide the %ld tokens", spec->aux_coef, spec->aux_group, spec->N);
    if (spec->topk < 1 || spec->topk > spec->E)
        return ct_set_error("moe: %ld experts per token with %ld experts: expected 1 to %ld", spec->topk, spec->E,
                            spec->E);
    int ep = ep_size(spec);
    if (spec->E % ep)
        return ct_set_error("moe: %ld experts do not split over expert_parallel_degree %d", spec->E, ep);
    l->s = *spec;
    l->ep_size = ep;
    l->ep_rank = ep > 1 ? spec->ep.rank : 0;
    l->E_local = spec->E / ep;
    l->aux_weight = 1.0f;
    return CT_OK;
}

// ------------------------------------------------------------------ buffers

// The work areas: two of (rows, wide) floats, rows the most the expert side can receive (or N),
// wide the widest row written there; under bf16 a third, for fp32 rows widened from bf16 (x, h13)
// and the output gradients narrowed to bf16 for the experts' matmuls.
static long work_rows(const ct_moe_layer *l) {
    long P = l->s.N * l->s.topk * l->ep_size;
    return P > l->s.N ? P : l->s.N;
}
static long work_wide(const ct_moe_layer *l) { return 2 * l->s.F > l->s.C ? 2 * l->s.F : l->s.C; }
static int work_areas(const ct_moe_layer *l) { return l->s.bf16 ? 3 : 2; }
// The 8-bit kernels' scratch: the most either direction of either expert linear needs for the
// most rows one expert can receive (every token of every rank of the group, N·ep), as
// model/linear.c sizes the dense layers' for theirs.
static long f8_floats(const ct_moe_layer *l) {
    if (!l->s.f8) return 0;
    const ct_kernels *k = l->s.k;
    long n = l->s.N * l->ep_size, C = l->s.C, F = l->s.F, most = 0;
    long shapes[2][2] = {{C, 2 * F}, {F, C}};  // (in, out): w13, w2
    for (int i = 0; i < 2; i++) {
        long fwd = k->f8_scratch_floats(n, shapes[i][0], shapes[i][1]);
        long bwd = k->f8_backward_scratch_floats(n, shapes[i][0], shapes[i][1]);
        most = ct_max_l(most, ct_max_l(fwd, bwd));
    }
    return (most + 15) & ~15L;
}
static long areas_floats(const ct_moe_layer *l) { return work_areas(l) * work_rows(l) * work_wide(l); }
long ct_moe_scratch_floats(const ct_moe_layer *l) { return areas_floats(l) + f8_floats(l); }
static float *work_area(const ct_moe_layer *l, const ct_moe_acts *a, int i) {
    return a->scratch + (long)i * work_rows(l) * work_wide(l);
}
static float *f8_scratch(const ct_moe_layer *l, const ct_moe_acts *a) { return a->scratch + areas_floats(l); }

static void *dev_take(const ct_moe_layer *l, size_t bytes) {
    return ct_mem_alloc_on(ct_kernels_device(l->s.k), CT_MEM_ACTIVATIONS, bytes ? bytes : 4);
}
static void *host_take(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) ct_fatal("moe", "out of memory for %zu host entries", n);
    return p;
}

void ct_moe_acts_init(const ct_moe_layer *l, ct_moe_acts *a, float *scratch) {
    memset(a, 0, sizeof *a);
    const ct_moe_layer_spec *s = &l->s;
    long N = s->N, E = s->E, k = s->topk, C = s->C, F = s->F, P = N * k, R = P * l->ep_size;
    a->logits = dev_take(l, (size_t)(N * E) * sizeof(float));
    a->scores = dev_take(l, (size_t)(N * E) * sizeof(float));
    a->weights = dev_take(l, (size_t)P * sizeof(float));
    a->ids = dev_take(l, (size_t)P * sizeof(int32_t));
    a->pos = dev_take(l, (size_t)P * sizeof(int32_t));
    a->counts = dev_take(l, (size_t)E * sizeof(int64_t));
    a->xs = dev_take(l, (size_t)(P * C) * sizeof(float));
    a->ys = dev_take(l, (size_t)(P * C) * sizeof(float));
    if (l->ep_size > 1) a->xr = dev_take(l, (size_t)(R * C) * sizeof(float));
    if (s->bf16) {
        a->xe16 = dev_take(l, (size_t)(R * C) * sizeof(uint16_t));
        a->h13_16 = dev_take(l, (size_t)(R * 2 * F) * sizeof(uint16_t));
        a->h16 = dev_take(l, (size_t)(R * F) * sizeof(uint16_t));
    } else {
        a->xe = dev_take(l, (size_t)(R * C) * sizeof(float));
        a->h13 = dev_take(l, (size_t)(R * 2 * F) * sizeof(float));
        a->h = dev_take(l, (size_t)(R * F) * sizeof(float));
    }
    a->ye = dev_take(l, (size_t)(R * C) * sizeof(float));
    a->own_scratch = scratch == NULL;
    a->scratch = scratch ? scratch : dev_take(l, (size_t)ct_moe_scratch_floats(l) * sizeof(float));
    if (s->aux_coef > 0) {
        a->aux_loss = dev_take(l, sizeof(float));
        a->daux = dev_take(l, (size_t)(N * E) * sizeof(float));
    }
    a->host_counts = host_take((size_t)E, sizeof(int64_t));
    a->from = host_take((size_t)(l->ep_size * l->E_local), sizeof(int64_t));
    a->send_rows = host_take((size_t)l->ep_size, sizeof(size_t));
    a->send_at = host_take((size_t)l->ep_size, sizeof(size_t));
    a->recv_rows = host_take((size_t)l->ep_size, sizeof(size_t));
    a->recv_at = host_take((size_t)l->ep_size, sizeof(size_t));
    a->offsets = host_take((size_t)(l->E_local + 1), sizeof(int64_t));
}

void ct_moe_acts_free(ct_moe_acts *a) {
    void *dev[] = {a->logits, a->scores, a->weights, a->ids,     a->pos,    a->counts,
                   a->xs,     a->ys,     a->xr,      a->xe,      a->h13,    a->h,
                   a->xe16,   a->h13_16, a->h16,     a->ye,      a->aux_loss, a->daux};
    if (a->own_scratch) ct_mem_free(a->scratch);
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) ct_mem_free(dev[i]);
    free(a->host_counts), free(a->from), free(a->send_rows), free(a->send_at), free(a->recv_rows), free(a->recv_at);
    free(a->offsets);
    memset(a, 0, sizeof *a);
}

// ------------------------------------------------------------------ the exchange's shape

// From this rank's pairs per expert: rows to each rank, the counts each rank sends here per local
// expert, rows from each rank, and the local experts' row ranges once grouped by expert.
static void plan_exchange(const ct_moe_layer *l, ct_moe_acts *a) {
    const ct_moe_layer_spec *s = &l->s;
    int ep = l->ep_size;
    long El = l->E_local;
    s->k->copy_to_host(a->host_counts, a->counts, (size_t)s->E * sizeof(int64_t));
    size_t at = 0;
    for (int r = 0; r < ep; r++) {
        size_t n = 0;
        for (long le = 0; le < El; le++) n += (size_t)a->host_counts[r * El + le];
        a->send_rows[r] = n, a->send_at[r] = at, at += n;
    }
    if (ep > 1) s->ep.exchange_counts(s->ep.ctx, a->host_counts, a->from, El);
    else memcpy(a->from, a->host_counts, (size_t)El * sizeof(int64_t));
    at = 0;
    for (int r = 0; r < ep; r++) {
        size_t n = 0;
        for (long le = 0; le < El; le++) n += (size_t)a->from[r * El + le];
        a->recv_rows[r] = n, a->recv_at[r] = at, at += n;
    }
    a->rows = (long)at;
    a->offsets[0] = 0;
    for (long le = 0; le < El; le++) {
        int64_t n = 0;
        for (int r = 0; r < ep; r++) n += a->from[r * El + le];
        a->offsets[le + 1] = a->offsets[le] + n;
    }
}

// Rows received by source rank, each source's rows by local expert  <->  rows by local expert,
// each expert's rows by source rank (both stable): block copies, one per (source, expert), from
// by_source into by_expert when to_expert, else back.
static void regroup(const ct_moe_layer *l, const ct_moe_acts *a, float *by_expert, float *by_source, long C,
                    int to_expert) {
    long El = l->E_local;
    for (int r = 0; r < l->ep_size; r++) {
        size_t src = a->recv_at[r];  // rows, in the by-source layout
        for (long le = 0; le < El; le++) {
            size_t n = (size_t)a->from[r * El + le];
            size_t dst = (size_t)a->offsets[le];
            for (int q = 0; q < r; q++) dst += (size_t)a->from[q * El + le];
            size_t bytes = n * (size_t)C * sizeof(float);
            if (n && to_expert) l->s.k->copy(by_expert + dst * C, by_source + src * C, bytes);
            if (n && !to_expert) l->s.k->copy(by_source + src * C, by_expert + dst * C, bytes);
            src += n;
        }
    }
}

// Pairs in expert order (N·k rows) -> the expert side's rows by local expert, and back.
static const float *to_experts(const ct_moe_layer *l, ct_moe_acts *a, const float *pairs, float *xr, float *xe,
                               long C) {  // xe: where the grouped rows go under expert parallelism
    if (l->ep_size == 1) return pairs;
    l->s.ep.exchange_rows(l->s.ep.ctx, pairs, a->send_rows, a->send_at, xr, a->recv_rows, a->recv_at, C);
    regroup(l, a, xe, xr, C, 1);
    return xe;
}
static void from_experts(const ct_moe_layer *l, ct_moe_acts *a, float *ye, float *yr, float *pairs, long C) {
    if (l->ep_size == 1) {
        l->s.k->copy(pairs, ye, (size_t)(a->rows * C) * sizeof(float));
        return;
    }
    regroup(l, a, (float *)ye, yr, C, 0);  // reads ye only
    l->s.ep.exchange_rows(l->s.ep.ctx, yr, a->recv_rows, a->recv_at, pairs, a->send_rows, a->send_at, C);
}

// ------------------------------------------------------------------ forward / backward

// The layer's input in fp32: x itself, or under bf16 its exact widening into `work` (N, C).
static const float *input_f32(const ct_moe_layer *l, const void *x, float *work) {
    if (!l->s.bf16) return x;
    l->s.k->bf16_to_f32(work, x, l->s.N * l->s.C);
    return work;
}

// ------------------------------------------------------------------ the experts' linears

// The experts' input rows as the 8-bit linears take them: their dtype (the kept rows', bf16 under
// bf16), and the row `at` of inp (rows of IC). The fp32 weight they quantise from must be there.
static ct_dtype rows_dtype(const ct_moe_layer *l) { return l->s.bf16 ? CT_BF16 : CT_F32; }
static const void *rows_at(const ct_moe_layer *l, const void *inp, long at, long IC) {
    return (const char *)inp + (size_t)(at * IC) * ct_dtype_size(rows_dtype(l));
}
static void need_f32_weight(const float *w) {
    if (!w) ct_fatal("moe", "an 8-bit expert linear was given its weight in bf16 only");
}

// out (R, OC) = each local expert's rows of inp (R, IC; bf16 under bf16, else fp32) @ its weight
// (OC, IC)^T: grouped in fp32 or bf16, or under f8 one 8-bit linear per expert on its rows.
static void experts_linear_forward(const ct_moe_layer *l, const ct_moe_acts *a, bool f8, float *out,
                                   const void *inp, const float *w, const uint16_t *w16, long IC, long OC) {
    const ct_kernels *k = l->s.k;
    long El = l->E_local;
    if (!f8) {
        if (l->s.bf16) k->grouped_linear_forward_bf16(out, inp, w16, a->offsets, El, IC, OC);
        else k->grouped_linear_forward(out, inp, w, a->offsets, El, IC, OC);
        return;
    }
    need_f32_weight(w);
    for (long e = 0; e < El; e++) {
        long at = (long)a->offsets[e], n = (long)a->offsets[e + 1] - at;
        if (n == 0) continue;  // no rows: nothing to compute, and no scale to take
        k->linear_forward_f8(out + at * OC, rows_at(l, inp, at, IC), rows_dtype(l), w + e * OC * IC, n, IC, OC,
                             l->s.recipe, NULL, f8_scratch(l, a));
    }
}

// dinp (R, IC) = each expert's rows of dout (R, OC) @ its weight; dW (El, OC, IC) += per expert
// dout^T @ inp. Not f8: dout16 is dout narrowed to bf16 by the caller (bf16 runs; NULL in fp32).
// f8: dout in fp32, cast by the 8-bit kernels.
static void experts_linear_backward(const ct_moe_layer *l, const ct_moe_acts *a, bool f8, float *dinp, float *dW,
                                    const float *dout, const uint16_t *dout16, const void *inp, const float *w,
                                    const uint16_t *w16, long IC, long OC) {
    const ct_kernels *k = l->s.k;
    long El = l->E_local;
    if (!f8) {
        if (l->s.bf16) k->grouped_linear_backward_bf16(dinp, dW, dout16, inp, w16, a->offsets, El, IC, OC);
        else k->grouped_linear_backward(dinp, dW, dout, inp, w, a->offsets, El, IC, OC);
        return;
    }
    need_f32_weight(w);
    for (long e = 0; e < El; e++) {
        long at = (long)a->offsets[e], n = (long)a->offsets[e + 1] - at;
        if (n == 0) continue;  // no rows: no input gradient rows, nothing added to its weight's
        k->linear_backward_f8(dinp + at * IC, dW + e * OC * IC, dout + at * OC, rows_at(l, inp, at, IC),
                              rows_dtype(l), w + e * OC * IC, n, IC, OC, l->s.recipe, NULL, f8_scratch(l, a));
    }
}

// ------------------------------------------------------------------ forward / backward (experts)

// The experts under bf16, from their rows xe (R, C, fp32 holding bf16 values) to ye (R, C):
// xe kept in bf16 (exactly), h13 = xe @ w13^T kept in bf16 with the forward going on from the
// rounded values (what the backward will see), h = swiglu(h13) kept in bf16, ye = h @ w2^T.
static void experts_forward_bf16(const ct_moe_layer *l, const ct_moe_params *p, ct_moe_acts *a, const float *xe) {
    const ct_kernels *k = l->s.k;
    long R = a->rows, C = l->s.C, F = l->s.F;
    float *h13 = work_area(l, a, 1), *h = work_area(l, a, 0);  // (R, 2F), (R, F); xe read before h13 is written
    k->f32_to_bf16(a->xe16, xe, R * C);
    experts_linear_forward(l, a, p->f8_w13, h13, a->xe16, p->w13, p->w13_16, C, 2 * F);
    if (k->swiglu_forward_bf16) {
        k->swiglu_forward_bf16(a->h16, a->h13_16, h13, R, F);
    } else {  // (a backend without it: the same bits through fp32)
        k->f32_to_bf16(a->h13_16, h13, R * 2 * F);
        k->bf16_to_f32(h13, a->h13_16, R * 2 * F);
        k->swiglu_forward(h, h13, R, F);
        k->f32_to_bf16(a->h16, h, R * F);
    }
    experts_linear_forward(l, a, p->f8_w2, a->ye, a->h16, p->w2, p->w2_16, F, C);
}

void ct_moe_forward(const ct_moe_layer *l, const ct_moe_params *p, ct_moe_acts *a, const void *x_in, float *y) {
    const ct_moe_layer_spec *s = &l->s;
    const ct_kernels *k = s->k;
    long N = s->N, E = s->E, K = s->topk, C = s->C, F = s->F;
    const float *x = input_f32(l, x_in, s->bf16 ? work_area(l, a, 2) : NULL);  // (N, C)
    k->linear_forward(a->logits, x, p->router, N, C, E);
    k->moe_router_forward(a->ids, a->weights, a->scores, a->logits, p->bias, N, E, K, s->sigmoid, s->renorm);
    if (a->daux)
        k->moe_aux_loss(a->aux_loss, a->daux, a->scores, a->ids, N, E, K, s->aux_group, s->aux_coef * l->aux_weight,
                        s->sigmoid);
    k->moe_dispatch_plan(a->counts, a->pos, a->ids, N, E, K);
    k->moe_permute(a->xs, x, a->pos, N, K, C);
    plan_exchange(l, a);
    if (s->bf16) {
        experts_forward_bf16(l, p, a, to_experts(l, a, a->xs, a->xr, work_area(l, a, 1), C));
    } else {
        const float *xe = to_experts(l, a, a->xs, a->xr, a->xe, C);
        if (xe != a->xe) k->copy(a->xe, xe, (size_t)(a->rows * C) * sizeof(float));  // kept for the backward
        experts_linear_forward(l, a, p->f8_w13, a->h13, a->xe, p->w13, NULL, C, 2 * F);
        k->swiglu_forward(a->h, a->h13, a->rows, F);
        experts_linear_forward(l, a, p->f8_w2, a->ye, a->h, p->w2, NULL, F, C);
    }
    from_experts(l, a, a->ye, a->xr, a->ys, C);
    k->moe_combine(y, a->ys, a->weights, a->pos, N, K, C);
}

// The experts' backward under bf16: dxe (R, C) from dye (R, C; work area 0 or the pair rows), the weight
// gradients (fp32) added into g. The output gradients go to the matmuls rounded to bf16, as the
// dense layers' do (model/linear.c). Work area 1 holds dweights and dh from its head (N·k floats).
static void experts_backward_bf16(const ct_moe_layer *l, const ct_moe_params *p, ct_moe_acts *a, const float *dye,
                                  float *dxe, ct_moe_grads *g) {
    const ct_kernels *k = l->s.k;
    long R = a->rows, C = l->s.C, F = l->s.F;
    float *area0 = work_area(l, a, 0), *area2 = work_area(l, a, 2);
    float *dh = work_area(l, a, 1) + l->s.N * l->s.topk;  // (R, F) after dweights
    uint16_t *d16 = NULL;                                  // (R, C) dye in bf16 (not under f8)
    if (!p->f8_w2) k->f32_to_bf16(d16 = (uint16_t *)area2, dye, R * C);
    experts_linear_backward(l, a, p->f8_w2, dh, g->w2, dye, d16, a->h16, p->w2, p->w2_16, F, C);
    float *h13 = area0, *dh13 = area2;  // (R, 2F) each: dye and its bf16 copy are no longer needed
    if (k->swiglu_backward_bf16) {
        k->swiglu_backward_bf16(dh13, dh, a->h13_16, R, F);
    } else {
        k->bf16_to_f32(h13, a->h13_16, R * 2 * F);
        k->swiglu_backward(dh13, dh, h13, R, F);
    }
    uint16_t *dh13_16 = NULL;  // (R, 2F) in area0: h13 is no longer needed (not under f8)
    if (!p->f8_w13) k->f32_to_bf16(dh13_16 = (uint16_t *)area0, dh13, R * 2 * F);
    experts_linear_backward(l, a, p->f8_w13, dxe, g->w13, dh13, dh13_16, a->xe16, p->w13, p->w13_16, C, 2 * F);
}

void ct_moe_backward(const ct_moe_layer *l, const ct_moe_params *p, ct_moe_acts *a, const void *x_in, const float *dy,
                     float *dx, ct_moe_grads *g) {
    const ct_moe_layer_spec *s = &l->s;
    const ct_kernels *k = s->k;
    long N = s->N, E = s->E, K = s->topk, C = s->C, F = s->F, R = a->rows;
    float *w0 = work_area(l, a, 0), *w1 = work_area(l, a, 1);
    // combine: dys (pairs in expert order, in the forward's pair rows, no longer needed) and the
    // router weights' gradient (w1's head)
    float *dys = a->xs, *dweights = w1;
    k->moe_combine_backward(dys, dweights, dy, a->ys, a->weights, a->pos, N, K, C);
    // to the experts: dye (R, C) in w0
    const float *dye = to_experts(l, a, dys, a->xr, w0, C);
    float *dxe = a->ye;  // the forward's output rows are no longer needed
    if (s->bf16) {
        experts_backward_bf16(l, p, a, dye, dxe, g);
    } else {
        // w2: dh (R, F) into w1 after dweights (N·k floats)
        float *dh = w1 + N * K;
        experts_linear_backward(l, a, p->f8_w2, dh, g->w2, dye, NULL, a->h, p->w2, NULL, F, C);
        float *dh13 = w0;  // dye is no longer needed
        k->swiglu_backward(dh13, dh, a->h13, R, F);
        experts_linear_backward(l, a, p->f8_w13, dxe, g->w13, dh13, NULL, a->xe, p->w13, NULL, C, 2 * F);
    }
    // back to the pairs (dxs in a->xs, where dys was), then the tokens
    from_experts(l, a, dxe, a->xr, a->xs, C);
    k->moe_permute_backward(dx, a->xs, a->pos, N, K, C);
    // router: dlogits (N, E) in a->logits' place, then dx += dlogits @ router, drouter += ...
    k->moe_router_backward(a->logits, dweights, a->daux, a->scores, a->ids, N, E, K, s->sigmoid, s->renorm);
    const float *x = input_f32(l, x_in, s->bf16 ? work_area(l, a, 2) : NULL);  // (N, C)
    float *dx_router = w0;
    k->linear_backward(dx_router, g->router, a->logits, x, p->router, N, C, E);
    k->add_inplace(dx, dx_router, N * C);
}
