// response_store.h — the responses kept for `previous_response_id`: the last N (newest
// kept, oldest forgotten), each holding only its own turn and a pointer to the turn it
// continued, so a long chain of turns shares its history instead of copying it.
#pragma once
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace spark {

struct StoredResponse {
  std::shared_ptr<const StoredResponse> previous;  // null for the first turn
  nlohmann::ordered_json messages;                 // this turn's chat messages: input, then output
};

class ResponseStore {
 public:
  // Keeps `response` under `id`, forgetting the oldest entries beyond `capacity` (0 keeps
  // nothing). A forgotten turn still lives as the history of the turns that continued it.
  void put(const std::string& id, std::shared_ptr<const StoredResponse> response, size_t capacity);
  // Null when the id is unknown or forgotten.
  std::shared_ptr<const StoredResponse> get(const std::string& id) const;
  size_t size() const;

  // Every message of the conversation that ends with `last`, oldest first.
  static nlohmann::ordered_json conversation(const StoredResponse& last);

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const StoredResponse>> by_id_;
  std::deque<std::string> order_;  // oldest first
};

}  // namespace spark
