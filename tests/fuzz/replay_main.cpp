// The corpus replay driver of the normal builds: runs a harness's LLVMFuzzerTestOneInput over
// every file named on the command line (directories recursively, in name order), so the suite
// replays each seed corpus without libFuzzer. A run that finds no input fails: an empty or
// misnamed corpus folder would otherwise pass unnoticed.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

std::vector<std::filesystem::path> inputs_under(const std::filesystem::path& root) {
  std::vector<std::filesystem::path> inputs;
  if (std::filesystem::is_directory(root)) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
      if (entry.is_regular_file()) inputs.push_back(entry.path());
    }
    std::sort(inputs.begin(), inputs.end());
  } else if (std::filesystem::is_regular_file(root)) {
    inputs.push_back(root);
  }
  return inputs;
}

std::string contents_of(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t replayed = 0;
  for (int i = 1; i < argc; ++i) {
    for (const auto& path : inputs_under(argv[i])) {
      const std::string bytes = contents_of(path);
      LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
      ++replayed;
    }
  }
  if (replayed == 0) {
    std::fprintf(stderr, "replay: no input found in the paths given (want corpus folders or files)\n");
    return 1;
  }
  std::printf("replay: ran %zu inputs\n", replayed);
  return 0;
}
