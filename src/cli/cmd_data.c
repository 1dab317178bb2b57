// `ctitan data prepare | info`: turn text into token shards, or describe shards.
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "data/corpus.h"
#include "data/prepare.h"
#include "data/shard.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ctitan data prepare --input FILE|DIR [FILE|DIR ...] --tokenizer TOK --out DIR\n"
            "                           [--text-field NAME] [--val-fraction F | --val-docs N]\n"
            "                           [--shard-tokens N] [--threads N] [--quiet]\n"
            "       ctitan data info SHARD [SHARD ...]\n"
            "prepare: reads text, JSON Lines, Parquet (a string column) or Megatron .bin/.idx files, gzip\n"
            "         or zstd compressed or not (the format is read from the content), encodes each\n"
            "         document with the tokenizer's EOS after it, and writes DIR/train_000.bin ... and\n"
            "         DIR/val_000.bin ... (validation: every round(1/F)-th document, F = 0.05 by default,\n"
            "         or the last N documents). Formats: docs/data_format.md.\n"
            "         TOK: a tiktoken rank file, a tokenizer.json, or a folder holding one; the shards\n"
            "         record its hash, BOS and EOS.\n"
            "info:    prints a shard's format, token width, count, vocab size and tokenizer (checks it too).\n");
}

static int cmd_prepare(int argc, char **argv) {
    ct_opt_list in = {0};
    ct_data_prepare_opts o = {.val_fraction = -1, .progress = -1};  // -1: not given (0.05 unless --val-docs)
    long shard_tokens = 0, threads = 0;
    unsigned long long val_docs = 0;
    bool quiet = false;
    const ct_opt opts[] = {
        {"input", 0, CT_OPT_LIST, &in, "FILE|DIR", "corpus files (text, JSONL, Parquet, Megatron PREFIX); a DIR means its files", 0, 0},
        {"tokenizer", 0, CT_OPT_STR, &o.tokenizer_path, "TOK", "a tiktoken rank file, a tokenizer.json, or a folder holding one", 0, 0},
        {"out", 0, CT_OPT_STR, &o.out_dir, "DIR", "where the shards go", 0, 0},
        {"text-field", 0, CT_OPT_STR, &o.text_field, "NAME", "JSONL field / Parquet column of the text (text)", 0, 0},
        {"val-fraction", 0, CT_OPT_DOUBLE, &o.val_fraction, "F", "every round(1/F)-th document to validation (0.05)", 0, 1},
        {"val-docs", 0, CT_OPT_U64, &val_docs, "N", "the last N documents to validation instead", 0, 0},
        {"shard-tokens", 0, CT_OPT_LONG, &shard_tokens, "N", "tokens per shard", 1, (double)LONG_MAX},
        {"threads", 0, CT_OPT_LONG, &threads, "N", "encoder threads (the CPUs this process may use); same shards for any N", 1, 4096},
        {"quiet", 0, CT_OPT_FLAG, &quiet, NULL, "no progress lines", 0, 0},
    };
    const ct_opt_spec spec = {"ctitan data prepare", "--input FILE|DIR [FILE|DIR ...] --tokenizer TOK --out DIR [options]",
                              "Reads each input by its content: plain text (a fortune per document in fortune files,\n"
                              "else a file per document), JSON Lines (a document per line, in --text-field), Parquet\n"
                              "(a document per row of the --text-field column), a Megatron-LM .bin/.idx pair (already\n"
                              "tokenised: ids checked, not re-encoded); text and JSONL may be gzip or zstd compressed.\n"
                              "Encodes each document with the tokenizer's EOS after it and writes DIR/train_000.bin ... and\n"
                              "DIR/val_000.bin ...: validation is every round(1/F)-th document (or, for a corpus of fewer\n"
                              "documents than that, its last F of tokens), or with --val-docs the last N documents.\n"
                              "Documents are encoded by --threads threads, in chunks of about 1 MiB (a large file is\n"
                              "shared by them all) and written in file order: the same shards for any thread count.\n"
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
    o.threads = (int)threads;
    if (val_docs && o.val_fraction >= 0) {
        fprintf(stderr, "ctitan data prepare: --val-docs and --val-fraction both given; the validation split is one or "
                        "the other\n");
        free(in.v);
        return 2;
    }
    o.val_docs = val_docs;
    if (o.val_fraction < 0) o.val_fraction = val_docs ? 0 : 0.05;
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
    char kinds[160] = "";
    size_t k = 0;
    for (int f = 0; f < CT_CORPUS_N_FORMATS; f++)
        if (r.files_of[f])
            k += (size_t)snprintf(kinds + k, sizeof kinds - k, "%s%llu %s", k ? ", " : "", (unsigned long long)r.files_of[f],
                                  ct_corpus_format_name((ct_corpus_format)f));
    printf("read %llu file%s (%.2f MB: %s)\n", (unsigned long long)r.files, r.files == 1 ? "" : "s", r.bytes / 1e6, kinds);
    printf("train: %llu documents, %llu tokens in %d shard%s\n", (unsigned long long)r.docs[0],
           (unsigned long long)r.tokens[0], r.shards[0], r.shards[0] == 1 ? "" : "s");
    if (r.val == CT_VAL_LAST_TOKENS)
        printf("val:   the last %llu tokens in %d shard%s (the corpus has %llu documents, too few to take every "
               "round(1/%g)-th)\n",
               (unsigned long long)r.tokens[1], r.shards[1], r.shards[1] == 1 ? "" : "s", (unsigned long long)r.docs[0],
               o.val_fraction);
    else
        printf("val:   %llu documents%s, %llu tokens in %d shard%s\n", (unsigned long long)r.docs[1],
               r.val == CT_VAL_LAST_DOCS ? " (the last ones)" : "", (unsigned long long)r.tokens[1], r.shards[1],
               r.shards[1] == 1 ? "" : "s");
    if (r.val == CT_VAL_NONE && (o.val_fraction > 0 || o.val_docs))
        fprintf(stderr, "ctitan data prepare: warning: no validation split (the corpus is too small: %llu tokens)\n",
                (unsigned long long)r.tokens[0]);
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
