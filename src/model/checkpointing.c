#include "model/checkpointing.h"

ct_ac_kind ct_ac_layer_kind(const ct_ac_policy *p, int layer) {
    if (p->kind == CT_AC_FULL && p->every > 1) return (layer + 1) % p->every == 0 ? CT_AC_FULL : CT_AC_NONE;
    return p->kind;
}

const char *ct_ac_kind_name(ct_ac_kind k) {
    static const char *const names[CT_AC_KINDS] = {"none", "elementwise", "op", "full"};
    return (unsigned)k < CT_AC_KINDS ? names[k] : "?";
}

double ct_ac_kept_bytes_per_token(const ct_ac_shape *s, ct_ac_kind kind) {
    const ct_model_config *m = s->cfg;
    double c = s->compute_bytes, C = m->dim, Q = (double)m->n_heads * m->head_dim;
    double KV = (double)m->n_kv_heads * m->head_dim, F = m->ffn_hidden;
    double r = s->seq_parallel_tp > 1 ? 1.0 / s->seq_parallel_tp : 1.0;  // residual rows per token
    double x = 4 * C * r, rstd = 4 * r, lse = 4.0 * m->n_heads;
    switch (kind) {
    case CT_AC_NONE: return 2 * x + 2 * rstd + c * (2 * C + Q + 2 * KV + Q + 3 * F) + lse;
    case CT_AC_ELEMENTWISE: return 2 * x + 2 * rstd + c * (Q + 2 * KV + Q + 2 * F) + lse;
    case CT_AC_OPS: return x + c * (Q + KV + Q + F) + lse;
    case CT_AC_FULL: return x;
    default: return 0;
    }
}

double ct_ac_recompute_flops_per_token(const ct_ac_shape *s, ct_ac_kind kind, long seq_len) {
    const ct_model_config *m = s->cfg;
    double C = m->dim, Q = (double)m->n_heads * m->head_dim, KV = (double)m->n_kv_heads * m->head_dim;
    double F = m->ffn_hidden;
    switch (kind) {
    case CT_AC_OPS: return 2 * C * KV + 2 * Q * C + 2 * C * F;  // wk, wo, w3
    case CT_AC_FULL:  // every matmul, and attention's two products (q·k and p·v) over the sequence
        return 2 * C * (Q + 2 * KV) + 2 * Q * C + 2 * C * 2 * F + 2 * F * C + 4.0 * Q * (double)seq_len;
    default: return 0;
    }
}
