#!/bin/sh
# arm64_deps.sh [CUDA_RUNTIME_DIR] — what `make ARCH=arm64` and `make test-arm64` need on an
# x86_64 Debian machine (not part of `make deps`: a few hundred MB that only these targets use):
#   Debian's aarch64 cross compiler, the arm64 multiarch libraries sparkd links statically,
#   and qemu-user with the arm64 glibc (libc6:arm64) to run the aarch64 binaries here;
#   with CUDA_RUNTIME_DIR, the aarch64 CUDA runtime (libcudart_static.a) for the toolkit's
#   CUDA version, from PyPI's nvidia-cuda-runtime wheel, unpacked there.
set -eu
packages="g++-aarch64-linux-gnu binutils-aarch64-linux-gnu qemu-user libc6-dev-arm64-cross
  libc6:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64 libssl-dev:arm64"
if [ "$(dpkg --print-architecture)" = amd64 ]; then
  dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
  missing=$(for p in $packages; do dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'ok installed' || echo "$p"; done)
  if [ -n "$missing" ]; then
    echo "installing for arm64: $missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
  fi
fi

dir=${1:-}
[ -n "$dir" ] || exit 0
[ -s "$dir/nvidia/cu13/lib/libcudart_static.a" ] && exit 0
nvcc=${NVCC_BIN:-nvcc}
release=$("$nvcc" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
[ -n "$release" ] || { echo "arm64_deps.sh: cannot read the CUDA version from $nvcc" >&2; exit 1; }
python=${PYTHON:-build/venv/bin/python}
rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
"$python" -m pip download -q --no-deps --disable-pip-version-check --only-binary=:all: \
  --platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64 -d "$dir.tmp" "nvidia-cuda-runtime==$release.*"
(cd "$dir.tmp" && for w in *.whl; do python3 -m zipfile -e "$w" .; done)
test -s "$dir.tmp/nvidia/cu13/lib/libcudart_static.a"
rm -rf "$dir" && mv "$dir.tmp" "$dir"
echo "aarch64 CUDA runtime $release: $dir"
