#!/usr/bin/env bash
# Build the coterie docker image FROM scratch.
#
# No base image can be pulled where coterie is built, so the image holds
# only what the binary needs: the release build of `coterie` (an ordinary,
# dynamically linked glibc binary), the shared libraries `ldd` lists for it,
# the dynamic loader and a one-line /etc/nsswitch.conf. The cluster file and
# its secret are not in the image: docker-compose.yml mounts config/ at
# /config, and this script writes config/docker.secret (random, mode 600,
# ignored by git) when there is none yet. Host names (compose service names) are resolved by glibc's
# built-in `files` and `dns` NSS backends against the /etc/hosts and
# /etc/resolv.conf that Docker mounts into every container.
#
# The root filesystem is staged in target/docker-rootfs/ (rebuilt from
# nothing on every run) and the repository's Dockerfile copies it into the
# image. Running the script twice gives the same image.
#
# Usage: scripts/build-image.sh
# Environment:
#   COTERIE_IMAGE  image tag to build            (default coterie:latest)
#   COTERIE_BIN    use this binary instead of running `cargo build --release`
#   CARGO          cargo command                 (default cargo)
#   CARGO_TARGET_DIR is honoured when locating the built binary.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE="${COTERIE_IMAGE:-coterie:latest}"
CARGO="${CARGO:-cargo}"
STAGE="$ROOT/target/docker-rootfs"
SECRET="$ROOT/config/docker.secret"

say() { printf '[build-image] %s\n' "$*"; }
die() { printf '[build-image] error: %s\n' "$*" >&2; exit 1; }

command -v docker >/dev/null || die "docker is not installed"
docker version >/dev/null 2>&1 || die "the docker daemon does not answer (docker version failed)"
[ -f "$ROOT/Dockerfile" ] || die "missing $ROOT/Dockerfile"

# 1. The binary.
if [ -n "${COTERIE_BIN:-}" ]; then
    BIN="$COTERIE_BIN"
    say "using prebuilt binary $BIN (COTERIE_BIN)"
else
    say "cargo build --release --bin coterie"
    (cd "$ROOT" && "$CARGO" build --release -p coterie --bin coterie)
    target_dir="${CARGO_TARGET_DIR:-$ROOT/target}"
    case "$target_dir" in /*) ;; *) target_dir="$ROOT/$target_dir" ;; esac
    BIN="$target_dir/release/coterie"
fi
[ -x "$BIN" ] || die "no executable at $BIN"

# 2. A fresh root filesystem.
say "staging root filesystem in ${STAGE#"$ROOT"/}/"
rm -rf "$STAGE"
mkdir -p "$STAGE/config" "$STAGE/etc"
cp "$BIN" "$STAGE/coterie"
# Without this file glibc looks names up in DNS before /etc/hosts; with it,
# the container's own /etc/hosts entries answer first, then Docker's DNS.
printf 'hosts: files dns\n' >"$STAGE/etc/nsswitch.conf"

# Copy one file to the same absolute path inside the rootfs, following
# symlinks (the rootfs holds plain files under the names the loader asks for).
stage_file() {
    local src="$1"
    [ -e "$STAGE$src" ] && return 0
    mkdir -p "$STAGE$(dirname "$src")"
    cp -L "$src" "$STAGE$src"
    say "  + $src"
}

# The shared libraries (and the loader) that `ldd` resolves for a file.
# Prints nothing for a statically linked file.
ldd_paths() {
    local out
    out="$(ldd "$1" 2>&1)" || true
    case "$out" in
        *"not a dynamic executable"*|*"statically linked"*) return 0 ;;
        *"not found"*) die "ldd $1: a library is missing: $out" ;;
    esac
    # "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and
    # "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no file.
    printf '%s\n' "$out" | awk '
        $2 == "=>" && $3 ~ /^\// { print $3; next }
        $1 ~ /^\// { print $1 }'
}

libs="$(ldd_paths "$BIN")"
if [ -z "$libs" ]; then
    say "$BIN is statically linked: no shared libraries to copy"
else
    say "shared libraries of the binary:"
    libdir=""
    while IFS= read -r lib; do
        [ -n "$lib" ] || continue
        stage_file "$lib"
        case "$lib" in */libc.so.*) libdir="$(dirname "$lib")" ;; esac
    done <<<"$libs"
    # glibc >= 2.34 has the files and dns NSS backends built into libc.so.6;
    # older glibc dlopen()s them at lookup time, which ldd cannot see. Copy
    # them (and what they link) when they exist: a few kilobytes, and the
    # image then resolves names whichever glibc built it.
    for mod in libnss_files.so.2 libnss_dns.so.2; do
        if [ -n "$libdir" ] && [ -e "$libdir/$mod" ]; then
            stage_file "$libdir/$mod"
            while IFS= read -r dep; do
                [ -n "$dep" ] && stage_file "$dep"
            done <<<"$(ldd_paths "$libdir/$mod")"
        fi
    done
fi

say "root filesystem:"
(cd "$STAGE" && find . -type f -printf '  /%P  %s bytes\n' | sort)

# 3. The image. Remember the old image so a rebuild does not leave a
# dangling copy behind.
old_id="$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
say "docker build -t $IMAGE (FROM scratch, context: target/docker-rootfs via .dockerignore)"
# (The legacy builder's deprecation notice on stderr is noise; show the
# output only when the build fails.)
if ! build_out="$(docker build -t "$IMAGE" -f "$ROOT/Dockerfile" "$ROOT" 2>&1)"; then
    printf '%s\n' "$build_out" >&2
    die "docker build failed"
fi
new_id="$(docker image inspect --format '{{.Id}}' "$IMAGE")"
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then
    docker image rm "$old_id" >/dev/null 2>&1 || true
fi

# 4. The docker lab's secret, on the host, for the compose file to mount.
if [ -s "$SECRET" ]; then
    say "keeping the docker lab's secret ${SECRET#"$ROOT"/}"
else
    (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$SECRET" && echo >>"$SECRET")
    say "wrote a random secret for the docker lab to ${SECRET#"$ROOT"/}"
fi

# 5. The docker lab's certificates, for COTERIE_CONFIG_FILE=docker-tls.toml:
# a CA and a certificate per node of config/docker-tls.toml, made by the
# binary just built (kept if there already).
TLS_DIR="$ROOT/config/tls"
if [ -s "$TLS_DIR/ca.pem" ]; then
    say "keeping the docker lab's certificates ${TLS_DIR#"$ROOT"/}/"
else
    "$BIN" certs --config "$ROOT/config/docker-tls.toml" --dir "$TLS_DIR" >/dev/null
    say "wrote a CA and certificates for the docker lab's TLS cluster to ${TLS_DIR#"$ROOT"/}/"
fi

# 6. Smoke test: the binary starts inside the image (loader and libraries
# are all there).
if ! docker run --rm "$IMAGE" --help >/dev/null 2>&1; then
    docker run --rm "$IMAGE" --help || true
    die "the image $IMAGE was built but '/coterie --help' does not run inside it"
fi
size="$(docker image inspect --format '{{.Size}}' "$IMAGE")"
say "built $IMAGE ${new_id#sha256:} ($((size / 1024)) KiB); '/coterie --help' runs inside it"
