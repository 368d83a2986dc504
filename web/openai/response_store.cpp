// response_store.cpp — a bounded map of stored responses in insertion order.
#include "web/openai/response_store.h"

#include <vector>

namespace spark {

void ResponseStore::put(const std::string& id, std::shared_ptr<const StoredResponse> response, size_t capacity) {
  std::lock_guard lock(mu_);
  if (capacity == 0) return;
  if (by_id_.emplace(id, std::move(response)).second) order_.push_back(id);
  while (order_.size() > capacity) {
    by_id_.erase(order_.front());
    order_.pop_front();
  }
}

std::shared_ptr<const StoredResponse> ResponseStore::get(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

size_t ResponseStore::size() const {
  std::lock_guard lock(mu_);
  return by_id_.size();
}

nlohmann::ordered_json ResponseStore::conversation(const StoredResponse& last) {
  std::vector<const StoredResponse*> turns;
  for (const StoredResponse* t = &last; t; t = t->previous.get()) turns.push_back(t);
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (auto it = turns.rbegin(); it != turns.rend(); ++it)
    for (const auto& m : (*it)->messages) out.push_back(m);
  return out;
}

}  // namespace spark
