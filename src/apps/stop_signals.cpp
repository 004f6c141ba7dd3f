#include "apps/stop_signals.h"

#include <unistd.h>

#include <csignal>
#include <cstring>

#include "core/error.h"

namespace foldcore::apps {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGUSR1};
constexpr int kCount = sizeof(kSignals) / sizeof(kSignals[0]);

volatile std::sig_atomic_t g_received = 0;
struct sigaction g_previous[kCount];
bool g_set[kCount] = {};
bool g_installed = false;

// Only async-signal-safe calls here: write, sigaction, raise.
extern "C" void on_stop_signal(int sig) {
  if (g_received != 0) {
    if (sig == SIGUSR1) return;  // a repeated warning
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    raise(sig);
    return;
  }
  g_received = sig;
  const char* msg = sig == SIGTERM  ? "foldcore: SIGTERM received: stopping after this step, with a checkpoint "
                                      "(send it again to stop at once)\n"
                    : sig == SIGINT ? "foldcore: SIGINT received: stopping after this step, with a checkpoint "
                                      "(press Ctrl-C again to stop at once)\n"
                                    : "foldcore: SIGUSR1 received: stopping after this step, with a checkpoint\n";
  const ssize_t ignored = write(STDERR_FILENO, msg, std::strlen(msg));
  (void)ignored;
}

}  // namespace

StopSignals::StopSignals(bool terminate_and_interrupt) {
  FC_CHECK(!g_installed, "StopSignals: the handlers are already installed");
  g_received = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a blocking read or write in progress carries on
  for (int i = 0; i < kCount; ++i) {
    g_set[i] = kSignals[i] == SIGUSR1 || terminate_and_interrupt;
    if (g_set[i]) sigaction(kSignals[i], &sa, &g_previous[i]);
  }
  g_installed = true;
}

StopSignals::~StopSignals() {
  for (int i = 0; i < kCount; ++i)
    if (g_set[i]) sigaction(kSignals[i], &g_previous[i], nullptr);
  g_installed = false;
}

int StopSignals::received() { return static_cast<int>(g_received); }

}  // namespace foldcore::apps
