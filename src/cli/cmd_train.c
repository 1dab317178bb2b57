// `ctitan train`: parse the configuration, refuse what is not built, train.
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "core/config.h"
#include "train/trainer.h"

int ct_cmd_train(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: ctitan train [--config FILE] [--section.key value | --section.key=value]...\n\n");
            ct_config_print_help(stdout);
            return 0;
        }
    static ct_config cfg;
    if (ct_config_parse(&cfg, argc, argv) || ct_config_validate(&cfg) || ct_config_check_implemented(&cfg)) {
        fprintf(stderr, "ctitan train: %s\n", ct_last_error());
        return 2;
    }
    static ct_trainer t;
    if (ct_trainer_init(&t, &cfg)) {
        fprintf(stderr, "ctitan train: %s\n", ct_last_error());
        return 1;
    }
    int rc = ct_trainer_run(&t);
    ct_trainer_free(&t);
    return rc;
}
