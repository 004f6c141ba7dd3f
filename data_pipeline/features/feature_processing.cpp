#include "data_pipeline/features/feature_processing.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/error.h"
#include "data_pipeline/structure/geometry.h"
#include "data_pipeline/structure/residue_constants.h"

namespace foldcore::data {
namespace {

using msa_tf::MsaRows;
using msa_tf::PhiloxStream;

// ------------------------------------------------------------------ reading raw arrays

template <typename Out>
std::vector<Out> convert(const NpyArray& a, const std::string& name) {
  const size_t n = static_cast<size_t>(a.numel());
  FC_CHECK(a.data.size() == n * a.dtype.itemsize, "process_features: '", name, "' holds ", a.data.size(),
           " bytes for shape ", npy_shape_str(a.shape));
  std::vector<Out> out(n);
  const uint8_t* p = a.data.data();
  auto load = [&](auto tag) {
    using T = decltype(tag);
    for (size_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, p + i * sizeof(T), sizeof(T));
      out[i] = static_cast<Out>(v);
    }
  };
  const char k = a.dtype.kind;
  const size_t s = a.dtype.itemsize;
  if (k == 'f' && s == 4) load(float{});
  else if (k == 'f' && s == 8) load(double{});
  else if (k == 'i' && s == 1) load(int8_t{});
  else if (k == 'i' && s == 2) load(int16_t{});
  else if (k == 'i' && s == 4) load(int32_t{});
  else if (k == 'i' && s == 8) load(int64_t{});
  else if ((k == 'u' || k == 'b') && s == 1) load(uint8_t{});
  else if (k == 'u' && s == 2) load(uint16_t{});
  else if (k == 'u' && s == 4) load(uint32_t{});
  else FC_THROW("process_features: '", name, "' has unsupported dtype ", a.dtype.descr());
  return out;
}

const NpyArray& need(const FeatureDict& raw, const std::string& name, size_t rank) {
  FC_CHECK(raw.contains(name), "process_features: raw feature '", name, "' is missing");
  const NpyArray& a = raw.at(name);
  FC_CHECK(a.shape.size() == rank, "process_features: '", name, "' has shape ", npy_shape_str(a.shape),
           ", expected rank ", rank);
  return a;
}

// Index of the largest value per row of width `w` (first on ties, as argmax).
std::vector<int64_t> argmax_rows(const std::vector<float>& v, size_t w) {
  std::vector<int64_t> out(v.size() / w);
  for (size_t r = 0; r < out.size(); ++r) {
    size_t best = 0;
    for (size_t c = 1; c < w; ++c)
      if (v[r * w + c] > v[r * w + best]) best = c;
    out[r] = static_cast<int64_t>(best);
  }
  return out;
}

// ------------------------------------------------------------------ writing with the recycling axis last

// An output axis: its natural size and the size written (larger: zero padding).
struct Dim {
  int64_t size, padded;
  Dim(int64_t s) : size(s), padded(s) {}  // NOLINT: fixed axes convert implicitly
  Dim(int64_t s, int64_t p) : size(s), padded(p) {}
};

// per_iter[k] (row-major over `shape`) as slice k of an array [padded..., r_out]; slices past
// per_iter.size() repeat the last one, padding is zero. The leading axis may be shorter in some
// iterations (block deletion leaves fewer MSA rows): `shape[0].size` is the largest.
template <typename Out, typename T>
NpyArray stack(const std::vector<const std::vector<T>*>& per_iter, const std::vector<Dim>& shape, size_t r_out,
               NpyDType dtype) {
  size_t numel = 1, padded_numel = 1;
  std::vector<int64_t> out_shape;
  for (const Dim& d : shape) {
    numel *= static_cast<size_t>(d.size);
    padded_numel *= static_cast<size_t>(d.padded);
    out_shape.push_back(d.padded);
  }
  out_shape.push_back(static_cast<int64_t>(r_out));
  const size_t rank = shape.size();
  // Elements per index of the leading axis.
  const size_t per_lead = rank == 0 || shape[0].size == 0 ? 1 : numel / static_cast<size_t>(shape[0].size);
  for (size_t k = 0; k < per_iter.size(); ++k)
    FC_CHECK(rank == 0 ? per_iter[k]->size() == 1 : per_iter[k]->size() % per_lead == 0 && per_iter[k]->size() <= numel,
             "process_features: iteration ", k, " has ", per_iter[k]->size(), " values, expected ", numel);
  NpyArray a{dtype, std::move(out_shape), std::vector<uint8_t>(padded_numel * r_out * sizeof(Out), 0)};
  uint8_t* base = a.data.data();
  // Rows of `inner` contiguous values, walked by an odometer over the leading axes; a rank-1 array
  // is rows of one value (its one axis may be shorter in some iterations).
  const bool flat = rank <= 1;
  const size_t inner = flat ? 1 : static_cast<size_t>(shape.back().size);
  const size_t inner_padded = flat ? 1 : static_cast<size_t>(shape.back().padded);
  const size_t lead_axes = flat ? rank : rank - 1;
  std::vector<const T*> src(r_out);
  std::vector<size_t> rows(r_out);
  size_t max_rows = 0;
  for (size_t j = 0; j < r_out; ++j) {
    const std::vector<T>& v = *per_iter[std::min(j, per_iter.size() - 1)];
    src[j] = v.data();
    rows[j] = inner == 0 ? 0 : v.size() / inner;
    max_rows = std::max(max_rows, rows[j]);
  }
  std::vector<size_t> index(lead_axes, 0);
  for (size_t o = 0; o < max_rows; ++o) {
    size_t row = 0;
    for (size_t d = 0; d < lead_axes; ++d) row = row * static_cast<size_t>(shape[d].padded) + index[d];
    // The r_out values of one element are adjacent (recycling axis last): write them together.
    uint8_t* dst = base + row * inner_padded * r_out * sizeof(Out);
    for (size_t i = 0; i < inner; ++i)
      for (size_t j = 0; j < r_out; ++j) {
        if (o >= rows[j]) continue;
        const Out v = static_cast<Out>(src[j][o * inner + i]);
        std::memcpy(dst + (i * r_out + j) * sizeof(Out), &v, sizeof(Out));
      }
    for (size_t d = lead_axes; d-- > 0;) {
      if (++index[d] < static_cast<size_t>(shape[d].size)) break;
      index[d] = 0;
    }
  }
  return a;
}

template <typename T>
NpyArray stack_f32(const std::vector<const std::vector<T>*>& per_iter, const std::vector<Dim>& shape, size_t r_out) {
  return stack<float>(per_iter, shape, r_out, NpyDType::f32());
}
template <typename T>
NpyArray stack_i64(const std::vector<const std::vector<T>*>& per_iter, const std::vector<Dim>& shape, size_t r_out) {
  return stack<int64_t>(per_iter, shape, r_out, NpyDType::i64());
}
template <typename T>
NpyArray tile_f32(const std::vector<T>& v, const std::vector<Dim>& shape, size_t r_out) {
  return stack_f32(std::vector<const std::vector<T>*>{&v}, shape, r_out);
}
template <typename T>
NpyArray tile_i64(const std::vector<T>& v, const std::vector<Dim>& shape, size_t r_out) {
  return stack_i64(std::vector<const std::vector<T>*>{&v}, shape, r_out);
}

// ------------------------------------------------------------------ templates

struct Templates {
  int64_t count = 0;
  bool padded = false;          // the one fully masked template standing in for none
  std::vector<int64_t> aatype;  // [T,N] AlphaFold order
  std::vector<float> positions, mask, sum_probs;
};

Templates read_templates(const FeatureDict& raw, int64_t n, int64_t max_templates, bool drop_all) {
  Templates t;
  const NpyArray& pos = need(raw, "template_all_atom_positions", 4);
  const std::string mask_name = raw.contains("template_all_atom_masks") ? "template_all_atom_masks" : "template_all_atom_mask";
  const NpyArray& msk = need(raw, mask_name, 3);
  FC_CHECK(raw.contains("template_aatype"), "process_features: raw feature 'template_aatype' is missing");
  const NpyArray& aa = raw.at("template_aatype");
  const int64_t total = pos.shape[0];
  FC_CHECK(pos.shape == (std::vector<int64_t>{total, n, 37, 3}) && msk.shape == (std::vector<int64_t>{total, n, 37}),
           "process_features: template_all_atom_positions ", npy_shape_str(pos.shape), " / ", mask_name, " ",
           npy_shape_str(msk.shape), " do not match [T,", n, ",37,3] / [T,", n, ",37]");
  const bool one_hot = aa.shape == std::vector<int64_t>{total, n, 22};
  FC_CHECK(one_hot || aa.shape == (std::vector<int64_t>{total, n}), "process_features: template_aatype ",
           npy_shape_str(aa.shape), " is neither [", total, ",", n, ",22] nor [", total, ",", n, "]");
  t.count = drop_all ? 0 : std::min(total, max_templates);
  const size_t keep = static_cast<size_t>(t.count), nn = static_cast<size_t>(n);
  // fix_templates_aatype: one-hot → index → HHblits-to-AlphaFold order.
  std::vector<int64_t> hh = one_hot ? argmax_rows(convert<float>(aa, "template_aatype"), 22) : convert<int64_t>(aa, "template_aatype");
  hh.resize(keep * nn);
  t.aatype.resize(hh.size());
  for (size_t i = 0; i < hh.size(); ++i) {
    FC_CHECK(hh[i] >= 0 && hh[i] < 22, "process_features: template_aatype code ", hh[i], " outside 0..21");
    t.aatype[i] = rc::kMapHhblitsAatypeToOurAatype[static_cast<size_t>(hh[i])];
  }
  t.positions = convert<float>(pos, "template_all_atom_positions");
  t.positions.resize(keep * nn * 37 * 3);
  t.mask = convert<float>(msk, mask_name);
  t.mask.resize(keep * nn * 37);
  if (raw.contains("template_sum_probs")) {
    const NpyArray& sp = raw.at("template_sum_probs");
    FC_CHECK(sp.numel() == total, "process_features: template_sum_probs ", npy_shape_str(sp.shape), " for ", total,
             " templates");
    t.sum_probs = convert<float>(sp, "template_sum_probs");
  }
  t.sum_probs.resize(keep, 0.0f);
  if (t.count == 0) {  // one fully masked template, as AlphaFold's padding gives
    t.count = 1;
    t.padded = true;
    t.aatype.assign(nn, 0);
    t.positions.assign(nn * 37 * 3, 0.0f);
    t.mask.assign(nn * 37, 0.0f);
    t.sum_probs.assign(1, 0.0f);
  }
  return t;
}

void add_template_features(FeatureDict& out, const Templates& t, Dim n, int64_t padded_templates, size_t r,
                           bool first_part) {
  const Dim nt{t.count, std::max(t.count, padded_templates)};
  if (first_part) {
    out.set("template_aatype", tile_i64(t.aatype, {nt, n}, r));
    out.set("template_all_atom_positions", tile_f32(t.positions, {nt, n, 37, 3}, r));
    out.set("template_sum_probs", tile_f32(t.sum_probs, {nt, 1}, r));
    out.set("template_all_atom_mask", tile_f32(t.mask, {nt, n, 37}, r));
    return;
  }
  const size_t nn = static_cast<size_t>(n.size), ntt = static_cast<size_t>(nt.size);
  out.set("template_mask", tile_f32(std::vector<float>(ntt, t.padded ? 0.0f : 1.0f), {nt}, r));
  std::vector<float> pb(ntt * nn * 3), pb_mask(ntt * nn);
  std::vector<float> sin_cos, alt, tmask;
  for (size_t k = 0; k < ntt; ++k) {
    for (size_t i = 0; i < nn; ++i) {
      const size_t res = k * nn + i;
      const int restype = static_cast<int>(t.aatype[res]);
      const geom::PseudoBeta b = geom::pseudo_beta(restype, t.positions.data() + res * 37 * 3, t.mask.data() + res * 37);
      for (size_t c = 0; c < 3; ++c) pb[res * 3 + c] = static_cast<float>(b.position[c]);
      pb_mask[res] = b.mask;
    }
    const std::vector<int64_t> aatype(t.aatype.begin() + static_cast<ptrdiff_t>(k * nn),
                                      t.aatype.begin() + static_cast<ptrdiff_t>((k + 1) * nn));
    const geom::TorsionAngles ta =
        geom::atom37_to_torsion_angles(aatype, t.positions.data() + k * nn * 37 * 3, t.mask.data() + k * nn * 37);
    sin_cos.insert(sin_cos.end(), ta.sin_cos.begin(), ta.sin_cos.end());
    alt.insert(alt.end(), ta.alt_sin_cos.begin(), ta.alt_sin_cos.end());
    tmask.insert(tmask.end(), ta.mask.begin(), ta.mask.end());
  }
  out.set("template_pseudo_beta", tile_f32(pb, {nt, n, 3}, r));
  out.set("template_pseudo_beta_mask", tile_f32(pb_mask, {nt, n}, r));
  out.set("template_torsion_angles_sin_cos", tile_f32(sin_cos, {nt, n, 7, 2}, r));
  out.set("template_alt_torsion_angles_sin_cos", tile_f32(alt, {nt, n, 7, 2}, r));
  out.set("template_torsion_angles_mask", tile_f32(tmask, {nt, n, 7}, r));
}

// ------------------------------------------------------------------ per-iteration MSA features

struct IterationMsa {
  std::vector<int32_t> true_msa, extra_msa;
  std::vector<float> msa_mask, msa_row_mask, bert_mask, msa_feat;
  std::vector<float> extra_mask, extra_row_mask, extra_has_deletion, extra_deletion_value;
  int64_t num_clusters = 0, num_extra = 0;
};

IterationMsa process_msa_iteration(const MsaRows& msa, const std::vector<float>& profile,
                                   const FeatureProcessingConfig& config, int iteration) {
  const uint64_t base = 4 * static_cast<uint64_t>(iteration);
  PhiloxStream sample_rng(config.seed, base), mask_rng(config.seed, base + 1), crop_rng(config.seed, base + 2);
  msa_tf::SampledMsa s;
  if (config.block_delete_msa) {
    PhiloxStream block_rng(config.seed, base + 3);
    s = msa_tf::sample_msa(msa_tf::block_delete_msa(msa, config.block_deletion, block_rng), config.msa_clusters(),
                           sample_rng);
  } else {
    s = msa_tf::sample_msa(msa, config.msa_clusters(), sample_rng);
  }
  IterationMsa it;
  it.true_msa = s.sampled.msa;
  it.bert_mask.assign(s.sampled.msa.size(), 0.0f);
  if (config.use_masked_msa) {
    msa_tf::MaskedMsa m = msa_tf::make_masked_msa(s.sampled, profile, config.masked_msa, mask_rng);
    s.sampled.msa = std::move(m.msa);
    it.bert_mask = std::move(m.bert_mask);
  }
  const std::vector<int32_t> assignment = msa_tf::nearest_neighbor_clusters(s.sampled, s.extra);
  const msa_tf::ClusterSummary clusters = msa_tf::summarize_clusters(s.sampled, s.extra, assignment);
  MsaRows extra = msa_tf::crop_extra_msa(s.extra, config.max_extra_msa, crop_rng);
  it.num_clusters = s.sampled.rows();
  it.msa_mask = s.sampled.mask;
  it.msa_row_mask.assign(static_cast<size_t>(it.num_clusters), 1.0f);
  it.msa_feat = msa_tf::make_msa_feat(s.sampled, clusters);
  it.extra_row_mask.assign(static_cast<size_t>(extra.rows()), 1.0f);
  if (extra.rows() == 0) {  // one fully masked row keeps the extra-MSA axis non-empty
    const size_t n = static_cast<size_t>(msa.num_res);
    extra.msa.assign(n, 0);
    extra.deletion.assign(n, 0.0f);
    extra.mask.assign(n, 0.0f);
    it.extra_row_mask.assign(1, 0.0f);
  }
  it.num_extra = extra.rows();
  it.extra_msa = extra.msa;
  it.extra_mask = extra.mask;
  it.extra_has_deletion.resize(extra.deletion.size());
  it.extra_deletion_value.resize(extra.deletion.size());
  for (size_t k = 0; k < extra.deletion.size(); ++k) {
    it.extra_has_deletion[k] = std::clamp(extra.deletion[k], 0.0f, 1.0f);
    it.extra_deletion_value[k] = msa_tf::deletion_value(extra.deletion[k]);
  }
  return it;
}

}  // namespace

FeatureDict process_features(const FeatureDict& raw, const FeatureProcessingConfig& config) {
  FC_CHECK(config.num_recycles >= 0, "process_features: num_recycles ", config.num_recycles, " < 0");
  FC_CHECK(config.msa_clusters() >= 1, "process_features: max_msa_clusters ", config.max_msa_clusters,
           " leaves no cluster (max_templates ", config.max_templates, ")");
  FC_CHECK(config.max_extra_msa >= 0 && config.max_templates >= 0, "process_features: negative max_extra_msa (",
           config.max_extra_msa, ") or max_templates (", config.max_templates, ")");
  const size_t computed = static_cast<size_t>(config.num_recycles) + 1;
  FC_CHECK(config.padding.recycling_slices == 0 || config.padding.recycling_slices >= static_cast<int64_t>(computed),
           "process_features: padding.recycling_slices ", config.padding.recycling_slices, " < num_recycles + 1 = ",
           computed);
  const size_t r = std::max(computed, static_cast<size_t>(config.padding.recycling_slices));

  // squeeze_features: aatype one-hot → index; per-residue scalars → their first value.
  const NpyArray& aa_raw = raw.at("aatype");
  std::vector<int64_t> aatype;
  if (aa_raw.shape.size() == 2) {
    FC_CHECK(aa_raw.shape[1] == rc::kRestypeNumWithX, "process_features: aatype ", npy_shape_str(aa_raw.shape),
             " is not [N,21]");
    aatype = argmax_rows(convert<float>(aa_raw, "aatype"), rc::kRestypeNumWithX);
  } else {
    FC_CHECK(aa_raw.shape.size() == 1, "process_features: aatype ", npy_shape_str(aa_raw.shape),
             " is not [N,21] or [N]");
    aatype = convert<int64_t>(aa_raw, "aatype");
  }
  const int64_t n = static_cast<int64_t>(aatype.size());
  const size_t nn = static_cast<size_t>(n);
  FC_CHECK(n > 0, "process_features: no residues");
  for (size_t i = 0; i < nn; ++i)
    FC_CHECK(aatype[i] >= 0 && aatype[i] <= rc::kUnkRestypeIndex, "process_features: aatype ", aatype[i],
             " outside 0..20 at residue ", i);
  const std::vector<int64_t> residue_index = convert<int64_t>(need(raw, "residue_index", 1), "residue_index");
  const std::vector<int64_t> bsr = convert<int64_t>(need(raw, "between_segment_residues", 1), "between_segment_residues");
  FC_CHECK(residue_index.size() == nn && bsr.size() == nn, "process_features: residue_index [", residue_index.size(),
           "] / between_segment_residues [", bsr.size(), "] do not match N = ", n);
  const std::vector<int64_t> seq_length_raw = convert<int64_t>(raw.at("seq_length"), "seq_length");
  FC_CHECK(!seq_length_raw.empty() && seq_length_raw[0] == n, "process_features: seq_length ",
           seq_length_raw.empty() ? -1 : seq_length_raw[0], " differs from N = ", n);

  // The full MSA: correct_msa_restypes (HHblits → AlphaFold order), float deletions, msa_mask 1.
  const NpyArray& msa_raw = need(raw, "msa", 2);
  const bool has_int = raw.contains("deletion_matrix_int");
  const NpyArray& del_raw = need(raw, has_int ? "deletion_matrix_int" : "deletion_matrix", 2);
  FC_CHECK(msa_raw.shape[1] == n && del_raw.shape == msa_raw.shape && msa_raw.shape[0] >= 1, "process_features: msa ",
           npy_shape_str(msa_raw.shape), " / deletion matrix ", npy_shape_str(del_raw.shape), " do not match [S>=1,", n,
           "]");
  MsaRows msa;
  msa.num_res = n;
  const int64_t rows = config.single_sequence ? 1 : msa_raw.shape[0];
  {
    std::vector<int64_t> codes = convert<int64_t>(msa_raw, "msa");
    std::vector<float> del = convert<float>(del_raw, has_int ? "deletion_matrix_int" : "deletion_matrix");
    const size_t cells = static_cast<size_t>(rows) * nn;
    msa.msa.resize(cells);
    msa.deletion.assign(del.begin(), del.begin() + static_cast<ptrdiff_t>(cells));
    msa.mask.assign(cells, 1.0f);
    for (size_t k = 0; k < cells; ++k) {
      FC_CHECK(codes[k] >= 0 && codes[k] < 22, "process_features: msa code ", codes[k], " outside 0..21 at row ",
               k / nn, ", column ", k % nn);
      FC_CHECK(msa.deletion[k] >= 0, "process_features: negative deletion count at row ", k / nn, ", column ", k % nn);
      msa.msa[k] = rc::kMapHhblitsAatypeToOurAatype[static_cast<size_t>(codes[k])];
    }
  }
  const std::vector<float> profile = msa_tf::hhblits_profile(msa);

  std::vector<IterationMsa> iters;
  for (size_t k = 0; k < computed; ++k) iters.push_back(process_msa_iteration(msa, profile, config, static_cast<int>(k)));
  // Output axes: natural sizes, padded to config.padding where set (never cropped).
  auto padded = [](int64_t size, int64_t to) {
    FC_CHECK(to == 0 || to >= size, "process_features: padding ", to, " is smaller than the axis (", size, ")");
    return Dim{size, std::max(size, to)};
  };
  const Dim N = padded(n, config.padding.num_res);
  int64_t s_max = 0, e_max = 0;  // equal in every iteration unless block deletion is on
  for (const IterationMsa& it : iters) {
    s_max = std::max(s_max, it.num_clusters);
    e_max = std::max(e_max, it.num_extra);
  }
  const Dim S = padded(s_max, config.padding.msa_clusters);
  const Dim E = padded(e_max, config.padding.extra_msa);
  auto per_f32 = [&](std::vector<float> IterationMsa::*field) {
    std::vector<const std::vector<float>*> v;
    for (const auto& it : iters) v.push_back(&(it.*field));
    return v;
  };
  auto per_i32 = [&](std::vector<int32_t> IterationMsa::*field) {
    std::vector<const std::vector<int32_t>*> v;
    for (const auto& it : iters) v.push_back(&(it.*field));
    return v;
  };

  FeatureDict out;
  out.set("aatype", tile_i64(aatype, {N}, r));
  out.set("residue_index", tile_i64(residue_index, {N}, r));
  out.set("seq_length", tile_i64(std::vector<int64_t>{n}, {}, r));
  Templates templates;
  if (config.use_templates) {
    templates = read_templates(raw, n, config.max_templates, config.single_sequence);
    add_template_features(out, templates, N, config.padding.templates, r, /*first_part=*/true);
  }
  out.set("seq_mask", tile_f32(std::vector<float>(nn, 1.0f), {N}, r));
  out.set("msa_mask", stack_f32(per_f32(&IterationMsa::msa_mask), {S, N}, r));
  out.set("msa_row_mask", stack_f32(per_f32(&IterationMsa::msa_row_mask), {S}, r));
  if (config.use_templates) add_template_features(out, templates, N, config.padding.templates, r, /*first_part=*/false);

  // make_atom14_masks: per-residue lookups of the restype tables.
  const rc::Atom14Maps& maps = rc::atom14_maps();
  std::vector<float> a14_exists(nn * 14), a37_exists(nn * 37);
  std::vector<int64_t> to37(nn * 14), to14(nn * 37);
  for (size_t i = 0; i < nn; ++i) {
    const size_t t = static_cast<size_t>(aatype[i]);
    for (size_t j = 0; j < 14; ++j) {
      a14_exists[i * 14 + j] = maps.atom14_mask[t][j];
      to37[i * 14 + j] = maps.atom14_to_atom37[t][j];
    }
    for (size_t j = 0; j < 37; ++j) {
      a37_exists[i * 37 + j] = maps.atom37_mask[t][j];
      to14[i * 37 + j] = maps.atom37_to_atom14[t][j];
    }
  }
  out.set("atom14_atom_exists", tile_f32(a14_exists, {N, 14}, r));
  out.set("residx_atom14_to_atom37", tile_i64(to37, {N, 14}, r));
  out.set("residx_atom37_to_atom14", tile_i64(to14, {N, 37}, r));
  out.set("atom37_atom_exists", tile_f32(a37_exists, {N, 37}, r));

  out.set("extra_msa", stack_i64(per_i32(&IterationMsa::extra_msa), {E, N}, r));
  out.set("extra_msa_mask", stack_f32(per_f32(&IterationMsa::extra_mask), {E, N}, r));
  out.set("extra_msa_row_mask", stack_f32(per_f32(&IterationMsa::extra_row_mask), {E}, r));
  out.set("bert_mask", stack_f32(per_f32(&IterationMsa::bert_mask), {S, N}, r));
  out.set("true_msa", stack_i64(per_i32(&IterationMsa::true_msa), {S, N}, r));
  out.set("extra_has_deletion", stack_f32(per_f32(&IterationMsa::extra_has_deletion), {E, N}, r));
  out.set("extra_deletion_value", stack_f32(per_f32(&IterationMsa::extra_deletion_value), {E, N}, r));
  out.set("msa_feat", stack_f32(per_f32(&IterationMsa::msa_feat), {S, N, msa_tf::kMsaFeatDim}, r));

  // target_feat: [has_break, one_hot(aatype, 21)].
  std::vector<float> target(nn * 22, 0.0f);
  for (size_t i = 0; i < nn; ++i) {
    target[i * 22] = bsr[i] > 0 ? 1.0f : 0.0f;
    target[i * 22 + 1 + static_cast<size_t>(aatype[i])] = 1.0f;
  }
  out.set("target_feat", tile_f32(target, {N, 22}, r));
  out.set("use_clamped_fape", tile_f32(std::vector<float>{config.use_clamped_fape}, {}, r));
  return out;
}

FeatureDict single_sequence_raw_features(const std::string& sequence, const std::string& description) {
  FeatureDict f = make_sequence_features(sequence, description);
  Msa query;
  query.sequences = {sequence};
  query.deletion_matrix = {std::vector<int32_t>(sequence.size(), 0)};
  query.descriptions = {description};
  f.update(make_msa_features({&query}));
  f.update(empty_template_features(static_cast<int64_t>(sequence.size())));
  return f;
}

}  // namespace foldcore::data
