#!/usr/bin/env bash
# Simulated hosts on one machine, for tests and benchmarks across hosts.
#
#   scripts/hosts.sh up N [RIG]         make hosts 0..N-1 (prints nothing; fails if RIG exists)
#   scripts/hosts.sh run I [RIG] -- CMD run CMD "on host I" (exit status is CMD's)
#   scripts/hosts.sh address I          host I's address (10.231.0.(I+1))
#   scripts/hosts.sh extras I [RIG]     give host I the interfaces real hosts have besides their link
#   scripts/hosts.sh readdress I DEV ADDR/PREFIX [RIG]  give host I's DEV this address instead
#   scripts/hosts.sh cut I [RIG]        take host I's link down
#   scripts/hosts.sh heal I [RIG]       bring it back up
#   scripts/hosts.sh down [RIG]         remove everything RIG made (always safe to run)
#   scripts/hosts.sh check              exit 0 if this machine can make hosts, else say why
#
# Each host is a network namespace with one interface, eth0, joined to the
# others by a bridge in a namespace of its own (nothing is added to the
# machine's own network namespace, and addresses exist only inside the
# namespaces made here). A command "on host I" also gets its own hostname
# (hostI), IPC, PID and mount namespaces, a private /dev/shm and a boot id
# of its own, so no shared-memory segment, CMA copy or process watch can
# cross hosts: only TCP over the veth links does. Where the machine has at
# least one core per host, each host also gets cores of its own (its
# commands run under taskset): real hosts do not share cores, and ranks
# that believed their host's cores were theirs would spin on a core that
# another host's ranks need (UCXCOLL_RIG_SHARED_CORES=1 keeps them shared). RIG (default "ucxh")
# prefixes every name, so that concurrent rigs do not meet. Needs root.
#
# extras: a docker-like bridge docker0 (172.17.0.1/16, the same address on
# every host, as docker gives it; a container-like port keeps it up) and
# eth1 (192.168.(100+I).1/24), an interface with an address through which
# no other host can be reached. Backends that offer peers every interface,
# or pick one by its name or order, go wrong on such hosts.

set -euo pipefail

rig_names() {
  RIG="${1:-ucxh}"
  SWITCH="$RIG-sw"
  STATE="/run/$RIG"
}

host_ns() { echo "$RIG-$1"; }

address() { echo "10.231.0.$(($1 + 1))"; }

check() {
  if [ "$(id -u)" != 0 ]; then
    echo "simulated hosts need root (network namespaces)"
    return 1
  fi
  for tool in ip unshare nsenter; do
    command -v "$tool" > /dev/null || { echo "simulated hosts need '$tool'"; return 1; }
  done
  local probe="ucxh-probe-$$"
  if ! ip netns add "$probe" 2> /dev/null; then
    echo "cannot create a network namespace here (ip netns add failed)"
    return 1
  fi
  ip netns del "$probe"
  if ! unshare --uts --ipc --pid --mount --fork --mount-proc true 2> /dev/null; then
    ip netns del "$probe" 2> /dev/null || true
    echo "cannot create UTS/IPC/PID/mount namespaces here (unshare failed)"
    return 1
  fi
}

up() {
  local count="$1"
  rig_names "${2:-}"
  if ip netns list | grep -qw "^$SWITCH"; then
    echo "hosts.sh: rig '$RIG' exists already (scripts/hosts.sh down $RIG)" >&2
    return 1
  fi
  mkdir -p "$STATE"
  ip netns add "$SWITCH"
  ip -n "$SWITCH" link add br0 type bridge
  ip -n "$SWITCH" link set br0 up
  for ((i = 0; i < count; i++)); do
    local ns
    ns="$(host_ns "$i")"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add "$RIG-h$i" netns "$ns" type veth peer name "p$i" netns "$SWITCH"
    ip -n "$ns" link set "$RIG-h$i" name eth0
    ip -n "$ns" addr add "$(address "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$SWITCH" link set "p$i" master br0
    ip -n "$SWITCH" link set "p$i" up
    cat /proc/sys/kernel/random/uuid > "$STATE/boot_id.$i"
  done
  # Cores of its own for each host: an equal share of this process's cores.
  local cores=()
  read -r -a cores <<< "$(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))')"
  local share=$((${#cores[@]} / count))
  for ((i = 0; i < count; i++)); do
    if [ "$share" -ge 1 ] && [ "${UCXCOLL_RIG_SHARED_CORES:-0}" != 1 ]; then
      local list="${cores[*]:$((i * share)):share}"
      echo "${list// /,}" > "$STATE/cores.$i"
    else
      : > "$STATE/cores.$i"
    fi
  done
  echo "$count" > "$STATE/hosts"
}

run_on() {
  local host="$1"
  shift
  rig_names ""
  if [ "$1" != "--" ]; then
    rig_names "$1"
    shift
  fi
  [ "$1" = "--" ] && shift
  [ -f "$STATE/boot_id.$host" ] || { echo "hosts.sh: no host $host in rig '$RIG'" >&2; return 2; }
  # This host's cores, where it has its own.
  local pin=()
  if [ -s "$STATE/cores.$host" ]; then
    pin=(taskset -c "$(cat "$STATE/cores.$host")")
  fi
  # The inner shell runs in the new namespaces, before CMD: a hostname,
  # a private /dev/shm and this host's boot id (bound over the kernel's).
  exec "${pin[@]}" ip netns exec "$(host_ns "$host")" unshare --uts --ipc --pid --mount --fork --mount-proc --propagation private \
    /bin/sh -c 'hostname "host$1" && mount -t tmpfs -o size=1g tmpfs /dev/shm &&
                mount --bind "$2" /proc/sys/kernel/random/boot_id && shift 2 && exec "$@"' \
    sh "$host" "$STATE/boot_id.$host" "$@"
}

extras() {
  local host="$1"
  rig_names "${2:-}"
  local ns
  ns="$(host_ns "$host")"
  ip -n "$ns" link add docker0 type bridge
  ip -n "$ns" addr add 172.17.0.1/16 dev docker0
  ip -n "$ns" link add vethc0 type veth peer name vethc1
  ip -n "$ns" link set vethc0 master docker0
  ip -n "$ns" link set vethc0 up
  ip -n "$ns" link set vethc1 up
  ip -n "$ns" link set docker0 up
  ip -n "$ns" link add eth1 type veth peer name eth1-end
  ip -n "$ns" addr add "192.168.$((100 + host)).1/24" dev eth1
  ip -n "$ns" link set eth1 up
  ip -n "$ns" link set eth1-end up
}

readdress() {
  local host="$1" device="$2" address="$3"
  rig_names "${4:-}"
  ip -n "$(host_ns "$host")" addr flush dev "$device"
  ip -n "$(host_ns "$host")" addr add "$address" dev "$device"
}

set_link() {
  local host="$1" state="$2"
  rig_names "${3:-}"
  ip -n "$SWITCH" link set "p$host" "$state"
}

down() {
  rig_names "${1:-}"
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$RIG-([0-9]+|sw)$" || true); do
    # Whatever still runs on a host goes with it.
    local pids
    pids="$(ip netns pids "$ns" 2> /dev/null || true)"
    [ -n "$pids" ] && kill -9 $pids 2> /dev/null || true
    ip netns del "$ns" 2> /dev/null || true
  done
  rm -rf "$STATE"
}

command="${1:-}"
shift || true
case "$command" in
  up) up "$@" ;;
  run) run_on "$@" ;;
  address) address "$1" ;;
  extras) extras "$@" ;;
  readdress) readdress "$@" ;;
  cut) set_link "$1" down "${2:-}" ;;
  heal) set_link "$1" up "${2:-}" ;;
  down) down "${1:-}" ;;
  check) check ;;
  *)
    sed -n '2,12p' "$0" >&2
    exit 2
    ;;
esac
