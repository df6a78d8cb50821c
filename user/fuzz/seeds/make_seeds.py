#!/usr/bin/env python3
"""Writes the seed corpora (corpus/TARGET/seed-*) from the repository's fixtures.

Seeds are small on purpose (AFL++ mutates small inputs far faster): the recording is the
fixture cut to two intervals, a few samples and a short drop-reason table, on 512-byte
pages, plus the L3-miss and counter rows the fixture lacks. Run from anywhere; rerun
after a schema change.
"""
import json
import re
import shutil
import sqlite3
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FUZZ = HERE.parent
ROOT = FUZZ.parent.parent
FIX = ROOT / "tests/fixtures"
CORPUS = FUZZ / "corpus"


def schema():
    src = (ROOT / "user/src/recording/mod.rs").read_text()
    app = int(re.search(r"APPLICATION_ID: i32 = (0x[0-9a-f_]+)", src).group(1).replace("_", ""), 16)
    ver = int(re.search(r"SCHEMA_VERSION: i32 = (\d+)", src).group(1))
    sql = re.search(r'pub const SCHEMA: &str = r#"(.*?)"#;', src, re.S).group(1)
    return app, ver, sql


def put(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / f"seed-{name}").write_bytes(data if isinstance(data, bytes) else data.encode())


def trimmed_fixture(path, add_misses):
    shutil.copy(FIX / "recordings/veth-tcp.ddio", path)
    c = sqlite3.connect(path)
    for t in ["intervals"]:
        c.execute(f"DELETE FROM {t} WHERE idx >= 2")
    for t in ["queue_intervals", "stage_stats", "stage_hist", "napi_hist", "miss_intervals", "miss_queues", "miss_age_hist", "counters"]:
        c.execute(f"DELETE FROM {t} WHERE interval >= 2")
    c.execute("DELETE FROM samples WHERE rowid NOT IN (SELECT rowid FROM samples LIMIT 3)")
    c.execute("DELETE FROM flows WHERE rowid NOT IN (SELECT rowid FROM flows LIMIT 3)")
    names = json.loads(c.execute("SELECT value FROM meta WHERE key='drop_reason_names'").fetchone()[0])
    c.execute("UPDATE meta SET value=? WHERE key='drop_reason_names'", (json.dumps(dict(list(names.items())[:4])),))
    if add_misses:
        # Today's schema, with the fixture's rows in the columns both have.
        c.commit()
        c.close()
        old = path.with_suffix(".old")
        path.rename(old)
        app, ver, sql = schema()
        c = sqlite3.connect(path)
        c.executescript(f"PRAGMA application_id = {app}; PRAGMA user_version = {ver}; {sql}")
        c.execute("ATTACH ? AS old", (str(old),))
        for (t,) in c.execute("SELECT name FROM old.sqlite_master WHERE type='table'").fetchall():
            cols = [r[1] for r in c.execute(f"PRAGMA table_info({t})")]
            old_cols = {r[1] for r in c.execute(f"PRAGMA old.table_info({t})")}
            common = ",".join(x for x in cols if x in old_cols)
            c.execute(f"INSERT INTO main.{t}({common}) SELECT {common} FROM old.{t}")
        c.execute("DELETE FROM miss_intervals")
        c.commit()
        c.execute("DETACH old")
        c.execute("INSERT INTO miss_intervals VALUES (0,100,60,30,10,20,5,0,3,0,1,1000,0,0,500000000)")
        c.execute("INSERT INTO buf_map_intervals VALUES (0,40,8,0,1,0,48,30,5,0,0)")
        c.execute("INSERT INTO miss_queues VALUES (0,'rx',1,40,20)")
        c.execute("INSERT INTO miss_age_hist VALUES (0,3,17)")
        c.execute("INSERT INTO miss_flows VALUES ('rx','tcp','10.77.0.1',40000,'10.77.0.2',5201,30,10)")
        c.execute("INSERT INTO miss_regions VALUES (1,12)")
        c.execute("INSERT INTO counters VALUES (0,1000000000,0,'iio','UNC_IIO_DATA_REQ_OF_CPU.MEM_WRITE.PART0',1e6,1000000,1000000000,1000000000,'imported')")
        c.execute("INSERT INTO counters VALUES (1,2000000000,0,'cha','UNC_CHA_TOR_INSERTS.IO_MISS_ITOM',2e5,200000,1000000000,500000000,'imported')")
        c.execute("INSERT OR REPLACE INTO meta VALUES ('miss_sampling','software-clock'),('buffer_join','addresses'),('join_sample','1')")
        # What the tiered recorder adds: detail windows, hand-up counts, flows estimated
        # from sampled skbs (with their variance), and the keys that describe them.
        c.execute("UPDATE intervals SET detail_ns = dur_ns / 16")
        c.execute("UPDATE queue_intervals SET handups = packets WHERE dir = 'rx'")
        c.execute("UPDATE flows SET samples = packets / 8 + 1, bytes_var = bytes * 64")
        c.execute("""INSERT OR REPLACE INTO meta VALUES ('detail','windows'),('rx_counts','tcx'),('flow_sample_bytes','65536'),
            ('window_cycle_ms','1000.0'),('window_duty','16'),('window_ms','62.5'),('window_warmup_ms','10.0'),
            ('window_drain_ms','10.0'),('stopped_by','device_removed'),
            ('tier0_hooks','[{"attach":"tcx","error":null,"hook":"tcx/ingress"},{"attach":"tp_btf","error":null,"hook":"net_dev_start_xmit"}]')""")
    c.commit()
    c.execute("PRAGMA page_size = 512")
    c.execute("VACUUM")
    c.close()


def data_sql(path):
    """The rows of a recording as INSERT statements (the schema is the target's)."""
    c = sqlite3.connect(path)
    out = [l for l in c.iterdump() if l.startswith("INSERT INTO")]
    c.close()
    return "\n".join(out) + "\n"


def main():
    if CORPUS.exists():
        for f in CORPUS.glob("*/seed-*"):
            f.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, misses in [("veth-tcp-2iv", False), ("veth-tcp-2iv-misses", True)]:
            p = tmp / f"{name}.ddio"
            trimmed_fixture(p, misses)
            put("recording", name, p.read_bytes())
            put("recording_sql", name, data_sql(p))
        foreign = tmp / "foreign.sqlite"
        c = sqlite3.connect(foreign)
        c.execute("PRAGMA page_size = 512")
        c.execute("CREATE TABLE meta(key TEXT, value TEXT)")
        c.commit()
        c.close()
        put("recording", "foreign-sqlite", foreign.read_bytes())
    put("recording_sql", "damaged-values",
        "INSERT INTO meta VALUES('iface','{\"name\":\"x\",\"rx_queues\":-1}'),('interval_ms','-5'),('host','null'),('geometry','{\"ways\":0}');\n"
        "INSERT INTO intervals VALUES(-1,9223372036854775807,0,-1,-1,0,0,0,0);\n"
        "INSERT INTO queue_intervals VALUES(-1,'xx',4294967296,1,1,1,1,1,1,1,1);\n"
        "INSERT INTO stage_hist VALUES(0,'rx',0,'driver_to_stack',99,NULL);\n")

    for f in ["perf_stat_emr_per_socket.csv", "perf_stat_software_host.csv"]:
        put("perf_csv", f.removesuffix(".csv"), (FIX / "counters" / f).read_bytes())

    for i, s in enumerate([
        "preset=skx6140,ddio_ways=4,queues=2,ring=512,pkt_bytes=1024,rate_gbps=50,consumer=copy,residence_us=10,reuse=lifo,queue_weights=3/1",
        '{"preset":"emr8592","queues":2,"ring":256,"pkt_bytes":1500,"pps":2e6,"consumer":"forward","reuse":"fifo",'
        '"flows":[{"queue":0,"weight":3,"pkt_bytes":1500},{"queue":0,"weight":1,"pkt_bytes":64},{"queue":1,"weight":1,"pkt_bytes":512}]}',
        "llc_mib=30,ways=11,slices=18,queues=1,ring=1024,pkt_bytes=1500,rate_gbps=50,consumer=copy,residence_us=5,"
        "bg_lines_per_sec=1e6,bg_working_set_mib=8,replacement=random,measure_cycles=2,warmup_cycles=1,max_packets=1000,seed=7",
        "preset=bdw2695v4,queues=4,ring=2048,pps=1e6,buf_stride=4096,data_offset=128,pool_extra=0,cqe_bytes=16,slice_sample=2,tx_delay_us=1",
    ]):
        put("simspec", str(i), s)

    reqs = {
        "metrics-openmetrics": b"\x01GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9436\r\nAccept: application/openmetrics-text; version=1.0.0\r\n\r\n",
        "metrics-classic-pipelined": b"\x01GET /metrics HTTP/1.1\r\nHost: a\r\n\r\nGET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        "healthz-starting": b"\x00GET /healthz HTTP/1.0\r\n\r\n",
        "post-chunked-404": b"\x01POST /x?y=%zz HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "head-long-header": b"\x01HEAD /metrics HTTP/1.1\r\nHost: a\r\nX-Long: " + b"a" * 200 + b"\r\nContent-Length: 3\r\n\r\nabc",
    }
    for k, v in reqs.items():
        put("serve_http", k, v)

    topo = FIX / "topology"
    mem = FIX / "memlayout"
    sysfs = {
        "0-cpulist": b"\x000-3,8,10-11\n",
        "1-size": b"\x0139424K\n",
        "2-interrupts": b"\x02" + (topo / "interrupts-mlx5").read_bytes(),
        "3-cpuinfo": b"\x03" + (topo / "cpuinfo-skx6140").read_bytes(),
        "4-format": b"\x04config:0-7,32-35\n",
        "5-cpumask": b"\x050,36\n",
        "6-cpuinfo-spr": b"\x06" + (FIX / "counters/cpuinfo/spr.txt").read_bytes(),
        "6-cpuinfo-epyc": b"\x06" + (FIX / "counters/cpuinfo/amd_epyc.txt").read_bytes(),
        "7-memlayout": b"\x07" + (mem / "kallsyms_kaslr.txt").read_bytes() + b"\0" + (mem / "cpuinfo_5level.txt").read_bytes()
        + b"\0" + (mem / "zoneinfo.txt").read_bytes()[:1500],
        "8-zoneinfo": b"\x08" + (mem / "zoneinfo.txt").read_bytes(),
        "9-pci": b"\x09/sys/devices/pci0000:16/0000:16:02.0/0000:17:00.0/net/eth0\n",
        "10-event": b"\x0auncore_cha/event=0x35,umask=0xc8,config1=0x4/\n",
        "11-platform": b"\x0bEMR",
        "12-tree-0": b"\x0c\x00\x00config:0-7\n",
        "12-tree-1": b"\x0c\x07\x00" + b"0-27,56-83\n",
        "12-tree-2": b"\x0c\x30\x01" + b"36608K\n",
    }
    for k, v in sysfs.items():
        put("sysfs", k, v)


if __name__ == "__main__":
    main()
