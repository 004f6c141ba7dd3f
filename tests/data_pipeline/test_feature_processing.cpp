// process_features (feature_processing.h) against the AlphaFold reference features
// (../shared/af2/ref/features.npz: OpenFold's processing of query73's DeepMind raw features cropped
// to 40 residues, 32 - 4 clusters, 64 extra rows, 4 templates, 2 iterations) and on the raw features
// our own pipeline builds for query73: layout, deterministic features exactly, MSA features by
// structure, seeding, cluster counts, single-sequence mode, bad inputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <numbers>
#include <set>

#include "data_pipeline/features/feature_processing.h"
#include "data_pipeline/structure/residue_constants.h"
#include "test_util.h"

namespace foldcore::data {
namespace {

std::string shared(const std::string& f) { return testing::shared_dir() + "/" + f; }

FeatureDict read_dict(const std::string& path) {
  NpzReader r(path);
  FeatureDict f;
  for (const std::string& name : r.names()) f.set(name, r.read(name));
  return f;
}

// The first `k` entries of axis `axis`.
NpyArray crop_axis(const NpyArray& a, size_t axis, int64_t k) {
  NpyArray out{a.dtype, a.shape, {}};
  out.shape[axis] = k;
  int64_t outer = 1, inner = static_cast<int64_t>(a.dtype.itemsize);
  for (size_t d = 0; d < axis; ++d) outer *= a.shape[d];
  for (size_t d = axis + 1; d < a.shape.size(); ++d) inner *= a.shape[d];
  for (int64_t o = 0; o < outer; ++o) {
    const uint8_t* src = a.data.data() + o * a.shape[axis] * inner;
    out.data.insert(out.data.end(), src, src + k * inner);
  }
  return out;
}

// query73's DeepMind raw features cropped to the first `k` residues (how the reference was made).
FeatureDict raw_q73_cropped(int64_t k) {
  const FeatureDict raw = read_dict(shared("data/query73/af2_raw_features.npz"));
  const std::map<std::string, size_t> residue_axis = {
      {"aatype", 0}, {"between_segment_residues", 0}, {"residue_index", 0}, {"seq_length", 0},
      {"msa", 1}, {"deletion_matrix_int", 1}, {"num_alignments", 0}, {"template_aatype", 1},
      {"template_all_atom_positions", 1}, {"template_all_atom_masks", 1}};
  FeatureDict out;
  for (const auto& [name, a] : raw.arrays()) {
    const auto it = residue_axis.find(name);
    NpyArray c = it == residue_axis.end() ? a : crop_axis(a, it->second, k);
    if (name == "seq_length") c = NpyArray::from_i32(std::vector<int32_t>(static_cast<size_t>(k), static_cast<int32_t>(k)), {k});
    out.set(name, std::move(c));
  }
  return out;
}

FeatureProcessingConfig ref_config() {
  FeatureProcessingConfig c;
  c.max_msa_clusters = 32;
  c.max_extra_msa = 64;
  c.max_templates = 4;
  c.num_recycles = 1;
  c.seed = 0;
  return c;
}

std::vector<double> values(const NpyArray& a) {
  std::vector<double> out(static_cast<size_t>(a.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (a.dtype == NpyDType::f32()) {
      float v;
      std::memcpy(&v, a.data.data() + 4 * i, 4);
      out[i] = v;
    } else {
      int64_t v;
      std::memcpy(&v, a.data.data() + 8 * i, 8);
      out[i] = static_cast<double>(v);
    }
  }
  return out;
}

// Element [idx..., r] of an array whose last axis is the recycling axis, from a flat index of the
// other axes.
double at(const std::vector<double>& v, const NpyArray& a, int64_t flat, int64_t r) {
  return v[static_cast<size_t>(flat * a.shape.back() + r)];
}

// query73's raw features from our own pipeline (no template hits given: zero templates).
const FeatureDict& q73_raw() {
  static const FeatureDict raw = [] {
    MonomerPipelineOptions o;
    o.fasta_path = shared("data/query73/query.fasta");
    o.msa_dir = shared("data/query73/alignments");
    return run_monomer_pipeline(o).features;
  }();
  return raw;
}

TEST(FeatureProcessing, ReferenceLayoutAndDeterministicFeatures) {
  const FeatureDict ref = read_dict(shared("af2/ref/features.npz"));
  check_processed_layout(ref);  // the layout table is the reference's
  const FeatureDict ours = process_features(raw_q73_cropped(40), ref_config());
  check_processed_layout(ours);
  ASSERT_EQ(ours.names(), ref.names());
  for (const auto& [name, a] : ref.arrays()) {
    EXPECT_EQ(ours.at(name).dtype, a.dtype) << name;
    EXPECT_EQ(ours.at(name).shape, a.shape) << name;
  }
  // Everything not drawn at random equals the reference exactly...
  for (const char* name :
       {"aatype", "residue_index", "seq_length", "template_aatype", "template_all_atom_positions", "template_sum_probs",
        "template_all_atom_mask", "seq_mask", "msa_mask", "msa_row_mask", "template_mask", "template_pseudo_beta",
        "template_pseudo_beta_mask", "template_torsion_angles_mask", "atom14_atom_exists", "residx_atom14_to_atom37",
        "residx_atom37_to_atom14", "atom37_atom_exists", "extra_msa_mask", "extra_msa_row_mask", "target_feat",
        "use_clamped_fape"})
    EXPECT_TRUE(ours.at(name).data == ref.at(name).data) << name << " differs from the reference";
  // ...the torsion angles up to fp32 rounding (same formula and operation order).
  for (const char* name : {"template_torsion_angles_sin_cos", "template_alt_torsion_angles_sin_cos"}) {
    const std::vector<double> a = values(ours.at(name)), b = values(ref.at(name));
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
    EXPECT_LT(worst, 1e-5) << name;
  }
}

// The rows of every true_msa / extra_msa slice come from the raw MSA in AlphaFold restype order,
// row 0 is the query, and msa_feat's one-hot is the true MSA wherever BERT left it alone: for the
// reference and for ours alike (checks correct_msa_restypes and the MSA wiring).
TEST(FeatureProcessing, MsaRowsComeFromTheRawMsa) {
  const FeatureDict raw = raw_q73_cropped(40);
  const NpyArray& msa = raw.at("msa");
  const int64_t n = msa.shape[1];
  std::set<std::vector<int64_t>> raw_rows;
  const int32_t* codes = msa.as<int32_t>();
  for (int64_t s = 0; s < msa.shape[0]; ++s) {
    std::vector<int64_t> row(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) row[static_cast<size_t>(i)] = rc::kMapHhblitsAatypeToOurAatype[static_cast<size_t>(codes[s * n + i])];
    raw_rows.insert(row);
  }
  const FeatureDict ref = read_dict(shared("af2/ref/features.npz"));
  const FeatureDict ours = process_features(raw, ref_config());
  for (const FeatureDict* f : {&ref, &ours}) {
    const std::string who = f == &ref ? "reference" : "ours";
    const std::vector<double> aatype = values(f->at("aatype"));
    for (const char* key : {"true_msa", "extra_msa"}) {
      const NpyArray& a = f->at(key);
      const std::vector<double> v = values(a);
      for (int64_t r = 0; r < a.shape.back(); ++r)
        for (int64_t s = 0; s < a.shape[0]; ++s) {
          std::vector<int64_t> row(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) row[static_cast<size_t>(i)] = static_cast<int64_t>(at(v, a, s * n + i, r));
          EXPECT_TRUE(raw_rows.count(row)) << who << " " << key << " row " << s << " iteration " << r;
          if (std::string(key) == "true_msa" && s == 0) {
            for (int64_t i = 0; i < n; ++i) EXPECT_EQ(row[static_cast<size_t>(i)], at(aatype, f->at("aatype"), i, r)) << who;
          }
        }
    }
    const NpyArray& feat = f->at("msa_feat");
    const std::vector<double> mf = values(feat), tm = values(f->at("true_msa")), bm = values(f->at("bert_mask"));
    double selected = 0, mask_token = 0;
    for (int64_t r = 0; r < feat.shape.back(); ++r)
      for (int64_t cell = 0; cell < feat.shape[0] * n; ++cell) {
        int64_t tok = -1;
        for (int64_t c = 0; c < 23; ++c)
          if (at(mf, feat, cell * 49 + c, r) == 1.0) tok = c;
        if (at(bm, f->at("bert_mask"), cell, r) == 0.0) EXPECT_EQ(tok, at(tm, f->at("true_msa"), cell, r)) << who;
        else {
          ++selected;
          mask_token += tok == 22;
        }
      }
    // ~15 % selected, ~70 % of those the mask token (2240 positions: σ ≈ 0.008 and 0.03).
    const double total = static_cast<double>(feat.shape[0] * n * feat.shape.back());
    EXPECT_NEAR(selected / total, 0.15, 0.035) << who;
    EXPECT_NEAR(mask_token / selected, 0.7, 0.12) << who;
  }
}

// Structure of msa_feat and the other per-iteration features on query73 (our pipeline's raw
// features, N = 73, 1136 rows, no templates), with AlphaFold's default sizes.
TEST(FeatureProcessing, Query73MsaFeatStructure) {
  FeatureProcessingConfig config;  // 512 - 4 clusters, 5120 extra, 4 recycles
  config.num_recycles = 1;
  const FeatureDict f = process_features(q73_raw(), config);
  check_processed_layout(f);
  const int64_t n = 73, rows = q73_raw().at("msa").shape[0];
  ASSERT_EQ(f.at("msa_feat").shape, (std::vector<int64_t>{508, n, 49, 2}));
  ASSERT_EQ(f.at("extra_msa").shape, (std::vector<int64_t>{rows - 508, n, 2}));
  ASSERT_EQ(f.at("template_aatype").shape, (std::vector<int64_t>{1, n, 2}));  // one masked template
  for (double m : values(f.at("template_mask"))) EXPECT_EQ(m, 0.0);
  const NpyArray& feat = f.at("msa_feat");
  const std::vector<double> mf = values(feat), bm = values(f.at("bert_mask")), aa = values(f.at("aatype"));
  const std::vector<double> tf = values(f.at("target_feat"));
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t cell = 0; cell < 508 * n; ++cell) {
      auto ch = [&](int64_t c) { return at(mf, feat, cell * 49 + c, r); };
      double one_hot = 0, profile = 0;
      for (int64_t c = 0; c < 23; ++c) one_hot += ch(c);
      for (int64_t c = 25; c < 48; ++c) {
        EXPECT_GE(ch(c), 0.0);
        profile += ch(c);
      }
      ASSERT_EQ(one_hot, 1.0) << cell;
      ASSERT_NEAR(profile, 1.0, 1e-5) << cell;
      // has_deletion = clip(d, 0, 1), deletion_value = 2/π atan(d/3) for an integer count d ≥ 0.
      const double d = std::round(3.0 * std::tan(ch(24) * std::numbers::pi / 2));
      ASSERT_NEAR(ch(24), std::atan(d / 3.0) * 2 / std::numbers::pi, 1e-6) << cell;
      ASSERT_EQ(ch(23), std::min(d, 1.0)) << cell;
      ASSERT_GE(ch(48), 0.0);
      ASSERT_LT(ch(48), 1.0);
      if (cell < n) {  // row 0: the query, no deletions, its own residue unless BERT-replaced
        EXPECT_EQ(ch(23), 0.0);
        if (at(bm, f.at("bert_mask"), cell, r) == 0.0) {
          EXPECT_EQ(ch(static_cast<int64_t>(at(aa, f.at("aatype"), cell, r))), 1.0);
        }
      }
    }
    for (int64_t i = 0; i < n; ++i) {  // target_feat = [between_segment_residues, one_hot(aatype, 21)]
      const int64_t a = static_cast<int64_t>(at(aa, f.at("aatype"), i, r));
      double sum = 0;
      for (int64_t c = 0; c < 22; ++c) sum += at(tf, f.at("target_feat"), i * 22 + c, r);
      EXPECT_EQ(sum, 1.0);
      EXPECT_EQ(at(tf, f.at("target_feat"), i * 22 + 1 + a, r), 1.0);
    }
  }
  // The atom maps follow the residue's atom names.
  const std::vector<double> e14 = values(f.at("atom14_atom_exists")), m14 = values(f.at("residx_atom14_to_atom37"));
  const std::vector<double> e37 = values(f.at("atom37_atom_exists")), m37 = values(f.at("residx_atom37_to_atom14"));
  for (int64_t i = 0; i < n; ++i) {
    const int a = static_cast<int>(at(aa, f.at("aatype"), i, 0));
    std::set<int> present;
    for (int j = 0; j < 14; ++j) {
      const std::string_view name = rc::kRestypeAtom14Names[static_cast<size_t>(a)][static_cast<size_t>(j)];
      EXPECT_EQ(at(e14, f.at("atom14_atom_exists"), i * 14 + j, 0), name.empty() ? 0.0 : 1.0);
      EXPECT_EQ(at(m14, f.at("residx_atom14_to_atom37"), i * 14 + j, 0), name.empty() ? 0 : rc::atom_order(name));
      if (!name.empty()) {
        present.insert(rc::atom_order(name));
        EXPECT_EQ(at(m37, f.at("residx_atom37_to_atom14"), i * 37 + rc::atom_order(name), 0), j);
      }
    }
    for (int k = 0; k < 37; ++k) EXPECT_EQ(at(e37, f.at("atom37_atom_exists"), i * 37 + k, 0), present.count(k) ? 1.0 : 0.0);
  }
}

TEST(FeatureProcessing, SeededDeterministicAndPerIteration) {
  FeatureProcessingConfig c;
  c.max_msa_clusters = 64;
  c.max_extra_msa = 128;
  c.num_recycles = 2;
  c.seed = 17;
  const FeatureDict a = process_features(q73_raw(), c), b = process_features(q73_raw(), c);
  for (const auto& [name, arr] : a.arrays()) EXPECT_TRUE(arr.data == b.at(name).data) << name;
  c.seed = 18;
  const FeatureDict other = process_features(q73_raw(), c);
  for (const char* name : {"msa_feat", "true_msa", "bert_mask", "extra_msa"})
    EXPECT_FALSE(a.at(name).data == other.at(name).data) << name << " ignores the seed";
  // Iterations differ in the drawn features and agree in the others.
  for (const auto& [name, arr] : a.arrays()) {
    const std::vector<double> v = values(arr);
    const int64_t per = arr.numel() / 3;
    bool same01 = true, same12 = true;
    for (int64_t k = 0; k < per; ++k) {
      same01 &= at(v, arr, k, 0) == at(v, arr, k, 1);
      same12 &= at(v, arr, k, 1) == at(v, arr, k, 2);
    }
    const bool drawn = name == "msa_feat" || name == "true_msa" || name == "bert_mask" || name == "extra_msa" ||
                       name == "extra_has_deletion" || name == "extra_deletion_value";
    EXPECT_EQ(same01 && same12, !drawn) << name;
  }
}

TEST(FeatureProcessing, ClusterAndTemplateCounts) {
  const FeatureDict raw = raw_q73_cropped(40);  // 1136 rows, 8 templates
  const int64_t rows = raw.at("msa").shape[0];
  auto dims = [](const FeatureDict& f) {
    return std::vector<int64_t>{f.at("msa_feat").shape[0], f.at("extra_msa").shape[0],
                                f.contains("template_aatype") ? f.at("template_aatype").shape[0] : -1};
  };
  FeatureProcessingConfig c = ref_config();
  c.num_recycles = 0;
  EXPECT_EQ(dims(process_features(raw, c)), (std::vector<int64_t>{28, 64, 4}));
  c.reduce_msa_clusters_by_max_templates = false;
  EXPECT_EQ(dims(process_features(raw, c)), (std::vector<int64_t>{32, 64, 4}));
  c.reduce_msa_clusters_by_max_templates = true;
  c.max_templates = 2;
  EXPECT_EQ(dims(process_features(raw, c)), (std::vector<int64_t>{30, 64, 2}));
  c.use_templates = false;  // no template keys; clusters not reduced
  const FeatureDict no_t = process_features(raw, c);
  check_processed_layout(no_t);
  EXPECT_EQ(dims(no_t), (std::vector<int64_t>{32, 64, -1}));
  c.use_templates = true;
  c.max_extra_msa = 100000;
  EXPECT_EQ(dims(process_features(raw, c)), (std::vector<int64_t>{30, rows - 30, 2}));
  // More clusters than rows: every row is a centre; the extra MSA is one fully masked row.
  c.max_msa_clusters = rows + 10;
  const FeatureDict all = process_features(raw, c);
  EXPECT_EQ(dims(all), (std::vector<int64_t>{rows, 1, 2}));
  for (double m : values(all.at("extra_msa_mask"))) EXPECT_EQ(m, 0.0);
  for (double m : values(all.at("extra_msa_row_mask"))) EXPECT_EQ(m, 0.0);
  // Zero templates in the raw features (our pipeline without hits): one fully masked template.
  FeatureProcessingConfig d = ref_config();
  const FeatureDict none = process_features(q73_raw(), d);
  EXPECT_EQ(dims(none), (std::vector<int64_t>{28, 64, 1}));
  for (double v : values(none.at("template_all_atom_mask"))) EXPECT_EQ(v, 0.0);
}

// Synthetic raw features where each row is identifiable and deletion[row, col] = row + col: with
// every row a centre, each cluster is its centre alone, so the deletion channels are known exactly.
TEST(FeatureProcessing, SyntheticDeletionChannels) {
  const int64_t rows = 6, n = 5;
  FeatureDict raw = make_sequence_features("ACDEF", "synthetic");
  std::vector<int32_t> msa(static_cast<size_t>(rows * n)), del(msa.size());
  for (int64_t s = 0; s < rows; ++s)
    for (int64_t i = 0; i < n; ++i) {
      // HHblits codes: row 0 the query A C D E F = 0 1 2 3 4; row s shifts column 0 by s.
      msa[static_cast<size_t>(s * n + i)] = static_cast<int32_t>(i == 0 ? s : i);
      del[static_cast<size_t>(s * n + i)] = static_cast<int32_t>(s == 0 ? 0 : s + i);
    }
  raw.set("deletion_matrix_int", NpyArray::from_i32(del, {rows, n}));
  raw.set("msa", NpyArray::from_i32(msa, {rows, n}));
  raw.update(empty_template_features(n));
  FeatureProcessingConfig c;
  c.num_recycles = 3;
  c.masked_msa.replace_fraction = 0.5;  // make BERT visible in the profile too
  const FeatureDict f = process_features(raw, c);
  const NpyArray& feat = f.at("msa_feat");
  ASSERT_EQ(feat.shape, (std::vector<int64_t>{rows, n, 49, 4}));
  const std::vector<double> mf = values(feat), tm = values(f.at("true_msa"));
  const double eps = 1e-6;
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t s = 0; s < rows; ++s) {
      // Column 0's HHblits code s identifies the source row (codes 0..5 = A C D E F G → restypes).
      const int64_t tok0 = static_cast<int64_t>(at(tm, f.at("true_msa"), s * n, r));
      int64_t src = -1;
      for (int64_t k = 0; k < rows; ++k)
        if (rc::kMapHhblitsAatypeToOurAatype[static_cast<size_t>(k)] == tok0) src = k;
      ASSERT_GE(src, 0);
      if (s == 0) {
        EXPECT_EQ(src, 0);
      }
      for (int64_t i = 0; i < n; ++i) {
        const double d = src == 0 ? 0.0 : static_cast<double>(src + i);
        auto ch = [&](int64_t c2) { return at(mf, feat, (s * n + i) * 49 + c2, r); };
        EXPECT_EQ(ch(23), std::min(d, 1.0));
        EXPECT_NEAR(ch(24), std::atan(d / 3) * 2 / std::numbers::pi, 1e-6);
        EXPECT_NEAR(ch(48), std::atan(d / (1 + eps) / 3) * 2 / std::numbers::pi, 1e-6);
        for (int64_t t = 0; t < 23; ++t) EXPECT_NEAR(ch(25 + t), ch(t) / (1 + eps), 1e-7);  // profile = own one-hot
      }
    }
}

TEST(FeatureProcessing, SingleSequenceMode) {
  const FeatureDict raw = single_sequence_raw_features("MKVLAAGW", "single");
  EXPECT_EQ(raw.at("msa").shape, (std::vector<int64_t>{1, 8}));
  FeatureProcessingConfig c;
  const FeatureDict f = process_features(raw, c);
  check_processed_layout(f);
  EXPECT_EQ(f.at("msa_feat").shape, (std::vector<int64_t>{1, 8, 49, 4}));
  EXPECT_EQ(f.at("extra_msa").shape, (std::vector<int64_t>{1, 8, 4}));
  for (double m : values(f.at("extra_msa_row_mask"))) EXPECT_EQ(m, 0.0);
  EXPECT_EQ(f.at("template_mask").shape, (std::vector<int64_t>{1, 4}));
  for (double m : values(f.at("template_mask"))) EXPECT_EQ(m, 0.0);
  // The option on full raw features: the query row alone, no templates.
  FeatureProcessingConfig s = ref_config();
  s.single_sequence = true;
  const FeatureDict q = process_features(raw_q73_cropped(40), s);
  EXPECT_EQ(q.at("msa_feat").shape, (std::vector<int64_t>{1, 40, 49, 2}));
  EXPECT_EQ(q.at("template_aatype").shape, (std::vector<int64_t>{1, 40, 2}));
  for (double m : values(q.at("template_mask"))) EXPECT_EQ(m, 0.0);
  const std::vector<double> tm = values(q.at("true_msa")), aa = values(q.at("aatype"));
  EXPECT_EQ(tm, aa);  // [1,N,R] and [N,R]: the same numbers
}

TEST(FeatureProcessing, BadInputsAndLayoutErrors) {
  auto error_of = [](const std::function<void()>& fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const FeatureDict good = single_sequence_raw_features("MKV", "x");
  FeatureProcessingConfig c;
  FeatureDict no_msa;
  for (const auto& [name, a] : good.arrays())
    if (name != "msa") no_msa.set(name, a);
  EXPECT_NE(error_of([&] { process_features(no_msa, c); }).find("'msa'"), std::string::npos);
  FeatureDict bad_code = good;
  bad_code.set("msa", NpyArray::from_i32({0, 22, 1}, {1, 3}));
  EXPECT_NE(error_of([&] { process_features(bad_code, c); }).find("msa code 22"), std::string::npos);
  FeatureDict bad_width = good;
  bad_width.set("msa", NpyArray::from_i32({0, 1}, {1, 2}));
  bad_width.set("deletion_matrix_int", NpyArray::from_i32({0, 0}, {1, 2}));
  EXPECT_NE(error_of([&] { process_features(bad_width, c); }).find("[1,2]"), std::string::npos);
  FeatureDict bad_templates = good;
  bad_templates.set("template_all_atom_positions", NpyArray::from_f32(std::vector<float>(4 * 37 * 3), {1, 4, 37, 3}));
  EXPECT_NE(error_of([&] { process_features(bad_templates, c); }).find("template_all_atom_positions"), std::string::npos);
  FeatureProcessingConfig neg = c;
  neg.num_recycles = -1;
  EXPECT_NE(error_of([&] { process_features(good, neg); }), "");
  FeatureProcessingConfig no_clusters = c;
  no_clusters.max_msa_clusters = 4;
  EXPECT_NE(error_of([&] { process_features(good, no_clusters); }).find("no cluster"), std::string::npos);

  FeatureDict out = process_features(good, c);
  FeatureDict wrong_dtype = out;
  wrong_dtype.set("aatype", NpyArray::from_i32({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {3, 4}));
  EXPECT_NE(error_of([&] { check_processed_layout(wrong_dtype); }).find("'aatype'"), std::string::npos);
  FeatureDict wrong_n = out;
  wrong_n.set("seq_mask", NpyArray::from_f32(std::vector<float>(8, 1.0f), {2, 4}));
  EXPECT_NE(error_of([&] { check_processed_layout(wrong_n); }).find("'seq_mask'"), std::string::npos);
  EXPECT_NE(error_of([&] { write_processed_features("/tmp/never_written.npz", wrong_n); }), "");
  EXPECT_FALSE(std::filesystem::exists("/tmp/never_written.npz"));

  // Round trip through the .npz writer.
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("foldcore_processed_" + std::to_string(::getpid()) + ".npz")).string();
  write_processed_features(path, out);
  const FeatureDict back = read_dict(path);
  std::filesystem::remove(path);
  ASSERT_EQ(back.names(), out.names());
  for (const auto& [name, a] : out.arrays()) {
    EXPECT_EQ(back.at(name).shape, a.shape) << name;
    EXPECT_TRUE(back.at(name).data == a.data) << name;
  }
}

}  // namespace
}  // namespace foldcore::data
