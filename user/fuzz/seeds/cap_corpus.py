#!/usr/bin/env python3
"""cap_corpus.py AFL_SHOWMAP TARGET_BIN CORPUS_DIR MAX_BYTES

Keeps a corpus within MAX_BYTES while losing as little coverage as it can: seed-*, crash-*
and hang-* files always stay; of the others, a greedy set cover over the edges each input
reaches (afl-showmap, one forkserver run for the whole directory) keeps the inputs that add
the most edges not yet covered per byte, until the budget is spent or nothing adds an edge.
Prints the edges kept and lost.
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

KEEP = ("seed-", "crash-", "hang-")


def edges_per_file(showmap, binary, corpus):
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([showmap, "-q", "-e", "-t", "5000", "-i", str(corpus), "-o", out, "--", binary],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        maps = {}
        for m in Path(out).iterdir():
            maps[m.name] = {line.split(":")[0] for line in m.read_text().split()}
        return maps


def main():
    showmap, binary, corpus, budget = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    maps = edges_per_file(showmap, binary, corpus)
    files = {f.name: f for f in corpus.iterdir() if f.is_file()}
    covered, used = set(), 0
    for name, f in files.items():
        if name.startswith(KEEP):
            covered |= maps.get(name, set())
            used += f.stat().st_size
    candidates = {n: maps.get(n, set()) for n in files if not n.startswith(KEEP)}
    everything = covered.union(*candidates.values()) if candidates else covered
    kept = set()
    while candidates:
        best = max(candidates, key=lambda n: (len(candidates[n] - covered) / max(files[n].stat().st_size, 64), n))
        gain = candidates.pop(best) - covered
        size = files[best].stat().st_size
        if not gain or used + size > budget:
            if not gain:
                break
            continue
        kept.add(best)
        covered |= gain
        used += size
    for n, f in files.items():
        if not n.startswith(KEEP) and n not in kept:
            os.remove(f)
    print(f"{corpus.name}: {len(kept)} inputs kept beside the seeds and bug inputs, {used // 1024} KiB, "
          f"{len(covered)} of {len(everything)} edges")


if __name__ == "__main__":
    main()
