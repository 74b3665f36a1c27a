// Offline tools for people debugging their own consumers: prompt hashing and CBI1 frames.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "client/cli/commands.hpp"
#include "client/cli/table.hpp"
#include "core/cbi1.hpp"
#include "core/token_hashing.hpp"

namespace kvrelay::cli {

int run_hash(const Args& args) {
  if (args.block_size == 0 || !args.tokens_file) {
    std::fprintf(stderr, "kvrelay-cli: hash needs --block-size N (N > 0) and --tokens FILE\n");
    return kUsageError;
  }
  const auto tokens = read_tokens(*args.tokens_file);
  if (!tokens) return kInvalidInput;
  hashing::BlockHashOptions options;
  options.kv_block_size = args.block_size;
  options.format = args.eagle ? hashing::HashFormat::kEagle : hashing::HashFormat::kStandard;
  options.seed = hashing::block_hash_seed(args.lora, args.cache_namespace);
  const auto local = hashing::block_hashes(*tokens, options);
  const auto sequence = hashing::sequence_hashes(local);
  if (args.json) {
    auto blocks = nlohmann::json::array();
    for (std::size_t i = 0; i < local.size(); ++i) {
      blocks.push_back({{"block", i},
                        {"first_token", i * args.block_size},
                        {"block_hash", local[i]},
                        {"sequence_hash", sequence[i]}});
    }
    const nlohmann::json out{{"block_size", args.block_size},
                             {"format", args.eagle ? "DYNAMO_EAGLE_V1" : "DYNAMO_STANDARD_V1"},
                             {"lora", args.lora},
                             {"cache_namespace", args.cache_namespace},
                             {"seed", options.seed},
                             {"tokens", tokens->size()},
                             {"blocks", blocks}};
    std::printf("%s\n", out.dump(2).c_str());
    return kOk;
  }
  std::printf("%zu tokens, block size %u, %s%s%s, seed %#lx: %zu full blocks\n", tokens->size(), args.block_size,
              args.eagle ? "DYNAMO_EAGLE_V1" : "DYNAMO_STANDARD_V1",
              args.lora.empty() ? "" : (", lora " + args.lora).c_str(),
              args.cache_namespace.empty() ? "" : (", cache namespace " + args.cache_namespace).c_str(),
              static_cast<unsigned long>(options.seed), local.size());
  Table table({"BLOCK", "TOKENS", "BLOCK HASH", "SEQUENCE HASH"});
  for (std::size_t i = 0; i < local.size(); ++i) {
    const std::size_t first = i * args.block_size;
    const std::size_t last = first + args.block_size - (args.eagle ? 0 : 1);
    table.add({std::to_string(i), fmt::format("{}..{}", first, last), fmt::format("{:#018x}", local[i]),
               fmt::format("{:#018x}", sequence[i])});
  }
  table.print();
  return kOk;
}

namespace {

nlohmann::json header_json(const cbi1::Header& header) {
  return {{"wire_version", header.wire_version},
          {"format_version", header.format_version},
          {"fingerprint_bits", header.fingerprint_bits},
          {"slots_per_bucket", header.slots_per_bucket},
          {"seed", header.seed},
          {"bucket_count", header.bucket_count},
          {"dc_id", header.dc_id},
          {"epoch", header.epoch},
          {"body_checksum", header.body_checksum}};
}

nlohmann::json describe(const cbi1::Decoded& frame) {
  if (const auto* chunk = std::get_if<cbi1::DecodedChunk>(&frame)) {
    const auto nonzero = std::ranges::count_if(chunk->words, [](std::uint64_t word) { return word != 0; });
    return {{"kind", "snapshot_chunk"},
            {"header", header_json(chunk->header)},
            {"chunk_index", chunk->chunk_index},
            {"chunk_count", chunk->chunk_count},
            {"bucket_offset", chunk->bucket_offset},
            {"words", chunk->words.size()},
            {"nonzero_words", nonzero}};
  }
  const auto& delta = std::get<cbi1::DecodedDelta>(frame);
  auto images = nlohmann::json::array();
  for (std::size_t i = 0; i < std::min<std::size_t>(delta.images.size(), 8); ++i) {
    images.push_back({{"bucket", delta.images[i].bucket}, {"word", fmt::format("{:#018x}", delta.images[i].word)}});
  }
  return {{"kind", "delta"},
          {"header", header_json(delta.header)},
          {"base_epoch", delta.base_epoch},
          {"images", delta.images.size()},
          {"first_images", images}};
}

}  // namespace

int run_decode_frame(const Args& args) {
  if (!args.file) {
    std::fprintf(stderr, "kvrelay-cli: decode-frame needs FILE (a raw CBI1 payload)\n");
    return kUsageError;
  }
  std::ifstream in(*args.file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "kvrelay-cli: cannot read '%s'\n", args.file->c_str());
    return kInvalidInput;
  }
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const auto decoded =
      cbi1::decode_standalone(std::span{reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()});
  if (!decoded) {
    std::fprintf(stderr, "kvrelay-cli: %s: invalid CBI1 frame: %s%s%s\n", args.file->c_str(),
                 std::string(cbi1::to_string(decoded.error().kind)).c_str(), decoded.error().detail.empty() ? "" : ": ",
                 decoded.error().detail.c_str());
    return kInvalidInput;
  }
  auto description = describe(*decoded);
  description["bytes"] = bytes.size();
  if (args.json) {
    std::printf("%s\n", description.dump(2).c_str());
    return kOk;
  }
  const auto& header = description["header"];
  std::printf("valid CBI1 %s, %zu bytes\n", description["kind"].get<std::string>().c_str(), bytes.size());
  std::printf("  format v%u, %u-bit fingerprints x %u slots, seed %#lx, %lu buckets\n",
              header["format_version"].get<unsigned>(), header["fingerprint_bits"].get<unsigned>(),
              header["slots_per_bucket"].get<unsigned>(), header["seed"].get<unsigned long>(),
              header["bucket_count"].get<unsigned long>());
  std::printf("  dc_id %#lx, epoch (sequence) %lu, body checksum %#010x\n", header["dc_id"].get<unsigned long>(),
              header["epoch"].get<unsigned long>(), header["body_checksum"].get<unsigned>());
  if (description["kind"] == "delta") {
    std::printf("  delta from sequence %lu: %lu bucket images\n", description["base_epoch"].get<unsigned long>(),
                description["images"].get<unsigned long>());
    for (const auto& image : description["first_images"]) {
      std::printf("    bucket %lu <- %s\n", image["bucket"].get<unsigned long>(),
                  image["word"].get<std::string>().c_str());
    }
  } else {
    const auto offset = description["bucket_offset"].get<unsigned long>();
    const auto words = description["words"].get<unsigned long>();
    const std::string buckets = words == 0 ? fmt::format("no buckets (at {})", offset)
                                           : fmt::format("buckets {}..{}", offset, offset + words - 1);
    std::printf("  chunk %u of %u, %s, %lu non-zero words\n", description["chunk_index"].get<unsigned>() + 1,
                description["chunk_count"].get<unsigned>(), buckets.c_str(),
                description["nonzero_words"].get<unsigned long>());
  }
  return kOk;
}

}  // namespace kvrelay::cli
