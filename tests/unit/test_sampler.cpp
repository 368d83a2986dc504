// test_sampler.cpp — sampled frequencies vs softmax with fixed seeds, truncation masks,
// penalties, logit bias, logprobs, seed reproducibility and parameter validation.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/core/sampler.h"
#include "engine/util/check.h"

using namespace spark;

namespace {

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  double top = *std::max_element(logits.begin(), logits.end()), sum = 0;
  std::vector<double> p(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp((logits[i] - top) / temperature);
  for (auto& x : p) x /= sum;
  return p;
}

// Draws n tokens with counters 0..n-1 and returns how often each id came up.
std::vector<int64_t> histogram(Sampler& s, const std::vector<float>& logits, const SamplingParams& params, int n,
                               uint64_t seed = 42) {
  std::vector<int64_t> counts(logits.size(), 0);
  const std::vector<int32_t> context = {0};
  for (int i = 0; i < n; ++i) ++counts[s.sample(logits.data(), params, context, 1, seed, i).token];
  return counts;
}

// Pearson's chi-square statistic of observed counts against expected probabilities
// (ids with probability 0 must never appear).
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probs, int n) {
  double chi = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] == 0) {
      CHECK(counts[i] == 0);
      continue;
    }
    double e = probs[i] * n;
    chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

const std::vector<float> kLogits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
// Upper 0.1% points of chi-square: a correct sampler fails these 1 time in 1000 seeds,
// and the seeds are fixed.
constexpr double kChi2Df4 = 18.47, kChi2Df2 = 13.82, kChi2Df1 = 10.83;

}  // namespace

TEST_CASE("sampler: uniform01 is uniform and a pure function of (seed, counter)") {
  double sum = 0;
  int below_quarter = 0;
  for (int i = 0; i < 40000; ++i) {
    double u = uniform01(7, i);
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    sum += u;
    below_quarter += u < 0.25;
  }
  CHECK(sum / 40000 == doctest::Approx(0.5).epsilon(0.01));
  CHECK(below_quarter / 40000.0 == doctest::Approx(0.25).epsilon(0.03));
  CHECK(uniform01(7, 3) == uniform01(7, 3));
  CHECK(uniform01(7, 3) != uniform01(8, 3));
}

TEST_CASE("sampler: greedy takes the argmax, the lowest id on ties") {
  Sampler s(5, {});
  SamplingParams p;
  p.temperature = 0;
  const std::vector<int32_t> ctx = {0};
  CHECK(s.sample(kLogits.data(), p, ctx, 1, 1, 0).token == 1);
  const std::vector<float> tie = {0.0f, 3.0f, 1.0f, 3.0f, 2.0f};
  CHECK(s.sample(tie.data(), p, ctx, 1, 1, 0).token == 1);
}

TEST_CASE("sampler: frequencies follow the softmax at temperature 1 and 0.5") {
  Sampler s(5, {});
  const int n = 20000;
  SamplingParams p;
  CHECK(chi_square(histogram(s, kLogits, p, n), softmax(kLogits, 1.0), n) < kChi2Df4);
  p.temperature = 0.5;
  CHECK(chi_square(histogram(s, kLogits, p, n, 9), softmax(kLogits, 0.5), n) < kChi2Df4);
  // The test can fail: the temperature-1 distribution is far from the 0.5 one.
  CHECK(chi_square(histogram(s, kLogits, p, n, 9), softmax(kLogits, 1.0), n) > 100);
}

TEST_CASE("sampler: top_k keeps the k most likely, renormalized") {
  Sampler s(5, {});
  SamplingParams p;
  p.top_k = 2;  // ids 1 (2.0) and 4 (1.5)
  const int n = 20000;
  auto probs = softmax(kLogits, 1.0);
  std::vector<double> expect(5, 0.0);
  expect[1] = probs[1] / (probs[1] + probs[4]);
  expect[4] = probs[4] / (probs[1] + probs[4]);
  CHECK(chi_square(histogram(s, kLogits, p, n), expect, n) < kChi2Df1);
}

TEST_CASE("sampler: top_p keeps the smallest most-likely set reaching p") {
  Sampler s(4, {});
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams p;
  p.top_p = 0.75;  // 0.5 < 0.75 <= 0.5 + 0.3: ids 0 and 1
  const int n = 20000;
  CHECK(chi_square(histogram(s, logits, p, n), {0.625, 0.375, 0, 0}, n) < kChi2Df1);
  p.top_p = 0.9;  // 0.8 < 0.9: ids 0, 1, 2
  CHECK(chi_square(histogram(s, logits, p, n), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, n) < kChi2Df2);
}

TEST_CASE("sampler: min_p drops tokens below min_p times the top probability") {
  Sampler s(4, {});
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams p;
  p.min_p = 0.2;  // threshold 0.1: id 3 (0.05) goes
  const int n = 20000;
  CHECK(chi_square(histogram(s, logits, p, n), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, n) < kChi2Df2);
  p.min_p = 0.7;  // threshold 0.35: only id 0
  auto counts = histogram(s, logits, p, 500);
  CHECK(counts[0] == 500);
}

TEST_CASE("sampler: logit_bias shifts logits before greedy and logprobs") {
  Sampler s(5, {});
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = true;
  p.logit_bias = {{3, 5.0f}};  // -1 + 5 = 4: the new maximum
  const std::vector<int32_t> ctx = {0};
  SampleOutput out = s.sample(kLogits.data(), p, ctx, 1, 1, 0);
  CHECK(out.token == 3);
  std::vector<float> biased = kLogits;
  biased[3] += 5.0f;
  CHECK(out.logprob == doctest::Approx(std::log(softmax(biased, 1.0)[3])).epsilon(1e-5));
  p.logit_bias = {{1, -100.0f}, {4, -100.0f}};
  CHECK(s.sample(kLogits.data(), p, ctx, 1, 1, 0).token == 0);
}

TEST_CASE("sampler: repetition, presence and frequency penalties") {
  Sampler s(5, {});
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = true;
  p.top_logprobs = 5;
  // Context: prompt [1], output [4, 4, 3]. Logits 1.0 2.0 0.5 -1.0 1.5.
  const std::vector<int32_t> ctx = {1, 4, 4, 3};
  auto adjusted = [&](const SamplingParams& params) {
    SampleOutput out = s.sample(kLogits.data(), params, ctx, 1, 1, 0);
    std::map<int32_t, double> lp(out.top_logprobs.begin(), out.top_logprobs.end());
    std::vector<float> back(5);
    for (int i = 0; i < 5; ++i) back[i] = static_cast<float>(lp[i] - lp[0]) + kLogits[0];  // token 0 untouched
    return back;
  };
  p.repetition_penalty = 2.0;  // prompt and output: 2.0 -> 1.0, 1.5 -> 0.75, -1 -> -2
  auto r = adjusted(p);
  CHECK(r[1] == doctest::Approx(1.0));
  CHECK(r[4] == doctest::Approx(0.75));
  CHECK(r[3] == doctest::Approx(-2.0));
  CHECK(r[2] == doctest::Approx(0.5));
  p.repetition_penalty = 1.0;
  p.presence_penalty = 0.5;
  p.frequency_penalty = 0.25;  // output only: id 4 twice, id 3 once; prompt id 1 untouched
  auto f = adjusted(p);
  CHECK(f[4] == doctest::Approx(1.5 - 0.5 - 0.5));
  CHECK(f[3] == doctest::Approx(-1.0 - 0.5 - 0.25));
  CHECK(f[1] == doctest::Approx(2.0));
}

TEST_CASE("sampler: min_tokens masks EOS and stop tokens until reached") {
  Sampler s(5, {1});
  SamplingParams p;
  p.temperature = 0;
  p.min_tokens = 2;
  p.stop_token_ids = {4};
  const std::vector<int32_t> one_output = {0, 2};  // prompt [0], output [2]
  CHECK(s.sample(kLogits.data(), p, one_output, 1, 1, 0).token == 0);
  const std::vector<int32_t> two_outputs = {0, 2, 2};
  CHECK(s.sample(kLogits.data(), p, two_outputs, 1, 1, 0).token == 1);
}

TEST_CASE("sampler: logprobs and top_logprobs come from the adjusted, untempered distribution") {
  Sampler s(5, {});
  SamplingParams p;
  p.temperature = 0.7;
  p.top_k = 2;
  p.logprobs = true;
  p.top_logprobs = 3;
  const std::vector<int32_t> ctx = {0};
  SampleOutput out = s.sample(kLogits.data(), p, ctx, 1, 3, 5);
  auto probs = softmax(kLogits, 1.0);
  CHECK(out.logprob == doctest::Approx(std::log(probs[out.token])).epsilon(1e-5));
  REQUIRE(out.top_logprobs.size() == 3);
  CHECK(out.top_logprobs[0].first == 1);
  CHECK(out.top_logprobs[1].first == 4);
  CHECK(out.top_logprobs[2].first == 0);
  CHECK(out.top_logprobs[2].second == doctest::Approx(std::log(probs[0])).epsilon(1e-5));
}

TEST_CASE("sampler: the same seed gives the same tokens whatever was sampled in between") {
  Sampler s(5, {});
  SamplingParams p;
  p.temperature = 1.0;
  const std::vector<int32_t> ctx = {0};
  std::vector<int32_t> alone, interleaved;
  for (int i = 0; i < 64; ++i) alone.push_back(s.sample(kLogits.data(), p, ctx, 1, 1234, i).token);
  SamplingParams other;
  other.temperature = 0.3;
  other.top_p = 0.5;
  other.repetition_penalty = 1.3;
  for (int i = 0; i < 64; ++i) {
    s.sample(kLogits.data(), other, ctx, 1, 99, i);  // another row of the same batch
    interleaved.push_back(s.sample(kLogits.data(), p, ctx, 1, 1234, i).token);
  }
  CHECK(alone == interleaved);
  std::vector<int32_t> other_seed;
  for (int i = 0; i < 64; ++i) other_seed.push_back(s.sample(kLogits.data(), p, ctx, 1, 1235, i).token);
  CHECK(alone != other_seed);
  // Through a Sequence: the counter is the index of the output token being sampled.
  Sequence seq(1, {0}, p);
  seq.seed = 1234;
  for (int i = 0; i < 5; ++i) {
    int32_t t = s.sample(kLogits.data(), seq).token;
    CHECK(t == alone[i]);
    seq.append_token(t);
  }
}

TEST_CASE("sampling params: validation names the parameter") {
  auto bad = [](auto mutate, const char* name) {
    SamplingParams p;
    mutate(p);
    CHECK_THROWS_WITH_AS(p.validate(100), doctest::Contains(name), InputError);
  };
  bad([](SamplingParams& p) { p.temperature = -1; }, "'temperature'");
  bad([](SamplingParams& p) { p.temperature = std::nan(""); }, "'temperature'");
  bad([](SamplingParams& p) { p.temperature = INFINITY; }, "'temperature'");
  bad([](SamplingParams& p) { p.top_k = -2; }, "'top_k'");
  bad([](SamplingParams& p) { p.top_p = 0; }, "'top_p'");
  bad([](SamplingParams& p) { p.top_p = 1.5; }, "'top_p'");
  bad([](SamplingParams& p) { p.min_p = -0.1; }, "'min_p'");
  bad([](SamplingParams& p) { p.repetition_penalty = 0; }, "'repetition_penalty'");
  bad([](SamplingParams& p) { p.presence_penalty = 3; }, "'presence_penalty'");
  bad([](SamplingParams& p) { p.frequency_penalty = -2.5; }, "'frequency_penalty'");
  bad([](SamplingParams& p) { p.logit_bias = {{100, 1.0f}}; }, "'logit_bias'");
  bad([](SamplingParams& p) { p.logit_bias = {{5, 101.0f}}; }, "'logit_bias'");
  bad([](SamplingParams& p) { p.logprobs = true; p.top_logprobs = 21; }, "'top_logprobs'");
  bad([](SamplingParams& p) { p.top_logprobs = 2; }, "'top_logprobs'");
  bad([](SamplingParams& p) { p.max_tokens = 0; }, "'max_tokens'");
  bad([](SamplingParams& p) { p.max_tokens = 3; p.min_tokens = 4; }, "'min_tokens'");
  bad([](SamplingParams& p) { p.stop = {""}; }, "'stop'");
  bad([](SamplingParams& p) { p.stop.assign(10000, "x"); }, "'stop'");
  bad([](SamplingParams& p) { p.stop_token_ids = {-1}; }, "'stop_token_ids'");
  SamplingParams ok;
  ok.temperature = 0;
  ok.top_k = 0;
  ok.logprobs = true;
  ok.top_logprobs = 20;
  ok.stop = {"\n\n"};
  CHECK_NOTHROW(ok.validate(100));
}
