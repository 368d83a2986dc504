// device_plan.cpp — `sparkd check --device` (device_plan.h).
#include "engine/commands/device_plan.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "engine/backend/backend_factory.h"
#include "engine/model/arch.h"
#include "engine/model/dummy.h"
#include "engine/model/memory_plan.h"
#include "engine/util/check.h"

namespace spark {
namespace {

// Bytes of the stage's tensors in the file, and of those a decode step reads whole (all
// but an untied embedding table, of which it gathers a row a token; of an MoE layer's
// experts, top_k of them). A dummy is counted as make_dummy_weights stores it (MXFP4
// experts when its quantization_config says mxfp4, as gpt-oss's checkpoints).
struct FileBytes {
  double total = 0, read_per_token = 0;
};
FileBytes file_bytes(const StagePlan& stage) {
  const ModelInfo& info = stage.info;
  const ModelSpec& s = info.spec;
  auto bytes_of = [&info, &s](const TensorSpec& t) {
    if (info.format != ModelFormat::DUMMY) return double(info.tensors.at(t.name).nbytes);  // inspect_model checked
    int64_t elems = 1;
    for (int64_t d : t.shape) elems *= d;
    return double(dtype_nbytes(dummy_tensor_dtype(s, t, info.weight_dtype), elems, t.shape.back()));
  };
  FileBytes b;
  double experts = 0, table = 0;
  for (const TensorSpec& t : expected_tensors(s, stage.range)) {
    const double n = bytes_of(t);
    b.total += n;
    if (part_is_per_expert(t.part)) experts += n;
    if (t.part == Part::EMBEDDING && !s.tie_word_embeddings) table = n;
  }
  b.read_per_token = b.total - table;
  if (s.num_experts > 0) b.read_per_token -= experts * (1.0 - double(s.num_experts_per_tok) / double(s.num_experts));
  return b;
}

}  // namespace

DevicePreset parse_device(const std::string& arg) {
  // GB10: 128 GB of unified memory, of which the OS and the page cache's floor keep ~8 GB
  // on an idle DGX Spark; ~218 GB/s measured with a copy kernel (273 GB/s nominal).
  if (arg == "gb10") return {"gb10", 120e9 / double(1ull << 30), 218, "DGX Spark: 128 GB unified, ~120 GB free; 218 GB/s copy"};
  // H100 SXM 80 GB: ~79 GiB free to one process; ~3.0 TB/s copy (3.35 TB/s nominal).
  if (arg == "h100") return {"h100", 79.0, 3000, "H100 SXM 80 GB: ~79 GiB free; 3.0 TB/s copy"};
  const size_t comma = arg.find(',');
  double gib = 0, gbs = 0;
  try {
    if (comma != std::string::npos) {
      size_t used = 0;
      gib = std::stod(arg.substr(0, comma), &used);
      if (used != comma) gib = 0;
      gbs = std::stod(arg.substr(comma + 1), &used);
      if (used != arg.size() - comma - 1) gbs = 0;
    }
  } catch (const std::exception&) {
    gib = gbs = 0;
  }
  if (!(gib > 0 && gib < 1e6 && gbs > 0 && gbs < 1e6))
    throw InputError("--device must be gb10, h100, or memory and copy bandwidth as \"GiB,GB/s\" (e.g. 96,400), not '" +
                     arg + "'");
  return {arg, gib, gbs, "given: " + arg.substr(0, comma) + " GiB, " + arg.substr(comma + 1) + " GB/s copy"};
}

namespace {

// What a batch-1 decode step reads on the device: as the CUDA backend counts it, else (a
// build without CUDA) the file's tensors it reads scaled by the file's ratio of device to
// file bytes; a hybrid's step also reads and writes the sequence's recurrent state once.
double bytes_read_per_token(const MemoryPlan& plan, const FileBytes& file) {
  const double ratio = file.total > 0 ? double(plan.weight_bytes) / file.total : 1.0;
  const double weights_read = plan.weight_bytes_per_token ? double(plan.weight_bytes_per_token) : file.read_per_token * ratio;
  return weights_read + 2.0 * double(plan.state_bytes_per_sequence);
}

}  // namespace

std::string device_plan_report(const Config& config, const StagePlan& stage, const DevicePreset& device, bool& fits) {
  const MemoryBudget budget{uint64_t(device.available_gib * double(1ull << 30)), device.name + " (" + device.about + ")"};
  const FileBytes file = file_bytes(stage);
  // The plan on the device's backend, with the draft model's part where there is one.
  auto footprint = [&](const Config& c, const ModelInfo& info) {
    StageFootprint f = stage_footprint(c, info, stage.range, "cuda");
    if (stage.draft) add_draft_footprint(c, *stage.draft, "cuda", f);
    return f;
  };
  const MemoryPlan plan = plan_memory(stage.info.spec, stage.range, footprint(config, stage.info), config, budget);
  fits = plan.fits;
  const double device_weights = double(plan.weight_bytes);
  const double ratio = file.total > 0 ? device_weights / file.total : 1.0;
  const double read = bytes_read_per_token(plan, file);
  std::ostringstream o;
  o << "device plan (" << device.name << ", a projection: no GPU is used)\n";
  o << "  device           " << device.about << "\n";
  o << "  weights          " << format_bytes(uint64_t(device_weights)) << " on the device";
  if (file.total > 0) {
    char r[96];
    std::snprintf(r, sizeof r, " (the file's tensors: %s; %.3fx)", format_bytes(uint64_t(file.total)).c_str(), ratio);
    o << r;
  }
  o << "\n" << describe_plan(plan);
  char line[200];
  std::snprintf(line, sizeof line, "  decode (proj.)   ~%.0f tokens/s at batch 1: %s read a token / %.0f GB/s%s\n",
                device.copy_gb_per_s * 1e9 / read, format_bytes(uint64_t(read)).c_str(), device.copy_gb_per_s,
                plan.state_bytes_per_sequence ? " (the weights, and the recurrent state read and written)" : "");
  o << line;
  if (stage.info.quantize.active()) {  // the same plan with the weights as stored
    Config as_stored = config;
    as_stored.model.quantize = "none";
    ModelInfo info = stage.info;
    info.quantize = {};
    const MemoryPlan stored = plan_memory(info.spec, stage.range, footprint(as_stored, info), as_stored, budget);
    const double stored_read = bytes_read_per_token(stored, file);
    std::snprintf(line, sizeof line, "  as stored        ~%.0f tokens/s at batch 1: %s read a token, %s of weights\n",
                  device.copy_gb_per_s * 1e9 / stored_read, format_bytes(uint64_t(stored_read)).c_str(),
                  format_bytes(stored.weight_bytes).c_str());
    o << line;
  }
  return o.str();
}

}  // namespace spark
