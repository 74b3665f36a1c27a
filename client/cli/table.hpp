#pragma once
// Column-aligned text tables for the CLI's human output.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace kvrelay::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.size() == 1; }

  std::string render() const {
    std::vector<std::size_t> widths;
    for (const auto& row : rows_) {
      widths.resize(std::max(widths.size(), row.size()));
      for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
    }
    std::string out;
    for (const auto& row : rows_) {
      for (std::size_t i = 0; i < row.size(); ++i) {
        out += row[i];
        if (i + 1 < row.size()) out.append(widths[i] - row[i].size() + 2, ' ');
      }
      out += '\n';
    }
    return out;
  }
  void print() const { std::fputs(render().c_str(), stdout); }

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace kvrelay::cli
