// engine::object_list_memo against a conversion of every list and a model of
// what it remembers: random lists drawn from a pool of objects (the
// remembered list again, a prefix or suffix of it, a slice from its middle,
// a shuffled or fresh list, a list holding an object with no fixed key),
// each answered with every item's own key; `from` names the remembered list
// exactly when the model says it was reused, and each object's references
// equal its places in the remembered list (none once the memo is gone).
#include <catch2/catch.hpp>

#include <kvpolicy/engine/object_list_memo.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace {

using kvpolicy::engine::hash_list_ref;
using kvpolicy::engine::object_list_memo;

struct fake_object {
    std::uint64_t key = 0;
    bool fixed = true;  // a key that cannot change: the memo may keep it
    int refs = 0;
};
struct fake_keeper {
    using object = fake_object;
    static bool key_of(fake_object* o, std::uint64_t& k) noexcept {
        k = o->key;
        return o->fixed;
    }
    static void keep(fake_object* o) noexcept { ++o->refs; }
    static void release(fake_object* o) noexcept { --o->refs; }
};
static_assert(kvpolicy::engine::object_keeper<fake_keeper>);

// The model's remembered list must hold exactly one reference per place.
void require_refs(const std::vector<fake_object>& pool, const std::vector<fake_object*>& remembered) {
    for (const fake_object& o : pool) REQUIRE(o.refs == std::count(remembered.begin(), remembered.end(), &o));
}

}  // namespace

TEST_CASE("object_list_memo answers every list with its items' keys, reusing the last list's by address", "[engine]") {
    std::mt19937_64 rng(GENERATE(1u, 2u, 3u));
    std::vector<fake_object> pool(64);
    for (std::size_t i = 0; i < pool.size(); ++i) pool[i] = {.key = 1000 + i * 7, .fixed = i % 16 != 5};
    std::vector<fake_object*> remembered;  // the model's
    std::uint64_t list = hash_list_ref::none;
    std::size_t hits = 0;
    {
        object_list_memo<fake_keeper> memo;
        const auto fresh = [&](std::size_t n) {
            std::vector<fake_object*> l(n);
            for (auto& p : l) p = &pool[rng() % pool.size()];
            return l;
        };
        for (int step = 0; step < 5000; ++step) {
            INFO("step " << step);
            std::vector<fake_object*> items;
            const auto op = rng() % 6;
            const std::size_t m = remembered.size();
            const std::size_t k = m == 0 ? 0 : 1 + rng() % m;
            if (op == 0) items = remembered;
            if (op == 1) items.assign(remembered.begin(), remembered.begin() + static_cast<std::ptrdiff_t>(k));
            if (op == 2) items.assign(remembered.end() - static_cast<std::ptrdiff_t>(k), remembered.end());
            if (op == 3 && m > 2) items.assign(remembered.begin() + 1, remembered.end() - 1);  // a middle slice
            if (op == 4) {
                items = remembered;
                std::shuffle(items.begin(), items.end(), rng);
            }
            if (op == 5 || items.empty()) items = fresh(rng() % 12);
            hash_list_ref from{.list = 12345};
            const auto keys = memo.keys_of(items, from);
            // The model: a non-empty prefix or suffix of the remembered list is reused.
            std::size_t at = m;
            if (!items.empty() && items.size() <= m) {
                if (std::equal(items.begin(), items.end(), remembered.begin()))
                    at = 0;
                else if (std::equal(items.begin(), items.end(),
                                    remembered.end() - static_cast<std::ptrdiff_t>(items.size())))
                    at = m - items.size();
            }
            const bool fixed = std::all_of(items.begin(), items.end(), [](const fake_object* o) { return o->fixed; });
            if (at < m) {
                ++hits;
                REQUIRE(keys);
                REQUIRE(from.list == list);
                REQUIRE(from.at == at);
                REQUIRE(from.size == m);
            } else if (fixed) {
                REQUIRE(keys);
                REQUIRE(from.list != list);
                REQUIRE(from.list != hash_list_ref::none);
                REQUIRE(from.at == 0);
                REQUIRE(from.size == items.size());
                list = from.list;
                remembered = items;
            } else {
                REQUIRE_FALSE(keys);
                REQUIRE(from.list == hash_list_ref::none);
                remembered.clear();
            }
            if (keys) {
                REQUIRE(keys->size() == items.size());
                for (std::size_t i = 0; i < items.size(); ++i) REQUIRE((*keys)[i] == items[i]->key);
            }
            REQUIRE(memo.size() == remembered.size());
            require_refs(pool, remembered);
        }
    }
    require_refs(pool, {});  // the memo released everything it kept
    CHECK(hits > 1000);
}
