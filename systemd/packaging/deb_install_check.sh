#!/bin/sh
# deb_install_check.sh DEB [MODELS_DIR] — installs the package with dpkg in a scratch root and
# checks what an admin relies on. The scratch root is this machine's /usr, /etc and dpkg
# database under copy-on-write overlays, in a private mount namespace, so nothing here changes:
#   dpkg -i runs postinst for real (adduser creates `sparkd`), the files and conffile land,
#   /var/lib/sparkd/cache belongs to sparkd, `sparkd check --config /etc/sparkd/spark.toml`
#   runs (with MODELS_DIR mounted on /var/lib/sparkd/models it loads the default model),
#   `systemd-analyze verify` accepts the installed unit, and purge removes it all.
# Needs root (mount namespaces); run from the repository root.
set -eu
deb=$(realpath "$1")
models=${2:+$(realpath "$2")}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export deb models scratch
unshare -m sh -eu -c '
  root=$scratch/root
  mkdir -p "$root" "$scratch/up" "$scratch/work"
  mount -t tmpfs scratch "$root"
  for d in usr etc var/lib/dpkg; do
    mkdir -p "$root/$d" "$scratch/up/$d" "$scratch/work/$d"
    mount -t overlay overlay -o "lowerdir=/$d,upperdir=$scratch/up/$d,workdir=$scratch/work/$d" "$root/$d"
  done
  for l in bin lib lib64 sbin; do [ -L "/$l" ] && ln -s "$(readlink "/$l")" "$root/$l"; done
  mkdir -p "$root/tmp" "$root/proc" "$root/dev" "$root/run" "$root/var/log" "$root/var/cache" "$root/root"
  mount --rbind /dev "$root/dev"
  mount -t proc proc "$root/proc"
  cp "$deb" "$root/tmp/sparkd.deb"
  in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin HOME=/root "$@"; }

  echo "== dpkg -i"
  in_root dpkg -i /tmp/sparkd.deb
  in_root dpkg -s sparkd | grep -q "^Status: install ok installed"
  echo "== files, user, ownership"
  for f in /usr/bin/sparkd /etc/sparkd/spark.toml /lib/systemd/system/sparkd.service \
           /usr/share/doc/sparkd/README.md.gz /usr/share/doc/sparkd/copyright; do
    test -f "$root$f" || { echo "missing $f"; exit 1; }
  done
  in_root getent passwd sparkd
  test "$(in_root stat -c %U /var/lib/sparkd/cache)" = sparkd
  test -d "$root/var/lib/sparkd/models"
  in_root dpkg-query --showformat="\${Conffiles}\n" --show sparkd | grep -q "/etc/sparkd/spark.toml"
  echo "== sparkd version"
  in_root sparkd version
  echo "== sparkd check --config /etc/sparkd/spark.toml"
  if [ -n "$models" ]; then mount --bind -o ro "$models" "$root/var/lib/sparkd/models"; fi
  set +e
  in_root sparkd check --config /etc/sparkd/spark.toml
  rc=$?
  set -e
  if [ -n "$models" ]; then
    umount "$root/var/lib/sparkd/models"
    test $rc = 0 || { echo "sparkd check failed ($rc) with the default model in place"; exit 1; }
  else
    test $rc = 2 || { echo "sparkd check without a model should exit 2, got $rc"; exit 1; }
  fi
  echo "== systemd-analyze verify"
  in_root systemd-analyze verify /lib/systemd/system/sparkd.service
  echo "== dpkg --purge"
  in_root dpkg --purge sparkd
  test ! -e "$root/usr/bin/sparkd" && test ! -e "$root/etc/sparkd/spark.toml" && test ! -e "$root/var/lib/sparkd/cache"
'
echo "install check passed: $1"
