# strata: one Makefile.  `make help` lists the targets.
#
#   make               build build/strata-cli and build/libstrata.a
#   make test          build and run every libcheck suite (GPU ones skip without a GPU)
#   make layers        check that every #include between folders points down
#   make asan          the tests under AddressSanitizer + UBSan (CPU build, small sets)
#   make tsan          a threaded suite under ThreadSanitizer (TSAN_SUITE=stagepool|convcache)
#   make fuzz          the fuzz targets (GGUF reader, JSON, HTTP, chat templates), FUZZ_SECONDS each (default 60)
#   make blocks-check  the card's block-type decoders on the host vs the CPU's (CUDA builds)
#   make model         fetch the demo model into ~/.cache/strata and verify it
#   make gemma3-model  fetch Gemma 3 270M (Q4_K_M, 253 MB) there too (suites gemma3, cuda_engine)
#   make chat          build, fetch the demo model, start strata-cli chat
#   make bench         the standard benchmarks
#   make clean
#
# Variables: CUDA=0|1 (default: 1 when nvcc is found), CUDA_ARCH=sm_90,
# CHECK_PREFIX=dir (a libcheck unpacked with dpkg -x, for machines without it).

BUILD      ?= build
CC         ?= gcc
NVCC       ?= nvcc
CUDA_ARCH  ?= sm_90
OPT        ?= -O2

ifeq ($(origin CUDA),undefined)
  ifneq ($(shell command -v $(NVCC) 2>/dev/null),)
    CUDA := 1
  else
    CUDA := 0
    $(info strata: nvcc not found, building CPU-only (CUDA=1 to insist))
  endif
endif

CFLAGS   := -std=c11 $(OPT) -g -Wall -Wextra -Werror -D_GNU_SOURCE -I. -MMD -MP -pthread
LDLIBS   := -lm -lpthread
NVFLAGS  := -std=c++17 $(OPT) -g -lineinfo -arch=$(CUDA_ARCH) -I. -MMD -MP \
            -Xcompiler -Wall,-Wextra,-Werror -Werror all-warnings

# DEBUG=1: the checks that cost time at run time (STRATA_DEBUG: the
# conversation cache's checksums, park/park.c)
ifeq ($(DEBUG),1)
  CFLAGS += -DSTRATA_DEBUG
endif

ifeq ($(SAN),1)
  CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
  LDLIBS += -fsanitize=address,undefined
endif
ifeq ($(SAN),thread)
  CFLAGS += -fsanitize=thread -fno-omit-frame-pointer
  LDLIBS += -fsanitize=thread
endif

# The floors, lowest first: each includes only the folders listed before it.
LIB_DIRS := base model model/make text kernels/cpu cache stagepool engine engine/cuda park sched serve
LIB_SRC  := $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c))
CU_SRC  :=
ifeq ($(CUDA),1)
  CUDA_HOME ?= $(patsubst %/bin/,%,$(dir $(shell command -v $(NVCC))))
  CU_SRC  := $(wildcard kernels/cuda/*.cu)
  CFLAGS  += -DSTRATA_CUDA=1 -I$(CUDA_HOME)/include
  LDLIBS  += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
endif
CLI_SRC  := $(wildcard cli/*.c cli/bench/*.c)
TEST_SRC := $(wildcard test/test_*.c)

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(CU_SRC:%.cu=$(BUILD)/obj/%.cu.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/obj/%.o)

# libcheck: pkg-config where it is installed, else an unpacked prefix.
ifneq ($(CHECK_PREFIX),)
  CHECK_CFLAGS := -I$(CHECK_PREFIX)/usr/include
  CHECK_LIBS   := -L$(CHECK_PREFIX)/usr/lib/x86_64-linux-gnu -l:libcheck.a -l:libsubunit.a -lrt -lm -pthread
else
  CHECK_CFLAGS := $(shell pkg-config --cflags check 2>/dev/null)
  CHECK_LIBS   := $(shell pkg-config --libs check 2>/dev/null || echo -lcheck -lsubunit -lrt -lm -pthread)
endif

.PHONY: all test layers asan tsan fuzz model gemma3-model chat bench clean help need-libcheck blocks-check
all: $(BUILD)/strata-cli $(BUILD)/libstrata.a

# A change of flags (CUDA=0/1, SAN=1, ...) rebuilds everything.
FLAGS_STAMP := $(BUILD)/.flags-$(shell echo '$(CC) $(CFLAGS) $(NVFLAGS) $(CUDA)' | cksum | cut -d' ' -f1)
$(FLAGS_STAMP):
	@mkdir -p $(@D)
	@rm -f $(BUILD)/.flags-*
	@touch $@

$(BUILD)/libstrata.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	$(AR) rcs $@ $^

$(BUILD)/strata-cli: $(CLI_OBJ) $(BUILD)/libstrata.a
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libstrata.a $(LDLIBS)

$(BUILD)/obj/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

# Without libcheck the first test file would die in a raw "check.h: No such
# file" from the compiler: say what to install instead.
need-libcheck:
	@printf '#include <check.h>\n' | $(CC) $(CHECK_CFLAGS) -E -x c - >/dev/null 2>&1 || \
	    { echo "strata: the tests need libcheck: install libcheck (apt-get update && apt-get" \
	           "install check), or unpack it and pass CHECK_PREFIX=dir" >&2; exit 1; }

$(BUILD)/obj/test/%.o: test/%.c $(FLAGS_STAMP) | need-libcheck
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(CHECK_CFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(BUILD)/strata-tests: $(TEST_OBJ) $(BUILD)/libstrata.a
	$(CC) $(CFLAGS) -o $@ $(TEST_OBJ) $(BUILD)/libstrata.a $(CHECK_LIBS) $(LDLIBS)

# The suites run in one runner so the output ends with Check's summary line.
# STRATA_CLI lets the end-to-end suites drive the real binary.  The runner
# gets a private TMPDIR so that its check for leftovers (test/test_tmp.c)
# sees only its own files, not a parallel run's; that directory must be
# empty at the end (rmdir), else the run fails and names what was left.
test: layers $(BUILD)/strata-tests $(BUILD)/strata-cli
	@base=$$(mktemp -d "$${TMPDIR:-/tmp}/strata-make-test.XXXXXX") || exit 1; \
	echo "TMPDIR=$$base STRATA_CLI=$(abspath $(BUILD)/strata-cli) STRATA_ROOT=$(CURDIR) $(BUILD)/strata-tests"; \
	TMPDIR=$$base STRATA_CLI=$(abspath $(BUILD)/strata-cli) STRATA_ROOT=$(CURDIR) $(BUILD)/strata-tests; \
	rc=$$?; \
	if ! rmdir "$$base"; then \
	    echo "make test: left behind in $$base:"; ls -A "$$base"; rm -rf "$$base"; rc=1; \
	fi; \
	exit $$rc

# Every #include between folders points down (doc/README.md, the floors).
layers:
	@scripts/check-layers.sh

# STRATA_TEST_SMALL: the suites' small sets (doc/README.md, "Tests"), so the
# run fits CI on two cores.
asan:
	STRATA_TEST_SMALL=1 $(MAKE) BUILD=build/asan CUDA=0 SAN=1 DEBUG=1 OPT=-O1 test

# The block-tile decoders (kernels/cuda/wblocks.cuh) on the host against the
# CPU's, bit for bit, and the decode kernel's shared-memory layout (CUDA
# builds; no card needed).
blocks-check: $(BUILD)/libstrata.a
	$(NVCC) $(NVFLAGS) -o $(BUILD)/wblocks-check test/host/wblocks_check.cu $(BUILD)/libstrata.a -lpthread
	$(BUILD)/wblocks-check
	$(NVCC) $(NVFLAGS) -o $(BUILD)/mvlayout-check test/host/mvlayout_check.cu $(BUILD)/libstrata.a -lpthread
	$(BUILD)/mvlayout-check

# CK_FORK=no: ThreadSanitizer does not follow Check's fork per test.
tsan:
	CK_FORK=no CK_RUN_SUITE=$(or $(TSAN_SUITE),stagepool) $(MAKE) BUILD=build/tsan CUDA=0 SAN=thread OPT=-O1 test

FUZZ_SECONDS ?= 60
FUZZ_FLAGS := -std=c11 -g -O1 -D_GNU_SOURCE -I. -fsanitize=fuzzer,address,undefined
FUZZ_SRC := model/gguf.c model/gguf_maps.c base/error.c model/iq3xxs_tables.c model/iq_grids.c $(wildcard model/quant.c model/quant_*.c model/quantize_*.c)
$(BUILD)/fuzz_gguf: test/fuzz/fuzz_gguf.c $(FUZZ_SRC)
	@mkdir -p $(@D)
	clang $(FUZZ_FLAGS) -o $@ $^
$(BUILD)/fuzz_json: test/fuzz/fuzz_json.c serve/json.c text/unicode.c text/unicode_tables.c base/error.c
	@mkdir -p $(@D)
	clang $(FUZZ_FLAGS) -o $@ $^ -lm
$(BUILD)/fuzz_http: test/fuzz/fuzz_http.c serve/http_parse.c base/error.c
	@mkdir -p $(@D)
	clang $(FUZZ_FLAGS) -o $@ $^
$(BUILD)/fuzz_jinja: test/fuzz/fuzz_jinja.c $(wildcard text/jinja_*.c) base/error.c
	@mkdir -p $(@D)
	clang $(FUZZ_FLAGS) -o $@ $^ -lm
# Each target runs for FUZZ_SECONDS (CI: 30 s each), from its own corpus.
fuzz: $(BUILD)/fuzz_gguf $(BUILD)/fuzz_json $(BUILD)/fuzz_http $(BUILD)/fuzz_jinja
	@mkdir -p $(BUILD)/fuzz-corpus $(BUILD)/fuzz-corpus-json $(BUILD)/fuzz-corpus-http \
	    $(BUILD)/fuzz-corpus-jinja
	$(BUILD)/fuzz_gguf -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
	    $(BUILD)/fuzz-corpus test/fuzz/corpus
	$(BUILD)/fuzz_json -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
	    $(BUILD)/fuzz-corpus-json test/fuzz/corpus_json
	$(BUILD)/fuzz_http -max_total_time=$(FUZZ_SECONDS) -max_len=8192 \
	    $(BUILD)/fuzz-corpus-http test/fuzz/corpus_http
	$(BUILD)/fuzz_jinja -max_total_time=$(FUZZ_SECONDS) -max_len=8192 \
	    -dict=test/fuzz/jinja.dict $(BUILD)/fuzz-corpus-jinja test/data/templates

model:
	@scripts/fetch-model.sh

gemma3-model:
	@scripts/fetch-gemma3.sh

# The build uses every core (a plain `make chat` would build one file at a
# time); the demo model's own defaults (--kv f16) are strata-cli chat's.
NPROC := $(shell nproc 2>/dev/null || echo 2)
chat:
	@$(MAKE) --no-print-directory -j$(NPROC) all
	@$(MAKE) --no-print-directory model
	$(BUILD)/strata-cli chat

bench: all
	@scripts/bench.sh

clean:
	rm -rf build

help:
	@sed -n '1,/^$$/p' Makefile | sed 's/^# \{0,1\}//'

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_OBJ:.o=.d)
