#include "models/alphafold/evoformer/template.h"

#include <algorithm>
#include <cmath>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/recompute.h"
#include "core/profile.h"
#include "data_pipeline/structure/residue_constants.h"
#include "kernels/af2_features.h"
#include "kernels/attention.h"
#include "models/alphafold/evoformer/embedders.h"
#include "models/alphafold/model/af2_util.h"
#include "models/alphafold/evoformer/evoformer_util.h"

namespace foldcore::af2 {
namespace {

namespace ag = autograd;
namespace rc = data::rc;

constexpr int64_t kAatypeClasses = ops::kTemplateAatypeClasses;  // 20 amino acids + X + gap
constexpr int kRowWise = -3, kColumnWise = -2;    // AF2 shared dropout axes
constexpr int64_t kNumTorsions = 7;

nn::LinearOptions relu_init() {
  nn::LinearOptions o;
  o.init = nn::Init::relu;
  return o;
}

// x + dropout(update) (evoformer_util's stream_residual).
Variable residual(const Variable& x, const Variable& update, const nn::Dropout& d, bool in_place) {
  return stream_residual(x, update, d.spec(), in_place);
}

// t's shape is `dims` (sizes compared one by one: GCC 12 reports a false "maybe uninitialized" on
// Shape temporaries compared inside FC_CHECK in this file).
bool has_shape(const Tensor& t, std::initializer_list<int64_t> dims) {
  if (t.dim() != static_cast<int>(dims.size())) return false;
  int a = 0;
  for (const int64_t d : dims)
    if (t.size(a++) != d) return false;
  return true;
}

bool identity(const nn::Dropout& d) { return d.spec().p == 0.f || d.spec().gen == nullptr; }

// Residue i's backbone frame (AF2 make_transform_from_reference + invert_point, for the unit
// vectors to CA_j): CA_i at the origin, C_i on +x, N_i in the xy-plane (y > 0), i.e. the
// Gram–Schmidt basis e1 = (C − CA)/|·|, e2 ∝ (N − CA) − ((N − CA)·e1) e1, e3 = e1 × e2, computed
// in double and stored in fp32 with CA_i: [N, 12] = (e1, e2, e3, CA) for
// ops::template_pair_features, which forms v_ij = [e_k · (CA_j − CA_i)]_k per pair.
std::vector<float> backbone_frames(const std::vector<float>& x, int64_t n) {
  const int in = rc::atom_order("N"), ica = rc::atom_order("CA"), ic = rc::atom_order("C");
  auto at = [&](int64_t r, int a, int d) { return static_cast<double>(x[(r * rc::kAtomTypeNum + a) * 3 + d]); };
  std::vector<float> out(static_cast<size_t>(n * 12), 0.f);
  for (int64_t i = 0; i < n; ++i) {
    double e1[3], e2[3], e3[3], u[3];
    for (int d = 0; d < 3; ++d) {
      e1[d] = at(i, ic, d) - at(i, ica, d);
      u[d] = at(i, in, d) - at(i, ica, d);
    }
    const double n1 = std::sqrt(1e-20 + e1[0] * e1[0] + e1[1] * e1[1] + e1[2] * e1[2]);
    for (double& v : e1) v /= n1;
    const double proj = u[0] * e1[0] + u[1] * e1[1] + u[2] * e1[2];
    for (int d = 0; d < 3; ++d) e2[d] = u[d] - proj * e1[d];
    const double n2 = std::sqrt(1e-20 + e2[0] * e2[0] + e2[1] * e2[1] + e2[2] * e2[2]);
    for (double& v : e2) v /= n2;
    e3[0] = e1[1] * e2[2] - e1[2] * e2[1];
    e3[1] = e1[2] * e2[0] - e1[0] * e2[2];
    e3[2] = e1[0] * e2[1] - e1[1] * e2[0];
    float* f = out.data() + i * 12;
    for (int d = 0; d < 3; ++d) {
      f[d] = static_cast<float>(e1[d]);
      f[3 + d] = static_cast<float>(e2[d]);
      f[6 + d] = static_cast<float>(e3[d]);
      f[9 + d] = x[(i * rc::kAtomTypeNum + ica) * 3 + d];
    }
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------- features
int64_t template_pair_feat_dim(const TemplateConfig& config) {
  return ops::template_pair_feature_dim(config.dgram_num_bins);
}

TemplatePairFeatRows::TemplatePairFeatRows(const Tensor& aatype, const Tensor& pseudo_beta,
                                           const Tensor& pseudo_beta_mask, const Tensor& all_atom_positions,
                                           const Tensor& all_atom_mask, const TemplateConfig& config) {
  FC_CHECK(aatype.defined() && pseudo_beta.defined() && pseudo_beta_mask.defined() && all_atom_positions.defined() &&
               all_atom_mask.defined(),
           "template_pair_feat: every input must be defined");
  const int64_t n = aatype.numel();
  FC_CHECK(aatype.dim() == 1 && has_shape(pseudo_beta, {n, 3}) && has_shape(pseudo_beta_mask, {n}) &&
               has_shape(all_atom_positions, {n, rc::kAtomTypeNum, 3}) &&
               has_shape(all_atom_mask, {n, rc::kAtomTypeNum}),
           "template_pair_feat: aatype ", aatype.shape().str(), ", pseudo_beta ", pseudo_beta.shape().str(),
           ", pseudo_beta_mask ", pseudo_beta_mask.shape().str(), ", all_atom_positions ",
           all_atom_positions.shape().str(), ", all_atom_mask ", all_atom_mask.shape().str(),
           " must be [N], [N, 3], [N], [N, 37, 3], [N, 37] (one template)");
  // The O(N) per-residue parts here (checks, backbone mask, frames); the O(N²) features on
  // pseudo_beta's device (kernels/af2_features.h).
  n_ = n;
  c_ = template_pair_feat_dim(config);
  const Device dev = pseudo_beta.device();
  const auto aa = host_ints(aatype);
  const auto am = host_floats(all_atom_mask);
  std::vector<float> bb(static_cast<size_t>(n));
  const int in = rc::atom_order("N"), ica = rc::atom_order("CA"), ic = rc::atom_order("C");
  for (int64_t r = 0; r < n; ++r) {
    FC_CHECK(aa[r] >= 0 && aa[r] < kAatypeClasses, "template_pair_feat: aatype ", aa[r], " outside [0, 22)");
    bb[r] = am[r * rc::kAtomTypeNum + in] * am[r * rc::kAtomTypeNum + ica] * am[r * rc::kAtomTypeNum + ic];
  }
  ops::TemplatePairInputs& in_feat = in_;
  in_feat.pseudo_beta = pseudo_beta.to(DType::f32).contiguous();
  in_feat.pseudo_beta_mask = pseudo_beta_mask.to(DType::f32).contiguous();
  in_feat.aatype = Tensor::from_vector_i64(aa, {n}, DType::i32, dev);
  in_feat.backbone_mask = Tensor::from_vector(bb, {n}, DType::f32, dev);
  if (config.use_template_unit_vector)
    in_feat.frames = Tensor::from_vector(backbone_frames(host_floats(all_atom_positions), n), {n, 12}, DType::f32, dev);
  in_feat.bins = ops::DistogramBins{config.dgram_min_bin, config.dgram_max_bin, config.dgram_num_bins};
}

Tensor TemplatePairFeatRows::rows(int64_t r0, int64_t len) const {
  Tensor out = Tensor::empty({len, n_, c_}, DType::f32, in_.pseudo_beta.device());
  ops::template_pair_features(in_, out, r0);
  return out;
}

Tensor template_pair_feat(const Tensor& aatype, const Tensor& pseudo_beta, const Tensor& pseudo_beta_mask,
                          const Tensor& all_atom_positions, const Tensor& all_atom_mask, const TemplateConfig& config) {
  const TemplatePairFeatRows f(aatype, pseudo_beta, pseudo_beta_mask, all_atom_positions, all_atom_mask, config);
  return f.rows(0, f.num_res());
}

Tensor template_angle_feat(const Tensor& aatype, const Tensor& torsion_angles_sin_cos,
                           const Tensor& alt_torsion_angles_sin_cos, const Tensor& torsion_angles_mask) {
  FC_CHECK(aatype.defined() && torsion_angles_sin_cos.defined() && alt_torsion_angles_sin_cos.defined() &&
               torsion_angles_mask.defined(),
           "template_angle_feat: every input must be defined");
  FC_CHECK(aatype.dim() == 2, "template_angle_feat: aatype ", aatype.shape().str(), " must be [T, N]");
  const int64_t t = aatype.size(0), n = aatype.size(1);
  FC_CHECK(has_shape(torsion_angles_sin_cos, {t, n, kNumTorsions, 2}) &&
               has_shape(alt_torsion_angles_sin_cos, {t, n, kNumTorsions, 2}) &&
               has_shape(torsion_angles_mask, {t, n, kNumTorsions}),
           "template_angle_feat: aatype ", aatype.shape().str(), ", torsion_angles_sin_cos ",
           torsion_angles_sin_cos.shape().str(), ", alt_torsion_angles_sin_cos ",
           alt_torsion_angles_sin_cos.shape().str(), ", torsion_angles_mask ", torsion_angles_mask.shape().str(), " must be [T, N], [T, N, 7, 2] ×2, [T, N, 7]");
  constexpr int64_t kC = kAatypeClasses + 4 * kNumTorsions + kNumTorsions;  // 57
  const auto aa = host_ints(aatype);
  const auto sc = host_floats(torsion_angles_sin_cos), alt = host_floats(alt_torsion_angles_sin_cos);
  const auto mk = host_floats(torsion_angles_mask);
  std::vector<float> out(static_cast<size_t>(t * n * kC), 0.f);
  for (int64_t r = 0; r < t * n; ++r) {
    FC_CHECK(aa[r] >= 0 && aa[r] < kAatypeClasses, "template_angle_feat: aatype ", aa[r], " outside [0, 22)");
    float* o = out.data() + r * kC;
    o[aa[r]] = 1.f;
    for (int64_t q = 0; q < 2 * kNumTorsions; ++q) {
      o[kAatypeClasses + q] = sc[r * 2 * kNumTorsions + q];
      o[kAatypeClasses + 2 * kNumTorsions + q] = alt[r * 2 * kNumTorsions + q];
    }
    for (int64_t q = 0; q < kNumTorsions; ++q) o[kAatypeClasses + 4 * kNumTorsions + q] = mk[r * kNumTorsions + q];
  }
  return Tensor::from_vector(out, {t, n, kC}, DType::f32, torsion_angles_sin_cos.device());
}

Tensor template_msa_mask(const Tensor& torsion_angles_mask) {
  FC_CHECK(torsion_angles_mask.defined() && torsion_angles_mask.dim() == 3 &&
               torsion_angles_mask.size(2) == kNumTorsions,
           "template_msa_mask: torsion_angles_mask must be [T, N, 7], got ",
           shape_of(torsion_angles_mask));
  return torsion_angles_mask.select(2, 2).contiguous().to(DType::f32);  // ψ (pre-ω, φ, ψ, χ1..4)
}

// ---------------------------------------------------------------- TemplatePairBlock (Alg. 16)
TemplatePairBlock::TemplatePairBlock(nn::Scope scope, const TemplateConfig& c)
    : Module(std::move(scope)),
      tri_att_start_(child_scope("triangle_attention_starting_node"), c.c_t, c.tri_att, true),
      tri_att_end_(child_scope("triangle_attention_ending_node"), c.c_t, c.tri_att, false),
      tri_mul_out_(child_scope("triangle_multiplication_outgoing"), c.c_t, c.tri_mul_channels, true),
      tri_mul_in_(child_scope("triangle_multiplication_incoming"), c.c_t, c.tri_mul_channels, false),
      pair_transition_(child_scope("pair_transition"), c.c_t, c.pair_transition_factor),
      tri_att_start_dropout_(child_scope("triangle_attention_starting_node_dropout"), c.tri_att.dropout, {kRowWise}),
      tri_att_end_dropout_(child_scope("triangle_attention_ending_node_dropout"), c.tri_att.dropout, {kColumnWise}),
      tri_mul_out_dropout_(child_scope("triangle_multiplication_outgoing_dropout"), c.tri_mul_dropout, {kRowWise}),
      tri_mul_in_dropout_(child_scope("triangle_multiplication_incoming_dropout"), c.tri_mul_dropout, {kRowWise}) {
  for (nn::Module* m : std::initializer_list<nn::Module*>{
           &tri_att_start_, &tri_att_end_, &tri_mul_out_, &tri_mul_in_, &pair_transition_, &tri_att_start_dropout_,
           &tri_att_end_dropout_, &tri_mul_out_dropout_, &tri_mul_in_dropout_})
    register_child(*m);
}

Variable TemplatePairBlock::forward(const Variable& t, const Tensor& pair_mask, int64_t chunk) const {
  return forward_impl(t, pair_mask, chunk, false);
}

Variable TemplatePairBlock::forward_impl(Variable t, const Tensor& pair_mask, int64_t chunk, bool own_input) const {
  const bool no_dropout = identity(tri_att_start_dropout_) && identity(tri_att_end_dropout_) &&
                          identity(tri_mul_out_dropout_) && identity(tri_mul_in_dropout_);
  if (!ag::grad_enabled() && chunk > 0 && no_dropout) {
    // Each update added into the stream chunk by chunk (see EvoformerBlock::forward_into: the
    // same modules, the same sums in fp32).
    const Tensor ts = own_stream(t, own_input);
    tri_att_start_.forward(t, pair_mask, chunk, ts);
    tri_att_end_.forward(t, pair_mask, chunk, ts);
    tri_mul_out_.forward(t, pair_mask, chunk, ts);
    tri_mul_in_.forward(t, pair_mask, chunk, ts);
    transition_forward(pair_transition_, t, chunk, ts);
    return t;
  }
  t = residual(t, tri_att_start_.forward(t, pair_mask, chunk), tri_att_start_dropout_, own_input);
  t = residual(t, tri_att_end_.forward(t, pair_mask, chunk), tri_att_end_dropout_, true);
  t = residual(t, tri_mul_out_.forward(t, pair_mask, chunk), tri_mul_out_dropout_, true);
  t = residual(t, tri_mul_in_.forward(t, pair_mask, chunk), tri_mul_in_dropout_, true);
  // Pair transition: dropout rate 0 in AlphaFold's config (a plain residual add).
  return stream_residual(t, transition_forward(pair_transition_, t, chunk), {}, true);
}

void TemplatePairBlock::add_af2_params(Af2ParamTable& table, const std::string& key_prefix,
                                       int64_t stack_index) const {
  require_finalized(scope().params, path());
  tri_att_start_.add_af2_params(table, join(key_prefix, "triangle_attention_starting_node"), stack_index);
  tri_att_end_.add_af2_params(table, join(key_prefix, "triangle_attention_ending_node"), stack_index);
  tri_mul_out_.add_af2_params(table, join(key_prefix, "triangle_multiplication_outgoing"), stack_index);
  tri_mul_in_.add_af2_params(table, join(key_prefix, "triangle_multiplication_incoming"), stack_index);
  add_transition_af2_params(pair_transition_, table, join(key_prefix, "pair_transition"), stack_index);
}

// ---------------------------------------------------------------- SingleTemplateEmbedding
SingleTemplateEmbedding::SingleTemplateEmbedding(nn::Scope scope, const TemplateConfig& config)
    : Module(std::move(scope)),
      embedding2d_(child_scope("embedding2d"), template_pair_feat_dim(config), config.c_t, relu_init()),
      output_layer_norm_(child_scope("output_layer_norm"), config.c_t) {
  register_child(embedding2d_);
  for (int64_t b = 0; b < config.num_pair_blocks; ++b) {
    blocks_.push_back(std::make_unique<TemplatePairBlock>(child_scope("block_" + std::to_string(b)), config));
    register_child(*blocks_.back());
  }
  register_child(output_layer_norm_);
}

Variable SingleTemplateEmbedding::forward(const Variable& pair_feat, const Tensor& pair_mask, int64_t chunk) const {
  FC_CHECK(pair_feat.defined() && pair_feat.dim() == 3 && pair_feat.size(0) == pair_feat.size(1) &&
               pair_feat.size(2) == embedding2d_.in_features() && pair_mask.defined() &&
               pair_mask.shape() == Shape({pair_feat.size(0), pair_feat.size(0)}),
           "SingleTemplateEmbedding: pair_feat ", shape_of(pair_feat),
           " and pair_mask ", shape_of(pair_mask),
           " must be [N, N, ", embedding2d_.in_features(), "] and [N, N]");
  return stack(embedding2d_.forward(pair_feat), pair_mask, chunk);
}

Variable SingleTemplateEmbedding::forward_rows(const std::function<Tensor(int64_t, int64_t)>& feat_rows, int64_t n,
                                              const Tensor& pair_mask, int64_t chunk) const {
  FC_CHECK(!ag::grad_enabled(), "SingleTemplateEmbedding::forward_rows: inference only");
  FC_CHECK(pair_mask.defined() && pair_mask.shape() == Shape({n, n}), "SingleTemplateEmbedding: pair_mask ",
           shape_of(pair_mask), " must be [", n, ", ", n, "]");
  // [N, N, c_t]: embedding2d of each row block, the features of one block at a time.
  Variable t = run_chunked(n, chunk, [&](int64_t r0, int64_t rows) {
    const Tensor f = feat_rows(r0, rows);
    FC_CHECK(has_shape(f, {rows, n, embedding2d_.in_features()}), "SingleTemplateEmbedding: feature rows ",
             f.shape().str(), " (expected [", rows, ", ", n, ", ", embedding2d_.in_features(), "])");
    return embedding2d_.forward(Variable(f));
  });
  return stack(std::move(t), pair_mask, chunk);
}

Variable SingleTemplateEmbedding::blocks_with_grad(
    Variable t, const std::function<Variable(const TemplatePairBlock&, const Variable&)>& block) const {
  const size_t k = static_cast<size_t>(recompute_blocks_);
  if (k == 0) {
    for (const auto& b : blocks_) t = block(*b, t);
    return t;
  }
  std::vector<Generator*> gens;
  if (scope().rng != nullptr) gens.push_back(scope().rng);
  for (size_t b0 = 0; b0 < blocks_.size(); b0 += k) {
    const size_t b1 = std::min(blocks_.size(), b0 + k);
    // The segment runs again in the backward, after this returns: it holds a copy of `block`
    // (whose captures must be values).
    const ag::SegmentFn segment = [this, b0, b1, block](const std::vector<Variable>& in) {
      Variable s = in[0];
      for (size_t b = b0; b < b1; ++b) s = block(*blocks_[b], s);
      return std::vector<Variable>{std::move(s)};
    };
    t = ag::recompute(segment, {t}, gens)[0];
  }
  return t;
}

Variable SingleTemplateEmbedding::stack(Variable t, const Tensor& pair_mask, int64_t chunk) const {
  if (ag::grad_enabled()) {
    t = blocks_with_grad(std::move(t), [pair_mask, chunk](const TemplatePairBlock& b, const Variable& s) {
      return b.forward(s, pair_mask, chunk);
    });
    return output_layer_norm_.forward(t);
  }
  // t is this function's own from here (embedding2d's output): the blocks update it in place.
  for (const auto& block : blocks_) t = block->forward_impl(std::move(t), pair_mask, chunk, true);
  if (chunk <= 0) return output_layer_norm_.forward(t);
  // Chunked inference: the output LayerNorm row chunk by row chunk, written back into t.
  const Tensor ts = own_stream(t, true);
  for (int64_t r0 = 0; r0 < ts.size(0); r0 += chunk) {
    const int64_t rows = std::min(chunk, ts.size(0) - r0);
    Tensor slice = ts.narrow(0, r0, rows);
    slice.copy_(output_layer_norm_.forward(Variable(slice)).value());
  }
  return t;
}

void SingleTemplateEmbedding::set_recompute_blocks(int64_t blocks) {
  FC_CHECK(blocks >= 0, "SingleTemplateEmbedding '", path(), "': recompute_blocks ", blocks, " (must be >= 0)");
  recompute_blocks_ = blocks;
}

void SingleTemplateEmbedding::add_af2_params(Af2ParamTable& table, const std::string& key_prefix,
                                             int64_t stack_index) const {
  require_finalized(scope().params, path());
  FC_CHECK(stack_index < 0, "SingleTemplateEmbedding::add_af2_params: not a stacked module");
  add_linear_af2_params(embedding2d_, table, join(key_prefix, "embedding2d"), -1);
  const std::string stack = join(key_prefix, "template_pair_stack/__layer_stack_no_state");
  for (size_t b = 0; b < blocks_.size(); ++b) blocks_[b]->add_af2_params(table, stack, static_cast<int64_t>(b));
  add_layer_norm_af2_params(output_layer_norm_, table, join(key_prefix, "output_layer_norm"), -1);
}

// ---------------------------------------------------------------- TemplatePointwiseAttention (Alg. 17)
TemplatePointwiseAttention::TemplatePointwiseAttention(nn::Scope scope, int64_t c_z, const TemplateConfig& config)
    : Module(std::move(scope)), attention_(child_scope("attention"), [&] {
        nn::AttentionOptions o = nn::AttentionOptions::alphafold(c_z, config.c_t, config.pointwise_att.num_head,
                                                                 config.pointwise_att.head_dim, c_z);
        o.gating = config.pointwise_att.gating;
        return o;
      }()) {
  register_child(attention_);
}

Variable TemplatePointwiseAttention::forward(const Variable& z, const Variable& t, const Tensor& template_mask,
                                             int64_t chunk) const {
  const auto& o = attention_.options();
  FC_CHECK(z.defined() && t.defined() && template_mask.defined() && z.dim() == 3 && z.size(2) == o.c_q &&
               t.dim() == 4 && t.size(1) == z.size(0) && t.size(2) == z.size(1) && t.size(3) == o.c_kv &&
               template_mask.numel() == t.size(0),
           "TemplatePointwiseAttention: z ", shape_of(z), ", t ", shape_of(t), ", template_mask ",
           shape_of(template_mask), " must be [R, C, ", o.c_q, "], [T, R, C, ", o.c_kv, "], [T]");
  const int64_t rows = z.size(0), cols = z.size(1), nt = t.size(0), c_z = z.size(2), c_t = t.size(3);
  const Variable tt = ag::contiguous(ag::permute(t, {1, 2, 0, 3}));  // [R, C, T, c_t]: templates as keys
  const Tensor mb = mask_bias(template_mask.to(z.device()).reshape({nt})).view({1, 1, 1, nt});  // [1, 1, 1, T]
  return run_chunked(rows, chunk, [&](int64_t s, int64_t len) {
    const Variable q = ag::reshape(ag::narrow(z, 0, s, len), {len * cols, 1, c_z});     // one query per (i, j)
    const Variable kv = ag::reshape(ag::narrow(tt, 0, s, len), {len * cols, nt, c_t});  // T keys/values
    return ag::reshape(attention_.forward(q, kv, {Variable(mb)}), {len, cols, c_z});
  });
}

namespace {

// forward()'s key mask bias 1e9·(mask − 1) of one template: none for a present template (adding 0
// changes no score).
std::vector<Variable> key_mask_bias(float template_mask, Device device) {
  const float bias = 1e9f * (template_mask - 1.f);
  if (bias == 0.f) return {};
  return {Variable(Tensor::full({1, 1, 1, 1}, bias, DType::f32, device))};
}

}  // namespace

void TemplatePointwiseAttention::for_each_part(
    const char* caller, const Variable& z, const Variable& t_k, float template_mask, int64_t chunk,
    const std::function<void(int64_t, int64_t, const ag::AttentionPart&)>& f) const {
  const auto& o = attention_.options();
  FC_CHECK(!ag::grad_enabled(), "TemplatePointwiseAttention::", caller, ": inference only");
  FC_CHECK(z.defined() && t_k.defined() && z.dim() == 3 && z.size(2) == o.c_q && t_k.dim() == 3 &&
               t_k.size(0) == z.size(0) && t_k.size(1) == z.size(1) && t_k.size(2) == o.c_kv && template_mask > 0.f,
           "TemplatePointwiseAttention::", caller, ": z ", shape_of(z), ", t_k ", shape_of(t_k), ", mask ",
           template_mask, " must be [R, C, ", o.c_q, "], [R, C, ", o.c_kv, "], > 0");
  const int64_t rows = z.size(0), cols = z.size(1), c_z = z.size(2), c_t = t_k.size(2);
  const std::vector<Variable> biases = key_mask_bias(template_mask, z.device());
  const int64_t step = chunk > 0 ? chunk : rows;
  for (int64_t s = 0; s < rows; s += step) {
    const int64_t len = std::min(step, rows - s);
    const Variable q = ag::reshape(ag::narrow(z, 0, s, len), {len * cols, 1, c_z});     // one query per (i, j)
    const Variable kv = ag::reshape(ag::narrow(t_k, 0, s, len), {len * cols, 1, c_t});  // this template's key
    f(s, len, attention_.heads_part(q, kv, biases));  // a [len·C, 1, H, d], lse [len·C, H, 1]
  }
}

void TemplatePointwiseAttention::add(const Variable& z, const Variable& t_k, float template_mask, int64_t chunk,
                                     Running& r) const {
  const auto& o = attention_.options();
  const int64_t cells = z.defined() && z.dim() == 3 ? z.size(0) * z.size(1) : 0, cols = cells > 0 ? z.size(1) : 0;
  const int64_t h = o.num_heads, d = o.head_dim;
  const bool first = !r.heads.defined();
  for_each_part("add", z, t_k, template_mask, chunk, [&](int64_t s, int64_t len, const ag::AttentionPart& part) {
    if (first && s == 0) {
      r.heads = Tensor::empty({cells, 1, h, d}, part.a.dtype(), z.device());
      r.lse = Tensor::empty({cells, h, 1}, DType::f32, z.device());
    }
    Tensor heads = r.heads.narrow(0, s * cols, len * cols), lse = r.lse.narrow(0, s * cols, len * cols);
    if (first) {
      heads.copy_(part.a);
      lse.copy_(part.lse);
    } else {
      ops::attention_combine(heads.permute({0, 2, 1, 3}), lse, part.a.permute({0, 2, 1, 3}), part.lse);
    }
  });
}

void TemplatePointwiseAttention::finish(const Variable& z, const Running& r, int64_t chunk, const Tensor& into) const {
  const auto& o = attention_.options();
  FC_CHECK(r.heads.defined() && z.dim() == 3 && r.heads.size(0) == z.size(0) * z.size(1),
           "TemplatePointwiseAttention::finish: no template was added for z ", shape_of(z));
  const int64_t cols = z.size(1), c_z = z.size(2);
  run_chunked(z.size(0), chunk, [&](int64_t s, int64_t len) {
    const Variable q = ag::reshape(ag::narrow(z, 0, s, len), {len * cols, 1, c_z});
    const Variable heads(r.heads.narrow(0, s * cols, len * cols));
    return ag::reshape(attention_.finish_heads(q, heads), {len, cols, o.c_out});
  }, 0, into);
}

void TemplatePointwiseAttention::add_scores(const Variable& z, const Variable& t_k, float template_mask, int64_t chunk,
                                            const Tensor& scores, int64_t slot) const {
  const auto& o = attention_.options();
  const int64_t cells = z.defined() && z.dim() == 3 ? z.size(0) * z.size(1) : 0, cols = cells > 0 ? z.size(1) : 0;
  FC_CHECK(scores.defined() && scores.dtype() == DType::f32 &&
               has_shape(scores, {cells, o.num_heads, scores.dim() == 3 ? scores.size(2) : 0}) && slot >= 0 &&
               slot < scores.size(2) && scores.device() == z.device(),
           "TemplatePointwiseAttention::add_scores: scores ", shape_of(scores), " slot ", slot, " for z ",
           shape_of(z), " must be f32 [R·C, ", o.num_heads, ", T] on z's device, 0 <= slot < T");
  for_each_part("add_scores", z, t_k, template_mask, chunk,
                [&](int64_t s, int64_t len, const ag::AttentionPart& part) {
                  // With one key the log-sum-exp is the score itself.
                  Tensor dst = scores.narrow(0, s * cols, len * cols).narrow(2, slot, 1);
                  dst.copy_(part.lse);
                });
}

void TemplatePointwiseAttention::scores_to_weights(const Tensor& scores, int64_t block) {
  FC_CHECK(scores.defined() && scores.dim() == 3 && scores.dtype() == DType::f32 && scores.is_contiguous(),
           "TemplatePointwiseAttention::scores_to_weights: scores ", shape_of(scores),
           " must be a contiguous f32 [N·N, H, T]");
  const int64_t rows = scores.size(0), step = block > 0 ? std::min(block, rows) : rows;
  for (int64_t s = 0; s < rows; s += step) {
    Tensor block = scores.narrow(0, s, std::min(step, rows - s));
    block.copy_(ag::softmax(Variable(block)).value());
  }
}

void TemplatePointwiseAttention::add_weighted(const Variable& t_k, const Tensor& weights, int64_t slot,
                                              bool output_bias, int64_t chunk, const Tensor& into) const {
  const auto& o = attention_.options();
  FC_CHECK(!ag::grad_enabled(), "TemplatePointwiseAttention::add_weighted: inference only");
  FC_CHECK(two_pass_supported(), "TemplatePointwiseAttention::add_weighted: the gated attention '", path(),
           "' reads the pair (use add/finish)");
  FC_CHECK(t_k.defined() && t_k.dim() == 3 && t_k.size(2) == o.c_kv && weights.defined() &&
               weights.dtype() == DType::f32 && weights.dim() == 3 &&
               has_shape(weights, {t_k.size(0) * t_k.size(1), o.num_heads, weights.size(2)}) && slot >= 0 &&
               slot < weights.size(2) && into.defined() && has_shape(into, {t_k.size(0), t_k.size(1), o.c_out}),
           "TemplatePointwiseAttention::add_weighted: t_k ", shape_of(t_k), ", weights ", shape_of(weights), " slot ",
           slot, ", into ", shape_of(into), " must be [R, C, ", o.c_kv, "], f32 [R·C, ", o.num_heads,
           ", T], 0 <= slot < T, [R, C, ", o.c_out, "]");
  const int64_t cols = t_k.size(1), c_t = t_k.size(2), h = o.num_heads, d = o.head_dim;
  run_chunked(t_k.size(0), chunk, [&](int64_t s, int64_t len) {
    // With one key per part the heads are v_k itself; its weight w_k scales every channel of a head.
    const Variable v = attention_.values(ag::reshape(ag::narrow(t_k, 0, s, len), {len * cols, 1, c_t}));
    const Variable w(weights.narrow(0, s * cols, len * cols).narrow(2, slot, 1).contiguous().view({len * cols, 1, h, 1}));
    const Variable a = ag::reshape(ag::mul(v, w), {len, cols, h * d});
    return output_bias ? attention_.output().forward(a) : attention_.output().forward_no_bias(a);
  }, 0, into);
}

void TemplatePointwiseAttention::add_af2_params(Af2ParamTable& table, const std::string& key_prefix,
                                                int64_t stack_index) const {
  require_finalized(scope().params, path());
  add_attention_af2_params(attention_, table, join(key_prefix, "attention"), stack_index);
}

// ---------------------------------------------------------------- TemplateEmbedder
TemplateEmbedder::TemplateEmbedder(nn::Scope scope, int64_t c_z, const TemplateConfig& config)
    : Module(std::move(scope)),
      cfg_(config),
      single_(child_scope("single_template_embedding"), config),
      attention_(child_scope("template_pointwise_attention"), c_z, config) {
  register_child(single_);
  register_child(attention_);
}

TemplatePairFeatRows TemplateEmbedder::template_feat(const TemplateInputs& in, int64_t k, Device device) const {
  const Tensor aa = in.aatype.select(0, k).contiguous();
  const Tensor pos = in.all_atom_positions.select(0, k).contiguous();
  const Tensor am = in.all_atom_mask.select(0, k).contiguous();
  const Tensor pb = in.pseudo_beta.defined() ? in.pseudo_beta.select(0, k).contiguous() : pseudo_beta(aa, pos);
  const Tensor pbm =
      in.pseudo_beta_mask.defined() ? in.pseudo_beta_mask.select(0, k).contiguous() : pseudo_beta_mask(aa, am);
  return TemplatePairFeatRows(aa, pb.to(device), pbm.to(device), pos, am, cfg_);
}

Variable TemplateEmbedder::forward(const Variable& z, const TemplateInputs& in, const Tensor& pair_mask,
                                   int64_t chunk) const {
  FC_CHECK(z.defined() && z.dim() == 3 && in.aatype.defined() && in.aatype.dim() == 2 &&
               in.aatype.size(1) == z.size(0) && in.all_atom_positions.defined() && in.all_atom_mask.defined() &&
               in.template_mask.defined() && in.template_mask.numel() == in.aatype.size(0),
           "TemplateEmbedder: z ", shape_of(z),
           " with template aatype ", shape_of(in.aatype),
           " and template_mask ", shape_of(in.template_mask),
           ": expected [N, N, c_z], [T, N], [T] and all atom inputs");
  const int64_t nt = in.aatype.size(0);
  const std::vector<float> mask = host_floats(in.template_mask);
  double mask_sum = 0;
  for (float v : mask) mask_sum += v;
  // No (unmasked) templates: AlphaFold multiplies the embedding by 1[Σ mask > 0] = 0.
  if (nt == 0 || mask_sum <= 0) return Variable(Tensor::zeros(z.shape(), z.dtype(), z.device()));
  return embed_present_slots(z, mask, chunk, [&](int64_t k) {
    return single_.forward(Variable(template_feat(in, k, z.device()).rows(0, z.size(0)).to(z.dtype())), pair_mask,
                           chunk);
  });
}

namespace {
// The slots with mask > 0: a masked slot's key bias is 1e9·(mask − 1) ≤ −1e9 beside a present
// one's scores, so its softmax weight is exactly 0 in fp32 (see add()).
std::vector<int64_t> present_slots(const std::vector<float>& mask) {
  std::vector<int64_t> present;
  for (size_t k = 0; k < mask.size(); ++k)
    if (mask[k] > 0.f) present.push_back(static_cast<int64_t>(k));
  return present;
}
}  // namespace

Variable TemplateEmbedder::embed_present_slots(const Variable& z, const std::vector<float>& mask, int64_t chunk,
                                               const std::function<Variable(int64_t)>& stack) const {
  // A masked slot adds nothing to the update and receives a zero gradient: its stack is not run
  // (nor are its features read, nor its dropout masks drawn).
  std::vector<Variable> per_template;
  std::vector<float> present_mask;
  for (const int64_t k : present_slots(mask)) {
    const profile::Scope stage("pair_stack", z.device());
    per_template.push_back(ag::unsqueeze(stack(k), 0));  // [1, R, C, c_t]
    present_mask.push_back(mask[static_cast<size_t>(k)]);
  }
  FC_CHECK(!per_template.empty(), "TemplateEmbedder '", path(), "': no template with mask > 0");
  const Variable t = per_template.size() == 1 ? per_template[0] : ag::concat(per_template, 0);  // [T', R, C, c_t]
  const Tensor m = Tensor::from_vector(present_mask, {static_cast<int64_t>(present_mask.size())}, DType::f32);
  const profile::Scope attention("pointwise_attention", z.device());
  return attention_.forward(z, t, m, chunk);
}

std::vector<int64_t> TemplateEmbedder::present_templates(const char* caller, const Variable& z, int64_t n,
                                                         const TemplateInputs& in, std::vector<float>& mask) const {
  FC_CHECK(!ag::grad_enabled(), "TemplateEmbedder::", caller, ": inference only");
  FC_CHECK(z.defined() && z.dim() == 3 && in.aatype.defined() && in.aatype.dim() == 2 && in.aatype.size(1) == n &&
               in.all_atom_positions.defined() && in.all_atom_mask.defined() && in.template_mask.defined() &&
               in.template_mask.numel() == in.aatype.size(0),
           "TemplateEmbedder::", caller, ": z ", shape_of(z), " of N = ", n, " with template aatype ",
           shape_of(in.aatype), " and template_mask ", shape_of(in.template_mask),
           ": expected [rows, columns, c_z], [T, N], [T] and all atom inputs");
  mask = host_floats(in.template_mask);
  return present_slots(mask);
}

void TemplateEmbedder::add_into(const Variable& z, const TemplateInputs& in, const Tensor& pair_mask, int64_t chunk,
                                const Tensor& into, TemplatePasses passes) const {
  FC_CHECK(z.defined() && z.dim() == 3 && z.size(0) == z.size(1) && into.defined() && into.shape() == z.shape(),
           "TemplateEmbedder::add_into: z ", shape_of(z), " into ", shape_of(into),
           ": expected [N, N, c_z] and z's shape");
  std::vector<float> mask;
  const std::vector<int64_t> present = present_templates("add_into", z, z.size(0), in, mask);
  if (present.empty()) return;
  // Template k's pair stack output t_k [N, N, c_t].
  auto stack = [&](int64_t k) {
    const profile::Scope stage("pair_stack", z.device());
    const TemplatePairFeatRows feat = template_feat(in, k, z.device());
    return single_.forward_rows([&](int64_t r0, int64_t len) { return feat.rows(r0, len).to(z.dtype()); }, z.size(0),
                                pair_mask, chunk);
  };
  add_templates(z, present, mask, stack, chunk, into, passes);
}

void TemplateEmbedder::add_templates(const Variable& z, const std::vector<int64_t>& present,
                                     const std::vector<float>& mask, const std::function<Variable(int64_t)>& stack,
                                     int64_t chunk, const Tensor& into, TemplatePasses passes) const {
  const auto nk = static_cast<int64_t>(present.size());
  const auto mask_of = [&](int64_t slot) { return mask[static_cast<size_t>(present[static_cast<size_t>(slot)])]; };
  if (passes == TemplatePasses::two && nk >= 2 && attention_.two_pass_supported()) {
    const int64_t cols = z.size(1);
    const Tensor scores =
        Tensor::empty({z.size(0) * cols, cfg_.pointwise_att.num_head, nk}, DType::f32, z.device());
    for (int64_t slot = 0; slot < nk; ++slot) {
      const Variable t = stack(present[static_cast<size_t>(slot)]);
      const profile::Scope attention("pointwise_attention", z.device());
      attention_.add_scores(z, t, mask_of(slot), chunk, scores, slot);
    }
    {
      const profile::Scope attention("pointwise_attention", z.device());
      TemplatePointwiseAttention::scores_to_weights(scores, chunk > 0 ? chunk * cols : 0);
    }
    // From here on z is not read: `into` may be z's storage.
    for (int64_t slot = 0; slot < nk; ++slot) {
      const Variable t = stack(present[static_cast<size_t>(slot)]);
      const profile::Scope attention("pointwise_attention", z.device());
      attention_.add_weighted(t, scores, slot, slot == 0, chunk, into);
    }
    return;
  }
  TemplatePointwiseAttention::Running running;
  for (int64_t slot = 0; slot < nk; ++slot) {
    const Variable t = stack(present[static_cast<size_t>(slot)]);
    const profile::Scope attention("pointwise_attention", z.device());
    attention_.add(z, t, mask_of(slot), chunk, running);
  }
  const profile::Scope attention("pointwise_attention", z.device());
  attention_.finish(z, running, chunk, into);
}

void TemplateEmbedder::add_af2_params(Af2ParamTable& table, const std::string& key_prefix,
                                      int64_t stack_index) const {
  require_finalized(scope().params, path());
  FC_CHECK(stack_index < 0, "TemplateEmbedder::add_af2_params: not a stacked module");
  const std::string base = join(key_prefix, "template_embedding");
  single_.add_af2_params(table, join(base, "single_template_embedding"));
  attention_.add_af2_params(table, base);
}

// ---------------------------------------------------------------- TemplateAngleEmbedder
TemplateAngleEmbedder::TemplateAngleEmbedder(nn::Scope scope, int64_t c_m)
    : Module(std::move(scope)),
      template_single_embedding_(child_scope("template_single_embedding"),
                                 kAatypeClasses + 5 * kNumTorsions, c_m, [] {
                                   nn::LinearOptions o = relu_init();
                                   o.act = ops::Activation::relu;
                                   return o;
                                 }()),
      template_projection_(child_scope("template_projection"), c_m, c_m, relu_init()) {
  register_child(template_single_embedding_);
  register_child(template_projection_);
}

Variable TemplateAngleEmbedder::forward(const Variable& angle_feat) const {
  FC_CHECK(angle_feat.defined() && angle_feat.dim() == 3 &&
               angle_feat.size(2) == template_single_embedding_.in_features(),
           "TemplateAngleEmbedder: angle_feat ", shape_of(angle_feat),
           " must be [T, N, ", template_single_embedding_.in_features(), "]");
  return template_projection_.forward(template_single_embedding_.forward(angle_feat));  // [T, N, c_m]
}

void TemplateAngleEmbedder::add_af2_params(Af2ParamTable& table, const std::string& key_prefix,
                                           int64_t stack_index) const {
  require_finalized(scope().params, path());
  add_linear_af2_params(template_single_embedding_, table, join(key_prefix, "template_single_embedding"), stack_index);
  add_linear_af2_params(template_projection_, table, join(key_prefix, "template_projection"), stack_index);
}

}  // namespace foldcore::af2
