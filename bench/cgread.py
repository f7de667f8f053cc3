#!/usr/bin/env python3
"""Instructions per operation from two cachegrind runs of one benchmark.

usage: cgread.py BASE_N1 BASE_N2 HEAD_N1 HEAD_N2 N1 N2 [TOP]

Each argument but N1, N2 and TOP is a cachegrind out file of the same
benchmark run with -test.benchtime N1x or N2x; per operation is
(I refs at N2 - at N1) / (N2 - N1), so set-up cancels. It prints the totals,
the totals without the runtime's scheduler, GC, timer and clock functions
(which run a varying number of times per run), and the TOP functions that
differ most between base and head. Made for BENCHMARKS.md (session 9).
"""
import collections, re, subprocess, sys

SCHED = re.compile(r'^(runtime\.(findRunnable|schedule|execute|gosched|casgstatus|lock2|unlock2|lock|unlock|wakep|mcall|globrunq|pidle|\(\*timers\)|GC$|\(\*gcController|\(\*m\)\.clearAllp|nanotime|notewakeup|futex|usleep|stealWork|checkTimers|park_m|ready|runq|netpoll|resetspinning|startm|stopm|mPark|gopark|goready|sem|sysmon|gcBgMark|gcDrain|scan|greyobject|markroot|sweep|bgsweep|bgscavenge|gcmark|tryDefer|findObject|wbBuf|bulkBarrier|typePointers|spanOf|.*gcWork|procyield|osyield|retake|signal|sig|exitsyscall|entersyscall|reentersyscall|handoff|acquirep|releasep|mstart|newstack|morestack|gfget|gfput|injectglist|traceAcquire|walltime|mcommoninit)|gogo|gcWriteBarrier|runtime.pMask|internal/runtime/syscall|time.now|runtime\.\(\*.*(pageAlloc|mheap|mcentral).*)')


def load(path):
    out = subprocess.run(['cg_annotate', '--show-percs=no', '--threshold=0', path],
                         capture_output=True, text=True, check=True).stdout
    d, sect = collections.Counter(), False
    for line in out.splitlines():
        if 'file:function' in line:
            sect = True
            continue
        if sect and line.startswith('----') and d:
            break
        m = re.match(r'^\s*([\d,]+)\s+(\S.*)$', line)
        if sect and m:
            d[m.group(2).split(':', 1)[-1]] += int(m.group(1).replace(',', ''))
    return d


def per(f1, f2, n1, n2):
    a, b = load(f1), load(f2)
    return {k: (b[k] - a[k]) / (n2 - n1) for k in set(a) | set(b)}


def main():
    b1, b2, h1, h2, n1, n2 = sys.argv[1:7]
    top = int(sys.argv[7]) if len(sys.argv) > 7 else 30
    B, H = per(b1, b2, int(n1), int(n2)), per(h1, h2, int(n1), int(n2))
    own = lambda d: sum(v for k, v in d.items() if not SCHED.match(k))
    print('all: base %.0f head %.0f' % (sum(B.values()), sum(H.values())))
    print('without scheduler/GC/clock: base %.0f head %.0f' % (own(B), own(H)))
    for k in sorted(set(B) | set(H), key=lambda k: -abs(H.get(k, 0) - B.get(k, 0)))[:top]:
        print('%8.0f %8.0f %8.0f  %s' % (B.get(k, 0), H.get(k, 0), H.get(k, 0) - B.get(k, 0), k[:110]))


if __name__ == '__main__':
    main()
