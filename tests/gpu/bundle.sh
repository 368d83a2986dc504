#!/bin/sh
# bundle.sh SPARKD DIR — copies a sparkd binary and the shared libraries it needs beyond glibc
# and the CUDA/driver libraries (cpp-httplib and its TLS and compression libraries, the C++
# runtime they bring) into DIR, so it runs on a GPU machine without our Debian packages:
#   LD_LIBRARY_PATH=DIR/lib:$CUDA_HOME/lib64 DIR/sparkd ...
set -eu
sparkd=${1:?usage: bundle.sh SPARKD DIR}
dir=${2:?usage: bundle.sh SPARKD DIR}
mkdir -p "$dir/lib"
strip -o "$dir/sparkd" "$sparkd"
ldd "$sparkd" | awk '/=> \// { print $1, $3 }' | while read -r name path; do
  case "$name" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libcuda.so*|libcublas*|libcudart*) ;;
    *) cp -L "$path" "$dir/lib/$name" ;;
  esac
done
ls -l "$dir" "$dir/lib"
