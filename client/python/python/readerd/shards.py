"""Shards of a spec for several readers of one job (DataLoader workers, ranks).

Kept apart from :mod:`readerd.torch` so it needs no torch.
"""

from __future__ import annotations

import copy

__all__ = ["worker_spec"]


def worker_spec(spec: dict, worker: int, workers: int) -> dict:
    """``spec`` for worker ``worker`` of ``workers``: its ``pipeline.shard`` (count ``c``,
    index ``i``; absent is 1, 0) split ``workers`` ways, as count ``c * workers`` and index
    ``i + c * worker``. The records of shard ``i`` of ``c`` are those whose position is
    ``i`` modulo ``c``; worker ``w`` takes those that are ``i + c * w`` modulo ``c * workers``,
    so the workers of all ``c`` shards together read every record once.

    The server shards by file when there are at least as many files as shards, else by
    record; with ``c <= files < c * workers`` the workers' shards are by record, so a
    shard's workers read shard ``i`` of the records instead of shard ``i`` of the files (still
    each record once over all shards and workers). A mixture's components are sharded the
    same way, each component of the spec on its own."""
    if workers < 1 or not 0 <= worker < workers:
        raise ValueError(f"worker {worker} of {workers}: need 0 <= worker < workers")
    out = copy.deepcopy(spec)
    targets = [d for d in out.get("mix", {}).get("datasets", [])] if "mix" in out else [out]
    for target in targets:
        select = target.get("pipeline", {}).get("select", {})
        if select.get("skip") or select.get("take"):
            # The server applies them to each shard: every worker would skip or take its own.
            raise ValueError("pipeline.select skip / take apply per shard: read with a shared_name instead")
        pipeline = target.setdefault("pipeline", {})
        shard = pipeline.get("shard") or {}
        count, index = int(shard.get("count", 1) or 1), int(shard.get("index", 0) or 0)
        pipeline["shard"] = {"count": count * workers, "index": index + count * worker}
    return out
