// Autoregressive decoding with a KV cache. The prompt is run through the model once (prefill,
// in chunks of up to `max_rows` rows); afterwards each new token is one row that attends to the
// cached keys and values of every earlier position, so a token costs O(params + T·C) instead of
// a forward over the whole prefix. The same CPU kernels as training do the math; positions are
// explicit (RoPE at pos, attention with q_pos / k_pos against the cached prefix), and only the
// last row's logits are computed.
#ifndef CT_GENERATE_H
#define CT_GENERATE_H
#include <stdint.h>

#include "core/error.h"
#include "model/llama.h"
#include "model/sampler.h"

typedef struct {
    ct_llama_config cfg;
    const ct_llama_weights *w;
    long max_T;                  // cache capacity in tokens
    long max_rows;               // rows one forward chunk holds (prefill is cut into chunks)
    long len;                    // tokens already in the cache (= the next position)
    long qkv_dim, kv_dim;        // (NH + 2·NKV)·HS, NKV·HS
    float *k_cache, *v_cache;    // (L, max_T, NKV, HS) each, RoPE already applied to k
    float *x;                    // (P, C) residual stream of the chunk (P = max_rows)
    float *xn;                   // (P, C) normed input / matmul output before the residual add
    float *rstd;                 // (P)
    float *qkv;                  // (P, QKV)
    float *att;                  // (P, NH·HS)
    float *lse;                  // (NH, P)
    float *h13;                  // (P, 2F)
    float *h;                    // (P, F)
    float *logits;               // (V) of the last row fed
    float *rope_cos, *rope_sin;  // (max_T, HS/2)
    int32_t *pos;                // (max_T) 0, 1, ..., max_T - 1
    float *scratch;              // attention tiles
    float *arena;                // the one allocation the float buffers live in
} ct_generator;

// Plans buffers for up to max_T tokens (prompt + continuation). max_rows <= 0: min(max_T, 256).
void ct_gen_init(ct_generator *g, const ct_llama_config *m, const ct_llama_weights *w, long max_T, long max_rows);
void ct_gen_free(ct_generator *g);
void ct_gen_reset(ct_generator *g);  // empties the cache

// Appends n tokens at positions len..len+n-1 and returns the logits (V floats, valid until the
// next call) that predict the token after the last. NULL + error when the cache would
// overflow, n < 1, or a token id is outside the vocabulary.
const float *ct_gen_feed(ct_generator *g, const int32_t *tokens, long n);

// Called with each new token; a non-zero return stops generation.
typedef int (*ct_gen_token_fn)(void *ctx, int32_t id);

// Resets, feeds the prompt (n_prompt >= 1), then samples up to max_new tokens into out, each
// fed back in. Stops after emitting stop_id (kept in out; -1 = never) or when the cache is full.
// Returns the number of tokens written to out, or -1 with the error set.
long ct_gen_run(ct_generator *g, ct_sampler *s, const int32_t *prompt, long n_prompt, long max_new, int32_t stop_id,
                int32_t *out, ct_gen_token_fn fn, void *ctx);
#endif
