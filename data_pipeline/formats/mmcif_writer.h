// Structure → minimal, valid mmCIF (the subset AlphaFold's protein.to_mmcif writes, without the
// ModelCIF bookkeeping): data_<id>, _entry, optional metadata (_exptl, _refine resolution,
// _pdbx_database_status / _pdbx_audit_revision_history dates), _entity, _entity_poly (type and
// canonical one-letter code), _entity_poly_seq, _struct_asym, _pdbx_struct_mod_residue (when
// known), the _atom_site loop and,
// optionally, the ModelCIF pLDDT tables (_ma_qa_metric, _ma_qa_metric_local: one value per
// polymer residue, taken from the residue's first atom B-factor).
//
// Structures read from mmCIF keep their entities and label asym ids. Structures without
// entities (PDB input) get them synthesised: per chain, the residues up to the last ATOM
// residue form a polymer (identical residue sequences share one entity, as to_mmcif groups
// chains), trailing waters one water asym, other trailing HETATM residues one non-polymer asym
// each; label_seq_id numbers the polymer residues 1..n; label asym ids are A, B, ..., Z, AA, ...
// Numbers are written with the PDB format's precision (coordinates 3 decimals, occupancy and
// B-factor 2) so PDB → mmCIF → PDB keeps every value.
#pragma once

#include <string>

#include "data_pipeline/structure/structure.h"

namespace foldcore::data {

struct MmcifWriteOptions {
  bool plddt_tables = false;  // write _ma_qa_metric / _ma_qa_metric_local (pLDDT = B-factor)
};

std::string to_mmcif(const Structure& s, const MmcifWriteOptions& options = {});
// Writes atomically (temporary file + rename).
void write_mmcif(const std::string& path, const Structure& s, const MmcifWriteOptions& options = {});

}  // namespace foldcore::data
