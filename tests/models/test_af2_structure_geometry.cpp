// Backward of the differentiable structure-module geometry (structure_geometry.h) and of the whole
// structure module against central finite differences.
//
// The forwards are fp32 host math, so the differences are taken in fp32: L = Σ w·output (w fixed
// random weights, the sum in double), fd = (L(x + h) − L(x − h)) / (the step the f32 input actually
// took). Error budget: rounding of L (~1e-7·Σ|w·out|) over the step, plus O(h²) truncation. The
// tolerance |fd − g| ≤ tol·(max|g| + |fd|) is set an order of magnitude above the worst error seen
// (printed); a wrong sign, transposition or missing term moves a gradient by O(max|g|) and fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "af2_test_util.h"
#include "core/random.h"
#include "models/alphafold/structure/rigid.h"
#include "models/alphafold/structure/structure_geometry.h"
#include "models/alphafold/structure/structure_module.h"

namespace foldcore::af2 {
namespace {

namespace ag = autograd;

Tensor rand_tensor(const Shape& s, Generator& g, float scale) { return randn(s, g, 0.f, scale); }

// Σ w·x in double (f32 CPU tensors of equal shape).
double dot(const Tensor& w, const Tensor& x) {
  const Tensor a = host_f32(w), b = host_f32(x);
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += static_cast<double>(a.data<float>()[i]) * b.data<float>()[i];
  return s;
}

// A function of some leaf inputs to some outputs, checked at every listed coordinate.
struct FdCase {
  std::vector<Tensor> inputs;                                              // f32 CPU, modified in place by the check
  std::function<std::vector<Variable>(const std::vector<Variable>&)> f;  // the forward
  // Where input k's gradient ends up (default: its leaf's grad).
  std::function<Tensor(size_t k, const Variable& leaf)> grad_of = {};
};

// Returns the worst |fd − g| / (max|g| + |fd|) over every coordinate of every input.
double check_fd(FdCase& c, float h, uint64_t seed, int max_coords_per_input = 1 << 30) {
  std::vector<Variable> leaves;
  for (const Tensor& t : c.inputs) leaves.emplace_back(t, true);
  const std::vector<Variable> outs = c.f(leaves);
  Generator g(seed);
  std::vector<Tensor> w;
  for (const Variable& o : outs) w.push_back(rand_tensor(o.shape(), g, 1.f));
  ag::backward(outs, w);
  auto loss = [&] {
    ag::NoGradGuard ng;
    std::vector<Variable> in;
    for (const Tensor& t : c.inputs) in.emplace_back(t);
    const std::vector<Variable> o = c.f(in);
    double s = 0;
    for (size_t k = 0; k < o.size(); ++k) s += dot(w[k], o[k].value());
    return s;
  };
  double worst = 0;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const Tensor gk = c.grad_of ? c.grad_of(k, leaves[k]) : leaves[k].grad();
    const Tensor grad = gk.defined() ? host_f32(gk) : Tensor::zeros(c.inputs[k].shape(), DType::f32);
    double gmax = 0;
    for (float v : grad.to_vector()) gmax = std::max(gmax, static_cast<double>(std::fabs(v)));
    float* x = c.inputs[k].data<float>();
    const int64_t step = std::max<int64_t>(1, c.inputs[k].numel() / max_coords_per_input);
    for (int64_t i = 0; i < c.inputs[k].numel(); i += step) {
      const float x0 = x[i];
      x[i] = x0 + h;
      const float xp = x[i];
      const double lp = loss();
      x[i] = x0 - h;
      const float xm = x[i];
      const double lm = loss();
      x[i] = x0;
      const double fd = (lp - lm) / (static_cast<double>(xp) - xm);
      const double gi = grad.data<float>()[i];
      const double err = std::fabs(fd - gi) / (gmax + std::fabs(fd) + 1e-30);
      EXPECT_TRUE(std::isfinite(err)) << "input " << k << " coordinate " << i;
      if (std::getenv("FD_DEBUG") && err > 1e-3)
        std::printf("  input %zu [%lld]: fd %.6g grad %.6g (max|g| %.3g)\n", k, static_cast<long long>(i), fd, gi, gmax);
      worst = std::max(worst, err);
    }
  }
  return worst;
}

// Residue types with every χ count: ALA 0, ARG 1 (χ1..χ4), GLY 7, LYS 11, PHE 13, TRP 17, UNK 20.
Tensor test_aatype() { return Tensor::from_vector_i64({0, 1, 7, 11, 13, 17, 20}, {7}); }

TEST(Af2StructureGeometry, PreComposeBackward) {
  Generator g(3);
  Tensor q = normalize_quat(rand_tensor({6, 4}, g, 1.f));
  FdCase c{{q, rand_tensor({6, 3}, g, 1.f), rand_tensor({6, 6}, g, 0.5f)}, [](const std::vector<Variable>& x) {
             const QuatFrameVar f = pre_compose_var({x[0], x[1]}, x[2]);
             return std::vector<Variable>{f.quat, f.trans};
           }};
  const double worst = check_fd(c, 1e-2f, 11);
  std::printf("pre_compose worst %.2e\n", worst);
  EXPECT_LE(worst, 2e-4);
}

TEST(Af2StructureGeometry, QuatToRotBackward) {
  Generator g(4);
  FdCase c{{rand_tensor({5, 4}, g, 1.f)},
           [](const std::vector<Variable>& x) { return std::vector<Variable>{quat_to_rot_var(x[0])}; }};
  const double worst = check_fd(c, 1e-2f, 12);
  std::printf("quat_to_rot worst %.2e\n", worst);
  EXPECT_LE(worst, 2e-4);
}

TEST(Af2StructureGeometry, TorsionFramesAndAtom14Backward) {
  Generator g(5);
  const Tensor aatype = test_aatype();
  const int64_t n = aatype.size(0);
  Tensor rot = quat_to_rot(normalize_quat(rand_tensor({n, 4}, g, 1.f)));
  // Angles off the unit circle on purpose: the function uses (sin, cos) as given.
  FdCase frames{{rot, rand_tensor({n, 3}, g, 5.f), rand_tensor({n, 7, 2}, g, 1.f)},
                [&](const std::vector<Variable>& x) {
                  const RigidVar r = torsion_angles_to_frames_var(aatype, {x[0], x[1]}, x[2]);
                  return std::vector<Variable>{r.rot, r.trans};
                }};
  const double w1 = check_fd(frames, 1e-2f, 13);
  FdCase atoms{{rand_tensor({n, 8, 3, 3}, g, 1.f), rand_tensor({n, 8, 3}, g, 5.f)},
               [&](const std::vector<Variable>& x) {
                 return std::vector<Variable>{frames_to_atom14_positions_var(aatype, {x[0], x[1]})};
               }};
  const double w2 = check_fd(atoms, 1e-2f, 14);
  // The composition, as the structure module runs it.
  FdCase both{{rot, rand_tensor({n, 3}, g, 5.f), rand_tensor({n, 7, 2}, g, 1.f)},
              [&](const std::vector<Variable>& x) {
                const RigidVar r = torsion_angles_to_frames_var(aatype, {x[0], x[1]}, x[2]);
                return std::vector<Variable>{frames_to_atom14_positions_var(aatype, r)};
              }};
  const double w3 = check_fd(both, 1e-2f, 15);
  std::printf("torsion→frames worst %.2e, frames→atom14 %.2e, composed %.2e\n", w1, w2, w3);
  EXPECT_LE(w1, 2e-4);
  EXPECT_LE(w2, 2e-4);
  EXPECT_LE(w3, 2e-4);
}

TEST(Af2StructureGeometry, BadInputIsAnError) {
  const Tensor aatype = Tensor::from_vector_i64({0, 25}, {2});
  const Variable rot(Tensor::zeros({2, 3, 3}, DType::f32)), trans(Tensor::zeros({2, 3}, DType::f32));
  const Variable ang(Tensor::zeros({2, 7, 2}, DType::f32));
  EXPECT_THROW(torsion_angles_to_frames_var(aatype, {rot, trans}, ang), Error);
  EXPECT_THROW(torsion_angles_to_frames_var(test_aatype(), {rot, trans}, ang), Error);
  EXPECT_THROW(pre_compose_var({Variable(Tensor::zeros({2, 4}, DType::f32)), trans},
                               Variable(Tensor::zeros({2, 5}, DType::f32))),
               Error);
}

// The whole structure module (small widths, random weights) on a random single/pair: gradients of
// every per-layer output w.r.t. the inputs and a sample of the parameters.
struct SmallModule {
  explicit SmallModule(bool stop_rotation_gradient, int64_t layers) {
    cfg.c_s = 8;
    cfg.c_z = 4;
    cfg.num_layers = layers;
    cfg.num_head = 2;
    cfg.num_scalar_qk = 4;
    cfg.num_scalar_v = 4;
    cfg.num_point_qk = 2;
    cfg.num_point_v = 2;
    cfg.num_transition_layers = 2;
    cfg.sidechain_channels = 8;
    cfg.sidechain_residual_blocks = 1;
    cfg.dropout = 0.f;
    cfg.stop_rotation_gradient = stop_rotation_gradient;
    sm = std::make_unique<StructureModule>(env.scope("structure_module"), cfg);
    env.ps.finalize();
    sm->train(false);
    Generator g(21);
    for (auto [name, v] : env.ps.named_values()) v.copy_(randn(v.shape(), g, 0.f, 0.3f));
  }
  StructureModuleConfig cfg;
  Env env;
  std::unique_ptr<StructureModule> sm;
};

double module_fd(SmallModule& m, uint64_t seed) {
  Generator g(seed);
  const Tensor aatype = test_aatype();
  const int64_t n = aatype.size(0);
  // Inputs and a sample of parameters (the ones the geometry feeds back into, and the trunk-facing ones).
  std::vector<std::string> picked;
  for (const std::string& name : m.env.ps.names())
    for (const char* part : {"affine_update", "trainable_point_weights", "unnormalized_angles/weight",
                             "q_point_local/weight", "kv_point_local/bias", "initial_projection/bias"})
      if (name.find(part) != std::string::npos) picked.push_back(name);
  EXPECT_GE(picked.size(), 6u);
  FdCase c;
  c.inputs = {rand_tensor({n, m.cfg.c_s}, g, 1.f), rand_tensor({n, n, m.cfg.c_z}, g, 1.f)};
  for (const std::string& name : picked) c.inputs.push_back(m.env.ps.get(name).value().clone());
  c.f = [&](const std::vector<Variable>& x) {
    // Parameters are ParamStore views: copy the (perturbed) input in, and route their gradient out below.
    for (size_t k = 0; k < picked.size(); ++k) {
      Tensor p = m.env.ps.get(picked[k]).value();
      p.copy_(x[2 + k].value());
    }
    StructureModuleInputs in{x[0], x[1], aatype, {}, {}, {}};
    const StructureModuleOutputs o = m.sm->forward(in);
    std::vector<Variable> outs;
    for (size_t l = 0; l < o.frames_vars.size(); ++l) {
      outs.push_back(o.frames_vars[l].quat);
      outs.push_back(o.frames_vars[l].trans);
      outs.push_back(o.angles_vars[l]);
      outs.push_back(o.unnormalized_angles_vars[l]);
      outs.push_back(o.positions_vars[l]);
    }
    outs.push_back(o.sidechain_frames_vars.back().rot);
    outs.push_back(o.sidechain_frames_vars.back().trans);
    outs.push_back(o.single);
    return outs;
  };
  // The parameters' leaves in check_fd are copies whose values go into the ParamStore; their
  // gradients land in the ParamStore's flat gradient buffer.
  c.grad_of = [&](size_t k, const Variable& leaf) {
    return k < 2 ? leaf.grad() : m.env.ps.get(picked[k - 2]).grad();
  };
  m.env.ps.zero_grad();
  // h = 3e-2: through LayerNorms, IPA and 1–3 layers the f32 rounding of L dominates the error
  // (from h = 3e-3 to 3e-2 the worst error fell 10×, the 1/h signature of rounding, not of a wrong
  // derivative); the O(h²) truncation stays below it.
  return check_fd(c, 3e-2f, seed + 1, 12);
}

TEST(Af2StructureGeometry, WholeModuleFullChainMatchesFiniteDifferences) {
  SmallModule m(/*stop_rotation_gradient=*/false, /*layers=*/3);
  const double worst = module_fd(m, 31);
  std::printf("structure module (3 layers, full chain) worst %.2e\n", worst);
  EXPECT_LE(worst, 1e-2);
}

TEST(Af2StructureGeometry, WholeModuleOneLayerWithStopGradient) {
  // One layer: the detached rotation is the identity constant, so the gradient is exact.
  SmallModule m(/*stop_rotation_gradient=*/true, /*layers=*/1);
  const double worst = module_fd(m, 41);
  std::printf("structure module (1 layer, AF2 stop-gradient) worst %.2e\n", worst);
  EXPECT_LE(worst, 1e-2);
}

TEST(Af2StructureGeometry, StopGradientCutsTheRotationPath) {
  // Three layers with AF2's stop-gradient: the rotations of layers 1, 2 are constants to the
  // backward but not to the finite differences, so the two must disagree clearly.
  SmallModule m(/*stop_rotation_gradient=*/true, /*layers=*/3);
  const double worst = module_fd(m, 31);
  std::printf("structure module (3 layers, AF2 stop-gradient) vs full-chain differences %.2e\n", worst);
  EXPECT_GE(worst, 0.1);
}

}  // namespace
}  // namespace foldcore::af2
