#!/usr/bin/env python3
"""Instructions per ping by source function, inlined ones included, from a
callgrind output file recorded with instruction addresses (FRAMES=1
bench/instructions.sh ..., which runs this). A supervisor's whole future
is inlined into tokio's task poll, so by symbol (bench/costs.py) a ping is
one function; here each instruction is charged to every function of the
project's own source in its inline chain (addr2line -i), with the calls
it makes, so a line reads as that function's inclusive cost.

  bench/frames.py FILE BINARY [--top N]

An async fn's body, an async block or a closure shows as `{async_fn#0}`,
`{async_block#0}` or `{closure#0}` with the line it was at: which await
point or call inside it the cost went through. A function that reaches
itself again through a call that is not inlined (a `main` whose runtime
polls the tasks it spawned) is charged twice over: such a line is an
upper bound.
"""
import argparse
import collections
import os
import re
import subprocess

NAME = re.compile(r'^(fn|cfn|ob|cob)=\((\d+)\)(?: (.*))?$')
# A frame of the project's own source, not of a crate or the standard library.
OWN = re.compile(r'/(src|examples)/\S+\.rs:')
FOREIGN = ('/registry/src/', '/rustc/', '/library/', '/git/checkouts/')


def position(token, last):
    """A callgrind position column: absolute, relative (+n, -n) or same (*)."""
    if token == '*':
        return last
    if token[0] in '+-':
        return last + int(token, 0)
    return int(token, 0)


def costs(path, binary):
    """Instructions charged at each address of `binary` (its own and its
    calls' inclusive), those it ran itself in all, and the pings: calls to
    hyper's request encoder."""
    names, objects = {}, {}
    mine, callee, count = False, None, None
    at, pings, own = 0, 0, 0
    charged = collections.Counter()
    for raw in open(path):
        line = raw.rstrip('\n')
        m = NAME.match(line)
        if m:
            kind, idx, name = m.groups()
            table = objects if kind in ('ob', 'cob') else names
            if name:
                table[idx] = name
            if kind == 'ob':
                mine = os.path.realpath(table[idx]) == binary
            elif kind == 'cfn':
                callee = table[idx]
            continue
        if line.startswith('positions:') and 'instr' not in line:
            raise SystemExit(f'{path}: no instruction addresses (record with FRAMES=1)')
        if line.startswith('calls='):
            count = int(line.split('=')[1].split()[0])
            continue
        if line[:1] and (line[0].isdigit() or line[0] in '+-*'):
            # Columns: address, line, then the cost (trailing zeros left out).
            cols = line.split()
            at = position(cols[0], at)
            cost = int(cols[2]) if len(cols) > 2 else 0
            if count is not None and 'Http1Transaction>::encode' in (callee or ''):
                pings += count
            if mine:
                charged[at] += cost
                own += cost if count is None else 0
            count = None
    return charged, own, pings


def chains(binary, addresses):
    """Each address's inline chain, innermost first, as (function, location)."""
    out = subprocess.run(['addr2line', '-i', '-f', '-C', '-a', '-e', binary],
                         input='\n'.join(hex(a) for a in addresses),
                         capture_output=True, text=True, check=True).stdout.split('\n')
    found, at, lines = {}, None, []
    for line in out + ['0x0']:
        if re.fullmatch(r'0x[0-9a-f]+', line):
            if at is not None:
                found[at] = list(zip(lines[0::2], lines[1::2]))
            at, lines = int(line, 16), []
        else:
            lines.append(line)
    return found


def frame(function, location):
    """A frame's name: the function, or an async body or closure with the
    line it was at."""
    name = function.replace('::{{closure}}', '')
    if name.startswith(('{async_fn', '{async_block', '{closure')):
        name += ' ' + re.sub(r'^.*?/(src|examples)/', r'\1/', location)
    return name


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('file')
    ap.add_argument('binary')
    ap.add_argument('--top', type=int, default=40)
    args = ap.parse_args()
    binary = os.path.realpath(args.binary)
    charged, own, pings = costs(args.file, binary)
    if not pings:
        raise SystemExit(f'{args.file}: no pings of {args.binary}')
    by_frame = collections.Counter()
    for at, chain in chains(binary, sorted(charged)).items():
        frames = {frame(f, loc) for f, loc in chain
                  if OWN.search(loc) and not any(x in loc for x in FOREIGN)}
        for name in frames:
            by_frame[name] += charged[at]
    print(f'{own / pings:.0f} instructions a ping in {args.binary} itself (libc aside), '
          f'over {pings} pings; by function of its own source, inclusive:')
    for name, n in by_frame.most_common(args.top):
        print(f'{n / pings:8.0f}  {name[:150]}')


if __name__ == '__main__':
    main()
