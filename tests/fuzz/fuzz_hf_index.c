// Fuzz target: a Hugging Face model.safetensors.index.json (ct_hf_open, checkpoint/hf_read.c,
// through core/json.c): the map from every tensor name to the shard that holds it, which
// decides which files a conversion opens. The input is written as the index of a folder that
// holds a fixed tiny model's config.json and three shards; the index names tensors and shards at
// will (the real ones, missing ones, paths, a shard whose copy of a tensor has the wrong shape
// or dtype, tensors the model does not read).
//
// Properties beyond "no crash, no leak, no UB": an index that opens binds every parameter to a
// tensor with the right values -- every tensor's elements are a function of its name and
// position alone, so each parameter, read back in ctitan's layout (q/k rows permuted back),
// must hold exactly what its HF tensor holds, whichever shard the index sent it to.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/hf_internal.h"
#include "checkpoint/safetensors.h"
#include "core/float_formats.h"
#include "fuzz_util.h"

static ct_model_config model;
static ct_param_table table;
static char dir[1024];
static void *pending[64];  // data of the tensors added, until their shards are written
static int n_pending;

// Every HF tensor's element e is base(name) + e % 16: small integers, exact in F32, BF16, F16.
static float base_of(const char *name) {
    uint32_t h = 2166136261u;
    for (const char *c = name; *c; c++) h = (h ^ (uint8_t)*c) * 16777619u;
    return (float)(h % 64);
}

// Adds tensor `name` of shape [r, c] (c 0: [r]) stored as dtype to w, with the values above.
static void add(ct_st_writer *w, const char *name, ct_dtype dtype, long r, long c) {
    long n = r * (c ? c : 1);
    float base = base_of(name);
    void *buf = malloc((size_t)n * 4);  // read by write_shard; freed at the end of setup
    pending[n_pending++] = buf;
    for (long e = 0; e < n; e++) {
        float v = base + (float)(e % 16);
        if (dtype == CT_F16) ((uint16_t *)buf)[e] = ct_f32_to_f16(v);
        else if (dtype == CT_I32) ((int32_t *)buf)[e] = (int32_t)v;
        else ((float *)buf)[e] = v;
    }
    int64_t shape[2] = {r, c};
    ct_dtype data = dtype == CT_BF16 ? CT_F32 : dtype;
    ct_fuzz_check(ct_st_writer_add(w, name, dtype, c ? 2 : 1, shape, data, buf) == CT_OK, "%s", ct_last_error());
}

static void write_shard(ct_st_writer *w, const char *file) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    ct_fuzz_check(ct_st_writer_write(w, path) == CT_OK, "%s", ct_last_error());
    ct_st_writer_free(w);
}

// The folder: config.json for a 2-layer model of dim 8, shards 1 and 2 of the model as HF
// splits it (layer 0 in the first, layer 1 and the head in the second, with a RoPE buffer of
// old checkpoints), and odd.safetensors with copies to send tensors to: a BF16 and an F16
// one that fit, and one of the wrong shape, one of an integer dtype, one the model lacks.
static void setup(void) {
    model = (ct_model_config){.family = ct_model_family_find("llama3"), .flavor = "fuzz", .dim = 8, .n_layers = 2,
                              .n_heads = 2, .n_kv_heads = 1, .head_dim = 4, .ffn_hidden = 8, .vocab_size = 16,
                              .norm_eps = 1e-5, .rope_theta = 500000, .max_seq_len = 16};
    ct_param_table_build(&table, &model);
    snprintf(dir, sizeof dir, "%s/hf", ct_fuzz_tmpdir());
    mkdir(dir, 0755);
    ct_fuzz_check(ct_hf_config_write(dir, &model, CT_F32, NULL) == CT_OK, "%s", ct_last_error());
    ct_st_writer *s[2] = {ct_st_writer_new(), ct_st_writer_new()};
    char hf[256];
    for (int i = 0; i < table.count; i++) {
        const ct_param *p = &table.params[i];
        ct_fuzz_check(ct_hf_name(p->name, hf, sizeof hf) == CT_OK, "%s", p->name);
        int second = strstr(hf, "layers.1.") || !strncmp(hf, "lm_head", 7) || !strcmp(hf, "model.norm.weight");
        add(s[second], hf, CT_F32, p->global_shape[0], p->ndim == 2 ? p->global_shape[1] : 0);
    }
    add(s[1], "model.layers.1.self_attn.rotary_emb.inv_freq", CT_F32, 2, 0);
    write_shard(s[0], "model-00001-of-00002.safetensors");
    write_shard(s[1], "model-00002-of-00002.safetensors");
    ct_st_writer *o = ct_st_writer_new();
    add(o, "model.norm.weight", CT_BF16, 8, 0);
    add(o, "model.layers.0.input_layernorm.weight", CT_F16, 8, 0);
    add(o, "model.layers.1.mlp.up_proj.weight", CT_F32, 8, 4);        // [8, 4], not [8, 8]
    add(o, "model.embed_tokens.weight", CT_I32, 16, 8);
    add(o, "model.extra.weight", CT_F32, 4, 0);
    write_shard(o, "odd.safetensors");
    while (n_pending) free(pending[--n_pending]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) setup();
    char path[1200];
    ct_fuzz_write("hf/model.safetensors.index.json", data, size, path, sizeof path);
    ct_hf_dir *f = ct_hf_open(dir, &table);
    if (!f) return 0;
    ct_dtype src = ct_hf_source_dtype(f);
    ct_fuzz_check(src == CT_F32 || src == CT_BF16, "source dtype %d", (int)src);
    char hf[256];
    for (int i = 0; i < table.count; i++) {
        const ct_param *p = &table.params[i];
        long n = p->numel, C = p->ndim == 2 ? p->global_shape[1] : 1;
        float *got = malloc((size_t)n * sizeof *got);
        ct_hf_read_range(f, p, 0, n, got);
        ct_hf_name(p->name, hf, sizeof hf);
        float base = base_of(hf);
        for (long e = 0; e < n; e++) {
            long hf_e = ct_hf_rope_permuted(p->name) ? ct_hf_row_of_ct(e / C, model.head_dim) * C + e % C : e;
            ct_fuzz_check(got[e] == base + (float)(hf_e % 16), "%s element %ld: %g, expected %g", p->name, e,
                          (double)got[e], (double)(base + (float)(hf_e % 16)));
        }
        free(got);
    }
    ct_hf_close(f);
    return 0;
}
