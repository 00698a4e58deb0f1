#!/usr/bin/env bash
# Proves docker/Dockerfile's runtime stage without a Docker engine: a minimal Debian 12 root
# filesystem (debootstrap), exactly the RUNTIME_PACKAGES the Dockerfile lists, the release binary
# built as the Dockerfile builds it, the same non-root user; then, inside it (chroot), `zonefeed
# --version`, `zonefeed fake-server` and a real `zonefeed run` of pipelines/compose.yml against
# that fake server and a PostgreSQL started on the host.
#
#   sudo docker/check-runtime.sh            # from the package root; needs debootstrap and postgresql
#
# ROOTFS_CACHE keeps the debootstrap'ed base between runs (default /var/tmp/zonefeed-rootfs-base).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "check-runtime: run as root (debootstrap and chroot need it)" >&2; exit 2; }

base=${ROOTFS_CACHE:-/var/tmp/zonefeed-rootfs-base}
work=$(mktemp -d /var/tmp/zonefeed-runtime-check.XXXXXX)
chmod 755 "$work"   # the postgres account keeps its cluster in here
rootfs=$work/rootfs
fake_port=${FAKE_PORT:-18765}
pg_port=${PG_PORT:-55432}
pgdata=$work/pgdata
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
fake_pid=""

cleanup() {
  [ -n "$fake_pid" ] && kill "$fake_pid" 2>/dev/null || true
  [ -d "$pgdata" ] && runuser -u postgres -- "$pgbin/pg_ctl" -D "$pgdata" -m fast stop >/dev/null 2>&1 || true
  mountpoint -q "$rootfs/proc" && umount "$rootfs/proc" || true
  mountpoint -q "$rootfs/dev/pts" && umount "$rootfs/dev/pts" || true
  mountpoint -q "$rootfs/dev" && umount "$rootfs/dev" || true
  git checkout -q -- Sources/ZoneFeedCommandLine/BuildInfo.swift 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "--- 1. the release binary, built as the Dockerfile builds it"
commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- Sources Package.swift || commit="$commit-modified"
docker/stamp-commit.sh "$commit"
swift build -c release --product zonefeed --static-swift-stdlib 2>&1 | tail -1
git checkout -q -- Sources/ZoneFeedCommandLine/BuildInfo.swift
binary="$(swift build -c release --show-bin-path)/zonefeed"
backtrace=$(dirname "$(readlink -f "$(command -v swift)")")/../libexec/swift/linux/swift-backtrace-static

echo "--- 2. a minimal Debian 12 (debootstrap --variant=minbase bookworm)"
if [ ! -e "$base/.complete" ]; then
  rm -rf "$base"
  debootstrap --variant=minbase bookworm "$base" http://deb.debian.org/debian >/dev/null
  touch "$base/.complete"
fi
cp -a "$base" "$rootfs"
rm -f "$rootfs/.complete"

packages=$(sed -n 's/^ARG RUNTIME_PACKAGES="\(.*\)"$/\1/p' docker/Dockerfile)
[ -n "$packages" ] || { echo "check-runtime: no ARG RUNTIME_PACKAGES line in docker/Dockerfile" >&2; exit 1; }
echo "--- 3. the Dockerfile's runtime packages: $packages"
cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
mount -t proc proc "$rootfs/proc"
mount --bind /dev "$rootfs/dev"
mount --bind /dev/pts "$rootfs/dev/pts"
chroot "$rootfs" /usr/bin/env DEBIAN_FRONTEND=noninteractive sh -c \
  "apt-get -q update >/dev/null && apt-get -q install -y --no-install-recommends $packages >/dev/null && rm -rf /var/lib/apt/lists/*"
chroot "$rootfs" groupadd --gid 10001 zonefeed
chroot "$rootfs" useradd --uid 10001 --gid 10001 --create-home --home-dir /zonefeed --shell /usr/sbin/nologin zonefeed
install -m 0755 "$binary" "$rootfs/usr/local/bin/zonefeed"
install -m 0755 "$backtrace" "$rootfs/usr/local/bin/swift-backtrace-static"
cp -r pipelines "$rootfs/zonefeed/pipelines"
chroot "$rootfs" chown -R zonefeed:zonefeed /zonefeed

echo "--- 4. what the binary links, inside the image (nothing may be 'not found')"
chroot "$rootfs" ldd /usr/local/bin/zonefeed | sed 's/ (0x[0-9a-f]*)//'
if chroot "$rootfs" ldd /usr/local/bin/zonefeed | grep -q "not found"; then echo "check-runtime: a library is missing" >&2; exit 1; fi
echo "the packages those libraries come from (dpkg -S of each):"
chroot "$rootfs" sh -c 'for lib in $(ldd /usr/local/bin/zonefeed | awk "/=>/ {print \$3}"); do dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "$lib"; done' \
  | cut -d: -f1 | sort -u | tr '\n' ' '; echo

in_image() {  # runs a command in the image as its non-root user, with an empty environment
  chroot --userspec=zonefeed:zonefeed "$rootfs" /usr/bin/env -i HOME=/zonefeed PATH=/usr/local/bin:/usr/bin:/bin \
    SWIFT_BACKTRACE=enable=yes,sanitize=yes,threads=all,images=all,interactive=no,swift-backtrace=/usr/local/bin/swift-backtrace-static \
    "$@"
}

echo "--- 5. zonefeed --version, in the image"
in_image /usr/local/bin/zonefeed --version

echo "--- 6. a PostgreSQL on the host (127.0.0.1:$pg_port) and the fake server in the image (127.0.0.1:$fake_port)"
install -d -o postgres -g postgres "$pgdata"
runuser -u postgres -- "$pgbin/initdb" -D "$pgdata" -U zonefeed --auth=trust >/dev/null
runuser -u postgres -- "$pgbin/pg_ctl" -D "$pgdata" -l "$pgdata/server.log" -w \
  -o "-p $pg_port -c listen_addresses=127.0.0.1 -k $pgdata" start >/dev/null
runuser -u postgres -- "$pgbin/createdb" -h 127.0.0.1 -p "$pg_port" -U zonefeed zonefeed
in_image /usr/local/bin/zonefeed fake-server --host 0.0.0.0 --port "$fake_port" --records-per-zone 2000 >"$work/fake-server.log" 2>&1 &
fake_pid=$!
for _ in $(seq 100); do grep -q "listening on" "$work/fake-server.log" && break; sleep 0.1; done
head -1 "$work/fake-server.log"

echo "--- 7. zonefeed run pipelines/compose.yml, in the image"
in_image /bin/sh -c "cd /zonefeed && DATABASE_URL=postgresql://zonefeed@127.0.0.1:$pg_port/zonefeed \
  FAKE_CLOUDKIT_URL=http://127.0.0.1:$fake_port zonefeed run pipelines/compose.yml --progress never --metrics-file /zonefeed/zonefeed.prom"
echo "--- 8. the result, read on the host"
psql "postgresql://zonefeed@127.0.0.1:$pg_port/zonefeed" -At \
  -c "SELECT 'notes_live rows: ' || count(*) FROM compose.notes_live" \
  -c "SELECT 'runs: ' || string_agg(run_id || ' ' || status, ', ') FROM compose.zonefeed_runs" \
  -c "SELECT 'web auth tokens kept for: ' || string_agg(pipeline, ', ') FROM compose.zonefeed_web_auth_tokens"
echo "metrics file lines: $(wc -l < "$rootfs/zonefeed/zonefeed.prom"); last success: $(grep '^zonefeed_run_last_success' "$rootfs/zonefeed/zonefeed.prom")"
echo "files the run left in the image's working folder: $(cd "$rootfs/zonefeed" && find . -path ./pipelines -prune -o -type f -print | tr '\n' ' ')"
echo "--- runtime check passed"
