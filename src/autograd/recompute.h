// Recompute segments (activation checkpointing; AF2 suppl. 1.11.8, one per Evoformer block).
//
//   outs = recompute(fn, inputs, {&dropout_gen});
//
// Forward: fn runs in no-grad mode, so none of its intermediate activations is kept; only the
// segment's inputs are saved (and its outputs live on as usual). Backward: the generators are
// rewound to the offsets they had when the forward started, fn is rerun with grad enabled on
// fresh leaves holding the saved inputs, and the output grads are backpropagated through that
// graph; parameters used inside fn get their gradients there, the inputs' grads flow on.
// Dropout inside fn reserves its Philox offsets from the listed generators, so the rerun draws
// exactly the same masks: EVERY generator fn draws from must be listed. fn must be a pure
// function of its inputs, parameters and those generators. The rerun happens under the autocast
// mode of the forward (the backward usually runs outside the forward's AutocastGuard).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "autograd/variable.h"
#include "core/philox.h"

namespace foldcore::autograd {

using SegmentFn = std::function<std::vector<Variable>(const std::vector<Variable>&)>;

std::vector<Variable> recompute(const SegmentFn& fn, const std::vector<Variable>& inputs,
                                const std::vector<Generator*>& generators = {});

// The trainable leaves (parameters) a recompute node's forward handed to autograd functions
// (leaf_use.h): those its backward gives gradients to. Null when `fn` is not a recompute node's.
const std::vector<std::shared_ptr<VariableImpl>>* recompute_leaves(const Function& fn);

}  // namespace foldcore::autograd
