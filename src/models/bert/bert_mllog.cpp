#include "models/bert/bert_mllog.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace foldcore::bert {

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string json_float(float v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  for (int prec = 1; prec <= 9; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}

MlLogger::MlLogger(std::function<void(const std::string&)> sink) : sink_(std::move(sink)) {}

void MlLogger::start(const std::string& key, const std::string& value, const Metadata& md) {
  emit("INTERVAL_START", key, value, md);
}
void MlLogger::end(const std::string& key, const std::string& value, const Metadata& md) {
  emit("INTERVAL_END", key, value, md);
}
void MlLogger::event(const std::string& key, const std::string& value, const Metadata& md) {
  emit("POINT_IN_TIME", key, value, md);
}

void MlLogger::emit(const char* type, const std::string& key, const std::string& value, const Metadata& md) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  std::string line = ":::MLLOG {\"namespace\": \"\", \"time_ms\": " + std::to_string(ms) + ", \"event_type\": \"" +
                     type + "\", \"key\": " + json_string(key) + ", \"value\": " + value + ", \"metadata\": {";
  for (size_t i = 0; i < md.size(); ++i)
    line += (i ? ", " : "") + json_string(md[i].first) + ": " + md[i].second;
  line += "}}";
  lines_.push_back(line);
  if (sink_)
    sink_(line);
  else
    std::cout << line << '\n' << std::flush;
}

}  // namespace foldcore::bert
