#pragma once
// kvrelay-cli's commands; each returns the process exit code (args.hpp).
#include "client/cli/args.hpp"

namespace kvrelay::cli {

int run_info(const Args& args);
int run_catalog(const Args& args);
int run_readiness(const Args& args);
int run_load(const Args& args);
int run_serving_load(const Args& args);
int run_state(const Args& args);
int run_top(const Args& args);
int run_overlap(const Args& args);
int run_hash(const Args& args);
int run_decode_frame(const Args& args);

}  // namespace kvrelay::cli
