#!/usr/bin/env bash
# CI: prove the container works. Called by .ci/run after `make test`; runs as root.
#
#   1. static checks, no engine needed: hadolint on the Dockerfile, `docker compose config -q`
#   2. start a private Docker engine (Debian's docker.io) with host networking only: no
#      bridge, no iptables, its own data root, socket and exec root
#   3. build a stand-in for the python:3.11-slim base image (ci/build-base-image.sh: the
#      machine reaches no image registry) and a wheelhouse on the host
#      (ci/build-wheelhouse.sh), so the image build runs with no network at all
#   4. `docker compose build`, `up --wait` (the healthcheck on /healthz), POST /runs with the
#      demo model, follow its SSE stream to run.completed, `docker compose restart`, and check
#      the run is still there, completed; again in a recreated container (the data volume);
#      and a SIGTERM right after a start stops the container at once
#   5. tear down in a trap, on success, failure, Ctrl-C or `timeout`: stop the step in
#      flight, compose down, stop the engine, and check that no process of it is left
#
# Every step is bounded with `timeout` and runs in the background while the script waits, so
# a signal reaches the trap at once. The engine runs in a session of its own: a signal to this
# script's process group does not stop it under the trap's feet; the trap stops it, in order.
#
# Caches (debootstrap tarball, wheelhouse, the engine's data root with its images and layers)
# live in $FINISHLINE_CI_CACHE, by default /var/cache/finishline-ci (outside the repository,
# so a warm CI run in a fresh clone still finds them); delete it for a cold run.
set -euo pipefail
cd "$(dirname "$0")/.."

cache=${FINISHLINE_CI_CACHE:-/var/cache/finishline-ci}
port=${FINISHLINE_CI_PORT:-18000}
exec_root=/run/finishline-ci
base=http://127.0.0.1:$port
started=$SECONDS
export FINISHLINE_CI_PORT=$port
export DOCKER_HOST=unix://$exec_root/docker.sock # the engine this script starts
compose=(docker compose -f docker-compose.yml -f ci/docker-compose.ci.yml)

phase() { printf -- '--- %s (+%ss)\n' "$*" "$((SECONDS - started))"; }
fail() {
  printf 'FAIL: %s\n' "$*" >&2
  exit 1
}

[ "$(id -u)" = 0 ] || fail "run as root (it installs packages and starts a Docker engine)"
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
work=$(mktemp -d)

# step LIMIT CMD...: CMD under `timeout LIMIT`, waited for in the background so that a signal
# runs the trap at once (the trap then stops it).
step_pid=
step() {
  local limit=$1 rc=0
  shift
  timeout "$limit" "$@" &
  step_pid=$!
  wait "$step_pid" || rc=$?
  step_pid=
  return "$rc"
}

# the engine's mounts (its network namespace file) and state under its exec root
clear_exec_root() {
  awk -v root="$exec_root/" 'index($2, root) == 1 { print $2 }' /proc/mounts | sort -r |
    while read -r mount; do umount -l "$mount"; done
  rm -rf "$exec_root"
}
ours() { # is PID a dockerd of this script's exec root (this run's, or an interrupted one's)?
  tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q -- "dockerd .*--exec-root $exec_root "
}
stop_engine() { # PID: TERM, 30 s, then KILL
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 60); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.5
  done
  echo "dockerd $pid did not stop in 30 s: killing it"
  kill -KILL "$pid" 2>/dev/null
}

dockerd_pid=
cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM HUP
  if [ -n "$step_pid" ]; then # the step in flight: its timeout passes the signal on
    kill -TERM "$step_pid" 2>/dev/null
    timeout 20 tail --pid="$step_pid" -f /dev/null
    kill -KILL "$step_pid" 2>/dev/null
  fi
  if [ "$rc" != 0 ] && [ -n "$dockerd_pid" ]; then
    echo "--- diagnostics (exit $rc)"
    timeout 30 "${compose[@]}" ps -a
    timeout 30 "${compose[@]}" logs --no-color --tail 80
    tail -n 20 "$cache/dockerd.log"
  fi
  phase "teardown"
  if [ -n "$dockerd_pid" ]; then # only what this script started
    timeout 90 "${compose[@]}" down --volumes --remove-orphans --timeout 45 2>&1 | tail -n 3
    # earlier finishline images go; the build stage's layers are untagged too, but they are
    # the build cache: keep a week of them
    timeout 30 docker image prune --force --filter label=com.docker.compose.image.builder >/dev/null
    timeout 30 docker image prune --force --filter until=168h >/dev/null
    stop_engine "$dockerd_pid"
    wait "$dockerd_pid" 2>/dev/null
    # containerd and shims the engine started carry its exec root in their command line
    local left
    left=$(pgrep -f -- "$exec_root" || true)
    if [ -n "$left" ]; then
      echo "left behind, killing: $(echo "$left" | paste -sd' ')"
      # shellcheck disable=SC2086
      kill -KILL $left 2>/dev/null
      sleep 1
    fi
    clear_exec_root
    echo "engine stopped; processes of it left: $(pgrep -f -- "$exec_root" | wc -l)"
  fi
  rm -rf "$work"
  echo "container step: $((SECONDS - started)) s, exit $rc"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

phase "packages: docker.io, debootstrap"
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  step 5m apt-get update -qq
  step 10m apt-get install -y -qq --no-install-recommends "${need[@]}" >"$work/apt.log" 2>&1 ||
    {
      tail -n 30 "$work/apt.log" >&2
      fail "apt-get install ${need[*]}"
    }
fi
dockerd --version

phase "tools: hadolint, docker compose (ci/requirements.txt)"
tools=$cache/tools
key=$(sha256sum ci/requirements.txt | cut -c1-16)
if [ "$(cat "$tools/.key" 2>/dev/null || true)" != "$key" ]; then
  rm -rf "$tools"
  step 2m python3 -m venv "$tools"
  step 10m "$tools/bin/python" -m pip install --disable-pip-version-check \
    -r ci/requirements.txt >"$work/pip-tools.log" 2>&1 || {
    tail -n 30 "$work/pip-tools.log" >&2
    fail "pip install -r ci/requirements.txt"
  }
  echo "$key" >"$tools/.key"
fi
# compose as a docker CLI plugin, in a docker config of CI's own
export DOCKER_CONFIG=$cache/docker-config
mkdir -p "$DOCKER_CONFIG/cli-plugins"
ln -sf "$tools/bin/docker-compose" "$DOCKER_CONFIG/cli-plugins/docker-compose"
"$tools/bin/hadolint" --version
docker compose version

phase "static: hadolint --failure-threshold warning"
step 2m "$tools/bin/hadolint" --failure-threshold warning Dockerfile ci/wheelhouse.Dockerfile
echo "hadolint: clean"

phase "static: docker compose config -q"
step 1m docker compose config -q
step 1m docker compose --profile scale config -q
step 1m docker compose --profile postgres config -q
step 1m "${compose[@]}" config -q
echo "docker compose config: clean (docker-compose.yml; --profile scale; --profile postgres; with the CI override)"

phase "engine: dockerd (host networking only)"
if [ -r "$exec_root/dockerd.pid" ] && ours "$(cat "$exec_root/dockerd.pid")"; then
  echo "the engine of an interrupted run is still up: stopping it"
  stop_engine "$(cat "$exec_root/dockerd.pid")"
fi
if curl -fsS --max-time 3 --unix-socket "$exec_root/docker.sock" http://engine/_ping >/dev/null 2>&1; then
  fail "another engine answers on $DOCKER_HOST"
fi
clear_exec_root
mkdir -p "$exec_root" "$cache/docker"
setsid dockerd --data-root "$cache/docker" --exec-root "$exec_root" \
  --pidfile "$exec_root/dockerd.pid" --host "$DOCKER_HOST" \
  --bridge=none --iptables=false --ip-masq=false --ip-forward=false \
  >"$cache/dockerd.log" 2>&1 </dev/null &
dockerd_pid=$!
step 60 bash -c 'until docker version >/dev/null 2>&1; do
  kill -0 '"$dockerd_pid"' 2>/dev/null || exit 1; sleep 0.5; done' ||
  {
    tail -n 30 "$cache/dockerd.log" >&2
    fail "dockerd did not come up"
  }
docker version --format 'engine {{.Server.Version}} (API {{.Server.APIVersion}}), pid '"$dockerd_pid"
# leftovers of an interrupted run
step 90 "${compose[@]}" down --volumes --remove-orphans --timeout 10 >/dev/null 2>&1

phase "base image: stand-in for python:3.11-slim (ci/build-base-image.sh)"
step 15m bash ci/build-base-image.sh "$cache"

phase "wheelhouse (ci/build-wheelhouse.sh)"
step 10m bash ci/build-wheelhouse.sh "$cache"

phase "image: docker compose build (no network)"
step 15m "${compose[@]}" build >"$work/build.log" 2>&1 || {
  tail -n 40 "$work/build.log" >&2
  fail "docker compose build"
}
cp "$work/build.log" "$cache/build.log" # the last build's full log
grep -E '^(Step|Successfully| ---> Using cache)' "$work/build.log" || tail -n 20 "$work/build.log"
image_bytes=$(docker image inspect --format '{{.Size}}' finishline:latest)
base_bytes=$(docker image inspect --format '{{.Size}}' python:3.11-slim)
printf 'image finishline:latest: %s MB (base stand-in %s MB, finishline layers %s MB)\n' \
  "$((image_bytes / 1000000))" "$((base_bytes / 1000000))" "$(((image_bytes - base_bytes) / 1000000))"
user=$(docker image inspect --format '{{.Config.User}}' finishline:latest)
[ -n "$user" ] && [ "${user%%:*}" != 0 ] && [ "${user%%:*}" != root ] || fail "image runs as root"
# shellcheck disable=SC2016 # $c expands in the container's shell
step 60 docker run --rm --network none --entrypoint /bin/sh finishline:latest \
  -c 'for c in gcc cc c++ g++ clang make; do command -v $c; done; true' >"$work/compilers"
[ ! -s "$work/compilers" ] || fail "compilers in the final image: $(cat "$work/compilers")"
echo "runs as user $user; no compiler in the image"

phase "up: docker compose up --wait (healthcheck on /healthz)"
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then fail "127.0.0.1:$port is taken"; fi
step 4m "${compose[@]}" up --detach --no-build --wait --wait-timeout 180
container=$("${compose[@]}" ps -q finishline)
health() { docker inspect --format '{{.State.Health.Status}}' "$container"; }
echo "container: $(health)"
step 15 curl -fsS --max-time 10 "$base/healthz"
echo
step 15 curl -fsS --max-time 10 "$base/" >"$work/index.html"
grep -qi '<html' "$work/index.html" || fail "GET / is not the run viewer page"
echo "GET /: the run viewer page ($(wc -c <"$work/index.html") bytes)"

phase "run: POST /runs (demo model), follow its SSE stream"
step 30 curl -fsS --max-time 20 "$base/runs" -H 'Content-Type: application/json' \
  -d '{"task": "What is 17 * 23? Then tell me the time.", "model": "demo",
       "tools": ["calculator", "current_time", "update_plan"]}' >"$work/created.json"
run_id=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' <"$work/created.json")
echo "run $run_id"
# the stream replays from the start and closes after the terminal event
step 90 curl -fsSN --max-time 80 "$base/runs/$run_id/events" >"$work/events.txt"
grep -q '^event: run.completed' "$work/events.txt" || {
  cat "$work/events.txt" >&2
  fail "no run.completed event on the stream"
}
printf 'events: %s\n' "$(grep '^event: ' "$work/events.txt" | cut -d' ' -f2 | paste -sd' ')"
check_run() { # the run, as GET /runs/{id} gives it: completed, finished, an answer
  step 30 curl -fsS --max-time 20 "$base/runs/$run_id" >"$work/run.json"
  python3 - "$run_id" "$work/run.json" <<'EOF'
import json, sys
run = json.load(open(sys.argv[2]))
assert run["id"] == sys.argv[1], run["id"]
assert run["status"] == "completed", run["status"]
assert run["result"]["reason"] == "finished", run["result"]
assert run["result"]["answer"], run["result"]
print(f'GET /runs/{run["id"]}: {run["status"]}, {run["result"]["reason"]}, '
      f'{run["usage"]["steps"]} steps, answer: {run["result"]["answer"][:70]!r}')
EOF
}
check_run
events_before=$(grep -c '^event: ' "$work/events.txt")

phase "restart: docker compose restart; the run survives (data volume)"
step 2m "${compose[@]}" restart finishline
step 2m bash -c "until [ \"\$(docker inspect --format '{{.State.Health.Status}}' $container)\" = healthy ]; do sleep 1; done" ||
  fail "not healthy after the restart"
echo "container: $(health), started again at $(docker inspect --format '{{.State.StartedAt}}' "$container")"
step 30 "${compose[@]}" logs --no-color finishline >"$work/service.log"
grep -q service_stopped "$work/service.log" ||
  fail "no service_stopped in the logs: the SIGTERM drain did not run"
echo "SIGTERM drained the service (service_stopped logged)"
check_run
step 90 curl -fsSN --max-time 80 "$base/runs/$run_id/events" >"$work/events-after.txt"
events_after=$(grep -c '^event: ' "$work/events-after.txt")
[ "$events_after" = "$events_before" ] || fail "events: $events_before before, $events_after after"
echo "event log intact after the restart: $events_after events"

phase "recreate: a new container on the same volume still has the run"
step 4m "${compose[@]}" up --detach --no-build --force-recreate --wait --wait-timeout 180 >/dev/null 2>&1
old_container=$container
container=$("${compose[@]}" ps -q finishline)
[ "$container" != "$old_container" ] || fail "the container was not recreated"
check_run

phase "stop: SIGTERM right after a start stops it at once (init as PID 1)"
step 2m "${compose[@]}" restart finishline >/dev/null 2>&1
stop_started=$SECONDS
step 2m "${compose[@]}" stop finishline >/dev/null 2>&1
stop_s=$((SECONDS - stop_started))
[ "$(docker inspect --format '{{.State.Status}}' "$container")" = exited ] || fail "not stopped"
[ "$stop_s" -lt 15 ] || fail "stopping took ${stop_s} s: a SIGTERM was lost"
echo "stopped in ${stop_s} s"

phase "container smoke test passed"
