// Shared by the GPU benchmarks: the device's name for the table header,
// event timing on a stream, medians, a --reps/--json command line, and the
// bound each figure is held to: the bytes it must move at the bandwidth
// measured in the same run (device-to-device copy, bytes read + written),
// printed next to the figure so the distance to the limit is visible.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <kvpolicy/cuda/check.cuh>
#include <kvpolicy/cuda/memory.cuh>
#include <kvpolicy/sparse/kv_element.hpp>

namespace kvpolicy::bench {

// Deterministic pseudo-random values in [-1, 1), stored as T (fp32, bf16 or
// fp16: rounded to nearest), without a host round trip: the benches' inputs
// (one program per bench, so one definition each).
template <kv_element T>
__global__ void fill_uniform_kernel(T* x, std::size_t n, std::uint32_t seed) {
    const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
    for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
        std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ seed ^ static_cast<std::uint32_t>(i >> 32);
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = from_float<T>(static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
    }
}

template <kv_element T>
void fill_uniform(T* x, std::size_t n, std::uint32_t seed) {
    fill_uniform_kernel<T><<<1024, 256>>>(x, n, seed);
    KVPOLICY_CUDA_CHECK(cudaGetLastError());
    KVPOLICY_CUDA_CHECK(cudaDeviceSynchronize());
}

inline std::string gpu_name() {
    int device = 0;
    KVPOLICY_CUDA_CHECK(cudaGetDevice(&device));
    cudaDeviceProp p{};
    KVPOLICY_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
    return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
           std::to_string(p.multiProcessorCount) + " SMs)";
}

inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

/// Microseconds of one run of `enqueue()` on `stream`, timed by events around it.
template <class F>
double time_once_us(cudaStream_t stream, F&& enqueue) {
    cuda::event_handle start(true), stop(true);
    KVPOLICY_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    enqueue();
    KVPOLICY_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    KVPOLICY_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float ms = 0.0f;
    KVPOLICY_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    return 1000.0 * ms;
}

/// Median microseconds of `reps` runs of `enqueue()` on `stream`, timed by
/// events around each run, after one untimed warm-up run.
template <class F>
double time_gpu_us(cudaStream_t stream, int reps, F&& enqueue) {
    enqueue();
    KVPOLICY_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) t.push_back(time_once_us(stream, enqueue));
    return median(t);
}

/// One timed run; a run of a second or more is the measurement (repeating a
/// long prefill only costs time), a shorter one is followed by time_gpu_us.
template <class F>
double time_long_us(cudaStream_t stream, int reps, F&& enqueue) {
    const double once = time_once_us(stream, enqueue);
    return once >= 1e6 ? once : time_gpu_us(stream, reps, enqueue);
}

/// Median wall-clock microseconds of `reps` runs of `run()` (which must
/// finish its work, host or device, before returning), after a warm-up.
template <class F>
double time_wall_us(int reps, F&& run) {
    run();
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        run();
        const auto t1 = std::chrono::steady_clock::now();
        t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    return median(t);
}

/// The device's copy bandwidth, measured: bytes read + bytes written per
/// second of a device-to-device cudaMemcpyAsync of `bytes` (median of
/// `reps`). What a bandwidth-bound kernel is held to.
inline double measure_d2d_bytes_per_s(cudaStream_t stream, std::size_t bytes = std::size_t{1} << 30, int reps = 10) {
    cuda::device_buffer<unsigned char> from(bytes), to(bytes);
    KVPOLICY_CUDA_CHECK(cudaMemsetAsync(from.get(), 1, bytes, stream));
    const double us = time_gpu_us(stream, reps, [&] {
        KVPOLICY_CUDA_CHECK(cudaMemcpyAsync(to.get(), from.get(), bytes, cudaMemcpyDeviceToDevice, stream));
    });
    return 2.0 * static_cast<double>(bytes) / (us * 1e-6);
}

/// A figure's bound: the time its `bytes` (read + written) take at
/// `bytes_per_s`.
struct bound {
    double bytes = 0.0;
    double bytes_per_s = 1.0;
    [[nodiscard]] double us() const noexcept { return bytes / bytes_per_s * 1e6; }
};

/// "NAME: M us, bound B us (X MB at Y GB/s): M / B = R x" on one line.
inline void print_bound(const char* name, double measured_us, bound b) {
    std::printf("    %-28s %10.1f us   bound %9.1f us (%8.1f MB at %6.0f GB/s)   %6.2fx the bound\n", name, measured_us,
                b.us(), b.bytes / 1e6, b.bytes_per_s / 1e9, measured_us / b.us());
}

struct options {
    int reps = 0;                       ///< 0: each benchmark's default
    const char* json = nullptr;         ///< write rows here too
    std::vector<std::uint32_t> tokens;  ///< --tokens: prompt lengths, for the benchmarks that take them
};

/// Parses --reps N, --json FILE and, where `takes_tokens`, --tokens N[,N...].
/// Also makes stdout line-buffered: a benchmark run under a time limit (as
/// gpu-check.sh's are) keeps every row it finished, where a full buffer
/// would lose them all when the run is killed.
inline options parse(int argc, char** argv, bool takes_tokens = false) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    options o;
    const auto usage = [&] {
        std::fprintf(stderr, "usage: %s [--reps N] [--json FILE]%s\n", argv[0],
                     takes_tokens ? " [--tokens N[,N...]]" : "");
        std::exit(2);
    };
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            o.reps = std::atoi(argv[++i]);
        else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc)
            o.json = argv[++i];
        else if (takes_tokens && std::strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) {
            for (const char* p = argv[++i]; *p != '\0';) {
                char* end = nullptr;
                const unsigned long n = std::strtoul(p, &end, 10);
                if (end == p || n == 0 || n > (1ul << 24) || (*end != ',' && *end != '\0')) {
                    std::fprintf(stderr,
                                 "%s: --tokens wants positive lengths up to 16M separated by commas, got '%s'\n",
                                 argv[0], argv[i]);
                    std::exit(2);
                }
                o.tokens.push_back(static_cast<std::uint32_t>(n));
                p = *end == ',' ? end + 1 : end;
            }
        } else
            usage();
    }
    return o;
}

/// Collects JSON objects (already formatted) and writes them as an array.
class json_rows {
public:
    void add(std::string row) { rows_.push_back(std::move(row)); }
    void write(const char* path) const {
        if (path == nullptr) return;
        std::FILE* f = std::fopen(path, "w");
        if (f == nullptr) {
            std::fprintf(stderr, "cannot write %s\n", path);
            std::exit(1);
        }
        std::fprintf(f, "[");
        for (std::size_t i = 0; i < rows_.size(); ++i) std::fprintf(f, "%s%s", i ? ",\n " : "", rows_[i].c_str());
        std::fprintf(f, "]\n");
        std::fclose(f);
    }

private:
    std::vector<std::string> rows_;
};

inline int skip_without_gpu(const char* program) {
    if (cuda::device_count() == 0) {
        std::printf("%s: no CUDA device on this machine: nothing to measure\n", program);
        return 77;
    }
    return 0;
}

}  // namespace kvpolicy::bench
