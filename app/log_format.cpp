#include "app/log_format.hpp"

#include <spdlog/pattern_formatter.h>

#include <string>

#include "core/quoted_text.hpp"

namespace kvrelay {
namespace {

// The pattern flag for a message kept on one line.
class OneLineMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& message, const std::tm&, spdlog::memory_buf_t& line) override {
    const std::string text = one_line({message.payload.data(), message.payload.size()});
    line.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<OneLineMessage>(); }
};

}  // namespace

std::unique_ptr<spdlog::formatter> one_line_formatter() {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<OneLineMessage>('*').set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %*");
  return formatter;
}

}  // namespace kvrelay
