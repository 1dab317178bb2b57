// Autoregressive decoding with a KV cache. The prompt is run through the model once (prefill,
// in chunks of up to `max_rows` rows); afterwards each new token is one row that attends to the
// cached keys and values of every earlier position, so a token costs O(params + T·C) instead of
// a forward over the whole prefix. Each layer is the training block itself (ct_block_forward,
// model/block.h) run through the kernel backend, with one operation swapped in its operations
// table: attention appends the chunk's keys and values (RoPE'd by the block at their absolute
// positions) to the layer's cache and lets the chunk's queries attend to everything cached
// (q_pos / k_pos make it causal by position). Only the last row's logits are computed.
#ifndef CT_GENERATE_H
#define CT_GENERATE_H
#include <stdint.h>

#include "core/error.h"
#include "kernels/backend.h"
#include "model/weights.h"
#include "model/sampler.h"
#include "model/stage_ops.h"

// Device buffers (on k's device) unless marked host.
typedef struct {
    ct_model_config cfg;
    const ct_model_weights *w;
    const ct_kernels *k;         // the kernel backend ("cpu")
    ct_stage_ops ops;            // ct_stage_ops_local(k) with the KV-cache attention
    long max_T;                  // cache capacity in tokens
    long max_rows;               // rows one forward chunk holds (prefill is cut into chunks)
    long len;                    // tokens already in the cache (= the next position)
    long qkv_dim, kv_dim;        // (NH + 2·NKV)·HS, NKV·HS
    float *k_cache, *v_cache;    // (L, max_T, NKV, HS) each, RoPE already applied to k
    float *x;                    // (P, C) residual stream of the chunk (P = max_rows): every
                                 // block's input and output (ct_block_forward may write in place)
    ct_block_acts acts;          // one block's buffers for P rows (acts.x = x)
    float *logits_dev;           // (V) of the last row fed
    float *logits;               // host (V): logits_dev copied out, what ct_gen_feed returns
    float *rope_cos, *rope_sin;  // (max_T, HS/2)
    int32_t *pos;                // (max_T) 0, 1, ..., max_T - 1
    int32_t *tokens;             // (P) the chunk's token ids
    float *scratch;              // attention tiles
    float *arena;                // the one allocation the float buffers live in
    int32_t *ints;               // the one allocation pos and tokens live in
} ct_generator;

// Plans buffers for up to max_T tokens (prompt + continuation). max_rows <= 0: min(max_T, 256).
// Runs on backend k, with w on its device (ct_gen_init: the "cpu" backend, fatal when the build
// has none). g must not move afterwards: its attention operation points at it.
void ct_gen_init_on(ct_generator *g, const ct_kernels *k, const ct_model_config *m, const ct_model_weights *w,
                    long max_T, long max_rows);
void ct_gen_init(ct_generator *g, const ct_model_config *m, const ct_model_weights *w, long max_T, long max_rows);
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
