#!/usr/bin/env bash
# CI only: a stand-in for the `python:3.11-slim` base image, for a machine that reaches no
# image registry. It is a `debootstrap --variant=minbase` Debian bookworm (Python 3.11) with
# python3, python3-venv and ca-certificates, imported into the Docker engine that DOCKER_HOST
# names and tagged python:3.11-slim. Its interpreter is /usr/bin/python3 (the real image's is
# /usr/local/bin/python3); the Dockerfile works with both.
#
# The Debian mirror is read from this machine's apt sources, never written here. The root
# file system is cached as a tarball under $1 (the CI cache), so a warm run only imports it,
# and an engine that already holds the stand-in skips even that.
#
# usage: ci/build-base-image.sh CACHE_DIR
set -euo pipefail

cache=${1:?usage: $0 CACHE_DIR}
tag=python:3.11-slim
suite=bookworm # Debian 12: Python 3.11, as the tag says
packages=python3,python3-venv,ca-certificates
label=finishline.ci.standin
tarball=$cache/base/rootfs-$suite-minbase-python3.tar

if [ "$(docker image inspect --format "{{ index .Config.Labels \"$label\" }}" "$tag" 2>/dev/null || true)" = "$suite" ]; then
  echo "base image: $tag (stand-in, $suite) already in the engine"
  exit 0
fi
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "base image: a $tag that is not our stand-in is in the engine; refusing to replace it" >&2
  exit 1
fi

# The first Debian mirror of the machine's apt sources whose suite is a release (no -updates,
# -security): deb822 .sources files first, then the one-line format.
debian_mirror() {
  local file
  for file in /etc/apt/sources.list.d/*.sources; do
    [ -r "$file" ] || continue
    awk '
      function flush() { if (types ~ /(^| )deb( |$)/ && release && uri != "") { print uri; found = 1; exit } types = ""; uri = ""; release = 0 }
      /^[[:space:]]*$/ { flush(); next }
      /^Types:/  { types = $0; sub(/^Types:[[:space:]]*/, "", types) }
      /^URIs:/   { uri = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i !~ /-/) release = 1 }
      END { if (!found) flush() }
    ' "$file"
  done | head -n 1
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$file" ] || continue
    sed -e 's/\[[^]]*\]//' "$file" | awk '$1 == "deb" && $3 !~ /-/ { print $2; exit }'
  done | head -n 1
}

if [ ! -s "$tarball" ]; then
  mirror=$(debian_mirror | head -n 1)
  if [ -z "$mirror" ]; then
    echo "base image: no Debian mirror found in /etc/apt/sources.list{,.d}" >&2
    exit 1
  fi
  echo "base image: debootstrap --variant=minbase $suite ($packages) from the machine's mirror"
  mkdir -p "$cache/base"
  root=$(mktemp -d "$cache/base/rootfs.XXXXXX")
  trap 'rm -rf "$root" "$tarball.tmp"' EXIT
  if ! debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" \
    >"$cache/base/debootstrap.log" 2>&1; then
    tail -n 30 "$cache/base/debootstrap.log" >&2
    exit 1
  fi
  # slim it the way the official slim images are: no package caches, lists, docs or locales
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin \
    "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/* \
    "$root"/usr/share/info/* "$root"/usr/share/locale/* "$root"/var/log/*.log \
    "$root"/debootstrap
  tar --numeric-owner -C "$root" -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  rm -rf "$root"
  trap - EXIT
else
  echo "base image: cached root file system $(du -h "$tarball" | cut -f1)"
fi

docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change "LABEL $label=$suite" \
  --change 'CMD ["python3"]' \
  "$tarball" "$tag" >/dev/null
echo "base image: imported $tag ($(docker image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
