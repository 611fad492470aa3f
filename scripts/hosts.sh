#!/usr/bin/env bash
# Simulated hosts on one machine, for tests and benchmarks across hosts.
#
#   scripts/hosts.sh up N [RIG]         make hosts 0..N-1 (prints nothing; fails if RIG exists)
#   scripts/hosts.sh run I [RIG] -- CMD run CMD "on host I" (exit status is CMD's)
#   scripts/hosts.sh address I          host I's address (10.231.0.(I+1))
#   scripts/hosts.sh extras I [RIG]     give host I the interfaces real hosts have besides their link
#   scripts/hosts.sh readdress I DEV ADDR/PREFIX [RIG]  give host I's DEV this address instead
#   scripts/hosts.sh rail I [RIG]       give host I a second link, eth2 (10.232.0.(I+1)), on a second bridge
#   scripts/hosts.sh unrail I [RIG]     take it away again
#   scripts/hosts.sh shape I RATE [RIG] limit each of host I's links to RATE each way (tc tbf: "400mbit")
#   scripts/hosts.sh unshape I [RIG]    lift that limit
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
# rail: hosts with two links between them (two NICs on two switches, what
# multi-rail transfers use). shape: a link slower than the CPU's copies, so
# that what a transfer gets from a link, and from two, can be seen on a
# machine whose veth links are only as fast as its cores.
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
  for tool in ip tc unshare nsenter; do
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

rail() {
  local host="$1"
  rig_names "${2:-}"
  local ns
  ns="$(host_ns "$host")"
  if ! ip -n "$SWITCH" link show br1 > /dev/null 2>&1; then
    ip -n "$SWITCH" link add br1 type bridge
    ip -n "$SWITCH" link set br1 up
  fi
  ip link add "$RIG-r$host" netns "$ns" type veth peer name "q$host" netns "$SWITCH"
  ip -n "$ns" link set "$RIG-r$host" name eth2
  ip -n "$ns" addr add "10.232.0.$((host + 1))/24" dev eth2
  ip -n "$ns" link set eth2 up
  ip -n "$SWITCH" link set "q$host" master br1
  ip -n "$SWITCH" link set "q$host" up
}

unrail() {
  local host="$1"
  rig_names "${2:-}"
  ip -n "$(host_ns "$host")" link del eth2  # its switch end goes with it
}

# Each of host I's links, both ways: the host's end and the switch's.
host_links() {
  local host="$1" ns
  ns="$(host_ns "$host")"
  echo "$ns eth0"
  echo "$SWITCH p$host"
  if ip -n "$ns" link show eth2 > /dev/null 2>&1; then
    echo "$ns eth2"
    echo "$SWITCH q$host"
  fi
}

shape() {
  local host="$1" rate="$2"
  rig_names "${3:-}"
  local ns device
  while read -r ns device; do
    ip netns exec "$ns" tc qdisc replace dev "$device" root tbf rate "$rate" burst 64kb latency 100ms
  done < <(host_links "$host")
}

unshape() {
  local host="$1"
  rig_names "${2:-}"
  local ns device
  while read -r ns device; do
    ip netns exec "$ns" tc qdisc del dev "$device" root 2> /dev/null || true
  done < <(host_links "$host")
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
  rail) rail "$@" ;;
  unrail) unrail "$@" ;;
  shape) shape "$@" ;;
  unshape) unshape "$@" ;;
  cut) set_link "$1" down "${2:-}" ;;
  heal) set_link "$1" up "${2:-}" ;;
  down) down "${1:-}" ;;
  check) check ;;
  *)
    sed -n '2,16p' "$0" >&2
    exit 2
    ;;
esac
