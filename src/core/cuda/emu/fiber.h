// Fibers for the CUDA host emulation: each emulated GPU thread of a block runs on its own stack,
// and control moves between them only at barriers, warp operations and thread exit (cooperative
// scheduling on one OS thread). The switch is a few instructions of x86-64 assembly that save the
// callee-saved registers, the SSE control word and the x87 control word, so a switch costs
// nanoseconds (ucontext's swapcontext makes a system call per switch).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace fc_emu {

// A stack with a guard page below it: a kernel whose locals overflow the stack faults at once
// instead of corrupting the neighbouring fiber.
class FiberStack {
 public:
  explicit FiberStack(size_t bytes);
  ~FiberStack();
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;
  char* bottom() const { return base_ + guard_; }
  size_t size() const { return size_; }
  // Set when a fiber was dropped mid-kernel (an error): its frames' AddressSanitizer redzones
  // are still poisoned and must be cleared before the stack is reused. A fiber that finished
  // normally leaves nothing a later fiber's frames do not overwrite on entry.
  bool dirty = false;

 private:
  char* base_ = nullptr;
  size_t guard_ = 0, size_ = 0;
};

// One execution context. start() prepares it to run entry(arg) on `stack`; resume() switches to
// it from the scheduler and returns when the fiber calls yield_to_scheduler() (or finishes, which
// is a final yield). A fiber never returns from entry: it yields for the last time and is dropped.
class Fiber {
 public:
  using Entry = void (*)(void* arg);
  void start(FiberStack& stack, Entry entry, void* arg);
  void resume();
  // Called on the fiber's own stack. `final` tells AddressSanitizer the fiber's stack is done.
  void yield_to_scheduler(bool final = false);

 private:
  void* sp_ = nullptr;            // saved stack pointer of the fiber
  void* scheduler_sp_ = nullptr;  // saved stack pointer of the scheduler while the fiber runs
  FiberStack* stack_ = nullptr;
  // AddressSanitizer bookkeeping (unused without it).
  void* fake_stack_ = nullptr;
  const void* sched_bottom_ = nullptr;
  size_t sched_size_ = 0;
  friend void fiber_entry_trampoline(Fiber* f);
  Entry entry_ = nullptr;
  void* arg_ = nullptr;
};

// Stacks reused from launch to launch; grows to the largest block seen.
class StackPool {
 public:
  explicit StackPool(size_t stack_bytes) : stack_bytes_(stack_bytes) {}
  FiberStack& get(size_t i);

 private:
  size_t stack_bytes_;
  std::vector<std::unique_ptr<FiberStack>> stacks_;
};

}  // namespace fc_emu
