// make_training_sample: fixed layout, reproducibility per SampleKey, crop invariants (contiguous
// window; spatial = the nearest set), masks/padding, cluster limits, the BERT masking rate, the
// recycling-count and clamped-FAPE distributions, template sampling, and labels of the crop equal to
// the crop of the full chain's labels. Real chain: 2q2k A with its alignments; bigger synthetic
// chains where statistics or timing need them.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

#include "core/philox.h"
#include "data_pipeline/data_test_util.h"
#include "data_pipeline/features/feature_processing.h"
#include "data_pipeline/formats/mmcif_parser.h"
#include "data_pipeline/structure/residue_constants.h"
#include "data_pipeline/training/training_labels.h"
#include "data_pipeline/training/training_sample.h"
#include "test_util.h"

namespace foldcore::data {
namespace {

std::string shared(const std::string& f) { return testing::shared_dir() + "/data/" + f; }

const TrainingChain& chain_2q2k() {
  static const TrainingChain c =
      training_chain_from_mmcif(read_mmcif(shared("mmcifs/2q2k.cif")), "A", shared("2q2k_A/alignments"));
  return c;
}

// `copies` copies of 2q2k A joined (shifted 40 Å each, so spatial neighbourhoods are local), with a
// random MSA of `rows` rows (row 0 the sequence) and `templates` templates copied from the chain.
TrainingChain synthetic_chain(int copies, int64_t rows, int templates) {
  const TrainingChain& base = chain_2q2k();
  TrainingChain c;
  c.name = "synthetic";
  for (int k = 0; k < copies; ++k) {
    c.sequence += base.sequence;
    c.aatype.insert(c.aatype.end(), base.aatype.begin(), base.aatype.end());
    for (size_t i = 0; i < base.all_atom_positions.size(); ++i)
      c.all_atom_positions.push_back(base.all_atom_positions[i] + (i % 3 == 0 ? 40.0f * static_cast<float>(k) : 0.0f));
    c.all_atom_mask.insert(c.all_atom_mask.end(), base.all_atom_mask.begin(), base.all_atom_mask.end());
  }
  const int64_t n = static_cast<int64_t>(c.aatype.size());
  for (int64_t i = 0; i < n; ++i) c.residue_index.push_back(static_cast<int32_t>(i));
  c.resolution = 2.0;
  Msa msa;
  msa.sequences.push_back(c.sequence);
  for (int64_t r = 1; r < rows; ++r) {
    std::string s(static_cast<size_t>(n), '-');
    for (int64_t i = 0; i < n; ++i) s[static_cast<size_t>(i)] = "ACDEFGHIKLMNPQRSTVWY-"[philox_bits(7, 0, static_cast<uint64_t>(r * n + i)) % 21];
    msa.sequences.push_back(s);
  }
  msa.deletion_matrix.assign(static_cast<size_t>(rows), std::vector<int32_t>(static_cast<size_t>(n), 0));
  msa.descriptions.assign(static_cast<size_t>(rows), "row");
  c.msa = msa_features(msa);
  for (int t = 0; t < templates; ++t) {
    TemplateFeatures tf;
    tf.domain_name = "tmpl" + std::to_string(t);
    tf.sequence = c.sequence;
    tf.positions = c.all_atom_positions;
    tf.masks = c.all_atom_mask;
    tf.aatype.assign(static_cast<size_t>(n) * 22, 0.0f);
    for (int64_t i = 0; i < n; ++i) tf.aatype[static_cast<size_t>(i) * 22 + static_cast<size_t>(hhblits_aa_to_id(c.sequence[static_cast<size_t>(i)]))] = 1;
    tf.sum_probs = static_cast<float>(t + 1);
    c.templates.push_back(std::move(tf));
  }
  c.validate();
  return c;
}

TrainingSampleConfig small_config() {
  TrainingSampleConfig c;
  c.crop_size = 32;
  c.max_msa_clusters = 4;
  c.max_extra_msa = 8;
  c.max_templates = 2;
  return c;
}

template <typename T>
std::vector<T> values(const FeatureDict& f, const std::string& name) {
  const NpyArray& a = f.at(name);
  return std::vector<T>(a.as<T>(), a.as<T>() + a.numel());
}

// Slice r of the recycling (last) axis of `name`.
template <typename T>
std::vector<T> slice(const FeatureDict& f, const std::string& name, int64_t r) {
  const NpyArray& a = f.at(name);
  const int64_t rr = a.shape.back();
  std::vector<T> out;
  for (int64_t k = r; k < a.numel(); k += rr) out.push_back(a.as<T>()[k]);
  return out;
}

TEST(TrainingSample, LayoutIsFixedAndDocumented) {
  for (const TrainingSampleConfig& config : {small_config(), TrainingSampleConfig::initial()}) {
    const std::vector<TrainingFeatureSpec> layout = training_sample_layout(config);
    const FeatureDict f = make_training_sample(chain_2q2k(), config, {1, 2, 3});
    ASSERT_EQ(f.size(), layout.size());
    for (size_t k = 0; k < layout.size(); ++k) {
      const auto& [name, array] = f.arrays()[k];
      EXPECT_EQ(name, layout[k].name);
      EXPECT_EQ(array.shape, layout[k].shape) << name;
      EXPECT_EQ(array.dtype, layout[k].is_float ? NpyDType::f32() : NpyDType::i64()) << name;
    }
  }
  const TrainingSampleConfig c = TrainingSampleConfig::initial();
  EXPECT_EQ(c.crop_size, 256);
  EXPECT_EQ(c.max_msa_clusters, 128);
  EXPECT_EQ(c.max_extra_msa, 1024);
  const TrainingSampleConfig ft = TrainingSampleConfig::finetune();
  EXPECT_EQ(ft.crop_size, 384);
  EXPECT_EQ(ft.max_msa_clusters, 512);
  EXPECT_EQ(ft.max_extra_msa, 5120);
  TrainingSampleConfig no_templates = small_config();
  no_templates.use_templates = false;
  for (const TrainingFeatureSpec& s : training_sample_layout(no_templates)) EXPECT_EQ(s.name.rfind("template_", 0), std::string::npos);
}

TEST(TrainingSample, EqualKeysGiveIdenticalBytesOtherKeysOtherDraws) {
  const TrainingChain& c = chain_2q2k();
  const TrainingSampleConfig config = small_config();
  const FeatureDict a = make_training_sample(c, config, {5, 1, 9});
  const FeatureDict b = make_training_sample(c, config, {5, 1, 9});
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a.arrays()[k].second.data, b.arrays()[k].second.data) << a.arrays()[k].first;
  std::set<int64_t> starts;
  for (const SampleKey key : {SampleKey{5, 2, 9}, SampleKey{5, 1, 10}, SampleKey{6, 1, 9}}) {
    const FeatureDict o = make_training_sample(c, config, key);
    EXPECT_NE(o.at("msa_feat").data, a.at("msa_feat").data);
    starts.insert(values<int64_t>(o, "residue_index")[0]);
  }
  for (int64_t e = 0; e < 8; ++e) starts.insert(values<int64_t>(make_training_sample(c, config, {5, e, 9}), "residue_index")[0]);
  EXPECT_GT(starts.size(), 3u);  // 39 possible starts: 11 draws all alike has probability < 1e-15
  EXPECT_NE(sample_seed({1, 2, 3}), sample_seed({1, 3, 2}));
}

// FeatureProcessingConfig::padding embeds the natural output: every natural element where it was,
// zeros elsewhere, and recycling slices past the computed ones equal to the last one.
TEST(TrainingSample, ProcessFeaturesPaddingEmbedsTheNaturalOutput) {
  const TrainingChain& c = chain_2q2k();
  Msa msa;
  for (int64_t r = 0; r < c.msa.depth; ++r) {
    std::string row;
    for (int64_t i = 0; i < c.num_res(); ++i) row += "ACDEFGHIKLMNPQRSTVWYX-"[c.msa.msa[static_cast<size_t>(r * c.num_res() + i)]];
    msa.sequences.push_back(row);
    msa.deletion_matrix.emplace_back(c.msa.deletion_matrix.begin() + r * c.num_res(),
                                     c.msa.deletion_matrix.begin() + (r + 1) * c.num_res());
    msa.descriptions.push_back("row");
  }
  FeatureDict raw = make_sequence_features(c.sequence, c.name);
  raw.update(make_msa_features({&msa}));
  raw.update(empty_template_features(c.num_res()));
  FeatureProcessingConfig natural_config;
  natural_config.max_msa_clusters = 6;
  natural_config.max_extra_msa = 4;
  natural_config.num_recycles = 1;
  FeatureProcessingConfig padded_config = natural_config;
  padded_config.padding = {c.num_res() + 5, 9, 7, 3, 4};
  const FeatureDict natural = process_features(raw, natural_config), padded = process_features(raw, padded_config);
  ASSERT_EQ(natural.names(), padded.names());
  for (const auto& [name, a] : natural.arrays()) {
    const NpyArray& b = padded.at(name);
    ASSERT_EQ(a.shape.size(), b.shape.size()) << name;
    const size_t item = a.dtype.itemsize, rank = a.shape.size();
    EXPECT_EQ(b.shape.back(), 4) << name;
    // Walk b; map each element to a's multi-index (recycling index clamped to a's last slice).
    std::vector<int64_t> idx(rank, 0);
    for (int64_t k = 0; k < b.numel(); ++k) {
      bool inside = true;
      size_t src = 0;
      for (size_t d = 0; d < rank; ++d) {
        const int64_t v = d + 1 == rank ? std::min(idx[d], a.shape[d] - 1) : idx[d];
        inside = inside && v < a.shape[d];
        src = src * static_cast<size_t>(a.shape[d]) + static_cast<size_t>(std::min(v, a.shape[d] - 1));
      }
      const uint8_t* got = &b.data[static_cast<size_t>(k) * item];
      if (inside) {
        ASSERT_EQ(std::memcmp(got, &a.data[src * item], item), 0) << name << " element " << k;
      } else {
        ASSERT_TRUE(std::all_of(got, got + item, [](uint8_t x) { return x == 0; })) << name << " element " << k;
      }
      for (size_t d = rank; d-- > 0;) {
        if (++idx[d] < b.shape[d]) break;
        idx[d] = 0;
      }
    }
  }
  padded_config.padding.num_res = 3;  // smaller than the chain
  EXPECT_NE(error_of([&] { process_features(raw, padded_config); }).find("smaller"), std::string::npos);
}

TEST(TrainingSample, ContiguousCropIsAWindowAndPaddingIsMasked) {
  const TrainingChain& c = chain_2q2k();
  const TrainingSampleConfig config = small_config();
  for (int64_t s = 0; s < 20; ++s) {
    const FeatureDict f = make_training_sample(c, config, {0, 0, s});
    const std::vector<int64_t> idx = slice<int64_t>(f, "residue_index", 0);
    for (size_t k = 1; k < idx.size(); ++k) EXPECT_EQ(idx[k], idx[k - 1] + 1);
    EXPECT_LE(idx.back(), c.num_res() - 1);
    const std::vector<int64_t> aatype = slice<int64_t>(f, "aatype", 0);
    for (size_t k = 0; k < idx.size(); ++k) EXPECT_EQ(aatype[k], c.aatype[static_cast<size_t>(idx[k])]);
    EXPECT_EQ(slice<int64_t>(f, "seq_length", 0)[0], 32);
  }
  // A crop longer than the chain: all 70 residues, rows 70.. padded with masks 0.
  TrainingSampleConfig big = config;
  big.crop_size = 100;
  const FeatureDict f = make_training_sample(c, big, {0, 0, 0});
  const std::vector<float> seq_mask = slice<float>(f, "seq_mask", 0);
  for (size_t k = 0; k < 100; ++k) EXPECT_EQ(seq_mask[k], k < 70 ? 1.0f : 0.0f);
  EXPECT_EQ(slice<int64_t>(f, "seq_length", 0)[0], 70);
  const std::vector<float> bb = values<float>(f, "backbone_rigid_mask");
  EXPECT_TRUE(std::all_of(bb.begin() + 70, bb.end(), [](float x) { return x == 0; }));
  const std::vector<float> msa_mask = slice<float>(f, "msa_mask", 0);  // [S,100]
  for (size_t s = 0; s < 4; ++s)
    for (size_t k = 70; k < 100; ++k) EXPECT_EQ(msa_mask[s * 100 + k], 0.0f);
}

TEST(TrainingSample, SpatialCropIsTheNearestSetInSequenceOrder) {
  const TrainingChain c = synthetic_chain(3, 4, 0);  // 210 residues
  TrainingSampleConfig config = small_config();
  config.crop_size = 50;
  config.spatial_crop = true;
  const size_t ca = static_cast<size_t>(rc::atom_order("CA"));
  auto ca_dist2 = [&](int64_t a, int64_t b) {
    double d = 0;
    for (size_t k = 0; k < 3; ++k) {
      const double x = c.all_atom_positions[(static_cast<size_t>(a) * 37 + ca) * 3 + k] -
                       c.all_atom_positions[(static_cast<size_t>(b) * 37 + ca) * 3 + k];
      d += x * x;
    }
    return d;
  };
  bool non_contiguous = false;
  for (int64_t s = 0; s < 5; ++s) {
    const std::vector<int64_t> idx = slice<int64_t>(make_training_sample(c, config, {0, 0, s}), "residue_index", 0);
    ASSERT_TRUE(std::is_sorted(idx.begin(), idx.end()));
    non_contiguous = non_contiguous || idx.back() - idx.front() != 49;
    // Some chosen residue is the centre: every chosen residue is at least as near to it as any other.
    bool found = false;
    for (int64_t centre : idx) {
      if (c.all_atom_mask[static_cast<size_t>(centre) * 37 + ca] == 0) continue;
      double max_in = 0, min_out = 1e300;
      const std::set<int64_t> in(idx.begin(), idx.end());
      for (int64_t i = 0; i < c.num_res(); ++i) {
        if (c.all_atom_mask[static_cast<size_t>(i) * 37 + ca] == 0) continue;
        if (in.count(i)) max_in = std::max(max_in, ca_dist2(centre, i));
        else min_out = std::min(min_out, ca_dist2(centre, i));
      }
      if (max_in <= min_out) found = true;
    }
    EXPECT_TRUE(found) << "sample " << s;
  }
  EXPECT_TRUE(non_contiguous);
}

TEST(TrainingSample, ClusterAndExtraRowCounts) {
  const TrainingChain& c = chain_2q2k();
  TrainingSampleConfig config = small_config();
  config.block_delete_msa = false;
  const int64_t depth = c.msa.depth;
  ASSERT_GT(depth, 4);
  const FeatureDict f = make_training_sample(c, config, {0, 0, 0});
  const std::vector<float> rows = slice<float>(f, "msa_row_mask", 0), extra = slice<float>(f, "extra_msa_row_mask", 0);
  EXPECT_EQ(std::accumulate(rows.begin(), rows.end(), 0.0f), 4.0f);
  EXPECT_EQ(std::accumulate(extra.begin(), extra.end(), 0.0f), static_cast<float>(std::min<int64_t>(8, depth - 4)));
  // Cluster 0 is the query (before BERT masking: true_msa).
  const std::vector<int64_t> true_msa = slice<int64_t>(f, "true_msa", 0), idx = slice<int64_t>(f, "residue_index", 0);
  for (size_t k = 0; k < 32; ++k) EXPECT_EQ(true_msa[k], c.aatype[static_cast<size_t>(idx[k])]);
  // Block deletion keeps row 0 and never more rows than there are.
  config.block_delete_msa = true;
  for (int64_t s = 0; s < 10; ++s) {
    const FeatureDict g = make_training_sample(c, config, {0, 0, s});
    const std::vector<float> r = slice<float>(g, "msa_row_mask", 0), e = slice<float>(g, "extra_msa_row_mask", 0);
    EXPECT_GE(r[0], 1.0f);
    EXPECT_LE(std::accumulate(r.begin(), r.end(), 0.0f) + std::accumulate(e.begin(), e.end(), 0.0f), static_cast<float>(depth));
  }
}

TEST(TrainingSample, BlockDeletionRemovesContiguousBlocksAndKeepsTheQuery) {
  msa_tf::MsaRows m;  // 100 rows of 2 residues; the deletion value names the row
  m.num_res = 2;
  for (int r = 0; r < 100; ++r)
    for (int k = 0; k < 2; ++k) {
      m.msa.push_back(r % 20);
      m.deletion.push_back(static_cast<float>(r));
      m.mask.push_back(1.0f);
    }
  for (uint64_t seed = 0; seed < 20; ++seed) {
    msa_tf::PhiloxStream rng(seed, 3);
    const msa_tf::MsaRows out = msa_tf::block_delete_msa(m, {0.3, 5}, rng);
    std::vector<int> kept;
    for (int64_t r = 0; r < out.rows(); ++r) kept.push_back(static_cast<int>(out.deletion[static_cast<size_t>(r) * 2]));
    ASSERT_FALSE(kept.empty());
    EXPECT_EQ(kept[0], 0);
    EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()));
    EXPECT_LT(kept.size(), 100u);  // 5 blocks of 30 rows: at least one row goes
    // Deleted rows form runs of 30 (29 when the block starts at the query), longer where blocks
    // overlap, shorter only where clipped at the end.
    kept.push_back(100);
    for (size_t k = 0; k + 1 < kept.size(); ++k) {
      const int gap = kept[k + 1] - kept[k] - 1;
      if (gap > 0 && kept[k + 1] != 100) {
        EXPECT_GE(gap, 29) << "seed " << seed;
      }
    }
  }
}

TEST(TrainingSample, MaskedMsaRateIsFifteenPercent) {
  const TrainingChain c = synthetic_chain(2, 300, 0);
  TrainingSampleConfig config = small_config();
  config.crop_size = 128;
  config.max_msa_clusters = 64;
  const FeatureDict f = make_training_sample(c, config, {3, 0, 0});
  const NpyArray& bert = f.at("bert_mask");  // [S,C,R]
  const std::vector<float> mask = values<float>(f, "msa_mask"), sel = values<float>(f, "bert_mask");
  double selected = 0, positions = 0;
  const int64_t r_axis = bert.shape.back(), num_rec = values<int64_t>(f, "num_recycles")[0];
  for (int64_t k = 0; k < bert.numel(); ++k) {
    if (k % r_axis > num_rec) continue;  // repeated slices are not independent draws
    positions += mask[static_cast<size_t>(k)];
    selected += sel[static_cast<size_t>(k)] * mask[static_cast<size_t>(k)];
  }
  // Binomial(positions, 0.15): 5 standard deviations.
  const double sd = std::sqrt(positions * 0.15 * 0.85);
  EXPECT_GT(positions, 8000);
  EXPECT_NEAR(selected, 0.15 * positions, 5 * sd) << selected / positions;
}

TEST(TrainingSample, RecyclingCountsClampedFapeAndTemplateCountsAreSampled) {
  const TrainingChain c = synthetic_chain(1, 6, 6);
  TrainingSampleConfig config = small_config();
  config.crop_size = 16;
  std::map<int64_t, int> recycles, num_templates;
  int clamped = 0;
  const int samples = 400;
  for (int s = 0; s < samples; ++s) {
    const FeatureDict f = make_training_sample(c, config, {11, 0, s});
    const int64_t r = values<int64_t>(f, "num_recycles")[0];
    ++recycles[r];
    const float fape = slice<float>(f, "use_clamped_fape", 0)[0];
    clamped += fape == 1.0f;
    // Slices past num_recycles repeat slice num_recycles; earlier ones are separate draws.
    for (int64_t k = r + 1; k <= config.max_recycles; ++k)
      EXPECT_EQ(slice<float>(f, "msa_feat", k), slice<float>(f, "msa_feat", r));
    const std::vector<float> tmask = slice<float>(f, "template_mask", 0);
    const int t = static_cast<int>(std::accumulate(tmask.begin(), tmask.end(), 0.0f));
    ++num_templates[t];
    // Used templates are distinct hits, and their atoms are the crop's (copies of the chain).
    if (t == 2) {
      EXPECT_NE(slice<float>(f, "template_sum_probs", 0)[0], slice<float>(f, "template_sum_probs", 0)[1]);
    }
    if (t >= 1) {
      const std::vector<float> tpos = slice<float>(f, "template_all_atom_positions", 0);
      const std::vector<float> pos = values<float>(f, "all_atom_positions");
      EXPECT_TRUE(std::equal(pos.begin(), pos.end(), tpos.begin()));
    }
  }
  // Uniform on {0..3}: each count 100 ± 5 sd (sd = sqrt(400·0.25·0.75) ≈ 8.7).
  for (int64_t r = 0; r <= 3; ++r) EXPECT_NEAR(recycles[r], samples / 4.0, 5 * 8.7) << "num_recycles " << r;
  EXPECT_EQ(recycles.size(), 4u);
  // Bernoulli(0.9): 360 ± 5 sd (sd = 6).
  EXPECT_NEAR(clamped, 0.9 * samples, 30);
  // k ~ U{0..6}, min(k, 2) used: P(0) = 1/7, P(1) = 1/7, P(2) = 5/7.
  EXPECT_NEAR(num_templates[0], samples / 7.0, 5 * 7.0);
  EXPECT_NEAR(num_templates[1], samples / 7.0, 5 * 7.0);
  EXPECT_NEAR(num_templates[2], samples * 5 / 7.0, 5 * 9.0);
}

TEST(TrainingSample, LabelsOfTheCropAreTheCropOfTheChainLabels) {
  const TrainingChain c = synthetic_chain(3, 4, 0);
  const ChainLabels full = compute_chain_labels(c.aatype, c.all_atom_positions, c.all_atom_mask);
  TrainingSampleConfig config = small_config();
  config.crop_size = 40;
  for (const bool spatial : {false, true}) {
    config.spatial_crop = spatial;
    for (int64_t s = 0; s < 4; ++s) {
      const FeatureDict f = make_training_sample(c, config, {0, 0, s});
      const std::vector<int64_t> idx = slice<int64_t>(f, "residue_index", 0);
      const FeatureDict expected = label_features(full, idx, 40, c.resolution, false);
      for (const auto& [name, array] : expected.arrays()) EXPECT_EQ(f.at(name).data, array.data) << name << " spatial " << spatial;
    }
  }
}

TEST(TrainingSample, BadConfigsAreErrors) {
  TrainingSampleConfig c = small_config();
  c.crop_size = 0;
  EXPECT_NE(error_of([&] { make_training_sample(chain_2q2k(), c, {}); }).find("crop_size"), std::string::npos);
  c = small_config();
  c.clamped_fape_probability = 1.5;
  EXPECT_NE(error_of([&] { make_training_sample(chain_2q2k(), c, {}); }).find("probabilities"), std::string::npos);
  TrainingChain broken = chain_2q2k();
  broken.msa.num_columns = 3;
  EXPECT_NE(error_of([&] { make_training_sample(broken, small_config(), {}); }).find("inconsistent"), std::string::npos);
}

// The loader's budget: crop 256, 128 clusters, 1024 extra rows (initial training) from a chain of
// 350 residues with 1400 MSA rows and 4 templates. Timing is printed; the bound is loose (shared CI).
TEST(TrainingSample, InitialTrainingSampleTime) {
  const TrainingChain c = synthetic_chain(5, 1400, 4);
  const TrainingSampleConfig config = TrainingSampleConfig::initial();
  const int reps = 6;
  size_t bytes = 0;
  const std::clock_t c0 = std::clock();
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < reps; ++s) {
    const FeatureDict f = make_training_sample(c, config, {0, 0, s});
    bytes = 0;
    for (const auto& entry : f.arrays()) bytes += entry.second.data.size();
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
  const double cpu_ms = 1000.0 * static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC / reps;
  std::printf("make_training_sample (N=350 -> crop 256, 1400 MSA rows, 128/1024, 4 templates): %.1f ms/sample wall, "
              "%.1f ms CPU, %.1f MB\n", ms, cpu_ms, static_cast<double>(bytes) / 1e6);
  EXPECT_LT(ms, 2000.0);
}

}  // namespace
}  // namespace foldcore::data
