// A small MPI program for tests/dist/test_fault_tolerance.cpp: every rank all-reduces in a loop;
// one rank misbehaves after a few rounds.
//   dist_fault_helper kill <rank>   that rank kills itself with SIGKILL (a crashed process)
//   dist_fault_helper hang <rank>   that rank stops calling collectives and sleeps (a hung process)
// The survivors must end within the watchdog timeout, non-zero, saying which rank and collective.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/tensor.h"
#include "dist/runtime.h"

int main(int argc, char** argv) {
  foldcore::dist::Runtime runtime(argc, argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: dist_fault_helper kill|hang <rank>\n");
    return 2;
  }
  const std::string mode = argv[1];
  const int victim = std::atoi(argv[2]);
  auto world = runtime.world(foldcore::Device::cpu());
  foldcore::Tensor t = foldcore::Tensor::full({4096}, 1.0, foldcore::DType::f32);
  for (int round = 0; round < 1000000; ++round) {
    if (round == 3 && world->rank() == victim) {
      std::fprintf(stderr, "helper: rank %d goes %s\n", victim, mode == "kill" ? "down (SIGKILL)" : "silent");
      std::fflush(stderr);
      if (mode == "kill") std::raise(SIGKILL);
      std::this_thread::sleep_for(std::chrono::seconds(300));
      return 0;
    }
    world->all_reduce(t);
    t.fill_(1.0);
  }
  return 0;  // not reached in a test: some rank always misbehaves
}
