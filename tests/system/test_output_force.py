"""--force replaces only a regular file: device nodes, FIFOs and symlinks are refused in
one line and left as they were; a start that fails after the output was opened leaves
the old file byte-identical, with no temporary file beside it."""
import os
import stat

import pytest

from conftest import BIN, run
from test_bad_input import expect_error


def record_args(testbed, out, *extra):
    return ["record", "-i", testbed.if_rcv, "--netns", testbed.ns_rcv, "-d", "1", "-o", out, *extra]


def test_force_refuses_a_device_node(testbed):
    before = os.stat("/dev/full")
    for force in ([], ["--force"]):
        line = expect_error(record_args(testbed, "/dev/full", *force), "/dev/full", "character device")
        assert "--force" not in line, line
    after = os.stat("/dev/full")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino


def test_force_refuses_a_fifo_and_a_symlink_and_names_a_directory(testbed, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    target = tmp_path / "target"
    target.write_text("the link's target")
    link = tmp_path / "link"
    link.symlink_to(target)
    expect_error(record_args(testbed, fifo, "--force"), "a FIFO")
    expect_error(record_args(testbed, link, "--force"), "a symbolic link")
    line = expect_error(record_args(testbed, tmp_path, "--force"), "is a directory")
    assert "--force" not in line, line
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert os.path.islink(link) and target.read_text() == "the link's target"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "link", "target"]


def test_report_html_force_refuses_a_fifo(tmp_path):
    fifo = tmp_path / "page.html"
    os.mkfifo(fifo)
    rec = os.path.join(os.path.dirname(__file__), "..", "fixtures", "recordings", "veth-tcp.ddio")
    expect_error(["report", rec, "--html", fifo, "--force"], "a FIFO")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_failed_start_keeps_the_old_file(testbed, tmp_path):
    old = tmp_path / "old.ddio"
    data = os.urandom(4096)
    old.write_bytes(data)
    # Asked-for PEBS sampling fails loudly in the live session's start, after the output
    # was opened and its metadata written, on a CPU without it (every machine this
    # project tests on: no hardware PMU).
    p = run(BIN, *record_args(testbed, old, "--force", "--miss-sampling", "pebs"), check=False)
    if p.returncode == 0:
        pytest.skip("this host has PEBS: the start does not fail")
    assert len(p.stderr.strip().splitlines()) == 1 and "pebs" in p.stderr, p.stderr
    assert old.read_bytes() == data
    assert [p.name for p in tmp_path.iterdir()] == ["old.ddio"], "a temporary file was left"
