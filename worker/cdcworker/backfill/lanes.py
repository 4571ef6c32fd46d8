"""Distributing chunks: per shard at most N lanes, a lane's chunks run one after another (pure).

A lane is one Spark partition (one task), so at most ``max_concurrent_chunks_per_shard`` chunks
of a shard are ever read at once, however many executor cores there are. Lanes are ordered
round-robin over shards so that the first tasks Spark schedules spread over the shards.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from cdcworker.backfill.spec import Chunk


def make_lanes(chunks: Sequence[Chunk], per_shard: int) -> list[list[Chunk]]:
    by_shard: dict[str, list[Chunk]] = defaultdict(list)
    for c in chunks:
        by_shard[c.shard].append(c)
    per_lane: dict[str, list[list[Chunk]]] = {}
    for shard, items in by_shard.items():
        n = max(1, min(per_shard, len(items)))
        lanes: list[list[Chunk]] = [[] for _ in range(n)]
        for i, c in enumerate(items):
            lanes[i % n].append(c)
        per_lane[shard] = lanes
    out: list[list[Chunk]] = []
    depth = max((len(v) for v in per_lane.values()), default=0)
    for i in range(depth):
        for shard in sorted(per_lane):
            lanes = per_lane[shard]
            if i < len(lanes):
                out.append(lanes[i])
    return out
