// Tiny real search databases for the tool-runner and MSA-search tests, built once per test
// process in a temporary folder laid out like AlphaFold's data_dir. Their sequences are the hits
// of query73's real alignments (../shared/data/query73), so the real tools find known homologs:
//   uniref90/uniref90.fasta                 the 56 uniref90_hits.sto sequences (ungapped)
//   mgnify/mgy_clusters_2022_05.fa          the mgnify_hits.sto sequences
//   small_bfd/bfd-first_non_consensus_sequences.fasta   the first 40 bfd_uniclust_hits.a3m rows
//   bfd/<AF's bfd name>_{a3m,hhm,cs219}     HH-suite database of the same 40 sequences (no _hhm)
//   uniref30/UniRef30_2021_03_*             HH-suite database of the uniref90 sequences (no _hhm)
//   pdb_seqres/pdb_seqres.txt               protein chains of ../shared/data/mmcifs (our mmCIF parser)
//   pdb70/pdb70_*                           HH-suite database (with _hhm) of those chains + a homolog control
//   mmseqs/uniref90*                        `mmseqs createdb` of uniref90.fasta
// Names are made file-safe ('/' and '|' become '_'), e.g. "UniRef90_D7BIZ4_1-73".
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data_pipeline/formats/a3m.h"
#include "data_pipeline/formats/fasta.h"
#include "data_pipeline/formats/mmcif_parser.h"
#include "data_pipeline/formats/stockholm.h"
#include "data_pipeline/structure/structure.h"
#include "data_pipeline/search/subprocess.h"
#include "data_pipeline/search/tool_runners.h"
#include "test_util.h"

namespace foldcore::data::search_test {

inline std::string q73(const std::string& f) { return testing::shared_dir() + "/data/query73/" + f; }

inline std::string safe_name(std::string s) {
  s = s.substr(0, s.find_first_of(" \t"));
  for (char& c : s)
    if (c == '/' || c == '|') c = '_';
  return s;
}

// Ungapped, upper-case sequences of an alignment's rows.
inline std::string ungapped(const std::string& row) {
  std::string s;
  for (char c : row)
    if (c != '-' && c != '.') s += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

inline std::vector<FastaRecord> records_from_stockholm(const std::string& path) {
  const StockholmAlignment sto = read_stockholm_alignment(path);
  std::vector<FastaRecord> out;
  for (size_t i = 1; i < sto.names.size(); ++i) out.push_back({safe_name(sto.names[i]), ungapped(sto.rows[i])});
  return out;
}

inline std::vector<HhsuiteEntry> single_sequence_entries(const std::vector<FastaRecord>& records) {
  std::vector<HhsuiteEntry> entries;
  for (const FastaRecord& r : records) {
    const std::string name = safe_name(r.description);
    entries.push_back({name, ">" + r.description + "\n" + r.sequence + "\n"});
  }
  return entries;
}

inline void write_records(const std::string& path, const std::vector<FastaRecord>& records) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  write_fasta(path, records);
}

// The databases, each built on first use (ctest runs every test in its own process, so a test
// pays only for what it uses: the HH-suite builds cost ~50 ms of CPU per entry).
class SearchTestData {
 public:
  SearchTestData() : root_("foldcore_search_test"), data_dir(root_.path()) {
    query_fasta = q73("query.fasta");
    query_sequence = read_fasta(query_fasta).at(0).sequence;
    uniref90_records = records_from_stockholm(q73("alignments/uniref90_hits.sto"));
  }

  std::string uniref90() const {
    return once(uniref90_, data_dir + "/uniref90/uniref90.fasta",
                [&](const std::string& p) { write_records(p, uniref90_records); });
  }
  std::string mgnify() const {
    return once(mgnify_, data_dir + "/mgnify/mgy_clusters_2022_05.fa",
                [](const std::string& p) { write_records(p, records_from_stockholm(q73("alignments/mgnify_hits.sto"))); });
  }
  std::string small_bfd() const {
    return once(small_bfd_, data_dir + "/small_bfd/bfd-first_non_consensus_sequences.fasta",
                [&](const std::string& p) { write_records(p, bfd_records()); });
  }
  std::string bfd() const {
    return once(bfd_, data_dir + "/bfd/bfd_metaclust_clu_complete_id30_c90_final_seq.sorted_opt", [&](const std::string& p) {
      std::filesystem::create_directories(data_dir + "/bfd");
      build_hhsuite_database({}, single_sequence_entries(bfd_records()), p, /*with_hhm=*/false);
    });
  }
  std::string uniref30() const {
    return once(uniref30_, data_dir + "/uniref30/UniRef30_2021_03", [&](const std::string& p) {
      std::filesystem::create_directories(data_dir + "/uniref30");
      build_hhsuite_database({}, single_sequence_entries(uniref90_records), p, /*with_hhm=*/false);
    });
  }
  std::string pdb_seqres() const {
    return once(pdb_seqres_, data_dir + "/pdb_seqres/pdb_seqres.txt",
                [&](const std::string& p) { write_records(p, seqres_records()); });
  }
  std::string pdb70() const {
    return once(pdb70_, data_dir + "/pdb70/pdb70", [&](const std::string& p) {
      std::filesystem::create_directories(data_dir + "/pdb70");
      std::vector<HhsuiteEntry> entries = single_sequence_entries(seqres_records());
      // Positive control: a known query73 homolog (uniref90 hit 2), so the top hit is certain.
      entries.push_back({"HOMOLOG_A", ">HOMOLOG_A control\n" + uniref90_records.at(1).sequence + "\n"});
      build_hhsuite_database({}, entries, p);
    });
  }
  std::string mmseqs_db() const {
    return once(mmseqs_, data_dir + "/mmseqs/uniref90", [&](const std::string& p) {
      std::filesystem::create_directories(data_dir + "/mmseqs");
      mmseqs_createdb({}, uniref90(), p);
    });
  }

  // pdb_seqres.txt style: ">1abc_A mol:protein length:N  TITLE", from the shared mmCIFs.
  const std::vector<FastaRecord>& seqres_records() const {
    if (seqres_.empty()) {
      for (const auto& entry : std::filesystem::directory_iterator(testing::shared_dir() + "/data/mmcifs")) {
        if (entry.path().extension() != ".cif") continue;
        const Structure s = read_mmcif(entry.path().string());
        const std::string id = entry.path().stem().string();
        for (const Chain& c : s.chains) {
          if (!s.is_protein_chain(c)) continue;
          const std::string seq = chain_sequence(s, c, SequenceSource::kSeqres);
          seqres_.push_back({id + "_" + c.auth_id + " mol:protein length:" + std::to_string(seq.size()) + "  " + id, seq});
        }
      }
    }
    return seqres_;
  }
  // The first 40 rows of bfd_uniclust_hits.a3m after the query, ungapped, names made unique.
  const std::vector<FastaRecord>& bfd_records() const {
    if (bfd_records_.empty()) {
      const Msa bfd_msa = read_a3m(q73("alignments/bfd_uniclust_hits.a3m"), 41);
      std::map<std::string, int> seen;
      for (size_t i = 1; i < bfd_msa.depth(); ++i) {
        std::string name = safe_name(bfd_msa.descriptions[i]);
        if (seen[name]++ > 0) name += "_" + std::to_string(seen[name]);
        bfd_records_.push_back({name, ungapped(bfd_msa.sequences[i])});
      }
    }
    return bfd_records_;
  }

 private:
  template <typename Build>
  static std::string once(std::string& cache, const std::string& path, Build&& build) {
    if (cache.empty()) {
      build(path);
      cache = path;
    }
    return cache;
  }
  TempDir root_;

 public:
  const std::string data_dir;
  std::string query_fasta, query_sequence;
  std::vector<FastaRecord> uniref90_records;

 private:
  mutable std::string uniref90_, mgnify_, small_bfd_, bfd_, uniref30_, pdb_seqres_, pdb70_, mmseqs_;
  mutable std::vector<FastaRecord> seqres_, bfd_records_;
};

inline const SearchTestData& search_test_data() {
  static const SearchTestData data;
  return data;
}

// Sets an environment variable for a scope (tests run single-threaded).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_, old_.c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

}  // namespace foldcore::data::search_test
