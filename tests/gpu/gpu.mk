# gpu.mk — builds the GPU check programs (tests/gpu/check_*.cu) against the engine's
# objects, then runs them all and prints one table. Called by `make gpu-check` (build and
# run) and `make gpu-build` (build only: for a GPU machine that lacks our build
# dependencies, carry $(BUILD)/gpu there and run tests/gpu/run_checks.sh $(BUILD)/gpu).
BUILD      ?= build
CUDA_HOME  ?= /usr/local/cuda
NVCC       ?= $(or $(shell command -v nvcc 2>/dev/null),$(CUDA_HOME)/bin/nvcc)
CUDA_ARCHS ?= 90 121
GPU_DIR    := $(BUILD)/gpu
CHECK_SRCS := $(sort $(wildcard tests/gpu/check_*.cu))
CHECK_BINS := $(CHECK_SRCS:tests/gpu/%.cu=$(GPU_DIR)/%)
# Every engine object (web/ and main.o stay out): the archive lets each check pull only what it uses.
ENGINE_OBJS := $(shell find $(BUILD)/obj/engine -name '*.o' 2>/dev/null | sort)
GPU_NVCCFLAGS := -O3 -g -lineinfo -std=c++20 -I. -DSPARKD_CUDA=1 --expt-relaxed-constexpr -Xcompiler -Wall \
  $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a))
GPU_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,--as-needed -lcudart_static -lcublasLt \
  -Wl,-Bstatic -lpcre2-8 -lutf8proc -Wl,-Bdynamic -ldl -lrt -pthread

.PHONY: run build
run: build
	@sh tests/gpu/run_checks.sh $(GPU_DIR)
build: $(CHECK_BINS)

$(GPU_DIR)/libsparkd_engine.a: $(ENGINE_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(GPU_DIR)/%.o: tests/gpu/%.cu tests/gpu/gpu_check.h
	@mkdir -p $(@D)
	$(NVCC) $(GPU_NVCCFLAGS) -c -o $@ $<

# Host debug info is dropped at link (-Wl,-S) so the binaries stay small enough to copy to a
# GPU machine; the device code keeps its line info (-lineinfo) for compute-sanitizer.
$(GPU_DIR)/%: $(GPU_DIR)/%.o $(GPU_DIR)/libsparkd_engine.a
	g++ -static-libstdc++ -static-libgcc -Wl,-S -o $@ $< $(GPU_DIR)/libsparkd_engine.a $(GPU_LDLIBS)
