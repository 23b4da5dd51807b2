"""A real two-node Slurm (slurm_support.slurm_cluster_2: each node a network namespace with its own
address and slurmd, slurmctld on a login node): steps placed on each node by name, and a step on one
node talking TCP to a step on the other by the node's name."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .slurm_support import SlurmCluster, slurm_cluster_2  # noqa: F401  (the fixture)

pytestmark = pytest.mark.slurm
JOB_TIMEOUT = 120  # s; a job here takes 2-5 s, but other tests may be loading both CPUs

# node2 serves its host name on its own address; node1 connects to "node2" (a name, as the rendered
# scripts use them) and prints what it got, with the address it connected from and to.
PAIR = """\
#!/usr/bin/env bash
#SBATCH --job-name=pair
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --output=%x-%j.out
set -euo pipefail
mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
srun --nodes=1 --ntasks=1 --overlap --nodelist="${NODES[1]}" --output=server.log python3 -c '
import socket
s = socket.create_server(("0.0.0.0", 47123)); open("listening", "w").close()
c, peer = s.accept(); c.sendall(socket.gethostname().encode() + b" " + peer[0].encode()); c.close()
' &
for _ in $(seq 300); do [[ -e listening ]] && break; sleep 0.1; done
srun --nodes=1 --ntasks=1 --overlap --nodelist="${NODES[0]}" --output=client.log python3 -c '
import socket
c = socket.create_connection(("'"${NODES[1]}"'", 47123), timeout=30)
print(socket.gethostname(), c.getsockname()[0], "->", c.getpeername()[0], c.recv(200).decode())
'
wait
"""


def test_a_step_on_each_node_talks_to_the_other(slurm_cluster_2: SlurmCluster, tmp_path: Path) -> None:
    c = slurm_cluster_2
    assert c.node_names == ["node1", "node2"]
    (tmp_path / "job.sh").write_text(PAIR)
    t0 = time.monotonic()
    job = c.sbatch("job.sh", cwd=tmp_path)
    state = c.wait_gone(job, JOB_TIMEOUT)
    print(f"[slurm] job {job}: {state} in {time.monotonic() - t0:.1f} s (2 nodes)")
    logs = {f.name: f.read_text() for f in tmp_path.glob("*.log")} | {
        f.name: f.read_text() for f in tmp_path.glob("*.out")
    }
    detail = f"{c.job_info(job)}\n{logs}\n{c.logs()}"
    assert state == "COMPLETED", detail
    a1, a2 = c.address("node1"), c.address("node2")
    # node1, from its address, reached node2's address; node2 saw node1's address as its peer
    assert (tmp_path / "client.log").read_text().split() == ["node1", a1, "->", a2, "node2", a1], detail
    assert c.job_info(job)["NodeList"] == "node[1-2]", detail
