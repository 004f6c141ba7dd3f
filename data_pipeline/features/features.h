// AlphaFold2's raw (monomer) feature dict, as DataPipeline.process builds it before the input
// pipeline: sequence features, MSA features and template features, with AlphaFold's key names,
// key order, shapes and dtypes (checked against DeepMind's output for query73):
//
//   aatype                    [N,21]  int32   one-hot, restype order ARNDCQEGHILKMFPSTWYV + X
//   between_segment_residues  [N]     int32   zeros
//   domain_name               [1]     bytes   FASTA description
//   residue_index             [N]     int32   0..N-1
//   seq_length                [N]     int32   N repeated
//   sequence                  [1]     bytes   the query sequence
//   deletion_matrix_int       [S,N]   int32   deletions before each column
//   msa                       [S,N]   int32   HHblits codes (A0 C1 D2 ... Y19, X20, gap 21)
//   num_alignments            [N]     int32   S repeated
//   template_*                see templates.h
//
// Bytes features are NumPy fixed-width 'S' arrays (AlphaFold keeps Python bytes objects in
// object arrays; an .npz cannot hold those without pickling).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data_pipeline/formats/msa.h"
#include "data_pipeline/formats/npy.h"
#include "data_pipeline/features/templates.h"

namespace foldcore::data {

// An ordered name → array map (the order is the .npz entry order).
class FeatureDict {
 public:
  // Adds `name`, or replaces the array of an existing `name` in place.
  void set(const std::string& name, NpyArray array);
  bool contains(const std::string& name) const;
  // Throws foldcore::Error naming the missing feature.
  const NpyArray& at(const std::string& name) const;
  // Appends every array of `other` (replacing same-named ones).
  void update(const FeatureDict& other);
  const std::vector<std::pair<std::string, NpyArray>>& arrays() const { return arrays_; }
  std::vector<std::string> names() const;
  size_t size() const { return arrays_.size(); }

 private:
  std::vector<std::pair<std::string, NpyArray>> arrays_;
};

// AlphaFold's make_sequence_features. `sequence` must be upper-case protein letters; letters
// outside the 20 standard ones become X (index 20) in aatype. Throws on an empty sequence or a
// character that is not an upper-case letter.
FeatureDict make_sequence_features(const std::string& sequence, const std::string& description);

// AlphaFold's make_msa_features: the MSAs merged in the given order with duplicate aligned
// sequences removed (first occurrence kept). Throws when no MSA is given, the first is empty, or
// the column counts differ.
FeatureDict make_msa_features(const std::vector<const Msa*>& msas);

// Template features when there are no template hits: every template key with zero templates,
// shaped [0, N, ...] (AlphaFold returns shape-(0,) arrays there; the full shape keeps downstream
// code free of a special case).
FeatureDict empty_template_features(int64_t num_res);

// The first of `names` present in the folder `dir`, each also tried with ".gz" appended; "" if
// none is there.
std::string find_alignment_file(const std::string& dir, const std::vector<std::string>& names);

// Reads an .a3m or .sto alignment (by file name, ignoring ".gz"; at most `max_sequences` rows,
// 0 = all) and checks that its query row (upper-cased) is `query`: otherwise throws
// foldcore::Error naming the file, `query_source` and both sequences (features of two proteins
// must not mix).
Msa read_query_alignment(const std::string& path, const std::string& query, size_t max_sequences,
                         const std::string& query_source = "FASTA sequence");

// Inputs of the monomer pipeline on precomputed alignments (AlphaFold's use_precomputed_msas).
struct MonomerPipelineOptions {
  std::string fasta_path;  // exactly one protein sequence
  // Folder with AlphaFold's alignment file names: uniref90_hits.sto, mgnify_hits.sto, and
  // bfd_uniref_hits.a3m or bfd_uniclust_hits.a3m or small_bfd_hits.sto (first found). Each is
  // read plain or gzip, also under the name with ".gz" appended. Any subset of the three may be
  // present (a reduced search, or only some databases installed); "" = no folder.
  std::string msa_dir;
  // Further alignments (e.g. one ColabFold-style .a3m), merged after the folder's files. At least
  // one alignment must come from msa_dir or here.
  std::vector<std::string> extra_alignments;
  size_t uniref_max_hits = 10000;  // AlphaFold's defaults
  size_t mgnify_max_hits = 501;
  // Templates (optional): an hhsearch .hhr file; needs mmcif_dir and max_template_date.
  std::string template_hits_path;
  TemplateFeaturizerOptions templates;
};

struct MonomerPipelineResult {
  FeatureDict features;
  std::vector<TemplateHitReport> template_reports;  // one per hit looked at (templates.h)
  std::vector<std::string> msa_files;               // the alignment files read, in merge order
};

// DataPipeline.process for a monomer: {sequence features, MSA features, template features}.
// Errors (foldcore::Error) name the offending file: an empty FASTA or one with several records,
// non-amino-acid letters, no alignment file at all, an alignment whose query row differs from the
// FASTA sequence, malformed inputs. Template hits that cannot be featurised (missing mmCIF, date,
// prefilter, realignment failure) are reported in template_reports, not thrown.
MonomerPipelineResult run_monomer_pipeline(const MonomerPipelineOptions& options);

// Writes the features as an .npz (deflated, atomic: a failure leaves no file at `path`).
void write_features(const std::string& path, const FeatureDict& features);

}  // namespace foldcore::data
