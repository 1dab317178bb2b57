#include "train/checkpoint.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/model_file.h"
#include "core/clock.h"
#include "core/file_check.h"
#include "core/failpoint.h"
#include "core/fs.h"
#include "core/memory.h"
#include "core/trace.h"
#include "metrics/metrics.h"
#include "plan/memory_model.h"

// ---- signals: the one piece of process-wide state, as a signal handler can only reach that ----

static volatile sig_atomic_t caught_signal;
static volatile sig_atomic_t grace_seconds = CT_SIGNAL_GRACE_MIN;  // set by ct_checkpoint_set_grace
static volatile sig_atomic_t signal_rank = -1;                      // named in the lines below; -1: none
static pid_t launcher_pid;  // the mpirun / orted that started this process; 0: none

// Appends text or a number to buf (cap bytes, k used), in what a signal handler may call.
static void put_text(char *buf, size_t cap, size_t *k, const char *text) {
    for (; *text && *k < cap; text++) buf[(*k)++] = *text;
}

static void put_num(char *buf, size_t cap, size_t *k, long n) {
    char digits[24];
    int d = 0;
    do digits[d++] = (char)('0' + n % 10);
    while ((n /= 10) > 0 && d < 20);
    while (d && *k < cap) buf[(*k)++] = digits[--d];
}

// One line to stderr from a signal handler (write(2), no stdio): "[rank R] ctitan train: <text>",
// then, when n >= 0, "<n> s<tail>".
static void say(const char *text, long n, const char *tail) {
    char buf[512];
    size_t k = 0, cap = sizeof buf - 1;
    if (signal_rank >= 0) {
        put_text(buf, cap, &k, "[rank ");
        put_num(buf, cap, &k, signal_rank);
        put_text(buf, cap, &k, "] ");
    }
    put_text(buf, cap, &k, "ctitan train: ");
    put_text(buf, cap, &k, text);
    if (n >= 0) {
        put_num(buf, cap, &k, n);
        put_text(buf, cap, &k, " s");
        put_text(buf, cap, &k, tail);
    }
    buf[k++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, k);
    (void)w;  // nothing more to do about a lost line: the process ends next
}

static void on_stop_signal(int sig, siginfo_t *si, void *uctx) {
    (void)uctx;
    if (caught_signal) {
        // The launcher passing on a stop it received itself (a Ctrl-C that the terminal also sent
        // this rank, where the launcher leaves its ranks in the terminal's process group; mpirun
        // passes SIGINT on as SIGTERM): the same stop, not the user's second signal. After a
        // SIGUSR1 a SIGTERM from the launcher is a second stop: scripts/run_train.sh passes the
        // first signal on as SIGUSR1 and a second as SIGTERM.
        bool same_stop = sig == caught_signal || (sig == SIGTERM && caught_signal == SIGINT);
        if (launcher_pid && si && si->si_code == SI_USER && si->si_pid == launcher_pid && same_stop) return;
        say("a second signal: ending now, without saving (the last complete checkpoint stays)", -1, "");
        _exit(128 + sig);  // the user means now
    }
    caught_signal = sig;
    alarm((unsigned)grace_seconds);  // a step or a save that does not end must not keep the job
}

static void on_grace_over(int sig) {
    (void)sig;
    say("the step and the save after a stop signal took longer than checkpoint.signal_grace_seconds (",
        grace_seconds, "): ending now (the last complete checkpoint stays)");
    _exit(128 + (caught_signal ? caught_signal : SIGALRM));
}

// The launcher that started this process, when its parent is one: the programs that forward a
// stop of their own to every rank.
static pid_t find_launcher(void) {
    char path[64], name[64] = "";
    pid_t ppid = getppid();
    snprintf(path, sizeof path, "/proc/%d/comm", (int)ppid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    if (!fgets(name, sizeof name, f)) name[0] = 0;
    fclose(f);
    name[strcspn(name, "\n")] = 0;
    const char *launchers[] = {"mpirun", "mpiexec", "orterun", "orted", "prterun", "prted", "hydra_pmi_proxy"};
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++)
        if (!strcmp(name, launchers[i])) return ppid;
    return 0;
}

void ct_checkpoint_catch_signals(int rank) {
    signal_rank = rank;
    launcher_pid = find_launcher();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);  // what mpirun passes to its ranks untouched (scripts/run_train.sh)
    struct sigaction al;
    memset(&al, 0, sizeof al);
    al.sa_handler = on_grace_over;
    sigemptyset(&al.sa_mask);
    sigaction(SIGALRM, &al, NULL);
}

int ct_checkpoint_signal(void) { return caught_signal; }

void ct_checkpoint_set_grace(double seconds) {
    double s = seconds < 1 ? 1 : seconds > 86400 ? 86400 : seconds;
    grace_seconds = (sig_atomic_t)(s + 0.999);
}

int ct_checkpoint_grace(void) { return grace_seconds; }

double ct_checkpoint_auto_grace(double save_seconds) {
    double g = 3 * save_seconds;
    return g > CT_SIGNAL_GRACE_MIN ? g : CT_SIGNAL_GRACE_MIN;
}

// ---- set-up ------------------------------------------------------------------------------------

void ct_checkpoint_init(ct_checkpointer *c, const ct_config *cfg, const ct_train_state *state) {
    memset(c, 0, sizeof *c);
    c->cfg = cfg;
    c->state = *state;
    c->pending_step = -1;
    c->last_saved_step = -1;
    c->enabled = cfg->ckpt_enable;
    c->async = cfg->ckpt_async_mode == CT_CFG_CKPT_ASYNC;
    if (cfg->ckpt_folder[0] == '/')
        snprintf(c->folder, sizeof c->folder, "%s", cfg->ckpt_folder);
    else
        snprintf(c->folder, sizeof c->folder, "%s/%s", cfg->dump_folder, cfg->ckpt_folder);
    // The pieces this rank writes: each shard it holds whose copy it owns (coordinate 0 in every
    // dimension the tensor is replicated over), so every element is written exactly once.
    const ct_param_store *st = state->store;
    c->pieces = ct_xcalloc((size_t)(st->count ? st->count : 1), sizeof *c->pieces);
    for (int i = 0; i < st->count; i++) {
        const ct_param_shard *sh = &st->shards[i];
        if (!ct_train_state_owns(state, sh)) continue;
        ct_dcp_piece *p = &c->pieces[c->n_pieces++];
        p->name = sh->param->name;
        p->desc = sh->desc;
        c->owned_numel += sh->desc.flat_count;
    }
    c->have_file = c->n_pieces > 0;
    // Async saves copy into staging, and so does every save from a device the host cannot read:
    // planned now, with the other buffers, not at the first save.
    if (c->enabled && (c->async || !ct_device_host_visible(state->k->device)))
        c->staging = ct_mem_alloc(CT_MEM_OTHER, (size_t)ct_plan_ckpt_staging_floats(c->owned_numel) * sizeof(float));
}

void ct_checkpoint_free(ct_checkpointer *c) {
    if (c->thread_live) pthread_join(c->thread, NULL);
    c->thread_live = false;
    ct_dcp_manifest_free(&c->pending);
    ct_mem_free(c->staging);
    free(c->pieces);
    memset(c, 0, sizeof *c);
    c->pending_step = -1;
}

// Points the pieces at the live buffers (sync, on the cpu) or copies them into host staging
// (async, or from a device).
static void bind_pieces(ct_checkpointer *c, bool staged) {
    const ct_train_state *s = &c->state;
    const ct_param_store *st = s->store;
    long at = 0;
    for (int i = 0, j = 0; i < st->count; i++) {
        const ct_param_shard *sh = &st->shards[i];
        if (j == c->n_pieces || strcmp(sh->param->name, c->pieces[j].name) || !ct_train_state_owns(s, sh)) continue;
        ct_dcp_piece *p = &c->pieces[j++];
        for (int k = 0; k < CT_DCP_NKINDS; k++) {
            const float *live = ct_train_state_live(s, sh, (ct_dcp_kind)k);
            if (!staged) {
                p->data[k] = live;
                continue;
            }
            float *dst = c->staging + at;  // (flat_count)
            s->k->copy_to_host(dst, live, (size_t)p->desc.flat_count * sizeof(float));
            p->data[k] = dst;
            at += p->desc.flat_count;
        }
    }
}

// ---- saving --------------------------------------------------------------------------------------

// This rank's file of the pending save (main thread for sync saves, the writer thread for async).
static ct_status write_my_file(ct_checkpointer *c) {
    int rank = c->state.world->rank;
    ct_failpoint("ckpt.before_data", rank);
    snprintf(c->my_file.name, sizeof c->my_file.name, "rank-%05d.safetensors", rank);
    char path[CT_DCP_PATH + 80];
    snprintf(path, sizeof path, "%s/%s", c->pending_dir, c->my_file.name);
    double t0 = ct_now_seconds();
    ct_failpoint_pace("ckpt.write");  // signal tests: a save of a known length on any machine
    ct_status st = ct_dcp_write_pieces(path, c->pieces, c->n_pieces, !c->pending.model_only, &c->my_file);
    c->write_seconds = ct_now_seconds() - t0;
    if (st == CT_OK && ct_failpoint_armed("ckpt.mid_file", rank)) {
        // What a crash half-way through the data leaves: a file cut short, never synced whole.
        if (truncate(path, (off_t)(c->my_file.bytes / 2))) perror(path);
        ct_failpoint_die();
    }
    return st;
}

static void *writer_main(void *arg) {
    ct_checkpointer *c = arg;
    c->thread_status = write_my_file(c);
    if (c->thread_status) snprintf(c->thread_error, sizeof c->thread_error, "%s", ct_last_error());
    atomic_store(&c->thread_done, 1);
    return NULL;
}

// Rank 0 only: config.toml, then the manifest, then the rename that makes the step visible, then
// the pruning of old checkpoints. records: (world, 5) {has file, bytes, crc32, write us, pause us}.
static ct_status publish(ct_checkpointer *c, const int64_t *records) {
    const ct_group *world = c->state.world;
    ct_dcp_manifest *m = &c->pending;
    m->files = ct_xcalloc((size_t)world->size + 1, sizeof *m->files);
    m->n_files = 0;
    for (int r = 0; r < world->size; r++) {
        const int64_t *rec = records + 5 * r;
        if (!rec[0]) continue;
        ct_dcp_file *f = &m->files[m->n_files++];
        snprintf(f->name, sizeof f->name, "rank-%05d.safetensors", r);
        f->bytes = (uint64_t)rec[1];
        f->crc32 = (uint32_t)rec[2];
    }
    char path[CT_DCP_PATH + 32];
    snprintf(path, sizeof path, "%s/config.toml", c->pending_dir);
    FILE *cf = ct_file_fopen_write(path, "checkpoint config", CT_FILE_WRITE_NOFOLLOW);
    if (!cf) return CT_ERR;
    ct_config_write_toml(c->cfg, cf);
    bool ok = fflush(cf) == 0;
    if (fclose(cf) || !ok) return ct_set_error("%s: %s", path, strerror(errno ? errno : EIO));
    ct_dcp_file *cfg_file = &m->files[m->n_files++];
    snprintf(cfg_file->name, sizeof cfg_file->name, "config.toml");
    if (ct_dcp_file_checksum(path, true, cfg_file)) return CT_ERR;

    ct_failpoint("ckpt.before_manifest", 0);
    if (ct_dcp_write_manifest(c->pending_dir, m)) return CT_ERR;
    ct_failpoint("ckpt.before_rename", 0);
    char final[CT_DCP_PATH];
    ct_dcp_step_dir(c->folder, m->step, final);
    // Saving a step that already has a checkpoint (a run resumed from an older one): the new
    // one replaces it -- if it is this run's step: a folder of that name holding another step
    // (a copy from another run) or a link out of the folder is refused, not removed.
    int held = ct_dcp_manifest_step(final);
    if (held >= 0 && held != m->step)
        return ct_set_error("%s holds step %d (its manifest), not %d: not replaced (a copy from another run? move it "
                            "out of %s)",
                            final, held, m->step, c->folder);
    if (ct_dcp_remove_dir(final)) return CT_ERR;
    if (ct_fs_rename(c->pending_dir, final) || ct_fs_sync_dir(c->folder)) return CT_ERR;
    ct_failpoint("ckpt.after_rename", 0);

    // Old checkpoints go only now that a newer one is complete: the oldest by their manifests'
    // steps, never a link or a copy from another run (the listing skips and names those).
    int k = c->cfg->ckpt_keep_latest_k;
    if (k > 0) {
        int steps[4096];
        int n = ct_dcp_list_steps(c->folder, steps, 4096, NULL, NULL, stderr);
        for (int i = 0; i + k < n; i++) {
            char old[CT_DCP_PATH];
            ct_dcp_step_dir(c->folder, steps[i], old);
            if (steps[i] != m->step && ct_dcp_remove_dir(old))
                fprintf(stderr, "checkpoint: could not remove %s: %s\n", old, ct_last_error());
        }
    }
    double bytes = 0, write_s = 0, pause_s = 0;
    for (int r = 0; r < world->size; r++) {
        bytes += (double)records[5 * r + 1];
        if (records[5 * r + 3] * 1e-6 > write_s) write_s = (double)records[5 * r + 3] * 1e-6;
        if (records[5 * r + 4] * 1e-6 > pause_s) pause_s = (double)records[5 * r + 4] * 1e-6;
    }
    int writers = m->n_files - 1;
    printf("checkpoint: step %d saved to %s (%.1f MB in %d files; %.0f MB/s per rank; training paused %.0f ms%s)\n",
           m->step, final, bytes / 1e6, writers, write_s > 0 ? bytes / 1e6 / (writers ? writers : 1) / write_s : 0.0,
           pause_s * 1e3, c->async ? ", async" : "");
    fflush(stdout);
    return CT_OK;
}

// Every rank's file is written (or failed): agree, then rank 0 publishes. The .tmp folder of a
// failed save is removed, the previous checkpoint is not touched.
static ct_status complete_save(ct_checkpointer *c) {
    ct_group *world = c->state.world;
    double t0 = ct_now_seconds();
    if (c->thread_live) {
        pthread_join(c->thread, NULL);
        c->thread_live = false;
    }
    ct_status st = c->thread_status;
    if (st) ct_set_error("checkpoint step %d: %s", c->pending_step, c->thread_error);
    st = ct_comm_agree(world, st);
    if (st == CT_OK) {
        c->pause_seconds += ct_now_seconds() - t0;
        int64_t mine[5] = {c->have_file, (int64_t)c->my_file.bytes, c->my_file.crc32, (int64_t)(c->write_seconds * 1e6),
                           (int64_t)(c->pause_seconds * 1e6)};
        int64_t *all = ct_xmalloc((size_t)world->size * sizeof mine);  // (world, 5)
        ct_comm_all_gather(world, mine, all, 5, CT_I64);
        ct_status pub = CT_OK;
        if (world->rank == 0) pub = publish(c, all);
        double write_s = 0;
        for (int r = 0; r < world->size; r++)
            if (all[5 * r + 3] * 1e-6 > write_s) write_s = (double)all[5 * r + 3] * 1e-6;
        free(all);
        st = ct_comm_agree(world, pub);
        // What the save took the slowest writer, plus the commit: what a stop must wait for.
        c->last_save_seconds = write_s + (ct_now_seconds() - t0);
        if (st == CT_OK && c->cfg->ckpt_signal_grace <= 0)
            ct_checkpoint_set_grace(ct_checkpoint_auto_grace(c->last_save_seconds));
    }
    if (st && world->rank == 0) ct_dcp_remove_dir(c->pending_dir);
    if (st == CT_OK) c->last_saved_step = c->pending_step;
    ct_dcp_manifest_free(&c->pending);
    c->pending_step = -1;
    return st;
}

static ct_status save(ct_checkpointer *c, bool model_only) {
    ct_group *world = c->state.world;
    if (c->pending_step >= 0 && ct_checkpoint_finish(c)) return CT_ERR;  // one save at a time
    double t0 = ct_now_seconds();
    ct_train_position at = ct_train_state_position(&c->state);
    char final[CT_DCP_PATH];
    ct_dcp_step_dir(c->folder, at.step, final);
    snprintf(c->pending_dir, sizeof c->pending_dir, "%s.tmp", final);
    ct_status st = CT_OK;
    if (world->rank == 0) {
        st = ct_fs_make_dirs(c->folder);
        if (st == CT_OK) st = ct_dcp_remove_dir(c->pending_dir);
        if (st == CT_OK) st = ct_fs_make_dirs(c->pending_dir);
    }
    if (ct_comm_agree(world, st)) return ct_set_error("checkpoint step %d: %s", at.step, ct_last_error());

    ct_dcp_manifest *m = &c->pending;
    memset(m, 0, sizeof *m);
    m->step = at.step;
    m->optimizer_step = at.optimizer_step;
    m->model_only = model_only;
    m->world_size = world->size;
    ct_mesh_layout_format(&c->state.mesh->layout, m->layout, sizeof m->layout);
    m->seed = c->state.seed;
    m->data_epoch = at.data.epoch;
    m->data_position = at.data.position;
    m->seq_len = c->cfg->seq_len;
    m->model = *c->state.model;
    c->pending_step = at.step;
    c->thread_status = CT_OK;
    c->thread_error[0] = 0;
    c->my_file = (ct_dcp_file){0};
    c->write_seconds = 0;

    bool staged = c->async;
    bind_pieces(c, staged || !ct_device_host_visible(c->state.k->device));
    if (!c->have_file) {
        // A pure replica: its elements are written by the copy at coordinate 0.
    } else if (staged) {
        atomic_store(&c->thread_done, 0);
        if (pthread_create(&c->thread, NULL, writer_main, c)) {
            c->thread_status = ct_set_error("cannot start the checkpoint writer thread");
            snprintf(c->thread_error, sizeof c->thread_error, "%s", ct_last_error());
        } else {
            c->thread_live = true;
        }
    } else {
        c->thread_status = write_my_file(c);
        if (c->thread_status) snprintf(c->thread_error, sizeof c->thread_error, "%s", ct_last_error());
    }
    c->pause_seconds = ct_now_seconds() - t0;
    if (staged) return CT_OK;
    return complete_save(c);
}

// A profile shows the save as the training loop pays for it (the whole write, or the copy into
// the staging buffer under async).
ct_status ct_checkpoint_save(ct_checkpointer *c, bool model_only) {
    int span = ct_trace_begin(CT_TRACE_CKPT, "checkpoint.save");
    ct_status st = save(c, model_only);
    ct_trace_end(span);
    return st;
}

ct_status ct_checkpoint_poll(ct_checkpointer *c, bool *stop) {
    bool busy = c->thread_live && !atomic_load(&c->thread_done);
    int32_t flags[2] = {ct_checkpoint_signal(), busy};  // {a stop signal, a writer still busy}
    ct_comm_all_reduce(c->state.world, flags, flags, 2, CT_I32, CT_COMM_MAX);
    *stop = flags[0] != 0;
    c->stop_signal = flags[0];  // the largest signal number caught: SIGTERM (15), SIGUSR1 (10), SIGINT (2)
    if (c->pending_step >= 0 && !flags[1]) return complete_save(c);
    return CT_OK;
}

ct_status ct_checkpoint_finish(ct_checkpointer *c) {
    if (c->pending_step < 0) return CT_OK;
    return complete_save(c);
}

// ---- resuming ------------------------------------------------------------------------------------

// Rank 0 picks the step: checkpoint.load_step, or the newest complete one; -1 for none.
static ct_status pick_step(const ct_checkpointer *c, int *step, int *removed) {
    *removed = ct_dcp_remove_incomplete(c->folder, stderr);
    static int steps[65536];
    int n = ct_dcp_list_steps(c->folder, steps, 65536, NULL, NULL, stderr);
    int want = c->cfg->ckpt_load_step;
    *step = n ? steps[n - 1] : -1;
    if (want < 0) return CT_OK;
    for (int i = 0; i < n; i++)
        if (steps[i] == want) {
            *step = want;
            return CT_OK;
        }
    char have[256] = "none";
    for (int i = 0, at = 0; i < n && at < (int)sizeof have - 16; i++)
        at += snprintf(have + at, sizeof have - (size_t)at, "%s%d", i ? ", " : "", steps[i]);
    return ct_set_error("checkpoint.load_step %d: no complete checkpoint step-%d in %s (complete: %s)", want, want,
                        c->folder, have);
}

// The manifest against the run: same model, a full state, the same window length.
static ct_status check_fits(const ct_checkpointer *c, const ct_dcp_manifest *m, const char *dir) {
    if (ct_model_config_match(&m->model, c->state.model))
        return ct_set_error("%s does not fit this run: %s", dir, ct_last_error());
    if (m->model_only)
        return ct_set_error("%s holds the weights only (checkpoint.last_save_model_only): it cannot resume training; "
                            "pass --checkpoint.load_step with an earlier step, or start from it with "
                            "--checkpoint.initial_load_path",
                            dir);
    if (m->seq_len != c->cfg->seq_len)
        return ct_set_error("%s counts data in windows of %d tokens, this run's training.seq_len is %d", dir,
                            m->seq_len, c->cfg->seq_len);
    return CT_OK;
}

// One shard's range of one kind from the checkpoint's files (ct_train_state_load's reader).
static ct_status read_range(void *reader, const char *name, ct_dcp_kind kind, const ct_shard_desc *desc, float *host) {
    return ct_dcp_read(reader, name, kind, desc, host);
}

// Every shard this rank holds (owned or a replica) from the pieces that have its elements: the
// parameters, and the moments unless weights_only.
static ct_status read_shards(ct_checkpointer *c, const char *dir, const ct_dcp_manifest *m, bool weights_only) {
    ct_dcp_reader *r = ct_dcp_open(dir, m);
    if (!r) return CT_ERR;
    ct_status s = ct_train_state_load(&c->state, weights_only ? 1 : CT_DCP_NKINDS, read_range, r);
    ct_dcp_close(r);
    return s ? ct_set_error("%s: %s", dir, ct_last_error()) : CT_OK;
}

// Verification shared out: rank r checks files r, r + world, ... (collective).
static ct_status verify_files(ct_group *world, const char *dir, const ct_dcp_manifest *m) {
    ct_status st = CT_OK;
    for (int i = world->rank; i < m->n_files && st == CT_OK; i += world->size) st = ct_dcp_verify_file(dir, &m->files[i]);
    return ct_comm_agree(world, st);
}

ct_status ct_checkpoint_load_weights(ct_checkpointer *c, const char *dir) {
    ct_group *world = c->state.world;
    ct_dcp_manifest m;
    ct_status st = ct_dcp_read_manifest(dir, &m);
    if (st == CT_OK && ct_model_config_match(&m.model, c->state.model))
        st = ct_set_error("%s does not fit this run: %s", dir, ct_last_error());
    if (ct_comm_agree(world, st) || verify_files(world, dir, &m) ||
        ct_comm_agree(world, read_shards(c, dir, &m, true))) {
        ct_dcp_manifest_free(&m);
        return ct_set_error("checkpoint.initial_load_path: %s", ct_last_error());
    }
    if (world->rank == 0) printf("checkpoint: weights loaded from %s (step %d of the run that saved them)\n", dir, m.step);
    ct_dcp_manifest_free(&m);
    return CT_OK;
}

static ct_status load_state(ct_checkpointer *c, const char *dir, const ct_dcp_manifest *m) {
    if (read_shards(c, dir, m, false)) return CT_ERR;
    ct_train_position at = {m->step, m->optimizer_step, {m->data_epoch, m->data_position}};
    if (ct_train_state_set_position(&c->state, &at)) return ct_set_error("%s: data position: %s", dir, ct_last_error());
    return CT_OK;
}

ct_status ct_checkpoint_resume(ct_checkpointer *c, bool *resumed) {
    ct_group *world = c->state.world;
    *resumed = false;
    if (!c->enabled) return CT_OK;
    int32_t pick[2] = {-1, 0};  // {step, incomplete folders removed}
    int step = -1, removed = 0;
    ct_status st = CT_OK;
    if (world->rank == 0) st = pick_step(c, &step, &removed);
    if (ct_comm_agree(world, st)) return CT_ERR;
    pick[0] = step;
    pick[1] = removed;
    ct_comm_broadcast(world, pick, 2, CT_I32, 0);
    if (pick[0] < 0) {
        if (pick[1] && world->rank == 0)
            fprintf(stderr,
                    "checkpoint: WARNING: %s holds no complete checkpoint (%d incomplete save%s removed): training "
                    "starts from step 0\n",
                    c->folder, pick[1], pick[1] == 1 ? "" : "s");
        return CT_OK;
    }
    char dir[CT_DCP_PATH];
    ct_dcp_step_dir(c->folder, pick[0], dir);
    ct_dcp_manifest m;
    st = ct_dcp_read_manifest(dir, &m);
    // The listing took only folders whose manifest holds their name's step; one replaced since
    // is refused rather than resumed from under the wrong step.
    if (st == CT_OK && m.step != pick[0])
        st = ct_set_error("%s holds step %d (its manifest), not %d: not resumed from (move it out of %s)", dir, m.step,
                          pick[0], c->folder);
    // A run already finished (run again, or a checkpoint past a shorter training.steps): nothing
    // to load or train; its last save may hold the weights alone.
    bool done = st == CT_OK && m.step >= c->cfg->steps;
    if (done && ct_model_config_match(&m.model, c->state.model))
        st = ct_set_error("%s does not fit this run: %s", dir, ct_last_error());
    else if (st == CT_OK && !done)
        st = check_fits(c, &m, dir);
    if (ct_comm_agree(world, st)) {
        ct_dcp_manifest_free(&m);
        return CT_ERR;
    }
    if (done) {
        *c->state.step = m.step;
        c->last_saved_step = m.step;
        c->nothing_left = true;
        *resumed = true;
        ct_dcp_manifest_free(&m);
        return CT_OK;
    }
    if (verify_files(world, dir, &m)) {
        char why[1100];
        snprintf(why, sizeof why, "%s", ct_last_error());
        ct_dcp_manifest_free(&m);
        return ct_set_error("checkpoint refused: %s (to resume from an earlier one: --checkpoint.load_step N)", why);
    }
    double t0 = ct_now_seconds();
    st = ct_comm_agree(world, load_state(c, dir, &m));
    // Load throughput: the bytes this rank read (its shards' parameters and moments) over the
    // slowest rank's time.
    double secs = ct_now_seconds() - t0, mb = 3.0 * 4.0 * (double)c->state.store->numel / 1e6;
    ct_comm_all_reduce(world, &secs, &secs, 1, CT_F64, CT_COMM_MAX);
    if (st == CT_OK && world->rank == 0)
        printf("checkpoint: resumed from %s (step %d, saved by %d rank%s as %s; read %.1f MB per rank in %.0f ms, "
               "%.0f MB/s per rank)\n",
               dir, m.step, m.world_size, m.world_size == 1 ? "" : "s", m.layout, mb, secs * 1e3,
               secs > 0 ? mb / secs : 0.0);
    ct_dcp_manifest_free(&m);
    if (st) return CT_ERR;
    c->last_saved_step = pick[0];
    *resumed = true;
    return CT_OK;
}
