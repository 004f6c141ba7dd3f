// A graceful stop for long runs (`foldcore train`): while a StopSignals lives, the first stop
// signal is recorded instead of ending the process, with one line on stderr saying so, and the run
// polls received() at its step boundaries, writes its checkpoint there and stops. The stop signals:
// SIGUSR1 always (`sbatch --signal=USR1@180` asks Slurm for it three minutes before a job's time
// limit; mpirun and srun forward it to every rank); SIGTERM and SIGINT too in a single process
// (Slurm's time limit or preemption, Ctrl-C). In a job of several ranks those two stay with the
// dist runtime's handler (dist/runtime.h), which ends the rank at once naming it and its collective:
// there a SIGTERM mostly means that another rank failed and the launcher is ending the job, so
// waiting for the step to end would wait for a peer that is gone. A second SIGTERM or SIGINT ends
// the process at once, as it would without the handlers (a Ctrl-C pressed twice).
#pragma once

namespace foldcore::apps {

class StopSignals {
 public:
  // Installs the handlers (one StopSignals at a time): SIGUSR1, and with `terminate_and_interrupt`
  // SIGTERM and SIGINT.
  explicit StopSignals(bool terminate_and_interrupt);
  ~StopSignals();  // puts the previous handlers back
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first stop signal received since the handlers were installed, or 0.
  static int received();
};

}  // namespace foldcore::apps
