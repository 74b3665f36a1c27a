#pragma once
// docs/metrics.md held to what a relay serves: the metric families of a /metrics page that the
// document does not name.
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace kvrelay::test {

struct FamiliesOnPage {
  std::size_t served = 0;                 // "# TYPE" lines on the page
  std::vector<std::string> undocumented;  // their names that docs/metrics.md lacks (as `name`)
};

inline FamiliesOnPage undocumented_families(const std::string& page) {
  std::ifstream file(std::string(KVRELAY_SOURCE_DIR) + "/docs/metrics.md");
  const std::string docs((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  FamiliesOnPage families;
  std::istringstream lines(page);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("# TYPE ")) continue;
    const std::string name = line.substr(7, line.find(' ', 7) - 7);
    ++families.served;
    if (docs.find("`" + name + "`") == std::string::npos) families.undocumented.push_back(name);
  }
  return families;
}

}  // namespace kvrelay::test
