#include "train/memory_fit.h"

#include <stdlib.h>

#include "core/memory.h"
#include "plan/memory_model.h"

int ct_memory_fit_ranks_on_node(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return 1;
}

ct_status ct_memory_fit_check(const ct_model_config *model, const ct_config *cfg, int world_size) {
    ct_plan_memory need;
    if (ct_plan_memory_rank(model, cfg, world_size, &need)) return CT_ERR;
    double have = ct_plan_memory_available() / ct_memory_fit_ranks_on_node(), gib = 1024.0 * 1024.0 * 1024.0;
    if (have > 0 && need.total > have)
        return ct_set_error("the model needs about %.1f GiB per rank (parameters %.1f, gradients %.1f, optimizer %.1f, "
                            "activations %.1f, communication %.1f), this machine has %.1f GiB available per rank: "
                            "shard it over more ranks (parallelism.*) or train a smaller model; see ctitan plan",
                            need.total / gib, need.bytes[CT_MEM_PARAMS] / gib, need.bytes[CT_MEM_GRADS] / gib,
                            need.bytes[CT_MEM_OPTIM] / gib, need.bytes[CT_MEM_ACTIVATIONS] / gib,
                            need.bytes[CT_MEM_COMM] / gib, have / gib);
    return CT_OK;
}
