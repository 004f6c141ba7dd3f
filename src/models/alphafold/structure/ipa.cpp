#include "models/alphafold/structure/ipa.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "models/alphafold/evoformer/evoformer_util.h"
#include "models/alphafold/parallel/pair_rows.h"
#include "models/alphafold/structure/rigid.h"
#include "models/alphafold/structure/structure_module_ops.h"

namespace foldcore::af2 {
namespace {

namespace ag = autograd;

// Points [N, M, 3] in the local frames of residue n → global: x ↦ R_n x + t_n (row form x·R_nᵀ).
Variable to_global(const Variable& x, const Variable& rot, const Variable& trans) {
  return ag::add(ag::matmul(x, rot, false, true), ag::unsqueeze(trans, 1));
}
// Global points [N, M, 3] → local frames of residue n: x ↦ R_nᵀ(x − t_n) (row form (x − t)·R_n).
Variable to_local(const Variable& x, const Variable& rot, const Variable& trans) {
  return ag::matmul(ag::add(x, ag::scale(ag::unsqueeze(trans, 1), -1.f)), rot);
}

// A linear output [N, 3·M] laid out as AF2's [3, M] (x block, y block, z block) → [N, M, 3].
Variable split_xyz(const Variable& x) {
  const int64_t n = x.size(0), m = x.size(1) / 3;
  return ag::contiguous(ag::permute(ag::reshape(x, {n, 3, m}), {0, 2, 1}));
}

// Initial trainable_point_weights: log(e − 1), so that softplus gives 1 (AF2).
// Under bf16 autocast the projections come out in bf16 while the point terms are f32 (the frames
// are f32 host geometry): concatenations are done in f32 (a no-op in fp32).
Variable concat_f32(std::vector<Variable> xs, int axis) {
  for (Variable& x : xs) x = ag::cast(x, DType::f32);
  return ag::concat(xs, axis);
}

Tensor point_weight_init(int64_t h) { return Tensor::full({h}, std::log(std::exp(1.0) - 1.0), DType::f32); }

}  // namespace

InvariantPointAttention::InvariantPointAttention(nn::Scope scope, const StructureModuleConfig& cfg)
    : nn::Module(std::move(scope)),
      cfg_(cfg),
      q_scalar_(child_scope("q_scalar"), cfg.c_s, cfg.num_head * cfg.num_scalar_qk),
      kv_scalar_(child_scope("kv_scalar"), cfg.c_s, cfg.num_head * (cfg.num_scalar_qk + cfg.num_scalar_v)),
      q_point_local_(child_scope("q_point_local"), cfg.c_s, cfg.num_head * 3 * cfg.num_point_qk),
      kv_point_local_(child_scope("kv_point_local"), cfg.c_s, cfg.num_head * 3 * (cfg.num_point_qk + cfg.num_point_v)),
      attention_2d_(child_scope("attention_2d"), cfg.c_z, cfg.num_head),
      output_projection_(child_scope("output_projection"),
                         cfg.num_head * (cfg.num_scalar_v + 4 * cfg.num_point_v + cfg.c_z), cfg.c_s,
                         {.init = nn::Init::final}) {
  FC_CHECK(cfg.num_head > 0 && cfg.num_scalar_qk > 0 && cfg.num_scalar_v > 0 && cfg.num_point_qk > 0 &&
               cfg.num_point_v > 0,
           "InvariantPointAttention: every head/channel/point count must be positive");
  register_child(q_scalar_);
  register_child(kv_scalar_);
  register_child(q_point_local_);
  register_child(kv_point_local_);
  register_child(attention_2d_);
  register_child(output_projection_);
  point_weights_ = add_parameter("trainable_point_weights", {cfg.num_head}, false, point_weight_init(cfg.num_head));
}

// Blocks keep the [H, rows, N] logits and their companions, and the block's pair rows
// [rows, N, c_z], near kRowBlockValues values instead of growing with N² (≈ 0.1 fp32 pair each for
// the logits, several at once; a whole pair for the rows). The same arithmetic row by row: every
// row's values come from the same kernels on the same operands (a GEMM over fewer rows may take
// another BLAS blocking: ~1e-7 relative). Up to kWholeValues all rows at once: the blocks would
// only add launches (about 35 per block and layer).
int64_t ipa_inference_row_block(int64_t n, const StructureModuleConfig& cfg) {
  constexpr int64_t kRowBlockValues = int64_t{1} << 22, kWholeValues = int64_t{1} << 23;
  const int64_t per_row = std::max<int64_t>(1, std::max(cfg.num_head, cfg.c_z) * n);
  return per_row * n <= kWholeValues ? std::max<int64_t>(1, n) : std::max<int64_t>(1, kRowBlockValues / per_row);
}

Variable InvariantPointAttention::forward(const Variable& s, const Variable& z, const Tensor& mask, const Variable& rot,
                                          const Variable& trans) const {
  const int64_t n = s.size(0);
  FC_CHECK(z.dim() == 3 && z.size(0) == n && z.size(1) == n && z.size(2) == cfg_.c_z,
           "InvariantPointAttention: z must be [", n, ", ", n, ", ", cfg_.c_z, "], got ", z.shape().str());
  return forward(s, [&](int64_t i0, int64_t len) { return ag::narrow(z, 0, i0, len); }, mask, rot, trans);
}

Variable InvariantPointAttention::forward(const Variable& s, const std::function<Variable(int64_t, int64_t)>& z_rows,
                                          const Tensor& mask, const Variable& rot, const Variable& trans,
                                          const ParallelGroup* split) const {
  const int64_t n = s.size(0), h = cfg_.num_head, cqk = cfg_.num_scalar_qk, cv = cfg_.num_scalar_v;
  const int64_t pqk = cfg_.num_point_qk, pv = cfg_.num_point_v;
  FC_CHECK(s.dim() == 2 && s.size(1) == cfg_.c_s, "InvariantPointAttention: s must be [N, ", cfg_.c_s, "], got ",
           s.shape().str());
  FC_CHECK(mask.defined() && mask.shape() == Shape({n}), "InvariantPointAttention: mask must be [", n, "], got ",
           mask.defined() ? mask.shape().str() : std::string("undefined"));
  FC_CHECK(rot.shape() == Shape({n, 3, 3}) && trans.shape() == Shape({n, 3}), "InvariantPointAttention: frames rot ",
           rot.shape().str(), " / trans ", trans.shape().str(), " must be [", n, ", 3, 3] / [", n, ", 3]");

  // Scalar queries/keys/values, heads first: [H, N, c].
  const Variable q = ag::permute(ag::reshape(q_scalar_.forward(s), {n, h, cqk}), {1, 0, 2});
  const Variable kv = ag::reshape(kv_scalar_.forward(s), {n, h, cqk + cv});
  const Variable k = ag::permute(ag::narrow(kv, 2, 0, cqk), {1, 0, 2});
  const Variable v = ag::permute(ag::narrow(kv, 2, cqk, cv), {1, 0, 2});

  // Points, projected into the global frame: query [H, N, P_qk·3], key [H, N, P_qk·3], value [H, N, P_v·3].
  const Variable qp_g = to_global(split_xyz(q_point_local_.forward(s)), rot, trans);  // [N, H·P_qk, 3]
  const Variable qp = ag::permute(ag::reshape(qp_g, {n, h, pqk * 3}), {1, 0, 2});
  const Variable kvp_g = ag::reshape(to_global(split_xyz(kv_point_local_.forward(s)), rot, trans), {n, h, pqk + pv, 3});
  const Variable kp =
      ag::permute(ag::reshape(ag::contiguous(ag::narrow(kvp_g, 2, 0, pqk)), {n, h, pqk * 3}), {1, 0, 2});
  const Variable vp =
      ag::permute(ag::reshape(ag::contiguous(ag::narrow(kvp_g, 2, pqk, pv)), {n, h, pv * 3}), {1, 0, 2});

  // Weights: w_C on the scalar term, γ_h·√(1/(3·P_qk·9/2)) on the point term, w_L on the pair bias.
  const float w_scalar = static_cast<float>(std::sqrt(1.0 / (3.0 * static_cast<double>(cqk))));
  const float w_point = static_cast<float>(std::sqrt(1.0 / (3.0 * static_cast<double>(pqk) * 9.0 / 2.0)));
  const float w_2d = static_cast<float>(std::sqrt(1.0 / 3.0));
  const Variable gamma = ag::reshape(ag::scale(softplus(point_weights_), w_point), {h, 1, 1});  // [H, 1, 1]

  // logits = w_C q·k + γ q_p·k_p − ½γ|q_p|² − ½γ|k_p|² + w_L b − 1e5 (1 − m_i m_j): [H, N, N].
  // Every query row i is independent from here on: rows(i0, len) computes the rows [i0, i0 + len)
  // of the output features (before the output projection), [len, F].
  const Variable q_aug = concat_f32({ag::scale(q, w_scalar), ag::mul(qp, gamma)}, -1);
  const Variable k_aug = ag::contiguous(concat_f32({k, kp}, -1));
  const Variable k_sq = ag::scale(ag::mul(ag::sum(ag::mul(kp, kp), {2}), ag::reshape(gamma, {h, 1})), -0.5f);
  const Variable vv = ag::contiguous(concat_f32({v, vp}, -1));  // [H, N, c_v + 3·P_v]
  const Tensor m = host_f32(mask);
  auto rows = [&](int64_t i0, int64_t len) {
    const Variable z = z_rows(i0, len);  // [len, N, c_z]
    FC_CHECK(z.dim() == 3 && z.size(0) == len && z.size(1) == n && z.size(2) == cfg_.c_z,
             "InvariantPointAttention: pair rows ", z.shape().str(), " (expected [", len, ", ", n, ", ", cfg_.c_z,
             "])");
    const Variable qa = ag::narrow(q_aug, 1, i0, len), qpr = ag::narrow(qp, 1, i0, len);
    Variable logits = ag::matmul(ag::contiguous(qa), k_aug, false, true);  // [H, len, N]
    const Variable q_sq = ag::scale(ag::mul(ag::sum(ag::mul(qpr, qpr), {2}), ag::reshape(gamma, {h, 1})), -0.5f);
    logits = ag::add(logits, ag::reshape(q_sq, {h, len, 1}));
    logits = ag::add(logits, ag::reshape(k_sq, {h, 1, n}));
    logits = ag::add(logits, ag::scale(ag::contiguous(ag::permute(attention_2d_.forward(z), {2, 0, 1})), w_2d));
    {
      std::vector<float> bias(static_cast<size_t>(len * n));
      for (int64_t i = 0; i < len; ++i)
        for (int64_t j = 0; j < n; ++j)
          bias[static_cast<size_t>(i * n + j)] = -1e5f * (1.f - m.data<float>()[i0 + i] * m.data<float>()[j]);
      logits = ag::add(logits, Variable(Tensor::from_vector(bias, {len, n}, logits.dtype(), logits.device())));
    }
    const Variable attn = ag::softmax(logits);  // [H, len, N]

    // Scalar and point values in one GEMM: [H, len, c_v + 3·P_v] → [len, H, c_v + 3·P_v].
    const Variable o = ag::contiguous(ag::permute(ag::matmul(attn, vv), {1, 0, 2}));
    const Variable o_scalar = ag::reshape(ag::contiguous(ag::narrow(o, 2, 0, cv)), {len, h * cv});
    const Variable o_point = to_local(ag::reshape(ag::contiguous(ag::narrow(o, 2, cv, 3 * pv)), {len, h * pv, 3}),
                                      ag::narrow(rot, 0, i0, len), ag::narrow(trans, 0, i0, len));  // [len, H·P_v, 3]
    const Variable o_xyz = ag::reshape(ag::contiguous(ag::permute(o_point, {0, 2, 1})), {len, 3 * h * pv});
    const Variable o_norm = norm_last(o_point, 1e-8f);  // [len, H·P_v]
    // Attention over the pair representation: [len, H, N]·[len, N, c_z] → [len, H·c_z].
    const Variable o_pair = ag::reshape(
        ag::matmul(ag::contiguous(ag::permute(attn, {1, 0, 2})), z), {len, h * cfg_.c_z});
    return concat_f32({o_scalar, o_xyz, o_norm, o_pair}, -1);
  };
  // Inference: query rows in blocks (ipa_inference_row_block); run_chunked runs the whole once in
  // grad mode.
  const int64_t block = ipa_inference_row_block(n, cfg_);
  if (split == nullptr) return output_projection_.forward(run_chunked(n, block, rows));
  FC_CHECK(!ag::grad_enabled(), "InvariantPointAttention: split query rows are for inference");
  const PairRows pr = PairRows::of(*split, n);
  const int64_t features = h * (cv + 4 * pv + cfg_.c_z);
  Tensor mine = Tensor::zeros({pr.rows(), features}, DType::f32, s.device());  // the padding rows stay 0
  if (pr.real_rows() > 0)
    mine.narrow(0, 0, pr.real_rows())
        .copy_(run_chunked(pr.real_rows(), block, [&](int64_t i0, int64_t len) { return rows(pr.row0() + i0, len); })
                   .value());
  const Variable all = split->gather(Variable(mine), 0);  // [padded N, F]
  return output_projection_.forward(pr.padded() == n ? all : ag::contiguous(ag::narrow(all, 0, 0, n)));
}

void InvariantPointAttention::add_af2_params(Af2ParamTable& table, const std::string& key_prefix,
                                             int64_t stack_index) const {
  add_linear_params(table, key_prefix + "/q_scalar", q_scalar_, stack_index);
  add_linear_params(table, key_prefix + "/kv_scalar", kv_scalar_, stack_index);
  add_linear_params(table, key_prefix + "/q_point_local", q_point_local_, stack_index);
  add_linear_params(table, key_prefix + "/kv_point_local", kv_point_local_, stack_index);
  add_linear_params(table, key_prefix + "/attention_2d", attention_2d_, stack_index);
  add_linear_params(table, key_prefix + "/output_projection", output_projection_, stack_index);
  table.add(key_prefix + "//trainable_point_weights", point_weights_.value(), stack_index);
}

}  // namespace foldcore::af2
