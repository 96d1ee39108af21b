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
#include <exception>
#include <functional>
#include <memory>
#include <optional>
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
        for (int i = 0; i < 8; ++i)
            crc =
                (crc & 0x8000) ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021) : static_cast<std::uint16_t>(crc << 1);
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
        config_.ns.validate();
        validate(config_);
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
    /// Asked before a redirect or a slot map adds a node: false, and the
    /// node is unreachable (the fuzz harness keeps a run on its fake server).
    std::function<bool(const endpoint&)> accept_node;

    /// A batch: every run() from here to the end of the scope (an engine's
    /// execute) shares one deadline, io_timeout from its start, and a node
    /// whose connect failed is not tried again in it. A run() outside one
    /// is a batch of its own.
    class batch_scope {
    public:
        explicit batch_scope(store& s) : s_(&s) {
            if (s_->batch_depth_++ == 0) s_->start_batch();
        }
        ~batch_scope() { --s_->batch_depth_; }
        batch_scope(const batch_scope&) = delete;
        batch_scope& operator=(const batch_scope&) = delete;

    private:
        store* s_;
    };

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
        const batch_scope batch(*this);
        // Only an allocation can throw in here: then every connection is
        // out of step with its replies, and is closed.
        struct close_on_throw {
            store* s;
            int exceptions = std::uncaught_exceptions();
            ~close_on_throw() {
                if (std::uncaught_exceptions() > exceptions)
                    for (auto& n : s->nodes_) n->close();
            }
        } const closer{this};
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
        std::size_t n = 0;  // an item without a name (ns.identities) is not held
        while (n < keys.size() && !key_text_[n].empty() && held(exists_replies_[n])) ++n;
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
            while (n < lists[i].size() && !key_text_[at + n].empty() && held(exists_replies_[at + n])) ++n;
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
                if (!ok || ok->type != REDIS_REPLY_STATUS) {  // ASKING answers +OK; anything else is out of step
                    nodes_[n]->close("ASKING was not answered +OK");
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
            if (!fits(cmds[i], r.get())) {  // a reply of a type its command never gets: out of step
                nodes_[n]->close("a reply of the wrong type for " + std::string(cmds[i].name));
                on_reply(i, nullptr);
                continue;
            }
            if (config_.cluster && (is_error(r.get(), "MOVED ") || is_error(r.get(), "ASK "))) {
                const std::optional<redirect> to = parse_redirect(std::string_view(r->str, r->len));
                if (!to) {  // a malformed redirect: the node cannot be trusted
                    nodes_[n]->close("a malformed MOVED or ASK");
                    stale_map_ = true;
                    on_reply(i, nullptr);
                    continue;
                }
                ++redirects_;
                endpoint e = to->to;
                if (e.host.empty()) e.host = nodes_[n]->address().host;  // Redis 7: "MOVED 10383 :7460", the same host
                target_[i] = node_index(e);
                asking_[i] = to->ask ? 1 : 0;
                if (!to->ask) {
                    stale_map_ = true;
                    if (target_[i] != no_node) slot_node_[to->slot] = target_[i];
                }
                again.push_back(i);
                continue;
            }
            on_reply(i, std::move(r));
        }
        pending_ = std::move(again);
    }

    // Whether `r` is a reply `cmd` can get: SET +OK, GET a bulk string or
    // nil, EXISTS an integer; any an error. Other commands: anything.
    [[nodiscard]] static bool fits(const command& cmd, const redisReply* r) noexcept {
        if (r->type == REDIS_REPLY_ERROR) return true;
        if (cmd.name == "SET") return r->type == REDIS_REPLY_STATUS;
        if (cmd.name == "GET") return r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL;
        if (cmd.name == "EXISTS") return r->type == REDIS_REPLY_INTEGER;
        return true;
    }

    void start_batch() {
        deadline_ = deadline_clock::now() + config_.io_timeout;
        ++batch_id_;
        for (auto& n : nodes_) n->begin_batch(deadline_, batch_id_);
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

    // The node at `e`, added (opened at its first use, under the batch's
    // deadline) if new. A server names nodes by IP address, or by a host
    // store_config::nodes names (a name would block in DNS, past any
    // deadline); no_node for any other, for one accept_node refuses, and
    // past max_nodes (a hostile server naming endless nodes).
    std::uint32_t node_index(const endpoint& e) {
        for (std::uint32_t n = 0; n < nodes_.size(); ++n)
            if (nodes_[n]->address() == e) return n;
        const bool known_host =
            is_ip_address(e.host) || std::any_of(config_.nodes.begin(), config_.nodes.end(),
                                                 [&](const endpoint& c) { return c.host == e.host; });
        if (!known_host || nodes_.size() >= max_nodes || (accept_node && !accept_node(e))) return no_node;
        nodes_.push_back(std::make_unique<connection>(e, config_, connection::deferred));
        nodes_.back()->begin_batch(deadline_, batch_id_);
        return static_cast<std::uint32_t>(nodes_.size() - 1);
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
        if (!r) {
            why += "CLUSTER SLOTS at " + c.address().str() + " gave no answer (" + c.last_error() + "); ";
            return false;
        }
        std::string bad;
        std::optional<std::vector<slot_range>> ranges = parse_cluster_slots(r.get(), bad);
        if (!ranges) {  // a map wrong in part is not used at all, and the node is out of step or broken
            why += "CLUSTER SLOTS at " + c.address().str() + " gave no usable map (" + bad + "); ";
            c.close("a malformed CLUSTER SLOTS reply");
            return false;
        }
        std::array<std::uint32_t, slots> map;
        map.fill(no_node);
        const std::string reply_host = c.address().host;
        for (slot_range& range : *ranges) {
            if (range.master.host.empty()) range.master.host = reply_host;
            const std::uint32_t n = node_index(range.master);
            for (std::size_t s = range.first; s <= range.last; ++s) map[s] = n;
        }
        slot_node_ = map;
        return true;
    }

    static constexpr std::size_t max_nodes = 1024;

    store_config config_;
    std::vector<std::unique_ptr<connection>> nodes_;
    deadline_clock::time_point deadline_{};  // the current batch's
    std::uint64_t batch_id_ = 0;
    int batch_depth_ = 0;
    std::array<std::uint32_t, slots> slot_node_{};
    bool stale_map_ = false;
    std::size_t redirects_ = 0;
    std::vector<std::uint32_t> target_;  // scratch: node per command
    std::vector<std::uint8_t> asking_;   // scratch: send ASKING first
    std::vector<std::size_t> pending_;   // scratch: commands still to send
    std::vector<std::string> key_text_;  // scratch for present_prefix
    std::vector<command> exists_;
    std::vector<reply_ptr> exists_replies_;
};

static_assert(remote_batch_directory<store>);

}  // namespace kvpolicy::redis
