// CPU reference implementations of kernels/af2_features.h (inputs validated by the dispatcher).
#pragma once

#include "kernels/af2_features.h"

namespace foldcore::ops::cpu {

void distogram_one_hot(const Tensor& positions, const DistogramBins& bins, int64_t row0, const Tensor& out);
void template_pair_features(const TemplatePairInputs& in, const Tensor& out, int64_t row0);
void extra_msa_features(const Tensor& extra_msa, const Tensor& has_deletion, const Tensor& deletion_value,
                        const Tensor& out);

}  // namespace foldcore::ops::cpu
