#!/bin/sh
# serve_bench.sh SPARKD TOKENIZER_DIR [JSON_OUT] — the end-to-end GPU benchmark: sparkd serve
# with the Llama-3.1-8B-shaped dummy model (BF16, CUDA backend) and Llama 3.1's tokenizer,
# then sparkd bench with 64 concurrent requests of 512 tokens in and 256 out. Prints bench's
# report (output tok/s, TTFT and TPOT p50/p99); run it from the repository root.
set -u
sparkd=${1:?usage: serve_bench.sh SPARKD TOKENIZER_DIR [JSON_OUT]}
tokenizer=${2:?usage: serve_bench.sh SPARKD TOKENIZER_DIR [JSON_OUT]}
json=${3:-serve_bench.json}
port=${PORT:-8123}
"$sparkd" serve --config spark.toml --set model.path=tests/golden/configs/llama3_8b \
  --set model.load_format=dummy --set model.tokenizer="$tokenizer" --set engine.backend=cuda \
  --set model.max_model_len=4096 --set engine.max_num_seqs=64 --set server.port="$port" \
  --set server.dashboard=false > serve_bench.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT
# Ready when /health answers 200 (loading 16 GB of dummy weights takes a while).
i=0
until python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=2)" 2>/dev/null; do
  i=$((i + 1))
  if [ $i -gt 300 ] || ! kill -0 $server 2>/dev/null; then
    echo "sparkd did not become ready; its log:"; tail -n 30 serve_bench.log; exit 1
  fi
  sleep 1
done
"$sparkd" bench --url "http://127.0.0.1:$port" --concurrency 64 --num-prompts 256 --input-len 512 \
  --output-len 256 --json "$json"
