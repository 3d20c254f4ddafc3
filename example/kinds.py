"""`example.word_count`: counts words in a text, in chunks; fails transiently on request."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rest_framework import serializers

from jobs.kinds import AttemptContext, Kind, RetryableError, register
from jobs.policy import Policy

CHUNK_WORDS = 1000


class WordCountPayload(serializers.Serializer):
    text = serializers.CharField(max_length=1_000_000, allow_blank=True)
    top = serializers.IntegerField(min_value=1, max_value=100, default=5)
    # Demo only: the first attempts fail as a flaky storage would.
    fail_times = serializers.IntegerField(min_value=0, max_value=10, default=0)


@register
class WordCount(Kind):
    name = "example.word_count"
    payload_serializer = WordCountPayload
    policy = Policy(max_attempts=4, soft_time_limit=20, hard_time_limit=30, backoff_base=0.5)

    def run(self, payload: dict[str, Any], ctx: AttemptContext) -> Any:
        if ctx.attempt <= payload["fail_times"]:
            raise RetryableError(f"storage busy (attempt {ctx.attempt})", retry_after=0.5)
        words = payload["text"].lower().split()
        counts: Counter[str] = Counter()
        for start in range(0, len(words), CHUNK_WORDS):
            ctx.raise_if_cancelled()
            counts.update(words[start : start + CHUNK_WORDS])
            done = min(start + CHUNK_WORDS, len(words))
            ctx.progress(done, len(words), f"{done:,} words")
        return {"words": len(words), "top": counts.most_common(payload["top"])}
