#include "core/arena.h"

#include <algorithm>

#include "core/error.h"

namespace foldcore {

ActivationArena::ActivationArena(Allocator& parent, size_t capacity_bytes)
    : parent_(parent), capacity_(capacity_bytes),
      raw_(static_cast<char*>(parent.allocate(capacity_bytes + kAlignment))) {
  // Parents guarantee less alignment than we promise; align the base ourselves.
  const auto addr = reinterpret_cast<uintptr_t>(raw_);
  base_ = raw_ + ((kAlignment - addr % kAlignment) % kAlignment);
}

ActivationArena::~ActivationArena() { parent_.deallocate(raw_, capacity_ + kAlignment); }

void* ActivationArena::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t size = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  FC_CHECK(top_ + size <= capacity_, "activation arena exhausted: need ", size, " bytes at offset ",
           top_, ", capacity ", capacity_, " bytes");
  stack_.push_back({top_, size, true});
  void* p = base_ + top_;
  top_ += size;
  peak_top_ = std::max(peak_top_, top_);
  ++live_;
  live_bytes_ += size;
  peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes_);
  ++n_alloc_;
  return p;
}

void ActivationArena::deallocate(void* ptr, size_t /*bytes*/) {
  if (ptr == nullptr) return;
  const size_t off = static_cast<size_t>(static_cast<char*>(ptr) - base_);
  // Search from the top: frees are mostly LIFO.
  for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) {
    if (it->offset == off && it->live) {
      it->live = false;
      --live_;
      live_bytes_ -= it->size;
      ++n_free_;
      pop_dead();
      return;
    }
  }
  FC_THROW("activation arena: free of a pointer it does not own (offset ", off, ")");
}

void ActivationArena::pop_dead() {
  while (!stack_.empty() && !stack_.back().live) {
    top_ = stack_.back().offset;
    stack_.pop_back();
  }
}

void ActivationArena::release(size_t mark) {
  while (!stack_.empty() && stack_.back().offset >= mark) {
    if (stack_.back().live) {
      --live_;
      live_bytes_ -= stack_.back().size;
      ++n_free_;
    }
    stack_.pop_back();
  }
  top_ = stack_.empty() ? 0 : stack_.back().offset + stack_.back().size;
  pop_dead();
}

MemStats ActivationArena::stats() const {
  MemStats s;
  s.current = live_bytes_;
  s.peak = peak_top_;
  s.reserved = capacity_;
  s.peak_reserved = capacity_;
  s.num_allocs = n_alloc_;
  s.num_frees = n_free_;
  return s;
}

void ActivationArena::reset_peak() {
  peak_top_ = top_;
  peak_live_bytes_ = live_bytes_;
}

}  // namespace foldcore
