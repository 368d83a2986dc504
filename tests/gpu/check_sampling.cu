// check_sampling.cu — DeviceSampler against the CPU Sampler: greedy ids, logprobs, seeded
// draws, the draw distribution, device uniform01 bits; sample() timings.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "engine/backend/cuda/sampling.h"
#include "engine/backend/cuda/sampling_rows.h"
#include "engine/core/sampler.h"
#include "tests/gpu/gpu_check.h"

namespace {

using namespace spark;
using namespace spark::gpu_check;

constexpr int32_t kRows = 64;
constexpr int64_t kMaxContext = 4096;

uint64_t mix(uint64_t a, uint64_t b) { return splitmix64(a * 0x9E3779B97F4A7C15ull ^ splitmix64(b)); }

// kind 0: flat (uniform in [-1, 1]); kind 1: a long tail in [-4, 4] with ~24 strong
// candidates 6..14 above it, like a model's; kind 2: kind 1 plus exact and one-ulp ties at
// the top and in the candidates.
std::vector<float> make_logits(int64_t vocab, uint64_t seed, int kind) {
  if (kind == 0) return random_floats(size_t(vocab), seed);
  std::vector<float> l = random_floats(size_t(vocab), seed, -4.0f, 4.0f);
  for (int k = 0; k < 24; ++k) {
    const auto id = size_t(mix(seed, 1000 + k) % uint64_t(vocab));
    l[id] += 6.0f + 8.0f * float(mix(seed, 2000 + k) >> 40) / 16777216.0f;
  }
  if (kind == 2) {
    const auto top = size_t(std::max_element(l.begin(), l.end()) - l.begin());
    for (int k = 0; k < 3; ++k) l[size_t(mix(seed, 3000 + k) % uint64_t(vocab))] = l[top];
    for (int k = 0; k < 3; ++k) l[size_t(mix(seed, 4000 + k) % uint64_t(vocab))] = std::nextafter(l[top], -INFINITY);
    const auto second = size_t(mix(seed, 1001) % uint64_t(vocab));
    for (int k = 0; k < 4; ++k) l[size_t(mix(seed, 5000 + k) % uint64_t(vocab))] = l[second];
  }
  return l;
}

struct Case {
  SamplingParams params;
  std::vector<int32_t> context;
  int64_t num_prompt = 0;
  uint64_t seed = 0, counter = 0;
};

struct Batch {
  int64_t vocab;
  std::vector<float> logits;  // [cases.size(), vocab]
  std::vector<Case> cases;
};

// A context of prompt and output tokens; includes `hot` (a likely token) so penalties matter.
void fill_context(Case& c, int64_t vocab, uint64_t seed, int32_t hot, int64_t num_output) {
  const int64_t prompt = 20 + int64_t(mix(seed, 7) % 300);
  for (int64_t i = 0; i < prompt + num_output; ++i) {
    int32_t id = int32_t(mix(seed, 100 + uint64_t(i)) % uint64_t(vocab));
    if (i % 17 == 5) id = hot;
    if (i % 23 == 3 && i > 0) id = c.context[size_t(i - 1)];  // repeats
    c.context.push_back(id);
  }
  c.num_prompt = prompt;
}

std::vector<SampleOutput> run_device(cuda::DeviceSampler& ds, DeviceArray<float>& d_logits, const Batch& b) {
  d_logits.upload(b.logits);
  std::vector<cuda::SampleRow> rows;
  for (const Case& c : b.cases)
    rows.push_back({&c.params, std::span<const int32_t>(c.context), c.num_prompt, c.seed, c.counter});
  std::vector<SampleOutput> out(b.cases.size());
  for (auto& o : out) o.token = -7;  // poison
  ds.sample(d_logits.get(), rows, out, nullptr);
  return out;
}

std::vector<SampleOutput> run_cpu(Sampler& cpu, const Batch& b) {
  std::vector<SampleOutput> out;
  for (size_t r = 0; r < b.cases.size(); ++r) {
    const Case& c = b.cases[r];
    out.push_back(
        cpu.sample(b.logits.data() + r * size_t(b.vocab), c.params, c.context, c.num_prompt, c.seed, c.counter));
  }
  return out;
}

// Logprob comparison: same top ids in the same order, values within tol. Returns the worst difference (inf on id
// mismatch).
double logprob_diff(const SampleOutput& ref, const SampleOutput& got, bool compare_chosen) {
  double worst = 0;
  if (compare_chosen) worst = std::fabs(double(ref.logprob) - double(got.logprob));
  if (ref.top_logprobs.size() != got.top_logprobs.size()) return INFINITY;
  for (size_t i = 0; i < ref.top_logprobs.size(); ++i) {
    if (ref.top_logprobs[i].first != got.top_logprobs[i].first) return INFINITY;
    worst = std::max(worst, std::fabs(double(ref.top_logprobs[i].second) - double(got.top_logprobs[i].second)));
  }
  return worst;
}

std::vector<int32_t> eos_ids(int64_t vocab) { return {int32_t(vocab - 1), 7}; }

// Greedy rows, half of them with logit_bias / min_tokens / penalties that change the argmax.
Batch greedy_batch(int64_t vocab, uint64_t seed) {
  Batch b{vocab, {}, {}};
  for (int32_t r = 0; r < kRows; ++r) {
    const uint64_t rs = mix(seed, uint64_t(r));
    std::vector<float> l = make_logits(vocab, rs, r % 3);
    const auto top = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    Case c;
    c.params.temperature = 0.0;
    c.seed = rs;
    c.counter = uint64_t(r);
    switch (r % 8) {
      case 1:  // bias: push the max down, another token up
        c.params.logit_bias[top] = -5.0f;
        c.params.logit_bias[int32_t(rs % uint64_t(vocab))] = 3.5f;
        c.params.logit_bias[int32_t((rs >> 20) % uint64_t(vocab))] = 100.0f;
        break;
      case 2:  // min_tokens: the EOS ids are the most likely and must be masked
        l[size_t(vocab - 1)] = l[size_t(top)] + 5.0f;
        l[7] = l[size_t(top)] + 4.0f;
        c.params.min_tokens = 10;
        c.params.stop_token_ids = {top};
        break;
      case 3:  // ignore_eos: only stop ids are masked
        l[size_t(vocab - 1)] = l[size_t(top)] + 5.0f;
        c.params.min_tokens = 10;
        c.params.ignore_eos = true;
        c.params.stop_token_ids = {int32_t(vocab - 1)};
        break;
      case 4:
        c.params.repetition_penalty = 1.8;
        break;
      case 5:
        c.params.presence_penalty = 1.5;
        c.params.frequency_penalty = 0.9;
        break;
      case 6:
        c.params.repetition_penalty = 0.7;
        c.params.frequency_penalty = -0.5;
        break;
      default:
        break;
    }
    fill_context(c, vocab, rs, top, (r % 8 == 2 || r % 8 == 3) ? 3 : int64_t(r % 40));
    if (r % 2 == 0) {
      c.params.logprobs = true;
      c.params.top_logprobs = (r / 2) % 21;
    }
    b.logits.insert(b.logits.end(), l.begin(), l.end());
    b.cases.push_back(std::move(c));
  }
  return b;
}

// Seeded draws with top-k / top-p / min-p combinations, some with edits and logprobs.
Batch sampled_batch(int64_t vocab, uint64_t seed) {
  struct Knobs {
    int32_t top_k;
    double top_p, min_p;
  };
  static const Knobs knobs[] = {{-1, 1.0, 0.0},  {50, 1.0, 0.0},      {-1, 0.9, 0.0}, {40, 0.8, 0.0},
                                {-1, 1.0, 0.05}, {1000, 0.95, 0.02},  {1, 1.0, 0.0},  {5, 0.5, 0.0},
                                {-1, 0.3, 0.1},  {200000, 0.99, 0.0}, {20, 1.0, 0.2}, {-1, 0.999, 0.0}};
  static const double temps[] = {0.7, 1.0, 1.5};
  Batch b{vocab, {}, {}};
  for (int32_t r = 0; r < kRows; ++r) {
    const uint64_t rs = mix(seed, uint64_t(r));
    std::vector<float> l = make_logits(vocab, rs, int(rs % 3));
    const auto top = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    Case c;
    const Knobs& k = knobs[(rs >> 8) % (sizeof knobs / sizeof knobs[0])];
    c.params.temperature = temps[(rs >> 16) % 3];
    c.params.top_k = k.top_k;
    c.params.top_p = k.top_p;
    c.params.min_p = k.min_p;
    c.seed = mix(rs, 1);
    c.counter = mix(rs, 2) % 5000;
    if (r % 5 == 1) c.params.logit_bias[top] = -2.0f;
    if (r % 7 == 2) c.params.repetition_penalty = 1.3;
    if (r % 7 == 4) c.params.presence_penalty = 0.8;
    if (r % 4 == 0) {
      c.params.logprobs = true;
      c.params.top_logprobs = 5;
    }
    fill_context(c, vocab, rs, top, int64_t(r % 30));
    b.logits.insert(b.logits.end(), l.begin(), l.end());
    b.cases.push_back(std::move(c));
  }
  return b;
}

void check_uniform01() {
  constexpr int32_t n = 100000;
  std::vector<uint64_t> seeds(n), counters(n);
  for (int32_t i = 0; i < n; ++i) {
    seeds[size_t(i)] = i % 3 == 0 ? uint64_t(i / 3) : splitmix64(uint64_t(i));
    counters[size_t(i)] = i % 2 == 0 ? uint64_t(i % 1000) : splitmix64(~uint64_t(i));
  }
  DeviceArray<uint64_t> d_seeds(seeds), d_counters(counters);
  DeviceArray<double> d_out(n);
  d_out.poison();
  cuda::sampling::launch_uniform01(d_seeds.get(), d_counters.get(), d_out.get(), n, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<double> got = d_out.download();
  int32_t differ = 0;
  for (int32_t i = 0; i < n; ++i) {
    const double ref = uniform01(seeds[size_t(i)], counters[size_t(i)]);
    if (std::memcmp(&ref, &got[size_t(i)], sizeof ref) != 0) ++differ;
  }
  row("sampling", "uniform01 device == host bits (1e5)", std::to_string(differ) + " differ", "0", differ == 0);
}

void check_against_cpu(int64_t vocab) {
  const std::string v = " v" + std::to_string(vocab);
  cuda::DeviceSampler ds(vocab, eos_ids(vocab), kRows, kMaxContext);
  Sampler cpu(vocab, eos_ids(vocab));
  DeviceArray<float> d_logits(size_t(kRows) * size_t(vocab));

  // Greedy: ids exact, logprobs close.
  int greedy_rows = 0, greedy_differ = 0, lp_rows = 0;
  double lp_worst = 0;
  for (uint64_t batch = 0; batch < 3; ++batch) {
    const Batch b = greedy_batch(vocab, 0x6000 + batch + uint64_t(vocab));
    const auto got = run_device(ds, d_logits, b);
    const auto ref = run_cpu(cpu, b);
    for (size_t r = 0; r < got.size(); ++r) {
      ++greedy_rows;
      if (got[r].token != ref[r].token) ++greedy_differ;
      if (b.cases[r].params.logprobs) {
        ++lp_rows;
        lp_worst = std::max(lp_worst, logprob_diff(ref[r], got[r], got[r].token == ref[r].token));
      }
    }
  }
  row("sampling", "greedy ids (bias/min_tokens/penalties)" + v,
      std::to_string(greedy_differ) + "/" + std::to_string(greedy_rows) + " differ", "0", greedy_differ == 0);
  row("sampling", "greedy logprobs+top ids" + v, fmt("max diff %.2e", lp_worst) + " (" + std::to_string(lp_rows) + ")",
      "<= 1e-4", lp_worst <= 1e-4);

  // Seeded draws: the same token as the CPU for the same (seed, counter) in >= 99% of rows.
  int sampled_rows = 0, same = 0, slp_rows = 0;
  double slp_worst = 0;
  // Emulated, a batch of sampled rows takes seconds (each row runs up to nine radix passes
  // of 1024 threads): three batches a vocabulary still give every top-k / top-p / min-p
  // combination and temperature of sampled_batch several rows each.
  const uint64_t sampled_batches = emulated() ? 3 : 6;
  for (uint64_t batch = 0; batch < sampled_batches; ++batch) {
    const Batch b = sampled_batch(vocab, 0x9000 + batch + uint64_t(vocab));
    const auto got = run_device(ds, d_logits, b);
    const auto ref = run_cpu(cpu, b);
    for (size_t r = 0; r < got.size(); ++r) {
      ++sampled_rows;
      if (got[r].token == ref[r].token) ++same;
      if (b.cases[r].params.logprobs) {
        ++slp_rows;
        slp_worst = std::max(slp_worst, logprob_diff(ref[r], got[r], got[r].token == ref[r].token));
      }
    }
  }
  const double frac = double(same) / double(sampled_rows);
  row("sampling", "sampled ids == CPU (same seed, counter)" + v,
      fmt("%.4f", frac) + " of " + std::to_string(sampled_rows), ">= 0.99", frac >= 0.99);
  row("sampling", "sampled-row logprobs" + v, fmt("max diff %.2e", slp_worst) + " (" + std::to_string(slp_rows) + ")",
      "<= 1e-4", slp_worst <= 1e-4);
}

// One row drawn with 20000 counters: empirical frequencies vs the kept tokens' probabilities
// computed here the CPU's way (p = exp((l - max) / T), top-k, then top-p, renormalized).
// Emulated (~2 s a batch of 64 rows, nearly all per-row fixed cost, so a smaller vocabulary
// would not help) 2048 draws. The row keeps 11 tokens, the least likely at q = 0.0163:
// 2048 q = 33 expected draws, enough for the normal approximation behind the z bound, and
// a kept token never drawn (a top-p cut one token short) still shows at
// z = sqrt(2048 q / (1 - q)) = 5.8 > 5; a token kept too many is counted outside the kept
// set whenever it is drawn.
void check_distribution() {
  constexpr int64_t vocab = 128256;
  constexpr int32_t draws = emulated() ? 2048 : 20000;
  const std::vector<float> l = make_logits(vocab, 0xD157, 1);
  SamplingParams params;
  params.temperature = 1.0;
  params.top_k = 50;
  params.top_p = 0.95;

  const float top = *std::max_element(l.begin(), l.end());
  std::vector<float> p(static_cast<size_t>(vocab));
  for (size_t i = 0; i < p.size(); ++i) p[i] = float(std::exp((l[i] - top) * (1.0 / params.temperature)));
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return p[size_t(a)] != p[size_t(b)] ? p[size_t(a)] > p[size_t(b)] : a < b; });
  order.resize(size_t(params.top_k));
  double total = 0;
  for (int32_t id : order) total += p[size_t(id)];
  double cum = 0;
  size_t keep = 0;
  while (keep < order.size()) {
    cum += p[size_t(order[keep++])];
    if (cum >= params.top_p * total) break;
  }
  order.resize(keep);
  double kept_mass = 0;
  for (int32_t id : order) kept_mass += p[size_t(id)];

  cuda::DeviceSampler ds(vocab, eos_ids(vocab), kRows, kMaxContext);
  DeviceArray<float> d_pristine(l), d_logits(size_t(kRows) * size_t(vocab));
  std::vector<int64_t> hist(static_cast<size_t>(vocab), 0);
  std::vector<cuda::SampleRow> rows;
  std::vector<SampleOutput> out;
  const std::vector<int32_t> no_context;
  for (int32_t first = 0; first < draws; first += kRows) {
    const int32_t n = std::min(kRows, draws - first);
    rows.clear();
    for (int32_t r = 0; r < n; ++r) {
      CUDA_CHECK(cudaMemcpy(d_logits.get() + size_t(r) * vocab, d_pristine.get(), size_t(vocab) * sizeof(float),
                            cudaMemcpyDeviceToDevice));
      rows.push_back({&params, std::span<const int32_t>(no_context), 0, 0x5EED, uint64_t(first + r)});
    }
    ds.sample(d_logits.get(), rows, out, nullptr);
    for (int32_t r = 0; r < n; ++r) ++hist[size_t(out[size_t(r)].token)];
  }
  int64_t outside = draws;
  double worst_z = 0, chi2 = 0;
  for (int32_t id : order) {
    const double q = p[size_t(id)] / kept_mass;
    const double f = double(hist[size_t(id)]) / draws;
    outside -= hist[size_t(id)];
    worst_z = std::max(worst_z, std::fabs(f - q) / std::sqrt(q * (1 - q) / draws));
    chi2 += (f - q) * (f - q) / q * draws;
  }
  row("sampling", "draws outside the kept set (top_k 50, top_p 0.95)", std::to_string(outside), "0", outside == 0);
  // 5 sigma over <= 50 tokens: a false alarm has probability ~3e-5.
  row("sampling", "draw freq vs CPU probs, " + std::to_string(order.size()) + " kept, " + std::to_string(draws) + " draws",
      fmt("max z %.2f", worst_z) + fmt(" chi2 %.1f", chi2), "max z <= 5", worst_z <= 5.0);
}

void benchmarks() {
  constexpr int64_t vocab = 128256;
  cuda::DeviceSampler ds(vocab, eos_ids(vocab), kRows, kMaxContext);
  std::vector<float> logits;
  for (int32_t r = 0; r < kRows; ++r) {
    const auto l = make_logits(vocab, 0xBE00 + uint64_t(r), 1);
    logits.insert(logits.end(), l.begin(), l.end());
  }
  std::vector<float> flat;
  for (int32_t r = 0; r < kRows; ++r) {
    const auto l = make_logits(vocab, 0xBF00 + uint64_t(r), 0);
    flat.insert(flat.end(), l.begin(), l.end());
  }
  DeviceArray<float> d_logits(logits), d_flat(flat);
  const std::vector<int32_t> no_context;
  struct Bench {
    const char* name;
    double temperature;
    int32_t top_k;
    double top_p;
    bool logprobs;
    bool flat;
  };
  const Bench benches[] = {{"greedy", 0.0, -1, 1.0, false, false},
                           {"greedy + 20 logprobs", 0.0, -1, 1.0, true, false},
                           {"T 0.7 top_p 0.9", 0.7, -1, 0.9, false, false},
                           {"T 1.0 top_k 50 top_p 0.9", 1.0, 50, 0.9, false, false},
                           {"T 1.0 no truncation", 1.0, -1, 1.0, false, false},
                           {"T 1.0 top_p 0.9 flat row", 1.0, -1, 0.9, false, true}};
  for (const Bench& bench : benches) {
    SamplingParams params;
    params.temperature = bench.temperature;
    params.top_k = bench.top_k;
    params.top_p = bench.top_p;
    params.logprobs = bench.logprobs;
    params.top_logprobs = bench.logprobs ? 20 : 0;
    for (int32_t n : {1, kRows}) {
      std::vector<cuda::SampleRow> rows;
      for (int32_t r = 0; r < n; ++r)
        rows.push_back({&params, std::span<const int32_t>(no_context), 0, 42, uint64_t(r)});
      std::vector<SampleOutput> out;
      float* d = bench.flat ? d_flat.get() : d_logits.get();
      const double ms = time_ms([&] { ds.sample(d, rows, out, nullptr); });
      info("sampling", std::string("sample() ") + bench.name + ", " + std::to_string(n) + " rows v128256",
           fmt("%.1f us", ms * 1e3), "-");
    }
  }
}

}  // namespace

int main() {
  return spark::gpu_check::run_main("sampling", [] {
    check_uniform01();
    check_against_cpu(151936);
    check_against_cpu(128256);
    check_distribution();
    if (!emulated()) benchmarks();  // benchmarks mean nothing on the CPU emulator
  });
}
