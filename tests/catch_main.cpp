// Catch2's main, with one addition: a test case that ran and checked nothing fails. (Catch2's
// own -w NoAssertions also fails every SECTION that only sets up what the checks after it read,
// and it takes a single -w, which CTest's discovery spends on NoTests.) A skipped test case
// (tests/skip.hpp) checks nothing too, and is reported skipped by its marker.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace {

std::vector<std::string> cases_without_checks;  // reporter events come on the main thread

struct CasesWithoutChecks final : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    if (stats.totals.assertions.total() == 0) cases_without_checks.push_back(stats.testInfo.name);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(CasesWithoutChecks)

int main(int argc, char* argv[]) {
  const int failed = Catch::Session().run(argc, argv);
  for (const auto& name : cases_without_checks) std::fprintf(stderr, "test case '%s' checked nothing\n", name.c_str());
  if (failed != 0) return failed;
  return cases_without_checks.empty() ? 0 : 1;
}
