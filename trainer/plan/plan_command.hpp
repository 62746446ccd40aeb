// `trainer plan`: the planner from the command line (trainer/main.cpp hands
// its flags over). Prints a table per device count and a paragraph on the
// choice; --json FILE (or -) writes the same as JSON.
//
//   trainer plan --config FILE --hardware FILE --gpus 8,64,512 [--nodes 1,8,64]
//                [--micro-batch 1,2,4] [--peaks bench.json] [--json FILE|-]
//                [--top N] [section.key=value ...]
// --top N prints only the N best layouts of each table (the JSON has every one).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace gt {

struct PlanArgs {
  std::string config, hardware, gpus, nodes, micro_batch, peaks, json;
  std::string baseline_mib;  // "" = the hardware file's baseline_mib
  std::string top;           // "" or "0" = every layout in the text tables
  std::vector<std::string> overrides;
};

// Returns the exit code; throws gt::Error on bad input.
int run_plan_command(const PlanArgs& args);

// A report's two forms as the plan and costs commands print them: the text on
// stdout, and the JSON to the --json file too; `json_flag` "-" prints the
// JSON alone instead; "" writes no file.
void print_report(const std::string& text, const nlohmann::json& json,
                  const std::string& json_flag);

// "8,64,512" -> {8, 64, 512}; throws naming `flag` on anything else.
std::vector<int> parse_int_list(const std::string& text, const std::string& flag);

}  // namespace gt
