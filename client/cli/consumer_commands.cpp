// top and overlap: views built on the consumer library, so what they show is exactly what a
// router using the library would see.
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/cli/commands.hpp"
#include "client/cli/format.hpp"
#include "client/cli/table.hpp"
#include "kvrelay/client/consumer.hpp"

namespace kvrelay::cli {

namespace {

using client::ConsumerView;
using client::RelayView;

client::ConsumerOptions options_for(const Args& args, const std::string& subscriber) {
  client::ConsumerOptions options;
  options.targets = args.targets.empty() ? std::vector<std::string>{"localhost:50051"} : args.targets;
  options.subscriber_id = subscriber;
  return options;
}

// Nothing more will come without a change at the relay: the plane holds its state, or this
// relay incarnation refused it.
bool settled(const client::PlaneView& plane) { return plane.valid || plane.unavailable; }

bool relay_settled(const RelayView& relay) {
  if (relay.incompatible) return true;
  if (!settled(relay.catalog) || !settled(relay.readiness) || !settled(relay.load)) return false;
  return std::ranges::none_of(relay.pools,
                              [](const auto& pool) { return pool.status == client::ReplicaStatus::kSubscribing; });
}

// top also waits for a serving-load window, unless the relay does not serve one; it never decides
// the exit status (overlap does not use it).
bool relay_shown(const RelayView& relay) {
  return relay_settled(relay) && (relay.incompatible || settled(relay.serving_load));
}

// Why a relay's view lacks a plane or a replica the commands need; nullopt when it has them all.
std::optional<std::string> not_ready(const RelayView& relay) {
  const std::pair<const char*, const client::PlaneView*> planes[] = {
      {"catalog", &relay.catalog}, {"readiness", &relay.readiness}, {"load", &relay.load}};
  for (const auto& [name, plane] : planes) {
    if (plane->valid) continue;
    return fmt::format("{}: {}", name, plane->last_error.empty() ? "timed out waiting for it" : plane->last_error);
  }
  for (const auto& pool : relay.pools) {
    if (pool.status != client::ReplicaStatus::kSubscribing) continue;
    return fmt::format("pool {}: {}", pool.endpoint,
                       pool.last_fault.empty() ? "timed out waiting for its snapshot" : pool.last_fault);
  }
  return std::nullopt;
}

// Exit status for relays that lack a plane or a replica, or speak another contract; reports each once.
int report_unsettled(const ConsumerView& view) {
  int worst = kOk;
  for (const auto& relay : view.relays) {
    if (relay.incompatible) {
      std::fprintf(stderr, "kvrelay-cli: %s: contract mismatch: %s\n", relay.target.c_str(),
                   relay.incompatibility.c_str());
      worst = std::max(worst, kContractMismatch);
    } else if (const auto why = not_ready(relay)) {
      std::fprintf(stderr, "kvrelay-cli: %s: relay not ready: %s\n", relay.target.c_str(), why->c_str());
      worst = std::max(worst, kRelayError);
    }
  }
  return worst;
}

std::string readiness_text(const std::optional<v1::ServingReadinessState>& state) {
  return state ? state_name(*state) : "?";
}

std::string load_text(const std::optional<client::LoadFacts>& load) {
  if (!load) return "-";
  return fmt::format("{}/{} ({}/{} ranks{})", load->used_blocks, load->total_blocks, load->observed_ranks,
                     load->expected_ranks, load->authoritative() ? "" : ", partial");
}

// "-": the relay's readiness has no entry for the pool's base model; "?": it is not known.
std::string pool_readiness(const RelayView& relay, const client::PoolView& pool) {
  if (pool.readiness) return state_name(*pool.readiness);
  return relay.readiness.valid ? "-" : "?";
}

std::string base_models(const client::PoolView& pool) {
  std::string models;
  for (const auto& registration : pool.descriptor.registrations()) {
    if (registration.target().has_base()) models += (models.empty() ? "" : ",") + registration.canonical_model_id();
  }
  return models.empty() ? "-" : models;
}

using Clock = std::chrono::steady_clock;

// How long ago this consumer last applied a message: a plane or pool whose stream stops
// moving shows here before anything fails (docs/consumer.md#freshness).
std::string age_text(const std::optional<Clock::time_point>& last, Clock::time_point now) {
  return last ? fmt::format("{:.1f}s ago", std::chrono::duration<double>(now - *last).count()) : std::string("never");
}

// "catalog rev 3 (0.4s ago)", "... (12.0s ago, stale)", "serving-load window 0 (unavailable)".
std::string plane_text(const char* name, const client::PlaneView& plane, std::uint64_t position,
                       Clock::time_point now) {
  std::vector<std::string> notes;
  if (plane.last_message) notes.push_back(age_text(plane.last_message, now));
  if (!plane.valid) notes.emplace_back(plane.unavailable ? "unavailable" : "stale");
  return notes.empty() ? fmt::format("{} {}", name, position)
                       : fmt::format("{} {} ({})", name, position, fmt::join(notes, ", "));
}

// The pool's gauges in the latest serving-load window; unset (shown "-") when the window has no
// entry for it or its load is not COMPLETE.
const v1::TokenLoadStats& serving_tokens(const client::PoolView& pool) {
  return pool.serving_load ? pool.serving_load->load().tokens() : v1::TokenLoadStats::default_instance();
}

void print_serving_models(const RelayView& relay) {
  if (relay.serving_models.empty()) return;
  Table table({"  MODEL", "NAMESPACE", "SERVING LOAD", "REQUESTS AWAITING/GENERATING"});
  for (const auto& model : relay.serving_models) {
    table.add({"  " + model.canonical_model_id(), model.namespace_(), data_status_name(model.load().status()),
               in_flight(model.load().requests())});
  }
  std::printf("\n");
  table.print();
}

using DeltaCounts = std::map<std::pair<std::string, std::string>, std::uint64_t>;

void render_top(const ConsumerView& view, const DeltaCounts& previous, double elapsed_s, Clock::time_point now) {
  for (const auto& relay : view.relays) {
    const auto identity = relay.identity
                              ? fmt::format("instance {:016x} incarnation {:016x}", relay.identity->drt_instance_id(),
                                            relay.identity->relay_incarnation())
                              : std::string("identity unknown");
    std::printf("RELAY %s  %s  %s  %s  %s  %s  restarts %lu\n", relay.target.c_str(), identity.c_str(),
                plane_text("catalog rev", relay.catalog, relay.catalog_revision, now).c_str(),
                plane_text("readiness rev", relay.readiness, relay.readiness_revision, now).c_str(),
                plane_text("load window", relay.load, relay.load_window, now).c_str(),
                plane_text("serving-load window", relay.serving_load, relay.serving_load_window, now).c_str(),
                static_cast<unsigned long>(relay.identity_changes));
    if (relay.incompatible) std::printf("  ! contract mismatch: %s\n", relay.incompatibility.c_str());
    if (!relay.incompatible && !relay.catalog.valid) std::printf("  ! %s\n", relay.catalog.last_error.c_str());
    Table table({"  ENDPOINT", "MODEL", "REPLICA", "SEQUENCE", "DELTAS/S", "LAST FRAME", "FINGERPRINTS", "FILTER LOAD",
                 "READINESS", "KV LOAD", "PREFILL TOKENS", "DECODE BLOCKS"});
    for (const auto& pool : relay.pools) {
      const auto it = previous.find({relay.target, pool.endpoint});
      const double rate = it == previous.end() || elapsed_s <= 0 || pool.deltas_applied < it->second
                              ? 0.0
                              : double(pool.deltas_applied - it->second) / elapsed_s;
      const auto& tokens = serving_tokens(pool);
      table.add({"  " + pool.endpoint, base_models(pool), std::string(client::to_string(pool.status)),
                 std::to_string(pool.sequence), fmt::format("{:.1f}", rate), age_text(pool.last_frame, now),
                 std::to_string(pool.occupied_slots), fmt::format("{:.2f}%", 100.0 * pool.load_factor()),
                 pool_readiness(relay, pool), load_text(pool.load),
                 gauge(tokens.has_active_prefill_tokens(), tokens.active_prefill_tokens()),
                 gauge(tokens.has_active_decode_blocks(), tokens.active_decode_blocks())});
    }
    table.print();
    print_serving_models(relay);
    for (const auto& quarantined : relay.quarantined_pools)
      std::printf("  quarantined pool: %s\n", quarantined.c_str());
    for (const auto& quarantined : relay.quarantined_entries)
      std::printf("  quarantined readiness: %s\n", quarantined.c_str());
    std::printf("\n");
  }
}

DeltaCounts delta_counts(const ConsumerView& view) {
  DeltaCounts counts;
  for (const auto& relay : view.relays) {
    for (const auto& pool : relay.pools) counts[{relay.target, pool.endpoint}] = pool.deltas_applied;
  }
  return counts;
}

nlohmann::json match_json(const client::PoolMatch& match) {
  nlohmann::json out{{"target", match.target},         {"dc_id", match.dc_id},
                     {"endpoint", match.endpoint},     {"model", match.canonical_model_id},
                     {"block_size", match.block_size}, {"prompt_blocks", match.prompt_blocks},
                     {"sequence", match.sequence}};
  out["adapter"] = match.adapter ? nlohmann::json(*match.adapter) : nlohmann::json();
  out["cached_blocks"] = match.depth ? nlohmann::json(*match.depth) : nlohmann::json();
  out["readiness"] = match.readiness ? nlohmann::json(state_name(*match.readiness)) : nlohmann::json();
  if (match.load) {
    out["load"] = {{"used_blocks", match.load->used_blocks},
                   {"total_blocks", match.load->total_blocks},
                   {"observed_ranks", match.load->observed_ranks},
                   {"expected_ranks", match.load->expected_ranks},
                   {"authoritative", match.load->authoritative()}};
  } else {
    out["load"] = nullptr;
  }
  return out;
}

}  // namespace

int run_top(const Args& args) {
  client::Consumer consumer(options_for(args, "kvrelay-cli-top"));
  consumer.start();
  consumer.await([](const ConsumerView& view) { return std::ranges::all_of(view.relays, relay_shown); },
                 std::chrono::milliseconds(args.timeout_ms));
  auto previous = delta_counts(consumer.view());
  auto previous_at = Clock::now();
  const bool live = args.iterations != 1 && isatty(STDOUT_FILENO);  // redrawn in place on a terminal only
  for (std::uint32_t i = 0; args.iterations == 0 || i < args.iterations; ++i) {
    // The refresh period, before the first frame too: its delta rates span a whole period.
    std::this_thread::sleep_for(std::chrono::milliseconds(args.interval_ms));
    const auto view = consumer.view();
    const auto now = Clock::now();
    if (live) std::printf("\x1b[H\x1b[2J");
    std::printf("kvrelay-cli top  %zu relay(s)  refresh %u ms\n\n", view.relays.size(), args.interval_ms);
    render_top(view, previous, std::chrono::duration<double>(now - previous_at).count(), now);
    std::fflush(stdout);
    previous = delta_counts(view);
    previous_at = now;
  }
  return report_unsettled(consumer.view());
}

int run_overlap(const Args& args) {
  if (!args.model || !args.tokens_file) {
    std::fprintf(stderr, "kvrelay-cli: overlap needs --model NAME and --tokens FILE\n");
    return kUsageError;
  }
  const auto tokens = read_tokens(*args.tokens_file);
  if (!tokens) return kInvalidInput;
  client::Consumer consumer(options_for(args, "kvrelay-cli-overlap"));
  consumer.start();
  consumer.await([](const ConsumerView& view) { return std::ranges::all_of(view.relays, relay_settled); },
                 std::chrono::milliseconds(args.timeout_ms));
  const int unsettled = report_unsettled(consumer.view());
  const auto matches = consumer.overlap(*args.model, *tokens, args.cache_namespace);
  if (args.json) {
    auto out = nlohmann::json::array();
    for (const auto& match : matches) out.push_back(match_json(match));
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    Table table({"TARGET", "DC", "ENDPOINT", "MODEL", "BLOCK", "CACHED", "READINESS", "KV LOAD"});
    for (const auto& match : matches) {
      const auto cached = match.depth ? fmt::format("{}/{}", *match.depth, match.prompt_blocks) : "no replica";
      table.add({match.target, fmt::format("{:x}", match.dc_id), match.endpoint,
                 match.canonical_model_id + (match.adapter ? " (lora)" : ""), std::to_string(match.block_size), cached,
                 readiness_text(match.readiness), load_text(match.load)});
    }
    if (!table.empty()) table.print();
  }
  if (matches.empty() && unsettled == kOk) {
    std::fprintf(stderr, "kvrelay-cli: no pool serves '%s' (unknown or ambiguous name)\n", args.model->c_str());
    return kRelayError;
  }
  return unsettled;
}

}  // namespace kvrelay::cli
