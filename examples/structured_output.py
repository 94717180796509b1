"""Structured output: ask for a pydantic model, get a validated instance back; offline.

Run: .venv/bin/python examples/structured_output.py
"""

from __future__ import annotations

import asyncio

import pydantic

from agentrt import ReActAgent
from agentrt.model import ScriptedModel


class Invoice(pydantic.BaseModel):
    customer: str
    total_eur: float
    paid: bool


async def main() -> None:
    # The first answer is invalid (total is not a number); agentrt sends the errors back and the model fixes it.
    model = ScriptedModel(
        [
            '{"customer": "ACME", "total_eur": "a lot", "paid": false}',
            '{"customer": "ACME", "total_eur": 1250.5, "paid": false}',
        ]
    )
    agent = ReActAgent("extractor", "Extract invoice fields.", model=model)
    reply = await agent.call("Invoice from ACME, 1,250.50 EUR, not yet paid.", output=Invoice)
    invoice = reply.structured(Invoice)
    print(invoice)
    print(f"attempts: {len(model.requests)}, reason: {reply.generate_reason.value}")


if __name__ == "__main__":
    asyncio.run(main())
