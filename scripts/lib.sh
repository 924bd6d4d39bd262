# shellcheck shell=bash
# Shared helpers for the idem developer scripts (scripts/test, scripts/demo,
# scripts/mariadb, scripts/galera).  Source this file; it does not change shell options.

# Debian 12 (bookworm) packages needed to build and test idem.
IDEM_DEPS=(
    g++ clang cmake make pkg-config git
    # A compiler cache: a fresh clone (CI's) recompiles only what changed.
    ccache
    # scripts/test checks that every C++ file is formatted as the root .clang-format says.
    clang-format
    nlohmann-json3-dev catch2 libfmt-dev libssl-dev
    default-libmysqlclient-dev mariadb-server libsqlite3-dev
    libclang-rt-14-dev libcpp-httplib-dev ca-certificates
    # The Redis store (idem::redis) and its throwaway servers (scripts/redis).
    libhiredis-dev redis-server redis-tools
    # The PostgreSQL store (idem::pg) and its throwaway servers (scripts/postgres; the
    # package's own cluster is not used).
    libpq-dev postgresql
    # The RabbitMQ consumer (idem::amqp) and its throwaway brokers (scripts/rabbitmq).
    librabbitmq-dev rabbitmq-server
    # The coroutine API (idem::async) and the async HTTP example: Boost.Asio and Beast.
    libboost1.81-dev
    # promtool, which checks and unit-tests the alert rules in monitoring/ (the package's
    # server is not used).
    prometheus
    # The Galera suite (scripts/galera): the provider, the client tools, rsync state transfer
    # and what its SST script calls (ss or lsof, ps, hostname, setpriv).
    mariadb-client galera-4 rsync iproute2 lsof procps psmisc socat hostname util-linux
)

# Absolute path of the repository root (the parent of scripts/).
# shellcheck disable=SC2034  # used by the scripts that source this file
IDEM_ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"

idem_log() { printf 'idem: %s\n' "$*" >&2; }
idem_die() { printf 'idem: error: %s\n' "$*" >&2; exit 1; }

# Prints the packages of IDEM_DEPS that are not installed.
idem_missing_deps() {
    local pkg status
    for pkg in "${IDEM_DEPS[@]}"; do
        status="$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)"
        case "$status" in
            ii*) ;;
            *) printf '%s\n' "$pkg" ;;
        esac
    done
}

# Installs whatever is missing of IDEM_DEPS with apt-get.  Works on a bare
# Debian 12 minbase system as root; as a normal user it needs sudo.
# Set IDEM_SKIP_DEPS=1 to skip the check (e.g. on a non-Debian system).
idem_install_deps() {
    if [ "${IDEM_SKIP_DEPS:-0}" = 1 ]; then
        return 0
    fi
    if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
        idem_die "dpkg-query/apt-get not found: this is not a Debian system; install ${IDEM_DEPS[*]} by hand and set IDEM_SKIP_DEPS=1"
    fi

    local -a missing
    mapfile -t missing < <(idem_missing_deps)
    if [ "${#missing[@]}" -eq 0 ]; then
        return 0
    fi

    local -a sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo=(sudo)
        else
            idem_die "missing Debian packages: ${missing[*]}; not running as root and sudo is not available. Install them as root: apt-get install ${missing[*]} (or set IDEM_SKIP_DEPS=1)"
        fi
    fi

    local log start rc=0
    log="$(mktemp "${TMPDIR:-/tmp}/idem-apt.XXXXXX")"
    start=$SECONDS
    idem_log "installing missing packages: ${missing[*]}"
    idem_log "apt-get update"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q update >"$log" 2>&1 || rc=$?
    if [ "$rc" -eq 0 ]; then
        idem_log "apt-get install (log: $log)"
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$log" 2>&1 || rc=$?
    fi
    if [ "$rc" -ne 0 ]; then
        tail -n 40 "$log" >&2 || true
        idem_die "apt-get failed (exit $rc) while installing: ${missing[*]} (full log: $log)"
    fi
    mapfile -t missing < <(idem_missing_deps)
    if [ "${#missing[@]}" -gt 0 ]; then
        idem_die "still missing after apt-get install: ${missing[*]} (log: $log)"
    fi
    rm -f -- "$log"
    idem_log "packages installed ($((SECONDS - start)) s)"
}
