// The driver of the fuzz targets without libFuzzer: runs LLVMFuzzerTestOneInput once on each
// file given (a directory: on each file in it). The test suite replays the seed corpora and
// every minimised finding (fuzz/corpus/<target>/) this way with any compiler, sanitized or not.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path path(argv[i]);
    if (std::filesystem::is_directory(path)) {
      for (const auto& entry : std::filesystem::directory_iterator(path)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
    } else {
      files.push_back(path);
    }
  }
  if (files.empty()) {
    std::cerr << "usage: " << argv[0] << " FILE_OR_DIR...   (no inputs found)\n";
    return 2;
  }
  // The CLI commands print their answers; only the driver's own lines matter here.
  if (std::freopen("/dev/null", "w", stdout) == nullptr) return 2;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::cerr << "replay " << path.string() << "\n";
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::cerr << "replayed " << files.size() << " inputs\n";
  return 0;
}
