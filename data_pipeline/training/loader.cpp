// TrainingLoader (design and guarantees in loader.h).
#include "data_pipeline/training/loader.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "core/philox.h"
#include "core/pinned_memory.h"
#include "core/timer.h"

namespace foldcore::data {

const Tensor& TrainingBatch::at(const std::string& name) const {
  for (const auto& [n, t] : features)
    if (n == name) return t;
  FC_THROW("TrainingBatch: no feature '", name, "'");
}

void TrainingBatch::wait(const Stream& stream) const {
  if (ready) ready->block(stream);
}

void TrainingBatch::synchronize() const {
  if (ready) ready->synchronize();
}

namespace {

constexpr size_t kAlign = 256;  // feature offsets in a batch buffer (CUDA's allocation alignment)
// Philox stream offsets: epoch orders use (seed, kOrderStream + epoch); distinct from the sample
// transform's streams, which are keyed by the sample's own key.
constexpr uint64_t kOrderStream = uint64_t{1} << 40;

// Uniform 64-bit value number `i` of stream (seed, offset).
uint64_t bits64(uint64_t seed, uint64_t offset, uint64_t i) {
  return (static_cast<uint64_t>(philox_bits(seed, offset, 2 * i)) << 32) | philox_bits(seed, offset, 2 * i + 1);
}
// Uniform integer in [0, n): the high half of a 64×64-bit product (Lemire's multiply-shift; the
// bias is below n / 2^64, far under anything observable).
uint64_t below(uint64_t r, uint64_t n) { return static_cast<uint64_t>((static_cast<unsigned __int128>(r) * n) >> 64); }

DType batch_dtype(const NpyDType& d, const std::string& name) {
  if (d == NpyDType::f32()) return DType::f32;
  if (d == NpyDType::i32()) return DType::i32;
  if (d == NpyDType::i64()) return DType::i64;
  if (d == NpyDType::u8() || d == NpyDType::boolean()) return DType::u8;
  FC_THROW("TrainingLoader: sample feature '", name, "' has dtype ", d.descr(), " (batches hold f4, i4, i8, u1, bool)");
}

// Where each numeric feature of a sample goes in a batch buffer.
struct Layout {
  struct Feature {
    std::string name;
    NpyDType npy;
    DType dtype;
    std::vector<int64_t> shape;  // per sample
    size_t sample_bytes = 0;
    size_t offset = 0;           // of the [B, ...] block in the buffer
  };
  std::vector<Feature> features;
  size_t bytes = 0;
};

Layout make_layout(const FeatureDict& sample, int64_t batch) {
  Layout l;
  for (const auto& [name, a] : sample.arrays()) {
    if (a.dtype.kind == 'S') continue;
    Layout::Feature f{name, a.dtype, batch_dtype(a.dtype, name), a.shape, a.data.size(), l.bytes};
    l.bytes += (f.sample_bytes * static_cast<size_t>(batch) + kAlign - 1) / kAlign * kAlign;
    l.features.push_back(std::move(f));
  }
  return l;
}

// One batch's storage: host (pinned when the device is CUDA) and, for CUDA, device memory.
struct Slot {
  PinnedBuffer host;
  Tensor device;                    // u8 [bytes] on the device (CUDA only)
  std::shared_ptr<Event> copy_done;      // host buffer is free once this completes
  std::shared_ptr<Event> consumer_done;  // device buffer is free once this completes
};

struct Pool {
  std::mutex m;
  std::vector<std::unique_ptr<Slot>> free;
  int64_t allocated = 0;
};

struct Produced {
  FeatureDict sample;
  std::string chain;
  SampleKey key;
};

}  // namespace

struct TrainingLoader::State {
  const FeatureStoreReader& reader;
  SampleFn fn;
  LoaderOptions o;
  std::vector<int64_t> candidates;
  std::vector<double> cumulative;  // weighted sampling
  int64_t epoch_len = 0, per_rank = 0, batches = 0;
  std::shared_ptr<Pool> pool = std::make_shared<Pool>();
  Stream stream;  // CUDA: the loader's copy stream
  WallTimer timer;

  std::mutex m;
  std::condition_variable cv;
  bool stop = false;
  int64_t next_pos = 0;     // next rank-local position a worker takes
  int64_t batched_pos = 0;  // positions below this have been taken by the batcher
  std::map<int64_t, Produced> pending;
  std::deque<TrainingBatch> ready;
  std::exception_ptr fatal;
  std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> orders;
  std::set<int64_t> unreadable;        // chains whose read failed (never retried)
  std::set<std::string> logged;
  std::optional<Layout> layout;
  LoaderStats st;
  std::vector<std::thread> threads;

  State(const FeatureStoreReader& r, SampleFn f, LoaderOptions opt) : reader(r), fn(std::move(f)), o(std::move(opt)) {}

  std::vector<int64_t> compute_order(int64_t epoch) const {
    const uint64_t off = kOrderStream + static_cast<uint64_t>(epoch);
    std::vector<int64_t> out(static_cast<size_t>(epoch_len));
    const uint64_t n = candidates.size();
    uint64_t k = 0;
    if (o.weighted) {
      const double total = cumulative.back();
      for (auto& x : out) {
        const double u = static_cast<double>(bits64(o.seed, off, k++) >> 11) * 0x1.0p-53 * total;
        const auto it = std::upper_bound(cumulative.begin(), cumulative.end(), u);
        x = candidates[std::min<size_t>(static_cast<size_t>(it - cumulative.begin()), n - 1)];
      }
      return out;
    }
    // Fisher-Yates permutations of the candidates, concatenated until L are drawn.
    std::vector<int64_t> perm;
    for (size_t i = 0; i < out.size(); ++i) {
      if (i % n == 0) {
        perm = candidates;
        for (uint64_t j = n - 1; j > 0; --j) std::swap(perm[j], perm[below(bits64(o.seed, off, k++), j + 1)]);
      }
      out[i] = perm[i % n];
    }
    return out;
  }

  std::shared_ptr<const std::vector<int64_t>> order(int64_t epoch) {  // call with m held
    auto it = orders.find(epoch);
    if (it == orders.end()) it = orders.emplace(epoch, std::make_shared<std::vector<int64_t>>(compute_order(epoch))).first;
    while (orders.size() > 3) orders.erase(orders.begin());  // workers span at most two epochs
    return it->second;
  }

  void report(int64_t chain, const std::string& name, const std::string& why, bool unreadable_chain) {  // m held
    ++st.skipped;
    if (unreadable_chain) unreadable.insert(chain);
    if (logged.insert(name).second) {
      log::warn("TrainingLoader: skipping chain ", name, ": ", why);
      st.skip_reasons.push_back(name + ": " + why);
    }
  }

  // Sample at rank-local position p: the planned chain, or the next working candidate.
  Produced produce(int64_t p) {
    const int64_t epoch = p / per_rank, g = (p % per_rank) * o.world_size + o.rank;
    std::shared_ptr<const std::vector<int64_t>> ord;
    {
      std::lock_guard<std::mutex> lock(m);
      ord = order(epoch);
    }
    const SampleKey key{o.seed, epoch, g};
    for (int64_t k = 0; k < epoch_len; ++k) {
      const int64_t chain = (*ord)[static_cast<size_t>((g + k) % epoch_len)];
      const std::string& name = reader.entries()[static_cast<size_t>(chain)].name;
      {
        std::lock_guard<std::mutex> lock(m);
        if (unreadable.count(chain)) {
          ++st.skipped;
          continue;
        }
      }
      std::optional<TrainingChain> tc;
      try {
        tc = reader.read(chain);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(m);
        report(chain, name, e.what(), true);
        continue;
      }
      try {
        return {fn(*tc, key), name, key};
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(m);
        report(chain, name, std::string("sample function: ") + e.what(), false);
      }
    }
    FC_THROW("TrainingLoader: every candidate chain of epoch ", epoch, " failed (store '", reader.path(), "')");
  }

  int64_t window() const { return (o.queue_depth + 1) * o.batch_size; }

  void worker() {
    for (;;) {
      int64_t p;
      {
        std::unique_lock<std::mutex> lock(m);
        if (!stop && next_pos >= batched_pos + window()) ++st.worker_waits;
        cv.wait(lock, [&] { return stop || next_pos < batched_pos + window(); });
        if (stop) return;
        p = next_pos++;
      }
      try {
        Produced s = produce(p);
        std::lock_guard<std::mutex> lock(m);
        pending.emplace(p, std::move(s));
        st.peak_pending_samples = std::max<int64_t>(st.peak_pending_samples, static_cast<int64_t>(pending.size()));
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (!fatal) fatal = std::current_exception();
        stop = true;
      }
      cv.notify_all();
    }
  }

  std::shared_ptr<void> acquire_slot(size_t bytes) {
    std::unique_ptr<Slot> s;
    {
      std::lock_guard<std::mutex> lock(pool->m);
      if (!pool->free.empty()) {
        s = std::move(pool->free.back());
        pool->free.pop_back();
      } else {
        ++pool->allocated;
      }
    }
    if (!s) {
      s = std::make_unique<Slot>();
      s->host = PinnedBuffer(bytes, o.device.is_cuda());
      if (o.device.is_cuda()) {
        s->device = Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, o.device);
        s->copy_done = std::make_shared<Event>(o.device);
        s->consumer_done = std::make_shared<Event>(o.device);
      }
    } else if (o.device.is_cuda()) {
      s->copy_done->synchronize();           // the host buffer's previous copy has finished
      s->consumer_done->block(stream);       // the next copy waits until the consumer is done
    }
    const Device dev = o.device;
    return std::shared_ptr<void>(s.release(), [pool = pool, dev](void* v) {
      std::unique_ptr<Slot> slot(static_cast<Slot*>(v));
      try {
        if (dev.is_cuda()) slot->consumer_done->record(current_stream(dev));
        std::lock_guard<std::mutex> lock(pool->m);
        pool->free.push_back(std::move(slot));
      } catch (...) {  // recording failed (device error): drop the slot instead of reusing it
      }
    });
  }

  // Stacks positions [p0, p0 + B) into a batch (they must be present in `samples`).
  TrainingBatch assemble(int64_t p0, std::vector<Produced>& samples) {
    if (!layout) layout = make_layout(samples[0].sample, o.batch_size);
    const Layout& l = *layout;
    std::shared_ptr<void> buf = acquire_slot(l.bytes);
    Slot& slot = *static_cast<Slot*>(buf.get());
    auto* host = static_cast<uint8_t*>(slot.host.data());
    TrainingBatch b;
    b.epoch = p0 / per_rank;
    b.step = (p0 % per_rank) / o.batch_size;
    for (size_t i = 0; i < samples.size(); ++i) {
      const Produced& s = samples[i];
      b.keys.push_back(s.key);
      b.chains.push_back(s.chain);
      for (const Layout::Feature& f : l.features) {
        FC_CHECK(s.sample.contains(f.name), "TrainingLoader: sample ", s.key.sample_index, " (chain ", s.chain,
                 ") lacks feature '", f.name, "' of the batch layout");
        const NpyArray& a = s.sample.at(f.name);
        FC_CHECK(a.dtype == f.npy && a.shape == f.shape, "TrainingLoader: sample ", s.key.sample_index, " (chain ",
                 s.chain, ") feature '", f.name, "' differs in shape or dtype from the first sample (samples must be "
                 "fixed-shape)");
        std::memcpy(host + f.offset + i * f.sample_bytes, a.data.data(), f.sample_bytes);
      }
    }
    uint8_t* base = host;
    if (o.device.is_cuda()) {
      base = static_cast<uint8_t*>(slot.device.data_ptr());
      copy_to_device_async(base, host, l.bytes, stream);
      slot.copy_done->record(stream);
      b.ready = slot.copy_done;
    }
    for (const Layout::Feature& f : l.features) {
      std::vector<int64_t> shape{o.batch_size};
      shape.insert(shape.end(), f.shape.begin(), f.shape.end());
      b.features.emplace_back(f.name, Tensor::wrap(base + f.offset, Shape(shape), f.dtype, o.device));
    }
    b.buffer = std::move(buf);
    return b;
  }

  void batcher() {
    try {
      for (int64_t p0 = o.start_batch * o.batch_size;; p0 += o.batch_size) {
        std::vector<Produced> samples;
        {
          std::unique_lock<std::mutex> lock(m);
          cv.wait(lock, [&] {
            if (stop) return true;
            if (static_cast<int64_t>(ready.size()) >= o.queue_depth) return false;
            for (int64_t p = p0; p < p0 + o.batch_size; ++p)
              if (!pending.count(p)) return false;
            return true;
          });
          if (stop) return;
          for (int64_t p = p0; p < p0 + o.batch_size; ++p) {
            samples.push_back(std::move(pending.at(p)));
            pending.erase(p);
          }
          batched_pos = p0 + o.batch_size;
        }
        cv.notify_all();
        TrainingBatch b = assemble(p0, samples);
        std::lock_guard<std::mutex> lock(m);
        ready.push_back(std::move(b));
        cv.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(m);
      if (!fatal) fatal = std::current_exception();
      stop = true;
      cv.notify_all();
    }
  }
};

TrainingLoader::TrainingLoader(const FeatureStoreReader& reader, SampleFn sample, LoaderOptions options)
    : state_(std::make_shared<State>(reader, std::move(sample), std::move(options))) {
  State& s = *state_;
  const LoaderOptions& o = s.o;
  FC_CHECK(s.fn, "TrainingLoader: no sample function");
  FC_CHECK(o.workers >= 1 && o.queue_depth >= 1 && o.batch_size >= 1, "TrainingLoader: workers, queue_depth and "
           "batch_size must be >= 1");
  FC_CHECK(o.world_size >= 1 && o.rank >= 0 && o.rank < o.world_size, "TrainingLoader: rank ", o.rank,
           " out of range for world size ", o.world_size);
  s.candidates = o.indices;
  if (s.candidates.empty()) {
    s.candidates.resize(static_cast<size_t>(reader.size()));
    std::iota(s.candidates.begin(), s.candidates.end(), 0);
  }
  FC_CHECK(!s.candidates.empty(), "TrainingLoader: feature store '", reader.path(), "' has no candidate chains");
  if (o.weighted) {
    double acc = 0;
    for (const double w : reader.sampling_weights(s.candidates, o.cluster_sizes)) s.cumulative.push_back(acc += w);
  } else {
    for (const int64_t i : s.candidates)
      FC_CHECK(i >= 0 && i < reader.size(), "TrainingLoader: chain index ", i, " out of range");
  }
  s.epoch_len = o.epoch_length > 0 ? o.epoch_length : static_cast<int64_t>(s.candidates.size());
  s.batches = s.epoch_len / o.world_size / o.batch_size;
  FC_CHECK(s.batches > 0, "TrainingLoader: an epoch of ", s.epoch_len, " samples over ", o.world_size,
           " ranks gives no full batch of ", o.batch_size);
  s.per_rank = s.batches * o.batch_size;
  FC_CHECK(o.start_batch >= 0, "TrainingLoader: start_batch ", o.start_batch, " is negative");
  s.next_pos = s.batched_pos = o.start_batch * o.batch_size;
  if (o.device.is_cuda()) s.stream = Stream::create(o.device);
  for (int i = 0; i < o.workers; ++i) s.threads.emplace_back([&s] { s.worker(); });
  s.threads.emplace_back([&s] { s.batcher(); });
}

TrainingLoader::~TrainingLoader() {
  {
    std::lock_guard<std::mutex> lock(state_->m);
    state_->stop = true;
  }
  state_->cv.notify_all();
  for (auto& t : state_->threads) t.join();
  if (state_->o.device.is_cuda()) state_->stream.synchronize();  // no copy into a freed buffer
}

int64_t TrainingLoader::batches_per_epoch() const { return state_->batches; }

std::vector<int64_t> TrainingLoader::epoch_order(int64_t epoch) const { return state_->compute_order(epoch); }

TrainingBatch TrainingLoader::next() {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.m);
  if (s.ready.empty() && !s.fatal) {
    ++s.st.consumer_waits;
    WallTimer w;
    s.cv.wait(lock, [&] { return !s.ready.empty() || s.fatal; });
    s.st.consumer_wait_seconds += w.seconds();
  }
  if (s.ready.empty()) std::rethrow_exception(s.fatal);
  TrainingBatch b = std::move(s.ready.front());
  s.ready.pop_front();
  ++s.st.batches;
  s.st.samples += s.o.batch_size;
  lock.unlock();
  s.cv.notify_all();
  return b;
}

LoaderStats TrainingLoader::stats() const {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.m);
  LoaderStats out = s.st;
  out.seconds = s.timer.seconds();
  out.samples_per_second = out.seconds > 0 ? static_cast<double>(out.samples) / out.seconds : 0;
  {
    std::lock_guard<std::mutex> pl(s.pool->m);
    out.batch_buffers = s.pool->allocated;
  }
  return out;
}

}  // namespace foldcore::data
