// Runtime choice of a compile-time type: one type list, one fold.
//
// A command-line flag names a policy; `visit_by_name<eviction_policies>("arc",
// f)` calls `f.template operator()<arc>()`. Adding a policy is one header plus
// one entry in its list. An unknown name throws `unknown_name_error` that
// lists every accepted name.
#pragma once

#include <array>
#include <tuple>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"

namespace kvpolicy {

template <class... Ts>
struct type_list {
    static constexpr std::size_t size = sizeof...(Ts);
};

namespace detail {
template <class List>
struct list_names;

template <named... Ts>
struct list_names<type_list<Ts...>> {
    static constexpr std::array<std::string_view, sizeof...(Ts)> value{std::string_view{Ts::name}...};
};

template <class List>
constexpr bool names_unique() {
    const auto& n = list_names<List>::value;
    for (std::size_t i = 0; i < n.size(); ++i)
        for (std::size_t j = i + 1; j < n.size(); ++j)
            if (n[i] == n[j]) return false;
    return true;
}
}  // namespace detail

/// The registered names of a type list, in list order.
template <class List>
[[nodiscard]] constexpr const auto& names_of() noexcept {
    return detail::list_names<List>::value;
}

/// "a, b, c": for help texts and error messages.
template <class List>
[[nodiscard]] std::string joined_names(std::string_view separator = ", ") {
    std::string out;
    for (std::string_view n : names_of<List>()) {
        if (!out.empty()) out += separator;
        out += n;
    }
    return out;
}

/// The position in `List` of the type named `name`, or `List::size` if none is.
template <class List>
[[nodiscard]] constexpr std::size_t index_of_name(std::string_view name) noexcept {
    const auto& names = names_of<List>();
    for (std::size_t i = 0; i < names.size(); ++i)
        if (names[i] == name) return i;
    return List::size;
}

template <class List>
[[nodiscard]] constexpr bool has_name(std::string_view name) noexcept {
    return index_of_name<List>(name) < List::size;
}

namespace detail {
template <class T, class... Ts>
constexpr std::size_t index_of_type_in() noexcept {
    constexpr bool same[] = {std::is_same_v<T, Ts>..., false};
    std::size_t i = 0;
    while (i < sizeof...(Ts) && !same[i]) ++i;
    return i;
}
template <class T, class List>
struct type_index;
template <class T, class... Ts>
struct type_index<T, type_list<Ts...>> {
    static constexpr std::size_t value = index_of_type_in<T, Ts...>();
    static_assert(value < sizeof...(Ts), "index_of_type: the type is not in this list");
};
}  // namespace detail

/// The position of `T` in `List` (a compile-time error if `T` is not in it).
template <class List, class T>
inline constexpr std::size_t index_of_type = detail::type_index<T, List>::value;

/// Throws the error `visit_by_name` throws for a name not in `List`: for
/// callers that look a name up in parts of a list (a dispatch split over
/// translation units) and find it in none.
template <class List>
[[noreturn]] void throw_unknown_name(std::string_view name, std::string_view what = "name") {
    throw unknown_name_error("unknown " + std::string(what) + " '" + std::string(name) +
                             "'; accepted: " + joined_names<List>());
}

/// Calls `f.template operator()<T>()` for the type `T` at position `index`
/// of `List` and returns its result: a name looked up once
/// (`index_of_name`) and carried as its position is dispatched without
/// comparing it again. Throws: usage_error if `index` is not below
/// `List::size`.
template <class List, class F>
decltype(auto) visit_by_index(std::size_t index, F&& f) {
    return [&]<class... Ts>(type_list<Ts...>) -> decltype(auto) {
        using first = std::tuple_element_t<0, std::tuple<Ts...>>;
        using result = decltype(f.template operator()<first>());
        // One entry per type, in list order, so the index picks the call.
        using entry = result (*)(F&);
        static constexpr entry table[] = {+[](F& g) -> result { return g.template operator()<Ts>(); }...};
        if (index >= sizeof...(Ts))
            throw usage_error("visit_by_index: index " + std::to_string(index) + " is past the list's " +
                              std::to_string(sizeof...(Ts)) + " types");
        return table[index](f);
    }(List{});
}

/// Calls `f.template operator()<T>()` for the type `T` of `List` whose name is
/// `name` and returns its result. `what` names the kind of thing in the error
/// ("eviction policy"). Throws: unknown_name_error listing the accepted names.
template <class List, class F>
decltype(auto) visit_by_name(std::string_view name, F&& f, std::string_view what = "name") {
    static_assert(detail::names_unique<List>(), "two types in this list share a name; names must be unique");
    const std::size_t index = index_of_name<List>(name);
    if (index == List::size) throw_unknown_name<List>(name, what);
    return visit_by_index<List>(index, std::forward<F>(f));
}

namespace detail {
template <std::size_t Begin, class... Ts, std::size_t... I>
type_list<std::tuple_element_t<Begin + I, std::tuple<Ts...>>...> slice_of(type_list<Ts...>, std::index_sequence<I...>);
}  // namespace detail

/// The types of `List` at positions [Begin, End), in order.
template <class List, std::size_t Begin, std::size_t End>
requires(Begin <= End && End <= List::size) using type_list_slice =
    decltype(detail::slice_of<Begin>(List{}, std::make_index_sequence<End - Begin>{}));

/// Calls `f.template operator()<T>()` for every type of `List`, in order.
template <class List, class F>
void for_each_type(F&& f) {
    [&]<class... Ts>(type_list<Ts...>) { (f.template operator()<Ts>(), ...); }(List{});
}

}  // namespace kvpolicy
