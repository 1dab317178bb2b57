// `ctitan train`: parse the configuration, refuse what is not built, train.
// Every rank parses the same arguments, so a bad setting stops every rank with the same line;
// a failure during set-up that may hit only some ranks (a bad shard, say) ends the whole job
// through ct_fatal, so no rank is left waiting in a collective.
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
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

// Processes in the job as the launcher counts them, before MPI starts (1 without a launcher):
// training.global_batch_size needs the data-parallel degree before the configuration is checked.
static int launcher_size(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return 1;
}

// Columns for text meant for a person: COLUMNS when set, else the terminal's width when stdout or
// stderr is one, else 80.
static int text_width(FILE *f) {
    const char *env = getenv("COLUMNS");
    if (env && atoi(env) >= 20 && atoi(env) <= 1000) return atoi(env);
    struct winsize ws;
    if (isatty(fileno(f)) && ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
    return 80;
}

// `--help`, `--help SECTION` or `--help=SECTION`.
static int help(int argc, char **argv, int i) {
    const char *section = NULL;
    if (!strncmp(argv[i], "--help=", 7)) section = argv[i] + 7;
    else if (i + 1 < argc && strncmp(argv[i + 1], "-", 1)) section = argv[i + 1];
    if (!section) {
        printf("usage: ctitan train [--config FILE] [--section.key value]...\n"
               "       ctitan train --help [SECTION]\n\n");
    }
    if (ct_config_print_help(stdout, text_width(stdout), section)) {
        fprintf(stderr, "ctitan train --help: %s\n", ct_last_error());
        return 2;
    }
    return 0;
}

// Ranks of this job on this node as the launcher says (1 without one): OpenMPI's and MPICH's
// counts, Slurm's --ntasks-per-node, or srun's tasks per node of the step ("2(x3),1": two on each
// of the first three nodes, one on the fourth), this node being SLURM_NODEID.
static int ranks_on_this_node(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    const char *per = getenv("SLURM_STEP_TASKS_PER_NODE"), *id = getenv("SLURM_NODEID");
    if (per && id && *id) {
        long node = strtol(id, NULL, 10), first = 0;
        for (const char *p = per; *p && node >= 0;) {
            char *end;
            long tasks = strtol(p, &end, 10), times = 1;
            if (end == p || tasks < 1) break;
            if (!strncmp(end, "(x", 2)) times = strtol(end + 2, &end, 10), end += *end == ')';
            if (times < 1) break;
            if (node < first + times) return (int)tasks;
            first += times;
            p = end + (*end == ',');
        }
    }
    return 1;
}

// OpenMP threads per rank when the user set none: this node's cores shared by the ranks on this
// node (not by every rank of a job over several nodes), or Slurm's --cpus-per-task; never more
// than the cores this process may run on (a launcher that binds each rank gives it its own).
// A plain `mpirun -np N` otherwise starts one thread per core in every rank, and N ranks fight
// over each core.
static void choose_threads(void) {
    const char *set = getenv("OMP_NUM_THREADS");
    if (set && *set) return;
    int local = ranks_on_this_node();
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t mask;
    int allowed = sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask) : (int)cores;
    const char *per_task = getenv("SLURM_CPUS_PER_TASK");
    int threads = per_task && atoi(per_task) > 0 ? atoi(per_task) : (int)(cores / local);
    if (threads > allowed) threads = allowed;  // bound to fewer cores by the launcher
    if (threads < 1) threads = 1;
    char buf[16];
    snprintf(buf, sizeof buf, "%d", threads);
    setenv("OMP_NUM_THREADS", buf, 1);  // before the OpenMP runtime starts its threads
    omp_set_num_threads(threads);
}

int ct_cmd_train(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h") || !strncmp(argv[i], "--help=", 7))
            return help(argc, argv, i);
    static ct_config cfg;
    static ct_config_report rep;
    // Every problem at once: the file's, the command line's, the contradictions between settings.
    ct_config_parse_report(&cfg, argc, argv, &rep);
    ct_config_apply_world(&cfg, launcher_size(), &rep);
    if (!rep.n_problems && ct_config_check_implemented(&cfg))
        ct_config_problem_at(&rep, ct_last_error_code(), ct_last_error_subject(), "%s", ct_last_error());
    bool says = launcher_rank() == 0;
    if (says) ct_config_print_notes(&rep, stderr, text_width(stderr));  // once, by one rank
    if (rep.n_problems) {
        // Every rank parsed the same arguments and found the same errors: the first one says them
        // and fails the job; the others end quietly, with status 0. (Had they failed too, mpirun,
        // which ends the job at the first failure, could stop the first rank before its lines were
        // out: tests/test_output.sh once saw the line lost on 2 loaded cores.)
        if (!says) return 0;
        int shown = rep.n_problems < CT_CONFIG_MAX_PROBLEMS ? rep.n_problems : CT_CONFIG_MAX_PROBLEMS;
        for (int i = 0; i < shown; i++) fprintf(stderr, "ctitan train: %s\n", rep.problems[i]);
        if (rep.n_problems > shown) fprintf(stderr, "ctitan train: ... and %d more\n", rep.n_problems - shown);
        return 2;
    }
    if (says && cfg.print_config) ct_config_write_toml(&cfg, stdout);
    // Whether stdout is the user's terminal must be known before MPI starts: a singleton MPI
    // start sets the launcher's variables (OMPI_COMM_WORLD_SIZE ...) in this very process.
    setenv("CTITAN_TTY", ct_metrics_user_terminal() ? "1" : "0", 0);
    choose_threads();
    // A device's set-up that MPI's start must know of (cpu_sim); a build without it is told so by
    // the trainer, in its own words.
    const ct_kernels *k = ct_kernels_get(ct_cfg_device_name(cfg.train_device));
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
    // The launcher's count was a guess where MPI was started some other way: the batch again,
    // against the world MPI has (every rank reaches the same answer, so rank 0 alone says it).
    ct_group world;
    if (cfg.global_batch_size > 0 && ct_comm_group_world(&world, cfg.comm_init_timeout) == CT_OK) {
        int size = world.size, rank = world.rank;
        ct_comm_group_free(&world);
        if (size != launcher_size() && ct_config_apply_world(&cfg, size, NULL)) {
            if (rank == 0) fprintf(stderr, "ctitan train: %s\n", ct_last_error());
            ct_comm_finalize();
            return 2;
        }
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
