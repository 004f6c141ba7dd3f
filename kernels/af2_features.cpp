// Validation and backend dispatch for kernels/af2_features.h.
#include "kernels/af2_features.h"

#include <vector>

#include "kernels/cpu/af2_features_cpu.h"
#include "kernels/cuda/af2_features_cuda.h"
#include "kernels/pointwise_checks.h"

namespace foldcore::ops {

namespace {

void check_f32(std::string_view op, std::string_view name, const Tensor& t, const Shape& shape) {
  detail::check_defined(op, name, t);
  detail::check_contiguous(op, name, t);
  FC_CHECK(t.dtype() == DType::f32 && t.shape() == shape, op, ": ", name, " ", t.str(), " must be f32 ", shape.str());
}

void check_bins(std::string_view op, const DistogramBins& b) {
  FC_CHECK(b.num_bins >= 2 && b.max_bin > b.min_bin, op, ": ", b.num_bins, " bins over [", b.min_bin, ", ",
           b.max_bin, "] (need >= 2 bins and max > min)");
}

}  // namespace

void distogram_one_hot(const Tensor& positions, const DistogramBins& bins, int64_t row0, const Tensor& out) {
  constexpr std::string_view op = "distogram_one_hot";
  check_bins(op, bins);
  detail::check_defined(op, "positions", positions);
  FC_CHECK(positions.dim() == 3 && positions.size(2) == 3, op, ": positions ", positions.str(), " must be [T, N, 3]");
  const int64_t t = positions.size(0), n = positions.size(1);
  check_f32(op, "positions", positions, {t, n, 3});
  detail::check_defined(op, "out", out);
  FC_CHECK(out.dim() == 4, op, ": out ", out.str(), " must be [T, rows, N, bins]");
  const int64_t rows = out.size(1);
  FC_CHECK(row0 >= 0 && row0 + rows <= n, op, ": rows [", row0, ", ", row0 + rows, ") outside [0, ", n, ")");
  check_f32(op, "out", out, {t, rows, n, bins.num_bins});
  detail::check_same_device(op, "positions", positions, "out", out);
  if (out.numel() == 0) return;
  FC_POINTWISE_DISPATCH(out.device(), distogram_one_hot(positions, bins, row0, out));
}

void template_pair_features(const TemplatePairInputs& in, const Tensor& out, int64_t row0) {
  constexpr std::string_view op = "template_pair_features";
  check_bins(op, in.bins);
  detail::check_defined(op, "pseudo_beta", in.pseudo_beta);
  const int64_t n = in.pseudo_beta.size(0);
  check_f32(op, "pseudo_beta", in.pseudo_beta, {n, 3});
  check_f32(op, "pseudo_beta_mask", in.pseudo_beta_mask, {n});
  check_f32(op, "backbone_mask", in.backbone_mask, {n});
  if (in.frames.defined()) check_f32(op, "frames", in.frames, {n, 12});
  detail::check_defined(op, "aatype", in.aatype);
  detail::check_contiguous(op, "aatype", in.aatype);
  FC_CHECK(in.aatype.dtype() == DType::i32 && in.aatype.shape() == Shape({n}), op, ": aatype ", in.aatype.str(),
           " must be i32 [", n, "]");
  detail::check_defined(op, "out", out);
  FC_CHECK(out.dim() == 3, op, ": out ", out.str(), " must be [rows, N, C]");
  FC_CHECK(row0 >= 0 && row0 + out.size(0) <= n, op, ": rows [", row0, ", ", row0 + out.size(0), ") outside [0, ", n,
           ")");
  check_f32(op, "out", out, {out.size(0), n, template_pair_feature_dim(in.bins.num_bins)});
  for (const Tensor* t : {&in.pseudo_beta_mask, &in.backbone_mask, &in.aatype, &out})
    detail::check_same_device(op, "pseudo_beta", in.pseudo_beta, "an input or out", *t);
  if (in.frames.defined()) detail::check_same_device(op, "pseudo_beta", in.pseudo_beta, "frames", in.frames);
  if (out.numel() == 0) return;
  FC_POINTWISE_DISPATCH(out.device(), template_pair_features(in, out, row0));
}

void extra_msa_features(const Tensor& extra_msa, const Tensor& has_deletion, const Tensor& deletion_value,
                        const Tensor& out) {
  constexpr std::string_view op = "extra_msa_features";
  detail::check_defined(op, "extra_msa", extra_msa);
  detail::check_contiguous(op, "extra_msa", extra_msa);
  FC_CHECK(extra_msa.dim() == 2 && (extra_msa.dtype() == DType::i32 || extra_msa.dtype() == DType::i64), op,
           ": extra_msa ", extra_msa.str(), " must be i32/i64 [E, N]");
  const int64_t e = extra_msa.size(0), n = extra_msa.size(1);
  check_f32(op, "has_deletion", has_deletion, {e, n});
  check_f32(op, "deletion_value", deletion_value, {e, n});
  check_f32(op, "out", out, {e, n, kExtraMsaFeatureDim});
  for (const Tensor* t : {&has_deletion, &deletion_value, &out})
    detail::check_same_device(op, "extra_msa", extra_msa, "an input or out", *t);
  if (out.numel() == 0) return;
  FC_POINTWISE_DISPATCH(out.device(), extra_msa_features(extra_msa, has_deletion, deletion_value, out));
}

void check_extra_msa_classes(const Tensor& extra_msa, std::string_view what) {
  FC_CHECK(extra_msa.device().is_cpu(), what, ": the extra-MSA classes are checked on the host, got ", extra_msa.str());
  const std::vector<int64_t> v = extra_msa.contiguous().to(DType::i64).to_vector_i64();
  for (size_t k = 0; k < v.size(); ++k)
    FC_CHECK(v[k] >= 0 && v[k] < kExtraMsaClasses, what, ": value ", v[k], " at flat index ", k, " is outside [0, ",
             kExtraMsaClasses, ") (20 amino acids, X, gap, the mask token)");
}

}  // namespace foldcore::ops
