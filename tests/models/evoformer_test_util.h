// Shared by the Evoformer block tests: a small block configuration (odd sizes, no dropout) whose
// finite-difference checks run in well under a second.
#pragma once

#include "models/alphafold/model/config.h"

namespace foldcore::af2 {

inline EvoformerBlockConfig small_block_config() {
  EvoformerBlockConfig c;
  c.c_m = 8;
  c.c_z = 6;
  c.msa_row = {2, 3, true, 0.f};
  c.msa_column = {2, 3, true, 0.f};
  c.msa_transition_factor = 2;
  c.opm_channels = 3;
  c.tri_mul_channels = 5;
  c.tri_mul_dropout = 0.f;
  c.tri_att = {2, 3, true, 0.f};
  c.pair_transition_factor = 2;
  return c;
}

}  // namespace foldcore::af2
