#include "apps/commands.h"

#include <unistd.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "core/log.h"

namespace foldcore::apps {

void set_action(CLI::App* sub, std::function<int()> action) {
  sub->callback([sub, action = std::move(action)] {
    int rc = 0;
    try {
      rc = action();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "foldcore %s: error: %s\n", sub->get_name().c_str(), e.what());
      rc = 1;
    }
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

CLI::Validator file_to_write() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        namespace fs = std::filesystem;
        std::error_code ec;
        if (fs::is_directory(path, ec)) return "'" + path + "' is a folder, not a file to write";
        const fs::path parent = fs::path(path).parent_path();
        const fs::path dir = parent.empty() ? fs::path(".") : parent;
        if (!fs::is_directory(dir, ec)) return "the folder '" + dir.string() + "' of '" + path + "' does not exist";
        if (::access(dir.c_str(), W_OK) != 0) return "the folder '" + dir.string() + "' of '" + path + "' is not writable";
        return {};
      },
      "FILE");
}

CLI::Validator folder_to_write() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        namespace fs = std::filesystem;
        std::error_code ec;
        fs::path p = fs::absolute(fs::path(path), ec);
        if (ec) return "'" + path + "': " + ec.message();
        if (fs::exists(p, ec) && !fs::is_directory(p, ec)) return "'" + path + "' is a file, not a folder";
        while (!fs::exists(p, ec) && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
        if (!fs::is_directory(p, ec)) return "'" + path + "' cannot be created: '" + p.string() + "' is not a folder";
        if (::access(p.c_str(), W_OK) != 0) return "'" + path + "' cannot be created: '" + p.string() + "' is not writable";
        return {};
      },
      "DIR");
}

CLI::Validator at_least(double min) {
  std::ostringstream bound;
  bound << min;
  return CLI::Validator(
      [min, b = bound.str()](std::string& text) -> std::string {
        size_t used = 0;
        double v = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size()) return "'" + text + "' is not a number";
        if (!(v >= min)) return "must be at least " + b + ", got " + text;
        return {};
      },
      ">= " + bound.str());
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

void register_commands(CLI::App& app) {
  add_info_command(app);
  add_smoke_command(app);
  add_check_command(app);
  add_features_command(app);
  add_msa_command(app);
  add_run_features_command(app);
  add_train_step_command(app);
  add_train_command(app);
  add_export_params_command(app);
  add_plot_metrics_command(app);
  add_predict_command(app);
  add_bert_command(app);
  add_bert_data_command(app);
  add_preprocess_command(app);
  add_serve_command(app);
}

}  // namespace foldcore::apps
