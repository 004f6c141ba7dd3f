#include "data_pipeline/training/training_sample.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/philox.h"
#include "data_pipeline/features/feature_processing.h"
#include "data_pipeline/structure/residue_constants.h"
#include "data_pipeline/training/training_labels.h"

namespace foldcore::data {
namespace {

using msa_tf::PhiloxStream;

// Stream offsets of the sample's own draws, above process_features' offsets 4r..4r+2.
constexpr uint64_t kOwnStreams = uint64_t{1} << 32;
enum Stream : uint64_t { kRecycles, kClampedFape, kCrop, kTemplates };
PhiloxStream stream(uint64_t seed, Stream s) { return PhiloxStream(seed, kOwnStreams + s); }

constexpr int kTemplateAatypeClasses = 22;

// ------------------------------------------------------------------ crop

std::vector<int64_t> contiguous_crop(int64_t n, int64_t crop, PhiloxStream& rng) {
  const int64_t start = static_cast<int64_t>(rng.below(static_cast<uint64_t>(n - crop + 1)));
  std::vector<int64_t> idx(static_cast<size_t>(crop));
  std::iota(idx.begin(), idx.end(), start);
  return idx;
}

// The `crop` residues nearest (CA-CA distance) to a random residue with an observed CA; residues
// without CA sort last; ties by position. Falls back to a contiguous crop when no CA is observed.
std::vector<int64_t> spatial_crop(const TrainingChain& chain, int64_t crop, PhiloxStream& rng) {
  const int64_t n = chain.num_res();
  const size_t ca = static_cast<size_t>(rc::atom_order("CA"));
  std::vector<int64_t> with_ca;
  for (int64_t i = 0; i < n; ++i)
    if (chain.all_atom_mask[static_cast<size_t>(i) * 37 + ca] != 0.0f) with_ca.push_back(i);
  if (with_ca.empty()) return contiguous_crop(n, crop, rng);
  const int64_t centre = with_ca[rng.below(with_ca.size())];
  const float* c = &chain.all_atom_positions[(static_cast<size_t>(centre) * 37 + ca) * 3];
  std::vector<std::pair<double, int64_t>> dist(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i);
    double d2 = std::numeric_limits<double>::infinity();
    if (chain.all_atom_mask[k * 37 + ca] != 0.0f) {
      const float* p = &chain.all_atom_positions[(k * 37 + ca) * 3];
      d2 = 0;
      for (int a = 0; a < 3; ++a) d2 += (double(p[a]) - c[a]) * (double(p[a]) - c[a]);
    }
    dist[k] = {d2, i};
  }
  std::nth_element(dist.begin(), dist.begin() + crop, dist.end());  // pairs: distance, then position
  std::vector<int64_t> idx;
  for (int64_t k = 0; k < crop; ++k) idx.push_back(dist[static_cast<size_t>(k)].second);
  std::sort(idx.begin(), idx.end());
  return idx;
}

// ------------------------------------------------------------------ MSA rows and templates

std::vector<size_t> sampled_templates(size_t available, const TrainingSampleConfig& config, PhiloxStream& rng) {
  const size_t k = static_cast<size_t>(rng.below(available + 1));
  std::vector<size_t> perm(available);
  std::iota(perm.begin(), perm.end(), size_t{0});
  for (size_t i = available; i > 1; --i) std::swap(perm[i - 1], perm[rng.below(i)]);  // Fisher-Yates
  perm.resize(std::min(k, static_cast<size_t>(config.max_templates)));
  return perm;
}

// Rows `cols` of each `width`-wide row of `src` for every residue in `cols`: [rows, |cols|, width].
template <typename T>
std::vector<T> gather_columns(const T* src, size_t num_res, size_t rows, const std::vector<int64_t>& cols, size_t width) {
  std::vector<T> out(rows * cols.size() * width);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols.size(); ++c)
      std::copy_n(src + (r * num_res + static_cast<size_t>(cols[c])) * width, width, &out[(r * cols.size() + c) * width]);
  return out;
}

// The raw feature dict (features.h layout) of the crop, with the chosen templates.
FeatureDict cropped_raw_features(const TrainingChain& chain, const std::vector<int64_t>& crop,
                                 const std::vector<size_t>& templates) {
  const int64_t c = static_cast<int64_t>(crop.size());
  const size_t n = static_cast<size_t>(chain.num_res());
  std::vector<int32_t> aatype(crop.size()), residue_index(crop.size());
  for (size_t k = 0; k < crop.size(); ++k) {
    aatype[k] = chain.aatype[static_cast<size_t>(crop[k])];
    residue_index[k] = chain.residue_index[static_cast<size_t>(crop[k])];
  }
  FeatureDict raw;
  raw.set("aatype", NpyArray::from_i32(aatype, {c}));
  raw.set("between_segment_residues", NpyArray::from_i32(std::vector<int32_t>(crop.size(), 0), {c}));
  raw.set("residue_index", NpyArray::from_i32(residue_index, {c}));
  raw.set("seq_length", NpyArray::from_i32(std::vector<int32_t>(crop.size(), static_cast<int32_t>(c)), {c}));
  const int64_t s = chain.msa.depth;
  std::vector<int32_t> msa(static_cast<size_t>(s) * crop.size()), del(msa.size());
  for (size_t r = 0; r < static_cast<size_t>(s); ++r)
    for (size_t k = 0; k < crop.size(); ++k) {
      const size_t src = r * n + static_cast<size_t>(crop[k]);
      msa[r * crop.size() + k] = chain.msa.msa[src];
      del[r * crop.size() + k] = chain.msa.deletion_matrix[src];
    }
  raw.set("msa", NpyArray::from_i32(msa, {s, c}));
  raw.set("deletion_matrix_int", NpyArray::from_i32(del, {s, c}));
  const int64_t t = static_cast<int64_t>(templates.size());
  std::vector<float> t_aatype, t_pos, t_mask, t_probs;
  for (size_t k : templates) {
    const TemplateFeatures& tf = chain.templates[k];
    const std::vector<float> a = gather_columns(tf.aatype.data(), n, 1, crop, kTemplateAatypeClasses);
    const std::vector<float> p = gather_columns(tf.positions.data(), n, 1, crop, 37 * 3);
    const std::vector<float> m = gather_columns(tf.masks.data(), n, 1, crop, 37);
    t_aatype.insert(t_aatype.end(), a.begin(), a.end());
    t_pos.insert(t_pos.end(), p.begin(), p.end());
    t_mask.insert(t_mask.end(), m.begin(), m.end());
    t_probs.push_back(tf.sum_probs);
  }
  raw.set("template_aatype", NpyArray::from_f32(t_aatype, {t, c, kTemplateAatypeClasses}));
  raw.set("template_all_atom_positions", NpyArray::from_f32(t_pos, {t, c, 37, 3}));
  raw.set("template_all_atom_masks", NpyArray::from_f32(t_mask, {t, c, 37}));
  raw.set("template_sum_probs", NpyArray::from_f32(t_probs, {t, 1}));
  return raw;
}

// ------------------------------------------------------------------ fixed shapes

int64_t axis_size(char letter, const TrainingSampleConfig& config) {
  switch (letter) {
    case 'N': return config.crop_size;
    case 'S': return config.max_msa_clusters;
    case 'E': return config.max_extra_msa;
    case 'T': return config.max_templates;
    case 'R': return config.max_recycles + 1;
    default: FC_THROW("training sample: unknown layout axis '", letter, "'");
  }
}

std::vector<int64_t> fixed_shape(const ProcessedKeyLayout& key, const TrainingSampleConfig& config) {
  std::vector<int64_t> shape;
  for (const char* p = key.dims; *p != 0; ++p) {
    if (*p == ' ') continue;
    if (std::isdigit(static_cast<unsigned char>(*p))) {
      shape.push_back(std::strtoll(p, nullptr, 10));
      while (std::isdigit(static_cast<unsigned char>(p[1]))) ++p;
    } else {
      shape.push_back(axis_size(*p, config));
    }
  }
  return shape;
}

// The crop's residues plus each one's predecessor (sorted, unique), and where each crop residue sits
// in that list: labels computed on it equal the full chain's (torsions look one residue back).
std::pair<std::vector<int64_t>, std::vector<int64_t>> label_window(const std::vector<int64_t>& crop) {
  std::vector<int64_t> ext;
  for (int64_t i : crop) {
    if (i > 0) ext.push_back(i - 1);
    ext.push_back(i);
  }
  std::sort(ext.begin(), ext.end());
  ext.erase(std::unique(ext.begin(), ext.end()), ext.end());
  std::vector<int64_t> rows;
  for (int64_t i : crop) rows.push_back(std::lower_bound(ext.begin(), ext.end(), i) - ext.begin());
  return {ext, rows};
}

}  // namespace

TrainingSampleConfig TrainingSampleConfig::initial() { return TrainingSampleConfig{}; }

TrainingSampleConfig TrainingSampleConfig::finetune() {
  TrainingSampleConfig c;
  c.crop_size = 384;
  c.max_msa_clusters = 512;
  c.max_extra_msa = 5120;
  return c;
}

void TrainingSampleConfig::validate() const {
  FC_CHECK(crop_size >= 1, "TrainingSampleConfig: crop_size ", crop_size, " < 1");
  FC_CHECK(max_msa_clusters >= 1 && max_extra_msa >= 1, "TrainingSampleConfig: max_msa_clusters (", max_msa_clusters,
           ") and max_extra_msa (", max_extra_msa, ") must be >= 1 (padded axes keep one masked row)");
  FC_CHECK(!use_templates || max_templates >= 1, "TrainingSampleConfig: use_templates needs max_templates >= 1");
  FC_CHECK(max_templates >= 0 && max_recycles >= 0, "TrainingSampleConfig: negative max_templates (", max_templates,
           ") or max_recycles (", max_recycles, ")");
  FC_CHECK(spatial_crop_probability >= 0 && spatial_crop_probability <= 1 && clamped_fape_probability >= 0 &&
               clamped_fape_probability <= 1,
           "TrainingSampleConfig: probabilities must lie in [0, 1] (spatial_crop_probability ", spatial_crop_probability,
           ", clamped_fape_probability ", clamped_fape_probability, ")");
  FC_CHECK(block_deletion.fraction_per_block >= 0 && block_deletion.fraction_per_block <= 1 &&
               block_deletion.num_blocks >= 0,
           "TrainingSampleConfig: block_deletion fraction_per_block ", block_deletion.fraction_per_block,
           " / num_blocks ", block_deletion.num_blocks, " out of range");
}

uint64_t sample_seed(const SampleKey& key) {
  const uint64_t e = static_cast<uint64_t>(key.epoch), s = static_cast<uint64_t>(key.sample_index);
  const PhiloxBlock b = philox4x32_10(static_cast<uint32_t>(e), static_cast<uint32_t>(e >> 32), static_cast<uint32_t>(s),
                                      static_cast<uint32_t>(s >> 32), static_cast<uint32_t>(key.seed),
                                      static_cast<uint32_t>(key.seed >> 32));
  return (static_cast<uint64_t>(b.v[1]) << 32) | b.v[0];
}

std::vector<TrainingFeatureSpec> training_sample_layout(const TrainingSampleConfig& config) {
  config.validate();
  std::vector<TrainingFeatureSpec> out;
  for (const ProcessedKeyLayout& k : processed_layout())
    if (config.use_templates || !k.is_template) out.push_back({k.name, fixed_shape(k, config), k.is_float});
  out.push_back({"num_recycles", {1}, false});
  const ChainLabels empty = compute_chain_labels({}, {}, {});
  for (const ChainLabels::Array& a : empty.arrays) {
    std::vector<int64_t> shape{config.crop_size};
    shape.insert(shape.end(), a.row_shape.begin(), a.row_shape.end());
    out.push_back({a.name, shape, true});
  }
  out.push_back({"resolution", {1}, true});
  out.push_back({"is_distillation", {1}, true});
  return out;
}

FeatureDict make_training_sample(const TrainingChain& chain, const TrainingSampleConfig& config, const SampleKey& key) {
  config.validate();
  const int64_t n = chain.num_res();
  FC_CHECK(n > 0 && static_cast<int64_t>(chain.all_atom_positions.size()) == n * 37 * 3 &&
               static_cast<int64_t>(chain.all_atom_mask.size()) == n * 37 &&
               static_cast<int64_t>(chain.residue_index.size()) == n && chain.msa.num_columns == n &&
               chain.msa.depth >= 1 && static_cast<int64_t>(chain.msa.msa.size()) == chain.msa.depth * n &&
               chain.msa.deletion_matrix.size() == chain.msa.msa.size(),
           "make_training_sample: chain ", chain.name, " has inconsistent sizes (TrainingChain::validate names them)");
  const uint64_t seed = sample_seed(key);

  PhiloxStream recycle_rng = stream(seed, kRecycles), fape_rng = stream(seed, kClampedFape);
  const int num_recycles = static_cast<int>(recycle_rng.below(static_cast<uint64_t>(config.max_recycles) + 1));
  const bool clamped = fape_rng.uniform() < config.clamped_fape_probability;

  PhiloxStream crop_rng = stream(seed, kCrop);
  std::vector<int64_t> crop;
  if (n <= config.crop_size) {
    crop.resize(static_cast<size_t>(n));
    std::iota(crop.begin(), crop.end(), 0);
  } else {
    const bool spatial = config.spatial_crop || crop_rng.uniform() < config.spatial_crop_probability;
    crop = spatial ? spatial_crop(chain, config.crop_size, crop_rng) : contiguous_crop(n, config.crop_size, crop_rng);
  }
  PhiloxStream template_rng = stream(seed, kTemplates);
  std::vector<size_t> templates;
  if (config.use_templates) templates = sampled_templates(chain.templates.size(), config, template_rng);

  FeatureProcessingConfig fp;
  fp.max_msa_clusters = config.max_msa_clusters;
  fp.max_extra_msa = config.max_extra_msa;
  fp.max_templates = config.max_templates;
  fp.use_templates = config.use_templates;
  fp.reduce_msa_clusters_by_max_templates = false;  // training: all max_msa_clusters rows are MSA clusters
  fp.num_recycles = num_recycles;
  fp.use_masked_msa = config.use_masked_msa;
  fp.masked_msa = config.masked_msa;
  fp.block_delete_msa = config.block_delete_msa;
  fp.block_deletion = config.block_deletion;
  fp.seed = seed;
  fp.use_clamped_fape = clamped ? 1.0f : 0.0f;
  fp.padding = {config.crop_size, config.max_msa_clusters, config.max_extra_msa, config.max_templates,
                config.max_recycles + 1};
  FeatureDict out = process_features(cropped_raw_features(chain, crop, templates), fp);
  NpyArray recycles{NpyDType::i64(), {1}, std::vector<uint8_t>(sizeof(int64_t))};
  const int64_t r64 = num_recycles;
  std::memcpy(recycles.data.data(), &r64, sizeof(r64));
  out.set("num_recycles", std::move(recycles));

  const auto [window, window_rows] = label_window(crop);
  std::vector<int32_t> w_aatype;
  std::vector<float> w_pos, w_mask;
  for (int64_t i : window) {
    const size_t k = static_cast<size_t>(i);
    w_aatype.push_back(chain.aatype[k]);
    w_pos.insert(w_pos.end(), &chain.all_atom_positions[k * 111], &chain.all_atom_positions[k * 111] + 111);
    w_mask.insert(w_mask.end(), &chain.all_atom_mask[k * 37], &chain.all_atom_mask[k * 37] + 37);
  }
  out.update(label_features(compute_chain_labels(w_aatype, w_pos, w_mask), window_rows, config.crop_size,
                            chain.resolution, chain.is_distillation));
  return out;
}

}  // namespace foldcore::data
