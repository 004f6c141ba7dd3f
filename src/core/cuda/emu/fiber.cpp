// Fiber switch for the CUDA host emulation (x86-64 System V).
#include "core/cuda/emu/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
#define FC_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FC_EMU_ASAN 1
#endif
#endif
#if defined(FC_EMU_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#error "the CUDA host emulation's fiber switch is written for x86-64"
#endif

// fc_emu_switch(save, to): pushes the callee-saved registers and the two FP control words, stores
// the stack pointer in *save, loads `to` and pops the same frame from there. A new fiber's stack
// is laid out as such a frame whose return address is fc_emu_fiber_start.
asm(R"(
  .text
  .globl fc_emu_switch
  .type fc_emu_switch,@function
fc_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size fc_emu_switch,.-fc_emu_switch

  .globl fc_emu_fiber_start
  .type fc_emu_fiber_start,@function
fc_emu_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size fc_emu_fiber_start,.-fc_emu_fiber_start
  .section .note.GNU-stack,"",@progbits
  .text
)");

extern "C" void fc_emu_switch(void** save_sp, void* new_sp);
extern "C" void fc_emu_fiber_start();

namespace fc_emu {

FiberStack::FiberStack(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  guard_ = page;
  size_ = (bytes + page - 1) / page * page;
  void* p = mmap(nullptr, guard_ + size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "cuda emulation: cannot map a %zu-byte fiber stack\n", size_);
    std::abort();
  }
  base_ = static_cast<char*>(p);
  mprotect(base_, guard_, PROT_NONE);
}

FiberStack::~FiberStack() { munmap(base_, guard_ + size_); }

void fiber_entry_trampoline(Fiber* f) {
#if defined(FC_EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &f->sched_bottom_, &f->sched_size_);
#endif
  f->entry_(f->arg_);
  f->yield_to_scheduler(/*final=*/true);
  std::fprintf(stderr, "cuda emulation: a finished fiber was resumed\n");
  std::abort();
}

void Fiber::start(FiberStack& stack, Entry entry, void* arg) {
  stack_ = &stack;
  entry_ = entry;
  arg_ = arg;
#if defined(FC_EMU_ASAN)
  if (stack.dirty) __asan_unpoison_memory_region(stack.bottom(), stack.size());
#endif
  stack.dirty = false;
  // Frame popped by fc_emu_switch: [fp control words][r15][r14][r13][r12][rbx][rbp][return].
  // After `ret` the stack pointer must be 16-byte aligned for the call in fc_emu_fiber_start.
  auto top = reinterpret_cast<uintptr_t>(stack.bottom() + stack.size()) & ~uintptr_t{15};
  auto* ret = reinterpret_cast<uint64_t*>(top - 24);  // ret + 8 ≡ 0 (mod 16)
  ret[0] = reinterpret_cast<uint64_t>(&fc_emu_fiber_start);
  ret[-1] = 0;                                                        // rbp
  ret[-2] = 0;                                                        // rbx
  ret[-3] = reinterpret_cast<uint64_t>(this);                         // r12: the trampoline's argument
  ret[-4] = reinterpret_cast<uint64_t>(&fiber_entry_trampoline);      // r13: what it calls
  ret[-5] = 0;                                                        // r14
  ret[-6] = 0;                                                        // r15
  ret[-7] = uint64_t{0x1f80} | (uint64_t{0x037f} << 32);              // default MXCSR, x87 control word
  sp_ = &ret[-7];
}

void Fiber::resume() {
#if defined(FC_EMU_ASAN)
  void* sched_fake = nullptr;
  __sanitizer_start_switch_fiber(&sched_fake, stack_->bottom(), stack_->size());
#endif
  fc_emu_switch(&scheduler_sp_, sp_);
#if defined(FC_EMU_ASAN)
  __sanitizer_finish_switch_fiber(sched_fake, nullptr, nullptr);
#endif
}

void Fiber::yield_to_scheduler(bool final) {
#if defined(FC_EMU_ASAN)
  __sanitizer_start_switch_fiber(final ? nullptr : &fake_stack_, sched_bottom_, sched_size_);
#else
  (void)final;
#endif
  fc_emu_switch(&sp_, scheduler_sp_);
#if defined(FC_EMU_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack_, &sched_bottom_, &sched_size_);
#endif
}

FiberStack& StackPool::get(size_t i) {
  while (stacks_.size() <= i) stacks_.push_back(std::make_unique<FiberStack>(stack_bytes_));
  return *stacks_[i];
}

}  // namespace fc_emu
