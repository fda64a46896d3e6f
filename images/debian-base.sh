#!/usr/bin/env bash
# A base image built from Debian packages alone, for hosts that can reach a Debian mirror and PyPI
# but no image registry. Every Dockerfile of the project takes its base image as the build argument
# BASE_IMAGE (default nvidia/cuda:13.0.2-devel-ubuntu24.04); with this image instead, the images have
# no CUDA toolkit and run the CPU (TIRx llvm) path only. docs/running.md, "The Docker path on a CPU
# host without an image registry". Debian packages it needs: debootstrap and docker.io.
#
#   sudo bash images/debian-base.sh [TAG] [SUITE] [MIRROR]
#   export MKB_BASE_IMAGE=metakernelbench/debian-base:trixie     # read by the compose files
#   docker build --build-arg BASE_IMAGE=$MKB_BASE_IMAGE -f images/grader-tirx.Dockerfile ...
#
# Needs root, debootstrap and a running Docker daemon. Debian 13 (trixie) has Python 3.13, which
# every pinned wheel supports; bookworm's 3.11 is older than the project's 3.12.
set -euo pipefail
for tool in debootstrap docker; do
  command -v "$tool" > /dev/null || { echo "$tool is missing: apt-get install debootstrap docker.io" >&2; exit 1; }
done
tag=${1:-metakernelbench/debian-base:trixie}
suite=${2:-trixie}
mirror=${3:-http://deb.debian.org/debian}
work=$(mktemp -d "${TMPDIR:-/var/tmp}/mkb-rootfs.XXXXXX")
trap 'rm -rf "$work"' EXIT
# minbase: apt, dpkg and the essential set; the images install python3 themselves.
debootstrap --variant=minbase --include=ca-certificates "$suite" "$work/root" "$mirror"
# The host's locally added CAs (a host behind a TLS-intercepting proxy reaches PyPI only through
# them); pip in the images reads the system bundle (PIP_CERT below).
if compgen -G "/usr/local/share/ca-certificates/*.crt" > /dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$work/root/usr/local/share/ca-certificates/"
  chroot "$work/root" update-ca-certificates
fi
chroot "$work/root" apt-get clean
rm -rf "$work/root"/var/lib/apt/lists/* "$work/root"/var/cache/apt/*.bin "$work/root"/tmp/*
tar -C "$work/root" --numeric-owner -c . | docker import \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
  -c 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
  -c 'CMD ["bash"]' -m "debootstrap --variant=minbase $suite $mirror" - "$tag"
docker run --rm "$tag" sh -c '. /etc/os-release && echo "$PRETTY_NAME" && apt-get --version | head -1'
