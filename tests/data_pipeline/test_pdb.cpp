// PDB reader tests: the real files in <shared>/data (glucagon.pdb, OpenFold's 6KWC prediction),
// models, alt locs, element fallback, gzip input and malformed inputs.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "data_pipeline/formats/cif_tokenizer.h"
#include "data_pipeline/formats/pdb_reader.h"
#include "test_util.h"

namespace foldcore::data {
namespace {

namespace fs = std::filesystem;

std::string glucagon() { return testing::shared_dir() + "/data/pdb/glucagon.pdb"; }
std::string kwc() { return testing::shared_dir() + "/data/6kwc/6KWC_1_model_1_ptm_unrelaxed.pdb"; }

// Lines of a file starting with `prefix` (the `grep -c ^ATOM` of the brief).
size_t count_lines_with_prefix(const std::string& path, const std::string& prefix) {
  const std::string text = read_text_file(path);
  size_t n = 0, pos = 0;
  while (pos < text.size()) {
    if (text.compare(pos, prefix.size(), prefix) == 0) ++n;
    const size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  return n;
}

// An ATOM/HETATM record laid out per the PDB format columns.
std::string atom_line(const char* rec, int serial, const char* name, char alt, const char* res, char chain, int seq,
                      double x, double y, double z, double occ, double b, const char* element) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%-6s%5d %-4s%c%3s %c%4d    %8.3f%8.3f%8.3f%6.2f%6.2f          %2s", rec, serial, name,
                alt, res, chain, seq, x, y, z, occ, b, element);
  return buf;
}

TEST(Pdb, GlucagonParses) {
  const Structure s = read_pdb(glucagon());
  // `grep -c ^ATOM glucagon.pdb` = 246; no HETATM; one chain A ending at THR 29 (its TER record).
  EXPECT_EQ(count_lines_with_prefix(glucagon(), "ATOM"), 246u);
  EXPECT_EQ(s.num_atoms(), 246u);
  ASSERT_EQ(s.chains.size(), 1u);
  const Chain& a = s.chains[0];
  EXPECT_EQ(a.auth_id, "A");
  ASSERT_EQ(a.residues.size(), 29u);
  EXPECT_EQ(a.residues.back().name, "THR");
  EXPECT_EQ(a.residues.back().auth_seq_num, 29);
  // HEADER id 1GCN (cols 63-66), EXPDTA X-RAY DIFFRACTION, "REMARK   2 RESOLUTION.    3.00 ANGSTROMS."
  EXPECT_EQ(s.id, "1GCN");
  EXPECT_DOUBLE_EQ(s.metadata.resolution, 3.0);
  ASSERT_EQ(s.metadata.methods.size(), 1u);
  EXPECT_EQ(s.metadata.methods[0], "X-RAY DIFFRACTION");
  // First record: "ATOM      1  N   HIS A   1      49.668  24.248  10.436  1.00 25.00           N"
  const Atom& n = a.residues[0].atoms[0];
  EXPECT_EQ(a.residues[0].name, "HIS");
  EXPECT_EQ(n.name, "N");
  EXPECT_EQ(n.element, "N");
  EXPECT_DOUBLE_EQ(n.x, 49.668);
  EXPECT_DOUBLE_EQ(n.y, 24.248);
  EXPECT_DOUBLE_EQ(n.z, 10.436);
  EXPECT_FLOAT_EQ(n.occupancy, 1.0f);
  EXPECT_FLOAT_EQ(n.b_factor, 25.0f);
  // Glucagon's sequence (SEQRES of 1GCN).
  EXPECT_EQ(chain_sequence(s, a), "HSQGTFTSDYSKYLDSRRAQDFVQWLMNT");
  EXPECT_TRUE(s.is_protein_chain(a));
}

TEST(Pdb, OpenFoldPredictionParses) {
  const Structure s = read_pdb(kwc());
  EXPECT_EQ(count_lines_with_prefix(kwc(), "ATOM"), 1482u);
  EXPECT_EQ(s.num_atoms(), 1482u);
  ASSERT_EQ(s.chains.size(), 1u);
  EXPECT_EQ(s.chains[0].residues.size(), 191u);
  // The prediction is of 6kwc.fasta's sequence.
  const std::string fasta = read_text_file(testing::shared_dir() + "/data/6kwc/6kwc.fasta");
  const std::string seq = fasta.substr(fasta.find('\n') + 1, 191);
  EXPECT_EQ(chain_sequence(s, s.chains[0], SequenceSource::kObserved), seq);
  // pLDDT in the B-factor column: one value per residue.
  for (const Residue& r : s.chains[0].residues)
    for (const Atom& at : r.atoms) EXPECT_EQ(at.b_factor, r.atoms[0].b_factor);
  EXPECT_FLOAT_EQ(s.chains[0].residues.back().atoms.back().b_factor, 97.40f);  // "OG  SER A 191 ... 97.40"
}

TEST(Pdb, ModelsAltLocsInsertionCodesAndElementFallback) {
  std::string text = "MODEL        1\n";
  text += atom_line("ATOM", 1, " CA ", 'A', "SER", 'A', 5, 1, 2, 3, 0.40, 10, "C") + "\n";
  text += atom_line("ATOM", 2, " CA ", 'B', "SER", 'A', 5, 4, 5, 6, 0.60, 11, "C") + "\n";
  text += atom_line("ATOM", 3, " CA ", ' ', "GLY", 'A', 5, 7, 8, 9, 1.0, 12, "") + "\n";  // no element
  // Insertion code 'A' on residue 5 (column 27).
  std::string ins = atom_line("ATOM", 4, " N  ", ' ', "ALA", 'A', 5, 1, 1, 1, 1, 1, "N");
  ins[26] = 'A';
  text += ins + "\n";
  text += atom_line("HETATM", 5, "FE  ", ' ', "HEM", 'B', 1, 0, 0, 0, 1, 1, "") + "\n";
  text += "ENDMDL\nMODEL        2\n";
  text += atom_line("ATOM", 1, " CA ", ' ', "SER", 'A', 5, 9, 9, 9, 1, 1, "C") + "\nENDMDL\nEND\n";
  const Structure s = parse_pdb(text, "m.pdb");
  ASSERT_EQ(s.chains.size(), 2u);
  const Chain& a = s.chains[0];
  ASSERT_EQ(a.residues.size(), 3u);  // SER 5, GLY 5 (name changes), ALA 5A
  EXPECT_DOUBLE_EQ(a.residues[0].atoms[0].x, 4.0);  // alt B has the higher occupancy
  EXPECT_EQ(a.residues[0].atoms[0].alt_loc, 'B');
  EXPECT_EQ(a.residues[1].atoms[0].element, "C");  // " CA " → carbon
  EXPECT_EQ(a.residues[2].ins_code, 'A');
  EXPECT_EQ(s.chains[1].residues[0].atoms[0].element, "FE");  // "FE  " → iron
  EXPECT_TRUE(s.chains[1].residues[0].hetero);
  ReadOptions o;
  o.alt_loc = AltLocPolicy::kFirst;
  EXPECT_DOUBLE_EQ(parse_pdb(text, "m.pdb", o).chains[0].residues[0].atoms[0].x, 1.0);
  o.model_num = 2;
  const Structure m2 = parse_pdb(text, "m.pdb", o);
  EXPECT_EQ(m2.model_num, 2);
  EXPECT_EQ(m2.num_atoms(), 1u);
  EXPECT_DOUBLE_EQ(m2.chains[0].residues[0].atoms[0].x, 9.0);
  ReadOptions nowater;
  nowater.keep_hydrogens = false;
  EXPECT_EQ(parse_pdb(atom_line("ATOM", 1, " H  ", ' ', "GLY", 'A', 1, 0, 0, 0, 1, 1, "H") + "\n" +
                          atom_line("ATOM", 2, " CA ", ' ', "GLY", 'A', 1, 0, 0, 0, 1, 1, "C") + "\n",
                      "h.pdb", nowater)
                .num_atoms(),
            1u);
}

TEST(Pdb, GzipInputParsesTheSame) {
  const std::string text = read_text_file(glucagon());
  const fs::path gz = fs::temp_directory_path() / ("foldcore_test_pdb_" + std::to_string(::getpid()) + ".pdb.gz");
  gzFile f = gzopen(gz.string().c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  gzclose(f);
  const Structure a = read_pdb(glucagon()), b = read_pdb(gz.string());
  fs::remove(gz);
  ASSERT_EQ(a.num_atoms(), b.num_atoms());
  for (size_t r = 0; r < a.chains[0].residues.size(); ++r)
    for (size_t k = 0; k < a.chains[0].residues[r].atoms.size(); ++k)
      EXPECT_EQ(a.chains[0].residues[r].atoms[k].y, b.chains[0].residues[r].atoms[k].y);
}

void expect_error(const std::string& text, const std::string& where, const std::string& what) {
  try {
    parse_pdb(text, "bad.pdb");
    ADD_FAILURE() << "no error for:\n" << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(Pdb, MalformedInputsGiveFileAndLine) {
  const std::string good = atom_line("ATOM", 1, " CA ", ' ', "GLY", 'A', 1, 1, 2, 3, 1, 1, "C");
  expect_error("", "bad.pdb:0:", "no ATOM/HETATM records");
  expect_error(">query\nMAAHKGAEHHHK\n", "bad.pdb:2:", "no ATOM/HETATM records");
  expect_error(good + "\n" + good.substr(0, 40) + "\n", "bad.pdb:2:", "need columns 31-54");
  std::string bad_x = good;
  bad_x.replace(30, 8, "   1.2x3");
  expect_error("HEADER\n" + bad_x + "\n", "bad.pdb:2:", "x coordinate '1.2x3' is not a number");
  std::string bad_seq = good;
  bad_seq.replace(22, 4, "  ab");
  expect_error(bad_seq + "\n", "bad.pdb:1:", "residue number");
  ReadOptions o;
  o.model_num = 3;
  EXPECT_THROW(parse_pdb(good + "\n", "bad.pdb", o), Error);
  EXPECT_THROW(read_pdb(testing::shared_dir() + "/data/pdb/missing.pdb"), Error);
  EXPECT_THROW(read_pdb(testing::shared_dir() + "/data/query73/af2_raw_features.npz"), Error);
}

}  // namespace
}  // namespace foldcore::data
