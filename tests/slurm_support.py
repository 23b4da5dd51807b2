"""Real Slurm clusters for tests: Debian's slurm-wlm and munge, run from a temp dir.

``from .slurm_support import slurm_cluster`` in a test module gives its tests a module-scoped
fixture that installs slurm-wlm and munge if they are missing (scripts/install-slurm.sh, as root),
writes a munge key and a minimal slurm.conf into a fresh temp dir, starts munged, slurmctld and
slurmd in the foreground (children of pytest, each stopped by pid on teardown) and waits until the
node is idle. Nothing outside the temp dir is used: no /etc/slurm, /etc/munge, /run/munge, no
systemd, and free TCP ports, so two clusters (two pytest runs) can run side by side.

``slurm_cluster_2`` is the same with two compute nodes, each a network namespace of its own
(``ip netns``, iproute2) with its own address, host name and slurmd; slurmctld and every client
command (sbatch, srun, recipectl) run in a third namespace, the login node, which holds the bridge
the nodes hang off. Names resolve through a hosts file in the temp dir, bind-mounted over
/etc/hosts inside each namespace only. Traffic stays on those test-made addresses; the host's own
network (and its loopback, where other tests run engines on fixed ports) is not touched, and the
namespaces are deleted on teardown.

When Slurm cannot be installed or started the fixture skips, with the reason and the daemon logs;
under CI or --require-all it fails instead (tests/requirements.py decides).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .ports import free_ports
from .requirements import SLURM_INSTALL, require

ROOT = Path(__file__).resolve().parent.parent
INSTALL_SCRIPT = ROOT / "scripts" / "install-slurm.sh"
CLIENTS = ("sbatch", "srun", "squeue", "sinfo", "scancel", "scontrol")
DAEMONS = ("munged", "munge", "slurmctld", "slurmd")
NETWORK = ("ip", "nsenter", "unshare")  # several nodes: a network namespace each (iproute2, util-linux)
# seconds for munged + slurmctld + slurmd to bring the node to idle
START_TIMEOUT = float(os.environ.get("RECIPECTL_SLURM_START_TIMEOUT", "60"))
STOP_TIMEOUT = 20.0  # seconds for one daemon to exit after SIGTERM, before SIGKILL
TERMINAL_STATES = {
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "TIMEOUT",
}
_SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin", "/bin"])


class SlurmUnavailable(RuntimeError):
    """Slurm could not be installed or started; the message says why (with logs)."""


def _which(name: str) -> str | None:
    return shutil.which(name, path=_SEARCH_PATH)


def _unavailable(msg: str) -> None:
    require(False, f"a Slurm cluster ({msg})", SLURM_INSTALL)


def ensure_installed(extra: Sequence[str] = ()) -> dict[str, str]:
    """Paths of the Slurm and munge programs (and of `extra`: NETWORK for several nodes),
    installing slurm-wlm + munge (+ iproute2, util-linux) first if needed."""
    missing = [b for b in (*CLIENTS, *DAEMONS, *extra) if _which(b) is None]
    if missing:
        if os.geteuid() != 0:
            raise SlurmUnavailable(
                f"{', '.join(missing)} not found and not root: run `sudo bash {INSTALL_SCRIPT.relative_to(ROOT)}`"
            )
        try:
            proc = subprocess.run(["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            raise SlurmUnavailable(f"{INSTALL_SCRIPT.name} took over 900 s") from None
        if proc.returncode != 0:
            raise SlurmUnavailable(
                f"{INSTALL_SCRIPT.name} failed (exit {proc.returncode}):\n{_tail(proc.stdout + proc.stderr)}"
            )
        missing = [b for b in (*CLIENTS, *DAEMONS, *extra) if _which(b) is None]
        if missing:
            raise SlurmUnavailable(f"{', '.join(missing)} still missing after {INSTALL_SCRIPT.name}")
    return {b: _which(b) for b in (*CLIENTS, *DAEMONS, *extra)}  # type: ignore[misc]


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _die_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _node_hardware(slurmd: str) -> dict[str, int]:
    """CPUs and topology as slurmd itself counts them (`slurmd -C`); RealMemory from /proc/meminfo
    minus a margin, so the node never registers with less memory than configured."""
    hw: dict[str, int] = {}
    try:
        out = subprocess.run([slurmd, "-C"], capture_output=True, text=True, timeout=30).stdout
        first = out.splitlines()[0] if out else ""
        for key in ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore"):
            m = re.search(rf"\b{key}=(\d+)", first)
            if m:
                hw[key] = int(m.group(1))
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    if "CPUs" not in hw:  # no topology: CPUs alone is a valid node line
        hw = {"CPUs": len(os.sched_getaffinity(0))}
    mem_kb = int(re.search(r"^MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text(), re.M).group(1))
    mem_mb = mem_kb // 1024
    hw["RealMemory"] = max(1, mem_mb - max(512, mem_mb // 10))
    return hw


@dataclass(frozen=True)
class Node:
    """One compute node: its Slurm name, the address slurmctld and the other nodes reach it at,
    and its network namespace (None: the host's own network, the single-node cluster)."""

    name: str
    addr: str
    netns: str | None = None


def write_slurm_conf(
    path: Path,
    *,
    cluster: str,
    nodes: Sequence[Node],
    hw: dict[str, int],
    base: Path,
    munge_socket: Path,
    ctld_port: int,
    slurmd_port: int,
    ctld: tuple[str, str] | None = None,
    extra: str = "",
    node_options: str = "",
) -> str:
    """ctld: (name, address) of slurmctld's host; by default the first node's."""
    node_hw = " ".join([*(f"{k}={v}" for k, v in hw.items()), *node_options.split()])
    ctld_name, ctld_addr = ctld or (nodes[0].name, nodes[0].addr)
    several = len(nodes) > 1
    # one slurmd per node, all writing under base: their files are told apart by node name (%n)
    per_node = "-%n" if several else ""
    node_lines = "\n".join(f"NodeName={n.name} NodeAddr={n.addr} {node_hw} State=UNKNOWN" for n in nodes)
    # Several nodes: a node that stops answering is DOWN within seconds, not 15 minutes, so the
    # tests can kill one and see its job end (NODE_FAIL)
    slurmd_timeout = 20 if several else 900
    text = f"""\
# Generated by tests/slurm_support.py: a {len(nodes)}-node test cluster, everything under {base}
ClusterName={cluster}
SlurmctldHost={ctld_name}({ctld_addr})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool{"/%n" if several else ""}
SlurmctldPidFile={base}/run/slurmctld.pid
SlurmdPidFile={base}/run/slurmd{per_node}.pid
SlurmctldLogFile={base}/log/slurmctld.log
SlurmdLogFile={base}/log/slurmd{per_node}.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmctldTimeout=120
SlurmdTimeout={slurmd_timeout}
MessageTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=300
Waittime=0
{node_lines}
PartitionName=debug Nodes={",".join(n.name for n in nodes)} Default=YES MaxTime=INFINITE State=UP
"""
    if extra:
        text += extra.rstrip("\n") + "\n"
    path.write_text(text)
    return text


# ------------------------------------------------------------------------ the namespaced network
SUBNET = "10.77.0"  # inside the test's own namespaces only: it cannot clash with the host's routes
LOGIN = "login"  # the login node's name: slurmctld and the client commands run there
# In a namespace: its own host name (a new UTS namespace) and the cluster's hosts file over
# /etc/hosts, in a private mount namespace (nothing propagates back to the host). nsenter, not
# `ip netns exec`: the latter remounts /sys, which hides /sys/fs/cgroup, and slurmd needs it.
_NS_WRAPPER = 'hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"'


@dataclass
class Network:
    """The login namespace (with the bridge) and one namespace per node, all named <tag>-..."""

    tag: str
    hosts_file: Path
    login_ns: str
    login_addr: str
    nodes: list[Node]
    ip: str = "ip"
    nsenter: str = "nsenter"
    unshare: str = "unshare"

    @property
    def namespaces(self) -> list[str]:
        return [self.login_ns, *(n.netns for n in self.nodes if n.netns)]

    def wrap(self, netns: str, hostname: str, args: Sequence[str]) -> list[str]:
        return [
            self.nsenter,
            f"--net=/run/netns/{netns}",
            "--",
            self.unshare,
            "--mount",
            "--uts",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            _NS_WRAPPER,
            "sh",
            hostname,
            str(self.hosts_file),
            *args,
        ]

    def pids(self, netns: str) -> list[int]:
        """Processes in the namespace (their /proc/PID/ns/net is its inode), this one excepted."""
        try:
            want = os.stat(f"/run/netns/{netns}")
        except OSError:
            return []
        found = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) == os.getpid():
                continue
            try:
                st = os.stat(d / "ns" / "net")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == (want.st_dev, want.st_ino):
                found.append(int(d.name))
        return found

    def delete(self) -> list[str]:
        """Kill what still runs in the namespaces, then delete them; return the problems."""
        problems = []
        for ns in self.namespaces:
            left = self.pids(ns)
            if left:
                problems.append(f"processes left in namespace {ns} (killed): {left}")
                for pid in left:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        for ns in reversed(self.namespaces):
            deadline = time.monotonic() + 10
            while self.pids(ns) and time.monotonic() < deadline:
                time.sleep(0.1)
            r = subprocess.run([self.ip, "netns", "del", ns], capture_output=True, text=True, timeout=30)
            if r.returncode != 0 and os.path.exists(f"/run/netns/{ns}"):
                problems.append(f"ip netns del {ns}: {r.stderr.strip()}")
        return problems


NS_PREFIX = "rctl"  # namespaces are named rctl<pid of the pytest that made them>-login, -node1, ...


def _delete_stale_networks(ip: str) -> None:
    """Namespaces a test run left behind when it was killed before its teardown (SIGKILL, a
    timeout): those whose pytest is gone are deleted, with anything still running in them."""
    try:
        names = os.listdir("/run/netns")
    except OSError:
        return
    stale: dict[str, list[str]] = {}
    for name in names:
        m = re.fullmatch(rf"{NS_PREFIX}(\d+)-(login|node\d+)", name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            stale.setdefault(m.group(1), []).append(name)
    for pid, namespaces in stale.items():
        login = next((n for n in namespaces if n.endswith("-login")), namespaces[0])
        net = Network(
            tag=f"{NS_PREFIX}{pid}",
            hosts_file=Path("/nonexistent"),
            login_ns=login,
            login_addr="",
            nodes=[Node(n, "", n) for n in namespaces if n != login],
            ip=ip,
        )
        net.delete()


def make_network(n_nodes: int, base: Path) -> Network:
    """A bridge in a login namespace, and n_nodes namespaces on it (node1 .. nodeN at .11, .12 ...)."""
    ip, nsenter, unshare = _which("ip"), _which("nsenter"), _which("unshare")
    if ip is None or nsenter is None or unshare is None:
        raise SlurmUnavailable(
            "ip (iproute2), nsenter or unshare (util-linux) not found: apt-get install iproute2 util-linux"
        )
    if os.geteuid() != 0:
        raise SlurmUnavailable("network namespaces need root (ip netns add)")
    _delete_stale_networks(ip)
    tag = f"{NS_PREFIX}{os.getpid()}"
    net = Network(
        tag=tag,
        hosts_file=base / "etc" / "hosts",
        login_ns=f"{tag}-login",
        login_addr=f"{SUBNET}.1",
        ip=ip,
        nsenter=nsenter,
        unshare=unshare,
        nodes=[Node(f"node{i}", f"{SUBNET}.{10 + i}", f"{tag}-node{i}") for i in range(1, n_nodes + 1)],
    )
    lines = ["127.0.0.1 localhost", f"{net.login_addr} {LOGIN}", *(f"{n.addr} {n.name}" for n in net.nodes)]
    net.hosts_file.write_text("\n".join(lines) + "\n")
    cmds = [
        ["netns", "add", net.login_ns],
        ["-n", net.login_ns, "link", "set", "lo", "up"],
        ["-n", net.login_ns, "link", "add", "br0", "type", "bridge"],
        ["-n", net.login_ns, "addr", "add", f"{net.login_addr}/24", "dev", "br0"],
        ["-n", net.login_ns, "link", "set", "br0", "up"],
    ]
    for i, n in enumerate(net.nodes, 1):
        cmds += [
            ["netns", "add", n.netns],
            ["-n", n.netns, "link", "set", "lo", "up"],
            # eth0 in the node, veth<i> on the login node's bridge
            ["-n", net.login_ns, "link", "add", f"veth{i}", "type", "veth", "peer", "name", "eth0", "netns", n.netns],
            ["-n", net.login_ns, "link", "set", f"veth{i}", "master", "br0", "up"],
            ["-n", n.netns, "addr", "add", f"{n.addr}/24", "dev", "eth0"],
            ["-n", n.netns, "link", "set", "eth0", "up"],
            # a default route, as a real node has: vLLM finds its own address by routing
            # towards a public one (get_ip, a UDP connect that sends nothing); the login
            # namespace routes nowhere further, so nothing leaves the test network
            ["-n", n.netns, "route", "add", "default", "via", net.login_addr],
        ]
    for cmd in cmds:
        r = subprocess.run([ip, *cmd], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            problems = net.delete()
            raise SlurmUnavailable(
                f"ip {' '.join(cmd)} failed: {r.stderr.strip()}" + "".join(f"\n{p}" for p in problems)
            )
    return net


@dataclass
class SlurmCluster:
    env: dict[str, str]  # add to the environment of commands that use this cluster
    conf_dir: Path  # holds slurm.conf
    node: str  # the first node's name (on one node: this host's short hostname)
    base: Path  # the temp dir everything lives in
    bins: dict[str, str] = field(repr=False, default_factory=dict)
    procs: dict[str, subprocess.Popen] = field(repr=False, default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    net: Network | None = None  # several nodes: the namespaces they run in

    @property
    def conf(self) -> Path:
        return self.conf_dir / "slurm.conf"

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def address(self, node: str) -> str:
        return next(n.addr for n in self.nodes if n.name == node)

    def full_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """os.environ without any SLURM_* of an enclosing job, plus this cluster's env."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        return {**base, **self.env, **(extra or {})}

    def client_argv(self, args: Sequence[str]) -> list[str]:
        """A command as a client of this cluster runs it: on the login node when there is one."""
        args = list(args)
        if args and "/" not in args[0] and args[0] in self.bins:
            args[0] = self.bins[args[0]]
        return self.net.wrap(self.net.login_ns, LOGIN, args) if self.net else args

    def run(
        self,
        args: Sequence[str],
        *,
        check: bool = False,
        timeout: float = 60,
        cwd: str | Path | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command (sbatch, squeue, ...) against this cluster; output captured."""
        argv = self.client_argv(args)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=self.full_env(env))
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
        return proc

    # -- conveniences for tests ------------------------------------------------------------
    def sbatch(self, *args: str, cwd: str | Path | None = None, env: dict[str, str] | None = None) -> str:
        """Submit (the job gets this environment, plus env); return the job id."""
        out = self.run(["sbatch", "--parsable", *args], check=True, cwd=cwd, env=env).stdout.strip()
        return out.split(";")[0]

    def job_state(self, job_id: str) -> str | None:
        """The job's state (RUNNING, COMPLETED, ...) while slurmctld remembers it, else None."""
        out = self.run(["scontrol", "show", "job", "-o", job_id]).stdout
        m = re.search(r"\bJobState=(\S+)", out)
        return m.group(1) if m else None

    def job_info(self, job_id: str) -> dict[str, str]:
        out = self.run(["scontrol", "show", "job", "-o", job_id]).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def node_state(self, node: str) -> str:
        """sinfo's short state of one node (idle, alloc, down*, ...)."""
        return self.run(["sinfo", "-h", "-N", "-n", node, "-o", "%t"], timeout=120).stdout.strip()

    def wait_running(self, job_id: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while (state := self.job_state(job_id)) != "RUNNING":
            if state in TERMINAL_STATES or time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} is {state}, not RUNNING, after {timeout} s\n{self.logs()}")
            time.sleep(0.2)

    def wait_gone(self, job_id: str, timeout: float = 60) -> str | None:
        """Poll squeue until the job has left the queue; return its final state."""
        deadline = time.monotonic() + timeout
        while True:
            proc = self.run(["squeue", "-h", "-j", job_id, "-o", "%T"])
            out = proc.stdout.strip()
            if proc.returncode == 0 and (not out or out in TERMINAL_STATES):
                return self.job_state(job_id)
            if proc.returncode != 0 and "Invalid job id" in proc.stderr:
                return None  # finished long enough ago that slurmctld forgot it
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"job {job_id} still {out or proc.stderr.strip()!r} after {timeout} s\n{self.logs()}"
                )
            time.sleep(0.2)

    def steps(self, job_id: str) -> list[str]:
        """Names of the job's running steps (squeue -s)."""
        out = self.run(["squeue", "-h", "-s", "-j", job_id, "-o", "%j"]).stdout
        return out.split()

    def step_nodes(self, job_id: str) -> dict[str, str]:
        """Each running step's name -> the node it runs on (squeue -s), the batch step left out."""
        out = self.run(["squeue", "-h", "-s", "-j", job_id, "-o", "%j %N"]).stdout
        steps = dict(line.split(None, 1) for line in out.splitlines() if len(line.split()) == 2)
        steps.pop("batch", None)
        return steps

    def logs(self, lines: int = 30) -> str:
        """The tail of each daemon's log (its stdout/stderr where it has no log file)."""
        parts = []
        log_dir = self.base / "log"
        names = ["munged", "slurmctld"]
        names += [f"slurmd-{n.name}" for n in self.nodes] if self.net else ["slurmd"]
        for name in names:
            for f in (log_dir / f"{name}.log", log_dir / f"{name}.out"):
                if f.is_file() and f.stat().st_size:
                    text = _tail(f.read_text(errors="replace"), lines)
                    parts.append(f"--- {f} (last {lines} lines) ---\n{text}")
                    break
        return "\n".join(parts)

    # -- lifecycle ---------------------------------------------------------------------------
    def _spawn(self, name: str, args: list[str]) -> None:
        out = open(self.base / "log" / f"{name}.out", "ab")
        try:
            # Own session: a ^C in the terminal reaches pytest (which tears down), not the
            # daemons. SIGTERM when pytest dies without tearing down (killed, timed out).
            # In a namespace the pid stays the daemon's: ip, unshare and sh each exec the next.
            self.procs[name] = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.full_env(),
                cwd=self.base,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        finally:
            out.close()

    def _check_alive(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise SlurmUnavailable(f"{name} exited with {p.returncode} during start-up\n{self.logs()}")

    def _slurmd_name(self, node: Node) -> str:
        return f"slurmd-{node.name}" if self.net else "slurmd"

    def start_slurmd(self, node: Node) -> None:
        args = [self.bins["slurmd"], "-D", "-N", node.name]
        if self.net and node.netns:
            args = self.net.wrap(node.netns, node.name, args)
        self._spawn(self._slurmd_name(node), args)

    def start(self, timeout: float = START_TIMEOUT) -> None:
        t0 = time.monotonic()
        deadline = t0 + timeout
        munge_dir = self.base / "munge"
        sock = munge_dir / "munge.socket.2"
        # munged serves a Unix socket (a path, not the network): the namespaces all reach it
        self._spawn(
            "munged",
            [
                self.bins["munged"],
                "--foreground",
                f"--key-file={munge_dir / 'munge.key'}",
                f"--socket={sock}",
                f"--pid-file={munge_dir / 'munged.pid'}",
                f"--log-file={self.base / 'log' / 'munged.log'}",
                f"--seed-file={munge_dir / 'munged.seed'}",
            ],
        )
        while True:  # munged answers
            self._check_alive()
            probe = subprocess.run([self.bins["munge"], "-S", str(sock), "-n"], capture_output=True, timeout=10)
            if probe.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise SlurmUnavailable(f"munged did not answer on {sock} in {timeout:.0f} s\n{self.logs()}")
            time.sleep(0.1)
        self._spawn("slurmctld", self.client_argv([self.bins["slurmctld"], "-D", "-i"]))
        for node in self.nodes:
            self.start_slurmd(node)
        self.wait_idle(deadline)

    def wait_idle(self, deadline: float) -> None:
        """Until every node has registered and is idle (or deadline, a time.monotonic())."""
        states: dict[str, str] = {}
        while True:
            self._check_alive()
            proc = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=120)
            states = dict(line.split(None, 1) for line in proc.stdout.splitlines() if len(line.split()) == 2)
            if all(states.get(n) == "idle" for n in self.node_names):
                return
            if time.monotonic() > deadline:
                node = self.run(["scontrol", "show", "node"], timeout=120)
                raise SlurmUnavailable(
                    f"nodes not idle in time (sinfo: {states!r} {proc.stderr.strip()})\n"
                    f"{node.stdout}{node.stderr}\n{self.logs()}"
                )
            time.sleep(0.25)

    def kill_node(self, name: str) -> list[int]:
        """What a node failure looks like to Slurm: the node's slurmd and every process on the node
        (its job steps) killed at once (SIGKILL). Only on a namespaced node; returns the pids."""
        node = next(n for n in self.nodes if n.name == name)
        assert self.net is not None and node.netns, "kill_node needs a namespaced node"
        victims = self.net.pids(node.netns)
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p = self.procs.get(self._slurmd_name(node))
        if p is not None:
            p.wait(10)
        return victims

    def stop(self) -> list[str]:
        """Cancel every job, stop slurmd, slurmctld and munged; return the problems found."""
        problems: list[str] = []
        ctld = self.procs.get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            try:
                ids = self.run(["squeue", "-h", "-o", "%i"], timeout=120).stdout.split()
                if ids:
                    self.run(["scancel", *ids], timeout=120)
                    deadline = time.monotonic() + 30
                    while self.run(["squeue", "-h", "-o", "%i"], timeout=120).stdout.split():
                        if time.monotonic() > deadline:
                            problems.append(
                                f"jobs still queued 30 s after scancel: {self.run(['squeue'], timeout=120).stdout}"
                            )
                            break
                        time.sleep(0.2)
            except (OSError, subprocess.SubprocessError) as e:
                problems.append(f"could not cancel the jobs: {e}")
        order = [self._slurmd_name(n) for n in self.nodes] + ["slurmctld", "munged"]
        for name in order:
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                problems.append(f"{name} (pid {p.pid}) ignored SIGTERM for {STOP_TIMEOUT:.0f} s; killed")
                p.kill()
                p.wait(10)
        for name, p in self.procs.items():
            if p.poll() is None:
                problems.append(f"{name} (pid {p.pid}) still running")
        deadline = time.monotonic() + 5  # slurmctld's slurmscriptd child exits after it
        while (leftovers := self.leftover_processes()) and time.monotonic() < deadline:
            time.sleep(0.2)
        if leftovers:
            problems.append(
                "processes of this cluster left behind (killed): " + "; ".join(f"{pid} {cmd}" for pid, cmd in leftovers)
            )
            for pid, _ in leftovers:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self.net is not None:
            problems += self.net.delete()
        return problems

    def leftover_processes(self) -> list[tuple[int, str]]:
        """Processes (daemons, slurmstepd, job tasks) whose environment names this cluster's
        slurm.conf: every one of them inherits SLURM_CONF from the fixture or from a job."""
        marker = f"SLURM_CONF={self.conf}".encode()
        found = []
        me = os.getpid()
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) == me:
                continue
            try:
                if marker not in (d / "environ").read_bytes().split(b"\0"):
                    continue
                if (d / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    continue  # a zombie is already dead; its parent reaps it
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            found.append((int(d.name), cmd.strip()))
        return found


def start_cluster(extra_conf: str = "", node_options: str = "", nodes: int = 1) -> SlurmCluster:
    """Install if needed, write the config, start the daemons; raise SlurmUnavailable if not.
    extra_conf: lines appended to slurm.conf (a later line wins); node_options: appended to the
    NodeName lines (e.g. "Gres=gpu:8"); nodes: 1 runs on this host's network, more each in a
    network namespace of its own (make_network)."""
    bins = ensure_installed(NETWORK if nodes > 1 else ())
    # Not under pytest's basetemp: munged wants every directory above its socket to be o+x,
    # and /tmp/pytest-of-<user> is 0700.
    base = Path(tempfile.mkdtemp(prefix="recipectl-slurm-"))
    base.chmod(0o755)
    for sub in ("etc", "munge", "state", "spool", "run", "log"):
        (base / sub).mkdir(mode=0o755)
    key = base / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    net = None
    if nodes == 1:
        node_list = [Node(socket.gethostname().split(".")[0], "127.0.0.1")]
        ctld = None
    else:
        try:
            net = make_network(nodes, base)
        except SlurmUnavailable as e:
            raise SlurmUnavailable(f"{e}\n(files kept in {base})") from None
        node_list = net.nodes
        ctld = (LOGIN, net.login_addr)
        for n in node_list:
            (base / "spool" / n.name).mkdir(mode=0o755)
    ctld_port, slurmd_port = free_ports(2)
    write_slurm_conf(
        base / "etc" / "slurm.conf",
        cluster="recipectl-test",
        nodes=node_list,
        hw=_node_hardware(bins["slurmd"]),
        base=base,
        munge_socket=base / "munge" / "munge.socket.2",
        ctld_port=ctld_port,
        slurmd_port=slurmd_port,
        ctld=ctld,
        extra=extra_conf,
        node_options=node_options,
    )
    cluster = SlurmCluster(
        env={"SLURM_CONF": str(base / "etc" / "slurm.conf")},
        conf_dir=base / "etc",
        node=node_list[0].name,
        base=base,
        bins=bins,
        nodes=node_list,
        net=net,
    )
    try:
        cluster.start()
    except BaseException as e:
        problems = cluster.stop()
        if isinstance(e, SlurmUnavailable):
            raise SlurmUnavailable(f"{e}\n(files kept in {base})" + "".join(f"\n{p}" for p in problems)) from None
        raise
    return cluster


def _cluster_fixture(nodes: int) -> Iterator[SlurmCluster]:
    t0 = time.monotonic()
    try:
        cluster = start_cluster(nodes=nodes)
    except SlurmUnavailable as e:
        _unavailable(str(e))
        raise  # unreachable: skip/fail raise
    where = ", ".join(f"{n.name} {n.addr}" for n in cluster.nodes)
    print(f"\n[slurm] cluster up in {time.monotonic() - t0:.1f} s: {where}, SLURM_CONF={cluster.conf}")
    try:
        yield cluster
    finally:
        problems = cluster.stop()
        if problems:
            pytest.fail(
                "Slurm teardown: " + "\n".join(problems) + f"\n{cluster.logs()}\n(files kept in {cluster.base})",
                pytrace=False,
            )
        shutil.rmtree(cluster.base, ignore_errors=True)


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """One node: this host, on loopback."""
    yield from _cluster_fixture(1)


@pytest.fixture(scope="module")
def slurm_cluster_2() -> Iterator[SlurmCluster]:
    """Two nodes (node1, node2), each a network namespace with its own address, and a login node."""
    yield from _cluster_fixture(2)
