#pragma once
// The endpoint the benchmark programs serve pool `index` at: bench/pool-<index>/generate.
#include <fmt/format.h>

#include <cstddef>

#include "kvrelay/ingest/v1/ingest.pb.h"

namespace kvrelay::bench {

inline ::kvrelay::ingest::v1::EndpointRef pool_endpoint(std::size_t index) {
  ::kvrelay::ingest::v1::EndpointRef ref;
  ref.set_namespace_("bench");
  ref.set_component(fmt::format("pool-{}", index));
  ref.set_endpoint("generate");
  return ref;
}

}  // namespace kvrelay::bench
