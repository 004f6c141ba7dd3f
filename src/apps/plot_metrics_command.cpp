// `foldcore plot_metrics RUN [--output FILE.png]`: the training curves of a `foldcore train` run
// folder (RUN/metrics.jsonl, or the metrics file itself) as one PNG (default RUN/metrics.png):
//   1. the total loss and every loss term (log10 scale) over the steps;
//   2. when the run validated: the mean lDDT-Cα and GDT-TS and each validation chain's lDDT-Cα
//      (0..1) over the steps where validation ran;
//   3. the mean Cα-RMSD (Å) of the validation chains.
// A missing file, a line that is not a JSON object with a numeric "step", or a file without any
// step is an error naming the file and the line. An unterminated last line (a run writing it right
// now) is skipped with a warning.
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/png_plot.h"
#include "core/error.h"
#include "core/log.h"

namespace foldcore::apps {
namespace {

namespace fs = std::filesystem;

// Keys of a metrics line that are not loss terms.
bool is_loss_term(const std::string& key) {
  static const std::set<std::string> other = {"step",         "loss",
                                              "lr",           "grad_norm",
                                              "step_seconds", "samples_per_second",
                                              "peak_memory_bytes", "skipped",
                                              "epoch",        "chains"};
  return !other.count(key) && key.rfind("val_", 0) != 0;
}

struct Curves {
  std::map<std::string, plot::Series> series;  // by key, in key order
  std::vector<std::string> term_order;         // loss terms in first-seen order
  int64_t lines = 0;
};

Curves read_metrics(const fs::path& path) {
  FC_CHECK(fs::exists(path), "plot_metrics: ", path.string(), " does not exist (a foldcore train run folder holds it)");
  std::ifstream in(path, std::ios::binary);
  FC_CHECK(in.good(), "plot_metrics: cannot read ", path.string());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Curves c;
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    ++line_no;
    if (end == std::string::npos) {
      log::warn("plot_metrics: ", path.string(), " line ", line_no, " is unterminated (a run still writing it?); skipped");
      break;
    }
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      FC_THROW("plot_metrics: ", path.string(), " line ", line_no, " is not valid JSON: ", e.what());
    }
    FC_CHECK(j.is_object() && j.contains("step") && j["step"].is_number(), "plot_metrics: ", path.string(), " line ",
             line_no, " is not a metrics object with a numeric \"step\"");
    const double step = j["step"].get<double>();
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& key = it.key();
      if (key == "step") continue;
      double v;
      if (it->is_number())
        v = it->get<double>();
      else if (it->is_null())
        v = NAN;  // a non-finite value (a skipped step)
      else
        continue;  // booleans, lists
      plot::Series& s = c.series[key];
      if (s.name.empty()) {
        s.name = key;
        if (key != "loss" && is_loss_term(key)) c.term_order.push_back(key);
      }
      s.x.push_back(step);
      s.y.push_back(v);
    }
    ++c.lines;
  }
  FC_CHECK(c.lines > 0, "plot_metrics: ", path.string(), " holds no metrics line");
  return c;
}

}  // namespace

void add_plot_metrics_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("plot_metrics", "Plot the loss and validation curves of a foldcore train run (PNG)");
  struct Args {
    std::string run, output;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("run", a->run, "run folder of foldcore train (or its metrics.jsonl)")->required();
  sub->add_option("--output", a->output, "PNG to write (default: RUN/metrics.png)")->check(file_to_write());
  set_action(sub, [a]() -> int {
    const fs::path run(a->run);
    const fs::path metrics = fs::is_directory(run) ? run / "metrics.jsonl" : run;
    const fs::path output = !a->output.empty() ? fs::path(a->output)
                                               : (fs::is_directory(run) ? run : run.parent_path()) / "metrics.png";
    Curves c = read_metrics(metrics);
    std::vector<plot::Canvas> panels;
    std::vector<plot::Series> losses;
    if (c.series.count("loss")) losses.push_back(c.series.at("loss"));
    for (const std::string& t : c.term_order) losses.push_back(c.series.at(t));
    FC_CHECK(!losses.empty(), "plot_metrics: ", metrics.string(), " has no \"loss\" and no loss term");
    panels.push_back(plot::plot_series(losses, "Training loss", "Step", "loss", true));
    std::vector<plot::Series> val;
    for (const char* key : {"val_lddt_ca", "val_gdt_ts"})
      if (c.series.count(key)) val.push_back(c.series.at(key));
    for (const auto& [key, s] : c.series)
      if (key.rfind("val_lddt_ca/", 0) == 0) val.push_back(s);
    if (!val.empty()) panels.push_back(plot::plot_series(val, "Validation", "Step", "score", false, 0.0, 1.0));
    if (c.series.count("val_rmsd_ca"))
      panels.push_back(plot::plot_series({c.series.at("val_rmsd_ca")}, "Validation Ca-RMSD", "Step", "A", false));
    const std::string png = plot::encode_png(plot::stack_vertical(panels));
    const fs::path tmp = output.string() + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(png.data(), static_cast<std::streamsize>(png.size()));
      FC_CHECK(out.good(), "plot_metrics: cannot write ", tmp.string());
    }
    fs::rename(tmp, output);
    log::info("plot_metrics: ", c.lines, " lines of ", metrics.string(), " → ", output.string(), " (", panels.size(),
              " panels)");
    return 0;
  });
}

}  // namespace foldcore::apps
