"""docs/annotation.md holds the rubric and the prompts the annotator is actually sent."""

from pathlib import Path

from metakernelbench.skill_transfer import prompts
from metakernelbench.skill_transfer.quotes import normalise
from metakernelbench.skill_transfer.rubric import CATEGORIES, FAILURE_CLASSES, FOLLOW_LEVELS, PRESCRIBED, RUBRIC_VERSION

DOC = (Path(__file__).resolve().parents[2] / "docs" / "annotation.md").read_text()


def test_rubric_version_and_counts():
    assert f"version {RUBRIC_VERSION})" in DOC.splitlines()[0]
    assert len(CATEGORIES) == 11 and len(FAILURE_CLASSES) == 6 and set(PRESCRIBED) <= set(CATEGORIES)


def test_every_definition_is_documented_with_two_examples():
    text = normalise(DOC)
    for definitions in (CATEGORIES, FOLLOW_LEVELS, FAILURE_CLASSES):
        for name, definition in definitions.items():
            assert f"`{name}`" in DOC and normalise(definition) in text, name
    sections = DOC.split("### ")[1:12]
    assert [s.split("`")[1] for s in sections] == list(CATEGORIES)
    for s in sections:
        assert s.count("- Counts: ") == 1 and s.count("- Does not count: ") == 1


def test_prompts_are_documented_verbatim():
    assert prompts.COMMON in DOC
    for layer, instruction in prompts.INSTRUCTIONS.items():
        assert instruction in DOC, layer
