// main() for a fuzz harness built without libFuzzer (any compiler; the test
// build): runs LLVMFuzzerTestOneInput once on every file named on the
// command line and on every file of every directory named (not recursive,
// in name order, names starting with '.' skipped: .gitkeep). CTest runs it
// over fuzz/corpus/<harness>/ and fuzz/regressions/<harness>/, so under the
// asan preset every committed input and every crash reproducer runs with
// ASan + UBSan on each CI run.
//
// Each input is copied into a buffer of exactly its size, as libFuzzer does,
// so that ASan sees a read past its end. Fails (exit 1) on a path that does
// not exist and when there is no input at all: a replay of nothing would
// pass while checking nothing.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

int replay(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
        std::fprintf(stderr, "replay: cannot read %s\n", file.c_str());
        return 1;
    }
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto exact = std::make_unique<std::uint8_t[]>(bytes.size());
    std::copy(bytes.begin(), bytes.end(), exact.get());
    std::printf("replay: %s (%zu bytes)\n", file.c_str(), bytes.size());
    std::fflush(stdout);  // the last name printed is the input that crashed
    LLVMFuzzerTestOneInput(exact.get(), bytes.size());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::size_t inputs = 0;
    for (int i = 1; i < argc; ++i) {
        const std::filesystem::path arg(argv[i]);
        if (std::filesystem::is_directory(arg)) {
            std::vector<std::filesystem::path> files;
            for (const auto& entry : std::filesystem::directory_iterator(arg))
                if (entry.is_regular_file() && entry.path().filename().string().front() != '.')
                    files.push_back(entry.path());
            std::sort(files.begin(), files.end());
            for (const auto& f : files) {
                if (replay(f) != 0) return 1;
                ++inputs;
            }
        } else if (std::filesystem::is_regular_file(arg)) {
            if (replay(arg) != 0) return 1;
            ++inputs;
        } else {
            std::fprintf(stderr, "replay: %s is neither a file nor a directory\n", argv[i]);
            return 1;
        }
    }
    if (inputs == 0) {
        std::fprintf(stderr, "replay: no inputs; give corpus files or directories\n");
        return 1;
    }
    std::printf("replay: %zu inputs, all passed\n", inputs);
    return 0;
}
