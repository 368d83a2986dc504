# cross.mk — the target architecture (included by the Makefile before anything uses CXX or BUILD).
#
#   make ARCH=arm64          on x86_64: an aarch64 sparkd in build/arm64 (CUDA when nvcc exists;
#                            CUDA=0 for CPU only, in build/arm64-cpu), with Debian's cross compiler
#                            and arm64 multiarch libraries (make deps-arm64 installs them)
#   make                     native build on either architecture (a Spark builds itself like this)
#
# For CUDA, nvcc compiles the device code as usual and hands the host code to the aarch64
# compiler; the aarch64 CUDA runtime (libcudart_static.a) comes from PyPI's nvidia-cuda-runtime
# wheel for that platform when the toolkit here has no sbsa-linux target.
CUDA_ARM64_DIR := build/cuda-arm64
HOST_ARCH := $(shell dpkg --print-architecture 2>/dev/null || uname -m | sed 's/x86_64/amd64/;s/aarch64/arm64/')
# Where an aarch64 build goes: build/arm64 (build/arm64-cpu for CUDA=0) when cross-built.
ARM64_BUILD := $(if $(filter arm64,$(HOST_ARCH)),$(BUILD),build/arm64$(if $(filter 0,$(CUDA)),-cpu))
ARCH      ?= $(HOST_ARCH)
ifneq ($(filter-out amd64 arm64,$(ARCH)),)
  $(error ARCH=$(ARCH): sparkd builds for amd64 and arm64)
endif

ifneq ($(ARCH),$(HOST_ARCH))
  ifneq ($(ARCH),arm64)
    $(error cross builds go from amd64 to arm64 only; build natively on the target instead)
  endif
  CROSS_TRIPLE := aarch64-linux-gnu
  CXX := $(CROSS_TRIPLE)-g++
  ifeq ($(origin BUILD),file)
    BUILD := $(ARM64_BUILD)
  endif
  # The arm64 multiarch libraries (libpcre2-dev:arm64, ...), before the host's.
  LDFLAGS += -L/usr/lib/$(CROSS_TRIPLE)
  ifeq ($(wildcard $(CUDA_HOME)/targets/sbsa-linux/lib/libcudart_static.a),)
    CUDA_LIBDIR := $(CUDA_ARM64_DIR)/nvidia/cu13/lib
  else
    CUDA_LIBDIR := $(CUDA_HOME)/targets/sbsa-linux/lib
  endif
  # nvcc looks for the runtime headers under targets/sbsa-linux; the x86_64 toolkit's are the same.
  override NVCC += -ccbin $(CROSS_TRIPLE)-g++ -isystem $(CUDA_HOME)/include
endif
# Runs aarch64 test binaries on an x86_64 machine (make test-arm64) with the arm64 multiarch
# glibc (libc6:arm64, whose loader is /lib/ld-linux-aarch64.so.1). Not `-L /usr/aarch64-linux-gnu`:
# that sysroot's loader would map the multiarch libc.so.6 (the host's ld.so.cache lists it), a
# different build of glibc 2.36, and the pair hangs in the first pthread_create.
ifeq ($(HOST_ARCH),amd64)
  QEMU_ARM64 := qemu-aarch64
endif
