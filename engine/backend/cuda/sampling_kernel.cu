// sampling_kernel.cu — the per-row sampling kernel: logits edits, argmax, logprobs, and
// exact top-k / top-p / inverse-CDF selection by radix passes over the probabilities.
#include <climits>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/sampling_rows.h"
#include "engine/util/splitmix.h"

namespace spark::cuda::sampling {

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 2048;  // radix digits of 11, 11 and 10 bits over a 32-bit key
constexpr float kLogprobFloor = -9999.0f;
static_assert(kBins == 2 * kThreads, "each thread scans two bins");

// A block-wide prefix of the sorted order (key descending, id ascending): an element is in
// it when key > key_cut, or key == key_cut and id <= id_cut. Every truncation (top-k, top-p)
// keeps such a prefix, and the draw picks the last element of one.
struct Prefix {
  uint32_t key_cut;
  int32_t id_cut;
  __device__ bool contains(uint32_t key, int32_t id) const { return key > key_cut || (key == key_cut && id <= id_cut); }
};
// key 0 is probability 0 (or a NaN logit): never a candidate.
constexpr Prefix kAllNonzero{0u, -1};

enum class Criterion { kCountAtLeast, kMassAtLeast, kMassAbove };

// The element of a set at which a running total in sorted order first reaches a target.
struct Position {
  uint32_t key;
  int32_t id;
  uint32_t above_count;  // elements of the set with a larger key
  double above_mass;     // their probability mass
  uint32_t rank;         // index among the set's elements with this key, in id order
};

struct Shared {
  double hist_mass[kBins];
  uint32_t hist_count[kBins];
  int32_t hist_min_id[kBins];
  double warp_d[kWarps];
  uint32_t warp_u[kWarps];
  int32_t warp_i[kWarps];
  float warp_f[kWarps];
  // Broadcast slots, written by one thread between two barriers.
  uint32_t win_digit, win_count, win_above_count;
  int32_t win_min_id;
  double win_above_mass;
  int32_t bcast_id;
  int32_t top_count;
  uint32_t top_keys[kMaxTopLogprobs];
  int32_t top_ids[kMaxTopLogprobs];
};

__device__ __forceinline__ int lane_id() { return threadIdx.x & 31; }
__device__ __forceinline__ int warp_id() { return threadIdx.x >> 5; }

// Reduce over the block; every thread combines the per-warp values in the same order, so
// all threads hold bit-identical results (control flow below depends on that).
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane_id() == 0) scratch[warp_id()] = v;
  __syncthreads();
  T r = scratch[0];
  for (int w = 1; w < kWarps; ++w) r = op(r, scratch[w]);
  return r;
}

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct MinOp {
  __device__ int32_t operator()(int32_t a, int32_t b) const { return min(a, b); }
};
struct SumOp {
  __device__ double operator()(double a, double b) const { return a + b; }
};

// Compensated f32 running sum: the mass totals must be good to far below one token's
// share of a flat 150k-token row, without f64 arithmetic per element (slow on GB10).
struct Kahan {
  float s = 0.0f, c = 0.0f;
  __device__ void add(float x) {
    const float y = x - c;
    const float t = s + y;
    c = (t - s) - y;
    s = t;
  }
  __device__ double value() const { return double(s) - double(c); }
};

// Order-preserving key of a logit (larger logit, larger key); -0 and +0 compare equal as on the CPU.
__device__ __forceinline__ uint32_t logit_key(float x) {
  const uint32_t u = __float_as_uint(x == 0.0f ? 0.0f : x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The CPU's float(exp(double(l - top) * (1 / T))), then min_p, in f32: the product is kept as
// hi + lo (exact residual by fma), and exp(hi + lo) = exp(hi) * (1 + lo). Within ~2 ulp of
// the CPU's value; the bits of a non-negative float order like the float, so the key is p's bits.
struct ProbKey {
  float top, inv_t_hi, inv_t_lo, min_p;
  __device__ float prob(float l) const {
    const float d = l - top;
    if (!(d > -INFINITY)) return 0.0f;  // masked (-inf) or NaN
    const float xh = d * inv_t_hi;
    const float xl = fmaf(d, inv_t_hi, -xh) + d * inv_t_lo;
    const float e = expf(xh);
    const float p = fmaf(e, xl, e);
    return p < min_p ? 0.0f : p;
  }
  __device__ uint32_t operator()(float l) const { return __float_as_uint(prob(l)); }
};

struct LogitKey {
  __device__ uint32_t operator()(float l) const { return logit_key(l); }
};

// Among the elements of `set` whose key equals `key`, the id of the rank-th in id order.
// Warp w owns one contiguous segment of ids: count per warp, then one warp walks its segment.
template <typename KeyFn>
__device__ __noinline__ int32_t nth_tied_id(const float* row, int32_t vocab, KeyFn key_of, uint32_t key, Prefix set,
                                            uint32_t rank, Shared& sh) {
  const int32_t seg = int32_t(ceil_div(ceil_div(vocab, kWarps), 32) * 32);
  const int32_t begin = warp_id() * seg, end = min(vocab, begin + seg);
  uint32_t count = 0;
  for (int32_t base = begin; base < end; base += 32) {
    const int32_t i = base + lane_id();
    bool hit = false;
    if (i < end) {
      const uint32_t k = key_of(row[i]);
      hit = k == key && set.contains(k, i);
    }
    count += __popc(__ballot_sync(0xffffffffu, hit));
  }
  __syncthreads();  // warp_u may still be read by a previous routine
  if (lane_id() == 0) sh.warp_u[warp_id()] = count;
  if (threadIdx.x == 0) sh.bcast_id = -1;
  __syncthreads();
  uint32_t before = 0;
  int owner = kWarps;
  for (int w = 0; w < kWarps; ++w) {
    if (rank < before + sh.warp_u[w]) {
      owner = w;
      break;
    }
    before += sh.warp_u[w];
  }
  if (warp_id() == owner) {
    uint32_t left = rank - before;
    for (int32_t base = begin; base < end; base += 32) {
      const int32_t i = base + lane_id();
      bool hit = false;
      if (i < end) {
        const uint32_t k = key_of(row[i]);
        hit = k == key && set.contains(k, i);
      }
      uint32_t mask = __ballot_sync(0xffffffffu, hit);
      const uint32_t n = __popc(mask);
      if (left < n) {
        for (uint32_t j = 0; j < left; ++j) mask &= mask - 1;  // drop the lowest `left` set bits
        if (lane_id() == 0) sh.bcast_id = base + __ffs(mask) - 1;
        break;
      }
      left -= n;
    }
  }
  __syncthreads();
  return sh.bcast_id;
}

// Walks the elements of `set` in sorted order (key descending, id ascending) and returns the
// first at which the running count (kCountAtLeast: >= target) or the running probability
// mass (kMassAtLeast: >= target, kMassAbove: > target) gets there, or the set's last
// element when rounding never gets there. Three histogram passes over the row fix the key
// 11, 11 and 10 bits at a time; ties on the key are then resolved in id order. The set
// must not be empty. With kMass false the keys are not probabilities and only counts work.
template <bool kMass, typename KeyFn>
__device__ __noinline__ Position find_position(const float* row, int32_t vocab, KeyFn key_of, Prefix set,
                                               Criterion crit, double target, Shared& sh) {
  uint32_t prefix = 0, prefix_mask = 0;
  uint32_t above_count = 0;
  double above_mass = 0.0;
  uint32_t tied = 0;
  int32_t min_id = 0;
  for (int level = 0; level < 3; ++level) {
    const int shift = level == 0 ? 21 : level == 1 ? 10 : 0;
    const uint32_t digit_mask = level == 2 ? 0x3FFu : 0x7FFu;
    __syncthreads();  // the previous level's bins are still being read
    for (int b = threadIdx.x; b < kBins; b += kThreads) {
      sh.hist_count[b] = 0;
      sh.hist_min_id[b] = INT_MAX;
      if (kMass) sh.hist_mass[b] = 0.0;
    }
    __syncthreads();

    // Consecutive elements of one thread mostly share a digit (always so in flat rows, where
    // every key lands in one or two bins): add runs, not elements, to the shared bins.
    uint32_t run_digit = 0xFFFFFFFFu, run_n = 0;
    int32_t run_first = 0;
    Kahan run_mass;
    auto flush = [&] {
      if (run_n == 0) return;
      atomicAdd(&sh.hist_count[run_digit], run_n);
      if (level == 2) atomicMin(&sh.hist_min_id[run_digit], run_first);  // only the full key's bin needs it
      if (kMass) atomicAdd(&sh.hist_mass[run_digit], run_mass.value());
    };
    for (int32_t i = threadIdx.x; i < vocab; i += kThreads) {
      const uint32_t key = key_of(row[i]);
      if (!set.contains(key, i) || (key & prefix_mask) != prefix) continue;
      const uint32_t digit = (key >> shift) & digit_mask;
      if (digit != run_digit) {
        flush();
        run_digit = digit;
        run_n = 0;
        run_mass = Kahan{};
        run_first = i;  // ids rise along a thread's elements: the run's first is its lowest
      }
      ++run_n;
      if (kMass) run_mass.add(__uint_as_float(key));
    }
    flush();
    __syncthreads();

    // Thread t owns bins 2047 - 2t and 2046 - 2t: descending digits, i.e. sorted order.
    const int b0 = kBins - 1 - 2 * int(threadIdx.x), b1 = b0 - 1;
    const uint32_t c0 = sh.hist_count[b0], c1 = sh.hist_count[b1];
    const double m0 = kMass ? sh.hist_mass[b0] : 0.0, m1 = kMass ? sh.hist_mass[b1] : 0.0;
    // Warp-local inclusive scan of (count, mass), then the warps before this one.
    uint32_t c_incl = c0 + c1;
    double m_incl = m0 + m1;
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t c = __shfl_up_sync(0xffffffffu, c_incl, o);
      const double m = __shfl_up_sync(0xffffffffu, m_incl, o);
      if (lane_id() >= o) {
        c_incl += c;
        m_incl += m;
      }
    }
    double m_excl = __shfl_up_sync(0xffffffffu, m_incl, 1);
    if (lane_id() == 0) m_excl = 0.0;
    __syncthreads();  // warp slots may still be read by a previous routine
    if (lane_id() == 31) {
      sh.warp_u[warp_id()] = c_incl;
      sh.warp_d[warp_id()] = m_incl;
    }
    __syncthreads();
    uint32_t c_before = 0, range_count = 0;
    double m_before = 0.0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp_id()) {
        c_before += sh.warp_u[w];
        m_before += sh.warp_d[w];
      }
      range_count += sh.warp_u[w];
    }
    c_incl += c_before;
    m_incl += m_before;
    m_excl += m_before;
    const uint32_t c_excl = c_incl - c0 - c1;
    auto reached = [&](uint32_t c, double m) {
      if (c == range_count) return true;  // the set's last element in this range
      switch (crit) {
        case Criterion::kCountAtLeast:
          return double(above_count + c) >= target;
        case Criterion::kMassAtLeast:
          return above_mass + m >= target;
        default:
          return above_mass + m > target;
      }
    };
    // The first non-empty bin where the running total gets there. Each thread tests its own
    // running totals; rounding may make neighbours' totals disagree by an ulp, so the winner
    // is the minimum position, never "the one where it flips".
    const double m_mid = m_excl + m0;
    int32_t first = INT_MAX;
    if (c0 > 0 && reached(c_excl + c0, m_mid))
      first = 2 * int(threadIdx.x);
    else if (c1 > 0 && reached(c_incl, m_incl))
      first = 2 * int(threadIdx.x) + 1;
    const int32_t win = block_reduce(first, MinOp{}, sh.warp_i);
    if (win == 2 * int(threadIdx.x)) {
      sh.win_digit = uint32_t(b0);
      sh.win_count = c0;
      sh.win_min_id = sh.hist_min_id[b0];
      sh.win_above_count = c_excl;
      sh.win_above_mass = m_excl;
    } else if (win == 2 * int(threadIdx.x) + 1) {
      sh.win_digit = uint32_t(b1);
      sh.win_count = c1;
      sh.win_min_id = sh.hist_min_id[b1];
      sh.win_above_count = c_excl + c0;
      sh.win_above_mass = m_mid;
    }
    __syncthreads();
    above_count += sh.win_above_count;
    above_mass += sh.win_above_mass;
    prefix |= sh.win_digit << shift;
    prefix_mask |= digit_mask << shift;
    tied = sh.win_count;
    min_id = sh.win_min_id;
  }

  // All `tied` elements carry the key `prefix`; find how many of them the target needs.
  uint32_t rank = 0;
  if (crit == Criterion::kCountAtLeast) {
    const double need = target - double(above_count);  // >= 1 unless it ran out
    rank = need >= double(tied) ? tied - 1 : (need > 1.0 ? uint32_t(need) - 1 : 0);
  } else {
    const double p = double(__uint_as_float(prefix));
    const double slots = (target - above_mass) / p;
    double r = crit == Criterion::kMassAtLeast ? ceil(slots) - 1.0 : floor(slots);
    r = fmin(fmax(r, 0.0), double(tied - 1));  // fmax also drops a NaN
    rank = uint32_t(r);
  }
  Position pos{prefix, min_id, above_count, above_mass, rank};
  if (rank > 0) {
    const int32_t id = nth_tied_id(row, vocab, key_of, prefix, set, rank, sh);
    if (id >= 0) pos.id = id;  // not found cannot happen (same predicate as the bins); stay in range
  }
  return pos;
}

// Mass of the set ending at pos (inclusive): what the next truncation renormalizes over.
__device__ double mass_through(const Position& pos) {
  return pos.above_mass + double(pos.rank + 1) * double(__uint_as_float(pos.key));
}

// No top-k / top-p: the CPU walks the CDF in id order. Warp w owns a contiguous id segment;
// the first pass sums each segment, then the warp whose segment holds the target walks it.
struct Totals {
  double mass;
  uint32_t count;
  int32_t last_nonzero;
};

__device__ __noinline__ Totals prob_totals(const float* row, int32_t vocab, const ProbKey& pk, Shared& sh) {
  const int32_t seg = int32_t(ceil_div(ceil_div(vocab, kWarps), 32) * 32);
  const int32_t begin = warp_id() * seg, end = min(vocab, begin + seg);
  Kahan sum;
  uint32_t count = 0;
  int32_t last = -1;
  for (int32_t i = begin + lane_id(); i < end; i += 32) {
    const float p = pk.prob(row[i]);
    if (p > 0.0f) {
      sum.add(p);
      ++count;
      last = i;
    }
  }
  double s = sum.value();
  for (int o = 16; o > 0; o >>= 1) {
    s += __shfl_xor_sync(0xffffffffu, s, o);
    count += __shfl_xor_sync(0xffffffffu, count, o);
    last = max(last, __shfl_xor_sync(0xffffffffu, last, o));
  }
  __syncthreads();
  if (lane_id() == 0) {
    sh.warp_d[warp_id()] = s;
    sh.warp_u[warp_id()] = count;
    sh.warp_i[warp_id()] = last;
  }
  __syncthreads();
  Totals t{0.0, 0, -1};
  for (int w = 0; w < kWarps; ++w) {  // same order in every thread: identical totals
    t.mass += sh.warp_d[w];
    t.count += sh.warp_u[w];
    t.last_nonzero = max(t.last_nonzero, sh.warp_i[w]);
  }
  return t;  // warp_d keeps the segment masses for cdf_walk_by_id
}

__device__ __noinline__ int32_t cdf_walk_by_id(const float* row, int32_t vocab, const ProbKey& pk, const Totals& totals,
                                               double target, Shared& sh) {
  const int32_t seg = int32_t(ceil_div(ceil_div(vocab, kWarps), 32) * 32);
  double acc = 0.0;
  int owner = kWarps;
  for (int w = 0; w < kWarps; ++w) {
    if (sh.warp_d[w] > 0.0 && acc + sh.warp_d[w] > target) {
      owner = w;
      break;
    }
    acc += sh.warp_d[w];
  }
  __syncthreads();                                          // everyone has read warp_d
  if (threadIdx.x == 0) sh.bcast_id = totals.last_nonzero;  // rounding left the target past the end
  __syncthreads();
  if (warp_id() == owner) {
    // Past the owner's segment only when its pass-1 sum and this walk round differently.
    for (int32_t base = owner * seg; base < vocab; base += 32) {
      const int32_t i = base + lane_id();
      const float p = i < vocab ? pk.prob(row[i]) : 0.0f;
      double incl = p;
      for (int o = 1; o < 32; o <<= 1) {
        const double v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane_id() >= o) incl += v;
      }
      const uint32_t hit = __ballot_sync(0xffffffffu, p > 0.0f && acc + incl > target);
      if (hit) {
        if (lane_id() == 0) sh.bcast_id = base + __ffs(hit) - 1;
        break;
      }
      acc += __shfl_sync(0xffffffffu, incl, 31);
    }
  }
  __syncthreads();
  return sh.bcast_id;
}

__global__ void __launch_bounds__(kThreads) sample_rows_kernel(KernelArgs a) {
  __shared__ Shared sh;
  const RowParams& prm = a.params[blockIdx.x];  // read where used: a register copy spills
  float* row = a.logits + size_t(blockIdx.x) * size_t(a.vocab);
  const int32_t vocab = a.vocab;

  // 1. Edits in the CPU's order; each list has unique ids (masks repeat only the same write).
  for (int k = threadIdx.x; k < prm.bias_count; k += kThreads) {
    const IdValue b = a.bias[prm.bias_begin + k];
    row[b.id] += b.value;
  }
  __syncthreads();
  for (int k = threadIdx.x; k < prm.mask_count; k += kThreads) row[a.masks[prm.mask_begin + k]] = -INFINITY;
  __syncthreads();
  const bool repetition = prm.flags & kRepetition;
  for (int k = threadIdx.x; k < prm.penalty_count; k += kThreads) {
    const IdValue e = a.penalties[prm.penalty_begin + k];
    float l = row[e.id];
    if (repetition) l = l > 0.0f ? l / prm.repetition : l * prm.repetition;
    row[e.id] = l - e.value;  // value 0 for ids only the repetition penalty touches: x - 0 == x
  }
  __syncthreads();

  // 2. Max, first argmax, and (for logprobs) an online sum of exp(l - max) in one pass.
  const bool want_logprobs = prm.flags & kLogprobs;
  float m = -INFINITY, s = 0.0f;
  int32_t arg = INT_MAX;
  for (int32_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float x = row[i];
    if (x > m) {
      if (want_logprobs) s = s * expf(m - x) + 1.0f;
      m = x;
      arg = i;  // ids rise along a thread: ties keep the first
    } else if (want_logprobs && x > -INFINITY) {
      s += expf(x - m);
    }
  }
  const float top = block_reduce(m, MaxOp{}, sh.warp_f);
  int32_t argmax = block_reduce(m == top ? arg : INT_MAX, MinOp{}, sh.warp_i);
  if (argmax == INT_MAX) argmax = 0;  // every logit -inf (or NaN): the CPU's max_element gives 0
  double lse = 0.0;
  if (want_logprobs) {
    const double part = m > -INFINITY ? double(s) * double(expf(m - top)) : 0.0;
    lse = double(top) + log(block_reduce(part, SumOp{}, sh.warp_d));
  }

  // 3. The token.
  int32_t token = argmax;
  if (!(prm.flags & kGreedy) && isfinite(top)) {
    const ProbKey pk{top, prm.inv_t_hi, prm.inv_t_lo, prm.min_p};
    const Totals totals = prob_totals(row, vocab, pk, sh);
    const double u = splitmix_uniform01(prm.seed, prm.counter);
    const bool top_p = prm.flags & kTopP;
    if (prm.top_k == 0 && !top_p) {
      token = cdf_walk_by_id(row, vocab, pk, totals, u * totals.mass, sh);
    } else {
      Prefix set = kAllNonzero;
      double mass = totals.mass;
      if (prm.top_k > 0 && totals.count > uint32_t(prm.top_k)) {
        const Position k = find_position<true>(row, vocab, pk, set, Criterion::kCountAtLeast, double(prm.top_k), sh);
        set = Prefix{k.key, k.id};
        mass = mass_through(k);
      }
      if (top_p) {
        const Position p = find_position<true>(row, vocab, pk, set, Criterion::kMassAtLeast, prm.top_p * mass, sh);
        set = Prefix{p.key, p.id};
        mass = mass_through(p);
      }
      token = find_position<true>(row, vocab, pk, set, Criterion::kMassAbove, u * mass, sh).id;
    }
  }

  // 4. Logprobs of the adjusted logits: the token's, and the most likely (logit desc, id asc).
  int32_t num_top = 0;
  if (want_logprobs && prm.num_top_logprobs > 0) {
    const Position nth =
        find_position<false>(row, vocab, LogitKey{}, kAllNonzero, Criterion::kCountAtLeast, prm.num_top_logprobs, sh);
    const Prefix best{nth.key, nth.id};
    __syncthreads();
    if (threadIdx.x == 0) sh.top_count = 0;
    __syncthreads();
    for (int32_t i = threadIdx.x; i < vocab; i += kThreads) {
      const uint32_t key = logit_key(row[i]);
      if (best.contains(key, i)) {
        const int slot = atomicAdd(&sh.top_count, 1);
        if (slot < kMaxTopLogprobs) {
          sh.top_keys[slot] = key;
          sh.top_ids[slot] = i;
        }
      }
    }
    __syncthreads();
    num_top = min(sh.top_count, min(prm.num_top_logprobs, kMaxTopLogprobs));
  }
  if (threadIdx.x == 0) {
    RowResult& out = a.results[blockIdx.x];
    out.token = token;
    out.logprob = want_logprobs ? fmaxf(kLogprobFloor, float(double(row[token]) - lse)) : 0.0f;
    // Insertion sort of at most 20 (key desc, id asc).
    for (int i = 1; i < num_top; ++i) {
      const uint32_t k = sh.top_keys[i];
      const int32_t id = sh.top_ids[i];
      int j = i - 1;
      while (j >= 0 && (sh.top_keys[j] < k || (sh.top_keys[j] == k && sh.top_ids[j] > id))) {
        sh.top_keys[j + 1] = sh.top_keys[j];
        sh.top_ids[j + 1] = sh.top_ids[j];
        --j;
      }
      sh.top_keys[j + 1] = k;
      sh.top_ids[j + 1] = id;
    }
    out.num_top = num_top;
    for (int i = 0; i < num_top; ++i) {
      out.top_ids[i] = sh.top_ids[i];
      out.top_logprobs[i] = fmaxf(kLogprobFloor, float(double(row[sh.top_ids[i]]) - lse));
    }
  }
}

__global__ void uniform01_kernel(const uint64_t* seeds, const uint64_t* counters, double* out, int32_t n) {
  const int32_t i = int32_t(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = splitmix_uniform01(seeds[i], counters[i]);
}

}  // namespace

void launch_sample_rows(const KernelArgs& args, int32_t rows, cudaStream_t stream) {
  if (rows <= 0) return;
  sample_rows_kernel<<<rows, kThreads, 0, stream>>>(args);
  CUDA_CHECK_LAUNCH();
}

void launch_uniform01(const uint64_t* seeds, const uint64_t* counters, double* out, int32_t n, cudaStream_t stream) {
  if (n <= 0) return;
  uniform01_kernel<<<int32_t(ceil_div(n, 256)), 256, 0, stream>>>(seeds, counters, out, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace spark::cuda::sampling
