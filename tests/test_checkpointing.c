// Activation checkpointing's arithmetic (model/checkpointing.h) at Llama 3 8B's shape (dim 4096,
// 32/8 heads of 128, FFN 14336), against byte counts worked out here from the policies'
// definitions:
//   op (bf16)           x fp32 16384 + q|v 2 x 5120 + att 2 x 4096 + w1's output 2 x 14336
//                       + log-sum-exp 4 x 32                                 = 63,616 bytes
//   elementwise (bf16)  x, x_mid fp32 2 x 16384 + rstd 2 x 4 + qkv 2 x 6144 + att 2 x 4096
//                       + h13 2 x 28672 + lse 128                            = 110,728
//   none (bf16)         elementwise + norm1, norm2 2 x 2 x 4096 + h 2 x 14336 = 155,784
//   full                x fp32                                                = 16,384
// and tp 2 with sequence parallel (residual rows halved; heads and FFN halved):
//   op                  8192 + 2 x (2048 + 512 + 2048 + 7168) + 4 x 16       = 31,808
// The per-op recompute is wk, wo and w3: 2 x 4096 x (1024 + 4096 + 14336)    = 159,383,552 FLOPs.
#include "model/checkpointing.h"
#include <string.h>

#include "test.h"

static ct_model_config shape_8b(int tp) {
    ct_model_config m = {0};
    m.dim = 4096;
    m.n_layers = 32;
    m.n_heads = 32 / tp;
    m.n_kv_heads = 8 / tp;
    m.head_dim = 128;
    m.ffn_hidden = 14336 / tp;
    m.vocab_size = 128256;
    return m;
}

static void kept_bytes_8b(void) {
    ct_model_config m = shape_8b(1);
    ct_ac_shape s = {.cfg = &m, .compute_bytes = 2, .seq_parallel_tp = 1};
    CHECK(ct_ac_kept_bytes_per_token(&s, CT_AC_OPS) == 63616, "op %.0f", ct_ac_kept_bytes_per_token(&s, CT_AC_OPS));
    CHECK(ct_ac_kept_bytes_per_token(&s, CT_AC_ELEMENTWISE) == 110728, "elementwise %.0f",
          ct_ac_kept_bytes_per_token(&s, CT_AC_ELEMENTWISE));
    CHECK(ct_ac_kept_bytes_per_token(&s, CT_AC_NONE) == 155784, "none %.0f", ct_ac_kept_bytes_per_token(&s, CT_AC_NONE));
    CHECK(ct_ac_kept_bytes_per_token(&s, CT_AC_FULL) == 16384, "full %.0f", ct_ac_kept_bytes_per_token(&s, CT_AC_FULL));
    ct_model_config half = shape_8b(2);
    ct_ac_shape sp = {.cfg = &half, .compute_bytes = 2, .seq_parallel_tp = 2};
    CHECK(ct_ac_kept_bytes_per_token(&sp, CT_AC_OPS) == 31808, "op, tp 2 + sp %.0f",
          ct_ac_kept_bytes_per_token(&sp, CT_AC_OPS));
}

static void recompute_flops_8b(void) {
    ct_model_config m = shape_8b(1);
    ct_ac_shape s = {.cfg = &m, .compute_bytes = 2, .seq_parallel_tp = 1};
    CHECK(ct_ac_recompute_flops_per_token(&s, CT_AC_OPS, 8192) == 159383552.0, "op %.0f",
          ct_ac_recompute_flops_per_token(&s, CT_AC_OPS, 8192));
    CHECK(ct_ac_recompute_flops_per_token(&s, CT_AC_ELEMENTWISE, 8192) == 0, "elementwise recomputes a matmul");
    CHECK(ct_ac_recompute_flops_per_token(&s, CT_AC_NONE, 8192) == 0, "none recomputes");
    // full: every matmul (2 x 4096 x (6144 + 4096 + 28672 + 14336)) and attention's 4 x 4096 x 8192
    double full = 2.0 * 4096 * (6144 + 4096 + 28672 + 14336) + 4.0 * 4096 * 8192;
    CHECK(ct_ac_recompute_flops_per_token(&s, CT_AC_FULL, 8192) == full, "full %.0f vs %.0f",
          ct_ac_recompute_flops_per_token(&s, CT_AC_FULL, 8192), full);
}

static void layer_kinds(void) {
    ct_ac_policy every2 = {CT_AC_FULL, 2}, op = {CT_AC_OPS, 1};
    CHECK(ct_ac_layer_kind(&every2, 0) == CT_AC_NONE && ct_ac_layer_kind(&every2, 1) == CT_AC_FULL &&
              ct_ac_layer_kind(&every2, 3) == CT_AC_FULL, "every 2nd block: blocks 1, 3, ... (TorchTitan's count)");
    CHECK(ct_ac_layer_kind(&op, 5) == CT_AC_OPS, "op applies to every block");
    CHECK(!strcmp(ct_ac_kind_name(CT_AC_OPS), "op") && !strcmp(ct_ac_kind_name(CT_AC_ELEMENTWISE), "elementwise"),
          "names");
}

int main(void) {
    CT_RUN(kept_bytes_8b);
    CT_RUN(recompute_flops_8b);
    CT_RUN(layer_kinds);
    CT_TEST_EXIT();
}
