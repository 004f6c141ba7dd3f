// Writers and round trips: PDB → PDB, mmCIF → mmCIF, PDB → mmCIF → PDB, mmCIF → PDB; the
// OpenFold output format reproduced byte for byte; pLDDT tables; synthesised entities; atomic
// file writes; writer errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "data_pipeline/formats/cif_tokenizer.h"
#include "data_pipeline/formats/mmcif_parser.h"
#include "data_pipeline/formats/mmcif_writer.h"
#include "data_pipeline/formats/pdb_reader.h"
#include "data_pipeline/formats/pdb_writer.h"
#include "test_util.h"

namespace foldcore::data {
namespace {

namespace fs = std::filesystem;

std::string shared(const std::string& rel) { return testing::shared_dir() + "/data/" + rel; }
const char* kCifIds[] = {"1psm", "2crb", "2q2k", "3u8v", "3zee", "4i6p", "4zey"};

// Same atoms, names, chains, numbering and values. Writers print coordinates with 3 decimals and
// occupancy/B with 2, so values agree to half a unit in the last printed place (inputs that have
// no more decimals than that come back exactly).
void expect_same(const Structure& a, const Structure& b, bool compare_labels) {
  ASSERT_EQ(a.chains.size(), b.chains.size());
  for (size_t c = 0; c < a.chains.size(); ++c) {
    const Chain &ca = a.chains[c], &cb = b.chains[c];
    EXPECT_EQ(ca.auth_id, cb.auth_id);
    if (compare_labels) {
      EXPECT_EQ(ca.label_id, cb.label_id);
      EXPECT_EQ(ca.entity_id, cb.entity_id);
      EXPECT_EQ(ca.seqres_to_residue, cb.seqres_to_residue);
    }
    ASSERT_EQ(ca.residues.size(), cb.residues.size()) << ca.label_id;
    for (size_t r = 0; r < ca.residues.size(); ++r) {
      const Residue &ra = ca.residues[r], &rb = cb.residues[r];
      EXPECT_EQ(ra.name, rb.name);
      EXPECT_EQ(ra.auth_seq_num, rb.auth_seq_num);
      EXPECT_EQ(ra.ins_code, rb.ins_code);
      EXPECT_EQ(ra.hetero, rb.hetero);
      if (compare_labels) {
        EXPECT_EQ(ra.seq_index, rb.seq_index);
      }
      ASSERT_EQ(ra.atoms.size(), rb.atoms.size()) << ra.name << " " << ra.auth_seq_num;
      for (size_t k = 0; k < ra.atoms.size(); ++k) {
        const Atom &x = ra.atoms[k], &y = rb.atoms[k];
        EXPECT_EQ(x.name, y.name);
        EXPECT_EQ(x.element, y.element);
        EXPECT_EQ(x.alt_loc, y.alt_loc);
        EXPECT_EQ(x.charge, y.charge);
        EXPECT_NEAR(x.x, y.x, 5e-4);
        EXPECT_NEAR(x.y, y.y, 5e-4);
        EXPECT_NEAR(x.z, y.z, 5e-4);
        EXPECT_NEAR(x.occupancy, y.occupancy, 5e-3);
        EXPECT_NEAR(x.b_factor, y.b_factor, 5e-3);
      }
    }
  }
}

TEST(StructureRoundTrip, PdbToPdb) {
  for (const std::string& path : {shared("pdb/glucagon.pdb"), shared("6kwc/6KWC_1_model_1_ptm_unrelaxed.pdb")}) {
    SCOPED_TRACE(path);
    const Structure s = read_pdb(path);
    const std::string text = to_pdb(s);
    const Structure t = parse_pdb(text, "roundtrip.pdb");
    expect_same(s, t, true);
    EXPECT_EQ(to_pdb(t), text);  // a second pass is a fixed point
  }
}

TEST(StructureRoundTrip, OpenFoldPdbReproducedExactly) {
  // OpenFold wrote this file with protein.to_pdb: REMARK and PARENT lines, MODEL 1, ATOM records,
  // TER, ENDMDL, END, 80-column lines. Ours must be byte-identical given the same header texts.
  const std::string path = shared("6kwc/6KWC_1_model_1_ptm_unrelaxed.pdb");
  PdbWriteOptions o;
  o.remarks = {"no_recycling=3, max_templates=4, config_preset=model_1_ptm"};
  o.parent = "2dfb_A 1h1a_B 1te1_B 5hxv_D";
  EXPECT_EQ(to_pdb(read_pdb(path), o), read_text_file(path));
}

TEST(StructureRoundTrip, MmcifToMmcif) {
  for (const char* id : kCifIds) {
    SCOPED_TRACE(id);
    const Structure s = read_mmcif(shared(std::string("mmcifs/") + id + ".cif"));
    const Structure t = parse_mmcif(to_mmcif(s), "roundtrip.cif");
    expect_same(s, t, true);
    EXPECT_EQ(t.id, s.id);
    EXPECT_EQ(t.metadata.release_date, s.metadata.release_date);
    EXPECT_EQ(t.metadata.deposition_date, s.metadata.deposition_date);
    EXPECT_EQ(t.metadata.methods, s.metadata.methods);
    EXPECT_EQ(t.metadata.has_resolution(), s.metadata.has_resolution());
    if (s.metadata.has_resolution()) {
      EXPECT_DOUBLE_EQ(t.metadata.resolution, s.metadata.resolution);
    }
    for (const Chain& c : s.chains) {
      const Chain* d = t.find_chain_by_label(c.label_id);
      ASSERT_NE(d, nullptr);
      EXPECT_EQ(chain_sequence(s, c), chain_sequence(t, *d));
      EXPECT_EQ(s.polymer_type(c), t.polymer_type(*d));
    }
  }
}

TEST(StructureRoundTrip, PdbToMmcifToPdb) {
  for (const std::string& path : {shared("pdb/glucagon.pdb"), shared("6kwc/6KWC_1_model_1_ptm_unrelaxed.pdb")}) {
    SCOPED_TRACE(path);
    const Structure s = read_pdb(path);
    const Structure cif = parse_mmcif(to_mmcif(s), "via.cif");
    ASSERT_EQ(cif.entities.size(), 1u);
    EXPECT_EQ(cif.entities[0].type, EntityType::kPolymer);
    EXPECT_EQ(cif.entities[0].polymer_type, PolymerType::kPeptideL);
    EXPECT_EQ(chain_sequence(cif, cif.chains[0]), chain_sequence(s, s.chains[0], SequenceSource::kObserved));
    EXPECT_TRUE(missing_seqres_positions(cif.chains[0]).empty());
    const Structure back = parse_pdb(to_pdb(cif), "back.pdb");
    expect_same(s, back, false);
    EXPECT_EQ(to_pdb(back), to_pdb(s));
  }
}

TEST(StructureRoundTrip, MmcifToPdbKeepsAtoms) {
  // Author chains with ligands and waters (several label asyms per author chain) merge back into
  // one PDB chain each; every atom survives.
  for (const char* id : {"2q2k", "4zey", "3u8v"}) {
    SCOPED_TRACE(id);
    const Structure s = read_mmcif(shared(std::string("mmcifs/") + id + ".cif"));
    const Structure p = parse_pdb(to_pdb(s), "x.pdb");
    EXPECT_EQ(p.num_atoms(), s.num_atoms());
    EXPECT_EQ(p.num_residues(), s.num_residues());
    // The first protein chain's residues lead its PDB chain (ligands and waters follow). The
    // PDB format keeps no _pdbx_struct_mod_residue table, so only built-in parents (MSE) map.
    const Chain* a = nullptr;
    for (const Chain& c : s.chains)
      if (!a && s.is_protein_chain(c)) a = &c;
    ASSERT_NE(a, nullptr);
    const std::string expected = chain_sequence(s, *a, SequenceSource::kObserved);
    EXPECT_EQ(chain_sequence(p, *p.find_chain_by_auth(a->auth_id), SequenceSource::kObserved).substr(0, expected.size()),
              expected);
  }
}

TEST(StructureWriters, SynthesisedEntitiesForPdbInput) {
  // A PDB structure with two identical chains, a ligand and waters after the polymer.
  Structure s;
  for (const char* cid : {"A", "B"}) {
    Chain c;
    c.auth_id = c.label_id = cid;
    for (int i = 0; i < 3; ++i) {
      Residue r;
      r.name = i == 1 ? "MSE" : "GLY";
      r.hetero = i == 1;  // a modified residue inside the polymer stays in it
      r.auth_seq_num = i + 1;
      r.atoms.push_back(Atom{"CA", "C", 1.0 * i, 2, 3, 1, 50, ' ', 0, 0});
      c.residues.push_back(r);
    }
    Residue lig{"ZN", 0, 10, ' ', true, {Atom{"ZN", "ZN", 5, 5, 5, 1, 20, ' ', 2, 0}}};
    Residue w1{"HOH", 0, 11, ' ', true, {Atom{"O", "O", 6, 6, 6, 1, 30, ' ', 0, 0}}};
    Residue w2{"HOH", 0, 12, ' ', true, {Atom{"O", "O", 7, 7, 7, 1, 30, ' ', 0, 0}}};
    c.residues.push_back(lig);
    c.residues.push_back(w1);
    c.residues.push_back(w2);
    s.chains.push_back(c);
  }
  const Structure t = parse_mmcif(to_mmcif(s), "synth.cif");
  // Entities: 1 polymer (shared by A and B), 2 ZN, 3 water. Asyms: polymers A B, ligands C D,
  // waters E F.
  ASSERT_EQ(t.entities.size(), 3u);
  EXPECT_EQ(t.entities[0].chain_ids, (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(t.entities[0].sequence_three, (std::vector<std::string>{"GLY", "MSE", "GLY"}));
  EXPECT_EQ(t.entities[0].sequence_can, "GMG");
  EXPECT_EQ(t.entities[1].type, EntityType::kNonPolymer);
  EXPECT_EQ(t.entities[2].type, EntityType::kWater);
  ASSERT_EQ(t.chains.size(), 6u);
  EXPECT_EQ(t.chains[4].label_id, "E");
  EXPECT_EQ(t.chains[4].auth_id, "A");
  EXPECT_EQ(t.chains[4].residues.size(), 2u);
  EXPECT_EQ(t.chains[2].residues[0].atoms[0].charge, 2);
  EXPECT_TRUE(t.chains[0].residues[1].hetero);
  // And back to PDB: one chain per author id again, same atoms.
  expect_same(s, parse_pdb(to_pdb(t), "back.pdb"), false);
}

TEST(StructureWriters, PerResidueBFactorsAndPlddtTables) {
  Structure s = read_pdb(shared("pdb/glucagon.pdb"));
  std::vector<float> plddt(s.num_residues());
  for (size_t i = 0; i < plddt.size(); ++i) plddt[i] = 40.0f + 2.0f * static_cast<float>(i);
  set_per_residue_b_factors(s, plddt);
  EXPECT_THROW(set_per_residue_b_factors(s, std::span<const float>(plddt).first(3)), Error);
  const Structure p = parse_pdb(to_pdb(s), "plddt.pdb");
  for (size_t r = 0; r < p.chains[0].residues.size(); ++r)
    for (const Atom& a : p.chains[0].residues[r].atoms) EXPECT_FLOAT_EQ(a.b_factor, plddt[r]);
  MmcifWriteOptions o;
  o.plddt_tables = true;
  CifTokenizer tz = CifTokenizer::from_string(to_mmcif(s, o), "plddt.cif");
  const CifBlock b = read_cif_block(tz);
  const CifTable* local = b.find("ma_qa_metric_local");
  ASSERT_NE(local, nullptr);
  ASSERT_EQ(local->num_rows(), plddt.size());
  const int v = local->column("metric_value"), seq = local->column("label_seq_id");
  for (size_t r = 0; r < plddt.size(); ++r) {
    EXPECT_FLOAT_EQ(std::stof(local->at(r, v)), plddt[r]);
    EXPECT_EQ(local->at(r, seq), std::to_string(r + 1));
  }
  const CifTable* global = b.find("ma_qa_metric_global");
  ASSERT_NE(global, nullptr);
  EXPECT_NEAR(std::stod(global->at(0, global->column("metric_value"))), 40.0 + 28.0, 1e-9);  // mean of 40..96
}

TEST(StructureWriters, RemarksWrapAndFormatErrors) {
  Structure s = read_pdb(shared("pdb/glucagon.pdb"));
  PdbWriteOptions o;
  o.remarks = {"WARNING: random parameters, not a real prediction", std::string(100, 'x')};
  const std::string text = to_pdb(s, o);
  EXPECT_EQ(text.substr(0, 7 + o.remarks[0].size() + 1), "REMARK " + o.remarks[0] + " ");
  EXPECT_EQ(text.substr(81, 80), "REMARK " + std::string(73, 'x'));
  EXPECT_EQ(text.substr(162, 34), "REMARK " + std::string(27, 'x'));
  for (size_t pos = 0; pos < text.size(); pos = text.find('\n', pos) + 1) EXPECT_EQ(text.find('\n', pos) - pos, 80u);
  Structure bad = s;
  bad.chains[0].auth_id = "AB";
  EXPECT_THROW(to_pdb(bad), Error);
  bad = s;
  bad.chains[0].residues[0].auth_seq_num = 10000;
  EXPECT_THROW(to_pdb(bad), Error);
  bad = s;
  bad.chains[0].residues[0].atoms[0].x = 12345.0;
  EXPECT_THROW(to_pdb(bad), Error);
  // mmCIF has no such limits.
  bad.chains[0].auth_id = "AB";
  bad.chains[0].residues[0].atoms[0].x = 12345.0;
  const Structure t = parse_mmcif(to_mmcif(bad), "wide.cif");
  EXPECT_EQ(t.chains[0].auth_id, "AB");
  EXPECT_DOUBLE_EQ(t.chains[0].residues[0].atoms[0].x, 12345.0);
}

TEST(StructureWriters, AtomicFileWrites) {
  const fs::path dir = fs::temp_directory_path() / ("foldcore_test_structure_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const Structure s = read_pdb(shared("pdb/glucagon.pdb"));
  write_pdb((dir / "out.pdb").string(), s);
  write_mmcif((dir / "out.cif").string(), s);
  expect_same(s, read_pdb((dir / "out.pdb").string()), false);
  expect_same(s, read_mmcif((dir / "out.cif").string()), false);
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 2u);  // no temporary files left
  EXPECT_THROW(write_pdb((dir / "no_such_dir" / "x.pdb").string(), s), Error);
  EXPECT_FALSE(fs::exists(dir / "no_such_dir"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace foldcore::data
