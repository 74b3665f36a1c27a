// The kv-relay binary as an operator runs it: flags, ready file, SIGTERM, exit codes.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <fstream>
#include <sstream>

#include "dynamo/kvrelay/v1/relay.grpc.pb.h"

namespace {

struct Child {
  pid_t pid = -1;
  int output = -1;  // stdout + stderr
};

Child spawn(const char* program, std::vector<std::string> args) {
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  args.insert(args.begin(), program);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(pipe_fds[1], 1);
    dup2(pipe_fds[1], 2);
    close(pipe_fds[0]);
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  return {pid, pipe_fds[0]};
}

// Reads the child's output until `needle` appears (or the output ends); returns what was read.
std::string read_until(int fd, const std::string& needle) {
  std::string text;
  char buffer[4096];
  while (text.find(needle) == std::string::npos) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

Child spawn_relay(std::vector<std::string> args) { return spawn(KVRELAY_BINARY, std::move(args)); }

// The whole output of a short-lived program and its exit code.
std::pair<std::string, int> run_to_end(const char* program, std::vector<std::string> args);

int wait_exit(pid_t pid) {
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::pair<std::string, int> run_to_end(const char* program, std::vector<std::string> args) {
  Child child = spawn(program, std::move(args));
  const std::string output = read_until(child.output, std::string(1, '\0'));  // until EOF
  close(child.output);
  return {output, wait_exit(child.pid)};
}

std::string wan_of(const std::string& ready_file) {
  std::stringstream content;
  content << std::ifstream(ready_file).rdbuf();
  const std::string text = content.str();
  const auto start = text.find("\"wan\": \"") + 8;
  return text.substr(start, text.find('"', start) - start);
}

}  // namespace

TEST_CASE("kvrelay-cli reads a running relay and fails clearly when it cannot", "[binary]") {
  const std::string ready = std::string(KVRELAY_TEST_TMP_DIR) + "/ready-cli.json";
  unlink(ready.c_str());
  Child relay = spawn_relay({"--listen", "127.0.0.1:0", "--ingest-listen", "127.0.0.1:0", "--metrics-listen", "off",
                             "--ready-file", ready, "--topology",
                             std::string(KVRELAY_SOURCE_DIR) + "/deploy/demo/topology.yaml"});
  REQUIRE_THAT(read_until(relay.output, "ready: "), Catch::Contains("ready: "));
  const std::string wan = wan_of(ready);
  const auto [info, info_exit] = run_to_end(KVRELAY_CLI, {"info", "--target", wan});
  CHECK(info_exit == 0);
  CHECK_THAT(info, Catch::Contains("\"relayIncarnation\""));
  const auto [catalog, catalog_exit] = run_to_end(KVRELAY_CLI, {"catalog", "--target", wan});
  CHECK(catalog_exit == 0);
  CHECK_THAT(catalog, Catch::Contains("\"layoutGeneration\""));
  const auto [unreachable, unreachable_exit] = run_to_end(KVRELAY_CLI, {"info", "--target", "127.0.0.1:1"});
  CHECK(unreachable_exit == 1);
  CHECK_THAT(unreachable, Catch::StartsWith("kvrelay-cli: 127.0.0.1:1: "));
  const auto [usage, usage_exit] = run_to_end(KVRELAY_CLI, {"bogus"});
  CHECK(usage_exit == 2);
  CHECK_THAT(usage, Catch::Contains("unknown command 'bogus'"));
  REQUIRE(kill(relay.pid, SIGTERM) == 0);
  CHECK(wait_exit(relay.pid) == 0);
  close(relay.output);
}

TEST_CASE("kv-relay writes its ready file, drains on SIGTERM and exits 0", "[binary]") {
  const std::string ready = std::string(KVRELAY_TEST_TMP_DIR) + "/ready.json";
  unlink(ready.c_str());
  Child child = spawn_relay({"--listen", "127.0.0.1:0", "--ingest-listen", "127.0.0.1:0", "--metrics-listen",
                             "127.0.0.1:0", "--ready-file", ready, "--dc-id", "dc-binary-test"});
  const std::string log = read_until(child.output, "ready: ");
  REQUIRE_THAT(log, Catch::Contains("ready: "));
  std::stringstream content;
  content << std::ifstream(ready).rdbuf();
  CHECK_THAT(content.str(), Catch::Matches(R"(\{"wan": "127\.0\.0\.1:[0-9]+", "ingest": "127\.0\.0\.1:[0-9]+", )"
                                           R"("metrics": "127\.0\.0\.1:[0-9]+"\}\s*)"));
  REQUIRE(kill(child.pid, SIGTERM) == 0);
  CHECK(wait_exit(child.pid) == 0);
  CHECK_THAT(read_until(child.output, "relay stopped"), Catch::Contains("relay stopped"));
  close(child.output);
}

TEST_CASE("kv-relay refuses a bad value with one message and exit code 2", "[binary]") {
  Child child = spawn_relay({"--load-window-ms", "zero"});
  const std::string output = read_until(child.output, "\n");
  CHECK(wait_exit(child.pid) == 2);
  CHECK(output == "kv-relay: --load-window-ms: 'zero' is not a non-negative integer\n");
  close(child.output);
}

TEST_CASE("SIGTERM drains even when clients stop reading, and exits 0", "[binary]") {
  namespace v1 = dynamo::kvrelay::v1;
  const std::string ready = std::string(KVRELAY_TEST_TMP_DIR) + "/ready-drain.json";
  unlink(ready.c_str());
  Child child = spawn_relay({"--listen", "127.0.0.1:0", "--ingest-listen", "127.0.0.1:0", "--metrics-listen", "off",
                             "--ready-file", ready, "--drain-timeout-ms", "500", "--topology",
                             std::string(KVRELAY_SOURCE_DIR) + "/deploy/demo/topology.yaml"});
  REQUIRE_THAT(read_until(child.output, "ready: "), Catch::Contains("ready: "));
  const std::string wan = wan_of(ready);

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(8 << 20);
  auto stub = v1::KvEventRelay::NewStub(grpc::CreateCustomChannel(wan, grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext catalog_context;
  v1::WatchKvPoolCatalogRequest watch;
  watch.set_subscriber_id("drain-test");
  watch.set_contract_marker(0x4B565231);
  auto catalog = stub->WatchKvPoolCatalog(&catalog_context, watch);
  v1::KvPoolCatalogUpdate update;
  while (catalog->Read(&update) && update.snapshot().pools_size() == 0) {
  }
  REQUIRE(update.snapshot().pools_size() == 3);
  // Three pool streams whose 4 MiB snapshot chunks nobody reads.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::FilterUpdate>>> stalled;
  for (const auto& pool : update.snapshot().pools()) {
    v1::SubscribeKvPoolRequest request;
    request.set_subscriber_id("stalled");
    *request.mutable_expected_producer() = pool.producer();
    request.set_contract_marker(0x4B565231);
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    stalled.push_back(stub->SubscribeKvPool(contexts.back().get(), request));
  }
  REQUIRE(kill(child.pid, SIGTERM) == 0);
  CHECK(wait_exit(child.pid) == 0);
  CHECK_THAT(read_until(child.output, "relay stopped"), Catch::Contains("relay stopped"));
  close(child.output);
  for (auto& context : contexts) context->TryCancel();
  catalog_context.TryCancel();
}
