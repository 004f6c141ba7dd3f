// `foldcore info`: what this build contains and which devices it sees.
#include <cstdio>

#include "apps/commands.h"
#include "core/allocator.h"
#include "core/device.h"

namespace foldcore::apps {

void add_info_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("info", "Print build configuration and visible devices");
  set_action(sub, [] {
    std::printf("{\"cuda_built\": %s, \"cuda_devices\": %d, \"blas\": %s, \"hdf5\": %s}\n",
                cuda_built() ? "true" : "false", cuda_device_count(),
#ifdef FOLDCORE_HAVE_BLAS
                "true",
#else
                "false",
#endif
#ifdef FOLDCORE_HAVE_HDF5
                "true"
#else
                "false"
#endif
    );
    return 0;
  });
}

}  // namespace foldcore::apps
