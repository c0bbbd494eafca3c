# dpsim — one Makefile for everything. `make help` lists the targets.
#
#   make          build build/dpsim (CPU parts always; CUDA parts only where nvcc and nccl.h exist)
#   make deps     install the missing Debian packages (as root), or print the command to do so
#   make demo     deps + build + the main job (dpsim compare) on the shipped default trace
#   make test     build + the fast tier: unit tests and the quick CLI scripts (under 90 s here)
#   make check    deps + build + every test (unit, CLI, and a second pass under ASan/UBSan)
#   make bench    benchmarks (ratios measured in the same run)
#   make figures  the docs' quick figures re-run, and any that moved from what the docs quote
#   make paper    the DynaPipe paper's experiments in simulation, into paper-out/
#   make fuzz     libFuzzer on every input parser, FUZZ_SECONDS (60) each
#   make check-gpu  on a GPU machine: the CUDA layer (fp64 against the CPU, bf16 against fp64),
#                   its speed, bf16 profiles, and small plans on one GPU, and on one rank per GPU
#                   where there are several (tests/gpu/check_gpu.sh); make check-gpu-rehearsal
#                   runs it here on a fake GPU; make gpu-bundle packs its binaries and libraries
#                   for a GPU machine without the Debian packages
#   SANITIZE=1    build with AddressSanitizer and UndefinedBehaviorSanitizer (into build/san/)

DEB_PACKAGES := libgsl-dev libcjson-dev libcsv-dev gnuplot-nox libcmocka-dev libopenmpi-dev valgrind \
                openmpi-bin libopenblas-dev procps python3

CC      ?= cc
SRCDIR  := $(abspath .)
FUZZ_SECONDS ?= 60
ifeq ($(FUZZ),1)
# libFuzzer build (make fuzz): clang, ASan + UBSan, coverage instrumentation everywhere
CC      := clang
BUILD   := build/fuzz
SANFLAGS := -fsanitize=address,undefined,fuzzer-no-link -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT     := -O1
else ifeq ($(SANITIZE),1)
BUILD   := build/san
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT     := -O1
else
BUILD   := build
SANFLAGS :=
OPT     := -O2
endif

WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla
CFLAGS  ?= $(OPT) -g
ALL_CFLAGS := -std=c11 $(CFLAGS) $(WARN) $(SANFLAGS) -D_POSIX_C_SOURCE=200809L \
              -DDPSIM_SRCDIR='"$(SRCDIR)"' -MMD -MP
LDLIBS  := -lopenblas -lgsl -lcjson -lcsv -lm  # OpenBLAS first: its CBLAS serves GSL and dprun
# MPI (OpenMPI from Debian): dpsim sweep splits points across ranks under mpirun; dprun is MPI.
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
LDFLAGS += $(SANFLAGS)

# ---- what this machine has ----------------------------------------------------------------------
CUDA_HOME ?= /usr/local/cuda
NVCC := $(shell command -v nvcc 2>/dev/null || { test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc; })
NCCL_H := $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h))
ifneq ($(MAKECMDGOALS),deps)
ifneq ($(NVCC),)
$(info ✓ nvcc found at $(NVCC): the CUDA backend is built (dprun --backend cuda, check-gpu))
else
$(info ✗ nvcc not found: the CUDA backend is not built)
endif
ifneq ($(NCCL_H),)
$(info ✓ nccl.h found at $(NCCL_H))
else
$(info ✗ nccl.h not found: the NCCL transport is not built)
endif
endif

# The CUDA layer (runtime/cuda/) is built where nvcc, cuBLAS, cuBLASLt and cuDNN are found, for
# Hopper (sm_90) with PTX for newer chips; dprun then gets `--backend cuda` (one GPU; with NCCL,
# one rank per GPU under mpirun; bf16 on cuBLASLt and cuDNN, or fp64) and `check-gpu`.
CUBLAS := $(wildcard $(CUDA_HOME)/lib64/libcublas.so)
CUBLASLT := $(wildcard $(CUDA_HOME)/lib64/libcublasLt.so)
CUDNN := $(and $(wildcard $(CUDA_HOME)/lib64/libcudnn.so),$(wildcard $(CUDA_HOME)/include/cudnn.h))
ifneq ($(NVCC),)
ifeq ($(and $(CUBLAS),$(CUBLASLT),$(CUDNN)),)
$(info ✗ cuBLAS, cuBLASLt or cuDNN not found in $(CUDA_HOME): the CUDA backend is not built)
endif
endif
ifneq ($(NVCC),)
ifneq ($(and $(CUBLAS),$(CUBLASLT),$(CUDNN)),)
ifneq ($(FUZZ),1)
CUDA_OBJS := $(patsubst runtime/cuda/%.cu,$(BUILD)/obj/runtime/cuda/%.o,$(wildcard runtime/cuda/*.cu))
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudnn -lcublasLt -lcublas -lcudart -lstdc++
CUDA_DEFS := -DDPRUN_CUDA
NVCCFLAGS := -O2 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
             -Xcompiler -Wall -std=c++17
# NCCL (nccl.h and libnccl): dprun --backend cuda under mpirun, one rank per GPU.
NCCL_LIB := $(firstword $(wildcard $(CUDA_HOME)/lib64/libnccl.so /usr/lib/*/libnccl.so))
ifneq ($(NCCL_H),)
ifneq ($(NCCL_LIB),)
NCCL_OBJS := $(BUILD)/obj/runtime/cuda/nccl_link.o
CUDA_DEFS += -DDPRUN_NCCL
CUDA_LIBS += -L$(dir $(NCCL_LIB)) -Wl,-rpath,$(dir $(NCCL_LIB)) -lnccl
endif
endif
endif
endif
endif

# ---- sources ------------------------------------------------------------------------------------
LIB_SRCS := $(wildcard common/*.c traces/*.c models/*.c scheduler/*.c sim/*.c planner/*.c plots/*.c)
CLI_SRCS := $(wildcard cli/*.c)
RT_SRCS  := $(filter-out runtime/dprun.c,$(wildcard runtime/*.c))
TEST_SRCS := $(wildcard tests/unit/test_*.c)
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_TARGETS := $(FUZZ_SRCS:tests/fuzz/fuzz_%.c=%)
BENCH_SRCS := $(wildcard tests/bench/bench_*.c)

LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
CLI_OBJS := $(CLI_SRCS:%.c=$(BUILD)/obj/%.o)
RT_OBJS  := $(RT_SRCS:%.c=$(BUILD)/obj/%.o)
LIBRT    := $(BUILD)/libdprun.a
TEST_BINS := $(TEST_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
BENCH_BINS := $(BENCH_SRCS:tests/bench/%.c=$(BUILD)/bench/%)
REPLAY_BINS := $(FUZZ_TARGETS:%=$(BUILD)/fuzz-replay/%)
LIBDPSIM := $(BUILD)/libdpsim.a

.PHONY: all deps demo check test bench figures clean help default-trace paper fuzz check-gpu check-gpu-rehearsal gpu-bundle
all: $(BUILD)/dpsim $(BUILD)/dprun

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(LIBDPSIM): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^

$(BUILD)/obj/cli/cli.o $(BUILD)/obj/cli/cmd_sweep.o $(BUILD)/obj/cli/cmd_tune.o: ALL_CFLAGS += $(MPI_CFLAGS)

$(BUILD)/dpsim: $(CLI_OBJS) $(LIBDPSIM)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(MPI_LIBS)

# The validation runtime: MPI ranks, BLAS kernels.
$(RT_OBJS) $(BUILD)/obj/runtime/dprun.o: ALL_CFLAGS += $(MPI_CFLAGS) $(CUDA_DEFS)

$(BUILD)/obj/runtime/cuda/%.o: runtime/cuda/%.cu runtime/cuda/layer_cuda.h runtime/cuda/cuda_ctx.h \
                                runtime/layer.h runtime/layout.h runtime/ragged.h runtime/dev_cache.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(LIBRT): $(RT_OBJS)
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^

$(BUILD)/obj/runtime/cuda/nccl_link.o: runtime/cuda/nccl_link.c runtime/cuda/nccl_link.h runtime/cuda/layer_cuda.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(MPI_CFLAGS) -isystem $(dir $(NCCL_H)) -isystem $(CUDA_HOME)/include -c $< -o $@

$(BUILD)/dprun: $(BUILD)/obj/runtime/dprun.o $(CUDA_OBJS) $(NCCL_OBJS) $(LIBRT) $(LIBDPSIM)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(MPI_LIBS) $(CUDA_LIBS)

$(BUILD)/obj/tests/unit/%.o: ALL_CFLAGS += $(MPI_CFLAGS)
# test_ragged also has cuDNN check the attention graphs' descriptors where the backend is built.
$(BUILD)/obj/tests/unit/test_ragged.o: ALL_CFLAGS += $(CUDA_DEFS)

# The CUDA layer as an archive for the unit tests: a test links the parts it calls, and the CUDA
# libraries only when it calls them (--as-needed: loading cuDNN and cuBLASLt costs each process
# about 0.4 s at start)
LIBCUDA := $(BUILD)/libdprun_cuda.a
$(LIBCUDA): $(CUDA_OBJS) $(NCCL_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $^

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(LIBCUDA) $(LIBRT) $(LIBDPSIM)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -Wl,--start-group $(LIBRT) $(LIBCUDA) $(LIBDPSIM) -Wl,--end-group \
	  $(LDLIBS) $(MPI_LIBS) -Wl,--as-needed $(CUDA_LIBS) -Wl,--no-as-needed -lcmocka

# The cuda backend's host logic, tested without a GPU: exec_gpu.c built with CUDA and NCCL on,
# over a host fake of the CUDA layer and of NCCL (tests/unit/fake_cuda.c, NCCL as MPI) instead of
# runtime/cuda/: the unit test (single-GPU mode), and a dprun for mpirun (multi-GPU mode).
FAKE_GPU_OBJS := $(BUILD)/obj/tests/unit/exec_gpu_on_fake.o $(BUILD)/obj/tests/unit/cuda_host_on_fake.o \
                 $(BUILD)/obj/tests/unit/fake_cuda.o
$(BUILD)/obj/tests/unit/exec_gpu_on_fake.o: runtime/exec_gpu.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -DDPRUN_CUDA -DDPRUN_NCCL -c $< -o $@
$(BUILD)/obj/tests/unit/cuda_host_on_fake.o: runtime/cuda_host.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -DDPRUN_CUDA -c $< -o $@

$(BUILD)/tests/test_exec_gpu: $(BUILD)/obj/tests/unit/test_exec_gpu.o $(FAKE_GPU_OBJS) $(LIBRT) $(LIBDPSIM)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(MPI_LIBS) -lcmocka

$(BUILD)/tests/dprun-fake-gpu: $(BUILD)/obj/runtime/dprun.o $(FAKE_GPU_OBJS) $(LIBRT) $(LIBDPSIM)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(MPI_LIBS)

$(BUILD)/bench/%: $(BUILD)/obj/tests/bench/%.o $(LIBDPSIM)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Fuzz targets: replayed over their corpora by make check (any compiler), fuzzed by make fuzz.
$(BUILD)/fuzz-replay/%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(BUILD)/obj/tests/fuzz/replay.o $(LIBDPSIM)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/fuzzer/%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(LIBDPSIM)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)

# The differential target runs plans on the executors too: the fake-GPU objects, the runtime, MPI.
DIFF_OBJS := $(BUILD)/obj/tests/fuzz/fuzz_differential.o $(FAKE_GPU_OBJS) $(LIBRT) $(LIBDPSIM)
$(BUILD)/obj/tests/fuzz/fuzz_differential.o: ALL_CFLAGS += $(MPI_CFLAGS)
$(BUILD)/fuzz-replay/differential: $(BUILD)/obj/tests/fuzz/replay.o $(DIFF_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(MPI_LIBS)

$(BUILD)/fuzzer/differential: $(DIFF_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS) $(MPI_LIBS)

tests: $(TEST_BINS) $(REPLAY_BINS) $(BUILD)/tests/dprun-fake-gpu

-include $(FUZZ_SRCS:tests/fuzz/%.c=$(BUILD)/obj/tests/fuzz/%.d)
-include $(LIB_OBJS:.o=.d) $(CLI_OBJS:.o=.d) $(RT_OBJS:.o=.d) $(BUILD)/obj/runtime/dprun.d $(BUILD)/obj/tests/unit/fake_cuda.d $(BUILD)/obj/tests/unit/exec_gpu_on_fake.d $(BUILD)/obj/tests/unit/cuda_host_on_fake.d $(BUILD)/obj/runtime/cuda/nccl_link.d $(TEST_SRCS:tests/unit/%.c=$(BUILD)/obj/tests/unit/%.d) \
         $(BENCH_SRCS:tests/bench/%.c=$(BUILD)/obj/tests/bench/%.d)

# ---- set-up, demo, tests ------------------------------------------------------------------------
deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then echo "deps: every Debian package is installed"; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then \
	  echo "deps: installing$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null \
	    && echo "deps: installed$$missing"; \
	else \
	  echo "deps: missing$$missing"; \
	  echo "deps: run: sudo apt-get update && sudo apt-get install -y$$missing"; exit 1; \
	fi

DEFAULT_TRACE := traces/flanv2-100k.csv

demo: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/dpsim compare --out dpsim-out

# Regenerates the shipped default trace (the exact command the README quotes).
default-trace: all
	$(BUILD)/dpsim trace gen --mix flanv2 --samples 100000 --seed 1 -o $(DEFAULT_TRACE)

# what only the tests need: a browser for the interactive page's test (tests/cli/test_html.sh)
CHECK_PACKAGES := chromium

check: deps
	@$(MAKE) --no-print-directory deps DEB_PACKAGES="$(CHECK_PACKAGES)" || \
	  echo "check: $(CHECK_PACKAGES) not installed: tests/cli/test_html.sh skips its browser checks"
	@$(MAKE) --no-print-directory all tests
	@$(MAKE) --no-print-directory SANITIZE=1 all tests
	@tests/run.sh $(BUILD) build/san

# the fast tier: unit tests and the CLI scripts not marked "# tier: full" (tests/run.sh)
test: all tests
	@DPSIM_TEST_TIER=fast tests/run.sh $(BUILD)

bench: all $(BENCH_BINS)
	@for b in $(BENCH_BINS); do $$b || exit 1; echo; done

# The docs' quick figures re-run and compared with what the docs quote (tools/figures.sh).
# /usr/bin/time reads the 16,384-GPU run's peak RSS
FIGURES_PACKAGES := time
figures: deps all
	@$(MAKE) --no-print-directory deps DEB_PACKAGES="$(FIGURES_PACKAGES)"
	@bash tools/figures.sh $(BUILD)

FUZZ_PACKAGES := clang libclang-rt-14-dev

# libFuzzer on every parser for FUZZ_SECONDS each; new crashes land in tests/fuzz/corpus/TARGET/
# (kept as regression inputs that make check replays).
fuzz: deps
	@$(MAKE) --no-print-directory deps DEB_PACKAGES="$(FUZZ_PACKAGES)"
	@$(MAKE) --no-print-directory FUZZ=1 $(FUZZ_TARGETS:%=build/fuzz/fuzzer/%)
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p build/fuzz/corpus/$$t; \
	  build/fuzz/fuzzer/$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=4096 \
	    -artifact_prefix=tests/fuzz/corpus/$$t/ build/fuzz/corpus/$$t tests/fuzz/corpus/$$t \
	    >build/fuzz/$$t.log 2>&1; rc=$$?; \
	  printf '%-14s %s %s\n' $$t "$$(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' build/fuzz/$$t.log | tail -1)" \
	    "$$( [ $$rc = 0 ] && echo clean || echo "FAILED (exit $$rc, see build/fuzz/$$t.log)")"; \
	done

# On a machine with a GPU: the GPU layer against the CPU layer, a GPU profile, and small plans run
# on one GPU (and over NCCL with two GPUs or more) through dpsim validate, their gradient norms
# against the cpu backend's (tests/gpu/check_gpu.sh). GPU_OUT (the output folder) and
# CHECK_GPU_BUDGET / STEP_TIMEOUT (seconds) pass through to it.
GPU_OUT ?= gpu-out
check-gpu: all
	BUILD=$(BUILD) GPU_OUT=$(GPU_OUT) tests/gpu/check_gpu.sh

# The same script rehearsed without a GPU (about 11 minutes here, most of it the fake GPU running
# the CPU layer): dprun replaced by the fake-GPU build
# (tests/unit/fake_cuda.c: the CPU layer, NCCL as MPI; its timings are meaningless), so that the
# script's steps are known to work before GPU time is spent on them.
check-gpu-rehearsal: all $(BUILD)/tests/dprun-fake-gpu
	rm -rf $(BUILD)/rehearsal && mkdir -p $(BUILD)/rehearsal
	ln -s ../dpsim $(BUILD)/rehearsal/dpsim && ln -s ../tests/dprun-fake-gpu $(BUILD)/rehearsal/dprun
	BUILD=$(BUILD)/rehearsal GPU_OUT=$(BUILD)/rehearsal/out REHEARSAL=1 tests/gpu/check_gpu.sh

# dpsim, dprun and the libraries a GPU machine without this project's Debian packages lacks, for
# tests/gpu/check_gpu.sh there (tools/gpu_bundle.sh says how to run it).
gpu-bundle: all
	BUILD=$(BUILD) tools/gpu_bundle.sh

# The paper's experiments in simulation (Figs. 13-17) into paper-out/.
paper: all
	plots/paper.sh paper-out

clean:
	rm -rf build

help:
	@sed -n '1,/SANITIZE=1/p' Makefile
