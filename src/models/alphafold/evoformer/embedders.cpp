#include "models/alphafold/evoformer/embedders.h"

#include <algorithm>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "kernels/af2_features.h"
#include "kernels/embedding.h"
#include "models/alphafold/model/af2_util.h"
#include "models/alphafold/evoformer/evoformer_util.h"
#include "data_pipeline/structure/residue_constants.h"

namespace foldcore::af2 {
namespace {

namespace ag = autograd;
namespace rc = data::rc;

void check_defined(const Tensor& t, const char* op, const char* what) {
  FC_CHECK(t.defined(), op, ": ", what, " is undefined");
}

void check_var(const Variable& x, int dims, int64_t c, const char* op, const char* what) {
  FC_CHECK(x.defined() && x.dim() == dims && x.size(-1) == c, op, ": ", what, " ",
           shape_of(x), " must be ", dims, "-D with last dim ", c);
}

}  // namespace

// ---------------------------------------------------------------- features
Tensor relpos_one_hot(const Tensor& residue_index, int64_t max_relative_feature, int64_t row0, int64_t rows,
                      DType dtype, std::optional<Device> device) {
  check_defined(residue_index, "relpos_one_hot", "residue_index");
  FC_CHECK(residue_index.dim() == 1 && max_relative_feature > 0, "relpos_one_hot: residue_index ",
           residue_index.shape().str(), " must be [N] and max_relative_feature (", max_relative_feature, ") > 0");
  const auto ri = host_ints(residue_index);
  const int64_t n = residue_index.size(0), k = max_relative_feature, c = 2 * k + 1;
  if (rows < 0) rows = n - row0;
  FC_CHECK(row0 >= 0 && row0 + rows <= n, "relpos_one_hot: rows [", row0, ", ", row0 + rows, ") outside [0, ", n, ")");
  std::vector<int64_t> bins(static_cast<size_t>(rows * n));
#pragma omp parallel for schedule(static) if (rows * n >= (1 << 20))
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) bins[i * n + j] = std::clamp(ri[row0 + i] - ri[j] + k, int64_t{0}, 2 * k);
  const Device dev = device.value_or(residue_index.device());
  const Tensor idx = Tensor::from_vector_i64(bins, {rows, n}, DType::i32, dev);
  Tensor out = Tensor::empty({rows, n, c}, dtype, dev);
  ops::one_hot(idx, c, out);
  return out;
}

namespace {

// Per residue: the atom37 slot of the pseudo-β (CA for glycine, else CB).
std::vector<int> pseudo_beta_slots(const Tensor& aatype) {
  const int gly = rc::restype_order('G'), ca = rc::atom_order("CA"), cb = rc::atom_order("CB");
  const auto aa = host_ints(aatype);
  std::vector<int> slot(aa.size());
  for (size_t r = 0; r < aa.size(); ++r) slot[r] = aa[r] == gly ? ca : cb;
  return slot;
}

}  // namespace

Tensor pseudo_beta(const Tensor& aatype, const Tensor& atom37_positions) {
  check_defined(aatype, "pseudo_beta", "aatype");
  check_defined(atom37_positions, "pseudo_beta", "atom37_positions");
  FC_CHECK(atom37_positions.dim() >= 2 && atom37_positions.size(-1) == 3 &&
               atom37_positions.size(-2) == rc::kAtomTypeNum &&
               atom37_positions.numel() == aatype.numel() * rc::kAtomTypeNum * 3,
           "pseudo_beta: aatype ", aatype.shape().str(), " and atom37_positions ", atom37_positions.shape().str(),
           " must be [..., N] and [..., N, 37, 3]");
  const auto slot = pseudo_beta_slots(aatype);
  const auto x = host_floats(atom37_positions);
  std::vector<float> out(slot.size() * 3);
  for (size_t r = 0; r < slot.size(); ++r)
    for (int d = 0; d < 3; ++d) out[r * 3 + d] = x[(r * rc::kAtomTypeNum + slot[r]) * 3 + d];
  Shape s = atom37_positions.shape();
  s.erase(s.size() - 2);  // [..., N, 3]
  return Tensor::from_vector(out, s, DType::f32, atom37_positions.device());
}

Tensor pseudo_beta_mask(const Tensor& aatype, const Tensor& atom37_mask) {
  check_defined(aatype, "pseudo_beta_mask", "aatype");
  check_defined(atom37_mask, "pseudo_beta_mask", "atom37_mask");
  FC_CHECK(atom37_mask.dim() >= 1 && atom37_mask.size(-1) == rc::kAtomTypeNum &&
               atom37_mask.numel() == aatype.numel() * rc::kAtomTypeNum,
           "pseudo_beta_mask: aatype ", aatype.shape().str(), " and atom37_mask ", atom37_mask.shape().str(),
           " must be [..., N] and [..., N, 37]");
  const auto slot = pseudo_beta_slots(aatype);
  const auto m = host_floats(atom37_mask);
  std::vector<float> out(slot.size());
  for (size_t r = 0; r < slot.size(); ++r) out[r] = m[r * rc::kAtomTypeNum + slot[r]];
  Shape s = atom37_mask.shape();
  s.erase(s.size() - 1);
  return Tensor::from_vector(out, s, DType::f32, atom37_mask.device());
}

Tensor dgram_from_positions(const Tensor& positions, float min_bin, float max_bin, int64_t num_bins, int64_t row0,
                            int64_t rows) {
  check_defined(positions, "dgram_from_positions", "positions");
  FC_CHECK(positions.dim() >= 2 && positions.size(-1) == 3 && num_bins >= 2 && max_bin > min_bin,
           "dgram_from_positions: positions ", positions.shape().str(), " must be [..., N, 3]; bins ", num_bins,
           " over [", min_bin, ", ", max_bin, "]");
  const int64_t n = positions.size(-2), batch = positions.numel() / (n * 3), nb = num_bins;
  if (rows < 0) rows = n - row0;
  FC_CHECK(row0 >= 0 && row0 + rows <= n, "dgram_from_positions: rows [", row0, ", ", row0 + rows,
           ") outside [0, ", n, ")");
  // On the positions' device (kernels/af2_features.h; AF2's fp32 breaks, linspace then squared).
  const Tensor x = positions.to(DType::f32).contiguous().reshape({batch, n, 3});
  Tensor out = Tensor::empty({batch, rows, n, nb}, DType::f32, positions.device());
  ops::distogram_one_hot(x, ops::DistogramBins{min_bin, max_bin, nb}, row0, out);
  Shape s = positions.shape();
  s[s.size() - 2] = rows;  // [..., rows, N, bins]
  s[s.size() - 1] = n;
  s.push_back(nb);
  return out.reshape(s);
}

Tensor extra_msa_feat(const Tensor& extra_msa, const Tensor& extra_has_deletion, const Tensor& extra_deletion_value) {
  check_defined(extra_msa, "extra_msa_feat", "extra_msa");
  check_defined(extra_has_deletion, "extra_msa_feat", "extra_has_deletion");
  check_defined(extra_deletion_value, "extra_msa_feat", "extra_deletion_value");
  FC_CHECK(extra_msa.dim() == 2 && extra_has_deletion.shape() == extra_msa.shape() &&
               extra_deletion_value.shape() == extra_msa.shape(),
           "extra_msa_feat: extra_msa ", extra_msa.shape().str(), ", extra_has_deletion ",
           extra_has_deletion.shape().str(), ", extra_deletion_value ", extra_deletion_value.shape().str(),
           " must all be [S, N]");
  // On the features' device (ops::extra_msa_features): on a GPU no copy to the host and back. The
  // classes are checked where they are on the host already (a GPU batch's were, when its feature
  // file was read: Af2Features).
  if (extra_msa.device().is_cpu()) ops::check_extra_msa_classes(extra_msa, "extra_msa_feat: extra_msa");
  const Device dev = extra_msa.device();
  auto f32 = [&](const Tensor& t) { return t.to(dev).to(DType::f32).contiguous(); };
  const Tensor msa = extra_msa.dtype() == DType::i32 || extra_msa.dtype() == DType::i64
                         ? extra_msa.contiguous()
                         : extra_msa.to(DType::i64).contiguous();
  Tensor out = Tensor::empty({extra_msa.size(0), extra_msa.size(1), ops::kExtraMsaFeatureDim}, DType::f32, dev);
  ops::extra_msa_features(msa, f32(extra_has_deletion), f32(extra_deletion_value), out);
  return out;
}

// ---------------------------------------------------------------- InputEmbedder (Alg. 3, 4)
InputEmbedder::InputEmbedder(nn::Scope scope, const Af2Config& config)
    : Module(std::move(scope)),
      max_relative_feature_(config.max_relative_feature),
      preprocess_1d_(child_scope("preprocess_1d"), config.target_feat_dim, config.c_m),
      preprocess_msa_(child_scope("preprocess_msa"), config.msa_feat_dim, config.c_m),
      left_single_(child_scope("left_single"), config.target_feat_dim, config.c_z),
      right_single_(child_scope("right_single"), config.target_feat_dim, config.c_z),
      pair_activations_(child_scope("pair_activiations"), 2 * config.max_relative_feature + 1, config.c_z) {
  register_child(preprocess_1d_);
  register_child(preprocess_msa_);
  register_child(left_single_);
  register_child(right_single_);
  register_child(pair_activations_);
}

void InputEmbedder::check_inputs(const Variable& target_feat, const Tensor& residue_index) const {
  check_var(target_feat, 2, preprocess_1d_.in_features(), "InputEmbedder", "target_feat");
  FC_CHECK(residue_index.defined() && residue_index.numel() == target_feat.size(0), "InputEmbedder: target_feat ",
           target_feat.shape().str(), " and residue_index ", shape_of(residue_index), " disagree on N");
}

MsaPair InputEmbedder::forward(const Variable& target_feat, const Variable& msa_feat,
                               const Tensor& residue_index) const {
  check_inputs(target_feat, residue_index);
  MsaPair out;
  out.msa = msa(target_feat, msa_feat);
  out.pair = pair_rows(target_feat, residue_index, 0, target_feat.size(0));
  return out;
}

Variable InputEmbedder::msa(const Variable& target_feat, const Variable& msa_feat) const {
  check_var(target_feat, 2, preprocess_1d_.in_features(), "InputEmbedder", "target_feat");
  check_var(msa_feat, 3, preprocess_msa_.in_features(), "InputEmbedder", "msa_feat");
  FC_CHECK(msa_feat.size(1) == target_feat.size(0), "InputEmbedder: target_feat ", target_feat.shape().str(),
           " and msa_feat ", msa_feat.shape().str(), " disagree on N");
  // m [S, N, c_m] = preprocess_msa(msa_feat) + preprocess_1d(target_feat)[None]   (Alg. 3 lines 1, 5)
  return ag::add(preprocess_msa_.forward(msa_feat), preprocess_1d_.forward(target_feat));
}

Variable InputEmbedder::pair_rows(const Variable& target_feat, const Tensor& residue_index, int64_t row0,
                                  int64_t rows) const {
  check_inputs(target_feat, residue_index);
  const int64_t n = target_feat.size(0);
  // z [rows, N, c_z] = relpos(i, j) + a_i + b_j   (Alg. 3 lines 2-4, Alg. 4), i ∈ [row0, row0 + rows)
  const Variable relpos(relpos_one_hot(residue_index.reshape({n}), max_relative_feature_, row0, rows,
                                       target_feat.dtype(), target_feat.device()));
  Variable z = pair_activations_.forward(relpos);
  const Variable rows_feat = rows == n ? target_feat : ag::narrow(target_feat, 0, row0, rows);
  z = ag::add(z, ag::unsqueeze(left_single_.forward(rows_feat), 1));     // [rows, 1, c_z]: row i
  z = ag::add(z, ag::unsqueeze(right_single_.forward(target_feat), 0));  // [1, N, c_z]: column j
  return z;
}

void InputEmbedder::add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index) const {
  require_finalized(scope().params, path());
  add_linear_af2_params(preprocess_1d_, table, join(key_prefix, "preprocess_1d"), stack_index);
  add_linear_af2_params(preprocess_msa_, table, join(key_prefix, "preprocess_msa"), stack_index);
  add_linear_af2_params(left_single_, table, join(key_prefix, "left_single"), stack_index);
  add_linear_af2_params(right_single_, table, join(key_prefix, "right_single"), stack_index);
  add_linear_af2_params(pair_activations_, table, join(key_prefix, "pair_activiations"), stack_index);
}

// ---------------------------------------------------------------- RecyclingEmbedder (Alg. 32)
RecyclingEmbedder::RecyclingEmbedder(nn::Scope scope, const Af2Config& config)
    : Module(std::move(scope)),
      min_bin_(config.recycle_min_bin),
      max_bin_(config.recycle_max_bin),
      num_bins_(config.recycle_num_bins),
      prev_msa_first_row_norm_(child_scope("prev_msa_first_row_norm"), config.c_m),
      prev_pair_norm_(child_scope("prev_pair_norm"), config.c_z),
      prev_pos_linear_(child_scope("prev_pos_linear"), config.recycle_num_bins, config.c_z) {
  register_child(prev_msa_first_row_norm_);
  register_child(prev_pair_norm_);
  register_child(prev_pos_linear_);
}

RecyclingEmbedder::Updates RecyclingEmbedder::forward(const Variable& prev_m1, const Variable& prev_z,
                                                      const Tensor& prev_pseudo_beta) const {
  check_var(prev_m1, 2, prev_msa_first_row_norm_.scale().numel(), "RecyclingEmbedder", "prev_m1");
  check_var(prev_z, 3, prev_pair_norm_.scale().numel(), "RecyclingEmbedder", "prev_z");
  const int64_t n = prev_m1.size(0);
  FC_CHECK(prev_z.size(0) == n && prev_z.size(1) == n && prev_pseudo_beta.defined() &&
               prev_pseudo_beta.shape() == Shape({n, 3}),
           "RecyclingEmbedder: prev_m1 ", prev_m1.shape().str(), ", prev_z ", prev_z.shape().str(),
           ", prev_pseudo_beta ", shape_of(prev_pseudo_beta),
           " must be [N, c_m], [N, N, c_z], [N, 3]");
  Updates u;
  u.pair = pair_update_rows(prev_z, prev_pseudo_beta, 0, n);      // [N, N, c_z]
  u.msa_first_row = prev_msa_first_row_norm_.forward(prev_m1);  // [N, c_m]
  return u;
}

Variable RecyclingEmbedder::pair_update_rows(const Variable& prev_z, const Tensor& prev_pseudo_beta, int64_t row0,
                                             int64_t rows) const {
  FC_CHECK(prev_pseudo_beta.defined() && prev_pseudo_beta.dim() == 2 && prev_pseudo_beta.size(1) == 3,
           "RecyclingEmbedder: prev_pseudo_beta ", shape_of(prev_pseudo_beta), " must be [N, 3]");
  const int64_t n = prev_pseudo_beta.size(0), cz = prev_pair_norm_.scale().numel();
  FC_CHECK(!prev_z.defined() || prev_z.shape() == Shape({n, n, cz}), "RecyclingEmbedder: prev_z ", shape_of(prev_z),
           " must be [", n, ", ", n, ", ", cz, "]");
  return pair_update_of_rows(!prev_z.defined() || rows == n ? prev_z : ag::narrow(prev_z, 0, row0, rows),
                             prev_pseudo_beta, row0, rows);
}

Variable RecyclingEmbedder::pair_update_of_rows(const Variable& prev_z_rows, const Tensor& prev_pseudo_beta,
                                                int64_t row0, int64_t rows) const {
  FC_CHECK(prev_pseudo_beta.defined() && prev_pseudo_beta.dim() == 2 && prev_pseudo_beta.size(1) == 3,
           "RecyclingEmbedder: prev_pseudo_beta ", shape_of(prev_pseudo_beta), " must be [N, 3]");
  const int64_t n = prev_pseudo_beta.size(0), cz = prev_pair_norm_.scale().numel();
  FC_CHECK(!prev_z_rows.defined() || prev_z_rows.shape() == Shape({rows, n, cz}), "RecyclingEmbedder: prev_z rows ",
           shape_of(prev_z_rows), " must be [", rows, ", ", n, ", ", cz, "]");
  // The rows of prev_z (zeros for the first iteration, made per chunk: LN(0) = its offset).
  const Variable z_rows = prev_z_rows.defined()
                              ? prev_z_rows
                              : Variable(Tensor::zeros({rows, n, cz}, DType::f32, prev_pseudo_beta.device()));
  // Alg. 32 lines 1-3: d = one_hot(|x_i − x_j|) over 15 bins 3.25..20.75 Å; z += Linear(d) + LN(z_prev).
  const Variable dgram(dgram_from_positions(prev_pseudo_beta, min_bin_, max_bin_, num_bins_, row0, rows)
                           .to(z_rows.device())
                           .to(z_rows.dtype()));
  // Summed into the Linear's output in place in no-grad mode (one pair-sized buffer fewer at long N).
  return ag::bias_dropout_residual(prev_pair_norm_.forward(z_rows), Variable(), prev_pos_linear_.forward(dgram), {},
                                   !ag::grad_enabled());  // [rows, N, c_z]
}

MsaPair RecyclingEmbedder::apply(const MsaPair& embedded, const Variable& prev_m1, const Variable& prev_z,
                                 const Tensor& prev_pseudo_beta) const {
  FC_CHECK(embedded.msa.defined() && embedded.msa.dim() == 3 && embedded.pair.defined(),
           "RecyclingEmbedder::apply: the embedding must have msa [S, N, c_m] and pair [N, N, c_z]");
  const Updates u = forward(prev_m1, prev_z, prev_pseudo_beta);
  MsaPair out;
  out.pair = ag::bias_dropout_residual(embedded.pair, Variable(), u.pair, {}, !ag::grad_enabled());  // in place
  out.msa = add_first_row(embedded.msa, u.msa_first_row);
  return out;
}

Variable RecyclingEmbedder::apply_msa(const Variable& msa, const Variable& prev_m1) const {
  check_var(prev_m1, 2, prev_msa_first_row_norm_.scale().numel(), "RecyclingEmbedder", "prev_m1");
  FC_CHECK(msa.defined() && msa.dim() == 3 && msa.size(1) == prev_m1.size(0), "RecyclingEmbedder: msa ",
           shape_of(msa), " must be [S, N, c_m] with prev_m1 ", prev_m1.shape().str());
  return add_first_row(msa, prev_msa_first_row_norm_.forward(prev_m1));
}

Variable RecyclingEmbedder::add_first_row(const Variable& msa, const Variable& first_row) {
  const int64_t s = msa.size(0);
  const Variable row0 = ag::add(ag::narrow(msa, 0, 0, 1), ag::unsqueeze(first_row, 0));
  // Under bf16 autocast the embedding is bf16 and row 0 was promoted to f32 by the add: the rows
  // are concatenated in row 0's (the wider) dtype.
  return s == 1 ? row0 : ag::concat({row0, ag::cast(ag::narrow(msa, 0, 1, s - 1), row0.dtype())}, 0);
}

void RecyclingEmbedder::add_af2_params(Af2ParamTable& table, const std::string& key_prefix,
                                       int64_t stack_index) const {
  require_finalized(scope().params, path());
  add_layer_norm_af2_params(prev_msa_first_row_norm_, table, join(key_prefix, "prev_msa_first_row_norm"), stack_index);
  add_layer_norm_af2_params(prev_pair_norm_, table, join(key_prefix, "prev_pair_norm"), stack_index);
  add_linear_af2_params(prev_pos_linear_, table, join(key_prefix, "prev_pos_linear"), stack_index);
}

// ---------------------------------------------------------------- ExtraMsaEmbedder (1.7.2)
ExtraMsaEmbedder::ExtraMsaEmbedder(nn::Scope scope, const Af2Config& config)
    : Module(std::move(scope)), extra_msa_activations_(child_scope("extra_msa_activations"), 25, config.c_e) {
  register_child(extra_msa_activations_);
}

Variable ExtraMsaEmbedder::forward(const Variable& extra_msa_feat) const {
  check_var(extra_msa_feat, 3, extra_msa_activations_.in_features(), "ExtraMsaEmbedder", "extra_msa_feat");
  return extra_msa_activations_.forward(extra_msa_feat);  // [S_extra, N, c_e]
}

void ExtraMsaEmbedder::add_af2_params(Af2ParamTable& table, const std::string& key_prefix,
                                      int64_t stack_index) const {
  require_finalized(scope().params, path());
  add_linear_af2_params(extra_msa_activations_, table, join(key_prefix, "extra_msa_activations"), stack_index);
}

}  // namespace foldcore::af2
