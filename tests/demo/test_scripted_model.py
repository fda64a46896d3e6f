"""The scripted model speaks OpenAI chat completions the way LiteLLM (Terminus-2's client) reads them."""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from demo.scripted_model import ModelConfig, serve_in_thread  # noqa: E402

TASK = "25_batched_kv_cache_block_copy_remap_uint8_tirx"
INSTRUCTION = (REPO / "tasks" / TASK / "instruction.md").read_text()
KERNEL = REPO / "tests" / "fixtures" / "kernels" / "blockcopy_tirx_llvm.py"


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # read before importing: no price-list download
    srv = serve_in_thread(ModelConfig(kernels={TASK: KERNEL}), log=tmp_path / "model.jsonl")
    yield srv
    srv.shutdown()


def post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_litellm_reads_the_reply_as_terminus_2_does(server):
    import litellm

    async def ask(stream: bool):
        return await litellm.acompletion(model="openai/mkb-scripted", api_base=server.base_url, api_key="local",
                                         messages=[{"role": "user", "content": INSTRUCTION}], stream=stream,
                                         drop_params=True)

    answer = asyncio.run(ask(False))
    reply = json.loads(answer.choices[0].message.content)
    assert reply["plan"].startswith("(step look)") and reply["commands"][0]["keystrokes"].endswith("\n")
    assert answer.choices[0].finish_reason == "stop" and answer.usage.prompt_tokens > 0

    async def streamed():
        return "".join([c.choices[0].delta.content or "" async for c in await ask(True)])

    assert json.loads(asyncio.run(streamed())) == reply
    logged = [json.loads(line) for line in server.log.read_text().splitlines()]
    assert len(logged) == 2 and logged[0]["messages"][0]["content"] == INSTRUCTION


def test_errors_are_openai_shaped(server):
    code, body = post(f"{server.base_url}/chat/completions",
                      {"model": "m", "messages": [{"role": "user", "content": "no task here"}]})
    assert code == 400 and "names no MetaKernelBench task" in body["error"]["message"]
    code, body = post(f"{server.base_url}/chat/completions", {"model": "m"})
    assert code == 400 and "messages" in body["error"]["message"]
    code, body = post(f"{server.base_url}/embeddings", {"model": "m", "input": "x"})
    assert code == 404
    with urllib.request.urlopen(f"{server.base_url}/models", timeout=10) as resp:
        assert json.loads(resp.read())["data"][0]["id"] == "mkb-scripted"
