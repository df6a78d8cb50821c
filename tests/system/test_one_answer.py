"""One answer on every surface, with commands that run (issue 41 items 1-2).

* `recommend` on a testbed recording prints only commands that run as pasted: each is run
  as printed (it carries `ip netns exec` for the namespaced device) and must exit 0, then is
  reverted.
* The same traffic recorded and served at once: `serve`'s verdict labels are spelt as the
  report's JSON, the report gives the same verdicts for the queues both saw busy, and both
  model the same DDIO capacity.
"""
import json
import re
import subprocess
import uuid

import pytest

from conftest import BIN, Recorder, Testbed, run, wait_until
from test_serve import Serve, http_get

VOCABULARY = {"fits", "at_risk", "leaky", "unknown"}


@pytest.fixture
def bed():
    tb = Testbed("dda" + uuid.uuid4().hex[:6])
    try:
        yield tb
    finally:
        tb.down()


def revert(tb, rec, cmd):
    """The command that undoes `cmd` on the recorded device (None: it changes nothing)."""
    if " ethtool -X " in f" {cmd} ":
        return re.sub(r"-X (\S+) equal \d+", r"-X \1 default", cmd)
    if " ethtool -G " in f" {cmd} ":
        iface = json.loads(run("sqlite3", rec, "SELECT value FROM meta WHERE key='iface'").stdout)
        return re.sub(r"rx \d+$", f"rx {iface['rx_ring']}", cmd)
    if " ethtool -N " in f" {cmd} ":
        return None  # the rule's location is printed on insertion; removed below
    if cmd.startswith("setpci") or cmd.startswith("#"):
        return None  # a read
    if "smp_affinity_list" in cmd:
        return None  # restored from the saved value below
    raise AssertionError(f"no revert known for a printed command: {cmd}")


def run_printed(tb, rec, out):
    """Every command `recommend --json` printed (`out`), run as printed: each must exit 0;
    each is then reverted. Returns the commands run."""
    printed = [(r["kind"], line) for r in out["recommendations"] for line in r["command"].splitlines() if line.strip()]
    printed += [(c["kind"], line) for c in out["answer"]["changes"] for line in c["command"].splitlines() if line.strip()]
    print("printed commands:", printed or "none")
    for kind, cmd in printed:
        if "ethtool" in cmd or "net.ipv4." in cmd:
            assert cmd.startswith(f"ip netns exec {tb.ns_rcv} "), cmd
        saved = {}
        for irq in re.findall(r"/proc/irq/(\d+)/smp_affinity_list", cmd):
            saved[irq] = open(f"/proc/irq/{irq}/smp_affinity_list").read().strip()
        # A sysctl is restored to its value before, read where the command writes it.
        sysctl = re.match(r"^((?:ip netns exec \S+ )?)sysctl -w ([\w.]+)=", cmd)
        before = sysctl and subprocess.run(["sh", "-c", f"{sysctl.group(1)}sysctl -n {sysctl.group(2)}"],
                                           capture_output=True, text=True, check=True).stdout.strip()
        r = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=30)
        try:
            assert r.returncode == 0, (kind, cmd, r.stderr)
        finally:
            undo = revert(tb, rec, cmd) if r.returncode == 0 and not sysctl else None
            if undo:
                subprocess.run(["sh", "-c", undo], check=False, timeout=30)
            if sysctl:
                subprocess.run(["sh", "-c", f"{sysctl.group(1)}sysctl -w {sysctl.group(2)}='{before}'"],
                               check=True, capture_output=True, timeout=30)
            for irq, v in saved.items():
                with open(f"/proc/irq/{irq}/smp_affinity_list", "w") as f:
                    f.write(v)
    return [c for _, c in printed]


def test_a_socket_buffer_command_runs_as_pasted_in_the_namespace(bed, tmp_path):
    """A slow reader behind a large receive buffer, evaluated for an LLC whose DDIO ways the
    queued payload overflows: recommend prints a socket-buffer cap, tcp_rmem in the device's
    namespace (where the sockets are) and rmem_max in the host's, and each runs as printed."""
    from test_socket_queue import run_load
    tb = bed
    recorder = lambda *a: Recorder(tmp_path / "slow.ddio", *a)
    path, _ = run_load(tb, recorder, rcvbuf=4 << 20, chunk=65536, pause=0.02)
    out = json.loads(run(BIN, "recommend", path, "--json", "--llc-mib", "2", "--llc-ways", "16",
                         "--ddio-ways", "2").stdout)
    ran = run_printed(tb, path, out)
    assert any(c.startswith(f"ip netns exec {tb.ns_rcv} sysctl -w net.ipv4.tcp_rmem=") for c in ran), ran


def test_every_printed_command_runs_as_pasted(bed, tmp_path):
    tb = bed
    tb.iperf3_server()
    # One UDP flow as fast as veth takes it: the case that printed `ethtool -X` on a device
    # with no RSS table, outside its namespace, for a flow RSS cannot spread.
    rec = Recorder(tmp_path / "udp.ddio", "-i", tb.if_rcv, "--netns", tb.ns_rcv)
    tb.iperf3("-u", "-b", "0", "-l", "1400", "-t", "4")
    rc, _, err = rec.stop()
    assert rc == 0, err
    out = json.loads(run(BIN, "recommend", rec.out, "--json").stdout)
    printed = run_printed(tb, rec.out, out)
    # What it says instead of a command veth cannot run: no -X without an RSS table.
    assert not any(" -X " in c for c in printed), printed
    # The answer leads with this host's DDIO when it has none, and names the LLC it models.
    host = json.loads(run("sqlite3", rec.out, "SELECT value FROM meta WHERE key='host'").stdout)
    if host.get("cpu_vendor") and host["cpu_vendor"] != "GenuineIntel":
        ddio = out["answer"]["ddio"]
        assert ddio and ddio.startswith("none on this host"), ddio
        assert "preset skx6140" in ddio and "picked as" in ddio, ddio
        text = run(BIN, "recommend", rec.out).stdout
        answer = text[text.index("Answer"):]
        assert answer.splitlines()[1].lstrip().startswith("DDIO"), answer[:400]
        assert "Leaking" not in answer.split("\n\n")[0], answer[:600]
    # Next never suggests the command just run.
    for step in (out["answer"]["no_change"] or {}).get("next_steps", []):
        assert f"recommend {rec.out}" not in step, step


def scrape_verdicts(url):
    _, _, body = http_get(url + "/metrics")
    text = body.decode() if isinstance(body, bytes) else body
    v, cap = {}, None
    for line in text.splitlines():
        m = re.match(r'ddioscope_model_verdict\{(.*)\} (\S+)$', line)
        if m and float(m.group(2)) == 1:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            v[(labels["direction"], int(labels["queue"]))] = labels["verdict"]
        m = re.match(r'ddioscope_ddio_capacity_bytes\{.*\} (\S+)$', line)
        if m:
            cap = float(m.group(1))
    return v, cap, text


def test_record_and_serve_give_one_answer(bed, tmp_path):
    tb = bed
    tb.iperf3_server()
    srv = Serve(tb)
    try:
        rec = Recorder(tmp_path / "both.ddio", "-i", tb.if_rcv, "--netns", tb.ns_rcv)
        traffic = subprocess.Popen([*tb.snd, "iperf3", "-c", tb.ip_rcv, "-P", "4", "-t", "5", "-b", "200M"],
                                   stdout=subprocess.DEVNULL)
        seen = {}
        try:
            # The last interval with traffic, once one carried enough for a verdict.
            wait_until(lambda: any(k[0] == "rx" and v != "unknown" for k, v in scrape_verdicts(srv.url)[0].items()),
                       timeout=20, what="serve's first busy verdicts")
            seen, cap, text = scrape_verdicts(srv.url)
        finally:
            traffic.wait(timeout=60)
        rc, _, err = rec.stop()
        assert rc == 0, err
    finally:
        srv.kill()
    print("serve verdicts:", seen)
    assert set(seen.values()) <= VOCABULARY, seen
    assert "at-risk" not in text
    rep = json.loads(run(BIN, "report", rec.out, "--json").stdout)
    report = {(v["dir"], v["queue"]): v["verdict"] for v in rep["verdicts"]}
    print("report verdicts:", report)
    assert set(report.values()) <= VOCABULARY
    # One model of the cache: the same DDIO capacity.
    assert cap == rep["model"]["ddio_capacity_bytes"], (cap, rep["model"]["ddio_capacity_bytes"])
    # The queues both gave a verdict on: the same one.
    both = [k for k in seen if seen[k] != "unknown" and report.get(k, "unknown") != "unknown"]
    assert both, (seen, report)
    assert all(seen[k] == report[k] for k in both), [(k, seen[k], report[k]) for k in both]
    # A TX queue without a ring the driver reports is unknown on both.
    for k, v in seen.items():
        if k[0] == "tx" and k in report:
            assert v == report[k] == "unknown", (k, v, report[k])
