// Raw feature dict (AlphaFold's DataPipeline.process, monomer): sequence and MSA features built
// from query73's FASTA and alignments compared with DeepMind's af2_raw_features.npz (same keys,
// dtypes, shapes; sequence features and MSA rows exactly), plus bad inputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "data_pipeline/formats/a3m.h"
#include "data_pipeline/features/features.h"
#include "data_pipeline/formats/npy.h"
#include "data_pipeline/data_test_util.h"
#include "test_util.h"

namespace foldcore::data {
namespace {

namespace fs = std::filesystem;

std::string q73(const std::string& f) { return testing::shared_dir() + "/data/query73/" + f; }

// A scratch folder removed at the end of the test.
struct ScratchDir {
  fs::path path;
  ScratchDir() {
    path = fs::temp_directory_path() / ("foldcore_features_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
  std::string file(const std::string& name, const std::string& text) const {
    const std::string p = (path / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
};

void expect_same_array(const NpyArray& ours, const NpyArray& ref, const std::string& name) {
  EXPECT_EQ(ours.dtype, ref.dtype) << name << ": " << ours.dtype.descr() << " vs " << ref.dtype.descr();
  EXPECT_EQ(ours.shape, ref.shape) << name;
  EXPECT_TRUE(ours.data == ref.data) << name << ": contents differ";
}

MonomerPipelineOptions q73_options() {
  MonomerPipelineOptions o;
  o.fasta_path = q73("query.fasta");
  o.msa_dir = q73("alignments");
  return o;
}

TEST(Features, SequenceFeaturesSmall) {
  const FeatureDict f = make_sequence_features("ARXB", "my protein");
  EXPECT_EQ(f.names(), (std::vector<std::string>{"aatype", "between_segment_residues", "domain_name", "residue_index",
                                                 "seq_length", "sequence"}));
  const NpyArray& aatype = f.at("aatype");
  ASSERT_EQ(aatype.shape, (std::vector<int64_t>{4, 21}));
  const int32_t* a = aatype.as<int32_t>();
  // A → 0, R → 1, X → 20, B (not standard) → 20 (map_unknown_to_x).
  const int expected[4] = {0, 1, 20, 20};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 21; ++j) EXPECT_EQ(a[i * 21 + j], j == expected[i] ? 1 : 0) << i << "," << j;
  EXPECT_EQ(f.at("domain_name").strings(), std::vector<std::string>{"my protein"});
  EXPECT_EQ(f.at("sequence").strings(), std::vector<std::string>{"ARXB"});
  const int32_t* len = f.at("seq_length").as<int32_t>();
  const int32_t* idx = f.at("residue_index").as<int32_t>();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(len[i], 4);
    EXPECT_EQ(idx[i], i);
  }
  EXPECT_NE(error_of([] { make_sequence_features("", "x"); }), "");
  EXPECT_NE(error_of([] { make_sequence_features("AC1", "x"); }).find("'1'"), std::string::npos);
}

TEST(Features, MsaFeaturesDeduplicateAcrossMsas) {
  Msa a, b;
  a.sequences = {"ACD", "A-D"};
  a.deletion_matrix = {{0, 0, 0}, {0, 2, 0}};
  a.descriptions = {"q", "s1"};
  b.sequences = {"ACD", "W-D", "A-D"};  // the query and s1 again: dropped
  b.deletion_matrix = {{0, 0, 0}, {1, 0, 0}, {0, 0, 0}};
  b.descriptions = {"q", "s2", "s1 again"};
  const FeatureDict f = make_msa_features({&a, &b});
  EXPECT_EQ(f.names(), (std::vector<std::string>{"deletion_matrix_int", "msa", "num_alignments"}));
  ASSERT_EQ(f.at("msa").shape, (std::vector<int64_t>{3, 3}));
  const int32_t* msa = f.at("msa").as<int32_t>();
  const std::vector<int32_t> msa_v(msa, msa + 9);
  EXPECT_EQ(msa_v, (std::vector<int32_t>{0, 1, 2, 0, 21, 2, 18, 21, 2}));  // HHblits: A0 C1 D2 W18 gap21
  const int32_t* del = f.at("deletion_matrix_int").as<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(del, del + 9), (std::vector<int32_t>{0, 0, 0, 0, 2, 0, 1, 0, 0}));
  const int32_t* num = f.at("num_alignments").as<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(num, num + 3), (std::vector<int32_t>{3, 3, 3}));
  EXPECT_NE(error_of([] { make_msa_features({}); }), "");
}

TEST(Features, Query73MatchesAlphaFoldNonTemplateFeatures) {
  const MonomerPipelineResult r = run_monomer_pipeline(q73_options());
  NpzReader ref(q73("af2_raw_features.npz"));
  // AlphaFold's key order: sequence, MSA, template features.
  EXPECT_EQ(r.features.names(), ref.names());
  for (const char* name : {"aatype", "between_segment_residues", "domain_name", "residue_index", "seq_length",
                           "sequence", "deletion_matrix_int", "msa", "num_alignments"})
    expect_same_array(r.features.at(name), ref.read(name), name);
  // No template hits given: every template key with zero templates.
  EXPECT_EQ(r.features.at("template_all_atom_positions").shape, (std::vector<int64_t>{0, 73, 37, 3}));
  EXPECT_EQ(r.features.at("template_aatype").dtype, ref.read("template_aatype").dtype);
  EXPECT_EQ(r.features.at("template_sum_probs").shape, (std::vector<int64_t>{0, 1}));
  ASSERT_EQ(r.msa_files.size(), 3u);
  EXPECT_NE(r.msa_files[1].find("bfd_uniclust_hits.a3m"), std::string::npos);
}

TEST(Features, WrittenNpzRoundTrips) {
  ScratchDir dir;
  const MonomerPipelineResult r = run_monomer_pipeline(q73_options());
  const std::string out = (dir.path / "features.npz").string();
  write_features(out, r.features);
  const std::map<std::string, NpyArray> back = read_npz(out);
  ASSERT_EQ(back.size(), r.features.size());
  for (const auto& [name, array] : r.features.arrays()) expect_same_array(back.at(name), array, name);
}

// A copy of query73's alignments in a scratch folder, for the bad-input cases.
std::string copy_alignments(const ScratchDir& dir) {
  const fs::path msa = dir.path / "msas";
  fs::create_directories(msa);
  for (const char* f : {"uniref90_hits.sto", "bfd_uniclust_hits.a3m", "mgnify_hits.sto"})
    fs::copy_file(q73(std::string("alignments/") + f), msa / f);
  return msa.string();
}

TEST(Features, BadInputsNameTheFile) {
  ScratchDir dir;
  MonomerPipelineOptions o = q73_options();

  o.fasta_path = dir.file("empty.fasta", "");
  EXPECT_NE(error_of([&] { run_monomer_pipeline(o); }).find("empty.fasta"), std::string::npos);

  o.fasta_path = dir.file("digits.fasta", ">q\nMAAHK1GAEHH\n");
  EXPECT_NE(error_of([&] { run_monomer_pipeline(o); }).find("digits.fasta"), std::string::npos);

  o.fasta_path = dir.file("two.fasta", ">a\nMAAHK\n>b\nMAAHK\n");
  const std::string two = error_of([&] { run_monomer_pipeline(o); });
  EXPECT_NE(two.find("two.fasta"), std::string::npos);
  EXPECT_NE(two.find("exactly one"), std::string::npos);

  // A FASTA of another protein: the first alignment read (uniref90) does not match it.
  o.fasta_path = dir.file("other.fasta", ">other\nMKTAYIAKQRQISFVKSHFSRQ\n");
  const std::string mismatch = error_of([&] { run_monomer_pipeline(o); });
  EXPECT_NE(mismatch.find("uniref90_hits.sto"), std::string::npos) << mismatch;
  EXPECT_NE(mismatch.find("does not match the FASTA sequence"), std::string::npos) << mismatch;

  // An A3M whose query differs from the FASTA sequence (one residue changed).
  o.fasta_path = q73("query.fasta");
  o.msa_dir = copy_alignments(dir);
  const std::string a3m = (fs::path(o.msa_dir) / "bfd_uniclust_hits.a3m").string();
  {
    std::ifstream in(a3m);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t q = text.find("\nMAAHKG");
    ASSERT_NE(q, std::string::npos);
    text[q + 1] = 'W';
    std::ofstream(a3m, std::ios::binary | std::ios::trunc) << text;
  }
  const std::string a3m_err = error_of([&] { run_monomer_pipeline(o); });
  EXPECT_NE(a3m_err.find("bfd_uniclust_hits.a3m"), std::string::npos) << a3m_err;

  // Any subset of the alignment files is enough; none at all is an error naming what was looked for.
  fs::remove(a3m);
  EXPECT_EQ(run_monomer_pipeline(o).msa_files.size(), 2u);
  fs::remove(fs::path(o.msa_dir) / "uniref90_hits.sto");
  fs::remove(fs::path(o.msa_dir) / "mgnify_hits.sto");
  const std::string missing = error_of([&] { run_monomer_pipeline(o); });
  EXPECT_NE(missing.find("missing alignment file"), std::string::npos) << missing;
  EXPECT_NE(missing.find("bfd_uniclust_hits.a3m"), std::string::npos) << missing;

  // An extra alignment (an uploaded A3M) of another protein names that file.
  o.extra_alignments = {dir.file("other.a3m", ">101\nMKTAYIAKQRQ\n")};
  const std::string extra = error_of([&] { run_monomer_pipeline(o); });
  EXPECT_NE(extra.find("other.a3m"), std::string::npos) << extra;

  o.msa_dir = (dir.path / "nowhere").string();
  EXPECT_NE(error_of([&] { run_monomer_pipeline(o); }).find("nowhere"), std::string::npos);
}

// A subset of AlphaFold's files (only MGnify) and one ColabFold-style A3M (with its "#len card"
// header line) each give features on their own; the A3M alone matches the folder's BFD rows.
TEST(Features, SubsetAndSingleA3mAreAccepted) {
  ScratchDir dir;
  MonomerPipelineOptions o = q73_options();
  const std::string msa = copy_alignments(dir);
  fs::remove(fs::path(msa) / "uniref90_hits.sto");
  fs::remove(fs::path(msa) / "bfd_uniclust_hits.a3m");
  o.msa_dir = msa;
  const MonomerPipelineResult mgnify_only = run_monomer_pipeline(o);
  ASSERT_EQ(mgnify_only.msa_files.size(), 1u);
  EXPECT_GT(mgnify_only.features.at("msa").shape.at(0), 1);

  std::ifstream in(q73("alignments/bfd_uniclust_hits.a3m"));
  const std::string bfd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string colabfold = dir.file("colabfold.a3m", "#73\t1\n" + bfd);
  o.msa_dir = "";
  o.extra_alignments = {colabfold};
  const MonomerPipelineResult a3m_only = run_monomer_pipeline(o);
  EXPECT_EQ(a3m_only.msa_files, std::vector<std::string>{colabfold});
  EXPECT_EQ(a3m_only.features.at("msa").shape.at(0), static_cast<int64_t>(read_a3m(q73("alignments/bfd_uniclust_hits.a3m"), 0).sequences.size()));
}

}  // namespace
}  // namespace foldcore::data
