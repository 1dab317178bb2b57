// `ctitan convert --to hf --model MODEL.safetensors --out DIR [--tokenizer TOK] [--dtype bf16|fp32]`
// `ctitan convert --from hf --model DIR --out MODEL.safetensors [--dtype bf16|fp32]`
// Moves a model to and from the Hugging Face layout (checkpoint/hf.h): a directory that
// transformers loads as LlamaForCausalLM, and such a directory (also a sharded one) back into
// ctitan's model file. Streams tensor by tensor; --dtype defaults to the source's.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/hf.h"
#include "cli/commands.h"
#include "train/hf_vocab.h"
#include "data/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ctitan convert --to hf --model MODEL.safetensors --out DIR [--tokenizer TOK] [--dtype bf16|fp32]\n"
            "       ctitan convert --from hf --model DIR --out MODEL.safetensors [--dtype bf16|fp32]\n"
            "  --to hf     write DIR for transformers' LlamaForCausalLM: model.safetensors (HF names, q/k rows in\n"
            "              HF's RoPE layout), config.json, and with --tokenizer (a tiktoken rank file)\n"
            "              tokenizer.json, tokenizer_config.json, generation_config.json, original/tokenizer.model\n"
            "  --from hf   read DIR (model.safetensors or model.safetensors.index.json + shards, config.json)\n"
            "  --dtype     stored precision (default: the source's; bf16 only when every source tensor is)\n");
}

static int fail(const char *msg) {
    fprintf(stderr, "ctitan convert: %s\n", msg);
    return 1;
}

static int to_hf(const char *model, const char *out, const char *tok_path, ct_dtype dtype) {
    ct_hf_vocab_view vv = {0};
    if (tok_path) {
        ct_llama_config m;
        if (ct_model_load_config(model, &m) || ct_hf_vocab_load(&vv, tok_path, m.vocab_size)) {
            ct_hf_vocab_free(&vv);
            return fail(ct_last_error());
        }
    }
    ct_status st = ct_hf_export(model, out, tok_path ? &vv.v : NULL, dtype);
    ct_hf_vocab_free(&vv);
    if (st) return fail(ct_last_error());
    printf("convert: %s -> %s (Hugging Face LlamaForCausalLM%s)\n", model, out, tok_path ? ", with tokenizer" : "");
    return 0;
}

static int from_hf(const char *dir, const char *out, ct_dtype dtype) {
    if (ct_hf_import(dir, out, dtype)) return fail(ct_last_error());
    printf("convert: %s -> %s (ctitan model file)\n", dir, out);
    return 0;
}

int ct_cmd_convert(int argc, char **argv) {
    const char *to = NULL, *from = NULL, *model = NULL, *out = NULL, *tok = NULL;
    ct_dtype dtype = CT_HF_DTYPE_SOURCE;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "ctitan convert: missing value for '%s'\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--to")) to = v;
        else if (!strcmp(a, "--from")) from = v;
        else if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--tokenizer")) tok = v;
        else if (!strcmp(a, "--dtype")) {
            if (ct_model_dtype_parse(v, &dtype)) return fail(ct_last_error()) + 1;
        } else {
            fprintf(stderr, "ctitan convert: unknown option '%s'\n", a);
            return 2;
        }
    }
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
