// sampling.cu — DeviceSampler: packs each step's per-row parameters and lists, runs the
// sampling kernel (sampling_kernel.cu) and reads back token ids and logprobs.
#include "engine/backend/cuda/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/sampling_rows.h"

namespace spark::cuda {

using sampling::IdValue;
using sampling::RowParams;
using sampling::RowResult;

namespace {

// A model's EOS list is a handful of ids; the bound sizes the masked-ids list.
constexpr size_t kMaxEosIds = 64;

size_t align_up(size_t n) { return (n + 255) & ~size_t(255); }

// Capacities of one step's lists, in entries, for the largest step.
struct Capacity {
  size_t rows, bias, penalties, masks;
  Capacity(int64_t vocab_size, int32_t max_rows, int64_t max_context) {
    rows = size_t(max_rows);
    bias = rows * kMaxLogitBias;
    // A penalised row lists each distinct context id once.
    penalties = rows * size_t(std::max<int64_t>(1, std::min(max_context, vocab_size)));
    masks = rows * (kMaxStopTokenIds + kMaxEosIds);
  }
  size_t staging_bytes() const {
    return align_up(rows * sizeof(RowParams)) + align_up(bias * sizeof(IdValue)) +
           align_up(penalties * sizeof(IdValue)) + align_up(masks * sizeof(int32_t));
  }
  size_t result_bytes() const { return align_up(rows * sizeof(RowResult)); }
};

}  // namespace

struct DeviceSampler::State {
  int64_t vocab = 0;
  std::vector<int32_t> eos;
  int32_t max_rows = 0;
  int64_t max_context = 0;
  size_t staging_bytes = 0, result_bytes = 0;
  char* device_staging = nullptr;
  char* host_staging = nullptr;  // pinned
  RowResult* device_results = nullptr;
  RowResult* host_results = nullptr;  // pinned
  // This step's lists, built here and copied into the pinned buffer in one piece.
  std::vector<RowParams> params;
  std::vector<IdValue> bias, penalties;
  std::vector<int32_t> masks;
  // Vocab-sized scratch for the rare penalised rows, reset sparsely after each.
  std::vector<uint8_t> seen;
  std::vector<int32_t> counts;
  std::vector<int32_t> distinct;
};

size_t DeviceSampler::workspace_bytes(int64_t vocab_size, int32_t max_rows, int64_t max_context) {
  const Capacity cap(vocab_size, max_rows, max_context);
  return cap.staging_bytes() + cap.result_bytes();
}

DeviceSampler::DeviceSampler(int64_t vocab_size, std::vector<int32_t> eos_token_ids, int32_t max_rows,
                             int64_t max_context)
    : state_(std::make_unique<State>()) {
  SPARK_CHECK(vocab_size > 0 && vocab_size <= INT32_MAX, "vocab_size out of range");
  SPARK_CHECK(max_rows > 0 && max_context > 0, "DeviceSampler needs max_rows and max_context");
  State& s = *state_;
  s.vocab = vocab_size;
  for (int32_t id : eos_token_ids)  // the CPU skips EOS ids outside the vocabulary too
    if (id >= 0 && id < vocab_size && std::find(s.eos.begin(), s.eos.end(), id) == s.eos.end()) s.eos.push_back(id);
  SPARK_CHECK(s.eos.size() <= kMaxEosIds, "more EOS ids than DeviceSampler provides for");
  s.max_rows = max_rows;
  s.max_context = max_context;
  const Capacity cap(vocab_size, max_rows, max_context);
  s.staging_bytes = cap.staging_bytes();
  s.result_bytes = cap.result_bytes();
  CUDA_CHECK(cudaMalloc(&s.device_staging, s.staging_bytes));
  CUDA_CHECK(cudaMalloc(&s.device_results, s.result_bytes));
  CUDA_CHECK(cudaMallocHost(&s.host_staging, s.staging_bytes));
  CUDA_CHECK(cudaMallocHost(&s.host_results, s.result_bytes));
  s.params.reserve(cap.rows);
  s.seen.assign(size_t(vocab_size), 0);
  s.counts.assign(size_t(vocab_size), 0);
}

DeviceSampler::~DeviceSampler() {
  // No throwing from a destructor: a failed free at teardown has nothing left to protect.
  State& s = *state_;
  if (s.device_staging) cudaFree(s.device_staging);
  if (s.device_results) cudaFree(s.device_results);
  if (s.host_staging) cudaFreeHost(s.host_staging);
  if (s.host_results) cudaFreeHost(s.host_results);
}

void DeviceSampler::sample(float* logits, const std::vector<SampleRow>& rows, std::vector<SampleOutput>& out,
                           cudaStream_t stream) {
  State& s = *state_;
  const int32_t n = static_cast<int32_t>(rows.size());
  out.resize(rows.size());
  if (n == 0) return;
  SPARK_CHECK(n <= s.max_rows, "more logits rows than DeviceSampler was sized for");
  SPARK_CHECK(logits != nullptr, "no logits");
  s.params.clear();
  s.bias.clear();
  s.penalties.clear();
  s.masks.clear();

  for (const SampleRow& row : rows) {
    SPARK_CHECK(row.params != nullptr, "sample row without params");
    const SamplingParams& p = *row.params;
    const auto context_size = static_cast<int64_t>(row.context.size());
    SPARK_CHECK(row.num_prompt_tokens >= 0 && row.num_prompt_tokens <= context_size,
                "num_prompt_tokens past the context");
    RowParams rp;
    rp.seed = row.seed;
    rp.counter = row.counter;
    if (p.greedy()) {
      rp.flags |= sampling::kGreedy;
    } else {
      SPARK_CHECK(p.temperature > 0.0, "temperature not validated");
      const double inv_t = 1.0 / p.temperature;
      rp.inv_t_hi = static_cast<float>(inv_t);
      rp.inv_t_lo = static_cast<float>(inv_t - static_cast<double>(rp.inv_t_hi));
      SPARK_CHECK(std::isfinite(rp.inv_t_hi), "temperature too small for f32");
      if (p.min_p > 0) {
        float f = static_cast<float>(p.min_p);
        if (static_cast<double>(f) < p.min_p) f = std::nextafter(f, INFINITY);
        rp.min_p = f;
      }
      if (p.top_k > 0 && p.top_k < s.vocab) rp.top_k = p.top_k;
      if (p.top_p < 1.0) {
        rp.flags |= sampling::kTopP;
        rp.top_p = p.top_p;
      }
    }
    if (p.logprobs) {
      rp.flags |= sampling::kLogprobs;
      SPARK_CHECK(p.top_logprobs >= 0 && p.top_logprobs <= kMaxTopLogprobs, "top_logprobs not validated");
      rp.num_top_logprobs = static_cast<int32_t>(std::min<int64_t>(p.top_logprobs, s.vocab));
    }

    SPARK_CHECK(p.logit_bias.size() <= kMaxLogitBias, "logit_bias not validated");
    rp.bias_begin = static_cast<int32_t>(s.bias.size());
    for (const auto& [id, value] : p.logit_bias) {
      SPARK_CHECK(id >= 0 && id < s.vocab, "logit_bias token id not validated");
      s.bias.push_back({id, value});
    }
    rp.bias_count = static_cast<int32_t>(s.bias.size()) - rp.bias_begin;

    rp.mask_begin = static_cast<int32_t>(s.masks.size());
    if (context_size - row.num_prompt_tokens < p.min_tokens) {
      SPARK_CHECK(p.stop_token_ids.size() <= kMaxStopTokenIds, "stop_token_ids not validated");
      if (!p.ignore_eos) s.masks.insert(s.masks.end(), s.eos.begin(), s.eos.end());
      for (int32_t id : p.stop_token_ids) {
        SPARK_CHECK(id >= 0 && id < s.vocab, "stop_token_ids not validated");
        s.masks.push_back(id);
      }
    }
    rp.mask_count = static_cast<int32_t>(s.masks.size()) - rp.mask_begin;

    // Penalties: one (id, amount) entry per distinct id, so the kernel applies each once.
    rp.penalty_begin = static_cast<int32_t>(s.penalties.size());
    const bool repetition = p.repetition_penalty != 1.0;
    const bool counted = p.presence_penalty != 0.0 || p.frequency_penalty != 0.0;
    if (repetition || counted) {
      SPARK_CHECK(context_size <= s.max_context, "context longer than DeviceSampler was sized for");
      for (int32_t id : row.context) SPARK_CHECK(id >= 0 && id < s.vocab, "context token id outside the vocabulary");
      if (repetition) {
        rp.flags |= sampling::kRepetition;
        rp.repetition = static_cast<float>(p.repetition_penalty);
      }
      const auto output = row.context.subspan(static_cast<size_t>(row.num_prompt_tokens));
      const auto listed = repetition ? row.context : output;
      s.distinct.clear();
      for (int32_t id : listed)
        if (!s.seen[size_t(id)]) {
          s.seen[size_t(id)] = 1;
          s.distinct.push_back(id);
        }
      if (counted)
        for (int32_t id : output) ++s.counts[size_t(id)];
      for (int32_t id : s.distinct) {
        const int32_t c = s.counts[size_t(id)];
        // The CPU's float(frequency * count + presence), applied to output ids only.
        const float amount = c > 0 ? static_cast<float>(p.frequency_penalty * c + p.presence_penalty) : 0.0f;
        s.penalties.push_back({id, amount});
        s.seen[size_t(id)] = 0;
        s.counts[size_t(id)] = 0;
      }
    }
    rp.penalty_count = static_cast<int32_t>(s.penalties.size()) - rp.penalty_begin;
    s.params.push_back(rp);
  }

  // One upload: params, bias, penalties, masks, each section 256-byte aligned.
  const Capacity cap(s.vocab, s.max_rows, s.max_context);
  SPARK_CHECK(s.bias.size() <= cap.bias && s.penalties.size() <= cap.penalties && s.masks.size() <= cap.masks,
              "sampling lists past their capacity");
  size_t offset = 0;
  auto stage = [&](const void* src, size_t bytes) {
    const size_t at = offset;
    if (bytes) std::memcpy(s.host_staging + at, src, bytes);
    offset = align_up(at + bytes);
    return at;
  };
  const size_t params_at = stage(s.params.data(), s.params.size() * sizeof(RowParams));
  const size_t bias_at = stage(s.bias.data(), s.bias.size() * sizeof(IdValue));
  const size_t penalties_at = stage(s.penalties.data(), s.penalties.size() * sizeof(IdValue));
  const size_t masks_at = stage(s.masks.data(), s.masks.size() * sizeof(int32_t));
  SPARK_CHECK(offset <= s.staging_bytes, "staging buffer overflow");
  CUDA_CHECK(cudaMemcpyAsync(s.device_staging, s.host_staging, offset, cudaMemcpyHostToDevice, stream));

  sampling::KernelArgs args;
  args.logits = logits;
  args.vocab = static_cast<int32_t>(s.vocab);
  args.params = reinterpret_cast<const RowParams*>(s.device_staging + params_at);
  args.bias = reinterpret_cast<const IdValue*>(s.device_staging + bias_at);
  args.penalties = reinterpret_cast<const IdValue*>(s.device_staging + penalties_at);
  args.masks = reinterpret_cast<const int32_t*>(s.device_staging + masks_at);
  args.results = s.device_results;
  sampling::launch_sample_rows(args, n, stream);

  CUDA_CHECK(
      cudaMemcpyAsync(s.host_results, s.device_results, size_t(n) * sizeof(RowResult), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));

  for (int32_t r = 0; r < n; ++r) {
    const RowResult& res = s.host_results[r];
    SampleOutput& o = out[size_t(r)];
    SPARK_CHECK(res.token >= 0 && res.token < s.vocab, "device sampler returned a token outside the vocabulary");
    o.token = res.token;
    o.logprob = 0.0f;
    o.top_logprobs.clear();
    if (s.params[size_t(r)].flags & sampling::kLogprobs) {
      o.logprob = res.logprob;
      for (int32_t i = 0; i < res.num_top; ++i) o.top_logprobs.emplace_back(res.top_ids[i], res.top_logprobs[i]);
    }
  }
}

}  // namespace spark::cuda
