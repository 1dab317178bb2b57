#include "model/generate.h"

#include <stdlib.h>
#include <string.h>

#include "core/memory.h"
#include "kernels/kernels.h"

void ct_gen_init(ct_generator *g, const ct_llama_config *m, const ct_llama_weights *w, long max_T, long max_rows) {
    memset(g, 0, sizeof *g);
    g->cfg = *m;
    g->w = w;
    if (max_T < 1) max_T = 1;
    g->max_T = max_T;
    g->max_rows = max_rows > 0 ? (max_rows < max_T ? max_rows : max_T) : (max_T < 256 ? max_T : 256);
    long P = g->max_rows, C = m->dim, HS = m->head_dim, NH = m->n_heads, NKV = m->n_kv_heads;
    long F = m->ffn_hidden, L = m->n_layers, V = m->vocab_size;
    g->kv_dim = NKV * HS;
    g->qkv_dim = (NH + 2 * NKV) * HS;
    long scratch = ct_attention_scratch_floats(P, max_T, HS);

#define R16(x) (((x) + 15) & ~15L)
    long total = 2 * R16(L * max_T * g->kv_dim) + 2 * R16(P * C) + R16(P) + R16(P * g->qkv_dim) + R16(P * NH * HS) +
                 R16(NH * P) + R16(P * 2 * F) + R16(P * F) + R16(V) + 2 * R16(max_T * HS / 2) + R16(scratch);
    g->arena = ct_mem_alloc(CT_MEM_ACTIVATIONS, (size_t)total * sizeof(float));
    float *p = g->arena;
#define TAKE(ptr, n)  \
    do {              \
        ptr = p;      \
        p += R16(n);  \
    } while (0)
    TAKE(g->k_cache, L * max_T * g->kv_dim);
    TAKE(g->v_cache, L * max_T * g->kv_dim);
    TAKE(g->x, P * C);
    TAKE(g->xn, P * C);
    TAKE(g->rstd, P);
    TAKE(g->qkv, P * g->qkv_dim);
    TAKE(g->att, P * NH * HS);
    TAKE(g->lse, NH * P);
    TAKE(g->h13, P * 2 * F);
    TAKE(g->h, P * F);
    TAKE(g->logits, V);
    TAKE(g->rope_cos, max_T * HS / 2);
    TAKE(g->rope_sin, max_T * HS / 2);
    TAKE(g->scratch, scratch);
#undef TAKE
#undef R16
    if (p - g->arena > total) ct_fatal("generate", "arena overflow");
    g->pos = ct_xmalloc((size_t)max_T * sizeof(int32_t));
    for (long i = 0; i < max_T; i++) g->pos[i] = (int32_t)i;
    // The same tables training builds (Llama 3.1 scaling constants as in ct_llama_acts_init);
    // an angle depends only on the position, so a longer table repeats training's values.
    ct_rope_tables(g->rope_cos, g->rope_sin, max_T, HS, m->rope_theta, m->rope_scaling ? 8.0 : 0.0, 1.0, 4.0, 8192);
}

void ct_gen_free(ct_generator *g) {
    ct_mem_free(g->arena);
    free(g->pos);
    memset(g, 0, sizeof *g);
}

void ct_gen_reset(ct_generator *g) { g->len = 0; }

// n rows (n <= max_rows) at positions p0 = len .. len+n-1 through every block; x holds the
// chunk's embeddings on entry and the final residual stream on exit.
static void chunk_forward(ct_generator *g, long n) {
    const ct_llama_config *m = &g->cfg;
    long C = m->dim, HS = m->head_dim, NH = m->n_heads, NKV = m->n_kv_heads, F = m->ffn_hidden;
    long QKV = g->qkv_dim, KVD = g->kv_dim, p0 = g->len;
    float eps = (float)m->norm_eps;
    const int32_t *qpos = g->pos + p0;
    for (int l = 0; l < m->n_layers; l++) {
        const ct_block_weights *w = &g->w->blocks[l];
        float *kc = g->k_cache + (long)l * g->max_T * KVD, *vc = g->v_cache + (long)l * g->max_T * KVD;
        float *q = g->qkv, *k = g->qkv + NH * HS, *v = g->qkv + (NH + NKV) * HS;

        ct_rmsnorm_forward(g->xn, g->rstd, g->x, w->attn_norm, n, C, eps);
        ct_linear_forward(g->qkv, g->xn, w->wqkv, n, C, QKV);  // (n, QKV)
        ct_rope_forward(q, g->rope_cos, g->rope_sin, qpos, 1, n, NH, HS, QKV);
        ct_rope_forward(k, g->rope_cos, g->rope_sin, qpos, 1, n, NKV, HS, QKV);
        for (long i = 0; i < n; i++) {  // append this chunk's k, v rows to the cache
            memcpy(kc + (p0 + i) * KVD, k + i * QKV, (size_t)KVD * sizeof(float));
            memcpy(vc + (p0 + i) * KVD, v + i * QKV, (size_t)KVD * sizeof(float));
        }
        // Queries at p0..p0+n-1 against keys 0..p0+n-1: causal by position.
        ct_attention_forward(g->att, g->lse, q, QKV, kc, KVD, vc, KVD, qpos, g->pos, 1, n, p0 + n, NH, NKV, HS,
                             g->scratch);
        ct_linear_forward(g->xn, g->att, w->wo, n, NH * HS, C);
        ct_add_inplace(g->x, g->xn, n * C);

        ct_rmsnorm_forward(g->xn, g->rstd, g->x, w->ffn_norm, n, C, eps);
        ct_linear_forward(g->h13, g->xn, w->w13, n, C, 2 * F);  // (n, 2F)
        ct_swiglu_forward(g->h, g->h13, n, F);                  // (n, F)
        ct_linear_forward(g->xn, g->h, w->w2, n, F, C);         // (n, C)
        ct_add_inplace(g->x, g->xn, n * C);
    }
    g->len += n;
}

const float *ct_gen_feed(ct_generator *g, const int32_t *tokens, long n) {
    const ct_llama_config *m = &g->cfg;
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
        ct_embedding_forward(g->x, tokens + done, g->w->tok_embeddings, rows, C, 0, V);
        chunk_forward(g, rows);
        done += rows;
        last = rows - 1;
    }
    // Logits of the last row only: (1, C) -> (1, V).
    ct_rmsnorm_forward(g->xn, g->rstd, g->x + last * C, g->w->norm, 1, C, (float)m->norm_eps);
    ct_linear_forward(g->logits, g->xn, g->w->output, 1, C, V);
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
