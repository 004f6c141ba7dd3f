// Helpers shared by the Evoformer modules (and the template pair stack, which reuses them):
// official-key registration of the nn building blocks, AlphaFold's mask bias, and inference-time
// chunking along a long axis.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "models/alphafold/params/param_table.h"
#include "nn/attention.h"
#include "nn/transformer.h"

namespace foldcore::af2 {

using autograd::Variable;

// The parameter "<module path>/<suffix>" of `m` (e.g. suffix "q/weight"); Error if absent.
Tensor module_param(const nn::Module& m, const std::string& suffix);

// Every module's add_af2_params binds the ParamStore's views, which exist only after finalize().
void require_finalized(const autograd::ParamStore* params, const std::string& module_path);

// "<key>//weights" and "<key>//bias" (no bias when the Linear has none).
void add_linear_af2_params(const nn::Linear& l, Af2ParamTable& t, const std::string& key, int64_t idx);
// "<key>//scale", "<key>//offset".
void add_layer_norm_af2_params(const nn::LayerNorm& ln, Af2ParamTable& t, const std::string& key, int64_t idx);
// AlphaFold's gated Attention module "<key>//{query_w, key_w, value_w, gating_w, gating_b, output_w,
// output_b}": [c, H, d] → our [c, H·d]; [H, d, c] → [H·d, c]; [H, d] → [H·d].
void add_attention_af2_params(const nn::Attention& a, Af2ParamTable& t, const std::string& key, int64_t idx);
// GlobalAttention: as above, with key_w/value_w [c, d] shared by the heads.
void add_global_attention_af2_params(const nn::GlobalAttention& a, Af2ParamTable& t, const std::string& key,
                                     int64_t idx);
// AlphaFold's Transition "<key>/{input_layer_norm, transition1, transition2}".
void add_transition_af2_params(const nn::Transition& tr, Af2ParamTable& t, const std::string& key, int64_t idx);

// 1e9·(mask − 1): 0 where present, −1e9 where masked (AlphaFold's attention mask bias), same shape,
// f32, on mask's device.
Tensor mask_bias(const Tensor& mask);

// A 0/1 mask in `dtype` (itself when it already is): multiplying a bf16 value by it gives the
// value or 0, the same as the fp32 product, so a product of a bf16 activation with its mask can
// stay bf16. Only for masks of zeros and ones (AlphaFold's sequence, MSA and pair masks).
Tensor mask_as(const Tensor& mask, DType dtype);

// Inference-time chunking (OpenFold's chunk_layer, AF2's inference_subbatch): evaluates
// f(start, len) on slices [start, start + len) of an axis of length n and writes each result into
// the slice of one preallocated output along `out_axis` (the results' extents along it must be
// len). Runs f(0, n) once when chunk <= 0, chunk >= n, or grad mode is on (training keeps the
// graph whole; chunking there would save nothing). Chunked and whole results are identical up to
// float reassociation inside the chunked ops (none of the Evoformer's: every slice is computed by
// the same kernels on the same data).
//
// `into` (inference only): when defined, the results are not gathered into a new tensor but ADDED
// into `into` (the residual stream the update belongs to, shaped like the whole result; any
// strides), slice by slice as each chunk is computed (add_into), and `into` is returned: the
// residual add runs in the chunk's epilogue, so no result-sized update ever exists. f(s, len) must
// not read what earlier chunks wrote, i.e. a slice of the update may depend on the stream only
// through its own slice or through values computed before the first chunk (every Evoformer
// module qualifies: see evoformer.h).
Variable run_chunked(int64_t n, int64_t chunk, const std::function<Variable(int64_t start, int64_t len)>& f,
                     int out_axis = 0, const Tensor& into = Tensor());

// dst += y in place: dst (any strides, f32/bf16/f16) and y (same shape, any float dtype); the sum is
// taken in fp32 and rounded once to dst's dtype. For f32 dst and y it is the residual add
// bias_dropout_residual(y, {}, dst) makes, bit for bit; for a contiguous dst with one of the two
// fp32 and the other 16-bit, it is that op's mixed kernel (one pass). Temporaries: one fp32 copy of
// the slice when dst is strided, or the dtypes differ and neither is fp32. No autograd (inference
// only).
void add_into(const Tensor& dst, const Tensor& y);

// The residual add of an Evoformer-style stream: x + dropout(update). In no-grad mode `in_place`
// lets the add overwrite x's storage when nothing else refers to it (autograd checks the storage's
// owners); callers pass it only for tensors they created, so a caller's input is never
// overwritten. A bf16 stream (EmbeddingsAndEvoformer's stream_dtype) keeps its dtype: the fp32
// sum is rounded once into it (bias_dropout_residual's rule for an fp32 update, or add_into for an
// f16 update in no-grad mode) instead of promoting the stream to fp32.
Variable stream_residual(const Variable& x, const Variable& update, const autograd::DropoutSpec& d, bool in_place);
// stream_residual and the next module's input LayerNorm of its result in one pass: {x', y} with
// y = norm.forward_for_gemm(x') (nn::LayerNorm::residual_forward_for_gemm), for the module to take
// as its normalised input; the same values and gradients as the two made apart. Where the add is
// add_into's (a 16-bit inference stream with an update of the other 16-bit dtype),
// {stream_residual(…), {}}.
std::pair<Variable, Variable> stream_residual_norm(const Variable& x, const Variable& update,
                                                   const autograd::DropoutSpec& d, bool in_place,
                                                   const nn::LayerNorm& norm);
// Whether Evoformer blocks in training make each next module's input LayerNorm in their residual
// adds (stream_residual_norm; the default) or apart, in the module, as before (false). The same
// values and gradients either way; FOLDCORE_RESIDUAL_LN=fused|apart sets the initial choice.
void set_residual_norm_fused(bool on);
bool residual_norm_fused();

// The storage of a stream for in-place updates: v's own tensor when `own` and v is its only holder
// (whole and contiguous, no other handle or view), else a fresh copy that replaces v's value (so a
// caller's tensor is never changed). No autograd (inference only).
Tensor own_stream(Variable& v, bool own);

// Masks derived from the stacks' msa_mask / pair_mask (the attention's key-mask biases, the
// transposed masks of the column-wise modules, the masks in the edges' dtype, the outer product
// mean's normaliser) are the same in every block and pass of a training step. Inside a
// DerivedMaskScope each is made once, at its first use, and kept until the outermost scope on the
// thread ends (af2_train_step holds one over its forward and backward, so the recomputed blocks
// reuse them too); without a scope derived_mask just calls make(). An entry is keyed by its source
// tensor (storage, offset, shape, strides, dtype) and `what`, and keeps the source alive so that
// its storage cannot come back under the same key; at most kMaxDerivedMasks entries are kept (the
// rest are made each time). Masks are never written in place, so an entry stays valid.
class DerivedMaskScope {
 public:
  DerivedMaskScope();
  ~DerivedMaskScope();
  DerivedMaskScope(const DerivedMaskScope&) = delete;
  DerivedMaskScope& operator=(const DerivedMaskScope&) = delete;
};
constexpr size_t kMaxDerivedMasks = 64;
Tensor derived_mask(const Tensor& src, const std::string& what, const std::function<Tensor()>& make);
// How many derived masks the current scope holds (0 outside one): for tests.
size_t derived_mask_count();
// mask.transpose(0, 1).contiguous() and mask_as(mask, dtype), made once per scope.
Tensor transposed_mask(const Tensor& mask);
Tensor mask_in(const Tensor& mask, DType dtype);

// AlphaFold's row-wise gated attention (Alg. 7 / 8 / 13 core): every row b of x [B, L, c] (already
// layer-normed) attends over its L entries, with the key mask bias 1e9·(mask[b] − 1) ([B, 1, 1, L])
// and, when defined, a pair bias [1, H, L, L] shared by all rows. Chunked over rows (inference).
// Returns [B, L, c_out] (with the output bias).
// `into`: as run_chunked's ([B, L, c_out], the rows' stream). `norm`: x is the raw stream and
// each row chunk is layer-normed as it is read (no whole LN(x) beside the stream: in chunked
// inference the MSA attentions held one more MSA-sized copy; LN is per row, so the values are
// the same).
Variable row_attention(const nn::Attention& att, const Variable& x, const Variable& pair_bias, const Tensor& mask,
                       int64_t chunk, const Tensor& into = Tensor(), const nn::LayerNorm* norm = nullptr);
// The same with the pair bias made by `pair_bias` (once) only after the first row chunk's
// projections (nn::Attention's late bias): DAP's gathered bias arrives while they run.
Variable row_attention(const nn::Attention& att, const Variable& x, const std::function<Variable()>& pair_bias,
                       const Tensor& mask, int64_t chunk, const Tensor& into = Tensor(),
                       const nn::LayerNorm* norm = nullptr);
// The same with the pair bias projected from x itself in the projections' run
// (nn::Attention::InputBias: the triangle attention's), unchunked (every row's projections make
// the bias).
Variable row_attention(const nn::Attention& att, const Variable& x, const nn::Attention::InputBias& input_bias,
                       const Tensor& mask, const Tensor& into = Tensor());
// The column-wise counterpart, unchunked: x [L, B, c] (already layer-normed) as it lies, every
// column b attending over its L entries (nn::Attention::forward_seq_major), with the key mask bias
// of mask [B, L] (the columns' masks: the transposed mask of x's [L, B]) and, when defined, a pair
// bias [1, H, L, L] in the columns' terms. Returns [L, B, c_out]: the values of row_attention on
// x's transpose, transposed back, without the two transposed copies.
Variable column_attention(const nn::Attention& att, const Variable& x, const Variable& pair_bias, const Tensor& mask);
Variable column_attention(const nn::Attention& att, const Variable& x, const nn::Attention::InputBias& input_bias,
                          const Tensor& mask);
// The pair bias of Alg. 7 line 3 / Alg. 13 line 3: b[h, i, j] = Σ_c z[i, j, c] w[c, h] (no bias),
// z [L, L, c_z] layer-normed → [1, H, L, L].
// `swapped`: the bias of the pair with its residue axes swapped (b[h, i, j] from z_ln[j, i]), for
// the ending node, without swapping z_ln itself.
Variable pair_bias(const nn::Linear& feat_2d, const Variable& z_ln, bool swapped = false);
// That bias's layout from the projection b = z_ln·w [L, L, H] (→ [1, H, L, L], swapped as above).
Variable pair_bias_layout(const Variable& b, bool swapped);
// The same for chunked inference, without a pair-sized LN(z): z_ln_rows(s, len) gives the
// layer-normed rows [len, L, c_z] (recomputed per chunk), whose bias rows are written into the
// [1, H, L, L] result chunk by chunk. No autograd graph (inference only).
Tensor pair_bias_chunked(const nn::Linear& feat_2d, const std::function<Variable(int64_t, int64_t)>& z_ln_rows,
                         int64_t n, int64_t chunk);

// A module's normalised input (its input LayerNorm made by the preceding residual add,
// stream_residual_norm), checked: undefined, or of x's shape where the module runs unchunked (grad
// mode, or chunk ≤ 0 or ≥ rows, the rows it would chunk). `module`: its class and path, for the
// message.
void check_normalised_input(const std::string& module, const Variable& normed, const Variable& x, int64_t chunk,
                            int64_t rows);

// nn::Transition (LN → Linear+ReLU → Linear: AF2 Alg. 9/15) chunked along axis 0 of x; `into` as
// run_chunked's (x's own stream: x += transition(x), row chunk by row chunk).
// normed: x layer-normed by tr.norm() for the GEMMs (stream_residual_norm), taken instead of
// normalising x (unchunked only).
Variable transition_forward(const nn::Transition& tr, const Variable& x, int64_t chunk, const Tensor& into = Tensor(),
                            const Variable& normed = Variable());

}  // namespace foldcore::af2
