// Differentiable pointwise ops the structure module needs and src/autograd does not provide
// (softplus, Euclidean norms over a short last axis). Each is an autograd Function whose forward
// and backward run in fp32 on the input's device (kernels/rigid.h), so none waits for the device.
#pragma once

#include <string>

#include "autograd/autograd.h"
#include "models/alphafold/params/param_table.h"
#include "nn/layers.h"

namespace foldcore::af2 {

using autograd::Variable;

// y = log(1 + eᵡ) (stable form max(x,0) + log1p(e^{−|x|})); dy/dx = sigmoid(x).
Variable softplus(const Variable& x);
// y[…] = sqrt(eps + Σ_c x[…, c]²) over the last axis; dy/dx = x / y.
Variable norm_last(const Variable& x, float eps);
// y = x / sqrt(max(Σ_c x_c², eps)) over the last axis (AF2 l2_normalize, eps 1e-12);
// dy/dx = (I − y yᵀ)/n where the clamp is inactive, 1/√eps·I where it is.
Variable l2_normalize_last(const Variable& x, float eps = 1e-12f);

// Official keys of a Linear / LayerNorm at AF2 module path `key` (haiku names: "<key>//weights",
// "<key>//bias"; "<key>//scale", "<key>//offset").
void add_linear_params(Af2ParamTable& table, const std::string& key, const nn::Linear& linear, int64_t stack_index);
void add_layer_norm_params(Af2ParamTable& table, const std::string& key, const nn::LayerNorm& ln, int64_t stack_index);

}  // namespace foldcore::af2
