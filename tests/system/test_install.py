"""`make install` into a DESTDIR: a stripped binary that names its commit and BPF build id,
man pages and bash/zsh/fish completions generated from the clap definitions (each
exercised by its shell), and the systemd unit for `serve`, whose capability set is
tried here with setpriv: systemd is not PID 1 on every test host, and the kernel, not
systemd, decides what the capabilities allow."""
import configparser
import json
import os
import re
import shlex
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, ROOT, run, wait_until
from test_serve import free_port, http_get, wait_http_ok

SUBCOMMANDS = ["record", "report", "top", "serve", "recommend", "diff", "import-counters", "simulate", "doctor"]
HIDDEN = ["bench-floor", "completions", "man"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    dest = tmp_path_factory.mktemp("destdir")
    r = run("make", "-C", ROOT, "install", f"DESTDIR={dest}", "PREFIX=/usr", check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    return dest, dest / "usr"


def elf_sections(path):
    return run("llvm-readelf", "-S", "-W", path).stdout


def test_installed_binary_is_stripped_and_names_commit_and_bpf_build_id(installed):
    _, usr = installed
    binary = usr / "bin/ddioscope"
    assert ".debug_info" in elf_sections(BIN)
    assert ".debug_info" not in elf_sections(binary) and ".symtab" not in elf_sections(binary)
    assert binary.stat().st_size < BIN.stat().st_size / 3, (binary.stat().st_size, BIN.stat().st_size)
    out = run(binary, "--version").stdout.strip()
    m = re.fullmatch(r"ddioscope (\S+) \(commit (\S+), bpf ([0-9a-f]{16})\)", out)
    assert m, out
    head = run("git", "-C", ROOT, "rev-parse", "HEAD").stdout.strip()
    assert m.group(2) == head, (out, head)
    # Stripping leaves the embedded objects alone: the same build id as the build tree's binary.
    assert run(BIN, "--version").stdout.strip() == out
    d = run(binary, "doctor", "--json", check=False)
    assert d.returncode in (0, 1) and "can_record" in json.loads(d.stdout), d.stderr


def test_man_pages_render_and_cover_every_command_and_flag(installed):
    _, usr = installed
    man1 = usr / "share/man/man1"
    pages = sorted(p.name for p in man1.iterdir())
    assert pages == sorted(["ddioscope.1"] + [f"ddioscope-{c}.1" for c in SUBCOMMANDS]), pages
    for page in pages:
        r = subprocess.run(["man", "-l", "-Tutf8", str(man1 / page)], capture_output=True, text=True,
                           env={**os.environ, "MANWIDTH": "100"})
        assert r.returncode == 0 and r.stdout.strip(), (page, r.stderr)
    serve = subprocess.run(["man", "-l", "-Tutf8", str(man1 / "ddioscope-serve.1")], capture_output=True,
                           text=True).stdout
    # groff marks up hyphens and bold; compare letters only.
    plain = re.sub(r".\x08", "", serve).replace("\u2010", "-")
    for flag in ["--top-flows", "--stage-histograms", "--miss-sampling", "--allow-remote", "--listen"]:
        assert flag in plain, flag
    top = (man1 / "ddioscope.1").read_text()
    listed = lambda c: "ddioscope\\-" + c.replace("-", "\\-") + "(1)" in top  # roff escapes hyphens
    assert all(listed(c) for c in SUBCOMMANDS) and not any(listed(c) for c in HIDDEN), top
    # Beyond what clap describes: every page has examples, exit status and see also, as rendered.
    for page in pages:
        text = re.sub(r".\x08", "", subprocess.run(["man", "-l", "-Tutf8", str(man1 / page)], capture_output=True, text=True,
                                                  env={**os.environ, "MANWIDTH": "100"}).stdout)
        for section in ["EXAMPLES", "EXIT STATUS", "SEE ALSO"]:
            assert re.search(rf"^{section}$", text, re.M), (page, section)
        see_also = text.split("SEE ALSO", 1)[1]
        assert "ddioscope" in see_also.replace("\u2010", "-"), (page, see_also)
    for page in ["ddioscope.1", "ddioscope-record.1", "ddioscope-report.1", "ddioscope-serve.1", "ddioscope-doctor.1"]:
        assert ".SH FILES" in (man1 / page).read_text(), page


def bash_complete(script, words):
    """What bash's programmable completion offers for the last of `words`."""
    line = " ".join(shlex.quote(w) for w in words)
    prog = (f"source {shlex.quote(str(script))}\n"
            f"COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; COMP_LINE={shlex.quote(' '.join(words))}; "
            f"COMP_POINT=${{#COMP_LINE}}\n"
            f"_ddioscope ddioscope {shlex.quote(words[-1])} {shlex.quote(words[-2])}\n"
            'printf "%s\\n" "${COMPREPLY[@]}"\n')
    return run("bash", "--norc", "-c", prog).stdout.split()


def test_bash_zsh_and_fish_complete_subcommands_and_flags(installed):
    _, usr = installed
    bash = usr / "share/bash-completion/completions/ddioscope"
    assert bash_complete(bash, ["ddioscope", "ser"]) == ["serve"]
    top = bash_complete(bash, ["ddioscope", ""])
    assert set(SUBCOMMANDS) <= set(top) and not set(HIDDEN) & set(top), top
    assert "--top-flows" in bash_complete(bash, ["ddioscope", "serve", "--to"])
    assert set(bash_complete(bash, ["ddioscope", "serve", "--stage-histograms", ""])) == {
        "per-queue", "per-direction", "off"}

    fish = usr / "share/fish/vendor_completions.d/ddioscope.fish"
    out = run("fish", "--no-config", "-c", f"source {shlex.quote(str(fish))}; complete -C 'ddioscope serve --to'").stdout
    assert out.split("\t")[0].strip() == "--top-flows", out
    out = run("fish", "--no-config", "-c", f"source {shlex.quote(str(fish))}; complete -C 'ddioscope re'").stdout
    assert {l.split("\t")[0] for l in out.splitlines()} == {"record", "report", "recommend"}, out

    zsh = usr / "share/zsh/site-functions/_ddioscope"
    assert zsh.read_text().startswith("#compdef ddioscope")
    run("zsh", "-n", zsh)
    # Loaded through fpath as compinit would, the function knows serve's flags.
    out = run("zsh", "-f", "-c", f"fpath=({shlex.quote(str(zsh.parent))} $fpath); autoload -Uz +X _ddioscope; "
              "whence -w _ddioscope; functions _ddioscope | grep -c -- --top-flows").stdout
    assert "_ddioscope: function" in out and int(out.split()[-1]) >= 1, out


def unit_file(usr):
    unit = usr / "lib/systemd/system/ddioscope-serve@.service"
    cp = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    cp.optionxform = str
    cp.read_string(unit.read_text())
    return unit, cp


def test_unit_is_valid_and_listens_on_loopback_by_default(installed):
    dest, usr = installed
    unit, cp = unit_file(usr)
    svc = cp["Service"]
    assert svc["ExecStart"].startswith("/usr/bin/ddioscope serve -i %i --listen ${DDIOSCOPE_LISTEN}")
    assert "DDIOSCOPE_LISTEN=127.0.0.1:9436" in unit.read_text()
    assert svc["CapabilityBoundingSet"].split() == ["CAP_BPF", "CAP_PERFMON", "CAP_NET_ADMIN"]
    # systemd's own parser, offline, on an instance of the template.
    inst = dest / "ddioscope-serve@eth1.service"
    inst.write_text(unit.read_text().replace("/usr/bin/ddioscope", str(usr / "bin/ddioscope")))
    r = run("systemd-analyze", "verify", "--man=no", inst, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def capability_set(usr):
    return [c.lower().replace("cap_", "+") for c in unit_file(usr)[1]["Service"]["CapabilityBoundingSet"].split()]


def serve_with_caps(tb, usr, caps, port, *extra, in_netns=True):
    """The unit's command as root with only `caps`: the bounding set systemd's
    CapabilityBoundingSet= sets, inside the interface's namespace as
    NetworkNamespacePath= would put it (or not, with --netns)."""
    cmd = ["setpriv", "--inh-caps=-all", f"--bounding-set=-all,{','.join(caps)}", "--",
           str(usr / "bin/ddioscope"), "serve", "-i", tb.if_rcv, "--listen", f"127.0.0.1:{port}",
           "--interval", "250", *extra]
    if in_netns:
        cmd = ["ip", "netns", "exec", tb.ns_rcv, *cmd]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def netns_http_get(tb, url):
    r = run("ip", "netns", "exec", tb.ns_rcv, "python3", "-c",
            "import sys,urllib.request as u; r=u.urlopen(sys.argv[1], timeout=2); print(r.status); "
            "sys.stdout.write(r.read().decode())", url, check=False)
    return (int(r.stdout.split("\n", 1)[0]), r.stdout.split("\n", 1)[1]) if r.returncode == 0 else (None, "")


def test_the_units_capabilities_suffice_and_each_is_needed(installed, testbed):
    _, usr = installed
    tb = testbed
    caps = capability_set(usr)
    assert caps == ["+bpf", "+perfmon", "+net_admin"]
    tb.iperf3_server()
    port = free_port()
    p = serve_with_caps(tb, usr, caps, port)
    try:
        wait_until(lambda: p.poll() is not None or netns_http_get(tb, f"http://127.0.0.1:{port}/healthz")[0] == 200,
                   timeout=30, what="serve with the unit's capabilities to attach")
        assert p.poll() is None, p.stderr.read()
        tb.iperf3("-t", "1")
        wait_until(lambda: re.search(r'ddioscope_packets_total\{[^}]*direction="rx"[^}]*\} [1-9]',
                                     netns_http_get(tb, f"http://127.0.0.1:{port}/metrics")[1]),
                   timeout=15, what="RX packets counted")
        # ip netns exec and setpriv exec in place: the pid is ddioscope's, holding exactly these.
        eff = re.search(r"^CapEff:\s*([0-9a-f]+)$", (Path("/proc") / str(p.pid) / "status").read_text(), re.M)
        # CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN
        assert int(eff.group(1), 16) == (1 << 39) | (1 << 38) | (1 << 12), eff.group(0)
    finally:
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=15)
    assert p.returncode == 0, err

    # Without CAP_BPF or CAP_PERFMON the kernel refuses the programs: one line, exit 1.
    for missing in ("+bpf", "+perfmon"):
        fewer = [c for c in caps if c != missing]
        p = serve_with_caps(tb, usr, fewer, free_port())
        _, err = p.communicate(timeout=30)
        assert p.returncode == 1 and err.count("\n") == 1 and "CAP_BPF+CAP_PERFMON" in err, (missing, err)
    # Without CAP_NET_ADMIN the tcx counter cannot load: serve counts at the hand-up
    # tracepoints instead, and still counts.
    port = free_port()
    p = serve_with_caps(tb, usr, ["+bpf", "+perfmon"], port)
    try:
        wait_until(lambda: p.poll() is not None or netns_http_get(tb, f"http://127.0.0.1:{port}/healthz")[0] == 200,
                   timeout=30, what="serve without CAP_NET_ADMIN to attach")
        assert p.poll() is None, p.stderr.read()
        tb.iperf3("-t", "1")
        wait_until(lambda: re.search(r'ddioscope_packets_total\{[^}]*direction="rx"[^}]*\} [1-9]',
                                     netns_http_get(tb, f"http://127.0.0.1:{port}/metrics")[1]),
                   timeout=15, what="RX packets counted at the hand-up")
    finally:
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=15)
    assert p.returncode == 0, err

    # --netns instead of the unit's NetworkNamespacePath= needs CAP_SYS_ADMIN (setns).
    p = serve_with_caps(tb, usr, caps, free_port(), "--netns", tb.ns_rcv, in_netns=False)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 1 and "CAP_SYS_ADMIN" in err and err.count("\n") == 1, err
    port = free_port()
    p = serve_with_caps(tb, usr, caps + ["+sys_admin"], port, "--netns", tb.ns_rcv, in_netns=False)
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/healthz", p, 30, "serve --netns with CAP_SYS_ADMIN")
    finally:
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=15)
    assert p.returncode == 0, err


def systemd_is_pid1():
    try:
        return Path("/proc/1/comm").read_text().strip() == "systemd" and run(
            "systemctl", "is-system-running", check=False).stdout.strip() in ("running", "degraded")
    except OSError:
        return False


@pytest.mark.skipif(not systemd_is_pid1(), reason="systemd is not PID 1 here: systemd-run cannot start units "
                    "(the capability set is tried with setpriv above)")
def test_unit_starts_under_systemd_run(installed, testbed):
    _, usr = installed
    tb = testbed
    _, cp = unit_file(usr)
    name = f"ddioscope-test-{tb.name}"
    port = free_port()
    props = [f"--property=CapabilityBoundingSet={cp['Service']['CapabilityBoundingSet']}",
             f"--property=NetworkNamespacePath=/run/netns/{tb.ns_rcv}",
             "--property=NoNewPrivileges=yes", "--property=ProtectSystem=strict"]
    run("systemd-run", f"--unit={name}", *props, usr / "bin/ddioscope", "serve", "-i", tb.if_rcv,
        "--listen", f"127.0.0.1:{port}")
    try:
        wait_until(lambda: netns_http_get(tb, f"http://127.0.0.1:{port}/healthz")[0] == 200, timeout=30,
                   what="the transient unit to attach")
        assert run("systemctl", "is-active", name, check=False).stdout.strip() == "active"
    finally:
        run("systemctl", "stop", name, check=False)
        run("systemctl", "reset-failed", name, check=False)


def test_recordings_store_version_commit_and_bpf_build_id(testbed, recorder, tmp_path):
    out = tmp_path / "v.ddio"
    r = recorder("-i", testbed.if_rcv, "--netns", testbed.ns_rcv, "-d", "1", out=out)
    rc, _, err = r.stop(signal.SIGINT)
    assert rc == 0, err
    meta = dict(sqlite3.connect(out).execute(
        "SELECT key, value FROM meta WHERE key IN ('ddioscope_version', 'git_commit', 'bpf_build_id')"))
    version = run(BIN, "--version").stdout.strip()
    assert version == f"ddioscope {meta['ddioscope_version']} (commit {meta['git_commit']}, bpf {meta['bpf_build_id']})"
