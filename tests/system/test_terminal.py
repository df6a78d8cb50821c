"""Text output fits the terminal: `COLUMNS`, else the width of the terminal on stdout, else
100 columns (a pipe or a file); and `-` means stdout for `--json` as for `--html`. Runs on
the testbed fixture recording: no root needed."""
import fcntl
import json
import os
import pty
import struct
import subprocess
import termios

from conftest import BIN, ROOT, run

FIXTURE = ROOT / "tests/fixtures/recordings/veth-tcp.ddio"


def widest(text):
    return max(len(l) for l in text.splitlines())


def env_without_columns(**extra):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(extra)
    return env


def test_text_wraps_to_columns_else_100():
    # simulate's grid is a table of 11 columns: 91 wide at its narrowest, so not tried at 80.
    for cmd, widths in ((["report", FIXTURE], (80, 132)), (["recommend", FIXTURE], (80, 132)),
                        (["simulate", FIXTURE, "--ring", "512,1024"], (100, 132))):
        for cols in widths:
            p = run(BIN, *cmd, env=env_without_columns(COLUMNS=str(cols)))
            assert widest(p.stdout) <= cols, (cmd, cols, [l for l in p.stdout.splitlines() if len(l) > cols])
        # Piped, with no COLUMNS: 100.
        p = run(BIN, *cmd, env=env_without_columns())
        assert widest(p.stdout) <= 100, (cmd, [l for l in p.stdout.splitlines() if len(l) > 100])
    # The report has lines to wrap: at 132 some are longer than 100.
    p = run(BIN, "report", FIXTURE, env=env_without_columns(COLUMNS="132"))
    assert widest(p.stdout) > 100


def test_text_wraps_to_the_terminal_on_stdout():
    """Without COLUMNS, the width the terminal reports (TIOCGWINSZ)."""
    for cols in (84, 118):
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
        p = subprocess.Popen([str(BIN), "report", str(FIXTURE)], stdout=slave, stderr=subprocess.PIPE,
                             env=env_without_columns())
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        os.close(master)
        assert p.wait(timeout=60) == 0, p.stderr.read()
        text = out.decode().replace("\r\n", "\n")
        assert "Answer" in text and widest(text) <= cols, (cols, [l for l in text.splitlines() if len(l) > cols])
        assert widest(text) > cols - 20, "wrapped far narrower than the terminal"


def test_json_dash_is_stdout_and_a_name_is_a_file(tmp_path):
    plain = json.loads(run(BIN, "report", "--json", FIXTURE).stdout)
    assert json.loads(run(BIN, "report", FIXTURE, "--json=-").stdout) == plain
    out = tmp_path / "r.json"
    p = run(BIN, "report", FIXTURE, f"--json={out}")
    assert p.stdout == "" and json.loads(out.read_text()) == plain
    # An existing file is refused in one line without --force, and left alone.
    p = run(BIN, "report", FIXTURE, f"--json={out}", check=False)
    assert p.returncode == 1 and "--force" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert json.loads(out.read_text()) == plain
    advice = json.loads(run(BIN, "recommend", "--json", FIXTURE).stdout)
    assert json.loads(run(BIN, "recommend", FIXTURE, "--json=-").stdout) == advice
    a = tmp_path / "a.json"
    run(BIN, "recommend", FIXTURE, f"--json={a}")
    assert json.loads(a.read_text()) == advice
