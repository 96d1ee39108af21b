// redis store: pipelined batches of commands to one Redis server or to a
// Redis Cluster, with per-command outcome.
//
// A batch is sent whole to every node it touches before any reply is read,
// so it costs one round trip (the nodes answer in parallel). With
// `store_config::cluster`, each key goes to the master that serves its hash
// slot (CRC16 of the key mod 16384, the slot map read with CLUSTER SLOTS);
// a MOVED reply refreshes the map and the command is sent again to the
// named node, an ASK reply sends it there once, after ASKING (a slot being
// migrated), at most two redirects per command. A node that cannot be
// reached fails its commands (a null reply): the caller's ops fail and are
// recomputed; the map is read again at the next batch.
//
// The store is also the `remote_batch_directory` a lookup asks:
// present_prefix sends one EXISTS per key in one batch, present_prefixes
// those of all of a step's requests in one batch.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpolicy/core/concepts.hpp"
#include "kvpolicy/core/error.hpp"
#include "kvpolicy/redis/connection.hpp"

namespace kvpolicy::redis {

/// Redis Cluster's key hash: CRC16/XMODEM of the key (or of its {hash tag}) mod 16384.
[[nodiscard]] inline std::uint16_t hash_slot(std::string_view key) noexcept {
    if (const auto open = key.find('{'); open != std::string_view::npos) {
        const auto close = key.find('}', open + 1);
        if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
    }
    std::uint16_t crc = 0;
    for (const char ch : key) {
        crc ^= static_cast<std::uint16_t>(static_cast<unsigned char>(ch) << 8);
        for (int i = 0; i < 8; ++i) crc = (crc & 0x8000) ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021) : static_cast<std::uint16_t>(crc << 1);
    }
    return crc & 16383;
}

/// One command of a batch: the name, a key and, for SET, a value made of
/// `value_head` then `value` (both sent from where they lie, not copied:
/// they must stay alive and unchanged while the batch runs).
struct command {
    std::string_view name;  ///< "SET", "GET", "EXISTS", ...
    std::string_view key;
    std::span<const std::byte> value_head{};  ///< SET: the value's first bytes
    std::span<const std::byte> value{};       ///< SET: the rest
    /// GET: where a value of exactly the sink's length is read, straight
    /// from the socket (see connection::next_reply_into); null for a reply object.
    bulk_sink* into = nullptr;

    [[nodiscard]] bool has_value() const noexcept { return name == "SET"; }
};

class store {
public:
    static constexpr std::size_t slots = 16384;

    /// Connects to the server (or the cluster's masters, found from the
    /// seeds). Throws: config_error naming the address(es) and the fix.
    explicit store(store_config config) : config_(std::move(config)) {
        if (config_.nodes.empty()) throw config_error("redis store: no node given; list at least one in store_config::nodes");
        if (!config_.cluster) {
            nodes_.push_back(std::make_unique<connection>(config_.nodes.front(), config_));
            slot_node_.fill(0);
            return;
        }
        std::string why;
        for (const endpoint& seed : config_.nodes) {
            try {
                auto c = std::make_unique<connection>(seed, config_);
                nodes_.push_back(std::move(c));
                if (read_slots(why)) return;
            } catch (const config_error& e) {
                why += std::string(e.what()) + "; ";
            }
        }
        throw config_error("redis cluster: no seed gave a slot map (" + why +
                           "); give reachable cluster nodes in store_config::nodes, or set cluster = false for a "
                           "single server");
    }
    store(const store&) = delete;
    store& operator=(const store&) = delete;

    [[nodiscard]] const store_config& config() const noexcept { return config_; }

    /// Called after a batch was sent and before its replies are read (tests
    /// kill or pause a server there).
    std::function<void()> after_send;

    /// Runs `cmds` as one pipelined batch; `replies[i]` is command i's reply,
    /// null when its node could not be reached or did not answer in time, or
    /// when its value was read into its sink (`cmds[i].into->filled`).
    /// Redirect replies (MOVED, ASK) are followed, not returned.
    void run(std::span<const command> cmds, std::vector<reply_ptr>& replies) {
        replies.clear();
        replies.resize(cmds.size());
        run(cmds, [&](std::size_t i, reply_ptr r) { replies[i] = std::move(r); });
    }

    /// The same, handing each reply to `on_reply(i, reply)` as it is read
    /// (null for a command that got none), so that a batch's values need not
    /// all be alive at once. Each command is reported exactly once.
    template <class OnReply>
    void run(std::span<const command> cmds, OnReply&& on_reply) {
        if (stale_map_ && config_.cluster) refresh_slots();
        target_.assign(cmds.size(), no_node);
        asking_.assign(cmds.size(), 0);
        for (std::size_t i = 0; i < cmds.size(); ++i) target_[i] = slot_node_[hash_slot(cmds[i].key)];
        pending_.resize(cmds.size());
        for (std::size_t i = 0; i < cmds.size(); ++i) pending_[i] = i;
        for (int round = 0; round < 3 && !pending_.empty(); ++round) {
            send_round(cmds, on_reply);
            if (!config_.cluster) break;
        }
        for (std::size_t i : pending_) on_reply(i, nullptr);  // still redirected after the last round
    }

    /// How many of `keys` (item keys, namespaced here), from the first, the
    /// store holds now. A node that cannot answer ends the prefix there.
    [[nodiscard]] std::size_t present_prefix(std::span<const std::uint64_t> keys) {
        key_text_.resize(keys.size());
        exists_.resize(keys.size());
        for (std::size_t i = 0; i < keys.size(); ++i) {
            key_text_[i] = config_.ns.key(keys[i]);
            exists_[i] = {"EXISTS", key_text_[i]};
        }
        run(exists_, exists_replies_);
        std::size_t n = 0;
        while (n < keys.size() && held(exists_replies_[n])) ++n;
        return n;
    }

    /// present_prefix of each of `lists` (out[i] for lists[i]), all asked in
    /// one pipelined batch: one round trip for a step's lookups. Throws:
    /// usage_error if `out` is shorter than `lists` (nothing sent).
    void present_prefixes(std::span<const std::span<const std::uint64_t>> lists, std::span<std::size_t> out) {
        if (out.size() < lists.size())
            throw usage_error("redis store::present_prefixes: " + std::to_string(out.size()) + " results for " +
                              std::to_string(lists.size()) + " key lists; give one per list");
        std::size_t total = 0;
        for (const auto& keys : lists) total += keys.size();
        key_text_.resize(total);
        exists_.resize(total);
        std::size_t at = 0;
        for (const auto& keys : lists)
            for (const std::uint64_t k : keys) {
                key_text_[at] = config_.ns.key(k);
                exists_[at] = {"EXISTS", key_text_[at]};
                ++at;
            }
        run(exists_, exists_replies_);
        at = 0;
        for (std::size_t i = 0; i < lists.size(); ++i) {
            std::size_t n = 0;
            while (n < lists[i].size() && held(exists_replies_[at + n])) ++n;
            out[i] = n;
            at += lists[i].size();
        }
    }

    [[nodiscard]] std::size_t node_count() const noexcept { return nodes_.size(); }
    /// MOVED and ASK replies followed so far.
    [[nodiscard]] std::size_t redirects() const noexcept { return redirects_; }

    /// Tests: forget the slot map as if the cluster had moved every slot to
    /// the first node, so that commands meet MOVED replies.
    void point_all_slots_at_first_node_for_testing() noexcept { slot_node_.fill(0); }

private:
    static constexpr std::uint32_t no_node = ~std::uint32_t{0};

    // EXISTS answered 1 (a node that did not answer holds nothing).
    [[nodiscard]] static bool held(const reply_ptr& r) noexcept {
        return r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    }

    // Sends each pending command to its node (all nodes first), then reads
    // the replies; leaves in pending_ the redirected ones, retargeted.
    template <class OnReply>
    void send_round(std::span<const command> cmds, OnReply& on_reply) {
        std::vector<std::uint32_t> used;
        for (std::size_t i : pending_) {
            const std::uint32_t n = target_[i];
            if (n == no_node || !nodes_[n]->ensure_open()) continue;
            if (asking_[i]) {
                const char* a[] = {"ASKING"};
                const std::size_t l[] = {6};
                nodes_[n]->append(a, l);
            }
            append(*nodes_[n], cmds[i]);
            if (std::find(used.begin(), used.end(), n) == used.end()) used.push_back(n);
        }
        for (std::uint32_t n : used) nodes_[n]->flush();
        if (after_send) after_send();
        std::vector<std::size_t> again;
        for (std::size_t i : pending_) {
            const std::uint32_t n = target_[i];
            if (n == no_node || !nodes_[n]->ok()) {
                stale_map_ = config_.cluster;
                on_reply(i, nullptr);  // failed
                continue;
            }
            if (asking_[i]) {
                reply_ptr ok = nodes_[n]->next_reply();
                asking_[i] = 0;
                if (!ok) {
                    on_reply(i, nullptr);
                    continue;
                }
            }
            reply_ptr r;
            if (cmds[i].into != nullptr) {
                if (nodes_[n]->next_reply_into(*cmds[i].into, r) == connection::bulk_read::filled) {
                    on_reply(i, nullptr);  // the value is in the sink
                    continue;
                }
            } else {
                r = nodes_[n]->next_reply();
            }
            if (!r) {
                stale_map_ = config_.cluster;
                on_reply(i, nullptr);
                continue;
            }
            if (config_.cluster && (is_error(r.get(), "MOVED ") || is_error(r.get(), "ASK "))) {
                const bool ask = is_error(r.get(), "ASK ");
                ++redirects_;
                const std::string_view text(r->str, r->len);
                const auto at = text.rfind(' ');
                const auto colon = text.rfind(':');
                if (at != std::string_view::npos && colon != std::string_view::npos && colon > at) {
                    endpoint e{std::string(text.substr(at + 1, colon - at - 1)),
                               std::stoi(std::string(text.substr(colon + 1)))};
                    target_[i] = node_index(e);
                    asking_[i] = ask ? 1 : 0;
                    if (!ask) {
                        stale_map_ = true;
                        const auto slot_at = text.find(' ');
                        const auto slot = std::stoul(std::string(text.substr(slot_at + 1, at - slot_at - 1)));
                        if (slot < slots && target_[i] != no_node) slot_node_[slot] = target_[i];
                    }
                    again.push_back(i);
                    continue;
                }
            }
            on_reply(i, std::move(r));
        }
        pending_ = std::move(again);
    }

    static void append(connection& c, const command& cmd) {
        if (cmd.has_value()) {
            const std::string_view args[2] = {cmd.name, cmd.key};
            c.append_with_value(args, cmd.value_head, cmd.value);
            return;
        }
        const char* argv[2] = {cmd.name.data(), cmd.key.data()};
        const std::size_t lens[2] = {cmd.name.size(), cmd.key.size()};
        c.append(argv, lens);
    }

    std::uint32_t node_index(const endpoint& e) {
        for (std::uint32_t n = 0; n < nodes_.size(); ++n)
            if (nodes_[n]->address() == e) return n;
        try {
            nodes_.push_back(std::make_unique<connection>(e, config_));
            return static_cast<std::uint32_t>(nodes_.size() - 1);
        } catch (const config_error&) {
            return no_node;
        }
    }

    void refresh_slots() {
        std::string why;
        for (std::size_t i = 0; i < nodes_.size(); ++i)  // read_slots_from may add nodes
            if (connection& n = *nodes_[i]; n.ensure_open() && read_slots_from(n, why)) {
                stale_map_ = false;
                return;
            }
    }

    bool read_slots(std::string& why) { return read_slots_from(*nodes_.back(), why); }

    // CLUSTER SLOTS: [[start, end, [host, port, id], replicas...], ...].
    bool read_slots_from(connection& c, std::string& why) {
        reply_ptr r = c.command({"CLUSTER", "SLOTS"});
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
            why += "CLUSTER SLOTS at " + c.address().str() + " gave no map; ";
            return false;
        }
        std::array<std::uint32_t, slots> map;
        map.fill(no_node);
        std::vector<std::pair<endpoint, std::pair<long long, long long>>> ranges;
        for (std::size_t i = 0; i < r->elements; ++i) {
            const redisReply* e = r->element[i];
            if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[2]->type != REDIS_REPLY_ARRAY ||
                e->element[2]->elements < 2)
                continue;
            const redisReply* master = e->element[2];
            std::string host(master->element[0]->str, master->element[0]->len);
            if (host.empty()) host = c.address().host;
            ranges.push_back({endpoint{host, static_cast<int>(master->element[1]->integer)},
                              {e->element[0]->integer, e->element[1]->integer}});
        }
        for (const auto& [e, range] : ranges) {
            const std::uint32_t n = node_index(e);
            for (long long s = range.first; s <= range.second && s < static_cast<long long>(slots); ++s)
                map[static_cast<std::size_t>(s)] = n;
        }
        slot_node_ = map;
        return true;
    }

    store_config config_;
    std::vector<std::unique_ptr<connection>> nodes_;
    std::array<std::uint32_t, slots> slot_node_{};
    bool stale_map_ = false;
    std::size_t redirects_ = 0;
    std::vector<std::uint32_t> target_;      // scratch: node per command
    std::vector<std::uint8_t> asking_;       // scratch: send ASKING first
    std::vector<std::size_t> pending_;       // scratch: commands still to send
    std::vector<std::string> key_text_;      // scratch for present_prefix
    std::vector<command> exists_;
    std::vector<reply_ptr> exists_replies_;
};

static_assert(remote_batch_directory<store>);

}  // namespace kvpolicy::redis
