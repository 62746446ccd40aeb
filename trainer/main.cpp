// build/trainer: the command-line entry point. Parses the subcommand and its
// flags, runs it, and turns any gt::Error into one "error: ..." line and
// exit code 1 (2 for usage errors).
//
//   trainer [train] --config FILE [section.key=value ...]
//   trainer sample  --checkpoint DIR [--prompt TEXT] [--tokens N] [--temperature X] [--top-k K] [--seed S]
//   trainer export  --checkpoint DIR --out FILE.safetensors
//   trainer bench   [--config FILE] [--out FILE.json]
//   trainer plan    --config FILE --hardware FILE --gpus N[,N...] [...]   (trainer/plan/)
//   trainer costs   --config FILE --hardware FILE [--peaks F] [--json F]  (trainer/plan/)
#include <spdlog/spdlog.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/core/error.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "parallel/collective_error.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/mpi_session.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/checkpoint/hf_export.hpp"
#include "trainer/config/config.hpp"
#include "trainer/model/hf_weights.hpp"
#include "trainer/model/make_model.hpp"
#include "trainer/plan/costs_command.hpp"
#include "trainer/plan/plan_command.hpp"
#include "trainer/profile/bench.hpp"
#include "trainer/runtime/launch_checks.hpp"
#include "trainer/runtime/router_bias.hpp"
#include "trainer/runtime/run_environment.hpp"
#include "trainer/sample/sampler.hpp"
#include "trainer/train/trainer.hpp"

namespace {

const char* kUsage =
    "usage:\n"
    "  trainer [train] --config FILE [--peaks FILE.json] [section.key=value ...]\n"
    "                                                          train (see configs/default.yaml)\n"
    "  trainer sample --checkpoint DIR [--prompt TEXT] [--tokens N] [--temperature X]\n"
    "                 [--top-k K] [--seed S]                     generate text (byte tokenizer)\n"
    "  trainer export --checkpoint DIR --out FILE.safetensors   export HF weights (GPT-2 or "
    "Llama)\n"
    "  trainer bench [--config FILE] [--out FILE.json]          measure GEMM, memory and\n"
    "                                                          collective peaks (docs/"
    "PERFORMANCE.md)\n"
    "  trainer plan --config FILE --hardware FILE --gpus N[,N...] [--nodes N[,N...]]\n"
    "               [--micro-batch B[,B...]] [--peaks BENCH.json] [--json FILE|-]\n"
    "               [--baseline-mib MIB] [--top N]\n"
    "                                        predict memory and step time (MIB: the\n"
    "                                        measured per-process baseline, instead of\n"
    "                                        the hardware file's baseline_mib; N: the\n"
    "                                        best N layouts of each table only)\n"
    "  trainer costs --config FILE --hardware FILE [--peaks BENCH.json] [--json FILE|-]\n"
    "                [section.key=value ...]   every op of one CUDA step: FLOPs, bytes, floor\n";

struct UsageError : gt::Error {
  using gt::Error::Error;
};

struct Args {
  std::string command = "train";
  std::vector<std::pair<std::string, std::string>> flags;  // --name value
  std::vector<std::string> overrides;                      // key=value

  std::string flag(const std::string& name, const std::string& fallback = "") const {
    std::string v = fallback;
    for (const auto& [k, val] : flags)
      if (k == name) v = val;
    return v;
  }
  bool has(const std::string& name) const {
    for (const auto& kv : flags)
      if (kv.first == name) return true;
    return false;
  }
};

Args parse_args(int argc, char** argv, const std::vector<std::string>& allowed_for_all) {
  Args a;
  int i = 1;
  if (i < argc && argv[i][0] != '-' && std::string(argv[i]).find('=') == std::string::npos)
    a.command = argv[i++];
  for (; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "-h" || s == "--help") {
      a.command = "help";
      return a;
    }
    if (s.rfind("--", 0) == 0) {
      std::string name = s.substr(2), value;
      auto eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      } else {
        if (i + 1 >= argc) throw UsageError("flag --" + name + " needs a value");
        value = argv[++i];
      }
      bool known = false;
      for (const auto& k : allowed_for_all) known = known || k == name;
      if (!known) throw UsageError("unknown flag --" + name);
      if (a.has(name))
        throw UsageError("flag --" + name + " is given twice (--" + name + " " + a.flag(name) +
                         " and --" + name + " " + value + "); give it once");
      a.flags.emplace_back(name, value);
    } else if (s.find('=') != std::string::npos) {
      a.overrides.push_back(s);
    } else {
      throw UsageError("argument '" + s +
                       "' (command line): expected an override section.key=value or a --flag");
    }
  }
  return a;
}

// The resolved config a checkpoint was written with (its manifest carries it).
gt::Config checkpoint_config(const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  std::ifstream f(path);
  if (!f) gt::fail("cannot read '", path, "': is '", dir, "' a committed checkpoint directory?");
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (!j.is_object() || !j.contains("config_yaml") || !j["config_yaml"].is_string())
    gt::fail("'", path, "' has no config_yaml entry");
  return gt::parse_config(j["config_yaml"].get<std::string>(), path, {});
}

std::vector<gt::NamedTensor> param_tensors(gt::CausalLM& model) {
  std::vector<gt::NamedTensor> out;
  for (const auto& s : model.layout().specs())
    out.push_back({"param." + s.name, s.saved_shape(), model.params() + s.offset, s.pad_rows > 0});
  return out;
}

void print_resolved(const gt::Config& cfg) {
  std::cout << "# resolved config (" << cfg.source << ")\n" << gt::to_yaml(cfg) << std::flush;
}

// One process: no MPI at all (no launcher, nothing to initialise).
int train_single(const Args& a) {
  gt::Config cfg = gt::load_config(a.flag("config"), a.overrides);
  print_resolved(cfg);
  gt::TrainSummary s = gt::run_training(cfg);
  spdlog::info("done: {} steps, final train loss {:.4f}, logs in {}", s.steps_run, s.final_loss,
               s.log_dir);
  return 0;
}

// Every rank of an MPI job. Errors every rank shares (a bad config, a failed
// start-up) are printed once and every rank exits 1; an error on one rank
// during training aborts the whole job (MPI_Abort) with that rank's message,
// so no rank is left waiting in a collective.
int train_mpi(const Args& a) {
  gt::MpiSession mpi(nullptr, nullptr);
  auto world = gt::MpiCommunicator::dup(MPI_COMM_WORLD, "world");
  const int rank = world->rank();
  if (rank != 0) spdlog::set_level(spdlog::level::warn);
  spdlog::set_pattern("[%H:%M:%S] [rank " + std::to_string(rank) + "] %^%l%$ %v");
  try {
    gt::Config cfg;
    std::exception_ptr config_error;
    try {
      gt::check_launch(gt::detect_run_environment(), world->size());
      cfg = gt::load_config(a.flag("config"), a.overrides);
    } catch (const std::exception&) {
      config_error = std::current_exception();
    }
    gt::agree_on_setup(*world, config_error);
    world->set_deadline(cfg.runtime.collective_timeout_s);
    if (rank == 0) print_resolved(cfg);
    gt::TrainSummary s = gt::run_training(cfg, world.get());
    spdlog::info("done: {} steps, final train loss {:.4f}, logs in {}", s.steps_run, s.final_loss,
                 s.log_dir);
    return 0;
  } catch (const gt::CollectiveError& e) {
    if (e.report()) std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    gt::abort_job(1, gt::printable(e.what()));
  }
}

int cmd_train(Args a) {
  if (!a.has("config")) throw UsageError("train needs --config FILE");
  // --peaks FILE is shorthand for the override profile.peaks=FILE.
  if (a.has("peaks")) a.overrides.push_back("profile.peaks=" + a.flag("peaks"));
  const gt::RunEnvironment env = gt::detect_run_environment();
  return env.world_size > 1 ? train_mpi(a) : train_single(a);
}

int cmd_sample(const Args& a) {
  if (!a.has("checkpoint")) throw UsageError("sample needs --checkpoint DIR");
  if (!a.overrides.empty()) throw UsageError("sample takes no config overrides");
  const std::string dir = a.flag("checkpoint");
  gt::Config cfg = checkpoint_config(dir);
  if (cfg.model.vocab_size != 256)
    gt::fail("sample decodes with the byte-level tokenizer (vocab 256), but the checkpoint's "
             "model.vocab_size is ", cfg.model.vocab_size);
  auto ops = gt::make_cpu_ops(cfg.runtime.threads);
  auto model_ptr = gt::make_model(cfg.model, *ops, 1, cfg.model.block_size);
  gt::CausalLM& model = *model_ptr;
  std::vector<gt::TensorPiece> wanted = gt::whole_tensor_pieces(param_tensors(model));
  // Routers trained with selection biases choose with them (router_bias.hpp).
  std::unique_ptr<gt::RouterBias> bias;
  if (cfg.model.moe() && cfg.model.router_bias_update_rate > 0) {
    std::vector<int> layers(static_cast<size_t>(cfg.model.n_layer));
    for (int l = 0; l < cfg.model.n_layer; ++l) layers[static_cast<size_t>(l)] = l;
    bias = std::make_unique<gt::RouterBias>(*ops, cfg.model, std::move(layers));
    const std::vector<gt::TensorPiece> b = bias->pieces_to_load();
    wanted.insert(wanted.end(), b.begin(), b.end());
  }
  gt::load_checkpoint(dir, gt::model_signature(cfg.model), wanted);
  if (bias) {
    bias->finish_load();
    model.set_router_bias(bias->table());
  }
  gt::SampleOptions opt;
  opt.new_tokens = std::stoi(a.flag("tokens", "200"));
  opt.temperature = std::stod(a.flag("temperature", "0.8"));
  opt.top_k = std::stoi(a.flag("top-k", "40"));
  opt.seed = std::stoull(a.flag("seed", "1"));
  const std::string prompt = a.flag("prompt", "\n");
  auto out = gt::sample_tokens(model, gt::encode_bytes(prompt), opt);
  std::cout << prompt << gt::decode_bytes(out) << std::endl;
  return 0;
}

int cmd_export(const Args& a) {
  if (!a.has("checkpoint") || !a.has("out"))
    throw UsageError("export needs --checkpoint DIR and --out FILE.safetensors");
  const std::string dir = a.flag("checkpoint");
  gt::Config cfg = checkpoint_config(dir);
  const gt::CheckpointMeta meta = gt::export_hf_weights(
      dir, cfg.model, a.flag("out"), {{"model", gt::model_signature(cfg.model)}});
  spdlog::info("exported step {} of {} to {}", meta.step, dir, a.flag("out"));
  if (cfg.model.moe() && cfg.model.router_bias_update_rate > 0)
    spdlog::warn("the checkpoint's routers choose experts with aux-loss-free selection biases "
                 "(model.router_bias_update_rate={}); MixtralForCausalLM has none, so the "
                 "exported model routes by the router's probabilities alone and its outputs "
                 "differ from training's (the biases stay in the checkpoint, "
                 "router_bias.model.layers.N.block_sparse_moe.gate)",
                 cfg.model.router_bias_update_rate);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_pattern("[%H:%M:%S] %^%l%$ %v");
  try {
    Args a = parse_args(
        argc, argv,
        {"config", "checkpoint", "out", "prompt", "tokens", "temperature", "top-k", "seed", "peaks",
         "hardware", "gpus", "nodes", "micro-batch", "json", "baseline-mib", "top"});
    if (a.command == "help") {
      std::cout << kUsage;
      return 0;
    }
    if (a.command == "train") return cmd_train(a);
    if (a.command == "sample") return cmd_sample(a);
    if (a.command == "export") return cmd_export(a);
    if (a.command == "bench") {
      if (!a.overrides.empty()) throw UsageError("bench takes no config overrides");
      return gt::bench_command(a.flag("config"), a.flag("out"));
    }
    if (a.command == "plan")
      return gt::run_plan_command({a.flag("config"), a.flag("hardware"), a.flag("gpus"),
                                   a.flag("nodes"), a.flag("micro-batch"), a.flag("peaks"),
                                   a.flag("json"), a.flag("baseline-mib"), a.flag("top"),
                                   a.overrides});
    if (a.command == "costs")
      return gt::run_costs_command(
          {a.flag("config"), a.flag("hardware"), a.flag("peaks"), a.flag("json"), a.overrides});
    throw UsageError("unknown command '" + a.command + "'");
  } catch (const UsageError& e) {
    // Under mpirun every rank sees the same command line: one message is enough.
    if (gt::detect_run_environment().rank == 0)
      std::fprintf(stderr, "error: %s\n%s", gt::printable(e.what()).c_str(), kUsage);
    return 2;
  } catch (const gt::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {  // not a gt::Error: its text is not escaped yet
    std::fprintf(stderr, "error: %s\n", gt::printable(e.what()).c_str());
    return 1;
  }
}
