// TrainingChain from real mmCIFs and alignments: every protein chain of the shared mmCIFs converts,
// its sequence is the entity's seqres (modified residues → parent), its atom37 mask counts equal
// the observed atoms counted directly from the parsed file, 2q2k chain A's MSA is the deduplicated
// union of its alignment files, templates respect the release-date cutoff, and bad inputs give
// errors naming the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <unordered_set>

#include "data_pipeline/formats/a3m.h"
#include "data_pipeline/data_test_util.h"
#include "data_pipeline/formats/mmcif_parser.h"
#include "data_pipeline/structure/residue_constants.h"
#include "data_pipeline/formats/stockholm.h"
#include "data_pipeline/training/training_chain.h"
#include "test_util.h"

namespace foldcore::data {
namespace {

std::string shared(const std::string& f) { return testing::shared_dir() + "/data/" + f; }

// The expected one-letter code of a seqres component, independent of chain_sequence: the file's
// modification table, then residue_constants' parent table, then restype_3to1 (X otherwise).
char expected_letter(const Structure& s, const Chain& c, size_t p, const std::string& comp) {
  std::string parent = s.parent_comp_id(c.label_id, static_cast<int>(p) + 1);
  if (parent.empty()) parent = std::string(rc::modified_residue_parent(comp));
  return rc::restype_3to1(parent.empty() ? comp : parent);
}

TEST(TrainingChain, EveryProteinChainOfTheSharedMmcifsConverts) {
  int converted = 0;
  for (const auto& entry : std::filesystem::directory_iterator(shared("mmcifs"))) {
    const Structure s = read_mmcif(entry.path().string());
    std::set<std::string> seen;
    for (const Chain& c : s.chains) {
      if (!s.is_protein_chain(c) || !seen.insert(c.auth_id).second) continue;
      if (s.find_chain_by_auth(c.auth_id) != &c) continue;  // a repeated author id: the first chain is used
      SCOPED_TRACE(s.id + "_" + c.auth_id);
      const TrainingChain tc = training_chain_from_mmcif(s, c.auth_id, "");
      ++converted;
      const Entity* e = s.find_entity(c.entity_id);
      ASSERT_NE(e, nullptr);
      ASSERT_EQ(tc.num_res(), static_cast<int64_t>(e->sequence_three.size()));
      // Sequence = seqres; observed residues use the observed component (microheterogeneity).
      for (size_t p = 0; p < e->sequence_three.size(); ++p) {
        const int r = c.seqres_to_residue[p];
        const std::string& comp = r >= 0 ? c.residues[static_cast<size_t>(r)].name : e->sequence_three[p];
        EXPECT_EQ(tc.sequence[p], expected_letter(s, c, p, comp)) << "position " << p << " " << comp;
        EXPECT_EQ(tc.residue_index[p], static_cast<int32_t>(p));
      }
      // Mask count = atoms with an atom37 name (or MSE's SE) in observed residues.
      size_t expected_atoms = 0;
      double coord_sum = 0;
      for (size_t p = 0; p < c.seqres_to_residue.size(); ++p) {
        if (c.seqres_to_residue[p] < 0) continue;
        const Residue& res = c.residues[static_cast<size_t>(c.seqres_to_residue[p])];
        for (const Atom& a : res.atoms) {
          const bool in37 = std::find(rc::kAtomTypes.begin(), rc::kAtomTypes.end(), a.name) != rc::kAtomTypes.end();
          if (in37 || (res.name == "MSE" && a.name == "SE")) {
            ++expected_atoms;
            coord_sum += a.x + a.y + a.z;
          }
        }
      }
      double mask_sum = 0, pos_sum = 0;
      for (float m : tc.all_atom_mask) mask_sum += m;
      for (float x : tc.all_atom_positions) pos_sum += x;
      EXPECT_EQ(mask_sum, static_cast<double>(expected_atoms));
      // float32 storage: |error| ≤ 2^-24 · |x| per coordinate, summed over ≤ 3·10^4 values of ≤ 10^3 Å.
      EXPECT_NEAR(pos_sum, coord_sum, 1e-3 * static_cast<double>(expected_atoms) + 1e-6);
      EXPECT_EQ(tc.msa.depth, 1);  // no alignments: the query alone
      EXPECT_TRUE(tc.templates.empty());
      EXPECT_GE(tc.resolution, 0.0);
      EXPECT_EQ(tc.release_date, s.metadata.release_date);
    }
  }
  EXPECT_GE(converted, 7);
}

TEST(TrainingChain, SelenomethionineSeleniumGoesToSd) {
  const Structure s = read_mmcif(shared("mmcifs/4zey.cif"));
  const Chain* chain = nullptr;
  for (const Chain& c : s.chains)
    if (s.is_protein_chain(c)) {
      chain = &c;
      break;
    }
  ASSERT_NE(chain, nullptr);
  const TrainingChain tc = training_chain_from_mmcif(s, chain->auth_id, "");
  const int sd = rc::atom_order("SD");
  int mse = 0;
  for (size_t p = 0; p < chain->seqres_to_residue.size(); ++p) {
    if (chain->seqres_to_residue[p] < 0) continue;
    const Residue& res = chain->residues[static_cast<size_t>(chain->seqres_to_residue[p])];
    if (res.name != "MSE") continue;
    const Atom* se = res.find_atom("SE");
    if (se == nullptr) continue;
    ++mse;
    EXPECT_EQ(tc.sequence[p], 'M');
    EXPECT_EQ(tc.all_atom_mask[p * 37 + static_cast<size_t>(sd)], 1.0f);
    EXPECT_FLOAT_EQ(tc.all_atom_positions[(p * 37 + static_cast<size_t>(sd)) * 3], static_cast<float>(se->x));
  }
  EXPECT_GT(mse, 0) << "4zey has selenomethionines";
}

TEST(TrainingChain, ResolutionAndDateFromMetadata) {
  const Structure s = read_mmcif(shared("mmcifs/2q2k.cif"));
  const TrainingChain tc = training_chain_from_mmcif(s, "A", "");
  EXPECT_NEAR(tc.resolution, s.metadata.resolution, 1e-12);
  EXPECT_NEAR(tc.resolution, 3.0, 0.05);  // README: X-ray 3.0 Å
  EXPECT_EQ(tc.name, "2q2k_A");
  const Structure nmr = read_mmcif(shared("mmcifs/1psm.cif"));
  EXPECT_EQ(training_chain_from_mmcif(nmr, nmr.chains[0].auth_id, "").resolution, 0.0);  // NMR: none
}

TEST(TrainingChain, AlignmentsOf2q2kAreMergedWithDeduplication) {
  const Structure s = read_mmcif(shared("mmcifs/2q2k.cif"));
  const std::string dir = shared("2q2k_A/alignments");
  const TrainingChain tc = training_chain_from_mmcif(s, "A", dir);
  // Independent count: unique aligned rows over uniref90, bfd, mgnify (uniprot is not read).
  const Msa u = read_stockholm(dir + "/uniref90_hits.sto");
  const Msa b = read_a3m(dir + "/bfd_uniclust_hits.a3m");
  const Msa m = read_stockholm(dir + "/mgnify_hits.sto");
  std::unordered_set<std::string> unique;
  for (const Msa* msa : {&u, &b, &m}) unique.insert(msa->sequences.begin(), msa->sequences.end());
  EXPECT_EQ(tc.msa.depth, static_cast<int64_t>(unique.size()));
  EXPECT_LT(tc.msa.depth, static_cast<int64_t>(u.depth() + b.depth() + m.depth()));  // duplicates exist
  EXPECT_EQ(tc.msa.num_columns, tc.num_res());
  for (int64_t i = 0; i < tc.num_res(); ++i)
    EXPECT_EQ(tc.msa.msa[static_cast<size_t>(i)], hhblits_aa_to_id(tc.sequence[static_cast<size_t>(i)]));
  // Row caps apply per file (uniref90 to 2 rows: fewer merged rows).
  TrainingChainOptions capped;
  capped.uniref_max_hits = 2;
  EXPECT_LT(training_chain_from_mmcif(s, "A", dir, capped).msa.depth, tc.msa.depth);
}

// A one-hit HHR file: query residues 11..60 of `seq` aligned without gaps to `hit_name` residues 11..60.
void write_self_hit_hhr(const std::string& path, const std::string& seq, const std::string& hit_name) {
  const std::string part = seq.substr(10, 50);
  std::ofstream f(path);
  f << "Query         query\nMatch_columns " << seq.size() << "\nNo_of_seqs    1 out of 1\n\n"
    << " No Hit                             Prob E-value P-value  Score    SS Cols Query HMM  Template HMM\n"
    << "  1 " << hit_name << " protein          100.0 1E-30 1E-34  200.0   0.0   50   11-60    11-60 (70)\n\n"
    << "No 1\n>" << hit_name << " protein\n"
    << "Probab=100.00  E-value=1e-30  Score=200.00  Aligned_cols=50  Identities=100%  Similarity=1.000  Sum_probs=49.0\n\n"
    << "Q query          11 " << part << "   60 (" << seq.size() << ")\n"
    << "T " << hit_name << "          11 " << part << "   60 (70)\n\nDone!\n";
}

TEST(TrainingChain, TemplatesFromPdb70HitsRespectTheReleaseDate) {
  Structure s = read_mmcif(shared("mmcifs/2q2k.cif"));
  const std::string tmp = (std::filesystem::temp_directory_path() / "fc_training_chain_hhr").string();
  std::filesystem::create_directories(tmp);
  const std::string seq = training_chain_from_mmcif(s, "A", "").sequence;
  write_self_hit_hhr(tmp + "/pdb70_hits.hhr", seq, "2Q2K_B");
  TrainingChainOptions opts;
  opts.template_mmcif_dir = shared("mmcifs");
  // 2q2k's own chain B is released on the chain's release date: dropped (no time travel).
  EXPECT_TRUE(training_chain_from_mmcif(s, "A", tmp, opts).templates.empty());
  // As if the target were released later: the hit is older and featurised.
  s.metadata.release_date = "2030-01-01";
  const TrainingChain later = training_chain_from_mmcif(s, "A", tmp, opts);
  ASSERT_EQ(later.templates.size(), 1u);
  EXPECT_EQ(later.templates[0].domain_name, "2q2k_B");
  EXPECT_EQ(later.templates[0].sequence.substr(10, 50), seq.substr(10, 50));
  // The explicit cap applies as well.
  opts.max_template_date = "2000-01-01";
  EXPECT_TRUE(training_chain_from_mmcif(s, "A", tmp, opts).templates.empty());
  std::filesystem::remove_all(tmp);
}

TEST(TrainingChain, BadInputsGiveClearErrors) {
  const Structure s = read_mmcif(shared("mmcifs/2q2k.cif"));
  const std::string missing = error_of([&] { training_chain_from_mmcif(s, "Z", ""); });
  EXPECT_NE(missing.find("no chain with author id 'Z'"), std::string::npos) << missing;
  // A non-protein chain (2q2k has ligands/water).
  std::string non_protein;
  for (const Chain& c : s.chains)
    if (!s.is_protein_chain(c) && s.find_chain_by_auth(c.auth_id) == &c) non_protein = c.auth_id;
  if (!non_protein.empty()) {
    const std::string e = error_of([&] { training_chain_from_mmcif(s, non_protein, ""); });
    EXPECT_NE(e.find("not a protein chain"), std::string::npos) << e;
  }
  // Alignments of chain A against another protein's chain: the query mismatch names the file.
  const Structure other = read_mmcif(shared("mmcifs/4zey.cif"));
  const std::string mismatch =
      error_of([&] { training_chain_from_mmcif(other, other.chains[0].auth_id, shared("2q2k_A/alignments")); });
  EXPECT_NE(mismatch.find("uniref90_hits.sto"), std::string::npos) << mismatch;
  EXPECT_NE(mismatch.find("does not match"), std::string::npos) << mismatch;
  const std::string no_dir = error_of([&] { training_chain_from_mmcif(s, "A", "/nonexistent/alignments"); });
  EXPECT_NE(no_dir.find("does not exist"), std::string::npos) << no_dir;

  // validate() catches inconsistent fields.
  TrainingChain tc = training_chain_from_mmcif(s, "A", "");
  TrainingChain bad = tc;
  bad.aatype[3] = 25;
  EXPECT_NE(error_of([&] { bad.validate(); }).find("aatype[3]"), std::string::npos);
  bad = tc;
  bad.all_atom_mask.pop_back();
  EXPECT_NE(error_of([&] { bad.validate(); }).find("all_atom_mask"), std::string::npos);
  bad = tc;
  bad.msa.msa[0] = (bad.msa.msa[0] + 1) % 20;
  EXPECT_NE(error_of([&] { bad.validate(); }).find("row 0"), std::string::npos);
  EXPECT_EQ(error_of([&] { tc.validate(); }), "");
}

}  // namespace
}  // namespace foldcore::data
