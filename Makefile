# ctitan build. `make` builds build/ctitan; `make test` runs every test; `make bench` the benchmarks.
# Sources are found by wildcard so adding a file needs no edit here:
#   src/**/*.c           -> build/libctitan.a (except src/cli/main.c)
#   tests/test_*.c       -> build/tests/test_*   (each a program; tests/run_tests.sh runs them)
#   bench/bench_*.c      -> build/bench/bench_*
CC      := mpicc
# One build for every x86-64-v3 machine (AVX2 + FMA): everything targets that baseline except the
# cpu kernels, which are built once per kernel set (below) and chosen at start-up. NATIVE=1 builds
# everything, kernels included, for this machine alone (-march=native): for people who build on
# the machine they train on; the binary may die on an illegal instruction elsewhere.
ifeq ($(NATIVE),1)
MARCH   ?= -march=native
else
MARCH   ?= -march=x86-64-v3
endif
OPT     ?= -O3
CFLAGS  ?= $(OPT) $(MARCH) -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-unused-parameter -fopenmp -Isrc
LDLIBS  := -ldnnl -lpcre2-8 -lutf8proc -lz -lzstd -lsnappy -lpthread -lm
BUILD   := build

# Sanitizer build: `make test SANITIZE=1` builds everything with AddressSanitizer and
# UndefinedBehaviorSanitizer into build-san/ (never mixed with build/'s objects) and runs the suite
# there; tests/run_tests.sh sets the sanitizer options (OpenMPI's leaks are suppressed there).
# -fno-sanitize-recover: a UB report ends the program, so a test cannot pass over one.
# NATIVE=1's objects go to build-native/ unless BUILD is given (never mixed with build/'s).
ifeq ($(NATIVE),1)
ifeq ($(origin BUILD),file)
BUILD   := build-native
endif
endif
ifeq ($(SANITIZE),1)
BUILD   := build-san
CFLAGS  += -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
endif

SETUP_STAMP := $(BUILD)/.setup-done
LIB_SRCS  := $(filter-out src/cli/main.c,$(shell find src -name '*.c' | sort))

# ---- cpu kernel sets (src/kernels/cpu/kernel_set.h) --------------------------------------------
# The files of src/kernels/cpu except KSET_SHARED are compiled once per set with that set's
# instructions into $(BUILD)/kset/SET/, linked into one object per set whose names carry the
# suffix __SET, and reached through the stubs of $(BUILD)/kset/dispatch.S (scripts/kernel_sets.sh).
# KSET_SHARED: files every set shares, compiled once at the baseline -- symbols the process must
# have once (operator new, GOMP_parallel, a flag tests read) and the choosing itself, which is
# compiled for plain x86-64 so that a CPU below the baseline is told so in one line.
# KSET_TESTS: test programs that include a set's internal SIMD headers, built once per set
# (test_NAME-SET; tests/run_tests.sh runs those of the sets the CPU runs).
KSET_SHARED := src/kernels/cpu/kernel_set.c src/kernels/cpu/onednn_arena.c src/kernels/cpu/omp_inline.c
KSET_SRCS   := $(filter-out $(KSET_SHARED),$(sort $(wildcard src/kernels/cpu/*.c)))
KSET_TESTS  := tests/test_fastmath.c tests/test_kernels_xent.c
ifeq ($(NATIVE),1)
KSETS := native
else
KSETS := avx2 avx512 avx512_bf16 amx
endif
KSET_FLAGS_native      := -march=native
KSET_FLAGS_avx2        := -march=x86-64-v3
KSET_FLAGS_avx512      := -march=x86-64-v4 -mprefer-vector-width=512
KSET_FLAGS_avx512_bf16 := $(KSET_FLAGS_avx512) -mavx512bf16
KSET_FLAGS_amx         := $(KSET_FLAGS_avx512_bf16) -mamx-tile -mamx-bf16
KSET_OBJS := $(KSETS:%=$(BUILD)/kset/%.o) $(BUILD)/kset/dispatch.o
LIB_SRCS  := $(filter-out $(KSET_SRCS),$(LIB_SRCS))
# Generated sources: the test device's kernel table (scripts/sim_table.sh, from kernels/backend.h).
GEN_OBJS  := $(BUILD)/gen/table_sim.o
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(KSET_OBJS) $(GEN_OBJS)
TEST_SRCS := $(filter-out $(KSET_TESTS),$(wildcard tests/test_*.c))
TEST_BINS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%) \
             $(foreach s,$(KSETS),$(KSET_TESTS:tests/%.c=$(BUILD)/tests/%-$(s)))
BENCH_SRCS := $(wildcard bench/bench_*.c)
BENCH_BINS := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)

# ---- CUDA backend ------------------------------------------------------------------------------
# `make CUDA=1` adds the cuda kernel table (src/kernels/cuda: *.cu through nvcc, *.c through $(CC)
# with the CUDA headers) and the nccl comm backend (src/comm/comm_nccl.c), defines CT_HAVE_CUDA
# (backend.c / comm.c list them then) and links cudart, cublasLt and nccl. Its objects go to
# build-cuda/ unless BUILD is given (-DCT_HAVE_CUDA changes backend.c and comm.c, so never mix
# them with build/'s). Without CUDA=1 those sources are left out and nothing needs CUDA headers.
# CUDA_GENCODE: machine code for Hopper (sm_90) and Blackwell (sm_100); tests/test_cuda_build.sh
# passes one pair to keep its compile short. -fmad=false: no a*b+c contraction, so elementwise
# kernels round as the CPU reference does (tests/cuda compare them with tight tolerances).
CUDA_HOME    ?= /usr/local/cuda
NCCL_HOME    ?= $(CUDA_HOME)
NVCC         ?= $(CUDA_HOME)/bin/nvcc
CUDA_GENCODE ?= -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_100,code=sm_100
NVCC_OPT     ?= -O2
ifeq ($(CUDA),1)
ifeq ($(origin BUILD),file)
BUILD := build-cuda
SETUP_STAMP := $(BUILD)/.setup-done
endif
CU_SRCS   := $(shell find src -name '*.cu' | sort)
CU_OBJS   := $(CU_SRCS:%.cu=$(BUILD)/%.cu.o)
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(KSET_OBJS) $(GEN_OBJS) $(CU_OBJS)
CFLAGS    += -DCT_HAVE_CUDA -I$(CUDA_HOME)/include -I$(NCCL_HOME)/include
NVCCFLAGS ?= $(NVCC_OPT) -g -std=c++17 $(CUDA_GENCODE) -fmad=false -Isrc -Werror all-warnings \
             -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-parameter
CUDA_LIBDIRS := $(CUDA_HOME)/lib64 $(NCCL_HOME)/lib $(NCCL_HOME)/lib64
LDLIBS    += $(foreach d,$(CUDA_LIBDIRS),-L$(d) -Wl,-rpath,$(d)) -lnccl -lcublasLt -lcudart -lstdc++
CUDA_TEST_BINS := $(patsubst tests/cuda/%.c,$(BUILD)/tests/cuda/%,$(wildcard tests/cuda/test_*.c))
else
LIB_SRCS  := $(filter-out src/kernels/cuda/% src/comm/comm_nccl.c,$(LIB_SRCS))
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(KSET_OBJS) $(GEN_OBJS)
endif

.PHONY: all test bench run data clean setup lint precision-compare fault-drill
all: $(BUILD)/ctitan

# `make` only builds. scripts/setup.sh installs the Debian packages (idempotent; the stamp makes it
# run once per tree): `make setup` runs it, and so do `make run` and `make test`, which first install
# and then build in a second make (so that nothing compiles before the compiler is there).
$(SETUP_STAMP): scripts/setup.sh
	@mkdir -p $(BUILD)
	bash scripts/setup.sh
	@touch $@
setup: $(SETUP_STAMP)

# Without the toolchain a build stops with one line that says what to run, not a compiler error.
.PHONY: toolchain
toolchain:
	@command -v $(CC) >/dev/null 2>&1 || { echo "make: $(CC) not found: run 'make setup' (scripts/setup.sh installs what ctitan needs)"; exit 1; }

$(BUILD)/%.o: %.c | toolchain
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# One set: its objects, then one object with the set's names (scripts/kernel_sets.sh merge).
define KSET_RULES
$(BUILD)/kset/$(1)/%.o: %.c | toolchain
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS) $$(KSET_FLAGS_$(1)) -DCT_KERNEL_SET_NAME='"$(1)"' -MMD -MP -c $$< -o $$@
$(BUILD)/kset/$(1).o: $$(KSET_SRCS:%.c=$(BUILD)/kset/$(1)/%.o) scripts/kernel_sets.sh
	bash scripts/kernel_sets.sh merge $(1) $$@ $$(filter %.o,$$^)
$(BUILD)/tests/%-$(1): tests/%.c $$(wildcard tests/*.h) $(BUILD)/libctitan.a
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS) $$(KSET_FLAGS_$(1)) -Itests $$< -o $$@ $(BUILD)/libctitan.a $$(LDLIBS)
endef
$(foreach s,$(KSETS),$(eval $(call KSET_RULES,$(s))))

$(BUILD)/kset/dispatch.S: $(KSETS:%=$(BUILD)/kset/%.o) scripts/kernel_sets.sh
	bash scripts/kernel_sets.sh dispatch $@ $(KSETS)
$(BUILD)/kset/dispatch.o: $(BUILD)/kset/dispatch.S
	$(CC) -c $< -o $@

$(BUILD)/gen/table_sim.c: src/kernels/backend.h scripts/sim_table.sh
	@mkdir -p $(dir $@)
	bash scripts/sim_table.sh $< > $@.tmp && mv $@.tmp $@
$(BUILD)/gen/%.o: $(BUILD)/gen/%.c | toolchain
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
# (plain x86-64: see KSET_SHARED)
$(BUILD)/src/kernels/cpu/kernel_set.o: MARCH := -march=x86-64

$(BUILD)/%.cu.o: %.cu | toolchain
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@

# GPU tests (tests/cuda/, CUDA=1 only): each kernel against the cpu backend and a tiny model's
# parity. Never part of `make test`; without a GPU each prints "SKIP: no CUDA device" and exits 0.
.PHONY: test-cuda
$(BUILD)/tests/cuda/%: tests/cuda/%.c $(wildcard tests/*.h tests/cuda/*.h) $(BUILD)/libctitan.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $< -o $@ $(BUILD)/libctitan.a $(LDLIBS)
test-cuda: $(BUILD)/ctitan $(CUDA_TEST_BINS)
	@test "$(CUDA)" = 1 || { echo "make test-cuda: needs CUDA=1"; exit 1; }
	@rc=0; for t in $(CUDA_TEST_BINS); do echo "== $$t"; $$t || rc=1; done; exit $$rc

# The commit goes into one object only (core/version.c), rebuilt when HEAD moves.
GIT_COMMIT := $(shell git describe --always --dirty 2>/dev/null || echo unknown)
$(BUILD)/src/core/version.o: CFLAGS += -DCT_GIT_COMMIT='"$(GIT_COMMIT)"'
$(BUILD)/src/core/version.o: $(wildcard .git/HEAD .git/index)

$(BUILD)/libctitan.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/ctitan: $(BUILD)/src/cli/main.o $(BUILD)/libctitan.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(wildcard tests/*.h) $(BUILD)/libctitan.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $< -o $@ $(BUILD)/libctitan.a $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libctitan.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(BUILD)/libctitan.a $(LDLIBS)

test: setup
	$(MAKE) test-build
	BUILD=$(BUILD) SANITIZE=$(SANITIZE) bash tests/run_tests.sh
# The whole suite on the test device (training.device cpu_sim: device memory the host cannot touch
# outside backend calls), as a GPU run would place its buffers: a host access to a device buffer
# ends the test that made it. MPI's single-copy transfers read a peer's memory outside its calls,
# so they are off (the ranks copy through shared memory; comm_mpi.c does the same for a cpu_sim run).
.PHONY: test-sim
test-sim: setup
	$(MAKE) test-build
	CTITAN_DEVICE=cpu_sim OMPI_MCA_btl_vader_single_copy_mechanism=none BUILD=$(BUILD) bash tests/run_tests.sh
.PHONY: test-build
test-build: $(BUILD)/ctitan $(TEST_BINS)

bench: $(BUILD)/ctitan $(BENCH_BINS)
	bash bench/run_bench.sh

# Five precisions (fp32, bf16, float8 tensorwise / rowwise, MXFP8) on the default run, compared with
# fp32 (STEPS=300, OUT=outputs/precision): about half an hour on 2 cores, so not in `make bench`.
precision-compare: $(BUILD)/ctitan
	BUILD=$(BUILD) bash bench/precision_compare.sh

# Fault drill: 20 runs of a 4-rank job hit by kill -9, SIGSTOP, a read-only or a full
# disk at random moments; each must end in seconds naming the rank and cause, checkpoints intact.
fault-drill: $(BUILD)/ctitan
	BUILD=$(BUILD) bash tests/fault_drill.sh 20

# Chaos run: KILLS (default 50) kill -9s of a checkpointing job -- in steps, in sync and
# async saves, in pruning -- each followed by a resume; completed runs must match an uninterrupted one.
KILLS ?= 50
chaos: $(BUILD)/ctitan
	BUILD=$(BUILD) bash tests/chaos_resume.sh $(KILLS)

# ---- Fuzzing ----------------------------------------------------------------------------------
# libFuzzer targets, one per parser (tests/fuzz/fuzz_*.c, seeds in tests/fuzz/corpus/<name>/),
# built with clang + ASan + UBSan into $(BUILD)/fuzz/. They link only the files the parsers live
# in -- core, data, checkpoint, the model interface (families, their blocks, the registry), the pipeline schedules and
# their CSV and simulator, the planner's profiles, the metrics reader and SVG plot -- none of which
# includes <mpi.h> (only src/comm does), so no mpicc, MPI stub, OpenMP or oneDNN is needed. Not -Werror:
# the product build (gcc) is the one held to that; a clang-only warning must not stop fuzzing.
#   make fuzz          every target for FUZZ_SECONDS (120) each; prints executions per target
#   make fuzz-smoke    every target for 5 s (tests/test_fuzz_smoke.sh runs 3 s each in `make test`)
FUZZ_CC       := clang
FUZZ_CFLAGS   := -O1 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Isrc -Itests/fuzz \
                 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_LIB_SRCS := $(shell find src/core src/data src/checkpoint -name '*.c' | sort) \
                 src/model/params.c src/model/model.c src/model/moe_settings.c \
                 $(wildcard src/model/llama3/*.c src/model/llama3_moe/*.c) \
                 src/model/linear.c src/model/weight_packs.c src/model/moe_layer.c src/model/checkpointing.c \
                 src/parallel/schedule.c src/parallel/schedule_csv.c src/parallel/pipeline_schedules.c \
                 src/parallel/schedule_lowering.c \
                 src/parallel/pipeline_sim.c src/plan/hardware.c src/metrics/metrics_read.c src/metrics/svg_plot.c
FUZZ_LIB_OBJS := $(FUZZ_LIB_SRCS:%.c=$(BUILD)/fuzz/obj/%.o)
FUZZ_BINS     := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_SECONDS  ?= 120
.PHONY: fuzz fuzz-smoke fuzz-build

$(BUILD)/fuzz/obj/%.o: %.c | toolchain
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(BUILD)/fuzz/libctitan-fuzz.a: $(FUZZ_LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

# The prepare target encodes with a committed rank file (the tokenizer target's trained seed),
# found by absolute path: data/fortunes/ is made by `make run`, not in a fresh clone.
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(wildcard tests/fuzz/*.h) $(BUILD)/fuzz/libctitan-fuzz.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -DCT_FUZZ_TOKENIZER='"$(CURDIR)/tests/fuzz/corpus/tokenizer/seed-trained"' \
		$< -o $@ $(BUILD)/fuzz/libctitan-fuzz.a -lpcre2-8 -lutf8proc -lz -lzstd -lsnappy -lpthread -lm

fuzz-build: $(FUZZ_BINS)
fuzz: fuzz-build
	bash tests/fuzz/run_fuzz.sh $(BUILD)/fuzz $(FUZZ_SECONDS)
fuzz-smoke: fuzz-build
	bash tests/fuzz/run_fuzz.sh $(BUILD)/fuzz 5

run: setup
	$(MAKE) $(BUILD)/ctitan
	bash scripts/main_job.sh

# The default corpus alone (scripts/prepare_data.sh): what configs/llama3_debug.toml trains on.
data: setup
	$(MAKE) $(BUILD)/ctitan
	bash scripts/prepare_data.sh

# Optional, not part of `make test`: transformers loads what `ctitan convert --to hf` writes,
# without a warning, and computes ctitan's loss, and ctitan reads what save_pretrained writes
# (tests/interop/). Skips with one line where python3, torch or transformers is missing.
# PYTHON=... picks the interpreter; without it $(BUILD)/venv's when there is one
# (python3 -m venv build/venv && build/venv/bin/pip install torch transformers numpy), else python3.
# tensorboard_read.py reads our TensorBoard event files (a fixture, a training run) with the
# tensorboard package (pip-installed into $(BUILD)/interop-pylib when missing; one SKIP line when
# that fails). hf_tokenizer_json.py compares `ctitan tokenizer encode` with tokenizers' ids on
# tokenizer.json files it trains and converts; parquet_corpus.py writes Parquet with pyarrow (every
# compression, dictionary on and off, data pages v1 and v2) and with `datasets`, and checks that
# `data prepare` gives the shards of the same documents as text (their packages pip-installed into
# $(BUILD)/interop-venv when missing; one SKIP line when that fails). Every script runs whatever
# the others' outcome.
.PHONY: test-interop
test-interop: $(BUILD)/ctitan $(BUILD)/tests/test_tensorboard
	@py=$${PYTHON:-$$([ -x $(BUILD)/venv/bin/python ] && echo $(BUILD)/venv/bin/python || echo python3)}; \
	if command -v $$py >/dev/null; then rc=0; \
	BUILD=$(BUILD) $$py tests/interop/hf_transformers.py --bin $(BUILD)/ctitan || rc=1; \
	BUILD=$(BUILD) $$py tests/interop/tensorboard_read.py --writer $(BUILD)/tests/test_tensorboard --bin $(BUILD)/ctitan || rc=1; \
	BUILD=$(BUILD) $$py tests/interop/hf_tokenizer_json.py --bin $(BUILD)/ctitan || rc=1; \
	BUILD=$(BUILD) $$py tests/interop/parquet_corpus.py --bin $(BUILD)/ctitan || rc=1; exit $$rc; \
	else echo "SKIP test-interop: no $$py"; fi

# The include graph points one way (core <- kernels|comm <- model <- parallel <- train <- cli).
lint:
	bash scripts/check_includes.sh

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
