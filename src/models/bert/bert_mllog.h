// MLPerf logging (mlperf_logging.mllog format): one line per event,
//   :::MLLOG {"namespace": "", "time_ms": 1700000000000, "event_type": "POINT_IN_TIME",
//             "key": "eval_accuracy", "value": 0.71, "metadata": {"epoch_num": 1024}}
// event_type: INTERVAL_START (run_start, block_start, eval_start, …), INTERVAL_END (…_stop),
// POINT_IN_TIME (everything else). Values and metadata are pre-rendered JSON fragments.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/json_text.h"  // json_string

namespace foldcore::bert {

// JSON rendering of scalars: finite doubles with round-trip precision, null otherwise.
std::string json_number(double v);
// A float in its shortest round-trip form (4e-4f → 0.0004, not 0.00039999998989515007).
std::string json_float(float v);
// Strings: foldcore::json_string (core/json_text.h).

class MlLogger {
 public:
  // sink receives complete lines (without '\n'); empty: std::cout.
  explicit MlLogger(std::function<void(const std::string&)> sink = {});
  using Metadata = std::vector<std::pair<std::string, std::string>>;  // key → JSON value
  void start(const std::string& key, const std::string& value = "null", const Metadata& md = {});
  void end(const std::string& key, const std::string& value = "null", const Metadata& md = {});
  void event(const std::string& key, const std::string& value = "null", const Metadata& md = {});
  const std::vector<std::string>& lines() const { return lines_; }

 private:
  void emit(const char* type, const std::string& key, const std::string& value, const Metadata& md);
  std::function<void(const std::string&)> sink_;
  std::vector<std::string> lines_;
};

}  // namespace foldcore::bert
