"""Where the image build takes its inputs from: torch's CPU wheel and the stand-in's fixtures.

No image is built here (``devtools.imagebuild`` builds are exercised by the integration tests);
only the choices, which decide whether a build works on a fresh machine.
"""

from __future__ import annotations

from pathlib import Path

from devtools import imagebuild
from devtools.imagebuild import PYTORCH_CPU_INDEX, pip_config_find_links, torch_source

ROOT = Path(__file__).resolve().parents[2]

PIP_CONFIG_LIST = """\
:env:.default-timeout='180'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels /srv/more-wheels'
"""


def test_pip_config_find_links_reads_every_scope_and_splits_lists():
    assert pip_config_find_links(PIP_CONFIG_LIST) == ["/opt/wheels", "/srv/more-wheels"]
    assert pip_config_find_links("global.index-url='https://example.invalid/simple'\n") == []
    assert pip_config_find_links("") == []


def test_default_is_pytorchs_cpu_index():
    src = torch_source(env={}, pip_config_list="")
    assert src.kind == "pytorch-index"
    assert src.pip_args == ("--extra-index-url", PYTORCH_CPU_INDEX)
    assert PYTORCH_CPU_INDEX == "https://download.pytorch.org/whl/cpu"
    assert PYTORCH_CPU_INDEX in src.description


def test_pip_config_directory_is_used_only_when_it_holds_the_wheel(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    listing = f"global.find-links='{wheels}'\n"
    assert torch_source(env={}, pip_config_list=listing).kind == "pytorch-index"
    (wheels / "torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    assert torch_source(env={}, pip_config_list=listing).kind == "pytorch-index"  # other version
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    src = torch_source(env={}, pip_config_list=listing)
    assert src.kind == "pip-config" and src.pip_args == () and str(wheels) in src.description
    file_url = torch_source(env={}, pip_config_list=f"global.find-links='file://{wheels}'\n")
    assert file_url.kind == "pip-config"


def test_env_variable_wins(tmp_path):
    src = torch_source(env={"SERVEDECK_TORCH_FIND_LINKS": str(tmp_path)},
                       pip_config_list=PIP_CONFIG_LIST)
    assert src.kind == "find-links-env"
    assert src.pip_args == ("--find-links", str(tmp_path))


def test_standin_fixtures_are_in_the_repository():
    assert imagebuild.FIXTURES_DIR.resolve().is_relative_to(ROOT) or \
        "SERVEDECK_VLLM_FIXTURES" in __import__("os").environ
    for name in ("serve-4096.log", "serve-8192.log", "metrics-4096.txt", "metrics-8192.txt"):
        assert (ROOT / "tests" / "fixtures" / "vllm-0.32-cpu" / name).is_file()
