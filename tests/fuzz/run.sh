#!/bin/sh
# run.sh BUILD SECONDS [JUNIT] — runs each built libFuzzer target for SECONDS on its corpus
# and seeds; with JUNIT, also writes one JUnit test case per target for tests/summary.py.
# Exit 1 if any target found a crash, a leak or a timeout (its input is kept as
# BUILD/fuzz/<target>-crash-*: add it to tests/fuzz/seeds and fix the parser).
build=$1 seconds=$2 junit=$3
status=0 cases=""
for src in tests/fuzz/fuzz_*.cpp; do
  n=$(basename "$src" .cpp) b="$build/fuzz/$(basename "$src" .cpp)"
  echo "== $n ($seconds s)"
  mkdir -p "$b.corpus"
  if "$b" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=0 \
       -artifact_prefix="$build/fuzz/$n-" "$b.corpus" "tests/fuzz/seeds/$n" > "$build/fuzz/$n.log" 2>&1; then
    tail -n 2 "$build/fuzz/$n.log"
    cases="$cases<testcase classname=\"fuzz\" name=\"$n\"/>"
  else
    tail -n 20 "$build/fuzz/$n.log"
    status=1
    cases="$cases<testcase classname=\"fuzz\" name=\"$n\"><failure message=\"see $build/fuzz/$n.log\"/></testcase>"
  fi
done
[ -n "$junit" ] && printf '<testsuite name="fuzz">%s</testsuite>\n' "$cases" > "$junit"
exit $status
