// Feature store: many TrainingChains in one HDF5 file, written once by `foldcore preprocess`
// and read concurrently by the training loader (loader.h).
//
// Layout (format version kFeatureStoreFormatVersion, root attribute "format_version"):
//   /chains/<name>/sequence            u8  [N]       one-letter codes
//                 /aatype              i32 [N]
//                 /residue_index       i32 [N]
//                 /all_atom_positions  f32 [N,37,3]
//                 /all_atom_mask       f32 [N,37]
//                 /msa                 i32 [S,N]     HHblits codes
//                 /deletion_matrix     i32 [S,N]
//                 /template_aatype     f32 [T,N,22]
//                 /template_all_atom_masks     f32 [T,N,37]
//                 /template_all_atom_positions f32 [T,N,37,3]
//                 /template_sum_probs  f32 [T]
//                 /template_domain_names u8 [T,W]   NUL-padded strings
//                 /template_sequence   u8  [T,N]
//                 /release_date        u8  [10 or 0]
//                 attributes: resolution (f64), is_distillation (i32)
//   /index/name u8 [C,W], num_res i64 [C], resolution f64 [C], release_date u8 [C,10],
//         msa_depth i64 [C], num_templates i64 [C], bytes i64 [C], is_distillation i32 [C]
// Non-empty datasets are chunked along their first axis (≈256 KiB chunks) with the shuffle and
// deflate filters, so any HDF5 tool reads them. Empty ones (T = 0) are contiguous.
//
// Concurrency: all HDF5 calls of this file go through one process-wide mutex (the portable choice:
// a thread-safe HDF5 build serialises its API internally anyway, a non-thread-safe one must not be
// entered twice). Compression and decompression run outside it: the writer deflates chunks itself
// and stores them with H5Dwrite_chunk, the reader fetches raw chunks with H5Dread_chunk and
// inflates them (zlib; its Adler-32 check catches corrupted chunk bytes), so N reader threads
// decompress in parallel. Datasets in another layout are read through H5Dread instead.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data_pipeline/training/training_chain.h"

namespace foldcore::data {

constexpr int kFeatureStoreFormatVersion = 1;

// False in a build without HDF5 (every store function then throws an Error saying so).
bool feature_store_supported();

// One row of the chain index: what filtering and sampling need without reading the chain.
struct FeatureStoreEntry {
  std::string name;
  int64_t num_res = 0;
  double resolution = 0.0;   // Å; 0 = none (NMR, predictions)
  std::string release_date;  // YYYY-MM-DD or empty
  int64_t msa_depth = 0;
  int64_t num_templates = 0;
  int64_t bytes = 0;  // uncompressed size of the chain's arrays
  bool is_distillation = false;
};

// Index filter; a zero / empty field does not filter.
struct FeatureStoreFilter {
  int64_t min_length = 0;
  int64_t max_length = 0;
  // Chains with a resolution above this are dropped; chains without a resolution (0) are kept
  // only when keep_unknown_resolution.
  double max_resolution = 0.0;
  bool keep_unknown_resolution = true;
  std::string min_release_date;  // inclusive, YYYY-MM-DD (string order = date order)
  std::string max_release_date;  // inclusive
  bool include_distillation = true;
};
bool entry_passes(const FeatureStoreEntry& e, const FeatureStoreFilter& f);

// AlphaFold2's PDB chain sampling weight (supplement 1.2.5): a chain is drawn with probability
// ∝ max(min(N_res, 512), 256) / 512, divided by the size of its sequence cluster, so short chains
// are down-weighted (never below 1/2) and large clusters do not dominate.
double af2_chain_sampling_weight(int64_t num_res, int64_t cluster_size = 1);

// Writes a store to `<path>.tmp` and renames it to `path` in finish(); a writer destroyed before
// finish() (an error, a cancelled run) removes the temporary file, so `path` is either absent,
// untouched or complete.
class FeatureStoreWriter {
 public:
  explicit FeatureStoreWriter(const std::string& path);
  ~FeatureStoreWriter();
  FeatureStoreWriter(const FeatureStoreWriter&) = delete;
  FeatureStoreWriter& operator=(const FeatureStoreWriter&) = delete;
  // Validates and appends one chain. Safe to call from several threads (compression runs
  // outside the HDF5 lock). Throws on an invalid chain or a duplicate name.
  void add(const TrainingChain& chain);
  int64_t size() const;
  // Writes the index and the format version, closes and renames. Throws when the file cannot be
  // completed (the temporary file is then removed).
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Read side: opens the file once and reads the index; read() is safe from many threads.
class FeatureStoreReader {
 public:
  // Throws Error naming the file: missing, not HDF5, truncated, wrong format version, bad index.
  explicit FeatureStoreReader(const std::string& path);
  ~FeatureStoreReader();
  FeatureStoreReader(const FeatureStoreReader&) = delete;
  FeatureStoreReader& operator=(const FeatureStoreReader&) = delete;

  const std::string& path() const;
  const std::vector<FeatureStoreEntry>& entries() const;
  int64_t size() const { return static_cast<int64_t>(entries().size()); }
  std::optional<int64_t> find(const std::string& name) const;
  // Indices of the entries passing `filter`, in index order.
  std::vector<int64_t> select(const FeatureStoreFilter& filter) const;
  // af2_chain_sampling_weight of each of `indices`; cluster sizes by chain name (absent = 1).
  std::vector<double> sampling_weights(const std::vector<int64_t>& indices,
                                       const std::map<std::string, int64_t>& cluster_sizes = {}) const;
  // The chain, validated. A damaged group (missing or corrupt dataset, bad shape, failed
  // validation) throws Error naming the store and the chain.
  TrainingChain read(int64_t index) const;
  TrainingChain read(const std::string& name) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace foldcore::data
