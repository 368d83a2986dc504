// recurrent_check.h — what the checks of the recurrent token mixers (check_delta_net.cu,
// check_mamba2.cu) share: sequences in state slots of a pool, the batch they make, the
// CPU side's states, the call (plain or as a captured graph of programmatic launches), and
// the rows that compare its output and states with the CPU's; the decode batches of the
// byte checks and benchmarks and their rows.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/gpu/gpu_check.h"

namespace spark::gpu_check::recurrent {

inline void sync() { CUDA_CHECK(cudaDeviceSynchronize()); }

// A row-major f32 matrix as the CPU backend's weight Tensor.
inline Tensor f32_tensor(const std::vector<float>& data, int64_t rows, int64_t cols) {
  Tensor t;
  t.name = "w";
  t.dtype = DType::F32;
  t.shape = {rows, cols};
  t.data = data.data();
  t.nbytes = data.size() * sizeof(float);
  return t;
}

struct Seq {
  int32_t slot;      // -1: padding
  int32_t position;  // of its first row
  int32_t rows;
};

// The slot pool: two recurrent layers a slot, this one second at an offset that is not a
// multiple of 4 floats, so nothing may assume aligned states.
struct Pool {
  int64_t state_values, layer_offset, slot_stride;
  int32_t num_slots = 8;
  std::vector<float> host;  // the CPU side's states (and the expected device contents)
  DeviceArray<float> device;
  explicit Pool(int64_t sv, uint64_t seed)
      : state_values(sv),
        layer_offset(sv + 5),
        slot_stride(2 * sv + 7),
        host(random_floats(size_t(8 * (2 * sv + 7)), seed, -1.0f, 1.0f)),
        device(host) {}
  float* state(int32_t slot) { return host.data() + slot * slot_stride + layer_offset; }
};

inline std::string seq_list(const std::vector<Seq>& seqs) {
  std::string s;
  for (const Seq& q : seqs) {
    if (!s.empty()) s += ",";
    s += q.slot < 0 ? std::string("pad") : std::to_string(q.rows) + "@" + std::to_string(q.position);
  }
  return s;
}

// The batch of a call: the sequences' rows, then `extra_rows` rows past them (position 0).
struct Rows {
  std::vector<int32_t> query_start = {0}, positions, slots;
  int32_t seq_rows = 0, tokens = 0, num_seqs = 0;
};
inline Rows batch_rows(const std::vector<Seq>& seqs, int32_t extra_rows) {
  Rows r;
  for (const Seq& s : seqs) {
    r.query_start.push_back(r.query_start.back() + s.rows);
    for (int32_t i = 0; i < s.rows; ++i) r.positions.push_back(s.position + i);
    r.slots.push_back(s.slot);
  }
  r.seq_rows = r.query_start.back();
  r.tokens = r.seq_rows + extra_rows;
  r.num_seqs = int32_t(seqs.size());
  for (int32_t i = 0; i < extra_rows; ++i) r.positions.push_back(0);
  return r;
}

// The CPU side's state of each sequence: fresh sequences start from zeros; a padding
// sequence gets a throwaway state. written: the slots the call must write.
struct CpuStates {
  std::vector<float> throwaway;
  std::vector<float*> of_seq;
  std::vector<bool> written;
};
inline CpuStates cpu_states(Pool& pool, const std::vector<Seq>& seqs) {
  const int64_t sv = pool.state_values;
  CpuStates st{std::vector<float>(size_t(sv), 0.0f), {}, std::vector<bool>(size_t(pool.num_slots), false)};
  for (const Seq& s : seqs) {
    if (s.slot < 0) {
      st.of_seq.push_back(st.throwaway.data());
      continue;
    }
    if (s.rows > 0 && s.position == 0) std::fill_n(pool.state(s.slot), sv, 0.0f);
    if (s.rows > 0) st.written[size_t(s.slot)] = true;
    st.of_seq.push_back(pool.state(s.slot));
  }
  return st;
}

// The expected output [tokens, width]: the first width columns of the CPU's output rows
// (hidden wide) for live sequences; zero rows for padding sequences and spare rows.
struct Expected {
  std::vector<float> out;
  std::vector<bool> zero_row;
};
inline Expected expected_out(const std::vector<float>& cpu_out, int64_t hidden, int64_t width,
                             const std::vector<Seq>& seqs, const Rows& r) {
  Expected e{std::vector<float>(size_t(r.tokens * width), 0.0f), std::vector<bool>(size_t(r.tokens), true)};
  for (int32_t s = 0; s < r.num_seqs; ++s)
    for (int32_t t = r.query_start[size_t(s)]; t < r.query_start[size_t(s) + 1]; ++t)
      if (seqs[size_t(s)].slot >= 0) {
        e.zero_row[size_t(t)] = false;
        std::copy_n(cpu_out.begin() + t * hidden, width, e.out.begin() + t * width);
      }
  return e;
}

// launch(stream, programmatic) once, then a device sync. graph: captured and replayed with
// programmatic launches, which also shows it capturable (no sync, allocation or host read
// inside).
template <typename Launch>
void launch_call(bool graph, Launch&& launch) {
  if (graph) {
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t g;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    launch(stream, true);
    CUDA_CHECK(cudaStreamEndCapture(stream, &g));
    CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(g));
    CUDA_CHECK(cudaStreamDestroy(stream));
  } else {
    launch(nullptr, false);
  }
  sync();
}

// The same calls run by row count (the chunked form for long sequences) and forced onto the
// recurrence: the matrices (past the first conv_values floats of each state) of the slots
// that ran >= 16 rows (long_slot) must differ, so the chunked form ran, and the others'
// be bit-identical, so it ran for them alone.
inline void dispatch_rows(const char* check, const std::string& what, const Pool& pool, const std::vector<float>& got,
                          const std::vector<float>& forced, const std::vector<bool>& long_slot, int64_t conv_values) {
  std::string differ, same;
  bool ok_differ = true, ok_same = true;
  for (int32_t slot = 0; slot < pool.num_slots; ++slot) {
    int64_t n = 0;
    for (int64_t i = conv_values; i < pool.state_values; ++i) {
      const size_t at = size_t(slot * pool.slot_stride + pool.layer_offset + i);
      n += std::memcmp(&got[at], &forced[at], sizeof(float)) != 0;
    }
    std::string& list = long_slot[size_t(slot)] ? differ : same;
    list += (list.empty() ? "" : " ") + std::to_string(slot) + ":" + std::to_string(n);
    (long_slot[size_t(slot)] ? ok_differ : ok_same) &= long_slot[size_t(slot)] ? n > 0 : n == 0;
  }
  row(check, what + ": >= 16-row slots' matrices differ (slot:floats)", differ, "> 0 each", ok_differ);
  row(check, what + ": shorter-row slots' bit-identical (slot:floats)", same, "0 each", ok_same);
}

// A call's row name: the case, the type, the label and its batch.
template <typename T>
std::string call_name(const std::string& name, const std::string& label, const std::vector<Seq>& seqs,
                      int32_t extra_rows) {
  return name + " " + half_name<T>() + " " + label + " [" + seq_list(seqs) +
         (extra_rows ? "+" + std::to_string(extra_rows) + " spare" : "") + "]";
}

// The output rows: live rows within T's limit of the CPU's, the others all zero.
template <typename T>
void check_out(const char* check, const std::string& what, const Expected& e, const DeviceArray<T>& d_out,
               int64_t width) {
  const std::vector<float> got = from_half(d_out.download());
  std::vector<float> want_live, got_live;
  int64_t nonzero = 0;
  for (size_t t = 0; t < e.zero_row.size(); ++t) {
    const auto w0 = e.out.cbegin() + int64_t(t) * width, g0 = got.cbegin() + int64_t(t) * width;
    if (e.zero_row[t])
      nonzero += std::count_if(g0, g0 + width, [](float v) { return v != 0.0f; });
    else {
      want_live.insert(want_live.end(), w0, w0 + width);
      got_live.insert(got_live.end(), g0, g0 + width);
    }
  }
  error_row(check, what + ": out", rel_error(want_live, got_live), half_limit<T>());
  if (nonzero || std::count(e.zero_row.begin(), e.zero_row.end(), true))
    row(check, what + ": padding and spare rows zero", std::to_string(nonzero) + " nonzero", "0", nonzero == 0);
}

// States: the written slots' conv (the first conv_values floats of the layer's state) and
// matrix parts within the limits, every other float of the pool (other slots, the other
// layer, slots of padding or row-less sequences) bit-identical to `before`. Each side
// continues from its own states, as a server would. Returns the device pool.
inline std::vector<float> check_states(const char* check, const std::string& what, const Pool& pool,
                                       const std::vector<float>& before, const std::vector<bool>& written,
                                       int64_t conv_values, double conv_limit, double matrix_limit) {
  const std::vector<float> dev = pool.device.download();
  const int64_t sv = pool.state_values;
  std::vector<float> conv_want, conv_got, mat_want, mat_got;
  int64_t changed = 0;
  for (int32_t slot = 0; slot < pool.num_slots; ++slot)
    for (int64_t i = 0; i < pool.slot_stride; ++i) {
      const size_t at = size_t(slot * pool.slot_stride + i);
      const int64_t in_layer = i - pool.layer_offset;
      if (written[size_t(slot)] && in_layer >= 0 && in_layer < sv) {
        (in_layer < conv_values ? conv_want : mat_want).push_back(pool.host[at]);
        (in_layer < conv_values ? conv_got : mat_got).push_back(dev[at]);
      } else {
        changed += std::memcmp(&before[at], &dev[at], sizeof(float)) != 0;
      }
    }
  if (!conv_want.empty()) error_row(check, what + ": conv states", rel_error(conv_want, conv_got), conv_limit);
  error_row(check, what + ": recurrent states", rel_error(mat_want, mat_got), matrix_limit);
  row(check, what + ": other state untouched", std::to_string(changed) + " floats changed", "0", changed == 0);
  return dev;
}

// The mixed batches, each call(seqs, extra_rows, seed, graph, label) on one pool: fresh
// prefills into dirty slots, decodes and prefill chunks continuing a state, a padding
// sequence, a sequence without rows, rows past the last sequence.
template <typename Call>
void mixed_calls(uint64_t seed, Call&& call) {
  // An earlier call leaves states in slots 6 and 1 (both from position 0, dirty slots).
  call(std::vector<Seq>{{6, 0, 3}, {1, 0, 1}}, 0, seed + 20, false, "call 1");
  // The mixed batch: a fresh prefill into dirty slot 5, decodes and prefill chunks
  // continuing call 1's states and random ones (slots 3, 0), a padding sequence.
  call(std::vector<Seq>{{5, 0, 5}, {6, 3, 1}, {-1, 0, 1}, {1, 1, 4}, {3, 11, 1}, {0, 40, 2}}, 0, seed + 30, false,
       "call 2");
  // Every state continues; slot 2 has a sequence without rows (its state must stay), one
  // spare row past the last sequence; as a graph of programmatic launches.
  call(std::vector<Seq>{{0, 42, 1}, {3, 12, 1}, {-1, 0, 1}, {6, 4, 2}, {2, 9, 0}, {1, 5, 1}, {5, 5, 3}}, 1, seed + 40,
       true, "call 3 graph");
}

// A decode batch of B sequences, one row each: sequence s in slot slot_of(s) at position
// first_position + position_step s.
template <typename SlotOf>
Rows decode_rows(int64_t B, SlotOf&& slot_of, int32_t first_position, int32_t position_step) {
  Rows r;
  r.query_start.resize(size_t(B + 1));
  r.positions.resize(size_t(B));
  r.slots.resize(size_t(B));
  for (int64_t s = 0; s < B; ++s) {
    r.slots[size_t(s)] = int32_t(slot_of(s));
    r.query_start[size_t(s + 1)] = int32_t(s + 1);
    r.positions[size_t(s)] = int32_t(first_position + position_step * s);
  }
  r.seq_rows = r.tokens = r.num_seqs = int32_t(B);
  return r;
}

// The bytes a decode call must move in the mixer's design (its decode_bytes).
struct DecodeBytes {
  double read, written;
};

// The byte rows: the emulator's count of the reads against the formula's, with a 1%
// margin for integers and partly read sectors (small enough that a second read of the
// conv state fails), and the formula's writes with the state matrices' share.
inline void decode_bytes_rows(const char* check, const std::string& what, double reads, const DecodeBytes& want,
                              double matrix_bytes) {
  const double ratio = reads / want.read;
  row(check, what + ": read", fmt("%.4f", ratio) + fmt(" (%.0f KiB)", reads / 1024),
      fmt("1 .. 1.01 of %.0f KiB", want.read / 1024), ratio >= 1.0 && ratio <= 1.01);
  info(check, what + ": written (formula)", fmt("%.0f KiB", want.written / 1024),
       fmt("state matrices %.1f%% of read + written", 100.0 * matrix_bytes / (want.read + want.written)));
}

// The decode benchmarks' states rotate through enough copies (one per "layer" of the
// slot) to miss the L2: the copies of B sequences' states of sv floats.
inline int bench_copies(int64_t B, int64_t sv) {
  return int(std::clamp(std::ceil(150e6 / (double(B) * double(sv) * 4)), 1.0, 64.0));
}

// A decode benchmark's row: its time against the bytes it must move at copy bandwidth
// (they are read and written), beside the read bandwidth.
inline void bench_row(const char* check, const std::string& what, double ms, const DecodeBytes& bytes,
                      double copy_gbs) {
  const double moved = bytes.read + bytes.written;
  info(check, what, fmt("%.1f us", ms * 1e3) + fmt(", %.0f GB/s", moved / (ms * 1e-3) / 1e9),
       fmt("%.1f MB moved, ", moved / 1e6) + fmt("floor %.1f us at copy bandwidth", moved / (copy_gbs * 1e9) * 1e6) +
           fmt(" (read %.0f GB/s)", read_bandwidth_gbs()));
}

}  // namespace spark::gpu_check::recurrent
