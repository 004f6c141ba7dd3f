// ActivationArena: reserves one block from a parent allocator and hands out 256-byte aligned
// pieces by bumping a pointer. Freed pieces are reclaimed when they reach the top (LIFO), which
// matches how one Evoformer block's activations are created and dropped. mark()/release(mark)
// let a recompute segment drop everything allocated since the mark at once.
// Stats: `current` = live bytes, `peak` = high-water mark of the bump pointer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/allocator.h"

namespace foldcore {

class ActivationArena final : public Allocator {
 public:
  static constexpr size_t kAlignment = 256;
  ActivationArena(Allocator& parent, size_t capacity_bytes);
  ~ActivationArena() override;
  ActivationArena(const ActivationArena&) = delete;
  ActivationArena& operator=(const ActivationArena&) = delete;

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return parent_.device(); }
  MemStats stats() const override;
  void reset_peak() override;

  size_t capacity() const { return capacity_; }
  size_t top() const { return top_; }
  size_t live_blocks() const { return live_; }
  // A position of the bump pointer; release(m) requires every block above m to be freed already
  // or frees them (their owners must not touch them again).
  size_t mark() const { return top_; }
  void release(size_t mark);

 private:
  struct Block {
    size_t offset;
    size_t size;
    bool live;
  };
  void pop_dead();
  Allocator& parent_;
  size_t capacity_;
  char* raw_;   // from the parent
  char* base_;  // raw_ rounded up to kAlignment
  size_t top_ = 0;
  size_t peak_top_ = 0;
  size_t live_ = 0;
  size_t live_bytes_ = 0;
  size_t peak_live_bytes_ = 0;
  uint64_t n_alloc_ = 0, n_free_ = 0;
  std::vector<Block> stack_;
};

}  // namespace foldcore
