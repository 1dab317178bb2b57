// `ctitan train`: parse the configuration, refuse what is not built, train.
// Every rank parses the same arguments, so a bad setting stops every rank with the same line;
// a failure during set-up that may hit only some ranks (a bad shard, say) ends the whole job
// through ct_fatal, so no rank is left waiting in a collective.
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "comm/comm.h"
#include "core/config.h"
#include "kernels/backend.h"
#include "metrics/metrics.h"
#include "train/trainer.h"

// This process's rank as the launcher numbers it, before MPI starts (0 without a launcher).
static int launcher_rank(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

// OpenMP threads per rank when the user set none: the cores this process may run on, shared
// with the other ranks on the node (a plain `mpirun -np N` otherwise starts one thread per core
// in every rank, and N ranks fight over each core).
static void choose_threads(void) {
    const char *set = getenv("OMP_NUM_THREADS");
    if (set && *set) return;
    int local = 1;
    const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) {
            local = atoi(v);
            break;
        }
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t mask;
    int allowed = sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask) : (int)cores;
    int threads = (int)(cores / local);
    if (threads > allowed) threads = allowed;  // bound to fewer cores by the launcher
    if (threads < 1) threads = 1;
    char buf[16];
    snprintf(buf, sizeof buf, "%d", threads);
    setenv("OMP_NUM_THREADS", buf, 1);  // before the OpenMP runtime starts its threads
    omp_set_num_threads(threads);
}

int ct_cmd_train(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: ctitan train [--config FILE] [--section.key value | --section.key=value]...\n\n");
            ct_config_print_help(stdout);
            return 0;
        }
    static ct_config cfg;
    if (ct_config_parse(&cfg, argc, argv) || ct_config_validate(&cfg) || ct_config_check_implemented(&cfg)) {
        // Every rank parsed the same arguments and found the same error: the first one says it
        // and fails the job; the others end quietly, with status 0. (Had they failed too, mpirun,
        // which ends the job at the first failure, could stop the first rank before its line was
        // out: tests/test_output.sh once saw the line lost on 2 loaded cores.)
        if (launcher_rank() != 0) return 0;
        fprintf(stderr, "ctitan train: %s\n", ct_last_error());
        return 2;
    }
    // Whether stdout is the user's terminal must be known before MPI starts: a singleton MPI
    // start sets the launcher's variables (OMPI_COMM_WORLD_SIZE ...) in this very process.
    setenv("CTITAN_TTY", ct_metrics_user_terminal() ? "1" : "0", 0);
    choose_threads();
    // A device's set-up that MPI's start must know of (cpu_sim); a build without it is told so by
    // the trainer, in its own words.
    const ct_kernels *k = ct_kernels_get(cfg.train_device);
    // GPU buffers travel by NCCL (host scalars still by MPI: comm_nccl.c's control plane).
    if (k && k->device == CT_DEVICE_CUDA && ct_comm_select("nccl")) {
        if (launcher_rank() != 0) return 0;
        fprintf(stderr, "ctitan train: training.device cuda: %s\n", ct_last_error());
        return 2;
    }
    if (ct_comm_init(NULL, NULL)) {
        fprintf(stderr, "ctitan train: %s\n", ct_last_error());
        return 1;
    }
    static ct_trainer t;
    if (ct_trainer_init(&t, &cfg, NULL)) {
        // Some ranks only know of it: end the whole job from here, or they wait in a collective.
        if (!ct_comm_error_is_agreed()) ct_fatal("ctitan train", "%s", ct_last_error());
        // Every rank knows (a check agreed over the world): rank 0 says it, all end normally.
        if (t.world.rank == 0) fprintf(stderr, "ctitan train: %s\n", ct_last_error());
        ct_comm_finalize();
        return 1;
    }
    int rc = ct_trainer_run(&t);
    ct_trainer_free(&t);
    ct_comm_finalize();
    return rc;
}
