// Gated multi-head attention (AF2 Alg. 7; BERT self-attention) and global attention (AF2 Alg. 19).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "autograd/functions.h"
#include "nn/layers.h"

namespace foldcore::nn {

struct AttentionOptions {
  int64_t c_q = 0, c_kv = 0;  // input channels of the query / key-value data (c_kv 0: = c_q)
  int64_t num_heads = 1, head_dim = 0;
  int64_t c_out = 0;          // 0: = c_q
  bool gating = true;         // AF2: sigmoid gate from the query data; BERT: false
  bool qkv_bias = false;      // AF2: false; BERT: true
  Init qkv_init = Init::glorot, output_init = Init::final;  // AF2's; BERT: bert / bert

  static AttentionOptions alphafold(int64_t c_q, int64_t c_kv, int64_t heads, int64_t head_dim, int64_t c_out);
  static AttentionOptions bert(int64_t d_model, int64_t heads);
};

// q = x_q·Wq, k = x_kv·Wk, v = x_kv·Wv per head; o = gate ⊙ softmax(q·kᵀ/√d + Σ biases)·v;
// out = o·Wo + bo. Children: q, k, v, gate (when gating), output.
class Attention : public Module {
 public:
  Attention(Scope scope, const AttentionOptions& options);
  // q_data [..., Lq, c_q], kv_data [..., Lk, c_kv] (the leading dims flattened into B);
  // biases: 4-D, broadcastable to [B, H, Lq, Lk]; cu_seqlens for packed sequences (B = 1).
  // Returns [..., Lq, c_out].
  Variable forward(const Variable& q_data, const Variable& kv_data, const std::vector<Variable>& biases = {},
                   const Tensor& cu_seqlens = {}) const;
  // The same with one more bias made by `late_bias` only after the projections (q, k, v, gate):
  // a bias still in flight (DAP's gathered pair bias, model_parallel.h) is waited for only when the
  // attention itself needs it, so the projections overlap its communication. Biases in the same
  // order as forward(biases + {late_bias()}): the same result.
  Variable forward(const Variable& q_data, const Variable& kv_data, const std::vector<Variable>& biases,
                   const std::function<Variable()>& late_bias) const;
  // Self-attention along the FIRST axis of x [L, B, c_q] (AlphaFold's column-wise attentions on a
  // tensor as it lies: the triangle attention around the ending node, the MSA column attention):
  // the projections of x as it is, the attention on their [L, B, H, d] layout (autograd::attention
  // seq_major), the output projection → [L, B, c_out]. The values of forward() on x's transpose,
  // transposed back, without either transposed copy. Biases (and late_bias's) broadcastable to
  // [B, H, L, L], as forward()'s.
  Variable forward_seq_major(const Variable& x, const std::vector<Variable>& biases,
                             const std::function<Variable()>& late_bias = {}) const;
  // A bias made from one more projection of a self-attention's input (AlphaFold's triangle
  // attention: the pair bias x·W_b [..., L, H], laid out [1, H, L, L]). `layer` joins q, k, v and
  // the gate in one projection run (autograd::linears): x's gradient is then one sum of products
  // (one kernel on CUDA, bias gradients and a bf16 result for a lone consumer included) instead of
  // that sum and a second product added to it, and x, a LayerNorm output, has one consumer. `make`
  // turns the projection into the bias, appended after `biases` (the order forward(biases +
  // {bias}) takes: the same result).
  struct InputBias {
    const Linear* layer = nullptr;
    std::function<Variable(const Variable&)> make;
  };
  // Self-attention along x's rows (x [..., L, c_q], the q and kv data), with that bias.
  Variable forward(const Variable& x, const std::vector<Variable>& biases, const InputBias& input_bias) const;
  // Along x's first axis, as forward_seq_major, with that bias (its projection [L, B, out]).
  Variable forward_seq_major(const Variable& x, const std::vector<Variable>& biases, const InputBias& input_bias) const;
  // The same without the output bias, for a fused bias+dropout+residual consumer.
  Variable forward_no_output_bias(const Variable& q_data, const Variable& kv_data,
                                  const std::vector<Variable>& biases = {}, const Tensor& cu_seqlens = {}) const;
  // Inference over keys that arrive in parts (AlphaFold's template pointwise attention visits one
  // template at a time): heads_part gives this part's ungated heads a [B, Lq, H, d] and their
  // log-sum-exp [B, H, Lq] (autograd::attention_part); parts merge with ops::attention_combine, and
  // finish_heads applies the gate (from q_data) and the output projection to the merged heads
  // a [B, Lq, H, d] → [..., Lq, c_out], as forward() does after its attention. No autograd.
  autograd::AttentionPart heads_part(const Variable& q_data, const Variable& kv_data,
                                     const std::vector<Variable>& biases = {}) const;
  Variable finish_heads(const Variable& q_data, const Variable& a) const;
  // The value projection alone, kv_data [..., L, c_kv] → [B, L, H, d] (what the heads of a single
  // key equal: its softmax weight is exactly 1). No autograd.
  Variable values(const Variable& kv_data) const;
  const Linear& output() const { return output_; }
  const AttentionOptions& options() const { return opt_; }

 private:
  Variable heads(const Variable& q_data, const Variable& kv_data, const std::vector<Variable>& biases,
                 const Tensor& cu_seqlens, const std::function<Variable()>& late_bias = {},
                 const InputBias* input_bias = nullptr) const;  // [..., Lq, H·d] before the output projection
  struct Projected {
    Variable q, k, v;  // [B, L, H, d]
    float scale;       // 1/√d
    Variable gate;     // [B, Lq, H, d] when asked for and gating is on
    Variable extra;    // input_bias's projection, [..., Lq, out], when asked for
  };
  // With `gate` (and gating on), Projected::gate is the gate's projection [B, Lq, H, d] too. For
  // self-attention (q_data and kv_data the same Variable) the projections run as one op
  // (nn::project: x cast once, one strided-batch GEMM, one dx in the backward); `extra` (a Linear
  // of that input, self-attention only) joins it.
  Projected project(const Variable& q_data, const Variable& kv_data, bool gate = false,
                    const Linear* extra = nullptr) const;
  // q, k, v (and the gate, with `gate`; and `extra`'s projection, shaped x's shape with its width
  // last) of one input as one op (nn::project), shaped q_shape, kv_shape, kv_shape (, q_shape).
  std::vector<Variable> self_projections(const Variable& x, const Shape& q_shape, const Shape& kv_shape, bool gate,
                                         const Linear* extra = nullptr) const;
  Variable seq_major(const Variable& x, const std::vector<Variable>& biases, const std::function<Variable()>& late_bias,
                     const InputBias* input_bias) const;
  AttentionOptions opt_;
  Linear q_, k_, v_;
  std::unique_ptr<Linear> gate_;
  Linear output_;
};

// AF2 Alg. 19 (extra-MSA column attention): one mean-pooled query per head, keys and values shared
// by the heads, per-sequence gates. m [..., S, c_in], mask [..., S] (1 = present) → [..., S, c_out].
class GlobalAttention : public Module {
 public:
  GlobalAttention(Scope scope, int64_t c_in, int64_t num_heads, int64_t head_dim, int64_t c_out = 0);
  Variable forward(const Variable& m, const Tensor& mask) const;

 private:
  int64_t c_in_, heads_, dim_, c_out_;
  Linear q_, k_, v_, gate_, output_;
};

}  // namespace foldcore::nn
