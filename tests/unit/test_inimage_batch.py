"""The bookkeeping of :func:`servedeck.host.inimage.dry_run_each` (order, repeats, caches) with a
stand-in for the throw-away container: ``_introspect`` answers from the commands it is given, as
``servedeck/vllm/introspect.py`` does in the image (``launch-dryrun-each``), and counts its runs.
The real container, with vLLM's own verdicts, is tested in tests/integration/test_inimage.py."""

from __future__ import annotations

import json

import pytest

from servedeck.errors import ServedeckError
from servedeck.host import inimage


class _Image:
    id = "sha256:" + "ab" * 32
    attrs = {"Config": {"Entrypoint": ["python3", "scripts/serve.py"]}}


@pytest.fixture
def runs(monkeypatch, tmp_path) -> list[list[list[str]]]:
    """The command lists each stand-in container judged; a command with ``--bad`` is rejected."""
    monkeypatch.setenv("SERVEDECK_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(inimage, "_MEMO", {})
    monkeypatch.setattr(inimage, "_client", lambda client_or_host: object())
    monkeypatch.setattr(inimage, "_image", lambda client, ref: _Image())
    seen: list[list[list[str]]] = []

    def introspect(client, image, args):
        assert args[0] == "launch-dryrun-each" and json.loads(args[1]) == ["python3", "scripts/serve.py"]
        commands = json.loads(args[2])
        seen.append(commands)
        return {"verdicts": [{"ok": "--bad" not in c, "stage": "parse" if "--bad" in c else "done",
                              "message": " ".join(c), "argv": c[1:]} for c in commands]}

    monkeypatch.setattr(inimage, "_introspect", introspect)
    return seen


def test_one_container_judges_each_distinct_command_in_order(runs) -> None:
    a, b, c = ["m", "--x"], ["m", "--bad"], ["m", "--y"]
    results = inimage.dry_run_each(None, "img", [a, b, a, c])
    assert runs == [[a, b, c]]  # one run, each distinct command once
    assert [r.message for r in results] == ["m --x", "m --bad", "m --x", "m --y"]
    assert [r.ok for r in results] == [True, False, True, True]
    assert [r.cached for r in results] == [False, False, True, False]
    assert len({r.seconds for r in results if not r.cached}) == 1


def test_cached_verdicts_are_not_judged_again(runs) -> None:
    a, b = ["m", "--x"], ["m", "--y"]
    inimage.dry_run(None, "img", a)
    inimage._MEMO.clear()  # a new process: the file cache answers
    results = inimage.dry_run_each(None, "img", [b, a])
    assert runs == [[a], [b]] and [r.cached for r in results] == [False, True]
    assert inimage.dry_run_each(None, "img", [a, b], image_id=_Image.id)[1].cached
    assert len(runs) == 2
    inimage.dry_run_each(None, "img", [a], use_cache=False)
    assert runs[-1] == [a]


def test_an_answer_without_a_verdict_is_an_error(runs, monkeypatch) -> None:
    monkeypatch.setattr(inimage, "_introspect", lambda client, image, args: {"verdicts": []})
    with pytest.raises(ServedeckError, match="gave no verdict"):
        inimage.dry_run_each(None, "img", [["m"]])


def test_commands_past_one_argument_string_go_to_more_containers_in_order(runs, monkeypatch) -> None:
    """Linux refuses one argument string over 128 KiB ("argument list too long"): the commands
    are split into JSON arguments of at most ARGUMENT_LIMIT bytes, and the verdicts keep their order."""
    monkeypatch.setattr(inimage, "ARGUMENT_LIMIT", 200)
    commands = [["m", f"--x{i}", "v" * 40] for i in range(12)]
    results = inimage.dry_run_each(None, "img", commands)
    assert len(runs) > 1 and [c for run in runs for c in run] == commands
    assert [r.message for r in results] == [" ".join(c) for c in commands]


@pytest.mark.parametrize("sizes, limit", [([10] * 30, 100), ([5, 500, 5], 100), ([1], 10), ([], 100)])
def test_argument_batches_stay_under_the_limit_unless_one_command_is_longer(sizes, limit) -> None:
    commands = [["x" * n] for n in sizes]
    batches = inimage.argument_batches(commands, limit)
    assert [c for b in batches for c in json.loads(b)] == commands
    for b in batches:
        assert len(b.encode()) <= limit or len(json.loads(b)) == 1


def test_a_throwaway_container_that_does_not_finish_is_an_error_and_is_removed():
    """The engine's read timeout while waiting (the docker SDK raises requests' ConnectionError
    "Read timed out"): a program that never exits, such as a server, is a clear error, not a
    traceback, and its container does not stay behind."""
    removed = []

    class Container:
        def wait(self, timeout):
            raise ConnectionError("UnixHTTPConnectionPool(host='localhost', port=None): Read timed out.")

        def remove(self, force):
            removed.append(force)

    class Containers:
        def run(self, image_id, command, **kw):
            assert kw["network_mode"] == "none" and kw["labels"] == {inimage.THROWAWAY_LABEL: "1"}
            return Container()

    class Client:
        containers = Containers()

    with pytest.raises(ServedeckError, match=f"did not finish within {inimage.RUN_TIMEOUT_S} s"):
        inimage._run(Client(), _Image(), None, ["serve"])
    assert removed == [True]
