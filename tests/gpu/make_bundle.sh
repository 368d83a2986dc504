#!/bin/sh
# make_bundle.sh CHECKS_DIR BUNDLE BUILT_FOR [SPARKD] — one compressed archive holding what a
# GPU run needs beyond the repository's tree (tests/gpu/device_run.py runs it there):
#   sparkd-gpu/bin/gpu_checks    every GPU check in one executable (gpu.mk or emu.mk); on a
#                                GPU build it is sparkd too, and
#   sparkd-gpu/bin/sparkd        links to it; SPARKD, when given, is copied here instead (the
#                                emulated checks hold no server: `make test` gives the
#                                emulated one, build/emu/sparkd, whose `sparkd check` is the
#                                real one's and whose size is a sixth of it)
#   sparkd-gpu/bin/check_*       one link to gpu_checks per check
#   sparkd-gpu/lib/              the shared libraries a bare machine lacks: everything ldd
#                                names but glibc and the CUDA driver and toolkit libraries
#   sparkd-gpu/golden/           the tiny models' GGUF copies check_model reads, written at test
#                                time (tests/gen/golden_gguf.py, SPARKD_GOLDEN_GGUF), when built
#   sparkd-gpu/MANIFEST.json     what it was built for, from which revision, which checks
# BUILT_FOR is the CUDA architectures ("90 121"), or "emulated" for the CUDA emulator's
# checks (the rehearsal `make test` runs with device_run.py --dry-run). Prints the
# archive's size and fails above BUNDLE_LIMIT_MIB (24): the tree and the bundle travel
# together, 64 MiB at most.
set -eu
usage="usage: make_bundle.sh CHECKS_DIR BUNDLE BUILT_FOR [SPARKD]"
checks=${1:?$usage}
bundle=${2:?$usage}
built_for=${3:?$usage}
sparkd=${4:-}
limit_mib=${BUNDLE_LIMIT_MIB:-24}

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/sparkd-gpu
mkdir -p "$root/bin" "$root/lib"
strip -o "$root/bin/gpu_checks" "$checks/gpu_checks"
if [ -n "$sparkd" ]; then strip -o "$root/bin/sparkd" "$sparkd"; else ln -s gpu_checks "$root/bin/sparkd"; fi
names=""
for link in "$checks"/check_*; do
  [ -L "$link" ] || continue
  name=$(basename "$link")
  ln -s gpu_checks "$root/bin/$name"
  names="$names${names:+, }\"$name\""
done
[ -n "$names" ] || { echo "make_bundle.sh: no check links in $checks" >&2; exit 1; }
for bin in "$checks/gpu_checks" $sparkd; do
  ldd "$bin" | awk '/=> \// { print $1, $3 }'
done | sort -u | while read -r name path; do
  case "$name" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libcuda.so*|libcublas*|libcudart*|libnccl*) ;;
    *) cp -L "$path" "$root/lib/$name" ;;
  esac
done
golden=${SPARKD_GOLDEN_GGUF:-build/golden/models}
if ls "$golden"/*.gguf >/dev/null 2>&1; then
  mkdir -p "$root/golden"
  for f in "$golden"/*.gguf; do
    case "$(basename "$f")" in
      gemma4*) ;;  # no check reads them (check_model runs the Gemma 4 folders)
      *) cp "$f" "$root/golden/" ;;
    esac
  done
fi
emulated=false
[ "$built_for" = emulated ] && emulated=true
cat > "$root/MANIFEST.json" <<JSON
{"built_for": "$( [ "$emulated" = true ] && echo "the CUDA emulator (CPU)" || echo "sm_$built_for" | sed 's/ /, sm_/g')",
 "emulated": $emulated,
 "git_rev": "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo '+changes')",
 "built_utc": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
 "checks": [$names]}
JSON
mkdir -p "$(dirname "$bundle")"
tar -C "$stage" -cf - sparkd-gpu | xz -T0 -9 > "$bundle.tmp"
mv "$bundle.tmp" "$bundle"
bytes=$(stat -c %s "$bundle")
echo "$bundle: $(awk "BEGIN { printf \"%.1f\", $bytes / 1048576 }") MiB (limit $limit_mib MiB); unpacked: gpu_checks $(stat -c %s "$root/bin/gpu_checks") B, sparkd $(stat -L -c %s "$root/bin/sparkd") B$( [ -L "$root/bin/sparkd" ] && echo ' (the same file)'), lib/ $(ls "$root/lib" | wc -l) files"
[ "$bytes" -le $((limit_mib * 1048576)) ] || { echo "make_bundle.sh: $bundle is over $limit_mib MiB" >&2; exit 1; }
