// kvpolicy.select_victims (the k lowest scores) and kvpolicy.VictimBatchSelector
// (seed 002's batch API), over NumPy arrays with the GIL released while the
// C++ selects. A float64 scores array and a uint32 ids array are read in
// place; other dtypes are converted once.
#include <memory>
#include <numeric>

#include <kvpolicy/eviction/select_victims.hpp>
#include <kvpolicy/select/nth_element_selector.hpp>

#include "bindings.hpp"

namespace kvpolicy::python {

namespace {

class batch_selector_handle {
public:
    explicit batch_selector_handle(const std::string& rule) : impl_(any_batch_selector::make(rule)) {}

    nb::dict select_victims(nb::handle sequence_ids, nb::handle num_blocks, std::size_t required_blocks,
                            nb::handle last_access, nb::handle access_count, nb::handle priority, nb::handle pinned,
                            nb::handle estimated_lifetime, nb::handle sequence_length, nb::handle max_length) {
        nb::object k[9];
        const auto col = [&]<class T>(nb::handle h, const char* what, nb::object& keep) {
            return h.is_none() ? std::nullopt : std::optional(as_span<T>(h, what, keep));
        };
        candidate_columns c;
        c.sequence_ids = as_span<std::uint64_t>(sequence_ids, "select_victims: sequence_ids", k[0]);
        c.num_blocks = as_span<std::uint64_t>(num_blocks, "select_victims: num_blocks", k[1]);
        c.last_access = col.operator()<std::uint64_t>(last_access, "select_victims: last_access", k[2]);
        c.access_count = col.operator()<std::uint64_t>(access_count, "select_victims: access_count", k[3]);
        c.priority = col.operator()<std::int32_t>(priority, "select_victims: priority", k[4]);
        c.pinned = col.operator()<std::uint8_t>(pinned, "select_victims: pinned", k[5]);
        c.estimated_lifetime = col.operator()<double>(estimated_lifetime, "select_victims: estimated_lifetime", k[6]);
        c.sequence_length = col.operator()<std::uint64_t>(sequence_length, "select_victims: sequence_length", k[7]);
        c.max_length = col.operator()<std::uint64_t>(max_length, "select_victims: max_length", k[8]);
        victim_batch out;
        {
            nb::gil_scoped_release unlocked;
            out = impl_->select_victims(c, required_blocks);
        }
        return dict_of("evicted", to_numpy(std::move(out.evicted)), "freed_blocks", out.freed_blocks, "shortfall",
                       out.shortfall);
    }

    void update_access(nb::handle sequence_ids, nb::handle now) {
        nb::object k1, k2;
        impl_->update_access(as_span<std::uint64_t>(sequence_ids, "update_access: sequence_ids", k1),
                             as_span<std::uint64_t>(now, "update_access: now", k2));
    }
    void forget(nb::handle sequence_ids) {
        nb::object k;
        impl_->forget(as_span<std::uint64_t>(sequence_ids, "forget: sequence_ids", k));
    }
    nb::dict metrics() const {
        const victim_batch_metrics m = impl_->metrics();
        return dict_of("selections", m.selections, "total_evictions", m.total_evictions, "average_selection_us",
                       m.average_selection_us, "re_prefills", m.re_prefills, "re_prefill_rate", m.re_prefill_rate,
                       "fairness", m.fairness);
    }
    [[nodiscard]] std::string rule() const { return std::string(impl_->rule()); }

private:
    std::unique_ptr<any_batch_selector> impl_;
};

}  // namespace

void bind_select(nb::module_& m) {
    m.def(
        "select_victims",
        [](nb::handle scores, nb::handle ids, std::size_t k) {
            nb::object ks, ki;
            const auto s = as_span<double>(scores, "select_victims: scores", ks);
            std::vector<std::uint32_t> iota(ids.is_none() ? s.size() : 0);  // ids None: 0 .. len(scores)-1
            std::iota(iota.begin(), iota.end(), 0u);
            const std::span<const std::uint32_t> id = ids.is_none()
                                                          ? std::span<const std::uint32_t>(iota)
                                                          : as_span<std::uint32_t>(ids, "select_victims: ids", ki);
            std::vector<std::uint32_t> out(std::min(k, id.size()));
            {
                nb::gil_scoped_release unlocked;
                thread_local nth_element_selector selector;  // its scratch is reused per thread
                out.resize(selector.select_lowest<double>(s, as_ids(id), as_ids(std::span(out))));
            }
            return to_numpy(std::move(out));
        },
        nb::arg("scores"), nb::arg("ids").none() = nb::none(), nb::arg("k"),
        "The k ids with the lowest scores, ascending by (score, id), as a uint32 array.\n\n"
        "scores: float64 (read in place; other dtypes converted); ids: uint32, one per score\n"
        "(None: 0 .. len(scores)-1). Raises UsageError for a NaN score or a length mismatch.\n"
        "The GIL is released while selecting.");

    using h = batch_selector_handle;
    nb::class_<h>(m, "VictimBatchSelector",
                  "Seed 002's batch API: given candidate sequences and the blocks needed, choose\n"
                  "which whole sequences to evict, by rule (lru, lfu, fifo, qos_aware, predictive).\n"
                  "Candidates are NumPy columns, one entry per sequence; the GIL is released while selecting,\n"
                  "so give each thread its own selector.")
        .def(nb::init<const std::string&>(), nb::arg("rule") = "lru")
        .def("select_victims", &h::select_victims, nb::arg("sequence_ids"), nb::arg("num_blocks"),
             nb::arg("required_blocks"), nb::arg("last_access") = nb::none(), nb::arg("access_count") = nb::none(),
             nb::arg("priority") = nb::none(), nb::arg("pinned") = nb::none(),
             nb::arg("estimated_lifetime") = nb::none(), nb::arg("sequence_length") = nb::none(),
             nb::arg("max_length") = nb::none(),
             "The shortest prefix of the unpinned candidates in rule order whose blocks reach\n"
             "required_blocks: {'evicted': uint64 array in eviction order, 'freed_blocks', 'shortfall'}.\n"
             "Raises UsageError for a sequence listed twice.")
        .def("update_access", &h::update_access, nb::arg("sequence_ids"), nb::arg("now"),
             "Records requests (one time, or one per sequence); a request after an eviction is a re-prefill.")
        .def("forget", &h::forget, nb::arg("sequence_ids"), "Drops finished sequences' records.")
        .def("metrics", &h::metrics,
             "selections, total_evictions, average_selection_us, re_prefills, re_prefill_rate, fairness.")
        .def_prop_ro("rule", &h::rule);
}

}  // namespace kvpolicy::python
