#include "apps/commands.h"

#include <cstdio>
#include <exception>
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
