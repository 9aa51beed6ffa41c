"""JSON under a grammar on llama.cpp: milliseconds per generated token of `LlamaCppBackend.json` (model modes'
extraction calls), best of 3 rounds of 4 calls after a warm-up, 2 threads. docs/benchmarks/models.md has the figures:

    python benchmarks/grammar_decoding.py
"""

import time
from typing import Literal

from pydantic import BaseModel

from cuemem.llm import LlamaCppBackend


class Booking(BaseModel):
    hotel: str
    night: int
    price: float | None
    paid: bool
    day: Literal["Day 1", "Day 2"]


msgs = [
    "Day 2: Casa Azul, 110 euros, night 5, not paid.",
    "My favourite drink is chai.",
    "We booked the Apollo Hotel in Lisbon, 120 euros a night.",
    "I adopted a cat named Miso last week.",
]
for model in ["smollm2-135m", "qwen2.5-coder-0.5b"]:
    b = LlamaCppBackend(model=model, threads=2)
    b.json([{"role": "user", "content": "warm up"}], Booking.model_json_schema())
    best = 1e9
    for _ in range(3):
        t = time.perf_counter()
        n = 0
        for msg in msgs:
            text, usage = b.json([{"role": "user", "content": msg}], Booking.model_json_schema())
            n += usage.completion_tokens
        best = min(best, time.perf_counter() - t)
    print(f"{model}: {n} tokens in {best:.2f} s = {1000 * best / n:.1f} ms/token")
