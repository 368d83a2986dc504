#!/bin/sh
# run_checks.sh DIR [JUNIT] — runs every check program in DIR (built by gpu.mk or emu.mk)
# from the repository root (they read tests/golden/ and models/), keeps each one's full
# output in DIR/logs, and prints one table of their result rows, in program-name order.
# With JUNIT, the rows are also written there as JUnit XML (PASS passes, FAIL fails, SKIP
# is skipped with its reason; INFO rows are measurements and are left out), so `make test`
# counts them with its other suites.
# Exit status: 0 when every row passed, 1 otherwise.
# CHECK_TIMEOUT: seconds per program (600). CHECK_JOBS: programs run at once (1); on a GPU
# keep 1, so timings do not share the device; the emulator uses one CPU core a program.
set -u

# One program: its log, and its rows (a crash or a timeout after passing rows shows as a
# failed row). Each writes only its own files, so several can run side by side.
run_one() {
  bin=$1
  name=$(basename "$bin")
  log="$dir/logs/$name.log"
  echo "== $name" >&2
  start=$(date +%s)
  timeout "${CHECK_TIMEOUT:-600}" "$bin" > "$log" 2>&1
  rc=$?
  grep '^ROW|' "$log" > "$log.rows"
  if [ $rc -ne 0 ] && ! grep -q '|FAIL$' "$log"; then
    echo "ROW|$name|exited with status $rc|see logs/$name.log|-|FAIL" >> "$log.rows"
  fi
  echo "== $name done in $(($(date +%s) - start)) s" >&2
}
# The parallel runs below call this script back for one program each.
if [ "${1:-}" = "--one" ]; then
  dir=$2
  run_one "$3"
  exit 0
fi

dir=${1:?usage: run_checks.sh DIR [JUNIT]}
junit=${2:-}
cuda_lib=${CUDA_HOME:-/usr/local/cuda}/lib64
[ -d "$cuda_lib" ] && export LD_LIBRARY_PATH="$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$dir/logs"
rows="$dir/logs/rows.txt"
: > "$rows"

programs=$(for bin in "$dir"/check_*; do
  [ -x "$bin" ] && [ -f "$bin" ] || continue
  case "$bin" in *.o) continue ;; esac
  echo "$bin"
done)

if [ "${CHECK_JOBS:-1}" -gt 1 ]; then
  echo "$programs" | xargs -r -n 1 -P "$CHECK_JOBS" sh "$0" --one "$dir"
else
  for bin in $programs; do run_one "$bin"; done
fi
for bin in $programs; do cat "$dir/logs/$(basename "$bin").log.rows"; done >> "$rows"

printf '%-12s %-44s %-26s %-22s %s\n' check case measured limit result
awk -F'|' '{ printf "%-12s %-44s %-26s %-22s %s\n", $2, $3, $4, $5, $6 }' "$rows"
passed=$(grep -c '|PASS$' "$rows"); failed=$(grep -c '|FAIL$' "$rows"); skipped=$(grep -c '|SKIP$' "$rows")
echo "gpu-check: $passed passed, $failed failed, $skipped skipped (reasons in the table)"

if [ -n "$junit" ]; then
  awk -F'|' '
    function esc(s) { gsub(/&/, "\\&amp;", s); gsub(/</, "\\&lt;", s); gsub(/>/, "\\&gt;", s); gsub(/"/, "\\&quot;", s); return s }
    BEGIN { print "<testsuite name=\"gpu-checks\">" }
    $6 == "INFO" { next }
    {
      printf "<testcase classname=\"gpu.%s\" name=\"%s\">", esc($2), esc($3)
      if ($6 == "FAIL") printf "<failure message=\"%s (limit %s)\"/>", esc($4), esc($5)
      else if ($6 == "SKIP") printf "<skipped message=\"%s\"/>", esc($5)
      else if ($6 != "PASS") printf "<failure message=\"unknown result %s\"/>", esc($6)
      print "</testcase>"
    }
    END { print "</testsuite>" }' "$rows" > "$junit"
fi
[ "$failed" -eq 0 ]
