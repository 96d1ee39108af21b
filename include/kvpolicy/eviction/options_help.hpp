// The registry as a help text: every policy of a list, one per line, each
// followed by its options as its header declares them (name, type, default,
// range, help). kvpolicy-sim's --help prints it for eviction_policies.
#pragma once

#include <algorithm>
#include <string>

#include "kvpolicy/core/policy_options.hpp"
#include "kvpolicy/core/type_list.hpp"

namespace kvpolicy {

/// "  s3fifo\n      small_fraction        float, default 0.1, in [0, 1]: ...\n".
template <class List>
[[nodiscard]] std::string options_help() {
    std::string out;
    for_each_type<List>([&]<class P>() {
        out += "  " + std::string(P::name) + "\n";
        for (const option_description& d : describe_options<P>()) {
            std::string line = "      " + std::string(d.name);
            line.resize(std::max<std::size_t>(line.size() + 1, 40), ' ');
            out += line + std::string(d.type) + ", default " + option_number(d.default_value) + ", in " +
                   option_range_text(d.range) + ": " + std::string(d.help) + "\n";
        }
    });
    return out;
}

}  // namespace kvpolicy
