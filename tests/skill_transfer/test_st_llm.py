"""The LLM annotator against a local stub server: parsing, quote checks, retries, cache, errors."""

import json
import os

import pytest
from annotator_stub import StubModelServer

os.environ.setdefault("OPENAI_API_KEY", "stub-local")  # LiteLLM's OpenAI client wants a key; the stub ignores it

from metakernelbench.skill_transfer import prompts  # noqa: E402
from metakernelbench.skill_transfer.annotation_models import SkillLabels  # noqa: E402
from metakernelbench.skill_transfer.llm import Annotator, AnnotatorError, AnnotatorSettings, extract_json  # noqa: E402
from metakernelbench.skill_transfer.quotes import missing_quotes  # noqa: E402

SKILL = "Keeping the reduction in fp32 was necessary; bf16 accumulation failed the anchor check.\n"
GOOD = {"labels": [{"category": "evidence_backed_finding", "quote": "bf16 accumulation failed the anchor check"}]}
MESSAGES = prompts.messages("labels", "problem 28", {"SKILL": SKILL})


def check(answer):
    return missing_quotes([lb.quote for lb in answer.labels], SKILL, "skill")


def annotator(server, tmp_path, **kw):
    settings = AnnotatorSettings(model="openai/stub", api_base=server.base_url, cache_dir=tmp_path / "cache",
                                 backoff_s=0, **kw)
    return Annotator(settings)


def scripted(*replies):
    """A respond function that plays ``replies`` in order, then repeats the last one."""
    queue = list(replies)

    def respond(messages):
        return queue.pop(0) if len(queue) > 1 else queue[0]
    return respond


def test_valid_answer_is_parsed_then_served_from_the_cache(tmp_path):
    with StubModelServer(scripted((200, json.dumps(GOOD)))) as server:
        first = annotator(server, tmp_path).ask("labels", MESSAGES, check)
        again = annotator(server, tmp_path)
        second = again.ask("labels", MESSAGES, check)
        assert len(server.requests) == 1 and again.calls == 0
    assert isinstance(first.answer, SkillLabels) and first.answer.categories == {"evidence_backed_finding"}
    assert (first.tries, first.cached, second.cached) == (1, False, True)
    assert second.answer == first.answer and second.input_hash == first.input_hash
    # the request is made at temperature 0 with the instruction holding the schema and the rubric
    assert server.requests[0][0]["role"] == "system" and "evidence_backed_finding" in server.requests[0][0]["content"]


def test_the_cache_key_covers_model_pass_and_material(tmp_path):
    with StubModelServer(scripted((200, json.dumps(GOOD)))) as server:
        a = annotator(server, tmp_path)
        keys = {a.input_hash("labels", MESSAGES),
                annotator(server, tmp_path, pass_id=2).input_hash("labels", MESSAGES),
                a.input_hash("labels", prompts.messages("labels", "problem 29", {"SKILL": SKILL}))}
        assert len(keys) == 3
        annotator(server, tmp_path, pass_id=2).ask("labels", MESSAGES, check)
        a.ask("labels", MESSAGES, check)
        assert len(server.requests) == 2  # a second pass is not served from the first pass's cache


def test_fenced_json_is_accepted():
    assert extract_json("Here it is:\n```json\n{\"a\": 1}\n```") == {"a": 1}
    with pytest.raises(ValueError):
        extract_json("no object here")


def test_malformed_answer_is_retried_with_the_reason(tmp_path):
    with StubModelServer(scripted((200, "I think it is a finding."), (200, json.dumps(GOOD)))) as server:
        reply = annotator(server, tmp_path).ask("labels", MESSAGES, check)
        retry = server.requests[1]
    assert reply.answer is not None and reply.tries == 2
    assert retry[-2] == {"role": "assistant", "content": "I think it is a finding."}
    assert "no JSON object" in retry[-1]["content"]


@pytest.mark.parametrize("bad", [
    {"labels": [{"category": "not_a_category", "quote": "fp32"}]},
    {"labels": [{"category": "open_question", "quote": "splitting the KV sequence"}]},  # not in the skill
    {"labels": [{"category": "toolchain_note", "quote": "fp32"}, {"category": "toolchain_note", "quote": "bf16"}]},
    {"labels": [], "extra": 1},
])
def test_never_valid_answer_is_unlabelled_and_not_cached(tmp_path, bad):
    with StubModelServer(scripted((200, json.dumps(bad)))) as server:
        reply = annotator(server, tmp_path, max_tries=3).ask("labels", MESSAGES, check)
        assert len(server.requests) == 3
        assert annotator(server, tmp_path, max_tries=3).ask("labels", MESSAGES, check).answer is None
        assert len(server.requests) == 6  # nothing was cached: a rerun tries again
    assert reply.answer is None and reply.tries == 3 and reply.error.startswith("malformed answer")
    assert not list((tmp_path / "cache").iterdir())


def test_transient_server_errors_are_retried(tmp_path):
    with StubModelServer(scripted((500, "overloaded"), (200, json.dumps(GOOD)))) as server:
        reply = annotator(server, tmp_path).ask("labels", MESSAGES, check)
        assert len(server.requests) == 2
    assert reply.answer is not None and reply.tries == 2


def test_persistent_server_errors_leave_the_item_unlabelled(tmp_path):
    with StubModelServer(scripted((503, "down"))) as server:
        reply = annotator(server, tmp_path, max_tries=2).ask("labels", MESSAGES, check)
    assert reply.answer is None and "ServiceUnavailable" in reply.error


def test_refused_credentials_stop_the_run(tmp_path):
    with StubModelServer(scripted((401, "bad key"))) as server, pytest.raises(AnnotatorError, match="refused"):
        annotator(server, tmp_path).ask("labels", MESSAGES, check)
