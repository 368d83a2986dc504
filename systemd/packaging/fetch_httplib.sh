#!/bin/sh
# fetch_httplib.sh DIR — cpp-httplib compiled into sparkd instead of linked as a shared library
# (a soname like libcpp-httplib.so.0.11 exists on one distribution release only).
#
# Takes the distribution's own source package of cpp-httplib (its security patches applied)
# with `apt-get source`, and splits upstream's header-only httplib.h into httplib.h and
# httplib.cc with upstream's split.py, as the distribution's build does; the Makefile compiles
# httplib.cc once. The source index is read into DIR, so the machine's apt setup is untouched.
set -eu
out=$1
[ -s "$out/httplib.cc" ] && exit 0
mkdir -p "$out.tmp" && work=$(cd "$out.tmp" && pwd)
rm -rf "$work" && mkdir -p "$work/lists/partial" "$work/src" "$work/parts"

# The distribution's own archive (not third-party repositories), as a source-package source.
touch "$work/src.list"
[ -f /etc/apt/sources.list ] && sed -n 's/^deb \(.*\)/deb-src \1/p' /etc/apt/sources.list > "$work/src.list"
for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list.d/ubuntu.sources; do
  [ -f "$f" ] && { sed 's/^Types:.*/Types: deb-src/' "$f"; echo; }
done > "$work/parts/distribution.sources"
opts="-o APT::Sandbox::User=root -o Dir::Etc::SourceList=$work/src.list -o Dir::Etc::SourceParts=$work/parts -o Dir::State::Lists=$work/lists"
apt-get $opts update -qq
(cd "$work/src" && apt-get $opts source --download-only -qq cpp-httplib)
dsc=$(ls "$work"/src/cpp-httplib_*.dsc)
dpkg-source -q -x "$dsc" "$work/src/tree" >/dev/null 2>&1 || dpkg-source -x "$dsc" "$work/src/tree"
python3 "$work/src/tree/split.py" -o "$work/split" >/dev/null
version=$(sed -n 's/^Version: //p' "$dsc")
mkdir -p "$out"
cp "$work/split/httplib.h" "$work/split/httplib.cc" "$out/"
echo "$version" > "$out/VERSION"
cp "$work/src/tree/LICENSE" "$out/LICENSE"
rm -rf "$work"
echo "cpp-httplib $version: $out"
