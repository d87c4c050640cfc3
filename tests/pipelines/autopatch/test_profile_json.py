"""The approved profile is what act applies: its JSON round-trips, overrides take only values a decision can have,
and a profile whose modeling source has changed since approval is refused."""

from __future__ import annotations

import json

import pytest

from pipelines.autopatch import act
from pipelines.autopatch import pipeline
from pipelines.autopatch.profile import Profile
from pipelines.autopatch.profile import parse_overrides
from pipelines.outcome import PipelineError


@pytest.fixture(scope="module")
def understood(tmp_path_factory, liger_template):
    from pipelines import target

    checkout = target.fetch(tmp_path_factory.mktemp("profile") / "liger-kernel")
    return checkout, pipeline.understand_model("ministral3", checkout)


def test_json_round_trips_and_drives_the_same_changeset(understood):
    checkout, profile = understood
    data = json.loads(json.dumps(profile.to_json()))
    again = Profile.from_json(data)
    assert again.to_json() == profile.to_json()
    assert again.identity.source_sha256 and len(again.identity.source_sha256) == 64
    before = {c.path: c.text for c in act.build_changeset(checkout, profile).changes}
    after = {c.path: c.text for c in act.build_changeset(checkout, again).changes}
    assert before == after


def test_approved_profile_keeps_overrides_once_and_refuses_a_changed_source(understood):
    _, profile = understood
    approved = profile.with_overrides(parse_overrides(["rope=none"]))
    applied = pipeline.approved_profile(approved.to_json(), ["rope=none"])
    assert applied.decisions["rope"] == approved.decisions["rope"]  # applying the same override again is a no-op
    tampered = approved.to_json()
    tampered["identity"]["source_sha256"] = "0" * 64
    with pytest.raises(PipelineError, match="changed since this profile was approved"):
        pipeline.approved_profile(tampered, [])


@pytest.mark.parametrize("item", ["rope=banana", "rope=standrad", "mlp_kind=swiglu2", "rms_casting_mode=Llama"])
def test_override_values_are_closed(item):
    with pytest.raises(PipelineError) as error:
        parse_overrides([item])
    assert "bad value" in error.value.message and "rope: standard | gpt_oss | llama4 | mrope | none" in error.value.hint


def test_not_a_profile_is_refused():
    with pytest.raises(PipelineError, match="not an autopatch profile"):
        Profile.from_json({"identity": {"model_type": "x"}})


def test_cli_profile_file_is_checked_against_the_model(understood, tmp_path):
    from bot.cli.autopatch import reviewed

    _, profile = understood
    path = tmp_path / "reviewed.json"
    path.write_text(json.dumps(profile.to_json()))
    assert reviewed(path, "ministral3", ["rope=none"], lambda _: None).value("rope") == "none"
    with pytest.raises(PipelineError, match="is the profile of ministral3, not helium"):
        reviewed(path, "helium", [], lambda _: None)
    path.write_text("{not json")
    with pytest.raises(PipelineError, match="--profile"):
        reviewed(path, "ministral3", [], lambda _: None)
