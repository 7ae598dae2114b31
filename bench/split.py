"""Groups `perf script -F comm,ip,sym` samples (with call chains) by the
task each ran in: the first of the places below that any frame of its
stack names. Prints each place's share of all samples."""

import sys
from collections import Counter

# (name, what a frame of it contains), in order of precedence: reqwest runs
# inside the lean link, which runs inside the supervisor's loop.
PLACES = [
    ("hyper's connection task", "hyper::proto::h1::dispatch"),
    ("reqwest (request, redirect layer, pool)", "reqwest::async_impl::client::"),
    ("the lean link (JSON-RPC body, answer)", "LegacyLink::call"),
    ("the supervisor's loop", "probe_loop"),
    ("the state owner", "mcpmon::state::owner::run"),
    ("parked (epoll_wait)", "::park"),
]


def place(frames):
    for name, mark in PLACES:
        if any(mark in frame for frame in frames):
            return name
    return "other"


counts = Counter()
frames = []
for line in list(sys.stdin) + [""]:
    if line.strip():
        if line.startswith((" ", "\t")):
            frames.append(line)
        continue
    if frames:
        counts[place(frames)] += 1
    frames = []
total = sum(counts.values()) or 1
print(f"{total} samples")
for name, _ in PLACES + [("other", "")]:
    print(f"  {100 * counts[name] / total:5.1f}%  {name}")
