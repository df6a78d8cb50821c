"""A multi-queue TAP device with NAPI (IFF_MULTI_QUEUE | IFF_NAPI) in a namespace of the
test's own: the second driver the system tests run on. Its queues are file descriptors the
test holds, so the test writes each RX frame into the queue it chooses and reads each TX
frame from the queue the kernel chose: a per-queue truth that no counter of the kernel's, and
nothing ddioscope reads, stands behind.

Run as a script (inside the namespace, by `TapDevice`), it creates the device and then
answers one command per line on stdin:
    rx Q N SPORT   write N UDP frames into queue Q (to the device's address, port 9999,
                   from the peer's address and port SPORT); answers "ok"
    tx N SPORT     send N UDP datagrams from the namespace to the peer's address, source
                   ports SPORT..SPORT+N-1 (so they spread over the TX queues); answers "ok"
    read           read every frame waiting on each queue; answers the frames and bytes
                   read on each queue so far: "P0 B0 P1 B1 ..."
The peer is an address with a permanent neighbour entry: nothing answers for it, and
nothing but the test's frames leaves the device (IPv6 is off on it).
"""
import fcntl
import os
import select
import socket
import struct
import subprocess
import sys
import uuid

TUNSETIFF = 0x400454CA
IFF_TAP, IFF_NO_PI, IFF_MULTI_QUEUE, IFF_NAPI = 0x0002, 0x1000, 0x0100, 0x0010
DEV_IP, PEER_IP = "10.78.0.1", "10.78.0.2"
PEER_MAC = bytes.fromhex("020000000002")
RX_PORT = 9999


def _checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def udp_frame(dst_mac, sport, payload=b"x" * 64):
    """An Ethernet frame of a UDP datagram from the peer to the device."""
    udp = struct.pack("!HHHH", sport, RX_PORT, 8 + len(payload), 0) + payload
    total = 20 + len(udp)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 0, 0x4000, 64, 17, 0,
                     socket.inet_aton(PEER_IP), socket.inet_aton(DEV_IP))
    ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
    return dst_mac + PEER_MAC + b"\x08\x00" + ip + udp


def _serve(name, queues):
    fds = []
    for _ in range(queues):
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI | IFF_MULTI_QUEUE | IFF_NAPI))
        fds.append(fd)
    sh = lambda *a: subprocess.run(a, check=True, capture_output=True)
    sh("sysctl", "-qw", f"net.ipv6.conf.{name}.disable_ipv6=1")
    sh("ip", "addr", "add", f"{DEV_IP}/24", "dev", name)
    sh("ip", "link", "set", name, "up")
    sh("ip", "neigh", "replace", PEER_IP, "lladdr", PEER_MAC.hex(":"), "dev", name, "nud", "permanent")
    mac = bytes.fromhex(open(f"/sys/class/net/{name}/address").read().strip().replace(":", ""))
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind((DEV_IP, RX_PORT))
    sink.setblocking(False)
    read = [[0, 0] for _ in fds]
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "rx":
            q, n, sport = map(int, cmd[1:])
            for i in range(n):
                os.write(fds[q], udp_frame(mac, sport + i % 1000))
                if i % 64 == 63:
                    _drain_socket(sink)
            _drain_socket(sink)
            print("ok", flush=True)
        elif cmd[0] == "tx":
            n, sport = map(int, cmd[1:])
            for i in range(n):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.bind((DEV_IP, sport + i))
                s.sendto(b"y" * 100, (PEER_IP, RX_PORT))
                s.close()
                if i % 64 == 63:
                    _read_queues(fds, read)
            print("ok", flush=True)
        elif cmd[0] == "read":
            _read_queues(fds, read)
            print(" ".join(f"{p} {b}" for p, b in read), flush=True)
        _drain_socket(sink)


def _drain_socket(s):
    try:
        while True:
            s.recv(65536)
    except BlockingIOError:
        pass


def _read_queues(fds, read):
    """Every frame waiting on each queue (a queue's frames wait in its ring until read)."""
    while True:
        ready, _, _ = select.select(fds, [], [], 0.05)
        if not ready:
            return
        for fd in ready:
            try:
                while True:
                    f = os.read(fd, 65536)
                    i = fds.index(fd)
                    read[i][0] += 1
                    read[i][1] += len(f)
            except BlockingIOError:
                pass


class TapDevice:
    """A namespace with a TAP device of `queues` queues in it, driven by the script above.
    Removes the namespace (and with its process gone, the device) on `down`."""

    __test__ = False

    def __init__(self, queues=4):
        self.ns = "ddio-tap-" + uuid.uuid4().hex[:8]
        self.name = "ddtap0"
        self.queues = queues
        # Each RX frame the test writes: Ethernet, IPv4, UDP and 64 bytes of payload.
        self.frame_bytes = len(udp_frame(b"\0" * 6, 1))
        subprocess.run(["ip", "netns", "add", self.ns], check=True)
        try:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", self.ns, sys.executable, __file__, self.name, str(queues)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            line = self._line(20)
            if line != "ready":
                raise AssertionError(f"TAP device did not come up: {line!r} {self.proc.stderr.read()}")
        except BaseException:
            self.down()
            raise

    def _line(self, timeout=60):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise AssertionError("TAP helper did not answer in time")
        return self.proc.stdout.readline().strip()

    def _ask(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self._line()

    def rx(self, queue, n, sport=20000):
        assert self._ask(f"rx {queue} {n} {sport}") == "ok"

    def tx(self, n, sport=30000):
        assert self._ask(f"tx {n} {sport}") == "ok"

    def read(self):
        """Frames and bytes read from each TX queue so far: [(packets, bytes), ...]."""
        v = list(map(int, self._ask("read").split()))
        return list(zip(v[0::2], v[1::2]))

    def stats(self):
        # Imported here: this file also runs as the device's process, with no pytest.
        from conftest import link_stats

        return link_stats(self.ns, self.name)

    def down(self):
        p = getattr(self, "proc", None)
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
        subprocess.run(["ip", "netns", "delete", self.ns], capture_output=True)


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
