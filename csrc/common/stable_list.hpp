#pragma once
// A list whose elements never move once added (their addresses are handed
// to the transport), with room for the first few inside the owner.
//
// Why not std::deque: libstdc++'s deque allocates its map and a 512-byte
// block before the first element, two allocations per operation on the
// small-message path, where most operations post two to eight requests.

#include <cstddef>
#include <deque>
#include <memory>
#include <new>
#include <utility>

namespace ucxcoll {

template <typename T, std::size_t InlineCount>
class StableList {
 public:
  StableList() = default;
  StableList(const StableList&) = delete;
  StableList& operator=(const StableList&) = delete;
  ~StableList() {
    for (std::size_t i = 0; i < inlineUsed_; ++i) {
      std::destroy_at(inlineAt(i));
    }
  }

  template <typename... Args>
  T& emplace_back(Args&&... args) {
    if (inlineUsed_ < InlineCount) {
      T* element = std::construct_at(inlineAt(inlineUsed_), std::forward<Args>(args)...);
      ++inlineUsed_;
      return *element;
    }
    if (!overflow_) {
      overflow_ = std::make_unique<std::deque<T>>();
    }
    return overflow_->emplace_back(std::forward<Args>(args)...);
  }

  std::size_t size() const { return inlineUsed_ + (overflow_ ? overflow_->size() : 0); }

  template <typename List, typename Element>
  class Iterator {
   public:
    Iterator(List* list, std::size_t index) : list_(list), index_(index) {}
    Element& operator*() const { return list_->at(index_); }
    Element* operator->() const { return &list_->at(index_); }
    Iterator& operator++() {
      ++index_;
      return *this;
    }
    bool operator==(const Iterator& other) const { return index_ == other.index_; }

   private:
    List* list_;
    std::size_t index_;
  };
  using iterator = Iterator<StableList, T>;
  using const_iterator = Iterator<const StableList, const T>;

  iterator begin() { return {this, 0}; }
  iterator end() { return {this, size()}; }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size()}; }

  T& at(std::size_t index) { return index < InlineCount ? *inlineAt(index) : (*overflow_)[index - InlineCount]; }
  const T& at(std::size_t index) const {
    return index < InlineCount ? *inlineAt(index) : (*overflow_)[index - InlineCount];
  }

 private:
  T* inlineAt(std::size_t index) { return std::launder(reinterpret_cast<T*>(storage_) + index); }
  const T* inlineAt(std::size_t index) const { return std::launder(reinterpret_cast<const T*>(storage_) + index); }

  alignas(T) std::byte storage_[sizeof(T) * InlineCount];
  std::size_t inlineUsed_ = 0;
  std::unique_ptr<std::deque<T>> overflow_;
};

}  // namespace ucxcoll
