#include "core/kernel_profile.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "core/cuda_backend.h"
#include "core/host_waits.h"
#include "core/profile.h"

namespace foldcore::kernel_profile {
namespace {

std::atomic<bool>& flag() {
  static std::atomic<bool> on = [] {
    const char* v = std::getenv("FOLDCORE_PROFILE_KERNELS");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return on;
}

struct Record {
  const char* name;
  std::string stage;
  int device;
  void* start;
  void* end;
};

struct State {
  std::mutex mu;
  std::vector<Record> records;
  std::map<int, std::vector<void*>> pool;  // free events per device
};

State& state() {
  static State* s = new State;  // immortal: launches may still run while statics are torn down
  return *s;
}

// A free event of `device` (the caller holds the lock).
void* take_event(State& s, int device) {
  std::vector<void*>& free = s.pool[device];
  if (free.empty()) return ::foldcore::detail::cuda_event_create(device);
  void* e = free.back();
  free.pop_back();
  return e;
}

void give_back(State& s, const Record& r) {
  s.pool[r.device].push_back(r.start);
  s.pool[r.device].push_back(r.end);
}

std::vector<Row> sorted(const std::map<std::string, Row>& by_name) {
  std::vector<Row> rows;
  rows.reserve(by_name.size());
  for (const auto& [name, row] : by_name) rows.push_back(row);
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.seconds > b.seconds; });
  return rows;
}

}  // namespace

bool enabled() { return flag().load(std::memory_order_relaxed); }
void set_enabled(bool on) { flag().store(on, std::memory_order_relaxed); }

Report collect() {
  State& s = state();
  std::vector<Record> records;
  {
    std::lock_guard<std::mutex> l(s.mu);
    records.swap(s.records);
  }
  Report rep;
  if (records.empty()) return rep;
  const ::foldcore::detail::UncountedWaits uncounted;  // the profiler's own wait
  std::map<std::string, Row> by_name, by_stage, by_pair;
  const int device = records.front().device;
  const Record* last = &records.front();
  for (const Record& r : records) {
    const double sec = static_cast<double>(::foldcore::detail::cuda_event_elapsed_ms(r.start, r.end)) / 1e3;
    Row& k = by_name[r.name];
    k.name = r.name;
    ++k.calls;
    k.seconds += sec;
    Row& st = by_stage[r.stage];
    st.name = r.stage;
    ++st.calls;
    st.seconds += sec;
    std::string pair = r.name;
    pair.append(" @ ").append(r.stage);
    Row& kp = by_pair[pair];
    if (kp.calls == 0) kp.name = std::move(pair);
    ++kp.calls;
    kp.seconds += sec;
    rep.busy_seconds += sec;
    if (r.device == device) last = &r;
  }
  rep.launches = static_cast<int64_t>(records.size());
  rep.span_seconds = static_cast<double>(::foldcore::detail::cuda_event_elapsed_ms(records.front().start, last->end)) / 1e3;
  rep.kernels = sorted(by_name);
  rep.stages = sorted(by_stage);
  rep.kernel_stages = sorted(by_pair);
  std::lock_guard<std::mutex> l(s.mu);
  for (const Record& r : records) give_back(s, r);
  return rep;
}

void reset() {
  State& s = state();
  std::lock_guard<std::mutex> l(s.mu);
  for (const Record& r : s.records) give_back(s, r);
  s.records.clear();
}

namespace detail {

Scope::Scope(const char* name, void* stream) {
  if (!enabled()) return;
  State& s = state();
  const int device = ::foldcore::detail::cuda_current_device();
  const std::string& stage = profile::current_stage();
  std::lock_guard<std::mutex> l(s.mu);
  Record r{name, stage.empty() ? std::string("-") : stage, device, take_event(s, device), take_event(s, device)};
  ::foldcore::detail::cuda_event_record(r.start, stream);
  end_ = r.end;
  stream_ = stream;
  s.records.push_back(std::move(r));
}

Scope::~Scope() {
  if (end_ != nullptr) ::foldcore::detail::cuda_event_record(end_, stream_);
}

const char* intern(const std::string& name) {
  static std::mutex mu;
  static auto& names = *new std::set<std::string>;  // immortal, as the records' names
  std::lock_guard<std::mutex> l(mu);
  return names.insert(name).first->c_str();
}

const char* kernel_name_from_signature(const char* pretty) {
  std::string s(pretty);
  const size_t at = s.find("Kernel = ");
  if (at != std::string::npos) {
    s = s.substr(at + 9);
    int depth = 0;
    size_t end = 0;
    for (; end < s.size(); ++end) {
      const char c = s[end];
      if (c == '<' || c == '(') ++depth;
      if (c == '>' || c == ')') --depth;
      if (depth < 0 || (depth == 0 && (c == ';' || c == ']'))) break;
    }
    s = s.substr(0, end);
  }
  return intern(s);
}

}  // namespace detail
}  // namespace foldcore::kernel_profile
