# server.mk — the emulated sparkd: the real server whose CUDA backend runs on the CUDA
# emulator (README.md beside this file), and the NCCL stand-in library its tests load.
# The engine objects and the fast emulator library are the ones emu.mk builds for the GPU
# checks; main, web and the dashboard assets are host code the top-level build already
# compiled into $(BUILD)/obj (`make emu-sparkd` builds those first). Nothing else compiles.
#   make -f tests/gpu/emu/server.mk BUILD=build -j2 server
include tests/gpu/emu/emu.mk

SERVER_OBJS := $(BUILD)/obj/main.o $(patsubst %.cpp,$(BUILD)/obj/%.o,$(shell find web -name '*.cpp' | sort)) \
               $(BUILD)/obj/assets.o
NCCL_STANDIN := $(EMU)/nccl/libnccl.so.2

.PHONY: server
server: $(EMU)/sparkd $(NCCL_STANDIN)

$(EMU)/sparkd: $(SERVER_OBJS) $(EMU)/fast/libcuda_emu.a $(EMU)/libengine.a
	$(CXX) -pthread -o $@ $(SERVER_OBJS) $(EMU)/fast/libcuda_emu.a $(EMU)/libengine.a $(EMU)/fast/libcuda_emu.a \
	  $(LDLIBS) -lcpp-httplib

# A test library only: found through LD_LIBRARY_PATH, as the real libnccl.so.2 would be.
$(NCCL_STANDIN): $(EMU_DIR)/nccl/nccl_standin.cpp $(EMU_DIR)/include/nccl.h
	@mkdir -p $(@D)
	$(CXX) -std=c++20 -O2 -g1 -Wall -Wextra -fPIC -shared -pthread -I$(EMU_DIR)/include -include emu/prelude.h \
	  -Wl,-soname,libnccl.so.2 -o $@ $<
