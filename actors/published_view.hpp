#pragma once
// An immutable view one actor publishes and other threads read without asking it: the
// publisher swaps in a complete new view, a reader holds the one it loaded for as long as it
// needs it. The catalog's admission view and membership's routing view are published so.
#include <atomic>
#include <memory>

namespace kvrelay {

template <class View>
class PublishedView {
 public:
  PublishedView() : view_(std::make_shared<const View>()) {}
  std::shared_ptr<const View> current() const { return view_.load(); }
  void publish(std::shared_ptr<const View> view) { view_.store(std::move(view)); }

 private:
  std::atomic<std::shared_ptr<const View>> view_;
};

}  // namespace kvrelay
