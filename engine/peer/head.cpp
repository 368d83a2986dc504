// head.cpp — pairing, heartbeats, loss detection and the head's data path.
#include "engine/peer/head.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "engine/peer/frame.h"
#include "engine/peer/wire.h"
#include "engine/util/log.h"

namespace spark {

namespace {

constexpr size_t kTimelineLength = 256;
constexpr int kPings = 5;
constexpr size_t kLinkTestFloats = 4 << 20;  // 16 MiB: long enough to see the bandwidth
constexpr double kFirstFrameSeconds = 5;     // a connection must say who it is this fast

double heartbeat_interval(const PeerConfig& c) { return std::clamp(c.timeout_s / 4, 0.05, 1.0); }

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

}  // namespace

int64_t wall_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct PeerHead::Session {
  uint64_t id = 0;
  std::string worker;
  Socket control, data;
  std::unique_ptr<Link> link;
  std::atomic<bool> alive{true};
  std::mutex why_mu;
  std::string why;
  std::thread watcher;

  void check() {
    if (alive) return;
    std::lock_guard lock(why_mu);
    throw PeerLost("the peer worker at " + worker + " was lost: " + why);
  }
};

PeerHead::PeerHead(const PeerConfig& config, PeerIdentity identity, Welcome limits)
    : config_(config), identity_(std::move(identity)), limits_(std::move(limits)) {
  endpoint_ = parse_endpoint(config_.head_addr, "peer.head_addr");
  status_.reason = "waiting for the peer worker to connect to " + config_.head_addr;
}

PeerHead::~PeerHead() { stop(); }

void PeerHead::start() {
  listener_ = listen_on(endpoint_);
  log_info("peer: head listening on ", endpoint_.str(), " for the worker (", config_.transport, " data path)");
  thread_ = std::thread([this] { run(); });
}

void PeerHead::stop() {
  if (stopping_.exchange(true)) return;
  if (thread_.joinable()) thread_.join();
  std::shared_ptr<Session> s;
  {
    std::lock_guard lock(mu_);
    s = session_;
  }
  if (s) lose(*s, "the head is shutting down");
  std::vector<std::shared_ptr<Session>> ended;
  {
    std::lock_guard lock(mu_);
    ended.swap(ended_);
    if (session_) ended.push_back(session_);
    session_.reset();
  }
  for (auto& e : ended)
    if (e->watcher.joinable()) e->watcher.join();
}

// ---- the accept thread -----------------------------------------------------------

void PeerHead::run() {
  while (!stopping_) {
    Socket s = accept_next(listener_, 100);
    if (s.valid()) on_connection(std::move(s));
    std::vector<std::shared_ptr<Session>> ended;
    {
      std::lock_guard lock(mu_);
      ended.swap(ended_);
    }
    for (auto& e : ended)
      if (e->watcher.joinable()) e->watcher.join();
  }
}

void PeerHead::refuse(const Socket& s, const std::string& reason) const {
  try {
    write_frame(s, FrameType::REFUSE, encode_text(reason), steady_after(1));
  } catch (const std::exception&) {
    // The refused side may already be gone; the refusal is logged here anyway.
  }
}

void PeerHead::on_connection(Socket s) {
  const std::string from = s.remote();
  try {
    Frame f = read_frame(s, kMaxControlPayload, steady_after(std::min(kFirstFrameSeconds, config_.timeout_s)));
    switch (f.type) {
      case FrameType::HELLO: {
        const PeerIdentity worker = decode_identity(f.payload);
        pair(std::move(s), worker);
        return;
      }
      case FrameType::PROBE: write_frame(s, FrameType::PROBE_REPLY, encode_text(probe_text()), steady_after(1)); return;
      default:
        throw InputError("a connection must start with HELLO or PROBE, not " + std::string(frame_type_name(f.type)));
    }
  } catch (const std::exception& e) {
    // Tell the other end why (a sparkd of another protocol version reads at least the
    // header's version, and names both in its own message), then drop it.
    refuse(s, e.what());
    log_warn("peer: dropped a connection from ", from.empty() ? "?" : from, ": ", e.what());
  }
}

void PeerHead::pair(Socket control, const PeerIdentity& worker) {
  const std::string from = control.remote();
  auto mismatches = identity_mismatches(identity_, worker);
  if (!mismatches.empty()) {
    std::string reason;
    for (const auto& m : mismatches) reason += (reason.empty() ? "" : "; ") + m;
    refuse(control, reason);
    log_error("peer: refused the worker at ", from, ": ", reason);
    std::lock_guard lock(mu_);
    if (!session_) {
      status_.state = "refused";
      status_.worker = from;
      status_.reason = "refused the worker at " + from + ": " + reason;
    }
    return;
  }
  {
    std::lock_guard lock(mu_);
    if (session_) {
      refuse(control, "busy: this head is already paired with the worker at " + session_->worker);
      log_warn("peer: refused a second worker at ", from, " (paired with ", session_->worker, ")");
      return;
    }
  }

  auto s = std::make_shared<Session>();
  std::random_device entropy;
  s->id = std::uniform_int_distribution<uint64_t>(1, UINT64_MAX)(entropy);
  s->worker = from;
  s->control = std::move(control);
  Welcome w = limits_;
  w.session = s->id;
  w.heartbeat_s = heartbeat_interval(config_);
  w.timeout_s = config_.timeout_s;
  if (config_.transport == "nccl") w.nccl_unique_id = nccl_unique_id();
  const SteadyTime deadline = steady_after(config_.timeout_s);
  try {
    write_frame(s->control, FrameType::WELCOME, encode_welcome(w), deadline);
    // The worker opens the data connection next; anything else arriving meanwhile waits.
    while (!s->data.valid()) {
      if (std::chrono::steady_clock::now() > deadline) throw PeerLost("the worker did not open the data connection in time");
      Socket d = accept_next(listener_, 100);
      if (!d.valid()) continue;
      Frame f = read_frame(d, kMaxControlPayload, deadline);
      WireReader r(f.payload);
      if (f.type == FrameType::DATA_HELLO && r.u64("session") == s->id) s->data = std::move(d);
    }
    s->link = config_.transport == "nccl" ? make_nccl_link(config_, 0, w.nccl_unique_id) : make_tcp_link(s->data);
    expect_frame(s->control, FrameType::READY, kMaxControlPayload, deadline);

    // Latency on the control channel, then bandwidth of the data path itself.
    double best_rtt = 1e9;
    for (int i = 0; i < kPings; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      write_frame(s->control, FrameType::PING, {}, deadline);
      expect_frame(s->control, FrameType::PONG, kMaxControlPayload, deadline);
      best_rtt = std::min(best_rtt, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::vector<float> bulk(kLinkTestFloats, 1.0f);
    WireWriter count;
    count.u64(bulk.size());
    auto t0 = std::chrono::steady_clock::now();
    write_frame(s->data, FrameType::LINK_TEST, count.bytes(), deadline);
    s->link->send(bulk.data(), bulk.size(), [deadline] {
      if (std::chrono::steady_clock::now() > deadline) throw PeerLost("the link test did not finish in time");
    });
    expect_frame(s->data, FrameType::LINK_TEST_ACK, kMaxControlPayload, deadline);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    std::lock_guard lock(mu_);
    status_.state = "up";
    status_.worker = from;
    status_.reason.clear();
    status_.link = s->link->describe();
    status_.rtt_ms = best_rtt;
    status_.link_bytes_per_s = double(bulk.size() * sizeof(float)) / std::max(secs, 1e-9);
    ++status_.pairings;
    session_ = s;
    s->watcher = std::thread([this, s] { watch(s); });
    log_info("peer: paired with the worker at ", from, " (", status_.link, ", rtt ", best_rtt, " ms, ",
             status_.link_bytes_per_s / 1e9, " GB/s measured)");
  } catch (const std::exception& e) {
    if (s->link) s->link->abort();
    log_warn("peer: pairing with the worker at ", from, " failed: ", e.what());
    std::lock_guard lock(mu_);
    status_.state = "down";
    status_.worker = from;
    status_.reason = "pairing with the worker at " + from + " failed: " + e.what();
  }
}

// Reads the worker's heartbeats and sends ours; declares the worker lost when the
// connection breaks or nothing arrives for peer.timeout_s.
void PeerHead::watch(std::shared_ptr<Session> s) {
  const double hb = heartbeat_interval(config_);
  auto last_seen = std::chrono::steady_clock::now(), last_sent = last_seen;
  auto tick = [&] {
    s->check();
    if (stopping_) throw PeerLost("the head is shutting down");
    auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last_seen).count() > config_.timeout_s)
      throw PeerLost("no heartbeat for " + seconds_text(config_.timeout_s) + " (peer.timeout_s)");
    if (std::chrono::duration<double>(now - last_sent).count() >= hb) {
      last_sent = now;
      write_frame(s->control, FrameType::HEARTBEAT, {}, steady_after(config_.timeout_s));
    }
  };
  try {
    for (;;) {
      Frame f = read_frame(s->control, kMaxControlPayload, kNoDeadline, tick);
      if (f.type != FrameType::HEARTBEAT)
        throw InputError("unexpected " + std::string(frame_type_name(f.type)) + " on the control channel");
      last_seen = std::chrono::steady_clock::now();
    }
  } catch (const std::exception& e) {
    lose(*s, e.what());
  }
}

void PeerHead::lose(Session& s, const std::string& why) {
  {
    std::lock_guard lock(s.why_mu);
    if (!s.alive) return;
    s.why = why;
    s.alive = false;
  }
  s.control.shutdown();
  s.data.shutdown();
  if (s.link) s.link->abort();
  std::lock_guard lock(mu_);
  if (session_.get() == &s) {
    ended_.push_back(session_);
    session_.reset();
    status_.state = "down";
    status_.reason = "the peer worker at " + s.worker + " was lost: " + why + "; waiting for it to reconnect to " +
                     config_.head_addr;
  }
  log_error("peer: the worker at ", s.worker, " was lost: ", why);
}

// ---- what the engine and the dashboard call -------------------------------------------

std::string PeerHead::problem() const {
  std::lock_guard lock(mu_);
  return session_ && session_->alive ? "" : status_.reason;
}

uint64_t PeerHead::session() const {
  std::lock_guard lock(mu_);
  return session_ && session_->alive ? session_->id : 0;
}

std::shared_ptr<PeerHead::Session> PeerHead::current(uint64_t expected) const {
  std::shared_ptr<Session> s;
  {
    std::lock_guard lock(mu_);
    s = session_;
  }
  if (!s || s->id != expected) throw PeerLost("the peer worker changed or left: " + problem());
  return s;
}

void PeerHead::send(uint64_t session, const MicroBatchPlan& plan, const StageHidden& hidden,
                    int64_t head_start_us, int64_t head_end_us) {
  auto s = current(session);
  const WaitCheck check = [&s] { s->check(); };
  try {
    auto bytes = encode_plan(plan);
    write_frame(s->data, FrameType::MICRO_BATCH, bytes, kNoDeadline, check);
    size_t hidden_bytes = hidden.host.size_bytes();
    if (hidden.device.data) {
      s->link->send_device(hidden.device, check);
      hidden_bytes = hidden.device.bytes();
    } else {
      s->link->send(hidden.host.data(), hidden.host.size(), check);
    }
    std::lock_guard lock(mu_);
    status_.tx_bytes += bytes.size() + hidden_bytes;
    status_.hidden_bytes += hidden_bytes;
    status_.hidden_tokens += uint64_t(plan.batch.num_tokens());
    timeline_.push_back({plan.id, plan.batch.num_tokens(), head_start_us, head_end_us, 0, 0});
    if (timeline_.size() > kTimelineLength) timeline_.pop_front();
  } catch (const PeerLost& e) {
    lose(*s, e.what());
    s->check();
    throw;
  }
}

StepResult PeerHead::receive(uint64_t plan_id, size_t rows, size_t hidden_values) {
  auto s = current(session());
  try {
    const ResultShape shape{rows, hidden_values, limits_.vocab_size};
    Frame f = read_frame(s->data, shape.max_payload(), kNoDeadline, [&s] { s->check(); });
    if (f.type != FrameType::STEP_RESULT)
      throw InputError("the worker sent " + std::string(frame_type_name(f.type)) + " where a step result was expected");
    StepResult r = decode_result(f.payload, shape);
    if (r.id != plan_id)
      throw InputError("the worker answered micro-batch " + std::to_string(r.id) + " where " + std::to_string(plan_id) +
                       " was next");
    std::lock_guard lock(mu_);
    status_.rx_bytes += f.payload.size();
    for (auto it = timeline_.rbegin(); it != timeline_.rend(); ++it)
      if (it->id == plan_id) {
        it->worker_start_us = r.worker_start_us;
        it->worker_end_us = r.worker_end_us;
        break;
      }
    return r;
  } catch (const std::exception& e) {  // a broken link, or a worker that breaks the protocol
    lose(*s, e.what());
    s->check();
    throw PeerLost(e.what());
  }
}

PeerStatus PeerHead::status() const {
  std::lock_guard lock(mu_);
  return status_;
}

std::vector<PipelineTiming> PeerHead::timeline() const {
  std::lock_guard lock(mu_);
  return {timeline_.begin(), timeline_.end()};
}

std::string PeerHead::probe_text() const {
  PeerStatus st = status();
  std::string out = "head " + endpoint_.str() + ": " + st.state;
  if (!st.worker.empty()) out += ", worker " + st.worker;
  if (!st.link.empty()) out += ", link " + st.link;
  char buf[64];
  if (st.rtt_ms >= 0) {
    std::snprintf(buf, sizeof buf, ", rtt %.3f ms", st.rtt_ms);
    out += buf;
  }
  if (st.link_bytes_per_s >= 0) {
    std::snprintf(buf, sizeof buf, ", %.2f GB/s", st.link_bytes_per_s / 1e9);
    out += buf;
  }
  if (!st.reason.empty()) out += " (" + st.reason + ")";
  return out;
}

}  // namespace spark
