#include "model/generate.h"

#include <stdlib.h>
#include <string.h>

#include "core/memory.h"
#include "model/block.h"

// ------------------------------------------------------------------ KV-cache attention

// The attention operation of the generator's table (ctx = the generator). The block hands it
// this chunk's n rows: q, k, v inside the qkv rows (k already rotated at its absolute position).
// k and v are appended to the layer's cache at len..len+n-1, then the queries (positions
// len..len+n-1) attend to the cached keys and values 0..len+n-1.
static void kv_attention_forward(void *ctx, const ct_attention_args *a) {
    ct_generator *g = ctx;
    const ct_kernels *k = g->k;
    long KVD = g->kv_dim, p0 = g->len, n = a->Tq;
    if (a->B != 1 || a->Tk != n || p0 + n > g->max_T)
        ct_fatal("generate", "attention call of %ld x %ld rows does not fit the cache (%ld of %ld used)", a->B, n,
                 p0, g->max_T);
    float *kc = g->k_cache + (long)a->layer * g->max_T * KVD, *vc = g->v_cache + (long)a->layer * g->max_T * KVD;
    size_t row = (size_t)KVD * sizeof(float);
    for (long i = 0; i < n; i++) {  // cache rows are KVD wide, qkv rows ld wide
        k->copy(kc + (p0 + i) * KVD, a->k + i * a->ldk, row);
        k->copy(vc + (p0 + i) * KVD, a->v + i * a->ldv, row);
    }
    k->attention_forward(a->out, a->lse, a->q, a->ldq, kc, KVD, vc, KVD, a->q_pos, g->pos, NULL, NULL, 1, n, p0 + n, a->NH,
                         a->NKV, a->HS, a->scratch);
}

static void kv_attention_backward(void *ctx, const ct_attention_args *a, const float *dout, float *dq, float *dk,
                                  float *dv) {
    (void)ctx, (void)a, (void)dout, (void)dq, (void)dk, (void)dv;
    ct_fatal("generate", "generation has no backward");
}

static long kv_attention_scratch(void *ctx, long Tq, long Tk, long HS) {
    const ct_generator *g = ctx;
    return g->k->attention_scratch_floats(Tq, Tk, HS);
}

// ------------------------------------------------------------------ buffers

void ct_gen_init(ct_generator *g, const ct_model_config *m, const ct_model_weights *w, long max_T, long max_rows) {
    const ct_kernels *k = ct_kernels_get("cpu");
    if (!k) ct_fatal("generate", "no cpu kernel backend in this build");
    ct_gen_init_on(g, k, m, w, max_T, max_rows);
}

void ct_gen_init_on(ct_generator *g, const ct_kernels *k, const ct_model_config *m, const ct_model_weights *w,
                    long max_T, long max_rows) {
    memset(g, 0, sizeof *g);
    g->k = k;
    g->cfg = *m;
    g->w = w;
    g->ops = ct_stage_ops_local(k);
    g->ops.attention = (ct_attention_ops){.ctx = g, .forward = kv_attention_forward,
                                          .backward = kv_attention_backward, .scratch_floats = kv_attention_scratch};
    if (max_T < 1) max_T = 1;
    g->max_T = max_T;
    g->max_rows = max_rows > 0 ? (max_rows < max_T ? max_rows : max_T) : (max_T < 256 ? max_T : 256);
    long P = g->max_rows, C = m->dim, HS = m->head_dim, NH = m->n_heads, NKV = m->n_kv_heads;
    long F = m->ffn_hidden, L = m->n_layers, V = m->vocab_size;
    g->kv_dim = NKV * HS;
    g->qkv_dim = (NH + 2 * NKV) * HS;
    long scratch = g->ops.attention.scratch_floats(g->ops.attention.ctx, P, max_T, HS);

#define R16(x) (((x) + 15) & ~15L)
    long total = 2 * R16(L * max_T * g->kv_dim)                                        // k, v cache
                 + R16(P * C)                                                          // x
                 + 3 * R16(P * C) + 2 * R16(P) + R16(P * g->qkv_dim) + R16(P * NH * HS)  // norm1, x_mid, norm2,
                 + R16(NH * P) + R16(P * 2 * F) + R16(P * F)                           //   rstd1/2, qkv, att, lse, h13, h
                 + R16(V) + 2 * R16(max_T * HS / 2) + R16(scratch);                    // logits, rope, scratch
    g->arena = ct_mem_alloc_on(ct_kernels_device(k), CT_MEM_ACTIVATIONS, (size_t)total * sizeof(float));
    float *p = g->arena;
#define TAKE(ptr, n)  \
    do {              \
        ptr = p;      \
        p += R16(n);  \
    } while (0)
    ct_block_acts *s = &g->acts;
    TAKE(g->k_cache, L * max_T * g->kv_dim);
    TAKE(g->v_cache, L * max_T * g->kv_dim);
    TAKE(g->x, P * C);
    TAKE(s->norm1, P * C);
    TAKE(s->rstd1, P);
    TAKE(s->qkv, P * g->qkv_dim);
    TAKE(s->att, P * NH * HS);
    TAKE(s->lse, NH * P);
    TAKE(s->x_mid, P * C);
    TAKE(s->norm2, P * C);
    TAKE(s->rstd2, P);
    TAKE(s->h13, P * 2 * F);
    TAKE(s->h, P * F);
    TAKE(g->logits_dev, V);
    TAKE(g->rope_cos, max_T * HS / 2);
    TAKE(g->rope_sin, max_T * HS / 2);
    TAKE(g->scratch, scratch);
#undef TAKE
#undef R16
    if (p - g->arena > total) ct_fatal("generate", "arena overflow");
    s->x = g->x;  // each block reads and overwrites the residual stream in place

    g->ints = ct_mem_alloc_on(ct_kernels_device(k), CT_MEM_ACTIVATIONS, (size_t)(max_T + P) * sizeof(int32_t));
    g->pos = g->ints;
    g->tokens = g->ints + max_T;
    int32_t *pos = ct_xmalloc((size_t)max_T * sizeof(int32_t));
    for (long i = 0; i < max_T; i++) pos[i] = (int32_t)i;
    k->copy_from_host(g->pos, pos, (size_t)max_T * sizeof(int32_t));
    free(pos);
    g->logits = ct_xmalloc((size_t)V * sizeof(float));
    // The tables training builds; an angle depends only on the position, so the longer table
    // repeats training's values.
    ct_model_rope_tables(k, m, g->rope_cos, g->rope_sin, max_T);
}

void ct_gen_free(ct_generator *g) {
    ct_mem_free(g->arena);
    ct_mem_free(g->ints);
    free(g->logits);
    memset(g, 0, sizeof *g);
}

void ct_gen_reset(ct_generator *g) { g->len = 0; }

// ------------------------------------------------------------------ forward

// n rows (n <= max_rows) at positions len..len+n-1 through every block; x holds the chunk's
// embeddings on entry and the final residual stream on exit.
static void chunk_forward(ct_generator *g, long n) {
    const ct_model_config *m = &g->cfg;
    ct_linear_ctx lin = {.k = g->k, .prec = ct_precision_fp32()};  // generation computes in fp32
    ct_block_ctx c = {
        .k = g->k, .ops = &g->ops, .lin = &lin, .cfg = m, .B = 1, .T = n, .N = n, .N_local = n, .qkv_dim = g->qkv_dim,
        .pos = g->pos + g->len,  // absolute positions: RoPE rotates q and k where they sit in the sequence
        .rope_cos = g->rope_cos, .rope_sin = g->rope_sin, .scratch = g->scratch,
    };
    for (int l = 0; l < m->n_layers; l++) ct_block_forward(&c, l, &g->acts, &g->w->blocks[l], g->x);
    g->len += n;
}

const float *ct_gen_feed(ct_generator *g, const int32_t *tokens, long n) {
    const ct_kernels *k = g->k;
    const ct_model_config *m = &g->cfg;
    long C = m->dim, V = m->vocab_size;
    if (n < 1) return ct_set_error("generate: nothing to feed"), NULL;
    if (g->len + n > g->max_T)
        return ct_set_error("generate: %ld tokens do not fit the cache (%ld of %ld used)", n, g->len, g->max_T), NULL;
    for (long i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return ct_set_error("generate: token id %d is outside the model's vocabulary (%ld)", tokens[i], V), NULL;
    long last = 0;
    for (long done = 0; done < n;) {
        long rows = n - done < g->max_rows ? n - done : g->max_rows;
        k->copy_from_host(g->tokens, tokens + done, (size_t)rows * sizeof(int32_t));
        k->embedding_forward(g->x, g->tokens, g->w->tok_embeddings, rows, C, 0, V);
        chunk_forward(g, rows);
        done += rows;
        last = rows - 1;
    }
    // Logits of the last row only: (1, C) -> (1, V), through the first row of the norm buffers.
    float *xn = g->acts.norm1;
    k->rmsnorm_forward(xn, g->acts.rstd1, g->x + last * C, g->w->norm, 1, C, (float)m->norm_eps);
    k->linear_forward(g->logits_dev, xn, g->w->output, 1, C, V);
    k->copy_to_host(g->logits, g->logits_dev, (size_t)V * sizeof(float));
    return g->logits;
}

long ct_gen_run(ct_generator *g, ct_sampler *s, const int32_t *prompt, long n_prompt, long max_new, int32_t stop_id,
                int32_t *out, ct_gen_token_fn fn, void *ctx) {
    ct_gen_reset(g);
    const float *logits = ct_gen_feed(g, prompt, n_prompt);
    if (!logits) return -1;
    long count = 0;
    while (count < max_new) {
        int32_t id = ct_sampler_sample(s, logits);
        out[count++] = id;
        if (fn && fn(ctx, id)) break;
        if (id == stop_id || count == max_new || g->len == g->max_T) break;
        logits = ct_gen_feed(g, &id, 1);
        if (!logits) return -1;
    }
    return count;
}
