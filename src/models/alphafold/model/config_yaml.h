// Af2Config from YAML presets (configs/model/<preset>.yaml). Built only with yaml-cpp
// (FOLDCORE_HAVE_YAML). The YAML mirrors the struct: top-level scalars, then one mapping per
// sub-struct (evoformer, extra_msa, templates, structure, heads), attention blocks as nested
// mappings {num_head, head_dim, gating, dropout}. Keys absent from the file keep config.h's
// defaults (model_1_ptm); unknown keys and wrong types are errors naming the file and the key.
#pragma once

#include <string>
#include <vector>

#include "models/alphafold/model/config.h"

namespace foldcore::af2 {

// Every dotted key a config file may hold ("evoformer.msa_row.num_head", …), in struct order.
std::vector<std::string> af2_config_keys();

// Loads `path`; throws foldcore::Error "<path>: key 'a.b': <reason>" on an unknown key, a value
// of the wrong type (a string for an int, a fraction for an int, a sequence for a mapping …), an
// unreadable or malformed file, or an inconsistent config (validate_af2_config). When
// `missing_keys` is given it receives the keys the file did not set.
Af2Config load_af2_config(const std::string& path, std::vector<std::string>* missing_keys = nullptr);

// The same from YAML text; `name` stands for the file in messages.
Af2Config parse_af2_config(const std::string& yaml_text, const std::string& name,
                           std::vector<std::string>* missing_keys = nullptr);

// The YAML text of a config (every key), which parse_af2_config reads back to an equal config.
std::string af2_config_to_yaml(const Af2Config& config);

}  // namespace foldcore::af2
