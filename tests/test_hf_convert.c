// Hugging Face export and import (checkpoint/hf.h): the name table and the RoPE row
// permutation against HF's own formula; the streaming safetensors writer against the one-pass
// writer, byte for byte; ctitan -> HF -> ctitan round trips (fp32 and bf16) that give the same
// file byte for byte (so identical tensors and metadata), with the HF file checked tensor by
// tensor through the raw reader; config.json's context (max_position_embeddings) with and without
// Llama 3.1 scaling; an export from a block in memory equal to one from a file; and
// the conversions' peak memory a few MiB, not the model.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint/hf.h"
#include "core/json.h"
#include "core/rng.h"
#include "test.h"

static char tmpdir[64];

static const char *tmp_path(const char *name) {
    static char buf[8][160];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

// Whole file into a malloc'd buffer (*n bytes); NULL if unreadable.
static unsigned char *slurp(const char *path, long *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*n + 1);
    if (fread(b, 1, (size_t)*n, f) != (size_t)*n) *n = -1;
    fclose(f);
    return b;
}

static int same_files(const char *a, const char *b) {
    long na = -1, nb = -1;
    unsigned char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = x && y && na == nb && na >= 0 && !memcmp(x, y, (size_t)na);
    free(x);
    free(y);
    return same;
}

// dim 48, 3 layers, 6 heads of 8, 2 kv heads (GQA), FFN 40, vocabulary 61, Llama 3.1 RoPE.
static ct_model_config tiny(void) {
    ct_model_config m = {0};
    strcpy(m.flavor, "debugmodel");
    m.dim = 48;
    m.n_layers = 3;
    m.n_heads = 6;
    m.n_kv_heads = 2;
    m.head_dim = 8;
    m.ffn_hidden = 40;
    m.vocab_size = 61;
    m.norm_eps = 1e-5;
    m.rope_theta = 500000;
    m.rope_scaling = 1;
    m.max_seq_len = 24;
    return m;
}

static float *random_block(const ct_param_table *t, uint64_t seed) {
    float *b = malloc((size_t)t->total * sizeof(float));
    ct_rng r;
    ct_rng_seed(&r, seed);
    for (long i = 0; i < t->total; i++) b[i] = ct_rng_next_normal(&r);
    return b;
}

// ---- conventions ------------------------------------------------------------------------------

static void test_names(void) {
    const char *pairs[][2] = {
        {"tok_embeddings.weight", "model.embed_tokens.weight"},
        {"layers.0.attention.wq.weight", "model.layers.0.self_attn.q_proj.weight"},
        {"layers.7.attention.wk.weight", "model.layers.7.self_attn.k_proj.weight"},
        {"layers.12.attention.wv.weight", "model.layers.12.self_attn.v_proj.weight"},
        {"layers.3.attention.wo.weight", "model.layers.3.self_attn.o_proj.weight"},
        {"layers.1.feed_forward.w1.weight", "model.layers.1.mlp.gate_proj.weight"},
        {"layers.1.feed_forward.w3.weight", "model.layers.1.mlp.up_proj.weight"},
        {"layers.1.feed_forward.w2.weight", "model.layers.1.mlp.down_proj.weight"},
        {"layers.125.attention_norm.weight", "model.layers.125.input_layernorm.weight"},
        {"layers.2.ffn_norm.weight", "model.layers.2.post_attention_layernorm.weight"},
        {"norm.weight", "model.norm.weight"},
        {"output.weight", "lm_head.weight"},
    };
    char out[160];
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        CHECK(ct_hf_name(pairs[i][0], out, sizeof out) == CT_OK && !strcmp(out, pairs[i][1]), "%s -> %s", pairs[i][0],
              out);
        CHECK(ct_hf_rope_permuted(pairs[i][0]) == (strstr(pairs[i][0], ".wq.") || strstr(pairs[i][0], ".wk.")), "%s",
              pairs[i][0]);
    }
    CHECK(ct_hf_name("layers.0.attention.wz.weight", out, sizeof out) == CT_ERR, "unknown name accepted");
    CHECK(ct_hf_name("lm_head.weight", out, sizeof out) == CT_ERR, "an HF name is no ctitan name");
}

// HF's convert_llama_weights_to_hf.py: w.view(n_heads, hd // 2, 2, dim).transpose(1, 2).reshape(...):
// element (h, i, j) of the view -- Meta row h·hd + 2i + j -- lands at HF row h·hd + j·hd/2 + i.
static void test_row_permutation(void) {
    for (long hd = 2; hd <= 16; hd += 2)
        for (long h = 0; h < 3; h++)
            for (long i = 0; i < hd / 2; i++)
                for (long j = 0; j < 2; j++) {
                    long meta = h * hd + 2 * i + j, hf = h * hd + j * (hd / 2) + i;
                    CHECK(ct_hf_row_of_ct(meta, hd) == hf, "hd %ld: row %ld -> %ld, want %ld", hd, meta,
                          ct_hf_row_of_ct(meta, hd), hf);
                    CHECK(ct_hf_row_to_ct(hf, hd) == meta, "hd %ld: back %ld -> %ld", hd, hf, ct_hf_row_to_ct(hf, hd));
                }
}

// ---- the streaming writer ------------------------------------------------------------------------

static void test_streaming_writer(void) {
    enum { NA = 37, NB = 0, NC = 300 };
    float a[NA], c[NC];
    uint16_t b[1];
    for (int i = 0; i < NA; i++) a[i] = 0.25f * (float)i - 3.0f;
    for (int i = 0; i < NC; i++) c[i] = 1.0f / (float)(i + 1);
    const int64_t sa[2] = {37, 1}, sb[1] = {0}, sc[2] = {10, 30};
    // The one-pass writer: A f32, an empty tensor, C stored as bf16.
    ct_st_writer *w = ct_st_writer_new();
    ct_st_writer_metadata(w, "k", "v");
    ct_st_writer_add(w, "A", CT_F32, 2, sa, CT_F32, a);
    ct_st_writer_add(w, "B", CT_BF16, 1, sb, CT_BF16, b);
    ct_st_writer_add(w, "C", CT_BF16, 2, sc, CT_F32, c);
    CHECK(ct_st_writer_write(w, tmp_path("whole.safetensors")) == CT_OK, "%s", ct_last_error());
    ct_st_writer_free(w);
    // The same streamed in pieces of 5 elements: pieces run over from A into C.
    float all[NA + NC];
    memcpy(all, a, sizeof a);
    memcpy(all + NA, c, sizeof c);
    w = ct_st_writer_new();
    ct_st_writer_metadata(w, "k", "v");
    ct_st_writer_add(w, "A", CT_F32, 2, sa, CT_F32, NULL);
    ct_st_writer_add(w, "B", CT_BF16, 1, sb, CT_F32, NULL);
    ct_st_writer_add(w, "C", CT_BF16, 2, sc, CT_F32, NULL);
    CHECK(ct_st_writer_write(w, tmp_path("never.safetensors")) == CT_ERR, "declared entries written in one pass");
    CHECK(ct_st_writer_begin(w, tmp_path("stream.safetensors")) == CT_OK, "%s", ct_last_error());
    CHECK(ct_st_writer_add(w, "D", CT_F32, 2, sa, CT_F32, NULL) == CT_ERR, "add after the header");
    for (int i = 0; i < NA + NC; i += 5)
        CHECK(ct_st_writer_append(w, all + i, NA + NC - i < 5 ? NA + NC - i : 5) == CT_OK, "%s", ct_last_error());
    CHECK(ct_st_writer_append(w, all, 1) == CT_ERR, "append past the last tensor accepted");
    CHECK(ct_st_writer_finish(w) == CT_OK, "%s", ct_last_error());
    ct_st_writer_free(w);
    CHECK(same_files(tmp_path("whole.safetensors"), tmp_path("stream.safetensors")), "streamed file differs");
    CHECK(!exists(tmp_path("stream.safetensors.tmp")), "tmp file left");

    // A stream that ends short is refused and leaves neither the file nor its tmp.
    w = ct_st_writer_new();
    ct_st_writer_add(w, "A", CT_F32, 2, sa, CT_F32, NULL);
    CHECK(ct_st_writer_begin(w, tmp_path("short.safetensors")) == CT_OK, "%s", ct_last_error());
    ct_st_writer_append(w, a, 10);
    CHECK(ct_st_writer_finish(w) == CT_ERR && strstr(ct_last_error(), "at 10 of 37"), "%s", ct_last_error());
    ct_st_writer_free(w);
    CHECK(!exists(tmp_path("short.safetensors")) && !exists(tmp_path("short.safetensors.tmp")), "short stream left a file");
    // Freed mid-stream: the tmp file goes too.
    w = ct_st_writer_new();
    ct_st_writer_add(w, "A", CT_F32, 2, sa, CT_F32, NULL);
    ct_st_writer_begin(w, tmp_path("abandoned.safetensors"));
    ct_st_writer_free(w);
    CHECK(!exists(tmp_path("abandoned.safetensors.tmp")), "abandoned stream left its tmp file");

    // The range reader: any piece of a bf16 tensor equals the same piece of the whole.
    ct_st_file *f = ct_st_open(tmp_path("stream.safetensors"));
    CHECK(f != NULL, "%s", ct_last_error());
    if (!f) return;
    const ct_st_tensor *t = ct_st_find(f, "C");
    float whole[NC], part[7];
    CHECK(ct_st_read_f32(f, "C", whole, NC) == CT_OK, "%s", ct_last_error());
    CHECK(ct_st_read_f32_range(t, 123, 7, part) == CT_OK && !memcmp(part, whole + 123, sizeof part), "range");
    CHECK(ct_st_read_f32_range(t, 295, 7, part) == CT_ERR, "range past the end accepted");
    ct_st_close(f);
}

// ---- round trips ------------------------------------------------------------------------------

// The HF file holds every parameter under its HF name, q/k rows permuted as HF's formula says
// and everything else as it is; metadata format "pt" (transformers requires it).
static void check_hf_file(const char *dir, const ct_param_table *t, const ct_model_config *m, const float *block,
                          ct_dtype dtype) {
    char path[200], name[160];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ct_st_file *f = ct_st_open(path);
    CHECK(f != NULL, "%s", ct_last_error());
    if (!f) return;
    CHECK(ct_st_num_tensors(f) == t->count, "%d tensors, want %d", ct_st_num_tensors(f), t->count);
    const char *fmt = ct_st_metadata(f, "format");
    CHECK(fmt && !strcmp(fmt, "pt"), "format %s", fmt ? fmt : "(none)");
    const long hd = m->head_dim;
    for (int i = 0; i < t->count; i++) {
        const ct_param *p = &t->params[i];
        ct_hf_name(p->name, name, sizeof name);
        const ct_st_tensor *x = ct_st_find(f, name);
        CHECK(x && x->dtype == dtype && x->ndim == p->ndim && x->shape[0] == p->shape[0] &&
                  (p->ndim == 1 || x->shape[1] == p->shape[1]),
              "%s: missing or wrong shape / dtype", name);
        if (!x) continue;
        float *v = malloc((size_t)p->numel * sizeof(float));
        ct_st_read_f32_range(x, 0, p->numel, v);
        const long C = p->shape[1];
        long bad = -1;
        for (long r = 0; r < p->shape[0] && bad < 0; r++) {
            // HF row r = h·hd + j·hd/2 + i holds Meta row h·hd + 2i + j.
            long h = r / hd, rr = r % hd, j = rr / (hd / 2), ii = rr % (hd / 2);
            long src = ct_hf_rope_permuted(p->name) ? h * hd + 2 * ii + j : r;
            for (long col = 0; col < C && bad < 0; col++) {
                float want = block[p->offset + src * C + col];
                if (dtype == CT_BF16) want = ct_bf16_to_f32(ct_f32_to_bf16(want));
                if (memcmp(&want, &v[r * C + col], sizeof want)) bad = r * C + col;
            }
        }
        CHECK(bad < 0, "%s: element %ld differs", name, bad);
        free(v);
    }
    ct_st_close(f);
}

static void check_config_json(const char *dir, const ct_model_config *m, const char *torch_dtype) {
    char path[200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    ct_json *c = ct_json_read_file(path, "config.json", 1u << 20);
    CHECK(c != NULL, "%s", ct_last_error());
    if (!c) return;
    const ct_json *arch = ct_json_get(c, "architectures");
    CHECK(arch && arch->type == CT_JSON_ARRAY && arch->n == 1 && !strcmp(arch->items[0].string, "LlamaForCausalLM"),
          "architectures");
    const struct {
        const char *key;
        double want;
    } nums[] = {{"hidden_size", m->dim},          {"intermediate_size", m->ffn_hidden},
                {"num_hidden_layers", m->n_layers}, {"num_attention_heads", m->n_heads},
                {"num_key_value_heads", m->n_kv_heads}, {"vocab_size", m->vocab_size},
                {"rms_norm_eps", m->norm_eps},    {"rope_theta", m->rope_theta}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        const ct_json *v = ct_json_get(c, nums[i].key);
        CHECK(v && v->type == CT_JSON_NUMBER && v->number == nums[i].want, "%s", nums[i].key);
    }
    const ct_json *mt = ct_json_get(c, "model_type"), *act = ct_json_get(c, "hidden_act"), *dt = ct_json_get(c, "torch_dtype");
    CHECK(mt && !strcmp(mt->string, "llama") && act && !strcmp(act->string, "silu"), "model_type / hidden_act");
    CHECK(dt && !strcmp(dt->string, torch_dtype), "torch_dtype %s", dt ? dt->string : "(none)");
    const ct_json *tie = ct_json_get(c, "tie_word_embeddings");
    CHECK(tie && tie->type == CT_JSON_BOOL && !tie->boolean, "tie_word_embeddings");
    const ct_json *rs = ct_json_get(c, "rope_scaling");
    if (m->rope_scaling) {
        const ct_json *type = ct_json_get(rs, "rope_type"), *factor = ct_json_get(rs, "factor"),
                      *lo = ct_json_get(rs, "low_freq_factor"), *hi = ct_json_get(rs, "high_freq_factor"),
                      *orig = ct_json_get(rs, "original_max_position_embeddings");
        CHECK(type && !strcmp(type->string, "llama3") && factor && factor->number == 8 && lo && lo->number == 1 && hi &&
                  hi->number == 4 && orig && orig->number == 8192,
              "rope_scaling");
    } else {
        CHECK(rs && rs->type == CT_JSON_NULL, "rope_scaling should be null");
    }
    ct_json_free(c);
}

static void round_trip(ct_dtype dtype) {
    ct_model_config m = tiny();
    m.rope_scaling = dtype == CT_F32;  // both settings of the flag
    ct_param_table t;
    ct_param_table_build(&t, &m);
    float *block = random_block(&t, dtype == CT_F32 ? 11 : 12);
    const char *a = tmp_path(dtype == CT_F32 ? "a32.safetensors" : "a16.safetensors");
    const char *dir = tmp_path(dtype == CT_F32 ? "hf32/nested" : "hf16");  // a missing parent is created
    const char *b = tmp_path(dtype == CT_F32 ? "b32.safetensors" : "b16.safetensors");
    CHECK(ct_model_save(a, &t, &m, block, dtype) == CT_OK, "%s", ct_last_error());
    CHECK(ct_hf_export(a, dir, NULL, CT_HF_DTYPE_SOURCE) == CT_OK, "%s", ct_last_error());
    check_hf_file(dir, &t, &m, block, dtype);
    check_config_json(dir, &m, dtype == CT_F32 ? "float32" : "bfloat16");
    CHECK(ct_hf_import(dir, b, CT_HF_DTYPE_SOURCE) == CT_OK, "%s", ct_last_error());
    // Identical bytes: the same tensors bit for bit, the same metadata, in the same order.
    CHECK(same_files(a, b), "%s and %s differ", a, b);
    ct_model_config m2;
    ct_param_table t2;
    float *block2 = NULL;
    CHECK(ct_model_load_all(b, &m2, &t2, &block2) == CT_OK, "%s", ct_last_error());
    if (block2) {
        CHECK(m2.dim == m.dim && m2.n_layers == m.n_layers && m2.n_heads == m.n_heads && m2.n_kv_heads == m.n_kv_heads &&
                  m2.vocab_size == m.vocab_size && m2.ffn_hidden == m.ffn_hidden && m2.norm_eps == m.norm_eps &&
                  m2.rope_theta == m.rope_theta && m2.rope_scaling == m.rope_scaling &&
                  m2.max_seq_len == m.max_seq_len && !strcmp(m2.flavor, m.flavor),
              "config differs");
        ct_model_config from_dir;
        CHECK(ct_hf_load_config(dir, &from_dir) == CT_OK && from_dir.max_seq_len == m.max_seq_len &&
                  from_dir.head_dim == m.head_dim,
              "%s", ct_last_error());
        long differ = 0;
        for (long i = 0; i < t.total; i++) {
            float want = dtype == CT_F32 ? block[i] : ct_bf16_to_f32(ct_f32_to_bf16(block[i]));
            differ += memcmp(&want, &block2[i], sizeof want) != 0;
        }
        CHECK(differ == 0, "%ld elements differ", differ);
        ct_param_table_free(&t2);
        free(block2);
    }
    // An explicit dtype overrides the source's: fp32 from bf16, and back to bf16 is the same file.
    if (dtype == CT_BF16) {
        const char *dir32 = tmp_path("hf16as32");
        CHECK(ct_hf_export(a, dir32, NULL, CT_F32) == CT_OK, "%s", ct_last_error());
        float *rounded = malloc((size_t)t.total * sizeof(float));
        for (long i = 0; i < t.total; i++) rounded[i] = ct_bf16_to_f32(ct_f32_to_bf16(block[i]));
        check_hf_file(dir32, &t, &m, rounded, CT_F32);
        free(rounded);
        CHECK(ct_hf_import(dir32, tmp_path("c16.safetensors"), CT_BF16) == CT_OK, "%s", ct_last_error());
        CHECK(same_files(a, tmp_path("c16.safetensors")), "bf16 -> fp32 HF -> bf16 differs");
    }
    free(block);
    ct_param_table_free(&t);
}

static void test_round_trip_fp32(void) { round_trip(CT_F32); }
static void test_round_trip_bf16(void) { round_trip(CT_BF16); }

static double json_number(const ct_json *o, const char *key) {
    const ct_json *v = o ? ct_json_get(o, key) : NULL;
    return v && v->type == CT_JSON_NUMBER ? v->number : -1;
}

// config.json's context: what the model supports -- with Llama 3.1's rope scaling Meta's
// 131072, with rope_scaling still saying the original 8192 (transformers warns on every load
// when the original is not below max_position_embeddings); without scaling Llama 3's 8192; a
// longer training length as itself. ctitan_max_seq_len keeps the training length, so export
// then import gives the same model; a config without it (Meta's) reads as its
// max_position_embeddings.
static void test_config_context_under_rope_scaling(void) {
    const struct {
        int scaling, seq_len, want;
    } cases[] = {{1, 24, 131072}, {1, 8192, 131072}, {1, 262144, 262144}, {0, 24, 8192}, {0, 16384, 16384}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ct_model_config m = tiny();
        m.rope_scaling = cases[i].scaling;
        m.max_seq_len = cases[i].seq_len;
        ct_param_table t;
        ct_param_table_build(&t, &m);
        float *block = random_block(&t, 20 + i);
        char name[64];
        snprintf(name, sizeof name, "ctx%zu", i);
        const char *a = tmp_path("ctx_a.safetensors"), *b = tmp_path("ctx_b.safetensors"), *dir = tmp_path(name);
        CHECK(ct_model_save(a, &t, &m, block, CT_F32) == CT_OK, "%s", ct_last_error());
        CHECK(ct_hf_export(a, dir, NULL, CT_HF_DTYPE_SOURCE) == CT_OK, "%s", ct_last_error());
        char path[300];
        snprintf(path, sizeof path, "%s/config.json", dir);
        ct_json *c = ct_json_read_file(path, "config.json", 1u << 20);
        CHECK(c != NULL, "%s", ct_last_error());
        double max_pos = json_number(c, "max_position_embeddings");
        CHECK(max_pos == cases[i].want, "scaling %d, trained %d: max_position_embeddings %g, want %d", cases[i].scaling,
              cases[i].seq_len, max_pos, cases[i].want);
        CHECK(json_number(c, "ctitan_max_seq_len") == cases[i].seq_len, "ctitan_max_seq_len %g",
              json_number(c, "ctitan_max_seq_len"));
        if (cases[i].scaling) {
            double orig = json_number(c ? ct_json_get(c, "rope_scaling") : NULL, "original_max_position_embeddings");
            CHECK(orig == 8192 && orig < max_pos, "rope_scaling's original_max_position_embeddings %g (max %g)", orig,
                  max_pos);
        }
        ct_json_free(c);
        CHECK(ct_hf_import(dir, b, CT_HF_DTYPE_SOURCE) == CT_OK, "%s", ct_last_error());
        CHECK(same_files(a, b), "scaling %d, trained %d: export -> import is not the same file", cases[i].scaling,
              cases[i].seq_len);
        ct_model_config back;
        CHECK(ct_hf_load_config(dir, &back) == CT_OK && back.max_seq_len == m.max_seq_len &&
                  back.rope_scaling == m.rope_scaling,
              "read back: max_seq_len %d, rope_scaling %d (%s)", back.max_seq_len, back.rope_scaling, ct_last_error());
        if (i == 0) {
            // Meta's form: no ctitan_ keys.
            long len = 0;
            char *text = (char *)slurp(path, &len);
            if (text && len >= 0) text[len] = 0;
            char *key = text && len >= 0 ? strstr(text, "  \"ctitan_max_seq_len\"") : NULL;
            CHECK(key != NULL, "no ctitan_max_seq_len in %s", path);
            if (key) {
                strcpy(key, "  \"_name_or_path\": \"meta-llama/Llama-3.1-8B\"\n}\n");
                FILE *f = fopen(path, "w");
                fputs(text, f);
                fclose(f);
                CHECK(ct_hf_load_config(dir, &back) == CT_OK && back.max_seq_len == 131072 && back.rope_scaling == 1,
                      "Meta's form: max_seq_len %d, rope_scaling %d (%s)", back.max_seq_len, back.rope_scaling,
                      ct_last_error());
            }
            free(text);
        }
        free(block);
        ct_param_table_free(&t);
    }
}

// ct_hf_save (the trainer's gathered block) writes what ct_hf_export writes from the file.
static void test_save_from_block(void) {
    ct_model_config m = tiny();
    ct_param_table t;
    ct_param_table_build(&t, &m);
    float *block = random_block(&t, 13);
    CHECK(ct_model_save(tmp_path("s.safetensors"), &t, &m, block, CT_F32) == CT_OK, "%s", ct_last_error());
    CHECK(ct_hf_export(tmp_path("s.safetensors"), tmp_path("hf_file"), NULL, CT_BF16) == CT_OK, "%s", ct_last_error());
    CHECK(ct_hf_save(tmp_path("hf_block"), &t, &m, block, CT_BF16, NULL) == CT_OK, "%s", ct_last_error());
    CHECK(same_files(tmp_path("hf_file/model.safetensors"), tmp_path("hf_block/model.safetensors")), "tensors differ");
    CHECK(same_files(tmp_path("hf_file/config.json"), tmp_path("hf_block/config.json")), "configs differ");
    CHECK(!exists(tmp_path("hf_block/tokenizer.json")) && !exists(tmp_path("hf_block/generation_config.json")),
          "tokenizer files without a tokenizer");
    ct_param_table tp;
    ct_param_table_build_tp(&tp, &m, 0, 2);
    CHECK(ct_hf_save(tmp_path("hf_tp"), &tp, &m, block, CT_F32, NULL) == CT_ERR && strstr(ct_last_error(), "tp"),
          "a tp slice exported: %s", ct_last_error());
    CHECK(ct_hf_save(tmp_path("hf_f16"), &t, &m, block, CT_F16, NULL) == CT_ERR, "F16 export accepted");
    ct_param_table_free(&tp);
    ct_param_table_free(&t);
    free(block);
}

// Peak resident memory (KiB) of a child that runs fn(arg) and exits: the conversion's own, not
// this test's.
static long child_peak_kib(ct_status (*fn)(const char *, const char *), const char *a, const char *b) {
    pid_t pid = fork();
    if (pid == 0) _exit(fn && fn(a, b) != CT_OK ? 1 : 0);
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
    return ru.ru_maxrss;
}
static ct_status do_export(const char *model, const char *dir) { return ct_hf_export(model, dir, NULL, CT_HF_DTYPE_SOURCE); }
static ct_status do_import(const char *dir, const char *model) { return ct_hf_import(dir, model, CT_HF_DTYPE_SOURCE); }

// The conversions stream: a 112 MB model (a 32 MB embedding and output among 60 tensors) goes
// out and back in a few MiB more than a process that does nothing (4 MiB piece buffer, pages
// let go as they are read), well under one large tensor.
static void test_streaming_memory(void) {
    ct_model_config m = tiny();
    m.dim = 512, m.n_heads = 8, m.n_kv_heads = 2, m.head_dim = 64, m.ffn_hidden = 1024, m.vocab_size = 16384;
    m.n_layers = 6;
    ct_param_table t;
    ct_param_table_build(&t, &m);
    float *block = random_block(&t, 14);
    const char *model = tmp_path("big.safetensors"), *dir = tmp_path("hf_big"), *back = tmp_path("big_back.safetensors");
    CHECK(ct_model_save(model, &t, &m, block, CT_F32) == CT_OK, "%s", ct_last_error());
    free(block);  // the parent stays small, so its children start small
    const long model_kib = t.total * 4 / 1024;
    long idle = child_peak_kib(NULL, NULL, NULL), out = child_peak_kib(do_export, model, dir),
         in = child_peak_kib(do_import, dir, back);
    printf("  model %ld KiB; peak RSS of a child: idle %ld KiB, export %ld KiB, import %ld KiB\n", model_kib, idle, out,
           in);
    CHECK(idle > 0 && out > 0 && in > 0, "a child failed");
    CHECK(out - idle < 16 * 1024 && in - idle < 16 * 1024, "a conversion held more than 16 MiB: %ld, %ld KiB", out - idle,
          in - idle);
    CHECK(same_files(model, back), "the big model did not come back the same");
    ct_param_table_free(&t);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_hf_convert_XXXXXX");
    if (!mkdtemp(tmpdir)) ct_fatal("test", "mkdtemp failed");
    CT_RUN(test_names);
    CT_RUN(test_row_permutation);
    CT_RUN(test_streaming_writer);
    CT_RUN(test_round_trip_fp32);
    CT_RUN(test_round_trip_bf16);
    CT_RUN(test_config_context_under_rope_scaling);
    CT_RUN(test_save_from_block);
    CT_RUN(test_streaming_memory);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
    CT_TEST_EXIT();
}
