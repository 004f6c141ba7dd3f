// The parts of the feature store that need no HDF5: index filtering and sampling weights.
#include <algorithm>

#include "core/error.h"
#include "data_pipeline/training/feature_store.h"

namespace foldcore::data {

bool entry_passes(const FeatureStoreEntry& e, const FeatureStoreFilter& f) {
  if (f.min_length > 0 && e.num_res < f.min_length) return false;
  if (f.max_length > 0 && e.num_res > f.max_length) return false;
  if (f.max_resolution > 0) {
    if (e.resolution <= 0) {
      if (!f.keep_unknown_resolution) return false;
    } else if (e.resolution > f.max_resolution) {
      return false;
    }
  }
  // An entry without a date cannot be placed in a date window: it fails any date bound.
  if (!f.min_release_date.empty() && (e.release_date.empty() || e.release_date < f.min_release_date)) return false;
  if (!f.max_release_date.empty() && (e.release_date.empty() || e.release_date > f.max_release_date)) return false;
  if (!f.include_distillation && e.is_distillation) return false;
  return true;
}

double af2_chain_sampling_weight(int64_t num_res, int64_t cluster_size) {
  FC_CHECK(num_res > 0, "af2_chain_sampling_weight: num_res must be positive, got ", num_res);
  FC_CHECK(cluster_size > 0, "af2_chain_sampling_weight: cluster_size must be positive, got ", cluster_size);
  const double clamped = static_cast<double>(std::max<int64_t>(std::min<int64_t>(num_res, 512), 256));
  return clamped / 512.0 / static_cast<double>(cluster_size);
}

std::optional<int64_t> FeatureStoreReader::find(const std::string& name) const {
  const auto& e = entries();
  for (size_t i = 0; i < e.size(); ++i)
    if (e[i].name == name) return static_cast<int64_t>(i);
  return std::nullopt;
}

std::vector<int64_t> FeatureStoreReader::select(const FeatureStoreFilter& filter) const {
  std::vector<int64_t> out;
  const auto& e = entries();
  for (size_t i = 0; i < e.size(); ++i)
    if (entry_passes(e[i], filter)) out.push_back(static_cast<int64_t>(i));
  return out;
}

std::vector<double> FeatureStoreReader::sampling_weights(const std::vector<int64_t>& indices,
                                                         const std::map<std::string, int64_t>& cluster_sizes) const {
  std::vector<double> w;
  w.reserve(indices.size());
  for (const int64_t i : indices) {
    FC_CHECK(i >= 0 && i < size(), "feature store '", path(), "': index ", i, " out of range (", size(), " chains)");
    const FeatureStoreEntry& e = entries()[static_cast<size_t>(i)];
    const auto it = cluster_sizes.find(e.name);
    w.push_back(af2_chain_sampling_weight(e.num_res, it == cluster_sizes.end() ? 1 : it->second));
  }
  return w;
}

TrainingChain FeatureStoreReader::read(const std::string& name) const {
  const std::optional<int64_t> i = find(name);
  FC_CHECK(i.has_value(), "feature store '", path(), "': no chain '", name, "'");
  return read(*i);
}

}  // namespace foldcore::data
