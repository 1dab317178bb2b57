// config.json <-> ct_model_config (format in hf.h).
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/hf_internal.h"
#include "core/file_check.h"
#include "core/fs.h"
#include "core/json.h"

// Llama 3.1's frequency scaling as ctitan computes it (ct_model_rope_tables, model/weights.c):
// the only rope_scaling ctitan can run, so the only one written or accepted.
static const double rope_factor = 8.0, rope_low_freq = 1.0, rope_high_freq = 4.0;
static const int rope_original_max = 8192;
// The context Meta's Llama 3.1 configs give that scaling (128K; factor x original would be 64K).
static const int rope_scaled_max = 131072;

// ---- reading --------------------------------------------------------------------------------

// A positive integer under `key`; `dflt` when absent (or null), an error when dflt < 0.
static ct_status get_int(const ct_json *c, const char *path, const char *key, int dflt, int *out) {
    const ct_json *v = ct_json_get(c, key);
    if (!v || v->type == CT_JSON_NULL) {
        if (dflt < 0) return ct_set_error_at(CT_E_DATA, path, "%s: no \"%s\"", path, key);
        *out = dflt;
        return CT_OK;
    }
    if (v->type != CT_JSON_NUMBER || v->number != floor(v->number) || v->number < 1 || v->number > INT_MAX)
        return ct_set_error_at(CT_E_DATA, path, "%s: \"%s\" must be a positive integer", path, key);
    *out = (int)v->number;
    return CT_OK;
}

// A positive number under `key`, dflt when absent.
static ct_status get_pos(const ct_json *c, const char *path, const char *key, double dflt, double *out) {
    const ct_json *v = ct_json_get(c, key);
    if (!v || v->type == CT_JSON_NULL) {
        *out = dflt;
        return CT_OK;
    }
    if (v->type != CT_JSON_NUMBER || !isfinite(v->number) || v->number <= 0)
        return ct_set_error_at(CT_E_DATA, path, "%s: \"%s\" must be a positive number", path, key);
    *out = v->number;
    return CT_OK;
}

// A boolean under `key`, 0 when absent.
static ct_status get_bool(const ct_json *c, const char *path, const char *key, int *out) {
    const ct_json *v = ct_json_get(c, key);
    *out = 0;
    if (!v || v->type == CT_JSON_NULL) return CT_OK;
    if (v->type != CT_JSON_BOOL) return ct_set_error_at(CT_E_DATA, path, "%s: \"%s\" must be true or false", path, key);
    *out = v->boolean;
    return CT_OK;
}

// A string under `key` that must equal `want` when present (required: also present).
static ct_status expect_string(const ct_json *c, const char *path, const char *key, const char *want, int required,
                               const char *why) {
    const ct_json *v = ct_json_get(c, key);
    if (!v || v->type == CT_JSON_NULL) {
        if (required) return ct_set_error_at(CT_E_DATA, path, "%s: no \"%s\" (expected \"%s\")", path, key, want);
        return CT_OK;
    }
    if (v->type != CT_JSON_STRING) return ct_set_error_at(CT_E_DATA, path, "%s: \"%s\" must be a string", path, key);
    if (strcmp(v->string, want))
        return ct_set_error_at(CT_E_DATA, path, "%s: %s \"%s\" is not supported (%s)", path, key, v->string, why);
    return CT_OK;
}

// rope_theta and rope_scaling, in transformers 4's form (top-level rope_theta, rope_scaling
// null or {"rope_type" | "type", factor, ...}) or transformers 5's (rope_parameters holding
// both).
static ct_status read_rope(const ct_json *c, const char *path, ct_model_config *m) {
    const ct_json *params = ct_json_get(c, "rope_parameters");
    if (params && params->type != CT_JSON_OBJECT) params = NULL;
    const ct_json *theta_at = ct_json_get(c, "rope_theta") ? c : params ? params : c;
    if (get_pos(theta_at, path, "rope_theta", 10000.0, &m->rope_theta)) return CT_ERR;  // HF's default base
    const ct_json *rs = ct_json_get(c, "rope_scaling");
    if (!rs || rs->type == CT_JSON_NULL) rs = params;
    m->rope_scaling = 0;
    if (!rs || rs->type == CT_JSON_NULL) return CT_OK;
    if (rs->type != CT_JSON_OBJECT)
        return ct_set_error_at(CT_E_DATA, path, "%s: \"rope_scaling\" must be an object or null", path);
    const ct_json *type = ct_json_get(rs, "rope_type");
    if (!type) type = ct_json_get(rs, "type");
    if (!type || (type->type == CT_JSON_STRING && !strcmp(type->string, "default"))) return CT_OK;
    if (type->type != CT_JSON_STRING || strcmp(type->string, "llama3"))
        return ct_set_error_at(
            CT_E_DATA, path,
            "%s: rope_scaling type %s is not supported (ctitan computes none or Llama 3.1's \"llama3\")", path,
            type->type == CT_JSON_STRING ? type->string : "(not a string)");
    double factor = 0, low = 0, high = 0, orig = 0;
    if (get_pos(rs, path, "factor", 0, &factor) || get_pos(rs, path, "low_freq_factor", 0, &low) ||
        get_pos(rs, path, "high_freq_factor", 0, &high) ||
        get_pos(rs, path, "original_max_position_embeddings", 0, &orig))
        return CT_ERR;
    if (factor != rope_factor || low != rope_low_freq || high != rope_high_freq || orig != rope_original_max)
        return ct_set_error_at(CT_E_DATA, path,
                               "%s: llama3 rope_scaling factor %g, low_freq_factor %g, high_freq_factor %g, "
                               "original_max_position_embeddings %g is not supported (ctitan computes 8, 1, 4, 8192)",
                               path, factor, low, high, orig);
    m->rope_scaling = 1;
    return CT_OK;
}

// The limits a ctitan model file's metadata is held to (model_file.c), far above any real
// Llama: a config.json cannot size a registry that ctitan would refuse to load, nor one whose
// counts overflow (ct_param_count).
static ct_status check_limits(const char *path, const ct_model_config *m) {
    const struct {
        const char *key;
        int value, limit;
    } lim[] = {{"hidden_size", m->dim, 1 << 20},        {"num_hidden_layers", m->n_layers, 1 << 14},
               {"intermediate_size", m->ffn_hidden, 1 << 22}, {"vocab_size", m->vocab_size, 1 << 24},
               {"num_experts", m->n_experts, 1 << 16},
               {"max_position_embeddings", m->max_seq_len, 1 << 20}};
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++)
        if (lim[i].value > lim[i].limit)
            return ct_set_error_at(CT_E_DATA, path, "%s: \"%s\" = %d is above ctitan's limit %d", path, lim[i].key,
                                   lim[i].value, lim[i].limit);
    int n_tensors;
    long n_elements;
    if (ct_param_count(m, &n_tensors, &n_elements)) {
        char why[400];
        snprintf(why, sizeof why, "%s", ct_last_error());
        return ct_set_error_at(CT_E_DATA, path, "%s: %s", path, why);
    }
    return CT_OK;
}

// The family model_type names: "llama" (llama3) or "qwen3_moe" (llama3_moe).
static ct_status read_family(const ct_json *c, const char *path, ct_model_config *m) {
    const ct_json *v = ct_json_get(c, "model_type");
    if (!v || v->type == CT_JSON_NULL)
        return ct_set_error_at(CT_E_DATA, path, "%s: no \"model_type\" (expected \"llama\" or \"qwen3_moe\")", path);
    if (v->type != CT_JSON_STRING)
        return ct_set_error_at(CT_E_DATA, path, "%s: \"model_type\" must be a string", path);
    for (const ct_model_family *const *f = ct_model_families(); *f; f++)
        if ((*f)->hf_model_type && !strcmp((*f)->hf_model_type, v->string)) m->family = *f;
    if (!m->family)
        return ct_set_error_at(CT_E_DATA, path,
                               "%s: model_type \"%s\" is not supported (ctitan reads \"llama\" and \"qwen3_moe\")",
                               path, v->string);
    return CT_OK;
}

// Qwen3-MoE's routed feed-forward as ctitan computes it: every layer after the dense first ones
// routed, the chosen weights renormalised, no sliding window; the experts' sizes into m
// (ffn_hidden is each expert's), and the dense layers' count and width.
static ct_status read_qwen3_moe(const ct_json *c, const char *path, ct_model_config *m) {
    // Qwen's published configs say num_experts; transformers 5 writes num_local_experts.
    const char *experts = ct_json_get(c, "num_experts") || !ct_json_get(c, "num_local_experts") ? "num_experts"
                                                                                                : "num_local_experts";
    if (get_int(c, path, "moe_intermediate_size", -1, &m->ffn_hidden) ||
        get_int(c, path, experts, -1, &m->n_experts) ||
        get_int(c, path, "num_experts_per_tok", -1, &m->moe_top_k))
        return CT_ERR;
    if (m->moe_top_k > m->n_experts)
        return ct_set_error_at(CT_E_DATA, path, "%s: num_experts_per_tok %d is above num_experts %d", path,
                               m->moe_top_k, m->n_experts);
    m->moe_route_norm = 1;  // softmax scores, no choosing bias
    int flag, step = 1;
    const ct_json *norm = ct_json_get(c, "norm_topk_prob");
    if (!norm || norm->type != CT_JSON_BOOL || !norm->boolean)
        return ct_set_error_at(CT_E_DATA, path,
                               "%s: norm_topk_prob must be true (ctitan renormalises the chosen experts' weights)", path);
    if (get_int(c, path, "decoder_sparse_step", 1, &step)) return CT_ERR;
    if (step != 1)
        return ct_set_error_at(CT_E_DATA, path, "%s: decoder_sparse_step %d is not supported (ctitan routes every layer: 1)",
                               path, step);
    // Dense layers (Qwen3MoeMLP of intermediate_size): ctitan's are the first n_dense_layers, so
    // the list must be 0, 1, ..., n-1.
    const ct_json *dense = ct_json_get(c, "mlp_only_layers");
    if (dense && dense->type != CT_JSON_NULL) {
        bool prefix = dense->type == CT_JSON_ARRAY;
        for (int i = 0; prefix && i < dense->n; i++)
            prefix = dense->items[i].type == CT_JSON_NUMBER && dense->items[i].is_int && dense->items[i].integer == i;
        if (!prefix)
            return ct_set_error_at(CT_E_DATA, path,
                                   "%s: mlp_only_layers must list the first layers in order, [0, 1, ..., n-1] (ctitan's "
                                   "dense blocks come first)", path);
        m->n_dense_layers = dense->n;
        if (dense->n > 0 && get_int(c, path, "intermediate_size", -1, &m->dense_ffn_hidden)) return CT_ERR;
    }
    if (get_bool(c, path, "use_sliding_window", &flag)) return CT_ERR;
    if (flag)
        return ct_set_error_at(CT_E_DATA, path, "%s: use_sliding_window true is not supported (ctitan attends causally)",
                               path);
    m->qk_norm = 1;
    return CT_OK;
}

static ct_status config_from_json(const ct_json *c, const char *path, ct_model_config *m, int *tied) {
    memset(m, 0, sizeof *m);
    if (c->type != CT_JSON_OBJECT) return ct_set_error_at(CT_E_DATA, path, "%s: not a JSON object", path);
    if (read_family(c, path, m)) return CT_ERR;
    int moe = m->family->hf_model_type && !strcmp(m->family->hf_model_type, "qwen3_moe");
    if (expect_string(c, path, "hidden_act", "silu", 0, "ctitan's FFN is SwiGLU: \"silu\"")) return CT_ERR;
    if (moe ? read_qwen3_moe(c, path, m) : get_int(c, path, "intermediate_size", -1, &m->ffn_hidden)) return CT_ERR;
    if (get_int(c, path, "hidden_size", -1, &m->dim) ||
        get_int(c, path, "num_hidden_layers", -1, &m->n_layers) ||
        get_int(c, path, "num_attention_heads", -1, &m->n_heads) ||
        get_int(c, path, "num_key_value_heads", m->n_heads, &m->n_kv_heads) ||
        get_int(c, path, "vocab_size", -1, &m->vocab_size) ||
        get_int(c, path, "max_position_embeddings", 0, &m->max_seq_len) ||
        get_pos(c, path, "rms_norm_eps", 1e-6, &m->norm_eps) || get_bool(c, path, "tie_word_embeddings", tied))
        return CT_ERR;
    if (m->n_dense_layers > m->n_layers)
        return ct_set_error_at(CT_E_DATA, path, "%s: mlp_only_layers lists %d layers of num_hidden_layers %d", path,
                               m->n_dense_layers, m->n_layers);
    int bias;
    if (get_bool(c, path, "attention_bias", &bias)) return CT_ERR;
    if (bias)
        return ct_set_error_at(CT_E_DATA, path,
                               "%s: attention_bias true is not supported (ctitan's Llama has no biases)", path);
    if (get_bool(c, path, "mlp_bias", &bias)) return CT_ERR;
    if (bias)
        return ct_set_error_at(CT_E_DATA, path, "%s: mlp_bias true is not supported (ctitan's Llama has no biases)",
                               path);
    if (m->dim % m->n_heads)
        return ct_set_error_at(CT_E_DATA, path, "%s: num_attention_heads %d does not divide hidden_size %d", path,
                               m->n_heads, m->dim);
    if (m->n_heads % m->n_kv_heads)
        return ct_set_error_at(CT_E_DATA, path, "%s: num_key_value_heads %d does not divide num_attention_heads %d",
                               path, m->n_kv_heads, m->n_heads);
    m->head_dim = m->dim / m->n_heads;
    int hd = 0;
    if (get_int(c, path, "head_dim", m->head_dim, &hd)) return CT_ERR;
    if (hd != m->head_dim)
        return ct_set_error_at(CT_E_DATA, path,
                               "%s: head_dim %d is not hidden_size / num_attention_heads = %d (ctitan derives it)",
                               path, hd, m->head_dim);
    if (m->head_dim % 2)
        return ct_set_error_at(CT_E_DATA, path, "%s: head dim %d must be even for RoPE", path, m->head_dim);
    if (read_rope(c, path, m)) return CT_ERR;
    // What ctitan wrote (transformers ignores both): the training length, which may be 0 or
    // below max_position_embeddings, and the flavor.
    const ct_json *len = ct_json_get(c, "ctitan_max_seq_len");
    if (len && len->type == CT_JSON_NUMBER && len->number >= 0 && len->number <= INT_MAX && len->number == floor(len->number))
        m->max_seq_len = (int)len->number;
    const ct_json *flavor = ct_json_get(c, "ctitan_flavor");
    snprintf(m->flavor, sizeof m->flavor, "%s", flavor && flavor->type == CT_JSON_STRING ? flavor->string : "hf");
    return check_limits(path, m);
}

ct_status ct_hf_config_read(const char *dir, ct_model_config *m, int *tied) {
    if (ct_hf_check_dir(dir)) return CT_ERR;
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    ct_json *c = ct_json_read_file(path, "Hugging Face config.json", CT_FILE_TEXT_CONFIG_MAX);
    if (!c) return CT_ERR;
    ct_status st = config_from_json(c, path, m, tied);
    ct_json_free(c);
    return st;
}

ct_status ct_hf_load_config(const char *dir, ct_model_config *m) {
    int tied;
    return ct_hf_config_read(dir, m, &tied);
}

// ---- writing --------------------------------------------------------------------------------

// The shortest %g that reads back as the same double (1e-05, not 1.0000000000000001e-05); a
// number without '.' or 'e' gets ".0" so that Python reads a float where HF's configs have one.
static void put_double(FILE *f, double v) {
    char s[40];
    if (v == floor(v) && fabs(v) < 1e15) {  // 500000.0, not 5e+05
        fprintf(f, "%.1f", v);
        return;
    }
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(s, sizeof s, "%.*g", digits, v);
        if (strtod(s, NULL) == v) break;
    }
    fprintf(f, "%s%s", s, strpbrk(s, ".eEn") ? "" : ".0");
}

static ct_status write_generation_config(const char *dir, const ct_hf_vocab *vocab) {
    char path[1024];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    ct_fs_atomic out;
    FILE *f = ct_fs_atomic_open(&out, path, "generation config", 0);
    if (!f) return CT_ERR;
    fputs("{\n  \"_from_model_config\": true", f);
    if (vocab->bos >= 0) fprintf(f, ",\n  \"bos_token_id\": %d", (int)vocab->bos);
    if (vocab->eos >= 0) fprintf(f, ",\n  \"eos_token_id\": %d", (int)vocab->eos);
    fputs("\n}\n", f);
    return ct_fs_atomic_commit(&out);
}

ct_status ct_hf_config_write(const char *dir, const ct_model_config *m, ct_dtype dtype, const ct_hf_vocab *vocab) {
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    ct_fs_atomic out;
    FILE *f = ct_fs_atomic_open(&out, path, "model config", 0);
    if (!f) return CT_ERR;
    int moe = !strcmp(m->family->hf_model_type, "qwen3_moe");
    fprintf(f, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n",
            moe ? "Qwen3MoeForCausalLM" : "LlamaForCausalLM", m->family->hf_model_type);
    if (moe) {  // the dense first blocks are mlp_only_layers, intermediate_size wide
        fprintf(f,
                "  \"moe_intermediate_size\": %d,\n  \"num_experts\": %d,\n  \"num_experts_per_tok\": %d,\n"
                "  \"norm_topk_prob\": true,\n  \"decoder_sparse_step\": 1,\n  \"mlp_only_layers\": [",
                m->ffn_hidden, m->n_experts, m->moe_top_k);
        for (int l = 0; l < m->n_dense_layers; l++) fprintf(f, "%s%d", l ? ", " : "", l);
        fputs("],\n  \"use_sliding_window\": false,\n  \"output_router_logits\": false,\n", f);
    }
    int dense_width = moe && m->n_dense_layers > 0 ? m->dense_ffn_hidden : m->ffn_hidden;
    fprintf(f,
            "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
            "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
            "  \"vocab_size\": %d,\n  \"rms_norm_eps\": ",
            m->dim, dense_width, m->n_layers, m->n_heads, m->n_kv_heads, m->head_dim, m->vocab_size);
    put_double(f, m->norm_eps);
    fputs(",\n  \"rope_theta\": ", f);
    put_double(f, m->rope_theta);
    // The context the model supports: Llama 3's 8192, or Llama 3.1's 131072 under its scaling
    // (transformers warns on every load unless rope_scaling's original context is below it), or
    // the training length where that is longer. ctitan_max_seq_len keeps the exact training one.
    int supported = m->rope_scaling ? rope_scaled_max : rope_original_max;
    fprintf(f, ",\n  \"max_position_embeddings\": %d,\n", m->max_seq_len > supported ? m->max_seq_len : supported);
    if (m->rope_scaling) {
        fputs("  \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": ", f);
        put_double(f, rope_factor);
        fputs(", \"low_freq_factor\": ", f);
        put_double(f, rope_low_freq);
        fputs(", \"high_freq_factor\": ", f);
        put_double(f, rope_high_freq);
        fprintf(f, ", \"original_max_position_embeddings\": %d},\n", rope_original_max);
    } else {
        fputs("  \"rope_scaling\": null,\n", f);
    }
    fprintf(f,
            "  \"hidden_act\": \"silu\",\n  \"tie_word_embeddings\": false,\n  \"attention_bias\": false,\n"
            "  \"attention_dropout\": 0.0,\n  \"initializer_range\": 0.02,\n%s"
            "  \"use_cache\": true,\n  \"torch_dtype\": \"%s\",\n",
            moe ? "" : "  \"mlp_bias\": false,\n  \"pretraining_tp\": 1,\n", dtype == CT_BF16 ? "bfloat16" : "float32");
    if (vocab && vocab->bos >= 0) fprintf(f, "  \"bos_token_id\": %d,\n", (int)vocab->bos);
    if (vocab && vocab->eos >= 0) fprintf(f, "  \"eos_token_id\": %d,\n", (int)vocab->eos);
    fprintf(f, "  \"ctitan_max_seq_len\": %d,\n  \"ctitan_flavor\": ", m->max_seq_len);
    ct_json_write_string(f, m->flavor, strlen(m->flavor));
    fputs("\n}\n", f);
    if (ct_fs_atomic_commit(&out)) return CT_ERR;
    return vocab ? write_generation_config(dir, vocab) : CT_OK;
}
