// `ctitan convert --to hf --model MODEL.safetensors|STEP_DIR --out DIR [--tokenizer TOK] [--dtype bf16|fp32]`
// `ctitan convert --from hf --model DIR --out MODEL.safetensors [--dtype bf16|fp32]`
// Moves a model to and from the Hugging Face layout (checkpoint/hf.h): a directory that
// transformers loads as LlamaForCausalLM (a llama3 model) or Qwen3MoeForCausalLM (llama3_moe),
// and such a directory (also a sharded one) back into ctitan's model file. Streams tensor by tensor; --dtype defaults to the source's.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/hf.h"
#include "checkpoint/model_file.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "train/hf_vocab.h"
#include "data/tokenizer.h"

static int fail(const char *msg) {
    fprintf(stderr, "ctitan convert: %s\n", msg);
    return 1;
}

static int to_hf_file(const char *model, const char *named, const char *out, const char *tok_path, ct_dtype dtype);

// A checkpoint's step folder as a model file beside `out` (the exporter streams from a file),
// into tmp; CT_ERR with the reason.
static ct_status step_folder_as_model_file(const char *dir, const char *out, char *tmp, size_t n) {
    ct_model_config m;
    ct_param_table t;
    float *full;
    if (ct_model_load_all(dir, &m, &t, &full)) return CT_ERR;
    snprintf(tmp, n, "%s.from-checkpoint.safetensors", out);
    ct_status st = ct_model_save(tmp, &t, &m, full, CT_F32);
    free(full);
    ct_param_table_free(&t);
    return st;
}

static int to_hf(const char *model, const char *out, const char *tok_path, ct_dtype dtype) {
    char tmp[4096] = "";
    const char *src = model;
    if (ct_model_is_step_folder(model)) {
        if (step_folder_as_model_file(model, out, tmp, sizeof tmp)) {
            if (tmp[0]) unlink(tmp);
            return fail(ct_last_error());
        }
        src = tmp;
    }
    int rc = to_hf_file(src, model, out, tok_path, dtype);
    if (tmp[0]) unlink(tmp);
    return rc;
}

static int to_hf_file(const char *model, const char *named, const char *out, const char *tok_path, ct_dtype dtype) {
    ct_hf_vocab_view vv = {0};
    if (tok_path) {
        ct_model_config m;
        if (ct_model_load_config(model, &m) || ct_hf_vocab_load(&vv, tok_path, m.vocab_size)) {
            ct_hf_vocab_free(&vv);
            return fail(ct_last_error());
        }
    }
    ct_status st = ct_hf_export(model, out, tok_path ? &vv.v : NULL, dtype);
    ct_hf_vocab_free(&vv);
    if (st) return fail(ct_last_error());
    ct_model_config m;
    int moe = ct_model_load_config(model, &m) == CT_OK && m.n_experts > 0;
    printf("convert: %s -> %s (Hugging Face %s%s)\n", named, out, moe ? "Qwen3MoeForCausalLM" : "LlamaForCausalLM",
           tok_path ? ", with tokenizer" : "");
    return 0;
}

static int from_hf(const char *dir, const char *out, ct_dtype dtype) {
    if (ct_hf_import(dir, out, dtype)) return fail(ct_last_error());
    printf("convert: %s -> %s (ctitan model file)\n", dir, out);
    return 0;
}

int ct_cmd_convert(int argc, char **argv) {
    const char *to = NULL, *from = NULL, *model = NULL, *out = NULL, *tok = NULL, *dtype_name = NULL;
    ct_dtype dtype = CT_HF_DTYPE_SOURCE;
    const ct_opt opts[] = {
        {"to", 0, CT_OPT_STR, &to, "hf", "write a Hugging Face directory from a ctitan model file", 0, 0},
        {"from", 0, CT_OPT_STR, &from, "hf", "read a Hugging Face directory into a ctitan model file", 0, 0},
        {"model", 0, CT_OPT_STR, &model, "PATH", "the source: MODEL.safetensors or a checkpoint's step-N folder (--to hf), or DIR (--from hf)", 0, 0},
        {"out", 0, CT_OPT_STR, &out, "PATH", "the result: DIR (--to hf) or MODEL.safetensors (--from hf)", 0, 0},
        {"tokenizer", 0, CT_OPT_STR, &tok, "TOK", "--to hf: a tiktoken rank file (written as HF tokenizer files) or a tokenizer.json / its folder (copied)", 0, 0},
        {"dtype", 0, CT_OPT_STR, &dtype_name, "bf16|fp32", "stored precision (default: the source's)", 0, 0},
    };
    const ct_opt_spec spec = {
        "ctitan convert", "--to hf --model MODEL.safetensors --out DIR [--tokenizer TOK] [--dtype bf16|fp32]\n"
                          "       ctitan convert --from hf --model DIR --out MODEL.safetensors [--dtype bf16|fp32]",
        "--to hf writes DIR for transformers' LlamaForCausalLM (a llama3 model) or Qwen3MoeForCausalLM\n"
        "(llama3_moe): model.safetensors (HF names, q/k rows in HF's\n"
        "RoPE layout), config.json, and with --tokenizer tokenizer.json, tokenizer_config.json,\n"
        "generation_config.json, original/tokenizer.model. --from hf reads DIR (model.safetensors or\n"
        "model.safetensors.index.json + shards, config.json). --dtype bf16 only when every source tensor is.\n",
        opts, (int)(sizeof opts / sizeof opts[0]), NULL, NULL};
    int prc = ct_opt_parse(&spec, argc, argv);
    if (prc) return prc == CT_OPT_HELP ? 0 : 2;
    if (dtype_name && ct_model_dtype_parse(dtype_name, &dtype)) return fail(ct_last_error()) + 1;
    if (!!to == !!from || (to && strcmp(to, "hf")) || (from && strcmp(from, "hf")) || !model || !out) {
        fprintf(stderr, "ctitan convert: needs --to hf or --from hf, --model and --out\n");
        return 2;
    }
    if (from && tok) {
        fprintf(stderr, "ctitan convert: --tokenizer goes with --to hf\n");
        return 2;
    }
    return to ? to_hf(model, out, tok, dtype) : from_hf(model, out, dtype);
}
