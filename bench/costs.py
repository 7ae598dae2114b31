#!/usr/bin/env python3
"""Per-ping costs from a callgrind output file (bench/instructions.sh's,
kept with KEEP=FILE). A ping is one call to hyper's request encoder, which
mcpmon and every floor client make once per ping.

  bench/costs.py FILE                    the totals per ping
  bench/costs.py FILE --into NAME ...    also, per ping: calls into each
                                         function whose name holds NAME and
                                         their inclusive cost (instructions,
                                         first-level data misses)
  bench/costs.py FILE --callers NAME     also, per ping: who calls functions
                                         whose name holds NAME, and how often

Inclusive costs are summed over calls from functions whose own name does
not hold NAME, so a recursive or re-entered function counts once.
"""
import argparse
import collections
import re

NAME = re.compile(r'^(fl|fi|fe|fn|cfn|cfi|cfl|ob|cob)=\((\d+)\)(?: (.*))?$')


def calls(path):
    """The events, the totals, and each call as (caller, callee, count, costs)."""
    fns, events, totals, fn, cfn, count = {}, [], [], None, None, None
    found = []
    # Position columns before the costs: `line`, or `instr line` when
    # callgrind ran with --dump-instr=yes (FRAMES=1 in instructions.sh).
    npos = 1
    for raw in open(path):
        line = raw.rstrip('\n')
        m = NAME.match(line)
        if m:
            kind, idx, name = m.groups()
            if kind in ('fn', 'cfn'):
                if name:
                    fns[idx] = name
                if kind == 'fn':
                    fn = fns[idx]
                else:
                    cfn = fns[idx]
            continue
        if line.startswith('positions:'):
            npos = len(line.split()[1:])
        elif line.startswith('events:'):
            events = line.split()[1:]
        elif line.startswith(('summary:', 'totals:')):
            totals = [int(v) for v in line.split()[1:]]
        elif line.startswith('calls='):
            count = int(line.split('=')[1].split()[0])
        elif count is not None and line[:1] and (line[0].isdigit() or line[0] in '+-*'):
            # The cost line after `calls=` is the call's inclusive cost,
            # after its position columns; trailing zeros are left out.
            costs = [int(v) for v in line.split()[npos:]]
            costs += [0] * (len(events) - len(costs))
            found.append((fn, cfn, count, costs))
            count = None
    return events, totals, found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('file')
    ap.add_argument('--label', default='')
    ap.add_argument('--into', nargs='*', default=[])
    ap.add_argument('--callers')
    args = ap.parse_args()
    events, totals, found = calls(args.file)
    pings = sum(n for _, callee, n, _ in found if 'Http1Transaction>::encode' in callee)
    per = {e: v / max(pings, 1) for e, v in zip(events, totals)}
    label = f'{args.label}: ' if args.label else ''
    print(f"{label}{totals[0]} instructions over {pings} pings = {per['Ir']:.0f} per ping")
    cache = 'D1mr' in per
    if cache:
        print(f"  per ping: {per['Dr']:.0f} data reads, {per['Dw']:.0f} writes; "
              f"first-level data misses {per['D1mr']:.0f} read + {per['D1mw']:.0f} write; "
              f"last-level (2 MiB) data misses {per['DLmr']:.0f} read + {per['DLmw']:.0f} write")
    col = {e: i for i, e in enumerate(events)}
    for want in args.into:
        n, ir, miss = 0, 0, 0
        for caller, callee, count, costs in found:
            if want in callee and want not in caller:
                n += count
                ir += costs[col['Ir']]
                if cache:
                    miss += costs[col['D1mr']] + costs[col['D1mw']]
        line = f"  into {want}: {n / max(pings, 1):.2f} calls, {ir / max(pings, 1):.0f} instructions"
        if cache:
            line += f", {miss / max(pings, 1):.0f} first-level data misses"
        print(line + ' per ping')
    if args.callers:
        by = collections.Counter()
        for caller, callee, count, _ in found:
            if args.callers in callee:
                by[caller] += count
        print(f"  calls into {args.callers}, {sum(by.values()) / max(pings, 1):.2f} per ping, from:")
        for caller, count in by.most_common(15):
            print(f"    {count / max(pings, 1):6.2f} {caller[:140]}")


if __name__ == '__main__':
    main()
