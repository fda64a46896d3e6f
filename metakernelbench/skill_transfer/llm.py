"""One LLM annotator behind LiteLLM: temperature 0, a schema for every answer, retries, a cache.

Any LiteLLM model string works (``anthropic/...``, ``openai/...``, ``openrouter/...``, or
``openai/<name>`` with ``api_base`` for a local OpenAI-compatible server), so the annotator can be
any provider Harbor's agents use. Each question has a fixed prompt; its hash (model, pass, rubric
version, layer, messages, schema) names the cache entry, so a rerun over the same attempts sends
nothing. A reply must be one JSON object that validates against the layer's schema and whose
quotes occur in the material shown; otherwise the model is told what was wrong and asked again, up
to ``max_tries`` times in all. An item that never gets a valid answer is returned unlabelled with
the last problem: it is never guessed, and it is not cached, so a later run tries it again.
Transient provider errors (connection, timeout, rate limit, 5xx) count as tries and back off;
errors that no retry can fix (authentication, an unknown model, a refused request) stop the run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from .annotation_models import ANSWER_SCHEMAS, Answer
from .rubric import RUBRIC_VERSION

__all__ = [
    "Annotator", "AnnotatorError", "AnnotatorSettings", "Checker", "Reply", "TRANSIENT", "extract_json",
    "parse_answer",
]

# LiteLLM fetches its price list from the network when imported; annotations need no prices.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402
from litellm import exceptions as llm_errors  # noqa: E402

TRANSIENT = (
    llm_errors.APIConnectionError,
    llm_errors.Timeout,
    llm_errors.RateLimitError,
    llm_errors.ServiceUnavailableError,
    llm_errors.InternalServerError,
    llm_errors.BadGatewayError,
)
Checker = Callable[[Answer], list[str]]


class AnnotatorError(RuntimeError):
    """The annotator cannot run at all (bad credentials, unknown model, refused request)."""


class AnnotatorSettings(BaseModel):
    """How to reach the annotator model and how hard to try."""

    model_config = ConfigDict(extra="forbid")

    model: str
    api_base: str | None = None
    api_key: str | None = None
    pass_id: int = 1
    max_tries: int = 3
    timeout_s: float = 300.0
    backoff_s: float = 2.0
    max_tokens: int = 4096
    cache_dir: Path


class Reply(BaseModel):
    """What one question came to: an answer, or the reason there is none."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    input_hash: str
    answer: Answer | None = None
    error: str | None = None
    tries: int = 0
    cached: bool = False


def extract_json(text: str) -> object:
    """The JSON object in a reply: the whole text, else a fenced block, else the outermost braces."""
    text = text.strip()
    fenced = re.search(r"```(?:json)?\s*(\{.*\})\s*```", text, flags=re.S)
    candidates = [text] + ([fenced.group(1)] if fenced else [])
    if "{" in text and "}" in text:
        candidates.append(text[text.index("{"): text.rindex("}") + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    raise ValueError("the reply holds no JSON object")


def parse_answer(layer: str, text: str, check: Checker) -> tuple[Answer | None, list[str]]:
    """(answer, problems): the reply validated against the layer's schema, then its quotes checked."""
    try:
        data = extract_json(text)
        answer = ANSWER_SCHEMAS[layer].model_validate(data)
    except ValidationError as exc:
        return None, [f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}" for e in exc.errors()]
    except ValueError as exc:
        return None, [str(exc)]
    problems = check(answer)
    return (None, problems) if problems else (answer, [])


class Annotator:
    """Asks one model the annotation questions, through the cache."""

    def __init__(self, settings: AnnotatorSettings) -> None:
        self.settings = settings
        self.calls = 0  # requests actually sent, for the summary and for tests of the cache
        settings.cache_dir.mkdir(parents=True, exist_ok=True)

    def input_hash(self, layer: str, messages: list[dict[str, str]]) -> str:
        key = {
            "model": self.settings.model,
            "pass": self.settings.pass_id,
            "rubric": RUBRIC_VERSION,
            "layer": layer,
            "schema": ANSWER_SCHEMAS[layer].model_json_schema(),
            "messages": messages,
        }
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()

    def _cache_path(self, key: str) -> Path:
        return self.settings.cache_dir / f"{key}.json"

    def _from_cache(self, layer: str, key: str, check: Checker) -> Answer | None:
        path = self._cache_path(key)
        if not path.is_file():
            return None
        try:
            answer, problems = parse_answer(layer, json.loads(path.read_text())["answer_json"], check)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return None if problems else answer

    def _complete(self, messages: list[dict[str, str]]) -> str:
        s = self.settings
        self.calls += 1
        try:
            response = litellm.completion(
                model=s.model,
                messages=messages,
                temperature=0,
                max_tokens=s.max_tokens,
                api_base=s.api_base,
                api_key=s.api_key,
                timeout=s.timeout_s,
                num_retries=0,
            )
        except TRANSIENT:
            raise
        except (llm_errors.AuthenticationError, llm_errors.NotFoundError, llm_errors.BadRequestError,
                llm_errors.PermissionDeniedError) as exc:
            raise AnnotatorError(f"the annotator model {s.model!r} refused the request: {exc}") from exc
        content = response.choices[0].message.content
        return content if isinstance(content, str) else ""

    def ask(self, layer: str, messages: list[dict[str, str]], check: Checker) -> Reply:
        """One question: from the cache, else up to ``max_tries`` requests until an answer validates."""
        key = self.input_hash(layer, messages)
        cached = self._from_cache(layer, key, check)
        if cached is not None:
            return Reply(input_hash=key, answer=cached, cached=True)
        conversation = list(messages)
        error = "no try was made"
        for tries in range(1, self.settings.max_tries + 1):
            try:
                text = self._complete(conversation)
            except TRANSIENT as exc:
                error = f"{type(exc).__name__}: {str(exc)[:300]}"
                if tries < self.settings.max_tries:
                    time.sleep(self.settings.backoff_s * 2 ** (tries - 1))
                continue
            answer, problems = parse_answer(layer, text, check)
            if answer is not None:
                self._cache_path(key).write_text(json.dumps(
                    {"model": self.settings.model, "layer": layer, "answer_json": answer.model_dump_json()}))
                return Reply(input_hash=key, answer=answer, tries=tries)
            error = "malformed answer: " + "; ".join(problems)[:1000]
            conversation = [*messages, {"role": "assistant", "content": text}, {"role": "user", "content": (
                "That answer cannot be used: " + "; ".join(problems)[:2000]
                + "\nAnswer again with one JSON object that follows the schema; copy every quote verbatim.")}]
        return Reply(input_hash=key, error=error, tries=self.settings.max_tries)
