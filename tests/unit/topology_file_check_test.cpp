// The topology file's own checks (docs/protocol/ingest.md#topology-file): the first problem
// found is named by its field path, and a file with none passes.
#include <catch2/catch.hpp>

#include "core/ingest_validation.hpp"

using namespace kvrelay;
namespace ingest_v1 = ::kvrelay::ingest::v1;

namespace {

ingest_v1::TopologyFile file_with_one_worker() {
  ingest_v1::TopologyFile file;
  file.set_version(1);
  auto* endpoint = file.add_endpoints();
  endpoint->mutable_endpoint()->set_namespace_("prod");
  endpoint->mutable_endpoint()->set_component("backend");
  endpoint->mutable_endpoint()->set_endpoint("generate");
  auto* worker = endpoint->add_workers();
  worker->set_worker_id(7);
  worker->mutable_card()->set_display_name("llama");
  worker->mutable_card()->set_kv_cache_block_size(16);
  worker->mutable_card()->mutable_runtime_config()->set_data_parallel_size(1);
  auto* frontends = file.add_frontends();
  frontends->set_namespace_("prod");
  frontends->add_frontend_ids(1);
  return file;
}

}  // namespace

TEST_CASE("topology file: a file without problems passes", "[topology]") {
  const auto problem = ingest_check::topology_file(file_with_one_worker());
  INFO(problem.value_or(""));
  CHECK_FALSE(problem.has_value());
}

TEST_CASE("topology file: the first problem is named by its field", "[topology]") {
  auto file = file_with_one_worker();
  std::string expected;
  SECTION("a version other than 1") {
    file.set_version(2);
    expected = "version: 2 is not supported (must be 1)";
  }
  SECTION("an endpoint listed twice") {
    *file.add_endpoints() = file.endpoints(0);
    expected = "endpoints[1].endpoint: is listed twice";
  }
  SECTION("a worker listed twice on one endpoint") {
    *file.mutable_endpoints(0)->add_workers() = file.endpoints(0).workers(0);
    expected = "endpoints[0].workers[1].worker_id: is listed twice";
  }
  SECTION("a frontend namespace listed twice") {
    *file.add_frontends() = file.frontends(0);
    expected = "frontends[1].namespace: is listed twice";
  }
  SECTION("a router id of 0") {
    file.mutable_endpoints(0)->add_scheduler_router_ids(0);
    expected = "endpoints[0].scheduler_router_ids";
  }
  const auto problem = ingest_check::topology_file(file);
  REQUIRE(problem.has_value());
  CHECK_THAT(*problem, Catch::StartsWith(expected));
}

TEST_CASE("topology file: the same worker id on two endpoints is two workers", "[topology]") {
  auto file = file_with_one_worker();
  auto* other = file.add_endpoints();
  *other = file.endpoints(0);
  other->mutable_endpoint()->set_component("other");
  CHECK_FALSE(ingest_check::topology_file(file).has_value());
}
