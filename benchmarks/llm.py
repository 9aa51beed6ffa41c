"""The model layer on this machine: load time, prefill and decode speed, `choose` and `answer` latency.

    python benchmarks/llm.py --out bench-out/llm.json

Load is measured twice in fresh subprocesses: first with an empty model cache (the GGUF is de-quantised and
saved as safetensors), then from that cache. The rest runs in one process with the call cache off, so every
figure is real model work. `choose` options are "concept N ..." strings; k = 1 and 3, beam 4.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

LOAD = (
    "import time; t = time.perf_counter(); from cuemem.llm import LocalBackend; LocalBackend().load();"
    " print(time.perf_counter() - t)"
)


def load_seconds(cache: str) -> float:
    env = {**os.environ, "CUEMEM_MODEL_CACHE": cache, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", LOAD], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench-out/llm.json")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import torch

    from cuemem import Memory
    from cuemem.formats import locomo_turns, read_locomo
    from cuemem.llm import LLMClient, LocalBackend

    out: dict = {"torch_threads": torch.get_num_threads()}
    with tempfile.TemporaryDirectory() as cache:
        out["load_first_s"] = load_seconds(cache)
        out["load_cached_s"] = load_seconds(cache)
    print(json.dumps(out), flush=True)

    backend = LocalBackend()
    backend.load()
    model, tok = backend._model, backend.tokenizer
    text = " ".join(["The hotel on day two of the Lisbon trip costs one hundred and ten euros a night."] * 30)
    ids = torch.tensor([tok(text, add_special_tokens=False).input_ids[:512]])
    with torch.inference_mode():
        model(ids)  # warm up
        start = time.perf_counter()
        for _ in range(args.repeats):
            model(ids)
        out["prefill_tokens_per_s"] = ids.shape[1] * args.repeats / (time.perf_counter() - start)
        prompt = ids[:, :64]
        start = time.perf_counter()
        generated = model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=64,
            min_new_tokens=64,
            do_sample=False,
            pad_token_id=backend.end_id,
        )
        out["decode_tokens_per_s"] = (generated.shape[1] - 64) / (time.perf_counter() - start)
    print(json.dumps(out), flush=True)

    client = LLMClient(backend)  # no cache: real work every time
    ask = [{"role": "user", "content": "Which concept is about booking a hotel?"}]
    for n in (5, 50, 5000):
        options = [f"concept {i} {'hotel booking' if i % 11 == 0 else 'weather'}" for i in range(n)]
        for k in (1, 3):
            lat = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                chosen = client.choose(ask, options, k=min(k, n))
                lat.append(time.perf_counter() - start)
                assert {c.option for c in chosen} <= set(options)
            out[f"choose_{n}_k{k}_ms"] = statistics.median(lat) * 1000
        print(json.dumps(out), flush=True)

    source = resources.files("cuemem") / "data" / "demo_conversation.json"
    with resources.as_file(source) as path:
        sample = read_locomo(path)[0]
    with tempfile.TemporaryDirectory() as tmp, Memory(Path(tmp) / "m.db", engine="hybrid", llm=client) as memory:
        memory.add(locomo_turns(sample), user_id="maya")
        memory.search("warm up", user_id="maya")
        lat, cited = [], 0
        for qa in sample["qa"]:
            start = time.perf_counter()
            answer = memory.answer(qa["question"], user_id="maya", k=5)
            lat.append(time.perf_counter() - start)
            cited += bool(set(qa["evidence"]) & set(answer.cited_turn_ids))
        stats = memory.llm.stats()["query"]
    out["answer_median_s"] = statistics.median(lat)
    out["answer_max_s"] = max(lat)
    out["answer_questions"] = len(lat)
    out["answer_cites_evidence"] = cited
    out["answer_prompt_tokens_per_question"] = stats["prompt_tokens"] / len(lat)
    out["answer_completion_tokens_per_question"] = stats["completion_tokens"] / len(lat)
    print(json.dumps(out, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
