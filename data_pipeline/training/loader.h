// Training data loader: feature store entries → fixed-shape training batches, prefetched by CPU
// workers and (on CUDA) copied to the device on the loader's own stream.
//
//   epoch plan (seed, epoch) ─▶ rank shard ─▶ N workers: read chain + sample fn ─▶ reorder window
//     ─▶ batcher: stack B samples into a pooled (pinned) host buffer ─▶ async H2D copy + event
//     ─▶ bounded queue of ready batches ─▶ next()
//
// Order. Epoch e draws L chain indices (L = epoch_length, or the number of candidates): a seeded
// permutation (repeated when L exceeds the candidates), or with weighted sampling L draws with
// replacement ∝ AlphaFold's chain weights (feature_store.h). Rank r of W takes global positions
// r, r+W, r+2W, … (⌊L/W⌋ each, the remainder is dropped so every rank runs the same number of
// steps), rounded down to whole batches. Sample g of epoch e has SampleKey{seed, e, g}. Workers
// finish samples in any order; the batcher delivers them by position, so batches are identical
// for any worker count and timing.
//
// Bad data. A chain whose read fails (damaged store group) or whose sample function throws is
// logged once with the reason, counted in stats().skipped, and replaced by the chain at the next
// global position (g+1, g+2, … mod L) with the same SampleKey; the replacement depends only on
// the data, never on timing. Only when every candidate of the epoch fails does next() throw.
//
// Memory is bounded independently of the epoch length: at most (queue_depth + 1) × batch_size
// samples are produced ahead of the batcher, and at most queue_depth + 2 batch buffers exist.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "data_pipeline/training/feature_store.h"
#include "data_pipeline/features/features.h"

namespace foldcore::data {

// Turns one stored chain into one fixed-shape sample (e.g. make_training_sample bound to a
// config). Must be thread-safe and depend only on its arguments.
using SampleFn = std::function<FeatureDict(const TrainingChain&, const SampleKey&)>;

struct LoaderOptions {
  int workers = 2;
  int queue_depth = 2;   // ready batches held ahead of the consumer
  int64_t batch_size = 1;
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
  int64_t epoch_length = 0;      // samples per epoch over all ranks; 0 = number of candidates
  bool weighted = false;         // AF2 weighted draws instead of a permutation
  std::vector<int64_t> indices;  // candidate chains (store indices); empty = every chain
  std::map<std::string, int64_t> cluster_sizes;  // for weighted sampling (absent = 1)
  Device device = Device::cpu();  // where batches are delivered
  // Rank-local batches to skip: delivery starts at batch start_batch of the sequence (epoch
  // start_batch / batches_per_epoch), identical to what a loader from 0 delivers there. A
  // resumed training run starts where its checkpoint left off without producing the batches
  // before it.
  int64_t start_batch = 0;
};

struct LoaderStats {
  int64_t samples = 0;   // delivered
  int64_t batches = 0;
  double seconds = 0;    // since construction
  double samples_per_second = 0;
  int64_t consumer_waits = 0;     // next() found no ready batch and waited
  double consumer_wait_seconds = 0;
  int64_t worker_waits = 0;       // a worker blocked on the full reorder window
  int64_t skipped = 0;            // failed candidates replaced
  std::vector<std::string> skip_reasons;  // one per failing chain, first reason
  int64_t peak_pending_samples = 0;       // samples produced but not yet batched
  int64_t batch_buffers = 0;              // batch buffers allocated (pool size)
};

// One batch: every numeric sample feature stacked to [B, ...] on the loader's device. String
// features are left out. The tensors view a pooled buffer that returns to the loader when the
// batch is destroyed: copy (Tensor::to, copy_) anything that must outlive the batch.
struct TrainingBatch {
  int64_t epoch = 0;
  int64_t step = 0;  // batch number within the epoch (this rank)
  std::vector<SampleKey> keys;
  std::vector<std::string> chains;  // chain actually used per sample (after replacement)
  std::vector<std::pair<std::string, Tensor>> features;

  const Tensor& at(const std::string& name) const;
  // CUDA: makes `stream` wait for this batch's host→device copy (no host blocking); a consumer
  // must call this (or synchronize()) before using the tensors. CPU: no-op.
  void wait(const Stream& stream) const;
  void synchronize() const;

  std::shared_ptr<void> buffer;  // keeps the pooled storage alive
  std::shared_ptr<Event> ready;  // recorded after the copy (CUDA only)
};

class TrainingLoader {
 public:
  // The reader must outlive the loader. Throws on bad options or no candidate chains.
  TrainingLoader(const FeatureStoreReader& reader, SampleFn sample, LoaderOptions options);
  ~TrainingLoader();  // stops the workers, also mid-epoch
  TrainingLoader(const TrainingLoader&) = delete;
  TrainingLoader& operator=(const TrainingLoader&) = delete;

  int64_t batches_per_epoch() const;
  // Epoch e's global order of store indices (before sharding and replacement).
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  // The next batch; epochs follow each other. Rethrows an error that stops the pipeline (every
  // candidate failed, a sample whose shapes differ from the first one's).
  TrainingBatch next();
  LoaderStats stats() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace foldcore::data
