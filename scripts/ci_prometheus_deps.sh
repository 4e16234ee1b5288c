#!/bin/sh
# Install Debian's Prometheus for tests/test_fleet_prometheus.py and `kimitui fleet --prometheus auto`, quietly and
# idempotently: the package is downloaded and unpacked (apt-get download, dpkg -x) into a cache folder, never
# installed, so no postinst runs, no service is enabled or started and no daemon is left behind (nor is a
# service manager booted: systemd's tmpfiles would wipe the shared /tmp). Its binary is a static Go program.
#   KIMITUI_PROMETHEUS_DIR   where it is unpacked (default ~/.cache/kimitui/prometheus; kimitui reads the same);
#                            the binary is $KIMITUI_PROMETHEUS_DIR/usr/bin/prometheus
set -eu
DIR=${KIMITUI_PROMETHEUS_DIR:-$HOME/.cache/kimitui/prometheus}
BIN="$DIR/usr/bin/prometheus"

if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
    exit 0
fi
if command -v prometheus >/dev/null 2>&1 && prometheus --version >/dev/null 2>&1; then
    exit 0  # installed on PATH already (apt-get install prometheus): kimitui finds it there first
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
LOG="$WORK/log"
# apt-get download needs the lists only; update them when the package is unknown to them.
apt-cache show prometheus >/dev/null 2>&1 || $SUDO apt-get update -qq >"$LOG" 2>&1 \
    || { tail -n 20 "$LOG" >&2; echo "ci_prometheus_deps: apt-get update failed" >&2; exit 1; }
# apt-get download writes into the current folder as the _apt user where it can: a folder it can write.
chmod 777 "$WORK"
(cd "$WORK" && apt-get download -qq prometheus >"$LOG" 2>&1) \
    || { tail -n 20 "$LOG" >&2; echo "ci_prometheus_deps: apt-get download prometheus failed" >&2; exit 1; }
rm -rf "$DIR.new"
mkdir -p "$DIR.new"
dpkg -x "$WORK"/prometheus_*.deb "$DIR.new"
"$DIR.new/usr/bin/prometheus" --version >/dev/null 2>&1 \
    || { echo "ci_prometheus_deps: the unpacked prometheus does not run" >&2; exit 1; }
rm -rf "$DIR"
mv "$DIR.new" "$DIR"
