// bench_prompts.cpp — random length-controlled prompts and JSONL datasets.
#include "web/bench/bench_prompts.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include "engine/util/check.h"
#include "web/bench/bench_load.h"

namespace spark {

const std::vector<const char*>& bench_words() {
  // Common English words, each a single token with its leading space in the Llama 3,
  // Qwen3, gpt-oss, Gemma 3 and SmolLM2 tokenizers (checked with Hugging Face's
  // tokenizers), so that a prompt's length in words is a close estimate of its length in
  // tokens even where the server cannot count.
  static const std::vector<const char*> words = {
      "the",      "of",       "and",     "to",      "in",       "is",      "was",      "for",      "on",
      "are",      "with",     "as",      "his",     "they",     "be",      "at",       "one",      "have",
      "this",     "from",     "or",      "had",     "by",       "word",    "but",      "what",     "some",
      "we",       "can",      "out",     "other",   "were",     "all",     "there",    "when",     "up",
      "use",      "your",     "how",     "said",    "an",       "each",    "she",      "which",    "do",
      "their",    "time",     "if",      "will",    "way",      "about",   "many",     "then",     "them",
      "write",    "would",    "like",    "so",      "these",    "her",     "long",     "make",     "thing",
      "see",      "him",      "two",     "has",     "look",     "more",    "day",      "could",    "go",
      "come",     "did",      "number",  "sound",   "no",       "most",    "people",   "my",       "over",
      "know",     "water",    "than",    "call",    "first",    "who",     "may",      "down",     "side",
      "been",     "now",      "find",    "any",     "new",      "work",    "part",     "take",     "get",
      "place",    "made",     "live",    "where",   "after",    "back",    "little",   "only",     "round",
      "man",      "year",     "came",    "show",    "every",    "good",    "me",       "give",     "our",
      "under",    "name",     "very",    "through", "just",     "form",    "sentence", "great",    "think",
      "say",      "help",     "low",     "line",    "differ",   "turn",    "cause",    "much",     "mean",
      "before",   "move",     "right",   "boy",     "old",      "too",     "same",     "tell",     "does",
      "set",      "three",    "want",    "air",     "well",     "also",    "play",     "small",    "end",
      "put",      "home",     "read",    "hand",    "port",     "large",   "spell",    "add",      "even",
      "land",     "here",     "must",    "big",     "high",     "such",    "follow",   "act",      "why",
      "ask",      "men",      "change",  "went",    "light",    "kind",    "off",      "need",     "house",
      "picture",  "try",      "us",      "again",   "animal",   "point",   "mother",   "world",    "near",
      "build",    "self",     "earth",   "father",  "head",     "stand",   "own",      "page",     "should",
      "country",  "found",    "answer",  "school",  "grow",     "study",   "still",    "learn",    "plant",
      "cover",    "food",     "sun",     "four",    "between",  "state",   "keep",     "eye",      "never",
      "last",     "let",      "thought", "city",    "tree",     "cross",   "farm",     "hard",     "start",
      "might",    "story",    "saw",     "far",     "sea",      "draw",    "left",     "late",     "run",
      "while",    "press",    "close",   "night",   "real",     "life",    "few",      "north",    "open",
      "seem",     "together", "next",    "white",   "children", "begin",   "got",      "walk",     "example",
      "ease",     "paper",    "group",   "always",  "music",    "those",   "both",     "mark",     "often",
      "letter",   "until",    "mile",    "river",   "car",      "feet",    "care",     "second",   "book",
      "carry",    "took",     "science", "eat",     "room",     "friend",  "began",    "idea",     "fish",
      "mountain", "stop",     "once",    "base",    "hear",     "horse",   "cut",      "sure",     "watch",
      "color",    "face",     "wood",    "main",    "enough",   "plain",   "girl",     "usual",    "young",
      "ready",    "above",    "ever",    "red",     "list",     "though",  "feel",     "talk",     "bird",
      "soon",     "body",     "dog",     "family",  "direct",   "pose",    "leave",    "song",     "measure",
      "door",     "product",  "black",   "short",   "class",    "wind",    "question", "happen",   "complete",
      "ship",     "area",     "half",    "rock",    "order",    "fire",    "south",    "problem",  "piece",
      "told",     "knew",     "pass",    "since",   "top",      "whole",   "king",     "space",    "heard",
      "best",     "hour",     "better",  "true",    "during",   "hundred", "five",     "remember", "step",
      "early",    "hold",     "west",    "ground",  "interest", "reach",   "fast",     "verb",     "sing",
      "listen",   "six",      "table",   "travel",  "less",     "morning", "ten",      "simple",   "several",
      "vowel",    "toward",   "war",     "lay",     "against",  "pattern", "slow",     "center",   "love",
      "person",   "money",    "serve",   "appear",  "road",     "map",     "rain",     "rule",     "govern",
      "pull",     "cold",     "notice",  "voice",   "unit",     "power",   "town",     "fine",     "certain",
      "fly",      "fall",     "lead",    "cry",     "dark",     "machine", "note",     "wait",     "plan",
      "figure",   "star",     "box",     "noun",    "field",    "rest",    "correct",  "able",     "pound",
      "done",     "beauty",   "drive",   "stood",   "contain",  "front",   "teach",    "week",     "final",
      "gave",     "green",    "quick",   "develop", "ocean",    "warm",    "free",     "minute",   "strong",
      "special",  "mind",     "behind",  "clear",   "tail",     "produce", "fact",     "street",   "inch",
      "multiply", "nothing",  "course",  "stay",    "wheel",    "full",    "force",    "blue",     "object",
      "decide",   "surface",  "deep",    "moon",    "island",   "foot",    "system",   "busy",     "test",
      "record",   "boat",     "common",  "gold",    "possible", "plane",   "age",      "dry",      "wonder",
      "laugh",    "thousand", "ago",     "ran",     "check",    "game",    "shape",    "hot",      "miss",
      "brought",  "heat",     "snow",    "tire",    "bring",    "yes",     "distant",  "fill",     "east",
      "paint",    "language", "among",
  };
  return words;
}

namespace {

// Words drawn from one seeded stream, generated as far as they are needed.
class WordStream {
 public:
  explicit WordStream(uint64_t seed) : rng_(seed) {}
  // The first `n` words joined by spaces.
  std::string text(size_t n) {
    const auto& words = bench_words();
    while (ids_.size() < n) ids_.push_back(rng_.below(words.size()));
    std::string out;
    for (size_t i = 0; i < n; ++i) {
      if (i) out.push_back(' ');
      out += words[ids_[i]];
    }
    return out;
  }

 private:
  BenchRng rng_;
  std::vector<size_t> ids_;
};

struct Fitted {
  std::string text;
  long long tokens = 0;
};

// Finds the word count whose text the counter measures at `target` tokens, starting from
// one token per word. Each word adds about one token, so the search usually ends after
// one or two calls; when no word count gives the target exactly (a word of two tokens
// at the boundary), the closest count at or under the target is kept.
Fitted fit_words(const std::function<std::string(size_t)>& make_text, long long target, long long guess,
                 const TokenCounter& counter) {
  std::map<long long, long long> seen;  // word count -> tokens
  long long k = std::max<long long>(1, guess);
  for (int call = 0; call < 24; ++call) {
    if (!seen.count(k)) {
      std::optional<long long> n = counter(make_text(size_t(k)));
      if (!n) throw RuntimeError("the server's /tokenize stopped answering while prompts were built");
      seen[k] = *n;
    }
    long long tokens = seen[k];
    if (tokens == target) return {make_text(size_t(k)), tokens};
    // The nearest measured counts below and above the target bracket the answer.
    long long lo = 0, hi = -1;
    for (const auto& [words, n] : seen) {
      if (n < target) lo = std::max(lo, words);
      if (n > target && (hi < 0 || words < hi)) hi = words;
    }
    long long next = k + (target - tokens);
    if (next <= lo) next = lo + 1;
    if (hi >= 0 && next >= hi) next = hi - 1;
    if (next < 1 || next <= lo || (hi >= 0 && next >= hi) || seen.count(next)) break;
    k = next;
  }
  // Keep the longest text not over the target; else the shortest one measured.
  long long best = -1;
  for (const auto& [words, n] : seen)
    if (n <= target) best = words;
  if (best < 0) best = seen.begin()->first;
  return {make_text(size_t(best)), seen[best]};
}

uint64_t prompt_seed(uint64_t seed, uint64_t index) {
  // Distinct, well-mixed streams per prompt (index 0 is the shared prefix).
  BenchRng mix(seed ^ (0xD1B54A32D192ED03ull * (index + 1)));
  return mix.next();
}

}  // namespace

PromptSet random_prompts(size_t count, long long input_len, long long prefix_len, uint64_t seed,
                         const TokenCounter& counter) {
  SPARK_CHECK(input_len >= 1 && prefix_len >= 0, "prompt lengths validated by the caller");
  PromptSet set;
  std::optional<long long> probe = counter ? counter("the") : std::nullopt;
  set.counted = probe.has_value();
  // Tokens the server adds around any text (a BOS token, for most models).
  long long specials = set.counted ? std::max<long long>(0, *probe - 1) : 0;

  std::string prefix;
  if (prefix_len > 0) {
    WordStream words(prompt_seed(seed, 0));
    auto make = [&](size_t n) { return words.text(n); };
    if (set.counted) {
      Fitted f = fit_words(make, prefix_len, prefix_len - specials, counter);
      prefix = f.text;
      set.prefix_tokens = f.tokens;
    } else {
      prefix = make(size_t(prefix_len));
      set.prefix_tokens = prefix_len;
    }
  }
  long long target = prefix_len + input_len;
  for (size_t i = 0; i < count; ++i) {
    WordStream words(prompt_seed(seed, i + 1));
    auto make = [&](size_t n) { return prefix.empty() ? words.text(n) : prefix + " " + words.text(n); };
    BenchPrompt p;
    if (set.counted) {
      long long guess = input_len - (prefix_len > 0 ? 0 : specials);
      Fitted f = fit_words(make, target, guess, counter);
      p.text = std::move(f.text);
      p.tokens = f.tokens;
    } else {
      p.text = make(size_t(input_len));
      p.tokens = target;
    }
    set.prompts.push_back(std::move(p));
  }
  set.length_note = set.counted ? "counted with the server's /tokenize"
                                : "estimated at one token per word (the server has no /tokenize; "
                                  "special tokens not included)";
  return set;
}

PromptSet dataset_prompts(const std::string& path, size_t count, bool chat, const TokenCounter& counter) {
  std::ifstream in(path);
  if (!in) throw InputError("cannot open dataset " + path);
  std::vector<BenchPrompt> lines;
  std::string line;
  size_t line_no = 0;
  auto bad = [&](const std::string& why) { return InputError(path + ":" + std::to_string(line_no) + ": " + why); };
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw bad("not a JSON object");
    BenchPrompt p;
    if (j.contains("prompt")) {
      if (!j["prompt"].is_string() || j["prompt"].get_ref<const std::string&>().empty())
        throw bad("\"prompt\" must be a non-empty string");
      p.text = j["prompt"].get<std::string>();
    } else if (j.contains("messages")) {
      if (!j["messages"].is_array() || j["messages"].empty()) throw bad("\"messages\" must be a non-empty array");
      for (const auto& m : j["messages"])
        if (!m.is_object() || !m.contains("role")) throw bad("each message needs a \"role\"");
      if (!chat) throw bad("\"messages\" needs --endpoint chat");
      p.messages = j["messages"];
    } else {
      throw bad("expected \"prompt\" or \"messages\"");
    }
    if (j.contains("max_tokens")) {
      if (!j["max_tokens"].is_number_integer() || j["max_tokens"].get<long long>() < 1)
        throw bad("\"max_tokens\" must be a positive integer");
      p.max_tokens = j["max_tokens"].get<long long>();
    }
    lines.push_back(std::move(p));
  }
  if (lines.empty()) throw InputError("dataset " + path + " has no prompts");

  PromptSet set;
  size_t n = count == 0 ? lines.size() : count;
  // Count each distinct line once; chat message lists are left to the server's usage.
  bool counted_any = false, counter_works = bool(counter);
  for (BenchPrompt& p : lines) {
    if (p.text.empty() || !counter_works) continue;
    if (auto t = counter(p.text)) {
      p.tokens = *t;
      counted_any = true;
    } else {
      counter_works = false;
    }
  }
  for (size_t i = 0; i < n; ++i) set.prompts.push_back(lines[i % lines.size()]);
  set.counted = counted_any;
  set.length_note = counted_any ? "counted with the server's /tokenize where the server reports no usage"
                                : "taken from the server's usage (no /tokenize)";
  return set;
}

}  // namespace spark
