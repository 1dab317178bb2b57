// Hugging Face interchange of the llama3_moe family as Qwen3-MoE (checkpoint/hf.h):
//  - a directory made by hand -- config.json text as a Qwen3MoeConfig, tensors under
//    Qwen3MoeForCausalLM's names in HF's layout, this test's own values -- read by ct_hf_import,
//    and ctitan's loss on a few tokens (the runner, fp32) equal to the loss of a naive
//    double-precision forward written here in Qwen3-MoE's conventions: per-head RMSNorm of q and
//    k before rotate_half RoPE, softmax router over every expert, top-k, the chosen weights
//    renormalised, SwiGLU experts. The same forward with the q/k norm weights in the other order,
//    or with interleaved RoPE, gives another loss, so a missing permutation cannot pass;
//  - a ctitan llama3_moe model exported, every HF tensor checked against the ctitan tensor's rows
//    it must hold (experts split by this test's own indexing), config.json's Qwen3-MoE fields,
//    and imported back to the same file byte for byte (every tensor identical); the same with a
//    dense first block (mlp_only_layers [0], intermediate_size its width);
//  - shared experts, which Qwen3-MoE lacks, refused by the export with one line;
//  - each refusal of a config.json ctitan cannot compute, and a missing expert tensor: one line
//    naming what is wrong.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/hf.h"
#include "core/json.h"
#include "expect_error.h"
#include "model/runner.h"
#include "model/weights.h"
#include "test.h"
#include "test_rand.h"

static char tmpdir[64];

static const char *tmp_path(const char *name) {
    static char buf[8][200];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static const char *make_dir(const char *name) {
    const char *dir = tmp_path(name);
    mkdir(dir, 0755);
    return dir;
}

// ---- the hand-made model ------------------------------------------------------------------------
// dim 32, 4 heads of 8, 2 kv heads, 4 experts of hidden 12, 2 per token, vocabulary 40, 2 layers.
enum { C = 32, NH = 4, NKV = 2, HS = 8, F = 12, E = 4, K = 2, V = 40, L = 2, TMAX = 32 };

typedef struct {
    double *embed;                        // (V, C)
    double *in_norm[L], *post_norm[L];    // (C)
    double *q[L], *k[L], *v[L], *o[L];    // (NH·HS, C), (NKV·HS, C), (NKV·HS, C), (C, NH·HS)
    double *q_norm[L], *k_norm[L];        // (HS)
    double *router[L];                    // (E, C)
    double *gate[L][E], *up[L][E];        // (F, C)
    double *down[L][E];                   // (C, F)
    double *norm, *lm_head;               // (C), (V, C)
} hf_model;

static double *rand_tensor(long n, double scale, double offset) {
    double *x = malloc((size_t)n * sizeof(double));
    for (long i = 0; i < n; i++) x[i] = (float)(offset + scale * (2.0 * urand() - 1.0));  // values a file holds
    return x;
}

static void make_model(hf_model *m) {
    memset(m, 0, sizeof *m);
    rng_state = 0x5eed1234abcdULL;
    m->embed = rand_tensor((long)V * C, 1.0, 0);
    double s = 1.5 / sqrt(C);
    for (int l = 0; l < L; l++) {
        m->in_norm[l] = rand_tensor(C, 0.3, 1.0);
        m->post_norm[l] = rand_tensor(C, 0.3, 1.0);
        m->q[l] = rand_tensor((long)NH * HS * C, 2 * s, 0);
        m->k[l] = rand_tensor((long)NKV * HS * C, 2 * s, 0);
        m->v[l] = rand_tensor((long)NKV * HS * C, s, 0);
        m->o[l] = rand_tensor((long)C * NH * HS, s, 0);
        m->q_norm[l] = rand_tensor(HS, 0.8, 1.2);  // far from 1 and from each other: their order matters
        m->k_norm[l] = rand_tensor(HS, 0.8, 1.2);
        m->router[l] = rand_tensor((long)E * C, 3 * s, 0);
        for (int e = 0; e < E; e++) {
            m->gate[l][e] = rand_tensor((long)F * C, s, 0);
            m->up[l][e] = rand_tensor((long)F * C, s, 0);
            m->down[l][e] = rand_tensor((long)C * F, 1.5 / sqrt(F), 0);
        }
    }
    m->norm = rand_tensor(C, 0.3, 1.0);
    m->lm_head = rand_tensor((long)V * C, 1.0, 0);
}

static void free_model(hf_model *m) {
    free(m->embed), free(m->norm), free(m->lm_head);
    for (int l = 0; l < L; l++) {
        free(m->in_norm[l]), free(m->post_norm[l]), free(m->q[l]), free(m->k[l]), free(m->v[l]), free(m->o[l]);
        free(m->q_norm[l]), free(m->k_norm[l]), free(m->router[l]);
        for (int e = 0; e < E; e++) free(m->gate[l][e]), free(m->up[l][e]), free(m->down[l][e]);
    }
}

// ---- the naive forward (Qwen3-MoE's conventions) --------------------------------------------------

static const double eps = 1e-6, theta = 1000000.0;

static void rmsnorm(const double *x, const double *w, int n, double *y) {
    double ss = 0;
    for (int c = 0; c < n; c++) ss += x[c] * x[c];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int c = 0; c < n; c++) y[c] = x[c] * r * w[c];
}

static void matvec(const double *W, const double *x, int rows, int cols, double *y) {  // y = W x
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < cols; c++) s += W[(long)r * cols + c] * x[c];
        y[r] = s;
    }
}

// One head at position p: rotate_half pairs (i, i + HS/2), or (interleaved, the wrong convention
// for HF weights) (2i, 2i + 1).
static void rope(double *x, int p, int interleaved) {
    for (int i = 0; i < HS / 2; i++) {
        int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + HS / 2;
        double f = pow(theta, -(2.0 * i) / HS), c = cos(p * f), s = sin(p * f);
        double x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x1 * c + x0 * s;
    }
}

// Each head normed over its HS values by w (reversed: w read back to front, a wrong order).
static void head_norm(double *x, const double *w, int reversed) {
    double wr[HS], y[HS];
    for (int i = 0; i < HS; i++) wr[i] = reversed ? w[HS - 1 - i] : w[i];
    rmsnorm(x, wr, HS, y);
    memcpy(x, y, sizeof y);
}

// Qwen3MoeSparseMoeBlock: softmax over every expert's logit, the top K, renormalised.
static void moe(const hf_model *m, int l, const double *x, double *out) {
    double logit[E], p[E], g[F], u[F], y[C], z = 0, mx = -INFINITY;
    matvec(m->router[l], x, E, C, logit);
    for (int e = 0; e < E; e++) mx = fmax(mx, logit[e]);
    for (int e = 0; e < E; e++) z += (p[e] = exp(logit[e] - mx));
    for (int e = 0; e < E; e++) p[e] /= z;
    int chosen[K];
    double w[K], wsum = 0;
    for (int j = 0; j < K; j++) {  // the largest not yet taken
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++) taken |= chosen[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        chosen[j] = best;
        wsum += w[j] = p[best];
    }
    memset(out, 0, C * sizeof(double));
    for (int j = 0; j < K; j++) {
        int e = chosen[j];
        matvec(m->gate[l][e], x, F, C, g);
        matvec(m->up[l][e], x, F, C, u);
        for (int i = 0; i < F; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
        matvec(m->down[l][e], g, C, F, y);
        for (int c = 0; c < C; c++) out[c] += w[j] / wsum * y[c];
    }
}

// Mean next-token loss of tokens[0..T] (T predictions).
static double naive_loss(const hf_model *m, const int32_t *tokens, int T, int interleaved, int reversed_norms) {
    static double h[TMAX][C], q[TMAX][NH * HS], k[TMAX][NKV * HS], v[TMAX][NKV * HS];
    double xn[C], att[NH * HS], out[C];
    for (int t = 0; t < T; t++) memcpy(h[t], m->embed + (long)tokens[t] * C, sizeof h[t]);
    for (int l = 0; l < L; l++) {
        for (int t = 0; t < T; t++) {
            rmsnorm(h[t], m->in_norm[l], C, xn);
            matvec(m->q[l], xn, NH * HS, C, q[t]);
            matvec(m->k[l], xn, NKV * HS, C, k[t]);
            matvec(m->v[l], xn, NKV * HS, C, v[t]);
            for (int hh = 0; hh < NH; hh++) head_norm(q[t] + hh * HS, m->q_norm[l], reversed_norms);
            for (int hh = 0; hh < NKV; hh++) head_norm(k[t] + hh * HS, m->k_norm[l], reversed_norms);
            for (int hh = 0; hh < NH; hh++) rope(q[t] + hh * HS, t, interleaved);
            for (int hh = 0; hh < NKV; hh++) rope(k[t] + hh * HS, t, interleaved);
        }
        for (int t = 0; t < T; t++) {
            for (int hh = 0; hh < NH; hh++) {
                int kv = hh / (NH / NKV);
                double sc[TMAX], mx = -INFINITY, z = 0;
                for (int s = 0; s <= t; s++) {
                    double d = 0;
                    for (int i = 0; i < HS; i++) d += q[t][hh * HS + i] * k[s][kv * HS + i];
                    sc[s] = d / sqrt(HS);
                    mx = fmax(mx, sc[s]);
                }
                for (int s = 0; s <= t; s++) z += (sc[s] = exp(sc[s] - mx));
                for (int i = 0; i < HS; i++) {
                    double a = 0;
                    for (int s = 0; s <= t; s++) a += sc[s] / z * v[s][kv * HS + i];
                    att[hh * HS + i] = a;
                }
            }
            matvec(m->o[l], att, C, NH * HS, out);
            for (int c = 0; c < C; c++) h[t][c] += out[c];
            rmsnorm(h[t], m->post_norm[l], C, xn);
            moe(m, l, xn, out);
            for (int c = 0; c < C; c++) h[t][c] += out[c];
        }
    }
    double loss = 0, logits[V];
    for (int t = 0; t < T; t++) {
        rmsnorm(h[t], m->norm, C, xn);
        matvec(m->lm_head, xn, V, C, logits);
        double mx = -INFINITY, z = 0;
        for (int i = 0; i < V; i++) mx = fmax(mx, logits[i]);
        for (int i = 0; i < V; i++) z += exp(logits[i] - mx);
        loss += mx + log(z) - logits[tokens[t + 1]];
    }
    return loss / T;
}

// ---- writing the directory ------------------------------------------------------------------------

typedef struct {
    ct_st_writer *w;
    float *keep[256];  // the fp32 copies the writer points at until it writes
    int n_keep;
} shard;

static void put(shard *s, const char *name, const double *x, long rows, long cols) {
    long n = rows * cols;
    float *f = malloc((size_t)n * sizeof(float));
    for (long i = 0; i < n; i++) f[i] = (float)x[i];
    int64_t shape[2] = {rows, cols};
    ct_st_writer_add(s->w, name, CT_F32, cols > 1 ? 2 : 1, shape, CT_F32, f);
    s->keep[s->n_keep++] = f;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) ct_fatal("test", "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

// config.json as Qwen3-MoE's releases write it (fields ctitan does not read included); a key
// that `extra` gives is taken from extra instead.
static void write_config(const char *dir, const char *extra) {
    char fields[24][96], text[4096] = "{", path[256];
    int n = 0;
#define FIELD(key, ...)                                                                              \
    if (!extra || !strstr(extra, "\"" key "\"")) snprintf(fields[n++], sizeof fields[0], "\"" key "\": " __VA_ARGS__)
    FIELD("architectures", "[\"Qwen3MoeForCausalLM\"]");
    FIELD("model_type", "\"qwen3_moe\"");
    FIELD("hidden_size", "%d", C);
    FIELD("intermediate_size", "96");
    FIELD("moe_intermediate_size", "%d", F);
    FIELD("num_hidden_layers", "%d", L);
    FIELD("num_attention_heads", "%d", NH);
    FIELD("num_key_value_heads", "%d", NKV);
    FIELD("head_dim", "%d", HS);
    FIELD("num_experts", "%d", E);
    FIELD("num_experts_per_tok", "%d", K);
    FIELD("norm_topk_prob", "true");
    FIELD("decoder_sparse_step", "1");
    FIELD("mlp_only_layers", "[]");
    FIELD("vocab_size", "%d", V);
    FIELD("rms_norm_eps", "1e-06");
    FIELD("rope_theta", "1000000.0");
    FIELD("rope_scaling", "null");
    FIELD("max_position_embeddings", "40960");
    FIELD("max_window_layers", "48");
    FIELD("sliding_window", "null");
    FIELD("hidden_act", "\"silu\"");
    FIELD("tie_word_embeddings", "false");
    FIELD("router_aux_loss_coef", "0.001");
#undef FIELD
    for (int i = 0; i < n; i++) {
        strcat(text, i ? ",\n  " : "\n  ");
        strcat(text, fields[i]);
    }
    if (extra) strcat(text, extra);
    strcat(text, "\n}\n");
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, text);
}

// model.safetensors under Qwen3MoeForCausalLM's names; skip: one left out.
static void write_tensors(const char *dir, const hf_model *m, const char *skip) {
    shard s = {.w = ct_st_writer_new()};
    char name[128];
#define PUT(nm, x, r, c) \
    if (!skip || strcmp(skip, nm)) put(&s, nm, x, r, c)
#define LAYER(x, r, c, ...)                                                    \
    do {                                                                       \
        snprintf(name, sizeof name, "model.layers.%d." __VA_ARGS__);           \
        PUT(name, x, r, c);                                                    \
    } while (0)
    PUT("model.embed_tokens.weight", m->embed, V, C);
    for (int l = 0; l < L; l++) {
        LAYER(m->in_norm[l], C, 1, "%s", l, "input_layernorm.weight");
        LAYER(m->q[l], NH * HS, C, "%s", l, "self_attn.q_proj.weight");
        LAYER(m->k[l], NKV * HS, C, "%s", l, "self_attn.k_proj.weight");
        LAYER(m->v[l], NKV * HS, C, "%s", l, "self_attn.v_proj.weight");
        LAYER(m->o[l], C, NH * HS, "%s", l, "self_attn.o_proj.weight");
        LAYER(m->q_norm[l], HS, 1, "%s", l, "self_attn.q_norm.weight");
        LAYER(m->k_norm[l], HS, 1, "%s", l, "self_attn.k_norm.weight");
        LAYER(m->post_norm[l], C, 1, "%s", l, "post_attention_layernorm.weight");
        LAYER(m->router[l], E, C, "%s", l, "mlp.gate.weight");
        for (int e = E - 1; e >= 0; e--) {  // HF's files need no order; this one is not ctitan's
            LAYER(m->down[l][e], C, F, "mlp.experts.%d.down_proj.weight", l, e);
            LAYER(m->up[l][e], F, C, "mlp.experts.%d.up_proj.weight", l, e);
            LAYER(m->gate[l][e], F, C, "mlp.experts.%d.gate_proj.weight", l, e);
        }
    }
    PUT("model.norm.weight", m->norm, C, 1);
    PUT("lm_head.weight", m->lm_head, V, C);
#undef LAYER
#undef PUT
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (ct_st_writer_write(s.w, path)) ct_fatal("test", "%s", ct_last_error());
    ct_st_writer_free(s.w);
    for (int i = 0; i < s.n_keep; i++) free(s.keep[i]);
}

// ---- ctitan's loss on the imported model --------------------------------------------------------

static double ctitan_loss(const char *model_file, const int32_t *tokens, int T) {
    ct_model_config m;
    ct_param_table t;
    float *block;
    if (ct_model_load_all(model_file, &m, &t, &block)) {
        printf("  %s\n", ct_last_error());
        return NAN;
    }
    m.max_seq_len = T;
    ct_model_weights w;
    ct_model_weights_init(&w, &t, &m, block);
    ct_model_acts acts;
    ct_model_acts_init(&acts, &m, 1, T);
    double loss = ct_model_step(&acts, &w, NULL, tokens, tokens + 1, 0.0f) / T;
    ct_model_acts_free(&acts);
    ct_model_weights_free(&w);
    ct_param_table_free(&t);
    free(block);
    return loss;
}

static void test_import_matches_reference(void) {
    hf_model hm;
    make_model(&hm);
    const char *dir = make_dir("hand");
    write_config(dir, NULL);
    write_tensors(dir, &hm, NULL);
    const char *out = tmp_path("hand.safetensors");
    CHECK(ct_hf_import(dir, out, CT_HF_DTYPE_SOURCE) == CT_OK, "%s", ct_last_error());
    ct_model_config m;
    CHECK(ct_model_load_config(out, &m) == CT_OK && !strcmp(m.family->name, "llama3_moe") && m.qk_norm == 1 &&
              m.n_experts == E && m.moe_top_k == K && m.ffn_hidden == F && m.head_dim == HS,
          "imported config: %s", ct_last_error());
    enum { T = 12 };
    int32_t tokens[T + 1];
    for (int i = 0; i <= T; i++) tokens[i] = (int32_t)((i * 7 + 3) % V);
    double ours = ctitan_loss(out, tokens, T), ref = naive_loss(&hm, tokens, T, 0, 0);
    double wrong_rope = naive_loss(&hm, tokens, T, 1, 0), wrong_norms = naive_loss(&hm, tokens, T, 0, 1);
    printf("  loss: ctitan %.7f, reference %.7f (interleaved RoPE %.7f, norm weights reversed %.7f)\n", ours, ref,
           wrong_rope, wrong_norms);
    // fp32 against float64 over two layers: a few 1e-6 of relative error; 1e-4 absolute is far
    // below the distance of either wrong convention.
    CHECK_CLOSE(ours, ref, 0, 1e-4);
    CHECK(fabs(wrong_rope - ref) > 1e-2 && fabs(wrong_norms - ref) > 1e-2,
          "the wrong conventions give the same loss: the comparison could not fail");
    free_model(&hm);
}

// ---- export, import back ------------------------------------------------------------------------

static ct_model_config tiny_moe(void) {
    ct_model_config m = {.family = ct_model_family_find("llama3_moe")};
    strcpy(m.flavor, "debugmodel");
    m.dim = C, m.n_layers = L, m.n_heads = NH, m.n_kv_heads = NKV, m.head_dim = HS, m.ffn_hidden = F;
    m.n_experts = E, m.moe_top_k = K, m.qk_norm = 1, m.vocab_size = V;
    m.moe_route_norm = 1;  // Qwen3-MoE's router: softmax, renormalised, no choosing bias
    m.norm_eps = 1e-6, m.rope_theta = 1000000.0, m.max_seq_len = 24;
    return m;
}

// HF tensor `name` must hold rows [row0, row0 + rows) of ctitan parameter ct_name (cols wide),
// rows of a head permuted as HF's rotate_half layout wants when `rope`.
static void check_piece(const ct_st_file *f, const ct_param_table *t, const float *block, const char *name,
                        const char *ct_name, long row0, long rows, int rope) {
    const ct_param *p = ct_param_find(t, ct_name);
    const ct_st_tensor *x = ct_st_find(f, name);
    CHECK(p && x && x->dtype == CT_F32 && x->shape[0] == rows && (x->ndim == 1 || x->shape[1] == p->shape[1]),
          "%s: missing or wrong shape", name);
    if (!p || !x) return;
    long cols = p->shape[1], bad = -1;
    float *v = malloc((size_t)(rows * cols) * sizeof(float));
    ct_st_read_f32_range(x, 0, rows * cols, v);
    for (long r = 0; r < rows && bad < 0; r++) {
        // HF row h·HS + j·HS/2 + i holds Meta row h·HS + 2i + j.
        long h = r / HS, rr = r % HS, j = rr / (HS / 2), i = rr % (HS / 2);
        long src = row0 + (rope ? h * HS + 2 * i + j : r);
        for (long c = 0; c < cols && bad < 0; c++)
            if (memcmp(&block[p->offset + src * cols + c], &v[r * cols + c], sizeof(float))) bad = r * cols + c;
    }
    CHECK(bad < 0, "%s: element %ld differs", name, bad);
    free(v);
}

// config.json's fields; n_dense: the dense first layers it must list (intermediate_size wide).
static void check_config(const char *dir, int n_dense, int dense_width) {
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    ct_json *c = ct_json_read_file(path, "config.json", 1u << 20);
    CHECK(c != NULL, "%s", ct_last_error());
    if (!c) return;
    const ct_json *arch = ct_json_get(c, "architectures"), *mt = ct_json_get(c, "model_type");
    CHECK(arch && arch->type == CT_JSON_ARRAY && arch->n == 1 && !strcmp(arch->items[0].string, "Qwen3MoeForCausalLM"),
          "architectures");
    CHECK(mt && mt->type == CT_JSON_STRING && !strcmp(mt->string, "qwen3_moe"), "model_type");
    const struct {
        const char *key;
        double want;
    } nums[] = {{"hidden_size", C},      {"moe_intermediate_size", F}, {"num_experts", E},
                {"num_experts_per_tok", K}, {"num_hidden_layers", L},  {"num_attention_heads", NH},
                {"num_key_value_heads", NKV}, {"head_dim", HS},        {"vocab_size", V},
                {"decoder_sparse_step", 1}, {"rms_norm_eps", 1e-6},    {"rope_theta", 1000000.0}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        const ct_json *v = ct_json_get(c, nums[i].key);
        CHECK(v && v->type == CT_JSON_NUMBER && v->number == nums[i].want, "%s", nums[i].key);
    }
    const ct_json *norm = ct_json_get(c, "norm_topk_prob"), *dense = ct_json_get(c, "mlp_only_layers");
    const ct_json *sliding = ct_json_get(c, "use_sliding_window"), *router = ct_json_get(c, "output_router_logits");
    CHECK(norm && norm->type == CT_JSON_BOOL && norm->boolean, "norm_topk_prob");
    CHECK(dense && dense->type == CT_JSON_ARRAY && dense->n == n_dense, "mlp_only_layers");
    for (int i = 0; dense && dense->type == CT_JSON_ARRAY && i < dense->n; i++)
        CHECK(dense->items[i].type == CT_JSON_NUMBER && dense->items[i].number == i, "mlp_only_layers[%d]", i);
    const ct_json *width = ct_json_get(c, "intermediate_size");
    if (n_dense > 0) CHECK(width && width->number == dense_width, "intermediate_size");
    CHECK(sliding && sliding->type == CT_JSON_BOOL && !sliding->boolean, "use_sliding_window");
    CHECK(router && router->type == CT_JSON_BOOL && !router->boolean, "output_router_logits");
    ct_json_free(c);
}

static int same_files(const char *a, const char *b) {
    FILE *x = fopen(a, "rb"), *y = fopen(b, "rb");
    int same = x && y;
    while (same) {
        int ca = fgetc(x), cb = fgetc(y);
        same = ca == cb;
        if (ca == EOF) break;
    }
    if (x) fclose(x);
    if (y) fclose(y);
    return same;
}

static void test_round_trip(void) {
    ct_model_config m = tiny_moe();
    ct_param_table t;
    ct_param_table_build(&t, &m);
    float *block = malloc((size_t)t.total * sizeof(float));
    rng_state = 0x9e3779b97f4a7c15ULL;
    for (long i = 0; i < t.total; i++) block[i] = (float)(2.0 * urand() - 1.0);
    const char *a = tmp_path("a.safetensors"), *b = tmp_path("b.safetensors"), *dir = tmp_path("exported");
    CHECK(ct_model_save(a, &t, &m, block, CT_F32) == CT_OK, "%s", ct_last_error());
    CHECK(ct_hf_export(a, dir, NULL, CT_HF_DTYPE_SOURCE) == CT_OK, "%s", ct_last_error());
    char path[256], name[128], ct_name[128];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ct_st_file *f = ct_st_open(path);
    CHECK(f != NULL, "%s", ct_last_error());
    if (f) {
        // 3 + per layer: 2 norms, q k v o, q/k norms, router, 3 tensors per expert.
        CHECK(ct_st_num_tensors(f) == 3 + L * (9 + 3 * E), "%d tensors", ct_st_num_tensors(f));
        for (int l = 0; l < L; l++) {
            static const char *const attn[][3] = {
                {"self_attn.q_proj.weight", "attention.wq.weight", "r"}, {"self_attn.k_proj.weight", "attention.wk.weight", "r"},
                {"self_attn.v_proj.weight", "attention.wv.weight", ""},  {"self_attn.o_proj.weight", "attention.wo.weight", ""},
                {"self_attn.q_norm.weight", "attention.q_norm.weight", "r"},
                {"self_attn.k_norm.weight", "attention.k_norm.weight", "r"},
                {"input_layernorm.weight", "attention_norm.weight", ""},
                {"post_attention_layernorm.weight", "ffn_norm.weight", ""},
                {"mlp.gate.weight", "moe.router.weight", ""},
            };
            for (size_t i = 0; i < sizeof attn / sizeof attn[0]; i++) {
                snprintf(name, sizeof name, "model.layers.%d.%s", l, attn[i][0]);
                snprintf(ct_name, sizeof ct_name, "layers.%d.%s", l, attn[i][1]);
                const ct_param *p = ct_param_find(&t, ct_name);
                check_piece(f, &t, block, name, ct_name, 0, p ? p->shape[0] : 0, attn[i][2][0] == 'r');
            }
            for (int e = 0; e < E; e++) {  // w13: expert e's w1 then w3, F rows each; w2: C rows each
                snprintf(ct_name, sizeof ct_name, "layers.%d.moe.experts.w13.weight", l);
                snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.gate_proj.weight", l, e);
                check_piece(f, &t, block, name, ct_name, (long)e * 2 * F, F, 0);
                snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.up_proj.weight", l, e);
                check_piece(f, &t, block, name, ct_name, (long)e * 2 * F + F, F, 0);
                snprintf(ct_name, sizeof ct_name, "layers.%d.moe.experts.w2.weight", l);
                snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e);
                check_piece(f, &t, block, name, ct_name, (long)e * C, C, 0);
            }
        }
        check_piece(f, &t, block, "model.embed_tokens.weight", "tok_embeddings.weight", 0, V, 0);
        check_piece(f, &t, block, "lm_head.weight", "output.weight", 0, V, 0);
        ct_st_close(f);
    }
    check_config(dir, 0, 0);
    CHECK(ct_hf_import(dir, b, CT_HF_DTYPE_SOURCE) == CT_OK, "%s", ct_last_error());
    // The same bytes: every tensor identical, the same metadata (family, experts, qk_norm).
    CHECK(same_files(a, b), "%s and %s differ", a, b);
    free(block);
    ct_param_table_free(&t);
}

// A model with a dense first block (DeepSeek's structure, as Qwen3-MoE's mlp_only_layers): its
// FFN under the dense MLP's names, the routed block's experts as before, the config listing
// layer 0 with intermediate_size its width, and the import the same file byte for byte.
static void test_round_trip_dense_first(void) {
    ct_model_config m = tiny_moe();
    m.n_dense_layers = 1, m.dense_ffn_hidden = 20;
    ct_param_table t;
    ct_param_table_build(&t, &m);
    float *block = malloc((size_t)t.total * sizeof(float));
    rng_state = 0x2545f4914f6cdd1dULL;
    for (long i = 0; i < t.total; i++) block[i] = (float)(2.0 * urand() - 1.0);
    const char *a = tmp_path("dense_a.safetensors"), *b = tmp_path("dense_b.safetensors");
    const char *dir = tmp_path("dense_exported");
    CHECK(ct_model_save(a, &t, &m, block, CT_F32) == CT_OK, "%s", ct_last_error());
    CHECK(ct_hf_export(a, dir, NULL, CT_HF_DTYPE_SOURCE) == CT_OK, "%s", ct_last_error());
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ct_st_file *f = ct_st_open(path);
    CHECK(f != NULL, "%s", ct_last_error());
    if (f) {
        // 3 + the dense layer's 2 norms, q k v o, q/k norms, 3 FFN tensors + the routed layers'.
        CHECK(ct_st_num_tensors(f) == 3 + 11 + (L - 1) * (9 + 3 * E), "%d tensors", ct_st_num_tensors(f));
        check_piece(f, &t, block, "model.layers.0.mlp.gate_proj.weight", "layers.0.feed_forward.w1.weight", 0, 20, 0);
        check_piece(f, &t, block, "model.layers.0.mlp.up_proj.weight", "layers.0.feed_forward.w3.weight", 0, 20, 0);
        check_piece(f, &t, block, "model.layers.0.mlp.down_proj.weight", "layers.0.feed_forward.w2.weight", 0, C, 0);
        CHECK(!ct_st_find(f, "model.layers.0.mlp.gate.weight"), "the dense layer has a router");
        check_piece(f, &t, block, "model.layers.1.mlp.experts.0.down_proj.weight", "layers.1.moe.experts.w2.weight", 0,
                    C, 0);
        ct_st_close(f);
    }
    check_config(dir, 1, 20);
    CHECK(ct_hf_import(dir, b, CT_HF_DTYPE_SOURCE) == CT_OK, "%s", ct_last_error());
    CHECK(same_files(a, b), "%s and %s differ", a, b);
    free(block);
    ct_param_table_free(&t);
}

// Shared experts have no place in Qwen3-MoE: the export refuses them with one line.
static void test_export_refuses_shared_experts(void) {
    ct_model_config m = tiny_moe();
    m.n_shared_experts = 1;
    ct_param_table t;
    ct_param_table_build(&t, &m);
    float *block = calloc((size_t)t.total, sizeof(float));
    const char *a = tmp_path("shared.safetensors"), *dir = tmp_path("shared_exported");
    CHECK(ct_model_save(a, &t, &m, block, CT_F32) == CT_OK, "%s", ct_last_error());
    ct_status st = ct_hf_export(a, dir, NULL, CT_HF_DTYPE_SOURCE);
    CHECK(st == CT_ERR && strstr(ct_last_error(), "no shared experts") &&
              strstr(ct_last_error(), "model.moe.num_shared_experts") && !strchr(ct_last_error(), '\n'),
          "%s", st ? ct_last_error() : "exported");
    CHECK(access(dir, F_OK) != 0, "a refused export left %s", dir);
    free(block);
    ct_param_table_free(&t);
}

// ---- refusals ---------------------------------------------------------------------------------

// A router Qwen3-MoE cannot hold (sigmoid scores, weights not renormalised, a choosing bias) is
// not exported, with one line naming the settings.
static void test_export_refuses_router(void) {
    for (int which = 0; which < 3; which++) {
        ct_model_config m = tiny_moe();
        if (which == 0) m.moe_sigmoid = 1;
        if (which == 1) m.moe_route_norm = 0;
        if (which == 2) m.moe_bias_rate = 1e-3;
        ct_param_table t;
        ct_param_table_build(&t, &m);
        float *block = calloc((size_t)t.total, sizeof(float));
        const char *a = tmp_path("router.safetensors"), *dir = tmp_path("router_exported");
        CHECK(ct_model_save(a, &t, &m, block, CT_F32) == CT_OK, "%s", ct_last_error());
        ct_status st = ct_hf_export(a, dir, NULL, CT_HF_DTYPE_SOURCE);
        CHECK(st == CT_ERR && strstr(ct_last_error(), "Qwen3-MoE routes by softmax") &&
                  strstr(ct_last_error(), "model.moe.score_func") && !strchr(ct_last_error(), '\n'),
              "router %d: %s", which, st ? ct_last_error() : "exported");
        free(block);
        ct_param_table_free(&t);
    }
}

static void expect_refusal(const char *name, const char *extra, const char *skip, const char *want) {
    hf_model hm;
    make_model(&hm);
    const char *dir = make_dir(name);
    write_config(dir, extra);
    write_tensors(dir, &hm, skip);
    free_model(&hm);
    char out[256];
    snprintf(out, sizeof out, "%s.out.safetensors", dir);
    ct_status st = ct_hf_import(dir, out, CT_HF_DTYPE_SOURCE);
    CHECK(st == CT_ERR && error_is(CT_E_DATA, NULL, want), "want '%s', got '%s'", want, st ? ct_last_error() : "success");
    CHECK(st == CT_ERR && !strncmp(ct_last_error_subject(), dir, strlen(dir)), "subject '%s'", ct_last_error_subject());
    CHECK(!strchr(ct_last_error(), '\n'), "not one line");
    CHECK(access(out, F_OK) != 0, "a refused import left %s", out);
    if (st == CT_ERR) printf("  refused: %s\n", ct_last_error());
}

static void test_refusals(void) {
    expect_refusal("norm_topk", ",\n  \"norm_topk_prob\": false", NULL, "norm_topk_prob must be true");
    expect_refusal("sparse_step", ",\n  \"decoder_sparse_step\": 2", NULL,
                   "decoder_sparse_step 2 is not supported");
    expect_refusal("dense_layers", ",\n  \"mlp_only_layers\": [1]", NULL,
                   "mlp_only_layers must list the first layers in order");
    expect_refusal("dense_all", ",\n  \"mlp_only_layers\": [0, 1, 2]", NULL,
                   "mlp_only_layers lists 3 layers of num_hidden_layers 2");
    expect_refusal("sliding", ",\n  \"use_sliding_window\": true", NULL, "use_sliding_window true");
    expect_refusal("too_many_chosen", ",\n  \"num_experts_per_tok\": 5", NULL, "num_experts_per_tok 5 is above");
    expect_refusal("missing_expert", NULL, "model.layers.1.mlp.experts.3.up_proj.weight",
                   "missing tensor model.layers.1.mlp.experts.3.up_proj.weight");
    expect_refusal("head_dim", ",\n  \"head_dim\": 16", NULL, "head_dim 16 is not");
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_hf_qwen3_moe_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    CT_RUN(test_import_matches_reference);
    CT_RUN(test_round_trip);
    CT_RUN(test_refusals);
    CT_RUN(test_export_refuses_router);
    CT_RUN(test_round_trip_dense_first);
    CT_RUN(test_export_refuses_shared_experts);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) return 1;
    CT_TEST_EXIT();
}
