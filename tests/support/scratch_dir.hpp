// A fresh directory for one test's files, removed with everything in it when
// the test ends.
//
// Tests that write files never use fixed names in shared places: two runs of
// the suite at once (two CI jobs on one machine, `ctest -j`) would overwrite
// each other's files. Each scratch_dir is a new directory made by mkdtemp in
// the system temp folder (TMPDIR), unique to this process and this object.
#pragma once

#include <stdlib.h>  // mkdtemp (POSIX)

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace kvpolicy::testing {

class scratch_dir {
public:
    scratch_dir() {
        std::string pattern = (std::filesystem::temp_directory_path() / "kvpolicy-test-XXXXXX").string();
        if (mkdtemp(pattern.data()) == nullptr)
            throw std::runtime_error("scratch_dir: mkdtemp(" + pattern + ") failed: " + std::strerror(errno) +
                                     "; set TMPDIR to a writable directory");
        path_ = pattern;
    }
    scratch_dir(const scratch_dir&) = delete;
    scratch_dir& operator=(const scratch_dir&) = delete;
    ~scratch_dir() {
        std::error_code ignored;  // a destructor cannot throw; a leftover directory is harmless
        std::filesystem::remove_all(path_, ignored);
    }

    [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
    /// The path of `name` inside this directory (not created).
    [[nodiscard]] std::string file(std::string_view name) const { return (path_ / name).string(); }
    /// Writes `text` to `name` inside this directory; returns its path.
    std::string write(std::string_view name, std::string_view text) const {
        const std::string p = file(name);
        std::ofstream out(p, std::ios::binary);
        out.write(text.data(), static_cast<std::streamsize>(text.size()));
        if (!out) throw std::runtime_error("scratch_dir: cannot write " + p);
        return p;
    }

private:
    std::filesystem::path path_;
};

}  // namespace kvpolicy::testing
