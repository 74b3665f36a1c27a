// A core actor that fails stops the relay instead of leaving it serving a frozen state:
// health flips to NOT_SERVING, ingest calls fail promptly with UNAVAILABLE instead of
// hanging, and the runtime reports the failure to its owner (docs/architecture.md,
// "Supervision").
#include <catch2/catch.hpp>

#include "tests/integration/harness.hpp"

using namespace kvrelay::test;

TEST_CASE("supervision: membership failing fails open ingest calls and stops the relay", "[supervision]") {
  TestRelay relay;
  relay.put_worker(put_worker_request(kBackend, 1));

  // A client stream already open when membership fails.
  grpc::ClientContext stream_context;
  stream_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  ingest_v1::PublishKvEventsResponse stream_response;
  auto stream = relay.ingest().PublishKvEvents(&stream_context, &stream_response);
  REQUIRE(stream->Write(stored_batch(kBackend, 1, 0, 1, 0, {{1, 11}})));
  for (std::size_t polls = 0; relay.get_state().pools(0).unique_blocks() == 0; ++polls) {
    REQUIRE(polls < 10'000);  // applied, and so acknowledged, before membership fails
  }

  relay.runtime().crash_membership_for_test();
  const auto stop = relay.runtime().wait_for_stop(std::chrono::seconds(30));
  REQUIRE(stop.has_value());
  CHECK(stop->failed);
  CHECK_THAT(stop->why, Catch::Contains("membership exited"));
  CHECK_THAT(stop->why, Catch::Contains("test hook: membership asked to crash"));

  // A new unary call fails at once: nothing can answer it.
  grpc::ClientContext unary_context;
  unary_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  ingest_v1::PutWorkerResponse unary_response;
  const auto unary = relay.ingest().PutWorker(&unary_context, put_worker_request(kBackend, 2), &unary_response);
  CHECK(unary.error_code() == grpc::StatusCode::UNAVAILABLE);

  // The open stream's next batch cannot be applied: the stream ends UNAVAILABLE at once,
  // without the client closing its side (the deadline is far beyond what the end takes).
  stream->Write(stored_batch(kBackend, 1, 0, 1, 1, {{2, 22}}));
  const auto streamed = stream->Finish();
  CHECK(streamed.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK_THAT(streamed.error_message(), Catch::Contains("could not apply every batch"));
}
