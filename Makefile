# seqtrain build.  `make` builds bin/seqtrain, bin/seqeval, bin/seqtok; `make test` runs every test; `make check`
# the fast subset for editing; `make run` prepares the bundled data and runs the quickstart config.
#
# Variants (each builds into its own folder, so they never mix objects):
#   make                 -O3 -march=native -fopenmp            -> bin/
#   make NO_OMP=1        without OpenMP                         -> build/noomp/bin/
#   make DEBUG=1         -O0 -g                                 -> build/debug/bin/
#   make SANITIZE=1      ASan + UBSan, -O1 -g                   -> build/asan/bin/
#   PORTABLE=1           base -march=x86-64 instead of native: runs on any x86-64 CPU (combines with the
#                        others)                                -> build/<variant>-portable/bin/
#   MPI=1                data-parallel training over MPI (mpicc; Open MPI installed when missing); combines
#                        with the others                   -> build/<variant>-mpi/bin/  (mpirun -np N .../seqtrain)
#   CROSS=aarch64-linux-gnu  Debian's cross gcc for ARM64 (generic kernel set); `make CROSS=... objects` compiles
#                        every object without linking               -> build/<variant>-<CROSS>/
#   WERROR=1             adds -Werror (CI sets it)
#   CUDA=1               the GPU backend (src/gpu/*.cu with nvcc + cuBLAS, run.device cuda) instead of src/gpu/none.c;
#                        the C objects are the variant's own (they do not depend on it) -> build/cuda/bin/
#                        (build/<variant>-cuda/bin/ combined with the others). NVCC=path, CUDA_ARCH=90 (sm_90, H100)
#   make test-cuda       CUDA=1's tools and the GPU-vs-CPU parity test, run (skipped with a message without a GPU)
#
# Kernel sets (src/core/cpu.h, src/nn/isa.h): every src/nn/*.c is compiled once per set, on x86-64 as
# generic (the base -march), avx2 (x86-64-v3) and avx512 (x86-64-v4) whatever the build host has; at run time
# the best set the CPU supports is used (SEQ_KERNELS=avx2 etc. chooses another). Elsewhere only generic.

# `make`, `make tools` and `make run` run one compile job per CPU unless the command line gives -j (or -jN): a
# fresh 2-core machine spent half of `make run`'s non-training time compiling one file at a time. Other goals keep
# make's default: `make test` runs makes of its own with their -j (a -j here would hand them a jobserver they
# cannot use, with a warning each), and `make clean all` must not delete and build at once.
ifeq ($(filter -j%,$(MAKEFLAGS))$(filter-out all tools run,$(MAKECMDGOALS)),)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif

CC  ?= cc
CXX ?= c++
ifeq ($(origin CC),default)
CC := gcc
endif
ifeq ($(origin CXX),default)
CXX := g++
endif

WARN     := -Wall -Wextra -Wno-unused-parameter -Wshadow -Wvla -Wformat=2
CSTD     := -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE
OPT      := -O3
ARCH     := -march=native
TUNE     := -mtune=native
OMPFLAGS := -fopenmp
VARIANT  := release
BIN      := bin

ifeq ($(NO_OMP),1)
OMPFLAGS := -Wno-unknown-pragmas
VARIANT  := noomp
BIN      := build/noomp/bin
endif
ifeq ($(DEBUG),1)
OPT      := -O0 -g
VARIANT  := debug
BIN      := build/debug/bin
endif
ifeq ($(SANITIZE),1)
OPT      := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
VARIANT  := asan
BIN      := build/asan/bin
endif
ifeq ($(PORTABLE),1)
ARCH     := -march=x86-64 -mtune=generic
TUNE     := -mtune=generic
VARIANT  := $(VARIANT)-portable
BIN      := build/$(VARIANT)/bin
endif
# MPI=1: data-parallel training over MPI ranks (Open MPI from Debian, installed on first use, with procps, whose
# pgrep tests/mpi/test_mpi.sh uses); mpicc and mpicxx wrap the same gcc and g++ with MPI's include and library
# paths
ifeq ($(MPI),1)
CC       := mpicc
CXX      := mpicxx
CFLAGS   += -DSEQ_MPI
VARIANT  := $(VARIANT)-mpi
BIN      := build/$(VARIANT)/bin
DEPS_STAMP := build/.deps-mpi-installed
endif
# CROSS=aarch64-linux-gnu: Debian's cross gcc for that target (armv8-a, the generic kernel set only) -> build/<variant>-<CROSS>/;
# `make CROSS=... objects` compiles every object (CI: the ARM build is checked to compile); linking also needs
# the target's libraries (dpkg --add-architecture arm64; libcjson-dev:arm64 libzstd-dev:arm64
# libsentencepiece-dev:arm64, which replaces the host's libsentencepiece-dev while installed)
ifneq ($(CROSS),)
CC       := $(CROSS)-gcc
CXX      := $(CROSS)-g++
ARCH     := -march=armv8-a
TUNE     :=
VARIANT  := $(VARIANT)-$(CROSS)
BIN      := build/$(VARIANT)/bin
endif
ifeq ($(WERROR),1)
WARN     += -Werror
endif

OBJDIR   := build/$(VARIANT)/obj

# the GPU backend: nvcc from PATH, else CUDA's default place; its lib64 beside it
NVCC      ?= $(or $(shell command -v nvcc 2>/dev/null),/usr/local/cuda/bin/nvcc)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH ?= 90
NVCCFLAGS := -std=c++17 -O3 -arch=sm_$(CUDA_ARCH) -Isrc -MMD -MP -Xcompiler -Wall,-Wextra,-Wno-unused-parameter
ifeq ($(CUDA),1)
BIN      := $(if $(filter release,$(VARIANT)),build/cuda/bin,build/$(VARIANT)-cuda/bin)
endif
TESTBIN  := build/$(VARIANT)/tests
# errno is never read after a libm call; without this gcc keeps every loop with a sqrtf scalar (a branch to
# the errno-setting call), e.g. the AdamW update. Not fast-math: every result stays IEEE and the same.
# -fno-trapping-math: no code reads the FP exception flags, so gcc may evaluate both arms of a float ?: and
# select (if-conversion). Without it, only AVX-512's masked instructions let the branch-free exp/GELU/softmax
# loops (nn/fastmath.h, nn/gelu.h) vectorise: with AVX2 they stayed scalar (GELU epilogue 11% of a training
# step on the avx2 kernels against 2% on avx512). Neither flag changes a result.
MATHFLAGS := -fno-math-errno -fno-trapping-math
CFLAGS   += $(CSTD) $(OPT) $(ARCH) $(MATHFLAGS) $(OMPFLAGS) $(WARN) -Isrc -MMD -MP
CXXFLAGS += -std=c++17 $(OPT) $(ARCH) $(OMPFLAGS) -Wall -Wextra -Isrc -MMD -MP
LDLIBS   += -lcjson -lzstd -lsentencepiece -lsentencepiece_train -lm -lpthread
LDFLAGS  += $(OPT) $(OMPFLAGS)

# the compiler's target ("x86_64-linux-gnu", "aarch64-linux-gnu")
TARGET   := $(shell $(CC) -dumpmachine 2>/dev/null || gcc -dumpmachine)
# kernel sets: the x86 ones wherever the compiler targets x86-64 (the running CPU picks among them)
ifneq ($(filter x86_64%,$(TARGET)),)
ISA_SETS := generic avx2 avx512
CFLAGS   += -DSEQ_X86_SETS
else
ISA_SETS := generic
endif
# gcc 12 for aarch64 (Debian 12's) crashes in its vectoriser on an fmax reduction of a float widened to double
# (internal compiler error in vect_transform_reduction), the error measure the tests use throughout: there the
# tests build without loop vectorisation. The library keeps it (its one such loop is a compare: model.c).
ifneq ($(filter aarch64%,$(TARGET)),)
TEST_CFLAGS := -fno-tree-loop-vectorize
endif
ISA_generic := -DSEQ_ISA=0 $(ARCH)
ISA_avx2    := -DSEQ_ISA=1 -march=x86-64-v3 $(TUNE)
ISA_avx512  := -DSEQ_ISA=2 -march=x86-64-v4 $(TUNE)

# library = every C/C++ file under src/ except the command-line mains; src/nn/ (but its dispatch.c) once
# per kernel set, into obj/nn-<set>/
NN_C     := $(filter-out src/nn/dispatch.c,$(wildcard src/nn/*.c))
LIB_C    := $(filter-out src/cli/seq%.c $(NN_C),$(wildcard src/*/*.c))
LIB_CC   := $(wildcard src/*/*.cc)
LIB_OBJ  := $(LIB_C:src/%.c=$(OBJDIR)/%.o) $(LIB_CC:src/%.cc=$(OBJDIR)/%.o) \
            $(foreach set,$(ISA_SETS),$(NN_C:src/nn/%.c=$(OBJDIR)/nn-$(set)/%.o))
# CUDA=1: gpu/*.cu (into obj/cuda/, linked with cuBLAS) instead of gpu/none.c
ifeq ($(CUDA),1)
CU_SRC   := $(wildcard src/gpu/*.cu)
LIB_OBJ  := $(filter-out $(OBJDIR)/gpu/none.o,$(LIB_OBJ)) $(CU_SRC:src/%.cu=$(OBJDIR)/cuda/%.o)
LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart
TESTBIN  := $(TESTBIN)-cuda
endif
TOOLS    := seqtrain seqeval seqtok
TOOL_BIN := $(TOOLS:%=$(BIN)/%)
TESTS    := $(patsubst tests/%.c,%,$(wildcard tests/test_*.c))
TEST_BIN := $(TESTS:%=$(TESTBIN)/%)
BENCHES  := $(patsubst bench/%.c,%,$(wildcard bench/*.c))
BENCH_BIN := $(BENCHES:%=build/$(VARIANT)/bench/%)
DEPS_STAMP ?= build/.deps-installed

.PHONY: all tools tests test check test-cuda run deps data clean benches fuzz fuzz-build objects
.SECONDARY:  # keep objects between builds (they are intermediate files of pattern rules)
all: tools
tools: $(TOOL_BIN)
tests: $(TEST_BIN)
benches: $(BENCH_BIN)
# every object of the tools and tests, unlinked (a cross build's check without the target's libraries)
objects: $(LIB_OBJ) $(TOOLS:%=$(OBJDIR)/cli/%.o) $(TESTS:%=$(OBJDIR)/tests/%.o)

# Debian packages: installed on first use when missing (scripts/install_deps.sh says what it does)
deps: $(DEPS_STAMP)
build/.deps-installed: scripts/install_deps.sh
	@bash scripts/install_deps.sh
	@mkdir -p $(dir $@) && touch $@
build/.deps-mpi-installed: build/.deps-installed
	@bash scripts/install_deps.sh libopenmpi-dev openmpi-bin procps
	@mkdir -p $(dir $@) && touch $@

$(OBJDIR)/%.o: src/%.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# one pattern rule per kernel set: the set's -march instead of the base one, and nn/isa.h first (it renames the copy's functions)
define ISA_RULE
$$(OBJDIR)/nn-$(1)/%.o: src/nn/%.c | $$(DEPS_STAMP)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(filter-out $$(ARCH),$$(CFLAGS)) $$(ISA_$(1)) -include src/nn/isa.h -c $$< -o $$@
endef
$(foreach set,$(ISA_SETS),$(eval $(call ISA_RULE,$(set))))

$(OBJDIR)/cuda/%.o: src/%.cu | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(filter -I%,$(CFLAGS)) -c $< -o $@

$(OBJDIR)/%.o: src/%.cc | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@

$(BIN)/%: $(OBJDIR)/cli/%.o $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(OBJDIR)/tests/%.o: tests/%.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(TEST_CFLAGS) -Itests -c $< -o $@

$(TESTBIN)/%: $(OBJDIR)/tests/%.o $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(OBJDIR)/bench/%.o: bench/%.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

build/$(VARIANT)/bench/%: $(OBJDIR)/bench/%.o $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# the whole suite: unit tests (under every kernel set the CPU has) and CLI tests on the release build, the
# same again under ASan/UBSan, PORTABLE=1's unit tests, and a compile of the NO_OMP and DEBUG variants; ends
# with "N passed, N failed"
test: $(DEPS_STAMP)
	@bash tests/run_all.sh

# the edit-test loop (under 3 minutes on 2 cores): the release tools and tests, the unit tests under the kernel set
# this CPU picks, and the command-line smoke tests; ends with "N passed, N failed". `make test` is the whole suite
check: $(DEPS_STAMP)
	@bash tests/run_all.sh --check

# the GPU backend's kernels emulated on the CPU (tests/gpu/emu/: CUDA's runtime, the kernel launch and cuBLAS), so
# the parity test checks their numbers where there is no GPU (tests/gpu/run.sh runs it): each .cu with its
# launches k<<<g, b[, smem]>>>(...) rewritten to emu_launch(emu_cfg(g, b[, smem]), k, ...), compiled by the C++ compiler
EMU_OBJ  := $(patsubst src/%.cu,$(OBJDIR)/gpuemu/%.o,$(wildcard src/gpu/*.cu))
EMU_DIR  := build/$(VARIANT)/tests-gpuemu
EMU_LIB  := $(filter-out $(OBJDIR)/gpu/none.o $(OBJDIR)/cuda/%,$(LIB_OBJ)) $(EMU_OBJ)
$(OBJDIR)/gpuemu/%.o: src/%.cu tests/gpu/emu/cuda_runtime.h tests/gpu/emu/cublas_v2.h tests/gpu/emu/mma.h | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	perl -pe 's/(\w+(?:<[\w, ]+>)?)<<<(.+?)>>>\(/emu_launch(emu_cfg(\2), \1, /g' $< > $(@:.o=.cc)
	$(CXX) -std=c++17 -O2 -U_FORTIFY_SOURCE -Wall -Wno-unused-function -Wno-unknown-pragmas -Itests/gpu/emu -Isrc $(filter -I%,$(CFLAGS)) -MMD -MP -c $(@:.o=.cc) -o $@
# every tests/gpu/test_gpu_NAME.c builds against the emulator as $(EMU_DIR)/test_gpu_NAME (compiled with
# SEQ_GPU_EMULATE into obj/tests/gpuemu/); the parity test (test_gpu_parity.c) keeps its name test_gpu_emulated
$(OBJDIR)/tests/gpuemu/%.o: tests/gpu/%.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -DSEQ_GPU_EMULATE -c $< -o $@
$(EMU_DIR)/test_gpu_%: $(OBJDIR)/tests/gpuemu/test_gpu_%.o $(EMU_LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(filter-out -lcublas -lcudart,$(LDLIBS))
# the parity test, and a seqtrain and seqeval whose run.device cuda runs on the emulator (tests/gpu/run.sh trains
# and evaluates with them)
$(EMU_DIR)/test_gpu_emulated: $(OBJDIR)/tests/gpuemu/test_gpu_parity.o $(EMU_LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(filter-out -lcublas -lcudart,$(LDLIBS))
$(EMU_DIR)/seq%: $(OBJDIR)/cli/seq%.o $(EMU_LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(filter-out -lcublas -lcudart,$(LDLIBS))

# the GPU backend's parity test (tests/gpu/run.sh): builds the CUDA=1 tools and test, then compares the GPU with the
# CPU on small models; says "skipped" and succeeds where nvcc or a GPU is missing
test-cuda: $(DEPS_STAMP)
	@bash tests/gpu/run.sh

# prepare WikiText-2 shards, then train the quickstart config (6.5-8.5 minutes on 2 cores) and print its
# perplexity-by-context table; a second `make run` continues (or just re-evaluates) runs/quickstart
run: tools
	@bash scripts/prepare_wikitext2.sh
	@if [ -f runs/quickstart/latest ]; then $(BIN)/seqtrain --resume runs/quickstart; \
	 else $(BIN)/seqtrain --config configs/quickstart.json; fi

data: tools
	@bash scripts/prepare_wikitext2.sh

clean:
	rm -rf bin build

# libFuzzer harnesses (fuzz/fuzz_<target>.c, docs/fuzzing.md). clang builds them with ASan + UBSan, and the
# library sources they call into build/fuzz/obj/ (gcc's sanitizer objects do not mix with libFuzzer's), as
# one archive so that each harness links only what it uses; nn/ once, generic, without OpenMP.
# `make fuzz SECONDS=N` runs each harness N seconds on its seed corpus fuzz/corpus/<target>/ (new inputs go
# to build/fuzz/corpus/<target>/, crashes to build/fuzz/crash-<target>-*). clang is installed when missing.
FUZZ_CC      ?= clang
SECONDS      ?= 60
FUZZ_FLAGS   := $(CSTD) -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
                -Wno-unknown-pragmas -Isrc -MMD -MP
FUZZ_LIB_C   := $(filter-out src/cli/seq%.c,$(wildcard src/*/*.c))
FUZZ_OBJ     := $(FUZZ_LIB_C:src/%.c=build/fuzz/obj/%.o)
FUZZ_BIN     := $(patsubst fuzz/fuzz_%.c,build/fuzz/fuzz_%,$(wildcard fuzz/fuzz_*.c))
# nn/ (but its dispatch.c) as the generic kernel set, the only one dispatch.c knows without SEQ_X86_SETS
$(filter-out build/fuzz/obj/nn/dispatch.o,$(filter build/fuzz/obj/nn/%,$(FUZZ_OBJ))): FUZZ_ISA := -DSEQ_ISA=0 -include src/nn/isa.h

build/fuzz/.clang:
	@command -v $(FUZZ_CC) >/dev/null 2>&1 || bash scripts/install_deps.sh clang libclang-rt-dev
	@mkdir -p $(dir $@) && touch $@
build/fuzz/obj/%.o: src/%.c | build/fuzz/.clang $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(FUZZ_ISA) -fsanitize=fuzzer-no-link -c $< -o $@
build/fuzz/libseq.a: $(FUZZ_OBJ)
	@rm -f $@ && ar rcs $@ $^
build/fuzz/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz_common.h build/fuzz/libseq.a
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer $< build/fuzz/libseq.a -o $@ -lcjson -lzstd -lm
fuzz-build: $(FUZZ_BIN)
fuzz: fuzz-build
	@bash fuzz/run.sh $(SECONDS)

-include $(shell find build -name '*.d' 2>/dev/null)
