#include "apps/predict_command_model.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>

#include "apps/memory_estimate.h"
#include "apps/predict_outputs.h"
#include "autograd/param_store.h"
#include "core/error.h"
#include "core/log.h"
#include "core/random.h"
#include "core/timer.h"
#include "data_pipeline/formats/fasta.h"
#include "models/alphafold/model/alphafold.h"
#include "models/alphafold/params/alphafold_params.h"
#include "models/alphafold/model/features.h"
#include "models/alphafold/params/param_table.h"

#ifdef FOLDCORE_HAVE_YAML
#include "models/alphafold/model/config_yaml.h"
#endif

namespace foldcore::apps {
namespace fs = std::filesystem;

std::string random_params_warning(uint64_t seed) {
  return "RANDOM PARAMETERS (--random_params " + std::to_string(seed) +
         "): this is NOT a real structure prediction; coordinates and confidences are meaningless";
}

TargetFeatures target_features(const TargetInputs& in) {
  const std::string& fasta_path = in.fasta_path;
  TargetFeatures t;
  t.target = fs::path(fasta_path).stem().string();
  FC_CHECK(!t.target.empty(), fasta_path, ": cannot derive a target name from the file name");
  data::FastaOptions fo;
  fo.alphabet = data::Alphabet::kProtein;
  fo.uppercase = true;
  const std::vector<data::FastaRecord> records = data::read_fasta(fasta_path, fo);
  FC_CHECK(records.size() == 1, fasta_path, ": expected exactly one sequence (single-chain prediction), found ",
           records.size());
  FC_CHECK(!records[0].sequence.empty(), fasta_path, ": the sequence is empty");
  t.description = records[0].description;
  t.sequence = records[0].sequence;
  if (!in.msa_dir.empty() || !in.extra_alignments.empty()) {
    FC_CHECK(in.msa_dir.empty() || fs::is_directory(in.msa_dir), fasta_path,
             ": --use_precomputed_msas, but the alignment folder ", in.msa_dir,
             " does not exist (run `foldcore msa` first, or pass --msa F.a3m)");
    data::MonomerPipelineOptions o;
    o.fasta_path = fasta_path;
    o.msa_dir = in.msa_dir;
    o.extra_alignments = in.extra_alignments;
    if (!in.template_mmcif_dir.empty()) {
      FC_CHECK(fs::is_directory(in.template_mmcif_dir), "--template_mmcif_dir ", in.template_mmcif_dir,
               " is not a directory");
      FC_CHECK(!in.max_template_date.empty(), "--template_mmcif_dir needs --max_template_date (YYYY-MM-DD)");
      const fs::path hits = fs::path(in.msa_dir) / "pdb70_hits.hhr";
      FC_CHECK(fs::exists(hits), fasta_path, ": --template_mmcif_dir given, but ", hits.string(),
               " does not exist (run `foldcore msa` with a template search first)");
      o.template_hits_path = hits.string();
      o.templates.mmcif_dir = in.template_mmcif_dir;
      o.templates.max_template_date = in.max_template_date;
    }
    data::MonomerPipelineResult r = data::run_monomer_pipeline(o);
    for (const data::TemplateHitReport& rep : r.template_reports)
      log::info("predict: template ", rep.name, ": ", data::to_string(rep.status),
                rep.message.empty() ? "" : " (" + rep.message + ")");
    t.raw = std::move(r.features);
  } else {
    // Single-sequence mode: the query is the only MSA row, no templates.
    t.raw = data::make_sequence_features(t.sequence, t.description);
    data::Msa query;
    query.sequences = {t.sequence};
    query.deletion_matrix = {std::vector<int>(t.sequence.size(), 0)};
    query.descriptions = {t.description};
    t.raw.update(data::make_msa_features({&query}));
    t.raw.update(data::empty_template_features(static_cast<int64_t>(t.sequence.size())));
  }
  return t;
}

namespace {

// Removes a file when it goes out of scope (temporary feature files).
struct TempFile {
  std::string path;
  ~TempFile() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

std::string find_preset(const std::string& model_name) {
  std::vector<fs::path> roots;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) roots = {exe.parent_path().parent_path(), exe.parent_path()};
  roots.push_back(fs::current_path());
  for (const fs::path& r : roots) {
    const fs::path p = r / "configs" / "model" / (model_name + ".yaml");
    if (fs::is_regular_file(p)) return p.string();
  }
  return "";
}

af2::Af2Config load_config_file(const std::string& path) {
#ifdef FOLDCORE_HAVE_YAML
  return af2::load_af2_config(path);
#else
  FC_THROW(path, ": reading model configs needs yaml-cpp, which this build lacks");
#endif
}

}  // namespace

// An AlphaFold model with its parameter storage; kept for every target.
struct LoadedModel {
  explicit LoadedModel(Device device, uint64_t seed) : params(device), init_rng(seed) {}
  std::string name, params_path;
  af2::Af2Config config;
  autograd::ParamStore params;
  Generator init_rng;
  std::unique_ptr<af2::AlphaFold> model;
};

namespace {

std::unique_ptr<LoadedModel> load_model(const std::string& name, const PredictOptions& o) {
  auto m = std::make_unique<LoadedModel>(o.device, o.random_params_seed);
  m->name = name;
  const std::string preset = o.model_config.empty() ? find_preset(name) : o.model_config;
  if (o.random_params) {
    FC_CHECK(!preset.empty(), "model ", name, ": --random_params needs an architecture: no configs/model/", name,
             ".yaml found; pass --model_config");
    m->config = load_config_file(preset);
  } else {
    FC_CHECK(!o.data_dir.empty(), "--data_dir is required unless --random_params is given");
    m->params_path = (fs::path(o.data_dir) / "params" / ("params_" + name + ".npz")).string();
    FC_CHECK(fs::is_regular_file(m->params_path), "model ", name, ": parameter file ", m->params_path,
             " not found (download AlphaFold's parameters into <data_dir>/params/)");
    // The architecture (widths, depths, heads) comes from the file's array shapes; a preset fills
    // in what shapes cannot tell (dropout, bins).
    const af2::Af2Config base = o.model_config.empty() || preset.empty() ? af2::Af2Config{} : load_config_file(preset);
    try {
      m->config = af2::infer_af2_config(m->params_path, base);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      if (what.find(m->params_path) != std::string::npos) throw;
      FC_THROW(m->params_path, ": ", what);
    }
  }
  m->config.preset = name;
  m->config.num_recycles = o.num_recycles;
  m->config.chunk_size = std::max<int64_t>(o.chunk_size, 0);  // auto: chosen per target
  m->config.template_passes = o.template_passes;
  m->config.precision = o.precision;
  af2::validate_af2_config(m->config);

  m->model = std::make_unique<af2::AlphaFold>(nn::Scope{&m->params, &m->init_rng, nullptr, ""}, m->config);
  m->model->train(false);
  m->params.finalize();
  m->model->set_model_parallel(o.model_parallel);
  if (!o.random_params) {
    af2::Af2ParamTable table;
    m->model->add_af2_params(table);
    try {
      af2::load_af2_params(table, m->params_path);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      if (what.find(m->params_path) != std::string::npos) throw;
      FC_THROW(m->params_path, ": ", what);
    }
  }
  log::info("predict: loaded ", name, " (", m->config.num_evoformer_blocks, " Evoformer blocks, ",
            m->params.num_elements(), " parameters", o.random_params ? ", RANDOM" : "", ")");
  return m;
}

const Tensor* find_output(const af2::Af2Outputs& outs, const std::string& name) {
  for (const auto& [k, t] : outs)
    if (k == name) return &t;
  return nullptr;
}

const Tensor& get_output(const af2::Af2Outputs& outs, const std::string& name) {
  const Tensor* t = find_output(outs, name);
  FC_CHECK(t != nullptr, "predict: the model returned no '", name, "'");
  return *t;
}

// Model outputs → what the output writers need, with AlphaFold's result-file names.
// full = false: without the pair-sized logits and probabilities and the MSA/resolved logits.
ModelPrediction to_prediction(const std::string& name, const af2::Af2Config& config, const af2::Af2Outputs& outs,
                              const af2::Af2Batch& batch, uint64_t seed, bool full) {
  ModelPrediction p;
  p.model_name = name;
  p.plddt = get_output(outs, "plddt").contiguous().to_vector();
  p.final_atom_positions = get_output(outs, "final_atom_positions").contiguous().to_vector();
  p.final_atom_mask = get_output(outs, "final_atom_mask").contiguous().to_vector();
  auto add = [&](const std::string& as, const Tensor& t) { p.result_arrays.emplace_back(as, data::NpyArray::from_tensor(t)); };
  add("plddt", get_output(outs, "plddt"));
  add("predicted_lddt_logits", get_output(outs, "lddt_logits"));
  add("final_atom_positions", get_output(outs, "final_atom_positions"));
  add("final_atom_mask", get_output(outs, "final_atom_mask"));
  if (full) {
    add("distogram_logits", get_output(outs, "distogram_logits"));
    p.result_arrays.emplace_back(
        "distogram_bin_edges",
        data::NpyArray::from_f32(distogram_bin_edges(config.heads.distogram_bins, config.heads.distogram_first_break,
                                                     config.heads.distogram_last_break),
                                 {config.heads.distogram_bins - 1}));
    add("masked_msa_logits", get_output(outs, "masked_msa_logits"));
    add("experimentally_resolved_logits", get_output(outs, "experimentally_resolved_logits"));
  }
  if (const Tensor* pae = find_output(outs, "predicted_aligned_error")) {
    p.predicted_aligned_error = pae->contiguous().to_vector();
    p.max_predicted_aligned_error = get_output(outs, "max_predicted_aligned_error").item();
    p.ptm = get_output(outs, "ptm_score").item();
    add("predicted_aligned_error", *pae);
    add("max_predicted_aligned_error", get_output(outs, "max_predicted_aligned_error"));
    if (full) add("aligned_confidence_probs", get_output(outs, "aligned_confidence_probs"));
    add("ptm", get_output(outs, "ptm_score"));
  }
  p.result_arrays.emplace_back("ranking_confidence",
                               data::NpyArray::from_f32({static_cast<float>(p.mean_plddt())}, {}));
  add("aatype", batch.aatype);
  add("residue_index", batch.residue_index);
  add("num_recycles", get_output(outs, "num_recycles"));
  p.result_arrays.emplace_back("random_seed", data::NpyArray::from_i32({static_cast<int32_t>(seed)}, {}));
  return p;
}

}  // namespace

Predictor::Predictor(PredictOptions options) : o_(std::move(options)) {
  const PredictOptions& o = o_;
  FC_CHECK(!o.model_names.empty(), "--model_names: no model given");
  FC_CHECK(o.num_recycles >= 0, "--num_recycles must be >= 0, got ", o.num_recycles);
  FC_CHECK(o.chunk_size >= 0 || o.chunk_size == kChunkAuto, "--chunk_size must be >= 0 or auto, got ", o.chunk_size);
  FC_CHECK(o.precision == "fp32" || o.precision == "bf16", "--precision must be fp32 or bf16, got '", o.precision, "'");
  FC_CHECK(o.ranking_by == "plddt" || o.ranking_by == "ptm", "--ranking_by must be plddt or ptm, got '",
           o.ranking_by, "'");
  FC_CHECK(o.result_arrays == "full" || o.result_arrays == "summary", "--result_arrays must be full or summary, got '",
           o.result_arrays, "'");
  warning_ = o.random_params ? random_params_warning(o.random_params_seed) : "";
  if (o.random_params)
    for (int i = 0; i < 3; ++i) log::warn("predict: ", warning_);
}

Predictor::~Predictor() = default;

LoadedModel& Predictor::model(const std::string& name) {
  std::unique_ptr<LoadedModel>& m = models_[name];
  if (!m) m = load_model(name, o_);
  return *m;
}

void Predictor::load_models() {
  for (const std::string& name : o_.model_names) model(name);
}

const af2::Af2Config& Predictor::config(const std::string& model_name) { return model(model_name).config; }

int64_t Predictor::num_params(const std::string& model_name) { return model(model_name).params.num_elements(); }

TargetSummary Predictor::predict_target(const TargetInputs& in, const std::string& target_dir_path,
                                        const PredictProgress& progress) {
  const PredictOptions& o = o_;
  auto report = [&](const std::string& stage, double fraction) {
    if (progress) progress(stage, fraction);
  };
  const fs::path target_dir(target_dir_path);
  TargetOutputs out;
  out.ranking_by = o.ranking_by;
  out.warning = warning_;
  WallTimer timer;
  report("features", 0.0);
  const TargetFeatures tf = target_features(in);
  out.target = tf.target;
  out.timings.emplace_back("features", timer.seconds());
  out.sequence = tf.sequence;
  const data::NpyArray& msa = tf.raw.at("msa");
  out.msa_rows = msa.shape.at(0);
  const int64_t n_res = static_cast<int64_t>(tf.sequence.size());
  // Templates found (the raw template arrays hold one row per template; none: 0 rows).
  const int64_t templates = tf.raw.contains("template_aatype") && !tf.raw.at("template_aatype").shape.empty()
                                ? tf.raw.at("template_aatype").shape.at(0)
                                : 0;
  // Preflight: refuse what cannot fit before the processed features and the activations are
  // allocated (the parameters already are), or pick the chunk with --chunk_size auto. The models
  // run one after another; each keeps its outputs (kept_result_bytes: about N²·(2·64 + 2) floats,
  // N²·2 with --result_arrays summary) until the target is written, so on the CPU model i has i
  // models' outputs less available.
  // On a GPU the outputs are host memory: all models' against the host's available memory.
  const int64_t available = device_memory_available(o.device);
  const bool logits_on_device = pair_logits_on_device(o.device, o.result_arrays);
  if (o.device.is_cuda() && !o.model_names.empty())
    check_host_results_fit(in.fasta_path, n_res,
                           kept_result_bytes(n_res, model(o.model_names.front()).config.heads.distogram_bins,
                                             o.result_arrays, static_cast<int64_t>(o.model_names.size())),
                           device_memory_available(Device::cpu()), o.result_arrays);
  // Under --dap every rank checks its own peak (memory_estimate.h), against its own device.
  const int64_t dap = o.model_parallel.dap_size();
  for (size_t mi = 0; mi < o.model_names.size(); ++mi) {
    LoadedModel& m = model(o.model_names[mi]);
    const int64_t kept = o.device.is_cuda() ? 0
                                            : kept_result_bytes(n_res, m.config.heads.distogram_bins, o.result_arrays,
                                                                static_cast<int64_t>(mi));
    const int64_t avail = available - kept;
    const int64_t num_params = m.params.num_elements();
    m.config.template_passes = o.template_passes;  // auto is decided per target, below
    if (o.chunk_size == kChunkAuto) {
      const int64_t chunk =
          choose_chunk_size(m.config, n_res, out.msa_rows, o.num_recycles + 1, num_params, avail, templates, logits_on_device, dap);
      if (chunk < 0) {
        af2::Af2Config smallest = m.config;
        smallest.chunk_size = 1;
        check_predict_fits(in.fasta_path, smallest, n_res, out.msa_rows, o.num_recycles + 1, num_params, avail,
                           o.device.str(), templates, logits_on_device, dap);
      }
      m.config.chunk_size = chunk;
      m.model->set_chunk_size(chunk);
      const MemoryEstimate e =
          estimate_predict_memory(m.config, n_res, out.msa_rows, o.num_recycles + 1, num_params, templates, logits_on_device, dap);
      log::info("predict: ", m.name, ": --chunk_size auto chose ", chunk, chunk == 0 ? " (no chunking)" : "",
                ": estimated ", format_bytes(needed_after_params(e)), " of ", format_bytes(avail), " available on ",
                o.device.str());
    } else {
      check_predict_fits(in.fasta_path, m.config, n_res, out.msa_rows, o.num_recycles + 1, num_params, avail,
                         o.device.str(), templates, logits_on_device, dap);
    }
    // --template_passes auto: two passes over the templates only where one does not fit.
    const int64_t passes =
        choose_template_passes(m.config, n_res, out.msa_rows, o.num_recycles + 1, num_params, avail, templates,
                               logits_on_device, dap);
    if (o.template_passes == 0 && passes == 2)
      log::info("predict: ", m.name, ": --template_passes auto chose 2 (one pass does not fit the ",
                format_bytes(avail), " available)");
    m.config.template_passes = passes;
    m.model->set_template_passes(passes);
  }
  const int32_t* codes = msa.as<int32_t>();
  out.msa.assign(codes, codes + msa.numel());
  log::info("predict: ", tf.target, ": ", n_res, " residues, ", out.msa_rows, " MSA rows");

  // Progress: features 5 %, the models share 5..90 % evenly (processing, then each recycling
  // iteration, the structure/heads inside the last one), writing the last 10 %.
  const double per_model = 0.85 / static_cast<double>(o.model_names.size());
  for (size_t mi = 0; mi < o.model_names.size(); ++mi) {
    const std::string& name = o.model_names[mi];
    const double base = 0.05 + per_model * static_cast<double>(mi);
    report("model " + name, base);
    const LoadedModel& m = model(name);
    // AlphaFold seeds each model's feature processing differently (random_seed + model index).
    const uint64_t seed = static_cast<uint64_t>(o.random_seed) + mi;
    timer.reset();
    TempFile processed{(fs::temp_directory_path() / ("foldcore_predict_" + std::to_string(::getpid()) + "_" +
                                                      tf.target + "_" + name + "_" + std::to_string(mi) + ".npz"))
                           .string()};
    process_features_to_npz(tf.raw, m.config, o.num_recycles + 1, seed, processed.path);
    const af2::Af2Features features = af2::Af2Features::read_npz(processed.path);
    out.timings.emplace_back("process_features_" + name, timer.seconds());

    auto on_iteration = [&](int64_t r, int64_t total) {
      report("recycle " + std::to_string(r + 1) + "/" + std::to_string(total) + " " + name,
             base + per_model * (0.1 + 0.9 * static_cast<double>(r) / static_cast<double>(total)));
    };
    timer.reset();
    // The recycled states and representations are not written: without them each iteration's pair
    // dies with the next; the pair-sized logits only where the result arrays are full.
    const af2::Af2PredictKeep keep{
        .recycle_states = false, .representations = false, .pair_logits = o.result_arrays == "full"};
    af2::Af2Outputs outs = m.model->predict(features, o.num_recycles, o.device, on_iteration, keep);
    out.timings.emplace_back("predict_and_compile_" + name, timer.seconds());
    if (o.benchmark) {
      timer.reset();
      outs = m.model->predict(features, o.num_recycles, o.device, {}, keep);
      out.timings.emplace_back("predict_benchmark_" + name, timer.seconds());
    }
    report("structure " + name, base + per_model * 0.99);
    out.models.push_back(to_prediction(name, m.config, outs, features.iteration(0), seed, o.result_arrays == "full"));
    outs.clear();  // the host copies of the model's outputs (the pair-sized ones too) go now
    log::info("predict: ", tf.target, " ", name, ": mean pLDDT ", out.models.back().mean_plddt(),
              std::isnan(out.models.back().ptm) ? "" : ", pTM " + std::to_string(out.models.back().ptm), " (",
              out.timings.back().second, " s)");
  }
  report("writing", 0.9);
  if (o.write_outputs) {
    std::error_code ec;
    fs::create_directories(target_dir, ec);
    FC_CHECK(!ec, target_dir.string(), ": cannot create the output folder: ", ec.message());
    write_target_outputs(target_dir.string(), out);
    log::info("predict: ", tf.target, ": outputs in ", target_dir.string());
  }

  TargetSummary summary;
  summary.target = tf.target;
  summary.num_residues = n_res;
  summary.msa_rows = out.msa_rows;
  const std::string top = ranked_order(out).front();
  for (const ModelPrediction& p : out.models)
    if (p.model_name == top) {
      summary.mean_plddt = p.mean_plddt();
      summary.ptm = p.ptm;
    }
  report("done", 1.0);
  return summary;
}

void run_predict(const PredictOptions& o) {
  FC_CHECK(!o.fasta_paths.empty(), "--fasta_paths: no FASTA file given");
  FC_CHECK(o.msa_a3m.empty() || o.fasta_paths.size() == 1, "--msa ", o.msa_a3m,
           ": one alignment belongs to one target, but ", o.fasta_paths.size(), " FASTA files were given");
  FC_CHECK(o.msa_a3m.empty() || fs::is_regular_file(o.msa_a3m), "--msa ", o.msa_a3m, ": file not found");
  std::map<std::string, int> stems;
  for (const std::string& f : o.fasta_paths) {
    FC_CHECK(fs::is_regular_file(f), f, ": FASTA file not found");
    FC_CHECK(++stems[fs::path(f).stem().string()] == 1, f, ": another FASTA file has the same name (stem) ",
             fs::path(f).stem().string(), "; output folders would collide");
  }
  Predictor predictor(o);
  for (const std::string& fasta : o.fasta_paths) {
    const std::string target = fs::path(fasta).stem().string();
    const fs::path target_dir = fs::path(o.output_dir) / target;
    if (fs::exists(target_dir / "done")) {
      log::info("predict: ", target, ": ", (target_dir / "done").string(), " exists, skipping");
      continue;
    }
    TargetInputs in;
    in.fasta_path = fasta;
    if (o.use_precomputed_msas) in.msa_dir = (target_dir / "msas").string();
    if (!o.msa_a3m.empty()) in.extra_alignments = {o.msa_a3m};
    in.template_mmcif_dir = o.template_mmcif_dir;
    in.max_template_date = o.max_template_date;
    predictor.predict_target(in, target_dir.string());
  }
}

}  // namespace foldcore::apps
