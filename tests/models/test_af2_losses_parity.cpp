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
  const Af2LossOutputs& g = loss.grads;
  for (const auto& [grad, out] : {std::pair{&g.sm_frames, &f.outputs.sm_frames}, {&g.sm_angles, &f.outputs.sm_angles},
                                  {&g.sm_unnormalized_angles, &f.outputs.sm_unnormalized_angles},
                                  {&g.sidechain_frames, &f.outputs.sidechain_frames},
                                  {&g.atom14_positions, &f.outputs.atom14_positions},
                                  {&g.distogram_logits, &f.outputs.distogram_logits},
                                  {&g.masked_msa_logits, &f.outputs.masked_msa_logits},
                                  {&g.lddt_logits, &f.outputs.lddt_logits},
                                  {&g.experimentally_resolved_logits, &f.outputs.experimentally_resolved_logits},
                                  {&g.tm_logits, &f.outputs.tm_logits}}) {
    ASSERT_EQ(grad->shape(), out->shape());
    double norm = 0;
    for (float v : grad->to_vector()) {
      ASSERT_TRUE(std::isfinite(v));
      norm += static_cast<double>(v) * v;
    }
    EXPECT_GT(norm, 0);  // fine-tuning weights: every term carries gradient
  }
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
