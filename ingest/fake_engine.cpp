#include "ingest/fake_engine.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <msgpack.hpp>
#include <zmq_addon.hpp>

#include <cerrno>
#include <iterator>
#include <stdexcept>

#include "core/xxh3.hpp"

namespace kvrelay::demo {

namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

// seq = -1 as 8 bytes big-endian closes every replay answer.
constexpr std::uint64_t kEndOfReplay = ~std::uint64_t{0};
// vLLM's default high-water mark for its publishing socket.
constexpr int kPublishHighWaterMark = 100000;

// ---- vLLM's payload -------------------------------------------------------------------------
// vLLM encodes with msgspec. The batch is array_like: an array of all its fields. An event is
// a map whose first key, "type", names its class, then its fields in declaration order; with
// omit_defaults, a field declared with a default (None) is left out while it holds it, and a
// field without a default is always written, nil or not.

void pack_string(Packer& packer, std::string_view text) {
  packer.pack_str(static_cast<std::uint32_t>(text.size()));
  packer.pack_str_body(text.data(), static_cast<std::uint32_t>(text.size()));
}

void pack_optional_string(Packer& packer, const std::optional<std::string>& text) {
  if (text) {
    pack_string(packer, *text);
  } else {
    packer.pack_nil();
  }
}

void pack_hashes(Packer& packer, const std::vector<std::uint64_t>& hashes) {
  packer.pack_array(static_cast<std::uint32_t>(hashes.size()));
  for (std::uint64_t hash : hashes) packer.pack_uint64(hash);  // vLLM's integer hashes are unsigned 64-bit
}

void pack_token_ids(Packer& packer, const std::vector<std::uint32_t>& tokens) {
  packer.pack_array(static_cast<std::uint32_t>(tokens.size()));
  for (std::uint32_t token : tokens) packer.pack_uint32(token);
}

void pack_token_ids(Packer& packer, const std::vector<std::array<std::uint32_t, 2>>& pairs) {
  packer.pack_array(static_cast<std::uint32_t>(pairs.size()));
  for (const auto& pair : pairs) {
    packer.pack_array(2);
    packer.pack_uint32(pair[0]);
    packer.pack_uint32(pair[1]);
  }
}

void pack_event(Packer& packer, const BlockStored& event) {
  // type and the seven fields without a default; extra_keys is never set here, so never written.
  const std::uint32_t fields = 8 + (event.group_idx ? 1 : 0) + (event.kv_cache_spec_kind ? 1 : 0);
  packer.pack_map(fields);
  pack_string(packer, "type");
  pack_string(packer, "BlockStored");
  pack_string(packer, "block_hashes");
  pack_hashes(packer, event.block_hashes);
  pack_string(packer, "parent_block_hash");
  if (event.parent_block_hash) {
    packer.pack_uint64(*event.parent_block_hash);
  } else {
    packer.pack_nil();
  }
  pack_string(packer, "token_ids");
  std::visit([&](const auto& tokens) { pack_token_ids(packer, tokens); }, event.token_ids);
  pack_string(packer, "block_size");
  packer.pack_uint32(event.block_size);
  pack_string(packer, "lora_id");  // deprecated in vLLM but still a field without a default
  packer.pack_nil();
  pack_string(packer, "medium");
  pack_optional_string(packer, event.medium);
  pack_string(packer, "lora_name");
  pack_optional_string(packer, event.lora_name);
  if (event.group_idx) {
    pack_string(packer, "group_idx");
    packer.pack_uint32(*event.group_idx);
  }
  if (event.kv_cache_spec_kind) {
    pack_string(packer, "kv_cache_spec_kind");
    pack_string(packer, *event.kv_cache_spec_kind);
  }
}

void pack_event(Packer& packer, const BlockRemoved& event) {
  packer.pack_map(3 + (event.group_idx ? 1 : 0));
  pack_string(packer, "type");
  pack_string(packer, "BlockRemoved");
  pack_string(packer, "block_hashes");
  pack_hashes(packer, event.block_hashes);
  pack_string(packer, "medium");
  pack_optional_string(packer, event.medium);
  if (event.group_idx) {
    pack_string(packer, "group_idx");
    packer.pack_uint32(*event.group_idx);
  }
}

void pack_event(Packer& packer, const AllBlocksCleared&) {
  packer.pack_map(1);
  pack_string(packer, "type");
  pack_string(packer, "AllBlocksCleared");
}

double unix_seconds_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::array<std::uint8_t, 8> big_endian(std::uint64_t value) {
  std::array<std::uint8_t, 8> bytes;
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(value >> (56 - 8 * i));
  return bytes;
}

std::uint64_t from_big_endian(const zmq::message_t& frame) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < 8; ++i) value = (value << 8) | frame.data<std::uint8_t>()[i];
  return value;
}

}  // namespace

std::string encode_vllm_batch(double ts, std::span<const EngineEvent> events, std::optional<std::uint32_t> dp_rank) {
  msgpack::sbuffer buffer;
  Packer packer(buffer);
  // The batch is array_like: every field is written, a missing rank as nil.
  packer.pack_array(3);
  packer.pack_double(ts);
  packer.pack_array(static_cast<std::uint32_t>(events.size()));
  for (const EngineEvent& event : events) std::visit([&](const auto& e) { pack_event(packer, e); }, event);
  if (dp_rank) {
    packer.pack_uint32(*dp_rank);
  } else {
    packer.pack_nil();
  }
  return std::string(buffer.data(), buffer.size());
}

std::uint64_t engine_block_hash(std::optional<std::uint64_t> parent, std::span<const std::uint32_t> block_tokens,
                                std::string_view lora_name) {
  std::vector<std::uint8_t> bytes(8 + 4 * block_tokens.size());
  store_le64(bytes.data(), parent.value_or(0));
  for (std::size_t i = 0; i < block_tokens.size(); ++i) store_le32(bytes.data() + 8 + 4 * i, block_tokens[i]);
  const std::uint64_t seed = lora_name.empty() ? 0 : xxh3(lora_name.data(), lora_name.size());
  return xxh3(bytes.data(), bytes.size(), seed);
}

BlockStored stored_blocks(std::span<const std::uint32_t> tokens, std::uint32_t block_size,
                          std::optional<std::uint64_t> parent, std::optional<std::string> lora_name) {
  if (block_size == 0) throw std::invalid_argument("stored_blocks: block_size must be positive");
  BlockStored event;
  event.parent_block_hash = parent;
  event.block_size = block_size;
  std::vector<std::uint32_t> stored_tokens;
  std::optional<std::uint64_t> previous = parent;
  for (std::size_t start = 0; start + block_size <= tokens.size(); start += block_size) {
    const auto block = tokens.subspan(start, block_size);
    previous = engine_block_hash(previous, block, lora_name.value_or(""));
    event.block_hashes.push_back(*previous);
    stored_tokens.insert(stored_tokens.end(), block.begin(), block.end());
  }
  event.token_ids = std::move(stored_tokens);
  event.lora_name = std::move(lora_name);
  return event;
}

// ---- FakeEngine -------------------------------------------------------------------------------

FakeEngine::FakeEngine(FakeEngineOptions options)
    : options_(std::move(options)), context_(1), pub_(context_, zmq::socket_type::xpub) {
  // An XPUB sends exactly what a PUB sends; it also hands over every (un)subscription, which
  // await_subscribers counts.
  pub_.set(zmq::sockopt::linger, 0);
  pub_.set(zmq::sockopt::sndhwm, kPublishHighWaterMark);
  pub_.set(zmq::sockopt::xpub_verboser, 1);
  pub_.bind(options_.endpoint);
  pub_endpoint_ = pub_.get(zmq::sockopt::last_endpoint);
  if (options_.replay_endpoint) {
    // Bound before the thread starts, so a failure throws with nothing to stop.
    zmq::socket_t router(context_, zmq::socket_type::router);
    router.set(zmq::sockopt::linger, 0);
    router.bind(*options_.replay_endpoint);
    replay_endpoint_ = router.get(zmq::sockopt::last_endpoint);
    replay_thread_ = std::thread([this, socket = std::move(router)]() mutable { serve_replays(std::move(socket)); });
  }
}

FakeEngine::~FakeEngine() {
  context_.shutdown();  // the replay thread's blocking receive ends with ETERM
  if (replay_thread_.joinable()) replay_thread_.join();
  pub_.close();
  context_.close();
}

std::uint64_t FakeEngine::publish(std::span<const EngineEvent> events) {
  return publish_payload(
      std::make_shared<const std::string>(encode_vllm_batch(unix_seconds_now(), events, options_.dp_rank)));
}

std::uint64_t FakeEngine::publish_payload(std::shared_ptr<const std::string> payload) {
  const std::uint64_t seq = next_seq_++;
  // Buffered before it is sent, so that a subscriber asking for a replay of a batch it has
  // just received always finds it (vLLM answers replays on its publishing thread).
  keep_for_replay(seq, payload);
  const auto seq_bytes = big_endian(seq);
  pub_.send(zmq::buffer(options_.topic), zmq::send_flags::sndmore);
  pub_.send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore);
  pub_.send(zmq::buffer(*payload), zmq::send_flags::none);
  read_subscriptions();  // so that they never pile up in the socket
  return seq;
}

bool FakeEngine::await_subscribers(std::size_t count, std::chrono::milliseconds timeout) {
  return await_subscriptions([&] { return subscriptions_ >= count; }, timeout);
}

bool FakeEngine::await_subscriptions_made(std::size_t total, std::chrono::milliseconds timeout) {
  return await_subscriptions([&] { return subscriptions_made_ >= total; }, timeout);
}

bool FakeEngine::await_subscriptions(const std::function<bool()>& enough, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  read_subscriptions();
  while (!enough()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    zmq::pollitem_t item{pub_.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, left);
    read_subscriptions();
  }
  return true;
}

void FakeEngine::read_subscriptions() {
  zmq::message_t message;
  while (pub_.recv(message, zmq::recv_flags::dontwait)) {
    if (message.size() == 0) continue;
    // Byte 0 is 1 for a subscription, 0 for its end; the rest is the subscribed prefix.
    const std::string_view prefix(message.data<char>() + 1, message.size() - 1);
    if (!options_.topic.starts_with(prefix)) continue;
    const auto kind = message.data<std::uint8_t>()[0];
    if (kind == 1) {
      ++subscriptions_;
      ++subscriptions_made_;
    }
    if (kind == 0 && subscriptions_ > 0) --subscriptions_;
  }
}

void FakeEngine::keep_for_replay(std::uint64_t seq, std::shared_ptr<const std::string> payload) {
  std::lock_guard lock(buffer_mutex_);
  buffer_.push_back({seq, std::move(payload)});
  while (buffer_.size() > options_.buffer_steps) buffer_.pop_front();
}

std::vector<FakeEngine::BufferedBatch> FakeEngine::buffered_from(std::uint64_t start_seq) {
  std::lock_guard lock(buffer_mutex_);
  std::vector<BufferedBatch> batches;
  for (const auto& batch : buffer_) {
    if (batch.seq >= start_seq) batches.push_back(batch);
  }
  return batches;
}

void FakeEngine::serve_replays(zmq::socket_t router) {
  for (;;) {
    try {
      answer_replay(router);
    } catch (const zmq::error_t& error) {
      if (error.num() == ETERM) return;  // the engine is being destroyed
      if (error.num() == EINTR) continue;
      spdlog::error("fake engine: the replay socket failed ({}); replays stop", error.what());
      return;
    }
  }
}

// A request is [identity, "", start_seq]; the answer is every buffered batch from start_seq
// on, as [identity, "", seq, payload], then [identity, "", END_SEQ, ""]. Anything else is
// ignored, as vLLM ignores it.
void FakeEngine::answer_replay(zmq::socket_t& router) {
  std::vector<zmq::message_t> request;
  if (!zmq::recv_multipart(router, std::back_inserter(request))) return;
  if (request.size() != 3 || request[1].size() != 0 || request[2].size() != 8) return;
  const zmq::message_t& identity = request[0];
  const auto send = [&](std::uint64_t seq, std::string_view payload) {
    const auto seq_bytes = big_endian(seq);
    router.send(zmq::buffer(identity.data(), identity.size()), zmq::send_flags::sndmore);
    router.send(zmq::const_buffer(nullptr, 0), zmq::send_flags::sndmore);
    router.send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore);
    router.send(zmq::buffer(payload.data(), payload.size()), zmq::send_flags::none);
  };
  for (const BufferedBatch& batch : buffered_from(from_big_endian(request[2]))) send(batch.seq, *batch.payload);
  send(kEndOfReplay, {});
}

}  // namespace kvrelay::demo
