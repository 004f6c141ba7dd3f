// CUDA softmax / cross-entropy vs the CPU reference, f32 and bf16. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include "core/random.h"
#include "kernels/softmax.h"
#include "test_util.h"

namespace foldcore {
namespace {

const Shape kShapes[] = {{1, 1}, {7, 33}, {3, 4, 64}, {5, 1000}, {3, 1031}, {2, 30522}, {700, 37}};

// Tolerances: f32 — __expf/__logf (≤ 2 ulp) and reduction order: 1e-5 relative. bf16 — outputs
// rounded to 8 mantissa bits (4e-3), one ulp apart at most: 1e-2 relative.
double rtol_for(DType dt) { return dt == DType::f32 ? 1e-5 : 1e-2; }

TEST(SoftmaxCuda, ForwardBackwardMatchCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(600);
  for (DType dt : {DType::f32, DType::bf16})
    for (const Shape& s : kShapes) {
      Tensor x = randn(s, gen, 0, 3, dt), dy = randn(s, gen, 0, 1, dt);
      auto run = [&](Device dev, Tensor* dx_out) {
        Tensor y = Tensor::zeros(s, dt, dev), dx = Tensor::zeros(s, dt, dev);
        ops::softmax_forward(x.to(dev), y);
        // Backward from the CPU y so the comparison isolates the backward kernel.
        ops::softmax_backward(y.to(Device::cpu()).to(dev), dy.to(dev), dx);
        *dx_out = dx.to(Device::cpu());
        return y.to(Device::cpu());
      };
      Tensor dx_cpu, dx_gpu;
      Tensor y_cpu = run(Device::cpu(), &dx_cpu);
      Tensor y_gpu = run(Device::cuda(), &dx_gpu);
      SCOPED_TRACE(s.str() + " " + std::string(dtype_name(dt)));
      // y ≤ 1 and many entries tiny: absolute floor 1e-6 (f32) / 1e-4 (bf16).
      FC_EXPECT_CLOSE(y_gpu, y_cpu, dt == DType::f32 ? 1e-6 : 1e-4, rtol_for(dt));
      // dx = y(dy − dot) may cancel; scale the floor by |dy| ~ 3.
      FC_EXPECT_CLOSE(dx_gpu, dx_cpu, dt == DType::f32 ? 1e-5 : 1e-3, rtol_for(dt));
    }
}

TEST(SoftmaxCuda, CrossEntropyMatchesCpu) {
  FC_REQUIRE_CUDA();
  Generator gen(601);
  for (DType dt : {DType::f32, DType::bf16})
    for (const Shape& s : kShapes) {
      const int64_t c = s.back(), rows = s.product() / c;
      Tensor x = randn(s, gen, 0, 2, dt);
      Tensor labels = randint({rows}, gen, -1, c, DType::i64);  // includes ignored (-1) rows
      Tensor targets = rand_uniform(s, gen, 0.f, 2.f / static_cast<float>(c), dt);
      Tensor weights = rand_uniform({rows}, gen, 0.5f, 2.f);
      for (int mode = 0; mode < 3; ++mode) {  // hard i64, hard i32 + weights, soft (dtype of x)
        auto run = [&](Device dev, Tensor* dl_out) {
          ops::CrossEntropyArgs args;
          if (mode == 0) args.labels = labels.to(dev);
          if (mode == 1) args.labels = labels.to(DType::i32).to(dev), args.weights = weights.to(dev);
          if (mode == 2) args.targets = targets.to(dev);
          args.dscale = 0.25f;
          Tensor loss = Tensor::zeros({rows}, DType::f32, dev), dl = Tensor::zeros(s, dt, dev);
          ops::softmax_cross_entropy(x.to(dev), args, loss, dl);
          *dl_out = dl.to(Device::cpu());
          return loss.to(Device::cpu());
        };
        Tensor dl_cpu, dl_gpu;
        Tensor l_cpu = run(Device::cpu(), &dl_cpu);
        Tensor l_gpu = run(Device::cuda(), &dl_gpu);
        SCOPED_TRACE(s.str() + " " + std::string(dtype_name(dt)) + " mode " + std::to_string(mode));
        // Loss is fp32 on both sides (log-sum-exp of up to 30522 terms): 1e-5 relative + 1e-5.
        FC_EXPECT_CLOSE(l_gpu, l_cpu, 1e-5, 1e-5);
        FC_EXPECT_CLOSE(dl_gpu, dl_cpu, dt == DType::f32 ? 1e-7 : 1e-5, rtol_for(dt));
      }
    }
}

}  // namespace
}  // namespace foldcore
