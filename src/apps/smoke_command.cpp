// `foldcore smoke`: the Transformer-core smoke training (nn/smoke.h). Prints one JSON line per
// --log_every steps and a final JSON summary; exits non-zero unless the loss fell at least 10x.
#include <cstdio>
#include <memory>
#include <string>

#include "apps/commands.h"
#include "core/device.h"
#include "core/error.h"
#include "nn/smoke.h"

namespace foldcore::apps {

void add_smoke_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("smoke", "Train a tiny Transformer on a synthetic task (loss must fall 10x)");
  auto cfg = std::make_shared<nn::SmokeConfig>();
  auto device = std::make_shared<std::string>("cpu");
  auto precision = std::make_shared<std::string>("fp32");
  sub->add_option("--steps", cfg->steps, "training steps")->check(at_least(1));
  sub->add_option("--seed", cfg->seed, "random seed");
  sub->add_option("--device", *device, "cpu or cuda:N");
  sub->add_option("--precision", *precision, "fp32 or bf16 (autocast, fp32 master weights)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  sub->add_option("--log_every", cfg->log_every, "steps between progress lines")->check(at_least(1));
  set_action(sub, [cfg, device, precision] {
    nn::SmokeConfig c = *cfg;
    c.device = parse_usable_device(*device);
    set_device(c.device);
    c.precision = *precision == "bf16" ? DType::bf16 : DType::f32;
    const nn::SmokeResult r = nn::run_smoke_training(c, [](const nn::SmokeLog& l) {
      std::printf("{\"step\": %d, \"loss\": %.6f, \"ms_per_step\": %.3f}\n", l.step, l.loss, l.ms_per_step);
      std::fflush(stdout);
    });
    const bool ok = r.ratio >= 10.0;
    std::printf(
        "{\"summary\": true, \"device\": \"%s\", \"precision\": \"%s\", \"steps\": %d, \"parameters\": %lld, "
        "\"initial_loss\": %.6f, \"final_loss\": %.6f, \"ratio\": %.3f, \"peak_memory_bytes\": %zu, "
        "\"seconds\": %.3f, \"passed\": %s}\n",
        c.device.str().c_str(), precision->c_str(), c.steps, static_cast<long long>(r.num_parameters), r.initial_loss,
        r.final_loss, r.ratio, r.peak_bytes, r.seconds, ok ? "true" : "false");
    if (!ok) std::fprintf(stderr, "foldcore smoke: the loss fell only %.2fx (need 10x)\n", r.ratio);
    return ok ? 0 : 1;
  });
}

}  // namespace foldcore::apps
