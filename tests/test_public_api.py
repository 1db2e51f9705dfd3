"""The public surface: every exported name resolves, and `import art` stays light."""

import subprocess
import sys

import pytest

import art


@pytest.mark.parametrize("name", art.__all__)
def test_every_exported_name_resolves(name):
    assert getattr(art, name) is not None


def test_unknown_attribute_raises_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        art.nope  # noqa: B018


def test_dir_lists_the_public_names():
    assert set(art.__all__) <= set(dir(art))


def test_import_art_loads_no_heavy_dependency():
    code = (
        "import sys, art\n"
        "heavy = [m for m in ('litellm', 'networkx', 'jsonschema', 'httpx', 'rich', 'typer')"
        " if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_design_md_api_names_exist_on_instances():
    instance_methods = {
        "process",
        "aprocess",
        "plan",
        "aplan",
        "resume_execution",
        "aresume_execution",
        "check_for_suspended_state",
        "stream",
        "on",
        "off",
        "once",
        "get_state",
        "close",
    }
    missing = {m for m in instance_methods if not hasattr(art.ArtInstance, m)}
    assert not missing
    for name in ("__enter__", "__exit__", "__aenter__", "__aexit__"):
        assert hasattr(art.ArtInstance, name)
