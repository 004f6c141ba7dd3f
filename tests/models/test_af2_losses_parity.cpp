// Every AlphaFold2 loss term against OpenFold on the training-step fixture
// (../shared/af2/ref/train: losses.json from batch.npz + outputs.npz, fp32, fine-tuning weights,
// use_clamped_fape = 1). The fixture's float64 rerun moves each term by ≤ 4e-7 relative; our
// losses are evaluated in double from the same fp32 outputs, so 1e-5 relative leaves 25× headroom
// for the side-chain frames we rebuild in fp32 and still catches a wrong constant, eps or mask
// (those move terms by ≥ 1e-4; e.g. angle_norm_weight 0.02 instead of 0.01 moves supervised_chi 1e-3).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "af2_loss_fixture.h"
#include "af2_loss_grad_check.h"

namespace foldcore::af2 {
namespace {

constexpr double kRelTol = 1e-5;

nlohmann::json losses_json() {
  std::ifstream f(train_fixture_dir() + "/losses.json");
  EXPECT_TRUE(f.good()) << "cannot read losses.json";
  std::stringstream s;
  s << f.rdbuf();
  return nlohmann::json::parse(s.str());
}

double rel(double got, double want) { return std::abs(got - want) / std::max(std::abs(want), 1e-30); }

struct Fixture {
  Af2LossBatch batch;
  Af2LossOutputs outputs;
  nlohmann::json ref;
  Af2LossConfig config;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    const auto arrays = train_batch_arrays();
    x.batch = Af2LossBatch::from_arrays(arrays);
    x.outputs = train_fixture_outputs(x.batch.aatype);
    x.ref = losses_json();
    x.config.weights = LossWeights::finetune(/*ptm=*/true);
    return x;
  }();
  return f;
}

TEST(Af2LossesParity, FinetuneWeightsMatchFixture) {
  const auto& w = fixture().ref["weights"];
  const LossWeights ours = LossWeights::finetune(true);
  EXPECT_EQ(w["distogram"].get<double>(), ours.distogram);
  EXPECT_EQ(w["experimentally_resolved"].get<double>(), ours.experimentally_resolved);
  EXPECT_EQ(w["fape"].get<double>(), ours.fape);
  EXPECT_EQ(w["plddt_loss"].get<double>(), ours.plddt);
  EXPECT_EQ(w["masked_msa"].get<double>(), ours.masked_msa);
  EXPECT_EQ(w["supervised_chi"].get<double>(), ours.supervised_chi);
  EXPECT_EQ(w["violation"].get<double>(), ours.violation);
  EXPECT_EQ(w["tm"].get<double>(), ours.tm);
  const LossWeights init = LossWeights::initial(false);
  EXPECT_EQ(init.experimentally_resolved, 0.0);
  EXPECT_EQ(init.violation, 0.0);
  EXPECT_EQ(init.tm, 0.0);
  EXPECT_THROW(LossWeights::stage("pretrain", false), Error);
}

TEST(Af2LossesParity, EveryTermAndTotal) {
  const Fixture& f = fixture();
  const Af2Loss loss = af2_loss(f.outputs, f.batch, f.config);
  EXPECT_TRUE(loss.skipped.empty());
  const auto& terms = f.ref["terms"];
  for (const char* name : {"distogram", "experimentally_resolved", "fape", "plddt_loss", "masked_msa",
                           "supervised_chi", "violation", "tm"}) {
    ASSERT_TRUE(loss.terms.count(name)) << name;
    const double want = terms[name].get<double>(), got = loss.terms.at(name);
    std::printf("%-24s ours %.9g  openfold %.9g  rel %.2e\n", name, got, want, rel(got, want));
    EXPECT_LE(rel(got, want), kRelTol) << name << ": " << got << " vs " << want;
  }
  std::printf("%-24s ours %.9g  openfold %.9g  rel %.2e\n", "unscaled_loss", loss.unscaled_loss,
              terms["unscaled_loss"].get<double>(), rel(loss.unscaled_loss, terms["unscaled_loss"].get<double>()));
  std::printf("%-24s ours %.9g  openfold %.9g  rel %.2e\n", "loss", loss.loss, terms["loss"].get<double>(),
              rel(loss.loss, terms["loss"].get<double>()));
  EXPECT_LE(rel(loss.unscaled_loss, terms["unscaled_loss"].get<double>()), kRelTol);
  EXPECT_LE(rel(loss.loss, terms["loss"].get<double>()), kRelTol);
  EXPECT_NEAR(loss.scale, std::sqrt(48.0), 1e-12);
  // Every output the loss reads has a finite gradient of its own shape.
  const auto outs = f.outputs.named();
  const auto grads = loss.grads.named();
  for (size_t k = 0; k < outs.size(); ++k) {
    const auto& [name, grad] = grads[k];
    ASSERT_EQ(grad->shape(), outs[k].second->shape()) << name;
    double norm = 0;
    for (float v : grad->to_vector()) {
      ASSERT_TRUE(std::isfinite(v)) << name;
      norm += static_cast<double>(v) * v;
    }
    // Fine-tuning weights: every term carries gradient; the pLDDT target (final atoms) is detached.
    if (name == "final_atom_positions") {
      EXPECT_EQ(norm, 0) << name;
    } else {
      EXPECT_GT(norm, 0) << name;
    }
  }
}

// Backbone frames given as [L, N, 4, 4] matrices instead of quaternions: the same terms.
TEST(Af2LossesParity, MatrixFramesGiveTheSameTerms) {
  const Fixture& f = fixture();
  Af2LossOutputs o = f.outputs;
  const Tensor q = o.sm_frames.narrow(-1, 0, 4).contiguous(), t = o.sm_frames.narrow(-1, 4, 3).contiguous();
  o.sm_frames = rigid_to_4x4(Rigid{quat_to_rot(q), t}).contiguous();
  const Af2Loss quat = af2_loss(f.outputs, f.batch, f.config), mat = af2_loss(o, f.batch, f.config);
  for (const auto& [name, v] : quat.terms) EXPECT_LE(rel(mat.terms.at(name), v), 1e-6) << name;
  EXPECT_EQ(mat.grads.sm_frames.shape(), o.sm_frames.shape());
}

TEST(Af2LossesParity, ViolationPartsAndRenaming) {
  const Fixture& f = fixture();
  const Af2Loss loss = af2_loss(f.outputs, f.batch, f.config);
  const ViolationLoss& v = loss.violation;
  EXPECT_NEAR(v.value, v.bonds_c_n + v.angles_ca_c_n + v.angles_c_n_ca + v.clash, 1e-9 * v.value);
  // A random-weight model's structure breaks peptide geometry and clashes everywhere.
  EXPECT_GT(v.bonds_c_n, 0);
  EXPECT_GT(v.clash, 0);
  // The renaming only ever picks the alternative for residues that have ambiguous atoms.
  const auto better = loss.renamed.alt_naming_is_better.to_vector();
  const auto amb = f.batch.atom14_atom_is_ambiguous.to_vector();
  for (size_t i = 0; i < better.size(); ++i) {
    double any = 0;
    for (int a = 0; a < 14; ++a) any += amb[14 * i + a];
    if (any == 0) {
      EXPECT_EQ(better[i], 0.f) << i;
    }
  }
}

// The total's gradient (weights, the sqrt(min(seq_length, crop)) scale, the 0.5/0.5 FAPE split, the
// sum of side-chain FAPE and violation on the atom14 positions) against central differences of the
// total, on the fixture, 12 coordinates per output (6 with a nonzero gradient). Steps: logits 1e-3; frames 1e-5 (see
// test_af2_losses_grad.cpp); atom14 positions 1e-4 Å (violation relu kinks are ~1e-2 Å apart at
// worst here). Tolerance as in af2_loss_grad_check.h.
TEST(Af2LossesParity, TotalGradientMatchesFiniteDifferences) {
  const Fixture& f = fixture();
  Af2LossOutputs o = f.outputs;
  for (auto& [name, t] : o.named()) *t = t->clone();  // private copies: the check perturbs them in place
  const Af2Loss base = af2_loss(o, f.batch, f.config);
  auto total = [&] { return af2_loss(o, f.batch, f.config).loss; };
  const auto grads = base.grads.named();
  const auto outs = o.named();
  for (size_t k = 0; k < outs.size(); ++k) {
    const std::string& name = outs[k].first;
    if (name == "final_atom_positions") continue;  // no gradient (checked in EveryTermAndTotal)
    const double h = name.find("frames") != std::string::npos ? 1e-5 : name.find("logits") != std::string::npos ? 1e-3 : 1e-4;
    expect_fd_gradient(total, *outs[k].second, *grads[k].second, "total / " + name, h, 1e-5, 1e-5, 12);
  }
}

// Nothing to score: every mask 0. OpenFold's ε keep every term finite (0), and so every gradient.
TEST(Af2LossesParity, AllMaskedInputsGiveZeroNotNaN) {
  const Fixture& f = fixture();
  Af2LossBatch b = f.batch;
  for (Tensor* m : {&b.seq_mask, &b.pseudo_beta_mask, &b.bert_mask, &b.all_atom_mask, &b.atom37_atom_exists,
                    &b.atom14_atom_exists, &b.atom14_gt_exists, &b.atom14_alt_gt_exists, &b.rigidgroups_gt_exists,
                    &b.backbone_rigid_mask, &b.chi_mask})
    *m = Tensor::zeros(m->shape(), DType::f32);
  const Af2Loss loss = af2_loss(f.outputs, b, f.config);
  EXPECT_TRUE(loss.skipped.empty());
  for (const auto& [name, v] : loss.terms) EXPECT_EQ(v, 0.0) << name;
  EXPECT_EQ(loss.loss, 0.0);
  for (const auto& [name, t] : loss.grads.named())
    for (float v : t->to_vector()) ASSERT_EQ(v, 0.f) << name;
}

// AlphaFold trains pLDDT, experimentally resolved and TM only on chains resolved at 0.1–3.0 Å.
TEST(Af2LossesParity, ResolutionOutsideFilterZeroesConfidenceLosses) {
  const Fixture& f = fixture();
  const Af2Loss in = af2_loss(f.outputs, f.batch, f.config);
  for (float res : {3.01f, 0.09f}) {
    Af2LossBatch b = f.batch;
    b.resolution = Tensor::from_vector({res}, {1});
    const Af2Loss out = af2_loss(f.outputs, b, f.config);
    for (const char* name : {"plddt_loss", "experimentally_resolved", "tm"}) EXPECT_EQ(out.terms.at(name), 0.0) << name;
    for (const char* name : {"distogram", "fape", "masked_msa", "supervised_chi", "violation"})
      EXPECT_EQ(out.terms.at(name), in.terms.at(name)) << name;
    for (const Tensor* t : {&out.grads.lddt_logits, &out.grads.experimentally_resolved_logits, &out.grads.tm_logits})
      for (float v : t->to_vector()) ASSERT_EQ(v, 0.f);
  }
}

// Each constant the parity rests on moves a term far beyond the parity tolerance: the check can fail.
TEST(Af2LossesParity, ParityIsSensitiveToTheConstants) {
  const Fixture& f = fixture();
  const auto& terms = f.ref["terms"];
  Af2LossConfig c = f.config;
  c.supervised_chi.angle_norm_weight = 0.02;  // AF2 paper's eq. 7 value, not OpenFold's config
  EXPECT_GT(rel(af2_loss(f.outputs, f.batch, c).terms.at("supervised_chi"), terms["supervised_chi"].get<double>()),
            100 * kRelTol);
  c = f.config;
  c.fape.clamp_distance = 11.0;
  EXPECT_GT(rel(af2_loss(f.outputs, f.batch, c).terms.at("fape"), terms["fape"].get<double>()), 100 * kRelTol);
  c = f.config;
  c.violation.violation_tolerance_factor = 15.0;
  EXPECT_GT(rel(af2_loss(f.outputs, f.batch, c).terms.at("violation"), terms["violation"].get<double>()),
            100 * kRelTol);
  Af2LossBatch b = f.batch;
  b.use_clamped_fape = Tensor::from_vector({0.f}, {1});
  EXPECT_GT(rel(af2_loss(f.outputs, b, f.config).terms.at("fape"), terms["fape"].get<double>()), 100 * kRelTol);
}

TEST(Af2LossesParity, MissingBatchKeyIsAnError) {
  auto arrays = train_batch_arrays();
  arrays.erase("backbone_rigid_tensor");
  try {
    Af2LossBatch::from_arrays(arrays);
    FAIL() << "expected foldcore::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("backbone_rigid_tensor"), std::string::npos) << e.what();
  }
}

TEST(Af2LossesParity, WrongShapeIsAnError) {
  const Fixture& f = fixture();
  Af2LossOutputs o = f.outputs;
  o.distogram_logits = o.distogram_logits.narrow(-1, 0, 63).contiguous();
  try {
    af2_loss(o, f.batch, f.config);
    FAIL() << "expected foldcore::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("distogram logits"), std::string::npos) << e.what();
  }
  Af2LossBatch b = f.batch;
  b.chi_mask = b.chi_mask.narrow(0, 0, 10).contiguous();
  EXPECT_THROW(af2_loss(f.outputs, b, f.config), Error);
}

}  // namespace
}  // namespace foldcore::af2
