import pytest

from engine.core.settings import (
    LoadSettings,
    SamplingSettings,
    SettingsError,
    SpecSettings,
    from_dict,
    parse_spec_types,
    to_dict,
    updated,
)


def test_parse_spec_types():
    assert parse_spec_types("none") == []
    assert parse_spec_types(" draft-simple , ngram-mod ") == ["draft-simple", "ngram-mod"]
    with pytest.raises(SettingsError, match="unknown speculative type 'draft'"):
        parse_spec_types("draft")  # the pre-b9131 name
    with pytest.raises(SettingsError, match="cannot be combined"):
        parse_spec_types("none,ngram-mod")


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"draft_n_max": -1}, "draft_n_max"),
        ({"draft_n_max": 65}, "draft_n_max"),
        ({"draft_n_min": 5, "draft_n_max": 3}, "draft_n_min"),
        ({"draft_p_min": 1.5}, "draft_p_min"),
        ({"ngram_size_n": 0}, "ngram_size_n"),
        ({"ngram_size_m": 0}, "ngram_size_m"),
        ({"ngram_min_hits": 0}, "ngram_min_hits"),
        ({"ngram_mod_n_min": 70}, "ngram_mod_n_min"),
    ],
)
def test_spec_validation_names_the_field(changes, field):
    with pytest.raises(SettingsError, match=field):
        updated(SpecSettings(), changes).validate()


def test_a_setting_is_labelled_by_the_knobs_its_method_reads():
    assert SpecSettings("draft-simple", draft_n_max=4).label() == "draft-simple K=4"
    assert SpecSettings("draft-mtp", draft_n_max=2, draft_p_min=0.5).label() == "draft-mtp K=2 p-min=0.5"
    assert SpecSettings("ngram-simple", draft_n_max=4, draft_p_min=0.5).label() == "ngram-simple"
    mixed = SpecSettings("ngram-simple,ngram-mod,draft-simple", draft_n_max=3, ngram_size_n=3, ngram_size_m=8)
    assert mixed.label() == "ngram-simple,ngram-mod,draft-simple K=3"
    assert mixed.label(sizes=True) == "ngram-simple,ngram-mod,draft-simple K=3 n=3,m=8 match=24,min=48,max=64"
    assert SpecSettings("ngram-nonsense").label() == "ngram-nonsense"  # typed in the Lab: named, never raised


def test_draft_types_need_a_draft():
    with pytest.raises(SettingsError, match="needs a draft model"):
        SpecSettings("draft-simple").validate(has_draft=False)
    SpecSettings("ngram-mod").validate(has_draft=False)


@pytest.mark.parametrize("kw", [{"temp": -1}, {"top_p": 0}, {"min_p": 2}, {"top_k": -3}, {"seed": -1}])
def test_sampling_validation(kw):
    with pytest.raises(SettingsError):
        SamplingSettings(**kw).validate()


def test_load_validation(tmp_path):
    with pytest.raises(SettingsError, match="target model not found"):
        LoadSettings(tmp_path / "missing.gguf").validate()
    f = tmp_path / "m.gguf"
    f.write_bytes(b"x")
    with pytest.raises(SettingsError, match="ctx"):
        LoadSettings(f, ctx=10).validate()


def test_dict_roundtrip_refuses_unknown_keys(tmp_path):
    s = LoadSettings(tmp_path / "t.gguf", tmp_path / "d.gguf", ctx=512)
    assert from_dict(LoadSettings, to_dict(s)) == s
    with pytest.raises(SettingsError, match="bogus"):
        from_dict(SpecSettings, {"bogus": 1})
    with pytest.raises(SettingsError, match="unknown setting"):
        updated(SpecSettings(), {"k": 3})
