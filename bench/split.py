"""Groups `perf script -F comm,ip,sym` samples (with call chains) by the
task each ran in: the first of the places below that any frame of its
stack names. Prints each place's share of all samples.

`--frames TEXT` (repeatable) also prints the share of samples with any
frame naming TEXT, wherever they ran: how a figure such as "stacks
inserting into a header map" is read off the same profile."""

import argparse
import sys
from collections import Counter

# (name, what a frame of it contains: any of these), in order of precedence:
# the clients run inside the lean link, which runs inside the supervisor.
PLACES = [
    ("hyper's connection task", ("hyper::proto::h1::dispatch",)),
    ("reqwest (request, redirect layer, pool)", ("reqwest::async_impl::client::",)),
    ("hyper-util's pooled client (checkout, request)", ("hyper_util::client::legacy::client::",)),
    # The legacy link's JSON-RPC body and its answer, read where the
    # session's liveness request awaits it as well as in the call.
    ("the lean link (JSON-RPC body, answer)", ("LegacyLink::call", "mcpmon::transport::legacy_")),
    ("the probes' traces", ("mcpmon::probe::trace::",)),
    # Whatever else runs in a supervisor's task: its schedule, the probe
    # futures it polls, the session's event stream, its sends to the owner.
    ("the supervisor", ("mcpmon::supervise::",)),
    ("the state owner", ("mcpmon::state::owner::run",)),
    ("parked (epoll_wait)", ("::park",)),
]


def place(frames):
    for name, marks in PLACES:
        if any(mark in frame for frame in frames for mark in marks):
            return name
    return "other"


ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--frames", action="append", default=[], metavar="TEXT",
                help="also the share of samples with a frame naming TEXT")
args = ap.parse_args()

counts = Counter()
naming = Counter()
frames = []
for line in list(sys.stdin) + [""]:
    if line.strip():
        if line.startswith((" ", "\t")):
            frames.append(line)
        continue
    if frames:
        counts[place(frames)] += 1
        for text in args.frames:
            naming[text] += any(text in frame for frame in frames)
    frames = []
total = sum(counts.values()) or 1
print(f"{total} samples")
for name, _ in PLACES + [("other", "")]:
    print(f"  {100 * counts[name] / total:5.1f}%  {name}")
for text in args.frames:
    print(f"  {100 * naming[text] / total:5.2f}%  with a frame naming {text!r}")
