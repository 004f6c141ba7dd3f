// End-to-end tests of `foldcore predict`: the program is run as a subprocess (it sits at
// <build>/foldcore; this test at <build>/tests/apps_test_predict) and every output file is
// re-read with independent readers: PDB/mmCIF with the data-pipeline parsers, JSON with
// nlohmann-json, npz with NpzReader, PNG with a decoder written here (chunk CRCs, inflate, sizes).
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

// The output writers and the PNG plotter live in the foldcore program, not in libfoldcore: their
// sources are compiled into this test directly for the unit tests below.
#include "apps/png_plot.h"
#include "apps/predict_outputs.h"
#include "apps_test_util.h"
#include "data_pipeline/formats/mmcif_parser.h"
#include "data_pipeline/formats/npy.h"
#include "data_pipeline/formats/pdb_reader.h"
#include "test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using foldcore::apps_test::foldcore_binary;
using foldcore::apps_test::read_file;

// A scratch folder per test.
struct TempDir : foldcore::apps_test::TempDir {
  TempDir() : foldcore::apps_test::TempDir("test_predict") {}
};

std::string tiny_config() { return std::string(FOLDCORE_SOURCE_DIR) + "/configs/model/tiny.yaml"; }

void write_file(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << s;
}

struct RunResult {
  int rc = -1;
  std::string output;  // stdout + stderr
};

RunResult run_foldcore(const std::string& args, const fs::path& dir) {
  const fs::path log = dir / "run.log";
  const std::string cmd = foldcore_binary() + " predict " + args + " > " + log.string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  RunResult r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.output = read_file(log);
  return r;
}

uint32_t be32(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) | (uint32_t(uint8_t(s[at + 2])) << 8) |
         uint32_t(uint8_t(s[at + 3]));
}

// Decodes an 8-bit RGB, non-interlaced PNG: checks the signature, every chunk's CRC, IHDR, the
// inflated size, the filter bytes; returns the number of distinct colours and the tEXt entries.
struct DecodedPng {
  uint32_t width = 0, height = 0;
  size_t distinct_colours = 0;
  std::vector<uint8_t> rgb;  // row-major
  std::map<std::string, std::string> text;
};

DecodedPng decode_png(const std::string& file) {
  DecodedPng d;
  EXPECT_EQ(file.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::string idat;
  size_t at = 8;
  bool saw_end = false;
  while (at + 12 <= file.size()) {
    const uint32_t len = be32(file, at);
    const std::string type = file.substr(at + 4, 4);
    const std::string data = file.substr(at + 8, len);
    const uint32_t crc = be32(file, at + 8 + len);
    uLong c = crc32(0L, Z_NULL, 0);
    c = crc32(c, reinterpret_cast<const Bytef*>(file.data() + at + 4), 4 + len);
    EXPECT_EQ(crc, static_cast<uint32_t>(c)) << "CRC of chunk " << type;
    if (type == "IHDR") {
      d.width = be32(data, 0);
      d.height = be32(data, 4);
      EXPECT_EQ(data.substr(8), std::string("\x08\x02\x00\x00\x00", 5));
    } else if (type == "IDAT") {
      idat += data;
    } else if (type == "tEXt") {
      const size_t nul = data.find('\0');
      d.text[data.substr(0, nul)] = data.substr(nul + 1);
    } else if (type == "IEND") {
      saw_end = true;
    }
    at += 12 + len;
  }
  EXPECT_TRUE(saw_end);
  EXPECT_EQ(at, file.size());
  uLongf raw_size = static_cast<uLongf>(d.height) * (1 + 3 * d.width);
  std::vector<uint8_t> raw(raw_size + 1);
  uLongf got = raw.size();
  EXPECT_EQ(uncompress(raw.data(), &got, reinterpret_cast<const Bytef*>(idat.data()), idat.size()), Z_OK);
  EXPECT_EQ(got, raw_size);
  std::set<uint32_t> colours;
  for (uint32_t y = 0; y < d.height && got == raw_size; ++y) {
    const uint8_t* row = &raw[y * (1 + 3 * d.width)];
    EXPECT_EQ(row[0], 0) << "filter type of row " << y;
    for (uint32_t x = 0; x < d.width; ++x)
      colours.insert((uint32_t(row[1 + 3 * x]) << 16) | (uint32_t(row[2 + 3 * x]) << 8) | row[3 + 3 * x]);
    d.rgb.insert(d.rgb.end(), row + 1, row + 1 + 3 * d.width);
  }
  d.distinct_colours = colours.size();
  return d;
}

const std::string kSeq = "MKTAYIAKQRQISFVKSHFSRQ";  // 22 residues

// Checks every output of one target; returns the mean pLDDT per model from the npz files.
// full_arrays: result npz written with --result_arrays full (the default) or summary.
void check_target_outputs(const fs::path& dir, const std::string& sequence, const std::vector<std::string>& models,
                          bool random_params, bool ptm, int64_t msa_rows_at_least, bool full_arrays = true) {
  const size_t n = sequence.size();
  ASSERT_TRUE(fs::exists(dir / "done")) << dir;
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".predict_staging"), std::string::npos) << e.path();
  const std::string warn = "RANDOM PARAMETERS";
  auto has_warning = [&](const std::string& s) { return s.find(warn) != std::string::npos; };

  std::map<std::string, double> mean_plddt;
  for (const std::string& m : models) {
    // result npz
    foldcore::data::NpzReader npz((dir / ("result_" + m + ".npz")).string());
    const auto plddt = npz.read("plddt");
    ASSERT_EQ(plddt.shape, (std::vector<int64_t>{int64_t(n)}));
    EXPECT_EQ(npz.read("final_atom_positions").shape, (std::vector<int64_t>{int64_t(n), 37, 3}));
    if (full_arrays) {
      const auto dgram = npz.read("distogram_logits");
      ASSERT_EQ(dgram.shape.size(), 3u);
      EXPECT_EQ(npz.read("distogram_bin_edges").shape, (std::vector<int64_t>{dgram.shape[2] - 1}));
    } else {
      for (const char* key : {"distogram_logits", "distogram_bin_edges", "masked_msa_logits",
                              "experimentally_resolved_logits", "aligned_confidence_probs"})
        EXPECT_FALSE(npz.contains(key)) << key;
    }
    EXPECT_EQ(npz.contains("warning"), random_params);
    EXPECT_EQ(npz.contains("predicted_aligned_error"), ptm);
    double sum = 0;
    for (int64_t i = 0; i < plddt.numel(); ++i) {
      const float v = plddt.as<float>()[i];
      EXPECT_TRUE(v >= 0 && v <= 100) << v;
      sum += v;
    }
    mean_plddt[m] = sum / n;
    if (ptm) {
      EXPECT_EQ(npz.read("predicted_aligned_error").shape, (std::vector<int64_t>{int64_t(n), int64_t(n)}));
      const float t = npz.read("ptm").as<float>()[0];
      EXPECT_TRUE(t >= 0 && t <= 1) << t;
    }
    // confidence json
    const json conf = json::parse(read_file(dir / ("confidence_" + m + ".json")));
    ASSERT_EQ(conf["residueNumber"].size(), n);
    ASSERT_EQ(conf["confidenceScore"].size(), n);
    ASSERT_EQ(conf["confidenceCategory"].size(), n);
    EXPECT_EQ(conf.contains("warning"), random_params);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(conf["residueNumber"][i].get<int>(), int(i) + 1);
      const double s = conf["confidenceScore"][i].get<double>();
      EXPECT_NEAR(s, plddt.as<float>()[i], 0.006);
      const std::string cat = conf["confidenceCategory"][i];
      EXPECT_EQ(cat, s < 50 ? "D" : s < 70 ? "L" : s < 90 ? "M" : "H");
    }
    // structures: PDB and mmCIF re-read; B-factor = pLDDT, CA = final_atom_positions[:, 1]
    const auto pos = npz.read("final_atom_positions");
    for (const std::string ext : {".pdb", ".cif"}) {
      const fs::path p = dir / ("unrelaxed_" + m + "_pred_0" + ext);
      const std::string text = read_file(p);
      EXPECT_EQ(has_warning(text), random_params) << p;
      const foldcore::data::Structure s =
          ext == std::string(".pdb") ? foldcore::data::read_pdb(p.string()) : foldcore::data::read_mmcif(p.string());
      ASSERT_EQ(s.chains.size(), 1u) << p;
      ASSERT_EQ(s.chains[0].residues.size(), n) << p;
      for (size_t i = 0; i < n; ++i) {
        const auto& res = s.chains[0].residues[i];
        const auto* ca = res.find_atom("CA");
        ASSERT_NE(ca, nullptr);
        EXPECT_NEAR(ca->b_factor, plddt.as<float>()[i], 0.006);
        EXPECT_NEAR(ca->x, pos.as<float>()[(i * 37 + 1) * 3], 6e-4);
        EXPECT_NEAR(ca->z, pos.as<float>()[(i * 37 + 1) * 3 + 2], 6e-4);
      }
    }
    if (ptm) {
      const json pae = json::parse(read_file(dir / ("pae_" + m + ".json")));
      ASSERT_TRUE(pae.is_array() && pae.size() == 1);
      ASSERT_EQ(pae[0]["predicted_aligned_error"].size(), n);
      ASSERT_EQ(pae[0]["predicted_aligned_error"][0].size(), n);
      EXPECT_NEAR(pae[0]["max_predicted_aligned_error"].get<double>(), 31.75, 1e-4);
      const DecodedPng png = decode_png(read_file(dir / ("pae_" + m + ".png")));
      EXPECT_EQ(png.width, 620u);
      EXPECT_EQ(png.height, 540u);
      EXPECT_GT(png.distinct_colours, 5u);
      EXPECT_EQ(png.text.count("Warning"), random_params ? 1u : 0u);
    } else {
      EXPECT_FALSE(fs::exists(dir / ("pae_" + m + ".json")));
    }
  }
  // ranking
  const json rank = json::parse(read_file(dir / "ranking_debug.json"));
  ASSERT_TRUE(rank.contains("plddts"));
  ASSERT_EQ(rank["order"].size(), models.size());
  for (size_t r = 0; r < models.size(); ++r) {
    const std::string m = rank["order"][r];
    EXPECT_NEAR(rank["plddts"][m].get<double>(), mean_plddt.at(m), 1e-3);
    if (r > 0) {
      EXPECT_GE(rank["plddts"][std::string(rank["order"][r - 1])].get<double>(), rank["plddts"][m].get<double>());
    }
    // ranked_r is the r-th model's structure
    EXPECT_EQ(read_file(dir / ("ranked_" + std::to_string(r) + ".pdb")),
              read_file(dir / ("unrelaxed_" + m + "_pred_0.pdb")));
    EXPECT_TRUE(fs::exists(dir / ("ranked_" + std::to_string(r) + ".cif")));
  }
  const json timings = json::parse(read_file(dir / "timings.json"));
  EXPECT_TRUE(timings.contains("features"));
  for (const std::string& m : models) {
    EXPECT_GE(timings["predict_and_compile_" + m].get<double>(), 0.0);
    EXPECT_TRUE(timings.contains("process_features_" + m));
  }
  const DecodedPng plddt_png = decode_png(read_file(dir / "plddt.png"));
  EXPECT_EQ(plddt_png.width, 800u);
  EXPECT_EQ(plddt_png.height, 480u);
  EXPECT_GT(plddt_png.distinct_colours, 5u);
  const DecodedPng cov = decode_png(read_file(dir / "msa_coverage.png"));
  EXPECT_EQ(cov.width, 800u);
  EXPECT_GT(cov.distinct_colours, msa_rows_at_least > 1 ? 5u : 2u);
  EXPECT_EQ(has_warning(read_file(dir / "done")), random_params);
}

std::set<std::string> files_in(const fs::path& dir) {
  std::set<std::string> s;
  if (fs::exists(dir))
    for (const auto& e : fs::recursive_directory_iterator(dir)) s.insert(fs::relative(e.path(), dir).string());
  return s;
}

}  // namespace

TEST(Predict, TinyRandomParamsTwoModelsSingleSequence) {
  TempDir tmp;
  write_file(tmp.path() / "in" / "prot.fasta", ">prot test\n" + kSeq.substr(0, 11) + "\n" + kSeq.substr(11) + "\n");
  const fs::path out = tmp.path() / "out";
  const RunResult r = run_foldcore("--fasta_paths " + (tmp.path() / "in" / "prot.fasta").string() + " --output_dir " +
                                       out.string() + " --model_names model_1_ptm,model_2_ptm --random_params 7" +
                                       " --model_config " + tiny_config() + " --num_recycles 1",
                                   tmp.path());
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("RANDOM PARAMETERS"), std::string::npos);
  check_target_outputs(out / "prot", kSeq, {"model_1_ptm", "model_2_ptm"}, true, true, 1);
  for (const std::string m : {"model_1_ptm", "model_2_ptm"}) {  // AlphaFold's full result arrays
    foldcore::data::NpzReader npz((out / "prot" / ("result_" + m + ".npz")).string());
    for (const char* key : {"masked_msa_logits", "experimentally_resolved_logits", "aligned_confidence_probs",
                            "predicted_lddt_logits"})
      EXPECT_TRUE(npz.contains(key)) << m << " " << key;
    EXPECT_EQ(npz.read("aligned_confidence_probs").shape, (std::vector<int64_t>{22, 22, 64}));
  }

  // A second run skips the finished target and leaves its files untouched.
  const auto before = fs::last_write_time(out / "prot" / "ranked_0.pdb");
  const RunResult again = run_foldcore("--fasta_paths " + (tmp.path() / "in" / "prot.fasta").string() +
                                           " --output_dir " + out.string() + " --random_params 7 --model_config " +
                                           tiny_config(),
                                       tmp.path());
  ASSERT_EQ(again.rc, 0) << again.output;
  EXPECT_NE(again.output.find("skipping"), std::string::npos) << again.output;
  EXPECT_EQ(fs::last_write_time(out / "prot" / "ranked_0.pdb"), before);
}

TEST(Predict, SummaryResultArraysLeaveOutThePairSizedArrays) {
  TempDir tmp;
  write_file(tmp.path() / "in" / "prot.fasta", ">prot test\n" + kSeq + "\n");
  const fs::path out = tmp.path() / "out";
  const std::string common = "--fasta_paths " + (tmp.path() / "in" / "prot.fasta").string() + " --random_params 7" +
                             " --model_config " + tiny_config() + " --num_recycles 0";
  const RunResult r = run_foldcore(common + " --output_dir " + out.string() + " --result_arrays summary", tmp.path());
  ASSERT_EQ(r.rc, 0) << r.output;
  check_target_outputs(out / "prot", kSeq, {"model_1_ptm"}, true, true, 1, /*full_arrays=*/false);
  // The same prediction: the structure and the confidence are those of the full run.
  const fs::path full = tmp.path() / "full";
  ASSERT_EQ(run_foldcore(common + " --output_dir " + full.string(), tmp.path()).rc, 0);
  EXPECT_EQ(read_file(out / "prot" / "ranked_0.pdb"), read_file(full / "prot" / "ranked_0.pdb"));
  EXPECT_EQ(read_file(out / "prot" / "pae_model_1_ptm.json"), read_file(full / "prot" / "pae_model_1_ptm.json"));
  // Anything else is refused before any output is written.
  const fs::path bad = tmp.path() / "bad";
  const RunResult wrong = run_foldcore(common + " --output_dir " + bad.string() + " --result_arrays some", tmp.path());
  EXPECT_NE(wrong.rc, 0);
  EXPECT_NE(wrong.output.find("--result_arrays must be full or summary"), std::string::npos) << wrong.output;
  EXPECT_FALSE(fs::exists(bad / "prot" / "done"));
}

TEST(Predict, PrecomputedMsasQuery73TinyModel) {
  TempDir tmp;
  const fs::path out = tmp.path() / "out";
  fs::create_directories(out / "query");
  fs::copy(std::string(FOLDCORE_SOURCE_DIR) + "/examples/query73/msas", out / "query" / "msas");
  const std::string fasta = std::string(FOLDCORE_SOURCE_DIR) + "/examples/query73/query.fasta";
  const RunResult r = run_foldcore("--fasta_paths " + fasta + " --output_dir " + out.string() +
                                       " --use_precomputed_msas --random_params 1 --model_config " + tiny_config() +
                                       " --num_recycles 0 --ranking_by ptm",
                                   tmp.path());
  ASSERT_EQ(r.rc, 0) << r.output;
  const json rank = json::parse(read_file(out / "query" / "ranking_debug.json"));
  EXPECT_TRUE(rank.contains("ptm"));
  EXPECT_FALSE(rank.contains("plddts"));
  const std::string seq = "MAAHKGAEHHHKAAEHHEQAAKHHHAAAEHHEKGEHEQAAHHADTAYAHHKHAEEHAAQAAKHDAEHHAPKPH";
  EXPECT_TRUE(fs::exists(out / "query" / "msa_coverage.png"));
  EXPECT_TRUE(fs::exists(out / "query" / "pae_model_1_ptm.json"));
  EXPECT_EQ(foldcore::data::read_pdb((out / "query" / "ranked_0.pdb").string()).chains[0].residues.size(), seq.size());
}

// Template hits from msas/pdb70_hits.hhr featurised from the shared mmCIFs: 7 of query73's hits
// have their mmCIF there (1hf9 and 5kc1 do not); the run reports each hit, and the templates
// change the prediction (the reference parameters, unlike random ones with AlphaFold's zero
// initialisations, make the output depend on the template stack).
TEST(Predict, TemplatesFromHhsearchHitsAndMmcifDir) {
  const std::string ref = foldcore::testing::shared_dir() + "/af2/ref/params.npz";
  if (!fs::exists(ref)) GTEST_SKIP() << ref << " not available";
  TempDir tmp;
  fs::create_directories(tmp.path() / "data" / "params");
  fs::create_symlink(ref, tmp.path() / "data" / "params" / "params_model_1_ptm.npz");
  const std::string fasta = std::string(FOLDCORE_SOURCE_DIR) + "/examples/query73/query.fasta";
  const std::string mmcifs = foldcore::testing::shared_dir() + "/data/mmcifs";
  auto run = [&](const std::string& name, const std::string& extra) {
    const fs::path out = tmp.path() / name;
    fs::create_directories(out / "query");
    fs::copy(std::string(FOLDCORE_SOURCE_DIR) + "/examples/query73/msas", out / "query" / "msas");
    const RunResult r = run_foldcore("--fasta_paths " + fasta + " --output_dir " + out.string() +
                                         " --use_precomputed_msas --data_dir " + (tmp.path() / "data").string() +
                                         " --num_recycles 0" + extra,
                                     tmp.path());
    EXPECT_EQ(r.rc, 0) << r.output;
    return std::make_pair(r.output, json::parse(read_file(out / "query" / "ranking_debug.json")));
  };
  const auto [log, with] = run("with", " --template_mmcif_dir " + mmcifs + " --max_template_date 2021-12-20");
  for (const char* used : {"3u8v_A: used", "2crb_A: used", "4zey_A: used", "1psm_A: used", "3zee_A: used",
                           "4i6p_A: used", "2q2k_A: used"})
    EXPECT_NE(log.find(used), std::string::npos) << used << "\n" << log;
  EXPECT_NE(log.find("1hf9_B: missing mmCIF"), std::string::npos) << log;
  const auto [log2, without] = run("without", "");
  EXPECT_NE(with["plddts"]["model_1_ptm"].get<double>(), without["plddts"]["model_1_ptm"].get<double>());
  // Templates need the precomputed hits.
  const fs::path bad = tmp.path() / "bad";
  fs::create_directories(bad);
  const RunResult no_msas = run_foldcore("--fasta_paths " + fasta + " --output_dir " + bad.string() +
                                             " --template_mmcif_dir " + mmcifs + " --data_dir " +
                                             (tmp.path() / "data").string(),
                                         tmp.path());
  EXPECT_NE(no_msas.rc, 0);
  EXPECT_NE(no_msas.output.find("--use_precomputed_msas"), std::string::npos) << no_msas.output;
}

TEST(Predict, ReferenceParamsFromDataDir) {
  const std::string ref = foldcore::testing::shared_dir() + "/af2/ref/params.npz";
  if (!fs::exists(ref)) GTEST_SKIP() << ref << " not available";
  TempDir tmp;
  fs::create_directories(tmp.path() / "data" / "params");
  fs::create_symlink(ref, tmp.path() / "data" / "params" / "params_model_1_ptm.npz");
  write_file(tmp.path() / "in" / "ref.fasta", ">ref\n" + kSeq.substr(0, 16) + "\n");
  const fs::path out = tmp.path() / "out";
  const RunResult r = run_foldcore("--fasta_paths " + (tmp.path() / "in" / "ref.fasta").string() + " --output_dir " +
                                       out.string() + " --data_dir " + (tmp.path() / "data").string() +
                                       " --num_recycles 1",
                                   tmp.path());
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(r.output.find("RANDOM PARAMETERS"), std::string::npos);
  check_target_outputs(out / "ref", kSeq.substr(0, 16), {"model_1_ptm"}, false, true, 1);
}

// Every bad input: non-zero exit, an error naming the file, nothing new in the target folder.
TEST(Predict, BadInputsFailCleanly) {
  TempDir tmp;
  const fs::path out = tmp.path() / "out";
  auto expect_failure = [&](const std::string& args, const std::string& names, const fs::path& target_dir) {
    const std::set<std::string> before = files_in(target_dir);
    const RunResult r = run_foldcore(args + " --output_dir " + out.string(), tmp.path());
    EXPECT_NE(r.rc, 0) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("error"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(names), std::string::npos) << "error should name " << names << ":\n" << r.output;
    EXPECT_EQ(files_in(target_dir), before) << args;
  };
  const std::string tiny = " --random_params 3 --model_config " + tiny_config();

  write_file(tmp.path() / "empty.fasta", "");
  expect_failure("--fasta_paths " + (tmp.path() / "empty.fasta").string() + tiny, "empty.fasta", out / "empty");
  write_file(tmp.path() / "nohdr.fasta", ">x\n\n");
  expect_failure("--fasta_paths " + (tmp.path() / "nohdr.fasta").string() + tiny, "nohdr.fasta", out / "nohdr");
  write_file(tmp.path() / "digits.fasta", ">x\nMKT1AYI\n");
  expect_failure("--fasta_paths " + (tmp.path() / "digits.fasta").string() + tiny, "digits.fasta", out / "digits");
  write_file(tmp.path() / "two.fasta", ">a\nMKTA\n>b\nMKTA\n");
  expect_failure("--fasta_paths " + (tmp.path() / "two.fasta").string() + tiny, "two.fasta", out / "two");

  // An A3M whose query row is not the FASTA sequence.
  const fs::path qdir = out / "query";
  fs::create_directories(qdir);
  fs::copy(std::string(FOLDCORE_SOURCE_DIR) + "/examples/query73/msas", qdir / "msas");
  fs::permissions(qdir / "msas", fs::perms::owner_all, fs::perm_options::add);
  write_file(tmp.path() / "query.fasta", ">query\nMAAHKGAEHHHKAAEHHEQAAKHHHAAAEHHEKGEHEQAAHHADTAYAHHKHAEEHAAQAAKHDAEHHAPKPW\n");
  expect_failure("--fasta_paths " + (tmp.path() / "query.fasta").string() + " --use_precomputed_msas" + tiny, "msas",
                 qdir);

  // Parameter files: truncated, and a foreign .npz.
  write_file(tmp.path() / "ok.fasta", ">ok\nMKTAYIAKQR\n");
  const std::string ref = foldcore::testing::shared_dir() + "/af2/ref/params.npz";
  const fs::path data = tmp.path() / "data";
  fs::create_directories(data / "params");
  const fs::path params = data / "params" / "params_model_1_ptm.npz";
  if (fs::exists(ref)) {
    const std::string bytes = read_file(ref);
    write_file(params, bytes.substr(0, bytes.size() / 2));
    expect_failure("--fasta_paths " + (tmp.path() / "ok.fasta").string() + " --data_dir " + data.string(),
                   "params_model_1_ptm.npz", out / "ok");
  }
  foldcore::data::write_npz(params.string(), {{"foo", foldcore::data::NpyArray::from_f32({1, 2, 3}, {3})}});
  expect_failure("--fasta_paths " + (tmp.path() / "ok.fasta").string() + " --data_dir " + data.string(),
                 "params_model_1_ptm.npz", out / "ok");
  // Missing params file.
  expect_failure("--fasta_paths " + (tmp.path() / "ok.fasta").string() + " --data_dir " + data.string() +
                     " --model_names model_3",
                 "params_model_3.npz", out / "ok");
  EXPECT_FALSE(fs::exists(out / "ok" / "done"));
}

// ------------------------------------------------------------------------- unit tests

using foldcore::apps::ModelPrediction;
using foldcore::apps::TargetOutputs;

TEST(PredictPng, EncodeDecodeRoundTripExactPixels) {
  foldcore::apps::plot::Canvas c(37, 23);
  for (int y = 0; y < 23; ++y)
    for (int x = 0; x < 37; ++x) c.set(x, y, {uint8_t(x * 7), uint8_t(y * 11), uint8_t((x * y) & 255)});
  c.line(0, 0, 36, 22, {1, 2, 3}, 3);
  c.text(2, 2, "PAE 0.5", {9, 9, 9});
  const DecodedPng d = decode_png(foldcore::apps::plot::encode_png(c, {{"Warning", "test"}}));
  ASSERT_EQ(d.width, 37u);
  ASSERT_EQ(d.height, 23u);
  EXPECT_EQ(d.text.at("Warning"), "test");
  ASSERT_EQ(d.rgb, c.pixels());
  // Corrupting one byte of a chunk breaks its CRC.
  std::string bad = foldcore::apps::plot::encode_png(c);
  bad[45] = static_cast<char>(bad[45] ^ 0x55);  // inside the IDAT data (IDAT starts at byte 33)
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    decode_png(bad);
  }
  EXPECT_GT(failures.size(), 0);
}

TEST(PredictPng, PlotsHaveContent) {
  namespace plot = foldcore::apps::plot;
  const plot::Canvas p = plot::plot_plddt({{"a", {10, 60, 95, 80}}, {"b", {30, 40, 50, 60}}}, "pLDDT");
  std::set<uint32_t> colours;
  for (size_t i = 0; i < p.pixels().size(); i += 3)
    colours.insert((uint32_t(p.pixels()[i]) << 16) | (uint32_t(p.pixels()[i + 1]) << 8) | p.pixels()[i + 2]);
  EXPECT_GT(colours.size(), 6u);  // background, 4 bands, 2 lines, text
  std::vector<float> pae(9 * 9);
  for (int i = 0; i < 9; ++i)
    for (int j = 0; j < 9; ++j) pae[i * 9 + j] = std::abs(i - j) * 3.0f;
  const plot::Canvas h = plot::plot_pae(pae, 9, 31.75f, "PAE");
  // The diagonal (error 0) is the darkest green; the far corner (24 Å) much lighter.
  EXPECT_EQ(h.at(75, 45), plot::colormap_pae(0));
  EXPECT_EQ(h.at(515, 45), plot::colormap_pae(24.0f / 31.75f));
  EXPECT_THROW(plot::plot_pae(pae, 8, 31.75f, "x"), foldcore::Error);
  EXPECT_THROW(plot::plot_msa_coverage({0, 1, 2}, 2, 2, "x"), foldcore::Error);
}

namespace {

// A synthetic prediction: CA on a helix-like curve, N/C/O nearby, pLDDT from `base`.
ModelPrediction fake_model(const std::string& name, size_t n, float base, bool pae) {
  ModelPrediction m;
  m.model_name = name;
  m.final_atom_positions.assign(n * 37 * 3, 0.0f);
  m.final_atom_mask.assign(n * 37, 0.0f);
  for (size_t i = 0; i < n; ++i) {
    m.plddt.push_back(std::fmod(base + 7.3f * i, 100.0f));
    for (int a = 0; a < 4; ++a) {  // N, CA, C, CB
      m.final_atom_mask[i * 37 + a] = 1;
      m.final_atom_positions[(i * 37 + a) * 3 + 0] = 2.3f * std::cos(1.7f * i) + 0.5f * a;
      m.final_atom_positions[(i * 37 + a) * 3 + 1] = 2.3f * std::sin(1.7f * i);
      m.final_atom_positions[(i * 37 + a) * 3 + 2] = 1.5f * i;
    }
  }
  m.result_arrays.emplace_back("plddt", foldcore::data::NpyArray::from_f32(m.plddt, {int64_t(n)}));
  m.result_arrays.emplace_back("final_atom_positions",
                               foldcore::data::NpyArray::from_f32(m.final_atom_positions, {int64_t(n), 37, 3}));
  m.result_arrays.emplace_back("distogram_logits",
                               foldcore::data::NpyArray::from_f32(std::vector<float>(n * n * 4, 0.f), {int64_t(n), int64_t(n), 4}));
  m.result_arrays.emplace_back("distogram_bin_edges",
                               foldcore::data::NpyArray::from_f32(foldcore::apps::distogram_bin_edges(4, 2.f, 8.f), {3}));
  if (pae) {
    for (size_t i = 0; i < n * n; ++i) m.predicted_aligned_error.push_back(0.37f * (i % 50));
    m.max_predicted_aligned_error = 31.75f;
    m.ptm = 0.1 + base / 1000;
    m.result_arrays.emplace_back("predicted_aligned_error",
                                 foldcore::data::NpyArray::from_f32(m.predicted_aligned_error, {int64_t(n), int64_t(n)}));
    m.result_arrays.emplace_back("ptm", foldcore::data::NpyArray::from_f32({float(m.ptm)}, {}));
  }
  return m;
}

}  // namespace

TEST(PredictOutputs, JsonFormats) {
  namespace fa = foldcore::apps;
  const json c = json::parse(fa::confidence_json({49.994f, 50.0f, 69.99f, 70.0f, 89.99f, 90.0f}));
  EXPECT_EQ(c["confidenceCategory"], json({"D", "L", "L", "M", "M", "H"}));
  EXPECT_EQ(c["residueNumber"], json({1, 2, 3, 4, 5, 6}));
  EXPECT_DOUBLE_EQ(c["confidenceScore"][0].get<double>(), 49.99);
  EXPECT_FALSE(c.contains("warning"));
  const json p = json::parse(fa::pae_json({0.04f, 1.26f, 2.0f, 31.75f}, 31.75f, "W"));
  EXPECT_EQ(p[0]["predicted_aligned_error"], json::parse("[[0.0,1.3],[2.0,31.8]]"));
  EXPECT_EQ(p[0]["warning"], "W");
  EXPECT_THROW(fa::pae_json({1, 2, 3}, 31.75f), foldcore::Error);
  const std::vector<float> edges = fa::distogram_bin_edges(64, 2.3125f, 21.6875f);
  ASSERT_EQ(edges.size(), 63u);
  EXPECT_FLOAT_EQ(edges[1] - edges[0], 0.3125f);
  EXPECT_FLOAT_EQ(edges.back(), 21.6875f);

  TargetOutputs t;
  t.sequence = "ACDEFG";
  t.models = {fake_model("m1", 6, 40, true), fake_model("m2", 6, 60, false), fake_model("m3", 6, 60, true)};
  const json r = json::parse(fa::ranking_debug_json(t));
  EXPECT_EQ(r["order"][0], "m2");  // equal mean pLDDT: input order kept
  EXPECT_EQ(r["order"][1], "m3");
  EXPECT_EQ(r["order"][2], "m1");
  t.ranking_by = "ptm";
  EXPECT_THROW(fa::ranking_debug_json(t), foldcore::Error);  // m2 has no pTM
  t.models.erase(t.models.begin() + 1);
  const json rp = json::parse(fa::ranking_debug_json(t));
  EXPECT_EQ(rp["order"], json({"m3", "m1"}));
  EXPECT_TRUE(rp.contains("ptm"));
}

TEST(PredictOutputs, WriteTargetAllFilesAndFailureLeavesNothing) {
  TempDir tmp;
  TargetOutputs t;
  t.target = "fake";
  t.sequence = "MKTAYIAKQRQI";
  t.msa = std::vector<int32_t>(3 * 12, 1);
  t.msa[12 + 4] = 21;
  t.msa_rows = 3;
  t.models = {fake_model("model_1_ptm", 12, 20, true), fake_model("model_2_ptm", 12, 25, true)};  // means 51.8, 56.8
  t.timings = {{"features", 0.5}};
  t.warning = "RANDOM PARAMETERS (unit test)";
  for (const auto& m : t.models) {
    t.timings.emplace_back("process_features_" + m.model_name, 0.1);
    t.timings.emplace_back("predict_and_compile_" + m.model_name, 1.0);
  }
  const fs::path dir = tmp.path() / "fake";
  fs::create_directories(dir);
  write_file(dir / "keep.txt", "previous");
  foldcore::apps::write_target_outputs(dir.string(), t);
  check_target_outputs(dir, t.sequence, {"model_1_ptm", "model_2_ptm"}, true, true, 3);
  EXPECT_EQ(read_file(dir / "keep.txt"), "previous");
  EXPECT_EQ(json::parse(read_file(dir / "ranking_debug.json"))["order"][0], "model_2_ptm");

  // A failure in the middle (a model whose arrays do not match the sequence): nothing is written.
  const fs::path dir2 = tmp.path() / "broken";
  fs::create_directories(dir2);
  write_file(dir2 / "keep.txt", "previous");
  t.models.push_back(fake_model("model_3", 5, 10, false));
  EXPECT_THROW(foldcore::apps::write_target_outputs(dir2.string(), t), foldcore::Error);
  EXPECT_EQ(files_in(dir2), std::set<std::string>{"keep.txt"});
}
