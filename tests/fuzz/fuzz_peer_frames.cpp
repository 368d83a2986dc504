// fuzz_peer_frames.cpp — libFuzzer target for everything decoded from a peer: frame
// headers, identities, welcomes, micro-batch plans and step results. Any input must
// decode or throw InputError; a plan that decodes must pass the batch checks again.
#include <cstdint>
#include <vector>

#include "engine/peer/frame.h"
#include "engine/peer/messages.h"
#include "engine/util/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t which = data[0] % 5;
  std::vector<uint8_t> payload(data + 1, data + size);
  spark::Welcome session;
  session.kv_blocks = 64;
  session.block_size = 4;
  session.max_step_tokens = 64;
  session.max_step_seqs = 8;
  session.max_model_len = 128;
  session.vocab_size = 1000;
  session.hidden_size = 8;
  try {
    switch (which) {
      case 0:
        if (payload.size() >= spark::kFrameHeaderBytes) spark::decode_header(payload.data(), 1 << 20);
        break;
      case 1: spark::decode_identity(payload); break;
      case 2: spark::decode_welcome(payload); break;
      case 3: {
        spark::MicroBatchPlan p = spark::decode_plan(payload, session);
        spark::check_batch(p.batch, session);
        break;
      }
      case 4: spark::decode_result(payload, {8, 64, 1000}); break;
    }
  } catch (const spark::InputError&) {
  }
  return 0;
}
