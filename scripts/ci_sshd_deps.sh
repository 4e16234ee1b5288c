#!/bin/sh
# Install what the SSH tests need (a real OpenSSH server and ssh-keygen), quietly and idempotently.
set -eu
if [ -x /usr/sbin/sshd ] && command -v ssh-keygen >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends openssh-server openssh-client >/dev/null
# sshd's privilege-separation directory; the tests create it too when they run as root.
$SUDO mkdir -p /run/sshd
