#pragma once
// A pool's stable id, short enough for a log line or a table: its dc id and the first three
// bytes of both indexer-domain digests (docs/protocol/pools.md#identity-derivation), as
// `kvrelay-cli catalog` prints it.
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "dynamo/kvrelay/v1/relay.pb.h"

namespace kvrelay {

inline std::string pool_label(const ::dynamo::kvrelay::v1::KvPoolId& pool) {
  auto head = [](const std::string& digest) {
    std::string hex;
    for (std::size_t i = 0; i < std::min<std::size_t>(digest.size(), 3); ++i) {
      hex += fmt::format("{:02x}", static_cast<unsigned char>(digest[i]));
    }
    return hex;
  };
  return fmt::format("{:x}:{}:{}", pool.dc_id(), head(pool.indexer_domain().cache_semantics().digest()),
                     head(pool.indexer_domain().routing_scope().digest()));
}

}  // namespace kvrelay
