#!/bin/sh
# run_checks.sh DIR — runs every check program in DIR (built by gpu.mk) from the
# repository root (they read tests/golden/ and models/), keeps each one's full output in
# DIR/logs, and prints one table of their result rows.
# Exit status: 0 when every row passed, 1 otherwise. CHECK_TIMEOUT: seconds per program (600).
set -u
dir=${1:?usage: run_checks.sh DIR}
cuda_lib=${CUDA_HOME:-/usr/local/cuda}/lib64
[ -d "$cuda_lib" ] && export LD_LIBRARY_PATH="$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$dir/logs"
rows="$dir/logs/rows.txt"
: > "$rows"
status=0
for bin in "$dir"/check_*; do
  [ -x "$bin" ] && [ -f "$bin" ] || continue
  case "$bin" in *.o) continue ;; esac
  name=$(basename "$bin")
  echo "== $name" >&2
  timeout "${CHECK_TIMEOUT:-600}" "$bin" > "$dir/logs/$name.log" 2>&1
  rc=$?
  grep '^ROW|' "$dir/logs/$name.log" >> "$rows"
  # A crash or a timeout after some passing rows must still show as a failure.
  if [ $rc -ne 0 ] && ! grep -q '|FAIL$' "$dir/logs/$name.log"; then
    echo "ROW|$name|exited with status $rc|see logs/$name.log|-|FAIL" >> "$rows"
  fi
done
printf '%-12s %-44s %-26s %-22s %s\n' check case measured limit result
awk -F'|' '{ printf "%-12s %-44s %-26s %-22s %s\n", $2, $3, $4, $5, $6 }' "$rows"
passed=$(grep -c '|PASS$' "$rows"); failed=$(grep -c '|FAIL$' "$rows"); skipped=$(grep -c '|SKIP$' "$rows")
echo "gpu-check: $passed passed, $failed failed, $skipped skipped (reasons in the table)"
[ "$failed" -eq 0 ] || status=1
exit $status
