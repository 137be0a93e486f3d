"""Run examples/async_questions.iter offline and answer its questions as a person would.

    python examples/run_async.py [--store DIR]

The agent (scripted by examples/async_questions.scenario.yaml) posts two
questions and keeps drafting; the gate waits until both are answered; the
finalizer reads the answers. The run is recorded in a DuckDB store
(default: .iterion/ under the working directory).
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import iterion_nb as it

HERE = Path(__file__).resolve().parent
ANSWERS = {
    "Should the notes be formal or casual?": "formal",
    "Which feature should come first?": "asking while working",
}


async def main(store: str) -> None:
    """Start the run, answer its two questions, print the release notes."""
    session = it.Session(store, scenario=HERE / "async_questions.scenario.yaml")
    run = await session.start(it.compile_file(HERE / "async_questions.iter"))
    print(f"run {run.id} started; the agent keeps working while it waits for answers")
    answered = 0
    while answered < len(ANSWERS):
        question = await run.next_question(timeout=10)
        if question is None:
            break
        answer = ANSWERS[question.question]
        print(f"  question {question.id}: {question.question!r} -> answering {answer!r}")
        await run.answer(question.id, answer, answered_by="quickstart")
        answered += 1
    status = await run.wait(timeout=30)
    print(f"run {run.id}: {status}")
    print(f"release notes: {run.outputs['finalizer']}")
    kinds = [e.type for e in await run.events()]
    print(f"{len(kinds)} events, {kinds.count('interaction_answered')} answers recorded")
    await session.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", default=".iterion", help="the run store (a directory)")
    asyncio.run(main(parser.parse_args().store))
