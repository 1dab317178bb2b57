// ctitan: large-model training in C. Dispatches to a subcommand.
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "core/version.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ctitan <command> [options]\n"
            "commands:\n"
            "  train      train a model (ctitan train --help lists every setting)\n"
            "  tokenizer  train | encode | decode | info a byte-level BPE tokenizer (rank file or tokenizer.json)\n"
            "  data       prepare: tokenise text into training shards\n"
            "  generate   sample text from a saved model\n"
            "  eval       mean loss of a saved model on a token set\n"
            "  pipeline   show: a pipeline schedule as a text grid, SVG or Chrome trace\n"
            "  convert    --to hf | --from hf: a model to and from a Hugging Face directory\n"
            "  checkpoint list | verify: distributed checkpoints and their files\n"
            "  plot       loss curves of runs (metrics.jsonl) as SVG / PNG\n"
            "  plan       which layout (pp x dp x fsdp x cp x tp, schedule, checkpointing, precision) for a\n"
            "             model on a cluster: predicted memory, step time, tokens/s and MFU\n"
            "  kernels    the cpu kernel sets of this build and which this CPU runs\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version")) {
        printf("ctitan %s\n", ct_version());
        return 0;
    }
    if (!strcmp(cmd, "train")) return ct_cmd_train(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenizer")) return ct_cmd_tokenizer(argc - 2, argv + 2);
    if (!strcmp(cmd, "data")) return ct_cmd_data(argc - 2, argv + 2);
    if (!strcmp(cmd, "generate")) return ct_cmd_generate(argc - 2, argv + 2);
    if (!strcmp(cmd, "eval")) return ct_cmd_eval(argc - 2, argv + 2);
    if (!strcmp(cmd, "pipeline")) return ct_cmd_pipeline(argc - 2, argv + 2);
    if (!strcmp(cmd, "convert")) return ct_cmd_convert(argc - 2, argv + 2);
    if (!strcmp(cmd, "checkpoint")) return ct_cmd_checkpoint(argc - 2, argv + 2);
    if (!strcmp(cmd, "plot")) return ct_cmd_plot(argc - 2, argv + 2);
    if (!strcmp(cmd, "plan")) return ct_cmd_plan(argc - 2, argv + 2);
    if (!strcmp(cmd, "kernels")) return ct_cmd_kernels(argc - 2, argv + 2);
    fprintf(stderr, "ctitan: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
