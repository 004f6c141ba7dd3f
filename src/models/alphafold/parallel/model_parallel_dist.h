// ParallelGroup over a dist::Communicator (src/dist; MPI builds only, like this file's .cpp).
#pragma once

#include <memory>

#include "dist/communicator.h"
#include "models/alphafold/parallel/model_parallel.h"

namespace foldcore::af2 {

// The communicator must outlive the group. Null → null. `overlap`: the async gathers and switches
// (ParallelGroup::gather_async) really overlap; off, they complete at the call (for comparison).
std::shared_ptr<const ParallelGroup> make_parallel_group(dist::Communicator* comm, bool overlap = true);

// DAP and BP groups (either may be null or of size 1; BP at most 2), and optionally the replica's
// (ModelParallel::replica: dist::ProcessGrid::model(), every dap × bp rank) for the gradient sums.
ModelParallel make_model_parallel(dist::Communicator* dap, dist::Communicator* bp, bool overlap = true,
                                  dist::Communicator* replica = nullptr);

}  // namespace foldcore::af2
