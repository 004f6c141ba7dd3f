// mmCIF tokenizer and parser tests on the real files in <shared>/data/mmcifs and on small
// hand-written inputs (syntax corner cases and malformed files).
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "core/error.h"
#include "data_pipeline/formats/cif_tokenizer.h"
#include "data_pipeline/formats/mmcif_parser.h"
#include "test_util.h"

namespace foldcore::data {
namespace {

namespace fs = std::filesystem;

std::string mmcif_dir() { return testing::shared_dir() + "/data/mmcifs"; }
std::string cif(const std::string& id) { return mmcif_dir() + "/" + id + ".cif"; }

// Expected per-file facts. Sources (all read from the file text, first model only):
//  - resolution: `grep ^_refine.ls_d_res_high` (3zee: also _em_3d_reconstruction.resolution 6.1);
//    NMR entries have none of the three resolution items → NaN;
//  - release: the smallest revision_date in the _pdbx_audit_revision_history loop;
//  - deposition: _pdbx_database_status.recvd_initial_deposition_date; method: _exptl.method;
//  - chains: (label asym id, author id, observed residues, atoms after alt-loc selection),
//    counted with a throwaway script over the _atom_site rows of model 1 (distinct
//    label_seq_id/auth_seq_id per asym; atoms deduplicated by (asym, residue, atom name)).
struct ChainFact {
  const char* label;
  const char* auth;
  size_t residues;
  size_t atoms;
};
struct FileFact {
  const char* id;
  double resolution;  // NaN for none
  const char* release;
  const char* deposition;
  const char* method;
  std::vector<ChainFact> chains;
};

const double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<FileFact> file_facts() {
  return {
      {"1psm", kNaN, "1995-02-07", "1994-12-01", "SOLUTION NMR", {{"A", "A", 38, 563}}},
      {"2crb", kNaN, "2005-11-20", "2005-05-20", "SOLUTION NMR", {{"A", "A", 97, 1525}}},
      {"2q2k", 3.00, "2008-02-05", "2007-05-28", "X-RAY DIFFRACTION",
       {{"A", "F", 20, 407}, {"B", "A", 45, 383}, {"C", "B", 44, 379}, {"D", "A", 1, 15}}},
      {"3u8v", 1.90, "2011-11-09", "2011-10-17", "X-RAY DIFFRACTION",
       {{"A", "A", 83, 622}, {"B", "B", 83, 622}, {"C", "A", 1, 1}, {"D", "A", 55, 55}, {"E", "B", 42, 42}}},
      {"3zee", 6.10, "2013-10-16", "2012-12-05", "ELECTRON MICROSCOPY", {{"A", "A", 84, 670}}},
      {"4i6p", 2.90, "2013-07-17", "2012-11-29", "X-RAY DIFFRACTION",
       {{"A", "A", 84, 669}, {"B", "B", 82, 654}, {"C", "A", 13, 13}, {"D", "B", 21, 21}}},
      {"4zey", 1.50, "2015-05-06", "2015-04-20", "X-RAY DIFFRACTION",
       {{"A", "A", 84, 679}, {"B", "A", 1, 5}, {"C", "A", 1, 5}, {"D", "A", 102, 102}}},
  };
}

TEST(Mmcif, EveryFileParsesWithExpectedMetadataAndChains) {
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(mmcif_dir()))
    if (entry.path().extension() == ".cif") {
      EXPECT_NO_THROW(read_mmcif(entry.path().string())) << entry.path();
      ++files;
    }
  EXPECT_EQ(files, 7u);
  for (const FileFact& f : file_facts()) {
    SCOPED_TRACE(f.id);
    const Structure s = read_mmcif(cif(f.id));
    std::string upper_id = f.id;
    for (char& c : upper_id) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(s.id, upper_id);
    if (std::isnan(f.resolution))
      EXPECT_FALSE(s.metadata.has_resolution());
    else
      EXPECT_DOUBLE_EQ(s.metadata.resolution, f.resolution);
    EXPECT_EQ(s.metadata.release_date, f.release);
    EXPECT_EQ(s.metadata.deposition_date, f.deposition);
    ASSERT_EQ(s.metadata.methods.size(), 1u);
    EXPECT_EQ(s.metadata.methods[0], f.method);
    ASSERT_EQ(s.chains.size(), f.chains.size());
    for (size_t i = 0; i < f.chains.size(); ++i) {
      const Chain& c = s.chains[i];
      EXPECT_EQ(c.label_id, f.chains[i].label);
      EXPECT_EQ(c.auth_id, f.chains[i].auth);
      EXPECT_EQ(c.residues.size(), f.chains[i].residues) << c.label_id;
      size_t atoms = 0;
      for (const Residue& r : c.residues) atoms += r.atoms.size();
      EXPECT_EQ(atoms, f.chains[i].atoms) << c.label_id;
    }
  }
}

// The seqres sequence derived from _entity_poly_seq components (modified residues mapped to their
// parents) must equal the file's own canonical one-letter code, and the observed sequence must
// be the seqres with the missing positions removed.
TEST(Mmcif, ChainSequencesAgreeWithCanonicalOneLetterCode) {
  for (const FileFact& f : file_facts()) {
    SCOPED_TRACE(f.id);
    const Structure s = read_mmcif(cif(f.id));
    size_t polymer_chains = 0;
    for (const Chain& c : s.chains) {
      const Entity* e = s.find_entity(c.entity_id);
      ASSERT_NE(e, nullptr);
      if (e->type != EntityType::kPolymer) {
        EXPECT_TRUE(c.seqres_to_residue.empty());
        continue;
      }
      ++polymer_chains;
      ASSERT_FALSE(e->sequence_can.empty());
      const std::string seqres = chain_sequence(s, c, SequenceSource::kSeqres);
      EXPECT_EQ(seqres, e->sequence_can) << c.label_id;
      EXPECT_EQ(c.seqres_to_residue.size(), e->sequence_three.size());
      std::string expected_observed;
      for (size_t p = 0; p < seqres.size(); ++p)
        if (c.seqres_to_residue[p] >= 0) expected_observed.push_back(seqres[p]);
      EXPECT_EQ(chain_sequence(s, c, SequenceSource::kObserved), expected_observed);
      EXPECT_EQ(c.residues.size() + missing_seqres_positions(c).size(), seqres.size());
    }
    EXPECT_GT(polymer_chains, 0u);
  }
}

TEST(Mmcif, MissingResiduesAreDetected) {
  // 3u8v chain A: label_seq_id 45-49 and 89-93 have no atoms (entity length 93).
  const Structure s = read_mmcif(cif("3u8v"));
  const Chain* a = s.find_chain_by_label("A");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->seqres_to_residue.size(), 93u);
  EXPECT_EQ(missing_seqres_positions(*a), (std::vector<int>{44, 45, 46, 47, 48, 88, 89, 90, 91, 92}));
  // 4i6p chain B: 1-4 and 87-88 missing.
  const Structure t = read_mmcif(cif("4i6p"));
  EXPECT_EQ(missing_seqres_positions(*t.find_chain_by_label("B")), (std::vector<int>{0, 1, 2, 3, 86, 87}));
}

TEST(Mmcif, ModifiedResiduesMapToParents) {
  // 4zey: _pdbx_struct_mod_residue lists MSE at label_seq_id 2, 43, 63 of asym A (parent MET);
  // the atoms are HETATM records inside the protein chain.
  const Structure s = read_mmcif(cif("4zey"));
  ASSERT_EQ(s.modified_residues.size(), 3u);
  EXPECT_EQ(s.parent_comp_id("A", 43), "MET");
  const Chain& a = *s.find_chain_by_label("A");
  const Residue& mse = a.residues[static_cast<size_t>(a.seqres_to_residue[1])];
  EXPECT_EQ(mse.name, "MSE");
  EXPECT_TRUE(mse.hetero);
  EXPECT_EQ(mse.auth_seq_num, 4);
  EXPECT_EQ(chain_sequence(s, a).substr(0, 3), "GME");
  EXPECT_TRUE(s.is_protein_chain(a));
  EXPECT_FALSE(s.is_protein_chain(*s.find_chain_by_label("D")));  // water
  // 2q2k: 5IU (parent DU per the file's table) in a DNA chain → 'U', as in the canonical code.
  const Structure d = read_mmcif(cif("2q2k"));
  EXPECT_EQ(d.polymer_type(*d.find_chain_by_label("A")), PolymerType::kDna);
  EXPECT_EQ(chain_sequence(d, *d.find_chain_by_label("A")), "AGTATAUACUAGTATATACT");
}

TEST(Mmcif, FirstModelByDefaultAndModelSelection) {
  // 1psm is a 20-model NMR ensemble; the first atom row of model 1 is N of GLU 1.
  const Structure m1 = read_mmcif(cif("1psm"));
  EXPECT_EQ(m1.model_num, 1);
  EXPECT_EQ(m1.num_atoms(), 563u);
  ReadOptions o;
  o.model_num = 2;
  const Structure m2 = read_mmcif(cif("1psm"), o);
  EXPECT_EQ(m2.model_num, 2);
  EXPECT_EQ(m2.num_atoms(), 563u);
  const Atom& a1 = m1.chains[0].residues[0].atoms[0];
  const Atom& a2 = m2.chains[0].residues[0].atoms[0];
  EXPECT_EQ(a1.name, a2.name);
  EXPECT_NE(a1.x, a2.x);
  o.model_num = 21;
  EXPECT_THROW(read_mmcif(cif("1psm"), o), Error);
}

TEST(Mmcif, AltLocSelection) {
  // 3u8v GLN A 28 CG: alt A (occ 0.50, x -8.117) then alt B (occ 0.50, x -8.493): a tie keeps A.
  const Structure s = read_mmcif(cif("3u8v"));
  const Chain& a = *s.find_chain_by_label("A");
  const Residue& gln = a.residues[static_cast<size_t>(a.seqres_to_residue[27])];
  EXPECT_EQ(gln.name, "GLN");
  const Atom* cg = gln.find_atom("CG");
  ASSERT_NE(cg, nullptr);
  EXPECT_DOUBLE_EQ(cg->x, -8.117);
  EXPECT_EQ(cg->alt_loc, 'A');
  // Unequal occupancies: highest wins by default, first with kFirst.
  const std::string text =
      "data_t\nloop_\n_atom_site.group_PDB\n_atom_site.label_atom_id\n_atom_site.label_alt_id\n"
      "_atom_site.label_comp_id\n_atom_site.label_asym_id\n_atom_site.label_seq_id\n_atom_site.Cartn_x\n"
      "_atom_site.Cartn_y\n_atom_site.Cartn_z\n_atom_site.occupancy\n"
      "ATOM CA A SER A 1 1.0 0 0 0.30\nATOM CA B SER A 1 2.0 0 0 0.70\nATOM CB . SER A 1 3.0 0 0 1.0\n";
  const Structure hi = parse_mmcif(text, "alt.cif");
  ASSERT_EQ(hi.chains.size(), 1u);
  ASSERT_EQ(hi.chains[0].residues[0].atoms.size(), 2u);
  EXPECT_DOUBLE_EQ(hi.chains[0].residues[0].atoms[0].x, 2.0);
  ReadOptions first;
  first.alt_loc = AltLocPolicy::kFirst;
  EXPECT_DOUBLE_EQ(parse_mmcif(text, "alt.cif", first).chains[0].residues[0].atoms[0].x, 1.0);
}

TEST(Mmcif, GzipInputParsesTheSame) {
  const std::string plain = cif("4zey");
  const fs::path gz = fs::temp_directory_path() / ("foldcore_test_mmcif_" + std::to_string(::getpid()) + ".cif.gz");
  {
    const std::string text = read_text_file(plain);
    gzFile f = gzopen(gz.string().c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
    gzclose(f);
  }
  const Structure a = read_mmcif(plain), b = read_mmcif(gz.string());
  ASSERT_EQ(a.num_atoms(), b.num_atoms());
  EXPECT_EQ(a.metadata.release_date, b.metadata.release_date);
  for (size_t c = 0; c < a.chains.size(); ++c)
    for (size_t r = 0; r < a.chains[c].residues.size(); ++r)
      for (size_t k = 0; k < a.chains[c].residues[r].atoms.size(); ++k)
        EXPECT_EQ(a.chains[c].residues[r].atoms[k].z, b.chains[c].residues[r].atoms[k].z);
  // A gzip stream cut in half must fail with a clear error, not parse a prefix silently.
  const auto size = fs::file_size(gz);
  fs::resize_file(gz, size / 2);
  try {
    read_mmcif(gz.string());
    ADD_FAILURE() << "truncated gzip parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(gz.string()), std::string::npos) << e.what();
  }
  fs::remove(gz);
}

// ---------------------------------------------------------------- tokenizer
TEST(CifTokenizer, QuotesTextFieldsCommentsAndNulls) {
  const std::string text =
      "# leading comment\n"
      "data_TEST\n"
      "_a.x 'it''s quoted'  # trailing comment\n"
      "_a.y \"O5'\"\n"
      "_a.z ?\n"
      "_a.w '?'\n"
      "_a.v\n"
      ";first line\n"
      "second line\n"
      ";\n"
      "loop_\n"
      "_b.p _b.q\n"
      "1 . 2 'a b'\n"
      "3 x#notacomment\n";
  CifTokenizer tz = CifTokenizer::from_string(text, "t.cif");
  const CifBlock b = read_cif_block(tz);
  EXPECT_EQ(b.name, "TEST");
  const CifTable* a = b.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->at(0, a->column("x")), "it''s quoted");  // quote closes only before whitespace
  EXPECT_EQ(a->at(0, a->column("y")), "O5'");
  EXPECT_TRUE(a->is_null(0, a->column("z")));
  EXPECT_FALSE(a->is_null(0, a->column("w")));
  EXPECT_EQ(a->at(0, a->column("v")), "first line\nsecond line");
  EXPECT_EQ(a->line_of(0, a->column("v")), 8);
  const CifTable* l = b.find("b");
  ASSERT_NE(l, nullptr);
  ASSERT_EQ(l->num_rows(), 3u);
  EXPECT_TRUE(l->is_null(0, 1));
  EXPECT_EQ(l->at(1, 1), "a b");
  EXPECT_EQ(l->at(2, 1), "x#notacomment");
  EXPECT_EQ(l->line_of(2, 0), 14);
}

// Each malformed input must throw a foldcore::Error naming the file and the right line.
void expect_error(const std::string& text, const std::string& where, const std::string& what) {
  try {
    parse_mmcif(text, "bad.cif");
    ADD_FAILURE() << "no error for input:\n" << text;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(where), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
}

const char* kAtomHeader =
    "data_x\nloop_\n_atom_site.group_PDB\n_atom_site.label_atom_id\n_atom_site.label_comp_id\n"
    "_atom_site.label_asym_id\n_atom_site.label_seq_id\n_atom_site.Cartn_x\n_atom_site.Cartn_y\n"
    "_atom_site.Cartn_z\n";  // 10 lines; the first row is on line 11

TEST(CifTokenizer, MalformedInputsGiveFileAndLine) {
  expect_error("", "bad.cif:1:", "empty file");
  expect_error("# only a comment\n\n", "bad.cif:", "empty file");
  expect_error(">query\nMKVLAAGIV\n", "bad.cif:1:", "expected a 'data_' block header");
  expect_error("data_x\n_a.b 'no end\n", "bad.cif:2:", "unterminated quoted value");
  expect_error("data_x\n_a.b\n;text\nmore text\n", "bad.cif:3:", "unterminated ';' text field");
  expect_error("data_x\n_a.b\n", "bad.cif:2:", "has no value");
  expect_error("data_x\nloop_\n_a.b\n_a.c\n", "bad.cif:2:", "has no values");
  expect_error("data_x\n_a.b 1 2\n", "bad.cif:2:", "without a preceding tag");
  // A row with a missing column: reported at the first row that no longer starts a line.
  expect_error(std::string(kAtomHeader) + "ATOM N ALA A 1 1.0 2.0 3.0\nATOM CA ALA A 1 1.0 2.0\n"
                                          "ATOM C ALA A 1 1.0 2.0 3.0\nATOM O ALA A 1 1.0 2.0 3.0\n",
               "bad.cif:13:", "not a multiple of its 8 columns");
  // A truncated loop (last row cut).
  expect_error(std::string(kAtomHeader) + "ATOM N ALA A 1 1.0 2.0 3.0\nATOM CA ALA A 1\n", "bad.cif:12:",
               "not a multiple");
  expect_error(std::string(kAtomHeader) + "ATOM N ALA A 1 1.0 2.0 3.0\nATOM CA ALA A 1 1.0 abc 3.0\n",
               "bad.cif:12:", "Cartn_y value 'abc' is not a number");
  expect_error("data_x\n_entry.id X\n", "bad.cif:", "no _atom_site records");
  expect_error("data_x\nloop_\n_atom_site.group_PDB\n_atom_site.Cartn_x\nATOM 1.0\n", "bad.cif:5:",
               "_atom_site has no Cartn_y column");
}

TEST(CifTokenizer, MalformedFilesOnDisk) {
  // A real FASTA file given as mmCIF, and a binary file.
  const std::string fasta = testing::shared_dir() + "/data/query73/query.fasta";
  try {
    read_mmcif(fasta);
    ADD_FAILURE() << "FASTA parsed as mmCIF";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fasta + ":1:"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_mmcif(testing::shared_dir() + "/data/query73/af2_raw_features.npz"), Error);
  EXPECT_THROW(read_mmcif(mmcif_dir() + "/does_not_exist.cif"), Error);
  // A real file cut in the middle of the _atom_site loop still fails cleanly (truncated row) or
  // parses a prefix of whole rows; never crashes.
  const std::string text = read_text_file(cif("3zee"));
  const size_t cut = text.find("\nATOM 300 ");
  ASSERT_NE(cut, std::string::npos);
  expect_error(text.substr(0, cut + 30), "bad.cif:", "not a multiple");
}

}  // namespace
}  // namespace foldcore::data
