#include "nn/smoke.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "core/allocator.h"
#include "core/random.h"
#include "nn/optimizer.h"
#include "nn/transformer.h"

namespace foldcore::nn {
namespace {

// token + learned position embeddings → encoder layers → vocabulary logits.
class SmokeModel : public Module {
 public:
  SmokeModel(Scope scope, const SmokeConfig& c)
      : Module(scope), head_(child_scope("head"), c.d_model, c.vocab, LinearOptions{Init::lecun}) {
    tokens_ = add_parameter("token_embedding", {c.vocab, c.d_model}, true,
                            trunc_normal({c.vocab, c.d_model}, *scope.init_rng, 1.f));
    positions_ = add_parameter("position_embedding", {c.seq, c.d_model}, true,
                               trunc_normal({c.seq, c.d_model}, *scope.init_rng, 1.f));
    EncoderLayerOptions lo;
    lo.d_model = c.d_model;
    lo.num_heads = c.heads;
    lo.d_ff = c.d_ff;
    lo.dropout = c.dropout;
    lo.init = Init::lecun;
    for (int l = 0; l < c.layers; ++l)
      layers_.push_back(std::make_unique<TransformerEncoderLayer>(child_scope("layer_" + std::to_string(l)), lo));
    for (auto& l : layers_) register_child(*l);
    register_child(head_);
  }
  Variable forward(const Tensor& tokens) const {
    Variable x = autograd::add(autograd::embedding(tokens_, tokens), positions_);
    for (const auto& l : layers_) x = l->forward(x);
    return head_.forward(x);
  }

 private:
  Variable tokens_, positions_;
  std::vector<std::unique_ptr<TransformerEncoderLayer>> layers_;
  Linear head_;
};

// A batch of random sequences and their reversals.
std::pair<Tensor, Tensor> make_batch(const SmokeConfig& c, Generator& gen) {
  const Tensor x = randint({c.batch, c.seq}, gen, 0, c.vocab, DType::i64);
  std::vector<int64_t> xv = x.to_vector_i64(), yv(xv.size());
  for (int b = 0; b < c.batch; ++b)
    for (int i = 0; i < c.seq; ++i)
      yv[static_cast<size_t>(b * c.seq + i)] = xv[static_cast<size_t>(b * c.seq + (c.seq - 1 - i))];
  return {x.to(c.device), Tensor::from_vector_i64(yv, {c.batch * c.seq}, DType::i64, c.device)};
}

}  // namespace

SmokeResult run_smoke_training(const SmokeConfig& c, const std::function<void(const SmokeLog&)>& on_log) {
  FC_CHECK(c.steps > 0 && c.log_every > 0, "smoke: steps ", c.steps, " and log_every ", c.log_every,
           " must be positive");
  FC_CHECK(c.precision == DType::f32 || c.precision == DType::bf16, "smoke: precision must be fp32 or bf16");
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  Allocator& alloc = default_allocator(c.device);
  alloc.reset_peak();

  Generator init_rng(c.seed), dropout_rng(c.seed + 1), data_rng(c.seed + 2);
  autograd::ParamStore params(c.device);
  SmokeModel model(Scope{&params, &init_rng, &dropout_rng, ""}, c);
  params.finalize();
  AdamConfig ac;
  ac.lr = c.lr;
  ac.weight_decay = 0.f;
  Adam adam(params.values(), params.grads(), params.segments(), ac);

  SmokeResult r;
  r.num_parameters = params.num_elements();
  std::vector<float> losses;
  auto last_log = Clock::now();
  for (int step = 1; step <= c.steps; ++step) {
    const auto [x, y] = make_batch(c, data_rng);
    params.zero_grad();
    Variable loss;
    {
      std::unique_ptr<autograd::AutocastGuard> ac_guard;
      if (c.precision == DType::bf16) ac_guard = std::make_unique<autograd::AutocastGuard>(DType::bf16);
      autograd::CrossEntropyOptions ce;
      ce.labels = y;
      ce.denominator = static_cast<double>(c.batch) * c.seq;
      loss = autograd::softmax_cross_entropy(model.forward(x), ce);
    }
    autograd::backward(loss);
    adam.step();
    const float l = loss.value().item();  // synchronises: ms/step includes the device work
    losses.push_back(l);
    if (step % c.log_every == 0 || step == c.steps) {
      const auto now = Clock::now();
      const int n = step % c.log_every == 0 ? c.log_every : step % c.log_every;
      if (on_log) on_log({step, l, std::chrono::duration<double, std::milli>(now - last_log).count() / n});
      last_log = now;
    }
  }
  r.initial_loss = losses.front();
  const size_t tail = std::min<size_t>(10, losses.size());
  double s = 0;
  for (size_t i = losses.size() - tail; i < losses.size(); ++i) s += losses[i];
  r.final_loss = static_cast<float>(s / static_cast<double>(tail));
  r.ratio = r.final_loss > 0 ? r.initial_loss / r.final_loss : 1e30;
  r.peak_bytes = alloc.stats().peak;
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

}  // namespace foldcore::nn
