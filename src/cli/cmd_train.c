// `ctitan train`: parse the configuration, refuse what is not built, train.
// Every rank parses the same arguments, so a bad setting stops every rank with the same line;
// a failure during set-up that may hit only some ranks (a bad shard, say) ends the whole job
// through ct_fatal, so no rank is left waiting in a collective.
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "comm/comm.h"
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
    if (ct_comm_init(NULL, NULL)) {
        fprintf(stderr, "ctitan train: %s\n", ct_last_error());
        return 1;
    }
    static ct_trainer t;
    if (ct_trainer_init(&t, &cfg, NULL)) ct_fatal("ctitan train", "%s", ct_last_error());
    int rc = ct_trainer_run(&t);
    ct_trainer_free(&t);
    ct_comm_finalize();
    return rc;
}
