# gpu.mk — builds the GPU check programs (tests/gpu/check_*.cu) against the engine's
# objects, as one executable that is also sparkd (tests/gpu/gpu_checks.cpp), then runs them
# all and prints one table. Called by `make gpu-check` (build and run), `make gpu-build`
# (build only) and `make gpu-bundle` (build, then pack it for a GPU machine that lacks our
# build dependencies: tests/gpu/make_bundle.sh, run there by tests/gpu/device_run.py).
BUILD      ?= build
CUDA_HOME  ?= /usr/local/cuda
NVCC       ?= $(or $(shell command -v nvcc 2>/dev/null),$(CUDA_HOME)/bin/nvcc)
CUDA_ARCHS ?= 90 121
GPU_DIR    := $(BUILD)/gpu
CHECK_SRCS := $(sort $(wildcard tests/gpu/check_*.cu))
CHECK_BINS := $(CHECK_SRCS:tests/gpu/%.cu=$(GPU_DIR)/%)
# Every engine object, in an archive; the server's objects are linked in whole (gpu_checks below).
# (From the sources, not the folder: an object whose source is gone must not come along.)
ENGINE_OBJS := $(patsubst %.cpp,$(BUILD)/obj/%.o,$(shell find engine -name '*.cpp' | sort)) \
               $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(shell find engine -name '*.cu' | sort))
GPU_NVCCFLAGS := -O3 -Xcompiler -g1 -lineinfo -compress-mode=size -std=c++20 -I. -DSPARKD_CUDA=1 --expt-relaxed-constexpr -Xcompiler -Wall \
  $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a))
GPU_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,--as-needed -lcudart_static -lcublasLt \
  -Wl,-Bstatic -lpcre2-8 -lutf8proc -Wl,-Bdynamic -ldl -lrt -pthread

CHECK_NAMES := $(CHECK_SRCS:tests/gpu/%.cu=%)

.PHONY: run build FORCE
# Keep each check's object (an intermediate of its renamed copy) for the next build.
.SECONDARY:
run: build
	@sh tests/gpu/run_checks.sh $(GPU_DIR)
build: $(CHECK_BINS)

$(GPU_DIR)/libsparkd_engine.a: $(ENGINE_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(GPU_DIR)/%.o: tests/gpu/%.cu tests/gpu/gpu_check.h
	@mkdir -p $(@D)
	$(NVCC) $(GPU_NVCCFLAGS) -c -o $@ $<

# One executable holds every check (tests/gpu/gpu_checks.cpp): each check's main() becomes
# gpu_check_<name>, and check_<name> is a link to it. Rewritten only when the list changes.
$(GPU_DIR)/check_list.h: FORCE
	@mkdir -p $(@D)
	@printf 'CHECK(%s)\n' $(CHECK_NAMES) > $@.tmp; if cmp -s $@.tmp $@; then rm $@.tmp; else mv $@.tmp $@; fi
$(GPU_DIR)/%.entry.o: $(GPU_DIR)/%.o
	objcopy --redefine-sym main=gpu_$* $< $@
$(GPU_DIR)/gpu_checks.o: tests/gpu/gpu_checks.cpp $(GPU_DIR)/check_list.h
	g++ -O2 -std=c++20 -Wall -DWITH_SPARKD=1 -I$(GPU_DIR) -c -o $@ $<
# The same executable is sparkd under that name: main.cpp's main() as sparkd_main, and the
# server's objects (the top-level build's) beside the engine.
$(GPU_DIR)/sparkd_main.o: $(BUILD)/obj/main.o
	objcopy --redefine-sym main=sparkd_main $< $@
SERVER_OBJS := $(patsubst %.cpp,$(BUILD)/obj/%.o,$(shell find web -name '*.cpp' | sort)) $(BUILD)/obj/assets.o \
               $(BUILD)/obj/third_party/httplib.o

# Host debug info is dropped at link (-Wl,-S) so the binary stays small enough to copy to a
# GPU machine; the device code keeps its line info (-lineinfo) for compute-sanitizer.
$(GPU_DIR)/gpu_checks: $(GPU_DIR)/gpu_checks.o $(CHECK_NAMES:%=$(GPU_DIR)/%.entry.o) $(GPU_DIR)/sparkd_main.o \
                       $(SERVER_OBJS) $(GPU_DIR)/libsparkd_engine.a
	g++ -static-libstdc++ -static-libgcc -Wl,-S -o $@ $(filter %.o,$^) $(GPU_DIR)/libsparkd_engine.a \
	  -Wl,-Bstatic -lssl -lcrypto -Wl,-Bdynamic $(GPU_LDLIBS)
$(CHECK_BINS): $(GPU_DIR)/gpu_checks
	ln -sf gpu_checks $@
