// The consumer's catalog, readiness, load and serving-load planes against the validation rules
// (docs/protocol/rpcs.md#message-validation): quarantine rows keep the rest of a snapshot;
// envelope and key faults invalidate the whole plane, and so do a revision going back and other
// content under the installed revision (docs/protocol/decisions.md#d23).
#include <catch2/catch.hpp>

#include "client/lib/catalog_state.hpp"
#include "client/lib/load_state.hpp"
#include "client/lib/readiness_state.hpp"
#include "client/lib/serving_load_state.hpp"
#include "tests/client/wire_builders.hpp"

using namespace kvrelay;
using namespace kvrelay::test;
using client::CatalogState;

namespace {

// One supported pool (1) beside one broken by `breaker` (2): the broken one is quarantined.
void require_quarantines(const std::function<void(v1::KvPoolDescriptor&)>& breaker, bool keyed = true) {
  CatalogState state;
  auto broken = descriptor(2, "qwen");
  breaker(broken);
  REQUIRE_FALSE(state.apply(catalog(1, {descriptor(1), broken})));
  CHECK(state.valid());
  CHECK(state.pools().size() == 1);
  CHECK(state.find(wire::pool_key(producer(1).pool_id())) != nullptr);
  REQUIRE(state.quarantined().size() == 1);
  CHECK(state.quarantined()[0].pool.has_value() == keyed);
  CHECK_FALSE(state.resolve("qwen").has_value());
  CHECK(state.resolve("llama").has_value());
}

}  // namespace

TEST_CASE("catalog: unsupported pools are quarantined, the rest of the snapshot applies", "[client][catalog]") {
  for (const auto& breaker : pool_breakers()) {
    SECTION(breaker.name) { require_quarantines(breaker.apply, breaker.keyed); }
  }
}

TEST_CASE("catalog: an invalid envelope or ambiguous keys invalidate the whole plane", "[client][catalog]") {
  CatalogState state;
  REQUIRE_FALSE(state.apply(catalog(5, {descriptor(1)})));
  SECTION("marker mismatch") {
    auto update = catalog(6, {descriptor(1)});
    update.set_contract_marker(0x4B565232);
    const auto fault = state.apply(update);
    REQUIRE(fault);
    CHECK(fault->kind == "ContractMarker");
  }
  SECTION("protocol version") {
    auto update = catalog(6, {descriptor(1)});
    update.set_protocol_version(2);
    const auto fault = state.apply(update);
    REQUIRE(fault);
    CHECK(fault->kind == "ProtocolVersion");
  }
  SECTION("duplicate pool ids") {
    auto again = descriptor(1, "other");
    CHECK(state.apply(catalog(6, {descriptor(1), again}))->kind == "DuplicatePool");
  }
  SECTION("a revision going back") { CHECK(state.apply(catalog(4, {descriptor(1)}))->kind == "RevisionRegressed"); }
  CHECK_FALSE(state.valid());
  CHECK(state.pools().empty());
  CHECK_FALSE(state.resolve("llama").has_value());
}

TEST_CASE("catalog: the installed revision repeats only with the same content (docs/protocol/decisions.md#d23)",
          "[client][catalog]") {
  CatalogState state;
  REQUIRE_FALSE(state.apply(catalog(5, {descriptor(1), descriptor(2, "qwen")})));
  SECTION("a heartbeat: same revision, same content") {
    CHECK_FALSE(state.apply(catalog(5, {descriptor(1), descriptor(2, "qwen")})));
    CHECK_FALSE(state.apply(catalog(5, {descriptor(1), descriptor(2, "qwen")})));
    CHECK(state.valid());
    CHECK(state.revision() == 5);
    CHECK(state.pools().size() == 2);
  }
  SECTION("same revision, different content") {
    const std::vector changed{catalog(5, {descriptor(1)}),                                    // a pool withdrawn
                              catalog(5, {descriptor(1), descriptor(2, "qwen", {"chat"})})};  // an alias added
    for (std::size_t i = 0; i < changed.size(); ++i) {
      CAPTURE(i);
      REQUIRE_FALSE(state.apply(catalog(5, {descriptor(1), descriptor(2, "qwen")})));
      const auto fault = state.apply(changed[i]);
      REQUIRE(fault);
      CHECK(fault->kind == "RevisionNotAdvanced");
      CHECK_THAT(fault->detail, Catch::Contains("changed without advancing its revision"));
      CHECK_FALSE(state.valid());
      CHECK(state.pools().empty());
      CHECK_FALSE(state.resolve("llama").has_value());
    }
    // A reopened stream's first snapshot is taken as is, whatever its revision.
    REQUIRE_FALSE(state.apply(changed[0]));
    CHECK(state.valid());
  }
}

TEST_CASE("catalog: each snapshot replaces the view, an absent pool is withdrawn", "[client][catalog]") {
  CatalogState state;
  REQUIRE_FALSE(state.apply(catalog(1, {descriptor(1), descriptor(2, "qwen")})));
  REQUIRE_FALSE(state.apply(catalog(3, {descriptor(2, "qwen")})));  // revisions may skip
  CHECK(state.pools().size() == 1);
  CHECK_FALSE(state.resolve("llama").has_value());
  CHECK(state.revision() == 3);
}

TEST_CASE("catalog: a name resolving to two distinct bindings is omitted, one binding on many pools resolves",
          "[client][catalog]") {
  CatalogState state;
  auto lora_pool = descriptor(3, "llama");
  add_lora(lora_pool, "tenant-a");
  REQUIRE_FALSE(state.apply(
      catalog(1, {descriptor(1, "llama", {"chat"}), descriptor(2, "llama", {"chat"}),
                  descriptor(4, "qwen", {"chat-q", "shared"}), descriptor(5, "mistral", {"shared"}), lora_pool})));
  const auto llama = state.resolve("chat");
  REQUIRE(llama);
  CHECK(llama->pools.size() == 2);
  CHECK(llama->binding.canonical_model_id == "llama");
  CHECK(state.resolve("llama")->pools.size() == 3);
  CHECK_FALSE(state.resolve("shared").has_value());
  CHECK(state.resolve("chat-q")->binding.canonical_model_id == "qwen");
  const auto adapter = state.resolve("tenant-a");
  REQUIRE(adapter);
  CHECK(adapter->binding.adapter == "tenant-a");
  CHECK(adapter->binding.base_model == "llama");
}

TEST_CASE("readiness: unknown states or roles quarantine only their entry", "[client][readiness]") {
  client::ReadinessState state;
  auto unknown_state = topology_entry("qwen", v1::SERVING_READINESS_STATE_READY);
  unknown_state.set_state(static_cast<v1::ServingReadinessState>(9));
  auto unknown_role = topology_entry("mistral", v1::SERVING_READINESS_STATE_READY);
  unknown_role.mutable_members(0)->set_roles(0, static_cast<v1::WorkerRole>(12));
  auto unknown_adapter_role = topology_entry("phi", v1::SERVING_READINESS_STATE_READY);
  auto* adapter = unknown_adapter_role.add_adapters();
  adapter->set_canonical_model_id("phi-lora");
  adapter->set_state(v1::SERVING_READINESS_STATE_UNAVAILABLE);
  adapter->add_missing_roles(static_cast<v1::WorkerRole>(13));
  auto encode_duplicate = topology_entry("gemma", v1::SERVING_READINESS_STATE_READY);
  encode_duplicate.add_duplicate_role_endpoints(v1::WORKER_ROLE_ENCODE);
  REQUIRE_FALSE(state.apply(readiness(1, {topology_entry("llama", v1::SERVING_READINESS_STATE_UNKNOWN), unknown_state,
                                          unknown_role, unknown_adapter_role, encode_duplicate})));
  CHECK(state.entries().size() == 1);
  REQUIRE(state.find({"prod", "llama"}) != nullptr);
  CHECK(state.find({"prod", "llama"})->state() == v1::SERVING_READINESS_STATE_UNKNOWN);  // a valid state
  CHECK(state.quarantined().size() == 4);
  CHECK(state.find({"prod", "qwen"}) == nullptr);

  // The next snapshot replaces everything, quarantine included.
  REQUIRE_FALSE(state.apply(readiness(2, {topology_entry("qwen", v1::SERVING_READINESS_STATE_READY)})));
  CHECK(state.quarantined().empty());
  CHECK(state.find({"prod", "llama"}) == nullptr);
}

TEST_CASE("readiness: duplicate keys or a bad envelope invalidate the plane", "[client][readiness]") {
  client::ReadinessState state;
  REQUIRE_FALSE(state.apply(readiness(1, {topology_entry("llama", v1::SERVING_READINESS_STATE_READY)})));
  SECTION("duplicate entry key") {
    CHECK(state.apply(readiness(2, {topology_entry("llama", v1::SERVING_READINESS_STATE_READY),
                                    topology_entry("llama", v1::SERVING_READINESS_STATE_UNAVAILABLE)})));
  }
  SECTION("missing relay identity") {
    auto update = readiness(2, {});
    update.clear_relay();
    CHECK(state.apply(update));
  }
  CHECK_FALSE(state.valid());
  CHECK(state.entries().empty());
}

TEST_CASE("readiness: the installed revision repeats only with the same content (docs/protocol/decisions.md#d23)",
          "[client][readiness]") {
  client::ReadinessState state;
  const auto entries = [] {
    return std::vector{topology_entry("llama", v1::SERVING_READINESS_STATE_READY),
                       topology_entry("qwen", v1::SERVING_READINESS_STATE_UNKNOWN, 2)};
  };
  REQUIRE_FALSE(state.apply(readiness(3, entries())));
  SECTION("a heartbeat: same revision, same content") {
    CHECK_FALSE(state.apply(readiness(3, entries())));
    CHECK_FALSE(state.apply(readiness(3, entries())));
    CHECK(state.valid());
    CHECK(state.revision() == 3);
    CHECK(state.entries().size() == 2);
  }
  SECTION("same revision, different content") {
    auto unavailable = entries();
    unavailable[0].set_state(v1::SERVING_READINESS_STATE_UNAVAILABLE);
    auto adapter = entries();
    adapter[0].add_adapters()->set_canonical_model_id("tenant-a");
    const std::vector changes{readiness(3, {entries()[0]}), readiness(3, unavailable), readiness(3, adapter)};
    for (const auto& changed : changes) {
      REQUIRE_FALSE(state.apply(readiness(3, entries())));
      const auto fault = state.apply(changed);
      REQUIRE(fault);
      CHECK(fault->kind == "RevisionNotAdvanced");
      CHECK_THAT(fault->detail, Catch::Contains("readiness changed without advancing its revision 3"));
      CHECK_FALSE(state.valid());
      CHECK(state.entries().empty());
    }
  }
  SECTION("a newer revision may change anything, an older one may not repeat the content") {
    REQUIRE_FALSE(state.apply(readiness(4, {entries()[0]})));
    CHECK(state.entries().size() == 1);
    CHECK(state.apply(readiness(3, {entries()[0]}))->kind == "RevisionRegressed");
  }
}

namespace {

// The rules both windowed planes share; `window(n, pools)` builds a valid window numbered n
// reporting the given pools.
template <class State, class Build>
void require_contiguous_windows(const Build& window) {
  State state;
  const auto key = [](std::uint8_t pool) { return wire::producer_key(producer(pool)); };
  REQUIRE_FALSE(state.apply(window(4, {1, 2})));  // the first window of a stream: any number
  CHECK(state.window().pools.size() == 2);
  REQUIRE_FALSE(state.apply(window(5, {2})));  // each window replaces the one before
  CHECK(state.window_sequence() == 5);
  CHECK(state.find_pool(key(1)) == nullptr);
  CHECK(state.find_pool(key(2)) != nullptr);
  std::uint64_t next = 0;
  std::string kind;
  SECTION("a gap") {
    next = 7;
    kind = "WindowGap";
  }
  SECTION("a repeated window") {
    next = 5;
    kind = "WindowRegressed";
  }
  SECTION("a window going back") {
    next = 3;
    kind = "WindowRegressed";
  }
  const auto fault = state.apply(window(next, {2}));
  REQUIRE(fault);
  CHECK(fault->kind == kind);
  CHECK_FALSE(state.valid());
  CHECK(state.find_pool(key(2)) == nullptr);  // nothing of an invalid plane is read
  // Reopened: the first window of the new stream is accepted whatever its number.
  REQUIRE_FALSE(state.apply(window(2, {1})));
  CHECK(state.valid());
  CHECK(state.find_pool(key(1)) != nullptr);
}

}  // namespace

TEST_CASE("load: windows follow one another, a gap or a regression invalidates only the load plane", "[client][load]") {
  require_contiguous_windows<client::LoadState>(
      [](std::uint64_t n, std::vector<std::uint8_t> pools) { return load_window(n, std::move(pools)); });
}

TEST_CASE("load: an unsupported producer is quarantined, duplicate producers invalidate", "[client][load]") {
  client::LoadState state;
  auto update = load_window(1, {1, 2});
  update.mutable_pools(1)->mutable_producer()->mutable_ckf_format()->set_slots_per_bucket(8);
  REQUIRE_FALSE(state.apply(update));
  CHECK(state.window().pools.size() == 1);
  CHECK(state.window().quarantined == 1);
  CHECK(state.find_pool(wire::producer_key(producer(2))) == nullptr);
  CHECK(state.find_pool(wire::producer_key(producer(1)))->kv_used_blocks() == 10);
  CHECK(state.apply(load_window(2, {1, 1})));
  CHECK_FALSE(state.valid());
}

TEST_CASE("serving load: windows follow one another, a gap or a regression invalidates the plane",
          "[client][serving-load]") {
  require_contiguous_windows<client::ServingLoadState>(
      [](std::uint64_t n, std::vector<std::uint8_t> pools) { return serving_load_window(n, std::move(pools)); });
}

TEST_CASE("serving load: a valid window is kept per pool and per model as sent", "[client][serving-load]") {
  client::ServingLoadState state;
  const auto update = serving_load_window(3, {1, 2}, {"llama", "qwen"});
  REQUIRE_FALSE(state.apply(update));
  const auto& window = state.window();
  CHECK(window.quarantined == 0);
  REQUIRE(window.models.size() == 2);
  const auto& llama = window.models.at({"prod", "llama"});
  CHECK(llama.load().status() == v1::DATA_STATUS_COMPLETE);
  CHECK(llama.load().requests().requests_awaiting_first_token() == 1);
  CHECK(llama.load().tokens().awaiting_first_token_input_tokens() == 300);
  CHECK(llama.deployment().serving_pools_size() == 2);
  const auto* pool = state.find_pool(wire::producer_key(producer(2)));
  REQUIRE(pool != nullptr);
  CHECK(pool->load().tokens().active_prefill_tokens() == 200);
  CHECK(pool->load().tokens().active_decode_blocks() == 20);
  CHECK_FALSE(pool->deployment().has_max_concurrency());
}

TEST_CASE("serving load: a window failing its message check is rejected and invalidates the plane",
          "[client][serving-load]") {
  client::ServingLoadState state;
  REQUIRE_FALSE(state.apply(serving_load_window(1, {1})));
  auto update = serving_load_window(2, {1, 2}, {"llama", "qwen"});
  std::string kind;
  SECTION("contract marker") {
    update.set_contract_marker(0x4B565232);
    kind = "ContractMarker";
  }
  SECTION("no relay identity") {
    update.clear_relay();
    kind = "MissingField";
  }
  SECTION("a model twice") {
    update.mutable_models(1)->set_canonical_model_id("llama");
    kind = "DuplicateModel";
  }
  SECTION("a producer twice") {
    *update.mutable_pools(1)->mutable_producer() = producer(1);
    kind = "DuplicateProducer";
  }
  SECTION("a model without a canonical id") {
    update.mutable_models(0)->clear_canonical_model_id();
    kind = "InvalidText";
  }
  const auto fault = state.apply(update);
  REQUIRE(fault);
  CHECK(fault->kind == kind);
  CHECK_FALSE(state.valid());
  CHECK(state.window().pools.empty());
  CHECK(state.window().models.empty());
}

TEST_CASE("serving load: an entry failing its check is quarantined, the rest of the window applies",
          "[client][serving-load]") {
  client::ServingLoadState state;
  auto update = serving_load_window(1, {1, 2}, {"llama", "qwen"});
  bool pool_quarantined = true;
  SECTION("a COMPLETE pool without its decode gauge") {
    update.mutable_pools(1)->mutable_load()->mutable_tokens()->clear_active_decode_blocks();
  }
  SECTION("a DEGRADED pool with its gauges set") {
    update.mutable_pools(1)->mutable_load()->set_status(v1::DATA_STATUS_DEGRADED);
  }
  SECTION("a pool carrying request counts") {
    update.mutable_pools(1)->mutable_load()->mutable_requests()->set_requests_generating(1);
  }
  SECTION("an unsupported producer") {
    update.mutable_pools(1)->mutable_producer()->mutable_ckf_format()->set_slots_per_bucket(8);
  }
  SECTION("a COMPLETE model without its requests in flight") {
    update.mutable_models(1)->mutable_load()->mutable_requests()->clear_requests_generating();
    pool_quarantined = false;
  }
  SECTION("a model with an unknown load status") {
    update.mutable_models(1)->mutable_load()->set_status(static_cast<v1::DataStatus>(7));
    pool_quarantined = false;
  }
  SECTION("a model without its deployment") {
    update.mutable_models(1)->clear_deployment();
    pool_quarantined = false;
  }
  REQUIRE_FALSE(state.apply(update));
  CHECK(state.valid());
  CHECK(state.window().quarantined == 1);
  CHECK(state.window().pools.size() == (pool_quarantined ? 1 : 2));
  CHECK(state.window().models.size() == (pool_quarantined ? 2 : 1));
  CHECK(state.find_pool(wire::producer_key(producer(1))) != nullptr);
  CHECK(state.window().models.contains({"prod", "llama"}));
}
