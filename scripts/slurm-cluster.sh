#!/usr/bin/env bash
# A real Slurm cluster for tests and demos: munged, MariaDB + slurmdbd, slurmctld and slurmd,
# everything under one state directory, as root, without systemd.
#
#   scripts/slurm-cluster.sh up     STATE_DIR   start (no-op when healthy, recovers after a crash)
#   scripts/slurm-cluster.sh down   STATE_DIR   stop this cluster's daemons (by pid file), remove
#                                               its namespaces and links
#   scripts/slurm-cluster.sh status STATE_DIR   print each daemon and node; exit 1 if unhealthy
#   scripts/slurm-cluster.sh env    STATE_DIR   print the client environment (SLURM_CONF=...)
#   scripts/slurm-cluster.sh node-kill      STATE_DIR NODE          kill -9 the node's slurmd and
#                                               every process in its network namespace
#   scripts/slurm-cluster.sh node-start     STATE_DIR NODE          start its slurmd again, wait
#   scripts/slurm-cluster.sh node-partition STATE_DIR NODE on|off   on: cut the node off the
#                                               network (its link down); off: heal it (link up;
#                                               a node marked DOWN returns when its slurmd
#                                               registers again, e.g. on `scontrol reconfigure`)
#   scripts/slurm-cluster.sh node-freeze    STATE_DIR NODE on|off   on: SIGSTOP every process of
#                                               the node but its slurmd (its jobs stall, as on a
#                                               hung shared filesystem); off: SIGCONT them
#
# One node (the default): `hargo1` in the root namespace on 127.0.0.1, in both partitions, `cpu`
# (default) and `gpu`; it advertises HARGO_SLURM_CPUS CPUs (8) and two fake `gres/gpu` devices
# (symlinks to /dev/null) so that `--gres=gpu:N` requests schedule.
# Several nodes: HARGO_SLURM_GPU_NODES=g (>= 1) and HARGO_SLURM_CPU_NODES=c (>= 0) start g nodes
# hargo-g1.. (partition `gpu`, fake gres) and c nodes hargo-c1.. (partition `cpu`; with c = 0
# `cpu` shares the gpu nodes), one slurmd per network + UTS + mount namespace on a private /24
# (HARGO_SLURM_SUBNET, default from the port base), TaskPlugin=task/affinity, each node
# HARGO_SLURM_CPUS CPUs (default and at most this machine's). The controller's daemons stay in
# the root namespace; clients need only SLURM_CONF. The node-* actions need this mode; the
# other actions read the mode from STATE_DIR.
# Ports: HARGO_SLURM_PORT_BASE (16817) .. +3. Why each setting: ../docs/slurm.md.
set -euo pipefail

PROG=$(basename "$0")
die() { echo "$PROG: error: $*" >&2; exit 1; }
say() { echo "$PROG: $*" >&2; }

usage() {
    sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
}

[[ $# -ge 1 ]] || { usage >&2; exit 2; }
ACTION=$1
case "$ACTION" in
    -h|--help|help) usage; exit 0 ;;
    up|down|status|env) NARGS=2 ;;
    node-kill|node-start) NARGS=3 ;;
    node-partition|node-freeze) NARGS=4 ;;
    *) echo "$PROG: error: unknown action '$ACTION' (expected up, down, status, env, node-kill," \
            "node-start, node-partition or node-freeze)" >&2; exit 2 ;;
esac
if [[ $ACTION == node-partition || $ACTION == node-freeze ]] && [[ $# -eq 4 && $4 != on \
        && $4 != off ]]; then
    echo "$PROG: error: $ACTION takes on or off, not '$4'" >&2; exit 2
fi
if [[ $# -ne $NARGS ]]; then
    case "$ACTION" in
        node-partition|node-freeze) echo "$PROG: error: $ACTION needs STATE_DIR NODE on|off" >&2 ;;
        node-*) echo "$PROG: error: $ACTION needs STATE_DIR NODE" >&2 ;;
        *) echo "$PROG: error: $ACTION needs STATE_DIR" >&2 ;;
    esac
    exit 2
fi

S=$(realpath -m "$2")
# Unix socket paths are limited to ~107 bytes.
(( ${#S} <= 60 )) || die "state directory path too long (${#S} > 60 characters): $S"

MUNGE_SOCKET=$S/run/munge.socket.2
DB_SOCKET=$S/run/mariadb.sock
CONF=$S/etc/slurm.conf
LAYOUT=$S/etc/layout       # the mode `up` started: what the other actions act on
NETLIST=$S/run/net.list    # namespaces, links and mounts made by `up`, removed by `down`
DB_PASS=hargo-local-only
REAL_CPUS=$(nproc)

is_count() { [[ $1 =~ ^[0-9]+$ ]]; }

if [[ $ACTION == up ]]; then  # the environment says what to start
    BASE=${HARGO_SLURM_PORT_BASE:-16817}
    GPU_NODES=${HARGO_SLURM_GPU_NODES:-0}
    CPU_NODES=${HARGO_SLURM_CPU_NODES:-0}
    is_count "$BASE" && (( BASE >= 1024 && BASE <= 65532 )) \
        || die "HARGO_SLURM_PORT_BASE=$BASE: need a port in 1024..65532"
    is_count "$GPU_NODES" || die "HARGO_SLURM_GPU_NODES=$GPU_NODES: need a count >= 0"
    is_count "$CPU_NODES" || die "HARGO_SLURM_CPU_NODES=$CPU_NODES: need a count >= 0"
    GPU_NODES=$((10#$GPU_NODES)); CPU_NODES=$((10#$CPU_NODES))
    if (( GPU_NODES + CPU_NODES > 0 )); then
        (( GPU_NODES >= 1 )) || die "HARGO_SLURM_GPU_NODES must be >= 1 with" \
            "HARGO_SLURM_CPU_NODES=$CPU_NODES (the gpu partition needs nodes of its own)"
        (( GPU_NODES + CPU_NODES <= 200 )) || die "at most 200 nodes in all"
        CPUS=${HARGO_SLURM_CPUS:-$REAL_CPUS}
        is_count "$CPUS" && (( CPUS >= 1 && CPUS <= REAL_CPUS )) || die "HARGO_SLURM_CPUS=$CPUS:" \
            "a node in a namespace may declare 1..$REAL_CPUS CPUs (task/affinity binds real CPU ids)"
        SUBNET=${HARGO_SLURM_SUBNET:-10.$((BASE / 256 % 256)).$((BASE % 256))}
        [[ $SUBNET =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] \
            || die "HARGO_SLURM_SUBNET=$SUBNET: need the first three numbers of a /24, e.g. 10.77.105"
        MODE=ns
    else
        CPUS=${HARGO_SLURM_CPUS:-8}
        SUBNET=
        MODE=single
    fi
elif [[ -s $LAYOUT ]]; then  # the other actions: what `up` started
    # shellcheck source=/dev/null
    source "$LAYOUT"
else
    BASE=${HARGO_SLURM_PORT_BASE:-16817}; MODE=single; GPU_NODES=0; CPU_NODES=0
    CPUS=${HARGO_SLURM_CPUS:-8}; SUBNET=
fi
CTLD_PORT=$BASE; SLURMD_PORT=$((BASE + 1)); DBD_PORT=$((BASE + 2)); DB_PORT=$((BASE + 3))

layout_text() {
    printf 'MODE=%s\nBASE=%s\nGPU_NODES=%s\nCPU_NODES=%s\nCPUS=%s\nSUBNET=%s\n' \
        "$MODE" "$BASE" "$GPU_NODES" "$CPU_NODES" "$CPUS" "$SUBNET"
}

# ---------------------------------------------------------------- nodes and their network
# Names derive from the port base, so clusters on different bases coexist.
TAG=hargo$BASE              # the controller's link in the root namespace (<= 15 characters)
HUB=$TAG-hub                # the namespace holding the bridge
CTL_IP=${SUBNET:+$SUBNET.1} # the controller's address, on $TAG

nodes() {  # every node name, gpu nodes first
    local i
    if [[ $MODE == single ]]; then echo hargo1; return; fi
    for ((i = 1; i <= GPU_NODES; i++)); do echo "hargo-g$i"; done
    for ((i = 1; i <= CPU_NODES; i++)); do echo "hargo-c$i"; done
}
gpu_nodes() { nodes | grep -v '^hargo-c' || true; }
cpu_nodes() { if ((CPU_NODES > 0)); then nodes | grep '^hargo-c'; else gpu_nodes; fi; }
range() {  # range NAME...: Slurm's hostlist of hargo-g1 hargo-g2 -> hargo-g[1-2]
    local first=$1 last=${*: -1} num
    num=${first##*[!0-9]}
    if (($# == 1)); then echo "$first"; else echo "${first%"$num"}[$num-${last##*[!0-9]}]"; fi
}
netns_of() { echo "$TAG-${1#hargo-}"; }   # hargo-g1 -> hargo19817-g1
ip_of() {  # gpu nodes from .11, cpu nodes after them
    local n=${1#hargo-} k=$(( ${1##*[!0-9]} ))
    [[ $n == g* ]] && echo "$SUBNET.$((10 + k))" || echo "$SUBNET.$((10 + GPU_NODES + k))"
}
is_node() { nodes | grep -qx -- "$1"; }

net_record() { echo "$1 $2" >> "$NETLIST"; }   # before making it: a crash half way is undone
netns_inode() { stat -L -c %i "/run/netns/$1" 2>/dev/null; }
netns_mounted() { awk '$2 == "/run/netns" {f = 1} END {exit !f}' /proc/self/mounts; }

pids_in_netns() {  # pids_in_netns INODE: the live processes in that network namespace
    local link pid
    [[ -n $1 ]] || return 0
    # one find for every process (its ns/net link reads net:[INODE]); zombies are gone already
    while read -r link; do
        pid=${link#/proc/}; pid=${pid%%/*}
        [[ $(proc_state "$pid") == Z ]] || echo "$pid"
    done < <(find /proc/[0-9]*/ns/net -maxdepth 0 -lname "net:\[$1\]" 2>/dev/null || true)
}

proc_state() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1; }  # R, S, T, Z, ...

jobs_in_netns() {  # jobs_in_netns INODE SLURMD_PID: the node's processes but its slurmd
    local pid
    for pid in $(pids_in_netns "$1"); do [[ $pid == "$2" ]] || echo "$pid"; done
}

kill_netns() {  # SIGKILL everything in namespace NETNS until nothing is left (15 s at most)
    local ino pids end=$((SECONDS + 15))
    ino=$(netns_inode "$1") || return 0
    while pids=$(pids_in_netns "$ino"); [[ -n $pids ]]; do
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null || true
        ((SECONDS < end)) || die "processes left in namespace $1 after 15 s: $(echo $pids)"
        sleep 0.1
    done
}

net_up() {
    local taken node ns i
    taken=$(ip -o -4 addr show | awk -v p="$SUBNET." 'index($4, p) == 1 {print $2}')
    [[ -z $taken ]] || die "subnet $SUBNET.0/24 is in use here (on $taken); set HARGO_SLURM_SUBNET"
    [[ ! -e /run/netns/$HUB ]] || die "namespace $HUB exists and is not this cluster's" \
        "(is port base $BASE in use by another state directory?)"
    ip link show "$TAG" >/dev/null 2>&1 && die "link $TAG exists and is not this cluster's" \
        "(is port base $BASE in use by another state directory?)"
    netns_mounted || net_record mount /run/netns   # `ip netns add` mounts it
    net_record netns "$HUB"
    ip netns add "$HUB"
    ip -n "$HUB" link add br0 type bridge
    ip -n "$HUB" link set br0 up
    net_record link "$TAG"
    ip link add "$TAG" type veth peer name up0 netns "$HUB"
    ip -n "$HUB" link set up0 master br0 up
    ip addr add "$CTL_IP/24" dev "$TAG"
    ip link set "$TAG" up
    for node in $(nodes); do
        ns=$(netns_of "$node"); i=${node#hargo-}
        [[ ! -e /run/netns/$ns ]] || die "namespace $ns exists and is not this cluster's"
        net_record netns "$ns"
        ip netns add "$ns"
        ip -n "$HUB" link add "$i" type veth peer name eth0 netns "$ns"
        ip -n "$HUB" link set "$i" master br0 up
        ip -n "$ns" addr add "$(ip_of "$node")/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
    done
}

net_alive() {  # the bridge's namespace and the controller's link, up with its address
    [[ -e /run/netns/$HUB ]] && ip -o -4 addr show dev "$TAG" 2>/dev/null | grep -q "inet $CTL_IP/"
}

net_down() {  # undo what NETLIST records, last first
    local kind name
    [[ -s $NETLIST ]] || { rm -f "$NETLIST"; return 0; }
    while read -r kind name; do
        case "$kind" in
            netns) if [[ -e /run/netns/$name ]]; then
                       kill_netns "$name"
                       ip netns del "$name" 2>/dev/null || die "cannot remove namespace $name"
                   fi ;;
            link) if ip link show "$name" >/dev/null 2>&1; then
                      ip link del "$name" || die "cannot remove link $name"
                  fi ;;
            mount) # only when `up` mounted it and no namespace is left in it
                   if netns_mounted && [[ -z $(ls -A /run/netns 2>/dev/null) ]]; then
                       umount /run/netns || die "cannot unmount /run/netns"
                   fi ;;
        esac
    done < <(tac "$NETLIST")
    rm -f "$NETLIST"
}

# ---------------------------------------------------------------- daemons

# daemon name -> pid file (stop order is the reverse of start order); a node's slurmd: node_pidfile
DAEMONS=(munged mariadbd slurmdbd slurmctld)
pidfile() { echo "$S/run/$1.pid"; }
node_pidfile() { if [[ $MODE == single ]]; then pidfile slurmd; else echo "$S/run/slurmd.$1.pid"; fi; }
node_log() { if [[ $MODE == single ]]; then echo "$S/log/slurmd.log"; else echo "$S/log/slurmd.$1.log"; fi; }

pid_in() { tr -dc '0-9' 2>/dev/null < "$1"; }

alive_file() {  # alive_file FILE NAME: the pid in FILE runs a process called NAME
    local file=$1 pid comm
    [[ -s $file ]] || return 1
    pid=$(pid_in "$file") || return 1
    [[ -n $pid && -r /proc/$pid/comm ]] || return 1
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    [[ $comm == "$2"* ]] || return 1
    # a zombie (exited, not yet reaped by its parent) is not running
    [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]
}
alive() { alive_file "$(pidfile "$1")" "$1"; }
node_alive() { alive_file "$(node_pidfile "$1")" slurmd; }

client_env() { echo "SLURM_CONF=$CONF"; }

check_prereqs() {
    [[ $(id -u) -eq 0 ]] || die "must run as root (the daemons run as root on this test cluster)"
    local missing=() cmd
    for cmd in munged mungekey mariadbd mariadb-install-db mariadb slurmdbd slurmctld slurmd \
               sacctmgr scontrol sinfo; do
        command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
    done
    ((${#missing[@]} == 0)) || die "missing ${missing[*]}; install with: apt-get install -y \
--no-install-recommends slurm-wlm munge slurmdbd mariadb-server"
    if [[ $MODE == ns ]]; then
        for cmd in ip nsenter unshare hostname mount umount; do
            command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
        done
        ((${#missing[@]} == 0)) || die "missing ${missing[*]}; install with: apt-get install -y \
--no-install-recommends iproute2 util-linux hostname"
    fi
}

wait_for() {  # wait_for SECONDS DESCRIPTION LOG COMMAND...
    local limit=$1 what=$2 log=$3; shift 3
    local end=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= end)); then
            say "timed out after ${limit}s waiting for $what; last lines of $log:"
            tail -n 15 "$log" >&2 2>/dev/null || true
            exit 1
        fi
        sleep 0.2
    done
}

write_configs() {
    mkdir -p "$S"/{etc,run,log,spool/ctld,spool/d,db,dev,munge}
    chmod 700 "$S/munge" "$S/etc"
    local mem node nodelines partitions taskplugin ctld acct spool gres_nodes gpus cpus
    mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
    for i in 0 1; do ln -sfn /dev/null "$S/dev/nvidia$i"; done

    if [[ $MODE == single ]]; then
        ctld="localhost(127.0.0.1)"; acct=127.0.0.1; taskplugin=task/none
        spool="SlurmdSpoolDir=$S/spool/d
SlurmdPidFile=$(pidfile slurmd)
SlurmdLogFile=$S/log/slurmd.log"
        nodelines="NodeName=hargo1 NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$mem Gres=gpu:2 State=UNKNOWN"
        partitions="PartitionName=cpu Nodes=hargo1 Default=YES MaxTime=INFINITE State=UP PriorityTier=2
PartitionName=gpu Nodes=hargo1 Default=NO MaxTime=INFINITE State=UP"
        gres_nodes=hargo1
    else
        # slurmctld, slurmdbd and clients in the root namespace, the nodes reach them on $CTL_IP
        ctld="localhost($CTL_IP)"; acct=$CTL_IP
        # every task bound to its cpus_per_task cores, as sites that pin tasks do: a step
        # started without the job's --cpus-per-task (srun 22.05-23.02) then gets one CPU a task
        taskplugin="task/affinity"$'\n'"TaskPluginParam=Cores"
        spool="SlurmdSpoolDir=$S/spool/%n
SlurmdPidFile=$S/run/slurmd.%n.pid
SlurmdLogFile=$S/log/slurmd.%n.log"
        nodelines=
        for node in $(nodes); do
            mkdir -p "$S/spool/$node"
            nodelines+="NodeName=$node NodeAddr=$(ip_of "$node") NodeHostname=$node CPUs=$CPUS"
            nodelines+=" RealMemory=$mem"
            [[ $node == hargo-c* ]] || nodelines+=" Gres=gpu:2"
            nodelines+=" State=UNKNOWN"$'\n'
        done
        # shellcheck disable=SC2046
        gpus=$(range $(gpu_nodes)); cpus=$(range $(cpu_nodes))
        partitions="PartitionName=cpu Nodes=$cpus Default=YES MaxTime=INFINITE State=UP"
        ((CPU_NODES > 0)) || partitions+=" PriorityTier=2"  # sharing the gpu nodes, as above
        partitions+=$'\n'"PartitionName=gpu Nodes=$gpus Default=NO MaxTime=INFINITE State=UP"
        gres_nodes=$gpus
        {   # every node's /etc/hosts (bind-mounted in its mount namespace)
            echo "127.0.0.1 localhost"
            echo "::1 localhost ip6-localhost ip6-loopback"
            echo "$CTL_IP hargo-ctl"
            for node in $(nodes); do echo "$(ip_of "$node") $node"; done
            # torch's store looks the peers up by their IPv4-mapped IPv6 form too
            echo "::ffff:$CTL_IP hargo-ctl"
            for node in $(nodes); do echo "::ffff:$(ip_of "$node") $node"; done
        } > "$S/etc/hosts.tmp"
        chmod 644 "$S/etc/hosts.tmp"
        mv "$S/etc/hosts.tmp" "$S/etc/hosts"
    fi

    cat > "$CONF.tmp" <<EOF
# Generated by scripts/slurm-cluster.sh; edits are overwritten on the next 'up'.
ClusterName=hargo
SlurmctldHost=$ctld
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=10
StateSaveLocation=$S/spool/ctld
$spool
SlurmctldPidFile=$(pidfile slurmctld)
SlurmctldLogFile=$S/log/slurmctld.log
ProctrackType=proctrack/linuxproc
TaskPlugin=$taskplugin
JobAcctGatherType=jobacct_gather/linux
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$acct
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$MUNGE_SOCKET
JobCompType=jobcomp/none
MpiDefault=none
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,bf_interval=1,sched_interval=5
MaxArraySize=100001
MaxJobCount=100000
MinJobAge=300
ReturnToService=2
SlurmdTimeout=30
KillWait=5
MailProg=/bin/true
GresTypes=gpu
${nodelines%$'\n'}
$partitions
EOF
    mv "$CONF.tmp" "$CONF"

    cat > "$S/etc/gres.conf" <<EOF
AutoDetect=off
NodeName=$gres_nodes Name=gpu File=$S/dev/nvidia[0-1]
EOF

    (umask 077; cat > "$S/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdAddr=127.0.0.1
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$S/log/slurmdbd.log
PidFile=$(pidfile slurmdbd)
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
    )
    chmod 600 "$S/etc/slurmdbd.conf"
    layout_text > "$LAYOUT"
}

start_munge() {
    alive munged && return 0
    if [[ ! -s $S/munge/munge.key ]]; then
        mungekey --create --keyfile="$S/munge/munge.key" --force >/dev/null
    fi
    chmod 400 "$S/munge/munge.key"
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    munged --force --socket="$MUNGE_SOCKET" --key-file="$S/munge/munge.key" \
        --pid-file="$(pidfile munged)" --log-file="$S/log/munged.log" \
        --seed-file="$S/munge/munged.seed" </dev/null >>"$S/log/munged.log" 2>&1 9>&-
    wait_for 15 munged "$S/log/munged.log" test -S "$MUNGE_SOCKET"
}

start_mariadb() {
    alive mariadbd && return 0
    if [[ ! -d $S/db/data/mysql ]]; then
        mariadb-install-db --no-defaults --datadir="$S/db/data" --user=root \
            --auth-root-authentication-method=socket --skip-test-db >>"$S/log/mariadb.log" 2>&1 \
            || { tail -n 15 "$S/log/mariadb.log" >&2; die "mariadb-install-db failed"; }
    fi
    rm -f "$DB_SOCKET"
    setsid mariadbd --no-defaults --datadir="$S/db/data" --socket="$DB_SOCKET" --port="$DB_PORT" \
        --bind-address=127.0.0.1 --skip-name-resolve --pid-file="$(pidfile mariadbd)" \
        --innodb-buffer-pool-size=128M --user=root --log-error="$S/log/mariadb.log" \
        </dev/null >>"$S/log/mariadb.log" 2>&1 9>&- &
    wait_for 30 mariadbd "$S/log/mariadb.log" mariadb --no-defaults -S "$DB_SOCKET" -u root -e "SELECT 1"
    mariadb --no-defaults -S "$DB_SOCKET" -u root -e "
        CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
        FLUSH PRIVILEGES;"
}

start_slurmdbd() {
    alive slurmdbd && return 0
    # slurmdbd has no -f: it reads slurmdbd.conf next to $SLURM_CONF.
    SLURM_CONF=$CONF slurmdbd </dev/null >>"$S/log/slurmdbd.log" 2>&1 9>&- \
        || { tail -n 15 "$S/log/slurmdbd.log" >&2; die "slurmdbd failed to start"; }
    wait_for 30 slurmdbd "$S/log/slurmdbd.log" env SLURM_CONF="$CONF" sacctmgr -n list cluster
}

start_slurmctld() {
    alive slurmctld && return 0
    slurmctld -f "$CONF" </dev/null >>"$S/log/slurmctld.log" 2>&1 9>&- \
        || { tail -n 15 "$S/log/slurmctld.log" >&2; die "slurmctld failed to start"; }
    wait_for 30 slurmctld "$S/log/slurmctld.log" env SLURM_CONF="$CONF" scontrol ping
    # `scontrol ping` answers "DOWN" with exit 0 on some versions: look at the text too.
    wait_for 30 slurmctld "$S/log/slurmctld.log" ctld_up
}

ctld_up() { SLURM_CONF=$CONF scontrol ping 2>/dev/null | grep -q "is UP"; }

start_slurmd() {  # start_slurmd NODE
    local node=$1 log
    node_alive "$node" && return 0
    log=$(node_log "$node")
    if [[ $MODE == single ]]; then
        SLURM_CONF=$CONF slurmd -f "$CONF" -N "$node" </dev/null >>"$log" 2>&1 9>&- \
            || { tail -n 15 "$log" >&2; die "slurmd failed to start"; }
        return 0
    fi
    # nsenter, not `ip netns exec`: that remounts /sys, and slurmd then finds no cgroup tree.
    # unshare: the node's own hostname, and its /etc/hosts bound over the machine's in its own
    # mount namespace only (propagation private: the machine's /etc/hosts is untouched).
    SLURM_CONF=$CONF nsenter --net="/run/netns/$(netns_of "$node")" unshare --uts --mount \
        sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts && exec slurmd -f "$3" -N "$1"' \
        sh "$node" "$S/etc/hosts" "$CONF" </dev/null >>"$log" 2>&1 9>&- \
        || { tail -n 15 "$log" >&2; die "slurmd of $node failed to start"; }
}

node_state() { SLURM_CONF=$CONF sinfo -h -n "$1" -o %T 2>/dev/null | head -n 1; }

node_ready() {  # node_ready NODE
    local state
    state=$(node_state "$1")
    case "$state" in
        idle*|mixed*|allocated*|completing*) return 0 ;;
        drain*|inval*|down*)
            SLURM_CONF=$CONF scontrol update NodeName="$1" State=RESUME >/dev/null 2>&1 || true
            return 1 ;;
        *) return 1 ;;
    esac
}

slurmd_started() {  # the node's SlurmdStartTime in seconds since the epoch (0: none)
    local t
    t=$(SLURM_CONF=$CONF scontrol show node "$1" 2>/dev/null \
        | grep -o 'SlurmdStartTime=[^ ]*' | cut -d= -f2)
    date -d "$t" +%s 2>/dev/null || echo 0
}
clock_past() { (( $(date +%s) > $1 )); }
registered_after() { (( $(slurmd_started "$1") > $2 )); }

nodes_ready() { local n; for n in $(nodes); do node_ready "$n" || return 1; done; }

healthy() {
    local d n
    if [[ -s $LAYOUT ]]; then
        [[ $(cat "$LAYOUT") == "$(layout_text)" ]] || return 1
    else
        [[ $MODE == single ]] || return 1  # a cluster started before layouts were recorded
    fi
    for d in "${DAEMONS[@]}"; do alive "$d" || return 1; done
    [[ $MODE == single ]] || net_alive || return 1
    for n in $(nodes); do
        node_alive "$n" || return 1
        [[ $MODE == single || -e /run/netns/$(netns_of "$n") ]] || return 1
    done
    ctld_up && nodes_ready
}

stop_pid() {  # stop_pid FILE NAME: TERM, up to 10 s, then KILL
    local file=$1 name=$2 pid n
    if alive_file "$file" "$name"; then
        pid=$(pid_in "$file") || return 0
        kill -TERM "$pid" 2>/dev/null || true
        for ((n = 0; n < 100; n++)); do alive_file "$file" "$name" || break; sleep 0.1; done
        if alive_file "$file" "$name"; then kill -KILL "$pid" 2>/dev/null || true; sleep 0.2; fi
    fi
    rm -f "$file"
}

stop_all() {  # every node's slurmd (both modes' pid files), then the daemons, then the network
    local i file
    for file in "$S"/run/slurmd.pid "$S"/run/slurmd.*.pid; do
        [[ -e $file ]] && stop_pid "$file" slurmd
    done
    for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
        stop_pid "$(pidfile "${DAEMONS[i]}")" "${DAEMONS[i]}"
    done
    net_down  # kills what is left in the nodes' namespaces (their steps and tasks) first
}

need_node() {  # need_node NODE: a node of this cluster's namespaced mode
    [[ $MODE == ns ]] || die "$ACTION needs a cluster started with HARGO_SLURM_GPU_NODES (this" \
        "one is a single node in the root namespace)"
    is_node "$1" || die "no node '$1' in this cluster (nodes: $(nodes | paste -sd ' '))"
    [[ -e /run/netns/$(netns_of "$1") ]] || die "node $1 has no namespace: run 'up' first"
}

case "$ACTION" in
    env)
        client_env ;;
    status)
        rc=0
        for d in "${DAEMONS[@]}"; do
            if alive "$d"; then
                printf '%-10s running (pid %s)\n' "$d" "$(pid_in "$(pidfile "$d")")"
            else
                printf '%-10s stopped\n' "$d"; rc=1
            fi
        done
        if [[ $MODE == ns ]]; then
            if net_alive; then
                printf '%-10s %s\n' network "link $TAG $CTL_IP/24, bridge in namespace $HUB"
            else
                printf '%-10s %s\n' network "missing (link $TAG, namespace $HUB)"; rc=1
            fi
        fi
        up=0; ctld_up && up=1
        for n in $(nodes); do
            if node_alive "$n"; then
                what="slurmd pid $(pid_in "$(node_pidfile "$n")")"
            else
                what="slurmd stopped"; rc=1
            fi
            if [[ $MODE == ns ]]; then
                ns=$(netns_of "$n")
                if [[ -e /run/netns/$ns ]]; then
                    link=$(ip -n "$ns" -o link show eth0 2>/dev/null | grep -q 'state UP' \
                           && echo up || echo down)
                    what+=", netns $ns, $(ip_of "$n") link $link"
                else
                    what+=", no netns"; rc=1
                fi
            fi
            state=$( ((up)) && node_state "$n" || echo "?")
            printf '%-10s %s\n' node "$n ${state:-?} ($what)"
            if ((up)); then node_ready "$n" || rc=1; fi
        done
        ((up)) || rc=1
        client_env
        exit $rc ;;
    down)
        stop_all
        say "stopped the cluster in $S" ;;
    node-kill)
        need_node "$3"
        file=$(node_pidfile "$3")
        if node_alive "$3"; then kill -KILL "$(pid_in "$file")" 2>/dev/null || true; fi
        kill_netns "$(netns_of "$3")"
        say "killed node $3 (its slurmd and every process in namespace $(netns_of "$3"))" ;;
    node-start)
        need_node "$3"
        if node_alive "$3"; then
            say "node $3 runs already (slurmd pid $(pid_in "$(node_pidfile "$3")"))"; exit 0
        fi
        # the controller may still list the killed node as idle: wait for this slurmd's own
        # registration (its start time, to the second, after the previous one's)
        before=$(slurmd_started "$3")
        wait_for 5 "the clock to pass $before" /dev/null clock_past "$before"
        start_slurmd "$3"
        wait_for 60 "node $3 to register" "$(node_log "$3")" registered_after "$3" "$before"
        wait_for 60 "node $3 to be idle" "$(node_log "$3")" node_ready "$3"
        say "node $3 is up" ;;
    node-partition)
        need_node "$3"
        ns=$(netns_of "$3")
        case "$4" in
            on) ip -n "$ns" link set eth0 down
                say "node $3 is cut off (link eth0 down in $ns)" ;;
            off) ip -n "$ns" link set eth0 up
                 ip -n "$ns" -4 addr show dev eth0 | grep -q "inet $(ip_of "$3")/" \
                     || ip -n "$ns" addr add "$(ip_of "$3")/24" dev eth0
                 say "node $3 is reachable again (link eth0 up in $ns)" ;;
        esac ;;
    node-freeze)
        need_node "$3"
        ino=$(netns_inode "$(netns_of "$3")")
        daemon=$(pid_in "$(node_pidfile "$3")" 2>/dev/null || true)
        case "$4" in
            on) # until every one is stopped: a process may fork while the others stop
                end=$((SECONDS + 15))
                while pids=$(for pid in $(jobs_in_netns "$ino" "$daemon"); do
                                 [[ $(proc_state "$pid") == [Tt] ]] || echo "$pid"
                             done); [[ -n $pids ]]; do
                    # shellcheck disable=SC2086
                    kill -STOP $pids 2>/dev/null || true
                    ((SECONDS < end)) || die "processes of node $3 still running after 15 s:" \
                        "$(echo $pids)"
                    sleep 0.05
                done
                say "node $3 is frozen (every process in its namespace stopped but its slurmd)" ;;
            off) pids=$(jobs_in_netns "$ino" "$daemon")
                 # shellcheck disable=SC2086
                 [[ -z $pids ]] || kill -CONT $pids 2>/dev/null || true
                 say "node $3 runs again (its processes continued)" ;;
        esac ;;
    up)
        check_prereqs
        mkdir -p "$S/run" 2>/dev/null || die "cannot create state directory $S"
        exec 9>"$S/run/up.lock"
        flock -w 120 9 || die "another 'up' on $S holds the lock for over 120 s"
        if healthy; then
            client_env
            exit 0
        fi
        # a partial or crashed cluster, or another layout: restart every daemon from its saved
        # state
        stop_all  # pid files and net.list say what the last 'up' started, whatever its layout
        rm -f "$LAYOUT"
        [[ $MODE == single ]] || net_up
        write_configs
        start_munge
        start_mariadb
        start_slurmdbd
        start_slurmctld
        for n in $(nodes); do start_slurmd "$n"; done
        for n in $(nodes); do
            wait_for 60 "node $n to be idle" "$(node_log "$n")" node_ready "$n"
        done
        if [[ $MODE == single ]]; then
            say "cluster up in $S (partitions cpu, gpu; node hargo1: $CPUS CPUs, 2 gpu gres)"
        else
            say "cluster up in $S: partition gpu on $(range $(gpu_nodes)) (2 gpu gres each)," \
                "cpu on $(range $(cpu_nodes)); $CPUS CPUs a node; subnet $SUBNET.0/24"
        fi
        client_env ;;
esac
