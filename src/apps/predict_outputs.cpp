#include "apps/predict_outputs.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <nlohmann/json.hpp>

#include "apps/png_plot.h"
#include "core/error.h"
#include "data_pipeline/formats/mmcif_writer.h"
#include "data_pipeline/formats/pdb_writer.h"
#include "data_pipeline/structure/residue_constants.h"

namespace foldcore::apps {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;  // keys in AlphaFold's order

namespace {

double round_to(double v, int decimals) {
  const double s = std::pow(10.0, decimals);
  return std::round(v * s) / s;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::strict); }

}  // namespace

double ModelPrediction::mean_plddt() const {
  FC_CHECK(!plddt.empty(), "ModelPrediction ", model_name, ": no pLDDT values");
  return std::accumulate(plddt.begin(), plddt.end(), 0.0) / static_cast<double>(plddt.size());
}

data::Structure prediction_structure(const std::string& sequence, const ModelPrediction& model) {
  namespace rc = data::rc;
  const size_t n = sequence.size();
  FC_CHECK(model.plddt.size() == n && model.final_atom_positions.size() == n * rc::kAtomTypeNum * 3 &&
               model.final_atom_mask.size() == n * rc::kAtomTypeNum,
           "prediction_structure: model ", model.model_name, " has ", model.plddt.size(), " pLDDT values, ",
           model.final_atom_positions.size(), " coordinates and ", model.final_atom_mask.size(),
           " mask values for ", n, " residues");
  data::Structure s;
  s.id = "pred";
  data::Chain chain;
  chain.auth_id = chain.label_id = "A";
  for (size_t i = 0; i < n; ++i) {
    data::Residue res;
    res.name = std::string(rc::restype_1to3(sequence[i]));
    res.auth_seq_num = static_cast<int>(i) + 1;
    for (int a = 0; a < rc::kAtomTypeNum; ++a) {
      if (model.final_atom_mask[i * rc::kAtomTypeNum + a] < 0.5f) continue;
      data::Atom atom;
      atom.name = std::string(rc::kAtomTypes[a]);
      atom.element = atom.name.substr(0, 1);  // AlphaFold's protein.to_pdb: first letter of the name
      const float* p = &model.final_atom_positions[(i * rc::kAtomTypeNum + a) * 3];
      atom.x = p[0];
      atom.y = p[1];
      atom.z = p[2];
      atom.b_factor = model.plddt[i];
      res.atoms.push_back(atom);
    }
    chain.residues.push_back(std::move(res));
  }
  s.chains.push_back(std::move(chain));
  return s;
}

char confidence_category(float plddt) {
  if (plddt < 50) return 'D';
  if (plddt < 70) return 'L';
  if (plddt < 90) return 'M';
  return 'H';
}

std::string confidence_json(const std::vector<float>& plddt, const std::string& warning) {
  json j;
  json numbers = json::array(), scores = json::array(), categories = json::array();
  for (size_t i = 0; i < plddt.size(); ++i) {
    numbers.push_back(i + 1);
    scores.push_back(round_to(plddt[i], 2));
    categories.push_back(std::string(1, confidence_category(plddt[i])));
  }
  if (!warning.empty()) j["warning"] = warning;
  j["residueNumber"] = std::move(numbers);
  j["confidenceScore"] = std::move(scores);
  j["confidenceCategory"] = std::move(categories);
  return dump(j);
}

std::string pae_json(const std::vector<float>& pae, float max_pae, const std::string& warning) {
  const auto n = static_cast<size_t>(std::lround(std::sqrt(static_cast<double>(pae.size()))));
  FC_CHECK(n * n == pae.size() && n > 0, "pae_json: ", pae.size(), " values is not a square matrix");
  json rows = json::array();
  for (size_t i = 0; i < n; ++i) {
    json row = json::array();
    for (size_t j = 0; j < n; ++j) row.push_back(round_to(pae[i * n + j], 1));  // AlphaFold rounds to 0.1 Å
    rows.push_back(std::move(row));
  }
  json entry;
  if (!warning.empty()) entry["warning"] = warning;
  entry["predicted_aligned_error"] = std::move(rows);
  entry["max_predicted_aligned_error"] = max_pae;
  return dump(json::array({entry}));
}

std::vector<std::pair<std::string, double>> ranking_scores(const TargetOutputs& t) {
  std::vector<std::pair<std::string, double>> scores;
  for (const ModelPrediction& m : t.models) {
    if (t.ranking_by == "ptm") {
      FC_CHECK(!std::isnan(m.ptm), "--ranking_by ptm: model ", m.model_name, " has no pTM (not a _ptm model)");
      scores.emplace_back(m.model_name, m.ptm);
    } else {
      FC_CHECK(t.ranking_by == "plddt", "ranking_by must be plddt or ptm, got '", t.ranking_by, "'");
      scores.emplace_back(m.model_name, m.mean_plddt());
    }
  }
  return scores;
}

std::vector<std::string> ranked_order(const TargetOutputs& t) {
  auto scores = ranking_scores(t);
  std::stable_sort(scores.begin(), scores.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> order;
  for (const auto& s : scores) order.push_back(s.first);
  return order;
}

std::string ranking_debug_json(const TargetOutputs& t) {
  json scores = json::object();
  for (const auto& [name, v] : ranking_scores(t)) scores[name] = v;
  json j;
  if (!t.warning.empty()) j["warning"] = t.warning;
  j[t.ranking_by == "ptm" ? "ptm" : "plddts"] = std::move(scores);
  j["order"] = ranked_order(t);
  return j.dump(4);  // AlphaFold writes ranking_debug.json with indent=4
}

std::string timings_json(const std::vector<std::pair<std::string, double>>& timings, const std::string& warning) {
  json j = json::object();
  if (!warning.empty()) j["warning"] = warning;
  for (const auto& [k, v] : timings) j[k] = v;
  return j.dump(4);
}

std::vector<float> distogram_bin_edges(int64_t num_bins, float first_break, float last_break) {
  FC_CHECK(num_bins >= 2, "distogram_bin_edges: ", num_bins, " bins");
  std::vector<float> edges(num_bins - 1);
  for (int64_t k = 0; k < num_bins - 1; ++k)
    edges[k] = num_bins == 2 ? first_break
                             : first_break + (last_break - first_break) * static_cast<float>(k) / (num_bins - 2);
  return edges;
}

// ---------------------------------------------------------------------------------- staging

OutputStage::OutputStage(std::string target_dir) : target_dir_(std::move(target_dir)) {
  dir_ = (fs::path(target_dir_) / (".predict_staging." + std::to_string(::getpid()))).string();
  std::error_code ec;
  fs::remove_all(dir_, ec);
  fs::create_directories(dir_, ec);
  FC_CHECK(!ec, dir_, ": cannot create the staging folder: ", ec.message());
}

OutputStage::~OutputStage() {
  std::error_code ec;
  fs::remove_all(dir_, ec);  // nothing staged survives a failure
}

std::string OutputStage::staged(const std::string& name) {
  FC_CHECK(!committed_, "OutputStage: write after commit (", name, ")");
  FC_CHECK(std::find(names_.begin(), names_.end(), name) == names_.end(), "OutputStage: ", name, " written twice");
  names_.push_back(name);
  return (fs::path(dir_) / name).string();
}

void OutputStage::write(const std::string& name, const std::string& content) {
  data::write_text_file_atomic(staged(name), content);
}

void OutputStage::write_npz(const std::string& name, const std::vector<std::pair<std::string, data::NpyArray>>& arrays) {
  data::write_npz(staged(name), arrays);
}

void OutputStage::write_pdb(const std::string& name, const data::Structure& s, const std::string& warning) {
  data::PdbWriteOptions o;
  if (!warning.empty()) o.remarks.push_back("WARNING: " + warning);
  data::write_pdb(staged(name), s, o);
}

void OutputStage::write_mmcif(const std::string& name, const data::Structure& s, const std::string& warning) {
  data::MmcifWriteOptions o;
  o.plddt_tables = true;
  std::string text = data::to_mmcif(s, o);
  if (!warning.empty()) {
    // A CIF comment right after the data_ line: every reader skips it, every human sees it.
    const size_t eol = text.find('\n');
    text.insert(eol == std::string::npos ? text.size() : eol + 1, "# WARNING: " + warning + "\n");
  }
  data::write_text_file_atomic(staged(name), text);
}

void OutputStage::commit() {
  FC_CHECK(!committed_, "OutputStage: committed twice");
  for (const std::string& name : names_) {
    std::error_code ec;
    fs::rename(fs::path(dir_) / name, fs::path(target_dir_) / name, ec);
    FC_CHECK(!ec, target_dir_, "/", name, ": cannot move the output into place: ", ec.message());
  }
  committed_ = true;
}

// ---------------------------------------------------------------------------------- target

void write_target_outputs(const std::string& target_dir, const TargetOutputs& t) {
  FC_CHECK(!t.models.empty(), t.target, ": no model predictions to write");
  const int64_t n = static_cast<int64_t>(t.sequence.size());
  const std::string& w = t.warning;
  OutputStage stage(target_dir);
  std::vector<std::pair<std::string, std::string>> png_text;
  if (!w.empty()) png_text.emplace_back("Warning", w);
  const std::string caption = w.empty() ? "" : "RANDOM PARAMETERS - NOT A REAL PREDICTION";

  auto stamp = [&](plot::Canvas& c) {
    if (!caption.empty()) c.text(10, c.height() - 12, caption, {200, 0, 0});
  };
  std::vector<std::pair<std::string, std::vector<float>>> plddt_lines;
  for (const ModelPrediction& m : t.models) {
    const data::Structure s = prediction_structure(t.sequence, m);
    const std::string stem = "unrelaxed_" + m.model_name + "_pred_0";
    stage.write_pdb(stem + ".pdb", s, w);
    stage.write_mmcif(stem + ".cif", s, w);
    stage.write("confidence_" + m.model_name + ".json", confidence_json(m.plddt, w));
    auto arrays = m.result_arrays;
    if (!w.empty()) arrays.emplace_back("warning", data::NpyArray::from_strings({w}, {1}));
    stage.write_npz("result_" + m.model_name + ".npz", arrays);
    if (m.has_pae()) {
      stage.write("pae_" + m.model_name + ".json", pae_json(m.predicted_aligned_error, m.max_predicted_aligned_error, w));
      plot::Canvas c = plot::plot_pae(m.predicted_aligned_error, n, m.max_predicted_aligned_error,
                                      "PAE " + m.model_name);
      stamp(c);
      stage.write("pae_" + m.model_name + ".png", plot::encode_png(c, png_text));
    }
    plddt_lines.emplace_back(m.model_name, m.plddt);
  }
  const std::vector<std::string> order = ranked_order(t);
  for (size_t r = 0; r < order.size(); ++r) {
    const auto it = std::find_if(t.models.begin(), t.models.end(), [&](const auto& m) { return m.model_name == order[r]; });
    const data::Structure s = prediction_structure(t.sequence, *it);
    stage.write_pdb("ranked_" + std::to_string(r) + ".pdb", s, w);
    stage.write_mmcif("ranked_" + std::to_string(r) + ".cif", s, w);
  }
  stage.write("ranking_debug.json", ranking_debug_json(t));
  stage.write("timings.json", timings_json(t.timings, w));
  {
    plot::Canvas c = plot::plot_plddt(plddt_lines, "pLDDT " + t.target);
    stamp(c);
    stage.write("plddt.png", plot::encode_png(c, png_text));
  }
  if (t.msa_rows > 0) {
    plot::Canvas c = plot::plot_msa_coverage(t.msa, t.msa_rows, n, "MSA coverage " + t.target);
    stamp(c);
    stage.write("msa_coverage.png", plot::encode_png(c, png_text));
  }
  stage.write("done", w.empty() ? "ok\n" : "ok (WARNING: " + w + ")\n");
  stage.commit();
}

}  // namespace foldcore::apps
