// `ctitan data prepare | info`: turn text into token shards, or describe shards.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "data/prepare.h"
#include "data/shard.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ctitan data prepare --input FILE|DIR [FILE|DIR ...] --tokenizer FILE --out DIR\n"
            "                           [--val-fraction F] [--shard-tokens N] [--quiet]\n"
            "       ctitan data info SHARD [SHARD ...]\n"
            "prepare: splits text into documents (a fortune per document in fortune files, else a file\n"
            "         per document), encodes them with <|end_of_text|> after each, and writes\n"
            "         DIR/train_000.bin ... and DIR/val_000.bin ... (every round(1/F)-th document goes\n"
            "         to validation; F defaults to 0.05). Formats: docs/data_format.md.\n"
            "info:    prints a shard's format, token width, count and vocab size (checks it too).\n");
}

static int cmd_prepare(int argc, char **argv) {
    const char **inputs = calloc((size_t)argc + 1, sizeof(char *));
    int n_inputs = 0;
    ct_data_prepare_opts o = {.val_fraction = 0.05, .progress = -1};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (!strcmp(a, "--input")) {
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) inputs[n_inputs++] = argv[++i];
        } else if (!strcmp(a, "--tokenizer") && has_value) {
            o.tokenizer_path = argv[++i];
        } else if (!strcmp(a, "--out") && has_value) {
            o.out_dir = argv[++i];
        } else if (!strcmp(a, "--val-fraction") && has_value) {
            char *end;
            o.val_fraction = strtod(argv[++i], &end);
            if (*end) {
                fprintf(stderr, "ctitan data prepare: --val-fraction expects a number, got '%s'\n", argv[i]);
                free(inputs);
                return 2;
            }
        } else if (!strcmp(a, "--shard-tokens") && has_value) {
            char *end;
            long long v = strtoll(argv[++i], &end, 10);
            if (*end || v <= 0) {
                fprintf(stderr, "ctitan data prepare: --shard-tokens expects a positive integer, got '%s'\n", argv[i]);
                free(inputs);
                return 2;
            }
            o.shard_tokens = (uint64_t)v;
        } else if (!strcmp(a, "--quiet")) {
            o.progress = 0;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            free(inputs);
            return 0;
        } else {
            fprintf(stderr, "ctitan data prepare: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            free(inputs);
            return 2;
        }
    }
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
    if (argc < 1) {
        usage(stderr);
        return 2;
    }
    int rc = 0;
    for (int i = 0; i < argc; i++) {
        ct_shard s;
        if (ct_shard_open(&s, argv[i], 0) != CT_OK) {
            fprintf(stderr, "ctitan data info: %s\n", ct_last_error());
            rc = 1;
            continue;
        }
        printf("%s: %s format, %d-byte tokens, %llu tokens, vocab %u\n", argv[i], s.format == CT_SHARD_LLMC ? "llm.c" : "ctitan",
               s.token_width, (unsigned long long)s.n_tokens, s.vocab_size);
        ct_shard_close(&s);
    }
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
