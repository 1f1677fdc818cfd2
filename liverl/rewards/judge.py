"""The generative judge's client: several rubrics per trajectory through an OpenAI-compatible chat endpoint.

- averaged: a trajectory's score is the mean over the rubrics that answered (a policy that learns to please
  one rubric gains little); fewer than judge.min_rubrics answers leaves it unjudged;
- cached by content hash: sha256 of (model, rubric, transcript), so relabelling a batch costs nothing;
- batched: one call takes many trajectories, dedupes identical requests and sends them max_concurrency at a
  time, each with judge.timeout_s; the whole batch stops at judge.batch_timeout_s;
- retried as the `openai` client retries (judge.max_retries, exponential backoff with jitter, honouring
  Retry-After): connection errors, timeouts, 408, 409, 429 and 5xx; never another 4xx. An unparsable reply is
  asked again only when sampling (temperature > 0): at temperature 0 the same question gets the same answer;
- unjudged is a state, not an error: Judgement(score=None, reason=...) and `label` writes no judge component.
This is the only I/O of the reward library; `label` itself stays pure (it takes the Judgement).
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from statistics import fmean

import openai
from cachetools import LRUCache

from liverl.config.rewards import JudgeConfig
from liverl.rewards.judge_prompt import SYSTEM_PROMPT, parse_score, render_transcript, user_prompt
from liverl.rewards.judgement import Judgement
from liverl.rewards.session import SessionRecord


class Judge:
    def __init__(self, config: JudgeConfig):
        self.config = config
        # An endpoint without keys still gets a placeholder bearer: the client insists on one.
        self._client = openai.OpenAI(base_url=config.base_url, api_key=config.api_key or "unused",
                                     default_headers=dict(config.headers), max_retries=config.max_retries,
                                     timeout=config.timeout_s)
        self._cache: LRUCache[str, float] = LRUCache(maxsize=config.cache_size)
        self.stats: Counter[str] = Counter()  # requests, cache_hits, failures, judged, unjudged
        self._stats_lock = threading.Lock()  # requests are counted from the sender threads

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "Judge":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def key(self, rubric: str, transcript: str) -> str:
        return hashlib.sha256("\x1f".join((self.config.model, rubric, transcript)).encode()).hexdigest()

    def judge(self, session: SessionRecord, agent_id: str) -> Judgement:
        return self.judge_many([(session, agent_id)])[0]

    def judge_many(self, items: Sequence[tuple[SessionRecord, str]]) -> list[Judgement]:
        """One Judgement per (session, agent_id), in order."""
        rubrics = self.config.rubrics
        keys: list[dict[str, str]] = []  # per item: rubric name -> request key
        prompts: dict[str, tuple[str, str]] = {}  # key -> (rubric, transcript), deduplicated
        for session, agent_id in items:
            transcript = render_transcript(session, agent_id, self.config.max_transcript_chars)
            item_keys = {}
            for name, rubric in rubrics.items():
                item_keys[name] = key = self.key(rubric, transcript)
                prompts.setdefault(key, (rubric, transcript))
            keys.append(item_keys)
        known = {k: self._cache[k] for k in prompts if k in self._cache}  # a read marks it recently used
        self.stats["cache_hits"] += len(known)
        fresh, errors = self._ask_all({k: p for k, p in prompts.items() if k not in known})
        self._cache.update(fresh)
        return [self._assemble(item_keys, known, fresh, errors) for item_keys in keys]

    def _ask_all(self, pending: dict[str, tuple[str, str]]) -> tuple[dict[str, float], dict[str, str]]:
        """Ask the endpoint for every pending key: (key -> score, key -> error)."""
        scores: dict[str, float] = {}
        errors: dict[str, str] = {}
        if not pending:
            return scores, errors
        pool = ThreadPoolExecutor(max_workers=max(1, min(self.config.max_concurrency, len(pending))),
                                  thread_name_prefix="liverl-judge")
        try:
            futures = {pool.submit(self._ask, *prompt): key for key, prompt in pending.items()}
            done, not_done = wait(futures, timeout=self.config.batch_timeout_s)
            for future in not_done:
                errors[futures[future]] = f"batch timeout after {self.config.batch_timeout_s}s"
            for future in done:
                key = futures[future]
                try:
                    scores[key] = future.result()
                except Exception as error:  # one failed rubric is an unjudged state, never a crash
                    errors[key] = f"{type(error).__name__}: {error}"
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        self.stats["failures"] += len(errors)
        return scores, errors

    def _ask(self, rubric: str, transcript: str) -> float:
        """One rubric's score; transport retries happen inside the client (see the module doc)."""
        messages = [{"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": user_prompt(rubric, transcript)}]
        asks = 1 + (self.config.max_retries if self.config.temperature > 0 else 0)
        for ask in range(asks):
            with self._stats_lock:
                self.stats["requests"] += 1
            reply = self._client.chat.completions.create(model=self.config.model, messages=messages,
                                                         temperature=self.config.temperature, max_tokens=8)
            try:
                return parse_score(reply.choices[0].message.content or "")
            except (IndexError, ValueError):
                if ask == asks - 1:
                    raise
        raise AssertionError("unreachable: the last ask returns or raises")

    def _assemble(self, item_keys: dict[str, str], known: dict[str, float], fresh: dict[str, float],
                  errors: dict[str, str]) -> Judgement:
        scores, reasons, cached = {}, [], 0
        for name, key in item_keys.items():
            if key in known:
                scores[name] = known[key]
                cached += 1
            elif key in fresh:
                scores[name] = fresh[key]
            else:
                reasons.append(f"{name}: {errors.get(key, 'no answer')}")
        if len(scores) < self.config.min_rubrics:
            self.stats["unjudged"] += 1
            return Judgement(score=None, rubric_scores=scores, cached_rubrics=cached,
                             reason=f"{len(scores)} of {len(item_keys)} rubrics scored; " + "; ".join(reasons))
        self.stats["judged"] += 1
        return Judgement(score=fmean(scores.values()), rubric_scores=scores, reason="; ".join(reasons),
                         cached_rubrics=cached)
