// Subcommand registration. Each command file adds its subcommand to the CLI11 app; its action
// runs through run_command(), which turns foldcore::Error into a message and a non-zero exit.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace foldcore::apps {

void register_commands(CLI::App& app);

// Subcommands defined in their own files.
void add_info_command(CLI::App& app);
void add_smoke_command(CLI::App& app);
void add_check_command(CLI::App& app);
void add_features_command(CLI::App& app);
void add_msa_command(CLI::App& app);
void add_run_features_command(CLI::App& app);
void add_train_step_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_export_params_command(CLI::App& app);
void add_plot_metrics_command(CLI::App& app);
void add_predict_command(CLI::App& app);
void add_bert_command(CLI::App& app);
void add_bert_data_command(CLI::App& app);
void add_preprocess_command(CLI::App& app);
void add_serve_command(CLI::App& app);

// Sets the subcommand's callback to `action`; an Error or std::exception from it is printed as
// "foldcore <name>: error: <what>" and the program exits with status 1.
void set_action(CLI::App* sub, std::function<int()> action);

// The check of an option that names a file the command writes at its end: its folder exists and is
// a folder, and the path is not a folder. Checked when the command line is read, so that a long run
// (a training step, a prediction) does not do its work and then fail to write its result.
CLI::Validator file_to_write();

// The check of an option that names a folder the command creates (where missing) and writes into:
// the path is a folder or does not exist yet, and its nearest existing ancestor is a writable
// folder. Checked when the command line is read, like file_to_write.
CLI::Validator folder_to_write();

// The check of a numeric option with a lower bound: "--max_steps: must be at least 1, got 0" (CLI11's
// own PositiveNumber / NonNegativeNumber print the whole range of a double).
CLI::Validator at_least(double min);

// "a,b,,c" → {"a", "b", "c"}: the comma-separated lists of --model_names and --fasta_paths.
std::vector<std::string> split_commas(const std::string& s);

}  // namespace foldcore::apps
