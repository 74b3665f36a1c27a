// The ingest token file (grpc_gateway/ingest_auth.hpp, docs/protocol/ingest.md#authentication):
// what it accepts, and how it follows a rotation without a restart.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "grpc_gateway/ingest_auth.hpp"

using kvrelay::gateway::IngestAuth;
using Verdict = IngestAuth::Verdict;

namespace {

std::string path_of(const std::string& name) { return std::string(KVRELAY_TEST_TMP_DIR) + "/" + name; }

// In place: the same inode, as `echo new > file` does.
void write_in_place(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
}

// Replaced by a rename, as a Kubernetes Secret update or an atomic deploy does.
void replace(const std::string& path, const std::string& content) {
  write_in_place(path + ".next", content);
  std::filesystem::rename(path + ".next", path);
}

std::unique_ptr<IngestAuth> open_with(const std::string& name, const std::string& content) {
  const std::string path = path_of(name);
  replace(path, content);
  auto auth = IngestAuth::open(path);
  INFO((auth ? std::string() : auth.error()));
  REQUIRE(auth.has_value());
  return std::move(*auth);
}

Verdict presenting(IngestAuth& auth, std::string_view value) { return auth.check({value}); }

}  // namespace

TEST_CASE("ingest auth: a missing or empty token file is refused at start", "[ingest-auth]") {
  const std::string missing = path_of("no-such-token");
  std::filesystem::remove(missing);
  auto absent = IngestAuth::open(missing);
  REQUIRE_FALSE(absent.has_value());
  CHECK_THAT(absent.error(), Catch::Contains("cannot read " + missing));

  for (const std::string content : {"", " \n\t\n"}) {
    const std::string path = path_of("empty-token");
    replace(path, content);
    auto empty = IngestAuth::open(path);
    REQUIRE_FALSE(empty.has_value());
    CHECK_THAT(empty.error(), Catch::Contains(path + " holds no token"));
  }
}

TEST_CASE("ingest auth: the file's token without surrounding whitespace, as 'Bearer <token>'", "[ingest-auth]") {
  auto auth = open_with("trimmed-token", "  s3cret-token\n\n");
  CHECK(presenting(*auth, "Bearer s3cret-token") == Verdict::kAccepted);
  CHECK(presenting(*auth, "bearer s3cret-token") == Verdict::kAccepted);
  CHECK(presenting(*auth, "Bearer s3cret-token\n") == Verdict::kInvalid);
  CHECK(presenting(*auth, "Bearer   s3cret-token") == Verdict::kInvalid);
  CHECK(presenting(*auth, "s3cret-token") == Verdict::kInvalid);
  CHECK(presenting(*auth, "Basic s3cret-token") == Verdict::kInvalid);
}

TEST_CASE("ingest auth: no credentials are missing, any other token is invalid", "[ingest-auth]") {
  auto auth = open_with("checked-token", "s3cret");
  CHECK(auth->check({}) == Verdict::kMissing);
  CHECK(presenting(*auth, "Bearer guess") == Verdict::kInvalid);
  CHECK(presenting(*auth, "Bearer s3cre") == Verdict::kInvalid);
  CHECK(presenting(*auth, "Bearer s3crets") == Verdict::kInvalid);
  // Two authorization values are one too many, even if one of them is right.
  CHECK(auth->check({"Bearer s3cret", "Bearer s3cret"}) == Verdict::kInvalid);
  CHECK(auth->check({"Bearer guess", "Bearer s3cret"}) == Verdict::kInvalid);
}

TEST_CASE("ingest auth: a rotated file applies from the next check, the old token is refused", "[ingest-auth]") {
  const std::string path = path_of("rotated-token");
  auto auth = open_with("rotated-token", "first\n");
  REQUIRE(presenting(*auth, "Bearer first") == Verdict::kAccepted);

  replace(path, "second\n");
  CHECK(presenting(*auth, "Bearer first") == Verdict::kInvalid);
  CHECK(presenting(*auth, "Bearer second") == Verdict::kAccepted);

  write_in_place(path, "the-third\n");  // the same inode, another size
  CHECK(presenting(*auth, "Bearer second") == Verdict::kInvalid);
  CHECK(presenting(*auth, "Bearer the-third") == Verdict::kAccepted);

  // The same inode and size, as a random token of a fixed length rewritten in place: the
  // modification time tells (set ahead here, as a coarse file-system clock may not move).
  write_in_place(path, "THE-THIRD\n");
  std::filesystem::last_write_time(path, std::filesystem::last_write_time(path) + std::chrono::seconds(1));
  CHECK(presenting(*auth, "Bearer the-third") == Verdict::kInvalid);
  CHECK(presenting(*auth, "Bearer THE-THIRD") == Verdict::kAccepted);
}

TEST_CASE("ingest auth: a token no client could send is refused at start and keeps the last good one on rotation",
          "[ingest-auth]") {
  const std::string path = path_of("unsendable-token");
  replace(path, "line-one\nline-two\n");
  auto refused = IngestAuth::open(path);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error() == path + " holds whitespace inside its token (at byte 8: is it on two lines?)");

  auto auth = open_with("unsendable-token", "kept\n");
  replace(path, "new\nline\n");
  CHECK(presenting(*auth, "Bearer kept") == Verdict::kAccepted);
}

TEST_CASE("ingest auth: a file that becomes empty or goes away keeps the last good token", "[ingest-auth]") {
  const std::string path = path_of("kept-token");
  auto auth = open_with("kept-token", "kept\n");

  write_in_place(path, "");
  CHECK(presenting(*auth, "Bearer kept") == Verdict::kAccepted);
  replace(path, "\n  \n");
  CHECK(presenting(*auth, "Bearer kept") == Verdict::kAccepted);
  std::filesystem::remove(path);
  CHECK(presenting(*auth, "Bearer kept") == Verdict::kAccepted);
  CHECK(presenting(*auth, "Bearer ") == Verdict::kInvalid);

  replace(path, "back\n");  // a good token again replaces the kept one
  CHECK(presenting(*auth, "Bearer kept") == Verdict::kInvalid);
  CHECK(presenting(*auth, "Bearer back") == Verdict::kAccepted);
}
