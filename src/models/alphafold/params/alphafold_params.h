// The architecture of an AlphaFold2 parameter file (official .npz layout), read from its array
// shapes: what `foldcore run_features` uses when no model config is given.
#pragma once

#include <string>

#include "models/alphafold/model/config.h"

namespace foldcore::af2 {

// Every width, head count and depth read from the array shapes (stacked per-block arrays give
// the Evoformer, extra-MSA and template-pair depths on their leading axis); templates / template
// torsion embedding / the PAE head enabled by the presence of their arrays. What the file cannot
// say (dropout rates, bin ranges, structure-module layer count: shared weights) keeps `base`'s
// values. Errors name the file and the array that is missing or has an unexpected shape.
Af2Config infer_af2_config(const std::string& params_path, const Af2Config& base = {});

}  // namespace foldcore::af2
