#!/usr/bin/env bash
# CI only: pre-build, on the host, the wheels the image needs (finishline's locked
# dependencies, requirements/main.txt, hashes checked, and the build backend), so the image
# build itself needs no network. The host's own pip does the fetching, with the machine's pip
# configuration (it knows where packages come from); the wheels are for CPython 3.11, the base
# image's Python, whatever the host's Python is.
#
# The wheelhouse is cached under $1, keyed by pyproject.toml and the lock, then packed into a
# `FROM scratch` image, finishline-ci/wheelhouse, that ci/docker-compose.ci.yml passes to the
# build as `--build-arg WHEELHOUSE=finishline-ci/wheelhouse:latest`.
#
# usage: ci/build-wheelhouse.sh CACHE_DIR
set -euo pipefail
cd "$(dirname "$0")/.."

cache=${1:?usage: $0 CACHE_DIR}
python=${PYTHON:-python3}
image=finishline-ci/wheelhouse:latest
key=$(cat pyproject.toml requirements/main.txt ci/build-wheelhouse.sh | sha256sum | cut -c1-16)
wheelhouse=$cache/wheelhouse/$key

if [ -f "$wheelhouse/.complete" ]; then
  echo "wheelhouse: cached ($key, $(find "$wheelhouse" -name '*.whl' | wc -l) wheels)"
else
  echo "wheelhouse: pip download for CPython 3.11 ($key)"
  rm -rf "$cache/wheelhouse" && mkdir -p "$wheelhouse"
  : >"$cache/pip-download.log"
  "$python" - >"$wheelhouse/build-requirements.txt" <<'EOF'
import tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["build-system"]["requires"]))
EOF
  # pip evaluates markers against the host's Python, not --python-version: a pin the image's
  # Python needs and the host's does not (async-timeout below 3.11.3, say) would be missing.
  # Download the lock with its markers that only compare the Python version dropped; the
  # image's pip still applies them when it installs.
  sed -E "s/ ; python_(full_)?version *[<>=!~]+ *'[^']*' \\\\$/ \\\\/" requirements/main.txt \
    >"$wheelhouse/main-any-python.txt"
  for requirements in "$wheelhouse/main-any-python.txt" "$wheelhouse/build-requirements.txt"; do
    "$python" -m pip download --disable-pip-version-check \
      --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
      --dest "$wheelhouse" -r "$requirements" >>"$cache/pip-download.log" 2>&1 || {
      tail -n 30 "$cache/pip-download.log" >&2
      exit 1
    }
  done
  rm "$wheelhouse/build-requirements.txt" "$wheelhouse/main-any-python.txt"
  touch "$wheelhouse/.complete"
  echo "wheelhouse: $(find "$wheelhouse" -name '*.whl' | wc -l) wheels, $(du -sh "$wheelhouse" | cut -f1)"
fi

if [ "$(docker image inspect --format '{{ index .Config.Labels "finishline.ci.wheelhouse" }}' "$image" 2>/dev/null || true)" != "$key" ]; then
  # the classic builder: this engine has no BuildKit client (no buildx plugin) to talk to
  DOCKER_BUILDKIT=0 docker build --quiet --label "finishline.ci.wheelhouse=$key" \
    -f ci/wheelhouse.Dockerfile -t "$image" "$wheelhouse" >"$cache/wheelhouse-build.log" 2>&1 || {
    cat "$cache/wheelhouse-build.log" >&2
    exit 1
  }
  echo "wheelhouse: image $image built"
else
  echo "wheelhouse: image $image up to date"
fi
