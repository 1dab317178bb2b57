// A Hugging Face directory made by hand -- config.json text and tensors under HF's names, in
// HF's layout, with this test's own values -- read by ct_hf_import, and the model's loss on a
// few tokens computed by ctitan (the runner, fp32) equal to the loss of a naive
// double-precision Llama forward written here in HF's conventions: rotate_half RoPE
// (pairs (i, i + HS/2)) with transformers' llama3 frequency scaling, repeat_kv for GQA,
// RMSNorm as x * rsqrt(mean(x²) + eps) * w. The same forward in Meta's interleaved convention
// gives another loss, so a missing or wrong q/k permutation cannot pass. Variants: one file,
// fp32, untied, plain RoPE; and shards with an index, bf16, tied embeddings (no lm_head), Llama
// 3.1 RoPE. The config forms of transformers 4 and 5. Then every refusal: missing config.json, missing tensor, wrong shape, unsupported
// model_type / rope_scaling / biases / head_dim, unexpected tensor, bad JSON, missing shard --
// each one line naming what is wrong, and no output file left behind.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/hf.h"
#include "model/weights.h"
#include "model/runner.h"
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

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

// ---- the hand-made model ------------------------------------------------------------------------
// dim 32, 4 heads of 8, 2 kv heads, FFN 48, vocabulary 40, 2 layers; weights large enough that
// attention is far from uniform and RoPE's rotations move the loss.
enum { C = 32, NH = 4, NKV = 2, HS = 8, F = 48, V = 40, L = 2, TMAX = 64 };

typedef struct {
    double *embed;                    // (V, C)
    double *in_norm[L], *post_norm[L];  // (C)
    double *q[L], *k[L], *v[L], *o[L];  // HF layout: (NH·HS, C), (NKV·HS, C), (NKV·HS, C), (C, NH·HS)
    double *gate[L], *up[L], *down[L];  // (F, C), (F, C), (C, F)
    double *norm;                     // (C)
    double *lm_head;                  // (V, C); NULL when tied
    double eps, theta;
    int llama3;                       // transformers' llama3 rope scaling (factor 8, 1, 4, 8192)
} hf_model;

static double *rand_tensor(long n, double scale, double offset, int bf16) {
    double *x = malloc((size_t)n * sizeof(double));
    for (long i = 0; i < n; i++) {
        float v = (float)(offset + scale * (2.0 * urand() - 1.0));
        x[i] = bf16 ? ct_bf16_to_f32(ct_f32_to_bf16(v)) : v;  // the values the file will hold
    }
    return x;
}

static void make_model(hf_model *m, int tied, int bf16, int llama3, double theta) {
    memset(m, 0, sizeof *m);
    m->embed = rand_tensor((long)V * C, 1.0, 0, bf16);
    for (int l = 0; l < L; l++) {
        m->in_norm[l] = rand_tensor(C, 0.3, 1.0, bf16);
        m->post_norm[l] = rand_tensor(C, 0.3, 1.0, bf16);
        double s = 1.5 / sqrt(C);
        m->q[l] = rand_tensor((long)NH * HS * C, 2 * s, 0, bf16);
        m->k[l] = rand_tensor((long)NKV * HS * C, 2 * s, 0, bf16);
        m->v[l] = rand_tensor((long)NKV * HS * C, s, 0, bf16);
        m->o[l] = rand_tensor((long)C * NH * HS, s, 0, bf16);
        m->gate[l] = rand_tensor((long)F * C, s, 0, bf16);
        m->up[l] = rand_tensor((long)F * C, s, 0, bf16);
        m->down[l] = rand_tensor((long)C * F, 1.5 / sqrt(F), 0, bf16);
    }
    m->norm = rand_tensor(C, 0.3, 1.0, bf16);
    m->lm_head = tied ? NULL : rand_tensor((long)V * C, 1.0, 0, bf16);
    m->eps = 1e-5;
    m->theta = theta;
    m->llama3 = llama3;
}

static void free_model(hf_model *m) {
    free(m->embed);
    for (int l = 0; l < L; l++) {
        free(m->in_norm[l]), free(m->post_norm[l]), free(m->q[l]), free(m->k[l]), free(m->v[l]), free(m->o[l]);
        free(m->gate[l]), free(m->up[l]), free(m->down[l]);
    }
    free(m->norm);
    free(m->lm_head);
}

// ---- the naive forward ------------------------------------------------------------------------

static void rmsnorm(const double *x, const double *w, double eps, double *y) {
    double ss = 0;
    for (int c = 0; c < C; c++) ss += x[c] * x[c];
    double r = 1.0 / sqrt(ss / C + eps);
    for (int c = 0; c < C; c++) y[c] = x[c] * r * w[c];
}

static void matvec(const double *W, const double *x, int rows, int cols, double *y) {  // y = W x, W (rows, cols)
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < cols; c++) s += W[(long)r * cols + c] * x[c];
        y[r] = s;
    }
}

// transformers' inv_freq: base^(-2i/HS), and for llama3 _compute_llama3_parameters.
static void inv_freqs(const hf_model *m, int llama3, double *f) {
    for (int i = 0; i < HS / 2; i++) {
        double inv = pow(m->theta, -(2.0 * i) / HS);
        if (llama3) {
            const double factor = 8, lo = 1, hi = 4, old = 8192;
            double wavelen = 2 * M_PI / inv, low_wl = old / lo, high_wl = old / hi;
            double scaled = wavelen > low_wl ? inv / factor : inv;
            double smooth = (old / wavelen - lo) / (hi - lo);
            if (!(wavelen < high_wl) && !(wavelen > low_wl)) scaled = (1 - smooth) * scaled / factor + smooth * scaled;
            inv = scaled;
        }
        f[i] = inv;
    }
}

// Rotates one head at position p. rotate_half (HF): pairs (i, i + HS/2); interleaved (Meta):
// pairs (2i, 2i + 1) -- the convention this test must NOT match on HF-layout weights.
static void rope(double *x, int p, const double *freq, int interleaved) {
    for (int i = 0; i < HS / 2; i++) {
        int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + HS / 2;
        double c = cos(p * freq[i]), s = sin(p * freq[i]);
        double x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x1 * c + x0 * s;
    }
}

// Mean next-token loss of tokens[0..T] (T predictions).
static double naive_loss(const hf_model *m, const int32_t *tokens, int T, int llama3, int interleaved) {
    static double h[TMAX][C], q[TMAX][NH * HS], k[TMAX][NKV * HS], v[TMAX][NKV * HS];
    double xn[C], att[NH * HS], out[C], g[F], u[F], freq[HS / 2];
    inv_freqs(m, llama3, freq);
    for (int t = 0; t < T; t++) memcpy(h[t], m->embed + (long)tokens[t] * C, sizeof h[t]);
    for (int l = 0; l < L; l++) {
        for (int t = 0; t < T; t++) {
            rmsnorm(h[t], m->in_norm[l], m->eps, xn);
            matvec(m->q[l], xn, NH * HS, C, q[t]);
            matvec(m->k[l], xn, NKV * HS, C, k[t]);
            matvec(m->v[l], xn, NKV * HS, C, v[t]);
            for (int hh = 0; hh < NH; hh++) rope(q[t] + hh * HS, t, freq, interleaved);
            for (int hh = 0; hh < NKV; hh++) rope(k[t] + hh * HS, t, freq, interleaved);
        }
        for (int t = 0; t < T; t++) {
            for (int hh = 0; hh < NH; hh++) {
                int kv = hh / (NH / NKV);  // repeat_kv: query head hh reads kv head hh / n_rep
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
            rmsnorm(h[t], m->post_norm[l], m->eps, xn);
            matvec(m->gate[l], xn, F, C, g);
            matvec(m->up[l], xn, F, C, u);
            for (int i = 0; i < F; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];  // silu(gate) * up
            matvec(m->down[l], g, C, F, out);
            for (int c = 0; c < C; c++) h[t][c] += out[c];
        }
    }
    double loss = 0, logits[V];
    for (int t = 0; t < T; t++) {
        rmsnorm(h[t], m->norm, m->eps, xn);
        matvec(m->lm_head ? m->lm_head : m->embed, xn, V, C, logits);
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
    float *keep[64];  // the fp32 copies the writer points at until it writes
    int n_keep;
} shard;

static void put(shard *s, const char *name, const double *x, long rows, long cols, int bf16) {
    long n = rows * cols;
    float *f = malloc((size_t)n * sizeof(float));
    for (long i = 0; i < n; i++) f[i] = (float)x[i];
    int64_t shape[2] = {rows, cols};
    ct_st_writer_add(s->w, name, bf16 ? CT_BF16 : CT_F32, cols > 1 ? 2 : 1, shape, CT_F32, f);
    s->keep[s->n_keep++] = f;
}

static void shard_write(shard *s, const char *path) {
    if (ct_st_writer_write(s->w, path)) ct_fatal("test", "%s", ct_last_error());
    ct_st_writer_free(s->w);
    for (int i = 0; i < s->n_keep; i++) free(s->keep[i]);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) ct_fatal("test", "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

// config.json as a person would write it for this model (extra fields: what real configs carry).
static void write_config(const char *dir, const hf_model *m, const char *extra) {
    char text[2048], path[256];
    snprintf(text, sizeof text,
             "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n  \"hidden_size\": %d,\n"
             "  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
             "  \"num_key_value_heads\": %d,\n  \"vocab_size\": %d,\n  \"rms_norm_eps\": 1e-05,\n"
             "  \"rope_theta\": %.1f,\n  \"max_position_embeddings\": 131072,\n  \"hidden_act\": \"silu\",\n"
             "  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"bfloat16\",\n  \"bos_token_id\": 1,\n"
             "  \"attention_bias\": false,\n  \"rope_scaling\": %s%s\n}\n",
             C, F, L, NH, NKV, V, m->theta, m->lm_head ? "false" : "true",
             m->llama3 ? "{\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                         "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}"
                       : "null",
             extra ? extra : "");
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, text);
}

// Writes the tensors: one model.safetensors, or (shards) two files and an index whose
// weight_map says which holds what. skip: an HF name left out; reshape: one given a wrong shape.
static void write_tensors(const char *dir, const hf_model *m, int shards, int bf16, const char *skip, const char *reshape,
                          const char *extra_tensor) {
    shard s[2] = {{.w = ct_st_writer_new()}, {.w = ct_st_writer_new()}};
    char name[128], map[8192] = "";
    size_t used = 0;
#define PUT(file, nm, x, r, c)                                                                                        \
    do {                                                                                                              \
        if (skip && !strcmp(skip, nm)) break;                                                                         \
        int wrong = reshape && !strcmp(reshape, nm);                                                                  \
        put(&s[file], nm, x, wrong ? (r) / 2 : (r), wrong ? 2 * (c) : (c), bf16);                                    \
        used += (size_t)snprintf(map + used, sizeof map - used, "%s\n    \"%s\": \"model-0000%d-of-00002.safetensors\"", \
                                 used ? "," : "", nm, file + 1);                                                      \
    } while (0)
    PUT(0, "model.embed_tokens.weight", m->embed, V, C);
    for (int l = 0; l < L; l++) {
        int file = shards ? l % 2 : 0;  // layer 0 in the first shard, layer 1 in the second
#define LAYER(suffix, x, r, c)                                    \
    snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix); \
    PUT(file, name, x, r, c)
        LAYER("self_attn.q_proj.weight", m->q[l], NH * HS, C);
        LAYER("self_attn.k_proj.weight", m->k[l], NKV * HS, C);
        LAYER("self_attn.v_proj.weight", m->v[l], NKV * HS, C);
        LAYER("self_attn.o_proj.weight", m->o[l], C, NH * HS);
        LAYER("mlp.gate_proj.weight", m->gate[l], F, C);
        LAYER("mlp.up_proj.weight", m->up[l], F, C);
        LAYER("mlp.down_proj.weight", m->down[l], C, F);
        LAYER("input_layernorm.weight", m->in_norm[l], C, 1);
        LAYER("post_attention_layernorm.weight", m->post_norm[l], C, 1);
#undef LAYER
    }
    PUT(shards, "model.norm.weight", m->norm, C, 1);
    if (m->lm_head) PUT(shards, "lm_head.weight", m->lm_head, V, C);
    if (extra_tensor) PUT(0, extra_tensor, m->norm, C, 1);
#undef PUT
    char path[256];
    if (!shards) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        shard_write(&s[0], path);
        ct_st_writer_free(s[1].w);
        return;
    }
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/model-0000%d-of-00002.safetensors", dir, i + 1);
        shard_write(&s[i], path);
    }
    char *index = malloc(sizeof map + 128);
    snprintf(index, sizeof map + 128, "{\n  \"metadata\": {\"total_size\": 0},\n  \"weight_map\": {%s\n  }\n}\n", map);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    write_text(path, index);
    free(index);
}

static const char *make_dir(const char *name) {
    const char *dir = tmp_path(name);
    mkdir(dir, 0755);
    return dir;
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
    double loss = ct_model_step(&acts, &w, NULL, tokens, tokens + 1, 0.0f) / T;  // inputs (1, T), targets shifted
    ct_model_acts_free(&acts);
    ct_model_weights_free(&w);
    ct_param_table_free(&t);
    free(block);
    return loss;
}

static void check_variant(const char *name, int shards, int bf16, int tied, int llama3, double theta, int T) {
    hf_model hm;
    make_model(&hm, tied, bf16, llama3, theta);
    const char *dir = make_dir(name);
    write_config(dir, &hm, NULL);
    write_tensors(dir, &hm, shards, bf16, NULL, NULL, NULL);
    int32_t tokens[TMAX + 1];
    for (int i = 0; i <= T; i++) tokens[i] = (int32_t)(urand() * V);

    char out[256];
    snprintf(out, sizeof out, "%s.safetensors", dir);
    CHECK(ct_hf_import(dir, out, CT_HF_DTYPE_SOURCE) == CT_OK, "%s", ct_last_error());
    double got = ctitan_loss(out, tokens, T);
    double want = naive_loss(&hm, tokens, T, llama3, 0);
    double meta = naive_loss(&hm, tokens, T, llama3, 1);  // HF weights read with Meta's pairs
    printf("  %s: ctitan %.9f, HF reference %.9f, interleaved pairs %.6f", name, got, want, meta);
    CHECK_CLOSE(got, want, 1e-6, 0);  // fp32 against double: observed 1e-8 to 4e-8
    CHECK(fabs(meta - want) > 1e-3 * fabs(want), "the interleaved reading is not distinguishable: %g vs %g", meta, want);
    if (llama3) {
        double plain = naive_loss(&hm, tokens, T, 0, 0);
        printf(", without the llama3 scaling %.6f", plain);
        CHECK(fabs(plain - want) > 100 * 1e-6 * fabs(want), "rope scaling does not move the loss: %g vs %g", plain, want);
    }
    printf("\n");

    // The file is what ct_model_save would write for these dims, stored as the source.
    ct_model_config m;
    CHECK(ct_model_load_config(out, &m) == CT_OK && m.dim == C && m.n_layers == L && m.n_heads == NH &&
              m.n_kv_heads == NKV && m.vocab_size == V && m.ffn_hidden == F && m.rope_scaling == llama3 &&
              m.rope_theta == theta && m.norm_eps == 1e-5 && m.max_seq_len == 131072 && !strcmp(m.flavor, "hf"),
          "config read back wrong");
    ct_st_file *sf = ct_st_open(out);
    CHECK(sf && ct_st_find(sf, "output.weight")->dtype == (bf16 ? CT_BF16 : CT_F32), "stored dtype");
    ct_st_close(sf);

    // ct_hf_read_range (what the trainer's ranks will call) reads any range in ctitan's layout,
    // also ranges that start and end mid-row of a permuted tensor; a tp table opens too.
    ct_param_table t;
    ct_param_table_build(&t, &m);
    ct_hf_dir *f = ct_hf_open(dir, &t);
    CHECK(f != NULL, "%s", ct_last_error());
    if (f) {
        CHECK(ct_hf_source_dtype(f) == (bf16 ? CT_BF16 : CT_F32), "source dtype");
        ct_model_config m2;
        ct_param_table t2;
        float *block;
        if (ct_model_load_all(out, &m2, &t2, &block) == CT_OK) {
            const ct_param *p = ct_param_find(&t, "layers.1.attention.wk.weight");
            float part[45];
            ct_hf_read_range(f, p, 37, 45, part);
            CHECK(!memcmp(part, block + p->offset + 37, sizeof part), "a mid-row range of wk differs");
            p = ct_param_find(&t, "output.weight");
            ct_hf_read_range(f, p, 5, 45, part);
            CHECK(!memcmp(part, block + p->offset + 5, sizeof part), "output range differs");
            free(block);
            ct_param_table_free(&t2);
        }
        ct_hf_close(f);
    }
    ct_param_table tp;
    ct_param_table_build_tp(&tp, &m, 1, 2);
    f = ct_hf_open(dir, &tp);
    CHECK(f != NULL, "tp table: %s", ct_last_error());
    ct_hf_close(f);
    ct_param_table_free(&tp);
    ct_param_table_free(&t);
    free_model(&hm);
}

static void test_one_file_fp32_untied(void) { check_variant("plain", 0, 0, 0, 0, 10000.0, 16); }
static void test_shards_bf16_tied_llama3(void) { check_variant("sharded", 1, 1, 1, 1, 500000.0, 64); }

// ---- refusals -------------------------------------------------------------------------------------

// Imports dir and expects a refusal whose message holds `want` (and is one line), with no
// output file or tmp file left.
static void expect_refusal(const char *dir, const char *want) {
    char out[256], tmp[300];
    snprintf(out, sizeof out, "%s.out.safetensors", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    ct_status st = ct_hf_import(dir, out, CT_HF_DTYPE_SOURCE);
    const char *msg = ct_last_error();
    CHECK(st == CT_ERR && strstr(msg, want) && !strchr(msg, '\n'), "want '%s', got (%d) '%s'", want, st,
          st ? msg : "success");
    CHECK(!exists(out) && !exists(tmp), "a refused import left %s", out);
    if (st == CT_ERR) printf("  refused: %s\n", msg);
}

// A fresh good directory with one thing changed.
static const char *bad_dir(const char *name, const char *config_extra, const char *skip, const char *reshape,
                           const char *extra_tensor, int shards) {
    hf_model hm;
    make_model(&hm, 0, 0, 0, 10000.0);
    const char *dir = make_dir(name);
    write_config(dir, &hm, config_extra);
    write_tensors(dir, &hm, shards, 0, skip, reshape, extra_tensor);
    free_model(&hm);
    return dir;
}

static void test_refusals(void) {
    char path[300];
    const char *d = bad_dir("no_config", NULL, NULL, NULL, NULL, 0);
    snprintf(path, sizeof path, "%s/config.json", d);
    unlink(path);
    expect_refusal(d, "config.json: cannot open");

    expect_refusal(bad_dir("missing", NULL, "model.layers.1.mlp.down_proj.weight", NULL, NULL, 0),
                   "missing tensor model.layers.1.mlp.down_proj.weight (expected shape [32, 48])");
    expect_refusal(bad_dir("missing_head", NULL, "lm_head.weight", NULL, NULL, 1), "missing tensor lm_head.weight");
    expect_refusal(bad_dir("shape", NULL, NULL, "model.layers.0.self_attn.k_proj.weight", NULL, 0),
                   "tensor model.layers.0.self_attn.k_proj.weight has shape [8, 64], expected [16, 32]");
    expect_refusal(bad_dir("bias", NULL, NULL, NULL, "model.layers.0.self_attn.q_proj.bias", 0),
                   "unexpected tensor model.layers.0.self_attn.q_proj.bias");
    expect_refusal(bad_dir("mistral", ",\n  \"model_type\": \"mistral\"", NULL, NULL, NULL, 0),
                   "model_type \"mistral\" is not supported");
    expect_refusal(bad_dir("yarn", ",\n  \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}", NULL, NULL, NULL, 0),
                   "rope_scaling type yarn is not supported");
    expect_refusal(bad_dir("llama32",
                           ",\n  \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 32.0, \"low_freq_factor\": 1.0, "
                           "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}",
                           NULL, NULL, NULL, 0),
                   "llama3 rope_scaling factor 32");
    expect_refusal(bad_dir("attn_bias", ",\n  \"attention_bias\": true", NULL, NULL, NULL, 0), "attention_bias true");
    expect_refusal(bad_dir("head_dim", ",\n  \"head_dim\": 16", NULL, NULL, NULL, 0), "head_dim 16");
    expect_refusal(bad_dir("gelu", ",\n  \"hidden_act\": \"gelu\"", NULL, NULL, NULL, 0), "hidden_act \"gelu\"");
    expect_refusal(bad_dir("layers", ",\n  \"num_hidden_layers\": 2.5", NULL, NULL, NULL, 0),
                   "\"num_hidden_layers\" must be a positive integer");
    expect_refusal(bad_dir("huge", ",\n  \"num_hidden_layers\": 2000000000", NULL, NULL, NULL, 0),
                   "\"num_hidden_layers\" = 2000000000 is above ctitan's limit 16384");
    expect_refusal(bad_dir("huge_vocab", ",\n  \"vocab_size\": 2000000000", NULL, NULL, NULL, 0),
                   "\"vocab_size\" = 2000000000 is above ctitan's limit");

    d = bad_dir("no_type", NULL, NULL, NULL, NULL, 0);
    snprintf(path, sizeof path, "%s/config.json", d);
    write_text(path, "{\"hidden_size\": 32}");
    expect_refusal(d, "no \"model_type\"");
    write_text(path, "{\"model_type\": \"llama\", \"hidden_size\": 32,}");
    expect_refusal(d, "config.json: bad JSON at byte");

    d = bad_dir("no_weights", NULL, NULL, NULL, NULL, 0);
    snprintf(path, sizeof path, "%s/model.safetensors", d);
    unlink(path);
    expect_refusal(d, "no model.safetensors or model.safetensors.index.json");

    d = bad_dir("lost_shard", NULL, NULL, NULL, NULL, 1);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", d);
    unlink(path);
    expect_refusal(d, "model-00002-of-00002.safetensors: cannot open");

    // A good directory imports (the refusals above are each the one change).
    d = bad_dir("good", NULL, NULL, NULL, NULL, 1);
    snprintf(path, sizeof path, "%s.safetensors", d);
    CHECK(ct_hf_import(d, path, CT_F32) == CT_OK, "%s", ct_last_error());
}

// The forms config.json takes in the wild: transformers 5 keeps rope_theta and the scaling in
// rope_parameters; older files say "type" for "rope_type"; absent keys take LlamaConfig's defaults.
static void test_config_forms(void) {
    const char *dir = make_dir("forms"), *path = tmp_path("forms/config.json");
    const char *base = "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 112, "
                       "\"num_hidden_layers\": 2, \"num_attention_heads\": 8, \"vocab_size\": 96";
    const struct {
        const char *rest;
        double theta;
        int scaling, kv, max_len;
    } cases[] = {
        {", \"num_key_value_heads\": 2, \"max_position_embeddings\": 8192, \"rope_parameters\": {\"factor\": 8.0, "
         "\"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192, "
         "\"rope_theta\": 500000.0, \"rope_type\": \"llama3\"}}",
         500000, 1, 2, 8192},
        {", \"rope_parameters\": {\"rope_theta\": 250000.0, \"rope_type\": \"default\"}}", 250000, 0, 8, 0},
        {", \"rope_theta\": 5e5, \"rope_scaling\": {\"type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1, "
         "\"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}}",
         500000, 1, 8, 0},
        {"}", 10000, 0, 8, 0},  // HF's defaults: rope_theta 10000, kv heads = heads
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text, "%s%s", base, cases[i].rest);
        write_text(path, text);
        ct_model_config m;
        ct_status st = ct_hf_load_config(dir, &m);
        CHECK(st == CT_OK && m.rope_theta == cases[i].theta && m.rope_scaling == cases[i].scaling &&
                  m.n_kv_heads == cases[i].kv && m.max_seq_len == cases[i].max_len && m.head_dim == 8 &&
                  m.norm_eps == 1e-6 && !strcmp(m.flavor, "hf"),
              "case %zu: %s", i, st ? ct_last_error() : "wrong values");
    }
}

int main(void) {
    rng_state = 0x5eed1234abcdULL;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_hf_load_XXXXXX");
    if (!mkdtemp(tmpdir)) ct_fatal("test", "mkdtemp failed");
    CT_RUN(test_one_file_fp32_untied);
    CT_RUN(test_shards_bf16_tied_llama3);
    CT_RUN(test_config_forms);
    CT_RUN(test_refusals);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
    CT_TEST_EXIT();
}
