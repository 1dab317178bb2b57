// `ctitan data prepare | info`: turn text into token shards, or describe shards.
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "data/prepare.h"
#include "data/shard.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ctitan data prepare --input FILE|DIR [FILE|DIR ...] --tokenizer TOK --out DIR\n"
            "                           [--val-fraction F] [--shard-tokens N] [--quiet]\n"
            "       ctitan data info SHARD [SHARD ...]\n"
            "prepare: splits text into documents (a fortune per document in fortune files, else a file\n"
            "         per document), encodes them with the tokenizer's EOS after each, and writes\n"
            "         DIR/train_000.bin ... and DIR/val_000.bin ... (every round(1/F)-th document goes\n"
            "         to validation; F defaults to 0.05). Formats: docs/data_format.md.\n"
            "         TOK: a tiktoken rank file, a tokenizer.json, or a folder holding one; the shards\n"
            "         record its hash, BOS and EOS.\n"
            "info:    prints a shard's format, token width, count, vocab size and tokenizer (checks it too).\n");
}

static int cmd_prepare(int argc, char **argv) {
    ct_opt_list in = {0};
    ct_data_prepare_opts o = {.val_fraction = 0.05, .progress = -1};
    long shard_tokens = 0;
    bool quiet = false;
    const ct_opt opts[] = {
        {"input", 0, CT_OPT_LIST, &in, "FILE|DIR", "text files; a DIR means its regular files", 0, 0},
        {"tokenizer", 0, CT_OPT_STR, &o.tokenizer_path, "TOK", "a tiktoken rank file, a tokenizer.json, or a folder holding one", 0, 0},
        {"out", 0, CT_OPT_STR, &o.out_dir, "DIR", "where the shards go", 0, 0},
        {"val-fraction", 0, CT_OPT_DOUBLE, &o.val_fraction, "F", "share of documents for validation (0.05)", 0, 1},
        {"shard-tokens", 0, CT_OPT_LONG, &shard_tokens, "N", "tokens per shard", 1, (double)LONG_MAX},
        {"quiet", 0, CT_OPT_FLAG, &quiet, NULL, "no progress lines", 0, 0},
    };
    const ct_opt_spec spec = {"ctitan data prepare", "--input FILE|DIR [FILE|DIR ...] --tokenizer TOK --out DIR [options]",
                              "Splits text into documents (a fortune per document in fortune files, else a file per\n"
                              "document), encodes them with the tokenizer's EOS after each, and writes DIR/train_000.bin ...\n"
                              "and DIR/val_000.bin ... (every round(1/F)-th document goes to validation).\n"
                              "Formats: docs/data_format.md.\n",
                              opts, (int)(sizeof opts / sizeof opts[0]), NULL, NULL};
    int prc = ct_opt_parse(&spec, argc, argv);
    if (prc) {
        free(in.v);
        return prc == CT_OPT_HELP ? 0 : 2;
    }
    const char **inputs = in.v;
    int n_inputs = in.n;
    if (shard_tokens) o.shard_tokens = (uint64_t)shard_tokens;
    if (quiet) o.progress = 0;
    if (!n_inputs || !o.tokenizer_path || !o.out_dir) {
        fprintf(stderr, "ctitan data prepare: --input, --tokenizer and --out are required\n");
        usage(stderr);
        free(inputs);
        return 2;
    }
    o.inputs = inputs;
    o.n_inputs = n_inputs;
    ct_data_prepare_result r;
    ct_status st = ct_data_prepare(&o, &r);
    free(inputs);
    if (st != CT_OK) {
        fprintf(stderr, "ctitan data prepare: %s\n", ct_last_error());
        return 1;
    }
    printf("read %llu files (%.2f MB)\n", (unsigned long long)r.files, r.bytes / 1e6);
    printf("train: %llu documents, %llu tokens in %d shard%s\n", (unsigned long long)r.docs[0],
           (unsigned long long)r.tokens[0], r.shards[0], r.shards[0] == 1 ? "" : "s");
    printf("val:   %llu documents, %llu tokens in %d shard%s\n", (unsigned long long)r.docs[1],
           (unsigned long long)r.tokens[1], r.shards[1], r.shards[1] == 1 ? "" : "s");
    if (o.val_fraction > 0 && r.docs[1] == 0)
        fprintf(stderr, "ctitan data prepare: warning: no validation documents (corpus has %llu documents)\n",
                (unsigned long long)r.docs[0]);
    printf("wrote %s\n", o.out_dir);
    return 0;
}

static int cmd_info(int argc, char **argv) {
    const char **shards = calloc((size_t)argc + 1, sizeof *shards);
    int n = 0;
    const ct_opt_spec spec = {"ctitan data info", "SHARD [SHARD ...]",
                              "Prints a shard's format, token width, count, vocab size and tokenizer (checks it too).\n", NULL, 0,
                              shards, &n};
    int prc = ct_opt_parse(&spec, argc, argv);
    if (prc || !n) {
        if (!prc) fprintf(stderr, "ctitan data info: needs a SHARD\n");
        free(shards);
        return prc == CT_OPT_HELP ? 0 : 2;
    }
    argc = n;
    argv = (char **)shards;
    int rc = 0;
    for (int i = 0; i < argc; i++) {
        ct_shard s;
        if (ct_shard_open(&s, argv[i], 0) != CT_OK) {
            fprintf(stderr, "ctitan data info: %s\n", ct_last_error());
            rc = 1;
            continue;
        }
        char tok[160];
        ct_shard_tok_describe(&s.tok, tok, sizeof tok);
        printf("%s: %s format, %d-byte tokens, %llu tokens, vocab %u, %s\n", argv[i],
               s.format == CT_SHARD_LLMC ? "llm.c" : "ctitan", s.token_width, (unsigned long long)s.n_tokens,
               s.vocab_size, tok);
        ct_shard_close(&s);
    }
    free(shards);
    return rc;
}

int ct_cmd_data(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        usage(argc < 1 ? stderr : stdout);
        return argc < 1 ? 2 : 0;
    }
    if (!strcmp(argv[0], "prepare")) return cmd_prepare(argc - 1, argv + 1);
    if (!strcmp(argv[0], "info")) return cmd_info(argc - 1, argv + 1);
    fprintf(stderr, "ctitan data: unknown subcommand '%s'\n", argv[0]);
    usage(stderr);
    return 2;
}
