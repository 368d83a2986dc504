# emu.mk — builds and runs the GPU check programs (tests/gpu/check_*.cu) on the CPU under
# the CUDA emulator (tests/gpu/emu/README.md): the engine's CUDA sources are translated
# (translate.py) and compiled with g++, twice: plain (-O2) and with AddressSanitizer and
# UBSan (-O1), so kernels' out-of-bounds accesses abort with a report.
# Called by `make gpu-emu` (both variants) and `make test` (the plain one); usable alone:
# make -f tests/gpu/emu/emu.mk BUILD=build -j2 run
BUILD   ?= build
EMU     := $(BUILD)/emu
CXX     := g++
PY      ?= python3
EMU_DIR := tests/gpu/emu

# The NCCL link compiles against include/nccl.h; it loads libnccl.so.2 only when used.
ENGINE_CPP := $(shell find engine -name '*.cpp' | sort)
CU_SRCS    := $(shell find engine -name '*.cu' | sort)
CHECK_SRCS := $(sort $(wildcard tests/gpu/check_*.cu))
EMU_SRCS   := $(wildcard $(EMU_DIR)/src/*.cpp)
EMU_HDRS   := $(wildcard $(EMU_DIR)/include/*.h $(EMU_DIR)/include/emu/*.h)

# CUDA code type-puns freely (bf16 pairs as uint32_t): g++ must not assume otherwise.
COMMON := -std=c++20 -g1 -fno-strict-aliasing -Wno-subobject-linkage -I. -I$(EMU_DIR)/include -include emu/prelude.h -DSPARKD_CUDA=1 -DSPARK_CUDA_EMU=1 \
          -pthread -Wall -Wno-unused-function -Wno-unused-variable -Wno-unknown-pragmas -MMD -MP
# Kernel code: uninitialised locals get a pattern, not whatever the stack held.
KERNEL_FLAGS := -ftrivial-auto-var-init=pattern
FAST_FLAGS := -O2 $(COMMON)
ASAN_FLAGS := -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined $(COMMON)
LDLIBS := -Wl,-Bstatic -lpcre2-8 -lutf8proc -Wl,-Bdynamic -ldl -lrt -pthread

# The engine's host code is the same real or emulated, except the files that see CUDA or
# NCCL headers or test the CUDA macros (cuda_host_sources.py): those are compiled here,
# the rest are the top-level build's objects (built through the top-level Makefile, so
# its flags and dependency files decide when they are stale).
EMU_HOST_CPP := $(shell $(PY) $(EMU_DIR)/cuda_host_sources.py .)
MAIN_OBJS    := $(patsubst %.cpp,$(BUILD)/obj/%.o,$(filter-out $(EMU_HOST_CPP),$(ENGINE_CPP)))
ENGINE_OBJS  := $(EMU_HOST_CPP:%.cpp=$(EMU)/engine-obj/%.o) $(MAIN_OBJS)
CHECK_NAMES := $(CHECK_SRCS:tests/gpu/%.cu=%)
FAST_BINS := $(CHECK_NAMES:%=$(EMU)/fast/%)
ASAN_BINS := $(CHECK_NAMES:%=$(EMU)/asan/%)
DEV_SRCS := $(CU_SRCS) $(CHECK_SRCS)
DEV_CC := $(DEV_SRCS:%.cu=$(EMU)/src/%.cc)

.PHONY: build build-fast build-asan run run-fast run-asan
build: build-fast build-asan
build-fast: $(FAST_BINS)
build-asan: $(ASAN_BINS)
ASAN_ENV := ASAN_OPTIONS=detect_leaks=0:detect_stack_use_after_return=0 UBSAN_OPTIONS=print_stacktrace=1
# Both variants run (one after the other) even when the first fails.
run: build
	@echo "== emulated checks, plain build"; sh tests/gpu/run_checks.sh $(EMU)/fast; a=$$?; \
	  echo "== emulated checks, ASan + UBSan build"; $(ASAN_ENV) sh tests/gpu/run_checks.sh $(EMU)/asan; b=$$?; \
	  test $$a -eq 0 -a $$b -eq 0
# JUNIT=FILE also writes the rows as JUnit XML (make test); CHECK_JOBS programs at once.
run-fast: build-fast
	@sh tests/gpu/run_checks.sh $(EMU)/fast $(JUNIT)
run-asan: build-asan
	@$(ASAN_ENV) sh tests/gpu/run_checks.sh $(EMU)/asan

# Keep the translated sources and objects (intermediates of the pattern chain) for reruns and debugging.
.SECONDARY:

$(MAIN_OBJS): $(BUILD)/obj/%.o: %.cpp
	@$(MAKE) --no-print-directory -f Makefile BUILD=$(BUILD) $@
-include $(MAIN_OBJS:.o=.d)
# The engine's host code that sees CUDA, once, without sanitizers.
$(EMU)/engine-obj/%.o: %.cpp
	@mkdir -p $(@D)
	$(CXX) $(FAST_FLAGS) -c -o $@ $<
# version.cpp wants the generated header the top-level Makefile writes.
$(EMU)/gen/build_info.h:
	@mkdir -p $(@D)
	printf '#define SPARKD_VERSION "emu"\n#define SPARKD_GIT_REV "emu"\n' > $@
$(EMU)/engine-obj/engine/util/version.o: $(EMU)/gen/build_info.h
$(EMU)/engine-obj/engine/util/version.o: FAST_FLAGS += -I$(EMU)/gen
$(EMU)/libengine.a: $(ENGINE_OBJS)
	rm -f $@ && ar rcs $@ $^

$(EMU)/src/%.cc: %.cu $(EMU_DIR)/translate.py
	@mkdir -p $(@D)
	$(PY) $(EMU_DIR)/translate.py $< $@

$(EMU)/fast/obj/%.o: $(EMU)/src/%.cc
	@mkdir -p $(@D)
	$(CXX) $(FAST_FLAGS) $(KERNEL_FLAGS) -c -o $@ $<
$(EMU)/asan/obj/%.o: $(EMU)/src/%.cc
	@mkdir -p $(@D)
	$(CXX) $(ASAN_FLAGS) $(KERNEL_FLAGS) -c -o $@ $<
$(EMU)/fast/obj/emu/%.o: $(EMU_DIR)/src/%.cpp
	@mkdir -p $(@D)
	$(CXX) $(FAST_FLAGS) -c -o $@ $<
$(EMU)/asan/obj/emu/%.o: $(EMU_DIR)/src/%.cpp
	@mkdir -p $(@D)
	$(CXX) $(ASAN_FLAGS) -c -o $@ $<

# Every check in one executable, as on a GPU (tests/gpu/gpu.mk): check_<name> links to gpu_checks.
.PHONY: FORCE
$(EMU)/check_list.h: FORCE
	@mkdir -p $(@D)
	@printf 'CHECK(%s)\n' $(CHECK_NAMES) > $@.tmp; if cmp -s $@.tmp $@; then rm $@.tmp; else mv $@.tmp $@; fi
define variant
$(EMU)/$(1)/libcuda_emu.a: $(CU_SRCS:%.cu=$(EMU)/$(1)/obj/%.o) $(EMU_SRCS:$(EMU_DIR)/src/%.cpp=$(EMU)/$(1)/obj/emu/%.o)
	rm -f $$@ && ar rcs $$@ $$^
$(EMU)/$(1)/obj/tests/gpu/%.entry.o: $(EMU)/$(1)/obj/tests/gpu/%.o
	objcopy --redefine-sym main=gpu_$$* $$< $$@
$(EMU)/$(1)/obj/gpu_checks.o: tests/gpu/gpu_checks.cpp $(EMU)/check_list.h
	$(CXX) -O2 -std=c++20 -Wall $(2) -I$(EMU) -c -o $$@ $$<
$(EMU)/$(1)/gpu_checks: $(EMU)/$(1)/obj/gpu_checks.o $(CHECK_NAMES:%=$(EMU)/$(1)/obj/tests/gpu/%.entry.o) $(EMU)/$(1)/libcuda_emu.a $(EMU)/libengine.a
	$(CXX) $(2) -o $$@ $$(filter %.o,$$^) $(EMU)/$(1)/libcuda_emu.a $(EMU)/libengine.a $(EMU)/$(1)/libcuda_emu.a $(LDLIBS)
$(CHECK_NAMES:%=$(EMU)/$(1)/%): $(EMU)/$(1)/gpu_checks
	ln -sf gpu_checks $$@
endef
$(eval $(call variant,fast,))
ASAN_LD := -fsanitize=address,undefined
$(eval $(call variant,asan,$(ASAN_LD)))

-include $(shell find $(EMU) -name '*.d' 2>/dev/null)
