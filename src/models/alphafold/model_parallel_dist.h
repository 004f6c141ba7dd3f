// ParallelGroup over a dist::Communicator (src/dist; MPI builds only, like this file's .cpp).
#pragma once

#include <memory>

#include "dist/communicator.h"
#include "models/alphafold/model_parallel.h"

namespace foldcore::af2 {

// The communicator must outlive the group. Null → null.
std::shared_ptr<const ParallelGroup> make_parallel_group(dist::Communicator* comm);

// DAP and BP groups (either may be null or of size 1). Refuses DAP and BP both above 1 (their
// combination is not implemented).
ModelParallel make_model_parallel(dist::Communicator* dap, dist::Communicator* bp);

}  // namespace foldcore::af2
