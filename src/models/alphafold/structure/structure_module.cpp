#include "models/alphafold/structure/structure_module.h"

#include <algorithm>
#include <string>

#include "autograd/grad_mode.h"
#include "models/alphafold/parallel/pair_rows.h"
#include "models/alphafold/structure/all_atom.h"
#include "models/alphafold/structure/structure_geometry.h"
#include "models/alphafold/structure/structure_module_ops.h"

namespace foldcore::af2 {
namespace {

namespace ag = autograd;

// Haiku's names for the k-th module of the same name: "name", "name_1", "name_2", …
std::string hk_name(const std::string& base, int k) { return k == 0 ? base : base + "_" + std::to_string(k); }

// Stacks equally shaped tensors on a new leading axis (host f32).
Tensor stack(const std::vector<Tensor>& xs) {
  FC_CHECK(!xs.empty(), "stack: no tensors");
  Shape s;
  s.push_back(static_cast<int64_t>(xs.size()));
  for (int i = 0; i < xs[0].dim(); ++i) s.push_back(xs[0].size(i));
  Tensor out = Tensor::empty(s, DType::f32);
  for (size_t i = 0; i < xs.size(); ++i) out.select(0, static_cast<int64_t>(i)).copy_(xs[i]);
  return out;
}

// Host f32 copies of tensors on one device. On a GPU they are gathered into one device buffer
// first, so the copy to the host (which waits for the device's queue) happens once per forward
// instead of once per tensor per layer.
std::vector<Tensor> to_host_together(const std::vector<Tensor>& xs) {
  std::vector<Tensor> out;
  if (xs.empty()) return out;
  const Device dev = xs[0].device();
  if (!dev.is_cuda()) {
    for (const Tensor& x : xs) out.push_back(host_f32(x));
    return out;
  }
  int64_t total = 0;
  for (const Tensor& x : xs) total += x.numel();
  const Tensor buf = Tensor::empty({total}, DType::f32, dev);
  int64_t off = 0;
  for (const Tensor& x : xs) {
    FC_CHECK(x.device() == dev, "to_host_together: tensors on ", dev.str(), " and ", x.device().str());
    buf.narrow(0, off, x.numel()).view(x.shape()).copy_(x);
    off += x.numel();
  }
  const Tensor host = buf.to(Device::cpu());
  off = 0;
  for (const Tensor& x : xs) {
    out.push_back(host.narrow(0, off, x.numel()).view(x.shape()));
    off += x.numel();
  }
  return out;
}

}  // namespace

AngleResnet::AngleResnet(nn::Scope scope, const StructureModuleConfig& cfg)
    : nn::Module(std::move(scope)),
      input_projection_(child_scope("input_projection"), cfg.c_s, cfg.sidechain_channels),
      input_projection_1_(child_scope("input_projection_1"), cfg.c_s, cfg.sidechain_channels),
      unnormalized_angles_(child_scope("unnormalized_angles"), cfg.sidechain_channels, 14) {
  register_child(input_projection_);
  register_child(input_projection_1_);
  const int64_t c = cfg.sidechain_channels;
  for (int k = 0; k < cfg.sidechain_residual_blocks; ++k) {
    // resblock1: relu init (it feeds a relu); resblock2: zero init (AF2 zero_init = true).
    resblock1_.push_back(std::make_unique<nn::Linear>(child_scope(hk_name("resblock1", k)), c, c,
                                                      nn::LinearOptions{.init = nn::Init::relu}));
    resblock2_.push_back(std::make_unique<nn::Linear>(child_scope(hk_name("resblock2", k)), c, c,
                                                      nn::LinearOptions{.init = nn::Init::final}));
    register_child(*resblock1_.back());
    register_child(*resblock2_.back());
  }
  register_child(unnormalized_angles_);
}

Variable AngleResnet::forward(const Variable& s, const Variable& s_initial) const {
  // a = W_in·relu(s) + W_in1·relu(s_initial); a += W2·relu(W1·relu(a)) per block.
  Variable a = ag::add(input_projection_.forward(ag::relu(s)), input_projection_1_.forward(ag::relu(s_initial)));
  for (size_t k = 0; k < resblock1_.size(); ++k) {
    const Variable h = resblock1_[k]->forward(ag::relu(a));
    a = ag::add(a, resblock2_[k]->forward(ag::relu(h)));
  }
  return ag::reshape(unnormalized_angles_.forward(ag::relu(a)), {s.size(0), 7, 2});
}

void AngleResnet::add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index) const {
  add_linear_params(table, key_prefix + "/input_projection", input_projection_, stack_index);
  add_linear_params(table, key_prefix + "/input_projection_1", input_projection_1_, stack_index);
  for (size_t k = 0; k < resblock1_.size(); ++k) {
    add_linear_params(table, key_prefix + "/" + hk_name("resblock1", static_cast<int>(k)), *resblock1_[k],
                      stack_index);
    add_linear_params(table, key_prefix + "/" + hk_name("resblock2", static_cast<int>(k)), *resblock2_[k],
                      stack_index);
  }
  add_linear_params(table, key_prefix + "/unnormalized_angles", unnormalized_angles_, stack_index);
}

StructureModule::StructureModule(nn::Scope scope, const StructureModuleConfig& cfg)
    : nn::Module(std::move(scope)),
      cfg_(cfg),
      single_layer_norm_(child_scope("single_layer_norm"), cfg.c_s),
      initial_projection_(child_scope("initial_projection"), cfg.c_s, cfg.c_s),
      pair_layer_norm_(child_scope("pair_layer_norm"), cfg.c_z),
      ipa_(child_scope("fold_iteration/invariant_point_attention"), cfg),
      ipa_dropout_(child_scope("fold_iteration/ipa_dropout"), cfg.dropout),
      attention_layer_norm_(child_scope("fold_iteration/attention_layer_norm"), cfg.c_s),
      transition_dropout_(child_scope("fold_iteration/transition_dropout"), cfg.dropout),
      transition_layer_norm_(child_scope("fold_iteration/transition_layer_norm"), cfg.c_s),
      affine_update_(child_scope("fold_iteration/affine_update"), cfg.c_s, 6, {.init = nn::Init::final}),
      rigid_sidechain_(child_scope("fold_iteration/rigid_sidechain"), cfg) {
  FC_CHECK(cfg.num_layers > 0 && cfg.num_transition_layers > 0, "StructureModule: num_layers (", cfg.num_layers,
           ") and num_transition_layers (", cfg.num_transition_layers, ") must be positive");
  for (int k = 0; k < cfg.num_transition_layers; ++k) {
    const bool last = k + 1 == cfg.num_transition_layers;
    nn::LinearOptions o;
    o.init = last ? nn::Init::final : nn::Init::relu;
    o.act = last ? ops::Activation::none : ops::Activation::relu;
    transition_.push_back(
        std::make_unique<nn::Linear>(child_scope("fold_iteration/" + hk_name("transition", k)), cfg.c_s, cfg.c_s, o));
  }
  for (nn::Module* m : std::initializer_list<nn::Module*>{&single_layer_norm_, &initial_projection_, &pair_layer_norm_,
                                                         &ipa_, &ipa_dropout_, &attention_layer_norm_})
    register_child(*m);
  for (auto& t : transition_) register_child(*t);
  register_child(transition_dropout_);
  register_child(transition_layer_norm_);
  register_child(affine_update_);
  register_child(rigid_sidechain_);
}

StructureModuleOutputs StructureModule::forward(const StructureModuleInputs& in) const {
  FC_CHECK(in.single.defined() && in.single.dim() == 2 && in.single.size(1) == cfg_.c_s,
           "StructureModule: single must be [N, ", cfg_.c_s, "], got ",
           in.single.defined() ? in.single.shape().str() : std::string("undefined"));
  const int64_t n = in.single.size(0);
  const PairRows pr = in.pair_split ? PairRows::of(*in.pair_split, n) : PairRows{n, 1, 0};
  FC_CHECK(!in.pair_split || !ag::grad_enabled(), "StructureModule: a split pair is for inference");
  FC_CHECK(in.pair.defined() && in.pair.shape() == Shape({pr.rows(), pr.padded(), cfg_.c_z}),
           "StructureModule: pair must be [", pr.rows(), ", ", pr.padded(), ", ", cfg_.c_z, "]",
           in.pair_split ? " (this rank's rows)" : "", ", got ",
           in.pair.defined() ? in.pair.shape().str() : std::string("undefined"));
  FC_CHECK(in.aatype.defined() && in.aatype.shape() == Shape({n}), "StructureModule: aatype must be [", n, "]");
  const Tensor mask = in.seq_mask.defined() ? host_f32(in.seq_mask) : Tensor::full({n}, 1.0, DType::f32);
  FC_CHECK(mask.shape() == Shape({n}), "StructureModule: seq_mask must be [", n, "], got ", mask.shape().str());

  // Alg. 20 lines 1–3.
  const Variable s_initial = single_layer_norm_.forward(in.single);
  Variable s = initial_projection_.forward(s_initial);
  // Inference: no whole LN(z); IPA normalises the pair rows of each query block when it needs them
  // (8 layers × one LayerNorm pass over the pair, instead of a second pair-sized tensor).
  const bool rows_on_demand = !ag::grad_enabled();
  const Variable z = rows_on_demand ? Variable() : pair_layer_norm_.forward(in.pair);
  const std::function<Variable(int64_t, int64_t)> z_rows = [&](int64_t i0, int64_t len) {
    if (!rows_on_demand) return ag::narrow(z, 0, i0, len);
    const Variable rows = ag::narrow(in.pair, 0, i0 - pr.row0(), len);
    return pair_layer_norm_.forward(pr.padded() == n ? rows : ag::contiguous(ag::narrow(rows, 1, 0, n)));
  };
  // Alg. 20 line 4: identity backbone frames.
  const Device dev = s.device();
  const QuatRigid identity = QuatRigid::identity({n});
  QuatFrameVar frame{Variable(identity.quat.to(dev)), Variable(identity.trans.to(dev))};
  const ResidueGeometry geo = ResidueGeometry::of(in.aatype, n, dev);

  StructureModuleOutputs out;
  std::vector<Variable> states;
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    // AF2 stop_gradient on rotations: the rotation enters the iteration as a constant (for IPA and
    // for the quaternion update); the translation carries its graph from the previous layers.
    // (cfg.stop_rotation_gradient false: the whole chain, for finite-difference checks.)
    const bool stop = cfg_.stop_rotation_gradient;
    const Variable quat_in = stop ? frame.quat.detach() : frame.quat;
    const Variable rot_in = quat_to_rot_var(quat_in);  // a constant when quat_in is detached
    const Variable update = ipa_.forward(s, z_rows, mask, rot_in, frame.trans, in.pair_split);
    s = attention_layer_norm_.forward(ipa_dropout_.forward(ag::add(s, update)));
    Variable x = s;
    for (const auto& lin : transition_) x = lin->forward(x);
    s = transition_layer_norm_.forward(transition_dropout_.forward(ag::add(x, s)));

    frame = pre_compose_var({quat_in, frame.trans}, affine_update_.forward(s));  // Alg. 23
    const Variable ua = rigid_sidechain_.forward(s, s_initial);                 // Alg. 24
    const Variable a = l2_normalize_last(ua);
    const RigidVar bb{quat_to_rot_var(frame.quat), ag::scale(frame.trans, cfg_.position_scale)};
    const RigidVar groups = torsion_angles_to_frames_var(geo, bb, a);
    const Variable atom14 = frames_to_atom14_positions_var(geo, groups);
    out.angles_vars.push_back(a);
    out.unnormalized_angles_vars.push_back(ua);
    out.frames_vars.push_back(frame);
    out.sidechain_frames_vars.push_back(groups);
    out.positions_vars.push_back(atom14);
    states.push_back(s);
  }
  // Every layer's outputs to the host in one copy: per layer quat, trans, group rot, group trans,
  // atom14, angles, unnormalised angles, state.
  std::vector<Tensor> dev_values;
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    const auto k = static_cast<size_t>(l);
    for (const Variable* v : {&out.frames_vars[k].quat, &out.frames_vars[k].trans, &out.sidechain_frames_vars[k].rot,
                              &out.sidechain_frames_vars[k].trans, &out.positions_vars[k], &out.angles_vars[k],
                              &out.unnormalized_angles_vars[k], &states[k]})
      dev_values.push_back(v->value());
  }
  const std::vector<Tensor> host = to_host_together(dev_values);
  std::vector<Tensor> frames7, sidechain, positions, angles, unnormalized, state_values;
  for (size_t l = 0; l < states.size(); ++l) {
    const Tensor* h = &host[8 * l];
    frames7.push_back(QuatRigid{h[0], h[1]}.to_tensor7(cfg_.position_scale));
    sidechain.push_back(rigid_to_4x4(Rigid{h[2], h[3]}));
    positions.push_back(h[4]);
    angles.push_back(h[5]);
    unnormalized.push_back(h[6]);
    state_values.push_back(h[7]);
  }
  out.frames = stack(frames7);
  out.sidechain_frames = stack(sidechain);
  out.positions = stack(positions);
  out.angles = stack(angles);
  out.unnormalized_angles = stack(unnormalized);
  out.states = stack(state_values);
  out.single = s;
  out.final_frames = QuatRigid{host[host.size() - 8].clone(), host[host.size() - 7].clone()};
  out.final_atom14_positions = positions.back();

  Tensor residx = in.residx_atom37_to_atom14, exists = in.atom37_atom_exists;
  if (!residx.defined() || !exists.defined()) {
    const Atom37Maps maps = atom37_maps(in.aatype);
    if (!residx.defined()) residx = maps.residx_atom37_to_atom14;
    if (!exists.defined()) exists = maps.atom37_atom_exists;
  }
  out.final_atom_mask = host_f32(exists);  // read once: the mask and the positions' map
  out.final_atom_positions = atom14_to_atom37(out.final_atom14_positions, residx, out.final_atom_mask);
  return out;
}

void StructureModule::add_af2_params(Af2ParamTable& table, const std::string& key_prefix, int64_t stack_index) const {
  add_layer_norm_params(table, key_prefix + "/single_layer_norm", single_layer_norm_, stack_index);
  add_linear_params(table, key_prefix + "/initial_projection", initial_projection_, stack_index);
  add_layer_norm_params(table, key_prefix + "/pair_layer_norm", pair_layer_norm_, stack_index);
  const std::string fold = key_prefix + "/fold_iteration";
  ipa_.add_af2_params(table, fold + "/invariant_point_attention", stack_index);
  add_layer_norm_params(table, fold + "/attention_layer_norm", attention_layer_norm_, stack_index);
  for (size_t k = 0; k < transition_.size(); ++k)
    add_linear_params(table, fold + "/" + hk_name("transition", static_cast<int>(k)), *transition_[k], stack_index);
  add_layer_norm_params(table, fold + "/transition_layer_norm", transition_layer_norm_, stack_index);
  add_linear_params(table, fold + "/affine_update", affine_update_, stack_index);
  rigid_sidechain_.add_af2_params(table, fold + "/rigid_sidechain", stack_index);
}

}  // namespace foldcore::af2
