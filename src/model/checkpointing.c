#include "model/checkpointing.h"

#include "model/block.h"

ct_ac_kind ct_ac_layer_kind(const ct_ac_policy *p, int layer) {
    if (p->kind == CT_AC_FULL && p->every > 1) return (layer + 1) % p->every == 0 ? CT_AC_FULL : CT_AC_NONE;
    return p->kind;
}

const char *ct_ac_kind_name(ct_ac_kind k) {
    static const char *const names[CT_AC_KINDS] = {"none", "elementwise", "op", "full"};
    return (unsigned)k < CT_AC_KINDS ? names[k] : "?";
}

double ct_ac_kept_bytes_per_token(const ct_ac_shape *s, ct_ac_kind kind) {
    return s->cfg->family->block->kept_bytes_per_token(s, kind);
}

double ct_ac_recompute_flops_per_token(const ct_ac_shape *s, ct_ac_kind kind, long seq_len) {
    return s->cfg->family->block->recompute_flops_per_token(s, kind, seq_len);
}
