"""A running mcpmon's threads, every 5 s: how many, their summed CPU
(schedstat, live threads only, as bench/run.py's cpu_seconds reads it),
the process's own CPU from /proc/PID/stat (exited threads included, 10 ms
ticks), and which threads exited or started since the last look, with the
CPU each had. Shows what the runner's per-thread sum misses.

    python3 bench/threads.py BINARY N INTERVAL_S LOOKS
    python3 bench/threads.py target/release/mcpmon 1000 10 20
"""
import os
import pathlib
import sys
import time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import run
def snap(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
            ns = int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])
            out[tid] = (name, ns)
        except OSError:
            pass
    return out
def ticks(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
sim, base = run.start_sim()
m = run.Mcpmon("http", base, int(sys.argv[2]), float(sys.argv[3]), binary=pathlib.Path(sys.argv[1]))
try:
    m.ready()
    t0 = time.time()
    prev = snap(m.pid)
    for i in range(int(sys.argv[4])):
        time.sleep(5)
        cur = snap(m.pid)
        gone = {t: v for t, v in prev.items() if t not in cur}
        born = {t: v for t, v in cur.items() if t not in prev}
        live = sum(v[1] for v in cur.values()) / 1e9
        print(f"{time.time()-t0:5.0f}s threads={len(cur)} live-sum={live:.3f}s ticks={ticks(m.pid):.2f}s gone={[(v[0], round(v[1]/1e6)) for v in gone.values()]} born={[(v[0], round(v[1]/1e6)) for v in born.values()]}", flush=True)
        prev = cur
finally:
    m.stop(); sim.kill(); sim.wait()
