#!/usr/bin/env python3
"""Where a readerd profile's samples go, by the code that asked for the work.

    python3 bench/sweep.py READERD DATA --workloads tabular --rounds 1 --perf DIR --dwarf
    python3 bench/profile_owners.py DIR/perf-shared-0.data [--top 40] [--by-work]

Each sample is attributed to the innermost frame of its stack that is readerd's, tonic's,
h2's, hyper's, prost's, mio's or tokio's blocking pool, so that a memmove or a malloc counts
for the function that called it (`bench/profile_shares.py` counts them by kind instead). With
`--by-work`, to the work its whole stack shows instead (decoding, reading files, encoding
messages, unary RPCs such as acknowledgements, the socket...), the first of `WORK` that
matches. Needs a profile with DWARF call graphs: frame-pointer stacks of a release build are
cut short.
"""

import argparse
import collections
import subprocess

OWNERS = ("readerd", "tonic", "h2::", "hyper", "prost", "tokio::runtime::blocking", "mio::")

# (work, patterns): a sample is the first work any frame of whose stack has a pattern.
WORK = [
    ("decoding (parse_into)", ["parse_into"]),
    ("encoding messages", ["EncodedElement", "Frames::", "element_to_pb", "split_rows"]),
    ("Read body, other", ["FramesBody"]),
    ("the stream's task", ["ElementStream", "stream_elements"]),
    ("unary RPCs (acknowledgements...)", ["H2Stream"]),
    ("socket writes", ["write_vectored"]),
    ("HTTP/2 connection, other", ["Connection<T,P,B>::poll", "h2::"]),
    ("reading and framing files", ["interleave", "record_file", "TimedRead", "Framer"]),
    ("taking chunks, other", ["read_chunk", "next_chunk", "take_chunk", "decod"]),
    ("blocking pool, other", ["blocking::pool"]),
]


def work(frames: list[str]) -> str:
    for name, patterns in WORK:
        if any(pattern in frame for frame in frames for pattern in patterns):
            return name
    return "other"


def owner(frames: list[str]) -> str:
    for name in frames:
        if any(key in name for key in OWNERS) and not name.startswith("core::"):
            return name[:120]
    return "other: " + (frames[0][:80] if frames else "?")


def samples(path: str):
    script = subprocess.run(["perf", "script", "-i", path, "-F", "comm,ip,sym", "--no-inline"],
                            capture_output=True, text=True, errors="replace", check=True).stdout
    frames: list[str] = []
    for line in script.splitlines() + [""]:
        if not line.strip():
            if frames:
                yield frames
            frames = []
        elif line[0] in "\t ":
            parts = line.strip().split(" ", 1)
            frames.append(parts[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("profile")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--by-work", action="store_true", help="group by the work the stack shows")
    args = parser.parse_args()
    group = work if args.by_work else owner
    owners = collections.Counter(group(frames) for frames in samples(args.profile))
    total = sum(owners.values())
    for name, count in owners.most_common(args.top):
        print(f"{count:7d} {100 * count / total:5.1f}% {name}")
    print(f"{total} samples")


if __name__ == "__main__":
    main()
