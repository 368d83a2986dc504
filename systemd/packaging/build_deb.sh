#!/bin/sh
# build_deb.sh BINARY ARCH VERSION OUTDIR — sparkd_VERSION_ARCH.deb from a built binary:
#   /usr/bin/sparkd                         the binary, stripped
#   /etc/sparkd/spark.toml                  the shipped config (a conffile), models under /var/lib
#   /lib/systemd/system/sparkd.service      systemd/sparkd.service, ExecStart at /usr/bin
#   /var/lib/sparkd/{models,cache}          owned by the `sparkd` user that postinst creates
#   /usr/share/doc/sparkd/                  README, copyright, changelog, bundled licences
# Run from the repository root. DEB_MAINTAINER overrides the Maintainer field, DEB_COMPRESSION
# the compressor (xz; the tests use gzip, which is faster).
set -eu
binary=$1 arch=$2 version=$3 out=$4
maintainer=${DEB_MAINTAINER:-"sparkd maintainers <sparkd@example.org>"}
case $arch in
  amd64) strip=strip ;;
  arm64) strip=$(command -v aarch64-linux-gnu-strip || echo strip) ;;
  *) echo "build_deb.sh: unknown architecture $arch" >&2; exit 2 ;;
esac
machine=$(readelf -h "$binary" | sed -n 's/ *Machine: *//p')
case "$arch:$machine" in
  amd64:*X86-64*|arm64:*AArch64*) ;;
  *) echo "build_deb.sh: $binary is '$machine', not $arch" >&2; exit 2 ;;
esac

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
install -d "$root/DEBIAN" "$root/usr/bin" "$root/etc/sparkd" "$root/lib/systemd/system" \
  "$root/var/lib/sparkd/models" "$root/var/lib/sparkd/cache" "$root/usr/share/doc/sparkd/licenses"

"$strip" --strip-unneeded -o "$root/usr/bin/sparkd" "$binary"
chmod 0755 "$root/usr/bin/sparkd"

# The shipped config with its model path in the package's state directory.
sed 's|^path = "models/|path = "/var/lib/sparkd/models/|' spark.toml > "$root/etc/sparkd/spark.toml"
grep -q '^path = "/var/lib/sparkd/models/' "$root/etc/sparkd/spark.toml"
sed -e 's|/usr/local/bin/sparkd|/usr/bin/sparkd|' \
    -e 's|^Documentation=file:///usr/share/doc/sparkd/README.md$|Documentation=file:///usr/share/doc/sparkd/README.md.gz|' \
    systemd/sparkd.service > "$root/lib/systemd/system/sparkd.service"
chmod 0644 "$root/etc/sparkd/spark.toml" "$root/lib/systemd/system/sparkd.service"

doc=$root/usr/share/doc/sparkd
gzip -9n < README.md > "$doc/README.md.gz"
cp systemd/packaging/deb/copyright "$doc/copyright"
cp build/third_party/cpp-httplib/LICENSE "$doc/licenses/cpp-httplib"
cp /usr/share/doc/libpcre2-dev/copyright "$doc/licenses/pcre2"
cp /usr/share/doc/libutf8proc-dev/copyright "$doc/licenses/utf8proc"
cp /usr/share/doc/libssl-dev/copyright "$doc/licenses/openssl"
# A native package's changelog: one entry for this version, dated by the last commit.
date=$(git log -1 --format=%cD 2>/dev/null || date -R)
printf 'sparkd (%s) unstable; urgency=medium\n\n  * Release %s (git %s).\n\n -- %s  %s\n' \
  "$version" "$version" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$maintainer" "$date" |
  gzip -9n > "$doc/changelog.gz"
find "$root/usr/share/doc" -type f -exec chmod 0644 {} +

for script in postinst prerm postrm; do install -m 0755 "systemd/packaging/deb/$script" "$root/DEBIAN/$script"; done
echo /etc/sparkd/spark.toml > "$root/DEBIAN/conffiles"
# The newest glibc symbol version the binary uses is the libc6 it needs.
glibc=$(readelf -V --wide "$root/usr/bin/sparkd" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@SIZE@|$size|" -e "s|@GLIBC@|$glibc|" \
    -e "s|@MAINTAINER@|$maintainer|" systemd/packaging/deb/control.in > "$root/DEBIAN/control"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -print | sed 's|^\./||' | sort | xargs md5sum) \
  > "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"

mkdir -p "$out"
deb=$out/sparkd_${version}_${arch}.deb
dpkg-deb --root-owner-group -Z"${DEB_COMPRESSION:-xz}" --build "$root" "$deb" >/dev/null
echo "$deb"
